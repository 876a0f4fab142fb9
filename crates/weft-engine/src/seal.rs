//! Secrets sealed at rest. Every secret the store keeps (a provider's sensitive fields, the ones a
//! user gave at create, a node's SSH key or password, a pool host's key) is written as a sealed
//! string, `sealed:v1:<data key id>:<base64url(nonce | AES-256-GCM ciphertext)>`, bound to its
//! tenant (the tenant id is the associated data, so a sealed value copied to another tenant does
//! not open). Data keys are random; the store keeps each wrapped (sealed the same way) by a
//! master key it never holds: a file of 64-hex-digit lines (`secrets_key_file`, made on first
//! start when the store has no data key yet) or `WEFT_SECRETS_KEY`. A master key's id is the first
//! 16 hex digits of its SHA-256.
//!
//! Opening happens only where a secret leaves for a provisioner ([`Sealer::open_all`] on a task's
//! payload, a sweep's or drift check's provider fields); answers mask secrets before any of this.
//! [`Sealer::rotate`] makes a new master key, re-wraps every data key under it (the old key then
//! opens nothing in the store) and starts a new data key for new values.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::Aes256Gcm;
use base64::Engine as _;
use rand::RngCore;
use serde_json::Value;
use sha2::{Digest, Sha256};
use weft_store::{SecretKeyRow, Store};

use crate::error::{EngineError, EngineResult};

/// What every sealed string starts with.
pub const PREFIX: &str = "sealed:v1:";
/// The environment variable that may hold the master key (64 hex digits) instead of a file.
pub const KEY_ENV: &str = "WEFT_SECRETS_KEY";
/// The associated data of a wrapped data key.
const WRAP_AAD: &[u8] = b"weft data key";

/// Where the master key comes from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// A file of master keys, one per line (a rotation briefly holds two); made on first start.
    File(PathBuf),
    /// The key itself (from `WEFT_SECRETS_KEY`).
    Given(String),
    /// A random key that lives as long as the process (tests and tools on throwaway stores).
    Ephemeral,
}

#[derive(Clone)]
struct MasterKey {
    id: String,
    key: [u8; 32],
}

impl MasterKey {
    fn random() -> MasterKey {
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        MasterKey::from_bytes(key)
    }

    fn from_bytes(key: [u8; 32]) -> MasterKey {
        let id = hex::encode(&Sha256::digest(key)[..8]);
        MasterKey { id, key }
    }

    fn parse(line: &str) -> Option<MasterKey> {
        let bytes = hex::decode(line.trim()).ok()?;
        Some(MasterKey::from_bytes(bytes.try_into().ok()?))
    }

    fn hex(&self) -> String {
        hex::encode(self.key)
    }
}

/// The keys in memory: the master keys at hand, the data keys they unwrapped, the one new values
/// are sealed with.
#[derive(Default)]
struct Keys {
    masters: Vec<MasterKey>,
    data: HashMap<String, Arc<Aes256Gcm>>,
    current: String,
}

/// Seals and opens secrets; loads its keys on first use (or at [`Sealer::ready`]).
pub struct Sealer {
    store: Arc<dyn Store>,
    source: KeySource,
    keys: tokio::sync::RwLock<Option<Keys>>,
}

