//! `netpolicy operator` as real processes against a real API server: leader election
//! (two instances, one reconciles; the other takes over on SIGTERM at once and after a
//! hard kill when the lease expires), the routing controller's NodeNetworkConfigs, and
//! the metrics and health endpoints.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use netpolicy_operator::api::{NodeConfig, NodeNetworkConfig, crds};
use netpolicy_testenv::eventually;
use serde_json::json;

/// The operators here watch the whole (shared) cluster: tests that count an operator's
/// passes must not see another test's objects change, so the tests of this file run
/// one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A running `netpolicy operator`, killed when dropped.
struct Operator {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Operator {
    fn start(cp: &netpolicy_testenv::ControlPlane, ns: &str, lease: &str, id: &str) -> Self {
        Self::start_with(cp, ns, lease, id, &[])
    }

    fn start_with(
        cp: &netpolicy_testenv::ControlPlane,
        ns: &str,
        lease: &str,
        id: &str,
        extra: &[&str],
    ) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = cp.dir.join(format!("operator-{lease}-{id}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_netpolicy"))
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args([
                "--lease-namespace",
                ns,
                "--lease-name",
                lease,
                "--identity",
                id,
            ])
            .args(extra)
            .args(["--lease-seconds", "3", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .unwrap();
        Self { child, port, log }
    }

    /// `GET path` on the metrics/health port: (status, body), or None while it is down.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        common::http_get(self.port, path)
    }

    /// A metric's value (summed over its label sets), 0 when absent.
    fn metric(&self, name: &str) -> f64 {
        let Some((_, body)) = self.get("/metrics") else {
            return 0.0;
        };
        body.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// A metric's value for one controller label, 0 when absent.
    fn metric_for(&self, name: &str, controller: &str) -> f64 {
        let Some((_, body)) = self.get("/metrics") else {
            return 0.0;
        };
        let prefix = format!("{name}{{controller=\"{controller}\"}} ");
        body.lines()
            .filter_map(|l| l.strip_prefix(&prefix)?.parse::<f64>().ok())
            .sum()
    }

    /// The controller's pass count once it has stopped moving (unchanged for 2 s): the
    /// pass that logged something may still be writing its statuses when the log line is
    /// read, and counts itself only when it ends.
    async fn settled_passes(&self, controller: &str) -> f64 {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut last = self.metric_for("netpolicy_reconciles_total", controller);
        let mut since = std::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = self.metric_for("netpolicy_reconciles_total", controller);
            if now != last {
                (last, since) = (now, std::time::Instant::now());
            } else if since.elapsed() >= Duration::from_secs(2) {
                return now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{controller} never stopped passing: {}",
                self.log()
            );
        }
    }

    fn leads(&self) -> bool {
        self.metric("netpolicy_leader") == 1.0
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

async fn node(client: &Client, name: &str, pool: &str) {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"test-pool": pool}}
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap();
}

fn node_config(name: &str, pool: &str, to: &str) -> NodeConfig {
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1",
        "kind": "NodeConfig",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"test-pool": pool}},
            "routes": [{"to": to, "via": "192.0.2.1"}]
        }
    }))
    .unwrap()
}

