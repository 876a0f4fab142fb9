//! Secrets sealed at rest, end to end (issue 36): `weft up` with a docker provider whose
//! `sshkeyseed` is a secret deploys a kv-web cluster on Docker nodes (each node's SSH private key
//! comes back from the provider). Neither the seed nor any private key is in the SQLite files, in
//! an answer or in the server's and provisioner's logs. Then `weft admin rotate-secrets-key` runs
//! while weft serves: the old key file opens nothing in the store, and after a restart on the new
//! key the first cluster is deleted and a second one deploys.

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};

use crate::support::{http, weft};
use crate::up_down::{create, settle, up, Cleanup, Up};

const ADMIN: [(&str, &str); 2] = [("Coopr-TenantID", "default"), ("Coopr-UserID", "admin")];
const SEED: &str = "seed-0f3b9c2e7d41a6";
/// What every private key's text holds (OpenSSH or PEM).
const PRIVATE: &str = "PRIVATE KEY";

/// Every line `weft up` printed so far (stdout and stderr: server and provisioner logs).
fn drain(u: &Up, into: &mut Vec<String>) {
    into.extend(u.out.try_iter());
    into.extend(u.err.try_iter());
}

/// Every byte of the SQLite store's files (database, WAL, shared memory).
fn store_bytes(data: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for e in std::fs::read_dir(data).unwrap() {
        let path = e.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("weft.db")
        {
            bytes.extend(std::fs::read(&path).unwrap());
        }
    }
    bytes
}

fn count(hay: &[u8], needle: &str) -> usize {
    hay.windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

fn delete(api: &str, id: &str) {
    let (code, text) = http("DELETE", &format!("{api}/v2/clusters/{id}"), &ADMIN, "");
    assert_eq!(code, 200, "{text}");
}

/// `weft admin rotate-secrets-key` on the data dir (and the key file `key`, if given).
fn rotate(data: &Path, key: Option<&Path>) -> std::process::Output {
    let mut cmd = weft();
    cmd.args(["admin", "rotate-secrets-key", "--data-dir"])
        .arg(data);
    if let Some(k) = key {
        cmd.arg("--secrets-key-file").arg(k);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.output().expect("weft admin runs")
}

#[test]
fn secrets_stay_sealed_at_rest_and_a_rotated_key_retires_the_old_one() {
    if !weft_testkit::require("docker") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _cleanup = Cleanup(data.clone());
    let mut logs = Vec::new();
    let u = up(&data);
    let provider = json!({"name": "docker", "providertype": "docker",
        "provisioner": {"sshkeyseed": SEED}});
    let url = format!("{}/v2/providers/docker", u.api);
    let (code, text) = http("PUT", &url, &ADMIN, &provider.to_string());
    assert_eq!(code, 200, "{text}");
    let first = create(&u.api, "kv-web-docker", 3);
    let d = settle(&u.api, &first);
    assert_eq!(d["status"], "active", "{}", d["message"]);

    let stored = store_bytes(&data);
    assert!(stored.len() > 10_000, "the store's files were read");
    assert_eq!(count(&stored, SEED), 0, "the seed is in the store in clear");
    assert_eq!(count(&stored, PRIVATE), 0, "a private key is in the store");
    assert!(
        count(&stored, weft_engine::seal::PREFIX) >= 4,
        "sealed values"
    );
    for path in [
        "/v2/providers".to_string(),
        "/v2/providers/docker".to_string(),
        "/v2/export".to_string(),
        format!("/v2/clusters/{first}"),
        "/v2/nodes".to_string(),
    ] {
        let (code, text) = http("GET", &format!("{}{path}", u.api), &ADMIN, "");
        assert_eq!(code, 200, "{path}: {text}");
        assert!(
            !text.contains(SEED) && !text.contains(PRIVATE),
            "{path}: {text}"
        );
    }

    // The rotation, while weft serves.
    let key_file = data.join("secrets.key");
    let old = std::fs::read_to_string(&key_file).unwrap();
    let out = rotate(&data, None);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("rotated"));
    assert_ne!(std::fs::read_to_string(&key_file).unwrap(), old);
    let old_file = dir.path().join("old.key");
    std::fs::write(&old_file, &old).unwrap();
    let refused = rotate(&data, Some(&old_file));
    assert!(
        !refused.status.success(),
        "the old key still opens: {refused:?}"
    );
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("does not hold"), "{why}");
    drain(&u, &mut logs);
    drop(u);

    // Restarted on the new key: the first cluster goes, a second one comes.
    let u = up(&data);
    delete(&u.api, &first);
    let gone = settle(&u.api, &first);
    assert_eq!(gone["status"], "terminated", "{}", gone["message"]);
    let second = create(&u.api, "kv-web-docker", 3);
    let d = settle(&u.api, &second);
    assert_eq!(d["status"], "active", "{}", d["message"]);
    delete(&u.api, &second);
    let gone: Value = settle(&u.api, &second);
    assert_eq!(gone["status"], "terminated", "{}", gone["message"]);
    drain(&u, &mut logs);
    let file = std::fs::read_to_string(data.join("weft.log")).expect("weft up's log file");
    logs.extend(file.lines().map(str::to_string));
    assert!(logs.len() > 5, "the logs were read: {logs:?}");
    for l in &logs {
        assert!(!l.contains(SEED) && !l.contains(PRIVATE), "a log line: {l}");
    }
}