fn key_error(msg: impl Into<String>) -> EngineError {
    EngineError::SecretsKey(msg.into())
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// `plain` sealed by `cipher` under key id `id` with associated data `aad`.
fn seal_bytes(cipher: &Aes256Gcm, id: &str, aad: &[u8], plain: &[u8]) -> String {
    let mut nonce = [0u8; 12];
    rand::thread_rng().fill_bytes(&mut nonce);
    let sealed = cipher
        .encrypt(&nonce.into(), Payload { msg: plain, aad })
        .expect("AES-GCM seals any message shorter than 64 GiB");
    let mut out = nonce.to_vec();
    out.extend(sealed);
    format!("{PREFIX}{id}:{}", b64().encode(out))
}

/// The key id and the nonce-and-ciphertext of a sealed string.
fn split_sealed(text: &str) -> Option<(&str, Vec<u8>)> {
    let rest = text.strip_prefix(PREFIX)?;
    let (id, data) = rest.split_once(':')?;
    let bytes = b64().decode(data).ok()?;
    (bytes.len() > 12).then_some((id, bytes))
}

fn open_bytes(cipher: &Aes256Gcm, aad: &[u8], bytes: &[u8]) -> Option<Vec<u8>> {
    let (nonce, sealed) = bytes.split_at(12);
    let nonce: [u8; 12] = nonce.try_into().ok()?;
    cipher
        .decrypt(&nonce.into(), Payload { msg: sealed, aad })
        .ok()
}

fn cipher_of(key: &[u8]) -> Option<Aes256Gcm> {
    Aes256Gcm::new_from_slice(key).ok()
}

/// Whether `v` is a sealed string.
pub fn is_sealed(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.starts_with(PREFIX))
}

impl Sealer {
    /// A sealer over `store` with master keys from `source`; nothing is read until first use
    /// ([`Sealer::ready`]).
    pub fn new(store: Arc<dyn Store>, source: KeySource) -> Sealer {
        Sealer {
            store,
            source,
            keys: tokio::sync::RwLock::new(None),
        }
    }

    /// Loads the keys (making the first master and data keys on a store that has none): a server
    /// calls it at start so that a missing or wrong key file stops it at once, with the fix named.
    pub async fn ready(&self) -> EngineResult<()> {
        if self.keys.read().await.is_none() {
            self.reload().await?;
        }
        Ok(())
    }

    /// Reads the master keys and the store's data keys again (another server rotated them, or
    /// sealed with a data key this one has not seen).
    async fn reload(&self) -> EngineResult<()> {
        let mut guard = self.keys.write().await;
        let mut masters = match guard.as_ref() {
            Some(k) if matches!(self.source, KeySource::Ephemeral) => k.masters.clone(),
            _ => self.read_masters().await?,
        };
        let mut rows = self.store.list_secret_keys().await?;
        if rows.is_empty() {
            if masters.is_empty() {
                masters = self.make_master().await?;
            }
            let row = new_data_key(&masters[0], 1).0;
            self.store.put_secret_keys(&[row], true).await?;
            rows = self.store.list_secret_keys().await?;
        }
        if masters.is_empty() && !matches!(self.source, KeySource::Ephemeral) {
            // Another server may have made the file and its data key since it was read.
            masters = self.read_masters().await?;
        }
        if masters.is_empty() {
            return Err(key_error(self.missing_key_message()));
        }
        let mut data = HashMap::new();
        for row in &rows {
            let Some(master) = masters.iter().find(|m| m.id == row.master_id) else {
                return Err(key_error(format!(
                    "the store's secrets are sealed under master key {}, which {} does not hold; \
                     give the key file this store was sealed with",
                    row.master_id,
                    self.source_name()
                )));
            };
            data.insert(row.id.clone(), Arc::new(unwrap_data_key(master, row)?));
        }
        let current = rows.last().map(|r| r.id.clone()).unwrap_or_default();
        *guard = Some(Keys {
            masters,
            data,
            current,
        });
        Ok(())
    }

