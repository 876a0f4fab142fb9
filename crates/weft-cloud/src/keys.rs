//! The SSH key of a cluster's machines on the providers that make one key per cluster (docker,
//! google, joyent): derived, never stored, so every worker of every provisioner with the same seed
//! makes the same key for the same cluster and a CREATE retried elsewhere installs the same one.
//! (aws keeps the derivation it has always had: its keys are already on machines.) Also the login
//! every provider answers for such a key: the user and both halves of the key in OpenSSH form.

use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::ssh_key::LineEnding;
use russh::keys::PrivateKey;
use sha2::{Digest, Sha256};

use crate::cloud::Login;
use crate::task::{PluginError, Task};

/// The cluster's SSH key: ed25519 from SHA-256 over the seed, the tenant and the cluster id.
pub fn cluster_key(seed: &[u8], tenant: &str, cluster: &str) -> PrivateKey {
    let mut h = Sha256::new();
    h.update(b"weft docker provider ssh key v1\0");
    h.update((seed.len() as u64).to_be_bytes());
    h.update(seed);
    h.update((tenant.len() as u64).to_be_bytes());
    h.update(tenant.as_bytes());
    h.update(cluster.as_bytes());
    let bytes: [u8; 32] = h.finalize().into();
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&bytes));
    key.set_comment(format!("weft-cluster-{cluster}"));
    key
}

/// The user weft logs in as: the image type's `sshuser`, else `default`.
pub fn ssh_user(task: &Task, default: &str) -> String {
    task.config_str("sshuser")
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .unwrap_or(default)
        .to_string()
}

/// How weft logs in to a cluster's machines with a derived key: the login (the image type's
/// `sshuser`, else `default_user`, and the private key) and the public key (OpenSSH line).
pub fn cluster_login(
    task: &Task,
    default_user: &str,
    key: &PrivateKey,
) -> Result<(Login, String), PluginError> {
    let (public, private) = key_halves(key)?;
    Ok((
        Login {
            user: ssh_user(task, default_user),
            key: private,
        },
        public,
    ))
}

/// A key's public half (OpenSSH line) and private half (OpenSSH text).
pub fn key_halves(key: &PrivateKey) -> Result<(String, String), PluginError> {
    let public = key
        .public_key()
        .to_openssh()
        .map_err(|e| PluginError::fatal(format!("encoding the public key: {e}")))?;
    let private = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| PluginError::fatal(format!("encoding the private key: {e}")))?;
    Ok((public, private.to_string()))
}

/// The result fields that tell the provisioner how to log in: `transport` and `ssh-auth`.
pub fn login_result(user: &str, key: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("transport".into(), "ssh".into());
    m.insert(
        "ssh-auth".into(),
        serde_json::json!({"user": user, "key": key}),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use russh::keys::ssh_key::LineEnding;

    #[test]
    fn the_cluster_key_is_the_same_for_every_node_and_differs_between_clusters() {
        let a = cluster_key(b"seed", "t", "1");
        assert_eq!(a, cluster_key(b"seed", "t", "1"));
        assert_ne!(
            a.public_key().key_data(),
            cluster_key(b"seed", "t", "2").public_key().key_data()
        );
        assert_ne!(
            a.public_key().key_data(),
            cluster_key(b"seed", "u", "1").public_key().key_data()
        );
        assert_ne!(
            a.public_key().key_data(),
            cluster_key(b"other", "t", "1").public_key().key_data()
        );
        // Field boundaries count: ("t", "11") is not ("t1", "1").
        assert_ne!(
            cluster_key(b"s", "t", "11").public_key().key_data(),
            cluster_key(b"s", "t1", "1").public_key().key_data()
        );
        let text = a.to_openssh(LineEnding::LF).unwrap();
        assert!(PrivateKey::from_openssh(text.as_bytes()).is_ok());
    }
}
