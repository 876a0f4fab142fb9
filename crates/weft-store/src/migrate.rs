//! The schema and its tiny migration runner.
//!
//! [`MIGRATIONS`] is the ordered list of every schema change, each written once per backend. A
//! migration is frozen once released: change the schema by appending a new one. At open,
//! [`run`] applies the missing ones in order, each in its own transaction together with its row
//! in `weft_schema(version, description, applied_at)`. On PostgreSQL every migration transaction
//! first takes a transaction-scoped advisory lock, so several servers opening one database at the
//! same time apply each migration exactly once; on SQLite the transaction is `BEGIN IMMEDIATE`,
//! which takes the database's write lock up front.
//!
//! Column types are only `BIGINT` and `TEXT` (booleans are 0/1 integers), which both backends and
//! sqlx's `Any` driver agree on. On PostgreSQL key columns use the `"C"` collation so that `ORDER BY
//! name` sorts bytewise, as SQLite's default collation does.

use sqlx::{Any, AnyPool, Transaction};

use crate::{Backend, Result, StoreError};

/// One schema change, written once per backend.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The schema version this migration brings the database to: 1, 2, 3, ... without gaps.
    pub version: i64,
    /// What the migration changes, recorded in `weft_schema`.
    pub description: &'static str,
    /// The SQL for SQLite (one or more statements).
    pub sqlite: &'static str,
    /// The SQL for PostgreSQL (one or more statements).
    pub postgres: &'static str,
}

impl Migration {
    fn sql(&self, backend: Backend) -> &'static str {
        match backend {
            Backend::Sqlite => self.sqlite,
            Backend::Postgres => self.postgres,
        }
    }
}

/// The advisory lock key that serializes migrations on PostgreSQL ("weft" in ASCII).
const PG_MIGRATION_LOCK: i64 = 0x7765_6674;

/// Every migration, in order. The last one's version is the current schema version.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "tenants, entities, plugin resources, profiles, provisioners, api keys",
        sqlite: r#"
CREATE TABLE tenants (
    id TEXT NOT NULL PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    description TEXT,
    workers BIGINT NOT NULL,
    max_clusters BIGINT NOT NULL,
    max_nodes BIGINT NOT NULL,
    create_time BIGINT NOT NULL
);
CREATE TABLE entities (
    tenant_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    version BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, kind, name, version)
);
CREATE TABLE plugin_resources (
    tenant_id TEXT NOT NULL,
    ptype TEXT NOT NULL,
    plugin TEXT NOT NULL,
    rtype TEXT NOT NULL,
    name TEXT NOT NULL,
    version BIGINT NOT NULL,
    live BIGINT NOT NULL,
    slated BIGINT NOT NULL,
    create_time BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, ptype, plugin, rtype, name, version)
);
CREATE TABLE profiles (
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);
CREATE TABLE provisioners (
    id TEXT NOT NULL PRIMARY KEY,
    host TEXT NOT NULL,
    port BIGINT NOT NULL,
    capacity_total BIGINT NOT NULL,
    assignments TEXT NOT NULL,
    usage TEXT NOT NULL,
    last_heartbeat BIGINT NOT NULL
);
CREATE TABLE api_keys (
    id TEXT NOT NULL PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    admin BIGINT NOT NULL,
    create_time BIGINT NOT NULL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);
"#,
        postgres: r#"
CREATE TABLE tenants (
    id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL UNIQUE,
    description TEXT,
    workers BIGINT NOT NULL,
    max_clusters BIGINT NOT NULL,
    max_nodes BIGINT NOT NULL,
    create_time BIGINT NOT NULL
);
CREATE TABLE entities (
    tenant_id TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    version BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, kind, name, version)
);
CREATE TABLE plugin_resources (
    tenant_id TEXT COLLATE "C" NOT NULL,
    ptype TEXT COLLATE "C" NOT NULL,
    plugin TEXT COLLATE "C" NOT NULL,
    rtype TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    version BIGINT NOT NULL,
    live BIGINT NOT NULL,
    slated BIGINT NOT NULL,
    create_time BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, ptype, plugin, rtype, name, version)
);
CREATE TABLE profiles (
    tenant_id TEXT COLLATE "C" NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);
CREATE TABLE provisioners (
    id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    host TEXT NOT NULL,
    port BIGINT NOT NULL,
    capacity_total BIGINT NOT NULL,
    assignments TEXT NOT NULL,
    usage TEXT NOT NULL,
    last_heartbeat BIGINT NOT NULL
);
CREATE TABLE api_keys (
    id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    hash TEXT COLLATE "C" NOT NULL UNIQUE,
    tenant_id TEXT COLLATE "C" NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL,
    admin BIGINT NOT NULL,
    create_time BIGINT NOT NULL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);
