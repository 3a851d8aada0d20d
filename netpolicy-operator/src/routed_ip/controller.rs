//! The routed-IP controller: RoutedIPIssuers, RoutedIPs, Nodes, Services and their
//! EndpointSlices → cloud IPs on elected nodes, with the cloud firewall kept in step
//! (docs/architecture.md, RoutedIP; election and the failover plan are netpolicy-issuers').
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
//! - A 429 waits the provider's `Retry-After` for that RoutedIP only; other errors back
//!   off per RoutedIP (2 s doubling to 60 s) and show in the `Ready` condition.
//! - Every resync, each issuer's IPs tagged for this cluster (Hetzner labels) are
//!   listed: one whose RoutedIP is gone is an orphan, shown in the issuer's `Orphans`
//!   condition and a Warning Event, and never deleted (a `Retain`ed IP is one).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::{
    api::{
        core::v1::{Namespace, Node, Secret, Service},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        reflector::{self, ObjectRef, Store},
    },
};
use netpolicy_issuers::{
    Candidate, Desired, Error as ProviderError, Issuer, Observed, Step, Tags,
    digitalocean::DigitalOceanIssuer, hetzner::HetznerIssuer, memory::MemoryIssuer, plan,
};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::{candidate, cooldown, elect, endpoint_nodes, port_status, service_ports, step_name};
use crate::{
    api::{
        ReclaimPolicy, RoutedIP, RoutedIPIssuer, RoutedIPIssuerStatus, RoutedIPStatus,
        conditions::{self, routed_ip as rc},
    },
    k8s::{FIELD_MANAGER, NodeFacts, Wake, apply_status, condition, spec_fingerprint, watched},
    telemetry::Shared,
};

/// The finalizer that holds a RoutedIP until its IP is released.
pub const FINALIZER: &str = "netpolicy.io/routed-ip";

/// The spec's generation and whether deletion began (the finalizer's cue).
fn generation_fingerprint<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        spec_fingerprint(o),
        o.meta().deletion_timestamp.is_some()
    )
}

/// What of a Node election reads.
fn node_fingerprint(n: &Node) -> String {
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

/// A provider client, whichever the issuer names.
enum Provider {
    Hetzner(HetznerIssuer),
    DigitalOcean(DigitalOceanIssuer),
    Memory(Arc<MemoryIssuer>),
}

/// Why one RoutedIP could not be driven.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Provider(#[from] ProviderError),
    /// The issuer or its token is unusable (the message says which field).
    #[error("{0}")]
    Issuer(String),
}

