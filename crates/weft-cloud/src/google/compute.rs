//! A small Compute Engine v1 client: get, list (by filter, page by page), insert and delete an
//! instance of one zone, and read a zone operation, with typed answers. Every call carries a
//! service-account access token (renewed once when the API answers 401); errors become
//! [`CloudError`]s with Google's own reason and message.

use std::collections::BTreeMap;
use std::sync::Arc;

use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

use super::auth::{fetch_token, ServiceAccount, RENEW};
use crate::cloud::http::{send, Answer};
use crate::cloud::token::Token;
use crate::cloud::CloudError;
use crate::throttle::Bucket;

/// The API's name in errors.
pub const CLOUD: &str = "gce";
/// Google's Compute Engine v1 API.
pub const DEFAULT_ENDPOINT: &str = "https://compute.googleapis.com/compute/v1";

/// Reasons Google gives under a 403 that mean "slow down", not "no".
const RATE_REASONS: [&str; 3] = [
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
];

/// An instance as the API answers it (the fields weft reads).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// Its name (weft's id of it).
    pub name: String,
    /// `PROVISIONING`, `STAGING`, `RUNNING`, `STOPPING`, `TERMINATED`...
    #[serde(default)]
    pub status: String,
    /// Its labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its network interfaces.
    #[serde(default)]
    pub network_interfaces: Vec<Nic>,
}

/// A network interface of an instance.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Nic {
    /// The internal address.
    #[serde(rename = "networkIP")]
    pub network_ip: Option<String>,
    /// Its access configs (a one-to-one NAT gives the external address).
    pub access_configs: Vec<AccessConfig>,
}

/// An access config of a network interface.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AccessConfig {
    /// The external address.
    #[serde(default, rename = "natIP")]
    pub nat_ip: Option<String>,
}

/// A zone operation.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// Its name.
    pub name: String,
    /// `PENDING`, `RUNNING` or `DONE`.
    #[serde(default)]
    pub status: String,
    /// What went wrong, once it is done.
    #[serde(default)]
    pub error: Option<OperationErrors>,
    /// The HTTP status the error stands for.
    #[serde(default)]
    pub http_error_status_code: Option<u16>,
}

/// The errors of a finished operation.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct OperationErrors {
    /// Each error.
    #[serde(default)]
    pub errors: Vec<OperationError>,
}

/// One error of an operation.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct OperationError {
    /// Google's code (`QUOTA_EXCEEDED`).
    pub code: String,
    /// Google's message.
    pub message: String,
}

