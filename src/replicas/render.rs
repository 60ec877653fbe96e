//! `replicas` for a person: the requests as a table with one column per replica, what the
//! evidence says about the limit in plain words, the pause and the crash with each window next
//! to the lease, and each replica's own ledger side by side. Reads only the report.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::draw::table::{self, columns, joined, labels, plural, plural_was};
use crate::evidence::Decision;
use crate::redis_pool::Effect;
use crate::replicas::evidence::{CONTINUED_FROM_OUTSIDE, EngineHolder, ReplicaEvidence, Sent};
use crate::replicas::model::{end_effect, parse_holder, until_admitted};
use crate::replicas::report::late_effect;
use crate::replicas::{Engine, ReplicaId, ReplicasReport};

/// The report as text: its sentences wrapped at 100 columns, its tables as wide as their
/// cells, with a column per replica (under 100 columns for 4 replicas).
pub fn render(report: &ReplicasReport) -> String {
    let inputs = &report.inputs;
    let (count, slots) = (inputs.replicas.get(), inputs.slots.get());
    let mut out = format!(
        "isolation-lab replicas --replicas {count} --slots {slots} --held {} --global {}",
        inputs.held, inputs.global
    );
    if inputs.global.is_global() {
        let _ = write!(out, " --lease-ms {}", inputs.lease_ms);
        if !inputs.fencing.on() {
            out.push_str(" --fencing off");
        }
    }
    out.push('\n');
    // A run that failed before any replica started never used the engine it named.
    let started = !report.evidence.replicas.is_empty();
    let about = match &report.evidence.engine {
        Some(engine) if !started => format!(
            "{count} replica servers, each its own process. Every permit was to come from one \
             Redis-backed semaphore of {slots} ({}); no replica started.",
            engine.address
        ),
        Some(engine) => {
            let whose = if engine.started_by_the_run {
                "a private redis-server this run started and stopped"
            } else {
                "the given Redis"
            };
            let lease = match inputs.lease_ms.get() {
                0 => "without a lease: a dead holder's permit is never given back".to_owned(),
                ms => format!(
                    "with a {ms} ms lease, renewed every {} ms while held",
                    ms / 3
                ),
            };
            format!(
                "{count} replica servers, each its own process. Every permit comes from ONE \
                 Redis-backed semaphore of {slots}: a sorted set of holders in {whose} ({}, \
                 keys isolation-lab:{{{}}}:*), each holder {lease}.",
                engine.address, engine.run
            )
        }
        None if inputs.global.is_global() => format!(
            "{count} replica servers, each its own process. Every permit was to come from one \
             Redis-backed semaphore of {slots}."
        ),
        None => format!(
            "{count} replica servers, each its own process with its OWN semaphore of {slots} \
             permits. Can they enforce one global limit of {slots}?"
        ),
    };
    out.push_str(&wrap(&about, ""));
    out.push('\n');
    out.push_str(&requests(report));
    out.push('\n');
    for line in verdict(report).lines() {
        out.push_str(&wrap(line, ""));
    }
    // Without global permits the headline above is the over-admission, and the lesson.
    let global = report.inputs.global.is_global();
    for over in report.over_admitted.iter().filter(|_| global) {
        out.push_str(&wrap(&format!("{}.", capitalized(&over.sentence())), "  "));
    }
    if report.evidence.pause.is_some() || report.evidence.crash.is_some() {
        out.push('\n');
        out.push_str(&leases(report));
    }
    if report.matches_model {
        for skipped in &report.prediction.skipped {
            out.push_str(&wrap(&format!("Not run: {skipped}."), "  "));
        }
    }
    out.push('\n');
    out.push_str(&ledgers(report));
    if let Some(dependency) = &report.dependency {
        out.push_str(&wrap(
            &format!(
                "\nThe dependency (the newest token per permit slot in a Redis hash, guarded by \
                 a Lua script; --fencing {}): {} effects accepted, {} refused; at most {} \
                 stood at once, for a limit of {}.",
                report.inputs.fencing,
                dependency.accepted,
                dependency.refused.len(),
                match dependency.standing_at_most {
                    1 => "1 holder's writes".to_owned(),
                    n => format!("{n} holders' writes"),
                },
                report.inputs.slots.get()
            ),
            "",
        ));
    }
    if let Some(cleanup) = report.evidence.engine.as_ref().and_then(|e| e.cleanup) {
        out.push_str(&wrap(
            &format!(
                "\nCleanup: the run's keys deleted ({} left); {}.",
                cleanup.keys_left,
                match cleanup.holders_removed {
                    0 => "no holder still held a permit then".to_owned(),
                    1 => "1 holder still held a permit then and was removed".to_owned(),
                    n => format!("{n} holders still held a permit then and were removed"),
                }
            ),
            "",
        ));
    }
    if report.evidence.lab_continued {
        out.push_str(&wrap(
            "\nThe lab itself was continued (SIGCONT) during the run, as after a stop (Ctrl-Z, \
             then fg): the replicas, Redis and the leases went on meanwhile, and the times above \
             may count the stop.",
            "",
        ));
    }
    out.push('\n');
    match &report.failure {
        // What failed first; the differences after it mostly say that later steps never ran.
        Some(reason) => out.push_str(&wrap(&format!("FAILED: {reason}"), "  ")),
        None if report.mismatches.is_empty() => {
            out.push_str("Every observation matched the replicas model.\n");
        }
        None => {
            for mismatch in &report.mismatches {
                out.push_str(&wrap(&format!("Differs from the model: {mismatch}"), "  "));
            }
        }
    }
    out
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `text` wrapped at 100 columns, later lines indented by `indent`; a leading newline and a
/// leading indent kept.
fn wrap(text: &str, indent: &str) -> String {
    let (newline, text) = match text.strip_prefix('\n') {
        Some(rest) => ("\n", rest),
        None => ("", text),
    };
    let words = text.trim_start_matches(' ');
    let lead = &text[..text.len() - words.len()];
    let lines = table::wrap(words, lead, indent, 100);
    format!("{newline}{}", if lines.is_empty() { "\n" } else { &lines })
}

/// A request's cell, in the column of the replica it was sent to.
fn outcome(sent: &Sent) -> &'static str {
    match sent.decision {
        Decision::Admitted => "held",
        Decision::Refused => "503",
    }
}

