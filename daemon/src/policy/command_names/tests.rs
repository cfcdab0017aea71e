//! Unit tests of the command-line inspection: accepted lines and their names, and every
//! class of refusal.

use super::*;

/// Names of an accepted line; fails the test on refusal.
fn names(line: &str) -> Vec<String> {
    program_names(line).unwrap_or_else(|e| panic!("{line:?} refused: {e}"))
}

/// Asserts that `line` yields exactly `expected`.
fn check(line: &str, expected: &[&str]) {
    assert_eq!(names(line), expected, "for {line:?}");
}

/// Asserts that `line` is refused as dynamic.
fn refused_dynamic(line: &str) {
    let result = program_names(line);
    assert!(
        matches!(result, Err(CommandParseError::Dynamic(_))),
        "{line:?} gave {result:?}"
    );
}

/// Asserts that `line` is refused as a syntax error.
fn refused_syntax(line: &str) {
    let result = program_names(line);
    assert!(
        matches!(result, Err(CommandParseError::Syntax(_))),
        "{line:?} gave {result:?}"
    );
}

#[test]
fn empty_lines_have_no_programs() {
    check("", &[]);
    check("   \t\n  ", &[]);
    check("# only a comment", &[]);
}

#[test]
fn lists_and_pipelines() {
    check("ls -la", &["ls"]);
    check(
        "a; b && c || d | e & f\ng",
        &["a", "b", "c", "d", "e", "f", "g"],
    );
    check("a |& b", &["a", "b"]);
    check("time ls; ! grep x", &["time", "ls", "grep"]);
    check("ls # ; rm -rf /", &["ls"]);
}

#[test]
fn duplicates_are_removed_in_first_seen_order() {
    check("ls; pwd; ls; pwd", &["ls", "pwd"]);
}

#[test]
fn quotes_are_removed_from_the_program() {
    check("'ls' -l", &["ls"]);
    check("\"ls\" -l", &["ls"]);
    check(r"l\s", &["ls"]);
    check("l's'", &["ls"]);
    check("l\\\ns", &["ls"]);
    check("'my prog' x", &["my prog"]);
    check("g++ -o x x.c", &["g++"]);
}

#[test]
fn paths_are_kept_as_written() {
    check("/bin/rm -rf x", &["/bin/rm"]);
    check("./build.sh && ../x", &["./build.sh", "../x"]);
}

#[test]
fn wrappers_and_builtins_are_not_looked_through() {
    check(
        "env rm; sudo rm; xargs rm; eval 'rm x'; exec rm; command rm; builtin cd; nohup rm",
        &[
            "env", "sudo", "xargs", "eval", "exec", "command", "builtin", "nohup",
        ],
    );
    check("[ -f x ] && echo yes", &["[", "echo"]);
}

#[test]
fn compound_commands() {
    check("(cd x && make)", &["cd", "make"]);
    check("{ ls; pwd; }", &["ls", "pwd"]);
    check(
        "if a; then b; elif c; then d; else e; fi",
        &["a", "b", "c", "d", "e"],
    );
    check(
        "while a; do b; done; until c; do d; done",
        &["a", "b", "c", "d"],
    );
    check("for f in $(ls); do cat \"$f\"; done", &["ls", "cat"]);
    check(
        "case $(uname) in Linux) echo l;; *) rm x;; esac",
        &["uname", "echo", "rm"],
    );
    check("case x in $(rm y)) ;; esac", &["rm"]);
    check("{ ls; } > $(rm x)", &["ls", "rm"]);
}

#[test]
fn function_bodies_count_even_if_never_called() {
    check("f() { rm x; }; f", &["rm", "f"]);
    check("function g { ls; }", &["ls"]);
    check("h() ( pwd ) > $(rm x)", &["pwd", "rm"]);
}

