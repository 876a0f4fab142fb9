//! weft-testkit: support for weft's tests. Not shipped.
//!
//! * [`TempPostgres`]: a PostgreSQL database of one's own. A throwaway server (initdb into a temp
//!   dir, fsync off, loopback only) is started once per process and shared by every handle alive at
//!   the same time; each handle gets a fresh database, so tests run in parallel. The server stops and
//!   its directory is deleted when the last handle drops. With `WEFT_TEST_POSTGRES_URL` set, an
//!   external server is used instead (a database with a random name is created in it per handle).
//! * [`require`]: skip a test when a component (PostgreSQL, docker, ...) is missing, except in CI
//!   (`CI=true`), where a missing component fails the test.
//! * [`temp_sqlite_url`]: a SQLite URL in a temp dir.

mod postgres;

pub use postgres::{postgres_available, TempPostgres};

/// A `sqlite://` URL for a database file `weft.db` inside `dir` (the store creates the file).
pub fn temp_sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("weft.db").display())
}

/// Whether this run is in CI, where missing components fail tests instead of skipping them.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `true` if `component` is available. Otherwise, in CI (`CI=true`) this panics, failing the test;
/// elsewhere it prints `skipping: ...` to stderr and returns `false`, and the test should return.
///
/// Known components: `postgres` (server binaries, or `WEFT_TEST_POSTGRES_URL`), `docker` (the CLI
/// and a reachable daemon socket). Any other name is looked up as an executable on `PATH`.
pub fn require(component: &str) -> bool {
    match probe(component) {
        Ok(()) => true,
        Err(why) => skip_or_fail(component, &why),
    }
}

/// Reports a missing component: panics in CI, otherwise prints why the test is skipped and
/// returns `false`.
pub fn skip_or_fail(component: &str, why: &str) -> bool {
    skip_or_fail_in(in_ci(), component, why)
}

fn skip_or_fail_in(ci: bool, component: &str, why: &str) -> bool {
    if ci {
        panic!("{component} is required in CI (CI=true) but {why}");
    }
    eprintln!("skipping: {component} is not available: {why} (set CI=true to make this a failure)");
    false
}

fn probe(component: &str) -> Result<(), String> {
    match component {
        "postgres" | "postgresql" => postgres_available(),
        "docker" => {
            find_executable("docker").ok_or("no `docker` on PATH")?;
            let socket = std::env::var("DOCKER_HOST")
                .ok()
                .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
                .unwrap_or_else(|| "/var/run/docker.sock".to_string());
            if std::env::var("DOCKER_HOST").is_ok_and(|h| !h.starts_with("unix://"))
                || std::path::Path::new(&socket).exists()
            {
                Ok(())
            } else {
                Err(format!("no docker daemon socket at {socket}"))
            }
        }
        other => find_executable(other)
            .map(|_| ())
            .ok_or_else(|| format!("no `{other}` executable on PATH")),
    }
}

/// The first `name` on `PATH` that is a file.
pub fn find_executable(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_url_points_into_the_dir() {
        let dir = tempfile::tempdir().unwrap();
        let url = temp_sqlite_url(&dir);
        assert!(url.starts_with("sqlite:///"), "{url}");
        assert!(url.ends_with("/weft.db"), "{url}");
        assert!(url.contains(dir.path().to_str().unwrap()));
    }

    #[test]
    fn a_missing_component_skips_outside_ci() {
        assert!(!skip_or_fail_in(false, "widget", "it is made up"));
    }

    #[test]
    #[should_panic(expected = "widget is required in CI")]
    fn a_missing_component_fails_in_ci() {
        skip_or_fail_in(true, "widget", "it is made up");
    }

    #[test]
    fn a_component_on_path_is_found_and_a_made_up_one_is_not() {
        assert!(probe("sh").is_ok());
        let err = probe("weft-no-such-tool-xyz").unwrap_err();
        assert!(err.contains("weft-no-such-tool-xyz"), "{err}");
    }
}
