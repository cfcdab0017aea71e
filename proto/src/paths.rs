//! Where the daemon lives: socket, state directory, config file — and the checks that keep them
//! private to their user.
//!
//! Rules (README, "How it fits together"): the socket is `$YIELDSHELL_SOCKET`, else
//! `$XDG_RUNTIME_DIR/yieldshell/yieldshelld.sock`, else `<temp>/yieldshell-<uid>/yieldshelld.sock`.
//! The state directory is `$YIELDSHELL_STATE_DIR`, else the platform state directory. The socket's
//! directory must be a real directory owned by the user with no group/other permission bits; we
//! create it 0700 and refuse a pre-existing one that is not (as tmux does for its socket dir).

use std::io;
use std::path::{Path, PathBuf};

/// Overrides the socket path.
pub const ENV_SOCKET: &str = "YIELDSHELL_SOCKET";
/// Overrides the state directory (records, output spools, daemon log).
pub const ENV_STATE_DIR: &str = "YIELDSHELL_STATE_DIR";
/// Overrides the daemon's config file.
pub const ENV_CONFIG: &str = "YIELDSHELL_CONFIG";
/// `1` disables daemon auto-start in clients.
pub const ENV_NO_AUTOSTART: &str = "YIELDSHELL_NO_AUTOSTART";
/// Path of the `yieldshelld` binary clients start (default: next to the client, then `PATH`).
pub const ENV_DAEMON_BIN: &str = "YIELDSHELL_DAEMON_BIN";

/// File name of the socket inside its directory.
pub const SOCKET_FILE_NAME: &str = "yieldshelld.sock";

/// An error about a path, naming the path and what was being done.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// An I/O operation on a path failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What we were doing.
        what: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A private directory is not private.
    #[error(
        "directory {} has unsafe permissions ({reason}); it must be a directory owned by uid {uid} with mode 0700",
        path.display()
    )]
    Unsafe {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
        /// The uid that should own it.
        uid: u32,
    },
    /// No directory could be determined (no home directory, no override).
    #[error("cannot determine the {0}; set {1}")]
    Undetermined(&'static str, &'static str),
}

