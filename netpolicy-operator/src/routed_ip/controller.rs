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

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        core::v1::{Namespace, Secret, Service},
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
    AnyIssuer, Candidate, Desired, Error as ProviderError, Issuer, Step, Tags,
    aws::AwsIssuer as AwsClient, digitalocean::DigitalOceanIssuer, hetzner::HetznerIssuer,
    memory::MemoryIssuer, plan,
};
use tracing::{debug, info, warn};

use super::{candidate, cooldown, elect, endpoint_nodes, port_status, service_ports, step_name};
use crate::{
    api::{
        ReclaimPolicy, RoutedIP, RoutedIPIssuer, RoutedIPIssuerStatus, RoutedIPStatus,
        conditions::{self, events, routed_ip as rc},
    },
    k8s::{CachedNode, FIELD_MANAGER, NodeFacts, condition, spec_fingerprint},
    runtime::{ErrorClass, Informers, Next, ObjectJob, ObjectSetup, informer::lock, per_object},
    telemetry::Shared,
};

/// The finalizer that holds a RoutedIP until its IP is released.
pub(crate) const FINALIZER: &str = "netpolicy.io/routed-ip";

/// The spec's generation and whether deletion began (the finalizer's cue).
fn generation_fingerprint<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        spec_fingerprint(o),
        o.meta().deletion_timestamp.is_some()
    )
}

/// What of a Node election reads.
fn node_fingerprint(n: &CachedNode) -> String {
    let f = NodeFacts::of(n, false);
    format!(
        "{}|{:?}|{:?}|{}|{}|{}",
        n.uid().unwrap_or_default(),
        f.labels,
        f.provider_id,
        f.ready,
        f.unschedulable,
        f.tainted()
    )
}

fn slice_fingerprint(s: &EndpointSlice) -> String {
    let mut eps: Vec<(Option<&String>, Option<bool>)> = s
        .endpoints
        .iter()
        .map(|e| {
            (
                e.node_name.as_ref(),
                e.conditions.as_ref().and_then(|c| c.ready),
            )
        })
        .collect();
    eps.sort();
    format!("{:?}|{eps:?}", s.labels().get("kubernetes.io/service-name"))
}

