use std::collections::BTreeMap;

use netpolicy_core::fleet::order_key;

use super::{Published, Reported, plan};
use crate::routing::shared::{Group, Shared};

const CC: &str = "ClusterConfig/default";

/// One group `g` of `n` nodes selected by the ClusterConfig, running `rendering`.
fn world(n: usize, rendering: Option<&str>) -> Shared {
    let mut s = Shared::default();
    s.groups.insert(
        "g".into(),
        Group {
            policies: vec![CC.into()],
            rendering: rendering.map(str::to_owned),
            members: (0..n).map(|i| format!("n{i:02}")).collect(),
        },
    );
    s
}

fn all(n: usize, applied: Option<&str>) -> BTreeMap<String, Reported> {
    (0..n)
        .map(|i| {
            let r = Reported {
                applied: applied.map(str::to_owned),
                failed: None,
            };
            (format!("n{i:02}"), r)
        })
        .collect()
}

/// What `node` of group `group` runs by `p` (as `fleet::choose` finds it for its group).
fn runs_in(p: &Published, group: &str, node: &str) -> Option<String> {
    let r = p.current().remove(group)?;
    r.rendering_for(&order_key(&r.name, node))
        .map(str::to_owned)
}

fn runs(p: &Published, node: &str) -> Option<String> {
    runs_in(p, "g", node)
}

fn budget(max: usize) -> BTreeMap<String, usize> {
    BTreeMap::from([(CC.to_owned(), max)])
}

/// The one rollout under way.
fn only(p: &Published) -> &crate::api::NetworkRolloutSpec {
    assert_eq!(p.rollouts.len(), 1, "{p:?}");
    p.rollouts.values().next().unwrap()
}

