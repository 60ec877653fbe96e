//! The driver: the one task that owns the session's runs and performs what the page asks, one
//! order at a time. "Next" is one step of the lab's sequence — open a fresh server, pools and
//! gate; send `S<n>`; send `F1`; open the gate; send a probe; close the server and check the
//! run against the model — performed by the same [`Run`] the command line drives to its end.
//! Policy runs gather into an invocation exactly as on the command line ([`Invocation`]): the
//! first that fails or differs from the model ends it.
//!
//! A session starts before its first step: the page shows the first policy's empty board and
//! "Next" opens its server. The driver also knows where a class stops to ask (before `F1` in
//! each policy, before `S2` in partitioned mode) and tells the page, which marks the stop.

use std::collections::VecDeque;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::Config;
use super::gates::{CannotClose, RoomGate, RoomGates};
use super::journal::{self, Journal};
use super::room::{Room, Target};
use crate::coordinator::{Planned, PolicyRun, Run};
use crate::evidence::{ExecutorEvidence, Moment, ResponseRecord};
use crate::lab::Invocation;
use crate::label::Label;
use crate::outcome::Outcome;
use crate::policy::{Inputs, Mode, Policy, Route};
use crate::report::Report;
use crate::server::Hosting;

/// Why an invocation's policies after the one open were not run: the session ended first, ...
pub(crate) const SESSION_ENDED: &str = "the session ended";
/// ... or the instructor started a new run (its page's New run) first.
pub(crate) const NEW_RUN: &str = "the instructor started a new run";

/// The failure of an invocation cut short: its policy `mode` was not run, `before` it came
/// ([`SESSION_ENDED`], [`NEW_RUN`]). `record` reads it back in these words.
pub(crate) fn not_run(mode: Mode, before: &str) -> String {
    format!("{}: not run, {before} before it", mode.name())
}

/// What the page asks the driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// One step of the sequence.
    Next,
    /// Every step left, through the last policy's check.
    RunToEnd,
    /// Close what is open and start a new invocation of these inputs.
    NewRun(Inputs),
    /// Let the room send requests, or stop it.
    Room(bool),
    /// Open the room's gate, if one is closed.
    OpenGate,
    /// Close a fresh gate for the room's slow work.
    CloseGate,
    /// Show the model's predictions for the open run before its evidence arrives.
    Reveal,
    /// Close everything: the session is ending.
    Leave,
}

/// An order: a command and where to send the answer.
#[derive(Debug)]
pub(crate) struct Order {
    pub(crate) command: Action,
    /// `Ok` with what was done, or `Err` saying why it cannot be done now.
    pub(crate) reply: oneshot::Sender<anyhow::Result<Value>>,
}

/// A room gate of a closed run, as the session's report lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoomGateRecord {
    /// The run's number, from 1, as the page shows it: `runs[run - 1]` of the report.
    pub run: usize,
    /// Its policy.
    pub mode: Mode,
    /// The gate and where it closed and opened on that run's ledger.
    #[serde(flatten)]
    pub gate: RoomGate,
}

/// What the driver leaves once the session ends.
#[derive(Debug, Default)]
pub(crate) struct Driven {
    pub(crate) runs: Vec<Report>,
    pub(crate) room_gates: Vec<RoomGateRecord>,
}

#[derive(Debug)]
pub(crate) struct Driver {
    /// What the command line asked for: its inputs are those the page's New run starts from.
    config: Config,
    journal: Arc<Journal>,
    room: Arc<Room>,
    /// The classroom's own URL, for the room's commands.
    base: String,
    /// The most connections a run's front keeps open (`server::Hosting`).
    front_connections: usize,
    driven: Driven,
    current: Option<Current>,
    /// Each closed policy run's verdict, for the page's summary.
    verdicts: Vec<Value>,
}

/// One invocation in progress.
#[derive(Debug)]
struct Current {
    inputs: Inputs,
    invocation: Invocation,
    /// Its policies not yet opened.
    modes: VecDeque<Mode>,
    /// The policy run now open.
    open: Option<Open>,
    /// Whether any step has been taken or the room reached it: an invocation where nothing
    /// happened at all is closed and left out of the report.
    touched: bool,
}

