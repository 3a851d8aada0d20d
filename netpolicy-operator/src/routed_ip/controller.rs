//! The routed-IP controller: RoutedIPIssuers, RoutedIPs, Nodes, Services and their
//! EndpointSlices → cloud IPs on elected nodes, with the cloud firewall kept in step
//! (docs/architecture.md, RoutedIP; election and the failover plan are netpolicy-issuers').
//!
//! Shape: kube-runtime's `Controller`, one reconcile per RoutedIP, because each IP is
//! independent and a provider call can be slow or rate-limited: one RoutedIP must never
//! wait behind another. It runs netpolicy-issuers' driver (`observe`, `plan`,
//! `execute`: what its property tests exercise), one step at a time so each is in the
//! status before it runs.
//!
//! # Guarantees
//! - The address is recorded in `status.address` before the IP is assigned anywhere
//!   (DigitalOcean IPs carry no tags: an unrecorded one would be orphaned). A restarted
//!   operator finds its IPs by the recorded address, `spec.address`, or (Hetzner) the
//!   labels it put on them (`netpolicy.io/cluster`: the `kube-system` Namespace's UID,
//!   `netpolicy.io/routed-ip`: the RoutedIP's name).
//! - Failover follows [`netpolicy_issuers::plan`] from what the provider has now: ports
//!   and the new node are added to the firewall, the IP is assigned, and only then are
//!   stale ports and nodes removed. Each step is shown in `status.step` before it runs
//!   and recorded as an Event after; an operator killed between two steps re-plans from
//!   the provider's state and does exactly the remaining ones.
//! - `cooldownUntil` (per node that lost the IP) is kept in the status, so it survives
//!   restarts.
//! - A RoutedIP whose holder, ports and firewall are what the status says is not sent to
//!   the provider again until the next resync (`--resync-seconds`): a quiet cluster makes
//!   no provider call and no API write.
//! - The issuer's token is read from its Secret and only handed to the provider client
//!   (which sends it in the `Authorization` header and never shows it); errors, Events,
//!   logs and statuses never carry it.
//! - Deletion follows `reclaimPolicy` behind the finalizer `netpolicy.io/routed-ip`:
//!   `Retain` unassigns, `Delete` deletes. A RoutedIP whose issuer is gone is let go
//!   with a Warning Event (nothing can be called).
//! - A 429 waits the provider's delay (`Retry-After`, else `RateLimit-Reset`, capped
//!   at 5 min) for that RoutedIP only; other errors back off per RoutedIP by their class
//!   (transient from 1 s to 5 min, permanent from 10 s to 90 s) and show in the `Ready`
//!   condition and an Event.
//! - After a restart the provider's holder is the truth: an operator killed after the
//!   provider moved the IP but before the status said so corrects `status.node`, records
//!   the cooldown of the node that lost it, and does not move the IP back.
//! - Every resync, each issuer's IPs tagged for this cluster (Hetzner labels) are
//!   listed: one whose RoutedIP is gone is an orphan, shown in the issuer's `Orphans`
//!   condition and a Warning Event, and never deleted (a `Retain`ed IP is one).

mod provider;

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        core::v1::{Namespace, Service},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        controller::Action,
        events::{Event, EventType},
        finalizer::{Event as Finalizer, finalizer},
        reflector::{ObjectRef, Store},
    },
};
use netpolicy_issuers::{
    Candidate, Error as ProviderError, Issuer, Step, Tags, memory::MemoryIssuer, plan,
};
use tracing::{debug, info, warn};

use self::provider::Made;
use super::{cooldown, decide, elect, endpoint_nodes, service_ports, step_name};
use crate::{
    api::{
        ReclaimPolicy, RoutedIP, RoutedIPIssuer, RoutedIPStatus,
        conditions::{self, events, routed_ip as rc},
    },
    k8s::{CachedNode, FIELD_MANAGER},
    runtime::{ErrorClass, Informers, Next, ObjectJob, ObjectSetup, informer::lock, per_object},
    telemetry::Shared,
};

/// The finalizer that holds a RoutedIP until its IP is released.
pub(crate) const FINALIZER: &str = "netpolicy.io/routed-ip";

/// Why one RoutedIP could not be driven.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failed {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Provider(#[from] ProviderError),
    /// The issuer or its token is unusable (the message says which field).
    #[error("{0}")]
    Issuer(String),
    /// Adding or removing the finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// The finalizer patch's test found the list changed (the cache was behind):
    /// re-read and retry at once.
    #[error("finalizer: the object changed meanwhile ({0})")]
    Changed(String),
}

