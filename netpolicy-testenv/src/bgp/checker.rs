//! The route checker: every (origin, node) route pair sampled every 100 ms, with the
//! BGP sessions up, in a thread of its own.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{BgpNode, clock};

/// A window in which one origin's route was missing from one node's kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The node whose block route was missing.
    pub origin: String,
    /// The node whose kernel missed it.
    pub node: String,
    /// From, since the checker started.
    pub from: Duration,
    /// To (the last sample it was missing in).
    pub to: Duration,
    /// Samples it was missing in.
    pub samples: usize,
}

/// What a [`RouteChecker`] saw.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Sampling rounds (each reads every node's table once).
    pub rounds: usize,
    /// (origin, node) pairs checked per round (the most in any round).
    pub pairs: usize,
    /// Every window a pair was missing in.
    pub missing: Vec<Missing>,
    /// Each round: when, how many pairs were missing, how many BGP sessions were up
    /// (established TCP connections on port 179, each counted once).
    pub timeline: Vec<(Duration, usize, usize)>,
    /// The wall clock (UTC) when sampling started: times above count from it.
    pub started: String,
    /// Samples in which a route was missing but back within 200 ms (re-read every
    /// 10 ms): BIRD replacing it (delete, then add).
    pub replaced: usize,
    /// The longest such swap seen (to the next 10 ms).
    pub longest_swap: Duration,
}

impl Samples {
    /// Missing samples, in all.
    #[must_use]
    pub fn missing_samples(&self) -> usize {
        self.missing.iter().map(|m| m.samples).sum()
    }

    /// The timeline in `every`-long rows: `| t (s) | sessions (min–max) | pairs missing (max) |`
    /// as a Markdown table, for a report or a guide.
    #[must_use]
    pub fn table(&self, every: Duration) -> String {
        let mut out = String::from(
            "| t (s) | BGP sessions up | (origin, node) pairs missing |\n|---|---|---|\n",
        );
        let step = every.as_millis().max(1);
        let mut rows: BTreeMap<u128, (usize, usize, usize)> = BTreeMap::new();
        for (at, missing, sessions) in &self.timeline {
            let r = rows
                .entry(at.as_millis() / step)
                .or_insert((usize::MAX, 0, 0));
            r.0 = r.0.min(*sessions);
            r.1 = r.1.max(*sessions);
            r.2 = r.2.max(*missing);
        }
        for (i, (lo, hi, missing)) in rows {
            let t = Duration::from_millis(u64::try_from(i * step).unwrap_or(u64::MAX));
            let sessions = if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}–{hi}")
            };
            out.push_str(&format!(
                "| {:.1} | {sessions} | {missing} |\n",
                t.as_secs_f64()
            ));
        }
        out
    }
}

/// Re-reads of a node's table (10 ms apart) before a missing route counts as missing:
/// 200 ms. BIRD 1.6 swaps a kernel route by delete + add; when a new session brings a
/// path for every route at once on a loaded machine (12 to 28 BIRD pairs on 2 cores)
/// the add was seen up to 200 ms after the delete. The longest swap is reported
/// ([`Samples::longest_swap`]).
const SWAP_READS: usize = 20;

/// Samples every (origin, node) pair every 100 ms in a thread of its own until stopped.
#[derive(Debug)]
pub struct RouteChecker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Samples>>,
}

impl RouteChecker {
    pub(crate) fn start(checked: Arc<Mutex<Vec<BgpNode>>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut out = Samples {
                started: clock(),
                ..Samples::default()
            };
            let mut open: BTreeMap<(String, String), Missing> = BTreeMap::new();
            while !flag.load(Ordering::Relaxed) {
                let at = t0.elapsed();
                // Held for the whole round: a node leaving (`BgpLab::remove_node`) waits
                // for the round, so no round reads a node that is being taken down.
                let guard = checked
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let nodes = guard.clone();
                out.pairs = out.pairs.max(nodes.len() * nodes.len().saturating_sub(1));
                // A node that left: its open windows end here.
                let gone: Vec<(String, String)> = open
                    .keys()
                    .filter(|(o, n)| {
                        let has = |name: &String| nodes.iter().any(|x| x.name == *name);
                        !has(o) || !has(n)
                    })
                    .cloned()
                    .collect();
                for k in gone {
                    out.missing.extend(open.remove(&k));
                }
                let mut connections = 0;
                for node in &nodes {
                    connections += node.bgp_connections();
                    let mut routes = node.routes().unwrap_or_default();
                    // BIRD 1.6 changes a kernel route by deleting it and adding the new
                    // one (its netlink code does not use replace): a sample can fall in
                    // between. A route missing here is read again every 10 ms for 200 ms;
                    // one back by then counts as a swap (with how long it was seen
                    // missing), not as missing.
                    // Only a route that was there in the last sample is read again (one
                    // already missing is not: a session restart costs one re-read).
                    let gone = nodes.iter().any(|o| {
                        o.name != node.name
                            && !routes.contains(&o.block)
                            && !open.contains_key(&(o.name.clone(), node.name.clone()))
                    });
                    let mut again = Vec::new();
                    while gone && again.len() < SWAP_READS {
                        std::thread::sleep(Duration::from_millis(10));
                        again.push(node.routes().unwrap_or_default());
                    }
                    for origin in &nodes {
                        if origin.name == node.name {
                            continue;
                        }
                        let key = (origin.name.clone(), node.name.clone());
                        if !routes.contains(&origin.block)
                            && let Some(k) = again.iter().position(|r| r.contains(&origin.block))
                        {
                            out.replaced += 1;
                            let gap = Duration::from_millis(10) * u32::try_from(k + 1).unwrap_or(1);
                            out.longest_swap = out.longest_swap.max(gap);
                            routes.insert(origin.block.clone());
                        }
                        if routes.contains(&origin.block) {
                            if let Some(m) = open.remove(&key) {
                                out.missing.push(m);
                            }
                        } else {
                            let m = open.entry(key).or_insert_with(|| Missing {
                                origin: origin.name.clone(),
                                node: node.name.clone(),
                                from: at,
                                to: at,
                                samples: 0,
                            });
                            m.to = at;
                            m.samples += 1;
                        }
                    }
                }
                drop(guard);
                out.timeline.push((at, open.len(), connections / 2));
                out.rounds += 1;
                let next =
                    Duration::from_millis(100) * u32::try_from(out.rounds).unwrap_or(u32::MAX);
                if let Some(wait) = next.checked_sub(t0.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            out.missing.extend(open.into_values());
            out
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops sampling; what was seen.
    ///
    /// # Panics
    /// When the sampling thread panicked.
    #[must_use]
    pub fn stop(mut self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| panic!("the route checker panicked"))
            })
            .unwrap_or_default()
    }
}

impl Drop for RouteChecker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
