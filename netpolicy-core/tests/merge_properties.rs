//! Property tests of the merge against a naive oracle.
//!
//! - the engine's outcome for every node equals a straightforward per-node merge written
//!   here with BTreeMaps (the oracle);
//! - the result does not depend on the order nodes and policies are given;
//! - conflicts are symmetric (both orders name the same sources);
//! - merging is idempotent (upserting the same policy again changes nothing; the merged
//!   result, merged again as one policy, is the same items);
//! - after any sequence of node, label and policy changes, the incremental engine equals
//!   a build from scratch.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{collections::BTreeMap, sync::Arc};

use netpolicy_core::{
    merge::{
        Conflict, Engine, ItemRef, MergedConfig, NodeOutcome, Policy, Problem, Source, Sourced,
        merge,
    },
    selector::Labels,
    spec::{
        AddressSpec, LabelSelector, LabelSelectorRequirement, RouteSpec, RoutingSpec, RuleSpec,
        VlanSpec,
    },
};
use proptest::prelude::*;

const KEYS: [&str; 3] = ["zone", "role", "rack"];
const VALUES: [&str; 3] = ["a", "b", "c"];

fn labels_strategy() -> impl Strategy<Value = Labels> {
    proptest::collection::btree_map(
        prop::sample::select(KEYS.to_vec()).prop_map(String::from),
        prop::sample::select(VALUES.to_vec()).prop_map(String::from),
        0..=3,
    )
}

fn selector_strategy() -> impl Strategy<Value = LabelSelector> {
    let expr = (
        prop::sample::select(KEYS.to_vec()),
        prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]),
        proptest::collection::vec(prop::sample::select(VALUES.to_vec()), 1..=2),
    )
        .prop_map(|(k, op, vals)| LabelSelectorRequirement {
            key: k.into(),
            operator: op.into(),
            values: if matches!(op, "In" | "NotIn") {
                vals.into_iter().map(String::from).collect()
            } else {
                vec![]
            },
        });
    (
        proptest::collection::btree_map(
            prop::sample::select(KEYS.to_vec()).prop_map(String::from),
            prop::sample::select(VALUES.to_vec()).prop_map(String::from),
            0..=1,
        ),
        proptest::collection::vec(expr, 0..=1),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
            ..LabelSelector::default()
        })
}

/// Small pools of identities and contents so that overlaps and conflicts are common.
fn spec_strategy() -> impl Strategy<Value = RoutingSpec> {
    let route = (0..3usize, 0..2usize, 0..2usize).prop_map(|(to, via, table)| RouteSpec {
        to: ["10.1.0.0/16", "10.2.0.0/16", "fd00:1::/48"][to].into(),
        via: Some(
            if to == 2 {
                ["fd00::1", "fd00::2"][via]
            } else {
                ["10.0.0.1", "10.0.0.2"][via]
            }
            .into(),
        ),
        table: Some([100, 254][table]),
        ..Default::default()
    });
    let rule = (0..3usize, 0..2usize).prop_map(|(prio, table)| RuleSpec {
        priority: [100, 200, 300][prio],
        from: (prio == 1).then(|| "10.9.0.0/24".into()),
        table: Some([100, 101][table]),
        ..Default::default()
    });
    let vlan = (0..2usize, 0..2usize).prop_map(|(name, mtu)| VlanSpec {
        link: "eth0".into(),
        id: [10, 20][name],
        mtu: Some([1500, 9000][mtu]),
        ..Default::default()
    });
    let address = (0..2usize, 0..2usize).prop_map(|(dev, a)| AddressSpec {
        dev: ["lo", "eth0"][dev].into(),
        address: ["203.0.113.7/32", "2001:db8::7/128"][a].into(),
        ..Default::default()
    });
    (
        proptest::collection::vec(route, 0..4),
        proptest::collection::vec(rule, 0..3),
        proptest::collection::vec(vlan, 0..2),
        proptest::collection::vec(prop::sample::select(vec![100u32, 101]), 0..2),
        proptest::collection::vec(address, 0..2),
    )
        .prop_map(
            |(routes, rules, vlans, table_hard_sync, addresses)| RoutingSpec {
                vlans,
                routes,
                addresses,
                rules,
                table_hard_sync,
            },
        )
}

