//! The typed, validated model of a node's routing state.
//!
//! Values of these types are only made by validation ([`crate::spec`] →
//! [`RoutingConfig`]) or by an adapter reading the kernel, so they always hold: a VLAN
//! id is in 1..=4094, an interface name fits the kernel's 15 bytes, a route destination
//! has no host bits, a rule priority is in 1..=32765, and so on. Everything here is plain
//! data: `Clone`, `Eq`, `Ord`, `Hash`, no I/O.
//!
//! Every item has an *identity* (docs/architecture.md, merge semantics): two items with the same
//! identity describe the same kernel object, so they must agree on the rest.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use ipnetwork::IpNetwork;

/// The main routing table (`ip route` without `table`).
pub const TABLE_MAIN: u32 = 254;
/// The kernel's `default` table: reserved, netpolicy never writes it.
pub const TABLE_DEFAULT: u32 = 253;
/// The kernel's `local` table: reserved, netpolicy never writes it.
pub const TABLE_LOCAL: u32 = 255;
/// Lowest rule priority a policy may use (0 belongs to the kernel's `local` rule).
pub const RULE_PRIORITY_MIN: u32 = 1;
/// Highest rule priority a policy may use (32766 and 32767 are the kernel's `main` and
/// `default` rules).
pub const RULE_PRIORITY_MAX: u32 = 32765;
/// Longest interface name the kernel accepts, in bytes (`IFNAMSIZ - 1`).
pub const IFNAME_MAX: usize = 15;

/// An address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpFamily {
    /// IPv4 (`AF_INET`).
    V4,
    /// IPv6 (`AF_INET6`).
    V6,
}

impl IpFamily {
    /// The family of an address.
    pub fn of(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }

    /// The family of a prefix.
    pub fn of_net(net: IpNetwork) -> Self {
        Self::of(net.ip())
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        })
    }
}

/// A Linux interface name: 1..=15 bytes, no `/`, no whitespace, not `.` or `..`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IfName(String);

impl IfName {
    /// Checks `name` against the kernel's rules (`dev_valid_name`).
    ///
    /// # Errors
    /// A sentence saying what is wrong, for a [`crate::FieldError`].
    pub fn new(name: &str) -> Result<Self, String> {
        if name.is_empty() {
            return Err("interface name must not be empty".into());
        }
        if name.len() > IFNAME_MAX {
            return Err(format!(
                "interface name {name:?} is {} bytes; Linux allows at most {IFNAME_MAX}",
                name.len()
            ));
        }
        if name == "." || name == ".." {
            return Err(format!("{name:?} is not a valid interface name"));
        }
        if let Some(c) = name
            .chars()
            .find(|c| *c == '/' || *c == ':' || c.is_whitespace())
        {
            return Err(format!(
                "interface name {name:?} contains {c:?}, which Linux does not allow"
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The VLAN tag protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VlanProtocol {
    /// IEEE 802.1Q (ethertype 0x8100), the default.
    #[default]
    Dot1Q,
    /// IEEE 802.1ad "QinQ" service tag (ethertype 0x88a8).
    Dot1AD,
}

impl VlanProtocol {
    /// The ethertype carried in `IFLA_VLAN_PROTOCOL`.
    pub fn ethertype(self) -> u16 {
        match self {
            Self::Dot1Q => 0x8100,
            Self::Dot1AD => 0x88a8,
        }
    }

    /// Canonical text: `802.1Q` or `802.1ad`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dot1Q => "802.1Q",
            Self::Dot1AD => "802.1ad",
        }
    }
}

impl fmt::Display for VlanProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A VLAN sub-interface. Identity: its interface `name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vlan {
    /// Interface name of the VLAN link (identity).
    pub name: IfName,
    /// Parent interface.
    pub link: IfName,
    /// VLAN id, 1..=4094.
    pub id: u16,
    /// Tag protocol.
    pub protocol: VlanProtocol,
    /// MTU, when set.
    pub mtu: Option<u32>,
    /// Addresses with prefix length, sorted and without duplicates.
    pub addresses: Vec<IpNetwork>,
}

impl fmt::Display for Vlan {
    /// `eth0.100: 802.1Q id 100 on eth0, mtu 1500, addresses 10.10.0.5/24`: the readable
    /// form `netpolicy plan` and the agent's status use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} id {} on {}",
            self.name, self.protocol, self.id, self.link
        )?;
        if let Some(m) = self.mtu {
            write!(f, ", mtu {m}")?;
        }
        if !self.addresses.is_empty() {
            let a: Vec<String> = self.addresses.iter().map(ToString::to_string).collect();
            write!(f, ", addresses {}", a.join(" "))?;
        }
        Ok(())
    }
}

/// An address netpolicy keeps on a link it did not create (`lo`, `eth0`): a routed
/// cloud IP on its holder, a service address. Identity: the link and the address
/// ([`HostAddress::key`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostAddress {
    /// The link.
    pub dev: IfName,
    /// The address with its prefix length (host bits allowed, as on any interface).
    pub address: IpNetwork,
    /// Whether the kernel's `local` route for the address (its own host route in table
    /// local, 255) is there: desired, `false` means removed and kept removed (the host
    /// sends from the address and receives on it only where a rule-selected table
    /// delivers it); observed, whether the kernel has it.
    pub local_route: bool,
}

impl HostAddress {
    /// A plain address: the kernel's local route stays.
    ///
    /// ```
    /// use netpolicy_core::model::{HostAddress, IfName};
    /// let a = HostAddress::new(IfName::new("lo").unwrap(), "203.0.113.7/32".parse().unwrap());
    /// assert!(a.local_route);
    /// assert_eq!(a.to_string(), "203.0.113.7/32 dev lo");
    /// ```
    pub fn new(dev: IfName, address: IpNetwork) -> Self {
        Self {
            dev,
            address,
            local_route: true,
        }
    }

    /// The identity: the link and the address.
    pub fn key(&self) -> (&IfName, &IpNetwork) {
        (&self.dev, &self.address)
    }
}

impl fmt::Display for HostAddress {
    /// `203.0.113.7/32 dev lo` (`…, no local route` when that route is removed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} dev {}", self.address, self.dev)?;
        if !self.local_route {
            f.write_str(", no local route")?;
        }
        Ok(())
    }
}

/// Route scope (`rtm_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteScope {
    /// `RT_SCOPE_UNIVERSE`.
    Global,
    /// `RT_SCOPE_LINK`.
    Link,
    /// `RT_SCOPE_HOST`.
    Host,
}

