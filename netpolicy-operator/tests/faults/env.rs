//! What the fault tests share (`tests/faults.rs`): the workload they put in flight,
//! the invariants they check after a fault, and the memory cgroup of the OOM kill.

#![allow(dead_code)]

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use netpolicy_operator::api::{
    ClusterConfig, FloatingIP, FloatingIPRange, NodeNetworkConfig, crds,
};
use netpolicy_testenv::{ControlPlane, Write};
use serde_json::json;

use super::common::{self, Killed, free_port, http_get};

/// A dedicated control plane with netpolicy's CRDs (and `extra` ones), its admin
/// client, and a namespace for the operator's lease.
pub(crate) async fn setup(
    extra: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
) -> (&'static ControlPlane, Client, String) {
    let cp = netpolicy_testenv::dedicated();
    let client = cp.client().await;
    let mut all = crds();
    all.extend(extra);
    netpolicy_testenv::install_crds(&client, all).await;
    let system = cp.namespace("faults").await;
    (cp, client, system)
}

/// Each test loads two cores with its own API server and up to 1,000 nodes: one at a
/// time, so that the bounds measure recovery, not a neighbour.
pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long after the fault ends every NodeNetworkConfig must be current and every
/// FloatingIP hold its address (the operator's leases and relists, then its passes at
/// the backoff the outage left: at most 5 min by design, far less here).
pub(crate) const CONVERGE_BOUND: Duration = Duration::from_secs(120);

/// `count` Nodes `<prefix>-NNNNN`, Ready and untainted as a kubelet and the node
/// lifecycle controller would leave them.
pub(crate) async fn nodes(client: &Client, prefix: &str, count: usize) {
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(0..count)
        .for_each_concurrent(32, |i| {
            let nodes = nodes.clone();
            async move {
                let name = format!("{prefix}-{i:05}");
                common::ready_node(&nodes, &name, json!({"kubernetes.io/hostname": name})).await;
            }
        })
        .await;
}

/// The cluster-wide ClusterConfig `default` routing `to` via 192.0.2.1.
pub(crate) async fn cluster_config(client: &Client, to: &str) {
    Api::<ClusterConfig>::all(client.clone())
        .patch(
            "default",
            &PatchParams::apply("faults-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
                "metadata": {"name": "default"},
                "spec": {"routes": [{"to": to, "via": "192.0.2.1"}]},
            })),
        )
        .await
        .unwrap();
}

/// How many NodeNetworkConfigs route `to`; `None` while the API server does not answer.
pub(crate) async fn current(client: &Client, to: &str) -> Option<usize> {
    let list = Api::<NodeNetworkConfig>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    Some(
        list.items
            .iter()
            .filter(|o| o.spec.rendered.routes.iter().any(|r| r.item.to == to))
            .count(),
    )
}

