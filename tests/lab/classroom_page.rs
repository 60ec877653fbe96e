//! The classroom page in a real browser, pressed as `docs/instructor-guide.md` tells an
//! instructor to press it: the crate's one headless Chromium (see `chromium.rs`), on the async
//! front; on the threaded front, segment 3, whose words there differ, to its verdict. At each
//! stop the guide names, the test reads what is on screen — the question to ask, F1 not yet
//! answered, the model's answer hidden — then presses on; at the richest moment it sizes the
//! window to 1280×720, 1920×1080 and 3840×2160 and checks that every text is at least 18 CSS
//! pixels, no text overflows its box (inside chips too), every button lies inside the window;
//! a narrow window stacks and scrolls. `ISOLATION_LAB_SCREENSHOTS=1 cargo test --test lab --
//! classroom_page picture` writes the screenshots to `docs/`.

use crate::common;

use std::path::{Path, PathBuf};

use common::webdriver::{Browser, screenshots_asked};
use isolation_lab::classroom::ClassroomReport;
use isolation_lab::policy::{Front, Held, Inputs, ModeChoice, Slots};
use serde_json::{Value, json};

/// What a class looks at, read from the DOM.
const READ: &str = r##"
const text = (css) => { const e = document.querySelector(css); return e ? e.textContent : null; };
const state = (css) => { const e = document.querySelector(css); return e ? e.dataset.state : null; };
const lane = (r) => text(`.lane[data-request="${r}"]`);
const shown = (e) => !!e && getComputedStyle(e).display !== "none" && e.getClientRects().length > 0;
return {
  title: text("#title"),
  policy: text("#policy"),
  s1: lane("S1"), s2: lane("S2"), f1: lane("F1"), beat: lane("heartbeat"),
  marks: [...document.querySelectorAll("#predict td.mark span")].map((m) => m.className),
  cells: [...document.querySelectorAll(".pool .cell")].map((c) => c.closest(".pool").dataset.pool + ":" + c.dataset.state),
  gate: state("#gate"),
  badge: text("#verdict"),
  asking: !!document.querySelector("#verdict .badge.ask"),
  room: text("#room"),
  next: text("#nextwords"),
  resources: text("#resources"),
  ledger: (document.querySelector("#ledger").lastElementChild || {}).textContent || "",
  predictions: Object.fromEntries([...document.querySelectorAll("#predict tr[data-question]")].map((tr) =>
    [tr.dataset.question, tr.querySelector("td.predicted").dataset.shown === "1" ? tr.children[1].textContent : null])),
  enabled: [...document.querySelectorAll("button, select")].filter((b) => shown(b) && !b.disabled).map((b) => b.id || b.textContent),
  controls: shown(document.querySelector("#next")),
  ended: document.body.classList.contains("ended"),
  form: ["mode", "slots", "held"].map((id) => document.getElementById(id).value),
};
"##;

/// Presses the button `arguments[0]` (or, with `arguments[1]`, sends that key) and waits until
/// the page has drawn the control state its order ends with and has the order's answer;
/// `arguments[2]` times, each press after the last one's answer; then reads the page.
/// Event-driven (a MutationObserver); WebDriver bounds the wait.
const PRESS: &str = r##"
const [id, key, times] = arguments;
const body = document.body;
for (let n = 0; n < times; n++) {
  const before = Number(body.dataset.states);
  const done = () => Number(body.dataset.states) > before && body.dataset.busy === "0";
  if (key) document.dispatchEvent(new KeyboardEvent("keydown", { key }));
  else document.getElementById(id).click();
  await new Promise((resolve) => {
    if (done()) return resolve();
    const seen = new MutationObserver(() => { if (done()) { seen.disconnect(); resolve(); } });
    seen.observe(body, { attributes: true, attributeFilter: ["data-states", "data-busy"] });
  });
}
return (() => { READ })();
"##;

/// Waits until `arguments[0]` (a JS expression) holds in the page, redrawing as the stream
/// tells it; then reads the page.
const UNTIL: &str = r##"
const holds = new Function("return (" + arguments[0] + ");");
await new Promise((resolve) => {
  if (holds()) return resolve();
  const seen = new MutationObserver(() => { if (holds()) { seen.disconnect(); resolve(); } });
  seen.observe(document.body, { childList: true, subtree: true, attributes: true });
});
return (() => { READ })();
"##;

