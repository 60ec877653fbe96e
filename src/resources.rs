//! Resource evidence: what a held request costs on each server front. Counted at the moment the
//! observer looks before F1, and again after the run has closed everything.

use serde::{Deserialize, Serialize};

/// What the process holds at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// OS threads of the whole process, from `/proc/self/task`; `None` where the OS does not
    /// expose the count that way (every OS but Linux).
    pub os_threads: Option<usize>,
    /// Connection handlers alive: Tokio tasks on the async front, OS threads on the threaded
    /// one. Neither front bounds them; only the work section is bounded.
    pub connection_handlers: usize,
    /// Requests held at the slow gate.
    pub held_at_gate: usize,
}

/// The report's `resources`: before F1, and after the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceEvidence {
    /// With the slow work held, when `observer_before_fast` is recorded.
    pub before_fast: Option<Resources>,
    /// Once the server and every caller are closed.
    pub after_run: Option<Resources>,
}

/// The process's OS threads, on Linux.
pub(crate) fn os_threads() -> Option<usize> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    std::fs::read_dir("/proc/self/task")
        .ok()
        .map(Iterator::count)
}
