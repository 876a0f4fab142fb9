//! The engine's clock: every reading of time in the engine goes through the [`Clock`] its
//! [`Engine`](crate::Engine) holds, so a test can pause time and move it by hand
//! ([`ManualClock`]) instead of sleeping, and see a lease run out, a cluster expire or a retry fall
//! due at the moment it chooses.
//!
//! A clock gives two readings: the wall clock ([`Clock::now_ms`], milliseconds since the Unix
//! epoch), which every time the engine stores or compares with a stored time is, and a monotonic
//! one ([`Clock::monotonic`]), for how long something in this process has been held (the caches'
//! time to live), which never goes back when the wall clock is set.
//!
//! [`Stopwatch`] measures real time spent, whatever the engine's clock says: how long a webhook's
//! answer took, how long a step has been retried, when a background loop last swept. This module
//! is the only one of the engine that reads the system's clocks.

// The one module that reads the system's clocks (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where the engine reads the time.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Time since an origin of the clock's own; never goes back.
    fn monotonic(&self) -> Duration;
}

/// The system's clocks.
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// The system's clocks; the monotonic reading counts from now.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A paused clock that moves only when told: [`set`](ManualClock::set) the wall clock,
/// [`advance`](ManualClock::advance) both readings. For tests.
pub struct ManualClock {
    wall_ms: AtomicI64,
    monotonic_ms: AtomicU64,
}

impl ManualClock {
    /// A clock stopped at `wall_ms` milliseconds since the epoch.
    pub fn at(wall_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            wall_ms: AtomicI64::new(wall_ms),
            monotonic_ms: AtomicU64::new(0),
        })
    }

    /// Moves both readings forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.wall_ms
            .fetch_add(i64::try_from(ms).unwrap_or(i64::MAX), Ordering::SeqCst);
        self.monotonic_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the wall clock (forward or back, as a system's clock may be set); the monotonic
    /// reading stays.
    pub fn set(&self, wall_ms: i64) {
        self.wall_ms.store(wall_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.wall_ms.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_millis(self.monotonic_ms.load(Ordering::SeqCst))
    }
}

/// Real time spent since it started, for what measures the process's own work rather than a
/// rule of the domain (a paused clock must not stop a give-up bound or a loop's pace).
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// A stopwatch started now.
    pub fn start() -> Stopwatch {
        Stopwatch(Instant::now())
    }

    /// The real time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// The system's wall clock in milliseconds since the Unix epoch, for callers outside the engine
/// (the server's audit records and metrics, the CLI); the engine reads [`Engine::clock`].
///
/// [`Engine::clock`]: crate::Engine::clock
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_never_back_monotonically() {
        let c = ManualClock::at(1_000);
        assert_eq!((c.now_ms(), c.monotonic()), (1_000, Duration::ZERO));
        c.advance(Duration::from_millis(250));
        assert_eq!(
            (c.now_ms(), c.monotonic()),
            (1_250, Duration::from_millis(250))
        );
        // Setting the wall clock back leaves the monotonic reading where it was.
        c.set(500);
        assert_eq!(
            (c.now_ms(), c.monotonic()),
            (500, Duration::from_millis(250))
        );
    }

    #[test]
    fn the_system_clock_reads_the_wall_clock() {
        let c = SystemClock::new();
        let (before, read, after) = (now_ms(), c.now_ms(), now_ms());
        assert!(before <= read && read <= after);
        let first = c.monotonic();
        assert!(c.monotonic() >= first);
    }
}
