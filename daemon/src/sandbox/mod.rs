//! The enforced sandbox (README, "Sandbox"): what a command may do is what its declaration
//! grants, and the kernel holds it to that.
//!
//! - [`Grant`]: what one command may do (where it may write, what it may reach), decided by the
//!   daemon from the session's mode and network setting, the command's declared side effects, the
//!   config file's floor, and the sandbox of the client that asked (a sandboxed process that
//!   reaches the daemon gets at most its own sandbox for what it starts). Grants only narrow:
//!   [`Grant::meet`].
//! - [`plan`]: the grant turned into what the command's process applies to itself before it
//!   runs the shell: the paths it may write, the `.git` directories and daemon directories kept
//!   read-only or hidden, the network. It travels in the holder's spec.
//! - `linux` (Linux): applying a plan, in the shell's process before `exec`: user, mount and
//!   network namespaces where the kernel lets us have them, `no_new_privs`, Landlock and a
//!   seccomp filter. Everything the shell starts inherits all of it and cannot shed it.
//! - [`seatbelt`]: the same plan as a Seatbelt profile for `sandbox-exec` (macOS; built, never
//!   run there).
//! - `proxy` (Unix): the daemon's HTTP proxy that an allowlisted command's traffic must use.
//! - [`denials`]: reading a failed command's output for the denial that failed it, and naming the
//!   declaration that would have allowed it.
//!
//! Pure logic here, no system calls: the grant and its rules are tested on every platform.

pub mod denials;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod plan;
#[cfg(target_os = "linux")]
pub mod probe;
#[cfg(unix)]
pub mod proxy;
pub mod seatbelt;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use yieldshell_proto::pb;
use yieldshell_proto::sandbox_settings::{HostPattern, NetworkSetting, SandboxMode};

/// Where a command may write (besides its private temp dir, `/dev/null` and its terminal).
/// Ordered from the least to the most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Files {
    /// Nowhere.
    ReadOnly,
    /// Under the workspace roots; `git`: their `.git` too.
    Workspace {
        /// The roots (resolved).
        roots: Vec<PathBuf>,
        /// `.git` is writable (`USES_DESTRUCTIVE_GIT_OPERATION`).
        git: bool,
    },
    /// Anywhere the user can.
    Anywhere,
}

impl Files {
    /// The word answers use.
    pub fn as_str(&self) -> &'static str {
        match self {
            Files::ReadOnly => "read-only",
            Files::Workspace { .. } => "workspace",
            Files::Anywhere => "anywhere",
        }
    }

    /// Where both `self` and `other` allow writing.
    fn meet(&self, other: &Files) -> Files {
        match (self, other) {
            (Files::Anywhere, x) | (x, Files::Anywhere) => x.clone(),
            (Files::ReadOnly, _) | (_, Files::ReadOnly) => Files::ReadOnly,
            (Files::Workspace { roots: a, git: ga }, Files::Workspace { roots: b, git: gb }) => {
                // A path is writable under both only below a root of each: the deeper of every
                // nested pair.
                let mut roots: Vec<PathBuf> = Vec::new();
                for x in a {
                    for y in b {
                        let inner = if x.starts_with(y) {
                            x
                        } else if y.starts_with(x) {
                            y
                        } else {
                            continue;
                        };
                        if !roots.contains(inner) {
                            roots.push(inner.clone());
                        }
                    }
                }
                if roots.is_empty() {
                    Files::ReadOnly
                } else {
                    Files::Workspace {
                        roots,
                        git: *ga && *gb,
                    }
                }
            }
        }
    }
}

/// What a command may reach over the network. Ordered from the least to the most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// Nothing (loopback inside its own network namespace, where it has one).
    Off,
    /// HTTP and HTTPS through the daemon's proxy, to hosts every list allows.
    Allowlist(Vec<Arc<[HostPattern]>>),
    /// Everything the user can.
    On,
}

