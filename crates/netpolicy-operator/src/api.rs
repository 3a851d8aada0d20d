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
