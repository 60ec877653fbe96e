//! `hold`'s renderings, drawn from a report recorded on a real run (`hold --counts
//! 10,100,1000 --format json`) and from changes to it that a run could produce.

use super::{count, figure, seconds, svg, text};
use crate::hold::{
    CountOutcome, Death, Figures, FrontFailure, HoldReport, PerRequest, Point, Stage,
};
use crate::policy::Front;

const RECORDED: &str = include_str!("../../../tests/fixtures/hold-10-100-1000.json");

fn recorded() -> HoldReport {
    serde_json::from_str(RECORDED).expect("the fixture is a report the lab wrote")
}

fn series(report: &mut HoldReport, front: Front) -> &mut crate::hold::FrontSeries {
    let found = report.fronts.iter_mut().find(|s| s.front == front);
    found.expect("both fronts were recorded")
}

/// Changes the per-request figures of every count `front` held.
fn per_request(report: &mut HoldReport, front: Front, change: impl Fn(&mut PerRequest)) {
    held(report, front).for_each(|figures| change(&mut figures.per_request));
}

/// The figures of every count `front` held.
fn held(report: &mut HoldReport, front: Front) -> impl Iterator<Item = &mut Figures> {
    let points = series(report, front).points.iter_mut();
    points.filter_map(|point| match &mut point.outcome {
        CountOutcome::Held(figures) => Some(figures),
        _ => None,
    })
}

/// The figures of `front`'s `at`-th count, which every front held in the recording.
fn held_at(report: &mut HoldReport, front: Front, at: usize) -> &mut Figures {
    let CountOutcome::Held(figures) = &mut series(report, front).points[at].outcome else {
        panic!("both fronts held every count in the recording");
    };
    figures
}

