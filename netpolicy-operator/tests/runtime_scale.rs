//! A reported run, not a timed test (it is `#[ignore]`d; numbers go to stdout and
//! benches/README.md): every job at once, as `netpolicy operator` runs them, on the real
//! API server.
//!
//! ```sh
//! cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture runtime_scale::
//! # the same workload against another build of the binary (say, the one before a change):
//! NETPOLICY_BIN=/path/to/netpolicy cargo test --release ... --test integration -- --ignored --nocapture runtime_scale::
//! # one of the runs: `every_job` (this workload), `write_verbs` (what one write of a
//! # NodeNetworkConfig costs the API server, per verb) or `status_verbs` (the same for a
//! # FloatingIP's status); see their own docs
//! cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture runtime_scale::write_verbs
//! ```
//!
//! They take the shared control plane one after the other, never at once.
//!
//! Workload (the runtime issue's): 10,000 Nodes in 3 zones, 100 NodeConfigs and the
//! ClusterConfig, 10,000 FloatingIPs over 5 ranges publishing to kube-vip, the
//! route-reflector job with Calico's CRDs, 50 RoutedIPs on the `memory` provider.
//! Measures: start until everything is converged; WATCH streams per resource (the API
//! server's own `apiserver_longrunning_requests`); the operator's resident memory; a
//! cluster-wide ClusterConfig edit until every NodeNetworkConfig has it; one new
//! FloatingIP until it has its address; API writes over the quiet period
//! (`NETPOLICY_QUIET_SECS`, default 600). The cold start and the edit are followed in the
//! API server's audit log (`ControlPlane::follow_writes`), not by watches or lists of
//! their 10,000 objects, so the run asks the API server it measures for as little as the
//! workload's baseline did; each phase prints what the API server served meanwhile
//! (its `apiserver_request_total` and `apiserver_watch_events_total`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use netpolicy_operator::api::{ClusterConfig, FloatingIP, NodeNetworkConfig, RoutedIP, crds};
use serde_json::json;

const NODES: usize = 10_000;
const NODE_CONFIGS: usize = 100;
const FIPS: usize = 10_000;
const RANGES: usize = 5;
const NAMESPACES: usize = 10;
const ROUTED_IPS: usize = 50;
const CONCURRENCY: usize = 48;
const ZONES: [&str; 3] = ["a", "b", "c"];

