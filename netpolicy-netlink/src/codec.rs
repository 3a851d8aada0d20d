//! netpolicy-core's model to rtnetlink messages and back, normalized so that what we
//! write reads back equal.
//!
//! Normalizations (documented because they decide "equal"):
//! - Route scope: `None` means universe for routes with a gateway or next hops and link
//!   for device-only IPv4 routes (what iproute2 does); IPv6 routes are always universe
//!   (the kernel keeps no scope for them). A read-back scope equal to that default
//!   becomes `None`.
//! - IPv6 metric 0 is the kernel's 1024: written as 1024, 1024 read back as 0.
//! - A rule fwmark without mask reads back with mask `0xffffffff`.

use std::{collections::BTreeMap, net::IpAddr};

use ipnetwork::IpNetwork;
use netlink_packet_route::{
    AddressFamily,
    address::{AddressAttribute, AddressMessage},
    link::{InfoData, InfoKind, InfoVlan, LinkAttribute, LinkFlags, LinkInfo, LinkMessage},
    route::{
        RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteNextHop, RouteNextHopFlags,
        RouteProtocol, RouteScope as NlScope, RouteType,
    },
    rule::{RuleAction as NlAction, RuleAttribute, RuleFlags, RuleMessage, RulePortRange},
};
use netpolicy_core::model::{
    FwMark, IfName, IpFamily, IpProto, NextHop, PortRange, Route, RouteKind, RouteScope, Rule,
    RuleAction, RuleKey, Vlan, VlanProtocol,
};

/// Names of links by index, and back.
#[derive(Debug, Clone, Default)]
pub struct Links {
    /// Index → name.
    pub names: BTreeMap<u32, String>,
    /// Name → index.
    pub index: BTreeMap<String, u32>,
}

impl Links {
    /// The index of `name`, or an error naming it.
    pub fn index_of(&self, name: &IfName) -> Result<u32, String> {
        self.index
            .get(name.as_str())
            .copied()
            .ok_or_else(|| format!("no interface {name}"))
    }
}

fn family_of(net: &IpNetwork) -> AddressFamily {
    match net {
        IpNetwork::V4(_) => AddressFamily::Inet,
        IpNetwork::V6(_) => AddressFamily::Inet6,
    }
}

/// The kernel family of a model family.
pub fn af(f: IpFamily) -> AddressFamily {
    match f {
        IpFamily::V4 => AddressFamily::Inet,
        IpFamily::V6 => AddressFamily::Inet6,
    }
}

fn default_scope(r: &Route) -> NlScope {
    // Linux keeps no scope for IPv6 routes: every one is dumped as universe.
    if matches!(r.to, IpNetwork::V6(_)) {
        NlScope::Universe
    } else if r.kind == RouteKind::Local {
        // As `ip route add local`: host scope.
        NlScope::Host
    } else if r.via.is_some() || !r.nexthops.is_empty() || r.kind != RouteKind::Unicast {
        NlScope::Universe
    } else {
        NlScope::Link
    }
}

/// Whether `scope` is what the kernel gets for `r` when no scope is given.
pub fn is_default_scope(r: &Route, scope: RouteScope) -> bool {
    scope_nl(scope) == default_scope(r)
}

fn scope_nl(s: RouteScope) -> NlScope {
    match s {
        RouteScope::Global => NlScope::Universe,
        RouteScope::Link => NlScope::Link,
        RouteScope::Host => NlScope::Host,
    }
}

fn route_type(k: RouteKind) -> RouteType {
    match k {
        RouteKind::Unicast => RouteType::Unicast,
        RouteKind::Local => RouteType::Local,
        RouteKind::Blackhole => RouteType::BlackHole,
        RouteKind::Unreachable => RouteType::Unreachable,
        RouteKind::Prohibit => RouteType::Prohibit,
    }
}

/// The table the kernel keeps every address's `local` route in (`RT_TABLE_LOCAL`).
pub const LOCAL_TABLE: u8 = 255;

/// The kernel's `local` route of the host address `address` on link `index`, to delete
/// it: table local, type local, protocol kernel, that link.
pub fn local_route_delete_message(index: u32, address: IpNetwork) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = family_of(&address);
    m.header.destination_prefix_length = if address.is_ipv4() { 32 } else { 128 };
    m.header.table = LOCAL_TABLE;
    m.header.protocol = RouteProtocol::Kernel;
    m.header.scope = NlScope::Host;
    m.header.kind = RouteType::Local;
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(
            address.ip(),
        )));
    m.attributes.push(RouteAttribute::Oif(index));
    m
}

