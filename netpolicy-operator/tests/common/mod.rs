//! Helpers the operator's end-to-end test files share (`mod common;`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Child;

use k8s_openapi::{
    api::core::v1::{Node, Secret},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::{Value, json};

pub(crate) mod alerts;

/// A child process, killed when dropped.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// User and system CPU seconds of process `pid` so far (`/proc/<pid>/stat`).
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command (in parentheses): utime and stime are the 12th
    // and 13th, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    f.get(11)
        .zip(f.get(12))
        .map_or(0.0, |(u, s)| (u + s) as f64 / 100.0)
}

/// A process's resident memory (KiB), from `/proc/<pid>/status`; 0 when unreadable.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The most resident memory process `pid` has had (what a memory limit meets first).
#[allow(dead_code)]
pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Calico's own CRDs for `BGPPeer` and `BGPConfiguration` (`tests/data/calico`).
pub(crate) fn calico_crds() -> Vec<CustomResourceDefinition> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/calico");
    [
        "crd.projectcalico.org_bgppeers.yaml",
        "crd.projectcalico.org_bgpconfigurations.yaml",
    ]
    .iter()
    .map(|f| serde_saphyr::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap())
    .collect()
}

/// Creates a Node with `labels` and makes it Ready and untainted.
pub(crate) async fn ready_node(nodes: &Api<Node>, name: &str, labels: serde_json::Value) {
    let n: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    nodes.create(&PostParams::default(), &n).await.unwrap();
    set_ready(nodes, name, true).await;
}

/// Sets the Ready condition as the kubelet would, and (Ready) lifts the
/// `node.kubernetes.io/not-ready` taint the API server puts on new Nodes, as the node
/// lifecycle controller would (this control plane runs no controller manager).
pub(crate) async fn set_ready(nodes: &Api<Node>, name: &str, ready: bool) {
    if ready {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .unwrap();
    }
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]}})),
        )
        .await
        .unwrap();
}

/// The RouteReflectorConfig `default`'s status.
pub(crate) async fn rrc_status(
    client: &kube::Client,
) -> Option<netpolicy_operator::api::RouteReflectorConfigStatus> {
    Api::<netpolicy_operator::api::RouteReflectorConfig>::all(client.clone())
        .get_opt("default")
        .await
        .ok()??
        .status
}

/// Waits (up to `secs`) until the operator reports the route-reflector topology settled
/// (no transition, not progressing, Ready `Settled`, with reflectors) for 2 s in a row:
/// time to have noticed the last change. Panics on an `Invalid` spec, and on timeout
/// with the status and the operator's `log`.
pub(crate) async fn rr_settled(
    client: &kube::Client,
    what: &str,
    secs: u64,
    log: &std::path::Path,
) {
    let t = std::time::Instant::now();
    let mut since: Option<std::time::Instant> = None;
    loop {
        let status = rrc_status(client).await;
        if let Some(s) = &status
            && let Some(c) = s.conditions.iter().find(|c| c.reason == "Invalid")
        {
            panic!("{what}: {}", c.message);
        }
        let ok = status.is_some_and(|s| {
            s.transition.is_none()
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Progressing" && c.status == "False")
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == "Settled")
                && s.reflectors.unwrap_or(0) > 0
        });
        since = if ok {
            since.or(Some(std::time::Instant::now()))
        } else {
            None
        };
        if since.is_some_and(|s| s.elapsed() > std::time::Duration::from_secs(2)) {
            println!("{what}: settled after {:?}", t.elapsed());
            return;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(secs),
            "{what}: not settled: {:?}\n{}",
            rrc_status(client).await,
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Switches the RouteReflectorConfig `default` to `multi` (2 reflectors per client) and
/// back to `simple`, waiting each time until it is settled.
pub(crate) async fn rr_switch_multi_and_back(client: &kube::Client, log: &std::path::Path) {
    for topology in ["multi", "simple"] {
        Api::<netpolicy_operator::api::RouteReflectorConfig>::all(client.clone())
            .patch(
                "default",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"topology": topology, "peersPerNode": 2}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        rr_settled(client, topology, 180, log).await;
    }
}

/// Applies deploy/traffic-domains-admission.yaml and waits until it is enforced.
pub(crate) async fn admission_policy(client: &Client) {
    let text = include_str!("../../../deploy/traffic-domains-admission.yaml");
    for doc in text.split("\n---\n") {
        let v: Value = serde_saphyr::from_str(doc).unwrap();
        let kind = v["kind"].as_str().unwrap();
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let plural = format!("{}s", kind.to_lowercase()).replace("ys", "ies");
        let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let obj: DynamicObject = serde_json::from_value(v.clone()).unwrap();
        Api::<DynamicObject>::all_with(client.clone(), &ar)
            .patch(
                v["metadata"]["name"].as_str().unwrap(),
                &PatchParams::apply("traffic-crds-test").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap();
    }
    // A policy is enforced once the server has compiled it and seen its binding.
    let cp = netpolicy_testenv::shared();
    let ns = cp.unique("td-probe");
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    for i in 0..100 {
        let gvk = GroupVersionKind::gvk("netpolicy.io", "v1alpha1", "Vip");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "vips");
        let probe: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "Vip",
            "metadata": {"name": format!("probe-{i}")}, "spec": {"address": "20.0.0.1/32"},
        }))
        .unwrap();
        let r = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
            .create(&PostParams::default(), &probe)
            .await;
        if r.is_err() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("the trench-label admission policy was not enforced within 20 s");
}

