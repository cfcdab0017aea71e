//! A [`Grant`] turned into what the command's own process applies before it runs the shell
//! ([`Plan`]), and the checks that decide whether this machine can hold the command to it.
//!
//! The plan is built by the daemon, which knows its state and socket directories and what the
//! kernel offers ([`Kernel`]: Landlock's ABI, whether user namespaces can be had), and carried
//! to the holder and its launcher in the spec. Where the machine cannot enforce what the grant
//! promises, the `exec` fails to start with the reason (never a silent run without it), except
//! for one documented loss: without user namespaces a workspace's `.git` cannot be kept
//! read-only inside a writable workspace, and the answer says so ([`Built::limits`]).

use std::path::{Path, PathBuf};

use super::{Files, Grant, Network};

/// The port an allowlisted command's proxy listens on inside the command's own network
/// namespace (nothing else can be there, so it is always free).
pub const NAMESPACED_PROXY_PORT: u16 = 3128;

/// What this machine's kernel offers, probed once when the daemon starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kernel {
    /// Landlock's ABI version (0: none, or disabled at boot).
    pub landlock_abi: i32,
    /// An unprivileged process can create user, mount and network namespaces and bind-mount
    /// in them (refused by `kernel.unprivileged_userns_clone=0`, Ubuntu's AppArmor restriction,
    /// or a container's seccomp profile).
    pub namespaces: bool,
    /// macOS: Seatbelt (`sandbox-exec`) enforces the plan, which can deny a subtree of a
    /// writable root and limit connections to one local port by itself.
    pub seatbelt: bool,
}

/// The network part of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetPlan {
    /// No restriction.
    On,
    /// No network: a network namespace of its own with only loopback, or, without namespaces,
    /// no sockets but Unix ones.
    Off,
    /// Only TCP to the daemon's proxy at `127.0.0.1:port`: inside a network namespace of its own
    /// (the proxy's listener is made there, port [`NAMESPACED_PROXY_PORT`]), or, without
    /// namespaces, a Landlock rule allowing TCP connections to that one port.
    Proxy {
        /// The proxy's port.
        port: u16,
    },
}

/// What the command's process applies to itself before `exec` (`super::linux::enter`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Restrict writes at all (false: anywhere the user can).
    pub restrict_files: bool,
    /// With `restrict_files`: writable beneath these (the workspace roots), besides `tmp`.
    pub writable: Vec<PathBuf>,
    /// The private temp dir: created by the process (0700), always writable; `TMPDIR`.
    pub tmp: PathBuf,
    /// Bind-mounted read-only over themselves in a mount namespace: the `.git` directories (and
    /// pointer files) inside writable roots, the daemon's socket directory when a root holds it.
    pub read_only: Vec<PathBuf>,
    /// Covered by an empty tmpfs in a mount namespace: the daemon's state directory (every
    /// process's spool and holder socket), with `tmp` bound back in place.
    pub hidden: Vec<PathBuf>,
    /// Bound back read-only after `hidden` is covered: the socket directory when it lies inside
    /// the state directory, so the daemon stays reachable.
    pub rebound: Vec<PathBuf>,
    /// The network.
    pub network: NetPlan,
    /// Use user and mount namespaces (and a network namespace unless the network is on).
    pub namespaces: bool,
}

/// A plan, and what it could not enforce on this machine (one line each, for the answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The plan.
    pub plan: Plan,
    /// What this machine cannot hold the command to, as the answer says it.
    pub limits: Vec<String>,
}

/// Where the daemon keeps what no sandboxed command may change.
#[derive(Debug, Clone)]
pub struct DaemonDirs {
    /// The state directory (records, spools, holder sockets).
    pub state: PathBuf,
    /// The directory of the control socket.
    pub socket: PathBuf,
}