#[test]
fn command_substitutions_in_arguments() {
    check("echo $(rm x)", &["echo", "rm"]);
    check("echo `rm x`", &["echo", "rm"]);
    check("echo $(echo $(rm x))", &["echo", "rm"]);
    check("echo \"$(echo \"$(rm x)\")\"", &["echo", "rm"]);
    check("echo \"a $(rm x) b\"", &["echo", "rm"]);
    check("echo \"`rm x`\"", &["echo", "rm"]);
    check("echo $\"$(rm x)\"", &["echo", "rm"]);
}

#[test]
fn substitutions_in_parameter_expansions() {
    check("echo ${X:-$(rm x)}", &["echo", "rm"]);
    check("echo \"${X:+\"$(rm x)\"}\"", &["echo", "rm"]);
    check("echo ${X:=`rm x`} ${X:?$(ls)}", &["echo", "rm", "ls"]);
    check("echo ${X#$(rm x)} ${X%%$(ls)}", &["echo", "rm", "ls"]);
    check("echo ${X/a/$(rm x)} ${X//$(ls)}", &["echo", "rm", "ls"]);
    check("echo ${X^^$(rm x)}", &["echo", "rm"]);
    check("echo ${a[0]} ${x:1:2} ${#x} ${x@Q} ${!pre*}", &["echo"]);
}

#[test]
fn substitutions_in_assignments() {
    check("A=$(rm x) ls", &["rm", "ls"]);
    check("A=$(rm x)", &["rm"]);
    check("A=1 B=2", &[]);
    check("a=(x $(rm y))", &["rm"]);
    check("export A=$(rm x)", &["export", "rm"]);
    check("a=(x [1]=y)", &[]);
}

#[test]
fn substitutions_in_redirections() {
    check("ls > $(rm x)", &["ls", "rm"]);
    check("ls 2>&1 >\"$(rm x)\"", &["ls", "rm"]);
    check("ls 2>&1 >| `rm x`", &["ls", "rm"]);
    check("cat <<< \"$(rm x)\"", &["cat", "rm"]);
    check("> $(rm x)", &["rm"]);
}

#[test]
fn process_substitutions() {
    check("diff <(ls a) <(rm b)", &["diff", "ls", "rm"]);
    check("tee >(rm x)", &["tee", "rm"]);
    check("ls > >(rm x)", &["ls", "rm"]);
    check("cat < <(rm x)", &["cat", "rm"]);
    check("echo a<(rm x)", &["echo", "rm"]);
}

#[test]
fn here_documents() {
    check("cat <<EOF\n$(rm x)\nEOF", &["cat", "rm"]);
    check("cat <<EOF\n`rm x`\nEOF", &["cat", "rm"]);
    check("cat <<-EOF\n\t${X:-$(rm x)}\n\tEOF", &["cat", "rm"]);
    check(
        "cat <<EOF; ls\n$(rm x)\nEOF\npwd",
        &["cat", "rm", "ls", "pwd"],
    );
    check("cat <<EOF\n\\\\$(rm x)\nEOF", &["cat", "rm"]);
    check("cat <<EOF\n'$(rm x)' \"$(ls)\"\nEOF", &["cat", "rm", "ls"]);
    check(
        "cat <<EOF\n$(echo \")\"; rm x)\nEOF",
        &["cat", "echo", "rm"],
    );
    check(
        "cat <<EOF\nit's $HOME (and \\$(not) this) $((1+2))\nEOF",
        &["cat"],
    );
    // Any quoting of the delimiter turns expansion off.
    check("cat <<'EOF'\n$(rm x)\nEOF", &["cat"]);
    check("cat <<\"EOF\"\n$(rm x)\nEOF", &["cat"]);
    check("cat <<\\EOF\n$(rm x)\nEOF", &["cat"]);
    check("cat <<E'O'F\n$(rm x)\nEOF", &["cat"]);
}

#[test]
fn here_documents_that_cannot_be_isolated_are_refused() {
    refused_syntax("cat <<EOF\n$(\nEOF");
    refused_syntax("cat <<EOF\n$(cat <<X\nhi\nX\n)\nEOF");
    refused_syntax("cat <<EOF\n$(case x in a) rm;; esac)\nEOF");
    refused_dynamic("cat <<EOF\n${a[i]}\nEOF");
}

