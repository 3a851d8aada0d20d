//! The `meridio` data plane: what Meridio's own operator keeps for a trench, computed
//! from the same kinds (`../shared/meridio-workloads.md` is the reference, read from
//! Meridio v1.2.8's code). Pure: `config_map` is the trench's configuration ConfigMap
//! in the exact bytes Meridio's writer produces (its components parse it with
//! `yaml.UnmarshalStrict`: an unknown key fails the whole update), [`workloads`] the
//! StatefulSets, Services, Deployments, PodDisruptionBudgets and DaemonSets with the
//! names, labels, env, ports, volumes, probes and securityContexts Meridio's images
//! expect. The controller applies them by server-side apply; `plan` prints them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Domain, duration_ms, name_of};
use crate::api::{Attractor, Conduit, GatewayProtocol, Trench, TrenchIpFamily};

/// The annotation that picks a named resource template per container (Meridio's).
pub(crate) const RESOURCE_TEMPLATE: &str = "resource-template";
/// The annotation on a Conduit naming its update-sync group (Meridio's default
/// `$CONDUIT_UPDATE_SYNC_GROUP_KEY`): proxy DaemonSets of one group are updated one at a
/// time.
pub(crate) const UPDATE_SYNC_GROUP: &str = "update-sync-group";

/// The label netpolicy puts on every object it keeps for Meridio.
pub(crate) const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "netpolicy");

/// Images, service accounts and the operator's environment Meridio's operator reads
/// from its own env and chart (its defaults here).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Settings {
    /// Registry of Meridio's images.
    pub(crate) registry: String,
    /// Repository of Meridio's images under the registry.
    pub(crate) repository: String,
    /// Tag of Meridio's images.
    pub(crate) version: String,
    /// Per-component tag overrides (`nsp`, `ipam`, `stateless-lb`, `frontend`, `proxy`).
    pub(crate) versions: BTreeMap<String, String>,
    /// NSM's VLAN endpoint image.
    pub(crate) nse_vlan_image: String,
    /// NSM's client image.
    pub(crate) nsc_image: String,
    /// The init containers' image (sysctls).
    pub(crate) init_image: String,
    /// `imagePullSecrets` of every pod.
    pub(crate) image_pull_secrets: Vec<String>,
    /// ServiceAccount of the NSP pods (watches the ConfigMap). Empty (the default):
    /// each trench's own, `meridio-sa-<trench>`, which netpolicy creates with its Role
    /// and RoleBinding (Meridio-Operator's per-trench accounts). A name: an account the
    /// install provides (current Meridio's `meridio-nsp`); netpolicy creates none.
    pub(crate) nsp_service_account: String,
    /// ServiceAccount of the front-end pods (watches Secrets for BGP keys). Empty (the
    /// default): each trench's own, `meridio-fes-<trench>`, created by netpolicy. A
    /// name: an account the install provides (`meridio-fes`).
    pub(crate) fe_service_account: String,
    /// NSM's registry service.
    pub(crate) nsm_registry_service: String,
    /// Log level of every component.
    pub(crate) log_level: String,
    /// The components' gRPC probe timeout.
    pub(crate) grpc_probe_rpc_timeout: String,
    /// The proxies' MTU.
    pub(crate) conduit_mtu: String,
    /// How long a proxy keeps a released IP.
    pub(crate) proxy_ip_release_delay: String,
    /// Resource templates by container name, then template name: each a core/v1
    /// `ResourceRequirements`.
    pub(crate) resource_templates: BTreeMap<String, BTreeMap<String, Value>>,
}

impl Default for Settings {
    fn default() -> Self {
        let nsm = "registry.nordix.org/cloud-native/nsm";
        Self {
            registry: "registry.nordix.org".into(),
            repository: "cloud-native/meridio".into(),
            version: "latest".into(),
            versions: BTreeMap::new(),
            nse_vlan_image: format!("{nsm}/cmd-nse-remote-vlan:v1.13.0"),
            nsc_image: format!("{nsm}/cmd-nsc:v1.13.0"),
            init_image: "registry.nordix.org/cloud-native/meridio/busybox:1.29".into(),
            image_pull_secrets: Vec::new(),
            nsp_service_account: String::new(),
            fe_service_account: String::new(),
            nsm_registry_service: "nsm-registry-svc.nsm:5002".into(),
            log_level: "DEBUG".into(),
            grpc_probe_rpc_timeout: "1s".into(),
            conduit_mtu: "1500".into(),
            proxy_ip_release_delay: "20s".into(),
            resource_templates: default_templates(),
        }
    }
}

/// Meridio's example templates (`small`, `medium`, `large`) for every container.
fn default_templates() -> BTreeMap<String, BTreeMap<String, Value>> {
    let t = |cpu: u32, mem: u32| {
        json!({"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")},
               "limits": {"cpu": format!("{}m", cpu * 2), "memory": format!("{}Mi", mem * 2)}})
    };
    [
        "nsp",
        "ipam",
        "nse-vlan",
        "stateless-lb",
        "nsc",
        "frontend",
        "proxy",
    ]
    .into_iter()
    .map(|c| {
        (
            c.to_owned(),
            [
                ("small".to_owned(), t(100, 20)),
                ("medium".to_owned(), t(200, 40)),
                ("large".to_owned(), t(400, 80)),
            ]
            .into(),
        )
    })
    .collect()
}

impl Settings {
    /// The NSP pods' ServiceAccount in trench `t`.
    pub(crate) fn nsp_account(&self, t: &str) -> String {
        if self.nsp_service_account.is_empty() {
            format!("meridio-sa-{t}")
        } else {
            self.nsp_service_account.clone()
        }
    }

    /// The front-end pods' ServiceAccount in trench `t`.
    pub(crate) fn fe_account(&self, t: &str) -> String {
        if self.fe_service_account.is_empty() {
            format!("meridio-fes-{t}")
        } else {
            self.fe_service_account.clone()
        }
    }