/// The smallest text on the page, any text wider than its box, any element outside its part of
/// the page or the window, any button or select outside the window, and whether the page
/// scrolls.
const FITS: &str = r##"
let smallest = 1000, where = "";
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (!node.textContent.trim() || node.parentElement.closest("script, style")) continue;
  if (!node.parentElement.getClientRects().length) continue;
  const size = parseFloat(getComputedStyle(node.parentElement).fontSize);
  if (size < smallest) { smallest = size; where = node.textContent.trim().slice(0, 40); }
}
const overflows = [], spills = [], outside = [];
const stacked = innerWidth < 1280 || innerHeight < 720;
for (const part of document.querySelectorAll("header, main, footer")) {
  const outer = part.getBoundingClientRect();
  for (const e of part.querySelectorAll("*")) {
    if (!e.getClientRects().length || e.closest("svg")) continue;
    // Text wider than its box: clipped, or spilling out of it (a chip that does not wrap).
    if (e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0) {
      overflows.push(e.tagName + "." + e.className + ": " + e.textContent.trim().slice(0, 50) + ` (${e.scrollWidth} > ${e.clientWidth})`);
    }
    if (stacked || e.parentElement.closest("#ledger")) continue;
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const box = (e.parentElement.closest("section") || part).getBoundingClientRect();
    const right = Math.min(outer.right, box.right, innerWidth), bottom = Math.min(outer.bottom, box.bottom, innerHeight);
    if (r.right > right + 0.5 || r.bottom > bottom + 0.5
        || r.left < Math.max(outer.left, box.left) - 0.5 || r.top < Math.max(outer.top, box.top) - 0.5) {
      spills.push(e.tagName + "." + e.className + ": " + e.textContent.trim().slice(0, 40));
    }
  }
}
for (const b of document.querySelectorAll("button, select")) {
  if (!b.getClientRects().length || getComputedStyle(b).display === "none") continue;
  const r = b.getBoundingClientRect();
  const inside = r.left >= -0.5 && r.top >= -0.5 && r.right <= innerWidth + 0.5 && r.bottom <= innerHeight + 0.5;
  if (!inside && !stacked) outside.push(b.id || b.textContent.trim());
}
const root = document.documentElement;
const beyond = [...document.querySelectorAll("body *")].filter((e) => e.getBoundingClientRect().right > innerWidth + 0.5)
  .map((e) => e.tagName + "#" + e.id + "." + e.className).slice(0, 8);
return { beyond, smallest, where, overflows, spills, outside, wide: root.scrollWidth > innerWidth + 0.5,
  scrolls: root.scrollHeight > innerHeight + 0.5, size: [innerWidth, innerHeight] };
"##;

/// The window the guide is followed in: the smallest projector the page is made for. Its sizes
/// are in rem, which grow with a 16:9 window, so each stop reads as at any projector's size,
/// and the browser draws the fewest pixels for each press.
const WINDOW: (u32, u32) = (1280, 720);

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs")
}

fn inputs(mode: ModeChoice, slots: u8, held: u8) -> Inputs {
    Inputs {
        mode,
        slots: Slots::new(slots).expect("allowed"),
        held: Held::new(held).expect("allowed"),
    }
}

/// A string field of what the page showed, or "".
fn text<'a>(seen: &'a Value, field: &str) -> &'a str {
    seen[field].as_str().unwrap_or("")
}

struct Page {
    browser: Browser,
}

impl Page {
    /// Opens `url` and waits until the page has drawn its session's first control state.
    async fn open(&self, url: &str) -> Value {
        // A URL that differs from the page's own only after `#` would not load the page
        // afresh: it is opened from another document. (Another session's port, or another
        // path or query, loads a new document anyway.)
        let here = self.browser.execute("return location.href;", &[]).await;
        let here = here.expect("the page's address");
        let document = |url: &str| url.split('#').next().unwrap_or_default().to_owned();
        if here.as_str().map(document) == Some(document(url)) {
            let blank = self.browser.navigate("about:blank").await;
            blank.expect("a blank page");
        }
        self.browser.navigate(url).await.expect("the page loads");
        self.until("Number(document.body.dataset.states) >= 1")
            .await
    }

