//! A `multi` topology for 15,000 nodes over 3 zones, then one reflector of zone `b`
//! leaves (its node is deleted) and the topology is recomputed from the applied state,
//! ring included: only the clients that peered with it move, and the balance bound
//! holds.
//!
//! Run: `cargo run --release -p netpolicy-rr --example reflector_leaves`

#![allow(clippy::unwrap_used, missing_docs)]
use netpolicy_rr::{Config, Current, Kind, NodeInfo, balance_bound, topology};
use std::collections::BTreeSet;
fn main() {
    let nodes: Vec<NodeInfo> = (0..15_000)
        .map(|i| NodeInfo::ready(&format!("node-{i:05}"), ["a", "b", "c"][i % 3], i as i64))
        .collect();
    let c = Config {
        topology: Kind::Multi,
        ..Config::default()
    };
    let t0 = topology(&nodes, &c, &Current::default()).unwrap();
    let now = t0.applied();
    for victim in [0usize, 4, 8] {
        let r: Vec<&str> = t0.placement.zones[1]
            .reflectors
            .iter()
            .map(String::as_str)
            .collect();
        let gone = r[victim.min(r.len() - 1)].to_owned();
        let rest: Vec<NodeInfo> = nodes.iter().filter(|n| n.name != gone).cloned().collect();
        let t1 = topology(&rest, &c, &now).unwrap();
        let mut moved = 0;
        let mut clients_moved = 0;
        let mut with_gone = 0;
        for (n, rs) in &t1.clients {
            let before: BTreeSet<&String> = t0.clients.get(n).into_iter().flatten().collect();
            let after: BTreeSet<&String> = rs.iter().collect();
            let d = before.symmetric_difference(&after).count();
            moved += d;
            if d > 0 {
                clients_moved += 1;
            }
            if before.iter().any(|x| **x == gone) {
                with_gone += 1;
            }
        }
        let loads = t1.loads();
        println!(
            "remove {gone}: {clients_moved} clients moved ({with_gone} had it), {moved} peerings changed; max load {} bound {}",
            loads.values().max().unwrap(),
            balance_bound(loads.values().sum(), loads.len())
        );
    }
}
