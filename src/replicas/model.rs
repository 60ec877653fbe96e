//! What the inputs predict, before any process starts, and the check of a run's evidence
//! against it.
//!
//! - Own permits (`--global off`): each replica admits up to `slots`, so together they hold up
//!   to replicas × slots — more than a "global" limit of `slots`.
//! - Global permits: `slots` in all, across every replica; the rest are refused at once,
//!   naming every holder (replica and request).
//! - Pause (global, with a lease, all permits taken): the paused replica's holders lapse with
//!   their lease and another replica takes their permits while the paused work still runs:
//!   more requests inside work sections than the limit.
//! - Crash (global, all permits taken): a probe is refused, naming the dead holders, until
//!   their lease ends; then one is admitted. Without a lease they stay refused: the permits
//!   leak until the run's cleanup deletes them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::evidence::{CrashEvidence, EngineHolder, PauseEvidence, ReplicasEvidence, Sent};
use super::inputs::{ReplicaId, ReplicasInputs};
use crate::draw::table::{plural, plural_was};
use crate::evidence::Decision;
use crate::label::{Label, listed};
use crate::redis_pool::{Effect, LossCause, WorkEnd};

/// What the inputs predict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The most requests the permits let inside work sections at once, across replicas.
    pub limit_in_all: usize,
    /// Each request in sending order: its replica, decision and, refused, who holds (as a run
    /// records what it sent, without a probe's time).
    pub requests: Vec<Sent>,
    /// Requests held at once across replicas once all are decided.
    pub held_in_all: usize,
    /// The same, per replica.
    pub held_per_replica: BTreeMap<ReplicaId, usize>,
    /// The pause, if it runs.
    pub pause: Option<PausePlan>,
    /// The crash, if it runs.
    pub crash: Option<CrashPlan>,
    /// Parts that do not run for these inputs, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Whether the dependency refuses stale fencing tokens.
    #[serde(default)]
    pub fencing: bool,
}

/// The pause: which replica stops, and which is probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausePlan {
    /// Paused past its lease.
    pub paused: ReplicaId,
    /// Probed until it takes the paused holders' permits.
    pub probed: ReplicaId,
    /// Requests inside work sections beyond the limit while it is paused: its holders.
    pub over_admitted: usize,
    /// Whether the dependency refuses the paused holders' late effects (fencing on) or
    /// accepts them (off). A newer holder of the same slot has written by then: each probe
    /// admitted in a paused holder's place writes as its work begins.
    #[serde(default)]
    pub late_effects_refused: bool,
}

/// The crash: which replica is killed, which is probed, and whether its permits lapse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashPlan {
    /// Killed while holding permits.
    pub killed: ReplicaId,
    /// Probed after the kill.
    pub probed: ReplicaId,
    /// With a lease the dead holders' permits lapse and a probe is admitted; without one
    /// they leak for the rest of the run.
    pub lapses: bool,
}

/// The holder name of `request` on `replica`, as the engine names it.
pub(crate) fn holder(replica: ReplicaId, request: Label) -> String {
    format!("{replica}/{request}")
}

/// Whether `holder`, as the engine names it, is on `replica`.
pub(crate) fn holds(replica: ReplicaId, holder: &str) -> bool {
    holder.starts_with(&format!("{replica}/"))
}

/// The replica and request a holder name stands for, as [`holder`] writes it.
pub(crate) fn parse_holder(holder: &str) -> Option<(ReplicaId, Label)> {
    let (replica, request) = holder.split_once('/')?;
    Some((ReplicaId::named(replica)?, request.parse().ok()?))
}

