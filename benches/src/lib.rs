//! Seeded workload generators for netpolicy's criterion benchmarks, and the naive
//! baselines they are measured against.
//!
//! Every bench runs our code and a named baseline on identical input in the same run
//! and prints the ratio (see `benches/README.md`).

use std::{collections::BTreeMap, fs, path::PathBuf};

use netpolicy_core::{
    merge::{NodeOutcome, Policy, merge},
    selector::Labels,
    spec::{LabelSelector, LabelSelectorRequirement, RouteSpec, RoutingSpec, RuleSpec, VlanSpec},
};

/// A small deterministic generator (SplitMix64), so inputs are the same in every run.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Label keys of the generated cluster.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// Node pool label.
pub const POOL: &str = "node.netpolicy.io/pool";
/// Instance type label (derived from the pool).
pub const INSTANCE: &str = "node.kubernetes.io/instance-type";
/// A label only some nodes carry.
pub const GPU: &str = "node.netpolicy.io/gpu";

/// Shape of the generated cluster.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Nodes.
    pub nodes: usize,
    /// Zones.
    pub zones: usize,
    /// Node pools (each spread over all zones).
    pub pools: usize,
    /// Instance types (pool `p` has type `p % types`).
    pub types: usize,
    /// NodeConfigs.
    pub configs: usize,
    /// Routes per NodeConfig.
    pub routes: usize,
    /// Rules per NodeConfig.
    pub rules: usize,
    /// VLANs per NodeConfig.
    pub vlans: usize,
}

impl Shape {
    /// The issue's workload: 15,000 nodes, 300 NodeConfigs of 50 routes, 10 rules and
    /// 5 VLANs each, with overlapping selectors.
    pub const ISSUE: Self = Self {
        nodes: 15_000,
        zones: 3,
        pools: 50,
        types: 8,
        configs: 300,
        routes: 50,
        rules: 10,
        vlans: 5,
    };
}

/// Node `k`'s labels: zone `k % zones`, pool `(k / zones) % pools`, its pool's instance
/// type, and a GPU label on one pool in five.
pub fn node_labels(shape: &Shape, k: usize, rng: &mut SplitMix64) -> Labels {
    let zone = k % shape.zones;
    let pool = (k / shape.zones + rng.below(2) as usize) % shape.pools;
    let mut l = Labels::new();
    l.insert(ZONE.into(), format!("zone-{zone}"));
    l.insert(POOL.into(), format!("pool-{pool}"));
    l.insert(INSTANCE.into(), format!("type-{}", pool % shape.types));
    l.insert("kubernetes.io/hostname".into(), format!("node-{k:05}"));
    if pool.is_multiple_of(5) {
        l.insert(GPU.into(), "true".into());
    }
    l
}

/// The generated nodes.
pub fn nodes(shape: &Shape, seed: u64) -> Vec<(String, Labels)> {
    let mut rng = SplitMix64(seed);
    (0..shape.nodes)
        .map(|k| (format!("node-{k:05}"), node_labels(shape, k, &mut rng)))
        .collect()
}

fn expr(key: &str, op: &str, values: &[String]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: values.to_vec(),
    }
}

/// Selector of NodeConfig `i`: zone-wide, pool-wide, pool-and-zone, and set-based ones
/// (instance types `In`, zone `NotIn`, GPU `Exists`/`DoesNotExist`), so selectors
/// overlap the way node-group configs do.
pub fn selector(shape: &Shape, i: usize) -> LabelSelector {
    let mut s = LabelSelector::default();
    match i % 6 {
        0 => {
            s.match_labels
                .insert(ZONE.into(), format!("zone-{}", i % shape.zones));
        }
        1 | 2 => {
            s.match_labels
                .insert(POOL.into(), format!("pool-{}", i % shape.pools));
        }
        3 => {
            s.match_labels
                .insert(POOL.into(), format!("pool-{}", i % shape.pools));
            s.match_labels
                .insert(ZONE.into(), format!("zone-{}", i % shape.zones));
        }
        4 => s
            .match_expressions
            .push(expr(INSTANCE, "In", &[format!("type-{}", i % shape.types)])),
        _ => {
            s.match_expressions.push(expr(GPU, "Exists", &[]));
            s.match_expressions
                .push(expr(ZONE, "NotIn", &[format!("zone-{}", i % shape.zones)]));
        }
    }
    s
}

