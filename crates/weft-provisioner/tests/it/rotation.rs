//! Credentials are read when used (issue 35), through a real server and provisioner on loopback:
//! clusters made with one credential are deleted with the one the provider holds when the DELETE
//! runs.
//!
//! - **AWS** on moto with SigV4 signatures checked (`aws::moto`): an IAM user's second access key
//!   is made, the provider is updated to it, and the first key is deactivated and deleted in moto
//!   (moto 5.2.5 authenticates a request by the key's id and secret only and never reads its
//!   `Inactive` status, so deletion is what makes moto refuse it; the test checks that it does).
//!   A drift check then sees the machine running and lists the account (both with the new key),
//!   and every cluster's DELETE terminates its instances with no failed attempt. Without the
//!   provider's update, the DELETE fails once with reason `auth` and is not retried; once the
//!   provider is updated, a second delete of the same cluster succeeds.
//! - **OpenStack** on the real Keystone (`openstack::cloud`: Keystone in its container, and the
//!   test's Nova, which checks every token with Keystone): the user's password is changed by the
//!   admin (`PATCH /v3/users/{id}`), the provider updated, the cluster deleted; and without the
//!   update, the DELETE fails once with reason `auth`.
//!
//! The clusters' one service has no actions, so their nodes run CREATE, CONFIRM, an empty
//! BOOTSTRAP and DELETE only: the machines' addresses (moto's 10.x and 54.x, the fake Nova's
//! documentation ranges) are never dialled.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Map, Value};
use weft_provisioner::aws::sigv4::Credentials;
use weft_provisioner::openstack::{Kind, NovaProvider};
use weft_provisioner::{Agent, Plugins};

use crate::aws::{ec2_at, moto, provider as aws_provider, Moto};
use crate::common::{until, Server};
use crate::fatal::entries;
use crate::openstack::{cloud, fast, password_fields, Keystone, FLAVOR, IMAGE, PROJECT, USER};

const T: &str = "rotation";

