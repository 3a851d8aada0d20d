//! Sizing, eligibility and stable placement of reflectors per zone.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use netpolicy_core::FieldError;

use crate::{Config, Current, Error, NodeInfo, Per, Result};

/// The placement of one zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonePlacement {
    /// Zone name (empty for nodes without the zone label).
    pub zone: String,
    /// Ready nodes in the zone.
    pub ready: usize,
    /// Eligible nodes in the zone.
    pub eligible: usize,
    /// Reflectors wanted before the eligible-node cap.
    pub wanted: u32,
    /// The zone's reflectors, sorted by name.
    pub reflectors: Vec<String>,
    /// Their cluster ID.
    pub cluster_id: Ipv4Addr,
    /// Why the zone has fewer reflectors than wanted, when it does.
    pub shortfall: Option<String>,
}

/// Reflectors for every zone, by zone name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Zones in name order.
    pub zones: Vec<ZonePlacement>,
}

impl Placement {
    /// Every reflector with its cluster ID.
    pub fn reflectors(&self) -> impl Iterator<Item = (&str, Ipv4Addr)> {
        self.zones
            .iter()
            .flat_map(|z| z.reflectors.iter().map(move |r| (r.as_str(), z.cluster_id)))
    }
}

/// Spreads `total` over zones as evenly as possible, never more than a zone's
/// eligible nodes; leftovers go to zones with room, in name order. O(zones²), whatever
/// `total` is.
fn spread(total: u32, caps: &[usize]) -> Vec<u32> {
    let mut out = vec![0u32; caps.len()];
    let mut left = u64::from(total);
    loop {
        let open: Vec<usize> = (0..caps.len())
            .filter(|i| (out[*i] as usize) < caps[*i])
            .collect();
        if open.is_empty() || left == 0 {
            return out;
        }
        let share = (left / open.len() as u64).max(1);
        for i in open {
            let room = (caps[i] - out[i] as usize) as u64;
            let give = share.min(room).min(left);
            out[i] += u32::try_from(give).unwrap_or(u32::MAX);
            left -= give;
            if left == 0 {
                return out;
            }
        }
    }
}

/// Wanted reflectors per zone (before the eligible-node cap) and the targets.
pub(crate) fn sizes(config: &Config, ready: &[usize], caps: &[usize]) -> (Vec<u32>, Vec<u32>) {
    match config.per {
        Per::Zone => ready
            .iter()
            .zip(caps)
            .map(|(&r, &c)| {
                let w = config.wanted(r);
                (w, w.min(u32::try_from(c).unwrap_or(u32::MAX)))
            })
            .unzip(),
        Per::Cluster => {
            let total = config.wanted(ready.iter().sum());
            let even = spread(total, &vec![usize::MAX; caps.len()]);
            (even, spread(total, caps))
        }
    }
}

/// Why a zone has fewer reflectors than it wants.
pub(crate) fn shortfall(wanted: u32, target: u32, eligible: usize) -> Option<String> {
    (target < wanted).then(|| {
        format!(
            "wants {wanted} reflectors but only {eligible} node(s) are eligible; using all of them"
        )
    })
}

