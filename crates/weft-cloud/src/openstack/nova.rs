//! The HTTP side: [`Nova`] holds a token for one set of credentials (renewed ahead of its
//! expiry, and once more when an API answers 401) and the endpoints chosen from its catalog, and
//! makes the few compute API v2.1 calls the provider needs (servers, key pairs, flavors, images),
//! each one try with typed answers (the cloud layer retries them). The network calls (Neutron)
//! are in [`super::neutron`].

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::identity::{self, Credentials};
use crate::cloud::http::{self, Answer};
use crate::cloud::token::{Renew, Token};
use crate::cloud::{self, error::found, CloudError};
use crate::throttle::Bucket;

/// The token is renewed a minute before it expires at most (a quarter of its lifetime for short
/// tokens).
const RENEW: Renew = Renew {
    ahead: Duration::from_secs(60),
    part: 4,
};
/// The code of the error a request to the image or network service gets when the catalog lists
/// none (told apart from the compute endpoint's catalog errors, which are fatal).
const NO_SERVICE: &str = "NoService";
/// Assumed lifetime of a token whose answer names no expiry.
const UNKNOWN_LIFETIME: Duration = Duration::from_secs(1800);

/// A failed call of `api` as a [`CloudError`], with the API's code, message and `Retry-After`
/// (or the body's `retryAfter`).
pub fn nova_error(api: &'static str, a: &Answer) -> CloudError {
    let body = a.value();
    let body_retry = body
        .as_object()
        .and_then(|m| m.values().next())
        .and_then(|v| v.get("retryAfter"))
        .map(|v| v.as_str().map(str::to_string).unwrap_or(v.to_string()));
    let retry_after = a
        .retry_after
        .or_else(|| cloud::retry_after(body_retry.as_deref()));
    identity::answer_error(api, a.status, &body, retry_after)
}

/// A token and the catalog's endpoints (image and network, when it has them, without a version
/// suffix).
#[derive(Clone)]
struct Live {
    token: String,
    compute: String,
    image: Option<String>,
    network: Option<String>,
}

/// Which service of the catalog a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// Nova, the `compute` endpoint.
    Compute,
    /// Glance, the `image` endpoint (its paths start with `/v2`).
    Image,
    /// Neutron, the `network` endpoint (its paths start with `/v2.0`).
    Network,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Compute => "nova",
            Api::Image => "glance",
            Api::Network => "neutron",
        }
    }
}

/// A token for one set of credentials and the endpoints of its catalog, and the calls made with
/// them. Shared by every task that uses the same credentials, so one token serves them all until
/// it is renewed.
pub struct Nova {
    http: reqwest::Client,
    creds: Credentials,
    token_url: String,
    interface: String,
    region: Option<String>,
    live: Token<Live>,
    /// The account's request budget, shared by every worker that uses these credentials.
    bucket: Bucket,
}

impl Nova {
    /// Nova reached with a token from the identity API at `auth_url`, at the endpoints of the
    /// catalog on `interface` (`public`, ...) in `region` (when `None`, the one region that has
    /// one; see [`identity::choose_endpoint`]), with a request budget of `rate` calls a second
    /// and `burst` at once. Nothing is sent until the first call.
    pub fn new(
        http: reqwest::Client,
        creds: Credentials,
        auth_url: &str,
        (interface, region): (String, Option<String>),
        (rate, burst): (f64, f64),
    ) -> Nova {
        Nova {
            token_url: creds.token_url(auth_url),
            http,
            creds,
            interface,
            region,
            live: Token::default(),
            bucket: Bucket::new(rate, burst),
        }
    }

    /// The current token and the endpoint of `api`, asking for a new token when there is none or
    /// the one held is close to its expiry.
    async fn current(&self, api: Api) -> Result<(String, String), CloudError> {
        let l = self.live.get(RENEW, || self.authenticate()).await?;
        let base = match api {
            Api::Compute => Some(l.compute),
            Api::Image => l.image,
            Api::Network => l.network,
        };
        let base = base.ok_or_else(|| {
            let kind = if api == Api::Image {
                "image"
            } else {
                "network"
            };
            let m = format!(
                "the catalog has no {kind} endpoint with interface {}",
                self.interface
            );
            CloudError::from_status(api.name(), 400, NO_SERVICE, m, None)
        })?;
        Ok((l.token, base))
    }

