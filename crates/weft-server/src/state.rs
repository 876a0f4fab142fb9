//! The state every handler shares: the store, the plugin resource store and the settings.

use std::sync::Arc;

use weft_store::Store;

use crate::config::Settings;
use crate::engine::JobEvent;
use crate::resources::ResourceStore;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub resources: Arc<dyn ResourceStore>,
    pub settings: Arc<Settings>,
    /// Job notices (start, success, failure), after they are committed.
    pub events: tokio::sync::broadcast::Sender<JobEvent>,
    /// Calls to provisioners (tenant worker counts and resources).
    pub outbound: Arc<crate::outbound::Outbound>,
    /// What task payloads derive from clusters (see `engine::cache`).
    pub payloads: Arc<crate::engine::cache::PayloadCache>,
    /// Provisioners recently seen registered (see `engine::cache`).
    pub provisioners: Arc<crate::engine::cache::ProvisionerCache>,
    /// Tasks this server leased and that have not finished yet (see `engine::cache`).
    pub leases: Arc<crate::engine::cache::LeaseCache>,
    /// Permits for answers that read a whole cluster ([`HEAVY_READS`] at once), so that many
    /// concurrent reads of a large cluster queue instead of multiplying peak memory.
    pub heavy_reads: Arc<tokio::sync::Semaphore>,
    /// Provisioner tokens, when the internal port requires one (`provisioner_token_file`).
    pub tokens: Option<Arc<weft_client::tokens::Tokens>>,
}

/// How many whole-cluster answers are built at once.
pub const HEAVY_READS: usize = 4;

/// Milliseconds since the Unix epoch. The one place the HTTP layer reads the clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
