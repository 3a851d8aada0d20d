//! Traffic domains: Meridio's kinds (`Trench`, `Attractor`, `Gateway`, `Vip`, `Conduit`,
//! `Stream`, `Flow`), namespaced, every child labelled `trench: <name>`.
//!
//! Field names are Meridio's JSON names in camelCase (`source-subnets` →
//! `sourceSubnets`, `local-asn` → `localAsn`, `vlan-id` → `vlanId`); the
//! Attractor's `interface` is flat (`{name, link, vlanId, ipv4Prefix, ipv6Prefix, mtu}`)
//! and a `nodeSelector` replaces Meridio's load-balancer replicas. Meridio's webhook
//! rules are in the schema where CEL can say them (ranges, immutability, enums, port
//! syntax, unique protocols, overlapping subnets, host bits); the rest (the trench
//! exists, references resolve, no VIP or conduit shared between attractors, port
//! overlaps, port NAT collisions) is checked by the operator and `netpolicy plan` and
//! reported as conditions and errors. The `trench` label is required and immutable
//! through the ValidatingAdmissionPolicy in `deploy/` (CRD validation rules cannot read
//! labels); the operator reports a missing label too.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use netpolicy_core::spec::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The label every child of a trench carries: the trench's name (same namespace).
pub const TRENCH_LABEL: &str = "trench";

/// What the operator reports about any traffic-domain object: standard conditions
/// (`Ready`: valid, its references resolve, and compiled into node routing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrafficStatus {
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// IP families of a trench.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TrenchIpFamily {
    /// IPv4 only.
    Ipv4,
    /// IPv6 only.
    Ipv6,
    /// Both (Meridio's default).
    #[default]
    Dualstack,
}

impl TrenchIpFamily {
    /// Whether the trench carries IPv4.
    pub fn v4(self) -> bool {
        self != Self::Ipv6
    }
    /// Whether the trench carries IPv6.
    pub fn v6(self) -> bool {
        self != Self::Ipv4
    }
}

/// Where a trench's traffic is handled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DataPlane {
    /// Meridio's own workloads, kept as Meridio's operator keeps them (the trench's
    /// configuration ConfigMap, NSP and IPAM, per attractor the load-balancer front
    /// ends, per conduit the proxies). The default, as in Meridio.
    #[default]
    Meridio,
    /// Compiled into the attractor nodes' routing (VLAN, addresses, tables, rules),
    /// applied by netpolicy's agent; no Meridio workload runs.
    Node,
}

fn default_v4_root() -> String {
    "172.16.0.0/16".into()
}
fn default_v6_root() -> String {
    "fd00::/48".into()
}
fn default_conduit_v4() -> u8 {
    20
}
fn default_conduit_v6() -> u8 {
    56
}
fn default_node_v4() -> u8 {
    24
}
fn default_node_v6() -> u8 {
    64
}

/// A trench: the root of a traffic domain, its IP families and IPAM roots.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "Trench",
    plural = "trenches",
    namespaced,
    status = "TrenchStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"IP-Family","type":"string","jsonPath":".spec.ipFamily"}"#,
    printcolumn = r#"{"name":"Data-Plane","type":"string","jsonPath":".spec.dataPlane"}"#,
    printcolumn = r#"{"name":"Table","type":"integer","jsonPath":".status.table"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TrenchSpec {
    /// `ipv4`, `ipv6` or `dualstack` (default). Immutable.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf", "message": "ipFamily is immutable"
    }]))]
    pub ip_family: TrenchIpFamily,
    /// `meridio` (default): Meridio's own workloads; `node`: compiled into node routing.
    #[serde(default)]
    pub data_plane: DataPlane,
    /// The trench's IPAM roots and prefix lengths (Meridio's defaults). Immutable.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf", "message": "ipam is immutable: addresses were handed out from it"
    }]))]
    pub ipam: TrenchIpam,
}

