//! Shared renderings (issue 68; docs/architecture.md, node agent model): what the
//! routing job's per-node specs become when nodes selected by the same policies share
//! one rendering. Pure. With `--shared-renderings` the controller publishes these
//! ([`super::fleet`], [`super::publish`]); its tests hold them to the per-node spec:
//! for every node, its group's rendering and its own items are exactly the items of the
//! spec it gets without them.
//!
//! - A **group** is the set of ClusterConfigs and NodeConfigs that select a node
//!   ([`Routing::policies_of`]); its **rendering** is their merge (with the probes and
//!   `rollbackSeconds` they give), named by its content
//!   ([`netpolicy_core::fleet::rendering_name`]).
//! - A node's **own items** are what only it has: its traffic domains' per-node
//!   policies, a RoutedIP's address, a floating IP's return routing. They cost only the
//!   nodes they touch.
//! - A node whose items do not include every item of its group's rendering (a per-node
//!   item took an identity the policies also give, with other content) runs a
//!   rendering of its own ([`NodePart::whole`]).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    hash::Hash,
    sync::Arc,
};

use netpolicy_core::{
    fleet,
    hash::Fnv1a,
    merge::{NodeOutcome, Source},
    render::{RenderedSpec, SourceRef, SourcedSpec},
    spec::{AddressSpec, RouteSpec, RuleSpec, VlanSpec},
};

use super::Routing;
use crate::{
    api::{NodeNetworkConfigSpec, NodeNetworkRenderingSpec},
    k8s::JobItems,
};

/// The shared renderings of every node [`Routing`] knows.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Each distinct rendering, by name.
    pub(crate) renderings: BTreeMap<String, Rendering>,
    /// Each group, by name.
    pub(crate) groups: BTreeMap<String, Group>,
    /// Each node with a rendered outcome (a held node keeps what it runs).
    pub(crate) nodes: BTreeMap<String, NodePart>,
}

/// A rendering as the operator holds it: its layers (the items of each source set of
/// at least [`LAYER_MIN_BYTES`], stored as objects of their own: [`layer_parts`]),
/// each held once however many renderings have it, and the rest. A ClusterConfig's 500
/// routes in 100 groups' renderings are one copy, not 100 (~20 MB of the operator's
/// heap at 10,000 nodes while a rollout runs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rendering {
    /// Its probes, `rollbackSeconds`, hard-synced tables, and the items in no layer.
    pub(crate) own: NodeNetworkConfigSpec,
    /// Its layers in the order of their sources: each one's name
    /// ([`crate::api::layer_address`]) and items.
    pub(crate) layers: Vec<(String, Arc<RenderedSpec>)>,
    /// What each policy gives it (made from the whole rendering).
    pub(crate) prints: Prints,
}

impl Rendering {
    /// `spec` with the items of each source set of at least `layer_min` bytes of JSON
    /// in a layer; a layer `held` has already is taken from there (and a new one put
    /// there), so renderings with the same layer share one copy of it.
    pub(crate) fn of(
        spec: &NodeNetworkConfigSpec,
        layer_min: usize,
        held: &mut BTreeMap<String, Arc<RenderedSpec>>,
    ) -> Self {
        let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
        macro_rules! size {
            ($list:ident) => {
                for s in &spec.rendered.$list {
                    *sizes.entry(source_key(&s.sources)).or_default() +=
                        serde_json::to_vec(s).map_or(0, |b| b.len()) + 1;
                }
            };
        }
        size!(vlans);
        size!(routes);
        size!(addresses);
        size!(rules);
        let mut layers: BTreeMap<String, RenderedSpec> = sizes
            .into_iter()
            .filter(|(_, n)| *n >= layer_min)
            .map(|(k, _)| (k, RenderedSpec::default()))
            .collect();
        let mut own = NodeNetworkConfigSpec {
            revision: spec.revision.clone(),
            rendered: RenderedSpec {
                table_hard_sync: spec.rendered.table_hard_sync.clone(),
                ..RenderedSpec::default()
            },
            probes: spec.probes.clone(),
            rollback_seconds: spec.rollback_seconds,
            ..NodeNetworkConfigSpec::default()
        };
        macro_rules! split {
            ($list:ident) => {
                for s in &spec.rendered.$list {
                    match layers.get_mut(&source_key(&s.sources)) {
                        Some(l) => l.$list.push(s.clone()),
                        None => own.rendered.$list.push(s.clone()),
                    }
                }
            };
        }
        split!(vlans);
        split!(routes);
        split!(addresses);
        split!(rules);
        let layers = layers
            .into_values()
            .map(|items| {
                let name = crate::api::layer_address(&items);
                let items = Arc::clone(held.entry(name.clone()).or_insert_with(|| Arc::new(items)));
                (name, items)
            })
            .collect();
        Self {
            own,
            layers,
            prints: Prints::of(&spec.rendered, &spec.probes, spec.rollback_seconds),
        }
    }

