//! ipruler's `node-cleanup-on-deletion=false` as `--node-cleanup-on-deletion=false`: a
//! deleted NodeConfig's items stay in the node's kernel exactly as they were, are no
//! longer netpolicy's, and are listed in the node's NodeNetworkConfig. The operator and
//! the agent as real processes, the real API server, the node's kernel a network
//! namespace (root; without it a SKIP line).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{NodeConfig, NodeNetworkConfig, crds};
use netpolicy_testenv::eventually;
use serde_json::json;

fn node_config(name: &str, pool: &str, spec: serde_json::Value) -> NodeConfig {
    let mut spec = spec;
    spec["nodeSelector"] = json!({"matchLabels": {"cleanup-test": pool}});
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_policys_items_stay_on_the_node_given_up_and_listed() {
    let Some(netns) = TestNamespace::new("node cleanup off").unwrap() else {
        return;
    };
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let node = cp.unique("cleanup-off");
    let pool = node.clone();
    common::ready_node(
        &Api::<Node>::all(client.clone()),
        &node,
        json!({"cleanup-test": pool}),
    )
    .await;
    let ns = cp.namespace("cleanup-off").await;
    let log = cp.dir.join("operator-cleanup-off.log");
    let _op = common::operator_with(
        cp,
        &ns,
        &log,
        "info",
        &["--node-cleanup-on-deletion", "false"],
    );
    let _agent = common::agent(
        &cp.kubeconfig,
        &node,
        netns.name(),
        &cp.dir.join("agent-cleanup-off.log"),
    );
    let ncs = Api::<NodeConfig>::all(client.clone());
    let nncs = Api::<NodeNetworkConfig>::all(client.clone());
    let kept = format!("{node}-kept");
    let gone = format!("{node}-gone");
    ncs.create(
        &PostParams::default(),
        &node_config(
            &kept,
            &pool,
            json!({"routes": [{"to": "10.61.0.0/16", "via": "192.0.2.1", "table": 100}]}),
        ),
    )
    .await
    .unwrap();
    ncs.create(
        &PostParams::default(),
        &node_config(
            &gone,
            &pool,
            json!({
                "routes": [{"to": "10.62.0.0/16", "via": "192.0.2.1", "table": 100}],
                "rules": [{"priority": 1200, "from": "10.62.0.0/16", "table": 100}],
                "addresses": [{"dev": "lo", "address": "198.51.100.62/32"}]
            }),
        ),
    )
    .await
    .unwrap();
    let ip = |args: &[&str]| netns.ip(args).unwrap_or_default();
    eventually("both policies in the kernel", 30, || {
        let t = ip(&["route", "show", "table", "100"]);
        let r = ip(&["rule", "show"]);
        let lo = ip(&["address", "show", "dev", "lo"]);
        std::future::ready(
            t.contains("10.61.0.0/16 via 192.0.2.1 dev v0 proto 203")
                && t.contains("10.62.0.0/16 via 192.0.2.1 dev v0 proto 203")
                && r.contains("1200:\tfrom 10.62.0.0/16 lookup 100 proto 203")
                && lo.contains("198.51.100.62/32"),
        )
    })
    .await;

    // Deleted: its items stay, given up (protocol static, no longer 203), listed.
    ncs.delete(&gone, &DeleteParams::default()).await.unwrap();
    eventually(
        "the deleted policy's items listed as left behind",
        30,
        || {
            let nncs = nncs.clone();
            let node = node.clone();
            async move {
                let n = nncs.get(&node).await.unwrap();
                let lines = n.status.unwrap_or_default().left_behind;
                n.spec.left_behind.routes.len() == 1
                    && n.spec.left_behind.rules.len() == 1
                    && n.spec.left_behind.addresses.len() == 1
                    && lines
                        .iter()
                        .any(|l| l.starts_with("route 10.62.0.0/16") && l.contains("NodeConfig/"))
                    && lines
                        .iter()
                        .any(|l| l.starts_with("rule ") && l.contains("10.62.0.0/16"))
                    && lines
                        .iter()
                        .any(|l| l.starts_with("address 198.51.100.62/32"))
            }
        },
    )
    .await;
    let t = ip(&["route", "show", "table", "100"]);
    assert!(
        t.contains("10.62.0.0/16 via 192.0.2.1 dev v0 proto static"),
        "{t}"
    );
    assert!(
        t.contains("10.61.0.0/16 via 192.0.2.1 dev v0 proto 203"),
        "{t}"
    );
    let r = ip(&["rule", "show"]);
    assert!(
        r.contains("1200:\tfrom 10.62.0.0/16 lookup 100 proto static"),
        "{r}"
    );
    assert!(ip(&["address", "show", "dev", "lo"]).contains("198.51.100.62/32"));

    // Quiet: resyncs of the operator and the agent write nothing.
    let writes = || cp.writes_where("nodenetworkconfigs", |n| n == node).len();
    let before = writes();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(writes(), before, "writes while quiet");

    // Desired again (a new policy with the same route): no longer left behind.
    let again = format!("{node}-again");
    ncs.create(
        &PostParams::default(),
        &node_config(
            &again,
            &pool,
            json!({"routes": [{"to": "10.62.0.0/16", "via": "192.0.2.1", "table": 100}]}),
        ),
    )
    .await
    .unwrap();
    eventually("the route desired again leaves the list", 30, || {
        let nncs = nncs.clone();
        let node = node.clone();
        async move {
            let n = nncs.get(&node).await.unwrap();
            n.spec.left_behind.routes.is_empty() && n.spec.left_behind.rules.len() == 1
        }
    })
    .await;
    for n in [&kept, &again] {
        ncs.delete(n, &DeleteParams::default()).await.unwrap();
    }
}