/// The link index and address of a kernel `local` route for one host address in table
/// local (what [`local_route_delete_message`] removes).
pub fn local_route_of(m: &RouteMessage) -> Option<(u32, IpAddr)> {
    let table = m
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or_else(|| u32::from(m.header.table));
    let host = match m.header.address_family {
        AddressFamily::Inet => 32,
        AddressFamily::Inet6 => 128,
        _ => return None,
    };
    if table != u32::from(LOCAL_TABLE)
        || m.header.kind != RouteType::Local
        || m.header.destination_prefix_length != host
    {
        return None;
    }
    let mut dst = None;
    let mut oif = None;
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(d) => dst = ip_of(d),
            RouteAttribute::Oif(i) => oif = Some(*i),
            _ => {}
        }
    }
    Some((oif?, dst?))
}

/// The message that creates, replaces or deletes `r` (the key fields suffice to delete).
pub fn route_message(r: &Route, protocol: u8, links: &Links) -> Result<RouteMessage, String> {
    let mut m = RouteMessage::default();
    let v6 = matches!(r.to, IpNetwork::V6(_));
    m.header.address_family = family_of(&r.to);
    m.header.destination_prefix_length = r.to.prefix();
    m.header.table = u8::try_from(r.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
    m.header.protocol = RouteProtocol::from(protocol);
    m.header.scope = r.scope.map_or_else(|| default_scope(r), scope_nl);
    m.header.kind = route_type(r.kind);
    if r.onlink {
        m.header.flags |= netlink_packet_route::route::RouteFlags::Onlink;
    }
    let a = &mut m.attributes;
    a.push(RouteAttribute::Table(r.table));
    a.push(RouteAttribute::Destination(RouteAddress::from(
        r.to.network(),
    )));
    let metric = if v6 && r.metric == 0 { 1024 } else { r.metric };
    a.push(RouteAttribute::Priority(metric));
    if let Some(via) = r.via {
        a.push(RouteAttribute::Gateway(RouteAddress::from(via)));
    }
    if let Some(dev) = &r.dev {
        a.push(RouteAttribute::Oif(links.index_of(dev)?));
    }
    if let Some(src) = r.src {
        a.push(RouteAttribute::PrefSource(RouteAddress::from(src)));
    }
    if !r.nexthops.is_empty() {
        let mut hops = Vec::new();
        for h in &r.nexthops {
            let mut hop = RouteNextHop::default();
            hop.hops = u8::try_from(h.weight.saturating_sub(1)).unwrap_or(u8::MAX);
            if r.onlink {
                hop.flags |= RouteNextHopFlags::Onlink;
            }
            if let Some(dev) = &h.dev {
                hop.interface_index = links.index_of(dev)?;
            }
            if let Some(via) = h.via {
                hop.attributes
                    .push(RouteAttribute::Gateway(RouteAddress::from(via)));
            }
            hops.push(hop);
        }
        a.push(RouteAttribute::MultiPath(hops));
    }
    Ok(m)
}

pub(crate) fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
        RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
        _ => None,
    }
}

/// The message that deletes exactly the observed route `r` made with `protocol`: its
/// identity, its gateway, device and next hops, and its protocol. The kernel deletes
/// the first route that matches every attribute given, so naming only the identity
/// could remove a foreign route that shares it. A device that no longer exists is left
/// out (the route went with it, or the delete answers `ESRCH`).
pub fn route_delete_message(r: &Route, protocol: u8, links: &Links) -> RouteMessage {
    let known = links;
    let mut exact = r.clone();
    if exact
        .dev
        .as_ref()
        .is_some_and(|d| known.index_of(d).is_err())
    {
        exact.dev = None;
    }
    for h in &mut exact.nexthops {
        if h.dev.as_ref().is_some_and(|d| known.index_of(d).is_err()) {
            h.dev = None;
        }
    }
    let mut m = match route_message(&exact, protocol, known) {
        Ok(m) => m,
        // Unreachable: every device left is known. Fall back to the identity with the
        // protocol, which still never matches a route of another protocol.
        Err(_) => {
            let mut m = RouteMessage::default();
            m.header.address_family = family_of(&r.to);
            m.header.destination_prefix_length = r.to.prefix();
            m.header.table = u8::try_from(r.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
            m.header.protocol = RouteProtocol::from(protocol);
            m.header.kind = route_type(r.kind);
            m.attributes.push(RouteAttribute::Table(r.table));
            m.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(
                    r.to.network(),
                )));
            let v6 = matches!(r.to, IpNetwork::V6(_));
            let metric = if v6 && r.metric == 0 { 1024 } else { r.metric };
            m.attributes.push(RouteAttribute::Priority(metric));
            m
        }
    };
    // Any scope: the protocol and next hops already single the route out.
    m.header.scope = NlScope::NoWhere;
    m
}

