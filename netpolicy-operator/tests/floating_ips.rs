//! The floating-IP job of `netpolicy operator`, as real processes against a real API
//! server: static and dynamic allocation, a taken request naming its holder, range
//! status, exhaustion, kube-vip's ConfigMap, auto-allocation by Namespace, and no
//! address handed out twice while two operators run and the leader is SIGKILLed.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read, Write},
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
};
use netpolicy_operator::api::{FloatingIP, FloatingIPRange, crds};
use netpolicy_testenv::{ControlPlane, eventually};
use serde_json::json;

/// The operators watch the whole (shared) cluster: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Operator {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Operator {
    /// An operator with a 2 s resync, so "quiet" is measured over several resyncs.
    fn start(cp: &ControlPlane, ns: &str, lease: &str, id: &str) -> Self {
        Self::start_resyncing(cp, ns, lease, id, "2")
    }

    /// An operator resyncing every `resync` seconds.
    fn start_resyncing(cp: &ControlPlane, ns: &str, lease: &str, id: &str, resync: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = cp.dir.join(format!("fip-operator-{lease}-{id}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_netpolicy"))
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args([
                "--lease-namespace",
                ns,
                "--lease-name",
                lease,
                "--identity",
                id,
            ])
            .args([
                "--lease-seconds",
                "3",
                "--resync-seconds",
                resync,
                "--listen",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self { child, port, log }
    }

    fn metrics(&self) -> String {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return String::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        );
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    }

    fn leads(&self) -> bool {
        self.metrics().lines().any(|l| l == "netpolicy_leader 1")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn range(name: &str, cidr: &str, extra: serde_json::Value) -> FloatingIPRange {
    let mut spec = json!({"cidrs": [cidr]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

fn fip(name: &str, range: &str, address: Option<&str>) -> FloatingIP {
    serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
        "metadata": {"name": name}, "spec": {"range": range, "address": address}
    }))
    .unwrap()
}

async fn create_fip(client: &Client, ns: &str, name: &str, range: &str, address: Option<&str>) {
    Api::<FloatingIP>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &fip(name, range, address))
        .await
        .unwrap();
}

async fn address(client: &Client, ns: &str, name: &str) -> Option<String> {
    Api::<FloatingIP>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??
        .status?
        .address
}

/// (status, reason, message) of a FloatingIP's Ready condition.
async fn ready(client: &Client, ns: &str, name: &str) -> Option<(String, String, String)> {
    let f = Api::<FloatingIP>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let c = f
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status, c.reason, c.message))
}

async fn range_condition(client: &Client, name: &str, type_: &str) -> Option<String> {
    let r = Api::<FloatingIPRange>::all(client.clone())
        .get_opt(name)
        .await
        .ok()??;
    r.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status)
}

