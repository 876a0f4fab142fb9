//! A small Triton CloudAPI client: list machines (by name, all of them page by page), create,
//! get and delete a machine, find an image by name, and add, read and delete an SSH key of the
//! account (or of the sub-user weft signs as), each request signed with the account's key
//! ([`super::sign`]); answers are typed. Errors become [`CloudError`]s with CloudAPI's own `code`
//! and `message`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

use super::sign::AccountKey;
use crate::cloud::http::{send, Answer};
use crate::cloud::CloudError;
use crate::throttle::Bucket;

/// The API's name in errors.
pub const CLOUD: &str = "triton";
/// The CloudAPI version range weft speaks.
pub const API_VERSION: &str = "~9||~8";
/// How many machines one ListMachines page holds (CloudAPI's default and most).
pub const PAGE: usize = 1000;

/// One account of one CloudAPI endpoint.
pub struct Account {
    /// The HTTP client calls go through.
    pub http: reqwest::Client,
    /// The private key requests are signed with (HTTP Signature).
    pub key: AccountKey,
    /// The endpoint, without a trailing `/`.
    pub endpoint: String,
    /// The account's login name (the field `login`): every path is below `/<login>`.
    pub login: String,
    /// The sub-user weft signs as (the field `user`), if not the account itself.
    pub user: Option<String>,
    /// What names the key in `keyId` instead of its fingerprint (the field `key_id`).
    pub key_id: Option<String>,
    /// The account's request budget, shared by every worker of the provisioner.
    pub bucket: Arc<Bucket>,
}

/// A machine as CloudAPI answers it (the fields weft reads).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Its UUID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `provisioning`, `running`, `stopping`, `stopped`, `deleted`, `failed`...
    #[serde(default)]
    pub state: String,
    /// Its tags (values may be strings, numbers or booleans).
    #[serde(default)]
    pub tags: BTreeMap<String, Value>,
    /// Its addresses.
    #[serde(default)]
    pub ips: Vec<String>,
    /// The address CloudAPI calls primary.
    #[serde(default)]
    pub primary_ip: Option<String>,
    /// Its metadata (`root_authorized_keys` as CloudAPI wrote it).
    #[serde(default)]
    pub metadata: BTreeMap<String, Value>,
}

impl Machine {
    /// A tag's value as text.
    pub fn tag(&self, name: &str) -> Option<String> {
        match self.tags.get(name)? {
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }
}

/// An image as ListImages answers it.
#[derive(Debug, Clone, Deserialize)]
struct Image {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    published_at: String,
}

/// An SSH key as CreateKey, GetKey and ListKeys answer it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct SshKey {
    /// The key's name in the account; empty when the answer has none.
    #[serde(default)]
    pub name: String,
    /// The key's fingerprint, as CloudAPI shows it.
    pub fingerprint: String,
    /// The OpenSSH public key.
    #[serde(default)]
    pub key: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    code: Option<String>,
    message: Option<String>,
}

/// Reads a CloudAPI error answer (`{"code", "message"}`); 420 "Slow Down" and
/// `RequestThrottled` are throttling.
pub fn api_error(a: &Answer) -> CloudError {
    let body: ErrorBody = serde_json::from_str(&a.text).unwrap_or_default();
    let code = body.code.unwrap_or_else(|| a.status.to_string());
    let throttled = a.status == 420 || code == "RequestThrottled";
    let message = body.message.unwrap_or_else(|| "no message".into());
    let e = CloudError::from_status(CLOUD, a.status, code, message, a.retry_after);
    if throttled {
        e.retryable(true)
    } else {
        e
    }
}

impl Account {
    /// Sends one signed request (path below `/<login>`): a success, 404 and 410 are answers,
    /// the rest an error (throttling makes the whole account wait).
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Answer, CloudError> {
        let url = format!("{}/{}{}", self.endpoint, self.login, path);
        let date = httpdate::fmt_http_date(SystemTime::now());
        let (user, key_id) = (self.user.as_deref(), self.key_id.as_deref());
        let signed = self.key.authorization(&self.login, user, key_id, &date);
        let auth =
            signed.map_err(|e| CloudError::from_status(CLOUD, 401, "SigningFailed", e, None))?;
        let mut req = self
            .http
            .request(method, &url)
            .header("date", &date)
            .header("authorization", auth)
            .header("accept", "application/json")
            .header("accept-version", API_VERSION);
        if let Some(b) = body {
            req = req.json(b);
        }
        let a = send(CLOUD, Some(&self.bucket), req.query(query)).await?;
        if a.is_success() || a.status == 404 || a.status == 410 {
            return Ok(a);
        }
        let e = api_error(&a);
        if e.retryable && a.status < 500 {
            self.bucket.throttled();
        }
        Err(e)
    }

    /// A call whose answer must be a success, read as `T`.
    async fn read<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<T, CloudError> {
        let a = self.call(method, path, query, body).await?;
        if !a.is_success() {
            return Err(api_error(&a));
        }
        a.json(CLOUD)
    }

