//! Shared renderings end to end (issue 68; docs/architecture.md, node agent model): the
//! operator with `--shared-renderings` against the real API server, and `netpolicy
//! agent`s programming real network namespaces.
//!
//! - In place: the operator started again with shared renderings moves nodes whose
//!   agents read them from whole per-node objects to their own items over their
//!   group's rendering, and `ip monitor` hears no route of theirs removed or re-added.
//! - A policy edit then writes no NodeNetworkConfig spec: one new rendering, and one
//!   NetworkRollout moved on wave by wave (`maxUnavailable: 1`: three waves over three
//!   nodes); every kernel gets the change; the rollout is folded into the fleet and
//!   deleted, and the rendering left behind is deleted once every node runs the new one.
//! - Quiet: over several resyncs, no spec, fleet, rollout or rendering is written.
//! - An edit of one route of the ClusterConfig's layer: each agent builds the new layer
//!   from the old one and the delta the operator wrote (not read whole), and its kernel
//!   changes that one route only; the old layer and the delta go with the rollout.
//! - A node that joins starts on a shared object (its first write) while every agent
//!   reads shared renderings; an older agent's node gets a whole object, and while it is
//!   about a node that joins gets a whole one too.
//! - The agent's read of a rendering (`list_labelled`): from the watch cache, and from
//!   etcd when the cached answer is refused; a rendering just written is read whole.
//!
//! Its own control plane: the fleet is one object per cluster, and other tests' operators
//! write whole per-node objects.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
};

use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use netpolicy_netlink::testns::TestNamespace;
use netpolicy_operator::api::{
    NetworkFleet, NetworkRollout, NodeNetworkConfig, NodeNetworkRendering, crds,
};
use netpolicy_testenv::eventually;
use serde_json::json;

use crate::common;

/// The NodeNetworkConfigs of `names` (those that exist yet).
async fn nncs(client: &Client, names: &[String]) -> Vec<NodeNetworkConfig> {
    let api: Api<NodeNetworkConfig> = Api::all(client.clone());
    let mut out = Vec::new();
    for n in names {
        out.extend(api.get_opt(n).await.unwrap());
    }
    out
}

/// Creates Node `name` in pool `edge`.
async fn add_node(client: &Client, name: &str) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"pool": "edge"}}}))
            .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
}

/// The rendering `o`'s agent reports applied.
fn applied(o: &NodeNetworkConfig) -> String {
    o.status
        .as_ref()
        .and_then(|s| s.applied_rendering.clone())
        .unwrap()
}

/// Our rendering parts' names and uids, with the rendering or layer each is of.
async fn stored(client: &Client) -> Vec<(String, String, String)> {
    let api: Api<NodeNetworkRendering> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| {
            let uid = r.uid().unwrap_or_default();
            (r.spec.rendering.clone(), r.name_any(), uid)
        })
        .collect()
}

/// Our renderings' names (`spec.rendering` of each part; layers aside).
async fn renderings(client: &Client) -> BTreeSet<String> {
    let all = stored(client).await.into_iter();
    all.map(|(r, _, _)| r)
        .filter(|r| r.starts_with("r-"))
        .collect()
}

/// Our layers' objects, each with its uid (a layer made again has another).
async fn layers(client: &Client) -> BTreeMap<String, String> {
    let all = stored(client).await.into_iter();
    all.filter(|(r, _, _)| r.starts_with("l-"))
        .map(|(_, name, uid)| (name, uid))
        .collect()
}

/// The ClusterConfig's blackhole routes in table 101: 120 of them, more than a layer's
/// least size, so that every rendering is laid over one layer of them.
const BLACKHOLES: usize = 120;

/// The ClusterConfig's routes; `moved`: its blackhole 10.31.5.0/24 is 10.31.250.0/24.
fn cluster_routes(moved: Option<()>) -> Vec<serde_json::Value> {
    std::iter::once(json!({"to": "10.30.0.0/16", "via": "192.0.2.1", "table": 100}))
        .chain((0..BLACKHOLES).map(|i| {
            let third = if i == 5 && moved.is_some() { 250 } else { i };
            json!({"to": format!("10.31.{third}.0/24"), "type": "blackhole", "table": 101})
        }))
        .collect()
}

fn node_config(pool: &str, via: &str) -> serde_json::Value {
    json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
        "metadata": {"name": "edge"},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": pool}},
            "routes": [{"to": "10.20.0.0/16", "via": via, "table": 100}],
            "rollout": {"maxUnavailable": 1},
        },
    })
}

