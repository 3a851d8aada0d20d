//! The outcome a user pays for, on a real three-node cluster (`scripts/node-cluster up
//! --nodes 3`: per node a kubelet, containerd and kube-proxy, each node's host network
//! a network namespace, the nodes and a client machine on one bridge, pods routed
//! between nodes). Started once; one test, in the order a platform team meets it:
//!
//! 1. **Installed from the Helm repository**, as docs/guides/install.md says: `helm
//!    package` + `helm repo index` served over HTTP, `helm repo add`, `helm install`.
//! 2. **A Service answers on its floating address**: a FloatingIPRange publishing to
//!    kube-vip, the real kube-vip-cloud-provider v0.0.12 (built from its Go module by
//!    scripts/test-tools, installed from its own manifest) gives a LoadBalancer Service
//!    the FloatingIP's address, and a client on the segment reaches the Service's pods
//!    on it through kube-proxy. kube-vip itself is not served by the Go module proxy
//!    here, so the test does what it does after winning its election: writes
//!    `status.loadBalancer.ingress` and `kube-vip.io/vipHost`, and routes the address to
//!    that node (instead of answering ARP). Measured over 20 runs.
//! 3. **Guest installs that start**: the cluster registered as a Rancher guest of a
//!    management API server (the test's own, with its own operator): netpolicy installs
//!    kube-vip-cloud-provider there, its pod becomes Ready, a Service gets the guest's
//!    `cidr-global` address and answers; then again with `kubeVip.namespace` another
//!    namespace (kube-fip installs into its `kubevipNamespace`).
//! 4. **A rollout across real nodes**: a probe that fails on the first node of the
//!    wave: it rolls back by itself, the rollout halts there, the other nodes keep their
//!    last good config; the fix rolls out to every node.
//! 5. **Failover on a real node loss**: the kubelet, kube-proxy, pods and containerd of
//!    the node holding a RoutedIP (Hetzner's API served locally) stopped; the real node
//!    lifecycle controller marks it NotReady; the IP and its return routing move; the
//!    node comes back: no flap back, nothing assigned twice.
//!
//! Run by `scripts/test` after it built the image (`NETPOLICY_NODE_IMAGE`):
//! `cargo test -p netpolicy-operator --test integration -- --ignored --nocapture three_nodes::`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use common::apply;
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::{ConfigMap, Namespace, Node, Pod, Service},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use netpolicy_testenv::{
    eventually_some as until,
    node::{self, CLIENT_IP, CLIENT_NETNS, HOST_IP, NODE_MONITOR_GRACE_SECS, NodeCluster},
};
use serde_json::{Value, json};

const RELEASE_NS: &str = "netpolicy-system";
/// The application: its pods (one per node), its Services, its FloatingIPs.
const WEB: &str = "web";
const NODES: usize = 3;
/// Runs of "FloatingIP created → Service answering".
const RUNS: usize = 20;

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn netpolicy(kind: &str, plural: &str) -> ApiResource {
    ar("netpolicy.io", "v1alpha1", kind, plural)
}

