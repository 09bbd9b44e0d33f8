//! A headless Chromium for the dashboard's tests, driven through W3C WebDriver
//! (Debian's `chromium` and `chromium-driver`, installed by `scripts/setup`). WebDriver is a
//! handful of JSON requests; they go through reqwest, the project's one HTTP client, rather
//! than a second client that a WebDriver crate would bring.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use serde_json::{Value, json};

use crate::process::Proc;

/// Where Debian puts them.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The key under which WebDriver names an element.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One browser session; the driver and the browser end when it is dropped.
pub struct Browser {
    http: reqwest::Client,
    base: String,
    session: String,
    _driver: Proc,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a `width`×`height` window.
    pub async fn start(width: u32, height: u32) -> Result<Self> {
        for (bin, pkg) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            if !Path::new(bin).is_file() {
                bail!("{bin} is missing: run scripts/setup (it installs Debian's {pkg})");
            }
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.local_addr()?.port()
        };
        let driver = Proc::spawn(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .context("cannot start chromedriver")?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && r.status().is_success()
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("chromedriver did not answer on port {port} within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": CHROMIUM,
                    "args": [
                        "--headless=new", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--no-first-run",
                        // For memory checks: exact heap figures and a gc() to call first.
                        "--enable-precise-memory-info", "--js-flags=--expose-gc",
                        format!("--window-size={width},{height}"),
                    ],
                },
            }},
        });
        let v = call(
            &http,
            reqwest::Method::POST,
            &format!("{base}/session"),
            Some(&caps),
        )
        .await?;
        let session = v["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("chromedriver gave no session id: {v}"))?
            .to_string();
        Ok(Self {
            http,
            base,
            session,
            _driver: driver,
        })
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        call(&self.http, reqwest::Method::POST, &url, Some(body)).await
    }

    pub async fn goto(&self, url: &str) -> Result<()> {
        self.post("/url", &json!({ "url": url })).await.map(drop)
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn eval(&self, script: &str, args: Value) -> Result<Value> {
        self.post("/execute/sync", &json!({ "script": script, "args": args }))
            .await
    }

    /// Clicks the first element matching the CSS `selector`.
    pub async fn click(&self, selector: &str) -> Result<()> {
        let v = self
            .post(
                "/element",
                &json!({ "using": "css selector", "value": selector }),
            )
            .await
            .with_context(|| format!("no element matches {selector}"))?;
        let id = v[ELEMENT]
            .as_str()
            .ok_or_else(|| anyhow!("no element id in {v}"))?;
        self.post(&format!("/element/{id}/click"), &json!({}))
            .await
            .map(drop)
    }

    /// Polls `script` until it returns something truthy (not null, false, 0 or ""), up to
    /// `timeout`; returns that value.
    pub async fn wait_for(&self, what: &str, script: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(script, json!([])).await?;
            let truthy = !(v.is_null() || v == json!(false) || v == json!(0) || v == json!(""));
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("the page did not show {what} within {timeout:?} (last: {v})");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A PNG of the window, written to `path`.
    pub async fn screenshot(&self, path: &Path) -> Result<PathBuf> {
        let url = format!("{}/session/{}/screenshot", self.base, self.session);
        let v = call(&self.http, reqwest::Method::GET, &url, None).await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().ok_or_else(|| anyhow!("no screenshot data"))?)
            .context("the screenshot is not base64")?;
        std::fs::write(path, png).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path.to_path_buf())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Best effort: the driver's process is killed right after, which ends the browser too.
        let url = format!("{}/session/{}", self.base, self.session);
        let http = self.http.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = http.delete(url).send().await;
            });
        }
    }
}

/// One WebDriver request; its `value`, or the error WebDriver reported.
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> Result<Value> {
    let mut req = http.request(method, url);
    if let Some(b) = body {
        req = req.json(b);
    }
    let r = req
        .send()
        .await
        .with_context(|| format!("WebDriver {url}"))?;
    let status = r.status();
    let v: Value = r
        .json()
        .await
        .with_context(|| format!("WebDriver {url}: not JSON"))?;
    if !status.is_success() {
        bail!(
            "WebDriver {url}: {status}: {}",
            v["value"]["message"].as_str().unwrap_or("no message")
        );
    }
    Ok(v["value"].clone())
}