impl Current {
    /// Adds a closed policy run; one that failed or differed leaves no policy to open.
    fn push(&mut self, mode: Mode, run: PolicyRun) {
        if !self.invocation.push(mode, run) {
            self.modes.clear();
        }
    }
}

/// An open policy run.
#[derive(Debug)]
struct Open {
    run: Run,
    mode: Mode,
    gates: Arc<RoomGates>,
    /// Its responses journaled so far.
    journaled: usize,
}

/// One step as the page names it.
fn step_name(step: Planned) -> String {
    match step {
        Planned::Slow(request) | Planned::Probe(request) => request.to_string(),
        Planned::Fast => "F1".into(),
        Planned::Release => "release".into(),
    }
}

/// The question a class is asked before `step`, if it is one of the stops: before F1 in each
/// policy, before S2 in partitioned mode (when a fast permit is kept free).
fn stop_before(step: Planned, policy: Policy) -> Option<String> {
    match step {
        Planned::Fast => Some("what will F1 get?".into()),
        Planned::Slow(request @ Label::Slow(2)) if policy.mode == Mode::Partitioned => Some(
            format!("what will {request} get? (the fast permit is free)"),
        ),
        _ => None,
    }
}

/// What a step does, in the words the Next button shows.
fn step_words(step: Planned, policy: Policy) -> String {
    match step {
        Planned::Slow(request) => {
            let pool = policy.pool_for(Route::Slow);
            format!("Send {request} to /slow ({pool} pool) and wait for the decision")
        }
        Planned::Fast => {
            let pool = policy.pool_for(Route::Fast);
            format!("Send F1 to /fast ({pool} pool) while the slow work is held")
        }
        Planned::Release => "Open the gate and wait for every held caller's answer".into(),
        Planned::Probe(request) => format!("Send the new probe {request} after release"),
    }
}

impl Driver {
    pub(crate) fn new(
        config: Config,
        (journal, room): (Arc<Journal>, Arc<Room>),
        base: String,
        front_connections: usize,
    ) -> Self {
        Driver {
            config,
            journal,
            room,
            base,
            front_connections,
            driven: Driven::default(),
            current: None,
            verdicts: Vec::new(),
        }
    }

    /// Performs orders until told to leave (or until nobody can order any more), then closes
    /// what is open and returns the session's runs.
    pub(crate) async fn drive(mut self, mut orders: mpsc::Receiver<Order>) -> Driven {
        while let Some(order) = orders.recv().await {
            let leaving = order.command == Action::Leave;
            let done = self.perform(order.command).await;
            self.state();
            // The page may have gone: the order is done either way.
            let _ = order.reply.send(done);
            if leaving {
                break;
            }
        }
        // Orders still queued are answered as refused when `orders` drops.
        self.leave(SESSION_ENDED).await;
        self.driven
    }

    /// Starts an invocation of `inputs`: the page shows its first policy's board, and the
    /// next step opens that policy's server.
    pub(crate) async fn start(&mut self, inputs: Inputs) {
        self.leave(NEW_RUN).await;
        let modes: VecDeque<Mode> = inputs.mode.modes().iter().copied().collect();
        let first = modes.front().copied();
        self.current = Some(Current {
            inputs,
            invocation: Invocation::new(inputs, &self.config.options),
            modes,
            open: None,
            touched: false,
        });
        if let Some(mode) = first {
            let announced = self.announcement(inputs, mode, false);
            self.journal.begin(&announced);
        }
        self.state();
    }