"#,
    },
    Migration {
        version: 2,
        description: "engine rows: clusters, nodes, jobs, tasks (the task queue), id counters",
        sqlite: r#"
CREATE TABLE clusters (
    tenant_id TEXT NOT NULL,
    id BIGINT NOT NULL,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    create_time BIGINT NOT NULL,
    expire_time BIGINT NOT NULL,
    latest_job TEXT,
    rev BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX clusters_owner ON clusters (tenant_id, owner, id);
CREATE INDEX clusters_expiry ON clusters (status, expire_time);
CREATE TABLE nodes (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    cluster_id BIGINT NOT NULL,
    nodenum BIGINT NOT NULL,
    rev BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX nodes_cluster ON nodes (tenant_id, cluster_id, nodenum);
CREATE TABLE jobs (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    cluster_id BIGINT NOT NULL,
    action TEXT NOT NULL,
    status TEXT NOT NULL,
    create_time BIGINT NOT NULL,
    rev BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX jobs_cluster ON jobs (tenant_id, cluster_id, create_time);
CREATE TABLE tasks (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    cluster_id BIGINT NOT NULL,
    job_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    action TEXT NOT NULL,
    service TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    deps_remaining BIGINT NOT NULL,
    successors TEXT NOT NULL,
    lease_owner TEXT,
    lease_deadline BIGINT NOT NULL,
    queued_at BIGINT NOT NULL,
    rev BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX tasks_queue ON tasks (tenant_id, state, queued_at, id);
CREATE INDEX tasks_lease ON tasks (state, lease_deadline);
CREATE INDEX tasks_job ON tasks (tenant_id, job_id, id);
CREATE TABLE counters (
    name TEXT NOT NULL PRIMARY KEY,
    value BIGINT NOT NULL
);
"#,
        postgres: r#"
CREATE TABLE clusters (
    tenant_id TEXT COLLATE "C" NOT NULL,
    id BIGINT NOT NULL,
    owner TEXT COLLATE "C" NOT NULL,
    name TEXT NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    create_time BIGINT NOT NULL,
    expire_time BIGINT NOT NULL,
    latest_job TEXT,
    rev BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX clusters_owner ON clusters (tenant_id, owner, id);
CREATE INDEX clusters_expiry ON clusters (status, expire_time);
CREATE TABLE nodes (
    tenant_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    cluster_id BIGINT NOT NULL,
    nodenum BIGINT NOT NULL,
    rev BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX nodes_cluster ON nodes (tenant_id, cluster_id, nodenum);
CREATE TABLE jobs (
    tenant_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    cluster_id BIGINT NOT NULL,
    action TEXT NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    create_time BIGINT NOT NULL,
    rev BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX jobs_cluster ON jobs (tenant_id, cluster_id, create_time);
CREATE TABLE tasks (
    tenant_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    cluster_id BIGINT NOT NULL,
    job_id TEXT COLLATE "C" NOT NULL,
    node_id TEXT COLLATE "C" NOT NULL,
    action TEXT NOT NULL,
    service TEXT NOT NULL,
    state TEXT COLLATE "C" NOT NULL,
    attempts BIGINT NOT NULL,
    deps_remaining BIGINT NOT NULL,
    successors TEXT NOT NULL,
    lease_owner TEXT,
    lease_deadline BIGINT NOT NULL,
    queued_at BIGINT NOT NULL,
    rev BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX tasks_queue ON tasks (tenant_id, state, queued_at, id);
CREATE INDEX tasks_lease ON tasks (state, lease_deadline);
CREATE INDEX tasks_job ON tasks (tenant_id, job_id, id);
CREATE TABLE counters (
    name TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    value BIGINT NOT NULL
);
"#,
    },
    // Host pools (weft-store/src/hostpool.rs): machines that already exist, lent to clusters of a
    // `hostpool` provider. A host is free while `cluster_id` and `node_id` are NULL.
    Migration {
        version: 3,
        description: "host pools: pool_hosts",
        sqlite: r#"
CREATE TABLE pool_hosts (
    tenant_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    id TEXT NOT NULL,
    address TEXT NOT NULL,
    port BIGINT NOT NULL,
    user_name TEXT NOT NULL,
    ssh_key TEXT NOT NULL,
    labels TEXT NOT NULL,
    state TEXT,
    cluster_id BIGINT,
    node_id TEXT,
    reserve_time BIGINT,
    create_time BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, provider, id)
);
CREATE UNIQUE INDEX pool_hosts_address ON pool_hosts (tenant_id, address, port);
CREATE UNIQUE INDEX pool_hosts_node ON pool_hosts (tenant_id, node_id);
CREATE INDEX pool_hosts_cluster ON pool_hosts (tenant_id, cluster_id);
"#,
        postgres: r#"
CREATE TABLE pool_hosts (
    tenant_id TEXT COLLATE "C" NOT NULL,
    provider TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    address TEXT COLLATE "C" NOT NULL,
    port BIGINT NOT NULL,
    user_name TEXT NOT NULL,
    ssh_key TEXT NOT NULL,
    labels TEXT NOT NULL,
    state TEXT,
    cluster_id BIGINT,
    node_id TEXT COLLATE "C",
    reserve_time BIGINT,
    create_time BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, provider, id)
);
CREATE UNIQUE INDEX pool_hosts_address ON pool_hosts (tenant_id, address, port);
CREATE UNIQUE INDEX pool_hosts_node ON pool_hosts (tenant_id, node_id);
CREATE INDEX pool_hosts_cluster ON pool_hosts (tenant_id, cluster_id);
"#,
    },
    // The engine's hot path: a node's action history is read from its tasks (`started_at`, an
    // index by node) instead of being rewritten into the node's body at every take; `nodes_rev`
    // counts every write of a cluster's nodes, so readers can cache what they derive from them.
    Migration {
        version: 4,
        description: "engine: tasks.started_at, tasks by node, clusters.nodes_rev",
        sqlite: r#"
ALTER TABLE tasks ADD COLUMN started_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX tasks_node ON tasks (tenant_id, node_id, started_at);
ALTER TABLE clusters ADD COLUMN nodes_rev BIGINT NOT NULL DEFAULT 0;
"#,
        postgres: r#"
ALTER TABLE tasks ADD COLUMN started_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX tasks_node ON tasks (tenant_id, node_id, started_at);
ALTER TABLE clusters ADD COLUMN nodes_rev BIGINT NOT NULL DEFAULT 0;
"#,
    },
    // The queue's indexes hold only the tasks they serve: queued tasks (take) and leased ones (the
    // janitor's time-outs and the queue metrics; at most one per worker, so the janitor scans it
    // whole). Most tasks are pending or complete; before, every state change moved the task inside
    // both indexes, which was most of the pages a SQLite commit wrote.
    Migration {
        version: 5,
        description: "engine: partial indexes of queued and leased tasks",
        sqlite: r#"
DROP INDEX tasks_queue;
DROP INDEX tasks_lease;
CREATE INDEX tasks_queued ON tasks (tenant_id, queued_at, id) WHERE state = 'queued';
CREATE INDEX tasks_leased ON tasks (tenant_id, lease_deadline) WHERE state = 'in_progress';
"#,
        postgres: r#"
DROP INDEX tasks_queue;
DROP INDEX tasks_lease;
CREATE INDEX tasks_queued ON tasks (tenant_id, queued_at, id) WHERE state = 'queued';
CREATE INDEX tasks_leased ON tasks (tenant_id, lease_deadline) WHERE state = 'in_progress';
"#,
    },
    // Leadership as a lease (leader.rs): replaces PostgreSQL's session advisory lock, which a
    // stopped but connected leader kept forever.
    Migration {
        version: 6,
        description: "leaders: one lease row per background role",
        sqlite: r#"
CREATE TABLE leaders (
    role TEXT NOT NULL PRIMARY KEY,
    holder TEXT NOT NULL,
    term BIGINT NOT NULL,
    deadline BIGINT NOT NULL
);
"#,
        postgres: r#"
CREATE TABLE leaders (
    role TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    holder TEXT NOT NULL,
    term BIGINT NOT NULL,
    deadline BIGINT NOT NULL
);
"#,
    },
    // Drift checks per tenant (issue 20): seconds between the janitor's checks, 0 for the server's.
    Migration {
        version: 7,
        description: "tenants: check_interval",
        sqlite: r#"
ALTER TABLE tenants ADD COLUMN check_interval BIGINT NOT NULL DEFAULT 0;
"#,
        postgres: r#"
ALTER TABLE tenants ADD COLUMN check_interval BIGINT NOT NULL DEFAULT 0;
"#,
    },
    // PostgreSQL: room in each page of `tasks` for a row's next version, so that an update that
    // changes no indexed column (a gate's count-down, a task's finish) writes no index entry (a
    // HOT update). SQLite rewrites rows in place and has no such setting.
    Migration {
        version: 8,
        description: "tasks: fillfactor 70 (PostgreSQL)",
        sqlite: "SELECT 1;",
        postgres: r#"
ALTER TABLE tasks SET (fillfactor = 70);
"#,
    },
    // Secrets sealed at rest (issue 36): the data keys, each wrapped by a master key the store
    // never holds (weft-engine's `seal`).
    Migration {
        version: 9,
        description: "secret_keys: wrapped data keys",
        sqlite: r#"
CREATE TABLE secret_keys (
    id TEXT NOT NULL PRIMARY KEY,
    master_id TEXT NOT NULL,
    wrapped TEXT NOT NULL,
    seq BIGINT NOT NULL
);
"#,
        postgres: r#"
CREATE TABLE secret_keys (
    id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    master_id TEXT NOT NULL,
    wrapped TEXT NOT NULL,
    seq BIGINT NOT NULL
);
"#,
    },
    // Provisioners that serve their own API over TLS: the server calls them at https://.
    Migration {
        version: 10,
        description: "provisioners.tls: the provisioner API's scheme",
        sqlite: "ALTER TABLE provisioners ADD COLUMN tls BIGINT NOT NULL DEFAULT 0;",
        postgres: "ALTER TABLE provisioners ADD COLUMN tls BIGINT NOT NULL DEFAULT 0;",
    },
    // Reads that cost what they return (issue 37): a cluster's node count and a job's completed
    // steps (tasks other than gates) kept in its row by triggers, so in the commit that changes
    // them whichever path commits it. A cluster or job row written after its nodes or tasks
    // counts them once when it is inserted. A job's step total in a column of its own, so that
    // progress is read without the job's body (which lists every task id).
    Migration {
        version: 11,
        description: "clusters.node_count, jobs.steps_done kept by triggers, jobs.steps_total",
        sqlite: r#"
ALTER TABLE clusters ADD COLUMN node_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN steps_done BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN steps_total BIGINT NOT NULL DEFAULT 0;
UPDATE clusters SET node_count = (SELECT COUNT(*) FROM nodes n
    WHERE n.tenant_id = clusters.tenant_id AND n.cluster_id = clusters.id);
UPDATE jobs SET steps_done = (SELECT COUNT(*) FROM tasks t WHERE t.tenant_id = jobs.tenant_id
    AND t.job_id = jobs.id AND t.state = 'complete' AND t.action <> 'GATE'),
    steps_total = COALESCE(json_extract(body, '$.total'), 0);
CREATE TRIGGER nodes_count_insert AFTER INSERT ON nodes BEGIN
    UPDATE clusters SET node_count = node_count + 1
        WHERE tenant_id = NEW.tenant_id AND id = NEW.cluster_id;
END;
CREATE TRIGGER nodes_count_delete AFTER DELETE ON nodes BEGIN
    UPDATE clusters SET node_count = node_count - 1
        WHERE tenant_id = OLD.tenant_id AND id = OLD.cluster_id;
END;
CREATE TRIGGER nodes_count_move AFTER UPDATE OF cluster_id ON nodes
    WHEN OLD.cluster_id <> NEW.cluster_id BEGIN
    UPDATE clusters SET node_count = node_count - 1
        WHERE tenant_id = OLD.tenant_id AND id = OLD.cluster_id;
    UPDATE clusters SET node_count = node_count + 1
        WHERE tenant_id = NEW.tenant_id AND id = NEW.cluster_id;
END;
CREATE TRIGGER clusters_count_insert AFTER INSERT ON clusters BEGIN
    UPDATE clusters SET node_count = (SELECT COUNT(*) FROM nodes
        WHERE tenant_id = NEW.tenant_id AND cluster_id = NEW.id)
        WHERE tenant_id = NEW.tenant_id AND id = NEW.id;
END;
CREATE TRIGGER tasks_steps_insert AFTER INSERT ON tasks
    WHEN NEW.state = 'complete' AND NEW.action <> 'GATE' BEGIN
    UPDATE jobs SET steps_done = steps_done + 1 WHERE tenant_id = NEW.tenant_id AND id = NEW.job_id;
END;
CREATE TRIGGER tasks_steps_delete AFTER DELETE ON tasks
    WHEN OLD.state = 'complete' AND OLD.action <> 'GATE' BEGIN
    UPDATE jobs SET steps_done = steps_done - 1 WHERE tenant_id = OLD.tenant_id AND id = OLD.job_id;
END;
CREATE TRIGGER tasks_steps_update AFTER UPDATE OF state, job_id, action ON tasks
    WHEN (OLD.state = 'complete' AND OLD.action <> 'GATE')
        <> (NEW.state = 'complete' AND NEW.action <> 'GATE')
        OR OLD.job_id <> NEW.job_id BEGIN
    UPDATE jobs SET steps_done = steps_done - 1 WHERE OLD.state = 'complete'
        AND OLD.action <> 'GATE' AND tenant_id = OLD.tenant_id AND id = OLD.job_id;
    UPDATE jobs SET steps_done = steps_done + 1 WHERE NEW.state = 'complete'
        AND NEW.action <> 'GATE' AND tenant_id = NEW.tenant_id AND id = NEW.job_id;
END;
CREATE TRIGGER jobs_steps_insert AFTER INSERT ON jobs BEGIN
    UPDATE jobs SET steps_done = (SELECT COUNT(*) FROM tasks WHERE tenant_id = NEW.tenant_id
        AND job_id = NEW.id AND state = 'complete' AND action <> 'GATE')
        WHERE tenant_id = NEW.tenant_id AND id = NEW.id;
END;
"#,
        postgres: r#"
ALTER TABLE clusters ADD COLUMN node_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN steps_done BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN steps_total BIGINT NOT NULL DEFAULT 0;
UPDATE clusters SET node_count = (SELECT COUNT(*) FROM nodes n
    WHERE n.tenant_id = clusters.tenant_id AND n.cluster_id = clusters.id);
UPDATE jobs SET steps_done = (SELECT COUNT(*) FROM tasks t WHERE t.tenant_id = jobs.tenant_id
    AND t.job_id = jobs.id AND t.state = 'complete' AND t.action <> 'GATE'),
    steps_total = COALESCE((body::jsonb ->> 'total')::bigint, 0);
CREATE FUNCTION weft_nodes_count() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE clusters SET node_count = node_count - 1
            WHERE tenant_id = OLD.tenant_id AND id = OLD.cluster_id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE clusters SET node_count = node_count + 1
            WHERE tenant_id = NEW.tenant_id AND id = NEW.cluster_id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER nodes_count AFTER INSERT OR DELETE ON nodes
    FOR EACH ROW EXECUTE FUNCTION weft_nodes_count();
CREATE TRIGGER nodes_count_move AFTER UPDATE OF cluster_id ON nodes
    FOR EACH ROW WHEN (OLD.cluster_id <> NEW.cluster_id) EXECUTE FUNCTION weft_nodes_count();
CREATE FUNCTION weft_clusters_count() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE clusters SET node_count = (SELECT COUNT(*) FROM nodes
        WHERE tenant_id = NEW.tenant_id AND cluster_id = NEW.id)
        WHERE tenant_id = NEW.tenant_id AND id = NEW.id;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER clusters_count_insert AFTER INSERT ON clusters
    FOR EACH ROW EXECUTE FUNCTION weft_clusters_count();
CREATE FUNCTION weft_steps_count() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state = 'complete' AND OLD.action <> 'GATE' THEN
        UPDATE jobs SET steps_done = steps_done - 1
            WHERE tenant_id = OLD.tenant_id AND id = OLD.job_id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'complete' AND NEW.action <> 'GATE' THEN
        UPDATE jobs SET steps_done = steps_done + 1
            WHERE tenant_id = NEW.tenant_id AND id = NEW.job_id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER tasks_steps AFTER INSERT OR DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION weft_steps_count();
CREATE TRIGGER tasks_steps_update AFTER UPDATE OF state, job_id, action ON tasks
    FOR EACH ROW WHEN ((OLD.state = 'complete' AND OLD.action <> 'GATE')
        IS DISTINCT FROM (NEW.state = 'complete' AND NEW.action <> 'GATE')
        OR OLD.job_id <> NEW.job_id)
    EXECUTE FUNCTION weft_steps_count();
CREATE FUNCTION weft_jobs_count() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE jobs SET steps_done = (SELECT COUNT(*) FROM tasks WHERE tenant_id = NEW.tenant_id
        AND job_id = NEW.id AND state = 'complete' AND action <> 'GATE')
        WHERE tenant_id = NEW.tenant_id AND id = NEW.id;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER jobs_steps_insert AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION weft_jobs_count();
"#,
    },
    // The audit trail (issue 38): records chained per tenant by hash; `audit_heads` holds each
    // tenant's last record and the anchor retention leaves (the first kept record's predecessor).
    Migration {
        version: 12,
        description: "audit, audit_heads",
        sqlite: r#"
CREATE TABLE audit (
    tenant_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    time BIGINT NOT NULL,
    body TEXT NOT NULL,
    user_id TEXT NOT NULL,
    entity TEXT NOT NULL,
    action TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX audit_time ON audit (time);
CREATE TABLE audit_heads (
    tenant_id TEXT NOT NULL PRIMARY KEY,
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    first_prev TEXT NOT NULL
);
"#,
        postgres: r#"
CREATE TABLE audit (
    tenant_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    time BIGINT NOT NULL,
    body TEXT NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL,
    entity TEXT COLLATE "C" NOT NULL,
    action TEXT COLLATE "C" NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX audit_time ON audit (time);
CREATE TABLE audit_heads (
    tenant_id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    first_prev TEXT NOT NULL
);
"#,
    },
    // The public event stream (issue 38): triggers write an event for every change of a cluster's
    // or job's status, a task's state (gates aside), a node added or removed and an audit record,
    // in the commit that makes the change, whichever of the store's commit paths commits it.
    // SQLite numbers each event per tenant as it is written (one writer at a time); its `pid` is
    // the rowid without AUTOINCREMENT (which writes sqlite_sequence on every insert): retention
    // keeps each tenant's newest event, so the largest rowid is never freed. PostgreSQL
    // leaves `seq` empty and a sequencer numbers events in the order their commits became
    // visible (`sequence_events`), so a reader resuming after event n never misses one that
    // committed late with a smaller serial; `event_heads` keeps each tenant's last number.
    Migration {
        version: 13,
        description: "events, event_heads and the triggers that write events",
        sqlite: r#"
CREATE TABLE events (
    pid INTEGER PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    seq BIGINT,
    time BIGINT NOT NULL,
    kind TEXT NOT NULL,
    cluster_id BIGINT,
    subject TEXT,
    job_id TEXT,
    node_id TEXT,
    service TEXT,
    status TEXT,
    previous TEXT,
    action TEXT,
    detail TEXT
);
CREATE UNIQUE INDEX events_seq ON events (tenant_id, seq);
CREATE TABLE event_heads (
    tenant_id TEXT NOT NULL PRIMARY KEY,
    seq BIGINT NOT NULL
);
CREATE TRIGGER events_cluster_insert AFTER INSERT ON clusters BEGIN
    INSERT INTO events (tenant_id, seq, time, kind, cluster_id, subject, status, previous,
        action, job_id, node_id, service, detail)
    VALUES (NEW.tenant_id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE tenant_id = NEW.tenant_id),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), 'cluster', NEW.id, NEW.name, NEW.status, NULL, NULL, NULL, NULL, NULL, NULL);
END;
CREATE TRIGGER events_cluster_status AFTER UPDATE OF status ON clusters
    WHEN OLD.status <> NEW.status BEGIN
    INSERT INTO events (tenant_id, seq, time, kind, cluster_id, subject, status, previous,
        action, job_id, node_id, service, detail)
    VALUES (NEW.tenant_id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE tenant_id = NEW.tenant_id),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), 'cluster', NEW.id, NEW.name, NEW.status, OLD.status, NULL, NULL, NULL, NULL, NULL);
END;
CREATE TRIGGER events_job_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO events (tenant_id, seq, time, kind, cluster_id, subject, status, previous,
        action, job_id, node_id, service, detail)
    VALUES (NEW.tenant_id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE tenant_id = NEW.tenant_id),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), 'job', NEW.cluster_id, NEW.id, NEW.status, NULL, NEW.action, NEW.id, NULL, NULL, NULL);
END;
CREATE TRIGGER events_job_status AFTER UPDATE OF status ON jobs
    WHEN OLD.status <> NEW.status BEGIN
    INSERT INTO events (tenant_id, seq, time, kind, cluster_id, subject, status, previous,
        action, job_id, node_id, service, detail)
    VALUES (NEW.tenant_id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE tenant_id = NEW.tenant_id),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), 'job', NEW.cluster_id, NEW.id, NEW.status, OLD.status, NEW.action, NEW.id, NULL, NULL, NULL);
END;
CREATE TRIGGER events_task_state AFTER UPDATE OF state ON tasks
    WHEN OLD.state <> NEW.state AND NEW.state <> 'queued' AND NEW.action <> 'GATE' BEGIN
    INSERT INTO events (tenant_id, seq, time, kind, cluster_id, subject, status, previous,
        action, job_id, node_id, service, detail)
    VALUES (NEW.tenant_id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE tenant_id = NEW.tenant_id),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), 'task', NEW.cluster_id, NEW.id, NEW.state, OLD.state, NEW.action, NEW.job_id, NEW.node_id, NEW.service, NULL);
