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
    SizeAboveLimit { size: u64, limit: u64 },
    /// The requested size is outside the template's size constraint.
    #[error("cluster size {size} is outside template {template}'s size range {min} to {max}")]
    SizeOutsideTemplate {
        template: String,
        size: u64,
        min: u64,
        max: u64,
    },
    /// A template's size constraint or a service's quantities have min above max.
    #[error("{what}: min ({min}) is above max ({max})")]
    MinAboveMax { what: String, min: u64, max: u64 },
    /// No services were requested and the template has no default services.
    #[error("no services requested and template {template} has no default services")]
    NoServices { template: String },
    /// A requested service does not exist.
    #[error("service {service} does not exist")]
    UnknownService { service: String },
    /// A requested service is not in the template's compatibility list.
    #[error("service {service} is not compatible with template {template}")]
    IncompatibleService { service: String, template: String },
    /// No hardware type (or image type) is both offered and allowed by the template.
    #[error("no {kind}s are available: {detail}")]
    NoTypes { kind: &'static str, detail: String },
    /// Requires check: a service needs a service that is not on the cluster.
    #[error("service {service} requires {missing}, which is not on the cluster")]
    Requires { service: String, missing: String },
    /// Conflicts check: two services that conflict are both on the cluster.
    #[error("service {service} conflicts with {other}, and both are on the cluster")]
    Conflicts { service: String, other: String },
    /// A change names a service or node that the cluster does not have, or is otherwise malformed.
    #[error("{0}")]
    BadChange(String),
    /// Too many distinct services or machine types for the solver's bit sets.
    #[error("too many {what} ({count}); the solver handles at most {limit}")]
    TooLarge {
        what: &'static str,
        count: usize,
        limit: usize,
    },
    /// No layout satisfies the constraints. The message names a minimal set of constraints in
    /// conflict, in a template author's words.
    #[error("{0}")]
    NoLayout(String),
    /// The search gave up after exploring its step budget (only pathological templates get here).
    #[error("gave up after {steps} search steps without deciding whether a layout exists")]
    SearchLimit { steps: u64 },
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
