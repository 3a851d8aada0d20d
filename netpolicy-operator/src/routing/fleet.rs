//! The operator's side of shared renderings (issue 68): the NetworkFleet it publishes,
//! from the groups and renderings [`super::shared`] computes, what the fleet said
//! before, and what the agents report. Pure.
//!
//! - A group whose rendering changed starts a rollout to it from the rendering the
//!   group ran (the last one it finished; a rollout cut short starts over from that
//!   one). A group seen for the first time rolls out from what most of its members
//!   report they run (nodes that moved in from other groups), or, when none reports
//!   one, to every member at once.
//! - Waves are cut over the members that run shared objects and opened by
//!   [`netpolicy_core::fleet::advance`] on their reports, within each policy's
//!   `maxUnavailable`; a member whose probes failed halts its policies.
//! - A finished rollout on which every member reports the new rendering forgets the
//!   one it left (which may then be deleted).
//! - A group whose policies conflict (no rendering) keeps its entry: its nodes hold.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use netpolicy_core::fleet::{
    OrderKey, Progress, Report, Rollout, Through, Waves, advance, order_key, plan_waves,
};

use super::{Routing, shared::Shared};
use crate::{
    api::{FleetGroup, FleetPolicy, NetworkFleetSpec, NodeNetworkConfig, NodeNetworkConfigSpec},
    k8s::JobItems,
};

/// What one member of a group that runs a shared object reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reported {
    /// The rendering its applied revision ran.
    pub(crate) applied: Option<String>,
    /// A rendering whose probes failed on it.
    pub(crate) failed: Option<String>,
}

impl Reported {
    /// Its report on `rendering`.
    fn on(&self, rendering: &str) -> Report {
        if self.failed.as_deref() == Some(rendering) {
            Report::Failed
        } else if self.applied.as_deref() == Some(rendering) {
            Report::Applied
        } else {
            Report::Pending
        }
    }
}

/// A group's members that run shared objects, with their reports.
type Members<'a> = Vec<(String, &'a Reported)>;
/// Each member's place in a rollout and its report on the rollout's rendering.
type Keyed = Vec<(OrderKey, Report)>;

