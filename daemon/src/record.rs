//! Persisted process records: what survives a daemon restart.
//!
//! Each process has a directory `<state>/procs/<process_id>/` holding `record.json` and its output
//! spool. The record is written before the command is spawned (`starting`), again once it runs
//! (pid and start time, for identity checks after a crash), and when it ends. Each record has one
//! writer — its process's actor — so no lock is needed; writes are atomic (temp file + rename),
//! so a crash leaves either the old or the new record, never a torn one. A record that does not
//! parse is moved aside (`record.json.corrupt-<ts>`) and the daemon starts without it.
//!
//! Durability: records are not fsync'd (that would cost milliseconds per `exec`); they survive a
//! daemon crash (the page cache is the kernel's) but possibly not a power loss, after which a
//! record may be missing or corrupt and is handled as above.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    pub status: String,
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
    pub ended_by: Option<String>,
    /// Why it was lost.
    pub lost_reason: Option<String>,
}

/// Where records live.
#[derive(Debug, Clone)]
pub struct RecordStore {
    root: PathBuf,
}

impl RecordStore {
    /// The store under `<state_dir>/procs`, created 0700.
    pub fn open(state_dir: &Path) -> io::Result<RecordStore> {
        let root = state_dir.join("procs");
        create_private_dir(&root)?;
        Ok(RecordStore { root })
    }

    /// Directory of one process (its record and spool).
    pub fn dir(&self, process_id: &str) -> PathBuf {
        self.root.join(process_id)
    }

    /// Creates the directory of a new process.
    pub fn create_dir(&self, process_id: &str) -> io::Result<PathBuf> {
        let dir = self.dir(process_id);
        create_private_dir(&dir)?;
        Ok(dir)
    }

    /// Writes a record atomically.
    pub fn save(&self, record: &ProcessRecord) -> io::Result<()> {
        let dir = self.dir(&record.process_id);
        let tmp = dir.join(format!("{RECORD_FILE}.tmp"));
        let json = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        // A fresh file every time, never through a symlink planted at the temp path (it is
        // unlinked, not followed): O_EXCL does not follow a final symlink (RELIABILITY S3).
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(&json)?;
        drop(f);
        std::fs::rename(&tmp, dir.join(RECORD_FILE))
    }

    /// Removes a process's directory (record and spool).
    pub fn remove(&self, process_id: &str) -> io::Result<()> {
        match std::fs::remove_dir_all(self.dir(process_id)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
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

/// Creates a directory (and missing parents) with mode 0700, no error if it exists, and refuses
/// anything but a directory in its place.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a directory", dir.display()),
        ));
    }
    Ok(())
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
            status: "running".into(),
            pid: Some(42),
            start_time: Some(7),
            exit_code: None,
            signal: None,
            started_at_ms: 1,
            ended_at_ms: None,
            duration_ms: None,
            ended_by: None,
            lost_reason: None,
        }
    }

    #[test]
    fn records_round_trip_including_non_utf8_bytes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = RecordStore::open(tmp.path()).expect("open");
        store.create_dir("proc_a").expect("dir");
        store.save(&record("proc_a")).expect("save");
        let loaded = store.load_all();
        assert_eq!(loaded, vec![record("proc_a")]);
        assert_eq!(loaded[0].command.to_bytes(), b"echo \xff");
    }

    #[test]
    fn a_corrupt_record_is_moved_aside() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = RecordStore::open(tmp.path()).expect("open");
        let dir = store.create_dir("proc_b").expect("dir");
        std::fs::write(dir.join(RECORD_FILE), b"{not json").expect("write");
        assert!(store.load_all().is_empty());
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
