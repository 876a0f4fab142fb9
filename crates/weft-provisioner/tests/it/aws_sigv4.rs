//! Tests of SigV4 signing (`aws::sigv4`) through its public functions.
//!
//! Vectors from AWS's published SigV4 test suite (`aws-sig-v4-test-suite`): access key
//! `AKIDEXAMPLE`, region `us-east-1`, service `service`, time 2015-08-30 12:36:00 UTC.

use std::time::UNIX_EPOCH;

use weft_provisioner::aws::sigv4::*;

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const WHEN: &str = "20150830T123600Z";

fn creds() -> Credentials {
    Credentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: SECRET.into(),
        session_token: None,
    }
}

fn scope() -> Scope<'static> {
    Scope {
        region: "us-east-1",
        service: "service",
        amz_date: WHEN,
    }
}

fn headers(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut h = vec![
        ("Host".to_string(), "example.amazonaws.com".to_string()),
        ("X-Amz-Date".to_string(), WHEN.to_string()),
    ];
    h.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    h
}

fn signature(auth: &str) -> &str {
    auth.rsplit_once("Signature=").unwrap().1
}

#[test]
fn get_vanilla() {
    let h = headers(&[]);
    let req = Request {
        method: "GET",
        path: "/",
        query: &[],
        headers: &h,
        body: b"",
    };
    let (canonical, signed) = canonical_request(&req);
    assert_eq!(
        canonical,
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\
         e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(signed, "host;x-amz-date");
    assert_eq!(
        authorization(&creds(), &scope(), &req),
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
         SignedHeaders=host;x-amz-date, \
         Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
}

#[test]
fn get_vanilla_query_order_key_case() {
    let h = headers(&[]);
    let q = [
        ("Param2".to_string(), "value2".to_string()),
        ("Param1".to_string(), "value1".to_string()),
    ];
    let req = Request {
        method: "GET",
        path: "/",
        query: &q,
        headers: &h,
        body: b"",
    };
    assert_eq!(
        signature(&authorization(&creds(), &scope(), &req)),
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
    );
}

#[test]
fn post_x_www_form_urlencoded() {
    let h = headers(&[("Content-Type", "application/x-www-form-urlencoded")]);
    let req = Request {
        method: "POST",
        path: "/",
        query: &[],
        headers: &h,
        body: b"Param1=value1",
    };
    let (canonical, _) = canonical_request(&req);
    assert_eq!(
        canonical,
        "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\n\
         x-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n\
         9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"
    );
    assert_eq!(
        string_to_sign(&scope(), &canonical),
        "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n\
         42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281"
    );
    assert_eq!(
        signature(&authorization(&creds(), &scope(), &req)),
        "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
    );
}

#[test]
fn another_secret_signs_differently() {
    let h = headers(&[]);
    let req = Request {
        method: "GET",
        path: "/",
        query: &[],
        headers: &h,
        body: b"",
    };
    let mut other = creds();
    other.secret_access_key.push('x');
    assert_ne!(
        authorization(&other, &scope(), &req),
        authorization(&creds(), &scope(), &req)
    );
}

#[test]
fn encoding_and_dates() {
    assert_eq!(uri_encode("a b+c/~_.-é"), "a%20b%2Bc%2F~_.-%C3%A9");
    assert_eq!(
        amz_date(UNIX_EPOCH + std::time::Duration::from_secs(1_440_938_160)),
        WHEN
    );
    assert_eq!(amz_date(UNIX_EPOCH), "19700101T000000Z");
    // 2024-02-29 23:59:59: a leap day.
    assert_eq!(
        amz_date(UNIX_EPOCH + std::time::Duration::from_secs(1_709_251_199)),
        "20240229T235959Z"
    );
}

#[test]
fn debug_hides_the_secret() {
    let mut c = creds();
    c.session_token = Some("tok-secret".into());
    let shown = format!("{c:?}");
    assert!(
        !shown.contains(SECRET) && !shown.contains("tok-secret"),
        "{shown}"
    );
    assert!(shown.contains("AKIDEXAMPLE"));
}
