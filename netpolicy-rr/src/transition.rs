//! Make-before-break plans from the current state to a target [`Topology`].
//!
//! Phases, in order (each a [`Step`]; the operator applies a step's operations one by
//! one and finishes a step before starting the next):
//!
//! 1. [`Phase::CreatePeers`]: new `BGPPeer` objects. Creating an object only adds
//!    sessions. When some client's only reflector is one whose cluster ID changes
//!    (without the mesh), also a bridge (`netpolicy-rr-bridge`: every client with every
//!    reflector), deleted in phase 9: that reflector's restart leaves the client others.
//!    Also when a reflector learns some client's route only through reflectors whose IDs
//!    change, or leaving reflectors depend on each other's paths in a circle (phase 7).
//!    In `multi`, a move object per client moved between two sets that stay valid for
//!    it (`netpolicy-rr-move-…`, naming the new set; deleted in phase 11).
//! 2. [`Phase::Promote`]: new reflectors get the reflector label (a promoted client
//!    moves to the reflector mesh, and every client of its zone or set gains it). No
//!    cluster ID yet: a plain iBGP speaker learns every route its peers send, where a
//!    reflector sharing its zone's cluster ID would drop what its zone's reflectors
//!    reflect until it peers with all of their clients itself.
//! 3. [`Phase::AddClientLabels`]: clients join their new reflector sets, next to their
//!    old ones. Only sessions are added, and before any cluster ID changes: a reflector
//!    that gets its ID leaves Calico's mesh, so its new clients must already peer with
//!    it by then.
//! 4. [`Phase::Unlink`]: going from `simple` to `multi`, the reflector mesh goes; the
//!    ring's links (made in phase 1) carry the routes between reflectors from here on,
//!    so that reflectors take IDs of their own over a sparse graph, never over the full
//!    mesh whose every path they would pass on (`topology::ring_links`). Only when the
//!    reflectors stay, the ring links every two reflectors of different IDs, and
//!    [`crate::sim::verify_by_kind`] finds that the plan keeps every route; otherwise
//!    the mesh goes in phase 11 as before. When reflectors are promoted and none leave,
//!    the step comes inside phase 5 instead: right after the last new reflector has its
//!    ID, if the ring then links every two reflectors of different IDs and existing
//!    reflectors' IDs are still to change (the reflectors stay from there on, and a plan
//!    made from there would take the mesh away first).
//! 5. [`Phase::ClusterIds`]: new reflectors get their cluster ID, existing ones a
//!    corrected one; they now reflect to every client they serve. IDs nobody holds
//!    first, then the ones that join a cluster ID others hold (from then on they drop
//!    what those reflect to them, so the other paths must exist already); within
//!    each, new reflectors before changed ones (a changed one restarts the sessions
//!    its clients learn through, so their new reflectors must reflect already).
//! 6. [`Phase::UpdatePeers`]: changed objects (a zone that gets or loses its own
//!    reflectors); the reflectors they now select exist and reflect.
//! 7. [`Phase::ReleaseClusterIds`]: leaving reflectors lose their cluster ID (in the
//!    order `release_order` gives: one that learns a route only through another goes
//!    first) while they still peer with everyone they did: a node without one is a
//!    plain iBGP speaker that every reflector treats as a client, so it learns and is
//!    learned by everyone (keeping the ID until its sessions are gone would make the
//!    reflectors that share it drop what it sends them).
//! 8. [`Phase::RemoveClientLabels`]: clients leave their old sets; their new sessions are
//!    already configured.
//! 9. [`Phase::DeletePeers`]: objects no longer wanted, but for links (phase 11); one
//!    a step, in name order, without Calico's mesh (each ends a zone's or a set's
//!    sessions, and on live BGP several ending at once made the reflectors hunt paths).
//! 10. [`Phase::Demote`]: old reflectors lose the label. Nobody's set names them any
//!     more, and a demoted node already carries its client label.
//! 11. [`Phase::DeleteLinks`]: links between reflectors no longer wanted (the mesh, or
//!     `multi`'s link objects of a changed ring), and the plan's move objects (phase 1:
//!     in `multi`, one per client moved from a set that stays valid for it, naming its
//!     new set, so that a plan made while it carries both labels keeps it there).
//!     After the demotion: a leaving reflector peers with the others only through them
//!     while it is one (its client label is not in effect while it carries the
//!     reflector label).
//!
//! Phases 5 and 7 change cluster IDs, and a node whose cluster ID changes restarts
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

