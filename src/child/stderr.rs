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
            let mut pipe = BufReader::new(pipe);
            // The start of the current line, at most `KEPT_LINE` bytes of it: a child that
            // writes without end costs this, not a buffer as long as its line.
            let mut line = Vec::new();
            // A read error ends the tail like the end of the pipe: the line kept so far stands.
            while let Ok(available) = pipe.fill_buf().await {
                if available.is_empty() {
                    keep_line(&keep, &line);
                    break;
                }
                let newline = available.iter().position(|&byte| byte == b'\n');
                let text = &available[..newline.unwrap_or(available.len())];
                let room = KEPT_LINE.saturating_sub(line.len());
                line.extend_from_slice(&text[..text.len().min(room)]);
                let taken = newline.map_or(available.len(), |at| at + 1);
                pipe.consume(taken);
                if newline.is_some() {
                    keep_line(&keep, &line);
                    line.clear();
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

/// The most of one stderr line kept, in bytes.
const KEPT_LINE: usize = 4_096;

/// Keeps `line` as the last one worth showing, unless it is blank or the backtrace hint.
fn keep_line(keep: &Mutex<Option<String>>, line: &[u8]) {
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end();
    if !line.is_empty() && !line.starts_with(BACKTRACE_HINT) {
        *lock(keep) = Some(line.to_owned());
    }
}

/// What the standard library writes after a panic message when no backtrace is asked for.
const BACKTRACE_HINT: &str = "note: run with `RUST_BACKTRACE=1`";
