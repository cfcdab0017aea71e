//! The keys `yieldctl top` understands, from the bytes a terminal in raw mode sends.
//!
//! `top` reads stdin with [`crate::person_terminal::StdinReader`], the same stoppable reader an
//! attach uses, not with crossterm's event reader: crossterm keeps a process-wide reader whose
//! helper thread can still be reading when the terminal is handed to an attach, and a key typed
//! then would be lost to one of them. With one reader at a time — `top`'s stopped and joined
//! before the attach starts its own — every key goes where the person sees it go. The few keys
//! `top` needs have fixed encodings (xterm and its descendants, VT100 cursor keys in both
//! modes), parsed here.

/// A key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Return.
    Enter,
    /// Escape (alone in its read: a sequence arrives whole).
    Esc,
    /// Backspace (DEL or BS).
    Backspace,
    /// Cursor up.
    Up,
    /// Cursor down.
    Down,
    /// Page up.
    PageUp,
    /// Page down.
    PageDown,
    /// Home.
    Home,
    /// End.
    End,
    /// Ctrl-C (raw mode: a byte, not a signal).
    CtrlC,
    /// Anything else (ignored).
    Other,
}

/// The keys in one read of the terminal.
pub fn parse(bytes: &[u8]) -> Vec<Key> {
    let mut keys = Vec::new();
    let text = String::from_utf8_lossy(bytes);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let key = match c {
            '\r' | '\n' => Key::Enter,
            '\x7f' | '\x08' => Key::Backspace,
            '\x03' => Key::CtrlC,
            '\x1b' => match chars.peek() {
                None => Key::Esc,
                Some('[') | Some('O') => {
                    chars.next();
                    // Parameters (digits, `;`), then the final character.
                    let mut params = String::new();
                    let mut last = None;
                    for c in chars.by_ref() {
                        if c.is_ascii_digit() || c == ';' {
                            params.push(c);
                        } else {
                            last = Some(c);
                            break;
                        }
                    }
                    match (last, params.as_str()) {
                        (Some('A'), _) => Key::Up,
                        (Some('B'), _) => Key::Down,
                        (Some('H'), _) => Key::Home,
                        (Some('F'), _) => Key::End,
                        (Some('~'), "1" | "7") => Key::Home,
                        (Some('~'), "4" | "8") => Key::End,
                        (Some('~'), "5") => Key::PageUp,
                        (Some('~'), "6") => Key::PageDown,
                        _ => Key::Other,
                    }
                }
                // Alt+key, or two Escapes typed together.
                Some('\x1b') => Key::Esc,
                Some(_) => {
                    chars.next();
                    Key::Other
                }
            },
            c if c.is_control() => Key::Other,
            c => Key::Char(c),
        };
        keys.push(key);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_from_their_bytes() {
        assert_eq!(
            parse(b"q/ab\r"),
            [
                Key::Char('q'),
                Key::Char('/'),
                Key::Char('a'),
                Key::Char('b'),
                Key::Enter
            ]
        );
        assert_eq!(parse(b"\x1b"), [Key::Esc]);
        assert_eq!(
            parse(b"\x1b[A\x1bOB\x1b[5~\x1b[6~\x1b[H\x1b[4~"),
            [
                Key::Up,
                Key::Down,
                Key::PageUp,
                Key::PageDown,
                Key::Home,
                Key::End
            ]
        );
        assert_eq!(parse(b"\x7f\x03"), [Key::Backspace, Key::CtrlC]);
        assert_eq!(parse("é".as_bytes()), [Key::Char('é')]);
        assert_eq!(parse(b"\x1b[1;5A"), [Key::Up], "with modifiers");
        assert_eq!(parse(b"\x1bx"), [Key::Other], "Alt-x");
    }
}
