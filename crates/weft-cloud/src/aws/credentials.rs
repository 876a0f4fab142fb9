//! Where the `aws` provider's credentials come from, and how temporary ones are kept fresh.
//!
//! - **Base credentials** ([`CredentialSource`]): field `credential_source` = `keys` (the
//!   default: `access_key_id`, `secret_access_key` and optionally `session_token` from the
//!   provider's fields) or `instance_profile` (the provisioner host's EC2 instance profile, read
//!   from the instance metadata service with an IMDSv2 session: `PUT /latest/api/token`, then
//!   `GET /latest/meta-data/iam/security-credentials/` for the role's name and
//!   `GET .../security-credentials/<role>` for its keys; at `imds_endpoint`, default
//!   [`DEFAULT_IMDS`]). The source is never guessed from missing keys: a provider whose keys were
//!   forgotten fails at once instead of waiting for a metadata service that is not there.
//! - **A role** ([`Role`]): with `role_arn`, the base credentials sign an STS `AssumeRole`
//!   (query API [`STS_VERSION`], with `ExternalId` when `external_id` is given, session name
//!   `role_session_name`, default [`DEFAULT_SESSION_NAME`]) at `sts_endpoint` (default: the
//!   `endpoint` field when it is set, as emulators serve every service on one port, else
//!   `https://sts.<region>.amazonaws.com/`), and EC2 is called with the role's temporary keys.
//! - **Refresh**: temporary credentials (from STS or the metadata service) are kept in a
//!   [`Cache`] shared by every worker of the provider, one entry per source and role, behind a
//!   lock: one worker fetches while the others wait for its answer. They are fetched again once
//!   less than [`REFRESH_MARGIN`] of their lifetime is left, and never used past their
//!   `Expiration`. A call answered with an expired-token code ([`super::client`]) drops them and
//!   is sent once more with new ones.
//! - **Errors**: a refused `AssumeRole` (`AccessDenied`) is fatal with reason `auth`; secrets
//!   (keys, session tokens, the external id, the metadata session token) appear in no error, log
//!   or `Debug` output.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Map, Value};
use weft_model::FailureReason;

use super::client::{malformed, QueryClient};
use super::sigv4::Credentials;
use super::xml::Element;
use crate::cloud::{http, CloudError};
use crate::task::provider_field as field;
use crate::task::PluginError;

/// STS's query API version.
pub const STS_VERSION: &str = "2011-06-15";
/// The instance metadata service of an EC2 instance.
pub const DEFAULT_IMDS: &str = "http://169.254.169.254";
/// The `RoleSessionName` of `AssumeRole` when field `role_session_name` is empty.
pub const DEFAULT_SESSION_NAME: &str = "weft";
/// Temporary credentials are fetched again once less than this is left of their lifetime (the
/// metadata service offers new ones at least five minutes before the old ones expire).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// How long one request to the metadata service may take (it answers in milliseconds).
const IMDS_TIMEOUT: Duration = Duration::from_secs(5);
/// The lifetime asked for a metadata session token (it is used at once).
const IMDS_TOKEN_TTL: &str = "300";
const IMDS_TOKEN_PATH: &str = "/latest/api/token";
const IMDS_ROLES_PATH: &str = "/latest/meta-data/iam/security-credentials/";

/// Where the base credentials come from (field `credential_source`); `Debug` hides the secrets
/// as [`Credentials`]' own does.
#[derive(Clone, Debug)]
pub enum CredentialSource {
    /// Keys from the provider's fields (`keys`, the default).
    Keys(Credentials),
    /// The provisioner host's instance profile (`instance_profile`), from the metadata service
    /// at this base URL.
    InstanceProfile(String),
}

