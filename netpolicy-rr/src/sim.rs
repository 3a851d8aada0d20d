//! A model of what Calico makes of our marks and objects: which BGP sessions each node
//! has. Used to check that the objects we emit mean what the topology says, and to
//! replay transition plans operation by operation ([`verify`]).
//!
//! Sessions follow Calico's `BGPPeer` semantics: an object peers every node its
//! `nodeSelector` matches with every node its `peerSelector` matches (never a node with
//! itself), and a session exists when any object configures the pair in either
//! direction.
//!
//! Sessions are not enough: [`Cluster::propagation`] follows every node's route through
//! those sessions with the route-reflection rules Calico configures in BIRD
//! (RFC 4456), and [`verify`] checks that no node stops learning a route it learned
//! before the plan, or once an earlier step's sessions were up, and still should, at
//! any operation of a plan, and that every node learns every other node's route at the
//! end.
//!
//! # Route reflection as Calico configures BIRD
//! - A node with a cluster ID (the `projectcalico.org/RouteReflectorClusterID`
//!   annotation) is a reflector. On its session with a peer whose cluster ID differs
//!   (or that has none) it sets `rr client` and `rr cluster id <its ID>`: the peer is
//!   its client. A peer with the same cluster ID is a plain iBGP peer (a non-client).
//!   A node without a cluster ID treats every peer as a plain iBGP peer.
//! - Every node advertises its own route to every peer.
//! - A node advertises a route it learned over iBGP only if it is a reflector and the
//!   route came from a client or goes to a client (learned from a client: to everyone;
//!   from a non-client: to clients only); never back to the peer it came from. It
//!   prepends its cluster ID to the route's CLUSTER_LIST.
//! - A node drops a route whose CLUSTER_LIST holds its own cluster ID (loop
//!   prevention), and a route it originated.
//! - Each node advertises only its best route: the shortest CLUSTER_LIST, then the
//!   lowest peer (node name order, standing in for the lowest peer address). The
//!   property checks use both tie orders ([`Tie`]).
//!
//! # Sessions as confd renders them, and when BIRD restarts one
//! - Calico's node-to-node mesh ([`Cluster::mesh`]): every two nodes without a cluster
//!   ID have a session (confd skips a node with one, on both ends).
//! - A session's configuration at each end is whether it is `rr client` and with
//!   which `rr cluster id`. BIRD applies a changed protocol by restarting it: the
//!   session goes down (the peer flushes its routes at once: the restart sends a
//!   Cease, not a graceful restart) and comes up a few seconds later. A pair losing
//!   one of its two protocols (mesh and `BGPPeer`) may lose the one that carried it,
//!   so that counts as a restart too; a protocol added beside an established one
//!   changes nothing.
//! - So a node whose own cluster ID changes restarts **every** session it has (each
//!   one gains, loses or changes `rr cluster id`, or was a mesh session), and for
//!   those seconds no route reaches it and its own route reaches nobody. No plan can
//!   avoid that in Calico's configuration (one AS); [`verify`] reports those nodes
//!   ([`Verified::restarts`]) and requires every other route to be kept.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use netpolicy_core::selector::Labels;

use crate::{BgpPeer, Current, Marks, NodeInfo, Op, Step, Topology, calico::Selector};

/// Sessions by node.
pub type Sessions = BTreeMap<String, BTreeSet<String>>;

/// One session as confd configures it at both ends (the pair's names in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// Carried by Calico's node-to-node mesh (a `Mesh_` protocol).
    pub mesh: bool,
    /// Configured by a `BGPPeer` (a `Node_` protocol).
    pub peer: bool,
    /// The first node's `rr cluster id` when it treats the second as its client.
    pub first_rr: Option<Ipv4Addr>,
    /// The second node's, towards the first.
    pub second_rr: Option<Ipv4Addr>,
}

impl Session {
    /// BIRD restarts the session going from `self` to `next`: an end's reflector
    /// options changed, or one of two protocols carrying the pair went away.
    pub fn restarts_into(&self, next: &Self) -> bool {
        self.first_rr != next.first_rr
            || self.second_rr != next.second_rr
            || (self.mesh && !next.mesh)
            || (self.peer && !next.peer)
    }
}

