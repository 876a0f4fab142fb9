//! Throwaway PostgreSQL databases for tests.
//!
//! One server per test process, started on first use and shared by every [`TempPostgres`] alive at
//! the same time (each gets its own database), stopped when the last one drops. The server runs the
//! PostgreSQL binaries found in `/usr/lib/postgresql/15/bin`, `pg_config --bindir` or `PATH`, with
//! trust authentication, `fsync=off`, listening on a free loopback port and with its unix socket in
//! its own temp dir. PostgreSQL refuses to run as root, so under root `initdb` and `postgres` run as
//! the `postgres` system user (through `setpriv`), which is given the temp dir.
//!
//! With `WEFT_TEST_POSTGRES_URL` set, that server is used instead: each handle creates a database
//! with a random name in it and drops it again when dropped.

// Starting PostgreSQL's programs is what this module is for (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use sqlx::Connection;

/// The environment variable naming an external server to use instead of a throwaway one.
pub(crate) const EXTERNAL_URL_VAR: &str = "WEFT_TEST_POSTGRES_URL";

/// The system user the server runs as when the tests run as root.
const SERVER_USER: &str = "postgres";

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The server shared by the handles alive in this process.
static SHARED: Mutex<Weak<Server>> = Mutex::new(Weak::new());

/// A database of one's own on a PostgreSQL server; dropping it releases the database (and stops a
/// throwaway server when no other handle uses it).
#[derive(Debug)]
pub struct TempPostgres {
    /// The throwaway server, or `None` for an external one.
    server: Option<Arc<Server>>,
    /// A URL to a maintenance database on the same server, for creating and dropping databases.
    admin_url: String,
    database: String,
}

impl TempPostgres {
    /// Creates a fresh database on the shared throwaway server (starting it if needed) or, with
    /// `WEFT_TEST_POSTGRES_URL` set, on that server.
    pub async fn start() -> anyhow::Result<TempPostgres> {
        match std::env::var(EXTERNAL_URL_VAR) {
            Ok(url) if !url.is_empty() => TempPostgres::on_server(&url).await,
            _ => {
                let server = tokio::task::spawn_blocking(Server::shared).await??;
                let admin_url = server.url("postgres");
                TempPostgres::create(Some(server), admin_url).await
            }
        }
    }

    /// A database on a throwaway server of its own (never shared, never the external one), so
    /// that the test may [`restart`](TempPostgres::restart) it.
    pub async fn start_own() -> anyhow::Result<TempPostgres> {
        let server = Arc::new(tokio::task::spawn_blocking(Server::start).await??);
        let admin_url = server.url("postgres");
        TempPostgres::create(Some(server), admin_url).await
    }

    /// Restarts the server of [`start_own`](TempPostgres::start_own) on the same port: a fast
    /// shutdown (every session is ended, as a database restart or failover does to its
    /// clients), then a start on the same data. Returns once it accepts connections again.
    pub fn restart(&self) -> anyhow::Result<()> {
        let server = self
            .server
            .as_ref()
            .filter(|s| Arc::strong_count(s) == 1)
            .ok_or_else(|| anyhow!("only a server of one's own (start_own) can be restarted"))?;
        server.restart()
    }

    /// Creates a fresh database on the external server that `url` points to (any database on it
    /// will do); the database is dropped again when the handle drops.
    pub async fn on_server(url: &str) -> anyhow::Result<TempPostgres> {
        TempPostgres::create(None, url.to_string()).await
    }

    async fn create(
        server: Option<Arc<Server>>,
        admin_url: String,
    ) -> anyhow::Result<TempPostgres> {
        let database = format!("weft_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin_url)
            .await
            .with_context(|| format!("connecting to {admin_url}"))?;
        sqlx::query(&format!("CREATE DATABASE \"{database}\""))
            .execute(&mut conn)
            .await
            .with_context(|| format!("creating database {database}"))?;
        conn.close().await.ok();
        Ok(TempPostgres {
            server,
            admin_url,
            database,
        })
    }

    /// The URL of this handle's database: `postgres://USER@HOST:PORT/DATABASE`.
    pub fn url(&self) -> String {
        with_database(&self.admin_url, &self.database)
    }

    /// The name of this handle's database.
    pub fn database(&self) -> &str {
        &self.database
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        if self.server.is_some() {
            // The throwaway server goes away with its directory when the last handle drops.
            return;
        }
        // An external server outlives us: drop the database, from a thread of its own so that this
        // works inside and outside an async runtime.
        let admin_url = self.admin_url.clone();
        let database = self.database.clone();
        let dropped = std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let mut conn = sqlx::PgConnection::connect(&admin_url).await?;
                sqlx::query(&format!(
                    "DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)"
                ))
                .execute(&mut conn)
                .await?;
                conn.close().await?;
                Ok(())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!(
                "weft-testkit: could not drop test database {}: {e:#}",
                self.database
            );
        }
    }
}

/// `Ok` if a PostgreSQL server can be had: an external URL is set or the binaries are installed.
pub fn postgres_available() -> Result<(), String> {
    if std::env::var(EXTERNAL_URL_VAR).is_ok_and(|u| !u.is_empty()) {
        return Ok(());
    }
    bindir().map(|_| ()).map_err(|e| e.to_string())
}

/// `url` with its path (the database name) replaced by `database`; the query string is kept.
fn with_database(url: &str, database: &str) -> String {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[authority_start..];
    let authority_end = rest
        .find(['/', '?'])
        .map_or(url.len(), |i| authority_start + i);
    let query = url[authority_end..]
        .find('?')
        .map_or("", |i| &url[authority_end + i..]);
    format!("{}/{database}{query}", &url[..authority_end])
}

