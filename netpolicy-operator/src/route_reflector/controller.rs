//! The route-reflector controller: the RouteReflectorConfig `default`, Nodes and
//! Calico's `BGPPeer`s → reflector labels and cluster-ID annotations on Nodes and our
//! `BGPPeer` objects (docs/architecture.md, RouteReflectorConfig; the rules are netpolicy-rr's).
//!
//! Shape: a global job on the runtime's [`Runner`](crate::runtime::Runner) — its rule
//! needs the whole cluster at once. The RouteReflectorConfig, Nodes and Calico's
//! `BGPPeer`s (this cluster's informers, or another cluster's through its own
//! [`Informers`]) and Calico's etcd (polled) wake it; [`Next::After`] paces the
//! transition steps (`stepDelaySeconds`) and the runner backs off by error class.
//! Transitions, steps, settling, the mesh switch and not-ready reasons are Events on the
//! config.
//!
//! # Guarantees
//! - Nothing is written before every cache has synced, and nothing without a
//!   RouteReflectorConfig `default`.
//! - Each pass plans from what the cluster holds now ([`netpolicy_rr::transition()`])
//!   and applies only the plan's first step, then waits `stepDelaySeconds` for BIRD to
//!   bring the new sessions up before the next step relies on them (make before
//!   break). A restart resumes where the cluster is: the plan is recomputed from it.
//! - The next plan is never made from a cache that does not show the last step yet:
//!   a pass that finds the step's objects not yet cached waits for the watch to bring
//!   them (up to 10 s; the watch wakes the job, nothing polls).
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
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::Time};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::{
        events::EventType,
        reflector::{ObjectRef, Store},
    },
};
use netpolicy_rr::{Op, Topology, topology, transition};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::{
    CalicoBgpPeer, CalicoBgpPeerSpec, config, current, current_of,
    etcd::{self, Etcd},
    marks_of, node_info, sessions,
};
use crate::{
    api::{
        EtcdDatastore, KubeconfigSecretRef, NamespacedRef, ROUTE_REFLECTOR_CONFIG_NAME,
        RouteReflectorConfig, RouteReflectorConfigStatus, TransitionStatus,
        calico::{bgp_configuration_resource, bgp_peer_resource},
        conditions::{self, events, route_reflector as rc},
    },
    k8s::{CachedNode, FIELD_MANAGER, MANAGED_BY, NodeFacts, condition, spec_fingerprint},
    runtime::{
        Changes, ErrorClass, Informer, Informers, Job, JobError, KindHealth, KindState, Next,
        ObjectKey, Setup, Wake,
    },
    telemetry::Shared,
};

const MESH_ON: &str = "Calico's node-to-node mesh is still on (nodeToNodeMesh: report leaves it; \
                       `disable` turns it off once every node has its reflector sessions)";

