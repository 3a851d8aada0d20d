//! Per-node routing policy: `ClusterConfig` and `NodeConfig` (the policies), their
//! rollout, and `NodeNetworkConfig` (one node's merged items, written by the operator and
//! applied by the node agent).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use netpolicy_core::{
    render::RenderedSpec,
    spec::{LabelSelector, RoutingSpec},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// For the doc links only (the item reasons' constants).
#[cfg(doc)]
use crate::conditions;

/// Cluster-wide routing items, applied to every node. At most one exists, named
/// `default`.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "ClusterConfig",
    plural = "clusterconfigs",
    validation = Rule::new("self.metadata.name == 'default'").message(
        "a ClusterConfig must be named 'default': there is only one, it applies to every node"
    ),
    shortname = "npcc",
    status = "PolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Matched","type":"integer","jsonPath":".status.matchedNodes"}"#,
    printcolumn = r#"{"name":"Applied","type":"integer","jsonPath":".status.appliedNodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Conflict","type":"string","jsonPath":".status.conditions[?(@.type==\"Conflict\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfigSpec {
    /// VLANs, routes, rules and hard-synced tables.
    #[serde(flatten)]
    pub routing: RoutingSpec,
    /// How a change reaches the nodes (default: 25% at a time, 30 s to pass the probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
    /// What the agent checks after applying a change (the API server is always checked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-validations" = [
        {"rule": "self.all(p, has(p.ping) != has(p.tcp))", "message": "a probe is exactly one of ping or tcp"},
        {"rule": "self.all(p, !has(p.ping) || isIP(p.ping))", "message": "ping is an IP address"},
        {"rule": "self.all(p, !has(p.tcp) || (p.tcp.matches('^[^:].*:[0-9]{1,5}$') && !p.tcp.endsWith(':')))", "message": "tcp is host:port (IPv6 as [addr]:port)"}
    ]))]
    pub probes: Vec<ProbeSpec>,
}

/// Routing items for the nodes a label selector picks, with a priority against other
/// NodeConfigs (any NodeConfig beats the ClusterConfig).
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "NodeConfig",
    plural = "nodeconfigs",
    shortname = "npnc",
    status = "PolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Matched","type":"integer","jsonPath":".status.matchedNodes"}"#,
    printcolumn = r#"{"name":"Applied","type":"integer","jsonPath":".status.appliedNodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Conflict","type":"string","jsonPath":".status.conditions[?(@.type==\"Conflict\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeConfigSpec {
    /// Nodes this config applies to. Empty (or absent) selects every node. Immutable:
    /// moving a config to other nodes is a new NodeConfig, so that no node is ever
    /// half-way between two selections.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "nodeSelector is immutable: create a NodeConfig for the new nodes and delete this one"
    }]))]
    pub node_selector: LabelSelector,
    /// Higher wins over lower for items with the same identity. Default 0.
    #[serde(default)]
    pub priority: i64,
    /// VLANs, routes, rules and hard-synced tables.
    #[serde(flatten)]
    pub routing: RoutingSpec,
    /// How a change reaches the nodes (default: 25% at a time, 30 s to pass the probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
    /// What the agent checks after applying a change (the API server is always checked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-validations" = [
        {"rule": "self.all(p, has(p.ping) != has(p.tcp))", "message": "a probe is exactly one of ping or tcp"},
        {"rule": "self.all(p, !has(p.ping) || isIP(p.ping))", "message": "ping is an IP address"},
        {"rule": "self.all(p, !has(p.tcp) || (p.tcp.matches('^[^:].*:[0-9]{1,5}$') && !p.tcp.endsWith(':')))", "message": "tcp is host:port (IPv6 as [addr]:port)"}
    ]))]
    pub probes: Vec<ProbeSpec>,
}

/// How a changed ClusterConfig or NodeConfig reaches its nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// At most this many of the selected nodes apply a change at once (Degraded ones
    /// count): an integer, or a percentage rounded down (at least one). Default `25%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",
        "message": "maxUnavailable is an integer >= 1 or a percentage in 1%..100%"
    }]))]
    pub max_unavailable: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    /// Seconds a node has to pass its probes after applying a change; then it restores
    /// its last good config. Default 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub rollback_seconds: Option<u32>,
}

