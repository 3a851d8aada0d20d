//! Guest clusters (kube-fip's job), the pure half: which guest a FloatingIP belongs to,
//! and what netpolicy installs there.
//!
//! - **Discovery** `rancher`: a FloatingIP in namespace `c-m-…` belongs to the Rancher
//!   `provisioning.cattle.io/v1` Cluster whose `status.clusterName` is that namespace;
//!   the guest's kubeconfig is the Secret `<cluster>-kubeconfig` (key `value`) in the
//!   Cluster's namespace (Rancher writes it there, usually `fleet-default`).
//!   `secret`: `guestKubeconfigSecret` in the FloatingIP's namespace.
//! - **Install**: kube-vip (RBAC and the DaemonSet `kube-vip-ds`, services mode, leader
//!   election, ARP on the configured interface) and kube-vip-cloud-provider (RBAC and the
//!   Deployment `kube-vip-cloud-provider`), in the namespace of the range's kube-vip
//!   ConfigMap (`kubeVip.namespace`, default `kube-system`; created when missing), as
//!   kube-fip installs both charts into its `kubevipNamespace`. The provider is told
//!   where that ConfigMap is (`KUBEVIP_NAMESPACE`, `KUBEVIP_CONFIG_MAP`: it reads
//!   `kube-system/kubevip` otherwise). The manifests are data in this crate
//!   (`guest/*.yaml`), following kube-vip v1.0.2 and kube-vip-cloud-provider v0.0.12;
//!   the images default to those versions.

use std::collections::BTreeMap;

use netpolicy_api::{GuestClusters, GuestInstall};
use serde_json::{Value, json};

/// kube-vip's image when the range names none.
pub(crate) const KUBE_VIP_IMAGE: &str = "ghcr.io/kube-vip/kube-vip:v1.0.2";
/// kube-vip-cloud-provider's image when the range names none.
pub(crate) const CLOUD_PROVIDER_IMAGE: &str = "ghcr.io/kube-vip/kube-vip-cloud-provider:v0.0.12";
/// The label that opts a Rancher Cluster in under `install: clusterLabel`.
pub(crate) const INSTALL_LABEL: &str = "kube-vip";

const KUBE_VIP: &str = include_str!("guest/kube-vip.yaml");
const CLOUD_PROVIDER: &str = include_str!("guest/kube-vip-cloud-provider.yaml");

/// A Rancher cluster as discovery reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RancherCluster {
    /// The Cluster's namespace (where its kubeconfig Secret is).
    pub(crate) namespace: String,
    /// The Cluster's name.
    pub(crate) name: String,
    /// `status.clusterName`: the `c-m-…` namespace of its FloatingIPs.
    pub(crate) cluster_name: String,
    /// Its labels.
    pub(crate) labels: BTreeMap<String, String>,
    /// `status.clientSecretName` (Rancher 2.9+): the kubeconfig Secret's name.
    pub(crate) client_secret_name: Option<String>,
    /// The Harvester cluster and network it was provisioned on, once resolved (the
    /// controller reads them from its cloud credential and machine pool).
    pub(crate) harvester: Option<Harvester>,
}

/// Where a Rancher guest runs on Harvester.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Harvester {
    /// The Harvester cluster's display name in Rancher.
    pub(crate) cluster: String,
    /// The network of its (first Harvester) machine pool, `<namespace>/<name>`.
    pub(crate) network: Option<String>,
}

/// Whether range network `want` names network `have` (`<namespace>/<name>`, or `<name>`
/// alone as kube-fip's annotations give it).
fn same_network(want: &str, have: &str) -> bool {
    want == have || have.rsplit_once('/').is_some_and(|(_, n)| n == want)
}

/// The range that serves each Rancher guest namespace by Harvester (kube-fip's rule):
/// among the ranges naming the guest's Harvester cluster, the first (by name) naming
/// its network; else the first naming no network; else the first of that cluster.
pub(crate) fn harvester_ranges(
    ranges: &[&netpolicy_api::FloatingIPRange],
    clusters: &[RancherCluster],
) -> BTreeMap<String, String> {
    let mut named: Vec<(&str, &netpolicy_api::HarvesterSelector)> = ranges
        .iter()
        .filter_map(|r| Some((r.metadata.name.as_deref()?, r.spec.harvester.as_ref()?)))
        .collect();
    named.sort_by_key(|(n, _)| *n);
    let mut out = BTreeMap::new();
    for c in clusters {
        let Some(h) = &c.harvester else { continue };
        let of_cluster: Vec<&(&str, &netpolicy_api::HarvesterSelector)> = named
            .iter()
            .filter(|(_, s)| s.cluster == h.cluster)
            .collect();
        let by_network = h.network.as_deref().and_then(|net| {
            of_cluster
                .iter()
                .find(|(_, s)| s.network.as_deref().is_some_and(|w| same_network(w, net)))
        });
        let pick = by_network
            .or_else(|| of_cluster.iter().find(|(_, s)| s.network.is_none()))
            .or_else(|| of_cluster.first());
        if let Some((range, _)) = pick {
            out.insert(c.cluster_name.clone(), (*range).to_owned());
        }
    }
    out
}

