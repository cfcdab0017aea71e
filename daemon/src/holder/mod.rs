//! Per-process holders: what keeps a managed process (and its output) alive through a daemon
//! crash or restart (ARCHITECTURE.md, "Who owns what"; the conmon / containerd-shim pattern).
//!
//! A holder is `yieldshelld hold`, a mode of the daemon's own binary dispatched before any
//! runtime exists ([`serve`]: plain std + nix + `poll`, one thread). For one managed process it
//! is the shell's parent and the child subreaper of its tree, owns the stdout/stderr pipes,
//! redacts, writes every byte to the process's spool *before* passing it on (the spool is the
//! source of truth, the daemon's ring a cache of it), keeps a copy of the stdin pipe, records
//! the exit status in `<process dir>/exit`, and serves the daemon over a private socket. It
//! lives outside the daemon's session (in the zygote's, `zygote`, with a process group of its
//! own; or in a session of its own where there is no zygote), so a signal to the daemon's group
//! never reaches it, and it outlives the daemon: a new daemon connects to
//! `<process dir>/holder.sock` and carries on ([`link::attach`]).
//!
//! The wire between daemon and holder is a stream of frames, `[u32 LE length][kind][payload]`
//! (length counts the kind byte and the payload). The holder's first frame on every connection is
//! [`Hello`], sent with the stdin pipe's write end (SCM_RIGHTS) while stdin is open — or, for
//! a terminal process, a duplicate of the PTY master ([`crate::spawn::pty`]).
//!
//! An idle holder from the daemon's pool (Linux) is first told to prepare ([`Kind::Prepare`]): it
//! waits in a spare directory with its socket bound and its exit file created, and forks its
//! [`launcher`], the shell's process waiting for its command; it answers [`Kind::Ready`] with the
//! launcher's socket and greets for the launcher at once. The `exec` then renames the spare
//! directory into place and writes the spec to the holder and to the launcher
//! (ARCHITECTURE.md, "Idle holders and the exec's path").

#[cfg(target_os = "linux")]
pub mod launcher;
pub mod link;
pub mod serve;
pub mod start;
#[cfg(target_os = "linux")]
pub mod zygote;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::output::Stream;
use crate::spawn::reaper::ExitHow;

/// Argument that turns `yieldshelld` into a holder (`yieldshelld hold`).
pub const HOLD_ARG: &str = "hold";
/// The descriptor a new holder finds its first daemon connection on.
pub const HOLDER_FD: RawFd = 3;
/// The holder's socket, inside the process directory.
pub const SOCKET_NAME: &str = "holder.sock";
/// The exit status a holder records, inside the process directory. An empty one (created ahead
/// by a prepared holder) says nothing yet.
pub const EXIT_FILE: &str = "exit";
/// The holder protocol's version, in every [`Hello`] (docs/ARCHITECTURE.md, "The holder
/// protocol"). Holders outlive daemon upgrades: a daemon re-adopts a holder of any version from
/// [`OLDEST_PROTOCOL`] up to its own, sending it only what that version understands, and leaves
/// one of a newer version alone (running, its output readable from disk), saying so.
/// - 1: the first release's (its `Hello` carries no version);
/// - 2: the version itself, [`Kind::Keep`] (the holder keeps a descriptor for every later daemon:
///   a sandboxed command's proxy listener) and [`Kind::Listener`], the sandbox plan in the spec;
/// - 3: the [`Hello`] gives back the process's secrets (every daemon renders a terminal's screen
///   and text, and must redact what the rendering puts back together);
/// - 4: the spec carries [`HoldSpec::spool_batch`] (the holder writes its spool in batches no
///   larger than the daemon's ring, so the spool lacks only bytes the daemon's ring still holds).
pub const PROTOCOL: u32 = 4;
/// The oldest holder protocol this daemon re-adopts.
pub const OLDEST_PROTOCOL: u32 = 1;
/// Largest frame either side accepts: a spec carries a command line and an environment of up
/// to the daemon's 16 MiB request limit each; an output frame is at most one pipe read.
const MAX_FRAME: usize = 40 * 1024 * 1024;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// daemon → new holder: what to run ([`HoldSpec`]).
    Spec = 1,
    /// holder → daemon: first frame on each connection ([`Hello`]), stdin's fd attached.
    Hello = 2,
    /// holder → daemon: the spawn failed (UTF-8 message).
    Failed = 3,
    /// holder → daemon: `[stream][bytes]`, already redacted and already in the spool.
    Output = 4,
    /// holder → daemon: `[stream]` reached EOF.
    Eof = 5,
    /// holder → daemon: the shell ended ([`ExitNote`]).
    Exit = 6,
    /// holder → daemon: `[u64 dropped][failing message]` of the spool.
    Health = 7,
    /// daemon → holder: close your copy of stdin (the daemon's `eof`).
    CloseStdin = 8,
    /// daemon → holder: stop reading output (the daemon's reader cutoff after a stop).
    CloseOutput = 9,
    /// daemon → idle holder, before any spec: the spare directory to wait in (a path).
    Prepare = 10,
    /// idle holder → daemon: prepared (its socket bound and its exit file created in the
    /// spare directory), or the spawn-style [`Kind::Failed`] when that failed.
    Ready = 11,
    /// daemon → holder (protocol 2): keep the attached descriptor, a sandboxed command's proxy
    /// listener, and hand it to every daemon that connects later, with its [`Hello`].
    Keep = 12,
    /// the command's process → daemon or holder (protocol 2), before it `exec`s: the proxy
    /// listener it made in its own network namespace is attached.
    Listener = 13,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Spec,
            2 => Kind::Hello,
            3 => Kind::Failed,
            4 => Kind::Output,
            5 => Kind::Eof,
            6 => Kind::Exit,
            7 => Kind::Health,
            8 => Kind::CloseStdin,
            9 => Kind::CloseOutput,
            10 => Kind::Prepare,
            11 => Kind::Ready,
            12 => Kind::Keep,
            13 => Kind::Listener,
            _ => return None,
        })
    }
}

