//! Validation: wire form ([`RoutingSpec`]) → typed model ([`RoutingConfig`]).
//!
//! Validation never stops at the first problem: it walks the whole spec and returns
//! every [`FieldError`] it finds, each with its path (`spec.routes[2].via`), in field
//! order.

mod route;
mod rule;

use std::{net::IpAddr, str::FromStr};

use ipnetwork::IpNetwork;

use route::validate_route;
use rule::validate_rule;

use crate::{
    error::{Error, FieldError, Result},
    model::{
        HostAddress, IfName, IpFamily, Route, RoutingConfig, TABLE_DEFAULT, TABLE_LOCAL,
        TABLE_MAIN, Vlan, VlanProtocol,
    },
    spec::{RoutingSpec, VlanSpec},
};

/// Collects problems under a path prefix.
#[derive(Debug, Default)]
pub(crate) struct Problems {
    pub(crate) list: Vec<FieldError>,
}

impl Problems {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.list.push(FieldError::new(path, message));
    }

    pub(crate) fn finish<T>(self, value: T) -> Result<T> {
        if self.list.is_empty() {
            Ok(value)
        } else {
            Err(Error::Invalid(self.list))
        }
    }
}

impl RoutingSpec {
    /// Validates the spec and returns its typed form, or every problem found. `path` is
    /// the prefix for field paths, usually `"spec"`.
    ///
    /// Items that appear twice with the same identity and content are kept once; the
    /// same identity with different content is an error naming both entries.
    ///
    /// # Errors
    /// [`Error::Invalid`] with one [`FieldError`] per problem.
    ///
    /// # Examples
    /// ```
    /// use netpolicy_core::spec::{RouteSpec, RoutingSpec};
    ///
    /// let spec = RoutingSpec {
    ///     routes: vec![RouteSpec { to: "10.0.0.1/24".into(), dev: Some("eth0".into()), ..Default::default() }],
    ///     ..Default::default()
    /// };
    /// let err = spec.validate("spec").unwrap_err();
    /// assert_eq!(err.field_errors()[0].path, "spec.routes[0].to");
    /// assert!(err.to_string().contains("did you mean 10.0.0.0/24?"));
    /// ```
    pub fn validate(&self, path: &str) -> Result<RoutingConfig> {
        let mut p = Problems::default();
        let mut vlans: Vec<(usize, Vlan)> = Vec::new();
        for (i, v) in self.vlans.iter().enumerate() {
            if let Some(v) = validate_vlan(v, &format!("{path}.vlans[{i}]"), &mut p) {
                vlans.push((i, v));
            }
        }
        let mut routes = Vec::new();
        for (i, r) in self.routes.iter().enumerate() {
            if let Some(r) = validate_route(r, &format!("{path}.routes[{i}]"), &mut p) {
                routes.push((i, r));
            }
        }
        let vlan_names: std::collections::BTreeSet<&IfName> =
            vlans.iter().map(|(_, v)| &v.name).collect();
        let mut addresses = Vec::new();
        for (i, a) in self.addresses.iter().enumerate() {
            let at = format!("{path}.addresses[{i}]");
            let dev = ifname(&a.dev, &format!("{at}.dev"), &mut p);
            if let Some(d) = &dev
                && vlan_names.contains(d)
            {
                p.push(
                    format!("{at}.dev"),
                    format!(
                        "{d} is a VLAN of this object: give its addresses in its \
                         vlans[].addresses"
                    ),
                );
                continue;
            }
            let address = interface_address(&a.address, &format!("{at}.address"), &mut p);
            if a.local_route == Some(false)
                && let Some(net) = address
                && net.prefix() != if net.is_ipv4() { 32 } else { 128 }
            {
                // Only a host address's local route is its own: a prefix on `lo`
                // has a second one for the whole prefix.
                p.push(
                    format!("{at}.localRoute"),
                    format!(
                        "false needs a host address (/32 or /128), not {net}: only a \
                         host address has exactly one local route to remove"
                    ),
                );
                continue;
            }
            if let (Some(dev), Some(address)) = (dev, address) {
                addresses.push((
                    i,
                    HostAddress {
                        dev,
                        address,
                        local_route: a.local_route.unwrap_or(true),
                    },
                ));
            }
        }
        let mut rules = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            if let Some(r) = validate_rule(r, &format!("{path}.rules[{i}]"), &mut p) {
                rules.push((i, r));
            }
        }
        let mut hard = Vec::new();
        for (i, t) in self.table_hard_sync.iter().enumerate() {
            let at = format!("{path}.tableHardSync[{i}]");
            match *t {
                0 => p.push(at, "table 0 is not a routing table"),
                TABLE_MAIN | TABLE_DEFAULT | TABLE_LOCAL => p.push(
                    at,
                    format!(
                        "table {t} is managed by the kernel and other tools; hard-syncing it \
                         would delete routes the node needs"
                    ),
                ),
                t => hard.push(t),
            }
        }
        hard.sort_unstable();
        hard.dedup();

