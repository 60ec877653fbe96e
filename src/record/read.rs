//! Reading a saved report: a regular file only, at most [`MAX_REPORT`] bytes, parsed as a lab
//! report or as a classroom session's report. What no run of the lab could have written in this
//! shape (a field missing, a field no run writes, an input out of range, a policy listed twice, a
//! count of permits beyond its pool) is refused here, with exit status 2; what is shaped right but
//! contradicts itself is for [`super::check`] to name.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use serde::Deserialize;

use super::shell::shell_word;
use crate::draw::table::{plural, thousands};
use crate::label::Label;
use crate::policy::{Front, Mode, Pool, Route};
use crate::report::Report;

/// The `lab` field of every report this lab writes.
const LAB: &str = "concurrency-isolation";

/// The most threads a Linux process can have: each takes a process id, and `pid_max` is at
/// most 2^22 on any machine (`PID_MAX_LIMIT`).
const MOST_THREADS: usize = 1 << 22;

/// The most a saved report may hold. A lab report is tens of kilobytes; the cap keeps a file
/// that grows while it is read from being read into memory until the process runs out.
const MAX_REPORT: u64 = 16 << 20;

/// A saved report the record cannot be made from: the file could not be read, or it is not a
/// report a run of the lab writes. The command line refuses it with exit status 2, as it
/// refuses a bad flag.
#[derive(Debug)]
pub struct Refused {
    /// The file as it was named, as a word the shell reads back as the same file.
    pub file: String,
    /// What was wrong with it, after the file's name: "cannot be read: …", "is not JSON: …".
    pub reason: anyhow::Error,
}

impl fmt::Display for Refused {
    /// The reason may quote the file's text (a value the parser did not expect): whoever shows
    /// it on a terminal writes it as one line (`draw::terminal::one_line`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:#}; record reads a report saved from a run, e.g. isolation-lab > r.json",
            self.file, self.reason
        )
    }
}

impl std::error::Error for Refused {}

/// What a saved file holds.
#[derive(Debug)]
pub enum Saved {
    /// The report of one command-line run: `isolation-lab > r.json`.
    Lab(Report),
    /// The report a classroom session prints when it ends: `isolation-lab classroom > s.json`.
    Classroom(SavedSession),
}

/// A classroom session's report, as far as `record` reads it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedSession {
    /// Every run of the session, each a lab report.
    pub runs: Vec<Report>,
    /// The room's requests, outside every run's model.
    pub room_requests: Vec<SavedRoomRequest>,
    /// The gates the instructor closed for the room after a run's own gate had opened.
    pub room_gates: Vec<SavedRoomGate>,
    /// Event streams the session dropped: read only so that a value that is not a count is
    /// refused.
    pub event_streams_dropped: u64,
    /// Connections the session refused: read only so that a value that is not a count is
    /// refused.
    pub connections_refused: u64,
    /// The session's own verdict: compared with the re-check, never taken as true.
    pub matches_model: bool,
    /// Why the session did not close cleanly.
    #[serde(default, deserialize_with = "not_null")]
    pub failure: Option<String>,
}

/// One request from the room, as the classroom report lists it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedRoomRequest {
    /// `R<n>` (read with the route below).
    pub request: Label,
    /// Where it was sent.
    pub route: Route,
    /// The run it reached, as an index into `runs` (the report counts runs from 1, as the page
    /// does).
    #[serde(deserialize_with = "counted_from_one")]
    pub run: usize,
    /// The policy of that run it reached.
    pub mode: Mode,
    /// The status the run's front answered, if an answer came.
    #[serde(default, deserialize_with = "not_null")]
    pub status: Option<u16>,
    /// The front's JSON body.
    #[serde(default, deserialize_with = "not_null")]
    pub body: Option<serde_json::Value>,
    /// Why no answer came.
    #[serde(default, deserialize_with = "not_null")]
    pub error: Option<String>,
    /// The last work event of the run's ledger when the answer came.
    pub after_event: u64,
}