/// A dumped route as the model sees it, with its protocol; `None` for routes the model
/// does not describe (local, broadcast, multicast, cloned).
pub fn route_from(m: &RouteMessage, links: &Links) -> Option<(Route, u8)> {
    let kind = match m.header.kind {
        RouteType::Unicast => RouteKind::Unicast,
        // The local table is the kernel's own (every address's local route): not a
        // route the model describes. Elsewhere a local route is one someone chose.
        RouteType::Local if m.header.table != 255 => RouteKind::Local,
        RouteType::BlackHole => RouteKind::Blackhole,
        RouteType::Unreachable => RouteKind::Unreachable,
        RouteType::Prohibit => RouteKind::Prohibit,
        _ => return None,
    };
    let mut table = u32::from(m.header.table);
    let mut dst = None;
    let mut metric = 0;
    let mut via = None;
    let mut dev = None;
    let mut src = None;
    let mut nexthops = Vec::new();
    let name = |i: u32| links.names.get(&i).and_then(|n| IfName::new(n).ok());
    for a in &m.attributes {
        match a {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Destination(d) => dst = ip_of(d),
            RouteAttribute::Priority(p) => metric = *p,
            RouteAttribute::Gateway(g) => via = ip_of(g),
            RouteAttribute::Oif(i) => dev = name(*i),
            RouteAttribute::PrefSource(s) => src = ip_of(s),
            RouteAttribute::MultiPath(hops) => {
                for h in hops {
                    let via = h.attributes.iter().find_map(|a| match a {
                        RouteAttribute::Gateway(g) => ip_of(g),
                        _ => None,
                    });
                    nexthops.push(NextHop {
                        via,
                        dev: (h.interface_index != 0)
                            .then(|| name(h.interface_index))
                            .flatten(),
                        weight: u16::from(h.hops) + 1,
                    });
                }
            }
            _ => {}
        }
    }
    let v6 = m.header.address_family == AddressFamily::Inet6;
    let to = match dst {
        Some(ip) => IpNetwork::new(ip, m.header.destination_prefix_length).ok()?,
        None if v6 => IpNetwork::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), 0).ok()?,
        None => IpNetwork::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0).ok()?,
    };
    if v6 && metric == 1024 {
        metric = 0;
    }
    let onlink = m
        .header
        .flags
        .contains(netlink_packet_route::route::RouteFlags::Onlink)
        || (!nexthops.is_empty()
            && m.attributes.iter().any(|a| {
                matches!(a, RouteAttribute::MultiPath(h)
                    if h.iter().all(|h| h.flags.contains(RouteNextHopFlags::Onlink)))
            }));
    // IPv6 keeps its drop routes on the loopback (`dev lo`), a device nobody gave.
    if matches!(
        kind,
        RouteKind::Blackhole | RouteKind::Unreachable | RouteKind::Prohibit
    ) && dev.as_ref().is_some_and(|d| d.as_str() == "lo")
    {
        dev = None;
    }
    let mut r = Route {
        kind,
        table,
        to,
        metric,
        via,
        dev,
        scope: None,
        onlink,
        src,
        nexthops,
    };
    let scope = match m.header.scope {
        NlScope::Universe => Some(RouteScope::Global),
        NlScope::Link => Some(RouteScope::Link),
        NlScope::Host => Some(RouteScope::Host),
        _ => None,
    };
    r.scope = scope.filter(|s| scope_nl(*s) != default_scope(&r));
    let protocol: u8 = m.header.protocol.into();
    Some((r, protocol))
}

