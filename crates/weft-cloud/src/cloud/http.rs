//! The one HTTP send path of the cloud clients: the account's request budget is taken first, the
//! answer read whole, `Retry-After` honoured, a throttling answer shared with every worker of the
//! account, and a request that got no answer classified ([`CloudError::sending`]).

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::{retry_after, CloudError};
use crate::throttle::Bucket;

/// The HTTP client of a cloud: connections time out after 10 s, requests after 60 s.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_default()
}

/// A cloud's HTTP client ([`client`]) by default.
#[derive(Debug, Clone)]
pub struct Http(pub reqwest::Client);

impl Default for Http {
    fn default() -> Http {
        Http(client())
    }
}

impl std::ops::Deref for Http {
    type Target = reqwest::Client;
    fn deref(&self) -> &reqwest::Client {
        &self.0
    }
}

/// A cloud's answer, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The wait the answer's `Retry-After` asks for, if any.
    pub retry_after: Option<Duration>,
    /// The body as text.
    pub text: String,
    headers: reqwest::header::HeaderMap,
}

impl Answer {
    /// An answer made by a test.
    #[cfg(test)]
    pub(crate) fn for_tests(status: u16, text: String) -> Answer {
        Answer {
            status,
            retry_after: None,
            text,
            headers: Default::default(),
        }
    }

    /// A 2xx answer.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// A header of the answer, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as `T`; a body that is not one is a retryable error of `api` (a proxy's page
    /// in place of the API's answer).
    pub fn json<T: DeserializeOwned>(&self, api: &'static str) -> Result<T, CloudError> {
        serde_json::from_str(&self.text).map_err(|e| {
            CloudError::from_status(
                api,
                502,
                "BadAnswer",
                format!("an answer that is not what the API documents: {e}"),
                None,
            )
        })
    }

    /// The body as JSON, or the text as a JSON string (for reading error bodies).
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| self.text.clone().into())
    }
}

/// Sends one request of `api` and reads its answer: first a token of `bucket` (the account's
/// budget); a 429 answer makes every worker of the account wait for the refill.
pub async fn send(
    api: &'static str,
    bucket: Option<&Bucket>,
    req: reqwest::RequestBuilder,
) -> Result<Answer, CloudError> {
    if let Some(b) = bucket {
        b.acquire().await;
    }
    let resp = req
        .send()
        .await
        .map_err(|e| CloudError::sending(api, "no answer", &e))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let after = retry_after(headers.get("retry-after").and_then(|v| v.to_str().ok()));
    if status == 429 {
        if let Some(b) = bucket {
            b.throttled();
        }
    }
    let text = resp.text().await.map_err(|e| {
        CloudError::unreachable(
            api,
            format!("reading the answer: {}", super::error::chain(&e)),
        )
    })?;
    Ok(Answer {
        status,
        retry_after: after,
        text,
        headers,
    })
}
