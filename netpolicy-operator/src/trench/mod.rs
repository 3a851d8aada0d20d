//! The traffic-domain job: Meridio's kinds, handled by Meridio's own workloads
//! ([`meridio`], `dataPlane: meridio`, the default) or compiled into node routing
//! (`dataPlane: node`; docs/guides/traffic-domains.md). This module is pure: it groups the objects into
//! trenches ([`domains`]), checks Meridio's rules that the schema cannot state
//! ([`validate()`]), hands out table numbers and node addresses and keeps them across
//! passes ([`allocate()`]), and compiles a trench into one routing policy per attractor
//! node ([`compile`], [`policies`]). The controller ([`controller`]) writes what
//! [`allocate()`] hands out into the Trench's status; the routing job renders the
//! policies into NodeNetworkConfigs from that status, beside ClusterConfig and
//! NodeConfig items, through the same merge engine; `netpolicy plan` calls the same
//! functions.
//!
//! What a node of an attractor gets (source `Trench/<namespace>/<name>`):
//! - the attractor's interface: a VLAN (`interface.name`, id `vlanId` on `link`) with the
//!   node's address from the attractor's prefixes, or, untagged (`vlanId` 0), the address
//!   on `link` itself;
//! - the trench's table ([`TABLE_FIRST`]..=[`TABLE_LAST`]) with a default route per
//!   family via the attractor's static gateways (ECMP when several); each of its
//!   streams' tables delivers the attractor's VIPs to the node itself (`local <vip> dev
//!   lo`): traffic a flow selects is the node's, and no table sends inbound VIP traffic
//!   back to the gateways; traffic no flow selects is left to the node's own routing;
//! - each IPv4 host VIP (`/32`) as an address on `lo` without its kernel `local` route
//!   (`localRoute: false`): Linux sends from an IPv4 source only when it is one of the
//!   host's addresses, so without it a reply from the VIP has no route out; without
//!   the local route only what a flow selects is delivered. (IPv6 sends from any
//!   source; an IPv4 VIP wider than /32 gets no address: replies from it need one);
//! - a rule per VIP (`from <vip> lookup <trench table>`, priority [`VIP_RULE_PRIORITY`]):
//!   replies leave through the gateways;
//! - FIB rules per flow: for each VIP × protocol × source subnet × source ports ×
//!   destination ports, `to <vip> [from <subnet>] ipproto <p> [sport] [dport] lookup
//!   <stream table>`, at priority [`FLOW_RULE_FIRST`] + the flow's rank (higher
//!   `priority` first, then name), so a higher-priority flow matches first.

mod allocate;
pub(crate) mod controller;
pub(crate) mod meridio;
pub(crate) mod rollout;
mod validate;

pub(crate) use allocate::allocate;
pub(crate) use validate::validate;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use ipnetwork::IpNetwork;
use netpolicy_core::{
    merge::{NODE_NAME_LABEL, Policy, Source},
    selector::{Labels, Requirement, Selector},
    spec::{AddressSpec, IntOrString, NextHopSpec, RouteSpec, RoutingSpec, RuleSpec, VlanSpec},
};

use crate::{
    api::{
        Attractor, Conduit, Flow, Gateway, GatewayProtocol, Stream, TRENCH_LABEL, Trench,
        TrenchStatus, Vip,
    },
    k8s::InputError,
};

/// First routing table number a trench or stream gets.
pub(crate) const TABLE_FIRST: u32 = 20000;
/// Last routing table number a trench or stream gets.
pub(crate) const TABLE_LAST: u32 = 29999;
/// Priority of the VIP source rules (`from <vip> lookup <trench table>`).
pub(crate) const VIP_RULE_PRIORITY: u32 = 29000;
/// Priority of the first (highest-priority) flow's rules; each next flow gets one more.
pub(crate) const FLOW_RULE_FIRST: u32 = 20000;
/// Most flows in one trench (their rules stay below [`VIP_RULE_PRIORITY`]).
pub(crate) const MAX_FLOWS: usize = (VIP_RULE_PRIORITY - FLOW_RULE_FIRST) as usize;