use crate::{
    BgpPeer, Current, Marks, NodeInfo, SET_LABEL_PREFIX, Topology,
    state::{LINK_OBJECT_PREFIX, MOVE_OBJECT_PREFIX, SET_OBJECT_PREFIX, move_object_name},
};

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
    /// The reflector mesh goes (going to `multi`: the ring's links carry the routes).
    Unlink,
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
    /// Links between reflectors no longer wanted.
    DeleteLinks,
}

impl Phase {
    /// The phase's name in reports (`createPeers`, `promote`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreatePeers => "createPeers",
            Self::Promote => "promote",
            Self::UpdatePeers => "updatePeers",
            Self::AddClientLabels => "addClientLabels",
            Self::Unlink => "unlinkReflectors",
            Self::ClusterIds => "setClusterIDs",
            Self::ReleaseClusterIds => "releaseClusterIDs",
            Self::RemoveClientLabels => "removeClientLabels",
            Self::DeletePeers => "deletePeers",
            Self::Demote => "demote",
            Self::DeleteLinks => "deleteLinks",
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
    // The ring's links alone carry every route while IDs change only where each
    // reflector peers with every reflector of another ID (two a zone over three zones,
    // laid round-robin): a reflector drops what reflectors of its own ID pass it, so
    // with more a zone some route would have to pass two of them. Even then it is
    // checked, on a few nodes of each kind, and the mesh kept to the end if it fails.
    //
    // The bridge (every client with every reflector) likewise goes in only when the
    // plan without it loses a route in the model. Deciding that from the model, not
    // from the sessions now, keeps the decision the same in every re-plan of the
    // transition: a rule that read the sessions after `addClientLabels` added a bridge
    // the first plan had no use for, mid-transition (108 sessions at once in the
    // 24-node lab, a path storm on live BGP).
    // Where the mesh goes is the plan's to find ([`move_mesh`], [`unlink_after_new_ids`]).
    let early = !target.ring.is_empty();
    let may_bridge = ids_change_without_mesh(current, target);
    let first = plan(nodes, current, target, early, false);
    let unlinks = early && first.iter().any(|s| s.phase == Phase::Unlink);
    if !unlinks && !may_bridge {
        return first;
    }
    let kept = |steps: &[Step]| crate::sim::verify_by_kind(nodes, current, steps, target).is_ok();
    if kept(&first) {
        return first;
    }
    let mut tries = Vec::new();
    if unlinks {
        tries.push((false, false));
    }
    if may_bridge {
        if unlinks {
            tries.push((true, true));
        }
        tries.push((false, true));
    }
    // The first the model keeps, else the last (the mesh to the end, with the bridge).
    let mut steps = first;
    for (early, bridge) in tries {
        steps = plan(nodes, current, target, early, bridge);
        if kept(&steps) {
            break;
        }
    }
    steps
}

/// Whether the target's reflector links join every two reflectors whose cluster IDs
/// differ now (reflectors without an ID: never, they are promoted in this plan).
fn ring_spans_ids(current: &Current, target: &Topology) -> bool {
    let id = |r: &str| current.marks.get(r).and_then(|m| m.cluster_id);
    !target.ring.is_empty()
        && target.links.iter().all(|(r, peers)| {
            let Some(mine) = id(r) else { return false };
            target
                .links
                .keys()
                .filter(|o| *o != r)
                .all(|o| id(o) == Some(mine) || peers.binary_search(o).is_ok())
        })
}

