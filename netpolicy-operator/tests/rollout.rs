//! Safe rollout end to end: the operator against the real API server and `netpolicy
//! agent`s programming real network namespaces, each node's namespace wired to a
//! "gateway" namespace holding the probe target (198.51.100.1).
//!
//! - A change rolls out one node at a time (`maxUnavailable: 1`): never more than one
//!   node is between receiving its revision and reporting it applied.
//! - A change that blackholes the probe target reaches the first node only; its agent's
//!   ping fails, it restores its last good config within `rollbackSeconds` and reports
//!   `Degraded`; the NodeConfig says the rollout is halted (condition and Event) and the
//!   other nodes never see the change, in their NodeNetworkConfig or their kernel. A
//!   fixed spec then rolls out to every node.
//! - An agent that loses the API server after applying a revision rolls back by itself
//!   (its API server runs behind a proxy the test cuts), and reports why once it can.
//! - A node cut off from the API server while the rollout reaches it holds the rollout
//!   there (never counted applied; the nodes after it wait) until it is back.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use common::Killed;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{NodeConfig, NodeNetworkConfig, crds};
use netpolicy_testenv::eventually;
use serde_json::{Value, json};

/// A node's namespace (`ext0`, 198.51.100.2/24) wired to its gateway's (`ext1`,
/// 198.51.100.1/24). `None` without root.
fn wired(purpose: &str) -> Option<(TestNamespace, TestNamespace)> {
    let node = TestNamespace::new(&format!("{purpose}: node")).unwrap()?;
    let gw = TestNamespace::new(&format!("{purpose}: gateway")).unwrap()?;
    node.ip(&[
        "link",
        "add",
        "ext0",
        "type",
        "veth",
        "peer",
        "name",
        "ext1",
        "netns",
        gw.name(),
    ])
    .unwrap();
    node.ip(&["addr", "add", "198.51.100.2/24", "dev", "ext0"])
        .unwrap();
    gw.ip(&["addr", "add", "198.51.100.1/24", "dev", "ext1"])
        .unwrap();
    for (ns, l) in [(&node, "ext0"), (&node, "lo"), (&gw, "ext1"), (&gw, "lo")] {
        ns.ip(&["link", "set", l, "up"]).unwrap();
    }
    Some((node, gw))
}

async fn nnc(client: &Client, node: &str) -> Option<NodeNetworkConfig> {
    Api::<NodeNetworkConfig>::all(client.clone())
        .get_opt(node)
        .await
        .unwrap()
}

/// Nodes `names`, labelled `pool: <pool>`.
async fn create_pool_nodes(client: &Client, names: &[String], pool: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    for n in names {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": n, "labels": {"pool": pool}}}))
                .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
}

/// An agent per node (node `i` on `nets[i]`, reaching the API server through
/// `kubeconfig(i)`) and the operator (`operator-<what>.log`), once every node applied its
/// first NodeNetworkConfig. They run as long as what is returned lives.
async fn start_pool<'a>(
    client: &Client,
    names: &[String],
    nets: &[(TestNamespace, TestNamespace)],
    kubeconfig: impl Fn(usize) -> &'a std::path::PathBuf,
    lease_ns: &str,
    what: &str,
) -> (Vec<Killed>, Killed) {
    let cp = netpolicy_testenv::shared();
    let agents = names
        .iter()
        .zip(nets)
        .enumerate()
        .map(|(i, (n, (ns, _)))| {
            common::agent(
                kubeconfig(i),
                n,
                ns.name(),
                &cp.dir.join(format!("agent-{n}.log")),
            )
        })
        .collect();
    let op = common::operator(
        cp,
        lease_ns,
        &cp.dir.join(format!("operator-{what}.log")),
        "info,netpolicy_operator::routing=debug",
    );
    eventually(
        "every node has its first NodeNetworkConfig applied",
        30,
        || all_applied(client, names),
    )
    .await;
    (agents, op)
}

/// Every node of `names` has a NodeNetworkConfig whose revision its agent applied.
async fn all_applied(client: &Client, names: &[String]) -> bool {
    for n in names {
        if !nnc(client, n).await.is_some_and(|o| applied(&o)) {
            return false;
        }
    }
    true
}

