//! The agent's NodeNetworkConfig → kernel plan: a routing spec and a node's observed
//! state (netpolicy's own items and foreign ones), both decoded from the input bytes
//! over small pools of values (IPv4 and IPv6, tables, priorities, links, edge cases).
//! Validation may refuse the spec (never panic); a valid spec's plan must never panic,
//! must be deterministic, and must never delete or change a foreign object — except
//! the documented opt-in: routes in a `tableHardSync` table, and rules that look such a
//! table up.

use std::collections::BTreeSet;

use netpolicy_core::{
    model::{IpFamily, RoutingConfig},
    plan::{Observed, ObservedAddress, ObservedRoute, ObservedRule, ObservedVlan, Op, plan},
    spec::RoutingSpec,
};
use serde_json::{Value, json};

/// netpolicy's protocol number on routes, rules and addresses.
const OURS: u8 = 203;

const PREFIXES: [&str; 10] = [
    "10.20.0.0/16",
    "10.20.0.0/24",
    "0.0.0.0/0",
    "192.0.2.7/32",
    "10.20.1.0/24",
    "fd00::/64",
    "::/0",
    "2001:db8::7/128",
    "10.20.0.1/16",
    "fd00:1::/48",
];
const GATEWAYS: [&str; 6] = [
    "192.0.2.1",
    "192.0.2.2",
    "2001:db8::1",
    "fe80::1",
    "10.20.0.1",
    "bad",
];
const LINKS: [&str; 5] = ["eth0", "lo", "vlan100", "v0", "vlan-200"];
const TABLES: [u32; 6] = [100, 101, 254, 255, 1, 4_294_967_295];
const SCOPES: [&str; 5] = ["global", "link", "host", "site", "nowhere"];
const ADDRESSES: [&str; 6] = [
    "192.0.2.50/24",
    "10.30.0.1/32",
    "2001:db8::50/64",
    "fd00::1/128",
    "192.0.2.50/32",
    "1.2.3.4",
];

/// Bytes read one at a time, 0 when exhausted.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn pick<'p, T>(&mut self, from: &'p [T]) -> &'p T {
        &from[usize::from(self.next()) % from.len()]
    }

    fn maybe(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

fn route(b: &mut Bytes<'_>) -> Value {
    let mut r = json!({"to": b.pick(&PREFIXES)});
    let shape = b.next();
    if shape & 1 != 0 {
        r["via"] = json!(b.pick(&GATEWAYS));
    }
    if shape & 2 != 0 {
        r["dev"] = json!(b.pick(&LINKS));
    }
    if shape & 4 != 0 {
        r["table"] = json!(b.pick(&TABLES));
    }
    if shape & 8 != 0 {
        r["metric"] = json!(u32::from(b.next()) * 100);
    }
    if shape & 16 != 0 {
        r["scope"] = json!(b.pick(&SCOPES));
    }
    if shape & 32 != 0 {
        r["onlink"] = json!(true);
    }
    if shape & 64 != 0 {
        r["nexthops"] =
            json!([{"via": b.pick(&GATEWAYS)}, {"via": b.pick(&GATEWAYS), "weight": b.next()}]);
    }
    if shape & 128 != 0 {
        r["type"] = json!(b.pick(&["unicast", "blackhole", "unreachable", "prohibit", "local"]));
    }
    r
}

fn rule(b: &mut Bytes<'_>) -> Value {
    let mut r = json!({"priority": u32::from(b.next()) * 130});
    let shape = b.next();
    if shape & 1 != 0 {
        r["from"] = json!(b.pick(&PREFIXES));
    }
    if shape & 2 != 0 {
        r["to"] = json!(b.pick(&PREFIXES));
    }
    if shape & 4 != 0 {
        r["iif"] = json!(b.pick(&LINKS));
    }
    if shape & 8 != 0 {
        r["fwmark"] = json!(b.pick(&["0x10/0xff", "16", "0xzz"]));
    }
    if shape & 16 != 0 {
        r["action"] = json!(b.pick(&["lookup", "blackhole", "unreachable", "goto"]));
    } else {
        r["table"] = json!(b.pick(&TABLES));
    }
    if shape & 32 != 0 {
        r["invert"] = json!(true);
    }
    if shape & 64 != 0 {
        r["dport"] = json!(b.pick(&["53", "1000-2000", "70000"]));
        r["ipProto"] = json!(b.pick(&["udp", "tcp", "6"]));
    }
    r
}

fn spec(b: &mut Bytes<'_>) -> Value {
    let n = b.next();
    let routes: Vec<Value> = (0..n % 6).map(|_| route(b)).collect();
    let rules: Vec<Value> = (0..(n >> 3) % 4).map(|_| rule(b)).collect();
    let addresses: Vec<Value> = (0..(n >> 5) % 3)
        .map(|_| json!({"dev": b.pick(&LINKS), "address": b.pick(&ADDRESSES), "localRoute": b.maybe()}))
        .collect();
    let vlans: Vec<Value> = (0..u8::from(b.maybe()))
        .map(|_| {
            json!({"link": b.pick(&LINKS), "id": u32::from(b.next()) * 17,
                   "addresses": [b.pick(&ADDRESSES)], "mtu": 1400 + u32::from(b.next())})
        })
        .collect();
    let hard: Vec<u32> = if b.maybe() {
        vec![*b.pick(&TABLES)]
    } else {
        vec![]
    };
    json!({"routes": routes, "rules": rules, "addresses": addresses, "vlans": vlans,
           "tableHardSync": hard})
}

fn validated(v: &Value) -> Option<RoutingConfig> {
    let s: RoutingSpec = serde_json::from_value(v.clone()).ok()?;
    s.validate("spec").ok()
}

/// The node's state: items of a second decoded spec, each owned or foreign (with
/// another protocol) as the bytes say.
fn observed(b: &mut Bytes<'_>) -> Observed {
    let Some(c) = validated(&spec(b)) else {
        return Observed::default();
    };
    let foreign = |b: &mut Bytes<'_>| -> (bool, u8) {
        if b.maybe() {
            (true, OURS)
        } else {
            (false, *b.pick(&[4u8, 186, 2, 16]))
        }
    };
    let mut o = Observed::default();
    for r in c.routes {
        let (owned, protocol) = foreign(b);
        o.routes.push(ObservedRoute {
            route: r,
            owned,
            protocol,
        });
    }
    for r in c.rules {
        let (owned, protocol) = foreign(b);
        let family = r.key.family().unwrap_or(IpFamily::V4);
        o.rules.push(ObservedRule {
            family,
            rule: r,
            owned,
            protocol,
        });
    }
    for a in c.addresses {
        let owned = b.maybe();
        o.addresses.push(ObservedAddress { address: a, owned });
    }
    for v in c.vlans {
        let owned = b.maybe();
        o.vlans.push(ObservedVlan {
            vlan: v,
            up: b.maybe(),
            owned,
        });
    }
    o
}