/// Specs from the strategy may repeat an identity with different content inside one
/// object; keep the first of each so every generated policy is valid.
fn first_per_identity(spec: RoutingSpec) -> RoutingSpec {
    let mut seen = std::collections::BTreeSet::new();
    let routes = spec
        .routes
        .into_iter()
        .filter(|r| seen.insert(("r", r.to.clone(), r.table)))
        .collect();
    let rules = spec
        .rules
        .into_iter()
        .filter(|r| seen.insert(("u", format!("{}{:?}", r.priority, r.from), None)))
        .collect();
    let vlans = spec
        .vlans
        .into_iter()
        .filter(|v| seen.insert(("v", v.id.to_string(), None)))
        .collect();
    RoutingSpec {
        vlans,
        routes,
        rules,
        ..spec
    }
}

#[derive(Debug, Clone)]
enum PolicyInput {
    Cluster(RoutingSpec),
    Node {
        name: String,
        priority: i64,
        selector: LabelSelector,
        spec: RoutingSpec,
        valid: bool,
    },
}

impl PolicyInput {
    fn name(&self) -> String {
        match self {
            Self::Cluster(_) => "ClusterConfig/default".into(),
            Self::Node { name, .. } => format!("NodeConfig/{name}"),
        }
    }

    fn policy(&self) -> Policy {
        match self {
            Self::Cluster(spec) => Policy::cluster("default", spec.validate("spec").unwrap()),
            Self::Node {
                name,
                priority,
                selector,
                spec,
                valid,
            } => {
                let sel = selector.validate("spec.nodeSelector").unwrap();
                if *valid {
                    Policy::node_config(name, *priority, sel, spec.validate("spec").unwrap())
                } else {
                    Policy::invalid(Source::node_config(name), *priority, sel)
                }
            }
        }
    }
}

/// A selector that sometimes also pins one node by its hostname, as per-node
/// NodeConfigs do (the engine lays those over the shared policies' merge).
fn maybe_pinned_selector() -> impl Strategy<Value = LabelSelector> {
    (
        selector_strategy(),
        proptest::option::weighted(0.4, 0..12usize),
    )
        .prop_map(|(mut s, pin)| {
            if let Some(i) = pin {
                s.match_labels
                    .insert(HOSTNAME.into(), format!("node-{i:02}"));
            }
            s
        })
}

/// Every node carries its name as `kubernetes.io/hostname`, as kubelets set it.
const HOSTNAME: &str = "kubernetes.io/hostname";

fn with_hostname(name: &str, mut labels: Labels) -> Labels {
    labels.insert(HOSTNAME.into(), name.into());
    labels
}

fn policy_strategy() -> impl Strategy<Value = PolicyInput> {
    prop_oneof![
        1 => spec_strategy().prop_map(|s| PolicyInput::Cluster(first_per_identity(s))),
        6 => (0..6usize, 0..3i64, maybe_pinned_selector(), spec_strategy(), prop::bool::weighted(0.9))
            .prop_map(|(n, priority, selector, spec, valid)| PolicyInput::Node {
                name: format!("nc{n}"),
                priority,
                selector,
                spec: first_per_identity(spec),
                valid,
            }),
    ]
}

/// Later policies with the same name replace earlier ones, as in the API server.
fn unique(policies: Vec<PolicyInput>) -> Vec<PolicyInput> {
    let mut by: BTreeMap<String, PolicyInput> = BTreeMap::new();
    for p in policies {
        by.insert(p.name(), p);
    }
    by.into_values().collect()
}

// ---- The oracle: the merge rules of DESIGN.md written out the plain way. ----
// It shares no matching or precedence code with the engine: label selectors are
// evaluated here from the spec, and precedence is the (rank, priority) pair of
// DESIGN.md ("NodeConfig beats ClusterConfig; a higher priority NodeConfig beats a lower
// one").

/// Kubernetes LabelSelector semantics, from the spec, by hand.
fn oracle_matches(sel: &LabelSelector, labels: &Labels) -> bool {
    sel.match_labels
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
        && sel.match_expressions.iter().all(|e| {
            let have = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => have.is_some_and(|v| e.values.contains(v)),
                "NotIn" => have.is_none_or(|v| !e.values.contains(v)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                other => panic!("the strategy made operator {other}"),
            }
        })
}