/// What of a Node placement reads: identity, labels, the cluster-ID annotation,
/// readiness, schedulability, taints.
fn node_fingerprint(n: &CachedNode) -> String {
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

/// What of a `BGPPeer` the job reads: its spec.
fn peer_fingerprint(p: &DynamicObject) -> String {
    format!("{:?}", p.data.get("spec"))
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

/// How long a pass waits for the caches to show the last step before planning anyway.
const SEEN_WITHIN: Duration = Duration::from_secs(10);

/// The route-reflector job, ready for the [`Runner`](crate::runtime::Runner): woken by
/// the RouteReflectorConfig's spec, Nodes and Calico's `BGPPeer`s in what placement
/// reads. Calico's BGPPeer may not be installed: an optional kind (readiness does not
/// wait for it; the status says CalicoNotInstalled until it is served).
pub(crate) fn setup(
    informers: &Informers,
    client: &Client,
    shared: &Arc<Shared>,
) -> Setup<RouteReflectors> {
    let wake = Wake::new();
    let configs = informers.get::<RouteReflectorConfig>();
    let nodes = informers.get::<CachedNode>();
    let peers = informers.dynamic(&bgp_peer_resource(), true);
    configs.subscribe(&wake, spec_fingerprint);
    nodes.subscribe(&wake, node_fingerprint);
    peers.subscribe(&wake, peer_fingerprint);
    let kinds = vec![configs.health(), nodes.health(), peers.health()];
    let local = Calico {
        client: client.clone(),
        nodes: nodes.store(),
        peers: peers.store(),
    };
    let job = RouteReflectors {
        client: client.clone(),
        recorder: crate::k8s::recorder(client),
        shared: Arc::clone(shared),
        wake: wake.clone(),
        configs: configs.store(),
        calico: local.clone(),
        local,
        remote: None,
        peers_health: peers.health(),
        last_step: None,
        reports_live: true,
        waiting_said: false,
        unseen: None,
        started: None,
        etcd: None,
        calico_names: BTreeMap::new(),
        reported: None,
        sent: crate::k8s::Sent::default(),
    };
    Setup { job, wake, kinds }
}

/// The cluster Calico's Kubernetes datastore is in: its client and its Nodes and
/// BGPPeers as watched.
#[derive(Clone)]
struct Calico {
    client: Client,
    nodes: Store<CachedNode>,
    peers: Store<DynamicObject>,
}

/// Another cluster's Kubernetes datastore (`datastore.kubernetes.kubeconfigSecretRef`):
/// its own informers (stopped when dropped), subscribed to the job's wake.
struct Remote {
    settings: KubeconfigSecretRef,
    _informers: Informers,
    nodes: Informer<CachedNode>,
    peers: Informer<DynamicObject>,
}

/// Calico's etcd (`datastore.etcdv3`): the client, the settings it was made from, and a
/// task that polls its fingerprint every [`ETCD_POLL`] and wakes the job when it differs
/// from what the last pass read (stopped when dropped).
struct EtcdPoll {
    settings: EtcdDatastore,
    client: Etcd,
    /// The fingerprint the last pass read from (`None`: no pass has read yet).
    seen: watch::Sender<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl EtcdPoll {
    fn start(settings: EtcdDatastore, client: Etcd, wake: Wake) -> Self {
        let (seen, mut last) = watch::channel(None::<String>);
        let etcd = client.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ETCD_POLL).await;
                let Some(read) = last.borrow_and_update().clone() else {
                    continue;
                };
                // An error wakes the job too: the pass reports it.
                if etcd.fingerprint().await.ok().as_ref() != Some(&read) {
                    wake.changed("CalicoEtcd", ObjectKey::cluster("etcd"));
                    // One wake per change: wait for a pass to read again.
                    if last.changed().await.is_err() {
                        return;
                    }
                }
            }
        });
        Self {
            settings,
            client,
            seen,
            task,
        }
    }
}

impl Drop for EtcdPoll {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The route-reflector job.
pub(crate) struct RouteReflectors {
    client: Client,
    recorder: crate::k8s::events::Recorder,
    shared: Arc<Shared>,
    /// The job's wake (the remote informers and the etcd poll are subscribed to it).
    wake: Wake,
    configs: Store<RouteReflectorConfig>,
    /// Where Calico's Nodes and BGPPeers are read and written: `local`, or `remote`'s.
    calico: Calico,
    /// This cluster's.
    local: Calico,
    /// `datastore.kubernetes.kubeconfigSecretRef`: the other cluster.
    remote: Option<Remote>,
    /// Whether Calico's BGPPeer is served.
    peers_health: Arc<KindHealth>,
    /// The last `Ready` reason reported by an Event (one Event per change).
    reported: Option<String>,
    /// When the last step was applied (pacing).
    last_step: Option<Instant>,
    /// `CalicoNodeStatus` objects of ours may exist (`sessions`).
    reports_live: bool,
    /// The current step's wait for calico-node's reports was already reported.
    waiting_said: bool,
    /// The last step's operations (Kubernetes datastore) until the caches show them,
    /// and until when to wait for that.
    unseen: Option<(Vec<Op>, Instant)>,
    /// The transition in progress: when it started, steps done, steps planned then.
    started: Option<(Time, u32, u32)>,
    /// `datastore.etcdv3`: the client and its poll.
    etcd: Option<EtcdPoll>,
    /// `datastore.etcdv3`: Kubernetes Node name → Calico Node name.
    calico_names: BTreeMap<String, String>,
    /// Status writes not seen back yet: not sent again while the cache stays behind.
    sent: crate::k8s::Sent,
}

impl Job for RouteReflectors {
    fn name(&self) -> &'static str {
        "route-reflector"
    }

    async fn pass(&mut self, _changes: &Changes) -> Result<Next, JobError> {
        match self.pass_once().await {
            Ok(next) => Ok(next),
            Err(Failed::Kube(e)) => Err(e.into()),
            Err(Failed::Etcd(e)) => {
                let message = crate::error::Chain(&e).to_string();
                self.datastore_failed(message).await;
                Err(JobError::new(ErrorClass::Transient, e))
            }
        }
    }
}