    /// Presses the button `id` as a pointer does: WebDriver finds where it is on screen and
    /// clicks there (so it must be visible and not covered); then waits for its answer.
    async fn click(&self, id: &str) -> Value {
        let states = "return Number(document.body.dataset.states);";
        let before = self.browser.execute(states, &[]).await.expect("the DOM");
        let element = self
            .browser
            .find(&format!("#{id}"))
            .await
            .expect("the button");
        self.browser.click(&element).await.expect("a click");
        let after = format!(
            "Number(document.body.dataset.states) > {before} && document.body.dataset.busy === '0'"
        );
        self.until(&after).await
    }

    /// Presses the button `id` (its click handler, as a key or a clicker would) and waits for
    /// the answer's control state; returns what the page then shows.
    async fn press(&self, id: &str) -> Value {
        self.presses(id, 1).await
    }

    /// Presses the button `id` `times` times, each after the last one's answer, in one script;
    /// returns what the page shows after the last.
    async fn presses(&self, id: &str, times: usize) -> Value {
        let script = PRESS.replace("READ", READ);
        let seen = self
            .browser
            .execute(&script, &[json!(id), Value::Null, json!(times)])
            .await;
        seen.unwrap_or_else(|e| panic!("pressing {id} {times} times: {e:#}"))
    }

    /// Sends `key` as a presenter's clicker or keyboard does, and waits for the answer.
    async fn key(&self, key: &str) -> Value {
        let script = PRESS.replace("READ", READ);
        let seen = self
            .browser
            .execute(&script, &[Value::Null, json!(key), json!(1)])
            .await;
        seen.unwrap_or_else(|e| panic!("pressing {key:?}: {e:#}"))
    }

    /// Presses Next `times` times; returns what the page shows after the last.
    async fn next(&self, times: usize) -> Value {
        self.presses("next", times).await
    }

    async fn until(&self, holds: &str) -> Value {
        let script = UNTIL.replace("READ", READ);
        let seen = self.browser.execute(&script, &[json!(holds)]).await;
        seen.unwrap_or_else(|e| panic!("waiting for {holds}: {e:#}"))
    }

    /// At each projector size, and in a narrow window: legible, nothing overflowing, every
    /// control on screen (or, narrow, stacked and scrolling); the screenshots of `shots`.
    async fn fits(&self, at: &str, shots: Option<&str>) {
        let sizes = [(1280, 720), (1920, 1080), (3840, 2160), (412, 915)];
        for (width, height) in sizes {
            self.browser
                .set_viewport(width, height)
                .await
                .expect("sized");
            let seen = self.browser.execute(FITS, &[]).await.expect("the DOM");
            // Taken before the checks, so a failure leaves its picture.
            if let Some(name) = shots.filter(|_| width >= 1280) {
                let name = match width {
                    1920 => format!("{name}.png"),
                    _ => format!("{name}-{width}x{height}.png"),
                };
                self.screenshot(&name).await;
            }
            let what = format!("{at} at {width}×{height}: {seen}");
            let smallest = seen["smallest"].as_f64().unwrap_or(0.0);
            assert!(smallest >= 18.0, "{what}");
            assert_eq!(seen["overflows"], json!([]), "{what}");
            assert_eq!(
                (&seen["wide"], &seen["beyond"]),
                (&json!(false), &json!([])),
                "{what}"
            );
            if width >= 1280 {
                assert_eq!(seen["spills"], json!([]), "{what}");
                assert_eq!(seen["outside"], json!([]), "{what}");
                assert_eq!(seen["scrolls"], false, "{what}");
            } else {
                assert_eq!(seen["scrolls"], true, "stacked: {what}");
            }
        }
        self.guide_window().await;
    }

    /// Sizes the window back to the guide's, [`WINDOW`].
    async fn guide_window(&self) {
        let (width, height) = WINDOW;
        self.browser
            .set_viewport(width, height)
            .await
            .expect("sized");
    }

    /// [`Page::screenshot`] at 1920×1080, the size of `docs/classroom-ask.png` and the other
    /// pictures taken on the guide's way; then the window is the guide's again.
    async fn projector_screenshot(&self, name: &str) {
        if !screenshots_asked() {
            return;
        }
        self.browser.set_viewport(1920, 1080).await.expect("sized");
        self.screenshot(name).await;
        self.guide_window().await;
    }

