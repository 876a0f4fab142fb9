//! The web UI in real headless Chromium, driven over WebDriver (Debian's `chromium-driver`): an
//! admin creates a template through the form (after seeing a validation message at its field), a
//! user creates a cluster on the `local` provider through the plan preview, watches it reach
//! `active` live (a real in-process provisioner with the local provider runs the cluster), and
//! deletes it. Screenshots of the main pages go to `target/ui-screenshots/`.
//!
//! Needs `chromium` and `chromedriver` on PATH: skipped (with a note) without them, a failure in CI.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

const WAIT: Duration = Duration::from_secs(20);

struct Server {
    external: SocketAddr,
    internal: SocketAddr,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let raw = weft_server::config::RawConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let settings = raw.resolve().unwrap();
    let store = weft_store::SqlStore::connect(&weft_testkit::temp_sqlite_url(&dir))
        .await
        .unwrap();
    let app = weft_server::app(Arc::new(store), settings);
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
async fn api(
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

async fn ok(s: &Server, who: Option<(&str, &str)>, method: &str, path: &str, body: Value) {
    let (status, text) = api(s, who, method, path, body).await;
    assert_eq!(status, 200, "{method} {path}: {text}");
}

/// Tenant `acme` with a provisioner, plugin types `local` and `shell`, and a catalog without
/// templates: provider `local`, hardware `small`, image `host`, services `base` and `web`.
async fn setup(s: &Server) {
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
/// with two workers, registered as `p1`. Its scripts (install.sh, start.sh, stop.sh) only say so.
async fn provisioner(
    s: &Server,
    tenant_id: &str,
    dir: &std::path::Path,
) -> weft_provisioner::Agent {
    use weft_provisioner::local::LocalProvider;
    use weft_provisioner::shell::ShellAutomator;
    use weft_provisioner::{Agent, AgentConfig, Plugins};
    let scripts = dir.join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    for name in ["install.sh", "start.sh", "stop.sh"] {
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
    agent.set_workers(tenant_id, 2).expect("workers");
    agent
}

fn shots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let d = target.join("ui-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(shots_dir().join(format!("{name}.png")), png).unwrap();
}

/// Starts chromedriver on a free port; returns the process and its URL once it says it is ready.
async fn chromedriver() -> (tokio::process::Child, String) {
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

async fn browser(url: &str) -> Client {
    let mut caps = serde_json::Map::new();
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
        "--disable-dev-shm-usage", "--window-size=1280,1000", "--hide-scrollbars"]});
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

async fn fill(c: &Client, id: &str, text: &str) {
    let e = c
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("#{id}: {e}"));
    e.clear().await.unwrap();
    e.send_keys(text).await.unwrap();
}

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap();
}

async fn text(c: &Client, css: &str) -> String {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

async fn login(c: &Client, base: &str, tenant: &str, user: &str) {
    c.goto(&format!("{base}/ui/login")).await.unwrap();
    fill(c, "tenant", tenant).await;
    fill(c, "user", user).await;
    click(c, "#login").await;
    let who = text(c, "#whoami").await;
    assert!(who.starts_with(&format!("{user} @ {tenant}")), "{who}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_and_user_flows_in_chromium() {
    if !weft_testkit::require("chromium") || !weft_testkit::require("chromedriver") {
        return;
    }
    let s = server().await;
    setup(&s).await;
    let base = format!("http://{}", s.external);
    let (mut driver, url) = chromedriver().await;
    let c = browser(&url).await;
    let result = flows(&c, &s, &base).await;
    let _ = c.close().await;
    let _ = driver.kill().await;
    result
}

async fn flows(c: &Client, s: &Server, base: &str) {
    c.goto(&format!("{base}/")).await.unwrap();
    text(c, "#login-form").await;
    shot(c, "01-login").await;

    // The admin creates template `web`: first with bad constraints (message at the field).
    login(c, base, "acme", "admin").await;
    c.goto(&format!("{base}/ui/admin/clustertemplates/new"))
        .await
        .unwrap();
    fill(c, "f-name", "web").await;
    fill(c, "f-description", "a web server on a base").await;
    fill(c, "f-defaults", r#"{"services": ["base", "web"], "provider": "local", "hardwaretype": "small", "imagetype": "host"}"#).await;
    fill(c, "f-constraints", r#"{"size": {"min": 3, "max": 1}}"#).await;
    click(c, "#save").await;
    let err = text(c, "#constraints-error").await;
    assert!(err.starts_with("constraints"), "{err}");
    assert!(text(c, "#form-error")
        .await
        .contains("fix constraints below"));
    c.execute(
        "document.getElementById('f-constraints').scrollIntoView();",
        vec![],
    )
    .await
    .unwrap();
    shot(c, "02-admin-template-error").await;
    fill(c, "f-constraints", r#"{"size": {"min": 1, "max": 5}}"#).await;
    click(c, "#save").await;
    let notice = text(c, ".notice").await;
    assert_eq!(notice, "cluster template web saved");
    shot(c, "03-admin-templates").await;
    click(c, "#logout").await;
    text(c, "#login-form").await;

    // A user creates a cluster from the catalog, through the plan preview.
    login(c, base, "acme", "alice").await;
    c.goto(&format!("{base}/ui/catalog")).await.unwrap();
    text(c, "#template-web").await;
    shot(c, "04-catalog").await;
    click(c, "#template-web a.button").await;
    fill(c, "name", "shop").await;
    fill(c, "size", "2").await;
    click(c, "#preview").await;
    let h = text(c, "#plan-h").await;
    assert_eq!(h, "Plan preview: CLUSTER_CREATE");
    shot(c, "05-create-preview").await;
    click(c, "#confirm").await;
    let status = text(c, "#cluster-status").await;
    assert_eq!(status, "pending");
    shot(c, "06-cluster-pending").await;

    // Play the provisioner; the page follows without a reload (server-sent events).
    let tenant_id = tenant_id(s).await;
    let marker = c
        .execute(
            "document.body.dataset.marker = 'same-page'; return 1;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(marker, json!(1));
    let pdir = tempfile::tempdir().unwrap();
    let agent = provisioner(s, &tenant_id, pdir.path()).await;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#cluster-status.status-active"))
        .await
        .expect("the status turns active live");
    let same = c
        .execute("return document.body.dataset.marker || '';", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!("same-page"), "no reload happened");
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::XPath("//*[@id='job-status'][text()='complete']"))
        .await
        .expect("the job shows complete");
    let states = c
        .execute(
            "return Array.from(document.querySelectorAll('[data-task]')).map(e => e.className);",
            vec![],
        )
        .await
        .unwrap();
    let states = states.as_array().unwrap();
    assert!(!states.is_empty());
    assert!(
        states.iter().all(|s| s == "task state-complete"),
        "{states:?}"
    );
    shot(c, "07-cluster-active").await;
    c.refresh().await.unwrap();
    let nodes = text(c, "#nodes").await;
    assert!(
        nodes.contains("127.77."),
        "the local provider's addresses: {nodes}"
    );
    shot(c, "08-cluster-detail").await;
    c.set_window_size(390, 844).await.unwrap();
    shot(c, "09-cluster-phone").await;
    c.set_window_size(1280, 1000).await.unwrap();

    // Delete it (a confirmation prompt first).
    click(c, "#delete").await;
    c.accept_alert().await.unwrap();
    let notice = text(c, ".notice").await;
    assert_eq!(notice, "delete started");
    // The provisioner deletes the nodes; the list shows the cluster terminated.
    let end = std::time::Instant::now() + WAIT;
    let table = loop {
        c.goto(&format!("{base}/ui/clusters")).await.unwrap();
        let table = text(c, "#clusters").await;
        if table.contains("terminated") || std::time::Instant::now() > end {
            break table;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(table.contains("terminated"), "{table}");
    shot(c, "10-clusters").await;

    // The superadmin's pages.
    click(c, "#logout").await;
    login(c, base, "superadmin", "admin").await;
    c.goto(&format!("{base}/ui/super/provisioners"))
        .await
        .unwrap();
    assert!(text(c, "#provisioners").await.contains("p1"));
    shot(c, "11-provisioners").await;
    c.goto(&format!("{base}/ui/super/tenants")).await.unwrap();
    assert!(text(c, "#tenants").await.contains("acme"));
    shot(c, "12-tenants").await;
    agent.shutdown().await;
}

/// The internal id of tenant `acme` (what a provisioner's take names), from the superadmin's
/// provisioner view: assignments are keyed by tenant id; with no workers, read the cluster's
/// account instead.
async fn tenant_id(s: &Server) -> String {
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
