//! The sequence's order, read against the ledger: the heartbeat's readings, each request sent only
//! once the one before it came far enough, and the counts a classroom takes before F1.

use std::collections::BTreeMap;

use crate::admission::ledger::Event;
use crate::draw::table::{labels, plural};
use crate::evidence::{Moment, Phase};
use crate::executor::{Lane, WorkStyle};
use crate::label::Label;
use crate::policy::{Front, Route};
use crate::record::check::{on_executor, on_the_labs_own_thread, sent_before};
use crate::server::STD_BACKLOG;

use super::{PolicyCheck, Replayed};

impl<'a> PolicyCheck<'a> {
    /// What the front's runtime was seen doing, read against the ledger: the heartbeat read in
    /// the sequence's order (at the start, after each slow request held, after each request
    /// seen unread or queued, just before the gate opened), never going back; and each request
    /// seen unread before any decision about it, and before the release.
    pub(super) fn watched(&mut self, replayed: &Replayed<'_>) {
        let (front, executor) = (self.report.runner.front, self.report.executor);
        let Some(watched) = &self.file.observed.executor else {
            // A run whose front has a runtime of its own watches it from the moment it opens:
            // S1's step waits for the heartbeat's first tick.
            let opened =
                !self.file.work_events.is_empty() || !self.file.observed.responses.is_empty();
            if opened && executor.front_runtime(front) {
                self.find(
                    &[],
                    format!(
                        "the report's executor is{}, whose front runs on a runtime of its own, \
                         but it records no evidence of that runtime (\"executor\"): a run on one \
                         reads its heartbeat from the start",
                        executor.flags()
                    ),
                );
            }
            return;
        };
        if !executor.front_runtime(front) {
            let on = on_executor(executor);
            self.find(
                &["executor"],
                format!(
                    "the report watches the front's own runtime, but the {} front{on} runs on \
                     none of its own: there is no heartbeat to read",
                    front.name(),
                ),
            );
            return;
        }
        let beats = &watched.heartbeat;
        // The start and the release are the run's; every other reading follows a request.
        if let Some(i) = beats.iter().position(|b| {
            let run_wide = matches!(b.moment, Moment::Start | Moment::Release);
            run_wide == b.request.is_some()
        }) {
            let beat = &beats[i];
            let moment = beat.moment.name();
            let says = match beat.request {
                Some(request) => format!(
                    "the {moment} reading names {request}, but it is the run's, read for no request"
                ),
                None => format!("the {moment} reading names no request, but it is read after one"),
            };
            self.find(&["executor", "heartbeat", &i.to_string()], says);
        }
        if let Some(i) = (1..beats.len()).find(|&i| {
            beats[i].after_event < beats[i - 1].after_event || beats[i].ticks < beats[i - 1].ticks
        }) {
            let (was, now) = (&beats[i - 1], &beats[i]);
            self.find(
                &["executor", "heartbeat", &i.to_string()],
                format!(
                    "the heartbeat goes back: read after event {} with {} ticks, after a reading \
                     after event {} with {}",
                    now.after_event, now.ticks, was.after_event, was.ticks
                ),
            );
        }
        // A run cut short stops reading where it failed: its readings begin the full run's (or
        // there are none, if the front's runtime never ran its first tick).
        let moments: Vec<Moment> = beats.iter().map(|b| b.moment).collect();
        let count = |m: Moment| moments.iter().filter(|&&n| n == m).count();
        let begins = moments.first() == Some(&Moment::Start) && count(Moment::Start) == 1;
        let ends = match count(Moment::Release) {
            0 => self.cut_short,
            1 => moments.last() == Some(&Moment::Release),
            _ => false,
        };
        if !(begins && ends || moments.is_empty() && self.cut_short) {
            let listed: Vec<&str> = moments.iter().map(|m| m.name()).collect();
            self.find(
                &["executor", "heartbeat"],
                format!(
                    "the heartbeat is read once at the start and once just before the gate \
                     opens, first and last; its readings here are: {}",
                    listed.join(", ")
                ),
            );
        }
        if let Some(gate) = replayed.gate
            && let Some(i) = beats.iter().position(|b| b.after_event >= gate)
        {
            self.find(
                &["executor", "heartbeat", &i.to_string()],
                format!(
                    "the {} reading is taken after event {}, but the gate opened at seq {gate}: \
                     the heartbeat is read before the release",
                    beats[i].moment.name(),
                    beats[i].after_event
                ),
            );
        }
        // The lab reads the heartbeat after a request before it sends the next, so the readings
        // name the requests in the order they were sent, each once.
        let readings = (beats.iter().enumerate()).filter_map(|(i, b)| Some((i, b.request?)));
        let readings: Vec<(usize, Label)> = readings.filter(|(_, r)| !r.from_room()).collect();
        if let Some(pair) = readings.windows(2).find(|w| !sent_before(w[0].1, w[1].1)) {
            let ((_, earlier), (i, later)) = (pair[0], pair[1]);
            self.find(
                &["executor", "heartbeat", &i.to_string()],
                format!(
                    "the heartbeat is read after {earlier}, then after {later}: the lab reads it \
                     after each request before it sends the next, so its readings follow the \
                     order the requests were sent, once each"
                ),
            );
        }
        // The release's reading is taken as the release begins: after F1's answer, where F1
        // was answered before it.
        let release = beats.iter().rposition(|b| b.moment == Moment::Release);
        let f1 = (self.file.observed.responses.iter())
            .find(|r| r.request == Label::F1 && r.phase == Phase::BeforeRelease);
        if let (Some(i), Some(f1)) = (release, f1)
            && beats[i].after_event < f1.after_event
        {
            self.find(
                &["executor", "heartbeat", &i.to_string()],
                format!(
                    "the release's reading is taken after event {}, but F1's answer, which comes \
                     before the release, after event {}",
                    beats[i].after_event, f1.after_event
                ),
            );
        }
        let gate = replayed.gate.unwrap_or(u64::MAX);
        let held: Vec<(Label, u64)> = (replayed.events.iter())
            .filter(|e| e.event == Event::Held && e.seq < gate)
            .filter_map(|e| e.request.filter(|r| !r.from_room()).map(|r| (r, e.seq)))
            .collect();
        let read = |moment: Moment| -> Vec<(Label, u64)> {
            (beats.iter().filter(|b| b.moment == moment))
                .filter_map(|b| b.request.map(|r| (r, b.after_event)))
                .collect()
        };
        let names =
            |seen: &[(Label, u64)]| -> Vec<Label> { seen.iter().map(|&(r, _)| r).collect() };
        let read_held = read(Moment::Held);
        let (read_names, held_names) = (names(&read_held), names(&held));
        let agrees = match self.cut_short {
            true => held_names.starts_with(&read_names),
            false => read_names == held_names,
        };
        let early = (read_held.iter().zip(&held)).find(|((_, at), (_, seq))| at < seq);
        let says = if !agrees {
            Some(format!(
                "the heartbeat is read after each slow request is held, in order: the ledger holds \
                 {} before the release, the readings name {}",
                labels(&held_names),
                labels(&read_names)
            ))
        } else {
            early.map(|((request, at), (_, seq))| {
                format!(
                    "the heartbeat is read after {request} is held, after event {at}, but the \
                     ledger holds {request} only at seq {seq}"
                )
            })
        };
        if let Some(says) = says {
            self.find(&["executor", "heartbeat"], says);
        }
        // One thread takes the work queued for it first in, first out, and the lab sends each
        // request only once the one before it is seen queued.
        if let (Lane::Own(1, _), false) = (executor.lane(front), self.cut_short) {
            let started: Vec<Label> = (replayed.events.iter())
                .filter(|e| e.event == Event::Started)
                .filter_map(|e| e.request)
                .filter(|r| watched.queued.contains(r))
                .collect();
            let queued = watched.queued.iter().copied();
            let in_order: Vec<Label> = queued.filter(|r| started.contains(r)).collect();
            if started != in_order {
                self.find(
                    &["executor", "queued"],
                    format!(
                        "{} were seen queued for the slow work's one thread in that order, but \
                         the ledger starts them as {}: one thread takes queued work first in, \
                         first out",
                        labels(&in_order),
                        labels(&started)
                    ),
                );
            }
        }
        let unread: Vec<Label> = watched.unread.iter().map(|u| u.request).collect();
        let (read_unread, read_queued) =
            (names(&read(Moment::Unread)), names(&read(Moment::Queued)));
        if read_unread != unread || read_queued != watched.queued {
            self.find(
                &["executor", "heartbeat"],
                format!(
                    "the heartbeat is read after each request seen unread or queued: the \
                     readings name {} unread and {} queued, the executor's evidence {} unread \
                     and {} queued",
                    labels(&read_unread),
                    labels(&read_queued),
                    labels(&unread),
                    labels(&watched.queued)
                ),
            );
        }
        // A run cut short may stop before a request's reading, but then sends nothing after it
        // (a full run's readings are compared above).
        let readable = (held.iter().map(|&(r, _)| r)).chain(unread.iter().copied());
        let mut missed = (readable.chain(watched.queued.iter().copied()))
            .filter(|r| readings.iter().all(|(_, n)| n != r));
        let sent = self.sent();
        let after = |m: Label| sent.iter().copied().find(|&r| sent_before(m, r));
        if self.cut_short
            && let Some((missed, later)) = missed.find_map(|m| Some((m, after(m)?)))
        {
            self.find(
                &["executor", "heartbeat"],
                format!(
                    "the heartbeat is never read after {missed}, yet the lab sent {later} after \
                     it: it reads the heartbeat after each request before it sends the next"
                ),
            );
        }
        for (request, after_event) in read(Moment::Queued) {
            let admitted = replayed.decided.get(&request).map(|d| d.seq);
            if admitted.is_none_or(|seq| after_event < seq) {
                let at = admitted.map_or("never".to_owned(), |seq| format!("only at seq {seq}"));
                self.find(
                    &["executor", "heartbeat"],
                    format!(
                        "the heartbeat is read after {request} is queued, after event \
                         {after_event}, but the ledger admits {request} {at}: it is seen queued \
                         once admitted"
                    ),
                );
            }
        }
        let finished = self.file.server.as_ref().filter(|_| !self.cut_short);
        let accepted = finished.map(|server| server.connections_accepted);
        let held_by = |after: u64| held.iter().filter(|&&(_, seq)| seq <= after).count();
        for (i, seen) in watched.unread.iter().enumerate() {
            // It was sent once every request before it was decided, or seen unread (decided
            // only later).
            let before = (replayed.decided.iter())
                .filter(|(r, _)| sent_before(**r, seen.request) && !unread.contains(r));
            let last_before = before.max_by_key(|(_, d)| d.seq);
            let decided = replayed.decided.get(&seen.request).map(|d| d.seq);
            let why = if let Some((earlier, d)) = last_before
                && seen.after_event < d.seq
            {
                format!(
                    "it is sent only once {earlier} is decided, and the ledger decides \
                     {earlier} at seq {}",
                    d.seq
                )
            } else if seen.accept_queue > STD_BACKLOG + 1 {
                format!(
                    "the accept queue is counted at {}, more than the {} connections a run's \
                     listener queues (its backlog of {STD_BACKLOG}, and one more)",
                    seen.accept_queue,
                    STD_BACKLOG + 1
                )
            } else if seen.accept_queue <= i {
                // Its connection waits in the accept queue, the last of those seen so far.
                let before = match i {
                    0 => String::new(),
                    _ => format!(", after the {i} seen unread before it"),
                };
                format!(
                    "its connection waits in the accept queue{before}, yet the queue is \
                     counted at {}",
                    seen.accept_queue
                )
            } else if let Some(last) = watched.unread[..i].last()
                && seen.accept_queue < last.accept_queue
            {
                // No connection is accepted while every worker is blocked, so the queue never
                // shrinks from one look to the next.
                format!(
                    "the accept queue is counted at {}, fewer than the {} counted when {} was \
                     seen unread before it, and no connection is accepted while every worker \
                     is blocked",
                    seen.accept_queue, last.accept_queue, last.request
                )
            } else if let Some(accepted) = accepted
                && let later = watched.unread.len() - 1 - i
                && later > 0
                && let held = held_by(seen.after_event)
                && (seen.accept_queue.saturating_add(later + held) as u64) > accepted
            {
                // In a finished run every connection counted at a look was accepted, first in,
                // first out, before the requests sent after it were answered, and each of those
                // came on a connection of its own, as did each request held by then. (At the
                // last look, a stranger's connection behind the last request may never be.)
                format!(
                    "the accept queue is counted at {}, and with the {later} sent after it and \
                     the {held} held by then the server would have accepted more than the \
                     {accepted} connections it did",
                    seen.accept_queue
                )
            } else if let Some(seq) = decided
                && seq <= seen.after_event
            {
                format!("the ledger decided it at seq {seq}: it had been read")
            } else if seen.after_event >= gate {
                format!("the gate had opened at seq {gate}: it is seen before the release")
            } else {
                continue;
            };
            let at = i.to_string();
            self.find(
                &["executor", "unread", &at],
                format!(
                    "{} is seen unread after event {}, but {why}",
                    seen.request, seen.after_event
                ),
            );
        }
    }

