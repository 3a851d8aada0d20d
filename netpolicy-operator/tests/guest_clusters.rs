//! Guest clusters, kube-fip's job, against real API servers: Rancher's Cluster CRD in
//! the management cluster, two guests that are API servers of their own, and a guest
//! that is down. Each `c-m-…` namespace gets a FloatingIP (autoAllocate), its guest is
//! found through its Rancher Cluster, kube-vip and kube-vip-cloud-provider are
//! installed where the install mode says, the guest's ConfigMap holds the address and
//! is repaired when edited, a guest that is down says why without holding up the
//! others, and quiet intervals write nothing anywhere.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::{DaemonSet, Deployment},
        core::v1::{ConfigMap, Namespace, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use netpolicy_operator::api::{FloatingIP, FloatingIPRange, crds};
use netpolicy_testenv::eventually;
use serde_json::json;

/// One operator at a time: each serves every range of the shared API server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

use common::{clusters_api, rancher_cluster, rancher_crd};

async fn kube_vip_data(client: &Client) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .get_opt("kubevip")
        .await
        .unwrap()
        .and_then(|c| c.data)
        .unwrap_or_default()
}

/// (status, reason, message) of a FloatingIP's condition `type_`.
async fn condition(client: &Client, ns: &str, type_: &str) -> Option<(String, String, String)> {
    let f = Api::<FloatingIP>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .next()?;
    let c = f
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status, c.reason, c.message))
}

async fn address(client: &Client, ns: &str) -> Option<String> {
    Api::<FloatingIP>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .next()?
        .status?
        .address
}

