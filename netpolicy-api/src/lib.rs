//! # netpolicy-api
//!
//! The `netpolicy.io/v1alpha1` custom resources, their condition types and reasons,
//! and [`crds`]. This crate holds the kinds and nothing else (serde, schemars, kube's
//! derive, k8s-openapi, netpolicy-core's routing items): an operator author who wants
//! our kinds depends on it without pulling in a runtime, HTTP, CLI, metrics or netlink.
//!
//! ```toml
//! [dependencies]
//! netpolicy-api = "0.1"
//! # Your operator's own kube, and the Kubernetes version it targets: this crate picks
//! # none (k8s-openapi allows one per build; `latest`, or `v1_33` … `v1_37`).
//! kube = { version = "5", features = ["runtime", "client", "derive"] }
//! k8s-openapi = { version = "0.29", features = ["latest"] }
//! ```
//!
//! Every type a kind's fields use is reachable from here: the routing items are
//! netpolicy-core's wire types, re-exported as [`spec`] and [`render`] (and the whole
//! crate as [`netpolicy_core`]), so one dependency line builds every kind. MSRV: Rust
//! 1.89 (kube 5's; `scripts/test` builds with it).
//!
//! # Examples
//!
//! A NodeConfig built in Rust, as an operator would create it:
//!
//! ```
//! use netpolicy_api::{
//!     NodeConfig, NodeConfigSpec, conditions,
//!     spec::{LabelSelector, RouteSpec, RoutingSpec},
//! };
//!
//! let edge = NodeConfig::new(
//!     "edge",
//!     NodeConfigSpec {
//!         node_selector: LabelSelector {
//!             match_labels: [("role".to_owned(), "edge".to_owned())].into(),
//!             ..LabelSelector::default()
//!         },
//!         priority: 10,
//!         routing: RoutingSpec {
//!             routes: vec![RouteSpec {
//!                 to: "10.20.0.0/16".into(),
//!                 via: Some("192.0.2.1".into()),
//!                 table: Some(100),
//!                 ..RouteSpec::default()
//!             }],
//!             ..RoutingSpec::default()
//!         },
//!         ..NodeConfigSpec::default()
//!     },
//! );
//! // What `kubectl apply` would send, and the checks the operator runs on it.
//! let json = serde_json::to_value(&edge).unwrap();
//! assert_eq!(json["spec"]["routes"][0]["via"], "192.0.2.1");
//! assert!(edge.spec.routing.validate("spec").is_ok());
//! assert_eq!(conditions::APPLIED, "Applied");
//! ```
//!
//! The routing, floating-IP range, route-reflector and routed-IP kinds are
//! cluster-scoped; `FloatingIP` and the traffic-domain kinds ([`traffic`]) are
//! namespaced.

/// netpolicy-core, whose routing items ([`spec`]) and renderings ([`render`]) the kinds
/// hold: a consumer names them through this crate and keeps one version in step.
pub use netpolicy_core;
pub use netpolicy_core::{render, spec};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt};
use netpolicy_core::{
    render::RenderedSpec,
    spec::{LabelSelector, RoutingSpec},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of every netpolicy kind.
pub const GROUP: &str = "netpolicy.io";
/// API version of every netpolicy kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every netpolicy kind.
pub const API_VERSION: &str = "netpolicy.io/v1alpha1";
/// The only allowed name of the ClusterConfig.
pub const CLUSTER_CONFIG_NAME: &str = "default";

/// Every netpolicy CRD, in the order `netpolicy crds` prints them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        ClusterConfig::crd(),
        NodeConfig::crd(),
        NodeNetworkConfig::crd(),
        FloatingIPRange::crd(),
        FloatingIP::crd(),
        FloatingIPClaim::crd(),
        RouteReflectorConfig::crd(),
        RoutedIPIssuer::crd(),
        RoutedIP::crd(),
        Trench::crd(),
        Attractor::crd(),
        Gateway::crd(),
        Vip::crd(),
        Conduit::crd(),
        Stream::crd(),
        Flow::crd(),
    ]
}

pub mod calico;
pub mod traffic;
pub use traffic::*;

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
    /// agent still runs the old revision).
    #[serde(default)]
    pub applied_nodes: i64,
    /// Selected nodes whose change waits for its rollout wave.
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
    /// `spec.revision` the agent last applied completely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<String>,
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
    /// could not run (`address 192.0.2.7/24 dev eth1: eth1 is down`; no `CAP_NET_RAW`):
    /// another host on the segment may use them. Cleared for an address once a probe of
    /// it runs, or it is no longer desired.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_probed: Vec<String>,
}

/// Removals listed in a NodeNetworkConfig's status at most.
pub const MAX_LISTED_REMOVALS: usize = 50;