END;
CREATE TRIGGER events_node_insert AFTER INSERT ON nodes BEGIN
    INSERT INTO events (tenant_id, seq, time, kind, cluster_id, subject, status, previous,
        action, job_id, node_id, service, detail)
    VALUES (NEW.tenant_id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE tenant_id = NEW.tenant_id),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), 'node', NEW.cluster_id, NEW.id, 'added', NULL, NULL, NULL, NEW.id, NULL, NULL);
END;
CREATE TRIGGER events_node_delete AFTER DELETE ON nodes BEGIN
    INSERT INTO events (tenant_id, seq, time, kind, cluster_id, subject, status, previous,
        action, job_id, node_id, service, detail)
    VALUES (OLD.tenant_id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE tenant_id = OLD.tenant_id),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), 'node', OLD.cluster_id, OLD.id, 'removed', NULL, NULL, NULL, OLD.id, NULL, NULL);
END;
CREATE TRIGGER events_audit AFTER INSERT ON audit BEGIN
    INSERT INTO events (tenant_id, seq, time, kind, cluster_id, subject, status, previous,
        action, job_id, node_id, service, detail)
    VALUES (NEW.tenant_id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE tenant_id = NEW.tenant_id),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), 'audit', NULL, CAST(NEW.seq AS TEXT), NULL, NULL, NEW.action, NULL, NULL, NULL, NEW.body);
