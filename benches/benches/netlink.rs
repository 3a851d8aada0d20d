//! Netlink benchmarks (issue: netpolicy-netlink). Ours (`netpolicy_netlink::Adapter`)
//! and `ip -batch` install identical content into fresh network namespaces in the same
//! run; each iteration gets a new namespace (made in setup, not timed).
//!
//! - `n1_routes_v4` / `n1_routes_v6`: 100k /32 (/128) routes into an empty table.
//!   Target: >= 2x `ip -batch`; stretch >= 200k routes/s IPv4.
//! - `n2_noop_100k`: reconcile of 100k owned routes already in place (dump + diff, zero
//!   writes). Target <= 150 ms. `n2_noop_node`: 1k routes + 100 rules, target <= 10 ms.
//! - `n4_rules`: 10k IPv4 rules installed (vs `ip -batch`); `n4_noop_rules`: dump + diff
//!   of 10k owned rules, target <= 20 ms.
//!
//! - `vlan_1000`: 1,000 VLANs with an address each, created and removed. Target <= 2 s.
//!   Needs 802.1Q: run it in the VM with `NETPOLICY_VM_BENCH=1 scripts/vm-test`.
//!
//! Needs root; without it the benchmarks print a SKIP line and measure nothing.
//!
//! Run: `cargo bench -p netpolicy-benches --bench netlink`

use std::{
    hint::black_box,
    io::Write,
    net::{Ipv4Addr, Ipv6Addr},
    process::{Command, Stdio},
    time::Duration,
};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use ipnetwork::IpNetwork;
use netpolicy_benches::print_ratios;
use netpolicy_core::{
    model::{FwMark, Route, RoutingConfig, Rule, RuleAction, RuleKey},
    plan::Op,
};
use netpolicy_netlink::{
    Adapter, Ownership,
    testns::{TestNamespace, is_root},
};

/// The crate's [`TestNamespace`], with `ip -batch` beside it for the baselines. Only
/// made after `main` checked for root.
struct Netns(TestNamespace);

impl Netns {
    fn new() -> Self {
        match TestNamespace::new("netlink benchmarks") {
            Ok(Some(ns)) => Self(ns),
            Ok(None) => panic!("the netlink benchmarks need root"),
            Err(e) => panic!("{e}"),
        }
    }

