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
//! # Shape
//! Like routing's: [`super::step`] decides (the next step, its pacing, the status and the
//! Events) without a cluster, and this file carries the decision out. Calico's objects
//! are read and written only through a [`Datastore`] ([`super::datastore`]: the
//! Kubernetes datastore, this cluster's or another's, and Calico's etcd), which
//! [`super::connect`] picks for each pass and keeps connected (another cluster's
//! watches; etcd's client, polled every two seconds with a two-key fingerprint so a
//! change there starts a pass).

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api, Client,
    api::DynamicObject,
    runtime::{
        events::EventType,
        reflector::{ObjectRef, Store},
    },
};
use netpolicy_rr::{Current, Op};
use tracing::{debug, info, warn};

use super::{
    config,
    connect::{Connections, Picked, node_fingerprint, peer_fingerprint},
    datastore::{Calico, Datastore, Failed},
    metrics::Metrics,
    sessions,
    step::{self, Action, Decision, Event, Memory, Pass},
};
use crate::{
    api::{
        ROUTE_REFLECTOR_CONFIG_NAME, RouteReflectorConfig, RouteReflectorConfigStatus,
        calico::bgp_peer_resource,
        conditions::{events, route_reflector as rc},
    },
    k8s::{CachedNode, FIELD_MANAGER, spec_fingerprint},
    runtime::{Changes, ErrorClass, Informers, Job, JobError, Next, Setup, Wake},
    telemetry::Shared,
};

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
        metrics: shared.metrics.of::<Metrics>(),
        configs: configs.store(),
        connections: Connections::new(client.clone(), wake.clone(), local, peers.health()),
        memory: Memory::default(),
        last_step: None,
        reports_live: true,
        waiting_said: false,
        unseen: None,
        sent: crate::k8s::Sent::default(),
    };
    Setup { job, wake, kinds }
}

