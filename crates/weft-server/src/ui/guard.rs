//! What stands between a browser and the UI besides escaping: the security headers of every UI
//! answer (a strict Content-Security-Policy and its report endpoint, no sniffing, no framing, no
//! referrer beyond the origin) and the cross-site request check of every state-changing form.
//!
//! A form POST passes only when its `csrf` field equals the session's token (made at login, kept
//! server-side, written into every form by the templates) and, where the browser says where the
//! request came from (`Sec-Fetch-Site`, `Origin`), it came from this origin. The token is what
//! holds: a page on another port or subdomain of the same host is same-site, so `SameSite=Strict`
//! cookies reach it, but it cannot read the token. The login form has no session yet and relies on
//! the origin check. The browser's API calls (`/ui/api/...`) need the `X-Weft-UI` header instead,
//! which no cross-origin page can send without a CORS preflight that the server never grants.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::html;
use super::session::{cookie_token, Ui};

/// The form field that carries the session's CSRF token.
pub(super) const CSRF_FIELD: &str = "csrf";

/// Form bodies are read whole for the token check; no UI form comes near this.
const FORM_LIMIT: usize = 4 << 20;

/// The Content-Security-Policy of every UI page: nothing inline (scripts, handlers, styles), the
/// one script and stylesheet from this origin, no framing, forms only to this origin.
pub(super) fn content_security_policy() -> &'static str {
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; \
     report-uri /ui/csp-report"
}

/// Adds the security headers to a UI answer.
pub(super) async fn headers(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    let set = |h: &mut HeaderMap, name: &'static str, v: &'static str| {
        h.insert(name, HeaderValue::from_static(v));
    };
    set(h, "content-security-policy", content_security_policy());
    set(h, "x-content-type-options", "nosniff");
    set(h, "x-frame-options", "DENY");
    set(h, "referrer-policy", "same-origin");
    set(h, "cross-origin-opener-policy", "same-origin");
    if !h.contains_key(header::CACHE_CONTROL) {
        set(h, "cache-control", "no-store");
    }
    r
}

/// Refuses a state-changing UI request that did not come from one of this origin's own pages.
pub(super) async fn cross_site(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let path = req.uri().path().to_string();
    if path == "/ui/csp-report" || path.starts_with("/ui/api/") {
        return next.run(req).await;
    }
    if let Err(why) = same_origin(req.headers()) {
        return refuse(why);
    }
    if path == "/ui/login" {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = to_bytes(body, FORM_LIMIT).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let expected = parts
        .extensions
        .get::<Arc<Ui>>()
        .zip(cookie_token(&parts))
        .and_then(|(ui, t)| ui.sessions.lock().ok()?.get(&t).map(|l| l.csrf.clone()));
    // No session: the handler sends the caller to the login page.
    if let Some(expected) = expected {
        let given = form_field(&bytes, CSRF_FIELD).unwrap_or_default();
        if !same_secret(given.as_bytes(), expected.as_bytes()) {
            return refuse("the form is not from this session (reload the page and try again)");
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `Sec-Fetch-Site` and `Origin`, where the browser sent them, name this origin.
fn same_origin(h: &HeaderMap) -> Result<(), &'static str> {
    let get = |n: header::HeaderName| h.get(n).and_then(|v| v.to_str().ok());
    if let Some(site) = get(header::HeaderName::from_static("sec-fetch-site")) {
        if !matches!(site, "same-origin" | "none") {
            return Err("a form of another site may not change anything here");
        }
    }
    if let Some(origin) = get(header::ORIGIN) {
        let host = get(header::HOST).unwrap_or_default();
        let bare = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if bare != Some(host) {
            return Err("a form of another origin may not change anything here");
        }
    }
    Ok(())
}

fn refuse(why: &str) -> Response {
    html::render_error(StatusCode::FORBIDDEN, why)
}

/// The first value of `name` in a urlencoded body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Compares two secrets in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `POST /ui/csp-report`: a browser reporting a blocked script, style or frame. Counted and
/// logged (the directive and what was blocked, a few hundred bytes at most).
pub(super) async fn csp_report(body: axum::body::Bytes) -> StatusCode {
    crate::metrics::CSP_REPORTS.fetch_add(1, Ordering::Relaxed);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let r = &v["csp-report"];
    let short = |k: &str| {
        r[k].as_str()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect::<String>()
    };
    tracing::warn!(
        directive = %short("violated-directive"),
        blocked = %short("blocked-uri"),
        page = %short("document-uri"),
        "content security policy violation reported by a browser"
    );
    StatusCode::NO_CONTENT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked_where_given() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:55054"));
        assert!(same_origin(&h).is_ok(), "no Origin: the token decides");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:55054"),
        );
        assert!(same_origin(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(same_origin(&h).is_err());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:55099"),
        );
        assert!(same_origin(&h).is_err(), "another port is another origin");
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", HeaderValue::from_static("same-site"));
        assert!(same_origin(&h).is_err());
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&h).is_ok());
    }

    #[test]
    fn tokens_are_read_and_compared() {
        assert_eq!(
            form_field(b"op=delete&csrf=ab%2Bc&x=1", "csrf").as_deref(),
            Some("ab+c")
        );
        assert_eq!(form_field(b"op=delete", "csrf"), None);
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }
}
