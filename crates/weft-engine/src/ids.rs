//! Ids as Coopr wrote them: cluster ids, and the action of gate rows; and the ids weft gives
//! the tasks it adds to a plan (end gates, clean-ups).

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

/// The id of the DELETE that cleans up after a CREATE that failed for good (`task_id`).
pub fn cleanup_id(task_id: &str) -> String {
    format!("{task_id}-cleanup")
}

/// Whether `id` is a clean-up DELETE's ([`cleanup_id`]): it runs although its job has failed,
/// and its cluster settles only once it ends.
pub fn is_cleanup_id(id: &str) -> bool {
    id.ends_with("-cleanup")
}

/// Whether a task of a job that has failed still keeps its cluster from settling: it runs, or it
/// is a clean-up DELETE waiting to run.
pub fn still_busy(state: weft_store::TaskState, id: &str) -> bool {
    use weft_store::TaskState;
    state == TaskState::InProgress || (state == TaskState::Queued && is_cleanup_id(id))
}
