//! Text-table primitives every instrument's text rendering uses.

use std::fmt::Write;

/// Labels separated by spaces, or `none`; and any items so joined (the label module's, so the
/// model can say it too).
pub(crate) use crate::label::{joined, list as labels};

/// A row of [`columns`]: its heading, then its cells.
pub(crate) fn row(
    heading: impl Into<String>,
    cells: impl IntoIterator<Item = String>,
) -> Vec<String> {
    std::iter::once(heading.into()).chain(cells).collect()
}

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

/// A count with thin groups of three: `17 936`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(digit);
    }
    out
}

/// [`plural`] and the past of "to be" that agrees with it: `1 request was`, `2 requests were`.
pub(crate) fn plural_was<N: Copy + std::fmt::Display>(n: N, noun: &str) -> String
where
    u64: TryFrom<N>,
{
    let verb = if matches!(u64::try_from(n), Ok(1)) {
        "was"
    } else {
        "were"
    };
    format!("{} {verb}", plural(n, noun))
}

/// `n` and `noun` in the number `n` asks for: `1 permit`, `2 permits`. (A noun whose plural is
/// not its singular and an `s` is written out where it is used.)
pub(crate) fn plural<N: Copy + std::fmt::Display>(n: N, noun: &str) -> String
where
    u64: TryFrom<N>,
{
    match u64::try_from(n) {
        Ok(1) => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

/// `words` as lines of at most `width` characters (a longer word has a line of its own),
/// broken between words: the first line led by `first`, each later one by `rest`. Every line
/// ends in a newline; no words make no lines.
pub(crate) fn wrap(words: &str, first: &str, rest: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_owned();
    let mut empty = true;
    for word in words.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line = rest.to_owned();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    if !empty {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A heading line: `title`, a colon, the command line's `flags` (`--slots 2 --held 2`), then
/// the words of `tail`, broken before a flag or a word of the tail where the line would pass 80
/// columns, so that a flag keeps its value; later lines are indented two. No newline at the end.
pub(crate) fn heading(title: &str, flags: &str, tail: &str) -> String {
    let mut units: Vec<String> = Vec::new();
    for word in flags.split_whitespace() {
        match units.last_mut() {
            Some(unit) if !word.starts_with("--") => {
                unit.push(' ');
                unit.push_str(word);
            }
            _ => units.push(word.to_owned()),
        }
    }
    units.extend(tail.split_whitespace().map(str::to_owned));
    let mut out = format!("{title}:");
    let mut width = out.chars().count();
    for unit in units {
        let n = unit.chars().count();
        if width + 1 + n > 80 {
            out.push_str("\n  ");
            width = 2;
        } else {
            out.push(' ');
            width += 1;
        }
        out.push_str(&unit);
        width += n;
    }
    out
}

#[cfg(test)]
mod wrap_tests {
    /// A heading breaks before a flag, never between a flag and its value, within 80 columns.
    #[test]
    fn a_heading_keeps_each_flag_with_its_value() {
        let flags = " --mode partitioned --slots 4 --held 4 --work spawn-blocking --workers \
                     current-thread --blocking-threads 3";
        let said = super::heading("isolation-lab 0.1.0", flags, "");
        assert_eq!(
            said,
            "isolation-lab 0.1.0: --mode partitioned --slots 4 --held 4 --work spawn-blocking\n  \
             --workers current-thread --blocking-threads 3"
        );
        let short = super::heading("isolation-lab compare", " --slots 2 --held 2,", "each one");
        assert_eq!(short, "isolation-lab compare: --slots 2 --held 2, each one");
    }

    #[test]
    fn words_break_between_them_within_the_width() {
        let text = super::wrap("one two three four five six", "", "  ", 10);
        assert_eq!(text, "one two\n  three\n  four\n  five six\n");
        assert!(text.lines().all(|l| l.chars().count() <= 10));
        assert_eq!(
            super::wrap("one two three", "- ", "  ", 10),
            "- one two\n  three\n"
        );
        assert_eq!(super::wrap(" ", "- ", "  ", 10), "");
    }
}