    /// Whether the catalog lists an image service (asking for a token when there is none).
    pub(crate) async fn has_image_service(&self) -> Result<bool, CloudError> {
        match self.current(Api::Image).await {
            Ok(_) => Ok(true),
            Err(e) if e.code == NO_SERVICE => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn authenticate(&self) -> Result<(Live, Duration), CloudError> {
        let api = self.creds.api();
        let req = self.http.post(&self.token_url).json(&self.creds.body());
        let a = http::send(api, None, req).await?;
        let body = a.value();
        if !a.is_success() {
            return Err(identity::answer_error(api, a.status, &body, None));
        }
        let token = match &self.creds {
            Credentials::ApiKey { .. } => identity::rackspace_token(&body),
            _ => identity::keystone_token(a.header("x-subject-token"), &body),
        }
        .map_err(|m| CloudError::from_status(api, 502, "BadAnswer", m, None))?;
        let endpoint = |kind: &str| {
            let (interface, region) = (&self.interface, self.region.as_deref());
            identity::choose_endpoint(&token.catalog, kind, interface, region)
        };
        let compute = endpoint("compute")
            .map_err(|m| CloudError::from_status(api, 400, "Catalog", m, None))?;
        // Glance's and Neutron's catalog entries are usually unversioned; a versioned one is taken
        // back to its root.
        let root = |kind: &str, version: &str| {
            let url = endpoint(kind).ok()?;
            Some(
                url.trim_end_matches('/')
                    .trim_end_matches(version)
                    .to_string(),
            )
        };
        let (image, network) = (root("image", "/v2"), root("network", "/v2.0"));
        let lifetime = token.lifetime.unwrap_or(UNKNOWN_LIFETIME);
        tracing::debug!(api, compute = %compute, lifetime_s = lifetime.as_secs(), "token issued");
        let live = Live {
            token: token.id,
            compute,
            image,
            network,
        };
        Ok((live, lifetime))
    }

    /// One call to the service `api` of the catalog with the current token (`path` relative to
    /// its endpoint); a 401 drops the token and tries once more with a new one. Any answer that
    /// is not 2xx is an error.
    pub(super) async fn call(
        &self,
        api: Api,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Answer, CloudError> {
        let mut refused = false;
        loop {
            let (token, base) = self.current(api).await?;
            let mut req = self
                .http
                .request(method.clone(), format!("{base}{path}"))
                .header("X-Auth-Token", &token)
                .header("Accept", "application/json");
            if let Some(b) = body {
                req = req.json(b);
            }
            let a = http::send(api.name(), Some(&self.bucket), req.query(query)).await?;
            // Over the limit (429, which `send` shares; 413 from older Nova): every worker of
            // the account waits.
            if a.status == 413 {
                self.bucket.throttled();
            }
            if a.status == 401 && !refused {
                tracing::debug!(
                    api = api.name(),
                    "the API refused the token; asking for a new one"
                );
                refused = true;
                self.live.forget(|l| l.token == token).await;
                continue;
            }
            return if a.is_success() {
                Ok(a)
            } else {
                Err(nova_error(api.name(), &a))
            };
        }
    }

    /// `GET {path}?{query}` on `api`, read as `T`.
    pub(super) async fn get<T: DeserializeOwned>(
        &self,
        api: Api,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, CloudError> {
        let a = self.call(api, Method::GET, path, query, None).await?;
        a.json(api.name())
    }

    /// Whether `method` on `path` of `api` finds the resource (404: no; other failures are
    /// errors).
    pub(super) async fn found(
        &self,
        api: Api,
        method: Method,
        path: &str,
    ) -> Result<bool, CloudError> {
        Ok(found(self.call(api, method, path, &[], None).await)?.is_some())
    }

    /// The servers named exactly `name` whose metadata `weft-node` is `node`, oldest first.
    pub async fn find(&self, name: &str, node: &str) -> Result<Vec<Server>, CloudError> {
        // Nova matches `name` as a regular expression: anchor it and escape what is special.
        let pattern = format!("^{}$", regex_escape(name));
        let query = [("name", pattern.as_str())];
        let page: Page<Server> = self.get(Api::Compute, "/servers/detail", &query).await?;
        let mut found: Vec<Server> = page
            .items
            .into_iter()
            .filter(|s| s.name == name && s.meta(crate::cloud::MARK_NODE).as_deref() == Some(node))
            .filter(|s| s.status.as_deref() != Some("DELETED"))
            .collect();
        found.sort_by(|a, b| a.created.cmp(&b.created));
        Ok(found)
    }

    /// Asks for a server (one try: a retried POST could make a second one); answers its id.
    pub async fn create(&self, server: &Value) -> Result<String, CloudError> {
        let body = json!({ "server": server });
        let a = self.call(Api::Compute, Method::POST, "/servers", &[], Some(&body));
        Ok(a.await?.json::<One<Server>>("nova")?.item.id)
    }

    /// The server `id`, or `None` when Nova does not know it.
    pub async fn show(&self, id: &str) -> Result<Option<Server>, CloudError> {
        let path = format!("/servers/{}", path_part(id));
        let one: Option<One<Server>> = found(self.get(Api::Compute, &path, &[]).await)?;
        Ok(one.map(|o| o.item))
    }

    /// Asks Nova to delete the server `id`; false when it was already gone.
    pub async fn delete(&self, id: &str) -> Result<bool, CloudError> {
        let path = format!("/servers/{}", path_part(id));
        self.found(Api::Compute, Method::DELETE, &path).await
    }

    /// Makes sure the key pair `name` holds `public_key` (imports it when missing).
    pub async fn ensure_keypair(&self, name: &str, public_key: &str) -> Result<(), CloudError> {
        let path = format!("/os-keypairs/{}", path_part(name));
        let held: Option<Value> = found(self.get(Api::Compute, &path, &[]).await)?;
        if let Some(held) = held {
            let held = held.pointer("/keypair/public_key").and_then(Value::as_str);
            if same_key(held.unwrap_or_default(), public_key) {
                return Ok(());
            }
            let m = format!("key pair {name} exists with another public key");
            let e = CloudError::from_status("nova", 409, "KeyPairMismatch", m, None);
            return Err(e);
        }
        let body = json!({"keypair": {"name": name, "public_key": public_key}});
        match self
            .call(Api::Compute, Method::POST, "/os-keypairs", &[], Some(&body))
            .await
        {
            // Imported meanwhile by another worker.
            Err(e) if e.status != 409 => Err(e),
            _ => Ok(()),
        }
    }

    /// Every item of a paged list: the first page with `query`, then each page after the
    /// previous one's marker, until a page has none.
    async fn paged<T: DeserializeOwned>(
        &self,
        api: Api,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Vec<T>, CloudError> {
        let (mut all, mut marker) = (Vec::new(), None::<String>);
        loop {
            let mut q = query.to_vec();
            q.extend(marker.iter().map(|m| ("marker", m.as_str())));
            let page: Page<T> = self.get(api, path, &q).await?;
            let after = page.next_marker();
            all.extend(page.items);
            match after {
                // A marker that does not move would loop for ever.
                Some(m) if Some(&m) != marker.as_ref() => marker = Some(m),
                _ => return Ok(all),
            }
        }
    }

    /// Every server of the project, page by page: the first page without a marker, then each
    /// page after the previous one's `next` marker, until a page has no `next` link.
    pub(crate) async fn all_servers(&self) -> Result<Vec<Server>, CloudError> {
        self.paged(Api::Compute, "/servers/detail", &[]).await
    }

    /// The flavor `value` names: the flavor with that id, else the ones with that exact name
    /// among all flavors (`GET /flavors/detail`, page by page; Nova has no name filter).
    pub(crate) async fn find_flavor(&self, value: &str) -> Result<Vec<String>, CloudError> {
        let by_id = format!("/flavors/{}", path_part(value));
        if self.found(Api::Compute, Method::GET, &by_id).await? {
            return Ok(vec![value.to_string()]);
        }
        let all = self.paged(Api::Compute, "/flavors/detail", &[]).await?;
        Ok(named(all, value))
    }

    /// The image `value` names in Glance: the image with that id, else the ones with that exact
    /// name (`GET /v2/images?name=`, page by page). Without an image service in the catalog,
    /// `value` is taken as an id and Nova checks it.
    pub(crate) async fn find_image(&self, value: &str) -> Result<Vec<String>, CloudError> {
        let by_id = format!("/v2/images/{}", path_part(value));
        if !self.has_image_service().await? || self.found(Api::Image, Method::GET, &by_id).await? {
            return Ok(vec![value.to_string()]);
        }
        let all = self
            .paged(Api::Image, "/v2/images", &[("name", value)])
            .await?;
        Ok(named(all, value))
    }
}

/// A link of a list's answer (`servers_links`, `flavors_links`).
#[derive(Debug, Deserialize)]
struct Link {
    href: String,
    rel: String,
}

/// One page of a list: Nova's `GET /servers/detail` or `/flavors/detail` (the next page in the
/// `next` link), or Glance's `GET /v2/images` (`next` the path of the next page).
#[derive(Debug, Deserialize)]
struct Page<T> {
    #[serde(
        default = "Vec::new",
        alias = "servers",
        alias = "flavors",
        alias = "images"
    )]
    items: Vec<T>,
    #[serde(default, alias = "servers_links", alias = "flavors_links")]
    links: Vec<Link>,
    #[serde(default)]
    next: Option<String>,
}

impl<T> Page<T> {
    /// The `marker` of the next page: Nova links one when a page is full (its size the `limit`
    /// asked for, capped by the cloud's `max_limit`; Compute API reference, "Paginated
    /// collections"). `None` on the last page.
    fn next_marker(&self) -> Option<String> {
        match self.links.iter().find(|l| l.rel == "next") {
            Some(l) => marker_of(&l.href),
            None => self.next.as_deref().and_then(marker_of),
        }
    }
}

/// The `marker` query parameter of a link, absolute (Nova) or relative (Glance's `next`).
fn marker_of(href: &str) -> Option<String> {
    let base = reqwest::Url::parse("http://base/").expect("a URL");
    let url = base.join(href).ok()?;
    let marker = url.query_pairs().find(|(k, _)| k == "marker")?.1;
    Some(marker.into_owned()).filter(|m| !m.is_empty())
}

/// A flavor or an image: its id and name.
#[derive(Debug, Deserialize)]
pub(super) struct Named {
    pub(super) id: String,
    #[serde(default)]
    pub(super) name: Option<String>,
}

/// The ids of those of `listed` named exactly `name`: one is the one meant (as openstacksdk's
/// `Resource.find` chooses, `_get_one_match`: several matches are an error, not a choice).
pub(super) fn named(listed: Vec<Named>, name: &str) -> Vec<String> {
    listed
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .map(|n| n.id)
        .collect()
}

/// One resource (a server, a floating IP), under its resource's name.
#[derive(Debug, Deserialize)]
pub(super) struct One<T> {
    #[serde(alias = "server", alias = "floatingip")]
    pub(super) item: T,
}

/// A whole list (Neutron's ports, floating IPs and networks), under its resource's name.
#[derive(Debug, Deserialize)]
pub(super) struct List<T> {
    #[serde(alias = "ports", alias = "floatingips", alias = "networks")]
    pub(super) items: Vec<T>,
}

/// A server as Nova shows it (the fields weft reads).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Server {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `BUILD`, `ACTIVE`, `ERROR`, `SHUTOFF`, `DELETED`...
    #[serde(default)]
    pub status: Option<String>,
    /// Its metadata (weft's marks among them).
    #[serde(default)]
    pub metadata: BTreeMap<String, Value>,
    /// Its addresses by network.
    #[serde(default)]
    pub addresses: BTreeMap<String, Vec<ServerAddress>>,
    /// The address the cloud says it is reached at, if any.
    #[serde(default, rename = "accessIPv4")]
    pub access_ipv4: Option<String>,
    /// When it was made (ISO 8601).
    #[serde(default)]
    pub created: Option<String>,
    /// How far a build has come, in percent.
    #[serde(default)]
    pub progress: Option<u64>,
    /// Why it is in `ERROR`.
    #[serde(default)]
    pub fault: Option<Fault>,
}

/// One address of a server.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServerAddress {
    /// The address.
    pub addr: String,
    /// 4 or 6.
    #[serde(default)]
    pub version: u8,
    /// `fixed` or `floating` (absent on Rackspace).
    #[serde(default, rename = "OS-EXT-IPS:type")]
    pub kind: Option<String>,
}

/// Why a server is in `ERROR`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Fault {
    /// Nova's message.
    #[serde(default)]
    pub message: Option<String>,
}

