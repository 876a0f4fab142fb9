//! Templates as versioned artifacts and clusters declared in files (issue 42): every version of an
//! entity, what moving clusters to a template version would do (impact), template sync that adds
//! a service and changes config in one job, apply of a declaration (and again: no change), plans
//! refused once the cluster changed, and entities deleted under a running cluster.

use serde_json::{json, Value};

use crate::clusters::{create, drain, setup, T};
use crate::common::{admin, user, Harness};

async fn active(h: &Harness, tid: &str, name: &str, size: u64) -> String {
    let body = json!({"name": name, "clusterTemplate": "t", "numMachines": size, "providerFields": {"token": "s3cret"}});
    let r = h
        .post(admin(T), "/v2/clusters", body.to_string())
        .await
        .expect(200)
        .json();
    let id = r["id"].as_str().unwrap().to_string();
    drain(h, tid, |_| false).await;
    assert_eq!(status(h, &id).await, "active");
    id
}

async fn status(h: &Harness, id: &str) -> Value {
    h.get(admin(T), &format!("/v2/clusters/{id}/status"))
        .await
        .json()["status"]
        .clone()
}

/// Writes a new version of template `t` changed by `edit`.
async fn new_version(h: &Harness, edit: impl FnOnce(&mut Value)) {
    let a = admin(T);
    let mut t = h.get(a, "/v2/clustertemplates/t").await.expect(200).json();
    edit(&mut t);
    h.put(a, "/v2/clustertemplates/t", t.to_string())
        .await
        .expect(200);
}

async fn add_service_c(h: &Harness) {
    let action =
        |what: &str| json!({"type": "shell", "fields": {"script": format!("{what}-c.sh")}});
    let c = json!({"name": "c", "dependencies": {"runtime": {"requires": ["a"]}},
        "provisioner": {"actions": {"install": action("install"), "configure": action("configure"),
        "start": action("start"), "stop": action("stop")}}});
    h.post(admin(T), "/v2/services", c.to_string())
        .await
        .expect(200);
}

trait Has {
    fn has(self, text: &str);
}

impl Has for crate::common::Resp {
    fn has(self, text: &str) {
        assert!(
            self.text().contains(text),
            "{text:?} missing: {}",
            self.text()
        );
    }
}

