//! Leadership of background roles (the janitor) as a lease: one row per role in `leaders`
//! (`role`, `holder`, `term`, `deadline`), the same on both backends.
//!
//! A holder takes the role when the row is missing or its deadline has passed, and keeps it by
//! renewing the deadline before it passes ([`Store::lead`](crate::Store::lead) does both, in one
//! upsert). Every change of holder, and every renewal that comes after the deadline, starts a new
//! `term`; a holder that sees its term change has lost the lease, even if it took it straight
//! back. A stopped leader (SIGSTOP, a hung loop, a lost network) therefore loses the role one
//! lease after its last renewal, whatever its connections do, and [`Lease::keep`] tells it so
//! by its own clock before it asks the database.
//!
//! Deadlines are each server's wall-clock milliseconds, so servers sharing a database need clocks
//! that agree to well within a lease (NTP).

use crate::{Result, Store};

/// The row of a role in `leaders`, from [`Store::leader`](crate::Store::leader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The role's name (`janitor`).
    pub role: String,
    /// Who holds or last held the role: a name unique per server process (the janitor's is
    /// `<hostname>/<pid>/<random>`).
    pub holder: String,
    /// 1 for the first holder, +1 at every takeover (and at a renewal after the deadline).
    pub term: i64,
    /// Milliseconds since the epoch; the lease is free once this has passed (0 after a resign).
    pub deadline: i64,
}

/// A lease on a role held by this process: what [`Store::lead`](crate::Store::lead) granted, with
/// the deadline by this process's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    role: String,
    holder: String,
    term: i64,
    lease_ms: i64,
    deadline: i64,
}

impl Lease {
    /// Takes the role for `holder` at `now` for `lease_ms`, or renews it if `holder` has it;
    /// `None` if another holder's lease has not passed.
    pub async fn take(
        store: &dyn Store,
        role: &str,
        holder: &str,
        lease_ms: i64,
        now: i64,
    ) -> Result<Option<Lease>> {
        let term = store.lead(role, holder, now, lease_ms).await?;
        Ok(term.map(|term| Lease {
            role: role.to_string(),
            holder: holder.to_string(),
            term,
            lease_ms,
            deadline: now + lease_ms,
        }))
    }

    /// The role this lease is on.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The holder the lease was granted to.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The term the lease was granted in; a different term in the store means the lease was lost.
    pub fn term(&self) -> i64 {
        self.term
    }

    /// Milliseconds since the epoch until which this lease holds (by this process's clock).
    pub fn deadline(&self) -> i64 {
        self.deadline
    }

    /// Whether the lease still holds at `now`, without asking the database.
    pub fn valid_at(&self, now: i64) -> bool {
        now < self.deadline
    }

    /// Renews the lease at `now`. `false` when it is lost: it passed first (another holder may
    /// have acted since), or another holder took it, or renewing it started a new term. A lost
    /// lease must not be used again; take a new one.
    pub async fn renew(&mut self, store: &dyn Store, now: i64) -> Result<bool> {
        if !self.valid_at(now) {
            return Ok(false);
        }
        let term = store
            .lead(&self.role, &self.holder, now, self.lease_ms)
            .await?;
        if term != Some(self.term) {
            self.deadline = 0;
            return Ok(false);
        }
        self.deadline = now + self.lease_ms;
        Ok(true)
    }

    /// What a leader calls before each step of its work: `true` while the lease holds at `now`,
    /// renewing it once half of it has gone. `false` (also on a database error) means stop now.
    pub async fn keep(&mut self, store: &dyn Store, now: i64) -> bool {
        if !self.valid_at(now) {
            return false;
        }
        if now < self.deadline - self.lease_ms / 2 {
            return true;
        }
        match self.renew(store, now).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(role = %self.role, error = %e, "renewing leadership");
                false
            }
        }
    }

    /// Gives the role up at once, so that another holder's next take succeeds.
    pub async fn resign(self, store: &dyn Store) -> Result<()> {
        store.resign(&self.role, &self.holder).await
    }
}

/// 64-bit FNV-1a (the keys of PostgreSQL's advisory row locks).
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
    }

    #[test]
    fn a_lease_holds_until_its_deadline() {
        let l = Lease {
            role: "janitor".into(),
            holder: "a".into(),
            term: 1,
            lease_ms: 100,
            deadline: 1100,
        };
        assert!(l.valid_at(1099));
        assert!(!l.valid_at(1100));
    }
}
