//! The rollout planner's promises, for any node count and any `maxUnavailable`: waves
//! cover every node once, in name order, none larger than the resolved maximum; and a
//! simulated rollout (admit, some nodes finish, admit again, some turn Degraded) never
//! has more nodes unavailable for a policy than its maximum, finishes when no node
//! fails, and admits nothing new for a halted policy.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};

use netpolicy_core::rollout::{Budget, MaxUnavailable, Waiting, admit, waves};
use proptest::prelude::*;

fn max_strategy() -> impl Strategy<Value = MaxUnavailable> {
    prop_oneof![
        (1u32..20).prop_map(MaxUnavailable::Count),
        (1u32..=100).prop_map(MaxUnavailable::Percent),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn waves_cover_every_node_once_within_the_maximum(n in 0usize..300, m in max_strategy()) {
        let nodes: Vec<String> = (0..n).map(|i| format!("node-{i:04}")).collect();
        let max = m.resolve(n);
        prop_assert!(max >= 1);
        prop_assert!(n == 0 || max <= n);
        let w = waves(&nodes, max);
        prop_assert!(w.iter().all(|wave| !wave.is_empty() && wave.len() <= max));
        let flat: Vec<String> = w.into_iter().flatten().collect();
        let mut sorted = nodes.clone();
        sorted.sort();
        prop_assert_eq!(flat, sorted);
    }

    /// Two overlapping policies (every node in `a`, the even ones also in `b`), a
    /// rollout simulated step by step: each step admits, then a random subset of the
    /// in-flight nodes finishes (or, with `fail`, the first one admitted turns
    /// Degraded).
    #[test]
    fn a_simulated_rollout_never_exceeds_any_policys_maximum(
        n in 1usize..120,
        ma in max_strategy(),
        mb in max_strategy(),
        finish in proptest::collection::vec(any::<bool>(), 1..400),
        fail in any::<bool>(),
    ) {
        let nodes: Vec<String> = (0..n).map(|i| format!("n{i:03}")).collect();
        let in_b = |i: usize| i.is_multiple_of(2);
        let nb = (0..n).filter(|i| in_b(*i)).count();
        let max = BTreeMap::from([("a", ma.resolve(n)), ("b", mb.resolve(nb))]);
        let mut pending: BTreeSet<usize> = (0..n).collect();
        let mut in_flight: BTreeSet<usize> = BTreeSet::new();
        let mut degraded: Option<usize> = None;
        let mut done: BTreeSet<usize> = BTreeSet::new();
        let mut f = finish.iter().cycle();
        for step in 0..(8 * n + 20) {
            let pols = |i: usize| if in_b(i) { vec!["a", "b"] } else { vec!["a"] };
            let mut budgets: BTreeMap<&str, Budget> = BTreeMap::new();
            for p in ["a", "b"] {
                let members = |i: &usize| p == "a" || in_b(*i);
                let unavailable = in_flight.iter().filter(|i| members(i)).count()
                    + degraded.iter().filter(|i| members(i)).count();
                budgets.insert(p, Budget {
                    max: max[p],
                    unavailable,
                    halted: degraded.is_some_and(|d| members(&d)),
                });
            }
            let waiting: Vec<Waiting<'_, &str>> = pending
                .iter()
                .map(|&i| Waiting { node: nodes[i].as_str(), policies: pols(i), unavailable: false })
                .collect();
            let halted_before: BTreeMap<&str, bool> = budgets.iter().map(|(k, b)| (*k, b.halted)).collect();
            let got = admit(waiting, &mut budgets);
            for name in got {
                let i = nodes.iter().position(|x| x == name).unwrap();
                // Nothing new for a halted policy.
                prop_assert!(pols(i).iter().all(|p| !halted_before[p]), "{name} admitted while halted");
                pending.remove(&i);
                in_flight.insert(i);
            }
            for p in ["a", "b"] {
                let members = |i: &usize| p == "a" || in_b(*i);
                let unavailable = in_flight.iter().filter(|i| members(i)).count()
                    + degraded.iter().filter(|i| members(i)).count();
                prop_assert!(unavailable <= max[p], "{p}: {unavailable} unavailable, max {}", max[p]);
            }
            // Progress: some in-flight nodes finish (or the first one fails).
            let ready: Vec<usize> = in_flight.iter().copied().collect();
            for i in ready {
                if fail && degraded.is_none() && done.is_empty() {
                    in_flight.remove(&i);
                    degraded = Some(i);
                    continue;
                }
                // Random, but every node finishes within four steps.
                if *f.next().unwrap() || step % 4 == 3 {
                    in_flight.remove(&i);
                    done.insert(i);
                }
            }
            if pending.is_empty() && in_flight.is_empty() {
                break;
            }
        }
        if fail {
            // Halted: the degraded node's policies admitted nothing after it.
            prop_assert!(degraded.is_some());
        } else {
            prop_assert_eq!(done.len(), n, "a rollout with no failure did not finish");
        }
    }
}
