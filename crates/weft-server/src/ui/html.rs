//! Templates, static files and small helpers of the web UI (time formatting, URL encoding, mapping
//! an API message to the form field it names).

use std::collections::BTreeMap;

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("macros.html", include_str!("templates/macros.html")),
    ("login.html", include_str!("templates/login.html")),
    ("error.html", include_str!("templates/error.html")),
    ("catalog.html", include_str!("templates/catalog.html")),
    ("clusters.html", include_str!("templates/clusters.html")),
    ("costs.html", include_str!("templates/costs.html")),
    (
        "cluster_new.html",
        include_str!("templates/cluster_new.html"),
    ),
    ("cluster.html", include_str!("templates/cluster.html")),
    (
        "cluster_grid.html",
        include_str!("templates/cluster_grid.html"),
    ),
    (
        "cluster_links.html",
        include_str!("templates/cluster_links.html"),
    ),
    ("entities.html", include_str!("templates/entities.html")),
    (
        "entity_form.html",
        include_str!("templates/entity_form.html"),
    ),
    ("plugins.html", include_str!("templates/plugins.html")),
    (
        "import_export.html",
        include_str!("templates/import_export.html"),
    ),
    ("tenants.html", include_str!("templates/tenants.html")),
    (
        "provisioners.html",
        include_str!("templates/provisioners.html"),
    ),
    ("metrics.html", include_str!("templates/metrics.html")),
    ("apikeys.html", include_str!("templates/apikeys.html")),
    ("audit.html", include_str!("templates/audit.html")),
    ("hostpools.html", include_str!("templates/hostpools.html")),
    (
        "template_editor.html",
        include_str!("templates/template_editor.html"),
    ),
    (
        "service_editor.html",
        include_str!("templates/service_editor.html"),
    ),
    (
        "solve_preview.html",
        include_str!("templates/solve_preview.html"),
    ),
];

const CSS: &str = include_str!("static/style.css");
const JS: &str = include_str!("static/app.js");

/// The template environment, with every template loaded (a broken template panics here, at
/// startup and in every test).
pub(super) fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    env.add_filter("time", |ms: i64| fmt_time(ms));
    env.add_filter("bound", |n: minijinja::Value| fmt_bound(&n));
    static JS_SRI: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static CSS_SRI: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    env.add_global("js_integrity", integrity(JS, &JS_SRI));
    env.add_global("css_integrity", integrity(CSS, &CSS_SRI));
    for (name, src) in TEMPLATES {
        if let Err(e) = env.add_template(name, src) {
            panic!("ui template {name}: {e:#}");
        }
    }
    env
}

/// The SRI value (`sha256-...`) of a static file, computed once.
fn integrity(body: &'static str, cell: &'static std::sync::OnceLock<String>) -> &'static str {
    cell.get_or_init(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(body.as_bytes());
        format!(
            "sha256-{}",
            base64::engine::general_purpose::STANDARD.encode(digest)
        )
    })
}

/// The rows of a key/value editor of a JSON object (a cluster's config, a template's default
/// config): each key, its value as text (a string as it is, anything else as JSON) and `string`
/// or `json`, which says how [`object_from_rows`] reads the text back, so a form saved unchanged
/// gives the object back exactly.
pub(super) fn value_rows(obj: &Value) -> Vec<Value> {
    obj.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| match v {
            Value::String(s) => serde_json::json!({"key": k, "text": s, "kind": "string"}),
            other => serde_json::json!({"key": k, "text": other.to_string(), "kind": "json"}),
        })
        .collect()
}

/// The object a key/value editor posted: rows `{prefix}k{i}` / `{prefix}v{i}` (`{prefix}t{i}` =
/// `string` keeps a value a string; otherwise a value that reads as JSON is taken as JSON). Rows
/// with an empty key drop out; a key given twice is an error.
pub(super) fn object_from_rows(
    f: &BTreeMap<String, String>,
    prefix: &str,
) -> Result<Value, String> {
    let mut out = serde_json::Map::new();
    for i in 0.. {
        let Some(key) = f.get(&format!("{prefix}k{i}")) else {
            break;
        };
        let key = key.trim();
        if key.is_empty() {
            continue;
        }
        let raw = f
            .get(&format!("{prefix}v{i}"))
            .map(String::as_str)
            .unwrap_or_default();
        let as_string = f
            .get(&format!("{prefix}t{i}"))
            .is_some_and(|t| t == "string");
        let value = if as_string {
            Value::String(raw.to_string())
        } else {
            serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
        };
        if out.insert(key.to_string(), value).is_some() {
            return Err(format!("key {key} is given twice"));
        }
    }
    Ok(Value::Object(out))
}

/// The links a links editor posted: rows `{prefix}label{i}` / `{prefix}url{i}`; a row with
/// neither drops out.
pub(super) fn links_from_rows(f: &BTreeMap<String, String>, prefix: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 0.. {
        let label = f.get(&format!("{prefix}label{i}"));
        let url = f.get(&format!("{prefix}url{i}"));
        if label.is_none() && url.is_none() {
            break;
        }
        let (label, url) = (
            label.map(String::as_str).unwrap_or_default(),
            url.map(String::as_str).unwrap_or_default(),
        );
        if !label.trim().is_empty() || !url.trim().is_empty() {
            out.push(serde_json::json!({"label": label, "url": url}));
        }
    }
    out
}