    /// On the async front on one thread (the lab's own, or a runtime of the front's own that
    /// runs its connections on one thread), a request's admission and what follows it in the
    /// section come in one poll: local permits are decided without awaiting
    /// (`WorkSection::admit`), and work that awaits is held (`Gate::pass` records it before it
    /// waits) or leaves at once, at an open gate or on /fast; with `--work spawn-blocking`,
    /// /fast work leaves at once. Nothing else runs on that thread in between, so no other
    /// request's event comes between the two, but those other threads record: the sequence's
    /// opening of the gate, and the blocking pool's starts and holds. On the lab's own thread,
    /// where the sequence and the classroom run too, neither the gate's opening nor a room
    /// gate's closing or opening comes between them either.
    pub(super) fn decided_in_one_poll(&mut self, replayed: &Replayed<'_>) {
        let lab_thread = on_the_labs_own_thread(self.report);
        let executor = self.report.executor;
        let one_thread = self.report.runner.front == Front::Async
            && executor.own_runtime()
            && executor.workers().threads() == 1;
        // Whose admission is followed in its poll, and which events other threads record.
        let (followed, elsewhere): (fn(Route) -> bool, &[Event]) = match executor.work {
            _ if lab_thread => (|_| true, &[]),
            WorkStyle::Await if one_thread => (|_| true, &[Event::GateOpened]),
            WorkStyle::SpawnBlocking if one_thread => (
                |route| route == Route::Fast,
                &[Event::GateOpened, Event::Started, Event::Held],
            ),
            _ => return,
        };
        let events = &replayed.events;
        // Where a room gate closed or opened, by the ledger's last seq then: the first listed.
        let mut gates = std::collections::BTreeMap::new();
        for g in (self.room.into_iter()).flat_map(|room| room.gates_of(self.policy.mode)) {
            gates
                .entry(g.closed_after_event)
                .or_insert((g.generation, "closed"));
            if let Some(opened) = g.opened_after_event {
                gates.entry(opened).or_insert((g.generation, "opened"));
            }
        }
        for (i, admitted) in events.iter().enumerate() {
            let Some(request) = admitted
                .request
                .filter(|_| admitted.event == Event::Admitted)
                .filter(|&r| self.route(r).is_some_and(followed))
            else {
                continue;
            };
            let mut after = events[i + 1..].iter();
            let next = after.find(|n| !elsewhere.contains(&n.event));
            let follows = next.filter(|n| n.request == Some(request));
            let follows = follows.filter(|n| matches!(n.event, Event::Held | Event::Finished));
            let seq = admitted.seq;
            let says = match (follows, next) {
                (None, Some(n)) => {
                    let whose = n.request.map_or("the run".to_owned(), |r| r.to_string());
                    format!("the next, seq {}, is {whose}'s {}", n.seq, n.event.name())
                }
                (None, None) => "no event follows it".to_owned(),
                (Some(_), _) if !lab_thread => continue,
                (Some(_), _) => {
                    let Some(&(gate, how)) = gates.get(&seq) else {
                        continue;
                    };
                    format!(
                        "the room's gate {gate} {how} after event {seq}, before {request}'s next \
                         event"
                    )
                }
            };
            let thread = if lab_thread {
                "the lab's own thread"
            } else {
                "a runtime of its own that runs its connections on one thread"
            };
            self.find(
                &["work_events", &i.to_string()],
                format!(
                    "{request} is admitted at seq {seq}, and {says}; but on the async front on \
                     {thread} a request is held, or its work leaves, in the poll that admits it"
                ),
            );
            return;
        }
    }

