//! `netpolicy convert`: ipruler's (`ipruler.pegah.tech/v1`), kube-fip's
//! (`kubefip.k8s.binbash.org/v1`) and Meridio's (`meridio.nordix.org/v1` and `v1alpha1`:
//! kebab-case fields, the nested interface) objects turned into netpolicy's, for
//! manifests on disk (docs/migration.md has the table). Pure: documents in, documents
//! and notes out.
//!
//! What has no counterpart is said, never guessed silently: an ipruler rule has no
//! priority (the kernel picks one), so converted rules get 1000, 1001, … in order and a
//! note asks to check them against `ip rule show`; an ipruler ClusterConfig's items go into
//! every converted NodeConfig (ipruler's FullConfig: they reach the nodes some NodeConfig
//! selects, no other); kube-fip's Rancher annotations are noted and dropped.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

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

/// The device of the most specific route of `config` with a device and no gateway whose
/// destination holds `gateway`, and that route's destination.
fn device_towards(config: &Value, gateway: &str) -> Option<(String, String)> {
    let gw: std::net::IpAddr = gateway.parse().ok()?;
    config["routes"]
        .as_array()?
        .iter()
        .filter(|r| r.get("via").is_none_or(Value::is_null))
        .filter_map(|r| {
            let dev = r["dev"].as_str()?;
            let to: ipnetwork::IpNetwork = r["to"].as_str()?.parse().ok()?;
            to.contains(gw)
                .then(|| (to.prefix(), dev.to_owned(), to.to_string()))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, dev, to)| (dev, to))
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
            // ipruler finds the device when it applies, from the route to the gateway:
            // the same here, from this config's routes.
            match r["via"].as_str().and_then(|gw| device_towards(config, gw)) {
                Some((dev, by)) => {
                    out.notes.push(format!(
                        "{at}: route {}: on-link without dev: dev {dev} (from route {by}, \
                         the route to the gateway, as ipruler finds it when it applies)",
                        r["to"].as_str().unwrap_or("?")
                    ));
                    route.insert("dev".into(), json!(dev));
                }
                None => out.errors.push(format!(
                    "{at}: route {}: on-link without dev: the kernel needs the output device \
                     for an on-link gateway and no route of this config leads to the gateway \
                     through one; add `dev` to the converted route",
                    r["to"].as_str().unwrap_or("?")
                )),
            }
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
             against `ip rule show` on a node; converting in several runs, give each run \
             its own --rule-priority-start)",
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

/// The namespace `convert` gives routedip-operator's token Secret (its issuer names the
/// Secret without one).
const ROUTEDIP_TOKEN_NAMESPACE: &str = "netpolicy-system";

/// The provider a routedip-operator class or `issuerClass` names (`digitalocean.com/
/// floating-ip`, `digitalocean`, `aws`), as the key of our issuer's spec.
fn routedip_provider(class: &str) -> Option<&'static str> {
    ["digitalocean", "hetzner", "aws"]
        .into_iter()
        .find(|p| class.to_ascii_lowercase().contains(p))
}

/// routedip-operator's `ClusterRoutedIPIssuer` as our `RoutedIPIssuer` of the same name;
/// `None` (an error said) when its class names no provider netpolicy has.
fn routed_ip_issuer(d: &Value, name: &str, at: &str, out: &mut Converted) -> Option<Value> {
    let spec = &d["spec"];
    let class = spec["className"].as_str().unwrap_or_default();
    let Some(provider) = routedip_provider(class) else {
        out.errors.push(format!(
            "{at}: spec.className {class:?} names no provider netpolicy has (digitalocean, \
             hetzner, aws)"
        ));
        return None;
    };
    let secret = spec["fromSecretsRef"].as_str().unwrap_or_default();
    let mut issuer = Map::new();
    if provider != "aws" {
        issuer.insert(
            "tokenSecretRef".into(),
            json!({"namespace": ROUTEDIP_TOKEN_NAMESPACE, "name": secret, "key": "token"}),
        );
        out.notes.push(format!(
            "{at}: spec.fromSecretsRef {secret:?} → tokenSecretRef \
             {ROUTEDIP_TOKEN_NAMESPACE}/{secret} key token: copy the token there (and list \
             the Secret in the chart's routedIPs.tokenSecrets)"
        ));
    } else if !secret.is_empty() {
        issuer.insert(
            "credentialsSecretRef".into(),
            json!({"namespace": ROUTEDIP_TOKEN_NAMESPACE, "name": secret}),
        );
    }
    // The seed creates IPs without saying where; netpolicy's provider needs it.
    let (field, example) = match provider {
        "hetzner" => ("location", "fsn1"),
        _ => ("region", "fra1"),
    };
    issuer.insert(field.into(), json!(""));
    out.errors.push(format!(
        "{at}: spec.{provider}.{field} has no source in the seed's issuer: set it (such as \
         {example}) where the IPs live"
    ));
    for (key, why) in [
        (
            "firewallPostAllow",
            "netpolicy always opens ports and adds the new holder before the IP moves, \
             and closes what is stale only after",
        ),
        (
            "nodePortRange",
            "the firewall opens the Service's ports (its port fields), not a NodePort range",
        ),
        (
            "perNodeIPLimit",
            "each RoutedIP is elected on its own; a node may hold several",
        ),
        (
            "updateRoutedIPSpec",
            "the operator calls the provider's API itself: no Jobs",
        ),
        (
            "updateFirewallSpec",
            "the operator calls the provider's API itself: no Jobs",
        ),
    ] {
        if !spec[key].is_null() {
            out.notes.push(format!(
                "{at}: spec.{key} has no netpolicy counterpart; dropped ({why})"
            ));
        }
    }
    Some(
        json!({"apiVersion": OURS, "kind": "RoutedIPIssuer", "metadata": {"name": name},
                "spec": {provider: issuer}}),
    )
}