/// Content of NodeConfig `i` (`variant` changes the gateways, for edits). Routes 0..5 of
/// every config share identities across configs (so precedence decides), the rest are
/// the config's own. Priority `i` keeps equal-precedence conflicts out of the workload.
pub fn spec(shape: &Shape, i: usize, variant: u8) -> RoutingSpec {
    let routes = (0..shape.routes)
        .map(|j| {
            let to = if j < 5 {
                format!("10.250.{j}.0/24")
            } else {
                format!("10.{}.{}.{}/32", 100 + i / 250, i % 250, j)
            };
            RouteSpec {
                to,
                via: Some(format!("10.0.{}.{}", variant, 1 + (i + j) % 250)),
                table: Some(100 + (j % 4) as u32),
                ..Default::default()
            }
        })
        .collect();
    let rules = (0..shape.rules)
        .map(|j| RuleSpec {
            priority: (1 + i * shape.rules + j) as u32,
            from: Some(format!("10.{}.{}.0/24", 100 + i / 250, i % 250)),
            table: Some(100 + (j % 4) as u32),
            ..Default::default()
        })
        .collect();
    let vlans = (0..shape.vlans)
        .map(|j| VlanSpec {
            link: "eth1".into(),
            id: (1 + (i * shape.vlans + j) % 4094) as u32,
            name: Some(format!("v{i}-{j}")),
            ..Default::default()
        })
        .collect();
    RoutingSpec {
        vlans,
        routes,
        rules,
        ..Default::default()
    }
}

/// NodeConfig `i` as a merge policy.
///
/// # Panics
/// If the generator produced an invalid spec (a bug in the generator).
#[allow(clippy::expect_used)]
pub fn policy(shape: &Shape, i: usize, variant: u8) -> Policy {
    Policy::node_config(
        &format!("nc-{i:03}"),
        i as i64,
        selector(shape, i)
            .validate("spec.nodeSelector")
            .expect("generated selector is valid"),
        spec(shape, i, variant)
            .validate("spec")
            .expect("generated spec is valid"),
    )
}

/// Every generated policy.
pub fn policies(shape: &Shape) -> Vec<Policy> {
    (0..shape.configs).map(|i| policy(shape, i, 0)).collect()
}

