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

use super::{BgpNode, clock, kernel_log::KernelLog};

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
    /// The last read that had the route, before `from`.
    pub seen: Duration,
    /// The first read that had it again (none: still missing when sampling stopped).
    pub back: Option<Duration>,
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
    /// Samples in which a route was missing from the kernel while BIRD kept it: BIRD 1.6
    /// replacing it there by delete + add (told by BIRD's own log of its kernel routes:
    /// see [`crate::bgp`]), counted apart.
    pub replaced: usize,
    /// The longest such gap (from the last read that had the route to the first that had
    /// it again: an upper bound).
    pub longest_swap: Duration,
    /// The longest time between the starts of two rounds (100 ms when the checker keeps
    /// its pace): a node read once a round, a route gone for one read is bounded by the
    /// reads around it, so slow rounds make long bounds.
    pub longest_round: Duration,
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

/// How often every pair is sampled.
const PERIOD: Duration = Duration::from_millis(100);

/// How far around a window BIRD's log is searched for the route's removal: the lab
/// stamps each line when it reads it from BIRD's stderr (at or after BIRD wrote it, and
/// BIRD writes it before it acts), so a removal inside a window may be stamped a little
/// later, and one stamped a little earlier may belong to it.
const LOG_SLACK: Duration = Duration::from_secs(1);

/// A route found gone is read again at once, this far apart (see the sampling loop)...
const REREAD_EVERY: Duration = Duration::from_millis(5);
/// ...the spaced re-reads taking at most about this much of a round in all (a reflector
/// that restarts takes its route from every node at once: their re-reads must not
/// stretch the round).
const REREAD_BUDGET: Duration = Duration::from_millis(50);

/// A window closes: the route is back at `read_at`.
fn back(out: &mut Samples, mut m: Missing, read_at: Duration) {
    if super::trace() {
        eprintln!(
            "route checker: {} -> {} gone {:.3}..{:.3} s ({} samples), back by {:.3} s: \
             a gap of at most {} ms",
            m.origin,
            m.node,
            m.from.as_secs_f64(),
            m.to.as_secs_f64(),
            m.samples,
            read_at.as_secs_f64(),
            read_at.saturating_sub(m.seen).as_millis(),
        );
    }
    m.back = Some(read_at);
    out.missing.push(m);
}

/// Sorts the windows in `out.missing` by what the node's BIRD did meanwhile.
///
/// A route leaves a node's kernel in two ways: BIRD removes it (its table has no route
/// for the prefix any more: a routing loss), or BIRD replaces it, which BIRD 1.6 does by
/// a delete and then an add. Calico's ADD-PATH and `merge paths on` make replacements
/// constant (every change among a prefix's paths re-exports it: hundreds of thousands in
/// a run of the scenarios), and in this lab a BIRD waits between the two for up to
/// seconds: its add waits for the kernel's RTNL lock (its kernel stack in
/// `inet_rtm_newroute`, in `D` state), which every node's BIRD shares in the lab's one
/// kernel, while `birdc` shows the route in BIRD's table (benches/README.md, issue 45,
/// 2026-12-02). BIRD logs both (`debug { routes }`,
/// which the lab adds to Calico's kernel protocol), so the log tells them apart: a
/// window with no removal of the prefix logged within [`LOG_SLACK`] of it, on a node
/// whose log records kernel routes and no netlink error (an add that failed would leave
/// the route out), was a replacement — BIRD kept the route, its kernel was without it
/// between the delete and the add — and counts apart ([`Samples::replaced`], the longest
/// in [`Samples::longest_swap`]). Every other window stays missing: one still open at
/// the end, one with a removal near it, one on a node whose log cannot tell.
fn sort_windows(out: &mut Samples, started_ms: u64, nodes: &BTreeMap<String, BgpNode>) {
    let mut logs: BTreeMap<String, KernelLog> = BTreeMap::new();
    for m in std::mem::take(&mut out.missing) {
        let (Some(back), Some(node), Some(origin)) =
            (m.back, nodes.get(&m.node), nodes.get(&m.origin))
        else {
            out.missing.push(m);
            continue;
        };
        let log = logs
            .entry(m.node.clone())
            .or_insert_with(|| KernelLog::read(&node.dir.join("bird.err.log"), started_ms));
        let removed = log.removed_between(
            &origin.block,
            m.seen.saturating_sub(LOG_SLACK),
            back + LOG_SLACK,
        );
        if log.tells() && !removed {
            out.replaced += m.samples;
            out.longest_swap = out.longest_swap.max(back.saturating_sub(m.seen));
        } else {
            out.missing.push(m);
        }
    }
}

/// `NETPOLICY_BGP_TRACE`: a route gone for three samples, as the node's kernel has it
/// and where its BIRD is (its kernel stack: blocked in a netlink request, or not),
/// printed once for the window. Reads files only: the sampling thread must not wait on
/// BIRD (`birdc` here stalled rounds for seconds while BIRD was busy).
fn explain(node: &BgpNode, block: &str) {
    let pid = node.bird_pid().unwrap_or(0);
    let read = |what: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{what}"))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/route")).unwrap_or_default();
    eprintln!(
        "route checker: {block} gone from {} for 3 samples at {}: kernel table {} lines; \
         BIRD {} in {} [{}]",
        node.name,
        super::clock(),
        table.lines().count(),
        read("stat").split(' ').nth(2).unwrap_or("?"),
        read("wchan"),
        read("stack"),
    );
}

