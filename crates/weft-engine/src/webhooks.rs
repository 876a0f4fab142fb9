//! Tenants' webhooks: the rules of registration (URL, kinds, filters, secret), and deliveries:
//! each event the webhook wants is POSTed, signed, in event order, retried with exponential
//! back-off and full jitter on no answer, a 5xx, a 408 or a 429 until `retry_window_ms` has passed
//! since its first attempt; a delivery log and redelivery on demand.
//!
//! A delivery's body (`format: json`):
//! `{"id": "<webhook>-<event id>", "webhookId", "timestamp": <ms>, "event": {...}}`, with headers
//! `Weft-Webhook-Id` (the body's `id`), `Weft-Webhook-Timestamp` (the body's `timestamp`) and
//! `Weft-Webhook-Signature: v1=<hex HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>`. The
//! `slack` format sends `{"text": "..."}` with the same headers.
//!
//! One server at a time delivers a webhook (a lease in its row), so its deliveries go one after
//! the other, in event order: at least once (an attempt whose outcome was not recorded before a
//! crash is made again) and in order per webhook, hence per cluster.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use hmac::{Hmac, Mac};
use rand::Rng;
use serde_json::{json, Value};
use sha2::Sha256;
use weft_model::webhook::{
    Delivery, DeliveryStatus, Webhook, WebhookCreated, WebhookFormat, WebhookRequest,
};
use weft_store::{DeliveryRow, Event, EventKind, EventQuery, WebhookRow};

use crate::clock::Stopwatch;
use crate::error::{EngineError, EngineResult};
use crate::ids::{cluster_id_text, parse_cluster_id};
use crate::{feed, view, Caller, Engine};

/// How long a server holds a webhook's lease between renewals.
const LEASE_MS: i64 = 30_000;
/// Events turned into deliveries per step at most.
const FILL: u64 = 100;
/// At most this many deliveries are answered per page.
pub const MAX_PAGE: u64 = 1000;
/// A secret this short is refused.
const MIN_SECRET: usize = 16;
/// How often every webhook is looked at even without new events (redeliveries asked of another
/// server, leases that ran out).
const SWEEP_EVERY: Duration = Duration::from_secs(10);

// ---- registration -------------------------------------------------------------------------------

fn require_admin(who: &Caller) -> EngineResult<()> {
    if who.is_admin() {
        Ok(())
    } else {
        Err(EngineError::Forbidden(
            "webhooks are for the tenant's admins".into(),
        ))
    }
}

/// Whether deliveries may go to `ip`: never to an unspecified, multicast or broadcast address;
/// loopback and link-local (cloud metadata services among them) only when the server allows it.
pub fn address_allowed(ip: IpAddr, allow_loopback: bool) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    let (never, local) = match ip {
        IpAddr::V4(v4) => (
            v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast(),
            v4.is_loopback() || v4.is_link_local(),
        ),
        IpAddr::V6(v6) => (
            v6.is_unspecified() || v6.is_multicast(),
            v6.is_loopback() || v6.is_unicast_link_local(),
        ),
    };
    !never && (allow_loopback || !local)
}

/// Checks a webhook URL: `http` or `https`, a host, no credentials, and (for a host written as
/// an address or `localhost`) an address [`address_allowed`] allows. Names are checked again on
/// every delivery, against every address they resolve to.
fn check_url(text: &str, allow_loopback: bool) -> EngineResult<url::Url> {
    let bad = |why: &str| EngineError::Invalid(format!("url: {why}"));
    let u = url::Url::parse(text.trim()).map_err(|e| bad(&e.to_string()))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(bad("http or https only"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(bad(
            "no credentials in the URL (sign with the secret instead)",
        ));
    }
    let refused = || {
        bad("loopback and link-local addresses are refused (the server setting webhooks_allow_loopback allows them)")
    };
    match u.host() {
        None => return Err(bad("a host is needed")),
        Some(url::Host::Ipv4(ip)) if !address_allowed(IpAddr::V4(ip), allow_loopback) => {
            return Err(refused())
        }
        Some(url::Host::Ipv6(ip)) if !address_allowed(IpAddr::V6(ip), allow_loopback) => {
            return Err(refused())
        }
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if !allow_loopback && (d == "localhost" || d.ends_with(".localhost")) {
                return Err(refused());
            }
        }
        Some(_) => {}
    }
    Ok(u)
}