async fn apply(client: &Client, objects: Vec<serde_json::Value>) {
    stream::iter(objects)
        .for_each_concurrent(CONCURRENCY, |o| {
            let client = client.clone();
            async move {
                let gvk = kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
                    api_version: o["apiVersion"].as_str().unwrap().into(),
                    kind: o["kind"].as_str().unwrap().into(),
                })
                .unwrap();
                let plural = match gvk.kind.as_str() {
                    "FloatingIP" => "floatingips".to_owned(),
                    "RoutedIP" => "routedips".to_owned(),
                    k => format!("{}s", k.to_lowercase()),
                };
                let ar = kube::core::ApiResource::from_gvk_with_plural(&gvk, &plural);
                let name = o["metadata"]["name"].as_str().unwrap().to_owned();
                let obj: kube::core::DynamicObject = serde_json::from_value(o.clone()).unwrap();
                let api: Api<kube::core::DynamicObject> = match o["metadata"]["namespace"].as_str()
                {
                    Some(ns) => Api::namespaced_with(client, ns, &ar),
                    None => Api::all_with(client, &ar),
                };
                api.patch(
                    &name,
                    &PatchParams::apply("scale-test").force(),
                    &Patch::Apply(&obj),
                )
                .await
                .unwrap();
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (many minutes): cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture runtime_scale::"]
async fn every_job_at_ten_thousand_nodes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    let mut all_crds = crds();
    all_crds.extend(common::calico_crds());
    netpolicy_testenv::install_crds(&client, all_crds).await;
    let system = cp.namespace("scale-system").await;
    let vip_ns = cp.namespace("scale-kube-vip").await;
    let mut namespaces = Vec::new();
    for _ in 0..NAMESPACES {
        namespaces.push(cp.namespace("scale").await);
    }
    let writes_at_start = cp.all_writes().len();
    let cpu_before_workload = common::control_plane_cpu(cp);
    let t = Instant::now();
    // Nodes: created, then Ready and untainted as a kubelet and the node lifecycle
    // controller would make them.
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(0..NODES)
        .for_each_concurrent(CONCURRENCY, |i| {
            let nodes = nodes.clone();
            async move {
                let name = format!("node-{i:05}");
                let n: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {
                        "kubernetes.io/hostname": name,
                        "topology.kubernetes.io/zone": ZONES[i % 3],
                        "pool": format!("p{:02}", i % NODE_CONFIGS),
                    }},
                    "spec": {"providerID": format!("memory://{i}")},
                }))
                .unwrap();
                nodes.create(&PostParams::default(), &n).await.unwrap();
                // The API server taints a new Node not-ready; the node lifecycle
                // controller (not running here) lifts it once the kubelet reports Ready.
                nodes
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"taints": null}})),
                    )
                    .await
                    .unwrap();
                nodes
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"conditions": [
                            {"type": "Ready", "status": "True"}]}})),
                    )
                    .await
                    .unwrap();
            }
        })
        .await;
    let mut objects = vec![json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
        "metadata": {"name": "default"},
        "spec": {"routes": [{"to": "10.200.0.0/16", "via": "192.0.2.1"}]},
    })];
    for p in 0..NODE_CONFIGS {
        objects.push(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
            "metadata": {"name": format!("pool-{p:02}")},
            "spec": {"nodeSelector": {"matchLabels": {"pool": format!("p{p:02}")}},
                     "routes": [{"to": format!("10.{}.0.0/16", 100 + p), "via": "192.0.2.1"}]},
        }));
    }
    for r in 0..RANGES {
        objects.push(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
            "metadata": {"name": format!("scale-{r}")},
            "spec": {"cidrs": [format!("10.{}.0.0/18", 96 + r)],
                     "kubeVip": {"publish": true, "namespace": vip_ns, "configMap": "kubevip"}},
        }));
    }
    objects.push(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RouteReflectorConfig",
        "metadata": {"name": "default"}, "spec": {"min": 3, "max": 10, "stepDelaySeconds": 0},
    }));
    objects.push(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
        "metadata": {"name": "mem"}, "spec": {"memory": {}},
    }));
    for i in 0..ROUTED_IPS {
        objects.push(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
            "metadata": {"name": format!("rip-{i:02}")},
            "spec": {"issuerRef": {"name": "mem"},
                     "nodeSelector": {"matchLabels": {"pool": format!("p{:02}", i % NODE_CONFIGS)}}},
        }));
    }
    for i in 0..FIPS {
        objects.push(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
            "metadata": {"name": format!("ip-{i:05}"), "namespace": namespaces[i % NAMESPACES]},
            "spec": {"range": format!("scale-{}", i % RANGES)},
        }));
    }
    apply(&client, objects).await;
    let workload_took = t.elapsed();
    let writes_at_operator = cp.all_writes().len();
    // The baseline: the API server's own write pace in this run, with CONCURRENCY
    // requests in flight (every write of the workload counted from the audit log).
    let pace = (writes_at_operator - writes_at_start) as f64 / workload_took.as_secs_f64();
    let cpu = common::control_plane_cpu(cp);
    println!(
        "workload created in {workload_took:?}: {} writes, the API server's pace {pace:.0} \
         writes/s; CPU meanwhile: kube-apiserver {:.1} s, etcd {:.1} s",
        writes_at_operator - writes_at_start,
        cpu.0 - cpu_before_workload.0,
        cpu.1 - cpu_before_workload.1
    );

    let before_watches = common::watches(&client).await;
    let bin =
        std::env::var("NETPOLICY_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_netpolicy").into());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = cp.dir.join("operator-runtime-scale.log");
    let mut audit = cp.follow_writes();
    let requests_at_operator = common::requests(&client).await;
    let started = Instant::now();
    let op = common::Killed(
        std::process::Command::new(&bin)
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args(["--lease-namespace", &system, "--lease-seconds", "15"])
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--resync-seconds",
                "300",
            ])
            .env("RUST_LOG", "warn")
            .envs(common::image_env())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let pid = op.0.id();
    println!("binary: {bin}");
    let cpu_at_start = common::control_plane_cpu(cp);

    // Converged: every node's NodeNetworkConfig, every FloatingIP's address, every
    // RoutedIP Ready, the route reflectors settled.
    let nncs: Api<NodeNetworkConfig> = Api::all(client.clone());
    let fips: Api<FloatingIP> = Api::all(client.clone());
    let rips: Api<RoutedIP> = Api::all(client.clone());
    // NodeNetworkConfigs and FloatingIPs counted from the API server's audit log (only
    // its new lines each round), not from watches or lists: the workload's baseline had
    // neither, and watches of 10,000 FloatingIPs had this process decode every status on
    // the same two cores (2026-12-02). A node's NodeNetworkConfig counts once a write of
    // it was answered; the FloatingIPs once each had a status written, confirmed by one
    // list that each has its address (listed again each second until then).
    let mut nnc_written: BTreeSet<String> = BTreeSet::new();
    let mut fip_written: BTreeSet<(String, String)> = BTreeSet::new();
    let mut fips_addressed = 0;
    let mut last_fip_list: Option<Instant> = None;
    let mut seen = BTreeMap::new();
    loop {
        for w in audit.next_writes().into_iter().filter(|w| w.code < 300) {
            match (w.resource.as_str(), w.subresource.as_str()) {
                ("nodenetworkconfigs", "") => {
                    nnc_written.insert(w.name);
                }
                ("floatingips", "status") => {
                    fip_written.insert((w.namespace, w.name));
                }
                _ => {}
            }
        }
        let n = nnc_written.len();
        if fip_written.len() >= FIPS
            && fips_addressed < FIPS
            && last_fip_list.is_none_or(|t| t.elapsed() > Duration::from_secs(1))
        {
            last_fip_list = Some(Instant::now());
            fips_addressed = fips
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|f| f.status.as_ref().and_then(|s| s.address.as_ref()).is_some())
                .count();
        }
        let f = fips_addressed;
        let r = rips
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|r| {
                r.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
            .count();
        let rr = common::rrc_status(&client).await.is_some_and(|s| {
            s.transition.is_none()
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == "Settled")
        });
        for (what, done) in [
            ("NodeNetworkConfigs", n),
            ("FloatingIPs", f),
            ("RoutedIPs", r),
            ("reflectors settled", usize::from(rr)),
        ] {
            let target = match what {
                "NodeNetworkConfigs" => NODES,
                "FloatingIPs" => FIPS,
                "RoutedIPs" => ROUTED_IPS,
                _ => 1,
            };
            if done >= target && !seen.contains_key(what) {
                println!("{what}: all {target} after {:?}", started.elapsed());
                seen.insert(what, started.elapsed());
            }
        }
        if seen.len() == 4 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "not converged: {n} NodeNetworkConfigs written, {} FloatingIP statuses written \
             ({f} with an address), {r} RoutedIPs, reflectors {rr}",
            fip_written.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cpu = common::control_plane_cpu(cp);
    println!(
        "converged {:?} after the operator started; CPU meanwhile: operator {:.1} s, \
         kube-apiserver {:.1} s, etcd {:.1} s",
        started.elapsed(),
        common::cpu_seconds(pid),
        cpu.0 - cpu_at_start.0,
        cpu.1 - cpu_at_start.1
    );
    println!(
        "what the API server served until converged: {}",
        served_since(&client, &requests_at_operator).await
    );
    // Each kind's writes against what the API server's pace would take for them.
    let writes = cp.all_writes().split_off(writes_at_operator);
    let count = |resource: &str, sub: &str, verb: Option<&str>| {
        writes
            .iter()
            .filter(|w| {
                w.resource == resource
                    && w.subresource == sub
                    && verb.is_none_or(|v| w.verb == v)
                    && w.code < 300
            })
            .count()
    };
    let nnc_writes = count("nodenetworkconfigs", "", None);
    let fip_writes =
        count("floatingipclaims", "", Some("create")) + count("floatingips", "status", None);
    for (what, n, took) in [
        ("NodeNetworkConfigs", nnc_writes, seen["NodeNetworkConfigs"]),
        (
            "FloatingIPs (claims + statuses)",
            fip_writes,
            seen["FloatingIPs"],
        ),
    ] {
        let at_pace = n as f64 / pace;
        println!(
            "{what}: {n} writes in {:.1} s; at the API server's pace {at_pace:.1} s: {:.2}×",
            took.as_secs_f64(),
            took.as_secs_f64() / at_pace
        );
    }
    // Both jobs write at once to one API server: each kind's ratio counts the other's
    // writes against it; all of them together against the pace is the operator's own.
    let converged = seen
        .values()
        .max()
        .copied()
        .unwrap_or_default()
        .as_secs_f64();
    println!(
        "every write of the operator until converged: {} ({} Events) in {converged:.1} s; \
         at the API server's pace {:.1} s: {:.2}×",
        writes.len(),
        count("events", "", None),
        writes.len() as f64 / pace,
        converged / (writes.len() as f64 / pace)
    );
    println!(
        "/readyz 200: {}",
        common::http_get(port, "/readyz").is_some_and(|(c, _)| c == 200)
    );
    let after_watches = common::watches(&client).await;
    let mut streams = 0;
    for (r, n) in &after_watches {
        let d = n - before_watches.get(r).copied().unwrap_or(0);
        if d != 0 {
            println!("WATCH {r}: {d}");
            streams += d;
        }
    }
    println!("{streams} WATCH streams from the operator");
    println!(
        "operator resident memory: {} MiB (peak so far {} MiB)",
        common::rss_kib(pid) / 1024,
        common::peak_rss_kib(pid) / 1024
    );

    // A cluster-wide edit, timed from the API server's audit log: the edit is done when
    // every NodeNetworkConfig has had a write answered since it, confirmed afterwards by
    // one list that each has the edit. The log is read from where it ended before the
    // edit (only new lines), so the run adds no request to the API server while it takes
    // the writes being timed: not a list of all 10,000 every 500 ms (~20 MB to encode
    // each), and not a second full watch, which (2026-12-01) had this process decode
    // every write on the same two cores.
    let requests_before_edit = common::requests(&client).await;
    let mut audit = cp.follow_writes();
    let writes_before_edit = cp.all_writes().len();
    let cpu_before_edit = (common::cpu_seconds(pid), common::control_plane_cpu(cp));
    let edit = Instant::now();
    Api::<ClusterConfig>::all(client.clone())
        .patch(
            "default",
            &PatchParams::apply("scale-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
                "metadata": {"name": "default"},
                "spec": {"routes": [{"to": "10.201.0.0/16", "via": "192.0.2.1"}]},
            })),
        )
        .await
        .unwrap();
    let has_edit = |o: &NodeNetworkConfig| {
        o.spec
            .rendered
            .routes
            .iter()
            .any(|r| r.item.to == "10.201.0.0/16")
    };
    let mut written: BTreeSet<String> = BTreeSet::new();
    loop {
        written.extend(
            audit
                .next_writes()
                .into_iter()
                .filter(|w| {
                    w.resource == "nodenetworkconfigs" && w.subresource.is_empty() && w.code < 300
                })
                .map(|w| w.name),
        );
        if written.len() >= NODES {
            break;
        }
        assert!(
            edit.elapsed() < Duration::from_secs(900),
            "{} of {NODES} NodeNetworkConfigs written since the edit",
            written.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let edit_took = edit.elapsed();
    let cpu_after_edit = (common::cpu_seconds(pid), common::control_plane_cpu(cp));
    println!(
        "what the API server served during the edit: {}",
        served_since(&client, &requests_before_edit).await
    );
    // Every one written since the edit; each must have it (a write of an older render
    // would be a defect the timing above cannot see).
    let stale: Vec<String> = nncs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| !has_edit(o))
        .map(|o| o.name_any())
        .collect();
    assert!(
        stale.is_empty(),
        "{} NodeNetworkConfigs written since the edit lack it, e.g. {:?}",
        stale.len(),
        stale.first()
    );
    let edit_writes = cp.all_writes().split_off(writes_before_edit);
    let nnc_edit_writes = edit_writes
        .iter()
        .filter(|w| w.resource == "nodenetworkconfigs" && w.subresource.is_empty() && w.code < 300)
        .count();
    let at_pace = nnc_edit_writes as f64 / pace;
    println!(
        "cluster-wide edit: every NodeNetworkConfig current after {edit_took:?}; \
         {nnc_edit_writes} NodeNetworkConfig writes ({} writes in all); at the API server's \
         pace {at_pace:.1} s: {:.2}×",
        edit_writes.len(),
        edit_took.as_secs_f64() / at_pace
    );
    println!(
        "CPU during the edit: operator {:.1} s, kube-apiserver {:.1} s, etcd {:.1} s (2 cores: \
         {:.1} s available)",
        cpu_after_edit.0 - cpu_before_edit.0,
        cpu_after_edit.1.0 - cpu_before_edit.1.0,
        cpu_after_edit.1.1 - cpu_before_edit.1.1,
        2.0 * edit_took.as_secs_f64()
    );

    // One new FloatingIP: until its claim is written (a watch on the claims started
    // before it, as the operator's own would see it) and until its status has the
    // address.
    let one = Api::<FloatingIP>::namespaced(client.clone(), &namespaces[0]);
    let claims = kube::runtime::watcher(
        Api::<netpolicy_operator::api::FloatingIPClaim>::all(client.clone()),
        kube::runtime::watcher::Config::default(),
    );
    let mut claims = std::pin::pin!(claims);
    // The watch's initial list (10,000 claims) first.
    while let Some(ev) = claims.next().await {
        if matches!(ev, Ok(kube::runtime::watcher::Event::InitDone)) {
            break;
        }
    }
    let new = Instant::now();
    one.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
            "metadata": {"name": "one-more"}, "spec": {"range": "scale-0"},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let created = new.elapsed();
    let claimed = tokio::time::timeout(Duration::from_secs(300), async {
        while let Some(ev) = claims.next().await {
            if let Ok(kube::runtime::watcher::Event::Apply(c)) = ev
                && c.spec.owner.name == "one-more"
            {
                return new.elapsed();
            }
        }
        panic!("the claims' watch ended");
    })
    .await
    .expect("no claim for the new FloatingIP within 300 s");
    loop {
        if one
            .get("one-more")
            .await
            .unwrap()
            .status
            .and_then(|s| s.address)
            .is_some()
        {
            break;
        }
        assert!(new.elapsed() < Duration::from_secs(300));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "a new FloatingIP: created (the API server's answer) after {created:?}, its claim \
         written after {claimed:?} ({:?} after the create returned), its status had the \
         address after {:?}",
        claimed.saturating_sub(created),
        new.elapsed()
    );

    // Quiet.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let quiet: u64 = std::env::var("NETPOLICY_QUIET_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let count = || {
        [
            "nodenetworkconfigs",
            "clusterconfigs",
            "nodeconfigs",
            "floatingips",
            "floatingipclaims",
            "floatingipranges",
            "configmaps",
            "routedips",
            "routedipissuers",
            "routereflectorconfigs",
            "bgppeers",
            "nodes",
            "events",
        ]
        .iter()
        .map(|r| cp.writes_where(r, |_| true).len())
        .sum::<usize>()
    };
    let before = count();
    tokio::time::sleep(Duration::from_secs(quiet)).await;
    let writes = count() - before;
    println!("API writes over {quiet} quiet seconds: {writes}");
    println!(
        "operator resident memory at the end: {} MiB (peak {} MiB)",
        common::rss_kib(pid) / 1024,
        common::peak_rss_kib(pid) / 1024
    );
    drop(op);
}

