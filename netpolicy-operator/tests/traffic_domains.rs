//! Traffic domains end to end: the operator (trench and routing controllers) against the
//! real API server, and `netpolicy agent`s programming real network namespaces.
//!
//! A trench (two static gateways and a BGP one, two VIPs, a conduit, two streams, a TCP
//! and a UDP flow) on an untagged attractor interface (`ext0`, a veth in each node's
//! namespace: this kernel has no 802.1Q, the VM suite covers VLANs):
//! - the Trench's status hands out a table per trench and stream and an address per
//!   attractor node; NodeNetworkConfigs carry the compiled items with source
//!   `Trench/<ns>/<name>`; nodes outside the attractor get none;
//! - the kernel: `ip route get <vip> from <src> iif peer0 ipproto tcp dport 80` (a packet
//!   arriving from the gateways' side) selects the stream's table, which delivers it to
//!   the node (`local`), never back to the gateways; traffic no flow matches does not;
//! - a node that leaves the attractor frees its address and loses the items, the next
//!   node gets the freed address;
//! - a NodeConfig defining a trench item differently (at any priority) is a conflict
//!   (on the NodeConfig's status, and an Event on the Trench):
//!   the node keeps its config; an invalid Flow holds every node of the trench at its
//!   last good config and says why in the Flow's and the Trench's `Ready`;
//! - quiet: several resyncs write nothing (audit log).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{process::Command, time::Duration};

use common::Killed;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{NodeNetworkConfig, Trench, TrenchStatus, crds};
use netpolicy_testenv::eventually;
use serde_json::{Value, json};

async fn create(client: &Client, ns: &str, kind: &str, name: &str, spec: Value) {
    let mut meta = json!({"name": name});
    if kind != "Trench" {
        meta["labels"] = json!({"trench": "trench-a"});
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec,
    }))
    .unwrap();
    common::traffic_api(client, kind, ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("{kind}/{name}: {e}"));
}

/// The shared control plane with the CRDs and the agents' admission policy, a client,
/// and two fresh namespaces: the operator's lease's (`<name>-lease`) and the trench's.
async fn fresh(
    name: &str,
) -> (
    &'static netpolicy_testenv::ControlPlane,
    Client,
    String,
    String,
) {
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    common::admission_policy(&client).await;
    let lease_ns = cp.namespace(&format!("{name}-lease")).await;
    let ns = cp.namespace(name).await;
    (cp, client, lease_ns, ns)
}