/// Hierarchical IPAM of a trench: a root prefix per family, a child prefix per conduit,
/// and a prefix per node inside each conduit's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.conduitPrefixLengthV4 <= self.nodePrefixLengthV4 && cidr(self.ipv4Root).prefixLength() <= self.conduitPrefixLengthV4",
     "message": "IPv4 prefix lengths grow from root to conduit to node"},
    {"rule": "self.conduitPrefixLengthV6 <= self.nodePrefixLengthV6 && cidr(self.ipv6Root).prefixLength() <= self.conduitPrefixLengthV6",
     "message": "IPv6 prefix lengths grow from root to conduit to node"}
]))]
pub struct TrenchIpam {
    /// IPv4 root (default `172.16.0.0/16`).
    #[serde(default = "default_v4_root")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self) == cidr(self).masked()",
        "message": "ipv4Root is an IPv4 prefix without host bits"
    }]))]
    #[schemars(length(max = 49))]
    pub ipv4_root: String,
    /// IPv6 root (default `fd00::/48`).
    #[serde(default = "default_v6_root")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "isCIDR(self) && cidr(self).ip().family() == 6 && cidr(self) == cidr(self).masked()",
        "message": "ipv6Root is an IPv6 prefix without host bits"
    }]))]
    #[schemars(length(max = 49))]
    pub ipv6_root: String,
    /// IPv4 prefix length per conduit (default 20).
    #[serde(default = "default_conduit_v4")]
    #[schemars(range(max = 32))]
    pub conduit_prefix_length_v4: u8,
    /// IPv6 prefix length per conduit (default 56).
    #[serde(default = "default_conduit_v6")]
    #[schemars(range(max = 128))]
    pub conduit_prefix_length_v6: u8,
    /// IPv4 prefix length per node in a conduit (default 24).
    #[serde(default = "default_node_v4")]
    #[schemars(range(max = 32))]
    pub node_prefix_length_v4: u8,
    /// IPv6 prefix length per node in a conduit (default 64).
    #[serde(default = "default_node_v6")]
    #[schemars(range(max = 128))]
    pub node_prefix_length_v6: u8,
}

impl Default for TrenchIpam {
    fn default() -> Self {
        Self {
            ipv4_root: default_v4_root(),
            ipv6_root: default_v6_root(),
            conduit_prefix_length_v4: default_conduit_v4(),
            conduit_prefix_length_v6: default_conduit_v6(),
            node_prefix_length_v4: default_node_v4(),
            node_prefix_length_v6: default_node_v6(),
        }
    }
}

/// What the operator reports about a trench, and what it handed out (kept across
/// restarts, so that no node's address or table number moves while it stays).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrenchStatus {
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The trench's routing table (its static gateways; VIP source rules look it up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// Routing table of each stream (flows' rules look it up), by stream name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stream_tables: BTreeMap<String, u32>,
    /// Each attractor's node addresses on its interface, by attractor then node
    /// (`address/len` on the attractor's prefixes). A node that leaves frees its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_addresses: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Each conduit's prefixes from the trench root, and its nodes' prefixes inside
    /// them, by conduit.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub conduits: BTreeMap<String, ConduitAllocation>,
    /// Standard conditions (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A conduit's share of the trench IPAM.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConduitAllocation {
    /// The conduit's prefixes (one per family).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefixes: Vec<String>,
    /// Each attractor node's prefixes inside them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<String, Vec<String>>,
}

const PREFIX_V4_RULE: &str =
    "isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self) == cidr(self).masked()";
const PREFIX_V6_RULE: &str =
    "isCIDR(self) && cidr(self).ip().family() == 6 && cidr(self) == cidr(self).masked()";

/// Where a traffic domain enters the nodes: the nodes that attract its traffic, their
/// interface towards the gateways, and the gateways, VIPs and conduits it serves.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "Attractor",
    plural = "attractors",
    namespaced,
    status = "TrafficStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Interface","type":"string","jsonPath":".spec.interface.name"}"#,
    printcolumn = r#"{"name":"Link","type":"string","jsonPath":".spec.interface.link"}"#,
    printcolumn = r#"{"name":"VLAN","type":"integer","jsonPath":".spec.interface.vlanId"}"#,
    printcolumn = r#"{"name":"Gateways","type":"string","jsonPath":".spec.gateways"}"#,
    printcolumn = r#"{"name":"Vips","type":"string","jsonPath":".spec.vips"}"#,
    printcolumn = r#"{"name":"Composites","type":"string","jsonPath":".spec.composites"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Trench","type":"string","jsonPath":".metadata.labels.trench"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AttractorSpec {
    /// Nodes that attract the trench's traffic (instead of Meridio's front-end pod
    /// replicas). Empty: every node.
    #[serde(default)]
    pub node_selector: LabelSelector,
    /// The interface towards the gateways.
    pub interface: AttractorInterface,
    /// Gateway names (same trench).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub gateways: Vec<String>,
    /// Vip names (same trench) this attractor serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub vips: Vec<String>,
    /// The conduit (same trench) it feeds: at most one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1), extend("x-kubernetes-list-type" = "set"))]
    pub composites: Vec<String>,
    /// Replicas of Meridio's load-balancer front end (`meridio` data plane; default 1).
    /// The `node` data plane ignores it: `nodeSelector` picks the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: Option<u32>,
}