/// Builds a frame's payload.
#[derive(Debug, Default)]
pub struct Encoder(Vec<u8>);

impl Encoder {
    /// A frame of `kind` (the length is filled in by [`Encoder::finish`]).
    pub fn new(kind: Kind) -> Encoder {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0, 0, 0, 0, kind as u8]);
        Encoder(v)
    }

    /// A byte.
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }

    /// A little-endian u64.
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A little-endian i64.
    pub fn i64(self, v: i64) -> Self {
        self.u64(v as u64)
    }

    /// Length-prefixed bytes.
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(&(v.len() as u64).to_le_bytes());
        self.0.extend_from_slice(v);
        self
    }

    /// Bytes to the end of the frame (no prefix).
    pub fn rest(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }

    /// The complete frame.
    pub fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.0.len() - 4).unwrap_or(u32::MAX);
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

/// Reads a frame's payload; every getter fails cleanly on a short frame.
#[derive(Debug)]
pub struct Decoder<'a>(&'a [u8]);

fn short() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "short holder frame")
}

impl<'a> Decoder<'a> {
    /// Over `payload` (the bytes after the kind).
    pub fn new(payload: &'a [u8]) -> Decoder<'a> {
        Decoder(payload)
    }

    /// A byte.
    pub fn u8(&mut self) -> io::Result<u8> {
        let (&b, rest) = self.0.split_first().ok_or_else(short)?;
        self.0 = rest;
        Ok(b)
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> io::Result<u64> {
        if self.0.len() < 8 {
            return Err(short());
        }
        let (head, rest) = self.0.split_at(8);
        self.0 = rest;
        let mut b = [0u8; 8];
        b.copy_from_slice(head);
        Ok(u64::from_le_bytes(b))
    }

    /// A little-endian i64.
    pub fn i64(&mut self) -> io::Result<i64> {
        self.u64().map(|v| v as i64)
    }

    /// Length-prefixed bytes.
    pub fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = usize::try_from(self.u64()?).map_err(|_| short())?;
        if self.0.len() < n {
            return Err(short());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

/// Splits one frame off the front of `buf`: its kind, its payload, and its total length.
/// `Ok(None)` when `buf` does not hold a whole frame yet.
pub fn split_frame(buf: &[u8]) -> io::Result<Option<(Kind, &[u8], usize)>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("holder frame of {len} bytes"),
        ));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let kind = Kind::from_byte(buf[4])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unknown holder frame"))?;
    Ok(Some((kind, &buf[5..4 + len], 4 + len)))
}

/// Which of the process's two output pipes reached EOF (or were closed).
///
/// On the wire one byte, bit 0 stdout and bit 1 stderr, in every protocol version (a [`Hello`]
/// carries it; a [`Kind::Eof`] frame's stream byte is the same bit). Other bits are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PipesAtEof {
    /// Stdout reached EOF.
    pub stdout: bool,
    /// Stderr reached EOF.
    pub stderr: bool,
}

