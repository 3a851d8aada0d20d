//! Route-reflector benchmarks (issue: netpolicy-rr). Each group runs ours and the seed
//! operator's algorithm (sizing per zone, one BGPPeer per client and reflector,
//! recomputed from a full listing on every pass) on the same 15,000 nodes over 3 zones,
//! then prints time ratios and object counts.
//!
//! - `rr_full`: the whole `multi` topology from nothing. Target: <= 20 ms.
//! - `rr_steady`: the whole topology again from the applied state (what a resync does).
//! - `rr_node`: one client node added or removed (alternately). Ours updates the
//!   `Engine`; the seed recomputes from the listing. Target: <= 100 us.
//!
//! Run: `cargo bench -p netpolicy-benches --bench rr`

use std::hint::black_box;

use criterion::{Criterion, criterion_group};
use netpolicy_benches::{print_ratios, rr_baseline};
use netpolicy_rr::{Config, Current, Engine, Kind, NodeInfo, topology};

const NODES: usize = 15_000;
const ZONES: usize = 3;

fn config() -> Config {
    Config {
        topology: Kind::Multi,
        ..Config::default()
    }
}

fn rr_full(c: &mut Criterion) {
    let nodes = rr_baseline::nodes(NODES, ZONES);
    let config = config();
    let ours = topology(&nodes, &config, &Current::default()).unwrap_or_else(|e| panic!("{e}"));
    let seed = rr_baseline::seed_pass(&nodes, &config, 3);
    println!(
        "rr_full: {} reflectors; BGPPeer objects: ours {}, seed {} ({:.0}x fewer)",
        ours.placement.reflectors().count(),
        ours.bgp_peers.len(),
        seed.bgp_peers.len(),
        seed.bgp_peers.len() as f64 / ours.bgp_peers.len() as f64
    );
    let mut g = c.benchmark_group("rr_full");
    g.sample_size(20);
    g.bench_function("ours", |b| {
        b.iter(|| black_box(topology(&nodes, &config, &Current::default())))
    });
    g.bench_function("seed", |b| {
        b.iter(|| black_box(rr_baseline::seed_pass(&nodes, &config, 3)))
    });
    g.finish();

    let applied = ours.applied();
    let mut g = c.benchmark_group("rr_steady");
    g.sample_size(20);
    g.bench_function("ours", |b| {
        b.iter(|| black_box(topology(&nodes, &config, &applied)))
    });
    g.bench_function("seed", |b| {
        b.iter(|| black_box(rr_baseline::seed_pass(&nodes, &config, 3)))
    });
    g.finish();
}

fn rr_node(c: &mut Criterion) {
    let mut nodes = rr_baseline::nodes(NODES, ZONES);
    let config = config();
    let mut engine = Engine::new(nodes.clone(), config.clone(), &Current::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let extra = NodeInfo::ready("node-extra", "zone-1", 99_999);
    let mut g = c.benchmark_group("rr_node");
    let mut present = false;
    let mut recomputed = 0usize;
    g.bench_function("ours", |b| {
        b.iter(|| {
            let change = if present {
                engine.remove_node("node-extra")
            } else {
                engine.add_node(extra.clone())
            }
            .unwrap_or_else(|e| panic!("{e}"));
            present = !present;
            recomputed += usize::from(change.recomputed);
            black_box(change)
        })
    });
    println!("rr_node: ours recomputed the cluster {recomputed} times");
    g.sample_size(20);
    g.bench_function("seed", |b| {
        b.iter(|| {
            if present {
                nodes.pop();
            } else {
                nodes.push(extra.clone());
            }
            present = !present;
            black_box(rr_baseline::seed_pass(&nodes, &config, 3))
        })
    });
    g.finish();
}

criterion_group!(benches, rr_full, rr_node);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    print_ratios(&[
        ("rr_full", "ours", "seed"),
        ("rr_steady", "ours", "seed"),
        ("rr_node", "ours", "seed"),
    ]);
}