/// The NetworkFleet for `shared`: `index` as its policies, each group's rollout moved on
/// from `current` by the reports of its members that run shared objects (`reports`;
/// members absent from it are gated per node), within `budget` (each policy's
/// `maxUnavailable`, resolved).
pub(crate) fn plan(
    shared: &Shared,
    index: Vec<FleetPolicy>,
    current: Option<&NetworkFleetSpec>,
    reports: &BTreeMap<String, Reported>,
    budget: &BTreeMap<String, usize>,
) -> NetworkFleetSpec {
    let before: BTreeMap<&str, Rollout> = current
        .map(|f| {
            f.groups
                .iter()
                .filter_map(|g| Some((g.group.as_str(), g.rollout("").ok()?)))
                .collect()
        })
        .unwrap_or_default();
    // Each group's rollout and its members that run shared objects, with their reports.
    let mut next: BTreeMap<String, (Rollout, Members<'_>)> = BTreeMap::new();
    for (name, group) in &shared.groups {
        let members: Vec<(String, &Reported)> = group
            .members
            .iter()
            .filter_map(|m| reports.get(m).map(|r| (m.clone(), r)))
            .collect();
        let was = before.get(name.as_str());
        let Some(d) = group.rendering.as_deref() else {
            if let Some(r) = was {
                next.insert(name.clone(), (r.clone(), members));
            }
            continue;
        };
        let rollout = match was {
            Some(r) if r.rendering == d => r.clone(),
            Some(r) => start(name, d, Some(stable(r))),
            None => start(name, d, most_run(&members)),
        };
        next.insert(name.clone(), (rollout, members));
    }
    // Waves of the rollouts under way, opened on the reports within the budgets.
    let mut under_way: Vec<(String, Waves, Keyed)> = Vec::new();
    for (name, (r, members)) in &next {
        if r.previous.is_none() || r.rolled_back || r.through == Through::Everything {
            continue;
        }
        let names: Vec<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
        let max = shared.groups[name]
            .policies
            .iter()
            .filter_map(|p| budget.get(p).copied())
            .min()
            .unwrap_or(1);
        let bounds = plan_waves(&r.name, &names, max);
        let open = match &r.through {
            Through::Nothing => 0,
            Through::Key(t) => bounds.partition_point(|b| b <= t),
            Through::Everything => bounds.len(),
        };
        let keyed = members
            .iter()
            .map(|(m, rep)| (order_key(&r.name, m), rep.on(&r.rendering)))
            .collect();
        let waves = Waves {
            rollout: r.clone(),
            bounds,
            open,
        };
        under_way.push((name.clone(), waves, keyed));
    }
    let progress: Vec<Progress<'_, String>> = under_way
        .iter()
        .map(|(name, waves, members)| Progress {
            waves,
            policies: &shared.groups[name].policies,
            members,
        })
        .collect();
    let opened = advance(&progress, budget);
    for ((name, waves, _), open) in under_way.iter().zip(opened) {
        let w = Waves {
            open,
            ..waves.clone()
        };
        if let Some((r, _)) = next.get_mut(name) {
            // Waves over no member (none runs a shared object yet) open at once.
            *r = if w.bounds.is_empty() {
                Rollout {
                    through: Through::Everything,
                    ..w.rollout
                }
            } else {
                w.published()
            };
        }
    }
    // A finished rollout every member reports applied forgets what it left.
    for (r, members) in next.values_mut() {
        let done = r.through == Through::Everything
            && !r.rolled_back
            && members
                .iter()
                .all(|(_, rep)| rep.on(&r.rendering) == Report::Applied);
        if done && r.previous.is_some() {
            r.previous = None;
        }
    }
    NetworkFleetSpec {
        policies: index,
        groups: next
            .values()
            .map(|(r, _)| FleetGroup::from_rollout(r))
            .collect(),
    }
}

/// A new rollout of group `group` to rendering `to` from `from` (none, or `to` itself:
/// every member runs `to` at once).
fn start(group: &str, to: &str, from: Option<String>) -> Rollout {
    let previous = from.filter(|f| f != to);
    Rollout {
        // Named by its group and rendering: each rollout orders its waves anew.
        name: format!("{group}.{to}"),
        group: group.to_owned(),
        rendering: to.to_owned(),
        through: if previous.is_some() {
            Through::Nothing
        } else {
            Through::Everything
        },
        previous,
        rolled_back: false,
    }
}

/// The rendering a group last ran everywhere: the new one of a finished rollout, else
/// the one it left.
fn stable(r: &Rollout) -> String {
    match (&r.previous, &r.through, r.rolled_back) {
        (Some(p), _, true) => p.clone(),
        (Some(p), Through::Nothing | Through::Key(_), false) => p.clone(),
        _ => r.rendering.clone(),
    }
}

/// The rendering most `members` report they run (ties: the first by name).
fn most_run(members: &[(String, &Reported)]) -> Option<String> {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, r) in members {
        if let Some(a) = r.applied.as_deref() {
            *count.entry(a).or_default() += 1;
        }
    }
    count
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(r, _)| r.to_owned())
}

/// One pass's shared objects: the renderings, the fleet, and which nodes run shared
/// objects (each with its own items' spec).
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    /// Groups and renderings.
    pub(crate) shared: Shared,
    /// The fleet to publish.
    pub(crate) fleet: NetworkFleetSpec,
    /// Nodes whose NodeNetworkConfig is shared after this pass, with its spec (their own
    /// items).
    pub(crate) own: BTreeMap<String, NodeNetworkConfigSpec>,
    /// Of those, the nodes the fleet keeps on a rendering their group is leaving (they
    /// wait for their wave).
    pub(crate) waiting: BTreeSet<String>,
    /// Of those, the nodes that report their group's rendering applied.
    pub(crate) on_target: BTreeSet<String>,
}

