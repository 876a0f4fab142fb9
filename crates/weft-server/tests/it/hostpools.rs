//! Host pools through the API: the admin routes of `/v2/providers/{name}/hosts` (keys never
//! answered, fields checked, lent hosts kept), and the engine lending hosts to new nodes (labels
//! matched, all or nothing, a 409 before anything is taken when the pool is short) and taking
//! them back when nodes leave or the cluster is deleted.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::Method;
use serde_json::{json, Value};
use weft_model::{HostState, PoolHost};

use crate::clusters::drain;
use crate::common::{admin, user, Harness, Resp};

const T: &str = "acme";
const HOSTS: &str = "/v2/providers/pool/hosts";

fn key(n: u32) -> String {
    format!("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-{n}\n-----END OPENSSH PRIVATE KEY-----\n")
}

fn host_body(id: &str, port: u16, labels: Value) -> Value {
    json!({"id": id, "address": "192.0.2.10", "port": port, "user": "weft", "key": key(port as u32), "labels": labels})
}

/// No answer ever carries a private key.
#[track_caller]
fn keyless(r: Resp) -> Resp {
    let t = r.text();
    assert!(
        !t.contains("BEGIN OPENSSH") && !t.contains("secret-"),
        "a key leaked: {t}"
    );
    r
}

/// Tenant `acme` with provider `pool` (type hostpool), provider `local` (another type), hardware
/// type `ssd` (hosts labelled disk=ssd), an image, service `s` and template `t` (1 to 10 nodes).
async fn setup(h: &Harness) -> String {
    h.tenant(T).await;
    h.provisioner("p1", 10).await;
    h.workers(T, 1).await;
    for (kind, pt) in [
        (
            "providertypes",
            json!({"name": "hostpool", "parameters": {"admin": {"fields": {
            "wipe_command": {"label": "Wipe command", "type": "text"}}}}}),
        ),
        ("providertypes", json!({"name": "local"})),
        ("automatortypes", json!({"name": "shell"})),
    ] {
        let name = pt["name"].as_str().unwrap().to_string();
        h.internal(
            Method::PUT,
            &format!("/v2/plugins/{kind}/{name}"),
            pt.to_string(),
        )
        .await
        .expect(200);
    }
    let a = admin(T);
    for (kind, body) in [
        (
            "providers",
            json!({"name": "pool", "providertype": "hostpool", "provisioner": {"wipe_command": "true"}}),
        ),
        (
            "providers",
            json!({"name": "local", "providertype": "local"}),
        ),
        (
            "hardwaretypes",
            json!({"name": "ssd", "providermap": {"pool": {"flavor": "disk=ssd"}}}),
        ),
        (
            "imagetypes",
            json!({"name": "debian", "providermap": {"pool": {"image": "debian"}}}),
        ),
        (
            "services",
            json!({"name": "s", "provisioner": {"actions": {
            "install": {"type": "shell", "fields": {"script": "echo hi"}}}}}),
        ),
        (
            "clustertemplates",
            json!({"name": "t", "defaults": {"services": ["s"], "provider": "pool"},
            "compatibility": {"services": ["s"]}, "constraints": {"size": {"min": 1, "max": 10}}}),
        ),
    ] {
        h.post(a, &format!("/v2/{kind}"), body.to_string())
            .await
            .expect(200);
    }
    h.tenant_id(T).await
}

async fn hosts(h: &Harness) -> BTreeMap<String, PoolHost> {
    let r = keyless(h.get(admin(T), HOSTS).await.expect(200));
    serde_json::from_slice::<Vec<PoolHost>>(&r.body)
        .unwrap()
        .into_iter()
        .map(|h| (h.id.clone(), h))
        .collect()
}

async fn free(h: &Harness) -> BTreeSet<String> {
    hosts(h)
        .await
        .into_values()
        .filter(|h| h.state == HostState::Free)
        .map(|h| h.id)
        .collect()
}

async fn create(h: &Harness, name: &str, size: u64) -> Resp {
    let body = json!({"name": name, "clusterTemplate": "t", "numMachines": size});
    h.post(admin(T), "/v2/clusters", body.to_string()).await
}