    /// Its items' lists: each layer's, then its own.
    fn lists(&self) -> impl Iterator<Item = &RenderedSpec> {
        self.layers
            .iter()
            .map(|(_, l)| &**l)
            .chain(std::iter::once(&self.own.rendered))
    }

    /// The whole rendering as an agent joins and lays it ([`crate::api::Joined::lay`]):
    /// its layers' items first, then its own, with its probes, `rollbackSeconds` and
    /// hard-synced tables.
    #[cfg(test)]
    pub(crate) fn whole(&self) -> NodeNetworkConfigSpec {
        let mut rendered = RenderedSpec {
            table_hard_sync: self.own.rendered.table_hard_sync.clone(),
            ..RenderedSpec::default()
        };
        for l in self.lists() {
            rendered.extend(l);
        }
        NodeNetworkConfigSpec {
            rendered,
            ..self.own.clone()
        }
    }
}

/// Nodes selected by the same policies.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    /// The policies (`Kind/name`, sorted).
    pub(crate) policies: Vec<String>,
    /// Its rendering's name; `None`: the policies conflict (its nodes hold).
    pub(crate) rendering: Option<String>,
    /// Its nodes, sorted.
    pub(crate) members: Vec<String>,
}

/// What is one node's own. Small (32 bytes) and mostly shared: 10,000 nodes' parts are
/// held for as long as a rollout runs, and nodes of one group with the same outcome
/// share their group's name and their items (a `String` and a `RenderedSpec` inline
/// per node were 3 MB of the operator's heap at the edit's peak).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodePart {
    /// Its group.
    pub(crate) group: Arc<str>,
    /// Items only it has, with their sources.
    pub(crate) own: Arc<RenderedSpec>,
    /// Its group's rendering does not hold for it: `own` is its whole rendering.
    pub(crate) whole: bool,
}

/// The shared renderings of `routing`'s nodes, with what other jobs need on each node.
pub(crate) fn shared(routing: &Routing, job_items: &BTreeMap<String, JobItems>) -> Shared {
    let mut out = Shared::default();
    let mut layers = BTreeMap::new();
    // The groups and their renderings first (one merge each), then each group's nodes
    // against its rendering: one rendering's items are indexed at a time.
    for node in routing.nodes() {
        if !matches!(routing.outcome(node), Some(NodeOutcome::Rendered(_))) {
            continue;
        }
        let policies = routing.policies_of(node);
        let group = fleet::group_name(policies.iter().map(String::as_str));
        let g = out.groups.entry(group).or_insert_with(|| {
            let (probes, rollback) = routing.node_probes(node);
            let rendering = group_rendering(routing, &policies).map(|r| {
                let spec = super::node_spec(r, probes, rollback);
                let name = fleet::rendering_name(&canonical(&spec));
                out.renderings
                    .entry(name.clone())
                    .or_insert_with(|| Rendering::of(&spec, LAYER_MIN_BYTES, &mut layers));
                name
            });
            Group {
                policies,
                rendering,
                members: Vec::new(),
            }
        });
        g.members.push(node.to_owned());
    }
    // The part of nodes whose outcome is one the engine shares (no other job's items):
    // computed once per outcome in a group, not once per node.
    for (group, g) in &out.groups {
        let group: Arc<str> = Arc::from(group.as_str());
        let keyed = g
            .rendering
            .as_ref()
            .and_then(|r| out.renderings.get(r))
            .map(Keyed::of);
        let mut memo: std::collections::HashMap<(usize, usize), NodePart> =
            std::collections::HashMap::new();
        for node in &g.members {
            let Some(NodeOutcome::Rendered(cfg)) = routing.outcome(node) else {
                continue;
            };
            let extra = job_items.get(node);
            if extra.is_none()
                && let Some(part) = memo.get(&cfg.memo_key())
            {
                out.nodes.insert(node.clone(), part.clone());
                continue;
            }
            let mut full = RenderedSpec::from_config(cfg);
            if let Some(extra) = extra {
                full = super::with_job_items(&full, extra).0;
            }
            let part = match &keyed {
                Some(k) if k.covered_by(&full) => NodePart {
                    group: Arc::clone(&group),
                    own: Arc::new(k.not_in(&full)),
                    whole: false,
                },
                _ => NodePart {
                    group: Arc::clone(&group),
                    own: Arc::new(full),
                    whole: true,
                },
            };
            if extra.is_none() {
                memo.insert(cfg.memo_key(), part.clone());
            }
            out.nodes.insert(node.clone(), part);
        }
    }
    out
}