/// What the cluster looks like, for failure messages: pods, and the operator's logs.
fn state(cluster: &NodeCluster) -> String {
    format!(
        "pods:\n{}\nnetpolicy's logs:\n{}",
        cluster
            .run(&["kubectl", "get", "pods", "-A", "-o", "wide"])
            .unwrap_or_else(|e| e),
        cluster
            .run(&[
                "kubectl",
                "-n",
                RELEASE_NS,
                "logs",
                "--all-containers",
                "--prefix",
                "--tail=30",
                "-l",
                "app.kubernetes.io/name=netpolicy",
            ])
            .unwrap_or_else(|e| e)
    )
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    format!(
        "p50 {:.2} s, max {:.2} s over {} runs",
        v[v.len() / 2].as_secs_f64(),
        v[v.len() - 1].as_secs_f64(),
        v.len()
    )
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and netpolicy's image (NETPOLICY_NODE_IMAGE); scripts/test runs it"]
async fn three_real_nodes_serve_what_users_pay_for() {
    if let Some(why) = NodeCluster::unavailable() {
        eprintln!("SKIP three real nodes: {why}");
        return;
    }
    let t0 = Instant::now();
    let cluster = NodeCluster::up_nodes(NODES, 3600).unwrap();
    let client = cluster.client().await;

    // The application's namespace first: the chart grants the operator its cloud token
    // Secret there.
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WEB}}),
    )
    .await;
    install_from_the_repository(&cluster);
    eprintln!(
        "installed from the repository ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    echo_pods(&cluster, &client).await;
    eprintln!(
        "memory of the three-node cluster with the chart and the echo pods: {} MiB",
        cluster.run(&["memory"]).unwrap().trim()
    );
    a_service_answers_on_its_floating_ip(&cluster, &client).await;
    eprintln!(
        "floating IPs answered ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    guest_installs_that_start(&cluster, &client).await;
    eprintln!(
        "guest installs started ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    a_rollout_across_real_nodes(&cluster, &client).await;
    eprintln!("rollout done ({:.0} s)", t0.elapsed().as_secs_f64());
    failover_on_a_real_node_loss(&cluster, &client).await;
    eprintln!("three-node run: {:.0} s", t0.elapsed().as_secs_f64());
    let t = Instant::now();
    drop(cluster);
    eprintln!(
        "three-node cluster down in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// docs/guides/install.md's repository commands, against the chart packaged and
/// indexed as a release publishes it, served over HTTP.
fn install_from_the_repository(cluster: &NodeCluster) {
    let chart = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/netpolicy");
    let repo = netpolicy_testenv::HelmRepo::publish(&chart);
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let helm = |args: &[&str]| {
        let t = Instant::now();
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", &kubeconfig]);
        if let Err(e) = repo.try_run(&all) {
            panic!("{e}\n{}", state(cluster));
        }
        eprintln!("  helm {}: {:.1} s", args[0], t.elapsed().as_secs_f64());
    };
    // As install.md says, with the repository's address here.
    helm(&["repo", "add", "netpolicy", &repo.url]);
    let state_dir = format!("agent.stateDir={}/agent-state", cluster.dir.display());
    helm(&[
        "install",
        "netpolicy",
        "netpolicy/netpolicy",
        "-n",
        RELEASE_NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
        "--set",
        &state_dir,
        "--set",
        &format!("routedIPs.tokenSecrets[0].namespace={WEB}"),
        "--set",
        "routedIPs.tokenSecrets[0].name=hcloud",
    ]);
}

/// The application: one echo pod per node (scripts/node/echo.c answers with its pod's
/// name), so that a client learns which pod, on which node, answered.
async fn echo_pods(cluster: &NodeCluster, client: &Client) {
    apply(client, json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "echo", "namespace": WEB},
        "spec": {
            "replicas": NODES,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "echo"}}}],
                    "containers": [{"name": "echo", "image": "localhost/netpolicy-node/echo:1",
                                    "imagePullPolicy": "Never", "ports": [{"containerPort": 8080}]}]
                }
            }
        }
    }))
    .await;
    let nodes = until(
        "an echo pod Ready on every node",
        120,
        || state(cluster),
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), WEB)
                .list(&ListParams::default().labels("app=echo"))
                .await
                .ok()?;
            let mut nodes: Vec<String> = pods
                .items
                .iter()
                .filter(|p| common::pod_ready(p))
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            nodes.sort();
            nodes.dedup();
            (nodes.len() == NODES).then_some(nodes)
        },
    )
    .await;
    eprintln!("  echo pods on {nodes:?}");
}

/// `GET http://<address>/` from the client machine: the pod that answered.
fn from_client(cluster: &NodeCluster, address: &str) -> Option<String> {
    cluster
        .in_netns(
            CLIENT_NETNS,
            "curl",
            // A short timeout: before kube-proxy serves the address nothing answers, and
            // the measured time should not be the timeout's.
            &["-s", "-m", "0.5", &format!("http://{address}/")],
        )
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| s.starts_with("echo-"))
}

