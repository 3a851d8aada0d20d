//! A cluster-wide edit with and without shared renderings (issue 68): a reported run,
//! not a timed test (`#[ignore]`d; numbers go to stdout and benches/README.md).
//!
//! ```sh
//! NETPOLICY_BIN=$PWD/target/release/netpolicy NETPOLICY_SCALE_NODES=2000 \
//!   cargo test --release -p netpolicy-operator --all-features --test integration -- \
//!   --ignored --nocapture shared_scale::
//! ```
//!
//! Workload: `NETPOLICY_SCALE_NODES` Nodes (default 2,000) over 100 pools, a
//! ClusterConfig of 500 routes and 100 NodeConfigs (one per pool): 100 distinct
//! configurations. A simulated agent per node, in this process, with the real agent's
//! four watches (its NodeNetworkConfig, its Node's metadata, the NetworkFleet, the
//! NetworkRollouts of its group by label) and the library's own selection
//! (`fleet::choose`, `SeenRollouts`, `join`, `Joined::lay`,
//! `NodeNetworkConfigSpec::effective`), reading its rendering and its layers by label
//! as the agent does (a new layer from its delta, `Joined::from_delta`, when it holds
//! the layer the delta is from), laying a rendering once, and a no-op kernel: it
//! applies what it would run at once (the moment counted as applied) and reports its
//! revision in its status (one merge patch when that changes; a newly applied rendering
//! after the node's share of the report spread, `fleet::report_delay`, as the agent: the
//! report is off the critical path, and printed apart). The spread is the fleet's
//! `reportSpreadMs`, as the agent takes it (the operator sets it from the node count:
//! 500 ms up to 1,000 nodes, half a millisecond a node above: 5,000 at 10,000), printed
//! with the run; `NETPOLICY_SCALE_REPORT_SPREAD_MS` measures another. At 10,000 nodes with 500 ms, a
//! wave's 2,500 status patches came while the wave's agents still read their rendering
//! and cost the API server the CPU they waited for (first wave 6.5 s instead of 4.6–5.1 s;
//! benches/README.md).
//!
//! `NETPOLICY_SCALE_AGENTS_PER_CONNECTION=20` makes the simulated agents' watches and
//! requests streams of shared HTTP/2 connections (20 agents a connection): kube's client
//! speaks HTTP/1.1, a connection per watch, and 10,000 agents' 40,000 watches are more
//! connections than the API server's 20,000 open files here.
//!
//! Each mode on a control plane of its own, the same workload: the operator's default
//! (one NodeNetworkConfig per node) and `--shared-renderings=true`. Measured from the
//! edit of one ClusterConfig route until every node runs it: the operator's writes (from
//! the audit log), the bytes it sent (the API server's `apiserver_request_body_size_bytes`),
//! the time until a quarter of the nodes (the default `maxUnavailable`'s first wave) have
//! applied the edit (and, apart, until their statuses say so), the growth of etcd's
//! database (`etcd_mvcc_db_total_size_in_bytes`), and the operator's peak memory (`NETPOLICY_SCALE_MODES=shared` or `per-node` runs one).
//! Each mode prints the line
//! `cluster-wide edit: W writes, B bytes, first wave applied in T s, etcd S MiB, operator R MiB`,
//! and with shared renderings the first wave's two shares (the edit until an agent hears
//! the rollout, then until the wave runs it), how it spread (the rollout reaching 10 %,
//! half and all of the agents; 1, 10 and 25 % of the nodes applying) and who used the
//! CPU meanwhile. Build the
//! test with `--release` (as above): the simulated agents then cost what the agent's
//! code costs, not a debug build's (2.0 s of CPU in the first wave against 7.5 s).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::common;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use netpolicy_operator::{
    api::{
        ClusterConfig, Joined, NetworkFleet, NetworkFleetSpec, NetworkRollout, NetworkRolloutSpec,
        NodeNetworkConfig, NodeNetworkConfigSpec, NodeNetworkRendering, SeenRollouts, crds,
        delta_name, delta_to, group_label, join,
        netpolicy_core::{
            fleet::{choose, report_delay},
            selector::Labels,
        },
    },
    list_labelled,
};
use serde_json::json;

