//! [`HostPoolStore`] for [`SqlStore`]: the `pool_hosts` table (migration 3).
//!
//! A host is free while `node_id` is NULL; `state` is `reserved` or `in_use` while it is lent.
//! Reservations are serialized per pool: on SQLite by the one writer (`BEGIN IMMEDIATE`), on
//! PostgreSQL by a transaction-scoped advisory lock on (tenant, provider) that reservations and
//! deletes take. Every write that lends a host also requires `node_id IS NULL` in its `WHERE`,
//! and the unique index on `(tenant_id, node_id)` keeps a node from holding two hosts.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};
use weft_model::HostState;

use super::{is_unique_violation, to_i64, to_u64, Hot, SqlStore};
use crate::hostpool::{
    assign, shortfall, HostDelete, HostLease, HostPoolStore, HostRequest, PoolHostRow, Reservation,
};
use crate::leader::fnv1a64;
use crate::{Backend, Result, StoreError};

/// The class of the advisory locks that serialize a pool's reservations ("pool" in ASCII).
const POOL_LOCK_CLASS: i32 = 0x706f_6f6c;

const COLUMNS: &str = "tenant_id, provider, id, address, port, user_name, ssh_key, labels, state, \
     cluster_id, node_id, reserve_time, create_time";

/// How often a reservation that lost a host to a concurrent writer is tried again.
const MAX_TRIES: usize = 8;

fn host_from_row(row: &AnyRow) -> Result<PoolHostRow> {
    let port: i64 = row.try_get("port")?;
    let labels: String = row.try_get("labels")?;
    let node_id: Option<String> = row.try_get("node_id")?;
    let lease = match node_id {
        None => None,
        Some(node_id) => {
            let state: Option<String> = row.try_get("state")?;
            Some(HostLease {
                cluster_id: to_u64(
                    row.try_get::<Option<i64>, _>("cluster_id")?.unwrap_or(0),
                    "pool host cluster id",
                )?,
                node_id,
                state: match state.as_deref() {
                    Some("reserved") => HostState::Reserved,
                    _ => HostState::InUse,
                },
                since: row.try_get::<Option<i64>, _>("reserve_time")?.unwrap_or(0),
            })
        }
    };
    Ok(PoolHostRow {
        tenant_id: row.try_get("tenant_id")?,
        provider: row.try_get("provider")?,
        id: row.try_get("id")?,
        address: row.try_get("address")?,
        port: u16::try_from(port)
            .map_err(|_| StoreError::Corrupt(format!("pool host port {port}")))?,
        user: row.try_get("user_name")?,
        key: row.try_get("ssh_key")?,
        labels: serde_json::from_str(&labels)
            .map_err(|e| StoreError::Corrupt(format!("pool host labels: {e}")))?,
        lease,
        create_time: row.try_get("create_time")?,
    })
}

fn labels_json(labels: &BTreeMap<String, String>) -> String {
    serde_json::to_string(labels).expect("a map of strings always serializes")
}

/// What a unique violation on `pool_hosts` means.
fn conflict(host: &PoolHostRow, e: sqlx::Error) -> StoreError {
    if is_unique_violation(&e) {
        StoreError::Conflict(format!(
            "host {} (or a host at {}:{})",
            host.id, host.address, host.port
        ))
    } else {
        e.into()
    }
}

/// On PostgreSQL, serializes the writers of one pool until the transaction ends.
async fn lock_pool(
    tx: &mut Transaction<'static, Any>,
    backend: Backend,
    tenant_id: &str,
    provider: &str,
) -> Result<()> {
    if backend == Backend::Postgres {
        let key = fnv1a64(format!("{tenant_id}/{provider}").as_bytes()) as u32 as i32;
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1, $2)) AS l")
            .bind(POOL_LOCK_CLASS)
            .bind(key)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

async fn select_hosts(
    tx: &mut Transaction<'static, Any>,
    tenant_id: &str,
    provider: &str,
) -> Result<Vec<PoolHostRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM pool_hosts WHERE tenant_id = $1 AND provider = $2 ORDER BY id"
    );
    let rows = sqlx::query(&sql)
        .bind(tenant_id)
        .bind(provider)
        .fetch_all(&mut **tx)
        .await?;
    rows.iter().map(host_from_row).collect()
}