impl RouteScope {
    /// Canonical text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::Link => "link",
            Self::Host => "host",
        }
    }
}

/// Route type (`rtm_type`): what the kernel does with a packet the route matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    /// Forward it (`via`, `dev`, `nexthops`): every route but the ones below.
    #[default]
    Unicast,
    /// Deliver it to this host (`local <to> dev lo table N`): a destination accepted
    /// only where this table is looked up (a policy rule picks it), not everywhere as
    /// an address would be.
    Local,
    /// Drop it silently.
    Blackhole,
    /// Drop it, answering "host unreachable".
    Unreachable,
    /// Drop it, answering "administratively prohibited".
    Prohibit,
}

impl RouteKind {
    /// `ip route`'s word (`unicast` is not printed by `ip`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unicast => "unicast",
            Self::Local => "local",
            Self::Blackhole => "blackhole",
            Self::Unreachable => "unreachable",
            Self::Prohibit => "prohibit",
        }
    }
}

/// One next hop of a multipath (ECMP) route.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NextHop {
    /// Gateway.
    pub via: Option<IpAddr>,
    /// Output interface.
    pub dev: Option<IfName>,
    /// Weight, 1..=256 (the kernel stores `weight - 1` in `rtnh_hops`).
    pub weight: u16,
}

/// A route. Identity: `(table, to, metric)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    /// Route type (unicast unless said).
    pub kind: RouteKind,
    /// Routing table.
    pub table: u32,
    /// Destination prefix, host bits clear.
    pub to: IpNetwork,
    /// Metric (`RTA_PRIORITY`).
    pub metric: u32,
    /// Gateway (single-path routes).
    pub via: Option<IpAddr>,
    /// Output interface (single-path routes).
    pub dev: Option<IfName>,
    /// Scope, when set.
    pub scope: Option<RouteScope>,
    /// `RTNH_F_ONLINK`: the gateway is on the link even if no prefix says so.
    pub onlink: bool,
    /// Preferred source address.
    pub src: Option<IpAddr>,
    /// ECMP next hops; empty for single-path routes. Exclusive with `via`/`dev`.
    pub nexthops: Vec<NextHop>,
}

