//! Everything drawn for a person, read only from reports and the instruments' data: the text
//! report and prediction table, the text timeline, the SVG picture, and the `sweep`, `compare`
//! and `replicas` tables.
//!
//! - [`text`]: the workshop's prediction table, predicted or filled in, and the text report.
//! - [`timeline`]: one policy run's ledger as occupancy bars, in ledger order.
//! - [`svg`]: a picture of a run, for a browser or a projector.
//! - [`sweep`]: one matrix per policy over every allowed input.
//! - [`compare`]: both fronts side by side.
//! - [`record`]: the individual record of a saved report, with evidence pointers.
//! - [`replicas`]: replica servers' requests, pause and crash, side by side.

pub mod compare;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod record;
#[cfg(unix)]
pub mod replicas;
pub mod svg;
pub mod sweep;
pub mod text;
pub mod timeline;