/// What `inputs` predict.
pub(crate) fn predict(inputs: &ReplicasInputs) -> Prediction {
    let (count, slots) = (inputs.replicas, inputs.slots.get());
    let global = inputs.global.is_global();
    let mut holders: BTreeMap<ReplicaId, Vec<String>> =
        ReplicaId::all(count).map(|r| (r, Vec::new())).collect();
    let mut requests = Vec::new();
    for (n, request) in Label::slow(inputs.held.get()).enumerate() {
        let replica = ReplicaId::round_robin(n + 1, count);
        // The holders that count against the limit: every replica's, or this one's alone.
        let mut held_by: Vec<String> = if global {
            holders.values().flatten().cloned().collect()
        } else {
            holders[&replica].clone()
        };
        let decision = if held_by.len() >= slots {
            Decision::Refused
        } else {
            held_by.clear();
            if let Some(held) = holders.get_mut(&replica) {
                held.push(holder(replica, request));
            }
            Decision::Admitted
        };
        requests.push(Sent {
            request,
            replica,
            decision,
            held_by,
            at_ms: None,
        });
    }
    let held_per_replica: BTreeMap<_, _> = holders.iter().map(|(&r, h)| (r, h.len())).collect();
    let held_in_all = held_per_replica.values().sum();
    let (leased, full) = (inputs.lease_ms.leased(), held_in_all >= slots);
    let needs_full = |part| {
        format!(
            "{part}: --held is below --slots, so a permit is free and a probe would be admitted \
             without waiting for any lease"
        )
    };
    let mut skipped = Vec::new();
    if !global {
        skipped.push(
            "pause and crash: each replica's own permits are held and freed by it alone, so \
                 no other replica waits on them; they need --global"
                .into(),
        );
    } else if !leased {
        skipped.push("pause: without a lease nothing lapses while a replica is paused".into());
    } else if !full {
        skipped.push(needs_full("pause"));
    }
    if global && !full {
        skipped.push(needs_full("crash"));
    }
    let (first, second) = (ReplicaId(1), ReplicaId(2));
    let pause = (global && leased && full).then(|| PausePlan {
        paused: second,
        probed: first,
        over_admitted: held_per_replica[&second],
        late_effects_refused: inputs.fencing.on(),
    });
    let crash = (global && full).then_some(CrashPlan {
        killed: first,
        probed: second,
        lapses: leased,
    });
    Prediction {
        limit_in_all: if global { slots } else { slots * count.get() },
        requests,
        held_in_all,
        held_per_replica,
        pause,
        crash,
        skipped,
        fencing: inputs.fencing.on(),
    }
}

/// When requests inside work sections were counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountedAt {
    /// Once every request was decided.
    AfterRequests,
    /// During the pause, once the probes had taken the paused holders' permits.
    DuringPause,
}

/// More requests inside work sections at once, across replicas, than the limit: what the
/// evidence shows of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverAdmission {
    /// When it was counted.
    pub when: CountedAt,
    /// The requests inside work sections then, as `replica/request`.
    pub inside: Vec<String>,
    /// The limit: `--slots`, global or meant to be.
    pub limit: usize,
    /// How many beyond it.
    pub over_by: usize,
    /// With global permits: the holders inside whose lease had lapsed (Redis no longer named
    /// them), each with why, when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lapsed: Vec<Lapsed>,
    /// Without global permits: why, as there is no shared limit to lapse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A holder still inside its work section whose lease had lapsed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lapsed {
    /// `replica/request`.
    pub holder: String,
    /// Whether the run had paused its replica then; otherwise it was live.
    pub paused: bool,
    /// Why, as its replica's renewals found it; `None` if the replica never said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<LossCause>,
    /// How long its work went on after the run heard of the loss: until its caller was
    /// answered, in milliseconds; `None` if it never was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worked_on_ms: Option<f64>,
    /// Its work's last effect, as the dependency judged it; `None` if it never came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_effect: Option<Effect>,
}

impl Lapsed {
    /// Why its lease lapsed, in words.
    pub fn why(&self) -> String {
        match (&self.cause, self.paused) {
            (Some(cause), true) => format!("paused by the run (SIGSTOP): {cause}"),
            (Some(cause), false) => format!("live: {cause}"),
            // Whether the pause outlasted its lease is the pause's own evidence, not this.
            (None, true) => "its replica paused by the run (SIGSTOP)".to_owned(),
            (None, false) => "live; its replica reported no lost lease".to_owned(),
        }
    }
}

/// Every over-admission the evidence shows, in order.
pub(crate) fn over_admitted(
    inputs: &ReplicasInputs,
    evidence: &ReplicasEvidence,
) -> Vec<OverAdmission> {
    let limit = inputs.slots.get();
    let global = inputs.global.is_global();
    let mut seen = Vec::new();
    let all_sent = evidence.sent.len() == inputs.held.get();
    let inside = |sections: &BTreeMap<ReplicaId, Vec<Label>>| -> Vec<String> {
        let each = sections
            .iter()
            .flat_map(|(&r, held)| held.iter().map(move |&q| (r, q)));
        each.map(|(r, q)| holder(r, q)).collect()
    };
    let mut count = |when, inside: Vec<String>, named: Option<&[String]>, paused| {
        if inside.len() <= limit {
            return;
        }
        let (lapsed, why) = match named {
            Some(named) => {
                let lapsed = inside.iter().filter(|h| !named.contains(h));
                let lapsed = lapsed.map(|h| lapsed_holder(h, paused, evidence));
                (lapsed.collect(), None)
            }
            None if global => (Vec::new(), None),
            None => (
                Vec::new(),
                Some(format!(
                    "each replica admits up to {limit} with its own permits: nothing makes them \
                     one limit"
                )),
            ),
        };
        seen.push(OverAdmission {
            when,
            over_by: inside.len() - limit,
            inside,
            limit,
            lapsed,
            why,
        });
    };
    if all_sent {
        let named: Option<Vec<String>> = evidence.engine.as_ref().map(|e| {
            let holders = e.holders_after_requests.iter();
            holders.map(|h| h.holder.clone()).collect()
        });
        count(
            CountedAt::AfterRequests,
            inside(&evidence.held_at_once),
            named.as_deref(),
            None,
        );
    }
    if let Some(pause) = &evidence.pause
        && !pause.in_sections.is_empty()
    {
        count(
            CountedAt::DuringPause,
            inside(&pause.in_sections),
            pause.engine_holders.as_deref(),
            pause.replica,
        );
    }
    seen
}

