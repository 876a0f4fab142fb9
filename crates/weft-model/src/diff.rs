//! A readable difference between two JSON documents (two versions of a catalog entity, a cluster
//! as it runs and as a file declares it): one line per changed leaf, named by its path
//! (`defaults.config.zookeeper.port`). Lists of plain values (service names, hardware types) are
//! compared as sets, so a reordered list is no change and an added service reads `+ kafka`;
//! other lists are compared position by position. The entity's `version` is not a difference.

use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// How one path differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DiffKind {
    /// Present only in the new document (or a set member added).
    Added,
    /// Present only in the old document (or a set member removed).
    Removed,
    /// Present in both with different values.
    Changed,
}

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DiffLine {
    /// Dotted path from the document's root (`[i]` for list positions); empty for the root.
    pub path: String,
    /// How it differs.
    pub kind: DiffKind,
    /// The old value (absent when added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub before: Option<Value>,
    /// The new value (absent when removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub after: Option<Value>,
}

impl std::fmt::Display for DiffLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| v.as_ref().map(compact).unwrap_or_default();
        match self.kind {
            DiffKind::Added => write!(f, "+ {}: {}", self.path, show(&self.after)),
            DiffKind::Removed => write!(f, "- {}: {}", self.path, show(&self.before)),
            DiffKind::Changed => write!(
                f,
                "~ {}: {} -> {}",
                self.path,
                show(&self.before),
                show(&self.after)
            ),
        }
    }
}

/// A value on one line: strings without quotes, the rest as compact JSON.
fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The differences from `before` to `after`, in path order; empty when they are the same. A
/// top-level `version` is ignored.
pub fn diff(before: &Value, after: &Value) -> Vec<DiffLine> {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("version");
        }
        v
    };
    let mut out = Vec::new();
    walk("", &strip(before), &strip(after), &mut out);
    out
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<DiffLine>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = join(path, k);
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => walk(&p, va, vb, out),
                    (Some(va), None) => out.push(line(p, DiffKind::Removed, Some(va), None)),
                    (None, Some(vb)) => out.push(line(p, DiffKind::Added, None, Some(vb))),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if plain(x) && plain(y) => {
            for v in x.iter().filter(|v| !y.contains(v)) {
                out.push(line(path.to_string(), DiffKind::Removed, Some(v), None));
            }
            for v in y.iter().filter(|v| !x.contains(v)) {
                out.push(line(path.to_string(), DiffKind::Added, None, Some(v)));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}[{i}]");
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => walk(&p, va, vb, out),
                    (Some(va), None) => out.push(line(p, DiffKind::Removed, Some(va), None)),
                    (None, Some(vb)) => out.push(line(p, DiffKind::Added, None, Some(vb))),
                    (None, None) => {}
                }
            }
        }
        _ => out.push(line(path.to_string(), DiffKind::Changed, Some(a), Some(b))),
    }
}

/// A list of strings, numbers and booleans only (a set of names).
fn plain(list: &[Value]) -> bool {
    list.iter()
        .all(|v| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)))
}

fn line(path: String, kind: DiffKind, before: Option<&Value>, after: Option<&Value>) -> DiffLine {
    DiffLine {
        path,
        kind,
        before: before.cloned(),
        after: after.cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_documents_differ_in_nothing_and_version_is_ignored() {
        let a = json!({"name": "t", "version": 1, "defaults": {"services": ["a", "b"]}});
        let b = json!({"name": "t", "version": 4, "defaults": {"services": ["b", "a"]}});
        assert!(diff(&a, &b).is_empty());
    }

    #[test]
    fn lists_of_names_read_as_sets_and_leaves_by_path() {
        let a = json!({
            "defaults": {"services": ["zk", "hdfs"], "config": {"zk": {"port": 2181}, "old": 1}},
            "links": [{"label": "ui", "url": "http://a"}]
        });
        let b = json!({
            "defaults": {"services": ["zk", "kafka"], "config": {"zk": {"port": 2182}, "new": true}},
            "links": [{"label": "ui", "url": "http://b"}, {"label": "x", "url": "y"}]
        });
        let shown: Vec<String> = diff(&a, &b).iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            vec![
                "+ defaults.config.new: true",
                "- defaults.config.old: 1",
                "~ defaults.config.zk.port: 2181 -> 2182",
                "- defaults.services: hdfs",
                "+ defaults.services: kafka",
                "~ links[0].url: http://a -> http://b",
                "+ links[1]: {\"label\":\"x\",\"url\":\"y\"}",
            ]
        );
    }

    #[test]
    fn a_value_that_changes_type_is_one_change() {
        let d = diff(&json!({"a": [1]}), &json!({"a": {"b": 1}}));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].kind, DiffKind::Changed);
        assert_eq!(d[0].path, "a");
    }
}
