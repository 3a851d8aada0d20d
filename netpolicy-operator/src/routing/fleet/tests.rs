use std::collections::BTreeMap;

use netpolicy_core::fleet::order_key;

use super::{Reported, plan, referenced};
use crate::{
    api::NetworkFleetSpec,
    routing::shared::{Group, Shared},
};

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

/// What `node`'s agent runs by `fleet` (as `fleet::choose` finds it for its group).
fn runs(fleet: &NetworkFleetSpec, node: &str) -> Option<String> {
    let r = fleet.groups[0].rollout("g").ok()?;
    r.rendering_for(&order_key(&r.name, node))
        .map(str::to_owned)
}

fn budget(max: usize) -> BTreeMap<String, usize> {
    BTreeMap::from([(CC.to_owned(), max)])
}

/// Steps of the world: the operator plans, then each agent applies what the fleet gives
/// it as `apply` says (`Some(true)`: applies, `Some(false)`: its probes fail, `None`: it
/// lags this step); returns each fleet published with the reports it was planned from.
fn run(
    shared: &Shared,
    mut fleet: NetworkFleetSpec,
    reports: &mut BTreeMap<String, Reported>,
    max: usize,
    steps: usize,
    apply: impl Fn(usize, &str) -> Option<bool>,
) -> Vec<(NetworkFleetSpec, BTreeMap<String, Reported>)> {
    let mut out = Vec::new();
    for step in 0..steps {
        fleet = plan(shared, Vec::new(), Some(&fleet), reports, &budget(max));
        out.push((fleet.clone(), reports.clone()));
        for (node, rep) in reports.iter_mut() {
            let Some(want) = runs(&fleet, node) else {
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
    // Twenty nodes already on r1: the first fleet has nothing to roll out.
    let mut reports = all(20, Some("r1"));
    let first = plan(
        &world(20, Some("r1")),
        Vec::new(),
        None,
        &reports,
        &budget(5),
    );
    let g = &first.groups[0];
    assert_eq!(
        (
            g.rendering.as_str(),
            g.previous.as_deref(),
            g.through.as_deref()
        ),
        ("r1", None, Some("*"))
    );
    // The ClusterConfig changes: r2, five nodes at a time; agents lag (odd nodes apply
    // only on odd steps).
    let shared = world(20, Some("r2"));
    let fleets = run(&shared, first, &mut reports, 5, 40, |step, node| {
        let odd = node.ends_with(['1', '3', '5', '7', '9']);
        (!odd || step % 2 == 1).then_some(true)
    });
    for (f, before) in &fleets {
        // Told to run r2 and not reporting it (yet) when the fleet is published.
        let moving = before
            .iter()
            .filter(|(n, r)| {
                runs(f, n).as_deref() == Some("r2") && r.applied.as_deref() != Some("r2")
            })
            .count();
        assert!(
            moving <= 5,
            "at most five nodes on their way at once: {moving}"
        );
    }
    let last = &fleets.last().unwrap().0;
    assert!(
        reports.values().all(|r| r.applied.as_deref() == Some("r2")),
        "{reports:?}"
    );
    let g = &last.groups[0];
    assert_eq!(
        (g.previous.as_deref(), g.through.as_deref()),
        (None, Some("*")),
        "r1 forgotten"
    );
    // Four waves of five: three keys, then every node.
    let waves: std::collections::BTreeSet<&Option<String>> =
        fleets.iter().map(|(f, _)| &f.groups[0].through).collect();
    assert_eq!(waves.len(), 4, "through moved wave by wave: {waves:?}");
    // Quiet: nothing new, the same fleet.
    let again = plan(&shared, Vec::new(), Some(last), &reports, &budget(5));
    assert_eq!(&again, last);
    assert_eq!(referenced(last), ["r2".to_owned()].into());
}

#[test]
fn a_failed_probe_halts_the_rollout_where_it_stands() {
    let mut reports = all(20, Some("r1"));
    let first = plan(
        &world(20, Some("r1")),
        Vec::new(),
        None,
        &reports,
        &budget(5),
    );
    let shared = world(20, Some("r2"));
    // The first node of the rollout's order fails; every other applies at once.
    let name = "g.r2";
    let mut keys: Vec<_> = (0..20)
        .map(|i| order_key(name, &format!("n{i:02}")))
        .collect();
    keys.sort();
    let failing = keys[0].node.clone();
    let fleets = run(&shared, first, &mut reports, 5, 20, |_, node| {
        Some(node != failing)
    });
    let last = &fleets.last().unwrap().0;
    let on_r2 = reports
        .values()
        .filter(|r| r.applied.as_deref() == Some("r2"))
        .count();
    assert_eq!(on_r2, 4, "the first wave's other four only");
    assert_eq!(reports[&failing].failed.as_deref(), Some("r2"));
    assert_eq!(
        last.groups[0].previous.as_deref(),
        Some("r1"),
        "r1 is kept to run"
    );
    assert_eq!(referenced(last), ["r1".to_owned(), "r2".to_owned()].into());
}

#[test]
fn an_edit_mid_rollout_starts_over_from_what_the_group_last_ran_everywhere() {
    let mut reports = all(20, Some("r1"));
    let first = plan(
        &world(20, Some("r1")),
        Vec::new(),
        None,
        &reports,
        &budget(5),
    );
    let fleets = run(&world(20, Some("r2")), first, &mut reports, 5, 1, |_, _| {
        Some(true)
    });
    let mid = &fleets.last().unwrap().0;
    assert!(
        mid.groups[0].through.as_deref().is_some_and(|t| t != "*"),
        "one wave open"
    );
    let next = plan(
        &world(20, Some("r3")),
        Vec::new(),
        Some(mid),
        &reports,
        &budget(5),
    );
    let g = &next.groups[0];
    assert_eq!(
        (g.rendering.as_str(), g.previous.as_deref()),
        ("r3", Some("r1"))
    );
    // Its first wave opens: the five nodes on r2 count against the budget until they
    // are back... they report r2, not r3: the budget is full.
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
    let f = plan(
        &world(10, Some("r-new")),
        Vec::new(),
        None,
        &reports,
        &budget(2),
    );
    let g = &f.groups[0];
    assert_eq!(
        (g.rendering.as_str(), g.previous.as_deref()),
        ("r-new", Some("r-other"))
    );
    let moving = (0..10)
        .filter(|i| runs(&f, &format!("n{i:02}")).as_deref() == Some("r-new"))
        .count();
    assert_eq!(moving, 2, "one wave of two");
    // A group no node reports on (no agent runs a shared object yet): every member at once.
    let f = plan(
        &world(10, Some("r-new")),
        Vec::new(),
        None,
        &BTreeMap::new(),
        &budget(2),
    );
    assert_eq!(f.groups[0].through.as_deref(), Some("*"));
    // Its policies conflict now: the entry stays as it was.
    let held = plan(&world(10, None), Vec::new(), Some(&f), &reports, &budget(2));
    assert_eq!(held.groups, f.groups);
    // Gone (no member): its entry goes.
    let gone = plan(
        &Shared::default(),
        Vec::new(),
        Some(&f),
        &reports,
        &budget(2),
    );
    assert!(gone.groups.is_empty());
}
