//! The route-reflector job of `netpolicy operator` as a real process against a real API
//! server that runs Calico's own CRDs (`tests/data/calico`), so every `BGPPeer` and
//! `BGPConfiguration` written is validated as in a Calico cluster.
//!
//! A checker reads consistent snapshots of Nodes and BGPPeers (both at one etcd
//! revision) one after another, as fast as it can, and checks each with Calico's
//! sessions and BIRD's route reflection (`netpolicy_rr::sim`): once the first topology
//! is in place, no node is ever without a session and every node learns every other
//! node's route — while the cluster grows, a reflector node goes, another turns
//! NotReady, and the topology switches `simple` ↔ `multi`.
//!
//! Size: `NETPOLICY_RR_E2E_NODES` nodes over 3 zones (default 120), grown to twice that.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use common::{Killed, calico_crds, ready_node, rr_settled, rrc_status, set_ready};

use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use netpolicy_operator::{
    NodeFacts,
    api::calico::{CalicoBgpPeer, bgp_peer_resource},
    api::{RouteReflectorConfig, crds},
    testing as rr,
};
use netpolicy_rr::sim;
use serde_json::json;

const ZONES: [&str; 3] = ["a", "b", "c"];
const LABEL: &str = "calico-route-reflector";

async fn add_nodes(client: &Client, prefix: &str, range: std::ops::Range<usize>) {
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(range)
        .for_each_concurrent(16, |i| {
            let nodes = nodes.clone();
            async move {
                let labels = json!({"topology.kubernetes.io/zone": ZONES[i % 3], "e2e-rr": "yes"});
                ready_node(&nodes, &format!("{prefix}{i:04}"), labels).await;
            }
        })
        .await;
}

/// What the watcher sees, and what it found wrong.
#[derive(Default)]
struct Seen {
    nodes: BTreeMap<String, Node>,
    peers: BTreeMap<String, CalicoBgpPeer>,
    /// Checking starts once the first topology is in place.
    armed: bool,
    checks: usize,
    violations: Vec<String>,
}

impl Seen {
    fn check(&mut self, prefix: &str) {
        let nodes: Vec<&Node> = self
            .nodes
            .values()
            .filter(|n| n.name_any().starts_with(prefix))
            .collect();
        let infos: Vec<netpolicy_rr::NodeInfo> = nodes
            .iter()
            .map(|n| rr::node_info(&NodeFacts::of(n, false)))
            .collect();
        let current = rr::current(nodes.iter().copied(), self.peers.values(), &[], LABEL);
        let cluster = sim::Cluster::new(&infos, &current, LABEL);
        let sessions = match cluster.sessions() {
            Ok(s) => s,
            Err(e) => {
                self.violations.push(e);
                return;
            }
        };
        if !self.armed {
            return;
        }
        self.checks += 1;
        for (n, s) in &sessions {
            if s.is_empty() {
                let labels = self.nodes.get(n).map(|x| x.labels().clone());
                let peers: Vec<(&String, &Option<String>, &Option<String>)> = self
                    .peers
                    .values()
                    .map(|p| {
                        (
                            p.metadata.name.as_ref().unwrap(),
                            &p.spec.node_selector,
                            &p.spec.peer_selector,
                        )
                    })
                    .collect();
                self.violations.push(format!(
                    "{n} has no session; labels {labels:?}; peers {peers:?}"
                ));
            }
        }
        self.violations
            .extend(common::unreached(&cluster, &sessions));
    }
}

