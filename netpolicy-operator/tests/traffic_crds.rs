//! The traffic-domain CRDs (Trench, Attractor, Gateway, Vip, Conduit, Stream, Flow)
//! against a real kube-apiserver: Meridio's sample objects are accepted, and each of
//! Meridio's webhook rules that the schema can state rejects what it should, with the
//! field and a message a person understands. The `trench` label rules are enforced by
//! the ValidatingAdmissionPolicy in `deploy/traffic-domain-policy.yaml`, tested here too.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use netpolicy_operator::api::crds;

use crate::common;
use serde_json::{Value, json};

fn plural(kind: &str) -> String {
    match kind {
        "Trench" => "trenches".into(),
        k => format!("{}s", k.to_lowercase()),
    }
}

fn api(client: &Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("netpolicy.io", "v1alpha1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &plural(kind));
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn setup(prefix: &str) -> (Client, String) {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    common::admission_policy(&client).await;
    let ns = cp.unique(prefix);
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    (client, ns)
}

async fn create(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    trench: Option<&str>,
    spec: Value,
) -> Result<DynamicObject, String> {
    let mut meta = json!({"name": name});
    if let Some(t) = trench {
        meta["labels"] = json!({"trench": t});
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec,
    }))
    .unwrap();
    api(client, kind, ns)
        .create(&PostParams::default(), &obj)
        .await
        .map_err(|e| e.to_string())
}

async fn patch(client: &Client, ns: &str, kind: &str, name: &str, p: Value) -> Result<(), String> {
    api(client, kind, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn refused(r: Result<DynamicObject, String>, needle: &str) {
    match r {
        Ok(o) => panic!("accepted, expected a refusal mentioning {needle:?}: {o:?}"),
        Err(e) => assert!(
            e.contains(needle),
            "refusal {e:?} does not mention {needle:?}"
        ),
    }
}

/// Meridio's sample trench (examples/traffic-domains), as objects.
fn sample() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("Trench", "trench-a", json!({"ipFamily": "dualstack"})),
        ("Vip", "vip-a-1-v4", json!({"address": "20.0.0.1/32"})),
        ("Vip", "vip-a-1-v6", json!({"address": "2000::1/128"})),
        (
            "Gateway",
            "gateway-v4-a",
            json!({"address": "169.254.100.150", "protocol": "static", "static": {"bfd": {"switch": true, "minTx": "200ms", "minRx": "200ms", "multiplier": 3}}}),
        ),
        (
            "Gateway",
            "gateway-v6-a",
            json!({"address": "100:100::150", "protocol": "bgp", "bgp": {"localAsn": 8103, "remoteAsn": 4248829953u32, "holdTime": "24s", "localPort": 10179, "remotePort": 10179, "bfd": {"switch": false}}}),
        ),
        (
            "Conduit",
            "conduit-a-1",
            json!({"type": "stateless-lb", "destinationPortNats": [{"port": 80, "targetPort": 8080, "vips": ["vip-a-1-v4"], "protocol": "tcp"}]}),
        ),
        ("Stream", "stream-a-i", json!({"conduit": "conduit-a-1"})),
        (
            "Attractor",
            "attractor-a-1",
            json!({
                "nodeSelector": {"matchLabels": {"attractor": "a"}},
                "interface": {"name": "ext-vlan.100", "link": "eth0", "vlanId": 100, "ipv4Prefix": "169.254.100.0/24", "ipv6Prefix": "100:100::/64"},
                "gateways": ["gateway-v4-a", "gateway-v6-a"], "vips": ["vip-a-1-v4", "vip-a-1-v6"], "composites": ["conduit-a-1"]
            }),
        ),
        (
            "Flow",
            "flow-a-z-tcp",
            json!({"stream": "stream-a-i", "vips": ["vip-a-1-v4", "vip-a-1-v6"], "sourceSubnets": ["0.0.0.0/0", "0:0:0:0:0:0:0:0/0"], "sourcePorts": ["any"], "destinationPorts": ["4000-4100", "80"], "protocols": ["tcp"], "priority": 1}),
        ),
    ]
}