/// A run number counted from 1, read as an index from 0; 0 is no run's number.
fn counted_from_one<'de, D: serde::Deserializer<'de>>(numbers: D) -> Result<usize, D::Error> {
    let number = usize::deserialize(numbers)?;
    number
        .checked_sub(1)
        .ok_or_else(|| serde::de::Error::custom("runs are counted from 1"))
}

/// A room gate, as the classroom report lists it: where it closed and opened on a run's ledger.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedRoomGate {
    /// The run, as an index into `runs` (counted from 1 in the report).
    #[serde(deserialize_with = "counted_from_one")]
    pub run: usize,
    /// Its policy.
    pub mode: Mode,
    /// 1 for the first room gate of its run's policy, then 2, 3, …
    pub generation: u32,
    /// The last work event before the gate closed.
    pub closed_after_event: u64,
    /// The last work event before it opened; `None` (written as `null`) if it never did.
    #[serde(deserialize_with = "Option::deserialize")]
    pub opened_after_event: Option<u64>,
}

/// A field the lab writes only when it has a value: present, it is not `null`.
fn not_null<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    field: D,
) -> Result<Option<T>, D::Error> {
    match Option::<T>::deserialize(field)? {
        Some(value) => Ok(Some(value)),
        None => Err(serde::de::Error::custom(
            "null, where the lab leaves out a field it has no value for",
        )),
    }
}

/// Reads the report saved in `path`: a lab report or a classroom session's report, of a run
/// that succeeded or failed.
pub fn load(path: &Path) -> Result<Saved, Refused> {
    let refuse = |reason: anyhow::Error| Refused {
        file: shell_word(path.as_os_str()),
        reason,
    };
    let text = read_regular(path).map_err(refuse)?;
    let json: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
        // The lab's other formats, saved by mistake, are named for what they are.
        let start = String::from_utf8_lossy(&text[..text.len().min(64)]).into_owned();
        let start = start.trim_start();
        if start.starts_with("isolation-lab ") {
            refuse(anyhow!(
                "is a text report, not the JSON one: save a run without --format"
            ))
        } else if start.starts_with("<?xml") || start.starts_with("<svg") {
            refuse(anyhow!(
                "is a picture, not the JSON report: save a run without --format"
            ))
        } else {
            refuse(anyhow::Error::new(e).context("is not JSON"))
        }
    })?;
    serde_json::from_slice::<OneKeyEach>(&text)
        .context("is not what the lab writes")
        .map_err(refuse)?;
    // Checked before the whole report, so that other JSON (`predict --format json`, say) is
    // named for what it lacks rather than for the first field serde trips on.
    let classroom = json.get("lab").is_none()
        && json.get("runs").is_some_and(|r| r.is_array())
        && json.get("room_requests").is_some();
    if classroom {
        let whole = "is not a whole classroom report";
        let session = SavedSession::deserialize(&json)
            .context(whole)
            .map_err(refuse)?;
        for (i, run) in session.runs.iter().enumerate() {
            let at = format!("/runs/{i}");
            as_written(run, &json["runs"][i], &at)
                .and_then(|()| shaped(run, &at))
                .with_context(|| format!("{whole}: runs[{i}]"))
                .map_err(refuse)?;
        }
        let most = crate::classroom::ROOM_REQUESTS;
        if session.room_requests.len() > most as usize {
            return Err(refuse(anyhow!(
                "{whole}: room_requests lists {} requests, but a session answers at most {} \
                 (the rest are refused 429 and not listed)",
                thousands(session.room_requests.len() as u64),
                thousands(u64::from(most))
            )));
        }
        // Each room request is one of the room's, and each request and gate names a run the
        // session has.
        let runs = session.runs.len();
        let requests = (session.room_requests.iter().enumerate())
            .map(|(i, r)| ("room_requests", i, r.run, Some(r.request)));
        let gates =
            (session.room_gates.iter().enumerate()).map(|(i, g)| ("room_gates", i, g.run, None));
        for (list, i, run, request) in requests.chain(gates) {
            let why = match request {
                Some(request) if !request.from_room() => format!("is labelled {request}, not R<n>"),
                _ if run >= runs => {
                    let runs = plural(runs, "run");
                    format!("names run {}, but the session has {runs}", run + 1)
                }
                _ => continue,
            };
            return Err(refuse(anyhow!("{whole}: {list}[{i}] {why}")));
        }
        return Ok(Saved::Classroom(session));
    }
    this_lab(json.get("lab")).map_err(refuse)?;
    let whole = "is not a whole lab report";
    let report = Report::deserialize(&json).context(whole).map_err(refuse)?;
    as_written(&report, &json, "")
        .and_then(|()| shaped(&report, ""))
        .context(whole)
        .map_err(refuse)?;
    Ok(Saved::Lab(report))
}

