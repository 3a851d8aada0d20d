//! Floating IPs: `FloatingIPRange` (a pool, its kube-vip publishing and guest clusters),
//! `FloatingIP` and `FloatingIPClaim`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use netpolicy_core::spec::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
