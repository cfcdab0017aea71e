//! Which `yieldshelld` a client starts: `YIELDSHELL_DAEMON_BIN` if set, else the one beside the
//! client's own executable, else the first on `PATH`.
//!
//! "Beside" is what every install layout guarantees: `cargo install` (`~/.cargo/bin`), a Python
//! environment's `bin` (pip, pipx, uvx), the npm platform package's `bin/` (the `npx` launcher
//! runs the native shim from there) and the release tarball's `bin/` all hold the three binaries
//! together. The executable's path is resolved through symlinks (Linux reads `/proc/self/exe`),
//! so pipx's `~/.local/bin/mcp-yieldshell` link still finds the daemon in the venv it points
//! into. `PATH` comes second so that a client never starts some other install's daemon while its
//! own sits beside it.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::paths;

/// File name of the daemon executable on this platform.
pub const DAEMON_FILE_NAME: &str = if cfg!(windows) {
    "yieldshelld.exe"
} else {
    "yieldshelld"
};

/// No daemon binary was found: where the search looked, for an error the user can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonBinaryNotFound {
    /// The directory of the client's own executable, when it could be determined.
    pub beside: Option<PathBuf>,
    /// The `PATH` directories searched, in order.
    pub path_dirs: Vec<PathBuf>,
}

impl fmt::Display for DaemonBinaryNotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no {DAEMON_FILE_NAME} found: looked ")?;
        match &self.beside {
            Some(dir) => write!(f, "beside this program in {}", dir.display())?,
            None => write!(f, "nowhere beside this program (its own path is unknown)")?,
        }
        if self.path_dirs.is_empty() {
            write!(f, ", and PATH is empty")?;
        } else {
            let dirs: Vec<String> = self
                .path_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            write!(f, ", then on PATH ({})", dirs.join(":"))?;
        }
        write!(
            f,
            ". Install {DAEMON_FILE_NAME} beside this program (every YieldShell package ships \
             the three binaries together), or set {} to its path",
            paths::ENV_DAEMON_BIN
        )
    }
}

impl std::error::Error for DaemonBinaryNotFound {}

/// Finds the daemon binary: the explicit option (`YIELDSHELL_DAEMON_BIN`), then beside this
/// executable, then on `PATH`.
pub fn find_daemon_binary(explicit: Option<&Path>) -> Result<PathBuf, DaemonBinaryNotFound> {
    let exe = std::env::current_exe().ok();
    let path = std::env::var_os("PATH");
    locate(explicit, exe.as_deref(), path.as_deref())
}

/// [`find_daemon_binary`] with its inputs given, so every layout can be checked without
/// touching the process's environment.
fn locate(
    explicit: Option<&Path>,
    exe: Option<&Path>,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, DaemonBinaryNotFound> {
    // An explicit choice is never second-guessed: if it is wrong, starting it says so by name.
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let beside = exe.and_then(Path::parent).map(Path::to_path_buf);
    if let Some(dir) = &beside {
        let sibling = dir.join(DAEMON_FILE_NAME);
        if sibling.is_file() {
            return Ok(sibling);
        }
    }
    let path_dirs: Vec<PathBuf> = path_var
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for dir in &path_dirs {
        let candidate = dir.join(DAEMON_FILE_NAME);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(DaemonBinaryNotFound { beside, path_dirs })
}

/// Whether `path` is a file this user may run (as `execvp` would judge it on `PATH`).
fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Creates an executable stand-in named `yieldshelld` in `dir`.
    fn daemon_in(dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).expect("mkdir");
        let p = dir.join(DAEMON_FILE_NAME);
        std::fs::write(&p, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    fn temp() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "yieldshell-daemon-binary-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn the_daemon_beside_the_client_wins_over_path() {
        let root = temp();
        let beside = daemon_in(&root.join("venv/bin"));
        let on_path = daemon_in(&root.join("elsewhere"));
        let exe = root.join("venv/bin/mcp-yieldshell");
        let path = std::env::join_paths([root.join("elsewhere")]).expect("PATH");
        assert_eq!(locate(None, Some(&exe), Some(&path)), Ok(beside));
        // Without a sibling, PATH decides.
        let lone = root.join("lone/mcp-yieldshell");
        assert_eq!(locate(None, Some(&lone), Some(&path)), Ok(on_path.clone()));
        // The explicit setting beats both, even when it names a missing file.
        let explicit = root.join("custom/yieldshelld");
        assert_eq!(
            locate(Some(&explicit), Some(&exe), Some(&path)),
            Ok(explicit)
        );
        // A non-executable file on PATH is skipped, as execvp would.
        std::fs::set_permissions(&on_path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(locate(None, Some(&lone), Some(&path)).is_err());
        std::fs::remove_dir_all(root).expect("cleanup");
    }

    #[test]
    fn a_missing_daemon_names_where_it_looked_and_the_variable() {
        let root = temp();
        let exe = root.join("bin/mcp-yieldshell");
        let path = std::env::join_paths([root.join("a"), root.join("b")]).expect("PATH");
        let err = locate(None, Some(&exe), Some(&path)).expect_err("nothing to find");
        assert_eq!(err.beside.as_deref(), Some(root.join("bin").as_path()));
        let text = err.to_string();
        for part in [
            format!("beside this program in {}", root.join("bin").display()),
            format!(
                "on PATH ({}:{})",
                root.join("a").display(),
                root.join("b").display()
            ),
            "YIELDSHELL_DAEMON_BIN".to_string(),
        ] {
            assert!(text.contains(&part), "{part:?} missing from: {text}");
        }
        let unknown = locate(None, None, None).expect_err("nothing to find");
        assert!(unknown.to_string().contains("PATH is empty"), "{unknown}");
        std::fs::remove_dir_all(root).expect("cleanup");
    }
}
