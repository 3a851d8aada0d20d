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

use std::collections::{BTreeMap, BTreeSet};

use netpolicy_core::{
    fleet,
    merge::{NodeOutcome, Source},
    render::{RenderedSpec, SourceRef, SourcedSpec},
};
use serde::Serialize;

use super::Routing;
use crate::{
    api::{NodeNetworkConfigSpec, NodeNetworkRenderingSpec},
    k8s::JobItems,
};

/// The shared renderings of every node [`Routing`] knows.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Each distinct rendering, by name.
    pub(crate) renderings: BTreeMap<String, NodeNetworkConfigSpec>,
    /// Each group, by name.
    pub(crate) groups: BTreeMap<String, Group>,
    /// Each node with a rendered outcome (a held node keeps what it runs).
    pub(crate) nodes: BTreeMap<String, NodePart>,
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

/// What is one node's own.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodePart {
    /// Its group.
    pub(crate) group: String,
    /// Items only it has, with their sources.
    pub(crate) own: RenderedSpec,
    /// Its group's rendering does not hold for it: `own` is its whole rendering.
    pub(crate) whole: bool,
}

/// The shared renderings of `routing`'s nodes, with what other jobs need on each node.
pub(crate) fn shared(routing: &Routing, job_items: &BTreeMap<String, JobItems>) -> Shared {
    let mut out = Shared::default();
    // Each rendering's items as text, once; and the part of nodes whose outcome is one
    // the engine shares (no other job's items): computed once per outcome and group,
    // not once per node.
    let mut keyed: BTreeMap<String, Keyed> = BTreeMap::new();
    let mut memo: std::collections::HashMap<((usize, usize), String), NodePart> =
        std::collections::HashMap::new();
    for node in routing.nodes() {
        let Some(NodeOutcome::Rendered(cfg)) = routing.outcome(node) else {
            continue;
        };
        let policies = routing.policies_of(node);
        let group = fleet::group_name(policies.iter().map(String::as_str));
        if !out.groups.contains_key(&group) {
            let (probes, rollback) = routing.node_probes(node);
            let rendering = group_rendering(routing, &policies).map(|r| {
                let spec = super::node_spec(r, probes, rollback);
                let name = fleet::rendering_name(&canonical(&spec));
                out.renderings.entry(name.clone()).or_insert(spec);
                name
            });
            let g = Group {
                policies: policies.clone(),
                rendering,
                members: Vec::new(),
            };
            out.groups.insert(group.clone(), g);
        }
        let Some(g) = out.groups.get_mut(&group) else {
            continue;
        };
        g.members.push(node.to_owned());
        let extra = job_items.get(node);
        let memo_key = (cfg.memo_key(), group.clone());
        if extra.is_none()
            && let Some(part) = memo.get(&memo_key)
        {
            out.nodes.insert(node.to_owned(), part.clone());
            continue;
        }
        let mut full = RenderedSpec::from_config(cfg);
        if let Some(extra) = extra {
            full = super::with_job_items(&full, extra).0;
        }
        let shared = g.rendering.as_ref().and_then(|r| {
            let spec = out.renderings.get(r)?;
            Some(
                &*keyed
                    .entry(r.clone())
                    .or_insert_with(|| Keyed::of(&spec.rendered)),
            )
        });
        let part = match shared {
            Some(s) if covers(&full, s) => NodePart {
                group,
                own: minus(&full, s),
                whole: false,
            },
            _ => NodePart {
                group,
                own: full,
                whole: true,
            },
        };
        if extra.is_none() {
            memo.insert(memo_key, part.clone());
        }
        out.nodes.insert(node.to_owned(), part);
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
/// `layers` are named on the first part ([`layout`]).
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

/// How a rendering is stored: its own parts (the first names the layers) and its
/// layers, each by name with its parts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Layout {
    pub(crate) parts: Vec<NodeNetworkRenderingSpec>,
    pub(crate) layers: Vec<(String, Vec<NodeNetworkRenderingSpec>)>,
}

/// Rendering `name` as it is stored: the items of each source set of at least
/// `layer_min` bytes in a layer named by its content (the same items in two renderings
/// make one layer), in the order of their sources; the other items, the probes,
/// `rollbackSeconds` and hard-synced tables in its own parts. Every object is at most
/// `max` bytes ([`parts`]). Joined and laid ([`crate::api::Joined::lay`]), it has the
/// rendering's items: the layers' first, each in the order the rendering has them.
pub(crate) fn layout(
    name: &str,
    spec: &NodeNetworkConfigSpec,
    max: usize,
    layer_min: usize,
) -> Layout {
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
    let mut own = RenderedSpec {
        table_hard_sync: spec.rendered.table_hard_sync.clone(),
        ..RenderedSpec::default()
    };
    macro_rules! split {
        ($list:ident) => {
            for s in &spec.rendered.$list {
                match layers.get_mut(&source_key(&s.sources)) {
                    Some(l) => l.$list.push(s.clone()),
                    None => own.$list.push(s.clone()),
                }
            }
        };
    }
    split!(vlans);
    split!(routes);
    split!(addresses);
    split!(rules);
    let layers: Vec<(String, Vec<NodeNetworkRenderingSpec>)> = layers
        .into_values()
        .map(|rendered| {
            let layer = crate::api::layer_address(&rendered);
            let spec = NodeNetworkConfigSpec {
                rendered,
                ..NodeNetworkConfigSpec::default()
            };
            let parts = parts(&layer, &spec, &[], max);
            (layer, parts)
        })
        .collect();
    let names: Vec<String> = layers.iter().map(|(n, _)| n.clone()).collect();
    let own = NodeNetworkConfigSpec {
        rendered: own,
        probes: spec.probes.clone(),
        rollback_seconds: spec.rollback_seconds,
        ..NodeNetworkConfigSpec::default()
    };
    Layout {
        parts: parts(name, &own, &names, max),
        layers,
    }
}

/// The key of a set of sources (`ClusterConfig/default,NodeConfig/edge`): the items of
/// one key over the layer size are a layer ([`layout`]), and a new layer of a key gets a
/// delta from its last one.
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
    /// The prints of a rendering: its items, probes and `rollbackSeconds`.
    pub(crate) fn of(
        rendered: &RenderedSpec,
        probes: &[crate::api::ProbeSpec],
        rollback_seconds: Option<u32>,
    ) -> Self {
        let mut texts: BTreeMap<String, String> = BTreeMap::new();
        let mut add = |kind: &str, item: String, sources: &[SourceRef]| {
            for s in sources {
                let t = texts.entry(format!("{}/{}", s.kind, s.name)).or_default();
                t.push_str(kind);
                t.push_str(&item);
                t.push('\n');
            }
        };
        for s in &rendered.vlans {
            add("vlan", text(s), &s.sources);
        }
        for s in &rendered.routes {
            add("route", text(s), &s.sources);
        }
        for s in &rendered.addresses {
            add("address", text(s), &s.sources);
        }
        for s in &rendered.rules {
            add("rule", text(s), &s.sources);
        }
        let common = serde_json::to_string(&(probes, rollback_seconds, &rendered.table_hard_sync))
            .unwrap_or_default();
        Self {
            common: netpolicy_core::hash::fnv1a(&[&common]),
            policies: texts
                .into_iter()
                .map(|(k, t)| (k, netpolicy_core::hash::fnv1a(&[&t])))
                .collect(),
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

/// A rendering's items as comparable text (sources aside), each with its sources.
#[derive(Debug, Default)]
struct Keyed {
    vlans: BTreeMap<String, Vec<SourceRef>>,
    routes: BTreeMap<String, Vec<SourceRef>>,
    addresses: BTreeMap<String, Vec<SourceRef>>,
    rules: BTreeMap<String, Vec<SourceRef>>,
    tables: Vec<u32>,
}

/// An item as comparable text.
fn text<T: Serialize>(s: &SourcedSpec<T>) -> String {
    serde_json::to_string(&s.item).unwrap_or_default()
}

impl Keyed {
    fn of(r: &RenderedSpec) -> Self {
        fn list<T: Serialize>(l: &[SourcedSpec<T>]) -> BTreeMap<String, Vec<SourceRef>> {
            l.iter().map(|s| (text(s), s.sources.clone())).collect()
        }
        Self {
            vlans: list(&r.vlans),
            routes: list(&r.routes),
            addresses: list(&r.addresses),
            rules: list(&r.rules),
            tables: r.table_hard_sync.clone(),
        }
    }
}

/// Whether `full` has every item of `shared` (sources aside) and the same hard-synced
/// tables.
fn covers(full: &RenderedSpec, shared: &Keyed) -> bool {
    fn has<T: Serialize>(
        full: &[SourcedSpec<T>],
        shared: &BTreeMap<String, Vec<SourceRef>>,
    ) -> bool {
        let have: BTreeSet<String> = full.iter().map(text).collect();
        shared.keys().all(|k| have.contains(k))
    }
    full.table_hard_sync == shared.tables
        && has(&full.vlans, &shared.vlans)
        && has(&full.routes, &shared.routes)
        && has(&full.addresses, &shared.addresses)
        && has(&full.rules, &shared.rules)
}

/// The items of `full` that `shared` does not have as they are there: absent, or with
/// other sources (another job's source joined a policy's item on this node); each with
/// its sources in `full`, which the agent takes over the rendering's.
fn minus(full: &RenderedSpec, shared: &Keyed) -> RenderedSpec {
    fn only<T: Serialize + Clone>(
        full: &[SourcedSpec<T>],
        shared: &BTreeMap<String, Vec<SourceRef>>,
    ) -> Vec<SourcedSpec<T>> {
        full.iter()
            .filter(|s| shared.get(&text(s)) != Some(&s.sources))
            .cloned()
            .collect()
    }
    RenderedSpec {
        vlans: only(&full.vlans, &shared.vlans),
        routes: only(&full.routes, &shared.routes),
        addresses: only(&full.addresses, &shared.addresses),
        rules: only(&full.rules, &shared.rules),
        table_hard_sync: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
