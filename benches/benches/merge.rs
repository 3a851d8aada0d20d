//! Merge benchmarks (issue: foundation). Each group runs ours and the naive baseline
//! (every node against every selector, every node merged from scratch) on identical,
//! seeded input, then prints the ratio.
//!
//! - `merge_full`: 15,000 nodes, 300 NodeConfigs (50 routes, 10 rules, 5 VLANs each),
//!   from scratch. Target: <= 50 ms on one core.
//! - `merge_edit`: one NodeConfig edit touching ~2,000 nodes. Target: <= 5 ms.
//! - `merge_relabel`: one node relabelled. Target: <= 50 us.
//!
//! Run: `cargo bench -p netpolicy-benches --bench merge`

use std::{hint::black_box, time::Duration};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use netpolicy_benches::{
    INSTANCE, POOL, Shape, naive_merge_all, naive_merge_node, nodes, policies, policy, print_ratios,
};
use netpolicy_core::merge::Engine;

const SEED: u64 = 0x6e65_7470_6f6c_6963;

fn merge_full(c: &mut Criterion) {
    let shape = Shape::ISSUE;
    let nodes = nodes(&shape, SEED);
    let policies = policies(&shape);
    let mut g = c.benchmark_group("merge_full");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(10))
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

fn merge_edit(c: &mut Criterion) {
    let shape = Shape::ISSUE;
    let nodes = nodes(&shape, SEED);
    let policies = policies(&shape);
    // NodeConfig 4 selects one instance type: about 15,000 / 8 nodes.
    let edited = 4;
    let mut engine = Engine::build(nodes.clone(), policies.clone());
    let touched = nodes
        .iter()
        .filter(|(_, l)| policies[edited].selector().matches(l))
        .count();
    println!("merge_edit: NodeConfig nc-{edited:03} selects {touched} nodes");
    // Each iteration flips to the other version, so every iteration is a real edit.
    let versions = [policy(&shape, edited, 0), policy(&shape, edited, 1)];
    let mut g = c.benchmark_group("merge_edit");
    g.throughput(Throughput::Elements(touched as u64));
    let mut flip = 0;
    g.bench_function("ours", |b| {
        b.iter(|| {
            flip ^= 1;
            let changed = engine.upsert_policy(versions[flip].clone());
            assert_eq!(changed.len(), touched, "every selected node changes");
            black_box(changed)
        })
    });
    let mut naive_policies = policies.clone();
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.bench_function("naive", |b| {
        b.iter(|| {
            flip ^= 1;
            naive_policies[edited] = versions[flip].clone();
            black_box(naive_merge_all(&nodes, &naive_policies))
        })
    });
    g.finish();
}

fn merge_relabel(c: &mut Criterion) {
    let shape = Shape::ISSUE;
    let nodes = nodes(&shape, SEED);
    let policies = policies(&shape);
    let mut engine = Engine::build(nodes.clone(), policies.clone());
    let (name, labels) = nodes[1234].clone();
    let mut moved = labels.clone();
    moved.insert(POOL.into(), "pool-7".into());
    moved.insert(INSTANCE.into(), "type-7".into());
    let versions = [labels, moved];
    let mut g = c.benchmark_group("merge_relabel");
    g.throughput(Throughput::Elements(1));
    let mut flip = 0;
    g.bench_function("ours", |b| {
        b.iter(|| {
            flip ^= 1;
            black_box(engine.upsert_node(&name, versions[flip].clone()))
        })
    });
    g.bench_function("naive", |b| {
        b.iter(|| {
            flip ^= 1;
            black_box(naive_merge_node(&versions[flip], &policies))
        })
    });
    g.finish();
}

criterion_group!(benches, merge_full, merge_edit, merge_relabel);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Under `cargo test` criterion runs each bench once without measuring: no ratios.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    print_ratios(&[
        ("merge_full", "ours", "naive"),
        ("merge_edit", "ours", "naive"),
        ("merge_relabel", "ours", "naive"),
    ]);
}
