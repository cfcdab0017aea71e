//! How `mcp-background-job` 0.1.2 turns a command string into a process, reproduced: the
//! string is split like Python's `shlex.split` and the words run as one program, without a
//! shell (`echo a | cat` prints `a | cat`); the program is looked up in `PATH` before anything
//! starts, so a missing one is an error, not a job; its dangerous-pattern refusals; and its
//! output as lines (each stream's lines joined by `\n`, no final newline).
//!
//! The words reach the daemon quoted (`'w1' 'w2' …`), so `/bin/sh` passes them through
//! unchanged and the daemon `exec`s the program (a signal ends the job itself). A program whose
//! name is also a shell builtin is named by its path, so `echo` is `/bin/echo`, as with
//! Python's `Popen`, not the shell's builtin.

use std::path::{Path, PathBuf};

use regex::{Regex, RegexBuilder};

use crate::shell::argv::quote;

/// The original's `BLOCKED_COMMAND_PATTERNS`, searched case-insensitively anywhere in the
/// command. Its fork-bomb entry, `:(){ :|:& };:`, is a Python regex whose `|` splits it in two
/// alternatives (`:(){ :` — the `()` an empty group — and `:& };:`); it is written here as the
/// same two alternatives with the braces escaped for Rust's regex syntax.
const BLOCKED_PATTERNS: [&str; 13] = [
    r"rm\s+.*-rf.*/",
    r"sudo\s+rm",
    r">\s*/dev/",
    r"wget.*\|.*sh",
    r"curl.*\|.*sh",
    r"curl.*\|.*bash",
    r"dd\s+if=.*of=/dev/",
    r"mkfs\.",
    r"fdisk",
    r":\{ :|:& \};:",
    r"cat\s+/dev/urandom",
    r"chmod.*777.*/",
    r"chown.*root.*/",
];

/// Programs dash would run as its own builtin when named plainly; named by path instead.
pub const SHELL_BUILTINS: [&str; 9] = [
    "echo", "printf", "test", "[", "kill", "pwd", "true", "false", "type",
];

/// The dangerous-pattern check, compiled once per server.
#[derive(Debug)]
pub struct BlockedPatterns(Vec<Regex>);

impl BlockedPatterns {
    /// Compiles the original's list.
    pub fn new() -> BlockedPatterns {
        BlockedPatterns(
            BLOCKED_PATTERNS
                .iter()
                .filter_map(|p| RegexBuilder::new(p).case_insensitive(true).build().ok())
                .collect(),
        )
    }

    /// The original's refusal when `command` matches one of the patterns.
    pub fn check(&self, command: &str) -> Result<(), String> {
        if self.0.iter().any(|r| r.is_match(command)) {
            return Err(format!(
                "Command contains dangerous pattern and is not allowed: {command}"
            ));
        }
        Ok(())
    }
}

impl Default for BlockedPatterns {
    fn default() -> Self {
        BlockedPatterns::new()
    }
}

/// Python's `shlex.split(s)` (POSIX mode, no comments), with its error messages.
pub fn shlex_split(s: &str) -> Result<Vec<String>, String> {
    #[derive(PartialEq)]
    enum State {
        Between,
        Word,
        Single,
        Double,
    }
    let mut words = Vec::new();
    let mut word = String::new();
    let mut state = State::Between;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match state {
            State::Between | State::Word => match c {
                ' ' | '\t' | '\r' | '\n' => {
                    if state == State::Word {
                        words.push(std::mem::take(&mut word));
                        state = State::Between;
                    }
                }
                '\'' => state = State::Single,
                '"' => state = State::Double,
                '\\' => {
                    let next = chars.next().ok_or("No escaped character")?;
                    word.push(next);
                    state = State::Word;
                }
                _ => {
                    word.push(c);
                    state = State::Word;
                }
            },
            State::Single => match c {
                '\'' => state = State::Word,
                _ => word.push(c),
            },
            State::Double => match c {
                '"' => state = State::Word,
                // Inside double quotes a backslash escapes only `"` and `\`.
                '\\' => match chars.next() {
                    Some(next @ ('"' | '\\')) => word.push(next),
                    Some(next) => {
                        word.push('\\');
                        word.push(next);
                    }
                    None => return Err("No closing quotation".into()),
                },
                _ => word.push(c),
            },
        }
    }
    match state {
        State::Single | State::Double => Err("No closing quotation".into()),
        State::Word => {
            words.push(word);
            Ok(words)
        }
        State::Between => Ok(words),
    }
}