/// The message that adds or deletes `rule` in `family`.
pub fn rule_message(family: IpFamily, rule: &Rule, protocol: u8) -> RuleMessage {
    let mut m = RuleMessage::default();
    let k = &rule.key;
    m.header.family = af(family);
    m.header.src_len = k.from.map_or(0, |n| n.prefix());
    m.header.dst_len = k.to.map_or(0, |n| n.prefix());
    if k.invert {
        m.header.flags |= RuleFlags::Invert;
    }
    m.header.action = match rule.action {
        RuleAction::Lookup(_) => NlAction::ToTable,
        RuleAction::Blackhole => NlAction::Blackhole,
        RuleAction::Unreachable => NlAction::Unreachable,
        RuleAction::Prohibit => NlAction::Prohibit,
    };
    let a = &mut m.attributes;
    a.push(RuleAttribute::Priority(k.priority));
    if let RuleAction::Lookup(t) = rule.action {
        m.header.table = u8::try_from(t).unwrap_or(0);
        a.push(RuleAttribute::Table(t));
    }
    if let Some(n) = k.from {
        a.push(RuleAttribute::Source(n.network()));
    }
    if let Some(n) = k.to {
        a.push(RuleAttribute::Destination(n.network()));
    }
    if let Some(i) = &k.iif {
        a.push(RuleAttribute::Iifname(i.as_str().to_owned()));
    }
    if let Some(o) = &k.oif {
        a.push(RuleAttribute::Oifname(o.as_str().to_owned()));
    }
    if let Some(f) = k.fwmark {
        a.push(RuleAttribute::FwMark(f.value));
        a.push(RuleAttribute::FwMask(f.mask));
    }
    if let Some(p) = k.ip_proto {
        a.push(RuleAttribute::IpProtocol(p.0.into()));
    }
    if let Some(p) = k.sport {
        a.push(RuleAttribute::SourcePortRange(RulePortRange {
            start: p.start,
            end: p.end,
        }));
    }
    if let Some(p) = k.dport {
        a.push(RuleAttribute::DestinationPortRange(RulePortRange {
            start: p.start,
            end: p.end,
        }));
    }
    a.push(RuleAttribute::Protocol(RouteProtocol::from(protocol)));
    m
}

/// A dumped rule as the model sees it, with its family and protocol; `None` for rules
/// the model cannot describe (goto, nop, ...).
pub fn rule_from(m: &RuleMessage) -> Option<(IpFamily, Rule, u8)> {
    let family = match m.header.family {
        AddressFamily::Inet => IpFamily::V4,
        AddressFamily::Inet6 => IpFamily::V6,
        _ => return None,
    };
    let mut key = RuleKey {
        priority: 0,
        from: None,
        to: None,
        iif: None,
        oif: None,
        fwmark: None,
        ip_proto: None,
        sport: None,
        dport: None,
        invert: m.header.flags.contains(RuleFlags::Invert),
    };
    let mut table = u32::from(m.header.table);
    let mut mark = None;
    let mut mask = None;
    let mut protocol = 0u8;
    for a in &m.attributes {
        match a {
            RuleAttribute::Priority(p) => key.priority = *p,
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Source(ip) => key.from = IpNetwork::new(*ip, m.header.src_len).ok(),
            RuleAttribute::Destination(ip) => key.to = IpNetwork::new(*ip, m.header.dst_len).ok(),
            RuleAttribute::Iifname(n) => key.iif = IfName::new(n).ok(),
            RuleAttribute::Oifname(n) => key.oif = IfName::new(n).ok(),
            RuleAttribute::FwMark(v) => mark = Some(*v),
            RuleAttribute::FwMask(v) => mask = Some(*v),
            RuleAttribute::IpProtocol(p) => key.ip_proto = Some(IpProto(i32::from(*p) as u8)),
            RuleAttribute::SourcePortRange(p) => {
                key.sport = Some(PortRange {
                    start: p.start,
                    end: p.end,
                });
            }
            RuleAttribute::DestinationPortRange(p) => {
                key.dport = Some(PortRange {
                    start: p.start,
                    end: p.end,
                });
            }
            RuleAttribute::Protocol(p) => protocol = (*p).into(),
            _ => {}
        }
    }
    if let Some(value) = mark {
        key.fwmark = Some(FwMark {
            value,
            mask: mask.unwrap_or(u32::MAX),
        });
    }
    let action = match m.header.action {
        NlAction::ToTable => RuleAction::Lookup(table),
        NlAction::Blackhole => RuleAction::Blackhole,
        NlAction::Unreachable => RuleAction::Unreachable,
        NlAction::Prohibit => RuleAction::Prohibit,
        _ => return None,
    };
    Some((family, Rule { key, action }, protocol))
}

