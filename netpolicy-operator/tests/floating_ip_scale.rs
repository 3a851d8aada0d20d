//! A reported run, not a timed test (it is `#[ignore]`d; numbers go to stdout and
//! benches/README.md): the floating-IP job on the real API server with 10,000
//! FloatingIPs from one range, as `netpolicy operator` runs it.
//!
//! ```sh
//! cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture floating_ip_scale::
//! ```
//!
//! Measures: time from the operator's start until 10,000 FloatingIPs (created before it
//! started) all have their address, and the API writes that took; then a restart with
//! the 10,000 allocations in place: time until its first pass is done (state rebuilt
//! from the claims), and its writes (goal: 0); the operator's resident memory.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    collections::BTreeSet,
    io::{Read, Write},
    net::TcpStream,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use netpolicy_operator::api::{FloatingIP, FloatingIPRange, crds};
use serde_json::json;

const FIPS: usize = 10_000;
const NAMESPACES: usize = 10;

struct Killed(Child, u16);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Killed {
    fn passes(&self) -> f64 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.1)) else {
            return 0.0;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        );
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text.lines()
            .filter_map(|l| {
                l.strip_prefix("netpolicy_reconciles_total{controller=\"floating-ip\"} ")
            })
            .filter_map(|v| v.parse::<f64>().ok())
            .sum()
    }
}

fn start(cp: &netpolicy_testenv::ControlPlane, ns: &str, id: &str) -> Killed {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = cp.dir.join(format!("operator-fip-scale-{id}.log"));
    Killed(
        Command::new(env!("CARGO_BIN_EXE_netpolicy"))
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args([
                "--lease-namespace",
                ns,
                "--lease-seconds",
                "3",
                "--identity",
                id,
            ])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
        port,
    )
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (minutes): cargo test --release -p netpolicy-operator --test integration -- --ignored --nocapture floating_ip_scale::"]
async fn ten_thousand_floating_ips() {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("fip-scale-system").await;
    let mut namespaces = Vec::new();
    for _ in 0..NAMESPACES {
        namespaces.push(cp.namespace("fip-scale").await);
    }
    // 10.96.0.0/18: 16,382 usable addresses.
    let range: FloatingIPRange = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
        "metadata": {"name": "scale"}, "spec": {"cidrs": ["10.96.0.0/18"]}
    }))
    .unwrap();
    Api::<FloatingIPRange>::all(client.clone())
        .create(&PostParams::default(), &range)
        .await
        .unwrap();
    let t = Instant::now();
    stream::iter(0..FIPS)
        .for_each_concurrent(32, |i| {
            let api = Api::<FloatingIP>::namespaced(client.clone(), &namespaces[i % NAMESPACES]);
            async move {
                let f: FloatingIP = serde_json::from_value(json!({
                    "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
                    "metadata": {"name": format!("ip-{i:05}")}, "spec": {"range": "scale"}
                }))
                .unwrap();
                api.create(&PostParams::default(), &f).await.unwrap();
            }
        })
        .await;
    println!("created {FIPS} FloatingIPs in {:?}", t.elapsed());
    let writes = || {
        [
            "floatingips",
            "floatingipclaims",
            "floatingipranges",
            "events",
        ]
        .iter()
        // Everything after the FloatingIPs were made is the operator's: the test
        // only reads from then on.
        .map(|r| cp.writes_where(r, |_| true).len())
        .sum::<usize>()
    };
    let before = writes();
    let started = Instant::now();
    let op = start(cp, &system, "first");
    let all = Api::<FloatingIP>::all(client.clone());
    loop {
        let list = all.list(&ListParams::default()).await.unwrap();
        let addrs: BTreeSet<String> = list
            .items
            .iter()
            .filter_map(|f| f.status.as_ref()?.address.clone())
            .collect();
        let done = list
            .items
            .iter()
            .filter(|f| f.status.as_ref().and_then(|s| s.address.as_ref()).is_some())
            .count();
        if done >= FIPS {
            assert_eq!(addrs.len(), FIPS, "an address handed out twice");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "{done} of {FIPS}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let allocated = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "{FIPS} FloatingIPs allocated {allocated:?} after the operator started; {} API writes by the operator",
        writes() - before
    );
    println!(
        "operator resident memory with {FIPS} allocations: {} MiB",
        common::rss_kib(op.0.id()) / 1024
    );
    drop(op);

    // A restart: state rebuilt from the claims, nothing written.
    let before = writes();
    let restarted = Instant::now();
    let op = start(cp, &system, "second");
    while op.passes() < 1.0 {
        assert!(restarted.elapsed() < Duration::from_secs(300));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first_pass = restarted.elapsed();
    tokio::time::sleep(Duration::from_secs(10)).await;
    println!(
        "restart with {FIPS} allocations: first pass done after {first_pass:?} (lease, caches, pass); {} API writes",
        writes() - before
    );
    assert_eq!(writes() - before, 0);
}
