//! The whole cluster, kept up to date incrementally ([`Engine`]): a label index from
//! selectors to nodes, and one merge per distinct set of matching policies.

use std::{collections::BTreeMap, sync::Arc};

use rustc_hash::FxHashMap as HashMap;

use super::{
    BaseDiff, MergedConfig, NODE_NAME_LABEL, NodeOutcome, Parts, Policy, Problem, Source,
    by_precedence, merge_parts, merge_sorted, overlay,
};
use crate::selector::{LabelLookup, Labels, Requirement, Selector};

/// Nodes whose outcome changed, sorted by name.
pub type Changed = Vec<Arc<str>>;

/// Outcome comparisons already made during one engine call.
#[derive(Default)]
pub(super) struct Memo {
    held: HashMap<(usize, usize), bool>,
    bases: HashMap<(usize, usize), Option<Arc<BaseDiff>>>,
    // Keep what was compared alive, so that no address above is reused during the call.
    keep_held: Vec<Arc<[Problem]>>,
    keep_bases: Vec<Arc<MergedConfig>>,
}

impl Memo {
    pub(super) fn held_same(&mut self, a: &Arc<[Problem]>, b: &Arc<[Problem]>) -> bool {
        if Arc::ptr_eq(a, b) {
            return true;
        }
        let key = (
            Arc::as_ptr(a) as *const () as usize,
            Arc::as_ptr(b) as *const () as usize,
        );
        if let Some(&same) = self.held.get(&key) {
            return same;
        }
        let same = a == b;
        self.held.insert(key, same);
        self.keep_held.push(Arc::clone(a));
        self.keep_held.push(Arc::clone(b));
        same
    }

    /// How two shared layers differ; `None` when they are equal.
    pub(super) fn base_diff(
        &mut self,
        a: &Arc<MergedConfig>,
        b: &Arc<MergedConfig>,
    ) -> Option<Arc<BaseDiff>> {
        if Arc::ptr_eq(a, b) {
            return None;
        }
        let key = (Arc::as_ptr(a) as usize, Arc::as_ptr(b) as usize);
        if let Some(d) = self.bases.get(&key) {
            return d.clone();
        }
        let d = BaseDiff::new(a, b);
        let d = (!d.is_empty()).then(|| Arc::new(d));
        self.bases.insert(key, d.clone());
        self.keep_bases.push(Arc::clone(a));
        self.keep_bases.push(Arc::clone(b));
        d
    }
}

#[derive(Debug)]
pub(super) struct NodeEntry {
    name: Arc<str>,
    labels: NodeLabels,
    sig: Arc<[u32]>,
    outcome: NodeOutcome,
}

impl NodeEntry {
    /// A node not yet merged (its signature and outcome are set right after).
    pub(super) fn new(name: Arc<str>, labels: NodeLabels) -> Self {
        Self {
            name,
            labels,
            sig: Arc::from([]),
            outcome: NodeOutcome::Held(Arc::from([])),
        }
    }
}

/// A node's labels as the engine keeps them: (key, value) pairs sorted by key, each
/// string shared with the [`LabelIndex`] (one allocation per distinct key and per
/// distinct value of a key, where a map of its own per node was about 800 bytes for
/// four labels: 8 MB at 10,000 nodes).
#[derive(Debug, Default)]
pub(super) struct NodeLabels(Box<[(Arc<str>, Arc<str>)]>);

impl NodeLabels {
    fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Whether these are exactly `labels`.
    fn same_as(&self, labels: &Labels) -> bool {
        self.0.len() == labels.len()
            && self
                .iter()
                .zip(labels)
                .all(|((k, v), (k2, v2))| k == k2 && v == v2)
    }

