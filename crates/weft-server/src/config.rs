//! Server configuration in two stages: [`RawConfig`] (every key optional, as read from the TOML file,
//! the `WEFT_*` environment and the command line) and [`Settings`] (validated, with defaults), which
//! is all the rest of the server sees. A bad value fails here, naming its key, before any port binds.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// How callers prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Trust the `Coopr-UserID` / `Coopr-TenantID` headers, as Coopr did.
    None,
    /// Require a valid `Coopr-ApiKey`; the key decides tenant, user and role.
    ApiKey,
}

/// Every configuration key, all optional. Field names are the TOML keys; the environment variable
/// of
/// a key is `WEFT_` + its upper-case name (`WEFT_INTERNAL_PORT`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Directory for the SQLite database and plugin resources. Default `./.weft`.
    pub data_dir: Option<PathBuf>,
    /// External API port. Default 55054.
    pub port: Option<u16>,
    /// Provisioner API port. Default 55055.
    pub internal_port: Option<u16>,
    /// Address both listeners bind to. Default 127.0.0.1.
    pub bind: Option<String>,
    /// `sqlite://PATH` or `postgres://...`. Default: SQLite at `<data_dir>/weft.db`.
    pub database: Option<String>,
    /// `none` or `apikey`. Default `none`.
    pub auth: Option<String>,
    /// Largest accepted request body in bytes (except plugin resources). Default 1 MiB.
    pub body_limit: Option<u64>,
    /// Largest accepted plugin resource upload in bytes. Default 100 MiB.
    pub resource_body_limit: Option<u64>,
    /// Seconds a worker may hold a task before the janitor fails it. Default 1800.
    pub task_timeout: Option<u64>,
    /// Executions per task before its job fails (Coopr's `server.max.action.retries`). Default 3.
    pub max_action_retries: Option<u32>,
    /// Seconds between janitor runs (expired task leases, expired cluster leases). Default 10.
    pub janitor_interval: Option<u64>,
    /// Seconds without a heartbeat after which a provisioner is dropped. Default 120.
    pub provisioner_timeout: Option<u64>,
    /// URL that gets an HTTP POST with the cluster and job JSON at the start, success and failure
    /// of every job. Unset: none.
    pub callback_url: Option<String>,
    /// Local command run at the start, success and failure of every job, with the cluster and job
    /// JSON on its standard input and WEFT_EVENT set. Unset: none.
    pub callback_command: Option<String>,
    /// Seconds a callback may take before it is abandoned. Default 10.
    pub callback_timeout: Option<u64>,
    /// The most nodes a cluster may have (Coopr's `server.max.cluster.size`). Default 10000, at
    /// most 100000.
    pub max_cluster_size: Option<u64>,
    /// The provisioner token file: one token per line; provisioners present one on the internal
    /// port, and the server presents the first to provisioners. Read again when it changes, so
    /// tokens rotate without a restart. Default with `auth = apikey`:
    /// `<data_dir>/provisioner.token`, made with a random token when missing. Unset with
    /// `auth = none`: the internal port checks nothing (bind it to a private network).
    pub provisioner_token_file: Option<PathBuf>,
    /// Seconds between drift checks of every active cluster of every tenant, run by the janitor
    /// (`POST /v2/clusters/{id}/check`; templates with `autoReplace` get missing nodes replaced).
    /// Default 0: off.
    pub check_interval: Option<u64>,
    /// How many nodes of one cluster the janitor replaces by itself per hour. Default 2.
    pub auto_replace_per_hour: Option<u32>,
    /// Days the audit trail keeps a record; older ones are removed by the janitor (the only way
    /// records leave). Default 400; 0 keeps them for ever.
    pub audit_retention_days: Option<u64>,
    /// Hours the event stream's backlog keeps an event (`GET /v2/events` resumes from it);
    /// older ones are removed by the janitor. Default 72; 0 keeps them for ever.
    pub event_retention_hours: Option<u64>,
    /// Whether tenants' webhook URLs may point at loopback and link-local addresses (a receiver
    /// on this machine; tests). Default false: such URLs are refused (SSRF).
    pub webhooks_allow_loopback: Option<bool>,
    /// Hours a webhook delivery is retried from its first attempt before it is marked failed.
    /// Default 25.
    pub webhook_retry_hours: Option<u64>,
    /// The first retry's back-off ceiling in milliseconds (doubled per retry, up to an hour,
    /// with full jitter). Default 1000.
    pub webhook_retry_base_ms: Option<u64>,
    /// PEM certificate chain both listeners serve over TLS (with `tls_key`); read again when the
    /// file changes. Unset: plain HTTP, allowed only on a loopback `bind` or with `insecure_http`.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: the internal port then requires a client certificate signed by one
    /// (mutual TLS with provisioners). Needs `tls_cert`.
    pub client_ca: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback `bind` (every key, token and secret in clear on the
    /// network). Default false.
    pub insecure_http: Option<bool>,
    /// The master key of the secrets sealed in the store (64 hex digits per line, mode 0600),
    /// made on first start when the store has no sealed secrets yet. `WEFT_SECRETS_KEY` (the
    /// key itself) replaces the file. Default `<data_dir>/secrets.key`.
    pub secrets_key_file: Option<PathBuf>,
}

