//! The routed-IP job of `netpolicy operator` as a real process against a real API server
//! and the local Hetzner and DigitalOcean API servers of `netpolicy_testenv::cloud`
//! (documented request and response shapes; the real provider clients unchanged,
//! pointed there by the issuer's `endpoint`), and moto's EC2 emulator for AWS. What the
//! provider did is checked from the requests its server received, and for AWS from
//! EC2's state as boto3 reads it.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use common::{Killed, ready_node, set_ready};

use std::{
    path::Path,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    core::v1::{Node, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{NodeNetworkConfig, RoutedIP, RoutedIPIssuer, RoutedIPStatus, crds};
use netpolicy_testenv::{
    ControlPlane,
    cloud::{self, Shared},
    eventually,
    moto::{ACCESS_KEY, Gate, Instance, Moto, REGION, SECRET_KEY},
};
use serde_json::{Value, json};

/// One operator at a time: each test's operator leads in its own lease namespace and
/// would drive the other test's RoutedIPs too.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const RUST_LOG: &str = "info,netpolicy_operator::routed_ip=debug";

fn operator(cp: &ControlPlane, ns: &str, log: &Path) -> Killed {
    common::operator(cp, ns, log, RUST_LOG)
}

/// A Secret `name` in `ns` holding `token` under `key`.
async fn token_secret(client: &Client, ns: &str, name: &str, key: &str, token: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name}, "stringData": {key: token}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// Ready Nodes with `labels` and the given provider IDs.
async fn cloud_nodes(nodes: &Api<Node>, labels: Value, ids: &[(&str, String)]) {
    for (name, provider_id) in ids {
        ready_node(nodes, name, labels.clone()).await;
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": provider_id}})),
            )
            .await
            .unwrap();
    }
}

/// `netpolicy agent` for `node`, programming namespace `ns`.
fn agent(cp: &ControlPlane, node: &str, ns: &TestNamespace) -> Killed {
    common::agent(
        &cp.kubeconfig,
        node,
        ns.name(),
        &cp.dir.join(format!("agent-{node}.log")),
    )
}

async fn status(client: &Client, name: &str) -> Option<RoutedIPStatus> {
    Api::<RoutedIP>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()?
        .status
}

/// Waits (60 s) until `ok` holds for the RoutedIP's status; fails with the last status
/// seen and the operator's log.
async fn until(
    client: &Client,
    name: &str,
    what: &str,
    log: &Path,
    ok: impl Fn(&RoutedIPStatus) -> bool,
) -> RoutedIPStatus {
    let last = std::sync::Mutex::new(None);
    let why = || {
        format!(
            "{:?}\n{}",
            last.lock().map(|l| l.clone()).unwrap_or_default(),
            std::fs::read_to_string(log).unwrap_or_default()
        )
    };
    netpolicy_testenv::eventually_some(what, 60, why, || {
        let (last, ok) = (&last, &ok);
        async move {
            let s = status(client, name).await;
            if let Ok(mut l) = last.lock() {
                l.clone_from(&s);
            }
            s.filter(|s| ok(s))
        }
    })
    .await
}

fn settled_on(node: &str) -> impl Fn(&RoutedIPStatus) -> bool + '_ {
    move |s| {
        s.node.as_deref() == Some(node)
            && s.step.is_none()
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    }
}

/// `METHOD /path` of every request from `from` on, without queries.
fn calls(cloud: &Shared, from: usize) -> Vec<String> {
    cloud.lock().unwrap().log[from..]
        .iter()
        .map(|r| {
            let body = if r.body.is_null() {
                String::new()
            } else {
                format!(" {}", r.body)
            };
            format!("{} {}{body}", r.method, r.path.split('?').next().unwrap())
        })
        .collect()
}

fn position(calls: &[String], needle: &str) -> usize {
    calls
        .iter()
        .position(|c| c.contains(needle))
        .unwrap_or_else(|| panic!("{needle} not in {calls:#?}"))
}

/// Hetzner's view: the floating IP's server and the firewall's servers.
fn hetzner_state(cloud: &Shared) -> (usize, Value, Vec<Value>) {
    let c = cloud.lock().unwrap();
    let fw = c
        .firewalls
        .first()
        .map(|f| f["applied_to"].as_array().cloned().unwrap_or_default())
        .unwrap_or_default();
    (
        c.ips.len(),
        c.ips.first().map_or(Value::Null, |ip| ip["server"].clone()),
        fw,
    )
}

/// The Service `web` in `ns`: HTTPS (443 → 8443) and DNS (53/UDP).
async fn web_service(client: &Client, ns: &str) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443},
                           {"name": "dns", "port": 53, "protocol": "UDP"}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
}