/// Every session by its pair of node names (first < second).
pub type Pairs = BTreeMap<(String, String), Session>;

/// What [`verify`] found acceptable: the nodes whose own cluster ID changes, each
/// restarting every BGP session it has once (module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    /// `(step index, node)`; the mesh switched off counts as the step after the last.
    pub restarts: Vec<(usize, String)>,
}

/// Nodes with their labels (ours included), cluster IDs, and our `BGPPeer` objects.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Every node's labels.
    pub labels: BTreeMap<String, Labels>,
    /// Cluster-ID annotations.
    pub cluster_ids: BTreeMap<String, Ipv4Addr>,
    /// `BGPPeer` objects by name.
    pub peers: BTreeMap<String, BgpPeer>,
    /// Calico's node-to-node mesh is on.
    pub mesh: bool,
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
            mesh: current.mesh,
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
        Ok(self.sessions_of(&self.pairs()?))
    }

    fn sessions_of(&self, pairs: &Pairs) -> Sessions {
        let mut out: Sessions = self
            .labels
            .keys()
            .map(|n| (n.clone(), BTreeSet::new()))
            .collect();
        for (a, b) in pairs.keys() {
            out.entry(a.clone()).or_default().insert(b.clone());
            out.entry(b.clone()).or_default().insert(a.clone());
        }
        out
    }

    /// Every session with its configuration at both ends: the mesh's (when on, between
    /// nodes without a cluster ID) and the `BGPPeer` objects' (an object peers every
    /// node its `nodeSelector` matches with every node its `peerSelector` matches,
    /// never a node with itself).
    ///
    /// # Errors
    /// A selector that does not parse, naming the object.
    pub fn pairs(&self) -> Result<Pairs, String> {
        let mut peered: BTreeSet<(&String, &String)> = BTreeSet::new();
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
                        peered.insert(if a < b { (a, b) } else { (b, a) });
                    }
                }
            }
        }
        let rr = |x: &String, y: &String| {
            let c = self.cluster_ids.get(x)?;
            (self.cluster_ids.get(y) != Some(c)).then_some(*c)
        };
        let session = |a: &String, b: &String, peer: bool| Session {
            mesh: self.mesh
                && !self.cluster_ids.contains_key(a)
                && !self.cluster_ids.contains_key(b),
            peer,
            first_rr: rr(a, b),
            second_rr: rr(b, a),
        };
        let mut out: Pairs = peered
            .into_iter()
            .map(|(a, b)| ((a.clone(), b.clone()), session(a, b, true)))
            .collect();
        if self.mesh {
            let plain: Vec<&String> = self
                .labels
                .keys()
                .filter(|n| !self.cluster_ids.contains_key(*n))
                .collect();
            for (i, a) in plain.iter().enumerate() {
                for b in &plain[i + 1..] {
                    out.entry(((*a).clone(), (*b).clone()))
                        .or_insert_with(|| session(a, b, false));
                }
            }
        }
        Ok(out)
    }
}

/// How two equally good routes are ordered (BIRD prefers the lower peer address; the
/// checks run with both orders so that no result depends on the addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tie {
    /// The peer first in node-name order wins.
    Lowest,
    /// The peer last in node-name order wins.
    Highest,
}

/// Which nodes learn which nodes' routes: `learned[o]` holds every node that has a
/// route to `o` (never `o` itself).
pub type Learned = BTreeMap<String, BTreeSet<String>>;

/// A route as one node holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    /// CLUSTER_LIST (cluster IDs as integers), most recent first.
    cluster_list: Vec<u32>,
    /// The peer it came from (`usize::MAX`: originated here).
    from: usize,
    /// It came from a client of this node.
    from_client: bool,
}

impl Cluster {
    /// Every node's route, followed through the sessions with Calico's route-reflection
    /// rules (module docs); `tie` orders equally good routes.
    ///
    /// # Errors
    /// A selector that does not parse, or a route that never settles (the rules above
    /// always settle; this guards the check itself).
    pub fn propagation(&self, tie: Tie) -> Result<Learned, String> {
        self.follow(&self.pairs()?, tie).map(|(learned, _)| learned)
    }

