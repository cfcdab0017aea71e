//! `yieldshell-testbin`: a helper program the end-to-end tests run as (or inside) managed
//! processes, so tests can assert on real pids, trees, signals and bytes.
//!
//! Modes:
//! - `ready-sleep SECS`: print `ready <pid> <starttime>` and sleep.
//! - `ignore-term SECS`: ignore SIGTERM, then like `ready-sleep`.
//! - `setsid SECS`: leave the session (`setsid`), then like `ready-sleep`.
//! - `bad-utf8`: print the non-UTF-8 pattern of `yieldshell_tests::bad_utf8_bytes`.
//! - `flood BYTES`: print BYTES of the `flood_byte` pattern.
//! - `fds`: print the open file descriptors, one per line.
//! - `env NAME`: print the variable's value (raw bytes) and a newline.
//! - `exit CODE`: exit with CODE at once.
//! - `trap-term FILE SECS`: append `TERM` to FILE on every SIGTERM (and keep running), then like
//!   `ready-sleep`: shows that a stop sent SIGTERM first, and that SIGKILL followed.
//! - `setpgid SECS`: leave the process group (`setpgid(0, 0)`, same session), then like
//!   `ready-sleep`.
//! - `setpgid-trap-term FILE SECS`: leave the process group like `setpgid`, append `TERM` to
//!   FILE on each SIGTERM and keep running, then like `ready-sleep`.
//! - `double-fork SECS [detach]`: daemonise the classic way (fork, `setsid`, fork; the middle
//!   process exits, the original waits for it and exits 0). The grandchild prints its `ready`
//!   line; with `detach` it then points its stdio at `/dev/null`, as daemons do.
//! - `fork-loop N MS`: ignore SIGTERM, then fork N children, one every MS milliseconds; each
//!   prints `ready` and sleeps (ignoring SIGTERM too); the parent then sleeps. A bounded fork
//!   loop that goes on forking through a stop's grace period, until SIGKILL.
//! - `stop-self`: print `ready`, then stop itself with SIGSTOP; sleep after SIGCONT.
//! - `tick MS`: print `tick <n>` every MS milliseconds, for ever.
//! - `setsid-hold GATE`: leave the session, print `ready`, wait while the file GATE exists, print
//!   `late`, then sleep (a grandchild holding the output pipes after its shell exited).
//! - `hex-echo NAME ARGS…`: print `arg <hex>` per argument, `cwd <hex>`, and `env <hex>` of the
//!   variable NAME, so non-UTF-8 bytes can be compared exactly.
//! - `tcp-connect HOST PORT`: connect over TCP; print `connected`, or `refused: <error>` and exit
//!   1 (the sandbox's network tests: no curl or python needed).
//! - `udp-send HOST PORT [PAYLOAD]`: send one datagram (`ping` by default); print `sent`, or
//!   `refused: <error>` and exit 1.
//! - `unix-read PATH`: connect to the Unix socket PATH and print how many bytes came before it
//!   closed (`read N`, within a second of quiet), or `refused: <error>` and exit 1.
//! - `proxy-get URL`: a plain-HTTP GET through `$HTTP_PROXY`; print the response's status line
//!   and body, or `refused: <error>` and exit 1.
//! - `undumpable-daemon SECS`: daemonise like `double-fork SECS detach`, and the grandchild also
//!   makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, as `ssh-agent` does) before its
//!   `ready` line: its `/proc/<pid>` then belongs to root, so an unprivileged daemon cannot read
//!   its environment (nor its marker).
//! - `fork-chain LOCK MS UNTIL`: create the file LOCK and hold an exclusive `flock` on it, leave
//!   the session, print `ready`, then: fork, and the parent exits at once; the child waits MS
//!   milliseconds (0: none) and does the same. One process of the chain is alive at a time, each
//!   with a new pid, which a scan of `/proc` mostly misses; but every one holds the lock (it is
//!   inherited across `fork`), so the lock is free exactly when the whole chain is gone.
//!   Ignores SIGTERM. UNTIL (see below) ends it.
//! - `setsid-bomb TAG MS NPROC UNTIL`: set `ulimit -u NPROC` (RLIMIT_NPROC) and ignore SIGTERM;
//!   then every process leaves its session and forks, again and again (every MS milliseconds,
//!   retrying when the fork is refused), and each child does the same: a fork bomb bounded by
//!   the limit, which does not bind root, so it refuses to run as root.
//!
//!   UNTIL is an absolute deadline (milliseconds since the Unix epoch, at most
//!   [`MAX_FORK_LIFETIME`] away; required): every process of the chain or bomb inherits it and
//!   exits once it has passed, so one that a failed test leaks dies on its own within
//!   milliseconds of it instead of forking for hours.
//! - `proxy-connect HOST:PORT`: a `CONNECT` through `$HTTPS_PROXY`; print the status line, then,
//!   when the tunnel is open, what the far end sends first.

