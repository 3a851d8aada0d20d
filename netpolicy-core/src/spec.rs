//! The wire form of routing items: what users write in ClusterConfig and NodeConfig
//! specs, and what the operator writes into NodeNetworkConfig specs.
//!
//! Field names are the camelCase names of docs/architecture.md. Addresses, prefixes, ports and
//! marks are kept as the user's text so that validation ([`RoutingSpec::validate`]) can
//! report *every* problem with its field path instead of stopping at the first one a
//! deserializer meets. Going the other way, [`RoutingSpec::from_config`] renders a
//! validated [`crate::model::RoutingConfig`] in canonical text (`10.20.0.0/16`,
//! compressed lowercase IPv6, tables as numbers), and
//! [`crate::render::RenderedSpec::from_merged`] does the same for a node's merged
//! configuration, with the source of every item (both in [`crate::render`]).
//!
//! Like Kubernetes, deserialization ignores unknown fields (the API server prunes them);
//! `netpolicy plan` checks manifests strictly against the CRD schema and reports them.

use std::{borrow::Cow, collections::BTreeMap, fmt};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// Routing items shared by ClusterConfig, NodeConfig and NodeNetworkConfig specs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingSpec {
    /// VLAN sub-interfaces, with their addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<VlanSpec>,
    /// Routes. Every route netpolicy installs carries route protocol 203 (`proto 203`
    /// in `ip route`): that is how the agent finds its own routes again and never
    /// touches anyone else's, so a route's protocol is not configurable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSpec>,
    /// Addresses on links netpolicy did not create (`lo`, `eth0`). Each carries address
    /// protocol 203 (`IFA_PROTO`, Linux 5.18+): that is how the agent finds its own
    /// addresses again after a restart and never removes anyone else's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<AddressSpec>,
    /// Policy routing rules. Each carries rule protocol 203 (`proto 203` in `ip rule`),
    /// at any priority 1..32765, for the same reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleSpec>,
    /// Route tables in which the agent removes every route that is not desired, even
    /// routes it did not create. Opt-in; nodes get the union over all their policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub table_hard_sync: Vec<u32>,
}

/// A VLAN sub-interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.id >= 1 && self.id <= 4094",
    "message": "VLAN id must be in 1..4094 (0 and 4095 are reserved by 802.1Q)"
}]))]
pub struct VlanSpec {
    /// Parent interface.
    pub link: String,
    /// VLAN id, 1..4094.
    pub id: u32,
    /// Interface name; default `<link>.<id>`. At most 15 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `802.1Q` (default) or `802.1ad`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Addresses with prefix length, IPv4 or IPv6 (`10.10.0.5/24`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
}

/// An address on a link netpolicy did not create.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressSpec {
    /// The link (`lo`, `eth0`); a VLAN netpolicy makes takes its addresses in
    /// `vlans[].addresses` instead.
    pub dev: String,
    /// Address with prefix length, IPv4 or IPv6 (`203.0.113.7/32`).
    pub address: String,
    /// Whether the kernel's `local` route for the address (table local, 255) stays:
    /// `true` (default) delivers every packet to the address to this host. `false`
    /// removes that route and keeps it removed: the host sends from the address (an
    /// IPv4 source must be an address of the host) and receives on it only where a
    /// `local` route in a table a rule selects delivers it (a traffic domain's VIP:
    /// only what its flows select). Set back to `true`, the route returns when the
    /// address is next added: on `lo` at once, elsewhere when the item is re-added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_route: Option<bool>,
}

/// A route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.nexthops) || size(self.nexthops) == 0 || (!has(self.via) && !has(self.dev))",
    "message": "via and dev are exclusive with nexthops: give each gateway as a nexthop"
}]))]
pub struct RouteSpec {
    /// `unicast` (default), `local` (deliver to this host: `dev lo`, only where a rule
    /// looks this table up), `blackhole`, `unreachable` or `prohibit` (drop; the last
    /// two answer with ICMP). Only unicast routes take `via` or `nexthops`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Destination prefix; `default` means `0.0.0.0/0` (write `::/0` for IPv6).
    pub to: String,
    /// Gateway. Exclusive with `nexthops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Output interface. Exclusive with `nexthops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Routing table, default 254 (main).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// Metric, default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
    /// `global`, `link` or `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Treat the gateway as on-link.
    #[serde(default, skip_serializing_if = "is_false")]
    pub onlink: bool,
    /// Preferred source address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    /// ECMP next hops. Exclusive with `via` and `dev`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nexthops: Vec<NextHopSpec>,
}

/// One ECMP next hop.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NextHopSpec {
    /// Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Output interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Weight 1..256, default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

/// A policy routing rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.priority >= 1 && self.priority <= 32765",
    "message": "rule priority must be in 1..32765 (0, 32766 and 32767 belong to the kernel's own rules)"
}]))]
pub struct RuleSpec {
    /// Priority 1..32765 (0, 32766 and 32767 belong to the kernel).
    pub priority: u32,
    /// Source prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Destination prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Input interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iif: Option<String>,
    /// Output interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oif: Option<String>,
    /// Firewall mark, `value` or `value/mask` (decimal or `0x` hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fwmark: Option<IntOrString>,
    /// IP protocol: `tcp`, `udp`, `sctp`, `icmp`, `icmpv6` or a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_proto: Option<IntOrString>,
    /// Source port or range (`2000` or `2000-3000`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<IntOrString>,
    /// Destination port or range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<IntOrString>,
    /// Table for `action: lookup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// `lookup` (default), `blackhole`, `unreachable` or `prohibit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Match packets the selector does *not* match.
    #[serde(default, skip_serializing_if = "is_false")]
    pub invert: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A value YAML may give as a number or a string (`dport: 443` or `dport: "2000-3000"`),
/// kept as text. Its schema is Kubernetes' `x-kubernetes-int-or-string`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IntOrString(pub String);

impl IntOrString {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IntOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for IntOrString {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

impl Serialize for IntOrString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(IntOrString(v.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(IntOrString(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(IntOrString(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for IntOrString {
    fn schema_name() -> Cow<'static, str> {
        "IntOrString".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "x-kubernetes-int-or-string": true })
    }
}

/// A Kubernetes label selector (`metav1.LabelSelector`). An empty selector matches
/// every node.
///
/// Fields a selector does not have are kept (the CRD schema preserves them, so the API
/// server does not prune them away) and refused by [`LabelSelector::validate`]: a
/// plain label map written where a selector belongs (`nodeSelector: {role: edge}`)
/// would otherwise become the empty selector and select every node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
    /// Names of fields that are not part of a label selector (validation refuses them).
    #[serde(flatten, default, skip_serializing)]
    #[schemars(skip)]
    pub unknown_fields: UnknownFields,
}

/// The names of map keys a type does not know, collected on deserialization (values
/// are ignored), so that validation can name them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnknownFields(pub Vec<String>);

impl<'de> Deserialize<'de> for UnknownFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> de::Visitor<'de> for Keys {
            type Value = UnknownFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut keys = Vec::new();
                while let Some((k, _)) = m.next_entry::<String, de::IgnoredAny>()? {
                    keys.push(k);
                }
                keys.sort();
                Ok(UnknownFields(keys))
            }
        }
        d.deserialize_map(Keys)
    }
}

/// One set-based requirement of a [`LabelSelector`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`; empty for `Exists` / `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}
