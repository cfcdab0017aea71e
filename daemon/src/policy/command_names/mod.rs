//! Program names of every simple command a shell command line would run, and the
//! redirections in it that write files.
//!
//! The policy layer checks each name against `ALLOW_COMMANDS`, so this module is a
//! security boundary: anything it cannot see must be refused, never skipped.
//!
//! # Why a real parser
//! Splitting on `;`, `&&` or `|` misses commands hidden in `$(…)`, backticks,
//! `<(…)`, here-documents, `case` arms, function bodies and parameter defaults such
//! as `${X:-$(rm x)}`. We parse with `brush-parser` (a bash grammar), walk the whole
//! AST, re-parse every word into its pieces and recurse into each substitution.
//!
//! # What is returned
//! An [`Inspection`]. Its `programs` are the command word of each simple command after
//! quote removal (`'ls'`, `"ls"`, `l\s` → `ls`), in source order of first appearance,
//! duplicates removed. Paths stay
//! as written (`/bin/rm` is not `rm`). Builtins and wrappers are not looked through:
//! `env rm` yields `env`, `eval "rm"` yields `eval`. `time ls` yields `time`, `ls`
//! (a program under dash). Function bodies count even if never called
//! (`ls() { rm x; }; ls` yields `rm`, `ls`).
//!
//! Its `file_writes` are the operators (`>`, `2>>`, `>|`, `<>`, `>&`) of every
//! redirection that opens a file for writing, anywhere in the line, in source order:
//! any target but a literal `/dev/null` or a process substitution `>(…)`, and `>&`
//! with anything but a descriptor number or `-` (bash reads `>&file` as `&>file`).
//! Input (`<`, `<&`), here-documents and here-strings are not writes.
//!
//! # What is refused
//! * [`CommandParseError::Syntax`]:
//!   - anything brush cannot parse (including `select`, unknown to brush 0.4.0);
//!   - bash-only syntax that `/bin/sh` (dash on Debian, which the daemon runs) reads
//!     differently, each a demonstrated way to run an unseen command under dash:
//!     `$'…'`, `[[ … ]]`, `(( … ))`, `coproc`, `&>`, `a[i]=v`, `a+=v`, and
//!     here-document delimiters other than plain, quoted or `\`-prefixed words;
//!   - inputs brush mishandles: lines over [`MAX_LINE_BYTES`] or with more than
//!     [`MAX_OPENERS`] nesting openers (stack overflow), numbers that make it panic
//!     (`~99999999999`, `99999999999>x`), a quote or expansion running past the end
//!     of a line that has `<<` (panics or mangled words), words that do not match the
//!     source text, and unquoted here-document bodies whose expansions cannot be
//!     isolated in linear time. Parsing runs on a dedicated thread with a 64 MiB stack
//!     ([`parser_thread`]), and any remaining parser panic becomes a refusal too.
//! * [`CommandParseError::Dynamic`]:
//!   - a command word with an expansion: `$X`, `${X}`, `$(…)`, backticks, `$((…))`,
//!     globs (`l*`, `l?`, `[a]b`), braces `{a,b}`, tilde `~/bin/x`;
//!   - arithmetic that names a variable (`$((i+1))`, `${a[i]}`, `${s:n}`): bash
//!     evaluates a value such as `a[$(rm x)]` recursively and runs the substitution,
//!     so only literal arithmetic is accepted;
//!   - `${!x}` and `${x@P}` (indirection and prompt expansion run code from values);
//!   - backquoted substitutions containing a backslash (bash unescapes `\$` there,
//!     brush does not, so `` `echo \$(rm x)` `` would otherwise hide `rm`);
//!   - assignments to a variable that changes what an allowed name runs or loads, as
//!     [`why_risky`] decides (`PATH`, `LD_PRELOAD`, …), by `=`, `for` or `${…:=…}`,
//!     or by a builtin that sets variables named in its arguments ([`ASSIGNING`]:
//!     `export "PATH=/x"`, `env 'LD_PRELOAD=x' ls`, `read PATH`, `printf -v PATH`),
//!     including such arguments whose name part is not literal (`export "$X"`) or that
//!     hold an unquoted expansion the shell splits into more words (`env A=$X ls`), `env -S`
//!     (it splits a string into assignments) and namerefs (`declare -n`).
//!
//! # Not covered (the allowlist must handle it)
//! Builtins that run code taken from their arguments or from variable values:
//! `eval`, `source`/`.`, `exec`, `command`, `builtin`, `trap`, `alias` (dash expands
//! aliases even in `sh -c`), `let`, `declare`/`typeset`/`local`/`readonly`, `read`,
//! `mapfile`, `printf -v`, `getopts`, `hash`, `enable`, and `test`/`[` with
//! `-v 'a[$(rm x)]'` under bash (the names these builtins assign are checked, the code
//! they may run is not). dash runs the `function` of `function f {⏎…⏎}` as a program;
//! it is not reported.

mod parser_thread;

use std::collections::HashSet;
use std::io::BufReader;

use brush_parser::ast::{
    self, AssignmentName, AssignmentValue, Command, CommandPrefixOrSuffixItem as Item,
    CompoundCommand as Compound, IoFileRedirectKind as Kind, IoFileRedirectTarget as Target,
    IoRedirect,
};
use brush_parser::word::{self, Parameter, ParameterExpr, ParameterTransformOp, WordPiece};
use brush_parser::{Parser, ParserOptions, Token, tokenize_str_with_options};

pub use parser_thread::{inspect, inspect_blocking};

use super::risky_env::why_risky;

