//! How a cloud's answer becomes a retryable or a fatal [`PluginError`].
//!
//! The rule (design.md, "Cloud and configuration plugins"): throttling, over-limit and 5xx are
//! retried with back-off; auth, quota and bad parameters fail at once with the cloud's own code and
//! message. Each cloud's client maps its answers to a [`CloudError`]; this module decides the rest.
//!
//! Each error also carries the reason the server is told (design.md, "Trust, clouds and state"):
//! 401/403 `auth`, 404 `not_found`, quota codes `quota`, capacity codes `capacity`, no answer,
//! throttling and 5xx `network`, any other refusal `invalid`. A request that never reached the
//! cloud because its host does not resolve, or whose TLS handshake failed, is a configuration
//! error: fatal, reason `invalid`, with the host named ([`CloudError::sending`]), so that a
//! region typo fails in seconds instead of being retried as a network error.

use std::time::Duration;

use weft_model::FailureReason;

use crate::task::PluginError;

/// A failed call to a cloud API, as the cloud said it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{cloud}: {code}: {message}")]
pub struct CloudError {
    /// Which API answered (`ec2`, `nova`, `keystone`, `gce`, `triton`).
    pub cloud: &'static str,
    /// The HTTP status, or 0 when no answer came (connection refused, time-out).
    pub status: u16,
    /// The cloud's own error code (`InvalidInstanceID.NotFound`, `itemNotFound`...), or the status.
    pub code: String,
    /// The cloud's own message, or what went wrong on the way when no answer came.
    pub message: String,
    /// How long the cloud asked us to wait (`Retry-After`).
    pub retry_after: Option<Duration>,
    /// True when another try may pass: throttling, over-limit, 5xx, no answer.
    pub retryable: bool,
    /// What the server is told of it (see the module's doc).
    pub reason: FailureReason,
}

impl CloudError {
    /// An error classified by its HTTP status: 0 (no answer), 408, 413 and 429 with a
    /// `Retry-After`, 429 and 5xx are retryable; every other status is not.
    pub fn from_status(
        cloud: &'static str,
        status: u16,
        code: impl Into<String>,
        message: impl Into<String>,
        retry_after: Option<Duration>,
    ) -> CloudError {
        let retryable =
            matches!(status, 0 | 408 | 429 | 500..=599) || (status == 413 && retry_after.is_some());
        let code = code.into();
        let reason = reason_of(status, &code, retryable);
        CloudError {
            cloud,
            status,
            code,
            message: message.into(),
            retry_after,
            retryable,
            reason,
        }
    }

    /// A request that got no answer, from reqwest's error: a host that does not resolve or a TLS
    /// handshake that failed is fatal (reason `invalid`, the host and the cause named); anything
    /// else (refused, reset, timed out) is [`CloudError::unreachable`], with `context` in front.
    pub fn sending(cloud: &'static str, context: &str, e: &reqwest::Error) -> CloudError {
        let host = e
            .url()
            .and_then(|u| u.host_str())
            .unwrap_or("the endpoint")
            .to_string();
        let detail = innermost(e);
        let message = match transport_fault(e) {
            Some(Fault::Dns) => format!(
                "{host} does not resolve: check the provider's region and endpoint ({detail})"
            ),
            Some(Fault::Tls) => format!(
                "TLS with {host} failed: {detail}: check the provider's endpoint and the \
                 certificates the provisioner trusts"
            ),
            None => return CloudError::unreachable(cloud, format!("{context}: {}", chain(e))),
        };
        CloudError {
            cloud,
            status: 0,
            code: "Unreachable".into(),
            message,
            retry_after: None,
            retryable: false,
            reason: FailureReason::Invalid,
        }
    }

    /// A transport failure (no answer): always retryable.
    pub fn unreachable(cloud: &'static str, message: impl Into<String>) -> CloudError {
        CloudError::from_status(cloud, 0, "Unreachable", message, None)
    }

    /// Marks an error retryable or not whatever its status (a cloud code that says throttling
    /// under a 400, as EC2's `RequestLimitExceeded` does).
    pub fn retryable(mut self, retryable: bool) -> CloudError {
        self.retryable = retryable;
        if retryable && !self.reason.retryable_by_default() {
            self.reason = FailureReason::Network;
        }
        self
    }

    /// The same error with another reason.
    pub fn because(mut self, reason: FailureReason) -> CloudError {
        self.reason = reason;
        self
    }
}