    /// Writes the page as it is now to `docs/name`, when asked: the room's screenshot shows
    /// the session's token and port, so it differs on every run, and a plain `cargo test`
    /// leaves the tree clean (and skips the time a 3840×2160 picture takes).
    async fn screenshot(&self, name: &str) {
        self.browser.save_screenshot(&docs().join(name)).await;
    }
}

/// Headless Chromium follows the instructor's guide press by press: segment 2 (`--mode shared
/// --held 1`) and segment 3 (the default), stopping where the guide stops and reading the screen
/// there; then the room joins, the page is sized for every projector, and Finish asks once and
/// ends the session with the terminal's verdict. Segment 3 again on the threaded front, to the
/// stop where the page says what a held request costs there, sized for every projector with
/// those words: the page draws what the stream tells it, and `classroom.rs` checks that the
/// stream tells each front's run as its report does. Then `browser` quits.
pub(crate) async fn the_page_follows_the_instructors_guide(browser: Browser) {
    let page = Page { browser };
    page.guide_window().await;
    segment_2(&page).await;
    segment_3(&page, Front::Async).await;
    segment_3(&page, Front::Threaded).await;
    shown_predictions(&page).await;
    blocked(&page).await;
    page.browser.quit().await.expect("the browser quits");
}

/// Segment 2, live: "press Next twice (a fresh server, then S1) and stop", and so on.
async fn segment_2(page: &Page) {
    let served = common::serve_classroom(inputs(ModeChoice::Shared, 2, 1), Front::Async).await;
    let seen = page.open(&served.url).await;
    // The page opens at the first step: nothing sent, the server not yet open.
    assert!(
        text(&seen, "next").starts_with("Open a fresh server"),
        "{seen}"
    );
    assert!(text(&seen, "s1").contains("not sent yet"), "{seen}");
    assert!(text(&seen, "policy").contains("not started"), "{seen}");
    // New run starts from the command line's inputs.
    assert_eq!(seen["form"], json!(["shared", "2", "1"]), "{seen}");
    // Its first press as a pointer presses: the button is where the window shows it.
    let seen = page.click("next").await;
    assert!(text(&seen, "next").starts_with("Send S1"), "{seen}");
    let seen = page.press("next").await;
    // Stop: S1 held, one of two cells taken, no answer; ask what F1 will get.
    assert!(text(&seen, "s1").contains("held at gate"), "{seen}");
    assert!(!text(&seen, "s1").contains("answered"), "{seen}");
    assert_eq!(
        seen["cells"],
        json!(["shared:taken", "shared:free"]),
        "{seen}"
    );
    assert!(seen["asking"] == true && text(&seen, "badge").contains("what will F1 get?"));
    assert!(text(&seen, "f1").contains("not sent yet"), "{seen}");
    assert_eq!(seen["predictions"]["F1 while held"], Value::Null);
    let seen = page.press("next").await;
    assert!(
        text(&seen, "f1").contains("answered 200 before release"),
        "{seen}"
    );
    assert_eq!(seen["gate"], "closed", "{seen}");
    let f1 = text(&seen["predictions"], "F1 while held");
    assert_eq!(
        f1, "200, shared pool",
        "shown once F1's answer is in: {seen}"
    );
    let seen = page.press("next").await;
    assert_eq!(seen["gate"], "open", "{seen}");
    assert!(
        text(&seen, "s1").contains("answered 200 after release"),
        "{seen}"
    );
    let seen = page.next(3).await;
    assert!(text(&seen, "badge").contains("Matches the model"), "{seen}");
    finish(page, served, "Session over: matches the model").await;
}