#[test]
fn here_document_backtracking_is_bounded() {
    // Each of these took seconds to minutes in `word::parse_heredoc`.
    for body in ["$((", "$(", "${a[", "$(((", "$(x "] {
        let line = format!("cat <<EOF\n{}\nEOF\n", body.repeat(12));
        let start = std::time::Instant::now();
        assert!(program_names(&line).is_err(), "{line:?}");
        assert!(start.elapsed().as_secs() < 2, "{line:?} is slow");
    }
}

#[test]
fn arithmetic_is_only_accepted_with_literals() {
    check("echo $((1+2)) $[3*4] $((16#ff << 2))", &["echo"]);
    refused_dynamic("echo $(( $(rm x) ))");
    refused_dynamic("echo $((i+1))");
    refused_dynamic("echo $(( $x ))");
    refused_dynamic("echo ${a[i]} ");
    refused_dynamic("echo ${a[$(rm x)]}");
    refused_dynamic("echo ${x:i}");
    refused_dynamic("a=([i]=1)");
}

#[test]
fn code_evaluating_expansions_are_refused() {
    refused_dynamic("echo ${!x}");
    refused_dynamic("echo ${x@P}");
}

#[test]
fn dynamic_program_words_are_refused() {
    for line in [
        "$CMD",
        "${CMD} x",
        "\"$X\"",
        "$(echo ls)",
        "`echo ls`",
        "$((1))",
        "l*",
        "l?",
        "[l]s",
        "{ls,rm}",
        "@(ls|rm)",
        "~/bin/x",
        "ls; $CMD",
        "echo $(a=1; $b)",
    ] {
        refused_dynamic(line);
    }
}

#[test]
fn bash_only_syntax_is_refused() {
    // Each of these runs `rm` (or an unlisted program) under dash.
    for line in [
        "echo $'\\' ; rm x\necho '",
        "$'ls'",
        "[[ a || rm ]]",
        "[[ -n $(rm x) ]]",
        "(( 1 + 2 ))",
        "for ((i=0;i<3;i++)); do ls; done",
        "coproc ls",
        "a[1]=x",
        "B+=y ls",
        "true &>/dev/null rm x",
        "true &>>log rm x",
        "cat <<$'X'\n$X\nrm x\nX",
        "cat <<$\"X\"\n$X\nrm x\nX",
        "cat <<\"A\\B\"\nA\\B\nrm x\nAB",
    ] {
        refused_syntax(line);
    }
}

#[test]
fn single_quotes_in_double_quoted_parameter_words_are_refused() {
    // Inside double quotes dash reads a `'` in these words as a plain character (bash as a
    // quote): each line runs `rm` under /bin/sh, unseen by a bash reading.
    for op in ["-", ":-", "+", ":+", "=", ":=", "?", ":?"] {
        refused_syntax(&format!("u=1; echo \"${{u{op}'}}\"; rm x; #'}}\""));
        refused_syntax(&format!("echo \"${{u{op}'$(rm x)'}}\""));
    }
    for line in [
        "echo \"${u:-'`rm x`'}\"",
        "echo \"${u-\\\n'$(rm x)'}\"",
        // bash's own forms, which dash rejects only once they are expanded.
        "(echo \"${u/'}\"); rm x; #'/x}\")",
        "(echo \"${u/x/'}\"); rm x; #'}\")",
        "(echo \"${u^'}\"); rm x; #'}\")",
        "(echo \"${u,,'}\"); rm x; #'}\")",
        // Nested: a `${…}` in such a word, or in double quotes inside an unquoted one.
        "echo \"${u:-${v:-'$(rm x)'}}\"",
        "echo \"${u:-\"${v:-'$(rm x)'}\"}\"",
        "echo ${u:-\"${v:-'$(rm x)'}\"}",
        "echo $\"${u:-'$(rm x)'}\"",
        // An unquoted here-document body reads like double quotes.
        "cat <<EOF\n${u:-'$(rm x)'}\nEOF",
        "cat <<EOF\n${u:-'}$(rm x)'}\nEOF",
        "cat <<EOF\n\"${u+'}$(rm x)'}\"\nEOF",
    ] {
        refused_syntax(line);
    }
    // Where both shells take `'` for a quote, or never see one, the words are still read.
    check("echo ${u:-'$(rm x)'} ${u:+'a b'}", &["echo"]);
    check("echo \"${u#'$(rm x)'}\" \"${u%%'}'}\"", &["echo"]);
    check("echo \"${u#${v:-'$(rm x)'}}\"", &["echo"]);
    check(
        "echo \"${u:-\"'\"}\" \"${u:-$(printf '%s' x)}\" \"${u:-it\\'s}\"",
        &["echo", "printf"],
    );
    check(
        "cat <<EOF\n${u#'$(rm x)'} it's \"$HOME\" ${u:-\"$(ls)\"}\nEOF",
        &["cat", "ls"],
    );
}