/// Samples every (origin, node) pair every 100 ms in a thread of its own until stopped.
#[derive(Debug)]
pub struct RouteChecker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Samples>>,
}

/// Raises the calling thread's priority. The checker must not be starved by the lab it watches (two cores run every
/// node's BIRD, confd and status reporter): a round that waits half a second
/// bounds a 10 ms gap by half a second. Niced to -10 its rounds still came
/// 550-650 ms apart at 24 nodes (about 80 busy processes), so its thread runs
/// real-time (`chrt --fifo`, a round's reads take a few ms of CPU), niced
/// where that is refused, said if both are.
fn raise_priority() {
    if let Ok(me) = std::fs::read_link("/proc/thread-self") {
        let tid = me
            .file_name()
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        let run = |program: &str, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .arg(&tid)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !run("chrt", &["--fifo", "-p", "10"]) && !run("renice", &["-n", "-10", "-p"]) {
            eprintln!("route checker: could not raise its priority (chrt, renice)");
        }
    }
}

impl RouteChecker {
    pub(crate) fn start(checked: Arc<Mutex<Vec<BgpNode>>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            raise_priority();
            let t0 = Instant::now();
            let started_ms = super::day_ms();
            let mut out = Samples {
                started: clock(),
                ..Samples::default()
            };
            // Every node sampled, for reading its BIRD's log at the end.
            let mut seen_nodes: BTreeMap<String, BgpNode> = BTreeMap::new();
            let mut open: BTreeMap<(String, String), Missing> = BTreeMap::new();
            // Per node, when it was last read; per open window, the last read that
            // still had the route.
            let mut last_read: BTreeMap<String, Duration> = BTreeMap::new();
            let mut round_at: Option<Duration> = None;
            while !flag.load(Ordering::Relaxed) {
                let at = t0.elapsed();
                if let Some(before) = round_at.replace(at) {
                    out.longest_round = out.longest_round.max(at.saturating_sub(before));
                }
                // Held for the whole round: a node leaving (`BgpLab::remove_node`) waits
                // for the round, so no round reads a node that is being taken down.
                let guard = checked
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let nodes = guard.clone();
                for n in &nodes {
                    seen_nodes
                        .entry(n.name.clone())
                        .or_insert_with(|| n.clone());
                }
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
                // Time the round has spent on spaced re-reads (see below).
                let mut reread_spent = Duration::ZERO;
                for node in &nodes {
                    connections += node.bgp_connections();
                    // Times are those of this node's read (a round reads the nodes one
                    // after the other, slowly on a loaded machine).
                    let read_at = t0.elapsed();
                    let before = last_read
                        .insert(node.name.clone(), read_at)
                        .unwrap_or(read_at);
                    let routes = node.routes().unwrap_or_default();
                    // Routes this read found gone that the last one had.
                    let mut fresh: Vec<((String, String), &str)> = Vec::new();
                    for origin in &nodes {
                        if origin.name == node.name {
                            continue;
                        }
                        let key = (origin.name.clone(), node.name.clone());
                        if routes.contains(&origin.block) {
                            if let Some(m) = open.remove(&key) {
                                back(&mut out, m, read_at);
                            }
                        } else {
                            if !open.contains_key(&key) {
                                fresh.push((key.clone(), &origin.block));
                            }
                            let m = open.entry(key).or_insert_with(|| Missing {
                                origin: origin.name.clone(),
                                node: node.name.clone(),
                                from: read_at,
                                to: read_at,
                                samples: 0,
                                seen: before,
                                back: None,
                            });
                            m.to = read_at;
                            m.samples += 1;
                            if super::trace() && m.samples == 3 {
                                explain(node, &origin.block);
                            }
                        }
                    }
                    // A route that just went is read again at once, then a few times a
                    // few ms apart: one that is back (a kernel swap, BIRD's delete +
                    // add) is then bounded by this re-read, not by the next round's read
                    // of the node, which on a loaded machine comes hundreds of ms later.
                    // The first re-read costs a read of the table and is always made
                    // (a reflector that restarts spends the round's budget on its own
                    // route at every node before the round reaches the others); the
                    // spaced ones share the round's REREAD_BUDGET.
                    let mut spaced = false;
                    while !fresh.is_empty() && (!spaced || reread_spent < REREAD_BUDGET) {
                        let started = Instant::now();
                        if spaced {
                            std::thread::sleep(REREAD_EVERY);
                        }
                        let again_at = t0.elapsed();
                        let routes = node.routes().unwrap_or_default();
                        fresh.retain(|(key, block)| {
                            if !routes.contains(*block) {
                                return true;
                            }
                            if let Some(m) = open.remove(key) {
                                back(&mut out, m, again_at);
                            }
                            false
                        });
                        if spaced {
                            reread_spent += started.elapsed();
                        }
                        spaced = true;
                    }
                }
                drop(guard);
                out.timeline.push((at, open.len(), connections / 2));
                out.rounds += 1;
                let next = PERIOD * u32::try_from(out.rounds).unwrap_or(u32::MAX);
                if let Some(wait) = next.checked_sub(t0.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            out.missing.extend(open.into_values());
            sort_windows(&mut out, started_ms, &seen_nodes);
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
