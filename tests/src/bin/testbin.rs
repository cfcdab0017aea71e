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

fn arg_u64(args: &[String], i: usize, default: u64) -> u64 {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
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
            let mut buf = vec![0u8; 64 * 1024];
            let mut i = 0u64;
            while i < total {
                let n = (total - i).min(buf.len() as u64) as usize;
                for (k, b) in buf[..n].iter_mut().enumerate() {
                    *b = yieldshell_tests::flood_byte(i + k as u64);
                }
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
        other => {
            eprintln!("yieldshell-testbin: unknown mode {other:?}");
            std::process::exit(2);
        }
    }
}