/// A role the base credentials assume (field `role_arn` and its companions).
#[derive(Clone)]
pub struct Role {
    /// The role's ARN (`arn:aws:iam::<account>:role/<name>`).
    pub arn: String,
    /// The external id the role's trust policy asks for (`sts:ExternalId`); secret.
    pub external_id: Option<String>,
    /// The `RoleSessionName`, shown in the account's CloudTrail.
    pub session_name: String,
    /// The STS endpoint.
    pub sts_endpoint: String,
    /// The region STS requests are signed for.
    pub region: String,
}

impl std::fmt::Debug for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Role")
            .field("arn", &self.arn)
            .field(
                "external_id",
                &self.external_id.as_ref().map(|_| "<hidden>"),
            )
            .field("session_name", &self.session_name)
            .field("sts_endpoint", &self.sts_endpoint)
            .finish()
    }
}

/// The credentials a provider's fields ask for: a base source and maybe a role to assume.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The base credentials.
    pub source: CredentialSource,
    /// The role assumed with them, if any.
    pub role: Option<Role>,
}

impl Plan {
    /// The plan of provider fields `f` in `region` (see the module's doc); a wrong or missing
    /// field is a fatal error naming it (never its value when it is secret).
    pub fn from_fields(f: &Map<String, Value>, region: &str) -> Result<Plan, PluginError> {
        let role = field(f, "role_arn").map(|arn| role(f, arn, region));
        let role = role.transpose()?;
        Ok(Plan {
            source: source(f)?,
            role,
        })
    }

    /// Who signs EC2's calls, as the account's request budget is keyed: the role, the access key
    /// id or the instance profile (never a secret).
    pub fn principal(&self) -> String {
        match (&self.role, &self.source) {
            (Some(r), _) => r.arn.clone(),
            (None, CredentialSource::Keys(c)) => c.access_key_id.clone(),
            (None, CredentialSource::InstanceProfile(u)) => format!("instance-profile {u}"),
        }
    }
}

/// The base credentials of fields `f` (field `credential_source`).
fn source(f: &Map<String, Value>) -> Result<CredentialSource, PluginError> {
    let keys_given = field(f, "access_key_id").is_some() || field(f, "secret_access_key").is_some();
    let wrong = |why: &str| PluginError::fatal(format!("provider field credential_source {why}"));
    match field(f, "credential_source").as_deref() {
        None | Some("keys") => Ok(CredentialSource::Keys(keys(f)?)),
        Some("instance_profile") if keys_given => Err(wrong(
            "is instance_profile: leave access_key_id and secret_access_key empty",
        )),
        Some("instance_profile") => {
            let imds = field(f, "imds_endpoint").unwrap_or_else(|| DEFAULT_IMDS.into());
            let url = http_url("imds_endpoint", &imds)?;
            Ok(CredentialSource::InstanceProfile(url))
        }
        Some(other) => Err(wrong(&format!(
            "{other:?} is neither keys nor instance_profile"
        ))),
    }
}

fn keys(f: &Map<String, Value>) -> Result<Credentials, PluginError> {
    let need = |name: &str| {
        field(f, name).ok_or_else(|| {
            PluginError::fatal(format!(
                "provider field {name} is missing (or set credential_source to \
                 instance_profile to use the provisioner host's instance profile)"
            ))
        })
    };
    Ok(Credentials {
        access_key_id: need("access_key_id")?,
        secret_access_key: need("secret_access_key")?,
        session_token: field(f, "session_token"),
    })
}

fn role(f: &Map<String, Value>, arn: String, region: &str) -> Result<Role, PluginError> {
    if !arn.starts_with("arn:") || !arn.contains(":role/") {
        return Err(PluginError::fatal(format!(
            "provider field role_arn {arn:?} is not a role ARN (arn:aws:iam::<account>:role/<name>)"
        )));
    }
    let session_name = field(f, "role_session_name").unwrap_or_else(|| DEFAULT_SESSION_NAME.into());
    if !(2..=64).contains(&session_name.len()) || !session_name.chars().all(session_char) {
        return Err(PluginError::fatal(format!(
            "provider field role_session_name {session_name:?} is not 2 to 64 of A-Z a-z 0-9 +=,.@_-"
        )));
    }
    let sts = field(f, "sts_endpoint")
        .or_else(|| field(f, "endpoint"))
        .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com/"));
    Ok(Role {
        arn,
        external_id: field(f, "external_id"),
        session_name,
        sts_endpoint: http_url("sts_endpoint", &sts)?,
        region: region.to_string(),
    })
}

