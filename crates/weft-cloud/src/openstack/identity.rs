//! Identity: how a token and its service catalog are obtained, and how the compute endpoint is
//! chosen from the catalog.
//!
//! - Keystone v3 (`POST {auth_url}/v3/auth/tokens`): a password (user and project by id, or by
//!   name within a domain) or an application credential (by id, or by name with its user). The
//!   token is the `X-Subject-Token` header; the catalog is `token.catalog`, each endpoint with an
//!   `interface` and a `region_id`.
//! - Rackspace Identity v2.0 (`POST {auth_url}/v2.0/tokens` with `RAX-KSKEY:apiKeyCredentials`):
//!   the token is `access.token.id`; the catalog is `access.serviceCatalog`, each endpoint with a
//!   `region` and a `publicURL` / `internalURL`.
//!
//! A token's lifetime is read from the answer (expiry minus issue time when both are given, so a
//! skewed clock does not matter), and the session renews it ahead of time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::cloud::CloudError;

/// The default Rackspace Identity endpoint.
pub const RACKSPACE_IDENTITY: &str = "https://identity.api.rackspacecloud.com/v2.0";

/// A user, project or domain named by id or by name (a name is looked up within `domain`).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Ref {
    /// The id; when given, the name and domain are not sent.
    pub id: Option<String>,
    /// The name, looked up within the domain.
    pub name: Option<String>,
    /// The domain of a name: (id, name); Keystone's `default` domain when neither is given.
    pub domain_id: Option<String>,
    /// The domain of a name, by name; used when `domain_id` is not given.
    pub domain_name: Option<String>,
}

impl Ref {
    /// The JSON Keystone expects for this reference (`{"id"}` or `{"name", "domain"}`).
    fn to_json(&self) -> Value {
        if let Some(id) = &self.id {
            return json!({ "id": id });
        }
        let domain = match (&self.domain_id, &self.domain_name) {
            (Some(id), _) => json!({ "id": id }),
            (None, Some(name)) => json!({ "name": name }),
            (None, None) => json!({ "id": "default" }),
        };
        json!({ "name": self.name.clone().unwrap_or_default(), "domain": domain })
    }

    fn is_given(&self) -> bool {
        self.id.is_some() || self.name.is_some()
    }
}

/// How to get a token. Never printed: it holds secrets (no `Debug`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Credentials {
    /// Keystone v3 password, scoped to a project.
    Password {
        /// The user who logs in.
        user: Ref,
        /// The user's password.
        password: String,
        /// The project the token is scoped to.
        project: Ref,
    },
    /// Keystone v3 application credential (scoped by the credential itself).
    ApplicationCredential {
        /// The credential's id; with it, `name` and `user` are not needed.
        id: Option<String>,
        /// The credential's name, looked up among `user`'s credentials.
        name: Option<String>,
        /// The credential's owner; needed when it is named rather than given by id.
        user: Ref,
        /// The credential's secret.
        secret: String,
    },
    /// Rackspace Identity v2.0 API key.
    ApiKey {
        /// The Rackspace account's user name.
        username: String,
        /// The user's API key.
        api_key: String,
    },
}

impl Credentials {
    /// Checks that the credentials name what their kind needs; the error names the field.
    pub fn check(&self) -> Result<(), String> {
        let rules: Vec<(bool, &str)> = match self {
            Credentials::Password {
                user,
                password,
                project,
            } => vec![
                (
                    user.is_given(),
                    "user_name or user_id is required with a password",
                ),
                (!password.is_empty(), "password is empty"),
                (
                    project.is_given(),
                    "project_name or project_id is required with a password",
                ),
            ],
            Credentials::ApplicationCredential { id, name, user, .. } => vec![
                (
                    id.is_some() || name.is_some(),
                    "application_credential_id or application_credential_name is required \
                     with application_credential_secret",
                ),
                (
                    id.is_some() || user.is_given(),
                    "application_credential_name needs user_name or user_id",
                ),
            ],
            Credentials::ApiKey { username, api_key } => vec![
                (!username.is_empty(), "username is required"),
                (!api_key.is_empty(), "api_key is required"),
            ],
        };
        match rules.into_iter().find(|(ok, _)| !ok) {
            Some((_, broken)) => Err(broken.into()),
            None => Ok(()),
        }
    }

