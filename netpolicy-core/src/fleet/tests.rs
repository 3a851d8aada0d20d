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

    /// The agent's choice, from its labels, the index and the rollouts (every group's,
    /// or its own group's alone), is what the operator's computation over every node
    /// gives it.
    #[test]
    fn each_agent_chooses_what_the_operator_computes_for_it((nodes, index, plans) in world()) {
        let waves = rollouts(&nodes, &index, &plans);
        let all = assign(&nodes, &index, &waves);
        prop_assert_eq!(all.len(), nodes.len());
        let published: Vec<Rollout> = waves.iter().map(Waves::published).collect();
        for (name, labels) in &nodes {
            prop_assert_eq!(&choose(name, labels, &index, &published), &all[name], "node {}", name);
            // From its own group's rollouts alone (what an agent passes, its group
            // found with none), the same choice.
            let group = choose(name, labels, &index, &[]).group;
            let own: Vec<Rollout> =
                published.iter().filter(|r| r.group == group).cloned().collect();
            prop_assert_eq!(&choose(name, labels, &index, &own), &all[name], "node {}", name);
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
    assert_eq!(layer_name("a"), "l-af63dc4c8601ec8c");
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

/// A simulated rollout: each policy's max, each group's policies (indices) and member
/// count, the agents' coin flips, and which application fails (if any).
type RolloutWorld = (
    Vec<usize>,
    Vec<(Vec<usize>, usize)>,
    Vec<bool>,
    Option<usize>,
);

/// A group of one change: its waves, its members' keys and reports, its policies.
type InStep<'a> = (Waves, Vec<(OrderKey, Report)>, &'a [usize]);

fn rollout_world() -> impl Strategy<Value = RolloutWorld> {
    let max = prop::collection::vec(1..4usize, 3);
    let groups = prop::collection::vec(
        (prop::collection::btree_set(0..3usize, 1..=3), 1..9usize),
        1..5,
    )
    .prop_map(|g| {
        g.into_iter()
            .map(|(p, n)| (p.into_iter().collect(), n))
            .collect()
    });
    (
        max,
        groups,
        prop::collection::vec(any::<bool>(), 400),
        prop::option::of(0..30usize),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Waves opened by `advance` never leave more of a policy's nodes unavailable than
    /// its `max`; without a failure every rollout completes; after a failure no group
    /// of the failed node's policies opens another wave.
    #[test]
    fn waves_keep_every_policy_within_its_budget_and_halt_on_a_failure(
        (max, groups, coin, fail) in rollout_world()
    ) {
        let max: BTreeMap<usize, usize> = max.into_iter().enumerate().collect();
        let mut waves: Vec<Waves> = Vec::new();
        let mut members: Vec<Vec<(OrderKey, Report)>> = Vec::new();
        let mut node = 0;
        for (i, (policies, n)) in groups.iter().enumerate() {
            let name = format!("rollout-{i}");
            let names: Vec<String> = (0..*n).map(|k| format!("n{}", node + k)).collect();
            node += n;
            let cap = policies.iter().map(|p| max[p]).min().unwrap_or(1);
            waves.push(Waves {
                rollout: Rollout {
                    name: name.clone(),
                    group: format!("g{i}"),
                    rendering: "new".into(),
                    previous: Some("old".into()),
                    through: Through::Nothing,
                    rolled_back: false,
                },
                bounds: plan_waves(&name, &names, cap),
                open: 0,
            });
            members.push(names.iter().map(|m| (order_key(&name, m), Report::Pending)).collect());
        }
        let in_open = |w: &Waves, k: &OrderKey| wave_of(k, &w.bounds) < w.open;
        let mut coin = coin.into_iter().cycle();
        let mut failed_policies: BTreeSet<usize> = BTreeSet::new();
        let mut step = 0;
        for _ in 0..200 {
            let open = {
                let listed: Vec<Vec<Member<'_, usize>>> = members
                    .iter()
                    .zip(&groups)
                    .map(|(m, (p, _))| {
                        m.iter().map(|(key, report)| Member { key: key.clone(), report: *report, policies: p }).collect()
                    })
                    .collect();
                let progress: Vec<Progress<'_, usize>> = waves
                    .iter()
                    .zip(&listed)
                    .map(|(w, m)| Progress { waves: w, members: m })
                    .collect();
                advance(&progress, &max)
            };
            for (g, o) in open.into_iter().enumerate() {
                if o > waves[g].open {
                    prop_assert!(
                        groups[g].0.iter().all(|p| !failed_policies.contains(p)),
                        "group {} opened a wave after a failure of one of its policies", g
                    );
                }
                prop_assert!(o <= waves[g].open + 1, "one wave a step");
                waves[g].open = o;
            }
            for (p, cap) in &max {
                let down: usize = waves
                    .iter()
                    .zip(&members)
                    .zip(&groups)
                    .filter(|(_, (ps, _))| ps.contains(p))
                    .map(|((w, m), _)| m.iter().filter(|(k, r)| in_open(w, k) && *r != Report::Applied).count())
                    .sum();
                prop_assert!(down <= *cap, "policy {}: {} unavailable, max {}", p, down, cap);
            }
            // The agents: some of the open waves' pending members apply (one fails).
            for g in 0..waves.len() {
                for m in 0..members[g].len() {
                    let (k, r) = &members[g][m];
                    if *r == Report::Pending && in_open(&waves[g], k) && coin.next().unwrap_or(true) {
                        let fails = fail == Some(step);
                        step += 1;
                        members[g][m].1 = if fails { Report::Failed } else { Report::Applied };
                        if fails {
                            failed_policies.extend(groups[g].0.iter().copied());
                        }
                    }
                }
            }
        }
        if failed_policies.is_empty() {
            prop_assert!(waves.iter().all(Waves::complete), "every rollout completes");
            prop_assert!(members.iter().flatten().all(|(_, r)| *r == Report::Applied));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// One change over every group (one wave sequence, cut by `plan_waves_within`):
    /// every wave of more than one member holds at most each policy's `max` of it, the
    /// waves take the members in key order, and `advance` keeps every policy within
    /// its budget until every member runs the new rendering.
    #[test]
    fn one_change_over_many_groups_keeps_every_policy_within_its_budget(
        (max, groups, coin, _) in rollout_world()
    ) {
        let max: BTreeMap<usize, usize> = max.into_iter().enumerate().collect();
        let mut names: Vec<(String, &[usize])> = Vec::new();
        for (i, (policies, n)) in groups.iter().enumerate() {
            names.extend((0..*n).map(|k| (format!("g{i}-n{k}"), policies.as_slice())));
        }
        let bounds = plan_waves_within("rollout-9", &names, &max);
        let mut members: Vec<(OrderKey, Report, &[usize])> = names
            .iter()
            .map(|(n, p)| (order_key("rollout-9", n), Report::Pending, *p))
            .collect();
        members.sort_by(|a, b| a.0.cmp(&b.0));
        prop_assert_eq!(bounds.last(), members.last().map(|m| &m.0));
        for w in 0..bounds.len() {
            let wave: Vec<_> = members.iter().filter(|m| wave_of(&m.0, &bounds) == w).collect();
            prop_assert!(!wave.is_empty(), "wave {} is empty", w);
            if wave.len() > 1 {
                for (p, cap) in &max {
                    let n = wave.iter().filter(|m| m.2.contains(p)).count();
                    prop_assert!(n <= *cap, "wave {}: {} of policy {}, max {}", w, n, p, cap);
                }
            }
        }
        // With one policy, the same waves as plan_waves.
        let one: Vec<(&str, &[usize])> = names.iter().map(|(n, _)| (n.as_str(), &[0usize][..])).collect();
        let plain: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
        prop_assert_eq!(
            plan_waves_within("rollout-9", &one, &max),
            plan_waves("rollout-9", &plain, max[&0])
        );
        let mut waves = Waves {
            rollout: Rollout {
                name: "rollout-9".into(),
                group: String::new(),
                rendering: "new".into(),
                previous: Some("old".into()),
                through: Through::Nothing,
                rolled_back: false,
            },
            bounds,
            open: 0,
        };
        let mut coin = coin.into_iter().cycle();
        for _ in 0..300 {
            let listed: Vec<Member<'_, usize>> = members
                .iter()
                .map(|(key, report, policies)| Member { key: key.clone(), report: *report, policies })
                .collect();
            waves.open = advance(&[Progress { waves: &waves, members: &listed }], &max)[0];
            for (p, cap) in &max {
                let down = members
                    .iter()
                    .filter(|m| m.2.contains(p) && wave_of(&m.0, &waves.bounds) < waves.open && m.1 != Report::Applied)
                    .count();
                prop_assert!(down <= *cap, "policy {}: {} unavailable, max {}", p, down, cap);
            }
            for m in &mut members {
                if wave_of(&m.0, &waves.bounds) < waves.open && coin.next().unwrap_or(true) {
                    m.1 = Report::Applied;
                }
            }
        }
        prop_assert!(waves.complete());
        prop_assert!(members.iter().all(|m| m.1 == Report::Applied));
    }

    /// One change's groups, each with its own waves, kept in step by
    /// `advance_in_step`: every policy stays within its budget, the change completes
    /// (a held group never starves the group it waits for, however tight the budgets),
    /// and no group opens a wave past one more than any group of the change with waves
    /// left has applied all through.
    #[test]
    fn one_change_keeps_its_groups_in_step_within_every_budget(
        (max, groups, coin, _) in rollout_world()
    ) {
        let max: BTreeMap<usize, usize> = max.into_iter().enumerate().collect();
        let mut all: Vec<InStep<'_>> = Vec::new();
        for (i, (policies, n)) in groups.iter().enumerate() {
            let names: Vec<(String, &[usize])> =
                (0..*n).map(|k| (format!("g{i}-n{k}"), policies.as_slice())).collect();
            let bounds = plan_waves_within("rollout-3", &names, &max);
            let members = names.iter().map(|(n, _)| (order_key("rollout-3", n), Report::Pending)).collect();
            let rollout = Rollout {
                name: format!("g{i}"),
                group: format!("g{i}"),
                rendering: "new".into(),
                previous: Some("old".into()),
                through: Through::Nothing,
                rolled_back: false,
            };
            all.push((Waves { rollout, bounds, open: 0 }, members, policies.as_slice()));
        }
        let change = vec!["rollout-3"; all.len()];
        let mut coin = coin.into_iter().cycle();
        for _ in 0..400 {
            let listed: Vec<Vec<Member<'_, usize>>> = all
                .iter()
                .map(|(_, ms, policies)| {
                    ms.iter().map(|(key, report)| Member { key: key.clone(), report: *report, policies }).collect()
                })
                .collect();
            let progress: Vec<Progress<'_, usize>> = all
                .iter()
                .zip(&listed)
                .map(|((waves, _, _), members)| Progress { waves, members })
                .collect();
            let opened = advance_in_step(&progress, &change, &max);
            drop(progress);
            for ((waves, _, _), open) in all.iter_mut().zip(opened) {
                prop_assert!(open >= waves.open, "a wave closed");
                waves.open = open;
            }
            for (p, cap) in &max {
                let down: usize = all
                    .iter()
                    .filter(|(_, _, policies)| policies.contains(p))
                    .map(|(w, ms, _)| {
                        ms.iter().filter(|m| wave_of(&m.0, &w.bounds) < w.open && m.1 != Report::Applied).count()
                    })
                    .sum();
                prop_assert!(down <= *cap, "policy {}: {} unavailable, max {}", p, down, cap);
            }
            let done = |w: &Waves, ms: &[(OrderKey, Report)]| {
                ms.iter().filter(|m| m.1 != Report::Applied).map(|m| wave_of(&m.0, &w.bounds)).fold(w.open, usize::min)
            };
            let floor = all
                .iter()
                .map(|(w, ms, _)| (done(w, ms), w.bounds.len()))
                .filter(|(d, len)| d < len)
                .map(|(d, _)| d)
                .min();
            if let Some(f) = floor {
                for (w, _, _) in &all {
                    prop_assert!(w.open <= f + 1, "a group ran ahead: {} open, {} applied by the slowest", w.open, f);
                }
            }
            for (w, ms, _) in &mut all {
                for m in ms.iter_mut() {
                    if wave_of(&m.0, &w.bounds) < w.open && coin.next().unwrap_or(true) {
                        m.1 = Report::Applied;
                    }
                }
            }
        }
        for (w, ms, _) in &all {
            prop_assert!(w.complete(), "the change did not complete");
            prop_assert!(ms.iter().all(|m| m.1 == Report::Applied));
        }
    }
}
