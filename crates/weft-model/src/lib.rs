//! weft-model: the domain types that every other crate shares.
//!
//! This crate holds the Coopr REST API v2 JSON shapes (the wire format is a commitment: change it only
//! with care), the lenient JSON reader that accepts what Coopr's Gson accepted, and the validation rules
//! that do not need a store. It does no IO.
#![warn(missing_docs)]

pub mod audit;
pub mod cluster;
pub mod cost;
pub mod declared;
pub mod diff;
pub mod drift;
pub mod entity;
pub mod error;
pub mod event;
pub mod failure;
pub mod health;
pub mod hostpool;
pub mod lenient;
pub mod plugin;
pub mod resolve;
pub mod rollout;
pub mod sweep; // provider sweep
pub mod tenant;
pub mod validate;
pub mod webhook;

pub use cluster::*;
pub use cost::CostEstimate;
pub use declared::{ApplyRequest, ClusterChange, ClusterSpec};
pub use diff::{diff, DiffKind, DiffLine};
pub use drift::{
    AutoReplacement, DriftReport, DriftRun, MachineReport, MachineState, NodeDrift, ReplaceRun,
    STATUS_RESULT_KEY,
};
pub use entity::*;
pub use error::ModelError;
pub use event::{Event, EventKind};
pub use failure::{FailureReason, TaskFailure};
pub use health::{
    ClusterHealth, HealthReport, HealthRun, HealthState, NodeHealth, ServiceHealth,
    HEALTH_RESULT_KEY,
};
pub use hostpool::{HostSpec, HostState, LabelSelector, PoolHost, PoolHostRequest};
pub use plugin::*;
pub use rollout::{
    GateFailure, MaxInFlight, OnFailure, Rollout, RolloutOutcome, RolloutReport, RolloutSpec,
};
pub use sweep::{SweepError, SweepReport, SweptMachine}; // provider sweep
pub use tenant::*;
pub use validate::{validate_name, Validate};
pub use webhook::{
    Delivery, DeliveryStatus, Webhook, WebhookCreated, WebhookFormat, WebhookRequest,
};

/// Coopr's "unbounded" integer: Java's `Integer.MAX_VALUE`.
pub const UNBOUNDED: u64 = 2_147_483_647;

/// The largest cluster the server accepts by default (Coopr's `server.max.cluster.size`); the
/// server's `max_cluster_size` setting changes it, up to [`LARGEST_CLUSTER`].
pub const MAX_CLUSTER_SIZE: u64 = 10_000;

/// The most nodes weft plans for one cluster, whatever the server's `max_cluster_size` says.
pub const LARGEST_CLUSTER: u64 = 100_000;