impl Server {
    /// A metadata value as text.
    pub fn meta(&self, key: &str) -> Option<String> {
        match self.metadata.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    /// The server's (access, bind) IPv4 addresses, when it has one: bind is the first fixed
    /// address (or, untyped as on Rackspace, the one on network `private`); access is
    /// `accessIPv4`, else a floating address, else the one on network `public`, else bind.
    pub fn addresses(&self) -> Option<(String, String)> {
        let v4 = || {
            self.addresses
                .iter()
                .flat_map(|(net, list)| list.iter().map(move |a| (net, a)))
                .filter(|(_, a)| a.version == 4)
        };
        let typed = |kind: &str| {
            v4().find(|(_, a)| a.kind.as_deref() == Some(kind))
                .map(|(_, a)| a.addr.clone())
        };
        let on = |name: &str| {
            v4().find(|(n, a)| *n == name && a.kind.is_none())
                .map(|(_, a)| a.addr.clone())
        };
        let bind = typed("fixed").or_else(|| on("private")).or_else(|| {
            v4().find(|(_, a)| a.kind.is_none())
                .map(|(_, a)| a.addr.clone())
        })?;
        let access = self
            .access_ipv4
            .clone()
            .filter(|a| !a.is_empty())
            .or_else(|| typed("floating"))
            .or_else(|| on("public"))
            .unwrap_or_else(|| bind.clone());
        Some((access, bind))
    }
}

/// Compares two OpenSSH public keys by type and key data (comments differ).
fn same_key(a: &str, b: &str) -> bool {
    let parts = |k: &str| k.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    parts(a) == parts(b)
}

/// A path segment with what is not unreserved percent-encoded.
pub(super) fn path_part(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `s` with the characters regular expressions treat specially escaped.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$-#&~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_the_api_code_message_and_retry_after() {
        let body = json!({"overLimit": {"code": 413, "message": "slow down", "retryAfter": "7"}});
        let a = Answer::for_tests(413, body.to_string());
        let e = nova_error("nova", &a);
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("overLimit", "slow down")
        );
        assert_eq!(e.retry_after, Some(Duration::from_secs(7)));
        assert!(e.retryable);
        let body = json!({"error": {"code": 401, "title": "Unauthorized", "message": "no"}});
        let (code, message) = identity::error_parts(&body);
        assert_eq!(
            (code.as_deref(), message.as_str()),
            (Some("Unauthorized"), "no")
        );
        assert_eq!(identity::error_parts(&json!("plain text")).1, "plain text");
        let body = json!({"conflictingRequest": {"code": 409, "message": "busy"}});
        let e = nova_error("neutron", &Answer::for_tests(409, body.to_string()));
        assert_eq!(e.cloud, "neutron");
        assert!(!e.retryable);
    }

    #[test]
    fn the_next_marker_comes_from_the_next_link() {
        let page = |v: Value| serde_json::from_value::<Page<Named>>(v).unwrap();
        let next = |v: Value| page(v).next_marker();
        let l = json!({"servers": [], "servers_links": [{"rel": "next",
            "href": "http://nova:8774/v2.1/servers/detail?limit=2&marker=ab-12"}]});
        assert_eq!(next(l).as_deref(), Some("ab-12"));
        assert_eq!(next(json!({"flavors": []})), None);
        let prev = json!({"flavors_links": [{"rel": "previous", "href": "http://n/x?marker=z"}]});
        assert_eq!(next(prev), None);
        let glance = json!({"images": [], "next": "/v2/images?name=a&marker=i-9"});
        assert_eq!(next(glance).as_deref(), Some("i-9"));
        let listed = |v: Value| serde_json::from_value::<Vec<Named>>(v).unwrap();
        let two = json!([{"id": "a", "name": "x"}, {"id": "b", "name": "x"}, {"id": "c"}]);
        assert_eq!(named(listed(two.clone()), "x"), ["a", "b"]);
        assert!(named(listed(two), "X").is_empty());
        let one = json!([{"id": "a", "name": "x"}, {"id": "b", "name": "xy"}]);
        assert_eq!(named(listed(one), "x"), ["a"]);
    }

    #[test]
    fn names_are_escaped_for_nova_regular_expressions() {
        assert_eq!(regex_escape("web-1.example"), "web\\-1\\.example");
        assert_eq!(path_part("a b/c"), "a%20b%2Fc");
        assert!(same_key("ssh-ed25519 AAAA x@y", "ssh-ed25519 AAAA"));
        assert!(!same_key("ssh-ed25519 AAAA", "ssh-ed25519 BBBB"));
    }
}