/// `ip monitor route` in each namespace, listening once this returns.
async fn monitor_routes(nets: &[TestNamespace]) -> Vec<std::process::Child> {
    let monitors = nets
        .iter()
        .map(|ns| {
            std::process::Command::new("ip")
                .args(["-n", ns.name(), "monitor", "route"])
                .stdout(std::process::Stdio::piped())
                // Not the test's stderr: a monitor a failed assertion leaves running
                // must not hold the output of `cargo test | ...` open.
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    monitors
}

/// What a monitor heard, once stopped.
fn heard(mut m: std::process::Child) -> String {
    let _ = m.kill();
    let out = m.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edit_rolls_out_in_one_rollout_and_writes_no_node_object() {
    let mut nets = Vec::new();
    for i in 0..3 {
        let Some(ns) = TestNamespace::new(&format!("shared renderings {i}")).unwrap() else {
            return;
        };
        nets.push(ns);
    }
    let cp = netpolicy_testenv::dedicated();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let names: Vec<String> = (0..3).map(|i| format!("shared-{i}")).collect();
    for n in &names {
        add_node(&client, n).await;
    }
    // A ClusterConfig beside the NodeConfig: the NodeConfig's edit below leaves its
    // items as they are, so its status must not move while the edit rolls out.
    let ccs: Api<netpolicy_operator::api::ClusterConfig> = Api::all(client.clone());
    ccs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
            "metadata": {"name": "default"},
            "spec": {"routes": cluster_routes(None)},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let ncs: Api<netpolicy_operator::api::NodeConfig> = Api::all(client.clone());
    ncs.create(
        &PostParams::default(),
        &serde_json::from_value(node_config("edge", "192.0.2.1")).unwrap(),
    )
    .await
    .unwrap();
    let _agents: Vec<common::Killed> = names
        .iter()
        .zip(&nets)
        .map(|(n, ns)| {
            common::agent(
                &cp.kubeconfig,
                n,
                ns.name(),
                &cp.dir.join(format!("agent-{n}.log")),
            )
        })
        .collect();
    let kernels = |via: &str| {
        let want = format!("10.20.0.0/16 via {via} dev v0");
        let last = format!("blackhole 10.31.{}.0/24", BLACKHOLES - 1);
        nets.iter().all(|ns| {
            ns.ip(&["route", "show", "table", "100"])
                .unwrap_or_default()
                .contains(&want)
                && ns
                    .ip(&["route", "show", "table", "101"])
                    .unwrap_or_default()
                    .contains(&last)
        })
    };
    // Before: the operator without shared renderings, whole per-node objects.
    let log = cp.dir.join("operator-shared.log");
    let rust_log = "info,netpolicy_operator::routing=debug";
    let before = common::operator_with(cp, "default", &log, rust_log, &[]);
    eventually(
        "every node applied its whole per-node object",
        60,
        || async {
            let all = nncs(&client, &names).await;
            all.len() == 3
                && all.iter().all(|o| {
                    !o.spec.shared
                        && o.status
                            .as_ref()
                            .and_then(|s| s.applied_revision.as_deref())
                            == Some(o.spec.revision.as_str())
                })
                && kernels("192.0.2.1")
        },
    )
    .await;
    // The upgrade in place: the kernel's route notifications from here until every node
    // runs its shared object. A foreign route added and removed first shows the
    // monitors hear.
    let monitors = monitor_routes(&nets).await;
    for ns in &nets {
        ns.ip(&["route", "add", "10.99.0.0/16", "dev", "v0", "table", "100"])
            .unwrap();
        ns.ip(&["route", "del", "10.99.0.0/16", "table", "100"])
            .unwrap();
    }
    drop(before);
    let _op = common::operator_with(
        cp,
        "default",
        &log,
        rust_log,
        &["--shared-renderings", "true"],
    );
    eventually(
        "every node runs a shared object with its group's rendering",
        60,
        || async {
            let all = nncs(&client, &names).await;
            let on: BTreeSet<Option<String>> = all
                .iter()
                .map(|o| o.status.as_ref().and_then(|s| s.applied_rendering.clone()))
                .collect();
            all.iter().all(|o| o.spec.shared)
                && on.len() == 1
                && !on.contains(&None)
                && kernels("192.0.2.1")
        },
    )
    .await;
    // A resync of every agent on its shared object, then what the kernels said.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    for (m, ns) in monitors.into_iter().zip(&nets) {
        let text = heard(m);
        assert!(
            text.contains("10.99.0.0/16"),
            "{}: the monitor heard nothing: {text}",
            ns.name()
        );
        let touched: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("10.20.0.0/16") || l.contains("10.31."))
            .collect();
        assert_eq!(
            touched,
            [] as [&str; 0],
            "{}: moving to a shared object removed or re-added a route",
            ns.name()
        );
    }
    let first: Vec<NodeNetworkConfig> = nncs(&client, &names).await;
    let r1 = applied(&first[0]);
    for o in &first {
        assert!(
            o.spec.rendered.routes.is_empty(),
            "{}: the node has no route of its own: {:?}",
            o.name_any(),
            o.spec.rendered.routes
        );
    }
    // The ClusterConfig's blackholes are one layer, which the rendering names.
    let layers1 = layers(&client).await;
    assert_eq!(layers1.len(), 1, "one layer of one part: {layers1:?}");
    let r1_part = Api::<NodeNetworkRendering>::all(client.clone())
        .get(&r1)
        .await
        .unwrap();
    assert_eq!(
        r1_part.spec.layers,
        layers1.keys().cloned().collect::<Vec<_>>()
    );
    // Every version of every rollout, from here on.
    let fleets: Api<NetworkFleet> = Api::all(client.clone());
    let rollouts: Api<NetworkRollout> = Api::all(client.clone());
    type Seen = Vec<(String, Option<String>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let watch = {
        let seen = Arc::clone(&seen);
        let mut stream = watcher(rollouts.clone(), watcher::Config::default())
            .applied_objects()
            .boxed();
        tokio::spawn(async move {
            while let Some(Ok(r)) = stream.next().await {
                let through = r.spec.groups.first().and_then(|g| g.through.clone());
                seen.lock().unwrap().push((r.name_any(), through));
            }
        })
    };
    // The ClusterConfig says every node applied it; from here its status stays.
    eventually("the ClusterConfig is applied on every node", 30, || async {
        ccs.get("default").await.unwrap().status.is_some_and(|s| {
            s.applied_nodes == 3
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    })
    .await;
    let cc_version = ccs.get("default").await.unwrap().metadata.resource_version;
    let generations: BTreeMap<String, Option<i64>> = first
        .iter()
        .map(|o| (o.name_any(), o.metadata.generation))
        .collect();

    // The kernels' route notifications from the edit to the end: once a node runs the
    // edit it never goes back (a rollout deleted before the fleet that folds it is
    // seen must not send it to the old settled rendering).
    let monitors = monitor_routes(&nets).await;
    // The edit: one route's gateway.
    ncs.patch(
        "edge",
        &PatchParams::apply("netpolicy-tests").force(),
        &Patch::Apply(node_config("edge", "192.0.2.2")),
    )
    .await
    .unwrap();
    eventually(
        "every kernel has the edit, every node reports the new rendering",
        60,
        || async {
            let all = nncs(&client, &names).await;
            kernels("192.0.2.2")
                && all.iter().all(|o| {
                    o.status
                        .as_ref()
                        .and_then(|s| s.applied_rendering.as_deref())
                        .is_some_and(|r| r != r1)
                })
        },
    )
    .await;
    let after = nncs(&client, &names).await;
    for o in &after {
        assert_eq!(
            o.metadata.generation,
            generations[&o.name_any()],
            "{}: an edit of a shared policy writes no node object",
            o.name_any()
        );
    }
    let r2 = applied(&after[0]);
    eventually(
        "the rendering no node runs any more is deleted",
        30,
        || async { renderings(&client).await == BTreeSet::from([r2.clone()]) },
    )
    .await;
    assert_eq!(
        layers(&client).await,
        layers1,
        "the NodeConfig's edit neither made the layer again nor deleted it with the old rendering"
    );
    eventually(
        "the rollout is folded into the fleet and deleted",
        30,
        || async {
            rollouts
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        },
    )
    .await;
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    let rollout_names: BTreeSet<&String> = seen.iter().map(|(n, _)| n).collect();
    assert_eq!(rollout_names.len(), 1, "one rollout for the edit: {seen:?}");
    let keys: BTreeSet<&String> = seen
        .iter()
        .filter_map(|(_, t)| t.as_ref())
        .filter(|t| *t != "*")
        .collect();
    assert_eq!(
        keys.len(),
        2,
        "three waves of one node: two keys, then every node: {seen:?}"
    );
    let settled = fleets.get("default").await.unwrap().spec.groups;
    assert!(
        settled.iter().any(|g| g.rendering == r2),
        "the fleet settles the group on the new rendering: {settled:?}"
    );

    // Quiet: three resyncs of the operator (2 s) and several of the agents (1 s).
    let fleet_version = fleets
        .get("default")
        .await
        .unwrap()
        .metadata
        .resource_version;
    let versions: Vec<Option<String>> = after
        .iter()
        .map(|o| o.metadata.resource_version.clone())
        .collect();
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    assert_eq!(
        fleets
            .get("default")
            .await
            .unwrap()
            .metadata
            .resource_version,
        fleet_version,
        "a quiet fleet is not written"
    );
    let cc = ccs.get("default").await.unwrap();
    assert_eq!(
        cc.metadata.resource_version, cc_version,
        "the ClusterConfig the edit left as it was: its status not written ({:?})",
        cc.status
    );
    let quiet = nncs(&client, &names).await;
    let now: Vec<Option<String>> = quiet
        .iter()
        .map(|o| o.metadata.resource_version.clone())
        .collect();
    // Who wrote, when and what, for a node that was written.
    let written: Vec<String> = quiet
        .iter()
        .zip(&versions)
        .filter(|(o, v)| o.metadata.resource_version != **v)
        .map(|(o, _)| {
            let managers: Vec<String> = o
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .map(|m| {
                    format!(
                        "{:?} {:?} {:?} {:?}",
                        m.manager, m.operation, m.subresource, m.time
                    )
                })
                .collect();
            format!("{}: {managers:?} status {:?}", o.name_any(), o.status)
        })
        .collect();
    assert_eq!(
        now, versions,
        "quiet nodes: no spec or status write: {written:#?}"
    );
    assert_eq!(renderings(&client).await, BTreeSet::from([r2.clone()]));
    for (m, ns) in monitors.into_iter().zip(&nets) {
        let text = heard(m);
        let added: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("10.20.0.0/16") && !l.starts_with("Deleted"))
            .collect();
        assert!(
            added.iter().any(|l| l.contains("via 192.0.2.2")),
            "{}: the monitor did not hear the edit: {text}",
            ns.name()
        );
        assert!(
            added
                .iter()
                .skip_while(|l| !l.contains("via 192.0.2.2"))
                .all(|l| l.contains("via 192.0.2.2")),
            "{}: the node went back to the old rendering after the edit: {text}",
            ns.name()
        );
    }

    // An edit of one route of the ClusterConfig's layer: a new layer, and the delta to
    // it from the old one, which each agent builds it from (the one route read, not the
    // layer whole; the result checked against the layer's name). Each kernel changes
    // that one route and no other of the layer's.
    let mut monitors = monitor_routes(&nets).await;
    ccs.patch(
        "default",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"routes": cluster_routes(Some(()))}})),
    )
    .await
    .unwrap();
    eventually(
        "every kernel has the moved blackhole, every node reports a new rendering",
        60,
        || async {
            let moved = nets.iter().all(|ns| {
                let t = ns
                    .ip(&["route", "show", "table", "101"])
                    .unwrap_or_default();
                t.contains("blackhole 10.31.250.0/24") && !t.contains("blackhole 10.31.5.0/24")
            });
            moved
                && nncs(&client, &names).await.iter().all(|o| {
                    o.status
                        .as_ref()
                        .and_then(|s| s.applied_rendering.as_deref())
                        .is_some_and(|r| r != r2)
                })
        },
    )
    .await;
    for (n, ns) in names.iter().zip(&nets) {
        let log = std::fs::read_to_string(cp.dir.join(format!("agent-{n}.log"))).unwrap();
        assert!(
            log.contains("layer built from its delta"),
            "{n}: the agent read the new layer whole: {log}"
        );
        let text = heard(monitors.remove(0));
        let touched: Vec<&str> = text.lines().filter(|l| l.contains("10.31.")).collect();
        assert_eq!(
            touched.len(),
            2,
            "{}: the old blackhole deleted and the new one added, no other: {text}",
            ns.name()
        );
    }
    let r2 = applied(&nncs(&client, &names).await[0]);
    eventually(
        "the old rendering, the old layer and the delta are deleted once the rollout is done",
        30,
        || async {
            let left: BTreeSet<String> = stored(&client)
                .await
                .into_iter()
                .map(|(r, _, _)| r)
                .collect();
            left.len() == 2
                && left.contains(&r2)
                && left
                    .iter()
                    .any(|r| r.starts_with("l-") && !layers1.contains_key(r))
        },
    )
    .await;

    // A node that joins once every agent reads shared renderings starts on a shared
    // object: its first write (generation 1) is shared, and its kernel gets the group's
    // rendering.
    let Some(ns3) = TestNamespace::new("shared renderings 3").unwrap() else {
        return;
    };
    let joined = "shared-3".to_owned();
    add_node(&client, &joined).await;
    let _agent3 = common::agent(
        &cp.kubeconfig,
        &joined,
        ns3.name(),
        &cp.dir.join(format!("agent-{joined}.log")),
    );
    eventually(
        "the node that joined runs its group's rendering",
        60,
        || async {
            ns3.ip(&["route", "show", "table", "100"])
                .unwrap_or_default()
                .contains("10.20.0.0/16 via 192.0.2.2 dev v0")
                && nncs(&client, std::slice::from_ref(&joined))
                    .await
                    .iter()
                    .any(|o| {
                        o.status
                            .as_ref()
                            .and_then(|s| s.applied_rendering.as_deref())
                            == Some(r2.as_str())
                    })
        },
    )
    .await;
    let o = &nncs(&client, std::slice::from_ref(&joined)).await[0];
    assert!(
        o.spec.shared && o.metadata.generation == Some(1),
        "{joined}: its first object is shared (never a whole copy): shared {} generation {:?}",
        o.spec.shared,
        o.metadata.generation
    );
    // An older agent (it reports applied, not `sharedRenderings`) on one node: a node
    // that joins then gets a whole object, which any agent reads.
    let old = "shared-old".to_owned();
    add_node(&client, &old).await;
    let nnc_api: Api<NodeNetworkConfig> = Api::all(client.clone());
    eventually("the older agent's node has an object", 30, || async {
        nnc_api.get_opt(&old).await.unwrap().is_some()
    })
    .await;
    let o = nnc_api.get(&old).await.unwrap();
    nnc_api
        .patch_status(
            &old,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "observedGeneration": o.metadata.generation,
                "appliedRevision": o.spec.revision,
            }})),
        )
        .await
        .unwrap();
    // The operator has heard it once it gives that agent a whole object (what it reads).
    eventually("the older agent's node gets a whole object", 30, || async {
        !nnc_api.get(&old).await.unwrap().spec.shared
    })
    .await;
    let late = "shared-late".to_owned();
    add_node(&client, &late).await;
    eventually("the node that joined after has an object", 30, || async {
        nnc_api.get_opt(&late).await.unwrap().is_some()
    })
    .await;
    let o = nnc_api.get(&late).await.unwrap();
    assert!(
        !o.spec.shared
            && o.spec
                .rendered
                .routes
                .iter()
                .any(|r| r.item.via.as_deref() == Some("192.0.2.2")),
        "{late}: with an older agent about, a node that joins gets its whole config: {:?}",
        o.spec
    );
}

