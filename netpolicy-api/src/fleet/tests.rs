use netpolicy_core::{
    fleet::order_key,
    render::{SourceRef, SourcedSpec},
    spec::RouteSpec,
};

use super::*;

/// The destinations of a joined rendering's routes, in order.
fn route_destinations(j: &Joined) -> Vec<&str> {
    j.rendered
        .routes
        .iter()
        .map(|r| r.item.to.as_str())
        .collect()
}
fn route(to: &str) -> SourcedSpec<RouteSpec> {
    SourcedSpec {
        item: RouteSpec {
            to: to.into(),
            dev: Some("eth0".into()),
            ..RouteSpec::default()
        },
        sources: vec![SourceRef {
            kind: "ClusterConfig".into(),
            name: "default".into(),
        }],
    }
}

fn part(part: u32, parts: u32, to: &str) -> NodeNetworkRenderingSpec {
    NodeNetworkRenderingSpec {
        rendering: "r-1".into(),
        part,
        parts,
        rendered: RenderedSpec {
            routes: vec![route(to)],
            table_hard_sync: if part == 0 { vec![100] } else { Vec::new() },
            ..RenderedSpec::default()
        },
        rollback_seconds: (part == 0).then_some(9),
        ..NodeNetworkRenderingSpec::default()
    }
}

#[test]
fn parts_join_in_order_whatever_order_they_are_listed_in() {
    let (a, b, c) = (
        part(0, 3, "10.0.0.0/8"),
        part(1, 3, "10.1.0.0/16"),
        part(2, 3, "10.2.0.0/16"),
    );
    let j = join("r-1", [&c, &a, &b]).expect("complete");
    let to = route_destinations(&j);
    assert_eq!(to, ["10.0.0.0/8", "10.1.0.0/16", "10.2.0.0/16"]);
    assert_eq!(
        (j.rendered.table_hard_sync, j.rollback_seconds),
        (vec![100], Some(9))
    );
}

#[test]
fn a_missing_repeated_or_foreign_part_is_an_error_not_a_smaller_rendering() {
    let (a, b, c) = (
        part(0, 3, "10.0.0.0/8"),
        part(1, 3, "10.1.0.0/16"),
        part(2, 3, "10.2.0.0/16"),
    );
    assert_eq!(
        join("r-1", [&a, &c]),
        Err(JoinError::Incomplete {
            rendering: "r-1".into(),
            part: 1,
            parts: 3
        })
    );
    assert_eq!(
        join("r-1", [&a, &b]),
        Err(JoinError::Incomplete {
            rendering: "r-1".into(),
            part: 2,
            parts: 3
        })
    );
    assert!(matches!(
        join("r-1", [&a, &b, &b, &c]),
        Err(JoinError::Inconsistent { part: 1, .. })
    ));
    assert_eq!(join("r-1", []), Err(JoinError::Missing("r-1".into())));
    let mut other = b.clone();
    other.rendering = "r-2".into();
    assert!(matches!(
        join("r-1", [&a, &other, &c]),
        Err(JoinError::Inconsistent { part: 1, .. })
    ));
    let mut fewer = c.clone();
    fewer.parts = 2;
    assert!(matches!(
        join("r-1", [&a, &b, &fewer]),
        Err(JoinError::Inconsistent { part: 2, .. })
    ));
}

#[test]
fn a_rendering_runs_its_layers_items_in_order_then_its_own() {
    let layer = |name: &str, to: &str| {
        let mut p = part(0, 1, to);
        p.rendering = name.into();
        p.rendered.table_hard_sync.clear();
        p.rollback_seconds = None;
        join(name, [&p]).expect("a layer of one part")
    };
    let (a, b) = (layer("l-a", "10.8.0.0/16"), layer("l-b", "10.9.0.0/16"));
    let mut own = part(0, 1, "10.0.0.0/8");
    own.layers = vec!["l-b".into(), "l-a".into()];
    let j = join("r-1", [&own]).expect("complete");
    assert_eq!(j.layers, ["l-b", "l-a"]);
    let find = |n: &str| [&a, &b].into_iter().find(|l| l.rendering == n);
    let laid = j.lay(find).expect("both layers read");
    let to = route_destinations(&laid);
    assert_eq!(to, ["10.9.0.0/16", "10.8.0.0/16", "10.0.0.0/8"]);
    assert_eq!(
        (laid.rendered.table_hard_sync, laid.rollback_seconds),
        (vec![100], Some(9))
    );
    // Without its layers a rendering is not run smaller.
    let only_a = |n: &str| (n == "l-a").then_some(&a);
    assert_eq!(
        j.lay(only_a),
        Err(JoinError::Layer {
            rendering: "r-1".into(),
            layer: "l-b".into(),
            message: "not read".into()
        })
    );
    // A layer is not a rendering with probes, tables or layers of its own.
    let mut deep = b.clone();
    deep.layers = vec!["l-a".into()];
    let nested = |n: &str| if n == "l-b" { Some(&deep) } else { find(n) };
    assert!(matches!(j.lay(nested), Err(JoinError::Layer { layer, .. }) if layer == "l-b"));
    let whole = join("r-1", [&part(0, 1, "10.0.0.0/8")]).expect("complete");
    let other = |n: &str| find(n);
    assert!(
        matches!(j.lay(|n| if n == "l-a" { Some(&whole) } else { other(n) }), Err(JoinError::Layer { layer, .. }) if layer == "l-a")
    );
}

