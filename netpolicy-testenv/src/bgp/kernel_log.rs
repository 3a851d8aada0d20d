//! BIRD's record of the routes it exports to its node's kernel. With `debug { routes }`
//! on Calico's kernel protocol (the lab adds it) BIRD logs every route it adds, replaces
//! and removes there, one line each; the lab stamps each line with the wall clock when it
//! reads it (`HH:MM:SS.mmm bird: kernel1 < removed 10.78.3.0/26 via …`).

use std::{collections::BTreeMap, path::Path, time::Duration};

/// One node's kernel-route log, read once.
#[derive(Debug, Default)]
pub(crate) struct KernelLog {
    /// Per prefix, when BIRD removed it (since the checker started; may be negative for
    /// lines stamped before, hence `i64` milliseconds).
    removed: BTreeMap<String, Vec<i64>>,
    /// Kernel-route lines of any kind.
    lines: usize,
    /// BIRD's netlink errors ("Netlink: …"): an add that failed leaves a route out of
    /// the kernel without a removal.
    errors: usize,
}

const DAY_MS: i64 = 86_400_000;

impl KernelLog {
    /// Reads `path` (a `bird.err.log`); times count from `started_ms`, the checker's
    /// start as milliseconds since midnight UTC (a line across midnight from it counts
    /// to the nearer side).
    pub(crate) fn read(path: &Path, started_ms: u64) -> Self {
        let mut out = Self::default();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let start = i64::try_from(started_ms).unwrap_or(0);
        for line in text.lines() {
            if line.contains("Netlink:") {
                out.errors += 1;
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(at), Some(proto), Some("<"), Some(kind), Some(prefix)) =
                (f.first(), f.get(2), f.get(3).copied(), f.get(4), f.get(5))
            else {
                continue;
            };
            if !proto.starts_with("kernel") {
                continue;
            }
            out.lines += 1;
            if *kind != "removed" {
                continue;
            }
            let Some(ms) = parse_clock(at) else { continue };
            let mut since = (ms - start).rem_euclid(DAY_MS);
            if since > DAY_MS / 2 {
                since -= DAY_MS;
            }
            out.removed
                .entry((*prefix).to_owned())
                .or_default()
                .push(since);
        }
        out
    }

    /// The log can tell a replacement from a removal: it records kernel routes (the
    /// `debug { routes }` the lab adds took effect) and no netlink error.
    pub(crate) fn tells(&self) -> bool {
        self.lines > 0 && self.errors == 0
    }

    /// BIRD removed `prefix` from the kernel at a time stamped within `from..=to` (since
    /// the checker started).
    pub(crate) fn removed_between(&self, prefix: &str, from: Duration, to: Duration) -> bool {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        self.removed
            .get(prefix)
            .is_some_and(|at| at.iter().any(|t| (ms(from)..=ms(to)).contains(t)))
    }
}

/// `HH:MM:SS.mmm` as milliseconds since midnight.
fn parse_clock(at: &str) -> Option<i64> {
    let (hms, milli) = at.split_once('.')?;
    let mut parts = hms.split(':').map(str::parse::<i64>);
    let (h, m, s) = (
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    );
    Some(((h * 60 + m) * 60 + s) * 1000 + milli.parse::<i64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str, started: &str) -> KernelLog {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!("kernel-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("{n}.log"));
        std::fs::write(&path, text).unwrap();
        let out = KernelLog::read(&path, u64::try_from(parse_clock(started).unwrap()).unwrap());
        let _ = std::fs::remove_file(&path);
        out
    }

    #[test]
    fn a_removal_is_found_by_prefix_and_time_and_a_replacement_is_not_one() {
        let l = log(
            "10:00:01.000 bird: kernel1 < replaced 10.78.3.0/26 via 10.77.0.3 on eth0\n\
             10:00:02.500 bird: kernel1 < removed 10.78.3.0/26 via 10.77.0.3 on eth0\n\
             10:00:02.600 bird: Node_10_77_0_3: State changed to stop\n",
            "10:00:00.000",
        );
        assert!(l.tells());
        let s = Duration::from_secs;
        assert!(l.removed_between("10.78.3.0/26", s(2), s(3)));
        assert!(
            !l.removed_between("10.78.3.0/26", s(0), s(2)),
            "only replaced then"
        );
        assert!(
            !l.removed_between("10.78.4.0/26", s(0), s(9)),
            "another prefix"
        );
    }

    #[test]
    fn a_log_without_kernel_routes_or_with_a_netlink_error_cannot_tell() {
        assert!(
            !log(
                "10:00:01.000 bird: Node_x: State changed to up\n",
                "10:00:00.000"
            )
            .tells()
        );
        let l = log(
            "10:00:01.000 bird: kernel1 < replaced 10.78.3.0/26 via 10.77.0.3 on eth0\n\
             10:00:01.001 bird: Netlink: File exists\n",
            "10:00:00.000",
        );
        assert!(!l.tells());
    }

    #[test]
    fn times_count_across_midnight() {
        let l = log(
            "00:00:00.400 bird: kernel1 < removed 10.78.3.0/26 via 10.77.0.3 on eth0\n",
            "23:59:59.900",
        );
        let ms = Duration::from_millis;
        assert!(l.removed_between("10.78.3.0/26", ms(400), ms(600)));
        assert!(!l.removed_between("10.78.3.0/26", ms(0), ms(400)));
    }
}
