//! The docs cannot drift: every command shown in `README.md` and `docs/*.md` is run against the
//! real binary, and the output shown under it must still be what it prints. The formats are
//! described for doc writers in `docs/design.md`, "Examples that are checked":
//!
//! - A fenced block whose info string is `console` is checked. Each line starting with `$ ` is
//!   a command; the lines after it, up to the next command or the end of the block, are its
//!   expected output: stdout and stderr together, as a terminal shows them. Every command must
//!   exit 0; one that is meant to fail shows it, e.g. `$ isolation-lab --held 9 || echo "exit
//!   status $?"`.
//! - The commands of one file run in document order with `sh -c`, in one scratch directory of
//!   that file's own, with the built binary's directory first on `PATH`, so a file saved by one
//!   command (`isolation-lab > r.json`) can be read by a later one, in the same block or a
//!   later one.
//! - Two normalizations, for the few outputs that vary between runs: an expected line that is
//!   exactly `...` matches any number of lines (none included), and `[..]` inside an expected
//!   line matches any text within that line.
//! - An inline code span between single backticks, `` `FILE.json#/json/pointer` ``, outside
//!   the blocks, FILE made of letters, digits and `._-/`, is checked too:
//!   the JSON Pointer (RFC 6901, in its URI fragment form) must resolve in FILE, saved by an
//!   earlier command of the same file. When the span is followed by ` = ` and a second code
//!   span, that span is JSON and must equal the value there.
//! - A block that needs a program the lab does not ship says so in its info string,
//!   `console needs=redis-server`: where that program is not on `PATH`, its commands are
//!   skipped, with one line saying so; everywhere else (CI installs it) they are checked.
//! - A command outside a `console` block is not checked, so a `sh` (`bash`, `shell`) block may
//!   not hold one of the lab's commands; a `console` block may not run `cargo` (it would build
//!   inside a test). Other fenced blocks (a synopsis, shown output) are left alone.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// One thing a doc claims, where it claims it.
#[derive(Debug)]
enum Claim {
    /// `$ command`, and the lines shown under it; `needs` names a program it runs.
    Command {
        line: usize,
        command: String,
        expected: Vec<String>,
        needs: Option<String>,
    },
    /// The first command of a `console` block (counted once per block).
    Block,
    /// `` `file.json#/pointer` ``, with the value shown after ` = ` if any.
    Pointer {
        line: usize,
        file: String,
        pointer: String,
        value: Option<String>,
    },
    /// Something the doc must not do.
    Refused { line: usize, why: String },
}

/// The kinds of fenced block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fence {
    /// `console`: commands and their output, checked.
    Checked,
    /// `sh`, `bash`, `shell`: commands shown without output, never run.
    Shell,
    /// Anything else: a synopsis, a picture, text.
    Other,
}

