//! Plugin resources on the provisioner (contract §4.9): the server's tenant PUT names the live
//! version of each resource; [`sync`] downloads the missing ones and activates them.
//!
//! Layout under the resources root: `<tenant>/<ptype>/<plugin>/<rtype>/.versions/<name>/<version>/<name>`
//! holds a downloaded version (a file with its permissions, or an unpacked tar.gz directory), and
//! `<tenant>/<ptype>/<plugin>/<rtype>/<name>` is a symlink to the live one, replaced atomically. A
//! resource no longer live loses its symlink. Plugins find resources with [`live_path`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use weft_client::{Client, PluginKind};

/// One path component from the server: a name, nothing that walks the tree.
fn component(s: &str) -> Option<&str> {
    (!s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0')).then_some(s)
}

/// Where the live version of a resource is (a file or a directory), if one is active.
pub fn live_path(
    root: &Path,
    tenant: &str,
    ptype: &str,
    plugin: &str,
    rtype: &str,
    name: &str,
) -> Option<PathBuf> {
    let p = root
        .join(component(tenant)?)
        .join(component(ptype)?)
        .join(component(plugin)?)
        .join(component(rtype)?)
        .join(component(name)?);
    p.exists().then_some(p)
}

/// Downloads and activates the resources of a tenant's resource collection
/// (`{"automatortypes":{plugin:{rtype:{"format","permissions"?,"active":[{name,version}]}}},..}`).
/// Returns how many resources are live.
pub async fn sync(
    client: &Client,
    root: &Path,
    tenant: &str,
    collection: &Value,
) -> Result<usize, String> {
    let tenant = component(tenant).ok_or("bad tenant id")?;
    let mut live = 0;
    for (ptype, kind) in [
        ("automatortypes", PluginKind::Automator),
        ("providertypes", PluginKind::Provider),
    ] {
        let Some(plugins) = collection.get(ptype).and_then(Value::as_object) else {
            continue;
        };
        for (plugin, rtypes) in plugins {
            let plugin = component(plugin).ok_or_else(|| format!("bad plugin name {plugin}"))?;
            for (rtype, spec) in rtypes.as_object().into_iter().flatten() {
                let rtype = component(rtype).ok_or_else(|| format!("bad resource type {rtype}"))?;
                let dir = root.join(tenant).join(ptype).join(plugin).join(rtype);
                let archive = spec.get("format").and_then(Value::as_str) == Some("archive");
                let mode = spec
                    .get("permissions")
                    .and_then(Value::as_str)
                    .and_then(|p| u32::from_str_radix(p, 8).ok());
                let mut names = BTreeSet::new();
                for item in spec
                    .get("active")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = item.get("name").and_then(Value::as_str).and_then(component);
                    let version = item.get("version").and_then(Value::as_u64);
                    let (Some(name), Some(version)) = (name, version) else {
                        return Err(format!("bad active entry {item}"));
                    };
                    let vdir = dir.join(".versions").join(name).join(version.to_string());
                    let target = vdir.join(name);
                    if !target.exists() {
                        let bytes = client
                            .download_resource(tenant, kind, plugin, rtype, name, version)
                            .await
                            .map_err(|e| e.to_string())?;
                        fetch(&vdir, &target, &bytes, archive, mode).await?;
                    }
                    activate(&dir.join(name), &target).await?;
                    names.insert(name.to_string());
                    live += 1;
                }
                // Recalled resources lose their live link.
                if let Ok(mut rd) = tokio::fs::read_dir(&dir).await {
                    while let Ok(Some(e)) = rd.next_entry().await {
                        let n = e.file_name().to_string_lossy().into_owned();
                        if n != ".versions" && !n.starts_with(".tmp-") && !names.contains(&n) {
                            let _ = tokio::fs::remove_file(e.path()).await;
                        }
                    }
                }
            }
        }
    }
    Ok(live)
}

// Unpacking with the system's tar is this step's job (clippy.toml).
#[allow(clippy::disallowed_methods)]
async fn fetch(
    vdir: &Path,
    target: &Path,
    bytes: &[u8],
    archive: bool,
    mode: Option<u32>,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let io = |e: std::io::Error| format!("{}: {e}", vdir.display());
    tokio::fs::create_dir_all(vdir).await.map_err(io)?;
    if archive {
        let tmp = vdir.join(".download.tar.gz");
        tokio::fs::write(&tmp, bytes).await.map_err(io)?;
        let unpack = vdir.join(".unpack");
        let _ = tokio::fs::remove_dir_all(&unpack).await;
        tokio::fs::create_dir_all(&unpack).await.map_err(io)?;
        let st = tokio::process::Command::new("tar")
            .arg("-xzf")
            .arg(&tmp)
            .arg("-C")
            .arg(&unpack)
            .status()
            .await
            .map_err(io)?;
        let _ = tokio::fs::remove_file(&tmp).await;
        if !st.success() {
            return Err(format!("unpacking {} failed", target.display()));
        }
        tokio::fs::rename(&unpack, target).await.map_err(io)?;
    } else {
        let tmp = vdir.join(".download");
        tokio::fs::write(&tmp, bytes).await.map_err(io)?;
        let mode = mode.unwrap_or(0o644);
        tokio::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
            .await
            .map_err(io)?;
        tokio::fs::rename(&tmp, target).await.map_err(io)?;
    }
    Ok(())
}

/// Points `link` at `target`, atomically.
async fn activate(link: &Path, target: &Path) -> Result<(), String> {
    let tmp = link.with_file_name(format!(
        ".tmp-{}",
        link.file_name().unwrap_or_default().to_string_lossy()
    ));
    let _ = tokio::fs::remove_file(&tmp).await;
    tokio::fs::symlink(target, &tmp)
        .await
        .map_err(|e| format!("linking {}: {e}", link.display()))?;
    tokio::fs::rename(&tmp, link)
        .await
        .map_err(|e| format!("activating {}: {e}", link.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_the_server_cannot_walk_the_tree() {
        assert_eq!(component("kv.sh"), Some("kv.sh"));
        for bad in ["", ".", "..", "a/b", "../x"] {
            assert_eq!(component(bad), None, "{bad}");
        }
        assert_eq!(
            live_path(Path::new("/nonexistent"), "..", "a", "b", "c", "d"),
            None
        );
    }
}
