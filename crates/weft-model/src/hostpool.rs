//! Host pools: machines that already exist (bare metal, VMs), registered by a tenant admin into a
//! pool per provider (a provider whose provider type is [`HOSTPOOL`]) and lent to clusters.
//!
//! The wire types of `/v2/providers/{name}/hosts` ([`PoolHost`] answered, [`PoolHostRequest`]
//! read), the rules a host must follow, and [`LabelSelector`]: which hosts a hardware type takes.
//! A hardware type's providermap entry for a host-pool provider names the labels a host must carry
//! in `flavor`: `"disk=ssd,size=large"` takes hosts labelled `disk: ssd` **and** `size: large`; a
//! bare key (`"gpu"`) takes hosts that carry the label with any value; an empty flavor (or `*`)
//! takes any host.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::{lenient, validate_name, ModelError};

/// The provider type name of host-pool providers.
pub const HOSTPOOL: &str = "hostpool";

/// What a host's private key reads as in every answer.
pub const KEY_MASK: &str = "********";

/// At most this many labels per host.
pub const MAX_LABELS: usize = 32;

/// A private key's text may not be longer than this.
pub const MAX_KEY_LEN: usize = 16 * 1024;

/// Whether a host is lent to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum HostState {
    /// In the pool, free to take.
    Free,
    /// Taken for a node of a cluster whose job is being recorded.
    Reserved,
    /// Lent to a node.
    InUse,
}

impl HostState {
    /// The wire and stored name (`free`, `reserved`, `in_use`).
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Free => "free",
            HostState::Reserved => "reserved",
            HostState::InUse => "in_use",
        }
    }
}

/// A host of a pool as the API answers it (`GET /v2/providers/{name}/hosts`). The private key is
/// never answered: `key` reads `********`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PoolHost {
    /// The host's name in its pool (`[A-Za-z0-9_.-]`).
    pub id: String,
    /// The provider (entity name) whose pool the host is in.
    pub provider: String,
    /// Where to reach it over SSH: a host name or an IP address.
    pub address: String,
    /// The SSH port.
    pub port: u16,
    /// The SSH user (not root: commands run with `sudo -n -E`).
    pub user: String,
    /// Always `********`.
    pub key: String,
    /// The host's labels, by which hardware types select hosts (their `flavor` names the labels).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Whether the host is free, reserved or lent to a node.
    pub state: HostState,
    /// The cluster the host is lent to.
    #[serde(rename = "clusterId", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// The node the host is lent to.
    #[serde(rename = "nodeId", default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// When it was taken (ms since the epoch).
    #[serde(
        rename = "reserveTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub reserve_time: Option<i64>,
    /// `createTime`: when the host was registered, in milliseconds since the epoch.
    #[serde(rename = "createTime")]
    pub create_time: i64,
}

/// The body of `POST /v2/providers/{name}/hosts` and `PUT /v2/providers/{name}/hosts/{host}`.
/// A PUT replaces the host's definition; a missing `key` (or `********`) keeps the stored one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PoolHostRequest {
    /// The host's name in the pool (`[A-Za-z0-9_.-]`); a PUT takes the path's.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub id: Option<String>,
    /// Where to reach the host over SSH: a host name or an IP address (required).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub address: Option<String>,
    /// Default 22.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_u64"
    )]
    pub port: Option<u64>,
    /// Default `root`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub user: Option<String>,
    /// The SSH private key's text (OpenSSH or PEM). Required when the host is new.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub key: Option<String>,
    /// Labels for hardware types to select the host by: at most 32; keys 1 to 63 of
    /// `[A-Za-z0-9_./-]`, values up to 255 of those and `:`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "lenient::string_map"
    )]
    pub labels: BTreeMap<String, String>,
}

/// A checked [`PoolHostRequest`].
#[derive(Clone, PartialEq, Eq)]
pub struct HostSpec {
    /// The host's name in the pool.
    pub id: String,
    /// The host name or IP address to reach it at, trimmed.
    pub address: String,
    /// The SSH port (22 unless the request gave one).
    pub port: u16,
    /// The SSH user (`root` unless the request gave one).
    pub user: String,
    /// `None`: keep the stored key.
    pub key: Option<String>,
    /// The host's labels, checked.
    pub labels: BTreeMap<String, String>,
}

impl fmt::Debug for HostSpec {
    /// The key shows as `********`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostSpec")
            .field("id", &self.id)
            .field("address", &self.address)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("key", &self.key.as_ref().map(|_| KEY_MASK))
            .field("labels", &self.labels)
            .finish()
    }
}

