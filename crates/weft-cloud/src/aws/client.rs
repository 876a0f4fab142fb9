//! A client of AWS query APIs (EC2's `Version=2016-11-15`, IAM's `2010-05-08`): each call is a
//! form-encoded POST of `Action`, `Version` and the call's parameters, signed with SigV4
//! ([`super::sigv4`]), answered with XML ([`super::xml`]).
//!
//! Errors become [`CloudError`]s with AWS's own code and message. Throttling
//! (`RequestLimitExceeded`, `Throttling`...) and 5xx are retryable whatever the status; auth
//! (`AuthFailure`...), quota (`InstanceLimitExceeded`...) and bad parameters are not. Neither the
//! secret nor the signature is ever logged or put in an error.
//!
//! A client signs with a [`Signer`]: fixed keys, or temporary credentials kept fresh
//! ([`super::credentials`]). A call answered with an expired-token code ([`EXPIRED`]) while
//! signed with temporary credentials drops them and is sent once more with new ones; any
//! expired-token answer left is fatal with reason `auth`.

use std::time::{Duration, SystemTime};

use reqwest::Url;

use weft_model::FailureReason;

use super::credentials::Signer;
use super::sigv4::{self, Credentials, Scope};
use super::xml::{self, Element};
use crate::cloud::{http, CloudError};

/// EC2's query API version.
pub const EC2_VERSION: &str = "2016-11-15";
/// IAM's query API version.
pub const IAM_VERSION: &str = "2010-05-08";

/// Codes that mean "slow down": the account is throttled (not merely that the service is down).
/// Retried with back-off, and the account's budget is emptied.
const THROTTLING: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
];

/// Codes that mean "not now": retried with back-off.
const RETRYABLE: &[&str] = &[
    "ServiceUnavailable",
    "Unavailable",
    "InternalError",
    "InternalFailure",
    "InsufficientInstanceCapacity",
];

/// Codes that no retry can fix: credentials, permissions and quotas.
const FATAL: &[&str] = &[
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "OptInRequired",
    "Blocked",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "ResourceLimitExceeded",
    "AddressLimitExceeded",
];

/// Codes that say the credentials (or the request's signature time) expired: temporary
/// credentials are fetched again and the call sent once more.
pub const EXPIRED: &[&str] = &[
    "ExpiredToken",
    "ExpiredTokenException",
    "RequestExpired",
    "TokenRefreshRequired",
];

/// One signed query API: an endpoint, a region, a service name and credentials.
#[derive(Clone)]
pub struct QueryClient {
    http: reqwest::Client,
    endpoint: Url,
    region: String,
    service: &'static str,
    version: &'static str,
    creds: Signer,
    cloud: &'static str,
    /// The account's request budget, when the provider keeps one ([`crate::throttle`]).
    bucket: Option<std::sync::Arc<crate::throttle::Bucket>>,
}

impl std::fmt::Debug for QueryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryClient")
            .field("endpoint", &self.shown())
            .field("region", &self.region)
            .field("service", &self.service)
            .field("creds", &self.creds)
            .finish()
    }
}

/// The default EC2 endpoint of a region.
pub fn ec2_endpoint(region: &str) -> String {
    format!("https://ec2.{region}.amazonaws.com/")
}

impl QueryClient {
    /// A client of `service` (`ec2`, `iam`, `sts`) at `endpoint` (an `http(s)://` URL), signing
    /// with `creds` ([`Credentials`] or a [`Signer`]).
    pub fn new(
        http: reqwest::Client,
        endpoint: &str,
        region: &str,
        service: &'static str,
        version: &'static str,
        creds: impl Into<Signer>,
    ) -> Result<QueryClient, String> {
        let endpoint = Url::parse(endpoint).map_err(|e| format!("endpoint is not a URL: {e}"))?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host_str().is_none() {
            return Err(format!(
                "endpoint {endpoint} must be an http:// or https:// URL with a host"
            ));
        }
        Ok(QueryClient {
            http,
            endpoint,
            region: region.to_string(),
            service,
            version,
            creds: creds.into(),
            cloud: service,
            bucket: None,
        })
    }

    /// Every call first takes a token from `bucket`, and a throttling answer empties it.
    pub fn with_bucket(mut self, bucket: std::sync::Arc<crate::throttle::Bucket>) -> QueryClient {
        self.bucket = Some(bucket);
        self
    }

