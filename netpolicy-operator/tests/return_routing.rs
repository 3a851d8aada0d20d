//! Return routing of a floating address (issue 32): the node kube-vip announces a
//! FloatingIP from (its LoadBalancer Service's `kube-vip.io/vipHost`) gets `from <ip>
//! lookup <table>` and a default route via the range's gateway on its interface; when
//! the announcement moves, the routing moves with it, and a packet from the address
//! leaves the new holder through that interface. The operator and two agents as real
//! processes, the real API server, each node's kernel a network namespace (root; without
//! it a SKIP line).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{FloatingIP, FloatingIPRange, crds};
use netpolicy_testenv::eventually;
use serde_json::json;

const VIP: &str = "203.0.113.5";

/// Whether `ns` holds the return routing of [`VIP`]: the rule and table 200's route.
fn holds(ns: &TestNamespace) -> (bool, bool) {
    let rules = ns.ip(&["rule", "show"]).unwrap_or_default();
    let table = ns
        .ip(&["route", "show", "table", "200"])
        .unwrap_or_default();
    (
        rules.contains(&format!("from {VIP} lookup 200 proto 203")),
        table.contains("default via 192.0.2.1 dev v0 proto 203"),
    )
}

fn tx_packets(ns: &TestNamespace, dev: &str) -> u64 {
    let out = ns.ip(&["-s", "link", "show", dev]).unwrap();
    // "TX:  bytes packets ..." then the numbers on the next line.
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("TX:"))
        .unwrap_or_else(|| panic!("no TX counters in {out}"));
    lines[at + 1]
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no TX packets in {out}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn return_routing_follows_kube_vips_announcement_from_node_to_node() {
    let Some(ns_a) = TestNamespace::new("return routing (node a)").unwrap() else {
        return;
    };
    let Some(ns_b) = TestNamespace::new("return routing (node b)").unwrap() else {
        return;
    };
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let nodes = Api::<Node>::all(client.clone());
    let a = cp.unique("rr-a");
    let b = cp.unique("rr-b");
    common::ready_node(&nodes, &a, json!({})).await;
    common::ready_node(&nodes, &b, json!({})).await;
    let ns = cp.namespace("return-routing").await;
    let _op = common::operator_with(
        cp,
        &ns,
        &cp.dir.join("operator-return-routing.log"),
        "info",
        &[],
    );
    let _agent_a = common::agent(
        &cp.kubeconfig,
        &a,
        ns_a.name(),
        &cp.dir.join("agent-rr-a.log"),
    );
    let _agent_b = common::agent(
        &cp.kubeconfig,
        &b,
        ns_b.name(),
        &cp.dir.join("agent-rr-b.log"),
    );

    let range = cp.unique("rr-range");
    let r: FloatingIPRange = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
        "metadata": {"name": range},
        "spec": {
            "cidrs": ["203.0.113.0/28"],
            "returnRouting": {"interface": "v0", "gateway": "192.0.2.1", "table": 200}
        }
    }))
    .unwrap();
    Api::<FloatingIPRange>::all(client.clone())
        .create(&PostParams::default(), &r)
        .await
        .unwrap();
    let fips = Api::<FloatingIP>::namespaced(client.clone(), &ns);
    let f: FloatingIP = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
        "metadata": {"name": "web"},
        "spec": {"range": range, "address": VIP}
    }))
    .unwrap();
    fips.create(&PostParams::default(), &f).await.unwrap();
    eventually("the FloatingIP allocated", 30, || async {
        fips.get("web")
            .await
            .ok()
            .and_then(|f| f.status?.address)
            .as_deref()
            == Some(VIP)
    })
    .await;

    // The LoadBalancer Service holding the address, announced by kube-vip from node a.
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let s: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"kube-vip.io/vipHost": a}},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &s).await.unwrap();
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": VIP}]}}})),
        )
        .await
        .unwrap();
    eventually("node a has the return routing", 30, || {
        std::future::ready(holds(&ns_a) == (true, true))
    })
    .await;
    assert_eq!(holds(&ns_b), (false, false), "node b holds nothing yet");

    // kube-vip moves the announcement to node b.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"kube-vip.io/vipHost": b}}})),
        )
        .await
        .unwrap();
    eventually("node b has it and node a does not", 30, || {
        std::future::ready(holds(&ns_b) == (true, true) && holds(&ns_a) == (false, false))
    })
    .await;

    // Quiet once moved: several resyncs of the operator (2 s) and agents (1 s), no write
    // of either node's NodeNetworkConfig.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let writes = || {
        cp.writes_where("nodenetworkconfigs", |n| n == a || n == b)
            .len()
    };
    let before = writes();
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert_eq!(
        writes(),
        before,
        "NodeNetworkConfig writes while nothing changed"
    );

    // A packet from the address leaves node b through v0 and reaches the gateway: the
    // address on lo (as kube-vip puts it), the gateway a namespace of its own at the
    // other end of v0 (v0's peer moved there).
    let Some(gw) = TestNamespace::new("return routing (gateway)").unwrap() else {
        return;
    };
    ns_b.ip(&["address", "add", &format!("{VIP}/32"), "dev", "lo"])
        .unwrap();
    gw.ip(&["link", "del", "v0"]).unwrap(); // its own pair, to make room
    ns_b.ip(&["link", "set", "v1", "netns", gw.name()]).unwrap();
    gw.ip(&["address", "add", "192.0.2.1/24", "dev", "v1"])
        .unwrap();
    gw.ip(&["link", "set", "v1", "up"]).unwrap();
    let route = ns_b
        .ip(&["route", "get", "198.51.100.99", "from", VIP])
        .unwrap();
    assert!(
        route.contains("via 192.0.2.1 dev v0 table 200"),
        "a reply from the address is not routed by table 200: {route}"
    );
    let before = tx_packets(&ns_b, "v0");
    // Three UDP datagrams from the address (python3 is there: scripts/test-moto needs it;
    // this machine has no ping).
    let sent = std::process::Command::new("ip")
        .args(["netns", "exec", ns_b.name(), "python3", "-c"])
        .arg(format!(
            "import socket, time\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             s.bind(('{VIP}', 0))\n\
             for _ in range(3): s.sendto(b'reply', ('198.51.100.99', 9))\n\
             time.sleep(0.5)\n"
        ))
        .output()
        .unwrap();
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let sent = tx_packets(&ns_b, "v0") - before;
    assert!(
        sent >= 3,
        "{sent} packets left v0 for 3 datagrams from {VIP}"
    );
}