    fn adapter(&self) -> Adapter {
        Adapter::open(&self.0.namespace(), Ownership::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `ip -n <ns> -batch -` with `lines`.
    fn ip_batch(&self, lines: &str) {
        let mut child = Command::new("ip")
            .args(["-n", self.0.name(), "-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(lines.as_bytes());
        }
        let ok = child.wait().is_ok_and(|s| s.success());
        assert!(ok, "ip -batch failed");
    }
}

const ROUTES: u32 = 100_000;

fn v4_routes(n: u32) -> Vec<Route> {
    (0..n)
        .map(|i| {
            let a = Ipv4Addr::from(0x0a00_0000 + i);
            route(
                IpNetwork::new(a.into(), 32).unwrap_or_else(|e| panic!("{e}")),
                "192.0.2.1",
            )
        })
        .collect()
}

fn v6_routes(n: u32) -> Vec<Route> {
    (0..n)
        .map(|i| {
            let a = Ipv6Addr::from(0x2001_0db8_0001_0000_0000_0000_0000_0000u128 + u128::from(i));
            route(
                IpNetwork::new(a.into(), 128).unwrap_or_else(|e| panic!("{e}")),
                "2001:db8::1",
            )
        })
        .collect()
}

fn route(to: IpNetwork, via: &str) -> Route {
    Route {
        kind: netpolicy_core::model::RouteKind::Unicast,
        table: 100,
        to,
        metric: 0,
        via: Some(via.parse().unwrap_or_else(|e| panic!("{e}"))),
        dev: None,
        scope: None,
        onlink: false,
        src: None,
        nexthops: Vec::new(),
    }
}

fn batch_lines(routes: &[Route]) -> String {
    let mut s = String::with_capacity(routes.len() * 64);
    for r in routes {
        let via = r.via.map(|v| v.to_string()).unwrap_or_default();
        s.push_str(&format!(
            "route replace {} via {via} table 100 proto 203\n",
            r.to
        ));
    }
    s
}

fn rules(n: u32) -> Vec<Rule> {
    (0..n)
        .map(|i| Rule {
            key: RuleKey {
                priority: 1000 + i,
                // An IPv4 source makes the rule IPv4-only (prefix-less rules go into
                // both families).
                from: Some(
                    IpNetwork::new(Ipv4Addr::new(10, 0, 0, 0).into(), 8)
                        .unwrap_or_else(|e| panic!("{e}")),
                ),
                to: None,
                iif: None,
                oif: None,
                fwmark: Some(FwMark {
                    value: i + 1,
                    mask: u32::MAX,
                }),
                ip_proto: None,
                sport: None,
                dport: None,
                invert: false,
            },
            action: RuleAction::Lookup(100),
        })
        .collect()
}

/// Ours applying `ops` and `ip -batch` running `lines` (the same content), each into a
/// fresh namespace.
fn install(c: &mut Criterion, group: &str, ops: Vec<Op>, lines: String) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(ops.len() as u64));
    g.bench_function("ours", |b| {
        b.iter_batched(
            || {
                let ns = Netns::new();
                let a = ns.adapter();
                (ns, a)
            },
            |(ns, mut a)| {
                let results = a.apply(&ops).unwrap_or_else(|e| panic!("{e}"));
                assert!(results.iter().all(|r| r.outcome.is_ok()));
                (ns, a)
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("ip_batch", |b| {
        b.iter_batched(
            Netns::new,
            |ns| {
                ns.ip_batch(&lines);
                ns
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn install_routes(c: &mut Criterion, group: &str, routes: Vec<Route>) {
    let lines = batch_lines(&routes);
    install(
        c,
        group,
        routes.into_iter().map(Op::ReplaceRoute).collect(),
        lines,
    );
}

fn n1(c: &mut Criterion) {
    install_routes(c, "n1_routes_v4", v4_routes(ROUTES));
    install_routes(c, "n1_routes_v6", v6_routes(ROUTES));
}

/// A reconcile pass with everything in place (ours: dump + diff, zero writes) beside
/// iproute2 dumping the same objects (`ip route show table all`, `ip rule show`, both
/// families): the dump alone, which our pass contains.
/// A reconcile pass with everything in place (ours: dump + diff, zero writes) beside
/// iproute2 dumping the same objects (`ip route show table all`, `ip rule show`, both
/// families): only the dump, which our pass contains.
fn noop(c: &mut Criterion, group: &str, desired: RoutingConfig) {
    let ns = Netns::new();
    let mut a = ns.adapter();
    let first = a
        .reconcile(&desired, false)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(first.failures().next().is_none());
    let mut g = c.benchmark_group(group);
    g.sample_size(20);
    g.bench_function("ours", |b| {
        b.iter(|| {
            let r = a
                .reconcile(&desired, false)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(
                r.results.is_empty(),
                "a no-op pass wrote {}",
                r.results.len()
            );
            black_box(r)
        })
    });
    g.bench_function("ip_show", |b| {
        b.iter(|| {
            for args in [
                &["-4", "route", "show", "table", "all"][..],
                &["-6", "route", "show", "table", "all"],
                &["-4", "rule", "show"],
                &["-6", "rule", "show"],
            ] {
                let out = Command::new("ip")
                    .args(["-n", ns.0.name()])
                    .args(args)
                    .output()
                    .unwrap_or_else(|e| panic!("{e}"));
                black_box(out.stdout.len());
            }
        })
    });
    g.finish();
}

fn n2(c: &mut Criterion) {
    noop(
        c,
        "n2_noop_100k",
        RoutingConfig {
            routes: v4_routes(ROUTES),
            ..RoutingConfig::default()
        },
    );
    noop(
        c,
        "n2_noop_node",
        RoutingConfig {
            routes: v4_routes(1000),
            rules: rules(100),
            ..RoutingConfig::default()
        },
    );
}

fn n4(c: &mut Criterion) {
    let rs = rules(10_000);
    let ops: Vec<Op> = rs
        .iter()
        .map(|r| Op::AddRule {
            family: netpolicy_core::model::IpFamily::V4,
            rule: r.clone(),
        })
        .collect();
    let mut lines = String::new();
    for r in &rs {
        let m = r.key.fwmark.map_or(0, |f| f.value);
        lines.push_str(&format!(
            "rule add priority {} from 10.0.0.0/8 fwmark {m} table 100 proto 203\n",
            r.key.priority
        ));
    }
    install(c, "n4_rules", ops, lines);
    noop(
        c,
        "n4_noop_rules",
        RoutingConfig {
            rules: rules(10_000),
            ..RoutingConfig::default()
        },
    );
}

/// Whether this kernel can make VLANs (the VM runner's kernel can; this machine's cannot).
fn vlans_supported() -> bool {
    let ns = Netns::new();
    Command::new("ip")
        .args([
            "-n",
            ns.0.name(),
            "link",
            "add",
            "link",
            "v0",
            "name",
            "probe.7",
            "type",
            "vlan",
            "id",
            "7",
        ])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// 1,000 VLANs with an address each, created and removed. Target <= 2 s.
fn vlan_1000(c: &mut Criterion) {
    if !vlans_supported() {
        println!(
            "SKIP vlan_1000: this kernel has no 802.1Q; run `NETPOLICY_VM_BENCH=1 scripts/vm-test`"
        );
        return;
    }
    let vlans: Vec<serde_json::Value> = (1..=1000u32)
        .map(|id| {
            serde_json::json!({"link": "v0", "id": id,
                "addresses": [format!("10.{}.{}.1/24", 100 + id / 256, id % 256)]})
        })
        .collect();
    let spec: netpolicy_core::spec::RoutingSpec =
        serde_json::from_value(serde_json::json!({ "vlans": vlans }))
            .unwrap_or_else(|e| panic!("{e}"));
    let desired = spec.validate("spec").unwrap_or_else(|e| panic!("{e}"));
    let mut create = String::new();
    let mut remove = String::new();
    for id in 1..=1000u32 {
        create.push_str(&format!(
            "link add link v0 name v0.{id} type vlan id {id}\n\
             link set v0.{id} alias netpolicy\n\
             addr add 10.{}.{}.1/24 dev v0.{id}\n\
             link set v0.{id} up\n",
            100 + id / 256,
            id % 256
        ));
        remove.push_str(&format!("link del v0.{id}\n"));
    }
    let mut g = c.benchmark_group("vlan_1000");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .throughput(Throughput::Elements(1000));
    g.bench_function("ours", |b| {
        b.iter_batched(
            || {
                let ns = Netns::new();
                let a = ns.adapter();
                (ns, a)
            },
            |(ns, mut a)| {
                let up = a
                    .reconcile(&desired, false)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(up.failures().next().is_none(), "{:?}", up.failures().next());
                let down = a.cleanup().unwrap_or_else(|e| panic!("{e}"));
                assert!(down.failures().next().is_none());
                (ns, a)
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("ip_batch", |b| {
        b.iter_batched(
            Netns::new,
            |ns| {
                ns.ip_batch(&create);
                ns.ip_batch(&remove);
                ns
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, n1, n2, n4);
criterion_group!(vlan, vlan_1000);

fn main() {
    if !is_root() {
        println!("SKIP netlink benchmarks: they need root to create network namespaces");
        return;
    }
    // `--bench vlan_1000` alone runs the VLAN group (the VM runner does that).
    if std::env::args().any(|a| a == "vlan_1000") {
        vlan();
    } else {
        benches();
        vlan();
    }
    Criterion::default().configure_from_args().final_summary();
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    print_ratios(&[
        ("n1_routes_v4", "ours", "ip_batch"),
        ("n1_routes_v6", "ours", "ip_batch"),
        ("n4_rules", "ours", "ip_batch"),
        ("n2_noop_100k", "ours", "ip_show"),
        ("n2_noop_node", "ours", "ip_show"),
        ("n4_noop_rules", "ours", "ip_show"),
        ("vlan_1000", "ours", "ip_batch"),
    ]);
}
