//! The route-reflector job with Calico's etcdv3 datastore (`spec.datastore.etcdv3`):
//! `netpolicy operator` as a real process, Kubernetes Nodes in a real API server, and
//! Calico's objects in a real etcd (the test control plane's own, under `/calico/`, as
//! a Calico cluster in etcd mode keeps them).
//!
//! The test plays calico-node: it registers a Calico `Node` in etcd for each Kubernetes
//! Node (labels copied, `spec.orchRefs` naming the Kubernetes Node), as calico-node does
//! at start. It reads etcd directly through etcd's JSON gateway (not through the
//! operator's client) and checks snapshots taken at one etcd revision with Calico's
//! sessions and BIRD's route reflection (`netpolicy_rr::sim`): every node learns every
//! other node's route in every state it sees, while nodes register late, a reflector
//! node goes, the cluster doubles, a reflector turns NotReady, the topology switches
//! `simple` → `multi` → `simple`, and the mesh is turned off. Kubernetes Nodes are never
//! written in this mode; someone else's BGPPeer in etcd is never touched; a quiet
//! cluster gets no write.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use common::{Killed, ready_node, rr_settled, rrc_status};

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use base64::{Engine as _, engine::general_purpose::STANDARD as B64};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use netpolicy_operator::api::{RouteReflectorConfig, crds};
use netpolicy_rr::{BgpPeer, Current, Marks, NodeInfo, sim};
use serde_json::{Value, json};

const ZONES: [&str; 3] = ["a", "b", "c"];
const LABEL: &str = "calico-route-reflector";
const CALICO: &str = "/calico/resources/v3/projectcalico.org/";

