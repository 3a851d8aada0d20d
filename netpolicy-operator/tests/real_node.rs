//! The product as deployed: a real one-node Kubernetes cluster (`scripts/node-cluster`:
//! kubelet, containerd, kube-proxy, controller manager, scheduler; the node's host
//! network a network namespace of its own), netpolicy's image imported into containerd,
//! and the chart installed, upgraded and uninstalled with `helm` exactly as a user does.
//! The operator and the agent run as pods: the chart's ServiceAccounts, RBAC,
//! securityContexts, hostNetwork, hostPath state, probes and leader election are the
//! ones under test.
//!
//! One cluster, one test, in the order a platform team meets the product: install,
//! routing, the other jobs, the leader killed, an upgrade, an uninstall (with and
//! without node cleanup), and RBAC as deployed (every request the pods made, from the
//! API server's audit log, beside what the chart grants).
//!
//! Run by `scripts/test` after it built the image (`NETPOLICY_NODE_IMAGE`):
//! `cargo test -p netpolicy-operator --test integration -- --ignored --nocapture real_node::`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        apps::v1::{DaemonSet, Deployment},
        coordination::v1::Lease,
        core::v1::{ConfigMap, Node, Pod},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams},
    core::GroupVersionKind,
};
use netpolicy_testenv::{
    cloud,
    node::{HOST_IP, NETNS, NODE, NODE_IP, NodeCluster},
};
use serde_json::{Value, json};

const RELEASE_NS: &str = "netpolicy-system";
const OPERATOR: &str = "netpolicy-operator";
const AGENT: &str = "netpolicy-agent";
/// Where the test's own objects live (FloatingIPs, the cloud token, the Trench).
const APP_NS: &str = "e2e";

fn chart() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/netpolicy")
        .display()
        .to_string()
}

fn app_version() -> String {
    let chart = std::fs::read_to_string(format!("{}/Chart.yaml", chart())).unwrap();
    chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion: "))
        .unwrap()
        .trim_matches('"')
        .to_owned()
}

/// Waits until `f` gives `Some` (see [`netpolicy_testenv::eventually_some`]).
use netpolicy_testenv::eventually_some as until;

use common::apply;

/// The logs of every pod of the release (what the kubelet kept), for failure messages.
fn pod_logs(cluster: &NodeCluster) -> String {
    cluster
        .run(&[
            "kubectl",
            "-n",
            RELEASE_NS,
            "logs",
            "--all-containers",
            "--prefix",
            "--tail=40",
            "-l",
            "app.kubernetes.io/name=netpolicy",
        ])
        .unwrap_or_else(|e| e)
}

fn helm(cluster: &NodeCluster, args: &[&str]) {
    let t = Instant::now();
    let mut all = vec!["helm"];
    all.extend_from_slice(args);
    if let Err(e) = cluster.run(&all) {
        panic!(
            "{e}\npods:\n{}\nlogs:\n{}",
            cluster
                .run(&["kubectl", "get", "pods", "-A", "-o", "wide"])
                .unwrap_or_default(),
            pod_logs(cluster)
        );
    }
    eprintln!("  helm {}: {:.1} s", args[0], t.elapsed().as_secs_f64());
}

/// `helm install` as a user does, with `values` (`key=value`).
fn install(cluster: &NodeCluster, values: &[String]) {
    let chart = chart();
    let mut args = vec![
        "install",
        "netpolicy",
        &chart,
        "--namespace",
        RELEASE_NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
    ];
    for v in values {
        args.extend(["--set", v.as_str()]);
    }
    helm(cluster, &args);
}

/// The values every install here sets: the agent's hostPath state inside the cluster's
/// directory (this node shares the machine's filesystem), the cloud token Secret.
fn base_values(cluster: &NodeCluster) -> Vec<String> {
    vec![
        format!("agent.stateDir={}/agent-state", cluster.dir.display()),
        format!("routedIPs.tokenSecrets[0].namespace={APP_NS}"),
        "routedIPs.tokenSecrets[0].name=hcloud".into(),
    ]
}

async fn pods(client: &Client, component: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), RELEASE_NS)
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/component={component}")))
        .await
        .unwrap()
        .items
}

use common::pod_ready as ready;

async fn leader(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), RELEASE_NS)
        .get_opt(OPERATOR)
        .await
        .ok()??
        .spec?
        .holder_identity
}

/// The node's kernel objects in its network namespace: routes (all tables), rules,
/// addresses, as `ip` prints them.
fn kernel(cluster: &NodeCluster) -> (String, String, String) {
    (
        cluster
            .on_node("ip", &["route", "show", "table", "all"])
            .unwrap(),
        cluster.on_node("ip", &["rule", "show"]).unwrap(),
        cluster.on_node("ip", &["-o", "addr", "show"]).unwrap(),
    )
}

/// What netpolicy owns on the node once the routing policies below are applied.
const OWNED_ROUTE: &str = "10.240.0.0/24 via 10.231.0.1";
const OWNED_NODE_ROUTE: &str = "10.241.0.0/24 via 10.231.0.1";
const OWNED_RULE: &str = "from 10.240.0.0/24 lookup 240";
const OWNED_ADDRESS: &str = "192.0.2.10/32";
/// What someone else put on the node: netpolicy never touches it.
const FOREIGN_ROUTE: &str = "10.250.0.0/24 via 10.231.0.1";
const FOREIGN_RULE: &str = "from 10.250.0.0/24 lookup 250";

fn owned_present(cluster: &NodeCluster) -> Vec<&'static str> {
    let (routes, rules, addrs) = kernel(cluster);
    let mut here = Vec::new();
    if routes.contains(OWNED_ROUTE) {
        here.push(OWNED_ROUTE);
    }
    if routes.contains(OWNED_NODE_ROUTE) {
        here.push(OWNED_NODE_ROUTE);
    }
    if rules.contains(OWNED_RULE) {
        here.push(OWNED_RULE);
    }
    if addrs.contains(OWNED_ADDRESS) {
        here.push(OWNED_ADDRESS);
    }
    here
}

fn foreign_present(cluster: &NodeCluster) -> bool {
    let (routes, rules, _) = kernel(cluster);
    routes.contains(FOREIGN_ROUTE) && rules.contains(FOREIGN_RULE)
}

async fn nnc(client: &Client) -> Option<Value> {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("netpolicy.io", "v1alpha1", "NodeNetworkConfig"),
        "nodenetworkconfigs",
    );
    let o = Api::<DynamicObject>::all_with(client.clone(), &ar)
        .get_opt(NODE)
        .await
        .ok()??;
    Some(serde_json::to_value(o).unwrap())
}

