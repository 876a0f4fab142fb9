//! `weft hostpool` as an admin runs it: the `weft` binary against a real server (in-process, on
//! 127.0.0.1:0) with a `hostpool` provider: hosts added from a key file, listed, shown, edited and
//! removed, `-o json` read back as the API type, keys never printed, and a host lent to a cluster
//! kept (exit 2 with the server's message).

use serde_json::json;
use weft_client::api::{ApiClient, CreateCluster, Identity};
use weft_client::{Client, PluginKind, Registration};
use weft_model::{HostState, PluginType, PoolHost, TenantSpecification};

use crate::cli::Cli;

const TENANT: &str = "default";
const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END OPENSSH PRIVATE KEY-----\n";

/// A [`Cli`] with tenant `default`, the `hostpool` provider type, provider `pool`, and a template
/// `t` on it (hardware type `any`: any host). Every command names the server, tenant and user, and
/// none may print the key.
fn start() -> Cli {
    let s = Cli::start();
    let api = s.api.clone();
    let s = s
        .with_args(&["--server", &api, "--tenant", TENANT, "--user", "admin"])
        .never_printing("c2VjcmV0");
    s.rt.block_on(setup(&s.api, &s.internal));
    s
}

async fn setup(api: &str, internal: &str) {
    let who = |tenant: &str| Identity {
        tenant: tenant.into(),
        user: "admin".into(),
        api_key: None,
    };
    let sa = ApiClient::new(api, who("superadmin")).unwrap();
    sa.create_tenant(
        &TenantSpecification {
            name: TENANT.into(),
            description: None,
            workers: 0,
            max_clusters: weft_model::UNBOUNDED,
            max_nodes: weft_model::UNBOUNDED,
            check_interval: 0,
            max_cost_per_hour: None,
        },
        false,
    )
    .await
    .unwrap();
    let c = Client::new(internal).unwrap();
    c.register(&Registration {
        scheme: "http",
        id: "p1".into(),
        host: "127.0.0.1".into(),
        port: 9,
        capacity_total: 1,
    })
    .await
    .unwrap();
    for (kind, pt) in [
        (PluginKind::Provider, json!({"name": "hostpool"})),
        (PluginKind::Automator, json!({"name": "shell"})),
    ] {
        let pt: PluginType = serde_json::from_value(pt).unwrap();
        c.register_plugin_type(kind, &pt).await.unwrap();
    }
    let admin = ApiClient::new(api, who(TENANT)).unwrap();
    use weft_client::api::Kind;
    for (kind, body) in [
        (
            Kind::Provider,
            json!({"name": "pool", "providertype": "hostpool"}),
        ),
        (
            Kind::Provider,
            json!({"name": "other", "providertype": "shell"}),
        ),
        (
            Kind::HardwareType,
            json!({"name": "any", "providermap": {"pool": {"flavor": ""}}}),
        ),
        (
            Kind::ImageType,
            json!({"name": "os", "providermap": {"pool": {"image": "debian"}}}),
        ),
        (
            Kind::Service,
            json!({"name": "s", "provisioner": {"actions": {
            "install": {"type": "shell", "fields": {"script": "echo"}}}}}),
        ),
        (
            Kind::ClusterTemplate,
            json!({"name": "t", "defaults": {"services": ["s"], "provider": "pool"},
            "compatibility": {"services": ["s"]}, "constraints": {"size": {"min": 1, "max": 5}}}),
        ),
    ] {
        admin.create_entity(kind, &body).await.unwrap();
    }
}

/// `args` then `--provider pool`.
fn with<'a>(args: &[&'a str]) -> Vec<&'a str> {
    args.iter().copied().chain(["--provider", "pool"]).collect()
}