impl RancherCluster {
    /// From a `provisioning.cattle.io/v1` Cluster; `None` until Rancher set its
    /// `status.clusterName`.
    pub(crate) fn from_object(o: &kube::core::DynamicObject) -> Option<Self> {
        let cluster_name = o.data["status"]["clusterName"].as_str()?.to_owned();
        Some(Self {
            namespace: o.metadata.namespace.clone().unwrap_or_default(),
            name: o.metadata.name.clone().unwrap_or_default(),
            cluster_name,
            labels: o.metadata.labels.clone().unwrap_or_default(),
            client_secret_name: o.data["status"]["clientSecretName"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            harvester: None,
        })
    }

    /// `spec.cloudCredentialSecretName` (`<namespace>:<name>`) as (namespace, name).
    pub(crate) fn cloud_credential(o: &kube::core::DynamicObject) -> Option<(String, String)> {
        let (ns, name) = o.data["spec"]["cloudCredentialSecretName"]
            .as_str()?
            .split_once(':')?;
        Some((ns.to_owned(), name.to_owned()))
    }

    /// The `HarvesterConfig` of its first Harvester machine pool.
    pub(crate) fn harvester_config(o: &kube::core::DynamicObject) -> Option<String> {
        o.data["spec"]["rkeConfig"]["machinePools"]
            .as_array()?
            .iter()
            .find(|p| p["machineConfigRef"]["kind"] == "HarvesterConfig")?["machineConfigRef"]["name"]
            .as_str()
            .map(str::to_owned)
    }

    /// `<namespace>/<secret>`: the Secret Rancher keeps the guest's kubeconfig in —
    /// `status.clientSecretName` when Rancher set it, else `<cluster>-kubeconfig`.
    pub(crate) fn kubeconfig_secret(&self) -> String {
        match &self.client_secret_name {
            Some(s) => format!("{}/{s}", self.namespace),
            None => format!("{}/{}-kubeconfig", self.namespace, self.name),
        }
    }

    /// Whether `install` asks for kube-vip in this guest.
    pub(crate) fn wants_install(&self, install: GuestInstall) -> bool {
        match install {
            GuestInstall::Disabled => false,
            GuestInstall::Enabled => true,
            GuestInstall::ClusterLabel => self
                .labels
                .get(INSTALL_LABEL)
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        }
    }
}

/// The objects installed in a guest, in apply order (the namespace, accounts and roles
/// before the workloads that use them), in `namespace` beside the kube-vip ConfigMap
/// `config_map` that the cloud provider is told to read. Each is a whole object for
/// server-side apply.
///
/// # Errors
/// A manifest of this crate that does not parse (a defect: tested).
pub(crate) fn install_objects(
    g: &GuestClusters,
    namespace: &str,
    config_map: &str,
) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    if namespace != "kube-system" {
        let mut ns =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        render(&mut ns, g, namespace, config_map);
        out.push(ns);
    }
    for (file, text) in [
        ("kube-vip.yaml", KUBE_VIP),
        ("kube-vip-cloud-provider.yaml", CLOUD_PROVIDER),
    ] {
        for doc in text.split("\n---\n") {
            let mut o: Value = serde_saphyr::from_str(doc).map_err(|e| format!("{file}: {e}"))?;
            render(&mut o, g, namespace, config_map);
            out.push(o);
        }
    }
    Ok(out)
}

