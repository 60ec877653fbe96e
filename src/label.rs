//! Request labels: `S1`..`S4`, `F1`, `S-after`, `F-after`. Each request carries its label to the
//! server in the `lab-request` header, so the route stays a plain `GET /slow` or `GET /fast`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::policy::{Held, Route};

/// The header that carries a request's label.
pub const LABEL_HEADER: &str = "lab-request";

/// The name of one request of the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Label {
    /// `S<n>`: the n-th slow request held at the gate, 1 through `Held::MAX`.
    Slow(u8),
    /// `F1`: the fast request tried while the slow gate is closed.
    F1,
    /// `S-after`: a new slow probe after release.
    SlowAfter,
    /// `F-after`: a new fast probe after release.
    FastAfter,
}

impl Label {
    /// The labels of the slow requests held at the gate: `S1..S<held>`.
    pub fn held(held: Held) -> impl Iterator<Item = Label> {
        (1..).take(held.get()).map(Label::Slow)
    }

    /// The route this request is sent to.
    pub fn route(self) -> Route {
        match self {
            Label::Slow(_) | Label::SlowAfter => Route::Slow,
            Label::F1 | Label::FastAfter => Route::Fast,
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Slow(n) => write!(f, "S{n}"),
            Label::F1 => f.write_str("F1"),
            Label::SlowAfter => f.write_str("S-after"),
            Label::FastAfter => f.write_str("F-after"),
        }
    }
}

/// The text is not one of the labels the lab sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownLabel;

impl FromStr for Label {
    type Err = UnknownLabel;

    fn from_str(text: &str) -> Result<Self, UnknownLabel> {
        match text {
            "F1" => Ok(Label::F1),
            "S-after" => Ok(Label::SlowAfter),
            "F-after" => Ok(Label::FastAfter),
            // Exactly `S` and one digit from 1 through `Held::MAX`: no sign, no leading zero.
            _ => match *text.as_bytes() {
                [b'S', digit] if digit.is_ascii_digit() => Held::new(digit - b'0')
                    .map(|_| Label::Slow(digit - b'0'))
                    .ok_or(UnknownLabel),
                _ => Err(UnknownLabel),
            },
        }
    }
}

impl Serialize for Label {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Label {
    /// A saved report's label, checked as the server checks a request's header.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(|UnknownLabel| {
            serde::de::Error::custom(format!("not a lab request label: {text:?}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_round_trips_through_its_text() {
        let max = Held::new(Held::MAX).expect("MAX is allowed");
        let all: Vec<Label> = Label::held(max)
            .chain([Label::F1, Label::SlowAfter, Label::FastAfter])
            .collect();
        let texts: Vec<String> = all.iter().map(|l| l.to_string()).collect();
        assert_eq!(texts, ["S1", "S2", "S3", "S4", "F1", "S-after", "F-after"]);
        for label in all {
            assert_eq!(label.to_string().parse(), Ok(label));
        }
    }

    #[test]
    fn texts_the_lab_never_sends_are_not_labels() {
        for text in [
            "", "S0", "S5", "S01", "s1", "F2", "S-before", "S", "S+1", " S1",
        ] {
            assert_eq!(text.parse::<Label>(), Err(UnknownLabel), "{text:?}");
        }
    }

    #[test]
    fn labels_name_their_routes() {
        assert_eq!(Label::Slow(3).route(), Route::Slow);
        assert_eq!(Label::SlowAfter.route(), Route::Slow);
        assert_eq!(Label::F1.route(), Route::Fast);
        assert_eq!(Label::FastAfter.route(), Route::Fast);
    }
}