/// routedip-operator's namespaced `RoutedIP` (either group) as our cluster-scoped one of
/// the same name, adopting `spec.routedIP`; its issuer is the converted issuer of its
/// class (or, for `issuerClass`, of its provider).
fn routed_ip(
    d: &Value,
    at: &str,
    issuers: &[(String, String)],
    out: &mut Converted,
) -> Option<Value> {
    let name = name_of(d);
    let namespace = d["metadata"]["namespace"].as_str().unwrap_or("default");
    let spec = &d["spec"];
    let issuer = match (spec["className"].as_str(), spec["issuerClass"].as_str()) {
        (Some(class), _) => issuers.iter().find(|(c, _)| c == class),
        (None, Some(class)) => routedip_provider(class).and_then(|p| {
            issuers
                .iter()
                .find(|(c, _)| routedip_provider(c) == Some(p))
        }),
        (None, None) => None,
    };
    let Some((_, issuer)) = issuer else {
        let class = spec["className"]
            .as_str()
            .or_else(|| spec["issuerClass"].as_str())
            .unwrap_or_default();
        out.errors.push(format!(
            "{at}: no issuer in the input for class {class:?}: convert it together with \
             its ClusterRoutedIPIssuer, or write spec.issuerRef by hand"
        ));
        return None;
    };
    let mut ours = Map::new();
    ours.insert("issuerRef".into(), json!({"name": issuer}));
    if let Some(ip) = spec["routedIP"].as_str().filter(|ip| !ip.is_empty()) {
        ours.insert("address".into(), json!(ip));
    }
    if let Some(service) = spec["serviceRef"]["name"].as_str() {
        let ns = spec["serviceRef"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(namespace);
        ours.insert(
            "serviceRef".into(),
            json!({"namespace": ns, "name": service}),
        );
    }
    ours.insert("reclaimPolicy".into(), json!("Retain"));
    out.notes.push(format!(
        "{at}: RoutedIP {name} is cluster-scoped in netpolicy (the seed's was in namespace \
         {namespace}); spec.routedIP is adopted as spec.address, never allocated again, and \
         its holder stays while eligible. Among new candidates the oldest node wins (the \
         seed took the youngest, the node likeliest to be a replacement still settling)"
    ));
    Some(
        json!({"apiVersion": OURS, "kind": "RoutedIP", "metadata": {"name": name},
                "spec": ours}),
    )
}

/// With no `kube-fip-config` in the input, whether kube-fip installed kube-vip in the
/// guests is unknown here: said once for the converted ranges that publish to guests.
fn guest_install_unknown(rest: &[Value], out: &mut Converted) {
    let guests: Vec<String> = rest
        .iter()
        .filter(|o| o["apiVersion"] == OURS && o["kind"] == "FloatingIPRange")
        .filter(|o| o["spec"]["kubeVip"]["guests"].is_object())
        .map(name_of)
        .collect();
    if !guests.is_empty() {
        out.notes.push(format!(
            "FloatingIPRange(s) {}: kube-fip's kubevipGuestInstall is in its ConfigMap \
             kube-fip-config, which is not in this input (kube-fip's default: \
             clusterlabel): set kubeVip.guests.install (enabled or clusterLabel) to install \
             kube-vip in the guests, or convert the ConfigMap together with the ranges",
            guests.join(", ")
        ));
    }
}

/// A kube-fip FloatingIPRange as ours; `None` (an error said) when it has no range.
fn kube_fip_range(d: &Value, name: &str, at: &str, out: &mut Converted) -> Option<Value> {
    let Some(cidr) = d["spec"]["iprange"].as_str() else {
        out.errors.push(format!("{at}: spec.iprange is missing"));
        return None;
    };
    let ann = &d["metadata"]["annotations"];
    let mut spec = json!({"cidrs": [cidr]});
    if let Some(cluster) = ann["harvesterClusterName"].as_str() {
        // A Harvester guest range: kube-fip gives each new c-m-… namespace of
        // a guest on that cluster (and network) a FloatingIP from it and
        // publishes it in the guest.
        let mut h = json!({"cluster": cluster});
        if let Some(n) = ann["harvesterNetworkName"].as_str() {
            h["network"] = json!(n);
        }
        spec["harvester"] = h;
        spec["autoAllocate"] = json!({"namespaceNamePrefix": "c-m-"});
        spec["kubeVip"] = json!({"publish": true, "guests": {"discovery": "rancher"}});
        out.notes.push(format!(
            "{at}: Harvester range: spec.harvester, autoAllocate in c-m-* \
                 namespaces and kubeVip.guests (discovery rancher) set; run the \
                 operator with --rancher-clusters (chart floatingIPs.rancher.enabled, \
                 .harvester)"
        ));
    } else if let Some(n) = ann["harvesterNetworkName"].as_str() {
        out.notes.push(format!(
            "{at}: annotation harvesterNetworkName={n} without \
                 harvesterClusterName: dropped (a network is matched within a cluster)"
        ));
    }
    kube_fip_annotations(
        ann,
        &[
            "harvesterClusterName",
            "harvesterNetworkName",
            "cloudCredentialSecret",
        ],
        at,
        out,
    );
    match (
        ann["cloudCredentialSecret"].as_str(),
        ann["harvesterClusterName"].is_string(),
    ) {
        (Some(v), true) => out.notes.push(format!(
            "{at}: annotation cloudCredentialSecret={v} is not needed: a guest's \
                 cloud credential is read from its Rancher Cluster"
        )),
        // kube-fip v0.1: the range served the guests made with this cloud
        // credential. netpolicy ties a range to guests by the Harvester
        // cluster that credential reaches, which only the cluster knows.
        (Some(v), false) => out.notes.push(format!(
            "{at}: annotation cloudCredentialSecret={v} (kube-fip v0.1) tied this \
                 range to the guests made with that cloud credential; netpolicy ties \
                 a range to guests by spec.harvester.cluster, the Harvester cluster \
                 the credential reaches (its harvestercredentialConfig-clusterId): \
                 set spec.harvester.cluster (and autoAllocate: {{namespaceNamePrefix: \
                 c-m-}}); until then this range serves no guest by itself"
        )),
        (None, _) => {}
    }
    Some(json!({"apiVersion": OURS, "kind": "FloatingIPRange",
                         "metadata": {"name": name}, "spec": spec}))
}

/// A kube-fip FloatingIP as ours; `None` (an error said) when it names no range.
fn kube_fip_floating_ip(d: &Value, name: &str, at: &str, out: &mut Converted) -> Option<Value> {
    let ns = d["metadata"]["namespace"].as_str().unwrap_or_default();
    let Some(range) = d["metadata"]["annotations"]["fiprange"].as_str() else {
        out.errors.push(format!(
            "{at}: no fiprange annotation: netpolicy needs spec.range"
        ));
        return None;
    };
    let mut spec = Map::new();
    spec.insert("range".into(), json!(range));
    if let Some(a) = d["spec"]["ipaddress"].as_str().filter(|a| !a.is_empty()) {
        spec.insert("address".into(), json!(a));
    }
    let ann = &d["metadata"]["annotations"];
    if ann["updateConfigMap"] == "true" {
        out.notes.push(format!(
            "{at}: updateConfigMap=true: FloatingIPRange {range} needs \
                 kubeVip: {{publish: true, guests: {{discovery: rancher}}}} (set on \
                 Harvester ranges by this conversion)"
        ));
    }
    if ann["updateConfigMap"] == "false" {
        out.notes.push(format!(
            "{at}: updateConfigMap=false: kube-fip wrote the guest's kube-vip \
                 ConfigMap once and never again; netpolicy keeps it in step (repairs \
                 it) for ranges with kubeVip.guests, and leaves it alone for ranges \
                 without: FloatingIPRange {range} decides"
        ));
    }
    if let Some(c) = ann["clustername"].as_str() {
        out.notes.push(format!(
            "{at}: annotation clustername={c}: the guest is the Rancher Cluster \
                 whose status.clusterName is {ns:?} (no field needed)"
        ));
    }
    kube_fip_annotations(
        ann,
        &["fiprange", "clustername", "updateConfigMap"],
        at,
        out,
    );
    let mut metadata = json!({"name": name});
    if !ns.is_empty() {
        metadata["namespace"] = json!(ns);
    }
    Some(json!({"apiVersion": OURS, "kind": "FloatingIP",
                         "metadata": metadata, "spec": spec}))
}

/// The name of kube-fip's operator ConfigMap.
const KUBE_FIP_CONFIG: &str = "kube-fip-config";

/// kube-fip's operator ConfigMap: each key where netpolicy keeps it (docs/migration.md),
/// set on the converted ranges that publish to guests; what lives elsewhere is said.
fn apply_kube_fip_config(at: &str, data: &Value, rest: &mut [Value], out: &mut Converted) {
    let at = format!("{at}: kube-fip's configuration");
    let get = |k: &str| data[k].as_str().map(str::trim);
    let mut guests: Map<String, Value> = Map::new();
    // kube-fip lower-cases the value, and an absent or empty key is its default,
    // clusterlabel (its config.go): the converted ranges keep doing what kube-fip did.
    match get("kubevipGuestInstall")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("enabled") => {
            guests.insert("install".into(), json!("enabled"));
        }
        Some("clusterlabel") => {
            guests.insert("install".into(), json!("clusterLabel"));
        }
        Some("") | None => {
            guests.insert("install".into(), json!("clusterLabel"));
            out.notes.push(format!(
                "{at}: no kubevipGuestInstall: kube-fip's default, clusterlabel, is \
                 kubeVip.guests.install: clusterLabel on the ranges that publish to guests"
            ));
        }
        Some("disabled" | "false") => {}
        Some(v) => out.errors.push(format!(
            "{at}: kubevipGuestInstall={v:?} is not enabled, clusterlabel or disabled"
        )),
    }
    if let Some(v) = get("kubevipUpdate") {
        guests.insert("update".into(), json!(v == "true"));
    }
    if let Some(v) = get("operateGuestClusterInterval") {
        match v.trim_end_matches('s').parse::<u32>() {
            Ok(n) => {
                guests.insert("intervalSeconds".into(), json!(n.max(10)));
            }
            Err(_) => out.errors.push(format!(
                "{at}: operateGuestClusterInterval={v:?} is not a number of seconds"
            )),
        }
    }
    let namespace = get("kubevipNamespace").filter(|n| !n.is_empty());
    let mut set = Vec::new();
    for o in rest
        .iter_mut()
        .filter(|o| o["apiVersion"] == OURS && o["kind"] == "FloatingIPRange")
    {
        let Some(kv) = o["spec"]["kubeVip"].as_object_mut() else {
            continue;
        };
        if let Some(n) = namespace {
            kv.insert("namespace".into(), json!(n));
        }
        if let Some(g) = kv.get_mut("guests").and_then(Value::as_object_mut) {
            g.extend(guests.clone());
        }
        set.push(name_of(o));
    }
    let keys: Vec<&str> = [
        "kubevipNamespace",
        "kubevipGuestInstall",
        "kubevipUpdate",
        "operateGuestClusterInterval",
    ]
    .into_iter()
    .filter(|k| get(k).is_some())
    .collect();
    if !keys.is_empty() {
        out.notes.push(if set.is_empty() {
            format!(
                "{at}: {} have no range to go on here (no converted range publishes to \
                 kube-vip): they are kubeVip.namespace and kubeVip.guests.install, .update, \
                 .intervalSeconds of a FloatingIPRange",
                keys.join(", ")
            )
        } else {
            format!(
                "{at}: {} set on FloatingIPRange(s) {} (kubeVip.namespace, kubeVip.guests)",
                keys.join(", "),
                set.join(", ")
            )
        });
    }
    if get("kubevipChartValues").is_some() {
        out.notes.push(format!(
            "{at}: kubevipChartValues are Helm values kube-fip passed to kube-vip's chart: \
             set their counterparts in kubeVip.guests.kubeVip (image, interface, \
             nodeSelector, arp) and kubeVip.guests.cloudProvider.image by hand"
        ));
    }
    if get("traceIpamData") == Some("true") {
        out.notes.push(format!(
            "{at}: traceIpamData=true is the operator's --trace-ipam-data (chart \
             floatingIPs.traceIpamData)"
        ));
    }
    kube_fip_config_elsewhere(&at, data, out);
    out.notes.push(format!(
        "{at}: the ConfigMap is not kept (netpolicy reads none)"
    ));
}

