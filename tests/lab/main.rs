//! The integration scenarios, one test crate (so the crate links once): each module is one
//! scenario file. A test that counts or changes what belongs to the whole process (its
//! threads, its descriptors, its children, its resource limits) runs alone in a process of its
//! own, this binary started again (`common::alone`), beside the others.

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod blocking;
mod blocking_repeat;
mod chromium;
mod classroom;
mod classroom_page;
mod cli;
mod compare;
mod docs;
mod faults;
mod fixtures;
mod foreign;
mod hold;
mod hold_failures;
mod instruments;
mod limits;
mod load;
mod model_sweep;
mod picture;
mod record;
mod replicas;
mod sequence;
mod soak;
mod workshop;