/// Checks consistent snapshots of Nodes and BGPPeers, one after another, as fast as it
/// can: Nodes are listed, then BGPPeers at exactly the same resource version (one etcd
/// revision for both), so every snapshot is a state the cluster really was in. (Two
/// watches of different kinds are not ordered with each other: their combined view
/// would show states that never existed.)
fn watch_and_check(client: Client, prefix: String, seen: Arc<Mutex<Seen>>) {
    tokio::spawn(async move {
        let nodes_api: Api<Node> = Api::all(client.clone());
        let peers_api = Api::<DynamicObject>::all_with(client, &bgp_peer_resource());
        let mut last_rv = String::new();
        loop {
            let Ok(nodes) = nodes_api.list(&ListParams::default()).await else {
                continue;
            };
            let rv = nodes.metadata.resource_version.clone().unwrap_or_default();
            if rv == last_rv {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let at = ListParams::default()
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact);
            let Ok(peers) = peers_api.list(&at).await else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            last_rv = rv;
            // The check is CPU work: off the async workers, so it never starves the test.
            let seen = Arc::clone(&seen);
            let prefix = prefix.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let mut s = seen.lock().unwrap();
                s.nodes = nodes.items.into_iter().map(|n| (n.name_any(), n)).collect();
                s.peers = peers
                    .items
                    .iter()
                    .filter_map(|p| {
                        serde_json::from_value::<CalicoBgpPeer>(serde_json::to_value(p).ok()?).ok()
                    })
                    .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
                    .collect();
                s.check(&prefix);
            })
            .await;
        }
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn routes_reach_every_node_through_growth_loss_and_a_topology_switch() {
    let n: usize = std::env::var("NETPOLICY_RR_E2E_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let prefix = "rr-e2e-";
    add_nodes(&client, prefix, 0..n).await;
    let first = Api::<Node>::all(client.clone())
        .get(&format!("{prefix}0000"))
        .await
        .unwrap();
    let facts = NodeFacts::of(&first, false);
    assert!(
        facts.ready && !facts.unschedulable && facts.taints.is_empty(),
        "{first:?}"
    );
    let seen = Arc::new(Mutex::new(Seen::default()));
    watch_and_check(client.clone(), prefix.to_owned(), Arc::clone(&seen));
    let rrc: RouteReflectorConfig = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RouteReflectorConfig",
        "metadata": {"name": "default"},
        "spec": {"min": 2, "max": 4, "ratio": 0.05, "stepDelaySeconds": 0,
                 "eligibleNodes": {"matchLabels": {"e2e-rr": "yes"}}}
    }))
    .unwrap();
    Api::<RouteReflectorConfig>::all(client.clone())
        .create(&PostParams::default(), &rrc)
        .await
        .unwrap();
    let ns = cp.namespace("rr-e2e-system").await;
    let log = cp.dir.join("operator-rr.log");
    let _op = Killed(
        Command::new(env!("CARGO_BIN_EXE_netpolicy"))
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args([
                "--lease-namespace",
                &ns,
                "--lease-seconds",
                "3",
                "--listen",
                "127.0.0.1:0",
                "--resync-seconds",
                "2",
            ])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Calico comes after the operator: it says so, then picks Calico up.
    let t = Instant::now();
    loop {
        let waiting = rrc_status(&client).await.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.reason == "CalicoNotInstalled")
        });
        if waiting {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    netpolicy_testenv::install_crds(&client, calico_crds()).await;
    // Someone else's BGPPeer: never touched.
    let foreign: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "BGPPeer",
        "metadata": {"name": "tor-uplink"},
        "spec": {"peerIP": "192.0.2.1", "asNumber": 64512, "nodeSelector": "all()"}
    }))
    .unwrap();
    let peers = Api::<DynamicObject>::all_with(client.clone(), &bgp_peer_resource());
    peers
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    rr_settled(&client, "first topology (simple)", 120, &log).await;
    seen.lock().unwrap().armed = true;
    seen.lock().unwrap().check(prefix);

    // Grow to twice the nodes.
    add_nodes(&client, prefix, n..2 * n).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    rr_settled(&client, "grown", 120, &log).await;

    // A reflector node goes; another reflector turns NotReady.
    let reflectors: Vec<String> = seen
        .lock()
        .unwrap()
        .nodes
        .values()
        .filter(|n| n.labels().contains_key(LABEL))
        .map(|n| n.name_any())
        .collect();
    assert!(reflectors.len() >= 4, "{reflectors:?}\n{}", log_text());
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete(&reflectors[0], &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    rr_settled(&client, "a reflector node removed", 120, &log).await;
    set_ready(&nodes, &reflectors[1], false).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    rr_settled(&client, "a reflector NotReady", 120, &log).await;

    // simple → multi → simple.
    common::rr_switch_multi_and_back(&client, &log).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (checks, violations) = {
        let s = seen.lock().unwrap();
        (s.checks, s.violations.clone())
    };
    println!("checked {checks} intermediate states");
    assert!(checks > 10, "too few states checked: {checks}");
    assert!(
        violations.is_empty(),
        "{} violation(s), first: {:?}\n{}",
        violations.len(),
        violations.first(),
        log_text()
    );
    // Quiet: four resyncs (2 s) write nothing.
    let count = || {
        [
            "nodes",
            "bgppeers",
            "bgpconfigurations",
            "routereflectorconfigs",
        ]
        .iter()
        .map(|r| cp.writes_where(r, |_| true).len())
        .sum::<usize>()
    };
    let before = count();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        count() - before,
        0,
        "writes on a quiet cluster\n{}",
        log_text()
    );
    // nodeToNodeMesh: disable turns Calico's full mesh off now that every node has its
    // reflector sessions — also when the BGPConfiguration was written by someone else
    // with the mesh on, as Calico's docs have users `kubectl apply` it (client-side
    // apply: that manager owns the field).
    let bgp_config = Api::<DynamicObject>::all_with(
        client.clone(),
        &netpolicy_operator::api::calico::bgp_configuration_resource(),
    );
    bgp_config
        .create(
            &PostParams {
                field_manager: Some("kubectl-client-side-apply".into()),
                ..PostParams::default()
            },
            &serde_json::from_value(json!({
                "apiVersion": "crd.projectcalico.org/v1", "kind": "BGPConfiguration",
                "metadata": {"name": "default"},
                "spec": {"asNumber": 64512, "nodeToNodeMeshEnabled": true, "logSeverityScreen": "Info"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<RouteReflectorConfig>::all(client.clone())
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeToNodeMesh": "disable"}})),
        )
        .await
        .unwrap();
    let t = Instant::now();
    loop {
        let off = bgp_config
            .get_opt("default")
            .await
            .unwrap()
            .is_some_and(|o| o.data["spec"]["nodeToNodeMeshEnabled"] == false);
        let reported = rrc_status(&client).await.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "NodeToNodeMesh" && c.status == "False")
        });
        if off && reported {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Only the mesh field changed hands: the rest is the user's as written.
    let written = bgp_config.get("default").await.unwrap();
    assert_eq!(written.data["spec"]["asNumber"], 64512);
    assert_eq!(written.data["spec"]["logSeverityScreen"], "Info");
    // The foreign BGPPeer is untouched.
    let f = peers.get("tor-uplink").await.unwrap();
    assert_eq!(f.data["spec"]["peerIP"], "192.0.2.1");
    // Calico's node-to-node mesh is reported, not changed (nodeToNodeMesh: report).
    let status = rrc_status(&client).await.unwrap();
    assert!(!status.cluster_ids.is_empty(), "{status:?}");
}