/// The merge of exactly `policies` (what every node of the group shares); `None` when
/// they conflict.
fn group_rendering(routing: &Routing, policies: &[String]) -> Option<RenderedSpec> {
    let sources: Vec<Source> = policies
        .iter()
        .filter_map(|p| match p.split_once('/') {
            Some(("ClusterConfig", n)) => Some(Source::cluster(n)),
            Some(("NodeConfig", n)) => Some(Source::node_config(n)),
            _ => None,
        })
        .collect();
    match routing.merge_of(&sources) {
        NodeOutcome::Rendered(cfg) => Some(RenderedSpec::from_config(&cfg)),
        NodeOutcome::Held(_) => None,
    }
}

/// The rendering `name` cut into parts of at most `max` bytes of JSON each, to be
/// stored as objects under the API server's limits (an agent's read stays on small
/// objects): the first part carries the probes, `rollbackSeconds` and hard-synced
/// tables, and each part as many whole items as fit, in order; joined
/// ([`crate::api::join`]) the parts are the rendering. An item larger than a part alone
/// gets a part of its own (over `max`: the write says so, as for a node today).
/// `layers` are named on the first part ([`Rendering::layers`]).
pub(crate) fn parts(
    name: &str,
    spec: &NodeNetworkConfigSpec,
    layers: &[String],
    max: usize,
) -> Vec<NodeNetworkRenderingSpec> {
    let len = |v: &NodeNetworkRenderingSpec| serde_json::to_vec(v).map_or(0, |b| b.len());
    // Part numbers are set at the end: the largest ones count while packing.
    let empty = |first: bool| NodeNetworkRenderingSpec {
        rendering: name.to_owned(),
        part: u32::MAX,
        parts: u32::MAX,
        rendered: RenderedSpec {
            table_hard_sync: if first {
                spec.rendered.table_hard_sync.clone()
            } else {
                Vec::new()
            },
            ..RenderedSpec::default()
        },
        probes: if first {
            spec.probes.clone()
        } else {
            Vec::new()
        },
        rollback_seconds: if first { spec.rollback_seconds } else { None },
        layers: if first { layers.to_vec() } else { Vec::new() },
        delta: None,
    };
    // `"addresses":[]` is left out of an empty part's text but not of a part with one.
    const ADDRESSES_KEY: usize = r#","addresses":[]"#.len();
    let mut out = vec![empty(true)];
    let mut size = len(&out[0]) + ADDRESSES_KEY;
    macro_rules! pack {
        ($list:ident) => {
            for item in &spec.rendered.$list {
                let add = serde_json::to_vec(item).map_or(0, |b| b.len()) + 1;
                let at_least_one = out.last().is_some_and(|p| {
                    let r = &p.rendered;
                    !(r.vlans.is_empty()
                        && r.routes.is_empty()
                        && r.addresses.is_empty()
                        && r.rules.is_empty())
                });
                if size + add > max && at_least_one {
                    out.push(empty(false));
                    size = out.last().map_or(0, len) + ADDRESSES_KEY;
                }
                size += add;
                if let Some(p) = out.last_mut() {
                    p.rendered.$list.push(item.clone());
                }
            }
        };
    }
    pack!(vlans);
    pack!(routes);
    pack!(addresses);
    pack!(rules);
    let total = u32::try_from(out.len()).unwrap_or(u32::MAX);
    for (i, p) in out.iter_mut().enumerate() {
        p.part = u32::try_from(i).unwrap_or(u32::MAX);
        p.parts = total;
    }
    out
}

