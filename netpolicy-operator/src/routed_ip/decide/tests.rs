//! The routed-IP decisions, each on its own, and a failover carried out as the
//! controller carries it out (observe, elect, plan, a step at a time with the status
//! following) against the in-process provider: no API server, no binary.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::core::v1::Node,
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::{SignedDuration, Timestamp},
};
use netpolicy_issuers::{
    Candidate, FirewallState, Issuer, PortRule, Step, Tags, memory::MemoryIssuer,
};

use super::*;
use crate::routed_ip::{cooldown, elect};

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn node(name: &str, id: u32, ready: bool, role: &str, created: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"role": role}, "creationTimestamp": created},
        "spec": {"providerID": format!("hcloud://{id}")},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    }))
    .unwrap()
}

fn edge() -> Selector {
    serde_json::from_value::<netpolicy_core::spec::LabelSelector>(
        serde_json::json!({"matchLabels": {"role": "edge"}}),
    )
    .unwrap()
    .validate("spec.nodeSelector")
    .unwrap()
}

fn rip(generation: i64, status: Option<RoutedIPStatus>) -> RoutedIP {
    let mut r: RoutedIP = serde_json::from_value(serde_json::json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "web", "generation": generation},
        "spec": {"issuerRef": {"name": "hetzner"}, "cooldownSeconds": 60}
    }))
    .unwrap();
    r.status = status;
    r
}

fn ports(p: &[u16]) -> BTreeSet<PortRule> {
    p.iter().copied().map(PortRule::tcp).collect()
}

#[test]
fn the_candidates_are_the_selected_nodes_and_only_those_with_an_endpoint_have_one() {
    let nodes = [
        node("a", 1, true, "edge", "2026-01-01T00:00:00Z"),
        node("b", 2, true, "edge", "2026-01-02T00:00:00Z"),
        node("w", 3, true, "worker", "2025-01-01T00:00:00Z"),
    ];
    let all = candidates(&nodes, &edge(), None);
    assert_eq!(
        all.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "an unselected node is never a candidate"
    );
    assert!(all.iter().all(|c| c.has_endpoint && c.selected));
    let serving = BTreeSet::from(["b".to_owned()]);
    let with = candidates(&nodes, &edge(), Some(&serving));
    let has: Vec<(&str, bool)> = with
        .iter()
        .map(|c| (c.name.as_str(), c.has_endpoint))
        .collect();
    assert_eq!(has, [("a", false), ("b", true)]);
    assert_eq!(
        elect(&with, None, &[], 0, 60).map(|c| c.name.as_str()),
        Some("b"),
        "the oldest node without an endpoint is passed over"
    );
}

#[test]
fn settled_only_when_address_holder_firewall_ports_and_ready_all_agree() {
    let now = Time(ts("2026-01-01T00:00:00Z"));
    let b = Candidate::ready("b", "hcloud://2", 2);
    let good = RoutedIPStatus {
        address: Some("192.0.2.10".into()),
        node: Some("b".into()),
        firewall: Some("fw".into()),
        ports: port_status(&ports(&[443])),
        conditions: vec![condition(
            &[],
            conditions::READY,
            true,
            rc::SETTLED,
            String::new(),
            Some(3),
            &now,
        )],
        ..Default::default()
    };
    let fw = Some("fw".to_owned());
    assert!(settled(
        &rip(3, Some(good.clone())),
        Some(&b),
        fw.as_ref(),
        &ports(&[443])
    ));
    assert!(
        !settled(&rip(3, None), Some(&b), fw.as_ref(), &ports(&[443])),
        "no status yet"
    );
    assert!(
        !settled(
            &rip(4, Some(good.clone())),
            Some(&b),
            fw.as_ref(),
            &ports(&[443])
        ),
        "a new generation"
    );
    assert!(
        !settled(
            &rip(3, Some(good.clone())),
            Some(&b),
            fw.as_ref(),
            &ports(&[443, 80])
        ),
        "a port added"
    );
    assert!(
        !settled(&rip(3, Some(good.clone())), Some(&b), None, &ports(&[443])),
        "the firewall dropped"
    );
    let a = Candidate::ready("a", "hcloud://1", 1);
    assert!(
        !settled(
            &rip(3, Some(good.clone())),
            Some(&a),
            fw.as_ref(),
            &ports(&[443])
        ),
        "another node elected"
    );
    assert!(
        !settled(
            &rip(3, Some(good.clone())),
            None,
            fw.as_ref(),
            &ports(&[443])
        ),
        "nobody elected"
    );
    let mut stepping = good.clone();
    stepping.step = Some("assign hcloud://2".into());
    assert!(
        !settled(
            &rip(3, Some(stepping)),
            Some(&b),
            fw.as_ref(),
            &ports(&[443])
        ),
        "a step under way"
    );
    let mut failed_st = good;
    failed_st.conditions = vec![condition(
        &[],
        conditions::READY,
        false,
        rc::PROVIDER_ERROR,
        String::new(),
        Some(3),
        &now,
    )];
    assert!(
        !settled(
            &rip(3, Some(failed_st)),
            Some(&b),
            fw.as_ref(),
            &ports(&[443])
        ),
        "not Ready"
    );
}

