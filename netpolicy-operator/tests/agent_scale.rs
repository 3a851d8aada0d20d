//! The node agent at scale (issue 47, a reported run: numbers in benches/README.md):
//! `netpolicy agent` as a real process on a network namespace, against the real API
//! server, given one NodeNetworkConfig of 10,000 routes and 1,000 rules. Reports its
//! first apply (NodeNetworkConfig created → `Applied` True with every route and rule
//! in the kernel), its resident memory (peak and steady) and CPU, and its quiet steady
//! state: over three resyncs, 0 API writes and the CPU it spends.
//!
//! ```sh
//! NETPOLICY_BIN=$PWD/target/release/netpolicy \
//!   cargo test -p netpolicy-operator --all-features --locked --test integration -- --ignored --nocapture agent_scale::
//! ```
//! (`NETPOLICY_BIN`: the agent binary measured; default the test build's, unoptimized.)

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::time::{Duration, Instant};

use kube::{Api, api::PostParams};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{NodeNetworkConfig, crds};
use serde_json::{Value, json};

const ROUTES: usize = 10_000;
const RULES: usize = 1_000;
/// The agent's resync in this run: the quiet window spans three.
const RESYNC_SECS: u64 = 10;

fn count(ns: &str, args: &[&str]) -> usize {
    let out = std::process::Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (about a minute): numbers in benches/README.md"]
async fn the_agent_with_10000_routes_and_1000_rules() {
    let Some(ns) = TestNamespace::new("agent at scale").unwrap() else {
        return;
    };
    let cp = netpolicy_testenv::dedicated();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let node = "scale-node";
    let src = json!([{"kind": "ClusterConfig", "name": "default"}]);
    let routes: Vec<Value> = (0..ROUTES)
        .map(|i| {
            json!({"to": format!("10.{}.{}.0/24", 100 + i / 256, i % 256), "via": "192.0.2.1",
                   "table": 100, "sources": src})
        })
        .collect();
    let rules: Vec<Value> = (0..RULES)
        .map(|i| {
            json!({"priority": 1000 + i, "from": format!("10.{}.{}.0/24", 100 + i / 256, i % 256),
                   "table": 100, "sources": src})
        })
        .collect();
    let nnc: NodeNetworkConfig = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
        "metadata": {"name": node},
        "spec": {"revision": "r1", "vlans": [], "routes": routes, "rules": rules}
    }))
    .unwrap();
    let api: Api<NodeNetworkConfig> = Api::all(client.clone());
    let bin = std::env::var("NETPOLICY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_netpolicy").to_owned());
    let log = cp.dir.join("agent-scale.log");
    let agent = common::Killed(
        std::process::Command::new(&bin)
            .args(["agent", "--node", node, "--netns", ns.name()])
            .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args(["--resync-seconds", &RESYNC_SECS.to_string()])
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(common::appending(&log))
            .spawn()
            .unwrap(),
    );
    let pid = agent.0.id();
    // Idle before it has anything to do.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = common::rss_kib(pid);
    let cpu0 = common::cpu_seconds(pid);
    let t = Instant::now();
    api.create(&PostParams::default(), &nnc).await.unwrap();
    loop {
        let s = api.get(node).await.unwrap().status.unwrap_or_default();
        if s.applied_revision.as_deref() == Some("r1") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "not applied within 5 min: {:?}",
            s.conditions
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_apply = t.elapsed();
    let apply_cpu = common::cpu_seconds(pid) - cpu0;
    assert_eq!(count(ns.name(), &["route", "show", "table", "100"]), ROUTES);
    // `ip rule` lists the kernel's three default rules too.
    assert_eq!(count(ns.name(), &["rule", "show"]), RULES + 3);
    // Quiet: three resyncs with nothing changed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes_before = cp.all_writes().len();
    let cpu_quiet0 = common::cpu_seconds(pid);
    let quiet = Duration::from_secs(3 * RESYNC_SECS + 1);
    tokio::time::sleep(quiet).await;
    let quiet_cpu = common::cpu_seconds(pid) - cpu_quiet0;
    // The agent's (the API server's own lease and endpoint writes are not).
    let quiet_writes: Vec<_> = cp
        .all_writes()
        .split_off(writes_before)
        .into_iter()
        .filter(|w| !w.user.starts_with("system:"))
        .collect();
    assert!(
        quiet_writes.is_empty(),
        "{} writes over three quiet resyncs: {quiet_writes:?}",
        quiet_writes.len()
    );
    let steady_kib = common::rss_kib(pid);
    let peak_kib = common::peak_rss_kib(pid);
    println!(
        "| agent, one node: {ROUTES} routes + {RULES} rules ({}) | first apply {:.1} s, {apply_cpu:.1} s CPU | RSS idle {} MiB, peak {} MiB, steady {} MiB | quiet {} s (3 resyncs): 0 writes, {quiet_cpu:.2} s CPU: {:.2} s a resync, {:.2} % of a core at the default 60 s resync |",
        if bin.contains("release") {
            "release build"
        } else {
            "test build, unoptimized"
        },
        first_apply.as_secs_f64(),
        idle_kib / 1024,
        peak_kib / 1024,
        steady_kib / 1024,
        quiet.as_secs(),
        quiet_cpu / 3.0,
        100.0 * quiet_cpu / 3.0 / 60.0
    );
}
