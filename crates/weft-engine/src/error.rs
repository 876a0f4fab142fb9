//! What can go wrong in the engine, in the engine's own terms.
//!
//! Each variant's text is the message a caller reads; weft-server's `error` module (the one place
//! that knows HTTP) picks the status code for each variant and keeps these texts as the body.

use weft_model::ModelError;
use weft_store::StoreError;

/// An engine error.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A request that breaks a rule of its own: the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// A request that the model's readers or validators refused.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Provider fields that the provider type requires and the request does not give:
    /// `[{"<field>": FieldSchema}, ...]`, one entry per alternative set.
    #[error("missing fields")]
    MissingFields(serde_json::Value),
    /// A catalog entry that a request names and the tenant does not have (`kind` as a reader says
    /// it: "cluster template", "provider", "provider type").
    #[error("{kind} {name} does not exist.")]
    NotInCatalog {
        /// What kind of entry, as a reader says it ("cluster template", "provider", ...).
        kind: &'static str,
        /// The entry's name.
        name: String,
    },
    /// A plugin type the catalog names (a provider's `providertype`) that no provisioner has
    /// registered yet: the request may work once one has, so it is a conflict, not a 404.
    #[error("no provisioner offers {kind} {name}: none has registered it yet")]
    NotOffered {
        /// What kind of plugin type ("provider type").
        kind: &'static str,
        /// The plugin type's name.
        name: String,
    },
    /// A catalog entity asked for by name (and version) that the tenant does not have (`kind`
    /// is [`EntityKind::label`](weft_model::EntityKind::label); Coopr's double space kept).
    #[error("{kind} {name}  not found.")]
    EntityNotFound {
        /// The entity kind's label ("cluster template", "provider", ...).
        kind: &'static str,
        /// The name asked for.
        name: String,
    },
    /// A catalog entity created under a name the tenant already uses.
    #[error("{kind} {name} already exists")]
    EntityExists {
        /// The entity kind's label ("cluster template", "provider", ...).
        kind: &'static str,
        /// The name already in use.
        name: String,
    },
    /// A plugin kind in a path other than `providertypes` and `automatortypes`.
    #[error("unknown plugin type {0}: expected providertypes or automatortypes")]
    UnknownPluginKind(String),
    /// A plugin type that no provisioner has registered (`kind` as its label says it).
    #[error("{kind} {name} not found.")]
    PluginNotFound {
        /// The plugin kind's label ("provider plugin" or "automator plugin").
        kind: &'static str,
        /// The plugin type's name.
        name: String,
    },
    /// A resource type that the plugin type does not declare.
    #[error("{rtype} for {kind} {plugin} not found.")]
    ResourceTypeNotFound {
        /// The resource type asked for.
        rtype: String,
        /// The plugin kind's label ("provider plugin" or "automator plugin").
        kind: &'static str,
        /// The plugin type's name.
        plugin: String,
    },
    /// A version of a plugin resource that is not there (staged or recalled).
    #[error("resource {name} version {version} not found.")]
    ResourceVersionNotFound {
        /// The resource's name.
        name: String,
        /// The version asked for.
        version: u64,
    },
    /// A plugin resource's bytes asked for by a provisioner that are not there.
    #[error("Resource not found.")]
    ResourceNotFound,
    /// A resource deleted while one of its versions is live, staged or recalled.
    #[error("Resource not in a deletable state.")]
    ResourceNotDeletable,
    /// The template names what the catalog lacks (written before its parts, as Coopr allowed).
    #[error("cluster template {template} cannot make this cluster yet: {}", missing.join("; "))]
    Incomplete {
        /// The cluster template's name.
        template: String,
        /// What the catalog lacks, one sentence each.
        missing: Vec<String>,
    },
    /// A cluster that is not there (or not the caller's tenant's).
    #[error("cluster {0} not found.")]
    ClusterNotFound(String),
    /// A service that the cluster does not run.
    #[error("service {service} is not on cluster {cluster}")]
    ServiceNotOnCluster {
        /// The service's name.
        service: String,
        /// The cluster's id.
        cluster: String,
    },
    /// A service that the cluster runs and the catalog no longer has.
    #[error("service {0} no longer exists")]
    ServiceGone(String),
    /// A node that is not there (or not the caller's to see).
    #[error("node {0} not found.")]
    NodeNotFound(String),
    /// A node record written as new whose id is taken.
    #[error("node {0} already exists")]
    NodeExists(String),
    /// A cluster that is not there (or not the caller's), or has no job yet, asked for its plans.
    #[error("Plans for cluster {0} not found.")]
    PlansNotFound(String),
    /// A job that is not there.
    #[error("job {0} not found.")]
    JobNotFound(String),
    /// A user with no profile asked for it.
    #[error("profile for user {0} not found.")]
    ProfileNotFound(String),
    /// No live provisioner could do what was asked (a sweep): which, and why.
    #[error("{0}")]
    NoProvisioner(String),
    /// A provider without a host pool, asked for its hosts.
    #[error("provider {provider} has no host pool: its type is {providertype}, not hostpool")]
    NotAPool {
        /// The provider's name.
        provider: String,
        /// Its provider type (not `hostpool`).
        providertype: String,
    },
    /// A host a pool does not have.
    #[error("host {host} not found in the pool of provider {provider}.")]
    HostNotFound {
        /// The provider whose pool was searched.
        provider: String,
        /// The host id asked for.
        host: String,
    },
    /// A host whose id, or address and port, another host of the tenant has.
    #[error("host {host} (or another host at {address}:{port}) already exists")]
    HostExists {
        /// The new host's id.
        host: String,
        /// The new host's address.
        address: String,
        /// The new host's SSH port.
        port: u16,
    },
    /// A host lent to a node, asked to leave its pool.
    #[error("host {host} is lent to node {node} of cluster {cluster}: delete the cluster (or shrink it) first")]
    HostInUse {
        /// The host's id.
        host: String,
        /// The node that holds it.
        node: String,
        /// The id of that node's cluster.
        cluster: String,
    },
    /// A provisioner that is not registered (a heartbeat: it registers again).
    #[error("Provisioner {0} not found.")]
    ProvisionerNotFound(String),
    /// A tenant the superadmin asked for that does not exist.
    #[error("tenant {0} not found")]
    TenantNotFound(String),
    /// A tenant name that is taken.
    #[error("tenant {0} already exists")]
    TenantExists(String),
    /// A tenant's workers do not fit what the provisioners have free.
    #[error("not enough worker capacity: tenant {tenant} asks for {asks} workers, registered provisioners have {free} free")]
    NoWorkerCapacity {
        /// The tenant's name.
        tenant: String,
        /// The workers the tenant would have.
        asks: u32,
        /// The workers free on the registered provisioners, other tenants' deducted.
        free: u64,
    },
    /// A tenant's new limits are below what it has.
    #[error("tenant {tenant} has {clusters} clusters and {nodes} nodes: maxClusters {max_clusters} and maxNodes {max_nodes} would be below its usage")]
    LimitsBelowUsage {
        /// The tenant's name.
        tenant: String,
        /// The tenant's clusters that are not terminated.
        clusters: u64,
        /// The nodes of those clusters.
        nodes: u64,
        /// The `maxClusters` asked for.
        max_clusters: u64,
        /// The `maxNodes` asked for.
        max_nodes: u64,
    },
    /// A tenant to delete still has workers.
    #[error("tenant {tenant} still has {workers} workers; set its workers to 0 first")]
    TenantHasWorkers {
        /// The tenant's name.
        tenant: String,
        /// The workers it still has.
        workers: u32,
    },
    /// A tenant a request names (by name) that does not exist.
    #[error("tenant {0} does not exist.")]
    TenantMissing(String),
    /// A webhook that is not there (or not the caller's tenant's).
    #[error("webhook {0} not found.")]
    WebhookNotFound(String),
    /// A delivery a webhook never had.
    #[error("webhook {webhook} has no delivery of event {event}.")]
    DeliveryNotFound {
        /// The webhook's id.
        webhook: String,
        /// The event id asked for.
        event: u64,
    },
    /// A new cluster would take the tenant past its `maxClusters`.
    #[error("tenant {tenant} would exceed its quota maxClusters ({limit}): it has {has} clusters")]
    ClusterQuota {
        /// The tenant's name.
        tenant: String,
        /// Its `maxClusters`.
        limit: u64,
        /// Its clusters that are not terminated.
        has: u64,
    },
    /// A new cluster's nodes would take the tenant past its `maxNodes`.
    #[error(
        "tenant {tenant} would exceed its quota maxNodes ({limit}): it has {has} nodes and asks for {asks} more"
    )]
    NodeQuota {
        /// The tenant's name.
        tenant: String,
        /// Its `maxNodes`.
        limit: u64,
        /// The nodes of its clusters that are not terminated.
        has: u64,
        /// The nodes the request adds.
        asks: u64,
    },
    /// No layout satisfies the template's constraints: the solver's explanation.
    #[error("{0}")]
    NoLayout(String),
    /// The planner refused the operation (for example a service dependency cycle).
    #[error("{0}")]
    NoPlan(String),
    /// A create or expand would take a cluster past its template's `maxCostPerHour`, or its
    /// tenant past its budget: the message names the figures.
    #[error("{0}")]
    OverBudget(String),
    /// The plan would break a service's availability rule (quorum, minHealthy): the planner's
    /// message names the service and the numbers. `?force=true` runs it anyway.
    #[error("{0}")]
    Unavailable(String),
    /// A job is still underway on the cluster.
    #[error("Job {job} is still underway for cluster {cluster}")]
    JobUnderway {
        /// The id of the job underway.
        job: String,
        /// The cluster's id.
        cluster: String,
    },
    /// The operation needs the cluster in another status.
    #[error("cluster {cluster} is {status}; this needs it {needs}")]
    WrongStatus {
        /// The cluster's id.
        cluster: String,
        /// Its status now (`pending`, `active`, ...).
        status: String,
        /// The status or statuses the operation needs, as a phrase ("active or incomplete").
        needs: String,
    },
    /// Only a running create job can be aborted.
    #[error("Cannot be aborted at this time.")]
    CannotAbort,
    /// A cluster does not satisfy the current version of its template.
    #[error(
        "cluster {cluster} does not satisfy the current version of template {template}: {why}"
    )]
    TemplateUnsatisfied {
        /// The cluster's id.
        cluster: String,
        /// The template's name.
        template: String,
        /// What the cluster lacks or breaks.
        why: String,
    },
    /// A reviewed plan no longer matches the cluster or the change (`apply --plan`).
    #[error("{0}")]
    PlanOutdated(String),
    /// The cluster changed while the operation was being decided.
    #[error("cluster {0} changed meanwhile; try again")]
    ClusterChanged(String),
    /// A host pool has too few free hosts for the new nodes: the message says which labels.
    #[error("{0}")]
    PoolShort(String),
    /// A provisioner that is not registered asked for work.
    #[error("Provisioner {0} is not registered.")]
    NotRegistered(String),
    /// A provisioner asked for a tenant's tasks without holding workers of it.
    #[error("provisioner {provisioner} holds no workers of tenant {tenant}")]
    NotYourTenant {
        /// The provisioner's id.
        provisioner: String,
        /// The tenant named (its id).
        tenant: String,
    },
    /// A worker reported on a task it does not hold.
    #[error("Worker is not the owner of the task")]
    NotOwner,
    /// The caller's role does not allow this.
    #[error("{0}")]
    Forbidden(String),
    /// A change set lost a race with another step (re-run by [`retry_stale`](crate::retry_stale)).
    #[error("stale: {0}")]
    Stale(String),
    /// The store failed or refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A fault of the server (a row it cannot read back, ...): logged, never shown in full.
    #[error("internal error: {0}")]
    Internal(String),
    /// The master key of the sealed secrets is missing, wrong or unreadable: the message names
    /// the key file and the fix.
    #[error("secrets key: {0}")]
    SecretsKey(String),
    /// A request valid on its own that the catalog, as stored now, cannot serve: a template
    /// that resolves incomplete or invalid, a size outside its range, a lease it does not
    /// allow, no layout for a dry run.
    #[error("{0}")]
    Unservable(String),
}

impl EngineError {
    /// This error as the stored catalog's: a rule a stored entry breaks (or that a request
    /// breaks only against it) makes the request unservable, not invalid.
    pub fn against_catalog(self) -> Self {
        use EngineError as E;
        match self {
            e @ (E::Invalid(_)
            | E::Model(_)
            | E::NoLayout(_)
            | E::NoPlan(_)
            | E::TemplateUnsatisfied { .. }) => E::Unservable(e.to_string()),
            e => e,
        }
    }
}

/// What every fallible call of the engine returns.
pub type EngineResult<T> = Result<T, EngineError>;
