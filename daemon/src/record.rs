//! Persisted process records: what survives a daemon restart.
//!
//! Each process has a directory `<state>/procs/<process_id>/` holding `record.json` and its output
//! spool. The directory is created before the command is spawned: its existence alone tells a
//! restarted daemon that a process with that id may be running (its marker finds the tree). The
//! record follows (`starting`), then the pid and start time once it has run a moment, then its
//! end.
//!
//! One writer for persisted state (STYLE §7.2 rule 4): records are written by a single thread
//! that takes jobs in order from a queue, so `exec` never waits for the disk and the writes of
//! one process can never overtake each other. Writes are atomic (temp file + rename): a crash
//! leaves the old or the new record, never a torn one. A record that does not parse is moved
//! aside (`record.json.corrupt-<ts>`).
//!
//! Durability: records are not fsync'd (that would cost milliseconds per `exec`); they survive a
//! daemon crash (the page cache is the kernel's) but possibly not a power loss, after which a
//! record may be missing or corrupt and is handled as above.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::status::{EndedBy, LostReason, RecordStatus};

/// Current record format.
pub const RECORD_FORMAT: u32 = 1;

const RECORD_FILE: &str = "record.json";

/// Bytes that are shown as text when they are UTF-8 and as hex otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RecordBytes {
    /// Valid UTF-8.
    Text(String),
    /// Anything else, hex-encoded.
    Hex {
        /// Lowercase hex digits.
        hex: String,
    },
}

impl RecordBytes {
    /// Wraps raw bytes.
    pub fn from_bytes(b: &[u8]) -> RecordBytes {
        match std::str::from_utf8(b) {
            Ok(s) => RecordBytes::Text(s.to_string()),
            Err(_) => RecordBytes::Hex {
                hex: b.iter().map(|x| format!("{x:02x}")).collect(),
            },
        }
    }

    /// The raw bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            RecordBytes::Text(s) => s.as_bytes().to_vec(),
            RecordBytes::Hex { hex } => (0..hex.len() / 2)
                .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
                .collect(),
        }
    }
}

/// What is persisted about one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// [`RECORD_FORMAT`] when written.
    pub format: u32,
    /// The process id (also the directory name).
    pub process_id: String,
    /// Session that started it.
    pub session_id: String,
    /// Optional human name.
    pub name: String,
    /// Command line.
    pub command: RecordBytes,
    /// Resolved working directory.
    pub cwd: RecordBytes,
    /// `starting`, `running`, `completed`, `stopped`, `timed_out`, `failed` or `lost`.
    pub status: RecordStatus,
    /// Shell pid once spawned.
    pub pid: Option<i32>,
    /// Shell start time (clock ticks after boot) for identity checks.
    pub start_time: Option<u64>,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Terminating signal number.
    pub signal: Option<i32>,
    /// Start, Unix milliseconds.
    pub started_at_ms: i64,
    /// End, Unix milliseconds.
    pub ended_at_ms: Option<i64>,
    /// Run time once ended.
    pub duration_ms: Option<u64>,
    /// What ended it (`stop`, `timeout`, `daemon_shutdown`).
    pub ended_by: Option<EndedBy>,
    /// Why it was lost.
    pub lost_reason: Option<LostReason>,
    /// It ran on a terminal (`exec(tty=true)`): its output is read as a terminal shows it. Absent
    /// (false) in records of pipe processes and of earlier versions.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// What the command may do, when it runs sandboxed (absent: unsandboxed, and in records of
    /// earlier versions). A re-adopting daemon serves its allowlist proxy from this, and a
    /// sandboxed client of it gets no more than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<RecordSandbox>,
    /// The digest an identical `exec` is recognised by (`crate::process::twins`; absent for a
    /// process that is never reused, and in records of earlier versions). A digest, not the
    /// environment overlay it covers: overlay values may be secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub twin: Option<String>,
    /// When its `timeout_ms` fires, Unix milliseconds (absent: no timeout, and in records of
    /// earlier versions). An absolute time, so the daemon that re-adopts the process after a
    /// restart or a crash re-arms the same deadline (one that passed meanwhile fires at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_at_ms: Option<i64>,
}