fn non_empty_env(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// The effective user id of this process (on non-Unix platforms, 0).
pub fn current_uid() -> u32 {
    #[cfg(unix)]
    {
        nix::unistd::geteuid().as_raw()
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// The socket path clients connect to and the daemon binds, from the environment.
pub fn default_socket_path() -> PathBuf {
    if let Some(p) = non_empty_env(ENV_SOCKET) {
        return PathBuf::from(p);
    }
    #[cfg(windows)]
    {
        let user = std::env::var("USERNAME").unwrap_or_else(|_| "user".into());
        PathBuf::from(format!(r"\\.\pipe\yieldshell-{user}"))
    }
    #[cfg(not(windows))]
    {
        if let Some(runtime) = non_empty_env("XDG_RUNTIME_DIR") {
            return PathBuf::from(runtime)
                .join("yieldshell")
                .join(SOCKET_FILE_NAME);
        }
        std::env::temp_dir()
            .join(format!("yieldshell-{}", current_uid()))
            .join(SOCKET_FILE_NAME)
    }
}

fn project_dirs() -> Option<directories::ProjectDirs> {
    directories::ProjectDirs::from("dev", "yieldshell", "yieldshell")
}

/// The daemon's state directory (records, spools, logs), from the environment.
pub fn default_state_dir() -> Result<PathBuf, PathError> {
    if let Some(p) = non_empty_env(ENV_STATE_DIR) {
        return Ok(PathBuf::from(p));
    }
    let dirs = project_dirs().ok_or(PathError::Undetermined("state directory", ENV_STATE_DIR))?;
    // macOS and Windows have no XDG state dir; the local data dir is the conventional place.
    Ok(dirs
        .state_dir()
        .unwrap_or_else(|| dirs.data_local_dir())
        .to_path_buf())
}

/// The daemon's config file (it need not exist), from the environment.
pub fn default_config_file() -> Option<PathBuf> {
    if let Some(p) = non_empty_env(ENV_CONFIG) {
        return Some(PathBuf::from(p));
    }
    project_dirs().map(|d| d.config_dir().join("config.toml"))
}

/// Whether clients may start a daemon (`YIELDSHELL_NO_AUTOSTART` is not `1`/`true`).
pub fn autostart_enabled() -> bool {
    !matches!(
        std::env::var(ENV_NO_AUTOSTART).as_deref(),
        Ok("1") | Ok("true") | Ok("yes")
    )
}

/// Creates `dir` (and its parents) with mode 0700 if missing, then checks that it is a real
/// directory (not a symlink) owned by us and private.
///
/// A directory of ours whose group/other bits allow no writing (a hand-made 0755, 0750, 0711)
/// is tightened to 0700, with a warning: nobody else can have put anything in it, and refusing
/// it would make every client fail for a mode only its owner can fix (and the owner would
/// chmod it). One that others could write into (0775, 0777) is refused: another user may have
/// planted entries (a fake socket, a symlink) that tightening would not remove.
pub fn ensure_private_dir(dir: &Path) -> Result<(), PathError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
        let io_err = |what, source| PathError::Io {
            what,
            path: dir.to_path_buf(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io_err("creating directory", e))?;
        let meta = std::fs::symlink_metadata(dir).map_err(|e| io_err("inspecting directory", e))?;
        let uid = current_uid();
        let unsafe_dir = |reason: String| PathError::Unsafe {
            path: dir.to_path_buf(),
            reason,
            uid,
        };
        if meta.file_type().is_symlink() {
            return Err(unsafe_dir("it is a symbolic link".into()));
        }
        if !meta.is_dir() {
            return Err(unsafe_dir("it is not a directory".into()));
        }
        if meta.uid() != uid {
            return Err(unsafe_dir(format!("owned by uid {}", meta.uid())));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 == 0 {
            return Ok(());
        }
        if mode & 0o022 != 0 {
            return Err(unsafe_dir(format!(
                "mode {mode:04o}: others could have written into it"
            )));
        }
        // Tighten through a descriptor of the directory itself, re-checked: a path swapped for
        // a symlink or another directory since the look above is refused, never chmod-ed.
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|e| io_err("opening directory", e))?;
        let now = opened
            .metadata()
            .map_err(|e| io_err("inspecting directory", e))?;
        if now.uid() != uid || now.dev() != meta.dev() || now.ino() != meta.ino() {
            return Err(unsafe_dir("it changed while it was checked".into()));
        }
        opened
            .set_permissions(std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io_err("tightening the mode of directory", e))?;
        tracing::warn!(
            dir = %dir.display(),
            "directory had mode {mode:04o}; tightened to 0700 (it holds a private socket or state)"
        );
        Ok(())
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir).map_err(|source| PathError::Io {
            what: "creating directory",
            path: dir.to_path_buf(),
            source,
        })
    }
}

/// Largest socket path the platform accepts (`sun_path` is 108 bytes on Linux, 104 on macOS,
/// including the terminating NUL).
pub const MAX_SOCKET_PATH_BYTES: usize = if cfg!(target_os = "linux") { 107 } else { 103 };

/// Refuses socket paths that cannot be bound or connected, with an error naming the limit.
pub fn check_socket_path_len(path: &Path) -> Result<(), PathError> {
    let len = path.as_os_str().len();
    if cfg!(unix) && len > MAX_SOCKET_PATH_BYTES {
        return Err(PathError::Io {
            what: "using socket path",
            path: path.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "path too long: {len} bytes, the limit is {MAX_SOCKET_PATH_BYTES}; set {ENV_SOCKET} to a shorter path"
                ),
            ),
        });
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_missing_directory_0700() {
        let tmp = tempdir();
        let dir = tmp.join("a/b");
        ensure_private_dir(&dir).expect("create");
        let mode = std::fs::metadata(&dir).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn tightens_a_directory_nobody_else_can_write_and_refuses_one_others_can() {
        let tmp = tempdir();
        for mode in [0o755, 0o750, 0o711, 0o701] {
            let readable = tmp.join(format!("readable-{mode:o}"));
            std::fs::create_dir(&readable).expect("mkdir");
            std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(mode))
                .expect("chmod");
            ensure_private_dir(&readable).expect("a directory only we can write is tightened");
            let now = std::fs::metadata(&readable)
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(now & 0o7777, 0o700, "{mode:o}");
        }
        for mode in [0o775, 0o757, 0o777, 0o1777] {
            let writable = tmp.join(format!("writable-{mode:o}"));
            std::fs::create_dir(&writable).expect("mkdir");
            std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(mode))
                .expect("chmod");
            let err = ensure_private_dir(&writable).expect_err("writable dir accepted");
            assert!(err.to_string().contains("unsafe permissions"), "{err}");
            let now = std::fs::metadata(&writable)
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(now & 0o7777, mode, "a refused directory is left as it was");
        }
    }

    #[test]
    fn refuses_symlinks() {
        let tmp = tempdir();

        let link = tmp.join("link");
        let real = tmp.join("real");
        std::fs::create_dir(&real).expect("mkdir");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let err = ensure_private_dir(&link).expect_err("symlink accepted");
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }

    #[test]
    fn long_socket_paths_are_refused_with_the_limit() {
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        let err = check_socket_path_len(&long).expect_err("long path accepted");
        assert!(err.to_string().contains("path too long"), "{err}");
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ys-paths-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).expect("mkdir");
        dir
    }
}