/// What kube-vip does once its election for a Service is won (kube-vip is not served
/// by the Go module proxy here): the Service's `status.loadBalancer.ingress` and
/// `kube-vip.io/vipHost` say where the address is, and the segment reaches it on that
/// node — a route on the client instead of kube-vip's gratuitous ARP.
async fn announce_as_kube_vip(
    cluster: &NodeCluster,
    services: &Api<Service>,
    name: &str,
    address: &str,
    node: usize,
) {
    let (node_name, node_ip) = node::node(node);
    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"kube-vip.io/vipHost": node_name}}})),
        )
        .await
        .unwrap();
    services
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": address}]}}})),
        )
        .await
        .unwrap();
    cluster
        .in_netns(
            CLIENT_NETNS,
            "ip",
            &[
                "route",
                "replace",
                &format!("{address}/32"),
                "via",
                &node_ip,
            ],
        )
        .unwrap();
}

/// The address kube-vip-cloud-provider gave a Service (its annotation, as kube-vip
/// reads it; `spec.loadBalancerIP` as older kube-vip reads it), once given.
fn provider_address(s: &Service) -> Option<String> {
    s.annotations()
        .get("kube-vip.io/loadbalancerIPs")
        .cloned()
        .or_else(|| s.spec.as_ref()?.load_balancer_ip.clone())
}

fn load_balancer(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": WEB},
        "spec": {"type": "LoadBalancer", "selector": {"app": "echo"},
                 "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap()
}

/// Waits for Deployment `ns/name` to have a Ready replica.
async fn deployment_ready(cluster: &NodeCluster, client: &Client, ns: &str, name: &str) {
    until(
        &format!("Deployment {ns}/{name} Ready"),
        120,
        || state(cluster),
        || async {
            let d = Api::<Deployment>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await
                .ok()??;
            (d.status?.ready_replicas? >= 1).then_some(())
        },
    )
    .await;
}

async fn a_service_answers_on_its_floating_ip(cluster: &NodeCluster, client: &Client) {
    // kube-vip-cloud-provider from its own manifest, as its README installs it. Its
    // `imagePullPolicy: Always` needs a registry; the image is imported into every
    // node's containerd instead, so that one field says IfNotPresent.
    let manifest =
        std::fs::read_to_string(netpolicy_testenv::tool("kube-vip-cloud-controller.yaml")).unwrap();
    assert!(manifest.contains("imagePullPolicy: Always"));
    let manifest_file = cluster.dir.join("kube-vip-cloud-controller.yaml");
    std::fs::write(
        &manifest_file,
        manifest.replace("imagePullPolicy: Always", "imagePullPolicy: IfNotPresent"),
    )
    .unwrap();
    cluster
        .run(&["kubectl", "apply", "-f", manifest_file.to_str().unwrap()])
        .unwrap();
    deployment_ready(cluster, client, "kube-system", "kube-vip-cloud-provider").await;

    apply(
        client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
            "metadata": {"name": "segment"},
            "spec": {"cidrs": ["10.231.0.192/28"], "kubeVip": {"publish": true}}
        }),
    )
    .await;
    let fips = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        WEB,
        &netpolicy("FloatingIP", "floatingips"),
    );
    let services = Api::<Service>::namespaced(client.clone(), WEB);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    let published = |address: String| {
        let config_maps = config_maps.clone();
        async move {
            config_maps
                .get_opt("kubevip")
                .await
                .ok()??
                .data?
                .get(&format!("cidr-{WEB}"))
                .is_some_and(|v| v.split(',').any(|a| a == format!("{address}/32")))
                .then_some(())
        }
    };
    let (mut total, mut assigned) = (Vec::new(), Vec::new());
    let mut answered_by = std::collections::BTreeSet::new();
    for run in 0..RUNS {
        let name = format!("lb-{run}");
        let t = Instant::now();
        let fip: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
            "metadata": {"name": name, "namespace": WEB}, "spec": {"range": "segment"}
        }))
        .unwrap();
        fips.create(&PostParams::default(), &fip).await.unwrap();
        let address = until(
            "the FloatingIP has its address",
            60,
            || state(cluster),
            || async {
                let o = fips.get(&name).await.ok()?;
                o.data["status"]["address"].as_str().map(str::to_owned)
            },
        )
        .await;
        until(
            "kube-vip's ConfigMap holds it",
            60,
            || state(cluster),
            || published(address.clone()),
        )
        .await;
        // The user's Service, once the address is published.
        services
            .create(&PostParams::default(), &load_balancer(&name))
            .await
            .unwrap();
        let given = until(
            "kube-vip-cloud-provider gives the Service an address",
            60,
            || {
                cluster
                    .run(&[
                        "kubectl",
                        "-n",
                        "kube-system",
                        "logs",
                        "deploy/kube-vip-cloud-provider",
                        "--tail=20",
                    ])
                    .unwrap_or_else(|e| e)
            },
            || async { provider_address(&services.get(&name).await.ok()?) },
        )
        .await;
        assert_eq!(
            given, address,
            "the provider hands out the FloatingIP's address"
        );
        assigned.push(t.elapsed());
        announce_as_kube_vip(cluster, &services, &name, &address, 1 + run % NODES).await;
        let pod = until(
            "the Service answers on the floating address",
            60,
            || state(cluster),
            || async { from_client(cluster, &address) },
        )
        .await;
        total.push(t.elapsed());
        answered_by.insert(pod);
        // Gone again, so that every run starts from the same pool.
        services
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        fips.delete(&name, &DeleteParams::default()).await.unwrap();
        cluster
            .in_netns(
                CLIENT_NETNS,
                "ip",
                &["route", "del", &format!("{address}/32")],
            )
            .unwrap();
        until(
            "the address is unpublished",
            60,
            || state(cluster),
            || async { published(address.clone()).await.is_none().then_some(()) },
        )
        .await;
    }
    eprintln!(
        "  FloatingIP created → kube-vip-cloud-provider gave its Service the address: {}",
        percentiles(assigned)
    );
    eprintln!(
        "  FloatingIP created → the Service answers on it (client {CLIENT_IP} → node → pod): {}",
        percentiles(total)
    );
    eprintln!("  answered by {answered_by:?}");
    // The local floating-IP setup goes before the guest part uses the same ConfigMap.
    Api::<DynamicObject>::all_with(
        client.clone(),
        &netpolicy("FloatingIPRange", "floatingipranges"),
    )
    .delete("segment", &DeleteParams::default())
    .await
    .unwrap();
    cluster
        .run(&[
            "kubectl",
            "delete",
            "-f",
            manifest_file.to_str().unwrap(),
            "--wait",
        ])
        .unwrap();
    config_maps
        .delete("kubevip", &DeleteParams::default())
        .await
        .ok();
}