    fn to_labels(&self) -> Labels {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

impl LabelLookup for NodeLabels {
    fn label(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }
}

/// Inverted index of node labels, for selecting candidates without scanning all nodes.
/// Posting lists are sorted node ids. Its keys and values are the strings nodes'
/// [`NodeLabels`] share.
#[derive(Debug, Default)]
pub(super) struct LabelIndex {
    by_pair: HashMap<Arc<str>, HashMap<Arc<str>, Vec<u32>>>,
    by_key: HashMap<Arc<str>, Vec<u32>>,
    all: Vec<u32>,
}

pub(super) fn sorted_insert(v: &mut Vec<u32>, x: u32) {
    if let Err(at) = v.binary_search(&x) {
        v.insert(at, x);
    }
}

pub(super) fn sorted_remove(v: &mut Vec<u32>, x: u32) {
    if let Ok(at) = v.binary_search(&x) {
        v.remove(at);
    }
}

impl LabelIndex {
    /// Indexes node `id` with `labels`; returns them as the node keeps them.
    fn add(&mut self, id: u32, labels: &Labels) -> NodeLabels {
        sorted_insert(&mut self.all, id);
        self.add_all(id, labels)
    }

    /// Indexes every label of `labels` for `id` (those already indexed stay as they
    /// are); returns them as the node keeps them.
    fn add_all(&mut self, id: u32, labels: &Labels) -> NodeLabels {
        NodeLabels(
            labels
                .iter()
                .map(|(k, v)| self.add_label(id, k, v))
                .collect(),
        )
    }

    /// Indexes one label; returns its key and value as the index holds them (looked up
    /// first: keys and many values repeat on every node, so each is allocated once).
    fn add_label(&mut self, id: u32, k: &str, v: &str) -> (Arc<str>, Arc<str>) {
        let key = self
            .by_pair
            .get_key_value(k)
            .map_or_else(|| Arc::from(k), |(key, _)| Arc::clone(key));
        let values = self.by_pair.entry(Arc::clone(&key)).or_default();
        let value = values
            .get_key_value(v)
            .map_or_else(|| Arc::from(v), |(value, _)| Arc::clone(value));
        sorted_insert(values.entry(Arc::clone(&value)).or_default(), id);
        sorted_insert(self.by_key.entry(Arc::clone(&key)).or_default(), id);
        (key, value)
    }

    fn remove(&mut self, id: u32, labels: &NodeLabels) {
        sorted_remove(&mut self.all, id);
        for (k, v) in labels.iter() {
            self.remove_label(id, k, v);
        }
    }

    fn remove_label(&mut self, id: u32, k: &str, v: &str) {
        if let Some(values) = self.by_pair.get_mut(k) {
            if let Some(list) = values.get_mut(v) {
                sorted_remove(list, id);
                if list.is_empty() {
                    values.remove(v);
                }
            }
            if values.is_empty() {
                self.by_pair.remove(k);
            }
        }
        if let Some(list) = self.by_key.get_mut(k) {
            sorted_remove(list, id);
            if list.is_empty() {
                self.by_key.remove(k);
            }
        }
    }

    /// Changes only the labels that differ (a relabel usually touches one); returns the
    /// new labels as the node keeps them.
    fn relabel(&mut self, id: u32, old: &NodeLabels, new: &Labels) -> NodeLabels {
        for (k, v) in old.iter() {
            if new.get(k).map(String::as_str) != Some(v) {
                self.remove_label(id, k, v);
            }
        }
        // Labels that stayed are found indexed already: only their strings are taken.
        self.add_all(id, new)
    }

    /// A superset of the nodes `sel` matches: the smallest posting list among its
    /// positive requirements (or every node when it has none), and which requirement
    /// that list already satisfies exactly, so the caller need not test it again.
    fn candidates(&self, sel: &Selector) -> (Vec<u32>, Option<usize>) {
        const EMPTY: &[u32] = &[];
        let mut best: Option<(usize, Vec<&[u32]>)> = None;
        let size = |lists: &Vec<&[u32]>| lists.iter().map(|l| l.len()).sum::<usize>();
        for (ri, r) in sel.requirements().iter().enumerate() {
            let lists: Vec<&[u32]> = match r {
                Requirement::Equals { key, value } => vec![
                    self.by_pair
                        .get(key.as_str())
                        .and_then(|m| m.get(value.as_str()))
                        .map_or(EMPTY, Vec::as_slice),
                ],
                Requirement::In { key, values } => match self.by_pair.get(key.as_str()) {
                    Some(m) => values
                        .iter()
                        .filter_map(|v| m.get(v.as_str()).map(Vec::as_slice))
                        .collect(),
                    None => vec![],
                },
                Requirement::Exists { key } => {
                    vec![self.by_key.get(key.as_str()).map_or(EMPTY, Vec::as_slice)]
                }
                Requirement::NotIn { .. } | Requirement::DoesNotExist { .. } => continue,
            };
            if best.as_ref().is_none_or(|(_, b)| size(&lists) < size(b)) {
                best = Some((ri, lists));
            }
        }
        match best {
            None => (self.all.clone(), None),
            Some((ri, lists)) if lists.len() == 1 => (lists[0].to_vec(), Some(ri)),
            Some((ri, lists)) => {
                let mut v: Vec<u32> = lists.concat();
                v.sort_unstable();
                (v, Some(ri))
            }
        }
    }
}

/// The incremental merge engine: the cluster's nodes and policies, and every node's
/// merged outcome, kept up to date as they change.
///
/// # Guarantees
/// - After any sequence of calls, every node's outcome equals what [`Engine::build`]
///   computes from scratch over the same nodes and policies (property-tested).
/// - A change recomputes only the nodes it can affect: a policy change, the nodes its
///   old or new selector matches; a node change, that node.
/// - Outcomes are shared: nodes with the same set of matching policies hold the same
///   `Arc`s. A node with policies pinned to it (a `kubernetes.io/hostname` or
///   `netpolicy.io/node-name` selector of one value) holds the merge of its shared
///   policies, shared with every node of the same shared set, plus a layer of only the
///   items its own policies change ([`LayeredConfig`](super::LayeredConfig)).
///
/// # Complexity
///
/// | operation | cost |
/// |---|---|
/// | [`Engine::build`] | O(Σ selected nodes + distinct shared sets × merge + pinned items × log) |
/// | [`Engine::upsert_policy`] / [`Engine::remove_policy`] | O(old + new selection + new shared sets × merge + their nodes' pinned items × log) |
/// | [`Engine::upsert_node`] | O(policies × requirements + labels changed × log n) |
///
/// # Examples
/// ```
/// use netpolicy_core::{merge::{Engine, Policy}, selector::{Labels, Selector}, model::RoutingConfig};
///
/// let mut engine = Engine::new();
/// engine.upsert_node("n1", Labels::new());
/// let changed = engine.upsert_policy(Policy::cluster("default", RoutingConfig::default()));
/// assert_eq!(changed.len(), 0); // still empty: nothing to apply
/// assert!(engine.outcome("n1").unwrap().config().unwrap().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct Engine {
    policies: Vec<Option<Policy>>,
    free_policies: Vec<u32>,
    policy_ids: HashMap<Source, u32>,
    nodes: Vec<Option<NodeEntry>>,
    free_nodes: Vec<u32>,
    node_ids: HashMap<Arc<str>, u32>,
    index: LabelIndex,
    cache: HashMap<Arc<[u32]>, NodeOutcome>,
    /// The parts of the shared policies of a signature (those not pinned to one node),
    /// by their ids: per-node policies are laid over them ([`overlay`]).
    base_cache: HashMap<Arc<[u32]>, Arc<Parts>>,
}

/// Label keys whose value names one node: a selector that requires one value of one of
/// them selects at most one node (the per-node NodeConfigs of ipruler users, a trench's
/// per-node policies).
pub(super) const PINNING_KEYS: [&str; 2] = ["kubernetes.io/hostname", NODE_NAME_LABEL];

/// Whether `p` selects at most one node by its selector alone.
pub(super) fn pinned(p: &Policy) -> bool {
    p.selector.requirements().iter().any(|r| match r {
        Requirement::Equals { key, .. } => PINNING_KEYS.contains(&key.as_str()),
        Requirement::In { key, values } => {
            values.len() == 1 && PINNING_KEYS.contains(&key.as_str())
        }
        _ => false,
    })
}

impl Engine {
    /// An empty engine.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds the engine from scratch: every node and every policy at once. A later
    /// node or policy with the same name replaces an earlier one.
    pub fn build(
        nodes: impl IntoIterator<Item = (String, Labels)>,
        policies: impl IntoIterator<Item = Policy>,
    ) -> Self {
        let mut e = Self::new();
        let mut sigs: Vec<Vec<u32>> = Vec::new();
        for (name, labels) in nodes {
            let name: Arc<str> = name.into();
            let id = match e.node_ids.get(&name) {
                Some(&id) => {
                    if let Some(old) = e.nodes[id as usize].take() {
                        e.index.remove(id, &old.labels);
                    }
                    id
                }
                None => {
                    e.nodes.push(None);
                    sigs.push(Vec::new());
                    let id = (e.nodes.len() - 1) as u32;
                    e.node_ids.insert(Arc::clone(&name), id);
                    id
                }
            };
            let labels = e.index.add(id, &labels);
            e.nodes[id as usize] = Some(NodeEntry::new(name, labels));
        }
        for p in policies {
            match e.policy_ids.get(&p.source) {
                Some(&id) => e.policies[id as usize] = Some(p),
                None => {
                    let id = e.policies.len() as u32;
                    e.policy_ids.insert(p.source.clone(), id);
                    e.policies.push(Some(p));
                }
            }
        }
        for (pid, p) in e.policies.iter().enumerate() {
            let Some(p) = p else { continue };
            for nid in e.select(p.selector()) {
                sigs[nid as usize].push(pid as u32);
            }
        }
        for (nid, sig) in sigs.into_iter().enumerate() {
            let (sig, outcome) = e.intern(&sig);
            if let Some(n) = e.nodes[nid].as_mut() {
                n.sig = sig;
                n.outcome = outcome;
            }
        }
        e
    }

