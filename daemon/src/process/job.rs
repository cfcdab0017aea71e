//! Windows process backend: each managed command runs as `cmd.exe /d /s /c COMMAND` (or
//! PowerShell, when the request's `shell` asks for it) inside a Job Object of its own.
//!
//! - **Containment.** The shell is created suspended, assigned to a new job with
//!   `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`, and only then resumed: nothing it starts can run
//!   outside the job. Stops, timeouts and the shutdown sweep terminate the job (see
//!   `tree_windows`); the daemon holds the job's only handle, so if it dies Windows kills the
//!   tree. Processes therefore never outlive the daemon here (no holders on Windows).
//! - **Pipes.** stdin/stdout/stderr are named pipes (`\\.\pipe\yieldshell-io-<uuid>-<n>`, one
//!   instance, remote clients rejected) whose server ends the daemon reads and writes with
//!   overlapped I/O. tokio's own child pipes are anonymous pipes read on the blocking pool, one
//!   parked thread per open pipe, which the daemon's small blocking pool cannot afford.
//! - **Output.** The readers redact each read (per stream, across read boundaries) and append it
//!   to the process's [`OutputLog`], which numbers and spools it as on Unix.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::net::windows::named_pipe::{NamedPipeServer, PipeMode, ServerOptions};
use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, TH32CS_SNAPTHREAD, THREADENTRY32, Thread32First, Thread32Next,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JobObjectBasicAccountingInformation, JobObjectBasicProcessIdList,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NEW_PROCESS_GROUP, CREATE_NO_WINDOW, CREATE_SUSPENDED, OpenThread, ResumeThread,
    THREAD_SUSPEND_RESUME,
};

use super::tree::MARKER_VAR;
use crate::output::{OutputLog, Stream};
use crate::policy::redact::{RedactStream, Redactor};

/// The exit code of every process of a terminated job (what `stop` leaves in `exit_code`).
pub const TERMINATED_EXIT_CODE: u32 = 1;

/// Most pids one [`Job::pids`] call reports (a tree larger than this is still terminated
/// whole; only the count of descendants is capped).
const MAX_LISTED_PIDS: usize = 1024;

/// A Job Object, closed (and its remaining processes killed) when dropped.
#[derive(Debug)]
pub struct Job {
    handle: HANDLE,
}

// SAFETY: a job handle is a kernel handle, usable from any thread; every call on it below is
// thread-safe (the kernel serialises job operations).
unsafe impl Send for Job {}
// SAFETY: as above; `&Job` only makes kernel calls on the handle.
unsafe impl Sync for Job {}

