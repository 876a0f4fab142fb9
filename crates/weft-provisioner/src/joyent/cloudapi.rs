//! A small Triton CloudAPI client: list machines (by name, by tag, all of them page by page),
//! create, get and delete a machine, and add, read and delete an SSH key of the account (or of
//! the sub-user weft signs as), each request signed with the account's key ([`super::sign`]).
//! Errors become [`CloudError`]s with CloudAPI's own `code` and `message`.

use std::time::SystemTime;

use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

use super::sign::AccountKey;
use crate::cloud::{retry_after, CloudError};

/// The API's name in errors.
pub const CLOUD: &str = "triton";
/// The CloudAPI version range weft speaks.
pub const API_VERSION: &str = "~9||~8";

/// One account of one CloudAPI endpoint.
pub struct Account<'a> {
    /// The HTTP client calls go through.
    pub http: &'a reqwest::Client,
    /// The private key requests are signed with (HTTP Signature).
    pub key: &'a AccountKey,
    /// The endpoint, without a trailing `/`.
    pub endpoint: String,
    /// The account's login name (the field `login`): every path is below `/<login>`.
    pub login: String,
    /// The sub-user weft signs as (the field `user`), if not the account itself.
    pub user: Option<String>,
    /// What names the key in `keyId` instead of its fingerprint (the field `key_id`).
    pub key_id: Option<String>,
    /// The account's request budget, shared by every worker of the provisioner.
    pub bucket: std::sync::Arc<crate::throttle::Bucket>,
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

/// How many machines one ListMachines page holds (CloudAPI's default and most).
pub const PAGE: usize = 1000;

/// Reads a CloudAPI error body (`{"code", "message"}`).
pub fn api_error(status: u16, body: &Value, retry: Option<std::time::Duration>) -> CloudError {
    let code = body
        .get("code")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| status.to_string());
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message")
        .to_string();
    // 420 "Slow Down" and RequestThrottled are CloudAPI's throttling answers.
    let throttled = status == 420 || code == "RequestThrottled";
    let e = CloudError::from_status(CLOUD, status, code, message, retry);
    if throttled {
        e.retryable(true)
    } else {
        e
    }
}

