//! Tests of the docker automator's field reading (`automators::docker`) through its public
//! functions.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use weft_model::FailureReason;
use weft_provisioner::automators::docker::*;
use weft_provisioner::Task;

fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn message(pairs: &[(&str, &str)]) -> String {
    let e = ContainerSpec::from_fields(&fields(pairs)).unwrap_err();
    assert!(!e.retryable, "{e}");
    e.message
}

#[test]
fn the_catalog_mysql_action_becomes_argv() {
    let spec = ContainerSpec::from_fields(&fields(&[
        ("image_name", "mysql"),
        ("publish_ports", "3306, 8080:80/udp"),
        (
            "environment_variables",
            "MYSQL_ROOT_PASSWORD=some pass=word",
        ),
        ("volumes", "/data/mysql:/var/lib/mysql,/etc/x:/x:ro"),
        ("links", "weft-db:db"),
        ("command", r#"mysqld --init-file='/a b' "x\"y" c\ d"#),
    ]))
    .unwrap();
    assert_eq!(
        spec.run_args("weft-mysql-n1", &[(LABEL_SPEC, "h")]),
        [
            "run",
            "-d",
            "--name",
            "weft-mysql-n1",
            "--label",
            "weft.container.spec=h",
            "-p",
            "3306:3306",
            "-p",
            "8080:80/udp",
            "-e",
            "MYSQL_ROOT_PASSWORD=some pass=word",
            "-v",
            "/data/mysql:/var/lib/mysql",
            "-v",
            "/etc/x:/x:ro",
            "--link",
            "weft-db:db",
            "mysql",
            "mysqld",
            "--init-file=/a b",
            "x\"y",
            "c d",
        ]
    );
    assert_eq!(spec.host_dirs(), ["/data/mysql", "/etc/x"]);
    let mut other = spec.clone();
    other.env.clear();
    assert_ne!(spec.hash(), other.hash(), "the hash follows the fields");
    assert_eq!(spec.hash(), spec.clone().hash());
}

#[test]
fn image_references_are_checked() {
    for ok in [
        "mysql",
        "mysql:8.0",
        "library/mysql:latest",
        "registry.example.com:5000/team/app_x:v1.2-rc",
        "localhost/app",
        "team/a__b.c-d---e",
        "app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "weft-node:bookworm",
    ] {
        check_image(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in [
        "",
        "x; touch /tmp/pwned",
        "--privileged",
        "-v",
        "MySQL",
        "a..b",
        "a/",
        "/a",
        "a:b:c",
        "a:-tag",
        "$(id)",
        "`id`",
        "a|b",
        "a b",
        "app@sha256:xyz",
        "bad_host:5000/x/y:1",
    ] {
        let e = check_image(bad).unwrap_err();
        assert!(
            e.message.starts_with("fields.image_name: "),
            "{bad}: {}",
            e.message
        );
    }
}

#[test]
fn bad_fields_are_fatal_and_named() {
    assert_eq!(
        message(&[("image_name", "x"), ("publish_ports", "80,70000")]),
        "fields.publish_ports: 70000 is not a port"
    );
    for p in ["0", "-1", "80:", ":80", "1:2:3", "80/sctp", "+80", "8o"] {
        let m = message(&[("image_name", "x"), ("publish_ports", p)]);
        assert!(m.starts_with("fields.publish_ports: "), "{p}: {m}");
    }
    for e in ["NOEQUALS", "1X=a", "A-B=c", "=v", "A B=c"] {
        let m = message(&[("image_name", "x"), ("environment_variables", e)]);
        assert!(m.starts_with("fields.environment_variables: "), "{e}: {m}");
    }
    let m = message(&[("image_name", "x"), ("environment_variables", "A=1\nB=2")]);
    assert!(m.starts_with("fields.environment_variables: "), "{m}");
    for v in [
        "data:/x",
        "/a/../b:/x",
        "/a:/x:rx",
        "/a",
        "/a:b",
        "/a:/x;y",
        "/a b:/x",
    ] {
        let m = message(&[("image_name", "x"), ("volumes", v)]);
        assert!(m.starts_with("fields.volumes: "), "{v}: {m}");
    }
    for l in ["-x", "a:b:c", "a b", "$x"] {
        let m = message(&[("image_name", "x"), ("links", l)]);
        assert!(m.starts_with("fields.links: "), "{l}: {m}");
    }
    let m = message(&[("image_name", "x"), ("command", "echo 'open")]);
    assert!(m.starts_with("fields.command: "), "{m}");
    let m = message(&[("publish_ports", "80")]);
    assert!(m.contains("image_name"), "{m}");
}

#[test]
fn a_pull_that_cannot_find_the_image_is_fatal_and_the_network_is_not() {
    for missing in [
        "Error response from daemon: manifest for x:1 not found: manifest unknown: manifest unknown",
        "Error response from daemon: pull access denied for nosuch, repository does not exist or may require 'docker login'",
        "invalid reference format",
    ] {
        assert_eq!(pull_failure(missing), FailureReason::NotFound, "{missing}");
    }
    assert_eq!(
        pull_failure("Error response from daemon: Head \"https://r/v2/x/manifests/1\": unauthorized: authentication required"),
        FailureReason::Auth
    );
    for net in [
        "Error response from daemon: Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host",
        "Error response from daemon: Get \"http://localhost:1/v2/\": dial tcp 127.0.0.1:1: connect: connection refused",
        "net/http: TLS handshake timeout",
    ] {
        let r = pull_failure(net);
        assert_eq!(r, FailureReason::Network, "{net}");
        assert!(r.retryable_by_default());
    }
}

#[test]
fn the_container_is_named_after_the_service_and_the_node() {
    let raw = json!({"taskId": "1-1-1", "clusterId": "7", "taskName": "START", "nodeId": "n/1 x",
        "config": {"service": {"name": "my sql", "action": {"type": "docker", "fields": {}}}}});
    let t = Task::from_json(raw, Duration::from_secs(1)).unwrap();
    assert_eq!(container_name(&t).unwrap(), "weft-my-sql-n-1-x");
}

#[test]
fn a_command_splits_like_a_shell_without_expanding() {
    assert_eq!(
        split_words(r#"  sh -c 'echo $HOME; ls'  "a b" \$x "#).unwrap(),
        ["sh", "-c", "echo $HOME; ls", "a b", "$x"]
    );
    assert_eq!(split_words("").unwrap(), Vec::<String>::new());
    assert_eq!(split_words("''").unwrap(), [""]);
    assert!(split_words("\"open").is_err());
    assert!(split_words("end\\").is_err());
}
