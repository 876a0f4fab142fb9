//! The error type of the model crate: bad input, always naming the field at fault.

/// An error in input that the model can detect without a store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The body is not JSON (even leniently read), or is empty where a body is needed.
    #[error("{0}")]
    Malformed(String),
    /// A field is missing, has the wrong type, or breaks a rule. `message` already names the field.
    #[error("{message}")]
    Invalid {
        /// The field at fault, as a path (`constraints.size.min`, `provisioner.actions.start.type`).
        field: String,
        /// The whole message for the caller, naming the field.
        message: String,
    },
}

impl ModelError {
    /// A [`ModelError::Invalid`] for `field`, with `message` (which should name the field).
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ModelError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The field at fault, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ModelError::Malformed(_) => None,
            ModelError::Invalid { field, .. } => Some(field),
        }
    }
}