/// The keys and their environment variables, for messages and `--help`.
pub const KEYS: &[(&str, &str)] = &[
    ("data_dir", "WEFT_DATA_DIR"),
    ("port", "WEFT_PORT"),
    ("internal_port", "WEFT_INTERNAL_PORT"),
    ("bind", "WEFT_BIND"),
    ("database", "WEFT_DATABASE"),
    ("auth", "WEFT_AUTH"),
    ("body_limit", "WEFT_BODY_LIMIT"),
    ("resource_body_limit", "WEFT_RESOURCE_BODY_LIMIT"),
    ("task_timeout", "WEFT_TASK_TIMEOUT"),
    ("max_action_retries", "WEFT_MAX_ACTION_RETRIES"),
    ("janitor_interval", "WEFT_JANITOR_INTERVAL"),
    ("provisioner_timeout", "WEFT_PROVISIONER_TIMEOUT"),
    ("callback_url", "WEFT_CALLBACK_URL"),
    ("callback_command", "WEFT_CALLBACK_COMMAND"),
    ("callback_timeout", "WEFT_CALLBACK_TIMEOUT"),
    ("max_cluster_size", "WEFT_MAX_CLUSTER_SIZE"),
    ("provisioner_token_file", "WEFT_PROVISIONER_TOKEN_FILE"),
    ("check_interval", "WEFT_CHECK_INTERVAL"),
    ("auto_replace_per_hour", "WEFT_AUTO_REPLACE_PER_HOUR"),
    ("audit_retention_days", "WEFT_AUDIT_RETENTION_DAYS"),
    ("event_retention_hours", "WEFT_EVENT_RETENTION_HOURS"),
    ("webhooks_allow_loopback", "WEFT_WEBHOOKS_ALLOW_LOOPBACK"),
    ("webhook_retry_hours", "WEFT_WEBHOOK_RETRY_HOURS"),
    ("webhook_retry_base_ms", "WEFT_WEBHOOK_RETRY_BASE_MS"),
    ("tls_cert", "WEFT_TLS_CERT"),
    ("tls_key", "WEFT_TLS_KEY"),
    ("client_ca", "WEFT_CLIENT_CA"),
    ("insecure_http", "WEFT_INSECURE_HTTP"),
    ("secrets_key_file", "WEFT_SECRETS_KEY_FILE"),
];

