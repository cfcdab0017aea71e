//! The published `mcp-shell-server` 1.1.14's checks on an argv, in its order and with its
//! messages: operators (only a `|` element makes a pipeline; `;`, `&&`, `||`, backquotes and
//! line breaks are refused), redirections (`>`, `>>`, `<` elements with a path), the program
//! name (no shell metacharacters, allowed by name or by a whole-name pattern) and its default
//! policy (interpreters and wrappers refused outright, `find -exec`, `awk` that reaches outside).
//!
//! Not reproduced: the package's option grammars for `git`, `tar` and `sort` (it refuses their
//! options that run external programs); here those programs run as any allowed program does.

use super::config::ShellServerSettings;

/// Where a stage's standard streams go.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Redirects {
    /// `< path`: the file's text becomes stdin.
    pub stdin: Option<String>,
    /// `> path` or `>> path`: stdout goes to the file.
    pub stdout: Option<String>,
    /// `>>` rather than `>`.
    pub append: bool,
}

/// One program to run: its argv without redirections, and those redirections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Its redirections.
    pub redirects: Redirects,
}

/// Programs the package refuses whatever the allowlist says: shells, interpreters and programs
/// that run other programs.
const DANGEROUS_COMMANDS: [&str; 49] = [
    "bash", "bun", "chroot", "csh", "deno", "env", "ex", "fish", "flock", "gdb", "ionice", "ksh",
    "less", "lua", "man", "more", "mysql", "nice", "node", "nohup", "perl", "pg", "php", "psql",
    "python", "python3", "rsync", "ruby", "script", "sed", "setarch", "setsid", "sh", "sqlite3",
    "ssh", "stdbuf", "strace", "taskset", "time", "timeout", "unshare", "valgrind", "vi", "view",
    "vim", "watch", "xargs", "zip", "zsh",
];

/// Other names the package treats as one of its policed programs.
const POLICY_ALIASES: [(&str, &str); 8] = [
    ("bfind", "find"),
    ("bsdtar", "tar"),
    ("gawk", "awk"),
    ("gfind", "find"),
    ("gsort", "sort"),
    ("gtar", "tar"),
    ("mawk", "awk"),
    ("nawk", "awk"),
];

const OPERATORS: [&str; 4] = [";", "&&", "||", "|"];
const REDIRECTIONS: [&str; 3] = [">", ">>", "<"];

fn is_redirection(token: &str) -> bool {
    REDIRECTIONS.contains(&token)
}

/// `Unexpected shell operator: …` for an operator element or one with an operator inside.
fn no_shell_operators(token: &str) -> Result<(), String> {
    let inside = [";", "&&", "||", "`", "\n", "\r"];
    if OPERATORS.contains(&token) || inside.iter().any(|op| token.contains(op)) {
        return Err(format!("Unexpected shell operator: {token}"));
    }
    Ok(())
}

/// The program name, stripped, refusing shell metacharacters.
fn command_name(word: &str) -> Result<&str, String> {
    let name = word.trim();
    if name.is_empty() {
        return Err("Empty command".into());
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || ";&|<>`".contains(c))
    {
        return Err(format!("Unsafe command name: {name}"));
    }
    Ok(name)
}

/// The package's default policy on a program and its arguments.
fn default_policy(name: &str, args: &[String]) -> Result<(), String> {
    let base = name.rsplit('/').next().unwrap_or(name);
    let is_python_version = base.strip_prefix("python").is_some_and(|v| {
        !v.is_empty()
            && v.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    });
    let policy_name = if is_python_version {
        "python"
    } else {
        POLICY_ALIASES
            .iter()
            .find(|(alias, _)| *alias == base)
            .map_or(base, |(_, name)| name)
    };
    let rejected = |what: &str| {
        Err(format!(
            "Command rejected by default security policy: {what}"
        ))
    };
    if DANGEROUS_COMMANDS.contains(&policy_name) {
        return rejected(policy_name);
    }
    let any = |set: &[&str]| args.iter().any(|a| set.contains(&a.as_str()));
    match policy_name {
        "find" if any(&["-exec", "-execdir", "-ok", "-okdir"]) => rejected("find -exec"),
        "find" if any(&["-fprintf", "-fprint", "-fprint0", "-fls"]) => rejected("find file output"),
        "awk" if args.iter().any(|a| awk_reaches_outside(a)) => rejected("awk external access"),
        "git" if args.first().is_some_and(|a| a == "config") => rejected("git config"),
        _ => Ok(()),
    }
}