/// One policy as the oracle sees it.
struct OraclePolicy {
    source: Source,
    /// (0, 0) for the ClusterConfig, (1, priority) for a NodeConfig.
    rank: (u8, i64),
    /// `None` when invalid.
    config: Option<netpolicy_core::model::RoutingConfig>,
}

fn oracle_kind<T: Clone + Eq + std::fmt::Debug, K: Ord + Clone>(
    policies: &[OraclePolicy],
    items: impl Fn(&netpolicy_core::model::RoutingConfig) -> Vec<T>,
    key: impl Fn(&T) -> K,
    item_ref: impl Fn(&K) -> ItemRef,
    conflicts: &mut Vec<Conflict>,
) -> Vec<Sourced<T>> {
    let mut groups: BTreeMap<K, Vec<(&OraclePolicy, T)>> = BTreeMap::new();
    for p in policies {
        if let Some(c) = &p.config {
            for it in items(c) {
                groups.entry(key(&it)).or_default().push((p, it));
            }
        }
    }
    let mut out = Vec::new();
    for (k, cands) in groups {
        let top = cands.iter().map(|(p, _)| p.rank).max().unwrap();
        let at_top: Vec<&(&OraclePolicy, T)> =
            cands.iter().filter(|(p, _)| p.rank == top).collect();
        let first = &at_top[0].1;
        let mut sources: Vec<Source> = at_top.iter().map(|(p, _)| p.source.clone()).collect();
        sources.sort();
        if at_top.iter().all(|(_, it)| it == first) {
            out.push(Sourced {
                item: Arc::new(first.clone()),
                sources: sources.into(),
            });
        } else {
            conflicts.push(Conflict {
                item: item_ref(&k),
                sources,
            });
        }
    }
    out
}

fn oracle(inputs: &[PolicyInput], labels: &Labels) -> NodeOutcome {
    let applying: Vec<OraclePolicy> = inputs
        .iter()
        .filter_map(|i| match i {
            PolicyInput::Cluster(spec) => Some(OraclePolicy {
                source: Source::cluster("default"),
                rank: (0, 0),
                config: Some(spec.validate("spec").unwrap()),
            }),
            PolicyInput::Node {
                name,
                priority,
                selector,
                spec,
                valid,
            } => oracle_matches(selector, labels).then(|| OraclePolicy {
                source: Source::node_config(name),
                rank: (1, *priority),
                config: valid.then(|| spec.validate("spec").unwrap()),
            }),
        })
        .collect();
    let mut problems: Vec<Problem> = applying
        .iter()
        .filter(|p| p.config.is_none())
        .map(|p| Problem::InvalidPolicy(p.source.clone()))
        .collect();
    let mut conflicts = Vec::new();
    let vlans = oracle_kind(
        &applying,
        |c| c.vlans.clone(),
        |v| v.name.clone(),
        |k| ItemRef::Vlan(k.clone()),
        &mut conflicts,
    );
    let routes = oracle_kind(
        &applying,
        |c| c.routes.clone(),
        |r| r.key(),
        |k| ItemRef::Route(*k),
        &mut conflicts,
    );
    let addresses = oracle_kind(
        &applying,
        |c| c.addresses.clone(),
        Clone::clone,
        |k| ItemRef::Address(k.clone()),
        &mut conflicts,
    );
    let rules = oracle_kind(
        &applying,
        |c| c.rules.clone(),
        |r| r.key.clone(),
        |k| ItemRef::Rule(k.clone()),
        &mut conflicts,
    );
    problems.extend(conflicts.into_iter().map(Problem::Conflict));
    if !problems.is_empty() {
        problems.sort();
        return NodeOutcome::Held(problems.into());
    }
    let mut hard: Vec<u32> = applying
        .iter()
        .flat_map(|p| p.config.iter().flat_map(|c| c.table_hard_sync.clone()))
        .collect();
    hard.sort_unstable();
    hard.dedup();
    NodeOutcome::Rendered(
        MergedConfig {
            vlans,
            routes,
            addresses,
            rules,
            table_hard_sync: hard,
        }
        .into(),
    )
}

fn snapshot(e: &Engine) -> BTreeMap<String, NodeOutcome> {
    e.outcomes()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect()
}

fn nodes_strategy() -> impl Strategy<Value = Vec<(String, Labels)>> {
    proptest::collection::btree_map(0..12usize, labels_strategy(), 0..12).prop_map(|m| {
        m.into_iter()
            .map(|(i, l)| {
                let name = format!("node-{i:02}");
                let l = with_hostname(&name, l);
                (name, l)
            })
            .collect()
    })
}

