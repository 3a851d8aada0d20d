//! Route reflectors: Kubernetes Nodes, Calico `BGPPeer`s and the `RouteReflectorConfig`
//! turned into `netpolicy-rr`'s inputs, and the `routeReflectors` part of the plan.
//!
//! The current state is read from the cluster as it is: the reflector label, the
//! cluster-ID annotation and `rr.netpolicy.io/set-*` labels on Nodes, and the `BGPPeer`
//! objects whose names start with `netpolicy-rr-` (others are never touched).

mod connect;
pub(crate) mod controller;
mod datastore;
pub mod etcd;
mod metrics;
mod sessions;
mod step;

use std::{collections::BTreeMap, net::Ipv4Addr};

use netpolicy_core::FieldError;
use netpolicy_rr::{
    BGP_PEER_PREFIX, BgpPeer, CLUSTER_ID_ANNOTATION, Config, Current, Effect, Kind, Marks,
    NodeInfo, Per, SET_LABEL_PREFIX, Taint, Topology,
};
use serde::Serialize;

use crate::{
    api::{ReflectorTopology, ReflectorsPer, RouteReflectorConfigSpec},
    k8s::{NodeFacts, NodeView},
};

pub(crate) use crate::api::calico::{CalicoBgpPeer, CalicoBgpPeerSpec};

/// The validated configuration.
///
/// # Errors
/// Every problem, with its field path under `spec`.
pub(crate) fn config(spec: &RouteReflectorConfigSpec) -> Result<Config, Vec<FieldError>> {
    let mut errors = Vec::new();
    let eligible = spec
        .eligible_nodes
        .validate("spec.eligibleNodes")
        .map_err(|e| errors.extend(e.field_errors().iter().cloned()))
        .ok();
    let preferred = match &spec.preferred_nodes {
        None => None,
        Some(s) => s
            .validate("spec.preferredNodes")
            .map_err(|e| errors.extend(e.field_errors().iter().cloned()))
            .ok(),
    };
    let mut tolerations = Vec::new();
    for (i, t) in spec.tolerations.iter().enumerate() {
        let at = format!("spec.tolerations[{i}]");
        let exists = match t.operator.as_deref() {
            None | Some("Equal") => false,
            Some("Exists") => true,
            Some(o) => {
                errors.push(FieldError::new(
                    format!("{at}.operator"),
                    format!("operator {o:?} is neither \"Equal\" nor \"Exists\""),
                ));
                continue;
            }
        };
        if exists && !t.value.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.value"),
                "a toleration with operator Exists has no value",
            ));
        }
        let effect = match t.effect.as_str() {
            "" => None,
            e => match effect(e) {
                Some(e) => Some(e),
                None => {
                    errors.push(FieldError::new(
                        format!("{at}.effect"),
                        format!("effect {e:?} is not NoSchedule, PreferNoSchedule or NoExecute"),
                    ));
                    continue;
                }
            },
        };
        tolerations.push(netpolicy_rr::Toleration {
            key: t.key.clone(),
            exists,
            value: t.value.clone(),
            effect,
        });
    }
    let cluster_id = spec
        .cluster_id
        .parse::<Ipv4Addr>()
        .map_err(|_| {
            errors.push(FieldError::new(
                "spec.clusterID",
                format!(
                    "{:?} is not an IPv4 address (Calico cluster IDs look like 224.0.0.1)",
                    spec.cluster_id
                ),
            ));
        })
        .ok();
    let (Some(eligible), Some(cluster_id)) = (eligible, cluster_id) else {
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let c = Config {
        min: spec.min,
        max: spec.max,
        ratio: spec.ratio,
        per: match spec.per {
            ReflectorsPer::Zone => Per::Zone,
            ReflectorsPer::Cluster => Per::Cluster,
        },
        zone_label: spec.zone_label.clone(),
        eligible,
        preferred,
        tolerations,
        cluster_id,
        reflector_label: spec.reflector_label.clone(),
        topology: match spec.topology {
            ReflectorTopology::Simple => Kind::Simple,
            ReflectorTopology::Multi => Kind::Multi,
        },
        peers_per_node: spec.peers_per_node,
    };
    match c.check() {
        Ok(()) => Ok(c),
        Err(netpolicy_rr::Error::Invalid(v)) => Err(v),
        Err(e) => Err(vec![FieldError::new("spec", e.to_string())]),
    }
}