impl PipesAtEof {
    /// Reads the wire byte.
    pub fn from_byte(b: u8) -> PipesAtEof {
        PipesAtEof {
            stdout: b & 1 != 0,
            stderr: b & 2 != 0,
        }
    }

    /// The wire byte.
    pub fn byte(self) -> u8 {
        u8::from(self.stdout) | (u8::from(self.stderr) << 1)
    }

    /// Both pipes reached EOF: the output is complete.
    pub fn both(self) -> bool {
        self.stdout && self.stderr
    }

    /// These and `more`'s.
    pub fn and(self, more: PipesAtEof) -> PipesAtEof {
        PipesAtEof {
            stdout: self.stdout || more.stdout,
            stderr: self.stderr || more.stderr,
        }
    }
}

/// Stream byte on the wire.
pub fn stream_byte(s: Stream) -> u8 {
    match s {
        Stream::Stdout => 1,
        Stream::Stderr => 2,
    }
}

/// Stream from its wire byte.
pub fn stream_of(b: u8) -> io::Result<Stream> {
    match b {
        1 => Ok(Stream::Stdout),
        2 => Ok(Stream::Stderr),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "bad stream")),
    }
}

/// What a new holder runs: everything `exec` decided.
#[derive(Debug, Clone, Default)]
pub struct HoldSpec {
    /// The process id (`YIELDSHELL_PROCESS_ID`).
    pub process_id: String,
    /// The process directory (spool, exit file, socket).
    pub dir: Vec<u8>,
    /// The command line for `sh -c`.
    pub command: Vec<u8>,
    /// Resolved working directory.
    pub cwd: Vec<u8>,
    /// The complete environment.
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// Secrets and their replacements (empty: nothing to redact).
    pub redact: Vec<(Vec<u8>, Vec<u8>)>,
    /// Spool cap in bytes (0: no spool).
    pub spool_cap: u64,
    /// Most bytes the holder keeps unwritten to the spool ([`spool_batch_for`] of the daemon's
    /// ring): every byte the daemon's ring has given up is on disk already.
    pub spool_batch: u64,
    /// Run on a new pseudo-terminal of this size instead of pipes.
    pub terminal: Option<crate::spawn::pty::TermSize>,
    /// The sandbox the command's process applies before it runs the shell (README, "Sandbox").
    pub sandbox: Option<crate::sandbox::plan::Plan>,
}

impl HoldSpec {
    /// The [`Kind::Spec`] frame. It starts with [`PROTOCOL`]: a spec only ever goes to a holder
    /// of the daemon's own binary, but one of another version is refused by name, not misread.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new(Kind::Spec)
            .u64(u64::from(PROTOCOL))
            .bytes(self.process_id.as_bytes())
            .bytes(&self.dir)
            .bytes(&self.command)
            .bytes(&self.cwd)
            .u64(self.spool_cap)
            .u64(self.spool_batch)
            .u64(self.env.len() as u64);
        for (k, v) in &self.env {
            e = e.bytes(k).bytes(v);
        }
        e = e.u64(self.redact.len() as u64);
        for (s, r) in &self.redact {
            e = e.bytes(s).bytes(r);
        }
        e = match self.terminal {
            Some(size) => e.u8(1).u64(u64::from(size.cols)).u64(u64::from(size.rows)),
            None => e.u8(0),
        };
        match &self.sandbox {
            Some(plan) => encode_plan(e.u8(1), plan).finish(),
            None => e.u8(0).finish(),
        }
    }

    /// What the shell is started from: the command, working directory, environment and marker.
    pub fn spawn_spec(&self) -> crate::spawn::SpawnSpec {
        use std::os::unix::ffi::OsStrExt;
        let os = |b: &[u8]| std::ffi::OsStr::from_bytes(b).to_os_string();
        // macOS enforces a sandbox through `sandbox-exec` (Linux's is entered in-process).
        let wrapper = match &self.sandbox {
            Some(plan) if cfg!(target_os = "macos") => vec![
                crate::sandbox::seatbelt::SANDBOX_EXEC.into(),
                "-p".into(),
                crate::sandbox::seatbelt::profile(plan).into(),
            ],
            _ => Vec::new(),
        };
        crate::spawn::SpawnSpec {
            command: self.command.clone(),
            cwd: os(&self.cwd).into(),
            env: self.env.iter().map(|(k, v)| (os(k), os(v))).collect(),
            process_id: self.process_id.clone(),
            wrapper,
        }
    }

    /// Reads a [`Kind::Spec`] payload.
    pub fn decode(payload: &[u8]) -> io::Result<HoldSpec> {
        let mut d = Decoder::new(payload);
        let version = d.u64()?;
        if version != u64::from(PROTOCOL) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a spec of holder protocol {version}; this holder speaks {PROTOCOL}"),
            ));
        }
        let process_id = String::from_utf8_lossy(d.bytes()?).into_owned();
        let dir = d.bytes()?.to_vec();
        let command = d.bytes()?.to_vec();
        let cwd = d.bytes()?.to_vec();
        let spool_cap = d.u64()?;
        let spool_batch = d.u64()?;
        let pairs = |d: &mut Decoder<'_>| -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
            let n = d.u64()?;
            let mut v = Vec::new();
            for _ in 0..n {
                v.push((d.bytes()?.to_vec(), d.bytes()?.to_vec()));
            }
            Ok(v)
        };
        let env = pairs(&mut d)?;
        let redact = pairs(&mut d)?;
        let terminal = match d.u8()? {
            0 => None,
            _ => {
                let cell = |v: u64| u16::try_from(v).map_err(|_| short());
                Some(crate::spawn::pty::TermSize {
                    cols: cell(d.u64()?)?,
                    rows: cell(d.u64()?)?,
                })
            }
        };
        let sandbox = match d.u8()? {
            0 => None,
            _ => Some(decode_plan(&mut d)?),
        };
        Ok(HoldSpec {
            terminal,
            process_id,
            dir,
            command,
            cwd,
            env,
            redact,
            spool_cap,
            spool_batch,
            sandbox,
        })
    }
}