/// The NodeNetworkConfig revision of each node of `names`.
async fn revisions(client: &Client, names: &[String]) -> Vec<String> {
    let mut v = Vec::new();
    for n in names {
        v.push(nnc(client, n).await.unwrap().spec.revision);
    }
    v
}

fn applied(o: &NodeNetworkConfig) -> bool {
    o.status
        .as_ref()
        .and_then(|s| s.applied_revision.as_deref())
        == Some(o.spec.revision.as_str())
}

fn condition(
    conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    t: &str,
) -> Option<(String, String, String)> {
    conds
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_rolls_out_in_waves_and_a_bad_one_stops_at_the_first_node() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let mut nets = Vec::new();
    for i in 0..4 {
        let Some(w) = wired(&format!("rollout-{i}")) else {
            common::skip(
                "rollout waves: not root, no network namespaces (the rollout needs agents)",
            );
            return;
        };
        nets.push(w);
    }
    let lease_ns = cp.namespace("ro-lease").await;
    let pool = cp.unique("pool");
    let names: Vec<String> = (0..4).map(|i| cp.unique(&format!("ro{i}"))).collect();
    create_pool_nodes(&client, &names, &pool).await;
    let _running = start_pool(
        &client,
        &names,
        &nets,
        |_| &cp.kubeconfig,
        &lease_ns,
        "rollout",
    )
    .await;

    // A good change, one node at a time.
    let ncs: Api<NodeConfig> = Api::all(client.clone());
    let nc_name = cp.unique("probed");
    let spec = |rules: Value, extra_route: bool| {
        let mut routes = vec![json!({"to": "10.50.0.0/16", "via": "198.51.100.1", "table": 150})];
        if extra_route {
            routes.push(json!({"to": "10.51.0.0/16", "via": "198.51.100.1", "table": 150}));
        }
        json!({
            "nodeSelector": {"matchLabels": {"pool": pool}},
            "rollout": {"maxUnavailable": 1, "rollbackSeconds": 4},
            "probes": [{"ping": "198.51.100.1"}],
            "routes": routes,
            "rules": rules,
        })
    };
    let initial = revisions(&client, &names).await;
    let nc: NodeConfig = serde_json::from_value(
        json!({"metadata": {"name": nc_name}, "spec": spec(json!([]), false)}),
    )
    .unwrap();
    ncs.create(&PostParams::default(), &nc).await.unwrap();
    // Watches a rollout from `old` revisions until every node applied one new
    // revision; returns the most nodes in flight at once.
    let watch_rollout = |what: &'static str, old: Vec<String>| {
        let client = client.clone();
        let names = names.clone();
        async move {
            let start = Instant::now();
            let mut max_in_flight = 0;
            loop {
                let mut in_flight = 0;
                let mut revs = Vec::new();
                for n in &names {
                    let o = nnc(&client, n).await.unwrap();
                    if !applied(&o) {
                        in_flight += 1;
                    }
                    revs.push(o.spec.revision.clone());
                }
                max_in_flight = max_in_flight.max(in_flight);
                let all_new = revs.iter().zip(&old).all(|(a, b)| a != b)
                    && revs.iter().all(|r| *r == revs[0]);
                if in_flight == 0 && all_new {
                    return max_in_flight;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(90),
                    "{what}: not rolled out in 90 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let max = watch_rollout("the good change", initial).await;
    assert!(
        max <= 1,
        "{max} nodes in flight at once with maxUnavailable 1"
    );
    for (n, (ns, _)) in names.iter().zip(&nets) {
        eventually("the route is in every node's kernel", 30, || async {
            ns.ip(&["route", "show", "table", "150"])
                .unwrap_or_default()
                .contains("10.50.0.0/16 via 198.51.100.1")
        })
        .await;
        let o = nnc(&client, n).await.unwrap();
        assert_eq!(o.spec.probes.len(), 1);
        assert_eq!(o.spec.rollback_seconds, Some(4));
    }
    let good = revisions(&client, &names).await;

    // A bad change: it blackholes the probe target.
    ncs.patch(&nc_name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec(json!([{"priority": 100, "to": "198.51.100.1/32", "action": "blackhole"}]), false)})))
        .await
        .unwrap();
    let first = &names[0];
    eventually(
        "the first node rolls the bad revision back and reports Degraded",
        40,
        || async {
            nnc(&client, first).await.is_some_and(|o| {
                let st = o.status.clone().unwrap_or_default();
                st.failed_revision.as_deref() == Some(o.spec.revision.as_str())
                    && condition(&st.conditions, "Degraded")
                        .is_some_and(|c| c.0 == "True" && c.1 == "ProbeFailed")
            })
        },
    )
    .await;
    let o = nnc(&client, first).await.unwrap();
    let msg = condition(&o.status.unwrap().conditions, "Degraded")
        .unwrap()
        .2;
    assert!(
        msg.contains("ping 198.51.100.1") && msg.contains("restored revision"),
        "{msg}"
    );
    // Its kernel is back at the last good config.
    let (ns0, _) = &nets[0];
    let rules = ns0.ip(&["rule", "show"]).unwrap();
    assert!(!rules.contains("blackhole"), "{rules}");
    assert!(
        ns0.ip(&["route", "show", "table", "150"])
            .unwrap()
            .contains("10.50.0.0/16")
    );
    // The NodeConfig says the rollout is halted, with an Event.
    eventually("the NodeConfig reports the halted rollout", 20, || async {
        ncs.get(&nc_name).await.unwrap().status.is_some_and(|s| {
            condition(&s.conditions, "Degraded").is_some_and(|c| {
                c.0 == "True" && c.1 == "RolloutHalted" && c.2.contains(first.as_str())
            }) && s.pending_nodes == 3
        })
    })
    .await;
    eventually("a RolloutHalted Event on the NodeConfig", 20, || async {
        !common::events_about(&client, None, "RolloutHalted", "NodeConfig", &nc_name)
            .await
            .is_empty()
    })
    .await;
    // The other nodes never see it: neither their NodeNetworkConfig nor their kernel.
    for _ in 0..30 {
        for (i, n) in names.iter().enumerate().skip(1) {
            assert_eq!(
                nnc(&client, n).await.unwrap().spec.revision,
                good[i],
                "{n} was given the bad revision"
            );
            let rules = nets[i].0.ip(&["rule", "show"]).unwrap();
            assert!(!rules.contains("blackhole"), "{n}: {rules}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Fixed: the rollout resumes and reaches every node.
    ncs.patch(
        &nc_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec(json!([]), true)})),
    )
    .await
    .unwrap();
    let max = watch_rollout("the fixed change", good.clone()).await;
    assert!(max <= 1, "{max} nodes in flight at once");
    for (ns, _) in &nets {
        eventually("the fixed route is in every kernel", 30, || async {
            ns.ip(&["route", "show", "table", "150"])
                .unwrap_or_default()
                .contains("10.51.0.0/16")
        })
        .await;
    }
    eventually("the NodeConfig is no longer Degraded", 20, || async {
        ncs.get(&nc_name).await.unwrap().status.is_some_and(|s| {
            condition(&s.conditions, "Degraded").is_some_and(|c| c.0 == "False")
                && s.pending_nodes == 0
        })
    })
    .await;
    // Quiet: rolled out, several resyncs (operator 2 s, agents 1 s) write nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let count = || {
        cp.writes_where("nodenetworkconfigs", |n| names.iter().any(|x| x == n))
            .len()
            + cp.writes("nodeconfigs", &nc_name).len()
    };
    let before = count();
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(count() - before, 0, "quiet resyncs wrote");
}

