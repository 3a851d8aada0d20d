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
//! compared with the number of nodes. Where they do not — one NodeConfig per node, by
//! hostname — the engine merges once per distinct set of the *shared* policies and
//! lays each node's own policies over that merge: the node's result is the shared
//! merge plus a layer of the few items its own policies change ([`LayeredConfig`]).

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

/// An item kind of a merged configuration: sorted and merged by its identity.
trait Keyed: Eq {
    /// Orders two items by identity (equal: the same item, perhaps defined differently).
    fn key_cmp(&self, other: &Self) -> Ordering;
    /// The item's name in reports.
    fn item_ref(&self) -> ItemRef;
}

impl Keyed for Vlan {
    fn key_cmp(&self, other: &Self) -> Ordering {
        self.name.cmp(&other.name)
    }
    fn item_ref(&self) -> ItemRef {
        ItemRef::Vlan(self.name.clone())
    }
}

impl Keyed for Route {
    fn key_cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
    fn item_ref(&self) -> ItemRef {
        ItemRef::Route(self.key())
    }
}

impl Keyed for HostAddress {
    fn key_cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
    fn item_ref(&self) -> ItemRef {
        ItemRef::Address(self.clone())
    }
}

impl Keyed for Rule {
    fn key_cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
    fn item_ref(&self) -> ItemRef {
        ItemRef::Rule(self.key.clone())
    }
}

/// A node's merged configuration, in two layers: the merge of the policies it shares
/// with other nodes (one `Arc` for all of them) and the node's own items, where policies
/// pinned to this node change that merge (a per-node NodeConfig's routes, a trench's
/// addresses). The accessors give the merged lists, sorted by identity, as one
/// [`MergedConfig`] would hold them; [`LayeredConfig::to_merged`] makes that copy.
///
/// Why layers: at one NodeConfig per node, every node's result is different, and a
/// flat copy of the ~1,000 shared items per node is what a full merge and a shared edit
/// would spend their time on (benches/README.md, `merge_per_node`).
///
/// Equality is of the merged lists, however they are layered.
#[derive(Debug, Clone)]
pub struct LayeredConfig {
    base: Arc<MergedConfig>,
    /// Only the items whose result differs from `base` (replacing it, or new), and the
    /// union of hard-synced tables; `None` when that is nothing.
    own: Option<Arc<MergedConfig>>,
    len: usize,
}

impl From<MergedConfig> for LayeredConfig {
    fn from(m: MergedConfig) -> Self {
        Self::from(Arc::new(m))
    }
}

impl From<Arc<MergedConfig>> for LayeredConfig {
    fn from(base: Arc<MergedConfig>) -> Self {
        let len = base.len();
        Self {
            base,
            own: None,
            len,
        }
    }
}

impl Default for LayeredConfig {
    fn default() -> Self {
        Self::from(MergedConfig::default())
    }
}

/// The merged items of one kind of a [`LayeredConfig`], sorted by identity.
#[derive(Debug, Clone)]
pub struct Layered<'a, T> {
    base: &'a [Sourced<T>],
    own: &'a [Sourced<T>],
    cmp: fn(&T, &T) -> Ordering,
}

impl<'a, T> Iterator for Layered<'a, T> {
    type Item = &'a Sourced<T>;

    fn next(&mut self) -> Option<Self::Item> {
        let take_base = match (self.base.first(), self.own.first()) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(b), Some(o)) => match (self.cmp)(&b.item, &o.item) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => {
                    // The node's own result replaces the shared one.
                    self.base = &self.base[1..];
                    false
                }
            },
        };
        let list = if take_base {
            &mut self.base
        } else {
            &mut self.own
        };
        let (item, rest) = list.split_first()?;
        *list = rest;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (b, o) = (self.base.len(), self.own.len());
        (b.max(o), Some(b + o))
    }
}

