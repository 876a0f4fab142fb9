//! Tests of the Triton request signing (`joyent::sign`) through its public functions.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::ssh_key::{LineEnding, PrivateKey};
use weft_provisioner::joyent::sign::*;

#[test]
fn an_ed25519_key_signs_what_its_public_half_verifies() {
    let key = PrivateKey::from(Ed25519Keypair::from_seed(&[7; 32]));
    let text = key.to_openssh(LineEnding::LF).unwrap();
    let k = AccountKey::from_text(&text).unwrap();
    assert_eq!(k.algorithm(), "ed25519-sha512");
    assert_eq!(k.fingerprint().len(), 47);
    let auth = k
        .authorization("acme", None, None, "Tue, 24 Nov 2026 21:00:00 GMT")
        .unwrap();
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
    let e =
        AccountKey::from_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRETSTUFF\n").unwrap_err();
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
