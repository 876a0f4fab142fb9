//! Ids as Coopr wrote them: cluster ids, and the action of gate rows.

/// The action of gate rows.
pub use weft_store::GATE;

/// Coopr's cluster id text: 8 digits, zero-padded.
pub fn cluster_id_text(id: u64) -> String {
    format!("{id:08}")
}

/// Parses a cluster id as Coopr did (`"1"` and `"00000001"` are the same cluster).
pub fn parse_cluster_id(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// The id of a job's end gate.
pub fn end_gate(job_id: &str) -> String {
    format!("{job_id}-end")
}