/// `netpolicy operator` against `cp`, leasing in `lease_ns`, resyncing every 2 s, its
/// log appended to `log` (at `rust_log`).
pub(crate) fn operator(
    cp: &netpolicy_testenv::ControlPlane,
    lease_ns: &str,
    log: &std::path::Path,
    rust_log: &str,
) -> Killed {
    operator_on(cp, lease_ns, log, rust_log, "127.0.0.1:0")
}

/// [`operator`] with its metrics and health endpoints on `listen`.
pub(crate) fn operator_on(
    cp: &netpolicy_testenv::ControlPlane,
    lease_ns: &str,
    log: &std::path::Path,
    rust_log: &str,
    listen: &str,
) -> Killed {
    operator_with(cp, lease_ns, log, rust_log, &["--listen", listen])
}

/// [`operator`] with more arguments (`--listen` among them, or 127.0.0.1:0).
pub(crate) fn operator_with(
    cp: &netpolicy_testenv::ControlPlane,
    lease_ns: &str,
    log: &std::path::Path,
    rust_log: &str,
    extra: &[&str],
) -> Killed {
    let listen: &[&str] = if extra.contains(&"--listen") {
        &[]
    } else {
        &["--listen", "127.0.0.1:0"]
    };
    Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_netpolicy"))
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args(["--lease-namespace", lease_ns, "--lease-seconds", "2"])
            .args(["--resync-seconds", "2"])
            .args(listen)
            .args(extra)
            .env("RUST_LOG", rust_log)
            .stdout(std::process::Stdio::null())
            .stderr(appending(log))
            .spawn()
            .unwrap(),
    )
}

/// `netpolicy agent` for `node`, programming network namespace `netns`, resyncing
/// every second, through `kubeconfig`, logging to `log`.
pub(crate) fn agent(
    kubeconfig: &std::path::Path,
    node: &str,
    netns: &str,
    log: &std::path::Path,
) -> Killed {
    agent_with(kubeconfig, node, netns, log, &["--resync-seconds", "1"])
}

/// [`agent`] with `extra` arguments instead of the 1 s resync; its log appended to
/// `log` (an agent started again writes after the one before).
pub(crate) fn agent_with(
    kubeconfig: &std::path::Path,
    node: &str,
    netns: &str,
    log: &std::path::Path,
    extra: &[&str],
) -> Killed {
    Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_netpolicy"))
            .args(["agent", "--node", node, "--netns", netns])
            .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(kubeconfig)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(appending(log))
            .spawn()
            .unwrap(),
    )
}

/// `log` opened for appending (created if missing): a process started again writes
/// after the one before.
pub(crate) fn appending(log: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
}

/// A port nothing listens on now (for `--listen`), kept from the harness's other
/// processes ([`netpolicy_testenv::free_ports`]).
pub(crate) fn free_port() -> u16 {
    netpolicy_testenv::free_ports(1).expect("a free port")[0]
}

/// The Events with `reason` about the object named `name` (of kind `kind`), in
/// `namespace` (every namespace when `None`).
pub(crate) async fn events_about(
    client: &Client,
    namespace: Option<&str>,
    reason: &str,
    kind: &str,
    name: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
        })
        .collect()
}

/// A line the test harness does not capture (`SKIP ...`: counted and listed by
/// `scripts/test`), for a part of a test that cannot run here.
pub(crate) fn skip(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP {why}");
}

/// `GET path` on 127.0.0.1:`port` (an operator's metrics and health endpoints):
/// (status, body), or None while nothing answers.
pub(crate) fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at("127.0.0.1", port, path)
}