    fn image(&self, component: &str) -> String {
        let version = self.versions.get(component).unwrap_or(&self.version);
        format!(
            "{}/{}/{component}:{version}",
            self.registry.trim_end_matches('/'),
            self.repository.trim_matches('/')
        )
    }
}

// ---------------------------------------------------------------------------------
// The ConfigMap: gopkg.in/yaml.v2's Marshal output of Meridio's reader structs.

/// A Go string as yaml.v2 writes it in block style: plain when a plain scalar reads
/// back as the same string; double-quoted when it would read back as something else
/// (YAML 1.1: a number, a bool, null, a base-60 float); single-quoted when the emitter
/// cannot write it plain (an indicator first, `: ` or ` #` inside, blanks at an end).
fn yaml_str(s: &str) -> String {
    if resolves_to_other(s) {
        return format!("{s:?}");
    }
    let first = s.chars().next().unwrap_or(' ');
    let second = s.chars().nth(1);
    let indicator_first = "#,[]{}&*!|>'\"%@`".contains(first)
        || ("?:-".contains(first) && second.is_none_or(|c| c == ' '));
    if indicator_first
        || s.contains(": ")
        || s.contains(" #")
        || s.ends_with(':')
        || s.starts_with(' ')
        || s.ends_with(' ')
    {
        return format!("'{}'", s.replace('\'', "''"));
    }
    s.to_owned()
}

/// Whether YAML 1.1 (yaml.v2's resolver) reads the plain scalar `s` as anything but a
/// string.
fn resolves_to_other(s: &str) -> bool {
    let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '_');
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    let int = digits(unsigned)
        || unsigned
            .strip_prefix("0x")
            .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit() || c == '_'))
        || unsigned
            .strip_prefix("0b")
            .is_some_and(|b| !b.is_empty() && b.chars().all(|c| c == '0' || c == '1' || c == '_'));
    let float = unsigned.chars().any(|c| c.is_ascii_digit())
        && unsigned
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+' | '_'))
        && !unsigned.starts_with(['e', 'E'])
        && unsigned.replace('_', "").parse::<f64>().is_ok();
    // 190:20:30 (base 60): digits, then groups of `:` and one or two digits.
    let base60 = {
        let mut parts = unsigned.split(':');
        parts.next().is_some_and(digits)
            && unsigned.contains(':')
            && parts.all(|p| {
                let p = p.split('.').next().unwrap_or(p);
                (1..=2).contains(&p.len()) && p.chars().all(|c| c.is_ascii_digit())
            })
    };
    let word = matches!(
        s.to_ascii_lowercase().as_str(),
        "" | "~"
            | "null"
            | "true"
            | "false"
            | "yes"
            | "no"
            | "on"
            | "off"
            | "y"
            | "n"
            | ".inf"
            | "-.inf"
            | "+.inf"
            | ".nan"
    );
    int || float || base60 || word
}

