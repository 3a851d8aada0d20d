use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::{merge::NODE_NAME_LABEL, selector::Requirement};

const ZONES: [&str; 3] = ["a", "b", "c"];

/// A selector over `zone`, `edge` and the node-name label (a per-node policy).
fn selector() -> impl Strategy<Value = Selector> {
    let zone = prop::sample::select(&ZONES[..]).prop_map(|z| Requirement::Equals {
        key: "zone".into(),
        value: z.into(),
    });
    let edge = prop_oneof![
        Just(Requirement::Exists { key: "edge".into() }),
        Just(Requirement::DoesNotExist { key: "edge".into() }),
    ];
    let one_node = (0..12usize).prop_map(|i| Requirement::Equals {
        key: NODE_NAME_LABEL.into(),
        value: format!("n{i}"),
    });
    prop_oneof![
        Just(Vec::new()),
        prop::collection::vec(zone, 1..2),
        prop::collection::vec(edge, 1..2),
        prop::collection::vec(one_node, 1..2),
    ]
    .prop_map(Selector::from_requirements)
}

fn nodes() -> impl Strategy<Value = Vec<(String, Labels)>> {
    prop::collection::btree_map(
        0..12usize,
        (prop::sample::select(&ZONES[..]), any::<bool>()),
        1..12,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(i, (zone, edge))| {
                let mut l = Labels::from([("zone".to_owned(), zone.to_owned())]);
                if edge {
                    l.insert("edge".into(), String::new());
                }
                (format!("n{i}"), l)
            })
            .collect()
    })
}

/// Per group: whether it has a rollout, its wave size, waves open, rolled back, a
/// previous rendering, and how many of its members were known when its waves were cut.
type Plan = (bool, usize, usize, bool, bool, usize);

fn world() -> impl Strategy<Value = (Vec<(String, Labels)>, Vec<PolicySelector>, Vec<Plan>)> {
    let policies = prop::collection::vec(selector(), 0..5).prop_map(|s| {
        s.into_iter()
            .enumerate()
            .map(|(i, s)| PolicySelector::new(format!("NodeConfig/p{i}"), s))
            .collect::<Vec<_>>()
    });
    let plan = (
        any::<bool>(),
        1..5usize,
        0..5usize,
        any::<bool>(),
        any::<bool>(),
        0..12usize,
    );
    (nodes(), policies, prop::collection::vec(plan, 12))
}