/// Condition types and reasons, as named constants (one place, typed: no status
/// literals scattered through the code).
pub mod conditions {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    /// The condition of type `type_` in `conds`.
    ///
    /// ```
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    /// use netpolicy_api::conditions::{self, READY};
    ///
    /// let ready: Condition = serde_json::from_value(serde_json::json!({
    ///     "type": READY, "status": "True", "reason": "Applied", "message": "",
    ///     "lastTransitionTime": "2026-11-27T00:00:00Z",
    /// }))?;
    /// let conds = vec![ready];
    /// assert!(conditions::is_true(&conds, READY));
    /// assert!(!conditions::is_false(&conds, READY));
    /// assert!(conditions::find(&conds, conditions::CONFLICT).is_none());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn find<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
        conds.iter().find(|c| c.type_ == type_)
    }

    /// Whether `conds` has condition `type_` with status `True`.
    pub fn is_true(conds: &[Condition], type_: &str) -> bool {
        find(conds, type_).is_some_and(|c| c.status == STATUS_TRUE)
    }

    /// Whether `conds` has condition `type_` with status `False` (absent is neither).
    pub fn is_false(conds: &[Condition], type_: &str) -> bool {
        find(conds, type_).is_some_and(|c| c.status == STATUS_FALSE)
    }

    /// A condition's `status` when it holds.
    pub const STATUS_TRUE: &str = "True";
    /// A condition's `status` when it does not hold.
    pub const STATUS_FALSE: &str = "False";

    /// Condition type: the node holds its NodeNetworkConfig's desired state.
    pub const APPLIED: &str = "Applied";
    /// Condition type of a policy: valid, conflict-free and applied on every node it
    /// selects.
    pub const READY: &str = "Ready";
    /// Condition type of a policy: it defines an item differently from another policy
    /// of equal precedence on some node.
    pub const CONFLICT: &str = "Conflict";

    /// Condition type: a node failed its probes after a change and restored its last
    /// good config (on a NodeNetworkConfig); a policy's rollout is halted because of
    /// that (on a ClusterConfig or NodeConfig).
    pub const DEGRADED: &str = "Degraded";
    /// Reasons of the `Degraded` condition.
    pub mod degraded {
        /// A probe failed within `rollbackSeconds`.
        pub const PROBE_FAILED: &str = "ProbeFailed";
        /// The API server could not be reached within `rollbackSeconds`.
        pub const API_SERVER_UNREACHABLE: &str = "APIServerUnreachable";
        /// Probes passed (or nothing failed since the last change).
        pub const HEALTHY: &str = "Healthy";
        /// A policy's rollout is halted: a node it selects is Degraded.
        pub const ROLLOUT_HALTED: &str = "RolloutHalted";
    }

    /// Condition type of a NodeNetworkConfig: something on the node keeps changing
    /// netpolicy's objects back (each restored [`fighting::AFTER`] times within a
    /// minute); their notifications start no repair, the agent looks at them again with
    /// backoff (5 s, doubling to 5 min) while it repairs every other object at once. Absent on a node
    /// that never fought; `False` once a pass finds them intact.
    pub const FIGHTING: &str = "Fighting";
    /// Reasons and limits of the `Fighting` condition.
    pub mod fighting {
        /// Objects are being changed back against netpolicy.
        pub const FIGHTING: &str = "Fighting";
        /// The last pass found every object it had fought over intact.
        pub const STOPPED: &str = "Stopped";
        /// Repairs of one object within a minute that make it a fight.
        pub const AFTER: usize = 10;
    }

    /// Condition type of a policy: a node it selects would get a NodeNetworkConfig
    /// larger than the operator writes (`--max-object-bytes`); that node keeps its last
    /// config.
    pub const TOO_LARGE: &str = "TooLarge";

    /// Condition status strings.
    pub const TRUE: &str = "True";
    /// Condition status strings.
    pub const FALSE: &str = "False";

    /// Reasons of the `Applied` condition.
    pub mod reasons {
        /// Every item is in the kernel as desired.
        pub const APPLIED: &str = "Applied";
        /// Some items are not (see `status.itemErrors`).
        pub const ITEMS_NOT_APPLIED: &str = "ItemsNotApplied";
        /// The revision failed its probes and the last good config was restored
        /// (`Degraded` says which probe).
        pub const ROLLED_BACK: &str = "RolledBack";
        /// The spec does not validate; nothing was changed.
        pub const INVALID: &str = "Invalid";
    }

    /// Reasons of a policy's `Ready` and `Conflict` conditions.
    pub mod policy {
        /// Applied on every node it selects.
        pub const APPLIED: &str = "Applied";
        /// Rendered; some selected nodes have not applied it yet.
        pub const APPLYING: &str = "Applying";
        /// The spec does not validate: it changes no node.
        pub const INVALID: &str = "Invalid";
        /// It conflicts with another policy on some nodes (they keep their last good
        /// config).
        pub const CONFLICT: &str = "Conflict";
        /// No conflict.
        pub const NO_CONFLICT: &str = "NoConflict";
        /// A selected node's NodeNetworkConfig would exceed the size limit (`TooLarge`
        /// condition, and `Ready` False).
        pub const TOO_LARGE: &str = "TooLarge";
        /// Every selected node's NodeNetworkConfig fits (`TooLarge` False).
        pub const FITS: &str = "Fits";
    }

    /// Condition types and reasons of FloatingIPRanges and FloatingIPs.
    pub mod floating_ip {
        /// Range condition type: every address is allocated.
        pub const EXHAUSTED: &str = "Exhausted";
        /// Range condition type: it shares addresses with another range.
        pub const OVERLAP: &str = "Overlap";
        /// Range condition type: allocations outside the range as it is now (it
        /// shrank, or an exclusion covers them); they are kept.
        pub const OUTSIDE: &str = "AllocationsOutside";
        /// FloatingIP condition type: the address is published to kube-vip.
        pub const PUBLISHED: &str = "Published";

        /// Reason: the FloatingIP holds its address.
        pub const ALLOCATED: &str = "Allocated";
        /// Reason: no address yet (the operator is working on it).
        pub const PENDING: &str = "Pending";
        /// Reason: the static request is held by another FloatingIP (named in the
        /// message).
        pub const TAKEN: &str = "Taken";
        /// Reason: the static request is outside the range, excluded or unusable.
        pub const OUT_OF_RANGE: &str = "OutOfRange";
        /// Reason: the range has no free address.
        pub const EXHAUSTED_REASON: &str = "RangeExhausted";
        /// Reason: the range is draining.
        pub const DRAINING: &str = "RangeDraining";
        /// Reason: the range does not exist or is invalid.
        pub const NO_RANGE: &str = "NoRange";
        /// Reason: the spec does not validate.
        pub const INVALID: &str = "Invalid";
        /// Reason: the range is valid and has free addresses (range `Ready`).
        pub const AVAILABLE: &str = "Available";
        /// Reason: kube-vip never hands out this address (IPv4 ending in .0 or .255).
        pub const NOT_PUBLISHABLE: &str = "NotPublishable";
        /// Reason: published.
        pub const PUBLISHED_REASON: &str = "Published";
        /// Reason: the guest cluster could not be reached (retried with backoff).
        pub const GUEST_UNREACHABLE: &str = "GuestUnreachable";
        /// FloatingIP condition type: kube-vip and kube-vip-cloud-provider are installed
        /// in its guest cluster (only when the range's `kubeVip.guests.install` asks).
        pub const INSTALLED: &str = "Installed";
        /// Reason: installed.
        pub const INSTALLED_REASON: &str = "Installed";
        /// Reason: the guest's API server refused (401/403: the kubeconfig's account
        /// may not do it, or the cluster is still being deployed).
        pub const GUEST_FORBIDDEN: &str = "GuestForbidden";
        /// Reason: the guest's kubeconfig Secret, or its key, is missing or unusable.
        pub const KUBECONFIG_MISSING: &str = "KubeconfigMissing";
        /// Reason: discovery `rancher` found no Cluster for the FloatingIP's namespace.
        pub const GUEST_NOT_FOUND: &str = "GuestNotFound";
        /// Reason: the guest answered but refused an object (its message).
        pub const INSTALL_FAILED: &str = "InstallFailed";
        /// Reason: the kube-vip ConfigMap could not be written (the API server's answer
        /// in the message; retried with backoff).
        pub const PUBLISH_FAILED: &str = "PublishFailed";
        /// Reason of a condition that does not hold (no overlap, nothing outside).
        pub const NONE: &str = "None";
    }

    /// Condition reasons of RoutedIPs and RoutedIPIssuers.
    pub mod routed_ip {
        /// Reason: the IP is on its node and the firewall is in step.
        pub const SETTLED: &str = "Settled";
        /// Reason: a failover step is being applied.
        pub const APPLYING: &str = "ApplyingStep";
        /// Reason: no node may hold the IP (it stays where it is).
        pub const NO_CANDIDATE: &str = "NoEligibleNode";
        /// Reason: the issuer is missing, its token cannot be read, or its provider's
        /// API does not answer (no connection within seconds).
        pub const ISSUER_UNAVAILABLE: &str = "IssuerUnavailable";
        /// Reason: the provider refused or failed (retried).
        pub const PROVIDER_ERROR: &str = "ProviderError";
        /// Reason: the provider asks to slow down (retried after its delay).
        pub const RATE_LIMITED: &str = "RateLimited";
        /// Reason: `spec.address` names an IP the provider does not have.
        pub const NOT_FOUND: &str = "AddressNotFound";
        /// Reason: a quota of the cloud account is used up (AWS `AddressLimitExceeded`):
        /// retried slowly; raise the quota or free what holds it.
        pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
        /// Reason: the issuer's token is readable and the provider answers.
        pub const READY: &str = "Ready";
        /// Condition type (RoutedIPIssuer): IPs tagged for this cluster whose RoutedIP is
        /// gone (reported, never deleted).
        pub const ORPHANS: &str = "Orphans";
        /// Reason: orphaned IPs found.
        pub const ORPHANED: &str = "OrphanedIPs";
        /// Reason: no orphan.
        pub const NONE: &str = "None";
    }

    /// Reasons of the traffic-domain kinds' `Ready` condition.
    pub mod traffic {
        /// Valid, references resolve, compiled into the attractor nodes' routing.
        pub const COMPILED: &str = "Compiled";
        /// The object (or one it needs) fails validation: nothing of its trench changes
        /// on any node (the nodes keep their last good config).
        pub const INVALID: &str = "Invalid";
        /// The object has no `trench` label, or its trench does not exist.
        pub const NO_TRENCH: &str = "TrenchNotFound";
        /// A BGP gateway of a `node` trench: accepted, not programmable (no BGP speaker
        /// on the node; in the `meridio` data plane Meridio's frontends speak BGP).
        pub const NOT_PROGRAMMABLE: &str = "NotProgrammable";
        /// Valid, but nothing uses it (no attractor serves it).
        pub const UNUSED: &str = "Unused";
        /// An item clashes with a ClusterConfig/NodeConfig item on some node.
        pub const CONFLICT: &str = "Conflict";
        /// The trench's IPAM or table range ran out.
        pub const EXHAUSTED: &str = "Exhausted";
        /// `meridio` data plane: Meridio's workloads and configuration ConfigMap are
        /// kept as Meridio's operator keeps them.
        pub const DEPLOYED: &str = "Deployed";
        /// `meridio` data plane: Meridio's workloads are applied but not all rolled
        /// out (the message names each and what is missing: `0/1 ready`).
        pub const WORKLOADS_NOT_READY: &str = "WorkloadsNotReady";
        /// `meridio` data plane: the object is in the trench's configuration ConfigMap
        /// that Meridio's components read.
        pub const CONFIGURED: &str = "Configured";
        /// A `resource-template` annotation names no template of some container.
        pub const UNKNOWN_RESOURCE_TEMPLATE: &str = "UnknownResourceTemplate";
    }

    /// Condition types and reasons of the RouteReflectorConfig.
    pub mod route_reflector {
        /// Condition type: a transition is being applied.
        pub const PROGRESSING: &str = "Progressing";
        /// Condition type: Calico's full node-to-node mesh is on.
        pub const NODE_TO_NODE_MESH: &str = "NodeToNodeMesh";
        /// Reason: the cluster holds the topology.
        pub const SETTLED: &str = "Settled";
        /// Reason: a step of a transition is being applied.
        pub const APPLYING: &str = "ApplyingStep";
        /// Reason: the spec does not validate.
        pub const INVALID: &str = "Invalid";
        /// Reason: the mesh is on (`report`: nothing is changed).
        pub const MESH_ON: &str = "MeshEnabled";
        /// Reason: the mesh is off.
        pub const MESH_OFF: &str = "MeshDisabled";
        /// Reason: Calico's API (BGPPeer, BGPConfiguration) is not installed.
        pub const NO_CALICO: &str = "CalicoNotInstalled";
        /// Reason: Calico's etcd (`datastore.etcdv3`) cannot be reached or its TLS
        /// Secret cannot be read.
        pub const DATASTORE_UNREACHABLE: &str = "DatastoreUnreachable";
    }

    /// Reasons of the Kubernetes Events the operator records (`kubectl describe`),
    /// beside the condition reasons above, which Events reuse where they say the same.
    pub mod events {
        /// A policy defines an item differently from another on some node.
        pub const CONFLICT: &str = "Conflict";
        /// A node's NodeNetworkConfig would exceed `--max-object-bytes`: not written.
        pub const TOO_LARGE: &str = "TooLarge";
        /// A FloatingIP's address was released.
        pub const RELEASED: &str = "Released";
        /// A static request is held by another FloatingIP.
        pub const TAKEN: &str = "Taken";
        /// A range holds allocations outside its addresses.
        pub const ALLOCATIONS_OUTSIDE: &str = "AllocationsOutside";
        /// A range has no free address.
        pub const EXHAUSTED: &str = "Exhausted";
        /// A kube-vip ConfigMap could not be written.
        pub const PUBLISH_FAILED: &str = "PublishFailed";
        /// A kube-vip ConfigMap is written again after failures.
        pub const PUBLISHED: &str = "Published";
        /// A routed IP's failover step was applied at the provider.
        pub const FAILOVER_STEP: &str = "FailoverStep";
        /// A routed IP found on another node than its status said (an operator stopped
        /// mid-assignment): the status follows the provider.
        pub const HOLDER_CORRECTED: &str = "HolderCorrected";
        /// A trench was compiled.
        pub const COMPILED: &str = "Compiled";
        /// A node address was handed out on an attractor.
        pub const ADDRESS_ASSIGNED: &str = "AddressAssigned";
        /// A node left an attractor and its address was freed.
        pub const ADDRESS_FREED: &str = "AddressFreed";
        /// A route-reflector transition started.
        pub const TRANSITION_STARTED: &str = "TransitionStarted";
        /// A route-reflector transition step was applied.
        pub const STEP_APPLIED: &str = "StepApplied";
        /// The cluster holds the route-reflector topology.
        pub const SETTLED: &str = "Settled";
        /// Calico's node-to-node mesh was turned off.
        pub const MESH_DISABLED: &str = "MeshDisabled";
        /// A transition went on without calico-node's word that every reflector's BGP
        /// sessions were up (no reports, or sessions down too long; the message says).
        pub const SESSIONS_UNSEEN: &str = "SessionsUnseen";
        /// The route-reflector config cannot be acted on (invalid, no Calico, datastore).
        pub const NOT_READY: &str = "NotReady";
        /// The agent restored objects someone changed behind netpolicy's back (at most
        /// one Event a minute per node, naming them).
        pub const DRIFT_REPAIRED: &str = "DriftRepaired";
        /// The agent keeps restoring the same objects: something fights over them.
        pub const FIGHTING: &str = "Fighting";
    }

    /// Reasons of one entry of `status.itemErrors`.
    pub mod item {
        /// The kernel refused the operation (`errno` says why).
        pub const REFUSED: &str = "Refused";
        /// A foreign object with the item's identity and other content holds it.
        pub const BLOCKED_BY_FOREIGN: &str = "BlockedByForeignObject";
        /// A desired VLAN's name is held by another kind of link.
        pub const NAME_TAKEN: &str = "NameTakenByOtherLink";
        /// Applied without error, but a fresh read of the kernel still differs.
        pub const NOT_CONVERGED: &str = "NotConverged";
        /// An address another host on the segment uses (answered the ARP probe, or
        /// the IPv6 duplicate address detection failed): not added; the message names
        /// the host's MAC when known. Probed again on the next spec change or resync.
        pub const DUPLICATE_ADDRESS: &str = "DuplicateAddress";
        /// Every reason above.
        pub const ALL: [&str; 5] = [
            REFUSED,
            BLOCKED_BY_FOREIGN,
            NAME_TAKEN,
            NOT_CONVERGED,
            DUPLICATE_ADDRESS,
        ];
    }
}

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