/// The NodeNetworkConfig says Applied for its current generation and revision.
async fn applied(client: &Client) -> Option<Value> {
    let o = nnc(client).await?;
    let st = &o["status"];
    let ok = st["observedGeneration"] == o["metadata"]["generation"]
        && st["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Applied" && c["status"] == "True");
    ok.then_some(o)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a real node: scripts/test runs it after building the image (NETPOLICY_NODE_IMAGE)"]
async fn the_chart_runs_on_a_real_node_as_users_install_it() {
    if let Some(why) = NodeCluster::unavailable() {
        common::skip(&format!("the chart on a real node: {why}"));
        return;
    }
    let t0 = Instant::now();
    let cluster = NodeCluster::up(2400).unwrap_or_else(|e| panic!("{e}"));
    let client = cluster.client().await;
    // Before netpolicy: a route and a rule that belong to someone else.
    cluster
        .on_node("ip", &["route", "add", "10.250.0.0/24", "via", HOST_IP])
        .unwrap();
    cluster
        .on_node(
            "ip",
            &[
                "rule",
                "add",
                "from",
                "10.250.0.0/24",
                "lookup",
                "250",
                "pref",
                "30000",
            ],
        )
        .unwrap();
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NS}}),
    )
    .await;
    netpolicy_testenv::install_crds(&client, common::calico_crds()).await;

    eprintln!("== 1. helm install --wait");
    let mut values = base_values(&cluster);
    values.push("agent.cleanupOnUninstall=false".into());
    install(&cluster, &values);
    installed(&cluster, &client).await;

    eprintln!("== 2. routing reaches the node's kernel through the agent pod");
    routing(&cluster, &client).await;

    eprintln!("== 2b. node restriction: the agent pod's own token against another node");
    node_restriction(&cluster, &client).await;

    eprintln!("== 3. floating IPs, route reflectors, a routed IP, a traffic domain");
    let cloud = jobs(&cluster, &client).await;

    eprintln!("== 4. the leader pod killed");
    leader_killed(&cluster, &client, &cloud).await;

    eprintln!("== 5. helm upgrade: a new image tag and changed values");
    upgrade(&cluster, &client).await;

    eprintln!("== 6. helm uninstall, with and without agent.cleanupOnUninstall");
    let installed_requests = cluster.service_account_requests().len();
    uninstall(&cluster, &client).await;

    eprintln!("== 7. RBAC as deployed");
    rbac(&cluster, installed_requests);

    eprintln!("== the cluster's memory with the chart installed was measured in step 3");
    eprintln!("all steps passed in {:.0} s", t0.elapsed().as_secs_f64());
}

/// 1: both operator replicas Ready, one leader; the agent Ready; the leader's /readyz
/// says ok only once every job passed; the agent's metrics reachable from outside the
/// node.
async fn installed(cluster: &NodeCluster, client: &Client) {
    let deploy = Api::<Deployment>::namespaced(client.clone(), RELEASE_NS)
        .get(OPERATOR)
        .await
        .unwrap();
    assert_eq!(
        deploy.status.as_ref().and_then(|s| s.ready_replicas),
        Some(2)
    );
    let ops = pods(client, "operator").await;
    assert_eq!(ops.iter().filter(|p| ready(p)).count(), 2, "{ops:?}");
    let holder = until(
        "one operator holds the lease",
        60,
        || pod_logs(cluster),
        || async { leader(client).await },
    )
    .await;
    let names: Vec<String> = ops.iter().map(ResourceExt::name_any).collect();
    assert!(
        names.contains(&holder),
        "lease held by {holder}, pods {names:?}"
    );
    // Helm's --wait counts a DaemonSet ready at desired - maxUnavailable (1 - 1 here).
    until(
        "the agent pod Ready",
        60,
        || pod_logs(cluster),
        || async {
            let ds = Api::<DaemonSet>::namespaced(client.clone(), RELEASE_NS)
                .get(AGENT)
                .await
                .ok()?;
            (ds.status?.number_ready == 1).then_some(())
        },
    )
    .await;

    // The leader's endpoints, from the machine (pods are routed through the node).
    let leader_pod = ops.iter().find(|p| p.name_any() == holder).unwrap();
    let ip = leader_pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap();
    let (code, body) = common::http_get_at(&ip, 8080, "/readyz").unwrap();
    assert_eq!((code, body.trim()), (200, "ok"));
    let (_, metrics) = common::http_get_at(&ip, 8080, "/metrics").unwrap();
    // The jobs that run one pass over everything have passed (the per-object ones,
    // routed IPs and route reflectors, count passes per object: none exist yet).
    for job in ["routing", "floating-ip", "trench"] {
        assert!(
            metrics.contains(&format!(
                "netpolicy_reconciles_total{{controller=\"{job}\"}}"
            )),
            "the leader's metrics count no pass of {job}:\n{metrics}"
        );
    }
    // Ready only after every job's first pass: the leader's Ready condition turned
    // True no earlier than its log says the last job finished its first pass.
    readiness_after_first_passes(cluster, leader_pod);

    // The agent's metrics: on the node's InternalIP, reachable from outside the node.
    let (code, metrics) = common::http_get_at(NODE_IP, 8081, "/metrics")
        .expect("the agent's /metrics on the node's InternalIP");
    assert_eq!(code, 200);
    assert!(metrics.contains("netpolicy_"), "{metrics}");
}

fn readiness_after_first_passes(cluster: &NodeCluster, pod: &Pod) {
    let ready_at = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.clone())
        .unwrap()
        .0;
    let log = cluster
        .run(&["kubectl", "-n", RELEASE_NS, "logs", &pod.name_any()])
        .unwrap();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("first pass done"))
        })
        .collect();
    let mut jobs: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["fields"]["job"].as_str())
        .collect();
    jobs.sort_unstable();
    // Every job the operator runs: the five, and the routed-IP issuers' check (a
    // per-object job of its own).
    assert_eq!(
        jobs,
        [
            "floating-ip",
            "route-reflector",
            "routed-ip",
            "routed-ip-issuer",
            "routing",
            "trench"
        ],
        "one first pass per job:\n{log}"
    );
    let firsts: Vec<_> = lines
        .iter()
        .filter_map(|l| serde_json::from_value::<Time>(l["timestamp"].clone()).ok())
        .map(|t| t.0)
        .collect();
    assert!(
        !firsts.is_empty(),
        "the leader logged no first pass:\n{log}"
    );
    let last = firsts.iter().max().unwrap();
    // The condition's time has whole seconds.
    assert!(
        ready_at.as_second() >= last.as_second(),
        "Ready at {ready_at}, before the last job's first pass at {last}"
    );
}

