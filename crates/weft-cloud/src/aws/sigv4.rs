//! AWS Signature Version 4 (SigV4) for requests to AWS query APIs (EC2, IAM).
//!
//! The request is reduced to a canonical form (method, path, sorted query, lowercased and trimmed
//! headers, the body's SHA-256), hashed into a string to sign under a credential scope
//! (`date/region/service/aws4_request`), and signed with a key derived from the secret by a chain
//! of HMAC-SHA256 over the date, region, service and `aws4_request`. The secret never leaves this
//! module: only the signature (which cannot be turned back into the secret) goes on the wire, and
//! [`Credentials`]' `Debug` hides the secret and the session token.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The signing algorithm's name, as AWS spells it.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// An access key: its id, its secret and, for temporary credentials, a session token.
#[derive(Clone)]
pub struct Credentials {
    /// The access key id (`AKIA...`, `ASIA...`), sent in the `Authorization` header.
    pub access_key_id: String,
    /// The secret access key; only signatures made with it leave this module.
    pub secret_access_key: String,
    /// The session token of temporary credentials (sent as `x-amz-security-token`); `None` for
    /// long-term keys.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<hidden>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

/// What is signed: the request as it goes on the wire.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The HTTP method, upper case (`GET`, `POST`).
    pub method: &'a str,
    /// The URI path, already percent-encoded (`/` for the query APIs).
    pub path: &'a str,
    /// Query parameters, not encoded; they are encoded and sorted here.
    pub query: &'a [(String, String)],
    /// Headers to sign (names in any case); `host` must be among them.
    pub headers: &'a [(String, String)],
    /// The body exactly as sent (empty for none); its SHA-256 is signed.
    pub body: &'a [u8],
}

/// Where and when a request is signed.
#[derive(Debug, Clone)]
pub struct Scope<'a> {
    /// The region the request goes to, e.g. `us-east-1`.
    pub region: &'a str,
    /// The service's signing name, e.g. `ec2`, `iam`.
    pub service: &'a str,
    /// `YYYYMMDDTHHMMSSZ` (UTC), also sent as `x-amz-date`.
    pub amz_date: &'a str,
}

impl Scope<'_> {
    fn date(&self) -> &str {
        &self.amz_date[..self.amz_date.len().min(8)]
    }

    /// `date/region/service/aws4_request`.
    pub fn credential_scope(&self) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            self.date(),
            self.region,
            self.service
        )
    }
}

/// Percent-encodes everything but the unreserved characters (`A-Z a-z 0-9 - _ . ~`), as SigV4
/// requires of query names and values (a space is `%20`, never `+`).
pub fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `name=value` pairs encoded and joined by `&`, sorted by encoded name then value.
pub fn canonical_query(query: &[(String, String)]) -> String {
    let mut pairs: Vec<_> = query
        .iter()
        .map(|(k, v)| (uri_encode(k), uri_encode(v)))
        .collect();
    pairs.sort();
    let pairs: Vec<_> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join("&")
}

/// The lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("hmac takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// The canonical request and the `;`-joined names of the signed headers.
pub fn canonical_request(req: &Request<'_>) -> (String, String) {
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, value) in req.headers {
        let name = name.to_ascii_lowercase();
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        match headers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                v.push(',');
                v.push_str(&value);
            }
            None => headers.push((name, value)),
        }
    }
    headers.sort();
    let signed: Vec<_> = headers.iter().map(|(n, _)| n.as_str()).collect();
    let signed = signed.join(";");
    let lines: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        req.method,
        req.path,
        canonical_query(req.query),
        lines,
        signed,
        sha256_hex(req.body)
    );
    (canonical, signed)
}

/// The string to sign: the algorithm, the time, the scope and the canonical request's hash.
pub fn string_to_sign(scope: &Scope<'_>, canonical: &str) -> String {
    format!(
        "{ALGORITHM}\n{}\n{}\n{}",
        scope.amz_date,
        scope.credential_scope(),
        sha256_hex(canonical.as_bytes())
    )
}

/// The signing key: HMAC chained over the date, region, service and `aws4_request`.
pub fn signing_key(secret: &str, scope: &Scope<'_>) -> Vec<u8> {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), scope.date().as_bytes());
    let k_region = hmac(&k_date, scope.region.as_bytes());
    let k_service = hmac(&k_region, scope.service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

/// The `Authorization` header value of a request whose headers already hold `x-amz-date` (and
/// `x-amz-security-token` when the credentials have one).
pub fn authorization(creds: &Credentials, scope: &Scope<'_>, req: &Request<'_>) -> String {
    let (canonical, signed) = canonical_request(req);
    let to_sign = string_to_sign(scope, &canonical);
    let signature = hex::encode(hmac(
        &signing_key(&creds.secret_access_key, scope),
        to_sign.as_bytes(),
    ));
    format!(
        "{ALGORITHM} Credential={}/{}, SignedHeaders={signed}, Signature={signature}",
        creds.access_key_id,
        scope.credential_scope()
    )
}

/// `YYYYMMDDTHHMMSSZ` for a time (UTC).
pub fn amz_date(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t.max(UNIX_EPOCH));
    let (month, (h, m, s)) = (u8::from(t.month()), t.to_hms());
    format!(
        "{:04}{month:02}{:02}T{h:02}{m:02}{s:02}Z",
        t.year(),
        t.day()
    )
}