impl Job {
    /// A new, unnamed job whose processes are killed when its last handle closes.
    pub fn new() -> io::Result<Job> {
        // SAFETY: no security attributes, no name: creates a fresh job handle or returns null.
        let handle = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if handle.is_null() {
            return Err(io::Error::last_os_error());
        }
        let job = Job { handle };
        // SAFETY: an all-zero limit structure is valid (no limits); we set one flag.
        let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        // SAFETY: a valid job handle and a correctly sized structure of the class named.
        let ok = unsafe {
            SetInformationJobObject(
                job.handle,
                JobObjectExtendedLimitInformation,
                (&raw const limits).cast(),
                size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(job)
    }

    /// Puts a process (by handle) in the job.
    fn assign(&self, process: HANDLE) -> io::Result<()> {
        // SAFETY: both handles are valid for the duration of the call.
        if unsafe { AssignProcessToJobObject(self.handle, process) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Terminates every process in the job.
    pub fn terminate(&self) {
        // SAFETY: a valid job handle; failure (nothing left) is harmless.
        unsafe {
            TerminateJobObject(self.handle, TERMINATED_EXIT_CODE);
        }
    }

    /// How many processes of the job are alive.
    pub fn active_processes(&self) -> u32 {
        // SAFETY: an all-zero accounting structure is a valid output buffer.
        let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: a valid job handle and a correctly sized buffer for the class named.
        let ok = unsafe {
            QueryInformationJobObject(
                self.handle,
                JobObjectBasicAccountingInformation,
                (&raw mut info).cast(),
                size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 { 0 } else { info.ActiveProcesses }
    }

    /// The pids of the job's live processes (at most [`MAX_LISTED_PIDS`]).
    pub fn pids(&self) -> Vec<u32> {
        /// `JOBOBJECT_BASIC_PROCESS_ID_LIST` with room for many ids.
        #[repr(C)]
        struct PidList {
            assigned: u32,
            listed: u32,
            ids: [usize; MAX_LISTED_PIDS],
        }
        let mut list = PidList {
            assigned: 0,
            listed: 0,
            ids: [0; MAX_LISTED_PIDS],
        };
        // SAFETY: a valid job handle and a buffer laid out as the class's structure, of the
        // size given; a list longer than the buffer fails with ERROR_MORE_DATA, treated below as
        // the partial list it fills.
        unsafe {
            QueryInformationJobObject(
                self.handle,
                JobObjectBasicProcessIdList,
                (&raw mut list).cast(),
                size_of::<PidList>() as u32,
                std::ptr::null_mut(),
            );
        }
        let n = (list.listed as usize).min(MAX_LISTED_PIDS);
        list.ids[..n]
            .iter()
            .map(|p| u32::try_from(*p).unwrap_or(u32::MAX))
            .collect()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: we own the handle and close it once.
        unsafe {
            CloseHandle(self.handle);
        }
    }
}

/// Resumes every thread of the suspended process `pid` (one, its main thread: it was created
/// suspended and has run nothing).
fn resume_process(pid: u32) -> io::Result<()> {
    // SAFETY: a system-wide thread snapshot; the handle is closed below.
    let snapshot = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
    if snapshot == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    let mut entry = THREADENTRY32 {
        dwSize: size_of::<THREADENTRY32>() as u32,
        ..Default::default()
    };
    let mut resumed = 0;
    // SAFETY: a valid snapshot and an entry whose dwSize is set, as the API requires.
    let mut more = unsafe { Thread32First(snapshot, &mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: opens a thread by id for resuming; the handle is closed right after.
            let thread = unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) };
            if !thread.is_null() {
                // SAFETY: a valid thread handle, closed once.
                unsafe {
                    ResumeThread(thread);
                    CloseHandle(thread);
                }
                resumed += 1;
            }
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snapshot, &mut entry) } != 0;
    }
    // SAFETY: the snapshot handle is ours, closed once.
    unsafe {
        CloseHandle(snapshot);
    }
    if resumed == 0 {
        return Err(io::Error::other(format!(
            "found no thread of the new process {pid} to resume"
        )));
    }
    Ok(())
}

/// What to run.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The command line, as the client sent it.
    pub command: Vec<u8>,
    /// Run it with PowerShell instead of `cmd.exe`.
    pub powershell: bool,
    /// Resolved working directory.
    pub cwd: PathBuf,
    /// The complete environment (session environment plus overlay).
    pub env: Vec<(OsString, OsString)>,
    /// Becomes `YIELDSHELL_PROCESS_ID`.
    pub process_id: String,
}

/// A started shell in its job, with the daemon's ends of its pipes.
#[derive(Debug)]
pub struct Started {
    /// The shell (`cmd.exe`), for its exit status.
    pub child: tokio::process::Child,
    /// Its pid.
    pub pid: u32,
    /// The job holding it and everything it starts.
    pub job: Arc<Job>,
    /// Write end of its stdin.
    pub stdin: NamedPipeServer,
    /// Read end of its stdout.
    pub stdout: NamedPipeServer,
    /// Read end of its stderr.
    pub stderr: NamedPipeServer,
}

/// One pipe: the daemon's overlapped server end, and the child's end as a plain handle.
fn pipe(name: &str, child_reads: bool) -> io::Result<(NamedPipeServer, std::fs::File)> {
    let server = ServerOptions::new()
        .first_pipe_instance(true)
        .reject_remote_clients(true)
        .max_instances(1)
        .pipe_mode(PipeMode::Byte)
        .access_inbound(!child_reads)
        .access_outbound(child_reads)
        .create(name)?;
    let client = std::fs::OpenOptions::new()
        .read(child_reads)
        .write(!child_reads)
        .open(name)?;
    Ok((server, client))
}

/// Starts the command suspended, puts it in a new job, then lets it run.
pub fn spawn(spec: &JobSpec) -> io::Result<Started> {
    let command = String::from_utf8(spec.command.clone()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the command is not valid UTF-8 (Windows command lines are Unicode)",
        )
    })?;
    let base = format!(r"\\.\pipe\yieldshell-io-{}", uuid::Uuid::new_v4().simple());
    let (stdin, stdin_child) = pipe(&format!("{base}-0"), true)?;
    let (stdout, stdout_child) = pipe(&format!("{base}-1"), false)?;
    let (stderr, stderr_child) = pipe(&format!("{base}-2"), false)?;
    let mut cmd = if spec.powershell {
        let mut cmd = tokio::process::Command::new("powershell.exe");
        cmd.args(["-NoLogo", "-NoProfile", "-NonInteractive", "-Command"])
            .arg(&command);
        cmd
    } else {
        let comspec = spec
            .env
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("ComSpec"))
            .map_or_else(|| OsString::from("cmd.exe"), |(_, v)| v.clone());
        let mut cmd = tokio::process::Command::new(comspec);
        // Verbatim: cmd.exe does its own parsing, which the C runtime's quoting rules would
        // break. `/s` strips exactly the outer quotes, whatever the command holds; `/d` skips
        // AutoRun commands from the registry.
        cmd.raw_arg(format!("/d /s /c \"{command}\""));
        cmd
    };
    cmd.current_dir(&spec.cwd)
        .env_clear()
        .envs(
            spec.env
                .iter()
                .filter(|(k, _)| !k.eq_ignore_ascii_case(MARKER_VAR))
                .map(|(k, v)| (k, v)),
        )
        .env(MARKER_VAR, &spec.process_id)
        .stdin(stdin_child)
        .stdout(stdout_child)
        .stderr(stderr_child)
        // A console of its own without a window (the daemon has none to share), its own
        // process group, and not running until it is in the job.
        .creation_flags(CREATE_SUSPENDED | CREATE_NO_WINDOW | CREATE_NEW_PROCESS_GROUP)
        .kill_on_drop(false);
    let job = Arc::new(Job::new()?);
    let child = cmd.spawn()?;
    // The child's pipe ends are in the child now; ours close with `cmd`, so EOF comes when the
    // tree closes its copies.
    drop(cmd);
    let pid = child.id().unwrap_or(0);
    let placed = match child.raw_handle() {
        Some(h) => job.assign(h as HANDLE),
        None => Err(io::Error::other("the new process has no handle")),
    }
    .and_then(|()| resume_process(pid));
    if let Err(e) = placed {
        // Never leave a suspended shell behind.
        job.terminate();
        if let Some(h) = child.raw_handle() {
            // SAFETY: a valid process handle owned by `child`; terminating is idempotent.
            unsafe {
                windows_sys::Win32::System::Threading::TerminateProcess(h as HANDLE, 1);
            }
        }
        return Err(e);
    }
    Ok(Started {
        child,
        pid,
        job,
        stdin,
        stdout,
        stderr,
    })
}

