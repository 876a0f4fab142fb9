//! The audit trail: who asked for what, from where, and what came of it.
//!
//! Records are appended, never updated, and chained per tenant: each holds the SHA-256 of the one
//! before (`prevHash`) and its own (`hash`, over the tenant, its sequence number, the previous hash
//! and its body exactly as stored), so that an edited, inserted or deleted record breaks the chain
//! and [`verify_chain`] finds where. Records leave only by retention ([`Store::purge_audit`]),
//! which moves the tenant's anchor (`audit_heads.first_seq`, `first_prev`) with them, so what is
//! left still verifies and a record removed from the start by hand does not.
//!
//! [`Store::purge_audit`]: crate::Store::purge_audit

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};
pub use weft_model::audit::{AuditEntry, AuditRecord, ChainReport};

/// How long a request's pending record may wait for its answer before the janitor chains it as
/// unanswered (status 0): far longer than any request takes.
pub const UNANSWERED_AFTER_MS: i64 = 10 * 60 * 1000;

/// The record of the request being handled, before its answer is known. While a request runs
/// inside [`Pending::scope`], every write transaction the store opens for it (a change set on any
/// of the store's commit paths, or a plain write) also writes the record to `audit_pending`, in
/// that transaction: if the change commits, so does its record. Once the request is answered,
/// [`Store::append_audit`](crate::Store::append_audit) chains the record with its status and
/// removes the pending row in one transaction; a server that stops in between leaves the row for
/// [`Store::settle_audit`](crate::Store::settle_audit).
pub struct Pending {
    request_id: String,
    /// The record as known when the store writes it (the caller's identity is found while the
    /// request is handled), status 0.
    entry: Box<dyn Fn() -> AuditEntry + Send + Sync>,
    written: AtomicBool,
}

tokio::task_local! {
    static PENDING: Arc<Pending>;
}

impl Pending {
    /// The record of the request `request_id`; `entry` gives the record as known when a write needs
    /// it.
    pub fn new(
        request_id: impl Into<String>,
        entry: impl Fn() -> AuditEntry + Send + Sync + 'static,
    ) -> Arc<Pending> {
        Arc::new(Pending {
            request_id: request_id.into(),
            entry: Box::new(entry),
            written: AtomicBool::new(false),
        })
    }

    /// Runs `f` (the request's handling) with `pending` as its record.
    pub async fn scope<F: Future>(pending: Arc<Pending>, f: F) -> F::Output {
        PENDING.scope(pending, f).await
    }

    /// The record of the request this task is handling, if any.
    pub(crate) fn current() -> Option<Arc<Pending>> {
        PENDING.try_with(Arc::clone).ok()
    }

    /// The record as known now (status 0).
    pub fn entry(&self) -> AuditEntry {
        (self.entry)()
    }

    /// Whether a write transaction of the request carried the record (it may have rolled back).
    pub fn written(&self) -> bool {
        self.written.load(Ordering::Relaxed)
    }

    /// The pending row's columns: request id, tenant id, time and body; marks it written.
    pub(crate) fn row(&self) -> Option<PendingRow> {
        let entry = self.entry();
        let body = serde_json::to_string(&entry).ok()?;
        self.written.store(true, Ordering::Relaxed);
        Some(PendingRow {
            request_id: self.request_id.clone(),
            tenant_id: entry.tenant_id,
            time: entry.time,
            body,
        })
    }
}

/// A record waiting for its request's answer, as `audit_pending` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRow {
    /// The request's id (`Weft-Request-Id`), the row's key.
    pub request_id: String,
    /// The tenant the request acted in (its id).
    pub tenant_id: String,
    /// When the request came in, in ms since the epoch.
    pub time: i64,
    /// The record ([`AuditEntry`]) as JSON, status 0.
    pub body: String,
}

/// The hash before a tenant's first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A stored record as read back, its body as it is in the store (what the hash covers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAudit {
    /// The tenant whose chain the record is in (its id).
    pub tenant_id: String,
    /// The record's number in its tenant's chain, from 1, without gaps.
    pub seq: u64,
    /// When the request came in, in ms since the epoch (indexed copy of the body's `time`).
    pub time: i64,
    /// The record ([`AuditEntry`]) as JSON, byte for byte as hashed.
    pub body: String,
    /// The caller's user id (indexed copy of the body's `user`).
    pub user: String,
    /// What kind of thing the request acted on (indexed copy of the body's `entity`).
    pub entity: String,
    /// What was asked (indexed copy of the body's `action`).
    pub action: String,
    /// The hash of the record before, or [`GENESIS`] for a tenant's first.
    pub prev_hash: String,
    /// This record's hash ([`record_hash`]), in lower-case hex.
    pub hash: String,
}

