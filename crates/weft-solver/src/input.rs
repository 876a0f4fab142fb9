//! The solver's inputs: the template and catalog ([`Catalog`]), the machine types a provider offers
//! ([`TypeOffer`]), a cluster's current nodes ([`ExistingNode`]) and the change asked for ([`Change`]).

use std::collections::BTreeSet;

use weft_model::{ClusterTemplate, MachineType, Service};

/// The hardware types (or image types) a cluster may use, in order of preference, plus every name
/// that exists at all (so that a constraint naming a type that exists but is not offered by the
/// provider is an unsatisfiable constraint, while a name that exists nowhere is bad input).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TypeOffer {
    offered: Vec<String>,
    known: BTreeSet<String>,
}

impl TypeOffer {
    /// Offers exactly these names, first = most preferred (e.g. the smallest hardware first).
    /// Duplicates are dropped. Every offered name is also known.
    pub fn new<I, S>(offered: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out = TypeOffer::default();
        for name in offered {
            let name = name.into();
            if out.known.insert(name.clone()) {
                out.offered.push(name);
            }
        }
        out
    }

    /// Adds names that exist but are not offered.
    pub fn with_known<I, S>(mut self, known: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.known.extend(known.into_iter().map(Into::into));
        self
    }

    /// The hardware types with a `flavor` for `provider`, in name order; all of `types` are known.
    pub fn hardware_for(types: &[MachineType], provider: &str) -> Self {
        Self::for_provider(types, provider, "flavor")
    }

    /// The image types with an `image` for `provider`, in name order; all of `types` are known.
    pub fn images_for(types: &[MachineType], provider: &str) -> Self {
        Self::for_provider(types, provider, "image")
    }

    fn for_provider(types: &[MachineType], provider: &str, key: &str) -> Self {
        let mut offered: Vec<&str> = types
            .iter()
            .filter(|t| {
                t.providermap
                    .get(provider)
                    .is_some_and(|m| m.contains_key(key))
            })
            .map(|t| t.name.as_str())
            .collect();
        offered.sort_unstable();
        TypeOffer::new(offered).with_known(types.iter().map(|t| t.name.clone()))
    }

    /// The offered names, most preferred first.
    pub fn offered(&self) -> &[String] {
        &self.offered
    }

    /// True if the name exists (offered or not).
    pub fn is_known(&self, name: &str) -> bool {
        self.known.contains(name)
    }
}

/// Everything the solver reads besides the request: the template, what the provider offers, and
/// (optionally) the service definitions, which enable the existence, requires and conflicts checks.
#[derive(Debug, Clone, Copy)]
pub struct Catalog<'a> {
    /// The cluster template: compatibility lists, size and service constraints, layout rules.
    pub template: &'a ClusterTemplate,
    /// The hardware types the provider offers, most preferred first.
    pub hardware: &'a TypeOffer,
    /// The image types the provider offers, most preferred first.
    pub images: &'a TypeOffer,
    /// The tenant's services. `None` skips the existence, requires and conflicts checks.
    pub services: Option<&'a [Service]>,
}

/// A node of an existing cluster. Pass nodes in creation order (oldest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingNode {
    /// The node's id; a solved layout keeps it on the node and lists it in `removed` if deleted.
    pub id: String,
    /// The node's hardware type name; the solver never changes it.
    pub hardwaretype: String,
    /// The node's image type name; the solver never changes it.
    pub imagetype: String,
    /// The services on the node now.
    pub services: BTreeSet<String>,
}

/// A change to an existing cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Add these services to existing nodes (no node is created).
    AddServices(Vec<String>),
    /// Remove this service from every node; nodes left with no service are removed.
    RemoveService(String),
    /// Add this many nodes; existing nodes are not touched.
    Expand(u64),
    /// Remove this many nodes, newest first among those whose loss keeps every constraint.
    Shrink(u64),
    /// Move to `Catalog::template` (a new template version), keeping every existing placement and
    /// adding these services (may be empty).
    Retemplate(Vec<String>),
    /// Move to `Catalog::template` with `nodes` more nodes, keeping every existing placement:
    /// the services of `add` go on existing or new nodes, the new nodes take any service (one
    /// declared change of services and size at once). It decides every service's placement as
    /// whole must-coexist groups, so a service that must join one already on the nodes is better
    /// added by `Retemplate` and then `Expand`, which callers try first.
    Reshape {
        /// Services to add (those already on the cluster are ignored).
        add: Vec<String>,
        /// How many nodes to add (at least 1).
        nodes: u64,
    },
}
