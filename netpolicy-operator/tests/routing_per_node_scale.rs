//! A reported run, not a timed test (it is `#[ignore]`d; numbers go to stdout and
//! benches/README.md): the routing job on the real API server at 2,000 Nodes, each with
//! its own NodeConfig (selecting its hostname: 2 routes and a VLAN with an address, as
//! ipruler users write per-node addresses), beside 20 shared NodeConfigs, as
//! `netpolicy operator` runs it (issue 21: every node is its own distinct set).
//!
//! ```sh
//! cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture routing_per_node_scale::
//! ```
//!
//! Measures: time from start until every NodeNetworkConfig carries its node's own
//! route, and the writes (goal: one per node); one per-node NodeConfig edit (goal: one
//! write); the writes over a quiet minute (goal: 0); the operator's resident memory.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use common::{Killed, rss_kib};

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use netpolicy_operator::api::{NodeConfig, NodeNetworkConfig, crds};
use serde_json::json;

const NODES: usize = 2_000;
const SHARED: usize = 20;
const QUIET_SECONDS: u64 = 60;

fn own_route(i: usize) -> String {
    format!("10.201.{}.{}/32", i / 250, i % 250)
}

/// How many of the test's NodeNetworkConfigs carry their node's own route via `via`.
async fn current(api: &Api<NodeNetworkConfig>, prefix: &str, via: &str) -> usize {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|o| {
            let Some(i) = o
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix(prefix))
                .and_then(|n| n.parse::<usize>().ok())
            else {
                return false;
            };
            o.spec
                .rendered
                .routes
                .iter()
                .any(|r| r.item.to == own_route(i) && r.item.via.as_deref() == Some(via))
        })
        .count()
}

fn per_node(prefix: &str, i: usize, via: &str) -> NodeConfig {
    let node = format!("{prefix}{i:05}");
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
        "metadata": {"name": format!("pn-{node}")},
        "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
                 "priority": 1000,
                 "vlans": [{"link": "eth2", "id": 200,
                            "addresses": [format!("10.128.{}.{}/16", i / 250, i % 250 + 1)]}],
                 "routes": [{"to": own_route(i), "via": via},
                            {"to": "default", "via": format!("10.128.{}.254", i / 250),
                             "table": 200}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (minutes): cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture routing_per_node_scale::"]
async fn routing_with_a_node_config_per_node_at_two_thousand_nodes() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let prefix = "pn-scale-";
    let nodes: Api<Node> = Api::all(client.clone());
    let ncs: Api<NodeConfig> = Api::all(client.clone());
    let t = Instant::now();
    stream::iter(0..NODES)
        .for_each_concurrent(32, |i| {
            let (nodes, ncs) = (nodes.clone(), ncs.clone());
            async move {
                let name = format!("{prefix}{i:05}");
                let n: Node = serde_json::from_value(json!({"metadata": {
                    "name": name,
                    "labels": {"zone": format!("z{}", i % 4), "pool": format!("p{}", i % 20),
                               "kubernetes.io/hostname": name}
                }}))
                .unwrap();
                nodes.create(&PostParams::default(), &n).await.unwrap();
                ncs.create(&PostParams::default(), &per_node(prefix, i, "10.128.0.1"))
                    .await
                    .unwrap();
            }
        })
        .await;
    for i in 0..SHARED {
        let nc: NodeConfig = serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
            "metadata": {"name": format!("{prefix}shared-{i:02}")},
            "spec": {"nodeSelector": {"matchLabels": {"pool": format!("p{i}")}}, "priority": i,
                     "routes": [{"to": format!("10.{}.0.0/16", 100 + i), "via": "192.0.2.1"}]}
        }))
        .unwrap();
        ncs.create(&PostParams::default(), &nc).await.unwrap();
    }
    println!(
        "created {NODES} Nodes, {NODES} per-node and {SHARED} shared NodeConfigs in {:?}",
        t.elapsed()
    );
    let ns = &cp.namespace("pn-scale-system").await;
    let log = cp.dir.join("operator-pn-scale.log");
    let nnc_writes = || {
        cp.writes_where("nodenetworkconfigs", |n| n.starts_with(prefix))
            .len()
    };
    let started = Instant::now();
    let op = Killed(
        Command::new(env!("CARGO_BIN_EXE_netpolicy"))
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args(["--lease-namespace", ns, "--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let nnc: Api<NodeNetworkConfig> = Api::all(client.clone());
    while current(&nnc, prefix, "10.128.0.1").await < NODES {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "not converged"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let first = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_first = nnc_writes();
    println!(
        "first rendering: every NodeNetworkConfig carries its own NodeConfig after {first:?}; \
         {after_first} writes for {NODES} nodes"
    );

    // One per-node NodeConfig edited: one node changes.
    let edit = Instant::now();
    ncs.patch(
        &format!("pn-{prefix}{:05}", 1234),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"routes": [
            {"to": own_route(1234), "via": "10.128.0.2"},
            {"to": "default", "via": "10.128.4.254", "table": 200}]}})),
    )
    .await
    .unwrap();
    while current(&nnc, prefix, "10.128.0.2").await < 1 {
        assert!(edit.elapsed() < Duration::from_secs(120));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let converged = edit.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_edit = nnc_writes();
    println!(
        "one per-node NodeConfig edit: current after {converged:?}; {} writes",
        after_edit - after_first
    );

    tokio::time::sleep(Duration::from_secs(QUIET_SECONDS)).await;
    let quiet = nnc_writes() - after_edit;
    println!("quiet {QUIET_SECONDS} s: {quiet} NodeNetworkConfig writes");
    println!(
        "operator resident memory: {} MiB",
        rss_kib(op.0.id()) / 1024
    );
    assert_eq!(quiet, 0);
}