    /// The `Host` header: the host, and the port when it is not the scheme's default.
    fn host(&self) -> String {
        let host = self.endpoint.host_str().unwrap_or_default();
        match self.endpoint.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        }
    }

    /// The endpoint as errors show it: scheme, host, port and path (never a user or password).
    fn shown(&self) -> String {
        format!(
            "{}://{}{}",
            self.endpoint.scheme(),
            self.host(),
            self.endpoint.path()
        )
    }

    /// The form body of a call (`application/x-www-form-urlencoded`: a space is `+`, as the
    /// AWS SDKs send it; emulators that hash a re-encoded body, like moto, then agree with AWS).
    fn body(&self, action: &str, params: &[(String, String)]) -> String {
        let enc = |s: &str| sigv4::uri_encode(s).replace("%20", "+");
        let params = params.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let all = [("Action", action), ("Version", self.version)]
            .into_iter()
            .chain(params);
        let all: Vec<_> = all.map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect();
        all.join("&")
    }

    /// The signed headers of a request with `body`, at `now`, signed with `creds`.
    fn headers(&self, creds: &Credentials, body: &str, now: SystemTime) -> Vec<(String, String)> {
        let amz_date = sigv4::amz_date(now);
        let mut headers = vec![
            (
                "content-type".to_string(),
                "application/x-www-form-urlencoded; charset=utf-8".to_string(),
            ),
            ("host".to_string(), self.host()),
            ("x-amz-date".to_string(), amz_date.clone()),
        ];
        if let Some(t) = &creds.session_token {
            headers.push(("x-amz-security-token".to_string(), t.clone()));
        }
        let scope = Scope {
            region: &self.region,
            service: self.service,
            amz_date: &amz_date,
        };
        let req = sigv4::Request {
            method: "POST",
            path: self.endpoint.path(),
            query: &[],
            headers: &headers,
            body: body.as_bytes(),
        };
        let auth = sigv4::authorization(creds, &scope, &req);
        headers.push(("authorization".to_string(), auth));
        headers
    }

    /// Calls `action` once with `params` (twice when temporary credentials were refused as
    /// expired); answers the root element of the XML answer.
    pub async fn call(
        &self,
        action: &str,
        params: &[(String, String)],
    ) -> Result<Element, CloudError> {
        let creds = self.creds.credentials().await?;
        match self.send(&creds, action, params).await {
            Err(e) if EXPIRED.contains(&e.code.as_str()) && self.creds.expired(&creds).await => {
                let creds = self.creds.credentials().await?;
                self.send(&creds, action, params).await
            }
            answer => answer,
        }
    }

    /// Sends `action` with `params` once, signed with `creds`.
    async fn send(
        &self,
        creds: &Credentials,
        action: &str,
        params: &[(String, String)],
    ) -> Result<Element, CloudError> {
        let body = self.body(action, params);
        let mut req = self
            .http
            .post(self.endpoint.clone())
            .timeout(Duration::from_secs(60));
        for (k, v) in self.headers(creds, &body, SystemTime::now()) {
            if k != "host" {
                req = req.header(k, v);
            }
        }
        let a = http::send(self.cloud, self.bucket.as_deref(), req.body(body))
            .await
            .map_err(|e| CloudError {
                message: format!("{action}: {} ({})", e.message, self.shown()),
                ..e
            })?;
        let (status, text, after) = (a.status, a.text, a.retry_after);
        let doc = xml::parse(&text);
        if (200..300).contains(&status) {
            return doc.map_err(|e| {
                malformed(self.cloud, format!("{action}: the answer is not XML: {e}"))
            });
        }
        let e = classify(self.cloud, action, status, doc.ok(), &text, after);
        if let Some(b) = self
            .bucket
            .as_ref()
            .filter(|_| THROTTLING.contains(&&*e.code))
        {
            b.throttled();
        }
        Err(e)
    }
}

/// An answer that is not what the API documents (a proxy's page, a truncated document).
pub(crate) fn malformed(cloud: &'static str, message: impl Into<String>) -> CloudError {
    CloudError::from_status(cloud, 502, "MalformedAnswer", message, None)
}