/// Whether `json`, read as `report`, is what this version writes for that report, field for
/// field: none missing (every field a run writes, even as `null`), none of another type that
/// reads as the same value (`"2"` for `2`, `2.0` for `2`). `at` is where the report is in its
/// file.
fn as_written(report: &Report, json: &serde_json::Value, at: &str) -> anyhow::Result<()> {
    let written = report.to_json().context("cannot be written again")?;
    let written: serde_json::Value =
        serde_json::from_str(&written).context("cannot be read again")?;
    let Some((pointer, read, wrote)) = first_difference(json, &written, at.to_owned()) else {
        return Ok(());
    };
    match (read, wrote) {
        (None, _) => bail!("has no {pointer}, which every run writes"),
        (Some(read), Some(wrote)) => {
            bail!("has {pointer} as {read}, where a run writes {wrote} for the same value")
        }
        // Mostly refused already, while the report is read (`deny_unknown_fields`).
        (Some(read), None) => bail!("has {pointer} as {read}, a field no run writes"),
    }
}

/// The first place, in document order, where `read` and `wrote` differ: its JSON Pointer
/// (under `at`) and the value in each (`None`: absent there).
fn first_difference<'a>(
    read: &'a serde_json::Value,
    wrote: &'a serde_json::Value,
    at: String,
) -> Option<(
    String,
    Option<&'a serde_json::Value>,
    Option<&'a serde_json::Value>,
)> {
    use serde_json::Value;
    match (read, wrote) {
        (Value::Object(read), Value::Object(wrote)) => {
            let keys: std::collections::BTreeSet<&String> =
                read.keys().chain(wrote.keys()).collect();
            keys.into_iter().find_map(|key| {
                let here = format!("{at}{}", super::pointer(&[key]));
                match (read.get(key), wrote.get(key)) {
                    (Some(r), Some(w)) => first_difference(r, w, here),
                    (r, w) => Some((here, r, w)),
                }
            })
        }
        (Value::Array(read), Value::Array(wrote)) if read.len() == wrote.len() => (read.iter())
            .zip(wrote)
            .enumerate()
            .find_map(|(i, (r, w))| first_difference(r, w, format!("{at}/{i}"))),
        _ if read == wrote => None,
        _ => Some((at, Some(read), Some(wrote))),
    }
}

