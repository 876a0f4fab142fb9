//! Bad input on every route that reads a body: malformed JSON, wrong types, oversize bodies, bad
//! names, deep nesting and non-UTF-8 bytes all get a 4xx naming the problem, never a 5xx.

use axum::http::Method;
use serde_json::json;

use crate::common::{admin, Harness, Port, Who, SA};

const LIMIT: u64 = 4096;

/// Every route that reads a JSON body: (port, caller, method, path).
fn body_routes() -> Vec<(Port, Option<Who>, Method, String)> {
    let mut r = Vec::new();
    let ext = |m: Method, p: String| (Port::External, Some(SA), m, p);
    for (kind, _) in crate::common::KINDS {
        r.push(ext(Method::POST, format!("/v2/{kind}")));
        r.push(ext(Method::PUT, format!("/v2/{kind}/x")));
    }
    for p in ["/v2/tenants", "/v2/import", "/v2/resolve", "/v2/apikeys"] {
        r.push(ext(Method::POST, p.into()));
    }
    r.push(ext(Method::PUT, "/v2/tenants/x".into()));
    r.push((
        Port::External,
        Some(admin("acme")),
        Method::PUT,
        "/v2/profile".into(),
    ));
    r.push((
        Port::Internal,
        None,
        Method::PUT,
        "/v2/plugins/providertypes/x".into(),
    ));
    r.push((
        Port::Internal,
        None,
        Method::PUT,
        "/v2/provisioners/p1".into(),
    ));
    r.push((
        Port::Internal,
        None,
        Method::POST,
        "/v2/provisioners/p1/heartbeat".into(),
    ));
    r
}

async fn send(
    h: &Harness,
    port: Port,
    who: Option<Who>,
    m: Method,
    path: &str,
    body: Vec<u8>,
) -> crate::common::Resp {
    match port {
        Port::External => h.call(who, m, path, body).await,
        Port::Internal => h.internal(m, path, body).await,
    }
}

#[tokio::test]
async fn malformed_oversize_nested_and_binary_bodies_are_4xx() {
    let h = Harness::with(|c| c.body_limit = Some(LIMIT)).await;
    h.tenant("acme").await;
    h.provisioner("p1", 1).await;
    // Deep but within the body limit, so the parser sees them.
    let deep_array = format!("{}{}", "[".repeat(2000), "]".repeat(2000));
    let deep_object = format!("{}1{}", "{'a':".repeat(600), "}".repeat(600));
    let unclosed = "[{".repeat(2000);
    let cases: Vec<(&str, Vec<u8>, &[u16])> = vec![
        ("malformed", b"{'name': ".to_vec(), &[400]),
        ("garbage", b"this is not json".to_vec(), &[400]),
        ("a number", b"42".to_vec(), &[400]),
        ("a string", b"\"text\"".to_vec(), &[400]),
        ("an array", b"[1,2,3]".to_vec(), &[400]),
        ("non-UTF-8", vec![0xff, 0xfe, b'{', 0x80, b'}'], &[400]),
        ("deep array", deep_array.into_bytes(), &[400]),
        ("deep object", deep_object.into_bytes(), &[400]),
        ("unclosed", unclosed.into_bytes(), &[400]),
        (
            "oversize",
            format!("{{\"name\":\"{}\"}}", "x".repeat(LIMIT as usize)).into_bytes(),
            &[413],
        ),
    ];
    for (port, who, m, path) in body_routes() {
        for (what, body, allowed) in &cases {
            let r = send(&h, port, who, m.clone(), &path, body.clone()).await;
            assert!(
                allowed.contains(&r.status.as_u16()),
                "{m} {path} with {what}: {} {}",
                r.status,
                r.text()
            );
            assert!(
                !r.text().is_empty(),
                "{m} {path} with {what}: an error needs a message"
            );
            assert!(
                r.content_type().starts_with("text/plain"),
                "{m} {path} with {what}: errors are plain text"
            );
        }
    }
    // Just under the limit is fine.
    let body = format!(
        "{{\"name\":\"{}\",\"providertype\":\"f\",\"description\":\"{}\"}}",
        "n",
        "d".repeat(3000)
    );
    h.post(SA, "/v2/providers", body).await.expect(200);
    // Nesting within bounds still parses (JSON5 path included).
    let nested = format!(
        "{{'name':'deep','defaults':{{'config':{}1{}}}}}",
        "{'a':".repeat(40),
        "}".repeat(40)
    );
    h.post(SA, "/v2/clustertemplates", nested).await.expect(200);
}

