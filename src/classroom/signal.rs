//! Ctrl-C for a classroom session: SIGINT and SIGTERM end a session that serves, caught through
//! Tokio's signal handling. Once caught, a signal stays caught for the rest of the process (a
//! second Ctrl-C while the report is written is ignored); the process ends right after.

use std::io;

/// SIGINT and SIGTERM, caught from the moment this exists.
#[derive(Debug)]
pub(crate) struct Interrupts {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Interrupts {
    /// Starts catching; must be called on a Tokio runtime with its I/O driver.
    pub(crate) fn catch() -> io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Interrupts {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Interrupts {})
        }
    }

    /// Waits until SIGINT or SIGTERM arrives (or has arrived since catching began).
    pub(crate) async fn caught(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        {
            // An error would mean Ctrl-C cannot be caught at all: the session then ends at once.
            let _ = tokio::signal::ctrl_c().await;
            let _ = &mut self;
        }
    }
}