async fn kube_vip_data(client: &Client, ns: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt("kubevip")
        .await
        .unwrap()
        .and_then(|c| c.data)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn static_dynamic_taken_exhausted_released_published_and_quiet() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("fip-system").await;
    let kv = cp.namespace("fip-kube-vip").await;
    let (ns1, ns2) = (cp.namespace("fip-a").await, cp.namespace("fip-b").await);
    // Someone else's key in kube-vip's ConfigMap: it stays.
    Api::<ConfigMap>::namespaced(client.clone(), &kv)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "kubevip"},
                                           "data": {"cidr-global": "192.0.2.10/32"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let name = cp.unique("blue");
    // 10.77.0.0/29: 6 usable addresses, .1 to .6.
    Api::<FloatingIPRange>::all(client.clone())
        .create(
            &PostParams::default(),
            &range(
                &name,
                "10.77.0.0/29",
                json!({"kubeVip": {"publish": true, "namespace": kv}}),
            ),
        )
        .await
        .unwrap();
    let op = Operator::start(cp, &system, &cp.unique("lease"), "solo");
    create_fip(&client, &ns1, "pinned", &name, Some("10.77.0.3")).await;
    create_fip(&client, &ns1, "dyn", &name, None).await;
    create_fip(&client, &ns2, "dyn", &name, None).await;
    create_fip(&client, &ns2, "copycat", &name, Some("10.77.0.3")).await;
    eventually("static and dynamic allocations", 30, || async {
        address(&client, &ns1, "pinned").await.as_deref() == Some("10.77.0.3")
            && address(&client, &ns1, "dyn").await.is_some()
            && address(&client, &ns2, "dyn").await.is_some()
    })
    .await;
    // The static one first, then dynamic ones lowest first by namespace and name; no
    // two the same.
    let got = [
        address(&client, &ns1, "dyn").await.unwrap(),
        address(&client, &ns2, "dyn").await.unwrap(),
    ];
    assert_eq!(got, ["10.77.0.1", "10.77.0.2"], "{}", op.log());
    eventually("the taken request names its holder", 20, || async {
        ready(&client, &ns2, "copycat")
            .await
            .is_some_and(|(s, r, m)| {
                s == "False" && r == "Taken" && m.contains(&format!("{ns1}/pinned"))
            })
    })
    .await;
    assert_eq!(address(&client, &ns2, "copycat").await, None);
    eventually("range status", 20, || async {
        let r = Api::<FloatingIPRange>::all(client.clone())
            .get(&name)
            .await
            .unwrap();
        r.status.is_some_and(|s| {
            s.capacity.as_deref() == Some("6") && s.allocated.as_deref() == Some("3")
        })
    })
    .await;
    eventually("kube-vip's ConfigMap", 20, || async {
        let d = kube_vip_data(&client, &kv).await;
        d.get(&format!("cidr-{ns1}")).map(String::as_str) == Some("10.77.0.1/32,10.77.0.3/32")
            && d.get(&format!("cidr-{ns2}")).map(String::as_str) == Some("10.77.0.2/32")
            && d.get("cidr-global").map(String::as_str) == Some("192.0.2.10/32")
    })
    .await;

    // Exhaustion: .4, .5, .6, then nothing.
    for n in ["e1", "e2", "e3", "e4"] {
        create_fip(&client, &ns2, n, &name, None).await;
    }
    eventually("exhausted", 30, || async {
        range_condition(&client, &name, "Exhausted")
            .await
            .as_deref()
            == Some("True")
            && ready(&client, &ns2, "e4")
                .await
                .is_some_and(|(s, r, _)| s == "False" && r == "RangeExhausted")
    })
    .await;
    // Lowest first, by name, whichever pass served them (the fast path, or a resync's
    // full pass that came first).
    let served: Vec<Option<String>> =
        futures::future::join_all(["e1", "e2", "e3"].map(|n| address(&client, &ns2, n))).await;
    assert_eq!(
        served,
        ["10.77.0.4", "10.77.0.5", "10.77.0.6"].map(|a| Some(a.to_owned())),
        "{}",
        op.log()
    );
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "default");
    eventually("an Exhausted Event", 20, || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Exhausted")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
            })
    })
    .await;

    // A deletion releases; the waiting request gets the freed address.
    Api::<FloatingIP>::namespaced(client.clone(), &ns1)
        .delete("dyn", &DeleteParams::default())
        .await
        .unwrap();
    eventually("released and handed to the one waiting", 30, || async {
        address(&client, &ns2, "e4").await.as_deref() == Some("10.77.0.1")
    })
    .await;
    eventually("kube-vip follows", 20, || async {
        kube_vip_data(&client, &kv)
            .await
            .get(&format!("cidr-{ns1}"))
            .map(String::as_str)
            == Some("10.77.0.3/32")
    })
    .await;
    let claims = common::claims_of(&client, &name).await;
    let addrs: BTreeSet<&str> = claims.iter().map(|c| c.spec.address.as_str()).collect();
    assert_eq!(addrs.len(), 6);
    assert_eq!(claims.len(), 6);

    // Quiet: five resyncs (2 s) write nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let count = || {
        [
            "floatingips",
            "floatingipranges",
            "floatingipclaims",
            "configmaps",
        ]
        .iter()
        .map(|r| cp.writes_where(r, |_| true).len())
        .sum::<usize>()
    };
    let before = count();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        count() - before,
        0,
        "writes on a quiet cluster\n{}",
        op.log()
    );
}