/// The shared objects of `routing`'s nodes: `current` moved on by the agents' reports
/// (their NodeNetworkConfigs, `existing`). A node's object becomes shared when its agent
/// reads shared renderings, it is not a node of its own ([`super::shared::NodePart::whole`]),
/// its group has a rendering, and either it is shared already or it has settled on
/// exactly what the fleet gives it (so that the move changes nothing on the node).
pub(crate) fn prepare(
    routing: &Routing,
    job_items: &BTreeMap<String, JobItems>,
    index: Vec<FleetPolicy>,
    current: Option<&NetworkFleetSpec>,
    existing: &dyn Fn(&str) -> Option<Arc<NodeNetworkConfig>>,
) -> Prepared {
    let shared = super::shared::shared(routing, job_items);
    let budget: BTreeMap<String, usize> = routing
        .policy_keys()
        .into_iter()
        .map(|k| {
            let max = routing
                .rollout(k)
                .max_unavailable
                .resolve(routing.members(k).len());
            (k.to_owned(), max)
        })
        .collect();
    let mut reports = BTreeMap::new();
    for node in shared.nodes.keys() {
        if let Some(o) = existing(node).filter(|o| o.spec.shared) {
            let st = o.status.clone().unwrap_or_default();
            let r = Reported {
                applied: st.applied_rendering,
                failed: st.failed_rendering,
            };
            reports.insert(node.clone(), r);
        }
    }
    let fleet = plan(&shared, index, current, &reports, &budget);
    let rollouts: BTreeMap<&str, Rollout> = fleet
        .groups
        .iter()
        .filter_map(|g| Some((g.group.as_str(), g.rollout("").ok()?)))
        .collect();
    let mut out = Prepared::default();
    for (node, part) in &shared.nodes {
        let Some(d) = shared.groups[&part.group].rendering.as_deref() else {
            continue;
        };
        let Some(o) = existing(node) else {
            continue;
        };
        let st = o.status.clone().unwrap_or_default();
        let runs = rollouts
            .get(part.group.as_str())
            .and_then(|r| r.rendering_for(&order_key(&r.name, node)));
        if part.whole || !st.shared_renderings || runs.is_none() {
            continue;
        }
        if !o.spec.shared {
            // Settled: applied, probes passed, and what it runs is the rendering the
            // fleet gives it with its own items.
            let state = super::rollout::NodeState::of(Some(&o));
            // (The whole spec's revision last: computing it costs the most.)
            if runs != Some(d)
                || state.in_flight
                || state.degraded
                || full_revision(routing, node, job_items).as_deref()
                    != Some(o.spec.revision.as_str())
            {
                continue;
            }
        }
        let mut spec = super::node_spec(part.own.clone(), Vec::new(), None);
        spec.shared = true;
        out.own.insert(node.clone(), spec);
        if runs != Some(d) {
            out.waiting.insert(node.clone());
        }
        if o.spec.shared && st.applied_rendering.as_deref() == Some(d) {
            out.on_target.insert(node.clone());
        }
    }
    out.shared = shared;
    out.fleet = fleet;
    out
}

/// The revision of the whole per-node spec `node` gets (what a settled node reports
/// applied), with other jobs' items; `None` for a node without a rendered outcome.
fn full_revision(
    routing: &Routing,
    node: &str,
    job_items: &BTreeMap<String, JobItems>,
) -> Option<String> {
    let Some(netpolicy_core::merge::NodeOutcome::Rendered(cfg)) = routing.outcome(node) else {
        return None;
    };
    let mut full = netpolicy_core::render::RenderedSpec::from_config(cfg);
    if let Some(extra) = job_items.get(node) {
        full = super::with_job_items(&full, extra).0;
    }
    let (probes, rollback) = routing.node_probes(node);
    Some(super::node_spec(full, probes, rollback).revision)
}

/// The renderings `fleet` refers to (what must exist; any other may be deleted).
pub(crate) fn referenced(fleet: &NetworkFleetSpec) -> BTreeSet<String> {
    fleet
        .groups
        .iter()
        .flat_map(|g| std::iter::once(g.rendering.clone()).chain(g.previous.clone()))
        .collect()
}

#[cfg(test)]
mod tests;
