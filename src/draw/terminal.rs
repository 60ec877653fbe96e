//! Text for a terminal. What the lab prints may quote text from outside its process (a report's
//! file, a Redis server's reply, a child's stderr, a command line): shown here as it is when
//! every character prints as itself, and otherwise with each one that does not (a line break, an
//! escape that would move the cursor or hide what follows, a bidirectional override) written out
//! as Rust writes it (`\u{1b}`). So quoted text can neither draw a line the lab did not write nor
//! erase or hide one it did.

use std::borrow::Cow;

/// Whether `c` shows as itself on a terminal: not a control character, and none of the
/// invisible format characters that reorder or hide text, or break a line.
pub(crate) fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(c,
            '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `text` as one line that shows what it holds: a line break is written out too.
pub fn one_line(text: &str) -> Cow<'_, str> {
    written_out(text, printable)
}

/// `text` as the lines it holds, each showing what it holds: only its line breaks are kept.
pub fn lines(text: &str) -> Cow<'_, str> {
    written_out(text, |c| c == '\n' || printable(c))
}

fn written_out(text: &str, kept: impl Fn(char) -> bool) -> Cow<'_, str> {
    if text.chars().all(&kept) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if kept(c) {
            out.push(c);
        } else {
            out.extend(c.escape_unicode());
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text that prints is shown as it is; a line break, an escape or an override is written
    /// out, so what the lab quotes stays on its line and draws nothing.
    #[test]
    fn text_shows_what_it_holds() {
        assert_eq!(one_line("S1 held, été"), "S1 held, été");
        assert_eq!(one_line("a\nb"), r"a\u{a}b");
        assert_eq!(one_line("x\u{1b}[2K\ry"), r"x\u{1b}[2K\u{d}y");
        assert_eq!(one_line("x\u{202e}y"), r"x\u{202e}y");
        assert_eq!(lines("a\nb\u{1b}[8m\n"), "a\nb\\u{1b}[8m\n");
    }
}