impl Failed {
    /// The class that decides the retry, and the condition reason.
    fn class(&self) -> (ErrorClass, &'static str) {
        match self {
            Self::Provider(ProviderError::RateLimited { .. }) => {
                (ErrorClass::Transient, rc::RATE_LIMITED)
            }
            Self::Provider(ProviderError::NotFound(_)) => (ErrorClass::Permanent, rc::NOT_FOUND),
            Self::Provider(ProviderError::Unauthorized(_)) | Self::Issuer(_) => {
                (ErrorClass::Permanent, rc::ISSUER_UNAVAILABLE)
            }
            Self::Provider(ProviderError::Conflict(_)) => {
                (ErrorClass::Conflict, rc::PROVIDER_ERROR)
            }
            Self::Provider(ProviderError::LimitExceeded(_)) => {
                (ErrorClass::Permanent, rc::QUOTA_EXCEEDED)
            }
            Self::Provider(ProviderError::Provider(_)) => {
                (ErrorClass::Transient, rc::PROVIDER_ERROR)
            }
            // The issuer cannot be used now: said as such, retried with backoff.
            Self::Provider(ProviderError::Unreachable(_)) => {
                (ErrorClass::Transient, rc::ISSUER_UNAVAILABLE)
            }
            Self::Kube(e) => (ErrorClass::of(e), rc::PROVIDER_ERROR),
            Self::Finalizer(_) => (ErrorClass::Transient, rc::PROVIDER_ERROR),
            Self::Changed(_) => (ErrorClass::Conflict, rc::PROVIDER_ERROR),
        }
    }
}

/// The provider's delay of a rate-limited call, capped at the transient backoff's cap.
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(300);

/// The routed-IP jobs, ready for [`Runner::run_each`](crate::runtime::Runner::run_each): each RoutedIP is reconciled on
/// its own (one RoutedIP's provider trouble, backoff or rate limit never delays
/// another's failover) when it, its issuer, a Node (in what election reads), or its
/// Service and EndpointSlices change; and each issuer is checked (token, orphans).
pub(crate) fn setup(
    informers: &Informers,
    client: &Client,
    shared: &Arc<Shared>,
    resync: Duration,
) -> (ObjectSetup<RoutedIps>, ObjectSetup<IssuerChecks>) {
    let rips = informers.get::<RoutedIP>();
    let issuers = informers.get::<RoutedIPIssuer>();
    let nodes = informers.get::<CachedNode>();
    let slices = informers.get::<EndpointSlice>();
    let services = informers.get::<Service>();
    let ctx = Arc::new(Context {
        recorder: crate::k8s::recorder(client),
        client: client.clone(),
        metrics: shared.metrics.of::<super::metrics::Metrics>(),
        cluster: tokio::sync::OnceCell::new(),
        issuers: issuers.store(),
        rips: rips.store(),
        nodes: nodes.store(),
        slices: slices.store(),
        services: services.store(),
        providers: Mutex::new(HashMap::new()),
        memory: Mutex::new(HashMap::new()),
        last_error: Mutex::new(HashMap::new()),
        checked: Mutex::new(HashMap::new()),
        orphans: Mutex::new(HashMap::new()),
        sent: crate::k8s::Sent::default(),
        resync,
    });
    let (for_nodes, for_slices, for_services, for_issuers) =
        (rips.store(), rips.store(), rips.store(), rips.store());
    // The finalizer helper adds its finalizer and waits for the change: finalizers are
    // part of what wakes a RoutedIP.
    let routed_ips = ObjectSetup::new(Arc::new(RoutedIps(Arc::clone(&ctx))), &rips, |r| {
        format!(
            "{}|{:?}",
            decide::generation_fingerprint(r),
            r.metadata.finalizers
        )
    })
    // Election reads every Node: any change that matters re-checks every RoutedIP (each
    // is cheap while settled: no provider call).
    .related(&nodes, decide::node_fingerprint, move |_| {
        per_object::all(&for_nodes)
    })
    .related(
        &slices,
        decide::slice_fingerprint,
        move |s: EndpointSlice| {
            let ns = s.namespace().unwrap_or_default();
            let svc = s.labels().get("kubernetes.io/service-name").cloned();
            serving(&for_slices, &ns, svc.as_deref())
        },
    )
    .related(&services, decide::service_fingerprint, move |s: Service| {
        serving(
            &for_services,
            &s.namespace().unwrap_or_default(),
            Some(&s.name_any()),
        )
    })
    .related(
        &issuers,
        decide::generation_fingerprint,
        move |i: RoutedIPIssuer| {
            let name = i.name_any();
            for_issuers
                .state()
                .iter()
                .filter(|r| r.spec.issuer_ref.name == name)
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        },
    );
    let issuer_checks = ObjectSetup::new(
        Arc::new(IssuerChecks(ctx)),
        &issuers,
        decide::generation_fingerprint,
    );
    (routed_ips, issuer_checks)
}

