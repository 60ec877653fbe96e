//! Text for a terminal. What the lab prints may quote text from outside its process (a report's
//! file, a Redis server's reply, a child's stderr, a command line): shown here as it is when
//! every character prints as itself, and otherwise with each one that does not (a line break, an
//! escape that would move the cursor or hide what follows, a bidirectional override) written out
//! as Rust writes it (`\u{1b}`). So quoted text can neither draw a line the lab did not write nor
//! erase or hide one it did.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` shows as itself on a terminal: not a control character (C0, DEL, C1), not a
/// line or paragraph separator or an interlinear annotation, and none of Unicode's
/// default-ignorable code points, of which a terminal shows nothing: the soft hyphen, the
/// bidirectional marks, embeddings, overrides and isolates, the zero-width ones, the fillers,
/// the variation selectors, the musical and shorthand format controls, and the tag characters
/// (invisible letters).
pub(crate) fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(c,
            '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{115f}'..='\u{1160}' | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{3164}' | '\u{fe00}'..='\u{fe0f}' | '\u{feff}'
            | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}' | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}' | '\u{e0000}'..='\u{e0fff}')
}

/// `text` as one line that shows what it holds: a line break is written out too.
pub fn one_line(text: &str) -> Cow<'_, str> {
    written_out(text, printable)
}

/// `text` as the lines it holds, each showing what it holds: only its line breaks are kept.
pub fn lines(text: &str) -> Cow<'_, str> {
    written_out(text, |c| c == '\n' || printable(c))
}

/// `json`, a document `serde_json` wrote (pretty or not), as a terminal shows it: JSON escapes
/// the C0 controls by itself (a line break, an escape), and each other character that does not
/// print as itself ([`printable`]: DEL, a C1 control, a bidirectional override, an invisible
/// format character) is escaped here as `\uXXXX` (a pair of them above U+FFFF). Outside its
/// strings such a document holds only ASCII that prints, spaces and line breaks, so each such
/// character stands in a string, where its escape reads back as the same text: the document
/// means what it meant.
pub fn json(json: String) -> String {
    // Most documents are ASCII throughout, and serde_json has escaped every ASCII control but
    // DEL already: the standard library's scans (a word at a time) say so, where a loop of this
    // crate's over the bytes (built for size) took about 0.3 M instructions of a default run.
    let kept = |c: char| c == '\n' || printable(c);
    if (json.is_ascii() && !json.contains('\u{7f}')) || json.chars().all(kept) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if kept(c) {
            out.push(c);
        } else {
            for unit in c.encode_utf16(&mut [0; 2]) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        }
    }
    out
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
        assert_eq!(one_line("x\u{ad}\u{e0041}y"), r"x\u{ad}\u{e0041}y");
        // Unicode's default-ignorable code points: a filler, a deprecated format character, a
        // variation selector, a musical format control.
        let invisible = "x\u{3164}\u{206f}\u{fe0f}\u{1d173}y";
        assert_eq!(one_line(invisible), r"x\u{3164}\u{206f}\u{fe0f}\u{1d173}y");
        assert_eq!(lines("a\nb\u{1b}[8m\n"), "a\nb\\u{1b}[8m\n");
    }

    /// JSON that quotes what a terminal would act on escapes it, and still reads back as the
    /// same value.
    #[test]
    fn json_shows_what_it_holds() {
        let said = "a\u{1b}[2K\u{7f}\u{9b}\u{202e}é\u{e0041}\n";
        let value = serde_json::json!({ "said": said, "n": [1] });
        let pretty = serde_json::to_string_pretty(&value).expect("serializes");
        let shown = json(pretty.clone());
        assert!(shown.chars().all(|c| c == '\n' || printable(c)), "{shown}");
        assert!(
            shown.contains(r"\u007f\u009b\u202eé\udb40\udc41"),
            "{shown}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&shown).ok(),
            Some(value)
        );
        // A document with nothing to escape is itself.
        let plain = serde_json::to_string_pretty(&serde_json::json!({ "a": "été" }));
        let plain = plain.expect("serializes");
        assert_eq!(json(plain.clone()), plain);
    }
}
