//! The admin-defined entities of Coopr's v2 API: providers, hardware types, image types, services,
//! cluster templates and partial templates. Field names and casing are the wire format.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::lenient;

/// The kinds of versioned entity the store keeps. The first six are per tenant; the plugin types are
/// global (kept under the `superadmin` tenant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum EntityKind {
    /// `providers`: where machines come from.
    #[serde(rename = "providers")]
    Provider,
    /// `hardwaretypes`: machine sizes, as a flavor per provider.
    #[serde(rename = "hardwaretypes")]
    HardwareType,
    /// `imagetypes`: operating system images, as an image per provider.
    #[serde(rename = "imagetypes")]
    ImageType,
    /// `services`: software with lifecycle actions and dependencies.
    #[serde(rename = "services")]
    Service,
    /// `clustertemplates`: the blueprints clusters are made from.
    #[serde(rename = "clustertemplates")]
    ClusterTemplate,
    /// `partialtemplates`: pieces that cluster templates include.
    #[serde(rename = "partialtemplates")]
    PartialTemplate,
    /// `providertypes`: provider plugins, registered by provisioners (global).
    #[serde(rename = "providertypes")]
    ProviderType,
    /// `automatortypes`: automator plugins, registered by provisioners (global).
    #[serde(rename = "automatortypes")]
    AutomatorType,
}

impl EntityKind {
    /// The six admin-defined kinds, in export order.
    pub const ADMIN: [EntityKind; 6] = [
        EntityKind::Provider,
        EntityKind::HardwareType,
        EntityKind::ImageType,
        EntityKind::Service,
        EntityKind::ClusterTemplate,
        EntityKind::PartialTemplate,
    ];

    /// The path segment and export key (`providers`, `hardwaretypes`, ...). Also the store's key.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Provider => "providers",
            EntityKind::HardwareType => "hardwaretypes",
            EntityKind::ImageType => "imagetypes",
            EntityKind::Service => "services",
            EntityKind::ClusterTemplate => "clustertemplates",
            EntityKind::PartialTemplate => "partialtemplates",
            EntityKind::ProviderType => "providertypes",
            EntityKind::AutomatorType => "automatortypes",
        }
    }

    /// The words used in messages ("cluster template foo  not found.").
    pub fn label(self) -> &'static str {
        match self {
            EntityKind::Provider => "provider",
            EntityKind::HardwareType => "hardware type",
            EntityKind::ImageType => "image type",
            EntityKind::Service => "service",
            EntityKind::ClusterTemplate => "cluster template",
            EntityKind::PartialTemplate => "partial template",
            EntityKind::ProviderType => "provider plugin",
            EntityKind::AutomatorType => "automator plugin",
        }
    }

    /// The kind whose [`EntityKind::as_str`] is exactly `s`; `None` otherwise.
    pub fn parse(s: &str) -> Option<EntityKind> {
        [
            EntityKind::Provider,
            EntityKind::HardwareType,
            EntityKind::ImageType,
            EntityKind::Service,
            EntityKind::ClusterTemplate,
            EntityKind::PartialTemplate,
            EntityKind::ProviderType,
            EntityKind::AutomatorType,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// `{label, url}`; the url may contain macros.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(try_from = "Map<String, Value>")]
pub struct Link {
    /// Null or absent is "".
    #[serde(default)]
    pub label: String,
    /// Null or absent is "" (a link that goes nowhere, as Coopr kept it).
    #[serde(default)]
    pub url: String,
}

/// A link's fields, read leniently from an object (serde alone would take an array too).
#[derive(Deserialize)]
struct LinkFields {
    #[serde(default, deserialize_with = "lenient::string")]
    label: String,
    #[serde(default, deserialize_with = "lenient::string")]
    url: String,
}

impl TryFrom<Map<String, Value>> for Link {
    type Error = String;

    fn try_from(m: Map<String, Value>) -> Result<Self, String> {
        let f: LinkFields = serde_json::from_value(Value::Object(m)).map_err(|e| e.to_string())?;
        Ok(Link {
            label: f.label,
            url: f.url,
        })
    }
}

/// `{"name": ...}`, used by `extends` and `includes`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct NameRef {
    /// The name of the cluster template (in `extends`) or partial template (in `includes`) to merge
    /// in.
    #[serde(default, deserialize_with = "lenient::string")]
    pub name: String,
}

/// A provider: where machines come from (`providertype` names the plugin).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Provider {
    /// The provider's name, unique per tenant: 1 to 255 of `[A-Za-z0-9_.-]`. Templates, requests
    /// and hardware and image types refer to it by this name.
    #[serde(default, deserialize_with = "lenient::text")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            required = true,
            min_length = 1,
            max_length = 255,
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
        )
    )]
    pub name: String,
    /// A display name for user interfaces.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub label: Option<String>,
    /// Free text about the provider.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    /// An icon for user interfaces, as free text.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub icon: Option<String>,
    /// The version the server gave this one: each write stores the highest version plus one (1 for
    /// a new name); a version in a written body is ignored.
    #[serde(default, deserialize_with = "lenient::u64")]
    pub version: u64,
    /// The name of the provider type (plugin) that makes the machines (required; `aws`,
    /// `docker`, ...).
    #[serde(default, deserialize_with = "lenient::string")]
    #[cfg_attr(feature = "openapi", schema(required = true, min_length = 1))]
    pub providertype: String,
    /// Admin fields of the provider type. Values are usually strings.
    #[serde(default, deserialize_with = "lenient::object")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub provisioner: Map<String, Value>,
    /// weft extension: the currency of the prices of this provider's hardware and image types
    /// (ISO 4217, `USD`); absent: no estimates for its clusters.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_nonblank"
    )]
    #[cfg_attr(feature = "openapi", schema(pattern = r"^([A-Z]{3}| *)$"))]
    pub currency: Option<String>,
    /// weft extension: a factor on every price of this provider, as decimal text (`"0.8"`: a 20%
    /// discount); absent: 1.
    #[serde(
        rename = "priceMultiplier",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_nonblank"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = r"^ *([0-9]{1,12}(\.[0-9]{0,6})?|\.[0-9]{1,6})? *$")
    )]
    pub price_multiplier: Option<String>,
}

