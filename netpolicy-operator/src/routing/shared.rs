//! Shared renderings (issue 68; docs/architecture.md, node agent model): what the
//! routing job's per-node specs become when nodes selected by the same policies share
//! one rendering. Pure. The controller still writes one NodeNetworkConfig per node;
//! this is the computation the shared objects will be written from, held to that
//! per-node spec by its tests: for every node, its group's rendering and its own items
//! are exactly the items of the spec it gets today.
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
    render::{RenderedSpec, SourcedSpec},
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
        let mut full = RenderedSpec::from_config(cfg);
        if let Some(extra) = job_items.get(node) {
            full = super::with_job_items(&full, extra).0;
        }
        let shared = g
            .rendering
            .as_ref()
            .and_then(|r| out.renderings.get(r))
            .map(|s| &s.rendered);
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
pub(crate) fn parts(
    name: &str,
    spec: &NodeNetworkConfigSpec,
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

/// The object name of part `part` of `parts` of rendering `name`: the rendering's own
/// name when it has one part, `<name>-<part>` otherwise.
pub(crate) fn part_name(name: &str, part: u32, parts: u32) -> String {
    if parts <= 1 {
        name.to_owned()
    } else {
        format!("{name}-{part}")
    }
}

/// A spec's canonical text (what its rendering is named by).
pub(crate) fn canonical(spec: &NodeNetworkConfigSpec) -> String {
    serde_json::to_string(spec).unwrap_or_default()
}

/// The items of a list, without their sources, as comparable text.
fn keys<T: Serialize>(list: &[SourcedSpec<T>]) -> BTreeSet<String> {
    list.iter()
        .map(|s| serde_json::to_string(&s.item).unwrap_or_default())
        .collect()
}

/// Whether `full` has every item of `shared` (sources aside) and the same hard-synced
/// tables.
fn covers(full: &RenderedSpec, shared: &RenderedSpec) -> bool {
    keys(&shared.vlans).is_subset(&keys(&full.vlans))
        && keys(&shared.routes).is_subset(&keys(&full.routes))
        && keys(&shared.addresses).is_subset(&keys(&full.addresses))
        && keys(&shared.rules).is_subset(&keys(&full.rules))
        && full.table_hard_sync == shared.table_hard_sync
}

/// The items of `full` that `shared` does not have as they are there: absent, or with
/// other sources (another job's source joined a policy's item on this node); each with
/// its sources in `full`, which the agent takes over the rendering's.
fn minus(full: &RenderedSpec, shared: &RenderedSpec) -> RenderedSpec {
    fn only<T: Serialize + Clone>(
        full: &[SourcedSpec<T>],
        shared: &[SourcedSpec<T>],
    ) -> Vec<SourcedSpec<T>> {
        let text = |s: &SourcedSpec<T>| serde_json::to_string(&s.item).unwrap_or_default();
        let have: BTreeMap<String, &SourcedSpec<T>> = shared.iter().map(|s| (text(s), s)).collect();
        full.iter()
            .filter(|s| have.get(&text(s)).is_none_or(|h| h.sources != s.sources))
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