/// Builds the plan of `grant` for the process whose directory is `process_dir`, running in
/// `cwd`; `proxy_port` is the daemon's proxy port when the grant is an allowlist and there are no
/// namespaces. Fails with the reason when this machine cannot enforce the grant.
pub fn build(
    grant: &Grant,
    kernel: Kernel,
    dirs: &DaemonDirs,
    process_dir: &Path,
    cwd: &Path,
    proxy_port: Option<u16>,
) -> Result<Built, String> {
    if kernel.landlock_abi < 1 && !kernel.seatbelt {
        return Err(
            "the sandbox needs Landlock (Linux 5.13 or newer, enabled at boot: \
                    `lsm=…,landlock`), which this kernel does not offer; the command did not run"
                .to_string(),
        );
    }
    let mut limits = Vec::new();
    let tmp = process_dir.join("tmp");
    let (restrict_files, writable, protect_git) = match &grant.files {
        Files::Anywhere => (false, Vec::new(), false),
        Files::ReadOnly => (true, Vec::new(), false),
        Files::Workspace { roots, git } => (true, roots.clone(), !git),
    };
    let inside_writable = |p: &Path| writable.iter().any(|r| p.starts_with(r));
    let mut read_only = Vec::new();
    if protect_git {
        for dir in git_dirs(&writable, cwd) {
            if inside_writable(&dir) && !read_only.contains(&dir) {
                read_only.push(dir);
            }
        }
    }
    let mut hidden = Vec::new();
    let mut rebound = Vec::new();
    // Whether a subtree of a writable root can be kept read-only, or hidden.
    let can_subtract = kernel.namespaces || kernel.seatbelt;
    if restrict_files {
        if can_subtract {
            // Hidden whatever the roots: no holder socket or other process's spool is reachable.
            hidden.push(dirs.state.clone());
            if dirs.socket.starts_with(&dirs.state) {
                rebound.push(dirs.socket.clone());
            } else if inside_writable(&dirs.socket) {
                read_only.push(dirs.socket.clone());
            }
        } else {
            for (what, dir) in [("state", &dirs.state), ("socket", &dirs.socket)] {
                if inside_writable(dir) {
                    return Err(format!(
                        "the workspace contains the daemon's {what} directory, which a sandboxed \
                         command must not change, and without user namespaces (unavailable \
                         here) it cannot be kept read-only: narrow YIELDSHELL_ALLOWED_CWDS; the \
                         command did not run"
                    ));
                }
            }
            if !read_only.is_empty() {
                limits.push(
                    ".git is writable: keeping it read-only needs user namespaces, which this \
                     machine refuses"
                        .to_string(),
                );
                read_only.clear();
            }
        }
    }
    let network = match &grant.network {
        Network::On => NetPlan::On,
        Network::Off => NetPlan::Off,
        Network::Allowlist(_) if kernel.namespaces => NetPlan::Proxy {
            port: NAMESPACED_PROXY_PORT,
        },
        Network::Allowlist(_) => {
            if kernel.landlock_abi < 4 && !kernel.seatbelt {
                return Err(format!(
                    "a network allowlist needs user namespaces or Landlock's network rules (ABI \
                     4, Linux 6.7); this kernel has neither (Landlock ABI {}); the command did not \
                     run",
                    kernel.landlock_abi
                ));
            }
            match proxy_port {
                Some(port) => NetPlan::Proxy { port },
                None => return Err("the allowlist proxy could not be started".to_string()),
            }
        }
    };
    let namespaces = kernel.namespaces
        && (!read_only.is_empty() || !hidden.is_empty() || network != NetPlan::On);
    Ok(Built {
        plan: Plan {
            restrict_files,
            writable,
            tmp,
            read_only,
            hidden,
            rebound,
            network,
            namespaces,
        },
        limits,
    })
}

/// The `.git` directories a workspace-write command must not change: each root's own, and that
/// of the repository `cwd` is in (the nearest `.git` above it, up to its root); for a `.git`
/// file (a worktree's or a submodule's pointer), the file and the directory it points to. Only
/// those that exist.
pub fn git_dirs(roots: &[PathBuf], cwd: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut add = |dot_git: PathBuf| {
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            return;
        };
        let resolved = std::fs::canonicalize(&dot_git).unwrap_or(dot_git.clone());
        if meta.is_file()
            && let Some(target) = pointed_gitdir(&dot_git)
            && !found.contains(&target)
        {
            found.push(target);
        }
        if !found.contains(&resolved) {
            found.push(resolved);
        }
    };
    for root in roots {
        add(root.join(".git"));
    }
    let mut dir = Some(cwd);
    while let Some(d) = dir {
        if d.join(".git").exists() {
            add(d.join(".git"));
            break;
        }
        if roots.iter().any(|r| r == d) {
            break;
        }
        dir = d.parent();
    }
    found
}

