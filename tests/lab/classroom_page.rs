//! The classroom page in a real browser: headless Chromium opens a live session at 1920×1080,
//! presses Next through the whole default sequence, and reads the DOM at the moments a class
//! stops at — partitioned S2 refused while the fast permit sits idle, then F1 answered 200
//! before the gate opens — then lets the room in. Every text on the page is checked to be at
//! least 18 pixels, and nothing is cut off. `ISOLATION_LAB_SCREENSHOTS=1 cargo test --test
//! classroom_page` writes its screenshots to `docs/`.

use crate::common;

use std::path::{Path, PathBuf};

use common::webdriver::{Browser, skip_without_browser};
use isolation_lab::policy::{Front, Inputs};
use serde_json::{Value, json};

/// Waits, in the page, until it has drawn at least `arguments[0]` control states (each order
/// the page sends ends with one) and has its order's answer (so its buttons are live again).
/// Event-driven (a MutationObserver); WebDriver bounds the wait.
const STATES: &str = r#"
const want = arguments[0];
return new Promise((resolve) => {
  const body = document.body;
  const done = () => Number(body.dataset.states) >= want && body.dataset.busy === "0";
  if (done()) return resolve(true);
  const seen = new MutationObserver(() => {
    if (done()) { seen.disconnect(); resolve(true); }
  });
  seen.observe(body, { attributes: true, attributeFilter: ["data-states", "data-busy"] });
});
"#;

/// What a class looks at, read from the DOM.
const READ: &str = r##"
return (function read() {
const text = (css) => { const e = document.querySelector(css); return e ? e.textContent : null; };
const state = (css) => { const e = document.querySelector(css); return e ? e.dataset.state : null; };
return {
  title: text("#title"),
  s2: text('.lane[data-request="S2"]'),
  f1: text('.lane[data-request="F1"]'),
  fast_cells: [...document.querySelectorAll('.pool[data-pool="fast"] .cell')].map((c) => c.dataset.state),
  gate: state("#gate"),
  verdict: text("#verdict"),
  room: text("#room"),
  lanes: [...document.querySelectorAll(".lane")].map((l) => l.dataset.request),
  next: text("#nextwords"),
  resources: text("#resources"),
  ledger: (document.querySelector("#ledger").lastElementChild || {}).textContent,
};
})();
"##;

/// Waits, in the page, until what `READ` reads is `arguments[0]` (a reloaded page has redrawn
/// itself from the event stream); WebDriver bounds the wait.
const READS: &str = r##"
// Keys in one order: the wanted object comes back from WebDriver with its keys sorted.
const canon = (o) => JSON.stringify(Object.keys(o).sort().map((k) => [k, o[k]]));
const want = canon(arguments[0]);
const read = () => canon((() => { READ })());
return new Promise((resolve) => {
  if (read() === want) return resolve(true);
  const seen = new MutationObserver(() => {
    if (read() === want) { seen.disconnect(); resolve(true); }
  });
  seen.observe(document.body, { childList: true, subtree: true, attributes: true });
});
"##;