/// What a command line would do that the policy judges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inspection {
    /// Program names, in source order of first appearance, without repeats.
    pub programs: Vec<String>,
    /// Operators of redirections that write files (`>`, `2>>`, …), in source order.
    pub file_writes: Vec<String>,
}

/// Why a command line was refused by the parser-based check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandParseError {
    /// The line (or a nested substitution) is not valid shell syntax for brush.
    #[error("cannot parse the command line: {0}")]
    Syntax(String),
    /// The line is valid, but what it runs depends on run-time values.
    #[error("cannot tell which program runs: {0}")]
    Dynamic(String),
}

/// Longest accepted line; bounds parse time and the opener count below.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Most nesting openers (`(`, `{`, `[`, backquote, `!`, compound keywords) accepted
/// in one line, counted regardless of quoting.
pub const MAX_OPENERS: usize = 512;

/// Stack for the parser thread. brush-parser 0.4.0 recurses once per nesting level
/// and uses about 17 KiB per level in a debug build (120 nested `{ …; }` overflow a
/// 2 MiB stack, aborting the process), so 512 levels need about 9 MiB; 64 MiB leaves
/// room for our own recursion. Only touched pages are committed.
const PARSER_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Keywords that open a nesting level in brush's grammar.
const NESTING_KEYWORDS: &[&str] = &[
    "if", "elif", "while", "until", "for", "case", "select", "function", "coproc",
];

/// Builtins (and `env`) that set, export or read into variables named by their
/// arguments; each argument's name is checked like an assignment.
pub const ASSIGNING: &[&str] = &[
    "export",
    "readonly",
    "declare",
    "typeset",
    "local",
    "env",
    "read",
    "getopts",
    "mapfile",
    "readarray",
    "let",
    "printf",
];

/// Result of one step of the walk; the error aborts the whole check.
type Step = Result<(), CommandParseError>;

/// Shorthand for a [`CommandParseError::Syntax`] refusal.
fn syntax(why: impl ToString) -> CommandParseError {
    CommandParseError::Syntax(why.to_string())
}

/// Refusal of bash-only syntax: the daemon runs lines with `/bin/sh`, which is dash
/// on Debian, and dash reads these differently from brush's bash grammar.
fn bash_only(what: &str, dash_reading: &str) -> CommandParseError {
    syntax(format!("{what} is bash-only; /bin/sh {dash_reading}"))
}

/// Shorthand for a [`CommandParseError::Dynamic`] refusal.
fn dynamic(why: impl ToString) -> CommandParseError {
    CommandParseError::Dynamic(why.to_string())
}

/// Program names of every simple command in `line`, in source order of first
/// appearance with duplicates removed. Blocks the calling thread while the parser
/// thread works: for tests and synchronous callers, never for async code.
pub fn program_names(line: &str) -> Result<Vec<String>, CommandParseError> {
    inspect_blocking(line).map(|inspection| inspection.programs)
}

/// Inspects `line` on the calling thread: the cheap guards, then the parse and walk.
/// Only the parser thread calls this (brush needs its big stack).
fn inspect_here(line: &str) -> Result<Inspection, CommandParseError> {
    if line.trim().is_empty() {
        return Ok(Inspection::default());
    }
    if line.len() > MAX_LINE_BYTES {
        return Err(syntax(format!("line longer than {MAX_LINE_BYTES} bytes")));
    }
    if opener_count(line) > MAX_OPENERS {
        return Err(syntax(format!("more than {MAX_OPENERS} nesting openers")));
    }
    if has_overflowing_number(line) {
        return Err(syntax("number too large for a file descriptor or `~N`"));
    }
    if heredoc_line_continues(line) {
        return Err(syntax(
            "a quote or expansion spans lines after `<<`; end the line first",
        ));
    }
    collect(line)
}

/// Walks `line` and removes repeated names, keeping the first occurrence.
fn collect(line: &str) -> Result<Inspection, CommandParseError> {
    let mut walker = Walker {
        options: ParserOptions::default(),
        names: Vec::new(),
        writes: Vec::new(),
        spans: Vec::new(),
    };
    walker.source(line)?;
    let mut seen = HashSet::new();
    walker.names.retain(|name| seen.insert(name.clone()));
    Ok(Inspection {
        programs: walker.names,
        file_writes: walker.writes,
    })
}

/// Upper bound on how deeply brush (and this walk) will recurse for `line`.
///
/// Counts every character or keyword that can open a nesting level (`(`, `{`, `[`,
/// backquote, `!` which nests in `[[ ! ! x ]]`, and compound keywords), ignoring
/// quotes and closers on purpose: a scanner that tried to skip quoted text could be
/// fooled (`#` comments, here-documents), and over-counting merely refuses an odd line.
fn opener_count(line: &str) -> usize {
    let symbols = line.matches(['(', '{', '[', '`', '!']).count();
    let keywords = line
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| NESTING_KEYWORDS.contains(w))
        .count();
    symbols + keywords
}

/// True if `line` has a number that brush-parser 0.4.0 would parse with `unwrap()`
/// and panic on: a redirection fd (`99999999999>x`) or a directory-stack tilde
/// (`~99999999999999999999`). Ten digits or more are refused, whatever the quoting;
/// the parser thread would also catch the panic, but not under `panic = "abort"`.
fn has_overflowing_number(line: &str) -> bool {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            i += 1;
            continue;
        }
        let before = &line[..start];
        let tilde = before.ends_with('~') || before.ends_with("~+") || before.ends_with("~-");
        let redirect = matches!(bytes.get(i), Some(b'<' | b'>'));
        if i - start > 9 && (tilde || redirect) {
            return true;
        }
    }
    false
}

