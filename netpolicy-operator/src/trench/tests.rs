use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::*;

/// Owned objects of one or more trenches.
#[derive(Default)]
struct Input {
    trenches: Vec<Trench>,
    attractors: Vec<Attractor>,
    gateways: Vec<Gateway>,
    vips: Vec<Vip>,
    conduits: Vec<Conduit>,
    streams: Vec<Stream>,
    flows: Vec<Flow>,
}

fn obj<T: serde::de::DeserializeOwned>(
    kind: &str,
    ns: &str,
    name: &str,
    trench: Option<&str>,
    spec: Value,
) -> T {
    let mut meta = json!({"name": name, "namespace": ns});
    if let Some(t) = trench {
        meta["labels"] = json!({"trench": t});
    }
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec
    }))
    .unwrap()
}

impl Input {
    /// Meridio's sample shape: one trench, one attractor on nodes labelled `a`, two
    /// static gateways, a BGP one, two VIPs, a conduit, two streams, two flows.
    fn sample(ns: &str, t: &str) -> Self {
        let mut i = Self::default();
        i.add(ns, t);
        i
    }

    fn add(&mut self, ns: &str, t: &str) {
        let tr = Some(t);
        self.trenches.push(obj(
            "Trench",
            ns,
            t,
            None,
            json!({"ipFamily": "dualstack", "dataPlane": "node"}),
        ));
        self.attractors.push(obj(
            "Attractor",
            ns,
            "attr",
            tr,
            json!({
                "nodeSelector": {"matchLabels": {"role": "a"}},
                "interface": {"name": "ext-vlan.100", "link": "eth0", "vlanId": 100,
                              "ipv4Prefix": "169.254.100.0/24", "ipv6Prefix": "100:100::/64"},
                "gateways": ["gw-v4", "gw-v4b", "gw-v6", "gw-bgp"],
                "vips": ["vip-v4", "vip-v6"], "composites": ["c1"]
            }),
        ));
        self.gateways.push(obj(
            "Gateway",
            ns,
            "gw-v4",
            tr,
            json!({"address": "169.254.100.1", "protocol": "static"}),
        ));
        self.gateways.push(obj(
            "Gateway",
            ns,
            "gw-v4b",
            tr,
            json!({"address": "169.254.100.2", "protocol": "static"}),
        ));
        self.gateways.push(obj(
            "Gateway",
            ns,
            "gw-v6",
            tr,
            json!({"address": "100:100::1", "protocol": "static"}),
        ));
        self.gateways.push(obj("Gateway", ns, "gw-bgp", tr, json!({"address": "169.254.100.3", "protocol": "bgp", "bgp": {"localAsn": 1, "remoteAsn": 2}})));
        self.vips.push(obj(
            "Vip",
            ns,
            "vip-v4",
            tr,
            json!({"address": "20.0.0.1/32"}),
        ));
        self.vips.push(obj(
            "Vip",
            ns,
            "vip-v6",
            tr,
            json!({"address": "2000::1/128"}),
        ));
        self.conduits.push(obj("Conduit", ns, "c1", tr, json!({})));
        self.streams
            .push(obj("Stream", ns, "s1", tr, json!({"conduit": "c1"})));
        self.streams
            .push(obj("Stream", ns, "s2", tr, json!({"conduit": "c1"})));
        self.flows.push(obj("Flow", ns, "f-low", tr, json!({"stream": "s2", "vips": ["vip-v4"], "sourceSubnets": ["10.0.0.0/8"], "destinationPorts": ["5000"], "protocols": ["udp"], "priority": 1})));
        self.flows.push(obj("Flow", ns, "f-high", tr, json!({"stream": "s1", "vips": ["vip-v4", "vip-v6"], "sourceSubnets": ["0.0.0.0/0", "::/0"], "sourcePorts": ["any"], "destinationPorts": ["80", "4000-4100"], "protocols": ["tcp", "sctp"], "priority": 9})));
    }

