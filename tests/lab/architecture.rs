//! The module graph, read from the `crate::` paths in each module's code (comments and unit
//! tests aside), flows one way: no cycle, and none of the arrows `docs/design.md` rules out.
//! Names explain themselves once: no module name, and no public type name, means two things.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module and the top-level modules its code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (relative, code) in sources() {
        let module = relative
            .split('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_owned();
        let names = graph.entry(module.clone()).or_insert_with(BTreeSet::new);
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                if !name.is_empty() && name != module {
                    names.insert(name.to_owned());
                }
            }
        }
    }
    graph
}

fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut pending = vec![from.to_owned()];
    while let Some(module) = pending.pop() {
        for next in graph.get(&module).into_iter().flatten() {
            if next == to {
                return true;
            }
            if seen.insert(next.clone()) {
                pending.push(next.clone());
            }
        }
    }
    false
}

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = graph();
    for module in graph.keys() {
        assert!(
            !reaches(&graph, module, module),
            "{module} reaches itself: {graph:#?}"
        );
    }
}

#[test]
fn data_flows_one_way() {
    let graph = graph();
    let forbidden = [
        // Admission knows no front, no test hook, no report.
        ("admission", "server"),
        ("admission", "hooks"),
        ("admission", "report"),
        ("admission", "coordinator"),
        // The model and the ground floor never see the report.
        ("model", "report"),
        ("policy", "report"),
        ("label", "report"),
        // Reports never reach their renderings or a front.
        ("report", "server"),
        ("report", "draw"),
        // The ground floor stands alone.
        ("policy", "admission"),
        ("label", "admission"),
    ];
    for (from, to) in forbidden {
        assert!(
            !reaches(&graph, from, to),
            "{from} reaches {to}: {:#?}",
            graph
        );
    }
    // Renderings read reports and the instruments' data; their own code names no front and
    // starts nothing (the instruments they read do).
    for module in ["draw", "report", "model", "evidence", "outcome"] {
        for front in ["server", "coordinator"] {
            assert!(
                !graph[module].contains(front),
                "{module} names {front}: {:?}",
                graph[module]
            );
        }
    }
}

/// The modules every instrument stands on. They name no instrument, so an instrument can be
/// read, changed or removed without touching the ground under the others; all but `cli`, the
/// command line, which reads every instrument's flags and starts the one asked for.
const GROUND: [&str; 21] = [
    "executor",
    "allocator",
    "interrupts",
    "admission",
    "child",
    "coordinator",
    "draw",
    "evidence",
    "front_process",
    "hooks",
    "label",
    "limits",
    "model",
    "outcome",
    "policy",
    "procfs",
    "redis_pool",
    "report",
    "resources",
    "server",
    "cli",
];

/// The instruments: each one folder (its `mod.rs`, no file of its name beside it); a room with
/// a name in [`ROOMS`] is that room in every one of them.
const INSTRUMENTS: [&str; 7] = [
    "lab",
    "sweep",
    "compare",
    "record",
    "classroom",
    "hold",
    "replicas",
];

/// The rooms an instrument may have, named alike in every instrument's folder.
const ROOMS: [&str; 7] = [
    "mod", "run", "evidence", "model", "report", "render", "tests",
];

#[test]
fn every_module_is_ground_or_an_instrument() {
    let graph = graph();
    for module in graph
        .keys()
        .filter(|m| !["lib", "main"].contains(&m.as_str()))
    {
        assert!(
            GROUND.contains(&module.as_str()) || INSTRUMENTS.contains(&module.as_str()),
            "{module} is neither ground nor an instrument: say which in this test and in \
             docs/design.md"
        );
    }
}

#[test]
fn the_ground_names_no_instrument() {
    let graph = graph();
    for ground in GROUND.iter().filter(|&&g| g != "cli") {
        for instrument in INSTRUMENTS {
            assert!(
                !reaches(&graph, ground, instrument),
                "{ground} reaches the instrument {instrument}: {:?}",
                graph[*ground]
            );
        }
    }
}

#[test]
fn each_instrument_is_one_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for instrument in INSTRUMENTS {
        assert!(
            src.join(instrument).join("mod.rs").is_file(),
            "src/{instrument}/mod.rs"
        );
        assert!(
            !src.join(format!("{instrument}.rs")).exists(),
            "src/{instrument}.rs beside its folder"
        );
    }
}

#[test]
fn no_module_name_means_two_things() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            let relative = path
                .strip_prefix(&src)
                .expect("under src/")
                .display()
                .to_string();
            let name = path
                .file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                pending.push(path.clone());
            } else if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            if ROOMS.contains(&name.as_str()) || ["lib", "main"].contains(&name.as_str()) {
                continue;
            }
            seen.entry(name).or_default().push(relative);
        }
    }
    let twice: Vec<_> = seen
        .into_iter()
        .filter(|(_, places)| places.len() > 1)
        .collect();
    assert!(twice.is_empty(), "module names used twice: {twice:?}");
}

#[test]
fn admission_knows_no_front_classroom_or_test() {
    let graph = graph();
    let admission = &graph["admission"];
    for other in [
        "server",
        "front_process",
        "hooks",
        "coordinator",
        "report",
        "classroom",
    ]
    .into_iter()
    .chain(INSTRUMENTS)
    {
        assert!(
            !admission.contains(other),
            "admission names {other}: {admission:?}"
        );
    }
}

