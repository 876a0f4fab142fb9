//! Who is calling: the identity headers of Coopr (`Coopr-UserID`, `Coopr-TenantID`) and, with
//! `auth = "apikey"`, the `Coopr-ApiKey` header checked against stored key hashes.
//!
//! Roles: a user; the tenant admin (user `admin` with auth none, or a key made with `--admin`); the
//! superadmin (the admin of the `superadmin` tenant).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use weft_store::{Tenant, SUPERADMIN};

use crate::config::AuthMode;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The header naming the calling user (`Coopr-UserID`; header names are matched without regard to
/// case).
pub const USER_HEADER: &str = "coopr-userid";
/// The header naming the caller's tenant by name (`Coopr-TenantID`).
pub const TENANT_HEADER: &str = "coopr-tenantid";
/// The header carrying the caller's API key with `auth = "apikey"` (`Coopr-ApiKey`).
pub const APIKEY_HEADER: &str = "coopr-apikey";

pub use weft_engine::Role;

/// The authenticated caller of an external route.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The caller's tenant (with `auth = "apikey"`, the tenant of the key).
    pub tenant: Tenant,
    /// The user id: the `Coopr-UserID` header, or the user an API key was made for.
    pub user: String,
    /// What the caller may do: user, tenant admin or superadmin.
    pub role: Role,
}

impl Identity {
    /// The caller as the engine knows it.
    pub fn caller(&self) -> weft_engine::Caller {
        weft_engine::Caller {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            role: self.role,
        }
    }

    /// Whether the caller is a tenant admin or the superadmin.
    pub fn is_admin(&self) -> bool {
        self.role >= Role::Admin
    }

    /// An empty 403 unless the caller is the superadmin, as Coopr answers.
    pub fn require_superadmin(&self) -> ApiResult<()> {
        if self.role == Role::SuperAdmin {
            Ok(())
        } else {
            Err(ApiError::forbidden_empty())
        }
    }
}

fn header<'a>(parts: &'a Parts, name: &str) -> ApiResult<Option<&'a str>> {
    match parts.headers.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim()).filter(|s| !s.is_empty()))
            .map_err(|_| ApiError::BadRequest(format!("header {name} is not valid text"))),
    }
}

/// Who a request turned out to be, or claimed to be when it was refused: filled in by the
/// [`Identity`] extractor for the audit trail when the request carries a [`ClaimSlot`].
#[derive(Debug, Clone, Default)]
pub struct Claimed {
    /// The id of the tenant named or implied; `None` when none was found.
    pub tenant_id: Option<String>,
    /// The user the request named (or its key was made for); `None` without one.
    pub user: Option<String>,
    /// The role, once the caller is known; `None` when the request was refused.
    pub role: Option<Role>,
    /// The id of the API key presented, with `auth = "apikey"` and a key found.
    pub key_id: Option<String>,
}

/// Where the [`Identity`] extractor leaves what it found ([`Claimed`]).
#[derive(Debug, Clone, Default)]
pub struct ClaimSlot(pub Arc<std::sync::Mutex<Claimed>>);

impl ClaimSlot {
    /// What the extractor left, or an empty [`Claimed`] if it never ran.
    pub fn take(&self) -> Claimed {
        self.0.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl FromRequestParts<AppState> for Identity {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let mut claimed = Claimed::default();
        let found = identify(parts, state, &mut claimed).await;
        if let Some(slot) = parts.extensions.get::<ClaimSlot>() {
            if let Ok(who) = &found {
                claimed.tenant_id = Some(who.tenant.id.clone());
                claimed.user = Some(who.user.clone());
                claimed.role = Some(who.role);
            }
            if let Ok(mut s) = slot.0.lock() {
                *s = claimed;
            }
        }
        found
    }
}

/// The caller of a request, from its headers (and its API key with `auth = apikey`); what it
/// claimed is noted in `claimed` as it is learnt.
async fn identify(parts: &Parts, state: &AppState, claimed: &mut Claimed) -> ApiResult<Identity> {
    let user = header(parts, USER_HEADER)?;
    let tenant_name = header(parts, TENANT_HEADER)?;
    claimed.user = user.map(str::to_string);
    match state.settings.auth {
        AuthMode::None => {
            let user = user.ok_or_else(|| {
                ApiError::Unauthorized("Coopr-UserID not found in request headers.".into())
            })?;
            let tenant_name = tenant_name.ok_or_else(|| {
                ApiError::Unauthorized("Coopr-TenantID not found in request headers.".into())
            })?;
            let tenant = state
                .store
                .tenant_by_name(tenant_name)
                .await?
                .ok_or_else(|| ApiError::NotFound("Tenant does not exist.".into()))?;
            claimed.tenant_id = Some(tenant.id.clone());
            let role = match (user, tenant.id.as_str()) {
                ("admin", SUPERADMIN) => Role::SuperAdmin,
                ("admin", _) => Role::Admin,
                _ => Role::User,
            };
            Ok(Identity {
                tenant,
                user: user.to_string(),
                role,
            })
        }
        AuthMode::ApiKey => {
            let key = header(parts, APIKEY_HEADER)?.ok_or_else(|| {
                ApiError::Unauthorized("Coopr-ApiKey not found in request headers.".into())
            })?;
            let record = state
                .store
                .api_key_by_hash(&weft_engine::apikeys::hash_key(key))
                .await?
                .ok_or_else(|| ApiError::Unauthorized("invalid API key".into()))?;
            claimed.key_id = Some(record.id.clone());
            claimed.tenant_id = Some(record.tenant_id.clone());
            let tenant = state
                .store
                .tenant_by_id(&record.tenant_id)
                .await?
                .ok_or_else(|| {
                    ApiError::Unauthorized("invalid API key: its tenant no longer exists".into())
                })?;
            if let Some(t) = tenant_name.filter(|t| *t != tenant.spec.name) {
                return Err(ApiError::Unauthorized(format!(
                    "API key does not belong to tenant {t}"
                )));
            }
            if let Some(u) = user.filter(|u| *u != record.user) {
                return Err(ApiError::Unauthorized(format!(
                    "API key does not belong to user {u}"
                )));
            }
            let role = match (record.admin, tenant.id.as_str()) {
                (true, SUPERADMIN) => Role::SuperAdmin,
                (true, _) => Role::Admin,
                _ => Role::User,
            };
            Ok(Identity {
                tenant,
                user: record.user,
                role,
            })
        }
    }
}

/// The internal port's guard: with a provisioner token file, every call but `/status` must
/// present one of its tokens (`Authorization: Bearer TOKEN`); a 401 otherwise. Without one it
/// checks nothing, as Coopr did (bind the internal port to a private network).
pub async fn require_provisioner_token(
    axum::extract::State(st): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let presented = req
        .headers()
        .get(weft_client::tokens::HEADER)
        .and_then(|v| v.to_str().ok());
    match &st.tokens {
        Some(t) if req.uri().path() != "/status" && !t.accepts(presented) => {
            axum::response::IntoResponse::into_response(ApiError::Unauthorized(
                "provisioner token missing or not accepted".into(),
            ))
        }
        _ => next.run(req).await,
    }
}