    /// The master keys the source holds now (none when its file does not exist yet).
    async fn read_masters(&self) -> EngineResult<Vec<MasterKey>> {
        let text = match &self.source {
            KeySource::Ephemeral => return Ok(Vec::new()),
            KeySource::Given(k) => k.clone(),
            KeySource::File(path) => match tokio::fs::read_to_string(path).await {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(key_error(format!("reading {}: {e}", path.display()))),
            },
        };
        let mut keys = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            keys.push(MasterKey::parse(line).ok_or_else(|| {
                key_error(format!(
                    "{} holds a line that is not a key (64 hex digits)",
                    self.source_name()
                ))
            })?);
        }
        Ok(keys)
    }

    /// A first master key, written to the key file (0600) when there is one. Servers starting at
    /// once on one file: the first file made wins and the others read it.
    async fn make_master(&self) -> EngineResult<Vec<MasterKey>> {
        let key = MasterKey::random();
        if let KeySource::File(path) = &self.source {
            if !write_key_file(path, &[&key], true)? {
                return self.read_masters().await;
            }
            tracing::info!(path = %path.display(), key_id = %key.id, "made the secrets key file");
        }
        Ok(vec![key])
    }

    fn source_name(&self) -> String {
        match &self.source {
            KeySource::File(p) => p.display().to_string(),
            KeySource::Given(_) => KEY_ENV.to_string(),
            KeySource::Ephemeral => "this process".to_string(),
        }
    }

    fn missing_key_message(&self) -> String {
        format!(
            "the store holds sealed secrets but {} has no master key: restore the key file the \
             store was sealed with (secrets_key_file) or set {KEY_ENV}",
            self.source_name()
        )
    }

    /// `value` sealed for `tenant` with the current data key.
    pub async fn seal(&self, tenant: &str, value: &Value) -> EngineResult<Value> {
        if is_sealed(value) {
            return Ok(value.clone());
        }
        self.ready().await?;
        let guard = self.keys.read().await;
        let keys = guard.as_ref().expect("loaded by ready");
        let cipher = &keys.data[&keys.current];
        let plain = serde_json::to_vec(value).map_err(|e| EngineError::Internal(e.to_string()))?;
        Ok(Value::String(seal_bytes(
            cipher,
            &keys.current,
            tenant.as_bytes(),
            &plain,
        )))
    }

    /// Seals each of `fields` present in `map` (a value already sealed stays as it is).
    pub async fn seal_fields<'a>(
        &self,
        tenant: &str,
        map: &mut serde_json::Map<String, Value>,
        fields: impl IntoIterator<Item = &'a str>,
    ) -> EngineResult<()> {
        for f in fields {
            if let Some(v) = map.get_mut(f) {
                *v = self.seal(tenant, v).await?;
            }
        }
        Ok(())
    }

    /// The value a sealed string holds. A string that only looks sealed (a tenant's text) but
    /// does not open under a key this server holds for its tenant is left as it is; one sealed
    /// under a data key no master key at hand unwraps is an error.
    pub async fn open(&self, tenant: &str, text: &str) -> EngineResult<Option<Value>> {
        let Some((id, bytes)) = split_sealed(text) else {
            return Ok(None);
        };
        self.ready().await?;
        if !self
            .keys
            .read()
            .await
            .as_ref()
            .is_some_and(|k| k.data.contains_key(id))
        {
            self.reload().await?;
        }
        let guard = self.keys.read().await;
        let Some(cipher) = guard.as_ref().and_then(|k| k.data.get(id)) else {
            return Err(key_error(format!(
                "a secret is sealed under data key {id}, which the store does not hold"
            )));
        };
        let Some(plain) = open_bytes(cipher, tenant.as_bytes(), &bytes) else {
            return Ok(None);
        };
        serde_json::from_slice(&plain)
            .map(Some)
            .map_err(|e| EngineError::Internal(format!("a sealed secret is not JSON: {e}")))
    }

    /// Opens every sealed string in `value`, at any depth.
    pub async fn open_all(&self, tenant: &str, value: &mut Value) -> EngineResult<()> {
        let mut stack = vec![value];
        while let Some(v) = stack.pop() {
            match v {
                Value::String(s) if s.starts_with(PREFIX) => {
                    if let Some(plain) = self.open(tenant, s).await? {
                        *v = plain;
                    }
                }
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(map) => stack.extend(map.values_mut()),
                _ => {}
            }
        }
        Ok(())
    }

    /// A new master key: every data key is re-wrapped under it in one transaction and a new data
    /// key starts; the key file then holds the new key alone. Answers the new key's id. (The file
    /// holds both keys while the store changes, so a crash in between loses neither.)
    pub async fn rotate(&self) -> EngineResult<String> {
        self.reload().await?;
        let mut guard = self.keys.write().await;
        let keys = guard.as_mut().expect("loaded by reload");
        let new = MasterKey::random();
        let mut rows = self.store.list_secret_keys().await?;
        for row in &mut rows {
            let old = keys
                .masters
                .iter()
                .find(|m| m.id == row.master_id)
                .ok_or_else(|| key_error(self.missing_key_message()))?;
            let data_key = open_bytes(
                &cipher_of(&old.key).expect("32 bytes"),
                WRAP_AAD,
                &split_sealed(&row.wrapped)
                    .ok_or_else(|| key_error("a stored data key is not sealed"))?
                    .1,
            )
            .ok_or_else(|| key_error(format!("data key {} does not open", row.id)))?;
            row.wrapped = wrap(&new, &data_key);
            row.master_id = new.id.clone();
        }
        let seq = rows.last().map_or(0, |r| r.seq) + 1;
        let (fresh, fresh_cipher) = new_data_key(&new, seq);
        rows.push(fresh.clone());
        if let KeySource::File(path) = &self.source {
            let mut both: Vec<&MasterKey> = vec![&new];
            both.extend(keys.masters.iter());
            write_key_file(path, &both, false)?;
        }
        self.store.put_secret_keys(&rows, false).await?;
        if let KeySource::File(path) = &self.source {
            write_key_file(path, &[&new], false)?;
        }
        keys.masters = vec![new.clone()];
        keys.data.insert(fresh.id.clone(), Arc::new(fresh_cipher));
        keys.current = fresh.id;
        tracing::info!(key_id = %new.id, "secrets key rotated");
        Ok(new.id)
    }

    /// The master key in hex, for `KeySource::Given` users and tests (never logged).
    pub async fn master_hex(&self) -> EngineResult<String> {
        self.ready().await?;
        let guard = self.keys.read().await;
        Ok(guard.as_ref().expect("loaded").masters[0].hex())
    }
}