    fn objects(&self) -> Objects<'_> {
        Objects {
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

fn nodes(names: &[(&str, &str)]) -> Vec<(String, Labels)> {
    names
        .iter()
        .map(|(n, role)| {
            (
                (*n).to_owned(),
                [("role".to_owned(), (*role).to_owned())].into(),
            )
        })
        .collect()
}

fn run(
    i: &Input,
    n: &[(String, Labels)],
    prev: &BTreeMap<String, TrenchStatus>,
) -> (Outcome, BTreeMap<String, Vec<Policy>>) {
    let mut errors = Vec::new();
    let ds = domains(i.objects(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let out = evaluate(&ds, n, prev);
    let ps = policies(&ds, &out.valid, &out.allocations, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    (out, ps)
}

#[test]
fn the_sample_compiles_into_a_policy_per_attractor_node() {
    let i = Input::sample("red", "trench-a");
    let n = nodes(&[("n1", "a"), ("n2", "a"), ("n3", "b")]);
    let (out, ps) = run(&i, &n, &BTreeMap::new());
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    // The BGP gateway is reported, not an error.
    assert!(
        out.notes
            .iter()
            .any(|e| e.kind == "Gateway" && e.name == "red/gw-bgp")
    );
    let st = &out.allocations["red/trench-a"];
    assert_eq!(st.table, Some(TABLE_FIRST));
    assert_eq!(
        st.stream_tables.values().copied().collect::<BTreeSet<_>>(),
        [TABLE_FIRST + 1, TABLE_FIRST + 2].into()
    );
    let addrs = &st.node_addresses["attr"];
    // Lowest free, gateways (.1, .2, .3) excluded; both families.
    assert_eq!(addrs["n1"], ["169.254.100.4/24", "100:100::2/64"]);
    assert_eq!(addrs["n2"], ["169.254.100.5/24", "100:100::3/64"]);
    assert!(!addrs.contains_key("n3"));
    // Conduit prefixes from the trench roots, a node prefix each.
    let c = &st.conduits["c1"];
    assert_eq!(c.prefixes, ["172.16.0.0/20", "fd00::/56"]);
    assert_eq!(c.nodes["n1"], ["172.16.0.0/24", "fd00::/64"]);
    assert_eq!(c.nodes["n2"], ["172.16.1.0/24", "fd00:0:0:1::/64"]);
    let ps = &ps["red/trench-a"];
    assert_eq!(ps.len(), 2);
    assert_eq!(ps[0].source().to_string(), "Trench/red/trench-a");
    // Rules: higher priority flow first; a rule per VIP × protocol × subnet × ports.
    let spec = compile(&domains(i.objects(), &mut Vec::new())[0], st);
    let n1 = &spec["n1"];
    assert_eq!(n1.vlans.len(), 1);
    assert_eq!(n1.vlans[0].name.as_deref(), Some("ext-vlan.100"));
    assert_eq!(n1.vlans[0].addresses, ["169.254.100.4/24", "100:100::2/64"]);
    let t = |s: &str| st.stream_tables[s];
    let high: Vec<&RuleSpec> = n1
        .rules
        .iter()
        .filter(|r| r.table == Some(t("s1")))
        .collect();
    let low: Vec<&RuleSpec> = n1
        .rules
        .iter()
        .filter(|r| r.table == Some(t("s2")))
        .collect();
    // 2 VIPs × 2 protocols × 2 destination port ranges (each VIP with its family's /0).
    assert_eq!(high.len(), 8);
    assert_eq!(low.len(), 1);
    assert!(
        high.iter()
            .all(|r| r.priority == FLOW_RULE_FIRST && r.from.is_none())
    );
    assert_eq!(low[0].priority, FLOW_RULE_FIRST + 1);
    assert_eq!(low[0].from.as_deref(), Some("10.0.0.0/8"));
    assert_eq!(low[0].dport.as_ref().map(IntOrString::as_str), Some("5000"));
    // ECMP over the two IPv4 static gateways, in the trench's table only: replies.
    let v4: Vec<&RouteSpec> = n1.routes.iter().filter(|r| r.to == "0.0.0.0/0").collect();
    assert_eq!(v4.len(), 1);
    assert_eq!(v4[0].table, st.table);
    assert!(v4.iter().all(|r| r.nexthops.len() == 2 && r.via.is_none()));
    // The streams' tables deliver the VIPs to the node: nothing a flow selects goes
    // back to the gateways.
    for s in ["s1", "s2"] {
        let mut in_stream: Vec<String> = n1
            .routes
            .iter()
            .filter(|r| r.table == Some(t(s)))
            .map(|r| {
                format!(
                    "{} {} dev {}",
                    r.type_.as_deref().unwrap_or("unicast"),
                    r.to,
                    r.dev.as_deref().unwrap_or("-")
                )
            })
            .collect();
        in_stream.sort();
        assert_eq!(
            in_stream,
            ["local 20.0.0.1/32 dev lo", "local 2000::1/128 dev lo"],
            "stream {s}"
        );
    }
    assert!(
        !format!("{n1:?}").contains("169.254.100.3"),
        "the BGP gateway is routed via"
    );
    // A VIP source rule per VIP.
    assert_eq!(
        n1.rules
            .iter()
            .filter(|r| r.priority == VIP_RULE_PRIORITY)
            .count(),
        2
    );
}

#[test]
fn addresses_and_tables_stay_while_they_fit_and_a_leaving_node_frees_its_own() {
    let i = Input::sample("red", "t");
    let (out, _) = run(
        &i,
        &nodes(&[("n1", "a"), ("n2", "a"), ("n3", "a")]),
        &BTreeMap::new(),
    );
    let first = out.allocations.clone();
    // n1 leaves: n2 and n3 keep theirs; a new node n0 (sorting first) gets n1's.
    let (out, _) = run(&i, &nodes(&[("n0", "a"), ("n2", "a"), ("n3", "a")]), &first);
    let a = &out.allocations["red/t"].node_addresses["attr"];
    let b = &first["red/t"].node_addresses["attr"];
    assert_eq!(a["n2"], b["n2"]);
    assert_eq!(a["n3"], b["n3"]);
    assert_eq!(a["n0"], b["n1"]);
    assert_eq!(out.allocations["red/t"].table, first["red/t"].table);
    assert_eq!(
        out.allocations["red/t"].conduits["c1"].nodes["n0"],
        first["red/t"].conduits["c1"].nodes["n1"]
    );
    // A second trench takes the next free tables, not the first one's.
    let mut two = Input::sample("red", "t");
    two.add("blue", "t");
    let (out, _) = run(&two, &nodes(&[("n1", "a")]), &first);
    let tables = |k: &str| {
        let s = &out.allocations[k];
        s.table
            .into_iter()
            .chain(s.stream_tables.values().copied())
            .collect::<BTreeSet<u32>>()
    };
    assert_eq!(
        tables("red/t"),
        [TABLE_FIRST, TABLE_FIRST + 1, TABLE_FIRST + 2].into()
    );
    assert!(tables("blue/t").is_disjoint(&tables("red/t")));
}

#[test]
fn an_invalid_trench_keeps_its_allocation_and_holds_its_nodes() {
    let mut i = Input::sample("red", "t");
    let n = nodes(&[("n1", "a"), ("n2", "a")]);
    let (good, _) = run(&i, &n, &BTreeMap::new());
    i.flows[0].spec.stream = "missing".into();
    // n2 leaves while the trench is invalid: nothing is freed until it is fixed.
    let (out, ps) = run(&i, &nodes(&[("n1", "a")]), &good.allocations);
    assert!(out.valid.is_empty());
    let e = out.errors.iter().find(|e| e.kind == "Flow").unwrap();
    assert_eq!(
        (e.name.as_str(), e.field.as_str()),
        ("red/f-low", "spec.stream")
    );
    assert!(
        e.message.contains("\"missing\" does not exist"),
        "{}",
        e.message
    );
    assert_eq!(out.allocations["red/t"], good.allocations["red/t"]);
    let held = &ps["red/t"];
    assert_eq!(held.len(), 2);
    assert!(held.iter().all(|p| !p.is_valid()));
}

#[test]
fn meridio_rules_the_schema_cannot_state_are_errors_naming_the_field() {
    let check = |edit: &dyn Fn(&mut Input)| -> Vec<String> {
        let mut i = Input::sample("red", "t");
        edit(&mut i);
        let ds = domains(i.objects(), &mut Vec::new());
        validate(&ds[0])
            .errors
            .iter()
            .map(|e| format!("{} {} {}: {}", e.kind, e.name, e.field, e.message))
            .collect()
    };
    let has = |errs: Vec<String>, needle: &str| {
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "{needle:?} not in {errs:#?}"
        );
    };
    has(
        check(&|i| i.flows[1].spec.destination_ports = vec!["80".into(), "70-90".into()]),
        "Flow red/f-high spec.destinationPorts[1]: \"70-90\" overlaps",
    );
    has(
        check(&|i| i.flows[1].spec.source_ports = vec!["any".into(), "22".into()]),
        "spec.sourcePorts[1]",
    );
    has(
        check(&|i| {
            i.flows[1].spec.source_subnets = vec!["10.0.0.0/8".into(), "10.1.0.0/16".into()]
        }),
        "overlaps sourceSubnets[0]",
    );
    has(
        check(&|i| i.flows[1].spec.source_subnets = vec!["10.0.0.1/8".into()]),
        "has host bits",
    );
    has(
        check(&|i| i.flows[1].spec.destination_ports = vec!["65535".into()]),
        "cannot be matched by a kernel FIB rule",
    );
    has(
        check(&|i| i.trenches[0].spec.ipam.conduit_prefix_length_v4 = 12),
        "prefix lengths grow",
    );
    has(
        check(&|i| i.flows[1].spec.vips.push("nope".into())),
        "Vip \"nope\" does not exist",
    );
    has(
        check(&|i| i.vips[0].spec.address = "20.0.0.1/24".into()),
        "Vip red/vip-v4 spec.address",
    );
    // A VIP feeds one conduit.
    has(
        check(&|i| {
            i.conduits
                .push(obj("Conduit", "red", "c2", Some("t"), json!({})));
            i.streams[1].spec.conduit = "c2".into();
        }),
        "a vip feeds one conduit",
    );
    // No VIP or conduit shared between attractors.
    has(
        check(&|i| {
            let mut b = i.attractors[0].clone();
            b.metadata.name = Some("attr-b".into());
            i.attractors.push(b);
        }),
        "cannot be shared between attractors",
    );
    // Port NATs.
    has(
        check(&|i| {
            i.conduits[0].spec = serde_json::from_value(json!({"destinationPortNats": [
                {"port": 80, "targetPort": 8080, "vips": ["vip-v4"], "protocol": "tcp"},
                {"port": 8080, "targetPort": 9090, "vips": ["vip-v4"], "protocol": "tcp"}
            ]}))
            .unwrap();
        }),
        "[0] and [1] are colliding",
    );
    // Gateways.
    has(
        check(&|i| i.gateways[3].spec.bgp = None),
        "spec.bgp.remoteAsn",
    );
    has(
        check(&|i| i.gateways[3].spec.bgp.as_mut().unwrap().hold_time = Some("2s".into())),
        "at least 3s",
    );
    has(
        check(&|i| i.gateways[0].spec.address = "10.0.0.1".into()),
        "is not on the interface's networks",
    );
    // Interface prefixes follow the trench's family.
    has(
        check(&|i| i.attractors[0].spec.interface.ipv6_prefix = None),
        "spec.interface.ipv6Prefix",
    );
    // A missing trench, a missing stream.
    has(
        check(&|i| i.trenches.clear()),
        "trench \"t\" does not exist in namespace \"red\"",
    );
    has(
        check(&|i| i.streams.clear()),
        "Stream \"s1\" does not exist",
    );
    // The sample itself is clean.
    assert!(check(&|_| {}).is_empty());
}

#[test]
fn a_child_without_the_trench_label_is_an_error_and_belongs_to_no_trench() {
    let mut i = Input::sample("red", "t");
    i.vips[0].metadata.labels = None;
    let mut errors = Vec::new();
    let ds = domains(i.objects(), &mut errors);
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].kind.as_str(), errors[0].field.as_str()),
        ("Vip", "metadata.labels.trench")
    );
    assert_eq!(ds[0].vips.len(), 1);
}

#[test]
fn port_ranges_are_narrowed_to_what_a_fib_rule_matches() {
    assert_eq!(rule_ports((0, 65535)), Some(None));
    assert_eq!(rule_ports((0, 1000)), Some(Some("1-1000".into())));
    assert_eq!(rule_ports((1000, 65535)), Some(Some("1000-65534".into())));
    assert_eq!(rule_ports((80, 80)), Some(Some("80".into())));
    assert_eq!(rule_ports((0, 0)), None);
    assert_eq!(rule_ports((65535, 65535)), None);
    // A compiled flow with such ranges validates as a routing spec.
    let mut i = Input::sample("red", "t");
    i.flows[1].spec.destination_ports = vec!["0-79".into(), "1000-65535".into()];
    let (out, ps) = run(&i, &nodes(&[("n1", "a")]), &BTreeMap::new());
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert!(ps["red/t"].iter().all(Policy::is_valid));
}

#[test]
fn ports_parse_as_meridio_writes_them() {
    assert_eq!(parse_ports("any"), Ok(None));
    assert_eq!(parse_ports("80"), Ok(Some((80, 80))));
    assert_eq!(parse_ports("0-65535"), Ok(Some((0, 65535))));
    for bad in ["65536", "90-80", "http", "1-2-3", "-1", ""] {
        assert!(parse_ports(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_single_family_trench_accepts_both_prefixes_as_meridio_requires_and_uses_its_own() {
    for (family, gw, vip, want) in [
        ("ipv4", "169.254.100.1", "20.0.0.1/32", "169.254.100.2/24"),
        ("ipv6", "100:100::1", "2000::1/128", "100:100::2/64"),
    ] {
        let tr = Some("trench-a");
        let mut i = Input::default();
        i.trenches.push(obj(
            "Trench",
            "red",
            "trench-a",
            None,
            json!({"ipFamily": family, "dataPlane": "node"}),
        ));
        // Meridio's samples: the attractor carries both prefixes whatever the family.
        i.attractors.push(obj(
            "Attractor",
            "red",
            "attr",
            tr,
            json!({
                "nodeSelector": {"matchLabels": {"role": "a"}},
                "interface": {"name": "ext-vlan.100", "link": "eth0", "vlanId": 100,
                              "ipv4Prefix": "169.254.100.0/24", "ipv6Prefix": "100:100::/64"},
                "gateways": ["gw"], "vips": ["vip"]
            }),
        ));
        i.gateways.push(obj(
            "Gateway",
            "red",
            "gw",
            tr,
            json!({"address": gw, "protocol": "static"}),
        ));
        i.vips
            .push(obj("Vip", "red", "vip", tr, json!({"address": vip})));
        let n = nodes(&[("n1", "a")]);
        let (out, _) = run(&i, &n, &BTreeMap::new());
        assert!(out.errors.is_empty(), "{family}: {:?}", out.errors);
        assert!(out.valid.contains("red/trench-a"), "{family}");
        assert_eq!(
            out.allocations["red/trench-a"].node_addresses["attr"]["n1"],
            [want],
            "{family}: only the trench's family gets an address"
        );
    }
}

#[test]
fn byte_matches_are_checked_and_only_the_meridio_data_plane_takes_them() {
    let errors = |data_plane: &str, matches: &[&str]| -> Vec<String> {
        let mut i = Input::sample("red", "t");
        i.trenches[0].spec.data_plane = serde_json::from_value(json!(data_plane)).unwrap();
        i.flows[0].spec.byte_matches = matches.iter().map(|m| (*m).to_owned()).collect();
        let ds = domains(i.objects(), &mut Vec::new());
        validate(&ds[0])
            .errors
            .iter()
            .filter(|e| e.field.starts_with("spec.byteMatches"))
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    };
    assert_eq!(
        errors("meridio", &["tcp[13:1] & 0x02 = 0x02"]),
        Vec::<String>::new()
    );
    let bad = errors("meridio", &["udp[0:2]=53", "tcp[13:3] = 1"]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("spec.byteMatches[1]: \"tcp[13:3] = 1\""),
        "{bad:?}"
    );
    let node = errors("node", &["udp[0:2]=53"]);
    assert_eq!(node.len(), 1, "{node:?}");
    assert!(node[0].contains("use dataPlane: meridio"), "{node:?}");
}

#[test]
fn a_node_trench_refuses_a_network_attachment_interface() {
    let mut i = Input::sample("red", "t");
    i.attractors[0].spec.interface.network_attachments =
        vec![serde_json::from_value(json!({"name": "vlan-100"})).unwrap()];
    let ds = domains(i.objects(), &mut Vec::new());
    let errors: Vec<String> = validate(&ds[0])
        .errors
        .iter()
        .map(|e| e.field.clone())
        .collect();
    assert!(
        errors.contains(&"spec.interface.networkAttachments".to_owned()),
        "{errors:?}"
    );
}

/// Issue 42: every `network-attachment` Attractor `convert` wrote failed `plan`, which
/// demanded `ipv4Prefix`/`ipv6Prefix`; Meridio's webhook forbids them for that type (the
/// attachment gives the addresses).
#[test]
fn a_network_attachment_interface_needs_no_prefixes() {
    let mut i = Input::sample("red", "t");
    i.trenches[0].spec.data_plane = Default::default();
    let iface = &mut i.attractors[0].spec.interface;
    iface.network_attachments = vec![serde_json::from_value(json!({"name": "vlan-100"})).unwrap()];
    iface.ipv4_prefix = None;
    iface.ipv6_prefix = None;
    let ds = domains(i.objects(), &mut Vec::new());
    let fields: Vec<String> = validate(&ds[0])
        .errors
        .iter()
        .map(|e| e.field.clone())
        .collect();
    assert!(!fields.iter().any(|f| f.ends_with("Prefix")), "{fields:?}");
}

/// A node of an attractor (its interface untagged on `v0`) and a gateway (`v1`, moved
/// into a namespace of its own): TCP from the gateway side to each VIP on a port a flow
/// selects connects and gets the node's answer, for both families; a port no flow
/// selects is not the node's.
#[test]
fn a_tcp_connection_to_each_vip_from_the_gateway_side_is_answered_by_the_node() {
    use std::{
        io::{Read, Write},
        net::{SocketAddr, TcpListener, TcpStream},
        time::Duration,
    };

    use netpolicy_netlink::{Adapter, Ownership, testns::TestNamespace};

    let Some(node) = TestNamespace::new("trench node data plane: TCP to each VIP").unwrap() else {
        return;
    };
    let gw = TestNamespace::new("the gateway side").unwrap().unwrap();
    // The gateway's end of the node's pair replaces the gateway namespace's own pair.
    gw.ip(&["link", "del", "v0"]).unwrap();
    node.ip(&["link", "set", "v1", "netns", gw.name()]).unwrap();
    for step in [
        &["link", "set", "v1", "up"][..],
        &["addr", "add", "169.254.100.1/24", "dev", "v1"],
        &["-6", "addr", "add", "100:100::1/64", "dev", "v1", "nodad"],
    ] {
        gw.ip(step).unwrap();
    }
    node.ip(&["link", "set", "lo", "up"]).unwrap();

    let (ns, t) = ("red", Some("trench-a"));
    let mut i = Input::default();
    i.trenches.push(obj(
        "Trench",
        ns,
        "trench-a",
        None,
        json!({"ipFamily": "dualstack", "dataPlane": "node"}),
    ));
    i.attractors.push(obj(
        "Attractor",
        ns,
        "attr",
        t,
        json!({
            "nodeSelector": {"matchLabels": {"role": "a"}},
            "interface": {"name": "v0", "link": "v0",
                          "ipv4Prefix": "169.254.100.0/24", "ipv6Prefix": "100:100::/64"},
            "gateways": ["gw-v4", "gw-v6"], "vips": ["vip-v4", "vip-v6"], "composites": ["c1"]
        }),
    ));
    for (name, address) in [("gw-v4", "169.254.100.1"), ("gw-v6", "100:100::1")] {
        i.gateways.push(obj(
            "Gateway",
            ns,
            name,
            t,
            json!({"address": address, "protocol": "static"}),
        ));
    }
    for (name, address) in [("vip-v4", "20.0.0.1/32"), ("vip-v6", "2000::1/128")] {
        i.vips
            .push(obj("Vip", ns, name, t, json!({"address": address})));
    }
    i.conduits.push(obj("Conduit", ns, "c1", t, json!({})));
    i.streams
        .push(obj("Stream", ns, "s1", t, json!({"conduit": "c1"})));
    i.flows.push(obj("Flow", ns, "f", t, json!({"stream": "s1", "vips": ["vip-v4", "vip-v6"], "sourceSubnets": ["0.0.0.0/0", "::/0"], "destinationPorts": ["80"], "protocols": ["tcp"], "priority": 1})));
    let (out, _) = run(&i, &nodes(&[("n1", "a")]), &BTreeMap::new());
    let st = &out.allocations["red/trench-a"];
    let spec = compile(&domains(i.objects(), &mut Vec::new())[0], st);
    let desired = spec["n1"].validate("spec").unwrap();
    let mut adapter = Adapter::open(&node.namespace(), Ownership::default()).unwrap();
    let report = adapter.reconcile(&desired, false).unwrap();
    assert_eq!(report.failures().count(), 0, "{report:?}");
    assert!(
        adapter
            .reconcile(&desired, false)
            .unwrap()
            .results
            .is_empty()
    );
    // The gateways route the VIPs to the node's address on the attractor interface.
    let mine = &st.node_addresses["attr"]["n1"];
    let host = |a: &str| a.split('/').next().unwrap().to_owned();
    gw.ip(&["route", "add", "20.0.0.1/32", "via", &host(&mine[0])])
        .unwrap();
    gw.ip(&["-6", "route", "add", "2000::1/128", "via", &host(&mine[1])])
        .unwrap();

    let listener = node.run(|| TcpListener::bind("[::]:80")).unwrap().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let mut s = s;
            let _ = s.write_all(format!("node {}", s.local_addr().unwrap().ip()).as_bytes());
        }
    });
    for vip in ["20.0.0.1:80", "[2000::1]:80"] {
        let to: SocketAddr = vip.parse().unwrap();
        let got = gw
            .run(move || -> std::io::Result<String> {
                let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(3))?;
                s.set_read_timeout(Some(Duration::from_secs(3)))?;
                let mut b = String::new();
                s.read_to_string(&mut b)?;
                Ok(b)
            })
            .unwrap();
        let got = got.unwrap_or_else(|e| {
            panic!(
                "TCP to {vip} from the gateway side: {e}\n{}\n{}",
                node.ip(&["rule"]).unwrap_or_default(),
                node.ip(&["addr"]).unwrap_or_default()
            )
        });
        assert!(got.starts_with("node "), "{vip}: {got}");
        println!("kernel: TCP to {vip} from the gateway side answered ({got})");
    }
    // Only what a flow selects is the node's: another port is not delivered.
    let other = node
        .ip(&[
            "route",
            "get",
            "20.0.0.1",
            "from",
            "169.254.100.1",
            "iif",
            "v0",
            "ipproto",
            "tcp",
            "dport",
            "22",
        ])
        .unwrap_or_else(|e| e.to_string());
    assert!(!other.starts_with("local"), "{other}");
    let local = node
        .ip(&["route", "show", "table", "local", "20.0.0.1"])
        .unwrap();
    assert!(
        local.trim().is_empty(),
        "the VIP's kernel local route is back: {local}"
    );
}
