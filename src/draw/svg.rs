//! SVG primitives every picture of the lab draws with: the colours, type styles measured
//! against DejaVu Sans, rectangles, lines and text escaped through one door.

use std::fmt::{self, Write};

// Okabe–Ito colours, distinguishable with the common colour-vision deficiencies. Colour never
// carries a meaning alone: every mark also differs in shape, or is labelled in words.
pub(crate) const BLUE: &str = "#0072B2";
pub(crate) const SKY: &str = "#56B4E9";
pub(crate) const VERMILLION: &str = "#D55E00";
pub(crate) const INK: &str = "#1A1A1A";
pub(crate) const GREY: &str = "#5E5E5E";
pub(crate) const RULE: &str = "#C8C8C8";
pub(crate) const SHADE: &str = "#E8E8E8";

/// The fonts every picture names, DejaVu Sans first, whose widths [`text_width`] reads; the
/// fonts after it are about as wide.
pub(crate) const FONT_FAMILY: &str = "DejaVu Sans, Verdana, Arial, sans-serif";

/// DejaVu Sans's advance widths in thousandths of an em, for `' '` through `'~'`: book, then
/// bold.
const BOOK_ADVANCES: [u16; 95] = [
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636,
    636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632,
    575, 775, 752, 295, 295, 656, 557, 863, 748, 787, 603, 787, 695, 635, 611, 732, 684, 989, 685,
    611, 685, 390, 337, 390, 838, 500, 500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579,
    278, 974, 634, 612, 635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838,
];
const BOLD_ADVANCES: [u16; 95] = [
    348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365, 696, 696, 696,
    696, 696, 696, 696, 696, 696, 696, 400, 400, 838, 838, 838, 580, 1000, 774, 762, 734, 830, 683,
    683, 821, 837, 372, 372, 775, 637, 995, 837, 850, 733, 850, 770, 720, 682, 812, 774, 1103, 771,
    724, 725, 457, 365, 457, 838, 500, 500, 675, 716, 593, 716, 678, 435, 716, 712, 343, 343, 665,
    343, 1042, 712, 687, 716, 716, 493, 595, 478, 712, 652, 924, 645, 652, 582, 712, 365, 712, 838,
];

/// How wide `words` are set in `style`, from the advance widths above, with 3 % to spare for
/// another font; a character outside ASCII counts as a full em. An SVG file cannot measure
/// its own text, and a label's place depends on its width.
pub(crate) fn text_width(words: &str, style: Type) -> f64 {
    let advances = if style.bold {
        &BOLD_ADVANCES
    } else {
        &BOOK_ADVANCES
    };
    let em = |c: char| {
        let index = (c as usize).wrapping_sub(' ' as usize);
        advances.get(index).map_or(1.0, |&w| f64::from(w) / 1000.0)
    };
    words.chars().map(em).sum::<f64>() * style.size * 1.03
}

/// `words` broken at spaces into lines no wider than `room`; a word wider than `room` on its
/// own is broken between characters. Joined with one space each, the lines give back the words
/// (less any word broken between characters).
pub(crate) fn wrap(words: &str, style: Type, room: f64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line: Option<String> = None;
    for word in words.split(' ') {
        if let Some(current) = &mut line {
            let longer = format!("{current} {word}");
            if text_width(&longer, style) <= room {
                *current = longer;
                continue;
            }
            lines.extend(line.take());
        }
        let mut rest = word;
        // A word that cannot fit on a line of its own is broken where the line is full.
        while text_width(rest, style) > room {
            let mut fill = 0.0;
            let mut split = rest.len();
            for (i, c) in rest.char_indices() {
                fill += text_width(c.encode_utf8(&mut [0; 4]), style);
                if fill > room && i > 0 {
                    split = i;
                    break;
                }
            }
            if split >= rest.len() {
                break;
            }
            let (head, tail) = rest.split_at(split);
            lines.push(head.to_owned());
            rest = tail;
        }
        line = Some(rest.to_owned());
    }
    lines.extend(line);
    lines
}