/// What a value sealed under an export's passphrase starts with.
pub const EXPORT_PREFIX: &str = "passphrase:v1:";
/// The shortest passphrase an export takes.
pub const MIN_PASSPHRASE: usize = 12;
/// The associated data of a value sealed under a passphrase.
const EXPORT_AAD: &[u8] = b"weft export";

/// A key derived from a passphrase and a salt with Argon2id (the crate's default cost).
fn passphrase_cipher(passphrase: &str, salt: &[u8]) -> EngineResult<Aes256Gcm> {
    let mut key = [0u8; 32];
    argon2::Argon2::default()
        .hash_password_into(passphrase.as_bytes(), salt, &mut key)
        .map_err(|e| EngineError::Internal(format!("deriving the export key: {e}")))?;
    Ok(cipher_of(&key).expect("32 bytes"))
}

/// Seals values of an export under a passphrase: `passphrase:v1:<salt>:<nonce | ciphertext>`,
/// one random salt per export.
pub struct ExportSealer {
    salt: String,
    cipher: Aes256Gcm,
}

impl ExportSealer {
    /// A sealer under `passphrase` with a new random salt; a passphrase shorter than the minimum is
    /// [`EngineError::Invalid`].
    pub fn new(passphrase: &str) -> EngineResult<ExportSealer> {
        if passphrase.chars().count() < MIN_PASSPHRASE {
            return Err(EngineError::Invalid(format!(
                "passphrase: must be at least {MIN_PASSPHRASE} characters"
            )));
        }
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        Ok(ExportSealer {
            salt: b64().encode(salt),
            cipher: passphrase_cipher(passphrase, &salt)?,
        })
    }

