//! From mcp-shell-server's argv array to a `/bin/sh -c` line that runs exactly that argv.
//!
//! This is a security boundary. The rules:
//!
//! - Only an array element that is exactly `;`, `&&`, `||` or `|` is an operator; it splits the
//!   argv into commands and is passed to the shell verbatim. Operators inside an element
//!   (`"a; rm -rf x"`) are text.
//! - The first element of every command must be in the allowlist, compared exactly: `/bin/rm` is
//!   not `rm`, and `rm` is not `/bin/rm`. Wrappers (`env`, `xargs`, `sh`, …) are programs like
//!   any other: listing one allows whatever it runs.
//! - Every other element is single-quoted (`'` becomes `'\''`), so the shell never expands,
//!   splits, globs or redirects it: `$(…)`, backticks, `*`, `>`, `~` and newlines stay literal.
//!
//! The daemon checks the resulting line once more against the same allowlist with its shell
//! parser, so a mistake here alone does not run a program that is not listed.

/// The elements that separate commands.
pub const OPERATORS: [&str; 4] = [";", "&&", "||", "|"];

/// Message of the original server when no allowlist is configured.
pub const NO_COMMANDS_ALLOWED: &str =
    "No commands are allowed. Please set ALLOW_COMMANDS environment variable.";

fn is_operator(element: &str) -> bool {
    OPERATORS.contains(&element)
}

/// Checks an argv against the allowlist. The error is the message the response carries, worded
/// as the original server words it (`Command not allowed: rm`).
pub fn check(argv: &[String], allowed: &[String]) -> Result<(), String> {
    if argv.is_empty() {
        return Err("Empty command".into());
    }
    if allowed.is_empty() {
        return Err(NO_COMMANDS_ALLOWED.into());
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err("Arguments cannot contain NUL characters".into());
    }
    let mut expect_command = true;
    let mut previous_operator: Option<&str> = None;
    for element in argv {
        if is_operator(element) {
            if expect_command {
                return Err(format!("Empty command before shell operator: {element}"));
            }
            expect_command = true;
            previous_operator = Some(element);
            continue;
        }
        if expect_command {
            if !allowed.iter().any(|a| a == element) {
                return Err(format!("Command not allowed: {element}"));
            }
            expect_command = false;
        }
    }
    match (expect_command, previous_operator) {
        (true, Some(op)) => Err(format!("Empty command after shell operator: {op}")),
        _ => Ok(()),
    }
}

/// Single-quotes one word for `/bin/sh`.
pub fn quote(word: &str) -> String {
    let mut q = String::with_capacity(word.len() + 2);
    q.push('\'');
    for c in word.chars() {
        if c == '\'' {
            // Close the quote, add an escaped quote, reopen.
            q.push_str("'\\''");
        } else {
            q.push(c);
        }
    }
    q.push('\'');
    q
}

/// The `sh -c` line for a checked argv: words quoted, operators verbatim.
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| if is_operator(a) { a.clone() } else { quote(a) })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_command_after_an_operator_is_checked() {
        let allowed = v(&["ls", "echo", "grep"]);
        assert_eq!(check(&v(&["ls", "-l"]), &allowed), Ok(()));
        assert_eq!(
            check(&v(&["ls", "|", "grep", "x", "&&", "echo", "ok"]), &allowed),
            Ok(())
        );
        for (argv, bad) in [
            (v(&["rm", "x"]), "rm"),
            (v(&["ls", "&&", "rm", "x"]), "rm"),
            (v(&["ls", ";", "rm"]), "rm"),
            (v(&["ls", "||", "rm"]), "rm"),
            (v(&["ls", "|", "xargs", "rm"]), "xargs"),
            (v(&["/bin/ls"]), "/bin/ls"),
            (v(&["env", "ls"]), "env"),
            (v(&["$(echo ls)"]), "$(echo ls)"),
            (v(&["ls ", "-l"]), "ls "),
        ] {
            assert_eq!(
                check(&argv, &allowed),
                Err(format!("Command not allowed: {bad}")),
                "{argv:?}"
            );
        }
    }

    #[test]
    fn absolute_paths_are_not_their_basename() {
        assert!(check(&v(&["/bin/rm", "x"]), &v(&["rm"])).is_err());
        assert!(check(&v(&["rm", "x"]), &v(&["/bin/rm"])).is_err());
        assert!(check(&v(&["/bin/rm", "x"]), &v(&["/bin/rm"])).is_ok());
    }

    #[test]
    fn misplaced_operators_and_empty_input_are_refused() {
        let allowed = v(&["ls"]);
        assert_eq!(check(&[], &allowed), Err("Empty command".into()));
        assert_eq!(check(&v(&["ls"]), &[]), Err(NO_COMMANDS_ALLOWED.into()));
        assert!(check(&v(&["|", "ls"]), &allowed).is_err());
        assert!(check(&v(&["ls", "&&"]), &allowed).is_err());
        assert!(check(&v(&["ls", ";", ";", "ls"]), &allowed).is_err());
        assert!(check(&v(&["ls", "a\0b"]), &allowed).is_err());
    }

    #[test]
    fn words_are_quoted_and_operators_kept() {
        assert_eq!(
            shell_line(&v(&[
                "echo",
                "a; rm -rf x",
                "&&",
                "echo",
                "it's",
                "$(id)",
                "`id`"
            ])),
            r#"'echo' 'a; rm -rf x' && 'echo' 'it'\''s' '$(id)' '`id`'"#
        );
        assert_eq!(shell_line(&v(&["echo", ""])), "'echo' ''");
    }

    #[test]
    fn quoted_words_reach_the_program_unchanged() {
        let words = v(&[
            "printf",
            "%s|",
            "a; rm -rf x",
            "it's",
            "$(id)",
            "`id`",
            "*",
            "~",
            "a\nb",
            "\\",
            "''",
        ]);
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(shell_line(&words))
            .output()
            .expect("sh");
        let expected: String = words[2..].iter().map(|w| format!("{w}|")).collect();
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    }
}