/// `scheme://host[:port]/…`: what answers show of a URL (its path and query may hold a token).
fn display_url(u: &url::Url) -> String {
    let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
    let more = if u.path() == "/" && u.query().is_none() {
        "/"
    } else {
        "/…"
    };
    format!(
        "{}://{}{port}{more}",
        u.scheme(),
        u.host_str().unwrap_or_default()
    )
}

/// Checks `req` for `who`; answers the settings to store (URL and secret still in clear) and the
/// secret.
async fn checked(st: &Engine, who: &Caller, req: WebhookRequest) -> EngineResult<(Value, String)> {
    require_admin(who)?;
    let u = check_url(&req.url, st.settings.webhooks.allow_loopback)?;
    if let Some(c) = &req.cluster {
        view::visible(st, who, c).await?;
    }
    if let Some(t) = &req.template {
        weft_model::validate_name("template", t)?;
        if t.starts_with('.') {
            return Err(EngineError::Invalid(
                "template: a template's name does not start with '.'".into(),
            ));
        }
    }
    let secret = match req.secret {
        Some(s) if s.chars().count() < MIN_SECRET => {
            return Err(EngineError::Invalid(format!(
                "secret: at least {MIN_SECRET} characters"
            )))
        }
        Some(s) => s,
        None => hex::encode(rand::random::<[u8; 24]>()),
    };
    let mut kinds = req.kinds;
    kinds.sort();
    kinds.dedup();
    let body = json!({
        "url": u.as_str(), "display": display_url(&u), "secret": secret, "kinds": kinds,
        "cluster": req.cluster.as_deref().and_then(parse_cluster_id),
        "template": req.template, "format": req.format, "enabled": req.enabled,
        "createdBy": who.user,
    });
    Ok((body, secret))
}

/// Seals the URL and the secret of a webhook's settings.
async fn seal(st: &Engine, tenant: &str, mut body: Value) -> EngineResult<Value> {
    if let Some(map) = body.as_object_mut() {
        st.sealer
            .seal_fields(tenant, map, ["url", "secret"])
            .await?;
    }
    Ok(body)
}

fn answer(w: &WebhookRow) -> Webhook {
    let b = &w.body;
    Webhook {
        id: w.id.clone(),
        url: b["display"].as_str().unwrap_or_default().to_string(),
        kinds: serde_json::from_value(b["kinds"].clone()).unwrap_or_default(),
        cluster: b["cluster"].as_u64().map(cluster_id_text),
        template: b["template"].as_str().map(str::to_string),
        format: serde_json::from_value(b["format"].clone()).unwrap_or_default(),
        enabled: b["enabled"].as_bool().unwrap_or(true),
        created_by: b["createdBy"].as_str().unwrap_or_default().to_string(),
        create_time: w.create_time,
        cursor: w.cursor,
    }
}

