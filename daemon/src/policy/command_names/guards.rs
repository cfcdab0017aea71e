//! The cheap checks run before brush-parser sees a line, each refusing a kind of input that
//! would crash it (a stack overflow, an `unwrap` on a huge number) or make it misplace words (a
//! quote running past the line of a `<<`). They scan text without parsing it, so they
//! over-refuse odd lines rather than miss one.

use super::heredoc::expansion_end;

/// Keywords that open a nesting level in brush's grammar.
const NESTING_KEYWORDS: &[&str] = &[
    "if", "elif", "while", "until", "for", "case", "select", "function", "coproc",
];

/// Upper bound on how deeply brush (and this walk) will recurse for `line`.
///
/// Counts every character or keyword that can open a nesting level (`(`, `{`, `[`,
/// backquote, `!` which nests in `[[ ! ! x ]]`, and compound keywords), ignoring
/// quotes and closers on purpose: a scanner that tried to skip quoted text could be
/// fooled (`#` comments, here-documents), and over-counting merely refuses an odd line.
pub(super) fn opener_count(line: &str) -> usize {
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
pub(super) fn has_overflowing_number(line: &str) -> bool {
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
pub(super) fn heredoc_line_continues(line: &str) -> bool {
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
