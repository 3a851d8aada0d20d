//! A reported run, not a timed test (`#[ignore]`d; numbers go to stdout and
//! benches/README.md): the route-reflector job on the real API server with 5,000 Nodes
//! and Calico's CRDs, as `netpolicy operator` runs it.
//!
//! ```sh
//! cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture route_reflector_scale::
//! ```
//!
//! Measures, for one node added and for one reflector node removed: the time until the
//! operator reports the topology settled again, its API writes, and the CPU time the
//! operator process spent (user + system, from /proc).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use common::{Killed, calico_crds, ready_node};

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use netpolicy_operator::api::{RouteReflectorConfig, crds};
use serde_json::json;

const NODES: usize = 5_000;
const ZONES: [&str; 3] = ["a", "b", "c"];

/// User + system CPU time of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// Waits until the status says settled, then 2 s more without a transition.
async fn settled(client: &Client) -> Duration {
    let t = Instant::now();
    let api = Api::<RouteReflectorConfig>::all(client.clone());
    let mut since: Option<Instant> = None;
    let mut last_ok = t;
    loop {
        let ok = api.get("default").await.unwrap().status.is_some_and(|s| {
            s.transition.is_none()
                && s.reflectors.unwrap_or(0) > 0
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Progressing" && c.status == "False")
        });
        if ok {
            since.get_or_insert_with(Instant::now);
        } else {
            since = None;
            last_ok = Instant::now();
        }
        if since.is_some_and(|s| s.elapsed() > Duration::from_secs(2)) {
            return last_ok.duration_since(t);
        }
        assert!(t.elapsed() < Duration::from_secs(900));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (minutes): cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture route_reflector_scale::"]
async fn five_thousand_nodes() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    netpolicy_testenv::install_crds(&client, calico_crds()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let t = Instant::now();
    stream::iter(0..NODES)
        .for_each_concurrent(32, |i| {
            let nodes = nodes.clone();
            async move {
                let labels = json!({"topology.kubernetes.io/zone": ZONES[i % 3]});
                ready_node(&nodes, &format!("rr-scale-{i:05}"), labels).await;
            }
        })
        .await;
    println!("created {NODES} Nodes in {:?}", t.elapsed());
    let rrc: RouteReflectorConfig = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RouteReflectorConfig",
        "metadata": {"name": "default"}, "spec": {"stepDelaySeconds": 0}
    }))
    .unwrap();
    Api::<RouteReflectorConfig>::all(client.clone())
        .create(&PostParams::default(), &rrc)
        .await
        .unwrap();
    let ns = cp.namespace("rr-scale-system").await;
    let op = Killed(
        Command::new(env!("CARGO_BIN_EXE_netpolicy"))
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args(["--lease-namespace", &ns, "--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(cp.dir.join("operator-rr-scale.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let pid = op.0.id();
    let first = settled(&client).await;
    println!(
        "first topology over {NODES} nodes: settled after {first:?}, CPU {:.2} s",
        cpu_seconds(pid)
    );
    let writes = || {
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

    // One node added (3 writes of the test's own: create, taint, Ready).
    let (w0, c0) = (writes(), cpu_seconds(pid));
    ready_node(
        &nodes,
        "rr-scale-extra",
        json!({"topology.kubernetes.io/zone": "a"}),
    )
    .await;
    let took = settled(&client).await;
    println!(
        "one node added: settled after {took:?}; operator writes {}; operator CPU {:.3} s",
        writes() - w0 - 3,
        cpu_seconds(pid) - c0
    );

    // One reflector node removed (1 write of the test's own: the delete).
    let reflector = nodes
        .list(&ListParams::default().labels("calico-route-reflector"))
        .await
        .unwrap()
        .items[0]
        .name_any();
    let (w0, c0) = (writes(), cpu_seconds(pid));
    nodes
        .delete(&reflector, &DeleteParams::default())
        .await
        .unwrap();
    let took = settled(&client).await;
    println!(
        "one reflector node removed: settled after {took:?}; operator writes {}; operator CPU {:.3} s",
        writes() - w0 - 1,
        cpu_seconds(pid) - c0
    );
}