/// What a doc claims, in document order.
fn claims(markdown: &str) -> Vec<Claim> {
    let mut claims = Vec::new();
    // (backticks, the kind of block, its indent)
    let mut fence: Option<(usize, Fence, usize)> = None;
    // The program the open `console` block needs, if any.
    let mut needs: Option<String> = None;
    // The lines of the paragraph being read, for the code spans that run across lines.
    let mut prose: Vec<(usize, String)> = Vec::new();
    let mut prose_from = 0;
    for (index, text) in markdown.lines().enumerate() {
        let line = index + 1;
        let trimmed = text.trim_start();
        let ticks = trimmed.chars().take_while(|&c| c == '`').count();
        match fence {
            None if ticks >= 3 => {
                claims.extend(pointers(&mut prose));
                let mut info = trimmed[ticks..].split_whitespace();
                let kind = match info.next() {
                    Some("console") => Fence::Checked,
                    Some("sh" | "bash" | "shell") => Fence::Shell,
                    _ => Fence::Other,
                };
                needs = info
                    .find_map(|word| word.strip_prefix("needs="))
                    .map(str::to_owned)
                    .filter(|_| kind == Fence::Checked);
                if kind == Fence::Checked {
                    claims.push(Claim::Block);
                }
                fence = Some((ticks, kind, text.len() - trimmed.len()));
            }
            None if text.trim().is_empty() => claims.extend(pointers(&mut prose)),
            None => {
                if prose.is_empty() {
                    prose_from = line;
                }
                prose.push((prose_from, text.to_owned()));
            }
            Some((open, ..)) if ticks >= open && trimmed[ticks..].trim().is_empty() => {
                fence = None;
            }
            Some((_, Fence::Checked, indent)) => match unindent(text, indent).strip_prefix("$ ") {
                Some(command) if command.trim_start().starts_with("cargo ") => {
                    claims.push(Claim::Refused {
                        line,
                        why: "a console block runs the built binary, not cargo: put cargo \
                              commands in a sh block"
                            .into(),
                    });
                }
                Some(command) => claims.push(Claim::Command {
                    line,
                    command: command.to_owned(),
                    expected: Vec::new(),
                    needs: needs.clone(),
                }),
                None => match claims.last_mut() {
                    Some(Claim::Command { expected, .. }) => {
                        expected.push(unindent(text, indent).to_owned());
                    }
                    _ => claims.push(Claim::Refused {
                        line,
                        why: "output shown before any `$ ` command in a console block".into(),
                    }),
                },
            },
            Some((_, Fence::Shell, _)) => {
                let command = text.trim_start().trim_start_matches("$ ");
                let lab = command.strip_prefix("isolation-lab");
                if lab.is_some_and(|rest| rest.is_empty() || rest.starts_with(' ')) {
                    claims.push(Claim::Refused {
                        line,
                        why: "a command of the lab outside a console block is never checked".into(),
                    });
                }
            }
            Some((_, Fence::Other, _)) => {}
        }
    }
    claims.extend(pointers(&mut prose));
    if fence.is_some() {
        claims.push(Claim::Refused {
            line: markdown.lines().count(),
            why: "a fenced block is never closed".into(),
        });
    }
    claims
}

/// The `` `file.json#/pointer` `` spans of a paragraph of prose, each with the value shown
/// after it, if any; the paragraph is emptied.
fn pointers(paragraph: &mut Vec<(usize, String)>) -> Vec<Claim> {
    let Some(&(first, _)) = paragraph.first() else {
        return Vec::new();
    };
    let lines: Vec<String> = paragraph.drain(..).map(|(_, line)| line).collect();
    let text = lines.join("\n");
    let pieces = pieces(&text);
    let mut found = Vec::new();
    let mut line = first;
    for (i, piece) in pieces.iter().enumerate() {
        if let Piece::Code(code) = piece
            && let Some(claim) = pointer(line, code, &pieces[i + 1..])
        {
            found.push(claim);
        }
        let (Piece::Text(text) | Piece::Code(text) | Piece::Other(text)) = piece;
        line += text.matches('\n').count();
    }
    found
}

/// A paragraph cut into text and code spans.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    /// A code span between single backticks: a claim if it names a pointer.
    Code(&'a str),
    /// A code span between two or more backticks: an example, never a claim.
    Other(&'a str),
}

/// Cuts `text` into pieces: a run of backticks opens a code span that the next run of the same
/// length closes (CommonMark's rule); an unclosed run is text.
fn pieces(text: &str) -> Vec<Piece<'_>> {
    // The runs of backticks, as (start, length) in bytes: a backtick is one byte, so every
    // run starts and ends on a character boundary.
    let bytes = text.as_bytes();
    let mut runs = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        while at < bytes.len() && bytes[at] == b'`' {
            at += 1;
        }
        if at > start {
            runs.push((start, at - start));
        } else {
            at += 1;
        }
    }
    let mut pieces = Vec::new();
    let mut from = 0;
    let mut run = 0;
    while run < runs.len() {
        let (open, ticks) = runs[run];
        let closing = runs[run + 1..].iter().position(|&(_, n)| n == ticks);
        let Some(later) = closing else {
            run += 1; // an unclosed run is text
            continue;
        };
        let (close, _) = runs[run + 1 + later];
        pieces.push(Piece::Text(&text[from..open]));
        let code = &text[open + ticks..close];
        pieces.push(if ticks == 1 {
            Piece::Code(code)
        } else {
            Piece::Other(code)
        });
        from = close + ticks;
        run += later + 2;
    }
    pieces.push(Piece::Text(&text[from..]));
    pieces
}