/// A configuration error, naming the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read or parsed.
    #[error("config file {path}: {message}")]
    File {
        /// The file as given.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A key has a value that is not allowed.
    #[error("config key `{key}`: {message}")]
    Key {
        /// The key's TOML name.
        key: &'static str,
        /// What is wrong with the value, and what is allowed.
        message: String,
    },
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Directory for the SQLite database and plugin resources (`data_dir`).
    pub data_dir: PathBuf,
    /// External API port (`port`).
    pub port: u16,
    /// Provisioner API port (`internal_port`).
    pub internal_port: u16,
    /// Address both listeners bind to (`bind`).
    pub bind: IpAddr,
    /// The store's URL, `sqlite://PATH` or `postgres://...` (key `database`; default SQLite at
    /// `<data_dir>/weft.db`).
    pub database_url: String,
    /// How callers prove who they are (`auth`).
    pub auth: AuthMode,
    /// Largest accepted request body in bytes, plugin resources aside (`body_limit`).
    pub body_limit: usize,
    /// Largest accepted plugin resource upload in bytes (`resource_body_limit`).
    pub resource_body_limit: usize,
    /// Milliseconds a worker may hold a task before the janitor fails it (`task_timeout`, given in
    /// seconds).
    pub task_timeout_ms: i64,
    /// Executions per task before its job fails (`max_action_retries`).
    pub max_action_retries: u32,
    /// Milliseconds between janitor runs (`janitor_interval`, given in seconds).
    pub janitor_interval_ms: u64,
    /// Milliseconds without a heartbeat after which a provisioner is dropped
    /// (`provisioner_timeout`, given in seconds).
    pub provisioner_timeout_ms: i64,
    /// URL that gets a POST at the start, success and failure of every job; `None`: no such
    /// callback.
    pub callback_url: Option<String>,
    /// Local command run at the start, success and failure of every job; `None`: no such callback.
    pub callback_command: Option<String>,
    /// Milliseconds a callback may take before it is abandoned (`callback_timeout`, given in
    /// seconds).
    pub callback_timeout_ms: u64,
    /// The most nodes a cluster may have (`max_cluster_size`), from 1 to 100000.
    pub max_cluster_size: u64,
    /// Where provisioner tokens are read (`None`: the internal port checks no token).
    pub provisioner_token_file: Option<PathBuf>,
    /// TLS on both listeners (unset: plain HTTP).
    pub tls: Option<TlsSettings>,
    /// The master key of the secrets sealed in the store.
    pub secrets_key: weft_engine::seal::KeySource,
    /// Drift checks by the janitor (0: off).
    pub check_interval_ms: u64,
    /// How many nodes of one cluster the janitor replaces by itself per hour
    /// (`auto_replace_per_hour`).
    pub auto_replace_per_hour: u32,
    /// How long the audit trail keeps a record (0: for ever).
    pub audit_retention_ms: i64,
    /// How long the event backlog keeps an event (0: for ever).
    pub event_retention_ms: i64,
    /// Webhook delivery: loopback receivers allowed or not, and the retry schedule
    /// (`webhooks_allow_loopback`, `webhook_retry_hours`, `webhook_retry_base_ms`).
    pub webhooks: weft_engine::WebhookSettings,
}

/// The listeners' certificate files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain both listeners serve (`tls_cert`).
    pub cert: PathBuf,
    /// PEM private key of `cert` (`tls_key`).
    pub key: PathBuf,
    /// The internal port requires client certificates signed by these CAs.
    pub client_ca: Option<PathBuf>,
}

/// How often a provisioner sends its heartbeat (weft-provisioner's default), in milliseconds.
const HEARTBEAT_MS: i64 = 5_000;

impl Settings {
    /// Values that are valid but probably not meant: each a sentence for the log at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.provisioner_timeout_ms < 3 * HEARTBEAT_MS {
            out.push(format!(
                "provisioner_timeout ({} s) is shorter than three provisioner heartbeats ({} s): a \
                 provisioner that is only slow will be dropped and the tasks it runs given to others",
                self.provisioner_timeout_ms / 1000,
                3 * HEARTBEAT_MS / 1000
            ));
        }
        out
    }

    /// The settings the engine reads.
    pub fn engine(&self) -> weft_engine::EngineSettings {
        weft_engine::EngineSettings {
            task_timeout_ms: self.task_timeout_ms,
            max_action_retries: self.max_action_retries,
            janitor_interval_ms: self.janitor_interval_ms,
            provisioner_timeout_ms: self.provisioner_timeout_ms,
            callback_url: self.callback_url.clone(),
            callback_command: self.callback_command.clone(),
            callback_timeout_ms: self.callback_timeout_ms,
            check_interval_ms: self.check_interval_ms,
            auto_replace_per_hour: self.auto_replace_per_hour,
            max_cluster_size: self.max_cluster_size,
            audit_retention_ms: self.audit_retention_ms,
            event_retention_ms: self.event_retention_ms,
            webhooks: self.webhooks.clone(),
        }
    }
}