#[test]
fn the_providers_address_and_holder_are_the_truth_and_the_node_that_lost_it_cools_down() {
    let now = ts("2026-01-01T00:00:00Z");
    // First sight: the address is recorded, nobody holds it yet.
    let first = follow_provider(&RoutedIPStatus::default(), "192.0.2.10", None, 60, now).unwrap();
    assert_eq!(first.status.address.as_deref(), Some("192.0.2.10"));
    assert_eq!(first.status.node, None);
    assert_eq!(first.corrected, None);
    // What the status already says: nothing to write.
    let known = RoutedIPStatus {
        address: Some("192.0.2.10".into()),
        node: Some("a".into()),
        ..Default::default()
    };
    assert_eq!(
        follow_provider(&known, "192.0.2.10", Some("a"), 60, now),
        None
    );
    assert_eq!(
        follow_provider(&known, "192.0.2.10", None, 60, now),
        None,
        "an unassigned IP keeps the last holder"
    );
    // Killed after the provider moved it to b, before the status said so.
    let f = follow_provider(&known, "192.0.2.10", Some("b"), 60, now).unwrap();
    assert_eq!(f.status.node.as_deref(), Some("b"));
    assert_eq!(
        f.status.cooldown_until,
        BTreeMap::from([("a".to_owned(), "2026-01-01T00:01:00Z".to_owned())])
    );
    assert!(
        f.corrected
            .as_deref()
            .is_some_and(|n| n.contains("on b at the provider, not on a"))
    );
    // Read back, a cools down from the moment it lost the IP: b stays even if a is older.
    let lost = cooldown(&f.status.cooldown_until, 60);
    let nodes = [
        Candidate::ready("a", "hcloud://1", 1),
        Candidate::ready("b", "hcloud://2", 2),
    ];
    assert_eq!(
        elect(&nodes, None, &lost, now.as_second() + 30, 60).map(|c| c.name.as_str()),
        Some("b")
    );
    assert_eq!(
        elect(&nodes, None, &lost, now.as_second() + 61, 60).map(|c| c.name.as_str()),
        Some("a")
    );
}

#[test]
fn an_assign_moves_the_holder_and_cools_down_only_the_node_it_was_taken_from() {
    let now = ts("2026-01-01T00:00:00Z");
    let mut st = RoutedIPStatus::default();
    assert_eq!(
        assigned(&mut st, None, "a", 60, now),
        None,
        "a first assignment is no failover"
    );
    assert!(st.cooldown_until.is_empty());
    assert_eq!(assigned(&mut st, Some("a"), "a", 60, now), None);
    assert_eq!(
        assigned(&mut st, Some("a"), "b", 60, now).as_deref(),
        Some("a")
    );
    assert_eq!(st.node.as_deref(), Some("b"));
    assert_eq!(st.cooldown_until.keys().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn finished_says_settled_or_no_candidate_keeps_the_transition_time_and_drops_cooldowns_that_are_over()
 {
    let t0 = ts("2026-01-01T00:00:00Z");
    let later = t0 + SignedDuration::from_secs(120);
    let mut st = RoutedIPStatus {
        address: Some("192.0.2.10".into()),
        node: Some("b".into()),
        step: Some("removeNode hcloud://1".into()),
        ..Default::default()
    };
    st.cooldown_until
        .insert("a".into(), "2026-01-01T00:01:00Z".into());
    st.cooldown_until
        .insert("c".into(), "2026-01-01T00:05:00Z".into());
    st.cooldown_until.insert("d".into(), "garbage".into());
    let before = vec![condition(
        &[],
        conditions::READY,
        true,
        rc::SETTLED,
        "x".into(),
        Some(1),
        &Time(t0),
    )];
    let done = finished(
        st.clone(),
        &before,
        Some("b"),
        Some("fw".into()),
        &ports(&[443]),
        Some(2),
        later,
    );
    assert_eq!(done.step, None);
    assert_eq!(done.firewall.as_deref(), Some("fw"));
    assert_eq!(done.ports, port_status(&ports(&[443])));
    assert_eq!(
        done.cooldown_until.keys().collect::<Vec<_>>(),
        ["c"],
        "over or unreadable: dropped"
    );
    let ready = &done.conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", rc::SETTLED)
    );
    assert_eq!(ready.message, "192.0.2.10 on b");
    assert_eq!(ready.observed_generation, Some(2));
    assert_eq!(
        ready.last_transition_time,
        Time(t0),
        "still True: the transition time stays"
    );
    let none = finished(st, &before, None, None, &BTreeSet::new(), Some(2), later);
    let ready = &none.conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", rc::NO_CANDIDATE)
    );
    assert_eq!(ready.last_transition_time, Time(later));
    assert_eq!(none.node.as_deref(), Some("b"), "it stays where it is");
}