impl Network {
    /// The word answers use.
    pub fn as_str(&self) -> &'static str {
        match self {
            Network::Off => "off",
            Network::Allowlist(_) => "allowlist",
            Network::On => "on",
        }
    }

    fn meet(&self, other: &Network) -> Network {
        match (self, other) {
            (Network::Off, _) | (_, Network::Off) => Network::Off,
            (Network::On, x) | (x, Network::On) => x.clone(),
            (Network::Allowlist(a), Network::Allowlist(b)) => {
                let mut lists = a.clone();
                for l in b {
                    if !lists.contains(l) {
                        lists.push(l.clone());
                    }
                }
                Network::Allowlist(lists)
            }
        }
    }

    /// Whether `host` may be reached (an allowlist: every list allows it).
    pub fn allows_host(&self, host: &str) -> bool {
        match self {
            Network::Off => false,
            Network::On => true,
            Network::Allowlist(lists) => lists.iter().all(|l| l.iter().any(|p| p.allows(host))),
        }
    }

    /// The hosts an allowlist names (those of its first list when there are several: each
    /// later list only narrows it, and answers stay short).
    pub fn hosts(&self) -> Vec<String> {
        match self {
            Network::Allowlist(lists) => lists
                .first()
                .map(|l| l.iter().map(|p| p.as_str().to_string()).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

/// What one command may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Where it may write.
    pub files: Files,
    /// What it may reach.
    pub network: Network,
}

impl Grant {
    /// No restriction at all: an unsandboxed command.
    pub fn unrestricted() -> Grant {
        Grant {
            files: Files::Anywhere,
            network: Network::On,
        }
    }

    /// Whether nothing is restricted (no sandbox is applied).
    pub fn is_unrestricted(&self) -> bool {
        self.files == Files::Anywhere && self.network == Network::On
    }

    /// What both grants allow.
    pub fn meet(&self, other: &Grant) -> Grant {
        Grant {
            files: self.files.meet(&other.files),
            network: self.network.meet(&other.network),
        }
    }

    /// Whether everything `self` allows, `wider` allows too.
    pub fn within(&self, wider: &Grant) -> bool {
        &self.meet(wider) == self
    }

    /// The answers' description.
    pub fn to_pb(&self) -> pb::Sandbox {
        let (git_writable, roots) = match &self.files {
            Files::Workspace { roots, git } => (
                *git,
                roots
                    .iter()
                    .map(|r| yieldshell_proto::session_config::path_bytes(r))
                    .collect(),
            ),
            _ => (false, Vec::new()),
        };
        pb::Sandbox {
            files: self.files.as_str().to_string(),
            network: self.network.as_str().to_string(),
            git_writable,
            hosts: self.network.hosts(),
            roots,
            ..Default::default()
        }
    }
}

/// Where a grant comes from: the session's settings, the daemon's floor, the calling client's
/// own sandbox, the workspace and the declaration. Kept so that a denial can be answered with
/// the declaration that would have allowed it ([`Origin::grant_with`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The session's settings.
    pub settings: SandboxSettings,
    /// The daemon's floor (config file).
    pub floor: SandboxSettings,
    /// The sandbox of the client that asked, when it runs inside one.
    pub caller: Option<Grant>,
    /// The workspace roots (resolved).
    pub workspace: Vec<PathBuf>,
    /// The command's declared side effects.
    pub declared: Vec<String>,
}

impl Origin {
    /// The grant of the declaration.
    pub fn grant(&self) -> Grant {
        self.grant_of(&self.declared)
    }

    /// The grant had `extra` been declared too.
    pub fn grant_with(&self, extra: &str) -> Grant {
        let mut declared: Vec<String> = self
            .declared
            .iter()
            .filter(|d| d.as_str() != "NONE")
            .cloned()
            .collect();
        declared.push(extra.to_string());
        self.grant_of(&declared)
    }

    fn grant_of(&self, declared: &[String]) -> Grant {
        let mut g = self
            .settings
            .grant(declared, &self.workspace)
            .meet(&self.floor.grant(declared, &self.workspace));
        if let Some(c) = &self.caller {
            g = g.meet(c);
        }
        g
    }
}

impl Files {
    /// Whether `path` (absolute) may be written.
    pub fn allows_write(&self, path: &Path) -> bool {
        match self {
            Files::Anywhere => true,
            Files::ReadOnly => false,
            Files::Workspace { roots, git } => {
                roots.iter().any(|r| path.starts_with(r))
                    && (*git || !path.components().any(|c| c.as_os_str() == ".git"))
            }
        }
    }
}

/// A sandboxed process's grant and what this machine could not hold it to: what its facts,
/// answers and record carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// What the command may do.
    pub grant: Grant,
    /// What the machine could not enforce (for the answer), one line each.
    pub limits: Vec<String>,
    /// Where the grant came from (`None` for a process restored from a record).
    pub origin: Option<Origin>,
}