/// A rendering's items of one source set (the same policies gave them) that take at
/// least this many bytes of JSON are stored as a layer of their own
/// ([`crate::api::NodeNetworkRenderingSpec::layers`]); smaller sets stay in the
/// rendering's own parts. A layer is one more object to create and to read, worth it
/// when many renderings share it: a ClusterConfig's 500 routes (60 KB) are then written
/// once per edit, not once per group, and an agent whose group moves on reads only
/// what changed.
pub(crate) const LAYER_MIN_BYTES: usize = 8 * 1024;

/// Layer `name` (`items`) as it is stored: parts of at most `max` bytes.
pub(crate) fn layer_parts(
    name: &str,
    items: &RenderedSpec,
    max: usize,
) -> Vec<NodeNetworkRenderingSpec> {
    let spec = NodeNetworkConfigSpec {
        rendered: items.clone(),
        ..NodeNetworkConfigSpec::default()
    };
    parts(name, &spec, &[], max)
}

/// The key of a set of sources (`ClusterConfig/default,NodeConfig/edge`): the items of
/// one key over the layer size are a layer ([`Rendering::of`]), and a new layer of a
/// key gets a delta from its last one.
pub(crate) fn source_key(sources: &[SourceRef]) -> String {
    let s: Vec<String> = sources
        .iter()
        .map(|s| format!("{}/{}", s.kind, s.name))
        .collect();
    s.join(",")
}

/// The object name of part `part` of `parts` of rendering `name`: the rendering's own
/// name when it has one part, `<name>-<part>` otherwise.
pub(crate) fn part_name(name: &str, part: u32, parts: u32) -> String {
    if parts <= 1 {
        name.to_owned()
    } else {
        format!("{name}-{part}")
    }
}

/// What each policy gives a rendering, as fingerprints: two renderings with the same
/// print of policy `P` carry the same items of `P` (and, in `common`, the same probes,
/// `rollbackSeconds` and hard-synced tables, which no one policy owns). A node that
/// reports one of them applied has everything `P` asks of it in its kernel, whichever
/// of the two is its target: that is how a policy's `appliedNodes` stays still while
/// another policy's change rolls over its nodes (issue 68).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prints {
    /// The probes, `rollbackSeconds` and hard-synced tables.
    common: u64,
    /// Each policy (`Kind/name`) with an item in the rendering: its items, in order.
    policies: BTreeMap<String, u64>,
}

impl Prints {
    /// The prints of a rendering: its items, probes and `rollbackSeconds`. Each
    /// policy's items are hashed as their JSON is written (no text is kept).
    pub(crate) fn of(
        rendered: &RenderedSpec,
        probes: &[crate::api::ProbeSpec],
        rollback_seconds: Option<u32>,
    ) -> Self {
        fn add<T: serde::Serialize>(
            hashes: &mut BTreeMap<String, Fnv1a>,
            kind: &str,
            list: &[SourcedSpec<T>],
        ) {
            for s in list {
                for source in &s.sources {
                    let h = hashes
                        .entry(format!("{}/{}", source.kind, source.name))
                        .or_default();
                    h.update(kind.as_bytes());
                    // Writing into a hasher cannot fail.
                    let _ = serde_json::to_writer(&mut *h, &s.item);
                    h.update(b"\n");
                }
            }
        }
        let mut hashes: BTreeMap<String, Fnv1a> = BTreeMap::new();
        add(&mut hashes, "vlan", &rendered.vlans);
        add(&mut hashes, "route", &rendered.routes);
        add(&mut hashes, "address", &rendered.addresses);
        add(&mut hashes, "rule", &rendered.rules);
        let mut common = Fnv1a::default();
        // Writing into a hasher cannot fail.
        let _ = serde_json::to_writer(
            &mut common,
            &(probes, rollback_seconds, &rendered.table_hard_sync),
        );
        Self {
            common: common.finish(),
            policies: hashes.into_iter().map(|(k, h)| (k, h.finish())).collect(),
        }
    }