/// Registers a webhook: it delivers the events committed from now on.
pub async fn create(
    st: &Engine,
    who: &Caller,
    req: WebhookRequest,
) -> EngineResult<WebhookCreated> {
    let (body, secret) = checked(st, who, req).await?;
    let tenant = who.tenant.id.clone();
    let row = WebhookRow {
        id: format!("wh-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        body: seal(st, &tenant, body).await?,
        cursor: st.store.event_bounds(&tenant).await?.newest,
        create_time: st.now_ms(),
        tenant_id: tenant,
    };
    st.store.put_webhook(&row).await?;
    Ok(WebhookCreated {
        webhook: answer(&row),
        secret,
    })
}

async fn find(st: &Engine, who: &Caller, id: &str) -> EngineResult<WebhookRow> {
    require_admin(who)?;
    st.store
        .get_webhook(&who.tenant.id, id)
        .await?
        .ok_or_else(|| EngineError::WebhookNotFound(id.to_string()))
}

/// The tenant's webhooks, secrets never shown (tenant admin only).
pub async fn list(st: &Engine, who: &Caller) -> EngineResult<Vec<Webhook>> {
    require_admin(who)?;
    let rows = st.store.list_webhooks(Some(&who.tenant.id)).await?;
    Ok(rows.iter().map(answer).collect())
}

/// One webhook of the tenant, its secret never shown (tenant admin only).
pub async fn get(st: &Engine, who: &Caller, id: &str) -> EngineResult<Webhook> {
    Ok(answer(&find(st, who, id).await?))
}

/// New settings for a webhook; its place in the events is kept. Without a `secret`, the old
/// one stays.
pub async fn update(
    st: &Engine,
    who: &Caller,
    id: &str,
    mut req: WebhookRequest,
) -> EngineResult<Webhook> {
    let old = find(st, who, id).await?;
    let keep_secret = req.secret.is_none();
    req.secret.get_or_insert_with(|| "x".repeat(MIN_SECRET));
    let (mut body, _) = checked(st, who, req).await?;
    if keep_secret {
        body["secret"] = old.body["secret"].clone();
    }
    let row = WebhookRow {
        body: seal(st, &who.tenant.id, body).await?,
        ..old
    };
    st.store.put_webhook(&row).await?;
    Ok(answer(&row))
}

/// Removes a webhook and its delivery log (tenant admin only).
pub async fn delete(st: &Engine, who: &Caller, id: &str) -> EngineResult<()> {
    find(st, who, id).await?;
    st.store.delete_webhook(&who.tenant.id, id).await?;
    Ok(())
}

fn delivery_answer(d: &DeliveryRow) -> Delivery {
    Delivery {
        webhook_id: d.webhook_id.clone(),
        event_id: d.event_id,
        cluster_id: d.cluster_id.map(cluster_id_text),
        status: d.status,
        attempts: d.attempts,
        last_code: d.code,
        last_error: d.error.clone(),
        latency_ms: d.latency_ms,
        first_attempt: d.first_time,
        last_attempt: d.last_time,
        next_attempt: (d.status == DeliveryStatus::Pending).then_some(d.next_time),
    }
}

/// A webhook's deliveries, newest event first (before event `before` if given).
pub async fn deliveries(
    st: &Engine,
    who: &Caller,
    id: &str,
    before: Option<u64>,
    limit: Option<u64>,
) -> EngineResult<Vec<Delivery>> {
    find(st, who, id).await?;
    let limit = limit.unwrap_or(100).clamp(1, MAX_PAGE);
    let rows = st
        .store
        .list_deliveries(&who.tenant.id, id, before, limit)
        .await?;
    Ok(rows.iter().map(delivery_answer).collect())
}

/// Sends an event to a webhook again: its delivery goes back to pending, due now, with a fresh
/// retry window.
pub async fn redeliver(st: &Engine, who: &Caller, id: &str, event: u64) -> EngineResult<Delivery> {
    find(st, who, id).await?;
    let d = st
        .store
        .get_delivery(&who.tenant.id, id, event)
        .await?
        .ok_or_else(|| EngineError::DeliveryNotFound {
            webhook: id.to_string(),
            event,
        })?;
    let now = st.now_ms();
    let again = DeliveryRow {
        status: DeliveryStatus::Pending,
        attempts: 0,
        first_time: now,
        next_time: now,
        ..d
    };
    st.store.put_delivery(&again).await?;
    st.webhooks_wake.notify_one();
    Ok(delivery_answer(&again))
}

// ---- deliveries ---------------------------------------------------------------------------------

/// `v1=<hex HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>`: what `Weft-Webhook-Signature`
/// holds.
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// A webhook's settings opened for delivery.
struct Hook {
    row: WebhookRow,
    url: String,
    secret: String,
    kinds: Vec<EventKind>,
    cluster: Option<u64>,
    template: Option<String>,
    format: WebhookFormat,
    enabled: bool,
}

async fn open(st: &Engine, row: WebhookRow) -> EngineResult<Hook> {
    let text = |v: Option<Value>| v.and_then(|v| v.as_str().map(str::to_string));
    let b = &row.body;
    let open_field = |f: &str| {
        let raw = b[f].as_str().unwrap_or_default().to_string();
        let tenant = row.tenant_id.clone();
        async move { Ok::<_, EngineError>(text(st.sealer.open(&tenant, &raw).await?).unwrap_or(raw)) }
    };
    Ok(Hook {
        url: open_field("url").await?,
        secret: open_field("secret").await?,
        kinds: serde_json::from_value(b["kinds"].clone()).unwrap_or_default(),
        cluster: b["cluster"].as_u64(),
        template: b["template"].as_str().map(str::to_string),
        format: serde_json::from_value(b["format"].clone()).unwrap_or_default(),
        enabled: b["enabled"].as_bool().unwrap_or(true),
        row,
    })
}

/// What a step of a webhook's delivery did.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// An attempt was made: go on.
    Sent,
    /// Deliveries were queued (the cursor moved): go on with the webhook read again.
    Filled,
    /// Nothing to send until this time (ms): the oldest pending delivery waits for its retry.
    WaitUntil(i64),
    /// Nothing to send until new events come.
    Idle,
}

