//! `netpolicy status` as a user runs it (the real binary, a kubeconfig), against a real
//! API server where a real operator renders a ClusterConfig and a real agent applies it
//! in a network namespace: one route applied, one the kernel refuses; then the operator
//! stopped and the policy edited, so that `plan` over the cluster would change the node.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::process::Command;

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{ClusterConfig, NodeNetworkConfig, crds};
use netpolicy_testenv::eventually;
use serde_json::{Value, json};

/// `netpolicy status <args> --kubeconfig <cp>`: (exit code, stdout, stderr).
fn status(cp: &netpolicy_testenv::ControlPlane, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_netpolicy"))
        .arg("status")
        .args(args)
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_of(cp: &netpolicy_testenv::ControlPlane, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (code, out, err) = status(cp, &all);
    assert_eq!(code, 0, "status {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn item<'a>(s: &'a Value, what: &str) -> &'a Value {
    s["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["item"].as_str().unwrap().contains(what))
        .unwrap_or_else(|| panic!("no item {what}: {s}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_a_nodes_items_their_sources_and_what_plan_would_change() {
    let Some(ns) = TestNamespace::new("netpolicy status").unwrap() else {
        return;
    };
    let cp = netpolicy_testenv::dedicated();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("status").await;
    let node = "status-node";
    common::ready_node(
        &Api::<Node>::all(client.clone()),
        node,
        json!({"kubernetes.io/hostname": node}),
    )
    .await;
    common::apply(
        &client,
        json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
            "metadata": {"name": "default"},
            "spec": {"routes": [
                {"to": "10.70.0.0/16", "via": "192.0.2.1", "table": 100},
                {"to": "10.71.0.0/16", "via": "198.51.100.1", "table": 100}
            ]}
        }),
    )
    .await;
    let log = cp.dir.join("operator-status.log");
    let operator = common::operator(cp, &system, &log, "info");
    let agent_log = cp.dir.join("agent-status.log");
    let _agent = common::agent(&cp.kubeconfig, node, ns.name(), &agent_log);
    let nncs: Api<NodeNetworkConfig> = Api::all(client.clone());
    eventually("the agent reports the refused route", 60, || async {
        nncs.get_opt(node).await.ok().flatten().is_some_and(|o| {
            o.status.is_some_and(|s| {
                s.item_errors
                    .iter()
                    .any(|e| e.item.contains("10.71.0.0/16"))
            })
        })
    })
    .await;

    let s = json_of(cp, &["node", node]);
    assert_eq!(s["node"], node);
    let applied = item(&s, "10.70.0.0/16");
    assert_eq!(applied["kind"], "route");
    assert_eq!(applied["sources"], json!(["ClusterConfig/default"]));
    // In the kernel, though the revision is not applied as a whole (one item refused).
    assert_eq!(applied["applied"], true, "{s:#}");
    assert_eq!(s["otherErrors"], json!([]), "{s:#}");
    let refused = item(&s, "10.71.0.0/16");
    assert_eq!(refused["applied"], false, "{s}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Refused")),
        "{s:#}"
    );
    assert!(
        s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Applied"),
        "{s}"
    );
    assert_eq!(s["planChanges"], json!([]), "{s}");
    // The table: what a person reads.
    let (code, table, err) = status(cp, &["node", node]);
    assert_eq!(code, 0, "{err}");
    println!("$ netpolicy status node {node}\n{table}");
    for want in [
        "10.70.0.0/16 table 100",
        "ClusterConfig/default",
        "no: Refused",
        "plan would change nothing",
    ] {
        assert!(table.contains(want), "{want}:\n{table}");
    }

    // The policy: the node it selects, in one state; its conditions.
    let p = json_of(cp, &["policy", "ClusterConfig/default"]);
    assert_eq!(p["matched"], json!([node]), "{p}");
    let states: usize = ["applied", "progressing", "degraded", "noAgent"]
        .iter()
        .map(|k| p[k].as_array().unwrap().len())
        .sum();
    assert_eq!(states, 1, "{p}");
    assert_eq!(
        json_of(cp, &["policy", "default"])["policy"],
        "ClusterConfig/default"
    );

    // Operator stopped, policy edited: the node still has the old items, and status
    // says what plan would add and remove.
    drop(operator);
    Api::<ClusterConfig>::all(client.clone())
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"routes": [
                {"to": "10.70.0.0/16", "via": "192.0.2.1", "table": 100},
                {"to": "10.72.0.0/16", "via": "192.0.2.1", "table": 100}
            ]}})),
        )
        .await
        .unwrap();
    let s = json_of(cp, &["node", node]);
    let changes = s["planChanges"].as_array().unwrap();
    let has = |action: &str, what: &str| {
        changes
            .iter()
            .any(|c| c["action"] == action && c["item"].as_str().unwrap().contains(what))
    };
    assert!(has("add", "10.72.0.0/16"), "{s}");
    assert!(has("remove", "10.71.0.0/16"), "{s}");
    assert_eq!(changes.len(), 2, "{s}");
    let (_, yaml, _) = status(cp, &["node", node, "-o", "yaml"]);
    assert!(yaml.contains("planChanges:"), "{yaml}");

    // Mistakes say what is wrong and exit 2.
    let (code, _, err) = status(cp, &["node", "no-such-node"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no NodeNetworkConfig for node no-such-node"),
        "{err}"
    );
    let (code, _, err) = status(cp, &["policy", "Foo/bar"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("ClusterConfig/<name> or NodeConfig/<name>"),
        "{err}"
    );
    let (code, _, err) = status(cp, &["policy", "NodeConfig/none"]);
    assert_eq!(code, 2);
    assert!(err.contains("no policy NodeConfig/none"), "{err}");
}