    /// Whether `policy` gives `self` and `other` the same items (and the two the same
    /// probes, `rollbackSeconds` and hard-synced tables).
    pub(crate) fn same_for(&self, other: &Self, policy: &str) -> bool {
        self.common == other.common && self.policies.get(policy) == other.policies.get(policy)
    }
}

/// A spec's canonical text (what its rendering is named by).
pub(crate) fn canonical(spec: &NodeNetworkConfigSpec) -> String {
    serde_json::to_string(spec).unwrap_or_default()
}

/// A rendering's items (sources aside), each with its sources, borrowed from it: what
/// a node's items are compared with.
#[derive(Debug, Default)]
struct Keyed<'a> {
    vlans: HashMap<&'a VlanSpec, &'a [SourceRef]>,
    routes: HashMap<&'a RouteSpec, &'a [SourceRef]>,
    addresses: HashMap<&'a AddressSpec, &'a [SourceRef]>,
    rules: HashMap<&'a RuleSpec, &'a [SourceRef]>,
    tables: &'a [u32],
}

impl<'a> Keyed<'a> {
    fn of(r: &'a Rendering) -> Self {
        fn list<'a, T: Eq + Hash>(
            into: &mut HashMap<&'a T, &'a [SourceRef]>,
            l: &'a [SourcedSpec<T>],
        ) {
            into.extend(l.iter().map(|s| (&s.item, s.sources.as_slice())));
        }
        let mut k = Keyed {
            tables: &r.own.rendered.table_hard_sync,
            ..Keyed::default()
        };
        for l in r.lists() {
            list(&mut k.vlans, &l.vlans);
            list(&mut k.routes, &l.routes);
            list(&mut k.addresses, &l.addresses);
            list(&mut k.rules, &l.rules);
        }
        k
    }

    /// Whether `full` has every item of the rendering (sources aside) and the same
    /// hard-synced tables.
    fn covered_by(&self, full: &RenderedSpec) -> bool {
        fn has<T: Eq + Hash>(full: &[SourcedSpec<T>], shared: &HashMap<&T, &[SourceRef]>) -> bool {
            let have: HashSet<&T> = full.iter().map(|s| &s.item).collect();
            shared.keys().all(|k| have.contains(k))
        }
        full.table_hard_sync == self.tables
            && has(&full.vlans, &self.vlans)
            && has(&full.routes, &self.routes)
            && has(&full.addresses, &self.addresses)
            && has(&full.rules, &self.rules)
    }

    /// The items of `full` that the rendering does not have as they are there: absent,
    /// or with other sources (another job's source joined a policy's item on this
    /// node); each with its sources in `full`, which the agent takes over the
    /// rendering's.
    fn not_in(&self, full: &RenderedSpec) -> RenderedSpec {
        fn only<T: Eq + Hash + Clone>(
            full: &[SourcedSpec<T>],
            shared: &HashMap<&T, &[SourceRef]>,
        ) -> Vec<SourcedSpec<T>> {
            full.iter()
                .filter(|s| shared.get(&s.item).copied() != Some(s.sources.as_slice()))
                .cloned()
                .collect()
        }
        RenderedSpec {
            vlans: only(&full.vlans, &self.vlans),
            routes: only(&full.routes, &self.routes),
            addresses: only(&full.addresses, &self.addresses),
            rules: only(&full.rules, &self.rules),
            table_hard_sync: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
