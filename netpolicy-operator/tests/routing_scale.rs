//! A reported run, not a timed test (it is `#[ignore]`d; numbers go to stdout and
//! benches/README.md): the routing job on the real API server at 2,000 Nodes, 100
//! NodeConfigs and a ClusterConfig, as `netpolicy operator` runs it.
//!
//! ```sh
//! cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture routing_scale::
//! ```
//!
//! Measures: time from start until every NodeNetworkConfig exists; time from one
//! cluster-wide ClusterConfig edit until every NodeNetworkConfig carries it; the API
//! writes of that edit (goal: one per changed node); the writes over a quiet period
//! (goal: 0); the operator's resident memory.

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
use netpolicy_operator::api::{ClusterConfig, NodeConfig, NodeNetworkConfig, crds};
use serde_json::json;

const NODES: usize = 2_000;
const NODE_CONFIGS: usize = 100;
/// Longer than the controller's full resync (300 s), so the quiet window includes one.
const QUIET_SECONDS: u64 = 330;

async fn all_carry(api: &Api<NodeNetworkConfig>, prefix: &str, want: usize) -> usize {
    carrying(api, prefix, "10.250.0.0/16").await.min(want)
}

/// How many of the test's NodeNetworkConfigs carry a route to `to`.
async fn carrying(api: &Api<NodeNetworkConfig>, prefix: &str, to: &str) -> usize {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|o| {
            o.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
                && o.spec.rendered.routes.iter().any(|r| r.item.to == to)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (minutes): cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture routing_scale::"]
async fn routing_at_two_thousand_nodes() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let prefix = "scale-";
    // Nodes: 4 zones, 20 pools, a hostname each.
    let nodes: Api<Node> = Api::all(client.clone());
    let t = Instant::now();
    stream::iter(0..NODES)
        .for_each_concurrent(32, |i| {
            let nodes = nodes.clone();
            async move {
                let n: Node = serde_json::from_value(json!({"metadata": {
                    "name": format!("{prefix}{i:05}"),
                    "labels": {"zone": format!("z{}", i % 4), "pool": format!("p{}", i % 20),
                               "kubernetes.io/hostname": format!("{prefix}{i:05}")}
                }}))
                .unwrap();
                nodes.create(&PostParams::default(), &n).await.unwrap();
            }
        })
        .await;
    println!("created {NODES} Nodes in {:?}", t.elapsed());
    let ncs: Api<NodeConfig> = Api::all(client.clone());
    for i in 0..NODE_CONFIGS {
        let (key, value) = if i % 2 == 0 {
            ("pool", format!("p{}", i % 20))
        } else {
            ("zone", format!("z{}", i % 4))
        };
        let nc: NodeConfig = serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
            "metadata": {"name": format!("{prefix}nc-{i:03}")},
            "spec": {"nodeSelector": {"matchLabels": {key: value}}, "priority": i,
                     "routes": [{"to": format!("10.{}.0.0/16", 100 + i), "via": "192.0.2.1"}]}
        }))
        .unwrap();
        ncs.create(&PostParams::default(), &nc).await.unwrap();
    }
    let ccs: Api<ClusterConfig> = Api::all(client.clone());
    let cc: ClusterConfig = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
        "metadata": {"name": "default"},
        "spec": {"routes": [{"to": "10.249.0.0/16", "via": "192.0.2.1"}]}
    }))
    .unwrap();
    ccs.create(&PostParams::default(), &cc).await.unwrap();
    let ns = &cp.namespace("scale-system").await;

    let log = cp.dir.join("operator-scale.log");
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
    loop {
        let n = nnc
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|o| {
                o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .count();
        if n >= NODES {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {n} rendered"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "first rendering of {NODES} NodeNetworkConfigs: {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    // One cluster-wide edit.
    let nnc_writes = || {
        cp.writes_where("nodenetworkconfigs", |n| n.starts_with(prefix))
            .len()
    };
    let before = nnc_writes();
    let edit = Instant::now();
    ccs.patch(
        "default",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"routes": [{"to": "10.250.0.0/16", "via": "192.0.2.1"}]}})),
    )
    .await
    .unwrap();
    while all_carry(&nnc, prefix, NODES).await < NODES {
        assert!(edit.elapsed() < Duration::from_secs(600));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converged = edit.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = nnc_writes();
    println!(
        "ClusterConfig edit: every NodeNetworkConfig current after {converged:?}; {} writes for {NODES} changed nodes",
        after - before
    );

    // One NodeConfig edit (pool p0: 100 nodes) and one Node relabelled: the controller
    // compares only the nodes they affect.
    let before = after;
    let edit = Instant::now();
    ncs.patch(
        &format!("{prefix}nc-000"),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"routes": [{"to": "10.251.0.0/16", "via": "192.0.2.1"}]}})),
    )
    .await
    .unwrap();
    while carrying(&nnc, prefix, "10.251.0.0/16").await < NODES / 20 {
        assert!(edit.elapsed() < Duration::from_secs(600));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let converged = edit.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_nc = nnc_writes();
    println!(
        "NodeConfig edit (selects {} nodes): current after {converged:?}; {} writes",
        NODES / 20,
        after_nc - before
    );
    let edit = Instant::now();
    nodes
        .patch(
            &format!("{prefix}00001"),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pool": "p0"}}})),
        )
        .await
        .unwrap();
    while carrying(&nnc, prefix, "10.251.0.0/16").await < NODES / 20 + 1 {
        assert!(edit.elapsed() < Duration::from_secs(600));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let converged = edit.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = nnc_writes();
    println!(
        "Node relabelled into pool p0: current after {converged:?}; {} writes",
        after - after_nc
    );

    // Quiet.
    let nc_writes = || {
        cp.writes_where("nodeconfigs", |n| n.starts_with(prefix))
            .len()
            + cp.writes("clusterconfigs", "default").len()
    };
    let quiet_nnc = after;
    let quiet_nc = nc_writes();
    tokio::time::sleep(Duration::from_secs(QUIET_SECONDS)).await;
    let nnc_now = nnc_writes();
    println!(
        "quiet {QUIET_SECONDS} s: {} NodeNetworkConfig writes, {} policy writes",
        nnc_now - quiet_nnc,
        nc_writes() - quiet_nc
    );
    println!(
        "operator resident memory at {NODES} nodes: {} MiB",
        rss_kib(op.0.id()) / 1024
    );
    assert_eq!(nnc_now - quiet_nnc, 0);
}
