//! The six admin kinds (§4.3): list, get, versions, create, put, delete, the versioning rules, the
//! Coopr messages, template lease and size rules, and lenient input.

use serde_json::json;

use crate::common::{admin, entity_body, user, Harness, KINDS, SA};

#[tokio::test]
async fn every_kind_follows_the_versioning_rules() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let a = admin("acme");
    for (kind, label) in KINDS {
        let base = format!("/v2/{kind}");
        let one = format!("{base}/e1");
        assert_eq!(
            h.get(a, &base).await.expect(200).json(),
            json!([]),
            "{kind}"
        );
        h.get(a, &one)
            .await
            .expect_text(404, &format!("{label} e1  not found."));

        // POST writes version 1, whatever the body says.
        let mut body = entity_body(kind, "e1");
        body["version"] = json!(42);
        // The answer lists warnings (a JSON object where Coopr answered nothing).
        let r = h.post(a, &base, body.to_string()).await.expect(200).json();
        assert!(r["warnings"].is_array(), "{kind}: {r}");
        let got = h.get(a, &one).await.expect(200).json();
        assert_eq!(got["version"], 1, "{kind}: {got}");
        assert_eq!(got["name"], "e1");
        h.post(a, &base, body.to_string()).await.expect(409);

        // PUT writes max+1; the body's version is ignored.
        body["version"] = json!(1);
        h.put(a, &one, body.to_string()).await.expect(200);
        assert_eq!(
            h.get(a, &one).await.expect(200).json()["version"],
            2,
            "{kind}"
        );
        assert_eq!(
            h.get(a, &format!("{one}/1")).await.expect(200).json()["version"],
            1
        );
        assert_eq!(
            h.get(a, &format!("{one}/2")).await.expect(200).json()["version"],
            2
        );
        h.get(a, &format!("{one}/3")).await.expect(404);
        let list = h.get(a, &base).await.expect(200).json();
        assert_eq!(
            list.as_array().unwrap().len(),
            1,
            "{kind}: list shows the latest only: {list}"
        );
        assert_eq!(list[0]["version"], 2);

        // Deleting the highest version makes the next write reuse max+1.
        h.delete(a, &format!("{one}/2")).await.expect_text(200, "");
        assert_eq!(h.get(a, &one).await.expect(200).json()["version"], 1);
        h.put(a, &one, body.to_string()).await.expect(200);
        assert_eq!(h.get(a, &one).await.expect(200).json()["version"], 2);

        // Bad versions.
        for path in [format!("{one}/abc"), format!("{one}/1.5")] {
            h.get(a, &path)
                .await
                .expect_text(400, "Version must be a number");
            h.delete(a, &path)
                .await
                .expect_text(400, "Version must be a number");
        }
        for path in [format!("{one}/0"), format!("{one}/-1")] {
            h.get(a, &path)
                .await
                .expect_text(400, "Version must be higher then zero");
            h.delete(a, &path)
                .await
                .expect_text(400, "Version must be higher then zero");
        }

        // PUT of an unknown name creates it at version 1; a mismatched body name is a 400.
        h.put(
            a,
            &format!("{base}/e2"),
            entity_body(kind, "e2").to_string(),
        )
        .await
        .expect(200);
        assert_eq!(
            h.get(a, &format!("{base}/e2")).await.expect(200).json()["version"],
            1
        );
        h.put(
            a,
            &format!("{base}/e3"),
            entity_body(kind, "e2").to_string(),
        )
        .await
        .expect(400);
        h.get(a, &format!("{base}/e3")).await.expect(404);

        // DELETE removes every version, and is 200 for an absent name.
        h.delete(a, &one).await.expect_text(200, "");
        h.get(a, &one).await.expect(404);
        h.get(a, &format!("{one}/1")).await.expect(404);
        h.delete(a, &one).await.expect(200);
        h.delete(a, &format!("{one}/7")).await.expect(200);
        // After deleting every version, the name starts over at 1.
        h.post(a, &base, entity_body(kind, "e1").to_string())
            .await
            .expect(200);
        assert_eq!(h.get(a, &one).await.expect(200).json()["version"], 1);
    }
}