fn metric(port: u16, line_start: &str) -> Option<f64> {
    let (_, body) = common::http_get(port, "/metrics")?;
    body.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

/// Writes to `resources` in a guest's API server so far.
fn guest_writes(cp: &netpolicy_testenv::ControlPlane, resources: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for r in resources {
        for w in cp.writes_where(r, |_| true) {
            out.push(format!(
                "{} {}/{} {}",
                w.verb, w.resource, w.subresource, w.name
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn rancher_guests_get_kube_vip_and_their_address_and_a_down_guest_holds_up_no_other() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let (guest_a_cp, guest_b_cp) = (netpolicy_testenv::second(), netpolicy_testenv::third());
    let client = cp.client().await;
    let (guest_a, guest_b) = (guest_a_cp.client().await, guest_b_cp.client().await);
    netpolicy_testenv::install_crds(&client, crds()).await;
    netpolicy_testenv::install_crds(&client, vec![rancher_crd()]).await;
    let system = cp.namespace("guests-system").await;
    let fleet = cp.namespace("fleet-default").await;
    // Rancher's guest namespaces: c-m-<id>. A unique prefix keeps other tests' out.
    let prefix = cp.unique("c-m-g");
    let ns = |s: &str| format!("{prefix}-{s}");
    for s in ["a", "b", "c"] {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns(s)}})).unwrap(),
            )
            .await
            .unwrap();
    }
    let kubeconfig_a = std::fs::read_to_string(&guest_a_cp.kubeconfig).unwrap();
    let kubeconfig_b = std::fs::read_to_string(&guest_b_cp.kubeconfig).unwrap();
    // Guest c's API server is gone: a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kubeconfig_c = kubeconfig_a.replace(
        guest_a_cp.server.as_str(),
        &format!("https://127.0.0.1:{closed}"),
    );
    assert_ne!(kubeconfig_c, kubeconfig_a);
    let (a, b, c) = (
        cp.unique("guest-a"),
        cp.unique("guest-b"),
        cp.unique("guest-c"),
    );
    rancher_cluster(
        &client,
        &fleet,
        &a,
        &ns("a"),
        json!({"kube-vip": "true"}),
        &kubeconfig_a,
    )
    .await;
    rancher_cluster(&client, &fleet, &b, &ns("b"), json!({}), &kubeconfig_b).await;
    rancher_cluster(
        &client,
        &fleet,
        &c,
        &ns("c"),
        json!({"kube-vip": "true"}),
        &kubeconfig_c,
    )
    .await;
    let range = cp.unique("guests");
    let r: FloatingIPRange = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
        "metadata": {"name": range},
        "spec": {"cidrs": ["10.83.0.0/28"],
                 "autoAllocate": {"namespaceNamePrefix": prefix},
                 "kubeVip": {"publish": true,
                             "guests": {"discovery": "rancher", "install": "clusterLabel",
                                        "intervalSeconds": 10,
                                        "kubeVip": {"interface": "eth0"},
                                        "cloudProvider": {"image": "registry.example/kvcp:v0.0.12"}}}}
    }))
    .unwrap();
    Api::<FloatingIPRange>::all(client.clone())
        .create(&PostParams::default(), &r)
        .await
        .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = cp.dir.join(format!("operator-{range}.log"));
    let listen = format!("127.0.0.1:{port}");
    let _op = common::operator_with(
        cp,
        &system,
        &log,
        "info,netpolicy_operator::floating_ip=debug",
        &[
            "--listen",
            &listen,
            "--rancher-clusters",
            "--trace-ipam-data",
        ],
    );
    let why = || std::fs::read_to_string(&log).unwrap_or_default();

    // Guest a (labelled kube-vip=true): kube-vip installed, its address published.
    eventually("guest a holds its address as cidr-global", 60, || async {
        let want = address(&client, &ns("a")).await.map(|a| format!("{a}/32"));
        want.is_some() && kube_vip_data(&guest_a).await.get("cidr-global") == want.as_ref()
    })
    .await;
    let ds = Api::<DaemonSet>::namespaced(guest_a.clone(), "kube-system")
        .get("kube-vip-ds")
        .await
        .unwrap();
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("ghcr.io/kube-vip/kube-vip:v1.0.2")
    );
    let env: BTreeMap<String, String> = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    assert_eq!(env.get("vip_interface").map(String::as_str), Some("eth0"));
    assert_eq!(env.get("vip_arp").map(String::as_str), Some("true"));
    assert_eq!(env.get("svc_enable").map(String::as_str), Some("true"));
    assert_eq!(pod.service_account_name.as_deref(), Some("kube-vip"));
    let provider = Api::<Deployment>::namespaced(guest_a.clone(), "kube-system")
        .get("kube-vip-cloud-provider")
        .await
        .unwrap();
    assert_eq!(
        provider.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("registry.example/kvcp:v0.0.12")
    );
    eventually(
        "guest a's FloatingIP says Installed and Published",
        30,
        || async {
            condition(&client, &ns("a"), "Installed")
                .await
                .map(|c| (c.0, c.1))
                == Some(("True".into(), "Installed".into()))
                && condition(&client, &ns("a"), "Published").await.map(|c| c.0)
                    == Some("True".into())
        },
    )
    .await;

    // --trace-ipam-data (kube-fip's traceIpamData): each pass's allocations in the log.
    let held = address(&client, &ns("a")).await.unwrap();
    assert!(
        why()
            .lines()
            .any(|l| l.contains("ipam") && l.contains("held") && l.contains(&held)),
        "{}",
        why()
    );

    // Guest b (not labelled): published, nothing installed.
    eventually("guest b holds its address", 60, || async {
        let want = address(&client, &ns("b")).await.map(|a| format!("{a}/32"));
        want.is_some() && kube_vip_data(&guest_b).await.get("cidr-global") == want.as_ref()
    })
    .await;
    assert!(
        Api::<DaemonSet>::namespaced(guest_b.clone(), "kube-system")
            .get_opt("kube-vip-ds")
            .await
            .unwrap()
            .is_none(),
        "clusterLabel installed kube-vip in an unlabelled guest"
    );
    assert_eq!(condition(&client, &ns("b"), "Installed").await, None);

    // Guest c is down: it says so, and its up-metric is 0 while the others are 1.
    eventually(
        "guest c's FloatingIP says it is unreachable",
        60,
        || async {
            condition(&client, &ns("c"), "Installed")
                .await
                .map(|c| (c.0, c.1))
                == Some(("False".into(), "GuestUnreachable".into()))
                && condition(&client, &ns("c"), "Published").await.map(|c| c.1)
                    == Some("GuestUnreachable".into())
        },
    )
    .await;
    let fip_name = format!("auto-{range}");
    eventually(
        "guest c's FloatingIP has a Warning Event saying why",
        30,
        || async {
            !common::events_about(
                &client,
                Some(&ns("c")),
                "GuestUnreachable",
                "FloatingIP",
                &fip_name,
            )
            .await
            .is_empty()
        },
    )
    .await;
    eventually("the up-metric says which guest is down", 30, || async {
        metric(
            port,
            &format!("netpolicy_guestcluster_up{{cluster=\"{c}\"}}"),
        ) == Some(0.0)
            && metric(
                port,
                &format!("netpolicy_guestcluster_up{{cluster=\"{a}\"}}"),
            ) == Some(1.0)
            && metric(
                port,
                &format!("netpolicy_guestcluster_up{{cluster=\"{b}\"}}"),
            ) == Some(1.0)
    })
    .await;
    assert!(
        metric(
            port,
            &format!(
                "netpolicy_guestcluster_events_total{{cluster=\"{a}\",kind=\"kubevip_install\"}}"
            )
        )
        .is_some_and(|n| n >= 1.0),
        "{}",
        common::http_get(port, "/metrics").unwrap().1
    );

    // Quiet: two intervals later, nothing was written in either guest (reads only),
    // and no FloatingIP status changed.
    let kinds = [
        "configmaps",
        "daemonsets",
        "deployments",
        "serviceaccounts",
        "clusterroles",
        "clusterrolebindings",
    ];
    let (before_a, before_b) = (
        guest_writes(guest_a_cp, &kinds),
        guest_writes(guest_b_cp, &kinds),
    );
    let statuses = cp.writes_where("floatingips", |_| true).len();
    tokio::time::sleep(Duration::from_secs(22)).await;
    assert_eq!(guest_writes(guest_a_cp, &kinds), before_a, "{}", why());
    assert_eq!(guest_writes(guest_b_cp, &kinds), before_b, "{}", why());
    assert_eq!(
        cp.writes_where("floatingips", |_| true).len(),
        statuses,
        "{}",
        why()
    );

    // Someone edits guest a's ConfigMap: our key goes, theirs is added. Within the
    // interval ours is back and theirs stays.
    let cms = Api::<ConfigMap>::namespaced(guest_a.clone(), "kube-system");
    let mut cm = cms.get("kubevip").await.unwrap();
    let ours = cm.data.as_ref().unwrap()["cidr-global"].clone();
    let data = cm.data.get_or_insert_default();
    data.remove("cidr-global");
    data.insert("range-global".into(), "192.0.2.10-192.0.2.20".into());
    cms.replace("kubevip", &PostParams::default(), &cm)
        .await
        .unwrap();
    eventually(
        "the edited ConfigMap is repaired within the interval",
        25,
        || async {
            let d = kube_vip_data(&guest_a).await;
            d.get("cidr-global") == Some(&ours) && d.contains_key("range-global")
        },
    )
    .await;
    // A deleted kube-vip DaemonSet is put back too.
    Api::<DaemonSet>::namespaced(guest_a.clone(), "kube-system")
        .delete("kube-vip-ds", &Default::default())
        .await
        .unwrap();
    eventually("the deleted DaemonSet is put back", 25, || async {
        Api::<DaemonSet>::namespaced(guest_a.clone(), "kube-system")
            .get_opt("kube-vip-ds")
            .await
            .unwrap()
            .is_some()
    })
    .await;

    // Without `update` a changed rendering is not applied over what is there; with it,
    // it is.
    let image = |client: Client| async move {
        Api::<DaemonSet>::namespaced(client, "kube-system")
            .get("kube-vip-ds")
            .await
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers[0]
            .image
            .clone()
    };
    let ranges = Api::<FloatingIPRange>::all(client.clone());
    let set = |update: bool| {
        json!({"spec": {"kubeVip": {"guests": {"update": update,
            "kubeVip": {"interface": "eth0", "image": "registry.example/kube-vip:v1.0.3"}}}}})
    };
    ranges
        .patch(&range, &PatchParams::default(), &Patch::Merge(set(false)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(
        image(guest_a.clone()).await.as_deref(),
        Some("ghcr.io/kube-vip/kube-vip:v1.0.2"),
        "{}",
        why()
    );
    ranges
        .patch(&range, &PatchParams::default(), &Patch::Merge(set(true)))
        .await
        .unwrap();
    eventually("update: true applies the new rendering", 25, || async {
        image(guest_a.clone()).await.as_deref() == Some("registry.example/kube-vip:v1.0.3")
    })
    .await;
    // The unlabelled guest still has nothing installed.
    assert!(
        Api::<DaemonSet>::namespaced(guest_b.clone(), "kube-system")
            .get_opt("kube-vip-ds")
            .await
            .unwrap()
            .is_none()
    );
}

fn harvester_crds() -> Vec<CustomResourceDefinition> {
    include_str!("data/rancher/harvester.yaml")
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect()
}

/// kube-fip's Harvester ranges: a guest provisioned on a Harvester cluster and network
/// is served by the range naming them (read from its cloud credential and machine
/// pool), not by another range of that cluster; a guest not on Harvester by neither.
#[tokio::test(flavor = "multi_thread")]
async fn a_harvester_guest_gets_its_address_from_the_range_of_its_cluster_and_network() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let mut extra = vec![rancher_crd()];
    extra.extend(harvester_crds());
    netpolicy_testenv::install_crds(&client, extra).await;
    let system = cp.namespace("hv-system").await;
    let fleet = cp.namespace("hv-fleet").await;
    let global = cp.namespace("cattle-global-data").await;
    let prefix = cp.unique("c-m-hv");
    let ns = |s: &str| format!("{prefix}-{s}");
    for s in ["on", "off"] {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns(s)}})).unwrap(),
            )
            .await
            .unwrap();
    }
    // Rancher's view of a Harvester cluster: an imported management Cluster, the cloud
    // credential pointing at it, the machine pool's HarvesterConfig on network net2.
    let hv = cp.unique("hv");
    let mgmt_id = cp.unique("c-hv");
    let dynamic = |group: &str, version: &str, kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    };
    Api::<DynamicObject>::all_with(
        client.clone(),
        &dynamic("management.cattle.io", "v3", "Cluster", "clusters"),
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"apiVersion": "management.cattle.io/v3", "kind": "Cluster",
            "metadata": {"name": mgmt_id}, "spec": {"displayName": hv}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &global)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "cc-hv"},
                "stringData": {"harvestercredentialConfig-clusterId": mgmt_id}}))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &fleet,
        &dynamic(
            "rke-machine-config.cattle.io",
            "v1",
            "HarvesterConfig",
            "harvesterconfigs",
        ),
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "rke-machine-config.cattle.io/v1",
            "kind": "HarvesterConfig", "metadata": {"name": "nc-pool1"},
            "networkInfo": "{\"interfaces\":[{\"networkName\":\"default/net2\"}]}"}))
        .unwrap(),
    )
    .await
    .unwrap();
    let clusters = clusters_api(&client, &fleet);
    for (name, c_m, on_harvester) in [("on-hv", ns("on"), true), ("off-hv", ns("off"), false)] {
        let mut spec = json!({"kubernetesVersion": "v1.34.4+rke2r1"});
        if on_harvester {
            spec["cloudCredentialSecretName"] = json!(format!("{global}:cc-hv"));
            spec["rkeConfig"] = json!({"machinePools": [{"name": "pool1",
                "machineConfigRef": {"kind": "HarvesterConfig", "name": "nc-pool1"}}]});
        }
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "provisioning.cattle.io/v1", "kind": "Cluster",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        clusters.create(&PostParams::default(), &o).await.unwrap();
        clusters
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"clusterName": c_m}})),
            )
            .await
            .unwrap();
    }
    let range = |name: &str, cidr: &str, network: &str| -> FloatingIPRange {
        serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
            "metadata": {"name": name},
            "spec": {"cidrs": [cidr], "autoAllocate": {"namespaceNamePrefix": prefix},
                     "harvester": {"cluster": hv, "network": network}}
        }))
        .unwrap()
    };
    let (net1, net2) = (cp.unique("hv-net1"), cp.unique("hv-net2"));
    for r in [
        range(&net1, "10.84.1.0/28", "net1"),
        range(&net2, "10.84.2.0/28", "net2"),
    ] {
        Api::<FloatingIPRange>::all(client.clone())
            .create(&PostParams::default(), &r)
            .await
            .unwrap();
    }
    let log = cp.dir.join(format!("operator-{net1}.log"));
    let _op = common::operator_with(
        cp,
        &system,
        &log,
        "info,netpolicy_operator::floating_ip=debug",
        &["--rancher-clusters"],
    );
    let why = || std::fs::read_to_string(&log).unwrap_or_default();
    let ranges_of = |ns: String| {
        let client = client.clone();
        async move {
            Api::<FloatingIP>::namespaced(client, &ns)
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|f| (f.spec.range, f.status.and_then(|s| s.address)))
                .collect::<Vec<_>>()
        }
    };
    eventually(
        "the Harvester guest gets an address from its network's range",
        60,
        || async {
            let got = ranges_of(ns("on")).await;
            got.len() == 1
                && got[0].0 == net2
                && got[0]
                    .1
                    .as_deref()
                    .is_some_and(|a| a.starts_with("10.84.2."))
        },
    )
    .await;
    // Several passes later: no second FloatingIP, and none for the guest not on Harvester.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(ranges_of(ns("on")).await.len(), 1, "{}", why());
    assert!(ranges_of(ns("off")).await.is_empty(), "{}", why());
}