#[test]
fn a_failure_says_why_in_ready_and_keeps_the_address_holder_and_step() {
    let now = Time(ts("2026-01-01T00:00:00Z"));
    let cur = RoutedIPStatus {
        address: Some("192.0.2.10".into()),
        node: Some("a".into()),
        step: Some("assign hcloud://2".into()),
        ..Default::default()
    };
    let st = failed(
        &cur,
        rc::RATE_LIMITED,
        "429 from the provider".into(),
        Some(5),
        &now,
    );
    assert_eq!(
        (st.address.clone(), st.node.clone(), st.step.clone()),
        (cur.address, cur.node, cur.step)
    );
    assert_eq!(st.conditions.len(), 1);
    assert_eq!(st.conditions[0].status, "False");
    assert_eq!(st.conditions[0].reason, rc::RATE_LIMITED);
    assert_eq!(st.conditions[0].message, "429 from the provider");
}

#[test]
fn an_issuer_check_names_orphans_once_and_a_failed_listing_keeps_what_was_known() {
    let now = Time(ts("2026-01-01T00:00:00Z"));
    let mut issuer: RoutedIPIssuer = serde_json::from_value(serde_json::json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
        "metadata": {"name": "hetzner", "generation": 1},
        "spec": {"memory": {}}
    }))
    .unwrap();
    let ip = |a: &str| IpState {
        address: a.into(),
        assigned_to: None,
    };
    let listed = Ok(vec![
        (ip("192.0.2.10"), "web".to_owned()),
        (ip("192.0.2.11"), "gone".to_owned()),
    ]);
    let live = BTreeSet::from(["web".to_owned()]);
    let first = issuer_check(&issuer, &listed, &live, &[], &now);
    assert_eq!(
        first.orphans,
        Some(vec!["192.0.2.11 (RoutedIP gone)".to_owned()])
    );
    assert!(
        first
            .new_orphans
            .as_deref()
            .is_some_and(|n| n.ends_with("192.0.2.11 (RoutedIP gone)"))
    );
    let kinds: Vec<(&str, &str)> = first
        .status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(kinds, [(conditions::READY, "True"), (rc::ORPHANS, "True")]);
    issuer.status = Some(first.status.clone());
    let again = issuer_check(
        &issuer,
        &listed,
        &live,
        first.orphans.as_deref().unwrap(),
        &now,
    );
    assert_eq!(again.new_orphans, None, "an orphan is told once");
    assert_eq!(
        again.status, first.status,
        "nothing new: the same status (no write)"
    );
    let down = issuer_check(&issuer, &Err("401 Unauthorized".into()), &live, &[], &now);
    assert_eq!(down.orphans, None, "the last orphans are kept");
    let kinds: Vec<(&str, &str)> = down
        .status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(kinds, [(conditions::READY, "False"), (rc::ORPHANS, "True")]);
    assert_eq!(down.status.conditions[0].reason, rc::ISSUER_UNAVAILABLE);
    let none = issuer_check(
        &issuer,
        &Ok(vec![(ip("192.0.2.10"), "web".to_owned())]),
        &live,
        &[],
        &now,
    );
    assert_eq!(none.status.conditions[1].status, "False");
    assert_eq!(none.status.conditions[1].reason, rc::NONE);
}

