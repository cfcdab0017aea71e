//! Refusals of single pieces met during the walk: parses whose words do not match the source
//! (brush-parser's known misreadings), arithmetic that names a variable, assignments to a
//! variable [`why_risky`] refuses, and here-document delimiters dash unquotes differently.

use brush_parser::word::{self, WordPiece};

use super::{Step, dynamic, syntax};
use crate::policy::risky_env::why_risky;

/// Refuses a parse whose words do not match the source: words must not overlap, and
/// each must be the text at its (character) span, up to leading blanks. brush 0.4.0 breaks both when a here-document is pending and `$(…)`
/// holds a multi-line quote: `cat <<E $(A="m⏎n" rm x)` becomes `cat A="m⏎n" rm x $()`.
pub(super) fn check_spans(src: &str, mut spans: Vec<(usize, usize, String)>) -> Step {
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
pub(super) fn check_tokenized(raw: &str, pieces: &[word::WordPieceWithSource]) -> Step {
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
pub(super) fn check_arithmetic(text: &str) -> Step {
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
/// or an [`ASSIGNING`](super::ASSIGNING) builtin).
pub(super) fn check_assigned(name: &str) -> Step {
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
pub(super) fn check_delimiter(raw: &str) -> Step {
    let plain = raw.strip_prefix('\\').unwrap_or(raw);
    let simple = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '\'' | '"');
    if plain.is_empty() || !plain.chars().all(simple) {
        return Err(syntax(format!(
            "here-document delimiter `{raw}` is too unusual"
        )));
    }
    Ok(())
}
