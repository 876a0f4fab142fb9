//! The one place where errors become HTTP responses.
//!
//! Coopr answers errors with a short plain-text body, except `{"missingFields":[...]}` (JSON) and the
//! empty 403 of superadmin routes. Internal errors are logged with their cause and answered with a
//! generic message, so nothing about the database or a secret leaks into a response.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use weft_engine::EngineError;
use weft_model::ModelError;
use weft_store::StoreError;

/// An error answered to an API caller.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A 400: the request is malformed or breaks a rule; the message says which.
    #[error("{0}")]
    BadRequest(String),
    /// A 401: no identity, or an API key that is not valid or not the caller's.
    #[error("{0}")]
    Unauthorized(String),
    /// A 403; an empty message gives an empty body (Coopr's superadmin routes).
    #[error("{0}")]
    Forbidden(String),
    /// A 404: the thing named does not exist (in the caller's tenant).
    #[error("{0}")]
    NotFound(String),
    /// A 405, as Coopr answers some refusals (another tenant's usage report).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// A 409: the request clashes with what is stored (exists already, wrong status, quota, job
    /// underway).
    #[error("{0}")]
    Conflict(String),
    /// A 417, as Coopr answers a worker that reports on a task it does not hold.
    #[error("{0}")]
    ExpectationFailed(String),
    /// A 501: a Coopr route that weft does not implement; the message names the alternative.
    #[error("{0}")]
    NotImplemented(String),
    /// `{"missingFields":[{"<field>": FieldSchema}, ...]}`, one entry per alternative set.
    #[error("missing fields")]
    MissingFields(serde_json::Value),
    /// A 500; the cause is logged and the caller gets a generic message.
    #[error("internal error: {0}")]
    Internal(String),
    /// A 503: the server cannot serve this now, and will without a restart once the cause
    /// (named by the message) is gone.
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::MissingFields(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::ExpectationFailed(_) => StatusCode::EXPECTATION_FAILED,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The empty 403 of superadmin-only routes.
    pub fn forbidden_empty() -> Self {
        ApiError::Forbidden(String::new())
    }
}

impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> Self {
        ApiError::BadRequest(e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(what) => ApiError::Conflict(format!("{what} already exists")),
            e @ StoreError::QuotaExceeded(_) => ApiError::Conflict(e.to_string()),
            StoreError::Full(cause) => {
                tracing::error!(%cause, "a write refused: the store is out of space");
                ApiError::Unavailable(
                    "the store is out of space; nothing of this request was written, and writes \
                     succeed again once space is freed"
                        .into(),
                )
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// The engine's errors as HTTP answers; the texts are the engine's own.
impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        use EngineError as E;
        match e {
            E::Store(e) => e.into(),
            E::Model(e) => e.into(),
            E::MissingFields(body) => ApiError::MissingFields(body),
            E::Internal(cause) => ApiError::Internal(cause),
            e @ (E::Stale(_) | E::SecretsKey(_)) => ApiError::Internal(e.to_string()),
            e @ (E::Invalid(_) | E::NoLayout(_) | E::NoPlan(_) | E::TemplateUnsatisfied { .. }) => {
                ApiError::BadRequest(e.to_string())
            }
            e @ (E::NotInCatalog { .. }
            | E::ClusterNotFound(_)
            | E::NodeNotFound(_)
            | E::ServiceNotOnCluster { .. }
            | E::ServiceGone(_)
            | E::PlansNotFound(_)
            | E::JobNotFound(_)
            | E::WebhookNotFound(_)
            | E::ProfileNotFound(_)
            | E::TenantMissing(_)
            | E::TenantNotFound(_)
            | E::ProvisionerNotFound(_)
            | E::NotAPool { .. }
            | E::HostNotFound { .. }
            | E::DeliveryNotFound { .. }
            | E::EntityNotFound { .. }
            | E::UnknownPluginKind(_)
            | E::PluginNotFound { .. }
            | E::ResourceTypeNotFound { .. }
            | E::ResourceVersionNotFound { .. }
            | E::ResourceNotFound) => ApiError::NotFound(e.to_string()),
            e @ (E::ClusterQuota { .. }
            | E::NodeQuota { .. }
            | E::JobUnderway { .. }
            | E::Unavailable(_)
            | E::OverBudget(_)
            | E::WrongStatus { .. }
            | E::ClusterChanged(_)
            | E::PlanOutdated(_)
            | E::PoolShort(_)
            | E::NodeExists(_)
            | E::NotOffered { .. }
            | E::Unservable(_)
            | E::Incomplete { .. }
            | E::TenantExists(_)
            | E::NoWorkerCapacity { .. }
            | E::LimitsBelowUsage { .. }
            | E::TenantHasWorkers { .. }
            | E::HostExists { .. }
            | E::HostInUse { .. }
            | E::NoProvisioner(_)
            | E::EntityExists { .. }
            | E::ResourceNotDeletable
            | E::CannotAbort) => ApiError::Conflict(e.to_string()),
            e @ (E::NotRegistered(_) | E::NotYourTenant { .. } | E::Forbidden(_)) => {
                ApiError::Forbidden(e.to_string())
            }
            e @ E::NotOwner => ApiError::ExpectationFailed(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match self {
            ApiError::MissingFields(body) => (
                status,
                axum::Json(serde_json::json!({ "missingFields": body })),
            )
                .into_response(),
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                text(
                    status,
                    "internal server error; the server log has the cause".into(),
                )
            }
            // A client may try again; the store does not need the server restarted.
            ApiError::Unavailable(m) => {
                let mut r = text(status, m);
                r.headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
                r
            }
            // Coopr's empty 403 keeps its empty body, typed like every other error.
            ApiError::Forbidden(m) if m.is_empty() => text(status, String::new()),
            other => text(status, other.to_string()),
        }
    }
}

/// A plain-text response, as Coopr writes errors.
pub fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// What handlers return: a value or the [`ApiError`] answered instead.
pub type ApiResult<T> = Result<T, ApiError>;
