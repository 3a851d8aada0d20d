//! The operator's side of shared renderings (issue 68): the NetworkRollouts and the
//! NetworkFleet it publishes, from the groups and renderings [`super::shared`]
//! computes, what it published before, and what the agents report. Pure.
//!
//! - The groups a change gives new renderings move in one new rollout (one object,
//!   `rollout-<sequence>`), each from the rendering it last ran everywhere (a rollout
//!   cut short starts over from that one). A group seen for the first time moves from
//!   what most of its members report they run (nodes that moved in from other groups),
//!   or, when none reports one, to every member at once.
//! - Each group's waves are cut over its members that run shared objects, within each
//!   policy's `maxUnavailable` ([`netpolicy_core::fleet::plan_waves_within`]), and
//!   opened by [`netpolicy_core::fleet::advance_in_step`] on their reports: the groups
//!   of one rollout open their next waves together, once each has applied its open
//!   ones, so opening a wave is one write of the rollout (every group's `through`)
//!   whatever its group count; a member whose probes failed halts its policies.
//! - A rollout every wave of which is open and on which every member reports the new
//!   rendering is folded into the fleet (its groups' settled renderings) and deleted;
//!   the renderings it left may then be deleted.
//! - A group whose policies conflict (no rendering) keeps what it has: its nodes hold.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use netpolicy_core::fleet::{
    Member, Progress, Report, Rollout, Through, Waves, advance_in_step, order_key,
    plan_waves_within,
};

use super::{
    Routing,
    shared::{Prints, Shared},
};
use crate::{
    api::{
        FleetGroup, FleetPolicy, NetworkFleetSpec, NetworkRolloutSpec, NodeNetworkConfig,
        NodeNetworkConfigSpec, RolloutGroup,
    },
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

/// The shared objects that say what every group runs: the fleet and the rollouts under
/// way, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Published {
    /// The NetworkFleet.
    pub(crate) fleet: NetworkFleetSpec,
    /// The NetworkRollouts.
    pub(crate) rollouts: BTreeMap<String, NetworkRolloutSpec>,
}

impl Published {
    /// Each group's rollout as the agents read it (the newest rollout naming the group,
    /// else its settled rendering); a rollout whose `through` does not parse is read as
    /// no wave open.
    pub(crate) fn current(&self) -> BTreeMap<String, Rollout> {
        let mut out = BTreeMap::new();
        let mut listed: Vec<(&String, &NetworkRolloutSpec)> = self.rollouts.iter().collect();
        listed.sort_by(|a, b| b.1.sequence.cmp(&a.1.sequence).then_with(|| a.0.cmp(b.0)));
        for (name, spec) in listed {
            for g in &spec.groups {
                out.entry(g.group.clone()).or_insert_with(|| Rollout {
                    name: name.clone(),
                    group: g.group.clone(),
                    rendering: g.rendering.clone(),
                    previous: g.previous.clone(),
                    through: g.through("").unwrap_or(Through::Nothing),
                    rolled_back: spec.rolled_back,
                });
            }
        }
        for r in self.fleet.settled() {
            out.entry(r.group.clone()).or_insert(r);
        }
        out
    }

    /// The renderings it names (what must exist; any other may be deleted).
    pub(crate) fn referenced(&self) -> BTreeSet<String> {
        let settled = self.fleet.groups.iter().map(|g| g.rendering.clone());
        let moved = self
            .rollouts
            .values()
            .flat_map(|r| &r.groups)
            .flat_map(|g| std::iter::once(g.rendering.clone()).chain(g.previous.clone()));
        settled.chain(moved).collect()
    }
}

/// The shared objects for `shared`: `index` as the fleet's policies, the groups with new
/// renderings moved in one new rollout, the rollouts under way moved on by the reports
/// of their members that run shared objects (`reports`; members absent from it are
/// gated per node) within `budget` (each policy's `maxUnavailable`, resolved), and the
/// finished ones folded into the fleet; the agents' report spread for the number of
/// nodes ([`netpolicy_core::fleet::report_spread_ms`]).
pub(crate) fn plan(
    shared: &Shared,
    index: Vec<FleetPolicy>,
    before: &Published,
    reports: &BTreeMap<String, Reported>,
    budget: &BTreeMap<String, usize>,
) -> Published {
    let mut out = before.clone();
    out.fleet.policies = index;
    out.fleet.report_spread_ms = Some(netpolicy_core::fleet::report_spread_ms(shared.nodes.len()));
    // The groups whose rendering changed, each from what it last ran everywhere.
    let was = before.current();
    let mut moves = Vec::new();
    for (name, group) in &shared.groups {
        let Some(d) = group.rendering.as_deref() else {
            continue;
        };
        let from = match was.get(name) {
            Some(r) if r.rendering == d => continue,
            Some(r) => Some(stable(r)),
            None => {
                let members: Vec<&Reported> = group
                    .members
                    .iter()
                    .filter_map(|m| reports.get(m))
                    .collect();
                most_run(&members)
            }
        };
        moves.push(RolloutGroup {
            group: name.clone(),
            rendering: d.to_owned(),
            previous: from.filter(|f| f != d),
            through: None,
        });
    }
    if !moves.is_empty() {
        let sequence = before
            .rollouts
            .values()
            .map(|r| r.sequence)
            .chain([before.fleet.sequence])
            .max()
            .unwrap_or_default()
            + 1;
        let spec = NetworkRolloutSpec {
            sequence,
            groups: moves,
            rolled_back: false,
        };
        out.rollouts.insert(format!("rollout-{sequence}"), spec);
    }
    open_waves(shared, &mut out, reports, budget);
    fold(shared, &mut out, reports);
    // Groups that are gone have nothing to settle.
    out.fleet
        .groups
        .retain(|g| shared.groups.contains_key(&g.group));
    out
}

