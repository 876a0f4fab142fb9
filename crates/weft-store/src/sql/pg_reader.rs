//! PostgreSQL: connections for the engine's frequent reads (a take's cluster and node, a finish's
//! task), kept apart from sqlx's pool.
//!
//! sqlx's pool pings a connection each time it is given back (and, by default, each time it is
//! handed out): three round trips for every one-statement read. These connections are handed out
//! and given back without a ping: one is given back only after its statement succeeded, and closed
//! when the statement failed or its future was dropped half-way.

use std::sync::{Arc, Mutex};

use sqlx::any::{AnyArguments, AnyConnectOptions, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, Connection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Hot, SqlStore};
use crate::Result;

/// At most this many reads run at once; the others wait for a connection.
const CONNECTIONS: usize = 8;

#[derive(Debug, Clone)]
pub(crate) struct PgReader {
    opts: AnyConnectOptions,
    idle: Arc<Mutex<Vec<AnyConnection>>>,
    permits: Arc<Semaphore>,
}

/// A connection handed out; given back when dropped after [`ReadConn::done`], closed otherwise.
pub(crate) struct ReadConn {
    conn: Option<AnyConnection>,
    ok: bool,
    idle: Arc<Mutex<Vec<AnyConnection>>>,
    _permit: OwnedSemaphorePermit,
}

impl PgReader {
    pub(crate) fn new(opts: AnyConnectOptions) -> PgReader {
        PgReader {
            opts,
            idle: Arc::default(),
            permits: Arc::new(Semaphore::new(CONNECTIONS)),
        }
    }

    /// An idle connection, or a new one when there is none.
    pub(crate) async fn conn(&self) -> Result<ReadConn> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let idle = self.idle.lock().expect("reader lock").pop();
        let conn = match idle {
            Some(c) => c,
            None => AnyConnection::connect_with(&self.opts).await?,
        };
        Ok(ReadConn {
            conn: Some(conn),
            ok: false,
            idle: Arc::clone(&self.idle),
            _permit: permit,
        })
    }
}

impl ReadConn {
    /// The connection to run a statement on.
    pub(crate) fn get(&mut self) -> &mut AnyConnection {
        self.conn.as_mut().expect("present until dropped")
    }

    /// Passes `r` through, marking the connection fit to be used again when it is `Ok`.
    pub(crate) fn done<T>(mut self, r: sqlx::Result<T>) -> sqlx::Result<T> {
        self.ok = r.is_ok();
        if r.as_ref().is_err_and(super::connection_lost) {
            // The server went away (a restart, a failover): the idle connections went with it.
            // Dropped now, each read after this one connects afresh instead of failing in turn.
            self.idle.lock().expect("reader lock").clear();
        }
        r
    }
}

impl Drop for ReadConn {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.ok {
                self.idle.lock().expect("reader lock").push(conn);
            }
        }
    }
}

/// Runs a read on the backend's own read connections where it has them (PostgreSQL's
/// [`PgReader`]), else on the store's read pool.
pub(super) trait ReadOn {
    async fn fetch_optional_on<B: Hot>(self, store: &SqlStore<B>) -> Result<Option<AnyRow>>;
    async fn fetch_all_on<B: Hot>(self, store: &SqlStore<B>) -> Result<Vec<AnyRow>>;
}

impl<'q> ReadOn for Query<'q, Any, AnyArguments<'q>> {
    async fn fetch_optional_on<B: Hot>(self, store: &SqlStore<B>) -> Result<Option<AnyRow>> {
        store.hot.fetch_optional(&store.reader, self).await
    }

    async fn fetch_all_on<B: Hot>(self, store: &SqlStore<B>) -> Result<Vec<AnyRow>> {
        store.hot.fetch_all(&store.reader, self).await
    }
}