/// Renders a template into an HTML response.
pub(super) fn render(
    env: &minijinja::Environment<'static>,
    status: StatusCode,
    name: &str,
    ctx: Value,
) -> Response {
    match env
        .get_template(name)
        .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(&ctx))))
    {
        Ok(body) => (status, Html(body)).into_response(),
        Err(e) => {
            tracing::error!(template = name, error = %format!("{e:#}"), "ui template failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered; the server log has the cause",
            )
                .into_response()
        }
    }
}

/// A plain error page for callers with no session.
pub fn render_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Html(format!(
            "<!doctype html><title>{0}</title><h1>{0}</h1><p>{1}</p>",
            status,
            escape(message)
        )),
    )
        .into_response()
}

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(super) async fn static_file(Path(file): Path<String>) -> Response {
    let (ct, body) = match file.as_str() {
        "style.css" => ("text/css; charset=utf-8", CSS),
        "app.js" => ("text/javascript; charset=utf-8", JS),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, ct),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM UTC`; 0 or less as `never`.
pub(super) fn fmt_time(ms: i64) -> String {
    if ms <= 0 {
        return "never".into();
    }
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// A count or limit as people read it: Coopr's 2147483647 (and anything above) as `unbounded`.
pub(super) fn fmt_bound(n: &minijinja::Value) -> String {
    match i64::try_from(n.clone()) {
        Ok(v) if v >= weft_model::UNBOUNDED as i64 => "unbounded".into(),
        Ok(v) => v.to_string(),
        Err(_) if n.is_undefined() || n.is_none() => "unbounded".into(),
        Err(_) => n.to_string(),
    }
}

/// Percent-encodes a query or path value.
pub(super) fn enc(s: &str) -> String {
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

/// The form field an API message is about: the API's messages start with the field path
/// (`constraints.size.min must be ...`), so the first of `fields` that the message starts with (as a
/// whole path segment) wins; otherwise `None` and the message belongs to the whole form.
pub(super) fn field_of<'a>(message: &str, fields: &[&'a str]) -> Option<&'a str> {
    let m = message.trim_start_matches('"');
    fields.iter().copied().find(|f| {
        m.strip_prefix(f)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', ' ', '[', ':', '"', ',']))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_utc() {
        assert_eq!(fmt_time(0), "never");
        assert_eq!(fmt_time(1_700_000_000_000), "2023-11-14 22:13 UTC");
        assert_eq!(fmt_time(951_782_400_000), "2000-02-29 00:00 UTC");
    }

    #[test]
    fn messages_map_to_fields() {
        let f = ["name", "constraints", "defaults"];
        assert_eq!(
            field_of("constraints.size.min must be at least 0", &f),
            Some("constraints")
        );
        assert_eq!(field_of("name must be specified", &f), Some("name"));
        assert_eq!(field_of("namespace is odd", &f), None);
        assert_eq!(field_of("something else", &f), None);
    }

    #[test]
    fn unbounded_limits_read_as_words() {
        assert_eq!(
            fmt_bound(&minijinja::Value::from(2_147_483_647_i64)),
            "unbounded"
        );
        assert_eq!(fmt_bound(&minijinja::Value::from(5)), "5");
        assert_eq!(fmt_bound(&minijinja::Value::UNDEFINED), "unbounded");
    }

    /// Every value reaches HTML through auto-escaping: no template marks anything safe, and JSON
    /// goes into a page only inside `<script type="application/json">` (where `tojson` escapes
    /// `<`, `>` and `&`), never into an attribute or text, where its quotes would break out.
    #[test]
    fn templates_never_bypass_escaping() {
        for (name, src) in TEMPLATES {
            let squeezed: String = src.chars().filter(|c| !c.is_whitespace()).collect();
            assert!(!squeezed.contains("|safe"), "{name} marks a value safe");
            assert!(
                !squeezed.contains("autoescapefalse"),
                "{name} turns escaping off"
            );
            for (at, _) in squeezed.match_indices("|tojson") {
                let before = &squeezed[..at];
                let open = before.rfind("<scripttype=\"application/json\"");
                let close = before.rfind("</script>");
                assert!(
                    open.is_some() && open > close,
                    "{name}: tojson outside <script type=\"application/json\">"
                );
            }
            assert!(
                !has_inline_handler(src),
                "{name} has an inline event handler (the CSP forbids them)"
            );
            assert!(!src.contains("style=\""), "{name} has an inline style");
            let scripts = src.matches("<script").count();
            let expected = usize::from(*name == "base.html");
            assert_eq!(scripts, expected, "{name}: only base.html loads a script");
        }
    }

    /// A word like `onclick=` (an attribute that runs script).
    fn has_inline_handler(src: &str) -> bool {
        src.split(|c: char| c.is_whitespace() || c == '<').any(|w| {
            w.strip_prefix("on")
                .and_then(|rest| rest.split_once('='))
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase()))
        })
    }

    #[test]
    fn a_hostile_value_stays_text_in_every_context() {
        let env = environment();
        let evil =
            "x\" autofocus onfocus=alert(1) y</textarea></script><svg onload=alert(1)>{{ 7*7 }}";
        let t = env
            .template_from_str(
                "<input value=\"{{ v }}\"><p title='{{ v }}'>{{ v }}</p><textarea>{{ v }}</textarea>",
            )
            .unwrap();
        let out = t.render(minijinja::context! { v => evil }).unwrap();
        assert_eq!(
            out.matches('"').count(),
            2,
            "only the template's own quotes: {out}"
        );
        assert!(
            !out.contains("<svg") && !out.contains("</textarea></script>"),
            "{out}"
        );
        assert!(!out.contains("49"), "{out}");
    }

    #[test]
    fn encoding() {
        assert_eq!(enc("a b/c?"), "a%20b%2Fc%3F");
    }
}
