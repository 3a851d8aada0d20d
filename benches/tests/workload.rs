//! The bench workload is what the benches claim: the engine and the naive baseline agree
//! on it, and it has no conflicts (so the benches measure merging, not error paths).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use netpolicy_benches::{Shape, naive_merge_all, nodes, policies, policies_with_per_node};
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
        "{} nodes, {} distinct sets of matching NodeConfigs, {items} items in all",
        outcomes.len(),
        engine.distinct_outcomes()
    );
    // The `merge` bench's diversity comes from selectors, not from hostnames: about 110
    // sets. A generator change that shrinks it would make the bench measure less.
    assert!(
        (100..=200).contains(&engine.distinct_outcomes()),
        "{} distinct sets",
        engine.distinct_outcomes()
    );
    assert!(
        items > 15_000 * 65,
        "every node gets several configs' items"
    );
}

#[test]
fn per_node_configs_make_every_node_its_own_set_and_the_engine_agrees_with_the_baseline() {
    let shape = Shape {
        nodes: 600,
        configs: 30,
        ..Shape::ISSUE
    };
    let nodes = nodes(&shape, 7);
    let policies = policies_with_per_node(&shape, &nodes);
    let engine = Engine::build(nodes.clone(), policies.clone());
    assert_eq!(engine.distinct_outcomes(), nodes.len(), "one set per node");
    let naive = naive_merge_all(&nodes, &policies);
    for (name, outcome) in &naive {
        assert_eq!(engine.outcome(name), Some(outcome), "node {name}");
        assert!(
            outcome.problems().is_empty(),
            "{name}: {:?}",
            outcome.problems()
        );
        // Its own VLAN and routes are there.
        let c = outcome.config().unwrap();
        assert!(
            c.vlans().any(|v| v.item.name.as_str() == "eth2.200"),
            "{name}"
        );
    }
}