#[derive(Debug, Clone)]
enum Change {
    UpsertNode(usize, Labels),
    RemoveNode(usize),
    UpsertPolicy(PolicyInput),
    RemovePolicy(usize),
}

fn change_strategy() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0..14usize, labels_strategy()).prop_map(|(i, l)| Change::UpsertNode(i, l)),
        1 => (0..14usize).prop_map(Change::RemoveNode),
        3 => policy_strategy().prop_map(Change::UpsertPolicy),
        1 => (0..7usize).prop_map(Change::RemovePolicy),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_naive_oracle_on_every_node(
        nodes in nodes_strategy(),
        policies in proptest::collection::vec(policy_strategy(), 0..7),
    ) {
        let policies = unique(policies);
        let engine = Engine::build(nodes.clone(), policies.iter().map(PolicyInput::policy));
        for (name, labels) in &nodes {
            let want = oracle(&policies, labels);
            prop_assert_eq!(engine.outcome(name), Some(&want), "node {}", name);
        }
    }

    #[test]
    fn merge_does_not_depend_on_input_order(
        nodes in nodes_strategy(),
        policies in proptest::collection::vec(policy_strategy(), 0..7),
        seed in any::<u64>(),
    ) {
        let policies = unique(policies);
        let a = Engine::build(nodes.clone(), policies.iter().map(PolicyInput::policy));
        let mut shuffled_nodes = nodes.clone();
        let mut shuffled_policies = policies.clone();
        shuffle(&mut shuffled_nodes, seed);
        shuffle(&mut shuffled_policies, seed.rotate_left(17));
        let b = Engine::build(shuffled_nodes, shuffled_policies.iter().map(PolicyInput::policy));
        prop_assert_eq!(snapshot(&a), snapshot(&b));
        // The single-node merge as well.
        let ps: Vec<Policy> = policies.iter().map(PolicyInput::policy).collect();
        let mut rev: Vec<&Policy> = ps.iter().collect();
        rev.reverse();
        prop_assert_eq!(merge(&ps), merge(rev));
    }

    #[test]
    fn merge_is_idempotent(
        nodes in nodes_strategy(),
        policies in proptest::collection::vec(policy_strategy(), 1..7),
    ) {
        let policies = unique(policies);
        let mut engine = Engine::build(nodes, policies.iter().map(PolicyInput::policy));
        let before = snapshot(&engine);
        for p in &policies {
            prop_assert!(engine.upsert_policy(p.policy()).is_empty());
        }
        prop_assert_eq!(&before, &snapshot(&engine));
        // The merged result of a node, given back as one policy, merges to itself.
        for outcome in before.values() {
            if let NodeOutcome::Rendered(cfg) = outcome {
                let again = merge([&Policy::cluster("default", cfg.to_routing_config())]);
                let items = again.config().unwrap().to_routing_config();
                prop_assert_eq!(items, cfg.to_routing_config());
            }
        }
    }

    #[test]
    fn incremental_merge_equals_a_full_recompute(
        nodes in nodes_strategy(),
        policies in proptest::collection::vec(policy_strategy(), 0..5),
        changes in proptest::collection::vec(change_strategy(), 1..25),
    ) {
        let mut policies: BTreeMap<String, PolicyInput> =
            unique(policies).into_iter().map(|p| (p.name(), p)).collect();
        let mut nodes: BTreeMap<String, Labels> = nodes.into_iter().collect();
        let mut engine = Engine::build(
            nodes.clone(),
            policies.values().map(PolicyInput::policy),
        );
        let mut before = snapshot(&engine);
        for change in changes {
            let changed = match change {
                Change::UpsertNode(i, l) => {
                    let name = format!("node-{i:02}");
                    let l = with_hostname(&name, l);
                    nodes.insert(name.clone(), l.clone());
                    engine.upsert_node(&name, l)
                }
                Change::RemoveNode(i) => {
                    let name = format!("node-{i:02}");
                    prop_assert_eq!(nodes.remove(&name).is_some(), engine.remove_node(&name));
                    vec![]
                }
                Change::UpsertPolicy(p) => {
                    policies.insert(p.name(), p.clone());
                    engine.upsert_policy(p.policy())
                }
                Change::RemovePolicy(i) => {
                    let name = format!("nc{i}");
                    let source = Source::node_config(&name);
                    policies.remove(&format!("NodeConfig/{name}"));
                    engine.remove_policy(&source)
                }
            };
            let full = Engine::build(nodes.clone(), policies.values().map(PolicyInput::policy));
            let after = snapshot(&engine);
            prop_assert_eq!(&after, &snapshot(&full));
            // Every node reported as changed really is in the new state, and every node
            // whose outcome changed (or that is new) is reported: a controller writes
            // exactly the reported nodes.
            let reported: std::collections::BTreeSet<String> =
                changed.iter().map(|n| n.to_string()).collect();
            for n in &reported {
                prop_assert!(nodes.contains_key(n.as_str()), "{} reported but gone", n);
            }
            for (n, outcome) in &after {
                if before.get(n) != Some(outcome) {
                    prop_assert!(reported.contains(n), "{} changed but was not reported", n);
                }
            }
            // And nothing else: a node whose merged lists are equal is not reported,
            // however the engine layered them (a reported node costs a render and a
            // comparison in the controller).
            for n in &reported {
                prop_assert!(before.get(n) != after.get(n), "{} reported but unchanged", n);
            }
            // The labels the engine keeps (shared strings) are each node's labels.
            for (n, l) in &nodes {
                let kept = engine.labels(n);
                prop_assert_eq!(kept.as_ref(), Some(l));
            }
            // What each policy selects, from the label index, is what its selector
            // matches.
            for p in policies.values() {
                let p = p.policy();
                let brute: Vec<&str> = nodes
                    .iter()
                    .filter(|(_, l)| p.selector().matches(l))
                    .map(|(n, _)| n.as_str())
                    .collect();
                prop_assert_eq!(engine.selected(p.source()), brute);
            }
            before = after;
        }
    }
}