async fn routes_of(api: &Api<NodeNetworkConfig>, node: &str) -> Option<Vec<String>> {
    let o = api.get_opt(node).await.ok()??;
    Some(
        o.spec
            .rendered
            .routes
            .iter()
            .map(|r| r.item.to.clone())
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn one_instance_leads_and_the_other_takes_over() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let ns = cp.namespace("lease-ns").await;
    let pool = cp.unique("pool");
    let (n1, n2) = (cp.unique("node"), cp.unique("node"));
    node(&client, &n1, &pool).await;
    node(&client, &n2, "elsewhere").await;

    let lease = cp.unique("lease");
    let a = Operator::start(cp, &ns, &lease, "a");
    let b = Operator::start(cp, &ns, &lease, "b");
    eventually("one instance leads", 30, || async {
        a.leads() || b.leads()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(a.leads() != b.leads(), "exactly one leads");
    let (leader, standby) = if a.leads() { (a, b) } else { (b, a) };

    // Both are healthy and ready; only the leader reconciles.
    for o in [&leader, &standby] {
        assert_eq!(o.get("/healthz").map(|r| r.0), Some(200));
    }
    eventually("both ready", 20, || async {
        leader.get("/readyz").map(|r| r.0) == Some(200)
            && standby.get("/readyz").map(|r| r.0) == Some(200)
    })
    .await;

    let ncs = Api::<NodeConfig>::all(client.clone());
    let nc = cp.unique("nc");
    ncs.create(
        &PostParams::default(),
        &node_config(&nc, &pool, "10.20.0.0/16"),
    )
    .await
    .unwrap();
    let nncs = Api::<NodeNetworkConfig>::all(client.clone());
    eventually("the NodeNetworkConfig of the selected node", 20, || async {
        routes_of(&nncs, &n1).await == Some(vec!["10.20.0.0/16".to_owned()])
    })
    .await;
    // The other node gets its (empty) config too.
    assert_eq!(routes_of(&nncs, &n2).await, Some(vec![]));
    assert!(
        leader.metric("netpolicy_reconciles_total") >= 1.0,
        "{}",
        leader.log()
    );
    assert_eq!(standby.metric("netpolicy_reconciles_total"), 0.0);
    assert_eq!(leader.metric("netpolicy_reconcile_errors_total"), 0.0);

    // SIGTERM: the leader stops its controllers, releases the lease, exits 0; the
    // standby takes over well before the lease would have expired.
    let mut leader = leader;
    let stopped = Instant::now();
    let pid = leader.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = leader.child.wait().unwrap();
    assert!(status.success(), "{status}: {}", leader.log());
    assert!(leader.log().contains("lease released"), "{}", leader.log());
    eventually("the standby takes over", 10, || async { standby.leads() }).await;
    println!("takeover after SIGTERM: {:?}", stopped.elapsed());

    // The new leader reconciles changes.
    ncs.patch(
        &nc,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"routes": [{"to": "10.21.0.0/16", "via": "192.0.2.1"}]}})),
    )
    .await
    .unwrap();
    eventually("the new leader renders the change", 20, || async {
        routes_of(&nncs, &n1).await == Some(vec!["10.21.0.0/16".to_owned()])
    })
    .await;
    assert!(standby.metric("netpolicy_reconciles_total") >= 1.0);

    // A deleted node loses its NodeNetworkConfig.
    Api::<Node>::all(client.clone())
        .delete(&n2, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the deleted node's NodeNetworkConfig goes", 20, || async {
        nncs.get_opt(&n2).await.unwrap().is_none()
    })
    .await;

    // A hard kill: a new instance takes over once the 3 s lease expires.
    let c = Operator::start(cp, &ns, &lease, "c");
    let mut standby = standby;
    let killed = Instant::now();
    standby.child.kill().unwrap();
    let _ = standby.child.wait();
    eventually(
        "a new instance takes over after the lease expires",
        30,
        || async { c.leads() },
    )
    .await;
    println!("takeover after SIGKILL: {:?}", killed.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_and_a_clear_error_without_a_cluster() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let out = Command::new(env!("CARGO_BIN_EXE_netpolicy"))
        .args([
            "operator",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--kubeconfig",
        ])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reading kubeconfig") && err.contains("nope"),
        "{err}"
    );

    // JSON logs: every line a JSON object.
    let ns = cp.namespace("lease-ns-json").await;
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let log = dir.path().join("op.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_netpolicy"))
        .args([
            "operator",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .args([
            "--lease-namespace",
            &ns,
            "--lease-seconds",
            "3",
            "--kubeconfig",
        ])
        .arg(&cp.kubeconfig)
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    eventually("the operator leads", 20, || async {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("caches synced")
    })
    .await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v.get("level").is_some() && v.get("fields").is_some(),
            "{line}"
        );
    }
}