/// The keys of `kube-fip-config` that no converted object carries: each named, with
/// where its counterpart lives (the chart's values) or why it has none.
fn kube_fip_config_elsewhere(at: &str, data: &Value, out: &mut Converted) {
    const CARRIED: [&str; 6] = [
        "kubevipNamespace",
        "kubevipGuestInstall",
        "kubevipUpdate",
        "operateGuestClusterInterval",
        "kubevipChartValues",
        "traceIpamData",
    ];
    let Some(data) = data.as_object() else {
        return;
    };
    for (key, value) in data {
        if CARRIED.contains(&key.as_str()) {
            continue;
        }
        let value = value.as_str().unwrap_or_default().trim();
        let where_ = match key.as_str() {
            "logLevel" => format!(
                "the operator's log filter is the chart value operator.logLevel (RUST_LOG: \
                 {:?} there)",
                value.to_ascii_lowercase()
            ),
            "metricsPort" => "the operator's /metrics port is the chart value \
                              operator.metricsPort (default 8080, as kube-fip's)"
                .to_owned(),
            "kubevipReleaseName"
            | "kubevipChartRepoUrl"
            | "kubevipChartRef"
            | "kubevipChartVersion"
            | "kubevipCloudProviderReleaseName"
            | "kubevipCloudProviderChartRef"
            | "kubevipCloudProviderChartVersion" => "netpolicy installs kube-vip and \
                 kube-vip-cloud-provider from manifests of its own, not Helm charts: no \
                 counterpart (their images are kubeVip.guests.kubeVip.image and \
                 .cloudProvider.image)"
                .to_owned(),
            "kubevipCloudProviderChartValues" => "Helm values of kube-vip-cloud-provider's \
                 chart: set their counterpart kubeVip.guests.cloudProvider.image by hand"
                .to_owned(),
            "removeHarvesterCloudProvider" | "harvesterCloudProviderNamespace" => {
                "netpolicy does not remove Harvester's cloud provider from a guest: remove \
                 it by hand where kube-vip-cloud-provider replaces it"
                    .to_owned()
            }
            _ => "not a key netpolicy's convert knows: dropped".to_owned(),
        };
        out.notes
            .push(format!("{at}: {key}={value:?} is not converted: {where_}"));
    }
}