END;
"#,
        postgres: r#"
CREATE TABLE events (
    pid BIGSERIAL PRIMARY KEY,
    tenant_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT,
    time BIGINT NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    cluster_id BIGINT,
    subject TEXT,
    job_id TEXT,
    node_id TEXT,
    service TEXT,
    status TEXT,
    previous TEXT,
    action TEXT,
    detail TEXT
);
CREATE UNIQUE INDEX events_seq ON events (tenant_id, seq);
CREATE INDEX events_pending ON events (pid) WHERE seq IS NULL;
CREATE TABLE event_heads (
    tenant_id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    seq BIGINT NOT NULL
);
CREATE FUNCTION weft_event() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    k text;
    cid bigint;
    subj text;
    st text;
    prev text;
    act text;
    job text;
    node text;
    svc text;
    det text;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    IF TG_TABLE_NAME = 'clusters' THEN
        k := 'cluster'; cid := r.id; subj := r.name; st := r.status;
        IF TG_OP = 'UPDATE' THEN prev := OLD.status; END IF;
    ELSIF TG_TABLE_NAME = 'audit' THEN
        k := 'audit'; subj := r.seq::text; act := r.action; det := r.body;
    ELSIF TG_TABLE_NAME = 'jobs' THEN
        k := 'job'; cid := r.cluster_id; subj := r.id; job := r.id; st := r.status;
        act := r.action;
        IF TG_OP = 'UPDATE' THEN prev := OLD.status; END IF;
    ELSIF TG_TABLE_NAME = 'tasks' THEN
        k := 'task'; cid := r.cluster_id; subj := r.id; st := r.state; prev := OLD.state;
        act := r.action; job := r.job_id; node := r.node_id; svc := r.service;
    ELSE
        k := 'node'; cid := r.cluster_id; subj := r.id; node := r.id;
        st := CASE WHEN TG_OP = 'DELETE' THEN 'removed' ELSE 'added' END;
    END IF;
    INSERT INTO events (tenant_id, time, kind, cluster_id, subject, status, previous, action,
        job_id, node_id, service, detail)
    VALUES (r.tenant_id, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, k, cid, subj,
        st, prev, act, job, node, svc, det);
    RETURN NULL;