/// The reason of an answer: by the cloud's code where it says more than the status (quota,
/// capacity, not found, throttling), else by the status.
fn reason_of(status: u16, code: &str, retryable: bool) -> FailureReason {
    let c = code.to_ascii_lowercase();
    if c.contains("ratelimit") || c.contains("requestlimit") || c.contains("throttl") {
        FailureReason::Network
    } else if c.contains("quota") || c.contains("limitexceeded") {
        FailureReason::Quota
    } else if c.contains("capacity") || c.contains("exhausted") {
        FailureReason::Capacity
    } else if status == 401 || status == 403 {
        FailureReason::Auth
    } else if status == 404 || c.contains("notfound") || c.contains("not_found") {
        FailureReason::NotFound
    } else if retryable || status == 0 {
        FailureReason::Network
    } else {
        FailureReason::Invalid
    }
}

/// A request that failed before any answer because of its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The host does not resolve.
    Dns,
    /// The TLS handshake failed (a certificate not trusted, a name that does not match, no TLS).
    Tls,
}

/// What reqwest's error chain says of a request that got no answer: hyper-util's connector
/// says `dns error` above the resolver's own error; rustls's failures name certificates or the
/// handshake.
fn transport_fault(e: &reqwest::Error) -> Option<Fault> {
    if !e.is_connect() && !e.is_request() {
        return None;
    }
    let mut dns = false;
    let mut tls = false;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        let text = s.to_string().to_ascii_lowercase();
        dns |= text == "dns error" || text.contains("failed to lookup address");
        tls |= text.contains("certificate") || text.contains("tls") || text.contains("handshake");
        source = s.source();
    }
    if dns {
        Some(Fault::Dns)
    } else if tls {
        Some(Fault::Tls)
    } else {
        None
    }
}

/// An error and its causes, without the URL (which may carry a signature or a token).
pub(super) fn chain(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(url) = e.url() {
        s = s
            .replace(&format!(" for url ({url})"), "")
            .replace(url.as_str(), "");
    }
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    s
}

/// The last error of a chain: the cause itself (`failed to lookup address information: Name or
/// service not known`).
fn innermost(e: &reqwest::Error) -> String {
    let mut last: &(dyn std::error::Error + 'static) = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

/// `r` with a 404 (the cloud does not know the thing) as `None`.
pub fn found<T>(r: Result<T, CloudError>) -> Result<Option<T>, CloudError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.status == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

impl From<CloudError> for PluginError {
    fn from(e: CloudError) -> PluginError {
        PluginError::new(e.reason, e.to_string()).retryable_if(e.retryable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified() {
        let c = |s, ra| CloudError::from_status("t", s, "c", "m", ra).retryable;
        assert!(c(0, None) && c(429, None) && c(500, None) && c(503, None));
        assert!(c(413, Some(Duration::from_secs(1))));
        assert!(!c(413, None) && !c(400, None) && !c(401, None) && !c(403, None));
        assert!(!c(404, None) && !c(409, None));
    }

    #[test]
    fn answers_have_reasons() {
        let r = |s, code: &str| CloudError::from_status("t", s, code, "m", None).reason;
        assert_eq!(r(401, "AuthFailure"), FailureReason::Auth);
        assert_eq!(r(403, "Forbidden"), FailureReason::Auth);
        assert_eq!(r(403, "quotaExceeded"), FailureReason::Quota);
        assert_eq!(r(400, "InstanceLimitExceeded"), FailureReason::Quota);
        assert_eq!(r(400, "RequestLimitExceeded"), FailureReason::Network);
        assert_eq!(
            r(500, "InsufficientInstanceCapacity"),
            FailureReason::Capacity
        );
        assert_eq!(r(400, "InvalidAMIID.NotFound"), FailureReason::NotFound);
        assert_eq!(r(404, "itemNotFound"), FailureReason::NotFound);
        assert_eq!(r(503, "HTTP503"), FailureReason::Network);
        assert_eq!(r(0, "Unreachable"), FailureReason::Network);
        assert_eq!(r(400, "InvalidParameterValue"), FailureReason::Invalid);
        let p: PluginError = CloudError::from_status("ec2", 401, "AuthFailure", "no", None).into();
        assert_eq!((p.retryable, p.reason), (false, FailureReason::Auth));
        let p: PluginError = CloudError::from_status("ec2", 400, "Throttling", "slow", None)
            .retryable(true)
            .into();
        assert_eq!((p.retryable, p.reason), (true, FailureReason::Network));
    }
}