/// Opens the waves the reports allow: each group's waves are cut over its members that
/// run shared objects (the group is moved by the newest rollout that names it) within
/// its policies' budgets, and opened by [`advance_in_step`] on their reports, every group
/// of every rollout sharing the policies' budgets, the groups of one rollout in step.
fn open_waves(
    shared: &Shared,
    out: &mut Published,
    reports: &BTreeMap<String, Reported>,
    budget: &BTreeMap<String, usize>,
) {
    let current = out.current();
    // (rollout, group, its waves, its members)
    let mut under_way: Vec<(String, String, Waves, Vec<Member<'_, String>>)> = Vec::new();
    for (group, g) in &shared.groups {
        let Some(r) = current.get(group).filter(|r| !r.name.is_empty()) else {
            continue;
        };
        if r.previous.is_none() || r.rolled_back || r.through == Through::Everything {
            continue;
        }
        let listed: Vec<(&str, Report)> = g
            .members
            .iter()
            .filter_map(|m| Some((m.as_str(), reports.get(m)?.on(&r.rendering))))
            .collect();
        let names: Vec<(&str, &[String])> = listed
            .iter()
            .map(|(m, _)| (*m, g.policies.as_slice()))
            .collect();
        let bounds = plan_waves_within(&r.name, &names, budget);
        let open = match &r.through {
            Through::Nothing => 0,
            Through::Key(t) => bounds.partition_point(|b| b <= t),
            Through::Everything => bounds.len(),
        };
        let members = listed
            .iter()
            .map(|(m, report)| Member {
                key: order_key(&r.name, m),
                report: *report,
                policies: g.policies.as_slice(),
            })
            .collect();
        let waves = Waves {
            // (Named by its group, so that `advance` takes groups in a steady order.)
            rollout: Rollout {
                name: group.clone(),
                ..r.clone()
            },
            bounds,
            open,
        };
        under_way.push((r.name.clone(), group.clone(), waves, members));
    }
    let progress: Vec<Progress<'_, String>> = under_way
        .iter()
        .map(|(_, _, waves, members)| Progress { waves, members })
        .collect();
    // The groups of one rollout open their waves together: one write of it a wave.
    let change: Vec<&str> = under_way.iter().map(|(r, ..)| r.as_str()).collect();
    let opened = advance_in_step(&progress, &change, budget);
    for ((rollout, group, waves, _), open) in under_way.iter().zip(opened) {
        // Waves over no member (none runs a shared object yet) open at once.
        let through = if waves.bounds.is_empty() {
            Through::Everything
        } else {
            Waves {
                open,
                ..waves.clone()
            }
            .published()
            .through
        };
        let entry = out
            .rollouts
            .get_mut(rollout)
            .and_then(|r| r.groups.iter_mut().find(|g| &g.group == group));
        if let Some(e) = entry {
            e.through = RolloutGroup::through_text(&through);
        }
    }
    // A group with nothing to keep runs the new rendering at once.
    for spec in out.rollouts.values_mut().filter(|r| !r.rolled_back) {
        for g in spec.groups.iter_mut().filter(|g| g.previous.is_none()) {
            g.through = Some("*".into());
        }
    }
}

/// Each rollout's members (of the groups it is the newest rollout of) that run shared
/// objects, with their report on their group's new rendering.
fn members(
    shared: &Shared,
    published: &Published,
    reports: &BTreeMap<String, Reported>,
) -> BTreeMap<String, Vec<Report>> {
    let current = published.current();
    let mut out: BTreeMap<String, Vec<Report>> = BTreeMap::new();
    for (name, group) in &shared.groups {
        let Some(r) = current.get(name).filter(|r| !r.name.is_empty()) else {
            continue;
        };
        let list = out.entry(r.name.clone()).or_default();
        list.extend(
            group
                .members
                .iter()
                .filter_map(|m| Some(reports.get(m)?.on(&r.rendering))),
        );
    }
    out
}

/// Folds the finished rollouts into the fleet and drops them: every wave open and
/// every member reporting the new rendering (a rollout that is the newest of no group
/// any more is dropped as it is).
fn fold(shared: &Shared, out: &mut Published, reports: &BTreeMap<String, Reported>) {
    let members = members(shared, out, reports);
    let current = out.current();
    let mut done = Vec::new();
    for (name, spec) in &out.rollouts {
        let newest: Vec<&RolloutGroup> = spec
            .groups
            .iter()
            .filter(|g| current.get(&g.group).is_some_and(|r| &r.name == name))
            .collect();
        let finished = !spec.rolled_back
            && newest.iter().all(|g| g.through.as_deref() == Some("*"))
            && members
                .get(name)
                .is_none_or(|m| m.iter().all(|r| *r == Report::Applied));
        if newest.is_empty() || finished {
            let settled = newest.into_iter().filter(|_| finished).map(|g| FleetGroup {
                group: g.group.clone(),
                rendering: g.rendering.clone(),
            });
            done.push((name.clone(), spec.sequence, settled.collect::<Vec<_>>()));
        }
    }
    for (name, sequence, settled) in done {
        out.rollouts.remove(&name);
        for g in settled {
            out.fleet.groups.retain(|s| s.group != g.group);
            out.fleet.groups.push(g);
        }
        out.fleet.sequence = out.fleet.sequence.max(sequence);
    }
    out.fleet.groups.sort_by(|a, b| a.group.cmp(&b.group));
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
fn most_run(members: &[&Reported]) -> Option<String> {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for r in members {
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
    /// Groups and renderings ([`super::shared::shared`] of the same routing and job
    /// items: the caller keeps it while they do not change).
    pub(crate) shared: Arc<Shared>,
    /// The fleet and the rollouts to publish.
    pub(crate) published: Published,
    /// Nodes whose NodeNetworkConfig is shared after this pass, with its spec (their own
    /// items; nodes with none share one).
    pub(crate) own: BTreeMap<String, Arc<NodeNetworkConfigSpec>>,
    /// Of those, the nodes the fleet keeps on a rendering their group is leaving (they
    /// wait for their wave).
    pub(crate) waiting: BTreeSet<String>,
    /// Of those, the nodes that report their group's rendering applied.
    pub(crate) on_target: BTreeSet<String>,
    /// Of those, the nodes that report another rendering applied, with the policies of
    /// their group whose items it has as the group's rendering has them
    /// ([`Prints::same_for`]): for those policies the node is applied (a change of one
    /// policy moves only its own progress). One set per group and rendering, shared by
    /// its nodes (10,000 nodes' own copies were 5.5 MB of the operator's heap).
    pub(crate) steady: BTreeMap<String, super::status::Policies>,
}

/// What a routing pass rendered: the engine, other jobs' items on each node, and the
/// groups and renderings of both ([`super::shared::shared`], which the caller keeps
/// while they do not change).
pub(crate) struct Rendered<'a> {
    pub(crate) routing: &'a Routing,
    pub(crate) job_items: &'a BTreeMap<String, JobItems>,
    pub(crate) shared: Arc<Shared>,
}

/// The prints of the renderings nodes run and go to, by name (kept across passes:
/// renderings never change; one no node runs or goes to is dropped).
pub(crate) type PrintCache = BTreeMap<String, Prints>;

/// The shared objects of `routing`'s nodes: `current` moved on by the agents' reports
/// (their NodeNetworkConfigs, `existing`). A node's object becomes shared when its agent
/// reads shared renderings, it is not a node of its own ([`super::shared::NodePart::whole`]),
/// its group has a rendering, and either it is shared already or it has settled on
/// exactly what the fleet gives it (so that the move changes nothing on the node).
/// With `fresh_shared` (every agent that reported reads shared renderings:
/// [`agents_read_shared`]), a node without an object yet starts on a shared one when
/// its group is settled: one write and no whole copy for a node that joins.
pub(crate) fn prepare(
    rendered: Rendered<'_>,
    index: Vec<FleetPolicy>,
    before: &Published,
    existing: &dyn Fn(&str) -> Option<Arc<NodeNetworkConfig>>,
    fresh_shared: bool,
    prints: &mut PrintCache,
) -> Prepared {
    let Rendered {
        routing,
        job_items,
        shared,
    } = rendered;
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
            let st = o.status.as_ref();
            let r = Reported {
                applied: st.and_then(|s| s.applied_rendering.clone()),
                failed: st.and_then(|s| s.failed_rendering.clone()),
            };
            reports.insert(node.clone(), r);
        }
    }
    let published = plan(&shared, index, before, &reports, &budget);
    // Every rendering's prints while it is a target: kept for as long as nodes run it.
    let mut keep = std::mem::take(prints);
    for (name, s) in &shared.renderings {
        keep.entry(name.clone()).or_insert_with(|| s.prints.clone());
    }
    let rollouts = published.current();
    let mut out = Prepared::default();
    let mut steady: BTreeMap<(&str, String), super::status::Policies> = BTreeMap::new();
    let mut no_own_items = None;
    let no_status = crate::api::NodeNetworkConfigStatus::default();
    for (node, part) in &shared.nodes {
        let Some(d) = shared.groups[&*part.group].rendering.as_deref() else {
            continue;
        };
        let runs = rollouts
            .get(&*part.group)
            .and_then(|r| r.rendering_for(&order_key(&r.name, node)));
        let Some(o) = existing(node) else {
            // A node that joins: shared from its first object when its agent will read
            // it and its group is settled (else whole, as a new node always gets its
            // config at once, and moved later).
            if fresh_shared && !part.whole && runs == Some(d) {
                out.own
                    .insert(node.clone(), shared_spec(&part.own, &mut no_own_items));
            }
            continue;
        };
        let st = o.status.as_ref().unwrap_or(&no_status);
        // A shared object no agent reported on yet (a node that joined) stays shared:
        // an agent that does not read it reports without `sharedRenderings`.
        let reads_shared = st.shared_renderings
            || (o.spec.shared && !super::rollout::NodeState::of(Some(&o)).has_agent);
        if part.whole || !reads_shared || runs.is_none() {
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
        out.own
            .insert(node.clone(), shared_spec(&part.own, &mut no_own_items));
        if runs != Some(d) {
            out.waiting.insert(node.clone());
        }
        match st.applied_rendering.as_deref() {
            Some(a) if o.spec.shared && a == d => {
                out.on_target.insert(node.clone());
            }
            Some(a) if o.spec.shared => {
                let key = (&*part.group, a.to_owned());
                let same = match steady.get(&key) {
                    Some(same) => Arc::clone(same),
                    None => {
                        let same = Arc::new(steady_policies(&shared, &part.group, a, d, &keep));
                        steady.insert(key, Arc::clone(&same));
                        same
                    }
                };
                out.steady.insert(node.clone(), same);
            }
            _ => {}
        }
    }
    // Renderings no node runs or goes to any more are forgotten.
    keep.retain(|name, _| {
        shared.renderings.contains_key(name)
            || reports.values().any(|r| r.applied.as_deref() == Some(name))
    });
    *prints = keep;
    out.shared = shared;
    out.published = published;
    out
}

/// The spec of a shared object with `own` items. Most nodes have none: their spec is
/// made once a pass (in `empty`) and shared, not made, hashed and held 10,000 times.
fn shared_spec(
    own: &netpolicy_core::render::RenderedSpec,
    empty: &mut Option<Arc<NodeNetworkConfigSpec>>,
) -> Arc<NodeNetworkConfigSpec> {
    let make = || {
        let mut spec = super::node_spec(own.clone(), Vec::new(), None);
        spec.shared = true;
        Arc::new(spec)
    };
    if *own == netpolicy_core::render::RenderedSpec::default() {
        Arc::clone(empty.get_or_insert_with(make))
    } else {
        make()
    }
}

/// Whether every agent that reported on its node object (`objects`) reads shared
/// renderings (`status.sharedRenderings`): then a node that joins runs the same agent
/// and can start on a shared object. An older agent anywhere (an upgrade rolling
/// through the agents' DaemonSet) keeps new nodes on whole objects until it is gone.
pub(crate) fn agents_read_shared<'a>(
    objects: impl IntoIterator<Item = &'a NodeNetworkConfig>,
) -> bool {
    objects.into_iter().all(|o| {
        !super::rollout::NodeState::of(Some(o)).has_agent
            || o.status.as_ref().is_some_and(|s| s.shared_renderings)
    })
}

/// The policies of `group` whose items rendering `applied` has as `target` has them.
/// Prints are made while a rendering is a target and kept while a node runs it; a
/// rendering this operator process never made (an earlier process rolled it out) has
/// none: its nodes count for no policy until they run their target, as they did
/// without prints (conservative; nothing is read to find out).
fn steady_policies(
    shared: &Shared,
    group: &str,
    applied: &str,
    target: &str,
    prints: &PrintCache,
) -> BTreeSet<String> {
    let (Some(a), Some(t)) = (prints.get(applied), prints.get(target)) else {
        return BTreeSet::new();
    };
    shared.groups.get(group).map_or_else(BTreeSet::new, |g| {
        g.policies
            .iter()
            .filter(|p| a.same_for(t, p))
            .cloned()
            .collect()
    })
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

#[cfg(test)]
mod tests;
