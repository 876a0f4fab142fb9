//! The state every handler shares: the engine (with the store), the plugin resource store, the
//! settings and the calls to provisioners.

use std::sync::Arc;

use weft_engine::Engine;
use weft_store::Store;

use crate::config::Settings;
use crate::outbound::{Courier, Outbound};
use crate::resources::ResourceStore;

/// Everything a handler needs, cloned into each request (every part is shared).
#[derive(Clone)]
pub struct AppState {
    /// The engine: every cluster operation and task step goes through it.
    pub engine: Engine,
    /// The engine's store (the same one), for the routes that read and write catalog entries,
    /// tenants and keys.
    pub store: Arc<dyn Store>,
    /// Where plugin resource bytes are kept.
    pub resources: Arc<dyn ResourceStore>,
    /// The validated settings the server started with.
    pub settings: Arc<Settings>,
    /// Calls to provisioners (tenant worker counts and resources).
    pub outbound: Arc<Outbound>,
    /// What those calls need besides the HTTP client; the engine's messenger too.
    pub courier: Courier,
    /// Provisioner tokens, when the internal port requires one (`provisioner_token_file`).
    pub tokens: Option<Arc<weft_client::tokens::Tokens>>,
}

/// Milliseconds since the Unix epoch (the engine's clock).
pub use weft_engine::now_ms;
