//! The module graph, read from the `crate::` paths in each module's code (comments and unit
//! tests aside), flows one way: no cycle, and none of the arrows `docs/design.md` rules out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module and the top-level modules its code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path.strip_prefix(&src).expect("under src/");
            let first = relative.components().next().expect("a file name");
            let module = first
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned();
            let code = std::fs::read_to_string(&path).expect("a source file");
            let code = code.split("#[cfg(test)]").next().unwrap_or_default();
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
        ("report", "render"),
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
    for module in ["render", "report", "model", "evidence", "outcome"] {
        for front in ["server", "coordinator"] {
            assert!(
                !graph[module].contains(front),
                "{module} names {front}: {:?}",
                graph[module]
            );
        }
    }
}
