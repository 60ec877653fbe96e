//! A minimal WebDriver client for browser tests. It starts Debian's `chromedriver` on a free
//! loopback port as a child process, opens one headless Chromium session with a fresh profile,
//! and offers the few commands a test needs: navigate, run a script, find, click, type, take a
//! screenshot, quit. Every call is bounded by a timeout that fails with the command's name; the
//! driver and its browser die with the test, whether it passes, panics or is killed.

use std::ffi::c_ulong;
use std::io::Write as _;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{TempDir, temp_dir};
use anyhow::{Context, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// Debian's Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's ChromeDriver, of the same version as [`CHROMIUM`].
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The bound on one WebDriver command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The bound on starting the driver, and on starting the browser with a new session: each
/// takes well under this on a loaded two-core machine.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The W3C key under which an element reference travels.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Whether the screenshots in `docs/` are to be rewritten: `ISOLATION_LAB_SCREENSHOTS` is set.
pub fn screenshots_asked() -> bool {
    std::env::var_os("ISOLATION_LAB_SCREENSHOTS").is_some()
}

/// Both programs the browser tests need are installed.
pub fn browser_available() -> bool {
    missing_browser().is_none()
}

/// For a test that needs a browser: when one is missing, writes the one line saying `test` is
/// skipped and why straight to stderr (where `cargo test` shows it: libtest captures `println!`
/// and `eprintln!`), and returns true; the test then returns.
pub fn skip_without_browser(test: &str) -> bool {
    match missing_browser() {
        Some(missing) => {
            let _ = writeln!(
                std::io::stderr(),
                "skipped {test}: {missing} is not installed"
            );
            true
        }
        None => false,
    }
}

fn missing_browser() -> Option<&'static str> {
    [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .find(|program| !Path::new(program).is_file())
}

/// An element found on the page, as WebDriver names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element(String);

/// A headless Chromium session driven through its own `chromedriver` child process.
///
/// Dropping it (on a panic too) kills and reaps the driver, which takes the browser with it,
/// and removes the browser's directory. [`Browser::quit`] ends the session politely first and
/// reports how that went.
#[derive(Debug)]
pub struct Browser {
    client: reqwest::Client,
    /// `http://127.0.0.1:<port>`: the driver.
    base: String,
    session: String,
    /// The browser's main process, as the driver reported it: killed only if it outlives the
    /// driver.
    browser_pid: Option<u32>,
    driver: Child,
    /// Reads the driver's output to its end, so a full pipe never stalls the driver.
    reader: Option<JoinHandle<()>>,
    /// Tells when the reader has seen the end of the driver's output: every process holding
    /// the pipe (the driver and the browser it started) has gone.
    drained: mpsc::Receiver<()>,
    /// The browser's own directory, removed last: its fresh profile ([`PROFILE`]) and the
    /// per-user directories it would otherwise write in the user's home ([`driver_command`]).
    dir: TempDir,
}

impl Browser {
    /// Starts `chromedriver` on a free loopback port, waits until it says it is ready, and opens
    /// a headless Chromium session: a 1280×720 window, a fresh profile in a temporary
    /// directory, no network of its own (no QUIC, sync, component updates or background
    /// requests).
    ///
    /// Call it on the test's own thread (the body of a `#[tokio::test]`), not inside
    /// `spawn_blocking`: the driver is told to die with the thread that started it.
    pub async fn start() -> anyhow::Result<Browser> {
        // Given port 0, the driver binds ::1 on a port the OS picks, then 127.0.0.1 on the same
        // port, and exits if that one is taken — as it is, again and again, once a test has left
        // thousands of loopback connections in TIME-WAIT. So the port is picked here, free on
        // both; another process may still take it first: then try another.
        let mut tries = 1;
        loop {
            match Browser::start_once().await {
                Err(e) if tries < 5 && format!("{e:#}").contains("port not available") => {
                    tries += 1;
                }
                started => return started,
            }
        }
    }

    async fn start_once() -> anyhow::Result<Browser> {
        // A directory only this user can enter (0700, under a random name), for the browser's
        // profile and per-user files. The session is incognito, so a page's storage (where a
        // classroom page keeps its control token) stays in the browser's memory; what the
        // browser does write is still no other user's to read.
        let dir = temp_dir("isolation-lab-chromium").context("creating the browser's directory")?;
        // The driver listens on loopback only, on the port given, and says when it does.
        let port = free_port().context("finding a free loopback port")?;
        let mut command = driver_command(port, dir.path());
        let mut driver = command
            .spawn()
            .with_context(|| format!("starting {CHROMEDRIVER}"))?;
        let stdout = driver.stdout.take().expect("stdout was piped");
        let (port_tx, port_rx) = oneshot::channel();
        let (drained_tx, drained) = mpsc::channel();
        let reader = thread::Builder::new()
            .name("chromedriver-output".to_owned())
            .spawn(move || read_driver_output(stdout, port_tx, drained_tx));
        let reader = match reader {
            Ok(reader) => reader,
            Err(e) => {
                stop(&mut driver);
                return Err(e).context("starting the thread that reads chromedriver");
            }
        };
        let client = reqwest::Client::builder().no_proxy().build();
        let mut browser = Browser {
            client: client.context("building the HTTP client")?,
            base: String::new(),
            session: String::new(),
            browser_pid: None,
            driver,
            reader: Some(reader),
            drained,
            dir,
        };
        // From here on, dropping `browser` on an error stops everything started so far.
        let port = tokio::time::timeout(START_TIMEOUT, port_rx).await;
        let port = match port {
            Ok(Ok(port)) => port?,
            Ok(Err(_)) => bail!("chromedriver's output reader stopped without a port"),
            Err(_) => bail!(
                "chromedriver did not say it was listening within {START_TIMEOUT:?} (timeout)"
            ),
        };
        browser.base = format!("http://127.0.0.1:{port}");
        browser.wait_ready().await?;
        browser.new_session().await?;
        Ok(browser)
    }

    /// Polls the driver's `/status` until it says ready. It normally does at the first look:
    /// the driver says it is listening only once it is.
    async fn wait_ready(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let status = self.command("status", "GET", "/status", None).await?;
            if status["ready"] == Value::Bool(true) {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                bail!("chromedriver not ready after {START_TIMEOUT:?} (timeout): {status}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn new_session(&mut self) -> anyhow::Result<()> {
        let profile = self.dir.path().join(PROFILE);
        let profile = format!("--user-data-dir={}", profile.display());
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            // A session that keeps nothing on disk: no history, cache or cookies written to the
            // profile's databases. The pages' session storage, all a test relies on, is kept in
            // memory for as long as the session lasts. The machine's busy CPU over the browser test measured 7.88 →
            // 7.00 s (medians of ten interleaved runs of the test alone; the paired difference
            // 0.68 s, 7 of 10 pairs quicker).
            "--incognito",
            // Less browser for the same pages. Chromium 156 preloads its address bar's
            // suggestion popups as a page of their own, in a renderer that took about 1 CPU-s
            // of the session; the tests never type into the address bar. The renderer and the
            // GPU thread run inside the browser's one process, so no message between them
            // crosses a process, and its frames are composited in software (it draws in
            // software here anyway): 7.6 → 6.3 CPU-s for the browser test, 5.0 → 4.2 s of its
            // time (medians of five interleaved runs of the test alone). One renderer process
            // and an in-process GPU thread, which this replaces, had taken the browser's
            // processes from 9.6 to 8.1 CPU-s in a session alone. Killed with the test (SIGKILL),
            // the browser still exits within about 1.5 s, its pipe to the driver gone.
            "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup",
            "--single-process",
            "--disable-gpu-compositing",
            // The smallest projector's window. A test sizes the viewport to each size it
            // checks (`set_viewport`, at or beyond the window); the crate's session measured
            // about 0.2 s less CPU in this window than in a 1920×1080 one (eight interleaved
            // pairs), its screenshots the same size at every viewport.
            "--window-size=1280,720",
            // The driver talks to the browser over a pipe rather than a debugging port, so
            // the browser exits as soon as the driver is gone, however it went.
            "--remote-debugging-pipe",
            &profile,
        ];
        if !dev_shm_has_room() {
            // Shared memory in files under /tmp instead, as in a container whose /dev/shm is
            // the usual 64 MiB: a browser out of shared memory crashes its tabs. Where
            // /dev/shm has room, those files cost the session about 0.6 s of CPU (measured:
            // the ext4 work of creating and removing them).
            args.push("--disable-dev-shm-usage");
        }
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
                    "timeouts": {
                        "script": COMMAND_TIMEOUT.as_millis() as u64,
                        "pageLoad": COMMAND_TIMEOUT.as_millis() as u64,
                        "implicit": 0,
                    },
                }
            }
        });
        let created = self.call(
            "new session",
            "POST",
            "/session",
            Some(capabilities),
            START_TIMEOUT,
        );
        let created = created.await?;
        self.session = created["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("new session: no sessionId in {created}"))?
            .to_owned();
        let pid = created["capabilities"]["goog:processID"].as_u64();
        self.browser_pid = pid.and_then(|pid| u32::try_from(pid).ok());
        Ok(())
    }

    /// Sizes the viewport (the page's `innerWidth` × `innerHeight`) to `width` × `height` CSS
    /// pixels at one device pixel per CSS pixel, and checks that it is. Chromium's DevTools
    /// emulation sets it exactly, whatever the window's frame or smallest width.
    pub async fn set_viewport(&self, width: u32, height: u32) -> anyhow::Result<()> {
        let metrics = json!({
            "cmd": "Emulation.setDeviceMetricsOverride",
            "params": { "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false },
        });
        let path = self.path("/goog/cdp/execute");
        self.command("set device metrics", "POST", &path, Some(metrics))
            .await?;
        let viewport = "return [innerWidth, innerHeight];";
        let sizes = self.execute(viewport, &[]).await?;
        let got = (sizes[0].as_i64(), sizes[1].as_i64());
        let wanted = (Some(i64::from(width)), Some(i64::from(height)));
        if got != wanted {
            bail!("set viewport: expected {width}×{height}, got {got:?}");
        }
        Ok(())
    }

    /// Opens `url` and waits until the page has loaded.
    pub async fn navigate(&self, url: &str) -> anyhow::Result<()> {
        let path = self.path("/url");
        let what = format!("navigate to {url}");
        self.command(&what, "POST", &path, Some(json!({ "url": url })))
            .await
            .map(drop)
    }

    /// Runs `script` (a function body: `return ...;`) in the page with `args` as `arguments`,
    /// and returns what it returned.
    pub async fn execute(&self, script: &str, args: &[Value]) -> anyhow::Result<Value> {
        let body = json!({ "script": script, "args": args });
        let path = self.path("/execute/sync");
        self.command("execute script", "POST", &path, Some(body))
            .await
    }

    /// The first element matching the CSS selector `css`; an error if there is none.
    pub async fn find(&self, css: &str) -> anyhow::Result<Element> {
        let body = json!({ "using": "css selector", "value": css });
        let what = format!("find {css:?}");
        let found = self
            .command(&what, "POST", &self.path("/element"), Some(body))
            .await?;
        let id = found[ELEMENT_KEY].as_str();
        let id = id.ok_or_else(|| anyhow!("{what}: no element reference in {found}"))?;
        Ok(Element(id.to_owned()))
    }

    /// Clicks `element` in its middle, as a user would.
    pub async fn click(&self, element: &Element) -> anyhow::Result<()> {
        let path = self.path(&format!("/element/{}/click", element.0));
        self.command("click", "POST", &path, Some(json!({})))
            .await
            .map(drop)
    }

    /// Types `text` into `element`.
    pub async fn send_keys(&self, element: &Element, text: &str) -> anyhow::Result<()> {
        let path = self.path(&format!("/element/{}/value", element.0));
        self.command("send keys", "POST", &path, Some(json!({ "text": text })))
            .await
            .map(drop)
    }

    /// Writes the viewport as a PNG image to `path`, when `ISOLATION_LAB_SCREENSHOTS` is set
    /// (the docs' screenshots are rewritten on request, so a plain `cargo test` leaves the tree
    /// as it was). Panics if the image is not a PNG or cannot be written.
    pub async fn save_screenshot(&self, path: &Path) {
        if !screenshots_asked() {
            return;
        }
        let png = self.screenshot_png().await.expect("a screenshot");
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{}: not a PNG",
            path.display()
        );
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// The viewport as a PNG image.
    pub async fn screenshot_png(&self) -> anyhow::Result<Vec<u8>> {
        let shot = self
            .command("screenshot", "GET", &self.path("/screenshot"), None)
            .await?;
        let encoded = shot
            .as_str()
            .ok_or_else(|| anyhow!("screenshot: not a string but {shot}"))?;
        STANDARD
            .decode(encoded)
            .context("screenshot: decoding its base64")
    }

    /// Ends the session (the driver closes the browser), then stops the driver and removes the
    /// browser's directory.
    pub async fn quit(self) -> anyhow::Result<()> {
        let path = self.path("");
        self.command("quit", "DELETE", &path, None).await.map(drop)
        // `self` drops here: the driver is killed and reaped, the browser's directory removed.
    }

    fn path(&self, command: &str) -> String {
        format!("/session/{}{command}", self.session)
    }

    /// One WebDriver command, bounded by [`COMMAND_TIMEOUT`].
    async fn command(
        &self,
        what: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        self.call(what, method, path, body, COMMAND_TIMEOUT).await
    }

    /// One WebDriver command, bounded by `limit`: its `value`, or an error naming `what` and
    /// saying what the driver answered, or that it did not answer in time.
    async fn call(
        &self,
        what: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
        limit: Duration,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let exchange = async {
            let request = match (method, body) {
                ("GET", _) => self.client.get(&url),
                ("DELETE", _) => self.client.delete(&url),
                (_, body) => self
                    .client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.unwrap_or_else(|| json!({})).to_string()),
            };
            let response = request.send().await?;
            let status = response.status();
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes))
        };
        let answered = tokio::time::timeout(limit, exchange).await;
        let answered = answered.map_err(|_| {
            anyhow!("WebDriver {what} ({method} {path}) got no answer within {limit:?} (timeout)")
        })?;
        let (status, bytes) =
            answered.with_context(|| format!("WebDriver {what} ({method} {path})"))?;
        let reply: Value = serde_json::from_slice(&bytes).with_context(|| {
            let text = String::from_utf8_lossy(&bytes);
            format!("WebDriver {what} ({method} {path}): HTTP {status}, not JSON: {text}")
        })?;
        let value = reply.get("value").cloned().unwrap_or(Value::Null);
        if !status.is_success() {
            let error = value["error"].as_str().unwrap_or("unknown error");
            let message = value["message"].as_str().unwrap_or("");
            bail!("WebDriver {what} ({method} {path}): HTTP {status}, {error}: {message}");
        }
        Ok(value)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The browser talks to the driver over a pipe, so it exits once the driver is gone.
        stop(&mut self.driver);
        let bound = Duration::from_secs(10);
        if self.drained.recv_timeout(bound).is_err() {
            // A browser still holding the driver's output outlived the driver: stop it too.
            if let Some(pid) = self.browser_pid {
                eprintln!("chromium {pid} outlived chromedriver by {bound:?}: killing it");
                kill_process(pid);
            }
            if self.drained.recv_timeout(bound).is_err() {
                eprintln!("chromedriver's output still open after the browser was killed");
                // Joining would hang the test: the reader is left to end with the process.
                self.reader.take();
            }
        }
        if let Some(reader) = self.reader.take()
            && reader.join().is_err()
        {
            eprintln!("the chromedriver output reader panicked");
        }
    }
}