/// Regressions, live: a NodeConfig with a plain label map for a selector (the API
/// server used to prune it to the empty selector, which selects every node) lands on
/// no node and the operator says why; and agents' status writes on
/// NodeNetworkConfigs start no render pass and no write.
#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_selector_selects_nothing_and_status_writes_do_not_start_a_pass() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let ns = cp.namespace("lease-ns-quiet").await;
    let pool = cp.unique("pool");
    let (n1, n2) = (cp.unique("node"), cp.unique("node"));
    node(&client, &n1, &pool).await;
    node(&client, &n2, "elsewhere").await;
    let lease = cp.unique("lease");
    let op = Operator::start(cp, &ns, &lease, "solo");
    let ncs = Api::<NodeConfig>::all(client.clone());
    let good = cp.unique("nc-good");
    ncs.create(
        &PostParams::default(),
        &node_config(&good, &pool, "10.20.0.0/16"),
    )
    .await
    .unwrap();
    let nncs = Api::<NodeNetworkConfig>::all(client.clone());
    eventually("the good NodeConfig is rendered", 30, || async {
        routes_of(&nncs, &n1).await == Some(vec!["10.20.0.0/16".to_owned()])
    })
    .await;

    // The plain map is kept by the API server (not pruned to `{}`) ...
    let plain = cp.unique("nc-plain");
    // Raw JSON: the typed NodeConfig keeps only the unknown key's name.
    let raw = json!({
        "apiVersion": "netpolicy.io/v1alpha1",
        "kind": "NodeConfig",
        "metadata": {"name": plain},
        "spec": {
            "nodeSelector": {"test-pool": pool},
            "routes": [{"to": "10.99.0.0/16", "via": "192.0.2.1"}]
        }
    });
    let dynamic: Api<kube::core::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::erase::<NodeConfig>(&()),
    );
    dynamic
        .patch(
            &plain,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&raw),
        )
        .await
        .unwrap();
    let stored = dynamic.get(&plain).await.unwrap();
    assert_eq!(
        stored.data["spec"]["nodeSelector"]["test-pool"],
        json!(pool)
    );
    // ... and the operator refuses it by name and puts its route on no node.
    eventually("the operator reports the invalid selector", 30, || async {
        op.log().contains(&plain) && op.log().contains("spec.nodeSelector.test-pool")
    })
    .await;
    assert_eq!(
        routes_of(&nncs, &n1).await,
        Some(vec!["10.20.0.0/16".to_owned()])
    );
    assert_eq!(routes_of(&nncs, &n2).await, Some(vec![]));

    // An agent's status write is not a reason to render: no pass, no write.
    let passes = op.settled_passes("routing").await;
    let writes = cp.writes("nodenetworkconfigs", &n1).len();
    for i in 0..3 {
        nncs.patch_status(
            &n1,
            &PatchParams::apply("fake-agent").force(),
            &Patch::Apply(json!({
                "apiVersion": "netpolicy.io/v1alpha1",
                "kind": "NodeNetworkConfig",
                "status": {"observedGeneration": i}
            })),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        op.metric_for("netpolicy_reconciles_total", "routing"),
        passes,
        "{}",
        op.log()
    );
    // Only the three status writes made here: the operator wrote nothing.
    let after = cp.writes("nodenetworkconfigs", &n1);
    assert_eq!(after.len() - writes, 3, "{:?}", &after[writes..]);
    assert!(after[writes..].iter().all(|w| w.subresource == "status"));
    // Text logs to a file carry no ANSI colour codes.
    assert!(!op.log().contains('\x1b'), "{}", op.log());
}