/// A hardware type (flavor per provider) or an image type (image per provider).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MachineType {
    /// The type's name, unique per tenant among hardware types (or among image types): 1 to 255 of
    /// `[A-Za-z0-9_.-]`.
    #[serde(default, deserialize_with = "lenient::text")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            required = true,
            min_length = 1,
            max_length = 255,
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
        )
    )]
    pub name: String,
    /// A display name for user interfaces.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub label: Option<String>,
    /// Free text about the type (`1 vCPU`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    /// An icon for user interfaces, as free text.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub icon: Option<String>,
    /// The version the server gave this one: each write stores the highest version plus one (1 for
    /// a new name); a version in a written body is ignored.
    #[serde(default, deserialize_with = "lenient::u64")]
    pub version: u64,
    /// provider name -> settings (`flavor` for hardware, `image` and optional `sshuser` for images;
    /// weft extension: `price` per hour as decimal text, in the provider's currency, for the
    /// machine (hardware) or its licence (image)).
    #[serde(default, deserialize_with = "provider_map")]
    pub providermap: BTreeMap<String, BTreeMap<String, String>>,
}

/// A hardware type: `providermap.<provider>.flavor`.
pub type HardwareType = MachineType;
/// An image type: `providermap.<provider>.image` and optional `sshuser`.
pub type ImageType = MachineType;

fn provider_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, D::Error> {
    use serde::de::Error;
    let m = lenient::object(d)?;
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let inner = lenient::string_map(v).map_err(|e| D::Error::custom(format!("{k}: {e}")))?;
        out.insert(k, inner);
    }
    Ok(out)
}

/// Lifecycle actions. Lower-case on the wire for services (`install`), upper-case in tasks and plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ProvisionerAction {
    /// Makes the node's machine (run by the provider type).
    Create,
    /// Waits until a new machine is up and reachable and learns its addresses (run by the provider
    /// type); a failed one is followed by a DELETE and a new CREATE.
    Confirm,
    /// Prepares the machine for each automator type the node's services use.
    Bootstrap,
    /// Installs a service's software.
    Install,
    /// Removes a service's software.
    Remove,
    /// Initializes an installed and configured service, before its first start.
    Initialize,
    /// Writes a service's configuration from the cluster's `config`.
    Configure,
    /// Starts a service.
    Start,
    /// Stops a service.
    Stop,
    /// Deletes the node's machine (run by the provider type).
    Delete,
    /// weft extension: checks that the service is healthy (a script that exits 0 when it is).
    /// Run only by health jobs (`POST /v2/clusters/{id}/health`), never by lifecycle plans.
    Healthcheck,
    /// weft extension: asks a node's provider whether its machine still exists (a drift check,
    /// `POST /v2/clusters/{id}/check`). A node-level action; services never declare it.
    Status,
    /// weft extension: makes a new node a member of its service's running cluster (an `etcdctl
    /// member add`), after its CONFIGURE and INITIALIZE and before its START. Run on a node that
    /// joins a service that already has members (expand, add-services, replace-node), never at
    /// create; one membership change of a service at a time (see [`Membership`]).
    Join,
    /// weft extension: takes a node out of its service's membership (an HDFS decommission, an
    /// `etcdctl member remove`) before its STOP, on a node that leaves (shrink, remove-service,
    /// replace-node of a live node). A LEAVE that fails stops the job before anything is deleted.
    Leave,
}

impl ProvisionerAction {
    /// Every action: Coopr's ten in their order, then weft's HEALTHCHECK, STATUS, JOIN and LEAVE.
    pub const ALL: [ProvisionerAction; 14] = [
        ProvisionerAction::Create,
        ProvisionerAction::Confirm,
        ProvisionerAction::Bootstrap,
        ProvisionerAction::Install,
        ProvisionerAction::Remove,
        ProvisionerAction::Initialize,
        ProvisionerAction::Configure,
        ProvisionerAction::Start,
        ProvisionerAction::Stop,
        ProvisionerAction::Delete,
        ProvisionerAction::Healthcheck,
        ProvisionerAction::Status,
        ProvisionerAction::Join,
        ProvisionerAction::Leave,
    ];

