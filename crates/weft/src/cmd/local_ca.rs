//! `weft up --tls`: a certificate authority of this machine's own, made once in the data dir,
//! with a server certificate for loopback (and the bind address) and a client certificate for the
//! embedded provisioner, so both ports serve HTTPS and the provisioner port requires mutual TLS
//! without anyone handling certificates. Every file is 0600 in a 0700 directory. If any file is
//! missing, all are made again (a new CA: clients must trust it anew).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use sha2::{Digest, Sha256};

/// The files of the local CA.
#[derive(Debug, Clone)]
pub struct LocalTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl LocalTls {
    fn under(dir: &Path) -> LocalTls {
        LocalTls {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server-key.pem"),
            client_cert: dir.join("provisioner.pem"),
            client_key: dir.join("provisioner-key.pem"),
        }
    }

    fn all(&self) -> [&PathBuf; 5] {
        [
            &self.ca,
            &self.cert,
            &self.key,
            &self.client_cert,
            &self.client_key,
        ]
    }

    /// The SHA-256 fingerprint of the CA certificate (hex pairs joined by `:`).
    pub fn fingerprint(&self) -> anyhow::Result<String> {
        let certs = weft_server::tls::read_certs(&self.ca)?;
        let digest = Sha256::digest(certs[0].as_ref());
        let pairs: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
        Ok(pairs.join(":"))
    }
}

/// The local CA of `data_dir` (`<data_dir>/tls`), made now if any file is missing. The server
/// certificate names localhost, 127.0.0.1, ::1 and `bind` (unless it is a wildcard).
pub fn ensure(data_dir: &Path, bind: IpAddr) -> anyhow::Result<LocalTls> {
    let dir = data_dir.join("tls");
    let files = LocalTls::under(&dir);
    if files.all().iter().all(|p| p.is_file()) {
        return Ok(files);
    }
    weft_server::private::dir(&dir)?;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = name("weft local CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;

    let mut sans = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if !bind.is_unspecified() && !bind.is_loopback() {
        sans.push(bind.to_string());
    }
    let mut server = CertificateParams::new(Vec::<String>::new())?;
    server.distinguished_name = name("weft server");
    server.subject_alt_names = sans.iter().map(|s| san(s)).collect::<anyhow::Result<_>>()?;
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate()?;
    let server_cert = server.signed_by(&server_key, &ca_cert, &ca_key)?;

    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client.distinguished_name = name("weft-up provisioner");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate()?;
    let client_cert = client.signed_by(&client_key, &ca_cert, &ca_key)?;

    let write = |p: &Path, text: String| {
        weft_server::private::write(p, text.as_bytes())
            .with_context(|| format!("writing {}", p.display()))
    };
    write(&files.ca, ca_cert.pem())?;
    write(&files.cert, server_cert.pem())?;
    write(&files.key, server_key.serialize_pem())?;
    write(&files.client_cert, client_cert.pem())?;
    write(&files.client_key, client_key.serialize_pem())?;
    // The CA's key is not kept: nothing more is ever signed with it.
    Ok(files)
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
