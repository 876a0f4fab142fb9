//! Provisioner tokens: the shared secret that the server and its provisioners present to each
//! other on the internal port and the provisioner's own port (`Authorization: Bearer TOKEN`).
//!
//! A token file holds one token per line (blank lines and `#` comments ignored). The first token
//! is the one presented; every token in the file is accepted. The file is read again whenever it
//! changes, so tokens rotate without a restart: add the new token as a second line everywhere,
//! then make it the first line on the server, then on the provisioners, then remove the old one.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// The header that carries a token.
pub const HEADER: &str = "authorization";

/// A token file, read again when its modification time or size changes.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    cache: Mutex<Cached>,
}

#[derive(Debug, Default)]
struct Cached {
    stamp: Option<(SystemTime, u64)>,
    tokens: Vec<String>,
}

impl Tokens {
    /// The token file at `path`; nothing is read until [`Tokens::load`].
    pub fn new(path: impl Into<PathBuf>) -> Tokens {
        Tokens {
            path: path.into(),
            cache: Mutex::default(),
        }
    }

    /// The token file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tokens in the file now (none when it cannot be read: then nothing is accepted).
    pub fn load(&self) -> Vec<String> {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if stamp.is_none() || c.stamp != stamp {
            c.tokens = std::fs::read_to_string(&self.path)
                .map(|t| parse(&t))
                .unwrap_or_default();
            c.stamp = stamp;
        }
        c.tokens.clone()
    }

    /// The `Authorization` header value to present, if the file holds a token.
    pub fn header_value(&self) -> Option<String> {
        self.load()
            .into_iter()
            .next()
            .map(|t| format!("Bearer {t}"))
    }

    /// Whether an `Authorization` header value presents a token of the file.
    pub fn accepts(&self, header: Option<&str>) -> bool {
        let Some(presented) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        self.load().iter().fold(false, |ok, t| {
            ok | same(t.as_bytes(), presented.trim().as_bytes())
        })
    }
}

fn parse(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// Compares in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Writes a new random token file at `path` (mode 0600) unless one exists; answers whether it
/// wrote one. `random` supplies the token's 32 bytes.
pub fn create_if_missing(path: &Path, random: [u8; 32]) -> std::io::Result<bool> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = match opts.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    writeln!(f, "weftp_{hex}")?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_accepted_the_first_is_presented_and_changes_are_seen() {
        let dir = std::env::temp_dir().join(format!("weft-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        std::fs::write(&path, "# comment\nnew\n\nold\n").unwrap();
        let t = Tokens::new(&path);
        assert_eq!(t.header_value().as_deref(), Some("Bearer new"));
        assert!(t.accepts(Some("Bearer old")) && t.accepts(Some("Bearer new")));
        assert!(!t.accepts(Some("Bearer ol")) && !t.accepts(Some("old")) && !t.accepts(None));
        std::fs::write(&path, "rotated-and-longer\n").unwrap();
        assert!(
            !t.accepts(Some("Bearer old")),
            "a rewritten file is read again"
        );
        assert!(t.accepts(Some("Bearer rotated-and-longer")));
        std::fs::remove_file(&path).unwrap();
        assert!(
            !t.accepts(Some("Bearer rotated-and-longer")),
            "no file, no token"
        );
        assert!(create_if_missing(&path, [7; 32]).unwrap());
        assert!(!create_if_missing(&path, [8; 32]).unwrap());
        assert!(t.header_value().unwrap().starts_with("Bearer weftp_0707"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