const ROUTES: usize = 500;
/// The agents' `--report-spread-ms` when `NETPOLICY_SCALE_REPORT_SPREAD_MS` gives one
/// (to measure another); else each takes the fleet's `reportSpreadMs`, as the agent
/// does (the operator sets it from the node count: 5,000 at 10,000 nodes).
fn report_spread_given() -> Option<Duration> {
    std::env::var("NETPOLICY_SCALE_REPORT_SPREAD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
}
const POOLS: usize = 100;
const CONCURRENCY: usize = 48;
/// The route the edit changes, and its new gateway.
const EDITED: &str = "10.100.0.0/24";
const NEW_VIA: &str = "192.0.2.2";

fn nodes() -> usize {
    std::env::var("NETPOLICY_SCALE_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

fn cluster_config(via0: &str) -> serde_json::Value {
    let routes: Vec<serde_json::Value> = (0..ROUTES)
        .map(|i| {
            let via = if i == 0 { via0 } else { "192.0.2.1" };
            json!({"to": format!("10.{}.{}.0/24", 100 + i / 250, i % 250), "via": via, "table": 100})
        })
        .collect();
    json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
        "metadata": {"name": "default"}, "spec": {"routes": routes},
    })
}

/// What one simulated agent runs, as it last reported it.
#[derive(Debug, Clone, Default)]
struct Runs {
    /// Its object is shared.
    shared: bool,
    /// It reported the revision of its object's current spec (or of its rendering
    /// under it) applied.
    settled: bool,
    /// It runs the edit (its no-op kernel has it), since when.
    edited: Option<Instant>,
    /// Its status says so (after its report delay), since when.
    reported: Option<Instant>,
}

type Fleet = Arc<Mutex<BTreeMap<String, Runs>>>;

/// When agents heard a rollout written (each event), to tell the operator's share of
/// the first wave (edit → a rollout heard) from the agents' (→ the wave applied).
type Heard = Arc<Mutex<Vec<Instant>>>;

/// One node's simulated agent: the real agent's watches and selection, a no-op kernel.
async fn agent(client: Client, node: String, fleet: Fleet, heard: Heard) {
    let by_name = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let nncs: Api<NodeNetworkConfig> = Api::all(client.clone());
    let mut own = watcher(nncs.clone(), by_name.clone())
        .default_backoff()
        .boxed();
    let mut meta = watcher(Api::<PartialObjectMeta<Node>>::all(client.clone()), by_name)
        .default_backoff()
        .boxed();
    let fleet_cfg = watcher::Config::default().fields("metadata.name=default");
    let mut fleets = watcher(Api::<NetworkFleet>::all(client.clone()), fleet_cfg)
        .default_backoff()
        .boxed();
    // The rollouts of its group only (by their label), started again when its group
    // changes, as the agent's.
    let rollout_api: Api<NetworkRollout> = Api::all(client.clone());
    let mut group: Option<String> = None;
    let mut regroup = false;
    let mut listed: Option<String> = None;
    let mut of_group = SeenRollouts::default();
    let mut listing: BTreeMap<String, NetworkRolloutSpec> = BTreeMap::new();
    let mut rollouts = stream::pending::<watcher::Result<watcher::Event<NetworkRollout>>>().boxed();
    let renderings: Api<NodeNetworkRendering> = Api::all(client.clone());
    let (mut nnc, mut spec, mut labels): (
        Option<NodeNetworkConfig>,
        Option<NetworkFleetSpec>,
        Option<Labels>,
    ) = (None, None, None);
    let mut index = Vec::new();
    let mut read: Option<Joined> = None;
    type Ran = ((Option<String>, Option<String>), String, bool);
    let mut ran: Option<Ran> = None;
    let mut layers: BTreeMap<String, Joined> = BTreeMap::new();
    // A resync, as the agent's: a status write refused under load is tried again.
    let mut resync = tokio::time::interval(Duration::from_secs(20));
    loop {
        tokio::select! {
            _ = resync.tick() => {}
            ev = own.next() => match ev {
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => nnc = Some(o),
                Some(_) => continue,
                None => return,
            },
            ev = meta.next() => match ev {
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                    labels = Some(o.metadata.labels.unwrap_or_default());
                    regroup = true;
                }
                Some(_) => continue,
                None => return,
            },
            ev = fleets.next() => match ev {
                Some(Ok(watcher::Event::Apply(f) | watcher::Event::InitApply(f))) => {
                    of_group.fleet_seen(Some(&f.spec));
                    // The policy index, made once per fleet (as the agent).
                    index = f.spec.index();
                    spec = Some(f.spec);
                    regroup = true;
                }
                Some(_) => continue,
                None => return,
            },
            Some(ev) = rollouts.next() => match ev {
                Ok(watcher::Event::Init) => {
                    listing.clear();
                    continue;
                }
                Ok(watcher::Event::InitApply(r)) => {
                    listing.insert(r.name_any(), r.spec);
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    of_group.listed(std::mem::take(&mut listing), spec.as_ref());
                    listed.clone_from(&group);
                }
                Ok(watcher::Event::Apply(r)) => {
                    heard.lock().unwrap().push(Instant::now());
                    of_group.applied(&r.name_any(), &r.spec);
                }
                Ok(watcher::Event::Delete(r)) => {
                    of_group.deleted(&r.name_any(), spec.as_ref());
                }
                Err(_) => continue,
            },
        }
        // Its group found again when its labels or the fleet changed, as the agent's
        // `regroup` (not on every event).
        if let (true, Some(l), Some(_)) = (regroup, &labels, &spec) {
            regroup = false;
            let g = choose(&node, l, &index, &[]).group;
            if group.as_ref() != Some(&g) {
                let cfg = watcher::Config::default().labels(&group_label(&g));
                rollouts = watcher(rollout_api.clone(), cfg).default_backoff().boxed();
                group = Some(g);
                of_group.clear();
            }
        }
        let Some(o) = nnc.clone() else { continue };
        let rendering: Option<String> = if o.spec.shared {
            let (Some(l), Some(f)) = (&labels, &spec) else {
                continue;
            };
            if listed != group {
                continue;
            }
            let Some(g) = &group else { continue };
            let Ok(current) = of_group.current_of(g, Some(f)) else {
                continue;
            };
            let Some(name) = choose(&node, l, &index, &current).rendering else {
                continue;
            };
            // The rendering and its layers, each read once by its label, as the agent.
            if read.as_ref().is_none_or(|j| j.rendering != name) {
                let Some(j) = read_rendering(&renderings, &name).await else {
                    continue;
                };
                // A layer from its delta when this agent holds the layer the delta is
                // from, as the agent; else whole.
                let mut new_layers = BTreeMap::new();
                for l in &j.layers {
                    if let Some(layer) = layers.get(l) {
                        new_layers.insert(l.clone(), layer.clone());
                        continue;
                    }
                    let delta = if layers.is_empty() {
                        None
                    } else {
                        list_labelled(&renderings, &delta_name(l), |objects| {
                            delta_to(objects.iter().map(|o| &o.spec), l)
                                .cloned()
                                .ok_or(())
                        })
                        .await
                        .ok()
                        .and_then(Result::ok)
                    };
                    let built = delta.as_ref().and_then(|d| {
                        let base = layers.get(&d.from)?;
                        Joined::from_delta(d, base).ok()
                    });
                    if let Some(layer) = built {
                        new_layers.insert(l.clone(), layer);
                    } else if let Some(layer) = read_rendering(&renderings, l).await {
                        new_layers.insert(l.clone(), layer);
                    }
                }
                layers = new_layers;
                let Ok(laid) = j.lay(|l| layers.get(l)) else {
                    continue;
                };
                read = Some(laid);
            }
            let Some(j) = &read else { continue };
            Some(j.rendering.clone())
        } else {
            None
        };
        // What it runs, computed again only when its rendering or its object changed
        // (as the agent lays a rendering once).
        let key = (rendering.clone(), o.metadata.resource_version.clone());
        if ran.as_ref().is_none_or(|(k, _, _)| *k != key) {
            let runs: NodeNetworkConfigSpec = match (&rendering, &read) {
                (Some(_), Some(j)) => o.spec.effective(j),
                _ => o.spec.clone(),
            };
            let edited = runs
                .rendered
                .routes
                .iter()
                .any(|r| r.item.to == EDITED && r.item.via.as_deref() == Some(NEW_VIA));
            ran = Some((key, runs.revision, edited));
        }
        let Some((_, revision, edited)) = ran.clone() else {
            continue;
        };
        let st = o.status.clone().unwrap_or_default();
        let done = st.applied_revision.as_deref() == Some(revision.as_str())
            && st.applied_rendering == rendering
            && st.shared_renderings
            && st.observed_generation == o.metadata.generation;
        // Applied: the agent changes its kernel before it reports (the report waits its
        // share of the spread, off the critical path).
        if edited {
            let mut all = fleet.lock().unwrap();
            let r = all.entry(node.clone()).or_default();
            if r.edited.is_none() {
                r.edited = Some(Instant::now());
            }
        }
        if !done {
            // A newly applied rendering is reported after the node's share of the
            // report spread (the fleet's, or `report_spread_given`), as the agent does.
            if rendering.is_some() && st.applied_rendering != rendering {
                let spread = report_spread_given().unwrap_or_else(|| {
                    spec.as_ref().map_or_else(
                        || NetworkFleetSpec::default().report_spread(),
                        NetworkFleetSpec::report_spread,
                    )
                });
                tokio::time::sleep(report_delay(&node, spread)).await;
            }
            let patch = json!({"status": {
                "observedGeneration": o.metadata.generation,
                "appliedRevision": revision,
                "appliedRendering": rendering,
                "sharedRenderings": true,
                "conditions": [{"type": "Applied", "status": "True", "reason": "Applied",
                                "message": "", "lastTransitionTime": "2026-12-06T00:00:00Z"}],
            }});
            match nncs
                .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(written) => nnc = Some(written),
                Err(_) => continue,
            }
        }
        let mut all = fleet.lock().unwrap();
        let r = all.entry(node.clone()).or_default();
        r.shared = o.spec.shared;
        r.settled = true;
        if edited && r.reported.is_none() {
            r.reported = Some(Instant::now());
        }
    }
}

