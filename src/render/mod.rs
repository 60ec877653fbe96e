//! The renderings of `replicas` and `hold`, on their way into their instruments'
//! folders as the lab's own, `sweep`'s, `compare`'s and `record`'s have gone.
//!
//! - [`replicas`]: replica servers' requests, pause and crash, side by side.
//! - [`hold`]: what holding N requests costs each front: a table, a reading, curves.

#[cfg(unix)]
pub mod hold;
#[cfg(unix)]
pub mod replicas;