    /// The page's `run` message for policy `mode` of an invocation of `inputs`: the board it
    /// draws, its predictions, and whether its server is open yet.
    fn announcement(&self, inputs: Inputs, mode: Mode, opened: bool) -> Value {
        let policy = inputs.policy(mode);
        let held = inputs.held;
        let modes = inputs.mode.modes();
        let policies: Vec<&str> = modes.iter().map(|m| m.name()).collect();
        let number = modes.iter().position(|m| *m == mode).unwrap_or(0) + 1;
        let plan: Vec<String> = Planned::all(held)
            .map(step_name)
            .chain(["close".to_owned()])
            .collect();
        let front = self.config.options.front;
        let executor = self.config.options.executor;
        // The usual run's page says nothing of an executor: it is the lab's own runtime.
        let executor_words = (!executor.is_default()).then(
            || json!({ "flags": executor.flags().trim_start(), "words": executor.describe(front) }),
        );
        json!({
            "kind": "run",
            "run": self.driven.runs.len() + 1,
            "opened": opened,
            "policy": number,
            "policies": policies,
            "mode": mode,
            "slots": inputs.slots,
            "held": held,
            "front": front,
            "front_words": front.describe(),
            "pools": policy.pools(),
            "capacities": policy.capacities(),
            "route_pools": { "/slow": policy.pool_for(Route::Slow), "/fast": policy.pool_for(Route::Fast) },
            "plan": plan,
            "predicted": Outcome::predicted_on(policy, held, (front, executor)),
            "executor": executor_words,
            "show_predictions": self.config.show_predictions,
            "session_inputs": self.config.inputs,
            "earlier": self.verdicts,
        })
    }

    async fn perform(&mut self, command: Action) -> anyhow::Result<Value> {
        match command {
            Action::Next => self.next().await,
            Action::RunToEnd => {
                let mut steps = Vec::new();
                while self.current.is_some() {
                    steps.push(self.next().await?);
                }
                Ok(json!({ "steps": steps }))
            }
            Action::NewRun(inputs) => {
                self.start(inputs).await;
                Ok(json!({ "started": inputs }))
            }
            Action::Room(open) => {
                // As the page's button: the room is opened to a run, and closes with it.
                if open && self.open_run().is_none() {
                    bail!("no run is open: the room is opened to one once it is");
                }
                self.room.set_open(open);
                Ok(json!({ "room_open": open }))
            }
            Action::OpenGate => self.open_room_gate(),
            Action::CloseGate => self.close_room_gate(),
            Action::Reveal => {
                if self.open_run().is_none() {
                    bail!("no run is open: its predictions show once it is");
                }
                self.journal.push(&json!({ "kind": "reveal" }));
                Ok(json!({ "revealed": true }))
            }
            Action::Leave => {
                self.leave(SESSION_ENDED).await;
                Ok(json!({ "left": true }))
            }
        }
    }

    /// One step: of the open run's sequence, its close and check, or the opening of the
    /// invocation's next policy.
    async fn next(&mut self) -> anyhow::Result<Value> {
        let Some(current) = self.current.as_mut() else {
            bail!("this run is complete: start a new run, or finish");
        };
        current.touched = true;
        let Some(open) = current.open.as_mut() else {
            return Ok(self.open_next().await);
        };
        let Some(step) = open.run.upcoming() else {
            return Ok(self.close().await);
        };
        let done = open.run.next_step().await;
        let responses = &open.run.observed().responses;
        for response in &responses[open.journaled..] {
            self.journal.push(&scripted(response));
        }
        open.journaled = responses.len();
        if let Some(watched) = &open.run.observed().executor {
            self.journal.push(&executor_message(watched));
        }
        let failure = done
            .and_then(Result::err)
            .map(|failure| failure.to_string());
        let name = step_name(step);
        self.journal.push(&json!({
            "kind": "step",
            "done": name,
            "failure": failure,
        }));
        if open.run.upcoming().is_none() && failure.is_none() {
            // The sequence is over: the room's turn, before the run closes.
            self.room.set_open(true);
        }
        Ok(json!({ "step": name, "failure": failure }))
    }

