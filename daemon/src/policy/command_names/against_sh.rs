//! Differential tests against the real `/bin/sh`, the shell the daemon runs lines with:
//! for every line the inspection accepts, each program `/bin/sh` runs must be among the
//! names it reported.
//!
//! The programs a line may run are scripts in a private `PATH` that append their own
//! name to a log, so what the shell ran is observed, not predicted. The lines come from
//! a corpus of the places where dash and bash (whose grammar brush follows) read quotes
//! differently, each checked to really run a program under `/bin/sh`, plus a
//! deterministic mutation of ordinary lines that inserts quotes, expansions and line
//! breaks where a bash reading and a dash reading could part.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// The programs lines may run; each reports its name when it does.
const PROGRAMS: &[&str] = &["rm", "ls", "cat", "a", "b"];

/// Variable naming the log the programs append to.
const LOG_VAR: &str = "YS_TEST_RAN_LOG";

/// Safety net for a line that never ends; a normal run takes milliseconds.
const HUNG: Duration = Duration::from_secs(60);

/// A private directory with the reporting programs and a scratch working directory.
struct Sh {
    dir: tempfile::TempDir,
    runs: usize,
}

impl Sh {
    fn new() -> Sh {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        std::fs::create_dir(dir.path().join("work")).expect("work");
        for name in PROGRAMS {
            let path = bin.join(name);
            let script = format!("#!/bin/sh\necho {name} >> \"${LOG_VAR}\"\n");
            std::fs::write(&path, script).expect("program");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        Sh { dir, runs: 0 }
    }

    /// The programs `/bin/sh -c line` ran, in order, with the daemon's environment
    /// reduced to a `PATH` of the reporting programs.
    fn ran(&mut self, line: &str) -> Vec<String> {
        self.runs += 1;
        let log: PathBuf = self.dir.path().join(format!("ran.{}", self.runs));
        let mut child = Command::new("/bin/sh")
            .args(["-c", "--", line])
            .env_clear()
            .env("PATH", self.dir.path().join("bin"))
            .env(LOG_VAR, &log)
            .current_dir(self.dir.path().join("work"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("/bin/sh");
        let started = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if started.elapsed() > HUNG {
                let _ = child.kill();
                let _ = child.wait();
                panic!("/bin/sh never ended for {line:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        read_log(&log)
    }
}

fn read_log(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Fails unless every program `/bin/sh` ran for `line` was reported, when the line is
/// accepted at all; returns what ran.
fn agrees(sh: &mut Sh, line: &str) -> Vec<String> {
    let ran = sh.ran(line);
    if let Ok(inspection) = inspect_blocking(line) {
        let unseen: Vec<&String> = ran
            .iter()
            .filter(|name| !inspection.programs.contains(name))
            .collect();
        assert!(
            unseen.is_empty(),
            "/bin/sh ran {unseen:?} for {line:?}, reported {:?}",
            inspection.programs
        );
    }
    ran
}

/// Lines where a bash reading hides a program that `/bin/sh` runs (here `rm`).
const HIDDEN: &[&str] = &[
    // A `'` in the word of `${…}` inside double quotes is a plain character to dash.
    "echo \"${u:-'}\"; rm x; #'}\"",
    "u=1; echo \"${u-'}\"; rm x; #'}\"",
    "u=1; echo \"${u+'}\"; rm x; #'}\"",
    "echo \"${u:+'}\"; rm x; #'}\"",
    "u=1; echo \"${u='}\"; rm x; #'}\"",
    "echo \"${u:='}\"; rm x; #'}\"",
    "u=1; echo \"${u?'}\"; rm x; #'}\"",
    "u=1; echo \"${u:?'}\"; rm x; #'}\"",
    "echo \"${u:-'$(rm x)'}\"",
    "echo \"${u-'`rm x`'}\"",
    "echo \"${u:=\\\n'$(rm x)'}\"",
    "(echo \"${u/'}\"); rm x; #'/x}\")",
    "(echo \"${u^'}\"); rm x; #'}\")",
    "echo \"${u:-${v:-'$(rm x)'}}\"",
    "echo \"${u:-\"${v:-'$(rm x)'}\"}\"",
    "echo ${u:-\"${v:-'$(rm x)'}\"}",
    "echo $\"${u:-'$(rm x)'}\"",
    // An unquoted here-document body: the same, and `$\⏎(` joined into `$(`.
    "cat <<EOF\n${u:-'$(rm x)'}\nEOF",
    "cat <<EOF\n${u:-'}$(rm x)'}\nEOF",
    "cat <<EOF\n$\\\n(rm x)\nEOF",
    "cat <<EOF\n$(echo $\\\n(rm x))\nEOF",
];

/// Lines both shells read alike, which must keep being accepted.
const ALIKE: &[&str] = &[
    "echo ${u:-'$(rm x)'} ${u:+'a b'}",
    "echo \"${u#'$(rm x)'}\" \"${u%%'}'}\" \"${u#${v:-'$(rm x)'}}\"",
    "echo \"${u:-\"'\"}\" \"${u:-$(ls '-d' .)}\" \"${u:-it\\'s}\"",
    "echo \"${u:-\"}\"}\" \"${u:-\\}}\" \"${u:-a\\\"b}\"",
    "cat <<EOF\n${u#'$(rm x)'} it's \"$HOME\" ${u:-\"$(ls)\"}\nEOF",
    "cat <<EOF\nline \\\ncontinued $HOME \\$(rm x)\nEOF",
    "cat <<'EOF'\n${u:-'$(rm x)'}\nEOF",
    "a \"$(b 'x' \"y\")\" `ls`",
];

#[test]
fn sh_runs_the_programs_a_bash_reading_hides_and_they_are_refused() {
    let mut sh = Sh::new();
    for line in HIDDEN {
        let ran = agrees(&mut sh, line);
        // The line is a real bypass under this /bin/sh, not a guess about it.
        assert!(
            ran.iter().any(|p| p == "rm"),
            "/bin/sh ran {ran:?} for {line:?}"
        );
        assert!(inspect_blocking(line).is_err(), "{line:?} was accepted");
    }
}

#[test]
fn lines_both_shells_read_alike_are_accepted() {
    let mut sh = Sh::new();
    for line in ALIKE {
        agrees(&mut sh, line);
        assert!(inspect_blocking(line).is_ok(), "{line:?} was refused");
    }
}

/// Ordinary lines the mutation starts from.
const TEMPLATES: &[&str] = &[
    "echo \"${u:-x}\"; b",
    "echo \"${u#x}\" ls",
    "echo \"${u:-\"x\"}\"",
    "echo ${u:-\"${v:-x}\"}",
    "cat <<E\n${u:-x} $(b) `ls`\nE\na",
    "cat <<E\nx ${u#y} \"z\" 'w'\nE",
    "echo \"$(b \"x\" 'y')\" `ls`",
    "echo $(b # x\n)",
    "case x in x) b;; esac",
    "echo \"${u:+$(b)}\" '${v}' \"$((1+2))\"",
    "f() { b; }; f",
    "echo x \\\n y; b",
    "cat <<-E\n\t${u}\n\tE\nb",
    "b <<E; ls\n$u\nE\n",
    "echo \"${u%%\"x\"}\" ${v##'y'}",
];

/// What the mutation inserts: quote and expansion openers and closers, line breaks,
/// comments, and whole quoted or expanded pieces that carry a program. No `&`: a
/// background program could report after its shell has ended.
const INSERTS: &[&str] = &[
    "'",
    "\"",
    "}",
    "{",
    "${u:-",
    "${u#",
    "${u=",
    "$(",
    ")",
    "`",
    "\\",
    "\\\n",
    "\n",
    "#",
    " #",
    ";",
    "; a; #",
    "$(a)",
    "`a`",
    "$",
    "$\\\n",
    "<<E\n",
    "\nE\n",
    "$((",
    "))",
    "(",
    " ",
    "a",
    "\t",
    "$\"",
    "|",
    "E",
    "'$(a)'",
    "'}'",
    "'\"'",
    "'; a; #'",
    "\"}\"",
    "\"'\"",
    "'#'",
    "\"$(a)\"",
    "'`a`'",
    "\"; a; #\"",
    "'\\'",
    "'\n'",
];

#[test]
fn mutated_lines_never_run_an_unreported_program() {
    let mut sh = Sh::new();
    // xorshift64: deterministic, no dependency.
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        usize::try_from(state % 1_000_003).expect("small")
    };
    let mut accepted = 0;
    for _ in 0..600 {
        let mut line: Vec<char> = TEMPLATES[next() % TEMPLATES.len()].chars().collect();
        for _ in 0..next() % 4 + 1 {
            let at = next() % (line.len() + 1);
            if next() % 4 == 0 && at < line.len() {
                line.remove(at);
            }
            line.splice(at..at, INSERTS[next() % INSERTS.len()].chars());
        }
        let line: String = line.into_iter().collect();
        if inspect_blocking(&line).is_ok() {
            accepted += 1;
            agrees(&mut sh, &line);
        }
    }
    // The mutation must keep producing lines worth running.
    assert!(
        accepted > 100,
        "only {accepted} mutated lines were accepted"
    );
}