fn lapsed_holder(holder: &str, paused: Option<ReplicaId>, evidence: &ReplicasEvidence) -> Lapsed {
    let replica = evidence.replicas.iter().find(|r| holds(r.id, holder));
    let loss = replica.and_then(|r| r.lease_losses.iter().find(|l| l.loss.holder == holder));
    let answered = evidence
        .released
        .iter()
        .find(|a| self::holder(a.replica, a.request) == holder)
        .and_then(|a| a.at_ms);
    let late_effect = evidence
        .engine
        .as_ref()
        .and_then(|e| e.effects.as_deref())
        .and_then(|effects| end_effect(effects, holder));
    Lapsed {
        late_effect: late_effect.cloned(),
        holder: holder.to_owned(),
        paused: paused.is_some_and(|p| holds(p, holder)),
        cause: loss.map(|l| l.loss.cause),
        worked_on_ms: loss
            .zip(answered)
            .map(|(loss, at)| ((at - loss.seen_at_ms) * 10.0).round() / 10.0),
    }
}

/// The effect `holder`'s work wrote as it ended, if it came: each holder's work ends once.
pub(crate) fn end_effect<'a>(effects: &'a [Effect], holder: &str) -> Option<&'a Effect> {
    effects
        .iter()
        .find(|e| e.holder == holder && e.phase == WorkEnd::End)
}

/// The probes refused before the first admitted one, and that one, if any.
pub(crate) fn until_admitted(probes: &[Sent]) -> (&[Sent], Option<&Sent>) {
    let first = probes.iter().position(|p| p.decision == Decision::Admitted);
    let (refused, rest) = probes.split_at(first.unwrap_or(probes.len()));
    (refused, rest.first())
}

/// An admission `after` ms into a part that came sooner than the shortest lease `holders`
/// had left when it began, with that lease left. The part's clock starts before the holders
/// are read, and one machine's clock times both: no permit can lapse sooner than that (less
/// the millisecond Redis's `TIME` truncates).
fn too_soon(holders: &[EngineHolder], after: Option<f64>) -> Option<(f64, u64)> {
    let left = holders.iter().filter_map(|h| h.lease_left_ms).min()?;
    after
        .filter(|after| after + 1.0 < left as f64)
        .map(|after| (after, left))
}

fn names(held_by: &[String]) -> BTreeSet<&str> {
    held_by.iter().map(String::as_str).collect()
}

/// The differences between `prediction` and `evidence`, in words; empty when they agree.
/// Only what a run reached is checked: a failed run's failure says the rest.
pub(crate) fn check(prediction: &Prediction, evidence: &ReplicasEvidence) -> Vec<String> {
    let mut wrong = Vec::new();
    for expected in &prediction.requests {
        if let Some(sent) = evidence.sent.iter().find(|s| s.request == expected.request) {
            check_sent(expected, sent, &mut wrong);
        }
    }
    if evidence.sent.len() == prediction.requests.len() {
        let held = evidence.held_in_all();
        if held != prediction.held_in_all {
            wrong.push(format!(
                "{} held at once across replicas, expected {}",
                plural(held, "request"),
                prediction.held_in_all
            ));
        }
        for (replica, &expected) in &prediction.held_per_replica {
            let got = evidence.held_at_once.get(replica).map_or(0, Vec::len);
            if got != expected {
                wrong.push(format!("{replica} held {got}, expected {expected}"));
            }
        }
        if let Some(engine) = &evidence.engine {
            let expected: BTreeSet<String> = prediction
                .requests
                .iter()
                .filter(|e| e.decision == Decision::Admitted)
                .map(|e| holder(e.replica, e.request))
                .collect();
            let got: BTreeSet<String> = engine
                .holders_after_requests
                .iter()
                .map(|h| h.holder.clone())
                .collect();
            if got != expected {
                wrong.push(format!(
                    "Redis's holders were {}, expected {}",
                    listed(got.iter()),
                    listed(expected.iter())
                ));
            }
        }
    }
    // A pause cut short (Ctrl-C) recorded only its holders: nothing past them is checked.
    let pause = evidence.pause.as_ref().filter(|p| p.ended);
    if let (Some(plan), Some(pause)) = (&prediction.pause, pause) {
        check_pause(plan, prediction.limit_in_all, pause, &mut wrong);
        if pause.resumed && evidence.released.iter().any(|a| a.status.is_some()) {
            check_late_effects(plan, pause, evidence, &mut wrong);
        }
    }
    if let Some(effects) = evidence.engine.as_ref().and_then(|e| e.effects.as_deref())
        && prediction.fencing
    {
        let account = Dependency::of(effects);
        for stale in &account.stale_accepted {
            wrong.push(format!(
                "the dependency accepted {}'s token {} for slot {} after accepting the newer {}",
                stale.holder, stale.fence.token, stale.fence.slot, stale.newest
            ));
        }
    }
    if let (Some(plan), Some(crash)) = (&prediction.crash, &evidence.crash) {
        check_crash(plan, crash, evidence.holders_after_requests(), &mut wrong);
    }
    check_replicas(prediction, evidence, &mut wrong);
    if let Some(cleanup) = evidence.engine.as_ref().and_then(|e| e.cleanup) {
        if cleanup.keys_left != 0 {
            wrong.push(format!("{} keys of the run were left", cleanup.keys_left));
        }
        if let (Some(plan), Some(crash)) = (&prediction.crash, &evidence.crash)
            && !plan.lapses
            && cleanup.holders_removed < crash.dead_holders.len()
        {
            wrong.push(format!(
                "cleanup removed {}, but {} leaked",
                plural(cleanup.holders_removed, "holder"),
                crash.dead_holders.len()
            ));
        }
    }
    wrong
}