/// Fills in what the range sets.
fn render(o: &mut Value, g: &GuestClusters, namespace: &str, config_map: &str) {
    let kind = o["kind"].as_str().unwrap_or_default().to_owned();
    if o["metadata"]["namespace"].is_string() {
        o["metadata"]["namespace"] = json!(namespace);
    }
    match kind.as_str() {
        "ClusterRoleBinding" => {
            if let Some(subjects) = o["subjects"].as_array_mut() {
                for s in subjects {
                    s["namespace"] = json!(namespace);
                }
            }
        }
        "DaemonSet" => {
            let pod = &mut o["spec"]["template"]["spec"];
            let kv = &g.kube_vip;
            if !kv.node_selector.is_empty() {
                pod["nodeSelector"] = json!(kv.node_selector);
            }
            let c = &mut pod["containers"][0];
            c["image"] = json!(kv.image.as_deref().unwrap_or(KUBE_VIP_IMAGE));
            if let Some(env) = c["env"].as_array_mut() {
                for e in env.iter_mut() {
                    if e["name"] == "vip_arp" {
                        e["value"] = json!(kv.arp.unwrap_or(true).to_string());
                    }
                }
                if let Some(i) = kv.interface.as_deref().filter(|i| !i.is_empty()) {
                    env.insert(1, json!({"name": "vip_interface", "value": i}));
                }
            }
        }
        "Deployment" => {
            let c = &mut o["spec"]["template"]["spec"]["containers"][0];
            c["image"] = json!(
                g.cloud_provider
                    .image
                    .as_deref()
                    .unwrap_or(CLOUD_PROVIDER_IMAGE)
            );
            c["env"] = json!([
                {"name": "KUBEVIP_NAMESPACE", "value": namespace},
                {"name": "KUBEVIP_CONFIG_MAP", "value": config_map},
            ]);
        }
        _ => {}
    }
    o["metadata"]["labels"][crate::trench::meridio::MANAGED_BY.0] =
        json!(crate::trench::meridio::MANAGED_BY.1);
}

