//! What `service install|uninstall` does, as data: a list of [`Step`]s that is either printed
//! (`--dry-run`) or carried out, step by step, in the same order.
//!
//! Building the plan first and executing it second is what makes `--dry-run` trustworthy: the
//! printout and the real run come from the same list, so the dry run shows exactly the files
//! that would be written and the commands that would run, and never drifts from them. The plan
//! is printed as a POSIX shell script that would do the same thing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

/// One change to the system.
// Built by the systemd and launchd backends only: Windows has no service backend yet.
#[cfg_attr(windows, allow(dead_code))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Create a directory and its parents.
    CreateDir(PathBuf),
    /// Write a file (replacing it atomically).
    Write {
        /// Where.
        path: PathBuf,
        /// The complete contents.
        contents: String,
    },
    /// Remove a file (a missing file is fine).
    Remove(PathBuf),
    /// Run a program; a non-zero exit stops the plan.
    Run(Vec<String>),
}

/// The steps of one `service` action and what the user should know about them.
#[derive(Debug, Serialize)]
pub struct Plan {
    /// `install` or `uninstall`.
    pub action: &'static str,
    /// `systemd` or `launchd`.
    pub manager: &'static str,
    /// The `yieldshelld` the units start (install only).
    pub binary: Option<PathBuf>,
    /// In order.
    pub steps: Vec<Step>,
    /// Consequences worth saying (for example: stopping the service stops its processes).
    pub notes: Vec<String>,
}

/// Quotes a word for a POSIX shell, only when it needs it.
pub fn sh_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn path_word(p: &Path) -> String {
    sh_quote(&p.to_string_lossy())
}

/// Delimiter of the here-documents in the dry-run script (never a line of a unit file).
const HEREDOC_END: &str = "YIELDSHELL_EOF";

impl Plan {
    /// The plan as a shell script: what `--dry-run` prints.
    pub fn script(&self) -> String {
        let mut s = format!(
            "# yieldctl service {} --dry-run ({}): nothing has been changed.\n\
             # It would make these changes and run these commands, in this order:\n",
            self.action, self.manager
        );
        if self.steps.is_empty() {
            s.push_str("# (nothing to do)\n");
        }
        for step in &self.steps {
            match step {
                Step::CreateDir(p) => s.push_str(&format!("mkdir -p {}\n", path_word(p))),
                Step::Write { path, contents } => {
                    s.push_str(&format!("cat > {} <<'{HEREDOC_END}'\n", path_word(path)));
                    s.push_str(contents);
                    if !contents.ends_with('\n') {
                        s.push('\n');
                    }
                    s.push_str(HEREDOC_END);
                    s.push('\n');
                }
                Step::Remove(p) => s.push_str(&format!("rm -f {}\n", path_word(p))),
                Step::Run(argv) => {
                    let words: Vec<String> = argv.iter().map(|w| sh_quote(w)).collect();
                    s.push_str(&words.join(" "));
                    s.push('\n');
                }
            }
        }
        for note in &self.notes {
            s.push_str(&format!("# note: {note}\n"));
        }
        s
    }

    /// Carries the steps out in order, reporting each one on stderr unless `quiet`. Stops at the
    /// first failure, saying what was already done.
    pub fn execute(&self, quiet: bool) -> anyhow::Result<()> {
        for (i, step) in self.steps.iter().enumerate() {
            if let Err(e) = run_step(step, quiet) {
                let done = self.steps[..i]
                    .iter()
                    .map(describe)
                    .collect::<Vec<_>>()
                    .join("; ");
                if done.is_empty() {
                    return Err(e);
                }
                return Err(e.context(format!("(already done: {done})")));
            }
        }
        Ok(())
    }
}

fn describe(step: &Step) -> String {
    match step {
        Step::CreateDir(p) => format!("created {}", p.display()),
        Step::Write { path, .. } => format!("wrote {}", path.display()),
        Step::Remove(p) => format!("removed {}", p.display()),
        Step::Run(argv) => format!("ran `{}`", argv.join(" ")),
    }
}

