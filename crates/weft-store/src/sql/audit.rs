//! The audit trail's rows (see [`crate::audit`]): appends chained under the tenant's head row,
//! filtered reads, the chain for verification, and retention.

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use super::{Hot, SqlStore};
use crate::audit::{
    record_hash, AuditAnchor, AuditEntry, AuditQuery, AuditRecord, StoredAudit, GENESIS,
};
use crate::{Backend, Result, StoreError};

const AUDIT_COLUMNS: &str = "tenant_id, seq, time, body, user_id, entity, action, prev_hash, hash";

fn to_u64(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what}: {v}")))
}

fn stored_from_row(row: &AnyRow) -> Result<StoredAudit> {
    Ok(StoredAudit {
        tenant_id: row.try_get("tenant_id")?,
        seq: to_u64(row.try_get("seq")?, "audit seq")?,
        time: row.try_get("time")?,
        body: row.try_get("body")?,
        user: row.try_get("user_id")?,
        entity: row.try_get("entity")?,
        action: row.try_get("action")?,
        prev_hash: row.try_get("prev_hash")?,
        hash: row.try_get("hash")?,
    })
}

impl<B: Hot> SqlStore<B> {
    /// Appends `entry` to its tenant's chain, and removes the request's pending record (written
    /// with its change, see [`crate::audit::Pending`]) in the same transaction.
    pub(crate) async fn append_audit_impl(&self, entry: &AuditEntry) -> Result<AuditRecord> {
        let body = serde_json::to_string(entry)
            .map_err(|e| StoreError::Corrupt(format!("audit record: {e}")))?;
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM audit_pending WHERE request_id = $1")
            .bind(entry.request_id.as_str())
            .execute(&mut *tx)
            .await?;
        let (seq, prev, hash) = self.chain_in(&mut tx, entry, &body).await?;
        tx.commit().await?;
        Ok(AuditRecord {
            seq,
            entry: entry.clone(),
            prev_hash: prev,
            hash,
        })
    }

    /// Chains the pending records older than `before` (ms) as they are (status 0: their change
    /// committed but no answer was recorded). Returns how many.
    pub(crate) async fn settle_audit_impl(&self, before: i64) -> Result<u64> {
        let rows = sqlx::query(
            "SELECT request_id, body FROM audit_pending WHERE time < $1 ORDER BY time LIMIT 500",
        )
        .bind(before)
        .fetch_all(&self.reader)
        .await?;
        let mut settled = 0;
        for row in rows {
            let request_id: String = row.try_get("request_id")?;
            let body: String = row.try_get("body")?;
            let Ok(entry) = serde_json::from_str::<AuditEntry>(&body) else {
                return Err(StoreError::Corrupt(format!(
                    "pending audit record of request {request_id}: body"
                )));
            };
            let mut tx = self.write_tx().await?;
            // Whoever removes the row chains it: the request's own answer may have come first.
            let gone = sqlx::query("DELETE FROM audit_pending WHERE request_id = $1")
                .bind(request_id.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if gone == 1 {
                self.chain_in(&mut tx, &entry, &body).await?;
                tx.commit().await?;
                settled += 1;
            }
        }
        Ok(settled)
    }

    /// Appends `body` (`entry` as stored) to its tenant's chain in `tx`: the head row is locked
    /// (PostgreSQL) or the whole database is (SQLite's `BEGIN IMMEDIATE`), so concurrent appends
    /// of one tenant are chained one after the other. Returns the number, previous hash and hash.
    async fn chain_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        entry: &AuditEntry,
        body: &str,
    ) -> Result<(u64, String, String)> {
        let tenant = entry.tenant_id.as_str();
        sqlx::query(
            "INSERT INTO audit_heads (tenant_id, seq, hash, first_seq, first_prev) \
             VALUES ($1, 0, $2, 1, $2) ON CONFLICT (tenant_id) DO NOTHING",
        )
        .bind(tenant)
        .bind(GENESIS)
        .execute(&mut **tx)
        .await?;
        let lock = match self.backend_kind() {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        };
        let head = sqlx::query(&format!(
            "SELECT seq, hash FROM audit_heads WHERE tenant_id = $1{lock}"
        ))
        .bind(tenant)
        .fetch_one(&mut **tx)
        .await?;
        let seq = to_u64(head.try_get("seq")?, "audit head")? + 1;
        let prev: String = head.try_get("hash")?;
        let hash = record_hash(tenant, seq, &prev, body);
        sqlx::query(&format!(
            "INSERT INTO audit ({AUDIT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(tenant)
        .bind(seq as i64)
        .bind(entry.time)
        .bind(body)
        .bind(entry.user.as_str())
        .bind(entry.entity.as_str())
        .bind(entry.action.as_str())
        .bind(prev.as_str())
        .bind(hash.as_str())
        .execute(&mut **tx)
        .await?;
        sqlx::query("UPDATE audit_heads SET seq = $2, hash = $3 WHERE tenant_id = $1")
            .bind(tenant)
            .bind(seq as i64)
            .bind(hash.as_str())
            .execute(&mut **tx)
            .await?;
        Ok((seq, prev, hash))
    }

    /// The records `q` asks for, newest first.
    pub(crate) async fn list_audit_impl(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit WHERE ($1 IS NULL OR tenant_id = $1) \
             AND ($2 IS NULL OR user_id = $2) AND ($3 IS NULL OR entity = $3) \
             AND ($4 IS NULL OR action = $4) AND ($5 IS NULL OR time >= $5) \
             AND ($6 IS NULL OR time < $6) \
             ORDER BY time DESC, tenant_id, seq DESC LIMIT $7 OFFSET $8"
        );
        let rows = sqlx::query(&sql)
            .bind(q.tenant_id.as_deref())
            .bind(q.user.as_deref())
            .bind(q.entity.as_deref())
            .bind(q.action.as_deref())
            .bind(q.from)
            .bind(q.to)
            .bind(i64::try_from(q.limit).unwrap_or(i64::MAX))
            .bind(i64::try_from(q.offset).unwrap_or(i64::MAX))
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|r| {
                let stored = stored_from_row(r)?;
                stored.record().ok_or_else(|| {
                    StoreError::Corrupt(format!(
                        "audit record {} of {}: body",
                        stored.seq, stored.tenant_id
                    ))
                })
            })
            .collect()
    }