impl crate::k8s::traffic::TrafficSnapshot {
    /// As [`crate::trench::Objects`].
    pub(crate) fn objects(&self) -> crate::trench::Objects<'_> {
        crate::trench::Objects {
            trenches: &self.trenches,
            attractors: &self.attractors,
            gateways: &self.gateways,
            vips: &self.vips,
            conduits: &self.conduits,
            streams: &self.streams,
            flows: &self.flows,
        }
    }
}

/// Every traffic-domain object, as lists.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Objects<'a> {
    /// Trenches.
    pub(crate) trenches: &'a [Trench],
    /// Attractors.
    pub(crate) attractors: &'a [Attractor],
    /// Gateways.
    pub(crate) gateways: &'a [Gateway],
    /// Vips.
    pub(crate) vips: &'a [Vip],
    /// Conduits.
    pub(crate) conduits: &'a [Conduit],
    /// Streams.
    pub(crate) streams: &'a [Stream],
    /// Flows.
    pub(crate) flows: &'a [Flow],
}

/// One trench and its children (by the `trench` label, same namespace), each sorted by
/// name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Domain<'a> {
    /// Namespace.
    pub(crate) namespace: String,
    /// Trench name.
    pub(crate) name: String,
    /// The Trench (absent: children name a trench that does not exist).
    pub(crate) trench: Option<&'a Trench>,
    /// Attractors.
    pub(crate) attractors: Vec<&'a Attractor>,
    /// Gateways.
    pub(crate) gateways: Vec<&'a Gateway>,
    /// Vips.
    pub(crate) vips: Vec<&'a Vip>,
    /// Conduits.
    pub(crate) conduits: Vec<&'a Conduit>,
    /// Streams.
    pub(crate) streams: Vec<&'a Stream>,
    /// Flows.
    pub(crate) flows: Vec<&'a Flow>,
}

impl Domain<'_> {
    /// `namespace/name`.
    pub(crate) fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether the trench is compiled into node routing (`dataPlane: node`), not
    /// handled by Meridio's own workloads.
    pub(crate) fn node_mode(&self) -> bool {
        self.trench
            .is_some_and(|t| t.spec.data_plane == crate::api::DataPlane::Node)
    }
}

fn meta_ns_name(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (String, String) {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

fn err(kind: &str, ns: &str, name: &str, field: &str, message: impl Into<String>) -> InputError {
    InputError {
        kind: kind.to_owned(),
        name: format!("{ns}/{name}"),
        field: field.to_owned(),
        message: message.into(),
    }
}

/// Groups the objects into trenches (sorted by namespace and name). A child without
/// the `trench` label is an error here and belongs to no trench.
pub(crate) fn domains<'a>(o: Objects<'a>, errors: &mut Vec<InputError>) -> Vec<Domain<'a>> {
    let mut out: BTreeMap<(String, String), Domain<'a>> = BTreeMap::new();
    for t in o.trenches {
        let (ns, name) = meta_ns_name(&t.metadata);
        let d = out.entry((ns.clone(), name.clone())).or_default();
        d.namespace = ns;
        d.name = name;
        d.trench = Some(t);
    }
    macro_rules! children {
        ($list:expr, $field:ident, $kind:literal) => {
            for c in $list {
                let (ns, name) = meta_ns_name(&c.metadata);
                let label = c
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(TRENCH_LABEL))
                    .filter(|t| !t.is_empty());
                let Some(trench) = label else {
                    errors.push(err(
                        $kind,
                        &ns,
                        &name,
                        "metadata.labels.trench",
                        "needs the label trench: <name of its Trench in this namespace>",
                    ));
                    continue;
                };
                let d = out.entry((ns.clone(), trench.clone())).or_default();
                d.namespace = ns;
                d.name = trench.clone();
                d.$field.push(c);
            }
        };
    }
    children!(o.attractors, attractors, "Attractor");
    children!(o.gateways, gateways, "Gateway");
    children!(o.vips, vips, "Vip");
    children!(o.conduits, conduits, "Conduit");
    children!(o.streams, streams, "Stream");
    children!(o.flows, flows, "Flow");
    let mut v: Vec<Domain<'a>> = out.into_values().collect();
    for d in &mut v {
        let by_name = |a: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            a.name.clone().unwrap_or_default()
        };
        d.attractors.sort_by_key(|x| by_name(&x.metadata));
        d.gateways.sort_by_key(|x| by_name(&x.metadata));
        d.vips.sort_by_key(|x| by_name(&x.metadata));
        d.conduits.sort_by_key(|x| by_name(&x.metadata));
        d.streams.sort_by_key(|x| by_name(&x.metadata));
        d.flows.sort_by_key(|x| by_name(&x.metadata));
    }
    v
}

