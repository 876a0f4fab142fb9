//! `weft up --tls`: a certificate authority of this machine's own, made once in the data dir,
//! with a server certificate for loopback (and the bind address) and a certificate for the
//! embedded provisioner (client and server use, for loopback), so both ports and the provisioner's
//! own API serve HTTPS and the provisioner port requires mutual TLS without anyone handling
//! certificates. The CA lives ten years; the two leaf certificates are
//! issued again at every start, each for [`LEAF_DAYS`] days (what browsers and scanners accept).
//! Every file is 0600 in a 0700 directory. Delete the directory to make a new CA.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

/// How long a server or client certificate of the local CA is valid.
pub(crate) const LEAF_DAYS: i64 = 365;
/// How long the local CA is valid.
const CA_DAYS: i64 = 3650;

/// The files of the local CA.
#[derive(Debug, Clone)]
pub(crate) struct LocalTls {
    pub ca: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl LocalTls {
    fn under(dir: &Path) -> LocalTls {
        LocalTls {
            ca: dir.join("ca.pem"),
            ca_key: dir.join("ca-key.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server-key.pem"),
            client_cert: dir.join("provisioner.pem"),
            client_key: dir.join("provisioner-key.pem"),
        }
    }

    /// The SHA-256 fingerprint of the CA certificate (hex pairs joined by `:`).
    pub(crate) fn fingerprint(&self) -> anyhow::Result<String> {
        let certs = weft_server::tls::read_certs(&self.ca)?;
        let digest = Sha256::digest(certs[0].as_ref());
        let pairs: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
        Ok(pairs.join(":"))
    }
}

/// The local CA of `data_dir` (`<data_dir>/tls`, made when missing) and fresh leaf certificates:
/// the server's names localhost, 127.0.0.1, ::1 and `bind` (the host name for a wildcard).
pub(crate) fn ensure(data_dir: &Path, bind: IpAddr) -> anyhow::Result<LocalTls> {
    let dir = data_dir.join("tls");
    let files = LocalTls::under(&dir);
    weft_server::private::dir(&dir)?;
    let write = |p: &Path, text: String| {
        weft_server::private::write(p, text.as_bytes())
            .with_context(|| format!("writing {}", p.display()))
    };
    let ca_key = match std::fs::read_to_string(&files.ca_key) {
        Ok(pem) if files.ca.is_file() => KeyPair::from_pem(&pem)
            .with_context(|| format!("reading {}", files.ca_key.display()))?,
        _ => {
            let key = KeyPair::generate()?;
            write(&files.ca, ca_params()?.self_signed(&key)?.pem())?;
            write(&files.ca_key, key.serialize_pem())?;
            key
        }
    };
    // The same name and key as ca.pem: what it signs chains to ca.pem.
    let ca = ca_params()?.self_signed(&ca_key)?;
    let mut sans = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if bind.is_unspecified() {
        // Every address of the machine: others reach it by its name.
        sans.extend(host_name());
    } else if !bind.is_loopback() {
        sans.push(bind.to_string());
    }
    let (cert, key) = leaf(
        "weft server",
        &sans,
        &[ExtendedKeyUsagePurpose::ServerAuth],
        &ca,
        &ca_key,
    )?;
    write(&files.cert, cert)?;
    write(&files.key, key)?;
    // The embedded provisioner presents it to the server and serves its own API (on loopback)
    // with it.
    let loopback = ["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    let (cert, key) = leaf(
        "weft-up provisioner",
        &loopback,
        &[
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ],
        &ca,
        &ca_key,
    )?;
    write(&files.client_cert, cert)?;
    write(&files.client_key, key)?;
    Ok(files)
}

/// This machine's host name, when it is one a certificate can hold.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    (valid && name != "localhost").then(|| name.to_string())
}

fn ca_params() -> anyhow::Result<CertificateParams> {
    let mut ca = CertificateParams::default();
    ca.distinguished_name = name("weft local CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = OffsetDateTime::now_utc();
    ca.not_before = now - Duration::days(1);
    ca.not_after = now + Duration::days(CA_DAYS);
    Ok(ca)
}

/// A certificate for `usages` signed by the CA; returns (certificate, key) as PEM.
fn leaf(
    common: &str,
    sans: &[String],
    usages: &[ExtendedKeyUsagePurpose],
    ca: &Certificate,
    ca_key: &KeyPair,
) -> anyhow::Result<(String, String)> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name = name(common);
    p.subject_alt_names = sans.iter().map(|s| san(s)).collect::<anyhow::Result<_>>()?;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = usages.to_vec();
    p.use_authority_key_identifier_extension = true;
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(LEAF_DAYS) - Duration::hours(2);
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, ca, ca_key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn name(common: &str) -> DistinguishedName {
    let mut n = DistinguishedName::new();
    n.push(DnType::CommonName, common);
    n
}

fn san(s: &str) -> anyhow::Result<SanType> {
    Ok(match s.parse::<IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(s.try_into()?),
    })
}