        let vlans = dedup_by_identity(
            vlans,
            |v| v.name.clone(),
            &format!("{path}.vlans"),
            "interface name",
            &mut p,
        );
        let routes = dedup_by_identity(
            routes,
            Route::key,
            &format!("{path}.routes"),
            "table, destination and metric",
            &mut p,
        );
        let addresses = dedup_by_identity(
            addresses,
            |a: &HostAddress| (a.dev.clone(), a.address),
            &format!("{path}.addresses"),
            "link and address",
            &mut p,
        );
        let rules = dedup_by_identity(
            rules,
            |r| r.key.clone(),
            &format!("{path}.rules"),
            "priority and selector",
            &mut p,
        );
        // Field order: the spec's own field order, then index order within a list.
        let prefix_len = path.len() + 1;
        let section = |path: &str| {
            ["vlans", "routes", "addresses", "rules", "tableHardSync"]
                .iter()
                .position(|f| {
                    path.get(prefix_len..)
                        .is_some_and(|rest| rest.starts_with(f))
                })
                .unwrap_or(usize::MAX)
        };
        p.list.sort_by(|a, b| {
            section(&a.path)
                .cmp(&section(&b.path))
                .then_with(|| natural_path_cmp(&a.path, &b.path))
        });
        p.finish(RoutingConfig {
            vlans,
            routes,
            addresses,
            rules,
            table_hard_sync: hard,
        })
    }
}

/// Sorts by identity, drops exact duplicates, reports same-identity/different-content.
fn dedup_by_identity<T: Eq, K: Ord>(
    mut items: Vec<(usize, T)>,
    key: impl Fn(&T) -> K,
    path: &str,
    what: &str,
    p: &mut Problems,
) -> Vec<T> {
    items.sort_by(|a, b| key(&a.1).cmp(&key(&b.1)).then(a.0.cmp(&b.0)));
    let mut out: Vec<(usize, T)> = Vec::with_capacity(items.len());
    for (i, item) in items {
        match out.last() {
            Some((j, prev)) if key(prev) == key(&item) => {
                if *prev != item {
                    p.push(
                        format!("{path}[{i}]"),
                        format!(
                            "has the same {what} as {path}[{j}] but different content; \
                             one object cannot say both"
                        ),
                    );
                }
            }
            _ => out.push((i, item)),
        }
    }
    out.into_iter().map(|(_, t)| t).collect()
}

/// Orders `a[10]` after `a[9]`.
fn natural_path_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn parts(s: &str) -> Vec<Result<u64, &str>> {
        s.split(['[', ']'])
            .map(|x| x.parse::<u64>().map_err(|_| x))
            .collect()
    }
    parts(a).cmp(&parts(b))
}

pub(crate) fn ifname(s: &str, path: &str, p: &mut Problems) -> Option<IfName> {
    IfName::new(s).map_err(|m| p.push(path, m)).ok()
}

fn addr(s: &str, path: &str, p: &mut Problems) -> Option<IpAddr> {
    match IpAddr::from_str(s.trim()) {
        Ok(a) => Some(a),
        Err(_) => {
            let hint = if s.contains('/') {
                " (an address here, not a prefix: drop the /length)"
            } else {
                ""
            };
            p.push(path, format!("{s:?} is not an IPv4 or IPv6 address{hint}"));
            None
        }
    }
}