/// Whether `report` has the shape a run of its inputs gives it: its `lab`, and its policies in
/// the order its mode runs them, each once (a run that stopped early has fewer), each count
/// within its pool. `at` is where the report is in its file (`/runs/0` in a session's).
fn shaped(report: &Report, at: &str) -> anyhow::Result<()> {
    this_lab(Some(&report.lab.as_str().into()))?;
    // Each version writes its own evidence and words; this one can re-check only its own.
    let (name, version) = (&report.runner.name, &report.runner.version);
    let this = (env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));
    if (name.as_str(), version.as_str()) != this {
        bail!(
            "was written by {name} {version:?}, and this is {} {}, which re-checks only the \
             reports its own version writes: read it with the version that wrote it",
            this.0,
            this.1
        );
    }
    // The command line refuses a runtime's shape for the threaded front, which has none.
    let (front, executor) = (report.runner.front, report.executor);
    let shaped = executor.workers.is_none() && executor.blocking_threads == Default::default();
    if front == Front::Threaded && !(executor.work.runs_on(front) && shaped) {
        bail!(
            "runs the threaded front with{}, which the command line refuses: the threaded front \
             has no runtime to shape",
            executor.flags()
        );
    }
    if executor.blocking_threads != Default::default() && !executor.work.uses_blocking_pool() {
        bail!(
            "runs{}, which the command line refuses: --blocking-threads sizes the blocking pool \
             only --work spawn-blocking uses",
            executor.flags()
        );
    }
    let modes = report.inputs.mode.modes();
    for (i, policy) in report.policies.iter().enumerate() {
        let name = policy.mode.name();
        if report.policies[..i].iter().any(|p| p.mode == policy.mode) {
            bail!("lists the {name} policy twice");
        }
        if modes.get(i) != Some(&policy.mode) {
            let runs: Vec<&str> = modes.iter().map(|m| m.name()).collect();
            bail!(
                "has the {name} policy as policies[{i}], but --mode {} runs {}, in that order",
                report.inputs.mode.name(),
                runs.join(" then ")
            );
        }
        within_capacity(report, i, at)?;
    }
    Ok(())
}

/// Whether every count of permits in `policies[i]` (taken, free, at the peak, held at the gate)
/// fits in its pool: no run counts more than a pool holds. A count for a pool the policy does
/// not have is left to the check, which names it.
fn within_capacity(report: &Report, i: usize, report_at: &str) -> anyhow::Result<()> {
    let file = &report.policies[i];
    let policy = report.inputs.policy(file.mode);
    let slow = policy.pool_for(Route::Slow);
    let fits = |at: &str, pool: Pool, count: usize| {
        let capacity = policy.capacity(pool);
        if policy.pools().contains(&pool) && count > capacity {
            bail!(
                "{report_at}/policies/{i}/{at} counts {count}, beyond the {pool} pool's {}: no \
                 run counts more than a pool holds",
                plural(capacity, "permit")
            );
        }
        Ok(())
    };
    let each_fits = |at: &str, counts: &BTreeMap<Pool, usize>| {
        (counts.iter()).try_for_each(|(&pool, &n)| fits(&format!("{at}/{pool}"), pool, n))
    };
    let state = &file.final_state;
    each_fits("peak_active_work", &file.peak_active_work)?;
    each_fits("final_state/active_work", &state.active_work)?;
    each_fits("final_state/available_permits", &state.available_permits)?;
    let observed = &file.observed;
    let snapshots = [
        ("observer_before_fast", &observed.observer_before_fast),
        (
            "observer_after_fast_before_release",
            &observed.observer_after_fast_before_release,
        ),
    ];
    for (at, snapshot) in snapshots {
        if let Some(snapshot) = snapshot {
            each_fits(&format!("{at}/active_work"), &snapshot.active_work)?;
            fits(
                &format!("{at}/held_at_gate"),
                slow,
                snapshot.held_at_gate.len(),
            )?;
        }
    }
    for (&pool, ledger) in &file.ledger {
        fits(&format!("ledger/{pool}/peak"), pool, ledger.peak)?;
    }
    for (j, e) in file.work_events.iter().enumerate() {
        fits(
            &format!("work_events/{j}/active_after"),
            e.pool,
            e.active_after,
        )?;
    }
    for (j, a) in file.admissions.iter().enumerate() {
        fits(
            &format!("admissions/{j}/active_after"),
            a.pool,
            a.active_after,
        )?;
    }
    let resources = &file.resources;
    for (at, held) in [
        ("before_fast", resources.before_fast),
        ("after_run", resources.after_run),
    ] {
        if let Some(held) = held {
            fits(
                &format!("resources/{at}/held_at_gate"),
                slow,
                held.held_at_gate,
            )?;
            if let Some(threads) = held.os_threads.filter(|&n| n > MOST_THREADS) {
                bail!(
                    "{report_at}/policies/{i}/resources/{at}/os_threads counts {threads}, but no \
                     Linux process has more than {MOST_THREADS} threads (each takes one of at \
                     most {MOST_THREADS} process ids)"
                );
            }
        }
    }
    Ok(())
}

