//! Make-before-break plans from the current state to a target [`Topology`].
//!
//! Phases, in order (each a [`Step`]; the operator applies a step's operations one by
//! one and finishes a step before starting the next):
//!
//! 1. [`Phase::CreatePeers`]: new `BGPPeer` objects. Creating an object only adds
//!    sessions.
//! 2. [`Phase::Promote`]: new reflectors get the reflector label (a promoted client
//!    moves to the reflector mesh, and every client of its zone or set gains it). No
//!    cluster ID yet: a plain iBGP speaker learns every route its peers send, where a
//!    reflector sharing its zone's cluster ID would drop what its zone's reflectors
//!    reflect until it peers with all of their clients itself.
//! 3. [`Phase::AddClientLabels`]: clients join their new reflector sets, next to their
//!    old ones. Only sessions are added, and before any cluster ID changes: a reflector
//!    that gets its ID leaves Calico's mesh, so its new clients must already peer with
//!    it by then.
//! 4. [`Phase::ClusterIds`]: new reflectors get their cluster ID, existing ones a
//!    corrected one; they now reflect to every client they serve. IDs nobody holds
//!    first, then the ones that join a cluster ID others hold (from then on they drop
//!    what those reflect to them, so the other paths must exist already).
//! 5. [`Phase::UpdatePeers`]: changed objects (a zone that gets or loses its own
//!    reflectors); the reflectors they now select exist and reflect.
//! 6. [`Phase::ReleaseClusterIds`]: leaving reflectors lose their cluster ID while they
//!    still peer with everyone they did: a node without one is a plain iBGP speaker
//!    that every reflector treats as a client, so it learns and is learned by everyone
//!    (keeping the ID until its sessions are gone would make the reflectors that share
//!    it drop what it sends them).
//! 7. [`Phase::RemoveClientLabels`]: clients leave their old sets; their new sessions are
//!    already configured.
//! 8. [`Phase::DeletePeers`]: objects no longer wanted.
//! 9. [`Phase::Demote`]: old reflectors lose the label. Nobody's set names them any
//!    more, and a demoted node already carries its client label.
//!
//! Phases 4 and 6 change cluster IDs, and a node whose cluster ID changes restarts
//! every BGP session it has (BIRD restarts a protocol whose `rr client` or
//! `rr cluster id` changes; see [`crate::sim`]). While Calico's node-to-node mesh is on
//! ([`Current::mesh`], a cold start) it carries every other route and each phase is one
//! step; without it they are one node per step, so that a restarting reflector's
//! clients keep their other reflectors.
//!
//! [`crate::sim::verify`] replays a plan operation by operation against Calico's
//! selector semantics and BIRD's route reflection and checks that no node that has a
//! session before and after loses all of them, or a route it learned before and still
//! should, in between; the property tests run it on random transitions.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use crate::{BgpPeer, Current, Marks, NodeInfo, Topology};

/// One change to the cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// Create or replace a `BGPPeer`.
    ApplyBgpPeer(BgpPeer),
    /// Delete a `BGPPeer` by name.
    DeleteBgpPeer {
        /// Object name.
        name: String,
    },
    /// Set the cluster-ID annotation.
    SetClusterId {
        /// Node name.
        node: String,
        /// Cluster ID.
        id: Ipv4Addr,
    },
    /// Remove the cluster-ID annotation.
    RemoveClusterId {
        /// Node name.
        node: String,
    },
    /// Set the reflector label.
    SetReflectorLabel {
        /// Node name.
        node: String,
        /// Label value.
        value: String,
    },
    /// Remove the reflector label.
    RemoveReflectorLabel {
        /// Node name.
        node: String,
    },
    /// Add a reflector-set label (value empty).
    AddSetLabel {
        /// Node name.
        node: String,
        /// Label key.
        key: String,
    },
    /// Remove a reflector-set label.
    RemoveSetLabel {
        /// Node name.
        node: String,
        /// Label key.
        key: String,
    },
}

/// The phase a step belongs to (see the module docs for the order and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// New objects.
    CreatePeers,
    /// New reflectors join the mesh.
    Promote,
    /// Clients join new sets.
    AddClientLabels,
    /// New and corrected cluster IDs.
    ClusterIds,
    /// Changed objects.
    UpdatePeers,
    /// Leaving reflectors' cluster IDs go.
    ReleaseClusterIds,
    /// Clients leave old sets.
    RemoveClientLabels,
    /// Objects no longer wanted.
    DeletePeers,
    /// Old reflectors leave the mesh.
    Demote,
}

impl Phase {
    /// The phase's name in reports (`createPeers`, `promote`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreatePeers => "createPeers",
            Self::Promote => "promote",
            Self::UpdatePeers => "updatePeers",
            Self::AddClientLabels => "addClientLabels",
            Self::ClusterIds => "setClusterIDs",
            Self::ReleaseClusterIds => "releaseClusterIDs",
            Self::RemoveClientLabels => "removeClientLabels",
            Self::DeletePeers => "deletePeers",
            Self::Demote => "demote",
        }
    }
}

/// A batch of operations of one phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The phase.
    pub phase: Phase,
    /// Its operations, in order.
    pub ops: Vec<Op>,
}