/// An attractor's interface: a VLAN on `link` (or `link` itself when `vlanId` is 0)
/// carrying the node's address from the prefixes. Every field but `mtu` is immutable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.name == oldSelf.name && self.link == oldSelf.link && has(self.vlanId) == has(oldSelf.vlanId) && (!has(self.vlanId) || self.vlanId == oldSelf.vlanId) && has(self.ipv4Prefix) == has(oldSelf.ipv4Prefix) && (!has(self.ipv4Prefix) || self.ipv4Prefix == oldSelf.ipv4Prefix) && has(self.ipv6Prefix) == has(oldSelf.ipv6Prefix) && (!has(self.ipv6Prefix) || self.ipv6Prefix == oldSelf.ipv6Prefix)",
     "message": "interface name, link, vlanId and prefixes are immutable (mtu may change)"},
    {"rule": "(has(self.vlanId) && self.vlanId != 0) || self.name == self.link",
     "message": "an untagged interface (vlanId 0) is the link itself: name must equal link"},
    {"rule": "has(self.networkAttachments) == has(oldSelf.networkAttachments) && (!has(self.networkAttachments) || self.networkAttachments == oldSelf.networkAttachments)",
     "message": "networkAttachments are immutable"},
    {"rule": "!has(self.networkAttachments) || size(self.networkAttachments) == 0 || !has(self.vlanId) || self.vlanId == 0",
     "message": "a network-attachment interface has no vlanId (Multus gives the pods the interface)"},
    {"rule": "has(self.ipv4Prefix) || has(self.ipv6Prefix)",
     "message": "an interface needs ipv4Prefix or ipv6Prefix"}
]))]
pub struct AttractorInterface {
    /// Interface name on the node (at most 13 bytes, Meridio's limit).
    #[schemars(length(min = 1, max = 13))]
    pub name: String,
    /// The parent link (Meridio's `base-interface`).
    #[schemars(length(min = 1, max = 15))]
    pub link: String,
    /// 802.1Q VLAN id; 0 (default) = untagged: the address goes on `link`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4094))]
    pub vlan_id: Option<u16>,
    /// The IPv4 network towards the gateways; nodes get addresses from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": PREFIX_V4_RULE, "message": "ipv4Prefix is an IPv4 prefix without host bits"
    }]))]
    #[schemars(length(max = 49))]
    pub ipv4_prefix: Option<String>,
    /// The IPv6 network towards the gateways; nodes get addresses from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": PREFIX_V6_RULE, "message": "ipv6Prefix is an IPv6 prefix without host bits"
    }]))]
    #[schemars(length(max = 49))]
    pub ipv6_prefix: Option<String>,
    /// MTU of the VLAN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 68, max = 65535))]
    pub mtu: Option<u32>,
    /// Meridio's `network-attachment` interface type (`dataPlane: meridio` only): the
    /// Multus NetworkAttachmentDefinition the stateless-lb-frontend pods get their
    /// external interface from, instead of an NSM VLAN (no `nse-vlan-<attractor>`;
    /// `vlanId` unset and `link` set to `name`, both unused). At most one, as Meridio's
    /// webhook allows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1))]
    pub network_attachments: Vec<NetworkAttachment>,
}

/// A Multus NetworkAttachmentDefinition an attractor's front ends attach to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkAttachment {
    /// The NetworkAttachmentDefinition's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its namespace (default: the pod's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// The interface name in the pod (default: the attractor interface's `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 15))]
    pub interface: Option<String>,
}

