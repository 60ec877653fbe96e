//! The rendering of `hold`, on its way into its instrument's folder as every other
//! instrument's has gone.
//!
//! - [`hold`]: what holding N requests costs each front: a table, a reading, curves.

#[cfg(unix)]
pub mod hold;