impl Route {
    /// The route's identity.
    pub fn key(&self) -> RouteKey {
        RouteKey {
            table: self.table,
            to: self.to,
            metric: self.metric,
        }
    }

    /// The route's address family.
    pub fn family(&self) -> IpFamily {
        IpFamily::of_net(self.to)
    }
}

impl fmt::Display for Route {
    /// `10.20.0.0/16 table 100 via 192.0.2.1 dev eth0`, in `ip route`'s words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind != RouteKind::Unicast {
            write!(f, "{} ", self.kind.as_str())?;
        }
        self.key().fmt(f)?;
        if let Some(v) = self.via {
            write!(f, " via {v}")?;
        }
        if let Some(d) = &self.dev {
            write!(f, " dev {d}")?;
        }
        for h in &self.nexthops {
            f.write_str(" nexthop")?;
            if let Some(v) = h.via {
                write!(f, " via {v}")?;
            }
            if let Some(d) = &h.dev {
                write!(f, " dev {d}")?;
            }
            if h.weight != 1 {
                write!(f, " weight {}", h.weight)?;
            }
        }
        if let Some(s) = self.scope {
            write!(f, " scope {}", s.as_str())?;
        }
        if self.onlink {
            f.write_str(" onlink")?;
        }
        if let Some(s) = self.src {
            write!(f, " src {s}")?;
        }
        Ok(())
    }
}

/// A route's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RouteKey {
    /// Routing table.
    pub table: u32,
    /// Destination.
    pub to: IpNetwork,
    /// Metric.
    pub metric: u32,
}

impl fmt::Display for RouteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} table {}", self.to, self.table)?;
        if self.metric != 0 {
            write!(f, " metric {}", self.metric)?;
        }
        Ok(())
    }
}

/// A firewall mark match, `value/mask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FwMark {
    /// Mark value.
    pub value: u32,
    /// Mask (`0xffffffff` when none was given).
    pub mask: u32,
}

impl fmt::Display for FwMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mask == u32::MAX {
            write!(f, "{:#x}", self.value)
        } else {
            write!(f, "{:#x}/{:#x}", self.value, self.mask)
        }
    }
}

/// An inclusive port range; a single port has `start == end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    /// First port.
    pub start: u16,
    /// Last port (inclusive).
    pub end: u16,
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

/// An IP protocol number (`FRA_IP_PROTO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpProto(pub u8);

impl IpProto {
    /// ICMP.
    pub const ICMP: Self = Self(1);
    /// TCP.
    pub const TCP: Self = Self(6);
    /// UDP.
    pub const UDP: Self = Self(17);
    /// ICMPv6.
    pub const ICMPV6: Self = Self(58);
    /// SCTP.
    pub const SCTP: Self = Self(132);

    /// Parses a name (`tcp`, `udp`, `sctp`, `icmp`, `icmpv6`) or a number 0..=255.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Self::TCP),
            "udp" => Some(Self::UDP),
            "sctp" => Some(Self::SCTP),
            "icmp" => Some(Self::ICMP),
            "icmpv6" | "ipv6-icmp" => Some(Self::ICMPV6),
            other => other.parse().ok().map(Self),
        }
    }

    /// Whether the protocol has ports (TCP, UDP, SCTP, and UDP-Lite/DCCP by number).
    pub fn has_ports(self) -> bool {
        matches!(self.0, 6 | 17 | 33 | 132 | 136)
    }
}

impl fmt::Display for IpProto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TCP => f.write_str("tcp"),
            Self::UDP => f.write_str("udp"),
            Self::SCTP => f.write_str("sctp"),
            Self::ICMP => f.write_str("icmp"),
            Self::ICMPV6 => f.write_str("icmpv6"),
            Self(n) => write!(f, "{n}"),
        }
    }
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleAction {
    /// Look the packet up in `table`.
    Lookup(u32),
    /// Drop silently.
    Blackhole,
    /// Answer "network unreachable".
    Unreachable,
    /// Answer "communication administratively prohibited".
    Prohibit,
}

