//! The CRDs against a real kube-apiserver (netpolicy-testenv): they install and become
//! Established, valid objects (the examples) are accepted, and every validation rule
//! rejects what it should with a message a person understands.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use netpolicy_operator::api::crds;
use serde_json::{Value, json};

async fn install(client: &Client) {
    netpolicy_testenv::install_crds(client, crds()).await;
}

fn api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase());
    let gvk = GroupVersionKind::gvk("netpolicy.io", "v1alpha1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

fn object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

async fn create(
    client: &Client,
    kind: &str,
    name: &str,
    spec: Value,
) -> Result<DynamicObject, String> {
    api(client, kind, None)
        .create(&PostParams::default(), &object(kind, name, spec))
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn crds_install_and_become_established() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    // Installing again (an upgrade with the same content) is a no-op, not an error.
    install(&client).await;
}

#[tokio::test]
async fn valid_objects_are_accepted() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let name = cp.unique("valid");
    create(
        &client,
        "NodeConfig",
        &name,
        json!({
            "nodeSelector": {"matchLabels": {"pool": "edge"}},
            "priority": 10,
            "vlans": [{"link": "eth1", "id": 300, "addresses": ["10.30.0.5/24"]}],
            "routes": [
                {"to": "10.20.0.0/16", "via": "10.30.0.1"},
                {"to": "10.21.0.0/16", "nexthops": [{"via": "10.30.0.1"}, {"via": "10.30.0.2"}]}
            ],
            "rules": [{"priority": 1000, "from": "10.30.0.0/24", "table": 300}]
        }),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_vlan_id_out_of_range_is_rejected_with_its_range() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let e = create(
        &client,
        "NodeConfig",
        &cp.unique("vlan"),
        json!({"nodeSelector": {}, "vlans": [{"link": "eth1", "id": 5000}]}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("spec.vlans[0]") && e.contains("1..4094"), "{e}");
}

#[tokio::test]
async fn a_rule_priority_out_of_range_and_via_with_nexthops_are_rejected() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let e = create(
        &client,
        "NodeConfig",
        &cp.unique("prio"),
        json!({"nodeSelector": {}, "rules": [{"priority": 40000, "table": 100}]}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("spec.rules[0]") && e.contains("1..32765"), "{e}");
    let e = create(
        &client,
        "NodeConfig",
        &cp.unique("ecmp"),
        json!({"nodeSelector": {}, "routes": [
            {"to": "10.0.0.0/8", "via": "192.0.2.1", "nexthops": [{"via": "192.0.2.2"}]}
        ]}),
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("spec.routes[0]") && e.contains("exclusive with nexthops"),
        "{e}"
    );
}

#[tokio::test]
async fn only_a_cluster_config_named_default_exists() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let e = create(&client, "ClusterConfig", "second", json!({}))
        .await
        .unwrap_err();
    assert!(e.contains("must be named 'default'"), "{e}");
    let e = create(&client, "RouteReflectorConfig", "other", json!({}))
        .await
        .unwrap_err();
    assert!(e.contains("must be named 'default'"), "{e}");
    // `default` itself is fine (created once; other tests do not touch it).
    create(&client, "ClusterConfig", "default", json!({"routes": []}))
        .await
        .unwrap();
    // The defaults of DESIGN.md are filled in by the server.
    let rr = create(&client, "RouteReflectorConfig", "default", json!({}))
        .await
        .unwrap();
    let spec = &rr.data["spec"];
    assert_eq!(spec["min"], 3);
    assert_eq!(spec["max"], 10);
    assert_eq!(spec["clusterID"], "224.0.0.1");
    assert_eq!(spec["topology"], "simple");
}

#[tokio::test]
async fn a_node_selector_cannot_change() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let name = cp.unique("immutable");
    create(
        &client,
        "NodeConfig",
        &name,
        json!({"nodeSelector": {"matchLabels": {"pool": "a"}}, "priority": 1}),
    )
    .await
    .unwrap();
    let api = api(&client, "NodeConfig", None);
    // Other fields may change...
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"priority": 2}})),
    )
    .await
    .unwrap();
    // ...the selector may not.
    let e = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeSelector": {"matchLabels": {"pool": "b"}}}})),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("nodeSelector is immutable"), "{e}");
}

#[tokio::test]
async fn a_rendering_never_changes_and_the_fleet_is_one_object() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let name = cp.unique("r");
    let spec = json!({
        "rendering": name, "part": 0, "parts": 1,
        "routes": [{"to": "10.20.0.0/16", "dev": "eth0",
                    "sources": [{"kind": "ClusterConfig", "name": "default"}]}],
        "rules": [], "vlans": [],
    });
    create(&client, "NodeNetworkRendering", &name, spec)
        .await
        .unwrap();
    let renderings = api(&client, "NodeNetworkRendering", None);
    // Its labels may change (they are not its content)...
    renderings
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"netpolicy.io/rendering": name}}})),
        )
        .await
        .unwrap();
    // ...its items may not.
    let e = renderings
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"routes": []}})),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("a NodeNetworkRendering is immutable"), "{e}");
    let e = create(
        &client,
        "NodeNetworkRendering",
        &cp.unique("r"),
        json!({"rendering": "r-1", "part": 0, "parts": 0}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("spec.parts"), "{e}");
    // One fleet, named default.
    let e = create(&client, "NetworkFleet", &cp.unique("fleet"), json!({}))
        .await
        .unwrap_err();
    assert!(e.contains("the NetworkFleet is named 'default'"), "{e}");
}