/// NodeConfig status, live: matched and applied nodes, `Ready` and `Conflict` naming
/// node, item and both sources, an Event per new conflict, and no write while nothing
/// changes.
#[tokio::test(flavor = "multi_thread")]
async fn policy_status_reports_matches_conflicts_and_applied_nodes_and_stays_quiet() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let ns = cp.namespace("lease-ns-status").await;
    let pool = cp.unique("pool");
    let n1 = cp.unique("node");
    node(&client, &n1, &pool).await;
    let _op = Operator::start(cp, &ns, &cp.unique("lease"), "solo");
    let ncs = Api::<NodeConfig>::all(client.clone());
    let (a, b) = (cp.unique("nc-a"), cp.unique("nc-b"));
    let mut nc_a = node_config(&a, &pool, "10.20.0.0/16");
    nc_a.spec.routing.routes[0].via = Some("192.0.2.1".into());
    let mut nc_b = node_config(&b, &pool, "10.20.0.0/16");
    nc_b.spec.routing.routes[0].via = Some("192.0.2.2".into());
    ncs.create(&PostParams::default(), &nc_a).await.unwrap();
    ncs.create(&PostParams::default(), &nc_b).await.unwrap();
    let status = |name: String| {
        let ncs = ncs.clone();
        async move { ncs.get(&name).await.unwrap().status.unwrap_or_default() }
    };
    let cond = |s: &netpolicy_operator::api::PolicyStatus, t: &str| {
        s.conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            .unwrap_or_default()
    };
    eventually("both report the conflict", 30, || async {
        cond(&status(a.clone()).await, "Conflict").0 == "True"
            && cond(&status(b.clone()).await, "Conflict").0 == "True"
    })
    .await;
    let s = status(a.clone()).await;
    assert_eq!(s.matched_nodes, 1);
    assert_eq!(cond(&s, "Ready").1, "Conflict");
    assert_eq!(s.conflicts.len(), 1);
    assert_eq!(s.conflicts[0].node, n1);
    assert_eq!(s.conflicts[0].item, "route 10.20.0.0/16 table 254");
    assert_eq!(
        s.conflicts[0].sources,
        [format!("NodeConfig/{a}"), format!("NodeConfig/{b}")]
    );
    // An Event on the NodeConfig says so.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "default");
    eventually("a Conflict Event regarding the NodeConfig", 20, || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Conflict")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(a.as_str())
                    && e.note.as_deref().is_some_and(|n| n.contains(&n1))
            })
    })
    .await;
    // Held: the node got no NodeNetworkConfig with either route.
    let nncs = Api::<NodeNetworkConfig>::all(client.clone());
    assert_eq!(routes_of(&nncs, &n1).await, None);

    // Quiet while nothing changes.
    let before = cp.writes("nodeconfigs", &a).len() + cp.writes("nodeconfigs", &b).len();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = cp.writes("nodeconfigs", &a).len() + cp.writes("nodeconfigs", &b).len();
    assert_eq!(after, before, "policy status rewritten on a quiet cluster");

    // b outranks a: the conflict goes, n1 is rendered with b's route; until an agent
    // applies it, b is Applying.
    ncs.patch(
        &b,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"priority": 1}})),
    )
    .await
    .unwrap();
    eventually("the conflict is resolved", 30, || async {
        cond(&status(a.clone()).await, "Conflict").0 == "False"
            && cond(&status(b.clone()).await, "Ready").1 == "Applying"
    })
    .await;
    let nnc = nncs.get(&n1).await.unwrap();
    assert_eq!(
        nnc.spec.rendered.routes[0].item.via.as_deref(),
        Some("192.0.2.2")
    );
    // The agent reports the revision applied: b is Ready on 1 of 1 node.
    nncs.patch_status(
        &n1,
        &PatchParams::apply("fake-agent").force(),
        &Patch::Apply(json!({
            "apiVersion": "netpolicy.io/v1alpha1",
            "kind": "NodeNetworkConfig",
            "status": {"appliedRevision": nnc.spec.revision}
        })),
    )
    .await
    .unwrap();
    eventually("b is Ready", 30, || async {
        let s = status(b.clone()).await;
        s.applied_nodes == 1 && cond(&s, "Ready").0 == "True"
    })
    .await;
}

