//! Secrets never leak (docs/reliability.md): every job that reads a secret runs with one
//! set — a Hetzner cloud token (routed IPs), a guest cluster's kubeconfig with its client
//! key (floating IPs published into a guest), and a token that the provider refuses (so
//! that error paths log too) — with the operator at `RUST_LOG=debug`, and then no byte
//! sequence of a secret (the token, the key, the certificate, in PEM and base64) appears
//! in any log line, Event, status or metric.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use netpolicy_operator::api::crds;
use netpolicy_testenv::{cloud, eventually};
use serde_json::json;

/// Every secret value the jobs read, in each form it could leak in.
fn secret_forms(token: &str, kubeconfig: &str) -> Vec<(String, String)> {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut out = vec![
        ("the cloud token".to_owned(), token.to_owned()),
        ("the cloud token (base64)".to_owned(), b64(token)),
    ];
    for line in kubeconfig.lines() {
        for field in ["client-key-data:", "client-certificate-data:"] {
            if let Some(v) = line.trim().strip_prefix(field) {
                let v = v.trim().to_owned();
                out.push((
                    format!("the guest kubeconfig's {field} (base64)"),
                    v.clone(),
                ));
                let pem = base64::engine::general_purpose::STANDARD
                    .decode(&v)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                // Each line of the PEM body: a leak of part of the key shows too.
                for body in pem
                    .lines()
                    .filter(|l| !l.starts_with("-----") && l.len() >= 32)
                {
                    out.push((
                        format!("a line of the guest kubeconfig's {field}"),
                        body.to_owned(),
                    ));
                }
            }
        }
    }
    out.push(("the guest kubeconfig".to_owned(), kubeconfig.to_owned()));
    out
}

fn find(forms: &[(String, String)], what: &str, text: &str) -> Vec<String> {
    forms
        .iter()
        .filter(|(_, v)| !v.is_empty() && text.contains(v.as_str()))
        .map(|(name, _)| format!("{name} in {what}"))
        .collect()
}

async fn everything_written(client: &Client) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let events = Api::<k8s_openapi::api::events::v1::Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    for e in events.items {
        out.push((
            format!("Event {}", e.name_any()),
            serde_json::to_string(&e).unwrap(),
        ));
    }
    for crd in crds() {
        let names = &crd.spec.names;
        for v in &crd.spec.versions {
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(&crd.spec.group, &v.name, &names.kind),
                &names.plural,
            );
            let Ok(list) = Api::<DynamicObject>::all_with(client.clone(), &ar)
                .list(&ListParams::default())
                .await
            else {
                continue;
            };
            for o in list.items {
                out.push((
                    format!("{} {} status", names.kind, o.name_any()),
                    serde_json::to_string(&o.data["status"]).unwrap(),
                ));
            }
        }
    }
    out
}

