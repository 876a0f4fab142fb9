//! A small Compute Engine v1 client: get, list (by filter, page by page), insert and delete an
//! instance of one zone, and read a zone operation. Every call carries a service-account access token (renewed once when the API
//! answers 401); errors become [`CloudError`]s with Google's own reason and message.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::auth::{ServiceAccount, TokenCache};
use crate::cloud::{retry_after, CloudError};

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

/// One project and zone of the Compute API, as one service account.
pub struct Zone<'a> {
    /// The HTTP client calls go through.
    pub http: &'a reqwest::Client,
    /// The cache of access tokens, shared by every call of the provider.
    pub tokens: &'a TokenCache,
    /// The service account calls are made as.
    pub account: &'a ServiceAccount,
    /// `<endpoint>/projects/<project>/zones/<zone>`.
    pub base: String,
    /// The project's request budget, shared by every worker of the provisioner.
    pub bucket: std::sync::Arc<crate::throttle::Bucket>,
}

/// Reads a Google error body: `{"error": {"code", "message", "errors": [{"reason"}]}}`.
pub fn api_error(status: u16, body: &Value, retry: Option<Duration>) -> CloudError {
    let err = body.get("error");
    let message = err
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("no message")
        .to_string();
    let reason = err
        .and_then(|e| e.get("errors"))
        .and_then(|e| e.get(0))
        .and_then(|e| e.get("reason"))
        .and_then(Value::as_str)
        .or_else(|| err.and_then(|e| e.get("status")).and_then(Value::as_str))
        .map(str::to_string)
        .unwrap_or_else(|| status.to_string());
    let e = CloudError::from_status(CLOUD, status, reason.clone(), message, retry);
    if RATE_REASONS.contains(&reason.as_str()) {
        e.retryable(true)
    } else {
        e
    }
}

impl Zone<'_> {
    /// Sends one request (path relative to the zone); answers the status and the JSON body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<(u16, Value), CloudError> {
        let url = format!("{}/{}", self.base, path);
        for attempt in 0..2 {
            let token = self.tokens.token(self.http, self.account).await?;
            self.bucket.acquire().await;
            let mut req = self.http.request(method.clone(), &url).bearer_auth(token);
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
            if status == 401 && attempt == 0 {
                // The token was revoked or expired early: get a new one, once.
                self.tokens.forget(self.account).await;
                continue;
            }
            if (200..300).contains(&status) || status == 404 || status == 409 {
                return Ok((status, json));
            }
            let e = api_error(status, &json, after);
            // Throttled (429, or a rate-limit reason on a 403): the whole project waits.
            if status == 429 || (e.retryable && status < 500) {
                self.bucket.throttled();
            }
            return Err(e);
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// The instance named `name`, or `None` when there is none.
    pub async fn get_instance(&self, name: &str) -> Result<Option<Value>, CloudError> {
        match self
            .send(Method::GET, &format!("instances/{name}"), &[], None)
            .await?
        {
            (404, _) => Ok(None),
            (409, body) => Err(api_error(409, &body, None)),
            (_, body) => Ok(Some(body)),
        }
    }

    /// One page of the zone's instances matching `filter` (the API's filter syntax): the
    /// instances and the next page's token, if there is one.
    pub async fn list_instances(
        &self,
        filter: &str,
        page_token: Option<&str>,
    ) -> Result<(Vec<Value>, Option<String>), CloudError> {
        let mut query = vec![("filter", filter), ("maxResults", "500")];
        if let Some(t) = page_token {
            query.push(("pageToken", t));
        }
        match self.send(Method::GET, "instances", &query, None).await? {
            (status @ (404 | 409), body) => Err(api_error(status, &body, None)),
            (_, body) => {
                let items = body
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let next = body
                    .get("nextPageToken")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string);
                Ok((items, next))
            }
        }
    }

    /// Inserts an instance: `Ok(Some(operation))`, or `Ok(None)` when one of that name exists.
    pub async fn insert_instance(&self, instance: &Value) -> Result<Option<Value>, CloudError> {
        match self
            .send(Method::POST, "instances", &[], Some(instance))
            .await?
        {
            (409, _) => Ok(None),
            (404, body) => Err(api_error(404, &body, None)),
            (_, op) => Ok(Some(op)),
        }
    }

    /// Deletes an instance: `Ok(Some(operation))`, or `Ok(None)` when there is none.
    pub async fn delete_instance(&self, name: &str) -> Result<Option<Value>, CloudError> {
        match self
            .send(Method::DELETE, &format!("instances/{name}"), &[], None)
            .await?
        {
            (404, _) => Ok(None),
            (409, body) => Err(api_error(409, &body, None).retryable(true)),
            (_, op) => Ok(Some(op)),
        }
    }

    /// A zone operation by name.
    pub async fn get_operation(&self, name: &str) -> Result<Value, CloudError> {
        match self
            .send(Method::GET, &format!("operations/{name}"), &[], None)
            .await?
        {
            (status @ (404 | 409), body) => Err(api_error(status, &body, None)),
            (_, op) => Ok(op),
        }
    }
}

/// What a finished operation says went wrong, if anything: its first error's code and message.
pub fn operation_error(op: &Value) -> Option<CloudError> {
    let first = op.get("error")?.get("errors")?.get(0)?;
    let code = first
        .get("code")
        .and_then(Value::as_str)
        .unwrap_or("OPERATION_FAILED");
    let message = first
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the operation failed");
    let status = op
        .get("httpErrorStatusCode")
        .and_then(Value::as_u64)
        .unwrap_or(400) as u16;
    // The operation is over: trying it again gives the same answer unless the zone was busy.
    let busy = matches!(code, "ZONE_RESOURCE_POOL_EXHAUSTED" | "RESOURCE_NOT_READY");
    Some(CloudError::from_status(CLOUD, status, code, message, None).retryable(busy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn google_errors_keep_their_reason_and_rate_limits_are_retried() {
        let body = json!({"error": {"code": 403, "message": "Quota 'CPUS' exceeded.",
            "errors": [{"reason": "quotaExceeded", "message": "Quota 'CPUS' exceeded."}]}});
        let e = api_error(403, &body, None);
        assert_eq!(e.code, "quotaExceeded");
        assert!(!e.retryable);
        let body = json!({"error": {"code": 403, "message": "slow",
            "errors": [{"reason": "rateLimitExceeded"}]}});
        assert!(api_error(403, &body, None).retryable);
        assert!(api_error(503, &Value::Null, None).retryable);
    }

    #[test]
    fn an_operation_error_is_its_first_error() {
        let op = json!({"status": "DONE", "httpErrorStatusCode": 403, "error": {"errors": [
            {"code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded. Limit: 8.0"}]}});
        let e = operation_error(&op).unwrap();
        assert_eq!(
            (e.code.as_str(), e.status, e.retryable),
            ("QUOTA_EXCEEDED", 403, false)
        );
        assert!(operation_error(&json!({"status": "DONE"})).is_none());
    }
}