/// The guest part: the node cluster as a Rancher guest of the test's own management API
/// server, whose operator installs kube-vip-cloud-provider in it.
async fn guest_installs_that_start(cluster: &NodeCluster, guest: &Client) {
    let cp = netpolicy_testenv::shared();
    let mgmt = cp.client().await;
    netpolicy_testenv::install_crds(&mgmt, netpolicy_operator::api::crds()).await;
    netpolicy_testenv::install_crds(&mgmt, vec![common::rancher_crd()]).await;
    let system = cp.namespace("mgmt-system").await;
    let fleet = cp.namespace("fleet-default").await;
    let kubeconfig = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    let log = cluster.dir.join("logs/management-operator.log");
    let _operator = common::operator_with(cp, &system, &log, "info", &["--rancher-clusters"]);
    let why = || {
        format!(
            "management operator:\n{}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            state(cluster)
        )
    };
    let mut runs = Vec::new();
    for (round, namespace) in [(1, "kube-system"), (2, "kube-vip")] {
        let t = Instant::now();
        let prefix = cp.unique(&format!("c-m-n{round}"));
        let c_m = format!("{prefix}-a");
        Api::<Namespace>::all(mgmt.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": c_m}})).unwrap(),
            )
            .await
            .unwrap();
        common::rancher_cluster(
            &mgmt,
            &fleet,
            &cp.unique("node-guest"),
            &c_m,
            json!({}),
            &kubeconfig,
        )
        .await;
        let range = cp.unique("guests");
        apply(
            &mgmt,
            json!({
                "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
                "metadata": {"name": range},
                "spec": {"cidrs": [format!("10.231.0.{}/28", 192 + 16 * round)],
                         "autoAllocate": {"namespaceNamePrefix": prefix},
                         "kubeVip": {"publish": true, "namespace": namespace,
                                     "guests": {"discovery": "rancher", "install": "enabled",
                                                "intervalSeconds": 10}}}
            }),
        )
        .await;
        // In the guest: the provider the installer deployed runs and is Ready; kube-vip's
        // DaemonSet is there but its image is not (not served here), as expected.
        deployment_ready(cluster, guest, namespace, "kube-vip-cloud-provider").await;
        let ds = Api::<DaemonSet>::namespaced(guest.clone(), namespace)
            .get("kube-vip-ds")
            .await
            .unwrap();
        eprintln!(
            "  guest install in {namespace}: kube-vip-cloud-provider Ready after {:.1} s; \
             kube-vip-ds installed, {} of {} pods ready (its image is not served here: expected)",
            t.elapsed().as_secs_f64(),
            ds.status.as_ref().map_or(0, |s| s.number_ready),
            ds.status.as_ref().map_or(0, |s| s.desired_number_scheduled)
        );
        let address = until(
            "the guest's ConfigMap holds cidr-global",
            90,
            &why,
            || async {
                let cm = Api::<ConfigMap>::namespaced(guest.clone(), namespace)
                    .get_opt("kubevip")
                    .await
                    .ok()??;
                Some(
                    cm.data?
                        .get("cidr-global")?
                        .trim_end_matches("/32")
                        .to_owned(),
                )
            },
        )
        .await;
        let services = Api::<Service>::namespaced(guest.clone(), WEB);
        let name = format!("guest-{round}");
        services
            .create(&PostParams::default(), &load_balancer(&name))
            .await
            .unwrap();
        let given = until(
            "the installed provider gives the guest's Service the address",
            90,
            &why,
            || async { provider_address(&services.get(&name).await.ok()?) },
        )
        .await;
        assert_eq!(given, address, "cidr-global in {namespace}");
        announce_as_kube_vip(cluster, &services, &name, &address, 2).await;
        let pod = until("the guest's Service answers", 60, &why, || async {
            from_client(cluster, &address)
        })
        .await;
        runs.push(format!(
            "{namespace}: {address} answered by {pod} after {:.1} s",
            t.elapsed().as_secs_f64()
        ));

        services
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        forget_guest_round(
            cluster, guest, &mgmt, &c_m, &range, namespace, &address, &why,
        )
        .await;
    }
    for r in runs {
        eprintln!("  guest {r}");
    }
}

