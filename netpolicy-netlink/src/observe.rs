//! Reading the kernel: links, addresses, routes and rules dumped and turned into what
//! the planner compares with the desired state.

use super::*;

impl Adapter {
    pub(crate) fn refresh_links(&mut self) -> Result<Vec<LinkMessage>> {
        let msgs = self
            .conn
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        let mut links = Links::default();
        let mut out = Vec::new();
        for m in msgs {
            if let RouteNetlinkMessage::NewLink(l) = m {
                if let Some(name) = l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                }) {
                    links.names.insert(l.header.index, name.clone());
                    links.index.insert(name, l.header.index);
                }
                out.push(l);
            }
        }
        self.links = links;
        Ok(out)
    }

    pub(crate) fn dump_family<T>(
        &mut self,
        make: impl Fn(AddressFamily) -> RouteNetlinkMessage,
        pick: impl Fn(RouteNetlinkMessage) -> Option<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        for f in [AddressFamily::Inet, AddressFamily::Inet6] {
            for m in self.conn.dump(make(f))? {
                out.extend(pick(m));
            }
        }
        Ok(out)
    }

    /// Reads what the namespace has that matters for `desired`: every owned object,
    /// plus foreign routes in hard-synced tables and foreign objects that share an
    /// identity with a desired item.
    ///
    /// # Errors
    /// A dump failed.
    pub fn observe(&mut self, desired: &RoutingConfig) -> Result<Observed> {
        let link_msgs = self.refresh_links()?;
        let addrs = self.dump_family(
            |f| {
                let mut m = AddressMessage::default();
                m.header.family = f;
                RouteNetlinkMessage::GetAddress(m)
            },
            |m| match m {
                RouteNetlinkMessage::NewAddress(a) => Some(a),
                _ => None,
            },
        )?;
        let wanted_links: BTreeSet<&str> = desired.vlans.iter().map(|v| v.name.as_str()).collect();
        let mut observed = Observed::default();
        for l in &link_msgs {
            let Some(v) = self.vlan_of(l, &addrs) else {
                // Not a VLAN (or not one the model can describe): if a desired VLAN
                // has its name, that VLAN is refused and this link left alone.
                if let Some(name) = link_name(l).filter(|n| wanted_links.contains(n))
                    && let Ok(name) = IfName::new(name)
                {
                    observed.other_links.push(name);
                }
                continue;
            };
            let owned = l
                .attributes
                .iter()
                .any(|a| matches!(a, LinkAttribute::IfAlias(s) if s == LINK_ALIAS));
            if owned || wanted_links.contains(v.name.as_str()) {
                observed.vlans.push(ObservedVlan {
                    vlan: v,
                    up: l.header.flags.contains(LinkFlags::Up),
                    owned,
                });
            }
        }
        let links = self.links.clone();
        let route_msgs = self.dump_family(
            |f| {
                let mut m = RouteMessage::default();
                m.header.address_family = f;
                RouteNetlinkMessage::GetRoute(m)
            },
            |m| match m {
                RouteNetlinkMessage::NewRoute(r) => Some(r),
                _ => None,
            },
        )?;
        // The kernel's own local routes of host addresses (table local), by link.
        let local_routes: BTreeSet<(u32, std::net::IpAddr)> = route_msgs
            .iter()
            .filter_map(codec::local_route_of)
            .collect();
        let routes = route_msgs
            .iter()
            .filter_map(|r| codec::route_from(r, &links));
        // Addresses on links netpolicy did not create: ours by their address protocol;
        // someone else's only when a desired address has the identity. Addresses of the
        // VLANs above are theirs.
        let vlan_names: BTreeSet<&IfName> = observed.vlans.iter().map(|v| &v.vlan.name).collect();
        let wanted_addresses: BTreeSet<_> =
            desired.addresses.iter().map(HostAddress::key).collect();
        for a in &addrs {
            let Some(dev) = self
                .links
                .names
                .get(&a.header.index)
                .and_then(|n| IfName::new(n).ok())
            else {
                continue;
            };
            if vlan_names.contains(&dev) {
                continue;
            }
            let Some((address, protocol)) = codec::address_from(a) else {
                continue;
            };
            let address = HostAddress {
                dev,
                address,
                local_route: local_routes.contains(&(a.header.index, address.ip())),
            };
            let owned = protocol == self.own.route_protocol;
            if owned || wanted_addresses.contains(&address.key()) {
                observed.addresses.push(ObservedAddress { address, owned });
            }
        }
        let hard: BTreeSet<u32> = desired.table_hard_sync.iter().copied().collect();
        let wanted_routes: std::collections::BTreeMap<_, &Route> =
            desired.routes.iter().map(|r| (r.key(), r)).collect();
        for (mut route, protocol) in routes {
            if let Some(want) = wanted_routes.get(&route.key()) {
                normalize_resolved_devices(&mut route, want);
            }
            let owned = self.own.owns(protocol);
            if owned || hard.contains(&route.table) || wanted_routes.contains_key(&route.key()) {
                observed.routes.push(ObservedRoute {
                    route,
                    owned,
                    protocol,
                });
            }
        }
        let rules = self.dump_family(
            |f| {
                let mut m = RuleMessage::default();
                m.header.family = f;
                RouteNetlinkMessage::GetRule(m)
            },
            |m| match m {
                RouteNetlinkMessage::NewRule(r) => codec::rule_from(&r),
                _ => None,
            },
        )?;
        let wanted_rules: BTreeSet<_> = desired.rules.iter().map(|r| r.key.clone()).collect();
        for (family, rule, protocol) in rules {
            let owned = self.own.owns(protocol);
            let looks_up_hard = rule.action.table().is_some_and(|t| hard.contains(&t));
            if owned || looks_up_hard || wanted_rules.contains(&rule.key) {
                observed.rules.push(ObservedRule {
                    family,
                    rule,
                    owned,
                    protocol,
                });
            }
        }
        Ok(observed)
    }

    pub(crate) fn vlan_of(&self, l: &LinkMessage, addrs: &[AddressMessage]) -> Option<Vlan> {
        let mut name = None;
        let mut parent = None;
        let mut mtu = None;
        let mut id = None;
        let mut protocol = VlanProtocol::Dot1Q;
        let mut is_vlan = false;
        for a in &l.attributes {
            match a {
                LinkAttribute::IfName(n) => name = Some(n.clone()),
                LinkAttribute::Link(p) => parent = Some(*p),
                LinkAttribute::Mtu(m) => mtu = Some(*m),
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        match i {
                            LinkInfo::Kind(InfoKind::Vlan) => is_vlan = true,
                            LinkInfo::Data(InfoData::Vlan(data)) => {
                                for d in data {
                                    match d {
                                        InfoVlan::Id(v) => id = Some(*v),
                                        InfoVlan::Protocol(
                                            netlink_packet_route::link::VlanProtocol::Ieee8021Ad,
                                        ) => protocol = VlanProtocol::Dot1AD,
                                        _ => {}
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if !is_vlan {
            return None;
        }
        let parent = self.links.names.get(&parent?)?;
        let addresses = addrs
            .iter()
            .filter(|a| a.header.index == l.header.index)
            .filter_map(|a| {
                let ip = a.attributes.iter().find_map(|x| match x {
                    AddressAttribute::Local(ip) => Some(*ip),
                    _ => None,
                });
                let ip = ip.or_else(|| {
                    a.attributes.iter().find_map(|x| match x {
                        AddressAttribute::Address(ip) => Some(*ip),
                        _ => None,
                    })
                })?;
                let net = IpNetwork::new(ip, a.header.prefix_len).ok()?;
                // Link-local IPv6 addresses are the kernel's, not ours.
                let link_local =
                    matches!(ip, std::net::IpAddr::V6(v) if (v.segments()[0] & 0xffc0) == 0xfe80);
                (!link_local).then_some(net)
            })
            .collect();
        Some(Vlan {
            name: IfName::new(&name?).ok()?,
            link: IfName::new(parent).ok()?,
            id: id?,
            protocol,
            mtu,
            addresses,
        })
    }
}

/// The kernel fills in the device of a gateway route (and of each gateway next hop);
/// when the desired route names no device, the resolved one is not a difference. A
/// scope written out that equals the kernel's default is the same as none.
pub(crate) fn normalize_resolved_devices(observed: &mut Route, desired: &Route) {
    // A desired scope spelled out that equals the default reads back as "default".
    if observed.scope.is_none()
        && desired
            .scope
            .is_some_and(|s| codec::is_default_scope(observed, s))
    {
        observed.scope = desired.scope;
    }
    if desired.dev.is_none() && observed.via.is_some() {
        observed.dev = None;
    }
    if observed.nexthops.len() == desired.nexthops.len() {
        for (o, d) in observed.nexthops.iter_mut().zip(&desired.nexthops) {
            if d.dev.is_none() && o.via.is_some() {
                o.dev = None;
            }
        }
    }
}

pub(crate) fn link_name(l: &LinkMessage) -> Option<&str> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.as_str()),
        _ => None,
    })
}