/// An awk argument that runs a program, pipes, redirects or loads code.
fn awk_reaches_outside(arg: &str) -> bool {
    let compact: String = arg.chars().filter(|c| !c.is_whitespace()).collect();
    compact.contains("system(")
        || compact.contains('|')
        || arg.contains('>')
        || arg.contains('<')
        || ["@include", "@nsinclude", "@load"]
            .iter()
            .any(|d| arg.split_whitespace().any(|w| w.starts_with(d)))
        || (arg.starts_with('-')
            && !arg.starts_with("--")
            && arg[1..].chars().next().is_some_and(|c| "Eefil".contains(c)))
}

/// The package's `validate_command`: allowlist configured, name form, default policy, allowed.
pub fn check_command(argv: &[String], s: &ShellServerSettings) -> Result<(), String> {
    let Some(first) = argv.first() else {
        return Err("Empty command".into());
    };
    if s.allowed.is_empty() && s.patterns.is_empty() {
        return Err(
            "No commands are allowed. Please set ALLOW_COMMANDS environment variable.".into(),
        );
    }
    let name = command_name(first)?;
    default_policy(name, &argv[1..])?;
    if !s.allowed.iter().any(|a| a == name) && !s.patterns.iter().any(|p| p.is_match(name)) {
        return Err(format!("Command not allowed: {name}"));
    }
    Ok(())
}

/// Splits off redirections, with the package's messages for a missing or operator target.
fn redirections(tokens: &[String]) -> Result<Stage, String> {
    let mut argv = Vec::new();
    let mut r = Redirects::default();
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].as_str();
        match token {
            ">" | ">>" => {
                let target = tokens
                    .get(i + 1)
                    .ok_or("Missing path for output redirection")?;
                if is_redirection(target) {
                    return Err("Invalid redirection target: operator found".into());
                }
                r.stdout = Some(target.clone());
                r.append = token == ">>";
                i += 2;
            }
            "<" => {
                let target = tokens
                    .get(i + 1)
                    .ok_or("Missing path for input redirection")?;
                if is_redirection(target) {
                    return Err("Invalid redirection syntax: consecutive operators".into());
                }
                r.stdin = Some(target.clone());
                i += 2;
            }
            _ => {
                argv.push(token.to_string());
                i += 1;
            }
        }
    }
    Ok(Stage { argv, redirects: r })
}