#[test]
fn here_document_dollar_before_a_line_continuation_is_refused() {
    // dash joins `$\⏎(` into `$(` inside a here-document and runs `rm`.
    refused_syntax("cat <<EOF\n$\\\n(rm x)\nEOF");
    refused_syntax("cat <<EOF\n$\\\n{u:-$(rm x)}\nEOF");
    refused_syntax("cat <<EOF\n$(echo $\\\n(rm x))\nEOF");
    check("cat <<EOF\nline \\\ncontinued $HOME \\$\nEOF", &["cat"]);
}

#[test]
fn backslashes_inside_backquotes_are_refused() {
    // bash runs `rm` here because it unescapes `\$` inside backquotes.
    refused_dynamic("echo `echo \\$(rm x)`");
    check("echo `echo \\`rm x\\``", &["echo", "rm"]);
}

#[test]
fn assignments_that_change_lookup_are_refused() {
    for line in [
        "PATH=/tmp ls",
        "PATH=/tmp; ls",
        "LD_PRELOAD=x.so ls",
        "BASH_ENV=x bash",
        "export PATH=/x",
        "for PATH in /tmp; do ls; done",
        ": ${PATH:=/tmp}",
    ] {
        refused_dynamic(line);
    }
    check("MYPATH=/tmp ls", &["ls"]);
}

#[test]
fn syntax_errors_are_refused() {
    for line in [
        "echo 'unterminated",
        "echo \"x",
        "ls &&",
        "(",
        "if true; then",
        "echo $(",
        "echo $(ls",
        "echo `ls",
        "case x in",
        "ls |",
        "select x in a b; do rm; done",
        "echo $(case a in a) ls;; esac)",
    ] {
        refused_syntax(line);
    }
}

#[test]
fn here_document_lines_that_break_brush_are_refused() {
    // Each of these panics inside brush-parser 0.4.0's tokenizer.
    refused_syntax("cat <<EOF $(a\n)\nbody\nEOF");
    refused_syntax("cat <<EOF \"x\ny\" ${a\n}\nbody\nEOF");
    refused_syntax("cat <<EOF `b` \"$(a\n)\"\nbody\nEOF");
    refused_syntax("cat <<EOF \\\n$(rm x)\nEOF");
    check("cat <<'EOF' > \"$f\" # it's\nbody\nEOF", &["cat"]);
    check(
        "cat <<EOF | grep \"a b\" && ls\n$HOME\nEOF",
        &["cat", "grep", "ls"],
    );
}

#[test]
fn mangled_tokens_are_refused() {
    // brush 0.4.0 tokenizes this into words ` rm` and ` ls` with a leading blank.
    refused_syntax("echo $(cat <<EOF 'a\nb'; rm x; ls)\nline\nEOF");
    // ...and hoists `rm x` out of the substitution, leaving `$()`: bash runs `rm`.
    refused_syntax("cat <<EOF $(A=\"m\nn\" rm x)\nline\nEOF\n");
    // A comment inside `$(…)` is dropped from the word, so it no longer matches
    // the source; refused rather than told apart from the case above.
    refused_syntax("echo $(echo a # )\nrm x)");
    check("echo 'a\\\nb' \\\n \"c\"", &["echo"]);
}