    /// Node ids the selector matches, sorted.
    fn select(&self, sel: &Selector) -> Vec<u32> {
        let (mut c, exact) = self.index.candidates(sel);
        let rest: Vec<&Requirement> = sel
            .requirements()
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != exact)
            .map(|(_, r)| r)
            .collect();
        if !rest.is_empty() {
            c.retain(|&id| {
                self.nodes[id as usize]
                    .as_ref()
                    .is_some_and(|n| rest.iter().all(|r| r.matches(&n.labels)))
            });
        }
        c
    }

    /// The shared signature and outcome for a sorted list of policy ids. A signature
    /// with policies pinned to one node is merged as its shared policies' parts
    /// (computed once for every node with the same shared policies) with the pinned
    /// ones laid over them.
    fn intern(&mut self, sig: &[u32]) -> (Arc<[u32]>, NodeOutcome) {
        if let Some((k, v)) = self.cache.get_key_value(sig) {
            return (Arc::clone(k), v.clone());
        }
        let policies = &self.policies;
        let get = |id: &u32| policies[*id as usize].as_ref();
        let (shared, own): (Vec<u32>, Vec<u32>) = sig
            .iter()
            .copied()
            .partition(|id| get(id).is_none_or(|p| !pinned(p)));
        let outcome = if own.is_empty() || shared.is_empty() {
            let mut ps: Vec<&Policy> = sig.iter().filter_map(get).collect();
            merge_sorted(&mut ps)
        } else {
            let base = match self.base_cache.get(shared.as_slice()) {
                Some(b) => Arc::clone(b),
                None => {
                    let mut ps: Vec<&Policy> = shared.iter().filter_map(get).collect();
                    let b = Arc::new(merge_parts(&mut ps, true));
                    self.base_cache
                        .insert(shared.as_slice().into(), Arc::clone(&b));
                    b
                }
            };
            let mut own_ps: Vec<&Policy> = own.iter().filter_map(get).collect();
            overlay(&base, &mut own_ps)
        };
        let key: Arc<[u32]> = sig.into();
        self.cache.insert(Arc::clone(&key), outcome.clone());
        (key, outcome)
    }