/// An address with a prefix length, as on an interface: host bits allowed.
fn interface_address(s: &str, path: &str, p: &mut Problems) -> Option<IpNetwork> {
    if !s.contains('/') {
        p.push(
            path,
            format!("{s:?} needs a prefix length, for example {s}/24 or {s}/64"),
        );
        return None;
    }
    match IpNetwork::from_str(s.trim()) {
        Ok(n) => Some(n),
        Err(_) => {
            p.push(
                path,
                format!("{s:?} is not an address with prefix length (10.10.0.5/24, fd00::5/64)"),
            );
            None
        }
    }
}

/// A prefix (a destination or source network): host bits must be clear.
pub(crate) fn prefix(s: &str, path: &str, p: &mut Problems) -> Option<IpNetwork> {
    let s = s.trim();
    if s == "default" {
        return IpNetwork::new(crate::model::unspecified(IpFamily::V4), 0).ok();
    }
    let net = match IpNetwork::from_str(s) {
        Ok(n) => n,
        Err(_) => {
            p.push(
                path,
                format!("{s:?} is not a prefix (10.20.0.0/16, fd00:20::/48 or default)"),
            );
            return None;
        }
    };
    network_prefix(net).map_err(|m| p.push(path, m)).ok()
}

pub use crate::model::network_prefix;

