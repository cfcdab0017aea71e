//! What a word says literally, read from brush-parser's pieces after quote removal: a command
//! word's program (refused when any of it is expanded), the literal start of an argument,
//! whether an expansion in it may split into more words, and whether a redirection's target is a
//! file written.

use brush_parser::ParserOptions;
use brush_parser::ast::{self, IoFileRedirectKind as Kind, IoFileRedirectTarget as Target};
use brush_parser::word::{self, WordPiece};

use super::{CommandParseError, dynamic, syntax};

/// Whether a `File` redirection opens a file for writing: see the module documentation.
pub(super) fn writes_file(kind: &Kind, target: &Target, options: &ParserOptions) -> bool {
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
pub(super) fn leading_literal(
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
pub(super) fn has_unquoted_expansion(
    raw: &str,
    options: &ParserOptions,
) -> Result<bool, CommandParseError> {
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
pub(super) fn literal_program(
    raw: &str,
    options: &ParserOptions,
) -> Result<String, CommandParseError> {
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