/// `Kind/namespace/name` of an object (namespace empty for cluster-scoped ones).
pub(crate) fn key_of(o: &Value) -> String {
    format!(
        "{}/{}/{}",
        o["kind"].as_str().unwrap_or_default(),
        o["metadata"]["namespace"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The network a `HarvesterConfig` (`rke-machine-config.cattle.io/v1`) puts its
/// machines on: `networkName`, or (Rancher 2.7.3+) the first interface of `networkInfo`.
pub(crate) fn harvester_network(config: &Value) -> Option<String> {
    if let Some(n) = config["networkName"].as_str().filter(|n| !n.is_empty()) {
        return Some(n.to_owned());
    }
    let info: Value = serde_json::from_str(config["networkInfo"].as_str()?).ok()?;
    info["interfaces"][0]["networkName"]
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_harvester_guest_is_served_by_the_range_of_its_cluster_and_network() {
        let range = |name: &str,
                     cluster: &str,
                     network: Option<&str>|
         -> netpolicy_api::FloatingIPRange {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"cidrs": ["10.0.0.0/24"], "harvester": {"cluster": cluster, "network": network}}
            }))
            .unwrap()
        };
        let guest = |ns: &str, cluster: &str, network: Option<&str>| RancherCluster {
            namespace: "fleet-default".into(),
            name: ns.into(),
            cluster_name: ns.into(),
            labels: BTreeMap::new(),
            client_secret_name: None,
            harvester: Some(Harvester {
                cluster: cluster.into(),
                network: network.map(Into::into),
            }),
        };
        let (a, b, c, d) = (
            range("a-net1", "hv1", Some("net1")),
            range("b-net2", "hv1", Some("default/net2")),
            range("c-any", "hv2", None),
            range("d-other", "hv3", Some("x")),
        );
        let ranges = [&a, &b, &c, &d];
        let got = harvester_ranges(
            &ranges,
            &[
                guest("c-m-1", "hv1", Some("default/net1")),
                guest("c-m-2", "hv1", Some("default/net2")),
                guest("c-m-3", "hv1", None),
                guest("c-m-4", "hv2", Some("default/net9")),
                guest("c-m-5", "hv3", Some("default/y")),
                guest("c-m-6", "hv9", None),
            ],
        );
        let want: BTreeMap<String, String> = [
            ("c-m-1", "a-net1"),
            ("c-m-2", "b-net2"),
            ("c-m-3", "a-net1"),
            ("c-m-4", "c-any"),
            ("c-m-5", "d-other"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_harvester_config_names_its_network_one_way_or_the_other() {
        assert_eq!(
            harvester_network(&json!({"networkName": "default/vlan10"})).as_deref(),
            Some("default/vlan10")
        );
        let info = json!({"networkInfo": "{\"interfaces\":[{\"networkName\":\"default/vlan20\"},{\"networkName\":\"x/y\"}]}"});
        assert_eq!(harvester_network(&info).as_deref(), Some("default/vlan20"));
        assert_eq!(harvester_network(&json!({})), None);
    }

    #[test]
    fn the_guest_manifests_parse_and_take_the_ranges_settings() {
        let objects = install_objects(&GuestClusters::default(), "kube-system", "kubevip").unwrap();
        let keys: Vec<String> = objects.iter().map(key_of).collect();
        assert_eq!(
            keys,
            [
                "ServiceAccount/kube-system/kube-vip",
                "ClusterRole//system:kube-vip-role",
                "ClusterRoleBinding//system:kube-vip-binding",
                "DaemonSet/kube-system/kube-vip-ds",
                "ServiceAccount/kube-system/kube-vip-cloud-controller",
                "ClusterRole//system:kube-vip-cloud-controller-role",
                "ClusterRoleBinding//system:kube-vip-cloud-controller-binding",
                "Deployment/kube-system/kube-vip-cloud-provider",
            ]
        );
        let ds = &objects[3]["spec"]["template"]["spec"];
        assert_eq!(ds["containers"][0]["image"], KUBE_VIP_IMAGE);
        assert!(ds["nodeSelector"].is_null());
        let env = |ds: &Value, n: &str| {
            ds["containers"][0]["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == n)
                .map(|e| e["value"].clone())
        };
        assert_eq!(env(ds, "vip_arp"), Some(json!("true")));
        assert_eq!(env(ds, "vip_interface"), None);
        assert_eq!(
            objects[7]["spec"]["template"]["spec"]["containers"][0]["image"],
            CLOUD_PROVIDER_IMAGE
        );

        let g: GuestClusters = serde_json::from_value(json!({
            "kubeVip": {"image": "registry.local/kube-vip:v1", "interface": "eth1",
                        "nodeSelector": {"node-role.kubernetes.io/worker": "true"}, "arp": false},
            "cloudProvider": {"image": "registry.local/kvcp:v2"}
        }))
        .unwrap();
        let objects = install_objects(&g, "kube-system", "kubevip").unwrap();
        let ds = &objects[3]["spec"]["template"]["spec"];
        assert_eq!(ds["containers"][0]["image"], "registry.local/kube-vip:v1");
        assert_eq!(
            ds["nodeSelector"],
            json!({"node-role.kubernetes.io/worker": "true"})
        );
        assert_eq!(env(ds, "vip_arp"), Some(json!("false")));
        assert_eq!(env(ds, "vip_interface"), Some(json!("eth1")));
        assert_eq!(
            objects[7]["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.local/kvcp:v2"
        );
        for o in &objects {
            assert_eq!(
                o["metadata"]["labels"]["app.kubernetes.io/managed-by"], "netpolicy",
                "{o}"
            );
        }
    }

    /// kube-fip installs both charts into its `kubevipNamespace`: so does netpolicy, and
    /// the provider reads the ConfigMap there (it reads kube-system/kubevip unless told).
    #[test]
    fn the_guest_install_goes_where_the_kube_vip_config_map_is() {
        let env = |o: &Value| o["spec"]["template"]["spec"]["containers"][0]["env"].clone();
        let objects = install_objects(&GuestClusters::default(), "kube-system", "kubevip").unwrap();
        assert_eq!(
            env(&objects[7]),
            json!([{"name": "KUBEVIP_NAMESPACE", "value": "kube-system"},
                   {"name": "KUBEVIP_CONFIG_MAP", "value": "kubevip"}])
        );
        let objects = install_objects(&GuestClusters::default(), "kube-vip", "vips").unwrap();
        let keys: Vec<String> = objects.iter().map(key_of).collect();
        assert_eq!(
            keys,
            [
                "Namespace//kube-vip",
                "ServiceAccount/kube-vip/kube-vip",
                "ClusterRole//system:kube-vip-role",
                "ClusterRoleBinding//system:kube-vip-binding",
                "DaemonSet/kube-vip/kube-vip-ds",
                "ServiceAccount/kube-vip/kube-vip-cloud-controller",
                "ClusterRole//system:kube-vip-cloud-controller-role",
                "ClusterRoleBinding//system:kube-vip-cloud-controller-binding",
                "Deployment/kube-vip/kube-vip-cloud-provider",
            ]
        );
        for binding in [&objects[3], &objects[7]] {
            assert_eq!(binding["subjects"][0]["namespace"], "kube-vip", "{binding}");
        }
        assert_eq!(
            env(&objects[8]),
            json!([{"name": "KUBEVIP_NAMESPACE", "value": "kube-vip"},
                   {"name": "KUBEVIP_CONFIG_MAP", "value": "vips"}])
        );
    }

    #[test]
    fn cluster_label_installs_only_where_the_cluster_says_true() {
        let c = |labels: &[(&str, &str)]| RancherCluster {
            namespace: "fleet-default".into(),
            name: "guest-a".into(),
            cluster_name: "c-m-abc".into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            client_secret_name: None,
            harvester: None,
        };
        assert!(!c(&[]).wants_install(GuestInstall::ClusterLabel));
        assert!(!c(&[("kube-vip", "false")]).wants_install(GuestInstall::ClusterLabel));
        assert!(c(&[("kube-vip", "true")]).wants_install(GuestInstall::ClusterLabel));
        assert!(c(&[]).wants_install(GuestInstall::Enabled));
        assert!(!c(&[("kube-vip", "true")]).wants_install(GuestInstall::Disabled));
        assert_eq!(
            c(&[]).kubeconfig_secret(),
            "fleet-default/guest-a-kubeconfig"
        );
    }
}
