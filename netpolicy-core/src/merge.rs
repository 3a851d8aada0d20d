//! Merging ClusterConfig and NodeConfigs into one desired configuration per node.
//!
//! # Semantics (docs/architecture.md)
//! - Every item has an identity: a VLAN its interface name, a route `(table, to,
//!   metric)`, a rule its priority and selector ([`crate::model::RuleKey`]).
//! - Same identity and same content: one item, listing every source that said it.
//! - Same identity, different content: the higher precedence wins. A NodeConfig beats the
//!   ClusterConfig; a NodeConfig with a higher `priority` beats a lower one.
//! - Equal precedence, different content: a [`Conflict`], naming every source at that
//!   precedence. The node is [`NodeOutcome::Held`]: it keeps its last good config.
//! - A policy that failed validation holds every node it selects (applying the rest
//!   would half-apply the user's intent and delete what the bad object used to add).
//! - The result never depends on the order of inputs: sources are ordered by
//!   precedence, then kind and name, and output lists are sorted by identity.
//!
//! # Two forms
//! - [`merge`]: the policies that apply to one node → that node's outcome.
//! - [`Engine`]: the whole cluster, kept up to date incrementally as nodes and policies
//!   change; it recomputes only the nodes a change affects.
//!
//! Nodes with the same set of matching policies get the same outcome, so the engine
//! merges once per distinct set (a "signature") and shares the result (`Arc`) between
//! nodes. In a real cluster node groups make the number of distinct signatures small
//! compared with the number of nodes.

use std::{cmp::Ordering, collections::BTreeMap, fmt, sync::Arc};

use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

use crate::{
    model::{HostAddress, IfName, Route, RouteKey, RoutingConfig, Rule, RuleKey, Vlan},
    selector::{Labels, Requirement, Selector},
};

/// The kind of object an item came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    /// The cluster-wide `ClusterConfig`.
    ClusterConfig,
    /// A `NodeConfig`.
    NodeConfig,
    /// A traffic domain (`Trench`), compiled for one node. Its items never override and
    /// are never overridden: any other source that defines one of them differently is
    /// a conflict, whatever its precedence.
    Trench,
}

impl SourceKind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterConfig => "ClusterConfig",
            Self::NodeConfig => "NodeConfig",
            Self::Trench => "Trench",
        }
    }
}

/// The label key a policy for one node selects on ([`Policy::trench`]). The engine's
/// callers add it to every node's labels with the node's name as value (see
/// [`with_node_name`]); a NodeConfig may select on it too.
pub const NODE_NAME_LABEL: &str = "netpolicy.io/node-name";

/// `labels` plus [`NODE_NAME_LABEL`]`: name`.
pub fn with_node_name(name: &str, labels: &Labels) -> Labels {
    let mut l = labels.clone();
    l.insert(NODE_NAME_LABEL.to_owned(), name.to_owned());
    l
}

/// The object an item came from (`NodeConfig/edge-routes`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// Kind of the object.
    pub kind: SourceKind,
    /// Name of the object (`<namespace>/<name>` for a namespaced one).
    pub name: Arc<str>,
    /// The node a per-node policy was compiled for ([`Policy::trench`]): part of the
    /// identity, not of the name shown.
    pub node: Option<Arc<str>>,
}

impl Source {
    /// `ClusterConfig/<name>`.
    pub fn cluster(name: &str) -> Self {
        Self {
            kind: SourceKind::ClusterConfig,
            name: name.into(),
            node: None,
        }
    }

    /// `NodeConfig/<name>`.
    pub fn node_config(name: &str) -> Self {
        Self {
            kind: SourceKind::NodeConfig,
            name: name.into(),
            node: None,
        }
    }

    /// `Trench/<namespace>/<name>`, compiled for `node`.
    pub fn trench(namespace: &str, name: &str, node: &str) -> Self {
        Self {
            kind: SourceKind::Trench,
            name: format!("{namespace}/{name}").into(),
            node: Some(node.into()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.as_str(), self.name)
    }
}

/// How strongly a policy's items win over others with the same identity.
/// Higher wins: every NodeConfig beats the ClusterConfig, then higher `priority` wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Precedence {
    rank: u8,
    priority: i64,
}