/// A pool of floating IPs: CIDRs and start-end ranges minus exclusions.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "FloatingIPRange",
    plural = "floatingipranges",
    shortname = "fipr",
    status = "FloatingIPRangeStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".status.capacity"}"#,
    printcolumn = r#"{"name":"Allocated","type":"string","jsonPath":".status.allocated"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FloatingIPRangeSpec {
    /// Prefixes (`10.135.10.192/26`, `fd00:10::/64`). An IPv4 prefix shorter than /31
    /// loses its network and broadcast addresses; an IPv6 prefix shorter than /127 its
    /// first (subnet-router anycast) address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cidrs: Vec<String>,
    /// Start-end ranges, whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<AddressRangeSpec>,
    /// Addresses or prefixes never handed out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Keep existing allocations, make no new ones.
    #[serde(default)]
    pub draining: bool,
    /// Give every matching Namespace a FloatingIP from this range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_allocate: Option<AutoAllocate>,
    /// Publish allocations to kube-vip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_vip: Option<KubeVip>,
    /// Harvester (kube-fip's `harvesterClusterName`/`harvesterNetworkName`): with
    /// `autoAllocate`, a Rancher guest provisioned on this Harvester cluster (and
    /// network) is served from this range, and no other guest is. Needs the operator's
    /// `--rancher-clusters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harvester: Option<HarvesterSelector>,
    /// Return traffic of this range's addresses leaves the way it came: the node that
    /// announces a FloatingIP (kube-vip's `kube-vip.io/vipHost` on the LoadBalancer
    /// Service holding the address) gets `from <ip> lookup <table>` and a default route
    /// via `gateway` on `interface` in that table, in its NodeNetworkConfig (source
    /// `FloatingIP/<namespace>/<name>`); they move with the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_routing: Option<ReturnRouting>,
}