/// An error answer (`<Response><Errors><Error><Code>` for EC2, `<ErrorResponse><Error>` for IAM)
/// as a [`CloudError`].
pub fn classify(
    cloud: &'static str,
    action: &str,
    status: u16,
    doc: Option<Element>,
    raw: &str,
    after: Option<Duration>,
) -> CloudError {
    let mut errors = Vec::new();
    if let Some(d) = &doc {
        d.find_all("Error", &mut errors);
    }
    let text = |name| errors.first().and_then(|e| e.text_at(&[name]));
    let code = text("Code").map_or_else(|| format!("HTTP{status}"), str::to_string);
    let message = text("Message").map_or_else(|| raw.chars().take(300).collect(), str::to_string);
    let e = CloudError::from_status(cloud, status, code, format!("{action}: {message}"), after);
    let code = e.code.as_str();
    if RETRYABLE.contains(&code) || THROTTLING.contains(&code) {
        e.retryable(true)
    } else if EXPIRED.contains(&code) {
        e.retryable(false).because(FailureReason::Auth)
    } else if FATAL.contains(&code) || code.starts_with("Invalid") {
        e.retryable(false)
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ec2_error(status: u16, code: &str) -> CloudError {
        let raw = format!(
            "<Response><Errors><Error><Code>{code}</Code><Message>said {code}</Message></Error>\
             </Errors><RequestID>x</RequestID></Response>"
        );
        let doc = xml::parse(&raw).ok();
        classify("ec2", "RunInstances", status, doc, &raw, None)
    }

    #[test]
    fn errors_are_classified_by_code_then_status() {
        for code in ["RequestLimitExceeded", "Throttling"] {
            let e = ec2_error(400, code);
            assert!(e.retryable, "{code}");
            assert_eq!(e.code, code);
        }
        assert!(ec2_error(503, "Unavailable").retryable);
        assert!(ec2_error(500, "SomethingNew").retryable, "5xx is retried");
        for code in [
            "AuthFailure",
            "InstanceLimitExceeded",
            "InvalidParameterValue",
            "InvalidAMIID.NotFound",
        ] {
            let e = ec2_error(400, code);
            assert!(!e.retryable, "{code}");
            assert!(e.to_string().contains(code), "{e}");
            assert!(e.to_string().contains(&format!("said {code}")), "{e}");
        }
        assert!(!ec2_error(401, "AuthFailure").retryable);
        for code in ["RequestExpired", "ExpiredToken"] {
            let e = ec2_error(400, code);
            assert!(!e.retryable && e.reason == FailureReason::Auth, "{e:?}");
        }
        let iam = "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code>\
                   <Message>slow</Message></Error></ErrorResponse>";
        assert!(classify("iam", "X", 400, xml::parse(iam).ok(), iam, None).retryable);
        let e = classify("ec2", "X", 502, None, "<html>bad gateway", None);
        assert!(e.retryable && e.code == "HTTP502", "{e:?}");
    }

    #[test]
    fn requests_are_signed_without_showing_the_secret() {
        let creds = Credentials {
            access_key_id: "AKID".into(),
            secret_access_key: "very-secret".into(),
            session_token: Some("session-secret".into()),
        };
        let http = reqwest::Client::new();
        let client =
            |url| QueryClient::new(http.clone(), url, "r", "ec2", EC2_VERSION, creds.clone());
        assert!(client("ftp://x").is_err());
        let c = client("http://127.0.0.1:4566/").unwrap();
        assert_eq!(c.host(), "127.0.0.1:4566");
        let body = c.body(
            "DescribeInstances",
            &[
                ("Filter.1.Name".into(), "tag:weft:node".into()),
                ("Filter.1.Value.1".into(), "a b+c's".into()),
            ],
        );
        assert_eq!(
            body,
            "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag%3Aweft%3Anode\
             &Filter.1.Value.1=a+b%2Bc%27s"
        );
        let h = c.headers(&creds, &body, SystemTime::UNIX_EPOCH);
        let auth = &h.iter().find(|(k, _)| k == "authorization").unwrap().1;
        assert!(auth.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKID/19700101/r/ec2/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature="
        ));
        assert!(!auth.contains("very-secret"));
        assert!(!format!("{c:?}").contains("very-secret"));
        assert!(!format!("{c:?}").contains("session-secret"));
    }
}
