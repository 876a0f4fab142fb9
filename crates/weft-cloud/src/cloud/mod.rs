//! The cloud layer: what every cloud provider (`aws`, `openstack`, `rackspace`, `google`,
//! `joyent`) shares, written once.
//!
//! A cloud implements the small [`Cloud`] trait: read its account from the provider fields,
//! prepare a launch request, launch, look machines up (by id, by a node's marks, all of weft's),
//! terminate one. Its answers are typed ([`Machine`], [`Launched`]); no provider code walks raw
//! JSON. [`CloudProvider`] turns any [`Cloud`] into a [`crate::Provider`], and holds every rule
//! of the lifecycle:
//!
//! - **CREATE** is idempotent: it looks for a live machine with the node's [`Marks`] before each
//!   launch and takes it over (terminating younger twins); a launch the cloud refuses because the
//!   machine exists ([`Launched::Taken`]) looks again; a retryable failure waits ([`Backoff`],
//!   full jitter) and looks again; a fatal one fails at once and is never retried.
//! - **CONFIRM** waits through pending states and through eventual consistency (a machine not yet
//!   known right after its launch counts as pending) until it runs with an address; the address
//!   SSH uses is chosen by the shared field `ssh_address`.
//! - **DELETE** terminates the machine of the task's `providerid` and every live machine with the
//!   node's marks (twins included); one already gone is success; it waits until each is gone,
//!   then lets the cloud drop the cluster's key once no machine of the cluster is left.
//! - **STATUS** and `machines()` (drift, `weft provider sweep`) read the same typed machines.
//!
//! Around every call: the account's request budget ([`crate::throttle`], shared by all workers
//! of a provisioner), one HTTP send path ([`http::send`]), errors classified once
//! ([`CloudError`]), and one [`Timing`].

pub mod error;
pub mod fields;
pub mod http;
pub mod machine;
pub mod provider;
pub mod time;
pub mod token;
pub mod wait;

pub use error::CloudError;
pub use machine::{
    Addresses, Confirmed, Launched, Login, Machine, Marks, Prepared, SshAddress, State, MARK_KEYS,
    MARK_NODE,
};
pub use provider::{Cloud, CloudProvider, Prepare, Waits};
pub use wait::{poll_until, retry_after, with_retries, Backoff, Poll};

use std::time::Duration;

/// How long a cloud provider waits between tries and for how long in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The first pause between two tries or two polls (its ceiling doubles up to `max`).
    pub first: Duration,
    /// The longest pause between two tries or two polls.
    pub max: Duration,
    /// How long one call is retried at most.
    pub calls: Duration,
    /// How long a machine is waited for at most (running, gone, an operation done).
    pub wait: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            first: Duration::from_secs(1),
            max: Duration::from_secs(20),
            calls: Duration::from_secs(120),
            wait: Duration::from_secs(900),
        }
    }
}