fn run_step(step: &Step, quiet: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    match step {
        Step::CreateDir(p) => {
            std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?
        }
        Step::Write { path, contents } => write_atomically(path, contents.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?,
        Step::Remove(p) => match std::fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", p.display())),
        },
        Step::Run(argv) => run_command(argv)?,
    }
    if !quiet {
        eprintln!("{}", describe(step));
    }
    Ok(())
}

/// Writes `path` through a temporary file and a rename, so a unit file is never seen half
/// written (by a `daemon-reload` running meanwhile, say).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Runs a service-manager command. Its stdout goes to our stderr, so `--json` keeps stdout to
/// the one JSON object.
fn run_command(argv: &[String]) -> anyhow::Result<()> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("empty command in the service plan"))?;
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run `{}`: {e}", argv.join(" ")))?;
    if !status.success() {
        anyhow::bail!("`{}` failed ({status})", argv.join(" "));
    }
    Ok(())
}

/// Output of a query command (`systemctl --user is-active …`, `launchctl print …`): its trimmed
/// stdout, or why there is none. Query commands report states through non-zero exit codes
/// (`is-active` exits 3 for "inactive"), so only a missing answer is an error.
#[cfg_attr(windows, allow(dead_code))]
pub fn query(argv: &[&str]) -> Result<String, String> {
    let (program, args) = argv.split_first().ok_or("empty command")?;
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !stdout.is_empty() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(stderr.lines().next().map_or_else(
        || format!("{program} said nothing ({})", out.status),
        str::to_string,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(sh_quote("/usr/bin/yieldshelld"), "/usr/bin/yieldshelld");
        assert_eq!(sh_quote("--user"), "--user");
        assert_eq!(sh_quote("/a b/c"), "'/a b/c'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
    }

    #[test]
    fn the_dry_run_script_lists_every_step_in_order() {
        let plan = Plan {
            action: "install",
            manager: "systemd",
            binary: None,
            steps: vec![
                Step::CreateDir("/h/u".into()),
                Step::Write {
                    path: "/h/u/a.service".into(),
                    contents: "[Unit]\n".into(),
                },
                Step::Run(vec![
                    "systemctl".into(),
                    "--user".into(),
                    "daemon-reload".into(),
                ]),
                Step::Remove("/h/u/old".into()),
            ],
            notes: vec!["be careful".into()],
        };
        let script = plan.script();
        let body: Vec<&str> = script.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                "mkdir -p /h/u",
                "cat > /h/u/a.service <<'YIELDSHELL_EOF'",
                "[Unit]",
                "YIELDSHELL_EOF",
                "systemctl --user daemon-reload",
                "rm -f /h/u/old",
            ]
        );
        assert!(script.contains("nothing has been changed"));
        assert!(script.ends_with("# note: be careful\n"));
    }

    #[cfg(unix)] // runs `false`
    #[test]
    fn executing_writes_files_atomically_and_stops_at_a_failure() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let file = dir.join("sub").join("unit");
        let plan = Plan {
            action: "install",
            manager: "systemd",
            binary: None,
            steps: vec![
                Step::CreateDir(dir.join("sub")),
                Step::Write {
                    path: file.clone(),
                    contents: "x\n".into(),
                },
                Step::Run(vec!["false".into()]),
                Step::Remove(file.clone()),
            ],
            notes: vec![],
        };
        let err = plan.execute(true).expect_err("`false` fails");
        let text = format!("{err:#}");
        assert!(text.contains("`false` failed"), "{text}");
        assert!(text.contains("already done"), "{text}");
        // The step after the failure did not run.
        assert_eq!(std::fs::read_to_string(&file).expect("written"), "x\n");
        let leftovers: Vec<_> = std::fs::read_dir(dir.join("sub"))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }
}
