//! The `netpolicy.io/v1alpha1` custom resources.
//!
//! Routing items are `netpolicy-core`'s wire types, so the CRDs, the `plan` CLI and
//! embedders share one definition. All kinds are cluster-scoped.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt};
use netpolicy_core::spec::{LabelSelector, RenderedSpec, RoutingSpec};
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
    ]
}

/// Cluster-wide routing items, applied to every node. At most one exists, named
/// `default`.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "ClusterConfig",
    plural = "clusterconfigs",
    shortname = "npcc",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfigSpec {
    /// VLANs, routes, rules and hard-synced tables.
    #[serde(flatten)]
    pub routing: RoutingSpec,
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
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeConfigSpec {
    /// Nodes this config applies to. Empty (or absent) selects every node.
    #[serde(default)]
    pub node_selector: LabelSelector,
    /// Higher wins over lower for items with the same identity. Default 0.
    #[serde(default)]
    pub priority: i64,
    /// VLANs, routes, rules and hard-synced tables.
    #[serde(flatten)]
    pub routing: RoutingSpec,
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
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct NodeNetworkConfigSpec {
    /// Identifies this rendering; the agent reports which revision it applied.
    #[serde(default)]
    pub revision: String,
    /// The merged items, each with the objects it came from.
    #[serde(flatten)]
    pub rendered: RenderedSpec,
}

/// What the agent reports about a NodeNetworkConfig.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeNetworkConfigStatus {
    /// `metadata.generation` the agent last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `spec.revision` the agent last applied completely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<String>,
    /// Standard conditions (`Applied`, `Degraded`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Items the agent could not apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub item_errors: Vec<ItemError>,
}

/// One item the agent could not apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemError {
    /// The item, as in `plan` output (`route 10.20.0.0/16 table 100`).
    pub item: String,
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

/// Automatic FloatingIPs for Namespaces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoAllocate {
    /// Namespaces that get a FloatingIP; empty selects every Namespace.
    #[serde(default)]
    pub namespace_selector: LabelSelector,
    /// The FloatingIP is named `<namePrefix><range name>`. Default empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
}

/// kube-vip publishing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeVip {
    /// Whether to publish.
    #[serde(default)]
    pub publish: bool,
    /// Namespace of kube-vip's ConfigMap (default `kube-system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of kube-vip's ConfigMap (default `kubevip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
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