impl Account<'_> {
    /// Sends one signed request (path below `/<login>`); answers the status and JSON body for a
    /// success, 404 and 410, and an error for the rest.
    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<(u16, Value), CloudError> {
        let url = format!("{}/{}{}", self.endpoint, self.login, path);
        self.bucket.acquire().await;
        let date = httpdate::fmt_http_date(SystemTime::now());
        let auth = self
            .key
            .authorization(
                &self.login,
                self.user.as_deref(),
                self.key_id.as_deref(),
                &date,
            )
            .map_err(|e| CloudError::from_status(CLOUD, 401, "SigningFailed", e, None))?;
        let mut req = self
            .http
            .request(method.clone(), &url)
            .header("date", &date)
            .header("authorization", auth)
            .header("accept", "application/json")
            .header("accept-version", API_VERSION);
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| CloudError::sending(CLOUD, &format!("{method} {url}"), &e))?;
        let status = resp.status().as_u16();
        let after = retry_after(
            resp.headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()),
        );
        let json: Value = resp.json().await.unwrap_or(Value::Null);
        if (200..300).contains(&status) || status == 404 || status == 410 {
            return Ok((status, json));
        }
        let e = api_error(status, &json, after);
        // Throttled (429, 420 "Slow Down", RequestThrottled): the whole account waits.
        if status == 429 || (e.retryable && status < 500) {
            self.bucket.throttled();
        }
        Err(e)
    }

    /// The machines named `name` (not deleted ones).
    pub async fn machines_named(&self, name: &str) -> Result<Vec<Value>, CloudError> {
        self.list_machines(&[("name", name)]).await
    }

    /// The machines whose tag `tag` is `value` (not deleted ones; at most one page).
    pub async fn machines_tagged(&self, tag: &str, value: &str) -> Result<Vec<Value>, CloudError> {
        let key = format!("tag.{tag}");
        self.list_machines(&[(key.as_str(), value)]).await
    }

    /// Every machine of the account that is not deleted, page by page.
    pub async fn all_machines(&self) -> Result<Vec<Value>, CloudError> {
        let mut all = Vec::new();
        loop {
            let offset = all.len().to_string();
            let limit = PAGE.to_string();
            let page = self
                .list_machines(&[("offset", offset.as_str()), ("limit", limit.as_str())])
                .await?;
            let full = page.len() >= PAGE;
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }

    async fn list_machines(&self, query: &[(&str, &str)]) -> Result<Vec<Value>, CloudError> {
        match self.send(Method::GET, "/machines", query, None).await? {
            (s @ (404 | 410), body) => Err(api_error(s, &body, None)),
            (_, Value::Array(list)) => Ok(list),
            (s, _) => Err(CloudError::from_status(
                CLOUD,
                s,
                "BadResponse",
                "ListMachines did not answer a list",
                None,
            )),
        }
    }

    /// The UUID of the newest active image named `name` (by `published_at`), if any.
    pub async fn image_named(&self, name: &str) -> Result<Option<String>, CloudError> {
        let list = match self
            .send(
                Method::GET,
                "/images",
                &[("name", name), ("state", "active")],
                None,
            )
            .await?
        {
            (_, Value::Array(list)) => list,
            (s, body) => return Err(api_error(s, &body, None)),
        };
        let newest = list
            .iter()
            .filter(|i| i.get("name").and_then(Value::as_str) == Some(name))
            .max_by_key(|i| i.get("published_at").and_then(Value::as_str).unwrap_or(""));
        Ok(newest
            .and_then(|i| i.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string))
    }

    /// Creates a machine; answers it (`Err` with status 409 when the name is taken).
    pub async fn create_machine(&self, body: &Value) -> Result<Value, CloudError> {
        match self
            .send(Method::POST, "/machines", &[], Some(body))
            .await?
        {
            (s @ (404 | 410), body) => Err(api_error(s, &body, None)),
            (_, machine) => Ok(machine),
        }
    }

    /// The machine `id`, or `None` when it does not exist or was deleted (404, 410).
    pub async fn get_machine(&self, id: &str) -> Result<Option<Value>, CloudError> {
        match self
            .send(Method::GET, &format!("/machines/{id}"), &[], None)
            .await?
        {
            (404 | 410, _) => Ok(None),
            (_, m) if m.get("state").and_then(Value::as_str) == Some("deleted") => Ok(None),
            (_, m) => Ok(Some(m)),
        }
    }

    /// Deletes the machine `id`; answers false when it was already gone (404, 410).
    pub async fn delete_machine(&self, id: &str) -> Result<bool, CloudError> {
        let (status, _) = self
            .send(Method::DELETE, &format!("/machines/{id}"), &[], None)
            .await?;
        Ok(!matches!(status, 404 | 410))
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
        match self
            .send(Method::POST, &self.keys_path(), &[], Some(&body))
            .await?
        {
            (s @ (404 | 410), body) => Err(api_error(s, &body, None)),
            (s, body) => serde_json::from_value(body).map_err(|_| {
                CloudError::from_status(CLOUD, s, "BadResponse", "CreateKey answered no key", None)
            }),
        }
    }

    /// The keys of whoever weft signs as (ListKeys or ListUserKeys).
    pub async fn list_keys(&self) -> Result<Vec<SshKey>, CloudError> {
        match self.send(Method::GET, &self.keys_path(), &[], None).await? {
            (s @ (404 | 410), body) => Err(api_error(s, &body, None)),
            (s, body) => serde_json::from_value(body).map_err(|_| {
                CloudError::from_status(CLOUD, s, "BadResponse", "ListKeys answered no list", None)
            }),
        }
    }

    /// The key named or fingerprinted `id`, or `None` when there is none (404).
    pub async fn get_key(&self, id: &str) -> Result<Option<SshKey>, CloudError> {
        let path = format!("{}/{id}", self.keys_path());
        match self.send(Method::GET, &path, &[], None).await? {
            (404 | 410, _) => Ok(None),
            (s, body) => serde_json::from_value(body).map(Some).map_err(|_| {
                CloudError::from_status(CLOUD, s, "BadResponse", "GetKey answered no key", None)
            }),
        }
    }

    /// Deletes the key named or fingerprinted `id`; answers false when there was none (404).
    pub async fn delete_key(&self, id: &str) -> Result<bool, CloudError> {
        let path = format!("{}/{id}", self.keys_path());
        let (status, _) = self.send(Method::DELETE, &path, &[], None).await?;
        Ok(!matches!(status, 404 | 410))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cloudapi_errors_keep_their_code_and_throttling_is_retried() {
        let e = api_error(
            403,
            &json!({"code": "QuotaExceeded", "message": "quota exceeded"}),
            None,
        );
        assert_eq!((e.code.as_str(), e.retryable), ("QuotaExceeded", false));
        assert!(api_error(420, &json!({"code": "RequestThrottled"}), None).retryable);
        assert!(api_error(503, &Value::Null, None).retryable);
        assert!(!api_error(401, &json!({"code": "InvalidCredentials"}), None).retryable);
    }
}