impl StoredAudit {
    /// The record, if its body reads as one.
    pub fn record(&self) -> Option<AuditRecord> {
        let entry: AuditEntry = serde_json::from_str(&self.body).ok()?;
        Some(AuditRecord {
            seq: self.seq,
            entry,
            prev_hash: self.prev_hash.clone(),
            hash: self.hash.clone(),
        })
    }
}

/// Which records a read wants, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// One tenant's records, or every tenant's.
    pub tenant_id: Option<String>,
    /// Only this user's records (exact match).
    pub user: Option<String>,
    /// Only records on this kind of thing (`clusters`, `providers`, ...).
    pub entity: Option<String>,
    /// Only records of this action (`create`, `delete`, ...).
    pub action: Option<String>,
    /// Milliseconds since the epoch, inclusive.
    pub from: Option<i64>,
    /// Milliseconds since the epoch, exclusive.
    pub to: Option<i64>,
    /// How many matching records to skip, newest first.
    pub offset: u64,
    /// The most records to return.
    pub limit: u64,
}

/// Where a tenant's chain starts after retention: the first kept record's number and the hash
/// of the one before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditAnchor {
    /// The tenant whose chain this is (its id).
    pub tenant_id: String,
    /// The number of the first record kept (1 until retention removes records).
    pub first_seq: u64,
    /// The hash the first kept record's `prevHash` must be ([`GENESIS`] until retention).
    pub first_prev: String,
    /// The last record's number and hash (0 and the anchor's hash if none is left).
    pub head_seq: u64,
    /// The last record's hash (the anchor's `first_prev` if none is left).
    pub head_hash: String,
}