/// The controller reacts to the object that changed, whatever its kind: a Node
/// relabelled into and out of a policy, a NodeNetworkConfig edited or deleted by
/// someone else, a policy deleted. Each reaches the NodeNetworkConfig without a resync
/// (the resync is 5 minutes away).
#[tokio::test(flavor = "multi_thread")]
async fn the_controller_follows_each_kind_of_change() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let ns = cp.namespace("follow-ns").await;
    let pool = cp.unique("pool");
    let n1 = cp.unique("node");
    node(&client, &n1, "elsewhere").await;
    let nc = cp.unique("nc");
    let ncs = Api::<NodeConfig>::all(client.clone());
    ncs.create(
        &PostParams::default(),
        &node_config(&nc, &pool, "10.30.0.0/16"),
    )
    .await
    .unwrap();
    let lease = cp.unique("lease");
    let op = Operator::start(cp, &ns, &lease, "follow");
    let nncs = Api::<NodeNetworkConfig>::all(client.clone());
    eventually("an empty config for the unselected node", 30, || async {
        routes_of(&nncs, &n1).await == Some(vec![])
    })
    .await;
    // Written by the verbs that cost the API server least (benches/README.md, "What a
    // write costs the API server, per verb"): a create for a new one ...
    let writes_of_n1 = |from: usize| -> Vec<(String, u16)> {
        cp.writes_where("nodenetworkconfigs", |name| name == n1)
            .into_iter()
            .filter(|w| w.subresource.is_empty())
            .skip(from)
            .map(|w| (w.verb, w.code))
            .collect()
    };
    assert_eq!(writes_of_n1(0), [("create".to_owned(), 201)]);
    // ... and an update of the stored object for a change, which keeps what others put
    // on it: a person's label, annotation and finalizer.
    nncs.patch(
        &n1,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "labels": {"team": "net"},
            "annotations": {"note": "kept"},
            "finalizers": ["example.com/hold"],
        }})),
    )
    .await
    .unwrap();
    let before_change = writes_of_n1(0).len();
    // The operator's cache has the person's write before the change that follows.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let nodes = Api::<Node>::all(client.clone());
    let relabel = |pool: String| {
        let nodes = nodes.clone();
        let n1 = n1.clone();
        async move {
            nodes
                .patch(
                    &n1,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"test-pool": pool}}})),
                )
                .await
                .unwrap();
        }
    };
    relabel(pool.clone()).await;
    eventually("relabelled into the policy", 20, || async {
        routes_of(&nncs, &n1).await == Some(vec!["10.30.0.0/16".to_owned()])
    })
    .await;
    // An update over the version the operator's cache holds; when the cache is still
    // behind the person's write (a loaded machine: the 2 s above are a wait, not a
    // guarantee), the API server refuses that update and the operator applies instead,
    // which keeps the person's fields as well.
    let written = writes_of_n1(before_change);
    if written.first() == Some(&("update".to_owned(), 409)) {
        eprintln!(
            "the operator's cache was behind the person's write: update refused (409), \
             applied instead: {written:?}"
        );
        assert_eq!(written[1..], [("patch".to_owned(), 200)]);
    } else {
        assert_eq!(written, [("update".to_owned(), 200)]);
    }
    let kept = nncs.get(&n1).await.unwrap().metadata;
    assert_eq!(
        kept.labels
            .unwrap_or_default()
            .get("team")
            .map(String::as_str),
        Some("net")
    );
    assert_eq!(
        kept.annotations
            .unwrap_or_default()
            .get("note")
            .map(String::as_str),
        Some("kept")
    );
    assert_eq!(kept.finalizers, Some(vec!["example.com/hold".to_owned()]));
    nncs.patch(
        &n1,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    // Someone else edits the spec: put back.
    nncs.patch(
        &n1,
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(json!({
            "apiVersion": "netpolicy.io/v1alpha1",
            "kind": "NodeNetworkConfig",
            "spec": {"revision": "tampered", "routes": []}
        })),
    )
    .await
    .unwrap();
    eventually("an edited NodeNetworkConfig is put back", 20, || async {
        nncs.get_opt(&n1)
            .await
            .unwrap()
            .is_some_and(|o| o.spec.revision != "tampered" && o.spec.rendered.routes.len() == 1)
    })
    .await;
    // Someone else deletes it: made again.
    nncs.delete(&n1, &DeleteParams::default()).await.unwrap();
    eventually("a deleted NodeNetworkConfig is made again", 20, || async {
        routes_of(&nncs, &n1).await == Some(vec!["10.30.0.0/16".to_owned()])
    })
    .await;
    relabel("elsewhere".to_owned()).await;
    eventually("relabelled out of the policy", 20, || async {
        routes_of(&nncs, &n1).await == Some(vec![])
    })
    .await;
    relabel(pool.clone()).await;
    eventually("back in", 20, || async {
        routes_of(&nncs, &n1).await == Some(vec!["10.30.0.0/16".to_owned()])
    })
    .await;
    ncs.delete(&nc, &DeleteParams::default()).await.unwrap();
    eventually("the deleted policy's routes go", 20, || async {
        routes_of(&nncs, &n1).await == Some(vec![])
    })
    .await;
    assert_eq!(
        op.metric_for("netpolicy_reconcile_errors_total", "routing"),
        0.0,
        "{}",
        op.log()
    );
    nodes.delete(&n1, &DeleteParams::default()).await.unwrap();
}