    /// Drops the cached outcomes that used policy `pid`: the signatures of `holders`
    /// (the nodes its selector picked — the cache keeps only signatures some node
    /// holds, see [`Engine::release`]) and the shared parts that included it. O(its
    /// nodes), not O(cache).
    fn invalidate(&mut self, pid: u32, holders: &[u32]) {
        for &nid in holders {
            if let Some(n) = self.nodes[nid as usize].as_ref()
                && n.sig.contains(&pid)
            {
                self.cache.remove(&*n.sig);
            }
        }
        self.base_cache.retain(|k, _| !k.contains(&pid));
    }

    /// Forgets the outcome of signature `old` once no node holds it any more.
    fn release(&mut self, old: &Arc<[u32]>) {
        let cached = self
            .cache
            .get_key_value(&**old)
            .is_some_and(|(k, _)| Arc::ptr_eq(k, old));
        // The cache's key and `old` itself: no node left.
        if cached && Arc::strong_count(old) == 2 {
            self.cache.remove(&**old);
        }
    }

    fn set_sig(&mut self, nid: u32, sig: Vec<u32>, changed: &mut Changed, memo: &mut Memo) {
        let (sig, outcome) = self.intern(&sig);
        let Some(n) = self.nodes[nid as usize].as_mut() else {
            return;
        };
        let same = n.outcome.same(&outcome, memo);
        let old = std::mem::replace(&mut n.sig, sig);
        if !same {
            n.outcome = outcome;
            changed.push(Arc::clone(&n.name));
        }
        self.release(&old);
    }