impl Operation {
    /// What a finished operation says went wrong, if anything: its first error.
    pub fn failure(&self) -> Option<CloudError> {
        let first = self.error.as_ref()?.errors.first()?;
        let code = if first.code.is_empty() {
            "OPERATION_FAILED"
        } else {
            &first.code
        };
        let status = self.http_error_status_code.unwrap_or(400);
        // The operation is over: trying again gives the same answer unless the zone was busy.
        let busy = matches!(code, "ZONE_RESOURCE_POOL_EXHAUSTED" | "RESOURCE_NOT_READY");
        Some(CloudError::from_status(CLOUD, status, code, &first.message, None).retryable(busy))
    }
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct InstancePage {
    items: Vec<Instance>,
    next_page_token: Option<String>,
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    #[serde(default)]
    error: Option<ErrorDetail>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorDetail {
    message: Option<String>,
    status: Option<String>,
    errors: Vec<ErrorReason>,
}

#[derive(Deserialize, Default)]
struct ErrorReason {
    #[serde(default)]
    reason: Option<String>,
}

/// Reads a Google error answer: `{"error": {"code", "message", "errors": [{"reason"}]}}`.
pub fn api_error(a: &Answer) -> CloudError {
    let body: ErrorBody = serde_json::from_str(&a.text).unwrap_or_default();
    let detail = body.error.unwrap_or_default();
    let reason = detail
        .errors
        .into_iter()
        .find_map(|e| e.reason)
        .or(detail.status)
        .unwrap_or_else(|| a.status.to_string());
    let message = detail.message.unwrap_or_else(|| "no message".into());
    let e = CloudError::from_status(CLOUD, a.status, reason.clone(), message, a.retry_after);
    if RATE_REASONS.contains(&reason.as_str()) {
        e.retryable(true)
    } else {
        e
    }
}

/// One project and zone of the Compute API, as one service account.
pub struct Zone {
    /// The HTTP client calls go through.
    pub http: reqwest::Client,
    /// The service account's access token, shared by every call made as it.
    pub token: Arc<Token<String>>,
    /// The service account calls are made as.
    pub account: ServiceAccount,
    /// `<endpoint>/projects/<project>/zones/<zone>`.
    pub base: String,
    /// The project's request budget, shared by every worker of the provisioner.
    pub bucket: Arc<Bucket>,
}

impl Zone {
    /// Sends one request (path relative to the zone). 2xx, 404 and 409 are answers; any other
    /// status is an error (a 403 rate limit makes the whole project wait).
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Answer, CloudError> {
        let url = format!("{}/{}", self.base, path);
        let mut renewed = false;
        loop {
            let fetch = || fetch_token(&self.http, &self.account);
            let token = self.token.get(RENEW, fetch).await?;
            let mut req = self.http.request(method.clone(), &url).bearer_auth(token);
            if let Some(b) = body {
                req = req.json(b);
            }
            let a = send(CLOUD, Some(&self.bucket), req.query(query)).await?;
            if a.status == 401 && !renewed {
                // The token was revoked or expired early: get a new one, once.
                self.token.forget(|_| true).await;
                renewed = true;
                continue;
            }
            if a.is_success() || a.status == 404 || a.status == 409 {
                return Ok(a);
            }
            let e = api_error(&a);
            if e.retryable && a.status == 403 {
                self.bucket.throttled();
            }
            return Err(e);
        }
    }

    /// The instance named `name`, or `None` when there is none.
    pub async fn get_instance(&self, name: &str) -> Result<Option<Instance>, CloudError> {
        let path = format!("instances/{name}");
        let a = self.call(Method::GET, &path, &[], None).await?;
        match a.status {
            404 => Ok(None),
            409 => Err(api_error(&a)),
            _ => a.json(CLOUD).map(Some),
        }
    }

    /// Every instance of the zone matching `filter` (the API's filter syntax), page by page.
    pub async fn list_instances(&self, filter: &str) -> Result<Vec<Instance>, CloudError> {
        let (mut all, mut token) = (Vec::new(), None::<String>);
        loop {
            let mut query = vec![("filter", filter), ("maxResults", "500")];
            query.extend(token.as_deref().map(|t| ("pageToken", t)));
            let a = self.call(Method::GET, "instances", &query, None).await?;
            let page: InstancePage = success(a)?.json(CLOUD)?;
            all.extend(page.items);
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(n) if Some(&n) != token.as_ref() => token = Some(n),
                _ => return Ok(all),
            }
        }
    }

    /// Inserts an instance: `Ok(Some(operation))`, or `Ok(None)` when one of that name exists.
    pub async fn insert_instance(&self, instance: &Value) -> Result<Option<Operation>, CloudError> {
        let a = self.call(Method::POST, "instances", &[], Some(instance));
        match a.await? {
            a if a.status == 409 => Ok(None),
            a => success(a)?.json(CLOUD).map(Some),
        }
    }

    /// Deletes an instance: false when there is none.
    pub async fn delete_instance(&self, name: &str) -> Result<bool, CloudError> {
        let path = format!("instances/{name}");
        let a = self.call(Method::DELETE, &path, &[], None).await?;
        match a.status {
            404 => Ok(false),
            409 => Err(api_error(&a).retryable(true)),
            _ => Ok(true),
        }
    }

    /// A zone operation by name.
    pub async fn get_operation(&self, name: &str) -> Result<Operation, CloudError> {
        let path = format!("operations/{name}");
        success(self.call(Method::GET, &path, &[], None).await?)?.json(CLOUD)
    }
}

/// A 2xx answer, else the error it says.
fn success(a: Answer) -> Result<Answer, CloudError> {
    if a.is_success() {
        Ok(a)
    } else {
        Err(api_error(&a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(status: u16, body: Value) -> Answer {
        Answer::for_tests(status, body.to_string())
    }

    #[test]
    fn google_errors_keep_their_reason_and_rate_limits_are_retried() {
        let body = json!({"error": {"code": 403, "message": "Quota 'CPUS' exceeded.",
            "errors": [{"reason": "quotaExceeded", "message": "Quota 'CPUS' exceeded."}]}});
        let e = api_error(&answer(403, body));
        assert_eq!(e.code, "quotaExceeded");
        assert!(!e.retryable);
        let body = json!({"error": {"code": 403, "message": "slow",
            "errors": [{"reason": "rateLimitExceeded"}]}});
        assert!(api_error(&answer(403, body)).retryable);
        assert!(api_error(&answer(503, Value::Null)).retryable);
    }

    #[test]
    fn an_operation_error_is_its_first_error() {
        let op: Operation = serde_json::from_value(json!({"name": "op", "status": "DONE",
            "httpErrorStatusCode": 403, "error": {"errors": [
            {"code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded. Limit: 8.0"}]}}))
        .unwrap();
        let e = op.failure().unwrap();
        let got = (e.code.as_str(), e.status, e.retryable);
        assert_eq!(got, ("QUOTA_EXCEEDED", 403, false));
        let done: Operation =
            serde_json::from_value(json!({"name": "o", "status": "DONE"})).unwrap();
        assert!(done.failure().is_none());
    }
}