/// The spool batch for a process whose daemon keeps a ring of `ring_bytes`: the spool's usual
/// batch ([`crate::output::spool::FLUSH_BYTES`]), but never more than the ring holds. The holder
/// writes once its unwritten bytes reach it, so a byte older than the ring's newest
/// `ring_bytes` is on disk: a read the ring cannot answer finds it in the spool.
pub fn spool_batch_for(ring_bytes: u64) -> u64 {
    (crate::output::spool::FLUSH_BYTES as u64).min(ring_bytes.max(1))
}

/// Paths on the wire: a count, then each as bytes.
fn encode_paths(mut e: Encoder, paths: &[std::path::PathBuf]) -> Encoder {
    use std::os::unix::ffi::OsStrExt;
    e = e.u64(paths.len() as u64);
    for p in paths {
        e = e.bytes(p.as_os_str().as_bytes());
    }
    e
}

fn decode_paths(d: &mut Decoder<'_>) -> io::Result<Vec<std::path::PathBuf>> {
    let n = d.u64()?;
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(path_of(d.bytes()?));
    }
    Ok(v)
}

fn path_of(b: &[u8]) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::path::PathBuf::from(std::ffi::OsStr::from_bytes(b))
}

fn encode_plan(e: Encoder, plan: &crate::sandbox::plan::Plan) -> Encoder {
    use crate::sandbox::plan::NetPlan;
    use std::os::unix::ffi::OsStrExt;
    let flags = u8::from(plan.restrict_files) | (u8::from(plan.namespaces) << 1);
    let mut e = encode_paths(e.u8(flags), &plan.writable).bytes(plan.tmp.as_os_str().as_bytes());
    e = encode_paths(e, &plan.read_only);
    e = encode_paths(e, &plan.hidden);
    e = encode_paths(e, &plan.rebound);
    match plan.network {
        NetPlan::On => e.u8(0),
        NetPlan::Off => e.u8(1),
        NetPlan::Proxy { port } => e.u8(2).u64(u64::from(port)),
    }
}

fn decode_plan(d: &mut Decoder<'_>) -> io::Result<crate::sandbox::plan::Plan> {
    use crate::sandbox::plan::{NetPlan, Plan};
    let flags = d.u8()?;
    let writable = decode_paths(d)?;
    let tmp = path_of(d.bytes()?);
    let read_only = decode_paths(d)?;
    let hidden = decode_paths(d)?;
    let rebound = decode_paths(d)?;
    let network = match d.u8()? {
        0 => NetPlan::On,
        1 => NetPlan::Off,
        2 => NetPlan::Proxy {
            port: u16::try_from(d.u64()?).map_err(|_| short())?,
        },
        _ => return Err(short()),
    };
    Ok(Plan {
        restrict_files: flags & 1 != 0,
        namespaces: flags & 2 != 0,
        writable,
        tmp,
        read_only,
        hidden,
        rebound,
        network,
    })
}

