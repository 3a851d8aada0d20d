//! Kernel tests: each test makes its own network namespace (with a veth pair) and
//! removes it when it ends, also on failure. Needs root and iproute2's `ip`; without
//! root each test prints a SKIP line.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

use netpolicy_core::{
    model::RoutingConfig,
    plan::{Op, SkipReason},
    spec::RoutingSpec,
};
use netpolicy_netlink::{Adapter, Namespace, Outcome, Ownership, testns::TestNamespace};
use serde_json::json;

/// Prints a SKIP line that the test harness does not capture: it shows in every run.
fn skip(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP {why}");
}

/// The crate's [`TestNamespace`] (veth pair `v0`/`v1`, 192.0.2.10/24 and 2001:db8::10/64
/// on `v0`), with the helpers these tests use.
struct Netns {
    inner: TestNamespace,
    name: String,
}

impl Netns {
    /// `None` (and a SKIP line) without root.
    fn new(test: &str) -> Option<Self> {
        let inner = TestNamespace::new(&format!("{test}: kernel tests"))
            .unwrap_or_else(|e| panic!("{e}"))?;
        Some(Self {
            name: inner.name().to_owned(),
            inner,
        })
    }

    fn ip(&self, args: &[&str]) -> String {
        self.inner.ip(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A table's routes; empty when the table does not exist (yet).
    fn table(&self, family: &str, table: &str) -> String {
        self.inner
            .ip(&[family, "route", "show", "table", table])
            .unwrap_or_default()
    }

    fn adapter(&self) -> Adapter {
        Adapter::open(&self.inner.namespace(), Ownership::default()).unwrap()
    }
}

fn config(v: serde_json::Value) -> RoutingConfig {
    let spec: RoutingSpec = serde_json::from_value(v).unwrap();
    spec.validate("spec").unwrap()
}

fn routes_and_rules() -> RoutingConfig {
    config(json!({
        "routes": [
            {"to": "10.20.0.0/16", "via": "192.0.2.1", "table": 100},
            {"to": "10.30.0.0/16", "dev": "v0"},
            {"to": "10.40.0.0/16", "table": 200, "metric": 5,
             "nexthops": [{"via": "192.0.2.1", "weight": 2}, {"via": "192.0.2.2"}]},
            {"to": "2001:db8:1::/48", "via": "2001:db8::1", "table": 100},
            {"to": "2001:db8:2::/48", "table": 200,
             "nexthops": [{"via": "2001:db8::1"}, {"via": "2001:db8::2"}]},
            {"to": "198.51.100.0/24", "dev": "v0", "table": 300, "scope": "link", "src": "192.0.2.10"}
        ],
        "rules": [
            {"priority": 1, "from": "10.1.0.0/16", "table": 100},
            {"priority": 999, "ipProto": "tcp", "dport": "443", "sport": "1024-65000", "table": 200},
            {"priority": 1000, "fwmark": "0x10/0xff", "table": 300},
            {"priority": 20000, "iif": "v0", "table": 100},
            {"priority": 32765, "oif": "v1", "action": "blackhole"},
            {"priority": 2, "from": "2001:db8:9::/48", "table": 100}
        ]
    }))
}

#[test]
fn routes_and_rules_are_installed_read_back_equal_and_marked() {
    let Some(ns) = Netns::new("routes_and_rules") else {
        return;
    };
    let mut a = ns.adapter();
    let desired = routes_and_rules();
    let report = a.reconcile(&desired, false).unwrap();
    let failures: Vec<_> = report.failures().collect();
    assert!(failures.is_empty(), "{failures:#?}");
    // 6 routes; rules without a prefix go into both families: 1 + 2 + 2 + 2 + 2 + 1.
    assert_eq!(report.results.len(), 6 + 10, "{:#?}", report.results);
    // Read back: nothing left to do.
    let again = a.plan(&desired).unwrap();
    assert!(again.ops.is_empty(), "{:#?}", again.ops);
    // The kernel's own view, through iproute2.
    let t100 = ns.ip(&["route", "show", "table", "100"]);
    assert!(
        t100.contains("10.20.0.0/16 via 192.0.2.1 dev v0 proto 203"),
        "{t100}"
    );
    let t200 = ns.ip(&["route", "show", "table", "200"]);
    assert!(
        t200.contains("nexthop via 192.0.2.1 dev v0 weight 2"),
        "{t200}"
    );
    let t200v6 = ns.ip(&["-6", "route", "show", "table", "200"]);
    assert!(t200v6.contains("nexthop via 2001:db8::2"), "{t200v6}");
    let rules = ns.ip(&["rule", "show"]);
    for want in [
        "1:\tfrom 10.1.0.0/16 lookup 100 proto 203",
        "999:\tfrom all ipproto tcp sport 1024-65000 dport 443 lookup 200 proto 203",
        "1000:\tfrom all fwmark 0x10/0xff lookup 300 proto 203",
        "20000:\tfrom all iif v0 lookup 100 proto 203",
        "32765:\tfrom all oif v1 blackhole proto 203",
    ] {
        assert!(rules.contains(want), "{want:?} not in\n{rules}");
    }
    let rules6 = ns.ip(&["-6", "rule", "show"]);
    assert!(
        rules6.contains("2:\tfrom 2001:db8:9::/48 lookup 100 proto 203"),
        "{rules6}"
    );
}

/// Route types: `local` (a destination delivered to this host only where its table is
/// looked up), `blackhole`, `unreachable`, `prohibit`, both families; read back equal
/// (nothing to do on the next pass), shown by iproute2 with the type, removed exactly.
#[test]
fn local_and_drop_routes_are_installed_read_back_equal_and_removed() {
    let Some(ns) = Netns::new("route_types") else {
        return;
    };
    // As on any host: the loopback is up (IPv6 refuses a route over a down device).
    ns.ip(&["link", "set", "lo", "up"]);
    let mut a = ns.adapter();
    let desired = config(json!({
        "routes": [
            {"type": "local", "to": "20.0.0.1/32", "dev": "lo", "table": 20001},
            {"type": "local", "to": "2000::1/128", "dev": "lo", "table": 20001},
            {"type": "local", "to": "40.0.0.0/24", "dev": "lo", "table": 20002},
            {"type": "blackhole", "to": "10.66.0.0/16", "table": 20001},
            {"type": "unreachable", "to": "10.67.0.0/16", "table": 20001},
            {"type": "prohibit", "to": "2001:db8:67::/48", "table": 20001}
        ],
        "rules": [{"priority": 100, "to": "20.0.0.1/32", "table": 20001}]
    }));
    let report = a.reconcile(&desired, false).unwrap();
    let failures: Vec<_> = report.failures().collect();
    assert!(failures.is_empty(), "{failures:#?}");
    let again = a.plan(&desired).unwrap();
    assert!(again.ops.is_empty(), "{:#?}", again.ops);
    let t = ns.table("-4", "20001");
    for want in [
        "local 20.0.0.1 dev lo proto 203 scope host",
        "blackhole 10.66.0.0/16 proto 203",
        "unreachable 10.67.0.0/16 proto 203",
    ] {
        assert!(t.contains(want), "{want:?} not in\n{t}");
    }
    let t6 = ns.table("-6", "20001");
    assert!(t6.contains("local 2000::1 dev lo proto 203"), "{t6}");
    assert!(t6.contains("prohibit 2001:db8:67::/48"), "{t6}");
    // The kernel delivers a VIP its rule sends there to the host itself.
    let got = ns.ip(&["route", "get", "20.0.0.1", "from", "192.0.2.1", "iif", "v0"]);
    assert!(
        got.starts_with("local 20.0.0.1") && got.contains("table 20001"),
        "{got}"
    );
    // Removed exactly: the kernel's own local routes (table local) stay.
    let before_local = ns.table("-4", "local");
    let report = a.reconcile(&RoutingConfig::default(), false).unwrap();
    assert!(report.failures().next().is_none(), "{:#?}", report.results);
    assert_eq!(ns.table("-4", "20001").trim(), "");
    assert_eq!(ns.table("-6", "20001").trim(), "");
    assert_eq!(ns.table("-4", "local"), before_local);
}

#[test]
fn a_restarted_adapter_finds_its_objects_and_cleanup_removes_only_them() {
    let Some(ns) = Netns::new("restart_cleanup") else {
        return;
    };
    let desired = routes_and_rules();
    ns.adapter().reconcile(&desired, false).unwrap();
    // Foreign objects, one identical to a desired route.
    ns.ip(&[
        "route",
        "add",
        "10.99.0.0/16",
        "via",
        "192.0.2.1",
        "table",
        "100",
    ]);
    ns.ip(&[
        "rule",
        "add",
        "priority",
        "1500",
        "from",
        "10.9.0.0/16",
        "table",
        "100",
    ]);
    // A new process: a fresh adapter sees everything as already done.
    let mut b = ns.adapter();
    let left = b.plan(&desired).unwrap().ops;
    assert!(left.is_empty(), "{left:#?}");
    let report = b.cleanup().unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    let t100 = ns.ip(&["route", "show", "table", "100"]);
    assert_eq!(
        t100.trim(),
        "10.99.0.0/16 via 192.0.2.1 dev v0",
        "only the foreign route stays"
    );
    let rules = ns.ip(&["rule", "show"]);
    assert!(
        rules.contains("1500:") && !rules.contains("proto 203"),
        "{rules}"
    );
    // Cleaning up twice is a no-op.
    assert!(b.cleanup().unwrap().results.is_empty());
}

#[test]
fn foreign_objects_with_a_desired_identity_are_never_touched() {
    let Some(ns) = Netns::new("foreign") else {
        return;
    };
    ns.ip(&[
        "route",
        "add",
        "10.20.0.0/16",
        "via",
        "192.0.2.1",
        "table",
        "100",
    ]);
    ns.ip(&[
        "route",
        "add",
        "10.21.0.0/16",
        "via",
        "192.0.2.2",
        "table",
        "100",
    ]);
    let desired = config(json!({"routes": [
        {"to": "10.20.0.0/16", "via": "192.0.2.1", "table": 100},
        {"to": "10.21.0.0/16", "via": "192.0.2.1", "table": 100},
        {"to": "10.22.0.0/16", "via": "192.0.2.1", "table": 100}
    ]}));
    let mut a = ns.adapter();
    let report = a.reconcile(&desired, false).unwrap();
    let reasons: Vec<SkipReason> = report.skipped.iter().map(|s| s.reason).collect();
    assert_eq!(
        reasons,
        [SkipReason::ForeignIdentical, SkipReason::ForeignDiffers]
    );
    assert_eq!(report.results.len(), 1);
    let t100 = ns.ip(&["route", "show", "table", "100"]);
    assert!(
        t100.contains("10.21.0.0/16 via 192.0.2.2 dev v0 \n")
            || t100.contains("10.21.0.0/16 via 192.0.2.2 dev v0\n"),
        "{t100}"
    );
    a.cleanup().unwrap();
    let t100 = ns.ip(&["route", "show", "table", "100"]);
    assert!(
        t100.contains("10.20.0.0/16") && t100.contains("10.21.0.0/16") && !t100.contains("10.22."),
        "{t100}"
    );
}

#[test]
fn one_failing_item_is_reported_with_its_errno_and_the_others_apply() {
    let Some(ns) = Netns::new("partial") else {
        return;
    };
    let desired = config(json!({"routes": [
        {"to": "10.20.0.0/16", "via": "192.0.2.1", "table": 100},
        {"to": "10.21.0.0/16", "via": "203.0.113.1", "table": 100},
        {"to": "10.22.0.0/16", "via": "192.0.2.1", "table": 100}
    ]}));
    let mut a = ns.adapter();
    let report = a.reconcile(&desired, false).unwrap();
    let failed: Vec<_> = report.failures().collect();
    assert_eq!(failed.len(), 1, "{report:#?}");
    let Op::ReplaceRoute(r) = &failed[0].op else {
        panic!("{failed:?}")
    };
    assert_eq!(r.to.to_string(), "10.21.0.0/16");
    let Outcome::Failed { errno, message } = &failed[0].outcome else {
        panic!()
    };
    assert_eq!(*errno, Some(101), "{message}"); // ENETUNREACH
    assert!(message.contains("unreachable"), "{message}");
    let t100 = ns.ip(&["route", "show", "table", "100"]);
    assert!(
        t100.contains("10.20.0.0/16") && t100.contains("10.22.0.0/16"),
        "{t100}"
    );
}

#[test]
fn drift_is_repaired_and_reported_and_dry_run_changes_nothing() {
    let Some(ns) = Netns::new("drift") else {
        return;
    };
    let desired = routes_and_rules();
    let mut a = ns.adapter();
    // Dry run first: operations listed, nothing installed.
    let dry = a.reconcile(&desired, true).unwrap();
    assert!(dry.results.iter().all(|r| r.outcome == Outcome::Planned));
    assert!(!dry.results.is_empty());
    assert!(ns.table("-4", "100").trim().is_empty());
    a.reconcile(&desired, false).unwrap();
    // Behind our back: an owned route deleted, an owned rule deleted.
    ns.ip(&["route", "del", "10.20.0.0/16", "table", "100"]);
    ns.ip(&["rule", "del", "priority", "1"]);
    let report = a.reconcile(&desired, false).unwrap();
    assert_eq!(report.drift.len(), 2, "{:#?}", report.drift);
    assert!(report.failures().next().is_none());
    assert!(a.plan(&desired).unwrap().ops.is_empty());
}

#[test]
fn an_address_without_its_local_route_is_a_source_and_its_local_route_stays_gone() {
    let Some(ns) = Netns::new("address without local route") else {
        return;
    };
    let desired = config(json!({
        "addresses": [
            {"dev": "lo", "address": "20.0.0.1/32", "localRoute": false},
            {"dev": "lo", "address": "2000::1/128", "localRoute": false},
            {"dev": "lo", "address": "20.0.0.2/32"}
        ]
    }));
    let mut a = ns.adapter();
    let r = a.reconcile(&desired, false).unwrap();
    assert!(r.failures().next().is_none(), "{r:?}");
    assert!(a.plan(&desired).unwrap().ops.is_empty());
    let local = |to: &str, fam: &str| ns.ip(&[fam, "route", "show", "table", "local", to]);
    assert!(
        local("20.0.0.1", "-4").trim().is_empty(),
        "{}",
        local("20.0.0.1", "-4")
    );
    assert!(
        local("2000::1", "-6").trim().is_empty(),
        "{}",
        local("2000::1", "-6")
    );
    assert!(local("20.0.0.2", "-4").contains("local 20.0.0.2"));
    // The address is the host's: a source for the routing decision (an IPv4 source
    // that is no address of the host has no route at all).
    let out = ns.ip(&["route", "get", "192.0.2.1", "from", "20.0.0.1"]);
    assert!(out.contains("dev v0"), "{out}");
    // Not delivered by the local table: no rule selects a table that delivers it.
    let inbound = ns
        .inner
        .ip(&["route", "get", "20.0.0.1", "from", "192.0.2.1", "iif", "v0"])
        .unwrap_or_else(|e| e.to_string());
    assert!(!inbound.starts_with("local"), "{inbound}");
    // lo down and up: the kernel makes the local routes again; the next pass removes
    // them and calls it drift.
    ns.ip(&["link", "set", "lo", "down"]);
    ns.ip(&["link", "set", "lo", "up"]);
    assert!(local("20.0.0.1", "-4").contains("local 20.0.0.1"));
    let r = a.reconcile(&desired, false).unwrap();
    assert!(
        r.drift
            .iter()
            .any(|op| matches!(op, Op::DeleteLocalRoute { address, .. } if address.to_string() == "20.0.0.1/32")),
        "{:#?}",
        r.drift
    );
    assert!(local("20.0.0.1", "-4").trim().is_empty());
    assert!(a.plan(&desired).unwrap().ops.is_empty());
}

/// A namespace for VLAN tests, with a dummy link `d0` (up) beside the veth pair; `None`
/// (and a SKIP line naming the VM runner) when the kernel has no 802.1Q or dummy.
fn vlan_netns(test: &str) -> Option<Netns> {
    let ns = Netns::new(test)?;
    let probe = Command::new("ip")
        .args([
            "-n", &ns.name, "link", "add", "link", "v0", "name", "probe.7", "type", "vlan", "id",
            "7",
        ])
        .output()
        .unwrap();
    let dummy = Command::new("ip")
        .args(["-n", &ns.name, "link", "add", "d0", "type", "dummy"])
        .output()
        .unwrap();
    if !probe.status.success() || !dummy.status.success() {
        // Inside scripts/vm-test the kernel has 802.1Q and dummy: never skip there.
        assert!(
            std::env::var_os("NETPOLICY_REQUIRE_VLAN").is_none(),
            "{test}: NETPOLICY_REQUIRE_VLAN is set but this kernel refused a VLAN or dummy \
             link: {} / {}",
            String::from_utf8_lossy(&probe.stderr).trim(),
            String::from_utf8_lossy(&dummy.stderr).trim()
        );
        skip(&format!(
            "{test}: this kernel has no 802.1Q VLAN or dummy support ({}); run \
             scripts/vm-test, which boots a stock kernel and runs this suite there",
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
        return None;
    }
    ns.ip(&["link", "del", "probe.7"]);
    ns.ip(&["link", "set", "d0", "up"]);
    Some(ns)
}

fn vlans() -> RoutingConfig {
    config(json!({"vlans": [
        {"link": "v0", "id": 100, "mtu": 1400, "addresses": ["10.100.0.5/24", "fd00:100::5/64"]},
        {"link": "v0", "id": 200, "protocol": "802.1ad", "name": "qinq200"},
        {"link": "d0", "id": 300, "addresses": ["10.30.0.5/24"]},
        {"link": "d0", "id": 301, "protocol": "802.1ad", "mtu": 1300}
    ]}))
}

#[test]
fn vlans_8021q_and_8021ad_on_veth_and_dummy_parents_with_addresses_and_mtu() {
    let Some(ns) = vlan_netns("vlans_on_veth_and_dummy") else {
        return;
    };
    let mut a = ns.adapter();
    let desired = vlans();
    let report = a.reconcile(&desired, false).unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    let left = a.plan(&desired).unwrap().ops;
    assert!(left.is_empty(), "read back differs: {left:#?}");
    for (dev, want) in [
        ("v0.100", "vlan protocol 802.1Q id 100"),
        ("qinq200", "vlan protocol 802.1ad id 200"),
        ("d0.300", "vlan protocol 802.1Q id 300"),
        ("d0.301", "vlan protocol 802.1ad id 301"),
    ] {
        let d = ns.ip(&["-d", "link", "show", dev]);
        assert!(d.contains(want), "{dev}: {d}");
        assert!(d.contains("alias netpolicy"), "{dev} not marked: {d}");
        assert!(
            d.contains("state UP") || d.contains(",UP"),
            "{dev} not up: {d}"
        );
    }
    assert!(ns.ip(&["link", "show", "v0.100"]).contains("mtu 1400"));
    assert!(ns.ip(&["link", "show", "d0.301"]).contains("mtu 1300"));
    let addrs = ns.ip(&["addr", "show", "v0.100"]);
    assert!(
        addrs.contains("inet 10.100.0.5/24") && addrs.contains("inet6 fd00:100::5/64"),
        "{addrs}"
    );
}

#[test]
fn routes_and_rules_over_vlan_interfaces_go_in_one_pass() {
    let Some(ns) = vlan_netns("routes_over_vlans") else {
        return;
    };
    let desired = config(json!({
        "vlans": [{"link": "v0", "id": 100, "addresses": ["10.100.0.5/24"]}],
        "routes": [
            {"to": "10.200.0.0/16", "via": "10.100.0.1", "dev": "v0.100", "table": 100},
            {"to": "10.201.0.0/16", "dev": "v0.100", "table": 100}
        ],
        "rules": [
            {"priority": 1000, "iif": "v0.100", "table": 100},
            {"priority": 1001, "oif": "v0.100", "from": "10.100.0.0/24", "table": 100}
        ]
    }));
    let mut a = ns.adapter();
    let report = a.reconcile(&desired, false).unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    assert!(a.plan(&desired).unwrap().ops.is_empty());
    let t = ns.table("-4", "100");
    assert!(
        t.contains("10.200.0.0/16 via 10.100.0.1 dev v0.100 proto 203"),
        "{t}"
    );
    assert!(
        ns.ip(&["rule", "show"])
            .contains("iif v0.100 lookup 100 proto 203")
    );
}

#[test]
fn vlans_survive_a_restart_and_cleanup_leaves_foreign_vlans() {
    let Some(ns) = vlan_netns("vlan_restart_cleanup") else {
        return;
    };
    ns.ip(&[
        "link", "add", "link", "v0", "name", "v0.50", "type", "vlan", "id", "50",
    ]);
    let desired = vlans();
    ns.adapter().reconcile(&desired, false).unwrap();
    let mut b = ns.adapter();
    assert!(
        b.plan(&desired).unwrap().ops.is_empty(),
        "a restarted adapter finds its VLANs"
    );
    let report = b.cleanup().unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    let links = ns.ip(&["link", "show"]);
    for gone in ["v0.100", "qinq200", "d0.300", "d0.301"] {
        assert!(!links.contains(gone), "{gone} left behind:\n{links}");
    }
    assert!(
        links.contains("v0.50@v0"),
        "the foreign VLAN stays:\n{links}"
    );
}

#[test]
fn a_deleted_vlan_is_recreated_with_its_addresses_and_routes_and_reported_as_drift() {
    let Some(ns) = vlan_netns("vlan_drift") else {
        return;
    };
    let desired = config(json!({
        "vlans": [{"link": "v0", "id": 100, "mtu": 1400, "addresses": ["10.100.0.5/24"]}],
        "routes": [{"to": "10.200.0.0/16", "via": "10.100.0.1", "table": 100}]
    }));
    let mut a = ns.adapter();
    a.reconcile(&desired, false).unwrap();
    // Behind our back: the VLAN (and with it its address and route) is deleted.
    ns.ip(&["link", "del", "v0.100"]);
    let report = a.reconcile(&desired, false).unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    assert!(
        report
            .drift
            .iter()
            .any(|op| matches!(op, Op::CreateLink(v) if v.id == 100)),
        "{:#?}",
        report.drift
    );
    assert!(
        report
            .drift
            .iter()
            .any(|op| matches!(op, Op::ReplaceRoute(_))),
        "{:#?}",
        report.drift
    );
    assert!(a.plan(&desired).unwrap().ops.is_empty());
    assert!(ns.ip(&["addr", "show", "v0.100"]).contains("10.100.0.5/24"));
    assert!(ns.table("-4", "100").contains("10.200.0.0/16"));
    // An MTU changed behind our back is one operation.
    ns.ip(&["link", "set", "v0.100", "mtu", "1300"]);
    let report = a.reconcile(&desired, false).unwrap();
    assert_eq!(report.results.len(), 1, "{report:#?}");
    assert!(matches!(report.results[0].op, Op::SetMtu { mtu: 1400, .. }));
}

/// N3: 1% churn on 10,000 routes is exactly one operation per changed route, and the
/// next pass has nothing to do.
#[test]
fn one_percent_churn_is_one_operation_per_changed_route() {
    let Some(ns) = Netns::new("churn") else {
        return;
    };
    let routes = |changed: &dyn Fn(u32) -> bool| {
        let list: Vec<serde_json::Value> = (0..10_000u32)
            .map(|i| {
                let via = if changed(i) { "192.0.2.2" } else { "192.0.2.1" };
                json!({"to": format!("10.{}.{}.0/24", i / 256, i % 256), "via": via, "table": 100})
            })
            .collect();
        config(json!({ "routes": list }))
    };
    let mut a = ns.adapter();
    let first = a.reconcile(&routes(&|_| false), false).unwrap();
    assert_eq!(first.results.len(), 10_000);
    assert!(first.failures().next().is_none());
    let churned = routes(&|i| i % 100 == 7);
    let report = a.reconcile(&churned, false).unwrap();
    assert_eq!(report.results.len(), 100, "exactly the changed routes");
    assert!(
        report
            .results
            .iter()
            .all(|r| matches!(&r.op, Op::ReplaceRoute(route) if route.via == Some("192.0.2.2".parse().unwrap())))
    );
    assert!(a.plan(&churned).unwrap().ops.is_empty());
}

/// Regression: a foreign route with our route's identity (table, destination, metric),
/// prepended beside it, must survive cleanup and changes of ours. The old delete named
/// only the identity and the kernel removed the first match: the foreign one.
#[test]
fn cleanup_and_changes_never_remove_a_foreign_route_that_shares_our_identity() {
    let Some(ns) = Netns::new("foreign_twin") else {
        return;
    };
    let mut a = ns.adapter();
    let ours = config(json!({"routes": [
        {"to": "10.20.0.0/16", "via": "192.0.2.1", "table": 100}
    ]}));
    assert!(a.reconcile(&ours, false).unwrap().is_converged());
    ns.ip(&[
        "route",
        "prepend",
        "10.20.0.0/16",
        "via",
        "192.0.2.2",
        "table",
        "100",
        "proto",
        "static",
    ]);
    let both = ns.table("-4", "100");
    assert!(
        both.contains("via 192.0.2.2 dev v0 proto static")
            && both.contains("via 192.0.2.1 dev v0 proto 203"),
        "{both}"
    );

    // Our route changes: ours is replaced, the foreign twin stays as it was.
    let changed = config(json!({"routes": [
        {"to": "10.20.0.0/16", "via": "192.0.2.3", "table": 100}
    ]}));
    let report = a.reconcile(&changed, false).unwrap();
    assert!(report.is_converged(), "{report:#?}");
    let t = ns.table("-4", "100");
    assert!(
        t.contains("via 192.0.2.2 dev v0 proto static")
            && t.contains("via 192.0.2.3 dev v0 proto 203")
            && !t.contains("192.0.2.1"),
        "{t}"
    );

    // Cleanup (a fresh process, as `netpolicy agent --cleanup` is) removes ours only.
    let report = ns.adapter().cleanup().unwrap();
    assert!(report.is_converged(), "{report:#?}");
    assert_eq!(
        ns.table("-4", "100").trim(),
        "10.20.0.0/16 via 192.0.2.2 dev v0 proto static"
    );
}

/// Regression: a desired VLAN whose name a foreign non-VLAN link holds (a veth with
/// its own alias) was treated as present: the veth got our alias, was set up and got
/// our address. It must be refused, with that link left exactly as it was.
#[test]
fn a_vlan_named_like_a_foreign_veth_is_refused_and_the_veth_is_left_alone() {
    let Some(ns) = Netns::new("foreign_link") else {
        return;
    };
    ns.ip(&["link", "add", "w0", "type", "veth", "peer", "name", "w1"]);
    ns.ip(&["link", "set", "w0", "alias", "theirs"]);
    let before = ns.ip(&["-d", "addr", "show", "dev", "w0"]);
    let desired = config(json!({
        "vlans": [{"link": "v0", "id": 100, "name": "w0", "addresses": ["10.100.0.5/24"]}],
        "routes": [{"to": "10.50.0.0/16", "via": "192.0.2.1", "table": 100}]
    }));
    let mut a = ns.adapter();
    let report = a.reconcile(&desired, false).unwrap();
    let reasons: Vec<SkipReason> = report.skipped.iter().map(|s| s.reason).collect();
    assert_eq!(reasons, [SkipReason::NameTakenByOtherLink], "{report:#?}");
    assert!(!report.is_converged());
    assert!(
        report
            .results
            .iter()
            .all(|r| matches!(&r.op, Op::ReplaceRoute(_))),
        "only the route is applied: {report:#?}"
    );
    assert_eq!(ns.ip(&["-d", "addr", "show", "dev", "w0"]), before);
    // Cleanup leaves the veth too.
    a.cleanup().unwrap();
    assert_eq!(ns.ip(&["-d", "addr", "show", "dev", "w0"]), before);
}

/// Rules at every priority validation accepts are found again and removed, including
/// below 1000 (an earlier ownership range of 1000..=32765 lost them).
#[test]
fn rules_at_the_edges_of_the_allowed_priorities_are_owned_and_cleaned_up() {
    let Some(ns) = Netns::new("rule_priorities") else {
        return;
    };
    let prios = [1u32, 2, 500, 999, 1000, 16000, 32764, 32765];
    let rules: Vec<_> = prios
        .iter()
        .map(|p| json!({"priority": p, "from": format!("10.{}.0.0/16", p % 250), "table": 100}))
        .collect();
    let desired = config(json!({ "rules": rules }));
    let mut a = ns.adapter();
    assert!(a.reconcile(&desired, false).unwrap().is_converged());
    let shown = ns.ip(&["rule", "show"]);
    for p in prios {
        assert!(shown.contains(&format!("{p}:\tfrom ")), "{p} in {shown}");
    }
    // A fresh adapter owns all of them: nothing to do, and cleanup removes all.
    let mut b = ns.adapter();
    assert!(b.plan(&desired).unwrap().ops.is_empty());
    assert!(b.cleanup().unwrap().is_converged());
    let left = ns.ip(&["rule", "show"]);
    assert!(!left.contains("proto 203"), "{left}");
    // The kernel's own rules are still there.
    assert!(left.contains("32766:") && left.contains("32767:") && left.contains("0:\t"));
}

/// Regression: the kernel reports IPv6 routes with scope global; a device-only IPv6
/// route was expected with scope link and replaced on every pass.
#[test]
fn ipv6_device_only_routes_converge_in_one_pass() {
    let Some(ns) = Netns::new("ipv6_dev_only") else {
        return;
    };
    let desired = config(json!({"routes": [
        {"to": "2001:db8:400::/48", "dev": "v0", "table": 300},
        {"to": "2001:db8:401::/48", "dev": "v0", "table": 300, "scope": "global"},
        {"to": "10.40.0.0/16", "dev": "v0", "table": 300}
    ]}));
    let mut a = ns.adapter();
    assert!(a.reconcile(&desired, false).unwrap().is_converged());
    let again = a.reconcile(&desired, false).unwrap();
    assert!(again.results.is_empty(), "{:#?}", again.results);
    assert!(again.drift.is_empty());
}

mod second_pass {
    //! Property: a second pass over any accepted input makes zero kernel changes. The
    //! inputs are generated routing configs over the namespace's veth pair (gateways
    //! on its subnets, both families, single and multipath routes, every rule
    //! selector, priorities across the whole allowed range); each case runs in one
    //! namespace, cleaned up in between.

    use proptest::prelude::*;

    use super::*;

    fn v4_gw() -> impl Strategy<Value = String> {
        (1u8..=6).prop_map(|h| format!("192.0.2.{h}"))
    }

    fn v6_gw() -> impl Strategy<Value = String> {
        (1u8..=6).prop_map(|h| format!("2001:db8::{h}"))
    }

    fn route() -> impl Strategy<Value = serde_json::Value> {
        let table = prop_oneof![Just(100u32), Just(200), Just(254), Just(1000)];
        let metric = prop_oneof![Just(0u32), Just(5), Just(100)];
        let v4 = (
            0u8..=255,
            prop_oneof![Just(16u8), Just(24), Just(32)],
            prop_oneof![
                v4_gw().prop_map(|g| json!({"via": g})),
                Just(json!({"dev": "v0"})),
                Just(json!({"dev": "v1"})),
                Just(json!({"dev": "v0", "scope": "link"})),
                Just(json!({"dev": "v0", "scope": "global"})),
                Just(json!({"dev": "v0", "scope": "host"})),
                Just(json!({"dev": "v0", "src": "192.0.2.10"})),
                v4_gw().prop_map(|g| json!({"via": g, "dev": "v0"})),
                v4_gw().prop_map(|g| json!({"via": g, "dev": "v0", "onlink": true})),
                (v4_gw(), v4_gw(), 1u16..=4).prop_map(|(a, b, w)| json!({"nexthops": [
                    {"via": a, "weight": w}, {"via": b}]})),
            ],
        )
            .prop_map(|(n, len, rest)| {
                let to = match len {
                    32 => format!("10.{n}.1.1/32"),
                    24 => format!("10.{n}.1.0/24"),
                    _ => format!("10.{n}.0.0/16"),
                };
                (to, rest)
            });
        let v6 = (
            0u16..=0xff,
            prop_oneof![
                v6_gw().prop_map(|g| json!({"via": g})),
                Just(json!({"dev": "v0"})),
                Just(json!({"dev": "v1", "scope": "global"})),
                Just(json!({"dev": "v0", "src": "2001:db8::10"})),
                (v6_gw(), v6_gw()).prop_map(|(a, b)| json!({"nexthops": [{"via": a}, {"via": b}]})),
            ],
        )
            .prop_map(|(n, rest)| (format!("2001:db8:{n:x}::/48"), rest));
        (prop_oneof![v4, v6], table, metric).prop_map(|((to, rest), table, metric)| {
            let mut r = json!({"to": to, "table": table, "metric": metric});
            for (k, v) in rest.as_object().into_iter().flatten() {
                r[k] = v.clone();
            }
            r
        })
    }

    fn rule() -> impl Strategy<Value = serde_json::Value> {
        let selector = prop_oneof![
            (0u8..=255).prop_map(|n| json!({"from": format!("10.{n}.0.0/16")})),
            (0u8..=255).prop_map(|n| json!({"to": format!("10.{n}.0.0/16"), "invert": true})),
            (0u16..=0xff).prop_map(|n| json!({"from": format!("2001:db8:{n:x}::/48")})),
            Just(json!({"iif": "v0"})),
            Just(json!({"oif": "v1"})),
            (1u32..=255).prop_map(|m| json!({"fwmark": format!("{m:#x}/0xff")})),
            (1u32..=255).prop_map(|m| json!({"fwmark": format!("{m:#x}")})),
            (1u16..=1000, 0u16..=1000).prop_map(|(p, w)| json!({
                "ipProto": "tcp", "dport": format!("{p}-{}", p + w)})),
            (1u16..=1000).prop_map(|p| json!({"ipProto": "udp", "sport": p.to_string()})),
        ];
        let action = prop_oneof![
            prop_oneof![Just(100u32), Just(200), Just(5000)].prop_map(|t| json!({"table": t})),
            Just(json!({"action": "blackhole"})),
            Just(json!({"action": "unreachable"})),
            Just(json!({"action": "prohibit"})),
        ];
        (1u32..=32765, selector, action).prop_map(|(p, sel, act)| {
            let mut r = json!({"priority": p});
            for (k, v) in sel.as_object().into_iter().chain(act.as_object()).flatten() {
                r[k] = v.clone();
            }
            r
        })
    }

    /// Generated specs that validation accepts (duplicates of one identity are
    /// refused by validation and are regenerated).
    fn accepted() -> impl Strategy<Value = RoutingConfig> {
        (
            prop::collection::vec(route(), 0..12),
            prop::collection::vec(rule(), 0..8),
        )
            .prop_filter_map(
                "validation refused the generated spec",
                |(routes, rules)| {
                    let spec: RoutingSpec =
                        serde_json::from_value(json!({"routes": routes, "rules": rules})).ok()?;
                    spec.validate("spec").ok()
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn a_second_pass_over_accepted_input_changes_nothing(desired in accepted()) {
            let Some(ns) = Netns::new("second_pass") else {
                return Ok(());
            };
            let mut a = ns.adapter();
            let first = a.reconcile(&desired, false).unwrap();
            let failed: Vec<&Op> = first.failures().map(|r| &r.op).collect();
            // Whatever the kernel accepted, it now holds as desired.
            prop_assert!(first.unconverged.is_empty(), "{:#?}", first);
            // A second pass (and a fresh adapter, as after a restart) plans only the
            // operations the kernel refused in the first; nothing it accepted moves.
            for again in [a.plan(&desired).unwrap(), ns.adapter().plan(&desired).unwrap()] {
                for op in &again.ops {
                    prop_assert!(failed.contains(&op), "{op} planned again after it applied\n{first:#?}");
                }
            }
            let second = a.reconcile(&desired, false).unwrap();
            prop_assert!(second.results.iter().all(|r| !r.outcome.is_ok() || failed.contains(&&r.op)),
                "{second:#?}");
            prop_assert!(a.cleanup().unwrap().is_converged());
        }
    }
}

/// `tableHardSync` as ipruler does it: in a listed table every route that is not
/// desired goes, and so does every rule, foreign or not, that looks the table up and is
/// not desired; rules looking up other tables stay.
#[test]
fn a_hard_synced_table_loses_foreign_routes_and_the_foreign_rules_that_look_it_up() {
    let Some(ns) = Netns::new("hard_sync") else {
        return;
    };
    ns.ip(&[
        "route",
        "add",
        "10.98.0.0/16",
        "via",
        "192.0.2.1",
        "table",
        "100",
    ]);
    ns.ip(&[
        "route",
        "add",
        "10.97.0.0/16",
        "via",
        "192.0.2.1",
        "table",
        "200",
    ]);
    ns.ip(&[
        "rule",
        "add",
        "priority",
        "500",
        "from",
        "10.5.0.0/16",
        "table",
        "100",
    ]);
    ns.ip(&[
        "rule",
        "add",
        "priority",
        "501",
        "from",
        "10.6.0.0/16",
        "table",
        "200",
    ]);
    let desired = config(json!({
        "routes": [{"to": "10.20.0.0/16", "via": "192.0.2.1", "table": 100}],
        "rules": [{"priority": 600, "from": "10.1.0.0/16", "table": 100}],
        "tableHardSync": [100]
    }));
    let mut a = ns.adapter();
    let report = a.reconcile(&desired, false).unwrap();
    assert!(report.is_converged(), "{report:#?}");
    let removed: Vec<String> = report
        .results
        .iter()
        .filter(|r| r.op.is_delete())
        .map(|r| r.op.to_string())
        .collect();
    assert_eq!(
        removed,
        [
            "delete IPv4 rule priority 500 from 10.5.0.0/16 lookup 100",
            "delete route 10.98.0.0/16 table 100 via 192.0.2.1 dev v0 proto 3",
        ],
        "{report:#?}"
    );
    let rules = ns.ip(&["rule", "show"]);
    assert!(
        !rules.contains("500:") && rules.contains("501:") && rules.contains("600:"),
        "{rules}"
    );
    assert_eq!(
        ns.table("-4", "100").trim(),
        "10.20.0.0/16 via 192.0.2.1 dev v0 proto 203"
    );
    assert!(ns.table("-4", "200").contains("10.97.0.0/16"));
}

#[test]
fn host_addresses_on_links_we_did_not_create_are_found_again_and_only_ours_removed() {
    let Some(ns) = Netns::new("host_addresses") else {
        return;
    };
    ns.ip(&["link", "set", "lo", "up"]);
    // Someone else's addresses: one we will also ask for, one we will not.
    ns.ip(&["address", "add", "198.51.100.9/32", "dev", "lo"]);
    ns.ip(&["address", "add", "198.51.100.1/32", "dev", "lo"]);
    let desired = config(json!({"addresses": [
        {"dev": "lo", "address": "203.0.113.7/32"},
        {"dev": "lo", "address": "2001:db8:7::7/128"},
        {"dev": "v0", "address": "192.0.2.77/24"},
        {"dev": "lo", "address": "198.51.100.9/32"}
    ]}));
    let report = ns.adapter().reconcile(&desired, false).unwrap();
    assert!(report.is_converged(), "{report:#?}");
    assert_eq!(
        report.skipped.len(),
        1,
        "the foreign identical address is reported, not taken: {report:#?}"
    );
    let lo = ns.ip(&["address", "show", "dev", "lo"]);
    for a in [
        "203.0.113.7/32",
        "2001:db8:7::7/128",
        "198.51.100.9/32",
        "198.51.100.1/32",
    ] {
        assert!(lo.contains(a), "{a} not on lo:\n{lo}");
    }
    assert!(
        ns.ip(&["address", "show", "dev", "v0"])
            .contains("192.0.2.77/24")
    );
    // A new process: everything is found as done (the address protocol marks ours).
    let mut b = ns.adapter();
    assert!(b.plan(&desired).unwrap().is_empty());
    // One address no longer desired: only it goes.
    let fewer = config(json!({"addresses": [
        {"dev": "lo", "address": "2001:db8:7::7/128"},
        {"dev": "v0", "address": "192.0.2.77/24"}
    ]}));
    let ops: Vec<String> = b
        .reconcile(&fewer, false)
        .unwrap()
        .results
        .iter()
        .map(|r| r.op.to_string())
        .collect();
    assert_eq!(ops, ["delete address 203.0.113.7/32 dev lo"]);
    // Cleanup removes ours and leaves every foreign address, also the one we had asked
    // for, and v0's own.
    let report = b.cleanup().unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    let lo = ns.ip(&["address", "show", "dev", "lo"]);
    assert!(
        !lo.contains("2001:db8:7::7") && !lo.contains("203.0.113.7"),
        "{lo}"
    );
    assert!(
        lo.contains("198.51.100.9/32") && lo.contains("198.51.100.1/32"),
        "{lo}"
    );
    let v0 = ns.ip(&["address", "show", "dev", "v0"]);
    assert!(
        !v0.contains("192.0.2.77") && v0.contains("192.0.2.10/24"),
        "{v0}"
    );
}

/// A Meridio-style trench as the operator compiles it for one attractor node
/// (`tests/data/trench-a-node.json`, kept equal to `netpolicy plan`'s output over
/// examples/traffic-domains by a test in netpolicy-operator): VLAN 100 on `v0` with the
/// node's addresses, the trench's table via the static gateways (ECMP), the streams'
/// tables delivering the VIPs to the node (`local`), a source rule per VIP, FIB rules
/// per flow. Applied in one pass; then the kernel's own route lookup sends each flow to
/// its stream's table, which delivers it here, never back to the gateways.
#[test]
fn a_compiled_trench_routes_each_flow_by_its_streams_table() {
    let Some(ns) = vlan_netns("trench_flows") else {
        return;
    };
    // As on any node: the loopback the VIPs are delivered to is up.
    ns.ip(&["link", "set", "lo", "up"]);
    let desired = config(serde_json::from_str(include_str!("data/trench-a-node.json")).unwrap());
    let mut a = ns.adapter();
    let report = a.reconcile(&desired, false).unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    assert!(a.plan(&desired).unwrap().ops.is_empty());
    let vlan = ns.ip(&["-d", "addr", "show", "ext-vlan.100"]);
    assert!(vlan.contains("vlan protocol 802.1Q id 100"), "{vlan}");
    assert!(vlan.contains("inet 169.254.100.1/24"), "{vlan}");
    // flow-a-z-tcp (priority 1): tcp to 20.0.0.1 port 80 or 4000 → stream-a-i's table;
    // from the node's own address (an output lookup).
    let get = |args: &[&str]| {
        let mut a = vec!["route", "get"];
        a.extend_from_slice(args);
        ns.inner.ip(&a).unwrap_or_else(|e| format!("error: {e}"))
    };
    for port in ["80", "4000"] {
        let got = get(&[
            "20.0.0.1",
            "from",
            "169.254.100.1",
            "ipproto",
            "tcp",
            "dport",
            port,
        ]);
        assert!(
            got.starts_with("local 20.0.0.1")
                && got.contains("table 20001")
                && got.contains("dev lo"),
            "{port}: {got}"
        );
        assert!(!got.contains("via 169.254.100.15"), "{port}: {got}");
    }
    // flow-a-z-udp (priority 2, matched first): udp from 10/8, sport 20000-21000, to
    // 4003 → stream-a-ii's table; a packet arriving on v1 from such a source.
    let fwd = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "sh",
            "-c",
            "echo 1 > /proc/sys/net/ipv4/ip_forward",
        ])
        .status()
        .unwrap();
    assert!(fwd.success());
    let got = get(&[
        "40.0.0.1", "from", "10.1.2.3", "iif", "v1", "ipproto", "udp", "sport", "20500", "dport",
        "4003",
    ]);
    assert!(got.contains("table 20002"), "{got}");
    // No flow matches: another port, another source port.
    let got = get(&[
        "20.0.0.1",
        "from",
        "169.254.100.1",
        "ipproto",
        "tcp",
        "dport",
        "81",
    ]);
    assert!(!got.contains("table 2000"), "{got}");
    let got = get(&[
        "40.0.0.1", "from", "10.1.2.3", "iif", "v1", "ipproto", "udp", "sport", "1000", "dport",
        "4003",
    ]);
    assert!(!got.contains("table 2000"), "{got}");
    // The rules in priority order, higher flow priority first; IPv6 too.
    let rules = ns.ip(&["rule", "show"]);
    let at = |s: &str| {
        rules
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} not in\n{rules}"))
    };
    assert!(at("lookup 20002") < at("lookup 20001"), "{rules}");
    assert!(
        at("from 20.0.0.1 lookup 20000") > at("lookup 20001"),
        "{rules}"
    );
    let rules6 = ns.ip(&["-6", "rule", "show"]);
    assert!(
        rules6.contains("to 2000::1 ipproto tcp dport 80 lookup 20001"),
        "{rules6}"
    );
    // The stream's table delivers the VIP here; the trench's sends replies out.
    let t = ns.table("-6", "20001");
    assert!(t.contains("local 2000::1 dev lo"), "{t}");
    assert!(!t.contains("via"), "{t}");
    let t = ns.table("-6", "20000");
    assert!(
        t.contains("default via 100:100::150 dev ext-vlan.100"),
        "{t}"
    );
}

/// The agent's probes run in the namespace it programs: ping answers from an address
/// there, fails fast when a rule blackholes the target and times out when nobody
/// answers; TCP connects to a listener made in the namespace and fails on a closed port.
#[test]
fn probes_run_inside_the_namespace() {
    use std::time::{Duration, Instant};

    use netpolicy_netlink::probe;
    let Some(ns) = Netns::new("probes") else {
        return;
    };
    let n = ns.inner.namespace();
    ns.ip(&["link", "set", "lo", "up"]);
    let t = Duration::from_secs(2);
    probe::ping(&n, "192.0.2.10".parse().unwrap(), t).unwrap();
    // The same address is not ours in this process's namespace.
    assert!(
        probe::ping(
            &Namespace::Current,
            "192.0.2.10".parse().unwrap(),
            Duration::from_millis(300)
        )
        .is_err()
    );
    // Nobody at .99 (on-link, no neighbour answers): a timeout.
    let start = Instant::now();
    let e = probe::ping(
        &n,
        "192.0.2.99".parse().unwrap(),
        Duration::from_millis(500),
    )
    .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(450), "{e}");
    // A blackhole rule: refused at once.
    ns.ip(&["route", "add", "198.51.100.0/24", "via", "192.0.2.1"]);
    ns.ip(&[
        "rule",
        "add",
        "pref",
        "100",
        "to",
        "198.51.100.7",
        "blackhole",
    ]);
    let e = probe::ping(&n, "198.51.100.7".parse().unwrap(), t).unwrap_err();
    assert_ne!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    // TCP: a listener in the namespace (made by `ip netns exec`'s child would need a
    // tool; a closed port answers RST, which is the failure half).
    let e = probe::tcp(&n, "192.0.2.10:9".parse().unwrap(), t).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
}

/// The chart runs the agent as root with every capability dropped but `NET_ADMIN` and
/// `NET_RAW`. Proof that this is enough for what the adapter does (routes, rules, their
/// read-back) and for the `ping` probe: this test binary runs itself again inside the
/// namespace, its bounding set cut to those two (util-linux `setpriv`), and that run
/// (`capability_child`) applies and pings in its own namespace. For contrast, the same
/// run as user 65532 (the image's default user, whose added capabilities Kubernetes
/// leaves in the bounding set only) is refused with EPERM.
#[test]
fn root_with_only_net_admin_and_net_raw_is_enough_for_the_adapter_and_probes() {
    let Some(ns) = Netns::new("capabilities") else {
        return;
    };
    if Command::new("setpriv").arg("--version").output().is_err() {
        skip("capabilities: util-linux's setpriv is not installed here");
        return;
    }
    // The probe pings the namespace's own address: local delivery goes over `lo`.
    ns.ip(&["link", "set", "lo", "up"]);
    let exe = std::env::current_exe().unwrap();
    let run = |user: &[&str]| {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.name, "setpriv"])
            .args(user)
            .args([
                "--bounding-set",
                "-all,+net_admin,+net_raw",
                "--inh-caps",
                "-all",
                "--",
            ])
            .arg(&exe)
            .args(["--exact", "capability_child", "--ignored", "--nocapture"])
            .env(CAPS_CHILD, "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = run(&[]);
    assert!(ok, "root with NET_ADMIN and NET_RAW only:\n{text}");
    assert!(
        text.contains("1 passed"),
        "the child test did not run:\n{text}"
    );
    let t100 = ns.table("-4", "100");
    assert!(
        t100.contains("10.20.0.0/16 via 192.0.2.1 dev v0 proto 203"),
        "{t100}"
    );
    let rules = ns.ip(&["rule", "show"]);
    assert!(
        rules.contains("1:\tfrom 10.1.0.0/16 lookup 100 proto 203"),
        "{rules}"
    );

    ns.ip(&["route", "flush", "table", "100"]);
    let (ok, text) = run(&["--reuid", "65532", "--regid", "65532", "--clear-groups"]);
    assert!(
        !ok,
        "a non-root user with bounded capabilities changed the kernel:\n{text}"
    );
    // Said once, before any change, naming the capability: not N items failing EPERM.
    assert!(
        text.contains("needs CAP_NET_ADMIN, which this process does not have"),
        "not refused naming the capability:\n{text}"
    );
    assert!(!ns.table("-4", "100").contains("10.20.0.0/16"));
}

/// Set for the run of [`capability_child`] that the test above starts.
const CAPS_CHILD: &str = "NETPOLICY_CAPS_CHILD";

/// Not a test of its own: the half of the test above that runs inside the namespace
/// with reduced capabilities (it does nothing unless `NETPOLICY_CAPS_CHILD` is set, so
/// that `--ignored` alone never touches the namespace it runs in).
#[test]
#[ignore = "run by root_with_only_net_admin_and_net_raw_is_enough_for_the_adapter_and_probes"]
fn capability_child() {
    if std::env::var_os(CAPS_CHILD).is_none() {
        return;
    }
    let mut a = Adapter::open(&Namespace::Current, Ownership::default()).unwrap();
    let desired = routes_and_rules();
    let report = a
        .reconcile(&desired, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let failures: Vec<_> = report.failures().collect();
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        a.plan(&desired).unwrap().ops.is_empty(),
        "read back differs"
    );
    netpolicy_netlink::probe::ping(
        &Namespace::Current,
        "192.0.2.10".parse().unwrap(),
        std::time::Duration::from_secs(2),
    )
    .unwrap();
}

/// A policy deleted with cleanup off (ipruler's `node-cleanup-on-deletion=false`): its
/// routes, rules and addresses stay exactly as they are, with no moment without them,
/// and become someone else's: re-marked, then left alone by reconcile and cleanup.
#[test]
fn disowned_objects_stay_as_they_are_and_are_never_touched_again() {
    let Some(ns) = Netns::new("disown") else {
        return;
    };
    let mut desired = routes_and_rules();
    desired.addresses = config(json!({"addresses": [
        {"dev": "lo", "address": "198.51.100.7/32"},
        {"dev": "lo", "address": "2001:db8:77::7/128"}
    ]}))
    .addresses;
    let mut a = ns.adapter();
    let report = a.reconcile(&desired, false).unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    let before = (
        ns.table("-4", "100"),
        ns.table("-6", "200"),
        ns.ip(&["rule", "show"]),
    );

    // Give up the table-100 routes, two rules and the addresses; keep the rest.
    let left = config(json!({
        "routes": [
            {"to": "10.20.0.0/16", "via": "192.0.2.1", "table": 100},
            {"to": "2001:db8:2::/48", "table": 200,
             "nexthops": [{"via": "2001:db8::1"}, {"via": "2001:db8::2"}]}
        ],
        "rules": [
            {"priority": 1, "from": "10.1.0.0/16", "table": 100},
            {"priority": 1000, "fwmark": "0x10/0xff", "table": 300}
        ],
        "addresses": [
            {"dev": "lo", "address": "198.51.100.7/32"},
            {"dev": "lo", "address": "2001:db8:77::7/128"}
        ]
    }));
    let given = a.disown(&left).unwrap();
    assert!(
        given.iter().all(|d| d.outcome == Outcome::Done),
        "{given:#?}"
    );
    // Two addresses, two routes, three rules (the fwmark rule is in both families).
    assert_eq!(given.len(), 2 + 2 + 3, "{given:#?}");
    // The same objects, now `static` (4) instead of 203.
    let t100 = ns.table("-4", "100");
    assert!(
        t100.contains("10.20.0.0/16 via 192.0.2.1 dev v0 proto static"),
        "{t100}"
    );
    assert_eq!(before.0.replace("proto 203", "proto static"), t100);
    let t200 = ns.table("-6", "200");
    assert!(t200.contains("2001:db8:2::/48 proto static"), "{t200}");
    let rules = ns.ip(&["rule", "show"]);
    assert!(
        rules.contains("1:\tfrom 10.1.0.0/16 lookup 100 proto static"),
        "{rules}"
    );
    assert!(
        rules.contains("1000:\tfrom all fwmark 0x10/0xff lookup 300 proto static"),
        "{rules}"
    );
    assert!(rules.contains("999:\tfrom all ipproto tcp"), "{rules}");
    assert_eq!(
        rules.lines().count(),
        before.2.lines().count(),
        "no rule lost or doubled:\n{}\n{rules}",
        before.2
    );
    let lo = ns.ip(&["address", "show", "dev", "lo"]);
    assert!(
        lo.contains("198.51.100.7/32") && lo.contains("2001:db8:77::7/128"),
        "{lo}"
    );

    // Disowned: the next desired state without them removes nothing of theirs, a fresh
    // adapter does not see them as its own, and cleanup leaves them.
    let mut rest = desired.clone();
    rest.routes
        .retain(|r| !left.routes.iter().any(|l| l.key() == r.key()));
    rest.rules
        .retain(|r| !left.rules.iter().any(|l| l.key() == r.key()));
    rest.addresses.clear();
    let report = ns.adapter().reconcile(&rest, false).unwrap();
    assert!(report.results.is_empty(), "{:#?}", report.results);
    let report = ns.adapter().cleanup().unwrap();
    assert!(report.failures().next().is_none(), "{report:#?}");
    assert!(
        ns.table("-4", "100")
            .contains("10.20.0.0/16 via 192.0.2.1 dev v0 proto static")
    );
    assert!(
        ns.table("-6", "200")
            .contains("2001:db8:2::/48 proto static")
    );
    let rules = ns.ip(&["rule", "show"]);
    assert!(
        rules.contains("1:\tfrom 10.1.0.0/16 lookup 100 proto static"),
        "{rules}"
    );
    assert!(
        !rules.contains("proto 203"),
        "cleanup removes the rest:\n{rules}"
    );
    let lo = ns.ip(&["address", "show", "dev", "lo"]);
    assert!(
        lo.contains("198.51.100.7/32") && lo.contains("2001:db8:77::7/128"),
        "{lo}"
    );
    // Given up before: nothing to do.
    assert!(ns.adapter().disown(&left).unwrap().is_empty());
}

/// The notification stream: the adapter's own writes carry its port, someone else's
/// (`ip`) another; whether the object is netpolicy's is read from its mark.
#[test]
fn notifications_say_whose_change_it_was_and_whether_the_object_is_netpolicys() {
    use netpolicy_netlink::monitor::{Action, Batch, Change, Monitor, Object};
    let Some(ns) = Netns::new("monitor") else {
        return;
    };
    let mut m = Monitor::open(&ns.inner.namespace()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Change>();
    std::thread::spawn(move || {
        while let Ok(b) = m.recv() {
            if let Batch::Changes(cs) = b {
                for c in cs {
                    if tx.send(c).is_err() {
                        return;
                    }
                }
            }
        }
    });
    // Every change seen so far (the kernel's order is not the order asked about here).
    let seen = std::cell::RefCell::new(Vec::<Change>::new());
    let wait = |pred: &dyn Fn(&Change) -> bool| -> Change {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if let Some(c) = seen.borrow().iter().find(|c| pred(c)) {
                return c.clone();
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(c) => seen.borrow_mut().push(c),
                Err(_) => panic!(
                    "no such notification within 5 s; seen: {:#?}",
                    seen.borrow()
                ),
            }
        }
    };
    let mut a = ns.adapter();
    let port = a.port().unwrap();
    let desired = config(json!({
        "routes": [{"to": "10.20.0.0/16", "via": "192.0.2.1", "table": 100}],
        "rules": [{"priority": 1300, "from": "10.20.0.0/16", "table": 100}],
        "addresses": [{"dev": "lo", "address": "198.51.100.20/32"}]
    }));
    a.reconcile(&desired, false).unwrap();
    let route = wait(&|c| c.object == Object::Route && c.what.contains("10.20.0.0/16"));
    assert_eq!(
        (route.action, route.port, route.owned, route.table),
        (Action::New, port, true, Some(100)),
        "{route:?}"
    );
    let rule = wait(&|c| c.object == Object::Rule);
    assert_eq!(
        (rule.port, rule.owned, rule.table),
        (port, true, Some(100)),
        "{rule:?}"
    );
    let address = wait(&|c| c.object == Object::Address && c.what.contains("198.51.100.20"));
    assert_eq!((address.port, address.owned), (port, true), "{address:?}");

    // Someone else removes netpolicy's route: another port, still netpolicy's object.
    ns.ip(&["route", "del", "10.20.0.0/16", "table", "100"]);
    let gone = wait(&|c| c.object == Object::Route && c.action == Action::Deleted);
    assert!(gone.port != port && gone.owned, "{gone:?}");
    // And adds one of their own: not netpolicy's.
    ns.ip(&[
        "route",
        "add",
        "10.77.0.0/16",
        "via",
        "192.0.2.1",
        "table",
        "100",
    ]);
    let foreign = wait(&|c| c.what.contains("10.77.0.0/16"));
    assert!(foreign.port != port && !foreign.owned, "{foreign:?}");
}

/// Runs `monitor::keep` for `desired` on a thread of its own; each repair's trigger and
/// drift arrive on the channel. The thread stays blocked on the socket when the test
/// ends (the namespace goes; nothing else does).
fn keeping(ns: &Netns, desired: &RoutingConfig) -> std::sync::mpsc::Receiver<(String, Vec<Op>)> {
    use netpolicy_netlink::monitor::{Monitor, keep};
    let mut a = ns.adapter();
    let mut m = Monitor::open(&ns.inner.namespace()).unwrap();
    let desired = desired.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = keep(&mut a, &mut m, &desired, |r| {
            if tx.send((r.trigger, r.report.drift)).is_err() {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        });
    });
    rx
}

/// Waits (at most `secs`, polling every 2 ms) until `done`; how long it took. Fails
/// naming `what` and `not`.
fn until(what: &str, not: &str, secs: u64, done: &dyn Fn() -> bool) -> std::time::Duration {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(secs),
            "{what}: {not} within {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    start.elapsed()
}

/// Waits (at most 5 s) for `restored`; how long it took, for the output.
fn until_restored(what: &str, restored: &dyn Fn() -> bool) -> std::time::Duration {
    let took = until(what, "not restored", 5, restored);
    eprintln!("{what}: restored after {took:?} (including `ip` polls)");
    took
}

#[test]
fn keep_repairs_someone_elses_changes_at_once_and_never_reacts_to_its_own_writes() {
    let Some(ns) = Netns::new("keep") else {
        return;
    };
    let desired = config(json!({
        "routes": [{"to": "10.60.0.0/16", "via": "192.0.2.1", "table": 100}],
        "rules": [{"priority": 1600, "from": "10.60.0.0/16", "table": 100}],
        "addresses": [{"dev": "lo", "address": "198.51.100.60/32"}]
    }));
    let repairs = keeping(&ns, &desired);
    let applied = || {
        ns.table("-4", "100").contains("10.60.0.0/16 via 192.0.2.1")
            && ns.ip(&["rule", "show"]).contains("1600:")
            && ns
                .ip(&["address", "show", "dev", "lo"])
                .contains("198.51.100.60/32")
    };
    until_restored("first apply", &applied);
    // Its own writes (the first apply's routes, rules and addresses) start no repair.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        repairs.try_recv().is_err(),
        "the adapter's own writes started a repair"
    );
    for (what, args) in [
        (
            "route deleted",
            &["route", "del", "10.60.0.0/16", "table", "100"][..],
        ),
        ("rules flushed", &["rule", "flush"][..]),
        (
            "address removed",
            &["address", "del", "198.51.100.60/32", "dev", "lo"][..],
        ),
    ] {
        ns.ip(args);
        if what == "rules flushed" {
            // Not netpolicy's to restore: put the kernel's lookups back as they were.
            ns.ip(&["rule", "add", "priority", "32766", "lookup", "main"]);
            ns.ip(&["rule", "add", "priority", "32767", "lookup", "default"]);
        }
        until_restored(what, &applied);
        let (trigger, drift) = repairs
            .recv_timeout(std::time::Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("{what}: no repair reported"));
        assert!(!drift.is_empty(), "{what}: {trigger}: repaired nothing");
    }
    // A foreign route outside netpolicy's objects (and no hard-synced table): no repair.
    while repairs.try_recv().is_ok() {}
    ns.ip(&[
        "route",
        "add",
        "10.61.0.0/16",
        "via",
        "192.0.2.1",
        "table",
        "100",
    ]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        repairs.try_recv().is_err(),
        "a foreign route started a repair"
    );
}