/// The text, its words on one line.
fn one_line(report: &HoldReport) -> String {
    let said = text(report);
    said.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The threaded front failing at 1 000, with an abort's last stderr line.
fn threaded_aborts(report: &mut HoldReport) {
    let threaded = series(report, Front::Threaded);
    threaded.points[2] = Point {
        held: 1_000,
        outcome: CountOutcome::FrontFailed(FrontFailure {
            pid: Some(4242),
            stage: Stage::Holding,
            held_before: 873,
            reason: "its process was killed by SIGABRT".into(),
            detail: "the front's process ended".into(),
            exit: Some(Death {
                code: None,
                signal: Some("SIGABRT".into()),
                last_stderr: Some("failed to set up alternative stack guard page".into()),
            }),
        }),
    };
}

/// A report survives JSON both ways, with every figure and the preflight.
#[test]
fn the_report_round_trips_through_json() {
    let report = recorded();
    let json = serde_json::to_string(&report).expect("serializable");
    let back: HoldReport = serde_json::from_str(&json).expect("readable");
    assert_eq!(back, report);
    let value: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let point = &value["fronts"][1]["points"][2];
    for figure in [
        "time_to_hold_ms",
        "time_to_release_ms",
        "os_threads",
        "rss_kib",
        "address_space_kib",
        "memory_maps",
        "kernel_stack_kib",
        "listen_backlog",
        "callers_cpu_ms",
        "front_cpu_ms",
    ] {
        assert!(point[figure].is_number(), "{figure}: {point}");
    }
    assert!(point["per_request"]["rss_kib"].is_number(), "{point}");
    assert_eq!(value["preflight"]["limits"]["max_map_count"], 65_530);
}

/// The tables have N down the side, both fronts side by side under each figure, the idle row
/// first, and the figures of the report; time and threads in one, memory in the other, so that
/// every line fits 100 columns.
#[test]
fn the_table_puts_n_down_the_side_and_the_fronts_side_by_side() {
    let report = recorded();
    let text = text(&report);
    let lines: Vec<&str> = text.lines().collect();
    let wide: Vec<&&str> = lines.iter().filter(|l| l.chars().count() > 100).collect();
    assert!(wide.is_empty(), "wider than 100 columns: {wide:#?}");
    let names: Vec<&&str> = lines.iter().filter(|l| l.starts_with("N ")).collect();
    let fronts = |names: &str| {
        (
            names.matches("async").count(),
            names.matches("threaded").count(),
        )
    };
    assert_eq!(
        names.iter().map(|n| fronts(n)).collect::<Vec<_>>(),
        [(5, 5), (4, 4)]
    );
    let rows: Vec<&str> = lines
        .iter()
        .filter(|l| {
            ["0 (idle)", "10 ", "100 ", "1 000 "]
                .iter()
                .any(|s| l.starts_with(s))
        })
        .copied()
        .collect();
    assert_eq!(rows.len(), 8, "{text}");
    let threaded = report.series(Front::Threaded).expect("threaded");
    let (_, at_1000) = threaded.held().last().expect("held at 1 000");
    let threads = at_1000.process.procfs.os_threads.to_string();
    assert!(
        rows[3].split_whitespace().any(|cell| cell == threads),
        "{}",
        rows[3]
    );
    let maps = figure(at_1000.per_request.memory_maps);
    assert!(rows[7].starts_with("1 000 "), "{}", rows[7]);
    assert!(rows[7].ends_with(&format!(" {maps}")), "{}", rows[7]);
    assert!(text.contains("RLIMIT_NOFILE = 20000"), "{text}");
    // The widest cells a table has, a count the lab failed at on each front, fit as well.
    let mut failed = recorded();
    for front in [Front::Async, Front::Threaded] {
        let reason = "interrupted by SIGINT (Ctrl-C) while holding".to_owned();
        series(&mut failed, front).points[2].outcome = CountOutcome::LabFailed { reason };
    }
    let failed = super::text(&failed);
    let wide: Vec<&str> = failed.lines().filter(|l| l.chars().count() > 100).collect();
    assert!(wide.is_empty(), "wider than 100 columns: {wide:#?}");
}

/// The reading is computed from the figures: the same report with the async front's threads
/// growing as fast as the threaded front's says so, instead of "only on the threaded front".
#[test]
fn the_reading_follows_the_figures() {
    let report = recorded();
    let reading = text(&report);
    assert!(
        reading.contains("OS threads grew only on the threaded front: +1.00 per held request"),
        "{reading}"
    );
    assert!(
        reading.contains("Memory maps grew only on the threaded front"),
        "{reading}"
    );
    let mut changed = report.clone();
    per_request(&mut changed, Front::Async, |p| p.os_threads = 1.0);
    let reading = text(&changed);
    assert!(
        reading.contains("OS threads grew with N, about the same on each front"),
        "{reading}"
    );
}

/// Each front's reach is said from the preflight, in words that fit its number.
#[test]
fn the_reach_is_said_with_its_ceiling() {
    let mut report = recorded();
    let preflight = report
        .preflight
        .as_mut()
        .expect("the fixture has a preflight");
    let reach = preflight
        .reach
        .get_mut(&Front::Async)
        .expect("the async front's reach");
    let reach = reach.as_mut().expect("a ceiling");
    reach.held = 1;
    // The reading wraps its lines; the words are the same either way.
    let reading = one_line(&report);
    let said = "its ceiling here is 1 held request, set by RLIMIT_NOFILE = ";
    assert!(reading.contains(said), "{reading}");
}

/// Kernel stack is read machine-wide, so it is the front's only where the front's own threads
/// grew: other processes' threads that came and went meanwhile are not the async front's.
#[test]
fn machine_wide_noise_is_not_a_front_s_cost() {
    let mut noisy = recorded();
    per_request(&mut noisy, Front::Async, |p| p.kernel_stack_kib = 7.6);
    let reading = text(&noisy);
    assert!(
        reading.contains("Kernel stack grew only on the threaded front"),
        "{reading}"
    );
}

/// A front's own figure that grew on one front and a little on the other says both: not "only
/// on" the one, against the other's growth beside it.
#[test]
fn a_little_growth_beside_a_front_s_own_is_said_as_slight() {
    let mut report = recorded();
    per_request(&mut report, Front::Async, |p| p.address_space_kib = 1.32);
    let reading = one_line(&report);
    let said = "Address space grew with N on the threaded front: ";
    assert!(reading.contains(said), "{reading}");
    let said = "and only slightly elsewhere (under 64 KiB per held request): +1.32 KiB on the \
                async front";
    assert!(reading.contains(said), "{reading}");
    assert!(!reading.contains("Address space grew only on"), "{reading}");
}

/// One front alone says "did not grow" only where its figures show none: a small growth is
/// named as small, and machine-wide growth its own threads do not explain as not its own.
#[test]
fn one_front_s_flat_costs_say_what_the_figures_show() {
    let mut alone = recorded();
    alone.fronts.retain(|s| s.front == Front::Async);
    per_request(&mut alone, Front::Async, |p| {
        p.address_space_kib = 0.71;
        p.memory_maps = 0.0;
        p.kernel_stack_kib = 7.6;
    });
    let reading = one_line(&alone);
    for said in [
        "Address space grew only slightly with N (under 64 KiB per held request): +0.71 KiB on \
         the async front",
        "Memory maps did not grow with N: +0.00 on the async front",
        "Kernel stack grew, but not with the front's own threads: +7.60 KiB on the async front",
    ] {
        assert!(reading.contains(said), "{said:?} in {reading}");
    }
    per_request(&mut alone, Front::Async, |p| p.address_space_kib = -0.2);
    let reading = one_line(&alone);
    assert!(
        reading.contains("Address space did not grow with N: -0.20 KiB"),
        "{reading}"
    );
    // The threaded front's own threads grew, so its kernel stacks did: a machine-wide figure
    // that shows none is not told as the front's.
    let mut threaded = recorded();
    threaded.fronts.retain(|s| s.front == Front::Threaded);
    per_request(&mut threaded, Front::Threaded, |p| p.kernel_stack_kib = 0.0);
    let reading = one_line(&threaded);
    let said = "Kernel stack, counted machine-wide, grew less than the threaded front's own \
                threads need, each with a kernel stack of its own: the count moves with every \
                program's threads: +0.00 KiB on the threaded front";
    assert!(reading.contains(said), "{reading}");
    // However far it fell: a whole kernel stack less per held request is not "hardly changed".
    per_request(&mut threaded, Front::Threaded, |p| {
        p.kernel_stack_kib = -16.0
    });
    let reading = one_line(&threaded);
    let said = "grew less than the threaded front's own threads need, each with a kernel stack of \
                its own: the count moves with every program's threads: -16.0 KiB";
    assert!(reading.contains(said), "{reading}");
}

/// A front that failed is shown where it failed, with how its process ended and its last
/// stderr line, in the table, the reading and the picture.
#[test]
fn a_failed_front_is_shown_with_how_it_died() {
    let mut report = recorded();
    threaded_aborts(&mut report);
    let text = text(&report);
    assert!(text.contains("FAILED"), "{text}");
    assert!(text.contains("killed by SIGABRT"), "{text}");
    assert!(
        text.contains("failed to set up alternative stack guard page"),
        "{text}"
    );
    assert!(
        text.contains("The threaded front failed at N = 1 000 while holding, 873 held"),
        "{text}"
    );
    assert!(text.contains("The threaded front held up to 100"), "{text}");
    let svg = svg(&report);
    let document = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let failed = document
        .descendants()
        .filter(|n| n.attribute("class") == Some("failed"));
    assert_eq!(failed.count(), 6, "a mark in each panel");
}

/// The picture: six panels, a curve per front through each count held, each front's ceiling
/// as a dashed line, a 1920-wide viewBox and no text under 17 units.
#[test]
fn the_picture_draws_each_front_and_its_ceiling_per_panel() {
    let report = recorded();
    let svg = svg(&report);
    let document = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let root = document.root_element();
    let view_box = root.attribute("viewBox").expect("a viewBox");
    assert!(view_box.starts_with("0 0 1920 "), "{view_box}");
    let panels: Vec<_> = document
        .descendants()
        .filter(|n| n.attribute("class") == Some("panel"))
        .collect();
    assert_eq!(panels.len(), 6);
    for panel in &panels {
        for front in Front::ALL {
            let curve = panel
                .descendants()
                .find(|n| n.has_tag_name("polyline") && n.attribute("class") == Some(front.name()));
            let points = curve.and_then(|c| c.attribute("points")).unwrap_or("");
            let held = report.series(front).map_or(0, |s| s.held().count());
            // Values at or below zero (a machine-wide change) are not drawn.
            assert!(points.split(' ').count() <= held, "{front:?}: {points}");
        }
        let ceilings = panel
            .descendants()
            .filter(|n| n.attribute("class") == Some("ceiling"));
        assert_eq!(ceilings.count(), 2);
    }
    let threads = panels[1]
        .descendants()
        .find(|n| n.has_tag_name("polyline") && n.attribute("class") == Some("threaded"))
        .and_then(|c| c.attribute("points"))
        .expect("the threaded front's thread curve");
    assert_eq!(threads.split(' ').count(), 3);
    for node in document.descendants().filter(|n| n.has_tag_name("text")) {
        let size: f64 = node
            .attribute("font-size")
            .and_then(|s| s.parse().ok())
            .expect("every text has a size");
        assert!(size >= 17.0, "{:?} is set at {size}", node.text());
    }
}

/// Numbers read at a glance: groups of three, decimals by size.
#[test]
fn numbers_read_at_a_glance() {
    assert_eq!(count(17_936), "17 936");
    assert_eq!(count(100), "100");
    assert_eq!(count(1_000_000), "1 000 000");
    assert_eq!(figure(2052.4), "2052");
    assert_eq!(figure(-2052.4), "-2052");
    assert_eq!(figure(9.46), "9.46");
    assert_eq!(figure(16.04), "16.0");
    assert_eq!(figure(0.0), "0.00");
    assert_eq!(figure(-0.004), "0.00");
    assert_eq!(figure(-0.006), "-0.01");
    assert_eq!(figure(9.996), "10.0");
    assert_eq!(figure(999.96), "1000");
    assert_eq!(seconds(210.0), "0.21");
    assert_eq!(seconds(14_300.0), "14.3");
}

/// The breakdown reads each front's heap by block size and its kernel slab at its largest count,
/// from the figures: change them and the sentence follows.
#[test]
fn the_breakdown_follows_the_heap_figures() {
    let mut report = recorded();
    let text = text(&report);
    assert!(
        text.contains("Where a held request's memory goes"),
        "{text}"
    );
    let figures = held_at(&mut report, Front::Async, 2);
    for class in &mut figures.heap_per_request {
        (class.blocks, class.kib) = if class.class == "8 KiB" {
            (3.0, 24.0)
        } else {
            (0.0, 0.0)
        };
    }
    figures.per_request.kernel_slab_kib = 7.25;
    let sentence = super::reading::breakdown(&report).remove(0);
    assert!(
        sentence.starts_with("The async front, 1 000 held:"),
        "{sentence}"
    );
    assert!(
        sentence.contains("3.00 blocks of 8 KiB (the size of Hyper's read and write buffers) = 24.0 KiB; 24.0 KiB allocated in all"),
        "{sentence}"
    );
    assert!(sentence.contains("slab grew 7.25 KiB"), "{sentence}");

    // A class too rare to list still counts in all, and a slab that shrank is not said to grow.
    let figures = held_at(&mut report, Front::Async, 2);
    for class in &mut figures.heap_per_request {
        if class.class == "over 8 KiB" {
            (class.blocks, class.kib) = (0.002, 0.21);
        }
    }
    figures.per_request.kernel_slab_kib = -46.7;
    let sentence = super::reading::breakdown(&report).remove(0);
    let parts = "= 24.0 KiB; 0.21 KiB in blocks rarer than that; 24.2 KiB allocated in all";
    assert!(sentence.contains(parts), "{sentence}");
    assert!(sentence.contains("slab shrank 46.7 KiB"), "{sentence}");
}

/// Resident memory is read per held request only from a MiB of change in all: below that, a
/// front's first requests move it as much as holding does, and the reading says it is too
/// little to read rather than comparing the fronts by it.
#[test]
fn a_resident_change_too_small_to_read_is_not_compared() {
    let mut report = recorded();
    let set = |report: &mut HoldReport, front: Front, kib: f64| {
        held_at(report, front, 2).per_request.rss_kib = kib;
    };
    set(&mut report, Front::Async, 0.9);
    set(&mut report, Front::Threaded, 16.0);
    let reading = one_line(&report);
    let said = "Resident memory grew with N on the threaded front: +16.0 KiB per held request at \
                N = 1 000. Resident memory changed +900 KiB on the async front in all, too little \
                to read per held request (under 1 MiB).";
    assert!(reading.contains(said), "{reading}");
    let said = "The async front, 1 000 held: resident memory +900 KiB in all, too little to read \
                per held request;";
    assert!(reading.contains(said), "{reading}");
    set(&mut report, Front::Threaded, -1.0);
    let reading = one_line(&report);
    let said = "Resident memory changed too little at N = 1 000 to read per held request: +900 KiB \
                on the async front and -1000 KiB on the threaded front in all, under the 1 MiB \
                from which it is read.";
    assert!(reading.contains(said), "{reading}");
    // A MiB or more is read, whichever way it went, however the figure per held request
    // rounds: 1 024 KiB over 49 requests is 1023.99… KiB again.
    assert_eq!(super::reading::unreadable(1024.0 / 49.0, 49), None);
    assert_eq!(
        super::reading::unreadable(-1020.0 / 49.0, 49),
        Some(-1020.0)
    );
    set(&mut report, Front::Threaded, -1.1);
    let reading = one_line(&report);
    assert!(
        reading.contains("Resident memory did not grow with N: -1.10 KiB on the threaded front"),
        "{reading}"
    );
}

/// The table puts a resident figure too small to read in parentheses, and says why only where
/// one is.
#[test]
fn the_table_marks_a_resident_figure_too_small_to_read() {
    let mut report = recorded();
    for front in [Front::Async, Front::Threaded] {
        held(&mut report, front).for_each(|figures| figures.per_request.rss_kib = 2048.0);
    }
    let why = "(RSS): under 1 MiB in all, too little to read per held request";
    assert!(!text(&report).contains(why), "nothing is marked");
    held_at(&mut report, Front::Async, 2).per_request.rss_kib = 0.9;
    held_at(&mut report, Front::Threaded, 2).per_request.rss_kib = 16.0;
    let table = text(&report);
    let row = table
        .lines()
        .filter(|l| l.starts_with("1 000"))
        .nth(1)
        .expect("the memory table's row of 1 000");
    assert!(row.contains(" (0.90) ") && row.contains(" 16.0 "), "{row}");
    assert!(!row.contains("(16.0)") && table.contains(why), "{table}");
}

/// The times to hold are compared only where the sentence shows them apart: a ratio of times
/// that both read 0.00 s is not said.
#[test]
fn times_too_short_to_show_are_not_compared() {
    for ((on_async, threaded), compared) in [((1.0, 4.0), false), ((100.0, 400.0), true)] {
        let mut report = recorded();
        for (front, ms) in [(Front::Async, on_async), (Front::Threaded, threaded)] {
            held_at(&mut report, front, 2).time_to_hold_ms = ms;
        }
        let said = one_line(&report);
        assert_eq!(
            said.contains("4.0 times as long on the slower"),
            compared,
            "{said}"
        );
        assert!(!said.contains("times as long") || compared, "{said}");
    }
}

/// A time to hold that counts a stop of the lab's own (Ctrl-Z, then `fg`) is
/// marked in the table, said with its sentence and in the picture, and not compared.
#[test]
fn a_time_that_counts_a_stop_of_the_labs_says_so() {
    let mut report = recorded();
    for (front, ms) in [(Front::Async, 100.0), (Front::Threaded, 12_700.0)] {
        let figures = held_at(&mut report, front, 2);
        figures.time_to_hold_ms = ms;
        figures.lab_stopped = (front == Front::Threaded).then_some(crate::hold::LabStopped {
            holding_ms: 12_000.0,
            releasing_ms: 0.0,
        });
    }
    let said = text(&report);
    let row = said
        .lines()
        .find(|l| l.starts_with("1 000 "))
        .expect("the row");
    assert!(row.contains("0.10 ") && row.contains("12.7† "), "{row}");
    let said = said.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains("threaded, 1 000: † its hold s counts 12.0 s in which the lab itself was stopped (Ctrl-Z, SIGSTOP)"),
        "{said}"
    );
    assert!(
        said.contains("the callers' 0.03 s; the lab itself was stopped 12.0 s of the 12.7 s)"),
        "{said}"
    );
    assert!(!said.contains("times as long"), "{said}");
    let picture = svg(&report);
    assert!(
        picture.contains(
            "Time to hold counts time the lab itself was stopped: threaded 1 000, 12.0 s."
        ),
        "{picture}"
    );
    // Without it, the same times are compared, and nothing is marked.
    for front in [Front::Async, Front::Threaded] {
        held_at(&mut report, front, 2).lab_stopped = None;
    }
    let said = text(&report);
    assert!(
        !said.contains('†') && said.contains("times as long"),
        "{said}"
    );
}