/// The code of every source file under `src/` but the unit tests' own (`tests.rs`), before its
/// `#[cfg(test)]`, by its path under `src/`.
fn sources() -> Vec<(String, String)> {
    every_source()
        .into_iter()
        .map(|(file, code, _)| (file, code))
        .collect()
}

/// The unit tests' code of every source file under `src/`: a `tests.rs`, or what follows a
/// file's `#[cfg(test)]`.
fn unit_tests() -> Vec<(String, String)> {
    every_source()
        .into_iter()
        .map(|(file, _, tests)| (file, tests))
        .collect()
}

/// Every source file under `src/`, by its path there: its code, and its unit tests' code.
fn every_source() -> Vec<(String, String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = Vec::new();
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&src).expect("under src/");
            let code = std::fs::read_to_string(&path).expect("a source file");
            let (code, tests) = match code.split_once("#[cfg(test)]") {
                _ if path.ends_with("tests.rs") => ("", code.as_str()),
                Some((code, tests)) => (code, tests),
                None => (code.as_str(), ""),
            };
            let file = relative.display().to_string();
            sources.push((file, code.to_owned(), tests.to_owned()));
        }
    }
    sources
}

/// The name a line defines, if it defines a `pub`, `pub(crate)` or `pub(super)` struct, enum,
/// trait or type alias.
fn public_type(line: &str) -> Option<&str> {
    let rest = ["pub ", "pub(crate) ", "pub(super) "]
        .into_iter()
        .find_map(|visibility| line.trim_start().strip_prefix(visibility))?;
    defined_name(rest, &["struct ", "enum ", "trait ", "type "])
}

/// The name a line defines, if it defines a private struct, enum or trait, or a private type
/// alias at the top of its file (an indented `type` is most often a trait's associated type,
/// `type Err`, named by the trait).
fn private_type(line: &str) -> Option<&str> {
    defined_name(line.trim_start(), &["struct ", "enum ", "trait "])
        .or_else(|| defined_name(line, &["type "]))
}

fn defined_name<'a>(rest: &'a str, keywords: &[&str]) -> Option<&'a str> {
    let rest = keywords
        .iter()
        .find_map(|keyword| rest.strip_prefix(keyword))?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|name| !name.is_empty())
}

/// No two public types share a name, and no private type takes a public one's, not even a unit
/// test's: a public type's name means one thing wherever it is read. (Private types of
/// different modules may share a name, each read only where it is defined.)
#[test]
fn no_public_type_name_is_used_twice() {
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut private: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, tests) in unit_tests() {
        for name in tests.lines().filter_map(private_type) {
            private
                .entry(name.to_owned())
                .or_default()
                .push(format!("{file} (its tests)"));
        }
    }
    for (file, code) in sources() {
        for name in code.lines().filter_map(public_type) {
            defined
                .entry(name.to_owned())
                .or_default()
                .push(file.clone());
        }
        for name in code.lines().filter_map(private_type) {
            private
                .entry(name.to_owned())
                .or_default()
                .push(file.clone());
        }
    }
    let twice: Vec<_> = defined
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .collect();
    assert!(
        twice.is_empty(),
        "type names defined more than once (give each its own): {twice:?}"
    );
    let taken: Vec<String> = private
        .iter()
        .filter_map(|(name, files)| {
            let public = defined.get(name)?;
            Some(format!(
                "{name}: private in {files:?}, public in {public:?}"
            ))
        })
        .collect();
    assert!(
        taken.is_empty(),
        "private types that take a public type's name (give each its own): {taken:?}"
    );
}

/// The crate's public modules: the surface `docs/design.md` documents ("The public surface").
/// Everything else is `pub(crate)`; a module made public is added here and there, on purpose.
const SURFACE: [&str; 18] = [
    "allocator",
    "classroom",
    "cli",
    "compare",
    "coordinator",
    "evidence",
    "executor",
    "front_process",
    "hold",
    "hooks",
    "lab",
    "label",
    "outcome",
    "policy",
    "record",
    "replicas",
    "report",
    "sweep",
];

#[test]
fn the_public_modules_are_the_documented_surface() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let surface: BTreeSet<&str> = SURFACE.into_iter().collect();
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let public: BTreeSet<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches(';'))
        .collect();
    assert_eq!(public, surface, "src/lib.rs's public modules");
    let reexported: Vec<&str> = lib
        .lines()
        .filter(|l| l.trim_start().starts_with("pub use "))
        .collect();
    assert!(reexported.is_empty(), "the root re-exports {reexported:?}");

    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let section = design
        .split("\n## The public surface\n")
        .nth(1)
        .expect("docs/design.md has a section \"The public surface\"");
    let section = section.split("\n## ").next().unwrap_or_default();
    let documented: BTreeSet<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|row| row.split(" |").next())
        .flat_map(|cell| cell.split(['`', ',', ' ']))
        .filter(|name| !name.is_empty())
        .collect();
    assert_eq!(documented, surface, "docs/design.md's public surface");
}
