//! The integration scenarios, one test crate (so the crate links once): each module is one
//! scenario file. Tests that read or change process-wide state (its threads, its resource
//! limits, its children) stay crates of their own beside this one.

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod blocking;
mod chromium;
mod classroom;
mod classroom_page;
mod cli;
mod docs;
mod faults;
mod fixtures;
mod foreign;
mod instruments;
mod limits;
mod model_sweep;
mod picture;
mod record;
mod replicas;
mod sequence;
mod workshop;