/// Where this pass reads and writes Calico's objects.
enum Datastore {
    /// Kubernetes objects, through `RouteReflectors::calico`.
    Kubernetes,
    /// Calico's etcd.
    Etcd(Etcd),
}

/// The cluster IDs a topology gives: per reflector (`multi`) or per zone (`simple`).
fn cluster_ids(target: &Topology, kind: netpolicy_rr::Kind) -> BTreeMap<String, String> {
    let mut ids = BTreeMap::new();
    for z in &target.placement.zones {
        if z.reflectors.is_empty() {
            continue;
        }
        if kind == netpolicy_rr::Kind::Multi {
            for r in &z.reflectors {
                if let Some(id) = target.marks.get(r).and_then(|m| m.cluster_id) {
                    ids.insert(r.clone(), id.to_string());
                }
            }
        } else {
            ids.insert(z.zone.clone(), z.cluster_id.to_string());
        }
    }
    ids
}

/// What a status is made of besides its conditions.
struct StatusFacts<'a> {
    cur: &'a RouteReflectorConfigStatus,
    reflectors: u32,
    ring: Vec<String>,
    cluster_ids: BTreeMap<String, String>,
    generation: Option<i64>,
    now: &'a Time,
}

impl StatusFacts<'_> {
    fn condition(
        &self,
        type_: &str,
        status: bool,
        reason: &str,
        message: String,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        condition(
            &self.cur.conditions,
            type_,
            status,
            reason,
            message,
            self.generation,
            self.now,
        )
    }

    /// The status of a settled topology: Ready unless it has `warnings`; `mesh` says why
    /// Calico's node-to-node mesh is still on.
    fn settled(self, warnings: &[String], mesh: Option<String>) -> RouteReflectorConfigStatus {
        let ready = warnings.is_empty();
        let conditions = vec![
            self.condition(
                conditions::READY,
                ready,
                rc::SETTLED,
                if ready {
                    format!(
                        "{} reflector(s); every node has its sessions",
                        self.reflectors
                    )
                } else {
                    warnings.join("; ")
                },
            ),
            self.condition(rc::PROGRESSING, false, rc::SETTLED, "no transition".into()),
            match mesh {
                None => self.condition(
                    rc::NODE_TO_NODE_MESH,
                    false,
                    rc::MESH_OFF,
                    "Calico's node-to-node mesh is off".into(),
                ),
                Some(m) => self.condition(rc::NODE_TO_NODE_MESH, true, rc::MESH_ON, m),
            },
        ];
        RouteReflectorConfigStatus {
            reflectors: Some(self.reflectors),
            ring: self.ring,
            cluster_ids: self.cluster_ids,
            transition: None,
            conditions,
        }
    }

    /// The status while step `done + 1` of `of` (phase `phase`) is applied, `left`
    /// steps planned from here.
    fn stepping(
        self,
        phase: &str,
        done: u32,
        of: u32,
        left: usize,
        started: &Time,
    ) -> RouteReflectorConfigStatus {
        let conditions = vec![
            self.condition(
                conditions::READY,
                false,
                rc::APPLYING,
                format!("applying step {} ({phase})", done + 1),
            ),
            self.condition(
                rc::PROGRESSING,
                true,
                rc::APPLYING,
                format!("{left} step(s) left"),
            ),
        ];
        RouteReflectorConfigStatus {
            reflectors: Some(self.reflectors),
            ring: self.ring,
            cluster_ids: self.cluster_ids,
            transition: Some(TransitionStatus {
                phase: phase.to_owned(),
                step: done + 1,
                of: of.max(done + 1),
                started: started.0.to_string(),
            }),
            conditions,
        }
    }
}