/// Whether `c` may be in a role's or a role session's name.
fn session_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "+=,.@_-".contains(c)
}

/// `url` when it is an `http(s)://` URL with a host, else a fatal error naming field `name`.
fn http_url(name: &str, url: &str) -> Result<String, PluginError> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            Ok(url.to_string())
        }
        _ => Err(PluginError::fatal(format!(
            "provider field {name} {url:?} is not an http:// or https:// URL with a host"
        ))),
    }
}

/// Temporary credentials and when they expire.
#[derive(Clone, Debug)]
struct Temporary {
    creds: Credentials,
    expires: SystemTime,
}

impl Temporary {
    /// The credentials of an answer's access key id, secret, session token and expiry (each
    /// with its name in the answer, for the error when it is missing).
    fn read([id, secret, token, expiry]: [(&str, String); 4]) -> Result<Temporary, String> {
        let parts = [&id, &secret, &token, &expiry];
        if let Some((name, _)) = parts.into_iter().find(|(_, v)| v.trim().is_empty()) {
            return Err(format!("the answer has no {name}"));
        }
        let expires = parse_utc(&expiry.1)
            .ok_or_else(|| format!("Expiration {:?} is not a UTC time", expiry.1))?;
        let (access_key_id, secret_access_key) = (id.1, secret.1);
        let session_token = Some(token.1);
        let creds = Credentials {
            access_key_id,
            secret_access_key,
            session_token,
        };
        Ok(Temporary { creds, expires })
    }

    /// Whether they may still be handed out at `now` without fetching new ones.
    fn fresh_at(&self, now: SystemTime) -> bool {
        now + REFRESH_MARGIN < self.expires
    }

    /// Whether they may still be used at all at `now`.
    fn usable_at(&self, now: SystemTime) -> bool {
        now < self.expires
    }
}

/// What signs a client's calls: fixed keys, or temporary credentials kept fresh.
#[derive(Clone, Debug)]
pub enum Signer {
    /// Keys used as they are.
    Fixed(Credentials),
    /// Temporary credentials, fetched when needed and shared through a [`Cache`].
    Refreshed(Arc<Refresher>),
}

impl From<Credentials> for Signer {
    fn from(c: Credentials) -> Signer {
        Signer::Fixed(c)
    }
}

impl Signer {
    /// The credentials to sign with now (fetched when there are none fresh).
    pub async fn credentials(&self) -> Result<Credentials, CloudError> {
        match self {
            Signer::Fixed(c) => Ok(c.clone()),
            Signer::Refreshed(r) => r.current().await,
        }
    }

    /// The cloud said `used` expired: they are dropped (unless newer ones replaced them since).
    /// Answers whether another try can sign with other credentials.
    pub async fn expired(&self, used: &Credentials) -> bool {
        match self {
            Signer::Fixed(_) => false,
            Signer::Refreshed(r) => {
                r.forget(used).await;
                true
            }
        }
    }
}

/// Temporary credentials of one source, fetched again when they near their expiry.
pub struct Refresher {
    fetch: Fetch,
    slot: tokio::sync::Mutex<Option<Temporary>>,
}

impl std::fmt::Debug for Refresher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Refresher({})", self.fetch)
    }
}

