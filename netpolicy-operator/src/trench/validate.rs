//! Meridio's rules for one trench, those the schema states included (so that `plan`,
//! which has no API server, reports them too), and the references between objects: one
//! validator per kind over a shared walk of the trench's children ([`Walk`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::{Domain, MAX_FLOWS, check_ports, duration_ms, err, name_of, parse_prefix};
use crate::{
    api::{Attractor, Conduit, DataPlane, Flow, Gateway, GatewayProtocol, Stream, Trench, Vip},
    k8s::InputError,
};

/// What [`validate`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Checked {
    /// Errors: the trench is not compiled while any remains (its nodes keep their last
    /// good config).
    pub(crate) errors: Vec<InputError>,
    /// Things reported but not errors (a BGP gateway is not programmable; a VIP no
    /// attractor serves).
    pub(crate) notes: Vec<InputError>,
}

/// Meridio's rules for one trench, those the schema states included, and the
/// references between objects.
pub(crate) fn validate(d: &Domain<'_>) -> Checked {
    let Some(trench) = d.trench else {
        return orphans(d);
    };
    let mut w = Walk::new(d, trench);
    w.trench();
    for v in &d.vips {
        w.vip(v);
    }
    for g in &d.gateways {
        w.gateway(g);
    }
    for x in &d.conduits {
        w.conduit(x);
    }
    for s in &d.streams {
        w.stream(s);
    }
    if d.flows.len() > MAX_FLOWS {
        let message = format!("a trench has at most {MAX_FLOWS} flows");
        w.error("Trench", &d.name, "metadata.name", message);
    }
    for f in &d.flows {
        w.flow(f);
    }
    w.one_conduit_per_vip();
    let mut owners = Owners::default();
    for a in &d.attractors {
        w.attractor(a, &mut owners);
    }
    for v in &d.vips {
        let name = name_of(&v.metadata);
        if !owners.vips.contains_key(name) {
            w.note(
                "Vip",
                name,
                "metadata.name",
                "no attractor serves this vip: it is programmed on no node",
            );
        }
    }
    w.c
}

/// Children whose trench does not exist: each is an error on its trench label.
fn orphans(d: &Domain<'_>) -> Checked {
    let mut c = Checked::default();
    let ns = d.namespace.as_str();
    let mut push = |kind: &str, name: &str| {
        c.errors.push(err(
            kind,
            ns,
            name,
            "metadata.labels.trench",
            format!("trench {:?} does not exist in namespace {ns:?}", d.name),
        ));
    };
    d.attractors
        .iter()
        .for_each(|x| push("Attractor", name_of(&x.metadata)));
    d.gateways
        .iter()
        .for_each(|x| push("Gateway", name_of(&x.metadata)));
    d.vips
        .iter()
        .for_each(|x| push("Vip", name_of(&x.metadata)));
    d.conduits
        .iter()
        .for_each(|x| push("Conduit", name_of(&x.metadata)));
    d.streams
        .iter()
        .for_each(|x| push("Stream", name_of(&x.metadata)));
    d.flows
        .iter()
        .for_each(|x| push("Flow", name_of(&x.metadata)));
    c
}

/// The VIPs and conduits attractors took, each with the attractor that has it.
#[derive(Default)]
struct Owners {
    vips: BTreeMap<String, String>,
    conduits: BTreeMap<String, String>,
}

/// One trench's children by name, and what the validators found.
struct Walk<'d> {
    d: &'d Domain<'d>,
    trench: &'d Trench,
    vips: BTreeMap<&'d str, &'d Vip>,
    gateways: BTreeMap<&'d str, &'d Gateway>,
    conduits: BTreeMap<&'d str, &'d Conduit>,
    streams: BTreeMap<&'d str, &'d Stream>,
    c: Checked,
}