/// Chooses the reflectors of every zone.
///
/// # Errors
/// [`Error::Invalid`] when the configuration is invalid or there are more zones than
/// cluster IDs left in the last octet.
pub fn place(nodes: &[NodeInfo], config: &Config, current: &Current) -> Result<Placement> {
    config.check()?;
    let mut zones: BTreeMap<&str, Vec<&NodeInfo>> = BTreeMap::new();
    for n in nodes {
        let zone = config.zone_of(n);
        zones.entry(zone).or_default().push(n);
    }
    let ready: Vec<usize> = zones
        .values()
        .map(|ns| ns.iter().filter(|n| n.ready).count())
        .collect();
    let eligible: Vec<Vec<&NodeInfo>> = zones
        .values()
        .map(|ns| {
            ns.iter()
                .copied()
                .filter(|n| config.is_eligible(n))
                .collect()
        })
        .collect();
    let caps: Vec<usize> = eligible.iter().map(Vec::len).collect();
    let (wanted, targets) = sizes(config, &ready, &caps);
    let clients = current.client_counts();
    let reflectors_now: std::collections::HashSet<&str> = current.reflectors().collect();
    let with_id: std::collections::HashSet<&str> = current
        .marks
        .iter()
        .filter(|(_, m)| m.cluster_id.is_some())
        .map(|(n, _)| n.as_str())
        .collect();
    let chosen: Vec<Vec<String>> = (0..zones.len())
        .map(|i| {
            choose(
                &eligible[i],
                targets[i] as usize,
                config,
                (&reflectors_now, &with_id),
                &clients,
            )
        })
        .collect();
    let ids = zone_cluster_ids(&zones, &chosen, config, current)?;
    let mut out = Vec::with_capacity(zones.len());
    for (i, ((zone, _), chosen)) in zones.iter().zip(chosen).enumerate() {
        let shortfall = shortfall(wanted[i], targets[i], caps[i]);
        let cluster_id = ids[i];
        out.push(ZonePlacement {
            zone: (*zone).to_owned(),
            ready: ready[i],
            eligible: caps[i],
            wanted: wanted[i],
            reflectors: chosen,
            cluster_id,
            shortfall,
        });
    }
    Ok(Placement { zones: out })
}

/// A cluster ID per zone, also when the count is per cluster: a zone's reflectors serve
/// the same clients (`simple`), and reflectors that share a cluster ID but not their
/// clients lose routes (BIRD drops a reflected route whose CLUSTER_LIST holds its own
/// ID; see [`crate::sim`]). `multi` gives each reflector its own ([`crate::topology()`]).
///
/// A zone keeps the ID its staying reflectors hold now (the most common one among
/// them, when no earlier zone in name order kept it), so a new zone never renumbers the
/// others; a leaving reflector's ID counts for nothing (counted, it could take a zone's
/// ID from under a staying reflector of another zone, whose change restarts every
/// session its clients have — found by the rr_topology fuzz target);
/// the others take the lowest last octet from `clusterID`'s up that no node holds now
/// and no zone took. With no reflectors anywhere yet that is `clusterID`, then one up
/// per zone in zone-name order. A zone without reflectors holds no ID (its entry says
/// `clusterID` and means nothing).
fn zone_cluster_ids(
    zones: &BTreeMap<&str, Vec<&NodeInfo>>,
    chosen: &[Vec<String>],
    config: &Config,
    current: &Current,
) -> Result<Vec<Ipv4Addr>> {
    let held: BTreeSet<Ipv4Addr> = current
        .marks
        .values()
        .filter_map(|m| m.cluster_id)
        .collect();
    let mut taken: BTreeSet<Ipv4Addr> = BTreeSet::new();
    let mut out: Vec<Option<Ipv4Addr>> = Vec::with_capacity(zones.len());
    for (zi, nodes) in zones.values().enumerate() {
        if chosen[zi].is_empty() {
            out.push(Some(config.cluster_id));
            continue;
        }
        let mut counts: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        for n in nodes.iter().filter(|n| chosen[zi].contains(&n.name)) {
            if let Some(m) = current.marks.get(&n.name)
                && m.reflector.is_some()
                && let Some(id) = m.cluster_id
            {
                *counts.entry(id).or_default() += 1;
            }
        }
        let keep = counts
            .iter()
            .filter(|(id, _)| !taken.contains(*id))
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(id, _)| *id);
        if let Some(id) = keep {
            taken.insert(id);
        }
        out.push(keep);
    }
    let base = config.cluster_id.octets();
    let mut next = base[3];
    let mut ids = Vec::with_capacity(out.len());
    for id in out {
        let id = match id {
            Some(id) => id,
            None => loop {
                let mut o = base;
                o[3] = next;
                let candidate = Ipv4Addr::from(o);
                if !held.contains(&candidate) && !taken.contains(&candidate) {
                    taken.insert(candidate);
                    break candidate;
                }
                next = next.checked_add(1).ok_or_else(|| {
                    Error::Invalid(vec![FieldError::new(
                        "spec.clusterID",
                        format!(
                            "{} zones need {} cluster IDs counting up from {} (skipping the \
                             ones nodes hold now), past x.x.x.255",
                            zones.len(),
                            zones.len(),
                            config.cluster_id
                        ),
                    )])
                })?;
            },
        };
        ids.push(id);
    }
    Ok(ids)
}

