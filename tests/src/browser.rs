//! Headless Chromium for the console's tests, driven over its DevTools
//! protocol (CDP): JSON commands on a websocket, one at a time, each
//! answered by the message with its `id` (the events in between are
//! skipped). A few commands are all the tests need (open a page, evaluate
//! JavaScript in it, take a screenshot, answer the browser's login prompt),
//! so this is a small client over a websocket crate rather than a driver
//! with the whole protocol generated. Events that arrive while a command
//! waits for its answer are handled there: a request paused for a login
//! prompt is answered as [`Page::answer_logins`] said.
//!
//! The browser runs in its own process group, killed whole on drop, with a
//! throwaway profile that is also its TMPDIR (so the scratch Chromium makes
//! there, its singleton socket's directory, goes with the profile rather
//! than stay in /tmp after the kill); it reaches loopback only (every other host name
//! resolves to nothing) and its DevTools port is on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long Chromium has to start and open its DevTools port.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one CDP command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);
/// How often [`Page::wait_for`] evaluates its condition.
const POLL: Duration = Duration::from_millis(100);

/// The Chromium binary: `$BATON_CHROMIUM`, else Debian's `chromium`.
pub fn chromium_bin() -> PathBuf {
    std::env::var_os("BATON_CHROMIUM").map_or_else(|| PathBuf::from("chromium"), PathBuf::from)
}

/// A headless Chromium with one page open.
#[derive(Debug)]
pub struct Browser {
    child: Child,
    _profile: TempDir,
    page: Page,
}

/// The page of a [`Browser`]: the CDP session attached to its tab.
#[derive(Debug)]
pub struct Page {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    /// How the browser's login prompts are answered, once asked to.
    login: Option<Login>,
    /// The `authChallenge` of every login prompt the browser showed.
    prompts: Vec<Value>,
}

/// The answer to the browser's HTTP login prompt.
#[derive(Debug, Clone)]
pub enum Login {
    /// Types this user and secret into it.
    As(String, String),
    /// Cancels it (the page then shows the 401's body).
    Cancel,
}

impl Browser {
    /// Starts Chromium and opens a blank page of `width` x `height`.
    pub async fn launch(width: u32, height: u32) -> Browser {
        Browser::launch_with(width, height, &[]).await
    }

    /// As [`Browser::launch`], with more Chromium flags.
    pub async fn launch_with(width: u32, height: u32, flags: &[&str]) -> Browser {
        let profile = tempfile::Builder::new()
            .prefix("baton-chromium-")
            .tempdir()
            .unwrap_or_else(|e| panic!("temp dir for chromium: {e}"));
        let child = spawn_chromium(profile.path(), width, height, flags);
        let mut browser = BrowserStart { child: Some(child) };
        let url = devtools_url(profile.path(), browser.child());
        let (socket, _) = tokio::time::timeout(
            COMMAND_TIMEOUT,
            tokio_tungstenite::connect_async(url.as_str()),
        )
        .await
        .unwrap_or_else(|_| panic!("chromium's DevTools at {url} did not answer"))
        .unwrap_or_else(|e| panic!("chromium's DevTools at {url}: {e}"));
        let mut page = Page {
            socket,
            session: String::new(),
            next_id: 0,
            login: None,
            prompts: Vec::new(),
        };
        let target = page
            .command("Target.createTarget", json!({ "url": "about:blank" }))
            .await;
        let target_id = target["targetId"].clone();
        let attached = page
            .command(
                "Target.attachToTarget",
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await;
        page.session = attached["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no CDP session: {attached}"))
            .to_string();
        page.command("Page.enable", json!({})).await;
        page.command("Network.enable", json!({})).await;
        page.set_size(width, height, false).await;
        Browser {
            child: browser.disarm(),
            _profile: profile,
            page,
        }
    }