impl fmt::Display for Precedence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rank == 0 {
            f.write_str("cluster-wide")
        } else {
            write!(f, "priority {}", self.priority)
        }
    }
}

/// One policy object as the merge sees it: where it came from, which nodes it selects,
/// how strongly it wins, and its validated content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    source: Source,
    precedence: Precedence,
    selector: Selector,
    content: Option<Items>,
}

impl Policy {
    /// The `ClusterConfig`: applies to every node, lowest precedence.
    pub fn cluster(name: &str, config: RoutingConfig) -> Self {
        Self {
            source: Source::cluster(name),
            precedence: Precedence {
                rank: 0,
                priority: 0,
            },
            selector: Selector::everything(),
            content: Some(Items::from(config)),
        }
    }

    /// A `NodeConfig` with its selector and priority.
    pub fn node_config(
        name: &str,
        priority: i64,
        selector: Selector,
        config: RoutingConfig,
    ) -> Self {
        Self {
            source: Source::node_config(name),
            precedence: Precedence { rank: 1, priority },
            selector,
            content: Some(Items::from(config)),
        }
    }

    /// A traffic domain's items for one node (`Trench/<namespace>/<name>`): selects
    /// exactly the node named `node` (through [`NODE_NAME_LABEL`]). Any other source
    /// defining one of its items differently is a conflict, at any precedence.
    pub fn trench(namespace: &str, name: &str, node: &str, config: RoutingConfig) -> Self {
        Self {
            source: Source::trench(namespace, name, node),
            precedence: Precedence {
                rank: 2,
                priority: 0,
            },
            selector: Selector::from_requirements(vec![Requirement::Equals {
                key: NODE_NAME_LABEL.to_owned(),
                value: node.to_owned(),
            }]),
            content: Some(Items::from(config)),
        }
    }

    /// A policy whose content failed validation. Nodes its selector matches are held at
    /// their last good config until it is fixed or deleted. Use
    /// [`Selector::everything`] when the selector itself is invalid: then no node can
    /// be known to be unaffected.
    pub fn invalid(source: Source, priority: i64, selector: Selector) -> Self {
        let rank = match source.kind {
            SourceKind::ClusterConfig => 0,
            SourceKind::NodeConfig => 1,
            SourceKind::Trench => 2,
        };
        Self {
            source,
            precedence: Precedence { rank, priority },
            selector,
            content: None,
        }
    }

    /// The object this policy came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The policy's precedence.
    pub fn precedence(&self) -> Precedence {
        self.precedence
    }

    /// The nodes it applies to.
    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// Whether the content is valid.
    pub fn is_valid(&self) -> bool {
        self.content.is_some()
    }
}

/// Validated content with items behind `Arc`, so merged results share them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Items {
    vlans: Vec<Arc<Vlan>>,
    routes: Vec<Arc<Route>>,
    addresses: Vec<Arc<HostAddress>>,
    rules: Vec<Arc<Rule>>,
    table_hard_sync: Vec<u32>,
}

impl From<RoutingConfig> for Items {
    fn from(c: RoutingConfig) -> Self {
        Self {
            vlans: c.vlans.into_iter().map(Arc::new).collect(),
            routes: c.routes.into_iter().map(Arc::new).collect(),
            addresses: c.addresses.into_iter().map(Arc::new).collect(),
            rules: c.rules.into_iter().map(Arc::new).collect(),
            table_hard_sync: c.table_hard_sync,
        }
    }
}

/// The objects an item came from. Almost always one: stored inline, no allocation.
pub type Sources = SmallVec<[Source; 1]>;

/// An item of the merged result with every object that asked for it (at the winning
/// precedence), sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The item.
    pub item: Arc<T>,
    /// The objects it came from.
    pub sources: Sources,
}