/// One input: panics on a broken invariant (a finding).
pub fn run(data: &[u8]) {
    let mut b = Bytes(data);
    let Some(desired) = validated(&spec(&mut b)) else {
        return;
    };
    let observed = observed(&mut b);
    let p = plan(&observed, &desired);
    assert_eq!(p, plan(&observed, &desired), "the plan is deterministic");
    let hard: BTreeSet<u32> = desired.table_hard_sync.iter().copied().collect();
    let foreign_routes: Vec<&ObservedRoute> = observed.routes.iter().filter(|r| !r.owned).collect();
    let foreign_links: BTreeSet<&str> = observed
        .vlans
        .iter()
        .filter(|v| !v.owned)
        .map(|v| v.vlan.name.as_str())
        .collect();
    for op in &p.ops {
        match op {
            Op::DeleteRoute { route, protocol } => {
                assert!(
                    *protocol == OURS || hard.contains(&route.table),
                    "deletes a foreign route outside a hard-synced table: {op:?}"
                );
            }
            Op::ReplaceRoute(r) => {
                assert!(
                    hard.contains(&r.table)
                        || !foreign_routes.iter().any(|f| f.route.key() == r.key()),
                    "replaces a foreign route outside a hard-synced table: {op:?}"
                );
            }
            Op::DeleteRule { rule, protocol, .. } => {
                assert!(
                    *protocol == OURS || rule.action.table().is_some_and(|t| hard.contains(&t)),
                    "deletes a foreign rule: {op:?}"
                );
            }
            Op::ReplaceRule { old, .. } => {
                assert!(
                    observed.rules.iter().any(|r| r.owned && r.rule == *old),
                    "replaces a rule it does not own: {op:?}"
                );
            }
            Op::DeleteAddress { dev, address } => {
                let own = observed
                    .addresses
                    .iter()
                    .any(|a| a.owned && a.address.key() == (dev, address))
                    || observed
                        .vlans
                        .iter()
                        .any(|v| v.owned && v.vlan.name == *dev);
                assert!(own, "deletes an address it does not own: {op:?}");
            }
            Op::DeleteLink(name) | Op::SetUp(name) | Op::SetMtu { dev: name, .. } => {
                assert!(
                    !foreign_links.contains(name.as_str()),
                    "changes a link it did not create: {op:?}"
                );
            }
            _ => {}
        }
    }
}