/// True if a here-document operator is followed, on its line, by a quote or
/// expansion that runs past the newline. brush-parser 0.4.0 panics on such lines
/// (`cat <<EOF $(a⏎)⏎…` unwraps `None` in its tokenizer) or hoists the inside of
/// `$(…)` into the outer command; bash and dash read them fine. Quote-unaware about
/// the `<<` itself, so `echo "a << b"` is refused too.
fn heredoc_line_continues(line: &str) -> bool {
    let mut rest = line;
    while let Some(at) = rest.find("<<") {
        rest = rest.get(at + 2..).unwrap_or_default();
        let Some(segment) = rest.split('\n').next().filter(|_| !rest.starts_with('<')) else {
            continue; // a here-string `<<<`
        };
        let bytes = segment.as_bytes();
        let mut i = 0;
        while let Some(&c) = bytes.get(i) {
            i = match (c, bytes.get(i + 1)) {
                (b'\\', None) => return true, // a line continuation
                (b'\\', _) => i + 2,
                (b'#', _) if i > 0 && bytes[i - 1].is_ascii_whitespace() => break,
                (b'"' | b'\'' | b'`', _) | (b'$', Some(b'(' | b'{' | b'[')) => {
                    match expansion_end(segment, i) {
                        Ok(end) => end,
                        Err(_) => return true,
                    }
                }
                _ => i + 1,
            };
        }
    }
    false
}

/// How `/bin/sh` (dash) reads the text being walked, where that differs from
/// brush's bash reading.
///
/// Inside double quotes, an unquoted here-document body, and the words of `${x:-…}`
/// and its siblings within them, dash treats `'` as a plain character; bash (and so
/// brush) still takes it for a quote inside `${…}`. A `$(…)` or backquoted command
/// starts over unquoted in both shells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    /// Unquoted text: `'` quotes in both shells.
    Plain,
    /// Double-quoted text (or a here-document body): `'` is plain to dash.
    Double,
}

/// Collects program names while walking the AST of one line and its substitutions.
struct Walker {
    /// Parser options shared by the program parser and the word parser.
    options: ParserOptions,
    /// Names in the order found, duplicates included (removed by the caller).
    names: Vec<String>,
    /// Operators of the redirections that write files, in the order found.
    writes: Vec<String>,
    /// Character span and text of each tokenizer word met in the source being walked.
    spans: Vec<(usize, usize, String)>,
}

impl Walker {
    /// Parses `src` as a complete program (the line itself or a substitution body).
    fn source(&mut self, src: &str) -> Step {
        let mut parser = Parser::new(BufReader::new(src.as_bytes()), &self.options);
        let program = parser.parse_program().map_err(syntax)?;
        let outer = std::mem::take(&mut self.spans);
        program
            .complete_commands
            .iter()
            .try_for_each(|list| self.list(list))?;
        let spans = std::mem::replace(&mut self.spans, outer);
        check_spans(src, spans)
    }

    /// Walks `a; b & c && d || e | f` and newline-separated items.
    fn list(&mut self, list: &ast::CompoundList) -> Step {
        for ast::CompoundListItem(and_or, _separator) in &list.0 {
            for (_operator, pipeline) in and_or.iter() {
                // A bash keyword, but a program (`/usr/bin/time`) under dash.
                if pipeline.timed.is_some() {
                    self.names.push("time".into());
                }
                pipeline.seq.iter().try_for_each(|cmd| self.command(cmd))?;
            }
        }
        Ok(())
    }

    /// Walks one element of a pipeline.
    fn command(&mut self, command: &Command) -> Step {
        let redirects = match command {
            Command::Simple(simple) => return self.simple(simple),
            Command::Compound(compound, redirects) => {
                self.compound(compound)?;
                redirects
            }
            // The body runs whenever the function is called, possibly later on the
            // same line, so it is always inspected.
            Command::Function(def) => {
                self.word(&def.fname)?;
                self.compound(&def.body.0)?;
                &def.body.1
            }
            // dash runs `[[` as a program and splits `[[ a || rm ]]` at `||`.
            Command::ExtendedTest(..) => {
                return Err(bash_only("`[[ … ]]`", "runs `[[` and splits at `&&`/`||`"));
            }
        };
        redirects
            .iter()
            .flat_map(|list| &list.0)
            .try_for_each(|r| self.redirect(r))
    }

    /// Walks compound commands; their conditions and bodies are ordinary lists.
    fn compound(&mut self, compound: &Compound) -> Step {
        match compound {
            Compound::Arithmetic(_) | Compound::ArithmeticForClause(_) => Err(bash_only(
                "`(( … ))`",
                "reads `((1))` as nested subshells running `1`",
            )),
            Compound::BraceGroup(group) => self.list(&group.list),
            Compound::Subshell(subshell) => self.list(&subshell.list),
            Compound::ForClause(clause) => {
                check_assigned(&clause.variable_name)?;
                clause
                    .values
                    .iter()
                    .flatten()
                    .try_for_each(|w| self.word(w))?;
                self.list(&clause.body.list)
            }
            Compound::CaseClause(clause) => {
                self.word(&clause.value)?;
                for item in &clause.cases {
                    item.patterns.iter().try_for_each(|w| self.word(w))?;
                    item.cmd.iter().try_for_each(|list| self.list(list))?;
                }
                Ok(())
            }
            Compound::IfClause(clause) => {
                self.list(&clause.condition)?;
                self.list(&clause.then)?;
                for branch in clause.elses.iter().flatten() {
                    branch.condition.iter().try_for_each(|c| self.list(c))?;
                    self.list(&branch.body)?;
                }
                Ok(())
            }
            Compound::WhileClause(clause) | Compound::UntilClause(clause) => {
                self.list(&clause.0)?;
                self.list(&clause.1.list)
            }
            Compound::Coprocess(_) => Err(bash_only("`coproc`", "runs a program named coproc")),
        }
    }