#[tokio::test]
async fn meridio_samples_are_accepted_and_defaulted() {
    let (client, ns) = setup("td-ok").await;
    for (kind, name, spec) in sample() {
        let trench = (kind != "Trench").then_some("trench-a");
        create(&client, &ns, kind, name, trench, spec)
            .await
            .unwrap_or_else(|e| panic!("{kind}/{name}: {e}"));
    }
    // Meridio's defaults: a stream's maxTargets 100, a gateway's protocol bgp, a
    // trench's IPAM roots.
    let s = api(&client, "Stream", &ns).get("stream-a-i").await.unwrap();
    assert_eq!(s.data["spec"]["maxTargets"], 100);
    let t = api(&client, "Trench", &ns).get("trench-a").await.unwrap();
    assert_eq!(t.data["spec"]["ipam"]["ipv4Root"], "172.16.0.0/16");
    assert_eq!(t.data["spec"]["ipam"]["nodePrefixLengthV6"], 64);
    let g = create(
        &client,
        &ns,
        "Gateway",
        "g-default",
        Some("trench-a"),
        json!({"address": "10.0.0.1", "bgp": {"localAsn": 1, "remoteAsn": 2}}),
    )
    .await
    .unwrap();
    assert_eq!(g.data["spec"]["protocol"], "bgp");
}