    /// Paths each node holds once every route settled: for every other node's route,
    /// how many peers send it a copy it accepts (its Adj-RIB-In, summed over routes).
    /// What a cluster-ID layout costs a BGP speaker, beside its sessions.
    ///
    /// # Errors
    /// As [`Cluster::propagation`].
    pub fn paths(&self, tie: Tie) -> Result<BTreeMap<String, usize>, String> {
        self.follow(&self.pairs()?, tie).map(|(_, paths)| paths)
    }

    /// Routes through `pairs` only (the sessions that are up), with this cluster's IDs.
    fn follow(
        &self,
        pairs: &Pairs,
        tie: Tie,
    ) -> Result<(Learned, BTreeMap<String, usize>), String> {
        let sessions = self.sessions_of(pairs);
        let names: Vec<&String> = sessions.keys().collect();
        let index: BTreeMap<&str, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let adj: Vec<Vec<usize>> = names
            .iter()
            .map(|n| {
                sessions[*n]
                    .iter()
                    .filter_map(|p| index.get(p.as_str()).copied())
                    .collect()
            })
            .collect();
        let cid: Vec<Option<u32>> = names
            .iter()
            .map(|n| self.cluster_ids.get(*n).map(|a| u32::from(*a)))
            .collect();
        // x treats y as its client.
        let client = |x: usize, y: usize| cid[x].is_some() && cid[x] != cid[y];
        // What y, holding `r`, advertises to x and x accepts: the CLUSTER_LIST x gets.
        let offer = |y: usize, x: usize, r: &Held| -> Option<Vec<u32>> {
            let cluster_list = if r.from == usize::MAX {
                Vec::new()
            } else {
                let c = cid[y]?;
                if r.from == x || !(r.from_client || client(y, x)) {
                    return None;
                }
                let mut cl = Vec::with_capacity(r.cluster_list.len() + 1);
                cl.push(c);
                cl.extend_from_slice(&r.cluster_list);
                cl
            };
            (!cid[x].is_some_and(|c| cluster_list.contains(&c))).then_some(cluster_list)
        };
        let better = |a: &Held, b: &Held| match a.cluster_list.len().cmp(&b.cluster_list.len()) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => match tie {
                Tie::Lowest => a.from < b.from,
                Tie::Highest => a.from > b.from,
            },
        };
        let n = names.len();
        let mut out = Learned::new();
        let mut paths = vec![0usize; n];
        for o in 0..n {
            let mut best: Vec<Option<Held>> = vec![None; n];
            best[o] = Some(Held {
                cluster_list: Vec::new(),
                from: usize::MAX,
                from_client: false,
            });
            let mut settled = false;
            for _round in 0..(4 * n + 4) {
                let mut changed = false;
                for x in 0..n {
                    if x == o {
                        continue;
                    }
                    let mut cand: Option<Held> = None;
                    for &y in &adj[x] {
                        let Some(r) = &best[y] else { continue };
                        let Some(cluster_list) = offer(y, x, r) else {
                            continue;
                        };
                        let h = Held {
                            cluster_list,
                            from: y,
                            from_client: client(x, y),
                        };
                        if cand.as_ref().is_none_or(|c| better(&h, c)) {
                            cand = Some(h);
                        }
                    }
                    if cand != best[x] {
                        best[x] = cand;
                        changed = true;
                    }
                }
                if !changed {
                    settled = true;
                    break;
                }
            }
            if !settled {
                return Err(format!("the route of {} does not settle", names[o]));
            }
            // Copies each node accepts at the fixpoint.
            for x in (0..n).filter(|&x| x != o) {
                paths[x] += adj[x]
                    .iter()
                    .filter(|&&y| best[y].as_ref().is_some_and(|r| offer(y, x, r).is_some()))
                    .count();
            }
            out.insert(
                names[o].clone(),
                (0..n)
                    .filter(|&x| x != o && best[x].is_some())
                    .map(|x| names[x].clone())
                    .collect(),
            );
        }
        let paths = names
            .iter()
            .zip(paths)
            .map(|(n, p)| ((*n).clone(), p))
            .collect();
        Ok((out, paths))
    }
}

/// What [`verify`] holds a plan to: the nodes in BGP (a session, and one in the target)
/// and, per origin, the nodes that must keep learning its route. Both only grow: what a
/// node learned before the plan, and what it learned once a step's sessions were all
/// up. A route a node gained midway is a route it has; losing it later is a loss like
/// any other, and a plan made again midway (from that state) holds it as learned before.
#[derive(Debug, Default)]
struct Owed {
    keep: BTreeSet<String>,
    must: BTreeMap<String, BTreeSet<String>>,
}

