//! What a failed sandboxed command's output says the sandbox denied, and which declaration would
//! have allowed it: the one line answers carry in `sandbox.denied` (README, "Sandbox").
//!
//! The kernel tells the command, not us: Landlock answers a denied write `EACCES` (or `EXDEV`
//! for a rename across the boundary), a read-only bind `EROFS`, seccomp a refused socket `EPERM`,
//! a network namespace has no route and no resolver, and the proxy refuses with its own words.
//! So the command's last output is read for the messages programs print for those errors (C's
//! `strerror`, Python, Node, Go, curl, git, pip, npm), with the path they name when there is one.
//! A guess, but only ever offered for a command that failed under a restriction that fits it.

use std::path::{Path, PathBuf};

use super::{Confinement, Files, Network};

/// How much of the end of the output is read.
pub const TAIL_BYTES: usize = 16 * 1024;

/// Messages of a denied write.
const WRITE_DENIED: [&str; 7] = [
    "permission denied",
    "read-only file system",
    "eacces",
    "erofs",
    "[errno 13]",
    "[errno 30]",
    "invalid cross-device link",
];

/// Messages of a connection the sandbox refused (no socket, no route, no resolver).
const NETWORK_DENIED: [&str; 12] = [
    "operation not permitted",
    "network is unreachable",
    "could not resolve host",
    "temporary failure in name resolution",
    "name or service not known",
    "no address associated with hostname",
    "getaddrinfo",
    "enotfound",
    "no such host",
    "couldn't connect to server",
    "failed to establish a new connection",
    "address family not supported",
];

/// The proxy's own refusal, or a client's report of it.
const PROXY_REFUSED: [&str; 3] = [
    "is not in this command's network allowlist",
    "tunnel failed, response 403",
    "403 yieldshell",
];

/// One line naming the denial in `output` (the end of a failed command's output) and the
/// declaration that would have allowed it; `None` when none shows. `cwd` resolves relative
/// paths in messages.
pub fn explain(confinement: &Confinement, output: &[u8], cwd: &Path) -> Option<String> {
    let grant = &confinement.grant;
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text.lines().collect();
    let find = |needles: &[&str]| -> Option<&str> {
        lines.iter().rev().copied().find(|l| {
            let lower = l.to_ascii_lowercase();
            needles.iter().any(|n| lower.contains(n))
        })
    };
    if let Network::Allowlist(_) = grant.network
        && let Some(line) = find(&PROXY_REFUSED)
    {
        let host = refused_host(line);
        return Some(format!(
            "sandbox: the network allowlist refused {}; YIELDSHELL_SANDBOX_NETWORK=allow:… must \
             name it",
            host.map_or("a host".to_string(), |h| h.to_string())
        ));
    }
    if grant.files != Files::Anywhere
        && let Some(line) = find(&WRITE_DENIED)
    {
        let path = path_in(line).map(|p| if p.is_absolute() { p } else { cwd.join(p) });
        return Some(write_denial(confinement, path.as_deref()));
    }
    if grant.network == Network::Off && find(&NETWORK_DENIED).is_some() {
        let helps = |d: &str| {
            confinement
                .origin
                .as_ref()
                .is_none_or(|o| o.grant_with(d).network != Network::Off)
        };
        return Some(if helps("MAKES_NETWORK_REQUESTS") {
            "sandbox: the network is off for this command; declaring MAKES_NETWORK_REQUESTS (or \
             INSTALLS_DEPENDENCIES to install packages) allows it"
                .to_string()
        } else {
            "sandbox: the network is off for this session whatever is declared \
             (YIELDSHELL_SANDBOX_NETWORK, or the daemon's floor)"
                .to_string()
        });
    }
    None
}

/// The declarations that may widen where a command writes, narrowest first.
const WRITE_DECLARATIONS: [&str; 3] = [
    "MODIFIES_WORKSPACE_FILES",
    "USES_DESTRUCTIVE_GIT_OPERATION",
    "MODIFIES_OUTSIDE_WORKSPACE",
];

fn write_denial(confinement: &Confinement, path: Option<&Path>) -> String {
    let files = confinement.grant.files.as_str();
    let Some(path) = path else {
        return format!(
            "sandbox: a write was denied (files {files}); declaring MODIFIES_WORKSPACE_FILES (in \
             the workspace) or MODIFIES_OUTSIDE_WORKSPACE (elsewhere) allows it"
        );
    };
    // The narrowest declaration whose grant would write there; from a record (no origin), the
    // one the path's place suggests.
    let declare = match &confinement.origin {
        Some(origin) => WRITE_DECLARATIONS
            .into_iter()
            .find(|d| origin.grant_with(d).files.allows_write(path)),
        None => Some(if path.components().any(|c| c.as_os_str() == ".git") {
            "USES_DESTRUCTIVE_GIT_OPERATION"
        } else {
            "MODIFIES_OUTSIDE_WORKSPACE"
        }),
    };
    match declare {
        Some(d) => format!(
            "sandbox: writing {} was denied (files {files}); declaring {d} allows it",
            path.display()
        ),
        None => format!(
            "sandbox: writing {} was denied (files {files}), and no declaration allows it under \
             this session's sandbox (YIELDSHELL_SANDBOX, or the daemon's floor)",
            path.display()
        ),
    }
}