/// The template of a cluster, as its row says (for webhooks with a template filter).
async fn template_of(
    st: &Engine,
    tenant: &str,
    cluster: u64,
    seen: &mut HashMap<u64, String>,
) -> String {
    if let Some(t) = seen.get(&cluster) {
        return t.clone();
    }
    let t = match st.store.get_cluster(tenant, cluster).await {
        Ok(Some(c)) => c.body["clusterTemplate"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    };
    seen.insert(cluster, t.clone());
    t
}

/// Turns the next events after the cursor that the webhook wants into pending deliveries.
async fn fill(st: &Engine, h: &Hook, now: i64) -> EngineResult<Step> {
    let q = EventQuery {
        tenant_id: h.row.tenant_id.clone(),
        after: h.row.cursor,
        cluster_id: h.cluster,
        kinds: h.kinds.clone(),
        owner: None,
        limit: FILL,
    };
    let events = st.store.read_events(&q).await?;
    let Some(last) = events.last().map(|e| e.id) else {
        return Ok(Step::Idle);
    };
    let mut templates = HashMap::new();
    let mut pending = Vec::new();
    for e in &events {
        let cluster = e.cluster_id.as_deref().and_then(parse_cluster_id);
        if let Some(want) = &h.template {
            let Some(c) = cluster else { continue };
            if template_of(st, &h.row.tenant_id, c, &mut templates).await != *want {
                continue;
            }
        }
        pending.push(DeliveryRow {
            tenant_id: h.row.tenant_id.clone(),
            webhook_id: h.row.id.clone(),
            event_id: e.id,
            cluster_id: cluster,
            status: DeliveryStatus::Pending,
            attempts: 0,
            first_time: now,
            last_time: now,
            next_time: now,
            code: None,
            error: None,
            latency_ms: None,
        });
    }
    st.store
        .advance_webhook(&h.row.tenant_id, &h.row.id, h.row.cursor, last, &pending)
        .await?;
    Ok(Step::Filled)
}

/// The body of a delivery of `e` in the webhook's format.
fn payload(format: WebhookFormat, id: &str, webhook: &str, timestamp: i64, e: &Event) -> Vec<u8> {
    let v = match format {
        WebhookFormat::Json => {
            json!({"id": id, "webhookId": webhook, "timestamp": timestamp, "event": e})
        }
        WebhookFormat::Slack => json!({"text": slack_text(e)}),
    };
    v.to_string().into_bytes()
}

/// One line for people: what changed.
fn slack_text(e: &Event) -> String {
    let change = match (&e.previous, &e.status) {
        (Some(p), Some(s)) => format!("{p} → {s}"),
        (None, Some(s)) => s.clone(),
        _ => String::new(),
    };
    let cluster = e.cluster_id.as_deref().unwrap_or_default();
    match e.kind {
        EventKind::Cluster => format!(
            "weft: cluster {cluster} ({}) {change}",
            e.cluster_name.as_deref().unwrap_or_default()
        ),
        EventKind::Job => format!(
            "weft: job {} ({}) of cluster {cluster}: {change}",
            e.job_id.as_deref().unwrap_or_default(),
            e.action.as_deref().unwrap_or_default()
        ),
        EventKind::Task => format!(
            "weft: task {} {} on node {} of cluster {cluster}: {change}",
            e.action.as_deref().unwrap_or_default(),
            e.service.as_deref().unwrap_or_default(),
            e.node_id.as_deref().unwrap_or_default()
        ),
        EventKind::Node => format!(
            "weft: node {} of cluster {cluster} {change}",
            e.node_id.as_deref().unwrap_or_default()
        ),
        EventKind::Audit => match &e.audit {
            Some(a) => format!(
                "weft: {} {} {} answered {}",
                a.user, a.method, a.route, a.status
            ),
            None => "weft: an audit record".into(),
        },
    }
}

/// The back-off before retry number `attempts` (1, 2, ...): a random time up to
/// `base * 2^(attempts - 1)`, at most `max` (full jitter).
fn backoff_ms(base: u64, max: u64, attempts: u32) -> u64 {
    let ceiling = base
        .saturating_mul(1u64 << attempts.saturating_sub(1).min(40))
        .min(max)
        .max(1);
    rand::thread_rng().gen_range(0..=ceiling)
}

/// Whether an answer with this status is worth another attempt.
fn retried(code: u16) -> bool {
    code >= 500 || code == 408 || code == 429
}

/// One attempt of delivery `d`; answers the delivery as it stands after it.
async fn attempt(st: &Engine, h: &Hook, mut d: DeliveryRow) -> EngineResult<DeliveryRow> {
    let q = EventQuery {
        tenant_id: d.tenant_id.clone(),
        after: d.event_id.saturating_sub(1),
        limit: 1,
        ..EventQuery::default()
    };
    let event = st.store.read_events(&q).await?.into_iter().next();
    let now = st.now_ms();
    d.attempts += 1;
    d.last_time = now;
    let Some(event) = event.filter(|e| e.id == d.event_id) else {
        d.status = DeliveryStatus::Failed;
        d.error = Some("the event is no longer kept (event_retention_hours)".into());
        return Ok(d);
    };
    let id = format!("{}-{}", h.row.id, d.event_id);
    let body = payload(h.format, &id, &h.row.id, now, &event);
    let headers = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        ("User-Agent".to_string(), "weft-webhooks".to_string()),
        ("Weft-Webhook-Id".to_string(), id.clone()),
        ("Weft-Webhook-Timestamp".to_string(), now.to_string()),
        (
            "Weft-Webhook-Signature".to_string(),
            signature(&h.secret, &id, now, &body),
        ),
    ];
    let set = &st.settings.webhooks;
    let t0 = Stopwatch::start();
    let sent = st
        .messenger
        .post_webhook(
            &h.url,
            &headers,
            body,
            Duration::from_millis(set.timeout_ms),
            set.allow_loopback,
        )
        .await;
    d.latency_ms = Some(t0.elapsed().as_millis() as u64);
    let again = match sent {
        Ok(code) => {
            d.code = Some(code);
            d.error = None;
            if (200..300).contains(&code) {
                d.status = DeliveryStatus::Delivered;
                return Ok(d);
            }
            retried(code)
        }
        Err(why) => {
            d.error = Some(why);
            true
        }
    };
    let after = st.now_ms();
    if !again || after - d.first_time >= set.retry_window_ms {
        d.status = DeliveryStatus::Failed;
    } else {
        let wait = backoff_ms(set.retry_base_ms, set.retry_max_ms, d.attempts);
        d.next_time = after + i64::try_from(wait).unwrap_or(i64::MAX / 2);
    }
    tracing::debug!(
        tenant_id = %d.tenant_id, webhook = %d.webhook_id, event = d.event_id,
        attempts = d.attempts, code = ?d.code, status = d.status.as_str(),
        "webhook delivery attempted"
    );
    Ok(d)
}