impl PoolHostRequest {
    /// Checks every field, naming the one at fault. With `path_id` (a PUT), the body's id must be
    /// absent or equal to it.
    pub fn check(&self, path_id: Option<&str>) -> Result<HostSpec, ModelError> {
        let id = match (path_id, self.id.as_deref()) {
            (Some(p), Some(b)) if p != b => {
                return Err(ModelError::invalid(
                    "id",
                    format!("id in the body ({b}) does not match the host in the path ({p})"),
                ))
            }
            (Some(p), _) => p.to_string(),
            (None, Some(b)) => b.to_string(),
            (None, None) => String::new(),
        };
        validate_name("id", &id)?;
        let address = self.address.as_deref().unwrap_or("").trim().to_string();
        validate_address(&address)?;
        let port = match self.port {
            None => 22,
            Some(p) => u16::try_from(p).ok().filter(|p| *p > 0).ok_or_else(|| {
                ModelError::invalid("port", format!("port {p} is not between 1 and 65535"))
            })?,
        };
        let user = self.user.as_deref().unwrap_or("root").trim().to_string();
        validate_user(&user)?;
        let key = match self.key.as_deref() {
            None | Some(KEY_MASK) => None,
            Some(k) => {
                validate_key(k)?;
                Some(k.to_string())
            }
        };
        validate_labels(&self.labels)?;
        Ok(HostSpec {
            id,
            address,
            port,
            user,
            key,
            labels: self.labels.clone(),
        })
    }
}

fn validate_address(a: &str) -> Result<(), ModelError> {
    if a.is_empty() {
        return Err(ModelError::invalid("address", "address must be specified"));
    }
    if a.len() > 253 {
        return Err(ModelError::invalid(
            "address",
            "address must be at most 253 characters",
        ));
    }
    if let Some(c) = a
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_')))
    {
        return Err(ModelError::invalid(
            "address",
            format!("address \"{a}\" contains '{c}': give a host name or an IP address"),
        ));
    }
    Ok(())
}

fn validate_user(u: &str) -> Result<(), ModelError> {
    let ok = !u.is_empty()
        && u.len() <= 32
        && !u.starts_with('-')
        && u.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ModelError::invalid(
            "user",
            format!(
                "user \"{u}\" is not a valid user name (1 to 32 of letters, digits, '_', '.', '-')"
            ),
        ))
    }
}

fn validate_key(k: &str) -> Result<(), ModelError> {
    if k.len() > MAX_KEY_LEN {
        return Err(ModelError::invalid(
            "key",
            format!("key is longer than {MAX_KEY_LEN} bytes"),
        ));
    }
    if !(k.contains("-----BEGIN") && k.contains("PRIVATE KEY-----")) {
        return Err(ModelError::invalid(
            "key",
            "key must be an SSH private key's text (-----BEGIN ... PRIVATE KEY-----)",
        ));
    }
    Ok(())
}

fn label_chars_ok(s: &str, extra: &[char]) -> bool {
    s.chars().all(|c| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/') || extra.contains(&c)
    })
}

/// Label keys: 1 to 63 of `[A-Za-z0-9_./-]`; values: up to 255 of the same and `:`.
pub fn validate_labels(labels: &BTreeMap<String, String>) -> Result<(), ModelError> {
    if labels.len() > MAX_LABELS {
        return Err(ModelError::invalid(
            "labels",
            format!("a host may carry at most {MAX_LABELS} labels"),
        ));
    }
    for (k, v) in labels {
        if k.is_empty() || k.len() > 63 || !label_chars_ok(k, &[]) {
            return Err(ModelError::invalid(
                format!("labels.{k}"),
                format!("label \"{k}\" is not a valid label name (1 to 63 of letters, digits, '_', '.', '/', '-')"),
            ));
        }
        if v.len() > 255 || !label_chars_ok(v, &[':']) {
            return Err(ModelError::invalid(
                format!("labels.{k}"),
                format!("labels.{k}: value \"{v}\" may hold only letters, digits, '_', '.', '/', ':', '-' (at most 255)"),
            ));
        }
    }
    Ok(())
}

/// Which hosts a hardware type takes: every term must hold. See the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelSelector {
    /// `(key, Some(value))`: the label must have this value; `(key, None)`: it must be there.
    pub terms: Vec<(String, Option<String>)>,
}

