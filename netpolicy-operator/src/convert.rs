//! `netpolicy convert`: ipruler's (`ipruler.pegah.tech/v1`) and kube-fip's
//! (`kubefip.k8s.binbash.org/v1`) objects turned into netpolicy's, field by field, for
//! manifests on disk (docs/migration.md has the table). Pure: documents in, documents
//! and notes out.
//!
//! What has no counterpart is said, never guessed silently: an ipruler rule has no
//! priority (the kernel picks one), so converted rules get 1000, 1001, … in order and a
//! note asks to check them against `ip rule show`; several ipruler ClusterConfigs become
//! the one ClusterConfig `default`; kube-fip's Rancher annotations are noted and dropped.

use serde_json::{Map, Value, json};

/// The result of a conversion.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Converted {
    /// netpolicy objects, in input order (the merged ClusterConfig first).
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
/// First priority given to ipruler rules (which have none).
pub(crate) const FIRST_RULE_PRIORITY: u32 = 1000;

fn name_of(v: &Value) -> String {
    v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// netpolicy routing items from ipruler's `spec.config`; `next_priority` numbers rules.
fn routing(
    config: &Value,
    at: &str,
    next_priority: &mut u32,
    out: &mut Converted,
) -> Map<String, Value> {
    let mut spec = Map::new();
    let mut vlans = Vec::new();
    for (i, v) in config["vlans"].as_array().into_iter().flatten().enumerate() {
        let mut vlan = Map::new();
        for k in ["name", "link", "id", "protocol"] {
            if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
                vlan.insert(k.into(), x.clone());
            }
        }
        if vlan.get("link").is_none() || vlan.get("id").is_none() {
            out.errors
                .push(format!("{at}: spec.config.vlans[{i}] needs link and id"));
            continue;
        }
        vlans.push(Value::Object(vlan));
    }
    let mut routes = Vec::new();
    for r in config["routes"].as_array().into_iter().flatten() {
        let mut route = Map::new();
        for (from, to) in [
            ("to", "to"),
            ("via", "via"),
            ("dev", "dev"),
            ("table", "table"),
            ("scope", "scope"),
            ("on-link", "onlink"),
        ] {
            if let Some(x) = r.get(from).filter(|x| !x.is_null()) {
                route.insert(to.into(), x.clone());
            }
        }
        if r["on-link"] == true && r.get("dev").is_none_or(Value::is_null) {
            out.errors.push(format!(
                "{at}: route {}: on-link without dev: the kernel needs the output device for \
                 an on-link gateway; add `dev` to the converted route",
                r["to"].as_str().unwrap_or("?")
            ));
        }
        if r.get("protocol").is_some_and(|p| !p.is_null()) {
            out.notes.push(format!(
                "{at}: route {} drops `protocol: {}` (netpolicy marks its routes with protocol 203)",
                r["to"].as_str().unwrap_or("?"),
                r["protocol"].as_str().unwrap_or("?")
            ));
        }
        routes.push(Value::Object(route));
    }
    let mut rules = Vec::new();
    for r in config["rules"].as_array().into_iter().flatten() {
        let mut rule = Map::new();
        rule.insert("priority".into(), json!(*next_priority));
        for k in ["from", "table"] {
            if let Some(x) = r.get(k).filter(|x| !x.is_null()) {
                rule.insert(k.into(), x.clone());
            }
        }
        out.notes.push(format!(
            "{at}: rule from {} table {} gets priority {} (ipruler rules have none: check \
             against `ip rule show` on a node)",
            r["from"].as_str().unwrap_or("any"),
            r["table"],
            *next_priority
        ));
        *next_priority += 1;
        rules.push(Value::Object(rule));
    }
    let hard = &config["settings"]["table-hard-sync"];
    if !vlans.is_empty() {
        spec.insert("vlans".into(), Value::Array(vlans));
    }
    if !routes.is_empty() {
        spec.insert("routes".into(), Value::Array(routes));
    }
    if !rules.is_empty() {
        spec.insert("rules".into(), Value::Array(rules));
    }
    if hard.as_array().is_some_and(|a| !a.is_empty()) {
        spec.insert("tableHardSync".into(), hard.clone());
    }
    spec
}

