//! The event backlog's rows (see [`crate::events`]): reads after a number, the PostgreSQL
//! sequencer, and retention.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Hot, SqlStore};
use crate::events::{Event, EventBounds, EventKind, EventQuery};
use crate::{Backend, Result, StoreError};

/// PostgreSQL advisory lock of the sequencer: one pass at a time across servers.
const PG_SEQUENCER_LOCK: i64 = 0x7765_6674_6576_7473; // "weftevts"
/// Events numbered per sequencer pass at most.
const SEQUENCE_BATCH: i64 = 20_000;

fn to_u64(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what}: {v}")))
}

/// The event a row holds, its columns placed by kind.
fn event_from_row(row: &AnyRow) -> Result<Event> {
    let kind: String = row.try_get("kind")?;
    let kind = EventKind::parse(&kind)
        .ok_or_else(|| StoreError::Corrupt(format!("event kind {kind:?}")))?;
    let cluster: Option<i64> = row.try_get("cluster_id")?;
    let subject: Option<String> = row.try_get("subject")?;
    let detail: Option<String> = row.try_get("detail")?;
    let mut e = Event {
        id: to_u64(row.try_get("seq")?, "event seq")?,
        time: row.try_get("time")?,
        kind,
        // As the API writes cluster ids (weft_engine::ids): eight digits at least.
        cluster_id: cluster.map(|c| format!("{c:08}")),
        cluster_name: None,
        job_id: row.try_get("job_id")?,
        task_id: None,
        node_id: row.try_get("node_id")?,
        service: row.try_get("service")?,
        action: row.try_get("action")?,
        status: row.try_get("status")?,
        previous: row.try_get("previous")?,
        audit: None,
    };
    match kind {
        EventKind::Cluster => e.cluster_name = subject,
        EventKind::Task => e.task_id = subject,
        EventKind::Job | EventKind::Node => {}
        EventKind::Audit => {
            e.audit = detail.as_deref().and_then(|d| serde_json::from_str(d).ok());
        }
    }
    Ok(e)
}

impl<B: Hot> SqlStore<B> {
    /// The events `q` asks for, oldest first.
    pub(crate) async fn read_events_impl(&self, q: &EventQuery) -> Result<Vec<Event>> {
        let kinds = (!q.kinds.is_empty()).then(|| {
            let names: Vec<&str> = q.kinds.iter().map(|k| k.as_str()).collect();
            format!(",{},", names.join(","))
        });
        let rows = sqlx::query(
            "SELECT seq, time, kind, cluster_id, subject, status, previous, action, job_id, \
             node_id, service, detail FROM events WHERE tenant_id = $1 AND seq > $2 \
             AND ($3 IS NULL OR cluster_id = $3) \
             AND ($4 IS NULL OR $4 LIKE '%,' || kind || ',%') \
             AND ($5 IS NULL OR (kind <> 'audit' AND EXISTS (SELECT 1 FROM clusters c \
                 WHERE c.tenant_id = events.tenant_id AND c.id = events.cluster_id \
                 AND c.owner = $5))) \
             ORDER BY seq LIMIT $6",
        )
        .bind(q.tenant_id.as_str())
        .bind(i64::try_from(q.after).unwrap_or(i64::MAX))
        .bind(q.cluster_id.and_then(|c| i64::try_from(c).ok()))
        .bind(kinds)
        .bind(q.owner.as_deref())
        .bind(i64::try_from(q.limit).unwrap_or(i64::MAX))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// The oldest and newest numbers `tenant_id`'s backlog holds.
    pub(crate) async fn event_bounds_impl(&self, tenant_id: &str) -> Result<EventBounds> {
        let row = sqlx::query(
            "SELECT COALESCE(MIN(seq), 0) AS oldest, COALESCE(MAX(seq), 0) AS newest \
             FROM events WHERE tenant_id = $1 AND seq IS NOT NULL",
        )
        .bind(tenant_id)
        .fetch_one(&self.reader)
        .await?;
        let newest = match self.backend_kind() {
            // The head row: MAX over the index would step over the events not numbered yet.
            Backend::Postgres => {
                sqlx::query_scalar::<_, i64>("SELECT seq FROM event_heads WHERE tenant_id = $1")
                    .bind(tenant_id)
                    .fetch_optional(&self.reader)
                    .await?
                    .unwrap_or(0)
            }
            Backend::Sqlite => row.try_get("newest")?,
        };
        Ok(EventBounds {
            oldest: to_u64(row.try_get("oldest")?, "event seq")?,
            newest: to_u64(newest, "event seq")?,
        })
    }

    /// Numbers the events committed since the last pass (PostgreSQL; SQLite numbers them as
    /// they are written) and returns a mark that changes whenever a tenant has new events.
    pub(crate) async fn sequence_events_impl(&self) -> Result<u64> {
        if self.backend_kind() == Backend::Sqlite {
            let mark: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(pid), 0) FROM events")
                .fetch_one(&self.reader)
                .await?;
            return to_u64(mark, "event pid");
        }
        let mut tx = self.write_tx().await?;
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1)) AS l")
            .bind(PG_SEQUENCER_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "WITH pending AS (SELECT pid, tenant_id FROM events WHERE seq IS NULL \
                 ORDER BY pid LIMIT $1), \
             numbered AS (SELECT p.pid, p.tenant_id, COALESCE(h.seq, 0) \
                 + row_number() OVER (PARTITION BY p.tenant_id ORDER BY p.pid) AS seq \
                 FROM pending p LEFT JOIN event_heads h ON h.tenant_id = p.tenant_id), \
             done AS (UPDATE events SET seq = n.seq FROM numbered n WHERE events.pid = n.pid \
                 RETURNING events.tenant_id, events.seq) \
             INSERT INTO event_heads (tenant_id, seq) \
                 SELECT tenant_id, MAX(seq) FROM done GROUP BY tenant_id \
             ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq",
        )
        .bind(SEQUENCE_BATCH)
        .execute(&mut *tx)
        .await?;
        let mark: i64 =
            sqlx::query_scalar("SELECT CAST(COALESCE(SUM(seq), 0) AS BIGINT) FROM event_heads")
                .fetch_one(&mut *tx)
                .await?;
        tx.commit().await?;
        to_u64(mark, "event mark")
    }

    /// Retention: removes events older than `before` (ms), but never a tenant's newest (on
    /// SQLite its number is where the next one counts from; both backends keep it so that a
    /// tenant's bounds read the same). Events are written in about time order, so the ones to go
    /// are those before the first event at or after `before` in write order (`pid`): found and
    /// removed without an index on time. Returns how many went.
    pub(crate) async fn purge_events_impl(&self, before: i64) -> Result<u64> {
        let newest = match self.backend_kind() {
            Backend::Sqlite => {
                "(SELECT MAX(e.seq) FROM events e WHERE e.tenant_id = events.tenant_id)"
            }
            Backend::Postgres => {
                "(SELECT h.seq FROM event_heads h WHERE h.tenant_id = events.tenant_id)"
            }
        };
        let sql = format!(
            "DELETE FROM events WHERE pid < COALESCE((SELECT MIN(pid) FROM \
             (SELECT pid FROM events WHERE time >= $1 ORDER BY pid LIMIT 1) AS b), \
             (SELECT MAX(pid) + 1 FROM events)) AND seq < {newest}"
        );
        let mut tx = self.write_tx().await?;
        let n = sqlx::query(&sql)
            .bind(before)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n)
    }
}
