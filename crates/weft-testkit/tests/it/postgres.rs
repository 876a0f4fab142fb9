//! [`TempPostgres`] hands out separate, working databases and cleans up after itself.

use sqlx::{Connection, PgConnection};
use weft_testkit::TempPostgres;

async fn current_database(url: &str) -> anyhow::Result<String> {
    let mut conn = PgConnection::connect(url).await?;
    let name: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok(name)
}

async fn database_exists(url: &str, name: &str) -> anyhow::Result<bool> {
    let mut conn = PgConnection::connect(url).await?;
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok(n > 0)
}

#[tokio::test]
async fn each_handle_gets_its_own_database() -> anyhow::Result<()> {
    if !weft_testkit::require("postgres") {
        return Ok(());
    }
    let a = TempPostgres::start().await?;
    let b = TempPostgres::start().await?;
    assert_ne!(a.database(), b.database());
    assert_eq!(current_database(&a.url()).await?, a.database());
    assert_eq!(current_database(&b.url()).await?, b.database());
    Ok(())
}

#[tokio::test]
async fn an_external_server_gets_a_fresh_database_that_is_dropped_afterwards() -> anyhow::Result<()>
{
    if !weft_testkit::require("postgres") {
        return Ok(());
    }
    let server = TempPostgres::start().await?;
    let external = TempPostgres::on_server(&server.url()).await?;
    let name = external.database().to_string();
    assert_ne!(name, server.database());
    assert_eq!(current_database(&external.url()).await?, name);
    drop(external);
    assert!(!database_exists(&server.url(), &name).await?);
    Ok(())
}