/// The reported runs take the shared control plane whole: none measures while another
/// writes.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What one write of a NodeNetworkConfig costs the API server, per verb: the routing
/// job's server-side apply against a create (POST), an update (PUT over the version it
/// read), a JSON merge patch and a JSON patch replacing the spec, of objects shaped as the
/// job writes them (the scale workload's: two routes, their sources, a revision, the Node
/// as owner). `VERB_OBJECTS` (default 3,000) objects per verb, 32 at a time
/// (`--write-concurrency`'s default), every change verb `VERB_ROUNDS` times (default 3)
/// in turn, so that a slow moment of the machine falls on every verb alike. Nothing
/// watches the objects (a watcher adds its own cost to every verb).
///
/// ```sh
/// cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture runtime_scale::write_verbs
/// ```
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (minutes): cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture runtime_scale::write_verbs"]
async fn write_verbs_of_a_node_network_config() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (n, rounds) = verb_settings();
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let api: Api<NodeNetworkConfig> = Api::all(client.clone());
    let object = |name: &str, via: &str| -> NodeNetworkConfig {
        let route = |to: &str, kind: &str, policy: &str| {
            json!({"to": to, "via": via, "table": 254, "metric": 0,
                   "sources": [{"kind": kind, "name": policy}]})
        };
        serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
            "metadata": {
                "name": name,
                "labels": {"app.kubernetes.io/managed-by": "netpolicy"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                     "uid": "6f1c1d0e-0000-4000-8000-000000000000"}],
            },
            "spec": {
                "revision": format!("{:016x}", netpolicy_core::hash::fnv1a(&[via])),
                "rendered": {"vlans": [], "addresses": [], "rules": [], "routes": [
                    route("10.101.0.0/16", "NodeConfig", "pool-01"),
                    route("10.200.0.0/16", "ClusterConfig", "default"),
                ]},
            },
        }))
        .unwrap()
    };
    // Each verb its own objects: created by an apply for "apply", by a POST for the rest.
    const VERBS: [&str; 5] = [
        "apply",
        "update",
        "merge patch",
        "json patch",
        "apply (no change)",
    ];
    let names = |verb: &str| -> Vec<String> {
        let v = VERBS.iter().position(|x| *x == verb).unwrap();
        (0..n).map(|i| format!("verb-{v}-{i:05}")).collect()
    };
    let mut versions: BTreeMap<String, String> = BTreeMap::new();
    let mut per_write: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut steps = vec![("apply (create)", names("apply"), 0)];
    for v in ["update", "merge patch", "json patch"] {
        steps.push(("create", names(v), 0));
    }
    steps.push(("apply (create)", names("apply (no change)"), 0));
    for round in 1..=rounds {
        for v in VERBS {
            steps.push((v, names(v), round));
        }
    }
    for (verb, names, round) in steps {
        // A new next hop every round: each write changes the spec (but the no-change
        // apply's, which sends what the object already has).
        let via = match verb {
            "apply (no change)" => "192.0.2.1".to_owned(),
            _ => format!("192.0.2.{}", 1 + round),
        };
        let writes_before = cp.all_writes().len();
        let cpu_before = common::control_plane_cpu(cp);
        let t = Instant::now();
        let answers: Vec<(String, String)> = stream::iter(names)
            .map(|name| {
                let api = api.clone();
                let mut obj = object(&name, &via);
                let over = versions.get(&name).cloned();
                async move {
                    let written = match verb {
                        "create" => api.create(&PostParams::default(), &obj).await,
                        "update" => {
                            obj.metadata.resource_version = over;
                            api.replace(&name, &PostParams::default(), &obj).await
                        }
                        "merge patch" => {
                            api.patch(
                                &name,
                                &PatchParams::default(),
                                &Patch::Merge(json!({"spec": obj.spec})),
                            )
                            .await
                        }
                        "json patch" => {
                            let p = serde_json::from_value(json!([
                                {"op": "replace", "path": "/spec", "value": obj.spec}
                            ]))
                            .unwrap();
                            api.patch(&name, &PatchParams::default(), &Patch::Json::<()>(p))
                                .await
                        }
                        _ => {
                            let pp = PatchParams::apply("netpolicy-operator").force();
                            api.patch(&name, &pp, &Patch::Apply(&obj)).await
                        }
                    }
                    .unwrap_or_else(|e| panic!("{verb} of {name}: {e}"));
                    (name, written.metadata.resource_version.unwrap_or_default())
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        let took = t.elapsed();
        let cpu = common::control_plane_cpu(cp);
        let writes = cp.all_writes().len() - writes_before;
        versions.extend(answers);
        let (api_s, etcd_s) = (cpu.0 - cpu_before.0, cpu.1 - cpu_before.1);
        let ms = 1000.0 * api_s / n as f64;
        println!(
            "{verb:>17} (round {round}): {n} in {:.1} s ({:.0}/s, {writes} writes audited); \
             kube-apiserver {api_s:.1} s CPU ({ms:.2} ms a write), etcd {etcd_s:.1} s ({:.2} ms)",
            took.as_secs_f64(),
            n as f64 / took.as_secs_f64(),
            1000.0 * etcd_s / n as f64,
        );
        per_write.entry(verb).or_default().push(ms);
    }
    print_medians("a write", &per_write);
}

/// What one status write of a FloatingIP costs the API server, per verb: the job's
/// server-side apply of the status (`k8s::apply_status`) against an update of the status
/// subresource over the version read and a JSON merge patch of it, the status shaped as
/// the job writes it (the address and its `Allocated` condition). `VERB_OBJECTS` (default
/// 3,000) FloatingIPs per verb, 32 at a time, `VERB_ROUNDS` (default 3) rounds in turn, a
/// new address each round. Nothing watches them.
///
/// ```sh
/// cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture runtime_scale::status_verbs
/// ```
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (minutes): cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture runtime_scale::status_verbs"]
async fn status_verbs_of_a_floating_ip() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (n, rounds) = verb_settings();
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let ns = cp.namespace("status-verbs").await;
    let api: Api<FloatingIP> = Api::namespaced(client.clone(), &ns);
    const VERBS: [&str; 3] = ["apply", "update", "merge patch"];
    let names = |v: usize| -> Vec<String> { (0..n).map(|i| format!("fip-{v}-{i:05}")).collect() };
    let mut stored: BTreeMap<String, FloatingIP> = BTreeMap::new();
    for v in 0..VERBS.len() {
        let made: Vec<FloatingIP> = stream::iter(names(v))
            .map(|name| {
                let api = api.clone();
                async move {
                    let o: FloatingIP = serde_json::from_value(json!({
                        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
                        "metadata": {"name": name}, "spec": {"range": "scale-0"},
                    }))
                    .unwrap();
                    api.create(&PostParams::default(), &o).await.unwrap()
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        stored.extend(
            made.into_iter()
                .map(|o| (o.metadata.name.clone().unwrap(), o)),
        );
    }
    let mut per_write: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for round in 1..=rounds {
        for (v, verb) in VERBS.into_iter().enumerate() {
            let cpu_before = common::control_plane_cpu(cp);
            let t = Instant::now();
            let written: Vec<FloatingIP> = stream::iter(names(v).into_iter().enumerate())
                .map(|(i, name)| {
                    let api = api.clone();
                    let cur = stored[&name].clone();
                    async move {
                        let status = json!({
                            "address": format!("10.{}.{}.{}", 96 + round, i / 250, i % 250 + 1),
                            "conditions": [{
                                "type": "Allocated", "status": "True", "reason": "Allocated",
                                "message": format!("from FloatingIPRange scale-0 (round {round})"),
                                "lastTransitionTime": "2026-12-02T00:00:00Z",
                                "observedGeneration": 1,
                            }],
                        });
                        match verb {
                            "update" => {
                                let mut next = cur;
                                next.status = Some(serde_json::from_value(status).unwrap());
                                api.replace_status(&name, &PostParams::default(), &next)
                                    .await
                            }
                            "merge patch" => {
                                api.patch_status(
                                    &name,
                                    &PatchParams::default(),
                                    &Patch::Merge(json!({"status": status})),
                                )
                                .await
                            }
                            _ => {
                                api.patch_status(
                                    &name,
                                    &PatchParams::apply("netpolicy-operator").force(),
                                    &Patch::Apply(json!({
                                        "apiVersion": "netpolicy.io/v1alpha1",
                                        "kind": "FloatingIP", "status": status,
                                    })),
                                )
                                .await
                            }
                        }
                        .unwrap_or_else(|e| panic!("{verb} of {name}'s status: {e}"))
                    }
                })
                .buffer_unordered(32)
                .collect()
                .await;
            let took = t.elapsed();
            let cpu = common::control_plane_cpu(cp);
            stored.extend(
                written
                    .into_iter()
                    .map(|o| (o.metadata.name.clone().unwrap(), o)),
            );
            let ms = 1000.0 * (cpu.0 - cpu_before.0) / n as f64;
            println!(
                "{verb:>11} (round {round}): {n} statuses in {:.1} s; kube-apiserver {ms:.2} ms \
                 CPU a write, etcd {:.2} ms",
                took.as_secs_f64(),
                1000.0 * (cpu.1 - cpu_before.1) / n as f64,
            );
            per_write.entry(verb).or_default().push(ms);
        }
    }
    print_medians("a status write", &per_write);
}

/// The verb runs' sizes: `VERB_OBJECTS` objects per verb (default 3,000) and
/// `VERB_ROUNDS` rounds (default 3).
fn verb_settings() -> (usize, usize) {
    let setting = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    (setting("VERB_OBJECTS", 3_000), setting("VERB_ROUNDS", 3))
}

/// Each verb's median API server CPU per write over its rounds, and its ratio to the
/// apply's.
fn print_medians(what: &str, per_write: &BTreeMap<&str, Vec<f64>>) {
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let apply = median(&per_write["apply"]);
    for (verb, ms) in per_write {
        println!(
            "{verb:>17}: median {:.2} ms of API server CPU {what} (of {ms:.2?}), {:.2}× an \
             apply's",
            median(ms),
            median(ms) / apply
        );
    }
}

/// The requests the API server served since `before` (a [`common::requests`] reading),
/// by verb and resource, and the watch events it sent by resource: `PUT
/// nodenetworkconfigs 10000, ..., WATCH EVENT nodenetworkconfigs 10000`.
async fn served_since(client: &Client, before: &BTreeMap<String, f64>) -> String {
    let served: Vec<String> = common::requests(client)
        .await
        .into_iter()
        .filter_map(|(k, n)| {
            let d = n - before.get(&k).copied().unwrap_or(0.0);
            (d >= 1.0).then(|| format!("{} {d:.0}", k.trim()))
        })
        .collect();
    served.join(", ")
}