impl Confinement {
    /// The record's form.
    pub fn to_record(&self) -> crate::record::RecordSandbox {
        use crate::record::RecordBytes;
        let (roots, git) = match &self.grant.files {
            Files::Workspace { roots, git } => (
                roots
                    .iter()
                    .map(|r| {
                        RecordBytes::from_bytes(&yieldshell_proto::session_config::path_bytes(r))
                    })
                    .collect(),
                *git,
            ),
            _ => (Vec::new(), false),
        };
        let allowlists = match &self.grant.network {
            Network::Allowlist(lists) => lists
                .iter()
                .map(|l| l.iter().map(|p| p.as_str().to_string()).collect())
                .collect(),
            _ => Vec::new(),
        };
        crate::record::RecordSandbox {
            files: self.grant.files.as_str().to_string(),
            roots,
            git,
            network: self.grant.network.as_str().to_string(),
            allowlists,
            limits: self.limits.clone(),
        }
    }

    /// From a record (of this or a later version: an unknown word reads as the narrowest).
    pub fn from_record(r: &crate::record::RecordSandbox) -> Confinement {
        let files = match r.files.as_str() {
            "anywhere" => Files::Anywhere,
            "workspace" => Files::Workspace {
                roots: r
                    .roots
                    .iter()
                    .map(|b| {
                        PathBuf::from(yieldshell_proto::session_config::bytes_os(&b.to_bytes()))
                    })
                    .collect(),
                git: r.git,
            },
            _ => Files::ReadOnly,
        };
        let network = match r.network.as_str() {
            "on" => Network::On,
            "allowlist" => Network::Allowlist(
                r.allowlists
                    .iter()
                    .map(|l| {
                        l.iter()
                            .filter_map(|h| HostPattern::parse(h).ok())
                            .collect::<Vec<_>>()
                            .into()
                    })
                    .collect(),
            ),
            _ => Network::Off,
        };
        Confinement {
            grant: Grant { files, network },
            limits: r.limits.clone(),
            origin: None,
        }
    }

    /// The answers' description, with the denial its output showed (if any).
    pub fn to_pb(&self, denied: Option<&str>) -> pb::Sandbox {
        pb::Sandbox {
            limits: self.limits.join("; "),
            denied: denied.unwrap_or_default().to_string(),
            ..self.grant.to_pb()
        }
    }
}

/// A session's sandbox settings, and the grant they give each command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxSettings {
    /// `YIELDSHELL_SANDBOX`.
    pub mode: SandboxMode,
    /// `YIELDSHELL_SANDBOX_NETWORK`.
    pub network: NetworkSetting,
}

/// Where one declared side effect lets a command write (the `declared` mapping, README
/// "Sandbox").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum FilesRow {
    ReadOnly,
    Workspace,
    WorkspaceAndGit,
    Anywhere,
}