impl LayeredConfig {
    fn layer<T: Keyed>(&self, kind: impl Fn(&MergedConfig) -> &Vec<Sourced<T>>) -> Layered<'_, T> {
        Layered {
            base: kind(&self.base),
            own: self.own.as_deref().map_or(&[], |o| kind(o).as_slice()),
            cmp: T::key_cmp,
        }
    }

    /// VLANs, sorted by name.
    pub fn vlans(&self) -> Layered<'_, Vlan> {
        self.layer(|m| &m.vlans)
    }

    /// Routes, sorted by `(table, to, metric)`.
    pub fn routes(&self) -> Layered<'_, Route> {
        self.layer(|m| &m.routes)
    }

    /// Addresses on links netpolicy did not create, sorted by `(dev, address)`.
    pub fn addresses(&self) -> Layered<'_, HostAddress> {
        self.layer(|m| &m.addresses)
    }

    /// Rules, sorted by identity.
    pub fn rules(&self) -> Layered<'_, Rule> {
        self.layer(|m| &m.rules)
    }

    /// Union of the hard-synced tables of every applying policy, sorted.
    pub fn table_hard_sync(&self) -> &[u32] {
        &self.own.as_deref().unwrap_or(&self.base).table_hard_sync
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The merge of the policies this node shares with others (the same `Arc` for every
    /// node with the same shared policies).
    pub fn shared(&self) -> &Arc<MergedConfig> {
        &self.base
    }

    /// The node's own layer: the items whose result differs from [`Self::shared`], when
    /// there are any.
    pub fn own(&self) -> Option<&MergedConfig> {
        self.own.as_deref()
    }

    /// A key for memoising work per distinct configuration: two configs with the same
    /// key are equal (equal configs may have different keys).
    pub fn memo_key(&self) -> (usize, usize) {
        let ptr = |a: &Arc<MergedConfig>| Arc::as_ptr(a) as usize;
        (ptr(&self.base), self.own.as_ref().map_or(0, ptr))
    }

    /// The merged configuration in one piece (a copy of every item's `Arc`).
    pub fn to_merged(&self) -> MergedConfig {
        if self.own.is_none() {
            return (*self.base).clone();
        }
        MergedConfig {
            vlans: self.vlans().map(share).collect(),
            routes: self.routes().map(share).collect(),
            addresses: self.addresses().map(share).collect(),
            rules: self.rules().map(share).collect(),
            table_hard_sync: self.table_hard_sync().to_vec(),
        }
    }

    /// The merged items without their sources.
    pub fn to_routing_config(&self) -> RoutingConfig {
        RoutingConfig {
            vlans: self.vlans().map(|s| (*s.item).clone()).collect(),
            routes: self.routes().map(|s| (*s.item).clone()).collect(),
            addresses: self.addresses().map(|s| (*s.item).clone()).collect(),
            rules: self.rules().map(|s| (*s.item).clone()).collect(),
            table_hard_sync: self.table_hard_sync().to_vec(),
        }
    }

    /// Whether the own layers hold the same items (the configs are equal when their
    /// shared layers are, since a layer holds only what differs from its base).
    fn own_items_eq(&self, other: &Self) -> bool {
        match (self.own.as_deref(), other.own.as_deref()) {
            (None, None) => true,
            (a, b) => {
                let empty = MergedConfig::default();
                let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
                a.vlans == b.vlans
                    && a.routes == b.routes
                    && a.addresses == b.addresses
                    && a.rules == b.rules
            }
        }
    }

    /// Equality of every merged list, item by item.
    fn flat_eq(&self, other: &Self) -> bool {
        self.vlans().eq(other.vlans())
            && self.routes().eq(other.routes())
            && self.addresses().eq(other.addresses())
            && self.rules().eq(other.rules())
    }

    /// [`PartialEq`] with the comparisons of shared layers memoised: a shared edit
    /// compares each pair of shared layers once, then every node only by its own.
    fn same(&self, other: &Self, memo: &mut Memo) -> bool {
        if self.len != other.len || self.table_hard_sync() != other.table_hard_sync() {
            return false;
        }
        let Some(diff) = memo.base_diff(&self.base, &other.base) else {
            return self.own_items_eq(other);
        };
        // A shared item that changed and that neither node overrides: changed.
        let empty = MergedConfig::default();
        let a = self.own.as_deref().unwrap_or(&empty);
        let b = other.own.as_deref().unwrap_or(&empty);
        if !(covered(&diff.vlans, &a.vlans, &b.vlans)
            && covered(&diff.routes, &a.routes, &b.routes)
            && covered(&diff.addresses, &a.addresses, &b.addresses)
            && covered(&diff.rules, &a.rules, &b.rules))
        {
            return false;
        }
        self.flat_eq(other)
    }
}

impl PartialEq for LayeredConfig {
    fn eq(&self, other: &Self) -> bool {
        if self.len != other.len || self.table_hard_sync() != other.table_hard_sync() {
            return false;
        }
        if Arc::ptr_eq(&self.base, &other.base) || self.base == other.base {
            return self.own_items_eq(other);
        }
        self.flat_eq(other)
    }
}

impl Eq for LayeredConfig {}

/// The identities whose items differ between two shared layers (empty: equal).
#[derive(Debug, Default)]
struct BaseDiff {
    vlans: Vec<Arc<Vlan>>,
    routes: Vec<Arc<Route>>,
    addresses: Vec<Arc<HostAddress>>,
    rules: Vec<Arc<Rule>>,
}

impl BaseDiff {
    fn new(a: &MergedConfig, b: &MergedConfig) -> Self {
        Self {
            vlans: diff_keys(&a.vlans, &b.vlans),
            routes: diff_keys(&a.routes, &b.routes),
            addresses: diff_keys(&a.addresses, &b.addresses),
            rules: diff_keys(&a.rules, &b.rules),
        }
    }

    fn is_empty(&self) -> bool {
        self.vlans.is_empty()
            && self.routes.is_empty()
            && self.addresses.is_empty()
            && self.rules.is_empty()
    }
}

/// The identities (sorted) present in one list only or with different results.
fn diff_keys<T: Keyed>(a: &[Sourced<T>], b: &[Sourced<T>]) -> Vec<Arc<T>> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let ord = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.item.key_cmp(&y.item),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        match ord {
            Ordering::Less => {
                out.push(Arc::clone(&a[i].item));
                i += 1;
            }
            Ordering::Greater => {
                out.push(Arc::clone(&b[j].item));
                j += 1;
            }
            Ordering::Equal => {
                if a[i] != b[j] {
                    out.push(Arc::clone(&a[i].item));
                }
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// Whether every identity of `keys` has an item in `a` or in `b`.
fn covered<T: Keyed>(keys: &[Arc<T>], a: &[Sourced<T>], b: &[Sourced<T>]) -> bool {
    let has = |l: &[Sourced<T>], k: &T| l.binary_search_by(|s| s.item.key_cmp(k)).is_ok();
    keys.iter().all(|k| has(a, k) || has(b, k))
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
    Rendered(LayeredConfig),
    /// The node keeps its last good configuration because of these problems (sorted).
    Held(Arc<[Problem]>),
}

impl NodeOutcome {
    /// The merged config, when rendered.
    pub fn config(&self) -> Option<&LayeredConfig> {
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

    /// Value equality, with the comparisons of shared results memoised.
    fn same(&self, other: &Self, memo: &mut Memo) -> bool {
        match (self, other) {
            (Self::Rendered(a), Self::Rendered(b)) => a.same(b, memo),
            (Self::Held(a), Self::Held(b)) => memo.held_same(a, b),
            _ => false,
        }
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
/// let route = out.config().unwrap().routes().next().unwrap();
/// assert_eq!(route.item.via.unwrap().to_string(), "10.0.0.2"); // NodeConfig wins
/// assert_eq!(route.sources[0].to_string(), "NodeConfig/edge");
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
    merge_parts(ps, false).outcome()
}

/// A merge in parts: the items of every identity without a conflict, the conflicts and
/// the invalid policies. The engine keeps the parts of the policies many nodes share
/// and lays each node's own policies over them ([`overlay`]).
#[derive(Debug, Clone, Default)]
struct Parts {
    items: Arc<MergedConfig>,
    conflicts: Vec<Conflict>,
    invalid: Vec<Source>,
    /// Every candidate item, for overlays (built only for them).
    lookup: Lookup,
}

/// Every valid policy's items, per kind, sorted by identity and then precedence order,
/// each with its policy's index in `by`: what an overlay merges an identity again from
/// with one binary search, instead of one per policy.
#[derive(Debug, Clone, Default)]
struct Lookup {
    by: Vec<(Source, Precedence)>,
    vlans: Cands<Vlan>,
    routes: Cands<Route>,
    addresses: Cands<HostAddress>,
    rules: Cands<Rule>,
}

type Cands<T> = Vec<(Arc<T>, u32)>;

/// One candidate of an identity: the item, who asked for it and how strongly.
type Cand<'a, T> = (&'a Arc<T>, &'a Source, Precedence);

/// The problems of a merge, sorted; `None` when there are none.
fn problems(invalid: Vec<Source>, conflicts: Vec<Conflict>) -> Option<Arc<[Problem]>> {
    let mut problems: Vec<Problem> = invalid.into_iter().map(Problem::InvalidPolicy).collect();
    problems.extend(conflicts.into_iter().map(Problem::Conflict));
    if problems.is_empty() {
        return None;
    }
    problems.sort();
    Some(problems.into())
}

impl Parts {
    fn outcome(self) -> NodeOutcome {
        match problems(self.invalid, self.conflicts) {
            Some(p) => NodeOutcome::Held(p),
            None => NodeOutcome::Rendered(LayeredConfig::from(self.items)),
        }
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

fn hard_sync_union<'a>(valid: impl Iterator<Item = &'a Items>, base: &[u32]) -> Vec<u32> {
    let mut tables = base.to_vec();
    tables.extend(valid.flat_map(|i| i.table_hard_sync.iter().copied()));
    tables.sort_unstable();
    tables.dedup();
    tables
}

/// Merges `ps` in parts; with `lookup`, keeps every candidate for overlays.
fn merge_parts(ps: &mut Vec<&Policy>, lookup: bool) -> Parts {
    let (valid, invalid) = split_valid(ps);
    let mut conflicts = Vec::new();
    let mut l = Lookup::default();
    let items = MergedConfig {
        vlans: merge_kind(
            &lists(&valid, |i| &i.vlans),
            &mut conflicts,
            lookup.then_some(&mut l.vlans),
        ),
        routes: merge_kind(
            &lists(&valid, |i| &i.routes),
            &mut conflicts,
            lookup.then_some(&mut l.routes),
        ),
        addresses: merge_kind(
            &lists(&valid, |i| &i.addresses),
            &mut conflicts,
            lookup.then_some(&mut l.addresses),
        ),
        rules: merge_kind(
            &lists(&valid, |i| &i.rules),
            &mut conflicts,
            lookup.then_some(&mut l.rules),
        ),
        table_hard_sync: hard_sync_union(valid.iter().map(|(_, i)| *i), &[]),
    };
    if lookup {
        l.by = valid
            .iter()
            .map(|(p, _)| (p.source.clone(), p.precedence))
            .collect();
    }
    Parts {
        items: Arc::new(items),
        conflicts,
        invalid,
        lookup: l,
    }
}

/// The merge of the policies of `base` (kept with their candidates) and `over` at
/// once, computed from `base`: an identity no policy of `over` names keeps the base's
/// result; the others are merged again from their candidates in `base` (one binary
/// search each) and `over`'s items. The result shares `base`'s items and holds only
/// those that differ from it ([`LayeredConfig`]). The same outcome as [`merge`] of all
/// of them (property-tested), at the cost of the overlay alone.
fn overlay(base: &Parts, over: &mut Vec<&Policy>) -> NodeOutcome {
    let (over_valid, over_invalid) = split_valid(over);
    let mut conflicts = Vec::new();
    // Base conflicts on identities the node's own policies name are merged again.
    let mut touched = (!base.conflicts.is_empty()).then(Vec::new);
    let mut added = 0;
    let (b, l) = (&*base.items, &base.lookup);
    let vlans = overlay_kind(
        &b.vlans,
        &l.vlans,
        &l.by,
        &lists(&over_valid, |i| &i.vlans),
        &mut conflicts,
        touched.as_mut(),
        &mut added,
    );
    let routes = overlay_kind(
        &b.routes,
        &l.routes,
        &l.by,
        &lists(&over_valid, |i| &i.routes),
        &mut conflicts,
        touched.as_mut(),
        &mut added,
    );
    let addresses = overlay_kind(
        &b.addresses,
        &l.addresses,
        &l.by,
        &lists(&over_valid, |i| &i.addresses),
        &mut conflicts,
        touched.as_mut(),
        &mut added,
    );
    let rules = overlay_kind(
        &b.rules,
        &l.rules,
        &l.by,
        &lists(&over_valid, |i| &i.rules),
        &mut conflicts,
        touched.as_mut(),
        &mut added,
    );
    let touched = touched.unwrap_or_default();
    let mut all_conflicts: Vec<Conflict> = base
        .conflicts
        .iter()
        .filter(|c| !touched.contains(&c.item))
        .cloned()
        .collect();
    all_conflicts.extend(conflicts);
    let mut invalid = base.invalid.clone();
    invalid.extend(over_invalid);
    if let Some(p) = problems(invalid, all_conflicts) {
        return NodeOutcome::Held(p);
    }
    let table_hard_sync = hard_sync_union(over_valid.iter().map(|(_, i)| *i), &b.table_hard_sync);
    let own = MergedConfig {
        vlans,
        routes,
        addresses,
        rules,
        table_hard_sync,
    };
    let len = b.len() + added;
    let own = (!own.is_empty() || own.table_hard_sync != b.table_hard_sync).then(|| Arc::new(own));
    NodeOutcome::Rendered(LayeredConfig {
        base: Arc::clone(&base.items),
        own,
        len,
    })
}

/// A copy of `s` sharing its item (`Sourced<T>` is `Clone` only when `T` is).
fn share<T>(s: &Sourced<T>) -> Sourced<T> {
    Sourced {
        item: Arc::clone(&s.item),
        sources: s.sources.clone(),
    }
}

/// One kind of [`overlay`]: the identities `over` names, merged again from their
/// candidates (`base_cands`, whose policies are `by`, and `over`'s items), where the
/// result differs from `base`'s (sorted). Counts in `added` the identities `base` does
/// not have; records in `touched` the identities merged again.
fn overlay_kind<T: Keyed>(
    base: &[Sourced<T>],
    base_cands: &[(Arc<T>, u32)],
    by: &[(Source, Precedence)],
    over: &[(&Policy, &[Arc<T>])],
    conflicts: &mut Vec<Conflict>,
    touched: Option<&mut Vec<ItemRef>>,
    added: &mut usize,
) -> Vec<Sourced<T>> {
    let mut keys: Vec<&Arc<T>> = over.iter().flat_map(|(_, l)| l.iter()).collect();
    if keys.is_empty() {
        return Vec::new();
    }
    keys.sort_by(|a, b| a.key_cmp(b));
    keys.dedup_by(|a, b| a.key_cmp(b) == Ordering::Equal);
    if let Some(t) = touched {
        t.extend(keys.iter().map(|k| k.item_ref()));
    }
    let mut out = Vec::with_capacity(keys.len());
    let mut group: Vec<Cand<'_, T>> = Vec::new();
    for k in keys {
        group.clear();
        let from = base_cands.partition_point(|(c, _)| c.key_cmp(k) == Ordering::Less);
        group.extend(
            base_cands[from..]
                .iter()
                .take_while(|(c, _)| c.key_cmp(k) == Ordering::Equal)
                .map(|(c, p)| {
                    let (source, precedence) = &by[*p as usize];
                    (c, source, *precedence)
                }),
        );
        for (p, l) in over {
            if let Ok(at) = l.binary_search_by(|x| x.key_cmp(k)) {
                group.push((&l[at], &p.source, p.precedence));
            }
        }
        // Highest precedence first, then source: the order `merge_kind` sees.
        group.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(b.1)));
        let Some(item) = resolve(&group, conflicts) else {
            continue;
        };
        match base.binary_search_by(|b| b.item.key_cmp(&item.item)) {
            Ok(at) if base[at] == item => {}
            Ok(_) => out.push(item),
            Err(_) => {
                *added += 1;
                out.push(item);
            }
        }
    }
    out
}

/// The result of one identity from its candidates, highest precedence first (then by
/// source): the winner with every source at its precedence that agrees, or a conflict
/// when one at that precedence disagrees. A trench's item is exclusive: a different
/// definition at any precedence conflicts with it instead of losing or winning
/// silently. A conflict goes to `conflicts`.
fn resolve<T: Keyed>(group: &[Cand<'_, T>], conflicts: &mut Vec<Conflict>) -> Option<Sourced<T>> {
    let (winner, wsource, top) = group[0];
    let exclusive = wsource.kind == SourceKind::Trench;
    let contends = |(item, _, precedence): &Cand<'_, T>| {
        *precedence == top || (exclusive && ***item != **winner)
    };
    let mut sources: Sources = smallvec::smallvec![wsource.clone()];
    let mut differs = false;
    for c in group[1..].iter().filter(|c| contends(c)) {
        if **c.0 == **winner {
            sources.push(c.1.clone());
        } else {
            differs = true;
        }
    }
    if differs {
        let mut contenders: Vec<Source> = group
            .iter()
            .filter(|c| contends(c))
            .map(|c| c.1.clone())
            .collect();
        contenders.sort();
        conflicts.push(Conflict {
            item: winner.item_ref(),
            sources: contenders,
        });
        return None;
    }
    sources.sort();
    Some(Sourced {
        item: Arc::clone(winner),
        sources,
    })
}

/// Merges one kind of item. `valid` (each policy with its items of this kind, sorted
/// by identity) is sorted by precedence (highest first), then source. With `keep`,
/// also returns every candidate there (for [`Lookup`]).
fn merge_kind<T: Keyed>(
    valid: &[(&Policy, &[Arc<T>])],
    conflicts: &mut Vec<Conflict>,
    keep: Option<&mut Cands<T>>,
) -> Vec<Sourced<T>> {
    // Fast path: one contributing policy; its items are already sorted and unique.
    let mut contributing = valid.iter().enumerate().filter(|(_, (_, l))| !l.is_empty());
    let (first, second) = (contributing.next(), contributing.next());
    if let (Some((at, (p, l))), None) = (first, second) {
        if let Some(keep) = keep {
            keep.extend(l.iter().map(|item| (Arc::clone(item), at as u32)));
        }
        return l
            .iter()
            .map(|item| Sourced {
                item: Arc::clone(item),
                sources: smallvec::smallvec![p.source.clone()],
            })
            .collect();
    }
    let cands = kway_merge(valid.iter().map(|(_, l)| *l));
    if let Some(keep) = keep {
        keep.extend(cands.iter().map(|(item, p)| (Arc::clone(*item), *p as u32)));
    }
    let mut out = Vec::new();
    let mut group: Vec<Cand<'_, T>> = Vec::new();
    let mut i = 0;
    while i < cands.len() {
        group.clear();
        let first = cands[i].0;
        while let Some(&(item, p)) = cands
            .get(i)
            .filter(|c| c.0.key_cmp(first) == Ordering::Equal)
        {
            group.push((item, &valid[p].0.source, valid[p].0.precedence));
            i += 1;
        }
        out.extend(resolve(&group, conflicts));
    }
    out
}

/// Merges sorted lists into one stream sorted by `(identity, list index)`, in
/// O(n log k) comparisons for n items in k lists (a binary min-heap of list heads).
/// Each policy's items are already sorted, so this is cheaper than sorting them all.
fn kway_merge<'a, T: Keyed>(lists: impl Iterator<Item = &'a [Arc<T>]>) -> Vec<(&'a Arc<T>, usize)> {
    let lists: Vec<&[Arc<T>]> = lists.collect();
    let mut pos = vec![0usize; lists.len()];
    let total = lists.iter().map(|l| l.len()).sum();
    let mut out = Vec::with_capacity(total);
    let less = |a: usize, b: usize, pos: &[usize]| {
        lists[a][pos[a]].key_cmp(&lists[b][pos[b]]).then(a.cmp(&b)) == Ordering::Less
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
    held: HashMap<(usize, usize), bool>,
    bases: HashMap<(usize, usize), Option<Arc<BaseDiff>>>,
    // Keep what was compared alive, so that no address above is reused during the call.
    keep_held: Vec<Arc<[Problem]>>,
    keep_bases: Vec<Arc<MergedConfig>>,
}

impl Memo {
    fn held_same(&mut self, a: &Arc<[Problem]>, b: &Arc<[Problem]>) -> bool {
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
    fn base_diff(&mut self, a: &Arc<MergedConfig>, b: &Arc<MergedConfig>) -> Option<Arc<BaseDiff>> {
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
///   `Arc`s. A node with policies pinned to it (a `kubernetes.io/hostname` or
///   `netpolicy.io/node-name` selector of one value) holds the merge of its shared
///   policies, shared with every node of the same shared set, plus a layer of only the
///   items its own policies change ([`LayeredConfig`]).
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