impl RawConfig {
    /// The webhook settings, checked.
    fn webhook_settings(&self) -> Result<weft_engine::WebhookSettings, ConfigError> {
        let d = weft_engine::WebhookSettings::default();
        let hours = self.webhook_retry_hours.unwrap_or(25);
        if !(1..=24 * 31).contains(&hours) {
            return Err(key_error("webhook_retry_hours", "must be 1 to 744 hours"));
        }
        let base = self.webhook_retry_base_ms.unwrap_or(d.retry_base_ms);
        if !(1..=d.retry_max_ms).contains(&base) {
            return Err(key_error(
                "webhook_retry_base_ms",
                "must be 1 to 3600000 milliseconds",
            ));
        }
        Ok(weft_engine::WebhookSettings {
            allow_loopback: self.webhooks_allow_loopback.unwrap_or(false),
            retry_base_ms: base,
            retry_window_ms: hours as i64 * 3_600_000,
            ..d
        })
    }

    /// Reads a TOML file. Unknown keys and wrong types are errors naming the key.
    pub fn from_file(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        serde_path_to_error::deserialize(toml::Deserializer::new(&text)).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            let message = match key.as_str() {
                "." | "" => inner.message().to_string(),
                _ => format!("key `{key}`: {}", inner.message()),
            };
            ConfigError::File {
                path: path.to_owned(),
                message,
            }
        })
    }

    /// Keys set in `over` replace those in `self`.
    pub fn overlay(self, over: RawConfig) -> RawConfig {
        RawConfig {
            data_dir: over.data_dir.or(self.data_dir),
            port: over.port.or(self.port),
            internal_port: over.internal_port.or(self.internal_port),
            bind: over.bind.or(self.bind),
            database: over.database.or(self.database),
            auth: over.auth.or(self.auth),
            body_limit: over.body_limit.or(self.body_limit),
            resource_body_limit: over.resource_body_limit.or(self.resource_body_limit),
            task_timeout: over.task_timeout.or(self.task_timeout),
            max_action_retries: over.max_action_retries.or(self.max_action_retries),
            janitor_interval: over.janitor_interval.or(self.janitor_interval),
            provisioner_timeout: over.provisioner_timeout.or(self.provisioner_timeout),
            callback_url: over.callback_url.or(self.callback_url),
            callback_command: over.callback_command.or(self.callback_command),
            callback_timeout: over.callback_timeout.or(self.callback_timeout),
            max_cluster_size: over.max_cluster_size.or(self.max_cluster_size),
            provisioner_token_file: over.provisioner_token_file.or(self.provisioner_token_file),
            check_interval: over.check_interval.or(self.check_interval),
            auto_replace_per_hour: over.auto_replace_per_hour.or(self.auto_replace_per_hour),
            audit_retention_days: over.audit_retention_days.or(self.audit_retention_days),
            event_retention_hours: over.event_retention_hours.or(self.event_retention_hours),
            webhooks_allow_loopback: over
                .webhooks_allow_loopback
                .or(self.webhooks_allow_loopback),
            webhook_retry_hours: over.webhook_retry_hours.or(self.webhook_retry_hours),
            webhook_retry_base_ms: over.webhook_retry_base_ms.or(self.webhook_retry_base_ms),
            tls_cert: over.tls_cert.or(self.tls_cert),
            tls_key: over.tls_key.or(self.tls_key),
            client_ca: over.client_ca.or(self.client_ca),
            insecure_http: over.insecure_http.or(self.insecure_http),
            secrets_key_file: over.secrets_key_file.or(self.secrets_key_file),
        }
    }

    /// Validates and fills in defaults.
    pub fn resolve(self) -> Result<Settings, ConfigError> {
        let webhooks = self.webhook_settings()?;
        let data_dir = absolute_data_dir(self.data_dir.clone())?;
        let (bind, port, internal_port) = self.addresses()?;
        let tls = self.tls(bind)?;
        let database_url = database_url(self.database.clone(), &data_dir)?;
        let auth = auth_mode(self.auth.as_deref())?;
        let task_timeout = self.task_timeout()?;
        let max_action_retries = self.max_action_retries()?;
        let janitor_interval = seconds("janitor_interval", self.janitor_interval, 10)?;
        let provisioner_timeout = seconds("provisioner_timeout", self.provisioner_timeout, 120)?;
        let callback_timeout = seconds("callback_timeout", self.callback_timeout, 10)?;
        let max_cluster_size = self.max_cluster_size()?;
        self.check_callback_url()?;
        let provisioner_token_file =
            provisioner_token_file(self.provisioner_token_file.clone(), auth, &data_dir);
        let check_interval = self.check_interval()?;
        let event_retention_hours = self.event_retention_hours()?;
        let audit_retention_days = self.audit_retention_days()?;
        let secrets_key = secrets_key(self.secrets_key_file.clone(), &data_dir);
        Ok(Settings {
            tls,
            secrets_key,
            check_interval_ms: check_interval * 1000,
            auto_replace_per_hour: self.auto_replace_per_hour.unwrap_or(2),
            audit_retention_ms: audit_retention_days as i64 * 24 * 3600 * 1000,
            event_retention_ms: event_retention_hours as i64 * 3600 * 1000,
            webhooks,
            provisioner_token_file,
            janitor_interval_ms: janitor_interval * 1000,
            provisioner_timeout_ms: provisioner_timeout as i64 * 1000,
            callback_url: non_blank(self.callback_url),
            callback_command: non_blank(self.callback_command),
            callback_timeout_ms: callback_timeout * 1000,
            max_cluster_size,
            task_timeout_ms: task_timeout as i64 * 1000,
            max_action_retries,
            body_limit: byte_limit("body_limit", self.body_limit, 1 << 20)?,
            resource_body_limit: byte_limit(
                "resource_body_limit",
                self.resource_body_limit,
                100 << 20,
            )?,
            data_dir,
            port,
            internal_port,
            bind,
            database_url,
            auth,
        })
    }

    /// Seconds a worker may hold a task: 1 to 604800 (default 1800).
    fn task_timeout(&self) -> Result<u64, ConfigError> {
        let task_timeout = self.task_timeout.unwrap_or(1800);
        if task_timeout == 0 || task_timeout > 7 * 24 * 3600 {
            return Err(key_error("task_timeout", "must be 1 to 604800 seconds"));
        }
        Ok(task_timeout)
    }

    /// How many times an action runs before its task fails: at least 1 (default 3).
    fn max_action_retries(&self) -> Result<u32, ConfigError> {
        let max_action_retries = self.max_action_retries.unwrap_or(3);
        if max_action_retries == 0 {
            return Err(key_error("max_action_retries", "must be at least 1"));
        }
        Ok(max_action_retries)
    }

    /// The largest cluster a request may ask for: 1 to `LARGEST_CLUSTER`.
    fn max_cluster_size(&self) -> Result<u64, ConfigError> {
        let max_cluster_size = self
            .max_cluster_size
            .unwrap_or(weft_model::MAX_CLUSTER_SIZE);
        if !(1..=weft_model::LARGEST_CLUSTER).contains(&max_cluster_size) {
            let message = format!("must be 1 to {}", weft_model::LARGEST_CLUSTER);
            return Err(key_error("max_cluster_size", &message));
        }
        Ok(max_cluster_size)
    }

    /// The callback URL, if set, is an http:// or https:// URL.
    fn check_callback_url(&self) -> Result<(), ConfigError> {
        if let Some(u) = &self.callback_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                let message = format!("\"{u}\" is not an http:// or https:// URL");
                return Err(key_error("callback_url", &message));
            }
        }
        Ok(())
    }

    /// Seconds between drift checks: 0 (off, the default) to a week.
    fn check_interval(&self) -> Result<u64, ConfigError> {
        let check_interval = self.check_interval.unwrap_or(0);
        if check_interval > 7 * 24 * 3600 {
            return Err(key_error(
                "check_interval",
                "must be 0 (off) to 604800 seconds",
            ));
        }
        Ok(check_interval)
    }

    /// How long the event backlog keeps an event, in hours: 0 (for ever) to 100 years (default 72).
    fn event_retention_hours(&self) -> Result<u64, ConfigError> {
        let event_retention_hours = self.event_retention_hours.unwrap_or(72);
        if event_retention_hours > 100 * 366 * 24 {
            return Err(key_error(
                "event_retention_hours",
                "must be 0 (keep for ever) to 878400 hours",
            ));
        }
        Ok(event_retention_hours)
    }

    /// How long the audit trail keeps a record, in days: 0 (for ever) to 100 years (default 400).
    fn audit_retention_days(&self) -> Result<u64, ConfigError> {
        let audit_retention_days = self.audit_retention_days.unwrap_or(400);
        if audit_retention_days > 100 * 366 {
            return Err(key_error(
                "audit_retention_days",
                "must be 0 (keep for ever) to 36600 days",
            ));
        }
        Ok(audit_retention_days)
    }

    /// The listeners' TLS files, checked: both or neither of cert and key, a client CA only with
    /// them, and plain HTTP beyond loopback only when asked for by name.
    fn tls(&self, bind: IpAddr) -> Result<Option<TlsSettings>, ConfigError> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.client_ca.clone(),
            }),
            (Some(_), None) => return Err(key_error("tls_key", "is needed with tls_cert")),
            (None, Some(_)) => return Err(key_error("tls_cert", "is needed with tls_key")),
            (None, None) => None,
        };
        if tls.is_none() && self.client_ca.is_some() {
            return Err(key_error(
                "client_ca",
                "needs tls_cert and tls_key (client certificates are checked over TLS)",
            ));
        }
        if tls.is_none() && !bind.is_loopback() && !self.insecure_http.unwrap_or(false) {
            let message = format!(
                "{bind} is not a loopback address, and without TLS every API key, token and \
                 cloud secret would cross the network in clear: give a certificate with \
                 --tls-cert FILE --tls-key FILE (or the keys tls_cert and tls_key), or let \
                 `weft up --tls` make a local CA; --insecure-http serves plain HTTP anyway"
            );
            return Err(ConfigError::Key {
                key: "bind",
                message,
            });
        }
        Ok(tls)
    }

    /// The address both listeners bind, the external port and the internal one (which differ).
    fn addresses(&self) -> Result<(IpAddr, u16, u16), ConfigError> {
        let bind_text = self.bind.clone().unwrap_or_else(|| "127.0.0.1".into());
        let bind: IpAddr = bind_text.trim().parse().map_err(|_| ConfigError::Key {
            key: "bind",
            message: format!("\"{bind_text}\" is not an IP address"),
        })?;
        let port = self.port.unwrap_or(55054);
        let internal_port = self.internal_port.unwrap_or(55055);
        if port != 0 && port == internal_port {
            let message = format!("must differ from port ({port})");
            return Err(key_error("internal_port", &message));
        }
        Ok((bind, port, internal_port))
    }
}