    /// Every tenant's anchor (the tenants that have records or had them).
    pub(crate) async fn audit_anchors_impl(&self) -> Result<Vec<AuditAnchor>> {
        let rows = sqlx::query(
            "SELECT tenant_id, seq, hash, first_seq, first_prev FROM audit_heads ORDER BY tenant_id",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AuditAnchor {
                    tenant_id: r.try_get("tenant_id")?,
                    first_seq: to_u64(r.try_get("first_seq")?, "audit first seq")?,
                    first_prev: r.try_get("first_prev")?,
                    head_seq: to_u64(r.try_get("seq")?, "audit head seq")?,
                    head_hash: r.try_get("hash")?,
                })
            })
            .collect()
    }

    /// Up to `limit` records of `tenant_id` from number `from_seq` on, in order, as stored.
    pub(crate) async fn audit_chain_impl(
        &self,
        tenant_id: &str,
        from_seq: u64,
        limit: u64,
    ) -> Result<Vec<StoredAudit>> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit WHERE tenant_id = $1 AND seq >= $2 \
             ORDER BY seq LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(i64::try_from(from_seq).unwrap_or(i64::MAX))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(stored_from_row).collect()
    }

    /// Removes every tenant's records older than `before` (ms), oldest first, and moves each
    /// tenant's anchor past them. Returns how many went.
    pub(crate) async fn purge_audit_impl(&self, before: i64) -> Result<u64> {
        let mut gone = 0;
        for anchor in self.audit_anchors_impl().await? {
            let mut tx = self.write_tx().await?;
            // Nothing to do unless the oldest record is past retention (one look-up by key).
            let oldest: Option<i64> =
                sqlx::query_scalar("SELECT time FROM audit WHERE tenant_id = $1 AND seq = $2")
                    .bind(anchor.tenant_id.as_str())
                    .bind(i64::try_from(anchor.first_seq).unwrap_or(i64::MAX))
                    .fetch_optional(&mut *tx)
                    .await?;
            if oldest.is_none_or(|t| t >= before) {
                continue;
            }
            // The last record to go: the newest older than `before` (records are appended in
            // about time order; one a little newer among them goes with them).
            let last = sqlx::query(
                "SELECT seq, hash FROM audit WHERE tenant_id = $1 AND seq = (SELECT MAX(seq) \
                 FROM audit WHERE tenant_id = $1 AND time < $2)",
            )
            .bind(anchor.tenant_id.as_str())
            .bind(before)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(last) = last else { continue };
            let seq: i64 = last.try_get("seq")?;
            let hash: String = last.try_get("hash")?;
            let n = sqlx::query("DELETE FROM audit WHERE tenant_id = $1 AND seq <= $2")
                .bind(anchor.tenant_id.as_str())
                .bind(seq)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query(
                "UPDATE audit_heads SET first_seq = $2, first_prev = $3 WHERE tenant_id = $1",
            )
            .bind(anchor.tenant_id.as_str())
            .bind(seq + 1)
            .bind(hash.as_str())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            gone += n;
        }
        Ok(gone)
    }
}