/// A directory holding `initdb`, `postgres` and `pg_isready`.
fn bindir() -> anyhow::Result<PathBuf> {
    let has_all = |d: &Path| {
        ["initdb", "postgres", "pg_isready"]
            .iter()
            .all(|b| d.join(b).is_file())
    };
    let mut candidates = vec![PathBuf::from("/usr/lib/postgresql/15/bin")];
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        if out.status.success() {
            candidates.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        }
    }
    if let Some(p) =
        crate::find_executable("postgres").and_then(|p| p.parent().map(Path::to_path_buf))
    {
        candidates.push(p);
    }
    candidates
        .into_iter()
        .find(|d| has_all(d))
        .ok_or_else(|| anyhow!("no PostgreSQL binaries (initdb, postgres, pg_isready) in /usr/lib/postgresql/15/bin, `pg_config --bindir` or PATH, and {EXTERNAL_URL_VAR} is not set"))
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A command for `program`, run as the server user when we are root.
fn server_command(program: &Path, as_other_user: bool) -> Command {
    if as_other_user {
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={SERVER_USER}"),
            &format!("--regid={SERVER_USER}"),
            "--init-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// A running throwaway server.
#[derive(Debug)]
struct Server {
    port: u16,
    child: Mutex<Child>,
    /// Data dir, socket dir and log; deleted after the server stops.
    dir: Option<tempfile::TempDir>,
}

impl Server {
    /// The server shared in this process, started if none is running.
    fn shared() -> anyhow::Result<Arc<Server>> {
        let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(server) = slot.upgrade() {
            return Ok(server);
        }
        let server = Arc::new(Server::start()?);
        *slot = Arc::downgrade(&server);
        Ok(server)
    }

    fn url(&self, database: &str) -> String {
        format!(
            "postgres://{SERVER_USER}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// Stops the server (SIGINT: a fast shutdown) and starts it again on its port and data.
    fn restart(&self) -> anyhow::Result<()> {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .context("signalling postgres")?;
        child.wait().context("waiting for postgres to stop")?;
        let dir = self.dir.as_ref().expect("present until dropped").path();
        let fresh = Self::spawn_on(
            &bindir()?,
            running_as_root(),
            dir,
            &dir.join("data"),
            self.port,
        )?;
        *child = fresh;
        Ok(())
    }

    fn start() -> anyhow::Result<Server> {
        let bin = bindir()?;
        let as_other = running_as_root();
        let dir = tempfile::Builder::new().prefix("weft-pg-").tempdir()?;
        if as_other {
            let status = Command::new("chown")
                .arg(format!("{SERVER_USER}:"))
                .arg(dir.path())
                .status()
                .context("running chown")?;
            if !status.success() {
                bail!(
                    "chown {SERVER_USER} {} failed: {status}",
                    dir.path().display()
                );
            }
        }
        let data = dir.path().join("data");
        let out = server_command(&bin.join("initdb"), as_other)
            .current_dir(dir.path())
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                SERVER_USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .context("running initdb")?;
        if !out.status.success() {
            bail!(
                "initdb failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // A free port can be taken by someone else before the server binds it: try a few.
        let mut last_error = None;
        for _ in 0..5 {
            match Self::spawn(&bin, as_other, dir.path(), &data) {
                Ok((port, child)) => {
                    return Ok(Server {
                        port,
                        child: Mutex::new(child),
                        dir: Some(dir),
                    })
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("postgres did not start")))
    }

    /// Starts `postgres` on a free port and waits until it accepts connections.
    fn spawn(bin: &Path, as_other: bool, dir: &Path, data: &Path) -> anyhow::Result<(u16, Child)> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Ok((port, Self::spawn_on(bin, as_other, dir, data, port)?))
    }

    /// Starts `postgres` on `port` and waits until it accepts connections.
    fn spawn_on(
        bin: &Path,
        as_other: bool,
        dir: &Path,
        data: &Path,
        port: u16,
    ) -> anyhow::Result<Child> {
        let log_path = dir.join(format!("postgres-{port}.log"));
        let log = File::create(&log_path)?;
        let mut child = server_command(&bin.join("postgres"), as_other)
            .current_dir(dir)
            .arg("-D")
            .arg(data)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k"])
            .arg(dir)
            .args([
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ])
            .args(["-c", "max_connections=300", "-c", "shared_buffers=32MB"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawning postgres")?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                bail!("postgres exited early ({status}): {log}");
            }
            let ready = Command::new(bin.join("pg_isready"))
                .args([
                    "-q",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-U",
                    SERVER_USER,
                ])
                .status()?;
            if ready.success() {
                return Ok(child);
            }
            if Instant::now() > deadline {
                child.kill().ok();
                child.wait().ok();
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                bail!("postgres did not accept connections within {START_TIMEOUT:?}: {log}");
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        // SIGQUIT: immediate shutdown; nothing here needs to survive.
        Command::new("kill")
            .args(["-QUIT", &child.id().to_string()])
            .status()
            .ok();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if matches!(child.try_wait(), Ok(None)) {
            child.kill().ok();
            child.wait().ok();
        }
        if let Some(dir) = self.dir.take() {
            dir.close().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_replaced_and_query_kept() {
        assert_eq!(
            with_database("postgres://u:p@h:5/old", "new"),
            "postgres://u:p@h:5/new"
        );
        assert_eq!(with_database("postgres://u@h", "new"), "postgres://u@h/new");
        assert_eq!(
            with_database("postgresql://u@h/old?sslmode=disable", "new"),
            "postgresql://u@h/new?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u@h?sslmode=disable", "n"),
            "postgres://u@h/n?sslmode=disable"
        );
    }
}