use std::io::Write;
use std::time::Duration;

fn start_time() -> String {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s[s.rfind(')')? + 1..].to_string();
            rest.split_whitespace().nth(19).map(str::to_string)
        })
        .unwrap_or_else(|| "0".into())
}

fn ready_sleep(secs: u64) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {} {}", std::process::id(), start_time());
    let _ = out.flush();
    drop(out);
    std::thread::sleep(Duration::from_secs(secs));
}

/// Raw fd that the SIGTERM handler of `trap-term` appends to.
static TRAP_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// From now on, each SIGTERM appends `TERM` to `path` instead of ending the process.
fn note_sigterm_in(path: &str) {
    use std::os::fd::IntoRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("trap file");
    TRAP_FD.store(file.into_raw_fd(), std::sync::atomic::Ordering::Relaxed);
    // SAFETY: the handler only calls write(2).
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
    }
}

extern "C" fn on_term(_: libc::c_int) {
    let fd = TRAP_FD.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: write(2) is async-signal-safe; the buffer is a static string.
    unsafe {
        libc::write(fd, b"TERM\n".as_ptr().cast(), 5);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Forks; panics (the helper is single-threaded, so fork is safe here) only if fork fails.
fn fork() -> nix::unistd::ForkResult {
    // SAFETY: the testbin is single-threaded when it forks.
    unsafe { nix::unistd::fork() }.expect("fork")
}

/// Runs `daemon` in a grandchild that left this session (fork, `setsid`, fork: the middle
/// process exits at once, so the grandchild is an orphan, as a daemon makes itself); this
/// process waits for the middle one and returns.
fn in_a_daemon(daemon: impl FnOnce()) {
    match fork() {
        nix::unistd::ForkResult::Parent { child } => {
            let _ = nix::sys::wait::waitpid(child, None);
        }
        nix::unistd::ForkResult::Child => {
            let _ = nix::unistd::setsid();
            if let nix::unistd::ForkResult::Child = fork() {
                daemon();
            }
        }
    }
}

/// Points stdio at `/dev/null`, as daemons do (and so a test's pipes close).
fn to_dev_null() {
    use std::os::fd::AsRawFd;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    for fd in 0..3 {
        // SAFETY: dup2 onto the standard descriptors of this process.
        unsafe {
            libc::dup2(null.as_raw_fd(), fd);
        }
    }
}

/// Prints why the network refused, and exits 1.
fn refused(e: std::io::Error) -> ! {
    println!("refused: {e}");
    std::process::exit(1);
}

/// Sends `request` to the proxy that `$var` names (`http://HOST:PORT`) and returns what comes
/// back within a second of quiet (all of it, for a response that ends the connection).
fn through_proxy(var: &str, request: &[u8]) -> std::io::Result<String> {
    use std::io::Read;
    let proxy =
        std::env::var(var).map_err(|_| std::io::Error::other(format!("{var} is not set")))?;
    let addr = proxy.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(addr)?;
    s.write_all(request)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

fn arg_u64(args: &[String], i: usize, default: u64) -> u64 {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The longest a forking mode (`fork-chain`, `setsid-bomb`) may be told to live.
const MAX_FORK_LIFETIME: Duration = Duration::from_secs(300);

/// Milliseconds since the Unix epoch, now.
fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The forking modes' deadline: argument `i`, an absolute time in milliseconds since the Unix
/// epoch, no further than [`MAX_FORK_LIFETIME`] away. Exits 2 when it is missing or too far: a
/// fork loop without an end is never started.
fn fork_deadline(args: &[String], i: usize) -> u64 {
    let now = now_unix_ms();
    match args.get(i).and_then(|s| s.parse::<u64>().ok()) {
        Some(until) if until <= now + MAX_FORK_LIFETIME.as_millis() as u64 => until,
        _ => {
            eprintln!(
                "yieldshell-testbin: a forking mode needs its deadline (UNTIL, ms since the epoch, at most {MAX_FORK_LIFETIME:?} away)"
            );
            std::process::exit(2);
        }
    }
}

/// Exits once `until` ([`fork_deadline`]) has passed. Every process of a chain or bomb calls
/// this before each fork, so one leaked by a failed test ends on its own.
fn exit_if_past(until: u64) {
    if now_unix_ms() >= until {
        std::process::exit(0);
    }
}

fn main() {
    // Lossy: `hex-echo` takes non-UTF-8 arguments (and reads them raw itself).
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    match mode {
        "ready-sleep" => ready_sleep(arg_u64(&args, 2, 60)),
        "ignore-term" => {
            // SAFETY: installing SIG_IGN has no preconditions.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
            }
            ready_sleep(arg_u64(&args, 2, 60));
        }
        "setsid" => {
            let _ = nix::unistd::setsid();
            ready_sleep(arg_u64(&args, 2, 60));
        }
        "bad-utf8" => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&yieldshell_tests::bad_utf8_bytes());
            let _ = out.flush();
        }
        "flood" => {
            let total = arg_u64(&args, 2, 1 << 20);
            let mut out = std::io::stdout().lock();
            // The pattern repeats every 26 bytes; a buffer of whole periods can be written again
            // and again (fast even in a debug build).
            let buf: Vec<u8> = (0..26 * 2520).map(yieldshell_tests::flood_byte).collect();
            let mut i = 0u64;
            while i < total {
                let n = (total - i).min(buf.len() as u64) as usize;
                if out.write_all(&buf[..n]).is_err() {
                    return;
                }
                i += n as u64;
            }
            let _ = out.flush();
        }
        "fds" => {
            let mut fds: Vec<u32> = std::fs::read_dir("/proc/self/fd")
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|e| e.file_name().to_str()?.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            fds.sort_unstable();
            for fd in fds {
                println!("{fd}");
            }
        }
        "env" => {
            use std::os::unix::ffi::OsStrExt;
            let name = args.get(2).map(String::as_str).unwrap_or("");
            let mut out = std::io::stdout().lock();
            if let Some(v) = std::env::var_os(name) {
                let _ = out.write_all(v.as_bytes());
            }
            let _ = out.write_all(b"\n");
        }
        "exit" => std::process::exit(arg_u64(&args, 2, 0) as i32),
        "trap-term" => {
            note_sigterm_in(args.get(2).map(String::as_str).unwrap_or("trap-term.log"));
            ready_sleep(arg_u64(&args, 3, 60));
        }
        "setpgid" => {
            let _ =
                nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
            ready_sleep(arg_u64(&args, 2, 60));
        }
        "setpgid-trap-term" => {
            // A process in a group of its own (still in the shell's session) that notes each
            // SIGTERM in a file and keeps running.
            let _ =
                nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
            note_sigterm_in(args.get(2).map(String::as_str).unwrap_or("trap-term.log"));
            ready_sleep(arg_u64(&args, 3, 60));
        }
        "double-fork" => {
            let secs = arg_u64(&args, 2, 60);
            let detach = args.get(3).is_some_and(|a| a == "detach");
            in_a_daemon(|| {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "ready {} {}", std::process::id(), start_time());
                let _ = out.flush();
                drop(out);
                if detach {
                    to_dev_null();
                }
                std::thread::sleep(Duration::from_secs(secs));
            });
        }
        "fork-loop" => {
            let n = arg_u64(&args, 2, 10);
            let ms = arg_u64(&args, 3, 5);
            // SAFETY: installing SIG_IGN has no preconditions; children inherit it.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
            }
            for _ in 0..n {
                if let nix::unistd::ForkResult::Child = fork() {
                    ready_sleep(600);
                    return;
                }
                std::thread::sleep(Duration::from_millis(ms));
            }
            std::thread::sleep(Duration::from_secs(600));
        }
        "stop-self" => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "ready {} {}", std::process::id(), start_time());
            let _ = out.flush();
            drop(out);
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
            std::thread::sleep(Duration::from_secs(600));
        }
        "tick" => {
            let ms = arg_u64(&args, 2, 10);
            let mut out = std::io::stdout().lock();
            for n in 0u64.. {
                if writeln!(out, "tick {n}")
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    return;
                }
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
        "setsid-hold" => {
            let _ = nix::unistd::setsid();
            let gate = std::path::PathBuf::from(args.get(2).map(String::as_str).unwrap_or("gate"));
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "ready {} {}", std::process::id(), start_time());
            let _ = out.flush();
            while gate.exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = writeln!(out, "late");
            let _ = out.flush();
            drop(out);
            std::thread::sleep(Duration::from_secs(600));
        }
        "hex-echo" => {
            use std::os::unix::ffi::OsStrExt;
            let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
            let mut out = std::io::stdout().lock();
            for a in raw.iter().skip(3) {
                let _ = writeln!(out, "arg {}", hex(a.as_bytes()));
            }
            let cwd = std::env::current_dir().unwrap_or_default();
            let _ = writeln!(out, "cwd {}", hex(cwd.as_os_str().as_bytes()));
            let name = raw.get(2).cloned().unwrap_or_default();
            let value = std::env::var_os(&name).unwrap_or_default();
            let _ = writeln!(out, "env {}", hex(value.as_bytes()));
        }
        "tcp-connect" => {
            let addr = format!("{}:{}", args[2], args[3]);
            match std::net::TcpStream::connect(&addr) {
                Ok(_) => println!("connected"),
                Err(e) => refused(e),
            }
        }
        "udp-send" => {
            let to = format!("{}:{}", args[2], args[3]);
            let bind = if args[2].contains(':') {
                "[::]:0"
            } else {
                "0.0.0.0:0"
            };
            let payload = args.get(4).map_or("ping", String::as_str);
            match std::net::UdpSocket::bind(bind).and_then(|s| s.send_to(payload.as_bytes(), &to)) {
                Ok(_) => println!("sent"),
                Err(e) => refused(e),
            }
        }
        "unix-read" => {
            use std::io::Read;
            match std::os::unix::net::UnixStream::connect(&args[2]) {
                Ok(mut s) => {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                    let mut total = 0;
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = s.read(&mut chunk) {
                        if n == 0 {
                            break;
                        }
                        total += n;
                    }
                    println!("read {total}");
                }
                Err(e) => refused(e),
            }
        }
        "proxy-get" => {
            let url = &args[2];
            let host = url
                .strip_prefix("http://")
                .and_then(|r| r.split('/').next())
                .unwrap_or_default()
                .to_string();
            let request =
                format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
            match through_proxy("HTTP_PROXY", request.as_bytes()) {
                Ok(answer) => print!("{answer}"),
                Err(e) => refused(e),
            }
        }
        "proxy-connect" => {
            let target = &args[2];
            let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
            match through_proxy("HTTPS_PROXY", request.as_bytes()) {
                Ok(answer) => print!("{answer}"),
                Err(e) => refused(e),
            }
        }
        "undumpable-daemon" => {
            let secs = arg_u64(&args, 2, 60);
            in_a_daemon(|| {
                // Linux's `prctl`; elsewhere the process stays dumpable (the tests that need it
                // are Linux-only).
                #[cfg(target_os = "linux")]
                let _ = nix::sys::prctl::set_dumpable(false);
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "ready {} {}", std::process::id(), start_time());
                let _ = out.flush();
                drop(out);
                to_dev_null();
                std::thread::sleep(Duration::from_secs(secs));
            });
        }
        "fork-chain" => {
            let ms = arg_u64(&args, 3, 0);
            let until = fork_deadline(&args, 4);
            let lock = std::fs::File::create(args.get(2).map_or("", String::as_str))
                .expect("create the chain's lock file");
            lock.lock().expect("lock the chain's lock file");
            // SAFETY: installing SIG_IGN has no preconditions; children inherit it.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
            }
            let _ = nix::unistd::setsid();
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "ready {} {}", std::process::id(), start_time());
            let _ = out.flush();
            drop(out);
            to_dev_null();
            loop {
                exit_if_past(until);
                // SAFETY: the testbin is single-threaded when it forks.
                match unsafe { nix::unistd::fork() } {
                    Ok(nix::unistd::ForkResult::Parent { .. }) => std::process::exit(0),
                    Ok(nix::unistd::ForkResult::Child) => {
                        if ms > 0 {
                            std::thread::sleep(Duration::from_millis(ms));
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }
        "setsid-bomb" => {
            if nix::unistd::geteuid().is_root() {
                eprintln!(
                    "yieldshell-testbin: setsid-bomb refuses to run as root (ulimit -u does not bind root)"
                );
                std::process::exit(2);
            }
            let ms = arg_u64(&args, 3, 1);
            let nproc = arg_u64(&args, 4, 300);
            let until = fork_deadline(&args, 5);
            // nix names RLIMIT_NPROC on Linux only; the tests that run the bomb are Linux-only,
            // and without the limit it must not run at all.
            #[cfg(target_os = "linux")]
            let limited = nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_NPROC,
                nproc,
                nproc,
            )
            .map_err(|e| e.to_string());
            #[cfg(not(target_os = "linux"))]
            let limited: Result<(), String> =
                Err(format!("RLIMIT_NPROC={nproc} is set on Linux only"));
            if let Err(e) = limited {
                eprintln!("yieldshell-testbin: setrlimit: {e}");
                std::process::exit(2);
            }
            // SAFETY: installing SIG_IGN has no preconditions; children inherit it.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
            }
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "ready {} {}", std::process::id(), start_time());
            let _ = out.flush();
            drop(out);
            to_dev_null();
            loop {
                exit_if_past(until);
                let _ = nix::unistd::setsid();
                // SAFETY: the testbin is single-threaded when it forks. A child goes round the
                // same loop: it leaves the session and forks in turn.
                if let Err(_) | Ok(nix::unistd::ForkResult::Parent { .. }) =
                    unsafe { nix::unistd::fork() }
                {
                    std::thread::sleep(Duration::from_millis(ms.max(1)));
                }
            }
        }
        other => {
            eprintln!("yieldshell-testbin: unknown mode {other:?}");
            std::process::exit(2);
        }
    }
}