impl Owed {
    /// Adds what `c` has with every session up: nodes with a session that `expected`
    /// names, and the routes between them learned with either tie order.
    fn settle(&mut self, c: &Cluster, expected: impl Fn(&str) -> bool) -> Result<(), String> {
        self.keep.extend(
            c.sessions()?
                .into_iter()
                .filter(|(n, s)| !s.is_empty() && expected(n))
                .map(|(n, _)| n),
        );
        let learned = [c.propagation(Tie::Lowest)?, c.propagation(Tie::Highest)?];
        for o in &self.keep {
            for x in self.keep.iter().filter(|x| *x != o) {
                if learned
                    .iter()
                    .all(|l| l.get(o).is_some_and(|s| s.contains(x)))
                {
                    self.must.entry(o.clone()).or_default().insert(x.clone());
                }
            }
        }
        Ok(())
    }

    /// Whether `x` must keep learning `o`'s route.
    fn must(&self, o: &str, x: &str) -> bool {
        self.must.get(o).is_some_and(|xs| xs.contains(x))
    }
}

/// Replays `steps` from `current` one operation at a time and checks that
/// - no node that has a session before the plan (or once an earlier step's sessions are
///   up) and in the target loses all of its sessions at any point, nor a route it
///   learned then and should still learn (a plan made again midway counts those as
///   learned before, so the rest of a plan checks alike either way) —
///   counting only the sessions that are up: a step's operations follow each other
///   closely, so a session is up during a step only if it existed when the step began
///   and no operation so far restarted it (module docs); the operator waits
///   `stepDelaySeconds` after a step for them to come up. Nodes whose own cluster ID
///   the step changes are exempt (they restart every session, [`Verified::restarts`]);
/// - when Calico's mesh is on ([`Current::mesh`]), turning it off after the last step
///   (the job's `nodeToNodeMesh: disable`) keeps the same;
/// - at the end, with the mesh off, every client's sessions are exactly its reflectors
///   in `target`, every reflector with its reflectors in `target.links`, every node learns
///   every other node's route, and cluster IDs are the target's.
///
/// # Errors
/// What went wrong, naming the node, the step and the operation.
pub fn verify(
    nodes: &[NodeInfo],
    current: &Current,
    steps: &[Step],
    target: &Topology,
    reflector_label: &str,
) -> Result<Verified, String> {
    let mut c = Cluster::new(nodes, current, reflector_label);
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
    let before = c.sessions()?;
    let mut owed = Owed::default();
    owed.settle(&c, expected)?;
    let mut verified = Verified::default();
    let mut step_of =
        |si: usize, phase: &str, c: &mut Cluster, ops: &[Option<&Op>], owed: &Owed| {
            let (keep, must) = (&owed.keep, |o: &str, x: &str| owed.must(o, x));
            let mut up = c.pairs()?;
            let mut restarting: BTreeSet<String> = BTreeSet::new();
            for (oi, op) in ops.iter().enumerate() {
                let ids = c.cluster_ids.clone();
                match op {
                    Some(op) => c.apply(op),
                    None => c.mesh = false,
                }
                let now = c.pairs()?;
                for n in c.labels.keys() {
                    if ids.get(n) != c.cluster_ids.get(n) && restarting.insert(n.clone()) {
                        verified.restarts.push((si, n.clone()));
                    }
                }
                up.retain(|k, s| now.get(k).is_some_and(|n| !s.restarts_into(n)));
                let what = || match op {
                    Some(op) => format!("after step {si} ({phase}) operation {oi}: {op:?}"),
                    None => "once the node-to-node mesh is off".to_owned(),
                };
                let sessions = c.sessions_of(&up);
                // A node that must still learn a route from a node that is not restarting
                // needs a session up (the route check below says the same, less plainly).
                let needs = |n: &String| {
                    !restarting.contains(n)
                        && keep
                            .iter()
                            .any(|o| o != n && !restarting.contains(o) && must(o, n))
                };
                for n in keep.iter().filter(|n| needs(n)) {
                    if sessions.get(n).is_none_or(BTreeSet::is_empty) {
                        return Err(format!("{n} has no session up {}", what()));
                    }
                }
                for tie in [Tie::Lowest, Tie::Highest] {
                    for (o, xs) in &c.follow(&up, tie)?.0 {
                        if restarting.contains(o) {
                            continue;
                        }
                        for x in keep.iter().filter(|x| !restarting.contains(*x)) {
                            if x != o && !xs.contains(x) && must(o, x) {
                                let show = |n: &str| {
                                    let peers: Vec<String> = sessions
                                        .get(n)
                                        .into_iter()
                                        .flatten()
                                        .map(|p| match c.cluster_ids.get(p) {
                                            Some(id) => format!("{p}[{id}]"),
                                            None => p.clone(),
                                        })
                                        .collect();
                                    format!(
                                        "{n}[{:?}] peers (up) {}",
                                        c.cluster_ids.get(n),
                                        peers.join(" ")
                                    )
                                };
                                return Err(format!(
                                    "{x} no longer learns the route of {o} {} ({tie:?} ties); \
                                 {}; {}; before: {o} peered {:?}",
                                    what(),
                                    show(o),
                                    show(x),
                                    before.get(o)
                                ));
                            }
                        }
                    }
                }
            }
            Ok::<(), String>(())
        };
    for (si, step) in steps.iter().enumerate() {
        let ops: Vec<Option<&Op>> = step.ops.iter().map(Some).collect();
        step_of(si, step.phase.as_str(), &mut c, &ops, &owed)?;
        owed.settle(&c, expected)?;
    }
    if c.mesh {
        step_of(steps.len(), "mesh off", &mut c, &[None], &owed)?;
    }
    check_end(&c, target, &reflectors)?;
    Ok(verified)
}