/// Checks a whole argv (empty elements already removed) and splits it into the stages to run:
/// one, or one per `|`-separated segment.
pub fn plan(tokens: &[String], s: &ShellServerSettings) -> Result<Vec<Stage>, String> {
    if tokens.is_empty() {
        return Err("Empty command".into());
    }
    if tokens.iter().any(|t| t == "|") {
        let mut segments: Vec<Vec<String>> = vec![Vec::new()];
        for token in tokens {
            if token == "|" {
                let current = segments.last().map_or(0, Vec::len);
                if current == 0 {
                    return Err("Empty command before pipe operator".into());
                }
                segments.push(Vec::new());
            } else if [";", "&&", "||"].contains(&token.as_str()) {
                return Err(format!("Unexpected shell operator in pipeline: {token}"));
            } else {
                if segments.last().is_some_and(Vec::is_empty) {
                    no_shell_operators(token)?;
                }
                if let Some(segment) = segments.last_mut() {
                    segment.push(token.clone());
                }
            }
            // Each finished segment is checked as soon as its `|` is seen, as the package does.
            if token == "|"
                && let Some(done) = segments.iter().rev().nth(1)
            {
                check_command(done, s)?;
            }
        }
        segments.retain(|seg| !seg.is_empty());
        if let Some(last) = segments.last() {
            check_command(last, s)?;
        }
        let mut stages = Vec::with_capacity(segments.len());
        for segment in &segments {
            stages.push(redirections(segment)?);
        }
        return Ok(stages);
    }
    for token in tokens {
        no_shell_operators(token)?;
    }
    let stage = redirections(tokens)?;
    check_command(&stage.argv, s)?;
    Ok(vec![stage])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(allowed: &[&str]) -> ShellServerSettings {
        ShellServerSettings {
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            patterns: vec![regex::Regex::new("^(?:py.*)$").expect("regex")],
            pattern_sources: vec!["py.*".into()],
            default_timeout_secs: 30,
            max_timeout_secs: 300,
            output_limit: 1024,
            path: "/usr/bin:/bin".into(),
        }
    }

    fn v(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn refusals_use_the_packages_words() {
        let s = settings(&["echo", "ls", "cat", "find", "awk", "sh"]);
        for (argv, message) in [
            (v(&["rm", "x"]), "Command not allowed: rm"),
            (v(&["ls", ";", "echo"]), "Unexpected shell operator: ;"),
            (v(&["echo", "a;b"]), "Unexpected shell operator: a;b"),
            (v(&["echo", "`id`"]), "Unexpected shell operator: `id`"),
            (
                v(&["ls", "|", "echo", "&&"]),
                "Unexpected shell operator in pipeline: &&",
            ),
            (v(&["|", "ls"]), "Empty command before pipe operator"),
            (
                v(&["sh", "-c", "x"]),
                "Command rejected by default security policy: sh",
            ),
            (
                v(&["python3.12"]),
                "Command rejected by default security policy: python",
            ),
            (
                v(&["find", ".", "-exec", "rm", "{}", ";"]),
                "Unexpected shell operator: ;",
            ),
            (
                v(&["find", ".", "-exec", "rm"]),
                "Command rejected by default security policy: find -exec",
            ),
            (
                v(&["awk", "BEGIN{system(\"id\")}"]),
                "Command rejected by default security policy: awk external access",
            ),
            (v(&["ls x"]), "Unsafe command name: ls x"),
            (v(&["echo", ">"]), "Missing path for output redirection"),
            (
                v(&["echo", ">", ">", "x"]),
                "Invalid redirection target: operator found",
            ),
            (v(&["cat", "<"]), "Missing path for input redirection"),
        ] {
            assert_eq!(plan(&argv, &s), Err(message.to_string()), "{argv:?}");
        }
    }

    #[test]
    fn pipelines_and_redirections_become_stages() {
        let s = settings(&["echo", "tr", "cat"]);
        let stages = plan(&v(&["echo", "a", "|", "tr", "a", "b", ">", "out"]), &s).expect("plan");
        assert_eq!(stages.len(), 2);
        assert_eq!(stages[0].argv, ["echo", "a"]);
        assert_eq!(stages[1].argv, ["tr", "a", "b"]);
        assert_eq!(stages[1].redirects.stdout.as_deref(), Some("out"));
        let stages = plan(&v(&["cat", "<", "in", ">>", "log"]), &s).expect("plan");
        assert_eq!(stages[0].argv, ["cat"]);
        assert_eq!(stages[0].redirects.stdin.as_deref(), Some("in"));
        assert!(stages[0].redirects.append);
        assert!(plan(&v(&["pyx"]), &s).is_ok(), "pattern match");
        assert_eq!(
            plan(&v(&["ls"]), &settings(&[])).expect_err("not allowed"),
            "Command not allowed: ls"
        );
    }
}
