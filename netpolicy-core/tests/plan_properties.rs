//! Property tests of the planner against a model kernel: random desired state and random
//! observed state (owned and foreign items, some matching, some stale), the plan applied
//! to the model, then:
//! - planning again finds nothing to do (one plan converges);
//! - foreign items are untouched, except routes in hard-synced tables;
//! - every desired item is in place unless a foreign item holds its identity.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use netpolicy_core::{
    model::{IpFamily, RoutingConfig},
    plan::{Observed, ObservedRoute, ObservedRule, ObservedVlan, Op, plan},
    spec::{RouteSpec, RoutingSpec, RuleSpec, VlanSpec},
};
use proptest::prelude::*;

fn route(to: usize, via: usize, table: usize) -> RouteSpec {
    RouteSpec {
        to: ["10.1.0.0/16", "10.2.0.0/16", "fd00:1::/48", "default"][to].into(),
        via: Some(
            if to == 2 {
                ["fd00::1", "fd00::2"][via]
            } else {
                ["10.0.0.1", "10.0.0.2"][via]
            }
            .into(),
        ),
        table: Some([100, 101][table]),
        ..Default::default()
    }
}

fn rule(prio: usize, table: usize, with_from: bool) -> RuleSpec {
    RuleSpec {
        priority: [100, 200, 300][prio],
        from: with_from.then(|| "10.9.0.0/24".into()),
        fwmark: (!with_from).then(|| "0x1".into()),
        table: Some([100, 101][table]),
        ..Default::default()
    }
}

fn vlan(id: usize, mtu: usize, addr: usize) -> VlanSpec {
    VlanSpec {
        link: "eth0".into(),
        id: [10, 20][id] as u32,
        mtu: [None, Some(9000)][mtu],
        addresses: [
            vec![],
            vec!["10.10.0.5/24".to_string()],
            vec!["fd00:10::5/64".to_string()],
        ][addr]
            .clone(),
        ..Default::default()
    }
}

/// A valid config from small identity pools (first item of each identity wins).
fn config() -> impl Strategy<Value = RoutingConfig> {
    (
        proptest::collection::vec((0..4usize, 0..2usize, 0..2usize), 0..4),
        proptest::collection::vec((0..3usize, 0..2usize, any::<bool>()), 0..3),
        proptest::collection::vec((0..2usize, 0..2usize, 0..3usize), 0..2),
        proptest::collection::vec(prop::sample::select(vec![100u32, 101]), 0..2),
    )
        .prop_map(|(routes, rules, vlans, hard)| {
            let mut spec = RoutingSpec::default();
            let mut seen = std::collections::BTreeSet::new();
            for (t, v, tb) in routes {
                if seen.insert(("r", t, tb, false)) {
                    spec.routes.push(route(t, v, tb));
                }
            }
            for (p, tb, f) in rules {
                if seen.insert(("u", p, 0, f)) {
                    spec.rules.push(rule(p, tb, f));
                }
            }
            for (i, m, a) in vlans {
                if seen.insert(("v", i, 0, false)) {
                    spec.vlans.push(vlan(i, m, a));
                }
            }
            spec.table_hard_sync = hard;
            spec.validate("spec").unwrap()
        })
}

/// What a node may have: items of some config, each owned or foreign, VLANs up or down.
fn observed() -> impl Strategy<Value = Observed> {
    (
        config(),
        proptest::collection::vec(any::<(bool, bool)>(), 12),
    )
        .prop_map(|(c, flags)| {
            let mut f = flags.into_iter().cycle();
            let mut next = move || f.next().unwrap_or((true, true));
            let mut o = Observed::default();
            for v in c.vlans {
                let (owned, up) = next();
                let mut v = v.clone();
                v.mtu = v.mtu.or(Some(1500));
                o.vlans.push(ObservedVlan { vlan: v, up, owned });
            }
            for r in c.routes {
                let (owned, twin) = next();
                if owned && !twin {
                    // A foreign route with the same identity, listed first (as
                    // `ip route prepend` puts it): a replace would hit it.
                    let mut foreign = r.clone();
                    foreign.via = foreign.via.map(|v| match v {
                        std::net::IpAddr::V4(_) => "10.0.0.9".parse().unwrap(),
                        std::net::IpAddr::V6(_) => "fd00::9".parse().unwrap(),
                    });
                    o.routes.insert(
                        0,
                        ObservedRoute {
                            route: foreign,
                            owned: false,
                            protocol: 4,
                        },
                    );
                }
                o.routes.push(ObservedRoute {
                    route: r,
                    owned,
                    protocol: if owned { 203 } else { 3 },
                });
            }
            for r in c.rules {
                let owned = next().0;
                let families = r
                    .key
                    .family()
                    .map_or(vec![IpFamily::V4, IpFamily::V6], |f| vec![f]);
                for family in families {
                    o.rules.push(ObservedRule {
                        family,
                        rule: r.clone(),
                        owned,
                        protocol: if owned { 203 } else { 0 },
                    });
                }
            }
            o
        })
}