    /// Upper-case name, as in tasks, plans and node actions (`CREATE`).
    pub fn upper(self) -> &'static str {
        match self {
            ProvisionerAction::Create => "CREATE",
            ProvisionerAction::Confirm => "CONFIRM",
            ProvisionerAction::Bootstrap => "BOOTSTRAP",
            ProvisionerAction::Install => "INSTALL",
            ProvisionerAction::Remove => "REMOVE",
            ProvisionerAction::Initialize => "INITIALIZE",
            ProvisionerAction::Configure => "CONFIGURE",
            ProvisionerAction::Start => "START",
            ProvisionerAction::Stop => "STOP",
            ProvisionerAction::Delete => "DELETE",
            ProvisionerAction::Healthcheck => "HEALTHCHECK",
            ProvisionerAction::Status => "STATUS",
            ProvisionerAction::Join => "JOIN",
            ProvisionerAction::Leave => "LEAVE",
        }
    }

    /// Hardware (node-level) actions: CREATE, CONFIRM, BOOTSTRAP, DELETE, STATUS.
    pub fn is_hardware(self) -> bool {
        matches!(
            self,
            ProvisionerAction::Create
                | ProvisionerAction::Confirm
                | ProvisionerAction::Bootstrap
                | ProvisionerAction::Delete
                | ProvisionerAction::Status
        )
    }

    /// Install-time actions, ordered by install dependencies: INSTALL, REMOVE.
    pub fn is_install_time(self) -> bool {
        matches!(self, ProvisionerAction::Install | ProvisionerAction::Remove)
    }

    /// Runtime actions, ordered by runtime dependencies: INITIALIZE, START, STOP.
    pub fn is_runtime(self) -> bool {
        matches!(
            self,
            ProvisionerAction::Initialize | ProvisionerAction::Start | ProvisionerAction::Stop
        )
    }
}

/// `{requires, uses}` for one dependency class.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DependencyClass {
    /// Services (or names they `provides`) that must be on the cluster; their actions of this
    /// class run before this service's.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub requires: Vec<String>,
    /// Services whose actions of this class run before this service's when they are on the
    /// cluster; their absence is no error.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub uses: Vec<String>,
}

/// A service's dependencies.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ServiceDependencies {
    /// Other names this service answers to in other services' `requires` and `uses` (`myapp` for
    /// `myapp-2.0`).
    #[serde(default, deserialize_with = "lenient::strings")]
    pub provides: Vec<String>,
    /// Services that may not be on the same cluster as this one, on any node.
    #[serde(default, deserialize_with = "lenient::strings")]
    pub conflicts: Vec<String>,
    /// Dependencies that order INSTALL and REMOVE.
    #[serde(default, deserialize_with = "dependency_class")]
    pub install: DependencyClass,
    /// Dependencies that order INITIALIZE, START and STOP.
    #[serde(default, deserialize_with = "dependency_class")]
    pub runtime: DependencyClass,
}

fn dependency_class<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DependencyClass, D::Error> {
    lenient::section(d)
}

/// One service action: the automator type and its admin fields.
///
/// weft extension, for the `healthcheck` action only: `timeout` (seconds one try may run),
/// `tries` (how many tries before the service counts as unhealthy) and `interval` (seconds
/// between tries). Coopr knows none of them; each is left out when not set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ServiceAction {
    /// `type`: the automator type that runs the action (required; `shell`, `chef-solo`, ...).
    #[serde(rename = "type", default, deserialize_with = "lenient::string")]
    #[cfg_attr(feature = "openapi", schema(required = true, min_length = 1))]
    pub automator: String,
    /// The automator type's admin fields for this action (`script`, `run_list`, ...).
    #[serde(default, deserialize_with = "lenient::string_map")]
    pub fields: BTreeMap<String, String>,
    /// `healthcheck` only: seconds one try may run (1 to 3600; default 30).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_u64"
    )]
    pub timeout: Option<u64>,
    /// `healthcheck` only: tries before the service counts as unhealthy (1 to 100; default 3).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_u64"
    )]
    pub tries: Option<u64>,
    /// `healthcheck` only: seconds between tries (0 to 3600; default 5).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_u64"
    )]
    pub interval: Option<u64>,
}

/// How a `healthcheck` action runs: the action's settings with the defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HealthcheckSpec {
    /// Seconds one try may run.
    pub timeout: u64,
    /// Tries before the service counts as unhealthy.
    pub tries: u64,
    /// Seconds between tries.
    pub interval: u64,
}

impl HealthcheckSpec {
    /// Seconds one try may run when the action does not say.
    pub const DEFAULT_TIMEOUT: u64 = 30;
    /// Tries before a service counts as unhealthy, when the action does not say.
    pub const DEFAULT_TRIES: u64 = 3;
    /// Seconds between tries when the action does not say.
    pub const DEFAULT_INTERVAL: u64 = 5;
    /// Bounds that validation enforces (inclusive).
    pub const TIMEOUT_RANGE: (u64, u64) = (1, 3600);
    /// The `tries` that validation allows (inclusive).
    pub const TRIES_RANGE: (u64, u64) = (1, 100);
    /// The `interval` that validation allows, in seconds (inclusive).
    pub const INTERVAL_RANGE: (u64, u64) = (0, 3600);
}

