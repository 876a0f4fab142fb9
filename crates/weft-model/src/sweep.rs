//! What `POST /v2/providers/{name}/sweep` answers: machines that carry weft's marks (aws tags,
//! docker labels) for the caller's tenant but belong to no live node of it, and, when asked to
//! delete them, what was deleted and what could not be.

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// A machine weft marked as a node's, as its provider lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SweptMachine {
    /// The provider type that made it (`aws`, `docker`).
    pub providertype: String,
    /// The provider's id of the machine (instance id, container name).
    pub providerid: String,
    /// The node id in the machine's marks.
    pub node: String,
    /// The cluster id in the machine's marks.
    pub cluster: String,
    /// The tenant id in the machine's marks (`-` or empty when none was known).
    pub tenant: String,
    /// The machine's state as the provider says it (`running`, `exited`...).
    pub state: String,
}

/// The answer of a sweep: the orphans found and, with `delete=true`, the outcome for each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SweepReport {
    /// Machines with weft's marks for this tenant whose node is not live.
    pub machines: Vec<SweptMachine>,
    /// Provider ids of the machines deleted (only with `delete=true`).
    #[serde(default)]
    pub deleted: Vec<String>,
    /// Machines that could not be deleted: provider id and message.
    #[serde(default)]
    pub errors: Vec<SweepError>,
}

/// A machine a sweep failed to delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SweepError {
    /// The provider's id of the machine (instance id, container name).
    pub providerid: String,
    /// Why it could not be deleted.
    pub message: String,
}