fn effect(e: &str) -> Option<Effect> {
    match e {
        "NoSchedule" => Some(Effect::NoSchedule),
        "PreferNoSchedule" => Some(Effect::PreferNoSchedule),
        "NoExecute" => Some(Effect::NoExecute),
        _ => None,
    }
}

/// What placement needs to know about a Node. A taint with an unknown effect counts as
/// `NoSchedule` (it keeps the node from being a reflector unless tolerated).
pub fn node_info(node: &NodeFacts) -> NodeInfo {
    NodeInfo {
        name: node.name.clone(),
        labels: node.labels.clone(),
        ready: node.ready,
        unschedulable: node.unschedulable,
        taints: node
            .taints
            .iter()
            .map(|t| Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: effect(&t.effect).unwrap_or(Effect::NoSchedule),
            })
            .collect(),
        created: node.created,
    }
}

/// The marks netpolicy owns on a Node now. A cluster-ID annotation that is not an IPv4
/// address is treated as absent (it will be rewritten).
pub(crate) fn marks(node: &impl NodeView, reflector_label: &str) -> Marks {
    marks_of(
        node.node_meta().labels.as_ref(),
        node.node_meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLUSTER_ID_ANNOTATION))
            .map(String::as_str),
        reflector_label,
    )
}

/// The marks from labels and a cluster ID wherever a datastore keeps them (Kubernetes
/// Node labels and annotation; a Calico Node's labels and `routeReflectorClusterID`).
pub(crate) fn marks_of(
    labels: Option<&BTreeMap<String, String>>,
    cluster_id: Option<&str>,
    reflector_label: &str,
) -> Marks {
    Marks {
        reflector: labels.and_then(|l| l.get(reflector_label)).cloned(),
        cluster_id: cluster_id.and_then(|v| v.parse().ok()),
        sets: labels
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(SET_LABEL_PREFIX))
            .map(|(k, _)| k.clone())
            .collect(),
    }
}

/// The current state from Nodes, `BGPPeer`s (only `netpolicy-rr-*` objects count) and
/// the ring kept in the RouteReflectorConfig's status.
pub fn current<'a, N: NodeView + 'a>(
    nodes: impl IntoIterator<Item = &'a N>,
    peers: impl IntoIterator<Item = &'a CalicoBgpPeer>,
    ring: &[String],
    reflector_label: &str,
) -> Current {
    current_of(
        nodes.into_iter().map(|n| {
            (
                n.node_meta().name.clone().unwrap_or_default(),
                marks(n, reflector_label),
            )
        }),
        peers,
        ring,
    )
}

/// The current state from each node's marks (by Kubernetes Node name), `BGPPeer`s (only
/// `netpolicy-rr-*` objects count) and the ring.
pub(crate) fn current_of<'a>(
    marks: impl IntoIterator<Item = (String, Marks)>,
    peers: impl IntoIterator<Item = &'a CalicoBgpPeer>,
    ring: &[String],
) -> Current {
    Current {
        marks: marks.into_iter().filter(|(_, m)| !m.is_empty()).collect(),
        bgp_peers: peers
            .into_iter()
            .filter_map(|p| {
                let name = p.metadata.name.clone()?;
                name.starts_with(BGP_PEER_PREFIX).then(|| BgpPeer {
                    name,
                    node_selector: p.spec.node_selector.clone().unwrap_or_default(),
                    peer_selector: p.spec.peer_selector.clone().unwrap_or_default(),
                })
            })
            .collect(),
        ring: ring.to_vec(),
        mesh: false,
    }
}

