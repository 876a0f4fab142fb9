//! The solver's one error type: bad input, failed dependency checks, and "no layout exists" with
//! its explanation.

/// Why the solver returned no layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SolveError {
    /// The requested size is 0.
    #[error("cluster size must be at least 1")]
    SizeZero,
    /// The requested size is above the most weft plans (`LARGEST_CLUSTER`); the server's own,
    /// lower limit is checked before the solver runs.
    #[error("cluster size {size} is above the largest cluster weft plans ({limit} nodes)")]
    SizeAboveLimit {
        /// The requested number of nodes.
        size: u64,
        /// `LARGEST_CLUSTER`, the most nodes weft plans.
        limit: u64,
    },
    /// The requested size is outside the template's size constraint.
    #[error("cluster size {size} is outside template {template}'s size range {min} to {max}")]
    SizeOutsideTemplate {
        /// The template's name.
        template: String,
        /// The requested number of nodes.
        size: u64,
        /// The template's smallest allowed cluster size, in nodes.
        min: u64,
        /// The template's largest allowed cluster size, in nodes.
        max: u64,
    },
    /// A template's size constraint or a service's quantities have min above max.
    #[error("{what}: min ({min}) is above max ({max})")]
    MinAboveMax {
        /// Which constraint, e.g. "template hadoop size" or "service datanode quantities".
        what: String,
        /// The constraint's min.
        min: u64,
        /// The constraint's max, below `min`.
        max: u64,
    },
    /// No services were requested and the template has no default services.
    #[error("no services requested and template {template} has no default services")]
    NoServices {
        /// The template's name.
        template: String,
    },
    /// A requested service does not exist.
    #[error("service {service} does not exist")]
    UnknownService {
        /// The requested service name that the tenant's services do not have.
        service: String,
    },
    /// A requested service is not in the template's compatibility list.
    #[error("service {service} is not compatible with template {template}")]
    IncompatibleService {
        /// The requested service.
        service: String,
        /// The template's name.
        template: String,
    },
    /// No hardware type (or image type) is both offered and allowed by the template.
    #[error("no {kind}s are available: {detail}")]
    NoTypes {
        /// `"hardware type"` or `"image type"`.
        kind: &'static str,
        /// What the template allows and what the provider offers, or "the provider offers none".
        detail: String,
    },
    /// Requires check: a service needs a service that is not on the cluster.
    #[error("service {service} requires {missing}, which is not on the cluster")]
    Requires {
        /// The service with the unmet requirement.
        service: String,
        /// The required service (or provided name) that no service on the cluster supplies.
        missing: String,
    },
    /// Conflicts check: two services that conflict are both on the cluster.
    #[error("service {service} conflicts with {other}, and both are on the cluster")]
    Conflicts {
        /// The service whose conflicts list names `other`.
        service: String,
        /// The conflicting service, also on the cluster.
        other: String,
    },
    /// A change names a service or node that the cluster does not have, or is otherwise malformed.
    #[error("{0}")]
    BadChange(String),
    /// Too many distinct services or machine types for the solver's bit sets.
    #[error("too many {what} ({count}); the solver handles at most {limit}")]
    TooLarge {
        /// `"services"`, `"hardware types"` or `"image types"`.
        what: &'static str,
        /// How many distinct names of that kind the input has.
        count: usize,
        /// The most the solver handles (the width of its bit sets).
        limit: usize,
    },
    /// No layout satisfies the constraints. The message names a minimal set of constraints in
    /// conflict, in a template author's words.
    #[error("{0}")]
    NoLayout(String),
    /// The search gave up after exploring its step budget (only pathological templates get here).
    #[error("gave up after {steps} search steps without deciding whether a layout exists")]
    SearchLimit {
        /// The step budget that was used up ([`STEP_LIMIT`](crate::STEP_LIMIT)).
        steps: u64,
    },
}

impl SolveError {
    /// True when the input was well formed but no layout satisfies the constraints.
    pub fn is_no_layout(&self) -> bool {
        matches!(
            self,
            SolveError::NoLayout(_)
                | SolveError::NoTypes { .. }
                | SolveError::SizeOutsideTemplate { .. }
        )
    }
}