#[tokio::test]
async fn malformed_json_messages_say_where() {
    let h = Harness::new().await;
    let r = h
        .post(
            SA,
            "/v2/providers",
            "{\"name\": \"x\",\n \"providertype\": }",
        )
        .await
        .expect(400);
    assert!(r.text().contains("line 2"), "{}", r.text());
    let r = h
        .post(SA, "/v2/providers", vec![0xffu8, 0xfe])
        .await
        .expect(400);
    assert!(r.text().contains("UTF-8"), "{}", r.text());
    let r = h.post(SA, "/v2/providers", "").await.expect(400);
    assert!(r.text().contains("empty"), "{}", r.text());
    // Very deep nesting under the default 1 MiB limit: refused, not a stack overflow.
    let deep = format!("{}{}", "{'a':[".repeat(100_000), "]}".repeat(100_000));
    let r = h.post(SA, "/v2/import", deep).await.expect(400);
    assert!(r.text().contains("nested"), "{}", r.text());
    let deep = format!("{}{}", "[".repeat(400_000), "]".repeat(400_000));
    h.put(SA, "/v2/profile", deep).await.expect(400);
}

#[tokio::test]
async fn resource_uploads_have_their_own_limit() {
    let h = Harness::with(|c| {
        c.body_limit = Some(800);
        c.resource_body_limit = Some(1500);
    })
    .await;
    h.plugin_types().await;
    let path = "/v2/plugins/automatortypes/shell/scripts/big";
    // Over the JSON limit but within the resource limit.
    h.post(SA, path, vec![7u8; 1200]).await.expect(200);
    h.post(SA, path, vec![7u8; 2000]).await.expect(413);
    // Other routes keep the JSON limit.
    let big = format!("{{\"name\":\"x\",\"description\":\"{}\"}}", "d".repeat(900));
    h.post(SA, "/v2/hardwaretypes", big).await.expect(413);
    let list = h.get(SA, path).await.expect(200).json();
    assert_eq!(
        list.as_array().unwrap().len(),
        1,
        "a refused upload leaves no version: {list}"
    );
}