/// The model kernel: executes operations on the observed state.
fn apply(o: &mut Observed, ops: &[Op]) {
    for op in ops {
        match op {
            Op::DeleteRule { family, rule, .. } => o
                .rules
                .retain(|r| !(r.family == *family && r.rule.key == rule.key)),
            // The kernel deletes the first route matching everything the request names.
            Op::DeleteRoute { route, protocol } => {
                let at = o
                    .routes
                    .iter()
                    .position(|x| x.route == *route && x.protocol == *protocol)
                    .expect("a delete names an existing route exactly");
                o.routes.remove(at);
            }
            Op::DeleteAddress { dev, address } => {
                for v in o.vlans.iter_mut().filter(|v| v.vlan.name == *dev) {
                    v.vlan.addresses.retain(|a| a != address);
                }
            }
            // The kernel removes the routes through a deleted link with it.
            Op::DeleteLink(name) => {
                o.vlans.retain(|v| v.vlan.name != *name);
                o.routes.retain(|r| {
                    r.route.dev.as_ref() != Some(name)
                        && r.route
                            .nexthops
                            .iter()
                            .all(|h| h.dev.as_ref() != Some(name))
                });
            }
            Op::CreateLink(v) => {
                assert!(o.vlans.iter().all(|x| x.vlan.name != v.name), "link exists");
                let mut v = v.clone();
                v.mtu = v.mtu.or(Some(1500));
                o.vlans.push(ObservedVlan {
                    vlan: v,
                    up: false,
                    owned: true,
                });
            }
            Op::SetMtu { dev, mtu } => {
                for v in o.vlans.iter_mut().filter(|v| v.vlan.name == *dev) {
                    v.vlan.mtu = Some(*mtu);
                }
            }
            Op::SetUp(dev) => {
                for v in o.vlans.iter_mut().filter(|v| v.vlan.name == *dev) {
                    v.up = true;
                }
            }
            Op::AddAddress { dev, address } => {
                let v = o
                    .vlans
                    .iter_mut()
                    .find(|v| v.vlan.name == *dev)
                    .expect("link");
                v.vlan.addresses.push(*address);
                v.vlan.addresses.sort();
            }
            Op::DeleteLocalRoute { dev, address } => {
                for a in o
                    .addresses
                    .iter_mut()
                    .filter(|a| a.address.key() == (dev, address))
                {
                    a.address.local_route = false;
                }
            }
            // NLM_F_REPLACE overwrites the first route of that identity, whoever's.
            Op::ReplaceRoute(r) => {
                let new = ObservedRoute {
                    route: r.clone(),
                    owned: true,
                    protocol: 203,
                };
                match o.routes.iter().position(|x| x.route.key() == r.key()) {
                    Some(at) => o.routes[at] = new,
                    None => o.routes.push(new),
                }
            }
            Op::AddRoute(r) => o.routes.push(ObservedRoute {
                route: r.clone(),
                owned: true,
                protocol: 203,
            }),
            Op::AddRule { family, rule } => o.rules.push(ObservedRule {
                family: *family,
                rule: rule.clone(),
                owned: true,
                protocol: 203,
            }),
            Op::ReplaceRule { family, old, new } => {
                o.rules
                    .retain(|r| !(r.family == *family && r.rule.key == old.key));
                o.rules.push(ObservedRule {
                    family: *family,
                    rule: new.clone(),
                    owned: true,
                    protocol: 203,
                });
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn one_plan_converges_and_leaves_foreign_items_alone(
        start in observed(),
        desired in config(),
    ) {
        let p = plan(&start, &desired);
        let mut after = start.clone();
        apply(&mut after, &p.ops);

        // Converged: nothing left to do.
        let again = plan(&after, &desired);
        prop_assert!(again.ops.is_empty(), "second plan: {:?}", again.ops);
        prop_assert_eq!(&again.skipped, &p.skipped);

        // Foreign items untouched (hard-synced tables excepted for routes).
        for v in start.vlans.iter().filter(|v| !v.owned) {
            prop_assert!(after.vlans.contains(v), "foreign link {v:?} changed");
        }
        for r in start.routes.iter().filter(|r| !r.owned) {
            if !desired.table_hard_sync.contains(&r.route.table) {
                prop_assert!(after.routes.contains(r), "foreign route {r:?} changed");
            }
        }
        for r in start.rules.iter().filter(|r| !r.owned) {
            let hard = r.rule.action.table().is_some_and(|t| desired.table_hard_sync.contains(&t));
            if !hard {
                prop_assert!(after.rules.contains(r), "foreign rule {r:?} changed");
            }
        }

        // Desired items are in place, unless a foreign item holds the identity.
        for r in &desired.routes {
            let present = after.routes.iter().any(|x| x.route == *r);
            let blocked = p.skipped.iter().any(|s| s.item == netpolicy_core::merge::ItemRef::Route(r.key()));
            prop_assert!(present || blocked, "route {r:?} missing");
        }
        for v in &desired.vlans {
            let present = after.vlans.iter().any(|x| x.vlan.name == v.name && x.vlan.addresses == v.addresses);
            let blocked = p.skipped.iter().any(|s| s.item == netpolicy_core::merge::ItemRef::Vlan(v.name.clone()));
            prop_assert!(present || blocked, "vlan {v:?} missing");
        }
        // Nothing owned is left that is not desired.
        for r in after.routes.iter().filter(|r| r.owned) {
            prop_assert!(desired.routes.contains(&r.route), "stale owned route {r:?}");
        }
        for r in after.rules.iter().filter(|r| r.owned) {
            prop_assert!(desired.rules.contains(&r.rule), "stale owned rule {r:?}");
        }
    }
}