    /// The sequence sends its requests before the release one at a time: the next only once
    /// the last is held (or refused, or admitted to wait for a thread, or seen unread). So no
    /// request is decided before the one sent ahead of it has come that far, and each reading
    /// of the heartbeat comes before the next request's decision, the release's before the
    /// gate opens.
    pub(super) fn sent_in_order(&mut self, replayed: &Replayed<'_>) {
        let gate = replayed.gate.unwrap_or(u64::MAX);
        let watched = self.file.observed.executor.as_ref();
        let unread: Vec<Label> =
            watched.map_or(Vec::new(), |w| w.unread.iter().map(|u| u.request).collect());
        // Where the sequence went on from each request it sent before the release.
        let mut went_on: BTreeMap<Label, u64> = BTreeMap::new();
        for e in replayed.events.iter().filter(|e| e.seq < gate) {
            let Some(request) = e
                .request
                .filter(|r| matches!(r, Label::Slow(_) | Label::F1))
            else {
                continue;
            };
            if unread.contains(&request) {
                continue;
            }
            match e.event {
                Event::Held | Event::Refused => {
                    went_on.insert(request, e.seq);
                }
                Event::Admitted => {
                    went_on.entry(request).or_insert(e.seq);
                }
                _ => {}
            }
        }
        // Decisions of requests read when sent (not seen unread), by request.
        let decided: Vec<(Label, u64)> = (replayed.decided.iter())
            .filter(|(r, _)| matches!(r, Label::Slow(_) | Label::F1) && !unread.contains(r))
            .map(|(&r, d)| (r, d.seq))
            .collect();
        if let Some((later, seq, earlier, on)) = decided.iter().find_map(|&(later, seq)| {
            let ahead = went_on.iter().filter(|(e, _)| sent_before(**e, later));
            let (&earlier, &on) = ahead.max_by_key(|(_, on)| **on)?;
            (seq <= on).then_some((later, seq, earlier, on))
        }) {
            let at = replayed.decided[&later].index.to_string();
            self.find(
                &["work_events", &at],
                format!(
                    "{later} is decided at seq {seq}, but the lab sends {later} only once \
                     {earlier}, sent before it, is held, refused or queued for a thread, and \
                     the ledger has that at seq {on}"
                ),
            );
        }
        let Some(watched) = watched else {
            return;
        };
        for (i, seen) in watched.unread.iter().enumerate() {
            let ahead = went_on
                .iter()
                .filter(|(e, _)| sent_before(**e, seen.request));
            if let Some((earlier, &on)) = ahead.max_by_key(|(_, on)| **on)
                && seen.after_event < on
            {
                self.find(
                    &["executor", "unread", &i.to_string()],
                    format!(
                        "{} is seen unread after event {}, but the lab sends it only once \
                         {earlier}, sent before it, is held, refused or queued for a thread, at \
                         seq {on}",
                        seen.request, seen.after_event
                    ),
                );
            }
        }
        for (i, beat) in watched.heartbeat.iter().enumerate() {
            let next = |after: Option<Label>| {
                (decided.iter())
                    .filter(|&&(b, _)| after.is_none_or(|a| sent_before(a, b)))
                    .min_by_key(|&&(_, seq)| seq)
                    .copied()
            };
            let limit = match beat.moment {
                Moment::Start => next(None),
                Moment::Release => (gate < u64::MAX).then_some((Label::F1, gate)),
                Moment::Held | Moment::Queued | Moment::Unread => match beat.request {
                    Some(request) => next(Some(request)),
                    None => None,
                },
            };
            let moment = beat.moment.name();
            if let Some((b, seq)) = limit.filter(|&(_, seq)| beat.after_event >= seq) {
                let then = match beat.moment {
                    Moment::Release => format!("the gate opens at seq {seq}"),
                    _ => format!("{b} is decided at seq {seq}"),
                };
                self.find(
                    &["executor", "heartbeat", &i.to_string()],
                    format!(
                        "the {moment} reading is after event {}, but it is read before {then}",
                        beat.after_event
                    ),
                );
            }
            if beat.moment == Moment::Start && beat.ticks == 0 {
                self.find(
                    &["executor", "heartbeat", &i.to_string()],
                    "the start reading has 0 ticks, but the lab reads it once the heartbeat has \
                     ticked"
                        .into(),
                );
            }
        }
    }

