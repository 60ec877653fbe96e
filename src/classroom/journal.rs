//! The journal: everything the page is told about the current policy run, in ledger order, and
//! the Server-Sent Events streams that tell it. One source, two consumers: the work events come
//! from the section's own subscription (the report reads the same ledger at the end), and the
//! classroom adds the responses, the steps and the verdict in between. A page that connects (or
//! reconnects, or reloads) is sent the journal so far, then every message after it: the page
//! holds no state of its own.
//!
//! Each stream has a bounded buffer. A client that stops reading fills it and is dropped — its
//! stream ends once it has read what was queued, and the page's `EventSource` reconnects and is
//! sent the journal afresh — so a stalled client costs at most its buffer and a copy of the
//! journal's last chunk (the chunks before it are shared, [`CHUNK`]), and never slows the run:
//! the section's subscription is unbounded and drained by the journal's own pump.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_util::{StreamExt, stream};
use http_body_util::StreamBody;
use hyper::body::{Body, Bytes, Frame};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::admission::ledger::WorkEvent;
use crate::admission::section::WorkSection;
use crate::coordinator::session;
use crate::server::FrontCensus;

/// How many messages a stream may have queued and unread before its client is dropped. A run
/// to the end queues a few dozen at once; a page that reads keeps its queue near empty.
pub(crate) const STREAM_BUFFER: usize = 256;

/// The journal's frames are kept in chunks of at least this many bytes, each shared by every
/// stream it is sent to: a new stream copies only the last, unfinished chunk. A run's journal
/// is a few dozen messages, so it is sent in one frame; a room that sends thousands of requests
/// makes it longer, and its chunks then cost each stream a pointer apiece, not a copy.
const CHUNK: usize = 64 * 1024;

/// The journal of the current policy run and the streams that follow it.
#[derive(Debug)]
pub(crate) struct Journal {
    inner: Mutex<Inner>,
    buffer: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// The SSE frames of the current run, in order, from its `run` message on: whole chunks of
    /// [`CHUNK`] bytes or more, then the frames since the last one.
    chunks: Vec<Bytes>,
    tail: Vec<u8>,
    /// Every stream following the journal, each with its bounded queue.
    streams: Vec<mpsc::Sender<Bytes>>,
    /// The current section's events, not yet journaled.
    source: Option<Source>,
    /// The pump, when it waits for a source.
    pump: Option<Waker>,
    /// Set when the session ends: no stream follows and the pump returns.
    ended: bool,
    /// Streams dropped because their client stopped reading.
    dropped: u64,
}

#[derive(Debug)]
struct Source {
    events: mpsc::UnboundedReceiver<WorkEvent>,
    section: Arc<WorkSection>,
    census: Arc<FrontCensus>,
    front: &'static str,
}

impl Journal {
    /// An empty journal whose streams each queue at most `buffer` messages.
    pub(crate) fn new(buffer: usize) -> Self {
        Journal {
            inner: Mutex::new(Inner::default()),
            buffer,
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Nothing under this lock can leave the journal half-changed: each step pushes whole
        // frames or swaps whole values.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock, once every event recorded so far is journaled: what is added next comes
    /// after them.
    fn caught_up(&self) -> MutexGuard<'_, Inner> {
        let mut inner = self.inner();
        inner.drain();
        inner
    }

    /// Starts the journal of a new policy run with its `run` message, following no section
    /// yet. Every stream is told, and resets.
    pub(crate) fn begin(&self, run: &Value) {
        let mut inner = self.caught_up();
        inner.chunks.clear();
        inner.tail.clear();
        inner.source = None;
        inner.append(run);
    }

    /// Follows `section`, the run's now open: its events so far, then each one as it is
    /// recorded.
    pub(crate) fn watch(
        &self,
        section: &Arc<WorkSection>,
        census: &Arc<FrontCensus>,
        front: &'static str,
    ) {
        let mut inner = self.caught_up();
        let (past, events) = section.subscribe();
        inner.source = Some(Source {
            events,
            section: section.clone(),
            census: census.clone(),
            front,
        });
        for event in &past {
            inner.append(&work(event));
        }
        if let Some(pump) = inner.pump.take() {
            pump.wake();
        }
    }

    /// Adds `message` after every work event recorded so far: a response is journaled after
    /// the events that came before it.
    pub(crate) fn push(&self, message: &Value) {
        let mut inner = self.caught_up();
        inner.append(message);
    }

    /// One client's Server-Sent Events: the journal so far ([`CHUNK`]), then each message
    /// after it; `None` once the session has ended.
    pub(crate) fn follow(
        &self,
    ) -> Option<impl Body<Data = Bytes, Error = Infallible> + Send + Sync + Unpin + 'static> {
        let mut inner = self.caught_up();
        if inner.ended {
            return None;
        }
        let (sender, mut live) = mpsc::channel(self.buffer);
        // Streams whose clients have gone are otherwise let go only as the next message is
        // sent, and none may come for a while (between runs).
        inner.streams.retain(|stream| !stream.is_closed());
        inner.streams.push(sender);
        // The journal's whole chunks, then in one frame the rest, after which the page is told
        // to reconnect soon if the stream ends.
        const RETRY: &[u8] = b"retry: 1000\n\n";
        let mut rest = Vec::with_capacity(inner.tail.len() + RETRY.len());
        rest.extend_from_slice(&inner.tail);
        rest.extend_from_slice(RETRY);
        let past = inner.chunks.iter().cloned().chain([Bytes::from(rest)]);
        let past: Vec<Bytes> = past.collect();
        let live = stream::poll_fn(move |cx| live.poll_recv(cx));
        let frames = stream::iter(past).chain(live);
        Some(StreamBody::new(frames.map(|f| Ok(Frame::data(f)))))
    }