/// The RoutedIPs whose `serviceRef` names Service `namespace/name`.
fn serving(
    rips: &Store<RoutedIP>,
    namespace: &str,
    name: Option<&str>,
) -> Vec<ObjectRef<RoutedIP>> {
    let Some(name) = name else { return Vec::new() };
    rips.state()
        .iter()
        .filter(|r| {
            r.spec
                .service_ref
                .as_ref()
                .is_some_and(|s| s.namespace == namespace && s.name == name)
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// The routed-IP job: one reconcile per RoutedIP.
pub(crate) struct RoutedIps(Arc<Context>);

impl ObjectJob for RoutedIps {
    type Kind = RoutedIP;
    type Error = Failed;

    fn name(&self) -> &'static str {
        "routed-ip"
    }

    fn class(&self, e: &Failed) -> ErrorClass {
        e.class().0
    }

    /// Reconciles one RoutedIP behind the finalizer (kube-runtime's `finalizer()`: its
    /// patches carry a `test` of the finalizer list, so another writer's finalizer is
    /// never lost).
    async fn reconcile(&self, rip: Arc<RoutedIP>) -> Result<Next, Failed> {
        let ctx = &self.0;
        let api = Api::<RoutedIP>::all(ctx.client.clone());
        let name = rip.name_any();
        let deleting = rip.metadata.deletion_timestamp.is_some();
        // What the job asks of the runtime (the finalizer helper speaks kube's Action).
        let next = Mutex::new(Next::Resync);
        let r = finalizer(&api, FINALIZER, rip, |event| async {
            let n = match event {
                Finalizer::Apply(rip) => ctx.apply(&rip).await,
                Finalizer::Cleanup(rip) => ctx.cleanup(&rip).await,
            }?;
            *lock(&next) = n;
            Ok(Action::await_change())
        })
        .await;
        r.map_err(|e| match e {
            kube::runtime::finalizer::Error::ApplyFailed(e)
            | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
            // The finalizer helper's JSON patch tests the list it read; a cache that is
            // behind fails that test (422) or the object moved on (409): a conflict.
            kube::runtime::finalizer::Error::AddFinalizer(kube::Error::Api(e))
            | kube::runtime::finalizer::Error::RemoveFinalizer(kube::Error::Api(e))
                if e.code == 422 || e.code == 409 =>
            {
                Failed::Changed(e.message)
            }
            kube::runtime::finalizer::Error::AddFinalizer(e)
            | kube::runtime::finalizer::Error::RemoveFinalizer(e) => Failed::Kube(e),
            e => Failed::Finalizer(e.to_string()),
        })?;
        lock(&ctx.last_error).remove(&name);
        if deleting {
            ctx.metrics.ready(&name, None);
        }
        Ok(*lock(&next))
    }

    /// Honours a provider's `Retry-After`, and reports the failure in the RoutedIP's
    /// status and an Event (when the message changed).
    fn failed(self: &Arc<Self>, rip: &Arc<RoutedIP>, e: &Failed, delay: Duration) -> Duration {
        let ctx = &self.0;
        let name = rip.name_any();
        let (class, reason) = e.class();
        let delay = if let Failed::Provider(ProviderError::RateLimited { retry_after }) = e {
            ctx.metrics.rate_limited();
            Duration::from_secs((*retry_after).max(1)).min(MAX_RATE_LIMIT_WAIT)
        } else {
            delay
        };
        if let Failed::Provider(p) = e {
            ctx.metrics.provider_error(decide::error_kind(p));
            if matches!(p, ProviderError::Unauthorized(_)) {
                // Read the token again next time.
                lock(&ctx.providers).remove(&rip.spec.issuer_ref.name);
            }
        }
        if class == ErrorClass::Conflict {
            // Not a failure to report: the next reconcile reads the object again.
            debug!(routed_ip = %name, error = %e, retry_in = ?delay, "routed IP: conflict");
            return delay;
        }
        let message = e.to_string();
        let (ctx, rip) = (Arc::clone(ctx), Arc::clone(rip));
        tokio::spawn(async move { ctx.report(&rip, reason, message, delay).await });
        delay
    }
}

/// The issuers' check: each issuer's token and provider, and its orphans.
pub(crate) struct IssuerChecks(Arc<Context>);

impl ObjectJob for IssuerChecks {
    type Kind = RoutedIPIssuer;
    type Error = kube::Error;

    fn name(&self) -> &'static str {
        "routed-ip-issuer"
    }

    fn class(&self, e: &kube::Error) -> ErrorClass {
        ErrorClass::of(e)
    }

    async fn reconcile(&self, issuer: Arc<RoutedIPIssuer>) -> Result<Next, kube::Error> {
        let ctx = &self.0;
        let names: BTreeSet<String> = ctx.rips.state().iter().map(|r| r.name_any()).collect();
        Ok(match ctx.check_issuer(&issuer, &names).await {
            None => Next::Resync,
            // Not usable now (a Secret not yet granted, an API not answering): said in
            // its status, and looked at again by its class's backoff, not at the next
            // resync, so a fix shows soon.
            Some(class) => Next::Backoff(class),
        })
    }
}

/// What every reconcile shares: the client, the caches, provider clients, and the
/// per-RoutedIP backoff and provider-check times.
pub(crate) struct Context {
    client: Client,
    recorder: crate::k8s::events::Recorder,
    metrics: Arc<super::metrics::Metrics>,
    /// The cluster's identity for the provider-side labels: the kube-system
    /// Namespace's UID (stable for the cluster's life, the same in every replica); read
    /// once, when first needed.
    cluster: tokio::sync::OnceCell<String>,
    issuers: Store<RoutedIPIssuer>,
    rips: Store<RoutedIP>,
    nodes: Store<CachedNode>,
    slices: Store<EndpointSlice>,
    services: Store<Service>,
    /// Provider clients by issuer name, with the issuer generation they were made for.
    providers: Mutex<HashMap<String, Made>>,
    /// `memory` issuers' state (kept while the process lives).
    memory: Mutex<HashMap<String, Arc<MemoryIssuer>>>,
    /// The last error reported per RoutedIP (an Event only when it changes).
    last_error: Mutex<HashMap<String, String>>,
    /// When each RoutedIP was last checked at the provider (the resync).
    checked: Mutex<HashMap<String, Instant>>,
    /// The orphans each issuer had at its last check.
    orphans: Mutex<HashMap<String, Vec<String>>>,
    /// Status writes not yet seen back in the caches: not sent again over the same
    /// cached version (after an API server restart a lagging cache would otherwise have
    /// every resync write the same status).
    sent: crate::k8s::Sent,
    resync: Duration,
}

impl Context {
    /// The issuer's status: `Ready` (its token was read and the provider answered a
    /// listing) and `Orphans` (IPs tagged for this cluster whose RoutedIP is gone).
    /// Returns the class of the failure when the issuer is not usable.
    async fn check_issuer(
        &self,
        issuer: &RoutedIPIssuer,
        routed_ips: &BTreeSet<String>,
    ) -> Option<ErrorClass> {
        let name = issuer.name_any();
        let cluster = self.cluster().await;
        let listed: Result<_, Failed> = match self.provider(issuer).await {
            Ok(p) => p.tagged_ips(cluster).await.map_err(Failed::Provider),
            Err(e) => Err(e),
        };
        if let Err(Failed::Provider(ProviderError::Unauthorized(_))) = &listed {
            // Read the token again next time.
            lock(&self.providers).remove(&name);
        }
        let failed = listed.as_ref().err().map(|e| e.class().0);
        let listed = listed.map_err(|e| e.to_string());
        let cur = issuer.status.clone().unwrap_or_default();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let before = lock(&self.orphans).get(&name).cloned().unwrap_or_default();
        let check = decide::issuer_check(issuer, &listed, routed_ips, &before, &now);
        if let Some(note) = check.new_orphans {
            warn!(issuer = %name, "{note}");
            let event = Event {
                type_: EventType::Warning,
                reason: rc::ORPHANED.into(),
                note: Some(note),
                action: "Inventory".into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &issuer.object_ref(&())).await {
                warn!(error = %e, "could not record an Event");
            }
        }
        if let Some(orphans) = check.orphans {
            lock(&self.orphans).insert(name.clone(), orphans);
        }
        let st = check.status;
        if st == cur {
            return failed;
        }
        let api = Api::<RoutedIPIssuer>::all(self.client.clone());
        if let Err(e) = self
            .sent
            .apply_status(&api, FIELD_MANAGER, issuer, &st)
            .await
        {
            warn!(error = %e, "routed IP issuer: status not written");
        }
        failed
    }

    /// Reports a failure: the `Ready` condition (False, with the reason), and a log
    /// line and an Event when the message changed.
    async fn report(&self, rip: &RoutedIP, reason: &'static str, message: String, delay: Duration) {
        let name = rip.name_any();
        let changed =
            lock(&self.last_error).insert(name.clone(), message.clone()) != Some(message.clone());
        if changed {
            warn!(routed_ip = %name, error = %message, "routed IP: retrying in {delay:?}");
            self.recorder
                .tell(rip, EventType::Warning, "Failover", reason, message.clone())
                .await;
        }
        // The latest status (the reconcile may have written since `rip` was read).
        let latest = self
            .rips
            .get(&ObjectRef::from_obj(rip))
            .unwrap_or_else(|| Arc::new(rip.clone()));
        let cur = latest.status.clone().unwrap_or_default();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let st = decide::failed(&cur, reason, message, rip.metadata.generation, &now);
        if let Err(e) = self.write_status(&latest, &cur, &st).await {
            warn!(routed_ip = %name, error = %e, "routed IP: status not written");
        }
    }

    /// Deletion, behind the finalizer: `Retain` unassigns, `Delete` deletes; an issuer
    /// that is gone lets the RoutedIP go with a Warning Event.
    async fn cleanup(&self, rip: &RoutedIP) -> Result<Next, Failed> {
        let name = rip.name_any();
        let Some(issuer) = self.issuers.get(&ObjectRef::new(&rip.spec.issuer_ref.name)) else {
            self.recorder
                .tell(
                    rip,
                    EventType::Warning,
                    "Failover",
                    rc::ISSUER_UNAVAILABLE,
                    format!(
                        "issuer {} is gone: the IP {:?} is left at the provider as it is",
                        rip.spec.issuer_ref.name,
                        rip.status.as_ref().and_then(|s| s.address.clone())
                    ),
                )
                .await;
            return Ok(Next::Resync);
        };
        let provider = self.provider(&issuer).await?;
        let tags = self.tags(&name).await;
        let address = rip
            .status
            .as_ref()
            .and_then(|s| s.address.clone())
            .or_else(|| rip.spec.address.clone());
        let policy = match rip.spec.reclaim_policy {
            ReclaimPolicy::Retain => netpolicy_issuers::ReclaimPolicy::Retain,
            ReclaimPolicy::Delete => netpolicy_issuers::ReclaimPolicy::Delete,
        };
        let released =
            netpolicy_issuers::release(&*provider, &tags, address.as_deref(), policy).await;
        if let Err(e) = released {
            // Say what the deletion waits for and how to let it go without the provider
            // (issue 40: a Retain delete stayed Terminating for good, silently).
            let what = match policy {
                netpolicy_issuers::ReclaimPolicy::Retain => "unassign",
                netpolicy_issuers::ReclaimPolicy::Delete => "release",
            };
            self.recorder
                .tell(
                    rip,
                    EventType::Warning,
                    "Failover",
                    rc::PROVIDER_ERROR,
                    format!(
                        "deletion waits for issuer {} to {what} {:?} (retried with backoff): {e}. \
                     To let the RoutedIP go and leave the IP at the provider as it is: \
                     kubectl patch routedip {name} --type=json -p \
                     '[{{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}}]'",
                        rip.spec.issuer_ref.name,
                        address.as_deref().unwrap_or("its IP")
                    ),
                )
                .await;
            return Err(e.into());
        }
        info!(routed_ip = %name, ?policy, ?address, "routed IP released");
        lock(&self.checked).remove(&name);
        Ok(Next::Resync)
    }

    /// One RoutedIP: elect, then bring the provider to the plan (netpolicy-issuers'
    /// driver), recording each step in the status before it runs.
    async fn apply(&self, rip: &RoutedIP) -> Result<Next, Failed> {
        let name = rip.name_any();
        let Some(issuer) = self.issuers.get(&ObjectRef::new(&rip.spec.issuer_ref.name)) else {
            return Err(Failed::Issuer(format!(
                "spec.issuerRef.name: RoutedIPIssuer {} does not exist",
                rip.spec.issuer_ref.name
            )));
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let cur = rip.status.clone().unwrap_or_default();
        let selector = rip
            .spec
            .node_selector
            .validate("spec.nodeSelector")
            .map_err(|e| Failed::Issuer(e.to_string()))?;
        let (with_endpoint, ports) = match &rip.spec.service_ref {
            None => (None, BTreeSet::new()),
            Some(r) => {
                let svc = self
                    .services
                    .get(&ObjectRef::new(&r.name).within(&r.namespace));
                let ports = svc.as_deref().map(service_ports).unwrap_or_default();
                let slices = self.slices.state();
                let nodes = endpoint_nodes(slices.iter().map(AsRef::as_ref), &r.namespace, &r.name);
                (Some(nodes), ports)
            }
        };
        let nodes = self.nodes.state();
        let candidates = decide::candidates(
            nodes.iter().map(AsRef::as_ref),
            &selector,
            with_endpoint.as_ref(),
        );
        let firewall = issuer.spec.firewall.as_ref().map(|f| f.name.clone());
        // Settled as the status says, and checked at the provider within the resync:
        // no provider call.
        let lost = cooldown(&cur.cooldown_until, rip.spec.cooldown_seconds);
        let elected = elect(
            &candidates,
            cur.node.as_deref(),
            &lost,
            now.as_second(),
            rip.spec.cooldown_seconds,
        )
        .cloned();
        let settled = decide::settled(rip, elected.as_ref(), firewall.as_ref(), &ports);
        let checked = lock(&self.checked).get(&name).copied();
        if settled && let Some(t) = checked.filter(|t| t.elapsed() < self.resync) {
            return Ok(Next::After(self.resync - t.elapsed()));
        }
        let provider = self.provider(&issuer).await?;
        // The node a provider ID names (the provider's holder may be any node).
        let nodes = self.nodes.clone();
        let node_of = move |p: &str| {
            nodes
                .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(p))
                .and_then(|n| n.metadata.name.clone())
        };
        let ctx = Drive {
            rip,
            candidates: &candidates,
            node_of: &node_of,
            firewall: firewall.clone(),
            ports: ports.clone(),
        };
        let (st, elected) = self.drive(&*provider, &ctx).await?;
        lock(&self.checked).insert(name.clone(), Instant::now());
        let st = decide::finished(
            st,
            &cur.conditions,
            elected.as_deref(),
            firewall,
            &ports,
            rip.metadata.generation,
            k8s_openapi::jiff::Timestamp::now(),
        );
        self.write_status(rip, &cur, &st).await?;
        Ok(Next::Resync)
    }

    /// Finds or creates the IP (recording its address first), takes the provider's
    /// holder as the truth (a status written before a kill may name the old one), elects
    /// from it, then carries out netpolicy-issuers' plan step by step, each shown in the
    /// status before it runs. Returns the status after the last step and the elected
    /// node's name.
    async fn drive<I: Issuer>(
        &self,
        issuer: &I,
        d: &Drive<'_>,
    ) -> Result<(RoutedIPStatus, Option<String>), Failed> {
        let rip = d.rip;
        let name = rip.name_any();
        let tags = self.tags(&name).await;
        let mut st = rip.status.clone().unwrap_or_default();
        let known = st.address.clone().or_else(|| rip.spec.address.clone());
        let observed = match netpolicy_issuers::observe(
            issuer,
            &tags,
            known.as_deref(),
            d.firewall.as_deref(),
        )
        .await
        {
            Err(ProviderError::NotFound(_)) if known.is_some() => {
                return Err(ProviderError::NotFound(format!(
                    "the IP {} (spec.address or status.address) is not at the provider",
                    known.unwrap_or_default()
                ))
                .into());
            }
            r => r?,
        };
        if known.is_none() {
            info!(routed_ip = %name, address = %observed.ip.address, "routed IP found or created");
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let node_name = |p: &String| (d.node_of)(p).unwrap_or_else(|| p.clone());
        // The provider's holder is the truth: an operator killed after the provider
        // moved the IP but before the status said so left the old node in the status.
        let holder = observed.ip.assigned_to.as_ref().map(node_name);
        if let Some(f) = decide::follow_provider(
            &st,
            &observed.ip.address,
            holder.as_deref(),
            rip.spec.cooldown_seconds,
            now,
        ) {
            if let Some(note) = f.corrected {
                info!(routed_ip = %name, "{note}");
                self.recorder
                    .tell(
                        rip,
                        EventType::Normal,
                        "Failover",
                        events::HOLDER_CORRECTED,
                        note,
                    )
                    .await;
            }
            // Recorded before it is assigned anywhere.
            self.write_status(rip, &st, &f.status).await?;
            st = f.status;
        }
        let lost = cooldown(&st.cooldown_until, rip.spec.cooldown_seconds);
        let elected = elect(
            d.candidates,
            holder.as_deref(),
            &lost,
            now.as_second(),
            rip.spec.cooldown_seconds,
        )
        .cloned();
        let desired = decide::desired(elected.as_ref(), d.firewall.clone(), d.ports.clone());
        let steps = plan(&observed, &desired);
        let fw = desired.firewall.clone().unwrap_or_default();
        let address = observed.ip.address.clone();
        for step in &steps {
            let before = st.clone();
            st.step = Some(step_name(step));
            self.write_status(rip, &before, &st).await?;
            let started = Instant::now();
            netpolicy_issuers::execute(issuer, &address, &fw, step).await?;
            self.metrics
                .step(decide::step_kind(step), started.elapsed());
            if let Step::Assign(n) = step {
                let node = node_name(n);
                let now = k8s_openapi::jiff::Timestamp::now();
                let cooldown = rip.spec.cooldown_seconds;
                if let Some(old) =
                    decide::assigned(&mut st, holder.as_deref(), &node, cooldown, now)
                {
                    self.metrics.failover();
                    info!(routed_ip = %name, from = %old, to = %node, %address, "routed IP moved");
                }
            }
            self.recorder
                .tell(
                    rip,
                    EventType::Normal,
                    "Failover",
                    events::FAILOVER_STEP,
                    format!("{} ({address})", step_name(step)),
                )
                .await;
        }
        if steps.is_empty() {
            st.node.clone_from(&holder);
        }
        // Cooldowns that are over are dropped by decide::finished.
        Ok((st, elected.map(|c| c.name)))
    }

    async fn tags(&self, name: &str) -> Tags {
        Tags {
            cluster: self.cluster().await.to_owned(),
            routed_ip: name.to_owned(),
        }
    }

    /// The cluster's identity for the provider-side labels (read once).
    async fn cluster(&self) -> &str {
        self.cluster
            .get_or_init(|| async {
                let uid = Api::<Namespace>::all(self.client.clone())
                    .get("kube-system")
                    .await
                    .ok()
                    .and_then(|n| n.metadata.uid)
                    .unwrap_or_else(|| "netpolicy".into());
                info!(cluster = %uid, "routed IPs: the cluster's identity at providers");
                uid
            })
            .await
    }

    /// Writes `next` over `cached` (the RoutedIP as the cache holds it) when it differs
    /// from `current`, and not again while the cache still holds the version it was
    /// written over.
    async fn write_status(
        &self,
        cached: &RoutedIP,
        current: &RoutedIPStatus,
        next: &RoutedIPStatus,
    ) -> Result<(), kube::Error> {
        let name = cached.name_any();
        let ready = next
            .conditions
            .iter()
            .any(|c| c.type_ == conditions::READY && c.status == conditions::STATUS_TRUE);
        if current != next {
            debug!(routed_ip = name, step = ?next.step, "routed IP: status");
            let api = Api::<RoutedIP>::all(self.client.clone());
            self.sent
                .apply_status(&api, FIELD_MANAGER, cached, next)
                .await?;
        }
        self.metrics.ready(&name, Some(ready));
        Ok(())
    }
}

/// What [`Context::drive`] needs of one RoutedIP.
struct Drive<'a> {
    rip: &'a RoutedIP,
    candidates: &'a [Candidate],
    /// The name of the node with a provider ID.
    node_of: &'a (dyn Fn(&str) -> Option<String> + Send + Sync),
    firewall: Option<String>,
    ports: BTreeSet<netpolicy_issuers::PortRule>,
}