    pub fn page(&mut self) -> &mut Page {
        &mut self.page
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

/// The Chromium process until the browser is up: killed if the start fails.
struct BrowserStart {
    child: Option<Child>,
}

impl BrowserStart {
    fn child(&mut self) -> &mut Child {
        self.child
            .as_mut()
            .unwrap_or_else(|| unreachable!("taken only by disarm"))
    }

    fn disarm(mut self) -> Child {
        self.child
            .take()
            .unwrap_or_else(|| unreachable!("taken only once"))
    }
}

impl Drop for BrowserStart {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            kill_group(child);
        }
    }
}

/// Kills Chromium and its helper processes: the process group it leads.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ =
            nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
    }
    let _ = child.wait();
}

fn spawn_chromium(profile: &Path, width: u32, height: u32, flags: &[&str]) -> Child {
    use std::os::unix::process::CommandExt;
    let bin = chromium_bin();
    Command::new(&bin)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--mute-audio",
            // Loopback only: any other host resolves to nothing.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
        ])
        .args(flags)
        .arg(format!("--user-data-dir={}", profile.display()))
        .env("TMPDIR", profile)
        .arg(format!("--window-size={width},{height}"))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}): install Debian's chromium (.ci/run does) or set BATON_CHROMIUM",
                bin.display()
            )
        })
}