/// ipruler's FullConfig: `node`'s items, then each of `cluster`'s that `node` has no item
/// of the same identity for (VLAN name, route table/destination/metric, address, rule
/// priority and selector); table lists united.
fn full_config(node: &mut Map<String, Value>, cluster: &Map<String, Value>) {
    let identity = |field: &str, v: &Value| -> Value {
        match field {
            "vlans" => json!([v["name"], v["link"], v["id"]]),
            "routes" => json!([v["to"], v["table"], v["metric"]]),
            "addresses" => json!([v["dev"], v["address"]]),
            "rules" => {
                let mut k = v.clone();
                if let Some(o) = k.as_object_mut() {
                    o.remove("table");
                    o.remove("action");
                }
                k
            }
            _ => v.clone(),
        }
    };
    for (field, items) in cluster {
        let Value::Array(items) = items else {
            continue;
        };
        let have = node
            .entry(field.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(have) = have else {
            continue;
        };
        for item in items {
            let id = identity(field, item);
            if !have.iter().any(|h| identity(field, h) == id) {
                have.push(item.clone());
            }
        }
    }
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

/// The seed route-reflector operator's settings: the environment of a Deployment's
/// containers when it has any `ROUTE_REFLECTOR_*` or `DATASTORE_TYPE` variable (plain
/// values; `valueFrom` entries are kept as `None`).
fn seed_rr_env(d: &Value) -> Option<BTreeMap<String, Option<String>>> {
    let mut env = BTreeMap::new();
    for c in d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for e in c["env"].as_array().into_iter().flatten() {
            if let Some(name) = e["name"].as_str() {
                env.insert(name.to_owned(), e["value"].as_str().map(str::to_owned));
            }
        }
    }
    env.keys()
        .any(|k| k.starts_with("ROUTE_REFLECTOR_") || k == "DATASTORE_TYPE")
        .then_some(env)
}

/// calico-route-reflector-operator's environment as RouteReflectorConfig `default`.
/// Its defaults are written out (max 10, what its code uses at every tag; no zone
/// label: no zones, one count and one cluster ID for the whole cluster; cluster ID
/// 224.0.0.0; any taint tolerated, as it skips only unready and unschedulable nodes), so
/// the topology stays what it was.
/// The Secret `convert` names for the seed's `K8S_API_ENDPOINT` cluster's kubeconfig.
const REMOTE_KUBECONFIG_SECRET: &str = "calico-cluster-kubeconfig";

fn route_reflector_config(
    env: &BTreeMap<String, Option<String>>,
    at: &str,
    namespace: &str,
    out: &mut Converted,
) -> Value {
    let mut spec = Map::new();
    let get = |k: &str| env.get(k).cloned().flatten();
    for (k, v) in env {
        if v.is_none() && (k.starts_with("ROUTE_REFLECTOR_") || k == "DATASTORE_TYPE") {
            out.notes.push(format!(
                "{at}: {k} comes from valueFrom: netpolicy cannot read it here; set the \
                 matching RouteReflectorConfig field by hand"
            ));
        }
    }
    let number = |k: &str, default: f64, out: &mut Converted| -> f64 {
        match get(k) {
            None => default,
            Some(v) => v.trim().parse::<f64>().unwrap_or_else(|_| {
                out.errors.push(format!("{at}: {k}={v:?} is not a number"));
                default
            }),
        }
    };
    spec.insert(
        "min".into(),
        json!(number("ROUTE_REFLECTOR_MIN", 3.0, out) as u32),
    );
    // The seed's code has used 10 at every tag (its README says 25).
    let max = number("ROUTE_REFLECTOR_MAX", 10.0, out) as u32;
    spec.insert("max".into(), json!(max));
    spec.insert(
        "ratio".into(),
        json!(number("ROUTE_REFLECTOR_RATIO", 0.005, out)),
    );
    spec.insert("clusterID".into(), json!(rr_cluster_id(env, at, out)));
    match get("ROUTE_REFLECTOR_ZONE_LABEL").filter(|z| !z.is_empty()) {
        Some(zone) => {
            spec.insert("zoneLabel".into(), json!(zone));
            spec.insert("per".into(), json!("zone"));
        }
        None => {
            // The seed without a zone label knows no zones: the whole cluster is one,
            // with one cluster ID, whatever zone labels the nodes carry.
            spec.insert("zoneLabel".into(), json!(""));
            spec.insert("per".into(), json!("cluster"));
        }
    }
    // The seed skips only unready and unschedulable nodes: a tainted node (a control
    // plane's) may be its reflector, and stays one.
    spec.insert("tolerations".into(), json!([{"operator": "Exists"}]));
    let label =
        get("ROUTE_REFLECTOR_NODE_LABEL").unwrap_or_else(|| "calico-route-reflector=".into());
    let (key, value) = label.split_once('=').unwrap_or((label.as_str(), ""));
    spec.insert("reflectorLabel".into(), json!(key.trim()));
    if !value.is_empty() {
        out.notes.push(format!(
            "{at}: ROUTE_REFLECTOR_NODE_LABEL={label}: netpolicy sets the key {key:?} on \
             reflector nodes with its own value; a selector on the value {value:?} must change"
        ));
    }
    if let Some(list) =
        get("ROUTE_REFLECTOR_INCOMPATIBLE_NODE_LABELS").filter(|l| !l.trim().is_empty())
    {
        let exprs: Vec<Value> = list
            .split(',')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| match l.split_once('=') {
                Some((k, v)) => json!({"key": k, "operator": "NotIn", "values": [v]}),
                None => json!({"key": l, "operator": "DoesNotExist"}),
            })
            .collect();
        spec.insert("eligibleNodes".into(), json!({"matchExpressions": exprs}));
    }
    match get("ROUTE_REFLECTOR_TOPOLOGY").as_deref() {
        None | Some("simple" | "single") => {}
        Some("multi") => {
            spec.insert("topology".into(), json!("multi"));
        }
        Some(t) => out.errors.push(format!(
            "{at}: ROUTE_REFLECTOR_TOPOLOGY={t:?} is neither simple nor multi"
        )),
    }
    spec.insert(
        "stepDelaySeconds".into(),
        json!(number("ROUTE_REFLECTOR_WAIT_TIMEOUT", 0.0, out) as u32),
    );
    rr_datastore(env, at, namespace, &mut spec, out);
    let known = [
        "ROUTE_REFLECTOR_MIN",
        "ROUTE_REFLECTOR_MAX",
        "ROUTE_REFLECTOR_RATIO",
        "ROUTE_REFLECTOR_CLUSTER_ID",
        "ROUTE_REFLECTOR_ZONE_LABEL",
        "ROUTE_REFLECTOR_NODE_LABEL",
        "ROUTE_REFLECTOR_INCOMPATIBLE_NODE_LABELS",
        "ROUTE_REFLECTOR_TOPOLOGY",
        "ROUTE_REFLECTOR_WAIT_TIMEOUT",
    ];
    for k in env
        .keys()
        .filter(|k| k.starts_with("ROUTE_REFLECTOR_") && !known.contains(&k.as_str()))
    {
        out.notes
            .push(format!("{at}: {k} has no netpolicy counterpart; dropped"));
    }
    json!({"apiVersion": OURS, "kind": "RouteReflectorConfig",
           "metadata": {"name": "default"}, "spec": spec})
}