fn name_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    m.name.as_deref().unwrap_or_default()
}

/// A prefix without host bits.
fn parse_prefix(s: &str) -> Result<IpNetwork, String> {
    let n: IpNetwork = s
        .parse()
        .map_err(|_| format!("{s:?} is not a prefix (20.0.0.1/32, 2000::/64)"))?;
    netpolicy_core::validate::network_prefix(n)
}

/// A port range: `any` (`None`), `N` or `N-M` within 0..=65535.
pub(crate) fn parse_ports(s: &str) -> Result<Option<(u16, u16)>, String> {
    if s == "any" {
        return Ok(None);
    }
    let bad = || format!("{s:?} is not a port: use 'any', N or N-M within 0-65535 (N <= M)");
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (a, b),
        None => (s, s),
    };
    let a: u16 = a.parse().map_err(|_| bad())?;
    let b: u16 = b.parse().map_err(|_| bad())?;
    if a > b {
        return Err(bad());
    }
    Ok(Some((a, b)))
}

/// Problems with a list of port ranges: syntax, and overlaps (Meridio's rule).
fn check_ports(ports: &[String], field: &str, out: &mut Vec<(String, String)>) {
    let mut seen: Vec<(usize, u16, u16)> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        match parse_ports(p) {
            Err(e) => out.push((format!("{field}[{i}]"), e)),
            Ok(Some(r)) if rule_ports(r).is_none() => out.push((
                format!("{field}[{i}]"),
                format!(
                    "{p:?} cannot be matched by a kernel FIB rule (rules match ports 1..65534)"
                ),
            )),
            Ok(r) => {
                let (a, b) = r.unwrap_or((0, 65535));
                if let Some((j, ..)) = seen.iter().find(|(_, x, y)| a <= *y && *x <= b) {
                    out.push((
                        format!("{field}[{i}]"),
                        format!("{p:?} overlaps {field}[{j}] ({:?})", ports[*j]),
                    ));
                }
                seen.push((i, a, b));
            }
        }
    }
}

/// A port range as a FIB rule can match it: the kernel refuses rule ranges touching 0
/// or 65535, so the range is narrowed to 1..=65534 (`0-1000` matches 1-1000, which is
/// all real traffic). `Some(None)`: every port (no match needed); `None`: the range
/// holds only 0 or only 65535, which no rule can match.
fn rule_ports((a, b): (u16, u16)) -> Option<Option<String>> {
    let (a, b) = (a.max(1), b.min(65534));
    if a > b {
        return None;
    }
    Some(match (a, b) {
        (1, 65534) => None,
        (a, b) if a == b => Some(a.to_string()),
        (a, b) => Some(format!("{a}-{b}")),
    })
}

fn duration_ms(s: &str) -> Option<u64> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))?;
    let n: f64 = num.parse().ok()?;
    let f = match unit {
        "ms" => 1.0,
        "s" => 1000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return None,
    };
    Some((n * f) as u64)
}

/// The nodes an attractor selects (by labels), sorted.
pub(crate) fn attractor_nodes<'n>(a: &Attractor, nodes: &'n [(String, Labels)]) -> Vec<&'n str> {
    let Ok(sel) = a.spec.node_selector.validate("spec.nodeSelector") else {
        return Vec::new();
    };
    let mut v: Vec<&str> = nodes
        .iter()
        .filter(|(_, l)| sel.matches(l))
        .map(|(n, _)| n.as_str())
        .collect();
    v.sort_unstable();
    v
}