/// Steps of the world: the operator plans, then each agent applies what it is given as
/// `apply` says (`Some(true)`: applies, `Some(false)`: its probes fail, `None`: it lags
/// this step); returns each publication with the reports it was planned from.
fn run(
    shared: &Shared,
    mut p: Published,
    reports: &mut BTreeMap<String, Reported>,
    budget: &BTreeMap<String, usize>,
    steps: usize,
    apply: impl Fn(usize, &str) -> Option<bool>,
) -> Vec<(Published, BTreeMap<String, Reported>)> {
    let mut out = Vec::new();
    for step in 0..steps {
        p = plan(shared, Vec::new(), &p, reports, budget);
        out.push((p.clone(), reports.clone()));
        for (node, rep) in reports.iter_mut() {
            let group = shared
                .groups
                .iter()
                .find(|(_, g)| g.members.contains(node))
                .map(|(n, _)| n.clone())
                .unwrap_or_default();
            let Some(want) = runs_in(&p, &group, node) else {
                continue;
            };
            match apply(step, node) {
                // Applies it (probes pass).
                Some(true) if rep.applied.as_deref() != Some(&want) => rep.applied = Some(want),
                // Its probes fail: back on what it ran, the rendering reported failed.
                Some(false) if rep.applied.as_deref() != Some(&want) => rep.failed = Some(want),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn a_first_fleet_runs_what_the_nodes_run_and_an_edit_rolls_out_in_waves_within_the_budget() {
    // Twenty nodes already on r1: nothing to roll out, r1 is settled at once.
    let mut reports = all(20, Some("r1"));
    let first = plan(
        &world(20, Some("r1")),
        Vec::new(),
        &Published::default(),
        &reports,
        &budget(5),
    );
    assert!(first.rollouts.is_empty(), "{first:?}");
    assert_eq!(first.fleet.groups[0].rendering, "r1");
    assert_eq!(first.fleet.sequence, 1);
    assert_eq!(
        first.fleet.report_spread_ms,
        Some(500),
        "the agents' report spread for 20 nodes"
    );
    // The ClusterConfig changes: r2, five nodes at a time; agents lag (odd nodes apply
    // only on odd steps).
    let shared = world(20, Some("r2"));
    let steps = run(
        &shared,
        first,
        &mut reports,
        &budget(5),
        40,
        |step, node| {
            let odd = node.ends_with(['1', '3', '5', '7', '9']);
            (!odd || step % 2 == 1).then_some(true)
        },
    );
    for (p, before) in &steps {
        // Told to run r2 and not reporting it (yet) when it is published.
        let moving = before
            .iter()
            .filter(|(n, r)| {
                runs(p, n).as_deref() == Some("r2") && r.applied.as_deref() != Some("r2")
            })
            .count();
        assert!(
            moving <= 5,
            "at most five nodes on their way at once: {moving}"
        );
        // Every step is one rollout (rollout-2) or none: the fleet keeps r1 until it
        // is folded in.
        for (name, r) in &p.rollouts {
            assert_eq!((name.as_str(), r.sequence), ("rollout-2", 2));
        }
    }
    let last = &steps.last().unwrap().0;
    assert!(
        reports.values().all(|r| r.applied.as_deref() == Some("r2")),
        "{reports:?}"
    );
    assert!(last.rollouts.is_empty(), "folded in");
    assert_eq!(
        (last.fleet.groups[0].rendering.as_str(), last.fleet.sequence),
        ("r2", 2)
    );
    // Four waves of five: three keys, then every node; then folded.
    let through: std::collections::BTreeSet<Option<String>> = steps
        .iter()
        .filter_map(|(p, _)| {
            p.rollouts
                .values()
                .next()
                .map(|r| r.groups[0].through.clone())
        })
        .collect();
    assert_eq!(through.len(), 4, "through moved wave by wave: {through:?}");
    // Quiet: nothing new, the same objects.
    let again = plan(&shared, Vec::new(), last, &reports, &budget(5));
    assert_eq!(&again, last);
    assert_eq!(last.referenced(), ["r2".to_owned()].into());
}

#[test]
fn one_change_over_many_groups_is_one_rollout_and_one_write_a_wave() {
    // Ten groups of ten under the ClusterConfig, each with a NodeConfig of its own
    // (maxUnavailable 1 each), the ClusterConfig's budget 10.
    let mut shared = Shared::default();
    let mut budget = budget(10);
    for g in 0..10 {
        let nc = format!("NodeConfig/nc{g}");
        budget.insert(nc.clone(), 1);
        shared.groups.insert(
            format!("g{g}"),
            Group {
                policies: vec![CC.into(), nc],
                rendering: Some(format!("a{g}")),
                members: (0..10).map(|i| format!("n{g}-{i}")).collect(),
            },
        );
    }
    let mut reports: BTreeMap<String, Reported> = shared
        .groups
        .values()
        .flat_map(|g| {
            g.members.iter().map(move |m| {
                let r = Reported {
                    applied: g.rendering.clone(),
                    failed: None,
                };
                (m.clone(), r)
            })
        })
        .collect();
    let first = plan(
        &shared,
        Vec::new(),
        &Published::default(),
        &reports,
        &budget,
    );
    for g in shared.groups.values_mut() {
        g.rendering = g.rendering.as_ref().map(|r| r.replace('a', "b"));
    }
    let steps = run(&shared, first.clone(), &mut reports, &budget, 60, |_, _| {
        Some(true)
    });
    // One rollout, whatever the number of groups; one `through` a wave.
    let names: std::collections::BTreeSet<&String> =
        steps.iter().flat_map(|(p, _)| p.rollouts.keys()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let mut writes = 0;
    let mut prev: Option<&Published> = Some(&first);
    for (p, before) in &steps {
        // Every policy within its budget.
        for (policy, max) in &budget {
            let down = shared
                .groups
                .iter()
                .filter(|(_, g)| g.policies.contains(policy))
                .flat_map(|(n, g)| g.members.iter().map(move |m| (n, m)))
                .filter(|(n, m)| {
                    let want = runs_in(p, n, m);
                    want.as_deref() != before[*m].applied.as_deref()
                })
                .count();
            assert!(down <= *max, "{policy}: {down} moving, max {max}");
        }
        if let Some(q) = prev {
            writes += usize::from(q.fleet != p.fleet)
                + p.rollouts
                    .iter()
                    .filter(|(n, r)| q.rollouts.get(*n) != Some(r))
                    .count()
                + q.rollouts
                    .keys()
                    .filter(|n| !p.rollouts.contains_key(*n))
                    .count();
        }
        prev = Some(p);
    }
    assert!(
        reports
            .values()
            .all(|r| r.applied.as_deref().is_some_and(|a| a.starts_with('b')))
    );
    // Ten waves in every group at once (each NodeConfig's budget is 1, the
    // ClusterConfig's 10): one create (with the first waves open), nine writes that
    // open the next wave of every group, the fleet, the delete.
    assert_eq!(writes, 12, "writes");
}

#[test]
fn a_failed_probe_halts_the_rollout_where_it_stands() {
    let mut reports = all(20, Some("r1"));
    let first = plan(
        &world(20, Some("r1")),
        Vec::new(),
        &Published::default(),
        &reports,
        &budget(5),
    );
    let shared = world(20, Some("r2"));
    // The first node of the rollout's order fails; every other applies at once.
    let mut keys: Vec<_> = (0..20)
        .map(|i| order_key("rollout-2", &format!("n{i:02}")))
        .collect();
    keys.sort();
    let failing = keys[0].node.clone();
    let steps = run(&shared, first, &mut reports, &budget(5), 20, |_, node| {
        Some(node != failing)
    });
    let last = &steps.last().unwrap().0;
    let on_r2 = reports
        .values()
        .filter(|r| r.applied.as_deref() == Some("r2"))
        .count();
    assert_eq!(on_r2, 4, "the first wave's other four only");
    assert_eq!(reports[&failing].failed.as_deref(), Some("r2"));
    assert_eq!(
        only(last).groups[0].previous.as_deref(),
        Some("r1"),
        "r1 is kept to run"
    );
    assert_eq!(last.referenced(), ["r1".to_owned(), "r2".to_owned()].into());
}

#[test]
fn an_edit_mid_rollout_starts_over_from_what_the_group_last_ran_everywhere() {
    let mut reports = all(20, Some("r1"));
    let first = plan(
        &world(20, Some("r1")),
        Vec::new(),
        &Published::default(),
        &reports,
        &budget(5),
    );
    let steps = run(
        &world(20, Some("r2")),
        first,
        &mut reports,
        &budget(5),
        1,
        |_, _| Some(true),
    );
    let mid = &steps.last().unwrap().0;
    assert!(
        only(mid).groups[0]
            .through
            .as_deref()
            .is_some_and(|t| t != "*"),
        "one wave open"
    );
    let next = plan(
        &world(20, Some("r3")),
        Vec::new(),
        mid,
        &reports,
        &budget(5),
    );
    // The new rollout (rollout-3) decides for the group; rollout-2 moves no group any
    // more and goes.
    let r = only(&next);
    assert_eq!(r.sequence, 3);
    let g = &r.groups[0];
    assert_eq!(
        (g.rendering.as_str(), g.previous.as_deref()),
        ("r3", Some("r1"))
    );
    // Its first wave: the five nodes on r2 count against the budget until they are
    // back... they report r2, not r3: the budget is full.
    let on_r3 = (0..20)
        .filter(|i| runs(&next, &format!("n{i:02}")).as_deref() == Some("r3"))
        .count();
    assert!(on_r3 <= 5, "{on_r3}");
}

#[test]
fn a_new_group_rolls_out_from_what_its_members_ran_and_a_held_group_keeps_its_entry() {
    // Nodes that moved in from another group report its rendering.
    let mut reports = all(10, Some("r-other"));
    reports.get_mut("n00").unwrap().applied = None;
    let p = plan(
        &world(10, Some("r-new")),
        Vec::new(),
        &Published::default(),
        &reports,
        &budget(2),
    );
    let g = &only(&p).groups[0];
    assert_eq!(
        (g.rendering.as_str(), g.previous.as_deref()),
        ("r-new", Some("r-other"))
    );
    let moving = (0..10)
        .filter(|i| runs(&p, &format!("n{i:02}")).as_deref() == Some("r-new"))
        .count();
    assert_eq!(moving, 2, "one wave of two");
    // A group no node reports on (no agent runs a shared object yet): every member at
    // once, settled in the fleet without a rollout.
    let p = plan(
        &world(10, Some("r-new")),
        Vec::new(),
        &Published::default(),
        &BTreeMap::new(),
        &budget(2),
    );
    assert!(p.rollouts.is_empty());
    assert_eq!(p.fleet.groups[0].rendering, "r-new");
    // Its policies conflict now: the entry stays as it was.
    let held = plan(&world(10, None), Vec::new(), &p, &reports, &budget(2));
    assert_eq!(held, p);
    // Gone (no member): its entry goes.
    let gone = plan(&Shared::default(), Vec::new(), &p, &reports, &budget(2));
    assert!(gone.fleet.groups.is_empty() && gone.rollouts.is_empty());
}

/// A node object with `status` (JSON), as the cache holds it.
fn object(name: &str, status: serde_json::Value) -> crate::api::NodeNetworkConfig {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
        "metadata": {"name": name},
        "spec": {"revision": "r1", "rendered": {}},
        "status": status,
    }))
    .unwrap()
}

#[test]
fn new_nodes_start_shared_only_while_every_reporting_agent_reads_shared_renderings() {
    use super::agents_read_shared;
    let new = object(
        "a",
        serde_json::json!({"appliedRevision": "r1", "sharedRenderings": true}),
    );
    let no_agent = object("b", serde_json::json!({}));
    let older = object("c", serde_json::json!({"appliedRevision": "r1"}));
    let older_failed = object("d", serde_json::json!({"failedRevision": "r1"}));
    assert!(agents_read_shared([]), "no agent yet: a fresh install");
    assert!(agents_read_shared([&new, &no_agent]));
    assert!(!agents_read_shared([&new, &older]));
    assert!(!agents_read_shared([&no_agent, &older_failed]));
}