fn service_fingerprint(s: &Service) -> String {
    format!("{:?}", service_ports(s))
}

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
        format!("{}|{:?}", generation_fingerprint(r), r.metadata.finalizers)
    })
    // Election reads every Node: any change that matters re-checks every RoutedIP (each
    // is cheap while settled: no provider call).
    .related(&nodes, node_fingerprint, move |_| {
        per_object::all(&for_nodes)
    })
    .related(&slices, slice_fingerprint, move |s: EndpointSlice| {
        let ns = s.namespace().unwrap_or_default();
        let svc = s.labels().get("kubernetes.io/service-name").cloned();
        serving(&for_slices, &ns, svc.as_deref())
    })
    .related(&services, service_fingerprint, move |s: Service| {
        serving(
            &for_services,
            &s.namespace().unwrap_or_default(),
            Some(&s.name_any()),
        )
    })
    .related(
        &issuers,
        generation_fingerprint,
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
        generation_fingerprint,
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
            ctx.metrics.provider_error(kind_of(p));
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
        let g = issuer.metadata.generation;
        let st = match &listed {
            Ok(ips) => {
                let orphans: Vec<String> = ips
                    .iter()
                    .filter(|(_, rip)| !routed_ips.contains(rip))
                    .map(|(ip, rip)| format!("{} (RoutedIP {rip})", ip.address))
                    .collect();
                let before = lock(&self.orphans).get(&name).cloned().unwrap_or_default();
                let new: Vec<&String> = orphans.iter().filter(|o| !before.contains(o)).collect();
                if !new.is_empty() {
                    let note = format!(
                        "IPs tagged for this cluster whose RoutedIP is gone (left at the \
                         provider): {}",
                        new.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
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
                let orphan_condition = if orphans.is_empty() {
                    condition(
                        &cur.conditions,
                        rc::ORPHANS,
                        false,
                        rc::NONE,
                        "no orphaned IP".into(),
                        g,
                        &now,
                    )
                } else {
                    condition(
                        &cur.conditions,
                        rc::ORPHANS,
                        true,
                        rc::ORPHANED,
                        format!(
                            "tagged for this cluster, RoutedIP gone (never deleted by netpolicy; delete them \
                             at the provider or adopt them with spec.address): {}",
                            orphans.join(", ")
                        ),
                        g,
                        &now,
                    )
                };
                lock(&self.orphans).insert(name.clone(), orphans);
                RoutedIPIssuerStatus {
                    conditions: vec![
                        condition(
                            &cur.conditions,
                            conditions::READY,
                            true,
                            rc::READY,
                            "the token is readable and the provider answers".into(),
                            g,
                            &now,
                        ),
                        orphan_condition,
                    ],
                }
            }
            Err(message) => {
                let mut st = cur.clone();
                st.conditions.retain(|c| c.type_ != conditions::READY);
                st.conditions.insert(
                    0,
                    condition(
                        &cur.conditions,
                        conditions::READY,
                        false,
                        rc::ISSUER_UNAVAILABLE,
                        message.clone(),
                        g,
                        &now,
                    ),
                );
                st
            }
        };
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
        let mut st = cur.clone();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        st.conditions = vec![condition(
            &cur.conditions,
            conditions::READY,
            false,
            reason,
            message,
            rip.metadata.generation,
            &now,
        )];
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
        // Only selected nodes can be elected: the others are never candidates (at
        // 10,000 nodes, a list of every node per RoutedIP reconcile was 10,000 label
        // maps copied, times the reconciles in flight).
        let no_labels = BTreeMap::new();
        let candidates: Vec<Candidate> = self
            .nodes
            .state()
            .iter()
            .filter(|n| selector.matches(n.metadata.labels.as_ref().unwrap_or(&no_labels)))
            .map(|n| {
                let f = NodeFacts::of(n, false);
                let has = with_endpoint.as_ref().is_none_or(|s| s.contains(&f.name));
                candidate(&f, &selector, has)
            })
            .collect();
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
        let ready = cur.conditions.iter().any(|c| {
            c.type_ == conditions::READY
                && c.status == conditions::STATUS_TRUE
                && c.observed_generation == rip.metadata.generation
        });
        let settled = cur.address.is_some()
            && cur.step.is_none()
            && ready
            && cur.node == elected.as_ref().map(|c| c.name.clone())
            && cur.firewall == firewall
            && cur.ports == port_status(&ports);
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
        let (mut st, elected) = self.drive(&*provider, &ctx).await?;
        lock(&self.checked).insert(name.clone(), Instant::now());
        st.firewall = firewall;
        st.ports = port_status(&ports);
        st.step = None;
        let t = Time(k8s_openapi::jiff::Timestamp::now());
        st.conditions = vec![match &elected {
            Some(c) => condition(
                &cur.conditions,
                conditions::READY,
                true,
                rc::SETTLED,
                format!("{} on {}", st.address.as_deref().unwrap_or_default(), c),
                rip.metadata.generation,
                &t,
            ),
            None => condition(
                &cur.conditions,
                conditions::READY,
                false,
                rc::NO_CANDIDATE,
                "no node may hold the IP (Ready, schedulable, untainted, selected, with a \
                 provider ID and, with serviceRef, a ready endpoint): it stays where it is"
                    .into(),
                rip.metadata.generation,
                &t,
            ),
        }];
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
        if st.address.as_deref() != Some(observed.ip.address.as_str())
            || (holder.is_some() && holder != st.node)
        {
            let before = st.clone();
            st.address = Some(observed.ip.address.clone());
            if let (Some(old), Some(new)) = (&st.node, &holder)
                && old != new
            {
                let until = now
                    + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(
                        rip.spec.cooldown_seconds,
                    ));
                st.cooldown_until.insert(old.clone(), until.to_string());
                let note = format!(
                    "{} is on {new} at the provider, not on {old} as the status said (a move \
                     finished while no operator watched): the status follows, {old} cools down",
                    observed.ip.address
                );
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
            if holder.is_some() {
                st.node.clone_from(&holder);
            }
            // Recorded before it is assigned anywhere.
            self.write_status(rip, &before, &st).await?;
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
        let desired = Desired {
            node: elected.as_ref().and_then(|c| c.provider_id.clone()),
            firewall: d.firewall.clone(),
            ports: d.ports.clone(),
        };
        let steps = plan(&observed, &desired);
        let fw = desired.firewall.clone().unwrap_or_default();
        let address = observed.ip.address.clone();
        for step in &steps {
            let before = st.clone();
            st.step = Some(step_name(step));
            self.write_status(rip, &before, &st).await?;
            let started = Instant::now();
            netpolicy_issuers::execute(issuer, &address, &fw, step).await?;
            self.metrics.step(step_kind(step), started.elapsed());
            if let Step::Assign(n) = step {
                let node = node_name(n);
                if let Some(old) = &holder
                    && *old != node
                {
                    let until = k8s_openapi::jiff::Timestamp::now()
                        + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(
                            rip.spec.cooldown_seconds,
                        ));
                    st.cooldown_until.insert(old.clone(), until.to_string());
                    self.metrics.failover();
                    info!(routed_ip = %name, from = %old, to = %node, %address, "routed IP moved");
                }
                st.node = Some(node);
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
        // Cooldowns that are over are dropped.
        let now = k8s_openapi::jiff::Timestamp::now();
        st.cooldown_until.retain(|_, t| {
            t.parse::<k8s_openapi::jiff::Timestamp>()
                .is_ok_and(|t| t > now)
        });
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

    /// The provider client of `issuer`, made (its token read) when the issuer changed.
    async fn provider(&self, issuer: &RoutedIPIssuer) -> Result<Arc<AnyIssuer>, Failed> {
        let name = issuer.name_any();
        if let Some((g, p)) = lock(&self.providers).get(&name)
            && *g == issuer.metadata.generation
        {
            return Ok(Arc::clone(p));
        }
        let token = |r: &crate::api::SecretKeyRef, field: &str| {
            let key = r.key.clone().unwrap_or_else(|| "token".into());
            let (namespace, name) = (r.namespace.clone(), r.name.clone());
            let field = field.to_owned();
            async move {
                self.secret_value(&namespace, &name, &key, &field)
                    .await?
                    .ok_or_else(|| {
                        Failed::Issuer(format!(
                            "{field}: Secret {namespace}/{name} has no key {key:?}"
                        ))
                    })
            }
        };
        let provider = if let Some(a) = &issuer.spec.aws {
            AnyIssuer::Aws(self.aws_client(a).await?.with_vpc(a.vpc_id.clone()))
        } else if let Some(h) = &issuer.spec.hetzner {
            let t = token(&h.token_secret_ref, "spec.hetzner.tokenSecretRef").await?;
            let base = h
                .endpoint
                .clone()
                .unwrap_or_else(|| "https://api.hetzner.cloud/v1".into());
            AnyIssuer::Hetzner(HetznerIssuer::with_base_url(base, t, &h.location)?)
        } else if let Some(d) = &issuer.spec.digitalocean {
            let t = token(&d.token_secret_ref, "spec.digitalocean.tokenSecretRef").await?;
            let base = d
                .endpoint
                .clone()
                .unwrap_or_else(|| "https://api.digitalocean.com/v2".into());
            AnyIssuer::DigitalOcean(DigitalOceanIssuer::with_base_url(base, t, &d.region)?)
        } else if issuer.spec.memory.is_some() {
            AnyIssuer::Memory(Arc::clone(
                lock(&self.memory)
                    .entry(name.clone())
                    .or_insert_with(|| Arc::new(MemoryIssuer::new())),
            ))
        } else {
            return Err(Failed::Issuer(
                "spec: a RoutedIPIssuer names exactly one provider".into(),
            ));
        };
        let p = Arc::new(provider);
        lock(&self.providers).insert(name, (issuer.metadata.generation, Arc::clone(&p)));
        Ok(p)
    }

    /// One key of a Secret (trimmed), `None` when the Secret lacks it; an unreadable
    /// Secret or a value that is not UTF-8 is an error naming `field`.
    async fn secret_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        field: &str,
    ) -> Result<Option<String>, Failed> {
        let api = Api::<Secret>::namespaced(self.client.clone(), namespace);
        let secret = api.get(name).await.map_err(|e| {
            Failed::Issuer(format!(
                "{field}: Secret {namespace}/{name} cannot be read: {e}"
            ))
        })?;
        let Some(bytes) = secret.data.and_then(|mut d| d.remove(key)) else {
            return Ok(None);
        };
        String::from_utf8(bytes.0)
            .map(|t| Some(t.trim().to_owned()))
            .map_err(|_| Failed::Issuer(format!("{field}: {key} is not UTF-8")))
    }

    /// An AWS client: keys from `credentialsSecretRef`, else the AWS SDK's default chain
    /// (IRSA, EKS pod identity, IMDSv2, environment).
    async fn aws_client(&self, a: &crate::api::AwsIssuer) -> Result<AwsClient, Failed> {
        let endpoint = a.endpoint.as_deref();
        let Some(r) = &a.credentials_secret_ref else {
            return Ok(AwsClient::from_default_chain(&a.region, endpoint).await?);
        };
        let field = "spec.aws.credentialsSecretRef";
        let required = |key: &'static str| async move {
            self.secret_value(&r.namespace, &r.name, key, field)
                .await?
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    Failed::Issuer(format!(
                        "{field}: Secret {}/{} has no key {key:?}",
                        r.namespace, r.name
                    ))
                })
        };
        let id = required("aws_access_key_id").await?;
        let secret = required("aws_secret_access_key").await?;
        let session = self
            .secret_value(&r.namespace, &r.name, "aws_session_token", field)
            .await?
            .filter(|v| !v.is_empty());
        Ok(AwsClient::with_credentials(
            &a.region, endpoint, id, secret, session,
        )?)
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

/// A provider client and the issuer generation it was made for.
type Made = (Option<i64>, Arc<AnyIssuer>);

/// What [`Context::drive`] needs of one RoutedIP.
struct Drive<'a> {
    rip: &'a RoutedIP,
    candidates: &'a [Candidate],
    /// The name of the node with a provider ID.
    node_of: &'a (dyn Fn(&str) -> Option<String> + Send + Sync),
    firewall: Option<String>,
    ports: BTreeSet<netpolicy_issuers::PortRule>,
}

fn kind_of(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::NotFound(_) => "not_found",
        ProviderError::Conflict(_) => "conflict",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::Unauthorized(_) => "unauthorized",
        ProviderError::LimitExceeded(_) => "limit_exceeded",
        ProviderError::Unreachable(_) => "unreachable",
        ProviderError::Provider(_) => "provider",
    }
}

fn step_kind(s: &Step) -> &'static str {
    match s {
        Step::CreateFirewall => "createFirewall",
        Step::AddPort(_) => "addPort",
        Step::AddNode(_) => "addNode",
        Step::Assign(_) => "assign",
        Step::RemovePort(_) => "removePort",
        Step::RemoveNode(_) => "removeNode",
    }
}