impl ServiceAction {
    /// The health check settings of this action, defaults filled in.
    pub fn healthcheck_spec(&self) -> HealthcheckSpec {
        HealthcheckSpec {
            timeout: self.timeout.unwrap_or(HealthcheckSpec::DEFAULT_TIMEOUT),
            tries: self.tries.unwrap_or(HealthcheckSpec::DEFAULT_TRIES),
            interval: self.interval.unwrap_or(HealthcheckSpec::DEFAULT_INTERVAL),
        }
    }
}

/// `{"actions": {"install": {...}, ...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ServiceProvisioner {
    /// How each action of the service runs, keyed on the wire by its lower-case name (`install`);
    /// an unknown or upper-case name is refused.
    #[serde(default, deserialize_with = "actions_map")]
    pub actions: BTreeMap<ProvisionerAction, ServiceAction>,
}

/// Actions keyed by their lower-case names. Keys are read as text first, so that an error in an
/// action's body names its action (`provisioner.actions.healthcheck.tries`).
fn actions_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<ProvisionerAction, ServiceAction>, D::Error> {
    use serde::de::Error;
    let by_name = Option::<BTreeMap<String, ServiceAction>>::deserialize(d)?.unwrap_or_default();
    let mut out = BTreeMap::new();
    for (name, action) in by_name {
        let key = ProvisionerAction::ALL
            .into_iter()
            .find(|a| a.upper().to_ascii_lowercase() == name)
            .ok_or_else(|| {
                let known: Vec<String> = ProvisionerAction::ALL
                    .iter()
                    .map(|a| a.upper().to_ascii_lowercase())
                    .collect();
                D::Error::custom(format!(
                    "unknown action `{name}`, expected one of {}",
                    known.join(", ")
                ))
            })?;
        out.insert(key, action);
    }
    Ok(out)
}

fn service_provisioner<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<ServiceProvisioner, D::Error> {
    lenient::section(d)
}

fn dependencies<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ServiceDependencies, D::Error> {
    lenient::section(d)
}

/// A service: software with lifecycle actions and dependencies.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Service {
    /// The service's name, unique per tenant: 1 to 255 of `[A-Za-z0-9_.-]`. Templates, requests
    /// and other services' dependencies refer to it by this name.
    #[serde(default, deserialize_with = "lenient::text")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            required = true,
            min_length = 1,
            max_length = 255,
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
        )
    )]
    pub name: String,
    /// A display name for user interfaces.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub label: Option<String>,
    /// Free text about the service.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    /// An icon for user interfaces, as free text.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub icon: Option<String>,
    /// The version the server gave this one: each write stores the highest version plus one (1 for
    /// a new name); a version in a written body is ignored.
    #[serde(default, deserialize_with = "lenient::u64")]
    pub version: u64,
    /// What the service offers, excludes and needs, and how its actions are ordered against other
    /// services'.
    #[serde(default, deserialize_with = "dependencies")]
    pub dependencies: ServiceDependencies,
    /// `{"actions": {...}}`: how the service's lifecycle actions run.
    #[serde(default, deserialize_with = "service_provisioner")]
    pub provisioner: ServiceProvisioner,
    /// Links to the service's pages (`{label, url}`); `url` may use macros.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub links: Vec<Link>,
    /// weft extension: the service's actions use only their own node's addresses, so they may
    /// run before the other nodes of a plan have theirs. By default every service task of a plan
    /// waits for every CONFIRM of it, as Coopr's stages did: automators may read any node's
    /// addresses from the `nodes` map.
    #[serde(
        rename = "ownAddressOnly",
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "lenient::bool"
    )]
    pub own_address_only: bool,
    /// weft extension: the files the service writes its own log to on each of its nodes
    /// (absolute, or relative to the directory its actions run in), read by `weft cluster logs
    /// --service-log`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient::strings"
    )]
    pub logs: Vec<String>,
    /// weft extension: how many of the service's membership changes (JOIN, LEAVE) may run at
    /// once; absent: one at a time.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_section"
    )]
    pub membership: Option<Membership>,
    /// weft extension: what the service needs to stay available while a job stops, restarts,
    /// reconfigures with restart, upgrades, shrinks or replaces its nodes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_section"
    )]
    pub availability: Option<Availability>,
    /// weft extension: the service keeps data on its nodes. A node of it is replaced only through
    /// its LEAVE (when alive) or while the rest keeps its availability rule, and automatic
    /// replacement stops when more than one of its nodes is lost at once. A service with a
    /// `leave` action counts as stateful.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "lenient::bool"
    )]
    pub stateful: bool,
}

impl Service {
    /// Whether the service keeps data on its nodes (`stateful`, or it declares `leave`).
    pub fn holds_data(&self) -> bool {
        self.stateful
            || self
                .provisioner
                .actions
                .contains_key(&ProvisionerAction::Leave)
    }

    /// How many membership changes of the service may run at once (at least 1).
    pub fn max_concurrent_changes(&self) -> usize {
        self.membership
            .as_ref()
            .and_then(|m| m.max_concurrent)
            .map_or(1, |n| n.max(1) as usize)
    }

    /// How many of `members` nodes of the service must stay running and healthy, by its
    /// availability rule; `None` without one.
    pub fn must_stay_up(&self, members: usize) -> Option<usize> {
        let a = self.availability.as_ref()?;
        let quorum = if a.quorum { members / 2 + 1 } else { 0 };
        let min = a.min_healthy.map_or(0, |n| n as usize);
        (a.quorum || a.min_healthy.is_some()).then_some(quorum.max(min))
    }
}

