//! `netpolicy plan`: every pure pipeline over manifests on disk, no cluster needed.
//!
//! [`plan`] turns [`Manifests`] into a [`PlanReport`]: per node, the merged routing
//! items with their sources; and every problem (invalid objects, conflicts, nodes held
//! at their last good config). [`PlanReport::to_table`] renders it for a person;
//! serde renders the JSON/YAML contract of docs/architecture.md.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt::Write as _,
    sync::Arc,
};

use netpolicy_core::{
    merge::{Engine, NodeOutcome, Problem},
    render::RenderedSpec,
    selector::Labels,
};
use serde::Serialize;

pub mod manifest;
pub(crate) mod table;

pub(crate) use table::wrap_prose;

use manifest::{Located, Manifests};

use crate::{
    api::{FloatingIPRange, ROUTE_REFLECTOR_CONFIG_NAME},
    floating_ip as fip,
    k8s::{InputError, NodeFacts},
    route_reflector::{self as rr, RouteReflectorReport},
    routed_ip,
    routing::{cluster_config_policy, node_config_policy},
    trench,
};

/// One RoutedIP's elected node (empty when no node is eligible).
#[derive(Debug, Clone, Serialize)]
pub struct RoutedIPReport {
    /// RoutedIP name.
    pub name: String,
    /// Elected node; empty when none is eligible.
    pub node: String,
}

/// The rollout order of one policy's change.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReport {
    /// `ClusterConfig/<name>` or `NodeConfig/<name>`.
    pub policy: String,
    /// Its `maxUnavailable` (`25%` unless set).
    pub max_unavailable: String,
    /// Nodes at once, resolved against the nodes it selects.
    pub nodes_at_once: usize,
    /// Seconds each node has to pass the probes.
    pub rollback_seconds: u32,
    /// The probes its nodes run after applying (`ping 10.0.0.1`, `tcp 10.0.0.1:6443`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<String>,
    /// Which nodes go in which wave (by name; a wave starts when the one before it has
    /// applied and passed its probes).
    pub waves: Vec<Vec<String>>,
}

/// One trench in the plan: where its traffic enters (attractor nodes) and what it was
/// handed (tables, node addresses).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrenchReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `meridio` (Meridio's workloads) or `node` (compiled into node routing).
    pub data_plane: String,
    /// `meridio`: the configuration ConfigMap that would be kept (absent while invalid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapReport>,
    /// `meridio`: every workload that would be kept, as applied (absent while invalid).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadReport>,
    /// The trench's routing table (absent while invalid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// Each stream's routing table.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub stream_tables: BTreeMap<String, u32>,
    /// Each attractor with its nodes.
    pub attractors: Vec<AttractorReport>,
}

/// The trench's configuration ConfigMap (`meridio` data plane).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConfigMapReport {
    /// `meridio-configuration-<trench>`.
    pub name: String,
    /// Its seven keys, as Meridio's components read them.
    pub data: BTreeMap<String, String>,
}

/// One object of Meridio's the operator would keep (`meridio` data plane).
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkloadReport {
    /// `StatefulSet`, `Deployment`, `DaemonSet`, `Service`, `PodDisruptionBudget`, and
    /// the trench's accounts: `ServiceAccount`, `Role`, `RoleBinding`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The whole object, as applied.
    pub object: serde_json::Value,
}

/// One attractor in the plan.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttractorReport {
    /// Name.
    pub name: String,
    /// The nodes it selects that were compiled (have their addresses), sorted.
    pub nodes: Vec<String>,
    /// Each node's addresses on the attractor's interface.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub addresses: BTreeMap<String, Vec<String>>,
}

/// The result of `netpolicy plan`, in the JSON shape of docs/architecture.md.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// Per node (rendered ones only), the merged items. Nodes with identical results
    /// share one value.
    pub nodes: BTreeMap<String, Arc<RenderedSpec>>,
    /// Nodes that keep their last good config, with why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub held_nodes: BTreeMap<String, Vec<String>>,
    /// Every FloatingIPRange with its counts.
    #[serde(rename = "floatingIPRanges")]
    pub floating_ip_ranges: Vec<RangeReport>,
    /// Every FloatingIP (explicit and auto-allocated), by namespace and name.
    #[serde(rename = "floatingIPs")]
    pub floating_ips: Vec<FloatingIPReport>,
    /// The kube-vip ConfigMaps the operator would keep (its keys only).
    #[serde(rename = "kubeVip", skip_serializing_if = "Vec::is_empty")]
    pub kube_vip: Vec<fip::KubeVipPublication>,
    /// Guest clusters (FloatingIPRange `kubeVip.guests` or `guestKubeconfigSecret`):
    /// per FloatingIP namespace, what would be installed and published there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guests: Vec<GuestReport>,
    /// The elected node of every RoutedIP (no provider is called).
    #[serde(rename = "routedIPs")]
    pub routed_ips: Vec<RoutedIPReport>,
    /// For each ClusterConfig and NodeConfig, the order a change of it reaches its
    /// nodes: waves of at most `maxUnavailable` nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rollout: Vec<RolloutReport>,
    /// Every trench with its attractors' nodes, tables and node addresses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trenches: Vec<TrenchReport>,
    /// Route reflectors, when the input has a RouteReflectorConfig.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_reflectors: Option<RouteReflectorReport>,
    /// Every problem with the input.
    pub errors: Vec<InputError>,
    /// What is accepted but worth a person's look (a gateway nothing routes through, a
    /// document of a kind plan does not read, ...), in the shape of `errors`: a
    /// pipeline gating on the JSON sees them. The table form prints them on stderr.
    pub warnings: Vec<InputError>,
}