/// The merged desired configuration of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergedConfig {
    /// VLANs, sorted by name.
    pub vlans: Vec<Sourced<Vlan>>,
    /// Routes, sorted by `(table, to, metric)`.
    pub routes: Vec<Sourced<Route>>,
    /// Addresses on links netpolicy did not create, sorted by `(dev, address)`.
    pub addresses: Vec<Sourced<HostAddress>>,
    /// Rules, sorted by identity.
    pub rules: Vec<Sourced<Rule>>,
    /// Union of the hard-synced tables of every applying policy, sorted.
    pub table_hard_sync: Vec<u32>,
}

impl MergedConfig {
    /// The merged items without their sources.
    pub fn to_routing_config(&self) -> RoutingConfig {
        RoutingConfig {
            vlans: self.vlans.iter().map(|s| (*s.item).clone()).collect(),
            routes: self.routes.iter().map(|s| (*s.item).clone()).collect(),
            addresses: self.addresses.iter().map(|s| (*s.item).clone()).collect(),
            rules: self.rules.iter().map(|s| (*s.item).clone()).collect(),
            table_hard_sync: self.table_hard_sync.clone(),
        }
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.vlans.len() + self.routes.len() + self.addresses.len() + self.rules.len()
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Names one item by kind and identity, for reports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ItemRef {
    /// A VLAN by interface name.
    Vlan(IfName),
    /// A route by `(table, to, metric)`.
    Route(RouteKey),
    /// An address by link and address.
    Address(HostAddress),
    /// A rule by priority and selector.
    Rule(RuleKey),
}

impl ItemRef {
    /// The field the item lives in: `vlans`, `routes` or `rules`.
    pub fn field(&self) -> &'static str {
        match self {
            Self::Vlan(_) => "vlans",
            Self::Route(_) => "routes",
            Self::Address(_) => "addresses",
            Self::Rule(_) => "rules",
        }
    }
}

impl fmt::Display for ItemRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Vlan(n) => write!(f, "vlan {n}"),
            Self::Route(k) => write!(f, "route {k}"),
            Self::Address(a) => write!(f, "address {a}"),
            Self::Rule(k) => write!(f, "rule {k}"),
        }
    }
}

/// Two or more sources at the same precedence disagree about one item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conflict {
    /// The item.
    pub item: ItemRef,
    /// Every source at the winning precedence that names the item, sorted (at least
    /// two, and at least two of them differ).
    pub sources: Vec<Source>,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.sources.iter().map(ToString::to_string).collect();
        let why = if self.sources.iter().any(|s| s.kind == SourceKind::Trench) {
            "(a traffic domain's items are never overridden)"
        } else {
            "at equal precedence"
        };
        write!(
            f,
            "{} is defined differently by {} {why}",
            self.item,
            names.join(" and ")
        )
    }
}

/// Why a node is held at its last good config.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Problem {
    /// Sources disagree at equal precedence.
    Conflict(Conflict),
    /// A policy that applies to the node failed validation.
    InvalidPolicy(Source),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Conflict(c) => c.fmt(f),
            Self::InvalidPolicy(s) => write!(f, "{s} applies to this node but is invalid"),
        }
    }
}

/// The merge result for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeOutcome {
    /// The node's desired configuration.
    Rendered(Arc<MergedConfig>),
    /// The node keeps its last good configuration because of these problems (sorted).
    Held(Arc<[Problem]>),
}

impl NodeOutcome {
    /// The merged config, when rendered.
    pub fn config(&self) -> Option<&MergedConfig> {
        match self {
            Self::Rendered(c) => Some(c),
            Self::Held(_) => None,
        }
    }

    /// The problems, when held.
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Rendered(_) => &[],
            Self::Held(p) => p,
        }
    }

    /// Address of the shared result, to memoise comparisons.
    fn ptr(&self) -> usize {
        match self {
            Self::Rendered(a) => Arc::as_ptr(a) as *const () as usize,
            Self::Held(a) => Arc::as_ptr(a) as *const () as usize,
        }
    }

    /// Value equality, compared once per pair of shared results.
    fn same(&self, other: &Self, memo: &mut Memo) -> bool {
        let key = (self.ptr(), other.ptr());
        if key.0 == key.1 {
            return true;
        }
        if let Some(&same) = memo.seen.get(&key) {
            return same;
        }
        let same = self == other;
        memo.seen.insert(key, same);
        // Keep both alive so that no address in `seen` is reused during this call.
        memo.keep.push(self.clone());
        memo.keep.push(other.clone());
        same
    }
}

