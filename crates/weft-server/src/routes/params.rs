//! What routes read from requests besides their typed bodies: lenient JSON bodies, version path
//! segments, `?dryrun=true`.

use axum::body::Bytes;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use weft_model::lenient;

use crate::error::{ApiError, ApiResult};

/// Reads a JSON request body leniently into `T`; `what` names the expected body in messages.
pub fn parse_body<T: DeserializeOwned>(body: &Bytes, what: &str) -> ApiResult<T> {
    Ok(lenient::parse_as(body, what)?)
}

/// Parses a version path segment as Coopr did.
pub fn parse_version(s: &str) -> ApiResult<u64> {
    let v: i64 = s
        .trim()
        .parse()
        .map_err(|_| ApiError::BadRequest("Version must be a number".into()))?;
    if v <= 0 {
        return Err(ApiError::BadRequest(
            "Version must be higher then zero".into(),
        ));
    }
    Ok(v as u64)
}

#[derive(Debug, Deserialize)]
pub struct DryRun {
    pub dryrun: Option<String>,
}

impl DryRun {
    pub fn on(&self) -> bool {
        self.dryrun
            .as_deref()
            .is_some_and(|d| d.eq_ignore_ascii_case("true") || d == "1")
    }
}