/// Runs the routed-IP controller until `stop` turns true.
///
/// # Errors
/// Only when a watch's cache was dropped before it synced.
pub async fn run(
    client: Client,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    resync: Duration,
) -> Result<(), reflector::store::WriterDropped> {
    let wake = Wake::new();
    let (issuers, s1) = watched(
        Api::<RoutedIPIssuer>::all(client.clone()),
        wake.clone(),
        generation_fingerprint,
        None,
    );
    let (rips, s2) = watched(
        Api::<RoutedIP>::all(client.clone()),
        wake.clone(),
        generation_fingerprint,
        None,
    );
    let (nodes, s3) = watched(
        Api::<Node>::all(client.clone()),
        wake.clone(),
        node_fingerprint,
        None,
    );
    let (slices, s4) = watched(
        Api::<EndpointSlice>::all(client.clone()),
        wake.clone(),
        slice_fingerprint,
        None,
    );
    let (services, s5) = watched(
        Api::<Service>::all(client.clone()),
        wake.clone(),
        service_fingerprint,
        None,
    );
    let drive =
        tokio::spawn(futures::stream::select_all([s1, s2, s3, s4, s5]).for_each(|()| async {}));
    let synced = async {
        issuers.wait_until_ready().await?;
        rips.wait_until_ready().await?;
        nodes.wait_until_ready().await?;
        slices.wait_until_ready().await?;
        services.wait_until_ready().await
    };
    tokio::select! {
        r = synced => r?,
        _ = stop.changed() => { drive.abort(); return Ok(()); }
    }
    // The cluster's identity for the provider-side labels: the kube-system Namespace's
    // UID (stable for the cluster's life, the same in every operator replica).
    let cluster = Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .ok()
        .and_then(|n| n.metadata.uid)
        .unwrap_or_else(|| "netpolicy".into());
    info!(%cluster, "caches synced: routed-IP controller running");
    let mut job = Job {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "netpolicy-operator".into(),
                instance: None,
            },
        ),
        client,
        shared: Arc::clone(&shared),
        cluster,
        issuers,
        rips,
        nodes,
        slices,
        services,
        providers: HashMap::new(),
        memory: HashMap::new(),
        not_before: HashMap::new(),
        backoff: HashMap::new(),
        last_error: HashMap::new(),
        checked: HashMap::new(),
        issuers_checked: HashMap::new(),
        resync,
    };
    loop {
        let _ = wake.take();
        let start = Instant::now();
        let wait = job.pass().await;
        shared
            .metrics
            .reconciled("routed-ip", start.elapsed(), true);
        tokio::select! {
            _ = stop.changed() => break,
            () = wake.notified() => {}
            () = tokio::time::sleep(wait.min(resync)) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drive.abort();
    info!("routed-IP controller stopped");
    Ok(())
}

struct Job {
    client: Client,
    recorder: Recorder,
    shared: Arc<Shared>,
    cluster: String,
    issuers: Store<RoutedIPIssuer>,
    rips: Store<RoutedIP>,
    nodes: Store<Node>,
    slices: Store<EndpointSlice>,
    services: Store<Service>,
    /// Provider clients by issuer name, with the issuer generation they were made for.
    providers: HashMap<String, (Option<i64>, Arc<Provider>)>,
    /// `memory` issuers' state (kept while the process lives).
    memory: HashMap<String, Arc<MemoryIssuer>>,
    /// RoutedIPs not to call the provider for before this time (rate limit, backoff).
    not_before: HashMap<String, Instant>,
    /// The current backoff per RoutedIP.
    backoff: HashMap<String, Duration>,
    /// The last error reported per RoutedIP (an Event only when it changes).
    last_error: HashMap<String, String>,
    /// When each RoutedIP was last checked at the provider (the resync).
    checked: HashMap<String, Instant>,
    /// When each issuer was last checked (token, orphans), and the orphans found.
    issuers_checked: HashMap<String, (Instant, Vec<String>)>,
    resync: Duration,
}

impl Job {
    /// One pass over every RoutedIP; returns when to look again.
    async fn pass(&mut self) -> Duration {
        let mut wait = self.resync;
        let rips = self.rips.state();
        let names: BTreeSet<String> = rips.iter().map(|r| r.name_any()).collect();
        self.not_before.retain(|k, _| names.contains(k));
        self.backoff.retain(|k, _| names.contains(k));
        self.checked.retain(|k, _| names.contains(k));
        self.last_error.retain(|k, _| names.contains(k));
        for rip in rips {
            let name = rip.name_any();
            if let Some(t) = self.not_before.get(&name)
                && *t > Instant::now()
            {
                wait = wait.min(*t - Instant::now());
                continue;
            }
            match self.one(&rip).await {
                Ok(()) => {
                    self.backoff.remove(&name);
                    self.not_before.remove(&name);
                    self.last_error.remove(&name);
                }
                Err(e) => {
                    let d = self.failed(&rip, &e).await;
                    wait = wait.min(d);
                }
            }
        }
        let issuers = self.issuers.state();
        let live: BTreeSet<String> = issuers.iter().map(|i| i.name_any()).collect();
        self.issuers_checked.retain(|k, _| live.contains(k));
        for issuer in issuers {
            let due = self
                .issuers_checked
                .get(&issuer.name_any())
                .is_none_or(|(t, _)| t.elapsed() >= self.resync);
            if due {
                self.check_issuer(&issuer, &names).await;
            }
        }
        wait
    }

    /// The issuer's status: `Ready` (its token was read and the provider answered a
    /// listing) and `Orphans` (IPs tagged for this cluster whose RoutedIP is gone).
    async fn check_issuer(&mut self, issuer: &RoutedIPIssuer, routed_ips: &BTreeSet<String>) {
        let name = issuer.name_any();
        let listed = match self.provider(issuer).await {
            Ok(p) => match &*p {
                Provider::Hetzner(i) => i.tagged_ips(&self.cluster).await,
                Provider::DigitalOcean(i) => i.tagged_ips(&self.cluster).await,
                Provider::Memory(i) => i.tagged_ips(&self.cluster).await,
            }
            .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
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
                let before = self
                    .issuers_checked
                    .get(&name)
                    .map(|(_, o)| o.clone())
                    .unwrap_or_default();
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
                self.issuers_checked
                    .insert(name.clone(), (Instant::now(), orphans));
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
                self.issuers_checked.insert(
                    name.clone(),
                    (
                        Instant::now(),
                        self.issuers_checked
                            .get(&name)
                            .map(|(_, o)| o.clone())
                            .unwrap_or_default(),
                    ),
                );
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
            return;
        }
        let api = Api::<RoutedIPIssuer>::all(self.client.clone());
        if let Err(e) = apply_status(&api, FIELD_MANAGER, &name, &st).await {
            warn!(error = %e, "routed IP issuer: status not written");
        }
    }

    /// Reports a failure (status condition; Event and log when it changed) and returns
    /// when to try this RoutedIP again.
    async fn failed(&mut self, rip: &RoutedIP, e: &Failed) -> Duration {
        let name = rip.name_any();
        let (reason, delay) = match e {
            Failed::Provider(ProviderError::RateLimited { retry_after }) => {
                self.shared.metrics.routed_ip_rate_limited();
                (rc::RATE_LIMITED, Duration::from_secs((*retry_after).max(1)))
            }
            Failed::Provider(ProviderError::NotFound(_))
                if rip.status.as_ref().is_none_or(|s| s.address.is_none()) =>
            {
                (rc::NOT_FOUND, self.next_backoff(&name))
            }
            Failed::Issuer(_) => (rc::ISSUER_UNAVAILABLE, self.next_backoff(&name)),
            _ => (rc::PROVIDER_ERROR, self.next_backoff(&name)),
        };
        if let Failed::Provider(p) = e {
            self.shared.metrics.routed_ip_provider_error(kind_of(p));
            if matches!(p, ProviderError::Unauthorized(_)) {
                // Read the token again next time.
                self.providers.remove(&rip.spec.issuer_ref.name);
            }
        }
        self.not_before.insert(name.clone(), Instant::now() + delay);
        let message = format!("{e}");
        if self.last_error.get(&name) != Some(&message) {
            warn!(routed_ip = %name, error = %message, "routed IP: retrying in {delay:?}");
            self.event(rip, EventType::Warning, reason, message.clone())
                .await;
            self.last_error.insert(name.clone(), message.clone());
        }
        let cur = rip.status.clone().unwrap_or_default();
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
        if let Err(e) = self.write_status(&name, &cur, &st).await {
            warn!(routed_ip = %name, error = %e, "routed IP: status not written");
        }
        delay
    }

    fn next_backoff(&mut self, name: &str) -> Duration {
        let d = self.backoff.get(name).map_or(Duration::from_secs(2), |d| {
            (*d * 2).min(Duration::from_secs(60))
        });
        self.backoff.insert(name.to_owned(), d);
        d
    }

    /// One RoutedIP.
    async fn one(&mut self, rip: &RoutedIP) -> Result<(), Failed> {
        let name = rip.name_any();
        let api = Api::<RoutedIP>::all(self.client.clone());
        let issuer = self.issuers.get(&ObjectRef::new(&rip.spec.issuer_ref.name));
        if rip.metadata.deletion_timestamp.is_some() {
            if !rip.finalizers().iter().any(|f| f == FINALIZER) {
                return Ok(());
            }
            match &issuer {
                Some(issuer) => {
                    let provider = self.provider(issuer).await?;
                    let tags = self.tags(&name);
                    let address = rip
                        .status
                        .as_ref()
                        .and_then(|s| s.address.clone())
                        .or_else(|| rip.spec.address.clone());
                    let policy = match rip.spec.reclaim_policy {
                        ReclaimPolicy::Retain => netpolicy_issuers::ReclaimPolicy::Retain,
                        ReclaimPolicy::Delete => netpolicy_issuers::ReclaimPolicy::Delete,
                    };
                    match &*provider {
                        Provider::Hetzner(i) => {
                            netpolicy_issuers::release(i, &tags, address.as_deref(), policy)
                                .await?;
                        }
                        Provider::DigitalOcean(i) => {
                            netpolicy_issuers::release(i, &tags, address.as_deref(), policy)
                                .await?;
                        }
                        Provider::Memory(i) => {
                            netpolicy_issuers::release(&**i, &tags, address.as_deref(), policy)
                                .await?;
                        }
                    }
                    info!(routed_ip = %name, ?policy, ?address, "routed IP released");
                }
                None => {
                    self.event(
                        rip,
                        EventType::Warning,
                        rc::ISSUER_UNAVAILABLE,
                        format!(
                            "issuer {} is gone: the IP {:?} is left at the provider as it is",
                            rip.spec.issuer_ref.name,
                            rip.status.as_ref().and_then(|s| s.address.clone())
                        ),
                    )
                    .await;
                }
            }
            let rest: Vec<String> = rip
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER)
                .cloned()
                .collect();
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": rest}})),
            )
            .await?;
            return Ok(());
        }
        let Some(issuer) = issuer else {
            return Err(Failed::Issuer(format!(
                "spec.issuerRef.name: RoutedIPIssuer {} does not exist",
                rip.spec.issuer_ref.name
            )));
        };
        if !rip.finalizers().iter().any(|f| f == FINALIZER) {
            let mut all: Vec<String> = rip.finalizers().to_vec();
            all.push(FINALIZER.into());
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": all}})),
            )
            .await?;
        }
        // Election, ports and firewall from the caches.
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
        let candidates: Vec<Candidate> = self
            .nodes
            .state()
            .iter()
            .map(|n| {
                let f = NodeFacts::of(n, false);
                let has = with_endpoint.as_ref().is_none_or(|s| s.contains(&f.name));
                candidate(&f, &selector, has)
            })
            .collect();
        let lost = cooldown(&cur.cooldown_until, rip.spec.cooldown_seconds);
        let elected = elect(
            &candidates,
            cur.node.as_deref(),
            &lost,
            now.as_second(),
            rip.spec.cooldown_seconds,
        )
        .cloned();
        let firewall = issuer.spec.firewall.as_ref().map(|f| f.name.clone());
        let ready = cur.conditions.iter().any(|c| {
            c.type_ == conditions::READY
                && c.status == "True"
                && c.observed_generation == rip.metadata.generation
        });
        let settled = cur.address.is_some()
            && cur.step.is_none()
            && ready
            && cur.node == elected.as_ref().map(|c| c.name.clone())
            && cur.firewall == firewall
            && cur.ports == port_status(&ports);
        let fresh = self
            .checked
            .get(&name)
            .is_some_and(|t| t.elapsed() < self.resync);
        if settled && fresh {
            return Ok(());
        }
        // To the provider.
        let provider = self.provider(&issuer).await?;
        let desired = Desired {
            node: elected.as_ref().and_then(|c| c.provider_id.clone()),
            firewall: firewall.clone(),
            ports: ports.clone(),
        };
        let by_provider_id: BTreeMap<String, String> = candidates
            .iter()
            .filter_map(|c| Some((c.provider_id.clone()?, c.name.clone())))
            .collect();
        let r = match &*provider {
            Provider::Hetzner(i) => self.drive(i, rip, &desired, &by_provider_id).await,
            Provider::DigitalOcean(i) => self.drive(i, rip, &desired, &by_provider_id).await,
            Provider::Memory(i) => self.drive(&**i, rip, &desired, &by_provider_id).await,
        }?;
        self.checked.insert(name.clone(), Instant::now());
        let mut st = r;
        st.firewall = firewall;
        st.ports = port_status(&ports);
        st.step = None;
        let t = Time(now);
        st.conditions = vec![match &elected {
            Some(c) => condition(
                &cur.conditions,
                conditions::READY,
                true,
                rc::SETTLED,
                format!(
                    "{} on {}",
                    st.address.as_deref().unwrap_or_default(),
                    c.name
                ),
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
        self.write_status(&name, &cur, &st).await?;
        Ok(())
    }

    /// Finds or creates the IP (recording its address first), then carries out the
    /// failover plan step by step, each shown in the status before it runs. Returns the
    /// status as it stands after the last step.
    async fn drive<I: Issuer>(
        &self,
        issuer: &I,
        rip: &RoutedIP,
        desired: &Desired,
        by_provider_id: &BTreeMap<String, String>,
    ) -> Result<RoutedIPStatus, Failed> {
        let name = rip.name_any();
        let tags = self.tags(&name);
        let mut st = rip.status.clone().unwrap_or_default();
        let known = st.address.clone().or_else(|| rip.spec.address.clone());
        let ip = match issuer.find_ip(known.as_deref(), &tags).await? {
            Some(ip) => ip,
            None if known.is_some() => {
                return Err(ProviderError::NotFound(format!(
                    "the IP {} (spec.address or status.address) is not at the provider",
                    known.unwrap_or_default()
                ))
                .into());
            }
            None => {
                let ip = issuer.create_ip(&tags).await?;
                info!(routed_ip = %name, address = %ip.address, "routed IP created");
                ip
            }
        };
        if st.address.as_deref() != Some(ip.address.as_str()) {
            // Recorded before it is assigned anywhere.
            let before = st.clone();
            st.address = Some(ip.address.clone());
            self.write_status(&name, &before, &st).await?;
        }
        let firewall = match &desired.firewall {
            Some(f) => issuer.find_firewall(f).await?,
            None => None,
        };
        let holder_before = ip.assigned_to.clone();
        let observed = Observed { ip, firewall };
        let steps = plan(&observed, desired);
        let fw = desired.firewall.clone().unwrap_or_default();
        let address = observed.ip.address.clone();
        for step in &steps {
            let before = st.clone();
            st.step = Some(step_name(step));
            self.write_status(&name, &before, &st).await?;
            let started = Instant::now();
            match step {
                Step::CreateFirewall => issuer.create_firewall(&fw).await?,
                Step::AddPort(p) => issuer.add_port(&fw, p).await?,
                Step::AddNode(n) => issuer.add_node(&fw, n).await?,
                Step::Assign(n) => issuer.assign(&address, n).await?,
                Step::RemovePort(p) => issuer.remove_port(&fw, p).await?,
                Step::RemoveNode(n) => issuer.remove_node(&fw, n).await?,
            }
            self.shared
                .metrics
                .routed_ip_step(step_kind(step), started.elapsed());
            if let Step::Assign(n) = step {
                let node = by_provider_id.get(n).cloned().unwrap_or_else(|| n.clone());
                if let Some(old) = &holder_before
                    && old != n
                {
                    let old_name = by_provider_id
                        .get(old)
                        .cloned()
                        .unwrap_or_else(|| old.clone());
                    let until = k8s_openapi::jiff::Timestamp::now()
                        + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(
                            rip.spec.cooldown_seconds,
                        ));
                    st.cooldown_until
                        .insert(old_name.clone(), until.to_string());
                    self.shared.metrics.routed_ip_failover();
                    info!(routed_ip = %name, from = %old_name, to = %node, %address, "routed IP moved");
                }
                st.node = Some(node);
            }
            self.event(
                rip,
                EventType::Normal,
                "FailoverStep",
                format!("{} ({address})", step_name(step)),
            )
            .await;
        }
        if steps.is_empty() {
            st.node = observed
                .ip
                .assigned_to
                .as_ref()
                .map(|p| by_provider_id.get(p).cloned().unwrap_or_else(|| p.clone()));
        }
        // Cooldowns that are over are dropped.
        let now = k8s_openapi::jiff::Timestamp::now();
        st.cooldown_until.retain(|_, t| {
            t.parse::<k8s_openapi::jiff::Timestamp>()
                .is_ok_and(|t| t > now)
        });
        Ok(st)
    }

    fn tags(&self, name: &str) -> Tags {
        Tags {
            cluster: self.cluster.clone(),
            routed_ip: name.to_owned(),
        }
    }

    /// The provider client of `issuer`, made (its token read) when the issuer changed.
    async fn provider(&mut self, issuer: &RoutedIPIssuer) -> Result<Arc<Provider>, Failed> {
        let name = issuer.name_any();
        if let Some((g, p)) = self.providers.get(&name)
            && *g == issuer.metadata.generation
        {
            return Ok(Arc::clone(p));
        }
        let token = |r: &crate::api::SecretKeyRef, field: &str| {
            let api = Api::<Secret>::namespaced(self.client.clone(), &r.namespace);
            let r = r.clone();
            let field = field.to_owned();
            async move {
                let key = r.key.clone().unwrap_or_else(|| "token".into());
                let secret = api.get(&r.name).await.map_err(|e| {
                    Failed::Issuer(format!(
                        "{field}: Secret {}/{} cannot be read: {e}",
                        r.namespace, r.name
                    ))
                })?;
                let bytes = secret
                    .data
                    .and_then(|d| d.get(&key).map(|b| b.0.clone()))
                    .ok_or_else(|| {
                        Failed::Issuer(format!(
                            "{field}: Secret {}/{} has no key {key:?}",
                            r.namespace, r.name
                        ))
                    })?;
                String::from_utf8(bytes)
                    .map(|t| t.trim().to_owned())
                    .map_err(|_| Failed::Issuer(format!("{field}: the token is not UTF-8")))
            }
        };
        let provider = if let Some(h) = &issuer.spec.hetzner {
            let t = token(&h.token_secret_ref, "spec.hetzner.tokenSecretRef").await?;
            let base = h
                .endpoint
                .clone()
                .unwrap_or_else(|| "https://api.hetzner.cloud/v1".into());
            Provider::Hetzner(HetznerIssuer::with_base_url(base, t, &h.location)?)
        } else if let Some(d) = &issuer.spec.digitalocean {
            let t = token(&d.token_secret_ref, "spec.digitalocean.tokenSecretRef").await?;
            let base = d
                .endpoint
                .clone()
                .unwrap_or_else(|| "https://api.digitalocean.com/v2".into());
            Provider::DigitalOcean(DigitalOceanIssuer::with_base_url(base, t, &d.region)?)
        } else if issuer.spec.memory.is_some() {
            Provider::Memory(Arc::clone(
                self.memory
                    .entry(name.clone())
                    .or_insert_with(|| Arc::new(MemoryIssuer::new())),
            ))
        } else {
            return Err(Failed::Issuer(
                "spec: a RoutedIPIssuer names exactly one provider".into(),
            ));
        };
        let p = Arc::new(provider);
        self.providers
            .insert(name, (issuer.metadata.generation, Arc::clone(&p)));
        Ok(p)
    }

    async fn write_status(
        &self,
        name: &str,
        current: &RoutedIPStatus,
        next: &RoutedIPStatus,
    ) -> Result<(), kube::Error> {
        if current == next {
            return Ok(());
        }
        debug!(routed_ip = name, step = ?next.step, "routed IP: status");
        let api = Api::<RoutedIP>::all(self.client.clone());
        apply_status(&api, FIELD_MANAGER, name, next)
            .await
            .map(|_| ())
    }

    async fn event(&self, rip: &RoutedIP, type_: EventType, reason: &str, note: String) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Failover".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &rip.object_ref(&())).await {
            warn!(error = %e, "could not record an Event");
        }
    }
}

fn kind_of(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::NotFound(_) => "not_found",
        ProviderError::Conflict(_) => "conflict",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::Unauthorized(_) => "unauthorized",
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