/// Merges the policies that apply to one node. The order of `policies` does not matter.
///
/// # Examples
/// ```
/// use netpolicy_core::{merge::{merge, Policy}, selector::Selector, spec::{RouteSpec, RoutingSpec}};
///
/// let route = |via: &str| RoutingSpec {
///     routes: vec![RouteSpec { to: "10.20.0.0/16".into(), via: Some(via.into()), ..Default::default() }],
///     ..Default::default()
/// }
/// .validate("spec")
/// .unwrap();
/// let cluster = Policy::cluster("default", route("10.0.0.1"));
/// let edge = Policy::node_config("edge", 10, Selector::everything(), route("10.0.0.2"));
/// let out = merge([&cluster, &edge]);
/// let cfg = out.config().unwrap();
/// assert_eq!(cfg.routes[0].item.via.unwrap().to_string(), "10.0.0.2"); // NodeConfig wins
/// assert_eq!(cfg.routes[0].sources[0].to_string(), "NodeConfig/edge");
/// ```
pub fn merge<'a>(policies: impl IntoIterator<Item = &'a Policy>) -> NodeOutcome {
    let mut ps: Vec<&Policy> = policies.into_iter().collect();
    merge_sorted(&mut ps)
}

fn by_precedence(a: &&Policy, b: &&Policy) -> Ordering {
    b.precedence
        .cmp(&a.precedence)
        .then_with(|| a.source.cmp(&b.source))
}

fn merge_sorted(ps: &mut Vec<&Policy>) -> NodeOutcome {
    merge_parts(ps).outcome()
}

/// A merge in parts: the items of every identity without a conflict, the conflicts and
/// the invalid policies. The engine keeps the parts of the policies many nodes share
/// and lays each node's own policies over them ([`overlay`]).
#[derive(Debug, Clone, Default)]
struct Parts {
    items: MergedConfig,
    conflicts: Vec<Conflict>,
    invalid: Vec<Source>,
}

impl Parts {
    fn outcome(self) -> NodeOutcome {
        let mut problems: Vec<Problem> = self
            .invalid
            .into_iter()
            .map(Problem::InvalidPolicy)
            .collect();
        problems.extend(self.conflicts.into_iter().map(Problem::Conflict));
        if !problems.is_empty() {
            problems.sort();
            return NodeOutcome::Held(problems.into());
        }
        NodeOutcome::Rendered(Arc::new(self.items))
    }
}

/// The valid policies of `ps` with their content, and the sources of the invalid ones.
/// `ps` is sorted by precedence and deduplicated first.
fn split_valid<'a>(ps: &mut Vec<&'a Policy>) -> (Vec<(&'a Policy, &'a Items)>, Vec<Source>) {
    ps.sort_by(by_precedence);
    // The same object given twice is one object.
    ps.dedup_by(|a, b| a.source == b.source && a == b);
    let invalid = ps
        .iter()
        .filter(|p| p.content.is_none())
        .map(|p| p.source.clone())
        .collect();
    let valid = ps
        .iter()
        .filter_map(|p| p.content.as_ref().map(|c| (*p, c)))
        .collect();
    (valid, invalid)
}

fn lists<'a, T>(
    valid: &[(&'a Policy, &'a Items)],
    items: impl Fn(&'a Items) -> &'a Vec<Arc<T>>,
) -> Vec<(&'a Policy, &'a [Arc<T>])> {
    valid
        .iter()
        .map(|(p, i)| (*p, items(i).as_slice()))
        .collect()
}

