//! The child's stderr, read as it comes, down to its last line.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;

use super::lock;

/// How long [`ChildProcess::wait`](super::ChildProcess::wait) waits, once the child has exited, for the rest of its stderr.
/// The pipe normally ends with the child; only a process the child started and let inherit its
/// stderr can keep it open, and the last line read by then stands.
const STDERR_AFTER_EXIT: Duration = Duration::from_secs(2);

/// The child's stderr, read as it comes so the child never blocks on a full pipe, keeping the
/// last line worth showing.
#[derive(Debug)]
pub(super) struct StderrTail {
    last: Arc<Mutex<Option<String>>>,
    /// Aborted on drop; `None` once finished.
    reader: Option<JoinHandle<()>>,
}

impl StderrTail {
    pub(super) fn start(pipe: pipe::Receiver) -> StderrTail {
        let last = Arc::new(Mutex::new(None));
        let keep = last.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).split(b'\n');
            // A read error ends the tail like the end of the pipe: the line kept so far stands.
            while let Ok(Some(line)) = lines.next_segment().await {
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end();
                if !line.is_empty() && !line.starts_with(BACKTRACE_HINT) {
                    *lock(&keep) = Some(line.to_owned());
                }
            }
        });
        StderrTail {
            last,
            reader: Some(reader),
        }
    }

    /// Once the child has ended: reads the rest of its stderr (for at most
    /// [`STDERR_AFTER_EXIT`]) and returns the last line kept. Cancel-safe.
    pub(super) async fn finish(&mut self) -> Option<String> {
        if let Some(reader) = &mut self.reader {
            if tokio::time::timeout(STDERR_AFTER_EXIT, &mut *reader)
                .await
                .is_err()
            {
                reader.abort();
            }
            self.reader = None;
        }
        lock(&self.last).clone()
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(reader) = &self.reader {
            reader.abort();
        }
    }
}

/// What the standard library writes after a panic message when no backtrace is asked for.
const BACKTRACE_HINT: &str = "note: run with `RUST_BACKTRACE=1`";