/// One step of a webhook's delivery: the oldest pending delivery if it is due (nothing newer
/// goes before it), else new events become deliveries.
async fn step(st: &Engine, h: &Hook) -> EngineResult<Step> {
    let now = st.now_ms();
    match st.store.next_delivery(&h.row.tenant_id, &h.row.id).await? {
        Some(d) if d.next_time > now => Ok(Step::WaitUntil(d.next_time)),
        Some(d) => {
            let after = attempt(st, h, d).await?;
            st.store.put_delivery(&after).await?;
            Ok(Step::Sent)
        }
        None => fill(st, h, now).await,
    }
}

/// Delivers one webhook while this server holds its lease, until it has nothing to send now.
/// The lease is renewed (and the settings read again) once a third of it has passed.
async fn run_webhook(st: &Engine, tenant: &str, id: &str, me: &str) -> EngineResult<Step> {
    let mut lease_ends = 0;
    let mut hook: Option<Hook> = None;
    loop {
        let now = st.now_ms();
        if now > lease_ends - 2 * LEASE_MS / 3 {
            if !st
                .store
                .lease_webhook(tenant, id, me, now, now + LEASE_MS)
                .await?
            {
                return Ok(Step::WaitUntil(now + LEASE_MS));
            }
            lease_ends = now + LEASE_MS;
            hook = None;
        }
        let h = match hook.take() {
            Some(h) => h,
            None => match st.store.get_webhook(tenant, id).await? {
                Some(row) => open(st, row).await?,
                None => return Ok(Step::Idle),
            },
        };
        if !h.enabled {
            return Ok(Step::Idle);
        }
        match step(st, &h).await? {
            Step::Sent => hook = Some(h),
            Step::Filled => {}
            other => return Ok(other),
        }
    }
}