impl Refresher {
    async fn current(&self) -> Result<Credentials, CloudError> {
        let mut slot = self.slot.lock().await;
        if let Some(t) = slot.as_ref().filter(|t| t.fresh_at(SystemTime::now())) {
            return Ok(t.creds.clone());
        }
        *slot = None;
        let t = self.fetch.fetch().await?;
        if !t.usable_at(SystemTime::now()) {
            let m = format!(
                "{}: the credentials answered have already expired (is the provisioner host's \
                 clock right?)",
                self.fetch
            );
            let code = "ExpiredCredentials";
            return Err(CloudError::from_status(
                self.fetch.cloud(),
                401,
                code,
                m,
                None,
            ));
        }
        let left = t
            .expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        tracing::info!(source = %self.fetch, valid_for_secs = left.as_secs(), "aws credentials fetched");
        let creds = t.creds.clone();
        *slot = Some(t);
        Ok(creds)
    }

    async fn forget(&self, used: &Credentials) {
        let mut slot = self.slot.lock().await;
        let same = |t: &Temporary| {
            t.creds.access_key_id == used.access_key_id
                && t.creds.session_token == used.session_token
        };
        if slot.as_ref().is_some_and(same) {
            tracing::info!(source = %self.fetch, "aws credentials refused as expired; dropped");
            *slot = None;
        }
    }
}

/// How one source's temporary credentials are fetched.
enum Fetch {
    /// From the metadata service at this base URL.
    Imds { http: reqwest::Client, base: String },
    /// From STS's `AssumeRole`, signed by the client's signer.
    AssumeRole { sts: Box<QueryClient>, role: Role },
}

impl std::fmt::Display for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fetch::Imds { base, .. } => write!(f, "instance profile via {base}"),
            Fetch::AssumeRole { role, .. } => write!(f, "role {}", role.arn),
        }
    }
}

type Fetched<'a> = Pin<Box<dyn Future<Output = Result<Temporary, CloudError>> + Send + 'a>>;

impl Fetch {
    fn cloud(&self) -> &'static str {
        match self {
            Fetch::Imds { .. } => "imds",
            Fetch::AssumeRole { .. } => "sts",
        }
    }

    /// Boxed: an `AssumeRole` signed with temporary credentials calls back into a refresher.
    fn fetch(&self) -> Fetched<'_> {
        match self {
            Fetch::Imds { http, base } => Box::pin(from_imds(http, base)),
            Fetch::AssumeRole { sts, role } => Box::pin(assume_role(sts, role)),
        }
    }
}

/// The temporary credentials of `role`, from STS; a refusal is fatal with reason `auth`.
async fn assume_role(sts: &QueryClient, role: &Role) -> Result<Temporary, CloudError> {
    let p = |k: &str, v: &str| (k.to_string(), v.to_string());
    let mut params = vec![
        p("RoleArn", &role.arn),
        p("RoleSessionName", &role.session_name),
    ];
    if let Some(id) = &role.external_id {
        params.push(p("ExternalId", id));
    }
    let answer = sts.call("AssumeRole", &params).await.map_err(|e| {
        let message = format!("role {}: {}", role.arn, e.message);
        match e.code == "AccessDenied" || e.status == 401 || e.status == 403 {
            true => CloudError { message, ..e }
                .retryable(false)
                .because(FailureReason::Auth),
            false => CloudError { message, ..e },
        }
    })?;
    parse_assume_role(&answer).map_err(|m| malformed("sts", format!("AssumeRole: {m}")))
}

/// The credentials of an `AssumeRole` answer (`AssumeRoleResult/Credentials`).
fn parse_assume_role(doc: &Element) -> Result<Temporary, String> {
    let c = doc
        .child("AssumeRoleResult")
        .and_then(|r| r.child("Credentials"))
        .ok_or("the answer has no AssumeRoleResult/Credentials")?;
    let text = |name| (name, c.text_at(&[name]).unwrap_or_default().to_string());
    Temporary::read(
        [
            "AccessKeyId",
            "SecretAccessKey",
            "SessionToken",
            "Expiration",
        ]
        .map(text),
    )
}

