//! The public event stream as callers follow it (`GET /v2/events`, `weft events`, the UI's live
//! views): the events of the caller's tenant after a number it names, filtered, in order; and
//! the pump that numbers newly committed events and wakes followers.
//!
//! Tenant admins see every event of their tenant; a plain user sees the events of the clusters
//! they own and no audit records. What an event holds and how the backlog is kept is
//! `weft_store::events`'s.

use std::time::Duration;

pub use weft_store::EventQuery;
use weft_store::{Event, EventKind};

use crate::error::{EngineError, EngineResult};
use crate::ids::parse_cluster_id;
use crate::{view, Caller, Engine};

/// Events answered per read at most.
pub const PAGE: u64 = 500;

/// How often the pump numbers newly committed events and looks for new ones (a follower sees an
/// event about this long after its commit at most, plus the read).
pub const PUMP_INTERVAL: Duration = Duration::from_millis(200);

/// What a follower wants.
#[derive(Debug, Clone, Default)]
pub struct FeedFilter {
    /// Only this cluster's events (checked to be visible to the caller).
    pub cluster: Option<String>,
    /// Only these kinds (all when empty).
    pub kinds: Vec<EventKind>,
}

/// The numbers a follower may have missed: the backlog no longer holds `from..=to` (retention).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    /// The first number lost.
    pub from: u64,
    /// The last number lost.
    pub to: u64,
}

/// A prepared follow: the store query for `who` and `filter`, starting after `since` (after the
/// newest event when `None`: only what happens from now), and what the backlog lost before it.
pub struct Follow {
    /// What to read next from the store (its `after` moves as events are read).
    pub query: EventQuery,
    /// Events the follow asked for that retention removed; `None` when nothing was lost.
    pub lost: Option<Lost>,
}

/// Checks `filter` for `who` and finds where a follow starts.
pub async fn follow(
    st: &Engine,
    who: &Caller,
    filter: &FeedFilter,
    since: Option<u64>,
) -> EngineResult<Follow> {
    let cluster_id = match &filter.cluster {
        None => None,
        Some(id) => {
            view::visible(st, who, id).await?;
            parse_cluster_id(id)
        }
    };
    let tenant = who.tenant.id.clone();
    let bounds = st.store.event_bounds(&tenant).await?;
    let after = since.unwrap_or(bounds.newest);
    let lost = (bounds.oldest > after.saturating_add(1)).then(|| Lost {
        from: after + 1,
        to: bounds.oldest - 1,
    });
    if filter.kinds.contains(&EventKind::Audit) && !who.is_admin() {
        return Err(EngineError::Forbidden(
            "kind: audit records are for the tenant's admins".into(),
        ));
    }
    let query = EventQuery {
        tenant_id: tenant,
        after,
        cluster_id,
        kinds: filter.kinds.clone(),
        owner: (!who.is_admin()).then(|| who.user.clone()),
        limit: PAGE,
    };
    Ok(Follow { query, lost })
}

/// The next events of a follow after `after`, oldest first (empty when there is none yet).
pub async fn next_page(st: &Engine, q: &EventQuery, after: u64) -> EngineResult<Vec<Event>> {
    let q = EventQuery { after, ..q.clone() };
    let _permit = st.light_read().await?;
    Ok(st.store.read_events(&q).await?)
}

/// A receiver that changes whenever some tenant has new events.
pub fn subscribe(st: &Engine) -> tokio::sync::watch::Receiver<u64> {
    st.feed_mark.subscribe()
}

/// One pump step: numbers newly committed events and wakes followers if there are new ones.
pub async fn pump_once(st: &Engine) -> EngineResult<()> {
    let mark = st.store.sequence_events().await?;
    st.feed_mark.send_if_modified(|m| {
        let changed = *m != mark;
        *m = mark;
        changed
    });
    Ok(())
}

/// Runs the pump every [`PUMP_INTERVAL`] until aborted. Every server runs it: on PostgreSQL the
/// servers take turns numbering (an advisory lock), and each wakes its own followers.
pub fn spawn(st: Engine) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PUMP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tick.tick().await;
            match pump_once(&st).await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "the event pump failed; it tries again");
                }
                Err(_) => {}
            }
        }
    })
}

/// Retention: removes events older than `keep_ms` before `now`. Returns how many went.
pub async fn purge(st: &Engine, now: i64, keep_ms: i64) -> EngineResult<u64> {
    Ok(st.store.purge_events(now.saturating_sub(keep_ms)).await?)
}