    /// `value` (any JSON) sealed as one string, `passphrase:v1:...`.
    pub fn seal(&self, value: &Value) -> Value {
        let plain = serde_json::to_vec(value).expect("JSON values serialize");
        let sealed = seal_bytes(&self.cipher, &self.salt, EXPORT_AAD, &plain);
        Value::String(sealed.replacen(PREFIX, EXPORT_PREFIX, 1))
    }
}

/// Opens values an export sealed under a passphrase (one key derivation per salt).
pub struct ExportOpener {
    passphrase: Option<String>,
    keys: HashMap<String, Aes256Gcm>,
}

impl ExportOpener {
    /// An opener for an import; `None`: no passphrase was given, so a sealed value is an error.
    pub fn new(passphrase: Option<String>) -> ExportOpener {
        ExportOpener {
            passphrase,
            keys: HashMap::new(),
        }
    }

    /// The value `v` holds when it is sealed under a passphrase (`None`: it is not); `field`
    /// names it in the error of a missing or wrong passphrase.
    pub fn open(&mut self, v: &Value, field: &str) -> EngineResult<Option<Value>> {
        let Some(rest) = v.as_str().and_then(|s| s.strip_prefix(EXPORT_PREFIX)) else {
            return Ok(None);
        };
        let Some(passphrase) = &self.passphrase else {
            return Err(EngineError::Invalid(format!(
                "{field} is sealed with an export's passphrase: give `passphrase`"
            )));
        };
        let wrong = || EngineError::Invalid(format!("passphrase: does not open {field}"));
        let text = format!("{PREFIX}{rest}");
        let (salt, bytes) = split_sealed(&text).ok_or_else(wrong)?;
        let salt = salt.to_string();
        if !self.keys.contains_key(&salt) {
            let raw = b64().decode(&salt).map_err(|_| wrong())?;
            self.keys
                .insert(salt.clone(), passphrase_cipher(passphrase, &raw)?);
        }
        let plain = open_bytes(&self.keys[&salt], EXPORT_AAD, &bytes).ok_or_else(wrong)?;
        serde_json::from_slice(&plain)
            .map(Some)
            .map_err(|_| wrong())
    }
}

/// `data_key` wrapped by `master`.
fn wrap(master: &MasterKey, data_key: &[u8]) -> String {
    let cipher = cipher_of(&master.key).expect("32 bytes");
    seal_bytes(&cipher, &master.id, WRAP_AAD, data_key)
}

fn unwrap_data_key(master: &MasterKey, row: &SecretKeyRow) -> EngineResult<Aes256Gcm> {
    let cipher = cipher_of(&master.key).expect("32 bytes");
    let bytes = split_sealed(&row.wrapped)
        .map(|(_, b)| b)
        .ok_or_else(|| key_error(format!("data key {} is not sealed", row.id)))?;
    let key = open_bytes(&cipher, WRAP_AAD, &bytes).ok_or_else(|| {
        key_error(format!(
            "data key {} does not open with master key {}",
            row.id, master.id
        ))
    })?;
    cipher_of(&key).ok_or_else(|| key_error(format!("data key {} is not 32 bytes", row.id)))
}

/// A random data key (the `seq`-th), as a row wrapped by `master` and as a cipher.
fn new_data_key(master: &MasterKey, seq: i64) -> (SecretKeyRow, Aes256Gcm) {
    let mut key = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut key);
    let mut id = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut id);
    let row = SecretKeyRow {
        id: hex::encode(id),
        master_id: master.id.clone(),
        wrapped: wrap(master, &key),
        seq,
    };
    (row, cipher_of(&key).expect("32 bytes"))
}