impl<'d> Walk<'d> {
    fn new(d: &'d Domain<'d>, trench: &'d Trench) -> Self {
        fn by_name<'a, K: kube::Resource>(list: &[&'a K]) -> BTreeMap<&'a str, &'a K> {
            list.iter().map(|x| (name_of(x.meta()), *x)).collect()
        }
        Self {
            d,
            trench,
            vips: by_name(&d.vips),
            gateways: by_name(&d.gateways),
            conduits: by_name(&d.conduits),
            streams: by_name(&d.streams),
            c: Checked::default(),
        }
    }

    fn error(&mut self, kind: &str, name: &str, field: &str, message: impl Into<String>) {
        let e = err(kind, &self.d.namespace, name, field, message);
        self.c.errors.push(e);
    }

    fn note(&mut self, kind: &str, name: &str, field: &str, message: impl Into<String>) {
        let e = err(kind, &self.d.namespace, name, field, message);
        self.c.notes.push(e);
    }

    fn node_plane(&self) -> bool {
        self.trench.spec.data_plane == DataPlane::Node
    }

    fn family_ok(&self, n: &IpNetwork) -> bool {
        let fam = self.trench.spec.ip_family;
        (n.is_ipv4() && fam.v4()) || (n.is_ipv6() && fam.v6())
    }

    /// The trench's IPAM: roots of their family, prefix lengths growing from root to
    /// conduit to node.
    fn trench(&mut self) {
        let name = self.d.name.clone();
        let ipam = &self.trench.spec.ipam;
        for (field, root, fam_is) in [
            ("spec.ipam.ipv4Root", &ipam.ipv4_root, 4),
            ("spec.ipam.ipv6Root", &ipam.ipv6_root, 6),
        ] {
            match parse_prefix(root) {
                Ok(n) if (n.is_ipv4() && fam_is == 4) || (n.is_ipv6() && fam_is == 6) => {}
                Ok(_) => self.error(
                    "Trench",
                    &name,
                    field,
                    format!("{root:?} is not an IPv{fam_is} prefix"),
                ),
                Err(e) => self.error("Trench", &name, field, e),
            }
        }
        let root_len = |r: &str| r.parse::<IpNetwork>().map_or(0, |n| n.prefix());
        let grows = |root: u8, c: u8, n: u8, max: u8| root <= c && c <= n && n <= max;
        if !grows(
            root_len(&ipam.ipv4_root),
            ipam.conduit_prefix_length_v4,
            ipam.node_prefix_length_v4,
            32,
        ) || !grows(
            root_len(&ipam.ipv6_root),
            ipam.conduit_prefix_length_v6,
            ipam.node_prefix_length_v6,
            128,
        ) {
            self.error(
                "Trench",
                &name,
                "spec.ipam",
                "prefix lengths grow from root to conduit to node",
            );
        }
    }

    fn vip(&mut self, v: &Vip) {
        let name = name_of(&v.metadata);
        match parse_prefix(&v.spec.address) {
            Ok(n) if !self.family_ok(&n) => self.error(
                "Vip",
                name,
                "spec.address",
                format!("{} is not of the trench's ipFamily", v.spec.address),
            ),
            Ok(IpNetwork::V4(n)) if n.prefix() < 32 && self.node_plane() => self.note(
                "Vip",
                name,
                "spec.address",
                format!(
                    "{n} is wider than one address: the node data plane delivers what flows \
                     select to it, but Linux sends from an IPv4 source only when it is an \
                     address of the host, so replies from it need that address on the node \
                     (give one Vip per /32 to have them made)"
                ),
            ),
            Ok(_) => {}
            Err(e) => self.error("Vip", name, "spec.address", e),
        }
    }

    fn gateway(&mut self, g: &Gateway) {
        let name = name_of(&g.metadata);
        if g.spec.address.parse::<IpAddr>().is_err() {
            let message = format!("{:?} is not an IP address", g.spec.address);
            self.error("Gateway", name, "spec.address", message);
        }
        match g.spec.protocol {
            GatewayProtocol::Static => {
                if g.spec.bgp.is_some() {
                    self.error(
                        "Gateway",
                        name,
                        "spec.bgp",
                        "must be empty when protocol is static",
                    );
                }
            }
            GatewayProtocol::Bgp => {
                if g.spec.static_.is_some() {
                    self.error(
                        "Gateway",
                        name,
                        "spec.static",
                        "must be empty when protocol is bgp",
                    );
                }
                let bgp = g.spec.bgp.clone().unwrap_or_default();
                if bgp.remote_asn.is_none() {
                    let m = "a bgp gateway needs remoteAsn";
                    self.error("Gateway", name, "spec.bgp.remoteAsn", m);
                }
                if bgp.local_asn.is_none() {
                    let m = "a bgp gateway needs localAsn";
                    self.error("Gateway", name, "spec.bgp.localAsn", m);
                }
                if let Some(h) = &bgp.hold_time
                    && duration_ms(h).is_none_or(|ms| ms < 3000)
                {
                    let m = format!("{h:?} is not a duration of at least 3s");
                    self.error("Gateway", name, "spec.bgp.holdTime", m);
                }
                self.note(
                    "Gateway",
                    name,
                    "spec.protocol",
                    "bgp gateways are accepted but not programmable by netpolicy (no BGP \
                     speaker on the node): no route goes via this gateway",
                );
            }
        }
    }

    /// Meridio's collision rule: per protocol and VIP, no port or target port may be
    /// NATted twice, and no NAT may target a port another NAT exposes.
    fn conduit(&mut self, x: &Conduit) {
        let name = name_of(&x.metadata);
        let trench = self.d.name.clone();
        let mut seen: BTreeMap<(u32, &str, &str), usize> = BTreeMap::new();
        let mut pairs: BTreeMap<(u32, u32, &str), usize> = BTreeMap::new();
        for (i, pn) in x.spec.destination_port_nats.iter().enumerate() {
            let field = format!("spec.destinationPortNats[{i}]");
            if pn.port > 65535 || pn.target_port > 65535 {
                self.error("Conduit", name, &field, "ports are within 0-65535");
            }
            if let Some(j) = pairs.insert((pn.port, pn.target_port, pn.protocol.as_str()), i) {
                self.error(
                    "Conduit",
                    name,
                    &field,
                    format!("[{j}] and [{i}] must be merged"),
                );
                continue;
            }
            for v in &pn.vips {
                if !self.vips.contains_key(v.as_str()) {
                    let m = format!("Vip {v:?} does not exist in trench {trench:?}");
                    self.error("Conduit", name, &format!("{field}.vips"), m);
                }
                for port in [pn.port, pn.target_port] {
                    if let Some(&j) = seen.get(&(port, v.as_str(), pn.protocol.as_str()))
                        && j != i
                    {
                        let m = format!("[{j}] and [{i}] are colliding");
                        self.error("Conduit", name, &field, m);
                    }
                }
                seen.insert((pn.port, v.as_str(), pn.protocol.as_str()), i);
                seen.insert((pn.target_port, v.as_str(), pn.protocol.as_str()), i);
            }
        }
    }

    fn stream(&mut self, s: &Stream) {
        let name = name_of(&s.metadata);
        if !self.conduits.contains_key(s.spec.conduit.as_str()) {
            let m = format!(
                "Conduit {:?} does not exist in trench {:?}",
                s.spec.conduit, self.d.name
            );
            self.error("Stream", name, "spec.conduit", m);
        }
        if !(1..=10000).contains(&s.spec.max_targets) {
            self.error(
                "Stream",
                name,
                "spec.maxTargets",
                "maxTargets is within 1..10000",
            );
        }
    }

    /// A flow's references and matches.
    fn flow(&mut self, f: &Flow) {
        let name = name_of(&f.metadata);
        let trench = self.d.name.clone();
        if f.spec.stream.is_empty() || !self.streams.contains_key(f.spec.stream.as_str()) {
            let m = format!(
                "Stream {:?} does not exist in trench {trench:?}",
                f.spec.stream
            );
            self.error("Flow", name, "spec.stream", m);
        }
        if f.spec.vips.is_empty() {
            self.error("Flow", name, "spec.vips", "a flow names at least one Vip");
        }
        for (i, b) in f.spec.byte_matches.iter().enumerate() {
            if !crate::api::traffic::is_byte_match(b) {
                let m =
                    format!("{b:?} is not <tcp|udp|sctp>[<offset>:<1|2|4>] [& 0x<mask>] = <value>");
                self.error("Flow", name, &format!("spec.byteMatches[{i}]"), m);
            }
        }
        if self.d.node_mode() && !f.spec.byte_matches.is_empty() {
            self.error(
                "Flow",
                name,
                "spec.byteMatches",
                "the node data plane cannot match bytes (its FIB rules match protocols, \
                 ports and addresses): use dataPlane: meridio, or remove them",
            );
        }
        for (i, v) in f.spec.vips.iter().enumerate() {
            if !self.vips.contains_key(v.as_str()) {
                let m = format!("Vip {v:?} does not exist in trench {trench:?}");
                self.error("Flow", name, &format!("spec.vips[{i}]"), m);
            }
        }
        self.flow_matches(f);
    }

    /// A flow's source subnets (no overlap), ports, protocols and priority.
    fn flow_matches(&mut self, f: &Flow) {
        let name = name_of(&f.metadata);
        let mut subnets: Vec<IpNetwork> = Vec::new();
        for (i, s) in f.spec.source_subnets.iter().enumerate() {
            let field = format!("spec.sourceSubnets[{i}]");
            match parse_prefix(s) {
                Err(e) => self.error("Flow", name, &field, e),
                Ok(n) => {
                    if let Some(j) = subnets.iter().position(|m| {
                        m.is_ipv4() == n.is_ipv4()
                            && (m.contains(n.network()) || n.contains(m.network()))
                    }) {
                        let m = format!("{s:?} overlaps sourceSubnets[{j}]");
                        self.error("Flow", name, &field, m);
                    }
                    subnets.push(n);
                }
            }
        }
        let mut problems = Vec::new();
        check_ports(&f.spec.source_ports, "spec.sourcePorts", &mut problems);
        check_ports(
            &f.spec.destination_ports,
            "spec.destinationPorts",
            &mut problems,
        );
        for (field, m) in problems {
            self.error("Flow", name, &field, m);
        }
        if f.spec.protocols.is_empty() {
            self.error(
                "Flow",
                name,
                "spec.protocols",
                "a flow names at least one protocol (tcp, udp, sctp)",
            );
        }
        let uniq: BTreeSet<_> = f.spec.protocols.iter().collect();
        if uniq.len() != f.spec.protocols.len() {
            self.error("Flow", name, "spec.protocols", "duplicated protocols");
        }
        if f.spec.priority < 0 {
            self.error("Flow", name, "spec.priority", "priority is at least 0");
        }
    }

    /// A VIP feeds one conduit: flows of different conduits may not share a VIP.
    fn one_conduit_per_vip(&mut self) {
        let d = self.d;
        let mut vip_conduit: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
        for f in &d.flows {
            let Some(s) = self.streams.get(f.spec.stream.as_str()).copied() else {
                continue;
            };
            for v in &f.spec.vips {
                let fname = name_of(&f.metadata);
                match vip_conduit.get(v.as_str()) {
                    Some((other, of)) if *other != s.spec.conduit.as_str() => {
                        let m = format!(
                            "Vip {v:?} already feeds conduit {other:?} (flow {of:?}); a vip \
                             feeds one conduit"
                        );
                        self.error("Flow", fname, "spec.vips", m);
                    }
                    Some(_) => {}
                    None => {
                        vip_conduit.insert(v.as_str(), (s.spec.conduit.as_str(), fname));
                    }
                }
            }
        }
    }

    /// An attractor: its interface, references, and no VIP or conduit shared.
    fn attractor(&mut self, a: &Attractor, owners: &mut Owners) {
        let name = name_of(&a.metadata);
        let prefixes = self.interface(a);
        if a.spec.composites.len() > 1 {
            self.error(
                "Attractor",
                name,
                "spec.composites",
                "only one composite (conduit) per attractor",
            );
        }
        for (k, g) in a.spec.gateways.iter().enumerate() {
            let field = format!("spec.gateways[{k}]");
            match self.gateways.get(g.as_str()).copied() {
                None => {
                    let m = format!("Gateway {g:?} does not exist in trench {:?}", self.d.name);
                    self.error("Attractor", name, &field, m);
                }
                // Only the node data plane routes via the gateway from the node's
                // interface, so needs it on-link. Meridio's frontends peer with it
                // wherever it is (its own samples put gateways outside the prefixes),
                // and a network-attachment interface has no prefixes to check.
                Some(gw) if self.node_plane() => {
                    if let Ok(ip) = gw.spec.address.parse::<IpAddr>()
                        && !prefixes.iter().any(|p| p.contains(ip))
                    {
                        let m = format!("gateway {g:?} ({ip}) is not on the interface's networks");
                        self.error("Attractor", name, &field, m);
                    }
                }
                Some(_) => {}
            }
        }
        // VIPs and conduits: they exist, and no other attractor of the trench has them.
        let vips: BTreeSet<&str> = self.vips.keys().copied().collect();
        let conduits: BTreeSet<&str> = self.conduits.keys().copied().collect();
        self.owned(
            name,
            &a.spec.vips,
            "spec.vips",
            "Vip",
            &vips,
            &mut owners.vips,
        );
        self.owned(
            name,
            &a.spec.composites,
            "spec.composites",
            "Conduit",
            &conduits,
            &mut owners.conduits,
        );
        if self.d.node_mode() && !a.spec.interface.network_attachments.is_empty() {
            self.error(
                "Attractor",
                name,
                "spec.interface.networkAttachments",
                "the node data plane programs VLANs, not Multus attachments: use dataPlane: \
                 meridio",
            );
        }
        if let Err(e) = a.spec.node_selector.validate("spec.nodeSelector") {
            for p in e.field_errors() {
                self.error("Attractor", name, &p.path, p.message.clone());
            }
        }
    }

    /// `list` (of attractor `name`, field `field`) names `what`s that exist, and no other
    /// attractor has them.
    fn owned(
        &mut self,
        name: &str,
        list: &[String],
        field: &str,
        what: &str,
        exists: &BTreeSet<&str>,
        owners: &mut BTreeMap<String, String>,
    ) {
        for (k, x) in list.iter().enumerate() {
            let field = format!("{field}[{k}]");
            if !exists.contains(x.as_str()) {
                let m = format!("{what} {x:?} does not exist in trench {:?}", self.d.name);
                self.error("Attractor", name, &field, m);
            }
            if let Some(other) = owners.insert(x.clone(), name.to_owned()) {
                let m = format!(
                    "{what} {x:?} is already used by attractor {other:?}: a {} cannot be \
                     shared between attractors",
                    what.to_lowercase()
                );
                self.error("Attractor", name, &field, m);
            }
        }
    }

    /// An attractor's interface: name, VLAN, and the prefixes of the trench's families
    /// (returned, to check gateways against).
    fn interface(&mut self, a: &Attractor) -> Vec<IpNetwork> {
        let name = name_of(&a.metadata);
        let i = &a.spec.interface;
        let fam = self.trench.spec.ip_family;
        if i.name.is_empty() || i.name.len() > 13 {
            let m = "the interface name has 1..13 bytes";
            self.error("Attractor", name, "spec.interface.name", m);
        }
        if i.vlan_id.unwrap_or(0) > 4094 {
            let m = "vlanId is within 0..4094 (0: untagged)";
            self.error("Attractor", name, "spec.interface.vlanId", m);
        }
        // The node data plane programs an untagged interface on the link itself. Meridio
        // (`meridio`) names the interface in its pods whatever the VLAN (its docs show
        // `vlan-id: 0` with another name).
        if i.vlan_id.unwrap_or(0) == 0 && i.name != i.link && self.node_plane() {
            self.error(
                "Attractor",
                name,
                "spec.interface.name",
                "an untagged interface (vlanId 0) is the link itself: name must equal link",
            );
        }
        let mut prefixes = Vec::new();
        for (field, p, v4) in [
            ("spec.interface.ipv4Prefix", &i.ipv4_prefix, true),
            ("spec.interface.ipv6Prefix", &i.ipv6_prefix, false),
        ] {
            let needed = if v4 { fam.v4() } else { fam.v6() };
            // A `network-attachment` interface (Multus) takes its addresses from the
            // attachment: Meridio's webhook forbids the prefixes there.
            let attached = !i.network_attachments.is_empty();
            match p {
                None if needed && !attached => {
                    let family = serde_json::to_value(fam)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    let m = format!("the trench is {family}: the interface needs this prefix");
                    self.error("Attractor", name, field, m);
                }
                None => {}
                Some(p) => match parse_prefix(p) {
                    Ok(n) if n.is_ipv4() != v4 => {
                        let m = format!("{p:?} is of the wrong family");
                        self.error("Attractor", name, field, m);
                    }
                    // Meridio's webhook validates both prefixes whatever the trench's
                    // family, and its manifests carry both: the other family's prefix is
                    // accepted (checked as a prefix of its family) and unused.
                    Ok(_) if !needed => {}
                    Ok(n) => prefixes.push(n),
                    Err(e) => self.error("Attractor", name, field, e),
                },
            }
        }
        prefixes
    }
}