/// etcd through its JSON gateway, as a test tool (as etcd's `root` user where etcd
/// has authentication enabled: `token`).
#[derive(Clone)]
struct EtcdHttp {
    url: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl EtcdHttp {
    async fn call(&self, path: &str, body: Value) -> Value {
        let mut request = self.http.post(format!("{}{path}", self.url)).json(&body);
        if let Some(t) = &self.token {
            request = request.header("Authorization", t);
        }
        request
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn put(&self, key: &str, value: &Value) {
        self.call(
            "/v3/kv/put",
            json!({"key": B64.encode(key), "value": B64.encode(value.to_string())}),
        )
        .await;
    }

    async fn delete(&self, key: &str) {
        self.call("/v3/kv/deleterange", json!({"key": B64.encode(key)}))
            .await;
    }

    /// Every key under `prefix` at `revision` (latest: `None`), with the revision read.
    async fn range(&self, prefix: &str, revision: Option<i64>) -> (i64, BTreeMap<String, Value>) {
        let mut end = prefix.as_bytes().to_vec();
        *end.last_mut().unwrap() += 1;
        let mut body = json!({"key": B64.encode(prefix), "range_end": B64.encode(end)});
        if let Some(r) = revision {
            body["revision"] = json!(r.to_string());
        }
        let answer = self.call("/v3/kv/range", body).await;
        let rev = answer["header"]["revision"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let kvs = answer["kvs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|kv| {
                let key =
                    String::from_utf8(B64.decode(kv["key"].as_str().unwrap()).unwrap()).unwrap();
                let value =
                    serde_json::from_slice(&B64.decode(kv["value"].as_str().unwrap()).unwrap())
                        .unwrap();
                (key, value)
            })
            .collect();
        (rev, kvs)
    }

    async fn get(&self, key: &str) -> Option<Value> {
        let (_, mut kvs) = self.range(key, None).await;
        kvs.remove(key)
    }
}

/// The password of etcd user `calico` in the etcd with authentication; a test checks
/// it appears nowhere the operator writes.
const CALICO_PASSWORD: &str = "p4ss-w0rd-never-shown";

/// Turns on authentication in the etcd at `url` as `etcdctl user add root`, `role add
/// calico`, `role grant-permission calico --prefix readwrite /calico/`, `user add
/// calico`, `user grant-role calico calico` and `auth enable` do (the same API, through
/// the gateway), adds user `nobody` without a role, and returns a client acting as root.
async fn enable_auth(url: &str) -> EtcdHttp {
    let plain = EtcdHttp {
        url: url.to_owned(),
        http: reqwest::Client::new(),
        token: None,
    };
    for (path, body) in [
        ("/v3/auth/role/add", json!({"name": "root"})),
        (
            "/v3/auth/user/add",
            json!({"name": "root", "password": "root-pw"}),
        ),
        (
            "/v3/auth/user/grant",
            json!({"user": "root", "role": "root"}),
        ),
        ("/v3/auth/role/add", json!({"name": "calico"})),
        (
            "/v3/auth/role/grant",
            json!({"name": "calico", "perm": {"permType": "READWRITE",
                   "key": B64.encode("/calico/"), "range_end": B64.encode("/calico0")}}),
        ),
        (
            "/v3/auth/user/add",
            json!({"name": "calico", "password": CALICO_PASSWORD}),
        ),
        (
            "/v3/auth/user/grant",
            json!({"user": "calico", "role": "calico"}),
        ),
        (
            "/v3/auth/user/add",
            json!({"name": "nobody", "password": "nobody-pw"}),
        ),
        ("/v3/auth/enable", json!({})),
    ] {
        plain.call(path, body).await;
    }
    let token = plain
        .call(
            "/v3/auth/authenticate",
            json!({"name": "root", "password": "root-pw"}),
        )
        .await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    EtcdHttp {
        token: Some(token),
        ..plain
    }
}

/// Calico's name for a Kubernetes Node: one in ten differs, as a Calico Node may (the
/// link is `spec.orchRefs`).
fn calico_name(kube: &str) -> String {
    if kube.ends_with('7') {
        format!("host-{kube}")
    } else {
        kube.to_owned()
    }
}

/// What calico-node writes when it starts on a node.
async fn register(etcd: &EtcdHttp, kube: &str, i: usize) {
    let name = calico_name(kube);
    let node = json!({
        "kind": "Node", "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": name, "creationTimestamp": "2026-11-25T00:00:00Z",
                     "labels": {"topology.kubernetes.io/zone": ZONES[i % 3], "e2e-rr": "yes",
                                "kubernetes.io/hostname": kube}},
        "spec": {"bgp": {"ipv4Address": format!("10.1.{}.{}/16", i / 250, i % 250 + 1)},
                 "orchRefs": [{"nodeName": kube, "orchestrator": "k8s"}]}
    });
    etcd.put(&format!("{CALICO}nodes/{name}"), &node).await;
}

async fn add_node(client: &Client, etcd: &EtcdHttp, i: usize, registered: bool) -> String {
    let name = format!("rr-etcd-{i:04}");
    let nodes: Api<Node> = Api::all(client.clone());
    ready_node(
        &nodes,
        &name,
        json!({"topology.kubernetes.io/zone": ZONES[i % 3], "e2e-rr": "yes"}),
    )
    .await;
    if registered {
        register(etcd, &name, i).await;
    }
    name
}

/// What the checker found.
#[derive(Default)]
struct Seen {
    armed: bool,
    checks: usize,
    violations: Vec<String>,
    /// Calico Node name → labels and cluster ID, in the last snapshot.
    nodes: BTreeMap<String, (BTreeMap<String, String>, Option<String>)>,
}

/// Checks one snapshot (Calico Nodes and BGPPeers at one revision) as Calico and BIRD
/// would use it: selectors over Calico Node labels, cluster IDs from the Calico Nodes.
fn check(seen: &mut Seen, nodes: &BTreeMap<String, Value>, peers: &BTreeMap<String, Value>) {
    let mut infos = Vec::new();
    let mut marks = BTreeMap::new();
    seen.nodes.clear();
    for v in nodes.values() {
        let name = v["metadata"]["name"].as_str().unwrap().to_owned();
        let labels: BTreeMap<String, String> =
            serde_json::from_value(v["metadata"]["labels"].clone()).unwrap_or_default();
        let id = v["spec"]["bgp"]["routeReflectorClusterID"]
            .as_str()
            .map(str::to_owned);
        if let Some(id) = &id {
            marks.insert(
                name.clone(),
                Marks {
                    reflector: None,
                    cluster_id: Some(id.parse().unwrap()),
                    sets: BTreeSet::new(),
                },
            );
        }
        seen.nodes.insert(name.clone(), (labels.clone(), id));
        infos.push(NodeInfo {
            name,
            labels,
            ready: true,
            unschedulable: false,
            taints: vec![],
            created: 0,
        });
    }
    let current = Current {
        marks,
        bgp_peers: peers
            .values()
            // Peers by selector make the reflector mesh; a `peerIP` peer (the foreign
            // uplink) leads outside the cluster.
            .filter(|p| p["spec"]["peerSelector"].is_string())
            .map(|p| BgpPeer {
                name: p["metadata"]["name"].as_str().unwrap().to_owned(),
                node_selector: p["spec"]["nodeSelector"]
                    .as_str()
                    .unwrap_or("all()")
                    .to_owned(),
                peer_selector: p["spec"]["peerSelector"].as_str().unwrap().to_owned(),
            })
            .collect(),
        ring: vec![],
        mesh: false,
    };
    if !seen.armed {
        return;
    }
    seen.checks += 1;
    let cluster = sim::Cluster::new(&infos, &current, LABEL);
    let sessions = match cluster.sessions() {
        Ok(s) => s,
        Err(e) => return seen.violations.push(e),
    };
    for (n, s) in &sessions {
        if s.is_empty() {
            seen.violations.push(format!("{n} has no session"));
        }
    }
    for tie in [sim::Tie::Lowest, sim::Tie::Highest] {
        match cluster.propagation(tie) {
            Ok(learned) => {
                for (o, xs) in &learned {
                    if xs.len() + 1 < sessions.len() {
                        seen.violations.push(format!(
                            "{} node(s) do not learn the route of {o} ({tie:?} ties)",
                            sessions.len() - 1 - xs.len()
                        ));
                    }
                }
            }
            Err(e) => seen.violations.push(e),
        }
    }
}

/// Snapshots of Calico Nodes and BGPPeers at one etcd revision, one after another.
fn watch_and_check(etcd: EtcdHttp, seen: Arc<Mutex<Seen>>) {
    tokio::spawn(async move {
        let mut last = 0;
        loop {
            let (rev, nodes) = etcd.range(&format!("{CALICO}nodes/"), None).await;
            if rev == last {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let (_, peers) = etcd.range(&format!("{CALICO}bgppeers/"), Some(rev)).await;
            last = rev;
            let seen = Arc::clone(&seen);
            let _ = tokio::task::spawn_blocking(move || {
                check(&mut seen.lock().unwrap(), &nodes, &peers);
            })
            .await;
        }
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn calico_objects_land_in_etcd_and_routes_reach_every_node() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let etcd = EtcdHttp {
        url: cp.etcd.clone(),
        http: reqwest::Client::new(),
        token: None,
    };
    // 45 nodes over 3 zones; three are not registered with Calico yet.
    let n = 45;
    let late = [10, 20, 30];
    let mut names = Vec::new();
    for i in 0..n {
        names.push(add_node(&client, &etcd, i, !late.contains(&i)).await);
    }
    // Someone else's BGPPeer: never touched.
    let foreign = json!({"kind": "BGPPeer", "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": "tor-uplink"},
        "spec": {"peerIP": "192.0.2.1", "asNumber": 64512, "nodeSelector": "all()"}});
    etcd.put(&format!("{CALICO}bgppeers/tor-uplink"), &foreign)
        .await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    watch_and_check(etcd.clone(), Arc::clone(&seen));

    // etcd over TLS with a client certificate from a Secret; the first endpoint is
    // down: the next one is used.
    let ns = cp.namespace("rr-etcd-system").await;
    let pem = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "calico-etcd-tls"}, "type": "kubernetes.io/tls",
        "stringData": {"ca.crt": pem(&cp.etcd_tls.ca), "tls.crt": pem(&cp.etcd_tls.cert),
                       "tls.key": pem(&cp.etcd_tls.key)}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let rrc: RouteReflectorConfig = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RouteReflectorConfig",
        "metadata": {"name": "default"},
        "spec": {"min": 2, "max": 3, "ratio": 0.05, "stepDelaySeconds": 0,
                 "eligibleNodes": {"matchLabels": {"e2e-rr": "yes"}},
                 "datastore": {"etcdv3": {
                     "endpoints": ["https://127.0.0.1:1", cp.etcd_tls.url],
                     "tlsSecretRef": {"namespace": ns, "name": "calico-etcd-tls"}}}}
    }))
    .unwrap();
    let rrcs = Api::<RouteReflectorConfig>::all(client.clone());
    rrcs.create(&PostParams::default(), &rrc).await.unwrap();
    // Calico's etcd with authentication, found through DNS at the end (Calico's
    // ETCD_DISCOVERY_SRV): SRV records at a DNS server of the test's own, which the
    // operator resolves through (its own /etc/resolv.conf, in a mount namespace). The
    // lower-priority record leads nowhere; the live one is listed first.
    let own = cp.own_etcd("calico-etcd-auth");
    let own_port = own.url.rsplit(':').next().unwrap().to_owned();
    let dns = cp.dns(
        "rr-etcd-dns",
        &[
            format!("--srv-host=_etcd-client._tcp.etcd.test,etcd-1.etcd.test,{own_port},10"),
            "--srv-host=_etcd-client._tcp.etcd.test,etcd-0.etcd.test,1,20".to_owned(),
            "--host-record=etcd-0.etcd.test,127.0.0.1".to_owned(),
            "--host-record=etcd-1.etcd.test,127.0.0.1".to_owned(),
        ],
    );
    let log = cp.dir.join("operator-rr-etcd.log");
    let _op = Killed(
        dns.command(std::path::Path::new(env!("CARGO_BIN_EXE_netpolicy")))
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args(["--lease-namespace", &ns, "--lease-seconds", "3"])
            .args(["--listen", "127.0.0.1:0", "--resync-seconds", "2"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    rr_settled(&client, "first topology (etcd)", 120, &log).await;
    {
        let mut s = seen.lock().unwrap();
        s.armed = true;
    }
    // The topology is in etcd: reflectors labelled and with cluster IDs on their Calico
    // Nodes (one of them under another name than its Kubernetes Node), our BGPPeers.
    let (_, peers) = etcd.range(&format!("{CALICO}bgppeers/"), None).await;
    let ours: Vec<&Value> = peers
        .values()
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("netpolicy-rr-")
        })
        .collect();
    assert!(
        !ours.is_empty(),
        "no BGPPeer in etcd: {peers:?}\n{}",
        log_text()
    );
    for p in &ours {
        assert_eq!(p["apiVersion"], "projectcalico.org/v3", "{p}");
        assert_eq!(p["kind"], "BGPPeer", "{p}");
        assert_eq!(
            p["metadata"]["labels"]["app.kubernetes.io/managed-by"], "netpolicy",
            "{p}"
        );
        assert!(p["metadata"].get("resourceVersion").is_none(), "{p}");
    }
    let (_, calico_nodes) = etcd.range(&format!("{CALICO}nodes/"), None).await;
    let reflectors: Vec<&Value> = calico_nodes
        .values()
        .filter(|v| v["metadata"]["labels"].get(LABEL).is_some())
        .collect();
    assert!(reflectors.len() >= 6, "2-3 per zone: {reflectors:?}");
    for r in &reflectors {
        assert!(
            r["spec"]["bgp"]["routeReflectorClusterID"].is_string(),
            "{r}"
        );
        // What calico-node wrote is kept.
        assert!(r["spec"]["bgp"]["ipv4Address"].is_string(), "{r}");
    }
    // Kubernetes Nodes carry no mark in this mode.
    let kube_nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    for node in &kube_nodes.items {
        assert!(!node.labels().contains_key(LABEL), "{:?}", node.metadata);
        assert!(
            !node
                .annotations()
                .contains_key(netpolicy_rr::CLUSTER_ID_ANNOTATION),
            "{:?}",
            node.metadata
        );
    }

    // Late registrations are noticed from etcd (no Kubernetes event comes).
    let before = seen.lock().unwrap().nodes.len();
    for i in late {
        register(&etcd, &names[i], i).await;
    }
    let t = Instant::now();
    while seen.lock().unwrap().nodes.len() < before + late.len() {
        assert!(t.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    rr_settled(&client, "late registrations", 120, &log).await;

    // A reflector node goes (its Kubernetes Node and its Calico Node).
    let (_, calico_nodes) = etcd.range(&format!("{CALICO}nodes/"), None).await;
    let gone = calico_nodes
        .values()
        .find(|v| v["metadata"]["labels"].get(LABEL).is_some())
        .unwrap()
        .clone();
    let kube = gone["spec"]["orchRefs"][0]["nodeName"]
        .as_str()
        .unwrap()
        .to_owned();
    Api::<Node>::all(client.clone())
        .delete(&kube, &DeleteParams::default())
        .await
        .unwrap();
    etcd.delete(&format!(
        "{CALICO}nodes/{}",
        gone["metadata"]["name"].as_str().unwrap()
    ))
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    rr_settled(&client, "a reflector node removed", 120, &log).await;

    // The rest of the Kubernetes-datastore scenario, in etcd: the cluster doubles, a
    // reflector turns NotReady, and the topology switches simple → multi → simple.
    for i in n..2 * n {
        names.push(add_node(&client, &etcd, i, true).await);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    rr_settled(&client, "grown", 120, &log).await;
    let (_, calico_nodes) = etcd.range(&format!("{CALICO}nodes/"), None).await;
    let reflector = calico_nodes
        .values()
        .find(|v| v["metadata"]["labels"].get(LABEL).is_some())
        .unwrap()["spec"]["orchRefs"][0]["nodeName"]
        .as_str()
        .unwrap()
        .to_owned();
    common::set_ready(&Api::<Node>::all(client.clone()), &reflector, false).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    rr_settled(&client, "a reflector NotReady", 120, &log).await;
    common::rr_switch_multi_and_back(&client, &log).await;

    // Quiet: four resyncs write nothing, neither to etcd nor to the API server.
    let calico_rev = || async {
        let (_, n) = etcd.range(CALICO, None).await;
        n
    };
    let before_etcd = calico_rev().await;
    let writes = || cp.writes_where("routereflectorconfigs", |_| true).len();
    let before_api = writes();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        calico_rev().await,
        before_etcd,
        "etcd written on a quiet cluster"
    );
    assert_eq!(writes(), before_api, "API writes on a quiet cluster");

    // nodeToNodeMesh: disable turns the mesh off in etcd's BGPConfiguration.
    rrcs.patch(
        "default",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"nodeToNodeMesh": "disable"}})),
    )
    .await
    .unwrap();
    let t = Instant::now();
    loop {
        let off = etcd
            .get(&format!("{CALICO}bgpconfigurations/default"))
            .await
            .is_some_and(|v| v["spec"]["nodeToNodeMeshEnabled"] == false);
        if off {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The foreign BGPPeer is as it was.
    assert_eq!(
        etcd.get(&format!("{CALICO}bgppeers/tor-uplink")).await,
        Some(foreign)
    );
    let (checks, violations) = {
        let s = seen.lock().unwrap();
        (s.checks, s.violations.clone())
    };
    println!("checked {checks} etcd snapshots");
    assert!(checks > 3, "too few snapshots checked: {checks}");
    assert!(
        violations.is_empty(),
        "{} violation(s), first: {:?}\n{}",
        violations.len(),
        violations.first(),
        log_text()
    );

    // etcd out of reach: the status says so.
    rrcs.patch(
        "default",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"datastore": {"etcdv3": {"endpoints": ["https://127.0.0.1:1"]}}}}),
        ),
    )
    .await
    .unwrap();
    let t = Instant::now();
    loop {
        let down = rrc_status(&client).await.is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == "Ready" && c.status == "False" && c.reason == "DatastoreUnreachable"
            })
        });
        if down {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Calico's etcd with authentication (ETCD_USERNAME/ETCD_PASSWORD), found through
    // DNS SRV records (ETCD_DISCOVERY_SRV): the same nodes registered there, the user
    // and password from a Secret. A domain without records is reported in the status
    // first. The reflectors converge in it, and the password appears nowhere the
    // operator writes.
    rrcs.patch(
        "default",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"datastore": {"etcdv3": {
            "endpoints": null, "discoverySrv": "none.test"}}}})),
    )
    .await
    .unwrap();
    let t = Instant::now();
    loop {
        let said = rrc_status(&client).await.and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == "Ready" && c.status == "False")
                .map(|c| c.message)
        });
        if let Some(m) = said.filter(|m| m.contains("discoverySrv \"none.test\"")) {
            assert!(
                m.contains("_etcd-client-ssl._tcp.none.test.")
                    && m.contains("_etcd-client._tcp.none.test."),
                "{m}"
            );
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "a domain without SRV records is not reported: {:?}\n{}",
            rrc_status(&client).await,
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let authed = enable_auth(&own.url).await;
    for (i, name) in names.iter().enumerate() {
        register(&authed, name, i).await;
    }
    let user: Secret = serde_json::from_value(json!({
        "metadata": {"name": "calico-etcd-user"},
        "stringData": {"username": "calico", "password": CALICO_PASSWORD}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &user)
        .await
        .unwrap();
    rrcs.patch(
        "default",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"datastore": {"etcdv3": {
            "discoverySrv": "etcd.test", "tlsSecretRef": null,
            "credentialsSecretRef": {"namespace": ns, "name": "calico-etcd-user"}}}}})),
    )
    .await
    .unwrap();
    let t = Instant::now();
    loop {
        let (_, calico_nodes) = authed.range(&format!("{CALICO}nodes/"), None).await;
        let reflectors = calico_nodes
            .values()
            .filter(|v| v["spec"]["bgp"]["routeReflectorClusterID"].is_string())
            .count();
        let (_, peers) = authed.range(&format!("{CALICO}bgppeers/"), None).await;
        let ready = rrc_status(&client).await.is_some_and(|s| {
            s.transition.is_none()
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        if ready && reflectors >= 6 && !peers.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "not settled on the etcd with authentication: {reflectors} reflectors, {} \
             BGPPeers, status {:?}\n{}",
            peers.len(),
            rrc_status(&client).await,
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Found by priority, the live etcd first (as etcd's Go client orders them).
    let found = format!("http://etcd-1.etcd.test:{own_port}\", \"http://etcd-0.etcd.test:1");
    assert!(log_text().contains(&found), "{found}\n{}", log_text());
    let queried = std::fs::read_to_string(&dns.log).unwrap();
    assert!(
        queried.contains("query[SRV] _etcd-client._tcp.etcd.test"),
        "{queried}"
    );
    let rrc_json = serde_json::to_string(&rrcs.get("default").await.unwrap()).unwrap();
    let events = Api::<k8s_openapi::api::events::v1::Event>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    for (what, text) in [
        ("the operator's log", log_text()),
        ("the RouteReflectorConfig", rrc_json),
        ("the Events", serde_json::to_string(&events).unwrap()),
    ] {
        assert!(
            !text.contains(CALICO_PASSWORD),
            "the etcd password in {what}"
        );
    }
}

#[tokio::test]
async fn the_datastore_is_one_of_kubernetes_or_etcdv3_with_http_endpoints() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let rrcs = Api::<RouteReflectorConfig>::all(client.clone());
    for (datastore, says) in [
        (
            json!({"kubernetes": {}, "etcdv3": {"endpoints": ["http://e:2379"]}}),
            "not both",
        ),
        (json!({"etcdv3": {"endpoints": ["e:2379"]}}), "http://"),
        (json!({"etcdv3": {"endpoints": []}}), "endpoints"),
    ] {
        let rrc: RouteReflectorConfig = serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "RouteReflectorConfig",
            "metadata": {"name": "default"}, "spec": {"datastore": datastore}
        }))
        .unwrap();
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let err = rrcs.create(&dry, &rrc).await.unwrap_err().to_string();
        assert!(err.contains(says), "{datastore}: {err}");
    }
}

