//! The route-reflector controller: the RouteReflectorConfig `default`, Nodes and
//! Calico's `BGPPeer`s → reflector labels and cluster-ID annotations on Nodes and our
//! `BGPPeer` objects (docs/architecture.md, RouteReflectorConfig; the rules are netpolicy-rr's).
//!
//! Shape: kube-runtime's `Controller` on the one RouteReflectorConfig `default`, woken by
//! Node and BGPPeer changes (`reconcile_all_on`); `Action::requeue` paces the transition
//! steps (`stepDelaySeconds`) and `error_policy` backs off by error class. Transitions,
//! steps, settling, the mesh switch and not-ready reasons are Events on the config.
//!
//! # Guarantees
//! - Nothing is written before every cache has synced, and nothing without a
//!   RouteReflectorConfig `default`.
//! - Each pass plans from what the cluster holds now ([`netpolicy_rr::transition()`])
//!   and applies only the plan's first step, then waits `stepDelaySeconds` for BIRD to
//!   bring the new sessions up before the next step relies on them (make before
//!   break). A restart resumes where the cluster is: the plan is recomputed from it.
//! - Plans are netpolicy-rr's, whose property tests replay them operation by operation
//!   with [`netpolicy_rr::sim::verify`] (sessions and route propagation); the
//!   end-to-end test checks the same on the cluster's real states. The check is not
//!   run here: at thousands of nodes it costs seconds per plan.
//! - Only `BGPPeer`s named `netpolicy-rr-*` are ever changed or deleted; Node patches
//!   touch only the reflector label, `rr.netpolicy.io/set-*` labels and the cluster-ID
//!   annotation.
//! - A pass that finds nothing to do writes nothing (the status is compared first).
//!
//! # Datastores
//! With `datastore.kubernetes` (the default) the marks are labels and an annotation on
//! Kubernetes Nodes and `BGPPeer`s are `crd.projectcalico.org/v1` objects, all followed
//! by watches. With `datastore.etcdv3` they are written to Calico's etcd ([`super::etcd`]):
//! each pass reads the Calico Nodes and BGPPeers there afresh, Kubernetes Nodes stay the
//! source of readiness, taints and labels (and are never written), and etcd is polled
//! every two seconds with a two-key fingerprint so a change there (calico-node
//! registering, someone editing a BGPPeer) starts a pass. A Kubernetes Node without a
//! Calico Node is not a BGP speaker yet and is left out until calico-node registers it.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::Time};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams},
    runtime::{
        Controller,
        controller::Action,
        events::{Event, EventType},
        reflector::{ObjectRef, Store},
    },
};
use netpolicy_rr::{Op, topology, transition};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::{
    CalicoBgpPeer, CalicoBgpPeerSpec, config, current, current_of,
    etcd::{self, Etcd},
    marks_of, node_info,
};
use crate::{
    api::{
        EtcdDatastore, KubeconfigSecretRef, ROUTE_REFLECTOR_CONFIG_NAME, RouteReflectorConfig,
        RouteReflectorConfigStatus, TransitionStatus,
        conditions::{self, events, route_reflector as rc},
    },
    k8s::{FIELD_MANAGER, MANAGED_BY, NodeFacts, apply_status, condition, spec_fingerprint},
    runtime::{Backoff, ErrorClass, Informers, JobReadiness, KindHealth, KindState},
    telemetry::Shared,
};

/// Calico's `BGPPeer` (`crd.projectcalico.org/v1`, as the Kubernetes datastore stores
/// it).
pub fn bgp_peer_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("crd.projectcalico.org", "v1", "BGPPeer"),
        "bgppeers",
    )
}

/// Calico's `BGPConfiguration`.
pub fn bgp_configuration_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("crd.projectcalico.org", "v1", "BGPConfiguration"),
        "bgpconfigurations",
    )
}

const MESH_ON: &str = "Calico's node-to-node mesh is still on (nodeToNodeMesh: report leaves it; \
                       `disable` turns it off once every node has its reflector sessions)";