/// How the shell ended, with when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitNote {
    /// Exit code or signal.
    pub how: ExitHow,
    /// Wall-clock end (Unix ms).
    pub ended_at_ms: i64,
}

impl ExitNote {
    fn put(self, e: Encoder) -> Encoder {
        let (tag, n) = match self.how {
            ExitHow::Code(c) => (1, c),
            ExitHow::Signal(s) => (2, s),
        };
        e.u8(tag).i64(i64::from(n)).i64(self.ended_at_ms)
    }

    fn get(d: &mut Decoder<'_>) -> io::Result<Option<ExitNote>> {
        let tag = d.u8()?;
        let n = i32::try_from(d.i64()?).map_err(|_| short())?;
        let ended_at_ms = d.i64()?;
        Ok(match tag {
            1 => Some(ExitNote {
                how: ExitHow::Code(n),
                ended_at_ms,
            }),
            2 => Some(ExitNote {
                how: ExitHow::Signal(n),
                ended_at_ms,
            }),
            _ => None,
        })
    }

    /// The [`Kind::Exit`] frame. `alone`: once the holder reaped the shell it had no child
    /// left, so nothing of the tree runs any more (every orphan of the tree is the holder's
    /// child, it being the subreaper) and the daemon need not look for leftovers.
    pub fn encode(self, alone: bool) -> Vec<u8> {
        self.put(Encoder::new(Kind::Exit))
            .u8(u8::from(alone))
            .finish()
    }

    /// Reads a [`Kind::Exit`] payload: the note, and whether the holder was left alone (`false`
    /// when it does not say: a holder of an earlier version).
    pub fn decode(payload: &[u8]) -> io::Result<Option<(ExitNote, bool)>> {
        let mut d = Decoder::new(payload);
        let note = Self::get(&mut d)?;
        let alone = d.rest().first() == Some(&1);
        Ok(note.map(|n| (n, alone)))
    }

    /// The text of the exit file (`code 7 1700000000000` / `signal 9 …`).
    pub fn file_text(self) -> String {
        match self.how {
            ExitHow::Code(c) => format!("code {c} {}\n", self.ended_at_ms),
            ExitHow::Signal(s) => format!("signal {s} {}\n", self.ended_at_ms),
        }
    }

    /// Parses the exit file.
    pub fn parse_file(text: &str) -> Option<ExitNote> {
        let mut parts = text.split_ascii_whitespace();
        let kind = parts.next()?;
        let n: i32 = parts.next()?.parse().ok()?;
        let ended_at_ms = parts.next()?.parse().ok()?;
        let how = match kind {
            "code" => ExitHow::Code(n),
            "signal" => ExitHow::Signal(n),
            _ => return None,
        };
        Some(ExitNote { how, ended_at_ms })
    }
}

/// The holder's account of its process, first frame of every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The holder's pid.
    pub holder_pid: i32,
    /// The shell's pid and start time.
    pub shell_pid: i32,
    /// The shell's start time (clock ticks after boot, 0 where unknown).
    pub shell_start_time: u64,
    /// Sequence number of the next output byte: the spool holds every byte before it.
    pub next_seq: u64,
    /// How the shell ended, if it has.
    pub exit: Option<ExitNote>,
    /// Pipes that reached EOF (or were closed).
    pub eof: PipesAtEof,
    /// Spool bytes not written (disk full) or given up on.
    pub dropped: u64,
    /// Whether stdin is open (its write end comes with the frame).
    pub stdin_open: bool,
    /// The process runs on a terminal: the descriptor that comes with the frame is a duplicate
    /// of its PTY master, not a pipe.
    pub terminal: bool,
    /// The holder's protocol version ([`PROTOCOL`]; 1 for a holder whose `Hello` names none).
    pub protocol: u32,
    /// A kept proxy listener comes with the frame, after stdin's descriptor (protocol 2).
    pub listener: bool,
    /// The process's secrets and their replacements, as its spec gave them (protocol 3; empty
    /// from an earlier holder): a re-adopting daemon redacts a terminal's rendering with them.
    pub redact: Secrets,
}

/// Secrets and their replacements, in a frame: never shown by `Debug` (a frame that is logged
/// must not log them).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(pub Vec<(Vec<u8>, Vec<u8>)>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} hidden)", self.0.len())
    }
}

