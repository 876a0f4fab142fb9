//! [`PgStore`]: the store on PostgreSQL.
//!
//! The engine's change sets and takes skip sqlx's pool: writer tasks with connections of their
//! own batch them, one transaction per batch, most of a batch in one call of a PL/pgSQL function
//! (`pg_writer.rs`); that is this backend's one commit path for change sets. The engine's reads go
//! to connections handed out without sqlx's pings (`pg_reader.rs`). Every other statement runs on
//! sqlx's pool; writes that compute `max(version) + 1` and lose a race on the primary key are
//! retried whole.

use std::str::FromStr;

use async_trait::async_trait;
use sqlx::any::{AnyConnectOptions, AnyRow};
use sqlx::{AnyPool, Row};

use super::engine::{
    bind_param, job_of_task, task_from_row, AnyQuery, Param, RowMap, TASK_WITH_JOB_SQL,
};
use super::pg_reader::PgReader;
use super::pg_writer::PgWriter;
use super::{backend_of, pool_options, prepare, Hot, PgStore, SqlStore, TaskWithJob};
use crate::engine::{ChangeSet, Taken};
use crate::{Backend, Result, StoreError};

/// PostgreSQL's hot path: the batching writer tasks and the ping-free read connections.
#[derive(Debug, Clone)]
pub struct Postgres {
    writer: PgWriter,
    reader: PgReader,
}

impl PgStore {
    /// Opens `postgres://...` or `postgresql://...`, applies the missing migrations (one server at
    /// a time) and makes sure the superadmin tenant exists.
    pub async fn open(url: &str) -> Result<PgStore> {
        sqlx::any::install_default_drivers();
        if backend_of(url)? != Backend::Postgres {
            return Err(StoreError::BadUrl(url.to_string()));
        }
        let opts = AnyConnectOptions::from_str(url)?;
        let pool = pool_options(16).connect_with(opts.clone()).await?;
        prepare(&pool, Backend::Postgres).await?;
        let hot = Postgres {
            reader: PgReader::new(opts.clone()),
            writer: PgWriter::start(opts),
        };
        Ok(SqlStore {
            reader: pool.clone(),
            writer: pool,
            hot,
        })
    }
}

#[async_trait]
impl Hot for Postgres {
    const BACKEND: Backend = Backend::Postgres;

    async fn commit(&self, cs: &ChangeSet) -> Result<Vec<String>> {
        self.writer.commit(cs).await
    }

    async fn commit_owned(&self, cs: ChangeSet) -> Result<()> {
        self.writer.commit(&cs).await.map(drop)
    }

    async fn take(
        &self,
        tenant_id: &str,
        owner: &str,
        now: i64,
        deadline: i64,
    ) -> Result<Option<Taken>> {
        self.writer.take(tenant_id, owner, now, deadline).await
    }

    async fn task_with_job(&self, tenant_id: &str, task_id: &str) -> Result<TaskWithJob> {
        let q = sqlx::query(&TASK_WITH_JOB_SQL)
            .bind(tenant_id)
            .bind(task_id);
        let row = self.row(q).await?;
        row.map(|r| Ok((task_from_row(&r)?, job_of_task(&r)?)))
            .transpose()
    }

    async fn scalar(
        &self,
        pool: &AnyPool,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Option<i64>> {
        let mut q = sqlx::query(sql);
        for p in params {
            q = bind_param(q, p);
        }
        let mut tx = pool.begin().await?;
        let row = q.fetch_optional(&mut *tx).await?;
        tx.commit().await?;
        Ok(row.map(|r| r.try_get::<i64, _>(0)).transpose()?)
    }

    async fn read<M: RowMap>(
        &self,
        _pool: &AnyPool,
        sql: String,
        params: Vec<Param>,
    ) -> Result<Vec<M::Out>> {
        let mut q = sqlx::query(&sql);
        for p in params {
            q = bind_param(q, p);
        }
        let rows = self.rows(q).await?;
        rows.iter().map(M::map).collect()
    }

    async fn fetch_all(&self, _pool: &AnyPool, q: AnyQuery<'_>) -> Result<Vec<AnyRow>> {
        self.rows(q).await
    }

    async fn fetch_optional(&self, _pool: &AnyPool, q: AnyQuery<'_>) -> Result<Option<AnyRow>> {
        self.row(q).await
    }
}

impl Postgres {
    /// Runs a read on one of the read connections.
    async fn rows(&self, q: AnyQuery<'_>) -> Result<Vec<AnyRow>> {
        let mut c = self.reader.conn().await?;
        let out = q.fetch_all(c.get()).await;
        Ok(c.done(out)?)
    }

    /// Runs a read of one row at most on one of the read connections.
    async fn row(&self, q: AnyQuery<'_>) -> Result<Option<AnyRow>> {
        let mut c = self.reader.conn().await?;
        let out = q.fetch_optional(c.get()).await;
        Ok(c.done(out)?)
    }
}