    /// Opens the current invocation's next policy on a fresh server, pools and gate.
    async fn open_next(&mut self) -> Value {
        let index = self.driven.runs.len();
        let Some(current) = self.current.as_mut() else {
            return Value::Null;
        };
        let Some(mode) = current.modes.pop_front() else {
            return Value::Null;
        };
        let (inputs, policy) = (current.inputs, current.inputs.policy(mode));
        let gates = Arc::new(RoomGates::default());
        let options = self.config.options.clone();
        let hosting = Hosting {
            gates: gates.chooser(),
            most_connections: Some(self.front_connections),
        };
        let run = match Run::open_at(policy, inputs.held, options, hosting) {
            Ok(run) => run,
            Err(never_started) => {
                let never_started = *never_started;
                self.verdict(index, mode, &never_started);
                self.conclude(mode, never_started);
                return json!({ "step": "open", "failure": true });
            }
        };
        let front = self.config.options.front;
        let announced = self.announcement(inputs, mode, true);
        self.journal.begin(&announced);
        self.journal
            .watch(run.section(), run.census(), front.name());
        self.room.set_open(false);
        self.room.aim(Some(Target {
            client: run.client().clone(),
            section: run.section().clone(),
            run: index + 1,
            mode,
        }));
        if let Some(current) = self.current.as_mut() {
            current.open = Some(Open {
                run,
                mode,
                gates,
                journaled: 0,
            });
        }
        json!({ "step": "open", "mode": mode })
    }

    /// The last step of a policy run: opens the room's gate if it is closed, closes the server
    /// and joins everything, and checks the run against the model — as the command line does.
    async fn close(&mut self) -> Value {
        let index = self.driven.runs.len();
        let Some(open) = self.current.as_mut().and_then(|c| c.open.take()) else {
            return Value::Null;
        };
        let run = self.close_run(index, open).await;
        let mode = run.report.mode;
        let matches = self.verdict(index, mode, &run);
        self.conclude(mode, run);
        json!({ "step": "close", "matches": matches })
    }

    /// Closes `open` on every path: the room can no longer reach it, its room gate opens.
    async fn close_run(&mut self, index: usize, open: Open) -> PolicyRun {
        self.room.aim(None);
        self.room.set_open(false);
        let section = open.run.section().clone();
        if let Some(gate) = open.gates.open(&section) {
            self.journal.push(&gate_message(gate, "open"));
        }
        let closed = open.run.close().await;
        // Its server closed, the room's requests to it are answered: each is told to the page
        // before anything of the next run, so the page draws it on this run's board. (One
        // still unlisted after the safety timeout is the session's failure, at its end.)
        let limit = self.config.options.safety_timeout;
        let _ = crate::child::awake_within(limit, self.room.settled()).await;
        let gates = open.gates.record().into_iter().map(|gate| RoomGateRecord {
            run: index + 1,
            mode: open.mode,
            gate,
        });
        self.driven.room_gates.extend(gates);
        closed
    }

    /// Tells the page whether `run` matched, and why not; returns whether it did.
    fn verdict(&mut self, index: usize, mode: Mode, run: &PolicyRun) -> bool {
        let reason = run.reason();
        let verdict = json!({
            "run": index + 1,
            "mode": mode,
            "matches": reason.is_none(),
            "reason": reason,
            "mismatches": run.report.model.mismatches,
            "failure": run.failure.as_ref().map(ToString::to_string),
        });
        self.journal
            .push(&json!({ "kind": "verdict", "verdict": verdict }));
        self.verdicts.push(verdict);
        reason.is_none()
    }