/// The link alias that marks a link as netpolicy's.
pub const LINK_ALIAS: &str = "netpolicy";

/// The message that creates VLAN `v` on parent index `parent`. The kernel ignores
/// `IFLA_IFALIAS` when it creates a link, so the [`LINK_ALIAS`] marker follows in a
/// second request ([`alias_message`]).
pub fn vlan_message(v: &Vlan, parent: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    let a = &mut m.attributes;
    a.push(LinkAttribute::IfName(v.name.as_str().to_owned()));
    a.push(LinkAttribute::Link(parent));
    if let Some(mtu) = v.mtu {
        a.push(LinkAttribute::Mtu(mtu));
    }
    a.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Vlan),
        LinkInfo::Data(InfoData::Vlan(vec![
            InfoVlan::Id(v.id),
            InfoVlan::Protocol(match v.protocol {
                VlanProtocol::Dot1Q => netlink_packet_route::link::VlanProtocol::Ieee8021Q,
                VlanProtocol::Dot1AD => netlink_packet_route::link::VlanProtocol::Ieee8021Ad,
            }),
        ])),
    ]));
    m
}

/// The message that marks the link at `index` with [`LINK_ALIAS`]. It is sent only
/// after the create of that link answered success, by index: a link of that name that
/// someone else made is never marked.
pub fn alias_message(index: u32) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m.attributes
        .push(LinkAttribute::IfAlias(LINK_ALIAS.to_owned()));
    m
}

/// The message that sets link `index` up, or its MTU.
pub fn link_set(index: u32, up: bool, mtu: Option<u32>) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    if up {
        m.header.flags |= LinkFlags::Up;
        m.header.change_mask |= LinkFlags::Up;
    }
    if let Some(mtu) = mtu {
        m.attributes.push(LinkAttribute::Mtu(mtu));
    }
    m
}

/// The message that adds or deletes `address` on link `index`; an add carries
/// `protocol` as its address protocol (`IFA_PROTO`, Linux 5.18+; older kernels ignore
/// it), the mark by which netpolicy finds its addresses on links it did not create.
pub fn address_message(index: u32, address: IpNetwork, protocol: Option<u8>) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.family = family_of(&address);
    m.header.prefix_len = address.prefix();
    m.header.index = index;
    if let IpNetwork::V4(_) = address {
        m.attributes.push(AddressAttribute::Local(address.ip()));
    }
    m.attributes.push(AddressAttribute::Address(address.ip()));
    if let Some(p) = protocol {
        m.attributes.push(AddressAttribute::Protocol(p.into()));
    }
    m
}