#[test]
fn size_limits() {
    refused_syntax(&"ls;".repeat(MAX_LINE_BYTES));
    refused_syntax(&format!(
        "{}ls{}",
        "{ ".repeat(MAX_OPENERS + 1),
        "; }".repeat(MAX_OPENERS + 1)
    ));
    refused_syntax(&format!("[[ {} x ]]", "! ".repeat(MAX_OPENERS + 1)));
    // Well inside the limits: nesting that overflows a 2 MiB stack in brush.
    let deep = format!("{}ls{}", "{ ".repeat(200), "; }".repeat(200));
    check(&deep, &["ls"]);
    let deep = format!("{}rm x{}", "echo $(".repeat(150), ")".repeat(150));
    check(&deep, &["echo", "rm"]);
}

#[test]
fn numbers_that_panic_brush_are_refused() {
    refused_syntax("echo ~99999999999999999999999");
    refused_syntax("echo ~+99999999999999999999999 ~-1");
    refused_syntax("ls 99999999999>out");
    check("echo 12345678901234567890 ~1 ~+2 2>x", &["echo"]);
}

#[test]
fn garbage_never_panics() {
    const PIECES: &[&str] = &[
        "$(",
        ")",
        "`",
        "'",
        "\"",
        "\\",
        "${",
        "}",
        "{",
        "(",
        "((",
        "))",
        "[[",
        "]]",
        "<<",
        "EOF",
        "\n",
        ";",
        "&",
        "|",
        "<(",
        ">(",
        "$((",
        "case",
        " in ",
        "esac",
        ";;",
        "if ",
        "then",
        "fi",
        "for ",
        "do",
        "done",
        "a",
        "ls",
        " ",
        "$'",
        "$\"",
        "#",
        "!",
        "@(",
        "*",
        "[",
        "]",
        "~",
        "=",
        "a=",
        "[@]",
        ":-",
        ":=",
        "%",
        "/",
        "^",
        ",",
        "@P",
        "\0",
        "\u{7f}",
        "é",
        "\u{1F980}",
        "\t",
        "<<-",
        "<<<",
        ">&",
        "&>",
        "|&",
        "coproc ",
        "function ",
        "time ",
        "$[",
        "\\\n",
        "\u{FFFD}",
        "\r",
        "\u{202E}",
    ];
    // xorshift64: deterministic, no dependency.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..400 {
        let mut line = String::new();
        for _ in 0..next() % 24 {
            let index = usize::try_from(next() % PIECES.len() as u64).expect("small");
            line.push_str(PIECES[index]);
        }
        // Also bytes from the whole char range, lossily as a daemon would decode.
        let bytes: Vec<u8> = (0..next() % 8).map(|_| next().to_le_bytes()[0]).collect();
        line.push_str(&String::from_utf8_lossy(&bytes));
        let _ = program_names(&line);
        let _ = collect(&line);
    }
}

/// What `line` writes, per [`Inspection::file_writes`]; fails the test on refusal.
fn writes(line: &str) -> Vec<String> {
    inspect_blocking(line)
        .unwrap_or_else(|e| panic!("{line:?} refused: {e}"))
        .file_writes
}

