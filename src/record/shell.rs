//! What `record` prints from a file, shown as it is: every command or file name is one word a
//! shell turns into the same bytes, whatever bytes the name holds; every text taken from a
//! report is one line that shows what it holds, whatever characters it holds.

use std::ffi::OsStr;

/// `name` as one word of a shell command: as it is when it holds no character the shell treats
/// specially; in single quotes when it is printable text; otherwise in ANSI-C quotes
/// (`$'r\xff.json'`, read by bash, zsh and ksh), each byte that is not printable UTF-8 written
/// `\xHH`, so a name with invalid UTF-8, a control character or a bidirectional override reads
/// back as the same bytes and shows nothing it does not hold.
pub(crate) fn shell_word(name: &OsStr) -> String {
    let bytes = name.as_encoded_bytes();
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-/+,:=@%".contains(c);
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.is_empty() && text.chars().all(plain) => text.to_owned(),
        Ok(text) if text.chars().all(printable) => format!("'{}'", text.replace('\'', r"'\''")),
        _ => ansi_c(bytes),
    }
}

/// `text` as it shows: as it is when every character prints as itself; otherwise each that
/// does not (a line break, an escape that would move the cursor or hide what follows, a
/// bidirectional override) written `\u{1b}` as Rust writes it, so text from an edited report
/// can neither draw a line `record` did not write nor hide one it did.
pub(crate) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().all(printable) {
        return text.into();
    }
    let escaped = text.chars().map(|c| match c {
        c if printable(c) => c.to_string(),
        c => c.escape_unicode().to_string(),
    });
    escaped.collect::<String>().into()
}

/// Whether `c` shows as itself on a terminal: not a control character, and none of the
/// invisible format characters that reorder or hide text.
fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(c,
            '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// `bytes` in `$'…'`: printable UTF-8 as it is (`\` and `'` escaped), every other byte `\xHH`.
fn ansi_c(bytes: &[u8]) -> String {
    let mut out = String::from("$'");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str(r"\\"),
                '\'' => out.push_str(r"\'"),
                c if printable(c) => out.push(c),
                c => escape(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        escape(&mut out, chunk.invalid());
    }
    out.push('\'');
    out
}

fn escape(out: &mut String, bytes: &[u8]) {
    for byte in bytes {
        out.push_str(&format!("\\x{byte:02x}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn bytes(name: &[u8]) -> String {
        use std::os::unix::ffi::OsStrExt;
        shell_word(OsStr::from_bytes(name))
    }

    #[test]
    fn file_names_are_quoted_for_the_shell_only_when_needed() {
        let word = |name: &str| shell_word(OsStr::new(name));
        assert_eq!(word("r.json"), "r.json");
        assert_eq!(word("runs/held-4.json"), "runs/held-4.json");
        assert_eq!(word("my run.json"), "'my run.json'");
        assert_eq!(word("it's.json"), r"'it'\''s.json'");
        assert_eq!(word("été.json"), "'été.json'");
        assert_eq!(word(""), "''");
    }

    /// Bytes that are not printable UTF-8 are written `\xHH` inside `$'…'`, the rest as it is.
    #[cfg(unix)]
    #[test]
    fn bytes_that_do_not_print_are_escaped() {
        assert_eq!(bytes(b"r\xff.json"), r"$'r\xff.json'");
        assert_eq!(bytes(b"a\nb's\\.json"), r"$'a\x0ab\'s\\.json'");
        assert_eq!(bytes("x\u{202e}y".as_bytes()), r"$'x\xe2\x80\xaey'");
        assert_eq!(bytes(b"\xc3\xa9\xc3"), r"$'é\xc3'");
    }

    /// Text that prints is shown as it is; a line break, an escape or an override is written
    /// out, so what a report quotes stays on its line and draws nothing.
    #[test]
    fn text_shows_what_it_holds_on_one_line() {
        assert_eq!(shown("S1 held, été"), "S1 held, été");
        assert_eq!(shown("a\nb"), r"a\u{a}b");
        assert_eq!(shown("x\u{1b}[2K\ry"), r"x\u{1b}[2K\u{d}y");
        assert_eq!(shown("x\u{202e}y"), r"x\u{202e}y");
    }
}
