//! The OpenAPI documents: each port serves one of its own routes (valid OpenAPI 3), together they
//! list every route, every listed route exists on its port, every operation documents the errors
//! it can give, and docs/openapi.json (external) and docs/openapi-internal.json are up to date
//! (`WEFT_BLESS=1` rewrites them).

use std::collections::BTreeSet;
use std::path::PathBuf;

use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::Value;

use crate::common::{Harness, Port};

use weft_server::Listener;

/// The checked-in document of each listener.
fn checked_in(l: Listener) -> PathBuf {
    let name = match l {
        Listener::External => "openapi.json",
        Listener::Internal => "openapi-internal.json",
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name)
}

fn rendered(l: Listener) -> String {
    serde_json::to_string_pretty(&weft_server::openapi(l)).expect("openapi serializes") + "\n"
}

#[test]
fn openapi_json_is_up_to_date() {
    for l in [Listener::External, Listener::Internal] {
        let path = checked_in(l);
        let fresh = rendered(l);
        if std::env::var_os("WEFT_BLESS").is_some() {
            std::fs::write(&path, &fresh).expect("write the OpenAPI document");
            continue;
        }
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            old == fresh,
            "{} is stale (or missing): run `WEFT_BLESS=1 cargo test -p weft-server openapi` to rewrite it",
            path.display()
        );
    }
}

/// (method, path) of every route each port serves.
fn expected() -> Vec<(&'static str, String)> {
    let mut r = Vec::new();
    for kind in [
        "providers",
        "hardwaretypes",
        "imagetypes",
        "services",
        "clustertemplates",
        "partialtemplates",
    ] {
        r.push(("get", format!("/v2/{kind}")));
        r.push(("post", format!("/v2/{kind}")));
        r.push(("get", format!("/v2/{kind}/{{name}}")));
        r.push(("put", format!("/v2/{kind}/{{name}}")));
        r.push(("delete", format!("/v2/{kind}/{{name}}")));
        r.push(("get", format!("/v2/{kind}/{{name}}/{{version}}")));
        r.push(("delete", format!("/v2/{kind}/{{name}}/{{version}}")));
    }
    let fixed = [
        ("get", "/status"),
        ("get", "/v2/openapi.json"),
        ("get", "/v2/export"),
        ("post", "/v2/import"),
        ("post", "/v2/resolve"),
        ("get", "/v2/tenants"),
        ("post", "/v2/tenants"),
        ("get", "/v2/tenants/{name}"),
        ("put", "/v2/tenants/{name}"),
        ("delete", "/v2/tenants/{name}"),
        ("get", "/v2/plugins/{ptype}"),
        ("get", "/v2/plugins/{ptype}/{name}"),
        ("put", "/v2/plugins/{ptype}/{name}"),
        ("delete", "/v2/plugins/{ptype}/{name}"),
        ("get", "/v2/plugins/{ptype}/{name}/{rtype}"),
        ("delete", "/v2/plugins/{ptype}/{name}/{rtype}"),
        ("post", "/v2/plugins/{ptype}/{name}/{rtype}/{rname}"),
        ("get", "/v2/plugins/{ptype}/{name}/{rtype}/{rname}"),
        ("delete", "/v2/plugins/{ptype}/{name}/{rtype}/{rname}"),
        (
            "delete",
            "/v2/plugins/{ptype}/{name}/{rtype}/{rname}/versions/{version}",
        ),
        (
            "post",
            "/v2/plugins/{ptype}/{name}/{rtype}/{rname}/versions/{version}/stage",
        ),
        (
            "post",
            "/v2/plugins/{ptype}/{name}/{rtype}/{rname}/versions/{version}/recall",
        ),
        ("post", "/v2/plugins/sync"),
        (
            "get",
            "/v2/tenants/{tenant_id}/{ptype}/{name}/{rtype}/{rname}/versions/{version}",
        ),
        ("get", "/v2/profile"),
        ("put", "/v2/profile"),
        ("delete", "/v2/profile"),
        ("get", "/v2/provisioners"),
        ("get", "/v2/provisioners/{id}"),
        ("put", "/v2/provisioners/{id}"),
        ("delete", "/v2/provisioners/{id}"),
        ("post", "/v2/provisioners/{id}/heartbeat"),
        ("get", "/v2/metrics/queues"),
        ("get", "/v2/metrics/nodes/usage"),
        ("get", "/v2/apikeys"),
        ("post", "/v2/apikeys"),
        ("delete", "/v2/apikeys/{id}"),
    ];
    r.extend(fixed.iter().map(|(m, p)| (*m, p.to_string())));
    r
}