/// [`verify`] on a few nodes of each kind: every node that is a reflector now or in
/// `target`, and two clients for each distinct combination of the labels the plan's
/// selectors read, its marks now and its marks in `target` (two, so that routes
/// between clients alike are checked too). Clients alike in all of these have the
/// same sessions at every operation and their routes travel alike, so the result is
/// [`verify`]'s at a cost that grows with reflectors and sets, not nodes (the planner
/// checks a plan with it at run time).
///
/// # Errors
/// As [`verify`].
pub fn verify_by_kind(
    nodes: &[NodeInfo],
    current: &Current,
    steps: &[Step],
    target: &Topology,
) -> Result<Verified, String> {
    let mut keys: BTreeSet<String> = BTreeSet::new();
    let objects = current.bgp_peers.iter().chain(&target.bgp_peers).chain(
        steps.iter().flat_map(|s| &s.ops).filter_map(|op| match op {
            Op::ApplyBgpPeer(p) => Some(p),
            _ => None,
        }),
    );
    for p in objects {
        for text in [&p.node_selector, &p.peer_selector] {
            Selector::parse(text)
                .map_err(|e| format!("BGPPeer {}: {text:?}: {e}", p.name))?
                .keys(&mut keys);
        }
    }
    let none = Marks::default();
    let mut seen = BTreeMap::new();
    let few: Vec<NodeInfo> = nodes
        .iter()
        .filter(|n| {
            let now = current.marks.get(&n.name).unwrap_or(&none);
            let then = target.marks.get(&n.name).unwrap_or(&none);
            if now.reflector.is_some() || then.reflector.is_some() {
                return true;
            }
            let read: Vec<(&String, Option<&String>)> =
                keys.iter().map(|k| (k, n.labels.get(k))).collect();
            // Two of each: clients alike learn each other's routes too.
            let count = seen.entry((read, now.clone(), then.clone())).or_insert(0);
            *count += 1;
            *count <= 2
        })
        .cloned()
        .collect();
    if few.len() == nodes.len() {
        return verify(nodes, current, steps, target, &target.reflector_label);
    }
    let names: BTreeSet<&str> = few.iter().map(|n| n.name.as_str()).collect();
    let kept = |n: &String| names.contains(n.as_str());
    let current = Current {
        marks: current
            .marks
            .iter()
            .filter(|(n, _)| kept(n))
            .map(|(n, m)| (n.clone(), m.clone()))
            .collect(),
        ..current.clone()
    };
    let mut target = target.clone();
    target.clients.retain(|n, _| kept(n));
    target.marks.retain(|n, _| kept(n));
    let steps: Vec<Step> = steps
        .iter()
        .map(|s| Step {
            phase: s.phase,
            ops: s
                .ops
                .iter()
                .filter(|op| op.node().is_none_or(kept))
                .cloned()
                .collect(),
        })
        .filter(|s| !s.ops.is_empty())
        .collect();
    verify(&few, &current, &steps, &target, &target.reflector_label)
}