/// A FloatingIP created while the pools of the last full pass hold is served from them
/// (`floating_ip::fast`): its claim without a pass over everything, the address a full
/// pass gives, then its status and kube-vip's from the full pass that follows. The
/// resync is an hour, so no full pass of the timer's can serve it first.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_floating_ip_is_claimed_by_the_fast_path_with_a_full_pass_address() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("fip-fast").await;
    let kv = cp.namespace("fip-fast-kube-vip").await;
    let ns = cp.namespace("fip-fast-apps").await;
    let name = cp.unique("fast");
    Api::<FloatingIPRange>::all(client.clone())
        .create(
            &PostParams::default(),
            &range(
                &name,
                "10.82.0.0/29",
                json!({"kubeVip": {"publish": true, "namespace": kv}}),
            ),
        )
        .await
        .unwrap();
    create_fip(&client, &ns, "pinned", &name, Some("10.82.0.2")).await;
    let op = Operator::start_resyncing(cp, &system, &cp.unique("lease"), "solo", "3600");
    eventually("the first FloatingIP's address", 30, || async {
        address(&client, &ns, "pinned").await.is_some()
    })
    .await;
    // Settled: its status and kube-vip's written (the full passes after its claim).
    eventually("kube-vip's ConfigMap", 20, || async {
        kube_vip_data(&client, &kv)
            .await
            .get(&format!("cidr-{ns}"))
            .map(String::as_str)
            == Some("10.82.0.2/32")
    })
    .await;
    create_fip(&client, &ns, "new", &name, None).await;
    eventually(
        "the new FloatingIP's address and kube-vip's",
        20,
        || async {
            address(&client, &ns, "new").await.as_deref() == Some("10.82.0.1")
                && kube_vip_data(&client, &kv)
                    .await
                    .get(&format!("cidr-{ns}"))
                    .map(String::as_str)
                    == Some("10.82.0.1/32,10.82.0.2/32")
        },
    )
    .await;
    let log = op.log();
    assert!(
        log.contains("(fast path) floating_ips=1 claimed=1"),
        "the new FloatingIP was not claimed by the fast path\n{log}"
    );
    let claims = common::claims_of(&client, &name).await;
    assert_eq!(claims.len(), 2, "one claim each: {claims:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_operators_and_a_kill_never_hand_out_an_address_twice() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("fip-ha").await;
    let name = cp.unique("burst");
    Api::<FloatingIPRange>::all(client.clone())
        .create(
            &PostParams::default(),
            &range(&name, "10.78.0.0/24", json!({})),
        )
        .await
        .unwrap();
    let lease = cp.unique("lease");
    let a = Operator::start(cp, &system, &lease, "a");
    let b = Operator::start(cp, &system, &lease, "b");
    eventually("one leads", 30, || async { a.leads() || b.leads() }).await;
    let (leader, standby) = if a.leads() { (a, b) } else { (b, a) };
    let mut namespaces = Vec::new();
    for _ in 0..4 {
        namespaces.push(cp.namespace("fip-burst").await);
    }
    // 200 FloatingIPs at once; the leader is killed half-way.
    let mut leader = leader;
    let mut tasks = Vec::new();
    let mut killed_at = 0;
    for i in 0..200 {
        let c = client.clone();
        let ns = namespaces[i % 4].clone();
        let range = name.clone();
        tasks.push(tokio::spawn(async move {
            create_fip(&c, &ns, &format!("ip-{i:03}"), &range, None).await;
        }));
        if i == 100 {
            // Kill once the leader has claimed some addresses, not all.
            eventually("the leader claims some", 30, || async {
                !common::claims_of(&client, &name).await.is_empty()
            })
            .await;
            leader.child.kill().unwrap();
            let _ = leader.child.wait();
            killed_at = common::claims_of(&client, &name).await.len();
        }
    }
    println!("claims when the leader was killed: {killed_at} of 200");
    assert!(killed_at < 200);
    for t in tasks {
        t.await.unwrap();
    }
    eventually("the standby takes over", 30, || async { standby.leads() }).await;
    eventually("every FloatingIP has an address", 90, || async {
        let mut n = 0;
        for ns in &namespaces {
            n += Api::<FloatingIP>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|f| f.status.as_ref().and_then(|s| s.address.as_ref()).is_some())
                .count();
        }
        n == 200
    })
    .await;
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    for ns in &namespaces {
        for f in Api::<FloatingIP>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            let a = f.status.unwrap().address.unwrap();
            let owner = format!("{ns}/{}", f.metadata.name.unwrap());
            assert!(
                held.insert(a.clone(), owner).is_none(),
                "{a} handed out twice"
            );
        }
    }
    // Lowest first: exactly .1 to .200.
    let want: BTreeSet<String> = (1..=200).map(|i| format!("10.78.0.{i}")).collect();
    assert_eq!(
        held.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "{}",
        standby.log()
    );
    // Nothing leaked: one claim per FloatingIP, naming it.
    eventually("one claim per address, no leftovers", 30, || async {
        let claims = common::claims_of(&client, &name).await;
        claims.len() == 200
            && claims.iter().all(|c| {
                held.get(&c.spec.address)
                    == Some(&format!("{}/{}", c.spec.owner.namespace, c.spec.owner.name))
            })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn namespaces_get_their_floating_ip_by_selector_and_prefix_and_free_it_when_deleted() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("fip-auto").await;
    let name = cp.unique("guests");
    let prefix = format!("c-m-{}", cp.unique("t"));
    let mk_ns = |name: String, labelled: bool| {
        let client = client.clone();
        async move {
            let labels = if labelled {
                json!({"fip": "yes"})
            } else {
                json!({})
            };
            Api::<Namespace>::all(client)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                        .unwrap(),
                )
                .await
                .unwrap();
        }
    };
    let guest = format!("{prefix}-one");
    let unlabelled = format!("{prefix}-two");
    let other = cp.unique("team");
    mk_ns(guest.clone(), true).await;
    mk_ns(unlabelled.clone(), false).await;
    mk_ns(other.clone(), true).await;
    Api::<FloatingIPRange>::all(client.clone())
        .create(
            &PostParams::default(),
            &range(
                &name,
                "10.79.0.0/28",
                json!({"autoAllocate": {"namespaceSelector": {"matchLabels": {"fip": "yes"}},
                                        "namespaceNamePrefix": prefix}}),
            ),
        )
        .await
        .unwrap();
    let _op = Operator::start(cp, &system, &cp.unique("lease"), "auto");
    let fip_name = format!("auto-{name}");
    eventually("the guest namespace gets its FloatingIP", 30, || async {
        address(&client, &guest, &fip_name).await.as_deref() == Some("10.79.0.1")
    })
    .await;
    for ns in [&unlabelled, &other] {
        assert!(
            Api::<FloatingIP>::namespaced(client.clone(), ns)
                .get_opt(&fip_name)
                .await
                .unwrap()
                .is_none(),
            "{ns} got one"
        );
    }
    // Deleting the Namespace frees the address (this API server runs no namespace
    // controller, so the Namespace stays Terminating: the operator does not wait).
    Api::<Namespace>::all(client.clone())
        .delete(&guest, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the address is released", 30, || async {
        common::claims_of(&client, &name).await.is_empty()
    })
    .await;
}