async fn set_endpoints(client: &Client, ns: &str, ready: &[(&str, bool)]) {
    let eps: Vec<Value> = ready
        .iter()
        .enumerate()
        .map(|(i, (node, r))| {
            json!({"addresses": [format!("10.9.0.{}", i + 1)], "nodeName": node,
                   "conditions": {"ready": r}})
        })
        .collect();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": ns,
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": eps,
        "ports": [{"name": "https", "port": 8443, "protocol": "TCP"}]
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .patch(
            "web-1",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&slice),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hetzner_failover_follows_readiness_and_endpoints_and_survives_a_kill() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let (base, cloud) = cloud::serve(cloud::hetzner::api, "/v1").await;
    let ns = cp.namespace("rip-hz").await;
    let log = cp.dir.join("operator-rip-hz.log");

    token_secret(&client, &ns, "hcloud", "token", cloud::hetzner::TOKEN).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let ids: Vec<(&str, String)> = [("hz-a", 1), ("hz-b", 2), ("hz-c", 3)]
        .into_iter()
        .map(|(n, id)| (n, format!("hcloud://{id}")))
        .collect();
    cloud_nodes(&nodes, json!({"role": "edge"}), &ids).await;
    web_service(&client, &ns).await;
    set_endpoints(
        &client,
        &ns,
        &[("hz-a", true), ("hz-b", true), ("hz-c", true)],
    )
    .await;
    let issuer: RoutedIPIssuer = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
        "metadata": {"name": "hz"},
        "spec": {"hetzner": {"tokenSecretRef": {"namespace": ns, "name": "hcloud"},
                             "location": "fsn1", "endpoint": base},
                 "firewall": {"name": "web-fw"}}
    }))
    .unwrap();
    Api::<RoutedIPIssuer>::all(client.clone())
        .create(&PostParams::default(), &issuer)
        .await
        .unwrap();
    // The first assignment is throttled beyond the client's retries: the address must be
    // in the status while the IP is still unassigned.
    for _ in 0..8 {
        cloud.lock().unwrap().throttle.push("/floating_ips/".into());
    }
    let rip: RoutedIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "ingress"},
        "spec": {"issuerRef": {"name": "hz"}, "cooldownSeconds": 5,
                 "nodeSelector": {"matchLabels": {"role": "edge"}},
                 "serviceRef": {"namespace": ns, "name": "web"}}
    }))
    .unwrap();
    let rips = Api::<RoutedIP>::all(client.clone());
    rips.create(&PostParams::default(), &rip).await.unwrap();
    let mut op = operator(cp, &ns, &log);

    let s = until(&client, "ingress", "address recorded", &log, |s| {
        s.address.is_some()
    })
    .await;
    let (ips, server, _) = hetzner_state(&cloud);
    assert_eq!(ips, 1);
    assert_eq!(
        server,
        Value::Null,
        "assigned before the address was recorded"
    );
    assert_eq!(
        s.address.as_deref(),
        cloud.lock().unwrap().ips[0]["ip"].as_str()
    );
    let s = until(&client, "ingress", "on hz-a", &log, settled_on("hz-a")).await;
    assert_eq!(s.firewall.as_deref(), Some("web-fw"));
    let ports: Vec<(String, u16)> = s
        .ports
        .iter()
        .map(|p| (p.protocol.clone(), p.port))
        .collect();
    assert_eq!(ports, [("tcp".to_owned(), 443), ("udp".to_owned(), 53)]);
    let (_, server, fw) = hetzner_state(&cloud);
    assert_eq!(server, 1);
    assert_eq!(fw, [json!({"type": "server", "server": {"id": 1}})]);
    {
        let c = cloud.lock().unwrap();
        let rules = &c.firewalls[0]["rules"];
        assert!(
            rules.to_string().contains("\"443\"") && rules.to_string().contains("\"53\""),
            "{rules}"
        );
        // The labels that find the IP again after a restart.
        assert_eq!(c.ips[0]["labels"]["netpolicy.io/routed-ip"], "ingress");
    }
    // Hetzner wants the address on the holder's host: hz-a's NodeNetworkConfig has it on
    // `lo`, and hz-a's agent puts it into hz-a's kernel (a network namespace here).
    let address = s.address.clone().unwrap();
    let on_lo = format!("{address}/32");
    let nncs = Api::<NodeNetworkConfig>::all(client.clone());
    let addresses_of = |node: &'static str| {
        let nncs = nncs.clone();
        async move {
            nncs.get_opt(node)
                .await
                .unwrap()
                .map(|n| serde_json::to_value(&n.spec.rendered.addresses).unwrap())
                .unwrap_or(Value::Null)
        }
    };
    let want = json!([{"dev": "lo", "address": on_lo,
                       "sources": [{"kind": "RoutedIP", "name": "ingress"}]}]);
    let t = Instant::now();
    while addresses_of("hz-a").await != want {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}",
            addresses_of("hz-a").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kernels = match (
        TestNamespace::new("routed IP on hz-a").unwrap(),
        TestNamespace::new("routed IP on hz-b").unwrap(),
    ) {
        (Some(a), Some(b)) => Some((agent(cp, "hz-a", &a), agent(cp, "hz-b", &b), a, b)),
        _ => None,
    };
    let on_host = |ns: &TestNamespace| {
        ns.ip(&["address", "show", "dev", "lo"])
            .unwrap()
            .contains(&on_lo)
    };
    if let Some((_, _, a, b)) = &kernels {
        let t = Instant::now();
        while !on_host(a) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "hz-a's kernel lacks {on_lo}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!on_host(b));
    }

    // The holder turns NotReady: the IP moves to hz-b, the firewall in the seed's order.
    let mark = cloud.lock().unwrap().log.len();
    set_ready(&nodes, "hz-a", false).await;
    let s = until(
        &client,
        "ingress",
        "moved to hz-b",
        &log,
        settled_on("hz-b"),
    )
    .await;
    assert!(s.cooldown_until.contains_key("hz-a"), "{s:?}");
    let c = calls(&cloud, mark);
    let add = position(
        &c,
        "apply_to_resources {\"apply_to\":[{\"server\":{\"id\":2}",
    );
    let assign = position(&c, "actions/assign {\"server\":2}");
    let remove = position(
        &c,
        "remove_from_resources {\"remove_from\":[{\"server\":{\"id\":1}",
    );
    assert!(add < assign && assign < remove, "{c:#?}");
    assert_eq!(hetzner_state(&cloud).1, 2);
    // The address follows: on hz-b's host, gone from hz-a's.
    let t = Instant::now();
    while addresses_of("hz-b").await != want || addresses_of("hz-a").await != json!([]) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}",
            addresses_of("hz-a").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some((_, _, a, b)) = &kernels {
        let t = Instant::now();
        while on_host(a) || !on_host(b) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the address did not move from hz-a's kernel to hz-b's"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // hz-b loses its Service endpoint: the IP moves to hz-c (hz-a is NotReady).
    let mark = cloud.lock().unwrap().log.len();
    set_endpoints(
        &client,
        &ns,
        &[("hz-a", true), ("hz-b", false), ("hz-c", true)],
    )
    .await;
    until(
        &client,
        "ingress",
        "moved to hz-c",
        &log,
        settled_on("hz-c"),
    )
    .await;
    let c = calls(&cloud, mark);
    assert!(
        position(&c, "actions/assign {\"server\":3}")
            < position(
                &c,
                "remove_from_resources {\"remove_from\":[{\"server\":{\"id\":2}"
            ),
        "{c:#?}"
    );

    // Killed in the middle of a failover (the assignment is throttled), restarted: the
    // failover completes, nothing is assigned twice, nothing leaks.
    tokio::time::sleep(Duration::from_secs(5)).await; // hz-a's cooldown ends
    set_ready(&nodes, "hz-a", true).await;
    for _ in 0..40 {
        cloud.lock().unwrap().throttle.push("/floating_ips/".into());
    }
    set_ready(&nodes, "hz-c", false).await;
    until(&client, "ingress", "assigning to hz-a", &log, |s| {
        s.step.as_deref() == Some("assign hcloud://1")
    })
    .await;
    drop(op);
    cloud.lock().unwrap().throttle.clear();
    let (ips, server, fw) = hetzner_state(&cloud);
    assert_eq!(
        (ips, server),
        (1, json!(3)),
        "the kill came before the assignment"
    );
    assert!(
        fw.contains(&json!({"type": "server", "server": {"id": 1}})),
        "{fw:?}"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    op = common::operator_on(cp, &ns, &log, RUST_LOG, &format!("127.0.0.1:{port}"));
    until(
        &client,
        "ingress",
        "moved to hz-a after the restart",
        &log,
        settled_on("hz-a"),
    )
    .await;
    // The restarted process's metrics: the failover it finished, and its steps.
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "netpolicy_routed_ip_failovers_total 1",
        "netpolicy_routed_ip_step_seconds_count{step=\"assign\"}",
        "netpolicy_routed_ip_step_seconds_count{step=\"removeNode\"}",
    ] {
        assert!(metrics.contains(want), "{want} not in\n{metrics}");
    }
    let (ips, server, fw) = hetzner_state(&cloud);
    assert_eq!((ips, server), (1, json!(1)));
    assert_eq!(fw, [json!({"type": "server", "server": {"id": 1}})]);

    // Killed at the other steps of a failover (hz-a → hz-c): while adding the new node
    // to the firewall, and while removing the old one. Each time the restarted
    // operator finishes from what the provider has; the IP is on one node only and the
    // new holder is in the firewall before the old one leaves it.
    tokio::time::sleep(Duration::from_secs(6)).await; // hz-c's cooldown ends
    set_ready(&nodes, "hz-c", true).await;
    let throttle = |path: &str, n: usize| {
        let mut c = cloud.lock().unwrap();
        c.throttle.clear();
        c.throttle.extend(std::iter::repeat_n(path.to_owned(), n));
    };
    throttle("/firewalls/", 40);
    set_ready(&nodes, "hz-a", false).await;
    until(
        &client,
        "ingress",
        "adding hz-c to the firewall",
        &log,
        |s| s.step.as_deref() == Some("addNode hcloud://3"),
    )
    .await;
    drop(op);
    let (ips, server, fw) = hetzner_state(&cloud);
    assert_eq!((ips, server), (1, json!(1)));
    assert_eq!(fw, [json!({"type": "server", "server": {"id": 1}})]);
    // The assignment is slowed (a window to see it), then the removal is held.
    throttle("/floating_ips/", 3);
    op = operator(cp, &ns, &log);
    until(&client, "ingress", "assigning to hz-c", &log, |s| {
        s.step.as_deref() == Some("assign hcloud://3")
    })
    .await;
    {
        let mut c = cloud.lock().unwrap();
        c.throttle
            .extend(std::iter::repeat_n("/firewalls/".to_owned(), 40));
    }
    until(
        &client,
        "ingress",
        "removing hz-a from the firewall",
        &log,
        |s| s.step.as_deref() == Some("removeNode hcloud://1"),
    )
    .await;
    drop(op);
    let (ips, server, fw) = hetzner_state(&cloud);
    assert_eq!((ips, server), (1, json!(3)));
    assert_eq!(
        fw,
        [
            json!({"type": "server", "server": {"id": 1}}),
            json!({"type": "server", "server": {"id": 3}})
        ],
        "both in the firewall until the old holder is removed"
    );
    cloud.lock().unwrap().throttle.clear();
    op = operator(cp, &ns, &log);
    until(
        &client,
        "ingress",
        "on hz-c after two kills",
        &log,
        settled_on("hz-c"),
    )
    .await;
    let (ips, server, fw) = hetzner_state(&cloud);
    assert_eq!((ips, server), (1, json!(3)));
    assert_eq!(fw, [json!({"type": "server", "server": {"id": 3}})]);
    // hz-a is back; the holder keeps the IP while it stays eligible.
    set_ready(&nodes, "hz-a", true).await;

    // Quiet: resyncs read the provider but write nothing, there or to the API server
    // (after hz-c's cooldown is over: dropping it from the status is a change).
    tokio::time::sleep(Duration::from_secs(7)).await;
    let mark = cloud.lock().unwrap().log.len();
    let writes = || cp.writes_where("routedips", |_| true).len();
    let before = writes();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(writes(), before, "API writes on a quiet cluster");
    let c = calls(&cloud, mark);
    assert!(
        c.iter().all(|x| x.starts_with("GET ")),
        "provider writes: {c:#?}"
    );

    // The token is in no status, Event or log.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap();
    let everything = format!(
        "{}{}{}",
        serde_json::to_string(&events.items).unwrap(),
        serde_json::to_string(&status(&client, "ingress").await).unwrap(),
        std::fs::read_to_string(&log).unwrap()
    );
    assert!(!everything.contains(cloud::hetzner::TOKEN));
    assert!(everything.contains("FailoverStep"), "no failover Events");

    // Retain: deleted, the IP stays at the provider, unassigned.
    rips.delete("ingress", &DeleteParams::default())
        .await
        .unwrap();
    let t = Instant::now();
    while rips.get_opt("ingress").await.unwrap().is_some() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "finalizer not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (ips, server, _) = hetzner_state(&cloud);
    assert_eq!((ips, server), (1, Value::Null));
    // The retained IP is still tagged for this cluster with no RoutedIP: an orphan,
    // reported on the issuer (condition and Event), not deleted.
    let t = Instant::now();
    loop {
        let issuer = Api::<RoutedIPIssuer>::all(client.clone())
            .get("hz")
            .await
            .unwrap();
        let orphans = issuer
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Orphans" && c.status == "True" && c.message.contains(&address));
        if orphans.is_some() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no orphan reported");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(hetzner_state(&cloud).0, 1, "an orphan is never deleted");

    // Delete: the IP goes with its RoutedIP.
    let rip: RoutedIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "egress"},
        "spec": {"issuerRef": {"name": "hz"}, "reclaimPolicy": "Delete",
                 "nodeSelector": {"matchLabels": {"role": "edge"}}}
    }))
    .unwrap();
    rips.create(&PostParams::default(), &rip).await.unwrap();
    let s = until(
        &client,
        "egress",
        "egress on hz-a",
        &log,
        settled_on("hz-a"),
    )
    .await;
    assert_eq!(cloud.lock().unwrap().ips.len(), 2);
    rips.delete("egress", &DeleteParams::default())
        .await
        .unwrap();
    let t = Instant::now();
    loop {
        let gone = cloud
            .lock()
            .unwrap()
            .ips
            .iter()
            .all(|ip| Some(ip["ip"].as_str().unwrap()) != s.address.as_deref());
        if gone && rips.get_opt("egress").await.unwrap().is_none() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "egress IP not deleted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(op);
}