    /// Records the program of a simple command and inspects all its other parts.
    fn simple(&mut self, simple: &ast::SimpleCommand) -> Step {
        // Prefix items are expanded before the command word, suffix items after.
        for item in simple.prefix.iter().flat_map(|p| &p.0) {
            self.item(item)?;
        }
        let mut program_name = None;
        if let Some(program) = &simple.word_or_name {
            self.word(program)?;
            let name = literal_program(&program.value, &self.options)?;
            program_name = Some(name.clone());
            self.names.push(name);
        }
        let suffix = simple.suffix.iter().flat_map(|s| &s.0);
        suffix.clone().try_for_each(|item| self.item(item))?;
        match program_name {
            Some(program) if ASSIGNING.contains(&program.as_str()) => {
                let arguments = suffix.filter_map(|item| match item {
                    Item::Word(w) => Some((w, false)),
                    Item::AssignmentWord(_, raw) => Some((raw, true)),
                    _ => None,
                });
                self.assigning_builtin(&program, arguments)
            }
            _ => Ok(()),
        }
    }

    /// Checks the variable names an assigning builtin ([`ASSIGNING`]) takes from its
    /// arguments, each given with whether brush parsed it as an assignment word.
    ///
    /// Every argument is taken for a name (`read PATH`), an assignment
    /// (`export "PATH=/x"`) or options (`printf -vPATH`, where every tail of the option
    /// text is tried as a name); over-reading merely refuses an odd line. `env` stops at
    /// its command word, whose arguments are not its own. An unquoted expansion is
    /// refused wherever the shell splits it into more words, since one of them could be
    /// `PATH=/x`: dash and bash split `env A=$X` and `export "A"=$X`, and only spare
    /// assignment words of the declaration builtins (`export A=$X`).
    fn assigning_builtin<'a>(
        &self,
        program: &str,
        arguments: impl Iterator<Item = (&'a ast::Word, bool)>,
    ) -> Step {
        let declaration = matches!(
            program,
            "export" | "readonly" | "declare" | "typeset" | "local"
        );
        let arguments: Vec<(String, bool, bool)> = arguments
            .map(|(w, assignment_word)| {
                let (text, complete) = leading_literal(&w.value, &self.options)?;
                let split = !(declaration && assignment_word)
                    && has_unquoted_expansion(&w.value, &self.options)?;
                Ok((text, complete, split))
            })
            .collect::<Result<_, CommandParseError>>()?;
        // printf assigns only with `-v` first (a first argument that is not literal might
        // expand to it); otherwise its arguments are data.
        let printf_prints =
            |(text, complete, _): &(String, bool, bool)| *complete && !text.starts_with("-v");
        if program == "printf" && arguments.first().is_none_or(printf_prints) {
            return Ok(());
        }
        for (text, complete, split) in arguments {
            if split {
                return Err(dynamic(format!(
                    "an unquoted expansion in an argument of `{program}` may split into more \
                     words, each taken for a variable; quote it"
                )));
            }
            let (name, _value) = text.split_once('=').unwrap_or((&text, ""));
            if !complete && name.len() == text.len() {
                return Err(dynamic(format!(
                    "`{program}` gets an argument whose variable name is not literal"
                )));
            }
            if let Some(options) = name.strip_prefix('-') {
                let short = !options.starts_with('-');
                if program == "env" && (short && options.contains('S') || options.starts_with("-s"))
                {
                    return Err(dynamic(
                        "`env -S` splits a string into assignments and a command",
                    ));
                }
                if matches!(program, "declare" | "typeset" | "local")
                    && short
                    && options.contains('n')
                {
                    return Err(dynamic(format!(
                        "`{program} -n` assigns through another name"
                    )));
                }
                for candidate in text.split('=') {
                    for (at, _) in candidate.char_indices() {
                        check_assigned(&candidate[at..])?;
                    }
                }
                continue;
            }
            // `a[1]=v` sets `a`, `a+=v` appends to it.
            let name = name.split('[').next().unwrap_or_default();
            check_assigned(name.strip_suffix('+').unwrap_or(name))?;
            if program == "env" && !text.contains('=') {
                break; // the command env runs; the rest are its arguments
            }
        }
        Ok(())
    }

    /// Inspects one prefix or suffix item of a simple command.
    fn item(&mut self, item: &Item) -> Step {
        match item {
            Item::IoRedirect(redirect) => self.redirect(redirect),
            Item::Word(w) => self.word(w),
            // The raw word repeats the assignment; the parsed form separates the
            // array subscript (arithmetic) from the values (words).
            Item::AssignmentWord(assignment, _raw) => self.assignment(assignment),
            Item::ProcessSubstitution(_kind, subshell) => self.list(&subshell.list),
        }
    }

    /// Inspects `NAME=value` and `NAME=(a [i]=b)` (a syntax error under dash).
    fn assignment(&mut self, assignment: &ast::Assignment) -> Step {
        let AssignmentName::VariableName(name) = &assignment.name else {
            return Err(bash_only("`a[i]=v`", "runs it as a program named `a[i]=v`"));
        };
        if assignment.append {
            return Err(bash_only("`a+=v`", "runs it as a program named `a+=v`"));
        }
        check_assigned(name)?;
        match &assignment.value {
            AssignmentValue::Scalar(value) => self.word(value),
            AssignmentValue::Array(elements) => {
                for (index, value) in elements {
                    // `a=([i]=v)` evaluates `i` as arithmetic, like `a[i]=v`.
                    index.iter().try_for_each(|i| check_arithmetic(&i.value))?;
                    self.word(value)?;
                }
                Ok(())
            }
        }
    }

