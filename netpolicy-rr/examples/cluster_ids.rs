//! What the cluster-ID layout costs and buys: sessions, paths (Adj-RIB-In copies) and
//! routes learned per node, with Calico's BIRD route reflection (`sim`), for the layout
//! netpolicy uses (`multi`: an ID per reflector) against one ID per zone.
//!
//! ```sh
//! cargo run --release -p netpolicy-rr --example cluster_ids
//! ```

use std::{collections::BTreeSet, net::Ipv4Addr};

use netpolicy_rr::{
    Config, Current, Kind, NodeInfo,
    sim::{Cluster, Tie},
    topology,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "{:<50} {:>5} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "layout", "nodes", "sess/cli", "sess/rr", "paths/cli", "paths/rr", "routes lost"
    );
    for (zones, p) in [(3usize, 3u32), (3, 2), (1, 2)] {
        let nodes: Vec<NodeInfo> = (0..300)
            .map(|i| NodeInfo::ready(&format!("n{i:03}"), ["a", "b", "c"][i % zones], i as i64))
            .collect();
        let config = Config {
            topology: Kind::Multi,
            peers_per_node: p,
            ratio: 0.02,
            ..Config::default()
        };
        let t = topology(&nodes, &config, &Current::default())?;
        let ours = t.applied();
        // The same sessions with one cluster ID per zone (what `multi` used before).
        let mut per_zone = ours.clone();
        for (i, z) in t.placement.zones.iter().enumerate() {
            for r in &z.reflectors {
                if let Some(m) = per_zone.marks.get_mut(r) {
                    m.cluster_id = Some(Ipv4Addr::new(224, 0, 0, 1 + i as u8));
                }
            }
        }
        let reflectors: BTreeSet<&str> = t.placement.reflectors().map(|(r, _)| r).collect();
        for (name, current) in [
            ("an ID per reflector (netpolicy)", &ours),
            ("an ID per zone", &per_zone),
        ] {
            let c = Cluster::new(&nodes, current, &config.reflector_label);
            let sessions = c.sessions()?;
            let paths = c.paths(Tie::Lowest)?;
            let learned = c.propagation(Tie::Lowest)?;
            let lost: usize = learned.values().map(|xs| nodes.len() - 1 - xs.len()).sum();
            let avg = |of_rr: bool, f: &dyn Fn(&str) -> usize| {
                let v: Vec<usize> = nodes
                    .iter()
                    .filter(|n| reflectors.contains(n.name.as_str()) == of_rr)
                    .map(|n| f(&n.name))
                    .collect();
                v.iter().sum::<usize>() as f64 / v.len().max(1) as f64
            };
            println!(
                "{:<50} {:>5} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>12}",
                format!("{name}, {zones} zone(s), p={p}"),
                nodes.len(),
                avg(false, &|n| sessions[n].len()),
                avg(true, &|n| sessions[n].len()),
                avg(false, &|n| paths[n]),
                avg(true, &|n| paths[n]),
                lost
            );
        }
    }
    Ok(())
}
