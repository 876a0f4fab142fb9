//! HTTP Signature authentication for Triton CloudAPI with the account's SSH key: the key (the
//! sensitive field `key`, OpenSSH or PEM text, RSA or ed25519) signs the string
//! `date: <Date header>`, and the request carries
//! `Authorization: Signature keyId="/<login>/keys/<fingerprint>",algorithm="rsa-sha256",headers="date",signature="<base64>"`.
//! The fingerprint is the MD5 form Triton shows (`aa:bb:...`) unless the field `key_id` names the
//! key otherwise. Errors never quote the key.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use md5::{Digest as _, Md5};
use rsa::signature::{SignatureEncoding, Signer as _};
use rsa::{BigUint, RsaPrivateKey};
use russh::keys::ssh_key::private::KeypairData;
use russh::keys::ssh_key::Mpint;
use sha2::Sha256;

/// How a key signs.
enum Signer {
    Rsa(Box<rsa::pkcs1v15::SigningKey<Sha256>>),
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

/// The account's key, ready to sign requests.
pub struct AccountKey {
    fingerprint: String,
    signer: Signer,
}

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountKey")
            .field("fingerprint", &self.fingerprint)
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

/// The MD5 fingerprint of an SSH public key blob (its wire form), as `aa:bb:...:ff`.
pub fn md5_fingerprint(blob: &[u8]) -> String {
    Md5::digest(blob)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn big(m: &Mpint) -> Result<BigUint, String> {
    m.as_positive_bytes()
        .map(BigUint::from_bytes_be)
        .ok_or_else(|| "provider field key: an RSA component is not a positive number".to_string())
}

impl AccountKey {
    /// Reads a private key (OpenSSH, or PEM PKCS#1/PKCS#8; not encrypted).
    pub fn from_text(text: &str) -> Result<AccountKey, String> {
        let key = russh::keys::decode_secret_key(text, None).map_err(|_| {
            "provider field key is not an unencrypted SSH private key (OpenSSH or PEM)".to_string()
        })?;
        let blob = key
            .public_key()
            .to_bytes()
            .map_err(|_| "provider field key: its public key cannot be encoded".to_string())?;
        let signer = match key.key_data() {
            KeypairData::Rsa(kp) => {
                let (public, private) = (kp.public(), kp.private());
                let rsa = RsaPrivateKey::from_components(
                    big(public.n())?,
                    big(public.e())?,
                    big(private.d())?,
                    vec![big(private.p())?, big(private.q())?],
                )
                .map_err(|_| "provider field key: not a valid RSA key".to_string())?;
                Signer::Rsa(Box::new(rsa::pkcs1v15::SigningKey::<Sha256>::new(rsa)))
            }
            KeypairData::Ed25519(kp) => Signer::Ed25519(Box::new(
                ed25519_dalek::SigningKey::from_bytes(&kp.private.to_bytes()),
            )),
            other => {
                return Err(format!(
                    "provider field key: {} keys are not supported (use RSA or ed25519)",
                    other
                        .algorithm()
                        .map(|a| a.to_string())
                        .unwrap_or_else(|_| "these".into())
                ))
            }
        };
        Ok(AccountKey {
            fingerprint: md5_fingerprint(&blob),
            signer,
        })
    }

    /// The key's MD5 fingerprint (`aa:bb:...`).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The HTTP Signature algorithm name.
    pub fn algorithm(&self) -> &'static str {
        match self.signer {
            Signer::Rsa(_) => "rsa-sha256",
            Signer::Ed25519(_) => "ed25519-sha512",
        }
    }

    /// The base64 signature of `text`.
    pub fn sign(&self, text: &[u8]) -> String {
        let bytes = match &self.signer {
            Signer::Rsa(k) => k.sign(text).to_vec(),
            Signer::Ed25519(k) => ed25519_dalek::Signer::sign(k.as_ref(), text)
                .to_bytes()
                .to_vec(),
        };
        STANDARD.encode(bytes)
    }

    /// The `Authorization` header of a request sent with `date` as its `Date` header. `key_id`
    /// names the key (`/<login>/keys/<key_id>`); `None` uses the fingerprint.
    pub fn authorization(&self, login: &str, key_id: Option<&str>, date: &str) -> String {
        format!(
            "Signature keyId=\"/{login}/keys/{}\",algorithm=\"{}\",headers=\"date\",signature=\"{}\"",
            key_id.unwrap_or(&self.fingerprint),
            self.algorithm(),
            self.sign(format!("date: {date}").as_bytes())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use russh::keys::ssh_key::private::Ed25519Keypair;
    use russh::keys::ssh_key::{LineEnding, PrivateKey};

    #[test]
    fn an_ed25519_key_signs_what_its_public_half_verifies() {
        let key = PrivateKey::from(Ed25519Keypair::from_seed(&[7; 32]));
        let text = key.to_openssh(LineEnding::LF).unwrap();
        let k = AccountKey::from_text(&text).unwrap();
        assert_eq!(k.algorithm(), "ed25519-sha512");
        assert_eq!(k.fingerprint().len(), 47);
        let auth = k.authorization("acme", None, "Tue, 24 Nov 2026 21:00:00 GMT");
        assert!(auth.starts_with(&format!(
            "Signature keyId=\"/acme/keys/{}\",algorithm=\"ed25519-sha512\",headers=\"date\",signature=\"",
            k.fingerprint()
        )));
        let sig = STANDARD
            .decode(
                auth.rsplit("signature=\"")
                    .next()
                    .unwrap()
                    .trim_end_matches('"'),
            )
            .unwrap();
        let public = ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key();
        public
            .verify_strict(
                b"date: Tue, 24 Nov 2026 21:00:00 GMT",
                &ed25519_dalek::Signature::from_slice(&sig).unwrap(),
            )
            .unwrap();
    }

    #[test]
    fn a_bad_key_is_refused_without_quoting_it() {
        let e = AccountKey::from_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRETSTUFF\n")
            .unwrap_err();
        assert!(
            e.contains("provider field key") && !e.contains("SECRETSTUFF"),
            "{e}"
        );
    }

    #[test]
    fn md5_fingerprints_look_like_tritons() {
        assert_eq!(
            md5_fingerprint(b""),
            "d4:1d:8c:d9:8f:00:b2:04:e9:80:09:98:ec:f8:42:7e"
        );
    }
}