    /// Inspects a redirection target, here-string, here-document or `<(…)`.
    fn redirect(&mut self, redirect: &IoRedirect) -> Step {
        if let IoRedirect::File(fd, kind, target) = redirect
            && writes_file(kind, target, &self.options)
        {
            let fd = fd.map(|n| n.to_string()).unwrap_or_default();
            self.writes.push(format!("{fd}{kind}"));
        }
        match redirect {
            IoRedirect::File(_, _, Target::Filename(w) | Target::Duplicate(w))
            | IoRedirect::HereString(_, w) => self.word(w),
            // dash reads `a &>x rm` as `a &` then `>x rm`, running `rm`.
            IoRedirect::OutputAndError(..) => Err(bash_only("`&>`", "reads `&` then `>`")),
            IoRedirect::File(_, _, Target::Fd(_)) => Ok(()),
            IoRedirect::File(_, _, Target::ProcessSubstitution(_, subshell)) => {
                self.list(&subshell.list)
            }
            IoRedirect::HereDocument(_fd, doc) => {
                check_delimiter(&doc.here_end.value)?;
                // bash expands the body unless any part of the delimiter is quoted;
                // checking the delimiter ourselves guards against a wrong flag.
                let quoted = doc.here_end.value.contains(['\'', '"', '\\']);
                if !doc.requires_expansion && quoted {
                    return Ok(());
                }
                self.heredoc(&doc.doc.value)
            }
        }
    }

    /// Inspects the expansions of an unquoted here-document body.
    ///
    /// brush's `word::parse_heredoc` backtracks exponentially on unbalanced input,
    /// which its tokenizer never checks in a body (`$((` eight times takes 14 s,
    /// `${a[` four times 1.6 s). So [`heredoc_expansions`] cuts the body into its
    /// top-level expansions in linear time, and brush's tokenizer must read them
    /// back as exactly those words before they are parsed; otherwise we refuse.
    fn heredoc(&mut self, body: &str) -> Step {
        let expansions = heredoc_expansions(body)?;
        let joined = expansions.join(" ");
        let tokens = tokenize_str_with_options(&joined, &self.options.tokenizer_options())
            .map_err(|e| syntax(format!("here-document: {e}")))?;
        let words = tokens.iter().map(|t| match t {
            Token::Word(w, _) => Some(w.as_str()),
            Token::Operator(..) => None,
        });
        if !words.eq(expansions.iter().map(|e| Some(*e))) {
            return Err(syntax("here-document expansions could not be isolated"));
        }
        // dash reads a body as if it were inside double quotes (see [`Quoting`]).
        expansions.into_iter().try_for_each(|e| {
            let pieces = word::parse(e, &self.options).map_err(syntax)?;
            check_tokenized(e, &pieces)?;
            self.pieces(&pieces, Quoting::Double)
        })
    }

    /// Finds every command substitution inside a word from the tokenizer.
    fn word(&mut self, w: &ast::Word) -> Step {
        if let Some(loc) = &w.loc {
            let span = (loc.start.index, loc.end.index, w.value.clone());
            self.spans.push(span);
        }
        let pieces = word::parse(&w.value, &self.options).map_err(syntax)?;
        check_tokenized(&w.value, &pieces)?;
        self.pieces(&pieces, Quoting::Plain)
    }

    /// Like [`Walker::word`], for word text that brush keeps as a plain string
    /// (parameter-expansion defaults, patterns and replacements), where blanks are
    /// legitimately unquoted. `quoting` is how dash reads that text.
    ///
    /// brush reads a `'` there as a quote even inside double quotes (bash's own
    /// reading), while dash reads it as a plain character: in `"${u:-'}"; rm x; #'}"`
    /// dash ends the expansion at the first `}` and runs `rm`, and in
    /// `"${u:-'$(rm x)'}"` it runs the substitution brush took for quoted text. So a
    /// single-quoted piece in text dash reads as double-quoted is refused.
    fn word_text(&mut self, text: &str, quoting: Quoting) -> Step {
        let pieces = word::parse(text, &self.options).map_err(syntax)?;
        let single_quoted =
            |p: &word::WordPieceWithSource| matches!(p.piece, WordPiece::SingleQuotedText(_));
        if quoting == Quoting::Double && pieces.iter().any(single_quoted) {
            return Err(syntax(
                "a `'` in `${…}` inside double quotes or a here-document is a plain \
                 character to /bin/sh (dash) but a quote to bash, so what runs cannot be \
                 told; drop the `'` or leave the `${…}` outside double quotes",
            ));
        }
        self.pieces(&pieces, quoting)
    }

