//! Text-table primitives every instrument's text rendering uses.

use std::fmt::Write;

use crate::label::Label;

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

/// Labels separated by spaces, or `none`.
pub(crate) fn labels<'a>(labels: impl IntoIterator<Item = &'a Label>) -> String {
    let text: Vec<String> = labels.into_iter().map(Label::to_string).collect();
    if text.is_empty() {
        "none".to_owned()
    } else {
        text.join(" ")
    }
}
