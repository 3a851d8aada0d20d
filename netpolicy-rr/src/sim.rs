//! A model of what Calico makes of our marks and objects: which BGP sessions each node
//! has. Used to check that the objects we emit mean what the topology says, and to
//! replay transition plans operation by operation ([`verify`]).
//!
//! Sessions follow Calico's `BGPPeer` semantics: an object peers every node its
//! `nodeSelector` matches with every node its `peerSelector` matches (never a node with
//! itself), and a session exists when any object configures the pair in either
//! direction.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use netpolicy_core::selector::Labels;

use crate::{BgpPeer, Current, NodeInfo, Op, Step, Topology, calico::Selector};

/// Sessions by node.
pub type Sessions = BTreeMap<String, BTreeSet<String>>;

/// Nodes with their labels (ours included), cluster IDs, and our `BGPPeer` objects.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Every node's labels.
    pub labels: BTreeMap<String, Labels>,
    /// Cluster-ID annotations.
    pub cluster_ids: BTreeMap<String, Ipv4Addr>,
    /// `BGPPeer` objects by name.
    pub peers: BTreeMap<String, BgpPeer>,
    reflector_label: String,
}

impl Cluster {
    /// The cluster as `nodes` and `current` describe it.
    pub fn new(nodes: &[NodeInfo], current: &Current, reflector_label: &str) -> Self {
        let mut labels = BTreeMap::new();
        let mut cluster_ids = BTreeMap::new();
        for n in nodes {
            let mut l = n.labels.clone();
            if let Some(m) = current.marks.get(&n.name) {
                if let Some(v) = &m.reflector {
                    l.insert(reflector_label.to_owned(), v.clone());
                }
                for k in &m.sets {
                    l.insert(k.clone(), String::new());
                }
                if let Some(id) = m.cluster_id {
                    cluster_ids.insert(n.name.clone(), id);
                }
            }
            labels.insert(n.name.clone(), l);
        }
        Self {
            labels,
            cluster_ids,
            peers: current
                .bgp_peers
                .iter()
                .map(|p| (p.name.clone(), p.clone()))
                .collect(),
            reflector_label: reflector_label.to_owned(),
        }
    }

    /// Applies one operation (operations on unknown nodes do nothing, as a PATCH of a
    /// deleted node would fail).
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::ApplyBgpPeer(p) => {
                self.peers.insert(p.name.clone(), p.clone());
            }
            Op::DeleteBgpPeer { name } => {
                self.peers.remove(name);
            }
            Op::SetClusterId { node, id } => {
                if self.labels.contains_key(node) {
                    self.cluster_ids.insert(node.clone(), *id);
                }
            }
            Op::RemoveClusterId { node } => {
                self.cluster_ids.remove(node);
            }
            Op::SetReflectorLabel { node, value } => {
                if let Some(l) = self.labels.get_mut(node) {
                    l.insert(self.reflector_label.clone(), value.clone());
                }
            }
            Op::RemoveReflectorLabel { node } => {
                if let Some(l) = self.labels.get_mut(node) {
                    l.remove(&self.reflector_label);
                }
            }
            Op::AddSetLabel { node, key } => {
                if let Some(l) = self.labels.get_mut(node) {
                    l.insert(key.clone(), String::new());
                }
            }
            Op::RemoveSetLabel { node, key } => {
                if let Some(l) = self.labels.get_mut(node) {
                    l.remove(key);
                }
            }
        }
    }

    /// Every node's sessions (every node is listed).
    ///
    /// # Errors
    /// A selector that does not parse, naming the object.
    pub fn sessions(&self) -> Result<Sessions, String> {
        let mut out: Sessions = self
            .labels
            .keys()
            .map(|n| (n.clone(), BTreeSet::new()))
            .collect();
        for p in self.peers.values() {
            let parse =
                |s: &str| Selector::parse(s).map_err(|e| format!("BGPPeer {}: {s:?}: {e}", p.name));
            let (ns, ps) = (parse(&p.node_selector)?, parse(&p.peer_selector)?);
            let pick = |s: &Selector| -> Vec<&String> {
                self.labels
                    .iter()
                    .filter(|(_, l)| s.matches(l))
                    .map(|(n, _)| n)
                    .collect()
            };
            let (from, to) = (pick(&ns), pick(&ps));
            for a in &from {
                for b in &to {
                    if a != b {
                        out.entry((*a).clone()).or_default().insert((*b).clone());
                        out.entry((*b).clone()).or_default().insert((*a).clone());
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Replays `steps` from `current` one operation at a time and checks that
/// - no node that has a session before the plan and in the target loses all of its
///   sessions at any point;
/// - at the end, every client's sessions are exactly its reflectors in `target`, every
///   reflector peers with the other reflectors, and cluster IDs are the target's.
///
/// # Errors
/// What went wrong, naming the node, the step and the operation.
pub fn verify(
    nodes: &[NodeInfo],
    current: &Current,
    steps: &[Step],
    target: &Topology,
    reflector_label: &str,
) -> Result<(), String> {
    let mut c = Cluster::new(nodes, current, reflector_label);
    let before = c.sessions()?;
    let reflectors: BTreeSet<&str> = target.placement.reflectors().map(|(r, _)| r).collect();
    let served: BTreeSet<&str> = target
        .clients
        .values()
        .flatten()
        .map(String::as_str)
        .collect();
    let expected = |n: &str| {
        target.clients.get(n).is_some_and(|rs| !rs.is_empty())
            || (reflectors.contains(n) && (reflectors.len() > 1 || served.contains(n)))
    };
    let keep: BTreeSet<&str> = before
        .iter()
        .filter(|(n, s)| !s.is_empty() && expected(n))
        .map(|(n, _)| n.as_str())
        .collect();
    for (si, step) in steps.iter().enumerate() {
        for (oi, op) in step.ops.iter().enumerate() {
            c.apply(op);
            let now = c.sessions()?;
            for n in &keep {
                if now.get(*n).is_none_or(BTreeSet::is_empty) {
                    return Err(format!(
                        "{n} has no session after step {si} ({:?}) operation {oi}: {op:?}",
                        step.phase
                    ));
                }
            }
        }
    }
    let end = c.sessions()?;
    for (client, rs) in &target.clients {
        let want: BTreeSet<String> = rs.iter().cloned().collect();
        let got = end.get(client).cloned().unwrap_or_default();
        if got != want {
            return Err(format!(
                "at the end {client} peers with {got:?}, the topology says {want:?}"
            ));
        }
    }
    for r in &reflectors {
        let got = end.get(*r).cloned().unwrap_or_default();
        for other in &reflectors {
            if other != r && !got.contains(*other) {
                return Err(format!(
                    "at the end reflector {r} does not peer with {other}"
                ));
            }
        }
    }
    for (r, id) in target.placement.reflectors() {
        if c.cluster_ids.get(r) != Some(&id) {
            return Err(format!("at the end reflector {r} has no cluster ID {id}"));
        }
    }
    Ok(())
}