/// The browser's profile, inside its own temporary directory.
const PROFILE: &str = "profile";

/// The least room in /dev/shm for the browser to keep its shared memory there: a 3840×2160
/// screenshot alone is a 32 MiB bitmap, and a tab's compositor frames come on top.
const DEV_SHM_ROOM: u64 = 512 << 20;

/// Whether /dev/shm is there with at least [`DEV_SHM_ROOM`] free for this user.
fn dev_shm_has_room() -> bool {
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path, and `stats` is written by `statvfs` before it is read.
    let stats = unsafe {
        if libc::statvfs(c"/dev/shm".as_ptr(), stats.as_mut_ptr()) != 0 {
            return false;
        }
        stats.assume_init()
    };
    stats.f_bavail.saturating_mul(stats.f_frsize) >= DEV_SHM_ROOM
}

/// The driver on loopback `port`, with `own` as the home of everything the browser keeps: the
/// profile, and the per-user configuration and cache directories, which Chromium and the
/// libraries it loads would otherwise fill in the user's home (`~/.config/chromium/Crash
/// Reports`, `~/.cache/dconf`), and the temporary and runtime directories, which they would
/// otherwise leave in `/tmp` (`pulse-*` from the audio client, `org.chromium.Chromium.*`). So
/// a browser test leaves nothing behind there.
fn driver_command(port: u16, own: &Path) -> Command {
    let mut command = Command::new(CHROMEDRIVER);
    command
        .arg(format!("--port={port}"))
        .env("XDG_CONFIG_HOME", own.join("config"))
        .env("XDG_CACHE_HOME", own.join("cache"))
        .env("XDG_RUNTIME_DIR", own)
        .env("TMPDIR", own)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    die_with_parent(&mut command);
    command
}

