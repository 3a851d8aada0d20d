//! The operator's runtime (docs/architecture.md, runtime) as real processes against a
//! real API server: readiness that waits for every kind every job reads and names the
//! one it cannot list; a write refused by an admission policy backs off by class while
//! the object it was for says so, and goes through once allowed; a NodeNetworkConfig
//! too large to store is reported, not resent; same-named objects in two namespaces stay
//! independent.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::time::{Duration, Instant};

use common::{Killed, events_about, free_port, http_get, operator_on, watches};
use k8s_openapi::{
    api::core::v1::{ConfigMap, Namespace, Node},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    },
};
use netpolicy_operator::api::{
    FloatingIP, FloatingIPClaim, FloatingIPRange, NodeConfig, NodeNetworkConfig, crds,
};
use netpolicy_testenv::{ControlPlane, eventually};
use serde_json::json;

/// The operators here watch the whole (shared) cluster, and the readiness test runs
/// with a CRD missing: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn leading(port: u16) -> bool {
    http_get(port, "/metrics").is_some_and(|(_, b)| b.lines().any(|l| l == "netpolicy_leader 1"))
}

async fn install(client: &Client, crds: Vec<CustomResourceDefinition>) {
    netpolicy_testenv::install_crds(client, crds).await;
}

async fn all_crds(client: &Client) {
    install(client, crds()).await;
}

/// A FloatingIPRange `name` with `spec`.
async fn create_range(client: &Client, name: &str, spec: serde_json::Value) {
    let r: FloatingIPRange = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    Api::<FloatingIPRange>::all(client.clone())
        .create(&PostParams::default(), &r)
        .await
        .unwrap();
}

async fn namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await;
}

fn operator(cp: &ControlPlane, ns: &str, name: &str) -> (Killed, u16, std::path::PathBuf) {
    let port = free_port();
    let log = cp.dir.join(format!("runtime-{name}.log"));
    let op = operator_on(cp, ns, &log, "info", &format!("127.0.0.1:{port}"));
    (op, port, log)
}

/// The resources the operator's jobs read (Calico's BGPPeer is not installed here).
const READ: [&str; 20] = [
    "nodes",
    "namespaces",
    "services",
    "endpointslices",
    "clusterconfigs",
    "nodeconfigs",
    "nodenetworkconfigs",
    "floatingipranges",
    "floatingips",
    "floatingipclaims",
    "routedips",
    "routedipissuers",
    "routereflectorconfigs",
    "trenches",
    "attractors",
    "gateways",
    "vips",
    "conduits",
    "streams",
    "flows",
];