fn check_sent(expected: &Sent, sent: &Sent, wrong: &mut Vec<String>) {
    let request = expected.request;
    if sent.replica != expected.replica {
        wrong.push(format!(
            "{request} went to {}, expected {}",
            sent.replica, expected.replica
        ));
    }
    if sent.decision != expected.decision {
        wrong.push(format!(
            "{request} was {}, expected {}",
            decided(sent.decision),
            decided(expected.decision)
        ));
    } else if names(&sent.held_by) != names(&expected.held_by) {
        wrong.push(format!(
            "{request}'s refusal named {}, expected {}",
            listed(sent.held_by.iter()),
            listed(expected.held_by.iter())
        ));
    }
}

fn decided(decision: Decision) -> &'static str {
    match decision {
        Decision::Admitted => "held",
        Decision::Refused => "refused",
    }
}

/// The paused holders' effects at the end of their work: refused naming a newer token with
/// fencing, accepted without.
fn check_late_effects(
    plan: &PausePlan,
    pause: &PauseEvidence,
    evidence: &ReplicasEvidence,
    wrong: &mut Vec<String>,
) {
    // Without the dependency's log there is nothing to say of the effects.
    let Some(effects) = evidence.engine.as_ref().and_then(|e| e.effects.as_deref()) else {
        return;
    };
    for paused in &pause.holders {
        let late = end_effect(effects, &paused.holder);
        match (late, plan.late_effects_refused) {
            (None, _) => wrong.push(format!(
                "{}'s work ended without its effect reaching the dependency",
                paused.holder
            )),
            (Some(e), true) if e.accepted => wrong.push(format!(
                "the dependency accepted the paused {}'s late effect (token {}), expected it \
                 refused",
                e.holder, e.fence.token
            )),
            (Some(e), true) if e.newest <= e.fence.token => wrong.push(format!(
                "{}'s late effect was refused without a newer token for its slot",
                e.holder
            )),
            (Some(e), false) if !e.accepted => wrong.push(format!(
                "the dependency refused {}'s late effect with fencing off",
                e.holder
            )),
            _ => {}
        }
    }
}

/// The dependency's log, counted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Dependency {
    /// Effects it accepted.
    pub accepted: usize,
    /// Effects it refused, each with the newer token it had accepted for the slot.
    pub refused: Vec<Effect>,
    /// Effects it accepted although it had accepted a newer token for their slot (possible
    /// only with fencing off): each one a stale holder's write landing beside a newer one's.
    pub stale_accepted: Vec<Effect>,
    /// The most holders whose writes stood at once: one per slot it accepted a token for, plus
    /// every stale write accepted. With fencing it never exceeds the slots.
    pub standing_at_most: usize,
}

impl Dependency {
    /// The account of `effects`, in the dependency's order.
    pub(crate) fn of(effects: &[Effect]) -> Dependency {
        let (accepted, refused): (Vec<&Effect>, Vec<&Effect>) =
            effects.iter().partition(|e| e.accepted);
        let slots: BTreeSet<u64> = accepted.iter().map(|e| e.fence.slot).collect();
        let stale = accepted.iter().filter(|e| e.fence.token < e.newest);
        let stale_accepted: Vec<Effect> = stale.map(|&e| e.clone()).collect();
        Dependency {
            accepted: accepted.len(),
            refused: refused.into_iter().cloned().collect(),
            standing_at_most: slots.len() + stale_accepted.len(),
            stale_accepted,
        }
    }
}

fn names_of(holders: &[EngineHolder]) -> BTreeSet<&str> {
    holders.iter().map(|h| h.holder.as_str()).collect()
}

