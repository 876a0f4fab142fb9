//! The `aws` provider's credentials (issue 39): a role assumed through moto's STS with an external
//! id, the instance profile read from a loopback metadata service that speaks IMDSv2 only, the
//! refresh of temporary credentials, and a refused AssumeRole. A recording forwarder on loopback,
//! in front of moto, notes the access key id (SigV4 `Credential=`) and the
//! `X-Amz-Security-Token` of every request, so the tests see which credentials signed EC2's
//! calls. moto checks each signature, and an assumed role's session token, with what it issued.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::contract;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use weft_model::FailureReason;
use weft_provisioner::aws::client::QueryClient;
use weft_provisioner::aws::credentials::STS_VERSION;
use weft_provisioner::aws::sigv4::{amz_date, Credentials};
use weft_provisioner::task::Action;
use weft_provisioner::Provider;

use crate::aws::{ec2_at, moto, provider, task, Moto};

const REGION: &str = "us-east-1";
const EXTERNAL_ID: &str = "external-id-the-trust-policy-wants";

fn param(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

/// One request the forwarder saw.
#[derive(Debug, Clone)]
struct Seen {
    /// The service of the SigV4 scope (`ec2`, `sts`).
    service: String,
    action: String,
    access_key_id: String,
    token: Option<String>,
    /// The form body (it holds no secret: only the signature goes in a header).
    form: String,
}

/// A forwarder to moto that records each request and can refuse EC2 calls as expired.
struct Recorder {
    upstream: String,
    seen: Mutex<Vec<Seen>>,
    /// How many of the next EC2 calls are answered `RequestExpired` without being forwarded.
    expire_next: AtomicU32,
}

fn seen_of(headers: &HeaderMap, form: &str) -> Seen {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let scope = auth
        .split_once("Credential=")
        .map(|(_, r)| r.split(',').next().unwrap_or_default())
        .unwrap_or_default();
    let parts: Vec<&str> = scope.split('/').collect();
    Seen {
        service: parts.get(3).copied().unwrap_or_default().to_string(),
        action: form
            .split('&')
            .find_map(|kv| kv.strip_prefix("Action="))
            .unwrap_or_default()
            .to_string(),
        access_key_id: parts.first().copied().unwrap_or_default().to_string(),
        token: headers
            .get("x-amz-security-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        form: form.to_string(),
    }
}

async fn forwarded(
    rec: Arc<Recorder>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = String::from_utf8_lossy(&body).into_owned();
    let seen = seen_of(&headers, &form);
    let ec2 = seen.service == "ec2";
    rec.seen.lock().unwrap().push(seen);
    if ec2
        && rec
            .expire_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        let xml = "<Response><Errors><Error><Code>RequestExpired</Code>\
                   <Message>Request has expired.</Message></Error></Errors>\
                   <RequestID>r-1</RequestID></Response>";
        return (StatusCode::BAD_REQUEST, xml).into_response();
    }
    let mut req = reqwest::Client::new().request(method, &rec.upstream);
    for (k, v) in &headers {
        if k != "content-length" {
            req = req.header(k, v);
        }
    }
    let resp = req.body(body).send().await.expect("moto answers");
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap();
    (status, resp.text().await.unwrap()).into_response()
}

/// Serves the forwarder on loopback; answers its endpoint.
async fn serve_recorder(m: &Moto) -> (String, Arc<Recorder>) {
    let rec = Arc::new(Recorder {
        upstream: m.endpoint.clone(),
        seen: Mutex::default(),
        expire_next: AtomicU32::new(0),
    });
    let r = rec.clone();
    let app =
        axum::Router::new().fallback(move |method: Method, headers: HeaderMap, body: Bytes| {
            forwarded(r.clone(), method, headers, body)
        });
    (serve(app).await, rec)
}

async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

/// Makes role `name` in moto, assumable by the IAM user `weft` and by `also` (with
/// `external_id` when given, as an `sts:ExternalId` condition) and allowed everything; answers
/// its ARN.
pub(crate) async fn make_role(
    m: &Moto,
    name: &str,
    external_id: Option<&str>,
    also: Option<&str>,
) -> String {
    let iam = m.iam();
    let user = iam
        .call("GetUser", &[param("UserName", "weft")])
        .await
        .expect("GetUser");
    let user_arn = user
        .text_at(&["GetUserResult", "User", "Arn"])
        .unwrap()
        .to_string();
    let principals: Vec<&str> = [Some(user_arn.as_str()), also]
        .into_iter()
        .flatten()
        .collect();
    let mut statement = json!({"Effect": "Allow", "Principal": {"AWS": principals},
        "Action": "sts:AssumeRole"});
    if let Some(id) = external_id {
        statement["Condition"] = json!({"StringEquals": {"sts:ExternalId": id}});
    }
    let trust = json!({"Version": "2012-10-17", "Statement": [statement]});
    let role = iam
        .call(
            "CreateRole",
            &[
                param("RoleName", name),
                param("AssumeRolePolicyDocument", &trust.to_string()),
            ],
        )
        .await
        .expect("CreateRole");
    let all = json!({"Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]});
    iam.call(
        "PutRolePolicy",
        &[
            param("RoleName", name),
            param("PolicyName", "all"),
            param("PolicyDocument", &all.to_string()),
        ],
    )
    .await
    .expect("PutRolePolicy");
    role.text_at(&["CreateRoleResult", "Role", "Arn"])
        .unwrap()
        .to_string()
}

/// The provider's fields for moto at `endpoint`, without the access key.
fn keyless_fields(m: &Moto, endpoint: &str) -> Map<String, Value> {
    let mut f = m.fields(endpoint);
    f.remove("access_key_id");
    f.remove("secret_access_key");
    f
}

#[tokio::test]
async fn an_assumed_role_with_an_external_id_signs_ec2_s_calls() {
    let Some(m) = moto().await else { return };
    let role_arn = make_role(&m, "weft-provisioner", Some(EXTERNAL_ID), None).await;
    let (endpoint, rec) = serve_recorder(&m).await;
    let mut fields = m.fields(&endpoint);
    fields.insert("role_arn".into(), json!(role_arn));
    fields.insert("external_id".into(), json!(EXTERNAL_ID));
    fields.insert("role_session_name".into(), json!("weft-test"));

    // CREATE (twice), CONFIRM (twice), STATUS and DELETE, all through one provider.
    contract::provider_contract(&provider(), fields, "n-role").await;
    let made = m.instances_of("n-role").await;
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(!made[0].is_live(), "deleted: {made:?}");

    let seen = rec.seen.lock().unwrap().clone();
    let sts: Vec<&Seen> = seen.iter().filter(|s| s.service == "sts").collect();
    assert_eq!(
        sts.len(),
        1,
        "the role is assumed once for every task: {seen:#?}"
    );
    assert_eq!(sts[0].action, "AssumeRole");
    assert_eq!(
        sts[0].access_key_id, m.creds.access_key_id,
        "signed with the base key"
    );
    assert_eq!(sts[0].token, None);
    for part in [
        format!("ExternalId={EXTERNAL_ID}"),
        "RoleSessionName=weft-test".into(),
        format!(
            "RoleArn={}",
            role_arn.replace(':', "%3A").replace('/', "%2F")
        ),
    ] {
        assert!(
            sts[0].form.split('&').any(|kv| kv == part),
            "{part} in {}",
            sts[0].form
        );
    }
    let ec2: Vec<&Seen> = seen.iter().filter(|s| s.service == "ec2").collect();
    assert!(ec2.len() >= 6, "{ec2:#?}");
    let assumed = &ec2[0].access_key_id;
    assert!(assumed.starts_with("ASIA"), "{assumed}");
    for s in &ec2 {
        assert_eq!(
            &s.access_key_id, assumed,
            "{} signed with the role's key",
            s.action
        );
        assert!(
            s.token.as_deref().is_some_and(|t| !t.is_empty()),
            "{} carries the session token",
            s.action
        );
    }
    assert_eq!(seen.len(), sts.len() + ec2.len(), "{seen:#?}");
}

#[tokio::test]
async fn moto_refuses_a_wrong_external_id_and_the_failure_is_fatal_auth() {
    let Some(m) = moto().await else { return };
    let role_arn = make_role(&m, "weft-guarded", Some(EXTERNAL_ID), None).await;
    let (endpoint, rec) = serve_recorder(&m).await;
    let wrong = "a-wrong-external-id-kept-secret";
    let mut fields = m.fields(&endpoint);
    fields.insert("role_arn".into(), json!(role_arn));
    fields.insert("external_id".into(), json!(wrong));
    let e = provider()
        .create(&task(Action::Create, "n-denied", &fields, &Map::new()))
        .await
        .expect_err("the trust policy wants another external id");
    assert!(!e.retryable, "{e}");
    assert_eq!(e.reason, FailureReason::Auth, "{e}");
    assert!(e.message.contains("AccessDenied"), "{e}");
    assert!(e.message.contains(&role_arn), "{e}");
    for secret in [wrong, &m.creds.secret_access_key] {
        assert!(!e.message.contains(secret), "{e}");
    }
    let seen = rec.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one AssumeRole, no EC2 call: {seen:#?}");
    assert!(m.instances_of("n-denied").await.is_empty());
}

/// STS's documented answer to a refused AssumeRole.
const ACCESS_DENIED: &str = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error>
    <Type>Sender</Type>
    <Code>AccessDenied</Code>
    <Message>User: arn:aws:iam::123456789012:user/weft is not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::123456789012:role/weft</Message>
  </Error>
  <RequestId>4a7c8a4e-2b1d-4f4e-9a55-0d8c0c7d1b1e</RequestId>
</ErrorResponse>"#;

#[tokio::test]
async fn a_refused_assume_role_is_fatal_with_reason_auth_and_names_no_secret() {
    let calls = Arc::new(Mutex::new(Vec::<String>::new()));
    let c = calls.clone();
    let app = axum::Router::new().fallback(move |body: Bytes| {
        let c = c.clone();
        async move {
            c.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&body).into_owned());
            (StatusCode::FORBIDDEN, ACCESS_DENIED)
        }
    });
    let endpoint = serve(app).await;
    let fields = json!({"region": REGION, "access_key_id": "AKIAEXAMPLEBASE",
        "secret_access_key": "base-secret-never-shown", "endpoint": endpoint,
        "role_arn": "arn:aws:iam::123456789012:role/weft",
        "external_id": "external-id-never-shown", "instance_type": "t3.micro", "ami": "ami-1"});
    let fields = fields.as_object().unwrap().clone();
    let e = provider()
        .create(&task(Action::Create, "n-refused", &fields, &Map::new()))
        .await
        .expect_err("STS refuses");
    assert!(!e.retryable, "{e}");
    assert_eq!(e.reason, FailureReason::Auth, "{e}");
    assert!(e.message.contains("AccessDenied"), "{e}");
    assert!(
        e.message
            .contains("not authorized to perform: sts:AssumeRole"),
        "{e}"
    );
    for secret in ["base-secret-never-shown", "external-id-never-shown"] {
        assert!(!e.message.contains(secret), "{e}");
    }
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "refused once, not retried: {calls:?}");
    assert!(calls[0].contains("Action=AssumeRole"), "{calls:?}");
    assert!(
        calls[0].contains("ExternalId=external-id-never-shown"),
        "{calls:?}"
    );
}

/// A metadata service as the EC2 docs describe it, on an instance that requires IMDSv2: a
/// session token from `PUT /latest/api/token` (with a TTL header), and every GET refused
/// (401) without a valid one. It serves the credentials of `serves`, in turn (the last one
/// again and again), each with its own lifetime.
struct Imds {
    token: String,
    serves: Vec<(Credentials, Duration)>,
    fetched: AtomicU32,
    puts: AtomicU32,
    refused: AtomicU32,
}

const IMDS_ROLE: &str = "weft-host-role";

async fn imds(state: Arc<Imds>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
    if method == Method::PUT && uri.path() == "/latest/api/token" {
        state.puts.fetch_add(1, Ordering::SeqCst);
        let ttl =
            header("x-aws-ec2-metadata-token-ttl-seconds").and_then(|v| v.parse::<u32>().ok());
        if !ttl.is_some_and(|t| (1..=21_600).contains(&t)) || header("x-forwarded-for").is_some() {
            return StatusCode::BAD_REQUEST.into_response();
        }
        return state.token.clone().into_response();
    }
    if method != Method::GET {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    if header("x-aws-ec2-metadata-token") != Some(state.token.as_str()) {
        state.refused.fetch_add(1, Ordering::SeqCst);
        return StatusCode::UNAUTHORIZED.into_response();
    }
    match uri
        .path()
        .strip_prefix("/latest/meta-data/iam/security-credentials/")
    {
        Some("") => IMDS_ROLE.into_response(),
        Some(IMDS_ROLE) => {
            let n = state.fetched.fetch_add(1, Ordering::SeqCst) as usize;
            let (c, life) = &state.serves[n.min(state.serves.len() - 1)];
            let at = |t: SystemTime| {
                let d = amz_date(t);
                format!(
                    "{}-{}-{}T{}:{}:{}Z",
                    &d[..4],
                    &d[4..6],
                    &d[6..8],
                    &d[9..11],
                    &d[11..13],
                    &d[13..15]
                )
            };
            let now = SystemTime::now();
            Json(
                json!({"Code": "Success", "LastUpdated": at(now), "Type": "AWS-HMAC",
                "AccessKeyId": c.access_key_id, "SecretAccessKey": c.secret_access_key,
                "Token": c.session_token, "Expiration": at(now + *life)}),
            )
            .into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Serves a metadata service ([`Imds`]) on loopback; answers its endpoint.
async fn serve_imds(serves: Vec<(Credentials, Duration)>) -> (String, Arc<Imds>) {
    let state = Arc::new(Imds {
        token: "imds-session-token".into(),
        serves,
        fetched: AtomicU32::new(0),
        puts: AtomicU32::new(0),
        refused: AtomicU32::new(0),
    });
    let s = state.clone();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
        imds(s.clone(), method, uri, headers)
    });
    (serve(app).await, state)
}

/// Temporary credentials of role `role_arn`, from moto's STS (signed with the IAM user's key).
async fn assumed(m: &Moto, role_arn: &str, session: &str) -> Credentials {
    let sts = QueryClient::new(
        reqwest::Client::new(),
        &m.endpoint,
        REGION,
        "sts",
        STS_VERSION,
        m.creds.clone(),
    )
    .unwrap();
    let a = sts
        .call(
            "AssumeRole",
            &[
                param("RoleArn", role_arn),
                param("RoleSessionName", session),
            ],
        )
        .await
        .expect("AssumeRole");
    let text = |n: &str| {
        a.text_at(&["AssumeRoleResult", "Credentials", n])
            .unwrap()
            .to_string()
    };
    Credentials {
        access_key_id: text("AccessKeyId"),
        secret_access_key: text("SecretAccessKey"),
        session_token: Some(text("SessionToken")),
    }
}

#[tokio::test]
async fn the_instance_profile_is_read_with_imdsv2_and_refreshed_before_it_expires() {
    let Some(m) = moto().await else { return };
    let role_arn = make_role(&m, "weft-host", None, None).await;
    let first = assumed(&m, &role_arn, "first").await;
    let second = assumed(&m, &role_arn, "second").await;
    let forged = Credentials {
        session_token: Some("not-the-session-token".into()),
        ..first.clone()
    };
    ec2_at(&m.endpoint, forged)
        .call("DescribeInstances", &[])
        .await
        .expect_err("moto checks an assumed role's session token");
    // The first credentials have two minutes left: less than the refresh margin, so they are
    // used once and fetched again at the next call; the second ones last an hour.
    let (imds_endpoint, state) = serve_imds(vec![
        (first.clone(), Duration::from_secs(120)),
        (second.clone(), Duration::from_secs(3600)),
    ])
    .await;
    let (endpoint, rec) = serve_recorder(&m).await;
    let mut fields = keyless_fields(&m, &endpoint);
    fields.insert("credential_source".into(), json!("instance_profile"));
    fields.insert(
        "imds_endpoint".into(),
        json!(imds_endpoint.trim_end_matches('/')),
    );
    let p = provider();

    let out = p
        .create(&task(Action::Create, "n-imds", &fields, &Map::new()))
        .await
        .expect("create with the instance profile");
    assert_eq!(
        state.refused.load(Ordering::SeqCst),
        0,
        "every GET carried the token"
    );
    assert_eq!(
        state.fetched.load(Ordering::SeqCst),
        2,
        "fetched, then refreshed once"
    );
    let ec2: Vec<Seen> = rec
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.service == "ec2")
        .cloned()
        .collect();
    assert!(ec2.len() >= 3, "{ec2:#?}");
    assert_eq!(ec2[0].access_key_id, first.access_key_id);
    assert_eq!(ec2[0].token, first.session_token);
    for s in &ec2[1..] {
        assert_eq!(s.access_key_id, second.access_key_id, "{}", s.action);
        assert_eq!(s.token, second.session_token, "{}", s.action);
    }

    // The fake is IMDSv2-only, as the docs describe it.
    let http = reqwest::Client::new();
    let roles = format!("{imds_endpoint}latest/meta-data/iam/security-credentials/");
    let bare = http.get(&roles).send().await.unwrap();
    assert_eq!(
        bare.status().as_u16(),
        401,
        "a GET without a token is refused"
    );
    let forged = http
        .get(&roles)
        .header("x-aws-ec2-metadata-token", "forged")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 401);
    let no_ttl = http
        .put(format!("{imds_endpoint}latest/api/token"))
        .send()
        .await
        .unwrap();
    assert_eq!(no_ttl.status().as_u16(), 400, "a token needs a TTL");

    // The second credentials last: DELETE uses them without asking again.
    let mut made = Map::new();
    made.extend(out.result);
    p.delete(&task(Action::Delete, "n-imds", &fields, &made))
        .await
        .expect("delete");
    assert_eq!(state.fetched.load(Ordering::SeqCst), 2, "still cached");
    assert!(!m.instances_of("n-imds").await[0].is_live());

    // EC2 says they expired: they are dropped, fetched again, and the call is sent once more.
    rec.expire_next.store(1, Ordering::SeqCst);
    let before = rec.seen.lock().unwrap().len();
    p.status(&task(Action::Status, "n-imds", &fields, &made))
        .await
        .expect("status passes on its second try");
    assert_eq!(
        state.fetched.load(Ordering::SeqCst),
        3,
        "fetched again after RequestExpired"
    );
    let after: Vec<Seen> = rec.seen.lock().unwrap()[before..].to_vec();
    assert_eq!(after.len(), 2, "refused, then sent again: {after:#?}");
    assert_eq!(after[0].action, after[1].action);

    // Expired twice in a row: not retried forever, and fatal (auth).
    rec.expire_next.store(2, Ordering::SeqCst);
    let e = p
        .status(&task(Action::Status, "n-imds", &fields, &made))
        .await
        .expect_err("expired again after a refresh");
    assert!(!e.retryable && e.reason == FailureReason::Auth, "{e}");
    assert!(e.message.contains("RequestExpired"), "{e}");
    for secret in [
        &second.secret_access_key,
        second.session_token.as_ref().unwrap(),
    ] {
        assert!(!e.message.contains(secret.as_str()), "{e}");
    }
    assert_eq!(
        state.refused.load(Ordering::SeqCst),
        2,
        "only the two probes above were refused"
    );
}

#[tokio::test]
async fn an_instance_without_a_role_fails_with_reason_auth() {
    let app =
        axum::Router::new().fallback(|method: Method, uri: Uri, headers: HeaderMap| async move {
            match (method, uri.path()) {
                (Method::PUT, "/latest/api/token") => "t".into_response(),
                (Method::GET, _) if headers.get("x-aws-ec2-metadata-token").is_none() => {
                    StatusCode::UNAUTHORIZED.into_response()
                }
                _ => StatusCode::NOT_FOUND.into_response(),
            }
        });
    let imds_endpoint = serve(app).await;
    let fields = json!({"region": REGION, "credential_source": "instance_profile",
        "imds_endpoint": imds_endpoint, "endpoint": "http://127.0.0.1:9/",
        "instance_type": "t3.micro", "ami": "ami-1"});
    let e = provider()
        .create(&task(
            Action::Create,
            "n-norole",
            fields.as_object().unwrap(),
            &Map::new(),
        ))
        .await
        .expect_err("no role on this instance");
    assert!(!e.retryable && e.reason == FailureReason::Auth, "{e}");
    assert!(e.message.contains("instance profile"), "{e}");
}

#[tokio::test]
async fn a_role_is_assumed_with_the_instance_profile_s_credentials() {
    let Some(m) = moto().await else { return };
    // The host's instance profile: temporary credentials of role weft-host, which the
    // customer's role trusts.
    let host_role = make_role(&m, "weft-host", None, None).await;
    let host = assumed(&m, &host_role, "host").await;
    let account = host_role.split(':').nth(4).unwrap();
    let host_principal = format!("arn:aws:sts::{account}:assumed-role/weft-host/host");
    let role_arn = make_role(
        &m,
        "weft-customer",
        Some(EXTERNAL_ID),
        Some(&host_principal),
    )
    .await;
    let (imds_endpoint, state) = serve_imds(vec![(host.clone(), Duration::from_secs(3600))]).await;
    let (endpoint, rec) = serve_recorder(&m).await;
    let mut fields = keyless_fields(&m, &endpoint);
    fields.insert("credential_source".into(), json!("instance_profile"));
    fields.insert("imds_endpoint".into(), json!(imds_endpoint));
    fields.insert("role_arn".into(), json!(role_arn));
    fields.insert("external_id".into(), json!(EXTERNAL_ID));

    contract::provider_contract(&provider(), fields, "n-chain").await;
    assert!(!m.instances_of("n-chain").await[0].is_live());
    assert_eq!(
        state.fetched.load(Ordering::SeqCst),
        1,
        "the host's credentials last an hour"
    );
    assert_eq!(state.refused.load(Ordering::SeqCst), 0);
    let seen = rec.seen.lock().unwrap().clone();
    let sts: Vec<&Seen> = seen.iter().filter(|s| s.service == "sts").collect();
    assert_eq!(sts.len(), 1, "{seen:#?}");
    assert_eq!(sts[0].access_key_id, host.access_key_id);
    assert_eq!(sts[0].token, host.session_token);
    let ec2: Vec<&Seen> = seen.iter().filter(|s| s.service == "ec2").collect();
    assert!(!ec2.is_empty());
    for s in ec2 {
        assert!(s.access_key_id.starts_with("ASIA"), "{s:?}");
        assert_ne!(s.access_key_id, host.access_key_id, "{s:?}");
        assert!(s.token.is_some() && s.token != host.session_token, "{s:?}");
    }
}