fn names(tasks: &[Value]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| {
            format!(
                "{} {}",
                t["taskName"].as_str().unwrap_or(""),
                t["config"]["service"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn every_version_is_kept_and_reads_as_a_diff() {
    let h = Harness::new().await;
    setup(&h).await;
    add_service_c(&h).await;
    new_version(&h, |t| {
        t["defaults"]["services"] = json!(["a", "b", "c"]);
    })
    .await;
    new_version(&h, |t| {
        t["defaults"]["config"]["greeting"] = json!("bonjour");
        t["constraints"]["size"]["max"] = json!(8);
    })
    .await;
    let a = admin(T);
    let all = h
        .get(user("bob", T), "/v2/clustertemplates/t/versions")
        .await
        .expect(200)
        .json();
    let all = all.as_array().unwrap();
    let versions: Vec<u64> = all.iter().map(|v| v["version"].as_u64().unwrap()).collect();
    assert_eq!(versions, vec![1, 2, 3]);
    let shown: Vec<String> = weft_model::diff(&all[0], &all[2])
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        shown,
        vec![
            "~ constraints.size.max: 10 -> 8",
            "+ defaults.config.greeting: bonjour",
            "+ defaults.services: c",
        ]
    );
    assert!(weft_model::diff(&all[1], &all[1]).is_empty());
    // Coopr's version routes answer as they did.
    let v2 = h
        .get(a, "/v2/clustertemplates/t/2")
        .await
        .expect(200)
        .json();
    assert_eq!(v2, all[1]);
    h.get(a, "/v2/clustertemplates/t/x")
        .await
        .expect_text(400, "Version must be a number");
    h.get(a, "/v2/clustertemplates/t/0")
        .await
        .expect_text(400, "Version must be higher then zero");
    h.get(a, "/v2/clustertemplates/nope/versions")
        .await
        .expect(404);
    // Every kind keeps its versions; deleting one leaves the others.
    h.get(a, "/v2/services/c/versions").await.expect(200);
    h.delete(a, "/v2/clustertemplates/t/2").await.expect(200);
    let left = h.get(a, "/v2/clustertemplates/t/versions").await.json();
    let left: Vec<u64> = left
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(left, vec![1, 3]);
}

#[tokio::test]
async fn impact_shows_each_cluster_on_an_older_version_and_why_it_cannot_move() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    add_service_c(&h).await;
    let first = active(&h, &tid, "first", 2).await;
    new_version(&h, |t| t["defaults"]["services"] = json!(["a", "b", "c"])).await;
    let second = active(&h, &tid, "second", 2).await;
    new_version(&h, |t| {
        t["defaults"]["config"]["greeting"] = json!("bonjour")
    })
    .await;
    let a = admin(T);
    h.get(user("bob", T), "/v2/clustertemplates/t/impact")
        .await
        .expect(403);
    let list = h
        .get(a, "/v2/clustertemplates/t/impact")
        .await
        .expect(200)
        .json();
    let by_id = |id: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|c| c["clusterId"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} missing from {list}"))
    };
    let (one, two) = (by_id(&first), by_id(&second));
    assert_eq!(
        (one["fromVersion"].clone(), one["toVersion"].clone()),
        (json!(1), json!(3))
    );
    assert_eq!(one["servicesAdded"], json!(["c"]));
    assert_eq!(two["fromVersion"], 2);
    assert_eq!(two["servicesAdded"], json!([]));
    for c in [&one, &two] {
        assert_eq!(c["changes"], true);
        assert_eq!(c["configDiff"][0]["path"], "greeting", "{c}");
        assert_eq!(
            c["plan"]["action"],
            if c == &one {
                "CHANGE_TEMPLATE"
            } else {
                "CLUSTER_CONFIGURE_WITH_RESTART"
            }
        );
        assert!(c.get("blocked").is_none(), "{c}");
    }
    let summary = one["summary"].to_string();
    assert!(summary.contains("INSTALL c on"), "{summary}");
    assert!(one["layout"].to_string().contains("+ c"), "{one}");
    // At version 2, only the first cluster is behind.
    let at2 = h
        .get(a, "/v2/clustertemplates/t/impact?version=2")
        .await
        .expect(200)
        .json();
    assert_eq!(at2.as_array().unwrap().len(), 1);
    assert_eq!(at2[0]["clusterId"], first.as_str());
    h.get(a, "/v2/clustertemplates/t/impact?version=9")
        .await
        .expect(404);
    // A version neither cluster fits: each says why.
    new_version(&h, |t| {
        t["constraints"]["size"] = json!({"min": 5, "max": 10})
    })
    .await;
    let blocked = h.get(a, "/v2/clustertemplates/t/impact").await.json();
    for c in blocked.as_array().unwrap() {
        assert!(
            c["blocked"]
                .as_str()
                .unwrap()
                .contains("outside the template's range 5..10"),
            "{c}"
        );
    }
    // Impact previews change nothing.
    for id in [&first, &second] {
        assert_eq!(status(&h, id).await, "active");
    }
}

#[tokio::test]
async fn sync_adds_a_service_and_changes_config_in_one_job() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    add_service_c(&h).await;
    let id = active(&h, &tid, "c1", 2).await;
    let a = admin(T);
    // The cluster changed one config value of its own; the template changes another and it.
    h.put(
        a,
        &format!("/v2/clusters/{id}/config"),
        json!({"config": {"peer": "%ip.service.a%", "n": "mine"}}).to_string(),
    )
    .await
    .expect(200);
    drain(&h, &tid, |_| false).await;
    new_version(&h, |t| {
        t["defaults"]["services"] = json!(["a", "b", "c"]);
        t["defaults"]["config"]["greeting"] = json!("bonjour");
        t["defaults"]["config"]["n"] = json!("theirs");
    })
    .await;
    let path = format!("/v2/clusters/{id}/clustertemplate/sync");
    let preview = h
        .post(a, &format!("{path}?dryrun=true"), "")
        .await
        .expect(200)
        .json();
    assert_eq!(preview["servicesAdded"], json!(["c"]));
    assert_eq!(preview["configKept"], json!(["n"]));
    assert_eq!(preview["toVersion"], 2);
    assert!(preview.get("job").is_none());
    assert_eq!(status(&h, &id).await, "active", "a dry run changes nothing");
    let done = h.post(a, &path, "").await.expect(200).json();
    assert!(done["job"].is_string(), "{done}");
    let tasks = names(&drain(&h, &tid, |_| false).await);
    for want in ["INSTALL c", "START c", "STOP b", "CONFIGURE b", "START b"] {
        assert!(tasks.iter().any(|t| t == want), "{want} missing: {tasks:?}");
    }
    let d = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert_eq!(d["status"], "active");
    assert_eq!(d["clusterTemplate"]["version"], 2);
    assert_eq!(d["config"]["greeting"], "bonjour");
    assert_eq!(d["config"]["n"], "mine");
    assert!(d["services"].as_array().unwrap().contains(&json!("c")));
    // On the latest version now: nothing to do.
    let again = h.post(a, &path, "").await.expect(200).json();
    assert_eq!(again["changes"], false, "{again}");
    assert!(again.get("job").is_none());
    // An explicit older version is a move too, and a missing one a 404.
    h.post(a, &format!("{path}?version=7"), "")
        .await
        .expect(404);
    h.post(a, &format!("{path}?version=zero"), "")
        .await
        .expect(400);
}