/// The first of `refused` that names none of `holders`.
fn naming_none<'a>(refused: &'a [Sent], holders: &BTreeSet<&str>) -> Option<&'a Sent> {
    let names = |p: &Sent| p.held_by.iter().any(|h| holders.contains(h.as_str()));
    refused.iter().find(|p| !names(p))
}

fn check_pause(plan: &PausePlan, limit: usize, pause: &PauseEvidence, wrong: &mut Vec<String>) {
    let paused = names_of(&pause.holders);
    if paused.len() != plan.over_admitted {
        wrong.push(format!(
            "the paused replica held {}, expected {}",
            plural(paused.len(), "permit"),
            plan.over_admitted
        ));
    }
    let admitted = pause
        .probes
        .iter()
        .filter(|p| p.decision == Decision::Admitted)
        .count();
    if admitted != plan.over_admitted {
        wrong.push(format!(
            "{admitted} probes were admitted during the pause, expected {} (one per paused \
             holder)",
            plan.over_admitted
        ));
    }
    if let Some(probe) = naming_none(until_admitted(&pause.probes).0, &paused) {
        wrong.push(format!(
            "{} was refused before any paused holder lapsed without naming one",
            probe.request
        ));
    }
    if let Some((after, left)) = too_soon(&pause.holders, pause.admitted_after_ms) {
        wrong.push(format!(
            "a probe was admitted {after} ms into the pause, before the paused holders' lease \
             ended ({left} ms left then)"
        ));
    }
    let in_sections: usize = pause.in_sections.values().map(Vec::len).sum();
    if in_sections != limit + plan.over_admitted {
        wrong.push(format!(
            "{} inside work sections during the pause, expected {} (the limit {limit} plus \
             the paused holders)",
            plural_was(in_sections, "request"),
            limit + plan.over_admitted
        ));
    }
    if let Some(holder) =
        (pause.engine_holders.iter().flatten()).find(|h| paused.contains(h.as_str()))
    {
        wrong.push(format!(
            "the engine still named {holder} after its lease should have lapsed"
        ));
    }
}

/// Why the crash's refusal window could not be watched, if it could not: with a lease, the
/// engine read after the kill named none of the holders the killed replica had when every
/// request was decided (`before`), or the first probe was admitted, none refused before it, no
/// sooner than the dead holders' shortest lease left when read (so the lease may have ended
/// before the probe reached the engine). Neither is a difference from the model: this process
/// ran too late to see the window.
pub(crate) fn crash_window_missed(
    lapses: bool,
    crash: &CrashEvidence,
    before: &[EngineHolder],
) -> Option<String> {
    let killed = crash.replica.filter(|_| lapses)?;
    if crash.dead_holders.is_empty() {
        let held = before.iter().filter(|h| holds(killed, &h.holder));
        let held: Vec<&str> = held.map(|h| h.holder.as_str()).collect();
        // It held nothing before either: a difference, told as one.
        if held.is_empty() {
            return None;
        }
        let read = crash
            .read_ms
            .map_or(String::new(), |ms| format!(" {ms:.0} ms"));
        return Some(format!(
            "the engine, read{read} after the kill, named no holder on {killed}, which held {} \
             once every request was decided: with a lease its permits may have lapsed by then",
            listed(held.iter())
        ));
    }
    let (refused, first) = until_admitted(&crash.probes);
    let first = first.filter(|_| refused.is_empty())?;
    // Admitted sooner than any dead holder's lease could end: a difference, told as one.
    if too_soon(&crash.dead_holders, first.at_ms).is_some() {
        return None;
    }
    let left = crash
        .dead_holders
        .iter()
        .filter_map(|h| h.lease_left_ms)
        .min()?;
    let at = first.at_ms.map_or("?".into(), |ms| format!("{ms:.0}"));
    Some(format!(
        "the first probe, {}, was answered {at} ms after the kill, and {killed}'s holders had \
         {left} ms of lease left when read: it may have ended before the probe reached the \
         engine",
        first.request
    ))
}

fn check_crash(
    plan: &CrashPlan,
    crash: &CrashEvidence,
    before: &[EngineHolder],
    wrong: &mut Vec<String>,
) {
    // A window the run missed is its failure, not the model's.
    let missed = crash_window_missed(plan.lapses, crash, before).is_some();
    let dead = names_of(&crash.dead_holders);
    if dead.is_empty() && !missed {
        wrong.push(format!("{} held no permit when it was killed", plan.killed));
    }
    let (refused, first_admitted) = until_admitted(&crash.probes);
    if refused.is_empty() && !missed {
        wrong.push("no probe was refused after the kill".into());
    }
    if let Some(probe) = naming_none(refused, &dead) {
        wrong.push(format!(
            "{} was refused after the kill without naming a dead holder",
            probe.request
        ));
    }
    match (plan.lapses, first_admitted) {
        (true, None) => wrong.push("no probe was admitted after the dead holders' lease".into()),
        (false, Some(probe)) => wrong.push(format!(
            "{} was admitted although the dead holders had no lease",
            probe.request
        )),
        (false, None) => {
            if let Some(h) = crash
                .dead_holders
                .iter()
                .find(|h| h.lease_left_ms.is_some())
            {
                wrong.push(format!("{} had a lease, expected none", h.holder));
            }
        }
        (true, Some(probe)) => {
            if let Some((after, left)) = too_soon(&crash.dead_holders, probe.at_ms) {
                wrong.push(format!(
                    "{} was admitted {after} ms after the kill, before the dead holders' lease ended ({left} ms left then)",
                    probe.request
                ));
            }
        }
    }
}