#[tokio::test]
async fn wrong_types_name_the_field() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    h.provisioner("p1", 1).await;
    let ext = |p: &str| (Port::External, Some(SA), Method::POST, p.to_string());
    let cases = vec![
        (
            ext("/v2/providers"),
            json!({"name": "x", "providertype": ["a"]}),
            "providertype",
        ),
        (
            ext("/v2/providers"),
            json!({"name": "x", "providertype": "f", "provisioner": [1]}),
            "provisioner",
        ),
        (
            ext("/v2/hardwaretypes"),
            json!({"name": "x", "providermap": {"fake": {"flavor": [1]}}}),
            "providermap",
        ),
        (ext("/v2/imagetypes"), json!({"name": {"a": 1}}), "name"),
        (
            ext("/v2/services"),
            json!({"name": "s", "provisioner": {"actions": {"install": {"type": "shell", "fields": "x"}}}}),
            "provisioner",
        ),
        (
            ext("/v2/services"),
            json!({"name": "s", "provisioner": {"actions": {"install": {"fields": {}}}}}),
            "type",
        ),
        (
            ext("/v2/clustertemplates"),
            json!({"name": "t", "constraints": {"size": {"min": "x"}}}),
            "constraints.size.min",
        ),
        (
            ext("/v2/clustertemplates"),
            json!({"name": "t", "administration": {"leaseduration": {"initial": "forever"}}}),
            "leaseduration",
        ),
        (
            ext("/v2/partialtemplates"),
            json!({"name": "t", "immutable": "maybe"}),
            "immutable",
        ),
        (
            ext("/v2/tenants"),
            json!({"tenant": {"name": "t", "workers": "many"}}),
            "workers",
        ),
        (
            ext("/v2/tenants"),
            json!({"tenant": {"name": "t", "workers": -1}}),
            "workers",
        ),
        (
            ext("/v2/apikeys"),
            json!({"tenant": "acme", "user": "u", "admin": "perhaps"}),
            "admin",
        ),
        (ext("/v2/import"), json!({"providers": "x"}), "providers"),
        (
            ext("/v2/resolve"),
            json!({"name": "t", "extends": "x"}),
            "extends",
        ),
        (
            (
                Port::Internal,
                None,
                Method::PUT,
                "/v2/provisioners/p1".into(),
            ),
            json!({"host": "h", "port": "x", "capacityTotal": 1}),
            "port",
        ),
        (
            (
                Port::Internal,
                None,
                Method::POST,
                "/v2/provisioners/p1/heartbeat".into(),
            ),
            json!({"usage": {"t": "x"}}),
            "usage",
        ),
        (
            (
                Port::Internal,
                None,
                Method::PUT,
                "/v2/plugins/providertypes/x".into(),
            ),
            json!({"name": "x", "resourceTypes": {"k": {"format": 7}}}),
            "resourceTypes",
        ),
    ];
    for ((port, who, m, path), body, field) in cases {
        let r = send(
            &h,
            port,
            who,
            m.clone(),
            &path,
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(r.status.as_u16(), 400, "{m} {path} {body}: {}", r.text());
        assert!(
            r.text().contains(field),
            "{m} {path} {body}: message should name {field}: {}",
            r.text()
        );
    }
}

#[tokio::test]
async fn bad_names_are_400_naming_the_field() {
    let h = Harness::new().await;
    let long = "n".repeat(256);
    let bad = ["a b", "a/b", "naïve", "", "..", long.as_str(), "x;drop"];
    for name in bad {
        for (kind, _) in crate::common::KINDS {
            let mut body = crate::common::entity_body(kind, "ok");
            body["name"] = json!(name);
            let r = h
                .post(SA, &format!("/v2/{kind}"), body.to_string())
                .await
                .expect(400);
            assert!(r.text().contains("name"), "{kind} {name:?}: {}", r.text());
        }
        let r = h
            .post(
                SA,
                "/v2/tenants",
                json!({"tenant": {"name": name}}).to_string(),
            )
            .await
            .expect(400);
        assert!(r.text().contains("tenant.name"), "{name:?}: {}", r.text());
        let r = h
            .post(
                SA,
                "/v2/apikeys",
                json!({"tenant": name, "user": "u"}).to_string(),
            )
            .await;
        assert_eq!(r.status.as_u16(), 400, "{name:?}: {}", r.text());
        let pt = json!({"name": name});
        let r = h
            .internal(Method::PUT, "/v2/plugins/providertypes/x", pt.to_string())
            .await;
        assert_eq!(r.status.as_u16(), 400, "{name:?}: {}", r.text());
    }
    // A name of exactly 255 is fine.
    let ok = "n".repeat(255);
    h.post(SA, "/v2/hardwaretypes", json!({"name": ok}).to_string())
        .await
        .expect(200);
    // Names from the path are checked too.
    h.put(SA, "/v2/hardwaretypes/bad%20name", "{}")
        .await
        .expect(400);
    h.put(SA, &format!("/v2/hardwaretypes/{long}"), "{}")
        .await
        .expect(400);
    h.internal(Method::PUT, "/v2/plugins/providertypes/bad%20name", "{}")
        .await
        .expect(400);
    h.put(
        SA,
        "/v2/tenants/bad%20name",
        json!({"tenant": {"name": "bad name"}}).to_string(),
    )
    .await
    .expect(400);
    assert_eq!(
        h.get(SA, "/v2/tenants")
            .await
            .expect(200)
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        h.get(SA, "/v2/export").await.expect(200).json()["providers"],
        json!([])
    );
}
