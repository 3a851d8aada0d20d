//! Incremental topology: one node added or removed without recomputing the cluster.

use std::collections::{BTreeSet, HashMap};

use crate::{
    BgpPeer, Config, Current, Kind, NodeInfo, Result, Topology,
    place::{shortfall, sizes},
    topology::{Ring, balance_bound, base_warnings, best, topology},
};

/// What one update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The reflectors changed (or the balance bound would have broken), so the topology
    /// was recomputed from the cluster; `false` means the update touched only the node.
    pub recomputed: bool,
    /// Client–reflector peerings added plus removed.
    pub peerings: usize,
}

/// A topology kept up to date as nodes come and go.
///
/// Every update gives exactly the topology that [`topology()`] computes from the new node
/// list with the previous topology as the current state; it is only faster. When the
/// reflectors stay (the common case: a client joins or leaves), an update costs
/// O(R·p + log n); otherwise it recomputes.
///
/// ```
/// use netpolicy_rr::{Config, Current, Engine, Kind, NodeInfo};
///
/// let nodes: Vec<NodeInfo> = (0..300)
///     .map(|i| NodeInfo::ready(&format!("n{i:03}"), ["a", "b", "c"][i % 3], i as i64))
///     .collect();
/// let config = Config { topology: Kind::Multi, ..Config::default() };
/// let mut engine = Engine::new(nodes, config, &Current::default())?;
/// let change = engine.add_node(NodeInfo::ready("late", "b", 999))?;
/// assert!(!change.recomputed);
/// assert_eq!(change.peerings, 3);
/// assert_eq!(engine.topology().clients["late"].len(), 3);
/// # Ok::<(), netpolicy_rr::Error>(())
/// ```
#[derive(Debug)]
pub struct Engine {
    config: Config,
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    topo: Topology,
    zone_ix: HashMap<String, usize>,
    members: Vec<usize>,
    ready: Vec<usize>,
    eligible: Vec<usize>,
    multi: Option<MultiState>,
}

#[derive(Debug)]
struct MultiState {
    ring: Ring,
    load: Vec<usize>,
    count: Vec<usize>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring").field("names", &self.names).finish()
    }
}

impl Engine {
    /// Computes the topology of `nodes` from `current`.
    ///
    /// # Errors
    /// As [`topology()`].
    pub fn new(nodes: Vec<NodeInfo>, config: Config, current: &Current) -> Result<Self> {
        let topo = topology(&nodes, &config, current)?;
        let mut e = Self {
            config,
            index: HashMap::new(),
            nodes,
            topo,
            zone_ix: HashMap::new(),
            members: Vec::new(),
            ready: Vec::new(),
            eligible: Vec::new(),
            multi: None,
        };
        e.reindex()?;
        Ok(e)
    }

    /// The current topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The nodes, in no particular order.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// The state of the cluster once the topology is applied.
    pub fn current(&self) -> Current {
        self.topo.applied()
    }

    fn reindex(&mut self) -> Result<()> {
        self.index = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let zones = &self.topo.placement.zones;
        self.zone_ix = zones
            .iter()
            .enumerate()
            .map(|(i, z)| (z.zone.clone(), i))
            .collect();
        self.ready = zones.iter().map(|z| z.ready).collect();
        self.eligible = zones.iter().map(|z| z.eligible).collect();
        self.members = vec![0; zones.len()];
        for n in &self.nodes {
            if let Some(z) = self.zone_ix.get(self.config.zone_of(n)) {
                self.members[*z] += 1;
            }
        }
        self.multi = None;
        if self.config.topology == Kind::Multi {
            let p = usize::try_from(self.config.peers_per_node).unwrap_or(usize::MAX);
            let ring = Ring::new(&self.topo.placement, p, &self.topo.ring)?;
            let mut load = vec![0; ring.names.len()];
            let mut count = vec![0; ring.sets.len()];
            let by_key = ring.by_key();
            for m in self.topo.marks.values() {
                for k in &m.sets {
                    if let Some(s) = by_key.get(k.as_str()) {
                        count[*s] += 1;
                        for r in &ring.sets[*s] {
                            load[*r] += 1;
                        }
                    }
                }
            }
            self.multi = Some(MultiState { ring, load, count });
        }
        Ok(())
    }

