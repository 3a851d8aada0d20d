//! Faults a node's agent survives (docs/reliability.md), `netpolicy agent` as a real
//! process programming a real network namespace against the real API server: killed
//! (SIGKILL) halfway through 10,000 routes, the node "rebooted" (its namespace emptied
//! while the agent restarts), and the node cut off from the API server while its
//! config changes. Needs root (network namespaces); otherwise each test prints SKIP.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::Killed;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{NodeNetworkConfig, NodeNetworkConfigStatus, crds};
use netpolicy_testenv::{ControlPlane, eventually};
use serde_json::{Value, json};

/// Timing-sensitive (a kill at a measured point): one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ROUTES: usize = 10_000;

/// `count` routes `10.X.Y.0/24` via 192.0.2.1 in table 100, `X` from `base`.
fn routes(base: usize, count: usize) -> Value {
    Value::Array(
        (0..count)
            .map(|i| {
                json!({"to": format!("10.{}.{}.0/24", base + i / 256, i % 256), "via": "192.0.2.1",
                       "table": 100, "sources": [{"kind": "NodeConfig", "name": "t"}]})
            })
            .collect(),
    )
}

fn nnc(name: &str, revision: &str, routes: Value, rules: Value) -> NodeNetworkConfig {
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
        "metadata": {"name": name},
        "spec": {"revision": revision, "vlans": [], "rules": rules, "routes": routes}
    }))
    .unwrap()
}

