//! What the figures show, in sentences computed from them: which costs grew with N on which
//! front and by how much per held request, how long holding took, where each front's ceiling
//! is, and how a front failed. Nothing here is canned: each sentence reads the report.

use super::{count, figure, held_requests, seconds, stopped_holding};
use crate::hold::{CountOutcome, Figures, FrontSeries, HoldReport, PerRequest};
use crate::policy::Front;

/// A cost per held request, and how much of it counts as growing with N.
struct Cost {
    name: &'static str,
    unit: &'static str,
    /// Per held request at or above this, the cost grew with N.
    grows_from: f64,
    per: fn(&PerRequest) -> f64,
    note: &'static str,
    /// Read machine-wide: it counts as the front's only where the front's own threads grew
    /// too (a kernel stack belongs to a thread), else it is what other processes did meanwhile.
    machine_wide: bool,
    /// Read per held request only from [`READABLE_KIB`] of change in all ([`unreadable`]).
    noisy: bool,
}

/// The change in all, in KiB, from which a noisy cost is read per held request. Holding one
/// request moved a front's resident memory by a few hundred KiB either way (-220 to +288 KiB in
/// 29 runs of `hold --counts 1`): its first requests touch code and allocator pages once. A MiB
/// is a few times that.
const READABLE_KIB: f64 = 1024.0;

/// A noisy cost's change in all at `held`, in whole KiB, where it is too small to read per held
/// request; `None` where it can be read.
pub(super) fn unreadable(per_request_kib: f64, held: u32) -> Option<f64> {
    // The figure is (now - idle) / N, whole KiB: rounded, it is that change again exactly.
    let all = (per_request_kib * f64::from(held)).round();
    (all.abs() < READABLE_KIB).then_some(all)
}

const COSTS: [Cost; 5] = [
    Cost {
        name: "OS threads",
        unit: "",
        grows_from: 0.5,
        per: |p| p.os_threads,
        note: "",
        machine_wide: false,
        noisy: false,
    },
    Cost {
        name: "Resident memory",
        unit: " KiB",
        grows_from: 1.0,
        per: |p| p.rss_kib,
        note: "",
        machine_wide: false,
        noisy: true,
    },
    Cost {
        name: "Kernel stack",
        unit: " KiB",
        grows_from: 2.0,
        per: |p| p.kernel_stack_kib,
        note: " (machine-wide, outside the process's resident memory)",
        machine_wide: true,
        noisy: false,
    },
    Cost {
        name: "Address space",
        unit: " KiB",
        grows_from: 64.0,
        per: |p| p.address_space_kib,
        note: " (reserved, mostly not resident)",
        machine_wide: false,
        noisy: false,
    },
    Cost {
        name: "Memory maps",
        unit: "",
        grows_from: 0.5,
        per: |p| p.memory_maps,
        note: "",
        machine_wide: false,
        noisy: false,
    },
];

/// The reading, a sentence per finding.
pub(super) fn sentences(report: &HoldReport) -> Vec<String> {
    let mut out = Vec::new();
    let fronts = &report.fronts;
    if let Some(held) = common_count(fronts) {
        let at: Vec<(Front, &Figures)> = fronts
            .iter()
            .filter_map(|s| Some((s.front, s.held().find(|&(n, _)| n == held)?.1)))
            .collect();
        for cost in &COSTS {
            out.push(cost_sentence(cost, held, &at));
        }
        out.push(time_sentence(held, &at));
    }
    for series in fronts {
        out.extend(reach_sentence(report, series));
    }
    out
}

/// The largest count every front that held any count held.
fn common_count(fronts: &[FrontSeries]) -> Option<u32> {
    let holding: Vec<&FrontSeries> = fronts
        .iter()
        .filter(|s| s.held().next().is_some())
        .collect();
    let first = holding.first()?;
    first
        .held()
        .map(|(n, _)| n)
        .filter(|&n| holding.iter().all(|s| s.held().any(|(m, _)| m == n)))
        .max()
}

fn cost_sentence(cost: &Cost, held: u32, at: &[(Front, &Figures)]) -> String {
    // The fronts whose change can be read, and those whose change in all was too small.
    let (mut read, mut unread) = (Vec::new(), Vec::new());
    for &(front, figures) in at {
        let per = (cost.per)(&figures.per_request);
        match unreadable(per, held).filter(|_| cost.noisy) {
            Some(all) => unread.push(format!(
                "{all:+.0}{} on the {} front",
                cost.unit,
                front.name()
            )),
            None => read.push((front, figures)),
        }
    }
    if unread.is_empty() {
        return read_sentence(cost, held, &read);
    }
    let (name, changes) = (cost.name, unread.join(" and "));
    let floor = format!("{:.0} MiB", READABLE_KIB / 1024.0);
    if read.is_empty() {
        return format!(
            "{name} changed too little at N = {} to read per held request: {changes} in all, \
             under the {floor} from which it is read.",
            count(u64::from(held))
        );
    }
    format!(
        "{} {name} changed {changes} in all, too little to read per held request (under \
         {floor}).",
        read_sentence(cost, held, &read)
    )
}