/// The directory a `.git` file points to (`gitdir: PATH`, relative to the file's directory).
fn pointed_gitdir(file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let target = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    let target = file.parent()?.join(target);
    std::fs::canonicalize(target).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Files;

    fn kernel(namespaces: bool) -> Kernel {
        Kernel {
            landlock_abi: 7,
            namespaces,
            seatbelt: false,
        }
    }

    fn workspace(root: &Path, git: bool) -> Grant {
        Grant {
            files: Files::Workspace {
                roots: vec![root.to_path_buf()],
                git,
            },
            network: Network::Off,
        }
    }

    #[test]
    fn a_workspace_keeps_its_git_read_only_and_hides_the_daemons_state() {
        let top = tempfile::tempdir().expect("tempdir");
        let root = top.path().canonicalize().expect("resolve");
        std::fs::create_dir_all(root.join("repo/.git")).expect("git");
        std::fs::create_dir_all(root.join("repo/src")).expect("src");
        let dirs = DaemonDirs {
            state: root.join("state"),
            socket: root.join("run"),
        };
        let built = build(
            &workspace(&root, false),
            kernel(true),
            &dirs,
            &root.join("state/procs/p"),
            &root.join("repo/src"),
            None,
        )
        .expect("plan");
        let p = built.plan;
        assert!(p.restrict_files && p.namespaces);
        assert_eq!(p.writable, vec![root.clone()]);
        assert_eq!(p.tmp, root.join("state/procs/p/tmp"));
        assert!(p.read_only.contains(&root.join("repo/.git")), "{p:?}");
        assert!(p.read_only.contains(&root.join("run")), "{p:?}");
        assert_eq!(p.hidden, vec![root.join("state")]);
        assert_eq!(p.network, NetPlan::Off);
        assert!(built.limits.is_empty());
        // Declared destructive git: .git is the workspace's like any directory.
        let git = build(
            &workspace(&root, true),
            kernel(true),
            &dirs,
            &root.join("state/procs/p"),
            &root.join("repo/src"),
            None,
        )
        .expect("plan");
        assert!(!git.plan.read_only.contains(&root.join("repo/.git")));
    }

    #[test]
    fn without_namespaces_git_is_a_stated_limit_and_the_state_dir_a_refusal() {
        let top = tempfile::tempdir().expect("tempdir");
        let root = top.path().canonicalize().expect("resolve");
        std::fs::create_dir_all(root.join(".git")).expect("git");
        let outside = DaemonDirs {
            state: PathBuf::from("/nonexistent/state"),
            socket: PathBuf::from("/nonexistent/run"),
        };
        let built = build(
            &workspace(&root, false),
            kernel(false),
            &outside,
            Path::new("/nonexistent/state/procs/p"),
            &root,
            None,
        )
        .expect("plan");
        assert!(!built.plan.namespaces && built.plan.read_only.is_empty());
        assert_eq!(built.limits.len(), 1, "{:?}", built.limits);
        assert!(built.limits[0].contains(".git is writable"));
        let inside = DaemonDirs {
            state: root.join("state"),
            socket: PathBuf::from("/nonexistent/run"),
        };
        let e = build(
            &workspace(&root, false),
            kernel(false),
            &inside,
            &root.join("state/procs/p"),
            &root,
            None,
        )
        .expect_err("planned");
        assert!(
            e.contains("state directory") && e.contains("did not run"),
            "{e}"
        );
    }

    #[test]
    fn a_machine_without_landlock_or_its_network_rules_refuses_what_needs_them() {
        let dirs = DaemonDirs {
            state: PathBuf::from("/s"),
            socket: PathBuf::from("/r"),
        };
        let ro = Grant {
            files: Files::ReadOnly,
            network: Network::On,
        };
        let none = Kernel {
            landlock_abi: 0,
            namespaces: true,
            seatbelt: false,
        };
        let e = build(&ro, none, &dirs, Path::new("/s/p"), Path::new("/"), None)
            .expect_err("no landlock");
        assert!(e.contains("Landlock"), "{e}");
        let allow = Grant {
            files: Files::Anywhere,
            network: Network::Allowlist(Vec::new()),
        };
        let old = Kernel {
            landlock_abi: 3,
            namespaces: false,
            seatbelt: false,
        };
        let e = build(
            &allow,
            old,
            &dirs,
            Path::new("/s/p"),
            Path::new("/"),
            Some(1),
        )
        .expect_err("no net rules");
        assert!(e.contains("ABI 4"), "{e}");
        let with_ns = build(
            &allow,
            kernel(true),
            &dirs,
            Path::new("/s/p"),
            Path::new("/"),
            None,
        )
        .expect("namespaced");
        assert_eq!(
            with_ns.plan.network,
            NetPlan::Proxy {
                port: NAMESPACED_PROXY_PORT
            }
        );
        assert!(with_ns.plan.namespaces && !with_ns.plan.restrict_files);
    }

    #[test]
    fn a_git_pointer_file_protects_itself_and_its_gitdir() {
        let top = tempfile::tempdir().expect("tempdir");
        let root = top.path().canonicalize().expect("resolve");
        std::fs::create_dir_all(root.join("main/.git/worktrees/wt")).expect("gitdir");
        std::fs::create_dir_all(root.join("wt")).expect("worktree");
        std::fs::write(root.join("wt/.git"), "gitdir: ../main/.git/worktrees/wt\n")
            .expect("pointer");
        let found = git_dirs(&[root.join("wt")], &root.join("wt"));
        assert!(found.contains(&root.join("wt/.git")), "{found:?}");
        assert!(
            found.contains(&root.join("main/.git/worktrees/wt")),
            "{found:?}"
        );
    }
}
