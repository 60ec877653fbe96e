//! File names as the shell reads them back: every command or file name `record` prints is one
//! word a shell turns into the same bytes, whatever bytes the name holds.

use std::ffi::OsStr;

use crate::draw::terminal::printable;

/// `name` as one word of a shell command: as it is when it holds no character the shell treats
/// specially; in single quotes when it is printable text; otherwise in ANSI-C quotes
/// (`$'r\xff.json'`, read by bash, zsh and ksh), each byte that is not printable UTF-8 written
/// `\xHH`, so a name with invalid UTF-8, a control character or a bidirectional override reads
/// back as the same bytes and shows nothing it does not hold.
pub(crate) fn shell_word(name: &OsStr) -> String {
    let bytes = name.as_encoded_bytes();
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-/+,:=@%".contains(c);
    // A leading `=` is zsh's: `=name` reads as the path of the command `name`.
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.is_empty() && !text.starts_with('=') && text.chars().all(plain) => {
            text.to_owned()
        }
        Ok(text) if text.chars().all(printable) => format!("'{}'", text.replace('\'', r"'\''")),
        _ => ansi_c(bytes),
    }
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
        assert_eq!(word("=r.json"), "'=r.json'", "not zsh's =command");
        assert_eq!(word("a=r.json"), "a=r.json");
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
}