#[test]
fn hostpool_commands_add_list_show_edit_and_remove_hosts() {
    let s = start();
    let key = s.file("id_ed25519", KEY);
    let key = key.to_str().unwrap();

    assert!(s
        .json::<Vec<PoolHost>>(&with(&["hostpool", "list"]))
        .is_empty());
    let h: PoolHost = s.json(&[
        "hostpool",
        "add",
        "h1",
        "-p",
        "pool",
        "--address",
        "10.0.0.1",
        "--key-file",
        key,
        "--label",
        "disk=ssd",
        "--label",
        "rack=r1",
        "--ssh-user",
        "weft",
    ]);
    assert_eq!(
        (h.id.as_str(), h.address.as_str(), h.port, h.user.as_str()),
        ("h1", "10.0.0.1", 22, "weft")
    );
    assert_eq!(h.key, "********");
    assert_eq!(h.labels.len(), 2);
    assert_eq!(h.state, HostState::Free);
    let out = s.ok(&[
        "hostpool",
        "add",
        "h2",
        "--provider",
        "pool",
        "--address",
        "10.0.0.2",
        "--port",
        "2222",
        "--key-file",
        key,
    ]);
    assert!(
        out.contains("added host h2") && out.contains("10.0.0.2:2222"),
        "{out}"
    );

    // Table and JSON show the same pool.
    let table = s.ok(&with(&["hostpool", "list"]));
    assert!(
        table.contains("disk=ssd,rack=r1") && table.contains("free"),
        "{table}"
    );
    let list: Vec<PoolHost> = s.json(&with(&["hostpool", "list"]));
    assert_eq!(
        list.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        ["h1", "h2"]
    );
    let shown: PoolHost = s.json(&with(&["hostpool", "show", "h1"]));
    assert_eq!(shown, h);

    // Edit: unset flags keep their value, and so does the key.
    let e: PoolHost = s.json(&with(&[
        "hostpool",
        "edit",
        "h1",
        "--port",
        "2022",
        "--label",
        "rack=r2",
        "--unlabel",
        "disk",
    ]));
    assert_eq!(
        (e.address.as_str(), e.port, e.user.as_str()),
        ("10.0.0.1", 2022, "weft")
    );
    assert_eq!(e.labels, [("rack".to_string(), "r2".to_string())].into());
    let out = s.ok(&with(&[
        "hostpool",
        "edit",
        "h1",
        "--key-file",
        key,
        "--address",
        "h1.example.com",
    ]));
    assert!(
        out.contains("changed host h1") && out.contains("h1.example.com:2022"),
        "{out}"
    );

    // Mistakes: exit 1 for the command line, 2 for what the server refuses.
    s.fails(
        &with(&["hostpool", "add", "h3", "--address", "10.0.0.3"]),
        1,
    );
    s.fails(&with(&["hostpool", "add", "h3", "--key-file", key]), 1);
    s.fails(
        &with(&[
            "hostpool",
            "add",
            "h3",
            "--address",
            "10.0.0.3",
            "--key-file",
            key,
            "--label",
            "nolabel",
        ]),
        1,
    );
    let bad = s.file("not-a-key", "hunter2");
    let err = s.fails(
        &with(&[
            "hostpool",
            "add",
            "h3",
            "--address",
            "10.0.0.3",
            "--key-file",
            bad.to_str().unwrap(),
        ]),
        2,
    );
    assert!(err.contains("key"), "{err}");
    let err = s.fails(
        &with(&[
            "hostpool",
            "add",
            "h1",
            "--address",
            "10.0.0.9",
            "--key-file",
            key,
        ]),
        2,
    );
    assert!(err.contains("already exists"), "{err}");
    let err = s.fails(&["hostpool", "list", "--provider", "other"], 2);
    assert!(err.contains("hostpool"), "{err}");
    s.fails(&["hostpool", "list", "--provider", "nope"], 2);
    s.fails(&with(&["hostpool", "show", "nope"]), 2);
    s.fails(&["hostpool", "list"], 1); // --provider is required

    // A host lent to a cluster stays in the pool.
    let admin = ApiClient::new(
        &s.api,
        Identity {
            tenant: TENANT.into(),
            user: "admin".into(),
            api_key: None,
        },
    )
    .unwrap();
    let cluster =
        s.rt.block_on(admin.create_cluster(&CreateCluster {
            name: "c".into(),
            cluster_template: "t".into(),
            num_machines: 2,
            ..Default::default()
        }))
        .unwrap();
    let list: Vec<PoolHost> = s.json(&with(&["hostpool", "list"]));
    assert!(list
        .iter()
        .all(|h| h.state == HostState::InUse && h.cluster_id.as_deref() == Some(cluster.as_str())));
    assert!(s.ok(&with(&["hostpool", "list"])).contains(&cluster));
    let err = s.fails(&with(&["hostpool", "remove", "h2"]), 2);
    assert!(
        err.contains("lent to node") && err.contains(&cluster),
        "{err}"
    );
    // A third node finds no host: the cluster create is refused with the counts.
    let short = s.rt.block_on(admin.create_cluster(&CreateCluster {
        name: "d".into(),
        cluster_template: "t".into(),
        num_machines: 1,
        ..Default::default()
    }));
    let e = short.unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    assert!(e.server_message().contains("0 free"), "{e}");

    // Free hosts go.
    let stored = s.rt.block_on(admin.pool_hosts("pool")).unwrap();
    assert_eq!(stored.len(), 2);
    s.ok(&with(&[
        "hostpool",
        "add",
        "h3",
        "--address",
        "10.0.0.3",
        "--key-file",
        key,
    ]));
    let out = s.ok(&with(&["hostpool", "remove", "h3"]));
    assert!(out.contains("removed host h3"), "{out}");
    s.fails(&with(&["hostpool", "remove", "h3"]), 2);
    assert_eq!(
        s.json::<Vec<PoolHost>>(&with(&["hostpool", "list"])).len(),
        2
    );
}