/// Segment 3, live: shared to F1's stop and through; partitioned to the stops before S2 and
/// before F1; then the room, the sizes, a reload, the room's view, and Finish. On the threaded
/// front: the sizes, then on to the verdict and Finish.
async fn segment_3(page: &Page, front: Front) {
    let served = common::serve_classroom(Inputs::default(), front).await;
    page.open(&served.url).await;
    // "Next opens a fresh server, Next sends S1, Next sends S2. Stop here."
    let seen = page.next(3).await;
    assert!(text(&seen, "s1").contains("held at gate"), "{seen}");
    assert!(text(&seen, "s2").contains("held at gate"), "{seen}");
    assert_eq!(
        seen["cells"],
        json!(["shared:taken", "shared:taken"]),
        "{seen}"
    );
    assert_eq!(seen["gate"], "closed", "{seen}");
    let next = "Send F1 to /fast (shared pool) while the slow work is held";
    assert_eq!(text(&seen, "next"), next, "{seen}");
    assert!(text(&seen, "badge").contains("Ask the room: what will F1 get?"));
    assert!(text(&seen, "f1").contains("not sent yet"), "{seen}");
    let hidden = seen["predictions"].as_object().expect("rows");
    assert!(
        hidden.values().all(Value::is_null),
        "every answer hidden: {seen}"
    );
    if front == Front::Async {
        page.projector_screenshot("classroom-ask.png").await;
    }
    let seen = page.press("next").await;
    assert!(
        text(&seen, "f1").contains("refused 503: shared pool full, held by S1, S2"),
        "{seen}"
    );
    // "Next opens the gate, Next, Next sends the probes, Next closes and checks."
    let seen = page.next(4).await;
    assert!(text(&seen, "badge").contains("Matches the model"), "{seen}");
    // "Partitioned: Next opens it, Next sends S1 and stop."
    let seen = page.next(2).await;
    assert!(text(&seen, "title").contains("PARTITIONED"), "{seen}");
    assert!(text(&seen, "badge").contains("what will S2 get?"), "{seen}");
    assert!(text(&seen, "s2").contains("not sent yet"), "{seen}");
    assert_eq!(seen["predictions"]["Refused before F1"], Value::Null);
    assert_eq!(seen["cells"], json!(["slow:taken", "fast:idle"]), "{seen}");
    // S2 by the presenter's clicker: a key.
    let seen = page.key("ArrowRight").await;
    assert!(text(&seen, "s2").contains("refused 503: slow pool full, held by S1"));
    assert_eq!(seen["cells"], json!(["slow:taken", "fast:idle"]), "{seen}");
    assert!(text(&seen, "badge").contains("what will F1 get?"), "{seen}");
    assert_eq!(seen["predictions"]["F1 while held"], Value::Null);
    // Reveal (the R key) shows the model's answers before the evidence.
    let seen = page.key("r").await;
    let revealed = seen["predictions"].as_object().expect("rows");
    assert!(revealed.values().all(Value::is_string), "{seen}");
    let seen = page.press("next").await;
    assert!(
        text(&seen, "f1").contains("answered 200 before release"),
        "{seen}"
    );
    assert_eq!(seen["gate"], "closed", "{seen}");
    let cost = match front {
        Front::Async => "a held request is a parked task",
        Front::Threaded => "each held request blocks one of those threads",
    };
    assert!(text(&seen, "resources").contains(cost), "{seen}");
    let shots = (front == Front::Async).then_some("classroom");
    page.fits("partitioned F1", shots).await;
    if front == Front::Threaded {
        // The rest draws the messages the async front's run sends too.
        let seen = page.next(4).await;
        assert!(text(&seen, "badge").contains("Matches the model"), "{seen}");
        finish(page, served, "Session over: matches the model").await;
        return;
    }
    // A reload rebuilds the page from the events so far: nothing lived only in the browser.
    let reloaded = page.open(&served.url.replace("/#", "/?reloaded#")).await;
    for field in ["s2", "f1", "cells", "gate", "next", "predictions"] {
        assert_eq!(reloaded[field], seen[field], "{field} after a reload");
    }
    room(page, &served.url).await;
    let seen = page.press("next").await;
    assert!(text(&seen, "badge").contains("Matches the model"), "{seen}");
    page.projector_screenshot("classroom-verdict.png").await;
    finish(page, served, "Session over: matches the model").await;
}