/// `k` reflectors from a zone's eligible nodes: current ones stay (fewest clients
/// removed first when there are too many), then preferred, oldest, by name.
fn choose(
    eligible: &[&NodeInfo],
    k: usize,
    config: &Config,
    (reflectors_now, with_id): (
        &std::collections::HashSet<&str>,
        &std::collections::HashSet<&str>,
    ),
    clients: &BTreeMap<String, usize>,
) -> Vec<String> {
    let preferred = |n: &NodeInfo| {
        config
            .preferred
            .as_ref()
            .is_some_and(|s| s.matches(&n.labels))
    };
    let (mut keep, mut rest): (Vec<&NodeInfo>, Vec<&NodeInfo>) = eligible
        .iter()
        .copied()
        .partition(|n| reflectors_now.contains(n.name.as_str()));
    if keep.len() > k {
        // Most valuable first: holding a cluster ID (one whose ID was released is being
        // demoted by a plan under way, which then moves its clients: counted by clients
        // alone, a plan made after that could keep it and demote another), most
        // clients, preferred, oldest, first name.
        let has_id = |n: &NodeInfo| with_id.contains(n.name.as_str());
        keep.sort_by(|a, b| {
            let ca = clients.get(&a.name).copied().unwrap_or(0);
            let cb = clients.get(&b.name).copied().unwrap_or(0);
            has_id(b)
                .cmp(&has_id(a))
                .then(cb.cmp(&ca))
                .then(preferred(b).cmp(&preferred(a)))
                .then(a.created.cmp(&b.created))
                .then(a.name.cmp(&b.name))
        });
        keep.truncate(k);
    } else {
        rest.sort_by(|a, b| {
            preferred(b)
                .cmp(&preferred(a))
                .then(a.created.cmp(&b.created))
                .then(a.name.cmp(&b.name))
        });
        let need = k - keep.len();
        keep.extend(rest.into_iter().take(need));
    }
    let mut names: Vec<String> = keep.into_iter().map(|n| n.name.clone()).collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BgpPeer, Effect, Taint, Toleration, state::SET_LABEL_PREFIX};
    use netpolicy_core::selector::Selector;

    fn zone_nodes(zone: &str, n: usize, from: i64) -> Vec<NodeInfo> {
        (0..n)
            .map(|i| NodeInfo::ready(&format!("{zone}-{i:03}"), zone, from + i as i64))
            .collect()
    }

    #[test]
    fn sizing_clamps_ready_times_ratio() {
        let c = Config::default();
        assert_eq!(c.wanted(0), 3);
        assert_eq!(c.wanted(1000), 5);
        assert_eq!(c.wanted(1001), 6);
        assert_eq!(c.wanted(100_000), 10);
    }

    #[test]
    fn a_zone_short_of_min_uses_every_eligible_node_and_says_so() {
        let mut nodes = zone_nodes("a", 2, 0);
        nodes[1].unschedulable = true;
        let p = place(&nodes, &Config::default(), &Current::default()).unwrap();
        assert_eq!(p.zones[0].reflectors, ["a-000"]);
        assert!(
            p.zones[0]
                .shortfall
                .as_ref()
                .unwrap()
                .contains("only 1 node(s)")
        );
    }

    #[test]
    fn taints_need_tolerations() {
        let mut nodes = zone_nodes("a", 4, 0);
        nodes[0].taints.push(Taint {
            key: "dedicated".into(),
            value: "db".into(),
            effect: Effect::NoSchedule,
        });
        nodes[1].taints.push(Taint {
            key: "soft".into(),
            value: String::new(),
            effect: Effect::PreferNoSchedule,
        });
        let mut c = Config::default();
        let p = place(&nodes, &c, &Current::default()).unwrap();
        assert_eq!(p.zones[0].reflectors, ["a-001", "a-002", "a-003"]);
        c.tolerations.push(Toleration {
            key: "dedicated".into(),
            exists: true,
            ..Default::default()
        });
        assert!(c.is_eligible(&nodes[0]));
        let wrong_effect = Toleration {
            key: "dedicated".into(),
            exists: true,
            effect: Some(Effect::NoExecute),
            ..Default::default()
        };
        assert!(!wrong_effect.tolerates(&nodes[0].taints[0]));
        let everything = Toleration {
            exists: true,
            ..Default::default()
        };
        assert!(everything.tolerates(&nodes[0].taints[0]));
    }

    #[test]
    fn current_reflectors_stay_and_scale_down_drops_the_fewest_clients() {
        let nodes = zone_nodes("a", 10, 0);
        let mut current = Current::with_reflectors(["a-005", "a-006", "a-007", "a-008"]);
        for (client, set) in [
            ("a-000", ["a-005", "a-006"]),
            ("a-001", ["a-007", "a-006"]),
            ("a-002", ["a-008", "a-005"]),
        ] {
            let key = format!("{SET_LABEL_PREFIX}{client}");
            current
                .marks
                .entry(client.into())
                .or_default()
                .sets
                .insert(key);
            current.bgp_peers.push(BgpPeer {
                name: format!("netpolicy-rr-set-{client}"),
                node_selector: String::new(),
                peer_selector: format!("rr in {{'{}', '{}'}}", set[0], set[1]),
            });
        }
        let p = place(&nodes, &Config::default(), &current).unwrap();
        // 3 wanted: a-007 and a-008 have one client each; a-008 is the youngest.
        assert_eq!(p.zones[0].reflectors, ["a-005", "a-006", "a-007"]);
    }

    #[test]
    fn preferred_nodes_come_first() {
        let mut nodes = zone_nodes("a", 6, 0);
        nodes[5].labels.insert("rr".into(), "yes".into());
        let c = Config {
            preferred: Some(Selector::from_requirements(vec![
                netpolicy_core::selector::Requirement::Exists { key: "rr".into() },
            ])),
            ..Config::default()
        };
        let p = place(&nodes, &c, &Current::default()).unwrap();
        assert_eq!(p.zones[0].reflectors, ["a-000", "a-001", "a-005"]);
    }

    #[test]
    fn per_cluster_spreads_evenly_and_gives_each_zone_its_cluster_id() {
        let mut nodes = zone_nodes("a", 5, 0);
        nodes.extend(zone_nodes("b", 5, 0));
        nodes.extend(zone_nodes("c", 1, 0));
        let c = Config {
            per: Per::Cluster,
            min: 7,
            ..Config::default()
        };
        let p = place(&nodes, &c, &Current::default()).unwrap();
        let counts: Vec<usize> = p.zones.iter().map(|z| z.reflectors.len()).collect();
        assert_eq!(counts, [3, 3, 1]);
        let ids: Vec<Ipv4Addr> = p.zones.iter().map(|z| z.cluster_id).collect();
        assert_eq!(
            ids,
            [
                Ipv4Addr::new(224, 0, 0, 1),
                Ipv4Addr::new(224, 0, 0, 2),
                Ipv4Addr::new(224, 0, 0, 3)
            ]
        );
    }

    #[test]
    fn invalid_numbers_name_their_fields() {
        let c = Config {
            min: 5,
            max: 2,
            ratio: -1.0,
            ..Config::default()
        };
        let e = place(&[], &c, &Current::default()).unwrap_err();
        let Error::Invalid(v) = e else { panic!("{e}") };
        let paths: Vec<&str> = v.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["spec.min", "spec.ratio"]);
    }
}