#[tokio::test]
async fn admins_add_list_change_and_remove_hosts_without_ever_reading_a_key() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    assert!(hosts(&h).await.is_empty());

    let r = keyless(
        h.post(
            a,
            HOSTS,
            host_body("h1", 22, json!({"disk": "ssd"})).to_string(),
        )
        .await
        .expect(200),
    );
    let made: PoolHost = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(made.key, "********");
    assert_eq!((made.port, made.user.as_str()), (22, "weft"));
    assert_eq!(made.state, HostState::Free);
    assert_eq!(made.provider, "pool");
    let got: PoolHost =
        serde_json::from_slice(&keyless(h.get(a, &format!("{HOSTS}/h1")).await.expect(200)).body)
            .unwrap();
    assert_eq!(got, made);
    // Defaults: port 22, user root.
    let r = h
        .post(
            a,
            HOSTS,
            json!({"id": "h2", "address": "node2.example.com", "key": key(2)}).to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        (r["port"].as_u64(), r["user"].as_str()),
        (Some(22), Some("root"))
    );

    // Taken ids and addresses.
    h.post(a, HOSTS, host_body("h1", 2200, json!({})).to_string())
        .await
        .expect(409);
    let clash = h
        .post(a, HOSTS, host_body("h9", 22, json!({})).to_string())
        .await
        .expect(409)
        .text();
    assert!(clash.contains("192.0.2.10:22"), "{clash}");

    // Bad input names the field.
    for (body, field) in [
        (json!({"address": "x", "key": key(1)}), "id"),
        (json!({"id": "h3", "key": key(1)}), "address"),
        (
            json!({"id": "h3", "address": "a b", "key": key(1)}),
            "address",
        ),
        (
            json!({"id": "h3", "address": "x", "port": 0, "key": key(1)}),
            "port",
        ),
        (
            json!({"id": "h3", "address": "x", "port": "many", "key": key(1)}),
            "port",
        ),
        (json!({"id": "h3", "address": "x"}), "key"),
        (json!({"id": "h3", "address": "x", "key": "hunter2"}), "key"),
        (
            json!({"id": "h3", "address": "x", "key": key(1), "labels": {"disk": "a,b"}}),
            "labels.disk",
        ),
        (json!({"id": "h/3", "address": "x", "key": key(1)}), "id"),
    ] {
        let t = keyless(h.post(a, HOSTS, body.to_string()).await.expect(400)).text();
        assert!(t.contains(field), "{body}: {t}");
    }
    h.post(a, HOSTS, "{nope").await.expect(400);

    // Only the tenant admin; only host-pool providers.
    h.get(user("bob", T), HOSTS).await.expect(403);
    h.post(
        user("bob", T),
        HOSTS,
        host_body("h5", 5, json!({})).to_string(),
    )
    .await
    .expect(403);
    h.get(a, "/v2/providers/nope/hosts").await.expect(404);
    let t = h
        .get(a, "/v2/providers/local/hosts")
        .await
        .expect(404)
        .text();
    assert!(t.contains("hostpool"), "{t}");
    h.get(a, &format!("{HOSTS}/nope")).await.expect(404);
    // The provider's own routes are unchanged.
    h.get(a, "/v2/providers/pool").await.expect(200);
    h.get(a, "/v2/providers/pool/1").await.expect(200);

    // PUT replaces the definition; no key keeps the stored one, a new key replaces it.
    let r = keyless(
        h.put(
            a,
            &format!("{HOSTS}/h1"),
            json!({"address": "192.0.2.11", "port": 2022, "labels": {"disk": "hdd"}}).to_string(),
        )
        .await
        .expect(200),
    )
    .json();
    assert_eq!(
        (
            r["address"].as_str(),
            r["port"].as_u64(),
            r["user"].as_str()
        ),
        (Some("192.0.2.11"), Some(2022), Some("root"))
    );
    assert_eq!(r["labels"], json!({"disk": "hdd"}));
    // The key as stored (sealed), opened.
    let stored = |id: &'static str| {
        let h = &h;
        let tid = tid.clone();
        async move {
            let mut row = h
                .app
                .state
                .store
                .get_pool_host(&tid, "pool", id)
                .await
                .unwrap()
                .unwrap();
            assert!(row.key.starts_with(weft_engine::seal::PREFIX), "sealed");
            let sealer = &h.app.state.engine.sealer;
            let opened = sealer.open(&tid, &row.key).await.unwrap().unwrap();
            row.key = opened.as_str().unwrap().to_string();
            row
        }
    };
    assert_eq!(stored("h1").await.key, key(22));
    h.put(
        a,
        &format!("{HOSTS}/h1"),
        json!({"address": "192.0.2.11", "key": "********"}).to_string(),
    )
    .await
    .expect(200);
    assert_eq!(stored("h1").await.key, key(22));
    h.put(
        a,
        &format!("{HOSTS}/h1"),
        json!({"address": "192.0.2.11", "key": key(7)}).to_string(),
    )
    .await
    .expect(200);
    assert_eq!(stored("h1").await.key, key(7));
    // PUT of a new host needs a key; the body's id must match the path.
    h.put(
        a,
        &format!("{HOSTS}/h4"),
        json!({"address": "192.0.2.14"}).to_string(),
    )
    .await
    .expect(400);
    h.put(
        a,
        &format!("{HOSTS}/h4"),
        json!({"id": "h5", "address": "192.0.2.14", "key": key(4)}).to_string(),
    )
    .await
    .expect(400);
    h.put(
        a,
        &format!("{HOSTS}/h4"),
        json!({"address": "192.0.2.14", "key": key(4)}).to_string(),
    )
    .await
    .expect(200);
    assert_eq!(
        hosts(&h).await.keys().collect::<Vec<_>>(),
        ["h1", "h2", "h4"]
    );

    h.delete(a, &format!("{HOSTS}/h4")).await.expect(200);
    h.delete(a, &format!("{HOSTS}/h4")).await.expect(404);
    h.delete(user("bob", T), &format!("{HOSTS}/h2"))
        .await
        .expect(403);
    assert_eq!(hosts(&h).await.keys().collect::<Vec<_>>(), ["h1", "h2"]);

    // The routes are in the OpenAPI document.
    let doc = h.get(a, "/v2/openapi.json").await.expect(200).json();
    assert!(doc["paths"]["/v2/providers/{name}/hosts/{host}"]["delete"].is_object());
}

