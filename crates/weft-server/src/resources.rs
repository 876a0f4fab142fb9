//! Where the bytes of plugin resources live, behind the engine's [`ResourceStore`]. The default
//! keeps them on the local filesystem under
//! `<data_dir>/resources/<tenant>/<ptype>/<plugin>/<rtype>/<name>/<version>`; another backend (an
//! object store, say) implements the same trait.

use std::path::PathBuf;

use async_trait::async_trait;
use bytes::Bytes;
use weft_store::ResourceKey;

pub use weft_engine::plugins::ResourceStore;

/// Plugin resources on the local filesystem.
pub struct LocalResourceStore {
    root: PathBuf,
}

impl LocalResourceStore {
    /// Keeps resources under `root` (the server uses `<data_dir>/resources`); directories are made
    /// as needed.
    pub fn new(root: PathBuf) -> Self {
        LocalResourceStore { root }
    }

    fn path(&self, key: &ResourceKey, version: u64) -> PathBuf {
        // Every segment was validated as a name ([A-Za-z0-9_.-]+), and "." / ".." are refused there too.
        self.root
            .join(&key.tenant_id)
            .join(&key.ptype)
            .join(&key.plugin)
            .join(&key.rtype)
            .join(&key.name)
            .join(version.to_string())
    }
}

#[async_trait]
impl ResourceStore for LocalResourceStore {
    async fn put(&self, key: &ResourceKey, version: u64, bytes: Bytes) -> std::io::Result<()> {
        let path = self.path(key, version);
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        // Write to a temporary name and rename, so a crash never leaves a half-written version.
        let tmp = path.with_extension("partial");
        tokio::fs::write(&tmp, &bytes).await?;
        tokio::fs::rename(&tmp, &path).await
    }

    async fn get(&self, key: &ResourceKey, version: u64) -> std::io::Result<Option<Bytes>> {
        match tokio::fs::read(self.path(key, version)).await {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, key: &ResourceKey, version: u64) -> std::io::Result<()> {
        match tokio::fs::remove_file(self.path(key, version)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}
