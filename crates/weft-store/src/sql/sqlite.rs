//! [`SqliteStore`]: the store on a SQLite file.
//!
//! The engine's hot operations skip sqlx: change sets, takes and the leader lease are messages to
//! a writer thread that owns a connection of its own and commits them in batches (`writer.rs`),
//! and the frequent reads go to a reader thread. Every other statement runs on sqlx's pools (one
//! writer connection, four readers); its writes serialize with the writer thread's through
//! SQLite's write lock and the busy timeout.

use std::path::Path;
use std::str::FromStr;

use async_trait::async_trait;
use sqlx::any::{AnyConnectOptions, AnyRow};
use sqlx::AnyPool;

use super::engine::{AnyQuery, Param, RowMap};
use super::writer::{SqliteReader, SqliteWriter};
use super::{
    prepare, sqlite_path, sqlite_pool, sqlite_url, Hot, SqlStore, SqliteStore, TaskWithJob,
};
use crate::engine::{ChangeSet, Taken};
use crate::{Backend, Result, StoreError};

/// SQLite's hot path: the writer thread and the reader thread on the database file.
#[derive(Debug, Clone)]
pub struct Sqlite {
    writer: SqliteWriter,
    reader: SqliteReader,
}

impl SqliteStore {
    /// Opens `sqlite://PATH` (the file is created if missing), applies the missing migrations and
    /// makes sure the superadmin tenant exists. An in-memory database is refused: it would forget
    /// every cluster, and so leave its machines behind, when weft stops (and the writer thread
    /// could not see it).
    pub async fn open(url: &str) -> Result<SqliteStore> {
        sqlx::any::install_default_drivers();
        if !url.starts_with("sqlite:") || url.contains(":memory:") || url.contains("mode=memory") {
            return Err(StoreError::BadUrl(url.to_string()));
        }
        let url = sqlite_url(url);
        let opts = AnyConnectOptions::from_str(&url)?;
        let writer = sqlite_pool(1).connect_with(opts.clone()).await?;
        prepare(&writer, Backend::Sqlite).await?;
        let reader = sqlite_pool(4).connect_with(opts).await?;
        let path = Path::new(sqlite_path(&url));
        let hot = Sqlite {
            writer: SqliteWriter::start(path)?,
            reader: SqliteReader::start(path)?,
        };
        Ok(SqlStore {
            writer,
            reader,
            hot,
        })
    }
}

#[async_trait]
impl Hot for Sqlite {
    const BACKEND: Backend = Backend::Sqlite;

    async fn commit(&self, cs: &ChangeSet) -> Result<Vec<String>> {
        self.writer.commit(cs).await
    }

    async fn commit_owned(&self, cs: ChangeSet) -> Result<()> {
        self.writer.commit_owned(cs).await.map(drop)
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
        self.writer.task_with_job(tenant_id, task_id).await
    }

    /// On the writer thread: it waits its turn behind a long batch (a 20,000-node create's
    /// commit) instead of failing on the busy timeout of a second writer.
    async fn scalar(
        &self,
        _pool: &AnyPool,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Option<i64>> {
        self.writer.scalar(sql, params).await
    }

    async fn read<M: RowMap>(
        &self,
        _pool: &AnyPool,
        sql: String,
        params: Vec<Param>,
    ) -> Result<Vec<M::Out>> {
        self.reader.query(sql, params, |row| M::map(row)).await
    }

    async fn fetch_all(&self, pool: &AnyPool, q: AnyQuery<'_>) -> Result<Vec<AnyRow>> {
        Ok(q.fetch_all(pool).await?)
    }

    async fn fetch_optional(&self, pool: &AnyPool, q: AnyQuery<'_>) -> Result<Option<AnyRow>> {
        Ok(q.fetch_optional(pool).await?)
    }
}