/// Any JSON, read only to refuse an object that has a key twice: a parser keeps one of the two
/// values and drops the other, so such a file shows a reader one thing and its record another.
struct OneKeyEach;

impl<'de> Deserialize<'de> for OneKeyEach {
    fn deserialize<D: serde::Deserializer<'de>>(json: D) -> Result<Self, D::Error> {
        json.deserialize_any(OneKeyEach)
    }
}

impl<'de> serde::de::Visitor<'de> for OneKeyEach {
    type Value = OneKeyEach;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<Self, A::Error> {
        while items.next_element::<OneKeyEach>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut keys = std::collections::BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if keys.contains(&key) {
                return Err(serde::de::Error::custom(format!(
                    "an object has the key {key:?} twice"
                )));
            }
            map.next_value::<OneKeyEach>()?;
            keys.insert(key);
        }
        Ok(self)
    }
}

/// Whether `lab`, a report's `"lab"` field, names this lab.
fn this_lab(lab: Option<&serde_json::Value>) -> anyhow::Result<()> {
    match lab {
        Some(lab) if lab == LAB => Ok(()),
        Some(lab) => bail!("is not a lab report: its \"lab\" is {lab}, not \"{LAB}\""),
        None => bail!("is not a lab report: it has no \"lab\": \"{LAB}\""),
    }
}

/// Up to [`MAX_REPORT`] bytes of the regular file at `path`, or why it cannot be read.
///
/// A FIFO, a socket or a device is refused at once, from its metadata, without being opened: an
/// open of a FIFO with no writer would block, and a device may do something on open. Between that
/// check and the open the path can be swapped for one, so the file is opened with `O_NONBLOCK`
/// (a FIFO's open returns at once; `O_NOCTTY` keeps a terminal from becoming ours) and the type
/// of what was opened is checked again on the handle itself, which no rename can change.
/// `O_NONBLOCK` changes nothing for a regular file's reads.
fn read_regular(path: &Path) -> anyhow::Result<Vec<u8>> {
    let cannot = "cannot be read";
    let too_large = || {
        anyhow!(
            "is larger than any lab report (over {} MiB)",
            MAX_REPORT >> 20
        )
    };
    let regular = |metadata: &std::fs::Metadata| match kind(metadata) {
        None if metadata.len() > MAX_REPORT => Err(too_large()),
        None => Ok(()),
        Some(kind) => Err(anyhow!(
            "is {kind}, not a report file: record reads regular files only"
        )),
    };
    regular(&std::fs::metadata(path).context(cannot)?)?;
    let file = open_nonblocking(path).context(cannot)?;
    regular(&file.metadata().context(cannot)?)?;
    let mut text = Vec::new();
    // One byte more than allowed says the file grew past the cap while it was read.
    file.take(MAX_REPORT + 1)
        .read_to_end(&mut text)
        .context(cannot)?;
    if text.len() as u64 > MAX_REPORT {
        return Err(too_large());
    }
    Ok(text)
}

/// What a file that is not a regular file is, in words; `None` for a regular file.
fn kind(metadata: &std::fs::Metadata) -> Option<&'static str> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Some("a FIFO (a named pipe)");
        }
        if kind.is_socket() {
            return Some("a socket");
        }
        if kind.is_char_device() || kind.is_block_device() {
            return Some("a device");
        }
    }
    Some("not a regular file")
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}