#[test]
fn a_rollout_survives_the_trip_through_its_object_and_a_bad_key_names_its_field() {
    for through in [
        Through::Nothing,
        Through::Everything,
        Through::Key(order_key("rollout-3", "node-7")),
        Through::Key(OrderKey {
            hash: 0,
            node: "n".into(),
        }),
    ] {
        let spec = NetworkRolloutSpec {
            sequence: 3,
            groups: vec![RolloutGroup {
                group: "g-1".into(),
                rendering: "r-2".into(),
                previous: Some("r-1".into()),
                through: RolloutGroup::through_text(&through),
            }],
            rolled_back: false,
        };
        let r = Rollout {
            name: "rollout-3".into(),
            group: "g-1".into(),
            rendering: "r-2".into(),
            previous: Some("r-1".into()),
            through,
            rolled_back: false,
        };
        assert_eq!(spec.rollouts("rollout-3"), Ok(vec![r]));
    }
    for bad in [
        "",
        "abc/node",
        "00000000000000zz/n",
        "0000000000000000/",
        "0000000000000000",
    ] {
        let spec = NetworkRolloutSpec {
            groups: vec![
                RolloutGroup::default(),
                RolloutGroup {
                    through: Some(bad.into()),
                    ..RolloutGroup::default()
                },
            ],
            ..NetworkRolloutSpec::default()
        };
        let e = current_rollouts(None, [("rollout-1", &spec)]).expect_err(bad);
        assert_eq!(
            e.field, "NetworkRollout/rollout-1: spec.groups[1].through",
            "{bad}"
        );
    }
}

/// A group of a rollout moving to `r` from `r-0`, `through` as far as given.
fn moving(g: &str, r: &str, through: Option<&str>) -> RolloutGroup {
    RolloutGroup {
        group: g.into(),
        rendering: r.into(),
        previous: Some("r-0".into()),
        through: through.map(str::to_owned),
    }
}

/// A fleet whose groups run what `settled` says (group, rendering).
fn settled_fleet(settled: &[(&str, &str)]) -> NetworkFleetSpec {
    NetworkFleetSpec {
        groups: settled
            .iter()
            .map(|(g, r)| FleetGroup {
                group: (*g).into(),
                rendering: (*r).into(),
            })
            .collect(),
        ..NetworkFleetSpec::default()
    }
}

#[test]
fn the_newest_rollout_naming_a_group_decides_then_the_settled_rendering() {
    let group = |g: &str, r: &str| moving(g, r, Some("*"));
    let old = NetworkRolloutSpec {
        sequence: 4,
        groups: vec![group("g-1", "r-old"), group("g-2", "r-two")],
        rolled_back: false,
    };
    let new = NetworkRolloutSpec {
        sequence: 5,
        groups: vec![group("g-1", "r-new")],
        rolled_back: false,
    };
    let fleet = settled_fleet(&[("g-1", "r-settled"), ("g-3", "r-three")]);
    // Listed oldest first: the order they are given in does not matter.
    let all =
        current_rollouts(Some(&fleet), [("rollout-4", &old), ("rollout-5", &new)]).expect("valid");
    let first = |g: &str| {
        all.iter()
            .find(|r| r.group == g)
            .map(|r| r.rendering.as_str())
    };
    assert_eq!(first("g-1"), Some("r-new"));
    assert_eq!(first("g-2"), Some("r-two"));
    assert_eq!(first("g-3"), Some("r-three"));
    assert_eq!(first("g-4"), None);
}

#[test]
fn one_groups_rollouts_are_the_whole_lists_entries_of_that_group_in_order() {
    let group = |g: &str, r: &str| moving(g, r, None);
    let old = NetworkRolloutSpec {
        sequence: 4,
        groups: vec![group("g-1", "r-old"), group("g-2", "r-two")],
        rolled_back: false,
    };
    let mut new = NetworkRolloutSpec {
        sequence: 5,
        groups: vec![group("g-1", "r-new"), group("g-3", "r-three")],
        rolled_back: true,
    };
    new.groups[0].through = Some("*".into());
    let fleet = settled_fleet(&[("g-1", "r-settled"), ("g-2", "r-two-settled")]);
    let listed = [("rollout-4", &old), ("rollout-5", &new)];
    let all = current_rollouts(Some(&fleet), listed).expect("valid");
    for g in ["g-1", "g-2", "g-3", "g-4"] {
        let of = current_rollouts_of(g, Some(&fleet), listed).expect("valid");
        let expected: Vec<_> = all.iter().filter(|r| r.group == g).cloned().collect();
        assert_eq!(of, expected, "{g}");
    }
    assert_eq!(
        current_rollouts_of("g-1", Some(&fleet), listed)
            .unwrap()
            .len(),
        3
    );
    // Another group's entry that does not parse stops the whole list, not this
    // group's; this group's own does, named by its place in the whole rollout.
    new.groups[1].through = Some("not a key".into());
    let listed = [("rollout-4", &old), ("rollout-5", &new)];
    let bad = current_rollouts(Some(&fleet), listed).expect_err("g-3's through");
    assert_eq!(
        bad.field,
        "NetworkRollout/rollout-5: spec.groups[1].through"
    );
    assert!(current_rollouts_of("g-1", Some(&fleet), listed).is_ok());
    let bad = current_rollouts_of("g-3", Some(&fleet), listed).expect_err("its through");
    assert_eq!(
        bad.field,
        "NetworkRollout/rollout-5: spec.groups[1].through"
    );
}

#[test]
fn an_invalid_selector_in_the_index_selects_no_node() {
    let fleet = NetworkFleetSpec {
        policies: vec![FleetPolicy {
            policy: "NodeConfig/bad".into(),
            node_selector: LabelSelector {
                match_labels: [("bad key!".to_owned(), "x".to_owned())].into(),
                ..LabelSelector::default()
            },
        }],
        ..NetworkFleetSpec::default()
    };
    let labels = netpolicy_core::selector::Labels::from([("bad key!".to_owned(), "x".to_owned())]);
    assert!(!fleet.index()[0].selector.matches(&labels));
}