/// What of a Node placement reads: identity, labels, the cluster-ID annotation,
/// readiness, schedulability, taints.
fn node_fingerprint(n: &Node) -> String {
    let f = NodeFacts::of(n, false);
    format!(
        "{}|{:?}|{:?}|{}|{}|{:?}",
        n.uid().unwrap_or_default(),
        f.labels,
        n.annotations().get(netpolicy_rr::CLUSTER_ID_ANNOTATION),
        f.ready,
        f.unschedulable,
        f.taints
            .iter()
            .map(|t| (&t.key, &t.value, &t.effect))
            .collect::<Vec<_>>()
    )
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Etcd(#[from] etcd::Error),
}

/// How often Calico's etcd is checked for changes (`datastore.etcdv3`).
const ETCD_POLL: Duration = Duration::from_secs(2);

/// The route-reflector job on kube-runtime's `Controller`: one object (the
/// RouteReflectorConfig `default`), reconciled when it changes and whenever a Node,
/// Calico's `BGPPeer`s or (etcd datastore) Calico's etcd change in what placement
/// reads; `Action::requeue` paces the transition's steps, and `error_policy` backs off
/// by error class. Runs until `stop`.
pub(crate) fn run(
    informers: &Informers,
    client: &Client,
    shared: &Arc<Shared>,
    resync: Duration,
    stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let configs = informers.get::<RouteReflectorConfig>();
    let nodes = informers.get::<Node>();
    // Calico's BGPPeer may not be installed: an optional kind (readiness does not wait
    // for it; the status says CalicoNotInstalled until it is served).
    let peers = informers.dynamic(&bgp_peer_resource(), true);
    let config_trigger = configs.trigger(spec_fingerprint);
    let node_trigger = nodes.trigger(node_fingerprint);
    let peer_trigger = peers.trigger(|p: &DynamicObject| format!("{:?}", p.data.get("spec")));
    let ready = JobReadiness::new(
        "route-reflector",
        vec![configs.health(), nodes.health(), peers.health()],
    );
    shared.register(Arc::clone(&ready) as Arc<dyn crate::telemetry::Waiting>);
    let store = configs.store();
    let local = Calico {
        client: client.clone(),
        nodes: nodes.store(),
        peers: peers.store(),
    };
    let remote_wake = Arc::new(tokio::sync::Notify::new());
    let job = Job {
        client: client.clone(),
        recorder: crate::k8s::recorder(client),
        shared: Arc::clone(shared),
        configs: configs.store(),
        calico: local.clone(),
        local,
        remote: None,
        remote_wake: Arc::clone(&remote_wake),
        remote_backoff: None,
        peers_health: peers.health(),
        last_step: None,
        started: None,
        etcd: None,
        etcd_seen: None,
        calico_names: BTreeMap::new(),
        reported: None,
    };
    let ctx = Arc::new(Ctx {
        job: tokio::sync::Mutex::new(job),
        backoff: std::sync::Mutex::new(None),
        resync,
        etcd_poll: tokio::sync::Notify::new(),
    });
    async move {
        let mut stop2 = stop.clone();
        tokio::select! {
            () = ready.wait_synced() => {}
            _ = stop2.changed() => return,
        }
        info!("caches synced: route-reflector controller running");
        if store.state().is_empty() {
            ready.passed();
        }
        let stopped = async move {
            let mut s = stop;
            let _ = s.changed().await;
        };
        // Calico's etcd (datastore.etcdv3) is polled: a change there reconciles too.
        let poll = Arc::clone(&ctx);
        let etcd_changes = futures::stream::unfold(poll, |ctx| async move {
            ctx.etcd_changed().await;
            Some(((), ctx))
        });
        // Another cluster's datastore: its watches wake the job.
        let remote_changes = futures::stream::unfold(remote_wake, |n| async move {
            n.notified().await;
            Some(((), n))
        });
        let wakes = futures::stream::select_all([
            node_trigger.map(|_| ()).boxed(),
            peer_trigger.map(|_| ()).boxed(),
            etcd_changes.boxed(),
            remote_changes.boxed(),
        ]);
        Controller::for_stream(config_trigger, store)
            .with_config(crate::runtime::controller_config())
            .reconcile_all_on(wakes)
            .graceful_shutdown_on(stopped)
            .run(reconcile, error_policy, Arc::clone(&ctx))
            .for_each(|r| {
                if matches!(
                    &r,
                    Ok(_) | Err(kube::runtime::controller::Error::ReconcilerFailed(..))
                ) {
                    ready.passed();
                }
                futures::future::ready(())
            })
            .await;
        info!("route-reflector controller stopped");
    }
}

/// What the reconciles share: the job's state (one object: one reconcile at a time),
/// its backoff, and the etcd poll.
struct Ctx {
    job: tokio::sync::Mutex<Job>,
    backoff: std::sync::Mutex<Option<(ErrorClass, Backoff)>>,
    resync: Duration,
    etcd_poll: tokio::sync::Notify,
}

impl Ctx {
    /// Returns once Calico's etcd holds something the last pass did not read (waits
    /// while no pass has set etcd up).
    async fn etcd_changed(&self) {
        loop {
            let notified = self.etcd_poll.notified();
            let target = {
                let job = self.job.lock().await;
                match (&job.etcd, &job.etcd_seen) {
                    (Some((_, etcd)), Some(seen)) => Some((etcd.clone(), seen.clone())),
                    _ => None,
                }
            };
            let Some((etcd, seen)) = target else {
                notified.await;
                continue;
            };
            tokio::time::sleep(ETCD_POLL).await;
            match etcd.fingerprint().await {
                Ok(now) if now != seen => return,
                Ok(_) => {}
                // The pass reports it.
                Err(_) => return,
            }
        }
    }
}

async fn reconcile(rrc: Arc<RouteReflectorConfig>, ctx: Arc<Ctx>) -> Result<Action, Failed> {
    if rrc.name_any() != ROUTE_REFLECTOR_CONFIG_NAME {
        // The schema allows only `default`; anything else is not ours to act on.
        return Ok(Action::await_change());
    }
    let start = Instant::now();
    let mut job = ctx.job.lock().await;
    let result = job.pass().await;
    let shared = Arc::clone(&job.shared);
    let etcd = job.etcd.is_some();
    drop(job);
    if etcd {
        ctx.etcd_poll.notify_waiters();
    }
    debug!(?result, took = ?start.elapsed(), "route reflectors: pass");
    let wait = result?;
    *ctx.backoff
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    shared
        .metrics
        .reconciled("route-reflector", start.elapsed(), None);
    Ok(Action::requeue(wait.unwrap_or(ctx.resync)))
}

fn error_policy(_: Arc<RouteReflectorConfig>, e: &Failed, ctx: Arc<Ctx>) -> Action {
    let class = match e {
        Failed::Kube(k) => ErrorClass::of(k),
        Failed::Etcd(_) => ErrorClass::Transient,
    };
    let delay = {
        let mut b = ctx
            .backoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &mut *b {
            Some((c, b)) if *c == class => b.next_delay(),
            _ => b.insert((class, class.backoff())).1.next_delay(),
        }
    };
    warn!(error = %crate::error::Chain(e), class = class.as_str(), retry_in = ?delay, "route reflectors: pass failed");
    let message = crate::error::Chain(e).to_string();
    let etcd = matches!(e, Failed::Etcd(_));
    tokio::spawn(async move {
        let mut job = ctx.job.lock().await;
        job.shared
            .metrics
            .reconciled("route-reflector", Duration::ZERO, Some(class.as_str()));
        if etcd {
            job.datastore_failed(message).await;
        }
    });
    Action::requeue(delay)
}

/// The cluster Calico's Kubernetes datastore is in: its client and its Nodes and
/// BGPPeers as watched.
#[derive(Clone)]
struct Calico {
    client: Client,
    nodes: Store<Node>,
    peers: Store<DynamicObject>,
}

/// Another cluster's Kubernetes datastore (`datastore.kubernetes.kubeconfigSecretRef`):
/// its own watches, stopped when dropped.
struct Remote {
    settings: KubeconfigSecretRef,
    nodes_synced: Arc<AtomicBool>,
    peers_synced: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Remote {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Watches `api` into `writer`; wakes the job when an object's `fingerprint` changes or
/// goes, and marks `synced` once the first listing is in.
fn reflect<K>(
    api: Api<K>,
    writer: kube::runtime::reflector::store::Writer<K>,
    synced: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
    fingerprint: fn(&K) -> String,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    use kube::runtime::{WatchStreamExt, watcher};
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    tokio::spawn(async move {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let changed = match event {
                Ok(watcher::Event::InitDone) => {
                    synced.store(true, Ordering::Release);
                    true
                }
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let f = fingerprint(&o);
                    seen.insert(o.name_any(), f.clone()) != Some(f)
                }
                Ok(watcher::Event::Delete(o)) => seen.remove(&o.name_any()).is_some(),
                Ok(watcher::Event::Init) => false,
                Err(e) => {
                    debug!(error = %e, "route reflectors: remote watch");
                    false
                }
            };
            if changed {
                wake.notify_one();
            }
        }
    })
}

struct Job {
    client: Client,
    recorder: crate::k8s::events::Recorder,
    shared: Arc<Shared>,
    configs: Store<RouteReflectorConfig>,
    /// Where Calico's Nodes and BGPPeers are read and written: `local`, or `remote`'s.
    calico: Calico,
    /// This cluster's.
    local: Calico,
    /// `datastore.kubernetes.kubeconfigSecretRef`: the other cluster.
    remote: Option<Remote>,
    /// Woken by the remote watches.
    remote_wake: Arc<tokio::sync::Notify>,
    /// While the remote datastore cannot be used: when to look again.
    remote_backoff: Option<Backoff>,
    /// Whether Calico's BGPPeer is served.
    peers_health: Arc<KindHealth>,
    /// The last `Ready` reason reported by an Event (one Event per change).
    reported: Option<String>,
    /// When the last step was applied (pacing).
    last_step: Option<Instant>,
    /// The transition in progress: when it started, steps done, steps planned then.
    started: Option<(Time, u32, u32)>,
    /// `datastore.etcdv3`: the client and the settings it was made from.
    etcd: Option<(EtcdDatastore, Etcd)>,
    /// The etcd fingerprint the last pass read from.
    etcd_seen: Option<String>,
    /// `datastore.etcdv3`: Kubernetes Node name → Calico Node name.
    calico_names: BTreeMap<String, String>,
}

impl Job {
    /// One pass; returns when to look again while a transition waits out its pacing.
    async fn pass(&mut self) -> Result<Option<Duration>, Failed> {
        let Some(rrc) = self
            .configs
            .get(&ObjectRef::new(ROUTE_REFLECTOR_CONFIG_NAME))
        else {
            return Ok(None);
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let cur = rrc.status.clone().unwrap_or_default();
        let generation = rrc.metadata.generation;
        let cfg = match config(&rrc.spec) {
            Ok(c) => c,
            Err(problems) => {
                let message = problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                self.not_ready(&cur, rc::INVALID, message, generation, &now)
                    .await?;
                return Ok(None);
            }
        };
        let wanted = rrc
            .spec
            .datastore
            .kubernetes
            .as_ref()
            .and_then(|k| k.kubeconfig_secret_ref.clone());
        if let Some(message) = self.use_remote(wanted.as_ref()).await {
            self.not_ready(&cur, rc::DATASTORE_UNREACHABLE, message, generation, &now)
                .await?;
            // Backed off (a missing Secret or an unreachable cluster is not retried
            // every few seconds for ever); the remote watches wake the job sooner.
            let b = self
                .remote_backoff
                .get_or_insert_with(|| ErrorClass::Transient.backoff());
            return Ok(Some(b.next_delay()));
        }
        self.remote_backoff = None;
        let etcd = match &rrc.spec.datastore.etcdv3 {
            None => {
                self.etcd = None;
                self.etcd_seen = None;
                None
            }
            Some(settings) => match self.etcd_client(settings).await {
                Ok(c) => Some(c),
                Err(message) => {
                    self.not_ready(&cur, rc::DATASTORE_UNREACHABLE, message, generation, &now)
                        .await?;
                    return Ok(Some(Duration::from_secs(10)));
                }
            },
        };
        let peers_served = match &self.remote {
            Some(r) => r.peers_synced.load(Ordering::Acquire),
            None => self.peers_health.state() == KindState::Synced,
        };
        if etcd.is_none() && !peers_served {
            let whose = if self.remote.is_some() {
                " in the cluster of datastore.kubernetes.kubeconfigSecretRef"
            } else {
                ""
            };
            self.not_ready(
                &cur,
                rc::NO_CALICO,
                format!(
                    "Calico's crd.projectcalico.org/v1 BGPPeer is not served{whose}: install \
                     Calico (or its CRDs); the operator notices on its next pass"
                ),
                generation,
                &now,
            )
            .await?;
            return Ok(None);
        }
        let nodes = self.calico.nodes.state();
        let (infos, now_state) = if let Some(etcd) = &etcd {
            // Fingerprint first: a change while reading starts another pass.
            self.etcd_seen = Some(etcd.fingerprint().await?);
            let calico: BTreeMap<String, etcd::CalicoNode> = etcd
                .nodes()
                .await?
                .into_iter()
                .map(|c| (c.kube_name.clone(), c))
                .collect();
            let peers = etcd.bgp_peers().await?;
            self.calico_names = calico
                .iter()
                .map(|(k, c)| (k.clone(), c.name.clone()))
                .collect();
            let infos: Vec<netpolicy_rr::NodeInfo> = nodes
                .iter()
                .filter(|n| calico.contains_key(&n.name_any()))
                .map(|n| node_info(&NodeFacts::of(n, false)))
                .collect();
            let marks = calico.values().map(|c| {
                (
                    c.kube_name.clone(),
                    marks_of(
                        Some(&c.labels),
                        c.cluster_id.as_deref(),
                        &cfg.reflector_label,
                    ),
                )
            });
            (infos, current_of(marks, peers.iter(), &cur.ring))
        } else {
            let infos: Vec<netpolicy_rr::NodeInfo> = nodes
                .iter()
                .map(|n| node_info(&NodeFacts::of(n, false)))
                .collect();
            let peers: Vec<CalicoBgpPeer> = self
                .calico
                .peers
                .state()
                .iter()
                .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
                .filter_map(|v| serde_json::from_value(v).ok())
                .collect();
            let now_state = current(
                nodes.iter().map(AsRef::as_ref),
                peers.iter(),
                &cur.ring,
                &cfg.reflector_label,
            );
            (infos, now_state)
        };
        let target = match topology(&infos, &cfg, &now_state) {
            Ok(t) => t,
            Err(e) => {
                self.not_ready(&cur, rc::INVALID, e.to_string(), generation, &now)
                    .await?;
                return Ok(None);
            }
        };
        let steps = transition(&infos, &now_state, &target);
        let mut cluster_ids: BTreeMap<String, String> = BTreeMap::new();
        for z in &target.placement.zones {
            if z.reflectors.is_empty() {
                continue;
            }
            if cfg.topology == netpolicy_rr::Kind::Multi {
                for r in &z.reflectors {
                    if let Some(id) = target.marks.get(r).and_then(|m| m.cluster_id) {
                        cluster_ids.insert(r.clone(), id.to_string());
                    }
                }
            } else {
                cluster_ids.insert(z.zone.clone(), z.cluster_id.to_string());
            }
        }
        let reflectors = u32::try_from(target.placement.reflectors().count()).unwrap_or(u32::MAX);
        for z in &target.placement.zones {
            self.shared
                .metrics
                .reflectors(&z.zone, z.reflectors.len() as f64);
        }
        self.shared.metrics.reflector_clients(target.loads());
        if steps.is_empty() {
            if let Some((_, done, _)) = self.started.take() {
                self.event(
                    EventType::Normal,
                    events::SETTLED,
                    format!("transition done after {done} step(s): {reflectors} reflector(s)"),
                )
                .await;
            }
            if self.reported.as_deref() != Some(rc::SETTLED) && target.warnings.is_empty() {
                self.reported = Some(rc::SETTLED.to_owned());
            }
            // Every node has its reflector sessions only when the topology has no warning (a
            // zone without reflectors, no reflector at all).
            let mesh = self
                .mesh(&rrc, etcd.as_ref(), target.warnings.is_empty())
                .await?;
            let st = RouteReflectorConfigStatus {
                reflectors: Some(reflectors),
                ring: target.ring.clone(),
                cluster_ids,
                transition: None,
                conditions: vec![
                    condition(
                        &cur.conditions,
                        conditions::READY,
                        target.warnings.is_empty(),
                        rc::SETTLED,
                        if target.warnings.is_empty() {
                            format!("{reflectors} reflector(s); every node has its sessions")
                        } else {
                            target.warnings.join("; ")
                        },
                        generation,
                        &now,
                    ),
                    condition(
                        &cur.conditions,
                        rc::PROGRESSING,
                        false,
                        rc::SETTLED,
                        "no transition".into(),
                        generation,
                        &now,
                    ),
                    mesh.map_or_else(
                        || {
                            condition(
                                &cur.conditions,
                                rc::NODE_TO_NODE_MESH,
                                false,
                                rc::MESH_OFF,
                                "Calico's node-to-node mesh is off".into(),
                                generation,
                                &now,
                            )
                        },
                        |m| {
                            condition(
                                &cur.conditions,
                                rc::NODE_TO_NODE_MESH,
                                true,
                                rc::MESH_ON,
                                m,
                                generation,
                                &now,
                            )
                        },
                    ),
                ],
            };
            self.write_status(&cur, st).await?;
            return Ok(None);
        }
        // Pacing: BIRD needs time to bring the last step's sessions up.
        let delay = Duration::from_secs(u64::from(rrc.spec.step_delay_seconds));
        if let Some(at) = self.last_step
            && at.elapsed() < delay
        {
            return Ok(Some(delay - at.elapsed()));
        }
        let (started, done, of) = match self.started.clone() {
            Some(s) => s,
            None => {
                self.shared.metrics.rr_transition();
                let of = u32::try_from(steps.len()).unwrap_or(u32::MAX);
                self.event(
                    EventType::Normal,
                    events::TRANSITION_STARTED,
                    format!("{of} step(s) to {reflectors} reflector(s)"),
                )
                .await;
                (now.clone(), 0, of)
            }
        };
        let step = &steps[0];
        let st = RouteReflectorConfigStatus {
            reflectors: Some(reflectors),
            ring: target.ring.clone(),
            cluster_ids,
            transition: Some(TransitionStatus {
                phase: step.phase.as_str().to_owned(),
                step: done + 1,
                of: of.max(done + 1),
                started: started.0.to_string(),
            }),
            conditions: vec![
                condition(
                    &cur.conditions,
                    conditions::READY,
                    false,
                    rc::APPLYING,
                    format!("applying step {} ({})", done + 1, step.phase.as_str()),
                    generation,
                    &now,
                ),
                condition(
                    &cur.conditions,
                    rc::PROGRESSING,
                    true,
                    rc::APPLYING,
                    format!("{} step(s) left", steps.len()),
                    generation,
                    &now,
                ),
            ],
        };
        self.write_status(&cur, st).await?;
        info!(
            phase = step.phase.as_str(),
            ops = step.ops.len(),
            "route reflectors: applying a step"
        );
        if let Some(etcd) = &etcd {
            // etcd reads are linearizable: the next pass reads this step back.
            for op in &step.ops {
                self.apply_etcd(etcd, op).await?;
            }
        } else {
            for op in &step.ops {
                self.apply(op).await?;
            }
            // The next plan is made from the caches: wait until they show this step, or
            // a stale cache would plan from a state that is gone.
            self.wait_seen(&step.ops).await;
        }
        self.shared.metrics.rr_step();
        self.event(
            EventType::Normal,
            events::STEP_APPLIED,
            format!(
                "step {} of {} ({}): {} operation(s)",
                done + 1,
                of.max(done + 1),
                step.phase.as_str(),
                step.ops.len()
            ),
        )
        .await;
        self.last_step = Some(Instant::now());
        self.started = Some((started, done + 1, of));
        Ok(Some(delay.max(Duration::from_millis(500))))
    }

    async fn apply(&self, op: &Op) -> Result<(), kube::Error> {
        debug!(%op, "route reflectors: operation");
        let nodes: Api<Node> = Api::all(self.calico.client.clone());
        let label = |node: &str, key: &str, value: Option<&str>| {
            let nodes = nodes.clone();
            let patch = json!({"metadata": {"labels": {key: value}}});
            let node = node.to_owned();
            async move {
                nodes
                    .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
        };
        let result = match op {
            Op::ApplyBgpPeer(p) => {
                let obj = json!({
                    "apiVersion": "crd.projectcalico.org/v1",
                    "kind": "BGPPeer",
                    "metadata": {"name": p.name, "labels": {MANAGED_BY.0: MANAGED_BY.1}},
                    "spec": {"nodeSelector": p.node_selector, "peerSelector": p.peer_selector},
                });
                Api::<DynamicObject>::all_with(self.calico.client.clone(), &bgp_peer_resource())
                    .patch(
                        &p.name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&obj),
                    )
                    .await
                    .map(|_| ())
            }
            Op::DeleteBgpPeer { name } => {
                match Api::<DynamicObject>::all_with(
                    self.calico.client.clone(),
                    &bgp_peer_resource(),
                )
                .delete(name, &DeleteParams::default())
                .await
                {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Op::SetClusterId { node, id } => {
                let patch = json!({"metadata": {"annotations": {
                    netpolicy_rr::CLUSTER_ID_ANNOTATION: id.to_string()}}});
                nodes
                    .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            Op::RemoveClusterId { node } => {
                let patch = json!({"metadata": {"annotations": {
                    netpolicy_rr::CLUSTER_ID_ANNOTATION: null}}});
                nodes
                    .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            Op::SetReflectorLabel { node, value } => {
                label(node, &self.reflector_label(), Some(value)).await
            }
            Op::RemoveReflectorLabel { node } => label(node, &self.reflector_label(), None).await,
            Op::AddSetLabel { node, key } => label(node, key, Some("")).await,
            Op::RemoveSetLabel { node, key } => label(node, key, None).await,
        };
        match result {
            // A node that left meanwhile: nothing to do for it.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            r => r,
        }
    }

    /// Waits (up to 10 s) until the caches show every operation.
    async fn wait_seen(&self, ops: &[Op]) {
        let label = self.reflector_label();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen = ops.iter().all(|op| {
                let node = |n: &str| self.calico.nodes.get(&ObjectRef::new(n));
                let peer = |name: &str| {
                    self.calico
                        .peers
                        .get(&ObjectRef::new_with(name, bgp_peer_resource()))
                };
                match op {
                    Op::ApplyBgpPeer(p) => peer(&p.name).is_some_and(|o| {
                        o.data["spec"]["nodeSelector"] == p.node_selector.as_str()
                            && o.data["spec"]["peerSelector"] == p.peer_selector.as_str()
                    }),
                    Op::DeleteBgpPeer { name } => peer(name).is_none(),
                    Op::SetClusterId { node: n, id } => node(n).is_none_or(|o| {
                        o.annotations().get(netpolicy_rr::CLUSTER_ID_ANNOTATION)
                            == Some(&id.to_string())
                    }),
                    Op::RemoveClusterId { node: n } => node(n).is_none_or(|o| {
                        !o.annotations()
                            .contains_key(netpolicy_rr::CLUSTER_ID_ANNOTATION)
                    }),
                    Op::SetReflectorLabel { node: n, value } => {
                        node(n).is_none_or(|o| o.labels().get(&label) == Some(value))
                    }
                    Op::RemoveReflectorLabel { node: n } => {
                        node(n).is_none_or(|o| !o.labels().contains_key(&label))
                    }
                    Op::AddSetLabel { node: n, key } => {
                        node(n).is_none_or(|o| o.labels().contains_key(key))
                    }
                    Op::RemoveSetLabel { node: n, key } => {
                        node(n).is_none_or(|o| !o.labels().contains_key(key))
                    }
                }
            });
            if seen || Instant::now() > deadline {
                if !seen {
                    warn!("route reflectors: the caches do not show the last step after 10 s");
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Points the job at the cluster Calico's Kubernetes datastore is in: `wanted` (a
    /// kubeconfig Secret) or this one. A new remote cluster is watched from then on; the
    /// same settings keep their watches (a changed kubeconfig in the same Secret is read
    /// when the RouteReflectorConfig changes or the operator restarts). `Some(why)` while
    /// the remote cluster cannot be used yet.
    async fn use_remote(&mut self, wanted: Option<&KubeconfigSecretRef>) -> Option<String> {
        let Some(r) = wanted else {
            if self.remote.take().is_some() {
                info!("route reflectors: Calico's datastore is this cluster again");
                self.calico = self.local.clone();
            }
            return None;
        };
        if self.remote.as_ref().is_none_or(|x| x.settings != *r) {
            self.remote = None;
            self.calico = self.local.clone();
            // Watches: the default read timeout (a watch outlives a short one).
            let client = match crate::k8s::client_from_secret(
                self.client.clone(),
                &r.namespace,
                &r.name,
                r.key.as_deref(),
                None,
            )
            .await
            {
                Ok(c) => c,
                Err(
                    crate::k8s::KubeconfigError::Missing(m)
                    | crate::k8s::KubeconfigError::Client(m),
                ) => return Some(format!("datastore.kubernetes.kubeconfigSecretRef: {m}")),
            };
            let (nodes, node_writer) = kube::runtime::reflector::store::<Node>();
            let peer_writer =
                kube::runtime::reflector::store::Writer::<DynamicObject>::new(bgp_peer_resource());
            let peers = peer_writer.as_reader();
            let nodes_synced = Arc::new(AtomicBool::new(false));
            let peers_synced = Arc::new(AtomicBool::new(false));
            let tasks = vec![
                reflect(
                    Api::<Node>::all(client.clone()),
                    node_writer,
                    Arc::clone(&nodes_synced),
                    Arc::clone(&self.remote_wake),
                    node_fingerprint,
                ),
                reflect(
                    Api::<DynamicObject>::all_with(client.clone(), &bgp_peer_resource()),
                    peer_writer,
                    Arc::clone(&peers_synced),
                    Arc::clone(&self.remote_wake),
                    |p: &DynamicObject| format!("{:?}", p.data.get("spec")),
                ),
            ];
            info!(
                secret = %format!("{}/{}", r.namespace, r.name),
                "route reflectors: Calico's datastore is another cluster's"
            );
            self.calico = Calico {
                client,
                nodes,
                peers,
            };
            self.remote = Some(Remote {
                settings: r.clone(),
                nodes_synced,
                peers_synced,
                tasks,
            });
        }
        let remote = self.remote.as_ref()?;
        (!remote.nodes_synced.load(Ordering::Acquire)).then(|| {
            format!(
                "datastore.kubernetes.kubeconfigSecretRef: listing the Nodes of the cluster \
                 of Secret {}/{} has not succeeded yet",
                r.namespace, r.name
            )
        })
    }

    fn reflector_label(&self) -> String {
        self.configs
            .get(&ObjectRef::new(ROUTE_REFLECTOR_CONFIG_NAME))
            .map_or_else(
                || crate::api::DEFAULT_REFLECTOR_LABEL.to_owned(),
                |c| c.spec.reflector_label.clone(),
            )
    }

    /// Calico's node-to-node mesh: `Some(why)` while it is on. With `disable`, it is
    /// turned off here (the caller calls this only when every node has its reflector
    /// sessions).
    async fn mesh(
        &self,
        rrc: &RouteReflectorConfig,
        etcd: Option<&Etcd>,
        complete: bool,
    ) -> Result<Option<String>, Failed> {
        let disable = rrc.spec.node_to_node_mesh == crate::api::NodeToNodeMesh::Disable;
        if let Some(etcd) = etcd {
            if !etcd.mesh_on().await? {
                return Ok(None);
            }
            if disable && complete {
                etcd.disable_mesh().await?;
                info!(
                    "every node has its reflector sessions: Calico's node-to-node mesh \
                     turned off (etcd)"
                );
                return Ok(None);
            }
            return Ok(Some(MESH_ON.into()));
        }
        let api = Api::<DynamicObject>::all_with(
            self.calico.client.clone(),
            &bgp_configuration_resource(),
        );
        let obj = match api.get_opt("default").await {
            Ok(o) => o,
            // Calico without BGPConfiguration served: nothing to say.
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // Calico's default is on.
        let on = obj
            .as_ref()
            .and_then(|o| o.data.get("spec")?.get("nodeToNodeMeshEnabled")?.as_bool())
            .unwrap_or(true);
        if !on {
            return Ok(None);
        }
        if disable && complete {
            let patch = json!({
                "apiVersion": "crd.projectcalico.org/v1",
                "kind": "BGPConfiguration",
                "metadata": {"name": "default"},
                "spec": {"nodeToNodeMeshEnabled": false},
            });
            api.patch(
                "default",
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&patch),
            )
            .await?;
            info!("every node has its reflector sessions: Calico's node-to-node mesh turned off");
            self.event(
                EventType::Normal,
                events::MESH_DISABLED,
                "every node has its reflector sessions: Calico's node-to-node mesh turned off"
                    .into(),
            )
            .await;
            return Ok(None);
        }
        Ok(Some(MESH_ON.into()))
    }

    /// One operation on Calico's etcd. Marks go to the Calico Node standing for the
    /// Kubernetes Node the plan names; a node without one is skipped (it left).
    async fn apply_etcd(&self, etcd: &Etcd, op: &Op) -> Result<(), etcd::Error> {
        debug!(%op, "route reflectors: operation (etcd)");
        let calico = |n: &str| self.calico_names.get(n).cloned();
        let label = self.reflector_label();
        match op {
            Op::ApplyBgpPeer(p) => {
                let spec = CalicoBgpPeerSpec {
                    node_selector: Some(p.node_selector.clone()),
                    peer_selector: Some(p.peer_selector.clone()),
                };
                let labels = BTreeMap::from([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())]);
                etcd.apply_bgp_peer(&p.name, &spec, &labels).await?;
            }
            Op::DeleteBgpPeer { name } => etcd.delete_bgp_peer(name).await?,
            Op::SetClusterId { node, id } => {
                if let Some(c) = calico(node) {
                    etcd.set_cluster_id(&c, Some(&id.to_string())).await?;
                }
            }
            Op::RemoveClusterId { node } => {
                if let Some(c) = calico(node) {
                    etcd.set_cluster_id(&c, None).await?;
                }
            }
            Op::SetReflectorLabel { node, value } => {
                if let Some(c) = calico(node) {
                    etcd.label_node(&c, &label, Some(value)).await?;
                }
            }
            Op::RemoveReflectorLabel { node } => {
                if let Some(c) = calico(node) {
                    etcd.label_node(&c, &label, None).await?;
                }
            }
            Op::AddSetLabel { node, key } => {
                if let Some(c) = calico(node) {
                    etcd.label_node(&c, key, Some("")).await?;
                }
            }
            Op::RemoveSetLabel { node, key } => {
                if let Some(c) = calico(node) {
                    etcd.label_node(&c, key, None).await?;
                }
            }
        }
        Ok(())
    }

    /// The etcd client for `settings`, made (TLS Secret read) when they changed or the
    /// last pass failed on etcd. `Err` says why it cannot be made, for the status.
    async fn etcd_client(&mut self, settings: &EtcdDatastore) -> Result<Etcd, String> {
        if let Some((s, c)) = &self.etcd
            && s == settings
        {
            return Ok(c.clone());
        }
        let tls = match &settings.tls_secret_ref {
            None => None,
            Some(r) => {
                let api: Api<k8s_openapi::api::core::v1::Secret> =
                    Api::namespaced(self.client.clone(), &r.namespace);
                let secret = api.get(&r.name).await.map_err(|e| {
                    format!(
                        "spec.datastore.etcdv3.tlsSecretRef: Secret {}/{} cannot be read: {e}",
                        r.namespace, r.name
                    )
                })?;
                let data = secret.data.unwrap_or_default();
                let field = |k: &str| data.get(k).map(|b| b.0.clone());
                Some(etcd::Tls {
                    ca: field("ca.crt"),
                    cert: field("tls.crt"),
                    key: field("tls.key"),
                })
            }
        };
        let client = Etcd::new(settings.endpoints.clone(), tls.as_ref())
            .map_err(|e| format!("spec.datastore.etcdv3: {e}"))?;
        info!(endpoints = ?settings.endpoints, "route reflectors: Calico's etcd datastore");
        self.etcd = Some((settings.clone(), client.clone()));
        Ok(client)
    }

    /// Reports an etcd failure in the status (the pass is retried) and drops the client,
    /// so the next pass reads the TLS Secret again.
    async fn datastore_failed(&mut self, message: String) {
        self.etcd = None;
        let Some(rrc) = self
            .configs
            .get(&ObjectRef::new(ROUTE_REFLECTOR_CONFIG_NAME))
        else {
            return;
        };
        let cur = rrc.status.clone().unwrap_or_default();
        let mut st = cur.clone();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let c = condition(
            &cur.conditions,
            conditions::READY,
            false,
            rc::DATASTORE_UNREACHABLE,
            message,
            rrc.metadata.generation,
            &now,
        );
        st.conditions.retain(|x| x.type_ != conditions::READY);
        st.conditions.insert(0, c);
        if let Err(e) = self.write_status(&cur, st).await {
            warn!(error = %e, "route reflectors: the status could not be written");
        }
    }

    /// An Event on the RouteReflectorConfig `default`.
    async fn event(&self, type_: EventType, reason: &str, note: String) {
        let Some(rrc) = self
            .configs
            .get(&ObjectRef::new(ROUTE_REFLECTOR_CONFIG_NAME))
        else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reflect".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &rrc.object_ref(&())).await {
            warn!(error = %e, "could not record a route-reflector Event");
        }
    }

    /// Reports the config not Ready for `reason`: the only condition it then has (and
    /// a Warning Event when the reason is new).
    async fn not_ready(
        &mut self,
        cur: &RouteReflectorConfigStatus,
        reason: &str,
        message: String,
        generation: Option<i64>,
        now: &Time,
    ) -> Result<(), kube::Error> {
        if self.reported.as_deref() != Some(reason) {
            self.reported = Some(reason.to_owned());
            self.event(EventType::Warning, reason, message.clone())
                .await;
        }
        let mut st = cur.clone();
        st.conditions = vec![condition(
            &cur.conditions,
            conditions::READY,
            false,
            reason,
            message,
            generation,
            now,
        )];
        self.write_status(cur, st).await
    }

    async fn write_status(
        &self,
        current: &RouteReflectorConfigStatus,
        next: RouteReflectorConfigStatus,
    ) -> Result<(), kube::Error> {
        if *current == next {
            return Ok(());
        }
        let api = Api::<RouteReflectorConfig>::all(self.client.clone());
        apply_status(&api, FIELD_MANAGER, ROUTE_REFLECTOR_CONFIG_NAME, &next)
            .await
            .map(|_| ())
    }
}