/// Fisher-Yates with a splitmix64 stream: deterministic for a seed.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        v.swap(i, (z % (i as u64 + 1)) as usize);
    }
}

#[test]
fn conflicts_are_symmetric_and_name_both_sources() {
    let spec = |via: &str| {
        RoutingSpec {
            routes: vec![RouteSpec {
                to: "10.20.0.0/16".into(),
                via: Some(via.into()),
                ..Default::default()
            }],
            ..Default::default()
        }
        .validate("spec")
        .unwrap()
    };
    let all = netpolicy_core::selector::Selector::everything();
    let a = Policy::node_config("a", 5, all.clone(), spec("10.0.0.1"));
    let b = Policy::node_config("b", 5, all.clone(), spec("10.0.0.2"));
    let ab = merge([&a, &b]);
    let ba = merge([&b, &a]);
    assert_eq!(ab, ba);
    let problems = ab.problems();
    assert_eq!(problems.len(), 1);
    assert_eq!(
        problems[0].to_string(),
        "route 10.20.0.0/16 table 254 is defined differently by NodeConfig/a and NodeConfig/b \
         at equal precedence"
    );
    // A higher priority resolves it, whatever the order.
    let c = Policy::node_config("c", 6, all, spec("10.0.0.3"));
    let out = merge([&a, &c, &b]);
    let cfg = out.config().unwrap().to_merged();
    assert_eq!(cfg.routes[0].item.via.unwrap().to_string(), "10.0.0.3");
    assert_eq!(cfg.routes[0].sources[..], [Source::node_config("c")]);
}