/// `GET path` on `host`:`port`: (status, body), or None while nothing answers.
pub(crate) fn http_get_at(host: &str, port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect((host, port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// The API server's own `/metrics`.
async fn apiserver_metrics(client: &Client) -> String {
    client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap()
}

/// Label `name` of one Prometheus sample line (`""` when it has none), and the line's value.
fn sample<'a>(line: &'a str, name: &str) -> (&'a str, f64) {
    let label = line
        .split(&format!("{name}=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_default();
    let value = line.rsplit(' ').next().and_then(|v| v.parse().ok());
    (label, value.unwrap_or(0.0))
}

/// WATCH requests the API server is serving now, per resource (its own metric
/// `apiserver_longrunning_requests`).
pub(crate) async fn watches(client: &Client) -> std::collections::BTreeMap<String, i64> {
    let text = apiserver_metrics(client).await;
    let mut out = std::collections::BTreeMap::new();
    for l in text.lines().filter(|l| {
        l.starts_with("apiserver_longrunning_requests{") && l.contains("verb=\"WATCH\"")
    }) {
        let (resource, n) = sample(l, "resource");
        *out.entry(resource.to_owned()).or_default() += n as i64;
    }
    out
}

/// Requests the API server has served so far, by verb and resource (its own metric
/// `apiserver_request_total`, every code summed: `PUT nodenetworkconfigs`), and the watch
/// events it has sent by resource (`apiserver_watch_events_total`: `WATCH EVENT
/// nodenetworkconfigs`). Two readings subtracted tell what a phase asked of it, reads
/// included, which the audit log (writes only) does not.
pub(crate) async fn requests(client: &Client) -> std::collections::BTreeMap<String, f64> {
    let text = apiserver_metrics(client).await;
    let mut out = std::collections::BTreeMap::new();
    for l in text.lines() {
        let (key, n) = if l.starts_with("apiserver_request_total{") {
            let (resource, n) = sample(l, "resource");
            (format!("{} {resource}", sample(l, "verb").0), n)
        } else if l.starts_with("apiserver_watch_events_total{") {
            let (resource, n) = sample(l, "resource");
            (format!("WATCH EVENT {resource}"), n)
        } else {
            continue;
        };
        *out.entry(key).or_default() += n;
    }
    out
}

/// The API of the traffic-domain kind `kind` (`Trench`, `Attractor`, ...) in `ns`.
pub(crate) fn traffic_api(client: &Client, kind: &str, ns: &str) -> Api<kube::api::DynamicObject> {
    let plural = if kind == "Trench" {
        "trenches".to_owned()
    } else {
        format!("{}s", kind.to_lowercase())
    };
    let gvk = kube::core::GroupVersionKind::gvk("netpolicy.io", "v1alpha1", kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// Server-side applies `obj` (any kind the API server serves), as field manager `e2e`.
pub(crate) async fn apply(client: &Client, obj: Value) {
    let (group, version) = obj["apiVersion"]
        .as_str()
        .unwrap()
        .rsplit_once('/')
        .map_or(("", obj["apiVersion"].as_str().unwrap()), |(g, v)| (g, v));
    let gvk = GroupVersionKind::gvk(group, version, obj["kind"].as_str().unwrap());
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        _ => Api::all_with(client.clone(), &ar),
    };
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    api.patch(&name, &PatchParams::apply("e2e").force(), &Patch::Apply(&o))
        .await
        .unwrap_or_else(|e| panic!("applying {gvk:?} {name}: {e}"));
}

/// Rancher's `provisioning.cattle.io/v1` Cluster CRD (as Rancher ships it).
pub(crate) fn rancher_crd() -> CustomResourceDefinition {
    let text = include_str!("../data/rancher/provisioning.cattle.io_clusters.yaml");
    serde_saphyr::from_str(text).unwrap()
}

pub(crate) fn clusters_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("provisioning.cattle.io", "v1", "Cluster"),
            "clusters",
        ),
    )
}

/// A Rancher Cluster `name` in `fleet` whose guest namespace is `c_m`, as Rancher
/// leaves it once provisioned: its kubeconfig Secret beside it, `status.clusterName`.
pub(crate) async fn rancher_cluster(
    client: &Client,
    fleet: &str,
    name: &str,
    c_m: &str,
    labels: serde_json::Value,
    kubeconfig: &str,
) {
    Api::<Secret>::namespaced(client.clone(), fleet)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": format!("{name}-kubeconfig")},
                                           "stringData": {"value": kubeconfig}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let api = clusters_api(client, fleet);
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "provisioning.cattle.io/v1", "kind": "Cluster",
        "metadata": {"name": name, "labels": labels},
        "spec": {"kubernetesVersion": "v1.34.4+rke2r1",
                 "rkeConfig": {"machinePools": [{"name": "pool1",
                     "machineConfigRef": {"kind": "HarvesterConfig", "name": "nc-pool1"}}]}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &o).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"clusterName": c_m, "ready": true}})),
    )
    .await
    .unwrap();
}