/// weft extension: `{"maxConcurrent": N}`, a service's membership changes at once.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Membership {
    /// How many JOIN or LEAVE of the service may run at once (1 to 100; absent: 1).
    #[serde(
        rename = "maxConcurrent",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100))]
    pub max_concurrent: Option<u64>,
}

/// weft extension: `{"minHealthy": N}` or `{"quorum": true}` (or both: the larger holds).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Availability {
    /// At least this many of the service's nodes stay running and healthy (1 to 1000).
    #[serde(
        rename = "minHealthy",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_u64"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub min_healthy: Option<u64>,
    /// More than half of the service's nodes stay running and healthy.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "lenient::bool"
    )]
    pub quorum: bool,
}

/// Which services, hardware types and image types a cluster may use. Empty means any.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Compatibility {
    /// The hardware types a cluster may use (empty: any).
    #[serde(default, deserialize_with = "lenient::strings")]
    pub hardwaretypes: Vec<String>,
    /// The image types a cluster may use (empty: any).
    #[serde(default, deserialize_with = "lenient::strings")]
    pub imagetypes: Vec<String>,
    /// The services a cluster may have (empty: any).
    #[serde(default, deserialize_with = "lenient::strings")]
    pub services: Vec<String>,
}

/// What a create request leaves out. On input a service may be `{"name":..,"config":{..}}`; its
/// config is moved to `config[name]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(try_from = "RawDefaults")]
pub struct ClusterDefaults {
    /// The services a cluster gets when its request names none (a resolved template needs some).
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub services: Vec<String>,
    /// The provider a cluster uses when its request names none (a resolved template needs one).
    /// Blank is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// One hardware type for every node of a cluster whose request names none; absent (or blank):
    /// the solver picks per node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hardwaretype: Option<String>,
    /// One image type for every node of a cluster whose request names none; absent (or blank): the
    /// solver picks per node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imagetype: Option<String>,
    /// Empty is absent.
    #[serde(rename = "dnsSuffix", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            max_length = 192,
            pattern = r"^$|^\.?(?=.{1,191}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
        )
    )]
    pub dns_suffix: Option<String>,
    /// The cluster config passed to provisioners unchanged, unless a request gives its own (which
    /// replaces it whole). A service given as an object adds its `config` here under its name.
    #[cfg_attr(feature = "openapi", schema(value_type = Object, required = false))]
    pub config: Map<String, Value>,
}

#[derive(Deserialize)]
struct RawDefaults {
    #[serde(default)]
    services: Option<Vec<Value>>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    provider: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    hardwaretype: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_string")]
    imagetype: Option<String>,
    #[serde(rename = "dnsSuffix", default, deserialize_with = "lenient::opt_text")]
    dns_suffix: Option<String>,
    #[serde(default, deserialize_with = "lenient::object")]
    config: Map<String, Value>,
}

impl TryFrom<RawDefaults> for ClusterDefaults {
    type Error = String;

    fn try_from(raw: RawDefaults) -> Result<Self, String> {
        let mut config = raw.config;
        let mut services = Vec::new();
        for (i, s) in raw.services.unwrap_or_default().into_iter().enumerate() {
            match s {
                Value::String(name) => services.push(name),
                Value::Object(mut o) => {
                    let name = match o.remove("name") {
                        Some(Value::String(n)) => n,
                        _ => {
                            return Err(format!("services[{i}]: a service object needs a \"name\""))
                        }
                    };
                    if let Some(c) = o.remove("config").filter(|c| !c.is_null()) {
                        config.insert(name.clone(), c);
                    }
                    services.push(name);
                }
                other => {
                    return Err(format!(
                        "services[{i}]: expected a name or an object, got {other}"
                    ))
                }
            }
        }
        let blank = |s: Option<String>| s.filter(|s| !s.trim().is_empty());
        Ok(ClusterDefaults {
            services,
            provider: blank(raw.provider),
            hardwaretype: blank(raw.hardwaretype),
            imagetype: blank(raw.imagetype),
            // Only "" is absent: any other text must be a DNS suffix.
            dns_suffix: raw.dns_suffix.filter(|s| !s.is_empty()),
            config,
        })
    }
}

/// `{"min": 1, "max": 2147483647}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SizeConstraint {
    /// The fewest nodes a cluster may have: at least 1 (the default).
    #[serde(default = "one", deserialize_with = "lenient::u64_or_one")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub min: u64,
    /// Not below `min`.
    #[serde(default = "unbounded", deserialize_with = "lenient::u64_or_unbounded")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max: u64,
}

impl Default for SizeConstraint {
    fn default() -> Self {
        SizeConstraint {
            min: 1,
            max: crate::UNBOUNDED,
        }
    }
}

fn one() -> u64 {
    1
}

fn unbounded() -> u64 {
    crate::UNBOUNDED
}

/// Placement rules between services on one node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct LayoutConstraint {
    /// Each set must sit together on a node (a node with one member has all of them).
    #[serde(default, deserialize_with = "lenient::vec")]
    pub mustcoexist: Vec<BTreeSet<String>>,
    /// Each set may not sit all together on one node.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub cantcoexist: Vec<BTreeSet<String>>,
}