/// Writes the key file (mode 0600) through a temporary file, so that it is never seen half
/// written: renamed over the old one, or (`exclusive`) linked in place only if there is none yet
/// (answers false when another process made it first).
fn write_key_file(path: &Path, keys: &[&MasterKey], exclusive: bool) -> EngineResult<bool> {
    let io = |e: std::io::Error| key_error(format!("writing {}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut suffix = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut suffix);
    let tmp = path.with_extension(format!("tmp-{}", hex::encode(suffix)));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp).map_err(io)?;
    let mut text =
        String::from("# weft secrets master key: keep it apart from the store's backups\n");
    for k in keys {
        text.push_str(&k.hex());
        text.push('\n');
    }
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    if !exclusive {
        return std::fs::rename(&tmp, path).map(|()| true).map_err(io);
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/w.db", dir.path().display());
        let store = weft_store::open(&url).await.unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn sealed_values_open_for_their_tenant_only() {
        let (_d, store) = store().await;
        let s = Sealer::new(store, KeySource::Ephemeral);
        let secret = json!({"key": "-----BEGIN KEY-----", "n": 3});
        let sealed = s.seal("t1", &secret).await.unwrap();
        let text = sealed.as_str().unwrap();
        assert!(text.starts_with(PREFIX) && !text.contains("BEGIN"));
        assert_eq!(s.open("t1", text).await.unwrap(), Some(secret));
        assert_eq!(s.open("t2", text).await.unwrap(), None);
        // A tenant's text that only looks sealed stays text; an unknown data key is an error.
        assert_eq!(s.open("t1", "sealed:v1:nope").await.unwrap(), None);
        let forged = format!("{PREFIX}0000000000000000:{}", b64().encode([7u8; 40]));
        assert!(s.open("t1", &forged).await.is_err());
    }

    #[tokio::test]
    async fn a_key_file_is_made_once_and_a_rotation_retires_the_old_key() {
        let (dir, store) = store().await;
        let path = dir.path().join("secrets.key");
        let s = Sealer::new(store.clone(), KeySource::File(path.clone()));
        let sealed = s.seal("t", &json!("hunter2")).await.unwrap();
        let old = std::fs::read_to_string(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        s.rotate().await.unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        assert_ne!(old, new);
        // The value sealed before still opens (its data key was re-wrapped), also for a second
        // server reading the new file...
        let again = Sealer::new(store.clone(), KeySource::File(path.clone()));
        let text = sealed.as_str().unwrap();
        assert_eq!(again.open("t", text).await.unwrap(), Some(json!("hunter2")));
        // ...while the old key file opens nothing.
        let old_path = dir.path().join("old.key");
        std::fs::write(&old_path, old).unwrap();
        let stale = Sealer::new(store, KeySource::File(old_path));
        let err = stale.ready().await.unwrap_err().to_string();
        assert!(err.contains("does not hold"), "{err}");
    }

    #[test]
    fn an_export_opens_with_its_passphrase_only() {
        let sealer = ExportSealer::new("correct horse battery").unwrap();
        let v = json!({"k": "secret"});
        let sealed = sealer.seal(&v);
        assert!(sealed.as_str().unwrap().starts_with(EXPORT_PREFIX));
        let mut right = ExportOpener::new(Some("correct horse battery".into()));
        assert_eq!(right.open(&sealed, "f").unwrap(), Some(v));
        assert_eq!(right.open(&json!("plain"), "f").unwrap(), None);
        let mut wrong = ExportOpener::new(Some("wrong horse battery".into()));
        let err = wrong
            .open(&sealed, "providers[p].provisioner.k")
            .unwrap_err();
        assert!(
            err.to_string().contains("does not open providers[p]"),
            "{err}"
        );
        let err = ExportOpener::new(None).open(&sealed, "f").unwrap_err();
        assert!(err.to_string().contains("give `passphrase`"), "{err}");
        assert!(ExportSealer::new("short").is_err());
    }

    #[tokio::test]
    async fn a_store_with_secrets_refuses_a_missing_key_file() {
        let (dir, store) = store().await;
        let s = Sealer::new(store.clone(), KeySource::File(dir.path().join("a.key")));
        s.ready().await.unwrap();
        let other = Sealer::new(store, KeySource::File(dir.path().join("missing.key")));
        let err = other.ready().await.unwrap_err().to_string();
        assert!(err.contains("restore the key file"), "{err}");
    }
}
