-- The PostgreSQL writer's hot path in one statement per batch (pg_writer.rs, "The batch function").
-- Created on each writer connection as a temporary function, so that each server runs its own
-- version and an upgrade never swaps it under a running one.
--
-- `ops` is a JSON array of operations, run in the caller's transaction; it answers a JSON array
-- with one answer per operation, in their order:
--   {"take": {"tenant_id", "owner", "deadline", "now"}}
--       leases the tenant's next queued task; answers {"taken": row or null}, the row with the
--       columns of take_sql (engine.rs): the task's, job_status, job_rev, cluster_rev, nodes_rev.
--   {"expect": [{"t", "tenant_id", "id", "rev", "w"}], "writes": [...]}
--       a change set: every expected row is locked (FOR UPDATE when the set writes it, "w", else
--       FOR SHARE) in the order given (the canonical one) and its revision compared; the first
--       that differs answers {"stale": its index, "found": its revision or null} and the set
--       writes nothing. Else its writes run in order and it answers {"ended": [job-end gates]}.
--       A write is {"tasks": [rows with distinct ids]}, {"node": row} or {"release":
--       {"tenant_id", "ids", "queue", "now"}}, with the very semantics of `statements` and
--       `RELEASE_SQL` in engine.rs. Without "expect" it only writes (pg_writer.rs runs the
--       writes of other change sets so, after their checks, a create's tasks in few statements).
--   {"flush": {"tasks": [rows with "k"], "releases": [{"k", "tenant_id", "id", "queue", "now"}],
--              "guard": [[k, "tenant_id/id"]]}}
--       the deferred task writes and releases of the change sets before it (pg_writer.rs,
--       `batch_ops`), each entry tagged with the index k of its change set: a change set that
--       was stale writes nothing, so its entries are left out. The rows are written in one
--       statement; the releases in one statement per round, a row released n times counted down
--       by n, and a gate completed by a round released in the next. The change set whose release
--       completed a row is its last releaser, as if they had run one by one. A row released more
--       often than it waits, or a cascade that reaches a task that a later change set of the
--       window checked, wrote or released (`guard`), raises: the caller then runs the batch one operation
--       at a time. Answers {}.
-- The change sets run first, in their order, then the takes, a tenant's together: one scan of the
-- queue's index leases the oldest queued tasks, the oldest to the first take. Nobody has been
-- answered, so the operations of a batch are concurrent and any order of them is one they could
-- have arrived in.
-- Any other failure (a deadlock, a lock time-out) raises, and the caller runs the batch again one
-- operation at a time.
--
-- Arrays are walked by index, not with set-returning functions: a PL/pgSQL expression is
-- evaluated in place, while every SQL statement starts an executor.
-- Writes task rows (a JSON array of rows with distinct ids) as `statements` upserts them, but for
-- the rows whose "k" is in `skip` (the change sets of a flush that were stale). In two statements:
-- most rows exist (a finish), and an UPDATE finds each in one look-up of the primary key where
-- INSERT ... ON CONFLICT first tries to insert it.
CREATE OR REPLACE FUNCTION pg_temp.weft_write_tasks(rows jsonb, skip int[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    updated bigint;
BEGIN
    UPDATE tasks SET
        cluster_id = x.cluster_id, job_id = x.job_id, node_id = x.node_id,
        action = x.action, service = x.service, state = x.state,
        attempts = x.attempts, deps_remaining = x.deps_remaining,
        successors = x.successors, lease_owner = x.lease_owner,
        lease_deadline = x.lease_deadline, queued_at = x.queued_at,
        started_at = x.started_at, rev = tasks.rev + 1, body = x.body
    FROM jsonb_array_elements(rows) AS j, jsonb_populate_record(NULL::tasks, j) AS x
    WHERE COALESCE((j->>'k')::int, -1) <> ALL (skip)
        AND tasks.tenant_id = x.tenant_id AND tasks.id = x.id;
    GET DIAGNOSTICS updated = ROW_COUNT;
    IF updated < jsonb_array_length(rows) THEN
        INSERT INTO tasks SELECT x.*
            FROM jsonb_array_elements(rows) AS j, jsonb_populate_record(NULL::tasks, j) AS x
            WHERE COALESCE((j->>'k')::int, -1) <> ALL (skip)
            ON CONFLICT (tenant_id, id) DO NOTHING;
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION pg_temp.weft_batch(ops jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $fn$
DECLARE
    n int := jsonb_array_length(ops);
    answers jsonb[] := array_fill(NULL::jsonb, ARRAY[jsonb_array_length(ops)]);
    tenants text[] := '{}';
    op jsonb;
    e jsonb;
    w jsonb;
    k int;
    i int;
    found_rev bigint;
    stale jsonb;
    ended text[];
    todo text[];
    tid text;
    p_tenant text;
    p_queue boolean;
    p_now bigint;
    r record;
    stale_k int[] := '{}';
    rel jsonb;
    nxt jsonb;
BEGIN
    FOR k IN 0 .. n - 1 LOOP
        op := ops->k;
        IF op ? 'take' THEN
            IF NOT (op->'take'->>'tenant_id') = ANY (tenants) THEN
                tenants := tenants || (op->'take'->>'tenant_id');
            END IF;
            CONTINUE;
        END IF;
        IF op ? 'flush' THEN
            w := op->'flush';
            PERFORM pg_temp.weft_write_tasks(w->'tasks', stale_k);
            rel := w->'releases';
            WHILE jsonb_array_length(rel) > 0 LOOP
                nxt := '[]';
                FOR r IN
                    WITH x AS (
                        SELECT (j->>'k')::int AS k, (j->>'tenant_id') COLLATE "C" AS tenant_id,
                            (j->>'id') COLLATE "C" AS id,
                            (j->>'queue')::boolean AS queue, (j->>'now')::bigint AS now, o
                        FROM jsonb_array_elements(rel) WITH ORDINALITY AS a(j, o)
                        WHERE (j->>'k')::int <> ALL (stale_k)),
                    a AS (
                        SELECT x.tenant_id, x.id, count(*) AS n,
                            (array_agg(x.k ORDER BY x.o DESC))[1] AS k,
                            (array_agg(x.queue ORDER BY x.o DESC))[1] AS queue,
                            (array_agg(x.now ORDER BY x.o DESC))[1] AS now
                        FROM x GROUP BY x.tenant_id, x.id ORDER BY x.tenant_id, x.id)
                    UPDATE tasks SET deps_remaining = tasks.deps_remaining - a.n,
                        state = CASE
                            WHEN tasks.deps_remaining = a.n AND tasks.state = 'pending'
                                AND tasks.action = 'GATE' THEN 'complete'
                            WHEN tasks.deps_remaining = a.n AND tasks.state = 'pending' AND a.queue
                                THEN 'queued'
                            ELSE tasks.state END,
                        queued_at = CASE
                            WHEN tasks.deps_remaining = a.n AND tasks.state = 'pending'
                                AND tasks.action <> 'GATE' AND a.queue THEN a.now
                            ELSE tasks.queued_at END,
                        rev = tasks.rev + a.n
                    FROM a
                    WHERE tasks.tenant_id = a.tenant_id AND tasks.id = a.id
                        AND tasks.deps_remaining > 0
                    RETURNING a.k, a.queue, a.now, tasks.tenant_id, tasks.id, tasks.deps_remaining,
                        tasks.state, tasks.action,
                        CASE WHEN tasks.deps_remaining = 0 AND tasks.action = 'GATE'
                            THEN tasks.successors ELSE '[]' END AS successors
                LOOP
                    IF r.deps_remaining < 0 THEN
                        RAISE EXCEPTION 'weft_batch: task % released more often than it waits', r.id;
                    END IF;
                    IF r.deps_remaining = 0 AND r.action = 'GATE' AND r.state = 'complete' THEN
                        e := r.successors::jsonb;
                        IF jsonb_array_length(e) = 0 THEN
                            answers[r.k + 1] := jsonb_build_object('ended',
                                (answers[r.k + 1]->'ended') || to_jsonb(r.id));
                            CONTINUE;
                        END IF;
                        IF EXISTS (SELECT 1 FROM jsonb_array_elements(w->'guard') AS g,
                                jsonb_array_elements_text(e) AS s
                            WHERE (g->>0)::int > r.k AND g->>1 = r.tenant_id || '/' || s) THEN
                            RAISE EXCEPTION 'weft_batch: gate % reaches a task touched after it', r.id;
                        END IF;
                        nxt := nxt || (SELECT jsonb_agg(jsonb_build_object('k', r.k,
                                'tenant_id', r.tenant_id, 'id', s, 'queue', r.queue, 'now', r.now))
                            FROM jsonb_array_elements_text(e) AS s);
                    END IF;
                END LOOP;
                rel := nxt;
            END LOOP;
            answers[k + 1] := '{}';
            CONTINUE;
        END IF;

        stale := NULL;
        FOR i IN 0 .. jsonb_array_length(op->'expect') - 1 LOOP
            e := op->'expect'->i;
            found_rev := NULL;
            p_tenant := e->>'tenant_id';
            tid := e->>'id';
            CASE (e->>'t') || '/' || (e->>'w')
                WHEN 'tasks/true' THEN
                    SELECT rev INTO found_rev FROM tasks WHERE tenant_id = p_tenant AND id = tid
                        FOR UPDATE;
                WHEN 'tasks/false' THEN
                    SELECT rev INTO found_rev FROM tasks WHERE tenant_id = p_tenant AND id = tid
                        FOR SHARE;
                WHEN 'jobs/true' THEN
                    SELECT rev INTO found_rev FROM jobs WHERE tenant_id = p_tenant AND id = tid
                        FOR UPDATE;
                WHEN 'jobs/false' THEN
                    SELECT rev INTO found_rev FROM jobs WHERE tenant_id = p_tenant AND id = tid
                        FOR SHARE;
                WHEN 'nodes/true' THEN
                    SELECT rev INTO found_rev FROM nodes WHERE tenant_id = p_tenant AND id = tid
                        FOR UPDATE;
                WHEN 'nodes/false' THEN
                    SELECT rev INTO found_rev FROM nodes WHERE tenant_id = p_tenant AND id = tid
                        FOR SHARE;
            END CASE;
            IF found_rev IS DISTINCT FROM (e->>'rev')::bigint THEN
                stale := jsonb_build_object('stale', i, 'found', found_rev);
                EXIT;
            END IF;
        END LOOP;
        IF stale IS NOT NULL THEN
            answers[k + 1] := stale;
            stale_k := stale_k || k;
            CONTINUE;
        END IF;

        ended := '{}';
        FOR i IN 0 .. jsonb_array_length(op->'writes') - 1 LOOP
            w := op->'writes'->i;
            IF w ? 'tasks' THEN
                PERFORM pg_temp.weft_write_tasks(w->'tasks', '{}');
            ELSIF w ? 'node' THEN
                w := w->'node';
                INSERT INTO nodes SELECT * FROM jsonb_populate_record(NULL::nodes, w)
                ON CONFLICT (tenant_id, id) DO UPDATE SET
                    cluster_id = excluded.cluster_id, nodenum = excluded.nodenum,
                    rev = nodes.rev + 1, body = excluded.body;
                UPDATE clusters SET nodes_rev = nodes_rev + 1
                    WHERE tenant_id = w->>'tenant_id' AND id = (w->>'cluster_id')::bigint;
            ELSE
                w := w->'release';
                p_tenant := w->>'tenant_id';
                p_queue := (w->>'queue')::boolean;
                p_now := (w->>'now')::bigint;
                todo := '{}';
                FOR i IN 0 .. jsonb_array_length(w->'ids') - 1 LOOP
                    todo := todo || (w->'ids'->>i);
                END LOOP;
                WHILE cardinality(todo) > 0 LOOP
                    tid := todo[cardinality(todo)];
                    todo := todo[1:cardinality(todo) - 1];
                    UPDATE tasks SET deps_remaining = deps_remaining - 1,
                        state = CASE
                            WHEN deps_remaining = 1 AND state = 'pending' AND action = 'GATE'
                                THEN 'complete'
                            WHEN deps_remaining = 1 AND state = 'pending' AND p_queue
                                THEN 'queued'
                            ELSE state END,
                        queued_at = CASE
                            WHEN deps_remaining = 1 AND state = 'pending' AND action <> 'GATE'
                                AND p_queue THEN p_now
                            ELSE queued_at END,
                        rev = rev + 1
                    WHERE tenant_id = p_tenant AND id = tid AND deps_remaining > 0
                    RETURNING deps_remaining, state, action,
                        CASE WHEN deps_remaining = 0 AND action = 'GATE' THEN successors
                            ELSE '[]' END AS successors
                    INTO r;
                    IF FOUND AND r.deps_remaining = 0 AND r.action = 'GATE'
                        AND r.state = 'complete' THEN
                        e := r.successors::jsonb;
                        IF jsonb_array_length(e) = 0 THEN
                            ended := ended || tid;
                        END IF;
                        FOR i IN 0 .. jsonb_array_length(e) - 1 LOOP
                            todo := todo || (e->>i);
                        END LOOP;
                    END IF;
                END LOOP;
            END IF;
        END LOOP;
        answers[k + 1] := jsonb_build_object('ended', to_jsonb(ended));
    END LOOP;

    FOREACH p_tenant IN ARRAY tenants LOOP
        -- The tenant's takes in their order (k), and as many of its oldest queued tasks that no
        -- other transaction holds, oldest first: the k-th take gets the k-th task.
        FOR r IN
            WITH who AS (
                SELECT o.n::int AS n, o.op->'take'->>'owner' AS owner,
                    (o.op->'take'->>'deadline')::bigint AS deadline,
                    (o.op->'take'->>'now')::bigint AS now,
                    row_number() OVER (ORDER BY o.n) AS k
                FROM jsonb_array_elements(ops) WITH ORDINALITY AS o(op, n)
                WHERE o.op ? 'take' AND o.op->'take'->>'tenant_id' = p_tenant),
            picked AS (
                SELECT q.id, q.job_id, q.cluster_id,
                    row_number() OVER (ORDER BY q.queued_at, q.id) AS k
                FROM (SELECT id, job_id, cluster_id, queued_at FROM tasks
                    WHERE tenant_id = p_tenant AND state = 'queued'
                        AND queued_at <= (SELECT min(now) FROM who)
                    ORDER BY queued_at, id LIMIT (SELECT count(*) FROM who)
                    FOR UPDATE SKIP LOCKED) AS q)
            UPDATE tasks SET state = 'in_progress', lease_owner = who.owner,
                lease_deadline = who.deadline, attempts = tasks.attempts + 1,
                started_at = who.now, rev = tasks.rev + 1
            FROM picked JOIN who USING (k)
                LEFT JOIN jobs j ON j.tenant_id = p_tenant AND j.id = picked.job_id
                LEFT JOIN clusters c ON c.tenant_id = p_tenant AND c.id = picked.cluster_id
            WHERE tasks.tenant_id = p_tenant AND tasks.id = picked.id
            RETURNING who.n AS taker, tasks.*, j.status AS job_status, j.rev AS job_rev,
                c.rev AS cluster_rev, c.nodes_rev AS nodes_rev
        LOOP
            answers[r.taker] := jsonb_build_object('taken', to_jsonb(r) - 'taker');
        END LOOP;
    END LOOP;
    FOR k IN 1 .. n LOOP
        IF answers[k] IS NULL THEN
            answers[k] := jsonb_build_object('taken', NULL);
        END IF;
    END LOOP;
    RETURN to_jsonb(answers);
END
$fn$;
