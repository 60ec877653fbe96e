//! A front in another process: the lab starts its own binary again as a child process and talks
//! to it in JSON lines, one value per line each way: parent to child on the child's stdin, child
//! to parent on its stdout. The child's stderr is for people; the parent keeps its last line to
//! explain an abort. A child dies with its parent twice over: its stdin ends when the parent
//! does (it must then stop at once), and on Linux the kernel SIGKILLs it when its parent goes,
//! even a SIGKILLed parent.
//!
//! - `process`: the parent's side, [`ChildProcess`]: start, talk, signal, wait, close.
//! - `reaper`: the thread that forks the child, waits for it and reaps it.
//! - `stderr`: the child's stderr, read as it comes, down to its last line.
//! - `link`: the child's side, [`FromParent`](link::FromParent) and [`ToParent`].

mod link;
mod process;
mod reaper;
mod stderr;
#[cfg(test)]
pub(crate) mod test_child;
#[cfg(test)]
mod tests;

use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, Lines};

pub(crate) use link::{ToParent, parent_link};
pub(crate) use process::{ChildProcess, Exit, Signal};
pub(crate) use reaper::die_with_parent;

/// The next line of `lines` as the JSON of a `T`; `None` at the end.
async fn read_json_line<T, R>(lines: &mut Lines<R>) -> io::Result<Option<T>>
where
    T: DeserializeOwned,
    R: AsyncBufRead + Unpin,
{
    let Some(line) = lines.next_line().await? else {
        return Ok(None);
    };
    serde_json::from_str(&line).map(Some).map_err(|e| {
        let message = format!("not a message ({e}): {line:.200}");
        io::Error::new(io::ErrorKind::InvalidData, message)
    })
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