    /// Walks parsed word pieces, recursing into quotes, expansions and substitutions.
    /// `quoting` is how dash reads the text these pieces came from.
    fn pieces(&mut self, pieces: &[word::WordPieceWithSource], quoting: Quoting) -> Step {
        for piece in pieces {
            match &piece.piece {
                // `$'\' ; rm x⏎'`: dash sees `$`, a quoted `\`, then runs `rm x`.
                WordPiece::AnsiCQuotedText(_) => {
                    return Err(bash_only("`$'…'`", "reads `$` and a single-quoted string"));
                }
                WordPiece::Text(_)
                | WordPiece::SingleQuotedText(_)
                | WordPiece::EscapeSequence(_)
                | WordPiece::TildeExpansion(_) => {}
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, Quoting::Double)?;
                }
                WordPiece::ParameterExpansion(expr) => self.parameter(expr, quoting)?,
                WordPiece::CommandSubstitution(body) => self.source(body)?,
                // bash unescapes `\$`, `\\` and `` \` `` inside backquotes before
                // parsing, brush only `` \` ``: `` `echo \$(rm x)` `` runs `rm`.
                WordPiece::BackquotedCommandSubstitution(body) if body.contains('\\') => {
                    return Err(dynamic("backslash inside backquotes; use $(…) instead"));
                }
                WordPiece::BackquotedCommandSubstitution(body) => self.source(body)?,
                WordPiece::ArithmeticExpression(expr) => check_arithmetic(&expr.value)?,
            }
        }
        Ok(())
    }

    /// Inspects `${…}`: refuses forms that evaluate values as code and walks the
    /// word operands (defaults, patterns, replacements) for substitutions. `quoting`
    /// is how dash reads the text around the `${…}`.
    fn parameter(&mut self, expr: &ParameterExpr, quoting: Quoting) -> Step {
        use ParameterExpr as P;
        // Kept one variant per line; rustfmt would spread each pattern over five.
        #[rustfmt::skip]
        let (parameter, indirect) = match expr {
            P::Parameter { parameter, indirect }
            | P::ParameterLength { parameter, indirect }
            | P::UseDefaultValues { parameter, indirect, .. }
            | P::AssignDefaultValues { parameter, indirect, .. }
            | P::IndicateErrorIfNullOrUnset { parameter, indirect, .. }
            | P::UseAlternativeValue { parameter, indirect, .. }
            | P::RemoveSmallestSuffixPattern { parameter, indirect, .. }
            | P::RemoveLargestSuffixPattern { parameter, indirect, .. }
            | P::RemoveSmallestPrefixPattern { parameter, indirect, .. }
            | P::RemoveLargestPrefixPattern { parameter, indirect, .. }
            | P::Substring { parameter, indirect, .. }
            | P::Transform { parameter, indirect, .. }
            | P::UppercaseFirstChar { parameter, indirect, .. }
            | P::UppercasePattern { parameter, indirect, .. }
            | P::LowercaseFirstChar { parameter, indirect, .. }
            | P::LowercasePattern { parameter, indirect, .. }
            | P::ReplaceSubstring { parameter, indirect, .. } => (parameter, *indirect),
            P::VariableNames { .. } | P::MemberKeys { .. } => return Ok(()),
        };
        if indirect {
            return Err(dynamic("${!…} evaluates a name taken from a value"));
        }
        match (parameter, expr) {
            (Parameter::NamedWithIndex { index, .. }, _) => check_arithmetic(index)?,
            // `${PATH:=…}` assigns when the variable is unset.
            (Parameter::Named(name), P::AssignDefaultValues { .. }) => check_assigned(name)?,
            _ => {}
        }
        #[rustfmt::skip]
        let words: Vec<&String> = match expr {
            P::UseDefaultValues { default_value: v, .. }
            | P::AssignDefaultValues { default_value: v, .. }
            | P::IndicateErrorIfNullOrUnset { error_message: v, .. }
            | P::UseAlternativeValue { alternative_value: v, .. }
            | P::RemoveSmallestSuffixPattern { pattern: v, .. }
            | P::RemoveLargestSuffixPattern { pattern: v, .. }
            | P::RemoveSmallestPrefixPattern { pattern: v, .. }
            | P::RemoveLargestPrefixPattern { pattern: v, .. }
            | P::UppercaseFirstChar { pattern: v, .. }
            | P::UppercasePattern { pattern: v, .. }
            | P::LowercaseFirstChar { pattern: v, .. }
            | P::LowercasePattern { pattern: v, .. } => v.iter().collect(),
            P::ReplaceSubstring { pattern, replacement, .. } => {
                std::iter::once(pattern).chain(replacement).collect()
            }
            P::Substring { offset, length, .. } => {
                check_arithmetic(&offset.value)?;
                length.iter().try_for_each(|l| check_arithmetic(&l.value))?;
                Vec::new()
            }
            P::Transform { op: ParameterTransformOp::PromptExpand, .. } => {
                return Err(dynamic("${…@P} runs substitutions found in the value"));
            }
            _ => Vec::new(),
        };
        // dash reads the patterns of `#`, `##`, `%` and `%%` unquoted wherever the
        // `${…}` is, and every other word (`-`, `=`, `?`, `+`, and bash's `/`, `^`,
        // `,`, which dash rejects only when they are expanded) as the text around it.
        #[rustfmt::skip]
        let quoting = match expr {
            P::RemoveSmallestSuffixPattern { .. }
            | P::RemoveLargestSuffixPattern { .. }
            | P::RemoveSmallestPrefixPattern { .. }
            | P::RemoveLargestPrefixPattern { .. } => Quoting::Plain,
            _ => quoting,
        };
        words
            .into_iter()
            .try_for_each(|w| self.word_text(w, quoting))
    }
}

/// Top-level expansions (`$(…)`, `$((…))`, `${…}`, `$[…]`, `` `…` ``) of an
/// unquoted here-document body, found by a linear scan.
///
/// Outside expansions quotes are literal and `\` escapes the next character, as
/// bash reads a here-document. A wrong guess about an expansion's extent is caught
/// by the caller, which has brush's tokenizer re-read each one.
fn heredoc_expansions(body: &str) -> Result<Vec<&str>, CommandParseError> {
    let bytes = body.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        match (c, bytes.get(i + 1)) {
            (b'$', _) if dollar_before_continuation(bytes, i) => {
                return Err(continued_dollar());
            }
            (b'\\', _) => i += 2,
            (b'`', _) | (b'$', Some(b'(' | b'{' | b'[')) => {
                let end = expansion_end(body, i)?;
                found.push(&body[i..end]);
                i = end;
            }
            _ => i += 1,
        }
    }
    Ok(found)
}