/// Rendering or layer `name` from its parts, listed by their label as the agent does
/// (`list_labelled`: the watch cache first).
async fn read_rendering(api: &Api<NodeNetworkRendering>, name: &str) -> Option<Joined> {
    let read = list_labelled(api, name, |parts| join(name, parts.iter().map(|p| &p.spec)));
    read.await.ok()?.ok()
}

/// What one mode's edit cost.
struct Cost {
    writes: usize,
    bytes: f64,
    first_wave: f64,
    all: f64,
    etcd_mib: f64,
    operator_mib: u64,
    agent_writes: usize,
    apiserver_cpu: f64,
    detail: String,
}

async fn edit_costs(n: usize, shared: bool) -> Cost {
    let cp = netpolicy_testenv::dedicated();
    let client = cp.client().await;
    netpolicy_testenv::install_crds(&client, crds()).await;
    let t = Instant::now();
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(0..n)
        .for_each_concurrent(CONCURRENCY, |i| {
            let nodes = nodes.clone();
            async move {
                let name = format!("node-{i:05}");
                let node: Node =
                    serde_json::from_value(json!({"metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "pool": format!("p{:02}", i % POOLS)}}}))
                    .unwrap();
                nodes.create(&PostParams::default(), &node).await.unwrap();
            }
        })
        .await;
    let ccs: Api<ClusterConfig> = Api::all(client.clone());
    let ap = PatchParams::apply("scale-test").force();
    ccs.patch("default", &ap, &Patch::Apply(cluster_config("192.0.2.1")))
        .await
        .unwrap();
    let ncs: Api<netpolicy_operator::api::NodeConfig> = Api::all(client.clone());
    for p in 0..POOLS {
        let nc = json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
            "metadata": {"name": format!("pool-{p:02}")},
            "spec": {"nodeSelector": {"matchLabels": {"pool": format!("p{p:02}")}},
                     "routes": [{"to": format!("10.{}.0.0/16", 200 + p / 50), "via": "192.0.2.1",
                                 "table": 100 + p as u32}]},
        });
        ncs.patch(&format!("pool-{p:02}"), &ap, &Patch::Apply(nc))
            .await
            .unwrap();
    }
    println!(
        "[{}] {n} Nodes and the policies in {:.1} s",
        mode(shared),
        t.elapsed().as_secs_f64()
    );
    let fleet: Fleet = Arc::default();
    let heard: Heard = Arc::default();
    // `NETPOLICY_SCALE_AGENTS_PER_CONNECTION=k`: the agents' requests and watches are
    // streams of HTTP/2 connections, k agents a connection (k ≤ 20: four watches each
    // and their requests under the 100 streams a connection carries here; at 40 a
    // connection, a fifth of the watches waited for a stream that never came); unset,
    // one kube client (HTTP/1.1, a connection per watch, as each real agent has) for
    // all of them.
    let per: Option<usize> = std::env::var("NETPOLICY_SCALE_AGENTS_PER_CONNECTION")
        .ok()
        .map(|v| {
            v.parse()
                .expect("NETPOLICY_SCALE_AGENTS_PER_CONNECTION: a number")
        });
    let mut clients = Vec::new();
    if let Some(k) = per {
        for _ in 0..n.div_ceil(k.max(1)) {
            clients.push(netpolicy_testenv::http2_client(&cp.kubeconfig).await);
        }
    }
    let agents: Vec<_> = (0..n)
        .map(|i| {
            let client = per.map_or_else(|| client.clone(), |k| clients[i / k.max(1)].clone());
            tokio::spawn(agent(
                client,
                format!("node-{i:05}"),
                Arc::clone(&fleet),
                Arc::clone(&heard),
            ))
        })
        .collect();
    let bin =
        std::env::var("NETPOLICY_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_netpolicy").into());
    let op = common::Killed(
        std::process::Command::new(&bin)
            .args(["operator", "--kubeconfig"])
            .arg(&cp.kubeconfig)
            .args(["--lease-namespace", "default", "--listen", "127.0.0.1:0"])
            .args([
                "--resync-seconds",
                "300",
                "--shared-renderings",
                &shared.to_string(),
            ])
            .env("RUST_LOG", "warn")
            .envs(common::image_env())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(cp.dir.join("operator-shared-scale.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let pid = op.0.id();
    let t = Instant::now();
    loop {
        let (settled, on_shared) = {
            let all = fleet.lock().unwrap();
            (
                all.values().filter(|r| r.settled).count(),
                all.values().filter(|r| r.shared).count(),
            )
        };
        if settled == n && (!shared || on_shared == n) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(900),
            "[{}] {settled} of {n} agents settled, {on_shared} shared",
            mode(shared)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "[{}] every agent settled in {:.1} s",
        mode(shared),
        t.elapsed().as_secs_f64()
    );
    // Let the operator's last writes land, then the edit.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let requests = common::requests(&client).await;
    let bytes = common::body_bytes(&client).await;
    let writes_before = cp.all_writes().len();
    let db = common::etcd_metric(&cp.etcd, "etcd_mvcc_db_total_size_in_bytes");
    let rss_at_edit = common::rss_kib(pid) / 1024;
    // Who used the 2 cores until the first wave: the API server, etcd, the operator,
    // and this process (the simulated agents).
    let cpus = || {
        let (api, etcd) = common::control_plane_cpu(cp);
        [
            api,
            etcd,
            common::cpu_seconds(pid),
            common::cpu_seconds(std::process::id()),
        ]
    };
    let cpu_at_edit = cpus();
    let cpu = (cpu_at_edit[0], cpu_at_edit[1]);
    let mut cpu_first_wave = None;
    let edit = Instant::now();
    ccs.patch("default", &ap, &Patch::Apply(cluster_config(NEW_VIA)))
        .await
        .unwrap();
    let first_quarter = n.div_ceil(4);
    let (mut first_wave, mut all_done) = (None, None);
    let mut first_reported = None;
    while all_done.is_none() {
        let (times, reports): (Vec<Instant>, Vec<Instant>) = {
            let all = fleet.lock().unwrap();
            (
                all.values().filter_map(|r| r.edited).collect(),
                all.values().filter_map(|r| r.reported).collect(),
            )
        };
        if times.len() >= first_quarter && first_wave.is_none() {
            let mut t = times.clone();
            t.sort();
            first_wave = Some(t[first_quarter - 1].duration_since(edit));
            cpu_first_wave = Some(cpus());
        }
        if reports.len() >= first_quarter && first_reported.is_none() {
            let mut t = reports;
            t.sort();
            first_reported = Some(t[first_quarter - 1].duration_since(edit));
        }
        if times.len() == n {
            all_done = times.iter().max().map(|t| t.duration_since(edit));
        }
        assert!(
            edit.elapsed() < Duration::from_secs(900),
            "[{}] {} of {n} nodes run the edit",
            mode(shared),
            times.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The rollout's last writes (folded into the fleet, deleted, the old rendering
    // deleted).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes: Vec<_> = cp.all_writes().into_iter().skip(writes_before).collect();
    // The operator's: node objects, renderings, the fleet, rollouts, and the policies' status
    // (the agents write only node objects' status).
    let ours = |w: &netpolicy_testenv::Write| {
        let objects = matches!(
            w.resource.as_str(),
            "nodenetworkconfigs" | "nodenetworkrenderings" | "networkfleets" | "networkrollouts"
        ) && w.subresource.is_empty();
        let status = matches!(w.resource.as_str(), "clusterconfigs" | "nodeconfigs")
            && w.subresource == "status";
        objects || status
    };
    let operator_writes: Vec<_> = writes.iter().filter(|w| ours(w)).collect();
    let agent_writes = writes
        .iter()
        .filter(|w| w.resource == "nodenetworkconfigs" && w.subresource == "status")
        .count();
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for w in &operator_writes {
        let sub = if w.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", w.subresource)
        };
        *by.entry(format!("{} {}{sub}", w.verb, w.resource))
            .or_default() += 1;
    }
    let after = common::body_bytes(&client).await;
    // The operator's bytes: its node objects, renderings, fleet and policy statuses
    // (the agents' status patches and the edit itself left out).
    let edit_bytes = serde_json::to_vec(&cluster_config(NEW_VIA)).unwrap().len() as f64;
    let sent: f64 = after
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("patch nodenetworkconfigs")
                && (k.ends_with(" nodenetworkconfigs")
                    || k.ends_with(" nodenetworkrenderings")
                    || k.ends_with(" networkfleets")
                    || k.ends_with(" networkrollouts")
                    || k.ends_with(" nodeconfigs")
                    || k.ends_with(" clusterconfigs"))
        })
        .map(|(k, v)| v - bytes.get(k).copied().unwrap_or(0.0))
        .sum::<f64>()
        - edit_bytes;
    let cpu_after = common::control_plane_cpu(cp);
    let db_after = common::etcd_metric(&cp.etcd, "etcd_mvcc_db_total_size_in_bytes");
    let served = {
        let now = common::requests(&client).await;
        let mut v: Vec<String> = now
            .iter()
            .filter_map(|(k, x)| {
                let d = x - requests.get(k).copied().unwrap_or(0.0);
                (d >= 1.0).then(|| format!("{} {d:.0}", k.trim()))
            })
            .collect();
        v.sort();
        v.join(", ")
    };
    // The first wave's two shares: the operator's (edit → the first rollout an agent
    // heard) and the agents' (→ a quarter of the nodes run the edit).
    let rollout_heard = heard
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t > edit)
        .min()
        .map(|t| t.duration_since(edit));
    if let (Some(h), Some(w)) = (rollout_heard, first_wave) {
        println!(
            "[{}] first wave: a rollout heard {:.1} s after the edit, the wave applied {:.1} s after that",
            mode(shared),
            h.as_secs_f64(),
            w.saturating_sub(h).as_secs_f64()
        );
    }
    // How the wave spread: the rollout's first version reaching the agents (every
    // agent of a group it moves hears it, in the wave or not), and the nodes applying.
    let at = |mut t: Vec<Instant>, share: f64| -> Option<f64> {
        t.sort();
        let i = ((t.len() as f64 * share).ceil() as usize).clamp(1, t.len().max(1)) - 1;
        t.get(i).map(|t| t.duration_since(edit).as_secs_f64())
    };
    if let Some(w) = first_wave {
        let heard_in_wave: Vec<Instant> = heard
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|t| *t > edit && t.duration_since(edit) <= w)
            .collect();
        // (Every node applied by now: shares of the whole fleet.)
        let applied: Vec<Instant> = fleet
            .lock()
            .unwrap()
            .values()
            .filter_map(|r| r.edited)
            .collect();
        let q = |t: &Vec<Instant>, s| at(t.clone(), s).unwrap_or(f64::NAN);
        println!(
            "[{}] first wave's spread: the rollout heard {} times in it (10% {:.1} s, half {:.1} s, last {:.1} s); applied on 1% of the nodes {:.1} s, 10% {:.1} s, 25% {:.1} s",
            mode(shared),
            heard_in_wave.len(),
            q(&heard_in_wave, 0.1),
            q(&heard_in_wave, 0.5),
            q(&heard_in_wave, 1.0),
            q(&applied, 0.01),
            q(&applied, 0.10),
            q(&applied, 0.25),
        );
    }
    if let Some(r) = first_reported {
        println!(
            "[{}] first wave reported (the statuses of a quarter of the nodes say so) {:.1} s after the edit",
            mode(shared),
            r.as_secs_f64()
        );
    }
    if let Some(c) = cpu_first_wave {
        let used: Vec<f64> = c.iter().zip(cpu_at_edit).map(|(b, a)| b - a).collect();
        println!(
            "[{}] CPU from the edit to the first wave: kube-apiserver {:.1} s, etcd {:.1} s, operator {:.1} s, simulated agents {:.1} s",
            mode(shared),
            used[0],
            used[1],
            used[2],
            used[3]
        );
    }
    // The peak is over the whole run (the objects' creation and the move to shared
    // objects included); what the operator holds around the edit, apart.
    println!(
        "[{}] operator memory: {rss_at_edit} MiB at the edit, {} MiB after it, {} MiB peak",
        mode(shared),
        common::rss_kib(pid) / 1024,
        common::peak_rss_kib(pid) / 1024
    );
    let cost = Cost {
        writes: operator_writes.len(),
        bytes: sent,
        first_wave: first_wave.unwrap_or_default().as_secs_f64(),
        all: all_done.unwrap_or_default().as_secs_f64(),
        etcd_mib: (db_after - db) / 1_048_576.0,
        operator_mib: common::peak_rss_kib(pid) / 1024,
        agent_writes,
        apiserver_cpu: cpu_after.0 - cpu.0,
        detail: format!("operator writes {by:?}; served: {served}"),
    };
    drop(op);
    for a in agents {
        a.abort();
    }
    cost
}

