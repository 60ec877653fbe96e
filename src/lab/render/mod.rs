//! The lab run's renderings, read only from its report: the text report and prediction table,
//! the text timeline, and the SVG picture.
//!
//! - [`text`]: the workshop's prediction table, predicted or filled in, and the text report.
//! - [`timeline`]: one policy run's ledger as occupancy bars, in ledger order.
//! - [`picture`]: a picture of a run, for a browser or a projector.
//! - [`waits`]: what the front's executor made wait, in sentences.

pub mod picture;
pub mod text;
pub(crate) mod timeline;
pub(crate) mod waits;
