//! The planner's one error type. Messages are lower-case and name the service, node or macro
//! position at fault.

use thiserror::Error;

/// Everything the planner and the macro expander can reject.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    /// Service dependencies form a cycle; the path names every service on it, first repeated last.
    #[error("{class} dependencies form a cycle: {}", cycle.join(" -> "))]
    DependencyCycle {
        /// Which dependency rules cycle: `"install"` or `"runtime"`.
        class: &'static str,
        /// The services on the cycle, in order, the first repeated last.
        cycle: Vec<String>,
    },

    /// A node places a service the catalog does not define.
    #[error("node {node}: service {service} is not in the service catalog")]
    UnknownService {
        /// The node's id.
        node: String,
        /// The service name the catalog lacks.
        service: String,
    },

    /// The operation names a service that the layout or catalog lacks.
    #[error("{operation}: service {service} {problem}")]
    BadService {
        /// The operation's name, as [`Operation::name`](crate::Operation::name) gives it.
        operation: &'static str,
        /// The service at fault.
        service: String,
        /// What is wrong with it, e.g. "is not on the cluster".
        problem: String,
    },

    /// Two nodes share an id (or a node appears twice).
    #[error("node {node} appears more than once in the {which} layout")]
    DuplicateNode {
        /// The repeated node id.
        node: String,
        /// Which layout: `"old"` or `"new"`.
        which: &'static str,
    },

    /// The old and new layouts do not fit the operation.
    #[error("{operation}: {problem}")]
    LayoutMismatch {
        /// The operation's name, as [`Operation::name`](crate::Operation::name) gives it.
        operation: &'static str,
        /// How the layouts disagree with the operation.
        problem: String,
    },

    /// An operation parameter is out of range.
    #[error("{operation}: {problem}")]
    BadParameter {
        /// The operation's name, as [`Operation::name`](crate::Operation::name) gives it.
        operation: &'static str,
        /// Which parameter is wrong and why.
        problem: String,
    },

    /// A macro could not be parsed or evaluated. `at` is the path of the string inside a JSON value
    /// (empty for a plain string); `pos` is the byte offset of the macro's opening `%`.
    #[error("macro at {}byte {pos}: {problem}", if at.is_empty() { String::new() } else { format!("{at}, ") })]
    Macro {
        /// The JSON path of the string holding the macro (`config.hadoop.fs`); empty for a plain
        /// string.
        at: String,
        /// The byte offset of the macro's opening `%` in that string.
        pos: usize,
        /// What is wrong with the macro.
        problem: String,
    },

    /// The plan would take down more of a service's nodes at once than its availability rule
    /// allows (the engine answers 409; `force` plans it anyway).
    #[error("{operation}: service {service} needs {need} of its {members} nodes running and healthy ({rule}), but this plan takes down {down} at once, leaving {left}; split the change, or force it")]
    Unavailable {
        /// The operation's name, as [`Operation::name`](crate::Operation::name) gives it.
        operation: &'static str,
        /// The service whose rule would break.
        service: String,
        /// Its nodes when the step starts.
        members: usize,
        /// How many must stay running and healthy.
        need: usize,
        /// How many the step takes down at once.
        down: usize,
        /// How many would be left.
        left: usize,
        /// The rule, as the service states it (`quorum`, `minHealthy 2`).
        rule: String,
    },

    /// The planner built a cyclic task graph. This is a planner bug, reported instead of a panic.
    #[error("internal error: the task graph has a cycle through task {task}")]
    CyclicPlan {
        /// A vertex on the cycle, described: `"<ACTION> <service> on node <id>"` or `"gate <n>"`.
        task: String,
    },
}

impl PlanError {
    /// Prefix the JSON path of a macro error (`config.hadoop.fs`); other errors are returned as is.
    pub(crate) fn at_path(self, path: &str) -> PlanError {
        match self {
            PlanError::Macro { at, pos, problem } if at.is_empty() => PlanError::Macro {
                at: path.to_string(),
                pos,
                problem,
            },
            other => other,
        }
    }
}
