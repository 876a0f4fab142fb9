//! Tests of identity answers and catalogs (`openstack::identity`) through its public functions.

use std::time::Duration;

use serde_json::json;
use weft_provisioner::openstack::identity::*;

fn ks_catalog() -> Vec<Endpoint> {
    let body = json!({"token": {"expires_at": "2026-01-01T01:00:00.000000Z",
        "issued_at": "2026-01-01T00:00:00.000000Z", "catalog": [
        {"type": "identity", "name": "keystone", "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": "http://ks/v3/"}]},
        {"type": "compute", "name": "nova", "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": "http://one/v2.1/"},
            {"interface": "internal", "region_id": "RegionOne", "url": "http://one-int/v2.1"},
            {"interface": "public", "region_id": "RegionTwo", "url": "http://two/v2.1"}]}]}});
    let t = keystone_token(Some("tok"), &body).unwrap();
    assert_eq!(t.lifetime, Some(Duration::from_secs(3600)));
    t.catalog
}

#[test]
fn the_endpoint_is_chosen_by_interface_and_region() {
    let c = ks_catalog();
    let pick = |i, r| choose_endpoint(&c, "compute", i, r);
    assert_eq!(
        pick("public", Some("RegionOne")).unwrap(),
        "http://one/v2.1"
    );
    assert_eq!(
        pick("public", Some("RegionTwo")).unwrap(),
        "http://two/v2.1"
    );
    assert_eq!(pick("internal", None).unwrap(), "http://one-int/v2.1");
    let e = pick("public", None).unwrap_err();
    assert!(
        e.contains("region is required") && e.contains("RegionTwo"),
        "{e}"
    );
    let e = pick("public", Some("RegionThree")).unwrap_err();
    assert!(e.contains("RegionThree") && e.contains("RegionOne"), "{e}");
    assert!(pick("admin", None).unwrap_err().contains("interface admin"));
    assert!(keystone_token(None, &json!({"token": {}})).is_err());
}

#[test]
fn rackspace_catalogs_have_a_region_per_endpoint() {
    let body = json!({"access": {"token": {"id": "abc", "expires": "2099-01-01T00:00:00.000-06:00"},
        "serviceCatalog": [
            {"name": "cloudServers", "type": "compute",
             "endpoints": [{"publicURL": "http://first-gen/v1.0/1"}]},
            {"name": "cloudServersOpenStack", "type": "compute", "endpoints": [
                {"region": "DFW", "publicURL": "http://dfw/v2/1", "tenantId": "1"},
                {"region": "ORD", "publicURL": "http://ord/v2/1", "internalURL": "http://ord-snet/v2/1"}]}]}});
    let t = rackspace_token(&body).unwrap();
    assert_eq!(t.id, "abc");
    assert!(t.lifetime.unwrap() > Duration::from_secs(86400));
    assert_eq!(
        choose_endpoint(&t.catalog, "compute", "public", Some("ORD")).unwrap(),
        "http://ord/v2/1"
    );
    assert_eq!(
        choose_endpoint(&t.catalog, "compute", "internal", None).unwrap(),
        "http://ord-snet/v2/1"
    );
    assert!(rackspace_token(&json!({"access": {"token": {}}})).is_err());
}

#[test]
fn bodies_name_users_and_projects_by_id_or_by_name() {
    let by_name = Credentials::Password {
        user: Ref {
            name: Some("u".into()),
            domain_name: Some("D".into()),
            ..Default::default()
        },
        password: "pw".into(),
        project: Ref {
            name: Some("p".into()),
            ..Default::default()
        },
    };
    assert!(by_name.check().is_ok());
    let b = by_name.body();
    let user = &b["auth"]["identity"]["password"]["user"];
    assert_eq!(user["name"], "u");
    assert_eq!(user["domain"]["name"], "D");
    assert_eq!(b["auth"]["scope"]["project"]["domain"]["id"], "default");
    assert_eq!(
        by_name.token_url("http://k:5000/"),
        "http://k:5000/v3/auth/tokens"
    );
    assert_eq!(
        by_name.token_url("http://k:5000/v3/"),
        "http://k:5000/v3/auth/tokens"
    );
    let app = Credentials::ApplicationCredential {
        id: Some("ac".into()),
        name: None,
        user: Ref::default(),
        secret: "s".into(),
    };
    let b = app.body();
    assert_eq!(b["auth"]["identity"]["application_credential"]["id"], "ac");
    assert!(b["auth"].get("scope").is_none());
    let rax = Credentials::ApiKey {
        username: "u".into(),
        api_key: "k".into(),
    };
    assert_eq!(
        rax.token_url(""),
        "https://identity.api.rackspacecloud.com/v2.0/tokens"
    );
    assert_eq!(
        rax.body()["auth"]["RAX-KSKEY:apiKeyCredentials"]["apiKey"],
        "k"
    );
    let e = Credentials::Password {
        user: Ref::default(),
        password: "x".into(),
        project: Ref::default(),
    }
    .check()
    .unwrap_err();
    assert!(e.contains("user_name"), "{e}");
}