/// Waits (up to `bound`) until every one of `count` NodeNetworkConfigs routes `to`;
/// the time it took.
pub(crate) async fn all_current(
    client: &Client,
    to: &str,
    count: usize,
    bound: Duration,
) -> Duration {
    let t = Instant::now();
    loop {
        let n = current(client, to).await;
        if n == Some(count) {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < bound,
            "{n:?} of {count} NodeNetworkConfigs route {to} after {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `netpolicy operator` on `cp` (resync 2 s, lease 2 s), its endpoints on a port of
/// its own; (process, port, log).
pub(crate) fn operator(
    cp: &ControlPlane,
    lease_ns: &str,
    name: &str,
) -> (Killed, u16, std::path::PathBuf) {
    let port = free_port();
    let log = cp.dir.join(format!("{name}.log"));
    let listen = format!("127.0.0.1:{port}");
    let op = common::operator_with(cp, lease_ns, &log, "info", &["--listen", &listen]);
    (op, port, log)
}

/// The operator's `/readyz` (status, body); `None` while it does not answer.
pub(crate) fn readyz(port: u16) -> Option<(u16, String)> {
    http_get(port, "/readyz")
}

/// Every write since `from` (an index into the audit log's writes) but the operator's
/// Lease renewals and the API server's own (`system:` users: its endpoint
/// reconciler after a restart): what "quiet" counts.
pub(crate) fn writes_since(cp: &ControlPlane, from: usize) -> Vec<Write> {
    cp.all_writes()
        .into_iter()
        .skip(from)
        .filter(|w| w.resource != "leases" && !w.user.starts_with("system:"))
        .collect()
}

/// Asserts that nothing but Lease renewals is written over three resyncs (2 s each),
/// once the last pass's writes have landed: the count starts after 4 s without a write
/// (at most 30 s). After a fault the last status writes of the recovery can land
/// seconds late on a loaded machine (an API server that just got etcd back); a job that
/// writes every resync never leaves 4 s without a write, so it is still caught by the
/// count after the 30 s.
pub(crate) async fn quiet(cp: &ControlPlane, log: &std::path::Path) {
    let settle = Instant::now();
    let mut seen = cp.all_writes().len();
    let mut still = Instant::now();
    while still.elapsed() < Duration::from_secs(4) && settle.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = writes_since(cp, seen).len();
        if now > 0 {
            seen = cp.all_writes().len();
            still = Instant::now();
        }
    }
    let late = settle.elapsed().saturating_sub(Duration::from_secs(4));
    if late > Duration::from_millis(500) {
        println!("quiet: the last writes before it landed {late:.1?} into the check");
    }
    let before = cp.all_writes().len();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let writes = writes_since(cp, before);
    assert!(
        writes.is_empty(),
        "{} writes over three quiet resyncs: {:?}\n{}",
        writes.len(),
        &writes[..writes.len().min(10)],
        tail(log)
    );
}

pub(crate) fn tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Every FloatingIP of `namespaces`, listed one namespace at a time, with its
/// `namespace/name`.
pub(crate) async fn floating_ips(
    client: &Client,
    namespaces: &[String],
) -> Vec<(String, FloatingIP)> {
    let mut out = Vec::new();
    for ns in namespaces {
        for f in Api::<FloatingIP>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            out.push((format!("{ns}/{}", f.name_any()), f));
        }
    }
    out
}

/// FloatingIPs of `namespaces`: (namespace/name → address) for those that have one.
pub(crate) async fn addresses(client: &Client, namespaces: &[String]) -> BTreeMap<String, String> {
    floating_ips(client, namespaces)
        .await
        .into_iter()
        .filter_map(|(key, f)| Some((key, f.status?.address?)))
        .collect()
}

/// How many FloatingIPs of `namespaces` say all there is to say: an address, and every
/// condition true (`Published` false only where kube-vip cannot take the address). A
/// pool is converged when this counts all of them: their statuses are written.
pub(crate) async fn settled(client: &Client, namespaces: &[String]) -> usize {
    use netpolicy_operator::api::conditions::floating_ip::NOT_PUBLISHABLE;
    floating_ips(client, namespaces)
        .await
        .into_iter()
        .filter(|(_, f)| {
            let st = f.status.clone().unwrap_or_default();
            st.address.is_some()
                && st
                    .conditions
                    .iter()
                    .all(|c| c.status == "True" || c.reason == NOT_PUBLISHABLE)
        })
        .count()
}

/// The invariants of floating addresses after a fault: `count` FloatingIPs each hold a
/// distinct address, one claim per address naming its holder and nothing else, and
/// the kube-vip ConfigMap publishes exactly those addresses.
pub(crate) async fn floating_ips_hold(
    client: &Client,
    namespaces: &[String],
    count: usize,
    range: &str,
    vip_ns: &str,
) {
    let held = addresses(client, namespaces).await;
    assert_eq!(held.len(), count, "FloatingIPs with an address");
    let mut by_address: BTreeMap<&str, &str> = BTreeMap::new();
    for (owner, a) in &held {
        if let Some(other) = by_address.insert(a, owner) {
            panic!("{a} handed out twice: {other} and {owner}");
        }
    }
    let claims = common::claims_of(client, range).await;
    assert_eq!(claims.len(), count, "one claim per FloatingIP, no leftover");
    for c in &claims {
        let owner = format!("{}/{}", c.spec.owner.namespace, c.spec.owner.name);
        assert_eq!(
            by_address.get(c.spec.address.as_str()),
            Some(&owner.as_str()),
            "claim {} names {owner}",
            c.spec.address
        );
    }
    // Every held address is published, but the ones kube-vip never hands out (an IPv4
    // address ending in .0 or .255), which say so (Published=False, NotPublishable).
    let publishable = |a: &str| !(a.ends_with(".0") || a.ends_with(".255"));
    let want: BTreeSet<String> = held.values().filter(|a| publishable(a)).cloned().collect();
    for (key, f) in floating_ips(client, namespaces).await {
        let st = f.status.unwrap_or_default();
        let Some(a) = st.address.as_deref() else {
            continue;
        };
        if !publishable(a) {
            let c = st.conditions.iter().find(|c| c.type_ == "Published");
            assert!(
                c.is_some_and(|c| c.status == "False" && c.reason == "NotPublishable"),
                "{key}: {a} says {c:?}"
            );
        }
    }
    // Published after the address is held: give the last publish a moment.
    let t = Instant::now();
    loop {
        let published = published(client, vip_ns).await;
        if published == want {
            break;
        }
        if t.elapsed() > Duration::from_secs(30) {
            let missing: BTreeSet<&String> = want.difference(&published).collect();
            let mut why = Vec::new();
            for (key, f) in floating_ips(client, namespaces).await {
                let st = f.status.unwrap_or_default();
                if st.address.as_ref().is_some_and(|a| missing.contains(a)) {
                    why.push(format!("{key}: {:?}", st.conditions));
                }
            }
            panic!(
                "kube-vip's ConfigMap does not hold exactly the held addresses: {} published, \
                 {} held; published and not held: {:?}; held and not published: {why:#?}",
                published.len(),
                want.len(),
                published.difference(&want).collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every address kube-vip's ConfigMap in `vip_ns` publishes.
pub(crate) async fn published(client: &Client, vip_ns: &str) -> BTreeSet<String> {
    Api::<ConfigMap>::namespaced(client.clone(), vip_ns)
        .get_opt("kubevip")
        .await
        .unwrap()
        .and_then(|c| c.data)
        .unwrap_or_default()
        .into_values()
        .flat_map(|v| {
            v.split(',')
                .map(|a| a.trim().trim_end_matches("/32").to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// FloatingIPs `ip-NNN` in `namespaces` (round robin) from `range`, created at once.
pub(crate) async fn create_fips(client: &Client, namespaces: &[String], range: &str, count: usize) {
    stream::iter(0..count)
        .for_each_concurrent(32, |i| {
            let api =
                Api::<FloatingIP>::namespaced(client.clone(), &namespaces[i % namespaces.len()]);
            async move {
                let f: FloatingIP = serde_json::from_value(json!({
                    "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
                    "metadata": {"name": format!("ip-{i:03}")}, "spec": {"range": range}
                }))
                .unwrap();
                api.create(&PostParams::default(), &f).await.unwrap();
            }
        })
        .await;
}

pub(crate) async fn floating_range(client: &Client, name: &str, cidr: &str, vip_ns: &str) {
    let r: FloatingIPRange = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
        "metadata": {"name": name},
        "spec": {"cidrs": [cidr],
                 "kubeVip": {"publish": true, "namespace": vip_ns, "configMap": "kubevip"}},
    }))
    .unwrap();
    Api::<FloatingIPRange>::all(client.clone())
        .create(&PostParams::default(), &r)
        .await
        .unwrap();
}

pub(crate) async fn eventually_ready(port: u16) {
    netpolicy_testenv::eventually("the operator ready again", 60, || async {
        matches!(readyz(port), Some((200, _)))
    })
    .await;
}

pub(crate) fn count(log: &std::path::Path, what: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(what))
        .count()
}

/// A memory cgroup (v1, as this machine mounts it) holding `pid` with a limit of
/// `bytes`: the kernel OOM-kills the process when it goes over, as the kubelet's limit
/// does. Removed when dropped. `None` (with a SKIP line) where no memory cgroup can be
/// made.
pub(crate) struct MemoryLimit(std::path::PathBuf);

impl MemoryLimit {
    /// Moves `pid` into a new memory cgroup limited to what it is charged there plus
    /// `headroom` bytes: its later growth (this kernel does not move the pages it
    /// already has: `move_charge_at_immigrate` is refused, so it starts near 0). The
    /// limit set; `None` after a SKIP line where no memory cgroup v1 exists.
    ///
    /// # Panics
    /// When the cgroup cannot be made or set (a failure, not a skip).
    pub(crate) fn new(pid: u32, headroom: u64) -> Option<(Self, u64)> {
        let base = std::path::Path::new("/sys/fs/cgroup/memory");
        if !base.join("cgroup.procs").exists() {
            eprintln!(
                "SKIP the OOM kill: no cgroup v1 memory controller at {}",
                base.display()
            );
            return None;
        }
        let dir = base.join(format!("netpolicy-oom-{pid}"));
        let write = |file: &str, value: &str| {
            std::fs::write(dir.join(file), value)
                .unwrap_or_else(|e| panic!("{}/{file} = {value}: {e}", dir.display()));
        };
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let this = Self(dir.clone());
        // Where the kernel still supports it, the pages it has move with it.
        let _ = std::fs::write(dir.join("memory.move_charge_at_immigrate"), "3");
        write("cgroup.procs", &pid.to_string());
        let usage: u64 = std::fs::read_to_string(dir.join("memory.usage_in_bytes"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0);
        let limit = usage + headroom;
        write("memory.limit_in_bytes", &limit.to_string());
        Some((this, limit))
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        // Anything still inside goes back to the root group first.
        let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
        if let Some(root) = self.0.parent() {
            for p in procs.lines() {
                let _ = std::fs::write(root.join("cgroup.procs"), p);
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}