#[tokio::test]
async fn apply_reaches_the_declared_state_and_again_changes_nothing() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    add_service_c(&h).await;
    let id = active(&h, &tid, "web", 2).await;
    let a = admin(T);
    let spec = h
        .get(a, &format!("/v2/clusters/{id}/export"))
        .await
        .expect(200)
        .json();
    assert_eq!(spec["size"], 2);
    assert_eq!(spec["version"], 1);
    let apply = |body: Value, dry: bool| {
        let path = format!(
            "/v2/clusters/{id}/apply{}",
            if dry { "?dryrun=true" } else { "" }
        );
        let h = &h;
        async move { h.post(a, &path, body.to_string()).await }
    };
    let same = apply(json!({"spec": spec}), true).await.expect(200).json();
    assert_eq!(
        same["changes"], false,
        "an export applies as no change: {same}"
    );

    // Size, services and config at once: one plan, one job.
    let mut want = spec.clone();
    want["size"] = json!(3);
    want["services"] = json!(["a", "b", "c"]);
    want["config"]["greeting"] = json!("hi");
    want["lease"] = json!(3 * 86_400_000);
    let plan = apply(json!({"spec": want}), true).await.expect(200).json();
    assert!(plan["lease"].is_array(), "{plan}");
    assert_eq!(plan["nodesAdded"], 1, "{plan}");
    assert_eq!(plan["servicesAdded"], json!(["c"]));
    assert_eq!(plan["plan"]["action"], "CHANGE_TEMPLATE");
    let fingerprint = plan["fingerprint"].as_str().unwrap().to_string();
    let done = apply(json!({"spec": want, "fingerprint": fingerprint}), false)
        .await
        .expect(200)
        .json();
    assert!(done["job"].is_string(), "{done}");
    let tasks = names(&drain(&h, &tid, |_| false).await);
    assert!(tasks.iter().any(|t| t == "CREATE "), "{tasks:?}");
    assert!(tasks.iter().any(|t| t == "INSTALL c"), "{tasks:?}");
    let d = h.get(a, &format!("/v2/clusters/{id}")).await.json();
    assert_eq!(d["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(d["config"]["greeting"], "hi");
    let lease = d["expireTime"].as_i64().unwrap() - d["createTime"].as_i64().unwrap();
    assert_eq!(lease, 3 * 86_400_000, "the lease is written with the job");
    let again = apply(json!({"spec": want}), false).await.expect(200).json();
    assert_eq!(again["changes"], false, "{again}");

    // A plan made before the cluster changed is refused.
    let mut smaller = want.clone();
    smaller["size"] = json!(2);
    let old = apply(json!({"spec": smaller}), true)
        .await
        .expect(200)
        .json();
    h.put(
        a,
        &format!("/v2/clusters/{id}/config"),
        json!({"config": {"greeting": "changed meanwhile"}}).to_string(),
    )
    .await
    .expect(200);
    drain(&h, &tid, |_| false).await;
    apply(
        json!({"spec": smaller, "fingerprint": old["fingerprint"]}),
        false,
    )
    .await
    .expect(409)
    .has("changed since the plan was made");
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{id}")).await.json()["nodes"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Hostile and wrong declarations: a 400 naming the field.
    let mut typo = want.clone();
    typo["sise"] = json!(3);
    apply(json!({"spec": typo}), true)
        .await
        .expect(400)
        .has("sise");
    let mut zero = want.clone();
    zero["size"] = json!(0);
    apply(json!({"spec": zero}), true)
        .await
        .expect(400)
        .has("size");
    let mut other = want.clone();
    other["template"] = json!("other");
    apply(json!({"spec": other}), true)
        .await
        .expect(400)
        .has("template");
    let mut renamed = want.clone();
    renamed["name"] = json!("<script>x</script>");
    apply(json!({"spec": renamed}), true)
        .await
        .expect(400)
        .has("name");
    let mut forever = want.clone();
    forever["lease"] = json!(0);
    apply(json!({"spec": forever}), true).await.expect(200);
}

#[tokio::test]
async fn deleting_entities_never_breaks_a_cluster_that_uses_them() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let id = create(&h, admin(T), 2).await;
    drain(&h, &tid, |_| false).await;
    let a = admin(T);
    h.delete(a, "/v2/clustertemplates/t").await.expect(200);
    h.delete(a, "/v2/services/b").await.expect(200);
    // Its own copies carry it: restart, reconfigure, expand, delete.
    h.post(a, &format!("/v2/clusters/{id}/services/restart"), "")
        .await
        .expect(200);
    drain(&h, &tid, |_| false).await;
    h.put(
        a,
        &format!("/v2/clusters/{id}/config"),
        json!({"config": {"x": "1"}}).to_string(),
    )
    .await
    .expect(200);
    drain(&h, &tid, |_| false).await;
    h.post(
        a,
        &format!("/v2/clusters/{id}/nodes"),
        json!({"count": 1}).to_string(),
    )
    .await
    .expect(200);
    let tasks = names(&drain(&h, &tid, |_| false).await);
    assert!(tasks.iter().any(|t| t == "INSTALL b"), "{tasks:?}");
    assert_eq!(status(&h, &id).await, "active");
    // A sync says the template is gone.
    h.post(a, &format!("/v2/clusters/{id}/clustertemplate/sync"), "")
        .await
        .expect(404);
    h.delete(a, &format!("/v2/clusters/{id}")).await.expect(200);
    drain(&h, &tid, |_| false).await;
    assert_eq!(status(&h, &id).await, "terminated");
}