/// The sentence for the fronts whose change in `cost` is large enough to read.
fn read_sentence(cost: &Cost, held: u32, at: &[(Front, &Figures)]) -> String {
    let value = |figures: &Figures| (cost.per)(&figures.per_request);
    let amount = |figures: &Figures| format!("{}{}", signed(value(figures)), cost.unit);
    let (grew, flat): (Vec<(Front, &Figures)>, Vec<_>) =
        at.iter().copied().partition(|(_, figures)| {
            let own = !cost.machine_wide || figures.per_request.os_threads >= 0.5;
            value(figures) >= cost.grows_from && own
        });
    let list = |fronts: &[(Front, &Figures)]| {
        let parts: Vec<String> = fronts
            .iter()
            .map(|(front, figures)| format!("{} on the {} front", amount(figures), front.name()))
            .collect();
        parts.join(" and ")
    };
    // Some front below the line still shows growth, as its figure is printed.
    let a_little = |flat: &[(Front, &Figures)]| {
        (flat.iter()).any(|(_, f)| figure(value(f).max(0.0)) != figure(0.0))
    };
    let n = count(u64::from(held));
    let name = cost.name;
    let note = cost.note;
    match (grew.as_slice(), flat.as_slice()) {
        ([], flat) => {
            // "Did not grow" only where the figures show none: a small growth is named as such,
            // and machine-wide growth the front's own threads do not explain as not the front's.
            // A front whose own threads grew grew its kernel stacks too (each thread has one):
            // a machine-wide figure that shows less moved with other programs' threads too.
            let threads_grew: Vec<&str> = (flat.iter())
                .filter(|(_, f)| cost.machine_wide && f.per_request.os_threads >= 0.5)
                .map(|(front, _)| front.name())
                .collect();
            let head = if flat.iter().any(|(_, f)| value(f) >= cost.grows_from) {
                format!("{name} grew, but not with the front's own threads")
            } else if !threads_grew.is_empty() {
                let whose = match threads_grew[..] {
                    [front] => format!("the {front} front's"),
                    _ => "each front's".to_owned(),
                };
                format!(
                    "{name}, counted machine-wide, grew less than {whose} own threads need, each \
                     with a kernel stack of its own: the count moves with every program's threads"
                )
            } else if a_little(flat) {
                let under = cost.grows_from;
                format!(
                    "{name} grew only slightly with N (under {under}{} per held request)",
                    cost.unit
                )
            } else {
                format!("{name} did not grow with N")
            };
            format!("{head}: {} per held request at N = {n}{note}.", list(flat))
        }
        ([(front, figures)], []) => format!(
            "{name} grew with N on the {} front: {} per held request at N = {n}{note}.",
            front.name(),
            amount(figures)
        ),
        // The others below the line may still have grown a little, of their own (a machine-wide
        // figure's little is other programs'): said as slight, not as none.
        ([(front, figures)], flat) if !cost.machine_wide && a_little(flat) => {
            format!(
                "{name} grew with N on the {} front: {} per held request at N = {n}, and only \
                 slightly elsewhere (under {}{} per held request): {}{note}.",
                front.name(),
                amount(figures),
                cost.grows_from,
                cost.unit,
                list(flat)
            )
        }
        ([(front, figures)], flat) => format!(
            "{name} grew only on the {} front: {} per held request at N = {n}, against {}{note}.",
            front.name(),
            amount(figures),
            list(flat)
        ),
        (grew, []) => {
            let values: Vec<f64> = grew.iter().map(|(_, f)| value(f)).collect();
            let high = values.iter().copied().fold(f64::MIN, f64::max);
            let low = values.iter().copied().fold(f64::MAX, f64::min);
            let likeness = if high <= low * 1.25 {
                "about the same on each front".to_owned()
            } else {
                let most = grew
                    .iter()
                    .find(|(_, f)| value(f) == high)
                    .map_or("", |(front, _)| front.name());
                format!("{:.1} times as much on the {most} front", high / low)
            };
            format!(
                "{name} grew with N, {likeness}: {} per held request at N = {n}{note}.",
                list(grew)
            )
        }
        (grew, flat) => format!(
            "{name} grew with N: {} per held request at N = {n}, against {}{note}.",
            list(grew),
            list(flat)
        ),
    }
}