    fn recompute(&mut self) -> Result<Change> {
        let current = self.current();
        let old = std::mem::take(&mut self.topo.clients);
        self.topo = topology(&self.nodes, &self.config, &current)?;
        self.reindex()?;
        let mut peerings = 0;
        for (c, rs) in &self.topo.clients {
            let before: BTreeSet<&String> = old.get(c).into_iter().flatten().collect();
            let after: BTreeSet<&String> = rs.iter().collect();
            peerings += before.symmetric_difference(&after).count();
        }
        for (c, rs) in &old {
            if !self.topo.clients.contains_key(c) {
                peerings += rs.len();
            }
        }
        Ok(Change {
            recomputed: true,
            peerings,
        })
    }

    /// Whether the per-zone reflector targets for these counts match the placement.
    fn same_targets(&self, ready: &[usize], eligible: &[usize]) -> bool {
        let (_, targets) = sizes(&self.config, ready, eligible);
        targets
            .iter()
            .zip(&self.topo.placement.zones)
            .all(|(t, z)| *t as usize == z.reflectors.len())
    }

    fn commit_counts(&mut self, ready: Vec<usize>, eligible: Vec<usize>) {
        let (wanted, targets) = sizes(&self.config, &ready, &eligible);
        for (i, z) in self.topo.placement.zones.iter_mut().enumerate() {
            z.ready = ready[i];
            z.eligible = eligible[i];
            z.wanted = wanted[i];
            z.shortfall = shortfall(wanted[i], targets[i], eligible[i]);
        }
        self.ready = ready;
        self.eligible = eligible;
    }

    fn balanced(&self) -> bool {
        let Some(m) = &self.multi else {
            return true;
        };
        let bound = balance_bound(m.load.iter().sum(), m.load.len());
        m.load.iter().all(|l| *l <= bound)
    }

    /// Adds `node`, or updates the node of that name (an update that changes its zone,
    /// readiness or eligibility recomputes; any other is free).
    ///
    /// # Errors
    /// As [`topology()`] when the update recomputes.
    pub fn add_node(&mut self, node: NodeInfo) -> Result<Change> {
        // Moves are relative to the state before (the last topology, applied): an
        // update that does not recompute moves nobody.
        self.topo.moves.clear();
        let mut peerings = 0;
        if let Some(&i) = self.index.get(&node.name) {
            let old = &self.nodes[i];
            let same = self.config.zone_of(old) == self.config.zone_of(&node)
                && old.ready == node.ready
                && self.config.is_eligible(old) == self.config.is_eligible(&node);
            self.nodes[i] = node;
            if same {
                // Nothing placement or peering depends on changed.
                return Ok(Change {
                    recomputed: false,
                    peerings: 0,
                });
            }
            return self.recompute();
        }
        let zone = self.config.zone_of(&node).to_owned();
        let Some(&z) = self.zone_ix.get(&zone) else {
            return self.push_and_recompute(node, peerings);
        };
        let (mut ready, mut eligible) = (self.ready.clone(), self.eligible.clone());
        ready[z] += usize::from(node.ready);
        eligible[z] += usize::from(self.config.is_eligible(&node));
        if !self.same_targets(&ready, &eligible) {
            return self.push_and_recompute(node, peerings);
        }
        self.commit_counts(ready, eligible);
        self.members[z] += 1;
        let name = node.name.clone();
        self.index.insert(name.clone(), self.nodes.len());
        self.nodes.push(node);
        let rs = self.assign(&name, z);
        peerings += rs.len();
        self.topo.clients.insert(name.clone(), rs);
        self.topo.warnings = base_warnings(&self.topo.placement, true);
        if !self.balanced() {
            let c = self.recompute()?;
            // The new client had no set before this update: placing it is no move.
            self.topo.moves.remove(&name);
            return Ok(Change {
                recomputed: true,
                peerings: peerings + c.peerings,
            });
        }
        Ok(Change {
            recomputed: false,
            peerings,
        })
    }