#[tokio::test(flavor = "multi_thread")]
async fn digitalocean_ips_are_found_again_by_their_recorded_address_after_a_restart() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let (base, cloud) = cloud::serve(cloud::digitalocean::api, "/v2").await;
    let ns = cp.namespace("rip-do").await;
    let log = cp.dir.join("operator-rip-do.log");
    token_secret(&client, &ns, "do", "api-token", cloud::digitalocean::TOKEN).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let ids: Vec<(&str, String)> = [("do-a", 8_219_222), ("do-b", 8_219_223)]
        .into_iter()
        .map(|(n, id)| (n, format!("digitalocean://{id}")))
        .collect();
    cloud_nodes(&nodes, json!({"pool": "do"}), &ids).await;
    let issuer: RoutedIPIssuer = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
        "metadata": {"name": "do"},
        "spec": {"digitalocean": {"tokenSecretRef": {"namespace": ns, "name": "do", "key": "api-token"},
                                  "region": "fra1", "endpoint": base}}
    }))
    .unwrap();
    Api::<RoutedIPIssuer>::all(client.clone())
        .create(&PostParams::default(), &issuer)
        .await
        .unwrap();
    let rip: RoutedIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "do-web"},
        "spec": {"issuerRef": {"name": "do"}, "reclaimPolicy": "Delete",
                 "nodeSelector": {"matchLabels": {"pool": "do"}}}
    }))
    .unwrap();
    let rips = Api::<RoutedIP>::all(client.clone());
    rips.create(&PostParams::default(), &rip).await.unwrap();
    let op = operator(cp, &ns, &log);
    let s = until(&client, "do-web", "on do-a", &log, settled_on("do-a")).await;
    {
        let c = cloud.lock().unwrap();
        assert_eq!(c.ips.len(), 1);
        assert_eq!(c.ips[0]["droplet"]["id"], 8_219_222);
        assert_eq!(c.ips[0]["ip"].as_str(), s.address.as_deref());
    }
    // The issuer reports Ready (checked in the same pass, just after the RoutedIPs).
    let t = Instant::now();
    loop {
        let issuer = Api::<RoutedIPIssuer>::all(client.clone())
            .get("do")
            .await
            .unwrap();
        let ready = issuer
            .status
            .unwrap_or_default()
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "issuer not Ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Restarted: the IP (no tags at DigitalOcean) is found by its recorded address; no
    // second one is created. The holder goes NotReady: it moves.
    drop(op);
    let op = operator(cp, &ns, &log);
    // Another RoutedIP whose provider does not answer (connection refused: the client
    // retries with backoff inside each call, then the RoutedIP backs off): it must not
    // delay this one's failover.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let broken: RoutedIPIssuer = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
        "metadata": {"name": "do-broken"},
        "spec": {"digitalocean": {"tokenSecretRef": {"namespace": ns, "name": "do", "key": "api-token"},
                                  "region": "fra1", "endpoint": format!("http://127.0.0.1:{dead}/v2")}}
    }))
    .unwrap();
    Api::<RoutedIPIssuer>::all(client.clone())
        .create(&PostParams::default(), &broken)
        .await
        .unwrap();
    let stuck: RoutedIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "do-stuck"},
        "spec": {"issuerRef": {"name": "do-broken"},
                 "nodeSelector": {"matchLabels": {"pool": "do"}}}
    }))
    .unwrap();
    rips.create(&PostParams::default(), &stuck).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await; // do-stuck is in its retries now
    let t = Instant::now();
    set_ready(&nodes, "do-a", false).await;
    until(&client, "do-web", "on do-b", &log, settled_on("do-b")).await;
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "the failover waited {:?} behind another RoutedIP's provider trouble",
        t.elapsed()
    );
    {
        let c = cloud.lock().unwrap();
        assert_eq!(c.ips.len(), 1, "{:?}", c.ips);
        assert_eq!(c.ips[0]["droplet"]["id"], 8_219_223);
    }
    // The other one says why it has no IP (once its first call gave up).
    until(
        &client,
        "do-stuck",
        "do-stuck reports its provider",
        &log,
        |s| {
            s.conditions.iter().any(|c| {
                c.type_ == "Ready"
                    && c.status == "False"
                    && c.reason == "IssuerUnavailable"
                    && c.message.contains("unreachable")
            })
        },
    )
    .await;
    // Killed while an assignment was in flight, restarted after the provider completed
    // it: the status still names do-b, the provider says do-a. The provider is the
    // truth: the status follows (do-b cools down) and the IP is not moved back.
    drop(op);
    set_ready(&nodes, "do-a", true).await;
    cloud.lock().unwrap().ips[0]["droplet"] = json!({"id": 8_219_222});
    let mark = cloud.lock().unwrap().log.len();
    let op = operator(cp, &ns, &log);
    let s = until(
        &client,
        "do-web",
        "the status follows the provider",
        &log,
        settled_on("do-a"),
    )
    .await;
    assert!(s.cooldown_until.contains_key("do-b"), "{s:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(cloud.lock().unwrap().ips[0]["droplet"]["id"], 8_219_222);
    let c = calls(&cloud, mark);
    assert!(
        !c.iter().any(|call| call.contains("\"type\":\"assign\"")),
        "moved after the restart: {c:#?}"
    );
    assert_eq!(
        status(&client, "do-web")
            .await
            .and_then(|s| s.node)
            .as_deref(),
        Some("do-a")
    );
    // Delete, with someone else's finalizer on the RoutedIP: the IP goes, our
    // finalizer goes, theirs stays (the release patch tests the list it changes).
    let mut fins = rips
        .get("do-web")
        .await
        .unwrap()
        .metadata
        .finalizers
        .unwrap_or_default();
    assert_eq!(fins, ["netpolicy.io/routed-ip"]);
    fins.push("example.com/keep".into());
    rips.patch(
        "do-web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": fins}})),
    )
    .await
    .unwrap();
    rips.delete("do-web", &DeleteParams::default())
        .await
        .unwrap();
    let t = Instant::now();
    loop {
        let fins = rips
            .get_opt("do-web")
            .await
            .unwrap()
            .map(|r| r.metadata.finalizers.unwrap_or_default());
        if cloud.lock().unwrap().ips.is_empty()
            && fins.as_deref() == Some(&["example.com/keep".to_owned()][..])
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "not released: {fins:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rips.patch(
        "do-web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    // The broken issuer goes first: its RoutedIP is then let go without a provider call.
    Api::<RoutedIPIssuer>::all(client.clone())
        .delete("do-broken", &DeleteParams::default())
        .await
        .unwrap();
    rips.delete("do-stuck", &DeleteParams::default())
        .await
        .unwrap();
    let t = Instant::now();
    while rips.get_opt("do-web").await.unwrap().is_some()
        || rips.get_opt("do-stuck").await.unwrap().is_some()
    {
        assert!(t.elapsed() < Duration::from_secs(60), "not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(op);
}

/// EC2 as moto shows it (through boto3): how many Elastic IPs, which interface holds the
/// first, and which instances' primary interfaces carry the group `web-fw`.
fn aws_state(moto: &Moto, instances: &[Instance]) -> (usize, Option<String>, Vec<String>) {
    let addresses = moto.addresses();
    let list = addresses.as_array().unwrap();
    let holder = list
        .first()
        .and_then(|a| a["NetworkInterfaceId"].as_str())
        .filter(|e| !e.is_empty())
        .and_then(|eni| instances.iter().find(|i| i.eni == eni))
        .map(|i| i.id.clone());
    let group = moto.security_group("web-fw");
    let members = match group["GroupId"].as_str() {
        None => Vec::new(),
        Some(id) => instances
            .iter()
            .filter(|i| moto.groups_of(&i.eni).iter().any(|g| g == id))
            .map(|i| i.id.clone())
            .collect(),
    };
    (list.len(), holder, members)
}

/// The EC2 actions the gate saw from `from` on, without the reads.
fn aws_writes(gate: &Gate, from: usize) -> Vec<String> {
    gate.lock().unwrap().actions[from..]
        .iter()
        .filter(|a| !a.starts_with("Describe"))
        .cloned()
        .collect()
}

fn hold(gate: &Gate, action: &str, n: usize) {
    let mut g = gate.lock().unwrap();
    g.hold.clear();
    if n > 0 {
        g.hold.insert(action.to_owned(), n);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn aws_elastic_ips_fail_over_without_a_gap_in_the_seed_order_and_survive_a_kill() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let moto = Moto::start();
    let (endpoint, gate) = moto.gate().await;
    let ec2 = moto.run_instances(3);
    let (a, b, c) = (&ec2[0], &ec2[1], &ec2[2]);
    let ns = cp.namespace("rip-aws").await;
    let log = cp.dir.join("operator-rip-aws.log");

    let keys: Secret = serde_json::from_value(json!({
        "metadata": {"name": "aws-keys"},
        "stringData": {"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &keys)
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let names = ["aws-a", "aws-b", "aws-c"];
    let ids: Vec<(&str, String)> = names
        .iter()
        .zip(&ec2)
        .map(|(n, i)| (*n, i.provider_id.clone()))
        .collect();
    cloud_nodes(&nodes, json!({"role": "aws-edge"}), &ids).await;
    web_service(&client, &ns).await;
    set_endpoints(
        &client,
        &ns,
        &[("aws-a", true), ("aws-b", true), ("aws-c", true)],
    )
    .await;
    let issuer: RoutedIPIssuer = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
        "metadata": {"name": "aws"},
        "spec": {"aws": {"region": REGION, "endpoint": endpoint,
                         "credentialsSecretRef": {"namespace": ns, "name": "aws-keys"}},
                 "firewall": {"name": "web-fw"}}
    }))
    .unwrap();
    Api::<RoutedIPIssuer>::all(client.clone())
        .create(&PostParams::default(), &issuer)
        .await
        .unwrap();
    // The first association is throttled beyond the client's retries: the address must
    // be in the status while the IP is associated with nothing.
    hold(&gate, "AssociateAddress", 10);
    let rip: RoutedIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "aws-ingress"},
        "spec": {"issuerRef": {"name": "aws"}, "cooldownSeconds": 5,
                 "nodeSelector": {"matchLabels": {"role": "aws-edge"}},
                 "serviceRef": {"namespace": ns, "name": "web"}}
    }))
    .unwrap();
    let rips = Api::<RoutedIP>::all(client.clone());
    rips.create(&PostParams::default(), &rip).await.unwrap();
    let mut op = operator(cp, &ns, &log);

    let s = until(&client, "aws-ingress", "address recorded", &log, |s| {
        s.address.is_some()
    })
    .await;
    let (count, holder, _) = aws_state(&moto, &ec2);
    assert_eq!(count, 1);
    assert_eq!(holder, None, "associated before the address was recorded");
    assert_eq!(
        s.address.as_deref(),
        moto.addresses()[0]["PublicIp"].as_str()
    );
    let s = until(
        &client,
        "aws-ingress",
        "on aws-a",
        &log,
        settled_on("aws-a"),
    )
    .await;
    let address = s.address.clone().unwrap();
    assert_eq!(
        aws_state(&moto, &ec2),
        (1, Some(a.id.clone()), vec![a.id.clone()])
    );
    let rules: Vec<(String, u64)> = moto.security_group("web-fw")["IpPermissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["IpProtocol"].as_str().unwrap().to_owned(),
                p["FromPort"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert!(rules.contains(&("tcp".into(), 443)) && rules.contains(&("udp".into(), 53)));
    // Tagged for this cluster and RoutedIP (how a restarted operator finds it).
    let tags = moto.addresses()[0]["Tags"].to_string();
    assert!(
        tags.contains("netpolicy.io/routed-ip") && tags.contains("aws-ingress"),
        "{tags}"
    );
    // An Elastic IP is NATed to the instance: nothing on the holder's interfaces.
    let nnc = Api::<NodeNetworkConfig>::all(client.clone())
        .get_opt("aws-a")
        .await
        .unwrap();
    assert!(
        nnc.is_none_or(|n| n.spec.rendered.addresses.is_empty()),
        "an address item for an Elastic IP"
    );

    // The holder turns NotReady: the group goes on aws-b's interface, the address moves
    // (one AssociateAddress with AllowReassociation: no DisassociateAddress, no gap),
    // then aws-a's interface leaves the group.
    let mark = gate.lock().unwrap().actions.len();
    set_ready(&nodes, "aws-a", false).await;
    let s = until(
        &client,
        "aws-ingress",
        "moved to aws-b",
        &log,
        settled_on("aws-b"),
    )
    .await;
    assert!(s.cooldown_until.contains_key("aws-a"), "{s:?}");
    assert_eq!(
        aws_writes(&gate, mark),
        [
            "ModifyNetworkInterfaceAttribute",
            "AssociateAddress",
            "ModifyNetworkInterfaceAttribute"
        ]
    );
    assert_eq!(
        aws_state(&moto, &ec2),
        (1, Some(b.id.clone()), vec![b.id.clone()])
    );

    // aws-b loses its Service endpoint: the address moves to aws-c (aws-a is NotReady).
    set_endpoints(
        &client,
        &ns,
        &[("aws-a", true), ("aws-b", false), ("aws-c", true)],
    )
    .await;
    until(
        &client,
        "aws-ingress",
        "moved to aws-c",
        &log,
        settled_on("aws-c"),
    )
    .await;
    assert_eq!(
        aws_state(&moto, &ec2),
        (1, Some(c.id.clone()), vec![c.id.clone()])
    );

    // Killed in the middle of a failover (the association held), restarted: the
    // failover completes, one association, nothing leaked.
    tokio::time::sleep(Duration::from_secs(5)).await; // aws-a's cooldown ends
    set_ready(&nodes, "aws-a", true).await;
    hold(&gate, "AssociateAddress", 1000);
    set_ready(&nodes, "aws-c", false).await;
    let assigning = format!("assign {}", a.provider_id);
    until(
        &client,
        "aws-ingress",
        "associating with aws-a",
        &log,
        |s| s.step.as_deref() == Some(assigning.as_str()),
    )
    .await;
    drop(op);
    let (count, holder, mut members) = aws_state(&moto, &ec2);
    members.sort();
    let mut both = vec![a.id.clone(), c.id.clone()];
    both.sort();
    assert_eq!(
        (count, holder, members),
        (1, Some(c.id.clone()), both),
        "the kill came before the association; the new holder is already in the group"
    );
    hold(&gate, "AssociateAddress", 0);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    op = common::operator_on(cp, &ns, &log, RUST_LOG, &format!("127.0.0.1:{port}"));
    until(
        &client,
        "aws-ingress",
        "moved to aws-a after the restart",
        &log,
        settled_on("aws-a"),
    )
    .await;
    assert_eq!(
        aws_state(&moto, &ec2),
        (1, Some(a.id.clone()), vec![a.id.clone()])
    );

    // Quiet: resyncs read EC2 but change nothing there or in the API server (after
    // aws-c's cooldown is over: dropping it from the status is a change).
    set_ready(&nodes, "aws-c", true).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let mark = gate.lock().unwrap().actions.len();
    let writes = || cp.writes_where("routedips", |_| true).len();
    let before = writes();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(writes(), before, "API writes on a quiet cluster");
    assert_eq!(
        aws_writes(&gate, mark),
        Vec::<String>::new(),
        "EC2 writes when quiet"
    );
    assert!(
        gate.lock().unwrap().actions.len() > mark,
        "the resync did not read EC2 at all"
    );

    // The keys are in no status, Event or log.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap();
    let everything = format!(
        "{}{}{}",
        serde_json::to_string(&events.items).unwrap(),
        serde_json::to_string(&status(&client, "aws-ingress").await).unwrap(),
        std::fs::read_to_string(&log).unwrap()
    );
    assert!(!everything.contains(SECRET_KEY) && !everything.contains(ACCESS_KEY));

    // Retain: deleted, the address stays allocated and associated with nothing, and is
    // reported as an orphan of this cluster, never released.
    rips.delete("aws-ingress", &DeleteParams::default())
        .await
        .unwrap();
    let t = Instant::now();
    while rips.get_opt("aws-ingress").await.unwrap().is_some() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "finalizer not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(aws_state(&moto, &ec2).0, 1);
    assert_eq!(aws_state(&moto, &ec2).1, None);
    let t = Instant::now();
    loop {
        let issuer = Api::<RoutedIPIssuer>::all(client.clone())
            .get("aws")
            .await
            .unwrap();
        let orphan = issuer
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .any(|c| c.type_ == "Orphans" && c.status == "True" && c.message.contains(&address));
        if orphan {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no orphan reported");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(aws_state(&moto, &ec2).0, 1, "an orphan is never released");

    // Delete: the address is released with its RoutedIP.
    let rip: RoutedIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "aws-egress"},
        "spec": {"issuerRef": {"name": "aws"}, "reclaimPolicy": "Delete",
                 "nodeSelector": {"matchLabels": {"role": "aws-edge"}}}
    }))
    .unwrap();
    rips.create(&PostParams::default(), &rip).await.unwrap();
    let s = until(
        &client,
        "aws-egress",
        "egress on aws-a",
        &log,
        settled_on("aws-a"),
    )
    .await;
    assert_eq!(aws_state(&moto, &ec2).0, 2);
    rips.delete("aws-egress", &DeleteParams::default())
        .await
        .unwrap();
    let t = Instant::now();
    loop {
        let left = moto.addresses().to_string();
        if !left.contains(s.address.as_deref().unwrap())
            && rips.get_opt("aws-egress").await.unwrap().is_none()
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "egress address not released"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Api::<RoutedIPIssuer>::all(client.clone())
        .delete("aws", &DeleteParams::default())
        .await
        .unwrap();
    drop(op);
}

/// Issue 40: a RoutedIP deleted while its provider is unreachable stayed Terminating for
/// good, saying nothing. The deletion still waits for the provider (with backoff), and a
/// Warning Event says what it waits for and how to let the RoutedIP go without it.
#[tokio::test(flavor = "multi_thread")]
async fn a_deletion_that_waits_for_an_unreachable_provider_says_how_to_let_it_go() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let ns = cp.namespace("rip-gone").await;
    let log = cp.dir.join("operator-rip-gone.log");
    token_secret(&client, &ns, "hcloud", "token", "any").await;
    // Nothing listens there: every call fails at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let issuer: RoutedIPIssuer = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
        "metadata": {"name": "hz-gone"},
        "spec": {"hetzner": {"tokenSecretRef": {"namespace": ns, "name": "hcloud"},
                             "location": "fsn1",
                             "endpoint": format!("http://127.0.0.1:{closed}/v1")}}
    }))
    .unwrap();
    Api::<RoutedIPIssuer>::all(client.clone())
        .create(&PostParams::default(), &issuer)
        .await
        .unwrap();
    let rip: RoutedIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "gone"},
        "spec": {"issuerRef": {"name": "hz-gone"}, "address": "198.51.100.77",
                 "nodeSelector": {"matchLabels": {"role": "nowhere"}}}
    }))
    .unwrap();
    let rips = Api::<RoutedIP>::all(client.clone());
    rips.create(&PostParams::default(), &rip).await.unwrap();
    let _op = operator(cp, &ns, &log);
    // An API that does not answer is said within seconds, on the RoutedIP and on its
    // issuer (not after the whole retry budget, as a ProviderError).
    let said = |c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition| {
        c.type_ == "Ready"
            && c.status == "False"
            && c.reason == "IssuerUnavailable"
            && c.message.contains("provider API unreachable")
    };
    eventually("the RoutedIP says IssuerUnavailable", 10, || async {
        status(&client, "gone")
            .await
            .is_some_and(|s| s.conditions.iter().any(said))
    })
    .await;
    eventually("the issuer says IssuerUnavailable", 10, || async {
        Api::<RoutedIPIssuer>::all(client.clone())
            .get("hz-gone")
            .await
            .ok()
            .and_then(|i| i.status)
            .is_some_and(|s| s.conditions.iter().any(said))
    })
    .await;
    eventually("the finalizer", 30, || async {
        rips.get("gone")
            .await
            .ok()
            .and_then(|r| r.metadata.finalizers)
            .is_some_and(|f| f.iter().any(|f| f == "netpolicy.io/routed-ip"))
    })
    .await;
    rips.delete("gone", &Default::default()).await.unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    eventually("a Warning Event saying how to let it go", 60, || async {
        events
            .list(&Default::default())
            .await
            .map(|l| {
                l.items.iter().any(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("gone")
                        && e.type_.as_deref() == Some("Warning")
                        && e.note.as_deref().is_some_and(|n| {
                            n.contains("deletion waits for issuer hz-gone to unassign")
                                && n.contains("kubectl patch routedip gone")
                        })
                })
            })
            .unwrap_or(false)
    })
    .await;
    // Let it go as the Event says.
    rips.patch(
        "gone",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "remove", "path": "/metadata/finalizers"}
            ]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    eventually("gone", 20, || async {
        rips.get_opt("gone").await.unwrap().is_none()
    })
    .await;
}