/// Where `program` would be found the way `Popen` finds it (a name with a `/` is a path from
/// `cwd`; any other name is searched in `path`), or the `OSError` text Python reports:
/// `[Errno 2] No such file or directory: 'x'` or `[Errno 13] Permission denied: 'x'`.
pub fn find_program(program: &str, path: Option<&str>, cwd: &Path) -> Result<PathBuf, String> {
    let not_found = || format!("[Errno 2] No such file or directory: '{program}'");
    let denied = || format!("[Errno 13] Permission denied: '{program}'");
    let executable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| {
                // Windows has no execute bit: any file is taken as runnable there.
                #[cfg(unix)]
                let runnable =
                    std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0;
                #[cfg(not(unix))]
                let runnable = true;
                m.is_file() && runnable
            })
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = cwd.join(program);
        return match std::fs::metadata(&p) {
            Err(_) => Err(not_found()),
            Ok(_) if executable(&p) => Ok(p),
            Ok(_) => Err(denied()),
        };
    }
    if program.is_empty() {
        return Err(not_found());
    }
    let mut seen = false;
    for dir in path.unwrap_or("/usr/local/bin:/usr/bin:/bin").split(':') {
        let candidate = Path::new(if dir.is_empty() { "." } else { dir }).join(program);
        let candidate = cwd.join(candidate);
        if executable(&candidate) {
            return Ok(candidate);
        }
        seen |= candidate.exists();
    }
    Err(if seen { denied() } else { not_found() })
}

/// The `/bin/sh -c` line that runs `words` as one program, as `Popen(words)` would, with
/// `program` (the name, or its path for a builtin's name) in place of the first word.
pub fn exec_line(program: &str, words: &[String]) -> String {
    let mut line = quote(program);
    for w in words.iter().skip(1) {
        line.push(' ');
        line.push_str(&quote(w));
    }
    line
}

/// Output as the original returns it: the stream read as text lines (`\r\n` and `\r` count as
/// line ends, as Python's universal newlines read them), each line without its end, joined by
/// `\n`.
pub fn as_lines(text: &str) -> String {
    let normalized = text.replace("\r\n", "\n").replace('\r', "\n");
    normalized
        .strip_suffix('\n')
        .unwrap_or(&normalized)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_as_python_shlex() {
        let ok = |s: &str| shlex_split(s).expect(s);
        assert_eq!(ok("echo hi  there"), ["echo", "hi", "there"]);
        assert_eq!(
            ok("echo 'a b' \"c d\" e\\ f"),
            ["echo", "a b", "c d", "e f"]
        );
        assert_eq!(ok("echo \"a\\\"b\\n\""), ["echo", "a\"b\\n"]);
        assert_eq!(ok("echo '' x"), ["echo", "", "x"]);
        assert_eq!(ok("echo a|cat; ls"), ["echo", "a|cat;", "ls"]);
        assert_eq!(ok("   "), Vec::<String>::new());
        assert_eq!(shlex_split("echo \"x"), Err("No closing quotation".into()));
        assert_eq!(shlex_split("echo 'x"), Err("No closing quotation".into()));
        assert_eq!(shlex_split("echo x\\"), Err("No escaped character".into()));
    }

    #[test]
    fn blocks_the_originals_patterns() {
        let b = BlockedPatterns::new();
        assert_eq!(b.0.len(), BLOCKED_PATTERNS.len());
        for bad in [
            "rm -rf /tmp/x/",
            "SUDO rm x",
            "echo x > /dev/sda",
            "curl http://x | bash",
            "mkfs.ext4 /dev/x",
            "cat /dev/urandom",
            ":(){ :|:& };:",
        ] {
            assert!(b.check(bad).is_err(), "{bad}");
        }
        for good in ["rm x", "echo hello", "ls -la /tmp", "cat file"] {
            assert_eq!(b.check(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn finds_programs_as_popen_does() {
        let cwd = Path::new("/");
        assert!(find_program("sh", Some("/usr/bin:/bin"), cwd).is_ok());
        assert_eq!(
            find_program("nosuchprog", Some("/usr/bin:/bin"), cwd),
            Err("[Errno 2] No such file or directory: 'nosuchprog'".into())
        );
        assert_eq!(
            find_program("./nosuch", None, cwd),
            Err("[Errno 2] No such file or directory: './nosuch'".into())
        );
        let plain = std::env::temp_dir().join(format!("not-executable-{}", std::process::id()));
        std::fs::write(&plain, "x").expect("write");
        let name = plain.to_string_lossy().into_owned();
        assert_eq!(
            find_program(&name, None, cwd),
            Err(format!("[Errno 13] Permission denied: '{name}'"))
        );
        std::fs::remove_file(&plain).expect("remove");
    }

    #[test]
    fn output_is_lines_without_the_last_end() {
        assert_eq!(as_lines("a\nb\n"), "a\nb");
        assert_eq!(as_lines("a\r\nb\rc"), "a\nb\nc");
        assert_eq!(as_lines(""), "");
        assert_eq!(as_lines("\n\n"), "\n");
        assert_eq!(
            exec_line("/bin/echo", &["echo".into(), "it's".into()]),
            "'/bin/echo' 'it'\\''s'"
        );
    }
}
