//! Merge at full diversity (issue 21): the `merge` workload (15,000 nodes, 300 shared
//! NodeConfigs) plus one NodeConfig per node selecting its hostname (2 routes, 1 VLAN
//! with an address each) — 15,000 distinct sets of matching NodeConfigs, so nothing
//! can be merged once for many nodes. Each group runs ours and a naive baseline on the
//! same seeded input and prints the ratio; the engine's memory is measured with a
//! counting allocator.
//!
//! - `per_node_full`: build from scratch. Baseline: every node against every selector,
//!   merged from scratch. Target: <= 150 ms.
//! - `per_node_edit`: one per-node NodeConfig edited. Baseline: that node merged from
//!   scratch. Target: <= 50 us.
//! - `per_node_shared_edit`: one shared NodeConfig edited (~1,800 nodes). Baseline: each
//!   of those nodes merged from scratch. Target: <= 10 ms.
//!
//! Run: `cargo bench -p netpolicy-benches --bench merge_per_node`

use std::{alloc::System, hint::black_box, time::Duration};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use netpolicy_benches::{
    Shape, naive_merge_all, naive_merge_node, nodes, per_node_policy, policies,
    policies_with_per_node, policy, print_ratios,
};
use netpolicy_core::merge::Engine;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const SEED: u64 = 0x6e65_7470_6f6c_6963;

fn live() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn per_node_full(c: &mut Criterion) {
    let shape = Shape::ISSUE;
    let nodes = nodes(&shape, SEED);
    let policies = policies_with_per_node(&shape, &nodes);
    let mut g = c.benchmark_group("per_node_full");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .throughput(Throughput::Elements(nodes.len() as u64));
    g.bench_function("ours", |b| {
        b.iter_batched(
            || (nodes.clone(), policies.clone()),
            |(n, p)| black_box(Engine::build(n, p)),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("naive", |b| {
        b.iter(|| black_box(naive_merge_all(&nodes, &policies)))
    });
    g.finish();
}

fn per_node_edit(c: &mut Criterion) {
    let shape = Shape::ISSUE;
    let nodes = nodes(&shape, SEED);
    let policies = policies_with_per_node(&shape, &nodes);
    let mut engine = Engine::build(nodes.clone(), policies.clone());
    let k = 1234;
    let (name, labels) = nodes[k].clone();
    let versions = [per_node_policy(k, &name, 0), per_node_policy(k, &name, 1)];
    let mut g = c.benchmark_group("per_node_edit");
    g.throughput(Throughput::Elements(1));
    let mut flip = 0;
    g.bench_function("ours", |b| {
        b.iter(|| {
            flip ^= 1;
            let changed = engine.upsert_policy(versions[flip].clone());
            assert_eq!(changed.len(), 1, "the node changes");
            black_box(changed)
        })
    });
    let mut naive_policies = policies.clone();
    let at = naive_policies.len() - nodes.len() + k;
    g.bench_function("naive", |b| {
        b.iter(|| {
            flip ^= 1;
            naive_policies[at] = versions[flip].clone();
            black_box(naive_merge_node(&labels, &naive_policies))
        })
    });
    g.finish();
}

fn per_node_shared_edit(c: &mut Criterion) {
    let shape = Shape::ISSUE;
    let nodes = nodes(&shape, SEED);
    let policies = policies_with_per_node(&shape, &nodes);
    let mut engine = Engine::build(nodes.clone(), policies.clone());
    // NodeConfig 4 selects one instance type: about 15,000 / 8 nodes.
    let edited = 4;
    let touched: Vec<&(String, _)> = nodes
        .iter()
        .filter(|(_, l)| policies[edited].selector().matches(l))
        .collect();
    println!(
        "per_node_shared_edit: nc-{edited:03} selects {} nodes",
        touched.len()
    );
    let versions = [policy(&shape, edited, 0), policy(&shape, edited, 1)];
    let mut g = c.benchmark_group("per_node_shared_edit");
    g.sample_size(10)
        .throughput(Throughput::Elements(touched.len() as u64));
    let mut flip = 0;
    g.bench_function("ours", |b| {
        b.iter(|| {
            flip ^= 1;
            let changed = engine.upsert_policy(versions[flip].clone());
            assert_eq!(changed.len(), touched.len(), "every selected node changes");
            black_box(changed)
        })
    });
    let mut naive_policies = policies.clone();
    g.measurement_time(Duration::from_secs(30));
    g.bench_function("naive", |b| {
        b.iter(|| {
            flip ^= 1;
            naive_policies[edited] = versions[flip].clone();
            black_box(
                touched
                    .iter()
                    .map(|(_, l)| naive_merge_node(l, &naive_policies))
                    .collect::<Vec<_>>(),
            )
        })
    });
    g.finish();
}

/// Distinct sets of matching NodeConfigs in both workloads, and the engine's memory.
fn report() {
    let shape = Shape::ISSUE;
    let nodes = nodes(&shape, SEED);
    let shared = Engine::build(nodes.clone(), policies(&shape));
    println!(
        "merge workload: {} nodes, {} distinct sets of matching NodeConfigs",
        nodes.len(),
        shared.distinct_outcomes()
    );
    drop(shared);
    let policies = policies_with_per_node(&shape, &nodes);
    let input = nodes.clone();
    let before = live();
    let engine = Engine::build(input, policies);
    let bytes = live() - before;
    println!(
        "per-node workload: {} nodes, {} NodeConfigs, {} distinct sets; engine memory {:.0} MiB \
         (beyond the nodes and policies it is given)",
        nodes.len(),
        shape.configs + nodes.len(),
        engine.distinct_outcomes(),
        bytes as f64 / (1024.0 * 1024.0)
    );
}

criterion_group!(benches, per_node_full, per_node_edit, per_node_shared_edit);

fn main() {
    // Under `cargo test` criterion runs each bench once without measuring: skip this
    // workload's multi-second baselines there.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    report();
    benches();
    Criterion::default().configure_from_args().final_summary();
    print_ratios(&[
        ("per_node_full", "ours", "naive"),
        ("per_node_edit", "ours", "naive"),
        ("per_node_shared_edit", "ours", "naive"),
    ]);
}