/// `{"min": 0, "max": 2147483647}` nodes for one service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Quantities {
    /// The fewest nodes that must carry the service (default 0).
    #[serde(default, deserialize_with = "lenient::u64")]
    pub min: u64,
    /// The most nodes that may carry the service (default 2147483647, unbounded); not below
    /// `min`.
    #[serde(default = "unbounded", deserialize_with = "lenient::u64_or_unbounded")]
    pub max: u64,
}

impl Default for Quantities {
    fn default() -> Self {
        Quantities {
            min: 0,
            max: crate::UNBOUNDED,
        }
    }
}

/// Constraints on one service: allowed hardware and image types (empty = any) and node counts.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ServiceConstraint {
    /// The hardware types the service's nodes may use (empty: any).
    #[serde(default, deserialize_with = "lenient::strings")]
    pub hardwaretypes: Vec<String>,
    /// The image types the service's nodes may use (empty: any).
    #[serde(default, deserialize_with = "lenient::strings")]
    pub imagetypes: Vec<String>,
    /// How many nodes may carry the service (absent: any number).
    #[serde(default, deserialize_with = "quantities")]
    pub quantities: Quantities,
}

fn quantities<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Quantities, D::Error> {
    lenient::section(d)
}

/// A template's constraints.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Constraints {
    /// How many nodes a cluster may have.
    #[serde(default, deserialize_with = "size")]
    pub size: SizeConstraint,
    /// Which services must, or may not, share a node.
    #[serde(default, deserialize_with = "layout")]
    pub layout: LayoutConstraint,
    /// Machine types and node counts per service, keyed by service name.
    #[serde(default, deserialize_with = "service_constraints")]
    pub services: BTreeMap<String, ServiceConstraint>,
}

fn size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SizeConstraint, D::Error> {
    lenient::section(d)
}

fn layout<'de, D: serde::Deserializer<'de>>(d: D) -> Result<LayoutConstraint, D::Error> {
    lenient::section(d)
}

fn service_constraints<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, ServiceConstraint>, D::Error> {
    Ok(Option::<BTreeMap<String, ServiceConstraint>>::deserialize(d)?.unwrap_or_default())
}

/// Lease durations in milliseconds; 0 means forever / unlimited / any step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct LeaseDuration {
    /// The lease a cluster gets when its request asks for none, and the longest it may ask for (0:
    /// forever, and a request may ask for any lease).
    #[serde(default, deserialize_with = "lenient::duration_ms")]
    pub initial: u64,
    /// How far past its create time a cluster's lease may be extended (0: without limit).
    #[serde(default, deserialize_with = "lenient::duration_ms")]
    pub max: u64,
    /// The most one extension may add to the current expiry (0: any amount).
    #[serde(default, deserialize_with = "lenient::duration_ms")]
    pub step: u64,
}

/// `{"leaseduration": {...}}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Administration {
    /// The lease rules of clusters made from the template (absent: all 0, forever).
    #[serde(default, deserialize_with = "lease")]
    pub leaseduration: LeaseDuration,
    /// weft extension: the defaults of rolling upgrades, restarts and reconfigures of clusters
    /// made from this template (each field of a request's `rollout` falls back to these). With it
    /// set, those operations roll (canaries, batches, health gates) even when a request names no
    /// rollout.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_section"
    )]
    pub rollout: Option<crate::rollout::RolloutSpec>,
    /// weft extension: the most a cluster of this template may cost per hour (decimal text, in
    /// its provider's currency); a create or expand past it is refused.
    #[serde(
        rename = "maxCostPerHour",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_nonblank"
    )]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = r"^ *([0-9]{1,12}(\.[0-9]{0,6})?|\.[0-9]{1,6})? *$")
    )]
    pub max_cost_per_hour: Option<String>,
    /// weft extension: what happens to a cluster of this template that nothing changes for a
    /// while (see [`IdlePolicy`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_section"
    )]
    pub idle: Option<IdlePolicy>,
}

/// weft extension: `{"hours": N, "autoStop": true, "warnHours": 1, "deleteMachines": false}`. An
/// active cluster whose latest job is older than `hours` is idle (`idleSince` in the API, marked
/// in the UI); with `autoStop`, the janitor records an `IDLE_WARNING` job (an event) `warnHours`
/// before, then stops its services (a forced STOP_SERVICES job), or deletes the cluster and its
/// machines when `deleteMachines` says so (for providers that charge for machines that merely
/// exist).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct IdlePolicy {
    /// Hours without a change after which the cluster is idle (1 to 8760).
    #[serde(default, deserialize_with = "lenient::u64")]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 1, maximum = 8760, required = true)
    )]
    pub hours: u64,
    /// Stop the services of an idle cluster (or delete it, with `deleteMachines`).
    #[serde(
        rename = "autoStop",
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "lenient::bool"
    )]
    pub auto_stop: bool,
    /// Hours before the stop at which the warning is recorded (default 1; at most `hours` - 1,
    /// a larger value is read as that).
    #[serde(
        rename = "warnHours",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_u64"
    )]
    pub warn_hours: Option<u64>,
    /// With `autoStop`: delete the cluster, machines included, instead of stopping its services.
    #[serde(
        rename = "deleteMachines",
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "lenient::bool"
    )]
    pub delete_machines: bool,
}