/// The holders that refused a request. They are a set, named in one order, by replica and then
/// by request: Redis lists them by lease expiry, and a renewal between two admissions reorders
/// them, so the same run would otherwise read differently from one time to the next (the report
/// keeps Redis's order).
fn refusal_holders(sent: &Sent) -> String {
    in_order(&sent.held_by)
}

/// Holders' names by replica and request, whichever order Redis listed them in, so that the
/// same run reads the same.
fn in_order(holders: &[String]) -> String {
    let mut holders: Vec<&str> = holders.iter().map(String::as_str).collect();
    holders.sort_by_cached_key(|&holder| (parse_holder(holder), holder));
    holders.join(" ")
}

/// A table's row: `first`, then one cell per replica.
fn row<T>(
    first: impl ToString,
    each: impl IntoIterator<Item = T>,
    cell: impl Fn(T) -> String,
) -> Vec<String> {
    table::row(first.to_string(), each.into_iter().map(cell))
}

/// One row per request, one column per replica, and the holders a refusal names in a column of
/// their own (when one names any): at 4 replicas of 4 slots the table is under 100 columns.
fn requests(report: &ReplicasReport) -> String {
    let ids: Vec<ReplicaId> = ReplicaId::all(report.inputs.replicas).collect();
    let sent = &report.evidence.sent;
    let named = sent.iter().any(|s| !s.held_by.is_empty());
    let mut header = row("sent round robin", &ids, ReplicaId::to_string);
    header.extend(named.then(|| "503, held by".to_owned()));
    let mut rows = vec![header];
    for sent in sent {
        let cell = |&id: &ReplicaId| match id == sent.replica {
            true => outcome(sent).to_owned(),
            false => String::new(),
        };
        let mut line = row(sent.request, &ids, cell);
        line.extend(named.then(|| refusal_holders(sent)));
        rows.push(line);
    }
    // Read once every request is decided: a run cut short never read it.
    if cut_short(report) {
        let first = rows.iter().map(|r| r[0].chars().count()).max().unwrap_or(0);
        let never = format!("{:first$}  - (not all decided)\n", "held at once");
        return columns(&rows) + &never;
    }
    let held = &report.evidence.held_at_once;
    rows.push(row("held at once", &ids, |id| {
        labels(held.get(id).into_iter().flatten())
    }));
    columns(&rows)
}