/// A port free on 127.0.0.1 and, where there is IPv6, on ::1 — as the driver will bind both.
fn free_port() -> io::Result<u16> {
    for _ in 0..16 {
        let v4 = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
        let port = v4.local_addr()?.port();
        match std::net::TcpListener::bind((std::net::Ipv6Addr::LOCALHOST, port)) {
            Ok(_) => return Ok(port),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            // No IPv6 loopback: the driver listens on IPv4 alone.
            Err(_) => return Ok(port),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no port free on both loopbacks",
    ))
}

/// Kills and reaps `driver`; it may have exited already.
fn stop(driver: &mut Child) {
    // An error means it has already exited; `wait` reaps it either way.
    let _ = driver.kill();
    if let Err(e) = driver.wait() {
        eprintln!("reaping chromedriver {}: {e}", driver.id());
    }
}

/// Reads the driver's output to its end: first the line saying which port it listens on, sent
/// on `port`, then whatever else it or the browser writes. `drained` says the output ended.
fn read_driver_output(
    stdout: std::process::ChildStdout,
    port: oneshot::Sender<anyhow::Result<u16>>,
    drained: mpsc::Sender<()>,
) {
    const STARTED: &str = "started successfully on port ";
    let mut port = Some(port);
    let mut seen = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(sender) = port.take_if(|_| line.contains(STARTED)) {
            let number = line.split(STARTED).nth(1).unwrap_or("");
            let number = number.trim_end_matches('.').trim();
            let parsed = number.parse::<u16>();
            let parsed = parsed.with_context(|| format!("chromedriver said {line:?}"));
            // The starter may have given up (timeout): nobody to tell then.
            let _ = sender.send(parsed);
        } else if port.is_some() {
            seen.push(line);
        }
    }
    if let Some(sender) = port {
        let said = seen.join(" | ");
        let _ = sender.send(Err(anyhow!(
            "chromedriver ended its output before saying it listened: {said}"
        )));
    }
    // The receiver may be gone if the browser was dropped without waiting.
    let _ = drained.send(());
}

/// Asks the kernel to kill the child when the thread that starts it ends (with the test
/// process, at the latest), so a driver — or any child a test starts — never outlives a test
/// that failed or was killed.
pub fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: between fork and exec only async-signal-safe calls are allowed: `prctl` and
    // `getppid` are system calls, and the errors are built without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: no signal would come then.
            if std::os::unix::process::parent_id() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Sends SIGKILL to `pid`, a process this client learned it started.
fn kill_process(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: `kill` takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
        eprintln!("killing {pid}: {}", io::Error::last_os_error());
    }
}