/// Reads one output pipe to EOF into `log`, redacting each read (what redaction holds back at a
/// read boundary is released with the next read or at EOF).
pub async fn read_into(
    mut pipe: NamedPipeServer,
    stream: Stream,
    log: Arc<OutputLog>,
    redactor: Option<Arc<Redactor>>,
) {
    // The child opened its end before it started; this only confirms the connection.
    if let Err(e) = pipe.connect().await {
        tracing::debug!("{stream:?} pipe: {e}");
    }
    let mut redact = redactor.map(RedactStream::new);
    let mut buf = vec![0u8; 64 * 1024];
    let mut redacted = Vec::new();
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            // The writer side closing is EOF on a named pipe (ERROR_BROKEN_PIPE).
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => break,
            Err(e) => {
                tracing::warn!("reading a process's {stream:?} failed: {e}");
                break;
            }
        };
        match redact.as_mut() {
            Some(r) => {
                redacted.clear();
                r.push(&buf[..n], &mut redacted);
                if !redacted.is_empty() {
                    log.append(stream, &redacted);
                }
            }
            None => log.append(stream, &buf[..n]),
        }
    }
    if let Some(mut r) = redact {
        redacted.clear();
        r.finish(&mut redacted);
        if !redacted.is_empty() {
            log.append(stream, &redacted);
        }
    }
}