/// The plan, with the reflector mesh going before IDs change where `early_unlink`
/// allows ([`move_mesh`], [`unlink_after_new_ids`]), and the bridge object for its
/// length where `bridge` asks (or where no order of the ID releases keeps every path: [`order_releases`]).
fn plan(
    nodes: &[NodeInfo],
    current: &Current,
    target: &Topology,
    early_unlink: bool,
    bridge: bool,
) -> Vec<Step> {
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
    let mesh = crate::topology::mesh_name();
    for name in now.keys() {
        if !want.contains_key(name) {
            push(
                if *name == mesh
                    || name.starts_with(LINK_OBJECT_PREFIX)
                    || name.starts_with(MOVE_OBJECT_PREFIX)
                {
                    Phase::DeleteLinks
                } else {
                    Phase::DeletePeers
                },
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
    moves(&mut steps, &now, &want, target);
    let unlinked =
        early_unlink && ring_spans_ids(current, target) && move_mesh(&mut steps, &now, &want);
    changing_links(&mut steps, nodes, current, &now, &want, target);
    // Where the model finds that a plan loses a route while IDs change ([`transition`]),
    // every client peers with every reflector meanwhile, through a bridge object made
    // first and deleted with the old ones: a client whose one reflecting session is
    // with a reflector whose ID changes, a reflector that learns a client's route only
    // through reflectors whose IDs change (found by the rr_topology fuzz target).
    let bridged = bridge && add_bridge(&mut steps, &now, target);
    // A reflector taking an ID nobody holds goes first; one joining a cluster ID that
    // others hold goes last: from then on it drops what those others reflect to it, so
    // every other path (the new reflectors' own IDs) must already be in place. Within
    // each, nodes that have no ID yet go before nodes whose ID changes: a changing
    // reflector restarts the sessions its clients learn through, and a client whose
    // other reflectors are new (promoted, no ID yet: plain iBGP speakers that reflect
    // nothing) would have no reflector left meanwhile (found by the rr_topology fuzz
    // target: `simple` → `multi`).
    //
    // An ID taken in this plan counts as held from its first taker on (the first by
    // that order): a plan made after the taker's step then orders the rest the same.
    let has_id = |node: &str| {
        current
            .marks
            .get(node)
            .is_some_and(|m| m.cluster_id.is_some())
    };
    if let Some(ops) = steps.get_mut(&Phase::ClusterIds) {
        ops.sort_by_key(|op| op.node().is_some_and(|n| has_id(n)));
        let mut held: BTreeSet<Ipv4Addr> = current
            .marks
            .values()
            .filter_map(|m| m.cluster_id)
            .collect();
        let mut keyed: Vec<((bool, bool), Op)> = std::mem::take(ops)
            .into_iter()
            .map(|op| {
                let joins = match &op {
                    Op::SetClusterId { id, .. } => !held.insert(*id),
                    _ => false,
                };
                ((joins, op.node().is_some_and(|n| has_id(n))), op)
            })
            .collect();
        keyed.sort_by_key(|(k, _)| *k);
        *ops = keyed.into_iter().map(|(_, op)| op).collect();
    }
    // Leaving reflectors release their IDs in an order that keeps the paths each one
    // learns through until it is released itself (found by the rr_topology fuzz target).
    order_releases(nodes, current, target, &mut steps, &now, bridged);
    let mut steps = into_steps(steps, current.mesh);
    if early_unlink && !unlinked {
        unlink_after_new_ids(&mut steps, current, target, &now, &want);
    }
    steps
}

/// The plan's operations as steps, in phase order.
///
/// A node whose cluster ID changes restarts every BGP session it has (BIRD restarts a
/// protocol whose `rr client`/`rr cluster id` changes; `sim` module docs). With
/// Calico's `mesh` on, the mesh carries every other route meanwhile: one step. Without
/// it, the clients of a restarting reflector rely on their other reflectors: one node
/// per step, each paced by the operator so that its sessions are up before the next.
///
/// Old objects go one a step too, in name order (the order a plan made after any of
/// them finds the rest in): each ends a zone's or a set's sessions, and the reflectors
/// choose new best paths for what those carried. Three zones' sessions ending at once
/// left a node of the 24-node lab without a path for 0.4 s on live BGP, where the
/// model (every remaining session carries every route at once) saw no loss.
fn into_steps(mut steps: BTreeMap<Phase, Vec<Op>>, mesh: bool) -> Vec<Step> {
    if let Some(ops) = steps.get_mut(&Phase::DeletePeers) {
        ops.sort_by_cached_key(ToString::to_string);
    }
    let one_at_a_time = |phase: Phase| {
        !mesh
            && matches!(
                phase,
                Phase::ClusterIds | Phase::ReleaseClusterIds | Phase::DeletePeers
            )
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

/// Going to `multi` with the same reflectors, the reflector mesh goes before any
/// cluster ID changes ([`Phase::Unlink`]), once the ring's links are up. Reflectors
/// with IDs of their own pass every route along every path between them, and on the
/// full mesh those paths are what costs (`topology::ring_links`): the IDs change over
/// the ring's links alone. Not when reflectors come or go (a leaving reflector peers
/// with the others only through the mesh while it carries the reflector label).
///
/// Leaving `multi`, the mesh is made first as any object: reflectors of a zone that
/// come to share an ID drop what the others of the zone reflect to them, so each
/// needs a session with every reflector of the other zones before its ID changes
/// (found by `switching_topology_changes_ids_over_the_ring_alone`).
/// `sim::verify` checks every operation of such plans in the property tests.
///
/// Whether it moved the mesh.
fn move_mesh(
    steps: &mut BTreeMap<Phase, Vec<Op>>,
    now: &BTreeMap<&str, &BgpPeer>,
    want: &BTreeMap<&str, &BgpPeer>,
) -> bool {
    // Only before IDs change (with none left to change, the mesh goes with the old
    // links, as it would have in the plan this one continues).
    if steps.contains_key(&Phase::Promote)
        || steps.contains_key(&Phase::Demote)
        || !steps.contains_key(&Phase::ClusterIds)
        || !mesh_gives_way(now, want)
    {
        return false;
    }
    let mesh = crate::topology::mesh_name();
    let Some(ops) = steps.get_mut(&Phase::DeleteLinks) else {
        return false;
    };
    let Some(at) = ops
        .iter()
        .position(|op| matches!(op, Op::DeleteBgpPeer { name } if *name == mesh))
    else {
        return false;
    };
    let op = ops.remove(at);
    if ops.is_empty() {
        steps.remove(&Phase::DeleteLinks);
    }
    steps.entry(Phase::Unlink).or_default().push(op);
    true
}

/// The reflector mesh exists and `multi`'s links are wanted: the mesh may go before
/// the end of the plan.
fn mesh_gives_way(now: &BTreeMap<&str, &BgpPeer>, want: &BTreeMap<&str, &BgpPeer>) -> bool {
    now.contains_key(crate::topology::mesh_name().as_str())
        && want.keys().any(|n| n.starts_with(LINK_OBJECT_PREFIX))
}

/// Going to `multi` with reflectors promoted (none leaving), the reflector mesh goes
/// as soon as every new reflector has its cluster ID, before existing reflectors
/// change theirs: from that state the reflectors stay, and a plan made there (the
/// operator plans again after every step) takes the mesh away first ([`move_mesh`]).
/// So the first plan does what its re-plans will, where the ring then links every two
/// reflectors of different IDs and some existing reflector's ID is still to change
/// (found by `transitions_never_leave_a_node_without_a_session`). One cluster-ID change
/// a step (`steps` as flattened): with Calico's mesh on, the phase is one step and the
/// mesh goes at the end as before.
fn unlink_after_new_ids(
    steps: &mut Vec<Step>,
    current: &Current,
    target: &Topology,
    now: &BTreeMap<&str, &BgpPeer>,
    want: &BTreeMap<&str, &BgpPeer>,
) {
    if current.mesh || steps.iter().any(|s| s.phase == Phase::Demote) || !mesh_gives_way(now, want)
    {
        return;
    }
    let has_id = |n: &str| current.marks.get(n).is_some_and(|m| m.cluster_id.is_some());
    let ids = |s: &Step| s.phase == Phase::ClusterIds;
    let Some(last_new) = steps
        .iter()
        .rposition(|s| ids(s) && s.ops.iter().any(|op| op.node().is_some_and(|n| !has_id(n))))
    else {
        return;
    };
    if !steps[last_new + 1..].iter().any(ids) {
        return;
    }
    // The IDs once the new reflectors have theirs.
    let mut then = Current {
        marks: current.marks.clone(),
        ..Current::default()
    };
    for op in steps[..=last_new].iter().flat_map(|s| &s.ops) {
        if let Op::SetClusterId { node, id } = op {
            then.marks.entry(node.clone()).or_default().cluster_id = Some(*id);
        }
    }
    if !ring_spans_ids(&then, target) {
        return;
    }
    let mesh = crate::topology::mesh_name();
    let Some((at, i)) = steps.iter().enumerate().find_map(|(at, s)| {
        (s.phase == Phase::DeleteLinks)
            .then(|| {
                s.ops
                    .iter()
                    .position(|op| matches!(op, Op::DeleteBgpPeer { name } if *name == mesh))
            })
            .flatten()
            .map(|i| (at, i))
    }) else {
        return;
    };
    let op = steps[at].ops.remove(i);
    if steps[at].ops.is_empty() {
        steps.remove(at);
    }
    steps.insert(
        last_new + 1,
        Step {
            phase: Phase::Unlink,
            ops: vec![op],
        },
    );
}

/// In `multi`, a client that moves from a set that stays valid for it to another
/// ([`Topology::moves`]) carries both labels between `addClientLabels` and
/// `removeClientLabels`, and the labels do not say which is the new one: a move object
/// (`state::MOVE_OBJECT_PREFIX`, the new set object's selectors, so no session of its
/// own) records it for the plan's length, made first and deleted with the old links. A
/// plan made mid-way keeps the client in the recorded set, as this plan does.
fn moves(
    steps: &mut BTreeMap<Phase, Vec<Op>>,
    now: &BTreeMap<&str, &BgpPeer>,
    want: &BTreeMap<&str, &BgpPeer>,
    target: &Topology,
) {
    for (client, key) in &target.moves {
        let name = move_object_name(client, key);
        let Some(set) = key
            .strip_prefix(SET_LABEL_PREFIX)
            .and_then(|id| want.get(format!("{SET_OBJECT_PREFIX}{id}").as_str()))
        else {
            continue;
        };
        if now.contains_key(name.as_str()) {
            continue;
        }
        let marker = BgpPeer {
            name,
            ..(*set).clone()
        };
        for_the_plan(steps, marker, Phase::DeleteLinks);
    }
}

/// An object that lives for the plan only: made in [`Phase::CreatePeers`], deleted in
/// `gone_in`.
fn for_the_plan(steps: &mut BTreeMap<Phase, Vec<Op>>, object: BgpPeer, gone_in: Phase) {
    steps.entry(gone_in).or_default().push(Op::DeleteBgpPeer {
        name: object.name.clone(),
    });
    steps
        .entry(Phase::CreatePeers)
        .or_default()
        .push(Op::ApplyBgpPeer(object));
}

/// In `multi`, a node that becomes or stops being a reflector keeps the sessions it
/// has with reflectors across the change of its label: a link object (the node with
/// those reflectors), made first and deleted with the old links.
///
/// - A promoted client keeps its current reflectors: its set object stops selecting it
///   when it gets the reflector label, and its ring links need not name them.
/// - A demoted reflector gets the reflectors of its new set: its ring links need not
///   name them, and the set object that will does not select it while it carries the
///   reflector label.
///
/// With the link, the pairs are the same before and after the label changes, so no
/// session restarts (Calico names a session by its peer, not by the object that made
/// it). With Calico's node-to-node mesh on, the mesh carries them meanwhile.
fn changing_links(
    steps: &mut BTreeMap<Phase, Vec<Op>>,
    nodes: &[NodeInfo],
    current: &Current,
    now: &BTreeMap<&str, &BgpPeer>,
    want: &BTreeMap<&str, &BgpPeer>,
    target: &Topology,
) {
    if current.mesh || target.ring.is_empty() {
        return;
    }
    let mut links: Vec<(String, Vec<String>)> = Vec::new();
    for op in steps.get(&Phase::Demote).into_iter().flatten() {
        if let Op::RemoveReflectorLabel { node } = op
            && let Some(peers) = target.clients.get(node).filter(|p| !p.is_empty())
        {
            links.push((node.clone(), peers.clone()));
        }
    }
    let promoted: BTreeSet<&str> = steps
        .get(&Phase::Promote)
        .into_iter()
        .flatten()
        .filter_map(|op| match op {
            Op::SetReflectorLabel { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    if !promoted.is_empty() {
        // The promoted nodes' sessions now: only they and the reflectors matter.
        let few: Vec<NodeInfo> = nodes
            .iter()
            .filter(|n| {
                promoted.contains(n.name.as_str())
                    || current
                        .marks
                        .get(&n.name)
                        .is_some_and(|m| m.reflector.is_some())
            })
            .cloned()
            .collect();
        // Not through the bridge: it lives for this plan only, and the first plan
        // (made before it existed) linked the promoted node without it. A re-plan
        // that counted it linked every promoted client with every reflector, a link
        // the first plan had no use for (found by
        // `transitions_never_leave_a_node_without_a_session`).
        let bridge = bridge_name();
        let lasting = Current {
            bgp_peers: current
                .bgp_peers
                .iter()
                .filter(|p| p.name != bridge)
                .cloned()
                .collect(),
            ..current.clone()
        };
        let cluster = crate::sim::Cluster::new(&few, &lasting, &target.reflector_label);
        if let Ok(sessions) = cluster.sessions() {
            for p in &promoted {
                if let Some(peers) = sessions.get(*p).filter(|s| !s.is_empty()) {
                    links.push(((*p).to_owned(), peers.iter().cloned().collect()));
                }
            }
        }
    }
    for (node, peers) in links {
        let link = crate::topology::link_object(&node, &peers, &target.reflector_label);
        // One that exists is deleted with the old links already; a wanted one stays.
        if !now.contains_key(link.name.as_str()) && !want.contains_key(link.name.as_str()) {
            for_the_plan(steps, link, Phase::DeleteLinks);
        }
    }
}

/// Orders the [`Phase::ReleaseClusterIds`] operations of `steps` by [`release_order`]
/// over the sessions the phases before leave; where no order keeps every path, adds
/// the bridge (unless `bridged` already).
fn order_releases(
    nodes: &[NodeInfo],
    current: &Current,
    target: &Topology,
    steps: &mut BTreeMap<Phase, Vec<Op>>,
    now: &BTreeMap<&str, &BgpPeer>,
    bridged: bool,
) {
    if !current.mesh
        && let Some(ops) = steps.get(&Phase::ReleaseClusterIds)
        && ops.len() > 1
    {
        let mut before = crate::sim::Cluster::new(nodes, current, &target.reflector_label);
        for op in steps
            .range(..Phase::ReleaseClusterIds)
            .flat_map(|(_, ops)| ops)
        {
            before.apply(op);
        }
        if let Ok(sessions) = before.sessions() {
            let leaving: Vec<&str> = ops
                .iter()
                .filter_map(|op| match op {
                    Op::RemoveClusterId { node } => Some(node.as_str()),
                    _ => None,
                })
                .collect();
            match release_order(&before, &sessions, &leaving) {
                Some(order) => {
                    let order: BTreeMap<String, usize> =
                        order.into_iter().enumerate().map(|(i, n)| (n, i)).collect();
                    if let Some(ops) = steps.get_mut(&Phase::ReleaseClusterIds) {
                        ops.sort_by_key(|op| match op {
                            Op::RemoveClusterId { node } => order.get(node).copied(),
                            _ => None,
                        });
                    }
                }
                // Each must go before another: no order keeps every path, the bridge
                // does (every reflector then peers with every client itself).
                None if !bridged => {
                    add_bridge(steps, now, target);
                }
                None => {}
            }
        }
    }
}

/// The order in which `leaving` reflectors release their cluster IDs, given the
/// sessions before the first release.
///
/// A reflector L with cluster ID C drops every route whose CLUSTER_LIST holds C, so it
/// learns the route of a client of C (a node with another ID or none, peering a
/// reflector that holds C) that it does not peer with itself only through that
/// client's reflectors of other IDs. If one of those, R, is leaving too, R's release
/// (a plain iBGP speaker reflects nothing) would take L's last path to the route: L
/// goes first, and once released it is a plain speaker that every reflector serves.
/// Releases nobody depends on keep node-name order. `None` when the dependencies
/// form a circle (no order keeps every path).
fn release_order(
    cluster: &crate::sim::Cluster,
    sessions: &crate::sim::Sessions,
    leaving: &[&str],
) -> Option<Vec<String>> {
    let leaving_set: BTreeSet<&str> = leaving.iter().copied().collect();
    let id = |n: &str| cluster.cluster_ids.get(n).copied();
    // after[l]: the leaving reflectors that must release after l.
    let mut after: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut waits: BTreeMap<&str, usize> = leaving.iter().map(|l| (*l, 0)).collect();
    for &l in leaving {
        let Some(c) = id(l) else { continue };
        let mine = sessions.get(l);
        for (client, peers) in sessions {
            let unserved = client != l
                && id(client) != Some(c)
                && !mine.is_some_and(|m| m.contains(client))
                && peers.iter().any(|p| id(p) == Some(c));
            if !unserved {
                continue;
            }
            for r in peers {
                let r = r.as_str();
                if r != l
                    && leaving_set.contains(r)
                    && id(r).is_some_and(|d| d != c)
                    && after.entry(l).or_default().insert(r)
                {
                    *waits.entry(r).or_default() += 1;
                }
            }
        }
    }
    let mut ready: BTreeSet<&str> = waits
        .iter()
        .filter(|(_, w)| **w == 0)
        .map(|(n, _)| *n)
        .collect();
    let mut out = Vec::with_capacity(leaving.len());
    while let Some(n) = ready.pop_first() {
        out.push(n.to_owned());
        waits.remove(n);
        for r in after.get(n).into_iter().flatten() {
            if let Some(w) = waits.get_mut(r) {
                *w -= 1;
                if *w == 0 {
                    ready.insert(r);
                }
            }
        }
    }
    waits.is_empty().then_some(out)
}

/// Whether a reflector's cluster ID changes (to another ID) with Calico's mesh off:
/// the plans that may need the bridge `BGPPeer` (its sessions cost clients ×
/// reflectors, so only where the model finds that the plan loses a route without it).
fn ids_change_without_mesh(current: &Current, target: &Topology) -> bool {
    !current.mesh
        && current.marks.iter().any(|(n, m)| {
            m.cluster_id.is_some()
                && target
                    .marks
                    .get(n.as_str())
                    .and_then(|t| t.cluster_id)
                    .is_some_and(|id| Some(id) != m.cluster_id)
        })
}

/// The bridge `BGPPeer`'s name ([`add_bridge`]).
fn bridge_name() -> String {
    format!("{}bridge", crate::BGP_PEER_PREFIX)
}

/// Adds the bridge `BGPPeer` (every client with every reflector: made first, deleted
/// with the old objects) to `steps`; whether it did. One left by an interrupted plan
/// (in `now`) is not made again: it is deleted with the old objects.
fn add_bridge(
    steps: &mut BTreeMap<Phase, Vec<Op>>,
    now: &BTreeMap<&str, &BgpPeer>,
    target: &Topology,
) -> bool {
    let rl = &target.reflector_label;
    let bridge = BgpPeer {
        name: bridge_name(),
        node_selector: format!("!has({rl})"),
        peer_selector: format!("has({rl})"),
    };
    if now.contains_key(bridge.name.as_str()) {
        return false;
    }
    for_the_plan(steps, bridge, Phase::DeletePeers);
    true
}

impl Op {
    /// The node it changes (`None` for an object).
    pub fn node(&self) -> Option<&String> {
        match self {
            Self::ApplyBgpPeer(_) | Self::DeleteBgpPeer { .. } => None,
            Self::SetClusterId { node, .. }
            | Self::RemoveClusterId { node }
            | Self::SetReflectorLabel { node, .. }
            | Self::RemoveReflectorLabel { node }
            | Self::AddSetLabel { node, .. }
            | Self::RemoveSetLabel { node, .. } => Some(node),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn delete(name: &str) -> Op {
        Op::DeleteBgpPeer {
            name: name.to_owned(),
        }
    }

    fn id(node: &str) -> Op {
        Op::SetClusterId {
            node: node.to_owned(),
            id: Ipv4Addr::new(224, 0, 0, 2),
        }
    }

    fn lengths(steps: &[Step]) -> Vec<(Phase, usize)> {
        steps.iter().map(|s| (s.phase, s.ops.len())).collect()
    }

    #[test]
    fn without_the_mesh_ids_and_old_objects_go_one_a_step_old_objects_in_name_order() {
        let ops = || {
            BTreeMap::from([
                (Phase::ClusterIds, vec![id("b"), id("a")]),
                (
                    Phase::DeletePeers,
                    vec![delete("netpolicy-rr-zone-b"), delete("netpolicy-rr-bridge")],
                ),
                (Phase::DeleteLinks, vec![delete("x"), delete("y")]),
            ])
        };
        let off = into_steps(ops(), false);
        assert_eq!(
            lengths(&off),
            [
                (Phase::ClusterIds, 1),
                (Phase::ClusterIds, 1),
                (Phase::DeletePeers, 1),
                (Phase::DeletePeers, 1),
                (Phase::DeleteLinks, 2)
            ]
        );
        // IDs keep the order the plan gave them; old objects go by name.
        assert_eq!(off[0].ops, [id("b")]);
        assert_eq!(off[2].ops, [delete("netpolicy-rr-bridge")]);
        assert_eq!(off[3].ops, [delete("netpolicy-rr-zone-b")]);
        // With Calico's mesh on, each phase is one step.
        let on = into_steps(ops(), true);
        assert_eq!(
            on.iter()
                .map(|s| (s.phase, s.ops.len()))
                .collect::<Vec<_>>(),
            [
                (Phase::ClusterIds, 2),
                (Phase::DeletePeers, 2),
                (Phase::DeleteLinks, 2)
            ]
        );
    }
}