fn merge_parts(ps: &mut Vec<&Policy>) -> Parts {
    let (valid, invalid) = split_valid(ps);
    let mut conflicts = Vec::new();
    let vlans = merge_kind(
        &lists(&valid, |i| &i.vlans),
        |a, b| a.name.cmp(&b.name),
        |v| ItemRef::Vlan(v.name.clone()),
        &mut conflicts,
    );
    let routes = merge_kind(
        &lists(&valid, |i| &i.routes),
        |a, b| a.key().cmp(&b.key()),
        |r| ItemRef::Route(r.key()),
        &mut conflicts,
    );
    let addresses = merge_kind(
        &lists(&valid, |i| &i.addresses),
        Ord::cmp,
        |a| ItemRef::Address(a.clone()),
        &mut conflicts,
    );
    let rules = merge_kind(
        &lists(&valid, |i| &i.rules),
        |a, b| a.key.cmp(&b.key),
        |r| ItemRef::Rule(r.key.clone()),
        &mut conflicts,
    );
    let mut table_hard_sync: Vec<u32> = valid
        .iter()
        .flat_map(|(_, i)| i.table_hard_sync.iter().copied())
        .collect();
    table_hard_sync.sort_unstable();
    table_hard_sync.dedup();
    Parts {
        items: MergedConfig {
            vlans,
            routes,
            addresses,
            rules,
            table_hard_sync,
        },
        conflicts,
        invalid,
    }
}

/// The merge of `base_ps` (whose parts are `base`) and `over` at once, computed from
/// `base`: an identity no policy of `over` names keeps the base's result; the others
/// are merged again from every policy's items of those identities (found by binary
/// search in each policy's sorted items). The same outcome as [`merge`] of all of them
/// (property-tested), at the cost of the overlay plus a copy of the base's items.
fn overlay(base: &Parts, base_ps: &[&Policy], over: &mut Vec<&Policy>) -> NodeOutcome {
    let (over_valid, over_invalid) = split_valid(over);
    let mut all: Vec<&Policy> = base_ps
        .iter()
        .copied()
        .chain(over.iter().copied())
        .collect();
    let (all_valid, _) = split_valid(&mut all);
    let mut conflicts = Vec::new();
    let mut touched: std::collections::BTreeSet<ItemRef> = std::collections::BTreeSet::new();
    let vlans = overlay_kind(
        &base.items.vlans,
        &lists(&all_valid, |i| &i.vlans),
        &lists(&over_valid, |i| &i.vlans),
        |a, b| a.name.cmp(&b.name),
        |v| ItemRef::Vlan(v.name.clone()),
        &mut conflicts,
        &mut touched,
    );
    let routes = overlay_kind(
        &base.items.routes,
        &lists(&all_valid, |i| &i.routes),
        &lists(&over_valid, |i| &i.routes),
        |a, b| a.key().cmp(&b.key()),
        |r| ItemRef::Route(r.key()),
        &mut conflicts,
        &mut touched,
    );
    let addresses = overlay_kind(
        &base.items.addresses,
        &lists(&all_valid, |i| &i.addresses),
        &lists(&over_valid, |i| &i.addresses),
        Ord::cmp,
        |a| ItemRef::Address(a.clone()),
        &mut conflicts,
        &mut touched,
    );
    let rules = overlay_kind(
        &base.items.rules,
        &lists(&all_valid, |i| &i.rules),
        &lists(&over_valid, |i| &i.rules),
        |a, b| a.key.cmp(&b.key),
        |r| ItemRef::Rule(r.key.clone()),
        &mut conflicts,
        &mut touched,
    );
    let mut all_conflicts: Vec<Conflict> = base
        .conflicts
        .iter()
        .filter(|c| !touched.contains(&c.item))
        .cloned()
        .collect();
    all_conflicts.extend(conflicts);
    let mut invalid = base.invalid.clone();
    invalid.extend(over_invalid);
    let mut table_hard_sync = base.items.table_hard_sync.clone();
    table_hard_sync.extend(
        over_valid
            .iter()
            .flat_map(|(_, i)| i.table_hard_sync.iter().copied()),
    );
    table_hard_sync.sort_unstable();
    table_hard_sync.dedup();
    Parts {
        items: MergedConfig {
            vlans,
            routes,
            addresses,
            rules,
            table_hard_sync,
        },
        conflicts: all_conflicts,
        invalid,
    }
    .outcome()
}