    /// The machines named `name` (not deleted ones).
    pub async fn machines_named(&self, name: &str) -> Result<Vec<Machine>, CloudError> {
        let list: Vec<Machine> = self
            .read(Method::GET, "/machines", &[("name", name)], None)
            .await?;
        Ok(list.into_iter().filter(|m| m.name == name).collect())
    }

    /// Every machine of the account that is not deleted, page by page.
    pub async fn all_machines(&self) -> Result<Vec<Machine>, CloudError> {
        let mut all = Vec::new();
        loop {
            let (offset, limit) = (all.len().to_string(), PAGE.to_string());
            let query = [("offset", offset.as_str()), ("limit", &limit)];
            let page: Vec<Machine> = self.read(Method::GET, "/machines", &query, None).await?;
            let full = page.len() >= PAGE;
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }

    /// The UUID of the newest active image named `name` (by `published_at`), if any.
    pub async fn image_named(&self, name: &str) -> Result<Option<String>, CloudError> {
        let query = [("name", name), ("state", "active")];
        let list: Vec<Image> = self.read(Method::GET, "/images", &query, None).await?;
        Ok(list
            .into_iter()
            .filter(|i| i.name == name)
            .max_by(|a, b| a.published_at.cmp(&b.published_at))
            .map(|i| i.id))
    }

    /// Creates a machine: `None` when the name is taken (409).
    pub async fn create_machine(&self, body: &Value) -> Result<Option<Machine>, CloudError> {
        match self.read(Method::POST, "/machines", &[], Some(body)).await {
            Err(e) if e.status == 409 => Ok(None),
            other => other.map(Some),
        }
    }

    /// `method` on `path`: `None` when there is no such thing (404, 410).
    async fn found(&self, method: Method, path: &str) -> Result<Option<Answer>, CloudError> {
        let a = self.call(method, path, &[], None).await?;
        Ok(Some(a).filter(|a| !matches!(a.status, 404 | 410)))
    }

    /// The machine `id`, or `None` when it does not exist or was deleted (404, 410).
    pub async fn get_machine(&self, id: &str) -> Result<Option<Machine>, CloudError> {
        let a = self.found(Method::GET, &format!("/machines/{id}")).await?;
        let m: Option<Machine> = a.map(|a| a.json(CLOUD)).transpose()?;
        Ok(m.filter(|m| m.state != "deleted"))
    }

    /// Deletes the machine `id`; answers false when it was already gone (404, 410).
    pub async fn delete_machine(&self, id: &str) -> Result<bool, CloudError> {
        let path = format!("/machines/{id}");
        Ok(self.found(Method::DELETE, &path).await?.is_some())
    }

    /// The keys path of whoever weft signs as: `/keys`, or `/users/<user>/keys` for a sub-user.
    fn keys_path(&self) -> String {
        match &self.user {
            Some(u) => format!("/users/{u}/keys"),
            None => "/keys".into(),
        }
    }

    /// Adds an OpenSSH public key under `name` (CreateKey or CreateUserKey). CloudAPI answers
    /// 409 `InvalidArgument` ("key already exists or is invalid") for a key it already holds, so
    /// `Err` with status 409 may mean either: [`Account::get_key`] tells them apart.
    pub async fn create_key(&self, name: &str, public: &str) -> Result<SshKey, CloudError> {
        let body = json!({"name": name, "key": public});
        self.read(Method::POST, &self.keys_path(), &[], Some(&body))
            .await
    }

    /// The keys of whoever weft signs as (ListKeys or ListUserKeys).
    pub async fn list_keys(&self) -> Result<Vec<SshKey>, CloudError> {
        self.read(Method::GET, &self.keys_path(), &[], None).await
    }

    /// The key named or fingerprinted `id`, or `None` when there is none (404).
    pub async fn get_key(&self, id: &str) -> Result<Option<SshKey>, CloudError> {
        let path = format!("{}/{id}", self.keys_path());
        let a = self.found(Method::GET, &path).await?;
        a.map(|a| a.json(CLOUD)).transpose()
    }

    /// Deletes the key named or fingerprinted `id`; answers false when there was none (404).
    pub async fn delete_key(&self, id: &str) -> Result<bool, CloudError> {
        let path = format!("{}/{id}", self.keys_path());
        Ok(self.found(Method::DELETE, &path).await?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: Value) -> Answer {
        Answer::for_tests(status, body.to_string())
    }

    #[test]
    fn cloudapi_errors_keep_their_code_and_throttling_is_retried() {
        let quota = json!({"code": "QuotaExceeded", "message": "quota exceeded"});
        let e = api_error(&answer(403, quota));
        assert_eq!((e.code.as_str(), e.retryable), ("QuotaExceeded", false));
        assert!(api_error(&answer(420, json!({"code": "RequestThrottled"}))).retryable);
        assert!(api_error(&answer(503, Value::Null)).retryable);
        assert!(!api_error(&answer(401, json!({"code": "InvalidCredentials"}))).retryable);
    }
}