fn default_route(to: &str, table: u32, dev: &str, via: &[IpAddr]) -> RouteSpec {
    let mut r = RouteSpec {
        to: to.to_owned(),
        table: Some(table),
        ..Default::default()
    };
    if let [one] = via {
        r.via = Some(one.to_string());
        r.dev = Some(dev.to_owned());
    } else {
        r.nexthops = via
            .iter()
            .map(|v| NextHopSpec {
                via: Some(v.to_string()),
                dev: Some(dev.to_owned()),
                weight: None,
            })
            .collect();
    }
    r
}

/// The routing items of one valid trench per node, from its objects and its
/// allocation (the Trench's status): only nodes that have their addresses are
/// compiled. Pure and deterministic.
pub(crate) fn compile(d: &Domain<'_>, alloc: &TrenchStatus) -> BTreeMap<String, RoutingSpec> {
    let mut out: BTreeMap<String, RoutingSpec> = BTreeMap::new();
    let Some(table) = alloc.table else { return out };
    let vips: BTreeMap<&str, IpNetwork> = d
        .vips
        .iter()
        .filter_map(|v| Some((name_of(&v.metadata), v.spec.address.parse().ok()?)))
        .collect();
    let gateways: BTreeMap<&str, &Gateway> = d
        .gateways
        .iter()
        .map(|g| (name_of(&g.metadata), *g))
        .collect();
    let streams: BTreeMap<&str, &Stream> = d
        .streams
        .iter()
        .map(|x| (name_of(&x.metadata), *x))
        .collect();
    // Flows by rank: higher priority first, then name.
    let mut flows: Vec<&Flow> = d.flows.clone();
    flows.sort_by(|a, b| {
        b.spec
            .priority
            .cmp(&a.spec.priority)
            .then_with(|| name_of(&a.metadata).cmp(name_of(&b.metadata)))
    });
    for a in &d.attractors {
        let aname = name_of(&a.metadata);
        let Some(nodes) = alloc.node_addresses.get(aname) else {
            continue;
        };
        let iface = &a.spec.interface;
        let dev = iface.name.as_str();
        let statics: Vec<IpAddr> = a
            .spec
            .gateways
            .iter()
            .filter_map(|g| gateways.get(g.as_str()))
            .filter(|g| g.spec.protocol == GatewayProtocol::Static)
            .filter_map(|g| g.spec.address.parse().ok())
            .collect();
        let mut v4: Vec<IpAddr> = statics.iter().copied().filter(IpAddr::is_ipv4).collect();
        let mut v6: Vec<IpAddr> = statics.iter().copied().filter(IpAddr::is_ipv6).collect();
        v4.sort_unstable();
        v6.sort_unstable();
        // The trench's table: replies from the VIPs leave through the gateways. The
        // streams' tables: what a flow selects, the VIPs delivered to this node
        // (`local <vip> dev lo`): inbound VIP traffic never goes back to the gateways.
        let my_streams: Vec<(&str, u32)> = d
            .streams
            .iter()
            .filter(|s| a.spec.composites.contains(&s.spec.conduit))
            .filter_map(|s| {
                let n = name_of(&s.metadata);
                Some((n, *alloc.stream_tables.get(n)?))
            })
            .collect();
        let mut routes = Vec::new();
        if !v4.is_empty() {
            routes.push(default_route("0.0.0.0/0", table, dev, &v4));
        }
        if !v6.is_empty() {
            routes.push(default_route("::/0", table, dev, &v6));
        }
        for (_, t) in &my_streams {
            for v in &a.spec.vips {
                if let Some(net) = vips.get(v.as_str()) {
                    routes.push(RouteSpec {
                        type_: Some("local".into()),
                        to: net.to_string(),
                        dev: Some("lo".into()),
                        table: Some(*t),
                        ..Default::default()
                    });
                }
            }
        }
        // An IPv4 host VIP is also an address of the node, on `lo` without its local
        // route: the kernel sends from an IPv4 source only when the source is one of
        // the host's addresses (a reply from the VIP had no route out), and without
        // that route only what a flow selects is delivered. IPv6 sends from any source.
        let vip_addresses: Vec<AddressSpec> = a
            .spec
            .vips
            .iter()
            .filter_map(|v| vips.get(v.as_str()))
            .filter(|net| matches!(net, IpNetwork::V4(n) if n.prefix() == 32))
            .map(|net| AddressSpec {
                dev: "lo".into(),
                address: net.to_string(),
                local_route: Some(false),
            })
            .collect();
        let mut rules = Vec::new();
        for v in &a.spec.vips {
            if let Some(net) = vips.get(v.as_str()) {
                rules.push(RuleSpec {
                    priority: VIP_RULE_PRIORITY,
                    from: Some(net.to_string()),
                    table: Some(table),
                    ..Default::default()
                });
            }
        }
        for (rank, f) in flows.iter().enumerate() {
            flow_rules(a, f, rank, &vips, &streams, &my_streams, &mut rules);
        }
        for (node, addrs) in nodes {
            let spec = out.entry(node.clone()).or_default();
            match iface.vlan_id.unwrap_or(0) {
                0 => spec.addresses.extend(addrs.iter().map(|ad| AddressSpec {
                    dev: iface.link.clone(),
                    address: ad.clone(),
                    ..Default::default()
                })),
                id => spec.vlans.push(VlanSpec {
                    link: iface.link.clone(),
                    id: u32::from(id),
                    name: Some(iface.name.clone()),
                    protocol: None,
                    mtu: iface.mtu,
                    addresses: addrs.clone(),
                }),
            }
            spec.addresses.extend(vip_addresses.iter().cloned());
            spec.routes.extend(routes.iter().cloned());
            spec.rules.extend(rules.iter().cloned());
        }
    }
    out
}

