//! Drawing primitives shared by every instrument's rendering: SVG (colours, measured type,
//! shapes, escaped text) and text tables. No instrument's picture is drawn here.
//!
//! - [`svg`]: the SVG writer.
//! - [`table`]: left-aligned text columns and label lists.
//! - [`terminal`]: text quoted from outside the process, shown as it is and drawing nothing.

pub(crate) mod svg;
pub(crate) mod table;
pub mod terminal;