/// The path a message names: quoted (`'…'`, `"…"`, `‘…’`), or the word right before the error
/// (`open /x/y: permission denied`, `cannot create out.txt: Permission denied`); not the
/// program's own name that messages start with (`/bin/sh: 1: …`).
fn path_in(line: &str) -> Option<PathBuf> {
    for (open, close) in [('\'', '\''), ('"', '"'), ('‘', '’'), ('`', '\'')] {
        let mut rest = line;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            let candidate = &after[..end];
            if candidate.contains('/') || candidate.contains('.') {
                return Some(PathBuf::from(candidate));
            }
            rest = &after[end + close.len_utf8()..];
        }
    }
    let lower = line.to_ascii_lowercase();
    let at = WRITE_DENIED.iter().filter_map(|n| lower.find(n)).min()?;
    let before = line[..at]
        .trim_end()
        .trim_end_matches([':', ','])
        .trim_end();
    let word = before.rsplit(char::is_whitespace).next()?;
    let word = word.trim_matches(|c| matches!(c, '\'' | '"' | ',' | ':'));
    (!word.is_empty() && (word.contains('/') || word.contains('.'))).then(|| PathBuf::from(word))
}

/// The host a proxy refusal names.
fn refused_host(line: &str) -> Option<&str> {
    let (before, _) = line.split_once(" is not in this command's network allowlist")?;
    before.rsplit(' ').next().filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{Grant, Origin, SandboxSettings};

    /// The confinement of `declared` under `mode` and `network`, workspace `/w`.
    fn confined(mode: &str, network: &str, declared: &[&str]) -> Confinement {
        let origin = Origin {
            settings: SandboxSettings::parse(Some(mode), Some(network)).expect("settings"),
            floor: SandboxSettings::default(),
            caller: None,
            workspace: vec![PathBuf::from("/w")],
            declared: declared.iter().map(|d| d.to_string()).collect(),
        };
        Confinement {
            grant: origin.grant(),
            limits: Vec::new(),
            origin: Some(origin),
        }
    }

    #[test]
    fn a_denied_write_names_the_declaration_that_would_have_allowed_it() {
        let none = confined("declared", "declared", &["NONE"]);
        let ws = confined("declared", "declared", &["MODIFIES_WORKSPACE_FILES"]);
        let cases = [
            (
                &none,
                "/bin/sh: 1: cannot create out.txt: Permission denied",
                "/w/out.txt",
                "MODIFIES_WORKSPACE_FILES",
            ),
            (
                &none,
                "open /w/x/y: permission denied",
                "/w/x/y",
                "MODIFIES_WORKSPACE_FILES",
            ),
            (
                &ws,
                "touch: cannot touch '/etc/x': Permission denied",
                "/etc/x",
                "MODIFIES_OUTSIDE_WORKSPACE",
            ),
            (
                &ws,
                "error: could not lock config file .git/config: Read-only file system",
                "/w/.git/config",
                "USES_DESTRUCTIVE_GIT_OPERATION",
            ),
            (
                &ws,
                "PermissionError: [Errno 13] Permission denied: '/home/u/.cache/x'",
                "/home/u/.cache/x",
                "MODIFIES_OUTSIDE_WORKSPACE",
            ),
            (
                &ws,
                "Error: EACCES: permission denied, open '/opt/y'",
                "/opt/y",
                "MODIFIES_OUTSIDE_WORKSPACE",
            ),
        ];
        for (c, output, path, declare) in cases {
            let line =
                explain(c, format!("ok\n{output}\n").as_bytes(), Path::new("/w")).expect(output);
            assert!(
                line.contains(path) && line.contains(declare),
                "{output} → {line}"
            );
        }
        // In read-only mode nothing declared widens it: the answer says so.
        let ro = confined("read-only", "declared", &["NONE"]);
        let line = explain(
            &ro,
            b"cannot create out.txt: Permission denied",
            Path::new("/w"),
        )
        .expect("denied");
        assert!(line.contains("no declaration allows it"), "{line}");
    }

    #[test]
    fn a_refused_connection_names_the_network_declarations() {
        let none = confined("declared", "declared", &["NONE"]);
        for output in [
            "curl: (6) Could not resolve host: example.com",
            "socket.gaierror: [Errno -3] Temporary failure in name resolution",
            "curl: (7) Immediate connect fail for 1.1.1.1: Operation not permitted",
            "fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com",
        ] {
            let line = explain(&none, output.as_bytes(), Path::new("/")).expect(output);
            assert!(line.contains("MAKES_NETWORK_REQUESTS"), "{line}");
        }
        let off = confined("declared", "off", &["NONE"]);
        let line = explain(&off, b"Could not resolve host: x", Path::new("/")).expect("off");
        assert!(line.contains("whatever is declared"), "{line}");
        // Nothing restricted the network: no guess.
        let on = confined("declared", "on", &["NONE"]);
        assert_eq!(
            explain(&on, b"Could not resolve host: x", Path::new("/")),
            None
        );
    }

    #[test]
    fn the_proxys_refusal_names_the_host() {
        let c = confined("declared", "allow:pypi.org", &["MAKES_NETWORK_REQUESTS"]);
        let out = b"yieldshell sandbox: evil.example is not in this command's network allowlist (allowed: pypi.org)";
        let line = explain(&c, out, Path::new("/")).expect("refused");
        assert!(line.contains("evil.example"), "{line}");
        let curl = b"curl: (56) CONNECT tunnel failed, response 403";
        assert!(explain(&c, curl, Path::new("/")).is_some());
    }

    #[test]
    fn unrelated_failures_are_not_blamed_on_the_sandbox() {
        let ws = confined("declared", "declared", &["MODIFIES_WORKSPACE_FILES"]);
        assert_eq!(
            explain(&ws, b"make: *** [all] Error 2", Path::new("/w")),
            None
        );
        let open = Confinement {
            grant: Grant::unrestricted(),
            limits: Vec::new(),
            origin: None,
        };
        assert_eq!(explain(&open, b"Permission denied", Path::new("/w")), None);
    }
}