/// A copy of `s` sharing its item (`Sourced<T>` is `Clone` only when `T` is).
fn share<T>(s: &Sourced<T>) -> Sourced<T> {
    Sourced {
        item: Arc::clone(&s.item),
        sources: s.sources.clone(),
    }
}

/// One kind of [`overlay`]: `base`'s items with the identities `over` names merged
/// again from `all`'s items of those identities.
fn overlay_kind<T: Eq>(
    base: &[Sourced<T>],
    all: &[(&Policy, &[Arc<T>])],
    over: &[(&Policy, &[Arc<T>])],
    key_cmp: impl Fn(&T, &T) -> Ordering,
    item_ref: impl Fn(&T) -> ItemRef,
    conflicts: &mut Vec<Conflict>,
    touched: &mut std::collections::BTreeSet<ItemRef>,
) -> Vec<Sourced<T>> {
    let mut keys: Vec<&Arc<T>> = over.iter().flat_map(|(_, l)| l.iter()).collect();
    if keys.is_empty() {
        return base.iter().map(share).collect();
    }
    keys.sort_by(|a, b| key_cmp(a, b));
    keys.dedup_by(|a, b| key_cmp(a, b) == Ordering::Equal);
    touched.extend(keys.iter().map(|k| item_ref(k)));
    // Every valid policy's items of those identities, still sorted.
    let restricted: Vec<(&Policy, Vec<Arc<T>>)> = all
        .iter()
        .map(|(p, l)| {
            let found = keys
                .iter()
                .filter_map(|k| {
                    l.binary_search_by(|x| key_cmp(x, k))
                        .ok()
                        .map(|at| Arc::clone(&l[at]))
                })
                .collect();
            (*p, found)
        })
        .collect();
    let lists: Vec<(&Policy, &[Arc<T>])> =
        restricted.iter().map(|(p, v)| (*p, v.as_slice())).collect();
    let local = merge_kind(&lists, &key_cmp, &item_ref, conflicts);
    let mut out = Vec::with_capacity(base.len() + local.len());
    let mut local = local.into_iter().peekable();
    for b in base {
        while let Some(l) = local.next_if(|l| key_cmp(&l.item, &b.item) == Ordering::Less) {
            out.push(l);
        }
        if keys.binary_search_by(|k| key_cmp(k, &b.item)).is_err() {
            out.push(share(b));
        }
    }
    out.extend(local);
    out
}

/// Merges one kind of item. `valid` (each policy with its items of this kind, sorted
/// by identity) is sorted by precedence (highest first), then source.
fn merge_kind<T: Eq>(
    valid: &[(&Policy, &[Arc<T>])],
    key_cmp: impl Fn(&T, &T) -> Ordering,
    item_ref: impl Fn(&T) -> ItemRef,
    conflicts: &mut Vec<Conflict>,
) -> Vec<Sourced<T>> {
    // Fast path: one contributing policy; its items are already sorted and unique.
    let mut contributing = valid.iter().filter(|(_, l)| !l.is_empty());
    let (first, second) = (contributing.next(), contributing.next());
    if let (Some((p, l)), None) = (first, second) {
        return l
            .iter()
            .map(|item| Sourced {
                item: Arc::clone(item),
                sources: smallvec::smallvec![p.source.clone()],
            })
            .collect();
    }
    let cands = kway_merge(valid.iter().map(|(_, l)| *l), &key_cmp);
    let mut out = Vec::new();
    let mut i = 0;
    while i < cands.len() {
        let (winner, wp) = cands[i];
        let top = valid[wp].0.precedence;
        let mut j = i + 1;
        let mut sources: Sources = smallvec::smallvec![valid[wp].0.source.clone()];
        let mut contenders = vec![valid[wp].0.source.clone()];
        let mut differs = false;
        // A trench's item is exclusive: a different definition at any precedence
        // conflicts with it instead of losing or winning silently.
        let exclusive = valid[wp].0.source.kind == SourceKind::Trench;
        while j < cands.len() && key_cmp(cands[j].0, winner) == Ordering::Equal {
            let (item, pj) = cands[j];
            if valid[pj].0.precedence == top || (exclusive && **item != **winner) {
                contenders.push(valid[pj].0.source.clone());
                if **item == **winner {
                    sources.push(valid[pj].0.source.clone());
                } else {
                    differs = true;
                }
            }
            j += 1;
        }
        if differs {
            contenders.sort();
            conflicts.push(Conflict {
                item: item_ref(winner),
                sources: contenders,
            });
        } else {
            sources.sort();
            out.push(Sourced {
                item: Arc::clone(winner),
                sources,
            });
        }
        i = j;
    }
    out
}