#[tokio::test]
async fn users_read_but_cannot_write_and_the_check_comes_before_parsing() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let (a, u) = (admin("acme"), user("bob", "acme"));
    for (kind, _) in KINDS {
        let base = format!("/v2/{kind}");
        h.post(a, &base, entity_body(kind, "e1").to_string())
            .await
            .expect(200);
        h.get(u, &base).await.expect(200);
        h.get(u, &format!("{base}/e1")).await.expect(200);
        h.get(u, &format!("{base}/e1/1")).await.expect(200);
        h.post(u, &base, entity_body(kind, "e2").to_string())
            .await
            .expect(403);
        h.post(u, &base, "{not json").await.expect(403);
        h.put(
            u,
            &format!("{base}/e1"),
            entity_body(kind, "e1").to_string(),
        )
        .await
        .expect(403);
        h.delete(u, &format!("{base}/e1")).await.expect(403);
        h.delete(u, &format!("{base}/e1/1")).await.expect(403);
        let got = h.get(a, &format!("{base}/e1")).await.expect(200).json();
        assert_eq!(got["version"], 1, "{kind}: a user's write must not land");
        h.get(a, &format!("{base}/e2")).await.expect(404);
    }
}

#[tokio::test]
async fn entity_shapes_round_trip() {
    let h = Harness::new().await;
    let p = json!({"name": "aws", "description": "Amazon", "providertype": "aws",
                   "provisioner": {"aws_region": "us-east-1"}});
    h.post(SA, "/v2/providers", p.to_string()).await.expect(200);
    let got = h.get(SA, "/v2/providers/aws").await.expect(200).json();
    assert_eq!(
        got,
        json!({"name": "aws", "description": "Amazon", "version": 1, "providertype": "aws",
                           "provisioner": {"aws_region": "us-east-1"}})
    );
    // A provider without providertype is a 400 naming it.
    let r = h
        .post(SA, "/v2/providers", json!({"name": "x"}).to_string())
        .await
        .expect(400);
    assert!(r.text().contains("providertype"), "{}", r.text());
    // Templates always write the three compatibility lists and includes; extends is left out.
    h.post(SA, "/v2/clustertemplates", json!({"name": "t"}).to_string())
        .await
        .expect(200);
    let t = h.get(SA, "/v2/clustertemplates/t").await.expect(200).json();
    assert_eq!(
        t["compatibility"],
        json!({"hardwaretypes": [], "imagetypes": [], "services": []})
    );
    assert_eq!(t["includes"], json!([]));
    assert!(t.get("extends").is_none(), "{t}");
    assert_eq!(
        t["constraints"]["size"],
        json!({"min": 1, "max": 2147483647})
    );
    assert_eq!(
        t["administration"]["leaseduration"],
        json!({"initial": 0, "max": 0, "step": 0})
    );
}

#[tokio::test]
async fn template_lease_and_size_rules() {
    let h = Harness::new().await;
    for kind in ["clustertemplates", "partialtemplates"] {
        let base = format!("/v2/{kind}");
        let bad = json!({"name": "lt", "administration": {"leaseduration": {"initial": 100, "max": 10, "step": 0}}});
        h.post(SA, &base, bad.to_string()).await.expect_text(
            400,
            "Initial lease duration cannot be more than max lease duration for template lt",
        );
        h.put(SA, &format!("{base}/lt"), bad.to_string())
            .await
            .expect(400);
        // 0 is infinite: an infinite initial lease is more than a finite max...
        let bad =
            json!({"name": "lt", "administration": {"leaseduration": {"initial": 0, "max": 10}}});
        h.post(SA, &base, bad.to_string()).await.expect(400);
        // ...and any initial lease fits an unlimited max. Durations may be strings with units.
        let ok = json!({"name": "lt", "administration": {"leaseduration": {"initial": "48h", "max": 0, "step": "1d"}}});
        h.post(SA, &base, ok.to_string()).await.expect(200);
        let lease = h.get(SA, &format!("{base}/lt")).await.expect(200).json()["administration"]
            ["leaseduration"]
            .clone();
        assert_eq!(
            lease,
            json!({"initial": 172800000, "max": 0, "step": 86400000})
        );
        let ok =
            json!({"name": "lt2", "administration": {"leaseduration": {"initial": 10, "max": 10}}});
        h.post(SA, &base, ok.to_string()).await.expect(200);

        for (size, field) in [
            (json!({"min": 0}), "constraints.size.min"),
            (json!({"min": 5, "max": 2}), "constraints.size.max"),
        ] {
            let r = h
                .post(
                    SA,
                    &base,
                    json!({"name": "sz", "constraints": {"size": size}}).to_string(),
                )
                .await
                .expect(400);
            assert!(r.text().contains(field), "{kind}: {}", r.text());
        }
        let q = json!({"name": "sz", "constraints": {"services": {"s": {"quantities": {"min": 3, "max": 1}}}}});
        h.post(SA, &base, q.to_string()).await.expect(400);
        h.get(SA, &format!("{base}/sz")).await.expect(404);
    }
}