/// A TCP proxy to the API server that the test can cut: every connection through it
/// closes, and new ones are closed at once, until it is restored.
struct Proxy {
    port: u16,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, rx) = tokio::sync::watch::channel(false);
        let upstream = Arc::new(upstream);
        tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = listener.accept().await else {
                    return;
                };
                if *rx.borrow() {
                    continue; // dropped: closed at once
                }
                let upstream = Arc::clone(&upstream);
                let mut rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(upstream.as_str()).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = rx.wait_for(|c| *c) => {}
                    }
                });
            }
        });
        Self { port, cut }
    }

    /// A proxy to `cp`'s API server and a kubeconfig (`cp.dir/file`) that goes through it.
    async fn kubeconfig(
        cp: &netpolicy_testenv::ControlPlane,
        file: &str,
    ) -> (Self, std::path::PathBuf) {
        let text = std::fs::read_to_string(&cp.kubeconfig).unwrap();
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: https://"))
            .unwrap()
            .to_owned();
        let proxy = Self::start(server.clone()).await;
        let path = cp.dir.join(file);
        std::fs::write(
            &path,
            text.replace(&server, &format!("127.0.0.1:{}", proxy.port)),
        )
        .unwrap();
        (proxy, path)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_loses_the_api_server_rolls_back_by_itself() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let Some((node_ns, gw_ns)) = wired("apiloss") else {
        common::skip("rollout API loss: not root, no network namespaces");
        return;
    };
    // The agent reaches the API server through the proxy.
    let (proxy, kubeconfig) = Proxy::kubeconfig(cp, "kubeconfig-proxied").await;
    // No Node object: no operator renders this NodeNetworkConfig; the test writes it.
    let node = cp.unique("apiloss");
    let api: Api<NodeNetworkConfig> = Api::all(client.clone());
    let obj = |revision: &str, spec: Value| -> NodeNetworkConfig {
        let mut s = spec;
        s["revision"] = json!(revision);
        serde_json::from_value(json!({"apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig", "metadata": {"name": node}, "spec": s})).unwrap()
    };
    let route = |to: &str| json!({"to": to, "via": "198.51.100.1", "table": 150, "sources": [{"kind": "NodeConfig", "name": "t"}]});
    api.create(
        &PostParams::default(),
        &obj("r1", json!({"routes": [route("10.60.0.0/16")]})),
    )
    .await
    .unwrap();
    let _agent = common::agent(
        &kubeconfig,
        &node,
        node_ns.name(),
        &cp.dir.join(format!("agent-{node}.log")),
    );
    eventually("r1 applied", 30, || async {
        api.get(&node)
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.applied_revision.as_deref() == Some("r1"))
    })
    .await;
    // r2 probes an address nobody has yet, so the agent keeps probing; once the test
    // sees r2 in the kernel it cuts the API server and gives the address: only the API
    // server fails from then on.
    let mut r2 = obj(
        "r2",
        json!({"routes": [route("10.60.0.0/16"), route("10.61.0.0/16")], "probes": [{"ping": "198.51.100.77"}], "rollbackSeconds": 10}),
    );
    r2.metadata.resource_version = api.get(&node).await.unwrap().metadata.resource_version;
    api.replace(&node, &PostParams::default(), &r2)
        .await
        .unwrap();
    eventually("r2 is in the kernel", 20, || async {
        node_ns
            .ip(&["route", "show", "table", "150"])
            .unwrap_or_default()
            .contains("10.61.0.0/16")
    })
    .await;
    proxy.cut.send(true).unwrap();
    gw_ns
        .ip(&["addr", "add", "198.51.100.77/24", "dev", "ext1"])
        .unwrap();
    let cut_at = Instant::now();
    eventually(
        "the agent rolls back by itself while the API server is unreachable",
        20,
        || async {
            !node_ns
                .ip(&["route", "show", "table", "150"])
                .unwrap_or_default()
                .contains("10.61.0.0/16")
        },
    )
    .await;
    println!(
        "rolled back {:?} after the API server was cut",
        cut_at.elapsed()
    );
    assert!(
        node_ns
            .ip(&["route", "show", "table", "150"])
            .unwrap()
            .contains("10.60.0.0/16"),
        "r1 was not restored"
    );
    // Back online, it says why, and does not apply r2 again.
    proxy.cut.send(false).unwrap();
    eventually("the agent reports the rollback", 30, || async {
        api.get(&node).await.unwrap().status.is_some_and(|s| {
            s.failed_revision.as_deref() == Some("r2")
                && s.applied_revision.as_deref() == Some("r1")
                && condition(&s.conditions, "Degraded")
                    .is_some_and(|c| c.0 == "True" && c.1 == "APIServerUnreachable")
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !node_ns
            .ip(&["route", "show", "table", "150"])
            .unwrap()
            .contains("10.61.0.0/16"),
        "r2 was applied again"
    );
}

/// Fault 4, the rollout's side (docs/reliability.md): a node cut off from the API
/// server while a change rolls out (`maxUnavailable: 1`, the cut-off node first in name
/// order). Its NodeNetworkConfig gets the new revision, its agent cannot see it, and
/// the rollout holds there: the node is never counted as done, the other nodes keep
/// their config, the policy is not Ready. Once the node is back the rollout completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_holds_at_a_node_cut_off_and_completes_when_it_is_back() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let mut nets = Vec::new();
    for i in 0..3 {
        let Some(w) = wired(&format!("rollout-hold-{i}")) else {
            common::skip("rollout hold at a cut-off node: not root, no network namespaces");
            return;
        };
        nets.push(w);
    }
    let (proxy, proxied) = Proxy::kubeconfig(cp, "kubeconfig-rollout-hold").await;
    let lease_ns = cp.namespace("roh-lease").await;
    let pool = cp.unique("hold-pool");
    // Name order is rollout order: the cut-off node (index 0) goes first.
    let names: Vec<String> = (0..3).map(|i| cp.unique(&format!("roh{i}"))).collect();
    create_pool_nodes(&client, &names, &pool).await;
    let _running = start_pool(
        &client,
        &names,
        &nets,
        |i| if i == 0 { &proxied } else { &cp.kubeconfig },
        &lease_ns,
        "rollout-hold",
    )
    .await;
    let before = revisions(&client, &names).await;

    proxy.cut.send(true).unwrap();
    let ncs: Api<NodeConfig> = Api::all(client.clone());
    let nc_name = cp.unique("held");
    let nc: NodeConfig = serde_json::from_value(json!({
        "metadata": {"name": nc_name},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": pool}},
            "rollout": {"maxUnavailable": 1, "rollbackSeconds": 4},
            "probes": [{"ping": "198.51.100.1"}],
            "routes": [{"to": "10.52.0.0/16", "via": "198.51.100.1", "table": 150}],
        }
    }))
    .unwrap();
    ncs.create(&PostParams::default(), &nc).await.unwrap();
    eventually(
        "the cut-off node's NodeNetworkConfig has the change",
        20,
        || async {
            nnc(&client, &names[0])
                .await
                .is_some_and(|o| o.spec.revision != before[0])
        },
    )
    .await;
    // 15 s cut off: the rollout holds at that node.
    let held_from = Instant::now();
    while held_from.elapsed() < Duration::from_secs(15) {
        let o = nnc(&client, &names[0]).await.unwrap();
        assert!(
            !applied(&o),
            "the cut-off node counted as applied: {:?}",
            o.status
        );
        for (n, old) in names.iter().zip(&before).skip(1) {
            let o = nnc(&client, n).await.unwrap();
            assert_eq!(
                &o.spec.revision, old,
                "{n} got the change while the node before it was cut off (maxUnavailable 1)"
            );
        }
        let s = ncs.get(&nc_name).await.unwrap().status.unwrap_or_default();
        assert!(
            condition(&s.conditions, "Ready").is_none_or(|c| c.0 != "True"),
            "the policy says Ready while a node cannot have its change: {s:?}"
        );
        assert!(
            !nets[1..].iter().any(|(ns, _)| ns
                .ip(&["route", "show", "table", "150"])
                .unwrap_or_default()
                .contains("10.52.0.0/16")),
            "a held node's kernel has the change"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let s = ncs.get(&nc_name).await.unwrap().status.unwrap_or_default();
    println!(
        "held 15 s at the cut-off node: appliedNodes {}, pendingNodes {}",
        s.applied_nodes, s.pending_nodes
    );
    assert_eq!(s.pending_nodes, 2, "the two nodes after it wait: {s:?}");

    proxy.cut.send(false).unwrap();
    let healed = Instant::now();
    eventually(
        "the rollout completes once the node is back",
        90,
        || async {
            let mut ok = true;
            for (n, old) in names.iter().zip(&before) {
                ok &= nnc(&client, n)
                    .await
                    .is_some_and(|o| applied(&o) && &o.spec.revision != old);
            }
            ok && ncs
                .get(&nc_name)
                .await
                .unwrap()
                .status
                .is_some_and(|s| condition(&s.conditions, "Ready").is_some_and(|c| c.0 == "True"))
        },
    )
    .await;
    println!(
        "| a node cut off while a rollout reaches it (maxUnavailable 1) | a NodeConfig rolling out to 3 nodes, the cut-off node first | rollout complete {:.1} s after the node was back | — | held at the node 15 s: never counted applied, the others kept their config, policy not Ready |",
        healed.elapsed().as_secs_f64()
    );
}
