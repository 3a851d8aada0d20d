//! The alert rules (deploy/prometheus-rules.yaml, docs/operate.md) and the Grafana
//! dashboard (charts/netpolicy/files/grafana-dashboard.json) against a real operator's
//! /metrics: a real API server with nodes over three zones, a ClusterConfig rolled out
//! to them, a FloatingIPRange handing out addresses and route reflectors placed, so that
//! the per-policy, per-range, per-zone and per-reflector series exist.
//! - promtool lints the scrape, every metric a rule reads is served, and over this
//!   healthy scrape held for 70 minutes no alert fires;
//! - Debian's Prometheus, as a process, scrapes the operator: every family /metrics
//!   serves is stored with its labels, the rules load, every dashboard query parses and
//!   answers, and the series per object stay bounded.
//!
//! (`tests/real_node.rs` runs the promtool checks over the operator's and the agent's
//! scrapes on a real node.)

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use netpolicy_operator::api::{FloatingIP, NodeNetworkConfig, crds};
use netpolicy_testenv::{ControlPlane, eventually};
use serde_json::{Value, json};

const NODES: usize = 6;
const FIPS: usize = 3;

/// The objects above and an operator on `port`, settled: every FloatingIP addressed,
/// every node's config written, reflectors placed, and the gauges of the pass after.
async fn healthy_operator(cp: &'static ControlPlane) -> (common::Killed, u16, String) {
    let client = cp.client().await;
    let mut kinds = crds();
    kinds.extend(common::calico_crds());
    netpolicy_testenv::install_crds(&client, kinds).await;
    let system = cp.namespace("alerts").await;
    let apps = cp.namespace("apps").await;
    let vip = cp.namespace("kube-vip").await;
    let nodes: Api<Node> = Api::all(client.clone());
    add_nodes(&nodes, 0..NODES).await;
    common::apply(
        &client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
            "metadata": {"name": "default"},
            "spec": {"routes": [{"to": "10.80.0.0/16", "via": "192.0.2.1"}]}
        }),
    )
    .await;
    common::apply(
        &client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
            "metadata": {"name": "pool"},
            "spec": {"cidrs": ["10.81.0.0/28"],
                     "kubeVip": {"publish": true, "namespace": vip, "configMap": "kubevip"}},
        }),
    )
    .await;
    common::apply(
        &client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "RouteReflectorConfig",
            "metadata": {"name": "default"},
            "spec": {"min": 1, "max": 2, "ratio": 0.5, "stepDelaySeconds": 0}
        }),
    )
    .await;
    let fips: Api<FloatingIP> = Api::namespaced(client.clone(), &apps);
    add_fips(&fips, 0..FIPS).await;
    let port = common::free_port();
    let log = cp.dir.join("operator-alerts.log");
    let op = common::operator_on(cp, &system, &log, "info", &format!("127.0.0.1:{port}"));
    eventually("the operator ready", 60, || async {
        matches!(common::http_get(port, "/readyz"), Some((200, _)))
    })
    .await;
    eventually(
        "every FloatingIP addressed, every node's config written",
        60,
        || async {
            let addressed = fips
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .all(|f| f.status.as_ref().is_some_and(|s| s.address.is_some()));
            let nncs = Api::<NodeNetworkConfig>::all(client.clone())
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len();
            addressed && nncs >= NODES
        },
    )
    .await;
    // The gauges are set by passes: the ones after the writes above.
    eventually(
        "the per-policy, per-range and per-zone series",
        60,
        || async {
            let b = body(port);
            b.contains("netpolicy_policy_rollout_halted{policy=\"ClusterConfig/default\"} 0")
                && b.contains(&format!(
                    "netpolicy_fipranges_reserved{{range=\"pool\"}} {FIPS}"
                ))
                && b.contains(&format!(
                    "netpolicy_node_network_configs{{state=\"noAgent\"}} {NODES}"
                ))
                && b.contains("netpolicy_route_reflectors{zone=\"z0\"}")
                && b.contains("netpolicy_route_reflector_transition_in_progress 0")
        },
    )
    .await;
    (op, port, apps)
}