impl RuleAction {
    /// Canonical action name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lookup(_) => "lookup",
            Self::Blackhole => "blackhole",
            Self::Unreachable => "unreachable",
            Self::Prohibit => "prohibit",
        }
    }

    /// The lookup table, for `Lookup`.
    pub fn table(self) -> Option<u32> {
        match self {
            Self::Lookup(t) => Some(t),
            _ => None,
        }
    }
}

/// A routing policy rule. Identity: everything but the action ([`RuleKey`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// The rule's identity (its selector).
    pub key: RuleKey,
    /// What the rule does.
    pub action: RuleAction,
}

impl Rule {
    /// The rule's identity.
    pub fn key(&self) -> &RuleKey {
        &self.key
    }
}

impl fmt::Display for Rule {
    /// `priority 1000 from 10.10.0.0/24 lookup 100`, in `ip rule`'s words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.key.fmt(f)?;
        match self.action {
            RuleAction::Lookup(t) => write!(f, " lookup {t}"),
            other => write!(f, " {}", other.name()),
        }
    }
}

/// A rule's identity: priority and selector.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleKey {
    /// Priority, 1..=32765.
    pub priority: u32,
    /// Source prefix.
    pub from: Option<IpNetwork>,
    /// Destination prefix.
    pub to: Option<IpNetwork>,
    /// Input interface.
    pub iif: Option<IfName>,
    /// Output interface.
    pub oif: Option<IfName>,
    /// Firewall mark.
    pub fwmark: Option<FwMark>,
    /// IP protocol.
    pub ip_proto: Option<IpProto>,
    /// Source ports.
    pub sport: Option<PortRange>,
    /// Destination ports.
    pub dport: Option<PortRange>,
    /// Match when the selector does *not* match.
    pub invert: bool,
}

impl RuleKey {
    /// The family the rule is for: that of `from`/`to` (validation makes them agree).
    /// `None` means the rule names no prefix and applies to both families: an agent
    /// installs it once per family.
    pub fn family(&self) -> Option<IpFamily> {
        self.from.or(self.to).map(IpFamily::of_net)
    }
}

impl fmt::Display for RuleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "priority {}", self.priority)?;
        if self.invert {
            f.write_str(" not")?;
        }
        if let Some(v) = self.from {
            write!(f, " from {v}")?;
        }
        if let Some(v) = self.to {
            write!(f, " to {v}")?;
        }
        if let Some(v) = &self.iif {
            write!(f, " iif {v}")?;
        }
        if let Some(v) = &self.oif {
            write!(f, " oif {v}")?;
        }
        if let Some(v) = self.fwmark {
            write!(f, " fwmark {v}")?;
        }
        if let Some(v) = self.ip_proto {
            write!(f, " ipproto {v}")?;
        }
        if let Some(v) = self.sport {
            write!(f, " sport {v}")?;
        }
        if let Some(v) = self.dport {
            write!(f, " dport {v}")?;
        }
        Ok(())
    }
}

/// The validated routing content of one object (a ClusterConfig, a NodeConfig) or of
/// one node after merging. Lists are sorted by identity and free of duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingConfig {
    /// VLAN links with their addresses.
    pub vlans: Vec<Vlan>,
    /// Routes.
    pub routes: Vec<Route>,
    /// Addresses on links netpolicy did not create.
    pub addresses: Vec<HostAddress>,
    /// Rules.
    pub rules: Vec<Rule>,
    /// Tables in which the agent removes every route that is not desired, foreign or not.
    pub table_hard_sync: Vec<u32>,
}

/// The unspecified address of a family (the "default" route's network).
pub fn unspecified(family: IpFamily) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Checks that `net` names a network: its host bits are clear. The error says which
/// prefix was probably meant (`10.0.0.1/24 has host bits set; did you mean 10.0.0.0/24?`).
/// Every crate that takes prefixes (routes, rules, pools, parent prefixes) uses this.
///
/// # Errors
/// The message, for a [`crate::FieldError`] at the caller's path.
pub fn network_prefix(net: IpNetwork) -> std::result::Result<IpNetwork, String> {
    match IpNetwork::new(net.network(), net.prefix()) {
        Ok(canonical) if canonical.ip() == net.ip() => Ok(canonical),
        Ok(canonical) => Err(format!(
            "{net} has host bits set; did you mean {canonical}?"
        )),
        Err(e) => Err(format!("{net} is not a prefix: {e}")),
    }
}
