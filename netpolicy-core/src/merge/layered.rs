//! One node's merged configuration: a shared merge plus a layer of the node's own
//! items ([`LayeredConfig`]), compared and iterated without copying the shared part.

use std::{cmp::Ordering, sync::Arc};

use super::{ItemRef, Memo, Sourced, share};
use crate::model::{HostAddress, Route, RoutingConfig, Rule, Vlan};

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
pub(super) trait Keyed: Eq {
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
    pub(super) base: Arc<MergedConfig>,
    /// Only the items whose result differs from `base` (replacing it, or new), and the
    /// union of hard-synced tables; `None` when that is nothing.
    pub(super) own: Option<Arc<MergedConfig>>,
    pub(super) len: usize,
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
    pub(super) fn same(&self, other: &Self, memo: &mut Memo) -> bool {
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
pub(super) struct BaseDiff {
    vlans: Vec<Arc<Vlan>>,
    routes: Vec<Arc<Route>>,
    addresses: Vec<Arc<HostAddress>>,
    rules: Vec<Arc<Rule>>,
}

impl BaseDiff {
    pub(super) fn new(a: &MergedConfig, b: &MergedConfig) -> Self {
        Self {
            vlans: diff_keys(&a.vlans, &b.vlans),
            routes: diff_keys(&a.routes, &b.routes),
            addresses: diff_keys(&a.addresses, &b.addresses),
            rules: diff_keys(&a.rules, &b.rules),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.vlans.is_empty()
            && self.routes.is_empty()
            && self.addresses.is_empty()
            && self.rules.is_empty()
    }
}

/// The identities (sorted) present in one list only or with different results.
pub(super) fn diff_keys<T: Keyed>(a: &[Sourced<T>], b: &[Sourced<T>]) -> Vec<Arc<T>> {
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
pub(super) fn covered<T: Keyed>(keys: &[Arc<T>], a: &[Sourced<T>], b: &[Sourced<T>]) -> bool {
    let has = |l: &[Sourced<T>], k: &T| l.binary_search_by(|s| s.item.key_cmp(k)).is_ok();
    keys.iter().all(|k| has(a, k) || has(b, k))
}