fn validate_vlan(v: &VlanSpec, path: &str, p: &mut Problems) -> Option<Vlan> {
    let before = p.list.len();
    let link = ifname(&v.link, &format!("{path}.link"), p);
    if !(1..=4094).contains(&v.id) {
        p.push(
            format!("{path}.id"),
            format!("VLAN id {} is outside 1..4094", v.id),
        );
    }
    let name = match &v.name {
        Some(n) => ifname(n, &format!("{path}.name"), p),
        None => {
            let n = format!("{}.{}", v.link, v.id);
            match IfName::new(&n) {
                Ok(n) => Some(n),
                Err(_) if link.is_some() => {
                    p.push(
                        format!("{path}.name"),
                        format!(
                            "the default name {n:?} is longer than 15 bytes; set a shorter name"
                        ),
                    );
                    None
                }
                Err(_) => None,
            }
        }
    };
    let protocol = match v.protocol.as_deref() {
        None => VlanProtocol::Dot1Q,
        Some(s) if s.eq_ignore_ascii_case("802.1q") => VlanProtocol::Dot1Q,
        Some(s) if s.eq_ignore_ascii_case("802.1ad") => VlanProtocol::Dot1AD,
        Some(s) => {
            p.push(
                format!("{path}.protocol"),
                format!("{s:?} is not a VLAN protocol; use 802.1Q or 802.1ad"),
            );
            VlanProtocol::Dot1Q
        }
    };
    if let Some(m) = v.mtu
        && !(68..=65535).contains(&m)
    {
        p.push(
            format!("{path}.mtu"),
            format!("MTU {m} is outside 68..65535"),
        );
    }
    let mut addresses = Vec::new();
    for (i, a) in v.addresses.iter().enumerate() {
        if let Some(a) = interface_address(a, &format!("{path}.addresses[{i}]"), p) {
            addresses.push(a);
        }
    }
    addresses.sort_unstable();
    addresses.dedup();
    if p.list.len() != before {
        return None;
    }
    Some(Vlan {
        name: name?,
        link: link?,
        id: u16::try_from(v.id).ok()?,
        protocol,
        mtu: v.mtu,
        addresses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RuleAction;
    use crate::spec::{AddressSpec, NextHopSpec, RouteSpec, RuleSpec, VlanSpec};

    fn errors(spec: RoutingSpec) -> Vec<(String, String)> {
        match spec.validate("spec") {
            Ok(c) => panic!("expected errors, got {c:?}"),
            Err(e) => e
                .field_errors()
                .iter()
                .map(|f| (f.path.clone(), f.message.clone()))
                .collect(),
        }
    }

    fn route(to: &str) -> RouteSpec {
        RouteSpec {
            to: to.into(),
            dev: Some("eth0".into()),
            ..Default::default()
        }
    }

    #[test]
    fn rule_ports_the_kernel_refuses_are_refused_here() {
        let rule = |sport: &str| RuleSpec {
            priority: 100,
            table: Some(100),
            ip_proto: Some("tcp".into()),
            sport: Some(sport.into()),
            ..Default::default()
        };
        for bad in ["1024-65535", "0-80", "0", "65535"] {
            let e = errors(RoutingSpec {
                rules: vec![rule(bad)],
                ..Default::default()
            });
            assert_eq!(e.len(), 1, "{bad}: {e:?}");
            assert_eq!(e[0].0, "spec.rules[0].sport");
            assert!(e[0].1.contains("1..65534"), "{}", e[0].1);
        }
        let ok = RoutingSpec {
            rules: vec![rule("1-65534")],
            ..Default::default()
        };
        assert!(ok.validate("spec").is_ok());
    }

    #[test]
    fn route_types_take_only_the_fields_the_kernel_keeps() {
        let ok = RoutingSpec {
            routes: vec![
                RouteSpec {
                    type_: Some("local".into()),
                    to: "20.0.0.1/32".into(),
                    dev: Some("lo".into()),
                    table: Some(100),
                    ..Default::default()
                },
                RouteSpec {
                    type_: Some("blackhole".into()),
                    to: "10.66.0.0/16".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let cfg = ok.validate("spec").unwrap();
        let shown: Vec<String> = cfg.routes.iter().map(ToString::to_string).collect();
        assert!(
            shown.iter().any(|r| r.starts_with("local 20.0.0.1/32")),
            "{shown:?}"
        );
        let e = errors(RoutingSpec {
            routes: vec![
                RouteSpec {
                    type_: Some("anycast".into()),
                    ..route("10.0.0.0/8")
                },
                RouteSpec {
                    type_: Some("local".into()),
                    to: "10.1.0.0/16".into(),
                    ..Default::default()
                },
                RouteSpec {
                    type_: Some("blackhole".into()),
                    via: Some("192.0.2.1".into()),
                    ..route("10.2.0.0/16")
                },
            ],
            ..Default::default()
        });
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.routes[0].type",
                "spec.routes[1].dev",
                "spec.routes[2].dev",
                "spec.routes[2].type"
            ],
            "{e:?}"
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_field_path() {
        let e = errors(RoutingSpec {
            vlans: vec![VlanSpec {
                link: "eth0".into(),
                id: 5000,
                name: Some("a-very-long-interface".into()),
                ..Default::default()
            }],
            routes: vec![
                route("10.0.0.0/8"),
                route("10.0.0.1/24"),
                RouteSpec {
                    via: Some("fd00::1".into()),
                    ..route("10.1.0.0/16")
                },
            ],
            rules: vec![RuleSpec {
                priority: 0,
                table: Some(100),
                ..Default::default()
            }],
            ..Default::default()
        });
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.vlans[0].id",
                "spec.vlans[0].name",
                "spec.routes[1].to",
                "spec.routes[2].via",
                "spec.rules[0].priority"
            ]
        );
        assert_eq!(
            e[2].1,
            "10.0.0.1/24 has host bits set; did you mean 10.0.0.0/24?"
        );
        assert!(e[0].1.contains("5000"), "{}", e[0].1);
        assert!(
            e[3].1.contains("IPv6") && e[3].1.contains("IPv4"),
            "{}",
            e[3].1
        );
    }

    #[test]
    fn ipv6_prefixes_are_canonicalised_and_checked_for_host_bits() {
        let c = RoutingSpec {
            routes: vec![route("FD00:0:0:0::/48")],
            ..Default::default()
        }
        .validate("spec")
        .unwrap();
        assert_eq!(c.routes[0].to.to_string(), "fd00::/48");
        let e = errors(RoutingSpec {
            routes: vec![route("fd00::1/64")],
            ..Default::default()
        });
        assert_eq!(
            e[0].1,
            "fd00::1/64 has host bits set; did you mean fd00::/64?"
        );
    }

    #[test]
    fn default_means_the_ipv4_default_route_and_hints_for_ipv6() {
        let c = RoutingSpec {
            routes: vec![RouteSpec {
                to: "default".into(),
                via: Some("10.0.0.1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }
        .validate("spec")
        .unwrap();
        assert_eq!(c.routes[0].to.to_string(), "0.0.0.0/0");
        let e = errors(RoutingSpec {
            routes: vec![RouteSpec {
                to: "default".into(),
                via: Some("fd00::1".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert!(e[0].1.contains("write ::/0"), "{}", e[0].1);
    }

    #[test]
    fn nexthops_cannot_be_combined_with_via_or_dev() {
        let e = errors(RoutingSpec {
            routes: vec![RouteSpec {
                to: "10.0.0.0/8".into(),
                via: Some("10.1.0.1".into()),
                nexthops: vec![
                    NextHopSpec {
                        via: Some("10.1.0.2".into()),
                        ..Default::default()
                    },
                    NextHopSpec {
                        via: Some("10.1.0.3".into()),
                        weight: Some(300),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(e[0].0, "spec.routes[0].nexthops");
        assert_eq!(e[1].0, "spec.routes[0].nexthops[1].weight");
    }

    #[test]
    fn reserved_tables_are_refused() {
        for t in [0, 253, 255] {
            let e = errors(RoutingSpec {
                routes: vec![RouteSpec {
                    table: Some(t),
                    ..route("10.0.0.0/8")
                }],
                ..Default::default()
            });
            assert_eq!(e[0].0, "spec.routes[0].table", "table {t}");
        }
        let e = errors(RoutingSpec {
            table_hard_sync: vec![100, 254],
            ..Default::default()
        });
        assert_eq!(e[0].0, "spec.tableHardSync[1]");
    }

    #[test]
    fn rule_fields_are_parsed_and_bad_ones_named() {
        let ok = RoutingSpec {
            rules: vec![RuleSpec {
                priority: 1000,
                from: Some("10.10.0.0/24".into()),
                fwmark: Some("0x10/0xff".into()),
                ip_proto: Some("tcp".into()),
                sport: Some("20000-21000".into()),
                dport: Some("443".into()),
                table: Some(100),
                ..Default::default()
            }],
            ..Default::default()
        }
        .validate("spec")
        .unwrap();
        let r = &ok.rules[0];
        assert_eq!(r.key.fwmark.unwrap().to_string(), "0x10/0xff");
        assert_eq!(r.key.sport.unwrap().to_string(), "20000-21000");
        assert_eq!(r.action, RuleAction::Lookup(100));

        let e = errors(RoutingSpec {
            rules: vec![RuleSpec {
                priority: 32766,
                from: Some("10.0.0.0/8".into()),
                to: Some("fd00::/8".into()),
                fwmark: Some("0x1ff/0xff".into()),
                ip_proto: Some("icmp".into()),
                dport: Some("3000-2000".into()),
                action: Some("blackhole".into()),
                table: Some(100),
                ..Default::default()
            }],
            ..Default::default()
        });
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.rules[0].dport",
                "spec.rules[0].dport",
                "spec.rules[0].fwmark",
                "spec.rules[0].priority",
                "spec.rules[0].table",
                "spec.rules[0].to",
            ]
        );
        assert!(e.iter().any(|(_, m)| m.contains("did you mean 2000-3000?")));
    }

    #[test]
    fn lookup_needs_a_table() {
        let e = errors(RoutingSpec {
            rules: vec![RuleSpec {
                priority: 10,
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(
            e,
            [(
                "spec.rules[0].table".into(),
                "action lookup needs a table".into()
            )]
        );
    }

    #[test]
    fn same_identity_twice_in_one_object_is_an_error_unless_identical() {
        let c = RoutingSpec {
            routes: vec![route("10.0.0.0/8"), route("10.0.0.0/8")],
            ..Default::default()
        }
        .validate("spec")
        .unwrap();
        assert_eq!(c.routes.len(), 1);
        let e = errors(RoutingSpec {
            routes: vec![
                route("10.0.0.0/8"),
                RouteSpec {
                    dev: Some("eth1".into()),
                    ..route("10.0.0.0/8")
                },
            ],
            ..Default::default()
        });
        assert_eq!(e[0].0, "spec.routes[1]");
        assert!(e[0].1.contains("spec.routes[0]"));
    }

    #[test]
    fn vlan_defaults_and_name_length() {
        let c = RoutingSpec {
            vlans: vec![VlanSpec {
                link: "eth0".into(),
                id: 100,
                protocol: Some("802.1ad".into()),
                addresses: vec!["10.10.0.5/24".into(), "fd00::5/64".into()],
                ..Default::default()
            }],
            ..Default::default()
        }
        .validate("spec")
        .unwrap();
        assert_eq!(c.vlans[0].name.as_str(), "eth0.100");
        assert_eq!(c.vlans[0].protocol, VlanProtocol::Dot1AD);
        let e = errors(RoutingSpec {
            vlans: vec![VlanSpec {
                link: "enp0s31f6abc".into(),
                id: 4000,
                addresses: vec!["10.10.0.5".into()],
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(e[0].0, "spec.vlans[0].addresses[0]");
        assert_eq!(e[1].0, "spec.vlans[0].name");
    }

    #[test]
    fn an_address_names_a_link_and_an_address_with_prefix_length() {
        let spec = RoutingSpec {
            vlans: vec![VlanSpec {
                link: "eth0".into(),
                id: 7,
                ..Default::default()
            }],
            addresses: vec![
                AddressSpec {
                    dev: "lo".into(),
                    address: "203.0.113.7".into(),
                    ..Default::default()
                },
                AddressSpec {
                    dev: "eth0.7".into(),
                    address: "10.7.0.2/24".into(),
                    ..Default::default()
                },
                AddressSpec {
                    dev: "a-name-far-too-long".into(),
                    address: "10.7.0.3/24".into(),
                    ..Default::default()
                },
                AddressSpec {
                    dev: "lo".into(),
                    address: "203.0.113.8/32".into(),
                    ..Default::default()
                },
                AddressSpec {
                    dev: "lo".into(),
                    address: "203.0.113.8/32".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let e: Vec<String> = spec
            .validate("spec")
            .unwrap_err()
            .field_errors()
            .iter()
            .map(|f| f.path.clone())
            .collect();
        assert_eq!(
            e,
            [
                "spec.addresses[0].address",
                "spec.addresses[1].dev",
                "spec.addresses[2].dev"
            ]
        );
    }

    #[test]
    fn canonical_rendering_validates_back_to_the_same_config() {
        let spec = RoutingSpec {
            vlans: vec![VlanSpec {
                link: "eth0".into(),
                id: 7,
                mtu: Some(9000),
                addresses: vec!["10.7.0.2/24".into()],
                ..Default::default()
            }],
            routes: vec![RouteSpec {
                to: "fd00:20::/48".into(),
                nexthops: vec![
                    NextHopSpec {
                        via: Some("fd00::1".into()),
                        dev: Some("eth0".into()),
                        weight: Some(3),
                    },
                    NextHopSpec {
                        via: Some("fd00::2".into()),
                        ..Default::default()
                    },
                ],
                table: Some(100),
                metric: Some(10),
                ..Default::default()
            }],
            rules: vec![RuleSpec {
                priority: 5,
                iif: Some("eth0".into()),
                ip_proto: Some("99".into()),
                action: Some("prohibit".into()),
                invert: true,
                ..Default::default()
            }],
            addresses: vec![AddressSpec {
                dev: "lo".into(),
                address: "2001:DB8::7/128".into(),
                ..Default::default()
            }],
            table_hard_sync: vec![100],
        };
        let c = spec.validate("spec").unwrap();
        assert_eq!(c.addresses[0].address.to_string(), "2001:db8::7/128");
        let again = RoutingSpec::from_config(&c).validate("spec").unwrap();
        assert_eq!(c, again);
    }
}
