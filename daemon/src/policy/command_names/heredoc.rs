//! The expansions of an unquoted here-document body, found by a linear scan: brush-parser's own
//! reading of a body backtracks exponentially on unbalanced input, so the body is cut here and
//! brush re-reads each piece. [`expansion_end`] also serves the guard on `<<` lines.

use super::{CommandParseError, syntax};

/// Top-level expansions (`$(…)`, `$((…))`, `${…}`, `$[…]`, `` `…` ``) of an
/// unquoted here-document body, found by a linear scan.
///
/// Outside expansions quotes are literal and `\` escapes the next character, as
/// bash reads a here-document. A wrong guess about an expansion's extent is caught
/// by the caller, which has brush's tokenizer re-read each one.
pub(super) fn heredoc_expansions(body: &str) -> Result<Vec<&str>, CommandParseError> {
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
pub(super) fn expansion_end(body: &str, start: usize) -> Result<usize, CommandParseError> {
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