/// A Secret holding a kubeconfig, in `ns`.
async fn kubeconfig_secret(client: &Client, ns: &str, name: &str, text: &str) {
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name},
                                           "stringData": {"value": text}}))
            .unwrap(),
        )
        .await
        .unwrap();
}

/// (status, reason) of a FloatingIP's Published condition.
async fn published(client: &Client, ns: &str, name: &str) -> Option<(String, String)> {
    let f = Api::<FloatingIP>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let c = f
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Published")?;
    Some((c.status, c.reason))
}

#[tokio::test(flavor = "multi_thread")]
async fn guest_clusters_get_cidr_global_and_an_unreachable_one_blocks_no_other() {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let guest_cp = netpolicy_testenv::second();
    let client = cp.client().await;
    let guest = guest_cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("fip-guests").await;
    let (reachable, unreachable) = (cp.namespace("c-m-up").await, cp.namespace("c-m-down").await);
    let kubeconfig = std::fs::read_to_string(&guest_cp.kubeconfig).unwrap();
    kubeconfig_secret(&client, &reachable, "guest-kubeconfig", &kubeconfig).await;
    // A guest whose API server is gone: a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = kubeconfig.replace(
        guest_cp.server.as_str(),
        &format!("https://127.0.0.1:{closed}"),
    );
    assert_ne!(dead, kubeconfig);
    kubeconfig_secret(&client, &unreachable, "guest-kubeconfig", &dead).await;
    let name = cp.unique("guest-range");
    Api::<FloatingIPRange>::all(client.clone())
        .create(
            &PostParams::default(),
            &range(
                &name,
                "10.80.0.0/28",
                json!({"kubeVip": {"publish": true,
                                   "guestKubeconfigSecret": {"name": "guest-kubeconfig"}}}),
            ),
        )
        .await
        .unwrap();
    let op = Operator::start(cp, &system, &cp.unique("lease"), "guests");
    create_fip(&client, &unreachable, "vip", &name, None).await;
    create_fip(&client, &reachable, "vip", &name, None).await;
    eventually(
        "the guest's own ConfigMap holds cidr-global",
        40,
        || async {
            kube_vip_data(&guest, "kube-system")
                .await
                .get("cidr-global")
                .map(String::as_str)
                == Some("10.80.0.2/32")
        },
    )
    .await;
    eventually(
        "the reachable guest's FloatingIP says published",
        30,
        || async {
            published(&client, &reachable, "vip").await
                == Some(("True".to_owned(), "Published".to_owned()))
        },
    )
    .await;
    eventually(
        "the unreachable guest's FloatingIP says why",
        40,
        || async {
            published(&client, &unreachable, "vip").await
                == Some(("False".to_owned(), "GuestUnreachable".to_owned()))
        },
    )
    .await;
    // Nothing is published in the operator's own cluster for guest ranges.
    assert!(
        kube_vip_data(&client, "kube-system").await.is_empty(),
        "{}",
        op.log()
    );
    assert!(
        op.metrics()
            .contains("netpolicy_floating_ip_guest_publish_errors_total")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_move_keeps_the_old_address_until_the_new_one_is_held_and_a_range_waits_for_its_allocations()
 {
    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let system = cp.namespace("fip-move").await;
    let ns = cp.namespace("fip-mover").await;
    let name = cp.unique("moving");
    let ranges = Api::<FloatingIPRange>::all(client.clone());
    ranges
        .create(
            &PostParams::default(),
            &range(&name, "10.81.0.0/29", json!({})),
        )
        .await
        .unwrap();
    let _op = Operator::start(cp, &system, &cp.unique("lease"), "mover");
    create_fip(&client, &ns, "x", &name, None).await;
    create_fip(&client, &ns, "y", &name, None).await;
    eventually("allocated", 30, || async {
        address(&client, &ns, "x").await.as_deref() == Some("10.81.0.1")
            && address(&client, &ns, "y").await.as_deref() == Some("10.81.0.2")
    })
    .await;
    let fips = Api::<FloatingIP>::namespaced(client.clone(), &ns);
    let move_to = |to: &'static str| {
        let fips = fips.clone();
        async move {
            fips.patch(
                "x",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"address": to}})),
            )
            .await
            .unwrap();
        }
    };
    // Onto an address someone holds: refused, naming the holder, and x keeps .1.
    move_to("10.81.0.2").await;
    eventually("a move onto a taken address is refused", 30, || async {
        ready(&client, &ns, "x").await.is_some_and(|(s, _, m)| {
            s == "True" && m.contains("cannot move") && m.contains(&format!("{ns}/y"))
        })
    })
    .await;
    assert_eq!(
        address(&client, &ns, "x").await.as_deref(),
        Some("10.81.0.1")
    );
    // Onto a free one: moves; the old address is released after.
    move_to("10.81.0.5").await;
    eventually("moved", 30, || async {
        address(&client, &ns, "x").await.as_deref() == Some("10.81.0.5")
            && common::claims_of(&client, &name).await.len() == 2
    })
    .await;
    let held: BTreeSet<String> = common::claims_of(&client, &name)
        .await
        .into_iter()
        .map(|c| c.spec.address)
        .collect();
    assert_eq!(
        held,
        BTreeSet::from(["10.81.0.2".to_owned(), "10.81.0.5".to_owned()])
    );
    // Deleting the range waits for its allocations, and says so.
    ranges
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the range waits, and says why", 30, || async {
        let r = ranges.get_opt(&name).await.unwrap();
        r.is_some_and(|r| {
            r.status.is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Ready"
                        && c.status == "False"
                        && c.message.contains("2 allocation(s)")
                })
            })
        })
    })
    .await;
    fips.delete("x", &DeleteParams::default()).await.unwrap();
    fips.delete("y", &DeleteParams::default()).await.unwrap();
    eventually(
        "the range goes once its allocations are released",
        30,
        || async { ranges.get_opt(&name).await.unwrap().is_none() },
    )
    .await;
}