fn check_replicas(prediction: &Prediction, evidence: &ReplicasEvidence, wrong: &mut Vec<String>) {
    let killed = prediction
        .crash
        .filter(|_| evidence.crash.is_some())
        .map(|c| c.killed);
    for replica in &evidence.replicas {
        if Some(replica.id) == killed {
            continue;
        }
        let Some(ledger) = &replica.ledger else {
            continue;
        };
        for (pool, account) in ledger {
            for rule in account.broken() {
                wrong.push(format!("{}'s {pool} ledger broke: {rule}", replica.id));
            }
        }
        if let Some(end) = &replica.final_state
            && end.active_work.values().any(|&n| n != 0)
        {
            wrong.push(format!("{} ended with work inside its section", replica.id));
        }
        if let Some(permits) = &replica.permits {
            for failure in &permits.failures {
                wrong.push(format!("{}: {failure}", replica.id));
            }
            let ended = evidence.pause.as_ref().filter(|p| p.ended);
            let paused = prediction
                .pause
                .filter(|p| p.paused == replica.id && evidence.pause.is_some());
            if paused.is_none() && !permits.lapsed.is_empty() {
                wrong.push(format!(
                    "{}'s permits for {} lapsed while it was running",
                    replica.id,
                    listed(permits.lapsed.iter())
                ));
            }
            if let (Some(plan), Some(pause)) = (paused, ended)
                && permits.lapsed.len() != plan.over_admitted
            {
                wrong.push(format!(
                    "{} found {} of its permits lapsed after the pause, expected {} (it held {})",
                    replica.id,
                    permits.lapsed.len(),
                    plan.over_admitted,
                    listed(pause.holders.iter().map(|h| &h.holder))
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Slots;
    use crate::replicas::inputs::{Engine, LeaseMs, ReplicaCount, Requests};

    fn inputs(replicas: u8, slots: u8, held: u8, global: Engine, lease: u32) -> ReplicasInputs {
        ReplicasInputs {
            replicas: ReplicaCount::new(replicas).expect("allowed"),
            slots: Slots::new(slots).expect("allowed"),
            held: Requests::new(held).expect("allowed"),
            global,
            lease_ms: LeaseMs::new(lease).expect("allowed"),
            fencing: crate::replicas::Fencing::On,
        }
    }

    fn decisions(prediction: &Prediction) -> Vec<(String, String)> {
        prediction
            .requests
            .iter()
            .map(|e| (holder(e.replica, e.request), decided(e.decision).to_owned()))
            .collect()
    }

    /// A holder's name reads back as the replica and request it was written from, and nothing
    /// else reads as one.
    #[test]
    fn a_holders_name_reads_back() {
        for (replica, request) in [
            (ReplicaId(1), Label::Slow(1)),
            (ReplicaId(4), Label::Slow(16)),
        ] {
            let name = holder(replica, request);
            assert_eq!(parse_holder(&name), Some((replica, request)), "{name}");
        }
        for not in ["r1", "r5/S1", "x1/S1", "r1/", "r1/nope", ""] {
            assert_eq!(parse_holder(not), None, "{not}");
        }
    }

    /// Own permits: 2 replicas × 2 slots hold all 4 requests — twice the "global" 2.
    #[test]
    fn own_permits_add_up_across_replicas() {
        let p = predict(&inputs(2, 2, 4, Engine::Off, 2000));
        assert_eq!((p.held_in_all, p.limit_in_all), (4, 4));
        assert!(p.requests.iter().all(|e| e.decision == Decision::Admitted));
        let p = predict(&inputs(3, 2, 8, Engine::Off, 2000));
        assert_eq!(p.held_in_all, 6);
        let refused: Vec<_> = p
            .requests
            .iter()
            .filter(|e| !e.held_by.is_empty())
            .collect();
        assert_eq!(refused.len(), 2);
        assert_eq!(refused[0].held_by, ["r1/S1", "r1/S4"], "S7 finds r1 full");
        assert!(p.pause.is_none() && p.crash.is_none());
    }

    /// Global permits: `slots` in all; each refusal names every holder on every replica.
    #[test]
    fn global_permits_hold_slots_in_all() {
        let p = predict(&inputs(2, 2, 4, Engine::Local, 2000));
        assert_eq!(p.held_in_all, 2);
        let expected = [
            ("r1/S1", "held"),
            ("r2/S2", "held"),
            ("r1/S3", "refused"),
            ("r2/S4", "refused"),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(h, d)| (h.to_string(), d.to_string()))
            .collect();
        assert_eq!(decisions(&p), expected);
        assert_eq!(p.requests[3].held_by, ["r1/S1", "r2/S2"]);
        let pause = p.pause.expect("a lease and a full pool");
        assert_eq!(
            (pause.paused, pause.probed, pause.over_admitted),
            (ReplicaId(2), ReplicaId(1), 1)
        );
        let crash = p.crash.expect("a full pool");
        assert_eq!(
            (crash.killed, crash.probed, crash.lapses),
            (ReplicaId(1), ReplicaId(2), true)
        );
    }

    /// A crash whose probe is admitted long before the dead holders' lease could have ended
    /// (a sweep that removes live holders, say) disagrees with the model, even when an early
    /// probe was refused naming a dead holder.
    #[test]
    fn an_admission_before_the_dead_holders_lease_ends_is_a_difference() {
        use super::super::evidence::{CrashEvidence, EngineHolder};
        let p = predict(&inputs(2, 2, 4, Engine::Local, 2000));
        let plan = p.crash.expect("a full pool");
        let probe = |n: u16, decision, held_by: &[&str], at_ms| Sent {
            request: Label::Slow(n),
            replica: ReplicaId(2),
            decision,
            held_by: held_by.iter().map(|h| h.to_string()).collect(),
            at_ms: Some(at_ms),
        };
        let crash = |admitted_at_ms| CrashEvidence {
            replica: Some(ReplicaId(1)),
            dead_holders: vec![EngineHolder {
                holder: "r1/S1".into(),
                lease_left_ms: Some(1900),
            }],
            probed: Some(ReplicaId(2)),
            probes: vec![
                probe(5, Decision::Refused, &["r1/S1", "r2/S2"], 1.0),
                probe(6, Decision::Admitted, &[], admitted_at_ms),
            ],
            window_ms: Some(admitted_at_ms),
            ..CrashEvidence::default()
        };
        let mut wrong = Vec::new();
        check_crash(&plan, &crash(1950.0), &[], &mut wrong);
        assert!(wrong.is_empty(), "{wrong:?}");
        check_crash(&plan, &crash(3.0), &[], &mut wrong);
        assert!(
            wrong.iter().any(|w| w.contains("before")),
            "an admission 3 ms after the kill, with 1900 ms of lease left, was accepted: {wrong:?}"
        );
    }

    /// A crash whose first probe came too late to be refused (admitted no sooner than the
    /// dead holders' lease left when read), or whose holders had lapsed before the engine was
    /// read, missed its window: the run's failure, not a difference from the model. One
    /// admitted sooner than the lease could end is still a difference, and so is a killed
    /// replica that held nothing before the kill either.
    #[test]
    fn a_crash_window_the_run_was_too_late_for_is_missed_not_a_difference() {
        use super::super::evidence::{CrashEvidence, EngineHolder};
        let p = predict(&inputs(2, 2, 4, Engine::Local, 2000));
        let plan = p.crash.expect("a full pool");
        let holder = |name: &str| EngineHolder {
            holder: name.to_owned(),
            lease_left_ms: Some(120),
        };
        let crash = |dead: &[&str], admitted_at_ms| CrashEvidence {
            replica: Some(ReplicaId(1)),
            dead_holders: dead.iter().map(|name| holder(name)).collect(),
            read_ms: Some(2.0),
            probed: Some(ReplicaId(2)),
            probes: vec![Sent {
                request: Label::Slow(5),
                replica: ReplicaId(2),
                decision: Decision::Admitted,
                held_by: Vec::new(),
                at_ms: Some(admitted_at_ms),
            }],
            window_ms: Some(admitted_at_ms),
            ..CrashEvidence::default()
        };
        let before = [holder("r1/S1"), holder("r2/S2")];
        let says = |crash: &CrashEvidence, before: &[EngineHolder]| {
            let mut wrong = Vec::new();
            check_crash(&plan, crash, before, &mut wrong);
            (crash_window_missed(plan.lapses, crash, before), wrong)
        };
        for (late, told) in [
            (
                crash(&["r1/S1"], 130.0),
                "was answered 130 ms after the kill",
            ),
            (
                crash(&[], 5.0),
                "read 2 ms after the kill, named no holder on r1, which held r1/S1",
            ),
        ] {
            let (missed, wrong) = says(&late, &before);
            let missed = missed.expect("missed");
            assert!(missed.contains(told), "{missed}");
            assert!(wrong.is_empty(), "{wrong:?}");
        }
        // It held nothing before the kill either: a difference, not a window missed.
        let (missed, wrong) = says(&crash(&[], 5.0), &before[1..]);
        assert_eq!(missed, None);
        assert!(
            wrong.iter().any(|w| w.contains("held no permit")),
            "{wrong:?}"
        );
        let (missed, wrong) = says(&crash(&["r1/S1"], 3.0), &before);
        assert_eq!(missed, None);
        assert!(
            wrong.iter().any(|w| w.contains("no probe was refused")),
            "{wrong:?}"
        );
        assert!(wrong.iter().any(|w| w.contains("before")), "{wrong:?}");
    }

    /// A pause whose probe takes a paused holder's permit long before that holder's lease
    /// could have ended disagrees with the model.
    #[test]
    fn an_admission_before_the_paused_holders_lease_ends_is_a_difference() {
        use super::super::evidence::{EngineHolder, PauseEvidence};
        let p = predict(&inputs(2, 2, 4, Engine::Local, 2000));
        let plan = p.pause.expect("a lease and a full pool");
        let probe = |n: u16, decision, held_by: &[&str], at_ms| Sent {
            request: Label::Slow(n),
            replica: ReplicaId(1),
            decision,
            held_by: held_by.iter().map(|h| h.to_string()).collect(),
            at_ms: Some(at_ms),
        };
        let pause = |admitted_at_ms| PauseEvidence {
            replica: Some(ReplicaId(2)),
            holders: vec![EngineHolder {
                holder: "r2/S2".into(),
                lease_left_ms: Some(1900),
            }],
            probed: Some(ReplicaId(1)),
            probes: vec![
                probe(5, Decision::Refused, &["r1/S1", "r2/S2"], 1.0),
                probe(6, Decision::Admitted, &[], admitted_at_ms),
                probe(
                    7,
                    Decision::Refused,
                    &["r1/S1", "r1/S6"],
                    admitted_at_ms + 1.0,
                ),
            ],
            admitted_after_ms: Some(admitted_at_ms),
            in_sections: [
                (ReplicaId(1), vec![Label::Slow(1), Label::Slow(6)]),
                (ReplicaId(2), vec![Label::Slow(2)]),
            ]
            .into(),
            engine_holders: Some(vec!["r1/S1".into(), "r1/S6".into()]),
            resumed: true,
            ..PauseEvidence::default()
        };
        let mut wrong = Vec::new();
        check_pause(&plan, p.limit_in_all, &pause(1950.0), &mut wrong);
        assert!(wrong.is_empty(), "{wrong:?}");
        check_pause(&plan, p.limit_in_all, &pause(3.0), &mut wrong);
        assert!(
            wrong.iter().any(|w| w.contains("before")),
            "an admission 3 ms into the pause, with 1900 ms of lease left, was accepted: {wrong:?}"
        );
    }

    /// The dependency's account: a stale write it accepted (fencing off) stands beside the
    /// newer holder's on one slot, so more writes stood than there are slots; a refused one
    /// names the newer token.
    #[test]
    fn the_dependency_counts_stale_writes_beyond_the_slots() {
        use crate::redis_pool::{Effect, Fence, WorkEnd};
        let effect = |holder: &str, phase, slot, token, accepted, newest| Effect {
            holder: holder.into(),
            phase,
            fence: Fence { slot, token },
            accepted,
            newest,
        };
        let run = |late_accepted| {
            vec![
                effect("r1/S1", WorkEnd::Begin, 0, 11, true, 0),
                effect("r2/S2", WorkEnd::Begin, 1, 12, true, 0),
                effect("r1/S5", WorkEnd::Begin, 1, 13, true, 12),
                effect("r2/S2", WorkEnd::End, 1, 12, late_accepted, 13),
            ]
        };
        let fenced = Dependency::of(&run(false));
        assert_eq!((fenced.accepted, fenced.standing_at_most), (3, 2));
        assert_eq!(fenced.refused[0].newest, 13);
        assert!(fenced.stale_accepted.is_empty());
        let open = Dependency::of(&run(true));
        assert_eq!((open.accepted, open.standing_at_most), (4, 3));
        assert_eq!(open.stale_accepted[0].holder, "r2/S2");
    }

    /// Without a lease there is no pause part and the crash leaks; with a free permit neither
    /// part runs.
    #[test]
    fn the_parts_that_run_depend_on_the_lease_and_a_full_pool() {
        let p = predict(&inputs(2, 2, 4, Engine::Local, 0));
        assert!(p.pause.is_none());
        assert!(!p.crash.expect("a full pool").lapses);
        let p = predict(&inputs(2, 4, 2, Engine::Local, 2000));
        assert!(p.pause.is_none() && p.crash.is_none());
        assert_eq!(p.skipped.len(), 2);
    }
}
