//! `/v2/tasks/take` and `/v2/tasks/finish` on the internal port: how provisioner workers get work
//! and report results (contract §4.12); `/v2/tasks/nodes` serves a cluster's `nodes` map to
//! workers that cache it (weft's own provisioner) instead of reading it in every payload.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodFilter;
use weft_model::{FinishTaskRequest, TakeTaskRequest, TaskNodesRequest};

use super::params::parse_body;
use crate::api::{op, Api, Body};
use crate::error::ApiResult;
use crate::state::AppState;
use weft_engine::work;

/// Registers `/v2/tasks/take`, `/v2/tasks/finish` and `/v2/tasks/nodes` (internal port).
pub fn routes(api: Api) -> Api {
    api.route(
        MethodFilter::POST,
        "/v2/tasks/take",
        take,
        op("tasks", "Lease the tenant's next queued task to a worker")
            .body(Body::Json("TakeTaskRequest"))
            .ok(
                200,
                "the task (sent as text/plain, as Coopr did)",
                Body::AnyJson,
            )
            .status(204, "nothing to do")
            .status(400, "a field is missing")
            .status(403, "Provisioner X is not registered."),
    )
    .route(
        MethodFilter::POST,
        "/v2/tasks/nodes",
        nodes,
        op(
            "tasks",
            "A cluster's nodes map as of now: whole, or the changes since a revision the worker holds",
        )
        .body(Body::Json("TaskNodesRequest"))
        .ok(200, "the map or its changes", Body::Json("TaskNodes"))
        .status(400, "a field is missing")
        .status(403, "Provisioner X is not registered.")
        .status(404, "no such cluster in the tenant"),
    )
    .route(
        MethodFilter::POST,
        "/v2/tasks/finish",
        finish,
        op(
            "tasks",
            "Report a task's result (status 0 is success); with `next`, take the worker's next task too",
        )
        .body(Body::Json("FinishTaskRequest"))
        .ok(
            200,
            "recorded (a repeated finish is applied once); with `next`, the worker's next task \
             (text/plain, as a take answers)",
            Body::AnyJson,
        )
        .status(204, "with `next`: recorded, and nothing to do")
        .status(400, "a field is missing")
        .status(403, "Provisioner X is not registered.")
        .status(417, "Worker is not the owner of the task"),
    )
}

async fn take(State(st): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let req: TakeTaskRequest = parse_body(&body, "{workerId, provisionerId, tenantId}")?;
    Ok(task_answer(held(work::take(&st.engine, req).await?).await))
}

/// The environment variable of the test fault point "a server dies between a take's commit and
/// its answer": `<n>@<path>` holds the answer of the n-th task this process hands out forever
/// and creates the file `<path>`, so that a test kills the server while the task is leased and
/// its answer is not sent. Unset (always, outside tests) it costs one look at a static.
const HOLD_TAKE_VAR: &str = "WEFT_TEST_HOLD_TAKE";

/// The fault point of [`HOLD_TAKE_VAR`]: returns `task` unless it is the one to hold.
async fn held(task: Option<String>) -> Option<String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static HOLD: OnceLock<Option<(u64, String)>> = OnceLock::new();
    static HANDED_OUT: AtomicU64 = AtomicU64::new(0);
    let hold = HOLD.get_or_init(|| {
        let v = std::env::var(HOLD_TAKE_VAR).ok()?;
        let (n, path) = v.split_once('@')?;
        Some((n.parse().ok()?, path.to_string()))
    });
    let (Some((n, path)), Some(_)) = (hold, &task) else {
        return task;
    };
    if HANDED_OUT.fetch_add(1, Ordering::SeqCst) + 1 == *n {
        tracing::warn!(
            path,
            "test fault point: a take's answer held until the server is killed"
        );
        if let Err(e) = std::fs::write(path, b"held\n") {
            tracing::error!(path, error = %e, "test fault point: cannot write the marker");
        }
        std::future::pending::<()>().await;
    }
    task
}

/// A take's answer: the task as text/plain (as Coopr sent it), or 204.
fn task_answer(task: Option<String>) -> Response {
    match task {
        Some(task) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], task).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

async fn nodes(State(st): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let req: TaskNodesRequest = parse_body(&body, "{provisionerId, tenantId, clusterId, since}")?;
    let answer = work::task_nodes(&st.engine, req).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], answer).into_response())
}

async fn finish(State(st): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let req: FinishTaskRequest = parse_body(&body, "a finish request")?;
    if req.next.is_some() {
        return Ok(task_answer(
            held(work::finish_and_take(&st.engine, req).await?).await,
        ));
    }
    work::finish(&st.engine, req).await?;
    Ok(StatusCode::OK.into_response())
}