/// One field of an item, in yaml.v2's block style at `indent`.
enum Field {
    Str(&'static str, String),
    Num(&'static str, i64),
    Bool(&'static str, bool),
    List(&'static str, Vec<String>),
    /// A list of maps (port NATs).
    Maps(&'static str, Vec<Vec<Field>>),
    /// A map (bgp-auth).
    Map(&'static str, Vec<Field>),
}

fn write_fields(out: &mut String, fields: &[Field], indent: usize, first_dash: bool) {
    for (i, f) in fields.iter().enumerate() {
        let pad = if i == 0 && first_dash {
            format!("{}- ", " ".repeat(indent.saturating_sub(2)))
        } else {
            " ".repeat(indent)
        };
        match f {
            Field::Str(k, v) => out.push_str(&format!("{pad}{k}: {}\n", yaml_str(v))),
            Field::Num(k, v) => out.push_str(&format!("{pad}{k}: {v}\n")),
            Field::Bool(k, v) => out.push_str(&format!("{pad}{k}: {v}\n")),
            Field::List(k, v) if v.is_empty() => out.push_str(&format!("{pad}{k}: []\n")),
            Field::List(k, v) => {
                out.push_str(&format!("{pad}{k}:\n"));
                for s in v {
                    out.push_str(&format!("{}- {}\n", " ".repeat(indent), yaml_str(s)));
                }
            }
            Field::Maps(k, v) if v.is_empty() => out.push_str(&format!("{pad}{k}: []\n")),
            Field::Maps(k, v) => {
                out.push_str(&format!("{pad}{k}:\n"));
                for m in v {
                    write_fields(out, m, indent + 2, true);
                }
            }
            Field::Map(k, v) => {
                out.push_str(&format!("{pad}{k}:\n"));
                write_fields(out, v, indent + 2, false);
            }
        }
    }
}

/// `items:` followed by one item per entry (`items: []` when none).
fn items(list: Vec<Vec<Field>>) -> String {
    if list.is_empty() {
        return "items: []\n".into();
    }
    let mut out = String::from("items:\n");
    for item in list {
        write_fields(&mut out, &item, 2, true);
    }
    out
}

/// Meridio's port ranges: `any` is `0-65535`.
fn port_range(p: &str) -> String {
    if p == "any" {
        "0-65535".into()
    } else {
        p.to_owned()
    }
}

/// BFD as Meridio's writer puts it: on with `switch: true` (and its timers in ms).
fn bfd_fields(bfd: Option<&crate::api::BfdSpec>, default_on: bool) -> (bool, Vec<Field>) {
    let (on, tx, rx, mult) = match bfd {
        Some(b) => (
            b.switch.unwrap_or(default_on),
            b.min_tx.clone(),
            b.min_rx.clone(),
            b.multiplier,
        ),
        None => (default_on, None, None, None),
    };
    if !on {
        return (false, Vec::new());
    }
    // Meridio's defaults when BFD is on without timers: 200ms, 200ms, ×3.
    let ms = |d: Option<String>| {
        d.as_deref()
            .and_then(duration_ms)
            .unwrap_or(200)
            .try_into()
            .unwrap_or(i64::MAX)
    };
    (
        true,
        vec![
            Field::Num("min-tx", ms(tx)),
            Field::Num("min-rx", ms(rx)),
            Field::Num("multiplier", i64::from(mult.unwrap_or(3))),
        ],
    )
}

/// The trench's configuration ConfigMap's `data`: the seven keys, in Meridio's schema
/// and yaml.v2's bytes; children sorted by name. Skipped as Meridio's writer skips
/// them: Streams without a conduit, Flows without a stream.
// Long because it is Meridio's schema written out key by key in yaml.v2's byte order:
// split, the order the bytes must come in would be spread over several functions.
pub(crate) fn config_map_data(d: &Domain<'_>) -> BTreeMap<String, String> {
    let t = d.name.clone();
    let mut data = BTreeMap::new();
    data.insert("trench".to_owned(), format!("name: {}\n", yaml_str(&t)));
    data.insert(
        "conduits".to_owned(),
        items(
            d.conduits
                .iter()
                .map(|c| {
                    let mut f = vec![
                        Field::Str("name", name_of(&c.metadata).to_owned()),
                        Field::Str("trench", t.clone()),
                    ];
                    if !c.spec.destination_port_nats.is_empty() {
                        f.push(Field::Maps(
                            "destination-port-nats",
                            c.spec
                                .destination_port_nats
                                .iter()
                                .map(|n| {
                                    vec![
                                        Field::Num("port", i64::from(n.port)),
                                        Field::Num("target-port", i64::from(n.target_port)),
                                        Field::List("vips", n.vips.clone()),
                                        Field::Str("protocol", n.protocol.as_str().to_owned()),
                                    ]
                                })
                                .collect(),
                        ));
                    }
                    f
                })
                .collect(),
        ),
    );
    data.insert(
        "streams".to_owned(),
        items(
            d.streams
                .iter()
                .filter(|s| !s.spec.conduit.is_empty())
                .map(|s| {
                    vec![
                        Field::Str("name", name_of(&s.metadata).to_owned()),
                        Field::Str("conduit", s.spec.conduit.clone()),
                        Field::Num("max-targets", i64::from(s.spec.max_targets)),
                    ]
                })
                .collect(),
        ),
    );
    data.insert(
        "flows".to_owned(),
        items(
            d.flows
                .iter()
                .filter(|f| !f.spec.stream.is_empty())
                .map(|f| {
                    let mut item = vec![
                        Field::Str("name", name_of(&f.metadata).to_owned()),
                        Field::List("source-subnets", f.spec.source_subnets.clone()),
                        Field::List(
                            "destination-port-ranges",
                            f.spec
                                .destination_ports
                                .iter()
                                .map(|p| port_range(p))
                                .collect(),
                        ),
                        Field::List(
                            "source-port-ranges",
                            f.spec.source_ports.iter().map(|p| port_range(p)).collect(),
                        ),
                        Field::List(
                            "protocols",
                            f.spec
                                .protocols
                                .iter()
                                .map(|p| p.as_str().to_owned())
                                .collect(),
                        ),
                        Field::List("vips", f.spec.vips.clone()),
                        Field::Num("priority", i64::from(f.spec.priority)),
                        Field::Str("stream", f.spec.stream.clone()),
                    ];
                    // `byte-matches` is omitempty in Meridio's struct.
                    if !f.spec.byte_matches.is_empty() {
                        item.push(Field::List("byte-matches", f.spec.byte_matches.clone()));
                    }
                    item
                })
                .collect(),
        ),
    );
    data.insert(
        "vips".to_owned(),
        items(
            d.vips
                .iter()
                .filter(|v| !v.spec.address.is_empty())
                .map(|v| {
                    vec![
                        Field::Str("name", name_of(&v.metadata).to_owned()),
                        Field::Str("address", v.spec.address.clone()),
                        Field::Str("trench", t.clone()),
                    ]
                })
                .collect(),
        ),
    );
    data.insert(
        "attractors".to_owned(),
        items(
            d.attractors
                .iter()
                .map(|a| {
                    vec![
                        Field::Str("name", name_of(&a.metadata).to_owned()),
                        Field::List("vips", a.spec.vips.clone()),
                        Field::List("gateways", a.spec.gateways.clone()),
                        Field::Str("trench", t.clone()),
                    ]
                })
                .collect(),
        ),
    );
    data.insert(
        "gateways".to_owned(),
        items(
            d.gateways
                .iter()
                .map(|g| {
                    let s = &g.spec;
                    let family = match s.address.parse::<std::net::IpAddr>() {
                        Ok(std::net::IpAddr::V6(_)) => "ipv6",
                        _ => "ipv4",
                    };
                    let mut f = vec![
                        Field::Str("name", name_of(&g.metadata).to_owned()),
                        Field::Str("address", s.address.clone()),
                    ];
                    // Struct order: address, [BGP ASNs and ports], ip-family, bfd,
                    // protocol, [hold-time], [BFD timers], trench, [bgp-auth].
                    let (bgp, bfd) = match s.protocol {
                        GatewayProtocol::Bgp => {
                            let b = s.bgp.clone().unwrap_or_default();
                            let bfd = bfd_fields(b.bfd.as_ref().or(s.bfd.as_ref()), false);
                            (Some(b), bfd)
                        }
                        GatewayProtocol::Static => {
                            let st = s.static_.clone().unwrap_or_default();
                            (None, bfd_fields(st.bfd.as_ref().or(s.bfd.as_ref()), true))
                        }
                    };
                    let (bfd_on, timers) = bfd;
                    if let Some(b) = &bgp {
                        for (k, v) in [("remote-asn", b.remote_asn), ("local-asn", b.local_asn)] {
                            if let Some(v) = v.filter(|v| *v != 0) {
                                f.push(Field::Num(k, i64::from(v)));
                            }
                        }
                        f.push(Field::Num(
                            "remote-port",
                            i64::from(b.remote_port.unwrap_or(179)),
                        ));
                        f.push(Field::Num(
                            "local-port",
                            i64::from(b.local_port.unwrap_or(179)),
                        ));
                    }
                    f.push(Field::Str("ip-family", family.into()));
                    f.push(Field::Bool("bfd", bfd_on));
                    f.push(Field::Str(
                        "protocol",
                        if bgp.is_some() { "bgp" } else { "static" }.into(),
                    ));
                    if let Some(b) = &bgp {
                        let hold = b
                            .hold_time
                            .as_deref()
                            .and_then(duration_ms)
                            .map_or(240, |ms| (ms + 500) / 1000);
                        f.push(Field::Num("hold-time", i64::try_from(hold).unwrap_or(0)));
                    }
                    f.extend(timers);
                    f.push(Field::Str("trench", t.clone()));
                    if let Some(a) = bgp.as_ref().and_then(|b| b.auth.as_ref()) {
                        f.push(Field::Map(
                            "bgp-auth",
                            vec![
                                Field::Str("key", a.key_name.clone()),
                                Field::Str("source", a.key_source.clone()),
                            ],
                        ));
                    }
                    f
                })
                .collect(),
        ),
    );
    data
}

/// `meridio-configuration-<trench>`.
pub(crate) fn config_map_name(trench: &str) -> String {
    format!("meridio-configuration-{trench}")
}

// ---------------------------------------------------------------------------------
// The workloads.

/// An ownerReference to `kind`/`name` (`uid`), the controller reference Meridio's
/// operator sets; none without a uid (`plan`).
fn owner(kind: &str, name: &str, uid: Option<&str>) -> Value {
    match uid {
        Some(uid) => json!([{
            "apiVersion": "netpolicy.io/v1alpha1", "kind": kind, "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true
        }]),
        None => json!([]),
    }
}

fn meta(name: &str, ns: &str, owners: Value, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = json!({"app": name, MANAGED_BY.0: MANAGED_BY.1});
    for (k, v) in extra_labels {
        labels[*k] = json!(v);
    }
    let mut m = json!({"name": name, "namespace": ns, "labels": labels});
    if owners.as_array().is_some_and(|a| !a.is_empty()) {
        m["ownerReferences"] = owners;
    }
    m
}

fn env(pairs: &[(&str, String)]) -> Value {
    Value::Array(
        pairs
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect(),
    )
}

fn env_field(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

fn grpc_probes(service: &str) -> Value {
    let cmd = json!([
        "/bin/grpc_health_probe",
        "-addr=unix:///tmp/health.sock",
        format!("-service={service}"),
        "-connect-timeout=400ms",
        "-rpc-timeout=400ms"
    ]);
    json!({
        "startupProbe": {"exec": {"command": cmd}, "periodSeconds": 2, "failureThreshold": 30},
        "readinessProbe": {"exec": {"command": cmd}, "periodSeconds": 10, "failureThreshold": 5},
        "livenessProbe": {"exec": {"command": cmd}, "periodSeconds": 10, "failureThreshold": 5},
    })
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

fn security(caps: &[&str], user: Option<u32>) -> Value {
    let mut s = json!({
        "runAsNonRoot": true, "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["all"], "add": caps}
    });
    if let Some(u) = user {
        s["runAsUser"] = json!(u);
        s["runAsGroup"] = json!(u);
    }
    s
}

const SPIRE_MOUNT: (&str, &str) = ("spire-agent-socket", "/run/spire/sockets");
const NSM_SOCKET: &str = "/var/lib/networkservicemesh";

fn spire_env() -> (String, String) {
    (
        "SPIFFE_ENDPOINT_SOCKET".into(),
        "unix:///run/spire/sockets/agent.sock".into(),
    )
}

/// What a resource-template annotation asks of `container`: its resources, or why
/// none (an unknown template name).
fn resources(
    s: &Settings,
    template: Option<&str>,
    container: &str,
    problems: &mut Vec<String>,
) -> Option<Value> {
    let t = template?;
    match s.resource_templates.get(container).and_then(|m| m.get(t)) {
        Some(r) => Some(r.clone()),
        None => {
            problems.push(format!(
                "resource-template {t:?}: no such template for container {container}"
            ));
            None
        }
    }
}

fn pod_spec(s: &Settings, mut spec: Value) -> Value {
    if !s.image_pull_secrets.is_empty() {
        spec["imagePullSecrets"] = Value::Array(
            s.image_pull_secrets
                .iter()
                .map(|n| json!({"name": n}))
                .collect(),
        );
    }
    spec
}

fn with_resources(mut c: Value, r: Option<Value>) -> Value {
    if let Some(r) = r {
        c["resources"] = r;
    }
    c
}

fn sysctl_init(s: &Settings, script: &str) -> Value {
    json!({
        "name": "sysctl-init", "image": s.init_image,
        "securityContext": {"privileged": true},
        "command": ["/bin/sh"], "args": ["-c", script],
    })
}

fn annotation(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<&str> {
    m.annotations
        .as_ref()
        .and_then(|a| a.get(RESOURCE_TEMPLATE))
        .map(String::as_str)
}

/// The trench's objects: the ConfigMap first, then the accounts its pods run as
/// ([`accounts`]), the NSP and IPAM StatefulSets and
/// their Services, per Attractor its Deployments and PodDisruptionBudget, per Conduit
/// its proxy DaemonSet. Each is a whole object for server-side apply. `problems` gets
/// what cannot be honoured (an unknown resource template), by object (`Kind/name`).
pub(crate) fn workloads(
    d: &Domain<'_>,
    s: &Settings,
    problems: &mut BTreeMap<String, Vec<String>>,
) -> Vec<Value> {
    let Some(trench) = d.trench else {
        return Vec::new();
    };
    let ns = d.namespace.as_str();
    let t = d.name.as_str();
    let mut out = Vec::new();
    let towner = owner("Trench", t, trench.metadata.uid.as_deref());
    let mut cm_meta = json!({"name": config_map_name(t), "namespace": ns,
                             "labels": {MANAGED_BY.0: MANAGED_BY.1}});
    if let Some(o) = towner.as_array().filter(|a| !a.is_empty()) {
        cm_meta["ownerReferences"] = Value::Array(o.clone());
    }
    out.push(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": cm_meta,
        "data": config_map_data(d),
    }));
    out.extend(accounts(d, s, &towner));
    out.extend(trench_objects(trench, d, s, &towner, problems));
    for a in &d.attractors {
        out.extend(attractor_objects(a, d, s, problems));
    }
    for c in &d.conduits {
        out.push(proxy(c, d, s, problems));
    }
    out
}

/// The accounts a trench's pods run as, when the settings name none: for the NSP
/// (Meridio-Operator's `meridio-sa-<t>`, Role `meridio-configuration-role-<t>`,
/// RoleBinding `meridio-configuration-role-binding-<t>`: watch ConfigMaps, the trench's
/// configuration) and for the front ends (`meridio-fes-<t>`, Role `meridio-fes-role-<t>`:
/// watch Secrets, their BGP authentication keys), each in the trench's namespace and
/// owned by the Trench. The verbs are what Meridio's components use and its own
/// RBAC grants, no more; the IPAM, NSE and proxy pods mount no token.
fn accounts(d: &Domain<'_>, s: &Settings, towner: &Value) -> Vec<Value> {
    let ns = d.namespace.as_str();
    let t = d.name.as_str();
    let mut out = Vec::new();
    for (given, account, role, binding, resource) in [
        (
            &s.nsp_service_account,
            s.nsp_account(t),
            format!("meridio-configuration-role-{t}"),
            format!("meridio-configuration-role-binding-{t}"),
            "configmaps",
        ),
        (
            &s.fe_service_account,
            s.fe_account(t),
            format!("meridio-fes-role-{t}"),
            format!("meridio-fes-role-binding-{t}"),
            "secrets",
        ),
    ] {
        if !given.is_empty() {
            continue;
        }
        let rbac = "rbac.authorization.k8s.io";
        out.push(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": meta(&account, ns, towner.clone(), &[]),
        }));
        out.push(json!({
            "apiVersion": format!("{rbac}/v1"), "kind": "Role",
            "metadata": meta(&role, ns, towner.clone(), &[]),
            "rules": [{"apiGroups": [""], "resources": [resource], "verbs": ["watch"]}],
        }));
        out.push(json!({
            "apiVersion": format!("{rbac}/v1"), "kind": "RoleBinding",
            "metadata": meta(&binding, ns, towner.clone(), &[]),
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        }));
    }
    out
}

fn family(tr: &Trench) -> &'static str {
    match tr.spec.ip_family {
        TrenchIpFamily::Ipv4 => "ipv4",
        TrenchIpFamily::Ipv6 => "ipv6",
        TrenchIpFamily::Dualstack => "dualstack",
    }
}

fn trench_objects(
    tr: &Trench,
    d: &Domain<'_>,
    s: &Settings,
    towner: &Value,
    problems: &mut BTreeMap<String, Vec<String>>,
) -> Vec<Value> {
    let ns = d.namespace.as_str();
    let t = d.name.as_str();
    let template = annotation(&tr.metadata);
    let mut p = Vec::new();
    let ipam = &tr.spec.ipam;
    let mut out = Vec::new();
    for (comp, port, data) in [("nsp", 7778, "nsp-data"), ("ipam", 7777, "ipam-data")] {
        let name = format!("{comp}-{t}");
        let upper = comp.to_ascii_uppercase();
        let mut e: Vec<(&str, String)> = Vec::new();
        let mut pairs: Vec<(String, String)> = vec![
            (
                format!("{upper}_DATASOURCE"),
                format!("/run/{comp}/data/registry.db"),
            ),
            (format!("{upper}_PORT"), port.to_string()),
            (format!("{upper}_NAMESPACE"), ns.to_owned()),
        ];
        if comp == "nsp" {
            pairs.push(("NSP_CONFIG_MAP_NAME".into(), config_map_name(t)));
        } else {
            pairs.extend([
                ("IPAM_TRENCH_NAME".into(), t.to_owned()),
                ("IPAM_NSP_SERVICE".into(), format!("nsp-service-{t}:7778")),
                ("IPAM_PREFIX_IPV4".into(), ipam.ipv4_root.clone()),
                ("IPAM_PREFIX_IPV6".into(), ipam.ipv6_root.clone()),
                (
                    "IPAM_CONDUIT_PREFIX_LENGTH_IPV4".into(),
                    ipam.conduit_prefix_length_v4.to_string(),
                ),
                (
                    "IPAM_CONDUIT_PREFIX_LENGTH_IPV6".into(),
                    ipam.conduit_prefix_length_v6.to_string(),
                ),
                (
                    "IPAM_NODE_PREFIX_LENGTH_IPV4".into(),
                    ipam.node_prefix_length_v4.to_string(),
                ),
                (
                    "IPAM_NODE_PREFIX_LENGTH_IPV6".into(),
                    ipam.node_prefix_length_v6.to_string(),
                ),
                ("IPAM_IP_FAMILY".into(), family(tr).to_owned()),
            ]);
        }
        pairs.push((format!("{upper}_LOG_LEVEL"), s.log_level.clone()));
        pairs.push((
            format!("{upper}_GRPC_PROBE_RPC_TIMEOUT"),
            s.grpc_probe_rpc_timeout.clone(),
        ));
        pairs.push(spire_env());
        e.extend(pairs.iter().map(|(k, v)| (k.as_str(), v.clone())));
        let mut container = json!({
            "name": comp, "image": s.image(comp), "env": env(&e),
            "securityContext": security(&["DAC_OVERRIDE", "NET_RAW", "SYS_PTRACE"], None),
            "volumeMounts": [
                {"name": data, "mountPath": format!("/run/{comp}/data")},
                {"name": "tmp", "mountPath": "/tmp"},
                {"name": SPIRE_MOUNT.0, "mountPath": SPIRE_MOUNT.1, "readOnly": true},
            ],
        });
        merge(&mut container, grpc_probes(comp));
        let container = with_resources(container, resources(s, template, comp, &mut p));
        let mut spec = json!({
            "securityContext": {"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"},
            "containers": [container],
            "volumes": [
                {"name": "tmp", "emptyDir": {"medium": "Memory"}},
                {"name": SPIRE_MOUNT.0, "hostPath": {"path": SPIRE_MOUNT.1, "type": "Directory"}},
            ],
        });
        if comp == "nsp" {
            spec["serviceAccountName"] = json!(s.nsp_account(t));
        } else {
            spec["automountServiceAccountToken"] = json!(false);
        }
        out.push(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": meta(&name, ns, towner.clone(), &[]),
            "spec": {
                "replicas": 1, "serviceName": name,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name, "spiffe.io/spiffe-id": "true"}},
                    "spec": pod_spec(s, spec),
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": data},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Gi"}}},
                }],
            },
        }));
        let svc = format!("{comp}-service-{t}");
        out.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta(&svc, ns, towner.clone(), &[]),
            "spec": {"type": "ClusterIP", "selector": {"app": name},
                     "ports": [{"name": comp, "protocol": "TCP", "port": port, "targetPort": port}]},
        }));
    }
    if !p.is_empty() {
        problems.insert(format!("Trench/{t}"), p);
    }
    out
}