impl RouteReflectors {
    /// One pass: plan from what the datastore holds, then apply the plan's first step
    /// (or settle the status when there is none).
    async fn pass_once(&mut self) -> Result<Next, Failed> {
        let Some(rrc) = self
            .configs
            .get(&ObjectRef::new(ROUTE_REFLECTOR_CONFIG_NAME))
        else {
            return Ok(Next::Resync);
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
                return Ok(Next::Resync);
            }
        };
        let store = match self.datastore(&rrc).await {
            Ok(s) => s,
            Err((reason, message, next)) => {
                self.not_ready(&cur, reason, message, generation, &now)
                    .await?;
                return Ok(next);
            }
        };
        if let Some(wait) = self.unseen_wait() {
            return Ok(Next::After(wait));
        }
        let (infos, mut now_state) = self.observe(&store, &cfg, &cur).await?;
        let etcd = match &store {
            Datastore::Etcd(e) => Some(e),
            Datastore::Kubernetes => None,
        };
        let mesh_on = self.mesh_on(etcd).await?;
        now_state.mesh = mesh_on == Some(true);
        let target = match topology(&infos, &cfg, &now_state) {
            Ok(t) => t,
            Err(e) => {
                self.not_ready(&cur, rc::INVALID, e.to_string(), generation, &now)
                    .await?;
                return Ok(Next::Resync);
            }
        };
        let steps = transition(&infos, &now_state, &target);
        let reflectors = u32::try_from(target.placement.reflectors().count()).unwrap_or(u32::MAX);
        for z in &target.placement.zones {
            self.shared
                .metrics
                .reflectors(&z.zone, z.reflectors.len() as f64);
        }
        self.shared.metrics.reflector_clients(target.loads());
        let facts = StatusFacts {
            cur: &cur,
            reflectors,
            ring: target.ring.clone(),
            cluster_ids: cluster_ids(&target, cfg.topology),
            generation,
            now: &now,
        };
        // Pacing: BIRD needs the step delay to bring the last step's sessions up before
        // the next step (or turning the mesh off) relies on them.
        let delay = Duration::from_secs(u64::from(rrc.spec.step_delay_seconds));
        let mut pacing = self
            .last_step
            .map(|at| delay.saturating_sub(at.elapsed()))
            .filter(|left| !left.is_zero());
        if pacing.is_none() && matches!(store, Datastore::Kubernetes) {
            pacing = self.sessions_pending(&now_state, delay).await?;
        }
        let Some(step) = steps.first() else {
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
            // zone without reflectors, no reflector at all), and not while the last step is
            // being paced: the mesh is what carries the routes until then (turned off at
            // once, every pair whose session the last step restarted lost its routes on
            // live BGP).
            let complete = target.warnings.is_empty() && pacing.is_none();
            let mesh = self.mesh(&rrc, etcd, mesh_on, complete).await?;
            if pacing.is_none() {
                self.transition_over().await?;
            }
            self.shared.metrics.rr_in_transition(pacing.is_some());
            self.write_status(&cur, facts.settled(&target.warnings, mesh))
                .await?;
            return Ok(pacing.map_or(Next::Resync, Next::After));
        };
        self.shared.metrics.rr_in_transition(true);
        if let Some(left) = pacing {
            return Ok(Next::After(left));
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
        let phase = step.phase.as_str();
        let st = facts.stepping(phase, done, of, steps.len(), &started);
        self.write_status(&cur, st).await?;
        info!(
            phase,
            ops = step.ops.len(),
            "route reflectors: applying a step"
        );
        self.apply_step(&store, &step.ops).await?;
        self.shared.metrics.rr_step();
        self.event(
            EventType::Normal,
            events::STEP_APPLIED,
            format!(
                "step {} of {} ({phase}): {} operation(s)",
                done + 1,
                of.max(done + 1),
                step.ops.len()
            ),
        )
        .await;
        self.last_step = Some(Instant::now());
        self.waiting_said = false;
        self.started = Some((started, done + 1, of));
        Ok(Next::After(delay.max(Duration::from_millis(500))))
    }

    /// Carries out one step's operations where Calico reads them.
    async fn apply_step(&mut self, store: &Datastore, ops: &[Op]) -> Result<(), Failed> {
        match store {
            // etcd reads are linearizable: the next pass reads this step back.
            Datastore::Etcd(etcd) => {
                for op in ops {
                    self.apply_etcd(etcd, op).await?;
                }
            }
            Datastore::Kubernetes => {
                for op in ops {
                    self.apply(op).await?;
                }
                // The next plan is made from the caches: it waits until they show this
                // step, or a stale cache would plan from a state that is gone.
                self.unseen = Some((ops.to_vec(), Instant::now() + SEEN_WITHIN));
            }
        }
        Ok(())
    }

    /// The last step's sessions are up: no more pacing, and calico-node need not
    /// report any more.
    async fn transition_over(&mut self) -> Result<(), Failed> {
        if self.reports_live {
            self.last_step = None;
            sessions::clear(&self.reports_api()).await?;
            self.reports_live = false;
        }
        Ok(())
    }