/// What a guest round leaves, undone for the next: the client's route to the address,
/// the range and its FloatingIP (deleted here: the management API server runs no
/// garbage collector to follow the FloatingIP's ownerReference), and what the installer
/// put in the guest (labelled as netpolicy's).
#[allow(clippy::too_many_arguments)]
async fn forget_guest_round(
    cluster: &NodeCluster,
    guest: &Client,
    mgmt: &Client,
    c_m: &str,
    range: &str,
    namespace: &str,
    address: &str,
    why: &impl Fn() -> String,
) {
    cluster
        .in_netns(
            CLIENT_NETNS,
            "ip",
            &["route", "del", &format!("{address}/32")],
        )
        .unwrap();
    Api::<DynamicObject>::all_with(
        mgmt.clone(),
        &netpolicy("FloatingIPRange", "floatingipranges"),
    )
    .delete(range, &DeleteParams::default())
    .await
    .unwrap();
    let guest_fips = Api::<DynamicObject>::namespaced_with(
        mgmt.clone(),
        c_m,
        &netpolicy("FloatingIP", "floatingips"),
    );
    guest_fips
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    until(
        "the guest's FloatingIP and range are gone",
        60,
        &why,
        || async {
            let fips = guest_fips.list(&ListParams::default()).await.ok()?;
            let ranges = Api::<DynamicObject>::all_with(
                mgmt.clone(),
                &netpolicy("FloatingIPRange", "floatingipranges"),
            );
            (fips.items.is_empty() && ranges.get_opt(range).await.ok()?.is_none()).then_some(())
        },
    )
    .await;
    cluster
        .run(&[
            "kubectl",
            "delete",
            "-n",
            namespace,
            "--wait",
            "deployment,daemonset,serviceaccount,configmap",
            "-l",
            "app.kubernetes.io/managed-by=netpolicy",
        ])
        .unwrap();
    cluster
        .run(&[
            "kubectl",
            "delete",
            "--wait",
            "clusterrole,clusterrolebinding",
            "-l",
            "app.kubernetes.io/managed-by=netpolicy",
        ])
        .unwrap();
    Api::<ConfigMap>::namespaced(guest.clone(), namespace)
        .delete("kubevip", &DeleteParams::default())
        .await
        .ok();
}