/// The route-reflector job.
pub(crate) struct RouteReflectors {
    client: Client,
    recorder: crate::k8s::events::Recorder,
    metrics: Arc<Metrics>,
    configs: Store<RouteReflectorConfig>,
    /// Calico's datastores.
    connections: Connections,
    /// What [`step::step`] remembers between passes.
    memory: Memory,
    /// When the last step was applied (pacing).
    last_step: Option<Instant>,
    /// `CalicoNodeStatus` objects of ours may exist (`sessions`).
    reports_live: bool,
    /// The current step's wait for calico-node's reports was already reported.
    waiting_said: bool,
    /// The last step's operations until the datastore shows them, and until when to
    /// wait for that.
    unseen: Option<(Vec<Op>, Instant)>,
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
        let at = (rrc.metadata.generation, &now);
        let cfg = match config(&rrc.spec) {
            Ok(c) => c,
            Err(problems) => {
                let message = problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                let d = step::not_ready(&self.memory, &cur, rc::INVALID, message, at, Next::Resync);
                return self.report(d, &cur).await;
            }
        };
        let picked = match self.connections.pick(&rrc.spec).await {
            Ok(p) => p,
            Err((reason, message, next)) => {
                let d = step::not_ready(&self.memory, &cur, reason, message, at, next);
                return self.report(d, &cur).await;
            }
        };
        let pass = PassOn {
            rrc: &rrc,
            cfg: &cfg,
            cur: &cur,
            now: &now,
        };
        match picked {
            Picked::Kubernetes(mut store) => self.pass_on(&mut store, &pass).await,
            Picked::Etcd(mut store) => self.pass_on(&mut store, &pass).await,
        }
    }

    /// The pass on the datastore it picked.
    async fn pass_on<D: Datastore>(
        &mut self,
        store: &mut D,
        pass: &PassOn<'_>,
    ) -> Result<Next, Failed> {
        if let Some(wait) = self.unseen_wait(store) {
            return Ok(Next::After(wait));
        }
        let (nodes, mut current) = store.observe(&pass.cur.ring).await?;
        let mesh_on = store.mesh_on().await?;
        current.mesh = mesh_on == Some(true);
        // Pacing: BIRD needs the step delay to bring the last step's sessions up before
        // the next step (or turning the mesh off) relies on them.
        let delay = Duration::from_secs(u64::from(pass.rrc.spec.step_delay_seconds));
        let mut pacing = self
            .last_step
            .map(|at| delay.saturating_sub(at.elapsed()))
            .filter(|left| !left.is_zero());
        if pacing.is_none()
            && let Some(reports) = store.session_reports()
        {
            pacing = self.sessions_pending(&reports, &current, delay).await?;
        }
        let d = step::step(
            &Pass {
                spec: &pass.rrc.spec,
                cfg: pass.cfg,
                status: pass.cur,
                generation: pass.rrc.metadata.generation,
                now: pass.now,
                nodes: &nodes,
                current: &current,
                mesh_on,
                pacing,
            },
            &self.memory,
        );
        self.carry_out(store, d, pass.cur).await
    }

    /// Carries a decision out in the order [`Decision`] gives.
    async fn carry_out<D: Datastore>(
        &mut self,
        store: &D,
        d: Decision,
        cur: &RouteReflectorConfigStatus,
    ) -> Result<Next, Failed> {
        if let Some(target) = &d.target {
            for z in &target.placement.zones {
                self.metrics.reflectors(&z.zone, z.reflectors.len());
            }
            self.metrics.clients(target.loads());
        }
        if let Some(t) = d.in_transition {
            self.metrics.in_transition(t);
        }
        let Action::Step(ops) = &d.action else {
            if d.action == Action::DisableMesh {
                self.tell(&d.before).await;
                self.memory = d.memory.clone();
                store.disable_mesh().await?;
                self.tell(&d.after).await;
                return self.settle(d, cur, true).await;
            }
            return self.settle(d, cur, false).await;
        };
        if d.starts_transition {
            self.metrics.transition();
        }
        self.tell(&d.before).await;
        self.write_status(cur, d.status.clone()).await?;
        let phase = d.status.transition.as_ref().map(|t| t.phase.clone());
        info!(?phase, ops = ops.len(), "route reflectors: applying a step");
        for op in ops {
            store.apply(op).await?;
        }
        // The next plan waits until the datastore shows this step (the watches may lag).
        self.unseen = Some((ops.clone(), Instant::now() + SEEN_WITHIN));
        self.metrics.step();
        self.tell(&d.after).await;
        self.memory = d.memory;
        self.last_step = Some(Instant::now());
        self.waiting_said = false;
        Ok(d.next)
    }

    /// A decision without a step: its Events and memory (unless `told`), the end of the
    /// transition, the status.
    async fn settle(
        &mut self,
        d: Decision,
        cur: &RouteReflectorConfigStatus,
        told: bool,
    ) -> Result<Next, Failed> {
        if !told {
            self.tell(&d.before).await;
            self.memory = d.memory;
        }
        if d.transition_over {
            self.transition_over().await?;
        }
        self.write_status(cur, d.status).await?;
        Ok(d.next)
    }

    /// A decision made before a datastore was reached (the config is not Ready).
    async fn report(
        &mut self,
        d: Decision,
        cur: &RouteReflectorConfigStatus,
    ) -> Result<Next, Failed> {
        debug_assert_eq!(d.action, Action::Nothing);
        self.settle(d, cur, false).await
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
            self.connections.calico().client.clone(),
            &netpolicy_api::calico::calico_node_status_resource(),
        )
    }

    /// After a step's delay: `Some(poll)` while calico-node reports a reflector's BGP
    /// session not Established yet ([`sessions::pacing`]); going on without them is
    /// told once per step.
    async fn sessions_pending(
        &mut self,
        reports: &Api<DynamicObject>,
        current: &Current,
        delay: Duration,
    ) -> Result<Option<Duration>, Failed> {
        let Some(at) = self.last_step else {
            return Ok(None);
        };
        let reflectors: BTreeSet<String> = current
            .marks
            .iter()
            .filter(|(_, m)| m.reflector.is_some() || m.cluster_id.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        self.reports_live = true;
        let verdict = sessions::check(reports, &reflectors).await?;
        match sessions::pacing(verdict, at.elapsed(), delay) {
            sessions::Pacing::Wait(wait, why) => {
                if let Some(why) = why {
                    debug!(%why, "route reflectors: waiting for BGP sessions");
                }
                Ok(Some(wait))
            }
            sessions::Pacing::GoOn(None) => Ok(None),
            sessions::Pacing::GoOn(Some(message)) => {
                if !self.waiting_said {
                    self.waiting_said = true;
                    warn!("route reflectors: {message}");
                    self.event(EventType::Warning, events::SESSIONS_UNSEEN, message)
                        .await;
                }
                Ok(None)
            }
        }
    }

    /// While the datastore does not show the last step (and not for longer than
    /// [`SEEN_WITHIN`]): how long to wait at most (the watch wakes the job sooner).
    fn unseen_wait(&mut self, store: &impl Datastore) -> Option<Duration> {
        let (ops, deadline) = self.unseen.as_ref()?;
        if store.shows(ops) {
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

    /// Reports an etcd failure in the status (the pass is retried) and drops the client,
    /// so the next pass reads the Secrets again.
    async fn datastore_failed(&mut self, message: String) {
        self.connections.forget_etcd();
        let Some(rrc) = self
            .configs
            .get(&ObjectRef::new(ROUTE_REFLECTOR_CONFIG_NAME))
        else {
            return;
        };
        let cur = rrc.status.clone().unwrap_or_default();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let st = step::unreachable(&cur, message, (rrc.metadata.generation, &now));
        if let Err(e) = self.write_status(&cur, st).await {
            warn!(error = %e, "route reflectors: the status could not be written");
        }
    }

    async fn tell(&self, events: &[Event]) {
        for e in events {
            self.event(e.type_, e.reason, e.note.clone()).await;
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

/// What a pass read before it reached a datastore.
struct PassOn<'a> {
    rrc: &'a RouteReflectorConfig,
    cfg: &'a netpolicy_rr::Config,
    cur: &'a RouteReflectorConfigStatus,
    now: &'a Time,
}