END
$fn$;
CREATE TRIGGER events_cluster_insert AFTER INSERT ON clusters
    FOR EACH ROW EXECUTE FUNCTION weft_event();
CREATE TRIGGER events_cluster_status AFTER UPDATE OF status ON clusters
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION weft_event();
CREATE TRIGGER events_job_insert AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION weft_event();
CREATE TRIGGER events_job_status AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION weft_event();
CREATE TRIGGER events_task_state AFTER UPDATE OF state ON tasks
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state AND NEW.state <> 'queued'
        AND NEW.action <> 'GATE')
    EXECUTE FUNCTION weft_event();
CREATE TRIGGER events_node_insert AFTER INSERT OR DELETE ON nodes
    FOR EACH ROW EXECUTE FUNCTION weft_event();
CREATE TRIGGER events_audit AFTER INSERT ON audit
    FOR EACH ROW EXECUTE FUNCTION weft_event();
"#,
    },
    // Tenants' webhooks (issue 38): settings and a cursor in the tenant's events per webhook,
    // a lease so that one server at a time delivers it, and the delivery log.
    Migration {
        version: 14,
        description: "webhooks, webhook_deliveries",
        sqlite: r#"
CREATE TABLE webhooks (
    tenant_id TEXT NOT NULL,
    id TEXT NOT NULL,
    body TEXT NOT NULL,
    cursor BIGINT NOT NULL,
    create_time BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, id)
);
CREATE TABLE webhook_deliveries (
    tenant_id TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    event_id BIGINT NOT NULL,
    cluster_id BIGINT,
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    first_time BIGINT NOT NULL,
    last_time BIGINT NOT NULL,
    next_time BIGINT NOT NULL,
    code BIGINT,
    error TEXT,
    latency_ms BIGINT,
    PRIMARY KEY (tenant_id, webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (tenant_id, webhook_id, status, event_id);
CREATE INDEX webhook_deliveries_time ON webhook_deliveries (last_time);
"#,
        postgres: r#"
CREATE TABLE webhooks (
    tenant_id TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    body TEXT NOT NULL,
    cursor BIGINT NOT NULL,
    create_time BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, id)
);
CREATE TABLE webhook_deliveries (
    tenant_id TEXT COLLATE "C" NOT NULL,
    webhook_id TEXT COLLATE "C" NOT NULL,
    event_id BIGINT NOT NULL,
    cluster_id BIGINT,
    status TEXT COLLATE "C" NOT NULL,
    attempts BIGINT NOT NULL,
    first_time BIGINT NOT NULL,
    last_time BIGINT NOT NULL,
    next_time BIGINT NOT NULL,
    code BIGINT,
    error TEXT,
    latency_ms BIGINT,
    PRIMARY KEY (tenant_id, webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (tenant_id, webhook_id, status, event_id);
CREATE INDEX webhook_deliveries_time ON webhook_deliveries (last_time);
"#,
    },
    // The audit record of a request whose effect committed, written in that effect's very
    // transaction and chained once the request is answered (issue 38): a server that stops in
    // between leaves it here, and the janitor chains it.
    Migration {
        version: 15,
        description: "audit_pending",
        sqlite: r#"
CREATE TABLE audit_pending (
    request_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    time BIGINT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX audit_pending_time ON audit_pending (time);
"#,
        postgres: r#"
CREATE TABLE audit_pending (
    request_id TEXT COLLATE "C" PRIMARY KEY,
    tenant_id TEXT COLLATE "C" NOT NULL,
    time BIGINT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX audit_pending_time ON audit_pending (time);
"#,
    },
    // A job's completed steps in a row of their own: counting them in the job row (migration 11)
    // rewrote the whole row at every task's end, and SQLite rewrites a row whole, body included
    // (the body lists every task id: megabytes for a 10,000-node create), which made a large
    // create quadratic.
    Migration {
        version: 16,
        description: "job_steps: a job's completed steps apart from its row",
        sqlite: r#"
CREATE TABLE job_steps (
    tenant_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    steps_done BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, job_id)
);
INSERT INTO job_steps (tenant_id, job_id, steps_done) SELECT tenant_id, id, steps_done FROM jobs;
DROP TRIGGER tasks_steps_insert;
DROP TRIGGER tasks_steps_delete;
DROP TRIGGER tasks_steps_update;
DROP TRIGGER jobs_steps_insert;
CREATE TRIGGER tasks_steps_insert AFTER INSERT ON tasks
    WHEN NEW.state = 'complete' AND NEW.action <> 'GATE' BEGIN
    UPDATE job_steps SET steps_done = steps_done + 1
        WHERE tenant_id = NEW.tenant_id AND job_id = NEW.job_id;
END;
CREATE TRIGGER tasks_steps_delete AFTER DELETE ON tasks
    WHEN OLD.state = 'complete' AND OLD.action <> 'GATE' BEGIN
    UPDATE job_steps SET steps_done = steps_done - 1
        WHERE tenant_id = OLD.tenant_id AND job_id = OLD.job_id;
END;
CREATE TRIGGER tasks_steps_update AFTER UPDATE OF state, job_id, action ON tasks
    WHEN (OLD.state = 'complete' AND OLD.action <> 'GATE')
        <> (NEW.state = 'complete' AND NEW.action <> 'GATE')
        OR OLD.job_id <> NEW.job_id BEGIN
    UPDATE job_steps SET steps_done = steps_done - 1 WHERE OLD.state = 'complete'
        AND OLD.action <> 'GATE' AND tenant_id = OLD.tenant_id AND job_id = OLD.job_id;
    UPDATE job_steps SET steps_done = steps_done + 1 WHERE NEW.state = 'complete'
        AND NEW.action <> 'GATE' AND tenant_id = NEW.tenant_id AND job_id = NEW.job_id;
END;
CREATE TRIGGER jobs_steps_insert AFTER INSERT ON jobs BEGIN
    INSERT OR REPLACE INTO job_steps (tenant_id, job_id, steps_done) VALUES (NEW.tenant_id, NEW.id,
        (SELECT COUNT(*) FROM tasks WHERE tenant_id = NEW.tenant_id AND job_id = NEW.id
            AND state = 'complete' AND action <> 'GATE'));
END;
CREATE TRIGGER jobs_steps_delete AFTER DELETE ON jobs BEGIN
    DELETE FROM job_steps WHERE tenant_id = OLD.tenant_id AND job_id = OLD.id;
END;
"#,
        postgres: r#"
CREATE TABLE job_steps (
    tenant_id TEXT COLLATE "C" NOT NULL,
    job_id TEXT COLLATE "C" NOT NULL,
    steps_done BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, job_id)
);
INSERT INTO job_steps (tenant_id, job_id, steps_done) SELECT tenant_id, id, steps_done FROM jobs;
CREATE OR REPLACE FUNCTION weft_steps_count() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state = 'complete' AND OLD.action <> 'GATE' THEN
        UPDATE job_steps SET steps_done = steps_done - 1
            WHERE tenant_id = OLD.tenant_id AND job_id = OLD.job_id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'complete' AND NEW.action <> 'GATE' THEN
        UPDATE job_steps SET steps_done = steps_done + 1
            WHERE tenant_id = NEW.tenant_id AND job_id = NEW.job_id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE OR REPLACE FUNCTION weft_jobs_count() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM job_steps WHERE tenant_id = OLD.tenant_id AND job_id = OLD.id;
        RETURN NULL;
    END IF;
    INSERT INTO job_steps (tenant_id, job_id, steps_done) VALUES (NEW.tenant_id, NEW.id,
        (SELECT COUNT(*) FROM tasks WHERE tenant_id = NEW.tenant_id AND job_id = NEW.id
            AND state = 'complete' AND action <> 'GATE'))
        ON CONFLICT (tenant_id, job_id) DO UPDATE SET steps_done = excluded.steps_done;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER jobs_steps_delete AFTER DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION weft_jobs_count();
"#,
    },
    // A tenant's budget: the most its live clusters may cost per hour, as the decimal text it
    // was given (null: none). Checked with the quotas (engine::COST_SQLITE).
    Migration {
        version: 17,
        description: "tenants: max_cost_per_hour",
        sqlite: r#"
ALTER TABLE tenants ADD COLUMN max_cost_per_hour TEXT;
"#,
        postgres: r#"
ALTER TABLE tenants ADD COLUMN max_cost_per_hour TEXT;
"#,
    },
];

/// The schema version this build writes: the last migration's.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// Applies every migration in [`MIGRATIONS`] that `weft_schema` does not list yet, in order, each
/// in
/// its own transaction. Returns the versions it applied.
pub(crate) async fn run(pool: &AnyPool, backend: Backend, now_ms: i64) -> Result<Vec<i64>> {
    let mut applied = Vec::new();
    for m in MIGRATIONS {
        let mut tx = crate::sql::begin(pool, backend).await?;
        lock_and_ensure_table(&mut tx, backend).await?;
        let done: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM weft_schema WHERE version = $1")
            .bind(m.version)
            .fetch_one(&mut *tx)
            .await?;
        if done > 0 {
            continue;
        }
        sqlx::raw_sql(m.sql(backend))
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                StoreError::Migration(format!("version {} ({}): {e}", m.version, m.description))
            })?;
        sqlx::query(
            "INSERT INTO weft_schema (version, description, applied_at) VALUES ($1, $2, $3)",
        )
        .bind(m.version)
        .bind(m.description)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(
            version = m.version,
            description = m.description,
            "applied migration"
        );
        applied.push(m.version);
    }
    Ok(applied)
}

/// Serializes migrators (PostgreSQL) and creates the bookkeeping table if this is a new database.
async fn lock_and_ensure_table(tx: &mut Transaction<'static, Any>, backend: Backend) -> Result<()> {
    if backend == Backend::Postgres {
        // The lock function returns `void`, a type the Any driver cannot decode: select around it.
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1)) AS l")
            .bind(PG_MIGRATION_LOCK)
            .execute(&mut **tx)
            .await?;
    }
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS weft_schema (version BIGINT PRIMARY KEY, description TEXT, applied_at BIGINT)",
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}