/// One check the agent runs after applying a change, in the network namespace it
/// programs: exactly one of `ping` (an IP address answers ICMP echo) or `tcp`
/// (`host:port` accepts a connection; IPv6 as `[addr]:port`). The rules are on the
/// ClusterConfig's and NodeConfig's `probes` list, so that the NodeNetworkConfig's copy,
/// which the operator writes, carries none.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ProbeSpec {
    /// An IP address that must answer ICMP echo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 45))]
    pub ping: Option<String>,
    /// `host:port` that must accept a TCP connection (`10.0.0.1:6443`, `[fd00::1]:443`,
    /// `api.example:443`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub tcp: Option<String>,
}

impl std::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.ping, &self.tcp) {
            (Some(p), _) => write!(f, "ping {p}"),
            (None, Some(t)) => write!(f, "tcp {t}"),
            (None, None) => f.write_str("(empty probe)"),
        }
    }
}

/// What the operator reports about a ClusterConfig or NodeConfig: how many nodes it
/// selects, on how many the current rendering is applied, and whether it conflicts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Nodes the policy selects.
    #[serde(default)]
    pub matched_nodes: i64,
    /// Selected nodes whose agent reports the NodeNetworkConfig revision the policies
    /// want applied (a node whose change waits for its rollout wave is not counted: its
    /// agent still runs the old revision). With shared renderings, a node moving to its
    /// group's new rendering counts for each policy whose items the rendering it runs
    /// has as they are now: another policy's change leaves this count alone.
    #[serde(default)]
    pub applied_nodes: i64,
    /// Selected nodes whose change waits for its rollout wave (with shared renderings:
    /// a change of this policy's items).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pending_nodes: i64,
    /// `Ready` (valid, conflict-free, applied on every selected node), `Conflict` and
    /// `Degraded` (a node failed its probes and rolled back: the rollout is halted until
    /// the spec changes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The conflicts this policy is part of (at most [`MAX_LISTED_CONFLICTS`]; the
    /// `Conflict` condition gives the total).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<PolicyConflict>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Conflicts listed in a policy's status at most; the condition counts them all.
pub const MAX_LISTED_CONFLICTS: usize = 20;

/// One item two policies of equal precedence define differently on one node.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct PolicyConflict {
    /// The node (it keeps its last good config).
    pub node: String,
    /// The item (`route 10.20.0.0/16 table 100`).
    pub item: String,
    /// The policies that disagree (`NodeConfig/a`, `NodeConfig/b`).
    pub sources: Vec<String>,
}

/// The merged desired state of one node (name = node name), rendered by the operator
/// and applied by that node's agent.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "NodeNetworkConfig",
    plural = "nodenetworkconfigs",
    shortname = "npnnc",
    status = "NodeNetworkConfigStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".spec.revision"}"#,
    printcolumn = r#"{"name":"Applied","type":"string","jsonPath":".status.appliedRevision"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeNetworkConfigSpec {
    /// Identifies this rendering; the agent reports which revision it applied.
    #[serde(default)]
    pub revision: String,
    /// The merged items, each with the objects it came from.
    #[serde(flatten)]
    pub rendered: RenderedSpec,
    /// What the agent checks after applying this revision: every probe of the policies
    /// that select the node (sorted, once each); the API server is always checked too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ProbeSpec>,
    /// Seconds the agent has to pass the probes before it restores its last good
    /// config (the smallest of the selecting policies'; absent: 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_seconds: Option<u32>,
    /// Items of deleted policies that stay on the node (the operator's
    /// `--node-cleanup-on-deletion=false`, ipruler's `node-cleanup-on-deletion`): the
    /// agent gives them up — leaves them in the kernel as they are, no longer
    /// netpolicy's — and lists them in `status.leftBehind`. An item desired again leaves
    /// this list.
    #[serde(default, skip_serializing_if = "is_empty_rendering")]
    pub left_behind: RenderedSpec,
    /// The node runs a shared rendering (issue 68; [`crate::NetworkFleet`]): its agent
    /// picks its group's rendering from the fleet and lays this object's items — the
    /// node's own — over it ([`Self::effective`]); the rendering's probes and
    /// `rollbackSeconds` stand. Absent or false: this object carries all of the node's
    /// items.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// The revision a shared object runs with rendering `rendering` under its own items of