#[test]
fn a_trench_item_is_never_overridden_and_selects_its_node_only() {
    let spec = |via: &str| {
        RoutingSpec {
            routes: vec![RouteSpec {
                to: "0.0.0.0/0".into(),
                via: Some(via.into()),
                table: Some(20000),
                ..Default::default()
            }],
            ..Default::default()
        }
        .validate("spec")
        .unwrap()
    };
    let all = netpolicy_core::selector::Selector::everything();
    let t = Policy::trench("ns", "trench-a", "n1", spec("169.254.100.150"));
    // Whatever the NodeConfig's priority, a different definition is a conflict naming
    // both objects.
    for prio in [-5, 0, 1000] {
        let nc = Policy::node_config("edge", prio, all.clone(), spec("10.0.0.9"));
        let out = merge([&nc, &t]);
        assert_eq!(out, merge([&t, &nc]));
        assert_eq!(
            out.problems()[0].to_string(),
            "route 0.0.0.0/0 table 20000 is defined differently by NodeConfig/edge and \
             Trench/ns/trench-a (a traffic domain's items are never overridden)"
        );
    }
    // The same definition is one item.
    let nc = Policy::node_config("edge", 7, all, spec("169.254.100.150"));
    let out = merge([&nc, &t]);
    assert_eq!(out.config().unwrap().routes().count(), 1);
    // Through the engine it reaches the node it was compiled for, and only that one,
    // by the node-name label the callers add.
    use netpolicy_core::merge::with_node_name;
    let mut e = Engine::new();
    e.upsert_node("n1", with_node_name("n1", &Labels::new()));
    e.upsert_node("n2", with_node_name("n2", &Labels::new()));
    assert_eq!(e.upsert_policy(t)[..], [Arc::<str>::from("n1")]);
    assert_eq!(
        e.outcome("n1").unwrap().config().unwrap().routes().count(),
        1
    );
    assert!(e.outcome("n2").unwrap().config().unwrap().is_empty());
}

#[test]
fn same_item_from_two_sources_is_one_item_listing_both() {
    let spec = RoutingSpec {
        routes: vec![RouteSpec {
            to: "10.20.0.0/16".into(),
            dev: Some("eth0".into()),
            ..Default::default()
        }],
        ..Default::default()
    }
    .validate("spec")
    .unwrap();
    let all = netpolicy_core::selector::Selector::everything();
    let a = Policy::node_config("a", 0, all.clone(), spec.clone());
    let b = Policy::node_config("b", 0, all, spec);
    let out = merge([&b, &a]);
    let cfg = out.config().unwrap().to_merged();
    assert_eq!(cfg.routes.len(), 1);
    assert_eq!(
        cfg.routes[0].sources[..],
        [Source::node_config("a"), Source::node_config("b")]
    );
}

#[test]
fn an_invalid_policy_holds_the_nodes_it_selects_only() {
    let sel = LabelSelector {
        match_labels: [("zone".into(), "a".into())].into(),
        ..Default::default()
    }
    .validate("s")
    .unwrap();
    let engine = Engine::build(
        [
            (
                "n1".to_string(),
                Labels::from([("zone".into(), "a".into())]),
            ),
            (
                "n2".to_string(),
                Labels::from([("zone".into(), "b".into())]),
            ),
        ],
        [Policy::invalid(Source::node_config("bad"), 0, sel)],
    );
    assert_eq!(
        engine.outcome("n1").unwrap().problems(),
        [Problem::InvalidPolicy(Source::node_config("bad"))]
    );
    assert!(engine.outcome("n2").unwrap().config().is_some());
}

#[test]
fn a_node_given_twice_to_build_keeps_its_last_labels() {
    let sel = LabelSelector {
        match_labels: [("zone".into(), "a".into())].into(),
        ..Default::default()
    }
    .validate("s")
    .unwrap();
    let routes = RoutingSpec {
        routes: vec![RouteSpec {
            to: "10.0.0.0/8".into(),
            dev: Some("eth0".into()),
            ..Default::default()
        }],
        ..Default::default()
    }
    .validate("spec")
    .unwrap();
    let label = |z: &str| Labels::from([("zone".to_string(), z.to_string())]);
    let engine = Engine::build(
        [
            ("n1".to_string(), label("a")),
            ("n1".to_string(), label("b")),
        ],
        [Policy::node_config("p", 0, sel, routes)],
    );
    assert_eq!(engine.node_count(), 1);
    assert!(engine.outcome("n1").unwrap().config().unwrap().is_empty());
}

/// A selector pinning one node by hostname.
fn pin(node: &str) -> netpolicy_core::selector::Selector {
    LabelSelector {
        match_labels: [(HOSTNAME.into(), node.into())].into(),
        ..Default::default()
    }
    .validate("s")
    .unwrap()
}