/// Merges sorted lists into one stream sorted by `(identity, list index)`, in
/// O(n log k) comparisons for n items in k lists (a binary min-heap of list heads).
/// Each policy's items are already sorted, so this is cheaper than sorting them all.
fn kway_merge<'a, T>(
    lists: impl Iterator<Item = &'a [Arc<T>]>,
    key_cmp: &impl Fn(&T, &T) -> Ordering,
) -> Vec<(&'a Arc<T>, usize)> {
    let lists: Vec<&[Arc<T>]> = lists.collect();
    let mut pos = vec![0usize; lists.len()];
    let total = lists.iter().map(|l| l.len()).sum();
    let mut out = Vec::with_capacity(total);
    let less = |a: usize, b: usize, pos: &[usize]| {
        key_cmp(&lists[a][pos[a]], &lists[b][pos[b]]).then(a.cmp(&b)) == Ordering::Less
    };
    let sift_down = |heap: &mut [usize], mut at: usize, pos: &[usize]| loop {
        let (l, r) = (2 * at + 1, 2 * at + 2);
        let mut m = at;
        if l < heap.len() && less(heap[l], heap[m], pos) {
            m = l;
        }
        if r < heap.len() && less(heap[r], heap[m], pos) {
            m = r;
        }
        if m == at {
            break;
        }
        heap.swap(at, m);
        at = m;
    };
    let mut heap: Vec<usize> = (0..lists.len()).filter(|&l| !lists[l].is_empty()).collect();
    for at in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, at, &pos);
    }
    while let Some(&l) = heap.first() {
        out.push((&lists[l][pos[l]], l));
        pos[l] += 1;
        if pos[l] == lists[l].len() {
            heap.swap_remove(0);
        }
        sift_down(&mut heap, 0, &pos);
    }
    out
}

/// Nodes whose outcome changed, sorted by name.
pub type Changed = Vec<Arc<str>>;

/// Outcome comparisons already made during one engine call.
#[derive(Default)]
struct Memo {
    seen: HashMap<(usize, usize), bool>,
    keep: Vec<NodeOutcome>,
}

#[derive(Debug)]
struct NodeEntry {
    name: Arc<str>,
    labels: Labels,
    sig: Arc<[u32]>,
    outcome: NodeOutcome,
}

impl NodeEntry {
    /// A node not yet merged (its signature and outcome are set right after).
    fn new(name: Arc<str>, labels: Labels) -> Self {
        Self {
            name,
            labels,
            sig: Arc::from([]),
            outcome: NodeOutcome::Held(Arc::from([])),
        }
    }
}

/// Inverted index of node labels, for selecting candidates without scanning all nodes.
/// Posting lists are sorted node ids.
#[derive(Debug, Default)]
struct LabelIndex {
    by_pair: HashMap<String, HashMap<String, Vec<u32>>>,
    by_key: HashMap<String, Vec<u32>>,
    all: Vec<u32>,
}

fn sorted_insert(v: &mut Vec<u32>, x: u32) {
    if let Err(at) = v.binary_search(&x) {
        v.insert(at, x);
    }
}

fn sorted_remove(v: &mut Vec<u32>, x: u32) {
    if let Ok(at) = v.binary_search(&x) {
        v.remove(at);
    }
}

