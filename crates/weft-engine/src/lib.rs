//! weft-engine: turns cluster operations into jobs of node tasks and runs them against
//! provisioners. It knows nothing of HTTP: weft-server parses requests, calls one function here and
//! renders what comes back (errors through its one error module).
//!
//! Every step reads rows from the store, decides the new states in memory, and commits all of its
//! changes in one [`ChangeSet`](weft_store::ChangeSet) guarded by row revisions, so a crash between
//! steps loses nothing and a step that raced another one is simply re-run ([`retry_stale`]).
//!
//! A job's DAG (from the planner) is stored as task rows: each holds the ids of its successors and
//! how many predecessors are not done yet. Gates (the planner's no-work join points) are task rows
//! with action `GATE` that complete the moment their predecessors do; every job ends in one gate,
//! `<jobId>-end`, whose completion completes the job. A task whose predecessors are done goes into
//! its tenant's queue (state `queued`); `take` leases it to a worker; `finish` records the result
//! and releases its successors.
//!
//! Entry points, one per operation:
//! * clusters: [`create::create_cluster`] (and its dry run); the operations of [`ops`]
//!   ([`ops::reconfigure`], [`ops::add_services`], [`ops::remove_service`], [`ops::expand`],
//!   [`ops::shrink`], [`ops::upgrade`], [`ops::service_action`],
//!   [`ops::set_lease`]), each of which starts its job with [`jobs::start_job`]; template sync,
//!   impact previews and declared clusters ([`declared::sync`], [`declared::impact`],
//!   [`declared::apply`], [`declared::export`]), moved in one job by [`transition`];
//!   [`delete::delete_cluster`]; [`replace::replace_node`]; [`drift::run_check`] and
//!   [`drift::latest`] (drift checks); [`control::pause_cluster`], [`control::resume_cluster`],
//!   [`rollback::abort_cluster`]; [`rollback::after_failed_job`] (automatic rollbacks);
//! * tasks: [`work::take`], [`work::finish`], [`work::fail_over_leases`];
//! * reading: [`view`] (clusters, nodes, jobs and plans as the API shows them), [`catalog`]
//!   (templates resolved in a tenant), [`gaps`] (what catalog entries name that the catalog
//!   lacks), [`preview::preview_layout`] (a layout without a cluster), [`lint::test_template`]
//!   (a template tested offline against a catalog, pure);
//! * the catalog: [`entities`] (entries read and written, provider secrets masked and sealed),
//!   [`transfer`] (export and import of a whole catalog), [`plugins`] (plugin types and
//!   resources);
//! * background: [`janitor`], [`callbacks`], [`hostpool::spawn`] (hosts back to their pools),
//!   [`workers::rebalance`] (tenants' workers placed on provisioners).
//!
//! Modules, bottom up: `error`, `metrics` (process counters), `clock` (where the engine reads
//! the time), `seal` (secrets sealed at rest), `body` (what the engine keeps in each
//! row's JSON), `retry`, `cache` (what payloads derive from a cluster, per process), `context` (the
//! [`Engine`], [`Caller`]), `catalog`, `workers`, `view`, `gaps`, `hostpool` (lending pool hosts to nodes),
//! `entities` (catalog writes), `jobs` (starting jobs), `control`, `health`, `plugins` (plugin
//! types and resources), `replace` (replacing a node), `transfer` (catalog export and import),
//! `create`, `ops`,
//! `preview`, `delete`, `drift` (drift checks, automatic replacement), `transition` (a cluster
//! moved to a declared state), `declared` (template sync and impact, apply, export), `rollback`,
//! `lint` (template tests), `work` (take and
//! finish), `janitor`, `callbacks`.
//! ARCHITECTURE.md writes the order down and a test of weft-server checks it.
#![warn(missing_docs)]

pub mod apikeys;
pub mod audit;
pub mod body;
pub mod cache;
pub mod callbacks;
pub mod catalog;
pub mod clock;
pub mod context;
pub mod control;
pub mod cost;
pub mod create;
pub mod declared;
pub mod delete;
pub mod drift;
pub mod entities;
pub mod error;
pub mod events;
pub mod feed;
pub mod gaps;
mod gate;
pub mod health;
pub mod hostpool;
pub mod idle;
pub mod ids;
pub mod janitor;
pub mod jobs;
pub mod lint;
mod membership;
pub mod metrics;
pub mod nodes;
pub mod ops;
pub mod plugins;
pub mod pools;
pub mod preview;
pub mod profiles;
pub mod provisioners;
pub mod replace;
pub mod reseal;
pub mod retry;
pub mod rollback;
pub mod seal;
pub mod showback;
pub mod sweep;
pub mod tenants;
pub mod transfer;
pub mod transition;
pub mod view;
pub mod webhooks;
pub mod work;
pub mod workers;

pub use clock::{now_ms, Clock, ManualClock, SystemClock};
pub use context::{
    notify, Caller, Engine, EngineSettings, Messenger, Quiet, Role, SweepError, WebhookSettings,
    HEAVY_READS,
};
pub use error::{EngineError, EngineResult};
pub use events::{JobEvent, JobEventKind};
pub use ids::{cluster_id_text, parse_cluster_id, GATE};
pub use retry::{retry_stale, store_err};