    /// Adds or replaces a policy (by source). Returns the nodes whose outcome changed.
    pub fn upsert_policy(&mut self, policy: Policy) -> Changed {
        let mut changed = Vec::new();
        let mut memo = Memo::default();
        let (pid, old_sel, content_changed) = match self.policy_ids.get(&policy.source) {
            Some(&pid) => {
                let Some(old) = self.policies[pid as usize].take() else {
                    return changed;
                };
                if old == policy {
                    self.policies[pid as usize] = Some(old);
                    return changed;
                }
                let sel = self.select(old.selector());
                let content_changed =
                    old.content != policy.content || old.precedence != policy.precedence;
                (pid, sel, content_changed)
            }
            None => {
                let pid = self.free_policies.pop().unwrap_or_else(|| {
                    self.policies.push(None);
                    (self.policies.len() - 1) as u32
                });
                self.policy_ids.insert(policy.source.clone(), pid);
                (pid, Vec::new(), false)
            }
        };
        let new_sel = self.select(policy.selector());
        self.policies[pid as usize] = Some(policy);
        if content_changed {
            self.invalidate(pid, &old_sel);
        }
        let mut affected = old_sel;
        affected.extend_from_slice(&new_sel);
        affected.sort_unstable();
        affected.dedup();
        for nid in affected {
            let Some(n) = self.nodes[nid as usize].as_ref() else {
                continue;
            };
            let selected = new_sel.binary_search(&nid).is_ok();
            let mut sig: Vec<u32> = n.sig.iter().copied().filter(|&p| p != pid).collect();
            if selected {
                let at = sig.partition_point(|&p| p < pid);
                sig.insert(at, pid);
            }
            if !content_changed && *sig == *n.sig {
                continue;
            }
            self.set_sig(nid, sig, &mut changed, &mut memo);
        }
        self.finish(changed)
    }

    /// Removes a policy. Returns the nodes whose outcome changed.
    pub fn remove_policy(&mut self, source: &Source) -> Changed {
        let mut changed = Vec::new();
        let mut memo = Memo::default();
        let Some(pid) = self.policy_ids.remove(source) else {
            return changed;
        };
        let Some(old) = self.policies[pid as usize].take() else {
            return changed;
        };
        let affected = self.select(old.selector());
        self.invalidate(pid, &affected);
        self.free_policies.push(pid);
        for nid in affected {
            let Some(n) = self.nodes[nid as usize].as_ref() else {
                continue;
            };
            let sig: Vec<u32> = n.sig.iter().copied().filter(|&p| p != pid).collect();
            self.set_sig(nid, sig, &mut changed, &mut memo);
        }
        self.finish(changed)
    }