/// One reconcile's provider part as `Context::drive` and `apply` carry it out (this
/// replays their order of the decisions; the controller's own loop is tested on the real
/// API server in tests/routed_ips.rs): observe, follow the provider, elect, plan, then
/// each step (the status following an `assign`). `kill_after`: that many steps run, then
/// the operator is killed (the status is not finished). Returns the status and the steps
/// that ran.
async fn drive(
    issuer: &MemoryIssuer,
    st: &RoutedIPStatus,
    nodes: &[Node],
    wanted: &BTreeSet<PortRule>,
    now: Timestamp,
    kill_after: Option<usize>,
) -> (RoutedIPStatus, Vec<Step>) {
    let tags = Tags {
        cluster: "c".into(),
        routed_ip: "web".into(),
    };
    let node_of = |p: &str| p.replace("hcloud://", "n");
    let observed = netpolicy_issuers::observe(issuer, &tags, st.address.as_deref(), Some("fw"))
        .await
        .unwrap();
    let holder = observed.ip.assigned_to.as_deref().map(node_of);
    let mut st = match follow_provider(st, &observed.ip.address, holder.as_deref(), 60, now) {
        Some(f) => f.status,
        None => st.clone(),
    };
    let c = candidates(nodes, &edge(), None);
    let lost = cooldown(&st.cooldown_until, 60);
    let elected = elect(&c, holder.as_deref(), &lost, now.as_second(), 60).cloned();
    let steps = netpolicy_issuers::plan(
        &observed,
        &desired(elected.as_ref(), Some("fw".into()), wanted.clone()),
    );
    let mut ran = Vec::new();
    for step in steps.into_iter().take(kill_after.unwrap_or(usize::MAX)) {
        st.step = Some(crate::routed_ip::step_name(&step));
        netpolicy_issuers::execute(issuer, &observed.ip.address, "fw", &step)
            .await
            .unwrap();
        if let Step::Assign(n) = &step {
            assigned(&mut st, holder.as_deref(), &node_of(n), 60, now);
        }
        ran.push(step);
    }
    if kill_after.is_some() {
        return (st, ran);
    }
    let elected = elected.map(|c| c.name);
    (
        finished(
            st,
            &[],
            elected.as_deref(),
            Some("fw".into()),
            wanted,
            Some(1),
            now,
        ),
        ran,
    )
}

#[tokio::test]
async fn a_failover_opens_the_new_node_first_and_an_operator_killed_mid_way_does_only_the_rest() {
    let issuer = MemoryIssuer::new();
    let tags = Tags {
        cluster: "c".into(),
        routed_ip: "web".into(),
    };
    issuer.seed_ip("192.0.2.10", Some("hcloud://1"), tags);
    issuer.create_firewall("fw").await.unwrap();
    issuer.add_port("fw", &PortRule::tcp(80)).await.unwrap();
    issuer.add_node("fw", "hcloud://1").await.unwrap();
    let st = RoutedIPStatus {
        address: Some("192.0.2.10".into()),
        node: Some("n1".into()),
        ..Default::default()
    };
    let now = ts("2026-01-01T00:00:00Z");
    // n1 (the holder) went NotReady; the Service now serves 443 instead of 80.
    let nodes = [
        node("n1", 1, false, "edge", "2025-01-01T00:00:00Z"),
        node("n2", 2, true, "edge", "2025-06-01T00:00:00Z"),
    ];
    let wanted = ports(&[443]);
    // Killed right after the assign.
    let (st, ran) = drive(&issuer, &st, &nodes, &wanted, now, Some(3)).await;
    assert_eq!(
        ran,
        [
            Step::AddPort(PortRule::tcp(443)),
            Step::AddNode("hcloud://2".into()),
            Step::Assign("hcloud://2".into()),
        ],
        "the new port and node are open before the IP moves"
    );
    assert_eq!(
        issuer.ip("192.0.2.10").unwrap().assigned_to.as_deref(),
        Some("hcloud://2")
    );
    assert_eq!(st.node.as_deref(), Some("n2"));
    // The status of the killed pass was never written: the next operator starts from
    // the one before (n1), finds the provider's holder n2, and does only the rest.
    let stale = RoutedIPStatus {
        address: Some("192.0.2.10".into()),
        node: Some("n1".into()),
        ..Default::default()
    };
    let back = [
        node("n1", 1, true, "edge", "2025-01-01T00:00:00Z"),
        node("n2", 2, true, "edge", "2025-06-01T00:00:00Z"),
    ];
    let later = now + SignedDuration::from_secs(5);
    let (done, rest) = drive(&issuer, &stale, &back, &wanted, later, None).await;
    assert_eq!(
        rest,
        [
            Step::RemovePort(PortRule::tcp(80)),
            Step::RemoveNode("hcloud://1".into())
        ],
        "n1 is Ready and older again, but n2 holds the IP and stays while eligible: not moved back"
    );
    assert_eq!(done.node.as_deref(), Some("n2"));
    assert!(done.cooldown_until.contains_key("n1"));
    assert_eq!(done.conditions[0].reason, rc::SETTLED);
    assert_eq!(
        issuer.firewall("fw"),
        Some(FirewallState {
            ports: ports(&[443]),
            nodes: BTreeSet::from(["hcloud://2".to_owned()])
        })
    );
    // Settled: the next pass plans nothing.
    let (_, none) = drive(&issuer, &done, &back, &wanted, later, None).await;
    assert_eq!(none, []);
}