/// After the sequence the room is in: its requests join the lanes, the room's gate holds one,
/// and the room's view (the address without the token) shows the commands and no control.
async fn room(page: &Page, url: &str) {
    let seen = page.next(3).await;
    let room = text(&seen, "room").to_owned();
    assert!(room.contains("curl -s -H 'lab-room: "), "{seen}");
    assert!(room.contains("/slow"), "{seen}");
    let command = room.split("curl").nth(1).expect("a command");
    let token = common::room_token_in(command);
    let http = common::client();
    let base = common::base_url(url);
    let fast = http
        .get(format!("{base}/fast"))
        .header("lab-room", token)
        .send();
    assert_eq!(fast.await.expect("answered").status(), 200);
    page.press("gateclose").await;
    let slow = http
        .get(format!("{base}/slow"))
        .header("lab-room", token)
        .send();
    let slow = tokio::spawn(slow);
    let held = r#"!!document.querySelector('.lane[data-request="R2"] .chip.held')"#;
    let seen = page.until(held).await;
    assert!(
        text(&seen, "ledger").contains("R2      held at gate"),
        "{seen}"
    );
    page.fits("the room", None).await;
    page.projector_screenshot("classroom-room.png").await;
    // The room's view: a tab without the token sees the board and the commands, no controls.
    page.browser
        .execute("sessionStorage.clear();", &[])
        .await
        .expect("cleared");
    let watching = page.open(&format!("{base}/")).await;
    assert_eq!(watching["controls"], false, "{watching}");
    assert!(text(&watching, "room").contains("lab-room: "), "{watching}");
    assert!(text(&watching, "s2").contains("refused 503"), "{watching}");
    page.open(url).await;
    // A room that sends more than fits: the sequence's lanes stay, then the room's latest, in
    // the order they came, and a line counts the rest.
    let lanes =
        r#"return [...document.querySelectorAll('#lanes .lane')].map((l) => l.dataset.request);"#;
    let before = page.browser.execute(lanes, &[]).await.expect("the lanes");
    let sequence: Vec<Value> = (before.as_array().expect("a list").iter())
        .filter(|r| !r.as_str().is_some_and(|r| r.starts_with('R')))
        .cloned()
        .collect();
    for _ in 0..60 {
        let fast = http
            .get(format!("{base}/fast"))
            .header("lab-room", token)
            .send();
        assert_eq!(fast.await.expect("answered").status(), 200);
    }
    page.until(r#"!!document.querySelector('.lane[data-request="R62"]')"#)
        .await;
    let after = page.browser.execute(lanes, &[]).await.expect("the lanes");
    let after = after.as_array().expect("a list");
    let (rooms, kept): (Vec<&Value>, Vec<&Value>) =
        (after.iter()).partition(|r| r.as_str().is_some_and(|r| r.starts_with('R')));
    assert_eq!(kept.into_iter().cloned().collect::<Vec<_>>(), sequence);
    let shown = rooms.len();
    assert!((1..62).contains(&shown), "{after:?}");
    let latest: Vec<Value> = (63 - shown..=62).map(|n| json!(format!("R{n}"))).collect();
    assert_eq!(rooms.into_iter().cloned().collect::<Vec<_>>(), latest);
    let more = "const box = document.getElementById('lanes'); \
                return [box.querySelector('.more')?.textContent, box.scrollHeight <= box.clientHeight];";
    let more = page.browser.execute(more, &[]).await.expect("the count");
    let hidden = 62 - shown;
    let says = format!("… and {hidden} earlier requests from the room (in the ledger)");
    assert_eq!(more, json!([says, true]));
    let seen = page.press("roomtoggle").await;
    assert_eq!(text(&seen, "room"), "", "{seen}");
    page.press("gateopen").await;
    assert_eq!(slow.await.expect("joined").expect("answered").status(), 200);
}

/// Finish asks once, in place; Keep going leaves everything as it was; Yes ends the session:
/// the page shows `verdict`, the terminal's, and every control is disabled.
async fn finish(page: &Page, served: common::Classroom, verdict: &str) -> ClassroomReport {
    let asked = page.browser.execute(
        "document.getElementById('finish').click(); return getComputedStyle(document.getElementById('confirm')).display;",
        &[],
    );
    assert_ne!(asked.await.expect("the DOM"), "none", "Finish asks");
    page.browser
        .execute("document.getElementById('finishno').click();", &[])
        .await
        .expect("kept going");
    let seen = page
        .until("!document.getElementById('confirm').offsetParent")
        .await;
    assert!(
        seen["enabled"]
            .as_array()
            .is_some_and(|e| e.contains(&json!("finish")))
    );
    page.browser
        .execute(
            "document.getElementById('finish').click(); document.getElementById('finishyes').click();",
            &[],
        )
        .await
        .expect("finished");
    let seen = page
        .until("document.body.classList.contains('ended')")
        .await;
    assert!(text(&seen, "badge").contains(verdict), "{seen}");
    assert_eq!(seen["enabled"], json!([]), "after the end: {seen}");
    let report = served.task.await.expect("joined").expect("the session ran");
    match report.verdict() {
        None => assert!(verdict.contains("matches the model")),
        Some(why) => assert!(text(&seen, "badge").contains(&why), "{seen}"),
    }
    report
}

/// `--show-predictions`: the model's answers are on the board from the start; a session ended
/// before its second policy says so, as the terminal does.
async fn shown_predictions(page: &Page) {
    let (announced, url) = tokio::sync::oneshot::channel();
    let (leave, left) = tokio::sync::oneshot::channel::<()>();
    let config = isolation_lab::classroom::Config {
        inputs: Inputs::default(),
        options: isolation_lab::coordinator::Options::default(),
        show_predictions: true,
        timeouts: isolation_lab::classroom::Timeouts::default(),
        room_requests: isolation_lab::classroom::ROOM_REQUESTS,
    };
    let task = tokio::spawn(isolation_lab::classroom::serve(
        config,
        async move {
            let _ = left.await;
        },
        move |urls: &isolation_lab::classroom::Urls| {
            let _ = announced.send(urls.instructor.clone());
            Ok(())
        },
    ));
    let url = url.await.expect("announced");
    let seen = page.open(&url).await;
    let shown = seen["predictions"].as_object().expect("rows");
    assert!(shown.values().all(Value::is_string), "{seen}");
    let seen = page.next(8).await;
    assert!(text(&seen, "badge").contains("Matches the model"), "{seen}");
    let served = common::Classroom { url, leave, task };
    let why = "partitioned: not run, the session ended before it";
    let report = finish(page, served, why).await;
    assert_eq!(report.verdict().as_deref(), Some(why));
}

/// `--work block` on one worker (`docs/blocking.md`): after F1's step its lane says it arrived
/// and sits unread, and the heartbeat's lane says it stopped; after release F1 is answered.
async fn blocked(page: &Page) {
    use isolation_lab::coordinator::Options;
    use isolation_lab::executor::{BlockingThreads, Executor, WorkStyle, Workers};
    let executor = Executor::new(
        WorkStyle::Block,
        Workers::CurrentThread,
        BlockingThreads::default(),
    );
    let options = Options::on(Front::Async).with_executor(executor);
    let served = common::serve_classroom_with(inputs(ModeChoice::Partitioned, 2, 2), options).await;
    let seen = page.open(&served.url).await;
    assert!(text(&seen, "policy").contains("--work block"), "{seen}");
    assert_eq!(
        seen["beat"],
        Value::Null,
        "no heartbeat before the server opens"
    );
    let seen = page.next(4).await;
    assert!(text(&seen, "f1").contains("arrived, unread"), "{seen}");
    assert!(text(&seen, "s2").contains("arrived, unread"), "{seen}");
    assert!(
        text(&seen, "beat").contains("stopped: no tick since S1 held"),
        "{seen}"
    );
    let seen = page.next(1).await;
    assert!(
        text(&seen, "f1").contains("answered 200 after release"),
        "{seen}"
    );
    let seen = page.next(3).await;
    assert!(text(&seen, "badge").contains("Matches the model"), "{seen}");
    // Each observation the page compares with the model's: the same.
    assert_eq!(seen["marks"], json!(vec!["same"; 6]), "{seen}");
    finish(page, served, "matches the model").await;

    // Spawn-blocking on one thread: S2 is admitted and queued, its permit held.
    let one = BlockingThreads::new(1).expect("1 is allowed");
    let executor = Executor::new(WorkStyle::SpawnBlocking, Workers::CurrentThread, one);
    let options = Options::on(Front::Async).with_executor(executor);
    let served = common::serve_classroom_with(inputs(ModeChoice::Partitioned, 3, 2), options).await;
    page.open(&served.url).await;
    let seen = page.next(4).await;
    assert!(text(&seen, "s2").contains("queued: permit held"), "{seen}");
    assert!(
        text(&seen, "f1").contains("answered 200 before release"),
        "{seen}"
    );
    assert!(!text(&seen, "beat").contains("stopped"), "{seen}");
    let seen = page.next(4).await;
    assert_eq!(seen["marks"], json!(vec!["same"; 6]), "{seen}");
    finish(page, served, "matches the model").await;
}