/// A sandboxed process's grant as a record keeps it (`crate::sandbox::Grant`), with what the
/// machine could not enforce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSandbox {
    /// `read-only`, `workspace` or `anywhere`.
    pub files: String,
    /// With `workspace`: its roots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roots: Vec<RecordBytes>,
    /// With `workspace`: `.git` is writable too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub git: bool,
    /// `off`, `on` or `allowlist`.
    pub network: String,
    /// With `allowlist`: each list a host must be on (`example.com`, `*.example.com`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowlists: Vec<Vec<String>>,
    /// What the machine could not enforce, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<String>,
}

/// A queued job for the writer thread.
enum Job {
    Save(Box<ProcessRecord>),
    Remove(String),
    /// Answered once every job queued before it is on disk.
    Barrier(BarrierReply),
}

/// Who waits on a barrier: a thread (shutdown) or a task (an exec about to yield).
enum BarrierReply {
    Thread(std::sync::mpsc::Sender<()>),
    Task(tokio::sync::oneshot::Sender<()>),
}

impl BarrierReply {
    fn send(self) {
        // A waiter that gave up (its call was cancelled) needs no answer.
        match self {
            BarrierReply::Thread(tx) => {
                let _ = tx.send(());
            }
            BarrierReply::Task(tx) => {
                let _ = tx.send(());
            }
        }
    }
}

/// Where records live, and the queue to their writer.
#[derive(Debug, Clone)]
pub struct RecordStore {
    root: PathBuf,
    writer: std::sync::mpsc::Sender<Job>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Save(r) => write!(f, "Save({})", r.process_id),
            Job::Remove(id) => write!(f, "Remove({id})"),
            Job::Barrier(_) => f.write_str("Barrier"),
        }
    }
}

fn write_record(root: &Path, record: &ProcessRecord) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    write_private_atomically(&root.join(&record.process_id), RECORD_FILE, &json)
}

/// Writes `dir/name` whole or not at all (a temp file, then a rename), readable by its owner only
/// (records and exit statuses say what users ran). The temp file is always a fresh one, never
/// reached through a symlink planted at its path (it is unlinked, not followed; O_EXCL does not
/// follow a final symlink: RELIABILITY S3). No fsync: this guards against a dying process, not a
/// dying machine.
pub(crate) fn write_private_atomically(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))
}

/// How long the writer lets jobs gather before writing them. A quick command queues its
/// `starting` and its final record within this window, so only the final one is written; and the
/// disk work happens after, not during, the spawn it would otherwise compete with for the CPU.
/// (The thread keeps the normal priority: a lowered one invites priority inversion on the
/// allocator's and the queue's locks, which measured far worse than any gain.)
const WRITE_BATCH_DELAY: std::time::Duration = std::time::Duration::from_millis(3);

fn run_writer(root: &Path, jobs: &std::sync::mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        gather(jobs, &mut batch);
        for (i, job) in batch.iter().enumerate() {
            let result = match job {
                // A later record of the same process in this batch supersedes this one.
                Job::Save(r)
                    if batch[i + 1..].iter().any(
                        |j| matches!(j, Job::Save(later) if later.process_id == r.process_id),
                    ) =>
                {
                    Ok(())
                }
                Job::Save(r) => write_record(root, r),
                Job::Remove(id) => remove_dir(root, id),
                Job::Barrier(_) => Ok(()),
            };
            if let Err(e) = result {
                tracing::warn!(?job, "persisting process state failed: {e}");
            }
        }
        for job in batch {
            if let Job::Barrier(reply) = job {
                reply.send();
            }
        }
    }
}