    /// In a classroom, `resources.before_fast` against the ledger's moments from the observer's
    /// snapshot before F1 to F1's first event, or the gate's opening where that comes first
    /// (F1 left unread while slow work blocks the front's workers): it is counted in between,
    /// after the snapshot and before F1 is sent, while the room's requests may arrive, be held
    /// or leave. Its held work is the ledger's at one of those moments; its handlers, counted a
    /// moment before, at least the permits taken at one of them (each kept by its request's
    /// handler until its work leaves). Without a room the two are counted with nothing in
    /// between (`resources`).
    pub(super) fn counted_before_fast(&mut self, replayed: &Replayed<'_>) {
        let before = self.file.resources.before_fast;
        let watch = (replayed.watch.iter()).find(|w| w.name == "observer_before_fast");
        let (Some(before), Some(_), Some(watch)) = (before, self.room, watch) else {
            return;
        };
        let mut held: Vec<usize> = watch.since.iter().map(|m| m.held).collect();
        held.sort_unstable();
        held.dedup();
        if !held.is_empty() && !held.contains(&before.held_at_gate) {
            let held: Vec<String> = held.iter().map(usize::to_string).collect();
            self.find(
                &["resources", "before_fast", "held_at_gate"],
                format!(
                    "resources.before_fast counts {} held at the gate, but from \
                     observer_before_fast to {} the ledger holds {}: it is counted in between",
                    plural(before.held_at_gate, "request"),
                    watch.ends,
                    held.join(" or ")
                ),
            );
        }
        let least = watch.since.iter().map(|m| m.taken).min();
        if let Some(least) = least.filter(|&t| before.connection_handlers < t) {
            self.find(
                &["resources", "before_fast", "connection_handlers"],
                format!(
                    "resources.before_fast counts {}, but from observer_before_fast to {} the \
                     ledger has at least {} taken, each kept by the handler of its request's \
                     connection until its work leaves",
                    plural(before.connection_handlers, "connection handler"),
                    watch.ends,
                    plural(least, "permit")
                ),
            );
        }
    }
}
