//! Coopr's shipped catalog (its 92 files: 15 cluster templates, 5 hardware types, 11 image types,
//! 8 providers, 53 services), loaded as Coopr's own `load-templates.sh` loads it: `PUT
//! /v2/{kind}/{name}` kind by kind, cluster templates first, so every template is written before
//! the services, types and providers it names. The fixture `fixtures/coopr_catalog.json` holds the
//! catalog's facts (names, references, constraints, lease values as the files type them, link
//! URLs); [`body`] builds each entry in the published JSON shape. Also what the catalog says
//! about the entries that cannot run (one template names a service the catalog lacks; one provider
//! has a type weft does not offer) and those that may not mean what they say.

use serde_json::{json, Map, Value};

use crate::common::{admin, Harness, Who};

const FIXTURE: &str = include_str!("fixtures/coopr_catalog.json");
/// `load-templates.sh`'s order.
const ORDER: [&str; 5] = [
    "clustertemplates",
    "hardwaretypes",
    "imagetypes",
    "providers",
    "services",
];
const T: &str = "coopr";

fn strings(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// A cluster template in Coopr's shape, from its facts: config values use the macro forms the
/// catalog's configs use.
fn template(f: &Value) -> Value {
    let first = f["services"][1].as_str().unwrap_or("base");
    let mut t = json!({
        "name": f["name"],
        "description": format!("{} (fixture)", f["name"].as_str().unwrap()),
        "defaults": {
            "services": f["services"],
            "provider": f["provider"],
            "hardwaretype": f["hardwaretype"],
            "imagetype": f["imagetype"],
            "config": {"fixture": {
                "one": format!("http://%host.service.{first}%"),
                "all": format!("%join(map(host.service.{first},'$:2181'),',')%"),
                "bind": "%ip.bind_v4.self%",
            }},
        },
        "compatibility": {
            "services": f["compat"][0],
            "hardwaretypes": f["compat"][1],
            "imagetypes": f["compat"][2],
        },
        "constraints": {},
        "administration": {},
    });
    let c = t["constraints"].as_object_mut().unwrap();
    if let Some(s) = f.get("size") {
        c.insert("size".into(), json!({"min": s[0], "max": s[1]}));
    }
    if let Some(q) = f.get("quantities").and_then(Value::as_object) {
        let services: Map<String, Value> = q
            .iter()
            .map(|(k, v)| (k.clone(), json!({"quantities": {"min": v[0], "max": v[1]}})))
            .collect();
        c.insert("services".into(), Value::Object(services));
    }
    let layout = json!({"mustcoexist": f.get("mustcoexist").cloned().unwrap_or(json!([])),
                        "cantcoexist": f.get("cantcoexist").cloned().unwrap_or(json!([]))});
    c.insert("layout".into(), layout);
    if let Some(l) = f.get("lease") {
        t["administration"] =
            json!({"leaseduration": {"initial": l[0], "max": l[1], "step": l[2]}});
    }
    if let Some(links) = f.get("links") {
        let links: Vec<Value> = strings(links)
            .iter()
            .enumerate()
            .map(|(i, u)| json!({"label": format!("UI {i}"), "url": u}))
            .collect();
        t["links"] = Value::Array(links);
    }
    t
}

/// A hardware or image type: an entry per provider it names.
fn machine_type(kind: &str, f: &Value) -> Value {
    let map: Map<String, Value> = strings(&f["providers"])
        .iter()
        .map(|p| {
            let p = p.as_str().unwrap().to_string();
            let entry = if kind == "hardwaretypes" {
                json!({"flavor": format!("{p}-flavor"), "ram": "4096", "vcpu": "2", "disks": "1", "cost": "0.1"})
            } else {
                json!({"image": format!("{p}-image"), "sshuser": "root"})
            };
            (p, entry)
        })
        .collect();
    json!({"name": f["name"], "description": "fixture", "providermap": map})
}

/// A provider: its type and fields, each with a value (the catalog ships empty strings).
fn provider(f: &Value) -> Value {
    let fields: Map<String, Value> = strings(&f["fields"])
        .iter()
        .map(|k| (k.as_str().unwrap().to_string(), json!("")))
        .collect();
    json!({"name": f["name"], "description": "fixture", "providertype": f["type"], "provisioner": fields})
}

/// A service: its dependencies and actions (chef-solo actions name a recipe, docker actions an
/// image, as the catalog's do).
fn service(f: &Value) -> Value {
    let list = |k: &str| f.get(k).cloned().unwrap_or(json!([]));
    let actions: Map<String, Value> = f["actions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(a, t)| {
            let fields = match t.as_str().unwrap() {
                "docker" => json!({"image_name": f["name"]}),
                _ => json!({"run_list": format!("recipe[{}::{a}]", f["name"].as_str().unwrap())}),
            };
            (a.clone(), json!({"type": t, "fields": fields}))
        })
        .collect();
    json!({
        "name": f["name"],
        "description": "fixture",
        "dependencies": {
            "provides": list("provides"),
            "conflicts": list("conflicts"),
            "install": {"requires": list("install.requires"), "uses": list("install.uses")},
            "runtime": {"requires": list("runtime.requires"), "uses": list("runtime.uses")},
        },
        "provisioner": {"actions": actions},
    })
}