/// Adds to `batch` the jobs that arrive within [`WRITE_BATCH_DELAY`] of its first one, or up to
/// the first barrier: someone waits on that one, so the batch is written at once.
fn gather(jobs: &std::sync::mpsc::Receiver<Job>, batch: &mut Vec<Job>) {
    let deadline = std::time::Instant::now() + WRITE_BATCH_DELAY;
    while !matches!(batch.last(), Some(Job::Barrier(_))) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match jobs.recv_timeout(left) {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

fn remove_dir(root: &Path, process_id: &str) -> io::Result<()> {
    match std::fs::remove_dir_all(root.join(process_id)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl RecordStore {
    /// The store under `<state_dir>/procs`, created 0700, with its writer thread.
    pub fn open(state_dir: &Path) -> io::Result<RecordStore> {
        let root = state_dir.join("procs");
        create_private_dir(&root)?;
        let (writer, jobs) = std::sync::mpsc::channel::<Job>();
        let thread_root = root.clone();
        std::thread::Builder::new()
            .name("record-writer".into())
            .spawn(move || run_writer(&thread_root, &jobs))?;
        Ok(RecordStore { root, writer })
    }

    /// Directory of one process (its record and spool).
    pub fn dir(&self, process_id: &str) -> PathBuf {
        self.root.join(process_id)
    }

    /// Creates the directory of a new process; fails if it exists (ids are never reused).
    pub fn create_dir(&self, process_id: &str) -> io::Result<PathBuf> {
        let dir = self.dir(process_id);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        }
        #[cfg(not(unix))]
        std::fs::create_dir(&dir)?;
        Ok(dir)
    }

    /// Makes `spare` (the spare directory of a prepared holder, `holder::link::Idle`) the
    /// directory of a new process by renaming it: as [`create_dir`](Self::create_dir), it fails
    /// with `AlreadyExists` when that directory exists, which it never replaces (renameat2's
    /// `RENAME_NOREPLACE`; a plain rename would replace an empty one).
    #[cfg(target_os = "linux")]
    pub fn claim_dir(&self, spare: &Path, process_id: &str) -> io::Result<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let dir = self.dir(process_id);
        let cstr = |p: &Path| {
            std::ffi::CString::new(p.as_os_str().as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
        };
        let (from, to) = (cstr(spare)?, cstr(&dir)?);
        // SAFETY: two NUL-terminated paths that outlive the call; the syscall only reads them.
        // Called directly rather than through libc's wrapper, which older C libraries lack.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(dir)
    }

    /// Queues a record to be written (atomically, in order with this process's other writes).
    pub fn save(&self, record: &ProcessRecord) {
        if self
            .writer
            .send(Job::Save(Box::new(record.clone())))
            .is_err()
        {
            tracing::error!(process_id = %record.process_id, "record writer is gone; record not saved");
        }
    }

    /// Writes a record now, on the calling thread (startup recovery, before the writer matters).
    pub fn save_now(&self, record: &ProcessRecord) -> io::Result<()> {
        write_record(&self.root, record)
    }

    /// Queues the removal of a process's directory (record and spool).
    pub fn remove(&self, process_id: &str) {
        let _ = self.writer.send(Job::Remove(process_id.to_string()));
    }

    /// Empties the directory of a process whose start is tried again (its first holder let go of
    /// it without running the command), keeping its record: what that holder made there (its
    /// socket, exit file, spool) must not be taken for the new one's.
    pub fn clear_for_another_start(&self, process_id: &str) -> io::Result<()> {
        for entry in std::fs::read_dir(self.dir(process_id))? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(RECORD_FILE) {
                continue;
            }
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }

    /// Waits until every queued write is on disk (shutdown; tests).
    pub fn flush(&self) {
        let (done, wait) = std::sync::mpsc::channel();
        if self
            .writer
            .send(Job::Barrier(BarrierReply::Thread(done)))
            .is_ok()
        {
            let _ = wait.recv();
        }
    }

    /// [`flush`](Self::flush) for a task: resolves once every write queued before the call is on
    /// disk. An exec awaits it before answering that a process runs on in the background, so a
    /// daemon killed right after that answer leaves the record the next daemon re-adopts it by.
    pub async fn persisted(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self
            .writer
            .send(Job::Barrier(BarrierReply::Task(done)))
            .is_ok()
        {
            let _ = wait.await;
        }
    }

    /// Ids of process directories that hold no readable record: a crash came between creating
    /// the directory and writing the record (or the record was corrupt).
    pub fn dirs_without_record(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().is_dir() && !e.path().join(RECORD_FILE).is_file())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect()
    }

    /// Loads every record. Unparseable records are moved aside and reported in the log.
    pub fn load_all(&self) -> Vec<ProcessRecord> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut records = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path().join(RECORD_FILE);
            let Ok(raw) = std::fs::read(&path) else {
                continue;
            };
            match serde_json::from_slice::<ProcessRecord>(&raw) {
                Ok(r) if r.process_id == entry.file_name().to_string_lossy() => records.push(r),
                Ok(_) | Err(_) => {
                    let stamp = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis())
                        .unwrap_or(0);
                    let aside = path.with_extension(format!("json.corrupt-{stamp}"));
                    tracing::error!(
                        path = %path.display(),
                        aside = %aside.display(),
                        "process record does not parse; moved aside, starting without it"
                    );
                    let _ = std::fs::rename(&path, &aside);
                }
            }
        }
        records
    }
}