/// Policy routing for the replies of an address held by one node (a FloatingIP, a
/// RoutedIP): `from <ip> lookup <table>` at `priority`, and `default via <gateway> dev
/// <interface>` in `table`. Only addresses of the gateway's family get it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReturnRouting {
    /// The interface replies leave through (`eth1`, `bond0.100`).
    #[schemars(length(min = 1, max = 15))]
    pub interface: String,
    /// The next hop on that interface (an IPv4 or IPv6 address).
    #[schemars(length(min = 2))]
    pub gateway: String,
    /// The routing table holding the default route (not 253, 254 or 255: the kernel's
    /// own).
    #[schemars(range(min = 1), extend("x-kubernetes-validations" = [{
        "rule": "self < 253 || self > 255",
        "message": "253 (default), 254 (main) and 255 (local) are the kernel's own tables: use a table of its own"
    }]))]
    pub table: u32,
    /// The rule's priority (default 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32765))]
    pub priority: Option<u32>,
}

impl ReturnRouting {
    /// The rule's priority when none is given.
    pub const DEFAULT_PRIORITY: u32 = 10_000;
}

/// The Harvester cluster and network whose Rancher guests a range serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarvesterSelector {
    /// The Harvester cluster's name in Rancher (its `management.cattle.io/v3` Cluster's
    /// `spec.displayName`), which the guest's cloud credential points at.
    #[schemars(length(min = 1))]
    pub cluster: String,
    /// The Harvester network (`<namespace>/<name>` or `<name>`) of the guest's machine
    /// pool. Empty: any network of that cluster (a range naming the guest's own network
    /// is preferred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
}