/// The pointer claim of the code span `code`, if it is one; `after` are the pieces after it.
fn pointer(line: usize, code: &str, after: &[Piece]) -> Option<Claim> {
    let (file, fragment) = code.split_once(".json#")?;
    // A file name of plain characters: `<file>.json#/pointer` names none.
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-/".contains(c);
    if file.is_empty() || !file.chars().all(plain) {
        return None;
    }
    if !(fragment.is_empty() || fragment.starts_with('/')) {
        return None;
    }
    let value = match after {
        [Piece::Text(between), Piece::Code(value), ..] if between.trim() == "=" => {
            Some((*value).to_owned())
        }
        _ => None,
    };
    Some(Claim::Pointer {
        line,
        file: format!("{file}.json"),
        pointer: percent_decoded(fragment),
        value,
    })
}

/// A line of a fenced block without the indent of its fence (inside a list item).
fn unindent(line: &str, indent: usize) -> &str {
    let spaces = line.len() - line.trim_start_matches(' ').len();
    &line[spaces.min(indent)..]
}

/// A URI fragment's `%XX` escapes, decoded (RFC 6901, section 6).
fn percent_decoded(fragment: &str) -> String {
    let bytes = fragment.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match hex.map(|h| u8::from_str_radix(h, 16)) {
            Some(Ok(byte)) if bytes[i] == b'%' => {
                out.push(byte);
                i += 3;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `got` matches the `expected` lines: exactly, but for a line `...` (any number of
/// lines) and `[..]` within a line (any text).
fn matches(expected: &[String], got: &[&str]) -> bool {
    match expected.split_first() {
        None => got.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=got.len()).any(|skip| matches(rest, &got[skip..]))
        }
        Some((first, rest)) => got
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && matches(rest, more)),
    }
}

/// One line: exact, but for `[..]`, which matches any text.
fn line_matches(expected: &str, got: &str) -> bool {
    let mut pieces = expected.split("[..]");
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = got.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    for (i, piece) in pieces.iter().enumerate() {
        if i + 1 == pieces.len() {
            return rest.ends_with(piece);
        }
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// `PATH` with the built binary's directory first.
fn path() -> std::ffi::OsString {
    let bin = Path::new(env!("CARGO_BIN_EXE_isolation-lab"));
    let dir = bin
        .parent()
        .expect("the binary has a directory")
        .to_path_buf();
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(dir).chain(std::env::split_paths(&inherited));
    std::env::join_paths(paths).expect("a PATH")
}

/// What checking one doc found.
#[derive(Debug, Default)]
struct Checked {
    blocks: usize,
    commands: usize,
    pointers: usize,
    failures: Vec<String>,
}

/// Whether `program` is an executable file in one of `path`'s directories.
fn on_path(path: &std::ffi::OsStr, program: &str) -> bool {
    std::env::split_paths(path).any(|dir| dir.join(program).is_file())
}

/// Runs and checks every claim of the doc at `relative` (from the repository's root).
fn check(root: &Path, relative: &str) -> Checked {
    let markdown = std::fs::read_to_string(root.join(relative))
        .unwrap_or_else(|e| panic!("{relative} cannot be read: {e}"));
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("docs")
        .join(relative.replace('/', "__"));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("a scratch directory");
    let path = path();
    let mut checked = Checked::default();
    for claim in claims(&markdown) {
        match claim {
            Claim::Block => checked.blocks += 1,
            Claim::Refused { line, why } => {
                checked.failures.push(format!("{relative}:{line}: {why}"));
            }
            Claim::Command {
                line,
                command,
                expected,
                needs,
            } => {
                if let Some(program) = needs.filter(|program| !on_path(&path, program)) {
                    let _ = writeln!(
                        std::io::stderr(),
                        "skipped {relative}:{line}: {program} is not on PATH"
                    );
                    continue;
                }
                checked.commands += 1;
                // stdout and stderr into one pipe, as a terminal shows them.
                let output = Command::new("sh")
                    .arg("-c")
                    .arg(format!("exec 2>&1\n{command}"))
                    .current_dir(&scratch)
                    .env("PATH", &path)
                    .stdin(Stdio::null())
                    .output()
                    .expect("sh starts");
                let got = String::from_utf8_lossy(&output.stdout);
                let got: Vec<&str> = got.lines().collect();
                let exited = output.status.success();
                if !exited || !matches(&expected, &got) {
                    let first = expected
                        .iter()
                        .zip(&got)
                        .position(|(e, g)| !line_matches(e, g))
                        .map_or_else(
                            || "the number of lines".to_owned(),
                            |i| format!("line {} of the output", i + 1),
                        );
                    checked.failures.push(format!(
                        "{relative}:{line}: $ {command}\n  {}; first difference: {first}\n\
                         --- expected ({} lines)\n{}\n--- got ({} lines)\n{}\n---",
                        if exited {
                            "exit status 0".to_owned()
                        } else {
                            format!("{} (every command must exit 0)", output.status)
                        },
                        expected.len(),
                        expected.join("\n"),
                        got.len(),
                        got.join("\n"),
                    ));
                }
            }
            Claim::Pointer {
                line,
                file,
                pointer,
                value,
            } => {
                checked.pointers += 1;
                let fail = |why: String| format!("{relative}:{line}: `{file}#{pointer}`: {why}");
                let json = std::fs::read(scratch.join(&file))
                    .map_err(|e| format!("no earlier command of {relative} saved it ({e})"))
                    .and_then(|bytes| {
                        serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string())
                    });
                let found = match &json {
                    Ok(json) => json
                        .pointer(&pointer)
                        .ok_or("resolves to nothing".to_owned()),
                    Err(e) => Err(e.clone()),
                };
                let failure = match (found, value) {
                    (Err(why), _) => Some(fail(why)),
                    (Ok(_), None) => None,
                    (Ok(found), Some(shown)) => match serde_json::from_str::<Value>(&shown) {
                        Err(e) => Some(fail(format!(
                            "the value shown, `{shown}`, is not JSON: {e}"
                        ))),
                        Ok(shown) if &shown == found => None,
                        Ok(shown) => Some(fail(format!(
                            "the doc shows {shown}, the report holds {found}"
                        ))),
                    },
                };
                checked.failures.extend(failure);
            }
        }
    }
    checked
}

/// `README.md` and every `docs/*.md`, as paths from the repository's root.
fn docs(root: &Path) -> Vec<String> {
    let mut docs = vec!["README.md".to_owned()];
    let entries = std::fs::read_dir(root.join("docs")).expect("docs/ is readable");
    for entry in entries {
        let name = entry.expect("a directory entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs.sort();
    docs
}

/// Every checked block, command and pointer in the README and docs/ still holds; the docs a
/// class runs on (the guide, the handout, the answers) do have checked commands.
#[test]
fn every_shown_command_still_prints_what_the_docs_show() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let docs = docs(&root);
    let results: Vec<(String, (Checked, std::time::Duration))> = std::thread::scope(|scope| {
        let running: Vec<_> = docs
            .iter()
            .map(|doc| {
                (
                    doc,
                    scope.spawn(|| {
                        let started = std::time::Instant::now();
                        let checked = check(&root, doc);
                        (checked, started.elapsed())
                    }),
                )
            })
            .collect();
        running
            .into_iter()
            .map(|(doc, run)| (doc.clone(), run.join().expect("a doc's check ran")))
            .collect()
    });
    let mut failures = Vec::new();
    let (mut blocks, mut commands, mut pointers) = (0, 0, 0);
    for (doc, (checked, took)) in &results {
        println!(
            "{doc}: {} checked blocks, {} commands, {} pointers ({took:.2?})",
            checked.blocks, checked.commands, checked.pointers
        );
        blocks += checked.blocks;
        commands += checked.commands;
        pointers += checked.pointers;
        failures.extend(checked.failures.iter().cloned());
    }
    println!("in all: {blocks} checked blocks, {commands} commands, {pointers} pointers");
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
    for (doc, least) in [
        ("docs/instructor-guide.md", 1),
        ("docs/handout.md", 1),
        ("docs/answers.md", 1),
    ] {
        let checked = results.iter().find(|(d, _)| d == doc).map(|(_, (c, _))| c);
        let blocks = checked.map_or(0, |c| c.blocks);
        assert!(blocks >= least, "{doc} has {blocks} checked blocks");
    }
    let answers = results.iter().find(|(d, _)| d == "docs/answers.md");
    let answers = answers.map_or(0, |(_, (c, _))| c.pointers);
    assert!(
        answers >= 10,
        "the answer key cites the report: {answers} pointers"
    );
}

/// The harness finds what it must: a wrong output, a failing command, a pointer that does not
/// resolve or holds another value, a lab command outside a checked block, a cargo command
/// inside one; and its normalizations match only what they say.
#[test]
fn the_harness_catches_drift() {
    let doc = "\
Prose with `r.json#/inputs/held` = `4` and `r.json#/inputs/slots` = `3` and `r.json#/nope`.

```console
$ isolation-lab predict --held 4 | head -n 1
isolation-lab predict: --mode both --slots 2 --held 5
$ isolation-lab --held 4 > r.json
$ isolation-lab --held 9
$ cargo run
```

```sh
isolation-lab --held 4
```
";
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-harness");
    std::fs::create_dir_all(root.join("docs")).expect("a directory");
    std::fs::write(root.join("docs/drift.md"), doc).expect("written");
    let checked = check(&root, "docs/drift.md");
    let said = checked.failures.join("\n");
    assert_eq!(
        (checked.blocks, checked.commands, checked.pointers),
        (1, 3, 3),
        "{said}"
    );
    for failure in [
        "docs/drift.md:1: `r.json#/inputs/held`: no earlier command",
        "docs/drift.md:4: $ isolation-lab predict --held 4 | head -n 1",
        "docs/drift.md:7: $ isolation-lab --held 9\n  exit status: 2 (every command must exit 0)",
        "docs/drift.md:8: a console block runs the built binary, not cargo",
        "docs/drift.md:12: a command of the lab outside a console block",
    ] {
        assert!(said.contains(failure), "{failure:?} in:\n{said}");
    }
    // Now after the report exists: the held value holds, the others do not.
    let later = format!(
        "{}\n{}",
        doc.split_once("\n\n").expect("two parts").1,
        doc.lines().next().expect("a line")
    );
    std::fs::write(root.join("docs/drift.md"), later).expect("written");
    let said = check(&root, "docs/drift.md").failures.join("\n");
    assert!(!said.contains("`r.json#/inputs/held`"), "{said}");
    assert!(
        said.contains("`r.json#/inputs/slots`: the doc shows 3, the report holds 2"),
        "{said}"
    );
    assert!(
        said.contains("`r.json#/nope`: resolves to nothing"),
        "{said}"
    );

    let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
    assert!(matches(&lines("a\n...\nd"), &["a", "b", "c", "d"]));
    assert!(matches(&lines("a\n...\nd"), &["a", "d"]));
    assert!(!matches(&lines("a\n...\nd"), &["a", "b"]));
    assert!(!matches(&lines("a\nb"), &["a", "b", "c"]));
    assert!(matches(
        &lines("port 127.0.0.1:[..] open"),
        &["port 127.0.0.1:4242 open"]
    ));
    assert!(!matches(&lines("port [..] open"), &["port 4242 closed"]));
    assert!(!matches(&lines("exact"), &["exact "]));
    assert_eq!(percent_decoded("/a%20b/c~1d"), "/a b/c~1d");
    assert_eq!(
        pieces("a `x` b `` `y` `` c ``` no"),
        [
            Piece::Text("a "),
            Piece::Code("x"),
            Piece::Text(" b "),
            Piece::Other(" `y` "),
            Piece::Text(" c ``` no"),
        ]
    );
}