/// Nodes `alerts-<i>` for `range`, Ready, over three zones.
async fn add_nodes(nodes: &Api<Node>, range: std::ops::Range<usize>) {
    for i in range {
        let name = format!("alerts-{i}");
        let labels = json!({"kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("z{}", i % 3)});
        common::ready_node(nodes, &name, labels).await;
    }
}

/// FloatingIPs `ip-<i>` of range `pool` for `range`.
async fn add_fips(fips: &Api<FloatingIP>, range: std::ops::Range<usize>) {
    for i in range {
        let f: FloatingIP = serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
            "metadata": {"name": format!("ip-{i}")},
            "spec": {"range": "pool"}
        }))
        .unwrap();
        fips.create(&PostParams::default(), &f).await.unwrap();
    }
}

fn body(port: u16) -> String {
    common::http_get(port, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn no_alert_fires_over_a_healthy_operators_scrape() {
    let Some(promtool) = common::alerts::promtool() else {
        return;
    };
    let cp = netpolicy_testenv::dedicated();
    let (_op, port, _) = healthy_operator(cp).await;
    let operator = body(port);
    common::alerts::check(
        &promtool,
        &[common::alerts::Scrape {
            job: "netpolicy",
            instance: "operator:8080",
            body: &operator,
        }],
        &[
            (
                "netpolicy_agent_item_errors",
                "an agent's, by reason: tests/real_node.rs scrapes one",
            ),
            (
                "netpolicy_agent_fighting_objects",
                "an agent's (each process serves its own metrics): tests/real_node.rs \
                 scrapes one",
            ),
            (
                "netpolicy_routed_ip_ready",
                "one series per RoutedIP: there is none here",
            ),
        ],
        &cp.dir,
    );
}

/// Series per metric name in the latest scrape of the operator.
async fn series_by_name(prom: &common::alerts::Prometheus) -> BTreeMap<String, f64> {
    prom.query("count by (__name__) ({job=\"netpolicy\"})")
        .await
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["metric"]["__name__"].as_str().unwrap().to_owned(),
                s["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// Panels whose series need objects this cluster has none of (a RoutedIP and its
/// provider, an agent, a halted rollout, a not-ready instance, a failing job): their
/// queries must parse; they answer no data here.
const NO_DATA_HERE: [&str; 5] = [
    "netpolicy_agent_item_errors",
    "netpolicy_routed_ip_ready",
    "netpolicy_routed_ip_provider_errors_total",
    "netpolicy_policy_rollout_halted == 1",
    "netpolicy_ready == 0",
];

#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_stores_every_series_loads_the_rules_and_runs_every_dashboard_query() {
    let Some(bin) = common::alerts::prometheus() else {
        return;
    };
    let cp = netpolicy_testenv::dedicated();
    let (_op, port, apps) = healthy_operator(cp).await;
    let prom = common::alerts::Prometheus::start(
        &bin,
        &[("netpolicy", format!("127.0.0.1:{port}"))],
        &cp.dir,
    )
    .await;
    let started = std::time::Instant::now();
    eventually("Prometheus scraped the operator", 60, || async {
        prom.query("up{job=\"netpolicy\"} == 1")
            .await
            .is_some_and(|r| !r.is_empty())
    })
    .await;
    // Every family the operator serves, stored under its name (a counter with _total,
    // a histogram as _bucket, _sum and _count), with its label names.
    let served = body(port);
    let mut want: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for line in served
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let series = line.rsplit_once(' ').unwrap().0;
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let names = labels
            .trim_end_matches('}')
            .split(',')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_owned()));
        want.entry(name.to_owned()).or_default().extend(names);
    }
    eventually("every served series stored", 30, || async {
        let stored = prom.label_values("__name__").await;
        want.keys().all(|n| stored.contains(n))
    })
    .await;
    for (name, labels) in &want {
        let result = prom.query(name).await.unwrap();
        let got: std::collections::BTreeSet<String> = result
            .iter()
            .flat_map(|s| s["metric"].as_object().unwrap().keys().cloned())
            .collect();
        for l in labels {
            assert!(got.contains(l), "{name}: label {l} not stored ({got:?})");
        }
    }
    // The alert rules load in a real Prometheus, every one healthy.
    let rules = prom.get("/api/v1/rules").await;
    let loaded: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    let expected = std::fs::read_to_string(common::alerts::rules_file())
        .unwrap()
        .matches("- alert: ")
        .count();
    assert_eq!(loaded.len(), expected, "{rules}");
    for r in &loaded {
        assert_eq!(r["health"], "ok", "{r}");
    }
    // Every dashboard query parses and answers; data unless its objects are missing here.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../charts/netpolicy/files/grafana-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    // Queries over rates need two samples in their window: a few scrapes.
    eventually("rates over two scrapes", 30, || async {
        prom.query("rate(netpolicy_reconciles_total[5m])")
            .await
            .is_some_and(|r| !r.is_empty())
    })
    .await;
    let mut answered = 0;
    let mut empty = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let result = prom
                .query(expr)
                .await
                .unwrap_or_else(|| panic!("{expr}: refused"));
            if result.is_empty() {
                assert!(
                    NO_DATA_HERE.iter().any(|m| expr.contains(m)),
                    "panel {:?}: {expr} answers no data",
                    panel["title"]
                );
                empty.push(panel["title"].as_str().unwrap().to_owned());
            } else {
                answered += 1;
            }
        }
    }
    // Bounded: no series per node or FloatingIP. Grown to 15 nodes and 12 FloatingIPs,
    // every family has as many series as before but the per-reflector one (the zones
    // hold more reflectors now: one series each, at most the config's max per zone).
    let before = series_by_name(&prom).await;
    let client = cp.client().await;
    add_nodes(&Api::all(client.clone()), NODES..NODES + 9).await;
    add_fips(&Api::namespaced(client.clone(), &apps), FIPS..FIPS + 9).await;
    let grown = format!(
        "netpolicy_node_network_configs{{state=\"noAgent\"}} == {}",
        NODES + 9
    );
    let claimed = format!("netpolicy_fipranges_reserved == {}", FIPS + 9);
    eventually("the grown cluster scraped", 60, || async {
        for q in [&grown, &claimed] {
            if prom.query(q).await.is_none_or(|r| r.is_empty()) {
                return false;
            }
        }
        true
    })
    .await;
    // Series that left (none should) go stale at the next scrape: two more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = series_by_name(&prom).await;
    for (name, n) in &after {
        if name == "netpolicy_route_reflector_clients" {
            continue;
        }
        assert_eq!(
            before.get(name),
            Some(n),
            "{name}: {n} series at {} nodes and {} FloatingIPs, {:?} at {NODES} and {FIPS}",
            NODES + 9,
            FIPS + 9,
            before.get(name)
        );
    }
    let total = |m: &BTreeMap<String, f64>| m.values().sum::<f64>();
    // The dashboard's picture (docs/operate.md): every panel's series over this run,
    // recorded for scripts/dashboard-png when asked.
    if let Ok(path) = std::env::var("NETPOLICY_DASHBOARD_DATA") {
        let secs = started.elapsed().as_secs() + 1;
        let mut panels = Vec::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            let mut series = Vec::new();
            for target in panel["targets"].as_array().unwrap() {
                for r in prom
                    .query_range(target["expr"].as_str().unwrap(), secs)
                    .await
                {
                    series.push(json!({"metric": r["metric"], "values": r["values"],
                                       "legend": target["legendFormat"]}));
                }
            }
            panels.push(
                json!({"title": panel["title"], "unit": panel["fieldConfig"]["defaults"]["unit"],
                               "series": series}),
            );
        }
        std::fs::write(&path, serde_json::to_string(&panels).unwrap()).unwrap();
        println!("dashboard data over {secs} s written to {path}");
    }
    println!(
        "a real Prometheus (Debian's {}): {} families stored with their labels, {} rules loaded and healthy, {answered} dashboard queries answered, {} parse without data here ({empty:?}); {} series at {NODES} nodes and {FIPS} FloatingIPs, {} at {} and {} (the same but one per reflector placed: {:?} → {:?}); 1 range, 1 policy, 3 zones",
        prom.version().await,
        want.len(),
        loaded.len(),
        empty.len(),
        total(&before),
        total(&after),
        NODES + 9,
        FIPS + 9,
        before.get("netpolicy_route_reflector_clients"),
        after.get("netpolicy_route_reflector_clients")
    );
}
