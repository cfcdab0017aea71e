//! Property tests. Cases: `PROPTEST_CASES` (default 64: each call is a round trip to a
//! parser thread); a longer run is `PROPTEST_CASES=20000 cargo test -p yieldshelld prop_`.

use super::*;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Pieces of shell syntax, so random lines reach deep into the grammar.
const PIECES: &[&str] = &[
    "$(", ")", "`", "'", "\"", "\\", "${", "}", "{", "(", "((", "))", "[[", "]]", "<<", "EOF",
    "\n", ";", "&", "|", "&&", "||", "<(", ">(", "$((", "case", " in ", "esac", ";;", "if ",
    "then", "fi", "for ", "do", "done", "ls", "rm", " ", "$'", "#", "!", "*", "~", "=", "a=", ":-",
    ":=", "<<-", "<<<", ">&", "2>", "\t", "$", "@", "x",
];

fn shellish() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|p| p.concat()),
    ]
}

const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while", "until", "for",
    "in", "function", "select", "time", "coproc",
];

/// A simple command: a program name and plain arguments, sometimes with a `$(…)` inside.
fn simple() -> impl Strategy<Value = (Vec<String>, String)> {
    let name =
        "[a-z][a-z0-9_.-]{0,7}".prop_filter("not a keyword", |n| !RESERVED.contains(&n.as_str()));
    let arg = "[a-zA-Z0-9_./-]{1,8}";
    (
        name.clone(),
        prop::collection::vec(arg, 0..4),
        prop::option::of((name, prop::collection::vec(arg, 0..3))),
    )
        .prop_map(|(prog, args, inner)| {
            let mut names = vec![prog.clone()];
            let mut line = std::iter::once(prog)
                .chain(args)
                .collect::<Vec<_>>()
                .join(" ");
            if let Some((inner_prog, inner_args)) = inner {
                names.push(inner_prog.clone());
                let inner_line = std::iter::once(inner_prog)
                    .chain(inner_args)
                    .collect::<Vec<_>>()
                    .join(" ");
                line.push_str(&format!(" \"$({inner_line})\""));
            }
            (names, line)
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_any_line_is_answered_without_panic_or_hang(line in shellish()) {
        let started = std::time::Instant::now();
        let _ = program_names(&line);
        prop_assert!(started.elapsed() < std::time::Duration::from_secs(10), "{line:?} took {:?}", started.elapsed());
    }

    /// Differential: for plain commands joined by operators, the parser agrees with the
    /// obvious reading (every command's first word, in order, without repeats).
    #[test]
    fn prop_plain_command_lists_name_every_program(
        cmds in prop::collection::vec(simple(), 1..6),
        ops in prop::collection::vec(prop::sample::select(vec![" ; ", " && ", " || ", " | ", " & ", "\n"]), 5),
    ) {
        let mut line = String::new();
        let mut expected: Vec<String> = Vec::new();
        for (i, (names, text)) in cmds.iter().enumerate() {
            if i > 0 {
                line.push_str(ops[i - 1]);
            }
            line.push_str(text);
            for n in names {
                if !expected.contains(n) {
                    expected.push(n.clone());
                }
            }
        }
        prop_assert_eq!(program_names(&line), Ok(expected), "{:?}", line);
    }
}
