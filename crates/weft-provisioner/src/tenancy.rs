//! Tenant users: with `weft provisioner --tenant-users` (as root), the local provider runs each
//! tenant's commands as an operating-system user of that tenant's own, so that one tenant's
//! scripts cannot read another tenant's nodes, nor any tenant's synced plugin resources, on a
//! provisioner they share (docs/security.md).
//!
//! Users need no account: a uid (and the same gid) from [`FIRST_UID`] up is assigned to each
//! tenant id in a machine-wide registry (`WEFT_TENANT_UIDS`, default `/var/lib/weft/tenant-uids`:
//! one file per uid, holding the tenant id), under an exclusive lock, so that every provisioner
//! on the machine gives a tenant the same uid and two tenants never share one.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::task::PluginError;

/// The first uid handed to a tenant: far above the ranges that distributions give to people
/// and services.
pub const FIRST_UID: u32 = 2_000_000;
/// How many tenants one machine can hold.
pub const MAX_TENANTS: u32 = 1_000_000;

/// The registry of tenant uids.
#[derive(Debug)]
pub struct TenantUsers {
    registry: PathBuf,
    known: Mutex<HashMap<String, u32>>,
}

impl TenantUsers {
    /// The registry at `WEFT_TENANT_UIDS`, else `/var/lib/weft/tenant-uids`.
    pub fn from_env() -> TenantUsers {
        let dir = std::env::var_os("WEFT_TENANT_UIDS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/lib/weft/tenant-uids"));
        TenantUsers::new(dir)
    }

    /// The registry in the directory `registry` (one file per uid); nothing is read until a
    /// tenant's uid is asked for.
    pub fn new(registry: impl Into<PathBuf>) -> TenantUsers {
        TenantUsers {
            registry: registry.into(),
            known: Mutex::default(),
        }
    }

    /// The uid of `tenant_id`, assigned on first use.
    pub fn uid(&self, tenant_id: &str) -> Result<u32, PluginError> {
        if tenant_id.is_empty() {
            return Err(PluginError::fatal(
                "this provisioner runs tenants as users of their own, and the task names no tenant",
            ));
        }
        if let Some(uid) = self
            .known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant_id)
        {
            return Ok(*uid);
        }
        let uid = self.assign(tenant_id).map_err(|e| {
            PluginError::retryable(format!(
                "tenant users registry {}: {e}",
                self.registry.display()
            ))
        })?;
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tenant_id.to_string(), uid);
        Ok(uid)
    }

    fn assign(&self, tenant_id: &str) -> std::io::Result<u32> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.registry)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.registry.join(".lock"))?;
        lock.lock()?;
        let mut next = FIRST_UID;
        for e in std::fs::read_dir(&self.registry)?.flatten() {
            let Some(uid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if std::fs::read_to_string(e.path())?.trim() == tenant_id {
                return Ok(uid);
            }
            next = next.max(uid + 1);
        }
        if next >= FIRST_UID + MAX_TENANTS {
            return Err(std::io::Error::other("no tenant uid left"));
        }
        let mut f = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(self.registry.join(next.to_string()))?;
        writeln!(f, "{tenant_id}")?;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_gets_its_own_uid_and_keeps_it() {
        let dir = std::env::temp_dir().join(format!("weft-tenant-uids-{}", std::process::id()));
        let a = TenantUsers::new(&dir);
        let ua = a.uid("tenant-a").unwrap();
        let ub = a.uid("tenant-b").unwrap();
        assert_ne!(ua, ub);
        assert!(ua >= FIRST_UID && ub >= FIRST_UID);
        // Another provisioner on the machine reads the same registry.
        let b = TenantUsers::new(&dir);
        assert_eq!(b.uid("tenant-b").unwrap(), ub);
        assert_eq!(b.uid("tenant-a").unwrap(), ua);
        assert!(!b.uid("").unwrap_err().retryable);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