#[tokio::test]
async fn clusters_take_matching_hosts_all_or_nothing_and_give_them_back() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    let a = admin(T);
    for (id, port, labels) in [
        ("h1", 1, json!({"disk": "ssd"})),
        ("h2", 2, json!({"disk": "ssd"})),
        ("h3", 3, json!({"disk": "hdd"})),
    ] {
        h.post(a, HOSTS, host_body(id, port, labels).to_string())
            .await
            .expect(200);
    }
    let all: BTreeSet<String> = ["h1", "h2", "h3"].map(String::from).into();
    assert_eq!(free(&h).await, all);

    // Three ssd nodes, two ssd hosts: 409 naming the pool and the counts; nothing taken or made.
    let msg = create(&h, "big", 3).await.expect(409).text();
    assert!(
        msg.contains("provider pool") && msg.contains("3 new nodes") && msg.contains("2 free"),
        "{msg}"
    );
    assert!(msg.contains("disk=ssd"), "{msg}");
    assert_eq!(free(&h).await, all);
    assert!(h
        .get(a, "/v2/clusters")
        .await
        .expect(200)
        .json()
        .as_array()
        .unwrap()
        .is_empty());
    // A dry run takes nothing.
    h.post(
        a,
        "/v2/clusters?dryrun=true",
        json!({"name": "x", "clusterTemplate": "t", "numMachines": 2}).to_string(),
    )
    .await
    .expect(200);
    assert_eq!(free(&h).await, all);

    // Two fit: each node gets its own ssd host, and its tasks get the address and credentials.
    let c1 = create(&h, "c1", 2).await.expect(200).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(free(&h).await, BTreeSet::from(["h3".to_string()]));
    let pool = hosts(&h).await;
    // The nodes hold their hosts' keys, but no answer shows them.
    let details = keyless(h.get(a, &format!("/v2/clusters/{c1}")).await.expect(200)).json();
    assert_eq!(
        details["nodes"][0]["provisionerResults"]["ssh-auth"]["key"],
        "********"
    );
    let mut lent = BTreeSet::new();
    for n in details["nodes"].as_array().unwrap() {
        let hid = n["provisionerResults"]["hostpool"]["host"]
            .as_str()
            .unwrap()
            .to_string();
        let host = &pool[&hid];
        assert_eq!(host.state, HostState::InUse);
        assert_eq!(host.cluster_id.as_deref(), Some(c1.as_str()));
        assert_eq!(host.node_id.as_deref(), n["id"].as_str());
        assert_eq!(n["properties"]["ipaddresses"]["access_v4"], "192.0.2.10");
        lent.insert(hid);
    }
    assert_eq!(lent, BTreeSet::from(["h1".to_string(), "h2".to_string()]));
    // The UI's host-pool page: each host, and the cluster and node holding it; no key.
    let cookie = crate::ui::login(&h, T, "admin", "").await;
    let page = crate::ui::page(&h, &cookie, "/ui/admin/hostpools").await;
    let page = keyless(page.expect(200)).text();
    assert!(page.contains("(3 hosts, 2 lent)"), "{page}");
    assert!(
        page.contains(&format!("href=\"/ui/clusters/{c1}\">cluster #{c1}</a>")),
        "{page}"
    );
    assert!(
        page.contains("<td>h3</td>") && page.contains("free"),
        "{page}"
    );
    let create_task = crate::clusters::take(&h, &tid, "w1")
        .await
        .expect("a CREATE task");
    assert_eq!(create_task["taskName"], "CREATE");
    let c = &create_task["config"];
    let hid = c["hostpool"]["host"].as_str().unwrap();
    assert_eq!(c["hostpool"]["provider"], "pool");
    assert_eq!(c["ssh-auth"]["user"], "weft");
    assert_eq!(c["ssh-auth"]["port"], pool[hid].port);
    assert_eq!(c["ssh-auth"]["key"], key(pool[hid].port as u32));
    assert_eq!(c["ipaddresses"]["access_v4"], "192.0.2.10");
    assert_eq!(c["provider"]["provisioner"]["wipe_command"], "true");
    crate::clusters::finish(&h, &tid, "w1", &create_task, 0, "").await;
    drain(&h, &tid, |_| false).await;
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{c1}/status")).await.json()["status"],
        "active"
    );

    // The one free host does not match: the next cluster is refused; relabelled, it fits.
    let msg = create(&h, "c2", 1).await.expect(409).text();
    assert!(msg.contains("0 free"), "{msg}");
    h.delete(a, &format!("{HOSTS}/h1")).await.expect(409);
    h.put(
        a,
        &format!("{HOSTS}/h3"),
        host_body("h3", 3, json!({"disk": "ssd"})).to_string(),
    )
    .await
    .expect(200);
    let c2 = create(&h, "c2", 1).await.expect(200).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(free(&h).await.is_empty());
    drain(&h, &tid, |_| false).await;
    // Expanding an existing cluster needs a host too.
    let msg = h
        .post(
            a,
            &format!("/v2/clusters/{c1}/nodes"),
            json!({"count": 1}).to_string(),
        )
        .await
        .expect(409)
        .text();
    assert!(
        msg.contains("1 new nodes") && msg.contains("0 free"),
        "{msg}"
    );
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{c1}")).await.json()["nodes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Deleting c2 gives its host back once its job is done.
    h.delete(a, &format!("/v2/clusters/{c2}")).await.expect(200);
    drain(&h, &tid, |_| false).await;
    assert_eq!(
        h.get(a, &format!("/v2/clusters/{c2}/status")).await.json()["status"],
        "terminated"
    );
    assert!(
        free(&h).await.is_empty(),
        "nothing is given back before a sweep"
    );
    let back = weft_engine::hostpool::sweep(&h.app.state.engine, weft_server::state::now_ms())
        .await
        .unwrap();
    assert_eq!(
        back.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        ["h3"]
    );
    assert_eq!(free(&h).await, BTreeSet::from(["h3".to_string()]));

    // Now c1 can grow onto it, and shrinking gives a host back.
    h.post(
        a,
        &format!("/v2/clusters/{c1}/nodes"),
        json!({"count": 1}).to_string(),
    )
    .await
    .expect(200);
    assert!(free(&h).await.is_empty());
    drain(&h, &tid, |_| false).await;
    h.delete(a, &format!("/v2/clusters/{c1}/nodes?count=1"))
        .await
        .expect(200);
    drain(&h, &tid, |_| false).await;
    let back = weft_engine::hostpool::sweep_cluster(&h.app.state.engine, &tid, c1.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(free(&h).await.len(), 1);
    // A second sweep has nothing to do.
    assert!(
        weft_engine::hostpool::sweep(&h.app.state.engine, weft_server::state::now_ms())
            .await
            .unwrap()
            .is_empty()
    );

    // Deleting c1 gives the rest back; the janitor's round sweeps too.
    h.delete(a, &format!("/v2/clusters/{c1}")).await.expect(200);
    drain(&h, &tid, |_| false).await;
    weft_engine::janitor::run_once(&h.app.state.engine, weft_server::state::now_ms())
        .await
        .unwrap();
    assert_eq!(free(&h).await, all);
    h.delete(a, &format!("{HOSTS}/h1")).await.expect(200);
}

#[tokio::test]
async fn a_host_reserved_for_a_node_that_never_got_recorded_goes_back_after_the_grace() {
    let h = Harness::new().await;
    let tid = setup(&h).await;
    h.post(
        admin(T),
        HOSTS,
        host_body("h1", 1, json!({"disk": "ssd"})).to_string(),
    )
    .await
    .expect(200);
    let store = &h.app.state.store;
    let req = weft_store::HostRequest {
        node_id: "ghost".into(),
        selector: weft_model::LabelSelector::parse("disk=ssd"),
    };
    let now = weft_server::state::now_ms();
    store
        .reserve_pool_hosts(&tid, "pool", 99, &[req], now)
        .await
        .unwrap();
    let sweep = |at| weft_engine::hostpool::sweep(&h.app.state.engine, at);
    assert!(
        sweep(now + 1000).await.unwrap().is_empty(),
        "its commit may still come"
    );
    assert!(free(&h).await.is_empty());
    let grace = weft_engine::hostpool::RESERVE_GRACE_MS;
    assert_eq!(sweep(now + grace + 1).await.unwrap().len(), 1);
    assert_eq!(free(&h).await.len(), 1);
}