/// The ConfigMaps netpolicy writes (kube-vip's), in the cluster `client` reaches: the
/// API server's own (its client CA bundle) are not netpolicy's to judge.
async fn kube_vip_config_maps(client: &Client, cluster: &str) -> Vec<(String, String)> {
    Api::<k8s_openapi::api::core::v1::ConfigMap>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|cm| cm.name_any() == "kubevip")
        .map(|cm| {
            (
                format!(
                    "{cluster} ConfigMap {}/kubevip",
                    cm.namespace().unwrap_or_default()
                ),
                serde_json::to_string(&cm.data).unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn no_token_key_or_kubeconfig_byte_reaches_a_log_an_event_a_status_or_a_metric() {
    let cp = netpolicy_testenv::dedicated();
    let guest_cp = netpolicy_testenv::second();
    let client = cp.client().await;
    drop(guest_cp.client().await);
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("secrets").await;
    let apps = cp.namespace("apps").await;
    for n in ["edge-a", "edge-b"] {
        common::ready_node(
            &Api::<Node>::all(client.clone()),
            n,
            json!({"role": "edge"}),
        )
        .await;
    }
    // Routed IPs: a Hetzner issuer with its token, and a second one whose token the
    // provider refuses (401: an error path that logs).
    let _state = common::hetzner_issuer(
        &client,
        "127.0.0.1",
        &system,
        &["edge-a", "edge-b"],
        json!({}),
    )
    .await;
    common::apply(
        &client,
        json!({"apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIP",
               "metadata": {"name": "ingress"},
               "spec": {"issuerRef": {"name": "hcloud"},
                        "nodeSelector": {"matchLabels": {"role": "edge"}}}}),
    )
    .await;
    // Floating IPs published into a guest cluster through its kubeconfig Secret.
    let kubeconfig = std::fs::read_to_string(&guest_cp.kubeconfig).unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &apps)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "guest-kubeconfig"},
                                           "stringData": {"value": kubeconfig}}))
            .unwrap(),
        )
        .await
        .unwrap();
    common::apply(
        &client,
        json!({"apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
               "metadata": {"name": "guest"},
               "spec": {"cidrs": ["10.80.0.0/28"],
                        "kubeVip": {"publish": true,
                                    "guestKubeconfigSecret": {"name": "guest-kubeconfig"}}}}),
    )
    .await;
    common::apply(
        &client,
        json!({"apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
               "metadata": {"name": "vip", "namespace": apps}, "spec": {"range": "guest"}}),
    )
    .await;

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = cp.dir.join("secrets-operator.log");
    let listen = format!("127.0.0.1:{port}");
    let _op = common::operator_with(cp, &system, &log, "debug", &["--listen", &listen]);
    // The jobs did their work with the secrets: the routed IP assigned, the guest's
    // ConfigMap written.
    let guest = guest_cp.client().await;
    eventually(
        "the guest's kube-vip ConfigMap holds the address",
        60,
        || async {
            Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(guest.clone(), "kube-system")
                .get_opt("kubevip")
                .await
                .ok()
                .flatten()
                .and_then(|c| c.data)
                .is_some_and(|d| d.contains_key("cidr-global"))
        },
    )
    .await;
    let rips = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("netpolicy.io", "v1alpha1", "RoutedIP"),
        "routedips",
    );
    eventually("the RoutedIP has its address", 60, || async {
        Api::<DynamicObject>::all_with(client.clone(), &rips)
            .get("ingress")
            .await
            .is_ok_and(|o| o.data["status"]["address"].is_string())
    })
    .await;
    // An error path: the token Secret replaced by one the provider refuses, the issuer
    // checked again.
    common::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "hcloud", "namespace": system},
               "stringData": {"token": "refused-token-refused-token-refused-token-00000"}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;

    let mut forms = secret_forms(cloud::hetzner::TOKEN, &kubeconfig);
    forms.push((
        "the refused token".into(),
        "refused-token-refused-token-refused-token-00000".into(),
    ));
    let mut leaks = Vec::new();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().count() > 50,
        "the debug log is nearly empty:\n{text}"
    );
    leaks.extend(find(&forms, "the operator's log", &text));
    let (_, metrics) = common::http_get(port, "/metrics").unwrap();
    leaks.extend(find(&forms, "/metrics", &metrics));
    let mut written = everything_written(&client).await;
    written.extend(kube_vip_config_maps(&client, "the operator's cluster").await);
    written.extend(kube_vip_config_maps(&guest, "the guest cluster").await);
    assert!(
        written
            .iter()
            .any(|(w, _)| w.starts_with("the guest cluster")),
        "nothing written in the guest: the test would prove nothing there"
    );
    for (what, text) in &written {
        leaks.extend(find(&forms, what, text));
    }
    println!(
        "secrets: {} forms of 3 secrets searched in {} log lines, {} bytes of metrics and {} \
         Events, statuses and ConfigMaps: {} found",
        forms.len(),
        text.lines().count(),
        metrics.len(),
        written.len(),
        leaks.len()
    );
    assert!(leaks.is_empty(), "secrets leaked: {leaks:#?}");
}