#[tokio::test(flavor = "multi_thread")]
async fn readiness_waits_for_every_kind_and_names_the_one_it_cannot_list() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    // Every kind but RoutedIP: the routing and routed-IP jobs read it.
    let crds_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let _ = crds_api
        .delete("routedips.netpolicy.io", &DeleteParams::default())
        .await;
    eventually("RoutedIP's CRD gone", 60, || async {
        crds_api
            .get_opt("routedips.netpolicy.io")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    install(
        &client,
        crds()
            .into_iter()
            .filter(|c| c.metadata.name.as_deref() != Some("routedips.netpolicy.io"))
            .collect(),
    )
    .await;
    let ns = cp.namespace("ready").await;
    tokio::time::sleep(Duration::from_secs(2)).await; // earlier operators' watches closed
    let before = watches(&client).await;
    let (_op, port, log) = operator(cp, &ns, "ready");
    eventually("the operator leads", 60, || async { leading(port) }).await;
    // Leading, one kind unlistable: not ready, and the body says who waits for what.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let (code, body) = http_get(port, "/readyz").unwrap();
        assert_eq!(code, 503, "ready with RoutedIP unlistable: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (_, body) = http_get(port, "/readyz").unwrap();
    println!("{body}");
    for job in ["routing", "routed-ip"] {
        assert!(
            body.lines().any(|l| l.starts_with(&format!("{job}: "))
                && l.contains("cannot list routedips.netpolicy.io")),
            "{job} should say it cannot list routedips.netpolicy.io:\n{body}"
        );
    }
    assert!(
        !body.lines().any(|l| l.starts_with("floating-ip: ")),
        "the floating-IP job reads no RoutedIP; it is ready:\n{body}"
    );
    // The kind appears: the informers list it on their next try, and every job passes.
    all_crds(&client).await;
    eventually("ready once RoutedIP is served", 120, || async {
        http_get(port, "/readyz").is_some_and(|(c, _)| c == 200)
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("cannot list"), "{text}");
    // One WATCH per resource, whatever the number of jobs reading it (Nodes are read by
    // four jobs), from the API server's own metrics. Ready means listed: a watch opens
    // after its list, and RoutedIP's may be between two tries (the CRD's storage is
    // rebuilt as it becomes established; a reconnect waits up to 5 s). So wait until
    // every resource has its watch, then count.
    let opened = |after: &std::collections::BTreeMap<String, i64>| {
        READ.iter()
            .all(|r| after.get(*r).copied().unwrap_or(0) > before.get(*r).copied().unwrap_or(0))
    };
    let ready_at = Instant::now();
    let mut after = watches(&client).await;
    while !opened(&after) && ready_at.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = watches(&client).await;
    }
    println!("every watch open {:?} after ready", ready_at.elapsed());
    let mut total = 0;
    for r in READ {
        let n = after.get(r).copied().unwrap_or(0) - before.get(r).copied().unwrap_or(0);
        println!("WATCH {r}: {n}");
        total += n;
        assert_eq!(n, 1, "{r}: {n} WATCH streams from the operator");
    }
    println!("{total} WATCH streams for {} resources", READ.len());
}

/// A ValidatingAdmissionPolicy refusing writes of ConfigMap `name` in `ns`; returns a
/// handle that removes it.
async fn deny_configmap(client: &Client, ns: &str, name: &str) -> impl AsyncFnOnce() {
    let policy = format!("deny-{ns}");
    let ar = |kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            plural,
        )
    };
    let pol_ar = ar("ValidatingAdmissionPolicy", "validatingadmissionpolicies");
    let bind_ar = ar(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    );
    let pol: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"],
            }]},
            "validations": [{
                "expression": format!("object.metadata.name != '{name}'"),
                "message": "kube-vip ConfigMap writes are frozen by the platform team",
            }],
        },
    }))
    .unwrap();
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {
            "policyName": policy,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": ns}}},
        },
    }))
    .unwrap();
    let pp = PatchParams::apply("runtime-test").force();
    let pols = Api::<DynamicObject>::all_with(client.clone(), &pol_ar);
    let binds = Api::<DynamicObject>::all_with(client.clone(), &bind_ar);
    pols.patch(&policy, &pp, &Patch::Apply(&pol)).await.unwrap();
    binds
        .patch(&policy, &pp, &Patch::Apply(&binding))
        .await
        .unwrap();
    // Enforced once a write of that ConfigMap is refused (dry run: nothing is stored).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let probe: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"probe": "1"}}))
            .unwrap();
    eventually("the policy is enforced", 30, || async {
        cms.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &probe,
        )
        .await
        .is_err()
    })
    .await;
    let policy2 = policy.clone();
    async move || {
        binds
            .delete(&policy2, &DeleteParams::default())
            .await
            .unwrap();
        pols.delete(&policy2, &DeleteParams::default())
            .await
            .unwrap();
    }
}