impl Hello {
    /// The [`Kind::Hello`] frame.
    pub fn encode(&self) -> Vec<u8> {
        let e = Encoder::new(Kind::Hello)
            .i64(i64::from(self.holder_pid))
            .i64(i64::from(self.shell_pid))
            .u64(self.shell_start_time)
            .u64(self.next_seq)
            .u8(self.eof.byte())
            .u64(self.dropped)
            .u8(u8::from(self.stdin_open));
        let e = match self.exit {
            Some(x) => x.put(e),
            None => e.u8(0).i64(0).i64(0),
        };
        // Version 2 and later append their fields here, where a version-1 reader stops.
        let mut e = e
            .u8(u8::from(self.terminal))
            .u64(u64::from(self.protocol))
            .u8(u8::from(self.listener))
            .u64(self.redact.0.len() as u64);
        for (secret, replacement) in &self.redact.0 {
            e = e.bytes(secret).bytes(replacement);
        }
        e.finish()
    }

    /// Reads a [`Kind::Hello`] payload.
    pub fn decode(payload: &[u8]) -> io::Result<Hello> {
        let mut d = Decoder::new(payload);
        let pid = |v: i64| i32::try_from(v).map_err(|_| short());
        Ok(Hello {
            holder_pid: pid(d.i64()?)?,
            shell_pid: pid(d.i64()?)?,
            shell_start_time: d.u64()?,
            next_seq: d.u64()?,
            eof: PipesAtEof::from_byte(d.u8()?),
            dropped: d.u64()?,
            stdin_open: d.u8()? != 0,
            exit: ExitNote::get(&mut d)?,
            // Absent from a holder of an earlier version: pipes.
            terminal: d.u8().is_ok_and(|b| b != 0),
            // Absent from a version-1 holder, which named no version.
            protocol: d.u64().map_or(1, |v| u32::try_from(v).unwrap_or(u32::MAX)),
            listener: d.u8().is_ok_and(|b| b != 0),
            // Absent before version 3: the daemon knows no secret of that process.
            redact: match d.u64() {
                Ok(n) => {
                    let mut pairs = Vec::new();
                    for _ in 0..n {
                        pairs.push((d.bytes()?.to_vec(), d.bytes()?.to_vec()));
                    }
                    Secrets(pairs)
                }
                Err(_) => Secrets::default(),
            },
        })
    }
}

/// `sendmsg` flags that turn a vanished peer into EPIPE rather than SIGPIPE. macOS has no
/// `MSG_NOSIGNAL`; both of its callers ignore SIGPIPE anyway (the holder sets SIG_IGN, and Rust
/// binaries start with it), so there the error value is what they get too.
#[cfg(target_os = "linux")]
const NO_SIGPIPE: nix::sys::socket::MsgFlags = nix::sys::socket::MsgFlags::MSG_NOSIGNAL;
#[cfg(not(target_os = "linux"))]
const NO_SIGPIPE: nix::sys::socket::MsgFlags = nix::sys::socket::MsgFlags::empty();

/// `recvmsg` flags: received descriptors close-on-exec at once where the platform can (Linux);
/// elsewhere (macOS) [`recv_frame_with_fd`] sets the flag right after, and the holder closes
/// any descriptor it inherited through that window (`serve::process_setup::close_stray_fds`).
#[cfg(target_os = "linux")]
const RECV_CLOEXEC: nix::sys::socket::MsgFlags = nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC;
#[cfg(not(target_os = "linux"))]
const RECV_CLOEXEC: nix::sys::socket::MsgFlags = nix::sys::socket::MsgFlags::empty();

/// Sends `frame` with `fd` attached (SCM_RIGHTS on its first bytes). Blocking.
pub fn send_with_fd(sock: &impl AsRawFd, frame: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    send_with_fds(sock, frame, fd.as_slice())
}