/// A start-end address range, inclusive.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressRangeSpec {
    /// First address.
    pub start: String,
    /// Last address.
    pub end: String,
}

/// Automatic FloatingIPs for Namespaces: every Namespace that matches the selector and
/// whose name starts with the prefix gets a FloatingIP from this range (Rancher's
/// guest-cluster namespaces are `c-m-…`); deleting the Namespace frees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoAllocate {
    /// Namespaces that get a FloatingIP; empty selects every Namespace.
    #[serde(default)]
    pub namespace_selector: LabelSelector,
    /// Only Namespaces whose name starts with this (default: any name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_name_prefix: Option<String>,
    /// Name of the FloatingIP created in each Namespace (default `auto-<range name>`).
    #[serde(
        default,
        rename = "floatingIPName",
        skip_serializing_if = "Option::is_none"
    )]
    pub floating_ip_name: Option<String>,
}

impl AutoAllocate {
    /// The name of the FloatingIPs this creates for range `range`.
    pub fn floating_ip_name(&self, range: &str) -> String {
        self.floating_ip_name
            .clone()
            .unwrap_or_else(|| format!("auto-{range}"))
    }

    /// Whether a Namespace of this name qualifies by name (the selector is checked
    /// apart).
    pub fn takes_namespace_name(&self, namespace: &str) -> bool {
        namespace.starts_with(self.namespace_name_prefix.as_deref().unwrap_or(""))
    }
}

/// kube-vip publishing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.guests) || !has(self.guests.discovery) || self.guests.discovery != 'secret' || has(self.guestKubeconfigSecret)",
    "message": "guests.discovery secret reads the kubeconfig from guestKubeconfigSecret: name it",
    "fieldPath": ".guestKubeconfigSecret"
}]))]
pub struct KubeVip {
    /// Whether to publish.
    #[serde(default)]
    pub publish: bool,
    /// Namespace of kube-vip's ConfigMap (default `kube-system`). With guest clusters,
    /// the namespace in each guest: its ConfigMap is written there, and a guest install
    /// (`guests.install`) puts kube-vip and kube-vip-cloud-provider there too,
    /// creating the namespace when it is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of kube-vip's ConfigMap (default `kubevip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
    /// Publish into a guest cluster instead: the kubeconfig in this Secret (looked up in
    /// each FloatingIP's namespace) reaches the guest's API server, and the address is
    /// written as `cidr-global` in the guest's own ConfigMap (same namespace and name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_kubeconfig_secret: Option<LocalSecretKeyRef>,
    /// Guest clusters found and served (kube-fip's job): each FloatingIP's guest gets
    /// its address as `cidr-global` in its own kube-vip ConfigMap (repaired when edited)
    /// and, when asked, kube-vip and kube-vip-cloud-provider installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guests: Option<GuestClusters>,
}

/// How guest clusters are found and what is kept in them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuestClusters {
    /// `rancher` (default): the guest of a FloatingIP in namespace `c-m-…` is the
    /// `provisioning.cattle.io/v1` Cluster whose `status.clusterName` is that namespace;
    /// its kubeconfig is the Secret `<cluster>-kubeconfig` (key `value`) in the
    /// Cluster's namespace. `secret`: `guestKubeconfigSecret` in the FloatingIP's
    /// namespace.
    #[serde(default)]
    pub discovery: GuestDiscovery,
    /// `disabled` (default): publish only. `enabled`: install kube-vip and
    /// kube-vip-cloud-provider in every guest. `clusterLabel`: only in guests whose
    /// Rancher Cluster is labelled `kube-vip=true`.
    #[serde(default)]
    pub install: GuestInstall,
    /// `true`: re-apply the installed objects when their rendering changes (image,
    /// interface, values); `false` (default): only create what is missing.
    #[serde(default)]
    pub update: bool,
    /// Seconds between checks of each guest (its ConfigMap repaired, missing objects
    /// put back): the seed's `operateGuestClusterInterval`. Default 60, at least 10.
    #[serde(default = "default_guest_interval")]
    #[schemars(range(min = 10))]
    pub interval_seconds: u32,
    /// kube-vip as installed in the guests.
    #[serde(default)]
    pub kube_vip: GuestKubeVip,
    /// kube-vip-cloud-provider as installed in the guests.
    #[serde(default)]
    pub cloud_provider: GuestCloudProvider,
}

fn default_guest_interval() -> u32 {
    60
}

impl Default for GuestClusters {
    fn default() -> Self {
        Self {
            discovery: GuestDiscovery::default(),
            install: GuestInstall::default(),
            update: false,
            interval_seconds: default_guest_interval(),
            kube_vip: GuestKubeVip::default(),
            cloud_provider: GuestCloudProvider::default(),
        }
    }
}

/// How a FloatingIP's guest cluster is found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum GuestDiscovery {
    /// Rancher's `provisioning.cattle.io/v1` Clusters.
    #[default]
    Rancher,
    /// `guestKubeconfigSecret` in the FloatingIP's namespace.
    Secret,
}

/// Whether kube-vip and kube-vip-cloud-provider are installed in the guests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum GuestInstall {
    /// Never (publish only).
    #[default]
    Disabled,
    /// In every guest.
    Enabled,
    /// In guests whose Rancher Cluster carries the label `kube-vip=true`.
    ClusterLabel,
}

/// kube-vip in a guest: the DaemonSet `kube-system/kube-vip-ds` in services mode with
/// leader election, as `kube-vip manifest daemonset --services --inCluster
/// --leaderElection [--arp]` writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuestKubeVip {
    /// Image (default `ghcr.io/kube-vip/kube-vip:v1.0.2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Interface the addresses are announced on (`vip_interface`; default: kube-vip
    /// picks the interface of the default route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Nodes the DaemonSet runs on (default: every node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// ARP announcements (`vip_arp`; default true). False: kube-vip does not answer
    /// ARP for the addresses (another mechanism routes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arp: Option<bool>,
}