async fn trench_status(client: &Client, ns: &str) -> TrenchStatus {
    Api::<Trench>::namespaced(client.clone(), ns)
        .get("trench-a")
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

async fn ready(client: &Client, ns: &str, kind: &str, name: &str) -> (String, String, String) {
    let o = common::traffic_api(client, kind, ns)
        .get(name)
        .await
        .unwrap();
    let c = o.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or(Value::Null);
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (s("status"), s("reason"), s("message"))
}

async fn nnc(client: &Client, node: &str) -> Option<NodeNetworkConfig> {
    Api::<NodeNetworkConfig>::all(client.clone())
        .get_opt(node)
        .await
        .unwrap()
}

/// The items of a NodeNetworkConfig that came from the trench, as JSON.
fn trench_items(n: &NodeNetworkConfig) -> Vec<Value> {
    let spec = serde_json::to_value(&n.spec).unwrap();
    let mut out = Vec::new();
    for field in ["vlans", "routes", "addresses", "rules"] {
        for item in spec[field].as_array().into_iter().flatten() {
            if item["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["kind"] == "Trench")
            {
                out.push(json!({"field": field, "item": item}));
            }
        }
    }
    out
}

async fn node(nodes: &Api<Node>, name: &str, attractor: bool) {
    let labels = if attractor {
        json!({"attractor": "a"})
    } else {
        json!({})
    };
    let n: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    nodes.create(&PostParams::default(), &n).await.unwrap();
}

/// A node's namespace with `ext0` (the attractor interface) and its veth peer `peer0`
/// (where traffic from the gateways arrives), forwarding on.
fn node_netns(purpose: &str) -> Option<TestNamespace> {
    let ns = TestNamespace::new(purpose).unwrap()?;
    ns.ip(&[
        "link", "add", "ext0", "type", "veth", "peer", "name", "peer0",
    ])
    .unwrap();
    for l in ["ext0", "peer0", "lo"] {
        ns.ip(&["link", "set", l, "up"]).unwrap();
    }
    let st = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    Some(ns)
}

fn route_get(ns: &TestNamespace, args: &[&str]) -> String {
    let mut a = vec!["route", "get"];
    a.extend_from_slice(args);
    ns.ip(&a).unwrap_or_else(|e| format!("error: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trench_is_compiled_into_node_routing_and_programmed_by_the_agents() {
    let (cp, client, lease_ns, ns) = fresh("td").await;
    let nodes: Api<Node> = Api::all(client.clone());
    let (a1, a2, a3, b1) = (
        cp.unique("td-a1"),
        cp.unique("td-a2"),
        cp.unique("td-a3"),
        cp.unique("td-b1"),
    );
    node(&nodes, &a1, true).await;
    node(&nodes, &a2, true).await;
    node(&nodes, &b1, false).await;

    // Agents for the two attractor nodes, when this machine lets us make namespaces.
    let netns1 = node_netns("td-a1");
    let netns2 = node_netns("td-a2");
    let kernel = netns1.is_some() && netns2.is_some();
    if !kernel {
        common::skip(
            "traffic_domains kernel part: not root, no network namespaces; the API part runs",
        );
    }
    let _agents: Vec<Killed> = [(&a1, &netns1), (&a2, &netns2)]
        .into_iter()
        .filter_map(|(n, ns)| {
            ns.as_ref().map(|ns| {
                common::agent(
                    &cp.kubeconfig,
                    n,
                    ns.name(),
                    &cp.dir.join(format!("agent-{n}.log")),
                )
            })
        })
        .collect();
    let _op = common::operator(
        cp,
        &lease_ns,
        &cp.dir.join("operator-traffic.log"),
        "info,netpolicy_operator::trench=debug",
    );

    create(
        &client,
        &ns,
        "Trench",
        "trench-a",
        json!({"ipFamily": "ipv4", "dataPlane": "node"}),
    )
    .await;
    create(
        &client,
        &ns,
        "Gateway",
        "gw-a",
        json!({"address": "169.254.100.150", "protocol": "static"}),
    )
    .await;
    create(
        &client,
        &ns,
        "Gateway",
        "gw-b",
        json!({"address": "169.254.100.151", "protocol": "static"}),
    )
    .await;
    create(&client, &ns, "Gateway", "gw-bgp", json!({"address": "169.254.100.152", "bgp": {"localAsn": 8103, "remoteAsn": 4248829953u32, "holdTime": "24s"}})).await;
    create(
        &client,
        &ns,
        "Vip",
        "vip-1",
        json!({"address": "20.0.0.1/32"}),
    )
    .await;
    create(
        &client,
        &ns,
        "Vip",
        "vip-2",
        json!({"address": "40.0.0.0/24"}),
    )
    .await;
    create(&client, &ns, "Conduit", "c1", json!({})).await;
    create(&client, &ns, "Stream", "s-tcp", json!({"conduit": "c1"})).await;
    create(&client, &ns, "Stream", "s-udp", json!({"conduit": "c1"})).await;
    create(&client, &ns, "Flow", "f-tcp", json!({"stream": "s-tcp", "vips": ["vip-1"], "sourceSubnets": ["0.0.0.0/0"], "destinationPorts": ["80", "4000-4100"], "protocols": ["tcp"], "priority": 10})).await;
    create(&client, &ns, "Flow", "f-udp", json!({"stream": "s-udp", "vips": ["vip-1", "vip-2"], "sourceSubnets": ["10.0.0.0/8"], "destinationPorts": ["5000"], "protocols": ["udp"], "priority": 1})).await;
    create(
        &client,
        &ns,
        "Attractor",
        "attr-a",
        json!({
            "nodeSelector": {"matchLabels": {"attractor": "a"}},
            "interface": {"name": "ext0", "link": "ext0", "ipv4Prefix": "169.254.100.0/24"},
            "gateways": ["gw-a", "gw-b", "gw-bgp"], "vips": ["vip-1", "vip-2"], "composites": ["c1"]
        }),
    )
    .await;

    // The trench job hands out tables and one address per attractor node.
    eventually(
        "the trench's status hands out tables and addresses",
        30,
        || async {
            let st = trench_status(&client, &ns).await;
            st.table.is_some()
                && st.stream_tables.len() == 2
                && st
                    .node_addresses
                    .get("attr-a")
                    .is_some_and(|m| m.len() == 2)
        },
    )
    .await;
    let st = trench_status(&client, &ns).await;
    let table = st.table.unwrap();
    let (t_tcp, t_udp) = (st.stream_tables["s-tcp"], st.stream_tables["s-udp"]);
    assert!((20000..=29999).contains(&table), "{st:?}");
    let addrs = &st.node_addresses["attr-a"];
    let (ad1, ad2) = (addrs[&a1][0].clone(), addrs[&a2][0].clone());
    assert_ne!(ad1, ad2, "two nodes, one address: {addrs:?}");
    for a in [&ad1, &ad2] {
        assert!(a.starts_with("169.254.100.") && a.ends_with("/24"), "{a}");
        assert!(
            !a.starts_with("169.254.100.15"),
            "a gateway's address was handed out: {a}"
        );
    }
    assert!(!addrs.contains_key(&b1));
    eventually("the trench turns Ready", 30, || async {
        ready(&client, &ns, "Trench", "trench-a").await.0 == "True"
    })
    .await;
    eventually(
        "the BGP gateway is reported as not programmable",
        30,
        || async {
            let (s, reason, _) = ready(&client, &ns, "Gateway", "gw-bgp").await;
            (s.as_str(), reason.as_str()) == ("False", "NotProgrammable")
        },
    )
    .await;
    // The Trench can be Ready from a pass that ran before the Flow existed: wait.
    eventually("the Flow turns Ready", 30, || async {
        ready(&client, &ns, "Flow", "f-tcp").await.0 == "True"
    })
    .await;

    // The NodeNetworkConfigs carry the compiled items.
    eventually(
        "attractor nodes' NodeNetworkConfigs carry the trench",
        30,
        || async {
            let mut ok = true;
            for n in [&a1, &a2] {
                // Every object compiled: both flows' rules are there (the objects
                // arrive one by one, and so do intermediate renderings).
                ok &= nnc(&client, n).await.is_some_and(|o| {
                    let items = trench_items(&o);
                    let rule = |t: u32| {
                        items
                            .iter()
                            .any(|i| i["field"] == "rules" && i["item"]["table"] == t)
                    };
                    rule(t_tcp) && rule(t_udp)
                });
            }
            ok
        },
    )
    .await;
    let o1 = nnc(&client, &a1).await.unwrap();
    let items = trench_items(&o1);
    let text = serde_json::to_string(&items).unwrap();
    assert!(
        text.contains(&format!("\"name\":\"{ns}/trench-a\"")),
        "{text}"
    );
    let has = |field: &str, pick: &dyn Fn(&Value) -> bool| {
        items
            .iter()
            .any(|i| i["field"] == field && pick(&i["item"]))
    };
    assert!(has("addresses", &|i| i["dev"] == "ext0"
        && i["address"] == ad1.as_str()));
    // ECMP over the two static gateways; the BGP one is not programmed.
    assert!(has("routes", &|i| i["to"] == "0.0.0.0/0"
        && i["table"] == table
        && i["nexthops"].as_array().is_some_and(|n| n.len() == 2)));
    assert!(!text.contains("169.254.100.152"), "{text}");
    assert!(has("rules", &|i| i["from"] == "20.0.0.1/32"
        && i["table"] == table));
    assert!(has("rules", &|i| i["to"] == "20.0.0.1/32"
        && i["ipProto"] == "tcp"
        && i["dport"] == "4000-4100"
        && i["table"] == t_tcp));
    assert!(has("rules", &|i| i["to"] == "40.0.0.0/24"
        && i["from"] == "10.0.0.0/8"
        && i["ipProto"] == "udp"
        && i["table"] == t_udp));
    // Higher priority matches first.
    let prio = |t: u32| {
        items
            .iter()
            .filter(|i| i["field"] == "rules" && i["item"]["table"] == t)
            .filter_map(|i| i["item"]["priority"].as_u64())
            .min()
            .unwrap()
    };
    assert!(
        prio(t_tcp) < prio(t_udp),
        "flow priority 10 must come before 1"
    );
    eventually(
        "the other node's NodeNetworkConfig exists without trench items",
        30,
        || async {
            nnc(&client, &b1)
                .await
                .is_some_and(|o| trench_items(&o).is_empty())
        },
    )
    .await;

    // The kernel: a packet from the gateways' side selects the stream's table.
    if let (Some(k1), Some(_)) = (&netns1, &netns2) {
        eventually("the agent programmed the trench", 30, || async {
            route_get(
                k1,
                &[
                    "20.0.0.1", "from", "10.1.2.3", "iif", "peer0", "ipproto", "tcp", "dport", "80",
                ],
            )
            .contains(&format!("table {t_tcp}"))
        })
        .await;
        let got = route_get(
            k1,
            &[
                "20.0.0.1", "from", "10.1.2.3", "iif", "peer0", "ipproto", "tcp", "dport", "4050",
            ],
        );
        // The stream's table delivers it to the node; never back to the gateways.
        assert!(
            got.starts_with("local 20.0.0.1")
                && got.contains(&format!("table {t_tcp}"))
                && got.contains("dev lo"),
            "{got}"
        );
        assert!(!got.contains("via 169.254.100.15"), "{got}");
        let got = route_get(
            k1,
            &[
                "40.0.0.7", "from", "10.9.9.9", "iif", "peer0", "ipproto", "udp", "dport", "5000",
            ],
        );
        assert!(got.contains(&format!("table {t_udp}")), "{got}");
        // No flow: another port, another source.
        for args in [
            [
                "20.0.0.1", "from", "10.1.2.3", "iif", "peer0", "ipproto", "tcp", "dport", "81",
            ],
            [
                "40.0.0.7",
                "from",
                "192.168.1.1",
                "iif",
                "peer0",
                "ipproto",
                "udp",
                "dport",
                "5000",
            ],
        ] {
            let got = route_get(k1, &args);
            assert!(!got.contains("table 2"), "{args:?}: {got}");
        }
        // Replies from a VIP leave through the gateways.
        let got = route_get(k1, &["192.0.2.9", "from", "20.0.0.1", "iif", "peer0"]);
        assert!(got.contains(&format!("table {table}")), "{got}");
        let addr = k1.ip(&["-4", "addr", "show", "dev", "ext0"]).unwrap();
        assert!(addr.contains(&format!("inet {ad1}")), "{addr}");
        println!("kernel: {a1} routes flows by the stream tables {t_tcp}/{t_udp}");
    }

    // A node that leaves the attractor frees its address; the next one gets it.
    nodes
        .patch(
            &a2,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"attractor": null}}})),
        )
        .await
        .unwrap();
    eventually("the leaving node's address is freed", 30, || async {
        !trench_status(&client, &ns).await.node_addresses["attr-a"].contains_key(&a2)
    })
    .await;
    eventually("the leaving node loses the trench items", 30, || async {
        nnc(&client, &a2)
            .await
            .is_some_and(|o| trench_items(&o).is_empty())
    })
    .await;
    if let Some(k2) = &netns2 {
        eventually("the agent removed the address", 30, || async {
            !k2.ip(&["-4", "addr", "show", "dev", "ext0"])
                .unwrap()
                .contains(&ad2)
        })
        .await;
    }
    node(&nodes, &a3, true).await;
    eventually("the next node gets the freed address", 30, || async {
        trench_status(&client, &ns).await.node_addresses["attr-a"].get(&a3)
            == Some(&vec![ad2.clone()])
    })
    .await;
    assert_eq!(
        trench_status(&client, &ns).await.node_addresses["attr-a"][&a1],
        vec![ad1.clone()],
        "a staying node's address moved"
    );

    // A NodeConfig defining a trench item differently is a conflict, whatever its
    // priority: the node keeps its config.
    let before = nnc(&client, &a1).await.unwrap().spec;
    let ncs: Api<netpolicy_operator::api::NodeConfig> = Api::all(client.clone());
    let nc_name = cp.unique("td-clash");
    let nc: netpolicy_operator::api::NodeConfig = serde_json::from_value(json!({
        "metadata": {"name": nc_name},
        "spec": {"priority": 1000, "nodeSelector": {"matchLabels": {"attractor": "a"}},
                 "routes": [{"to": "default", "via": "10.9.9.9", "dev": "ext0", "table": table}]}
    }))
    .unwrap();
    ncs.create(&PostParams::default(), &nc).await.unwrap();
    eventually(
        "the NodeConfig reports the conflict with the trench",
        30,
        || async {
            ncs.get(&nc_name).await.unwrap().status.is_some_and(|s| {
                s.conflicts
                    .iter()
                    .any(|c| c.sources.iter().any(|x| x.contains("Trench/")))
            })
        },
    )
    .await;
    // The Trench's side shows it too: a Warning Event on the Trench.
    eventually("a Conflict Event on the Trench", 20, || async {
        common::events_about(&client, Some(&ns), "Conflict", "Trench", "trench-a")
            .await
            .iter()
            .any(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains(nc_name.as_str()))
            })
    })
    .await;
    assert_eq!(
        nnc(&client, &a1).await.unwrap().spec,
        before,
        "a conflict changed the node"
    );
    ncs.delete(&nc_name, &DeleteParams::default())
        .await
        .unwrap();

    // An invalid Flow: every node of the trench keeps its last good config.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = nnc(&client, &a1).await.unwrap().spec;
    common::traffic_api(&client, "Flow", &ns)
        .patch(
            "f-tcp",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"stream": "no-such-stream", "destinationPorts": ["81"]}}),
            ),
        )
        .await
        .unwrap();
    eventually("the Flow reports its missing stream", 30, || async {
        let (s, r, m) = ready(&client, &ns, "Flow", "f-tcp").await;
        s == "False" && r == "Invalid" && m.contains("no-such-stream")
    })
    .await;
    // The Trench's status is written after its children's in the same pass.
    eventually("the Trench reports its invalid Flow", 10, || async {
        ready(&client, &ns, "Trench", "trench-a").await.1 == "Invalid"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        nnc(&client, &a1).await.unwrap().spec,
        before,
        "an invalid trench changed a node"
    );
    common::traffic_api(&client, "Flow", &ns)
        .patch(
            "f-tcp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"stream": "s-tcp"}})),
        )
        .await
        .unwrap();
    eventually(
        "fixed, the trench compiles again with the new port",
        30,
        || async {
            nnc(&client, &a1)
                .await
                .is_some_and(|o| trench_items(&o).iter().any(|i| i["item"]["dport"] == "81"))
        },
    )
    .await;

    // Quiet: several resyncs (2 s) write nothing.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let resources = [
        "trenches",
        "attractors",
        "gateways",
        "vips",
        "conduits",
        "streams",
        "flows",
        "nodenetworkconfigs",
        "nodeconfigs",
    ];
    let count = || -> usize {
        resources
            .iter()
            .map(|r| cp.writes_where(r, |_| true).len())
            .sum()
    };
    let before = count();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let after = count();
    assert_eq!(
        after - before,
        0,
        "quiet resyncs wrote {} times",
        after - before
    );
}

