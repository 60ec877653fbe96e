//! Text-table primitives every instrument's text rendering uses.

use std::fmt::Write;

/// Labels separated by spaces, or `none` (the label module's, so the model can say it too).
pub(crate) use crate::label::list as labels;

/// Left-aligned columns, two spaces apart, no trailing spaces.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|c| {
            let cells = rows.iter().filter_map(|r| r.get(c));
            cells.map(|s| s.chars().count()).max().unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `words` as lines of at most `width` characters, broken between words, each line after the
/// first indented by `indent` spaces; every line ends in a newline.
pub(crate) fn paragraph(words: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in words.split_whitespace() {
        let room = if out.is_empty() {
            width
        } else {
            width - indent
        };
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > room {
            push_line(&mut out, &line, indent);
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        push_line(&mut out, &line, indent);
    }
    out
}

fn push_line(out: &mut String, line: &str, indent: usize) {
    if !out.is_empty() {
        out.push_str(&" ".repeat(indent));
    }
    out.push_str(line);
    out.push('\n');
}

#[cfg(test)]
mod paragraph_tests {
    #[test]
    fn a_paragraph_breaks_between_words_within_its_width() {
        let text = super::paragraph("one two three four five six", 10, 2);
        assert_eq!(text, "one two\n  three\n  four\n  five six\n");
        assert!(text.lines().all(|l| l.chars().count() <= 10));
    }
}
