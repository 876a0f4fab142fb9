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

/// The `?version=` query parameter: a template version, absent (or empty) for the latest.
#[derive(Debug, Deserialize)]
pub struct VersionQuery {
    /// The raw value.
    #[serde(default)]
    pub version: Option<String>,
}

impl VersionQuery {
    /// The version asked for; a 400 when it is not a positive number.
    pub fn version(&self) -> ApiResult<Option<u64>> {
        match self.version.as_deref().map(str::trim) {
            None | Some("") => Ok(None),
            Some(v) => parse_version(v).map(Some),
        }
    }
}

/// The `?dryrun=` and `?force=` query parameters of operations that can be previewed.
#[derive(Debug, Deserialize)]
pub struct DryRun {
    /// The raw value; `true` (any case) or `1` means a dry run.
    pub dryrun: Option<String>,
    /// The raw value; `true` (any case) or `1` runs the operation past the services'
    /// availability rules (recorded on the job).
    #[serde(default)]
    pub force: Option<String>,
}

fn flag(v: Option<&str>) -> bool {
    v.is_some_and(|d| d.eq_ignore_ascii_case("true") || d == "1")
}

impl DryRun {
    /// Whether the request asks for a dry run only.
    pub fn on(&self) -> bool {
        flag(self.dryrun.as_deref())
    }

    /// How the operation runs: dry or not, forced or not.
    pub fn mode(&self) -> weft_engine::jobs::RunMode {
        weft_engine::jobs::RunMode {
            dry_run: self.on(),
            force: flag(self.force.as_deref()),
        }
    }
}