/// Whether the `$` at `at` is followed by a line continuation. dash removes `\⏎`
/// before it looks at the next character even in a here-document, so `$\⏎(rm x)`
/// there is `$(rm x)`; the scans here (and brush) would read `$`, an escaped newline
/// and text.
fn dollar_before_continuation(bytes: &[u8], at: usize) -> bool {
    bytes.get(at + 1..at + 3) == Some(b"\\\n")
}

/// The refusal of [`dollar_before_continuation`].
fn continued_dollar() -> CommandParseError {
    syntax("a line continuation right after `$` in a here-document; join the lines")
}

/// End (exclusive) of the expansion starting at `start`, following quotes,
/// comments and nesting only as far as needed to find its closer. Here-documents
/// nested inside are refused. Only ASCII positions are ever sliced.
fn expansion_end(body: &str, start: usize) -> Result<usize, CommandParseError> {
    let unbalanced = || syntax("unbalanced expansion in here-document");
    let bytes = body.as_bytes();
    // Closers still expected, innermost last: `)` marks shell code, `"` and `` ` ``
    // quoted spans, `}` a parameter expansion and `]` a `$[…]` arithmetic.
    let mut stack = Vec::new();
    let mut i = start;
    loop {
        let c = *bytes.get(i).ok_or_else(unbalanced)?;
        let top = stack.last().copied();
        let next = bytes.get(i + 1).copied();
        match c {
            b'\\' => i += 1,
            b'`' if top == Some(b'`') => drop(stack.pop()),
            _ if top == Some(b'`') => {}
            b'$' if dollar_before_continuation(bytes, i) => return Err(continued_dollar()),
            b'$' if matches!(next, Some(b'(' | b'{' | b'[')) => {
                stack.push(match next {
                    Some(b'(') => b')',
                    Some(b'{') => b'}',
                    _ => b']',
                });
                i += 1;
            }
            b'`' => stack.push(c),
            b'"' if top == Some(b'"') => drop(stack.pop()),
            _ if top == Some(b'"') => {}
            b'"' => stack.push(c),
            b'\'' => i += body[i + 1..].find('\'').ok_or_else(unbalanced)? + 1,
            b'(' if top == Some(b')') => stack.push(b')'),
            b'[' if top == Some(b']') => stack.push(b']'),
            b'#' if top == Some(b')') && bytes.get(i - 1).is_some_and(u8::is_ascii_whitespace) => {
                i += body[i..].find('\n').ok_or_else(unbalanced)?;
            }
            b'<' if top == Some(b')') && next == Some(b'<') => {
                if bytes.get(i + 2) != Some(&b'<') {
                    return Err(syntax("here-document inside a here-document expansion"));
                }
                i += 2; // a here-string `<<<`
            }
            _ if Some(c) == top => drop(stack.pop()),
            _ => {}
        }
        i += 1;
        if stack.is_empty() {
            return Ok(i);
        }
    }
}

/// Whether a `File` redirection opens a file for writing: see the module documentation.
fn writes_file(kind: &Kind, target: &Target, options: &ParserOptions) -> bool {
    let literal = |w: &ast::Word| literal_program(&w.value, options).ok();
    match (kind, target) {
        (Kind::Read | Kind::DuplicateInput, _) => false,
        (_, Target::Fd(_) | Target::ProcessSubstitution(..)) => false,
        (Kind::DuplicateOutput, Target::Duplicate(w)) => !literal(w).is_some_and(|t| {
            let fd = t.strip_suffix('-').unwrap_or(&t);
            fd.bytes().all(|b| b.is_ascii_digit()) || t == "/dev/null"
        }),
        (_, Target::Filename(w) | Target::Duplicate(w)) => {
            literal(w).is_none_or(|t| t != "/dev/null")
        }
    }
}

/// The literal text a word starts with after quote removal, up to its first expansion
/// or unquoted pattern character, and whether that is the whole word.
fn leading_literal(
    raw: &str,
    options: &ParserOptions,
) -> Result<(String, bool), CommandParseError> {
    let pieces = word::parse(raw, options).map_err(syntax)?;
    let mut text = String::new();
    for piece in &pieces {
        match &piece.piece {
            WordPiece::Text(t) => match t.find(['*', '?', '[', '{', '(']) {
                Some(at) => {
                    text.push_str(&t[..at]);
                    return Ok((text, false));
                }
                None => text.push_str(t),
            },
            WordPiece::SingleQuotedText(t) => text.push_str(t),
            WordPiece::EscapeSequence(escape) => text.extend(escape.chars().skip(1)),
            WordPiece::DoubleQuotedSequence(inner)
            | WordPiece::GettextDoubleQuotedSequence(inner) => {
                for piece in inner {
                    match &piece.piece {
                        WordPiece::Text(t) => text.push_str(t),
                        WordPiece::EscapeSequence(escape) => text.extend(escape.chars().skip(1)),
                        _ => return Ok((text, false)),
                    }
                }
            }
            _ => return Ok((text, false)),
        }
    }
    Ok((text, true))
}

/// Whether a word has an expansion outside double quotes, whose result the shell splits
/// into more words.
fn has_unquoted_expansion(raw: &str, options: &ParserOptions) -> Result<bool, CommandParseError> {
    let pieces = word::parse(raw, options).map_err(syntax)?;
    Ok(pieces.iter().any(|piece| {
        matches!(
            piece.piece,
            WordPiece::ParameterExpansion(_)
                | WordPiece::CommandSubstitution(_)
                | WordPiece::BackquotedCommandSubstitution(_)
                | WordPiece::ArithmeticExpression(_)
        )
    }))
}

