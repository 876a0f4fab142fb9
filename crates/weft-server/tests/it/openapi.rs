//! The OpenAPI document: served on both ports, valid OpenAPI 3, lists every route, every listed
//! route exists, and docs/openapi.json is up to date (`WEFT_BLESS=1` rewrites it).

use std::collections::BTreeSet;
use std::path::PathBuf;

use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::Value;

use crate::common::{Harness, Port};

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

fn rendered() -> String {
    serde_json::to_string_pretty(&weft_server::openapi()).expect("openapi serializes") + "\n"
}

#[test]
fn openapi_json_is_up_to_date() {
    let path = checked_in();
    let fresh = rendered();
    if std::env::var_os("WEFT_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write docs/openapi.json");
        return;
    }
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        old == fresh,
        "docs/openapi.json is stale (or missing): run `WEFT_BLESS=1 cargo test -p weft-server openapi` to rewrite it"
    );
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
    for port in [Port::External, Port::Internal] {
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
        docs.push(r.json());
    }
    assert_eq!(docs[0], docs[1]);
    let doc = &docs[0];
    assert_eq!(doc, &serde_json::to_value(weft_server::openapi()).unwrap());
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        doc["openapi"]
    );
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    let paths = doc["paths"].as_object().unwrap();
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
        }
    }
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
    let doc = serde_json::to_value(weft_server::openapi()).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Ok(m) = Method::from_bytes(method.to_uppercase().as_bytes()) else {
                continue;
            };
            let internal = op["tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t.as_str().unwrap().contains("internal port"));
            let concrete: String = path
                .split('/')
                .map(|s| if s.starts_with('{') { "x" } else { s })
                .collect::<Vec<_>>()
                .join("/");
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
