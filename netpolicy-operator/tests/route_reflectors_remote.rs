//! Calico's Kubernetes datastore in another cluster (the seed's `K8S_API_ENDPOINT`):
//! `datastore.kubernetes.kubeconfigSecretRef` names a kubeconfig Secret, and the operator
//! — running against its own API server — reads Nodes, and writes reflector labels,
//! cluster-ID annotations and BGPPeers, in the second one. Two real API servers; Calico's
//! own CRDs installed only in the remote one.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use common::{calico_crds, ready_node, rr_settled, rrc_status, set_ready};

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, PostParams},
};
use netpolicy_operator::api::{RouteReflectorConfig, calico::bgp_peer_resource, crds};
use serde_json::json;

const LABEL: &str = "calico-route-reflector";

#[tokio::test(flavor = "multi_thread")]
async fn reflectors_are_placed_in_the_cluster_the_kubeconfig_secret_names() {
    let home = netpolicy_testenv::shared();
    let calico = netpolicy_testenv::second();
    let client = home.client().await;
    let remote = calico.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    netpolicy_testenv::install_crds(&remote, calico_crds()).await;
    let remote_nodes: Api<Node> = Api::all(remote.clone());
    for i in 0..6 {
        let zone = ["a", "b"][i % 2];
        ready_node(
            &remote_nodes,
            &format!("calico-{i}"),
            json!({"topology.kubernetes.io/zone": zone}),
        )
        .await;
    }
    // A Node of the operator's own cluster: not Calico's, never touched.
    let home_nodes: Api<Node> = Api::all(client.clone());
    ready_node(
        &home_nodes,
        "home-0",
        json!({"topology.kubernetes.io/zone": "a"}),
    )
    .await;

    let ns = home.namespace("rr-remote").await;
    let log = home.dir.join("operator-rr-remote.log");
    let rrc: RouteReflectorConfig = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "RouteReflectorConfig",
        "metadata": {"name": "default"},
        "spec": {"min": 1, "max": 2, "stepDelaySeconds": 0,
                 "datastore": {"kubernetes": {"kubeconfigSecretRef":
                     {"namespace": ns, "name": "calico-cluster"}}}}
    }))
    .unwrap();
    Api::<RouteReflectorConfig>::all(client.clone())
        .create(&PostParams::default(), &rrc)
        .await
        .unwrap();
    let _op = common::operator(
        home,
        &ns,
        &log,
        "info,netpolicy_operator::route_reflector=debug",
    );

    // No Secret yet: said in the status, naming the field.
    let t = Instant::now();
    loop {
        let waiting = rrc_status(&client).await.is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == "Ready"
                    && c.reason == "DatastoreUnreachable"
                    && c.message
                        .contains("datastore.kubernetes.kubeconfigSecretRef")
                    && c.message.contains("does not exist")
            })
        });
        if waiting {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{:?}\n{}",
            rrc_status(&client).await,
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let kubeconfig = std::fs::read_to_string(&calico.kubeconfig).unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "calico-cluster"}, "stringData": {"kubeconfig": kubeconfig}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    rr_settled(&client, "placed in the remote cluster", 60, &log).await;

    let reflectors = |nodes: &[Node]| -> Vec<String> {
        nodes
            .iter()
            .filter(|n| n.labels().contains_key(LABEL))
            .map(ResourceExt::name_any)
            .collect()
    };
    let listed = remote_nodes.list(&Default::default()).await.unwrap().items;
    let placed = reflectors(&listed);
    assert_eq!(placed.len(), 2, "one per zone: {placed:?}");
    for n in listed.iter().filter(|n| placed.contains(&n.name_any())) {
        assert!(
            n.annotations()
                .contains_key(netpolicy_rr::CLUSTER_ID_ANNOTATION),
            "{n:?}"
        );
    }
    let peers = Api::<DynamicObject>::all_with(remote.clone(), &bgp_peer_resource())
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        peers
            .items
            .iter()
            .any(|p| p.name_any().starts_with("netpolicy-rr-")),
        "no BGPPeer in the remote cluster"
    );
    let home_node = home_nodes.get("home-0").await.unwrap();
    assert!(!home_node.labels().contains_key(LABEL), "{home_node:?}");
    assert!(
        !home_node
            .annotations()
            .contains_key(netpolicy_rr::CLUSTER_ID_ANNOTATION)
    );

    // A change in the remote cluster is seen by its watch: a reflector turning NotReady
    // is replaced in its zone.
    let lost = placed[0].clone();
    set_ready(&remote_nodes, &lost, false).await;
    let t = Instant::now();
    loop {
        let now = reflectors(&remote_nodes.list(&Default::default()).await.unwrap().items);
        if now.len() == 2 && !now.contains(&lost) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{lost} not replaced: {now:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rr_settled(&client, "after the loss", 60, &log).await;

    // Quiet: resyncs write nothing in either cluster.
    let remote_writes = || {
        calico.writes_where("nodes", |_| true).len()
            + calico.writes_where("bgppeers", |_| true).len()
    };
    let home_writes = || home.writes_where("routereflectorconfigs", |_| true).len();
    let (r0, h0) = (remote_writes(), home_writes());
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        remote_writes(),
        r0,
        "writes in the remote cluster when quiet"
    );
    assert_eq!(home_writes(), h0, "status writes when quiet");
}
