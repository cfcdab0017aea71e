//! A [`Plan`] as a Seatbelt profile (macOS), for `sandbox-exec -p PROFILE /bin/sh -c …`, as
//! Codex and Claude Code sandbox commands there. Seatbelt applies to the whole tree and cannot be
//! dropped, like Landlock; unlike it, it can deny a subtree of an allowed one (the last matching
//! rule wins), so `.git` and the daemon's state directory are kept read-only or hidden without
//! namespaces.
//!
//! Built and linted for macOS in CI; never run here (see README, "Platforms").

use std::path::Path;

use super::plan::{NetPlan, Plan};

/// Where `sandbox-exec` is.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// A path as a quoted SBPL string.
fn quoted(p: &Path) -> String {
    let text = p.to_string_lossy();
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s
}

/// The profile of `plan`.
pub fn profile(plan: &Plan) -> String {
    let mut p = String::from("(version 1)\n(allow default)\n");
    if plan.restrict_files {
        p.push_str("(deny file-write*)\n(allow file-write*\n");
        for w in plan.writable.iter().chain(std::iter::once(&plan.tmp)) {
            p.push_str(&format!("  (subpath {})\n", quoted(w)));
        }
        for dev in ["/dev/null", "/dev/zero", "/dev/tty", "/dev/dtracehelper"] {
            p.push_str(&format!("  (literal {})\n", quoted(Path::new(dev))));
        }
        p.push_str("  (regex #\"^/dev/ttys[0-9]+$\"))\n");
        for ro in &plan.read_only {
            p.push_str(&format!("(deny file-write* (subpath {}))\n", quoted(ro)));
        }
        for hidden in &plan.hidden {
            p.push_str(&format!(
                "(deny file-read* file-write* (subpath {}))\n",
                quoted(hidden)
            ));
        }
        // The temp dir and the socket directory may lie inside a hidden one: allowed again.
        p.push_str(&format!(
            "(allow file-read* file-write* (subpath {}))\n",
            quoted(&plan.tmp)
        ));
        for back in &plan.rebound {
            p.push_str(&format!("(allow file-read* (subpath {}))\n", quoted(back)));
        }
    }
    match plan.network {
        NetPlan::On => {}
        NetPlan::Off => {
            p.push_str("(deny network*)\n(allow network* (remote unix-socket))\n");
        }
        NetPlan::Proxy { port } => {
            p.push_str(&format!(
                "(deny network*)\n(allow network* (remote unix-socket))\n\
                 (allow network-outbound (remote tcp \"localhost:{port}\"))\n"
            ));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_workspace_plan_allows_its_roots_and_denies_git_and_the_state_dir() {
        let plan = Plan {
            restrict_files: true,
            writable: vec![PathBuf::from("/w")],
            tmp: PathBuf::from("/s/procs/p/tmp"),
            read_only: vec![PathBuf::from("/w/.git")],
            hidden: vec![PathBuf::from("/s")],
            rebound: Vec::new(),
            network: NetPlan::Proxy { port: 4000 },
            namespaces: false,
        };
        let p = profile(&plan);
        assert!(p.contains("(subpath \"/w\")"), "{p}");
        assert!(
            p.contains("(deny file-write* (subpath \"/w/.git\"))"),
            "{p}"
        );
        assert!(
            p.contains("(deny file-read* file-write* (subpath \"/s\"))"),
            "{p}"
        );
        assert!(p.contains("localhost:4000"), "{p}");
        // The temp dir is allowed after the state dir is hidden: the last rule wins.
        let hide = p.find("(subpath \"/s\")").expect("hidden");
        let tmp = p.rfind("(subpath \"/s/procs/p/tmp\")").expect("tmp");
        assert!(tmp > hide, "{p}");
        assert_eq!(quoted(Path::new("/a\"b\\c")), "\"/a\\\"b\\\\c\"");
    }
}