fn body(kind: &str, f: &Value) -> Value {
    match kind {
        "clustertemplates" => template(f),
        "hardwaretypes" | "imagetypes" => machine_type(kind, f),
        "providers" => provider(f),
        "services" => service(f),
        other => panic!("no kind {other}"),
    }
}

/// Registers the plugin types a weft provisioner offers (as one registering would).
async fn weft_plugin_types(h: &Harness) {
    use axum::http::Method;
    for p in [
        "aws",
        "docker",
        "google",
        "hostpool",
        "joyent",
        "local",
        "openstack",
        "rackspace",
    ] {
        h.internal(
            Method::PUT,
            &format!("/v2/plugins/providertypes/{p}"),
            json!({"name": p}).to_string(),
        )
        .await
        .expect(200);
    }
    for a in ["ansible", "chef-solo", "docker", "puppet", "shell"] {
        h.internal(
            Method::PUT,
            &format!("/v2/plugins/automatortypes/{a}"),
            json!({"name": a}).to_string(),
        )
        .await
        .expect(200);
    }
}

/// Loads the whole catalog in the loader's order; returns each write's warnings by entry.
async fn load(h: &Harness, who: Who) -> Vec<(String, Vec<Value>)> {
    let catalog: Value = serde_json::from_str(FIXTURE).unwrap();
    let mut out = Vec::new();
    for kind in ORDER {
        for f in strings(&catalog[kind]) {
            let name = f["name"].as_str().unwrap();
            let r = h
                .put(
                    who,
                    &format!("/v2/{kind}/{name}"),
                    body(kind, &f).to_string(),
                )
                .await;
            assert_eq!(r.status.as_u16(), 200, "{kind}/{name}: {}", r.text());
            out.push((format!("{kind}/{name}"), strings(&r.json()["warnings"])));
        }
    }
    out
}

fn incomplete(h_list: &Value) -> Vec<(String, Vec<String>)> {
    strings(h_list)
        .iter()
        .filter_map(|e| {
            let lacks = e.get("incomplete")?;
            let fields = strings(lacks)
                .iter()
                .map(|w| {
                    format!(
                        "{}: {}",
                        w["field"].as_str().unwrap(),
                        w["message"].as_str().unwrap()
                    )
                })
                .collect();
            Some((e["name"].as_str().unwrap().to_string(), fields))
        })
        .collect()
}

#[tokio::test]
async fn coopr_s_shipped_catalog_loads_as_its_loader_writes_it() {
    let h = Harness::new().await;
    h.tenant(T).await;
    weft_plugin_types(&h).await;
    let a = admin(T);
    let answers = load(&h, a).await;
    assert_eq!(answers.len(), 92);

    // Written first, each template hears that its services do not exist yet.
    let (_, first) = &answers[0];
    assert!(
        first.iter().any(|w| w["field"] == "defaults.services[0]"
            && w["message"]
                .as_str()
                .unwrap()
                .contains("does not exist (yet)")),
        "{first:?}"
    );

    // Once all is written, what is incomplete is what truly lacks something.
    let t = h.get(a, "/v2/clustertemplates").await.expect(200).json();
    assert_eq!(strings(&t).len(), 15);
    assert_eq!(
        incomplete(&t),
        [(
            "coopr-standalone-docker".to_string(),
            vec!["defaults.services[0]: service coopr-standalone does not exist (yet)".to_string()]
        )]
    );
    let p = h.get(a, "/v2/providers").await.expect(200).json();
    let lacking = incomplete(&p);
    assert_eq!(lacking.len(), 1, "{lacking:?}");
    assert_eq!(lacking[0].0, "digitalocean");
    assert!(
        lacking[0].1[0]
            .starts_with("providertype: no provisioner offers provider type digitalocean"),
        "{lacking:?}"
    );
    for kind in ["services", "hardwaretypes", "imagetypes"] {
        let l = h.get(a, &format!("/v2/{kind}")).await.expect(200).json();
        assert_eq!(incomplete(&l), [], "{kind}");
    }
    let mut counts = Vec::new();
    for kind in ORDER {
        let l = h.get(a, &format!("/v2/{kind}")).await.expect(200).json();
        counts.push(strings(&l).len());
    }
    assert_eq!(counts, [15, 5, 11, 8, 53]);
}