/// Whether the run stopped before every request was decided.
fn cut_short(report: &ReplicasReport) -> bool {
    report.evidence.sent.len() < report.prediction.requests.len()
}

/// What the requests show about the limit, in words: held at once against the limit, for
/// whatever count the run held.
fn verdict(report: &ReplicasReport) -> String {
    let slots = report.inputs.slots.get();
    let count = report.inputs.replicas.get();
    if cut_short(report) {
        return "The requests were not all decided: the run stopped early (below).\n".into();
    }
    let held = report.evidence.held_in_all();
    let word = number_word(slots);
    let refused: Vec<&Sent> = report
        .evidence
        .sent
        .iter()
        .filter(|s| s.decision == Decision::Refused)
        .collect();
    let held_at_once = format!(
        "{} held at once across {count} replicas",
        plural_was(held, "request")
    );
    if !report.inputs.global.is_global() {
        let mut out = if held > slots {
            format!("{held_at_once}: the global {word}-permit limit is exceeded.\n")
        } else {
            format!(
                "{held_at_once}: within {slots}, only because too few were sent (each replica \
                 would take {slots}).\n"
            )
        };
        if report.matches_model {
            let _ = write!(
                out,
                "Each replica had its own {}, up to {count} x {slots} = {} in all; nothing made \
                 them one limit.\nFor one limit across replicas the permits must come from a \
                 shared engine: try --global local.\n",
                plural(slots, "permit"),
                count * slots
            );
        }
        return out;
    }
    let mut out = match held.cmp(&slots) {
        Ordering::Greater => format!(
            "{held_at_once}: MORE than the global {word}-permit limit.\nThe limit did not hold: \
             see the over-admission below.\n"
        ),
        Ordering::Equal => format!("{held_at_once}: the global {word}-permit limit holds.\n"),
        Ordering::Less => {
            let free = match slots - held {
                1 => "a permit stayed free".to_owned(),
                n => format!("{n} permits stayed free"),
            };
            format!("{held_at_once}: under the global {word}-permit limit; {free}.\n")
        }
    };
    if !refused.is_empty() && held <= slots {
        let named = refused.iter().all(|s| !s.held_by.is_empty());
        let _ = writeln!(
            out,
            "The other {} {} refused at once (503, no queue){}.",
            refused.len(),
            if refused.len() == 1 { "was" } else { "were" },
            match (named, refused.len()) {
                (false, _) => "",
                (true, 1) => ", naming the holders across replicas",
                (true, _) => ", each naming the holders across replicas",
            }
        );
    }
    if let Some(engine) = &report.evidence.engine {
        let _ = writeln!(
            out,
            "Redis's holders then: {}",
            holders(&engine.holders_after_requests)
        );
    }
    out
}

fn number_word(n: usize) -> String {
    match n {
        2 => "two".into(),
        3 => "three".into(),
        4 => "four".into(),
        n => n.to_string(),
    }
}

