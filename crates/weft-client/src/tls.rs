//! TLS for the listeners (rustls with ring; no OpenSSL). A listener's certificate and key come
//! from PEM files that are read again when they change, so a certificate rotates without a
//! restart: [`Certificates`] checks the files' modification times every [`RELOAD_EVERY`] and
//! swaps the key in for new handshakes (a file that fails to load keeps the old one, and says
//! so). The internal port may require client certificates signed by `client_ca` (mutual TLS).
//! Only TLS 1.2 and 1.3 with rustls's default (forward-secret AEAD) cipher suites are offered.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::ring::default_provider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// How often the certificate files are checked for changes.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// Where a listener's certificate chain and key are, and (internal port) whose client
/// certificates it requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The PEM file of the listener's certificate chain, leaf first.
    pub cert: PathBuf,
    /// The PEM file of the certificate's private key.
    pub key: PathBuf,
    /// A PEM file of the CAs whose client certificates the listener requires; `None` asks for
    /// no client certificate.
    pub client_ca: Option<PathBuf>,
}

fn bad(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

/// Reads a PEM certificate chain (leaf first).
pub fn read_certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(path, format!("cannot read certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(path, format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(bad(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| bad(path, format!("no usable private key: {e}")))
}

/// The certificate and key of `files`, checked to belong together.
fn load_key(files: &TlsFiles) -> io::Result<Arc<CertifiedKey>> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let ck = CertifiedKey::from_der(certs, key, &default_provider()).map_err(|e| {
        bad(
            &files.key,
            format!("does not match {}: {e}", files.cert.display()),
        )
    })?;
    Ok(Arc::new(ck))
}

/// The modification times of the files, to notice a change.
fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    [&files.cert, &files.key]
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

/// A listener's current certificate, reloaded from its files when they change.
#[derive(Debug)]
pub struct Certificates {
    files: TlsFiles,
    current: RwLock<(Arc<CertifiedKey>, Vec<Option<SystemTime>>)>,
}

impl Certificates {
    /// Loads the files once (an error names the file and what is wrong with it).
    pub fn load(files: TlsFiles) -> io::Result<Arc<Certificates>> {
        let key = load_key(&files)?;
        let stamp = stamps(&files);
        Ok(Arc::new(Certificates {
            files,
            current: RwLock::new((key, stamp)),
        }))
    }

    /// Loads the files again if they changed; returns whether the served certificate changed.
    pub fn reload_if_changed(&self) -> bool {
        let now = stamps(&self.files);
        if self.current.read().map(|c| c.1 == now).unwrap_or(true) {
            return false;
        }
        match load_key(&self.files) {
            Ok(key) => {
                if let Ok(mut c) = self.current.write() {
                    *c = (key, now);
                }
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                true
            }
            Err(e) => {
                // Half-written files are common during a rotation: keep serving the old key and
                // try again at the next check.
                tracing::warn!(error = %e, "TLS certificate files changed but do not load; keeping the current certificate");
                false
            }
        }
    }

    /// Checks the files every [`RELOAD_EVERY`] until the returned task is aborted.
    pub fn watch(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RELOAD_EVERY);
            loop {
                tick.tick().await;
                me.reload_if_changed();
            }
        })
    }

    /// A rustls configuration serving these certificates (HTTP/2 and HTTP/1.1 by ALPN), with
    /// client certificates required when the files name a client CA.
    pub fn server_config(self: &Arc<Self>) -> io::Result<Arc<ServerConfig>> {
        let builder = ServerConfig::builder_with_provider(Arc::new(default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(io::Error::other)?;
        let builder = match &self.files.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for c in read_certs(ca)? {
                    roots.add(c).map_err(|e| bad(ca, e))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::new(default_provider()),
                )
                .build()
                .map_err(|e| bad(ca, e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.0.clone())
    }
}