    fn push_and_recompute(&mut self, node: NodeInfo, before: usize) -> Result<Change> {
        self.index.insert(node.name.clone(), self.nodes.len());
        self.nodes.push(node);
        let c = self.recompute()?;
        Ok(Change {
            recomputed: true,
            peerings: before + c.peerings,
        })
    }

    /// The reflectors of a new client in zone `z`, updating loads, objects and marks.
    fn assign(&mut self, name: &str, z: usize) -> Vec<String> {
        let Some(m) = &mut self.multi else {
            let zone = &self.topo.placement.zones[z];
            if !zone.reflectors.is_empty() {
                return zone.reflectors.clone();
            }
            let mut all: Vec<String> = self
                .topo
                .placement
                .reflectors()
                .map(|(r, _)| r.to_owned())
                .collect();
            all.sort();
            return all;
        };
        let Some(s) = best(&m.ring, &m.load, |s| m.count[s], z, None) else {
            return Vec::new();
        };
        m.count[s] += 1;
        for r in &m.ring.sets[s] {
            m.load[*r] += 1;
        }
        if m.count[s] == 1 {
            let obj = m.ring.object(s, &self.config.reflector_label);
            insert_sorted(&mut self.topo.bgp_peers, obj);
        }
        self.topo
            .marks
            .entry(name.to_owned())
            .or_default()
            .sets
            .insert(m.ring.keys[s].clone());
        m.ring.sets[s]
            .iter()
            .map(|r| m.ring.names[*r].clone())
            .collect()
    }

    /// Removes the node called `name` (nothing happens when there is none).
    ///
    /// # Errors
    /// As [`topology()`] when the update recomputes.
    pub fn remove_node(&mut self, name: &str) -> Result<Change> {
        self.topo.moves.clear();
        let Some(&i) = self.index.get(name) else {
            return Ok(Change {
                recomputed: false,
                peerings: 0,
            });
        };
        let node = self.nodes.swap_remove(i);
        self.index.remove(name);
        if let Some(moved) = self.nodes.get(i) {
            self.index.insert(moved.name.clone(), i);
        }
        let z = self.zone_ix.get(self.config.zone_of(&node)).copied();
        let reflector = self
            .topo
            .marks
            .get(name)
            .is_some_and(|m| m.reflector.is_some());
        let Some(z) = z.filter(|z| !reflector && self.members[*z] > 1) else {
            return self.recompute();
        };
        let (mut ready, mut eligible) = (self.ready.clone(), self.eligible.clone());
        ready[z] -= usize::from(node.ready);
        eligible[z] -= usize::from(self.config.is_eligible(&node));
        if !self.same_targets(&ready, &eligible) {
            return self.recompute();
        }
        self.commit_counts(ready, eligible);
        self.members[z] -= 1;
        let rs = self.topo.clients.remove(name).unwrap_or_default();
        let marks = self.topo.marks.remove(name).unwrap_or_default();
        if let Some(m) = &mut self.multi {
            let by_key = m.ring.by_key();
            for k in &marks.sets {
                if let Some(&s) = by_key.get(k.as_str()) {
                    m.count[s] -= 1;
                    for r in &m.ring.sets[s] {
                        m.load[*r] -= 1;
                    }
                    if m.count[s] == 0 {
                        let obj = m.ring.object(s, &self.config.reflector_label);
                        if let Ok(at) = self.topo.bgp_peers.binary_search(&obj) {
                            self.topo.bgp_peers.remove(at);
                        }
                    }
                }
            }
        }
        self.topo.warnings = base_warnings(&self.topo.placement, !self.topo.clients.is_empty());
        if !self.balanced() {
            let c = self.recompute()?;
            return Ok(Change {
                recomputed: true,
                peerings: rs.len() + c.peerings,
            });
        }
        Ok(Change {
            recomputed: false,
            peerings: rs.len(),
        })
    }
}

fn insert_sorted(v: &mut Vec<BgpPeer>, p: BgpPeer) {
    if let Err(at) = v.binary_search(&p) {
        v.insert(at, p);
    }
}