fn published(f: &FloatingIP) -> Option<(String, String)> {
    f.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Published")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_kube_vip_write_backs_off_and_the_floating_ip_says_so_until_it_is_allowed() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    all_crds(&client).await;
    let ns = cp.namespace("vipdeny").await;
    let cm = cp.unique("kubevip");
    let allow = deny_configmap(&client, &ns, &cm).await;
    let range = cp.unique("deny");
    create_range(
        &client,
        &range,
        json!({"cidrs": ["198.18.40.0/29"],
                         "kubeVip": {"publish": true, "namespace": ns, "configMap": cm}}),
    )
    .await;
    let fips: Api<FloatingIP> = Api::namespaced(client.clone(), &ns);
    fips.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
            "metadata": {"name": "web"}, "spec": {"range": range},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let (_op, _port, log) = operator(cp, &ns, "vipdeny");
    eventually("Published=False, PublishFailed", 60, || async {
        fips.get("web").await.ok().as_ref().and_then(published)
            == Some(("False".into(), "PublishFailed".into()))
    })
    .await;
    let f = fips.get("web").await.unwrap();
    let message = &f
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Published")
        .unwrap()
        .message;
    assert!(
        message.contains(&cm) && message.contains("frozen"),
        "{message}"
    );
    // The range that publishes there says so too.
    eventually("a PublishFailed Event on the range", 30, || async {
        !events_about(&client, None, "PublishFailed", "FloatingIPRange", &range)
            .await
            .is_empty()
    })
    .await;
    // A minute of refusals: backed off (no fixed short retry), never Published=True.
    let before = cp.writes("configmaps", &cm).len();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let p = fips.get("web").await.ok().as_ref().and_then(published);
        assert_ne!(
            p.as_ref().map(|p| p.0.as_str()),
            Some("True"),
            "Published while refused"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let attempts = cp.writes("configmaps", &cm).len() - before;
    println!("refused writes of the kube-vip ConfigMap in 60 s: {attempts}");
    assert!(
        (1..=12).contains(&attempts),
        "{attempts} attempts in a minute (backoff expected: 1..=12)\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // Allowed again: written within 2 minutes, and the FloatingIP says so.
    allow().await;
    let allowed = Instant::now();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually("the ConfigMap holds the address", 130, || async {
        cms.get_opt(&cm)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.data)
            .is_some_and(|d| {
                d.get(&format!("cidr-{ns}"))
                    .is_some_and(|v| v.starts_with("198.18.40."))
            })
    })
    .await;
    eventually("Published=True", 30, || async {
        fips.get("web")
            .await
            .ok()
            .as_ref()
            .and_then(published)
            .map(|p| p.0)
            == Some("True".into())
    })
    .await;
    println!("written {:?} after the policy went", allowed.elapsed());
    eventually("a Published Event on the range", 30, || async {
        !events_about(&client, None, "Published", "FloatingIPRange", &range)
            .await
            .is_empty()
    })
    .await;
    assert_eq!(
        events_about(&client, None, "PublishFailed", "FloatingIPRange", &range)
            .await
            .len(),
        1,
        "one Event for the failure, not one per attempt"
    );
    assert!(allowed.elapsed() < Duration::from_secs(120));
}

fn big_node_config(name: &str, node: &str, block: u32) -> NodeConfig {
    let routes: Vec<serde_json::Value> = (0..12_000u32)
        .map(|i| {
            let a = block * 12_000 + i;
            json!({"to": format!("10.{}.{}.{}/32", 100 + (a >> 16), (a >> 8) & 255, a & 255), "via": "192.0.2.1"})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}}, "routes": routes},
    }))
    .unwrap()
}

async fn node(client: &Client, name: &str) {
    let n: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name}}}))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap();
}

