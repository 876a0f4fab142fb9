//! Helpers the browser suites share: an in-process server on loopback ports, the REST API as a
//! tenant user or as a provisioner, the catalog of `setup`, a real provisioner, chromedriver and a
//! Chromium session, waits that poll a condition, and screenshots at 1400 and 390 px.
//!
//! Needs `chromium` and `chromedriver` on PATH: the suites skip (with a note) without them, and fail
//! in CI.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

pub(crate) const WAIT: Duration = Duration::from_secs(20);

pub(crate) struct Server {
    pub external: SocketAddr,
    pub internal: SocketAddr,
    _dir: tempfile::TempDir,
}

pub(crate) async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let raw = weft_server::config::RawConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let settings = raw.resolve().unwrap();
    let store = weft_store::open(&weft_testkit::temp_sqlite_url(&dir))
        .await
        .unwrap();
    let app = weft_server::app(store, settings);
    app.state.outbound.set_enabled(false);
    let ext = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let int = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (external, internal) = (ext.local_addr().unwrap(), int.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(ext, app.external).await });
    tokio::spawn(async move { axum::serve(int, app.internal).await });
    Server {
        external,
        internal,
        _dir: dir,
    }
}

/// A request to the server's API as the Coopr headers say (`who` = (user, tenant)), or to the
/// internal port when `who` is `None`.
pub(crate) async fn api(
    s: &Server,
    who: Option<(&str, &str)>,
    method: &str,
    path: &str,
    body: Value,
) -> (u16, String) {
    let addr = if who.is_some() {
        s.external
    } else {
        s.internal
    };
    let c = reqwest::Client::new();
    let mut b = c.request(method.parse().unwrap(), format!("http://{addr}{path}"));
    if let Some((user, tenant)) = who {
        b = b
            .header("Coopr-UserID", user)
            .header("Coopr-TenantID", tenant);
    }
    if !body.is_null() {
        b = b.body(body.to_string());
    }
    let r = b.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

pub(crate) async fn ok(
    s: &Server,
    who: Option<(&str, &str)>,
    method: &str,
    path: &str,
    body: Value,
) {
    let (status, text) = api(s, who, method, path, body).await;
    assert_eq!(status, 200, "{method} {path}: {text}");
}

/// Tenant `acme` with a provisioner, plugin types `local` and `shell`, and a catalog without
/// templates: provider `local`, hardware `small`, image `host`, services `base` and `web`.
pub(crate) async fn setup(s: &Server) {
    let sa = Some(("admin", "superadmin"));
    ok(
        s,
        sa,
        "POST",
        "/v2/tenants",
        json!({"tenant": {"name": "acme", "workers": 0}}),
    )
    .await;
    let p = json!({"id": "p1", "host": "127.0.0.1", "port": 1, "capacityTotal": 10});
    ok(s, None, "PUT", "/v2/provisioners/p1", p).await;
    ok(
        s,
        None,
        "PUT",
        "/v2/plugins/providertypes/local",
        json!({"name": "local"}),
    )
    .await;
    let shell = json!({"name": "shell", "parameters": {"admin": {"fields": {"script": {"label": "script", "type": "text"}}}}});
    ok(s, None, "PUT", "/v2/plugins/automatortypes/shell", shell).await;
    let a = Some(("admin", "acme"));
    let action = |w: &str| json!({"type": "shell", "fields": {"script": format!("{w}.sh")}});
    let svc = |name: &str, req: &[&str]| {
        json!({"name": name, "dependencies": {"runtime": {"requires": req}},
        "provisioner": {"actions": {"install": action("install"), "start": action("start"), "stop": action("stop")}}})
    };
    for (kind, body) in [
        (
            "providers",
            json!({"name": "local", "providertype": "local"}),
        ),
        (
            "hardwaretypes",
            json!({"name": "small", "providermap": {"local": {"flavor": "s1"}}}),
        ),
        (
            "imagetypes",
            json!({"name": "host", "providermap": {"local": {"image": "img", "sshuser": "weft"}}}),
        ),
        ("services", svc("base", &[])),
        ("services", svc("web", &["base"])),
    ] {
        ok(s, a, "POST", &format!("/v2/{kind}"), body).await;
    }
}

/// A real provisioner (the `local` provider and the `shell` automator) serving tenant `tenant_id`
/// with two workers, registered as `p1`. Its scripts (install, configure, start, stop, and the
/// health check `check`) only say they ran, and succeed.
pub(crate) async fn provisioner(
    s: &Server,
    tenant_id: &str,
    dir: &std::path::Path,
) -> weft_provisioner::Agent {
    use weft_provisioner::local::LocalProvider;
    use weft_provisioner::shell::ShellAutomator;
    use weft_provisioner::{Agent, AgentConfig, Plugins};
    let scripts = dir.join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    for name in [
        "install.sh",
        "configure.sh",
        "start.sh",
        "stop.sh",
        "check.sh",
    ] {
        std::fs::write(
            scripts.join(name),
            "#!/bin/sh\necho \"$0 ran on $WEFT_HOSTNAME\"\n",
        )
        .unwrap();
    }
    let data = dir.join("data");
    let mut cfg = AgentConfig::new(&format!("http://{}", s.internal), data.clone());
    cfg.id = "p1".into();
    cfg.capacity = 2;
    let plugins = Plugins::new()
        .provider(Arc::new(LocalProvider::new(&data)))
        .automator(Arc::new(ShellAutomator::new(vec![scripts])));
    let agent = Agent::start(cfg, plugins)
        .await
        .expect("the provisioner starts");
    agent.set_workers(tenant_id, 2).await.expect("workers");
    agent
}

pub(crate) fn shots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let d = target.join("ui-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub(crate) async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(shots_dir().join(format!("{name}.png")), png).unwrap();
}

/// Screenshots of the page at 1400 and 390 pixels wide (`NAME-1400.png`, `NAME-390.png`), checking
/// on the way that the page has no horizontal scroll on a phone.
pub(crate) async fn shots(c: &Client, name: &str) {
    if let Err(e) = try_shots(c, name).await {
        panic!("{e}");
    }
}

/// As [`shots`], but a horizontal scroll at 390 px is returned rather than a failure.
pub(crate) async fn try_shots(c: &Client, name: &str) -> Result<(), String> {
    shot(c, &format!("{name}-1400")).await;
    c.set_window_size(390, 844).await.unwrap();
    let wide = c
        .execute(
            "return [document.documentElement.scrollWidth, window.innerWidth];",
            vec![],
        )
        .await
        .unwrap();
    let (scroll, inner) = (wide[0].as_i64().unwrap(), wide[1].as_i64().unwrap());
    if scroll > inner {
        let culprits = c
            .execute(
                "return Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.scroll')).slice(0, 8).map(e => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));",
                vec![],
            )
            .await
            .unwrap();
        shot(c, &format!("{name}-390")).await;
        c.set_window_size(1400, 1000).await.unwrap();
        return Err(format!(
            "{name}: horizontal scroll at 390 px ({scroll} > {inner}): {culprits}"
        ));
    }
    shot(c, &format!("{name}-390")).await;
    c.set_window_size(1400, 1000).await.unwrap();
    Ok(())
}

/// Waits until `js` (an expression) is true in the page.
pub(crate) async fn until(c: &Client, what: &str, js: &str) {
    let end = std::time::Instant::now() + WAIT;
    loop {
        let v = c
            .execute(&format!("return !!({js});"), vec![])
            .await
            .unwrap();
        if v == json!(true) {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (reloading) until the cluster page shows the latest job complete.
pub(crate) async fn job_completes(c: &Client, what: &str) {
    let end = std::time::Instant::now() + WAIT;
    loop {
        c.refresh().await.unwrap();
        let st = c
            .execute(
                "var e = document.getElementById('job-status'); return e ? e.textContent : '';",
                vec![],
            )
            .await
            .unwrap();
        if st == json!("complete") {
            return;
        }
        assert!(st != json!("failed"), "{what}: the job failed");
        assert!(
            std::time::Instant::now() < end,
            "{what}: the job did not complete"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the page's notice starts with `prefix` (the page may still be the previous one, with
/// an older notice, when this starts).
pub(crate) async fn notice_starts(c: &Client, prefix: &str) {
    let end = std::time::Instant::now() + WAIT;
    loop {
        let got = c
            .execute(
                "var e = document.querySelector('.notice'); return e ? e.textContent : '';",
                vec![],
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        if got.starts_with(prefix) {
            return;
        }
        let err = c
            .execute(
                "var e = document.getElementById('page-error'); return e ? e.textContent : '';",
                vec![],
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        assert!(
            err.is_empty(),
            "waiting for \"{prefix}\": the page says {err}"
        );
        assert!(
            std::time::Instant::now() < end,
            "no notice \"{prefix}\" (last: {got})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn fill_css(c: &Client, css: &str, text: &str) {
    let e = c
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    e.clear().await.unwrap();
    e.send_keys(text).await.unwrap();
}

/// The id of the cluster whose page is open.
pub(crate) async fn cluster_id(c: &Client) -> String {
    c.find(Locator::Id("cluster"))
        .await
        .unwrap()
        .attr("data-cluster")
        .await
        .unwrap()
        .unwrap()
}

pub(crate) async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.unwrap().len()
}

/// Starts chromedriver on a free port; returns the process and its URL once it says it is ready.
pub(crate) async fn chromedriver() -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(WAIT, async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.contains("started successfully") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "chromedriver did not report ready");
    // Keep draining its output so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, format!("http://127.0.0.1:{port}"))
}

pub(crate) async fn browser(url: &str) -> Client {
    browser_with(url, serde_json::Map::new()).await
}

/// A Chromium session with extra WebDriver capabilities (such as `unhandledPromptBehavior`).
pub(crate) async fn browser_with(url: &str, mut caps: serde_json::Map<String, Value>) -> Client {
    let binary = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|b| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join(b))
                    .find(|f| f.is_file())
            })
        });
    let mut opts = json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
        "--disable-dev-shm-usage", "--window-size=1400,1000", "--hide-scrollbars"]});
    if let Some(b) = binary {
        opts["binary"] = json!(b.display().to_string());
    }
    caps.insert("goog:chromeOptions".into(), opts);
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(url)
        .await
        .expect("a WebDriver session")
}

pub(crate) async fn fill(c: &Client, id: &str, text: &str) {
    let e = c
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("#{id}: {e}"));
    e.clear().await.unwrap();
    e.send_keys(text).await.unwrap();
}