/// A run that failed before any front was measured: the picture says so and why, and never
/// that every count was held.
#[test]
fn a_picture_of_a_failed_run_says_why() {
    let mut report = recorded();
    report.fronts.clear();
    let reason = "RLIMIT_AS = 8388608 bytes leaves no room";
    report.failure = Some(reason.into());
    let picture = svg(&report);
    assert!(picture.contains(&format!("FAILED: {reason}")), "{picture}");
    assert!(picture.contains("Nothing was held"), "{picture}");
    assert!(!picture.contains("Every count was held"), "{picture}");
    // First, as in the run's picture: above the panels, not under them.
    let failed = picture.find("FAILED: ").expect("the failure");
    let panels = picture.find(r#"<g class="panel">"#).expect("the panels");
    assert!(failed < panels, "{picture}");
    // Each panel is empty and says why, with no scale made up for it.
    assert_eq!(picture.matches("nothing was held").count(), 6, "{picture}");
    assert!(!picture.contains(r#"class="y-tick""#), "{picture}");
}

/// A panel with no value above zero (the kernel stack, on the async front alone) draws no
/// scale of its own and says so; the others draw theirs.
#[test]
fn an_empty_panel_invents_no_scale() {
    let mut report = recorded();
    report.fronts.retain(|s| s.front == Front::Async);
    for figures in held(&mut report, Front::Async) {
        figures.kernel_stack_kib = 0;
    }
    let picture = svg(&report);
    assert_eq!(
        picture.matches("no value above zero").count(),
        1,
        "{picture}"
    );
    let last = picture.rfind(r#"<g class="panel">"#).expect("the panels");
    let kernel_stack = &picture[last..];
    assert!(
        kernel_stack.contains("Kernel stack added"),
        "{kernel_stack}"
    );
    assert!(
        !kernel_stack.contains(r#"class="y-tick""#),
        "{kernel_stack}"
    );
    assert!(picture[..last].contains(r#"class="y-tick""#), "{picture}");
}

/// A run the lab itself failed (interrupted at its last count, say) says so first and shows
/// what it measured, without the reading of the figures.
#[test]
fn a_failed_run_says_so_first_and_reads_nothing() {
    let mut report = recorded();
    let reason = "the threaded front, N = 1 000: interrupted by SIGTERM";
    report.failure = Some(reason.into());
    let text = text(&report);
    assert!(text.starts_with(&format!("FAILED: {reason}\n")), "{text}");
    assert!(text.contains("RSS KiB/req"), "{text}");
    assert!(!text.contains("What the figures show"), "{text}");
    assert!(
        !text.contains("Where a held request's memory goes"),
        "{text}"
    );
    assert_eq!(text.matches("FAILED:").count(), 1, "{text}");
}

/// A ceiling of no held request draws no line (a log axis has no 0), and a ceiling of one is
/// said in the singular.
#[test]
fn a_ceiling_of_none_or_one_is_drawn_as_it_is() {
    for (held, says) in [
        (0, "its ceiling here: 0 held requests"),
        (1, "its ceiling here: 1 held request,"),
    ] {
        let mut report = recorded();
        let preflight = report
            .preflight
            .as_mut()
            .expect("recorded with its preflight");
        for reach in preflight.reach.values_mut().flatten() {
            reach.held = held;
        }
        let picture = svg(&report);
        assert!(picture.contains(says), "{picture}");
        assert!(!picture.contains("inf"), "{picture}");
        let lines = picture.matches(r#"<line class="ceiling""#).count();
        assert_eq!(lines == 0, held == 0, "{held}: {lines} ceiling lines");
    }
}
