//! Profiles: where the CLI finds the server, tenant, user and API key.
//!
//! The file is `$WEFT_CLI_CONFIG`, else `$XDG_CONFIG_HOME/weft/config.toml`, else
//! `~/.config/weft/config.toml`:
//!
//! ```toml
//! [profiles.default]
//! server = "http://127.0.0.1:55054"
//! tenant = "default"
//! user = "admin"
//! api_key = "..."        # only with `weft server --auth apikey`
//! ca_cert = "/path/ca.pem" # a server whose certificate is signed by a CA of its own
//! ```
//!
//! A flag beats its `WEFT_*` variable, which beats the profile, which beats the defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};

pub(crate) const DEFAULT_PROFILE: &str = "default";
pub(crate) const DEFAULT_SERVER: &str = "http://127.0.0.1:55054";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Profile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The CA file the server's certificate must chain to (an https:// server of its own CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFile {
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// The config file's path.
pub(crate) fn path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("WEFT_CLI_CONFIG").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|p| !p.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .ok_or_else(|| anyhow!("HOME is not set: set WEFT_CLI_CONFIG to a config file"))?;
            PathBuf::from(home).join(".config")
        }
    };
    Ok(base.join("weft").join("config.toml"))
}

/// Where `weft up` notes the data dir of each API address it serves (`up.toml` beside the
/// config file), so that commands that need the provisioner's files (`cluster ssh` to a Docker
/// node: its key seed) find them without `--data-dir`.
fn ups_path() -> anyhow::Result<PathBuf> {
    let config = path()?;
    Ok(config.with_file_name("up.toml"))
}

/// Notes that `api` is served by a `weft up` on `data_dir` (an absolute path).
pub(crate) fn remember_up(api: &str, data_dir: &std::path::Path) -> anyhow::Result<()> {
    let p = ups_path()?;
    let mut ups: BTreeMap<String, PathBuf> = std::fs::read_to_string(&p)
        .ok()
        .and_then(|t| toml::from_str(&t).ok())
        .unwrap_or_default();
    ups.insert(
        api.trim_end_matches('/').to_string(),
        data_dir.to_path_buf(),
    );
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Through a rename: two `weft up`s starting at once never leave half a file.
    let tmp = p.with_extension(format!("toml.{}", std::process::id()));
    write_private(&tmp, &toml::to_string(&ups)?)
        .and_then(|()| std::fs::rename(&tmp, &p))
        .with_context(|| format!("writing {}", p.display()))
}

/// The data dir of the `weft up` that serves `api`, if one noted it and it still holds a store.
pub(crate) fn up_data_dir(api: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(ups_path().ok()?).ok()?;
    let ups: BTreeMap<String, PathBuf> = toml::from_str(&text).ok()?;
    ups.get(api.trim_end_matches('/'))
        .filter(|d| d.join("weft.db").exists())
        .cloned()
}

pub(crate) fn load() -> anyhow::Result<ConfigFile> {
    let p = path()?;
    match std::fs::read_to_string(&p) {
        Ok(text) => toml::from_str(&text).with_context(|| format!("config file {}", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

pub(crate) fn save(cfg: &ConfigFile) -> anyhow::Result<PathBuf> {
    let p = path()?;
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = toml::to_string_pretty(cfg)?;
    write_private(&p, &text).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// The file may hold an API key: readable by its owner only.
fn write_private(p: &std::path::Path, text: &str) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(p)?;
        f.write_all(text.as_bytes())
    }
    #[cfg(not(unix))]
    {
        std::fs::write(p, text)
    }
}
