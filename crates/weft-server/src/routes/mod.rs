//! The REST API v2 handlers, one module per route group. `external` and `internal` assemble the two
//! listeners' routes (with their OpenAPI documentation).

pub mod apikeys;
pub mod audit;
pub mod catalog;
pub mod cluster_ops;
pub mod clusters;
pub mod costs; // showback (weft addition)
pub mod drift; // drift checks, node replacement (weft addition)
pub mod entities;
pub mod events;
pub mod health; // health runs (weft addition)
pub mod hostpools; // host pools (weft addition)
pub mod metrics;
pub mod nodes;
pub mod params; // what routes read from requests
pub mod plugins;
pub mod profile;
pub mod provisioners;
pub mod solve; // layout preview (weft addition)
pub mod sweep; // provider sweep
pub mod tasks;
pub mod tenants;
pub mod webhooks; // tenants' webhooks (issue 38)

use crate::api::Api;

/// Routes of the external port (55054).
pub fn external(resource_limit: usize) -> Api {
    let api = Api::new("");
    let api = entities::routes(api);
    let api = catalog::routes(api);
    let api = clusters::routes(api);
    let api = cluster_ops::routes(api);
    let api = health::routes(api); // health runs
    let api = drift::routes(api); // drift checks, node replacement
    let api = nodes::routes(api);
    let api = hostpools::routes(api); // host pools
    let api = sweep::routes(api); // provider sweep
    let api = costs::routes(api); // showback
    let api = solve::routes(api); // layout preview
    let api = tenants::routes(api);
    let api = plugins::external_routes(api, resource_limit);
    let api = profile::routes(api);
    let api = provisioners::external_routes(api);
    let api = metrics::routes(api);
    let api = audit::routes(api);
    let api = events::routes(api);
    let api = webhooks::routes(api);
    apikeys::routes(api)
}

/// Routes of the internal (provisioner) port (55055). No identity headers are checked here.
pub fn internal() -> Api {
    let api = Api::new(" (internal port)");
    let api = plugins::internal_routes(api);
    let api = tasks::routes(api);
    provisioners::internal_routes(api)
}