/// The end of a plan, with the mesh off: every node in the topology learns every
/// other's route, clients peer with exactly their reflectors, reflectors with exactly
/// their links, and cluster IDs are the target's.
fn check_end(c: &Cluster, target: &Topology, reflectors: &BTreeSet<&str>) -> Result<(), String> {
    // At the end every node in the topology learns every other's route.
    let members: BTreeSet<&str> = target
        .clients
        .iter()
        .filter(|(_, rs)| !rs.is_empty())
        .map(|(n, _)| n.as_str())
        .chain(reflectors.iter().copied())
        .collect();
    if members.len() > 1 {
        for tie in [Tie::Lowest, Tie::Highest] {
            let learned = c.propagation(tie)?;
            for o in &members {
                for x in &members {
                    if o != x && !learned.get(*o).is_some_and(|s| s.contains(*x)) {
                        return Err(format!(
                            "at the end {x} does not learn the route of {o} ({tie:?} ties)"
                        ));
                    }
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
    for r in reflectors {
        let got: BTreeSet<&str> = end
            .get(*r)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .filter(|p| reflectors.contains(p))
            .collect();
        let want: BTreeSet<&str> = target
            .links
            .get(*r)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if got != want {
            return Err(format!(
                "at the end reflector {r} peers with reflectors {got:?}, the topology says {want:?}"
            ));
        }
    }
    for (r, m) in &target.marks {
        if let Some(id) = m.cluster_id
            && c.cluster_ids.get(r) != Some(&id)
        {
            return Err(format!("at the end reflector {r} has no cluster ID {id}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two reflectors and two clients: `c1` peers with `r1`, `c2` with `r2`, the
    /// reflectors with each other.
    fn two_reflectors(id1: [u8; 4], id2: [u8; 4]) -> Cluster {
        let labels: BTreeMap<String, Labels> = ["c1", "c2", "r1", "r2"]
            .iter()
            .map(|n| {
                let mut l = Labels::new();
                l.insert(format!("is-{n}"), String::new());
                ((*n).to_owned(), l)
            })
            .collect();
        let peer = |name: &str, a: &str, b: &str| {
            (
                name.to_owned(),
                BgpPeer {
                    name: name.to_owned(),
                    node_selector: format!("has(is-{a})"),
                    peer_selector: format!("has(is-{b})"),
                },
            )
        };
        Cluster {
            labels,
            cluster_ids: BTreeMap::from([
                ("r1".to_owned(), Ipv4Addr::from(id1)),
                ("r2".to_owned(), Ipv4Addr::from(id2)),
            ]),
            peers: BTreeMap::from([
                peer("p1", "c1", "r1"),
                peer("p2", "c2", "r2"),
                peer("mesh", "r1", "r2"),
            ]),
            mesh: false,
            reflector_label: "rr".into(),
        }
    }

    #[test]
    fn what_a_plan_owes_grows_with_what_a_step_brought() {
        let mut c = two_reflectors([224, 0, 0, 1], [224, 0, 0, 2]);
        let p2 = c.peers.remove("p2").unwrap();
        let mut owed = Owed::default();
        owed.settle(&c, |_| true).unwrap();
        // c2 has no session yet: nothing is owed to or from it.
        assert!(owed.must("c1", "r2") && owed.must("r2", "c1"));
        assert!(!owed.keep.contains("c2") && !owed.must("c1", "c2"));
        // A step gives c2 its session: its routes are owed from then on...
        c.peers.insert("p2".to_owned(), p2);
        owed.settle(&c, |_| true).unwrap();
        assert!(owed.must("c1", "c2") && owed.must("c2", "c1"));
        // ...also after a later state without it (verify reports that loss).
        c.peers.remove("p2");
        owed.settle(&c, |_| true).unwrap();
        assert!(owed.must("c1", "c2") && owed.keep.contains("c2"));
        // A node the target has no place for is owed nothing.
        let mut none = Owed::default();
        none.settle(&c, |n| n != "c1").unwrap();
        assert!(!none.must("r1", "c1") && !none.must("c1", "r1"));
    }

    #[test]
    fn a_node_whose_cluster_id_changes_restarts_every_session_it_has() {
        let before = two_reflectors([224, 0, 0, 1], [224, 0, 0, 2]);
        let mut after = before.clone();
        after
            .cluster_ids
            .insert("r1".into(), Ipv4Addr::new(224, 0, 0, 3));
        let (b, a) = (before.pairs().unwrap(), after.pairs().unwrap());
        for (k, s) in &b {
            let touches_r1 = k.0 == "r1" || k.1 == "r1";
            assert_eq!(s.restarts_into(&a[k]), touches_r1, "{k:?}");
        }
        // Joining r2's ID: r2's end changes too (r1 is no longer its client).
        after
            .cluster_ids
            .insert("r1".into(), Ipv4Addr::new(224, 0, 0, 2));
        let a = after.pairs().unwrap();
        let k = ("r1".to_owned(), "r2".to_owned());
        assert_eq!(a[&k].second_rr, None);
        assert!(b[&k].restarts_into(&a[&k]));
    }

    #[test]
    fn the_mesh_joins_nodes_without_a_cluster_id_only() {
        let mut c = two_reflectors([224, 0, 0, 1], [224, 0, 0, 2]);
        c.mesh = true;
        c.cluster_ids.remove("r1");
        let p = c.pairs().unwrap();
        let key = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert!(p[&key("c1", "c2")].mesh && !p[&key("c1", "c2")].peer);
        // r1 has no ID: in the mesh and, through p1, peered with c1 as well.
        assert!(p[&key("c1", "r1")].mesh && p[&key("c1", "r1")].peer);
        assert!(!p[&key("c2", "r2")].mesh, "r2 has an ID: confd skips it");
        // Turning the mesh off restarts the pair that had both protocols.
        let mut off = c.clone();
        off.mesh = false;
        let q = off.pairs().unwrap();
        assert!(p[&key("c1", "r1")].restarts_into(&q[&key("c1", "r1")]));
        assert!(!q.contains_key(&key("c1", "c2")));
    }

    /// `simple` (a zone's reflectors share an ID) to `multi` (each its own): the last
    /// by name keeps the zone's ID, the other takes a new one. With a target where both
    /// change, at once every client loses both reflectors for the restart; the plan
    /// changes one per step and keeps every route.
    #[test]
    fn without_the_mesh_reflectors_change_ids_one_at_a_time() {
        use crate::{Config, Kind, topology, transition};
        let nodes: Vec<NodeInfo> = (0..8)
            .map(|i| NodeInfo::ready(&format!("n{i}"), "a", i))
            .collect();
        let c0 = Config {
            min: 2,
            max: 2,
            reflector_label: "rr".into(),
            ..Config::default()
        };
        let t0 = topology(&nodes, &c0, &Current::default()).unwrap();
        let now = t0.applied();
        let c1 = Config {
            topology: Kind::Multi,
            peers_per_node: 2,
            ..c0
        };
        let mut t1 = topology(&nodes, &c1, &now).unwrap();
        let id = |m: &BTreeMap<String, Marks>, n: &str| m[n].cluster_id.unwrap();
        assert_eq!(id(&t1.marks, "n1"), id(&now.marks, "n1"), "the keeper");
        assert_ne!(id(&t1.marks, "n0"), id(&now.marks, "n0"));
        let other = std::net::Ipv4Addr::from(u32::from(id(&t1.marks, "n0")) + 1);
        if let Some(m) = t1.marks.get_mut("n1") {
            m.cluster_id = Some(other);
        }
        let steps = transition(&nodes, &now, &t1);
        let ids: Vec<&Step> = steps
            .iter()
            .filter(|s| s.phase == crate::Phase::ClusterIds)
            .collect();
        assert!(
            ids.len() >= 2 && ids.iter().all(|s| s.ops.len() == 1),
            "{steps:?}"
        );
        let ok = verify(&nodes, &now, &steps, &t1, "rr").unwrap();
        let restarted: BTreeSet<&str> = ok.restarts.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(restarted, BTreeSet::from(["n0", "n1"]), "{ok:?}");
        // The same operations as one step: every client loses every other's route.
        let mut merged: Vec<Step> = Vec::new();
        for s in steps {
            match merged.last_mut() {
                Some(last) if last.phase == s.phase => last.ops.extend(s.ops),
                _ => merged.push(s),
            }
        }
        let e = verify(&nodes, &now, &merged, &t1, "rr").unwrap_err();
        assert!(e.contains("setClusterIDs"), "{e}");
    }

    /// Found by the rr_topology fuzz target: `simple` → `multi` where a client's new
    /// set is an old reflector (its ID changes) and promoted ones (no ID yet). Changed
    /// first, the old one restarted while the new ones reflected nothing yet.
    #[test]
    fn new_reflectors_get_their_ids_before_an_old_one_changes_its() {
        use crate::{Config, Kind, topology, transition};
        let nodes: Vec<NodeInfo> = (0..12)
            .map(|i| NodeInfo::ready(&format!("n{i:02}"), "a", i))
            .collect();
        // Two reflectors sharing the zone's cluster ID; in `multi` one of them gets an
        // ID of its own, next to a third, new reflector.
        let c0 = Config {
            min: 2,
            max: 2,
            reflector_label: "rr".into(),
            ..Config::default()
        };
        let now = topology(&nodes, &c0, &Current::default())
            .unwrap()
            .applied();
        let c1 = Config {
            min: 3,
            max: 3,
            topology: Kind::Multi,
            peers_per_node: 2,
            ..c0
        };
        let t1 = topology(&nodes, &c1, &now).unwrap();
        let steps = transition(&nodes, &now, &t1);
        let order: Vec<(&str, bool)> = steps
            .iter()
            .flat_map(|s| &s.ops)
            .filter_map(|op| match op {
                crate::Op::SetClusterId { node, .. } => Some((
                    node.as_str(),
                    now.marks.get(node).is_some_and(|m| m.cluster_id.is_some()),
                )),
                _ => None,
            })
            .collect();
        assert!(order.iter().any(|(_, had)| *had), "{order:?}");
        let first_changed = order.iter().position(|(_, had)| *had).unwrap();
        assert!(
            order[first_changed..].iter().all(|(_, had)| *had),
            "every new reflector first: {order:?}"
        );
        verify(&nodes, &now, &steps, &t1, "rr").unwrap();
    }

    #[test]
    fn reflectors_sharing_a_cluster_id_but_not_their_clients_lose_routes() {
        let c = two_reflectors([224, 0, 0, 1], [224, 0, 0, 1]);
        for tie in [Tie::Lowest, Tie::Highest] {
            let l = c.propagation(tie).unwrap();
            // r1 reflects c1's route to r2 with CLUSTER_LIST [224.0.0.1]: r2 drops it.
            assert!(!l["c1"].contains("c2"), "{l:?}");
            assert!(!l["c1"].contains("r2"), "{l:?}");
            // Own routes of the reflectors still travel (no CLUSTER_LIST on them).
            assert!(l["r1"].contains("c2"), "{l:?}");
        }
    }

    #[test]
    fn a_cluster_id_per_reflector_carries_every_route() {
        let c = two_reflectors([224, 0, 0, 1], [224, 0, 0, 2]);
        for tie in [Tie::Lowest, Tie::Highest] {
            let l = c.propagation(tie).unwrap();
            for (o, xs) in &l {
                assert_eq!(xs.len(), 3, "{o}: {xs:?}");
            }
        }
    }

    #[test]
    fn a_node_without_a_cluster_id_reflects_nothing() {
        let mut c = two_reflectors([224, 0, 0, 1], [224, 0, 0, 2]);
        c.cluster_ids.remove("r1");
        let l = c.propagation(Tie::Lowest).unwrap();
        // c1 → r1 stops there: r1 is a plain iBGP speaker.
        assert_eq!(l["c1"], BTreeSet::from(["r1".to_owned()]));
        // r2 still reflects c2's route to r1 (r1 is its client now); r1 keeps it.
        assert!(l["c2"].contains("r1") && !l["c2"].contains("c1"));
    }
}