    /// Ends the session's streams with a last `ended` message carrying the session's
    /// `verdict` (`None`: every run matched the model) and whether it `failed` (a run cut
    /// short, no run made, the page's address not announced, the server no longer accepting,
    /// or the driver failed), rather than only differed; the pump returns.
    pub(crate) fn end(&self, verdict: Option<&str>, failed: bool) {
        let mut inner = self.caught_up();
        inner.append(&json!({ "kind": "ended", "verdict": verdict, "failed": failed }));
        inner.ended = true;
        inner.streams.clear();
        inner.source = None;
        if let Some(pump) = inner.pump.take() {
            pump.wake();
        }
    }

    /// How many streams have been dropped for not reading.
    pub(crate) fn dropped(&self) -> u64 {
        self.inner().dropped
    }

    /// Journals each work event as the section records it, until the session ends. The one
    /// task that waits on the section's subscription; run it as a task of the session.
    pub(crate) async fn pump(&self) {
        std::future::poll_fn(|cx| self.poll_pump(cx)).await;
    }

    fn poll_pump(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.inner();
        let mut journaled = false;
        loop {
            if inner.ended {
                return Poll::Ready(());
            }
            let Some(source) = inner.source.as_mut() else {
                inner.pump = Some(cx.waker().clone());
                return Poll::Pending;
            };
            match source.events.poll_recv(cx) {
                Poll::Ready(Some(event)) => {
                    inner.append(&work(&event));
                    journaled = true;
                }
                // The section is gone: wait for the next one.
                Poll::Ready(None) => inner.source = None,
                Poll::Pending => {
                    if journaled {
                        inner.resources();
                    }
                    inner.pump = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Inner {
    /// Journals the events recorded but not yet journaled, so what follows comes after them.
    fn drain(&mut self) {
        let mut any = false;
        while let Some(event) = self.source.as_mut().and_then(|s| s.events.try_recv().ok()) {
            self.append(&work(&event));
            any = true;
        }
        if any {
            self.resources();
        }
    }

    /// What the process holds now: with the threaded front, a thread per held request.
    fn resources(&mut self) {
        let Some(source) = &self.source else { return };
        let now = session::count(&source.section, &source.census);
        let message = json!({
            "kind": "resources",
            "front": source.front,
            "os_threads": now.os_threads,
            "connection_handlers": now.connection_handlers,
            "held_at_gate": now.held_at_gate,
        });
        self.append(&message);
    }

    /// Adds one message and sends it to every stream; a stream whose queue is full is dropped.
    fn append(&mut self, message: &Value) {
        let frame = Bytes::from(format!("data: {message}\n\n"));
        self.tail.extend_from_slice(&frame);
        if self.tail.len() >= CHUNK {
            let chunk = std::mem::take(&mut self.tail);
            self.chunks.push(Bytes::from(chunk));
        }
        let mut dropped = 0;
        self.streams
            .retain(|stream| match stream.try_send(frame.clone()) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    dropped += 1;
                    false
                }
                // The client went away.
                Err(TrySendError::Closed(_)) => false,
            });
        self.dropped += dropped;
    }
}

/// A work event as the page reads it: the report's fields, and for a refusal who held the
/// permits.
pub(crate) fn work(event: &WorkEvent) -> Value {
    let mut message = tagged(json!({ "kind": "work" }), event);
    if let Value::Object(fields) = &mut message {
        fields.insert("held_by".into(), json!(event.held_by));
        fields.insert("route".into(), json!(event.request.map(|r| r.route())));
    }
    message
}

/// `message` (a JSON object) with the fields of `record` added, as they serialize.
pub(crate) fn tagged(mut message: Value, record: &impl Serialize) -> Value {
    if let (Value::Object(fields), Ok(Value::Object(record))) =
        (&mut message, serde_json::to_value(record))
    {
        fields.extend(record);
    }
    message
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;
    use http_body_util::BodyExt;

    use super::*;
    use crate::admission::pools::Permits;
    use crate::admission::token::RunToken;
    use crate::label::Label;
    use crate::policy::{Mode, Policy, Route, Slots};

    fn section() -> Arc<WorkSection> {
        let slots = Slots::new(2).expect("2 slots are allowed");
        let token = RunToken::generate().expect("the OS has randomness");
        let policy = Policy {
            mode: Mode::Partitioned,
            slots,
        };
        Arc::new(WorkSection::new(policy, Permits::Tokio, token))
    }

    async fn text(stream: &mut (impl Body<Data = Bytes, Error = Infallible> + Unpin)) -> String {
        let frame = stream.frame().await.expect("a frame").expect("infallible");
        let data = frame.into_data().expect("a data frame");
        String::from_utf8(data.to_vec()).expect("UTF-8")
    }

    /// A stream gets the journal so far and then every later message, responses after the
    /// events recorded before them; a reconnecting stream gets the same journal again.
    #[tokio::test]
    async fn streams_get_the_past_then_the_future_in_ledger_order() {
        let journal = Journal::new(8);
        let section = section();
        let census = Arc::new(FrontCensus::default());
        let _ = section.perform(Label::F1, Route::Fast).await;
        journal.begin(&json!({ "kind": "run" }));
        journal.watch(&section, &census, "async");
        let mut first = journal.follow().expect("the session is on");
        let past = text(&mut first).await;
        let kinds: Vec<&str> = past.matches("\"kind\":\"").collect();
        assert_eq!(kinds.len(), 3, "{past}");
        assert!(past.starts_with("data: {\"kind\":\"run\"}\n\n"), "{past}");
        assert!(past.ends_with("\n\nretry: 1000\n\n"), "{past}");
        // Recorded, not yet pumped: the response still comes after the events.
        let _ = section.perform(Label::FastAfter, Route::Fast).await;
        journal.push(&json!({ "kind": "response", "request": "F-after" }));
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(text(&mut first).await);
        }
        assert!(seen[0].contains("\"admitted\"") && seen[1].contains("\"finished\""));
        assert!(seen[2].contains("resources") && seen[3].contains("F-after"));
        let mut again = journal.follow().expect("the session is on");
        let replay = text(&mut again).await;
        assert_eq!(replay.matches("data: ").count(), 7, "{replay}");
        journal.end(None, false);
        assert!(text(&mut first).await.contains("ended"));
        assert!(
            first.frame().await.is_none(),
            "the stream ends with the session"
        );
        assert!(journal.follow().is_none());
    }

    /// A journal longer than a chunk is sent as its whole chunks, the same bytes for every
    /// stream rather than a copy each, then the rest in one frame.
    #[tokio::test]
    async fn a_long_journal_is_sent_in_shared_chunks() {
        let journal = Journal::new(8);
        journal.begin(&json!({ "kind": "run" }));
        let padding = "x".repeat(1000);
        for n in 0..200 {
            journal.push(&json!({ "n": n, "padding": padding }));
        }
        let firsts = [journal.follow(), journal.follow()].map(|stream| {
            let mut stream = stream.expect("the session is on");
            let frame = stream
                .frame()
                .now_or_never()
                .expect("ready")
                .expect("a frame");
            frame.expect("infallible").into_data().expect("data")
        });
        assert!(firsts[0].len() >= CHUNK, "{}", firsts[0].len());
        assert_eq!(firsts[0].as_ptr(), firsts[1].as_ptr(), "one chunk, shared");
        let mut stream = journal.follow().expect("the session is on");
        let mut past = String::new();
        // Four frames: the journal of about 200 KB in three whole chunks, then the rest.
        for _ in 0..4 {
            past.push_str(&text(&mut stream).await);
        }
        assert!(past.ends_with("retry: 1000\n\n"), "{}", past.len());
        assert_eq!(past.matches("data: ").count(), 201);
        assert!(past.contains("\"n\":199,"), "the last message");
    }

    /// Streams whose clients have gone are let go as the next one follows, though no message
    /// has come since: between runs nothing may come for a long time.
    #[tokio::test]
    async fn streams_whose_clients_left_are_let_go_as_the_next_follows() {
        let journal = Journal::new(8);
        journal.begin(&json!({ "kind": "run" }));
        for _ in 0..100 {
            drop(journal.follow().expect("the session is on"));
        }
        let _following = journal.follow().expect("the session is on");
        assert_eq!(journal.inner().streams.len(), 1);
    }

    /// A client that never reads fills its buffer and is dropped; nobody else waits for it.
    #[tokio::test]
    async fn a_stalled_stream_is_dropped_when_its_buffer_is_full() {
        let journal = Journal::new(4);
        let section = section();
        journal.begin(&json!({ "kind": "run" }));
        journal.watch(&section, &Arc::default(), "async");
        let stalled = journal.follow().expect("on");
        let mut reader = journal.follow().expect("on");
        let _ = text(&mut reader).await;
        for n in 0..10 {
            journal.push(&json!({ "n": n }));
            assert!(text(&mut reader).await.contains(&format!("\"n\":{n}")));
        }
        assert_eq!(journal.dropped(), 1);
        drop(stalled);
        drop(reader);
        journal.push(&json!({ "n": "after" }));
        assert_eq!(
            journal.dropped(),
            1,
            "a client that left was not dropped for stalling"
        );
    }
}