fn key_error(key: &'static str, message: &str) -> ConfigError {
    ConfigError::Key {
        key,
        message: message.to_string(),
    }
}

/// The data directory, absolute, so that nothing below depends on the working directory of
/// whoever uses it. Default `./.weft`.
/// Where the secrets' master key comes from: `WEFT_SECRETS_KEY`, else the key file.
/// A value that is set and not blank.
fn non_blank(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

/// Where provisioner tokens are read: the file given, else with API keys `provisioner.token` in
/// the data directory, else none (the internal port checks no token).
fn provisioner_token_file(
    file: Option<PathBuf>,
    auth: AuthMode,
    data_dir: &Path,
) -> Option<PathBuf> {
    match (file, auth) {
        (Some(p), _) => Some(p),
        (None, AuthMode::ApiKey) => Some(data_dir.join("provisioner.token")),
        (None, AuthMode::None) => None,
    }
}

fn secrets_key(file: Option<PathBuf>, data_dir: &Path) -> weft_engine::seal::KeySource {
    use weft_engine::seal::{KeySource, KEY_ENV};
    match std::env::var(KEY_ENV).ok().filter(|k| !k.trim().is_empty()) {
        Some(key) => KeySource::Given(key),
        None => KeySource::File(file.unwrap_or_else(|| data_dir.join("secrets.key"))),
    }
}

fn absolute_data_dir(dir: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
    let dir = dir.unwrap_or_else(|| PathBuf::from(".weft"));
    std::path::absolute(&dir).map_err(|e| ConfigError::Key {
        key: "data_dir",
        message: format!("{}: {e}", dir.display()),
    })
}

/// A `sqlite:` or `postgres://` URL; default SQLite in the data directory.
fn database_url(database: Option<String>, data_dir: &Path) -> Result<String, ConfigError> {
    match database {
        Some(d)
            if d.starts_with("sqlite:")
                || d.starts_with("postgres://")
                || d.starts_with("postgresql://") =>
        {
            Ok(d)
        }
        Some(d) => {
            let message = format!("\"{d}\" is not a sqlite:// or postgres:// URL");
            Err(key_error("database", &message))
        }
        None => Ok(format!("sqlite://{}", data_dir.join("weft.db").display())),
    }
}

fn auth_mode(auth: Option<&str>) -> Result<AuthMode, ConfigError> {
    match auth.map(str::trim) {
        None | Some("none") => Ok(AuthMode::None),
        Some("apikey") => Ok(AuthMode::ApiKey),
        Some(other) => {
            let message = format!("\"{other}\" is not one of none, apikey");
            Err(key_error("auth", &message))
        }
    }
}

/// A size in bytes: more than 0.
fn byte_limit(key: &'static str, v: Option<u64>, default: u64) -> Result<usize, ConfigError> {
    match v.unwrap_or(default) {
        0 => Err(key_error(key, "must be greater than 0")),
        v => usize::try_from(v).map_err(|_| key_error(key, "is too large")),
    }
}

/// A duration in seconds: 1 to a week.
fn seconds(key: &'static str, v: Option<u64>, default: u64) -> Result<u64, ConfigError> {
    match v.unwrap_or(default) {
        0 => Err(key_error(key, "must be greater than 0")),
        n if n > 7 * 24 * 3600 => Err(key_error(key, "must be at most 604800 seconds")),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let s = RawConfig::default().resolve().unwrap();
        assert_eq!((s.port, s.internal_port), (55054, 55055));
        assert_eq!(s.auth, AuthMode::None);
        assert!(
            s.database_url.ends_with(".weft/weft.db"),
            "{}",
            s.database_url
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let e = RawConfig {
            auth: Some("magic".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(e.to_string().contains("`auth`"), "{e}");
        let e = RawConfig {
            bind: Some("nowhere".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(e.to_string().contains("`bind`"), "{e}");
        let e: Result<RawConfig, _> = toml::from_str("port = \"x\"");
        assert!(e.unwrap_err().message().contains("invalid type"));
        let e: Result<RawConfig, _> = toml::from_str("colour = 1");
        assert!(e.unwrap_err().message().contains("colour"));
    }

    #[test]
    fn a_provisioner_timeout_within_three_heartbeats_is_warned_about() {
        let quiet = RawConfig::default().resolve().unwrap();
        assert!(quiet.warnings().is_empty());
        let short = RawConfig {
            provisioner_timeout: Some(10),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        let w = short.warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("provisioner_timeout (10 s)"), "{w:?}");
    }

    #[test]
    fn later_sources_win() {
        let file = RawConfig {
            port: Some(1),
            internal_port: Some(2),
            ..Default::default()
        };
        let flags = RawConfig {
            port: Some(3),
            ..Default::default()
        };
        let s = file.overlay(flags).resolve().unwrap();
        assert_eq!((s.port, s.internal_port), (3, 2));
    }
}
