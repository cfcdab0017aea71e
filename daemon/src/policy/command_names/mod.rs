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
//!
//! # Where things are
//! [`guards`] refuse, before brush parses, what would crash it or make it misplace words;
//! [`walker`] walks the AST and every substitution; [`words`] reads words literally;
//! [`heredoc`] cuts here-document bodies into their expansions; [`checks`] refuses single
//! pieces met on the way; [`parser_thread`] runs it all on a big stack, off the runtime.
//!
//! [`why_risky`]: super::risky_env::why_risky

mod checks;
mod guards;
mod heredoc;
mod parser_thread;
mod walker;
mod words;

pub use parser_thread::{inspect, inspect_blocking};

use guards::{has_overflowing_number, heredoc_line_continues, opener_count};
use walker::collect;

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

#[cfg(test)]
mod tests;

/// Property tests. Cases: `PROPTEST_CASES` (default 64: each call is a round trip to a
/// parser thread); a longer run is `PROPTEST_CASES=20000 cargo test -p yieldshelld prop_`.
#[cfg(test)]
mod properties;

/// Differential tests: what the real `/bin/sh` runs for a line against what was reported.
#[cfg(all(test, unix))]
mod against_sh;
