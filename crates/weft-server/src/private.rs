//! Files only their owner may read: the data dir (0700), the SQLite store with its WAL and
//! shared-memory files, keys and certificates (0600). Any local user could otherwise read every
//! credential the store holds.

use std::io::{self, Write};
use std::path::Path;

/// Creates `dir` (and parents) and makes it readable by its owner only.
pub fn dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    set_mode(dir, 0o700)
}

/// Writes `bytes` to `path` through a temporary file, readable by its owner only.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    set_mode(path, 0o600)
}

/// Opens `path` for writing, created 0600 if missing (truncated).
fn create(path: &Path) -> io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)
}

/// Makes the SQLite database of `url` (`sqlite://PATH?...`) and its `-wal`, `-shm` and
/// `-journal` files readable by their owner only, creating the database file empty (0600) when
/// missing so that SQLite, which gives its side files the database's mode, never makes them
/// world-readable. An in-memory database has no files.
pub fn sqlite_files(url: &str) -> io::Result<()> {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        return Ok(());
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path.starts_with(":memory:") {
        return Ok(());
    }
    let db = Path::new(path);
    if !db.exists() {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        match opts.open(db) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let p = format!("{path}{suffix}");
        if Path::new(&p).exists() {
            set_mode(Path::new(&p), 0o600)?;
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    let _ = (path, mode);
    Ok(())
}
