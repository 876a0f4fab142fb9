//! Hostile input: XSS and template-engine payloads planted in every field a tenant user, a tenant
//! admin, the superadmin or a provisioner can set (through the REST API, the internal port and some
//! UI forms), then every page each role can open, with every element focused and hovered. A page
//! passes when no alert dialog opened, `document.title` does not contain `pwned`,
//! `window.__pwned` is undefined, no link or form carries a `javascript:` URL, no event-handler
//! attribute or inline script was injected, and no `{{ 7*7 }}` payload rendered as `49`. Last,
//! the server's count of Content-Security-Policy reports (`weft_ui_csp_reports_total` on the
//! external port's `GET /metrics`) must exist and be 0.
//!
//! Every finding names the role, the page and what fired; all are gathered and reported at once.

use fantoccini::Client;
use serde_json::{json, Value};

use crate::common::*;

/// Scripts for each quoting context: single quotes, double quotes, backticks (none has spaces,
/// so each also works as an unquoted attribute value).
const SQ: &str = "document.title='pwned';alert(1);window.__pwned=1";
const DQ: &str = "document.title=\"pwned\";alert(1);window.__pwned=1";
const BT: &str = "document.title=`pwned`;alert(1);window.__pwned=1";

/// A template-engine payload renders as this when evaluated (it reads `tpl-{{ 7*7 }}-end`).
const TPL_RENDERED: &str = "tpl-49-end";

/// The payloads, each marked with `tag` (the field it was planted in) so a finding's HTML names it.
pub(crate) fn payloads(tag: &str) -> Vec<String> {
    vec![
        format!("{tag}\" autofocus onfocus=\"{SQ}\" x=\""),
        format!("{tag}' autofocus onfocus='{DQ}' x='"),
        format!("{tag}\" onmouseover=\"{SQ}\" x=\""),
        format!("{tag}' onmouseover='{DQ}' x='"),
        format!("{tag} autofocus onfocus={BT} x"),
        format!("{tag}</script><script>{SQ}</script>"),
        format!("{tag}</textarea><img src=x onerror=\"{SQ}\">"),
        format!("{tag}<img src=x onerror=\"{SQ}\">"),
        format!("{tag}<svg onload=\"{SQ}\">"),
        format!("{tag}:tpl-{{{{ 7*7 }}}}-end"),
        format!("{tag}:tpl-{{% for x in [1] %}}{{{{ 7*7 }}}}{{% endfor %}}-end"),
    ]
}

/// Every payload in one string (text fields).
pub(crate) fn hostile(tag: &str) -> String {
    payloads(tag).join(" ")
}

/// Every context in one short string, for names (a cluster's name also makes its nodes' host
/// names, which have a length limit): it closes a double- or single-quoted attribute and its
/// tag, a textarea and a script, then runs as an image's error handler; and it holds a template
/// expression.
pub(crate) fn compact(tag: &str) -> String {
    format!("{tag}\"'></textarea></script><img src=x onerror={BT}>tpl-{{{{ 7*7 }}}}-end")
}

/// A `javascript:` URL.
fn js_url(tag: &str) -> String {
    format!("javascript:{SQ}//{tag}")
}

/// A config object with payloads as values at every depth, in keys, and inside JSON strings.
pub(crate) fn hostile_config(tag: &str) -> Value {
    let mut c = json!({
        "evil": {"k": "x\" autofocus onfocus=document.title='pwned' y"},
        "evil_bt": {"k": format!("x\" autofocus onfocus={BT} y"), "hover": format!("x\" onmouseover={BT} y")},
        "evil_list": [hostile(tag), {"deep": {"deeper": format!("x\" onmouseover={BT} y")}}, 7],
        "plain": hostile(tag),
        "url": js_url(tag),
        "tpl": "tpl-{{ 7*7 }}-end",
    });
    c[format!("{tag}-key\" autofocus onfocus=\"{SQ}\" x=\"")] = json!("v");
    c[format!("{tag}-key<img src=x onerror=\"{SQ}\">")] = json!({"x": 1});
    c
}