/// The seed's `ROUTE_REFLECTOR_CLUSTER_ID` as `clusterID`. The seed takes a template:
/// its simple topology fills each `%d` with `fmt.Sprintf(id, 1)` (so `224.0.0.%d` is
/// `224.0.0.1` on every reflector), its multi topology gives each reflector its own ID. In
/// netpolicy `clusterID` is the first ID, counted up per zone (`per: zone`) or per
/// reflector (`multi`): the template's first ID, the last `%d` as 1 and any earlier as 0.
fn rr_cluster_id(env: &BTreeMap<String, Option<String>>, at: &str, out: &mut Converted) -> String {
    let Some(template) = env.get("ROUTE_REFLECTOR_CLUSTER_ID").cloned().flatten() else {
        out.notes.push(format!(
            "{at}: ROUTE_REFLECTOR_CLUSTER_ID unset: 224.0.0.0, the seed's default since \
             v0.0.4 (images up to v0.0.3 used 224.0.0.1): check the reflector nodes' \
             routeReflectorClusterID before applying"
        ));
        return "224.0.0.0".into();
    };
    let holes = template.matches("%d").count();
    let mut id = String::new();
    for (i, part) in template.split("%d").enumerate() {
        id.push_str(part);
        if i < holes {
            id.push(if i + 1 == holes { '1' } else { '0' });
        }
    }
    if id.trim().parse::<std::net::Ipv4Addr>().is_err() {
        out.errors.push(format!(
            "{at}: ROUTE_REFLECTOR_CLUSTER_ID={template:?} is not an IPv4 address (nor the \
             seed's template of one, such as 224.0.0.%d): write clusterID as an IPv4 address"
        ));
        return template;
    }
    if holes > 0 {
        out.notes.push(format!(
            "{at}: ROUTE_REFLECTOR_CLUSTER_ID={template} is the seed's template: its simple \
             topology writes {id} on every reflector, its multi topology an ID per reflector; \
             clusterID {id} is netpolicy's first cluster ID, counted up per zone (per: zone) \
             or per reflector (multi): check the reflector nodes' routeReflectorClusterID \
             before applying"
        ));
    }
    id.trim().to_owned()
}