/// The plan from `current` to `target` for the cluster's `nodes` (marks on nodes that no
/// longer exist are left alone: they went with the node). Empty steps are left out; an
/// empty plan means nothing to do.
pub fn transition(nodes: &[NodeInfo], current: &Current, target: &Topology) -> Vec<Step> {
    let empty = Marks::default();
    let names: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let now: BTreeMap<&str, &BgpPeer> = current
        .bgp_peers
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    let want: BTreeMap<&str, &BgpPeer> = target
        .bgp_peers
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    let mut steps: BTreeMap<Phase, Vec<Op>> = BTreeMap::new();
    let mut push = |phase: Phase, op: Op| steps.entry(phase).or_default().push(op);
    for (name, p) in &want {
        match now.get(name) {
            None => push(Phase::CreatePeers, Op::ApplyBgpPeer((*p).clone())),
            Some(old) if old != p => push(Phase::UpdatePeers, Op::ApplyBgpPeer((*p).clone())),
            Some(_) => {}
        }
    }
    for name in now.keys() {
        if !want.contains_key(name) {
            push(
                Phase::DeletePeers,
                Op::DeleteBgpPeer {
                    name: (*name).to_owned(),
                },
            );
        }
    }
    for node in names {
        let have = current.marks.get(node).unwrap_or(&empty);
        let to = target.marks.get(node).unwrap_or(&empty);
        let owned = || node.to_owned();
        if let Some(value) = &to.reflector {
            if let Some(id) = to.cluster_id.filter(|id| have.cluster_id != Some(*id)) {
                push(Phase::ClusterIds, Op::SetClusterId { node: owned(), id });
            }
            if have.reflector.as_ref() != Some(value) {
                push(
                    Phase::Promote,
                    Op::SetReflectorLabel {
                        node: owned(),
                        value: value.clone(),
                    },
                );
            }
        }
        for key in to.sets.difference(&have.sets) {
            push(
                Phase::AddClientLabels,
                Op::AddSetLabel {
                    node: owned(),
                    key: key.clone(),
                },
            );
        }
        for key in have.sets.difference(&to.sets) {
            push(
                Phase::RemoveClientLabels,
                Op::RemoveSetLabel {
                    node: owned(),
                    key: key.clone(),
                },
            );
        }
        if to.cluster_id.is_none() && have.cluster_id.is_some() {
            push(
                Phase::ReleaseClusterIds,
                Op::RemoveClusterId { node: owned() },
            );
        }
        if to.reflector.is_none() && have.reflector.is_some() {
            push(Phase::Demote, Op::RemoveReflectorLabel { node: owned() });
        }
    }
    // A reflector taking an ID nobody holds goes first; one joining a cluster ID that
    // others hold goes last: from then on it drops what those others reflect to it, so
    // every other path (the new reflectors' own IDs) must already be in place.
    let held: BTreeSet<Ipv4Addr> = current
        .marks
        .values()
        .filter_map(|m| m.cluster_id)
        .collect();
    if let Some(ops) = steps.get_mut(&Phase::ClusterIds) {
        ops.sort_by_key(|op| match op {
            Op::SetClusterId { id, .. } => held.contains(id),
            _ => false,
        });
    }
    // A node whose cluster ID changes restarts every BGP session it has (BIRD restarts a
    // protocol whose `rr client`/`rr cluster id` changes; `sim` module docs). With
    // Calico's mesh on, the mesh carries every other route meanwhile: one step. Without
    // it, the clients of a restarting reflector rely on their other reflectors: one node
    // per step, each paced by the operator so that its sessions are up before the next.
    let one_at_a_time = |phase: Phase| {
        !current.mesh && matches!(phase, Phase::ClusterIds | Phase::ReleaseClusterIds)
    };
    steps
        .into_iter()
        .flat_map(|(phase, ops)| {
            if one_at_a_time(phase) {
                ops.into_iter()
                    .map(|op| Step {
                        phase,
                        ops: vec![op],
                    })
                    .collect()
            } else {
                vec![Step { phase, ops }]
            }
        })
        .collect()
}

impl std::fmt::Display for Op {
    /// One line a person can read (`label node n1 rr.netpolicy.io/set-…`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ApplyBgpPeer(p) => write!(
                f,
                "apply BGPPeer {} (nodeSelector {:?}, peerSelector {:?})",
                p.name, p.node_selector, p.peer_selector
            ),
            Self::DeleteBgpPeer { name } => write!(f, "delete BGPPeer {name}"),
            Self::SetClusterId { node, id } => write!(
                f,
                "annotate node {node} {}={id}",
                crate::CLUSTER_ID_ANNOTATION
            ),
            Self::RemoveClusterId { node } => write!(
                f,
                "remove annotation {} from node {node}",
                crate::CLUSTER_ID_ANNOTATION
            ),
            Self::SetReflectorLabel { node, value } => {
                write!(f, "label node {node} as reflector ({value})")
            }
            Self::RemoveReflectorLabel { node } => {
                write!(f, "remove the reflector label from node {node}")
            }
            Self::AddSetLabel { node, key } => write!(f, "label node {node} {key}"),
            Self::RemoveSetLabel { node, key } => write!(f, "remove label {key} from node {node}"),
        }
    }
}
