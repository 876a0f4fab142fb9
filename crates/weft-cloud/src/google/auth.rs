//! Service-account authentication for Google APIs: the JSON key (the sensitive field `json_key`)
//! is read once per call, an RS256-signed JWT assertion is exchanged for an access token at the
//! key's `token_uri` (OAuth 2.0 JWT bearer grant), and the token is cached until shortly before
//! it expires. Neither the key nor a token ever appears in an error message.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rsa::pkcs1v15::SigningKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::signature::{SignatureEncoding, Signer};
use rsa::RsaPrivateKey;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use weft_model::FailureReason;

use crate::cloud::token::Renew;
use crate::cloud::CloudError;

/// The scope weft asks for: read and write Compute Engine resources.
pub const SCOPE: &str = "https://www.googleapis.com/auth/compute";
/// Google's token endpoint, for keys that do not name one.
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// How long an assertion is valid (Google accepts at most an hour).
const ASSERTION_LIFETIME: u64 = 3600;
/// A token is renewed when it has less than 5 minutes left (or half its lifetime).
pub const RENEW: Renew = Renew {
    ahead: Duration::from_secs(300),
    part: 2,
};

/// A service account's JSON key, parsed.
pub struct ServiceAccount {
    /// The account's email (`client_email`): the assertion's issuer.
    pub client_email: String,
    /// The key's id (`private_key_id`), sent as the assertion's `kid`; empty when the key has none.
    pub private_key_id: String,
    /// Where tokens are asked for (`token_uri`); [`DEFAULT_TOKEN_URI`] when the key names none.
    pub token_uri: String,
    /// The key's `project_id` (the default project).
    pub project_id: Option<String>,
    key: RsaPrivateKey,
    /// Identifies the key in the token cache (a hash, never the key itself).
    cache_key: String,
}

impl std::fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.client_email)
            .field("token_uri", &self.token_uri)
            .finish_non_exhaustive()
    }
}

fn str_field<'a>(v: &'a Value, name: &str) -> Option<&'a str> {
    v.get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

impl ServiceAccount {
    /// Reads a service-account JSON key. Errors name the field and never quote the key.
    pub fn from_json(text: &str) -> Result<ServiceAccount, String> {
        let v: Value = serde_json::from_str(text)
            .map_err(|_| "provider field json_key is not a JSON document".to_string())?;
        if let Some(t) = str_field(&v, "type").filter(|t| *t != "service_account") {
            return Err(format!(
                "provider field json_key: type is {t:?}, not a service_account key"
            ));
        }
        let missing = |f: &str| format!("provider field json_key has no {f}");
        let client_email = str_field(&v, "client_email").ok_or_else(|| missing("client_email"))?;
        let pem = str_field(&v, "private_key").ok_or_else(|| missing("private_key"))?;
        let key = RsaPrivateKey::from_pkcs8_pem(pem).map_err(|_| {
            "provider field json_key: private_key is not a PKCS#8 RSA key in PEM form".to_string()
        })?;
        let token_uri = str_field(&v, "token_uri").unwrap_or(DEFAULT_TOKEN_URI);
        let digest = Sha256::digest([client_email, token_uri, pem].join("\0"));
        Ok(ServiceAccount {
            client_email: client_email.to_string(),
            private_key_id: str_field(&v, "private_key_id").unwrap_or("").to_string(),
            token_uri: token_uri.to_string(),
            project_id: str_field(&v, "project_id").map(str::to_string),
            key,
            cache_key: format!("{digest:x}"),
        })
    }

    /// A hash of the key's private part, to derive other secrets from (never the key itself).
    pub fn key_digest(&self) -> &str {
        &self.cache_key
    }

    /// The signed JWT asserting this account, issued at `now` (seconds since the epoch).
    pub fn assertion(&self, now: u64) -> String {
        let mut header = json!({"alg": "RS256", "typ": "JWT"});
        if !self.private_key_id.is_empty() {
            header["kid"] = json!(self.private_key_id);
        }
        let claims = json!({
            "iss": self.client_email,
            "scope": SCOPE,
            "aud": self.token_uri,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signer = SigningKey::<Sha256>::new(self.key.clone());
        let signature = signer.sign(signing_input.as_bytes()).to_bytes();
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// What the token endpoint answers (RFC 6749 §5.1 and §5.2).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct TokenAnswer {
    access_token: Option<String>,
    expires_in: Option<u64>,
    error: Option<String>,
    error_description: Option<String>,
}

/// Exchanges a fresh assertion for an access token and its lifetime. A refused grant
/// (`invalid_grant`, `invalid_client`, `unauthorized_client`: a wrong, revoked or rotated key)
/// is fatal with reason `auth`.
pub async fn fetch_token(
    http: &reqwest::Client,
    account: &ServiceAccount,
) -> Result<(String, Duration), CloudError> {
    const API: &str = "google-oauth";
    let assertion = account.assertion(unix_now());
    let req = http.post(&account.token_uri).form(&[
        ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
        ("assertion", assertion.as_str()),
    ]);
    let a = crate::cloud::http::send(API, None, req).await?;
    let body: TokenAnswer = serde_json::from_str(&a.text).unwrap_or_default();
    if !a.is_success() {
        let code = body.error.unwrap_or_else(|| "token_error".into());
        let refused = matches!(
            code.as_str(),
            "invalid_grant" | "invalid_client" | "unauthorized_client"
        );
        let message = body
            .error_description
            .unwrap_or_else(|| "the token request failed".into());
        let message = format!("{message} (service account {})", account.client_email);
        let e = CloudError::from_status(API, a.status, code, message, a.retry_after);
        return Err(if refused {
            e.because(FailureReason::Auth)
        } else {
            e
        });
    }
    let Some(token) = body.access_token.filter(|t| !t.is_empty()) else {
        let m = "the token endpoint answered without an access_token";
        return Err(CloudError::from_status(API, a.status, "no_token", m, None));
    };
    Ok((token, Duration::from_secs(body.expires_in.unwrap_or(3600))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_key_is_refused_without_quoting_it() {
        for text in [
            "not json",
            r#"{"type": "authorized_user"}"#,
            r#"{"client_email": "a@b"}"#,
            r#"{"client_email": "a@b", "private_key": "SECRET-MATERIAL"}"#,
        ] {
            let e = ServiceAccount::from_json(text).unwrap_err();
            assert!(e.contains("json_key"), "{e}");
            assert!(!e.contains("SECRET-MATERIAL"), "{e}");
        }
    }
}