impl LabelSelector {
    /// Reads a flavor: comma-separated `key=value` or `key` terms; blank and `*` terms are ignored.
    /// Never fails: a term that no label can satisfy simply matches no host.
    pub fn parse(s: &str) -> LabelSelector {
        let mut terms: Vec<(String, Option<String>)> = s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty() && *t != "*")
            .map(|t| match t.split_once('=') {
                Some((k, v)) => (k.trim().to_string(), Some(v.trim().to_string())),
                None => (t.to_string(), None),
            })
            .collect();
        terms.sort();
        terms.dedup();
        LabelSelector { terms }
    }

    /// Whether a host carrying `labels` meets every term (an empty selector takes any host).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|(k, v)| match (labels.get(k), v) {
            (Some(have), Some(want)) => have == want,
            (Some(_), None) => true,
            (None, _) => false,
        })
    }

    /// Whether the selector has no terms, and so takes any host.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

impl fmt::Display for LabelSelector {
    /// `disk=ssd,gpu`, or `*` for any host.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("*");
        }
        let parts: Vec<String> = self
            .terms
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => k.clone(),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_need_every_term() {
        let host = labels(&[("disk", "ssd"), ("size", "large"), ("gpu", "a100")]);
        assert!(LabelSelector::parse("").matches(&host));
        assert!(LabelSelector::parse(" * ").matches(&BTreeMap::new()));
        assert!(LabelSelector::parse("disk=ssd, size=large").matches(&host));
        assert!(LabelSelector::parse("gpu").matches(&host));
        assert!(!LabelSelector::parse("disk=ssd,size=small").matches(&host));
        assert!(!LabelSelector::parse("rack").matches(&host));
        assert_eq!(
            LabelSelector::parse("size=large,disk=ssd,,gpu").to_string(),
            "disk=ssd,gpu,size=large"
        );
        assert_eq!(LabelSelector::parse("").to_string(), "*");
    }

    #[test]
    fn requests_are_checked_field_by_field() {
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n";
        let good = PoolHostRequest {
            id: Some("h1".into()),
            address: Some("10.0.0.5".into()),
            key: Some(key.into()),
            labels: labels(&[("disk", "ssd")]),
            ..Default::default()
        };
        let spec = good.check(None).unwrap();
        assert_eq!((spec.port, spec.user.as_str()), (22, "root"));
        assert_eq!(spec.key.as_deref(), Some(key));
        assert!(good.check(Some("h1")).is_ok());
        let field = |r: PoolHostRequest, path: Option<&str>| {
            r.check(path).unwrap_err().field().unwrap().to_string()
        };
        assert_eq!(field(good.clone(), Some("h2")), "id");
        let bad = |f: fn(&mut PoolHostRequest)| {
            let mut r = good.clone();
            f(&mut r);
            r
        };
        assert_eq!(field(bad(|r| r.id = None), None), "id");
        assert_eq!(field(bad(|r| r.address = None), None), "address");
        assert_eq!(
            field(bad(|r| r.address = Some("a b".into())), None),
            "address"
        );
        assert_eq!(field(bad(|r| r.port = Some(0)), None), "port");
        assert_eq!(field(bad(|r| r.port = Some(70000)), None), "port");
        assert_eq!(field(bad(|r| r.user = Some("-x".into())), None), "user");
        assert_eq!(field(bad(|r| r.key = Some("hunter2".into())), None), "key");
        assert_eq!(
            field(bad(|r| r.labels = labels(&[("disk", "a,b")])), None),
            "labels.disk"
        );
        // A masked or missing key keeps the stored one.
        assert_eq!(
            bad(|r| r.key = Some(KEY_MASK.into()))
                .check(None)
                .unwrap()
                .key,
            None
        );
        assert_eq!(bad(|r| r.key = None).check(None).unwrap().key, None);
    }

    #[test]
    fn requests_read_leniently_and_answers_round_trip() {
        let r: PoolHostRequest = crate::lenient::parse_as(
            br#"{'id': 'h1', 'address': '10.0.0.5', 'port': '2222', 'labels': {'n': 1}}"#,
            "a host",
        )
        .unwrap();
        assert_eq!(r.port, Some(2222));
        assert_eq!(r.labels["n"], "1");
        let h = PoolHost {
            id: "h1".into(),
            provider: "pool".into(),
            address: "10.0.0.5".into(),
            port: 22,
            user: "root".into(),
            key: KEY_MASK.into(),
            labels: BTreeMap::new(),
            state: HostState::InUse,
            cluster_id: Some("00000001".into()),
            node_id: Some("n".into()),
            reserve_time: Some(5),
            create_time: 1,
        };
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(v["state"], "in_use");
        assert_eq!(v["clusterId"], "00000001");
        assert_eq!(serde_json::from_value::<PoolHost>(v).unwrap(), h);
    }
}
