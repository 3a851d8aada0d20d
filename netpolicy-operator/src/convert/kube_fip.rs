//! kube-fip's `FloatingIPRange`s, `FloatingIP`s and its operator ConfigMap
//! (`kube-fip-config`) as our ranges and FloatingIPs.

use serde_json::{Map, Value, json};

use super::{Converted, OURS, name_of};

/// With no `kube-fip-config` in the input, whether kube-fip installed kube-vip in the
/// guests is unknown here: said once for the converted ranges that publish to guests.
pub(super) fn guest_install_unknown(rest: &[Value], out: &mut Converted) {
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
pub(super) fn kube_fip_range(
    d: &Value,
    name: &str,
    at: &str,
    out: &mut Converted,
) -> Option<Value> {
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
pub(super) fn kube_fip_floating_ip(
    d: &Value,
    name: &str,
    at: &str,
    out: &mut Converted,
) -> Option<Value> {
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
pub(super) const KUBE_FIP_CONFIG: &str = "kube-fip-config";

/// kube-fip's operator ConfigMap: each key where netpolicy keeps it (docs/migration.md),
/// set on the converted ranges that publish to guests; what lives elsewhere is said.
pub(super) fn apply_kube_fip_config(
    at: &str,
    data: &Value,
    rest: &mut [Value],
    out: &mut Converted,
) {
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
pub(super) fn kube_fip_config_elsewhere(at: &str, data: &Value, out: &mut Converted) {
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

/// Annotations of a kube-fip object other than `known` (and kubectl's own): said, then
/// dropped.
pub(super) fn kube_fip_annotations(ann: &Value, known: &[&str], at: &str, out: &mut Converted) {
    for (k, v) in ann.as_object().into_iter().flatten() {
        if known.contains(&k.as_str()) || k.starts_with("kubectl.kubernetes.io/") {
            continue;
        }
        out.notes.push(format!(
            "{at}: annotation {k}={v} has no netpolicy counterpart; dropped"
        ));
    }
}