/// `list_labelled`, how the agent reads a rendering's objects: the API server's watch
/// cache first, a consistent read when what the cache held is refused. A rendering
/// written just before is read whole every time (never a part short), and a refused
/// cached answer is read again from etcd.
#[tokio::test(flavor = "multi_thread")]
async fn a_rendering_just_written_is_read_whole_from_the_cache_or_etcd() {
    use netpolicy_operator::{
        api::{NodeNetworkRenderingSpec, RENDERING_LABEL, join},
        list_labelled,
    };
    let cp = netpolicy_testenv::shared();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let api: Api<NodeNetworkRendering> = Api::all(client);
    for i in 0..20 {
        let name = cp.unique(&format!("r-list-{i}"));
        for part in 0..2 {
            let mut o = NodeNetworkRendering::new(
                &format!("{name}-{part}"),
                NodeNetworkRenderingSpec {
                    rendering: name.clone(),
                    part,
                    parts: 2,
                    ..Default::default()
                },
            );
            o.metadata.labels = Some([(RENDERING_LABEL.to_owned(), name.clone())].into());
            api.create(&PostParams::default(), &o).await.unwrap();
        }
        let read = list_labelled(&api, &name, |parts| {
            join(&name, parts.iter().map(|p| &p.spec)).map(|_| parts.len())
        })
        .await
        .unwrap();
        assert_eq!(read, Ok(2), "rendering {name} read just after its write");
        // The cached answer refused: the consistent one is what comes back.
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let read = list_labelled(&api, &name, |parts| {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return Err(());
            }
            Ok(parts.len())
        })
        .await
        .unwrap();
        assert_eq!((read, calls.into_inner()), (Ok(2), 2), "{name}");
    }
}
