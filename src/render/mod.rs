//! The renderings of `record`, `replicas` and `hold`, on their way into their instruments'
//! folders as the lab's own, `sweep`'s and `compare`'s have gone.
//!
//! - [`record`]: the individual record of a saved report, with evidence pointers.
//! - [`replicas`]: replica servers' requests, pause and crash, side by side.
//! - [`hold`]: what holding N requests costs each front: a table, a reading, curves.

#[cfg(unix)]
pub mod hold;
pub mod record;
#[cfg(unix)]
pub mod replicas;