/// Calico client settings (libcalico-go's `apiconfig`, calicoctl's inline forms) that
/// [`rr_datastore`] does not take: said, then dropped.
const CALICO_CLIENT_DROPPED: &[(&str, &str)] = &[
    (
        "K8S_KEY_FILE",
        "a remote cluster's credentials go into its kubeconfig Secret",
    ),
    (
        "K8S_CERT_FILE",
        "a remote cluster's credentials go into its kubeconfig Secret",
    ),
    (
        "K8S_CA_FILE",
        "a remote cluster's credentials go into its kubeconfig Secret",
    ),
    (
        "K8S_API_TOKEN",
        "a remote cluster's credentials go into its kubeconfig Secret",
    ),
    (
        "K8S_CURRENT_CONTEXT",
        "the kubeconfig Secret's current context is used",
    ),
    (
        "K8S_INSECURE_SKIP_TLS_VERIFY",
        "netpolicy always verifies the API server",
    ),
    ("K8S_DISABLE_NODE_POLL", "netpolicy watches Nodes"),
    ("USE_POD_CIDR", "IPAM is not the route-reflector job's"),
    (
        "CALICO_API_GROUP",
        "netpolicy reads and writes Calico's kinds in crd.projectcalico.org/v1 in the \
         Kubernetes datastore, and as projectcalico.org/v3 objects in etcd",
    ),
    (
        "ETCD_KEY",
        "inline certificates go into datastore.etcdv3.tlsSecretRef's Secret",
    ),
    (
        "ETCD_CERT",
        "inline certificates go into datastore.etcdv3.tlsSecretRef's Secret",
    ),
    (
        "ETCD_CA_CERT",
        "inline certificates go into datastore.etcdv3.tlsSecretRef's Secret",
    ),
];

/// The seed's `DATASTORE_TYPE` (and its etcd and remote-cluster settings) as
/// `spec.datastore`, with what must be done by hand in `out`.
fn rr_datastore(
    env: &BTreeMap<String, Option<String>>,
    at: &str,
    namespace: &str,
    spec: &mut Map<String, Value>,
    out: &mut Converted,
) {
    let get = |k: &str| env.get(k).cloned().flatten();
    match get("DATASTORE_TYPE").as_deref() {
        None | Some("incluster") => {}
        Some("kubernetes")
            if env.contains_key("K8S_API_ENDPOINT") || env.contains_key("KUBECONFIG") =>
        {
            // Another cluster's datastore, whether the endpoint is written out or comes
            // from a Secret: never this cluster's in its place.
            let endpoint = get("K8S_API_ENDPOINT")
                .or_else(|| get("KUBECONFIG"))
                .unwrap_or_else(|| "(from a Secret or ConfigMap)".into());
            spec.insert(
                "datastore".into(),
                json!({"kubernetes": {"kubeconfigSecretRef":
                    {"namespace": namespace, "name": REMOTE_KUBECONFIG_SECRET}}}),
            );
            out.notes.push(format!(
                "{at}: DATASTORE_TYPE=kubernetes with K8S_API_ENDPOINT/KUBECONFIG {endpoint}: \
                 Calico's datastore is that cluster's; create Secret \
                 {namespace}/{REMOTE_KUBECONFIG_SECRET} with its kubeconfig (key kubeconfig) \
                 before applying, and set the chart's routeReflectors.kubeconfigSecret to it"
            ));
        }
        // This cluster's own API server, as `incluster`.
        Some("kubernetes") => {}
        Some("etcdv3") => {
            let etcdv3 = rr_etcd(env, at, namespace, out);
            if ["ETCD_CA_CERT_FILE", "ETCD_CERT_FILE", "ETCD_KEY_FILE"]
                .iter()
                .any(|k| env.contains_key(*k))
            {
                out.notes.push(format!(
                    "{at}: etcd client certificates come from files: put ca.crt, tls.crt and \
                     tls.key in a Secret and name it in datastore.etcdv3.tlsSecretRef"
                ));
            }
            spec.insert("datastore".into(), json!({"etcdv3": etcdv3}));
        }
        Some(t) => out.errors.push(format!(
            "{at}: DATASTORE_TYPE={t:?} is none of incluster, kubernetes, etcdv3"
        )),
    }
    let datastore = get("DATASTORE_TYPE");
    for k in env.keys().filter(|k| is_calico_client_setting(k)) {
        let carried = match datastore.as_deref() {
            Some("etcdv3") => k.starts_with("ETCD_"),
            Some("kubernetes") => k == "K8S_API_ENDPOINT" || k == "KUBECONFIG",
            _ => false,
        };
        if k == "DATASTORE_TYPE" || (carried && CALICO_CLIENT_MAPPED.contains(&k.as_str())) {
            continue;
        }
        let unused = format!(
            "unused with DATASTORE_TYPE={}",
            datastore.as_deref().unwrap_or("incluster (unset)")
        );
        let why = CALICO_CLIENT_DROPPED
            .iter()
            .find(|(d, _)| d == k)
            .map(|(_, why)| (*why).to_owned())
            .unwrap_or_else(|| {
                if CALICO_CLIENT_MAPPED.contains(&k.as_str()) {
                    unused
                } else {
                    "netpolicy has no such setting".into()
                }
            });
        out.notes.push(format!(
            "{at}: {k} (a Calico client setting) has no netpolicy counterpart; dropped \
             ({why})"
        ));
    }
}