#[tokio::test]
async fn a_rewrite_warns_about_defaults_outside_compatibility_and_links_over_several_nodes() {
    let h = Harness::new().await;
    h.tenant(T).await;
    weft_plugin_types(&h).await;
    let a = admin(T);
    load(&h, a).await;
    let catalog: Value = serde_json::from_str(FIXTURE).unwrap();
    let again = |name: &str| {
        let f = strings(&catalog["clustertemplates"])
            .into_iter()
            .find(|t| t["name"] == name)
            .unwrap();
        template(&f)
    };
    let w = h
        .put(
            a,
            "/v2/clustertemplates/docker-base",
            again("docker-base").to_string(),
        )
        .await
        .expect(200)
        .json();
    let fields: Vec<String> = strings(&w["warnings"])
        .iter()
        .map(|w| w["field"].as_str().unwrap().to_string())
        .collect();
    let text = w.to_string();
    assert!(
        text.contains("image type centos6 is a default but not in compatibility.imagetypes"),
        "{text}"
    );
    assert!(
        text.contains("image type ubuntu16 does not exist (yet)"),
        "{text}"
    );
    assert!(
        fields.iter().any(|f| f == "defaults.imagetype"),
        "{fields:?}"
    );
    // Still complete: a default outside the lists is a warning, not a gap.
    let t = h.get(a, "/v2/clustertemplates").await.expect(200).json();
    assert!(!incomplete(&t).iter().any(|(n, _)| n == "docker-base"));

    // lamp's link names apache-httpd, which may run on every node of a cluster of any size.
    let w = h
        .put(a, "/v2/clustertemplates/lamp", again("lamp").to_string())
        .await
        .expect(200)
        .json();
    let link = strings(&w["warnings"])
        .into_iter()
        .find(|w| w["field"] == "links[0].url")
        .unwrap_or_else(|| panic!("{w}"));
    assert!(
        link["message"].as_str().unwrap().contains(
            "%ip.access_v4.service.apache-httpd% lists every node of service apache-httpd"
        ),
        "{link}"
    );
    // The single-node templates' links name one node: no warning.
    let w = h
        .put(
            a,
            "/v2/clustertemplates/hadoop-singlenode",
            again("hadoop-singlenode").to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(w["warnings"], json!([]), "{w}");
}

#[tokio::test]
async fn a_create_and_a_dry_run_name_what_the_catalog_lacks() {
    let h = Harness::new().await;
    h.tenant(T).await;
    weft_plugin_types(&h).await;
    let a = admin(T);
    load(&h, a).await;
    h.provisioner("p1", 4).await;
    let req = json!({"name": "c1", "clusterTemplate": "coopr-standalone-docker", "numMachines": 1});
    for path in ["/v2/clusters?dryrun=true", "/v2/clusters"] {
        let r = h.post(a, path, req.to_string()).await;
        assert_eq!(r.status.as_u16(), 409, "{path}: {}", r.text());
        assert_eq!(
            r.text(),
            "cluster template coopr-standalone-docker cannot make this cluster yet: service \
             coopr-standalone does not exist",
            "{path}"
        );
    }
    // A service that requires what the catalog lacks is named with what requires it.
    let svc = json!({"name": "needy", "dependencies": {"runtime": {"requires": ["ghost"]}},
                     "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": "x"}}}}});
    let w = h
        .post(a, "/v2/services", svc.to_string())
        .await
        .expect(200)
        .json();
    assert_eq!(
        w["warnings"],
        json!([{"field": "dependencies.runtime.requires[0]", "message": "service ghost does not exist (yet)"}])
    );
    let req = json!({"name": "c2", "clusterTemplate": "base", "numMachines": 1, "services": ["base", "needy"]});
    let r = h.post(a, "/v2/clusters?dryrun=true", req.to_string()).await;
    assert_eq!(r.status.as_u16(), 409, "{}", r.text());
    assert!(
        r.text()
            .ends_with("service ghost (required by needy) does not exist"),
        "{}",
        r.text()
    );
    // The clusters list holds neither.
    let list = h.get(a, "/v2/clusters").await.expect(200).json();
    assert_eq!(list, json!([]));
}

#[tokio::test]
async fn the_example_catalog_imports_without_a_warning() {
    let h = Harness::new().await;
    h.tenant(T).await;
    weft_plugin_types(&h).await;
    let a = admin(T);
    let example = include_str!("../../../../examples/catalog/catalog.json");
    let w = h.post(a, "/v2/import", example).await.expect(200).json();
    assert_eq!(w["warnings"], json!([]), "{w:#}");
}