/// An address message's address with its prefix length, and its address protocol
/// (`IFA_PROTO`; 0 when the kernel reports none).
pub fn address_from(a: &AddressMessage) -> Option<(IpNetwork, u8)> {
    let ip = a
        .attributes
        .iter()
        .find_map(|x| match x {
            AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        })
        .or_else(|| {
            a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            })
        })?;
    let protocol = a
        .attributes
        .iter()
        .find_map(|x| match x {
            AddressAttribute::Protocol(p) => Some(u8::from(*p)),
            _ => None,
        })
        .unwrap_or(0);
    Some((IpNetwork::new(ip, a.header.prefix_len).ok()?, protocol))
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::Emitable;

    use super::*;

    fn vlan(id: u16, protocol: VlanProtocol, mtu: Option<u32>) -> Vlan {
        Vlan {
            name: IfName::new("v0.100").unwrap(),
            link: IfName::new("v0").unwrap(),
            id,
            protocol,
            mtu,
            addresses: Vec::new(),
        }
    }

    fn bytes(m: &LinkMessage) -> Vec<u8> {
        let mut b = vec![0; m.buffer_len()];
        m.emit(&mut b);
        b
    }

    /// One netlink attribute per the kernel ABI: `nla_len` (header + value, before
    /// padding), `nla_type`, the value, zero padding to 4 bytes.
    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = 4 + value.len();
        let mut v = Vec::new();
        v.extend_from_slice(&u16::try_from(len).unwrap().to_le_bytes());
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(value);
        v.resize(len.div_ceil(4) * 4, 0);
        v
    }

    // include/uapi/linux/if_link.h
    const IFLA_IFNAME: u16 = 3;
    const IFLA_MTU: u16 = 4;
    const IFLA_LINK: u16 = 5;
    const IFLA_LINKINFO: u16 = 18;
    const IFLA_IFALIAS: u16 = 20;
    const IFLA_INFO_KIND: u16 = 1;
    const IFLA_INFO_DATA: u16 = 2;
    const IFLA_VLAN_ID: u16 = 1;
    const IFLA_VLAN_PROTOCOL: u16 = 5;

    fn golden(parent: u32, id: u16, ethertype: u16, mtu: Option<u32>) -> Vec<u8> {
        let mut b = vec![0u8; 16]; // struct ifinfomsg: AF_UNSPEC, index 0, no flags
        b.extend(nla(IFLA_IFNAME, b"v0.100\0"));
        b.extend(nla(IFLA_LINK, &parent.to_le_bytes()));
        if let Some(m) = mtu {
            b.extend(nla(IFLA_MTU, &m.to_le_bytes()));
        }
        let mut data = nla(IFLA_VLAN_ID, &id.to_le_bytes());
        // The VLAN protocol is an ethertype, in network byte order.
        data.extend(nla(IFLA_VLAN_PROTOCOL, &ethertype.to_be_bytes()));
        let mut info = nla(IFLA_INFO_KIND, b"vlan\0");
        info.extend(nla(IFLA_INFO_DATA, &data));
        b.extend(nla(IFLA_LINKINFO, &info));
        b
    }

    #[test]
    fn the_ownership_alias_is_set_by_index_in_a_second_message() {
        let mut want = vec![0u8; 16];
        want[4..8].copy_from_slice(&42u32.to_le_bytes()); // ifi_index
        want.extend(nla(IFLA_IFALIAS, b"netpolicy\0"));
        let m = alias_message(42);
        assert_eq!(bytes(&m), want);
    }

    #[test]
    fn an_8021q_vlan_message_matches_the_kernel_abi_byte_for_byte() {
        let m = vlan_message(&vlan(100, VlanProtocol::Dot1Q, Some(1400)), 2);
        assert_eq!(bytes(&m), golden(2, 100, 0x8100, Some(1400)));
    }

    #[test]
    fn an_8021ad_vlan_message_matches_the_kernel_abi_byte_for_byte() {
        let m = vlan_message(&vlan(4094, VlanProtocol::Dot1AD, None), 7);
        assert_eq!(bytes(&m), golden(7, 4094, 0x88a8, None));
    }

    #[test]
    fn a_vlan_message_parses_back_to_the_same_vlan() {
        use netlink_packet_core::Parseable;
        let v = vlan(300, VlanProtocol::Dot1AD, Some(9000));
        let b = bytes(&vlan_message(&v, 9));
        let parsed = LinkMessage::parse(&b[..]).unwrap();
        assert_eq!(parsed, vlan_message(&v, 9));
    }

    /// Ownership and validation agree: every priority validation accepts makes a rule
    /// that, written with our protocol and read back, is ours; and none outside.
    #[test]
    fn every_priority_validation_accepts_reads_back_as_owned() {
        use netlink_packet_core::Parseable;
        use netpolicy_core::{
            model::{RULE_PRIORITY_MAX, RULE_PRIORITY_MIN},
            spec::{RoutingSpec, RuleSpec},
        };
        let own = crate::Ownership::default();
        let mut accepted = 0u32;
        for priority in 0..=32767u32 {
            let spec = RoutingSpec {
                rules: vec![RuleSpec {
                    priority,
                    from: Some("10.1.0.0/16".into()),
                    table: Some(100),
                    ..Default::default()
                }],
                ..Default::default()
            };
            let Ok(cfg) = spec.validate("spec") else {
                assert!(!(RULE_PRIORITY_MIN..=RULE_PRIORITY_MAX).contains(&priority));
                continue;
            };
            accepted += 1;
            let m = rule_message(IpFamily::V4, &cfg.rules[0], own.route_protocol);
            let mut b = vec![0; m.buffer_len()];
            m.emit(&mut b);
            let parsed = RuleMessage::parse(&b[..]).unwrap();
            let (_, rule, protocol) = rule_from(&parsed).unwrap();
            assert_eq!(rule, cfg.rules[0]);
            assert!(own.owns(protocol), "priority {priority}");
        }
        assert_eq!(accepted, RULE_PRIORITY_MAX - RULE_PRIORITY_MIN + 1);
    }
}