/// Issue 40: deleting a Trench that never became valid left its children behind: only a
/// valid `meridio` trench's children got an ownerReference. Now every child of an
/// existing Trench is owned by it, valid or not, whatever its data plane, so the garbage
/// collector removes them with it (this control plane runs no garbage collector: the
/// ownerReferences are what is checked).
#[tokio::test(flavor = "multi_thread")]
async fn the_children_of_an_invalid_trench_are_owned_by_it() {
    let (cp, client, lease_ns, ns) = fresh("td-owned").await;
    let _op = common::operator(
        cp,
        &lease_ns,
        &cp.dir.join("operator-traffic-owned.log"),
        "info",
    );
    create(
        &client,
        &ns,
        "Trench",
        "trench-a",
        json!({"ipFamily": "ipv4", "dataPlane": "node"}),
    )
    .await;
    // Invalid: the Flow names a stream that does not exist.
    create(
        &client,
        &ns,
        "Flow",
        "flow-a",
        json!({"stream": "no-such-stream", "vips": ["no-such-vip"], "protocols": ["tcp"], "priority": 1}),
    )
    .await;
    create(
        &client,
        &ns,
        "Gateway",
        "gw-a",
        json!({"address": "192.0.2.1", "protocol": "static"}),
    )
    .await;
    let uid = Api::<Trench>::namespaced(client.clone(), &ns)
        .get("trench-a")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    for kind in ["Flow", "Gateway"] {
        let api = common::traffic_api(&client, kind, &ns);
        let name = if kind == "Flow" { "flow-a" } else { "gw-a" };
        eventually(&format!("{kind} owned by the Trench"), 20, || async {
            api.get(name).await.ok().is_some_and(|o| {
                o.metadata
                    .owner_references
                    .unwrap_or_default()
                    .iter()
                    .any(|r| r.kind == "Trench" && r.uid == uid)
            })
        })
        .await;
    }
    eventually("the Flow says it is invalid", 20, || async {
        ready(&client, &ns, "Flow", "flow-a").await.0 == "False"
    })
    .await;
}