    /// The URL a token is asked for, from the admin's `auth_url` (with or without the version).
    pub fn token_url(&self, auth_url: &str) -> String {
        let base = auth_url.trim().trim_end_matches('/');
        match self {
            Credentials::ApiKey { .. } => {
                let base = Some(base)
                    .filter(|b| !b.is_empty())
                    .unwrap_or(RACKSPACE_IDENTITY);
                if base.ends_with("/v2.0") {
                    format!("{base}/tokens")
                } else {
                    format!("{base}/v2.0/tokens")
                }
            }
            _ if base.ends_with("/v3") => format!("{base}/auth/tokens"),
            _ => format!("{base}/v3/auth/tokens"),
        }
    }

    /// The request body that asks for a token.
    pub fn body(&self) -> Value {
        match self {
            Credentials::Password {
                user,
                password,
                project,
            } => {
                let mut u = user.to_json();
                u["password"] = json!(password);
                json!({"auth": {
                    "identity": {"methods": ["password"], "password": {"user": u}},
                    "scope": {"project": project.to_json()}
                }})
            }
            Credentials::ApplicationCredential {
                id,
                name,
                user,
                secret,
            } => {
                let mut c = match (id, name) {
                    (Some(id), _) => json!({ "id": id }),
                    (None, name) => json!({ "name": name, "user": user.to_json() }),
                };
                c["secret"] = json!(secret);
                json!({"auth": {"identity": {
                    "methods": ["application_credential"],
                    "application_credential": c
                }}})
            }
            Credentials::ApiKey { username, api_key } => json!({"auth": {
                "RAX-KSKEY:apiKeyCredentials": {"username": username, "apiKey": api_key}
            }}),
        }
    }

    /// Which API answers for these credentials (for error messages).
    pub fn api(&self) -> &'static str {
        match self {
            Credentials::ApiKey { .. } => "rackspace identity",
            _ => "keystone",
        }
    }
}

/// One endpoint of a catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The type of its service (`type` in the catalog), e.g. `compute`, `identity`.
    pub kind: String,
    /// `public`, `internal` or `admin`.
    pub interface: String,
    /// The region, empty when the catalog names none.
    pub region: String,
    /// The endpoint's base URL.
    pub url: String,
}

/// A token and what came with it.
pub struct Token {
    /// The token itself, sent as `X-Auth-Token`.
    pub id: String,
    /// How long it is valid from now, when the answer says.
    pub lifetime: Option<Duration>,
    /// The service catalog that came with the token: where each service is.
    pub catalog: Vec<Endpoint>,
}

/// A service of either catalog as answered (absent and null fields read as empty).
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawService {
    #[serde(rename = "type")]
    kind: Option<String>,
    endpoints: Vec<RawEndpoint>,
}

/// An endpoint as Keystone (`interface`, `region_id`, `url`) or Rackspace (`region`,
/// `publicURL`, `internalURL`) answers it.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawEndpoint {
    interface: Option<String>,
    region_id: Option<String>,
    region: Option<String>,
    url: Option<String>,
    #[serde(rename = "publicURL")]
    public_url: Option<String>,
    #[serde(rename = "internalURL")]
    internal_url: Option<String>,
}