/// One try at a reservation; `None` when a chosen host was taken meanwhile (the caller retries).
async fn try_reserve<B: Hot>(
    store: &SqlStore<B>,
    tenant_id: &str,
    provider: &str,
    cluster_id: u64,
    requests: &[HostRequest],
    now: i64,
) -> Result<Option<Reservation>> {
    let mut tx = store.write_tx().await?;
    lock_pool(&mut tx, store.backend_kind(), tenant_id, provider).await?;
    let hosts = select_hosts(&mut tx, tenant_id, provider).await?;
    let held = |node: &str| {
        hosts.iter().position(|h| {
            h.lease
                .as_ref()
                .is_some_and(|l| l.node_id == node && l.cluster_id == cluster_id)
        })
    };
    let mut answer: Vec<Option<usize>> = requests.iter().map(|r| held(&r.node_id)).collect();
    let free: Vec<usize> = (0..hosts.len())
        .filter(|&h| hosts[h].lease.is_none())
        .collect();
    let open: Vec<usize> = (0..requests.len())
        .filter(|&r| answer[r].is_none())
        .collect();
    let selectors: Vec<_> = open.iter().map(|&r| &requests[r].selector).collect();
    let labels: Vec<_> = free.iter().map(|&h| &hosts[h].labels).collect();
    let Some(picked) = assign(&selectors, &labels) else {
        return Ok(Some(Reservation::Short(shortfall(&selectors, &labels))));
    };
    for (i, &r) in open.iter().enumerate() {
        let h = free[picked[i]];
        let done = sqlx::query(
            "UPDATE pool_hosts SET state = 'reserved', cluster_id = $4, node_id = $5, \
             reserve_time = $6 WHERE tenant_id = $1 AND provider = $2 AND id = $3 \
             AND node_id IS NULL",
        )
        .bind(tenant_id)
        .bind(provider)
        .bind(hosts[h].id.as_str())
        .bind(to_i64(cluster_id))
        .bind(requests[r].node_id.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(None); // dropped: rolls back what this try took
        }
        answer[r] = Some(h);
    }
    tx.commit().await?;
    let out = requests
        .iter()
        .zip(answer)
        .map(|(req, h)| {
            let mut host = hosts[h.expect("every request has a host")].clone();
            if host.lease.is_none() {
                host.lease = Some(HostLease {
                    cluster_id,
                    node_id: req.node_id.clone(),
                    state: HostState::Reserved,
                    since: now,
                });
            }
            host
        })
        .collect();
    Ok(Some(Reservation::Reserved(out)))
}

const FREE: &str = "state = NULL, cluster_id = NULL, node_id = NULL, reserve_time = NULL";

#[async_trait]
impl<B: Hot> HostPoolStore for SqlStore<B> {
    async fn list_pool_hosts(
        &self,
        tenant_id: &str,
        provider: Option<&str>,
    ) -> Result<Vec<PoolHostRow>> {
        let rows = match provider {
            Some(p) => {
                let sql = format!(
                    "SELECT {COLUMNS} FROM pool_hosts WHERE tenant_id = $1 AND provider = $2 \
                     ORDER BY id"
                );
                sqlx::query(&sql)
                    .bind(tenant_id)
                    .bind(p)
                    .fetch_all(&self.reader)
                    .await?
            }
            None => {
                let sql = format!(
                    "SELECT {COLUMNS} FROM pool_hosts WHERE tenant_id = $1 ORDER BY provider, id"
                );
                sqlx::query(&sql)
                    .bind(tenant_id)
                    .fetch_all(&self.reader)
                    .await?
            }
        };
        rows.iter().map(host_from_row).collect()
    }