/// A user id that is itself hostile (the API takes any `Coopr-UserID`).
fn hostile_user() -> String {
    format!("mallory<img src=x onerror=\"{SQ}\">")
}

const ADMIN: Option<(&str, &str)> = Some(("admin", "acme"));
const ALICE: Option<(&str, &str)> = Some(("alice", "acme"));
const SUPER: Option<(&str, &str)> = Some(("admin", "superadmin"));

/// A write the API may refuse (validated fields): says so and goes on. True when accepted.
async fn try_plant(
    s: &Server,
    who: Option<(&str, &str)>,
    method: &str,
    path: &str,
    body: Value,
) -> bool {
    let (status, text) = api(s, who, method, path, body).await;
    if status != 200 {
        let why: String = text.chars().take(160).collect();
        eprintln!("hostile: {method} {path} refused ({status}): {why}");
    }
    status == 200
}

/// Plugin types, catalog entities and a host pool of tenant `acme`, each field hostile.
async fn plant_catalog(s: &Server) {
    let h = hostile;
    let shell = json!({"name": "shell", "description": h("automatortype.description"),
        "parameters": {"admin": {"fields": {"script": {"label": h("field.label"), "tip": h("field.tip"), "type": "text"}}}}});
    try_plant(s, None, "PUT", "/v2/plugins/automatortypes/shell", shell).await;
    let local = json!({"name": "local", "description": h("providertype.description")});
    try_plant(s, None, "PUT", "/v2/plugins/providertypes/local", local).await;
    ok(
        s,
        None,
        "PUT",
        "/v2/plugins/providertypes/hostpool",
        json!({"name": "hostpool"}),
    )
    .await;
    let entities = [
        (
            "providers/local",
            json!({"name": "local", "providertype": "local", "description": h("provider.description")}),
        ),
        (
            "hardwaretypes/small",
            json!({"name": "small", "description": h("hardwaretype.description"), "providermap": {"local": {"flavor": h("hardwaretype.flavor")}}}),
        ),
        (
            "imagetypes/host",
            json!({"name": "host", "description": h("imagetype.description"), "providermap": {"local": {"image": h("imagetype.image"), "sshuser": "weft"}}}),
        ),
    ];
    for (path, body) in entities {
        ok(s, ADMIN, "PUT", &format!("/v2/{path}"), body).await;
    }
    let fields = json!({"token": h("provider.field"), "nested": {"k": h("provider.nested")}});
    let p = json!({"name": "local", "providertype": "local", "description": h("provider.description"), "provisioner": fields});
    try_plant(s, ADMIN, "PUT", "/v2/providers/local", p).await;
    for name in ["base", "web"] {
        let mut svc = get_json(s, ADMIN, &format!("/v2/services/{name}")).await;
        svc["description"] = json!(h(&format!("service.{name}.description")));
        svc["provisioner"]["actions"]["install"]["fields"]["script"] = json!(h("action.script"));
        ok(s, ADMIN, "PUT", &format!("/v2/services/{name}"), svc).await;
    }
    try_plant(
        s,
        ADMIN,
        "POST",
        "/v2/services",
        json!({"name": compact("service.name")}),
    )
    .await;
    let template = json!({"name": "web", "label": h("template.label"), "description": h("template.description"),
        "compatibility": {"services": ["base", "web"], "hardwaretypes": ["small"], "imagetypes": ["host"]},
        "defaults": {"services": ["base", "web"], "provider": "local", "hardwaretype": "small", "imagetype": "host",
                     "config": hostile_config("template.config")},
        "links": [{"label": h("link.label"), "url": js_url("link.url")}, {"label": "other", "url": h("link.url2")}]});
    ok(s, ADMIN, "POST", "/v2/clustertemplates", template).await;
    let partial = json!({"name": "part", "description": h("partial.description"),
        "defaults": {"config": hostile_config("partial.config")}});
    ok(s, ADMIN, "POST", "/v2/partialtemplates", partial).await;
    ok(
        s,
        ADMIN,
        "POST",
        "/v2/providers",
        json!({"name": "pool", "providertype": "hostpool", "description": h("pool.description")}),
    )
    .await;
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    let host = |labels: Value| json!({"id": "h1", "address": "10.9.0.1", "user": "weft", "key": key, "labels": labels});
    let evil = json!({"role": h("host.label"), h("host.labelkey"): "x"});
    if !try_plant(s, ADMIN, "POST", "/v2/providers/pool/hosts", host(evil)).await {
        ok(
            s,
            ADMIN,
            "POST",
            "/v2/providers/pool/hosts",
            host(json!({"role": "db"})),
        )
        .await;
    }
}