/// Per-node NodeConfig of node `k` (named `node`), the shape ipruler users write for
/// per-node addresses: selects `kubernetes.io/hostname: <node>`, priority 1000 (above
/// every shared NodeConfig), 2 routes and 1 VLAN with an address, all identities the
/// node's own (`variant` changes the gateways, for edits).
///
/// # Panics
/// If the generator produced an invalid spec (a bug in the generator).
#[allow(clippy::expect_used)]
pub fn per_node_policy(k: usize, node: &str, variant: u8) -> Policy {
    let mut sel = LabelSelector::default();
    sel.match_labels
        .insert("kubernetes.io/hostname".into(), node.to_owned());
    let (hi, lo) = (k / 250, k % 250);
    let spec = RoutingSpec {
        vlans: vec![VlanSpec {
            link: "eth2".into(),
            id: 200,
            addresses: vec![format!("10.128.{hi}.{}/16", lo + 1)],
            ..Default::default()
        }],
        routes: vec![
            RouteSpec {
                to: format!("10.201.{hi}.{lo}/32"),
                via: Some(format!("10.128.0.{}", 1 + variant)),
                ..Default::default()
            },
            RouteSpec {
                to: "default".into(),
                via: Some(format!("10.128.{hi}.{}", 250 - variant)),
                table: Some(200),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    Policy::node_config(
        &format!("pn-{node}"),
        1000,
        sel.validate("spec.nodeSelector")
            .expect("generated selector is valid"),
        spec.validate("spec").expect("generated spec is valid"),
    )
}

/// The shared policies of `shape` plus one per-node NodeConfig per node.
pub fn policies_with_per_node(shape: &Shape, nodes: &[(String, Labels)]) -> Vec<Policy> {
    let mut out = policies(shape);
    out.extend(
        nodes
            .iter()
            .enumerate()
            .map(|(k, (name, _))| per_node_policy(k, name, 0)),
    );
    out
}

/// The baseline: the naive way the anchors do it. Every node is tested against every
/// selector, and each node's config is merged from scratch.
pub fn naive_merge_all(
    nodes: &[(String, Labels)],
    policies: &[Policy],
) -> BTreeMap<String, NodeOutcome> {
    nodes
        .iter()
        .map(|(name, labels)| (name.clone(), naive_merge_node(labels, policies)))
        .collect()
}

/// The baseline for one node.
pub fn naive_merge_node(labels: &Labels, policies: &[Policy]) -> NodeOutcome {
    merge(policies.iter().filter(|p| p.selector().matches(labels)))
}

/// Prints `baseline / ours` for pairs of criterion results of this run, read from
/// criterion's `estimates.json` files (mean point estimates).
pub fn print_ratios(pairs: &[(&str, &str, &str)]) {
    let dir = criterion_dir();
    println!(
        "\nratios (baseline mean / ours mean), from {}:",
        dir.display()
    );
    for (group, ours, baseline) in pairs {
        let read = |id: &str| -> Option<f64> {
            let p = dir.join(group).join(id).join("new/estimates.json");
            let v: serde_json::Value = serde_json::from_str(&fs::read_to_string(p).ok()?).ok()?;
            v["mean"]["point_estimate"].as_f64()
        };
        match (read(ours), read(baseline)) {
            (Some(o), Some(b)) => println!(
                "  {group}: ours {} vs {baseline} {} -> {:.1}x",
                human(o),
                human(b),
                b / o
            ),
            _ => println!("  {group}: not measured in this run"),
        }
    }
}

fn human(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn criterion_dir() -> PathBuf {
    if let Ok(d) = std::env::var("CRITERION_HOME") {
        return PathBuf::from(d);
    }
    let target = std::env::var("CARGO_TARGET_DIR").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    target.join("criterion")
}

/// Baselines for the IPAM benchmarks, faithful to the allocators the anchors use.
pub mod ipam_baselines {
    use std::collections::HashMap;

    use super::SplitMix64;

    /// Kubernetes' bitmap allocator (`pkg/registry/core/service/allocator`): a bit per
    /// value; `AllocateNext` picks a random offset and scans bit by bit, wrapping, for
    /// the first free one.
    #[derive(Debug, Clone)]
    pub struct BitmapAllocator {
        words: Vec<u64>,
        max: u64,
        count: u64,
        rng: SplitMix64,
        /// Bits examined by the last `allocate_next` (its work, free of timer noise).
        pub last_scan: u64,
    }

    impl BitmapAllocator {
        /// `max` values, all free.
        pub fn new(max: u64, seed: u64) -> Self {
            Self {
                words: vec![0; max.div_ceil(64) as usize],
                max,
                count: 0,
                rng: SplitMix64(seed),
                last_scan: 0,
            }
        }

        fn bit(&self, at: u64) -> bool {
            self.words[(at / 64) as usize] >> (at % 64) & 1 == 1
        }

        /// Allocates a free value: random start, linear scan.
        pub fn allocate_next(&mut self) -> Option<u64> {
            if self.count == self.max {
                return None;
            }
            let offset = self.rng.below(self.max);
            self.allocate_from(offset)
        }

        /// `AllocateNext` with its random start fixed at `offset`: the same scan, for
        /// timing the case a random start can land on.
        pub fn allocate_from(&mut self, offset: u64) -> Option<u64> {
            for i in 0..self.max {
                let at = (offset + i) % self.max;
                self.last_scan = i + 1;
                if !self.bit(at) {
                    self.words[(at / 64) as usize] |= 1 << (at % 64);
                    self.count += 1;
                    return Some(at);
                }
            }
            None
        }

        /// Start and length of the longest stretch of allocated values (where a random
        /// start costs the longest scan).
        pub fn longest_full_stretch(&self) -> (u64, u64) {
            let (mut best, mut cur_start, mut cur) = ((0, 0), 0, 0);
            for at in 0..self.max {
                if self.bit(at) {
                    if cur == 0 {
                        cur_start = at;
                    }
                    cur += 1;
                    if cur > best.1 {
                        best = (cur_start, cur);
                    }
                } else {
                    cur = 0;
                }
            }
            best
        }

        /// Marks every value taken (setup: the same state `max` calls of
        /// `allocate_next` reach, without their cost).
        pub fn fill_all(&mut self) {
            for w in &mut self.words {
                *w = u64::MAX;
            }
            if !self.max.is_multiple_of(64)
                && let Some(last) = self.words.last_mut()
            {
                *last = (1u64 << (self.max % 64)) - 1;
            }
            self.count = self.max;
        }

        /// Releases a value.
        pub fn release(&mut self, at: u64) {
            if self.bit(at) {
                self.words[(at / 64) as usize] &= !(1 << (at % 64));
                self.count -= 1;
            }
        }

        /// Bytes of the bitmap.
        pub fn bytes(&self) -> usize {
            self.words.len() * 8
        }
    }

    /// kube-fip-operator's way: a map with an entry for every address of the pool, and
    /// a linear scan in address order for the first free one.
    #[derive(Debug, Clone)]
    pub struct LinearScanAllocator {
        addresses: Vec<u32>,
        taken: HashMap<u32, Option<String>>,
    }

    impl LinearScanAllocator {
        /// Every address `first..first + n`, all free.
        pub fn new(first: u32, n: u32) -> Self {
            let addresses: Vec<u32> = (first..first + n).collect();
            let taken = addresses.iter().map(|&a| (a, None)).collect();
            Self { addresses, taken }
        }

        /// The first free address in order, given to `owner`.
        pub fn allocate(&mut self, owner: &str) -> Option<u32> {
            for a in &self.addresses {
                if let Some(slot @ None) = self.taken.get_mut(a) {
                    *slot = Some(owner.to_owned());
                    return Some(*a);
                }
            }
            None
        }

        /// Marks every address taken (test setup: filling through `allocate` is
        /// O(n^2), which is the point of the baseline, but not of the setup).
        pub fn fill(&mut self, owner: &str) {
            for slot in self.taken.values_mut() {
                *slot = Some(owner.to_owned());
            }
        }

        /// Releases an address.
        pub fn release(&mut self, a: u32) {
            if let Some(slot) = self.taken.get_mut(&a) {
                *slot = None;
            }
        }
    }
}

/// Per-operation latency statistics from individually timed operations.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    /// Operations timed.
    pub ops: usize,
    /// Mean, ns.
    pub mean_ns: f64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Worst, ns.
    pub max_ns: u64,
}

impl Latency {
    /// Statistics of `samples` (ns).
    pub fn of(mut samples: Vec<u64>) -> Self {
        samples.sort_unstable();
        let n = samples.len().max(1);
        let at = |q: f64| {
            samples
                .get(((n as f64 * q) as usize).min(n - 1))
                .copied()
                .unwrap_or(0)
        };
        Self {
            ops: samples.len(),
            mean_ns: samples.iter().sum::<u64>() as f64 / n as f64,
            p99_ns: at(0.99),
            p999_ns: at(0.999),
            max_ns: samples.last().copied().unwrap_or(0),
        }
    }
}

/// The worst operation of a workload run several times from the same state: for each
/// operation the fastest of its runs (a timer interrupt or a preemption rarely hits the
/// same operation every time), then the slowest of those. `runs` hold per-operation
/// times in the same order; the first `skip` operations are left out (a fresh structure's
/// first touches: cold caches and page walks, reported separately by the caller).
pub fn filtered_worst(runs: &[Vec<u64>], skip: usize) -> u64 {
    let n = runs.iter().map(Vec::len).min().unwrap_or(0);
    (skip.min(n)..n)
        .map(|i| runs.iter().map(|r| r[i]).min().unwrap_or(0))
        .max()
        .unwrap_or(0)
}

/// What timing an empty operation costs (two clock reads), ns: the floor of every
/// per-operation figure.
pub fn timer_overhead_ns() -> f64 {
    let n = 1_000_000u32;
    let start = std::time::Instant::now();
    let mut sink = 0u128;
    for _ in 0..n {
        let t = std::time::Instant::now();
        sink = sink.wrapping_add(t.elapsed().as_nanos());
    }
    std::hint::black_box(sink);
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

impl std::fmt::Display for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ops: mean {:.0} ns, p99 {} ns, p99.9 {} ns, worst {} ns",
            self.ops, self.mean_ns, self.p99_ns, self.p999_ns, self.max_ns
        )
    }
}

/// The route-reflector workload and the seed operator's algorithm as the baseline.
pub mod rr_baseline {
    use std::collections::BTreeMap;

    use netpolicy_rr::{BgpPeer, Config, NodeInfo};

    /// `n` Ready nodes spread round-robin over `zones` zones (`zone-0`, ...), created in
    /// name order.
    pub fn nodes(n: usize, zones: usize) -> Vec<NodeInfo> {
        (0..n)
            .map(|i| {
                NodeInfo::ready(
                    &format!("node-{i:05}"),
                    &format!("zone-{}", i % zones),
                    i as i64,
                )
            })
            .collect()
    }

    /// What the seed produces on every pass.
    #[derive(Debug)]
    pub struct SeedTopology {
        /// Reflector nodes.
        pub reflectors: Vec<String>,
        /// Node label changes (node, becomes reflector).
        pub labels: Vec<(String, bool)>,
        /// `BGPPeer` objects: one mesh, then one per client and reflector.
        pub bgp_peers: Vec<BgpPeer>,
    }

    /// The seed's pass, recomputed from the full node listing: group by zone, size each
    /// zone with the same rule, take the first Ready nodes in name order as reflectors,
    /// give each client `per_client` reflectors (round-robin over the cluster's
    /// reflectors, as its multi topology did) and write one `BGPPeer` per client and
    /// reflector, selecting both ends by hostname: `1 + per_client x clients` objects.
    pub fn seed_pass(nodes: &[NodeInfo], config: &Config, per_client: usize) -> SeedTopology {
        let mut zones: BTreeMap<String, Vec<&NodeInfo>> = BTreeMap::new();
        for n in nodes {
            zones
                .entry(config.zone_of(n).to_owned())
                .or_default()
                .push(n);
        }
        let mut reflectors = Vec::new();
        for members in zones.values_mut() {
            members.sort_by(|a, b| a.name.cmp(&b.name));
            let ready: Vec<&&NodeInfo> = members.iter().filter(|n| n.ready).collect();
            let want = config.wanted(ready.len()) as usize;
            reflectors.extend(ready.iter().take(want).map(|n| n.name.clone()));
        }
        reflectors.sort();
        let mut labels = Vec::with_capacity(nodes.len());
        let mut bgp_peers = vec![BgpPeer {
            name: "rr-mesh".to_owned(),
            node_selector: "has(route-reflector)".to_owned(),
            peer_selector: "has(route-reflector)".to_owned(),
        }];
        let mut client = 0usize;
        for n in nodes {
            let is_rr = reflectors.binary_search(&n.name).is_ok();
            labels.push((n.name.clone(), is_rr));
            if is_rr || reflectors.is_empty() {
                continue;
            }
            for k in 0..per_client.min(reflectors.len()) {
                let r = &reflectors[(client + k) % reflectors.len()];
                bgp_peers.push(BgpPeer {
                    name: format!("peer-{}-{r}", n.name),
                    node_selector: format!("kubernetes.io/hostname == '{}'", n.name),
                    peer_selector: format!("kubernetes.io/hostname == '{r}'"),
                });
            }
            client += 1;
        }
        SeedTopology {
            reflectors,
            labels,
            bgp_peers,
        }
    }
}