/// 2: a ClusterConfig and a NodeConfig reach the node's kernel; Applied; foreign
/// objects untouched.
async fn routing(cluster: &NodeCluster, client: &Client) {
    apply(
        client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
            "metadata": {"name": "default"},
            "spec": {
                "routes": [
                    {"to": "10.240.0.0/24", "via": HOST_IP},
                    {"to": "10.240.0.0/24", "via": HOST_IP, "table": 240}
                ],
                "rules": [{"priority": 1000, "from": "10.240.0.0/24", "table": 240}]
            }
        }),
    )
    .await;
    apply(
        client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
            "metadata": {"name": "this-node"},
            "spec": {
                "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": NODE}},
                "routes": [{"to": "10.241.0.0/24", "via": HOST_IP}],
                "addresses": [{"dev": "lo", "address": OWNED_ADDRESS}]
            }
        }),
    )
    .await;
    until(
        "the NodeNetworkConfig holds both policies and says Applied",
        60,
        || pod_logs(cluster),
        || async {
            let o = applied(client).await?;
            (o["spec"]["routes"].as_array()?.len() == 3).then_some(())
        },
    )
    .await;
    let here = owned_present(cluster);
    assert_eq!(
        here,
        [OWNED_ROUTE, OWNED_NODE_ROUTE, OWNED_RULE, OWNED_ADDRESS],
        "kernel: {:?}",
        kernel(cluster)
    );
    let (routes, rules, _) = kernel(cluster);
    assert!(
        routes.contains("10.240.0.0/24 via 10.231.0.1 dev eth0 table 240 proto 203"),
        "{routes}"
    );
    assert!(
        rules.contains("1000:\tfrom 10.240.0.0/24 lookup 240 proto 203"),
        "{rules}"
    );
    assert!(
        foreign_present(cluster),
        "foreign objects touched:\n{routes}\n{rules}"
    );
    alert_rules_over_the_scrapes(client).await;
    prometheus_scrapes_where_the_charts_services_point(client).await;
    status_as_a_user_runs_it(cluster);
}