/// Holders with the lease each had left, by replica and request as [`in_order`] puts them.
fn holders(holders: &[EngineHolder]) -> String {
    let mut holders: Vec<&EngineHolder> = holders.iter().collect();
    holders.sort_by_cached_key(|h| (parse_holder(&h.holder), h.holder.as_str()));
    let named = holders.into_iter().map(|h| match h.lease_left_ms {
        Some(ms) => format!("{} ({ms} ms of lease left)", h.holder),
        None => format!("{} (no lease)", h.holder),
    });
    joined(named, ", ")
}

/// The pause and the crash: each window next to the lease, then what it means.
fn leases(report: &ReplicasReport) -> String {
    let lease_ms = report.inputs.lease_ms.get();
    let lease_cell = if lease_ms == 0 {
        "none".to_owned()
    } else {
        format!("{lease_ms} ms")
    };
    let heads = [
        "lease",
        "left at the signal",
        "window",
        "probes refused",
        "then",
    ];
    let mut rows = vec![row("", heads, str::to_owned)];
    let mut notes = String::new();
    if let Some(pause) = &report.evidence.pause {
        let paused = pause.replica.map_or("?".into(), |r| r.to_string());
        let probed = pause.probed.map_or("?".into(), |r| r.to_string());
        let admitted: Vec<String> = pause
            .probes
            .iter()
            .filter(|p| p.decision == Decision::Admitted)
            .map(|p| p.request.to_string())
            .collect();
        let then = match (pause.ended, admitted.is_empty()) {
            (false, _) => "cut short: nothing more seen".to_owned(),
            (true, true) => "no probe admitted".to_owned(),
            (true, false) => format!("{} admitted on {probed}", admitted.join(" ")),
        };
        rows.push(vec![
            format!("pause {paused} (SIGSTOP)"),
            lease_cell.clone(),
            left(&pause.holders),
            window(pause.admitted_after_ms),
            match pause.ended {
                true => until_admitted(&pause.probes).0.len().to_string(),
                false => "?".to_owned(),
            },
            then,
        ]);
        let in_sections: usize = pause.in_sections.values().map(Vec::len).sum();
        let inside: Vec<String> = pause
            .in_sections
            .iter()
            .map(|(id, held)| {
                let mark = if Some(*id) == pause.replica {
                    " (paused)"
                } else {
                    ""
                };
                format!("{id}{mark} {}", labels(held))
            })
            .collect();
        let limit = report.inputs.slots.get();
        let over = if in_sections > limit {
            format!(": OVER-ADMISSION by {}", in_sections - limit)
        } else {
            String::new()
        };
        let engine = in_order(pause.engine_holders.as_deref().unwrap_or_default());
        let lesson = report.matches_model;
        let mut note = format!(
            "Pause: {paused} was stopped (SIGSTOP) holding {}.",
            holders(&pause.holders)
        );
        if !pause.ended {
            let _ = write!(
                note,
                " The run was cut short while it probed {probed}: what the probes met is not \
                 recorded."
            );
        } else if admitted.is_empty() {
            // Another process may have continued it: then not while it was stopped.
            let continued = (report.evidence.replicas.iter())
                .filter(|r| Some(r.id) == pause.replica)
                .any(|r| r.signals.iter().any(|s| s == CONTINUED_FROM_OUTSIDE));
            let until = match continued {
                true => format!("before {paused} was found running again"),
                false => "while it was stopped".to_owned(),
            };
            let _ = write!(note, " No probe to {probed} was admitted {until}.");
        } else {
            let _ = write!(
                note,
                " Then {} admitted on {probed} while {paused}'s work still ran: inside work \
                 sections {} = {in_sections}, the limit is {limit}{over}.",
                admitted.join(" ") + if admitted.len() == 1 { " was" } else { " were" },
                inside.join(", "),
            );
        }
        if pause.resumed {
            let _ = write!(note, " Redis's holders then: {engine}.");
            if lesson {
                let permits = match pause.holders.len() {
                    1 => "its permit",
                    _ => "its permits",
                };
                let _ = write!(note, " {paused} still believed it held {permits}.");
            }
        }
        notes.push_str(&wrap(&note, "  "));
        if lesson
            && let Some(replica) = pause
                .replica
                .and_then(|id| report.evidence.replicas.iter().find(|r| r.id == id))
            && let Some(permits) = &replica.permits
            && !permits.lapsed.is_empty()
        {
            notes.push_str(&wrap(
                &format!(
                    "  Continued (SIGCONT), its work for {} finished at release, and found {} \
                     already gone when it gave {} back.",
                    labels(&permits.lapsed),
                    if permits.lapsed.len() == 1 {
                        "its permit"
                    } else {
                        "its permits"
                    },
                    if permits.lapsed.len() == 1 {
                        "it"
                    } else {
                        "them"
                    },
                ),
                "  ",
            ));
        }
        let effects = report.evidence.engine.as_ref();
        let effects = effects
            .and_then(|e| e.effects.as_deref())
            .unwrap_or_default();
        let late: Vec<&Effect> = pause
            .holders
            .iter()
            .filter_map(|h| end_effect(effects, &h.holder))
            .collect();
        for effect in &late {
            notes.push_str(&wrap(
                &format!("  {}.", capitalized(&late_effect(effect))),
                "  ",
            ));
        }
        if lesson && !late.is_empty() {
            let lesson = if report.inputs.fencing.on() {
                "  A lease cannot tell a paused holder from a dead one, and the holder cannot \
                 know it was paused. Fencing tokens can: every admission took a token from one \
                 counter in Redis that only grows, each write carries it, and the dependency \
                 refuses a token older than the newest it accepted for that permit slot. The \
                 protected resource, not the lock service, stopped each stale write."
            } else {
                "  With --fencing off the dependency trusted the lease alone and accepted each \
                 stale write beside the newer holder's: the over-admission reached the \
                 resource. Run it without --fencing off to see the dependency refuse it."
            };
            notes.push_str(&wrap(lesson, "  "));
        }
    }
    if let Some(crash) = &report.evidence.crash {
        let killed = crash.replica.map_or("?".into(), |r| r.to_string());
        let probed = crash.probed.map_or("?".into(), |r| r.to_string());
        let (refused, admitted) = until_admitted(&crash.probes);
        // The killed replica's end is recorded last, after the probes: a run cut short (by a
        // signal, say) before it has probes it never recorded.
        let cut_short = crash.exit.is_empty();
        let (window_cell, then) = match (admitted, crash.watched_ms) {
            (Some(p), _) => (
                window(crash.window_ms),
                format!("{} admitted on {probed}", p.request),
            ),
            (None, Some(watched)) => (
                format!("> {watched:.0} ms"),
                "still refused: leaked".to_owned(),
            ),
            (None, None) if cut_short => {
                ("-".to_owned(), "cut short: nothing more seen".to_owned())
            }
            (None, None) => ("-".to_owned(), "no probe admitted".to_owned()),
        };
        rows.push(vec![
            format!("crash {killed} (SIGKILL)"),
            lease_cell,
            left(&crash.dead_holders),
            window_cell,
            match cut_short && admitted.is_none() {
                true => "?".to_owned(),
                false => refused.len().to_string(),
            },
            then,
        ]);
        let meaning = if cut_short {
            format!(
                "The run was cut short while it probed {probed}: what the probes met is not \
                 recorded."
            )
        } else if !report.matches_model {
            String::new()
        } else if lease_ms > 0 {
            let apart = last_apart_ms(&crash.probes).map_or(String::new(), |ms| {
                format!(
                    ", plus up to the time from the last probe refused to the one admitted \
                     ({ms:.0} ms here)"
                )
            });
            format!(
                "Every probe was refused, naming a dead holder, until its lease lapsed: the \
                 window is about the lease it had left (at most the lease){apart}."
            )
        } else {
            "Without a lease a dead holder's permit never comes back: it leaked for the rest of \
             the run, until the run's cleanup deleted its keys."
                .to_owned()
        };
        let exit = match crash.exit.as_str() {
            "" => "sent SIGKILL",
            exit => exit,
        };
        notes.push_str(&wrap(
            &format!(
                "Crash: {killed} was {exit} holding {}. {meaning}",
                holders(&crash.dead_holders)
            ),
            "  ",
        ));
    }
    let mut out = columns(&rows);
    out.push_str(
        "(left at the signal: the paused or dead holders' lease, by Redis's clock; window: from \
         the signal\n to the first admitted probe; probes refused: those before it)\n\n",
    );
    out.push_str(&notes);
    if lease_ms > 0 && report.matches_model {
        out.push_str(&wrap(
            "A lease trades a leak for a possible double admission: a dead holder's permit comes \
             back, but so does a paused holder's, while its work still runs.",
            "",
        ));
    }
    out
}