/// How a shape is painted: its fill, and its outline if it has one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Paint {
    pub(crate) fill: &'static str,
    pub(crate) stroke: Option<(&'static str, f64)>,
    pub(crate) dash: &'static str,
}

impl Paint {
    pub(crate) const fn fill(fill: &'static str) -> Self {
        Paint {
            fill,
            stroke: None,
            dash: "",
        }
    }

    /// A line, or an outline with nothing inside.
    pub(crate) const fn line(colour: &'static str, width: f64) -> Self {
        Paint::fill("none").stroke(colour, width)
    }

    pub(crate) const fn stroke(self, colour: &'static str, width: f64) -> Self {
        Paint {
            stroke: Some((colour, width)),
            ..self
        }
    }

    pub(crate) const fn dashed(self, dash: &'static str) -> Self {
        Paint { dash, ..self }
    }
}

impl fmt::Display for Paint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, r#"fill="{}""#, self.fill)?;
        if let Some((colour, width)) = self.stroke {
            write!(f, r#" stroke="{colour}" stroke-width="{width}""#)?;
        }
        if !self.dash.is_empty() {
            write!(f, r#" stroke-dasharray="{}""#, self.dash)?;
        }
        Ok(())
    }
}

/// How a piece of text is set: the run's picture and `hold`'s set their text alike.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Type {
    pub(crate) size: f64,
    pub(crate) bold: bool,
    pub(crate) colour: &'static str,
    /// `start`, `middle` or `end`: which end of the text sits at its x.
    pub(crate) anchor: &'static str,
    /// The text element's class, if any: what it says, for whoever reads the picture back.
    pub(crate) class: &'static str,
}

impl Type {
    pub(crate) const fn size(size: f64) -> Self {
        Type {
            size,
            bold: false,
            colour: INK,
            anchor: "start",
            class: "",
        }
    }

    pub(crate) const fn bold(self) -> Self {
        Type { bold: true, ..self }
    }

    pub(crate) const fn colour(self, colour: &'static str) -> Self {
        Type { colour, ..self }
    }

    pub(crate) const fn anchor(self, anchor: &'static str) -> Self {
        Type { anchor, ..self }
    }

    pub(crate) const fn class(self, class: &'static str) -> Self {
        Type { class, ..self }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let weight = if self.bold { "bold" } else { "normal" };
        if !self.class.is_empty() {
            write!(f, r#"class="{}" "#, self.class)?;
        }
        write!(
            f,
            r#"font-size="{}" font-weight="{weight}" fill="{}" text-anchor="{}""#,
            self.size, self.colour, self.anchor
        )
    }
}

pub(crate) fn rect(
    out: &mut String,
    (x, y): (f64, f64),
    (w, h): (f64, f64),
    paint: Paint,
) -> fmt::Result {
    let w = w.max(0.0);
    writeln!(
        out,
        r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" {paint}/>"#
    )
}

pub(crate) fn line(
    out: &mut String,
    (x1, y1): (f64, f64),
    (x2, y2): (f64, f64),
    paint: Paint,
) -> fmt::Result {
    writeln!(
        out,
        r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {paint}/>"#
    )
}

/// A text element. `words` is escaped here, so every piece of text passes through one door.
pub(crate) fn text(out: &mut String, (x, y): (f64, f64), style: Type, words: &str) -> fmt::Result {
    let words = Escaped(words);
    writeln!(out, r#"<text x="{x:.1}" y="{y:.1}" {style}>{words}</text>"#)
}

/// Text made safe for XML character data and quoted attribute values.
pub(crate) struct Escaped<'a>(pub(crate) &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&apos;")?,
                // XML 1.0 forbids these control characters even as references: leave them out.
                c if c < ' ' && !matches!(c, '\t' | '\n' | '\r') => {}
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}
