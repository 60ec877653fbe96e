//! The child's side: the parent's commands on stdin, messages to the parent on stdout.

use std::io;
use std::os::fd::AsFd;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::unix::pipe;

use super::{JsonLines, write_json_line};

/// The child's side: the parent's commands, one JSON value per line on stdin.
#[derive(Debug)]
pub(crate) struct FromParent {
    lines: JsonLines<pipe::Receiver>,
}

impl FromParent {
    /// Reads this process's stdin, which must be the pipe [`ChildProcess`](super::ChildProcess) gives it. Makes it
    /// non-blocking, so nothing else in the process may read stdin. Within a Tokio runtime.
    pub(crate) fn stdin() -> io::Result<FromParent> {
        let stdin = io::stdin().as_fd().try_clone_to_owned()?;
        let pipe = pipe::Receiver::from_owned_fd(stdin)?;
        Ok(FromParent {
            lines: JsonLines::new(pipe),
        })
    }

    /// The parent's next command; `None` when the parent is gone (or closed the child's stdin):
    /// stop now. An error names a line that is not the JSON of a `T`, or one far too long.
    /// Cancel-safe.
    pub(crate) async fn next<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        self.lines.next().await
    }
}

/// The child's side: messages to the parent, one JSON value per line on stdout.
#[derive(Debug)]
pub(crate) struct ToParent {
    stdout: pipe::Sender,
}

impl ToParent {
    /// Writes to this process's stdout, which must be the pipe [`ChildProcess`](super::ChildProcess) gives it. Makes
    /// it non-blocking: nothing else may write there (stdout is the parent's channel anyway).
    /// Within a Tokio runtime.
    pub(crate) fn stdout() -> io::Result<ToParent> {
        let stdout = io::stdout().as_fd().try_clone_to_owned()?;
        Ok(ToParent {
            stdout: pipe::Sender::from_owned_fd(stdout)?,
        })
    }

    /// Sends `message` as one line, written straight to the pipe. An error means the parent is
    /// gone: stop. Not cancel-safe: a cancelled send may leave half a line in the pipe.
    pub(crate) async fn send<T: Serialize>(&mut self, message: &T) -> io::Result<()> {
        write_json_line(&mut self.stdout, message).await
    }

    /// Writes `bytes` as they are: for a test child that breaks the protocol.
    #[cfg(test)]
    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        tokio::io::AsyncWriteExt::write_all(&mut self.stdout, bytes).await
    }
}

/// The child's side of both pipes: [`FromParent::stdin`] and [`ToParent::stdout`].
pub(crate) fn parent_link() -> io::Result<(FromParent, ToParent)> {
    Ok((FromParent::stdin()?, ToParent::stdout()?))
}