/// Rollouts as the operator would write them: one per group the plan gives one, its
/// waves cut over the members it knew then (a prefix of them: the rest joined later).
fn rollouts(nodes: &[(String, Labels)], index: &[PolicySelector], plans: &[Plan]) -> Vec<Waves> {
    let mut groups: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (name, labels) in nodes {
        let l = crate::merge::with_node_name(name, labels);
        groups
            .entry(group_name(selecting(&l, index)))
            .or_default()
            .push(name);
    }
    groups
        .into_iter()
        .zip(plans)
        .filter(|(_, p)| p.0)
        .enumerate()
        .map(
            |(i, ((group, members), &(_, max, open, back, previous, known)))| {
                let name = format!("r{i}");
                let known = &members[..known.min(members.len())];
                Waves {
                    bounds: plan_waves(&name, known, max),
                    open,
                    rollout: Rollout {
                        name,
                        group,
                        rendering: format!("r-new{i}"),
                        previous: previous.then(|| format!("r-old{i}")),
                        through: Through::Nothing,
                        rolled_back: back,
                    },
                }
            },
        )
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The agent's choice, from its labels, the index and the rollouts, is what the
    /// operator's computation over every node gives it.
    #[test]
    fn each_agent_chooses_what_the_operator_computes_for_it((nodes, index, plans) in world()) {
        let waves = rollouts(&nodes, &index, &plans);
        let all = assign(&nodes, &index, &waves);
        prop_assert_eq!(all.len(), nodes.len());
        let published: Vec<Rollout> = waves.iter().map(Waves::published).collect();
        for (name, labels) in &nodes {
            prop_assert_eq!(&choose(name, labels, &index, &published), &all[name], "node {}", name);
        }
    }

    /// Waves cut over a group's members hold at most `max` nodes each, cover every
    /// member once, and open in order: with `open` waves open, exactly the members of
    /// those waves run the new rendering.
    #[test]
    fn waves_hold_at_most_max_nodes_and_open_in_order(
        members in prop::collection::btree_set("[a-z]{1,6}", 1..40),
        max in 1..8usize,
        open in 0..10usize,
    ) {
        let members: Vec<String> = members.into_iter().collect();
        let bounds = plan_waves("web-3", &members, max);
        prop_assert_eq!(bounds.len(), members.len().div_ceil(max));
        let mut per_wave: BTreeMap<usize, BTreeSet<&str>> = BTreeMap::new();
        for m in &members {
            per_wave.entry(wave_of(&order_key("web-3", m), &bounds)).or_default().insert(m);
        }
        prop_assert!(per_wave.values().all(|w| w.len() <= max));
        prop_assert_eq!(per_wave.values().map(BTreeSet::len).sum::<usize>(), members.len());
        let waves = Waves {
            rollout: Rollout {
                name: "web-3".into(),
                group: "g".into(),
                rendering: "new".into(),
                previous: Some("old".into()),
                through: Through::Nothing,
                rolled_back: false,
            },
            bounds,
            open,
        };
        let published = waves.published();
        let new = members
            .iter()
            .filter(|m| published.rendering_for(&order_key("web-3", m)) == Some("new"))
            .count();
        let expected: usize = per_wave.range(..open).map(|(_, w)| w.len()).sum();
        prop_assert_eq!(new, expected);
        prop_assert_eq!(waves.complete(), open >= waves.bounds.len());
    }
}

#[test]
fn names_follow_content_not_order() {
    assert_eq!(
        group_name(["NodeConfig/b", "ClusterConfig/default"]),
        group_name(["ClusterConfig/default", "NodeConfig/b", "NodeConfig/b"])
    );
    assert_ne!(group_name(["NodeConfig/b"]), group_name(["NodeConfig/c"]));
    // FNV-1a's published vector for "a": the name is the same on every platform.
    assert_eq!(rendering_name("a"), "r-af63dc4c8601ec8c");
}

#[test]
fn a_rollback_puts_every_wave_on_the_previous_rendering_and_a_new_group_has_nothing_to_keep() {
    let mut w = Waves {
        rollout: Rollout {
            name: "x".into(),
            group: "g".into(),
            rendering: "new".into(),
            previous: Some("old".into()),
            through: Through::Nothing,
            rolled_back: false,
        },
        bounds: plan_waves("x", &["a", "b", "c"], 1),
        open: 2,
    };
    let first = w.bounds[0].clone();
    let last = w.bounds[2].clone();
    let r = w.published();
    assert_eq!(
        (r.rendering_for(&first), r.rendering_for(&last)),
        (Some("new"), Some("old"))
    );
    w.rollout.rolled_back = true;
    let r = w.published();
    assert_eq!(
        (r.rendering_for(&first), r.rendering_for(&last)),
        (Some("old"), Some("old"))
    );
    assert!(!w.complete());
    w.rollout.previous = None;
    w.rollout.rolled_back = false;
    w.open = 0;
    let r = w.published();
    assert_eq!(
        r.rendering_for(&last),
        Some("new"),
        "no previous: every member runs the first one"
    );
    // A member that joined after the waves were cut, past the last bound, waits for the
    // last wave.
    w.rollout.previous = Some("old".into());
    w.open = 2;
    let late = OrderKey {
        hash: u64::MAX,
        node: "z".into(),
    };
    assert_eq!(w.published().rendering_for(&late), Some("old"));
    w.open = 3;
    assert_eq!(w.published().rendering_for(&late), Some("new"));
}