/// revision `own` (what its agent reports in `status.appliedRevision`).
pub fn effective_revision(rendering: &str, own: &str) -> String {
    format!("{:016x}", netpolicy_core::hash::fnv1a(&[rendering, own]))
}

impl NodeNetworkConfigSpec {
    /// What a node whose object is [`Self::shared`] runs: `rendering` with this
    /// object's items laid over it (an own item replaces the rendering's item with the
    /// same content, taking its sources), the rendering's probes and `rollbackSeconds`,
    /// this object's left-behind items, and a revision of the two (the rendering's name
    /// and this object's revision). An object that is not shared is returned as it is.
    #[must_use]
    pub fn effective(&self, rendering: &crate::Joined) -> Self {
        if !self.shared {
            return self.clone();
        }
        Self {
            revision: effective_revision(&rendering.rendering, &self.revision),
            rendered: rendering.rendered.overlay(&self.rendered),
            probes: rendering.probes.clone(),
            rollback_seconds: rendering.rollback_seconds,
            left_behind: self.left_behind.clone(),
            shared: true,
        }
    }
}

fn is_empty_rendering(r: &RenderedSpec) -> bool {
    r.vlans.is_empty() && r.routes.is_empty() && r.addresses.is_empty() && r.rules.is_empty()
}

/// What the agent reports about a NodeNetworkConfig.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeNetworkConfigStatus {
    /// `metadata.generation` the agent last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A revision whose probes failed: the agent restored its last good config and
    /// does not apply this revision again (`Degraded` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_revision: Option<String>,
    /// `spec.revision` the agent last applied completely (for a shared object, the
    /// revision of what it ran: [`NodeNetworkConfigSpec::effective`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<String>,
    /// The shared rendering the applied revision ran ([`crate::NodeNetworkRendering`]):
    /// what the operator's rollout waves advance on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_rendering: Option<String>,
    /// A shared rendering whose probes failed on this node (it went back to its last
    /// good config): the operator halts that rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_rendering: Option<String>,
    /// This node's agent reads shared renderings: the operator moves the node to a
    /// shared object only then (an older agent keeps its whole per-node object).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_renderings: bool,
    /// Standard conditions (`Applied`, `Degraded`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Items the agent could not apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub item_errors: Vec<ItemError>,
    /// Items of deleted policies the agent gave up and left in the kernel
    /// (`spec.leftBehind`), in the readable form `plan` prints, with the policies they
    /// came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_behind: Vec<String>,
    /// Foreign routes and rules the agent removed from hard-synced tables
    /// (`tableHardSync`), in the readable form `plan` prints, from the last pass that
    /// removed any (at most [`MAX_LISTED_REMOVALS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_foreign: Vec<String>,
    /// Addresses added without a duplicate address check, each with why the ARP probe
    /// could not run (`address 192.0.2.7/24 dev eth1: eth1 is down`; `eth1 has no
    /// carrier`; no `CAP_NET_RAW`):
    /// another host on the segment may use them. Cleared for an address once a probe of
    /// it runs, or it is no longer desired.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_probed: Vec<String>,
}

/// Removals listed in a NodeNetworkConfig's status at most.
pub const MAX_LISTED_REMOVALS: usize = 50;

/// One desired item that is not in the kernel as desired.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ItemError {
    /// The item, in the readable form `plan` prints (`route 10.20.0.0/16 table 100 via
    /// 192.0.2.1`), or the operation that failed on it.
    pub item: String,
    /// Why, as a constant of [`conditions::item`] (`Refused`, `BlockedByForeignObject`,
    /// `NameTakenByOtherLink`, `NotConverged`, `DuplicateAddress`).
    #[serde(default)]
    pub reason: String,
    /// The kernel's errno, when the kernel refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// What went wrong.
    pub message: String,
}