/// How many routes table 100 of `ns` holds (one `ip` call).
fn table_len(ns: &str) -> usize {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "route", "show", "table", "100"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// `netpolicy agent` for `node` on `ns` through `kubeconfig`, with `extra` arguments;
/// its log appended to `log`.
fn agent(
    kubeconfig: &std::path::Path,
    node: &str,
    ns: &str,
    log: &std::path::Path,
    extra: &[&str],
) -> Killed {
    common::agent_with(kubeconfig, node, ns, log, extra)
}

async fn status(api: &Api<NodeNetworkConfig>, node: &str) -> NodeNetworkConfigStatus {
    api.get(node).await.unwrap().status.unwrap_or_default()
}

fn applied(s: &NodeNetworkConfigStatus, revision: &str) -> bool {
    s.applied_revision.as_deref() == Some(revision)
        && s.conditions
            .iter()
            .any(|c| c.type_ == "Applied" && c.status == "True")
}

struct Node {
    ns: TestNamespace,
    cp: &'static ControlPlane,
    api: Api<NodeNetworkConfig>,
    name: String,
    log: std::path::PathBuf,
}

async fn node(purpose: &str) -> Option<Node> {
    let ns = TestNamespace::new(purpose).unwrap()?;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let name = cp.unique(purpose);
    let log = cp.dir.join(format!("{name}.log"));
    Some(Node {
        ns,
        cp,
        api: Api::all(client),
        name,
        log,
    })
}

/// Fault 5: the agent killed (SIGKILL) halfway through applying 10,000 routes. Its
/// status must not say the revision is applied while it is not, and the next agent
/// finishes the job: exactly the 10,000 routes, then Applied.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_halfway_through_10000_routes_is_finished_by_the_next() {
    let _serial = SERIAL.lock().await;
    let Some(n) = node("fault-kill").await else {
        return;
    };
    n.api
        .create(
            &PostParams::default(),
            &nnc(&n.name, "r1", routes(100, ROUTES), json!([])),
        )
        .await
        .unwrap();
    let first = agent(&n.cp.kubeconfig, &n.name, n.ns.name(), &n.log, &[]);
    let t = Instant::now();
    let at_kill = loop {
        let len = table_len(n.ns.name());
        // Early: the agent writes a few thousand routes in the time the kill takes.
        if len >= 200 {
            break len;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{len} routes after 60 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    drop(first); // SIGKILL
    let after_kill = table_len(n.ns.name());
    let s = status(&n.api, &n.name).await;
    println!(
        "agent killed with {at_kill}..{after_kill} of {ROUTES} routes in the kernel; status then: \
         appliedRevision {:?}",
        s.applied_revision
    );
    if after_kill < ROUTES {
        assert!(
            !applied(&s, "r1"),
            "status says r1 applied with {after_kill} routes"
        );
    } else {
        eprintln!("NOTE: the agent had every route in before the kill landed");
    }
    let restart = Instant::now();
    let _second = agent(&n.cp.kubeconfig, &n.name, n.ns.name(), &n.log, &[]);
    eventually("the next agent applies r1", 120, || async {
        applied(&status(&n.api, &n.name).await, "r1")
    })
    .await;
    let took = restart.elapsed();
    assert_eq!(table_len(n.ns.name()), ROUTES, "exactly the desired routes");
    println!(
        "| agent SIGKILLed mid-apply | {ROUTES} routes, {after_kill} in when killed | {:.1} s (next agent to Applied) | — | never Applied before all were in |",
        took.as_secs_f64()
    );
}

/// Fault 6: the node "rebooted": the agent stops, its network namespace is emptied
/// (deleted and made again with only the node's own link and address, as the OS
/// brings them back at boot) and the agent starts again: every desired route and rule
/// is back within the stated bound, from its kept last-good config and the API server.
#[tokio::test(flavor = "multi_thread")]
async fn a_rebooted_node_gets_everything_back() {
    let _serial = SERIAL.lock().await;
    let Some(n) = node("fault-reboot").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = format!(
        "--state-file={}",
        dir.path().join("last-good.json").display()
    );
    let rules = json!([{"priority": 1000, "from": "10.250.0.0/16", "table": 100,
                        "sources": [{"kind": "NodeConfig", "name": "t"}]}]);
    n.api
        .create(
            &PostParams::default(),
            &nnc(&n.name, "r1", routes(100, 1000), rules),
        )
        .await
        .unwrap();
    let a = agent(&n.cp.kubeconfig, &n.name, n.ns.name(), &n.log, &[&state]);
    eventually("r1 applied", 60, || async {
        applied(&status(&n.api, &n.name).await, "r1")
    })
    .await;
    drop(a);
    // The reboot: nothing netpolicy made survives; the OS's own link comes back.
    let name = n.ns.name().to_owned();
    let ip = |args: &[&str]| {
        let ok = std::process::Command::new("ip")
            .args(args)
            .status()
            .unwrap()
            .success();
        assert!(ok, "ip {args:?}");
    };
    ip(&["netns", "del", &name]);
    ip(&["netns", "add", &name]);
    for step in [
        &["link", "add", "v0", "type", "veth", "peer", "name", "v1"][..],
        &["link", "set", "v0", "up"],
        &["link", "set", "v1", "up"],
        &["addr", "add", "192.0.2.10/24", "dev", "v0"],
    ] {
        let mut args = vec!["-n", name.as_str()];
        args.extend_from_slice(step);
        ip(&args);
    }
    assert_eq!(table_len(&name), 0, "the namespace is empty");
    let boot = Instant::now();
    let _b = agent(&n.cp.kubeconfig, &n.name, &name, &n.log, &[&state]);
    let t = Instant::now();
    loop {
        let rules = n.ns.ip(&["rule", "show"]).unwrap_or_default();
        if table_len(&name) == 1000 && rules.contains("from 10.250.0.0/16 lookup 100") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "after the reboot: {} routes, rules {rules}",
            table_len(&name)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = boot.elapsed();
    eventually("Applied again", 30, || async {
        applied(&status(&n.api, &n.name).await, "r1")
    })
    .await;
    println!(
        "| node rebooted (namespace emptied) | 1,000 routes + 1 rule applied | {:.2} s (agent start to all back) | — | bound 30 s |",
        took.as_secs_f64()
    );
}

/// A TCP proxy to the API server that the test can cut as a partition does: while
/// cut, bytes stop flowing both ways on every connection and new connections are
/// accepted but never answered (packets dropped, nothing reset).
struct Partition {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl Partition {
    async fn to(server: &str) -> Self {
        let upstream = server.trim_start_matches("https://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let c = Arc::clone(&cut);
        tokio::spawn(async move {
            loop {
                let Ok((down, _)) = listener.accept().await else {
                    return;
                };
                let c = Arc::clone(&c);
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(up) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::join!(pipe(dr, uw, Arc::clone(&c)), pipe(ur, dw, c));
                });
            }
        });
        Self { port, cut }
    }

    /// A kubeconfig like `cp`'s whose server is this proxy.
    fn kubeconfig(&self, cp: &ControlPlane, path: &std::path::Path) {
        let kc = std::fs::read_to_string(&cp.kubeconfig).unwrap();
        std::fs::write(
            path,
            kc.replace(&cp.server, &format!("https://127.0.0.1:{}", self.port)),
        )
        .unwrap();
    }
}

/// Copies `from` to `to` while not cut; while cut, holds both (no byte, no close).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        while cut.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just as the cut came are dropped with everything after.
        while cut.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Fault 4: the node cut off from the API server (every packet dropped) while its
/// config changes. The agent keeps its last good config and removes nothing, repairs
/// drift locally while cut off, and once the partition heals applies the new
/// revision and reports it.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_cut_off_keeps_its_config_repairs_drift_and_reports_when_back() {
    let _serial = SERIAL.lock().await;
    let Some(n) = node("fault-partition").await else {
        return;
    };
    let partition = Partition::to(&n.cp.server).await;
    let kubeconfig = n.cp.dir.join(format!("{}-via-proxy.kubeconfig", n.name));
    partition.kubeconfig(n.cp, &kubeconfig);
    n.api
        .create(
            &PostParams::default(),
            &nnc(&n.name, "r1", routes(100, 100), json!([])),
        )
        .await
        .unwrap();
    let _a = agent(
        &kubeconfig,
        &n.name,
        n.ns.name(),
        &n.log,
        &["--resync-seconds", "2"],
    );
    eventually("r1 applied", 60, || async {
        applied(&status(&n.api, &n.name).await, "r1")
    })
    .await;

    partition.cut.store(true, Ordering::Release);
    let cut_at = Instant::now();
    // The rollout goes on without the node: r2 (other routes) is written meanwhile.
    n.api
        .patch(
            &n.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"revision": "r2", "routes": routes(120, 100)}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(table_len(n.ns.name()), 100, "the cut-off node keeps r1");
    let t = n.ns.ip(&["route", "show", "table", "100"]).unwrap();
    assert!(t.contains("10.100.0.0/24"), "r1 kept: {t}");
    assert!(!t.contains("10.120.0.0/24"), "r2 not seen: {t}");
    // Drift while cut off: repaired from the last good config, locally.
    n.ns.ip(&[
        "route",
        "del",
        "10.100.5.0/24",
        "via",
        "192.0.2.1",
        "table",
        "100",
    ])
    .unwrap();
    eventually("the drift repaired while cut off", 10, || async {
        table_len(n.ns.name()) == 100
            && n.ns
                .ip(&["route", "show", "table", "100"])
                .unwrap()
                .contains("10.100.5.0/24")
    })
    .await;
    let s = status(&n.api, &n.name).await;
    assert!(
        !applied(&s, "r2"),
        "status says r2 applied on a node that never saw it"
    );
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(cut_at.elapsed())).await;
    partition.cut.store(false, Ordering::Release);
    let healed = Instant::now();
    eventually(
        "r2 applied and reported after the partition",
        120,
        || async { applied(&status(&n.api, &n.name).await, "r2") },
    )
    .await;
    let took = healed.elapsed();
    let t = n.ns.ip(&["route", "show", "table", "100"]).unwrap();
    assert!(
        t.contains("10.120.0.0/24") && !t.contains("10.100.0.0/24"),
        "{t}"
    );
    println!(
        "| node cut off from the API server 20 s | r1 → r2 written while cut; a route deleted by hand | {:.1} s (healed to r2 Applied) | — | r1 kept, drift repaired offline, r2 never reported early |",
        took.as_secs_f64()
    );
}

/// How many routes of table 100 in `ns` are [`routes`]`(base, ..)`'s and how many
/// `other`'s (by second octet: 5,000 routes span 20 of them).
fn counts(ns: &str, base: usize, other: usize) -> (usize, usize) {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "route", "show", "table", "100"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let octets: Vec<usize> = text
        .lines()
        .filter_map(|l| l.split('.').nth(1)?.parse().ok())
        .collect();
    let of = |b: usize| octets.iter().filter(|o| (b..b + 20).contains(o)).count();
    (of(base), of(other))
}

/// Fault 5b: the agent killed (SIGKILL) while rolling a failing revision back. r1 (5,000
/// routes) passed and was kept on disk; r2 (5,000 other routes and a probe nothing
/// answers) is applied, fails its probe and is being rolled back when the kill lands.
/// The next agent (same state file) finishes the rollback: exactly r1's routes, r2
/// reported failed, never Applied.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_mid_rollback_is_finished_by_the_next() {
    const HALF: usize = 5_000;
    let _serial = SERIAL.lock().await;
    let Some(n) = node("fault-rollback").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = format!(
        "--state-file={}",
        dir.path().join("last-good.json").display()
    );
    n.api
        .create(
            &PostParams::default(),
            &nnc(&n.name, "r1", routes(100, HALF), json!([])),
        )
        .await
        .unwrap();
    let first = agent(&n.cp.kubeconfig, &n.name, n.ns.name(), &n.log, &[&state]);
    eventually("r1 applied and kept", 60, || async {
        applied(&status(&n.api, &n.name).await, "r1")
    })
    .await;
    n.api
        .patch(
            &n.name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"revision": "r2", "routes": routes(150, HALF),
                                          "probes": [{"tcp": "127.0.0.1:9"}],
                                          "rollbackSeconds": 2}}),
            ),
        )
        .await
        .unwrap();
    // r2 in, then the rollback under way (r1's routes coming back, r2's not all gone).
    let t = Instant::now();
    let mut r2_seen = false;
    let at_kill = loop {
        let (r1, r2) = counts(n.ns.name(), 100, 150);
        r2_seen |= r2 == HALF && r1 == 0;
        if r2_seen && r1 > 0 && r1 < HALF {
            break (r1, r2);
        }
        if r2_seen && r1 == HALF && r2 == 0 {
            break (r1, r2);
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "r1 {r1}, r2 {r2} after 60 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    drop(first); // SIGKILL
    let after = counts(n.ns.name(), 100, 150);
    if at_kill.0 == HALF {
        eprintln!("NOTE: the rollback finished before the kill was seen mid-way");
    }
    let s = status(&n.api, &n.name).await;
    assert!(!applied(&s, "r2"), "r2 reported applied: {s:?}");
    let restart = Instant::now();
    let _second = agent(&n.cp.kubeconfig, &n.name, n.ns.name(), &n.log, &[&state]);
    eventually("the next agent ends at r1 with r2 failed", 120, || async {
        let s = status(&n.api, &n.name).await;
        s.failed_revision.as_deref() == Some("r2") && counts(n.ns.name(), 100, 150) == (HALF, 0)
    })
    .await;
    let took = restart.elapsed();
    let s = status(&n.api, &n.name).await;
    assert!(!applied(&s, "r2"), "r2 reported applied: {s:?}");
    println!(
        "| agent SIGKILLed mid-rollback | r2 (5,000 routes, failing probe) rolled back to r1 (5,000); r1 {} / r2 {} in the kernel when killed | {:.1} s (next agent to r1 only, r2 failed) | — | r2 never Applied; exactly r1's routes |",
        after.0,
        after.1,
        took.as_secs_f64()
    );
}