pub(crate) async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap();
}

pub(crate) async fn text(c: &Client, css: &str) -> String {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

pub(crate) async fn login(c: &Client, base: &str, tenant: &str, user: &str) {
    c.goto(&format!("{base}/ui/login")).await.unwrap();
    fill(c, "tenant", tenant).await;
    fill(c, "user", user).await;
    click(c, "#login").await;
    let who = text(c, "#whoami").await;
    assert!(who.starts_with(&format!("{user} @ {tenant}")), "{who}");
}

/// The internal id of tenant `acme` (what a provisioner's take names), from the superadmin's
/// provisioner view: assignments are keyed by tenant id; with no workers, read the cluster's
/// account instead.
pub(crate) async fn tenant_id(s: &Server) -> String {
    let (_, body) = api(
        s,
        Some(("alice", "acme")),
        "GET",
        "/v2/clusters",
        Value::Null,
    )
    .await;
    let list: Value = serde_json::from_str(&body).unwrap();
    let id = list[0]["id"].as_str().unwrap().to_string();
    let (_, body) = api(
        s,
        Some(("alice", "acme")),
        "GET",
        &format!("/v2/clusters/{id}"),
        Value::Null,
    )
    .await;
    let c: Value = serde_json::from_str(&body).unwrap();
    c["account"]["tenantId"].as_str().unwrap().to_string()
}

/// Percent-encodes a query or path value.
pub(crate) fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The API's answer as JSON, which must be a 200.
pub(crate) async fn get_json(s: &Server, who: Option<(&str, &str)>, path: &str) -> Value {
    let (status, text) = api(s, who, "GET", path, Value::Null).await;
    assert_eq!(status, 200, "GET {path}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}"))
}

/// Clicks `css`, which submits a form, and waits for the page it leads to.
pub(crate) async fn submit(c: &Client, css: &str) {
    c.execute(
        "document.body.dataset.submitted = 'before'; return 1;",
        vec![],
    )
    .await
    .unwrap();
    click(c, css).await;
    let end = std::time::Instant::now() + WAIT;
    loop {
        let js = "return document.readyState === 'complete' && !!document.body && document.body.dataset.submitted !== 'before';";
        if c.execute(js, vec![]).await.ok() == Some(json!(true)) {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "{css}: no page after the submit"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