impl IdlePolicy {
    /// Milliseconds without a change after which a cluster is idle.
    pub fn idle_ms(&self) -> i64 {
        self.hours as i64 * 3_600_000
    }

    /// Milliseconds without a change after which the warning is recorded.
    pub fn warn_ms(&self) -> i64 {
        let warn = self
            .warn_hours
            .unwrap_or(1)
            .min(self.hours.saturating_sub(1));
        (self.hours - warn) as i64 * 3_600_000
    }
}

fn lease<'de, D: serde::Deserializer<'de>>(d: D) -> Result<LeaseDuration, D::Error> {
    lenient::section(d)
}

fn administration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Administration, D::Error> {
    lenient::section(d)
}

fn compatibility<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Compatibility, D::Error> {
    lenient::section(d)
}

fn defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ClusterDefaults, D::Error> {
    lenient::section(d)
}

fn constraints<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Constraints, D::Error> {
    lenient::section(d)
}

/// A cluster template: the blueprint users build clusters from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ClusterTemplate {
    /// The template's name, unique per tenant: 1 to 255 of `[A-Za-z0-9_.-]`. Create requests name
    /// it in `clusterTemplate`.
    #[serde(default, deserialize_with = "lenient::text")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            required = true,
            min_length = 1,
            max_length = 255,
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
        )
    )]
    pub name: String,
    /// A display name for user interfaces.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub label: Option<String>,
    /// Free text about the template.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    /// An icon for user interfaces, as free text.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub icon: Option<String>,
    /// The version the server gave this one: each write stores the highest version plus one (1 for
    /// a new name); a version in a written body is ignored.
    #[serde(default, deserialize_with = "lenient::u64")]
    pub version: u64,
    /// The template this one extends; `/v2/resolve` merges it (with its includes) in before this
    /// one's own includes and body. Left out of the JSON when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_section"
    )]
    pub extends: Option<NameRef>,
    /// Partial templates whose defaults and compatibility `/v2/resolve` merges in, in order, after
    /// the parent and before this template's own body.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub includes: Vec<NameRef>,
    /// Which services and machine types a cluster may use.
    #[serde(default, deserialize_with = "compatibility")]
    pub compatibility: Compatibility,
    /// What a create request leaves out.
    #[serde(default, deserialize_with = "defaults")]
    pub defaults: ClusterDefaults,
    /// Size, placement and per-service rules every layout must keep.
    #[serde(default, deserialize_with = "constraints")]
    pub constraints: Constraints,
    /// Lease rules and (weft extension) rollout defaults.
    #[serde(default, deserialize_with = "administration")]
    pub administration: Administration,
    /// Links shown with each cluster (`{label, url}`); the macros in `url` are expanded in the
    /// cluster's details.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub links: Vec<Link>,
    /// weft extension: the janitor's periodic check replaces a node whose machine is gone by
    /// itself (one at a time, a bounded number per hour). Left out of the JSON when false, so
    /// Coopr's format is unchanged.
    #[serde(
        rename = "autoReplace",
        default,
        deserialize_with = "lenient::bool",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub auto_replace: bool,
}

/// A partial template: defaults and compatibility that cluster templates include.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PartialTemplate {
    /// The partial's name, unique per tenant: 1 to 255 of `[A-Za-z0-9_.-]`. Templates name it in
    /// `includes`.
    #[serde(default, deserialize_with = "lenient::text")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            required = true,
            min_length = 1,
            max_length = 255,
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
        )
    )]
    pub name: String,
    /// A display name for user interfaces.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub label: Option<String>,
    /// Free text about the partial template.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub description: Option<String>,
    /// An icon for user interfaces, as free text.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub icon: Option<String>,
    /// The version the server gave this one: each write stores the highest version plus one (1 for
    /// a new name); a version in a written body is ignored.
    #[serde(default, deserialize_with = "lenient::u64")]
    pub version: u64,
    /// When true, the config keys this partial sets cannot be overridden by later merges.
    #[serde(default, deserialize_with = "lenient::bool")]
    pub immutable: bool,
    /// Joined into the compatibility lists of the templates that include it.
    #[serde(default, deserialize_with = "compatibility")]
    pub compatibility: Compatibility,
    /// Merged into the defaults of the templates that include it: services joined, other values
    /// replaced when set, config keys set (and locked when `immutable`).
    #[serde(default, deserialize_with = "defaults")]
    pub defaults: ClusterDefaults,
    /// Kept with the partial but not merged: only `defaults` and `compatibility` pass to the
    /// templates that include it.
    #[serde(default, deserialize_with = "constraints")]
    pub constraints: Constraints,
    /// Kept with the partial but not merged, as `constraints`.
    #[serde(default, deserialize_with = "administration")]
    pub administration: Administration,
    /// Kept with the partial but not merged, as `constraints`.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub links: Vec<Link>,
}