fn condition(nc: &NodeConfig, type_: &str) -> Option<(String, String)> {
    nc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_network_config_too_large_to_store_is_not_sent_and_its_policies_say_why() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    all_crds(&client).await;
    let (big, small) = (cp.unique("big"), cp.unique("small"));
    node(&client, &big).await;
    node(&client, &small).await;
    let ncs: Api<NodeConfig> = Api::all(client.clone());
    let names: Vec<String> = (0..3).map(|i| cp.unique(&format!("huge{i}"))).collect();
    for (i, n) in names.iter().enumerate() {
        ncs.create(&PostParams::default(), &big_node_config(n, &big, i as u32))
            .await
            .unwrap();
    }
    let small_nc = cp.unique("small-nc");
    ncs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
            "metadata": {"name": small_nc},
            "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": small}},
                     "routes": [{"to": "10.250.0.0/16", "via": "192.0.2.1"}]},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let ns = cp.namespace("toolarge").await;
    let (_op, _port, log) = operator(cp, &ns, "toolarge");
    let nncs: Api<NodeNetworkConfig> = Api::all(client.clone());
    // The other node converges.
    eventually("the small node's NodeNetworkConfig", 120, || async {
        nncs.get_opt(&small)
            .await
            .ok()
            .flatten()
            .is_some_and(|o| !o.spec.rendered.routes.is_empty())
    })
    .await;
    // Every policy selecting the big node says TooLarge, naming node and size.
    for n in &names {
        eventually(&format!("{n} TooLarge"), 120, || async {
            ncs.get(n)
                .await
                .ok()
                .and_then(|nc| condition(&nc, "TooLarge"))
                .is_some_and(|(s, m)| s == "True" && m.contains(&big) && m.contains("bytes"))
        })
        .await;
    }
    let (_, message) = condition(&ncs.get(&names[0]).await.unwrap(), "TooLarge").unwrap();
    println!("{message}");
    assert!(
        !events_about(&client, None, "TooLarge", "NodeConfig", &names[0])
            .await
            .is_empty()
    );
    // Not sent, not retried: no write of the big node's object over several resyncs.
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        cp.writes("nodenetworkconfigs", &big).is_empty(),
        "the too-large NodeNetworkConfig was sent\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(nncs.get_opt(&big).await.unwrap().is_none());
    println!("no write in {:?}", start.elapsed());
    // One policy shrinks and the others go: the rest fits, is written, and the
    // condition clears.
    let mut small_again = big_node_config(&names[0], &big, 0);
    small_again.spec.routing.routes.truncate(100);
    ncs.patch(
        &names[0],
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"routes": small_again.spec.routing.routes}})),
    )
    .await
    .unwrap();
    ncs.delete(&names[2], &DeleteParams::default())
        .await
        .unwrap();
    ncs.delete(&names[1], &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the big node's NodeNetworkConfig once it fits",
        120,
        || async {
            nncs.get_opt(&big)
                .await
                .ok()
                .flatten()
                .is_some_and(|o| o.spec.rendered.routes.len() == 100)
        },
    )
    .await;
    eventually("TooLarge False", 60, || async {
        ncs.get(&names[0])
            .await
            .ok()
            .and_then(|nc| condition(&nc, "TooLarge"))
            .is_some_and(|(s, _)| s == "False")
    })
    .await;
    ncs.delete(&names[0], &DeleteParams::default())
        .await
        .unwrap();
    ncs.delete(&small_nc, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn same_named_floating_ips_in_two_namespaces_are_independent() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    all_crds(&client).await;
    let (a, b) = (cp.unique("twin-a"), cp.unique("twin-b"));
    namespace(&client, &a).await;
    namespace(&client, &b).await;
    let range = cp.unique("twins");
    create_range(&client, &range, json!({"cidrs": ["198.18.41.0/29"]})).await;
    let fip = |ns: &str| Api::<FloatingIP>::namespaced(client.clone(), ns);
    for ns in [&a, &b] {
        fip(ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
                    "metadata": {"name": "web"}, "spec": {"range": range},
                }))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    let lease = cp.namespace("twins").await;
    let (_op, _port, _log) = operator(cp, &lease, "twins");
    let address = |ns: String| {
        let api = fip(&ns);
        async move { api.get("web").await.ok().and_then(|f| f.status?.address) }
    };
    eventually("both have an address", 60, || async {
        address(a.clone()).await.is_some() && address(b.clone()).await.is_some()
    })
    .await;
    let (addr_a, addr_b) = (
        address(a.clone()).await.unwrap(),
        address(b.clone()).await.unwrap(),
    );
    assert_ne!(addr_a, addr_b);
    // Deleting one changes nothing of the other.
    fip(&a)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let claims: Api<FloatingIPClaim> = Api::all(client.clone());
    let claim = FloatingIPClaim::name_for(addr_a.parse().unwrap());
    eventually("a/web's address released", 60, || async {
        claims.get_opt(&claim).await.unwrap().is_none()
    })
    .await;
    for _ in 0..10 {
        assert_eq!(address(b.clone()).await.as_deref(), Some(addr_b.as_str()));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