/// Tenants and API keys (the superadmin's), hostile where the API allows.
async fn plant_tenants(s: &Server) {
    let acme = json!({"tenant": {"name": "acme", "workers": 0, "description": hostile("tenant.description")}});
    try_plant(s, SUPER, "PUT", "/v2/tenants/acme", acme).await;
    let evil = json!({"tenant": {"name": compact("tenant.name"), "workers": 0}});
    try_plant(s, SUPER, "POST", "/v2/tenants", evil).await;
    let key = json!({"tenant": "acme", "user": compact("apikey.user"), "admin": false});
    try_plant(s, SUPER, "POST", "/v2/apikeys", key).await;
}

/// Clusters: alice's and one owned by a hostile user id, each with a hostile description and
/// config, and a hostile name if the API takes one (it validates names). Returns their ids.
async fn plant_clusters(s: &Server) -> (String, String) {
    let mut ids = Vec::new();
    let mallory = hostile_user();
    for (who, tag) in [
        (ALICE, "cluster"),
        (Some((mallory.as_str(), "acme")), "owned"),
    ] {
        let mut body = json!({"name": compact(&format!("{tag}.name")), "clusterTemplate": "web",
            "description": hostile(&format!("{tag}.description")), "numMachines": 1,
            "config": hostile_config(&format!("{tag}.config"))});
        let (mut status, mut text) = api(s, who, "POST", "/v2/clusters", body.clone()).await;
        if status == 400 {
            eprintln!("hostile: a hostile cluster name refused: {text}");
            body["name"] = json!(format!("{tag}-plain-name"));
            (status, text) = api(s, who, "POST", "/v2/clusters", body).await;
        }
        assert_eq!(status, 200, "create a hostile cluster: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        ids.push(v["id"].as_str().expect("the new cluster's id").to_string());
    }
    (ids[0].clone(), ids[1].clone())
}

/// A fake provisioner runs cluster `id`'s tasks: machine tasks succeed and report a hostile host
/// name and addresses, every other task fails with hostile output until the job fails.
async fn plant_output(s: &Server, tenant_id: &str) {
    // The fake provisioner registers and says it holds the tenant's worker (a provisioner takes
    // only tasks of tenants it holds workers of).
    let me = json!({"id": "planter", "host": "127.0.0.1", "port": 1, "capacityTotal": 1});
    let (status, text) = api(s, None, "PUT", "/v2/provisioners/planter", me).await;
    assert_eq!(status, 200, "register: {text}");
    let beat = json!({"usage": {tenant_id: 1}});
    let (status, text) = api(s, None, "POST", "/v2/provisioners/planter/heartbeat", beat).await;
    assert_eq!(status, 200, "heartbeat: {text}");
    for _ in 0..60 {
        let take = json!({"workerId": "w1", "provisionerId": "planter", "tenantId": tenant_id});
        let (status, text) = api(s, None, "POST", "/v2/tasks/take", take).await;
        if status == 204 {
            return;
        }
        assert_eq!(status, 200, "take: {text}");
        let task: Value = serde_json::from_str(&text).unwrap();
        let machine = matches!(
            task["taskName"].as_str(),
            Some("CREATE" | "CONFIRM" | "BOOTSTRAP")
        );
        let mut fin = json!({"workerId": "w1", "provisionerId": "planter", "tenantId": tenant_id,
            "taskId": task["taskId"], "status": if machine { 0 } else { 1 },
            "stdout": hostile("task.stdout"), "stderr": hostile("task.stderr")});
        if machine {
            fin["hostname"] = json!(hostile("node.hostname"));
            fin["ipaddresses"] =
                json!({"access_v4": hostile("node.address"), "bind_v4": "127.0.0.9"});
            fin["result"] = json!({"note": hostile("node.result")});
        }
        let (status, text) = api(s, None, "POST", "/v2/tasks/finish", fin).await;
        assert_eq!(status, 200, "finish: {text}");
    }
    panic!("the fake provisioner still had tasks after 60");
}

/// Some hostile values entered through the UI's own forms: a hardware type (tenant admin), an API
/// key's user and a tenant's description (superadmin).
async fn plant_through_forms(c: &Client, base: &str) {
    login(c, base, "acme", "admin").await;
    c.goto(&format!("{base}/ui/admin/hardwaretypes/new"))
        .await
        .unwrap();
    fill(c, "f-name", "evilhw").await;
    fill(
        c,
        "f-description",
        &hostile("form.hardwaretype.description"),
    )
    .await;
    let map = json!({"local": {"flavor": hostile("form.hardwaretype.flavor")}});
    fill(c, "f-providermap", &map.to_string()).await;
    click(c, "#save").await;
    notice_starts(c, "hardware type evilhw").await;
    click(c, "#logout").await;
    login(c, base, "superadmin", "admin").await;
    c.goto(&format!("{base}/ui/super/apikeys")).await.unwrap();
    fill(c, "k-user", &compact("form.apikey.user")).await;
    click(c, "#make-key").await;
    text(c, "#secret").await;
    c.goto(&format!("{base}/ui/super/tenants?edit=acme"))
        .await
        .unwrap();
    fill(c, "t-desc", &hostile("form.tenant.description")).await;
    submit(c, "#tenant-form button[type=submit]").await;
    click(c, "#logout").await;
}

/// What the page shows of an injection (run after every element was focused and hovered).
const INSPECT: &str = r#"
var out = {title: document.title, pwned: typeof window.__pwned === 'undefined' ? null : String(window.__pwned)};
var urlOf = function (e) { return e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action') || e.getAttribute('formaction') || ''; };
out.js = Array.from(document.querySelectorAll('[href],[src],[action],[formaction]')).filter(function (e) { return /^\s*javascript:/i.test(urlOf(e)); }).map(function (e) { return e.outerHTML.slice(0, 200); });
out.handlers = Array.from(document.querySelectorAll('*')).filter(function (e) { return Array.from(e.attributes).some(function (a) { return /^on/i.test(a.name); }); }).map(function (e) { return e.outerHTML.slice(0, 200); });
out.scripts = Array.from(document.scripts).filter(function (s) { return !s.src; }).map(function (s) { return s.outerHTML.slice(0, 200); });
var values = Array.from(document.querySelectorAll('input,textarea')).map(function (e) { return e.value; }).join(' ');
out.tpl = (document.documentElement.outerHTML + values).indexOf('TPL') >= 0;
out.broken = !document.body || document.body.innerText.indexOf('could not be rendered') >= 0;
return out;
"#;

/// Focuses and hovers every element of the page.
const PROVOKE: &str = r#"
var n = 0;
document.querySelectorAll('body *').forEach(function (e) {
  try { if (e.focus) { e.focus(); } } catch (_) {}
  e.dispatchEvent(new FocusEvent('focus'));
  e.dispatchEvent(new FocusEvent('focusin', {bubbles: true}));
  e.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
  n++;
});
return n;
"#;

/// Records and dismisses every open alert dialog.
async fn alerts(c: &Client, at: &str, when: &str, found: &mut Vec<String>) {
    for _ in 0..100 {
        let Ok(text) = c.get_alert_text().await else {
            return;
        };
        found.push(format!(
            "{at}: an alert dialog opened {when} (text {text:?})"
        ));
        let _ = c.dismiss_alert().await;
    }
}

/// `path` with every long query value (a planted payload) shown as `H`.
fn short(path: &str) -> String {
    let Some((page, query)) = path.split_once('?') else {
        return path.to_string();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if v.len() > 40 => format!("{k}=H"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{page}?{}", params.join("&"))
}

/// Opens `path` as the logged-in role and records what fired there.
async fn audit(c: &Client, base: &str, role: &str, path: &str, found: &mut Vec<String>) {
    let at = format!("[{role}] {}", short(path));
    let _ = c.goto(&format!("{base}{path}")).await;
    alerts(c, &at, "on load", found).await;
    if c.execute(PROVOKE, vec![]).await.is_err() {
        alerts(c, &at, "on focus/hover", found).await;
    }
    alerts(c, &at, "on focus/hover", found).await;
    let v = match c
        .execute(&INSPECT.replace("TPL", TPL_RENDERED), vec![])
        .await
    {
        Ok(v) => v,
        Err(e) => {
            found.push(format!("{at}: the page could not be inspected: {e}"));
            return;
        }
    };
    let title = v["title"].as_str().unwrap_or_default();
    if title.contains("pwned") {
        found.push(format!("{at}: document.title is {title:?}"));
    }
    if !v["pwned"].is_null() {
        found.push(format!("{at}: window.__pwned was set ({})", v["pwned"]));
    }
    for (key, what) in [
        ("js", "a javascript: URL"),
        ("handlers", "an injected event-handler attribute"),
        ("scripts", "an injected inline script"),
    ] {
        for e in v[key].as_array().into_iter().flatten() {
            found.push(format!("{at}: {what}: {}", e.as_str().unwrap_or_default()));
        }
    }
    if v["tpl"] == json!(true) {
        found.push(format!(
            "{at}: a template payload rendered ({TPL_RENDERED})"
        ));
    }
    if v["broken"] == json!(true) {
        found.push(format!("{at}: the page failed to render"));
    }
}

/// The `?job=` links of the cluster page that is open.
async fn job_links(c: &Client) -> Vec<String> {
    let v = c
        .execute(
            "return Array.from(document.querySelectorAll('#history a')).map(function (a) { return a.getAttribute('href'); });",
            vec![],
        )
        .await
        .unwrap_or(Value::Null);
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h.as_str().map(String::from))
        .collect()
}

/// The pages every tenant user opens (`clusters`: the clusters they see).
fn user_pages(clusters: &[&str]) -> Vec<String> {
    let q = enc(&hostile("query"));
    let mut pages = vec![
        "/ui/catalog".to_string(),
        "/ui/clusters".into(),
        format!("/ui/clusters?q={q}"),
        format!("/ui/clusters?q={q}&status={q}&template={q}&owner={q}&notice={q}&error={q}"),
        "/ui/clusters/new".into(),
        "/ui/clusters/new?template=web".into(),
        format!("/ui/clusters/new?template=web&name={q}"),
        format!("/ui/clusters/new?template={q}"),
    ];
    for id in clusters {
        pages.push(format!("/ui/clusters/{id}"));
        pages.push(format!("/ui/clusters/{id}?notice={q}&error={q}&job={q}"));
    }
    pages
}

/// The tenant admin's pages beyond a user's: every admin list, form and editor of every entity.
async fn admin_pages(s: &Server) -> Vec<String> {
    let q = enc(&hostile("query"));
    let mut pages = vec![
        "/ui/admin/plugins".to_string(),
        "/ui/admin/catalog".into(),
        "/ui/admin/hostpools".into(),
    ];
    for kind in [
        "providers",
        "hardwaretypes",
        "imagetypes",
        "services",
        "clustertemplates",
        "partialtemplates",
    ] {
        pages.push(format!("/ui/admin/{kind}"));
        pages.push(format!("/ui/admin/{kind}?notice={q}&error={q}"));
        pages.push(format!("/ui/admin/{kind}/new"));
        for e in get_json(s, ADMIN, &format!("/v2/{kind}"))
            .await
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = enc(e["name"].as_str().unwrap_or_default());
            pages.push(format!("/ui/admin/{kind}/{name}"));
            pages.push(format!("/ui/admin/{kind}/{name}/json"));
        }
    }
    pages
}

fn super_pages() -> Vec<String> {
    let q = enc(&hostile("query"));
    [
        "/ui/super/tenants".to_string(),
        "/ui/super/tenants?edit=acme".into(),
        format!("/ui/super/tenants?edit={q}"),
        "/ui/super/provisioners".into(),
        "/ui/super/apikeys".into(),
        "/ui/super/metrics".into(),
        "/ui/clusters".into(),
        "/ui/catalog".into(),
    ]
    .into()
}

/// Opens every page of `pages` as `role`, and the job pages linked from each cluster page.
async fn audit_role(
    c: &Client,
    base: &str,
    role: (&str, &str, &str),
    pages: &[String],
    found: &mut Vec<String>,
) {
    let (label, tenant, user) = role;
    login(c, base, tenant, user).await;
    for (i, path) in pages.iter().enumerate() {
        audit(c, base, label, path, found).await;
        if path.starts_with("/ui/clusters/") && !path.contains('?') && !path.ends_with("/new") {
            for job in job_links(c).await {
                audit(c, base, label, &job, found).await;
            }
        }
        if i % 6 == 0 {
            let name = format!("h-{}-{}", label.replace(' ', "-"), i);
            if let Err(e) = try_shots(c, &name).await {
                eprintln!("layout: {e}");
            }
        }
    }
    let _ = c.goto(&format!("{base}/ui/login")).await;
    alerts(c, label, "at log-out", found).await;
    let _ = c.delete_all_cookies().await;
}

/// The server's count of CSP violation reports, from the external port's `GET /metrics`.
async fn csp_reports(s: &Server) -> Option<f64> {
    let (status, text) = api(s, SUPER, "GET", "/metrics", Value::Null).await;
    assert_eq!(status, 200, "GET /metrics: {text}");
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("weft_ui_csp_reports_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_never_runs_in_any_page() {
    if !weft_testkit::require("chromium") || !weft_testkit::require("chromedriver") {
        return;
    }
    let s = server().await;
    setup(&s).await;
    plant_catalog(&s).await;
    plant_tenants(&s).await;
    let (mine, owned) = plant_clusters(&s).await;
    plant_output(&s, &tenant_id(&s).await).await;
    let base = format!("http://{}", s.external);
    let (mut driver, url) = chromedriver().await;
    let mut caps = serde_json::Map::new();
    caps.insert("unhandledPromptBehavior".into(), json!("ignore"));
    let c = browser_with(&url, caps).await;
    plant_through_forms(&c, &base).await;
    let mut found = Vec::new();
    let user = user_pages(&[&mine]);
    let mut admin = user_pages(&[&mine, &owned]);
    admin.extend(admin_pages(&s).await);
    let mallory = hostile_user();
    for (role, pages) in [
        (("tenant user", "acme", "alice"), &user),
        (
            ("hostile user id", "acme", mallory.as_str()),
            &user_pages(&[&owned]),
        ),
        (("tenant admin", "acme", "admin"), &admin),
        (("superadmin", "superadmin", "admin"), &super_pages()),
    ] {
        audit_role(&c, &base, role, pages, &mut found).await;
    }
    let _ = c.close().await;
    let _ = driver.kill().await;
    // Last: the browser reported no Content-Security-Policy violation on any page.
    let reports = csp_reports(&s).await;
    let csp = match reports {
        None => "no CSP report counter".to_string(),
        Some(n) => format!("{n} CSP reports"),
    };
    assert!(
        found.is_empty(),
        "{} findings of hostile input at work ({csp}; H = a hostile query value):\n{}",
        found.len(),
        found.join("\n")
    );
    let reports = reports.expect("no CSP report counter");
    assert_eq!(
        reports, 0.0,
        "the browser reported Content-Security-Policy violations"
    );
}