/// The `declared` mapping's row of one side effect: where it writes, and whether it needs the
/// network. The union over a declaration is taken by [`SandboxSettings::grant`].
fn row(effect: &str) -> (FilesRow, bool) {
    match effect {
        "MODIFIES_WORKSPACE_FILES" | "DELETES_FILES" => (FilesRow::Workspace, false),
        "USES_DESTRUCTIVE_GIT_OPERATION" => (FilesRow::WorkspaceAndGit, false),
        "MAKES_NETWORK_REQUESTS" => (FilesRow::ReadOnly, true),
        "INSTALLS_DEPENDENCIES" => (FilesRow::Anywhere, true),
        "MODIFIES_OUTSIDE_WORKSPACE"
        | "MODIFIES_PROTECTED_FILES"
        | "CHANGES_SYSTEM_CONFIGURATION"
        | "BREAKS_OPERATING_SYSTEM"
        | "RUNS_PRIVILEGED_COMMANDS"
        | "STOPS_OR_RESTARTS_SERVICES" => (FilesRow::Anywhere, false),
        "CHANGES_NETWORK_CONFIGURATION" | "AFFECTS_PRODUCTION_SERVICES" => {
            (FilesRow::Anywhere, true)
        }
        "UNKNOWN" => (FilesRow::Workspace, false),
        // NONE, EXPOSES_SECRETS, CREATES_SECURITY_RISK, CONSUMES_SIGNIFICANT_RESOURCES, OTHER,
        // and anything unknown (refused earlier by the side-effect check).
        _ => (FilesRow::ReadOnly, false),
    }
}

impl SandboxSettings {
    /// Reads the session's (or the config file's) words; `None` fields are the defaults.
    pub fn parse(mode: Option<&str>, network: Option<&str>) -> Result<SandboxSettings, String> {
        let mode = match mode {
            Some(m) => SandboxMode::parse(m)
                .map_err(|e| format!("{}: {e}", yieldshell_proto::sandbox_settings::ENV_SANDBOX))?,
            None => SandboxMode::Off,
        };
        let network = match network {
            Some(n) => NetworkSetting::parse(n).map_err(|e| {
                format!(
                    "{}: {e}",
                    yieldshell_proto::sandbox_settings::ENV_SANDBOX_NETWORK
                )
            })?,
            None => NetworkSetting::Declared,
        };
        Ok(SandboxSettings { mode, network })
    }

    /// The grant of a command that declares `declared`, writing under `workspace` (the allowed
    /// cwd roots, else the session's default cwd; resolved).
    pub fn grant(&self, declared: &[String], workspace: &[PathBuf]) -> Grant {
        let (files_row, wants_network) = declared
            .iter()
            .map(|d| row(d))
            .fold((FilesRow::ReadOnly, false), |(f, n), (rf, rn)| {
                (f.max(rf), n || rn)
            });
        // `.git` inside a writable workspace only when destructive git work is declared: a wider
        // row (`anywhere`) needs no subtraction in `declared` mode, and in `workspace-write` mode
        // it does not unlock `.git` either.
        let git = declared
            .iter()
            .any(|d| d == "USES_DESTRUCTIVE_GIT_OPERATION");
        let workspace_files = || Files::Workspace {
            roots: workspace.to_vec(),
            git,
        };
        let files = match self.mode {
            SandboxMode::Off => Files::Anywhere,
            SandboxMode::ReadOnly => Files::ReadOnly,
            SandboxMode::WorkspaceWrite => workspace_files(),
            SandboxMode::Declared => match files_row {
                FilesRow::ReadOnly => Files::ReadOnly,
                FilesRow::Workspace | FilesRow::WorkspaceAndGit => workspace_files(),
                FilesRow::Anywhere => Files::Anywhere,
            },
        };
        // Without a sandbox mode, declarations decide nothing: only an explicit network setting
        // restricts (`declared` is then the seed's unrestricted network).
        let declared_network = wants_network || self.mode == SandboxMode::Off;
        let network = match &self.network {
            NetworkSetting::Off => Network::Off,
            NetworkSetting::On => Network::On,
            NetworkSetting::Declared if declared_network => Network::On,
            NetworkSetting::Allow(hosts) if declared_network => {
                Network::Allowlist(vec![hosts.clone().into()])
            }
            NetworkSetting::Declared | NetworkSetting::Allow(_) => Network::Off,
        };
        Grant { files, network }
    }
}