/// Calico client settings [`rr_datastore`] carries into `spec.datastore`.
const CALICO_CLIENT_MAPPED: &[&str] = &[
    "DATASTORE_TYPE",
    "ETCD_ENDPOINTS",
    "ETCD_DISCOVERY_SRV",
    "ETCD_USERNAME",
    "ETCD_PASSWORD",
    "ETCD_CA_CERT_FILE",
    "ETCD_CERT_FILE",
    "ETCD_KEY_FILE",
    "K8S_API_ENDPOINT",
    "KUBECONFIG",
];

/// Whether `k` is one of libcalico-go's client settings (its `apiconfig`: `ETCD_*`,
/// `K8S_*`, `KUBECONFIG`, `CALICO_*` such as `CALICO_API_GROUP`, and the few others in
/// [`CALICO_CLIENT_DROPPED`]): each is carried or named in a note, never dropped
/// silently.
fn is_calico_client_setting(k: &str) -> bool {
    ["ETCD_", "K8S_", "CALICO_"]
        .iter()
        .any(|p| k.starts_with(p))
        || k == "KUBECONFIG"
        || CALICO_CLIENT_DROPPED.iter().any(|(d, _)| *d == k)
}

/// The Secret `convert` names for the seed's `ETCD_USERNAME` and `ETCD_PASSWORD`.
const ETCD_CREDENTIALS_SECRET: &str = "calico-etcd-credentials";

/// The seed's etcd settings (`ETCD_ENDPOINTS` or `ETCD_DISCOVERY_SRV`, `ETCD_USERNAME`
/// and `ETCD_PASSWORD`) as `datastore.etcdv3`. A password is never copied into the
/// output: a note says which Secret to create with it.
fn rr_etcd(
    env: &BTreeMap<String, Option<String>>,
    at: &str,
    namespace: &str,
    out: &mut Converted,
) -> Value {
    let get = |k: &str| env.get(k).cloned().flatten();
    let mut etcdv3 = Map::new();
    let endpoints: Vec<String> = get("ETCD_ENDPOINTS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect();
    let srv = get("ETCD_DISCOVERY_SRV").filter(|d| !d.trim().is_empty());
    for k in ["ETCD_ENDPOINTS", "ETCD_DISCOVERY_SRV"] {
        if env.get(k).is_some_and(Option::is_none) {
            let field = if k == "ETCD_ENDPOINTS" {
                "endpoints"
            } else {
                "discoverySrv"
            };
            out.errors.push(format!(
                "{at}: {k} comes from a Secret or ConfigMap (valueFrom): write its value \
                 into datastore.etcdv3.{field}"
            ));
        }
    }
    let from_secret = |k: &str| env.get(k).is_some_and(Option::is_none);
    match (endpoints.is_empty(), srv) {
        (false, Some(_)) => out.errors.push(format!(
            "{at}: both ETCD_ENDPOINTS and ETCD_DISCOVERY_SRV: Calico refuses the pair; \
             keep one"
        )),
        (true, Some(domain)) => {
            etcdv3.insert("discoverySrv".into(), json!(domain.trim()));
        }
        (false, None) => {
            etcdv3.insert("endpoints".into(), json!(endpoints));
        }
        (true, None) => {
            if !from_secret("ETCD_ENDPOINTS") && !from_secret("ETCD_DISCOVERY_SRV") {
                out.errors.push(format!(
                    "{at}: DATASTORE_TYPE=etcdv3 without ETCD_ENDPOINTS or ETCD_DISCOVERY_SRV"
                ));
            }
        }
    }
    if env.contains_key("ETCD_USERNAME") || env.contains_key("ETCD_PASSWORD") {
        etcdv3.insert(
            "credentialsSecretRef".into(),
            json!({"namespace": namespace, "name": ETCD_CREDENTIALS_SECRET}),
        );
        // The user name is no secret and helps; the password is never printed.
        let user = match get("ETCD_USERNAME") {
            Some(u) => format!("username={u}"),
            None if env.contains_key("ETCD_USERNAME") => {
                "username (from the Secret ETCD_USERNAME reads)".into()
            }
            None => "username (ETCD_USERNAME is unset: etcd needs one)".into(),
        };
        out.notes.push(format!(
            "{at}: ETCD_USERNAME/ETCD_PASSWORD: create Secret \
             {namespace}/{ETCD_CREDENTIALS_SECRET} with keys {user} and password (the value \
             ETCD_PASSWORD holds; convert never copies it) before applying, e.g. kubectl -n \
             {namespace} create secret generic {ETCD_CREDENTIALS_SECRET} \
             --from-literal=username=... --from-literal=password=..."
        ));
    }
    Value::Object(etcdv3)
}

/// Annotations of a kube-fip object other than `known` (and kubectl's own): said, then
/// dropped.
fn kube_fip_annotations(ann: &Value, known: &[&str], at: &str, out: &mut Converted) {
    for (k, v) in ann.as_object().into_iter().flatten() {
        if known.contains(&k.as_str()) || k.starts_with("kubectl.kubernetes.io/") {
            continue;
        }
        out.notes.push(format!(
            "{at}: annotation {k}={v} has no netpolicy counterpart; dropped"
        ));
    }
}

/// `source-subnets` → `sourceSubnets`, recursively through objects and lists.
fn camel_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let mut out = String::new();
                    let mut up = false;
                    for c in k.chars() {
                        if c == '-' {
                            up = true;
                        } else if up {
                            out.extend(c.to_uppercase());
                            up = false;
                        } else {
                            out.push(c);
                        }
                    }
                    (out, camel_keys(v))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(camel_keys).collect()),
        other => other.clone(),
    }
}