/// kube-vip-cloud-provider in a guest: the Deployment `kube-system/kube-vip-cloud-provider`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuestCloudProvider {
    /// Image (default `ghcr.io/kube-vip/kube-vip-cloud-provider:v0.0.12`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// A key of a Secret in the namespace the context gives.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalSecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key in its data (default `value`, as Cluster API and Rancher name a kubeconfig
    /// Secret's key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl KubeVip {
    /// The ConfigMap kube-vip-cloud-provider reads: (namespace, name).
    pub fn config_map(&self) -> (String, String) {
        (
            self.namespace
                .clone()
                .unwrap_or_else(|| "kube-system".into()),
            self.config_map.clone().unwrap_or_else(|| "kubevip".into()),
        )
    }
}

/// What the operator reports about a FloatingIPRange. Counts are decimal strings: an
/// IPv6 range holds more addresses than a Kubernetes integer can.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FloatingIPRangeStatus {
    /// Usable addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// Allocated addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<String>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A floating IP from a FloatingIPRange: the lowest free address, or a static request.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "FloatingIP",
    plural = "floatingips",
    shortname = "fip",
    namespaced,
    status = "FloatingIPStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Range","type":"string","jsonPath":".spec.range"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".status.address"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FloatingIPSpec {
    /// The FloatingIPRange to allocate from.
    pub range: String,
    /// A static request. A taken or out-of-range address is reported, never replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// What the operator reports about a FloatingIP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FloatingIPStatus {
    /// The allocated address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Standard conditions (`Allocated`, with the holder when a static request is taken).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The record that one address of a FloatingIPRange is held, named by the address
/// ([`FloatingIPClaim::name_for`]): the API server refuses a second object of the same
/// name, so two operator processes, a restart in a burst or a stale cache can never
/// hand one address to two FloatingIPs. Written by the operator only.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "FloatingIPClaim",
    plural = "floatingipclaims",
    shortname = "fipc",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Range","type":"string","jsonPath":".spec.range"}"#,
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".spec.owner.namespace"}"#,
    printcolumn = r#"{"name":"FloatingIP","type":"string","jsonPath":".spec.owner.name"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FloatingIPClaimSpec {
    /// The address, in canonical text.
    pub address: String,
    /// The FloatingIPRange it came from.
    pub range: String,
    /// The FloatingIP that holds it.
    pub owner: ClaimOwner,
}

/// The FloatingIP that holds a claim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimOwner {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid: a FloatingIP deleted and made again under the same name is another
    /// owner.
    pub uid: String,
}

impl FloatingIPClaim {
    /// The claim name of an address: IPv4 as written (`203.0.113.7`), IPv6 as its eight
    /// groups of four hex digits joined by `-` (`2001-0db8-0000-0000-0000-0000-0000-0001`),
    /// since `:` is not allowed in names. The two forms never collide (only IPv6 names
    /// hold `-`), and every address has exactly one name.
    pub fn name_for(address: std::net::IpAddr) -> String {
        match address {
            std::net::IpAddr::V4(a) => a.to_string(),
            std::net::IpAddr::V6(a) => a
                .segments()
                .iter()
                .map(|g| format!("{g:04x}"))
                .collect::<Vec<_>>()
                .join("-"),
        }
    }
}

/// The only allowed name of the RouteReflectorConfig.
pub const ROUTE_REFLECTOR_CONFIG_NAME: &str = "default";

/// How many Calico route reflectors, on which nodes, and how clients peer with them.
/// At most one exists, named `default`.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "RouteReflectorConfig",
    plural = "routereflectorconfigs",
    validation = Rule::new("self.metadata.name == 'default'")
        .message("a RouteReflectorConfig must be named 'default': there is only one"),
    shortname = "nprr",
    status = "RouteReflectorConfigStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Topology","type":"string","jsonPath":".spec.topology"}"#,
    printcolumn = r#"{"name":"Reflectors","type":"integer","jsonPath":".status.reflectors"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RouteReflectorConfigSpec {
    /// Fewest reflectors per zone (or cluster).
    #[serde(default = "default_min")]
    pub min: u32,
    /// Most reflectors per zone (or cluster).
    #[serde(default = "default_max")]
    pub max: u32,
    /// Reflectors per Ready node: `clamp(ceil(ready × ratio), min, max)`.
    #[serde(default = "default_ratio")]
    pub ratio: f64,
    /// Size per `zone` or for the whole `cluster`.
    #[serde(default)]
    pub per: ReflectorsPer,
    /// Node label holding the zone; `""`: no zones, the whole cluster is one (the
    /// Calico route-reflector operator without `ROUTE_REFLECTOR_ZONE_LABEL`).
    #[serde(default = "default_zone_label")]
    pub zone_label: String,
    /// Nodes that may be reflectors (empty: all).
    #[serde(default)]
    pub eligible_nodes: LabelSelector,
    /// Nodes chosen first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_nodes: Option<LabelSelector>,
    /// Taints reflector nodes may have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Label key set on reflector nodes.
    #[serde(default = "default_reflector_label")]
    pub reflector_label: String,
    /// Cluster ID of the first zone (zone-name order); the last octet counts up per zone.
    #[serde(default = "default_cluster_id", rename = "clusterID")]
    pub cluster_id: String,
    /// `simple` or `multi`.
    #[serde(default)]
    pub topology: ReflectorTopology,
    /// Reflectors per client (`multi` only).
    #[serde(default = "default_peers_per_node")]
    pub peers_per_node: u32,
    /// Seconds between the steps of a transition (the seed's `WAIT_TIMEOUT`): time for
    /// BIRD to bring new sessions up before the next step relies on them.
    #[serde(default = "default_step_delay_seconds")]
    pub step_delay_seconds: u32,
    /// Calico's node-to-node mesh: `report` (a condition says while it is still on) or
    /// `disable` (turned off once every node has its reflector sessions).
    #[serde(default)]
    pub node_to_node_mesh: NodeToNodeMesh,
    /// Where Calico keeps its BGP objects: `kubernetes` (the default: `BGPPeer`s as
    /// `crd.projectcalico.org/v1` objects, labels and the cluster ID on Kubernetes Nodes) or
    /// `etcdv3` (Calico's own etcd: the same objects in its key layout and JSON).
    #[serde(default, skip_serializing_if = "CalicoDatastore::is_default")]
    pub datastore: CalicoDatastore,
}