#[test]
fn keep_sets_a_vlan_someone_set_down_up_again_with_its_routes() {
    let Some(ns) = vlan_netns("vlan_set_down") else {
        return;
    };
    let desired = config(json!({
        "vlans": [{"link": "v0", "id": 100, "addresses": ["10.100.0.5/24"]}],
        "routes": [{"to": "10.200.0.0/16", "via": "10.100.0.1", "table": 100}]
    }));
    let repairs = keeping(&ns, &desired);
    // The keeping thread may not have made the VLAN yet (the VM's emulated CPU is slow):
    // a link not there is not applied yet, not an error.
    let applied = || {
        ns.inner
            .ip(&["link", "show", "v0.100"])
            .unwrap_or_default()
            .contains(",UP")
            && ns.table("-4", "100").contains("10.200.0.0/16")
    };
    until_restored("first apply", &applied);
    // The kernel names no requester in link notifications: the first apply's own link
    // changes may start one pass that finds nothing to repair. Let it pass.
    std::thread::sleep(std::time::Duration::from_millis(300));
    while let Ok((trigger, drift)) = repairs.try_recv() {
        assert!(
            drift.is_empty(),
            "{trigger}: repaired {drift:#?} before any change"
        );
    }
    ns.ip(&["link", "set", "v0.100", "down"]);
    until_restored("vlan set down", &applied);
    // The repair that set it up (a pass started by the first apply's own link changes
    // may still be reported before it, with nothing repaired).
    let mut seen = Vec::new();
    loop {
        let (_, drift) = repairs
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no repair set v0.100 up; repairs: {seen:#?}"));
        if drift
            .iter()
            .any(|op| matches!(op, Op::SetUp(d) if d.as_str() == "v0.100"))
        {
            break;
        }
        assert!(drift.is_empty(), "{drift:#?}");
        seen.push(drift);
    }
}

/// Two namespaces on one bridge (in a third): `a0` in the first, `b0` in the second.
struct Segment {
    a: Netns,
    b: Netns,
    switch: Netns,
}

fn segment(test: &str) -> Option<Segment> {
    let a = Netns::new(&format!("{test} (a)"))?;
    let b = Netns::new(&format!("{test} (b)"))?;
    let switch = Netns::new(&format!("{test} (bridge)"))?;
    switch.ip(&["link", "add", "br0", "type", "bridge"]);
    switch.ip(&["link", "set", "br0", "up"]);
    for (ns, port, end) in [(&a, "sa", "a0"), (&b, "sb", "b0")] {
        switch.ip(&[
            "link", "add", port, "type", "veth", "peer", "name", end, "netns", &ns.name,
        ]);
        switch.ip(&["link", "set", port, "master", "br0", "up"]);
        ns.ip(&["link", "set", end, "up"]);
    }
    // The segment carries frames once every end has carrier and both bridge ports
    // forward. The kernel takes carrier changes up later (linkwatch, up to a second on
    // a busy machine): a probe sent before then is dropped at a port still disabled, and
    // a test would see a free address where the other host holds it.
    let ready = || {
        let up = |ns: &Netns, dev: &str| ns.ip(&["-d", "link", "show", dev]).contains("LOWER_UP");
        let forwards = |port: &str| {
            let out = switch.ip(&["-d", "link", "show", port]);
            out.contains("LOWER_UP") && out.contains("bridge_slave state forwarding")
        };
        up(&a, "a0") && up(&b, "b0") && forwards("sa") && forwards("sb")
    };
    until(
        test,
        "the segment's links are not up and forwarding",
        10,
        &ready,
    );
    Some(Segment { a, b, switch })
}

/// The outcome of the pass's add of address `addr` (`10.88.0.2/24`).
fn add_outcome(report: &netpolicy_netlink::Report, addr: &str) -> Outcome {
    report
        .results
        .iter()
        .find(|r| matches!(&r.op, Op::AddAddress { address, .. } if address.to_string() == addr))
        .map(|r| r.outcome.clone())
        .unwrap_or_else(|| panic!("no add of {addr}: {report:#?}"))
}

fn mac_of(ns: &Netns, dev: &str) -> String {
    let out = ns.ip(&["link", "show", dev]);
    out.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC in {out}"))
        .to_owned()
}

#[test]
fn an_address_another_host_on_the_segment_uses_is_not_added_and_names_that_host() {
    use netpolicy_netlink::Outcome;
    let Some(seg) = segment("dad") else {
        return;
    };
    // The other host holds 10.88.0.2 and fd88::2 on the segment.
    seg.b.ip(&["address", "add", "10.88.0.2/24", "dev", "b0"]);
    seg.b
        .ip(&["-6", "address", "add", "fd88::2/64", "dev", "b0", "nodad"]);
    let theirs = mac_of(&seg.b, "b0");
    let desired = config(json!({"addresses": [
        {"dev": "a0", "address": "10.88.0.2/24"},
        {"dev": "a0", "address": "10.88.0.3/24"},
        {"dev": "a0", "address": "fd88::2/64"},
        {"dev": "a0", "address": "fd88::3/64"}
    ]}));
    let mut a = seg.a.adapter();
    let start = std::time::Instant::now();
    let report = a.reconcile(&desired, false).unwrap();
    eprintln!(
        "dad: a pass adding 2 IPv4 and 2 IPv6 addresses took {:?}",
        start.elapsed()
    );
    let outcome = add_outcome;
    assert_eq!(
        outcome(&report, "10.88.0.2/24"),
        Outcome::Duplicate {
            by: Some(theirs.clone())
        }
    );
    assert_eq!(outcome(&report, "10.88.0.3/24"), Outcome::Done);
    assert!(
        matches!(outcome(&report, "fd88::2/64"), Outcome::Duplicate { .. }),
        "{report:#?}"
    );
    assert_eq!(outcome(&report, "fd88::3/64"), Outcome::Done);
    let held = seg.a.ip(&["address", "show", "dev", "a0"]);
    assert!(
        held.contains("10.88.0.3/24") && held.contains("fd88::3/64"),
        "{held}"
    );
    assert!(
        !held.contains("10.88.0.2/") && !held.contains("fd88::2/"),
        "a duplicate was left on the node: {held}"
    );
    assert!(!report.is_converged());
    // Known duplicates are not probed again until forgotten (the agent: next spec or
    // resync).
    let again = a.reconcile(&desired, false).unwrap();
    assert_eq!(
        outcome(&again, "10.88.0.2/24"),
        Outcome::Duplicate { by: Some(theirs) }
    );
    // The other host gives the addresses up: the next look adds them.
    seg.b.ip(&["address", "del", "10.88.0.2/24", "dev", "b0"]);
    seg.b
        .ip(&["-6", "address", "del", "fd88::2/64", "dev", "b0"]);
    a.forget_duplicates();
    let freed = a.reconcile(&desired, false).unwrap();
    assert!(freed.is_converged(), "{freed:#?}");
    let held = seg.a.ip(&["address", "show", "dev", "a0"]);
    assert!(
        held.contains("10.88.0.2/24") && held.contains("fd88::2/64"),
        "{held}"
    );
    // 200 free addresses are probed at once: one window, not 200.
    let many: Vec<serde_json::Value> = (0..200)
        .map(|k| json!({"dev": "a0", "address": format!("10.89.{}.{}/32", k / 200, k % 200 + 1)}))
        .collect();
    let start = std::time::Instant::now();
    let report = a
        .reconcile(&config(json!({"addresses": many})), false)
        .unwrap();
    eprintln!(
        "dad: a pass adding 200 free IPv4 addresses took {:?} (probe window {:?})",
        start.elapsed(),
        netpolicy_netlink::dad::PROBE_WINDOW
    );
    assert!(report.is_converged(), "{:#?}", report.failures().next());
}

#[test]
fn an_address_on_a_link_that_is_down_is_added_unprobed_and_says_why() {
    let Some(seg) = segment("unprobed") else {
        return;
    };
    seg.a.ip(&["link", "set", "a0", "down"]);
    let desired = config(json!({"addresses": [
        {"dev": "a0", "address": "10.87.0.3/24"},
        {"dev": "lo", "address": "10.87.1.3/32"}
    ]}));
    let report = seg.a.adapter().reconcile(&desired, false).unwrap();
    let outcome = |addr: &str| add_outcome(&report, addr);
    assert_eq!(
        outcome("10.87.0.3/24"),
        Outcome::Unprobed {
            why: "a0 is down".into()
        }
    );
    assert_eq!(
        outcome("10.87.1.3/32"),
        Outcome::Done,
        "loopback has no ARP: nothing to probe, nothing to say"
    );
    assert!(report.is_converged(), "an unprobed address is applied");
    assert_eq!(
        outcome("10.87.0.3/24").to_string(),
        "added without a duplicate check: a0 is down"
    );
}

#[test]
fn an_address_on_a_link_without_carrier_is_added_unprobed_not_called_free() {
    let Some(seg) = segment("no carrier") else {
        return;
    };
    // The other host holds the address, but a0's bridge port goes down: a0 stays up
    // without carrier, and a probe could not reach anyone.
    seg.b.ip(&["addr", "add", "10.85.0.3/24", "dev", "b0"]);
    seg.switch.ip(&["link", "set", "sa", "down"]);
    until("no carrier", "a0 still has carrier", 10, &|| {
        seg.a.ip(&["link", "show", "a0"]).contains("NO-CARRIER")
    });
    let desired = config(json!({"addresses": [{"dev": "a0", "address": "10.85.0.3/24"}]}));
    let report = seg.a.adapter().reconcile(&desired, false).unwrap();
    assert_eq!(
        add_outcome(&report, "10.85.0.3/24"),
        Outcome::Unprobed {
            why: "a0 has no carrier".into()
        }
    );
}

#[test]
fn a_repaired_address_is_probed_briefly_and_not_restored_over_a_host_that_took_it() {
    let Some(seg) = segment("restore probe") else {
        return;
    };
    let desired = config(json!({"addresses": [
        {"dev": "a0", "address": "10.86.0.3/24"},
        {"dev": "a0", "address": "10.86.1.4/24"}
    ]}));
    let mut a = seg.a.adapter();
    assert!(a.reconcile(&desired, false).unwrap().is_converged());
    // Someone removes both (different subnets: removing a primary address removes its
    // secondaries); meanwhile the other host takes one of them.
    seg.a.ip(&["address", "del", "10.86.0.3/24", "dev", "a0"]);
    seg.a.ip(&["address", "del", "10.86.1.4/24", "dev", "a0"]);
    seg.b.ip(&["address", "add", "10.86.0.3/24", "dev", "b0"]);
    let start = std::time::Instant::now();
    let report = a.reconcile(&desired, false).unwrap();
    let took = start.elapsed();
    eprintln!(
        "restore probe: a repair re-adding 2 addresses took {took:?} (window {:?})",
        netpolicy_netlink::dad::RESTORE_WINDOW
    );
    assert_eq!(report.drift.len(), 2, "{report:#?}");
    let outcomes: Vec<String> = report
        .results
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    assert!(
        outcomes.iter().any(
            |o| o.starts_with("add address 10.86.0.3/24") && o.contains("not added: in use by")
        ),
        "{outcomes:#?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|o| o.starts_with("add address 10.86.1.4/24") && o.ends_with(": done")),
        "{outcomes:#?}"
    );
}