/// When each webhook should be looked at next, and which are being delivered now.
#[derive(Default)]
struct Schedule {
    /// Webhooks waiting for a retry: when.
    wait_until: HashMap<(String, String), i64>,
    running: HashMap<(String, String), tokio::task::JoinHandle<EngineResult<Step>>>,
}

/// Runs deliveries until aborted: on new events (the feed's mark), when a retry is due, and
/// every `SWEEP_EVERY`. Each webhook with work is delivered by a task of its own.
pub fn spawn(st: Engine) -> tokio::task::JoinHandle<()> {
    let me = format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
    tokio::spawn(async move {
        let mut wake = feed::subscribe(&st);
        let mut s = Schedule::default();
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut last_sweep = Stopwatch::start();
        // The first pass looks at every webhook.
        let mut news = true;
        loop {
            let sweep = last_sweep.elapsed() >= SWEEP_EVERY;
            if sweep {
                last_sweep = Stopwatch::start();
            }
            if let Err(e) = schedule(&st, &me, &mut s, news || sweep).await {
                tracing::warn!(error = %e, "webhook deliveries: the webhooks could not be read");
            }
            news = false;
            tokio::select! {
                _ = tick.tick() => {}
                changed = wake.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    news = true;
                }
                _ = st.webhooks_wake.notified() => news = true,
            }
        }
    })
}

