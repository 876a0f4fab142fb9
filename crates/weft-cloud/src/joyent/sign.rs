//! HTTP Signature authentication for Triton CloudAPI with the account's SSH key: the key (the
//! sensitive field `key`, OpenSSH or PEM text, RSA, ed25519 or ECDSA on P-256, P-384 or P-521)
//! signs the string `date: <Date header>`, and the request carries
//! `Authorization: Signature keyId="/<login>/keys/<fingerprint>",algorithm="rsa-sha256",headers="date",signature="<base64>"`.
//! A sub-user's key is named `/<login>/users/<user>/keys/<fingerprint>` (CloudAPI's `lib/auth.js`
//! tells the two apart by the number of path parts). ECDSA signatures are ASN.1 DER
//! (`SEQUENCE { r INTEGER, s INTEGER }`), as the http-signature scheme CloudAPI verifies with
//! expects, under `ecdsa-sha256`, `ecdsa-sha384` or `ecdsa-sha512` by curve. The fingerprint is
//! the MD5 form Triton shows (`aa:bb:...`) unless the field `key_id` names the key otherwise.
//! Errors never quote the key.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use md5::{Digest as _, Md5};
use rsa::signature::{SignatureEncoding, Signer as _};
use rsa::{BigUint, RsaPrivateKey};
use russh::keys::ssh_encoding::Decode as _;
use russh::keys::ssh_key::private::{EcdsaKeypair, KeypairData};
use russh::keys::ssh_key::{EcdsaCurve, Mpint};
use sha2::Sha256;

/// How a key signs.
enum Signer {
    Rsa(Box<rsa::pkcs1v15::SigningKey<Sha256>>),
    Ed25519(Box<ed25519_dalek::SigningKey>),
    Ecdsa(Box<EcdsaKeypair>),
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
            KeypairData::Ecdsa(kp) => Signer::Ecdsa(Box::new(kp.clone())),
            other => {
                return Err(format!(
                    "provider field key: {} keys are not supported (use RSA, ed25519 or ECDSA)",
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
        match &self.signer {
            Signer::Rsa(_) => "rsa-sha256",
            Signer::Ed25519(_) => "ed25519-sha512",
            Signer::Ecdsa(k) => match k.curve() {
                EcdsaCurve::NistP256 => "ecdsa-sha256",
                EcdsaCurve::NistP384 => "ecdsa-sha384",
                EcdsaCurve::NistP521 => "ecdsa-sha512",
            },
        }
    }

    /// The base64 signature of `text`; `None` only if an ECDSA key fails to sign.
    pub fn sign(&self, text: &[u8]) -> Option<String> {
        let bytes = match &self.signer {
            Signer::Rsa(k) => k.sign(text).to_vec(),
            Signer::Ed25519(k) => ed25519_dalek::Signer::sign(k.as_ref(), text)
                .to_bytes()
                .to_vec(),
            Signer::Ecdsa(k) => {
                let sig: russh::keys::ssh_key::Signature =
                    russh::keys::signature::Signer::try_sign(k.as_ref(), text).ok()?;
                ecdsa_der(sig.as_bytes())?
            }
        };
        Some(STANDARD.encode(bytes))
    }

    /// The `Authorization` header of a request sent with `date` as its `Date` header. `key_id`
    /// names the key (`/<login>/keys/<key_id>`, or `/<login>/users/<user>/keys/<key_id>` for a
    /// sub-user); `None` uses the fingerprint.
    pub fn authorization(
        &self,
        login: &str,
        user: Option<&str>,
        key_id: Option<&str>,
        date: &str,
    ) -> Result<String, String> {
        let owner = match user {
            Some(u) => format!("/{login}/users/{u}"),
            None => format!("/{login}"),
        };
        let signature = self
            .sign(format!("date: {date}").as_bytes())
            .ok_or("provider field key: the ECDSA key could not sign")?;
        Ok(format!(
            "Signature keyId=\"{owner}/keys/{}\",algorithm=\"{}\",headers=\"date\",signature=\"{signature}\"",
            key_id.unwrap_or(&self.fingerprint),
            self.algorithm(),
        ))
    }
}

/// An SSH ECDSA signature blob (`mpint r`, `mpint s`) as ASN.1 DER. SSH mpints are already
/// minimal two's complement, as DER integers are.
fn ecdsa_der(mut blob: &[u8]) -> Option<Vec<u8>> {
    let r = Mpint::decode(&mut blob).ok()?;
    let s = Mpint::decode(&mut blob).ok()?;
    let mut body = Vec::new();
    for n in [&r, &s] {
        let bytes = if n.as_bytes().is_empty() {
            &[0u8][..]
        } else {
            n.as_bytes()
        };
        body.push(0x02);
        der_len(&mut body, bytes.len());
        body.extend_from_slice(bytes);
    }
    let mut out = vec![0x30];
    der_len(&mut out, body.len());
    out.extend(body);
    Some(out)
}

/// A DER length (short form below 128, else long form).
fn der_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-384 test key made with `ssh-keygen -t ecdsa -b 384` for these tests only.
    const P384_TEXT: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAiAAAABNlY2RzYS
1zaGEyLW5pc3RwMzg0AAAACG5pc3RwMzg0AAAAYQTEwNpCK6ojRQQuE8e3QlFn/5Tl7KWD
j5qAE6x6VfBYEp54/W5i5hFxNi8TKsKfacwj8Vdpq+D6vekFLyFoor9RRH0aBVK6u+1Dqj
2MbVUt/ss+rEWm0UIFfN+Aaw3L05MAAADQ9d8GL/XfBi8AAAATZWNkc2Etc2hhMi1uaXN0
cDM4NAAAAAhuaXN0cDM4NAAAAGEExMDaQiuqI0UELhPHt0JRZ/+U5eylg4+agBOselXwWB
KeeP1uYuYRcTYvEyrCn2nMI/FXaavg+r3pBS8haKK/UUR9GgVSurvtQ6o9jG1VLf7LPqxF
ptFCBXzfgGsNy9OTAAAAMQDop8JeXkGaJsz5ZkIYU8g+hsbHRIrO2uFKvGMq6Hn9u5WCXm
Q8mxcoE8aTcsmnWsgAAAAEdGVzdAECAw==
-----END OPENSSH PRIVATE KEY-----
";

    #[test]
    fn an_ecdsa_key_signs_in_der_and_a_sub_user_key_names_its_user() {
        let k = AccountKey::from_text(P384_TEXT).unwrap();
        assert_eq!(k.algorithm(), "ecdsa-sha384");
        let auth = k
            .authorization("acme", Some("ops"), None, "Tue, 24 Nov 2026 21:00:00 GMT")
            .unwrap();
        assert!(
            auth.starts_with(&format!(
                "Signature keyId=\"/acme/users/ops/keys/{}\",algorithm=\"ecdsa-sha384\"",
                k.fingerprint()
            )),
            "{auth}"
        );
        let sig = STANDARD.decode(k.sign(b"date: x").unwrap()).unwrap();
        // SEQUENCE of two INTEGERs of at most 49 bytes each (48 and a sign byte).
        assert_eq!(sig[0], 0x30);
        assert_eq!(sig[1] as usize, sig.len() - 2);
        assert_eq!(sig[2], 0x02);
        let r_len = sig[3] as usize;
        assert!(r_len <= 49 && sig[4 + r_len] == 0x02, "{sig:?}");
        let mut long = Vec::new();
        der_len(&mut long, 300);
        assert_eq!(long, [0x82, 0x01, 0x2c]);
    }
}