#[test]
fn redirections_that_write_files_are_reported() {
    for (line, expected) in [
        ("echo x > f", ">"),
        ("echo x >> f", ">>"),
        ("ls >| f", ">|"),
        ("ls 2>f", "2>"),
        ("ls 2>>f", "2>>"),
        ("cat 3<>f", "3<>"),
        ("ls >&f", ">&"),
        ("ls >&\"$f\"", ">&"),
        ("ls > \"/dev/null\"x", ">"),
        ("ls > $DEV", ">"),
        ("ls > /dev/nul?", ">"),
        ("{ ls; } > f", ">"),
        ("f() { ls > g; }", ">"),
        ("echo $(ls > f)", ">"),
        ("cat <<EOF\n$(ls > f)\nEOF", ">"),
        ("exec 3>f", "3>"),
    ] {
        assert_eq!(writes(line), [expected], "for {line:?}");
    }
    assert_eq!(writes("ls > a 2>> b"), [">", "2>>"]);
}

#[test]
fn input_null_and_duplications_are_not_writes() {
    for line in [
        "ls > /dev/null",
        "ls 2>/dev/null >'/dev/null'",
        "ls >> /dev/null 2>&1",
        "ls 2>&1",
        "ls 1>&2 3>&- 4>&1-",
        "ls >&/dev/null",
        "ls |& cat",
        "cat < f",
        "cat 0<&3",
        "cat <<EOF\nbody > f\nEOF",
        "cat <<< 'x > f'",
        "ls > >(cat)",
        "echo '>' \">\" \\> f",
        "ls # > f",
    ] {
        assert_eq!(writes(line), Vec::<String>::new(), "for {line:?}");
    }
    // The names are still all reported.
    assert_eq!(names("ls > >(cat) 2>&1"), ["ls", "cat"]);
}

#[test]
fn risky_variables_follow_the_shared_rule() {
    for line in [
        "NODE_OPTIONS=--require=x node",
        "GIT_SSH_COMMAND=x git fetch",
        "path=/tmp ls",
        "PYTHONPATH=. python3",
        "JAVA_TOOL_OPTIONS=x java",
        "for IFS in x; do ls; done",
        ": ${LD_AUDIT:=x}",
    ] {
        refused_dynamic(line);
    }
    check("GIT_AUTHOR_NAME=x git commit", &["git"]);
    check("LANG=C RUST_LOG=debug ls", &["ls"]);
}

#[test]
fn assigning_builtins_check_the_names_they_set() {
    for line in [
        "export \"PATH=/x\"",
        "export 'LD_PRELOAD'=x",
        "export P\"ATH\"=/x",
        "readonly \"BASH_ENV=x\"",
        "declare -x \"PATH=/x\"",
        "typeset \"PATH\"",
        "local \"IFS= \"",
        "env \"PATH=/x\" ls",
        "env -i 'LD_PRELOAD=x' ls",
        "env --unset=PATH ls",
        "env -u PATH ls",
        "read PATH",
        "read -r a PATH",
        "getopts ab PATH",
        "mapfile PATH",
        "printf -v PATH x",
        "printf -vPATH x",
        "let \"PATH=1\"",
    ] {
        refused_dynamic(line);
    }
    // Names the check cannot read, and the builtins' indirect forms.
    for line in [
        "export \"$X\"",
        "export \"$X=1\"",
        "env \"$A\" ls",
        "env P?TH=/x ls",
        "env -S 'PATH=/x ls'",
        "env --split-string='PATH=/x ls'",
        "declare -n ref=PATH",
        "local -n ref",
        "read \"$name\"",
        "printf \"$opt\" PATH x",
        // Unquoted expansions split into more words, such as `PATH=/x`, in these places.
        "env A=$X ls",
        "env -i A=x$(echo) ls",
        "export \"A\"=$X",
        "read -r a b $X",
        "let A=$X",
        "printf -v a '%s' $X",
    ] {
        refused_dynamic(line);
    }
    check(
        "export \"A=1\" B=\"$x\" 'C'=\"$(ls)\" D=$x E=`ls`; env 'F=1' G=\"$y\" ls $f PATH",
        &["export", "ls", "env"],
    );
    check(
        "read -r line; printf '%s' PATH \"$x\"; printf '-v'",
        &["read", "printf"],
    );
    check(
        "declare -x MY_VAR=1; env -i TERM=dumb ls",
        &["declare", "env"],
    );
}