/// The instance profile's credentials, through an IMDSv2 session.
async fn from_imds(http: &reqwest::Client, base: &str) -> Result<Temporary, CloudError> {
    let base = base.trim_end_matches('/');
    let token = http
        .put(format!("{base}{IMDS_TOKEN_PATH}"))
        .header("x-aws-ec2-metadata-token-ttl-seconds", IMDS_TOKEN_TTL);
    let token = imds_call(token, base, IMDS_TOKEN_PATH).await?;
    let get = |path: &str| {
        http.get(format!("{base}{path}"))
            .header("x-aws-ec2-metadata-token", token.trim())
    };
    let roles = imds_call(get(IMDS_ROLES_PATH), base, IMDS_ROLES_PATH)
        .await
        .map_err(|e| match e.status {
            404 => CloudError {
                message: format!(
                    "{}: no IAM role is attached to this instance (it needs an instance profile)",
                    e.message
                ),
                ..e
            }
            .because(FailureReason::Auth),
            _ => e,
        })?;
    let role = roles.lines().map(str::trim).find(|l| !l.is_empty());
    let role = role.unwrap_or_default();
    if role.is_empty() || !role.chars().all(session_char) {
        let m = format!("{base}{IMDS_ROLES_PATH}: {role:?} is not a role name");
        return Err(malformed("imds", m));
    }
    let path = format!("{IMDS_ROLES_PATH}{role}");
    let doc = imds_call(get(&path), base, &path).await?;
    parse_imds(&doc).map_err(|m| malformed("imds", format!("{base}{path}: {m}")))
}

/// One request to the metadata service; its body when it succeeds.
async fn imds_call(
    req: reqwest::RequestBuilder,
    base: &str,
    path: &str,
) -> Result<String, CloudError> {
    let what = format!("{base}{path}");
    let a = http::send("imds", None, req.timeout(IMDS_TIMEOUT))
        .await
        .map_err(|e| CloudError {
            message: format!(
                "cannot reach the instance metadata service at {what} (credential_source \
                 instance_profile needs the provisioner on an EC2 instance; in a container, a \
                 metadata hop limit of 2): {}",
                e.message
            ),
            ..e
        })?;
    let why = match a.status {
        _ if a.is_success() => return Ok(a.text),
        401 => "the metadata service refused the session token",
        403 => "the metadata service is turned off or refuses the request",
        404 => "not found",
        _ => "refused",
    };
    let code = format!("HTTP{}", a.status);
    Err(CloudError::from_status(
        "imds",
        a.status,
        code,
        format!("{what}: {why}"),
        None,
    ))
}

/// The metadata service's answer for a role's credentials (other keys are ignored).
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ImdsCredentials {
    code: String,
    access_key_id: String,
    secret_access_key: String,
    token: String,
    expiration: String,
}