#[tokio::test]
async fn the_examples_are_accepted_by_the_server() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let m = netpolicy_operator::manifest::load(&[dir]).unwrap();
    // Server-side apply, dry run: the examples' ClusterConfig and RouteReflectorConfig
    // share their names with objects another test creates for real.
    let pp = PatchParams::apply("netpolicy-tests").force().dry_run();
    let mut n = 0;
    for (kind, value) in m
        .node_configs
        .iter()
        .map(|o| ("NodeConfig", serde_json::to_value(&o.object).unwrap()))
        .chain(
            m.cluster_configs
                .iter()
                .map(|o| ("ClusterConfig", serde_json::to_value(&o.object).unwrap())),
        )
        .chain(
            m.floating_ip_ranges
                .iter()
                .map(|o| ("FloatingIPRange", serde_json::to_value(&o.object).unwrap())),
        )
        .chain(m.route_reflector_configs.iter().map(|o| {
            (
                "RouteReflectorConfig",
                serde_json::to_value(&o.object).unwrap(),
            )
        }))
    {
        let obj: DynamicObject = serde_json::from_value(value).unwrap();
        let name = obj.metadata.name.clone().unwrap();
        api(&client, kind, None)
            .patch(&name, &pp, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{kind} {:?}: {e}", obj.metadata.name));
        n += 1;
    }
    assert!(n >= 11, "{n} objects");
}

#[tokio::test]
async fn a_routed_ip_issuer_names_exactly_one_provider() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let token = json!({"namespace": "ns", "name": "t"});
    for spec in [
        json!({}),
        json!({"memory": {}, "hetzner": {"tokenSecretRef": token, "location": "fsn1"}}),
    ] {
        let e = create(&client, "RoutedIPIssuer", &cp.unique("issuer"), spec)
            .await
            .unwrap_err();
        assert!(e.contains("exactly one provider"), "{e}");
    }
    create(
        &client,
        "RoutedIPIssuer",
        &cp.unique("issuer"),
        json!({"memory": {}}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn rollout_and_probes_are_checked_by_the_schema() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    install(&client).await;
    let with = |rollout: Value, probes: Value| json!({"nodeSelector": {}, "rollout": rollout, "probes": probes});
    for (spec, needle) in [
        (
            with(json!({"maxUnavailable": 0}), json!([])),
            "maxUnavailable is an integer >= 1",
        ),
        (
            with(json!({"maxUnavailable": "0%"}), json!([])),
            "maxUnavailable is an integer >= 1",
        ),
        (
            with(json!({"maxUnavailable": "150%"}), json!([])),
            "maxUnavailable is an integer >= 1",
        ),
        (
            with(json!({"maxUnavailable": "two"}), json!([])),
            "maxUnavailable is an integer >= 1",
        ),
        (
            with(json!({"rollbackSeconds": 0}), json!([])),
            "greater than or equal to 1",
        ),
        (
            with(
                json!({}),
                json!([{"ping": "10.0.0.1", "tcp": "10.0.0.1:80"}]),
            ),
            "exactly one of ping or tcp",
        ),
        (with(json!({}), json!([{}])), "exactly one of ping or tcp"),
        (
            with(json!({}), json!([{"ping": "10.0.0.300"}])),
            "ping is an IP address",
        ),
        (
            with(json!({}), json!([{"tcp": "10.0.0.1"}])),
            "tcp is host:port",
        ),
        (with(json!({}), json!([{"tcp": ":80"}])), "tcp is host:port"),
    ] {
        let e = create(&client, "NodeConfig", &cp.unique("rollout"), spec.clone())
            .await
            .unwrap_err();
        assert!(e.contains(needle), "{spec}: {e}");
    }
    for (rollout, probes) in [
        (
            json!({"maxUnavailable": 3, "rollbackSeconds": 60}),
            json!([{"ping": "fd00::1"}, {"tcp": "[fd00::1]:6443"}]),
        ),
        (
            json!({"maxUnavailable": "10%"}),
            json!([{"tcp": "api.example.com:443"}]),
        ),
        (json!({"maxUnavailable": "100%"}), json!([])),
    ] {
        create(
            &client,
            "NodeConfig",
            &cp.unique("rollout"),
            with(rollout, probes),
        )
        .await
        .unwrap();
    }
    // The same on the ClusterConfig.
    let e = create(
        &client,
        "ClusterConfig",
        "default",
        json!({"rollout": {"maxUnavailable": "0"}}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("maxUnavailable"), "{e}");
}