// Long because it is the attractor's Meridio manifests (its frontend StatefulSet, its
// VLAN and NSE objects) as JSON literals, the shape Meridio's operator writes: read
// side by side with Meridio's templates, one literal per object.
fn attractor_objects(
    a: &Attractor,
    d: &Domain<'_>,
    s: &Settings,
    problems: &mut BTreeMap<String, Vec<String>>,
) -> Vec<Value> {
    let ns = d.namespace.as_str();
    let t = d.name.as_str();
    let an = name_of(&a.metadata);
    let owners = owner("Attractor", an, a.metadata.uid.as_deref());
    let template = annotation(&a.metadata);
    let mut p = Vec::new();
    let iface = &a.spec.interface;
    let vlan = iface.vlan_id.unwrap_or(0);
    let mut out = Vec::new();
    let nse_service = format!("external-vlan.{an}.{t}.{ns}");
    // Meridio's `network-attachment` interface type: Multus gives the front ends their
    // external interface; no NSM VLAN endpoint, no NSM client.
    let nad = iface.network_attachments.first();
    if vlan != 0 && nad.is_none() {
        let name = format!("nse-vlan-{an}");
        let cidr = [iface.ipv4_prefix.clone(), iface.ipv6_prefix.clone()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(",");
        let mut e = vec![env_field("NSM_NAME", "metadata.name")];
        if let Value::Array(rest) = env(&[
            ("NSE_POINT2POINT", "False".into()),
            ("NSM_REGISTER_SERVICE", "True".into()),
            ("NSM_MAX_TOKEN_LIFETIME", "10m".into()),
            ("NSM_REGISTRY_CLIENT_POLICIES", String::new()),
            (
                "NSM_SERVICES",
                format!("{nse_service} {{ vlan: {vlan}; via: {} }}", iface.link),
            ),
            ("NSM_CONNECT_TO", s.nsm_registry_service.clone()),
            ("NSM_CIDR_PREFIX", cidr),
            ("NSM_LISTEN_ON", "tcp://:5003".into()),
            ("NSM_LOG_LEVEL", s.log_level.clone()),
            ("SPIFFE_ENDPOINT_SOCKET", spire_env().1),
        ]) {
            e.extend(rest);
        }
        let probe = json!({"exec": {"command": ["/bin/grpc_health_probe", "-spiffe",
                                                "-addr=:5003", "-rpc-timeout=1s"]}});
        let c = with_resources(
            json!({
                "name": "nse-vlan", "image": s.nse_vlan_image, "env": e,
                "ports": [{"containerPort": 5003}],
                "securityContext": security(&[], Some(10000)),
                "readinessProbe": probe, "livenessProbe": probe,
                "volumeMounts": [{"name": SPIRE_MOUNT.0, "mountPath": SPIRE_MOUNT.1, "readOnly": true}],
            }),
            resources(s, template, "nse-vlan", &mut p),
        );
        out.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": meta(&name, ns, owners.clone(), &[]),
            "spec": {
                "replicas": 1,
                "strategy": {"type": "RollingUpdate",
                             "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"}},
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name, "spiffe.io/spiffe-id": "true"}},
                    "spec": pod_spec(s, json!({
                        "automountServiceAccountToken": false,
                        "containers": [c],
                        "volumes": [{"name": SPIRE_MOUNT.0,
                                     "hostPath": {"path": SPIRE_MOUNT.1, "type": "Directory"}}],
                    })),
                },
            },
        }));
    }
    // The front end: stateless-lb, nsc, frontend.
    let name = format!("stateless-lb-frontend-{an}");
    let conduit = a.spec.composites.first().cloned().unwrap_or_default();
    let tr = d.trench.map_or("dualstack", family);
    let v4 = "sysctl -w net.ipv4.conf.all.forwarding=1 ; sysctl -w net.ipv4.fib_multipath_hash_policy=1 ; sysctl -w net.ipv4.conf.all.rp_filter=0 ; sysctl -w net.ipv4.conf.default.rp_filter=0";
    let v6 =
        "sysctl -w net.ipv6.conf.all.forwarding=1 ; sysctl -w net.ipv6.fib_multipath_hash_policy=1";
    let both = "sysctl -w net.ipv4.ip_local_port_range='49152 65535' ; sysctl -w net.ipv4.fwmark_reflect=1 ; sysctl -w net.ipv6.fwmark_reflect=1";
    let script = match tr {
        "ipv4" => format!("{v4} ; {both}"),
        "ipv6" => format!("{v6} ; {both}"),
        _ => format!("{v4} ; {v6} ; {both}"),
    };
    let lb_env = {
        let mut e = vec![env_field("NSM_NAME", "metadata.name")];
        if let Value::Array(rest) = env(&[
            ("NSM_MAX_TOKEN_LIFETIME", "10m".into()),
            ("NSM_METRICS_ENABLED", "true".into()),
            ("NSM_SERVICE_NAME", format!("{conduit}.{t}.{ns}")),
            ("NSM_CONDUIT_NAME", conduit.clone()),
            ("NSM_TRENCH_NAME", t.to_owned()),
            ("NSM_NSP_SERVICE", format!("nsp-service-{t}:7778")),
            ("NSM_LOG_LEVEL", s.log_level.clone()),
            (
                "NSM_GRPC_PROBE_RPC_TIMEOUT",
                s.grpc_probe_rpc_timeout.clone(),
            ),
            ("SPIFFE_ENDPOINT_SOCKET", spire_env().1),
        ]) {
            e.extend(rest);
        }
        e
    };
    let mut lb = json!({
        "name": "stateless-lb", "image": s.image("stateless-lb"), "env": lb_env,
        "ports": [{"name": "metrics", "containerPort": 2223}],
        "securityContext": security(&["NET_ADMIN", "IPC_LOCK", "IPC_OWNER", "DAC_OVERRIDE", "NET_RAW", "SYS_PTRACE"], None),
        "volumeMounts": [
            {"name": "nsm-socket", "mountPath": NSM_SOCKET},
            {"name": "tmp-lb", "mountPath": "/tmp"},
            {"name": "lb-socket", "mountPath": "/var/lib/meridio"},
            {"name": SPIRE_MOUNT.0, "mountPath": SPIRE_MOUNT.1, "readOnly": true},
        ],
    });
    merge(&mut lb, grpc_probes("stateless-lb"));
    let lb = with_resources(lb, resources(s, template, "stateless-lb", &mut p));
    let nsc_env = {
        let mut e = vec![env_field("NSM_NAME", "metadata.name")];
        if let Value::Array(rest) = env(&[
            ("NSM_DIAL_TIMEOUT", "30s".into()),
            ("NSM_REQUEST_TIMEOUT", "300s".into()),
            ("NSM_MAX_TOKEN_LIFETIME", "10m".into()),
            ("NSM_LOCALDNSSERVERADDRESS", "127.0.0.1:10053".into()),
            (
                "NSM_NETWORK_SERVICES",
                format!("kernel://{nse_service}/{}", iface.name),
            ),
            ("NSM_LOG_LEVEL", s.log_level.clone()),
            ("NSM_LIVENESSCHECKENABLED", "false".into()),
            ("SPIFFE_ENDPOINT_SOCKET", spire_env().1),
        ]) {
            e.extend(rest);
        }
        e
    };
    let nsc = nad.is_none().then(|| {
        with_resources(
            json!({
                "name": "nsc", "image": s.nsc_image, "env": nsc_env,
                "securityContext": security(&[], Some(10000)),
                "volumeMounts": [
                    {"name": "nsm-socket", "mountPath": NSM_SOCKET, "readOnly": true},
                    {"name": SPIRE_MOUNT.0, "mountPath": SPIRE_MOUNT.1, "readOnly": true},
                ],
            }),
            resources(s, template, "nsc", &mut p),
        )
    });
    let mut fe = json!({
        "name": "frontend", "image": s.image("frontend"),
        "env": env(&[
            ("NFE_LOG_BIRD", "true".into()),
            ("NFE_ECMP", "true".into()),
            ("NFE_METRICS_ENABLED", "true".into()),
            ("NFE_NAMESPACE", ns.to_owned()),
            (
                "NFE_EXTERNAL_INTERFACE",
                nad.and_then(|n| n.interface.clone())
                    .unwrap_or_else(|| iface.name.clone()),
            ),
            ("NFE_NSP_SERVICE", format!("nsp-service-{t}:7778")),
            ("NFE_CONFIG_MAP_NAME", config_map_name(t)),
            ("NFE_TRENCH_NAME", t.to_owned()),
            ("NFE_ATTRACTOR_NAME", an.to_owned()),
            ("NFE_LOG_LEVEL", s.log_level.clone()),
            ("NFE_GRPC_PROBE_RPC_TIMEOUT", s.grpc_probe_rpc_timeout.clone()),
            ("SPIFFE_ENDPOINT_SOCKET", spire_env().1),
        ]),
        "ports": [{"name": "metrics", "containerPort": 2224}],
        "securityContext": security(&["NET_ADMIN", "NET_BIND_SERVICE", "DAC_OVERRIDE", "NET_RAW", "SYS_PTRACE"], None),
        "volumeMounts": [
            {"name": "tmp-fe", "mountPath": "/tmp"},
            {"name": "run-bird", "mountPath": "/var/run/bird"},
            {"name": "etc-bird", "mountPath": "/etc/bird"},
            {"name": "log", "mountPath": "/var/log"},
            {"name": "lb-socket", "mountPath": "/var/lib/meridio"},
            {"name": SPIRE_MOUNT.0, "mountPath": SPIRE_MOUNT.1, "readOnly": true},
        ],
    });
    merge(&mut fe, grpc_probes("frontend"));
    let fe = with_resources(fe, resources(s, template, "frontend", &mut p));
    let empty = |n: &str| json!({"name": n, "emptyDir": {}});
    let containers: Vec<Value> = [Some(lb), nsc, Some(fe)].into_iter().flatten().collect();
    let mut pod_meta = json!({"labels": {"app": name, "app-type": "stateless-lb-frontend",
                                         "spiffe.io/spiffe-id": "true"}});
    if let Some(n) = nad {
        let mut attachment = json!({"name": n.name,
            "interface": n.interface.clone().unwrap_or_else(|| iface.name.clone())});
        if let Some(namespace) = &n.namespace {
            attachment["namespace"] = json!(namespace);
        }
        pod_meta["annotations"] = json!({
            "k8s.v1.cni.cncf.io/networks": Value::Array(vec![attachment]).to_string()
        });
    }
    out.push(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta(&name, ns, owners.clone(), &[("app-type", "stateless-lb-frontend")]),
        "spec": {
            "replicas": a.spec.replicas.unwrap_or(1),
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "25%"}},
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": pod_meta,
                "spec": pod_spec(s, json!({
                    "serviceAccountName": s.fe_account(t),
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchExpressions": [
                            {"key": "app", "operator": "In", "values": [name]}]},
                        "topologyKey": "kubernetes.io/hostname"}]}},
                    "securityContext": {"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"},
                    "initContainers": [sysctl_init(s, &script)],
                    "containers": containers,
                    "volumes": [
                        {"name": "nsm-socket", "hostPath": {"path": NSM_SOCKET, "type": "DirectoryOrCreate"}},
                        {"name": SPIRE_MOUNT.0, "hostPath": {"path": SPIRE_MOUNT.1, "type": "Directory"}},
                        {"name": "lb-socket", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}},
                        empty("tmp-lb"), empty("tmp-fe"), empty("run-bird"), empty("etc-bird"), empty("log"),
                    ],
                })),
            },
        },
    }));
    out.push(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": meta(&format!("pdb-{an}"), ns, owners, &[]),
        "spec": {"minAvailable": "75%", "selector": {"matchLabels": {"app": name}}},
    }));
    if !p.is_empty() {
        problems.insert(format!("Attractor/{an}"), p);
    }
    out
}

