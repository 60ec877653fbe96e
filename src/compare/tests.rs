//! `compare`'s sentences about what holding cost, against the thread counts they read.

use std::collections::BTreeMap;

use super::{Comparison, PolicyComparison, render};
use crate::policy::{Front, Held, Mode, Slots};
use crate::resources::{ResourceEvidence, Resources};

/// Both policies, every request the same on both fronts, with `threads(front)` counted while
/// two requests were held (`None`: not counted) and one thread per front after the run.
fn compared(threads: fn(Front) -> Option<usize>) -> Comparison {
    let counted = |os_threads, held_at_gate| Resources {
        os_threads,
        connection_handlers: held_at_gate,
        held_at_gate,
    };
    let policy = |mode| PolicyComparison {
        mode,
        outcomes: BTreeMap::new(),
        resources: Front::ALL
            .into_iter()
            .map(|front| {
                let evidence = ResourceEvidence {
                    before_fast: Some(counted(threads(front), 2)),
                    after_run: Some(counted(threads(front).map(|_| 1), 0)),
                };
                (front, evidence)
            })
            .collect(),
        identical: true,
    };
    Comparison {
        slots: Slots::new(4).expect("4 slots is allowed"),
        held: Held::new(2).expect("2 held is allowed"),
        executors: BTreeMap::new(),
        expected_to_differ: false,
        policies: vec![policy(Mode::Shared), policy(Mode::Partitioned)],
        identical: true,
        matches_model: true,
        failures: BTreeMap::new(),
    }
}

/// "Blocks an OS thread on the threaded one" is said where the threaded front's threads grew
/// by one per held request; where they did not, or were not counted, the text says that.
#[test]
fn the_cost_of_holding_is_said_only_where_the_threads_show_it() {
    let shown = render::render(&compared(|front| match front {
        Front::Async => Some(1),
        Front::Threaded => Some(4),
    }));
    assert!(
        shown.contains("blocks an OS thread on the threaded one"),
        "{shown}"
    );
    let flat = render::render(&compared(|_| Some(2)));
    assert!(!flat.contains("blocks an OS thread"), "{flat}");
    assert!(
        flat.contains("The threaded front's OS threads did not grow by one per held request"),
        "{flat}"
    );
    let uncounted = render::render(&compared(|_| None));
    assert!(!uncounted.contains("blocks an OS thread"), "{uncounted}");
    assert!(
        uncounted.contains("The OS threads were not counted here"),
        "{uncounted}"
    );
}

/// The heading's `--work` flags are the async front's; the threaded front, which takes only
/// `--work block` of them, says how its slow work waits too, so no reader takes the flags for
/// both.
#[test]
fn each_front_says_how_its_slow_work_waits() {
    use crate::executor::{BlockingThreads, Executor, WorkStyle, Workers};
    let mut comparison = compared(|_| Some(1));
    let one = BlockingThreads::new(1).expect("1 is allowed");
    let executor = Executor::new(WorkStyle::SpawnBlocking, Workers::CurrentThread, one);
    comparison.executors.insert(Front::Async, executor);
    let shown = render::render(&comparison);
    assert!(shown.contains("--work spawn-blocking"), "{shown}");
    let threaded = "The threaded front: slow work waits on its connection's own OS thread.";
    assert!(shown.contains(threaded), "{shown}");
    assert!(
        shown.contains("The async front: slow work's blocking wait"),
        "{shown}"
    );
    // As usual on both fronts: no line for either.
    let usual = render::render(&compared(|_| Some(1)));
    assert!(!usual.contains("The threaded front: "), "{usual}");
}