/// The least lease left among `holders`: when the first of their permits lapses.
fn left(holders: &[EngineHolder]) -> String {
    match holders.iter().filter_map(|h| h.lease_left_ms).min() {
        Some(ms) => format!("{ms} ms"),
        None if holders.is_empty() => "-".into(),
        None => "never lapses".into(),
    }
}

/// The time from the last refused probe's answer to the first admitted one's: the lease
/// lapsed in between. Not the probes' pace: one answer may come late (a silent Redis, say).
/// `None` without both.
fn last_apart_ms(probes: &[Sent]) -> Option<f64> {
    let (refused, admitted) = until_admitted(probes);
    Some(admitted?.at_ms? - refused.last()?.at_ms?)
}

fn window(ms: Option<f64>) -> String {
    ms.map_or("-".into(), |ms| format!("{ms:.0} ms"))
}

/// Each replica's own ledger, side by side (under 100 columns for 4 replicas), then how each
/// replica's process ended.
fn ledgers(report: &ReplicasReport) -> String {
    let replicas: BTreeMap<ReplicaId, &ReplicaEvidence> =
        report.evidence.replicas.iter().map(|r| (r.id, r)).collect();
    if replicas.is_empty() {
        return "No replica started.\n".into();
    }
    let mut rows = vec![row(
        "each replica's own ledger",
        replicas.keys(),
        ReplicaId::to_string,
    )];
    type Cell = fn(&ReplicaEvidence) -> String;
    let cells: [(&str, Cell); 6] = [
        ("admitted / refused", |r| {
            account_cell(r, |l| format!("{} / {}", l.admitted, l.refused))
        }),
        ("finished (cancelled)", |r| {
            account_cell(r, |l| format!("{} ({})", l.finished, l.cancelled))
        }),
        ("peak permits taken", |r| {
            account_cell(r, |l| l.peak.to_string())
        }),
        ("invariants", |r| {
            account_cell(r, |l| match l.broken().count() {
                0 => "all hold".into(),
                n => format!("{n} BROKEN"),
            })
        }),
        ("permits lapsed", |r| {
            r.permits.as_ref().map_or("-".into(), |p| labels(&p.lapsed))
        }),
        ("signals", |r| {
            let names = r.signals.iter().map(|s| s.split(':').next().unwrap_or(s));
            joined(names, ", ")
        }),
    ];
    for (heading, cell) in cells {
        if heading == "permits lapsed" && !report.inputs.global.is_global() {
            continue;
        }
        rows.push(row(heading, replicas.values(), |r| cell(r)));
    }
    let mut out = columns(&rows);
    let processes = replicas.values().map(|r| {
        let exit = r.exit.as_deref().unwrap_or("no exit recorded");
        format!("{} (pid {}): {exit}", r.id, r.pid)
    });
    out.push_str(&wrap(
        &format!("Processes: {}.", joined(processes, "; ")),
        "  ",
    ));
    if matches!(report.inputs.global, Engine::Off) {
        out.push_str(together(report));
    }
    out
}