/// The FIB rules of flow `f` (of rank `rank`) on attractor `a`'s nodes: one per VIP the
/// attractor serves × protocol × source subnet × source ports × destination ports,
/// looking up the table of the flow's stream (when the attractor carries it).
fn flow_rules(
    a: &Attractor,
    f: &Flow,
    rank: usize,
    vips: &BTreeMap<&str, IpNetwork>,
    streams: &BTreeMap<&str, &Stream>,
    my_streams: &[(&str, u32)],
    rules: &mut Vec<RuleSpec>,
) {
    let Some(stream) = streams.get(f.spec.stream.as_str()) else {
        return;
    };
    let Some((_, stable)) = my_streams
        .iter()
        .find(|(n, _)| *n == name_of(&stream.metadata))
    else {
        return;
    };
    let priority = FLOW_RULE_FIRST + rank as u32;
    let ports = |list: &[String]| -> Vec<Option<String>> {
        let mut v: Vec<Option<String>> = list
            .iter()
            .filter_map(|p| parse_ports(p).ok())
            .filter_map(|r| match r {
                None => Some(None),
                Some(r) => rule_ports(r),
            })
            .collect();
        if v.is_empty() || v.iter().any(Option::is_none) {
            v = vec![None];
        }
        v
    };
    let sports = ports(&f.spec.source_ports);
    let dports = ports(&f.spec.destination_ports);
    for vname in &f.spec.vips {
        // Only VIPs this attractor serves reach its nodes.
        if !a.spec.vips.contains(vname) {
            continue;
        }
        let Some(vip) = vips.get(vname.as_str()) else {
            continue;
        };
        let subnets: Vec<Option<IpNetwork>> = if f.spec.source_subnets.is_empty() {
            vec![None]
        } else {
            f.spec
                .source_subnets
                .iter()
                .filter_map(|s| s.parse::<IpNetwork>().ok())
                .filter(|s| s.is_ipv4() == vip.is_ipv4())
                .map(|s| (s.prefix() != 0).then_some(s))
                .collect()
        };
        for p in &f.spec.protocols {
            for src in &subnets {
                for sp in &sports {
                    for dp in &dports {
                        rules.push(RuleSpec {
                            priority,
                            to: Some(vip.to_string()),
                            from: src.map(|s| s.to_string()),
                            ip_proto: Some(IntOrString(p.as_str().to_owned())),
                            sport: sp.clone().map(IntOrString),
                            dport: dp.clone().map(IntOrString),
                            table: Some(*stable),
                            ..Default::default()
                        });
                    }
                }
            }
        }
    }
}