/// Starts a delivery task for each webhook that may have work (`all`: every one).
async fn schedule(st: &Engine, me: &str, s: &mut Schedule, all: bool) -> EngineResult<()> {
    let now = st.now_ms();
    let finished: Vec<_> = s
        .running
        .iter()
        .filter(|(_, j)| j.is_finished())
        .map(|(k, _)| k.clone())
        .collect();
    for k in finished {
        let Some(job) = s.running.remove(&k) else {
            continue;
        };
        match job.await {
            Ok(Ok(Step::WaitUntil(t))) => {
                s.wait_until.insert(k, t);
            }
            Ok(Err(e)) => {
                tracing::warn!(webhook = %k.1, error = %e, "webhook delivery failed; it is tried again")
            }
            _ => {}
        }
    }
    let due: Vec<(String, String)> = s
        .wait_until
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(k, _)| k.clone())
        .collect();
    if !all && due.is_empty() {
        return Ok(());
    }
    for w in st.store.list_webhooks(None).await? {
        let k = (w.tenant_id.clone(), w.id.clone());
        let waiting = s.wait_until.get(&k).is_some_and(|t| *t > now);
        if s.running.contains_key(&k) || (waiting && !all) || !(all || due.contains(&k)) {
            continue;
        }
        s.wait_until.remove(&k);
        let (st2, me2, key) = (st.clone(), me.to_string(), k.clone());
        s.running.insert(
            k,
            tokio::spawn(async move { run_webhook(&st2, &key.0, &key.1, &me2).await }),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_link_local_and_unspecified_addresses_are_refused() {
        for (ip, allowed) in [
            ("127.0.0.1", false),
            ("::1", false),
            ("169.254.169.254", false),
            ("fe80::1", false),
            ("::ffff:127.0.0.1", false),
            ("0.0.0.0", false),
            ("224.0.0.1", false),
            ("192.0.2.10", true),
            ("2001:db8::1", true),
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(address_allowed(ip, false), allowed, "{ip}");
        }
        assert!(address_allowed("127.0.0.1".parse().unwrap(), true));
        assert!(!address_allowed("0.0.0.0".parse().unwrap(), true));
    }

    #[test]
    fn urls_are_checked_and_shown_without_path_or_query() {
        for bad in [
            "ftp://example.com/x",
            "http://user:pw@example.com/",
            "http://127.0.0.1:9/hook",
            "http://[::1]/",
            "http://localhost/",
            "http://169.254.169.254/latest/meta-data",
            "not a url",
        ] {
            assert!(check_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_url("http://127.0.0.1:9/hook", true).is_ok());
        let u = check_url("https://hooks.example.com/services/T0/B0/XYZ?x=1", false).unwrap();
        assert_eq!(display_url(&u), "https://hooks.example.com/…");
    }

    #[test]
    fn signatures_cover_id_timestamp_and_body() {
        let s = signature("0123456789abcdef", "wh-1-7", 1_795_924_800_123, b"{}");
        assert!(s.starts_with("v1=") && s.len() == 3 + 64);
        assert_ne!(
            s,
            signature("0123456789abcdef", "wh-1-8", 1_795_924_800_123, b"{}")
        );
        assert_ne!(
            s,
            signature("0123456789abcdef", "wh-1-7", 1_795_924_800_124, b"{}")
        );
        assert_ne!(
            s,
            signature("0123456789abcdef", "wh-1-7", 1_795_924_800_123, b"{ }")
        );
    }

    #[test]
    fn back_off_doubles_up_to_its_ceiling_with_full_jitter() {
        for attempts in 1..50 {
            let ceiling = (1000u64 << (attempts - 1).min(40)).min(60_000);
            for _ in 0..20 {
                assert!(backoff_ms(1000, 60_000, attempts) <= ceiling);
            }
        }
        let spread: std::collections::BTreeSet<u64> =
            (0..50).map(|_| backoff_ms(1000, 60_000, 6)).collect();
        assert!(spread.len() > 10, "jittered: {spread:?}");
        assert!(retried(503) && retried(429) && retried(408) && !retried(404) && !retried(410));
    }
}