#[tokio::test]
async fn the_etcd_client_needs_the_ca_and_a_client_certificate_etcd_trusts() {
    use netpolicy_operator::testing::etcd::{Error, Etcd, Tls};
    let cp = netpolicy_testenv::shared();
    let t = &cp.etcd_tls;
    let read = |p: &std::path::Path| Some(std::fs::read(p).unwrap());
    let full = Tls {
        ca: read(&t.ca),
        cert: read(&t.cert),
        key: read(&t.key),
    };
    let etcd = Etcd::new(vec![t.url.clone()], Some(&full)).unwrap();
    assert!(etcd.fingerprint().await.unwrap().starts_with("nodes:"));
    // Without a client certificate etcd refuses the connection.
    let no_cert = Tls {
        ca: full.ca.clone(),
        ..Tls::default()
    };
    let etcd = Etcd::new(vec![t.url.clone()], Some(&no_cert)).unwrap();
    let err = etcd.fingerprint().await.unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    // Without the CA etcd's certificate is not trusted.
    let no_ca = Tls {
        ca: None,
        ..full.clone()
    };
    let etcd = Etcd::new(vec![t.url.clone()], Some(&no_ca)).unwrap();
    assert!(etcd.fingerprint().await.is_err());
}

/// etcd with authentication (Calico's `ETCD_USERNAME`/`ETCD_PASSWORD`): the client
/// authenticates as the user, renews its token when etcd lets it expire, and fails
/// with a message naming the user (never the password) when the password is wrong, the
/// user lacks rights or no credentials are given.
#[tokio::test]
async fn the_etcd_client_authenticates_as_an_etcd_user_and_renews_its_token() {
    use netpolicy_operator::testing::etcd::{Credentials, Etcd};
    let cp = netpolicy_testenv::shared();
    // Tokens live one second here (etcd's default is 300): the renewal is exercised.
    let own = cp.own_etcd_with("etcd-auth", &["--auth-token=simple", "--auth-token-ttl=1"]);
    let root = enable_auth(&own.url).await;
    root.put(&format!("{CALICO}nodes/n1"), &json!({"kind": "Node"}))
        .await;
    let user = |name: &str, password: &str| Credentials {
        username: name.into(),
        password: password.into(),
    };
    let etcd = Etcd::new(vec![own.url.clone()], None)
        .unwrap()
        .with_credentials(user("calico", CALICO_PASSWORD));
    let first = etcd.fingerprint().await.unwrap();
    assert!(first.starts_with("nodes:1:"), "{first}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        etcd.fingerprint().await.unwrap(),
        first,
        "after the token expired"
    );
    assert!(
        !format!("{etcd:?}").contains(CALICO_PASSWORD),
        "the password in Debug"
    );

    let wrong = Etcd::new(vec![own.url.clone()], None)
        .unwrap()
        .with_credentials(user("calico", "wrong"))
        .fingerprint()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains("authenticating as etcd user \"calico\"") && !wrong.contains("wrong"),
        "{wrong}"
    );
    let nobody = Etcd::new(vec![own.url.clone()], None)
        .unwrap()
        .with_credentials(user("nobody", "nobody-pw"))
        .fingerprint()
        .await
        .unwrap_err()
        .to_string();
    assert!(nobody.contains("permission denied"), "{nobody}");
    let anonymous = Etcd::new(vec![own.url.clone()], None)
        .unwrap()
        .fingerprint()
        .await
        .unwrap_err()
        .to_string();
    assert!(anonymous.contains("user name is empty"), "{anonymous}");
}