#[tokio::test]
async fn immutable_fields_cannot_change() {
    let (client, ns) = setup("td-imm").await;
    for (kind, name, spec) in sample() {
        let trench = (kind != "Trench").then_some("trench-a");
        create(&client, &ns, kind, name, trench, spec)
            .await
            .unwrap();
    }
    let e = patch(
        &client,
        &ns,
        "Trench",
        "trench-a",
        json!({"spec": {"ipFamily": "ipv4"}}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("ipFamily is immutable"), "{e}");
    let e = patch(
        &client,
        &ns,
        "Stream",
        "stream-a-i",
        json!({"spec": {"maxTargets": 5}}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("maxTargets is immutable"), "{e}");
    for change in [
        json!({"vlanId": 101}),
        json!({"link": "eth1"}),
        json!({"ipv4Prefix": "169.254.101.0/24"}),
        json!({"name": "ext2"}),
    ] {
        let e = patch(
            &client,
            &ns,
            "Attractor",
            "attractor-a-1",
            json!({"spec": {"interface": change}}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("immutable"), "{change}: {e}");
    }
    // The MTU may change.
    patch(
        &client,
        &ns,
        "Attractor",
        "attractor-a-1",
        json!({"spec": {"interface": {"mtu": 1400}}}),
    )
    .await
    .unwrap();
    // The trench label may not.
    let e = patch(
        &client,
        &ns,
        "Flow",
        "flow-a-z-tcp",
        json!({"metadata": {"labels": {"trench": "trench-b"}}}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("trench label is immutable"), "{e}");
    let e = patch(
        &client,
        &ns,
        "Flow",
        "flow-a-z-tcp",
        json!({"metadata": {"labels": {"trench": null}}}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("needs the label trench"), "{e}");
}

#[tokio::test]
async fn meridio_webhook_rules_are_schema_rules() {
    let (client, ns) = setup("td-bad").await;
    create(&client, &ns, "Trench", "trench-a", None, json!({}))
        .await
        .unwrap();
    let flow = |patch: Value| {
        let mut f = json!({"stream": "s", "vips": ["v"], "protocols": ["tcp"], "priority": 1});
        for (k, v) in patch.as_object().unwrap() {
            f[k] = v.clone();
        }
        f
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "Flow",
            flow(json!({"protocols": ["tcp", "tcp"]})),
            "Duplicate value",
        ),
        (
            "Flow",
            flow(json!({"protocols": ["icmp"]})),
            "Unsupported value",
        ),
        (
            "Flow",
            flow(json!({"priority": -1})),
            "should be greater than or equal to 0",
        ),
        (
            "Flow",
            flow(json!({"destinationPorts": ["70000"]})),
            "within 0-65535",
        ),
        (
            "Flow",
            flow(json!({"destinationPorts": ["90-80"]})),
            "within 0-65535",
        ),
        (
            "Flow",
            flow(json!({"sourcePorts": ["http"]})),
            "within 0-65535",
        ),
        (
            "Flow",
            flow(json!({"sourceSubnets": ["10.0.0.1/24"]})),
            "without host bits",
        ),
        (
            "Flow",
            flow(json!({"sourceSubnets": ["10.0.0.0/16", "10.0.1.0/24"]})),
            "must not overlap",
        ),
        (
            "Vip",
            json!({"address": "20.0.0.1/24"}),
            "without host bits",
        ),
        ("Vip", json!({"address": "not-an-ip"}), "without host bits"),
        (
            "Gateway",
            json!({"address": "10.0.0.1", "protocol": "static", "bgp": {"localAsn": 1, "remoteAsn": 2}}),
            "must be empty when protocol is static",
        ),
        (
            "Gateway",
            json!({"address": "10.0.0.1", "protocol": "bgp", "bgp": {"localAsn": 1}}),
            "needs spec.bgp.remoteAsn and spec.bgp.localAsn",
        ),
        (
            "Gateway",
            json!({"address": "10.0.0.1", "protocol": "bgp", "bgp": {"localAsn": 1, "remoteAsn": 2, "holdTime": "2s"}}),
            "at least 3s",
        ),
        (
            "Gateway",
            json!({"address": "10.0.0.300", "protocol": "static"}),
            "address is an IP address",
        ),
        (
            "Stream",
            json!({"conduit": "c", "maxTargets": 0}),
            "should be greater than or equal to 1",
        ),
        (
            "Stream",
            json!({"conduit": "c", "maxTargets": 10001}),
            "should be less than or equal to 10000",
        ),
        ("Conduit", json!({"type": "stateful"}), "Unsupported value"),
        (
            "Attractor",
            json!({"interface": {"name": "a-name-longer-than-13", "link": "eth0", "vlanId": 100, "ipv4Prefix": "10.0.0.0/24"}}),
            "may not be more than 13",
        ),
        (
            "Attractor",
            json!({"interface": {"name": "v", "link": "eth0", "vlanId": 4095, "ipv4Prefix": "10.0.0.0/24"}}),
            "less than or equal to 4094",
        ),
        (
            "Attractor",
            json!({"interface": {"name": "v", "link": "eth0", "vlanId": 100}}),
            "needs ipv4Prefix or ipv6Prefix",
        ),
        (
            "Attractor",
            json!({"interface": {"name": "v", "link": "eth0", "vlanId": 100, "ipv4Prefix": "10.0.0.1/24"}}),
            "without host bits",
        ),
        (
            "Attractor",
            json!({"interface": {"name": "v", "link": "eth0", "vlanId": 100, "ipv4Prefix": "10.0.0.0/24"}, "composites": ["a", "b"]}),
            "must have at most 1 item",
        ),
        ("Trench", json!({"ipFamily": "ipv5"}), "Unsupported value"),
    ];
    for (i, (kind, spec, needle)) in cases.into_iter().enumerate() {
        let name = format!("bad-{i}");
        let trench = (kind != "Trench").then_some("trench-a");
        refused(
            create(&client, &ns, kind, &name, trench, spec.clone()).await,
            needle,
        );
    }
    // A child without the trench label.
    refused(
        create(
            &client,
            &ns,
            "Vip",
            "no-label",
            None,
            json!({"address": "20.0.0.1/32"}),
        )
        .await,
        "needs the label trench",
    );
}
