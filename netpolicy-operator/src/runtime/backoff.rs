//! Jitter and the informers' watch reconnect backoff: a leaf module that the runner and
//! the informers both use (neither imports the other for it).

use std::{
    hash::{BuildHasher, Hasher},
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

/// `d` spread uniformly over [0.8 d, 1.2 d).
pub fn jitter(d: Duration) -> Duration {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(SEQ.fetch_add(1, Ordering::Relaxed));
    let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    d.mul_f64(0.8 + 0.4 * unit)
}

/// The longest wait between two attempts to resume a broken watch. kube's default
/// (0.8 s doubling to 30 s) left the operator's caches up to a minute behind an API
/// server that had come back from a 30 s restart, while its jobs ran on them; one
/// attempt per kind every 5 s against a server that is down costs nothing.
pub(crate) const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// Errors this far apart start the reconnect backoff from its first step again.
pub(crate) const RECONNECT_RESET: Duration = Duration::from_secs(30);

/// How a broken watch is resumed: 0.5 s doubling to [`RECONNECT_MAX`], jittered.
#[derive(Debug)]
pub(crate) struct Reconnect(Duration);

impl Default for Reconnect {
    fn default() -> Self {
        Self(Duration::from_millis(500))
    }
}

impl Iterator for Reconnect {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.0;
        self.0 = (self.0 * 2).min(RECONNECT_MAX);
        Some(jitter(d))
    }
}

impl kube::runtime::utils::Backoff for Reconnect {
    fn reset(&mut self) {
        *self = Self::default();
    }
}