/// One of Meridio's objects (`meridio.nordix.org`, kebab-case fields) as ours
/// (camelCase; the Attractor's interface flat). Metadata (name, namespace, labels with
/// the `trench` label, annotations such as `resource-template`) is kept.
fn meridio_object(kind: &str, d: &Value, at: &str, out: &mut Converted) -> Option<Value> {
    // Meridio accepts a Trench or Conduit without `spec` (its defaults): ours too, as an
    // empty spec (never `spec: null`, which the schema refuses).
    let mut spec = match camel_keys(&d["spec"]) {
        Value::Null => json!({}),
        s => s,
    };
    let mut metadata = Map::new();
    for k in ["name", "namespace", "labels", "annotations"] {
        if let Some(v) = d["metadata"].get(k).filter(|v| !v.is_null()) {
            metadata.insert(k.into(), v.clone());
        }
    }
    if kind == "Conduit"
        && let Some(r) = spec.as_object_mut().and_then(|o| o.remove("replicas"))
    {
        // v1alpha1: the load balancers' replicas were the Conduit's; later Meridio (and
        // netpolicy) count them on the Attractor.
        out.notes.push(format!(
            "{at}: spec.replicas {r} (Meridio v1alpha1's load-balancer replicas) is the \
             Attractor's spec.replicas in the later API and here: dropped from the \
             Conduit; set it on the Attractor whose composites name this Conduit"
        ));
    }
    if kind == "Attractor" {
        let i = d["spec"]["interface"].clone();
        let ty = i["type"].as_str().unwrap_or("nsm-vlan");
        let mut iface = Map::new();
        iface.insert("name".into(), i["name"].clone());
        match ty {
            "nsm-vlan" => {
                if let Some(b) = i["nsm-vlan"]["base-interface"].as_str() {
                    iface.insert("link".into(), json!(b));
                }
                if let Some(v) = i["nsm-vlan"]["vlan-id"].as_u64() {
                    iface.insert("vlanId".into(), json!(v));
                }
            }
            "network-attachment" => {
                // Multus gives the front ends the interface: no link or VLAN of ours.
                iface.insert("link".into(), i["name"].clone());
                let nads: Vec<Value> = i["network-attachments"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|n| {
                        let mut o = json!({"name": n["name"]});
                        for k in ["namespace", "interface"] {
                            if let Some(v) = n[k].as_str() {
                                o[k] = json!(v);
                            }
                        }
                        o
                    })
                    .collect();
                if nads.len() != 1 {
                    out.errors.push(format!(
                        "{at}: interface type network-attachment needs exactly one \
                         network-attachments entry (found {})",
                        nads.len()
                    ));
                    return None;
                }
                iface.insert("networkAttachments".into(), Value::Array(nads));
            }
            _ => {
                out.errors.push(format!(
                    "{at}: interface type {ty} is neither nsm-vlan nor network-attachment"
                ));
                return None;
            }
        }
        for (theirs, ours) in [("ipv4-prefix", "ipv4Prefix"), ("ipv6-prefix", "ipv6Prefix")] {
            let Some(p) = i[theirs].as_str() else {
                continue;
            };
            // Meridio also takes ranges (`a-b/len`, several joined by `;`): ours is
            // the network they belong to.
            let net = if p.contains('-') || p.contains(';') {
                let len = p.rsplit('/').next().unwrap_or_default();
                let first = p.split(['-', ';', '/']).next().unwrap_or_default();
                let network = format!("{first}/{len}")
                    .parse::<ipnetwork::IpNetwork>()
                    .ok()
                    .and_then(|n| ipnetwork::IpNetwork::new(n.network(), n.prefix()).ok());
                let Some(n) = network else {
                    out.errors
                        .push(format!("{at}: interface.{theirs} {p:?} is not a range"));
                    return None;
                };
                out.notes.push(format!(
                    "{at}: interface.{theirs} {p:?} is a range: netpolicy takes its network \
                         {n} (every address of it but the gateways' may be handed out)"
                ));
                n.to_string()
            } else {
                p.to_owned()
            };
            iface.insert(ours.into(), json!(net));
        }
        spec["interface"] = Value::Object(iface);
    }
    Some(json!({"apiVersion": OURS, "kind": kind, "metadata": metadata, "spec": spec}))
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