fn time_sentence(held: u32, at: &[(Front, &Figures)]) -> String {
    let took: Vec<String> = at
        .iter()
        .map(|(front, f)| {
            let stopped = stopped_holding(f).map_or(String::new(), |ms| {
                let of = seconds(f.time_to_hold_ms);
                format!(
                    "; the lab itself was stopped {} s of the {of} s",
                    seconds(ms)
                )
            });
            format!(
                "{} s on the {} front (its CPU {} s, the callers' {} s{stopped})",
                seconds(f.time_to_hold_ms),
                front.name(),
                seconds(f.front_cpu_ms as f64),
                seconds(f.callers_cpu_ms as f64),
            )
        })
        .collect();
    let drops: Vec<String> = at
        .iter()
        .map(|(front, f)| {
            format!(
                "{} on the {} front (a backlog of {}; counted for {})",
                f.listen_drops.count,
                front.name(),
                count(u64::from(f.listen_backlog)),
                f.listen_drops.scope.words()
            )
        })
        .collect();
    let times: Vec<f64> = at.iter().map(|(_, f)| f.time_to_hold_ms).collect();
    let slowest = times.iter().copied().fold(0.0, f64::max);
    let fastest = times.iter().copied().fold(f64::MAX, f64::min);
    // A ratio only of times the sentence shows (to 0.01 s): below that it would compare
    // figures that read 0.00 s.
    // Nor of times that count the lab's own absence.
    let present = at.iter().all(|(_, f)| stopped_holding(f).is_none());
    let ratio = if present && at.len() > 1 && fastest >= 10.0 && slowest >= 2.0 * fastest {
        format!(", {:.1} times as long on the slower", slowest / fastest)
    } else {
        String::new()
    };
    format!(
        "Holding {} took {}{ratio}; connections dropped at the listener meanwhile: {}.",
        count(u64::from(held)),
        took.join(" and "),
        drops.join(", ")
    )
}

/// How far a front got here: its largest count held, its ceiling, and how it failed.
fn reach_sentence(report: &HoldReport, series: &FrontSeries) -> Vec<String> {
    let front = series.front.name();
    let ceiling = report
        .preflight
        .as_ref()
        .and_then(|p| p.reach.get(&series.front)?.as_ref());
    // The points are in ascending order of count.
    let largest = series.held().last();
    let largest = largest.map_or("none of its counts".to_owned(), |(n, _)| {
        format!("up to {}", count(u64::from(n)))
    });
    let beyond = series
        .points
        .iter()
        .filter(|p| matches!(p.outcome, CountOutcome::NotRun { .. }))
        .count();
    let ceiling = match ceiling {
        Some(reach) => format!(
            "; its ceiling here is {}, set by {} = {}",
            held_requests(reach.held),
            reach.ceiling,
            reach.value
        ),
        None => String::new(),
    };
    let skipped = match beyond {
        0 => String::new(),
        1 => "; one count was not run".to_owned(),
        n => format!("; {n} counts were not run"),
    };
    let mut out = vec![format!(
        "The {front} front held {largest} in this run{ceiling}{skipped}."
    )];
    for point in &series.points {
        if let CountOutcome::FrontFailed(failure) = &point.outcome {
            out.push(format!(
                "The {front} front failed at N = {} while {}, {} held: {}.",
                count(u64::from(point.held)),
                failure.stage.words(),
                count(failure.held_before),
                failure.reason
            ));
        }
    }
    out
}

/// A figure with its sign: `+9.46`, `-0.02`.
fn signed(value: f64) -> String {
    let text = figure(value);
    if text.starts_with('-') {
        text
    } else {
        format!("+{text}")
    }
}

/// Where each front's held request goes, at its largest count held: resident memory, the heap
/// by block size (allocated, not necessarily resident), and the kernel's slab.
pub(super) fn breakdown(report: &HoldReport) -> Vec<String> {
    report
        .fronts
        .iter()
        .filter_map(|series| {
            let (held, f) = series.held().last()?;
            let classes: Vec<String> = f
                .heap_per_request
                .iter()
                .filter(|c| c.blocks.abs() >= 0.005)
                .rev()
                .map(|c| {
                    let what = if c.class == "8 KiB" {
                        " (the size of Hyper's read and write buffers)"
                    } else {
                        ""
                    };
                    format!(
                        "{} blocks of {}{what} = {} KiB",
                        figure(c.blocks),
                        c.class,
                        figure(c.kib)
                    )
                })
                .collect();
            let allocated: f64 = f.heap_per_request.iter().map(|c| c.kib).sum();
            // The classes too rare to list (under 0.005 blocks a request) still count in all.
            let listed: f64 = (f.heap_per_request.iter())
                .filter(|c| c.blocks.abs() >= 0.005)
                .map(|c| c.kib)
                .sum();
            let rest = match allocated - listed {
                rest if rest.abs() >= 0.005 => {
                    format!("; {} KiB in blocks rarer than that", figure(rest))
                }
                _ => String::new(),
            };
            let heap = if classes.is_empty() {
                "its heap kept no count of blocks".to_owned()
            } else {
                format!(
                    "its heap per held request: {}{rest}; {} KiB allocated in all",
                    classes.join("; "),
                    figure(allocated)
                )
            };
            let slab = f.per_request.kernel_slab_kib;
            let slab = match slab {
                s if s < 0.0 => format!("shrank {} KiB", figure(-s)),
                s => format!("grew {} KiB", figure(s)),
            };
            let rss = f.per_request.rss_kib;
            let resident = match unreadable(rss, held) {
                Some(all) => format!(
                    "resident memory {all:+.0} KiB in all, too little to read per held request"
                ),
                None => format!("{} KiB resident per held request", figure(rss)),
            };
            Some(format!(
                "The {} front, {} held: {resident}; {heap}. The kernel's slab {slab} per held \
                 request (machine-wide: both ends of each connection, outside any process's \
                 resident memory, and whatever else the machine did).",
                series.front.name(),
                count(u64::from(held)),
            ))
        })
        .collect()
}
