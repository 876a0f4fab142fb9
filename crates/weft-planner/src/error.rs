//! The planner's one error type. Messages are lower-case and name the service, node or macro
//! position at fault.

use thiserror::Error;

/// Everything the planner and the macro expander can reject.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    /// Service dependencies form a cycle; the path names every service on it, first repeated last.
    #[error("{class} dependencies form a cycle: {}", cycle.join(" -> "))]
    DependencyCycle {
        class: &'static str,
        cycle: Vec<String>,
    },

    /// A node places a service the catalog does not define.
    #[error("node {node}: service {service} is not in the service catalog")]
    UnknownService { node: String, service: String },

    /// The operation names a service that the layout or catalog lacks.
    #[error("{operation}: service {service} {problem}")]
    BadService {
        operation: &'static str,
        service: String,
        problem: String,
    },

    /// Two nodes share an id (or a node appears twice).
    #[error("node {node} appears more than once in the {which} layout")]
    DuplicateNode { node: String, which: &'static str },

    /// The old and new layouts do not fit the operation.
    #[error("{operation}: {problem}")]
    LayoutMismatch {
        operation: &'static str,
        problem: String,
    },

    /// An operation parameter is out of range.
    #[error("{operation}: {problem}")]
    BadParameter {
        operation: &'static str,
        problem: String,
    },

    /// A macro could not be parsed or evaluated. `at` is the path of the string inside a JSON value
    /// (empty for a plain string); `pos` is the byte offset of the macro's opening `%`.
    #[error("macro at {}byte {pos}: {problem}", if at.is_empty() { String::new() } else { format!("{at}, ") })]
    Macro {
        at: String,
        pos: usize,
        problem: String,
    },

    /// The planner built a cyclic task graph. This is a planner bug, reported instead of a panic.
    #[error("internal error: the task graph has a cycle through task {task}")]
    CyclicPlan { task: String },
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
