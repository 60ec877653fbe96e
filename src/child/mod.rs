//! A front in another process: the lab starts its own binary again as a child process and talks
//! to it in JSON lines, one value per line each way: parent to child on the child's stdin, child
//! to parent on its stdout. The child's stderr is for people; the parent keeps its last line to
//! explain an abort. A child dies with its parent twice over: its stdin ends when the parent
//! does (it must then stop at once), and on Linux the kernel SIGKILLs it when its parent goes,
//! even a SIGKILLed parent.
//!
//! - `process`: the parent's side, [`ChildProcess`]: start, talk, signal, wait, close.
//! - `reaper`: the thread that forks the child, waits for it and reaps it (the private
//!   `redis-server` of `src/redis_pool/local.rs` runs on one too).
//! - `stderr`: the child's stderr, read as it comes, down to its last line.
//! - `link`: the child's side, [`FromParent`](link::FromParent) and [`ToParent`].
//! - `stop_watch`: a wait for the child that sees it stopped (SIGSTOP), which nothing else tells.

mod link;
mod process;
mod reaper;
mod stderr;
mod stop_watch;
#[cfg(test)]
pub(crate) mod test_child;
#[cfg(test)]
mod tests;

use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures_util::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

pub(crate) use link::{ToParent, parent_link};
#[cfg(test)]
pub(crate) use process::ExitSignal;
pub(crate) use process::{ChildProcess, Exit, Signal, signal_name};
pub(crate) use reaper::Reaper;
pub(crate) use stop_watch::{
    AwakeDeadline, Stall, StopWatch, awake_within, note_continued, seen_stopped_within, stop_watch,
    times_continued, watched, watched_within,
};

/// The longest line either side reads: far above any message, so that a peer writing without
/// end is refused instead of buffered.
#[cfg(not(test))]
const MAX_LINE: usize = 64 << 20;
/// The unit tests' bound: the same code, checked by moving 1 MiB rather than 64 (which took
/// them half a second each, most of the unit tests' time on two cores).
#[cfg(test)]
const MAX_LINE: usize = 1 << 20;

/// Lines of one JSON value each, as either side reads the other's pipe: tokio-util's line codec
/// over the pipe, each line at most [`MAX_LINE`] bytes long, so a peer that writes without end
/// costs an error, not memory. The codec keeps what it has read across calls, so a cancelled
/// read loses nothing.
#[derive(Debug)]
struct JsonLines<R> {
    lines: FramedRead<R, LinesCodec>,
}

impl<R: AsyncRead + Unpin> JsonLines<R> {
    fn new(reader: R) -> JsonLines<R> {
        JsonLines {
            lines: FramedRead::new(reader, LinesCodec::new_with_max_length(MAX_LINE)),
        }
    }

    /// The next line as the JSON of a `T`; `None` at the end. Cancel-safe.
    async fn next<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        let Some(line) = self.next_line().await? else {
            return Ok(None);
        };
        serde_json::from_str(&line).map(Some).map_err(|e| {
            let message = format!("not a message ({e}): {line:.200}");
            io::Error::new(io::ErrorKind::InvalidData, message)
        })
    }

    /// The next line, without its `\n` or `\r\n`; `None` at the end (a last line without
    /// either still counts). An error for a line longer than [`MAX_LINE`] (found as soon as it
    /// is, without reading the rest) or not UTF-8: the peer breaks the protocol, and nothing it
    /// sends after can be trusted. Cancel-safe.
    async fn next_line(&mut self) -> io::Result<Option<String>> {
        match self.lines.next().await {
            None => Ok(None),
            Some(Ok(line)) => Ok(Some(line)),
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a message: a line longer than {MAX_LINE} bytes"),
            )),
            Some(Err(LinesCodecError::Io(e))) => Err(e),
        }
    }
}

/// Writes `message` to `out` as one line of JSON.
async fn write_json_line<T, W>(out: &mut W, message: &T) -> io::Result<()>
where
    T: Serialize,
    W: AsyncWrite + Unpin,
{
    // Compact JSON has no newline (strings escape theirs), so the line holds one message.
    let mut line =
        serde_json::to_vec(message).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    line.push(b'\n');
    // A pipe has no buffer of ours to flush: the line is written once this returns.
    out.write_all(&line).await
}

/// Locks `mutex`. Its holders only read or write plain values, so a panic while holding it
/// (which poisons it) cannot have left the value half-changed.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