/// Calico's datastore: at most one of `kubernetes`, `etcdv3` (neither: `kubernetes`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.kubernetes) && has(self.etcdv3))",
    "message": "datastore names one of kubernetes or etcdv3, not both"
}]))]
pub struct CalicoDatastore {
    /// Calico's Kubernetes datastore (KDD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesDatastore>,
    /// Calico's etcd datastore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcdv3: Option<EtcdDatastore>,
}

impl CalicoDatastore {
    /// Whether this is the default (`kubernetes`, unset).
    pub fn is_default(&self) -> bool {
        self.etcdv3.is_none() && self.kubernetes.is_none()
    }
}

/// Calico's Kubernetes datastore: this cluster's (default), or another cluster's (the
/// seed's `K8S_API_ENDPOINT`): its Nodes are read and labelled and its BGPPeers written
/// there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesDatastore {
    /// A Secret holding the kubeconfig of the cluster Calico runs in. Unset: this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<KubeconfigSecretRef>,
}

/// A kubeconfig in a Secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigSecretRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Key holding the kubeconfig (default: the first of `value` (Cluster API's and
    /// Rancher's), `kubeconfig` and `config` present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Calico's etcd: where and how to reach it. Its endpoints are listed (`endpoints`,
/// Calico's `ETCD_ENDPOINTS`) or found in DNS (`discoverySrv`, Calico's
/// `ETCD_DISCOVERY_SRV`): exactly one of the two.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.endpoints) != has(self.discoverySrv)",
    "message": "exactly one of endpoints and discoverySrv"
}]))]
pub struct EtcdDatastore {
    /// Client URLs (`https://10.0.0.1:2379`), tried in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 16))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.all(e, e.startsWith('http://') || e.startsWith('https://'))",
        "message": "each endpoint is an http:// or https:// URL"
    }]))]
    pub endpoints: Vec<String>,
    /// A DNS domain whose SRV records name etcd's client endpoints, as etcd's clients
    /// read them: `_etcd-client-ssl._tcp.<domain>` (https) and
    /// `_etcd-client._tcp.<domain>` (http), each by priority, then weight. Looked up
    /// through the operator's resolver configuration when the client is made and again
    /// after etcd failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub discovery_srv: Option<String>,
    /// A Secret with `ca.crt` (the etcd server's CA) and, for client certificates,
    /// `tls.crt` and `tls.key` (the keys of a `kubernetes.io/tls` Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_ref: Option<NamespacedRef>,
    /// A Secret with `username` and `password`: etcd's user authentication (Calico's
    /// `ETCD_USERNAME` and `ETCD_PASSWORD`), with TLS or without. The password goes to
    /// etcd only: never into a log, an Event or a status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<NamespacedRef>,
}

/// What the operator does about Calico's full node-to-node mesh.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NodeToNodeMesh {
    /// Report it in a condition; leave it as it is.
    #[default]
    Report,
    /// Turn it off in Calico's `BGPConfiguration` `default` once every node has its
    /// reflector sessions.
    Disable,
}

fn default_step_delay_seconds() -> u32 {
    5
}

impl Default for RouteReflectorConfigSpec {
    fn default() -> Self {
        Self {
            min: default_min(),
            max: default_max(),
            ratio: default_ratio(),
            per: ReflectorsPer::default(),
            zone_label: default_zone_label(),
            eligible_nodes: LabelSelector::default(),
            preferred_nodes: None,
            tolerations: Vec::new(),
            reflector_label: default_reflector_label(),
            cluster_id: default_cluster_id(),
            topology: ReflectorTopology::default(),
            peers_per_node: default_peers_per_node(),
            step_delay_seconds: default_step_delay_seconds(),
            node_to_node_mesh: NodeToNodeMesh::default(),
            datastore: CalicoDatastore::default(),
        }
    }
}

fn default_min() -> u32 {
    3
}
fn default_max() -> u32 {
    10
}
fn default_ratio() -> f64 {
    0.005
}
/// Default `zoneLabel` of a RouteReflectorConfig (netpolicy-rr's default too; the
/// operator's tests check that they agree).
pub const DEFAULT_ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Default `reflectorLabel` of a RouteReflectorConfig (as Calico's documentation uses).
pub const DEFAULT_REFLECTOR_LABEL: &str = "calico-route-reflector";

fn default_zone_label() -> String {
    DEFAULT_ZONE_LABEL.to_owned()
}
fn default_reflector_label() -> String {
    DEFAULT_REFLECTOR_LABEL.to_owned()
}
fn default_cluster_id() -> String {
    "224.0.0.1".to_owned()
}
fn default_peers_per_node() -> u32 {
    3
}

/// Sizing per zone or for the cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ReflectorsPer {
    /// Each zone sized on its own.
    #[default]
    Zone,
    /// One count spread over zones.
    Cluster,
}

/// How clients peer with reflectors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ReflectorTopology {
    /// Every client peers with every reflector of its zone.
    #[default]
    Simple,
    /// Every client peers with `peersPerNode` reflectors, balanced.
    Multi,
}

/// A toleration (Kubernetes' fields and matching rules).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key; empty with `Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Value for `Equal`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule`, `NoExecute`; empty tolerates every effect.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub effect: String,
}

/// What the operator reports about the RouteReflectorConfig.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteReflectorConfigStatus {
    /// Reflectors now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflectors: Option<u32>,
    /// `multi`: the reflector ring as last applied (kept so that a reflector joining or
    /// leaving only changes the reflector sets around it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ring: Vec<String>,
    /// Cluster IDs in use: per zone (`simple`; the zone keeps its ID, so a new zone
    /// never renumbers the others) or per reflector (`multi`).
    #[serde(
        default,
        rename = "clusterIDs",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub cluster_ids: BTreeMap<String, String>,
    /// The transition in progress; absent when settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition: Option<TransitionStatus>,
    /// Standard conditions (`Ready`, `Progressing`, `NodeToNodeMesh`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A transition in progress: the step being applied, of how many are left planned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransitionStatus {
    /// The phase of the step (`createPeers`, `promote`, ...).
    pub phase: String,
    /// Steps done since the transition started.
    pub step: u32,
    /// Steps it had when it started.
    pub of: u32,
    /// When it started (RFC 3339).
    pub started: String,
}