/// The token part of either answer (`token` of Keystone's, `access.token` of Rackspace's).
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawToken {
    id: Option<String>,
    catalog: Vec<RawService>,
    expires_at: Option<String>,
    issued_at: Option<String>,
    expires: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawAccess {
    token: RawToken,
    service_catalog: Vec<RawService>,
}

/// `body` at `key` as `T` (an absent key is an error naming it).
fn part<T: serde::de::DeserializeOwned>(body: &Value, key: &str, api: &str) -> Result<T, String> {
    let v = body
        .get(key)
        .ok_or_else(|| format!("{api} answered without {key}"))?;
    serde_json::from_value(v.clone())
        .map_err(|e| format!("{api} answered an unreadable {key}: {e}"))
}

/// The endpoints of a catalog's services, each read by `read` (with its service's type).
fn catalog(
    raw: Vec<RawService>,
    read: impl Fn(&str, RawEndpoint) -> Vec<Endpoint>,
) -> Vec<Endpoint> {
    let mut all = Vec::new();
    for s in raw {
        let kind = s.kind.unwrap_or_default();
        all.extend(s.endpoints.into_iter().flat_map(|e| read(&kind, e)));
    }
    all
}

/// Reads a Keystone v3 token answer (`X-Subject-Token` and the body).
pub fn keystone_token(subject: Option<&str>, body: &Value) -> Result<Token, String> {
    let id = subject
        .filter(|s| !s.is_empty())
        .ok_or("keystone answered without an X-Subject-Token header")?;
    let token: RawToken = part(body, "token", "keystone")?;
    let unix = |t: Option<String>| crate::cloud::time::unix_seconds(&t.unwrap_or_default());
    Ok(Token {
        id: id.to_string(),
        lifetime: lifetime(unix(token.expires_at), unix(token.issued_at)),
        catalog: catalog(token.catalog, |kind, e| {
            vec![Endpoint {
                kind: kind.to_string(),
                interface: e.interface.unwrap_or_default(),
                region: e
                    .region_id
                    .filter(|r| !r.is_empty())
                    .or(e.region)
                    .unwrap_or_default(),
                url: e.url.unwrap_or_default(),
            }]
        }),
    })
}

/// Reads a Rackspace Identity v2.0 token answer.
pub fn rackspace_token(body: &Value) -> Result<Token, String> {
    let access: RawAccess = part(body, "access", "rackspace identity")?;
    let id = access.token.id.filter(|i| !i.is_empty());
    let id = id.ok_or("rackspace identity answered without access.token.id")?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .ok();
    let expires = access.token.expires.unwrap_or_default();
    Ok(Token {
        id,
        lifetime: lifetime(crate::cloud::time::unix_seconds(&expires), now),
        catalog: catalog(access.service_catalog, |kind, e| {
            let region = e.region.unwrap_or_default();
            [("public", e.public_url), ("internal", e.internal_url)]
                .into_iter()
                .filter_map(|(interface, url)| {
                    Some(Endpoint {
                        kind: kind.to_string(),
                        interface: interface.to_string(),
                        region: region.clone(),
                        url: url.filter(|u| !u.is_empty())?,
                    })
                })
                .collect()
        }),
    })
}

fn lifetime(expires: Option<i64>, from: Option<i64>) -> Option<Duration> {
    let (e, f) = (expires?, from?);
    Some(Duration::from_secs(e.saturating_sub(f).max(0) as u64))
}

/// The URL of the `kind` service's endpoint with `interface` in `region` (any region when `None`,
/// as long as only one has such an endpoint).
pub fn choose_endpoint(
    catalog: &[Endpoint],
    kind: &str,
    interface: &str,
    region: Option<&str>,
) -> Result<String, String> {
    let candidates: Vec<&Endpoint> = catalog
        .iter()
        .filter(|e| e.kind == kind && e.interface == interface)
        .collect();
    let regions = |eps: &[&Endpoint]| {
        let mut r: Vec<&str> = eps.iter().map(|e| e.region.as_str()).collect();
        r.sort();
        r.dedup();
        r.join(", ")
    };
    if candidates.is_empty() {
        return Err(format!(
            "the catalog has no {kind} endpoint with interface {interface}"
        ));
    }
    let in_region = |e: &&&Endpoint| region.is_none_or(|r| e.region == r);
    let chosen: Vec<&Endpoint> = candidates.iter().filter(in_region).copied().collect();
    match (chosen.as_slice(), region) {
        ([], Some(r)) => Err(format!(
            "region {r}: the catalog has no {interface} {kind} endpoint there (regions: {})",
            regions(&candidates)
        )),
        ([one], _) => Ok(one.url.trim_end_matches('/').to_string()),
        (many, None) if regions(many).contains(", ") => Err(format!(
            "region is required: the catalog has {interface} {kind} endpoints in {}",
            regions(many)
        )),
        (many, _) => Ok(many[0].url.trim_end_matches('/').to_string()),
    }
}

/// The code and message of an error body: Nova's `{"itemNotFound": {"code", "message"}}`,
/// Keystone's `{"error": {"code", "title", "message"}}`, or a text body.
pub fn error_parts(body: &Value) -> (Option<String>, String) {
    match body {
        Value::Object(m) if m.len() == 1 => {
            let (kind, inner) = m.iter().next().expect("one entry");
            let message = inner
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| inner.to_string());
            let code = if kind == "error" {
                inner
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            } else {
                Some(kind.clone())
            };
            (code, message)
        }
        Value::String(s) => (None, s.chars().take(500).collect()),
        other => (None, other.to_string().chars().take(500).collect()),
    }
}

/// A failed call of `api` as a [`CloudError`] with the code and message of its error body
/// ([`error_parts`]; the status when the body names no code).
pub fn answer_error(
    api: &'static str,
    status: u16,
    body: &Value,
    retry_after: Option<Duration>,
) -> CloudError {
    let (code, message) = error_parts(body);
    let code = code.unwrap_or(status.to_string());
    CloudError::from_status(api, status, code, message, retry_after)
}
