//! The line handed to `/bin/sh -c`: a command that is one plain simple command gets `exec `
//! in front, so the shell replaces itself with the program instead of forking it and waiting.
//!
//! # Why
//! dash forks even the last command of a `-c` string. The shell then stays between the daemon
//! and the program: a program killed by a signal is reported by the shell as exit status
//! `128 + N` (137 for SIGKILL) with "Killed" on stderr, instead of the signal itself (DECISIONS
//! promises `-N` / `signal: "SIGKILL"`), and a job killed from outside looks like a failure.
//! With `exec`, the daemon's child *is* the program, so its real end is what gets reported.
//!
//! # When
//! Only when the meaning cannot change, so this is deliberately conservative: every word is
//! plain text (safe unquoted bytes, single quotes, or double quotes without `$`, backquotes or
//! backslashes), nothing else is in the line (no operator, redirection, substitution, glob,
//! comment, newline), the first word is not an assignment, and it is not a shell builtin or
//! keyword — `exec echo` would run `/bin/echo`, which differs from dash's `echo`. Anything else
//! runs as written.

/// Words dash (and, to be safe, bash) treat as builtins or keywords: `exec` in front of one of
/// them would change what runs, or fail.
const SHELL_WORDS: &[&str] = &[
    ".", ":", "[", "!", "{", "}", "alias", "bg", "break", "builtin", "case", "cd", "chdir",
    "command", "continue", "declare", "do", "done", "echo", "elif", "else", "enable", "esac",
    "eval", "exec", "exit", "export", "false", "fc", "fg", "fi", "for", "function", "getopts",
    "hash", "if", "in", "jobs", "kill", "let", "local", "printf", "pwd", "read", "readonly",
    "return", "select", "set", "shift", "source", "test", "then", "times", "trap", "true", "type",
    "typeset", "ulimit", "umask", "unalias", "unset", "until", "wait", "while",
];

/// Bytes that may appear unquoted in a plain word.
fn plain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'_' | b'-' | b'.' | b'/' | b'=' | b':' | b',' | b'+' | b'@' | b'%' | b'^'
        )
}

/// Splits a line into its words with quotes removed, or `None` when it is not plain text.
fn plain_words(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut words = Vec::new();
    let mut i = 0;
    while i < line.len() {
        if matches!(line[i], b' ' | b'\t') {
            i += 1;
            continue;
        }
        let mut word = Vec::new();
        while i < line.len() && !matches!(line[i], b' ' | b'\t') {
            match line[i] {
                b'\'' => {
                    let end = i + 1 + line[i + 1..].iter().position(|&b| b == b'\'')?;
                    word.extend_from_slice(&line[i + 1..end]);
                    i = end + 1;
                }
                b'"' => {
                    let end = i + 1 + line[i + 1..].iter().position(|&b| b == b'"')?;
                    let inner = &line[i + 1..end];
                    if inner.iter().any(|b| matches!(b, b'$' | b'`' | b'\\')) {
                        return None;
                    }
                    word.extend_from_slice(inner);
                    i = end + 1;
                }
                b if plain_byte(b) => {
                    word.push(b);
                    i += 1;
                }
                _ => return None,
            }
        }
        words.push(word);
    }
    Some(words)
}

/// The line to run: `exec ` + `command` when it is one plain simple command (see the module
/// doc), else `command` unchanged.
pub fn exec_single(command: Vec<u8>) -> Vec<u8> {
    let Some(words) = plain_words(&command) else {
        return command;
    };
    let Some(first) = words.first() else {
        return command;
    };
    let is_shell_word = SHELL_WORDS.iter().any(|w| w.as_bytes() == first.as_slice());
    // An assignment (`X=1 prog`), an empty program name or an option-like one stays as written.
    if is_shell_word || first.is_empty() || first.contains(&b'=') || first[0] == b'-' {
        return command;
    }
    let mut line = b"exec ".to_vec();
    line.extend_from_slice(&command);
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(command: &str) -> String {
        String::from_utf8(exec_single(command.as_bytes().to_vec())).expect("utf-8")
    }

    #[test]
    fn one_plain_program_is_execed() {
        assert_eq!(line("sleep 30"), "exec sleep 30");
        assert_eq!(line("  /usr/bin/env -i"), "exec   /usr/bin/env -i");
        assert_eq!(
            line("'printf-x' 'a b' \"c d\" k=v"),
            "exec 'printf-x' 'a b' \"c d\" k=v"
        );
        assert_eq!(line("'sleep' '5'"), "exec 'sleep' '5'");
    }

    #[test]
    fn anything_the_shell_would_interpret_runs_as_written() {
        for command in [
            "",
            "   ",
            "sleep 1; echo x",
            "a && b",
            "a | b",
            "a > f",
            "a < f",
            "a &",
            "echo $HOME",
            "cat \"$F\"",
            "ls *.rs",
            "ls ~",
            "a `b`",
            "a $(b)",
            "a\nb",
            "a # comment",
            "(sleep 1)",
            "{ sleep 1; }",
            "X=1 sleep 1",
            "echo hi",
            "'echo' hi",
            "printf x",
            "cd /tmp",
            "exec sleep 1",
            "kill -9 1",
            "test -f x",
            "if true",
            "'unclosed",
            "a\\ b",
            "-x",
        ] {
            assert_eq!(line(command), command, "{command:?}");
        }
    }

    #[test]
    fn a_signal_reaches_the_daemon_as_a_signal() {
        use std::os::unix::process::ExitStatusExt;
        let run = |command: &str| {
            std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(line(command))
                .status()
                .expect("sh")
        };
        // The program kills itself. Without `exec` the shell would stay between and report
        // exit status 137; with it, the signal is the status.
        let status = run("sh -c 'kill -9 $$'");
        assert_eq!(status.signal(), Some(9), "{status:?}");
        assert_eq!(status.code(), None);
    }
}