/// A cloud account that hands out routed IPs: exactly one provider.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "RoutedIPIssuer",
    plural = "routedipissuers",
    shortname = "ripi",
    status = "RoutedIPIssuerStatus",
    derive = "PartialEq",
    derive = "Default",
    validation = Rule::new(
        "[has(self.spec.aws), has(self.spec.digitalocean), has(self.spec.hetzner), has(self.spec.memory)].filter(x, x).size() == 1"
    )
    .message("a RoutedIPIssuer names exactly one provider: aws, digitalocean, hetzner or memory")
)]
#[serde(rename_all = "camelCase")]
pub struct RoutedIPIssuerSpec {
    /// AWS Elastic IPs (the firewall is a security group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsIssuer>,
    /// DigitalOcean reserved IPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digitalocean: Option<DigitalOceanIssuer>,
    /// Hetzner Cloud floating IPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hetzner: Option<HetznerIssuer>,
    /// The in-process provider, for tests and demos.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryIssuerSpec>,
    /// A cloud firewall kept in step with the IP's holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<NameRef>,
    /// Return traffic of the issuer's IPs leaves the way it came: the holder of a
    /// RoutedIP gets `from <ip> lookup <table>` and a default route via `gateway` on
    /// `interface` in that table, in its NodeNetworkConfig (source `RoutedIP/<name>`);
    /// they move with the IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_routing: Option<ReturnRouting>,
}

/// What the operator reports about a RoutedIPIssuer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutedIPIssuerStatus {
    /// Standard conditions (`Ready`: the token is readable and the provider answers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// DigitalOcean settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigitalOceanIssuer {
    /// The Secret (and key) holding the API token.
    pub token_secret_ref: SecretKeyRef,
    /// Region of new IPs (`fra1`).
    pub region: String,
    /// The API's base URL (default `https://api.digitalocean.com/v2`): a proxy, or a
    /// local server in tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('https://') || self.startsWith('http://')",
        "message": "endpoint is an http:// or https:// URL"
    }]))]
    pub endpoint: Option<String>,
}

/// Hetzner Cloud settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HetznerIssuer {
    /// The Secret (and key) holding the API token.
    pub token_secret_ref: SecretKeyRef,
    /// Home location of new IPs (`fsn1`).
    pub location: String,
    /// The link the holder keeps the IP on (Hetzner routes a floating IP to the server
    /// and expects its OS to have it): default `lo`. The holder's NodeNetworkConfig
    /// gets an `addresses` item (source `RoutedIP/<name>`) that the agent applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_device: Option<String>,
    /// The API's base URL (default `https://api.hetzner.cloud/v1`): a proxy, or a local
    /// server in tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('https://') || self.startsWith('http://')",
        "message": "endpoint is an http:// or https:// URL"
    }]))]
    pub endpoint: Option<String>,
}

/// AWS settings: Elastic IPs in a VPC, associated with the primary network interface of
/// the holder's instance (`spec.providerID` `aws:///<zone>/<instance-id>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsIssuer {
    /// The region of the IPs and instances (`eu-west-1`).
    #[schemars(length(min = 1))]
    pub region: String,
    /// A Secret with `aws_access_key_id`, `aws_secret_access_key` and optionally
    /// `aws_session_token`. Default: the AWS SDK's credential chain (IRSA web identity,
    /// EKS pod identity, instance profile via IMDSv2, environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<NamespacedRef>,
    /// The VPC the `firewall` security group is looked up and created in. Default: found
    /// by name in any VPC, created in the region's default VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('vpc-')",
        "message": "vpcId is a VPC ID (vpc-...)"
    }]))]
    pub vpc_id: Option<String>,
    /// The EC2 API's base URL (default `https://ec2.<region>.amazonaws.com`): a VPC
    /// endpoint, a proxy, or a local emulator in tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('https://') || self.startsWith('http://')",
        "message": "endpoint is an http:// or https:// URL"
    }]))]
    pub endpoint: Option<String>,
}

/// The in-process provider takes no settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryIssuerSpec {}

/// A Secret key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Key in the Secret (default `token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A reference by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NameRef {
    /// Name.
    pub name: String,
}

/// A namespaced reference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamespacedRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What happens to the cloud IP when its RoutedIP is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ReclaimPolicy {
    /// Unassign it and keep it.
    #[default]
    Retain,
    /// Delete it.
    Delete,
}

fn default_cooldown() -> u32 {
    60
}

/// A cloud IP routed to one elected node.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "RoutedIP",
    plural = "routedips",
    shortname = "rip",
    status = "RoutedIPStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".status.address"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.node"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.step"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RoutedIPSpec {
    /// The RoutedIPIssuer to get the IP from.
    pub issuer_ref: NameRef,
    /// Adopt this existing IP instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `Retain` (default) or `Delete`.
    #[serde(default)]
    pub reclaim_policy: ReclaimPolicy,
    /// Nodes that may hold the IP (empty: all).
    #[serde(default)]
    pub node_selector: LabelSelector,
    /// Only nodes with a ready endpoint of this Service may hold the IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_ref: Option<NamespacedRef>,
    /// Seconds a node that lost the IP waits before it may hold it again.
    #[serde(default = "default_cooldown")]
    pub cooldown_seconds: u32,
}

/// What the operator reports about a RoutedIP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutedIPStatus {
    /// The IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The node holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The cloud firewall kept in step (the issuer's `firewall`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<String>,
    /// The ports the firewall opens (the Service's ports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<RoutedIPPort>,
    /// Nodes that lost the IP, and until when (RFC 3339) they may not hold it again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cooldown_until: BTreeMap<String, String>,
    /// The failover step in progress (absent when settled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Standard conditions (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A port the firewall opens for a RoutedIP.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub struct RoutedIPPort {
    /// `tcp` or `udp`.
    pub protocol: String,
    /// Port.
    pub port: u16,
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