/// Sends `frame` with `fds` attached (SCM_RIGHTS on its first bytes). Blocking.
pub fn send_with_fds(sock: &impl AsRawFd, frame: &[u8], fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{ControlMessage, sendmsg};
    let cmsgs: Vec<ControlMessage<'_>> = if fds.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(fds)]
    };
    let mut sent = 0;
    while sent < frame.len() {
        let iov = [io::IoSlice::new(&frame[sent..])];
        let cm: &[ControlMessage<'_>] = if sent == 0 { &cmsgs } else { &[] };
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cm, NO_SIGPIPE, None) {
            Ok(n) => sent += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) => {
                // A non-blocking socket with a full buffer: wait until it drains.
                wait_fd(sock.as_raw_fd(), nix::poll::PollFlags::POLLOUT)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn wait_fd(fd: RawFd, what: nix::poll::PollFlags) -> io::Result<()> {
    use std::os::fd::BorrowedFd;
    // SAFETY: `fd` is open for the duration of this call (borrowed from the caller's socket).
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut pfd = [nix::poll::PollFd::new(borrowed, what)];
    loop {
        match nix::poll::poll(&mut pfd, nix::poll::PollTimeout::NONE) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Most descriptors one frame carries (a `Hello`: stdin's, and a kept listener).
const MAX_FDS: usize = 2;

/// Reads one whole frame from a blocking socket, with the first descriptor that came with it.
pub fn recv_frame_with_fd(sock: &impl AsRawFd) -> io::Result<(Kind, Vec<u8>, Option<OwnedFd>)> {
    let (kind, payload, fds) = recv_frame_with_fds(sock)?;
    Ok((kind, payload, fds.into_iter().next()))
}

/// Reads one whole frame from a blocking socket, with the descriptors that came with it (at
/// most [`MAX_FDS`]; more are closed).
pub fn recv_frame_with_fds(sock: &impl AsRawFd) -> io::Result<(Kind, Vec<u8>, Vec<OwnedFd>)> {
    use nix::sys::socket::{ControlMessageOwned, recvmsg};
    // The length alone first: descriptors arrive with the first byte of what carried them, and
    // a longer read could run into the next frame.
    let mut head = [0u8; 4];
    let mut got = 0;
    let mut fds = Vec::new();
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    while got < head.len() {
        let mut iov = [io::IoSliceMut::new(&mut head[got..])];
        let msg = match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), RECV_CLOEXEC) {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if msg.bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the holder closed the connection",
            ));
        }
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(received) = c {
                for f in received {
                    // SAFETY: a descriptor just received is ours alone; extra ones are closed.
                    let owned = unsafe { OwnedFd::from_raw_fd(f) };
                    #[cfg(not(target_os = "linux"))]
                    nix::fcntl::fcntl(
                        &owned,
                        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
                    )?;
                    if fds.len() < MAX_FDS {
                        fds.push(owned);
                    }
                }
            }
        }
        got += msg.bytes;
    }
    let len = u32::from_le_bytes(head) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("holder frame of {len} bytes"),
        ));
    }
    let mut body = vec![0u8; len];
    read_exact_fd(sock.as_raw_fd(), &mut body)?;
    let kind = Kind::from_byte(body[0])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unknown holder frame"))?;
    body.remove(0);
    Ok((kind, body, fds))
}

