//! Leader election for background roles (the janitor), behind [`LeaderGuard`](crate::LeaderGuard).
//!
//! * **PostgreSQL**: a session-level `pg_try_advisory_lock` on a key hashed from the role's name,
//!   taken on a connection detached from the pool and kept inside the guard. Releasing the guard
//!   unlocks and closes the session; dropping it closes the socket, and the server releases the
//!   lock when it notices. A broken connection loses the lock too, which
//!   [`Held::is_held`] detects.
//! * **SQLite**: one server owns a database file, so the lock is a process-wide registry of
//!   `(database file, role)` pairs: exclusive among every store opened on the same file in this
//!   process, released when the guard drops.

use std::collections::BTreeSet;
use std::sync::Mutex;

use sqlx::{AnyConnection, Connection};

use crate::Result;

/// The `(scope, role)` pairs led in this process (SQLite).
static LOCAL_LEADERS: Mutex<BTreeSet<(String, String)>> = Mutex::new(BTreeSet::new());

/// What a [`LeaderGuard`](crate::LeaderGuard) holds.
pub(crate) enum Held {
    Postgres {
        /// `None` only after release.
        conn: Option<AnyConnection>,
        key: i64,
    },
    Local {
        scope: String,
        name: String,
    },
}

impl Held {
    /// Registers `(scope, name)` in this process; `None` if it is already led.
    pub(crate) fn try_local(scope: &str, name: &str) -> Option<Held> {
        let mut leaders = LOCAL_LEADERS.lock().unwrap_or_else(|e| e.into_inner());
        let key = (scope.to_string(), name.to_string());
        if leaders.insert(key.clone()) {
            Some(Held::Local {
                scope: key.0,
                name: key.1,
            })
        } else {
            None
        }
    }

    /// Tries the session-level advisory lock for `name` on `conn`; closes `conn` if it is taken.
    pub(crate) async fn try_postgres(mut conn: AnyConnection, name: &str) -> Result<Option<Held>> {
        let key = leader_key(name);
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(&mut conn)
            .await?;
        if got {
            Ok(Some(Held::Postgres {
                conn: Some(conn),
                key,
            }))
        } else {
            conn.close().await.ok();
            Ok(None)
        }
    }

    pub(crate) async fn is_held(&mut self) -> bool {
        match self {
            Held::Local { .. } => true,
            Held::Postgres { conn, .. } => {
                let Some(c) = conn.as_mut() else { return false };
                let alive = sqlx::query_scalar::<_, i64>("SELECT 1")
                    .fetch_one(&mut *c)
                    .await
                    .is_ok();
                if !alive {
                    // The session is gone, and its lock with it.
                    *conn = None;
                }
                alive
            }
        }
    }

    pub(crate) async fn release(mut self) -> Result<()> {
        if let Held::Postgres { conn, key } = &mut self {
            if let Some(mut c) = conn.take() {
                let unlocked: Result<bool> = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                    .bind(*key)
                    .fetch_one(&mut c)
                    .await
                    .map_err(Into::into);
                c.close().await.ok();
                unlocked?;
            }
        }
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Held::Local { scope, name } = self {
            let mut leaders = LOCAL_LEADERS.lock().unwrap_or_else(|e| e.into_inner());
            leaders.remove(&(std::mem::take(scope), std::mem::take(name)));
        }
    }
}

/// The advisory lock key of a role: FNV-1a (64 bit) of `weft-leader/<name>`, stable across builds
/// and processes.
pub(crate) fn leader_key(name: &str) -> i64 {
    fnv1a64(format!("weft-leader/{name}").as_bytes()) as i64
}

/// 64-bit FNV-1a.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_its_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(leader_key("janitor"), leader_key("janitor2"));
    }

    #[test]
    fn local_leadership_is_exclusive_per_scope_and_name() {
        let a = Held::try_local("test-scope-1", "janitor").expect("first leads");
        assert!(Held::try_local("test-scope-1", "janitor").is_none());
        let other_name = Held::try_local("test-scope-1", "other");
        let other_scope = Held::try_local("test-scope-2", "janitor");
        assert!(other_name.is_some() && other_scope.is_some());
        drop(a);
        assert!(Held::try_local("test-scope-1", "janitor").is_some());
    }
}
