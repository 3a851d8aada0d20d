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

mod engine;
mod layered;
mod source;

pub use engine::*;
pub use layered::*;
pub use source::*;

use std::{cmp::Ordering, fmt, sync::Arc};

use crate::model::{HostAddress, IfName, Route, RouteKey, Rule, RuleKey, Vlan};

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
