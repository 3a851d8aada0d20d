//! Calico route reflectors: `RouteReflectorConfig` (how many, where, how clients peer,
//! Calico's datastore) and its status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use netpolicy_core::spec::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::NamespacedRef;

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