/// 2c: `netpolicy status node` with the cluster's kubeconfig, as a user runs it: every
/// item the node was given, from both policies, applied; plan would change nothing.
fn status_as_a_user_runs_it(cluster: &NodeCluster) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netpolicy"))
        .args(["status", "node", NODE, "-o", "json", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = s["items"].as_array().unwrap();
    assert!(items.iter().all(|i| i["applied"] == true), "{s:#}");
    let from = |policy: &str| {
        items
            .iter()
            .any(|i| i["sources"].as_array().unwrap().iter().any(|p| p == policy))
    };
    assert!(
        from("ClusterConfig/default") && from("NodeConfig/this-node"),
        "{s:#}"
    );
    assert_eq!(s["planChanges"], serde_json::json!([]), "{s:#}");
    println!(
        "netpolicy status node {}: {} items, all applied, plan would change nothing",
        NODE,
        items.len()
    );
}

/// 2a': Debian's Prometheus, as a process beside the node, scrapes the operator and the
/// agent where the chart's metrics Services point. Debian builds Prometheus without
/// `kubernetes_sd_configs` (its 2.42 refuses the field), so the test does what that
/// discovery's role `endpoints` does with the usual annotation relabelling: every
/// Service of the release annotated `prometheus.io/scrape: "true"`, each address of its
/// Endpoints at its `prometheus.io/port`, labelled with its component.
async fn prometheus_scrapes_where_the_charts_services_point(client: &Client) {
    let Some(bin) = common::alerts::prometheus() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("netpolicy-prom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let services =
        Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), RELEASE_NS)
            .list(&kube::api::ListParams::default())
            .await
            .unwrap();
    let mut scrape = String::new();
    let mut expected = 0;
    for svc in services.items {
        let ann = svc.metadata.annotations.clone().unwrap_or_default();
        if ann.get("prometheus.io/scrape").map(String::as_str) != Some("true") {
            continue;
        }
        let port = ann["prometheus.io/port"].clone();
        let component = svc.labels()["app.kubernetes.io/component"].clone();
        let eps =
            Api::<k8s_openapi::api::core::v1::Endpoints>::namespaced(client.clone(), RELEASE_NS)
                .get(&svc.name_any())
                .await
                .unwrap();
        let targets: Vec<String> = eps
            .subsets
            .unwrap_or_default()
            .iter()
            .flat_map(|s| s.addresses.clone().unwrap_or_default())
            .map(|a| format!("{:?}", format!("{}:{port}", a.ip)))
            .collect();
        assert!(!targets.is_empty(), "{} has no endpoints", svc.name_any());
        expected += targets.len();
        scrape.push_str(&format!(
            "  - job_name: netpolicy-{component}\n    static_configs: [{{targets: [{}], labels: {{component: {component}}}}}]\n",
            targets.join(", ")
        ));
    }
    let prom = common::alerts::Prometheus::start_with(&bin, &scrape, &dir).await;
    // Every target, not any: the operator's Service points at both replicas, and a
    // scrape of the standby alone says leader 0 (CI's run asserted before the leader
    // had been scraped once).
    let up = || async {
        prom.query("up{job=~\"netpolicy-.*\"} == 1")
            .await
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s["metric"]["component"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    netpolicy_testenv::eventually(
        &format!("Prometheus scrapes all {expected} targets (operator replicas and agent)"),
        60,
        || async { up().await.len() == expected },
    )
    .await;
    let leaders = || async {
        prom.query("sum(netpolicy_leader{component=\"operator\"})")
            .await
            .and_then(|v| {
                v.first()
                    .and_then(|s| s["value"][1].as_str().map(str::to_owned))
            })
    };
    netpolicy_testenv::eventually(
        "exactly one operator replica says it leads, in Prometheus",
        30,
        || async { leaders().await.as_deref() == Some("1") },
    )
    .await;
    let components = up().await;
    println!(
        "a real Prometheus ({}) scraped {} target(s) where the chart's metrics Services point: {components:?}",
        prom.version().await,
        components.len()
    );
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
}

/// 2a: the alert rules (deploy/prometheus-rules.yaml) over what the leader and the
/// node's agent serve once the node applied its config: promtool lints both scrapes,
/// every metric a rule reads is served, no alert fires over them held for 70 minutes.
async fn alert_rules_over_the_scrapes(client: &Client) {
    let Some(promtool) = common::alerts::promtool() else {
        return;
    };
    let holder = leader(client).await.unwrap();
    let ops = pods(client, "operator").await;
    let ip = ops
        .iter()
        .find(|p| p.name_any() == holder)
        .and_then(|p| p.status.as_ref()?.pod_ip.clone())
        .unwrap();
    // The leader's gauges follow its passes: wait for the one after the agent's report.
    let settled = [
        "netpolicy_node_network_configs{state=\"applied\"} 1",
        "netpolicy_node_network_configs{state=\"progressing\"} 0",
    ];
    let mut operator = String::new();
    for _ in 0..60 {
        operator = common::http_get_at(&ip, 8080, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        if settled.iter().all(|s| operator.contains(s)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(settled.iter().all(|s| operator.contains(s)), "{operator}");
    let (_, agent) = common::http_get_at(NODE_IP, 8081, "/metrics").unwrap();
    let dir = std::env::temp_dir().join(format!("netpolicy-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    common::alerts::check(
        &promtool,
        &[
            common::alerts::Scrape {
                job: "netpolicy",
                instance: "operator:8080",
                body: &operator,
            },
            common::alerts::Scrape {
                job: "netpolicy-agent",
                instance: "node:8081",
                body: &agent,
            },
        ],
        &[
            (
                "netpolicy_routed_ip_ready",
                "one series per RoutedIP: there is none yet",
            ),
            (
                "netpolicy_fipranges_capacity",
                "one series per FloatingIPRange: there is none yet",
            ),
            (
                "netpolicy_fipranges_reserved",
                "one series per FloatingIPRange: there is none yet",
            ),
        ],
        &dir,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// 2b: the token the kubelet mounted into the agent pod (read from the kubelet's pod
/// directory on the node) may patch its own node's NodeNetworkConfig status, and is
/// refused another node's by the chart's node restriction (server-side dry runs: the
/// status is not changed; `rbac` leaves dry runs out of its count of refusals).
async fn node_restriction(cluster: &NodeCluster, client: &Client) {
    let agent = pods(client, "agent").await.remove(0);
    let uid = agent.metadata.uid.clone().unwrap();
    let volumes = cluster.dir.join(format!(
        "nodes/{NODE}/kubelet/pods/{uid}/volumes/kubernetes.io~projected"
    ));
    let token = std::fs::read_dir(&volumes)
        .unwrap_or_else(|e| panic!("{}: {e}", volumes.display()))
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("token")).ok())
        .next()
        .unwrap_or_else(|| panic!("no token under {}", volumes.display()));
    let as_agent = netpolicy_testenv::token_client(&cluster.kubeconfig, &token).await;
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("netpolicy.io", "v1alpha1", "NodeNetworkConfig"),
        "nodenetworkconfigs",
    );
    let other = "np-other-node";
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
                "metadata": {"name": other}, "spec": {"revision": "r1"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let dry = kube::api::PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let healthy = kube::api::Patch::Merge(json!({"status": {"appliedRevision": "r1"}}));
    let api = Api::<DynamicObject>::all_with(as_agent, &ar);
    let refused = api.patch_status(other, &dry, &healthy).await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 403
            && s.message.contains(&format!("the agent of node {NODE} may change only"))),
        "another node's status with the agent pod's token: {refused:?}"
    );
    api.patch_status(NODE, &dry, &healthy)
        .await
        .unwrap_or_else(|e| panic!("its own node's status: {e}"));
    Api::<DynamicObject>::all_with(client.clone(), &ar)
        .delete(other, &DeleteParams::default())
        .await
        .unwrap();
    eprintln!("  another node's status refused to the agent pod's token; its own accepted");
}

/// 3: each job in the pod does what it does in process tests. Returns the provider's
/// state for step 4.
async fn jobs(cluster: &NodeCluster, client: &Client) -> cloud::Shared {
    // Floating IPs → kube-vip-cloud-provider's ConfigMap.
    apply(
        client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
            "metadata": {"name": "public"},
            "spec": {"cidrs": ["203.0.113.0/28"], "kubeVip": {"publish": true}}
        }),
    )
    .await;
    apply(
        client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
            "metadata": {"name": "web", "namespace": APP_NS},
            "spec": {"range": "public"}
        }),
    )
    .await;
    let address = until(
        "the FloatingIP has an address",
        60,
        || pod_logs(cluster),
        || async {
            let ar = kube::api::ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("netpolicy.io", "v1alpha1", "FloatingIP"),
                "floatingips",
            );
            let o = Api::<DynamicObject>::namespaced_with(client.clone(), APP_NS, &ar)
                .get("web")
                .await
                .ok()?;
            o.data["status"]["address"].as_str().map(str::to_owned)
        },
    )
    .await;
    until(
        "kube-vip's ConfigMap holds it",
        60,
        || pod_logs(cluster),
        || async {
            let cm = Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
                .get_opt("kubevip")
                .await
                .ok()??;
            cm.data?
                .values()
                .any(|v| v.contains(&address))
                .then_some(())
        },
    )
    .await;

    // Route reflectors with Calico's CRDs → the node labelled, BGPPeers written.
    apply(
        client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "RouteReflectorConfig",
            "metadata": {"name": "default"},
            "spec": {"min": 1, "max": 1}
        }),
    )
    .await;
    until(
        "the node is a route reflector",
        60,
        || pod_logs(cluster),
        || async {
            let n = Api::<Node>::all(client.clone()).get(NODE).await.ok()?;
            n.labels()
                .contains_key("calico-route-reflector")
                .then_some(())
        },
    )
    .await;
    until(
        "BGPPeers written",
        60,
        || pod_logs(cluster),
        || async {
            let ar = kube::api::ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("crd.projectcalico.org", "v1", "BGPPeer"),
                "bgppeers",
            );
            let l = Api::<DynamicObject>::all_with(client.clone(), &ar)
                .list(&ListParams::default())
                .await
                .ok()?;
            (!l.items.is_empty()).then_some(())
        },
    )
    .await;

    common::rr_settled(
        client,
        "the route-reflector topology",
        60,
        &cluster.dir.join("logs/kubelet.log"),
    )
    .await;

    // A RoutedIP on a provider API server the operator pod reaches on the machine.
    let cloud = common::hetzner_issuer(client, HOST_IP, APP_NS, &[NODE], json!({})).await;
    apply(
        client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
            "metadata": {"name": "ingress"},
            "spec": {"issuerRef": {"name": "hcloud"}, "reclaimPolicy": "Delete",
                     "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": NODE}}}
        }),
    )
    .await;
    until(
        "the RoutedIP is assigned to the node",
        90,
        || pod_logs(cluster),
        || async {
            let ar = kube::api::ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("netpolicy.io", "v1alpha1", "RoutedIP"),
                "routedips",
            );
            let o = Api::<DynamicObject>::all_with(client.clone(), &ar)
                .get("ingress")
                .await
                .ok()?;
            (o.data["status"]["node"] == NODE && o.data["status"]["address"].is_string())
                .then_some(())
        },
    )
    .await;
    {
        let c = cloud.lock().unwrap();
        assert_eq!(c.ips.len(), 1, "{:?}", c.ips);
        assert_eq!(c.ips[0]["server"], 1, "{:?}", c.ips);
    }

    // A Meridio traffic domain: the trench job hands out its tables and addresses.
    for (kind, name, spec) in [
        ("Trench", "trench-a", json!({"ipFamily": "ipv4"})),
        ("Vip", "vip-1", json!({"address": "20.0.0.1/32"})),
        (
            "Gateway",
            "gw-a",
            json!({"address": "169.254.100.150", "protocol": "static"}),
        ),
        ("Conduit", "c1", json!({})),
        ("Stream", "s1", json!({"conduit": "c1"})),
        (
            "Flow",
            "f1",
            json!({"stream": "s1", "vips": ["vip-1"], "sourceSubnets": ["0.0.0.0/0"],
                              "destinationPorts": ["80"], "protocols": ["tcp"], "priority": 1}),
        ),
        (
            "Attractor",
            "attr-a",
            json!({
            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": NODE}},
            "interface": {"name": "eth0", "link": "eth0", "ipv4Prefix": "169.254.100.0/24"},
            "gateways": ["gw-a"], "vips": ["vip-1"], "composites": ["c1"]}),
        ),
    ] {
        let mut meta = json!({"name": name, "namespace": APP_NS});
        if kind != "Trench" {
            meta["labels"] = json!({"trench": "trench-a"});
        }
        apply(
            client,
            json!({"apiVersion": "netpolicy.io/v1alpha1", "kind": kind,
                             "metadata": meta, "spec": spec}),
        )
        .await;
    }
    // The default data plane, meridio: Meridio's own workloads, as its operator keeps
    // them (their images need not run here).
    let meridio = [
        (
            "v1",
            "ConfigMap",
            "configmaps",
            "meridio-configuration-trench-a",
        ),
        ("apps/v1", "StatefulSet", "statefulsets", "nsp-trench-a"),
        ("apps/v1", "StatefulSet", "statefulsets", "ipam-trench-a"),
        ("v1", "Service", "services", "nsp-service-trench-a"),
        ("v1", "Service", "services", "ipam-service-trench-a"),
        (
            "apps/v1",
            "Deployment",
            "deployments",
            "stateless-lb-frontend-attr-a",
        ),
        (
            "policy/v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            "pdb-attr-a",
        ),
        ("apps/v1", "DaemonSet", "daemonsets", "proxy-c1"),
        // The accounts its pods run as, made by the operator under the chart's RBAC
        // (it may grant only the verbs it holds) and collected with the Trench.
        (
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            "meridio-sa-trench-a",
        ),
        (
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            "meridio-fes-trench-a",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            "roles",
            "meridio-configuration-role-trench-a",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "rolebindings",
            "meridio-configuration-role-binding-trench-a",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            "roles",
            "meridio-fes-role-trench-a",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "rolebindings",
            "meridio-fes-role-binding-trench-a",
        ),
    ];
    let present = |client: Client| async move {
        let mut here = Vec::new();
        for (api_version, kind, plural, name) in meridio {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let ar = kube::api::ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            );
            if Api::<DynamicObject>::namespaced_with(client.clone(), APP_NS, &ar)
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .is_some()
            {
                here.push(name);
            }
        }
        here
    };
    until(
        "Meridio's workloads of the trench exist",
        60,
        || pod_logs(cluster),
        || async { (present(client.clone()).await.len() == meridio.len()).then_some(()) },
    )
    .await;
    let trenches = kube::api::ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("netpolicy.io", "v1alpha1", "Trench"),
        "trenches",
    );
    // Meridio's images are not here, so nothing rolls out: the Trench says so, from
    // what the real StatefulSet and DaemonSet controllers report.
    until(
        "the Trench names its workloads not rolled out",
        60,
        || pod_logs(cluster),
        || async {
            let o = Api::<DynamicObject>::namespaced_with(client.clone(), APP_NS, &trenches)
                .get("trench-a")
                .await
                .ok()?;
            o.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| {
                    let m = c["message"].as_str().unwrap_or_default();
                    c["reason"] == "WorkloadsNotReady"
                        && c["status"] == "False"
                        && m.contains("StatefulSet nsp-trench-a: 0/1 ready")
                        && m.contains("DaemonSet proxy-c1: 0/1 ready")
                })
                .then_some(())
        },
    )
    .await;
    eprintln!(
        "  memory of the whole cluster with the chart installed:\n{}",
        memory(cluster)
    );
    // Deleting the Trench removes everything of it (the garbage collector follows the
    // ownerReferences: Trench → Attractor/Conduit → their workloads).
    Api::<DynamicObject>::namespaced_with(client.clone(), APP_NS, &trenches)
        .delete("trench-a", &DeleteParams::default())
        .await
        .unwrap();
    until(
        "the trench's workloads are gone with it",
        60,
        || pod_logs(cluster),
        || async { present(client.clone()).await.is_empty().then_some(()) },
    )
    .await;
    cloud
}