/// Quote-removed text of a command word, refused if any part of it is expanded.
fn literal_program(raw: &str, options: &ParserOptions) -> Result<String, CommandParseError> {
    let refuse = |what: &str| dynamic(format!("`{raw}` {what}"));
    let pieces = word::parse(raw, options).map_err(syntax)?;
    let mut name = String::new();
    for piece in &pieces {
        match &piece.piece {
            // Pathname, brace and extglob expansion act on unquoted text only.
            // A lone `[` stays literal in bash (the `[` command), `[…]` globs.
            WordPiece::Text(text)
                if text.contains(['*', '?', '{', '}', '(', ')'])
                    || (raw.contains('[') && raw.contains(']')) =>
            {
                return Err(refuse("is a pattern"));
            }
            WordPiece::Text(text) | WordPiece::SingleQuotedText(text) => name.push_str(text),
            WordPiece::EscapeSequence(escape) => name.extend(escape.chars().skip(1)),
            WordPiece::DoubleQuotedSequence(inner)
            | WordPiece::GettextDoubleQuotedSequence(inner) => {
                for piece in inner {
                    match &piece.piece {
                        WordPiece::Text(text) => name.push_str(text),
                        WordPiece::EscapeSequence(escape) => name.extend(escape.chars().skip(1)),
                        _ => return Err(refuse("contains an expansion")),
                    }
                }
            }
            WordPiece::TildeExpansion(_) => return Err(refuse("depends on $HOME")),
            _ => return Err(refuse("contains an expansion")),
        }
    }
    Ok(name)
}

/// Refuses a parse whose words do not match the source: words must not overlap, and
/// each must be the text at its (character) span, up to leading blanks. brush 0.4.0 breaks both when a here-document is pending and `$(…)`
/// holds a multi-line quote: `cat <<E $(A="m⏎n" rm x)` becomes `cat A="m⏎n" rm x $()`.
fn check_spans(src: &str, mut spans: Vec<(usize, usize, String)>) -> Step {
    let chars: Vec<char> = src.chars().collect();
    // brush's positions drift after a line continuation, so then only order counts.
    let exact = !src.contains("\\\n");
    spans.sort_by_key(|&(start, end, _)| (start, end));
    let mut covered = 0;
    for (start, end, value) in spans {
        let text: String = chars.get(start..end).unwrap_or_default().iter().collect();
        // brush sometimes starts a span on the blank before the word.
        let same = text.trim_start_matches([' ', '\t']) == value;
        if start < covered || (exact && !same) {
            return Err(syntax(format!("the parser misplaced `{value}`")));
        }
        covered = end;
    }
    Ok(())
}

/// Refuses a word whose unquoted text contains blanks, which a correct tokenizer
/// never produces: brush 0.4.0 mangles a here-document inside `$(…)` followed by a
/// multi-line quote (`echo $(cat <<EOF 'a⏎b'; rm x)⏎…`) into words like ` rm`.
fn check_tokenized(raw: &str, pieces: &[word::WordPieceWithSource]) -> Step {
    let blank = |p: &word::WordPieceWithSource| matches!(&p.piece, WordPiece::Text(text) if text.contains([' ', '\t', '\n']));
    if pieces.iter().any(blank) {
        return Err(syntax(format!("the parser split `{raw}` inconsistently")));
    }
    Ok(())
}

/// Accepts arithmetic made only of number literals and operators.
///
/// Any name is refused: bash evaluates a variable's value as arithmetic again, and
/// a value like `a[$(rm x)]` runs the substitution (`x='a[$(id)]'; echo $((x))`).
fn check_arithmetic(text: &str) -> Step {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            // Literals such as `42`, `0x1f`, `2#101` or `64#@_`.
            let digit = |n: &char| n.is_ascii_alphanumeric() || matches!(n, '#' | '@' | '_');
            while chars.next_if(digit).is_some() {}
        } else if !(c.is_ascii_whitespace() || "+-*/%<>=!~&|^?:,()".contains(c)) {
            return Err(dynamic(format!(
                "arithmetic `{text}` uses variables or expansions, whose values can run commands"
            )));
        }
    }
    Ok(())
}

/// Refuses assigning a variable that [`why_risky`] refuses (by `=`, `for`, `${…:=…}`
/// or an [`ASSIGNING`] builtin).
fn check_assigned(name: &str) -> Step {
    match why_risky(name) {
        Some(why) => Err(dynamic(format!(
            "assigning {name} may change what programs run or load: {why}"
        ))),
        None => Ok(()),
    }
}

/// Accepts only here-document delimiters that bash and dash unquote alike: a plain
/// word, optionally quoted whole or in part, or preceded by one backslash. Under
/// dash `<<$'X'` ends at a `$X` line and `<<"A\B"` at `A\B`, while brush ends them
/// at `X` and `AB`, so lines dash runs would be taken for inert body text.
fn check_delimiter(raw: &str) -> Step {
    let plain = raw.strip_prefix('\\').unwrap_or(raw);
    let simple = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '\'' | '"');
    if plain.is_empty() || !plain.chars().all(simple) {
        return Err(syntax(format!(
            "here-document delimiter `{raw}` is too unusual"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;

/// Property tests. Cases: `PROPTEST_CASES` (default 64: each call is a round trip to a
/// parser thread); a longer run is `PROPTEST_CASES=20000 cargo test -p yieldshelld prop_`.
#[cfg(test)]
mod properties;

/// Differential tests: what the real `/bin/sh` runs for a line against what was reported.
#[cfg(all(test, unix))]
mod against_sh;
