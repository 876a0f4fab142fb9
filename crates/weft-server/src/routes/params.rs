//! What routes read from requests besides their typed bodies: lenient JSON bodies, version path
//! segments, `?dryrun=true`.

use axum::body::Bytes;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use weft_model::lenient;

use crate::error::ApiResult;

/// Reads a JSON request body leniently into `T`; `what` names the expected body in messages.
pub fn parse_body<T: DeserializeOwned>(body: &Bytes, what: &str) -> ApiResult<T> {
    Ok(lenient::parse_as(body, what)?)
}

/// Parses a version path segment as Coopr did (`weft_engine::entities::parse_version`).
pub fn parse_version(s: &str) -> ApiResult<u64> {
    Ok(weft_engine::entities::parse_version(s)?)
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