/// Resident memory of the cluster's processes and pods, in MiB.
fn memory(cluster: &NodeCluster) -> String {
    let rss = |pid: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let mut out = String::new();
    let mut total = 0;
    for name in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "containerd",
        "kubelet",
        "kube-proxy",
    ] {
        let pid = std::fs::read_to_string(cluster.dir.join(format!("pids/{name}.pid")))
            .unwrap_or_default();
        // The pid file holds `timeout`'s pid; the process is its child.
        let child =
            std::fs::read_to_string(format!("/proc/{}/task/{}/children", pid.trim(), pid.trim()))
                .unwrap_or_default();
        let kib = rss(child.split_whitespace().next().unwrap_or_default());
        total += kib;
        out.push_str(&format!(
            "    {name:<24} {:>6.0} MiB\n",
            kib as f64 / 1024.0
        ));
    }
    // Shims and pod processes: every process whose cgroup is under kubepods or that is
    // a shim of this cluster's containerd.
    let mut pods = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let shim =
            cmd.contains("containerd-shim") && cmd.contains(&cluster.dir.display().to_string());
        if cg.contains("/kubepods") || shim {
            pods += rss(&pid);
        }
    }
    total += pods;
    out.push_str(&format!(
        "    {:<24} {:>6.0} MiB\n",
        "shims and pods",
        pods as f64 / 1024.0
    ));
    out.push_str(&format!(
        "    {:<24} {:>6.0} MiB",
        "total",
        total as f64 / 1024.0
    ));
    out
}