/// How the attractor nodes reach a gateway router.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GatewayProtocol {
    /// BGP (Meridio's default): accepted and shown; netpolicy runs no BGP speaker on the
    /// node, so it is reported as not programmable.
    #[default]
    Bgp,
    /// Static routes via the gateway.
    Static,
}

/// A gateway router of a trench.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "Gateway",
    plural = "gateways",
    namespaced,
    status = "TrafficStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Protocol","type":"string","jsonPath":".spec.protocol"}"#,
    printcolumn = r#"{"name":"Trench","type":"string","jsonPath":".metadata.labels.trench"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    validation = Rule::new("self.spec.protocol != 'static' || !has(self.spec.bgp)")
        .message("spec.bgp must be empty when protocol is static"),
    validation = Rule::new("self.spec.protocol != 'bgp' || !has(self.spec.static)")
        .message("spec.static must be empty when protocol is bgp"),
    validation = Rule::new("self.spec.protocol != 'bgp' || (has(self.spec.bgp) && has(self.spec.bgp.remoteAsn) && has(self.spec.bgp.localAsn))")
        .message("a bgp gateway needs spec.bgp.remoteAsn and spec.bgp.localAsn")
)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The router's address, on the attractor's interface network.
    #[schemars(length(max = 45))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "isIP(self)", "message": "address is an IP address"
    }]))]
    pub address: String,
    /// `bgp` (default) or `static`.
    #[serde(default)]
    pub protocol: GatewayProtocol,
    /// BGP session parameters (only with `bgp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<BgpSpec>,
    /// Static routing parameters (only with `static`).
    #[serde(rename = "static", default, skip_serializing_if = "Option::is_none")]
    pub static_: Option<StaticSpec>,
    /// BFD towards the gateway (as `static.bfd`/`bgp.bfd` in Meridio). Shown, not
    /// programmed: netpolicy runs no BFD daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd: Option<BfdSpec>,
}

/// BGP session parameters of a gateway (Meridio's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpSpec {
    /// The router's ASN (Meridio's `remote-asn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_asn: Option<u32>,
    /// The attractor nodes' ASN (Meridio's `local-asn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_asn: Option<u32>,
    /// BFD on the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd: Option<BfdSpec>,
    /// Hold time, a duration of at least 3s (Meridio's default 240s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "duration(self) >= duration('3s')", "message": "holdTime is a duration of at least 3s"
    }]))]
    #[schemars(length(max = 32))]
    pub hold_time: Option<String>,
    /// The router's BGP port (default 179).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub remote_port: Option<u32>,
    /// The nodes' BGP port (default 179).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub local_port: Option<u32>,
    /// RFC 2385 authentication: a key in a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<BgpAuth>,
}

/// BGP authentication key reference (Meridio's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpAuth {
    /// Key in the Secret's data.
    #[schemars(regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key_name: String,
    /// Name of the Secret.
    #[schemars(length(max = 253))]
    pub key_source: String,
}

/// Static routing parameters of a gateway.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StaticSpec {
    /// BFD towards the gateway (Meridio's default for static: on, 200ms, ×3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd: Option<BfdSpec>,
}

/// BFD parameters (Meridio's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.minTx) || duration(self.minTx) >= duration('0s')",
    "message": "minTx is a duration"
}, {
    "rule": "!has(self.minRx) || duration(self.minRx) >= duration('0s')",
    "message": "minRx is a duration"
}]))]
pub struct BfdSpec {
    /// On or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<bool>,
    /// Minimum transmit interval (`300ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub min_tx: Option<String>,
    /// Minimum receive interval (`300ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub min_rx: Option<String>,
    /// Missed packets before the session is down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 255))]
    pub multiplier: Option<u16>,
}

/// A virtual IP (prefix) of a trench.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "Vip",
    plural = "vips",
    namespaced,
    status = "TrafficStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Trench","type":"string","jsonPath":".metadata.labels.trench"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VipSpec {
    /// The VIP as a prefix without host bits (`20.0.0.1/32`, `2000::1/128`).
    #[schemars(length(max = 49))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "isCIDR(self) && cidr(self) == cidr(self).masked()",
        "message": "address is a prefix without host bits (20.0.0.1/32)"
    }]))]
    pub address: String,
}

/// Network service type of a conduit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConduitType {
    /// Stateless load balancing (Meridio's only type).
    #[default]
    #[serde(rename = "stateless-lb")]
    StatelessLb,
}