/// The routing policies of every trench, one per (trench, node), from the trenches'
/// allocations (`status`, by `namespace/name`): a valid trench's compiled items; an
/// invalid one's nodes (those its allocation lists) are held at their last good config
/// ([`Policy::invalid`]). Items that fail validation (they cannot, unless the
/// allocation was edited by hand) make the trench invalid too and are reported.
pub(crate) fn policies(
    domains: &[Domain<'_>],
    valid: &BTreeSet<String>,
    status: &BTreeMap<String, TrenchStatus>,
    errors: &mut Vec<InputError>,
) -> BTreeMap<String, Vec<Policy>> {
    let mut out = BTreeMap::new();
    for d in domains.iter().filter(|d| d.node_mode()) {
        let key = d.key();
        let Some(alloc) = status.get(&key) else {
            continue;
        };
        let hold = |alloc: &TrenchStatus| -> Vec<Policy> {
            let nodes: BTreeSet<&String> = alloc
                .node_addresses
                .values()
                .flat_map(|m| m.keys())
                .collect();
            nodes
                .into_iter()
                .map(|n| {
                    Policy::invalid(
                        Source::trench(&d.namespace, &d.name, n),
                        0,
                        Selector::from_requirements(vec![Requirement::Equals {
                            key: NODE_NAME_LABEL.to_owned(),
                            value: n.clone(),
                        }]),
                    )
                })
                .collect()
        };
        if !valid.contains(&key) {
            out.insert(key, hold(alloc));
            continue;
        }
        let mut ps = Vec::new();
        let mut bad = false;
        for (node, spec) in compile(d, alloc) {
            match spec.validate("spec") {
                Ok(cfg) => ps.push(Policy::trench(&d.namespace, &d.name, &node, cfg)),
                Err(e) => {
                    bad = true;
                    for p in e.field_errors() {
                        errors.push(err(
                            "Trench",
                            &d.namespace,
                            &d.name,
                            &format!("status (node {node}): {}", p.path),
                            p.message.clone(),
                        ));
                    }
                }
            }
        }
        out.insert(key, if bad { hold(alloc) } else { ps });
    }
    out
}

/// Everything about the traffic domains at once: groups, validates, allocates (from
/// `previous`) and compiles. `plan` calls it with no previous allocation; the
/// controller with the Trenches' statuses.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// Trenches that validate (`namespace/name`).
    pub(crate) valid: BTreeSet<String>,
    /// Each trench's allocation (its status fields).
    pub(crate) allocations: BTreeMap<String, TrenchStatus>,
    /// Errors (invalid objects, exhausted ranges).
    pub(crate) errors: Vec<InputError>,
    /// Notes (BGP gateways not programmable, VIPs no attractor serves).
    pub(crate) notes: Vec<InputError>,
}

/// Validates and allocates every trench.
pub(crate) fn evaluate(
    domains: &[Domain<'_>],
    nodes: &[(String, Labels)],
    previous: &BTreeMap<String, TrenchStatus>,
) -> Outcome {
    let mut o = Outcome::default();
    for d in domains {
        let c = validate(d);
        if c.errors.is_empty() && d.trench.is_some() {
            o.valid.insert(d.key());
        }
        o.errors.extend(c.errors);
        o.notes.extend(c.notes);
    }
    // Only the `node` data plane hands out tables and node addresses.
    let node_mode: BTreeSet<String> = domains
        .iter()
        .filter(|d| d.node_mode())
        .map(Domain::key)
        .filter(|k| o.valid.contains(k))
        .collect();
    o.allocations = allocate(domains, &node_mode, nodes, previous, &mut o.errors);
    o
}

#[cfg(test)]
mod tests;
