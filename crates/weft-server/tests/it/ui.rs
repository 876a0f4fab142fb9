//! The web UI in-process: login and sessions, pages by role (403 page for what a role may not
//! open), form validation messages next to their fields, creating a cluster through the plan
//! preview, the detail page and its live event stream while a job is driven over the provisioner
//! API, and the superadmin's pages.

use axum::body::Body;
use axum::http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use crate::clusters::{drain, setup, T};
use crate::common::{Harness, Port, Resp};

/// Logs in through the form; returns the session cookie (`name=value`).
pub(crate) async fn login(h: &Harness, tenant: &str, user: &str, key: &str) -> String {
    let r = form(
        h,
        None,
        "/ui/login",
        &[("tenant", tenant), ("user", user), ("apikey", key)],
    )
    .await;
    assert_eq!(r.status.as_u16(), 303, "login failed: {}", r.text());
    assert_eq!(r.headers["location"], "/ui/clusters");
    let c = r.headers["set-cookie"].to_str().unwrap();
    assert!(
        c.contains("HttpOnly") && c.contains("SameSite=Strict"),
        "{c}"
    );
    c.split(';').next().unwrap().to_string()
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The session's CSRF token, as its pages carry it in every form.
async fn csrf_token(h: &Harness, cookie: &str) -> String {
    let html = page(h, cookie, "/ui/clusters/new").await.text();
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in the page: {html}"));
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Posts a form as a page of the session would (its CSRF token included).
async fn form(h: &Harness, cookie: Option<&str>, path: &str, fields: &[(&str, &str)]) -> Resp {
    let token = match cookie {
        Some(c) => Some(csrf_token(h, c).await),
        None => None,
    };
    let mut fields = fields.to_vec();
    if let Some(t) = &token {
        fields.push(("csrf", t));
    }
    raw_form(h, cookie, path, &fields, &[]).await
}

/// Posts `fields` as they are, with extra request headers.
async fn raw_form(
    h: &Harness,
    cookie: Option<&str>,
    path: &str,
    fields: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> Resp {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    let mut b = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    h.send(Port::External, b.body(Body::from(body.join("&"))).unwrap())
        .await
}

pub(crate) async fn page(h: &Harness, cookie: &str, path: &str) -> Resp {
    let req = Request::builder()
        .uri(path)
        .header("cookie", cookie)
        .body(Body::empty())
        .unwrap();
    h.send(Port::External, req).await
}

#[tokio::test]
async fn login_page_and_redirects() {
    let h = Harness::new().await;
    let r = h.call(None, Method::GET, "/", Body::empty()).await;
    assert_eq!(r.status.as_u16(), 303);
    let r = h
        .call(None, Method::GET, "/ui/clusters", Body::empty())
        .await;
    assert_eq!(r.status.as_u16(), 303);
    assert_eq!(r.headers["location"], "/ui/login");
    let r = h
        .call(None, Method::GET, "/ui/login", Body::empty())
        .await
        .expect(200);
    let t = r.text();
    assert!(r.content_type().starts_with("text/html"));
    for id in ["tenant", "user", "apikey"] {
        assert!(
            t.contains(&format!("<label for=\"{id}\"")),
            "label for {id}"
        );
        assert!(t.contains(&format!("id=\"{id}\"")), "input {id}");
    }
    assert!(t.contains("name=\"viewport\""));
    let css = h
        .call(None, Method::GET, "/ui/static/style.css", Body::empty())
        .await
        .expect(200);
    assert!(css.text().contains("@media (max-width: 640px)"));
    // An unknown tenant: the API's message, on the login page, 401.
    let r = form(
        &h,
        None,
        "/ui/login",
        &[("tenant", "nope"), ("user", "bob")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 401);
    assert!(r.text().contains("Tenant does not exist."), "{}", r.text());
    let r = form(&h, None, "/ui/login", &[("tenant", ""), ("user", "")]).await;
    assert_eq!(r.status.as_u16(), 401);
    assert!(r.text().contains("tenant and user are required"));
}

#[tokio::test]
async fn roles_decide_navigation_and_pages() {
    let h = Harness::new().await;
    setup(&h).await;
    let user = login(&h, T, "bob", "").await;
    let r = page(&h, &user, "/ui/catalog").await.expect(200);
    let t = r.text();
    assert!(t.contains("id=\"template-t\""), "{t}");
    assert!(t.contains("/ui/clusters/new?template=t"));
    assert!(t.contains("bob @ acme"));
    assert!(
        !t.contains("/ui/admin/providers"),
        "a user sees no admin navigation"
    );
    assert!(!t.contains("/ui/super/tenants"));
    for p in [
        "/ui/admin/providers",
        "/ui/admin/clustertemplates/new",
        "/ui/admin/plugins",
        "/ui/admin/catalog",
        "/ui/super/tenants",
        "/ui/super/provisioners",
        "/ui/super/metrics",
        "/ui/super/apikeys",
        "/ui/admin/hostpools",
    ] {
        let r = page(&h, &user, p).await;
        assert_eq!(r.status.as_u16(), 403, "{p}");
        assert!(r
            .text()
            .contains("user bob of tenant acme may not open this page"));
    }
    // Posting to an admin form as a user is refused too.
    let r = form(&h, Some(&user), "/ui/admin/services/new", &[("name", "x")]).await;
    assert_eq!(r.status.as_u16(), 403);

    let admin = login(&h, T, "admin", "").await;
    let t = page(&h, &admin, "/ui/clusters").await.expect(200).text();
    assert!(t.contains("/ui/admin/providers") && !t.contains("/ui/super/tenants"));
    for p in [
        "/ui/admin/providers",
        "/ui/admin/hardwaretypes",
        "/ui/admin/imagetypes",
        "/ui/admin/services",
        "/ui/admin/clustertemplates",
        "/ui/admin/partialtemplates",
        "/ui/admin/plugins",
        "/ui/admin/catalog",
        "/ui/admin/services/a",
        "/ui/admin/clustertemplates/new",
        "/ui/admin/hostpools",
    ] {
        page(&h, &admin, p).await.expect(200);
    }
    assert_eq!(
        page(&h, &admin, "/ui/super/tenants").await.status.as_u16(),
        403
    );
    let plugins = page(&h, &admin, "/ui/admin/plugins").await.text();
    assert!(plugins.contains("local") && plugins.contains("shell"));
    let export = page(&h, &admin, "/ui/admin/catalog/export")
        .await
        .expect(200);
    assert!(export.json()["clusterTemplates"].is_array() || export.json().is_object());

    let sa = login(&h, "superadmin", "admin", "").await;
    let t = page(&h, &sa, "/ui/super/tenants").await.expect(200).text();
    assert!(t.contains("<td>acme</td>"), "{t}");
    let t = page(&h, &sa, "/ui/super/provisioners")
        .await
        .expect(200)
        .text();
    assert!(t.contains("<td>p1</td>") && t.contains("s ago"), "{t}");
    let t = page(&h, &sa, "/ui/super/metrics").await.expect(200).text();
    assert!(t.contains("<td>acme</td>"), "{t}");
    // Quotas left unbounded read as such, not as 2147483647.
    let t = page(&h, &sa, "/ui/super/tenants").await.expect(200).text();
    assert!(
        t.contains("<td>unbounded</td>") && !t.contains(">2147483647<"),
        "{t}"
    );
    // API keys: made (the secret shown once), listed, revoked.
    let t = form(
        &h,
        Some(&sa),
        "/ui/super/apikeys",
        &[("tenant", T), ("user", "carol")],
    )
    .await
    .expect(200)
    .text();
    assert!(
        t.contains("id=\"secret\"") && t.contains("<td>carol</td>"),
        "{t}"
    );

    // Logging out ends the session.
    let r = form(&h, Some(&user), "/ui/logout", &[]).await;
    assert_eq!(r.status.as_u16(), 303);
    let r = page(&h, &user, "/ui/clusters").await;
    assert_eq!(r.status.as_u16(), 303);
    assert_eq!(r.headers["location"], "/ui/login");
}

#[tokio::test]
async fn admin_forms_show_the_api_message_next_to_the_field() {
    let h = Harness::new().await;
    setup(&h).await;
    let admin = login(&h, T, "admin", "").await;
    // Not JSON: caught by the form, at the field.
    let r = form(
        &h,
        Some(&admin),
        "/ui/admin/clustertemplates/new",
        &[("name", "t2"), ("defaults", "{oops")],
    )
    .await
    .expect(400);
    let t = r.text();
    assert!(t.contains("id=\"defaults-error\""), "{t}");
    assert!(t.contains("defaults is not valid JSON"));
    assert!(
        t.contains("name=\"name\" value=\"t2\""),
        "the form keeps what was typed"
    );
    // The API's own validation message, mapped to the field it names.
    let r = form(
        &h,
        Some(&admin),
        "/ui/admin/clustertemplates/new",
        &[
            ("name", "t2"),
            ("defaults", r#"{"services": ["a"], "provider": "local"}"#),
            ("constraints", r#"{"size": {"min": 5, "max": 2}}"#),
        ],
    )
    .await
    .expect(400);
    let t = r.text();
    assert!(t.contains("id=\"constraints-error\""), "{t}");
    assert!(t.contains("aria-invalid=\"true\" aria-describedby=\"constraints-error\""));
    let r = form(
        &h,
        Some(&admin),
        "/ui/admin/services/new",
        &[("name", "bad name")],
    )
    .await
    .expect(400);
    assert!(r.text().contains("id=\"name-error\""), "{}", r.text());
    // A valid template is saved and listed; editing writes version 2.
    let ok = [
        ("name", "t2"),
        ("description", "two"),
        ("defaults", r#"{"services": ["a"], "provider": "local"}"#),
        ("constraints", r#"{"size": {"min": 1, "max": 3}}"#),
        (
            "administration",
            r#"{"leaseduration": {"initial": 3600000, "max": 7200000, "step": 0}}"#,
        ),
    ];
    let r = form(&h, Some(&admin), "/ui/admin/clustertemplates/new", &ok).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let t = page(&h, &admin, "/ui/admin/clustertemplates")
        .await
        .expect(200)
        .text();
    assert!(t.contains(">t2</a>") && t.contains("two"));
    let r = form(&h, Some(&admin), "/ui/admin/clustertemplates/t2", &ok).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let v = h
        .get(crate::common::admin(T), "/v2/clustertemplates/t2")
        .await
        .expect(200)
        .json();
    assert_eq!(v["version"], 2);
    assert_eq!(v["administration"]["leaseduration"]["initial"], 3600000);
    let r = form(
        &h,
        Some(&admin),
        "/ui/admin/clustertemplates/t2/delete",
        &[],
    )
    .await;
    assert_eq!(r.status.as_u16(), 303);
    h.get(crate::common::admin(T), "/v2/clustertemplates/t2")
        .await
        .expect(404);
}

/// Reads the next server-sent event's data from a streaming body.
async fn next_event(body: &mut Body) -> serde_json::Value {
    let mut buf = String::new();
    loop {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame())
            .await
            .expect("an event within 10 s")
            .expect("the stream goes on")
            .expect("a frame");
        if let Ok(data) = frame.into_data() {
            buf.push_str(&String::from_utf8_lossy(&data));
        }
        if let Some(end) = buf.find("\n\n") {
            let ev = &buf[..end];
            if let Some(line) = ev.lines().find_map(|l| l.strip_prefix("data: ")) {
                assert!(ev.contains("event: state"), "{ev}");
                return serde_json::from_str(line).unwrap();
            }
            buf = buf[end + 2..].to_string();
        }
    }
}

#[tokio::test]
async fn a_user_creates_a_cluster_through_the_preview_and_watches_it() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let user = login(&h, T, "bob", "").await;
    let t = page(&h, &user, "/ui/clusters/new?template=t")
        .await
        .expect(200)
        .text();
    // The size starts at the template's minimum; its services are checkboxes, defaults checked.
    assert!(
        t.contains("<label for=\"name\">")
            && t.contains("id=\"size\" name=\"size\" type=\"number\" min=\"1\" value=\"1\""),
        "{t}"
    );
    assert!(
        t.contains("id=\"svc-a\" checked") && t.contains("id=\"svc-b\" checked"),
        "{t}"
    );
    // Bad size: the API's message next to the size field.
    let r = form(
        &h,
        Some(&user),
        "/ui/clusters/new",
        &[
            ("name", "c1"),
            ("template", "t"),
            ("size", "50"),
            ("step", "preview"),
        ],
    )
    .await
    .expect(400);
    assert!(r.text().contains("id=\"size-error\""), "{}", r.text());
    let r = form(
        &h,
        Some(&user),
        "/ui/clusters/new",
        &[
            ("name", "c1"),
            ("template", "t"),
            ("size", "2"),
            ("config", "[1"),
            ("step", "preview"),
        ],
    )
    .await
    .expect(400);
    assert!(r.text().contains("id=\"config-error\""));
    // The preview: the plan, nothing created.
    let fields = [
        ("name", "c1"),
        ("template", "t"),
        ("size", "2"),
        ("services", "a, b"),
    ];
    let mut preview = fields.to_vec();
    preview.push(("step", "preview"));
    let t = form(&h, Some(&user), "/ui/clusters/new", &preview)
        .await
        .expect(200)
        .text();
    assert!(t.contains("id=\"layout-preview\""), "{t}");
    assert!(t.contains("Plan: cluster create"), "{t}");
    assert!(t.contains("id=\"confirm\""));
    assert!(t.contains("CREATE") && t.contains("INSTALL"));
    let list = h
        .get(crate::common::user("bob", T), "/v2/clusters")
        .await
        .expect(200)
        .json();
    assert_eq!(list, json!([]));
    // Confirm: created, and the detail page shows the job.
    let mut confirm = fields.to_vec();
    confirm.push(("step", "create"));
    let r = form(&h, Some(&user), "/ui/clusters/new", &confirm).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let loc = r.headers["location"].to_str().unwrap().to_string();
    let id = loc.rsplit('/').next().unwrap().to_string();
    let t = page(&h, &user, &loc).await.expect(200).text();
    assert!(
        t.contains("id=\"cluster-status\" class=\"status status-pending\""),
        "{t}"
    );
    assert!(t.contains("class=\"task state-queued\""), "{t}");
    let list = page(&h, &user, "/ui/clusters").await.expect(200).text();
    assert!(list.contains(&format!("href=\"/ui/clusters/{id}\">c1</a>")));

    // Delete stays a button while the job runs, and the page shows the server's answer to it
    // (today a 409: a job is still underway).
    assert!(!t.contains("id=\"delete\" disabled"), "{t}");
    assert!(t.contains("The running job is aborted first."), "{t}");

    // Job control from the cluster page: pause, then resume (issue 13).
    assert!(
        t.contains("id=\"pause\"") && t.contains("id=\"abort\""),
        "{t}"
    );
    for (op, want) in [("pause", "paused"), ("resume", "running")] {
        let r = form(
            &h,
            Some(&user),
            &format!("/ui/clusters/{id}/action"),
            &[("op", op)],
        )
        .await;
        assert_eq!(r.status.as_u16(), 303, "{op}: {}", r.text());
        let s = h
            .get(
                crate::common::user("bob", T),
                &format!("/v2/clusters/{id}/status"),
            )
            .await
            .expect(200)
            .json();
        assert_eq!(s["actionstatus"], want, "{op}");
    }

    // The event stream: a first snapshot, then one after the job ends.
    let req = Request::builder()
        .uri(format!("/ui/clusters/{id}/events"))
        .header("cookie", &user)
        .body(Body::empty())
        .unwrap();
    let resp = h.app.external.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = resp.into_body();
    let first = next_event(&mut body).await;
    assert_eq!(first["status"], "pending");
    assert!(first["tasks"]
        .as_object()
        .unwrap()
        .values()
        .any(|s| s == "queued"));
    drain(&h, &tid, |_| false).await;
    let mut last = next_event(&mut body).await;
    while last["status"] != "active" {
        last = next_event(&mut body).await;
    }
    assert_eq!(last["progress"]["actionstatus"], "complete");
    assert!(last["tasks"]
        .as_object()
        .unwrap()
        .values()
        .all(|s| s == "complete"));

    let t = page(&h, &user, &loc).await.expect(200).text();
    assert!(t.contains("status-active"));
    assert!(
        t.contains("<span class=\"addr\">10.1.0."),
        "addresses shown: {t}"
    );
    assert!(
        t.contains("data-cell=") && t.contains(">running</span>"),
        "the grid: {t}"
    );
    // Actions go through the API; a bad one shows its message.
    let r = form(
        &h,
        Some(&user),
        &format!("/ui/clusters/{id}/action"),
        &[("op", "expand"), ("count", "x")],
    )
    .await;
    assert!(r.headers["location"].to_str().unwrap().contains("error="));
    let r = form(
        &h,
        Some(&user),
        &format!("/ui/clusters/{id}/action"),
        &[("op", "extend"), ("hours", "1")],
    )
    .await;
    let to = r.headers["location"].to_str().unwrap().to_string();
    assert!(to.contains("notice=extend"), "{to}");
    // Another user cannot see it.
    let eve = login(&h, T, "eve", "").await;
    assert_eq!(page(&h, &eve, &loc).await.status.as_u16(), 404);
    // Delete.
    let r = form(
        &h,
        Some(&user),
        &format!("/ui/clusters/{id}/action"),
        &[("op", "delete")],
    )
    .await;
    assert!(r.headers["location"]
        .to_str()
        .unwrap()
        .starts_with("/ui/clusters?notice="));
    drain(&h, &tid, |_| false).await;
    let t = page(&h, &user, &loc).await.expect(200).text();
    assert!(t.contains("status-terminated"), "{t}");
}

#[tokio::test]
async fn failed_tasks_show_their_output() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let user = login(&h, T, "bob", "").await;
    let fields = [
        ("name", "c1"),
        ("template", "t"),
        ("size", "1"),
        ("step", "create"),
    ];
    let r = form(&h, Some(&user), "/ui/clusters/new", &fields).await;
    let loc = r.headers["location"].to_str().unwrap().to_string();
    drain(&h, &tid, |t| t["taskName"] == "INSTALL").await;
    let t = page(&h, &user, &loc).await.expect(200).text();
    assert!(t.contains("install failed"), "{t}");
    assert!(t.contains("<pre class=\"stderr\">it broke</pre>"), "{t}");
    assert!(
        t.contains("attempt 3 of 3"),
        "retries shown as attempts: {t}"
    );
    assert!(t.contains("class=\"task state-failed\""));
}

#[tokio::test]
async fn superadmin_manages_tenants_and_api_key_logins_work() {
    let h = Harness::with(|c| c.auth = Some("apikey".into())).await;
    let req = weft_model::ApiKeyRequest {
        tenant: "superadmin".into(),
        user: "admin".into(),
        admin: true,
    };
    let sa = weft_engine::apikeys::make_key(
        h.app.state.store.as_ref(),
        &req,
        h.app.state.engine.now_ms(),
    )
    .await
    .expect("key");
    let r = form(&h, None, "/ui/login", &[("apikey", "wrong")]).await;
    assert_eq!(r.status.as_u16(), 401);
    assert!(r.text().contains("invalid API key"));
    let cookie = login(&h, "", "", &sa.key).await;
    let t = page(&h, &cookie, "/ui/super/tenants")
        .await
        .expect(200)
        .text();
    assert!(t.contains("admin @ superadmin"));
    let r = form(
        &h,
        Some(&cookie),
        "/ui/super/tenants",
        &[("name", "acme"), ("workers", "0"), ("maxClusters", "3")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let t = page(&h, &cookie, "/ui/super/tenants?edit=acme")
        .await
        .expect(200)
        .text();
    assert!(
        t.contains("Edit tenant acme") && t.contains("value=\"3\""),
        "{t}"
    );
    let r = form(
        &h,
        Some(&cookie),
        "/ui/super/tenants",
        &[("name", "acme"), ("workers", "-4"), ("editing", "1")],
    )
    .await
    .expect(400);
    assert!(r.text().contains("id=\"page-error\""));
    let r = form(&h, Some(&cookie), "/ui/super/tenants/acme/delete", &[]).await;
    assert!(r.headers["location"].to_str().unwrap().contains("notice="));
}

#[tokio::test]
async fn the_browser_reaches_the_api_through_the_session() {
    let h = Harness::new().await;
    setup(&h).await;
    let admin = login(&h, T, "admin", "").await;
    let r = page(&h, &admin, "/ui/api/v2/clustertemplates/t")
        .await
        .expect(200);
    assert_eq!(r.json()["name"], "t");
    // Writes need the X-Weft-UI header (a cross-site form cannot send it).
    let req = |with: bool| {
        let mut b = Request::builder()
            .method(Method::DELETE)
            .uri("/ui/api/v2/services/b")
            .header("cookie", &admin);
        if with {
            b = b.header("x-weft-ui", "1");
        }
        b.body(Body::empty()).unwrap()
    };
    assert_eq!(
        h.send(Port::External, req(false)).await.status.as_u16(),
        403
    );
    assert_eq!(h.send(Port::External, req(true)).await.status.as_u16(), 200);
    let r = h
        .call(None, Method::GET, "/ui/api/v2/services", Body::empty())
        .await;
    assert_eq!(r.status.as_u16(), 303, "no session: to the login page");
}

#[tokio::test]
async fn editors_save_templates_and_services_and_preview_layouts() {
    let h = Harness::new().await;
    setup(&h).await;
    let admin = login(&h, T, "admin", "").await;
    // Template t (a on one node at most, b everywhere): the preview lists the sizes with a layout.
    let t = page(&h, &admin, "/ui/admin/clustertemplates/t")
        .await
        .expect(200)
        .text();
    assert!(
        t.contains("id=\"solve-preview\"") && t.contains("1 to 10 nodes"),
        "{t}"
    );
    assert!(
        t.contains("href=\"/ui/admin/clustertemplates/t/json\""),
        "a JSON tab: {t}"
    );
    page(&h, &admin, "/ui/admin/clustertemplates/t/json")
        .await
        .expect(200);
    // The live preview of an unsaved template, from the editor's fields.
    let fields = [
        ("_editor", "template"),
        ("name", "t2"),
        ("def:svc:a", "on"),
        ("def:svc:b", "on"),
        ("def:provider", "local"),
        ("size:min", "2"),
        ("size:max", "4"),
        ("c:a:max", "1"),
        ("cant:0:a", "on"),
        ("cant:0:b", "on"),
        ("preview:size", "3"),
        ("preview:provider", "local"),
    ];
    let r = form(&h, Some(&admin), "/ui/admin/solve-preview", &fields)
        .await
        .expect(200)
        .text();
    assert!(
        r.contains("2 to 4 nodes") && r.contains("id=\"solve-layout\""),
        "{r}"
    );
    let mut big = fields.to_vec();
    big.retain(|(k, _)| *k != "preview:size");
    big.push(("preview:size", "9"));
    let r = form(&h, Some(&admin), "/ui/admin/solve-preview", &big)
        .await
        .expect(200)
        .text();
    assert!(r.contains("id=\"solve-explanation\""), "{r}");
    // Saved: the template as the fields say.
    let r = form(&h, Some(&admin), "/ui/admin/clustertemplates/new", &fields).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let saved = h
        .get(crate::common::admin(T), "/v2/clustertemplates/t2")
        .await
        .expect(200)
        .json();
    assert_eq!(saved["constraints"]["size"], json!({"min": 2, "max": 4}));
    assert_eq!(
        saved["constraints"]["services"]["a"]["quantities"]["max"],
        1
    );
    assert_eq!(
        saved["constraints"]["layout"]["cantcoexist"],
        json!([["a", "b"]])
    );
    assert_eq!(saved["defaults"]["services"], json!(["a", "b"]));

    // The service editor: the action's declared field and an undeclared one, kept on save.
    let t = page(&h, &admin, "/ui/admin/services/b")
        .await
        .expect(200)
        .text();
    assert!(
        t.contains("name=\"act:install:shell:script\" value=\"install-b.sh\""),
        "{t}"
    );
    assert!(t.contains("name=\"act:install:shell:me\""), "{t}");
    let base = h
        .get(crate::common::admin(T), "/v2/services/b")
        .await
        .expect(200)
        .text();
    let edit = [
        ("_editor", "service"),
        ("_base", base.as_str()),
        ("name", "b"),
        ("dep:runtime.requires:a", "on"),
        ("dep:install.uses:a", "on"),
        ("act:install:type", "shell"),
        ("act:install:shell:script", "install-b2.sh"),
        ("act:install:shell:me", "%host.self%"),
        ("act:start:type", "shell"),
        ("act:start:shell:script", "start-b.sh"),
    ];
    let r = form(&h, Some(&admin), "/ui/admin/services/b", &edit).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let s = h
        .get(crate::common::admin(T), "/v2/services/b")
        .await
        .expect(200)
        .json();
    assert_eq!(
        s["provisioner"]["actions"]["install"]["fields"],
        json!({"script": "install-b2.sh", "me": "%host.self%"})
    );
    assert!(s["provisioner"]["actions"]["stop"].is_null(), "{s}");
    assert_eq!(s["dependencies"]["install"]["uses"], json!(["a"]));
}

#[tokio::test]
async fn the_solve_route_previews_layouts_and_explains() {
    let h = Harness::new().await;
    setup(&h).await;
    let who = crate::common::user("bob", T);
    let r = h
        .post(
            who,
            "/v2/solve",
            json!({"clusterTemplate": "t", "numMachines": 3, "sizes": true}).to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        r["layout"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["count"].as_u64().unwrap())
            .sum::<u64>(),
        3
    );
    assert_eq!(r["sizes"]["ranges"], json!([[1, 10]]));
    let r = h
        .post(
            who,
            "/v2/solve",
            json!({"clusterTemplate": "t", "numMachines": 11}).to_string(),
        )
        .await
        .expect(200)
        .json();
    assert!(r["layout"].is_null() && r["explanation"].is_string(), "{r}");
    h.post(
        who,
        "/v2/solve",
        json!({"clusterTemplate": "nope"}).to_string(),
    )
    .await
    .expect(404);
    h.post(who, "/v2/solve", json!({}).to_string())
        .await
        .expect(400);
    h.post(who, "/v2/solve", json!({"clusterTemplat": "t"}).to_string())
        .await
        .expect(400);
    // Nothing was created.
    let list = h.get(who, "/v2/clusters").await.expect(200).json();
    assert_eq!(list, json!([]));
}

/// The cluster page's Delete button works while a job runs (issue 13): the job is aborted, the
/// running task ends, and the delete follows.
#[tokio::test]
async fn delete_from_the_cluster_page_while_a_job_runs() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let user = login(&h, T, "bob", "").await;
    let fields = [
        ("name", "c1"),
        ("template", "t"),
        ("size", "1"),
        ("step", "create"),
    ];
    let r = form(&h, Some(&user), "/ui/clusters/new", &fields).await;
    let loc = r.headers["location"].to_str().unwrap().to_string();
    let id = loc.rsplit('/').next().unwrap().to_string();
    let running = crate::clusters::take(&h, &tid, "w1").await.expect("a task");
    let t = page(&h, &user, &loc).await.expect(200).text();
    assert!(t.contains("id=\"delete\""), "{t}");
    let r = form(
        &h,
        Some(&user),
        &format!("/ui/clusters/{id}/action"),
        &[("op", "delete")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    // The server's answer is on the page it leads to.
    let to = r.headers["location"].to_str().unwrap().to_string();
    assert!(to.starts_with("/ui/clusters?notice=delete"), "{to}");
    assert_eq!(
        crate::clusters::finish(&h, &tid, "w1", &running, 0, "").await,
        200
    );
    let deleted = drain(&h, &tid, |_| false).await;
    assert!(!deleted.is_empty() && deleted.iter().all(|t| t["taskName"] == "DELETE"));
    let s = h
        .get(
            crate::common::user("bob", T),
            &format!("/v2/clusters/{id}/status"),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(s["status"], "terminated");
}

/// Undoes the template engine's HTML escaping of an attribute value.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#x2f;", "/")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The reconfigure form's fields as the page has them (`k0`, `v0`, `t0`, ...), unescaped.
fn reconfigure_fields(html: &str) -> Vec<(String, String)> {
    let start = html
        .find("id=\"reconfigure-form\"")
        .expect("the reconfigure form");
    let form = &html[start..start + html[start..].find("</form>").unwrap()];
    let mut out = Vec::new();
    for piece in form.split("<input").skip(1) {
        let attr = |name: &str| {
            let key = format!(" {name}=\"");
            piece.find(&key).map(|i| {
                let rest = &piece[i + key.len()..];
                unescape(&rest[..rest.find('"').unwrap()])
            })
        };
        if let Some(n) = attr("name").filter(|n| n != "csrf") {
            out.push((n, attr("value").unwrap_or_default()));
        }
    }
    out
}

#[tokio::test]
async fn the_reconfigure_form_keeps_nested_config_and_hostile_values_inert() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let evil = "x\" autofocus onfocus=document.title=42 y";
    let config = json!({"evil": {"k": evil}, "list": [1, "2", {"a": null}], "port": 8080,
                        "port_text": "8080", "brace": "{", "flag": true, "q": "say \"hi\" <b>"});
    let body = json!({"name": "c1", "clusterTemplate": "t", "numMachines": 1, "config": config});
    let r = h
        .post(
            crate::common::user("bob", T),
            "/v2/clusters",
            body.to_string(),
        )
        .await
        .expect(200)
        .json();
    let id = r["id"].as_str().unwrap().to_string();
    drain(&h, &tid, |_| false).await;
    let user = login(&h, T, "bob", "").await;
    let cfg_path = format!("/v2/clusters/{id}/config");
    let before = h
        .get(crate::common::user("bob", T), &cfg_path)
        .await
        .expect(200)
        .json();
    let html = page(&h, &user, &format!("/ui/clusters/{id}"))
        .await
        .expect(200)
        .text();
    assert!(
        !html.contains("\" autofocus") && !html.contains("<b>"),
        "a config value broke out of its attribute: {html}"
    );
    let job_before = latest_job(&h, &id).await;
    // Submitted unchanged: nothing changes and no job starts.
    let fields = reconfigure_fields(&html);
    let mut submit: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    submit.push(("op", "reconfigure"));
    submit.push(("restart", "on"));
    let r = form(
        &h,
        Some(&user),
        &format!("/ui/clusters/{id}/action"),
        &submit,
    )
    .await;
    let to = r.headers["location"].to_str().unwrap().to_string();
    assert!(to.contains("notice=the%20config%20is%20unchanged"), "{to}");
    let after = h
        .get(crate::common::user("bob", T), &cfg_path)
        .await
        .expect(200)
        .json();
    assert_eq!(after, before);
    assert_eq!(
        latest_job(&h, &id).await,
        job_before,
        "no job for an unchanged form"
    );
    // One nested value changed through the form: only it changes.
    let (vi, _) = fields
        .iter()
        .enumerate()
        .find(|(_, (k, v))| k.starts_with('k') && v == "evil")
        .unwrap();
    let vname = fields[vi + 1].0.clone();
    let mut submit: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for f in submit.iter_mut() {
        if f.0 == vname {
            f.1 = "{\"k\": \"calm\"}";
        }
    }
    submit.push(("op", "reconfigure"));
    let r = form(
        &h,
        Some(&user),
        &format!("/ui/clusters/{id}/action"),
        &submit,
    )
    .await;
    let to = r.headers["location"].to_str().unwrap().to_string();
    assert!(to.contains("notice=reconfigure"), "{to}");
    let mut want = before.clone();
    want["evil"] = json!({"k": "calm"});
    let after = h
        .get(crate::common::user("bob", T), &cfg_path)
        .await
        .expect(200)
        .json();
    assert_eq!(after, want);
}

#[tokio::test]
async fn forms_from_other_sites_are_refused_and_pages_carry_security_headers() {
    let h = Harness::new().await;
    setup(&h).await;
    let admin = login(&h, T, "admin", "").await;
    let t = page(&h, &admin, "/ui/admin/hardwaretypes")
        .await
        .expect(200);
    let csp = t.headers["content-security-policy"].to_str().unwrap();
    for want in [
        "script-src 'self'",
        "frame-ancestors 'none'",
        "default-src 'none'",
    ] {
        assert!(csp.contains(want), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(t.headers["x-content-type-options"], "nosniff");
    assert_eq!(t.headers["referrer-policy"], "same-origin");
    assert!(
        t.text().contains("integrity=\"sha256-"),
        "the script's hash"
    );
    let token = csrf_token(&h, &admin).await;
    let del = "/ui/admin/hardwaretypes/small/delete";
    // Another origin, a same-site page on another port, no token, a wrong token: all refused.
    type Pairs<'a> = &'a [(&'a str, &'a str)];
    let refused: [(Pairs, Pairs); 4] = [
        (&[("csrf", &token)], &[("origin", "http://evil.example")]),
        (&[("csrf", &token)], &[("sec-fetch-site", "same-site")]),
        (&[], &[]),
        (&[("csrf", "weft_0000")], &[]),
    ];
    for (fields, headers) in refused {
        let r = raw_form(&h, Some(&admin), del, fields, headers).await;
        assert_eq!(
            r.status.as_u16(),
            403,
            "{fields:?} {headers:?}: {}",
            r.text()
        );
    }
    h.get(admin_who(), "/v2/hardwaretypes/small")
        .await
        .expect(200);
    // Another session's token is no good either.
    let other = login(&h, T, "admin", "").await;
    let theirs = csrf_token(&h, &other).await;
    let r = raw_form(&h, Some(&admin), del, &[("csrf", &theirs)], &[]).await;
    assert_eq!(r.status.as_u16(), 403);
    // The page's own form: done.
    let r = raw_form(
        &h,
        Some(&admin),
        del,
        &[("csrf", &token)],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    h.get(admin_who(), "/v2/hardwaretypes/small")
        .await
        .expect(404);
    // A browser's CSP report is counted where operators look.
    let report =
        json!({"csp-report": {"violated-directive": "script-src", "blocked-uri": "inline"}});
    let req = Request::builder()
        .method(Method::POST)
        .uri("/ui/csp-report")
        .header("content-type", "application/csp-report")
        .body(Body::from(report.to_string()))
        .unwrap();
    assert_eq!(h.send(Port::External, req).await.status.as_u16(), 204);
    let m = h.get(admin_who(), "/metrics").await.expect(200).text();
    assert!(m.contains("weft_ui_csp_reports_total 1"), "{m}");
}

async fn latest_job(h: &Harness, id: &str) -> serde_json::Value {
    h.get(crate::common::user("bob", T), &format!("/v2/clusters/{id}"))
        .await
        .expect(200)
        .json()["latestJobId"]
        .clone()
}

fn admin_who() -> crate::common::Who {
    crate::common::admin(T)
}

#[tokio::test]
async fn templates_that_cannot_run_are_marked_and_not_offered() {
    let h = Harness::new().await;
    setup(&h).await;
    // A provider type that needs credentials, a provider without them, and templates on it and
    // on a provider that does not exist.
    let cloud = json!({"name": "cloud", "parameters": {"admin": {
        "fields": {"key": {"label": "key", "type": "text"}, "secret": {"label": "secret", "type": "password", "sensitive": true}},
        "required": [["key", "secret"]]}}});
    h.internal(
        Method::PUT,
        "/v2/plugins/providertypes/cloud",
        cloud.to_string(),
    )
    .await
    .expect(200);
    let a = admin_who();
    h.post(
        a,
        "/v2/providers",
        json!({"name": "bare", "providertype": "cloud", "provisioner": {"key": "k"}}).to_string(),
    )
    .await
    .expect(200);
    for (name, provider) in [("on-bare", "bare"), ("on-nothing", "nosuch")] {
        let t = json!({"name": name, "defaults": {"services": ["a"], "provider": provider},
                       "constraints": {"size": {"min": 2, "max": 5}}});
        h.post(a, "/v2/clustertemplates", t.to_string())
            .await
            .expect(200);
    }
    let user = login(&h, T, "bob", "").await;
    let cat = page(&h, &user, "/ui/catalog").await.expect(200).text();
    assert!(
        cat.contains("id=\"unusable-on-bare\"")
            && cat.contains("provider bare lacks its credentials (secret)"),
        "{cat}"
    );
    assert!(
        cat.contains("provider nosuch is not in the catalog"),
        "{cat}"
    );
    assert!(!cat.contains("/ui/clusters/new?template=on-bare"), "{cat}");
    assert!(cat.contains("/ui/clusters/new?template=t"), "{cat}");
    let new = page(&h, &user, "/ui/clusters/new").await.expect(200).text();
    assert!(
        new.contains("<option value=\"t\"") && !new.contains("<option value=\"on-bare\""),
        "{new}"
    );
    let chosen = page(&h, &user, "/ui/clusters/new?template=on-bare")
        .await
        .expect(200)
        .text();
    assert!(
        chosen.contains("id=\"template-error\"") && chosen.contains("cannot make a cluster now"),
        "{chosen}"
    );
    // Credentials given: usable again.
    h.put(
        a,
        "/v2/providers/bare",
        json!({"name": "bare", "providertype": "cloud", "provisioner": {"key": "k", "secret": "s"}})
            .to_string(),
    )
    .await
    .expect(200);
    let cat = page(&h, &user, "/ui/catalog").await.expect(200).text();
    assert!(!cat.contains("id=\"unusable-on-bare\""), "{cat}");
}

#[tokio::test]
async fn entries_that_name_what_the_catalog_lacks_are_saved_with_warnings_and_marked() {
    let h = Harness::new().await;
    setup(&h).await;
    let admin = login(&h, T, "admin", "").await;
    let r = form(
        &h,
        Some(&admin),
        "/ui/admin/clustertemplates/new",
        &[
            ("name", "early"),
            (
                "defaults",
                r#"{"services": ["later"], "provider": "local"}"#,
            ),
        ],
    )
    .await
    .expect(303);
    let to = r.headers["location"].to_str().unwrap().to_string();
    let list = page(&h, &admin, &to).await.expect(200).text();
    assert!(
        list.contains("cluster template early saved, with warnings: defaults.services[0]: service later does not exist (yet)"),
        "{list}"
    );
    assert!(list.contains("id=\"incomplete-early\""), "{list}");
    assert!(
        list.contains("<code>defaults.services[0]</code>: service later does not exist (yet)"),
        "{list}"
    );
    let cat = page(&h, &admin, "/ui/catalog").await.expect(200).text();
    assert!(cat.contains("id=\"unusable-early\""), "{cat}");
    assert!(cat.contains("incomplete: service"), "{cat}");
}

#[tokio::test]
async fn the_create_preview_shows_the_estimate_and_the_costs_page_adds_up_what_accrued() {
    let h = Harness::new().await;
    setup(&h).await;
    let a = crate::common::admin(T);
    // local in USD, small machines at 0.25 per hour.
    crate::clusters::price_small_machines(&h).await;
    let small = h.get(a, "/v2/hardwaretypes/small").await.expect(200).json();
    // A price that is not a decimal is refused, naming the field.
    let mut bad = small.clone();
    bad["providermap"]["local"]["price"] = json!("<b>free</b>");
    let r = h
        .put(a, "/v2/hardwaretypes/small", bad.to_string())
        .await
        .expect(400);
    assert!(r.text().contains("providermap.local.price"), "{}", r.text());

    let user = login(&h, T, "bob", "").await;
    let fields = [
        ("name", "c1"),
        ("template", "t"),
        ("size", "2"),
        ("services", "a, b"),
        ("step", "preview"),
    ];
    let t = form(&h, Some(&user), "/ui/clusters/new", &fields)
        .await
        .expect(200)
        .text();
    assert!(t.contains("id=\"cost-estimate\""), "{t}");
    assert!(
        t.contains("<strong>0.50 USD</strong> per hour, 12.00 USD per day"),
        "{t}"
    );

    let mut create = fields.to_vec();
    create.pop();
    create.push(("step", "create"));
    let r = form(&h, Some(&user), "/ui/clusters/new", &create).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let t = page(&h, &user, "/ui/costs").await.expect(200).text();
    assert!(t.contains("id=\"costs\"") && t.contains(">USD<"), "{t}");
    assert!(t.contains("<svg role=\"img\""), "{t}");
    assert!(
        t.contains("id=\"cost-csv\"") && t.contains("costs?format=csv"),
        "{t}"
    );
    // A hostile period is a 400 from the API, shown escaped.
    let r = page(
        &h,
        &user,
        "/ui/costs?from=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    )
    .await;
    let t = r.text();
    assert!(!t.contains("<script>alert(1)"), "{t}");
}

#[tokio::test]
async fn the_superadmin_sets_a_tenants_budget_and_an_admin_prices_a_provider_in_the_ui() {
    let h = Harness::new().await;
    setup(&h).await;
    let sa = login(&h, "superadmin", "admin", "").await;
    let fields = [
        ("name", T),
        ("workers", "0"),
        ("maxCostPerHour", "5.00"),
        ("editing", "1"),
    ];
    let r = form(&h, Some(&sa), "/ui/super/tenants", &fields).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let t = h
        .get(crate::common::SA, &format!("/v2/tenants/{T}"))
        .await
        .expect(200)
        .json();
    assert_eq!(t["maxCostPerHour"], "5.00", "{t}");
    // Not a decimal: refused, and the field is named.
    let bad = [
        ("name", T),
        ("workers", "0"),
        ("maxCostPerHour", "five"),
        ("editing", "1"),
    ];
    let r = form(&h, Some(&sa), "/ui/super/tenants", &bad)
        .await
        .expect(400);
    assert!(r.text().contains("maxCostPerHour"), "{}", r.text());

    let admin = login(&h, T, "admin", "").await;
    let edit = [
        ("name", "local"),
        ("providertype", "local"),
        ("currency", "EUR"),
        ("priceMultiplier", "0.9"),
    ];
    let r = form(&h, Some(&admin), "/ui/admin/providers/local", &edit).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let p = h
        .get(crate::common::admin(T), "/v2/providers/local")
        .await
        .expect(200)
        .json();
    assert_eq!(
        (p["currency"].as_str(), p["priceMultiplier"].as_str()),
        (Some("EUR"), Some("0.9"))
    );
    let lower = [
        ("name", "local"),
        ("providertype", "local"),
        ("currency", "eur"),
    ];
    let r = form(&h, Some(&admin), "/ui/admin/providers/local", &lower)
        .await
        .expect(400);
    assert!(r.text().contains("ISO 4217"), "{}", r.text());
}