/// Transport protocols of flows and port NATs.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TransportProtocol {
    /// TCP.
    #[default]
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl TransportProtocol {
    /// The lowercase name (`tcp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

/// A traffic path through the attractor nodes.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "Conduit",
    plural = "conduits",
    namespaced,
    status = "TrafficStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Trench","type":"string","jsonPath":".metadata.labels.trench"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ConduitSpec {
    /// `stateless-lb` (the default and only type).
    #[serde(rename = "type", default)]
    pub type_: ConduitType,
    /// Destination port NATs (must not collide).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination_port_nats: Vec<PortNatSpec>,
}

/// A destination port NAT of a conduit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortNatSpec {
    /// Port exposed by the service (in flows).
    #[schemars(range(min = 0, max = 65535))]
    pub port: u32,
    /// Port the targets receive on.
    #[schemars(range(min = 0, max = 65535))]
    pub target_port: u32,
    /// Vip names it applies to.
    pub vips: Vec<String>,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: TransportProtocol,
}

fn default_max_targets() -> u32 {
    100
}

/// A group of flows sent to one conduit.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "Stream",
    plural = "streams",
    namespaced,
    status = "TrafficStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Conduit","type":"string","jsonPath":".spec.conduit"}"#,
    printcolumn = r#"{"name":"Max-Targets","type":"integer","jsonPath":".spec.maxTargets"}"#,
    printcolumn = r#"{"name":"Trench","type":"string","jsonPath":".metadata.labels.trench"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct StreamSpec {
    /// The conduit (same trench) carrying the stream.
    #[schemars(length(min = 1))]
    pub conduit: String,
    /// Most targets (1..10000, default 100). Immutable.
    #[serde(default = "default_max_targets")]
    #[schemars(range(min = 1, max = 10000), extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf", "message": "maxTargets is immutable"
    }]))]
    pub max_targets: u32,
}

const PORT_RULE: &str = "self == 'any' || (self.matches('^[0-9]{1,5}(-[0-9]{1,5})?$') && self.split('-').all(p, int(p) <= 65535) && (self.split('-').size() == 1 || int(self.split('-')[0]) <= int(self.split('-')[1])))";
const PORT_MESSAGE: &str = "a port is 'any', N or N-M within 0-65535 (N <= M)";

/// Traffic classified into a stream: VIPs, source subnets, ports, protocols.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "Flow",
    plural = "flows",
    namespaced,
    status = "TrafficStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Vips","type":"string","jsonPath":".spec.vips"}"#,
    printcolumn = r#"{"name":"Dst-Ports","type":"string","jsonPath":".spec.destinationPorts"}"#,
    printcolumn = r#"{"name":"Src-Subnets","type":"string","jsonPath":".spec.sourceSubnets"}"#,
    printcolumn = r#"{"name":"Src-Ports","type":"string","jsonPath":".spec.sourcePorts"}"#,
    printcolumn = r#"{"name":"Protocols","type":"string","jsonPath":".spec.protocols"}"#,
    printcolumn = r#"{"name":"Stream","type":"string","jsonPath":".spec.stream"}"#,
    printcolumn = r#"{"name":"Trench","type":"string","jsonPath":".metadata.labels.trench"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FlowSpec {
    /// The stream (same trench) the flow's traffic joins.
    #[serde(default)]
    pub stream: String,
    /// Vip names (same trench) the flow sends traffic to.
    #[schemars(length(min = 1), extend("x-kubernetes-list-type" = "set"))]
    pub vips: Vec<String>,
    /// Source prefixes (no overlaps, no host bits). Empty: any source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend(
        "items" = {"type": "string", "maxLength": 49},
        "x-kubernetes-validations" = [{
            "rule": "self.all(s, isCIDR(s) && cidr(s) == cidr(s).masked())",
            "message": "sourceSubnets are prefixes without host bits"
        }, {
            "rule": "self.all(a, !isCIDR(a) || self.filter(b, isCIDR(b) && (cidr(a).containsCIDR(b) || cidr(b).containsCIDR(a))).size() == 1)",
            "message": "sourceSubnets must not overlap"
        }]
    ))]
    pub source_subnets: Vec<String>,
    /// Source ports: `any`, `N` or `N-M` (no overlaps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("items" = {"type": "string", "maxLength": 11, "x-kubernetes-validations": [{"rule": PORT_RULE, "message": PORT_MESSAGE}]}))]
    pub source_ports: Vec<String>,
    /// Destination ports: `any`, `N` or `N-M` (no overlaps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("items" = {"type": "string", "maxLength": 11, "x-kubernetes-validations": [{"rule": PORT_RULE, "message": PORT_MESSAGE}]}))]
    pub destination_ports: Vec<String>,
    /// `tcp`, `udp`, `sctp`, each at most once.
    #[schemars(length(min = 1), extend("x-kubernetes-list-type" = "set"))]
    pub protocols: Vec<TransportProtocol>,
    /// Higher matches first; at least 0.
    #[schemars(range(min = 0))]
    pub priority: i32,
    /// Meridio's byte matches (`dataPlane: meridio` only): `<proto>[<offset>:<1|2|4>]`,
    /// an optional `& 0x<mask>`, `= <value>` (`tcp[13:1] & 0x02 = 0x02`: SYN). The
    /// `node` data plane cannot match bytes with FIB rules and refuses a flow that
    /// has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("items" = {"type": "string", "maxLength": 64, "pattern": BYTE_MATCH_PATTERN}))]
    pub byte_matches: Vec<String>,
}