fn proxy(
    c: &Conduit,
    d: &Domain<'_>,
    s: &Settings,
    problems: &mut BTreeMap<String, Vec<String>>,
) -> Value {
    let ns = d.namespace.as_str();
    let t = d.name.as_str();
    let cn = name_of(&c.metadata);
    let name = format!("proxy-{cn}");
    let mut p = Vec::new();
    let fam = d.trench.map_or("dualstack", family);
    let v4 = "sysctl -w net.ipv4.conf.all.forwarding=1 ; sysctl -w net.ipv4.fib_multipath_hash_policy=1 ; sysctl -w net.ipv4.conf.all.rp_filter=0 ; sysctl -w net.ipv4.conf.default.rp_filter=0";
    let v6 = "sysctl -w net.ipv6.conf.all.forwarding=1 ; sysctl -w net.ipv6.fib_multipath_hash_policy=1 ; sysctl -w net.ipv6.conf.all.accept_dad=0";
    let script = match fam {
        "ipv4" => v4.to_owned(),
        "ipv6" => v6.to_owned(),
        _ => format!("{v4} ; {v6}"),
    };
    let mut e = vec![
        env_field("NSM_NAME", "metadata.name"),
        env_field("NSM_HOST", "spec.nodeName"),
    ];
    if let Value::Array(rest) = env(&[
        ("NSM_CONNECT_TO", format!("unix://{NSM_SOCKET}/nsm.io.sock")),
        ("NSM_MAX_TOKEN_LIFETIME", "10m".into()),
        ("NSM_NAMESPACE", ns.to_owned()),
        ("NSM_SERVICE_NAME", format!("proxy.{cn}.{t}.{ns}")),
        ("NSM_IPAM_SERVICE", format!("ipam-service-{t}:7777")),
        ("NSM_NETWORK_SERVICE_NAME", format!("{cn}.{t}.{ns}")),
        ("NSM_NSP_SERVICE_NAME", "nsp-service".into()),
        ("NSM_NSP_SERVICE_PORT", "7778".into()),
        ("NSM_TRENCH", t.to_owned()),
        ("NSM_CONDUIT", cn.to_owned()),
        ("NSM_IP_FAMILY", fam.to_owned()),
        ("NSM_LOG_LEVEL", s.log_level.clone()),
        (
            "NSM_GRPC_PROBE_RPC_TIMEOUT",
            s.grpc_probe_rpc_timeout.clone(),
        ),
        ("NSM_MTU", s.conduit_mtu.clone()),
        ("NSM_IP_RELEASE_DELAY", s.proxy_ip_release_delay.clone()),
        ("SPIFFE_ENDPOINT_SOCKET", spire_env().1),
    ]) {
        e.extend(rest);
    }
    let mut container = json!({
        "name": "proxy", "image": s.image("proxy"), "env": e,
        "securityContext": security(&["NET_ADMIN", "DAC_OVERRIDE", "NET_RAW", "SYS_PTRACE"], None),
        "volumeMounts": [
            {"name": "nsm-socket", "mountPath": NSM_SOCKET, "readOnly": true},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": SPIRE_MOUNT.0, "mountPath": SPIRE_MOUNT.1, "readOnly": true},
        ],
    });
    merge(&mut container, grpc_probes("proxy"));
    let container = with_resources(
        container,
        resources(s, annotation(&c.metadata), "proxy", &mut p),
    );
    if !p.is_empty() {
        problems.insert(format!("Conduit/{cn}"), p);
    }
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": meta(&name, ns, owner("Conduit", cn, c.metadata.uid.as_deref()), &[]),
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "spiffe.io/spiffe-id": "true"}},
                "spec": pod_spec(s, json!({
                    "automountServiceAccountToken": false,
                    "securityContext": {"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"},
                    "initContainers": [sysctl_init(s, &script)],
                    "containers": [container],
                    "volumes": [
                        {"name": "nsm-socket", "hostPath": {"path": NSM_SOCKET, "type": "DirectoryOrCreate"}},
                        {"name": SPIRE_MOUNT.0, "hostPath": {"path": SPIRE_MOUNT.1, "type": "Directory"}},
                        {"name": "tmp", "emptyDir": {"medium": "Memory"}},
                    ],
                })),
            },
        },
    })
}

#[cfg(test)]
pub(crate) mod tests;