/// Issue 40: `examples/floating-ips/` applied as a reader applies it (one `kubectl apply
/// -f`, the operator already running) ends with every FloatingIP, the one `autoAllocate`
/// makes included, holding the address `netpolicy plan -f` printed for it. On a control
/// plane of its own: no other test's range selects the example's namespaces.
#[tokio::test(flavor = "multi_thread")]
async fn the_floating_ips_example_applied_ends_with_the_addresses_plan_prints() {
    use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams};

    let _serial = SERIAL.lock().await;
    let cp = netpolicy_testenv::second();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/floating-ips");
    let plan = Command::new(env!("CARGO_BIN_EXE_netpolicy"))
        .args(["plan", "-o", "json", "-f"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(plan.status.success(), "{plan:?}");
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let want: BTreeMap<String, String> = plan["floatingIPs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                format!(
                    "{}/{}",
                    f["namespace"].as_str().unwrap(),
                    f["name"].as_str().unwrap()
                ),
                f["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(want.len() >= 5, "{want:?}");

    let _op = Operator::start(cp, "default", "fip-example", "a");
    // kubectl's order: files by name, documents in order.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let pp = PatchParams::apply("kubectl").force();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, doc) in netpolicy_operator::manifest::split_documents(&text) {
            let v = netpolicy_operator::manifest::yaml::parse(&doc)
                .unwrap_or_else(|e| panic!("{}:{line}: {e}", file.display()))
                .to_json();
            let kind = v["kind"].as_str().unwrap().to_owned();
            let gvk = GroupVersionKind::try_from(&kube::core::TypeMeta {
                api_version: v["apiVersion"].as_str().unwrap().to_owned(),
                kind: kind.clone(),
            })
            .unwrap();
            // The API server's own name for the kind (as kubectl finds it).
            let (ar, _) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
            let obj: DynamicObject = serde_json::from_value(v.clone()).unwrap();
            let name = obj.metadata.name.clone().unwrap();
            let api: Api<DynamicObject> = match obj.metadata.namespace.as_deref() {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                None => Api::all_with(client.clone(), &ar),
            };
            api.patch(&name, &pp, &Patch::Apply(&obj))
                .await
                .unwrap_or_else(|e| panic!("{}: {kind} {name}: {e}", file.display()));
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut now = BTreeMap::new();
        for key in want.keys() {
            let (ns, name) = key.split_once('/').unwrap();
            if let Some(a) = address(&client, ns, name).await {
                now.insert(key.clone(), a);
            }
        }
        if now == want {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "plan printed {want:?}, the cluster holds {now:?} after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