/// Meridio's byte-match syntax (its webhook's regular expression).
pub const BYTE_MATCH_PATTERN: &str =
    r"^(sctp|tcp|udp)\[[0-9]+ *: *[124]\]( *& *0x[0-9a-f]+)? *= *([0-9]+|0x[0-9a-f]+)$";

/// Whether `s` is a byte match in Meridio's syntax ([`BYTE_MATCH_PATTERN`]), for
/// callers without a regular-expression engine (`plan` checks without an API server).
pub fn is_byte_match(s: &str) -> bool {
    fn spaces(s: &str) -> &str {
        s.trim_start_matches(' ')
    }
    fn digits(s: &str, hex: bool) -> Option<&str> {
        let n = s
            .find(|c: char| !(c.is_ascii_digit() || (hex && matches!(c, 'a'..='f'))))
            .unwrap_or(s.len());
        (n > 0).then(|| &s[n..])
    }
    fn number(s: &str) -> Option<&str> {
        match s.strip_prefix("0x") {
            Some(h) if digits(h, true).is_some() => digits(h, true),
            _ => digits(s, false),
        }
    }
    let Some(rest) = ["sctp", "tcp", "udp"]
        .iter()
        .find_map(|p| s.strip_prefix(p))
    else {
        return false;
    };
    let Some(rest) = rest.strip_prefix('[').and_then(|r| digits(r, false)) else {
        return false;
    };
    let Some(rest) = spaces(rest).strip_prefix(':') else {
        return false;
    };
    let rest = spaces(rest);
    let Some(rest) = rest
        .strip_prefix(['1', '2', '4'])
        .and_then(|r| r.strip_prefix(']'))
    else {
        return false;
    };
    let mut rest = rest;
    if let Some(m) = spaces(rest).strip_prefix('&') {
        let Some(r) = spaces(m).strip_prefix("0x").and_then(|h| digits(h, true)) else {
            return false;
        };
        rest = r;
    }
    let Some(v) = spaces(rest).strip_prefix('=') else {
        return false;
    };
    number(spaces(v)).is_some_and(str::is_empty)
}

#[cfg(test)]
mod byte_match_tests {
    use super::is_byte_match;

    #[test]
    fn byte_matches_follow_meridios_syntax() {
        for ok in [
            "tcp[13:1] & 0x02 = 0x02",
            "udp[0:2]=53",
            "sctp[8 : 4] = 0xdeadbeef",
            "tcp[20:4]&0xff=1",
        ] {
            assert!(is_byte_match(ok), "{ok}");
        }
        for bad in [
            "",
            "icmp[0:1] = 8",
            "tcp[13:3] = 1",
            "tcp[13:1] = ",
            "tcp[13:1] & 02 = 1",
            "tcp[:1] = 1",
            "tcp[13:1] = 0xZZ",
            "tcp[13:1] = 1 ",
            "TCP[13:1] = 1",
        ] {
            assert!(!is_byte_match(bad), "{bad}");
        }
    }
}