/// The workspace of a session: its allowed cwd roots, else its default cwd, resolved (a root
/// that does not exist is kept as given).
pub fn workspace_of(allowed_cwds: &[PathBuf], default_cwd: &Path) -> Vec<PathBuf> {
    if allowed_cwds.is_empty() {
        vec![std::fs::canonicalize(default_cwd).unwrap_or_else(|_| default_cwd.to_path_buf())]
    } else {
        allowed_cwds.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(mode: &str, network: &str) -> SandboxSettings {
        SandboxSettings::parse(Some(mode), Some(network)).expect("settings")
    }

    fn grant(s: &SandboxSettings, declared: &[&str]) -> Grant {
        let declared: Vec<String> = declared.iter().map(|d| d.to_string()).collect();
        s.grant(&declared, &[PathBuf::from("/w")])
    }

    fn ws(git: bool) -> Files {
        Files::Workspace {
            roots: vec![PathBuf::from("/w")],
            git,
        }
    }

    /// Every row of the `declared` table in the README.
    #[test]
    fn declared_grants_each_side_effect_its_row() {
        let s = settings("declared", "declared");
        let cases: &[(&[&str], Files, Network)] = &[
            (&["NONE"], Files::ReadOnly, Network::Off),
            (&["EXPOSES_SECRETS"], Files::ReadOnly, Network::Off),
            (&["CREATES_SECURITY_RISK"], Files::ReadOnly, Network::Off),
            (
                &["CONSUMES_SIGNIFICANT_RESOURCES"],
                Files::ReadOnly,
                Network::Off,
            ),
            (&["OTHER"], Files::ReadOnly, Network::Off),
            (&["MODIFIES_WORKSPACE_FILES"], ws(false), Network::Off),
            (&["DELETES_FILES"], ws(false), Network::Off),
            (&["USES_DESTRUCTIVE_GIT_OPERATION"], ws(true), Network::Off),
            (&["MAKES_NETWORK_REQUESTS"], Files::ReadOnly, Network::On),
            (&["INSTALLS_DEPENDENCIES"], Files::Anywhere, Network::On),
            (
                &["MODIFIES_OUTSIDE_WORKSPACE"],
                Files::Anywhere,
                Network::Off,
            ),
            (&["MODIFIES_PROTECTED_FILES"], Files::Anywhere, Network::Off),
            (
                &["CHANGES_SYSTEM_CONFIGURATION"],
                Files::Anywhere,
                Network::Off,
            ),
            (&["BREAKS_OPERATING_SYSTEM"], Files::Anywhere, Network::Off),
            (&["RUNS_PRIVILEGED_COMMANDS"], Files::Anywhere, Network::Off),
            (
                &["STOPS_OR_RESTARTS_SERVICES"],
                Files::Anywhere,
                Network::Off,
            ),
            (
                &["CHANGES_NETWORK_CONFIGURATION"],
                Files::Anywhere,
                Network::On,
            ),
            (
                &["AFFECTS_PRODUCTION_SERVICES"],
                Files::Anywhere,
                Network::On,
            ),
            (&["UNKNOWN"], ws(false), Network::Off),
            // The union over a list, no more than its widest row.
            (
                &["MODIFIES_WORKSPACE_FILES", "MAKES_NETWORK_REQUESTS"],
                ws(false),
                Network::On,
            ),
            (
                &["DELETES_FILES", "USES_DESTRUCTIVE_GIT_OPERATION"],
                ws(true),
                Network::Off,
            ),
        ];
        for (declared, files, network) in cases {
            let g = grant(&s, declared);
            assert_eq!(
                g,
                Grant {
                    files: files.clone(),
                    network: network.clone()
                },
                "{declared:?}"
            );
        }
    }

    #[test]
    fn the_modes_bound_files_whatever_is_declared() {
        let all = ["INSTALLS_DEPENDENCIES"];
        assert_eq!(
            grant(&settings("off", "declared"), &all),
            Grant::unrestricted()
        );
        assert_eq!(
            grant(&settings("off", "declared"), &["NONE"]),
            Grant::unrestricted(),
            "off is the seed's behaviour: no sandbox"
        );
        assert_eq!(
            grant(&settings("workspace-write", "declared"), &all).files,
            ws(false)
        );
        assert_eq!(
            grant(
                &settings("workspace-write", "declared"),
                &["USES_DESTRUCTIVE_GIT_OPERATION"]
            )
            .files,
            ws(true)
        );
        assert_eq!(
            grant(&settings("read-only", "declared"), &all).files,
            Files::ReadOnly
        );
        // The network setting decides the network the same way in every mode.
        assert_eq!(
            grant(&settings("read-only", "declared"), &["NONE"]).network,
            Network::Off
        );
        assert_eq!(
            grant(&settings("read-only", "on"), &["NONE"]).network,
            Network::On
        );
        assert_eq!(
            grant(&settings("declared", "off"), &["INSTALLS_DEPENDENCIES"]).network,
            Network::Off
        );
        // An explicit setting restricts even without a sandbox mode.
        assert_eq!(
            grant(&settings("off", "off"), &["NONE"]),
            Grant {
                files: Files::Anywhere,
                network: Network::Off
            }
        );
    }

    #[test]
    fn an_allowlist_goes_to_commands_that_declare_the_network() {
        let s = settings("declared", "allow:pypi.org,*.pythonhosted.org");
        let g = grant(&s, &["INSTALLS_DEPENDENCIES"]);
        assert_eq!(g.network.as_str(), "allowlist");
        assert!(g.network.allows_host("pypi.org"));
        assert!(g.network.allows_host("files.pythonhosted.org"));
        assert!(!g.network.allows_host("evil.example"));
        assert_eq!(grant(&s, &["NONE"]).network, Network::Off);
        let off = settings("off", "allow:pypi.org");
        assert_eq!(grant(&off, &["NONE"]).network.as_str(), "allowlist");
    }

    #[test]
    fn grants_only_narrow_when_met() {
        let wide = Grant::unrestricted();
        let narrow = Grant {
            files: ws(false),
            network: Network::Off,
        };
        assert_eq!(wide.meet(&narrow), narrow);
        assert!(narrow.within(&wide) && !wide.within(&narrow));
        // Nested roots: the deeper one; disjoint ones: nothing.
        let inner = Files::Workspace {
            roots: vec![PathBuf::from("/w/sub")],
            git: true,
        };
        assert_eq!(
            ws(false).meet(&inner),
            Files::Workspace {
                roots: vec![PathBuf::from("/w/sub")],
                git: false
            }
        );
        let other = Files::Workspace {
            roots: vec![PathBuf::from("/elsewhere")],
            git: true,
        };
        assert_eq!(ws(true).meet(&other), Files::ReadOnly);
        // Two allowlists: a host must be on both.
        let a = settings("declared", "allow:a.org,b.org");
        let b = settings("declared", "allow:b.org,c.org");
        let g =
            grant(&a, &["MAKES_NETWORK_REQUESTS"]).meet(&grant(&b, &["MAKES_NETWORK_REQUESTS"]));
        assert!(g.network.allows_host("b.org"));
        assert!(!g.network.allows_host("a.org") && !g.network.allows_host("c.org"));
        assert_eq!(
            g.network.meet(&Network::Off),
            Network::Off,
            "off is below every allowlist"
        );
    }
}