    fn reports_api(&self) -> Api<DynamicObject> {
        Api::all_with(
            self.calico.client.clone(),
            &netpolicy_api::calico::calico_node_status_resource(),
        )
    }

    /// After a step's delay: `Some(poll)` while calico-node reports a reflector's BGP
    /// session not Established yet (`sessions` module docs). Bounded: without reports
    /// for [`sessions::UNREPORTED_AFTER`] (no calico-node reporting here) or with a
    /// session down for `max(60 s, 10 × stepDelaySeconds)`, the job says so and goes on.
    async fn sessions_pending(
        &mut self,
        now_state: &netpolicy_rr::Current,
        delay: Duration,
    ) -> Result<Option<Duration>, Failed> {
        let Some(at) = self.last_step else {
            return Ok(None);
        };
        let reflectors: BTreeSet<String> = now_state
            .marks
            .iter()
            .filter(|(_, m)| m.reflector.is_some() || m.cluster_id.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        self.reports_live = true;
        let poll = Some(Duration::from_secs(1));
        let verdict = sessions::check(&self.reports_api(), &reflectors).await?;
        // Served: a report is read only once confd rendered the step (a Calico without
        // CalicoNodeStatus is not held up by this).
        if verdict.is_some() && at.elapsed() < sessions::RENDERED_AFTER {
            return Ok(Some(sessions::RENDERED_AFTER.saturating_sub(at.elapsed())));
        }
        let say = |this: &mut Self, what: String| {
            let first = !this.waiting_said;
            this.waiting_said = true;
            first.then_some(what)
        };
        let message = match verdict {
            None | Some(sessions::Verdict::Up) => return Ok(None),
            Some(sessions::Verdict::Unreported(nodes)) => {
                if at.elapsed() < sessions::UNREPORTED_AFTER {
                    return Ok(poll);
                }
                say(
                    self,
                    format!(
                        "calico-node reported no BGP sessions (CalicoNodeStatus) for {} in {} s: \
                         pacing by stepDelaySeconds only",
                        nodes.join(", "),
                        sessions::UNREPORTED_AFTER.as_secs()
                    ),
                )
            }
            Some(sessions::Verdict::Waiting(why)) => {
                let bound = (delay * 10).max(Duration::from_secs(60));
                if at.elapsed() < bound {
                    debug!(%why, "route reflectors: waiting for BGP sessions");
                    return Ok(poll);
                }
                say(
                    self,
                    format!(
                        "BGP sessions still down {} s after the step, going on: {why}",
                        bound.as_secs()
                    ),
                )
            }
        };
        if let Some(message) = message {
            warn!("route reflectors: {message}");
            self.event(EventType::Warning, events::SESSIONS_UNSEEN, message)
                .await;
        }
        Ok(None)
    }

    /// Where Calico's objects are this pass; `Err((reason, message, next))` when that
    /// datastore cannot be used yet (the status says why; `next`: when to look again).
    async fn datastore(
        &mut self,
        rrc: &RouteReflectorConfig,
    ) -> Result<Datastore, (&'static str, String, Next)> {
        let wanted = rrc
            .spec
            .datastore
            .kubernetes
            .as_ref()
            .and_then(|k| k.kubeconfig_secret_ref.clone());
        if let Some(message) = self.use_remote(wanted.as_ref()).await {
            // Backed off by the runner (a missing Secret or an unreachable cluster is not
            // retried every few seconds for ever); the remote watches wake the job sooner.
            return Err((
                rc::DATASTORE_UNREACHABLE,
                message,
                Next::Backoff(ErrorClass::Transient),
            ));
        }
        if let Some(settings) = &rrc.spec.datastore.etcdv3 {
            return match self.etcd_client(settings).await {
                Ok(c) => Ok(Datastore::Etcd(c)),
                // An unreadable TLS Secret or bad endpoints: backed off, not every 10 s.
                Err(message) => Err((
                    rc::DATASTORE_UNREACHABLE,
                    message,
                    Next::Backoff(ErrorClass::Transient),
                )),
            };
        }
        self.etcd = None;
        let peers_served = match &self.remote {
            Some(r) => r.peers.health().state() == KindState::Synced,
            None => self.peers_health.state() == KindState::Synced,
        };
        if !peers_served {
            let whose = if self.remote.is_some() {
                " in the cluster of datastore.kubernetes.kubeconfigSecretRef"
            } else {
                ""
            };
            return Err((
                rc::NO_CALICO,
                format!(
                    "Calico's crd.projectcalico.org/v1 BGPPeer is not served{whose}: install \
                     Calico (or its CRDs); the operator notices on its next pass"
                ),
                Next::Resync,
            ));
        }
        Ok(Datastore::Kubernetes)
    }

    /// While the caches do not show the last step (and not for longer than
    /// [`SEEN_WITHIN`]): how long to wait at most (the watch wakes the job sooner).
    fn unseen_wait(&mut self) -> Option<Duration> {
        let (ops, deadline) = self.unseen.as_ref()?;
        if self.shows(ops) {
            self.unseen = None;
            return None;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            warn!("route reflectors: the caches do not show the last step after 10 s");
            self.unseen = None;
            return None;
        }
        Some(left)
    }

    /// The nodes placement reads and the marks and peers the datastore holds now.
    async fn observe(
        &mut self,
        store: &Datastore,
        cfg: &netpolicy_rr::Config,
        cur: &RouteReflectorConfigStatus,
    ) -> Result<(Vec<netpolicy_rr::NodeInfo>, netpolicy_rr::Current), Failed> {
        let nodes = self.calico.nodes.state();
        let Datastore::Etcd(etcd) = store else {
            let infos = nodes
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
            return Ok((infos, now_state));
        };
        // Fingerprint first: a change while reading starts another pass.
        let seen = etcd.fingerprint().await?;
        if let Some(poll) = &self.etcd {
            poll.seen.send_replace(Some(seen));
        }
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
        let infos = nodes
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
        Ok((infos, current_of(marks, peers.iter(), &cur.ring)))
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

    /// Whether the caches show every operation of `ops`.
    fn shows(&self, ops: &[Op]) -> bool {
        let label = self.reflector_label();
        let node = |n: &str| self.calico.nodes.get(&ObjectRef::new(n));
        let peer = |name: &str| {
            self.calico
                .peers
                .get(&ObjectRef::new_with(name, bgp_peer_resource()))
        };
        ops.iter().all(|op| match op {
            Op::ApplyBgpPeer(p) => peer(&p.name).is_some_and(|o| {
                o.data["spec"]["nodeSelector"] == p.node_selector.as_str()
                    && o.data["spec"]["peerSelector"] == p.peer_selector.as_str()
            }),
            Op::DeleteBgpPeer { name } => peer(name).is_none(),
            Op::SetClusterId { node: n, id } => node(n).is_none_or(|o| {
                o.annotations().get(netpolicy_rr::CLUSTER_ID_ANNOTATION) == Some(&id.to_string())
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
        })
    }

    /// Points the job at the cluster Calico's Kubernetes datastore is in: `wanted` (a
    /// kubeconfig Secret) or this one. A new remote cluster is watched from then on
    /// (its own [`Informers`], waking this job); the same settings keep their watches (a
    /// changed kubeconfig in the same Secret is read when the RouteReflectorConfig
    /// changes or the operator restarts). `Some(why)` while the remote cluster cannot be
    /// used yet.
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
            let informers = Informers::new(client.clone());
            let nodes = informers.get::<CachedNode>();
            let peers = informers.dynamic(&bgp_peer_resource(), true);
            nodes.subscribe(&self.wake, node_fingerprint);
            peers.subscribe(&self.wake, peer_fingerprint);
            informers.start();
            info!(
                secret = %format!("{}/{}", r.namespace, r.name),
                "route reflectors: Calico's datastore is another cluster's"
            );
            self.calico = Calico {
                client,
                nodes: nodes.store(),
                peers: peers.store(),
            };
            self.remote = Some(Remote {
                settings: r.clone(),
                _informers: informers,
                nodes,
                peers,
            });
        }
        let remote = self.remote.as_ref()?;
        (remote.nodes.health().state() != KindState::Synced).then(|| {
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

    /// Whether Calico's node-to-node mesh is on (`None`: Calico serves no
    /// BGPConfiguration here). The plan depends on it: while it is on, it carries the
    /// routes of reflectors' clients when cluster IDs change.
    async fn mesh_on(&self, etcd: Option<&Etcd>) -> Result<Option<bool>, Failed> {
        if let Some(etcd) = etcd {
            return Ok(Some(etcd.mesh_on().await?));
        }
        let api = Api::<DynamicObject>::all_with(
            self.calico.client.clone(),
            &bgp_configuration_resource(),
        );
        let obj = match api.get_opt("default").await {
            Ok(o) => o,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // Calico's default is on.
        Ok(Some(
            obj.as_ref()
                .and_then(|o| o.data.get("spec")?.get("nodeToNodeMeshEnabled")?.as_bool())
                .unwrap_or(true),
        ))
    }

    /// Calico's node-to-node mesh (`on`, from [`Self::mesh_on`]): `Some(why)` while it
    /// is on. With `disable`, it is turned off here (the caller calls this only when
    /// every node has its reflector sessions).
    async fn mesh(
        &self,
        rrc: &RouteReflectorConfig,
        etcd: Option<&Etcd>,
        on: Option<bool>,
        complete: bool,
    ) -> Result<Option<String>, Failed> {
        let disable = rrc.spec.node_to_node_mesh == crate::api::NodeToNodeMesh::Disable;
        if on != Some(true) {
            return Ok(None);
        }
        if let Some(etcd) = etcd {
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
        if disable && complete {
            let api = Api::<DynamicObject>::all_with(
                self.calico.client.clone(),
                &bgp_configuration_resource(),
            );
            let patch = json!({
                "apiVersion": "crd.projectcalico.org/v1",
                "kind": "BGPConfiguration",
                "metadata": {"name": "default"},
                "spec": {"nodeToNodeMeshEnabled": false},
            });
            // Forced: this one field is what `disable` asks for, and whoever wrote the
            // BGPConfiguration (Calico's docs `kubectl apply` it with the mesh on) owns
            // it. Unforced, the apply conflicts with that owner at every pass and the mesh
            // is never turned off (found on live BGP, Calico's confd and BIRD).
            api.patch(
                "default",
                &PatchParams::apply(FIELD_MANAGER).force(),
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

    /// The etcd client for `settings`, made (TLS Secret read, SRV records looked up)
    /// when they changed or the last pass failed on etcd. `Err` says why it cannot be made, for the status.
    async fn etcd_client(&mut self, settings: &EtcdDatastore) -> Result<Etcd, String> {
        if let Some(poll) = &self.etcd
            && poll.settings == *settings
        {
            return Ok(poll.client.clone());
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
        let endpoints = match &settings.discovery_srv {
            // Found again whenever the client is made: after a change or a failure.
            Some(domain) => etcd::discover(domain).await.map_err(|e| e.to_string())?,
            None => settings.endpoints.clone(),
        };
        let mut client = Etcd::new(endpoints.clone(), tls.as_ref())
            .map_err(|e| format!("spec.datastore.etcdv3: {e}"))?;
        if let Some(r) = &settings.credentials_secret_ref {
            client = client.with_credentials(self.etcd_credentials(r).await?);
        }
        info!(?endpoints, discovery_srv = ?settings.discovery_srv,
              "route reflectors: Calico's etcd datastore");
        self.etcd = Some(EtcdPoll::start(
            settings.clone(),
            client.clone(),
            self.wake.clone(),
        ));
        Ok(client)
    }

    /// etcd's user and password from `r`'s `username` and `password` (the Secret's
    /// values never appear in what this returns or logs).
    async fn etcd_credentials(&self, r: &NamespacedRef) -> Result<etcd::Credentials, String> {
        let at = format!(
            "spec.datastore.etcdv3.credentialsSecretRef: Secret {}/{}",
            r.namespace, r.name
        );
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &r.namespace);
        let secret = api
            .get(&r.name)
            .await
            .map_err(|e| format!("{at} cannot be read: {e}"))?;
        let data = secret.data.unwrap_or_default();
        let field = |k: &str| -> Result<String, String> {
            let v = data
                .get(k)
                .ok_or_else(|| format!("{at} has no key {k:?}"))?;
            String::from_utf8(v.0.clone()).map_err(|_| format!("{at}: {k} is not UTF-8"))
        };
        Ok(etcd::Credentials {
            username: field("username")?,
            password: field("password")?,
        })
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
        if let Some(rrc) = self
            .configs
            .get(&ObjectRef::new(ROUTE_REFLECTOR_CONFIG_NAME))
        {
            self.recorder
                .tell(rrc.as_ref(), type_, "Reflect", reason, note)
                .await;
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
        // Written over the cached version (not sent again while the cache has not caught
        // up with an earlier write of the same status).
        let Some(cached) = self
            .configs
            .get(&ObjectRef::new(ROUTE_REFLECTOR_CONFIG_NAME))
        else {
            return Ok(());
        };
        let api = Api::<RouteReflectorConfig>::all(self.client.clone());
        self.sent
            .apply_status(&api, FIELD_MANAGER, cached.as_ref(), &next)
            .await
            .map(|_| ())
    }
}

/// The job's decisions without a cluster: the plan from what the datastore holds, the
/// step a pass applies and the status it writes, then the settled status once the plan
/// is applied. (The process tests, tests/route_reflectors*.rs, run them against a real
/// API server, etcd and another cluster.)
#[cfg(test)]
mod tests {
    use netpolicy_rr::{Current, NodeInfo};

    use super::*;
    use crate::api::{ReflectorsPer, RouteReflectorConfigSpec};

    fn nodes() -> Vec<NodeInfo> {
        ["a1", "a2", "a3", "b1", "b2", "b3"]
            .iter()
            .zip(0..)
            .map(|(n, i)| NodeInfo::ready(n, &n[..1], i))
            .collect()
    }

    fn facts<'a>(
        cur: &'a RouteReflectorConfigStatus,
        target: &Topology,
        kind: netpolicy_rr::Kind,
        now: &'a Time,
    ) -> StatusFacts<'a> {
        StatusFacts {
            cur,
            reflectors: u32::try_from(target.placement.reflectors().count()).unwrap_or(0),
            ring: target.ring.clone(),
            cluster_ids: cluster_ids(target, kind),
            generation: Some(1),
            now,
        }
    }

    #[test]
    fn a_pass_applies_the_first_step_then_settles_with_a_cluster_id_per_zone() {
        let spec = RouteReflectorConfigSpec {
            min: 1,
            per: ReflectorsPer::Zone,
            ..RouteReflectorConfigSpec::default()
        };
        let cfg = config(&spec).unwrap_or_else(|e| panic!("{e:?}"));
        let nodes = nodes();
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let empty = Current::default();
        let target = topology(&nodes, &cfg, &empty).unwrap_or_else(|e| panic!("{e}"));
        let steps = transition(&nodes, &empty, &target);
        assert!(
            !steps.is_empty(),
            "a cluster without reflectors needs steps"
        );
        // The status while the first step is applied: not Ready, Progressing.
        let cur = RouteReflectorConfigStatus::default();
        let st = facts(&cur, &target, cfg.topology, &now).stepping(
            steps[0].phase.as_str(),
            0,
            u32::try_from(steps.len()).unwrap_or(0),
            steps.len(),
            &now,
        );
        assert!(conditions::is_false(&st.conditions, conditions::READY));
        assert!(conditions::is_true(&st.conditions, rc::PROGRESSING));
        let t = st.transition.as_ref().map(|t| (t.step, t.of));
        assert_eq!(t, Some((1, u32::try_from(steps.len()).unwrap_or(0))));
        // Once the cluster holds the plan, no step is left and the status settles.
        let applied = target.applied();
        let again = topology(&nodes, &cfg, &applied).unwrap_or_else(|e| panic!("{e}"));
        assert!(transition(&nodes, &applied, &again).is_empty());
        let settled = facts(&st, &again, cfg.topology, &now).settled(&again.warnings, None);
        assert!(conditions::is_true(&settled.conditions, conditions::READY));
        assert!(conditions::is_false(&settled.conditions, rc::PROGRESSING));
        assert!(settled.transition.is_none());
        assert_eq!(settled.reflectors, Some(2));
        // `simple`: one cluster ID per zone.
        assert_eq!(
            settled.cluster_ids.keys().collect::<Vec<_>>(),
            ["a", "b"],
            "{:?}",
            settled.cluster_ids
        );
    }

    #[test]
    fn a_topology_with_warnings_is_not_ready_and_says_why() {
        let spec = RouteReflectorConfigSpec {
            min: 1,
            ..RouteReflectorConfigSpec::default()
        };
        let cfg = config(&spec).unwrap_or_else(|e| panic!("{e:?}"));
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let cur = RouteReflectorConfigStatus::default();
        let target = topology(&[], &cfg, &Current::default()).unwrap_or_else(|e| panic!("{e}"));
        let st = facts(&cur, &target, cfg.topology, &now).settled(
            &["zone a has no eligible node".to_owned()],
            Some(MESH_ON.into()),
        );
        let ready = conditions::find(&st.conditions, conditions::READY);
        assert!(ready.is_some_and(|c| c.status == "False" && c.message.contains("zone a")));
        assert!(conditions::is_true(&st.conditions, rc::NODE_TO_NODE_MESH));
    }
}