/// A user's Floating IP the provider already holds, on a node that may keep it, adopted
/// with `spec.address`: the operator allocates no second IP and neither unassigns nor
/// reassigns it (no gap), and opens the firewall for the Service (the IP keeps the
/// user's labels: it is found by its address, recorded in the status).
/// Then the Service's port changes: the new port is opened before the old one is closed
/// (the seed's order; the provider's request log says it), and the old one is closed.
#[tokio::test(flavor = "multi_thread")]
async fn hetzner_adopts_an_existing_ip_without_a_gap_and_follows_a_port_change_in_order() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let (base, cloud) = cloud::serve(cloud::hetzner::api, "/v1").await;
    let ns = cp.namespace("rip-adopt").await;
    let log = cp.dir.join("operator-rip-adopt.log");
    token_secret(&client, &ns, "hcloud", "token", cloud::hetzner::TOKEN).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let ids: Vec<(&str, String)> = [("adopt-a", 21), ("adopt-b", 22)]
        .into_iter()
        .map(|(n, id)| (n, format!("hcloud://{id}")))
        .collect();
    cloud_nodes(&nodes, json!({"role": "adopt"}), &ids).await;
    web_service(&client, &ns).await;
    set_endpoints(&client, &ns, &[("adopt-a", true), ("adopt-b", true)]).await;
    // The user's IP, made by hand in Hetzner's console: no labels, on adopt-a's server.
    let address = "198.51.100.250";
    cloud.lock().unwrap().ips.push(json!({
        "id": 900, "ip": address, "type": "ipv4", "server": 21, "labels": {},
        "description": "made by hand", "home_location": {"name": "fsn1"}, "blocked": false
    }));
    let issuer: RoutedIPIssuer = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
        "metadata": {"name": "hz-adopt"},
        "spec": {"hetzner": {"tokenSecretRef": {"namespace": ns, "name": "hcloud"},
                             "location": "fsn1", "endpoint": base},
                 "firewall": {"name": "adopt-fw"}}
    }))
    .unwrap();
    Api::<RoutedIPIssuer>::all(client.clone())
        .create(&PostParams::default(), &issuer)
        .await
        .unwrap();
    let rip: RoutedIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
        "metadata": {"name": "adopted"},
        "spec": {"issuerRef": {"name": "hz-adopt"}, "address": address,
                 "nodeSelector": {"matchLabels": {"role": "adopt"}},
                 "serviceRef": {"namespace": ns, "name": "web"}}
    }))
    .unwrap();
    Api::<RoutedIP>::all(client.clone())
        .create(&PostParams::default(), &rip)
        .await
        .unwrap();
    let op = operator(cp, &ns, &log);

    let s = until(
        &client,
        "adopted",
        "adopted on adopt-a",
        &log,
        settled_on("adopt-a"),
    )
    .await;
    assert_eq!(s.address.as_deref(), Some(address));
    let c = calls(&cloud, 0);
    assert!(
        !c.iter().any(|c| c.starts_with("POST /floating_ips ")
            || c == "POST /floating_ips"
            || c.contains("actions/unassign")
            || c.contains("actions/assign")),
        "a second IP, or the IP moved (a gap), while adopting one where it may stay: {c:#?}"
    );
    {
        let st = cloud.lock().unwrap();
        assert_eq!(st.ips.len(), 1, "{:?}", st.ips);
        assert_eq!(st.ips[0]["server"], 21);
        let rules = st.firewalls[0]["rules"].to_string();
        assert!(
            rules.contains("\"443\"") && rules.contains("\"53\""),
            "{rules}"
        );
    }

    // The Service's HTTPS port moves from 443 to 8443.
    let mark = cloud.lock().unwrap().log.len();
    Api::<Service>::namespaced(client.clone(), &ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [
                {"name": "https", "port": 8443, "targetPort": 8443},
                {"name": "dns", "port": 53, "protocol": "UDP"}]}})),
        )
        .await
        .unwrap();
    let s = until(&client, "adopted", "on port 8443", &log, |s| {
        s.step.is_none() && s.ports.iter().any(|p| p.port == 8443)
    })
    .await;
    let ports: Vec<(String, u16)> = s
        .ports
        .iter()
        .map(|p| (p.protocol.clone(), p.port))
        .collect();
    assert_eq!(ports, [("tcp".to_owned(), 8443), ("udp".to_owned(), 53)]);
    let c = calls(&cloud, mark);
    let set_rules: Vec<&String> = c.iter().filter(|c| c.contains("set_rules")).collect();
    let opened = set_rules
        .iter()
        .position(|r| r.contains("\"8443\""))
        .unwrap_or_else(|| panic!("8443 never opened: {c:#?}"));
    let closed = set_rules
        .iter()
        .position(|r| !r.contains("\"443\""))
        .unwrap_or_else(|| panic!("443 never closed: {c:#?}"));
    assert!(
        set_rules[opened].contains("\"443\"") && opened < closed,
        "8443 not opened while 443 was still open, before 443 was closed: {set_rules:#?}"
    );
    assert!(
        !c.iter()
            .any(|c| c.contains("actions/unassign") || c.contains("actions/assign")),
        "the IP moved for a port change: {c:#?}"
    );
    let rules = cloud.lock().unwrap().firewalls[0]["rules"].to_string();
    assert!(
        rules.contains("\"8443\"") && rules.contains("\"53\"") && !rules.contains("\"443\""),
        "{rules}"
    );
    drop(op);
}