fn read_exact_fd(fd: RawFd, mut buf: &mut [u8]) -> io::Result<()> {
    use std::os::fd::BorrowedFd;
    // SAFETY: `fd` is the caller's open socket for the duration of this call.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    while !buf.is_empty() {
        match nix::unistd::read(borrowed, buf) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the holder closed the connection",
                ));
            }
            Ok(n) => buf = &mut buf[n..],
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) => wait_fd(fd, nix::poll::PollFlags::POLLIN)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(frame: &[u8]) -> (Kind, Vec<u8>) {
        let (kind, payload, len) = split_frame(frame).expect("frame").expect("whole");
        assert_eq!(len, frame.len());
        (kind, payload.to_vec())
    }

    #[test]
    fn a_spec_survives_the_wire_with_arbitrary_bytes() {
        let spec = HoldSpec {
            process_id: "proc_0123".into(),
            dir: b"/state/procs/proc_0123".to_vec(),
            command: b"printf '\\xff'; exit 7".to_vec(),
            cwd: vec![b'/', 0xff, b'x'],
            env: vec![(b"A".to_vec(), vec![0xfe, b'='])],
            redact: vec![(b"hunter2hunter2".to_vec(), b"[REDACTED:PW]".to_vec())],
            spool_cap: 64 << 20,
            spool_batch: 4096,
            terminal: None,
            sandbox: None,
        };
        let (kind, body) = payload(&spec.encode());
        assert_eq!(kind, Kind::Spec);
        let back = HoldSpec::decode(&body).expect("decode");
        assert_eq!(back.command, spec.command);
        assert_eq!(back.cwd, spec.cwd);
        assert_eq!(back.env, spec.env);
        assert_eq!(back.redact, spec.redact);
        assert_eq!(back.spool_cap, spec.spool_cap);
        assert_eq!(back.spool_batch, spec.spool_batch);
        assert_eq!(back.terminal, None);
        let tty = HoldSpec {
            terminal: Some(crate::spawn::pty::TermSize {
                cols: 132,
                rows: 43,
            }),
            ..spec
        };
        let (_, body) = payload(&tty.encode());
        let back = HoldSpec::decode(&body).expect("decode");
        assert_eq!(back.terminal, tty.terminal);
        assert_eq!(back.redact, tty.redact);
    }

    #[test]
    fn a_hello_carries_exit_eof_and_stdin_state() {
        let hello = Hello {
            holder_pid: 10,
            shell_pid: 11,
            shell_start_time: 12345,
            next_seq: 1 << 40,
            exit: Some(ExitNote {
                how: ExitHow::Signal(9),
                ended_at_ms: 1_700_000_000_000,
            }),
            eof: PipesAtEof {
                stdout: true,
                stderr: true,
            },
            dropped: 5,
            stdin_open: false,
            terminal: true,
            protocol: PROTOCOL,
            listener: true,
            redact: Secrets(vec![(
                b"hunter2hunter2".to_vec(),
                b"[REDACTED:PW]".to_vec(),
            )]),
        };
        let (kind, body) = payload(&hello.encode());
        assert_eq!(kind, Kind::Hello);
        assert_eq!(Hello::decode(&body).expect("decode"), hello);
        assert!(!format!("{hello:?}").contains("hunter2"));
        let running = Hello {
            exit: None,
            ..hello
        };
        let (_, body) = payload(&running.encode());
        assert_eq!(Hello::decode(&body).expect("decode").exit, None);
    }

    #[test]
    fn which_pipes_reached_eof_keeps_its_wire_byte() {
        // The byte every holder version sends: bit 0 stdout, bit 1 stderr.
        for (byte, stdout, stderr) in [
            (0u8, false, false),
            (1, true, false),
            (2, false, true),
            (3, true, true),
        ] {
            let eof = PipesAtEof { stdout, stderr };
            assert_eq!(eof.byte(), byte);
            assert_eq!(PipesAtEof::from_byte(byte), eof);
            assert_eq!(eof.both(), byte == 3);
            let hello = Hello {
                holder_pid: 1,
                shell_pid: 2,
                shell_start_time: 3,
                next_seq: 4,
                exit: None,
                eof,
                dropped: 0,
                stdin_open: true,
                terminal: false,
                protocol: PROTOCOL,
                listener: false,
                redact: Secrets::default(),
            };
            let frame = hello.encode();
            // Its place in the frame: after the length, kind, two pids, start time and next_seq.
            assert_eq!(frame[4 + 1 + 8 * 4], byte, "{eof:?}");
            let (_, body) = payload(&frame);
            assert_eq!(Hello::decode(&body).expect("decode").eof, eof);
        }
        // An Eof frame's stream byte adds its pipe; bits no version uses are ignored.
        let stdout = PipesAtEof::from_byte(stream_byte(Stream::Stdout));
        let stderr = PipesAtEof::from_byte(stream_byte(Stream::Stderr));
        assert!(!stdout.both() && !stderr.both());
        assert!(stdout.and(stderr).both());
        assert_eq!(PipesAtEof::from_byte(0xfc), PipesAtEof::default());
    }

    #[test]
    fn a_partial_or_oversized_frame_is_not_taken_for_a_whole_one() {
        let frame = ExitNote {
            how: ExitHow::Code(7),
            ended_at_ms: 1,
        }
        .encode(true);
        assert!(
            split_frame(&frame[..frame.len() - 1])
                .expect("ok")
                .is_none()
        );
        assert!(split_frame(&[0xff, 0xff, 0xff, 0x7f, 6]).is_err());
        assert!(Hello::decode(&[1, 2, 3]).is_err());
    }

    #[test]
    fn an_exit_frame_says_whether_the_holder_was_left_alone() {
        let note = ExitNote {
            how: ExitHow::Signal(9),
            ended_at_ms: 5,
        };
        for alone in [true, false] {
            let (_, body) = payload(&note.encode(alone));
            assert_eq!(
                ExitNote::decode(&body).expect("decode"),
                Some((note, alone))
            );
        }
        // A holder of an earlier version sends no such byte: nothing is assumed.
        let (_, body) = payload(&note.encode(true));
        assert_eq!(
            ExitNote::decode(&body[..body.len() - 1]).expect("decode"),
            Some((note, false))
        );
    }

    #[test]
    fn the_exit_file_reads_back() {
        for how in [ExitHow::Code(7), ExitHow::Signal(15)] {
            let note = ExitNote {
                how,
                ended_at_ms: 1_700_000_000_123,
            };
            assert_eq!(ExitNote::parse_file(&note.file_text()), Some(note));
        }
        assert_eq!(ExitNote::parse_file("code seven 1"), None);
    }
}