/// The hash of record `seq` of `tenant_id` with body `body` after `prev`.
pub fn record_hash(tenant_id: &str, seq: u64, prev: &str, body: &str) -> String {
    let mut h = Sha256::new();
    for part in [tenant_id, &seq.to_string(), prev, body] {
        h.update(part.len().to_string().as_bytes());
        h.update(b":");
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Checks one tenant's records (in sequence order) against its anchor: numbers without gaps from
/// the anchor's first, each record's `prevHash` the hash before it, each hash recomputed from the
/// stored body, the indexed columns those of the body, and the last record the head.
pub fn verify_chain(anchor: &AuditAnchor, records: &[StoredAudit]) -> ChainReport {
    let mut check = ChainCheck::new(anchor);
    check.feed(records);
    check.finish()
}

/// [`verify_chain`] a page of records at a time.
pub struct ChainCheck {
    report: ChainReport,
    want_seq: u64,
    prev: String,
    head_seq: u64,
}

impl ChainCheck {
    /// A check that starts at `anchor`'s first record.
    pub fn new(anchor: &AuditAnchor) -> ChainCheck {
        ChainCheck {
            report: ChainReport {
                tenant_id: anchor.tenant_id.clone(),
                records: 0,
                ok: true,
                first_bad_seq: None,
                problem: None,
                head_hash: anchor.head_hash.clone(),
            },
            want_seq: anchor.first_seq,
            prev: anchor.first_prev.clone(),
            head_seq: anchor.head_seq,
        }
    }

    /// The next records, in order; nothing more is checked after the first fault.
    pub fn feed(&mut self, records: &[StoredAudit]) {
        for r in records {
            if !self.report.ok {
                return;
            }
            self.report.records += 1;
            if let Some(problem) = check_one(r, self.want_seq, &self.prev) {
                self.fail(r.seq.min(self.want_seq), problem);
                return;
            }
            self.want_seq = r.seq + 1;
            self.prev = r.hash.clone();
        }
    }

    /// Whether a fault was found.
    pub fn failed(&self) -> bool {
        !self.report.ok
    }

    /// The report, once every record was fed: the chain must end at the head.
    pub fn finish(mut self) -> ChainReport {
        let at_head = self.want_seq == self.head_seq + 1 && self.prev == self.report.head_hash;
        if self.report.ok && !at_head {
            let problem = format!(
                "the chain ends at record {} but the head is record {}: records are missing",
                self.want_seq.saturating_sub(1),
                self.head_seq
            );
            self.fail(self.want_seq, problem);
        }
        self.report
    }

    fn fail(&mut self, seq: u64, problem: String) {
        self.report.ok = false;
        self.report.first_bad_seq = Some(seq);
        self.report.problem = Some(problem);
    }
}

/// Records read per step while a chain is verified.
const CHAIN_PAGE: u64 = 5000;

/// Verifies one tenant's chain in `store`, reading it a page at a time.
pub async fn verify_tenant(
    store: &dyn crate::Store,
    anchor: &AuditAnchor,
) -> crate::Result<ChainReport> {
    let mut check = ChainCheck::new(anchor);
    let mut next = anchor.first_seq;
    while !check.failed() {
        let page = store
            .audit_chain(&anchor.tenant_id, next, CHAIN_PAGE)
            .await?;
        check.feed(&page);
        match page.last() {
            Some(last) if page.len() as u64 == CHAIN_PAGE => next = last.seq + 1,
            _ => break,
        }
    }
    Ok(check.finish())
}

/// Verifies every tenant's chain in `store` (or only `tenant_id`'s).
pub async fn verify_all(
    store: &dyn crate::Store,
    tenant_id: Option<&str>,
) -> crate::Result<Vec<ChainReport>> {
    let mut out = Vec::new();
    for anchor in store.audit_anchors().await? {
        if tenant_id.is_some_and(|t| t != anchor.tenant_id) {
            continue;
        }
        out.push(verify_tenant(store, &anchor).await?);
    }
    Ok(out)
}

fn check_one(r: &StoredAudit, want_seq: u64, prev: &str) -> Option<String> {
    if r.seq != want_seq {
        return Some(format!(
            "record {want_seq} is missing (the next is {})",
            r.seq
        ));
    }
    if r.prev_hash != prev {
        return Some(format!(
            "record {} does not follow the one before it",
            r.seq
        ));
    }
    if record_hash(&r.tenant_id, r.seq, &r.prev_hash, &r.body) != r.hash {
        return Some(format!("record {} was changed after it was written", r.seq));
    }
    let columns_match = r.record().is_some_and(|rec| {
        rec.entry.user == r.user
            && rec.entry.entity == r.entity
            && rec.entry.action == r.action
            && rec.entry.time == r.time
            && rec.entry.tenant_id == r.tenant_id
    });
    if !columns_match {
        return Some(format!("record {}'s columns differ from its body", r.seq));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: u64) -> (AuditAnchor, Vec<StoredAudit>) {
        let mut prev = GENESIS.to_string();
        let mut out = Vec::new();
        for seq in 1..=n {
            let e = AuditEntry {
                time: seq as i64,
                tenant_id: "t".into(),
                request_id: format!("r{seq}"),
                user: "alice".into(),
                role: "admin".into(),
                key_id: None,
                source: "127.0.0.1:1".into(),
                method: "POST".into(),
                route: "/v2/clusters".into(),
                entity: "clusters".into(),
                entity_id: None,
                action: "create".into(),
                status: 200,
            };
            let body = serde_json::to_string(&e).unwrap();
            let hash = record_hash("t", seq, &prev, &body);
            out.push(StoredAudit {
                tenant_id: "t".into(),
                seq,
                time: e.time,
                body,
                user: e.user,
                entity: e.entity,
                action: e.action,
                prev_hash: prev.clone(),
                hash: hash.clone(),
            });
            prev = hash;
        }
        let anchor = AuditAnchor {
            tenant_id: "t".into(),
            first_seq: 1,
            first_prev: GENESIS.into(),
            head_seq: n,
            head_hash: prev,
        };
        (anchor, out)
    }

    #[test]
    fn an_intact_chain_verifies_and_every_kind_of_tampering_is_found() {
        let (anchor, recs) = chain(5);
        assert!(verify_chain(&anchor, &recs).ok);

        let mut edited = recs.clone();
        edited[2].body = edited[2].body.replace("alice", "bob");
        edited[2].user = "bob".into();
        let r = verify_chain(&anchor, &edited);
        assert_eq!((r.ok, r.first_bad_seq), (false, Some(3)), "{r:?}");

        let mut column = recs.clone();
        column[1].user = "mallory".into();
        assert_eq!(verify_chain(&anchor, &column).first_bad_seq, Some(2));

        let mut deleted = recs.clone();
        deleted.remove(3);
        assert_eq!(verify_chain(&anchor, &deleted).first_bad_seq, Some(4));

        let cut = &recs[..4];
        let r = verify_chain(&anchor, cut);
        assert!(!r.ok && r.problem.unwrap().contains("missing"));

        let from_start = &recs[1..];
        assert_eq!(verify_chain(&anchor, from_start).first_bad_seq, Some(1));

        // Retention moves the anchor: what is left verifies.
        let kept = AuditAnchor {
            first_seq: 3,
            first_prev: recs[1].hash.clone(),
            ..anchor.clone()
        };
        assert!(verify_chain(&kept, &recs[2..]).ok);
    }
}