    /// Adds a node or changes its labels. Returns the nodes whose outcome changed (this
    /// one, or none).
    pub fn upsert_node(&mut self, name: &str, labels: Labels) -> Changed {
        let mut changed = Vec::new();
        let mut memo = Memo::default();
        let nid = match self.node_ids.get(name) {
            Some(&nid) => {
                let Some(n) = self.nodes[nid as usize].as_mut() else {
                    return changed;
                };
                if n.labels.same_as(&labels) {
                    return changed;
                }
                n.labels = self.index.relabel(nid, &n.labels, &labels);
                nid
            }
            None => {
                let name: Arc<str> = name.into();
                let nid = match self.free_nodes.pop() {
                    Some(nid) => nid,
                    None => {
                        self.nodes.push(None);
                        (self.nodes.len() - 1) as u32
                    }
                };
                let labels = self.index.add(nid, &labels);
                self.nodes[nid as usize] = Some(NodeEntry::new(Arc::clone(&name), labels));
                self.node_ids.insert(name, nid);
                nid
            }
        };
        let Some(n) = self.nodes[nid as usize].as_ref() else {
            return changed;
        };
        let sig: Vec<u32> = self
            .policies
            .iter()
            .enumerate()
            .filter_map(|(pid, p)| {
                p.as_ref()
                    .filter(|p| p.selector().matches(&n.labels))
                    .map(|_| pid as u32)
            })
            .collect();
        self.set_sig(nid, sig, &mut changed, &mut memo);
        self.finish(changed)
    }

    /// Removes a node. Returns whether it was known.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(nid) = self.node_ids.remove(name) else {
            return false;
        };
        if let Some(n) = self.nodes[nid as usize].take() {
            self.index.remove(nid, &n.labels);
            self.release(&n.sig);
        }
        self.free_nodes.push(nid);
        true
    }

    fn finish(&mut self, mut changed: Changed) -> Changed {
        // Keep the cache from growing without bound as signatures fall out of use.
        if self.cache.len() > 1024 && self.cache.len() > 2 * self.node_ids.len() {
            self.cache.retain(|k, _| Arc::strong_count(k) > 1);
        }
        // Shared parts are only read while merging: kept for reuse, dropped when many.
        if self.base_cache.len() > 4096 {
            self.base_cache.clear();
        }
        changed.sort();
        changed.dedup();
        changed
    }

    /// The outcome of one node.
    pub fn outcome(&self, node: &str) -> Option<&NodeOutcome> {
        let nid = *self.node_ids.get(node)?;
        self.nodes[nid as usize].as_ref().map(|n| &n.outcome)
    }

    /// Every node's outcome, by node name.
    pub fn outcomes(&self) -> BTreeMap<&str, &NodeOutcome> {
        self.nodes
            .iter()
            .flatten()
            .map(|n| (&*n.name, &n.outcome))
            .collect()
    }

    /// The policies that apply to a node, highest precedence first.
    pub fn policies_for(&self, node: &str) -> Vec<&Policy> {
        let Some(&nid) = self.node_ids.get(node) else {
            return Vec::new();
        };
        let Some(n) = self.nodes[nid as usize].as_ref() else {
            return Vec::new();
        };
        let mut ps: Vec<&Policy> = n
            .sig
            .iter()
            .filter_map(|&p| self.policies[p as usize].as_ref())
            .collect();
        ps.sort_by(by_precedence);
        ps
    }

    /// A policy by its source.
    pub fn policy(&self, source: &Source) -> Option<&Policy> {
        let &pid = self.policy_ids.get(source)?;
        self.policies[pid as usize].as_ref()
    }

    /// Every policy, in no particular order.
    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.policies.iter().flatten()
    }

    /// The nodes a policy selects, sorted by name; empty for an unknown policy. Uses the
    /// label index: O(candidates of its most selective requirement), not O(nodes).
    pub fn selected(&self, source: &Source) -> Vec<&str> {
        let Some(p) = self.policy(source) else {
            return Vec::new();
        };
        let mut names: Vec<&str> = self
            .select(p.selector())
            .into_iter()
            .filter_map(|nid| self.nodes[nid as usize].as_ref().map(|n| &*n.name))
            .collect();
        names.sort_unstable();
        names
    }

    /// A copy of a node's labels, when the node is known.
    pub fn labels(&self, node: &str) -> Option<Labels> {
        let &nid = self.node_ids.get(node)?;
        self.nodes[nid as usize]
            .as_ref()
            .map(|n| n.labels.to_labels())
    }

    /// Whether the engine knows `node`.
    pub fn has_node(&self, node: &str) -> bool {
        self.node_ids.contains_key(node)
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.node_ids.len()
    }

    /// Number of distinct merged outcomes currently cached (one per distinct set of
    /// matching policies still in use or recently used).
    pub fn distinct_outcomes(&self) -> usize {
        self.cache.len()
    }
}