/// A server and a provisioner with `plugins`, the tenant given 4 workers on it.
async fn start(plugins: Plugins) -> (Server, Agent) {
    let (s, tenant_id) = Server::start(T).await;
    let agent = Agent::start(s.config("p-rotation"), plugins)
        .await
        .expect("agent starts");
    let r = s
        .http
        .put(format!("http://{}/v2/tenants/{tenant_id}", agent.addr()))
        .json(&json!({"workers": 4, "resources": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    (s, agent)
}

async fn put(s: &Server, path: &str, body: Value) {
    let (code, answer) = s.ext(Method::PUT, T, path, Some(body)).await;
    assert!(code == 200 || code == 201, "PUT {path}: {code} {answer}");
}

/// The provider `name` of type `ptype` with `fields`, a hardware and an image type for it, a
/// service without actions and a template `name` of 1 to 3 nodes.
async fn catalog(s: &Server, name: &str, ptype: &str, fields: &Map<String, Value>, map: Value) {
    put(
        s,
        &format!("/v2/providers/{name}"),
        json!({"name": name, "providertype": ptype, "provisioner": fields}),
    )
    .await;
    put(
        s,
        &format!("/v2/hardwaretypes/hw-{name}"),
        json!({"name": format!("hw-{name}"), "providermap": {name: {"flavor": map["flavor"]}}}),
    )
    .await;
    put(
        s,
        &format!("/v2/imagetypes/img-{name}"),
        json!({"name": format!("img-{name}"), "providermap": {name: {"image": map["image"]}}}),
    )
    .await;
    put(
        s,
        "/v2/services/marker",
        json!({"name": "marker", "provisioner": {"actions": {}}}),
    )
    .await;
    put(
        s,
        &format!("/v2/clustertemplates/{name}"),
        json!({"name": name,
               "compatibility": {"hardwaretypes": [format!("hw-{name}")],
                                 "imagetypes": [format!("img-{name}")], "services": ["marker"]},
               "defaults": {"services": ["marker"], "provider": name,
                            "hardwaretype": format!("hw-{name}"),
                            "imagetype": format!("img-{name}"), "dnsSuffix": "local"},
               "constraints": {"size": {"min": 1, "max": 3}}}),
    )
    .await;
}

/// Writes the provider back as an admin would: read (sensitive fields masked), `changes` set,
/// written whole. The masked fields it keeps are kept by the server.
async fn update_provider(s: &Server, name: &str, changes: Value) {
    let (code, mut p) = s
        .ext(Method::GET, T, &format!("/v2/providers/{name}"), None)
        .await;
    assert_eq!(code, 200, "{p}");
    for (k, v) in changes.as_object().unwrap() {
        p["provisioner"][k] = v.clone();
    }
    put(s, &format!("/v2/providers/{name}"), p).await;
}

async fn cluster(s: &Server, id: &str) -> Value {
    s.ext(Method::GET, T, &format!("/v2/clusters/{id}"), None)
        .await
        .1
}

/// Creates a cluster of `size` nodes from `template` and waits for it to be active.
async fn active_cluster(s: &Server, template: &str, size: u32) -> Value {
    let (code, c) = s
        .ext(
            Method::POST,
            T,
            "/v2/clusters",
            Some(json!({"name": template, "clusterTemplate": template, "numMachines": size})),
        )
        .await;
    assert_eq!(code, 200, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    until(
        Duration::from_secs(120),
        "the cluster to be active",
        || async {
            let c = cluster(s, &id).await;
            match c["status"].as_str() {
                Some("active") => Some(c),
                Some("pending") => None,
                _ => panic!("the create failed: {c}"),
            }
        },
    )
    .await
}

/// Deletes the cluster and waits for its delete job to end; answers the cluster then.
async fn delete(s: &Server, id: &str) -> Value {
    let (code, answer) = s
        .ext(Method::DELETE, T, &format!("/v2/clusters/{id}"), None)
        .await;
    assert_eq!(code, 200, "{answer}");
    until(Duration::from_secs(60), "the delete to end", || async {
        let c = cluster(s, id).await;
        let p = &c["progress"];
        let ended = p["action"] == "cluster_delete"
            && matches!(p["actionstatus"].as_str(), Some("complete" | "failed"))
            && c["status"] != "pending";
        ended.then_some(c)
    })
    .await
}

/// Runs a drift check of the cluster (a STATUS per node, and its machines listed by the
/// provisioner with the provider's fields) and answers its report once it ended.
async fn drift_check(s: &Server, id: &str) -> Value {
    let path = format!("/v2/clusters/{id}/check");
    let (code, run) = s.ext(Method::POST, T, &path, None).await;
    assert_eq!(code, 200, "{run}");
    until(Duration::from_secs(60), "the check to end", || async {
        let r = s.ext(Method::GET, T, &path, None).await.1;
        (r["jobId"] == run["jobId"] && r["jobStatus"] != "running").then_some(r)
    })
    .await
}

fn node_ids(c: &Value) -> Vec<String> {
    c["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

/// The cluster is terminated and each node ran one DELETE, which passed.
fn deleted_cleanly(c: &Value) {
    assert_eq!(c["status"], "terminated", "{c}");
    let deletes = entries(c, "DELETE");
    assert_eq!(deletes.len(), node_ids(c).len(), "one DELETE a node: {c}");
    for d in deletes {
        assert_eq!(d["status"], "complete", "{c}");
        assert!(d["failure"].is_null(), "{c}");
    }
}

/// The cluster's delete failed on its one DELETE, fatally, for auth, naming `cloud_says`.
fn delete_failed_once_for_auth(c: &Value, cloud_says: &str) {
    let deletes = entries(c, "DELETE");
    assert_eq!(deletes.len(), 1, "the DELETE ran once: {c}");
    assert_eq!(deletes[0]["status"], "failed", "{c}");
    assert_eq!(
        deletes[0]["failure"],
        json!({"retryable": false, "reason": "auth"}),
        "{c}"
    );
    assert_eq!(c["progress"]["actionstatus"], "failed", "{c}");
    assert_ne!(c["status"], "terminated", "{c}");
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(msg.starts_with("DELETE on "), "{msg}");
    assert!(msg.contains(cloud_says), "{msg}");
    assert!(msg.ends_with("; not retried: auth"), "{msg}");
}

// ------------------------------------------------------------------------------------------------
// AWS

fn param(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

/// A second access key of moto's IAM user `weft` (made by `aws::moto`), signed with the first.
async fn new_access_key(m: &Moto) -> Credentials {
    let key = m
        .iam()
        .call("CreateAccessKey", &[param("UserName", "weft")])
        .await
        .expect("CreateAccessKey");
    let text = |name: &str| {
        let mut found = Vec::new();
        key.find_all(name, &mut found);
        found[0].text.trim().to_string()
    };
    Credentials {
        access_key_id: text("AccessKeyId"),
        secret_access_key: text("SecretAccessKey"),
        session_token: None,
    }
}

/// Makes a new access key and retires the old one in moto (deactivated, then deleted, signed
/// with the new key); `m` signs with the new key from then on. Checks that moto now refuses the
/// old key with EC2's `AuthFailure`. Answers the old key.
pub(crate) async fn rotate_aws_key(m: &mut Moto) -> Credentials {
    let old = m.creds.clone();
    let new = new_access_key(m).await;
    m.creds = new;
    for (action, extra) in [
        ("UpdateAccessKey", Some(param("Status", "Inactive"))),
        ("DeleteAccessKey", None),
    ] {
        let mut params = vec![
            param("UserName", "weft"),
            param("AccessKeyId", &old.access_key_id),
        ];
        params.extend(extra);
        m.iam().call(action, &params).await.expect(action);
    }
    let with_old = ec2_at(&m.endpoint, old.clone());
    let e = with_old
        .call("DescribeInstances", &[])
        .await
        .expect_err("moto refuses the old key");
    assert_eq!(e.code, "AuthFailure", "{e}");
    old
}

fn aws_fields(m: &Moto) -> Map<String, Value> {
    m.fields(&m.endpoint)
}

/// The instances of the cluster's nodes that are not terminated (asked with the current key).
async fn live_instances(m: &Moto, c: &Value) -> Vec<String> {
    let mut live = Vec::new();
    for node in node_ids(c) {
        for i in m.instances_of(&node).await {
            if i.is_live() {
                live.push(i.id);
            }
        }
    }
    live
}

async fn aws_start() -> Option<(Moto, Server, Agent)> {
    let m = moto().await?;
    let (s, agent) = start(Plugins::new().provider(Arc::new(aws_provider()))).await;
    let map = json!({"flavor": "t3.micro", "image": m.ami});
    catalog(&s, "ec2", "aws", &aws_fields(&m), map).await;
    Some((m, s, agent))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_made_with_an_aws_key_since_deleted_are_deleted_with_the_providers_new_key() {
    let Some((mut m, s, _agent)) = aws_start().await else {
        return;
    };
    let one = active_cluster(&s, "ec2", 1).await;
    let two = active_cluster(&s, "ec2", 2).await;
    assert_eq!(live_instances(&m, &one).await.len(), 1, "{one}");
    assert_eq!(live_instances(&m, &two).await.len(), 2, "{two}");

    let old = rotate_aws_key(&mut m).await;
    update_provider(
        &s,
        "ec2",
        json!({"access_key_id": m.creds.access_key_id,
               "secret_access_key": m.creds.secret_access_key}),
    )
    .await;

    // A drift check reads the new key too: STATUS and the listing of the account's machines.
    let report = drift_check(&s, one["id"].as_str().unwrap()).await;
    assert_eq!(report["jobStatus"], "complete", "{report}");
    assert_eq!(report["drift"], false, "{report}");
    assert!(report["orphansUnknown"].is_null(), "{report}");
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{report}");
    assert_eq!(nodes[0]["machine"], "running", "{report}");

    for c in [&one, &two] {
        let id = c["id"].as_str().unwrap();
        let done = delete(&s, id).await;
        deleted_cleanly(&done);
        assert!(live_instances(&m, &done).await.is_empty(), "{done}");
        let shown = done.to_string();
        assert!(!shown.contains(&m.creds.secret_access_key), "{shown}");
        assert!(!shown.contains(&old.secret_access_key), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_key_deleted_before_the_provider_is_updated_fails_the_delete_once_then_the_update_ends_it(
) {
    let Some((mut m, s, _agent)) = aws_start().await else {
        return;
    };
    let c = active_cluster(&s, "ec2", 1).await;
    let id = c["id"].as_str().unwrap().to_string();
    rotate_aws_key(&mut m).await;

    let failed = delete(&s, &id).await;
    delete_failed_once_for_auth(&failed, "ec2: AuthFailure: ");
    assert_eq!(
        live_instances(&m, &c).await.len(),
        1,
        "the instance is left"
    );

    update_provider(
        &s,
        "ec2",
        json!({"access_key_id": m.creds.access_key_id,
               "secret_access_key": m.creds.secret_access_key}),
    )
    .await;
    let done = delete(&s, &id).await;
    assert_eq!(done["status"], "terminated", "{done}");
    let deletes = entries(&done, "DELETE");
    assert_eq!(deletes.len(), 2, "the failed DELETE, then this one: {done}");
    assert_eq!(deletes[1]["status"], "complete", "{done}");
    assert!(live_instances(&m, &c).await.is_empty(), "{done}");
}

// ------------------------------------------------------------------------------------------------
// OpenStack

pub(crate) const NEW_PASSWORD: &str = "weft-user-rotated";

/// Sets the user's password as Keystone's admin (`PATCH /v3/users/{id}`), and checks that
/// Keystone now refuses the old one and accepts the new one.
pub(crate) async fn change_password(ks: &Keystone, user_id: &str) {
    let admin = ks
        .token("admin", crate::openstack::ADMIN_PASSWORD, "admin")
        .await;
    ks.admin(
        &admin,
        Method::PATCH,
        &format!("/users/{user_id}"),
        json!({"user": {"password": NEW_PASSWORD}}),
    )
    .await;
    let with = |password: &str| {
        json!({"auth": {"identity": {"methods": ["password"], "password": {"user":
            {"name": USER, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": PROJECT, "domain": {"id": "default"}}}}})
    };
    let r = reqwest::Client::new()
        .post(format!("{}/v3/auth/tokens", ks.url))
        .json(&with(crate::openstack::PASSWORD))
        .send()
        .await
        .expect("keystone answers");
    assert_eq!(
        r.status().as_u16(),
        401,
        "keystone refuses the old password"
    );
    ks.token(USER, NEW_PASSWORD, PROJECT).await;
}

async fn openstack_start() -> Option<(Keystone, crate::openstack::Nova, String, Server, Agent)> {
    let (ks, nova, account) = cloud(3600).await?;
    let plugins = Plugins::new().provider(Arc::new(
        NovaProvider::with_kind(Kind::OpenStack).with_timing(fast()),
    ));
    let (s, agent) = start(plugins).await;
    let map = json!({"flavor": FLAVOR, "image": IMAGE});
    catalog(&s, "os", "openstack", &password_fields(&ks), map).await;
    Some((ks, nova, account.user_id, s, agent))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openstack_cluster_is_deleted_with_the_password_the_provider_holds_after_a_change() {
    let Some((ks, nova, user_id, s, _agent)) = openstack_start().await else {
        return;
    };
    let c = active_cluster(&s, "os", 2).await;
    assert_eq!(nova.servers(), 2);
    change_password(&ks, &user_id).await;
    update_provider(&s, "os", json!({"password": NEW_PASSWORD})).await;

    let done = delete(&s, c["id"].as_str().unwrap()).await;
    deleted_cleanly(&done);
    assert_eq!(nova.servers(), 0, "the servers are gone");
    // Keystone revokes a user's tokens when the password changes, by time in whole seconds: a
    // token the new password got within the same second can be refused once, and is then renewed
    // (one per task at most). The old password is never used: the delete would fail with `auth`.
    let refused = nova.count(|c| &c.refused);
    assert!(refused <= 2, "nova refused {refused} tokens");
    assert!(!done.to_string().contains(NEW_PASSWORD), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openstack_password_changed_without_updating_the_provider_fails_the_delete_once() {
    let Some((ks, nova, user_id, s, _agent)) = openstack_start().await else {
        return;
    };
    let c = active_cluster(&s, "os", 1).await;
    let id = c["id"].as_str().unwrap().to_string();
    change_password(&ks, &user_id).await;

    let failed = delete(&s, &id).await;
    delete_failed_once_for_auth(&failed, "keystone: Unauthorized: ");
    assert_eq!(nova.servers(), 1, "the server is left");

    update_provider(&s, "os", json!({"password": NEW_PASSWORD})).await;
    let done = delete(&s, &id).await;
    assert_eq!(done["status"], "terminated", "{done}");
    assert_eq!(nova.servers(), 0, "the server is gone");
}