    /// Adds a closed policy run to its invocation; once the invocation is over (its last
    /// policy closed, or one failed or differed), its report joins the session's runs.
    fn conclude(&mut self, mode: Mode, run: PolicyRun) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        current.push(mode, run);
        if current.modes.is_empty()
            && let Some(current) = self.current.take()
        {
            self.driven.runs.push(current.invocation.report());
        }
    }

    /// Closes whatever is open, because of what came `before` the rest ([`SESSION_ENDED`],
    /// [`NEW_RUN`]). A run closed before its end is a failed run, reported as such; an
    /// invocation in which nothing happened at all is left out.
    async fn leave(&mut self, before: &str) {
        let Some(mut current) = self.current.take() else {
            return;
        };
        let index = self.driven.runs.len();
        // Closed whether or not anything happened in it.
        let closed = match current.open.take() {
            Some(open) => Some((open.mode, self.close_run(index, open).await)),
            None => None,
        };
        if !current.touched {
            // Not a step taken, nor a request from the room: nothing to report.
            return;
        }
        if let Some((mode, run)) = closed {
            self.verdict(index, mode, &run);
            current.push(mode, run);
        }
        if let Some(mode) = current.modes.front() {
            let why = not_run(*mode, before);
            current.invocation.cut_short(why);
        }
        self.driven.runs.push(current.invocation.report());
    }

    fn open_run(&self) -> Option<&Open> {
        self.current.as_ref()?.open.as_ref()
    }

    fn close_room_gate(&mut self) -> anyhow::Result<Value> {
        let open = self.open_run().context("no run is open")?;
        match open.gates.close(open.run.section()) {
            Ok(gate) => {
                let message = gate_message(gate, "closed");
                self.journal.push(&message);
                Ok(message)
            }
            Err(CannotClose::RunGateClosed) => Err(anyhow!(
                "the run's own gate is still closed: it opens at the release step"
            )),
            Err(CannotClose::AlreadyClosed) => Err(anyhow!("the room's gate is already closed")),
        }
    }

    fn open_room_gate(&mut self) -> anyhow::Result<Value> {
        let open = self.open_run().context("no run is open")?;
        let gate = (open.gates)
            .open(open.run.section())
            .context("no room gate is closed (the run's own gate opens at the release step)")?;
        let message = gate_message(gate, "open");
        self.journal.push(&message);
        Ok(message)
    }

    /// Tells the page what the controls can do now.
    fn state(&self) {
        let open = self.open_run();
        let next = match (&self.current, open) {
            (None, _) => Value::Null,
            (Some(_), Some(open)) => {
                let (policy, _) = open.run.inputs();
                match open.run.upcoming() {
                    Some(step) => json!({
                        "step": step_name(step),
                        "words": step_words(step, policy),
                        "ask": stop_before(step, policy),
                    }),
                    None => json!({
                        "step": "close",
                        "words": "Close the server and check the run against the model",
                    }),
                }
            }
            (Some(current), None) => match current.modes.front() {
                Some(mode) => json!({
                    "step": "open",
                    "words": format!("Open a fresh server, pools and gate for {}", mode.name()),
                }),
                None => Value::Null,
            },
        };
        let gate = open.map(|o| o.run.section().final_state().gate);
        let room_gate = open.and_then(|o| o.gates.last());
        self.journal.push(&json!({
            "kind": "state",
            "next": next,
            "complete": self.current.is_none(),
            "room": { "open": self.room.is_open(), "commands": self.room.commands(&self.base) },
            "run_gate": gate,
            "room_gate": room_gate,
        }));
    }
}

/// One of the sequence's responses, as the journal tells the page.
fn scripted(response: &ResponseRecord) -> Value {
    journal::tagged(json!({ "kind": "response", "room": false }), response)
}

/// What the run has observed of the front's own runtime, as the page draws it: every heartbeat
/// reading, the requests seen sitting unread and those queued for a thread. `stopped` is the
/// reading from which the heartbeat stood still, as the report tells it: some request sat
/// unread, and every reading from the last slow request held on has the same ticks.
fn executor_message(watched: &ExecutorEvidence) -> Value {
    let beats = &watched.heartbeat;
    let still = watched.since_last_held();
    let stopped = (!watched.unread.is_empty()
        && still.len() >= 2
        && still.iter().all(|b| b.ticks == still[0].ticks))
    .then(|| &still[0]);
    json!({
        "kind": "executor",
        "heartbeat": beats,
        "unread": watched.unread,
        "queued": watched.queued,
        "stopped": stopped,
        "released": beats.last().is_some_and(|b| b.moment == Moment::Release),
    })
}

fn gate_message(gate: RoomGate, state: &str) -> Value {
    json!({ "kind": "gate", "state": state, "gate": gate })
}