/// The smallest text on the page, in CSS pixels, and whatever spills out of the window.
const LEGIBLE: &str = r##"
let smallest = 1000, where = "";
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (!node.textContent.trim() || node.parentElement.closest("script, style")) continue;
  const size = parseFloat(getComputedStyle(node.parentElement).fontSize);
  if (size < smallest) { smallest = size; where = node.textContent.trim().slice(0, 40); }
}
// Everything lies inside its part of the page (header, main, footer) and the window; only
// the ledger lets its oldest lines go out of sight above.
const spills = [];
for (const part of document.querySelectorAll("header, main, footer")) {
  const outer = part.getBoundingClientRect();
  for (const e of part.querySelectorAll("*")) {
    if (e.parentElement.closest("#ledger")) continue;
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
return { smallest, where, spills, width: document.documentElement.scrollWidth };
"##;

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs")
}

struct Page {
    browser: Browser,
    states: u64,
}

impl Page {
    /// Clicks `button` and waits until the page has drawn the answer's state.
    async fn press(&mut self, button: &str) -> Value {
        let element = self.browser.find(button).await.expect("the button");
        self.browser.click(&element).await.expect("a click");
        self.states += 1;
        self.wait().await;
        self.read().await
    }

    async fn wait(&self) {
        let drawn = self.browser.execute(STATES, &[json!(self.states)]).await;
        drawn.expect("the page draws the new state");
    }

    async fn read(&self) -> Value {
        self.browser.execute(READ, &[]).await.expect("the DOM")
    }

    async fn legible(&self, at: &str) {
        let seen = self.browser.execute(LEGIBLE, &[]).await.expect("the DOM");
        let smallest = seen["smallest"].as_f64().unwrap_or(0.0);
        assert!(smallest >= 18.0, "{at}: text of {smallest} px: {seen}");
        assert_eq!(seen["spills"], json!([]), "{at}: cut off: {seen}");
        assert_eq!(seen["width"], json!(1920), "{at}: {seen}");
    }

    async fn screenshot(&self, name: &str) {
        let png = self.browser.screenshot_png().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
        // The room's screenshot shows the session's token and port, so it differs on every run:
        // docs/ is rewritten only when asked, and a plain `cargo test` leaves the tree clean.
        if std::env::var_os("ISOLATION_LAB_SCREENSHOTS").is_some() {
            std::fs::write(docs().join(name), png).expect("docs/ is writable");
        }
    }
}

/// Waits, in the page, until an element matches `arguments[0]`; WebDriver bounds the wait.
const APPEARS: &str = r#"
const css = arguments[0];
return new Promise((resolve) => {
  if (document.querySelector(css)) return resolve(true);
  const seen = new MutationObserver(() => {
    if (document.querySelector(css)) { seen.disconnect(); resolve(true); }
  });
  seen.observe(document.body, { childList: true, subtree: true });
});
"#;

/// Presses → twice in a row, as a bouncing clicker does, and returns how many control orders
/// the page sent for it (each is sent before the page's first `await`, so the count is whole).
const CLICKER_BOUNCE: &str = r#"
const fetch = window.fetch;
let orders = 0;
window.fetch = (...args) => { orders += 1; return fetch(...args); };
for (let n = 0; n < 2; n++) {
  document.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight" }));
}
window.fetch = fetch;
return orders;
"#;

/// Headless Chromium presses Next through the whole default sequence, on both fronts. The DOM
/// shows partitioned S2 refused while the fast permit is idle, then F1 answered 200 before the
/// gate opens; then the room's requests join the lanes, and the verdict says the run matched.
#[tokio::test]
async fn the_page_steps_through_the_default_sequence_in_chromium() {
    if skip_without_browser("the_page_steps_through_the_default_sequence_in_chromium") {
        return;
    }
    let browser = Browser::start().await.expect("Chromium starts");
    browser.set_viewport(1920, 1080).await.expect("1920×1080");
    let mut page = Page { browser, states: 0 };
    for front in Front::ALL {
        let served = common::serve_classroom(Inputs::default(), front).await;
        step_through(&mut page, &served.url, front).await;
        let _ = served.leave.send(());
        let report = served.task.await.expect("joined").expect("the session ran");
        assert!(report.matches_model, "{report:?}");
        assert_eq!(report.room_requests.len(), 2, "{front:?}");
    }
    page.browser.quit().await.expect("the browser quits");
}

/// The default sequence and the room, pressed and read in the page at `url`; the async
/// front's pages are the screenshots in `docs/`.
async fn step_through(page: &mut Page, url: &str, front: Front) {
    let shots = front == Front::Async;
    page.browser.navigate(url).await.expect("the page loads");
    page.states = 1;
    page.wait().await;

    // Shared: S1, S2, F1, release, S-after, F-after, close; then open partitioned.
    for _ in 0..8 {
        page.press("#next").await;
    }
    let seen = page.read().await;
    assert!(
        seen["title"].as_str().unwrap_or("").contains("PARTITIONED"),
        "{seen}"
    );
    assert!(seen["room"].as_str().unwrap_or("").is_empty(), "{seen}");
    page.press("#next").await;
    // S2 by the presenter's clicker: a key, not a click — pressed twice before the page has
    // redrawn (a clicker's bounce, or a held key), which is still one step.
    let orders = page
        .browser
        .execute(CLICKER_BOUNCE, &[])
        .await
        .expect("a key");
    assert_eq!(orders, json!(1), "a double press sent {orders} orders");
    page.states += 1;
    page.wait().await;
    let seen = page.read().await;
    let s2 = seen["s2"].as_str().unwrap_or("");
    assert!(
        s2.contains("refused 503: slow pool full, held by S1"),
        "{seen}"
    );
    assert_eq!(seen["fast_cells"], json!(["idle"]), "{seen}");
    page.legible("partitioned S2").await;

    let seen = page.press("#next").await;
    let f1 = seen["f1"].as_str().unwrap_or("");
    assert!(f1.contains("answered 200 before release"), "{seen}");
    assert_eq!(seen["gate"], "closed", "{seen}");
    let resources = seen["resources"].as_str().unwrap_or("");
    let cost = match front {
        Front::Async => "a held request is a parked task",
        Front::Threaded => "each held request blocks one of those threads",
    };
    assert!(resources.contains(cost), "{seen}");
    if shots {
        page.screenshot("classroom.png").await;
    }
    page.legible("partitioned F1").await;
    // A reload rebuilds the page from the events so far: nothing lived only in the browser.
    page.browser.navigate(url).await.expect("the page reloads");
    let reads = READS.replace("READ", READ);
    let redrawn = page.browser.execute(&reads, &[seen]).await;
    redrawn.expect("the reloaded page draws what it drew before");
    let states = page
        .browser
        .execute("return Number(document.body.dataset.states);", &[]);
    page.states = states.await.expect("the DOM").as_u64().unwrap_or(0);

    for _ in 0..3 {
        page.press("#next").await;
    }
    // After the sequence the room is in: its requests join the lanes.
    let seen = page.read().await;
    let room = seen["room"].as_str().unwrap_or("").to_owned();
    assert!(room.contains("curl -s -H 'lab-room: "), "{seen}");
    let command = room.split("curl").nth(1).expect("a command");
    let token = &command.split("lab-room: ").nth(1).expect("a token")[..32];
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client");
    let base = url.trim_end_matches('/');
    let fast = http
        .get(format!("{base}/fast"))
        .header("lab-room", token)
        .send();
    assert_eq!(fast.await.expect("answered").status(), 200);
    page.press("#gateclose").await;
    let slow = http
        .get(format!("{base}/slow"))
        .header("lab-room", token)
        .send();
    let slow = tokio::spawn(slow);
    let held = json!(r#".lane[data-request="R2"] .chip.held"#);
    let appeared = page.browser.execute(APPEARS, &[held]).await;
    appeared.expect("R2 is drawn held at the room's gate");
    let seen = page.read().await;
    assert!(
        seen["ledger"]
            .as_str()
            .unwrap_or("")
            .contains("R2      held at gate"),
        "{seen}"
    );
    if shots {
        page.screenshot("classroom-room.png").await;
    }
    page.legible("the room").await;
    let seen = page.press("#roomtoggle").await;
    assert!(seen["room"].as_str().unwrap_or("").is_empty(), "{seen}");
    page.press("#gateopen").await;
    assert_eq!(slow.await.expect("joined").expect("answered").status(), 200);
    let seen = page.press("#next").await;
    assert!(
        seen["verdict"]
            .as_str()
            .unwrap_or("")
            .contains("Matches the model"),
        "{seen}"
    );
    if shots {
        page.screenshot("classroom-verdict.png").await;
    }
    page.legible("the verdict").await;
}
