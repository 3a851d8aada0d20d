//! Property tests of placement: the sizing rule, eligibility, stability and order
//! independence, over random clusters and configurations.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;

use netpolicy_rr::{Config, Current, Effect, NodeInfo, Per, Taint, place};
use proptest::prelude::*;

fn node() -> impl Strategy<Value = (usize, bool, bool, bool, i64)> {
    (
        0..4usize,
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        0..1000i64,
    )
}

fn cluster() -> impl Strategy<Value = Vec<NodeInfo>> {
    proptest::collection::vec(node(), 0..80).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (z, ready, unsched, tainted, created))| {
                let mut n = NodeInfo::ready(&format!("n{i:03}"), ["a", "b", "c", "d"][z], created);
                n.ready = ready;
                n.unschedulable = unsched;
                if tainted {
                    n.taints.push(Taint {
                        key: "k".into(),
                        value: String::new(),
                        effect: Effect::NoExecute,
                    });
                }
                n
            })
            .collect()
    })
}

fn config() -> impl Strategy<Value = Config> {
    (0..4u32, 0..6u32, 1..100u32, any::<bool>()).prop_map(|(min, extra, ratio, cluster)| Config {
        min,
        max: min + extra,
        ratio: f64::from(ratio) / 100.0,
        per: if cluster { Per::Cluster } else { Per::Zone },
        ..Config::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn placement_follows_the_rules(
        nodes in cluster(),
        config in config(),
        current_picks in proptest::collection::btree_set(0..80usize, 0..12),
        seed in any::<u64>(),
    ) {
        let picks: Vec<String> = current_picks.iter().map(|i| format!("n{i:03}")).collect();
        let current = Current::with_reflectors(picks.iter().map(String::as_str));
        let p = place(&nodes, &config, &current).unwrap();
        let by_name = |n: &str| nodes.iter().find(|x| x.name == n).unwrap();
        let mut total = 0;
        for z in &p.zones {
            let zone_nodes: Vec<&NodeInfo> = nodes
                .iter()
                .filter(|n| n.labels.values().next().map(String::as_str) == Some(z.zone.as_str()))
                .collect();
            let eligible = zone_nodes.iter().filter(|n| config.is_eligible(n)).count();
            prop_assert_eq!(z.eligible, eligible);
            // Eligibility is never violated.
            for r in &z.reflectors {
                prop_assert!(config.is_eligible(by_name(r)), "{r} is not eligible");
            }
            // Sizing: per zone, clamp(ceil(ready x ratio)) capped by the eligible nodes.
            if config.per == Per::Zone {
                let want = config.wanted(z.ready) as usize;
                prop_assert_eq!(z.reflectors.len(), want.min(eligible));
            }
            // Stability: eligible current reflectors stay while the zone needs as many.
            let kept: Vec<&String> = z.reflectors.iter().filter(|r| current.is_reflector(r)).collect();
            let eligible_current = zone_nodes
                .iter()
                .filter(|n| current.is_reflector(&n.name) && config.is_eligible(n))
                .count();
            prop_assert_eq!(kept.len(), eligible_current.min(z.reflectors.len()));
            total += z.reflectors.len();
        }
        if config.per == Per::Cluster {
            let ready = nodes.iter().filter(|n| n.ready).count();
            let eligible = nodes.iter().filter(|n| config.is_eligible(n)).count();
            prop_assert_eq!(total, (config.wanted(ready) as usize).min(eligible));
            // As even as possible: zones differ by at most one unless capped.
            let counts: Vec<usize> = p.zones.iter().map(|z| z.reflectors.len()).collect();
            let (lo, hi) = (counts.iter().min(), counts.iter().max());
            if let (Some(lo), Some(hi)) = (lo, hi) {
                let capped = p.zones.iter().any(|z| z.reflectors.len() == z.eligible);
                prop_assert!(hi - lo <= 1 || capped, "{counts:?}");
            }
        }
        // Input order does not matter.
        let mut shuffled = nodes.clone();
        let mut s = seed;
        for i in (1..shuffled.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (s >> 33) as usize % (i + 1));
        }
        prop_assert_eq!(place(&shuffled, &config, &current).unwrap(), p.clone());
        // The simple topology: every client has a session whenever any reflector exists,
        // only with reflectors, and the objects grow with zones, not nodes.
        let t = netpolicy_rr::topology_for(&nodes, &config, &current, p.clone()).unwrap();
        let reflectors: BTreeSet<&str> = p.reflectors().map(|(r, _)| r).collect();
        for (client, rs) in &t.clients {
            prop_assert!(!reflectors.contains(client.as_str()));
            prop_assert!(!rs.is_empty() || reflectors.is_empty(), "{client} has no session");
            prop_assert!(rs.iter().all(|r| reflectors.contains(r.as_str())));
        }
        prop_assert_eq!(t.clients.len() + reflectors.len(), nodes.len());
        prop_assert_eq!(t.bgp_peers.len(), p.zones.len() + 1);
        // Reflector names are unique across zones.
        let all: Vec<&str> = p.reflectors().map(|(r, _)| r).collect();
        prop_assert_eq!(all.len(), all.iter().collect::<BTreeSet<_>>().len());
    }
}