/// A count as JSON: a number while a double holds it exactly (up to 2^53), a decimal
/// string above, as in the CRD status, so that jq and JavaScript read it exactly.
fn exact_count<S: serde::Serializer>(
    c: &netpolicy_ipam::space::Count,
    s: S,
) -> Result<S::Ok, S::Error> {
    match c.get() {
        Some(n) if n <= 1 << 53 => s.serialize_u128(n),
        _ => s.collect_str(c),
    }
}

/// One FloatingIPRange in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeReport {
    /// Range name.
    pub name: String,
    /// Usable addresses (exact, any size, up to 2^128).
    #[serde(serialize_with = "exact_count")]
    pub capacity: netpolicy_ipam::space::Count,
    /// Allocated addresses.
    #[serde(serialize_with = "exact_count")]
    pub allocated: netpolicy_ipam::space::Count,
    /// Whether the range is draining.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

/// One FloatingIP in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FloatingIPReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The range it allocates from.
    pub range: String,
    /// The allocated address; empty when the request failed (see `errors`).
    pub address: String,
    /// Whether it was created by the range's `autoAllocate`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub auto: bool,
}

impl PlanReport {
    /// Whether the input had validation errors or conflicts (exit status 1).
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }
}

/// Keeps the first object of each name and reports the others.
fn unique_by_name<T>(
    kind: &str,
    items: &[Located<T>],
    name: impl Fn(&T) -> Option<&String>,
    errors: &mut Vec<InputError>,
) -> Vec<usize> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut keep = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let n = name(&it.object).map_or("", String::as_str);
        match seen.get(n) {
            Some(&first) => errors.push(InputError {
                kind: kind.into(),
                name: n.into(),
                field: "metadata.name".into(),
                message: format!(
                    "defined twice: at {} and at {}; the second is ignored",
                    items[first].origin, it.origin
                ),
            }),
            None => {
                seen.insert(n, i);
                keep.push(i);
            }
        }
    }
    keep
}

/// Runs the merge over the manifests.
pub fn plan(m: &Manifests) -> PlanReport {
    let mut errors = m.errors.clone();
    let (mut policies, nodes) = routing_policies(m, &mut errors);
    let mut warnings = m.warnings.clone();
    let trenches = plan_trenches(m, &nodes, &mut policies, &mut errors, &mut warnings);
    let nodes = nodes
        .into_iter()
        .map(|(n, l)| {
            let l = netpolicy_core::merge::with_node_name(&n, &l);
            (n, l)
        })
        .collect::<Vec<_>>();
    let engine = Engine::build(nodes, policies);
    let mut report = PlanReport {
        warnings,
        trenches,
        rollout: plan_rollout(m, &engine),
        ..PlanReport::default()
    };
    node_renderings(&engine, &mut report, &mut errors);
    too_large(&report, &mut errors);
    let (ranges, fips, kube_vip) = plan_floating_ips(m, &mut errors, &mut report.warnings);
    report.guests = plan_guests(m, &fips, &kube_vip, &mut report.warnings);
    report.floating_ip_ranges = ranges;
    report.floating_ips = fips;
    report.kube_vip = kube_vip;
    report.route_reflectors = plan_route_reflectors(m, &mut errors);
    if let Some(rr) = &report.route_reflectors {
        report.warnings.extend(rr.warnings.iter().map(|w| {
            InputError::new(
                "RouteReflectorConfig",
                ROUTE_REFLECTOR_CONFIG_NAME,
                "spec",
                w,
            )
        }));
        report.warnings.extend(foreign_bgp_peers(m));
    }
    report.routed_ips = plan_routed_ips(m, &mut errors, &mut report.warnings);
    add_job_items(m, &mut report, &mut errors);
    report.errors = errors;
    report
}