fn mode(shared: bool) -> &'static str {
    if shared {
        "shared renderings"
    } else {
        "per node"
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (minutes): numbers in benches/README.md"]
async fn a_cluster_wide_edit_per_node_and_with_shared_renderings() {
    let n = nodes();
    println!(
        "{n} nodes, a {ROUTES}-route ClusterConfig, {POOLS} NodeConfigs ({POOLS} distinct configurations), agents' report spread {}",
        report_spread_given().map_or_else(
            || format!(
                "the fleet's ({} ms)",
                netpolicy_core::fleet::report_spread_ms(n)
            ),
            |d| format!("{} ms (given)", d.as_millis())
        )
    );
    // `NETPOLICY_SCALE_MODES=shared` (or `per-node`) runs one mode only.
    let modes: Vec<bool> = match std::env::var("NETPOLICY_SCALE_MODES").as_deref() {
        Err(_) | Ok("") => vec![false, true],
        Ok("shared") => vec![true],
        Ok("per-node") => vec![false],
        Ok(other) => panic!("NETPOLICY_SCALE_MODES={other:?}: want shared or per-node"),
    };
    let mut rows = Vec::new();
    for shared in modes {
        let c = edit_costs(n, shared).await;
        println!("[{}] {}", mode(shared), c.detail);
        println!(
            "[{}] every node ran the edit in {:.1} s; agents' status writes {}; kube-apiserver CPU {:.1} s",
            mode(shared),
            c.all,
            c.agent_writes,
            c.apiserver_cpu
        );
        println!(
            "[{}] cluster-wide edit: {} writes, {:.0} bytes, first wave applied in {:.1} s, etcd {:.0} MiB, operator {} MiB",
            mode(shared),
            c.writes,
            c.bytes,
            c.first_wave,
            c.etcd_mib.max(0.0).round(),
            c.operator_mib
        );
        rows.push(c);
    }
    let [before, after] = rows.as_slice() else {
        println!("one mode run: no ratio");
        return;
    };
    println!(
        "shared / per node: writes {:.4}, bytes {:.4}, first wave {:.2}, kube-apiserver CPU {:.2}",
        after.writes as f64 / before.writes.max(1) as f64,
        after.bytes / before.bytes.max(1.0),
        after.first_wave / before.first_wave.max(1e-9),
        after.apiserver_cpu / before.apiserver_cpu.max(1e-9)
    );
}