/// A Hetzner `RoutedIPIssuer` named `hcloud` on a server that follows Hetzner's API,
/// listening on `host` (where the operator's pods reach the machine): its token Secret
/// `hcloud` in `ns`, node `nodes[i]` as Hetzner server `i + 1` (`spec.providerID`), and
/// `extra` merged into the issuer's spec (a firewall, return routing). Returns the
/// server's state.
pub(crate) async fn hetzner_issuer(
    client: &Client,
    host: &str,
    ns: &str,
    nodes: &[&str],
    extra: Value,
) -> netpolicy_testenv::cloud::Shared {
    use netpolicy_testenv::cloud;
    let (base, state) = cloud::serve_on(host, cloud::hetzner::api, "/v1").await;
    apply(
        client,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "hcloud", "namespace": ns},
            "stringData": {"token": cloud::hetzner::TOKEN}
        }),
    )
    .await;
    for (i, node) in nodes.iter().enumerate() {
        Api::<Node>::all(client.clone())
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": format!("hcloud://{}", i + 1)}})),
            )
            .await
            .unwrap();
    }
    let mut spec = json!({"hetzner": {"tokenSecretRef": {"namespace": ns, "name": "hcloud", "key": "token"},
                                      "location": "fsn1", "endpoint": base}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    apply(
        client,
        json!({"apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
               "metadata": {"name": "hcloud"}, "spec": spec}),
    )
    .await;
    state
}

/// Origins whose route does not reach every node of `cluster` (`sessions` its sessions)
/// as Calico and BIRD would propagate it (`netpolicy_rr::sim`), under both tie-breaks:
/// one line each, naming a few nodes that miss it.
pub(crate) fn unreached(
    cluster: &netpolicy_rr::sim::Cluster,
    sessions: &netpolicy_rr::sim::Sessions,
) -> Vec<String> {
    use netpolicy_rr::sim::Tie;
    let mut out = Vec::new();
    for tie in [Tie::Lowest, Tie::Highest] {
        match cluster.propagation(tie) {
            Ok(learned) => {
                for (o, xs) in &learned {
                    if xs.len() + 1 < sessions.len() {
                        let missing: Vec<&String> = sessions
                            .keys()
                            .filter(|x| *x != o && !xs.contains(*x))
                            .take(3)
                            .collect();
                        out.push(format!(
                            "{} node(s) do not learn the route of {o} ({tie:?} ties), e.g. {missing:?}",
                            sessions.len() - 1 - xs.len()
                        ));
                    }
                }
            }
            Err(e) => out.push(e),
        }
    }
    out
}

/// Whether a pod is Ready and not being deleted.
pub(crate) fn pod_ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The FloatingIPClaims of range `range`.
pub(crate) async fn claims_of(
    client: &kube::Client,
    range: &str,
) -> Vec<netpolicy_operator::api::FloatingIPClaim> {
    kube::Api::<netpolicy_operator::api::FloatingIPClaim>::all(client.clone())
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.spec.range == range)
        .collect()
}

/// Bytes of request bodies the API server has received so far, by verb and resource
/// (its own histogram `apiserver_request_body_size_bytes`, summed: `update
/// nodenetworkconfigs`). Two readings subtracted tell what a phase wrote.
pub(crate) async fn body_bytes(client: &Client) -> std::collections::BTreeMap<String, f64> {
    let text = apiserver_metrics(client).await;
    let mut out = std::collections::BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_body_size_bytes_sum{"))
    {
        let (resource, n) = sample(l, "resource");
        let verb = sample(l, "verb").0;
        *out.entry(format!("{verb} {resource}")).or_default() += n;
    }
    out
}

/// One gauge or counter of etcd's `/metrics` at `url` (its plain-HTTP client URL):
/// `etcd_mvcc_db_total_size_in_bytes`.
pub(crate) fn etcd_metric(url: &str, name: &str) -> f64 {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(host).unwrap();
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("etcd has no {name}"))
}

/// CPU seconds so far of this control plane's kube-apiserver and etcd (the processes
/// whose command line names its directory), to say where a phase's time went.
pub(crate) fn control_plane_cpu(cp: &netpolicy_testenv::ControlPlane) -> (f64, f64) {
    let dir = cp.dir.display().to_string();
    let (mut api, mut etcd) = (0.0, 0.0);
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(&dir) {
            continue;
        }
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        match comm.trim() {
            "kube-apiserver" => api += cpu_seconds(pid),
            "etcd" => etcd += cpu_seconds(pid),
            _ => {}
        }
    }
    (api, etcd)
}

/// The environment the image gives the binary (Containerfile's `ENV` line: the
/// allocator's settings), so that the memory measured is the deployed operator's.
pub(crate) fn image_env() -> Vec<(String, String)> {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../Containerfile");
    let text = std::fs::read_to_string(file).unwrap();
    let env: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("ENV "))
        .flat_map(str::split_whitespace)
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("ENV NAME=VALUE");
            (k.to_owned(), v.to_owned())
        })
        .collect();
    assert!(!env.is_empty(), "no ENV line in {file}");
    println!("the image's environment: {env:?}");
    env
}