/// What own permits' ledgers say together, when every replica reported one and each one's
/// invariants hold: that each balances and, if the requests held at once across them are more
/// than one replica's permits, that together they admitted more than any one allows.
fn together(report: &ReplicasReport) -> &'static str {
    let balances = |r: &ReplicaEvidence| {
        let ledger = r.ledger.as_ref();
        ledger.is_some_and(|l| l.values().all(|pool| pool.broken().next().is_none()))
    };
    if !report.evidence.replicas.iter().all(balances) {
        return "";
    }
    let held = report.evidence.held_in_all();
    if held > report.inputs.slots.get() {
        "Each ledger balances on its own; together they admitted more than any one allows.\n"
    } else {
        "Each ledger balances on its own.\n"
    }
}

/// A cell of a replica's own account; for a replica that sent none, why, in 13 characters at
/// most, so that 4 replicas' ledgers fit 100 columns.
fn account_cell(
    replica: &ReplicaEvidence,
    cell: fn(&crate::admission::audit::PoolLedger) -> String,
) -> String {
    match &replica.ledger {
        Some(ledger) => ledger.values().map(cell).collect::<Vec<_>>().join(" "),
        None if replica.signals.iter().any(|s| s.starts_with("SIGKILL")) => "- (killed)".into(),
        None => "- (no report)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{holders, refusal_holders, wrap};
    use crate::evidence::Decision;
    use crate::label::Label;
    use crate::replicas::evidence::{EngineHolder, Sent};
    use crate::replicas::inputs::ReplicaId;

    /// A refusal names its holders in one order, whichever order Redis listed them in.
    #[test]
    fn a_refusals_holders_read_the_same_in_any_order() {
        let refused = |held_by: [&str; 2]| Sent {
            request: Label::Slow(3),
            replica: ReplicaId(1),
            decision: Decision::Refused,
            held_by: held_by.map(String::from).to_vec(),
            at_ms: None,
        };
        let cells = [["r1/S1", "r2/S2"], ["r2/S2", "r1/S1"]].map(|h| refusal_holders(&refused(h)));
        assert_eq!(cells, ["r1/S1 r2/S2"; 2]);
        let cells =
            [["r1/S9", "r1/S10"], ["r1/S10", "r1/S9"]].map(|h| refusal_holders(&refused(h)));
        assert_eq!(cells, ["r1/S9 r1/S10"; 2], "by request, not by text");
    }

    /// Holders with their leases read in the same order too, not in Redis's order by expiry.
    #[test]
    fn holders_with_leases_read_the_same_in_any_order() {
        let holder = |holder: &str, ms| EngineHolder {
            holder: holder.into(),
            lease_left_ms: Some(ms),
        };
        let listed = [
            [holder("r1/S29", 367), holder("r1/S1", 378)],
            [holder("r1/S1", 378), holder("r1/S29", 367)],
        ]
        .map(|h| holders(&h));
        let said = "r1/S1 (378 ms of lease left), r1/S29 (367 ms of lease left)";
        assert_eq!(listed, [said; 2]);
    }

    /// Notes wrap at 100 columns; a leading indent stays, later lines take the given one.
    #[test]
    fn notes_wrap_within_100_columns() {
        let text = format!("  {}", "word ".repeat(60));
        let wrapped = wrap(&text, "    ");
        let lines: Vec<&str> = wrapped.lines().collect();
        assert!(lines.len() == 4, "{wrapped}");
        assert!(
            lines
                .iter()
                .all(|l| l.chars().count() <= 100 && !l.ends_with(' '))
        );
        assert!(lines[0].starts_with("  word") && lines[1].starts_with("    word"));
        assert_eq!(wrap("\nshort", ""), "\nshort\n");
    }
}