    async fn get_pool_host(
        &self,
        tenant_id: &str,
        provider: &str,
        id: &str,
    ) -> Result<Option<PoolHostRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM pool_hosts WHERE tenant_id = $1 AND provider = $2 AND id = $3"
        );
        let row = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(provider)
            .bind(id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(host_from_row).transpose()
    }

    async fn insert_pool_host(&self, host: &PoolHostRow) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO pool_hosts (tenant_id, provider, id, address, port, user_name, ssh_key, \
             labels, create_time) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(host.tenant_id.as_str())
        .bind(host.provider.as_str())
        .bind(host.id.as_str())
        .bind(host.address.as_str())
        .bind(i64::from(host.port))
        .bind(host.user.as_str())
        .bind(host.key.as_str())
        .bind(labels_json(&host.labels))
        .bind(host.create_time)
        .execute(&mut *tx)
        .await
        .map_err(|e| conflict(host, e))?;
        tx.commit().await?;
        Ok(())
    }

    async fn update_pool_host(&self, host: &PoolHostRow) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE pool_hosts SET address = $4, port = $5, user_name = $6, ssh_key = $7, \
             labels = $8 WHERE tenant_id = $1 AND provider = $2 AND id = $3",
        )
        .bind(host.tenant_id.as_str())
        .bind(host.provider.as_str())
        .bind(host.id.as_str())
        .bind(host.address.as_str())
        .bind(i64::from(host.port))
        .bind(host.user.as_str())
        .bind(host.key.as_str())
        .bind(labels_json(&host.labels))
        .execute(&mut *tx)
        .await
        .map_err(|e| conflict(host, e))?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_pool_host(
        &self,
        tenant_id: &str,
        provider: &str,
        id: &str,
    ) -> Result<HostDelete> {
        let mut tx = self.write_tx().await?;
        lock_pool(&mut tx, self.backend_kind(), tenant_id, provider).await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM pool_hosts WHERE tenant_id = $1 AND provider = $2 AND id = $3"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(provider)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(HostDelete::Missing);
        };
        let host = host_from_row(&row)?;
        if let Some(lease) = host.lease {
            return Ok(HostDelete::InUse(lease));
        }
        sqlx::query(
            "DELETE FROM pool_hosts WHERE tenant_id = $1 AND provider = $2 AND id = $3 \
             AND node_id IS NULL",
        )
        .bind(tenant_id)
        .bind(provider)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(HostDelete::Deleted)
    }

    async fn reserve_pool_hosts(
        &self,
        tenant_id: &str,
        provider: &str,
        cluster_id: u64,
        requests: &[HostRequest],
        now: i64,
    ) -> Result<Reservation> {
        for _ in 0..MAX_TRIES {
            if let Some(r) =
                try_reserve(self, tenant_id, provider, cluster_id, requests, now).await?
            {
                return Ok(r);
            }
            tracing::debug!(
                tenant_id,
                provider,
                "a chosen host was taken meanwhile; retrying"
            );
        }
        Err(StoreError::Stale(format!(
            "host pool {provider}: hosts kept being taken by concurrent reservations"
        )))
    }

    async fn confirm_pool_hosts(
        &self,
        tenant_id: &str,
        cluster_id: u64,
        node_ids: &[String],
    ) -> Result<u64> {
        let mut tx = self.write_tx().await?;
        let mut n = 0;
        for node in node_ids {
            n += sqlx::query(
                "UPDATE pool_hosts SET state = 'in_use' WHERE tenant_id = $1 AND cluster_id = $2 \
                 AND node_id = $3 AND state = 'reserved'",
            )
            .bind(tenant_id)
            .bind(to_i64(cluster_id))
            .bind(node.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        tx.commit().await?;
        Ok(n)
    }

    async fn release_pool_node(
        &self,
        tenant_id: &str,
        cluster_id: u64,
        node_id: &str,
    ) -> Result<Option<PoolHostRow>> {
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM pool_hosts WHERE tenant_id = $1 AND cluster_id = $2 \
             AND node_id = $3"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(to_i64(cluster_id))
            .bind(node_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        let host = host_from_row(&row)?;
        sqlx::query(&format!(
            "UPDATE pool_hosts SET {FREE} WHERE tenant_id = $1 AND cluster_id = $2 AND node_id = $3"
        ))
        .bind(tenant_id)
        .bind(to_i64(cluster_id))
        .bind(node_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(host))
    }

    async fn release_pool_cluster(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<PoolHostRow>> {
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM pool_hosts WHERE tenant_id = $1 AND cluster_id = $2 ORDER BY id"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(to_i64(cluster_id))
            .fetch_all(&mut *tx)
            .await?;
        let hosts = rows.iter().map(host_from_row).collect::<Result<Vec<_>>>()?;
        sqlx::query(&format!(
            "UPDATE pool_hosts SET {FREE} WHERE tenant_id = $1 AND cluster_id = $2"
        ))
        .bind(tenant_id)
        .bind(to_i64(cluster_id))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(hosts)
    }

    async fn settle_pool_hosts(
        &self,
        cluster: Option<(&str, u64)>,
        reserved_before: i64,
    ) -> Result<Vec<PoolHostRow>> {
        // The scope's placeholders follow a statement's own: `$n` (tenant) and `$n+1` (cluster).
        let scope = |table: &str, n: usize| match cluster {
            Some(_) => format!(
                " AND {table}.tenant_id = ${n} AND {table}.cluster_id = ${}",
                n + 1
            ),
            None => String::new(),
        };
        let node_there = |t: &str| {
            format!(
                "EXISTS (SELECT 1 FROM nodes n WHERE n.tenant_id = {t}.tenant_id \
                 AND n.id = {t}.node_id AND n.cluster_id = {t}.cluster_id)"
            )
        };
        let cluster_where = |status: &str| {
            format!(
                "EXISTS (SELECT 1 FROM clusters c WHERE c.tenant_id = h.tenant_id \
                 AND c.id = h.cluster_id{status})"
            )
        };
        let (tenant, cluster_id) = cluster.map_or(("", 0), |(t, c)| (t, to_i64(c)));
        let mut tx = self.write_tx().await?;

        let confirm = format!(
            "UPDATE pool_hosts SET state = 'in_use' WHERE node_id IS NOT NULL \
             AND state = 'reserved'{} AND {}",
            scope("pool_hosts", 1),
            node_there("pool_hosts")
        );
        let mut q = sqlx::query(&confirm);
        if cluster.is_some() {
            q = q.bind(tenant).bind(cluster_id);
        }
        q.execute(&mut *tx).await?;

        let cols: Vec<String> = COLUMNS.split(", ").map(|c| format!("h.{c}")).collect();
        let stale = format!(
            "SELECT {} FROM pool_hosts h WHERE h.node_id IS NOT NULL{} AND ({} \
             OR ((h.state = 'in_use' OR h.reserve_time < $1) AND (NOT {} OR NOT {}))) \
             ORDER BY h.tenant_id, h.cluster_id, h.id",
            cols.join(", "),
            scope("h", 2),
            cluster_where(" AND c.status = 'terminated'"),
            cluster_where(""),
            node_there("h"),
        );
        let mut q = sqlx::query(&stale).bind(reserved_before);
        if cluster.is_some() {
            q = q.bind(tenant).bind(cluster_id);
        }
        let rows = q.fetch_all(&mut *tx).await?;

        let mut freed = Vec::new();
        for row in &rows {
            let host = host_from_row(row)?;
            let node = host
                .lease
                .as_ref()
                .map(|l| l.node_id.clone())
                .unwrap_or_default();
            let done = sqlx::query(&format!(
                "UPDATE pool_hosts SET {FREE} WHERE tenant_id = $1 AND provider = $2 AND id = $3 \
                 AND node_id = $4"
            ))
            .bind(host.tenant_id.as_str())
            .bind(host.provider.as_str())
            .bind(host.id.as_str())
            .bind(node.as_str())
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 1 {
                freed.push(host);
            }
        }
        tx.commit().await?;
        Ok(freed)
    }

    async fn cluster_pool_hosts(
        &self,
        tenant_id: &str,
        cluster_id: u64,
    ) -> Result<Vec<PoolHostRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM pool_hosts WHERE tenant_id = $1 AND cluster_id = $2 ORDER BY id"
        );
        let rows = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(to_i64(cluster_id))
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(host_from_row).collect()
    }
}
