//! Helpers the route-reflector test files share (`mod common;`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Child;

use k8s_openapi::{
    api::core::v1::Node,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

/// A child process, killed when dropped.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
