//! The console end to end in a real browser: headless Chromium, driven
//! through chromedriver (Debian's `chromium` and `chromium-driver`; `.ci/run`
//! installs them), against a real `jadpo dev` on a real SQLite file, whose
//! providers are local HTTP servers that go down and come back.
//!
//! An operator signs in, sees the payments breaker open with held
//! deliveries, sees it close after the provider recovers, opens a delivery
//! the ledger refused, presses Retry and sees it succeed. A screenshot of
//! each page is saved to a folder the test prints. Assertions are on the
//! DOM, never on pixels.
//!
//! Without chromedriver the test says it was skipped, and fails under
//! `CI=true`.

use fantoccini::{Client, ClientBuilder, Locator};
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_testing::process::Logged;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "console-token";

const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: "PAY_URL" }
connection ledger { base_url: "LEDGER_URL" }
action charge(id: string) { call pay.post("/charge", body: event) }
action record(id: string) { call ledger.post("/entries", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
subscriber record { on: Paid  run: record(event.id) }
"#;

fn chromedriver() -> Option<PathBuf> {
    let path = std::env::var_os("JADPO_TEST_CHROMEDRIVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromedriver"));
    if path.exists() {
        return Some(path);
    }
    jadpo_testing::skip::missing(
        "chromedriver and Chromium",
        &format!("no chromedriver at {}", path.display()),
        "Install Debian's chromium and chromium-driver (.ci/run does), or set JADPO_TEST_CHROMEDRIVER",
    );
    None
}

fn emit(port: u16, id: &str) {
    use std::io::Write;
    let body = format!(r#"{{"id":"{id}"}}"#);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /events/Paid HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 202"), "{out}");
}

struct Browser {
    client: Client,
    base: String,
    shots: PathBuf,
}

impl Browser {
    async fn open(&self, path: &str) {
        self.client.goto(&format!("{}{path}", self.base)).await.unwrap();
    }

    async fn text(&self, css: &str) -> Option<String> {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => Some(e.text().await.unwrap()),
            Err(_) => None,
        }
    }

    /// Opens `path` again and again (the page's own refresh is what a
    /// person sees; reloading here keeps the test's wait short) until
    /// `check` holds, for at most a minute.
    async fn until(&self, path: &str, what: &str, check: impl AsyncFn(&Browser) -> bool) {
        let start = Instant::now();
        loop {
            self.open(path).await;
            if check(self).await {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "timed out waiting for: {what}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The text of what `css` finds once the page shows it (a click's
    /// navigation may still be under way when the click returns).
    async fn text_when(&self, css: &str) -> String {
        let found = self
            .client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css));
        found
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .text()
            .await
            .unwrap()
    }

    async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap();
    }
}

fn shots_folder() -> PathBuf {
    let base = option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = base.join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `jadpo dev` on port 0, and the port it chose: never a port picked and
/// let go, which another test could take first.
fn start_dev(dir: &Path) -> (Logged, u16) {
    let mut child = Logged::spawn(
        Command::new(env!("CARGO_BIN_EXE_jadpo"))
            .current_dir(dir)
            .env_remove("JADPO_STORE")
            .env_remove("RUST_LOG")
            .env("JADPO_API_TOKEN", TOKEN)
            .args(["dev", "--port", "0", "--time-scale", "60"])
            .stdout(Stdio::null()),
    );
    let port = child.port("api.listening");
    (child, port)
}

/// chromedriver on port 0 (it says which on stdout, sent to stderr here).
fn start_chromedriver(path: &Path) -> (Logged, u16) {
    let mut child = Logged::spawn(
        Command::new("sh")
            .args(["-c", "exec \"$0\" --port=0 1>&2"])
            .arg(path)
            .stdout(Stdio::null()),
    );
    let port = child.port("started successfully");
    (child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_watches_an_outage_and_retries_a_failed_delivery() {
    let Some(driver) = chromedriver() else { return };
    let (pay, ledger) = (TestProvider::start().await, TestProvider::start().await);
    pay.set(Behaviour::Down);
    ledger.set(Behaviour::Status(400));
    let dir = tempfile::tempdir().unwrap();
    let app = APP.replace("PAY_URL", &pay.url()).replace("LEDGER_URL", &ledger.url());
    std::fs::write(dir.path().join("app.jadpo"), app).unwrap();
    let (_dev, port) = start_dev(dir.path());
    let (_driver, driver_port) = start_chromedriver(&driver);
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": std::env::var("JADPO_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"],
        }),
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = ClientBuilder::rustls()
        .unwrap()
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{driver_port}"))
        .await
        .expect("chromedriver starts a headless Chromium session");
    let b = Browser {
        client,
        base: format!("http://127.0.0.1:{port}"),
        shots: shots_folder(),
    };
    println!("console screenshots: {}", b.shots.display());
    for i in 0..8 {
        emit(port, &format!("p{i}"));
    }

    // Signing in: a page asks for the token first.
    b.open("/ui").await;
    assert!(b.client.current_url().await.unwrap().path().ends_with("/ui/login"));
    b.shot("login").await;
    let field = b.client.find(Locator::Css("input[name=token]")).await.unwrap();
    field.send_keys("not-the-token").await.unwrap();
    b.client
        .find(Locator::Css("#login button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(
        !b.text_when("#login-error").await.is_empty(),
        "a wrong token is refused"
    );
    let field = b.client.find(Locator::Css("input[name=token]")).await.unwrap();
    field.send_keys(TOKEN).await.unwrap();
    b.client
        .find(Locator::Css("#login button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.text_when("#counts").await;
    assert_eq!(b.client.current_url().await.unwrap().path(), "/ui");

    // The outage: the payments breaker opens and holds deliveries.
    b.until(
        "/ui",
        "the pay breaker open with held deliveries",
        async |b: &Browser| {
            let held = b.text(r#"#open-breakers tr[data-connection="pay"] .held"#).await;
            held.and_then(|h| h.parse::<u64>().ok()).is_some_and(|n| n > 0)
        },
    )
    .await;
    b.shot("overview").await;
    b.open("/ui/breakers").await;
    let state = b.text(r#"#breakers tr[data-connection="pay"] .state"#).await.unwrap();
    assert!(state == "open" || state == "probing", "{state}");
    b.shot("breakers-open").await;

    // The provider answers again: a probe closes the breaker.
    pay.set(Behaviour::Up);
    b.until("/ui/breakers", "the pay breaker closed", async |b: &Browser| {
        b.text(r#"#breakers tr[data-connection="pay"] .state"#).await.as_deref() == Some("closed")
    })
    .await;
    // The breaker's hour, from the per-minute summary each process adds to
    // every few seconds: calls, unavailable answers, opened, closed.
    b.until("/ui/breakers", "the pay timeline", async |b: &Browser| {
        let svg = r#"svg.timeline[data-connection="pay"]"#;
        b.client
            .find(Locator::Css(&format!(r#"{svg} circle[data-mark="opened"]"#)))
            .await
            .is_ok()
            && b.client
                .find(Locator::Css(&format!(r#"{svg} circle[data-mark="closed"]"#)))
                .await
                .is_ok()
    })
    .await;
    b.shot("breakers-closed").await;
    b.until("/ui", "the overview's chart", async |b: &Browser| {
        let series = |s: &'static str| format!(r#"#outcomes-chart rect[data-series="{s}"]"#);
        b.client.find(Locator::Css(&series("retried"))).await.is_ok()
            && b.client.find(Locator::Css(&series("held"))).await.is_ok()
    })
    .await;
    b.shot("overview-after").await;

    // A delivery the ledger refused failed; the operator retries it.
    b.until(
        "/ui/deliveries?state=failed&subscriber=record",
        "failed deliveries",
        async |b: &Browser| b.client.find(Locator::Css("#deliveries tr[data-id] a")).await.is_ok(),
    )
    .await;
    b.shot("deliveries").await;
    let link = b.client.find(Locator::Css("#deliveries tr[data-id] a")).await.unwrap();
    let id = link.text().await.unwrap();
    link.click().await.unwrap();
    assert_eq!(b.text_when("#state").await, "failed");
    assert!(b.text("#history").await.unwrap().contains("http.400"));
    b.shot("delivery-failed").await;
    ledger.set(Behaviour::Up);
    b.client
        .find(Locator::Css("#retry button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(b.text_when("#notice").await.contains("Retried"));
    b.until(
        &format!("/ui/deliveries/{id}"),
        "the retried delivery succeeded",
        async |b: &Browser| b.text("#state").await.as_deref() == Some("succeeded"),
    )
    .await;
    b.shot("delivery-succeeded").await;

    // The bulk retry's dry run counts the others that failed.
    b.open("/ui/retry").await;
    b.client
        .find(Locator::Css("#preview button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let matching = b.text_when("#matching").await;
    assert!(matching.ends_with("deliveries match."), "{matching}");
    b.shot("bulk-retry").await;
    // Confirmed: the progress page watches them go through.
    b.client
        .find(Locator::Css("#confirm button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(b.text_when("#retried").await.starts_with("Retried 7 deliveries"));
    let watch = b.client.current_url().await.unwrap();
    let watch = format!("{}?{}", watch.path(), watch.query().unwrap_or_default());
    b.until(&watch, "every retried delivery through", async |b: &Browser| {
        b.text("#progress-remaining").await.as_deref() == Some("0")
            && b.text("#progress-due").await.as_deref() == Some("0")
            && b.text("#progress-running").await.as_deref() == Some("0")
    })
    .await;
    b.shot("bulk-retry-done").await;
    b.open("/ui/deliveries?state=failed").await;
    assert!(b.text("#deliveries").await.unwrap().contains("No deliveries match"));
    b.client.close().await.unwrap();
}