/// The routes of `ip route show` in node `i`'s network.
fn routes(cluster: &NodeCluster, i: usize) -> String {
    cluster
        .in_netns(&node::node(i).0, "ip", &["route", "show"])
        .unwrap_or_default()
}

async fn a_rollout_across_real_nodes(cluster: &NodeCluster, client: &Client) {
    let policies = Api::<DynamicObject>::all_with(
        client.clone(),
        &netpolicy("ClusterConfig", "clusterconfigs"),
    );
    let nnc = Api::<DynamicObject>::all_with(
        client.clone(),
        &netpolicy("NodeNetworkConfig", "nodenetworkconfigs"),
    );
    let route = |to: &str| json!({"to": to, "via": HOST_IP});
    let policy = |routes: Vec<Value>| {
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
            "metadata": {"name": "default"},
            "spec": {"routes": routes,
                     "rollout": {"maxUnavailable": 1, "rollbackSeconds": 8},
                     "probes": [{"ping": CLIENT_IP}]}
        })
    };
    let has = |i: usize, to: &str| routes(cluster, i).contains(&format!("{to} via {HOST_IP}"));
    let all_applied = |want: Vec<&'static str>| {
        let nnc = nnc.clone();
        async move {
            for i in 1..=NODES {
                let o = nnc.get(&node::node(i).0).await.ok()?;
                let rev = o.data["spec"]["revision"].as_str()?;
                if o.data["status"]["appliedRevision"].as_str() != Some(rev) {
                    return None;
                }
                if !want.iter().all(|to| has(i, to)) {
                    return None;
                }
            }
            Some(())
        }
    };
    let t = Instant::now();
    apply(client, policy(vec![route("10.240.0.0/24")])).await;
    until(
        "r1 applied on every node",
        90,
        || state(cluster),
        || all_applied(vec!["10.240.0.0/24"]),
    )
    .await;
    eprintln!(
        "  rollout of r1 to 3 nodes: {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // The probe cannot pass on the first node of the wave (np-node): its pings to the
    // client are dropped there.
    let (first, _) = node::node(1);
    // -w: the xtables lock is the machine's, and kube-proxy takes it too.
    let icmp = |op: &'static str| {
        [
            "-w", op, "OUTPUT", "-d", CLIENT_IP, "-p", "icmp", "-j", "DROP",
        ]
    };
    cluster.in_netns(&first, "iptables", &icmp("-I")).unwrap();
    let t = Instant::now();
    apply(
        client,
        policy(vec![route("10.240.0.0/24"), route("10.241.0.0/24")]),
    )
    .await;
    let halted = until(
        "the policy halts on the Degraded node",
        90,
        || state(cluster),
        || async {
            let p = policies.get("default").await.ok()?;
            p.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| {
                    c["type"] == "Degraded"
                        && c["status"] == "True"
                        && c["reason"] == "RolloutHalted"
                })
                .map(|c| c["message"].as_str().unwrap_or_default().to_owned())
        },
    )
    .await;
    let failed = nnc.get(&first).await.unwrap();
    assert!(
        failed.data["status"]["failedRevision"].is_string(),
        "{:?}",
        failed.data["status"]
    );
    eprintln!(
        "  r2 failed its probe on {first}, rolled back by itself, policy halted after {:.1} s: {halted}",
        t.elapsed().as_secs_f64()
    );
    // Halted: the node rolled back, the others never got r2 and keep r1.
    for i in 1..=NODES {
        assert!(
            has(i, "10.240.0.0/24"),
            "node {i} keeps r1:\n{}",
            routes(cluster, i)
        );
        assert!(
            !has(i, "10.241.0.0/24"),
            "node {i} has no r2:\n{}",
            routes(cluster, i)
        );
    }
    for i in 2..=NODES {
        let o = nnc.get(&node::node(i).0).await.unwrap();
        assert_eq!(
            o.data["status"]["appliedRevision"], o.data["spec"]["revision"],
            "node {i} holds its last good revision"
        );
    }

    // The fix: the network repaired and the spec changed; the rollout completes.
    cluster.in_netns(&first, "iptables", &icmp("-D")).unwrap();
    let t = Instant::now();
    apply(
        client,
        policy(vec![
            route("10.240.0.0/24"),
            route("10.241.0.0/24"),
            route("10.242.0.0/24"),
        ]),
    )
    .await;
    until(
        "the fixed revision on every node",
        120,
        || state(cluster),
        || all_applied(vec!["10.240.0.0/24", "10.241.0.0/24", "10.242.0.0/24"]),
    )
    .await;
    until(
        "the policy is no longer Degraded",
        60,
        || state(cluster),
        || async {
            let p = policies.get("default").await.ok()?;
            (!p.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Degraded" && c["status"] == "True"))
            .then_some(())
        },
    )
    .await;
    eprintln!(
        "  the fix rolled out to 3 nodes in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    policies
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    until(
        "the policy's routes are gone",
        90,
        || state(cluster),
        || async { (1..=NODES).all(|i| !has(i, "10.240.0.0/24")).then_some(()) },
    )
    .await;
}

fn node_ready(n: &Node) -> Option<bool> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

/// The provider's state after a failover from `old` to `new` (Hetzner server `i` is node
/// `i`): the IP on `new`, and the calls since `log_len` in the seed's order — the new
/// holder in the firewall before the IP moves, the old one out only after.
fn failed_over_in_the_seeds_order(
    cloud: &netpolicy_testenv::cloud::Shared,
    log_len: usize,
    old: &str,
    new: &str,
) {
    let server = |n: &str| {
        n.rsplit('-')
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(1)
    };
    let c = cloud.lock().unwrap();
    assert_eq!(c.ips.len(), 1, "{:?}", c.ips);
    assert_eq!(
        c.ips[0]["server"],
        server(new),
        "the provider routes it to {new}: {:?}",
        c.ips
    );
    // The seed's order: the new holder in the firewall before the IP moves, the old
    // one out only after.
    let steps: Vec<String> = c.log[log_len..]
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("/actions/"))
        .map(|r| {
            let action = r.path.rsplit('/').next().unwrap_or_default();
            let on = r.body["apply_to"][0]["server"]["id"]
                .as_u64()
                .or_else(|| r.body["remove_from"][0]["server"]["id"].as_u64())
                .or_else(|| r.body["server"].as_u64());
            format!("{action} {}", on.map(|s| s.to_string()).unwrap_or_default())
        })
        .collect();
    let at = |step: &str| {
        steps
            .iter()
            .position(|s| s == step)
            .unwrap_or_else(|| panic!("no {step} among {steps:?}"))
    };
    let (add, assign, remove) = (
        at(&format!("apply_to_resources {}", server(new))),
        at(&format!("assign {}", server(new))),
        at(&format!("remove_from_resources {}", server(old))),
    );
    assert!(
        add < assign && assign < remove,
        "the seed's order: {steps:?}"
    );
    eprintln!("  provider calls of the failover, in order: {steps:?}");
}