#[tokio::test]
async fn lenient_input_is_accepted() {
    let h = Harness::new().await;
    let body = r#"{'name':'x', 'constraints':{'size':{'min':'1','max':'7'}}, 'unknownField':{'a':[1,2]},
                  'defaults':{'services':['a'],'provider':'p'}, /* comment */ 'links':[],}"#;
    h.post(SA, "/v2/clustertemplates", body).await.expect(200);
    let t = h.get(SA, "/v2/clustertemplates/x").await.expect(200).json();
    assert_eq!(t["constraints"]["size"], json!({"min": 1, "max": 7}));
    assert!(
        t.get("unknownField").is_none(),
        "unknown fields are dropped: {t}"
    );
    let body = r#"{'name':'pt','immutable':'true','defaults':{'config':{}}}"#;
    h.post(SA, "/v2/partialtemplates", body).await.expect(200);
    assert_eq!(
        h.get(SA, "/v2/partialtemplates/pt")
            .await
            .expect(200)
            .json()["immutable"],
        true
    );
    // A service may be given as an object in defaults.
    let body =
        json!({"name": "y", "defaults": {"services": ["a", {"name": "b", "config": {"x": 1}}]}});
    h.post(SA, "/v2/clustertemplates", body.to_string())
        .await
        .expect(200);
    let t = h.get(SA, "/v2/clustertemplates/y").await.expect(200).json();
    assert_eq!(t["defaults"]["services"], json!(["a", "b"]));
    assert_eq!(t["defaults"]["config"]["b"], json!({"x": 1}));
    // A PUT body without a name takes the path's.
    h.put(SA, "/v2/hardwaretypes/small", "{'providermap':{}}")
        .await
        .expect(200);
    assert_eq!(
        h.get(SA, "/v2/hardwaretypes/small")
            .await
            .expect(200)
            .json()["name"],
        "small"
    );
}

/// A service whose action names an automator type that no provisioner offers is refused once
/// provisioners have registered types, naming the field and the nearest offered type; before any
/// has, it is accepted (a catalog may be loaded ahead of its provisioners, as Coopr's loader does).
#[tokio::test]
async fn an_automator_type_nobody_offers_is_refused_with_the_nearest_name() {
    let h = Harness::new().await;
    h.tenant("acme").await;
    let a = crate::common::admin("acme");
    let svc = |ty: &str| {
        serde_json::json!({"name": "web", "provisioner": {"actions": {
            "install": {"type": ty, "fields": {"script": "install.sh"}}}}})
        .to_string()
    };
    h.put(a, "/v2/services/web", svc("shel")).await.expect(200);
    h.plugin_types().await;
    h.put(a, "/v2/services/web", svc("shel")).await.expect_text(
        400,
        "provisioner.actions.install.type: no provisioner offers automator type shel (did you mean shell?)",
    );
    h.put(a, "/v2/services/web", svc("cfengine"))
        .await
        .expect_text(
            400,
            "provisioner.actions.install.type: no provisioner offers automator type cfengine (offered: shell)",
        );
    h.put(a, "/v2/services/web", svc("shell")).await.expect(200);
}