/// Validated routes `(to, via)`.
fn routes_via(routes: &[(&str, &str)]) -> netpolicy_core::model::RoutingConfig {
    RoutingSpec {
        routes: routes
            .iter()
            .map(|(to, via)| RouteSpec {
                to: (*to).into(),
                via: Some((*via).into()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
    .validate("spec")
    .unwrap()
}

/// The engine merges a node's per-node policies (pinned by hostname or node name) over
/// the merge of its shared ones; these are the cases where the overlay changes the
/// shared result, checked against a plain merge of everything.
#[test]
fn per_node_policies_laid_over_shared_ones_give_the_plain_merge() {
    use netpolicy_core::{merge::with_node_name, selector::Selector};
    let route = |via: &str| routes_via(&[("10.20.0.0/16", via)]);
    let all = Selector::everything();
    // Two shared NodeConfigs conflict; n1's own, at a higher priority, resolves it there.
    let a = Policy::node_config("a", 1, all.clone(), route("10.0.0.1"));
    let b = Policy::node_config("b", 1, all.clone(), route("10.0.0.2"));
    let own = Policy::node_config("own-n1", 2, pin("n1"), route("10.0.0.3"));
    // A lower-priority per-node one does not: n2 stays held.
    let low = Policy::node_config("own-n2", 0, pin("n2"), route("10.0.0.4"));
    // A trench's item for n3 differs from the shared winner of a higher precedence
    // elsewhere: still a conflict (exclusive), like a plain merge says.
    let c = Policy::node_config("c", 5, pin("n3"), route("10.0.0.5"));
    let t = Policy::trench("ns", "t", "n3", route("10.0.0.6"));
    let nodes: Vec<(String, Labels)> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| {
            (
                (*n).to_owned(),
                with_node_name(n, &with_hostname(n, Labels::new())),
            )
        })
        .collect();
    let policies = [a, b, own, low, c, t];
    let e = Engine::build(nodes.clone(), policies.iter().cloned());
    for (n, labels) in &nodes {
        let plain = merge(policies.iter().filter(|p| p.selector().matches(labels)));
        assert_eq!(e.outcome(n), Some(&plain), "{n}");
    }
    let n1 = e.outcome("n1").unwrap().config().unwrap().to_merged();
    assert_eq!(n1.routes[0].item.via.unwrap().to_string(), "10.0.0.3");
    assert!(e.outcome("n2").unwrap().config().is_none());
    assert!(e.outcome("n3").unwrap().config().is_none());
}

/// A shared edit reports exactly the nodes whose merged lists change: here every node
/// overrides the edited route with its own, so none does; an edit of a route no node
/// overrides reports them all. Their outcomes are a shared layer plus their own items
/// (what makes the shared edit cheap at one NodeConfig per node).
#[test]
fn a_shared_edit_that_every_node_overrides_changes_no_node() {
    use netpolicy_core::{merge::with_node_name, selector::Selector};
    let names = ["n1", "n2", "n3"];
    let nodes: Vec<(String, Labels)> = names
        .iter()
        .map(|n| {
            (
                (*n).to_owned(),
                with_node_name(n, &with_hostname(n, Labels::new())),
            )
        })
        .collect();
    let shared = |via: &str, other: &str| {
        Policy::node_config(
            "shared",
            0,
            Selector::everything(),
            routes_via(&[("10.20.0.0/16", via), ("10.30.0.0/16", other)]),
        )
    };
    let mut policies = vec![shared("10.0.0.1", "10.0.0.9")];
    for n in names {
        policies.push(Policy::node_config(
            &format!("own-{n}"),
            10,
            pin(n),
            routes_via(&[("10.20.0.0/16", "10.0.0.7"), ("10.40.0.0/16", "10.0.0.8")]),
        ));
    }
    let mut e = Engine::build(nodes.clone(), policies.clone());
    for n in names {
        let cfg = e.outcome(n).unwrap().config().unwrap();
        assert_eq!(cfg.routes().count(), 3, "{n}");
        assert_eq!(cfg.own().map(|o| o.routes.len()), Some(2), "{n}: own layer");
    }
    // Every node's own route replaces the edited one: nothing to report.
    assert_eq!(
        e.upsert_policy(shared("10.0.0.2", "10.0.0.9")),
        Vec::<std::sync::Arc<str>>::new()
    );
    // The other shared route reaches every node.
    let changed = e.upsert_policy(shared("10.0.0.2", "10.0.0.6"));
    assert_eq!(changed.iter().map(|n| &**n).collect::<Vec<_>>(), names);
    policies[0] = shared("10.0.0.2", "10.0.0.6");
    for (n, labels) in &nodes {
        let plain = merge(policies.iter().filter(|p| p.selector().matches(labels)));
        assert_eq!(e.outcome(n), Some(&plain), "{n}");
    }
}
