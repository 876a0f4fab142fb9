//! Webhook rows and their delivery log (see [`crate::webhooks`]).

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Hot, SqlStore};
use crate::webhooks::{DeliveryRow, DeliveryStatus, WebhookRow};
use crate::{Result, StoreError};

const DELIVERY_COLUMNS: &str = "tenant_id, webhook_id, event_id, cluster_id, status, attempts, \
     first_time, last_time, next_time, code, error, latency_ms";

fn to_u64(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what}: {v}")))
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn webhook_from_row(row: &AnyRow) -> Result<WebhookRow> {
    let body: String = row.try_get("body")?;
    Ok(WebhookRow {
        tenant_id: row.try_get("tenant_id")?,
        id: row.try_get("id")?,
        body: serde_json::from_str(&body)
            .map_err(|e| StoreError::Corrupt(format!("webhook body: {e}")))?,
        cursor: to_u64(row.try_get("cursor")?, "webhook cursor")?,
        create_time: row.try_get("create_time")?,
    })
}

fn delivery_from_row(row: &AnyRow) -> Result<DeliveryRow> {
    let status: String = row.try_get("status")?;
    let opt_u64 = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
    Ok(DeliveryRow {
        tenant_id: row.try_get("tenant_id")?,
        webhook_id: row.try_get("webhook_id")?,
        event_id: to_u64(row.try_get("event_id")?, "delivery event")?,
        cluster_id: opt_u64(row.try_get("cluster_id")?),
        status: DeliveryStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("delivery status {status:?}")))?,
        attempts: u32::try_from(row.try_get::<i64, _>("attempts")?).unwrap_or(u32::MAX),
        first_time: row.try_get("first_time")?,
        last_time: row.try_get("last_time")?,
        next_time: row.try_get("next_time")?,
        code: row
            .try_get::<Option<i64>, _>("code")?
            .and_then(|c| u16::try_from(c).ok()),
        error: row.try_get("error")?,
        latency_ms: opt_u64(row.try_get("latency_ms")?),
    })
}

impl<B: Hot> SqlStore<B> {
    pub(crate) async fn put_webhook_impl(&self, w: &WebhookRow) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO webhooks (tenant_id, id, body, cursor, create_time) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, id) DO UPDATE SET body = excluded.body",
        )
        .bind(w.tenant_id.as_str())
        .bind(w.id.as_str())
        .bind(w.body.to_string())
        .bind(i(w.cursor))
        .bind(w.create_time)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn list_webhooks_impl(
        &self,
        tenant_id: Option<&str>,
    ) -> Result<Vec<WebhookRow>> {
        let rows = sqlx::query(
            "SELECT tenant_id, id, body, cursor, create_time FROM webhooks \
             WHERE ($1 IS NULL OR tenant_id = $1) ORDER BY tenant_id, create_time, id",
        )
        .bind(tenant_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(webhook_from_row).collect()
    }

    pub(crate) async fn get_webhook_impl(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<Option<WebhookRow>> {
        let row = sqlx::query(
            "SELECT tenant_id, id, body, cursor, create_time FROM webhooks \
             WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(webhook_from_row).transpose()
    }

    /// Removes a webhook and its delivery log; `true` if it existed.
    pub(crate) async fn delete_webhook_impl(&self, tenant_id: &str, id: &str) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2")
            .bind(tenant_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let n = sqlx::query("DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2")
            .bind(tenant_id)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }

    /// Takes or keeps the webhook's lease for `owner` until `until`; `false` if another holds it.
    pub(crate) async fn lease_webhook_impl(
        &self,
        tenant_id: &str,
        id: &str,
        owner: &str,
        now: i64,
        until: i64,
    ) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query(
            "UPDATE webhooks SET lease_owner = $3, lease_until = $5 WHERE tenant_id = $1 \
             AND id = $2 AND (lease_owner IS NULL OR lease_owner = $3 OR lease_until < $4)",
        )
        .bind(tenant_id)
        .bind(id)
        .bind(owner)
        .bind(now)
        .bind(until)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(n == 1)
    }

    /// Moves the webhook's cursor from `from` to `to` and writes `pending` rows, in one commit;
    /// `false` (nothing written) if the cursor is no longer `from`.
    pub(crate) async fn advance_webhook_impl(
        &self,
        tenant_id: &str,
        id: &str,
        from: u64,
        to: u64,
        pending: &[DeliveryRow],
    ) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query(
            "UPDATE webhooks SET cursor = $4 WHERE tenant_id = $1 AND id = $2 AND cursor = $3",
        )
        .bind(tenant_id)
        .bind(id)
        .bind(i(from))
        .bind(i(to))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n != 1 {
            return Ok(false);
        }
        for d in pending {
            insert_delivery(&mut tx, d).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Rewrites a delivery after an attempt (or a redeliver).
    pub(crate) async fn put_delivery_impl(&self, d: &DeliveryRow) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "DELETE FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2 AND event_id = $3",
        )
        .bind(d.tenant_id.as_str())
        .bind(d.webhook_id.as_str())
        .bind(i(d.event_id))
        .execute(&mut *tx)
        .await?;
        insert_delivery(&mut tx, d).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The webhook's oldest pending delivery (the next to send, whether due or not).
    pub(crate) async fn next_delivery_impl(
        &self,
        tenant_id: &str,
        webhook_id: &str,
    ) -> Result<Option<DeliveryRow>> {
        let row = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE tenant_id = $1 \
             AND webhook_id = $2 AND status = 'pending' ORDER BY event_id LIMIT 1"
        ))
        .bind(tenant_id)
        .bind(webhook_id)
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(delivery_from_row).transpose()
    }

    /// The webhook's deliveries, newest event first, `before` an event id if given.
    pub(crate) async fn list_deliveries_impl(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        before: Option<u64>,
        limit: u64,
    ) -> Result<Vec<DeliveryRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE tenant_id = $1 \
             AND webhook_id = $2 AND ($3 IS NULL OR event_id < $3) ORDER BY event_id DESC LIMIT $4"
        ))
        .bind(tenant_id)
        .bind(webhook_id)
        .bind(before.map(i))
        .bind(i(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }

    pub(crate) async fn get_delivery_impl(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        event_id: u64,
    ) -> Result<Option<DeliveryRow>> {
        let row = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE tenant_id = $1 \
             AND webhook_id = $2 AND event_id = $3"
        ))
        .bind(tenant_id)
        .bind(webhook_id)
        .bind(i(event_id))
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(delivery_from_row).transpose()
    }

    /// Retention of the delivery log: rows of events older than `before_event` per tenant are
    /// not needed once delivered or failed; removes those last touched before `before` (ms).
    pub(crate) async fn purge_deliveries_impl(&self, before: i64) -> Result<u64> {
        let mut tx = self.write_tx().await?;
        let n = sqlx::query(
            "DELETE FROM webhook_deliveries WHERE status <> 'pending' AND last_time < $1",
        )
        .bind(before)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(n)
    }
}

async fn insert_delivery(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    d: &DeliveryRow,
) -> Result<()> {
    sqlx::query(&format!(
        "INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
    ))
    .bind(d.tenant_id.as_str())
    .bind(d.webhook_id.as_str())
    .bind(i(d.event_id))
    .bind(d.cluster_id.map(i))
    .bind(d.status.as_str())
    .bind(i64::from(d.attempts))
    .bind(d.first_time)
    .bind(d.last_time)
    .bind(d.next_time)
    .bind(d.code.map(i64::from))
    .bind(d.error.as_deref())
    .bind(d.latency_ms.map(i))
    .execute(&mut **tx)
    .await?;
    Ok(())
}
