//! `netpolicy convert`: the seeds' objects turned into netpolicy's, for manifests on
//! disk (docs/migration.md has the table). Pure: documents in, documents and notes out.
//! This file reads the documents and sends each to its seed's file: [`ipruler`]
//! (`ipruler.pegah.tech/v1`), [`kube_fip`] (`kubefip.k8s.binbash.org/v1` and its
//! ConfigMap), [`meridio`] (`meridio.nordix.org/v1` and `v1alpha1`: kebab-case fields,
//! the nested interface), [`routedip`] (routedip-operator's two groups) and
//! [`route_reflector`] (calico-route-reflector-operator's Deployment environment).
//!
//! What has no counterpart is said, never guessed silently: an ipruler rule has no
//! priority (the kernel picks one), so converted rules get 1000, 1001, … in order and a
//! note asks to check them against `ip rule show`; an ipruler ClusterConfig's items go into
//! every converted NodeConfig (ipruler's FullConfig: they reach the nodes some NodeConfig
//! selects, no other); kube-fip's Rancher annotations are noted and dropped.

mod ipruler;
mod kube_fip;
mod meridio;
mod route_reflector;
mod routedip;

use serde_json::{Map, Value, json};

use ipruler::{full_config, routing};
use kube_fip::{
    KUBE_FIP_CONFIG, apply_kube_fip_config, guest_install_unknown, kube_fip_floating_ip,
    kube_fip_range,
};
use meridio::meridio_object;
use route_reflector::{route_reflector_config, seed_rr_env};
use routedip::{routed_ip, routed_ip_issuer};

/// The result of a conversion.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Converted {
    /// netpolicy objects, in input order.
    pub(crate) objects: Vec<Value>,
    /// What a person should check (choices made, fields dropped).
    pub(crate) notes: Vec<String>,
    /// Inputs that could not be converted (`<where>: why`).
    pub(crate) errors: Vec<String>,
    /// Documents of other kinds, passed through unchanged.
    pub(crate) passed: usize,
}

const IPRULER: &str = "ipruler.pegah.tech/v1";
const KUBEFIP: &str = "kubefip.k8s.binbash.org/v1";
const OURS: &str = "netpolicy.io/v1alpha1";
const MERIDIO: &str = "meridio.nordix.org/v1";
const MERIDIO_ALPHA: &str = "meridio.nordix.org/v1alpha1";
/// routedip-operator's two API groups: the first (its issuer and a RoutedIP naming the
/// issuer's class) and the later one (a RoutedIP naming a provider).
const ROUTEDIP_OPERATOR: &str = "routedipoperator.jcastillo2nd.com/v1alpha1";
const ROUTEDIP: &str = "routedip.jcastillo2nd.info/v1alpha1";
/// First priority given to ipruler rules (which have none).
pub(crate) const FIRST_RULE_PRIORITY: u32 = 1000;