/// `routeReflectors` in `netpolicy plan` output.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteReflectorReport {
    /// Reflectors with their zone and cluster ID.
    pub reflectors: Vec<ReflectorRow>,
    /// Each client's reflectors.
    pub clients: BTreeMap<String, Vec<String>>,
    /// The `BGPPeer` objects (`crd.projectcalico.org/v1`).
    pub bgp_peers: Vec<BgpPeerObject>,
    /// Make-before-break steps from the state in the input to this topology.
    pub steps: Vec<StepRow>,
    /// What could not be done as configured.
    pub warnings: Vec<String>,
    /// `multi`: the reflector ring, for the RouteReflectorConfig's `status.ring`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ring: Vec<String>,
    /// The end state of every node's marks: the labels and annotations netpolicy owns
    /// (the reflector label, `rr.netpolicy.io/set-*`, Calico's cluster-ID annotation);
    /// empty maps where a node carries none.
    pub nodes: BTreeMap<String, NodeMarks>,
}

/// A node's labels and annotations netpolicy owns, as the topology wants them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeMarks {
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// One reflector.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReflectorRow {
    /// Node name.
    pub node: String,
    /// Zone.
    pub zone: String,
    /// Cluster ID.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
}

/// One `BGPPeer`: name and spec.
#[derive(Debug, Clone, Serialize)]
pub struct BgpPeerObject {
    /// Object name.
    pub name: String,
    /// Spec.
    pub spec: CalicoBgpPeerSpec,
}

/// One step of the transition.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// The phase (`createPeers`, `promote`, ...).
    pub phase: String,
    /// Its operations, for a person.
    pub ops: Vec<String>,
}

impl RouteReflectorReport {
    /// The report of a topology and the steps to reach it.
    pub fn new(
        t: &Topology,
        steps: &[netpolicy_rr::Step],
        nodes: &[NodeInfo],
        reflector_label: &str,
    ) -> Self {
        let node_marks = nodes
            .iter()
            .map(|n| {
                let mut m = NodeMarks::default();
                if let Some(marks) = t.marks.get(&n.name) {
                    if let Some(token) = &marks.reflector {
                        m.labels.insert(reflector_label.to_owned(), token.clone());
                    }
                    for key in &marks.sets {
                        m.labels.insert(key.clone(), String::new());
                    }
                    if let Some(id) = marks.cluster_id {
                        m.annotations
                            .insert(CLUSTER_ID_ANNOTATION.to_owned(), id.to_string());
                    }
                }
                (n.name.clone(), m)
            })
            .collect();
        Self {
            reflectors: t
                .placement
                .zones
                .iter()
                .flat_map(|z| {
                    z.reflectors.iter().map(|r| ReflectorRow {
                        node: r.clone(),
                        zone: z.zone.clone(),
                        // The reflector's own (`multi` gives each its own), else the zone's.
                        cluster_id: t
                            .marks
                            .get(r)
                            .and_then(|m| m.cluster_id)
                            .unwrap_or(z.cluster_id)
                            .to_string(),
                    })
                })
                .collect(),
            clients: t.clients.clone(),
            bgp_peers: t
                .bgp_peers
                .iter()
                .map(|p| BgpPeerObject {
                    name: p.name.clone(),
                    spec: CalicoBgpPeerSpec {
                        node_selector: Some(p.node_selector.clone()),
                        peer_selector: Some(p.peer_selector.clone()),
                    },
                })
                .collect(),
            steps: steps
                .iter()
                .map(|s| StepRow {
                    phase: s.phase.as_str().to_owned(),
                    ops: s.ops.iter().map(ToString::to_string).collect(),
                })
                .collect(),
            warnings: t.warnings.clone(),
            ring: t.ring.clone(),
            nodes: node_marks,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_api_defaults_are_the_topology_crates_defaults() {
        assert_eq!(
            netpolicy_api::DEFAULT_ZONE_LABEL,
            netpolicy_rr::DEFAULT_ZONE_LABEL
        );
        assert_eq!(
            netpolicy_api::DEFAULT_REFLECTOR_LABEL,
            netpolicy_rr::DEFAULT_REFLECTOR_LABEL
        );
    }
}