impl LabelIndex {
    fn add(&mut self, id: u32, labels: &Labels) {
        sorted_insert(&mut self.all, id);
        for (k, v) in labels {
            self.add_label(id, k, v);
        }
    }

    fn add_label(&mut self, id: u32, k: &str, v: &str) {
        // Look up before inserting: keys repeat on every node, so allocate only once.
        if !self.by_pair.contains_key(k) {
            self.by_pair.insert(k.to_owned(), HashMap::default());
        }
        if let Some(values) = self.by_pair.get_mut(k) {
            match values.get_mut(v) {
                Some(list) => sorted_insert(list, id),
                None => {
                    values.insert(v.to_owned(), vec![id]);
                }
            }
        }
        match self.by_key.get_mut(k) {
            Some(list) => sorted_insert(list, id),
            None => {
                self.by_key.insert(k.to_owned(), vec![id]);
            }
        }
    }

    fn remove(&mut self, id: u32, labels: &Labels) {
        sorted_remove(&mut self.all, id);
        for (k, v) in labels {
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

    /// Changes only the labels that differ (a relabel usually touches one).
    fn relabel(&mut self, id: u32, old: &Labels, new: &Labels) {
        for (k, v) in old {
            if new.get(k) != Some(v) {
                self.remove_label(id, k, v);
            }
        }
        for (k, v) in new {
            if old.get(k) != Some(v) {
                self.add_label(id, k, v);
            }
        }
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
                        .get(key)
                        .and_then(|m| m.get(value))
                        .map_or(EMPTY, Vec::as_slice),
                ],
                Requirement::In { key, values } => match self.by_pair.get(key) {
                    Some(m) => values
                        .iter()
                        .filter_map(|v| m.get(v).map(Vec::as_slice))
                        .collect(),
                    None => vec![],
                },
                Requirement::Exists { key } => {
                    vec![self.by_key.get(key).map_or(EMPTY, Vec::as_slice)]
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
///   `Arc`.
///
/// # Complexity
///
/// | operation | cost |
/// |---|---|
/// | [`Engine::build`] | O(Σ selected nodes + distinct signatures × merge) |
/// | [`Engine::upsert_policy`] / [`Engine::remove_policy`] | O(old + new selection + new signatures × merge) |
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
const PINNING_KEYS: [&str; 2] = ["kubernetes.io/hostname", NODE_NAME_LABEL];

/// Whether `p` selects at most one node by its selector alone.
fn pinned(p: &Policy) -> bool {
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
            e.index.add(id, &labels);
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
                    let b = Arc::new(merge_parts(&mut ps));
                    self.base_cache
                        .insert(shared.as_slice().into(), Arc::clone(&b));
                    b
                }
            };
            let base_ps: Vec<&Policy> = shared.iter().filter_map(get).collect();
            let mut own_ps: Vec<&Policy> = own.iter().filter_map(get).collect();
            overlay(&base, &base_ps, &mut own_ps)
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
                if n.labels == labels {
                    return changed;
                }
                let old = std::mem::replace(&mut n.labels, labels);
                if let Some(n) = self.nodes[nid as usize].as_ref() {
                    self.index.relabel(nid, &old, &n.labels);
                }
                nid
            }
            None => {
                let name: Arc<str> = name.into();
                let entry = NodeEntry::new(Arc::clone(&name), labels);
                let nid = match self.free_nodes.pop() {
                    Some(nid) => {
                        self.nodes[nid as usize] = Some(entry);
                        nid
                    }
                    None => {
                        self.nodes.push(Some(entry));
                        (self.nodes.len() - 1) as u32
                    }
                };
                if let Some(n) = self.nodes[nid as usize].as_ref() {
                    self.index.add(nid, &n.labels);
                }
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

    /// A node's labels, when known.
    pub fn labels(&self, node: &str) -> Option<&Labels> {
        let &nid = self.node_ids.get(node)?;
        self.nodes[nid as usize].as_ref().map(|n| &n.labels)
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