fn name_of(v: &Value) -> String {
    v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// [`convert_from`] with the default first rule priority (the tests' shorthand).
#[cfg(test)]
fn convert(docs: impl IntoIterator<Item = (String, Value)>) -> Converted {
    convert_from(docs, FIRST_RULE_PRIORITY)
}

/// Converts `docs` (each with where it came from, for messages), numbering ipruler's
/// rules from `first_rule_priority` (a second run's rules must not take the first run's
/// priorities).
pub(crate) fn convert_from(
    docs: impl IntoIterator<Item = (String, Value)>,
    first_rule_priority: u32,
) -> Converted {
    let docs = docs.into_iter().flat_map(list_items);
    let mut out = Converted::default();
    let mut next_priority = first_rule_priority;
    let mut cluster: Option<Map<String, Value>> = None;
    let mut cluster_names = Vec::new();
    let mut rest = Vec::new();
    // Where the ipruler NodeConfigs are in `rest`.
    let mut node_configs = Vec::new();
    let mut kube_fip_config: Option<(String, Value)> = None;
    // routedip-operator's issuers (class, name) and RoutedIPs, joined after the loop.
    let mut seed_issuers: Vec<(String, String)> = Vec::new();
    let mut seed_routed_ips: Vec<(String, Value)> = Vec::new();
    for (at, d) in docs {
        let api = d["apiVersion"].as_str().unwrap_or_default();
        let kind = d["kind"].as_str().unwrap_or_default();
        let name = name_of(&d);
        let at = format!("{at} ({kind}/{name})");
        match (api, kind) {
            (IPRULER, "ClusterConfig") => {
                let spec = routing(&d["spec"]["config"], &at, &mut next_priority, &mut out);
                let merged = cluster.get_or_insert_with(Map::new);
                for (k, v) in spec {
                    match (merged.get_mut(&k), v) {
                        (Some(Value::Array(have)), Value::Array(more)) => have.extend(more),
                        (_, v) => {
                            merged.insert(k, v);
                        }
                    }
                }
                cluster_names.push(name);
            }
            (IPRULER, "NodeConfig") => {
                let mut spec = routing(&d["spec"]["config"], &at, &mut next_priority, &mut out);
                let labels = d["spec"]["nodeSelector"].clone();
                spec.insert(
                    "nodeSelector".into(),
                    json!({"matchLabels": if labels.is_object() { labels } else { json!({}) }}),
                );
                node_configs.push(rest.len());
                rest.push(json!({"apiVersion": OURS, "kind": "NodeConfig",
                                 "metadata": {"name": name}, "spec": spec}));
            }
            (KUBEFIP, "FloatingIPRange") => rest.extend(kube_fip_range(&d, &name, &at, &mut out)),
            (KUBEFIP, "FloatingIP") => rest.extend(kube_fip_floating_ip(&d, &name, &at, &mut out)),
            (
                MERIDIO | MERIDIO_ALPHA,
                "Trench" | "Attractor" | "Gateway" | "Vip" | "Conduit" | "Stream" | "Flow",
            ) => match meridio_object(kind, &d, &at, &mut out) {
                Some(o) => rest.push(o),
                None => continue,
            },
            (MERIDIO | MERIDIO_ALPHA, k) => {
                out.errors
                    .push(format!("{at}: kind {k} has no netpolicy counterpart"));
            }
            // kube-fip's operator configuration: its keys become range fields (below).
            ("v1", "ConfigMap") if name == KUBE_FIP_CONFIG => {
                kube_fip_config = Some((at.clone(), d["data"].clone()));
            }
            ("apps/v1", "Deployment") if seed_rr_env(&d).is_some() => {
                let env = seed_rr_env(&d).unwrap_or_default();
                let namespace = d["metadata"]["namespace"].as_str().unwrap_or("default");
                rest.push(route_reflector_config(&env, &at, namespace, &mut out));
                out.notes.push(format!(
                    "{at}: the calico-route-reflector-operator manager: its environment became \
                     RouteReflectorConfig `default` (the Deployment is not kept; remove the \
                     seed's operator once netpolicy runs)"
                ));
            }
            (IPRULER, "FullConfig") => {
                out.notes.push(format!(
                    "{at}: ipruler's own generated object (a NodeConfig with the \
                     ClusterConfigs merged in): skipped; convert the ClusterConfig and \
                     NodeConfigs it is made from"
                ));
            }
            (ROUTEDIP_OPERATOR, "ClusterRoutedIPIssuer") => {
                let class = d["spec"]["className"].as_str().unwrap_or_default();
                seed_issuers.push((class.to_owned(), name.clone()));
                rest.extend(routed_ip_issuer(&d, &name, &at, &mut out));
            }
            (ROUTEDIP_OPERATOR | ROUTEDIP, "RoutedIP") => seed_routed_ips.push((at, d)),
            (IPRULER | KUBEFIP | ROUTEDIP_OPERATOR | ROUTEDIP, k) => {
                out.errors
                    .push(format!("{at}: kind {k} has no netpolicy counterpart"));
            }
            _ => {
                out.passed += 1;
                rest.push(d);
            }
        }
    }
    if let Some(spec) = cluster {
        // ipruler applies a ClusterConfig only through each NodeConfig's FullConfig (the
        // NodeConfig's items, then the ClusterConfig's it lacks), so only on nodes some
        // NodeConfig selects. The same here: its items go into every converted
        // NodeConfig, never into a ClusterConfig that would reach every node.
        let names = cluster_names.join(", ");
        if node_configs.is_empty() {
            out.notes.push(format!(
                "ipruler ClusterConfig(s) {names}: no ipruler NodeConfig in the input, so \
                 ipruler applied them on no node: not converted (convert them together with \
                 the NodeConfigs that carried them)"
            ));
        } else {
            for &k in &node_configs {
                if let Some(node) = rest[k]["spec"].as_object_mut() {
                    full_config(node, &spec);
                }
            }
            out.notes.push(format!(
                "ipruler ClusterConfig(s) {names}: their items are in each converted \
                 NodeConfig (as ipruler's FullConfig carried them), so they reach the same \
                 nodes as before and no other; a NodeConfig's own item of the same identity \
                 wins"
            ));
        }
    }
    let mut routed_ip_names = std::collections::BTreeSet::new();
    for (at, d) in &seed_routed_ips {
        if !routed_ip_names.insert(name_of(d)) {
            out.errors.push(format!(
                "{at}: a RoutedIP of the same name in another namespace came first; \
                 netpolicy's RoutedIPs are cluster-scoped: rename one"
            ));
            continue;
        }
        rest.extend(routed_ip(d, at, &seed_issuers, &mut out));
    }
    match kube_fip_config {
        Some((at, data)) => apply_kube_fip_config(&at, &data, &mut rest, &mut out),
        None => guest_install_unknown(&rest, &mut out),
    }
    out.objects.extend(rest);
    out
}

/// A document, or the items of a `List` (apiVersion v1: what `kubectl get -o yaml`
/// exports), each with where it came from.
fn list_items((at, d): (String, Value)) -> Vec<(String, Value)> {
    let list = d["apiVersion"] == "v1" && d["kind"].as_str().is_some_and(|k| k.ends_with("List"));
    match (list, d["items"].as_array()) {
        (true, Some(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| (format!("{at} items[{i}]"), item.clone()))
            .collect(),
        _ => vec![(at, d)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 42: a `kubectl get -o yaml` export (`kind: List`) converted nothing and
    /// exited 0; a Trench or Conduit without `spec` (Meridio's v1alpha1 samples) became
    /// `spec: null`, which plan refuses.
    #[test]
    fn a_list_is_read_item_by_item_and_a_missing_spec_is_an_empty_one() {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": IPRULER, "kind": "NodeConfig", "metadata": {"name": "a"},
             "spec": {"nodeSelector": {"role": "a"},
                      "config": {"routes": [{"to": "10.0.0.0/8", "via": "192.0.2.1"}]}}},
            {"apiVersion": "meridio.nordix.org/v1", "kind": "Trench",
             "metadata": {"name": "t", "namespace": "red"}}
        ]});
        let c = convert([("export.yaml".to_owned(), list)]);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        let kinds: Vec<&str> = c
            .objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["NodeConfig", "Trench"]);
        assert_eq!(c.objects[1]["spec"], json!({}));
    }

    #[test]
    fn ipruler_objects_become_ours_field_by_field() {
        let docs = [
            json!({"apiVersion": IPRULER, "kind": "ClusterConfig", "metadata": {"name": "a"},
                   "spec": {"config": {"settings": {"table-hard-sync": [102]},
                            "rules": [{"from": "172.31.201.11/32", "table": 102}]}}}),
            json!({"apiVersion": IPRULER, "kind": "ClusterConfig", "metadata": {"name": "b"},
                   "spec": {"config": {"rules": [{"from": "172.31.201.12/32", "table": 102}]}}}),
            json!({"apiVersion": IPRULER, "kind": "NodeConfig", "metadata": {"name": "v104"},
                   "spec": {"nodeSelector": {"networking.type": "eth2-vlan-104"},
                            "config": {"vlans": [{"name": "eth2.104", "link": "eth2", "id": 104}],
                                       "routes": [{"to": "default", "via": "172.31.201.1",
                                                   "dev": "eth2.104", "table": 102,
                                                   "protocol": "static", "on-link": true}]}}}),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
        ];
        let c = convert(docs.clone().into_iter().map(|d| ("in.yaml".to_owned(), d)));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.passed, 1);
        // Issue 42: the ClusterConfigs reach the nodes the NodeConfig selects and no
        // other (ipruler's FullConfig): their items are in the NodeConfig, no
        // ClusterConfig `default` reaches every node.
        assert!(c.objects.iter().all(|o| o["kind"] != "ClusterConfig"));
        assert_eq!(
            c.objects[0]["spec"],
            json!({"nodeSelector": {"matchLabels": {"networking.type": "eth2-vlan-104"}},
                   "vlans": [{"name": "eth2.104", "link": "eth2", "id": 104}],
                   "routes": [{"to": "default", "via": "172.31.201.1", "dev": "eth2.104",
                               "table": 102, "onlink": true}],
                   "rules": [{"priority": 1000, "from": "172.31.201.11/32", "table": 102},
                             {"priority": 1001, "from": "172.31.201.12/32", "table": 102}],
                   "tableHardSync": [102]})
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("drops `protocol: static`"))
        );
        assert!(c.notes.iter().any(|n| n.contains("gets priority 1001")));
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("a, b: their items are in each converted NodeConfig")),
            "{:?}",
            c.notes
        );
        // Without a NodeConfig, ipruler applied a ClusterConfig nowhere: not converted.
        let c = convert([("in.yaml".to_owned(), docs[0].clone())]);
        assert!(c.objects.is_empty(), "{:?}", c.objects);
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("applied them on no node"))
        );
    }

    #[test]
    fn iprulers_full_example_converts_as_ipruler_applies_it() {
        // ipruler's example: the on-link default route names no device; ipruler finds it
        // from the route to the gateway when it applies. Its FullConfigs are its own.
        let docs = [
            json!({"apiVersion": IPRULER, "kind": "NodeConfig", "metadata": {"name": "v104"},
                   "spec": {"nodeSelector": {"networking.type": "eth2-vlan-104"},
                            "config": {"vlans": [{"name": "eth2.104", "link": "eth2", "id": 104}],
                                       "routes": [
                                           {"to": "172.31.0.0/16", "dev": "eth2", "scope": "link"},
                                           {"to": "172.31.201.0/24", "dev": "eth2.104", "scope": "link"},
                                           {"to": "default", "via": "172.31.201.1", "table": 102,
                                            "on-link": true}],
                                       "rules": [{"from": "172.31.201.11/32", "table": 102}]}}}),
            json!({"apiVersion": IPRULER, "kind": "FullConfig", "metadata": {"name": "v104-full"},
                   "spec": {}}),
        ];
        let c = convert_from(docs.into_iter().map(|d| ("in.yaml".to_owned(), d)), 2000);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.objects.len(), 1, "{:?}", c.objects);
        let routes = &c.objects[0]["spec"]["routes"];
        assert_eq!(
            routes[2]["dev"], "eth2.104",
            "the most specific route: {routes}"
        );
        assert_eq!(c.objects[0]["spec"]["rules"][0]["priority"], 2000);
        let notes = c.notes.join("\n");
        assert!(
            notes.contains("dev eth2.104 (from route 172.31.201.0/24"),
            "{notes}"
        );
        assert!(
            notes.contains("FullConfig/v104-full): ipruler's own generated object"),
            "{notes}"
        );
    }

    #[test]
    fn kube_fips_configuration_v0_1_ranges_and_create_once_configmaps_are_carried_or_said() {
        let docs = [
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "kube-fip-config", "namespace": "kube-fip"},
                   "data": {"kubevipNamespace": "kube-vip", "kubevipGuestInstall": "clusterlabel",
                            "kubevipUpdate": "true", "operateGuestClusterInterval": "480",
                            "kubevipChartValues": "image: x", "traceIpamData": "true"}}),
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIPRange", "metadata": {"name": "h",
                   "annotations": {"harvesterClusterName": "hv1"}},
                   "spec": {"iprange": "10.0.0.0/28"}}),
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIPRange", "metadata": {"name": "old",
                   "annotations": {"cloudCredentialSecret": "cattle-global-data:cc-1"}},
                   "spec": {"iprange": "10.0.1.0/28"}}),
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIP",
                   "metadata": {"name": "f", "namespace": "c-m-1",
                                "annotations": {"fiprange": "h", "updateConfigMap": "false"}},
                   "spec": {}}),
        ];
        let c = convert(docs.into_iter().map(|d| ("in.yaml".to_owned(), d)));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        // The ConfigMap is not passed through: its keys are on the Harvester range.
        assert!(c.objects.iter().all(|o| o["kind"] != "ConfigMap"));
        let h = c
            .objects
            .iter()
            .find(|o| o["metadata"]["name"] == "h")
            .unwrap();
        assert_eq!(h["spec"]["kubeVip"]["namespace"], "kube-vip");
        let g = &h["spec"]["kubeVip"]["guests"];
        assert_eq!(
            (&g["install"], &g["update"], &g["intervalSeconds"]),
            (&json!("clusterLabel"), &json!(true), &json!(480))
        );
        let notes = c.notes.join("\n");
        assert!(notes.contains("kubevipChartValues"), "{notes}");
        assert!(notes.contains("--trace-ipam-data"), "{notes}");
        // A v0.1 range keyed by its cloud credential: the lost tie is said, not "not
        // needed".
        assert!(
            notes.contains("cloudCredentialSecret=cattle-global-data:cc-1 (kube-fip v0.1)")
                && notes.contains("spec.harvester.cluster"),
            "{notes}"
        );
        assert!(!notes.contains("cc-1 is not needed"), "{notes}");
        // Create-once becomes keep-in-step: said.
        assert!(notes.contains("updateConfigMap=false"), "{notes}");
    }

    fn harvester_range() -> Value {
        json!({"apiVersion": KUBEFIP, "kind": "FloatingIPRange", "metadata": {"name": "h",
               "annotations": {"harvesterClusterName": "hv1"}},
               "spec": {"iprange": "10.0.0.0/28"}})
    }

    fn kube_fip_config(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "kube-fip-config", "namespace": "kube-fip"},
               "data": data})
    }

    fn converted(docs: Vec<Value>) -> Converted {
        convert(docs.into_iter().map(|d| ("in.yaml".to_owned(), d)))
    }

    #[test]
    fn kube_fips_guest_install_comes_from_its_configmap_with_kube_fips_default() {
        let install = |c: &Converted| {
            c.objects
                .iter()
                .find(|o| o["metadata"]["name"] == "h")
                .map(|o| o["spec"]["kubeVip"]["guests"]["install"].clone())
                .unwrap_or_default()
        };
        // Set in the ConfigMap (kube-fip lower-cases it): carried, never called missing.
        let c = converted(vec![
            harvester_range(),
            kube_fip_config(json!({"kubevipGuestInstall": "Enabled"})),
        ]);
        assert_eq!(install(&c), json!("enabled"));
        assert!(
            !c.notes.join("\n").contains("not in this input"),
            "{:?}",
            c.notes
        );
        // The ConfigMap without the key: kube-fip's default, clusterlabel, said.
        let c = converted(vec![kube_fip_config(json!({})), harvester_range()]);
        assert_eq!(install(&c), json!("clusterLabel"));
        assert!(
            c.notes.join("\n").contains("no kubevipGuestInstall"),
            "{:?}",
            c.notes
        );
        // No ConfigMap in the input: unknown here, said once, nothing set.
        let c = converted(vec![harvester_range()]);
        assert_eq!(install(&c), Value::Null);
        let notes = c.notes.join("\n");
        assert!(
            notes.contains("FloatingIPRange(s) h: kube-fip's kubevipGuestInstall")
                && notes.contains("not in this input"),
            "{notes}"
        );
    }

    #[test]
    fn every_key_of_kube_fips_configmap_is_carried_or_named_with_its_counterpart() {
        let c = converted(vec![
            harvester_range(),
            kube_fip_config(json!({"logLevel": "Debug", "metricsPort": "9090",
                                   "kubevipChartRef": "kube-vip/kube-vip",
                                   "someFutureKey": "x"})),
        ]);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        let notes = c.notes.join("\n");
        for said in [
            "logLevel=\"Debug\" is not converted: the operator's log filter is the chart \
             value operator.logLevel (RUST_LOG: \"debug\" there)",
            "metricsPort=\"9090\" is not converted: the operator's /metrics port is the \
             chart value operator.metricsPort",
            "kubevipChartRef=\"kube-vip/kube-vip\" is not converted: netpolicy installs",
            "someFutureKey=\"x\" is not converted: not a key netpolicy's convert knows",
        ] {
            assert!(notes.contains(said), "{said:?} not in\n{notes}");
        }
    }

    #[test]
    fn kube_fip_objects_become_ours_and_what_has_no_counterpart_is_said() {
        let docs = [
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIPRange",
                   "metadata": {"name": "guest-vlan",
                                "annotations": {"cloudCredentialSecret": "cc-bsvdq",
                                                "harvesterClusterName": "harvester-dc1",
                                                "harvesterNetworkName": "vlan10",
                                                "team": "infra"}},
                   "spec": {"iprange": "10.135.10.192/26"}}),
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIP",
                   "metadata": {"name": "demo-vip", "namespace": "c-m-ngd5hs2r",
                                "annotations": {"fiprange": "guest-vlan", "updateConfigMap": "true",
                                                "clustername": "shop"}},
                   "spec": {"ipaddress": "10.135.10.200"}}),
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIP",
                   "metadata": {"name": "lost", "namespace": "x"}, "spec": {}}),
        ];
        let c = convert(docs.into_iter().map(|d| ("fip.yaml".to_owned(), d)));
        assert_eq!(
            c.objects[0]["spec"],
            json!({"cidrs": ["10.135.10.192/26"],
                   "harvester": {"cluster": "harvester-dc1", "network": "vlan10"},
                   "autoAllocate": {"namespaceNamePrefix": "c-m-"},
                   "kubeVip": {"publish": true, "guests": {"discovery": "rancher"}}})
        );
        // Our kind takes it as it is.
        let _: crate::api::FloatingIPRange = serde_json::from_value(c.objects[0].clone()).unwrap();
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("annotation team=") && n.contains("dropped")),
            "{:?}",
            c.notes
        );
        assert_eq!(
            c.objects[1],
            json!({"apiVersion": OURS, "kind": "FloatingIP",
                   "metadata": {"name": "demo-vip", "namespace": "c-m-ngd5hs2r"},
                   "spec": {"range": "guest-vlan", "address": "10.135.10.200"}})
        );
        assert_eq!(c.errors.len(), 1, "{:?}", c.errors);
        assert!(c.errors[0].contains("FloatingIP/lost"));
        assert!(c.notes.iter().any(|n| n.contains("cloudCredentialSecret")));
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("guests: {discovery: rancher}")),
            "{:?}",
            c.notes
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("clustername=shop") && n.contains("status.clusterName"))
        );
    }

    /// Meridio's network-attachment interface converts to `networkAttachments` (our kind
    /// takes it); another type is refused naming it.
    #[test]
    fn a_network_attachment_attractor_converts_and_an_unknown_type_is_refused() {
        let attractor = |iface: Value| {
            json!({"apiVersion": MERIDIO, "kind": "Attractor",
                   "metadata": {"name": "attr-nad", "namespace": "red", "labels": {"trench": "t"}},
                   "spec": {"gateways": [], "vips": [], "composites": [], "interface": iface}})
        };
        let c = convert([(
            "a.yaml".to_owned(),
            attractor(json!({"name": "ext0", "type": "network-attachment",
                             "ipv4-prefix": "169.254.100.0/24", "ipv6-prefix": "100:100::/64",
                             "network-attachments": [{"name": "vlan-100", "namespace": "net"}]})),
        )]);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(
            c.objects[0]["spec"]["interface"],
            json!({"name": "ext0", "link": "ext0", "ipv4Prefix": "169.254.100.0/24",
                   "ipv6Prefix": "100:100::/64",
                   "networkAttachments": [{"name": "vlan-100", "namespace": "net"}]})
        );
        let _: crate::api::Attractor = serde_json::from_value(c.objects[0].clone()).unwrap();
        let c = convert([(
            "a.yaml".to_owned(),
            attractor(json!({"name": "ext0", "type": "sriov", "ipv4-prefix": "169.254.100.0/24"})),
        )]);
        assert!(
            c.errors.iter().any(|e| e.contains("sriov")),
            "{:?}",
            c.errors
        );
    }

    /// calico-route-reflector-operator's manager Deployment: its environment becomes
    /// RouteReflectorConfig `default`, the seed's defaults written out where ours differ,
    /// and our kind takes the result.
    #[test]
    fn the_route_reflector_seeds_environment_becomes_a_route_reflector_config() {
        let deployment = |env: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "calico-route-reflector-controller-manager",
                                "namespace": "kube-system"},
                   "spec": {"template": {"spec": {"containers": [
                       {"name": "manager", "image": "quay.io/mhmxs/calico-route-reflector-controller:v0.0.9",
                        "env": env}]}}}})
        };
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([
                {"name": "DATASTORE_TYPE", "value": "incluster"},
                {"name": "ROUTE_REFLECTOR_MIN", "value": "2"},
                {"name": "ROUTE_REFLECTOR_ZONE_LABEL", "value": "topology.kubernetes.io/zone"},
                {"name": "ROUTE_REFLECTOR_INCOMPATIBLE_NODE_LABELS",
                 "value": "do-not-select-as-rr=true,node-role.kubernetes.io/control-plane"},
                {"name": "ROUTE_REFLECTOR_TOPOLOGY", "value": "multi"},
                {"name": "ROUTE_REFLECTOR_WAIT_TIMEOUT", "value": "10"},
            ])),
        )]);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(
            c.objects.len(),
            1,
            "the Deployment is not kept: {:?}",
            c.objects
        );
        let rr = &c.objects[0];
        assert_eq!(rr["kind"], "RouteReflectorConfig");
        assert_eq!(rr["metadata"]["name"], "default");
        let spec = &rr["spec"];
        assert_eq!(spec["min"], 2);
        assert_eq!(
            spec["max"], 10,
            "the seed's code's default (its README says 25)"
        );
        assert_eq!(
            spec["tolerations"],
            json!([{"operator": "Exists"}]),
            "the seed keeps reflectors on tainted nodes"
        );
        assert_eq!(spec["clusterID"], "224.0.0.0");
        assert_eq!(spec["per"], "zone");
        assert_eq!(spec["zoneLabel"], "topology.kubernetes.io/zone");
        assert_eq!(spec["topology"], "multi");
        assert_eq!(spec["stepDelaySeconds"], 10);
        assert!(spec.get("datastore").is_none(), "incluster: this cluster");

        // Calico's datastore in another cluster: a kubeconfig Secret to create, said.
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([
                {"name": "DATASTORE_TYPE", "value": "kubernetes"},
                {"name": "K8S_API_ENDPOINT", "value": "https://calico.example:6443"},
            ])),
        )]);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(
            c.objects[0]["spec"]["datastore"],
            json!({"kubernetes": {"kubeconfigSecretRef":
                {"namespace": "kube-system", "name": "calico-cluster-kubeconfig"}}})
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("https://calico.example:6443")
                    && n.contains("kube-system/calico-cluster-kubeconfig")),
            "{:?}",
            c.notes
        );
        assert_eq!(spec["reflectorLabel"], "calico-route-reflector");
        assert_eq!(
            spec["eligibleNodes"],
            json!({"matchExpressions": [
                {"key": "do-not-select-as-rr", "operator": "NotIn", "values": ["true"]},
                {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]})
        );
        let typed: crate::api::RouteReflectorConfig = serde_json::from_value(rr.clone()).unwrap();
        assert_eq!(typed.spec.max, 10);
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("ROUTE_REFLECTOR_CLUSTER_ID unset") && n.contains("224.0.0.1")),
            "{:?}",
            c.notes
        );

        // The seed's own template form of the cluster ID, and Calico client settings
        // netpolicy does not take.
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([
                {"name": "ROUTE_REFLECTOR_CLUSTER_ID", "value": "224.0.0.%d"},
                {"name": "K8S_INSECURE_SKIP_TLS_VERIFY", "value": "true"},
                {"name": "ETCD_CA_CERT", "value": "-----BEGIN CERTIFICATE-----"},
            ])),
        )]);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        let rr = c
            .objects
            .iter()
            .find(|o| o["kind"] == "RouteReflectorConfig")
            .unwrap();
        assert_eq!(rr["spec"]["clusterID"], "224.0.0.1");
        let typed: crate::api::RouteReflectorConfig = serde_json::from_value(rr.clone()).unwrap();
        assert_eq!(typed.spec.cluster_id, "224.0.0.1");
        for said in [
            "224.0.0.%d is the seed's template",
            "K8S_INSECURE_SKIP_TLS_VERIFY (a Calico client setting) has no netpolicy counterpart; dropped",
            "ETCD_CA_CERT (a Calico client setting)",
        ] {
            assert!(
                c.notes.iter().any(|n| n.contains(said)),
                "{said}: {:?}",
                c.notes
            );
        }
        for (template, want) in [("224.%d.%d.%d", "224.0.0.1"), ("10.1.2.3", "10.1.2.3")] {
            let c = convert([(
                "seed.yaml".to_owned(),
                deployment(json!([{"name": "ROUTE_REFLECTOR_CLUSTER_ID", "value": template}])),
            )]);
            let rr = c
                .objects
                .iter()
                .find(|o| o["kind"] == "RouteReflectorConfig")
                .unwrap();
            assert_eq!(rr["spec"]["clusterID"], want, "{template}");
        }
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([{"name": "ROUTE_REFLECTOR_CLUSTER_ID", "value": "rr-%d"}])),
        )]);
        assert!(
            c.errors
                .iter()
                .any(|e| e.contains("ROUTE_REFLECTOR_CLUSTER_ID=\"rr-%d\" is not an IPv4 address")),
            "{:?}",
            c.errors
        );

        // No zone label (the seed's default): one count for the whole cluster; etcd.
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([
                {"name": "DATASTORE_TYPE", "value": "etcdv3"},
                {"name": "ETCD_ENDPOINTS", "value": "https://10.0.0.1:2379,https://10.0.0.2:2379"},
                {"name": "ETCD_CA_CERT_FILE", "value": "/calico-secrets/etcd-ca"},
                {"name": "ROUTE_REFLECTOR_MAX", "value": "abc"},
            ])),
        )]);
        let spec = &c.objects[0]["spec"];
        assert_eq!(spec["per"], "cluster");
        assert_eq!(
            spec["zoneLabel"], "",
            "no zones, whatever labels the nodes carry"
        );
        assert_eq!(
            spec["datastore"],
            json!({"etcdv3": {"endpoints": ["https://10.0.0.1:2379", "https://10.0.0.2:2379"]}})
        );
        assert!(
            c.errors
                .iter()
                .any(|e| e.contains("ROUTE_REFLECTOR_MAX=\"abc\"")),
            "{:?}",
            c.errors
        );
        assert!(
            c.notes.iter().any(|n| n.contains("tlsSecretRef")),
            "{:?}",
            c.notes
        );
        // Any other Deployment passes through.
        let c = convert([(
            "app.yaml".to_owned(),
            deployment(json!([{"name": "LOG_LEVEL", "value": "debug"}])),
        )]);
        assert_eq!(c.passed, 1);
    }

    /// Meridio's own samples (`config/samples/meridio_v1_*`, kebab-case, the nested
    /// interface), converted: our kinds accept them, and the trench's ConfigMap is the
    /// one Meridio's writer produces for the originals, byte for byte.
    #[test]
    fn meridios_sample_manifests_convert_to_the_same_trench() {
        let m = "meridio.nordix.org/v1";
        let l = json!({"trench": "trench-a"});
        let docs = vec![
            json!({"apiVersion": m, "kind": "Trench", "metadata": {"name": "trench-a"},
                   "spec": {"ip-family": "dualstack"}}),
            json!({"apiVersion": m, "kind": "Vip", "metadata": {"name": "vip1", "labels": l},
                   "spec": {"address": "20.0.0.0/32"}}),
            json!({"apiVersion": m, "kind": "Vip", "metadata": {"name": "vip2", "labels": l},
                   "spec": {"address": "10.0.0.1/32"}}),
            json!({"apiVersion": m, "kind": "Attractor", "metadata": {"name": "attr1", "labels": l},
                   "spec": {"replicas": 2, "composites": ["conduit-stateless"],
                            "gateways": ["gateway1", "gateway2"], "vips": ["vip1", "vip2"],
                            "interface": {"name": "ext-vlan.100", "type": "nsm-vlan",
                                          "ipv4-prefix": "169.254.100.0/24",
                                          "ipv6-prefix": "100:100::/64",
                                          "nsm-vlan": {"vlan-id": 100, "base-interface": "eth0"}}}}),
            json!({"apiVersion": m, "kind": "Gateway", "metadata": {"name": "gateway1", "labels": l},
                   "spec": {"address": "2.3.4.5", "protocol": "bgp",
                            "bgp": {"remote-asn": 2000, "local-asn": 2001, "hold-time": "24s"}}}),
            json!({"apiVersion": m, "kind": "Gateway", "metadata": {"name": "gateway2", "labels": l},
                   "spec": {"address": "1000::1", "protocol": "bgp",
                            "bgp": {"remote-asn": 3000, "local-asn": 2001, "remote-port": 10179,
                                    "local-port": 10179, "hold-time": "240s",
                                    "bfd": {"switch": true, "min-tx": "300ms", "min-rx": "300ms",
                                            "multiplier": 3}}}}),
            json!({"apiVersion": m, "kind": "Gateway", "metadata": {"name": "gateway3", "labels": l},
                   "spec": {"address": "1.2.3.4", "protocol": "static",
                            "static": {"bfd": {"switch": true, "min-tx": "200ms", "min-rx": "200ms",
                                               "multiplier": 5}}}}),
            json!({"apiVersion": m, "kind": "Conduit", "metadata": {"name": "conduit-stateless", "labels": l},
                   "spec": {"type": "stateless-lb"}}),
            json!({"apiVersion": m, "kind": "Stream", "metadata": {"name": "stream-1", "labels": l},
                   "spec": {"conduit": "conduit-stateless", "max-targets": 100}}),
            json!({"apiVersion": m, "kind": "Flow", "metadata": {"name": "flow-1", "labels": l},
                   "spec": {"stream": "stream-1", "vips": ["vip1"], "protocols": ["tcp", "udp"],
                            "priority": 2,
                            "byte-matches": ["tcp[16:2] = 80", "tcp[13:1] & 0x02 = 0x02"]}}),
        ];
        let c = convert(docs.into_iter().map(|d| ("samples.yaml".to_owned(), d)));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.objects.len(), 10);
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        assert_eq!(
            c.objects[9]["spec"]["byteMatches"],
            json!(["tcp[16:2] = 80", "tcp[13:1] & 0x02 = 0x02"])
        );
        let a = &c.objects[3];
        assert_eq!(
            a["spec"]["interface"],
            json!({"name": "ext-vlan.100", "link": "eth0", "vlanId": 100,
                   "ipv4Prefix": "169.254.100.0/24", "ipv6Prefix": "100:100::/64"})
        );
        // Our kinds take them as they are, and the trench's ConfigMap is Meridio's.
        let of = |k: &str| -> Vec<Value> {
            c.objects
                .iter()
                .filter(|o| o["kind"] == k)
                .cloned()
                .collect()
        };
        let typed = |k: &str| -> Vec<Value> {
            of(k)
                .into_iter()
                .map(|mut o| {
                    o["metadata"]["namespace"] = json!("default");
                    o
                })
                .collect()
        };
        let de = |k: &str| typed(k);
        let trenches: Vec<crate::api::Trench> = de("Trench")
            .into_iter()
            .map(|o| serde_json::from_value(o).unwrap())
            .collect();
        let attractors: Vec<crate::api::Attractor> = de("Attractor")
            .into_iter()
            .map(|o| serde_json::from_value(o).unwrap())
            .collect();
        let gateways: Vec<crate::api::Gateway> = de("Gateway")
            .into_iter()
            .map(|o| serde_json::from_value(o).unwrap())
            .collect();
        let vips: Vec<crate::api::Vip> = de("Vip")
            .into_iter()
            .map(|o| serde_json::from_value(o).unwrap())
            .collect();
        let conduits: Vec<crate::api::Conduit> = de("Conduit")
            .into_iter()
            .map(|o| serde_json::from_value(o).unwrap())
            .collect();
        let streams: Vec<crate::api::Stream> = de("Stream")
            .into_iter()
            .map(|o| serde_json::from_value(o).unwrap())
            .collect();
        let flows: Vec<crate::api::Flow> = de("Flow")
            .into_iter()
            .map(|o| serde_json::from_value(o).unwrap())
            .collect();
        let mut errors = Vec::new();
        let ds = crate::trench::domains(
            crate::trench::Objects {
                trenches: &trenches,
                attractors: &attractors,
                gateways: &gateways,
                vips: &vips,
                conduits: &conduits,
                streams: &streams,
                flows: &flows,
            },
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
        let data = crate::trench::meridio::config_map_data(&ds[0]);
        for (k, v) in crate::trench::meridio::tests::MERIDIO_SAMPLE {
            // The sample's flow plus its byte matches, as gopkg.in/yaml.v2 v2.4.0
            // writes Meridio's `byte-matches,omitempty` (checked with it: unquoted,
            // the dashes under the key).
            let want = if *k == "flows" {
                format!("{v}  byte-matches:\n  - tcp[16:2] = 80\n  - tcp[13:1] & 0x02 = 0x02\n")
            } else {
                (*v).to_owned()
            };
            assert_eq!(data.get(*k), Some(&want), "key {k}");
        }
    }

    /// Issue 42: a remote Calico datastore whose endpoint comes from a Secret silently
    /// became this cluster's; `ETCD_ENDPOINTS` from a Secret was "missing"; etcd user
    /// names, passwords and DNS discovery were dropped without a word.
    #[test]
    fn a_datastore_from_a_secret_is_never_replaced_by_this_cluster() {
        let deployment = |env: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "rr-operator", "namespace": "kube-system"},
                   "spec": {"template": {"spec": {"containers": [{"name": "m", "env": env}]}}}})
        };
        let secret = json!({"valueFrom": {"secretKeyRef": {"name": "calico", "key": "x"}}});
        let mut endpoint = secret.clone();
        endpoint["name"] = json!("K8S_API_ENDPOINT");
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([{"name": "DATASTORE_TYPE", "value": "kubernetes"}, endpoint])),
        )]);
        assert!(
            c.objects[0]["spec"]["datastore"]["kubernetes"].is_object(),
            "{:?}",
            c.objects
        );
        let mut etcd = secret.clone();
        etcd["name"] = json!("ETCD_ENDPOINTS");
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([
                {"name": "DATASTORE_TYPE", "value": "etcdv3"},
                etcd,
                {"name": "ETCD_USERNAME", "value": "calico"},
            ])),
        )]);
        assert!(
            c.errors
                .iter()
                .any(|e| e.contains("ETCD_ENDPOINTS comes from a Secret")),
            "{:?}",
            c.errors
        );
        assert!(
            !c.errors
                .iter()
                .any(|e| e.contains("without ETCD_ENDPOINTS")),
            "{:?}",
            c.errors
        );
    }

    /// Issue 66: the seed's etcd user and password become `credentialsSecretRef` (the
    /// password never in the output), `ETCD_DISCOVERY_SRV` becomes `discoverySrv`, and a
    /// Calico client setting netpolicy does not carry (`CALICO_API_GROUP`) is named.
    #[test]
    fn etcd_credentials_and_srv_discovery_carry_over_and_the_rest_is_named() {
        let deployment = |env: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "rr-operator", "namespace": "kube-system"},
                   "spec": {"template": {"spec": {"containers": [{"name": "m", "env": env}]}}}})
        };
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([
                {"name": "DATASTORE_TYPE", "value": "etcdv3"},
                {"name": "ETCD_DISCOVERY_SRV", "value": "etcd.example.com"},
                {"name": "ETCD_USERNAME", "value": "calico"},
                {"name": "ETCD_PASSWORD", "value": "s3cret-Pw"},
                {"name": "CALICO_API_GROUP", "value": "projectcalico.org/v3"},
                {"name": "K8S_API_ENDPOINT", "value": "https://10.0.0.9:6443"},
            ])),
        )]);
        assert_eq!(c.errors, Vec::<String>::new());
        assert_eq!(
            c.objects[0]["spec"]["datastore"],
            json!({"etcdv3": {"discoverySrv": "etcd.example.com", "credentialsSecretRef":
                   {"namespace": "kube-system", "name": "calico-etcd-credentials"}}})
        );
        let everything = format!("{:?} {:?}", c.objects, c.notes);
        assert!(!everything.contains("s3cret-Pw"), "{everything}");
        for says in [
            "create Secret kube-system/calico-etcd-credentials with keys username=calico and password",
            "CALICO_API_GROUP (a Calico client setting) has no netpolicy counterpart",
            "K8S_API_ENDPOINT (a Calico client setting) has no netpolicy counterpart; dropped (unused with DATASTORE_TYPE=etcdv3)",
        ] {
            assert!(
                c.notes.iter().any(|n| n.contains(says)),
                "{says}: {:?}",
                c.notes
            );
        }

        // Both ways of finding etcd: Calico refuses the pair, so does convert.
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([
                {"name": "DATASTORE_TYPE", "value": "etcdv3"},
                {"name": "ETCD_ENDPOINTS", "value": "http://10.0.0.1:2379"},
                {"name": "ETCD_DISCOVERY_SRV", "value": "etcd.example.com"},
            ])),
        )]);
        assert!(
            c.errors
                .iter()
                .any(|e| e.contains("both ETCD_ENDPOINTS and ETCD_DISCOVERY_SRV")),
            "{:?}",
            c.errors
        );
        // Neither.
        let c = convert([(
            "seed.yaml".to_owned(),
            deployment(json!([
                {"name": "DATASTORE_TYPE", "value": "etcdv3"},
                {"name": "ETCD_PASSWORD", "value": "x"},
            ])),
        )]);
        assert!(
            c.errors
                .iter()
                .any(|e| e.contains("without ETCD_ENDPOINTS or ETCD_DISCOVERY_SRV")),
            "{:?}",
            c.errors
        );
        assert!(
            c.notes.iter().any(|n| n.contains("ETCD_USERNAME is unset")),
            "{:?}",
            c.notes
        );
    }

    /// Issue 66: routedip-operator's issuer and RoutedIPs (both of its API groups)
    /// become ours: the IP adopted by address, the issuer found by class or provider,
    /// what has no counterpart named, the region it never had asked for.
    #[test]
    fn routedip_operators_objects_become_ours_and_the_rest_is_named() {
        let issuer = json!({"apiVersion": ROUTEDIP_OPERATOR, "kind": "ClusterRoutedIPIssuer",
            "metadata": {"name": "do"},
            "spec": {"className": "digitalocean.com/floating-ip", "firewallPostAllow": false,
                     "nodePortRange": "30000-32767", "perNodeIPLimit": 1,
                     "fromSecretsRef": "do-token", "updateRoutedIPSpec": {}}});
        let old = json!({"apiVersion": ROUTEDIP_OPERATOR, "kind": "RoutedIP",
            "metadata": {"name": "web", "namespace": "ingress"},
            "spec": {"className": "digitalocean.com/floating-ip", "routedIP": "203.0.113.7",
                     "serviceRef": {"name": "nginx"}}});
        let new = json!({"apiVersion": ROUTEDIP, "kind": "RoutedIP",
            "metadata": {"name": "api", "namespace": "apps"},
            "spec": {"issuerClass": "digitalocean",
                     "serviceRef": {"namespace": "edge", "name": "envoy"}}});
        let twin = json!({"apiVersion": ROUTEDIP, "kind": "RoutedIP",
            "metadata": {"name": "web", "namespace": "other"},
            "spec": {"issuerClass": "digitalocean", "serviceRef": {"name": "x"}}});
        let gce = json!({"apiVersion": ROUTEDIP, "kind": "RoutedIP",
            "metadata": {"name": "g", "namespace": "apps"},
            "spec": {"issuerClass": "gce", "serviceRef": {"name": "x"}}});
        let c = convert(
            [issuer, old, new, twin, gce]
                .into_iter()
                .map(|d| ("seed.yaml".to_owned(), d)),
        );
        let by_name = |kind: &str, n: &str| {
            c.objects
                .iter()
                .find(|o| o["kind"] == kind && o["metadata"]["name"] == n)
                .cloned()
                .unwrap_or_else(|| panic!("no {kind}/{n}: {:?}", c.objects))
        };
        assert_eq!(
            by_name("RoutedIPIssuer", "do")["spec"],
            json!({"digitalocean": {"region": "", "tokenSecretRef":
                {"namespace": "netpolicy-system", "name": "do-token", "key": "token"}}})
        );
        assert_eq!(
            by_name("RoutedIP", "web")["spec"],
            json!({"issuerRef": {"name": "do"}, "address": "203.0.113.7",
                   "serviceRef": {"namespace": "ingress", "name": "nginx"},
                   "reclaimPolicy": "Retain"})
        );
        assert_eq!(
            by_name("RoutedIP", "api")["spec"]["serviceRef"],
            json!({"namespace": "edge", "name": "envoy"})
        );
        assert_eq!(
            c.objects.iter().filter(|o| o["kind"] == "RoutedIP").count(),
            2,
            "the twin and the gce one are not converted"
        );
        for says in [
            "spec.digitalocean.region has no source",
            "a RoutedIP of the same name in another namespace came first",
            "no issuer in the input for class \"gce\"",
        ] {
            assert!(
                c.errors.iter().any(|e| e.contains(says)),
                "{says}: {:?}",
                c.errors
            );
        }
        for says in [
            "spec.firewallPostAllow has no netpolicy counterpart",
            "spec.nodePortRange has no netpolicy counterpart",
            "spec.perNodeIPLimit has no netpolicy counterpart",
            "spec.updateRoutedIPSpec has no netpolicy counterpart",
            "the oldest node wins",
        ] {
            assert!(
                c.notes.iter().any(|n| n.contains(says)),
                "{says}: {:?}",
                c.notes
            );
        }
        assert_eq!(c.passed, 0);
    }
}
