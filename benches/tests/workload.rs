//! The bench workload is what the benches claim: the engine and the naive baseline agree
//! on it, and it has no conflicts (so the benches measure merging, not error paths).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use netpolicy_benches::{Shape, naive_merge_all, nodes, policies};
use netpolicy_core::merge::Engine;

#[test]
fn engine_and_naive_baseline_agree_on_a_scaled_down_workload() {
    let shape = Shape {
        nodes: 1_500,
        configs: 60,
        ..Shape::ISSUE
    };
    let nodes = nodes(&shape, 7);
    let policies = policies(&shape);
    let engine = Engine::build(nodes.clone(), policies.clone());
    let naive = naive_merge_all(&nodes, &policies);
    assert_eq!(engine.node_count(), naive.len());
    for (name, outcome) in &naive {
        assert_eq!(engine.outcome(name), Some(outcome), "node {name}");
        assert!(
            outcome.problems().is_empty(),
            "{name}: {:?}",
            outcome.problems()
        );
    }
}

#[test]
fn the_issue_workload_has_no_conflicts_and_few_distinct_results() {
    let shape = Shape::ISSUE;
    let engine = Engine::build(nodes(&shape, 7), policies(&shape));
    let outcomes = engine.outcomes();
    assert_eq!(outcomes.len(), 15_000);
    assert!(outcomes.values().all(|o| o.problems().is_empty()));
    let items: usize = outcomes
        .values()
        .map(|o| o.config().map_or(0, |c| c.len()))
        .sum();
    println!(
        "{} nodes, {} distinct merged results, {items} items in all",
        outcomes.len(),
        engine.distinct_outcomes()
    );
    assert!(
        items > 15_000 * 65,
        "every node gets several configs' items"
    );
}