async fn failover_on_a_real_node_loss(cluster: &NodeCluster, client: &Client) {
    let names: Vec<String> = (1..=NODES).map(|i| node::node(i).0).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let cloud = common::hetzner_issuer(
        client,
        HOST_IP,
        WEB,
        &names,
        json!({"firewall": {"name": "web-ingress"},
               "returnRouting": {"interface": "eth0", "gateway": HOST_IP, "table": 250}}),
    )
    .await;
    let nodes = Api::<Node>::all(client.clone());
    apply(client, json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "ingress"},
        "spec": {"issuerRef": {"name": "hcloud"}, "reclaimPolicy": "Delete", "cooldownSeconds": 30}
    }))
    .await;
    let routed =
        Api::<DynamicObject>::all_with(client.clone(), &netpolicy("RoutedIP", "routedips"));
    let holder = |routed: Api<DynamicObject>| async move {
        let o = routed.get("ingress").await.ok()?;
        let ready = o.data["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then(|| {
            (
                o.data["status"]["node"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                o.data["status"]["address"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
    };
    let (old, address) = until(
        "the RoutedIP is Ready on a node",
        90,
        || state(cluster),
        || holder(routed.clone()),
    )
    .await;
    // Its return routing on the holder: `from <ip> lookup 250`, the IP on lo.
    let return_routing = |node: &str| {
        cluster
            .in_netns(node, "ip", &["rule", "show"])
            .is_ok_and(|r| r.contains(&format!("from {address} lookup 250")))
            && cluster
                .in_netns(node, "ip", &["-o", "addr", "show", "dev", "lo"])
                .is_ok_and(|a| a.contains(&format!("{address}/32")))
    };
    until(
        "the holder has the return routing",
        60,
        || state(cluster),
        || async { return_routing(&old).then_some(()) },
    )
    .await;
    let assigns = || {
        cloud
            .lock()
            .unwrap()
            .log
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/actions/assign"))
            .count()
    };
    let before = assigns();
    let log_len = cloud.lock().unwrap().log.len();

    // The node lost: kubelet, kube-proxy, pods and containerd stopped.
    let t = Instant::now();
    cluster.run(&["stop-node", &old]).unwrap();
    until(
        "the node lifecycle controller marks it NotReady",
        120,
        || state(cluster),
        || async { (node_ready(&nodes.get(&old).await.ok()?) != Some(true)).then_some(()) },
    )
    .await;
    let not_ready = t.elapsed();
    let (new, moved_address) = until(
        "the RoutedIP moves to another node",
        120,
        || state(cluster),
        || async {
            holder(routed.clone())
                .await
                .filter(|(n, _)| !n.is_empty() && *n != old)
        },
    )
    .await;
    let moved = t.elapsed();
    assert_eq!(moved_address, address, "the same IP moves");
    until(
        "the new holder has the return routing",
        120,
        || state(cluster),
        || async { return_routing(&new).then_some(()) },
    )
    .await;
    let routed_back = t.elapsed();
    eprintln!(
        "  kubelet of {old} stopped → NotReady {:.1} s (node-monitor-grace-period {NODE_MONITOR_GRACE_SECS} s) \
         → the IP on {new} {:.1} s → return routing on {new} {:.1} s",
        not_ready.as_secs_f64(),
        moved.as_secs_f64(),
        routed_back.as_secs_f64()
    );
    failed_over_in_the_seeds_order(&cloud, log_len, &old, &new);

    // The node back: nothing moves back, nothing is assigned again.
    cluster.run(&["start-node", &old]).unwrap();
    until(
        "the node is Ready again",
        120,
        || state(cluster),
        || async { (node_ready(&nodes.get(&old).await.ok()?) == Some(true)).then_some(()) },
    )
    .await;
    until(
        "the node back drops what it no longer holds",
        90,
        || state(cluster),
        || async { (!return_routing(&old)).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (now, _) = holder(routed.clone()).await.unwrap();
    assert_eq!(now, new, "no flap back to {old}");
    assert_eq!(assigns() - before, 1, "one assignment for one failover");
    routed
        .delete("ingress", &DeleteParams::default())
        .await
        .unwrap();
}