/// The credentials of the metadata service's JSON answer (`Code` `Success`).
fn parse_imds(text: &str) -> Result<Temporary, String> {
    // serde's message may quote a value: only where the error is goes out.
    let a: ImdsCredentials = serde_json::from_str(text).map_err(|e| {
        format!(
            "the answer is not the documented JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    if a.code != "Success" {
        return Err(format!("the answer's Code is {:?}, not Success", a.code));
    }
    Temporary::read([
        ("AccessKeyId", a.access_key_id),
        ("SecretAccessKey", a.secret_access_key),
        ("Token", a.token),
        ("Expiration", a.expiration),
    ])
}

/// An RFC 3339 time as AWS writes it (`2026-11-29T17:04:05Z`), as a time.
fn parse_utc(s: &str) -> Option<SystemTime> {
    let secs = crate::cloud::time::unix_seconds(s)?;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// The temporary credentials of a provider, one [`Refresher`] per source and role, shared by
/// every worker (clones share the entries).
#[derive(Debug, Default, Clone)]
pub struct Cache {
    map: Arc<Mutex<HashMap<String, Arc<Refresher>>>>,
}

impl Cache {
    /// The signer of `plan`: its keys as they are, or a shared refresher of its temporary
    /// credentials. STS calls take their tokens from `bucket`, the account's request budget, so
    /// that an AssumeRole throttled or sent among many EC2 calls keeps to the budget too.
    pub fn signer(
        &self,
        http: &reqwest::Client,
        plan: &Plan,
        bucket: Arc<crate::throttle::Bucket>,
    ) -> Result<Signer, String> {
        let (base, base_id) = match &plan.source {
            CredentialSource::Keys(c) => {
                let token = c.session_token.as_deref().unwrap_or("");
                let key = entry_key(&["keys", &c.access_key_id, &c.secret_access_key, token]);
                (Signer::Fixed(c.clone()), key)
            }
            CredentialSource::InstanceProfile(base) => {
                let (http, base) = (http.clone(), base.clone());
                let key = entry_key(&["imds", &base]);
                (self.shared(&key, || Fetch::Imds { http, base }), key)
            }
        };
        let Some(role) = &plan.role else {
            return Ok(base);
        };
        let id = role.external_id.as_deref().unwrap_or("");
        let (arn, session, sts) = (&role.arn, &role.session_name, &role.sts_endpoint);
        let key = entry_key(&["role", &base_id, arn, id, session, sts, &role.region]);
        let sts = QueryClient::new(http.clone(), sts, &role.region, "sts", STS_VERSION, base)?;
        let sts = Box::new(sts.with_bucket(bucket));
        Ok(self.shared(&key, || Fetch::AssumeRole {
            sts,
            role: role.clone(),
        }))
    }

    fn shared(&self, key: &str, fetch: impl FnOnce() -> Fetch) -> Signer {
        let mut map = self.map.lock().expect("credentials cache lock");
        let r = map.entry(key.to_string()).or_insert_with(|| {
            Arc::new(Refresher {
                fetch: fetch(),
                slot: tokio::sync::Mutex::new(None),
            })
        });
        Signer::Refreshed(Arc::clone(r))
    }
}

/// A cache key of `parts`: a hash, so that no secret is kept in clear as a key.
fn entry_key(parts: &[&str]) -> String {
    hex::encode(super::digest(b"", parts.iter().map(|p| p.as_bytes())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::aws::sigv4::amz_date;
    use crate::aws::xml;

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn times_are_read_as_aws_writes_them() {
        for (rfc, amz) in [
            ("2026-11-29T17:04:05Z", "20261129T170405Z"),
            ("2024-02-29T23:59:59.999Z", "20240229T235959Z"),
            ("2026-11-29T19:04:05+02:00", "20261129T170405Z"),
            ("2000-03-01T00:00:00-01:30", "20000301T013000Z"),
            ("1970-01-01T00:00:00Z", "19700101T000000Z"),
        ] {
            assert_eq!(parse_utc(rfc).map(amz_date).as_deref(), Some(amz), "{rfc}");
        }
        for bad in ["", "2026-11-29", "2026-11-29T24:00:00Z", "soon"] {
            assert_eq!(parse_utc(bad), None, "{bad:?}");
        }
        // Every day of four years, through amz_date and back.
        for day in 0..(4 * 366) {
            let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + day * 86_400 + 3_723);
            let mut rfc = amz_date(t);
            for (at, c) in [(13, ':'), (11, ':'), (6, '-'), (4, '-')] {
                rfc.insert(at, c);
            }
            assert_eq!(parse_utc(&rfc), Some(t), "{rfc}");
        }
    }

    #[test]
    fn an_assume_role_answer_is_read() {
        let doc = r#"<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <SourceIdentity>weft</SourceIdentity>
    <AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/weft/weft</Arn>
      <AssumedRoleId>ARO123EXAMPLE123:weft</AssumedRoleId></AssumedRoleUser>
    <Credentials>
      <SessionToken>session-secret</SessionToken>
      <SecretAccessKey>very-secret</SecretAccessKey>
      <Expiration>2026-11-29T18:04:05Z</Expiration>
      <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
    </Credentials>
    <PackedPolicySize>6</PackedPolicySize>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</AssumeRoleResponse>"#;
        let t = parse_assume_role(&xml::parse(doc).unwrap()).unwrap();
        assert_eq!(t.creds.access_key_id, "ASIAEXAMPLE");
        assert_eq!(t.creds.secret_access_key, "very-secret");
        assert_eq!(t.creds.session_token.as_deref(), Some("session-secret"));
        assert_eq!(amz_date(t.expires), "20261129T180405Z");
        let no_token = doc.replace("<SessionToken>session-secret</SessionToken>", "");
        let e = parse_assume_role(&xml::parse(&no_token).unwrap()).unwrap_err();
        assert!(
            e.contains("SessionToken") && !e.contains("very-secret"),
            "{e}"
        );
        let other = xml::parse("<GetCallerIdentityResponse/>").unwrap();
        assert!(parse_assume_role(&other).is_err());
    }

    #[test]
    fn an_instance_profile_answer_is_read() {
        let doc = json!({"Code": "Success", "LastUpdated": "2026-11-29T16:00:00Z",
            "Type": "AWS-HMAC", "AccessKeyId": "ASIAIMDS", "SecretAccessKey": "very-secret",
            "Token": "session-secret", "Expiration": "2026-11-29T22:00:00Z"});
        let t = parse_imds(&doc.to_string()).unwrap();
        assert_eq!(t.creds.access_key_id, "ASIAIMDS");
        assert_eq!(t.creds.session_token.as_deref(), Some("session-secret"));
        assert_eq!(amz_date(t.expires), "20261129T220000Z");
        let mut failed = doc.clone();
        failed["Code"] = json!("AssumeRoleUnauthorizedAccess");
        let e = parse_imds(&failed.to_string()).unwrap_err();
        assert!(e.contains("AssumeRoleUnauthorizedAccess"), "{e}");
        let mut wrong = doc.clone();
        wrong["SecretAccessKey"] = json!(["very-secret"]);
        let e = parse_imds(&wrong.to_string()).unwrap_err();
        assert!(!e.contains("very-secret"), "{e}");
        let mut bare = doc;
        bare.as_object_mut().unwrap().remove("Token");
        let e = parse_imds(&bare.to_string()).unwrap_err();
        assert!(e.contains("Token"), "{e}");
        assert!(parse_imds("<html>").is_err());
    }

    #[test]
    fn credentials_are_fetched_again_before_they_expire_and_never_used_after() {
        let now = SystemTime::now();
        let t = |left: u64| Temporary {
            creds: Credentials {
                access_key_id: "ASIA".into(),
                secret_access_key: "s".into(),
                session_token: Some("t".into()),
            },
            expires: now + Duration::from_secs(left),
        };
        assert!(t(3600).fresh_at(now));
        assert!(!t(3600).fresh_at(now + Duration::from_secs(3600 - 299)));
        assert!(!t(120).fresh_at(now) && t(120).usable_at(now));
        assert!(!t(120).usable_at(now + Duration::from_secs(120)));
    }

    #[test]
    fn plans_follow_the_fields_and_hide_secrets() {
        let keys = json!({"access_key_id": "AKID", "secret_access_key": "very-secret"});
        let p = Plan::from_fields(&fields(keys.clone()), "eu-west-1").unwrap();
        assert!(matches!(p.source, CredentialSource::Keys(_)) && p.role.is_none());
        assert_eq!(p.principal(), "AKID");

        let mut role = keys.clone();
        role["role_arn"] = json!("arn:aws:iam::123456789012:role/weft");
        role["external_id"] = json!("external-secret");
        let p = Plan::from_fields(&fields(role.clone()), "eu-west-1").unwrap();
        let r = p.role.as_ref().unwrap();
        assert_eq!(r.sts_endpoint, "https://sts.eu-west-1.amazonaws.com/");
        assert_eq!(r.session_name, "weft");
        assert_eq!(p.principal(), "arn:aws:iam::123456789012:role/weft");
        let shown = format!("{p:?}");
        assert!(
            !shown.contains("external-secret") && !shown.contains("very-secret"),
            "{shown}"
        );
        role["endpoint"] = json!("http://127.0.0.1:5000/");
        let p = Plan::from_fields(&fields(role.clone()), "eu-west-1").unwrap();
        assert_eq!(p.role.unwrap().sts_endpoint, "http://127.0.0.1:5000/");
        role["sts_endpoint"] = json!("http://127.0.0.1:5001/");
        let p = Plan::from_fields(&fields(role.clone()), "eu-west-1").unwrap();
        assert_eq!(p.role.unwrap().sts_endpoint, "http://127.0.0.1:5001/");

        let p = Plan::from_fields(
            &fields(json!({"credential_source": "instance_profile"})),
            "r",
        )
        .unwrap();
        assert!(matches!(&p.source, CredentialSource::InstanceProfile(u) if u == DEFAULT_IMDS));
        for (bad, says) in [
            (json!({}), "access_key_id is missing"),
            (
                json!({"access_key_id": "AKID"}),
                "secret_access_key is missing",
            ),
            (
                json!({"credential_source": "instance_profile", "access_key_id": "A"}),
                "leave",
            ),
            (json!({"credential_source": "environment"}), "neither"),
            (
                json!({"credential_source": "instance_profile", "imds_endpoint": "169.254.169.254"}),
                "imds_endpoint",
            ),
            (
                json!({"access_key_id": "A", "secret_access_key": "very-secret", "role_arn": "weft"}),
                "role_arn",
            ),
            (
                json!({"access_key_id": "A", "secret_access_key": "very-secret",
                    "role_arn": "arn:aws:iam::1:role/w", "role_session_name": "a b"}),
                "role_session_name",
            ),
        ] {
            let e = Plan::from_fields(&fields(bad), "r").err().unwrap();
            assert!(
                e.message.contains(says) && !e.message.contains("very-secret"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_cache_shares_one_refresher_per_source_and_role() {
        let http = reqwest::Client::new();
        let cache = Cache::default();
        let bucket = || Arc::new(crate::throttle::Bucket::new(10.0, 20.0));
        let plan = |v: Value| Plan::from_fields(&fields(v), "us-east-1").unwrap();
        let role = json!({"access_key_id": "AKID", "secret_access_key": "very-secret",
            "role_arn": "arn:aws:iam::123456789012:role/weft", "external_id": "external-secret"});
        let a = cache.signer(&http, &plan(role.clone()), bucket()).unwrap();
        let b = cache.signer(&http, &plan(role.clone()), bucket()).unwrap();
        let (Signer::Refreshed(a), Signer::Refreshed(b)) = (&a, &b) else {
            panic!("a role is refreshed: {a:?}");
        };
        assert!(Arc::ptr_eq(a, b));
        let mut other = role.clone();
        other["secret_access_key"] = json!("rotated");
        let Signer::Refreshed(c) = cache.signer(&http, &plan(other), bucket()).unwrap() else {
            panic!("a role is refreshed");
        };
        assert!(!Arc::ptr_eq(a, &c), "new base keys assume the role again");
        let shown = format!("{a:?}");
        assert!(!shown.contains("secret"), "{shown}");
        let fixed = cache
            .signer(
                &http,
                &plan(json!({"access_key_id": "AKID", "secret_access_key": "very-secret"})),
                bucket(),
            )
            .unwrap();
        assert!(matches!(fixed, Signer::Fixed(_)));
        assert!(!format!("{fixed:?}").contains("very-secret"));
    }
}
