//! calico-route-reflector-operator's Deployment environment as RouteReflectorConfig
//! `default`, its Calico client settings carried or named.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Converted, OURS};

/// The seed route-reflector operator's settings: the environment of a Deployment's
/// containers when it has any `ROUTE_REFLECTOR_*` or `DATASTORE_TYPE` variable (plain
/// values; `valueFrom` entries are kept as `None`).
pub(super) fn seed_rr_env(d: &Value) -> Option<BTreeMap<String, Option<String>>> {
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

/// The Secret `convert` names for the seed's `K8S_API_ENDPOINT` cluster's kubeconfig.
pub(super) const REMOTE_KUBECONFIG_SECRET: &str = "calico-cluster-kubeconfig";

/// calico-route-reflector-operator's environment as RouteReflectorConfig `default`.
/// Its defaults are written out (max 10, what its code uses at every tag; no zone
/// label: no zones, one count and one cluster ID for the whole cluster; cluster ID
/// 224.0.0.0; any taint tolerated, as it skips only unready and unschedulable nodes), so
/// the topology stays what it was.
pub(super) fn route_reflector_config(
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
pub(super) fn rr_cluster_id(
    env: &BTreeMap<String, Option<String>>,
    at: &str,
    out: &mut Converted,
) -> String {
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
pub(super) const CALICO_CLIENT_DROPPED: &[(&str, &str)] = &[
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
pub(super) fn rr_datastore(
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
pub(super) const CALICO_CLIENT_MAPPED: &[&str] = &[
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
pub(super) fn is_calico_client_setting(k: &str) -> bool {
    ["ETCD_", "K8S_", "CALICO_"]
        .iter()
        .any(|p| k.starts_with(p))
        || k == "KUBECONFIG"
        || CALICO_CLIENT_DROPPED.iter().any(|(d, _)| *d == k)
}

/// The Secret `convert` names for the seed's `ETCD_USERNAME` and `ETCD_PASSWORD`.
pub(super) const ETCD_CREDENTIALS_SECRET: &str = "calico-etcd-credentials";

/// The seed's etcd settings (`ETCD_ENDPOINTS` or `ETCD_DISCOVERY_SRV`, `ETCD_USERNAME`
/// and `ETCD_PASSWORD`) as `datastore.etcdv3`. A password is never copied into the
/// output: a note says which Secret to create with it.
pub(super) fn rr_etcd(
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