/// Creates a directory (and missing parents) with mode 0700 if missing, and refuses one that is
/// not private: a symlink, not a directory, owned by another uid, or writable by group/other
/// (one of ours that others can only read is tightened to 0700). The state directory holds commands, output and the lock; a writable one would
/// let another user replace `procs/` and read or forge records (RELIABILITY S5).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    yieldshell_proto::paths::ensure_private_dir(dir).map_err(|e| {
        let kind = match &e {
            yieldshell_proto::paths::PathError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::PermissionDenied,
        };
        io::Error::new(kind, e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> ProcessRecord {
        ProcessRecord {
            format: RECORD_FORMAT,
            process_id: id.into(),
            session_id: "s".into(),
            name: String::new(),
            command: RecordBytes::from_bytes(b"echo \xff"),
            cwd: RecordBytes::from_bytes(b"/tmp"),
            status: RecordStatus::Running,
            pid: Some(42),
            start_time: Some(7),
            exit_code: None,
            signal: None,
            started_at_ms: 1,
            ended_at_ms: None,
            duration_ms: None,
            ended_by: None,
            lost_reason: None,
            tty: false,
            sandbox: None,
            twin: None,
            timeout_at_ms: None,
        }
    }

    #[test]
    fn records_round_trip_including_non_utf8_bytes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = RecordStore::open(tmp.path()).expect("open");
        store.create_dir("proc_a").expect("dir");
        store.save(&record("proc_a"));
        store.flush();
        let loaded = store.load_all();
        assert_eq!(loaded, vec![record("proc_a")]);
        assert_eq!(loaded[0].command.to_bytes(), b"echo \xff");
    }

    #[tokio::test]
    async fn persisted_resolves_once_queued_records_are_on_disk() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = RecordStore::open(tmp.path()).expect("open");
        for id in ["proc_c", "proc_d"] {
            store.create_dir(id).expect("dir");
            store.save(&record(id));
        }
        store.persisted().await;
        // Read straight after: no batch delay is left for the writer to finish in.
        let mut loaded = store.load_all();
        loaded.sort_by(|a, b| a.process_id.cmp(&b.process_id));
        assert_eq!(loaded, vec![record("proc_c"), record("proc_d")]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn claiming_a_spare_moves_it_into_place_but_never_over_an_existing_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = RecordStore::open(tmp.path()).expect("open");
        let spare = tmp.path().join("spare-1");
        std::fs::create_dir(&spare).expect("spare");
        std::fs::write(spare.join("exit"), b"").expect("file");
        // An empty directory of that name exists: a plain rename would replace it.
        store.create_dir("proc_e").expect("dir");
        let taken = store.claim_dir(&spare, "proc_e").expect_err("taken");
        assert_eq!(taken.kind(), io::ErrorKind::AlreadyExists);
        assert!(spare.join("exit").exists(), "the spare stayed where it was");
        let dir = store.claim_dir(&spare, "proc_f").expect("claimed");
        assert_eq!(dir, store.dir("proc_f"));
        assert!(dir.join("exit").exists() && !spare.exists());
    }

    #[test]
    fn a_corrupt_record_is_moved_aside() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = RecordStore::open(tmp.path()).expect("open");
        let dir = store.create_dir("proc_b").expect("dir");
        std::fs::write(dir.join(RECORD_FILE), b"{not json").expect("write");
        assert!(store.load_all().is_empty());
        assert_eq!(store.dirs_without_record(), vec!["proc_b".to_string()]);
        let names: Vec<String> = std::fs::read_dir(&dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().any(|n| n.starts_with("record.json.corrupt-")),
            "{names:?}"
        );
    }
}