fn refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.insert(r.clone());
            }
            m.values().for_each(|v| refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn served_document_is_openapi_3_with_every_route() {
    let h = Harness::new().await;
    let mut docs = Vec::new();
    for (port, l) in [
        (Port::External, Listener::External),
        (Port::Internal, Listener::Internal),
    ] {
        let r = h
            .send(
                port,
                Request::get("/v2/openapi.json")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .expect(200);
        assert!(r.content_type().starts_with("application/json"));
        let doc = r.json();
        assert_eq!(doc, serde_json::to_value(weft_server::openapi(l)).unwrap());
        docs.push(doc);
    }
    for doc in &docs {
        assert!(
            doc["openapi"].as_str().unwrap().starts_with("3."),
            "{}",
            doc["openapi"]
        );
        assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    }
    // Each port's document lists only its own routes.
    let tags = |doc: &Value| -> Vec<bool> {
        doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .map(|op| {
                op["tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t.as_str().unwrap().contains("internal port"))
            })
            .collect()
    };
    assert!(tags(&docs[0]).iter().all(|internal| !internal));
    assert!(tags(&docs[1]).iter().all(|internal| *internal));
    let mut paths = docs[0]["paths"].as_object().unwrap().clone();
    for (p, item) in docs[1]["paths"].as_object().unwrap() {
        let entry = paths
            .entry(p.clone())
            .or_insert_with(|| serde_json::json!({}));
        for (m, op) in item.as_object().unwrap() {
            entry[m] = op.clone();
        }
    }
    for (m, p) in expected() {
        let op = &paths
            .get(&p)
            .unwrap_or_else(|| panic!("{p} missing from the OpenAPI paths"))[m];
        assert!(op.is_object(), "{m} {p} missing from the OpenAPI document");
        assert!(
            op["responses"].as_object().is_some_and(|r| !r.is_empty()),
            "{m} {p} documents no responses"
        );
        for param in p
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        {
            let params = op["parameters"]
                .as_array()
                .unwrap_or_else(|| panic!("{m} {p}: no parameters"));
            assert!(
                params
                    .iter()
                    .any(|x| x["name"] == param && x["in"] == "path"),
                "{m} {p}: {param} undocumented"
            );
            // A path can name something that does not exist.
            assert!(op["responses"]["404"].is_object(), "{m} {p}: no 404");
        }
        if op["requestBody"].is_object() {
            assert!(op["responses"]["400"].is_object(), "{m} {p}: no 400");
        }
        if !p.starts_with("/status") && !p.ends_with("openapi.json") {
            assert!(op["responses"]["401"].is_object(), "{m} {p}: no 401");
        }
    }
    let doc = &docs[0];
    // Every schema reference resolves.
    let mut all = BTreeSet::new();
    refs(doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("odd $ref {r}"));
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "$ref {r} does not resolve"
        );
    }
}

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let h = Harness::new().await;
    let ext = serde_json::to_value(weft_server::openapi(Listener::External)).unwrap();
    let int = serde_json::to_value(weft_server::openapi(Listener::Internal)).unwrap();
    let ops = ext["paths"]
        .as_object()
        .unwrap()
        .iter()
        .chain(int["paths"].as_object().unwrap());
    for (path, item) in ops {
        for (method, op) in item.as_object().unwrap() {
            let Ok(m) = Method::from_bytes(method.to_uppercase().as_bytes()) else {
                continue;
            };
            let internal = op["tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t.as_str().unwrap().contains("internal port"));
            let mut concrete: String = path
                .split('/')
                .map(|s| if s.starts_with('{') { "x" } else { s })
                .collect::<Vec<_>>()
                .join("/");
            // The event stream ends only when asked to (else it waits for events for ever).
            if path == "/v2/events" {
                concrete.push_str("?follow=false");
            }
            let r = if internal {
                h.internal(m.clone(), &concrete, "").await
            } else {
                h.call(Some(crate::common::SA), m.clone(), &concrete, "")
                    .await
            };
            let text = r.text();
            assert!(
                !text.starts_with("Problem accessing"),
                "{method} {path} is documented but not routed: {text}"
            );
            // getClusterStatuses answers 501 on purpose (Coopr never answered it at all).
            let unimplemented = path == "/v2/getClusterStatuses" && r.status.as_u16() == 501;
            assert!(
                r.status.as_u16() < 500 || unimplemented,
                "{method} {path}: {} {text}",
                r.status
            );
        }
    }
}