/// The ClusterConfigs' and NodeConfigs' policies, and the nodes with their labels (each
/// name once: a second definition is an error).
fn routing_policies(
    m: &Manifests,
    errors: &mut Vec<InputError>,
) -> (Vec<netpolicy_core::merge::Policy>, Vec<(String, Labels)>) {
    let mut policies = Vec::new();
    for i in unique_by_name(
        "ClusterConfig",
        &m.cluster_configs,
        |o| o.metadata.name.as_ref(),
        errors,
    ) {
        policies.extend(cluster_config_policy(&m.cluster_configs[i].object, errors));
    }

    for i in unique_by_name(
        "NodeConfig",
        &m.node_configs,
        |o| o.metadata.name.as_ref(),
        errors,
    ) {
        policies.push(node_config_policy(&m.node_configs[i].object, errors));
    }

    let nodes: Vec<(String, Labels)> =
        unique_by_name("Node", &m.nodes, |o| o.metadata.name.as_ref(), errors)
            .into_iter()
            .map(|i| {
                let n = &m.nodes[i].object;
                (
                    n.metadata.name.clone().unwrap_or_default(),
                    n.metadata.labels.clone().unwrap_or_default(),
                )
            })
            .collect();

    (policies, nodes)
}

/// Traffic domains: validated, allocated from scratch (no previous status), compiled
/// into one policy per (trench, attractor node) added to `policies`; each trench's
/// report.
fn plan_trenches(
    m: &Manifests,
    nodes: &[(String, Labels)],
    policies: &mut Vec<netpolicy_core::merge::Policy>,
    errors: &mut Vec<InputError>,
    warnings: &mut Vec<InputError>,
) -> Vec<TrenchReport> {
    fn objects<T: Clone>(v: &[Located<T>]) -> Vec<T> {
        v.iter().map(|l| l.object.clone()).collect()
    }
    let (tr, at, gw, vi, co, st, fl) = (
        objects(&m.trenches),
        objects(&m.attractors),
        objects(&m.gateways),
        objects(&m.vips),
        objects(&m.conduits),
        objects(&m.streams),
        objects(&m.flows),
    );
    let domains = trench::domains(
        trench::Objects {
            trenches: &tr,
            attractors: &at,
            gateways: &gw,
            vips: &vi,
            conduits: &co,
            streams: &st,
            flows: &fl,
        },
        errors,
    );
    let traffic = trench::evaluate(&domains, nodes, &BTreeMap::new());
    errors.extend(traffic.errors.iter().cloned());
    warnings.extend(traffic.notes.iter().cloned());
    for ps in trench::policies(&domains, &traffic.valid, &traffic.allocations, errors).into_values()
    {
        policies.extend(ps);
    }
    domains
        .iter()
        .filter(|d| d.trench.is_some())
        .map(|d| {
            let alloc = traffic
                .allocations
                .get(&d.key())
                .cloned()
                .unwrap_or_default();
            let valid = traffic.valid.contains(&d.key());
            let meridio = valid && !d.node_mode();
            let mut problems = BTreeMap::new();
            let objects = if meridio {
                trench::meridio::workloads(d, &trench::meridio::Settings::default(), &mut problems)
            } else {
                Vec::new()
            };
            TrenchReport {
                namespace: d.namespace.clone(),
                name: d.name.clone(),
                data_plane: if d.node_mode() { "node" } else { "meridio" }.to_owned(),
                config_map: meridio.then(|| ConfigMapReport {
                    name: trench::meridio::config_map_name(&d.name),
                    data: trench::meridio::config_map_data(d),
                }),
                workloads: objects
                    .into_iter()
                    .filter(|o| o["kind"] != "ConfigMap")
                    .map(|o| WorkloadReport {
                        kind: o["kind"].as_str().unwrap_or_default().to_owned(),
                        name: o["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        object: o,
                    })
                    .collect(),
                table: alloc.table.filter(|_| valid),
                stream_tables: if valid {
                    alloc.stream_tables.clone()
                } else {
                    BTreeMap::new()
                },
                attractors: d
                    .attractors
                    .iter()
                    .map(|a| {
                        let name = a.metadata.name.clone().unwrap_or_default();
                        let addresses =
                            alloc.node_addresses.get(&name).cloned().unwrap_or_default();
                        AttractorReport {
                            name,
                            nodes: addresses.keys().cloned().collect(),
                            addresses,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Each ClusterConfig's and NodeConfig's rollout: how many nodes at once, in which
/// waves.
fn plan_rollout(m: &Manifests, engine: &Engine) -> Vec<RolloutReport> {
    let rollout_settings: BTreeMap<String, crate::routing::rollout::Rollout> = m
        .cluster_configs
        .iter()
        .map(|l| {
            let o = &l.object;
            let name = o.metadata.name.clone().unwrap_or_default();
            let r = crate::routing::rollout::settings(
                "ClusterConfig",
                &name,
                o.spec.rollout.as_ref(),
                &o.spec.probes,
                &mut Vec::new(),
            );
            (format!("ClusterConfig/{name}"), r)
        })
        .chain(m.node_configs.iter().map(|l| {
            let o = &l.object;
            let name = o.metadata.name.clone().unwrap_or_default();
            let r = crate::routing::rollout::settings(
                "NodeConfig",
                &name,
                o.spec.rollout.as_ref(),
                &o.spec.probes,
                &mut Vec::new(),
            );
            (format!("NodeConfig/{name}"), r)
        }))
        .collect();
    let mut rollout: Vec<RolloutReport> = engine
        .policies()
        .filter(|p| p.source().kind != netpolicy_core::merge::SourceKind::Trench)
        .filter_map(|p| {
            let key = p.source().to_string();
            let r = rollout_settings.get(&key)?;
            let members: Vec<&str> = engine.selected(p.source());
            let at_once = r.max_unavailable.resolve(members.len());
            Some(RolloutReport {
                policy: key,
                max_unavailable: r.max_unavailable.to_string(),
                nodes_at_once: at_once,
                rollback_seconds: r
                    .rollback_seconds
                    .unwrap_or(netpolicy_core::rollout::DEFAULT_ROLLBACK_SECONDS),
                probes: r.probes.iter().map(ToString::to_string).collect(),
                waves: netpolicy_core::rollout::waves(&members, at_once)
                    .into_iter()
                    .map(|w| w.into_iter().map(str::to_owned).collect())
                    .collect(),
            })
        })
        .collect();
    // Whatever order the objects came in.
    rollout.sort_by(|a, b| a.policy.cmp(&b.policy));
    rollout
}

/// Each node's rendering (nodes with the same outcome share one), or why it is held.
fn node_renderings(engine: &Engine, report: &mut PlanReport, errors: &mut Vec<InputError>) {
    let mut rendered: HashMap<(usize, usize), Arc<RenderedSpec>> = HashMap::new();
    let mut by_problem: BTreeMap<Problem, Vec<&str>> = BTreeMap::new();
    for (node, outcome) in engine.outcomes() {
        match outcome {
            NodeOutcome::Rendered(cfg) => {
                let key = cfg.memo_key();
                let spec = rendered
                    .entry(key)
                    .or_insert_with(|| Arc::new(RenderedSpec::from_config(cfg)));
                report.nodes.insert(node.to_owned(), Arc::clone(spec));
            }
            NodeOutcome::Held(problems) => {
                report.held_nodes.insert(
                    node.to_owned(),
                    problems.iter().map(ToString::to_string).collect(),
                );
                for p in problems.iter() {
                    by_problem.entry(p.clone()).or_default().push(node);
                }
            }
        }
    }
    for (problem, nodes) in by_problem {
        let on = node_list(&nodes);
        match problem {
            Problem::Conflict(c) => errors.push(InputError {
                kind: c.sources[0].kind.as_str().into(),
                name: c.sources[0].name.to_string(),
                field: format!("spec.{}", c.item.field()),
                message: format!("{c} on {on}; they keep their last good config"),
            }),
            Problem::InvalidPolicy(s) => errors.push(InputError {
                kind: s.kind.as_str().into(),
                name: s.name.to_string(),
                field: "spec".into(),
                message: format!("is invalid, so {on} it applies to keep their last good config"),
            }),
        }
    }
}

/// What the operator would not write: a node's NodeNetworkConfig over the default
/// `--max-object-bytes` (measured once per distinct rendering, on the same object).
fn too_large(report: &PlanReport, errors: &mut Vec<InputError>) {
    let mut sizes: HashMap<*const RenderedSpec, usize> = HashMap::new();
    for (node, spec) in &report.nodes {
        let bytes = *sizes.entry(Arc::as_ptr(spec)).or_insert_with(|| {
            let nnc = crate::routing::node_spec((**spec).clone(), Vec::new(), None);
            crate::routing::object_bytes(&crate::routing::node_object(node, "", &nnc))
        });
        if bytes > crate::k8s::DEFAULT_MAX_OBJECT_BYTES {
            errors.push(InputError {
                kind: "NodeNetworkConfig".into(),
                name: node.clone(),
                field: "spec".into(),
                message: format!(
                    "TooLarge: {bytes} bytes, over the {} the operator writes \
                     (--max-object-bytes); the node would keep its last config; most items \
                     from {}",
                    crate::k8s::DEFAULT_MAX_OBJECT_BYTES,
                    crate::routing::largest_contributors(spec, 3).join(", ")
                ),
            });
        }
    }
}

/// What other jobs need on nodes, as the routing job adds it: a Hetzner RoutedIP's
/// address and return routing on its elected holder (the address from its status or
/// spec), return routing on the node announcing a FloatingIP (its planned address and
/// its Service's vipHost).
fn add_job_items(m: &Manifests, report: &mut PlanReport, errors: &mut Vec<InputError>) {
    let rips: Vec<crate::api::RoutedIP> = report
        .routed_ips
        .iter()
        .filter(|r| !r.node.is_empty())
        .filter_map(|r| {
            let mut rip = m
                .routed_ips
                .iter()
                .find(|x| x.object.metadata.name.as_deref() == Some(r.name.as_str()))?
                .object
                .clone();
            let st = rip.status.get_or_insert_with(Default::default);
            st.node = Some(r.node.clone());
            if st.address.is_none() {
                st.address.clone_from(&rip.spec.address);
            }
            Some(rip)
        })
        .collect();
    let fips: Vec<crate::api::FloatingIP> = report
        .floating_ips
        .iter()
        .filter(|f| !f.address.is_empty())
        .filter_map(|f| {
            let mut fip = m
                .floating_ips
                .iter()
                .find(|x| {
                    x.object.metadata.name.as_deref() == Some(f.name.as_str())
                        && x.object.metadata.namespace.as_deref().unwrap_or("default")
                            == f.namespace
                })?
                .object
                .clone();
            fip.metadata.namespace = Some(f.namespace.clone());
            fip.status.get_or_insert_with(Default::default).address = Some(f.address.clone());
            Some(fip)
        })
        .collect();
    let services: Vec<k8s_openapi::api::core::v1::Service> = m
        .services
        .iter()
        .map(|s| {
            let mut o = s.object.clone();
            o.metadata.namespace.get_or_insert_with(|| "default".into());
            o
        })
        .collect();
    let services: Vec<&k8s_openapi::api::core::v1::Service> = services.iter().collect();
    let mut problems = Vec::new();
    let extra = crate::k8s::job_items(
        &rips,
        |n| {
            m.routed_ip_issuers
                .iter()
                .find(|i| i.object.metadata.name.as_deref() == Some(n))
                .map(|i| &i.object)
        },
        &fips,
        |n| {
            m.floating_ip_ranges
                .iter()
                .find(|r| r.object.metadata.name.as_deref() == Some(n))
                .map(|r| &r.object)
        },
        &services,
        &mut problems,
    );
    for p in problems {
        let (owner, message) = p.split_once(": ").unwrap_or(("", p.as_str()));
        let (kind, name) = owner.split_once('/').unwrap_or((owner, ""));
        let field = message
            .split_once(':')
            .map_or("spec.returnRouting", |(f, _)| f)
            .to_owned();
        errors.push(InputError {
            kind: kind.to_owned(),
            name: name.to_owned(),
            field,
            message: message.to_owned(),
        });
    }
    for (node, items) in extra {
        if let Some(spec) = report.nodes.get_mut(&node) {
            let (with, skipped) = crate::routing::with_job_items(spec, &items);
            report.warnings.extend(
                skipped
                    .into_iter()
                    .map(|w| InputError::new("NodeNetworkConfig", &node, "spec", w)),
            );
            *spec = Arc::new(with);
        }
    }
}

/// BGPPeers in the input that are not netpolicy's and peer nodes by a reflector label
/// (the route-reflector operator's `peer-to-rrs`, `rrs-to-rrs`): they stay beside
/// netpolicy's and keep their sessions up, whatever topology netpolicy chooses.
fn foreign_bgp_peers(m: &Manifests) -> Vec<InputError> {
    let label = m
        .route_reflector_configs
        .iter()
        .find(|c| c.object.metadata.name.as_deref() == Some(ROUTE_REFLECTOR_CONFIG_NAME))
        .and_then(|c| rr::config(&c.object.spec).ok())
        .map(|c| c.reflector_label)
        .unwrap_or_default();
    if label.is_empty() {
        return Vec::new();
    }
    m.bgp_peers
        .iter()
        .map(|p| &p.object)
        .filter(|p| {
            !p.metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .starts_with(netpolicy_rr::BGP_PEER_PREFIX)
        })
        .filter(|p| {
            [&p.spec.node_selector, &p.spec.peer_selector]
                .into_iter()
                .flatten()
                .any(|s| s.contains(&label))
        })
        .map(|p| {
            InputError::new(
                "BGPPeer",
                p.metadata.name.as_deref().unwrap_or_default(),
                "spec",
                format!(
                    "not netpolicy's and selects nodes by the reflector label {label:?} \
                     (nodeSelector {:?}, peerSelector {:?}): its sessions stay beside \
                     netpolicy's whatever topology netpolicy chooses; delete it once \
                     netpolicy's BGPPeers are in place (the route-reflector operator's \
                     peer-to-rrs and rrs-to-rrs are such)",
                    p.spec.node_selector.as_deref().unwrap_or(""),
                    p.spec.peer_selector.as_deref().unwrap_or("")
                ),
            )
        })
        .collect()
}

/// The route-reflector topology for the Nodes in the input, and the steps from the state
/// the Nodes and `BGPPeer`s in the input show.
fn plan_route_reflectors(
    m: &Manifests,
    errors: &mut Vec<InputError>,
) -> Option<RouteReflectorReport> {
    const KIND: &str = "RouteReflectorConfig";
    let found = unique_by_name(
        KIND,
        &m.route_reflector_configs,
        |o| o.metadata.name.as_ref(),
        errors,
    );
    let mut chosen = None;
    for i in found {
        let c = &m.route_reflector_configs[i].object;
        let name = c.metadata.name.clone().unwrap_or_default();
        if name == ROUTE_REFLECTOR_CONFIG_NAME {
            chosen = Some((name, c));
        } else {
            errors.push(InputError {
                kind: KIND.into(),
                name,
                field: "metadata.name".into(),
                message: format!(
                    "a RouteReflectorConfig must be named {ROUTE_REFLECTOR_CONFIG_NAME:?} \
                     (there is only one); this one is ignored"
                ),
            });
        }
    }
    let (name, c) = chosen?;
    let config = match rr::config(&c.spec) {
        Ok(config) => config,
        Err(problems) => {
            InputError::from_fields(KIND, &name, &problems, errors);
            return None;
        }
    };
    // Duplicate Node names are reported by the routing plan; the first one counts.
    let mut seen = BTreeSet::new();
    let nodes: Vec<&k8s_openapi::api::core::v1::Node> = m
        .nodes
        .iter()
        .map(|n| &n.object)
        .filter(|n| seen.insert(n.metadata.name.clone().unwrap_or_default()))
        .collect();
    let infos: Vec<netpolicy_rr::NodeInfo> = nodes
        .iter()
        .map(|n| rr::node_info(&NodeFacts::of(n, true)))
        .collect();
    let mut current = rr::current(
        nodes.iter().copied(),
        m.bgp_peers.iter().map(|p| &p.object),
        c.status.as_ref().map_or(&[][..], |s| &s.ring[..]),
        &config.reflector_label,
    );
    // Calico's mesh is not in the manifests. It is on by default, so before any
    // reflector has a cluster ID (a cold start); after that the job has turned it off,
    // unless it only reports it.
    current.mesh = c.spec.node_to_node_mesh == crate::api::NodeToNodeMesh::Report
        || current.marks.values().all(|m| m.cluster_id.is_none());
    match netpolicy_rr::topology(&infos, &config, &current) {
        Ok(t) => {
            let steps = netpolicy_rr::transition(&infos, &current, &t);
            Some(RouteReflectorReport::new(
                &t,
                &steps,
                &infos,
                &config.reflector_label,
            ))
        }
        Err(netpolicy_rr::Error::Invalid(problems)) => {
            InputError::from_fields(KIND, &name, &problems, errors);
            None
        }
        Err(e) => {
            errors.push(InputError {
                kind: KIND.into(),
                name,
                field: "spec".into(),
                message: e.to_string(),
            });
            None
        }
    }
}

/// Elects a node for every RoutedIP from the Nodes in the input (a Node without a Ready
/// condition counts as Ready, as hand-written manifests have none; `serviceRef`
/// endpoints cannot be checked without EndpointSlices and are assumed ready, with a
/// warning). The holder in `status.node` keeps the IP while eligible.
fn plan_routed_ips(
    m: &Manifests,
    errors: &mut Vec<InputError>,
    warnings: &mut Vec<InputError>,
) -> Vec<RoutedIPReport> {
    const KIND: &str = "RoutedIP";
    let issuers: BTreeMap<String, &crate::api::RoutedIPIssuerSpec> = m
        .routed_ip_issuers
        .iter()
        .filter_map(|i| Some((i.object.metadata.name.clone()?, &i.object.spec)))
        .collect();
    // The CRD's rule: exactly one provider.
    for i in &m.routed_ip_issuers {
        if i.object.spec.providers().len() != 1 {
            errors.push(InputError {
                kind: "RoutedIPIssuer".into(),
                name: i.object.metadata.name.clone().unwrap_or_default(),
                field: "spec".into(),
                message: netpolicy_issuers::exactly_one_message(),
            });
        }
    }
    let mut out = Vec::new();
    for i in unique_by_name(KIND, &m.routed_ips, |o| o.metadata.name.as_ref(), errors) {
        let r = &m.routed_ips[i].object;
        let name = r.metadata.name.clone().unwrap_or_default();
        if !issuers.contains_key(&r.spec.issuer_ref.name) {
            errors.push(InputError {
                kind: KIND.into(),
                name: name.clone(),
                field: "spec.issuerRef.name".into(),
                message: format!(
                    "no RoutedIPIssuer named {:?} in the input",
                    r.spec.issuer_ref.name
                ),
            });
        }
        let selector = match r.spec.node_selector.validate("spec.nodeSelector") {
            Ok(s) => s,
            Err(e) => {
                InputError::from_fields(KIND, &name, e.field_errors(), errors);
                continue;
            }
        };
        if let Some(svc) = &r.spec.service_ref {
            warnings.push(InputError::new(
                KIND,
                &name,
                "spec.serviceRef",
                format!(
                    "{}/{} not checked (plan has no EndpointSlices); every selected node is \
                     assumed to host a ready endpoint",
                    svc.namespace, svc.name
                ),
            ));
        }
        let candidates: Vec<netpolicy_issuers::Candidate> = m
            .nodes
            .iter()
            .map(|n| routed_ip::candidate(&NodeFacts::of(&n.object, true), &selector, true))
            .collect();
        let holder = r.status.as_ref().and_then(|s| s.node.clone());
        let node = routed_ip::elect(
            &candidates,
            holder.as_deref(),
            &[],
            0,
            r.spec.cooldown_seconds,
        )
        .map(|c| c.name.clone());
        if node.is_none() {
            warnings.push(InputError::new(
                KIND,
                &name,
                "spec.nodeSelector",
                "no eligible node (Ready, schedulable, selected, untainted, with \
                 spec.providerID)",
            ));
        }
        // The provider would refuse a holder whose ID is not one of its machines.
        let form = issuers
            .get(&r.spec.issuer_ref.name)
            .and_then(|s| routed_ip::provider_id_form(s));
        if let (Some(n), Some((prefix, reads))) = (&node, form)
            && let Some(id) = candidates
                .iter()
                .find(|c| c.name == *n)
                .and_then(|c| c.provider_id.as_deref())
            && !id.starts_with(prefix)
        {
            warnings.push(InputError::new(
                KIND,
                &name,
                "spec.issuerRef",
                format!(
                    "elected node {n} has spec.providerID {id:?}, not a machine of issuer {} \
                     ({reads}): the provider will refuse it",
                    r.spec.issuer_ref.name
                ),
            ));
        }
        out.push(RoutedIPReport {
            name,
            node: node.unwrap_or_default(),
        });
    }
    out
}

/// Allocates every FloatingIP (explicit and automatic) with the floating-IP job's rule
/// ([`crate::floating_ip`]); an explicit FloatingIP replaces the automatic one of the
/// same name.
fn plan_floating_ips(
    m: &Manifests,
    errors: &mut Vec<InputError>,
    warnings: &mut Vec<InputError>,
) -> (
    Vec<RangeReport>,
    Vec<FloatingIPReport>,
    Vec<fip::KubeVipPublication>,
) {
    let keep = unique_by_name(
        fip::RANGE_KIND,
        &m.floating_ip_ranges,
        |o| o.metadata.name.as_ref(),
        errors,
    );
    let mut ranges: Vec<&FloatingIPRange> = keep
        .iter()
        .map(|&i| &m.floating_ip_ranges[i].object)
        .collect();
    ranges.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let pools = fip::pools(&ranges, errors);
    let mut explicit = Vec::new();
    let mut explicit_names: BTreeSet<(String, String)> = BTreeSet::new();
    for f in &m.floating_ips {
        let c = fip::claim(&f.object);
        if !explicit_names.insert((c.namespace.clone(), c.name.clone())) {
            errors.push(fip::fip_error(
                &c.namespace,
                &c.name,
                "metadata.name",
                format!(
                    "defined twice (again at {}); the second is ignored",
                    f.origin
                ),
            ));
            continue;
        }
        explicit.push(c);
    }
    // The FloatingIPs autoAllocate would make, as the operator decides it.
    let existing: Vec<(String, String, String)> = explicit
        .iter()
        .map(|c| (c.namespace.clone(), c.name.clone(), c.range.clone()))
        .collect();
    let namespaces: Vec<&k8s_openapi::api::core::v1::Namespace> =
        m.namespaces.iter().map(|n| &n.object).collect();
    // As the operator serves a cluster that gets all of this at once: the FloatingIPs
    // that exist are served in the pass that sees them; the ones autoAllocate creates,
    // in the pass after (they exist only then), from what the first left free.
    let auto = fip::missing_auto(&ranges, &namespaces, &existing, None, errors);
    // Addresses already handed out (FloatingIP status) are restored first.
    let recorded: Vec<(String, String, String)> = m
        .floating_ips
        .iter()
        .filter_map(|f| {
            let o = &f.object;
            let addr = o.status.as_ref()?.address.clone()?;
            Some((o.spec.range.clone(), fip::claim(o).owner(), addr))
        })
        .collect();
    let known: BTreeSet<String> = ranges
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    let (answers, ledger) = fip::serve(pools, &recorded, explicit, auto, &known, errors);
    let mut fips: Vec<FloatingIPReport> = answers
        .into_iter()
        .map(|a| {
            let address = match a.result {
                Ok(ip) => ip.to_string(),
                Err((field, message)) => {
                    errors.push(fip::fip_error(
                        &a.claim.namespace,
                        &a.claim.name,
                        field,
                        message,
                    ));
                    String::new()
                }
            };
            FloatingIPReport {
                namespace: a.claim.namespace,
                name: a.claim.name,
                range: a.claim.range,
                address,
                auto: a.claim.auto,
            }
        })
        .collect();
    fips.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let held: Vec<fip::Holding> = fips
        .iter()
        .filter_map(|f| {
            Some(fip::Holding {
                namespace: f.namespace.clone(),
                name: f.name.clone(),
                range: f.range.clone(),
                address: f.address.parse().ok()?,
            })
        })
        .collect();
    let clusters: Vec<fip::guest::RancherCluster> = m
        .rancher_clusters
        .iter()
        .filter_map(|c| fip::guest::RancherCluster::from_object(&c.object))
        .collect();
    let kube_vip = fip::kube_vip(&ranges, &held, Some(&clusters));
    for r in ranges.iter().filter(|r| r.spec.harvester.is_some()) {
        warnings.push(InputError::new(
            "FloatingIPRange",
            r.metadata.name.as_deref().unwrap_or_default(),
            "spec.harvester",
            "plan cannot tell which Harvester cluster a guest runs on (the operator reads \
             it from the guest's cloud credential), so its autoAllocate creates nothing here",
        ));
    }
    for h in held.iter().filter(|h| !fip::publishable(h.address)) {
        let publishes = ranges.iter().any(|r| {
            r.metadata.name.as_deref() == Some(h.range.as_str())
                && r.spec.kube_vip.as_ref().is_some_and(|k| k.publish)
        });
        if publishes {
            warnings.push(InputError::new(
                "FloatingIP",
                &format!("{}/{}", h.namespace, h.name),
                "status.address",
                format!(
                    "kube-vip never hands out {} (an IPv4 address ending in .0 or .255); it is \
                     not published",
                    h.address
                ),
            ));
        }
    }
    let ranges = ledger
        .pools()
        .iter()
        .map(|(name, p)| RangeReport {
            name: name.to_owned(),
            capacity: p.alloc.space().size(),
            allocated: netpolicy_ipam::space::Count::new(p.alloc.allocated()),
            draining: p.draining,
        })
        .collect();
    (ranges, fips, kube_vip)
}

/// One guest cluster in `plan`'s output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GuestReport {
    /// The FloatingIPs' namespace (Rancher's `c-m-…`).
    pub namespace: String,
    /// The guest: its Rancher Cluster's name, or the kubeconfig Secret.
    pub cluster: String,
    /// `<namespace>/<secret>` of its kubeconfig.
    pub kubeconfig: String,
    /// What would be installed there (empty: publish only).
    pub install: Vec<ObjectRef>,
    /// The keys the operator would keep in the guest's kube-vip ConfigMap.
    #[serde(rename = "kubeVip")]
    pub kube_vip: BTreeMap<String, String>,
}

/// An object by kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ObjectRef {
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped kinds).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// The guests of the FloatingIPs `fips` hold: found as the operator finds them (with
/// discovery `rancher`, from the Rancher Clusters among the manifests).
fn plan_guests(
    m: &Manifests,
    fips: &[FloatingIPReport],
    kube_vip: &[fip::KubeVipPublication],
    warnings: &mut Vec<InputError>,
) -> Vec<GuestReport> {
    let clusters: Vec<fip::guest::RancherCluster> = m
        .rancher_clusters
        .iter()
        .filter_map(|c| fip::guest::RancherCluster::from_object(&c.object))
        .collect();
    let mut out: BTreeMap<String, GuestReport> = BTreeMap::new();
    for f in fips.iter().filter(|f| !f.address.is_empty()) {
        let Some(kv) = m
            .floating_ip_ranges
            .iter()
            .find(|r| r.object.metadata.name.as_deref() == Some(f.range.as_str()))
            .and_then(|r| r.object.spec.kube_vip.as_ref())
        else {
            continue;
        };
        match fip::guest_of(kv, &f.namespace, Some(&clusters)) {
            Ok(None) => {}
            Err(e) => warnings.push(InputError::new(
                "FloatingIP",
                &format!("{}/{}", f.namespace, f.name),
                "spec.range",
                e.to_string(),
            )),
            Ok(Some((kubeconfig, target))) => {
                let data = kube_vip
                    .iter()
                    .find(|p| p.cluster == kubeconfig)
                    .map(|p| p.data.clone())
                    .unwrap_or_default();
                let install = target
                    .install
                    .iter()
                    .flat_map(|i| &i.objects)
                    .map(|o| ObjectRef {
                        kind: o["kind"].as_str().unwrap_or_default().to_owned(),
                        namespace: o["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        name: o["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    })
                    .collect();
                out.entry(f.namespace.clone()).or_insert(GuestReport {
                    namespace: f.namespace.clone(),
                    cluster: target.name,
                    kubeconfig,
                    install,
                    kube_vip: data,
                });
            }
        }
    }
    out.into_values().collect()
}

fn node_list(nodes: &[&str]) -> String {
    const SHOWN: usize = 5;
    let mut s = format!(
        "{} node{} (",
        nodes.len(),
        if nodes.len() == 1 { "" } else { "s" }
    );
    s.push_str(&nodes[..nodes.len().min(SHOWN)].join(", "));
    if nodes.len() > SHOWN {
        let _ = write!(s, ", and {} more", nodes.len() - SHOWN);
    }
    s.push(')');
    s
}

#[cfg(test)]
mod tests;
