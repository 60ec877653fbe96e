//! Request labels: `S1`..`S4`, `F1`, `S-after`, `F-after` in a lab run; `S<n>` up to
//! [`Label::MAX_SLOW`] when an instrument holds many; `R<n>` for a request sent by someone in the
//! room to a live classroom session. Each request carries its label to the server in the
//! `lab-request` header, so the route stays a plain `GET /slow` or `GET /fast`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::policy::{Held, Route, digits_only};

/// The header that carries a request's label.
pub(crate) const LABEL_HEADER: &str = "lab-request";

/// The name of one request of the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Label {
    /// `S<n>`: the n-th slow request held at the gate, from 1.
    Slow(u16),
    /// `F1`: the fast request tried while the slow gate is closed.
    F1,
    /// `S-after`: a new slow probe after release.
    SlowAfter,
    /// `F-after`: a new fast probe after release.
    FastAfter,
    /// `R<n>`: the n-th request from the room in a classroom session, to either route; the
    /// server assigns the number.
    Room(u32, Route),
}

impl Label {
    /// The largest `n` of an `S<n>` label.
    pub(crate) const MAX_SLOW: u16 = u16::MAX;

    /// The labels of the slow requests held at the gate: `S1..S<held>`.
    pub fn held(held: Held) -> impl Iterator<Item = Label> {
        Label::slow(held.get())
    }

    /// `S1..S<count>`, at most [`Label::MAX_SLOW`] of them.
    pub fn slow(count: usize) -> impl Iterator<Item = Label> {
        (1..=Label::MAX_SLOW).take(count).map(Label::Slow)
    }

    /// The route this request is sent to.
    pub(crate) fn route(self) -> Route {
        match self {
            Label::Slow(_) | Label::SlowAfter => Route::Slow,
            Label::F1 | Label::FastAfter => Route::Fast,
            Label::Room(_, route) => route,
        }
    }

    /// Whether the request came from the room rather than the scripted sequence.
    pub fn from_room(self) -> bool {
        matches!(self, Label::Room(..))
    }

    /// The label a request to `route` carries in its header: one the lab sends (its route must
    /// be `route`), or `R<n>` (n from 1, written plainly), which names no route of its own and
    /// so takes `route`. Only a caller holding the run's token gets this far; in a classroom
    /// session that is the classroom, which numbers the room's requests itself.
    pub(crate) fn read(text: &str, route: Route) -> Option<Label> {
        if let Some(digits) = text.strip_prefix('R') {
            return plain(digits).map(|n| Label::Room(n, route));
        }
        text.parse::<Label>()
            .ok()
            .filter(|label| label.route() == route)
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Slow(n) => write!(f, "S{n}"),
            Label::F1 => f.write_str("F1"),
            Label::SlowAfter => f.write_str("S-after"),
            Label::FastAfter => f.write_str("F-after"),
            Label::Room(n, _) => write!(f, "R{n}"),
        }
    }
}

/// The text is not one of the labels the lab sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownLabel;

impl FromStr for Label {
    type Err = UnknownLabel;

    /// A label the lab sends: `F1`, `S-after`, `F-after`, or `S<n>` with `n` from 1 through
    /// [`Label::MAX_SLOW`] written plainly (no sign, no leading zero). `R<n>` is the server's
    /// to assign and is never read from a request; its text names no route.
    fn from_str(text: &str) -> Result<Self, UnknownLabel> {
        match text {
            "F1" => Ok(Label::F1),
            "S-after" => Ok(Label::SlowAfter),
            "F-after" => Ok(Label::FastAfter),
            _ => {
                let digits = text.strip_prefix('S').ok_or(UnknownLabel)?;
                plain(digits).map(Label::Slow).ok_or(UnknownLabel)
            }
        }
    }
}

/// `digits` as a number if written plainly: digits only, no leading zero.
fn plain<N: FromStr>(digits: &str) -> Option<N> {
    digits_only(digits).filter(|_| !digits.starts_with('0'))
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
        // A room request's label (`R<n>`) does not say its route: it is read as sent to `/slow`,
        // and `record` looks its route up in the classroom report's `room_requests`.
        if let Some(Label::Room(n, _)) = Label::read(&text, Route::Slow) {
            return Ok(Label::Room(n, Route::Slow));
        }
        text.parse().map_err(|UnknownLabel| {
            serde::de::Error::custom(format!("not a lab request label: {text:?}"))
        })
    }
}

/// Labels separated by spaces, or `none`.
pub(crate) fn list<'a>(labels: impl IntoIterator<Item = &'a Label>) -> String {
    joined(labels, " ")
}

/// `items` separated by `separator`, or `none` when there are none: how every list of the
/// lab's reads, here on the ground floor so that the model says it as the renderings do.
pub(crate) fn joined(
    items: impl IntoIterator<Item = impl fmt::Display>,
    separator: &str,
) -> String {
    let text: Vec<String> = items.into_iter().map(|item| item.to_string()).collect();
    if text.is_empty() {
        "none".to_owned()
    } else {
        text.join(separator)
    }
}

/// Items as a person reads them: `a, b and c`, or `none`.
pub(crate) fn listed<T: fmt::Display>(items: impl Iterator<Item = T>) -> String {
    let items: Vec<String> = items.map(|item| item.to_string()).collect();
    match items.as_slice() {
        [] => "none".to_owned(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
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
            "", "S0", "S01", "s1", "F2", "S-before", "S", "S+1", " S1", "S65536", "R1",
        ] {
            assert_eq!(text.parse::<Label>(), Err(UnknownLabel), "{text:?}");
        }
    }

    #[test]
    fn many_slow_requests_have_labels() {
        assert_eq!("S5".parse(), Ok(Label::Slow(5)));
        assert_eq!("S65535".parse(), Ok(Label::Slow(u16::MAX)));
        assert_eq!(Label::slow(50_000).count(), 50_000);
        assert_eq!(Label::Room(3, Route::Fast).to_string(), "R3");
    }

    #[test]
    fn a_room_label_takes_the_route_it_was_sent_to() {
        assert_eq!(
            Label::read("R7", Route::Slow),
            Some(Label::Room(7, Route::Slow))
        );
        assert_eq!(
            Label::read("R1", Route::Fast),
            Some(Label::Room(1, Route::Fast))
        );
        assert_eq!(Label::read("S1", Route::Slow), Some(Label::Slow(1)));
        for (text, route) in [
            ("R0", Route::Slow),
            ("R01", Route::Slow),
            ("R", Route::Fast),
            ("R-1", Route::Fast),
            ("R4294967296", Route::Slow),
            ("S1", Route::Fast),
            ("F1", Route::Slow),
        ] {
            assert_eq!(Label::read(text, route), None, "{text:?} to {route}");
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