/// The body of `GET /v2/export` and `POST /v2/import`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CatalogExport {
    /// The tenant's providers, latest versions. An import replaces all six kinds, so a kind it
    /// leaves out ends up empty.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub providers: Vec<Provider>,
    /// The tenant's hardware types, latest versions.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub hardwaretypes: Vec<HardwareType>,
    /// The tenant's image types, latest versions.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub imagetypes: Vec<ImageType>,
    /// The tenant's services, latest versions.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub services: Vec<Service>,
    /// The tenant's cluster templates, latest versions.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub clustertemplates: Vec<ClusterTemplate>,
    /// The tenant's partial templates, latest versions.
    #[serde(default, deserialize_with = "lenient::vec")]
    pub partialtemplates: Vec<PartialTemplate>,
    /// Import only: the passphrase that opens the secrets an export sealed with one
    /// (`passphrase:v1:...` values, from `POST /v2/export`). Never answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passphrase: Option<String>,
}

/// The body of `POST /v2/export`: the passphrase the export's secrets are sealed under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SealedExportRequest {
    /// At least 12 characters; the import of the export needs it.
    #[cfg_attr(feature = "openapi", schema(min_length = 12))]
    pub passphrase: String,
}

/// Something a catalog entry names that the catalog lacks, or says that cannot hold as written:
/// the field (`defaults.services[2]`) and what is wrong with it. Writes answer these as warnings;
/// lists mark an entry `incomplete` with those that keep it from running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CatalogWarning {
    /// The field at fault (`defaults.services[2]`); for an import, prefixed with the entry's kind
    /// and name.
    pub field: String,
    /// What is wrong with it, in a sentence.
    pub message: String,
}

/// The answer to a catalog write (`POST`/`PUT` of an entity, `POST /v2/import`): what the
/// catalog accepted but cannot run yet or may not mean, each naming its field. Empty when all is
/// well. For an import, each field starts with the entry's kind and name
/// (`clustertemplates/hadoop.defaults.services[3]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CatalogWriteAnswer {
    /// What the write left unresolved, one entry per field at fault; empty when all is well.
    pub warnings: Vec<CatalogWarning>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lenient;

    #[test]
    fn template_reads_lenient_input_and_writes_every_section() {
        let body = br#"{'name':'t','defaults':{'services':['a',{'name':'b','config':{'x':1}}],'provider':'p'},
            'constraints':{'size':{'min':'2'},'services':{'a':{'quantities':{'min':'1','max':1}}}},
            'administration':{'leaseduration':{'initial':'1h','max':0,'step':'10m'}}}"#;
        let t: ClusterTemplate = lenient::parse_as(body, "a cluster template").unwrap();
        assert_eq!(t.defaults.services, vec!["a", "b"]);
        assert_eq!(t.defaults.config["b"]["x"], 1);
        assert_eq!(
            t.constraints.size,
            SizeConstraint {
                min: 2,
                max: crate::UNBOUNDED
            }
        );
        assert_eq!(
            t.constraints.services["a"].quantities,
            Quantities { min: 1, max: 1 }
        );
        assert_eq!(t.administration.leaseduration.initial, 3_600_000);
        let out = serde_json::to_value(&t).unwrap();
        assert_eq!(out["compatibility"]["services"], serde_json::json!([]));
        assert_eq!(out["includes"], serde_json::json!([]));
        assert!(out.get("extends").is_none());
        assert!(out.get("label").is_none());
    }

    #[test]
    fn upper_case_action_keys_are_rejected() {
        let body = br#"{"name":"s","provisioner":{"actions":{"INSTALL":{"type":"shell"}}}}"#;
        let e = lenient::parse_as::<Service>(body, "a service").unwrap_err();
        assert_eq!(e.field(), Some("provisioner.actions"));
    }

    #[test]
    fn nested_objects_are_objects_or_null_never_arrays() {
        let ok = lenient::parse_as::<ClusterTemplate>(
            br#"{"name":"t","administration":null,"links":[{"label":"a","url":null}]}"#,
            "t",
        )
        .unwrap();
        assert_eq!(ok.links[0].url, "");
        for bad in [
            r#"{"name":"t","administration":{"leaseduration":[null, 5]}}"#,
            r#"{"name":"t","administration":{"rollout":[null, null]}}"#,
            r#"{"name":"t","links":[["a","b"]]}"#,
            r#"{"name":"t","extends":["p"]}"#,
        ] {
            let e = lenient::parse_as::<ClusterTemplate>(bad.as_bytes(), "t");
            assert!(e.is_err(), "{bad} was read");
        }
        let e = lenient::parse_as::<ClusterTemplate>(
            br#"{"name":"t","constraints":{"size":[1, 2]}}"#,
            "t",
        )
        .unwrap_err();
        assert_eq!(e.field(), Some("constraints.size"), "{e}");
    }

    #[test]
    fn names_must_be_text_other_text_may_be_a_number() {
        let p: Provider =
            lenient::parse_as(br#"{"name":"p","providertype":5,"icon":true}"#, "p").unwrap();
        assert_eq!(
            (p.providertype.as_str(), p.icon.as_deref()),
            ("5", Some("true"))
        );
        assert!(lenient::parse_as::<Provider>(br#"{"name":5,"providertype":"x"}"#, "p").is_err());
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e = lenient::parse_as::<ClusterTemplate>(
            br#"{"name":"t","constraints":{"size":{"min":"x"}}}"#,
            "t",
        )
        .unwrap_err();
        assert_eq!(e.field(), Some("constraints.size.min"), "{e}");
    }
}