/// The browser's DevTools websocket, from the `DevToolsActivePort` file
/// Chromium writes in its profile once it listens.
fn devtools_url(profile: &Path, child: &mut Child) -> String {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                return format!("ws://127.0.0.1:{port}{path}");
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("chromium exited at start: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "chromium opened no DevTools port within {START_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Page {
    /// Sends one CDP command (to the page's session once attached) and
    /// returns its `result`; panics on an error answer.
    pub async fn command(&mut self, method: &str, params: Value) -> Value {
        let exchange = async {
            let id = self.send(method, params).await;
            self.answer_to(id, method).await
        };
        let answer = tokio::time::timeout(COMMAND_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| panic!("CDP {method}: no answer within {COMMAND_TIMEOUT:?}"));
        if let Some(error) = answer.get("error") {
            panic!("CDP {method} failed: {error}");
        }
        answer["result"].clone()
    }

    /// Sends one CDP command without waiting for its answer; returns its id.
    async fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .unwrap_or_else(|e| panic!("CDP {method}: {e}"));
        id
    }

    /// The message answering command `id`, handling the events before it.
    async fn answer_to(&mut self, id: u64, method: &str) -> Value {
        loop {
            let frame = self
                .socket
                .next()
                .await
                .unwrap_or_else(|| panic!("CDP closed during {method}"))
                .unwrap_or_else(|e| panic!("CDP {method}: {e}"));
            let Message::Text(text) = frame else {
                continue;
            };
            let message: Value = serde_json::from_str(text.as_str())
                .unwrap_or_else(|e| panic!("CDP {method}: not JSON ({e}): {text}"));
            if message["id"] == json!(id) {
                return message;
            }
            self.on_event(&message).await;
        }
    }

    /// Lets a request paused by the `Fetch` domain go on, answering a
    /// login prompt as [`Page::answer_logins`] said.
    async fn on_event(&mut self, message: &Value) {
        let request_id = message["params"]["requestId"].clone();
        match message["method"].as_str() {
            Some("Fetch.requestPaused") => {
                let params = json!({ "requestId": request_id });
                self.send("Fetch.continueRequest", params).await;
            }
            Some("Fetch.authRequired") => {
                self.prompts
                    .push(message["params"]["authChallenge"].clone());
                let response = match &self.login {
                    Some(Login::As(user, secret)) => json!({
                        "response": "ProvideCredentials", "username": user, "password": secret,
                    }),
                    _ => json!({ "response": "CancelAuth" }),
                };
                let params = json!({ "requestId": request_id, "authChallengeResponse": response });
                self.send("Fetch.continueWithAuth", params).await;
            }
            _ => {}
        }
    }

    /// From now on the browser's HTTP login prompts (a 401 with
    /// `WWW-Authenticate`) are answered with `login`, as a person would.
    pub async fn answer_logins(&mut self, login: Login) {
        self.login = Some(login);
        let params = json!({ "handleAuthRequests": true, "patterns": [{ "urlPattern": "*" }] });
        self.command("Fetch.enable", params).await;
    }

    /// The challenge of every login prompt the browser showed so far.
    pub fn prompts(&self) -> &[Value] {
        &self.prompts
    }

    /// The viewport's size; `mobile` emulates a phone's screen.
    pub async fn set_size(&mut self, width: u32, height: u32, mobile: bool) {
        let metrics = json!({
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile,
        });
        self.command("Emulation.setDeviceMetricsOverride", metrics)
            .await;
    }

    /// Sends `Authorization` (HTTP basic auth) with every request of the
    /// page, its `fetch` calls included.
    pub async fn basic_auth(&mut self, user: &str, secret: &str) {
        let header = crate::http::basic_authorization(user, secret);
        let headers = json!({ "headers": { "Authorization": header } });
        self.command("Network.setExtraHTTPHeaders", headers).await;
    }

    /// Opens `url` (the load itself is awaited by polling the page).
    pub async fn navigate(&mut self, url: &str) {
        let answer = self.command("Page.navigate", json!({ "url": url })).await;
        if let Some(error) = answer.get("errorText") {
            panic!("navigating to {url}: {error}");
        }
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns
    /// its value; panics if it throws.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let params = json!({
            "expression": expression, "returnByValue": true, "awaitPromise": true,
        });
        let answer = self.command("Runtime.evaluate", params).await;
        if let Some(thrown) = answer.get("exceptionDetails") {
            panic!("{expression} threw: {thrown}");
        }
        answer["result"]["value"].clone()
    }

    /// Polls `expression` until it is a value other than `null`, `false`,
    /// `""` or `undefined`, for at most `within`; returns that value.
    pub async fn wait_for(&mut self, what: &str, expression: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        // The condition may throw while the page is still loading.
        let guarded = format!(
            "(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()"
        );
        loop {
            let value = self.eval(&guarded).await;
            let truthy =
                !matches!(&value, Value::Null | Value::Bool(false)) && value.as_str() != Some("");
            if truthy {
                return value;
            }
            if Instant::now() >= deadline {
                let body = self
                    .eval("document.body ? document.body.innerText : ''")
                    .await;
                panic!("{what}: not seen within {within:?}; the page shows:\n{body}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the element `selector` names (panics if there is none).
    pub async fn click(&mut self, selector: &str) {
        let selector_json = json!(selector);
        let clicked = self
            .eval(&format!(
                "(() => {{ const e = document.querySelector({selector_json}); if (!e) return false; e.click(); return true; }})()"
            ))
            .await;
        assert_eq!(clicked, json!(true), "no element {selector} to click");
    }

    /// A PNG of the page (the whole page when `full`), written to `path`.
    pub async fn screenshot(&mut self, path: &Path, full: bool) {
        let params = json!({ "format": "png", "captureBeyondViewport": full });
        let shot = self.command("Page.captureScreenshot", params).await;
        let data = shot["data"]
            .as_str()
            .unwrap_or_else(|| panic!("no screenshot: {shot}"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_else(|e| panic!("screenshot not base64: {e}"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[cfg(test)]
mod tests {
    use super::{Browser, START_TIMEOUT};
    use std::time::Instant;

    /// Chromium's scratch in TMPDIR is made in the profile, and goes with it.
    #[tokio::test]
    async fn a_browser_leaves_nothing_in_tmp() {
        let browser = Browser::launch(320, 240).await;
        let profile = browser._profile.path().to_path_buf();
        let scratch = || {
            std::fs::read_dir(&profile)
                .map(|dir| {
                    dir.flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with("org.chromium."))
                })
                .unwrap_or(false)
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while !scratch() {
            assert!(
                Instant::now() < deadline,
                "Chromium made no scratch directory in its profile (TMPDIR)"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        drop(browser);
        assert!(
            !profile.exists(),
            "{} outlived the browser",
            profile.display()
        );
    }
}