/// Writes by the operator's service account to the objects the jobs own, from the
/// audit log: (verb, resource, name) per request.
fn operator_writes(cluster: &NodeCluster) -> Vec<String> {
    let user = format!("system:serviceaccount:{RELEASE_NS}:{OPERATOR}");
    cluster
        .service_account_requests()
        .into_iter()
        .filter(|r| r.user == user)
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .filter(|r| r.resource != "leases" && r.resource != "events")
        .map(|r| {
            format!(
                "{} {} {}/{} ({}) by {}",
                r.verb, r.resource, r.namespace, r.name, r.code, r.pod
            )
        })
        .collect()
}

/// 4: the leader's pod killed (no grace: no lease release); the other replica leads
/// within the lease time and writes nothing the first leader already wrote.
async fn leader_killed(cluster: &NodeCluster, client: &Client, cloud: &cloud::Shared) {
    let old = leader(client).await.unwrap();
    let assigned_before = cloud
        .lock()
        .unwrap()
        .log
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    let before = operator_writes(cluster).len();
    // SIGKILL to the leader's container (it cannot give the lease back), then its pod
    // deleted at once (its restarted container would come back with the same identity).
    let pods_api = Api::<Pod>::namespaced(client.clone(), RELEASE_NS);
    let container = pods_api
        .get(&old)
        .await
        .unwrap()
        .status
        .unwrap()
        .container_statuses
        .unwrap()[0]
        .container_id
        .clone()
        .unwrap();
    let id = container.trim_start_matches("containerd://");
    cluster
        .run(&["ctr", "tasks", "kill", "--signal", "SIGKILL", id])
        .unwrap();
    let killed = Instant::now();
    pods_api
        .delete(
            &old,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    // leaseSeconds 15 (the chart's default), plus the standby's retry period (5 s) and
    // slack for a loaded machine.
    let new = until(
        "the other replica leads",
        30,
        || pod_logs(cluster),
        || async { leader(client).await.filter(|h| *h != old) },
    )
    .await;
    eprintln!(
        "  {new} leads {:.1} s after {old} was killed",
        killed.elapsed().as_secs_f64()
    );
    // The new leader synced and passed once (Ready), then a quiet while.
    until(
        "the new leader is Ready",
        60,
        || pod_logs(cluster),
        || async {
            let p = Api::<Pod>::namespaced(client.clone(), RELEASE_NS)
                .get(&new)
                .await
                .ok()?;
            ready(&p).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The new leader's writes (the old one may have finished a write of its own after
    // `before` was read, before it was killed: said, not counted).
    let after = operator_writes(cluster);
    let by_new: Vec<&String> = after[before..]
        .iter()
        .filter(|w| w.ends_with(&format!(" by {new}")))
        .collect();
    eprintln!("  writes after the kill: {:?}", &after[before..]);
    assert!(
        !after.is_empty() && after.iter().all(|w| !w.ends_with(" by ")),
        "the audit log must name the writing pod: {after:?}"
    );
    assert_eq!(
        by_new,
        [] as [&String; 0],
        "the new leader rewrote what the old one had written"
    );
    let c = cloud.lock().unwrap();
    let posts = c.log.iter().filter(|r| r.method == "POST").count();
    assert_eq!(
        posts, assigned_before,
        "a second assignment at the provider: {:?}",
        c.log
    );
    assert_eq!(c.ips.len(), 1, "a second cloud IP: {:?}", c.ips);
}

/// `ip monitor` in the node's namespace, until stopped.
struct Monitor(Child, PathBuf);

impl Monitor {
    fn start(cluster: &NodeCluster) -> Self {
        let path = cluster.dir.join("logs/ip-monitor.log");
        let file = std::fs::File::create(&path).unwrap();
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{NETNS}"))
            .args(["--", "ip", "monitor", "route", "rule", "address"])
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self(child, path)
    }

    fn stop(mut self) -> String {
        let _ = self.0.kill();
        let _ = self.0.wait();
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
}

/// 5: a new image tag and changed values (shared renderings turned on among them): the
/// agent pod is replaced, the node moves to a shared object, and the node's kernel
/// objects are neither removed nor re-added.
async fn upgrade(cluster: &NodeCluster, client: &Client) {
    let version = app_version();
    let next = format!("{version}-e2e");
    cluster
        .run(&[
            "ctr",
            "images",
            "tag",
            "--force",
            &format!("ghcr.io/netpolicy/netpolicy:{version}"),
            &format!("ghcr.io/netpolicy/netpolicy:{next}"),
        ])
        .unwrap();
    let old_agent: Vec<String> = pods(client, "agent")
        .await
        .iter()
        .map(|p| p.uid().unwrap())
        .collect();
    let monitor = Monitor::start(cluster);
    let chart = chart();
    let mut args = vec![
        "upgrade".to_owned(),
        "netpolicy".into(),
        chart,
        "--namespace".into(),
        RELEASE_NS.into(),
        "--wait".into(),
        "--timeout".into(),
        "5m".into(),
    ];
    let mut values = base_values(cluster);
    values.extend([
        format!("image.tag={next}"),
        "agent.logLevel=debug".into(),
        "operator.logLevel=debug".into(),
        "agent.cleanupOnUninstall=true".into(),
        // From per-node objects to shared renderings (issue 68), in place.
        "operator.sharedRenderings=true".into(),
    ]);
    for v in values {
        args.extend(["--set".into(), v]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    helm(cluster, &args);
    let agents = until(
        "the agent pod replaced and Ready",
        120,
        || pod_logs(cluster),
        || async {
            let now = pods(client, "agent").await;
            (now.len() == 1 && ready(&now[0]) && !old_agent.contains(&now[0].uid().unwrap()))
                .then_some(now)
        },
    )
    .await;
    let image = agents[0].spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap();
    assert!(image.ends_with(&next), "agent image {image}");
    until(
        "the new agent reports Applied",
        60,
        || pod_logs(cluster),
        || applied(client),
    )
    .await;
    // The operator moved the node to a shared object (its own items over its group's
    // rendering), which the agent runs: the same items, so nothing in the kernel moves.
    let shared = until(
        "the node runs a shared rendering",
        120,
        || pod_logs(cluster),
        || async {
            let o = applied(client).await?;
            (o["spec"]["shared"] == true && o["status"]["appliedRendering"].is_string())
                .then_some(o)
        },
    )
    .await;
    eprintln!(
        "  shared: rendering {}, own items {} routes",
        shared["status"]["appliedRendering"],
        shared["spec"]["routes"].as_array().map_or(0, Vec::len)
    );
    // A resync of the new agent (its first pass compares, changes nothing).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let events = monitor.stop();
    // The monitor saw the node change (the new pods' veths and their addresses): an
    // empty log would mean it watched nothing, not that nothing was touched.
    assert!(
        events.lines().count() > 0,
        "ip monitor recorded nothing during the upgrade"
    );
    let touched: Vec<&str> = events
        .lines()
        .filter(|l| {
            [
                OWNED_ROUTE,
                OWNED_NODE_ROUTE,
                OWNED_RULE,
                OWNED_ADDRESS,
                "10.240.0.0/24",
            ]
            .iter()
            .any(|o| l.contains(o))
        })
        .collect();
    assert_eq!(
        touched,
        [] as [&str; 0],
        "the upgrade removed or re-added owned objects"
    );
    assert_eq!(owned_present(cluster).len(), 4);
}

/// `helm uninstall --wait`, then until the agent's pod is gone (its stop is when it
/// cleans up, or not).
async fn uninstall_release(cluster: &NodeCluster, client: &Client) {
    helm(
        cluster,
        &[
            "uninstall",
            "netpolicy",
            "--namespace",
            RELEASE_NS,
            "--wait",
            "--timeout",
            "2m",
        ],
    );
    until(
        "the agent pod gone",
        60,
        || pod_logs(cluster),
        || async { pods(client, "agent").await.is_empty().then_some(()) },
    )
    .await;
}

/// 6: uninstall with agent.cleanupOnUninstall (set by the upgrade): netpolicy's objects
/// leave the node, foreign ones stay. Then installed again without it: everything stays.
async fn uninstall(cluster: &NodeCluster, client: &Client) {
    uninstall_release(cluster, client).await;
    let left = owned_present(cluster);
    assert_eq!(
        left,
        [] as [&str; 0],
        "cleanupOnUninstall left netpolicy's objects on the node; kubelet's view of the agent:\n{}",
        cluster
            .log("kubelet")
            .lines()
            .filter(|l| l.contains("agent"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        foreign_present(cluster),
        "the cleanup removed foreign objects: {:?}",
        kernel(cluster)
    );

    let mut values = base_values(cluster);
    values.push("agent.cleanupOnUninstall=false".into());
    install(cluster, &values);
    until(
        "applied again after the reinstall",
        60,
        || pod_logs(cluster),
        || applied(client),
    )
    .await;
    until(
        "netpolicy's objects back on the node",
        30,
        || format!("{:?}", kernel(cluster)),
        || async { (owned_present(cluster).len() == 4).then_some(()) },
    )
    .await;
    uninstall_release(cluster, client).await;
    assert_eq!(
        owned_present(cluster).len(),
        4,
        "without cleanupOnUninstall the node keeps everything"
    );
    assert!(foreign_present(cluster));
}

/// 7: no request of the chart's pods was refused while the chart was installed (the
/// first `installed` requests of the audit log), and every permission the chart grants
/// was used by the tests above or is listed here with the reason it stays. At
/// uninstall, Helm deletes the Roles in the same breath as the pods: the only request
/// that may then be refused is the operator giving its Lease back (it expires anyway).
fn rbac(cluster: &NodeCluster, installed: usize) {
    let requests = cluster.service_account_requests();
    let is_ours = |r: &netpolicy_testenv::node::Request| {
        r.user == format!("system:serviceaccount:{RELEASE_NS}:{OPERATOR}")
            || r.user == format!("system:serviceaccount:{RELEASE_NS}:{AGENT}")
    };
    let ours: Vec<_> = requests.iter().filter(|r| is_ours(r)).collect();
    assert!(
        !ours.is_empty(),
        "no request of the chart's pods in the audit log"
    );
    let operator = format!("system:serviceaccount:{RELEASE_NS}:{OPERATOR}");
    let refused: Vec<String> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| is_ours(r) && r.code == 403 && !r.uri.contains("dryRun="))
        .filter(|(i, r)| *i < installed || !(r.user == operator && r.resource == "leases"))
        .map(|(_, r)| format!("{} {} {} {}", r.user, r.verb, r.uri, r.code))
        .collect();
    assert_eq!(
        refused,
        [] as [String; 0],
        "requests the chart's RBAC refused"
    );
    let at_uninstall = requests[installed..]
        .iter()
        .filter(|r| r.code == 403)
        .count();
    eprintln!("  refused at uninstall (the operator giving its Lease back): {at_uninstall}");

    // Used: (service account, group, resource, verb).
    let mut used: BTreeSet<(String, String, String, String)> = BTreeSet::new();
    for r in &ours {
        let sa = r.user.rsplit(':').next().unwrap().to_owned();
        used.insert((sa, r.group.clone(), r.resource.clone(), r.verb.clone()));
    }
    // Granted, from the chart as rendered with the values the tests used.
    let rendered = cluster
        .run(&[
            "helm",
            "template",
            "netpolicy",
            &chart(),
            "--namespace",
            RELEASE_NS,
            "--set",
            &format!("routedIPs.tokenSecrets[0].namespace={APP_NS}"),
            "--set",
            "routedIPs.tokenSecrets[0].name=hcloud",
        ])
        .unwrap();
    let mut granted: BTreeMap<(String, String, String, String), bool> = BTreeMap::new();
    for (_, doc) in netpolicy_operator::manifest::split_documents(&rendered) {
        let Ok(v) = serde_saphyr::from_str::<Value>(&doc) else {
            continue;
        };
        let kind = v["kind"].as_str().unwrap_or_default();
        if kind != "ClusterRole" && kind != "Role" {
            continue;
        }
        let sa = if v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .ends_with("-agent")
        {
            AGENT
        } else {
            OPERATOR
        };
        for rule in v["rules"].as_array().into_iter().flatten() {
            for g in rule["apiGroups"].as_array().into_iter().flatten() {
                for res in rule["resources"].as_array().into_iter().flatten() {
                    for verb in rule["verbs"].as_array().into_iter().flatten() {
                        granted.insert(
                            (
                                sa.to_owned(),
                                g.as_str().unwrap().to_owned(),
                                res.as_str().unwrap().to_owned(),
                                verb.as_str().unwrap().to_owned(),
                            ),
                            false,
                        );
                    }
                }
            }
        }
    }
    for u in &used {
        if let Some(seen) = granted.get_mut(u) {
            *seen = true;
        }
    }
    eprintln!("  service account / group / resource: verbs the pods used [granted, unused]");
    // (used, unused) verbs per (service account, group, resource).
    type Verbs = (Vec<String>, Vec<String>);
    let mut by: BTreeMap<(String, String, String), Verbs> = BTreeMap::new();
    for ((sa, g, r, v), seen) in &granted {
        let e = by.entry((sa.clone(), g.clone(), r.clone())).or_default();
        if *seen {
            e.0.push(v.clone())
        } else {
            e.1.push(v.clone())
        }
    }
    for ((sa, g, r), (u, n)) in &by {
        eprintln!(
            "    {sa} {}/{r}: used {u:?}, unused {n:?}",
            if g.is_empty() { "core" } else { g }
        );
    }
    // Granted and not exercised here, each for a reason the tests above cannot show.
    let justified: &[(&str, &str, &str, &str, &str)] = &[
        (
            OPERATOR,
            "crd.projectcalico.org",
            "caliconodestatuses",
            "create",
            "asks calico-node for a reflector's BGP sessions while a transition runs: no \
             calico-node here (tests/bgp_live.rs, with calico-node's status reporter)",
        ),
        (
            OPERATOR,
            "crd.projectcalico.org",
            "caliconodestatuses",
            "delete",
            "removes those requests once the transition settled (tests/bgp_live.rs)",
        ),
        (
            AGENT,
            "apps",
            "daemonsets",
            "get",
            "the stop signal came before the watch of its DaemonSet answered: asked once",
        ),
        (
            OPERATOR,
            "",
            "configmaps",
            "create",
            "server-side apply creating kube-vip's ConfigMap",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "nodenetworkconfigs",
            "update",
            "a change to a node's NodeNetworkConfig after its create (an update of the \
             stored one), where a run makes one; tests/operator_runtime.rs counts it",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "nodenetworkconfigs",
            "patch",
            "server-side apply of a NodeNetworkConfig that is not ours as we write it \
             (another's label or owner), where a run has one",
        ),
        (
            OPERATOR,
            "crd.projectcalico.org",
            "bgppeers",
            "create",
            "server-side apply creating a BGPPeer",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "nodenetworkconfigs",
            "delete",
            "a Node deleted",
        ),
        (
            OPERATOR,
            "crd.projectcalico.org",
            "bgppeers",
            "delete",
            "a transition retiring a reflector (one node here: none)",
        ),
        (
            OPERATOR,
            "crd.projectcalico.org",
            "bgpconfigurations",
            "patch",
            "turning Calico's node-to-node mesh off (not asked here)",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "floatingipclaims",
            "delete",
            "an address released",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "floatingips",
            "create",
            "autoAllocate in a Namespace",
        ),
        (
            OPERATOR,
            "",
            "services",
            "create",
            "server-side apply creating Meridio's Services",
        ),
        (
            OPERATOR,
            "apps",
            "statefulsets",
            "create",
            "server-side apply creating NSP and IPAM",
        ),
        (
            OPERATOR,
            "apps",
            "deployments",
            "create",
            "server-side apply creating a front end",
        ),
        (
            OPERATOR,
            "apps",
            "daemonsets",
            "create",
            "server-side apply creating a proxy",
        ),
        (
            OPERATOR,
            "policy",
            "poddisruptionbudgets",
            "create",
            "server-side apply creating a front end's PodDisruptionBudget",
        ),
        (
            OPERATOR,
            "",
            "serviceaccounts",
            "create",
            "server-side apply creating a trench's meridio-sa-<t> and meridio-fes-<t> (the audit logs an apply as patch)",
        ),
        (
            OPERATOR,
            "rbac.authorization.k8s.io",
            "roles",
            "create",
            "server-side apply creating a trench's Roles (the audit logs an apply as patch)",
        ),
        (
            OPERATOR,
            "rbac.authorization.k8s.io",
            "rolebindings",
            "create",
            "server-side apply creating a trench's RoleBindings (the audit logs an apply as patch)",
        ),
        (
            OPERATOR,
            "",
            "configmaps",
            "watch",
            "granted onward in meridio-configuration-role-<t>: RBAC lets the operator write a Role only with rules it holds (escalation prevention); the operator never watches ConfigMaps itself",
        ),
        (
            OPERATOR,
            "",
            "secrets",
            "watch",
            "granted onward in meridio-fes-role-<t> (escalation prevention, as above); the operator never watches Secrets itself",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "floatingips",
            "get",
            "a claim's owner confirmed gone before its address is released",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "nodenetworkrenderings",
            "deletecollection",
            "the renderings no group runs, deleted once no rollout is under way: a run whose \
             policies do not change after shared renderings are turned on leaves none",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "networkrollouts",
            "create",
            "server-side apply creating a NetworkRollout (the audit logs an apply as patch)",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "networkrollouts",
            "patch",
            "a change's rollout: none here, since the run's policies do not change after \
             shared renderings are turned on (the nodes move over on what they run: the \
             fleet settles it without a rollout); tests/shared_renderings.rs writes them",
        ),
        (
            OPERATOR,
            "netpolicy.io",
            "networkrollouts",
            "delete",
            "a finished rollout, folded into the fleet: none here (above)",
        ),
        (
            OPERATOR,
            "events.k8s.io",
            "events",
            "patch",
            "the same Event (same note) again within the recorder's window, its series: \
             a new fact is a new Event (k8s::events), so this run's facts were all new",
        ),
        (
            AGENT,
            "events.k8s.io",
            "events",
            "create",
            "a repair of drift, or a fight (nothing changes the node here; tests/agent.rs records them)",
        ),
        (
            AGENT,
            "events.k8s.io",
            "events",
            "patch",
            "the same repair Event again within the recorder's window (its series)",
        ),
    ];
    let unused: Vec<String> = granted
        .iter()
        .filter(|(_, seen)| !**seen)
        .map(|((sa, g, r, v), _)| format!("{sa} {g}/{r} {v}"))
        .filter(|k| {
            !justified
                .iter()
                .any(|(sa, g, r, v, _)| *k == format!("{sa} {g}/{r} {v}"))
        })
        .collect();
    for (sa, g, r, v, why) in justified {
        eprintln!("    kept, unused here: {sa} {g}/{r} {v}: {why}");
    }
    assert_eq!(
        unused,
        [] as [String; 0],
        "granted by the chart, used by no test and not justified"
    );
}