/// Converts `docs` (each with where it came from, for messages).
pub(crate) fn convert(docs: impl IntoIterator<Item = (String, Value)>) -> Converted {
    let mut out = Converted::default();
    let mut next_priority = FIRST_RULE_PRIORITY;
    let mut cluster: Option<Map<String, Value>> = None;
    let mut cluster_names = Vec::new();
    let mut rest = Vec::new();
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
                rest.push(json!({"apiVersion": OURS, "kind": "NodeConfig",
                                 "metadata": {"name": name}, "spec": spec}));
            }
            (KUBEFIP, "FloatingIPRange") => {
                let Some(cidr) = d["spec"]["iprange"].as_str() else {
                    out.errors.push(format!("{at}: spec.iprange is missing"));
                    continue;
                };
                for a in ["cloudCredentialSecret", "harvesterNetworkName"] {
                    if let Some(v) = d["metadata"]["annotations"][a].as_str() {
                        out.notes.push(format!(
                            "{at}: annotation {a}={v} has no counterpart (Rancher/Harvester); \
                             pick the range with autoAllocate or FloatingIP spec.range"
                        ));
                    }
                }
                rest.push(json!({"apiVersion": OURS, "kind": "FloatingIPRange",
                                 "metadata": {"name": name}, "spec": {"cidrs": [cidr]}}));
            }
            (KUBEFIP, "FloatingIP") => {
                let ns = d["metadata"]["namespace"].as_str().unwrap_or_default();
                let Some(range) = d["metadata"]["annotations"]["fiprange"].as_str() else {
                    out.errors.push(format!(
                        "{at}: no fiprange annotation: netpolicy needs spec.range"
                    ));
                    continue;
                };
                let mut spec = Map::new();
                spec.insert("range".into(), json!(range));
                if let Some(a) = d["spec"]["ipaddress"].as_str().filter(|a| !a.is_empty()) {
                    spec.insert("address".into(), json!(a));
                }
                if d["metadata"]["annotations"]["updateConfigMap"] == "true" {
                    out.notes.push(format!(
                        "{at}: updateConfigMap=true: set kubeVip.publish (and \
                         guestKubeconfigSecret) on FloatingIPRange {range}"
                    ));
                }
                let mut metadata = json!({"name": name});
                if !ns.is_empty() {
                    metadata["namespace"] = json!(ns);
                }
                rest.push(json!({"apiVersion": OURS, "kind": "FloatingIP",
                                 "metadata": metadata, "spec": spec}));
            }
            (IPRULER | KUBEFIP, k) => {
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
        if cluster_names.len() > 1 {
            out.notes.push(format!(
                "ipruler ClusterConfigs {} are merged into the one ClusterConfig `default`",
                cluster_names.join(", ")
            ));
        }
        out.objects
            .push(json!({"apiVersion": OURS, "kind": "ClusterConfig",
                                "metadata": {"name": "default"}, "spec": spec}));
    }
    out.objects.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let c = convert(docs.into_iter().map(|d| ("in.yaml".to_owned(), d)));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.passed, 1);
        assert_eq!(
            c.objects[0],
            json!({"apiVersion": OURS, "kind": "ClusterConfig", "metadata": {"name": "default"},
                   "spec": {"rules": [{"priority": 1000, "from": "172.31.201.11/32", "table": 102},
                                      {"priority": 1001, "from": "172.31.201.12/32", "table": 102}],
                            "tableHardSync": [102]}})
        );
        assert_eq!(
            c.objects[1]["spec"],
            json!({"nodeSelector": {"matchLabels": {"networking.type": "eth2-vlan-104"}},
                   "vlans": [{"name": "eth2.104", "link": "eth2", "id": 104}],
                   "routes": [{"to": "default", "via": "172.31.201.1", "dev": "eth2.104",
                               "table": 102, "onlink": true}]})
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("merged into the one ClusterConfig"))
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("drops `protocol: static`"))
        );
        assert!(c.notes.iter().any(|n| n.contains("gets priority 1001")));
    }

    #[test]
    fn kube_fip_objects_become_ours_and_what_has_no_counterpart_is_said() {
        let docs = [
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIPRange",
                   "metadata": {"name": "guest-vlan",
                                "annotations": {"cloudCredentialSecret": "cc-bsvdq"}},
                   "spec": {"iprange": "10.135.10.192/26"}}),
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIP",
                   "metadata": {"name": "demo-vip", "namespace": "c-m-ngd5hs2r",
                                "annotations": {"fiprange": "guest-vlan", "updateConfigMap": "true"}},
                   "spec": {"ipaddress": "10.135.10.200"}}),
            json!({"apiVersion": KUBEFIP, "kind": "FloatingIP",
                   "metadata": {"name": "lost", "namespace": "x"}, "spec": {}}),
        ];
        let c = convert(docs.into_iter().map(|d| ("fip.yaml".to_owned(), d)));
        assert_eq!(c.objects[0]["spec"], json!({"cidrs": ["10.135.10.192/26"]}));
        assert_eq!(
            c.objects[1],
            json!({"apiVersion": OURS, "kind": "FloatingIP",
                   "metadata": {"name": "demo-vip", "namespace": "c-m-ngd5hs2r"},
                   "spec": {"range": "guest-vlan", "address": "10.135.10.200"}})
        );
        assert_eq!(c.errors.len(), 1, "{:?}", c.errors);
        assert!(c.errors[0].contains("FloatingIP/lost"));
        assert!(c.notes.iter().any(|n| n.contains("cloudCredentialSecret")));
        assert!(c.notes.iter().any(|n| n.contains("kubeVip.publish")));
    }
}
