//! The floating-IP controller: FloatingIPRanges, FloatingIPs, Namespaces and
//! FloatingIPClaims → claims, statuses, auto-allocated FloatingIPs and kube-vip's
//! ConfigMaps (the rules are [`super::pass()`]).
//!
//! Shape: a global [`Job`] under the shared runner, because an allocation must know
//! every claim of its range and a kube-vip ConfigMap gathers a whole namespace's
//! addresses. Items that fail on their own (a kube-vip ConfigMap refused by an admission
//! policy, a guest cluster that does not answer) back off on their own, and their
//! FloatingIPs say `Published=False` meanwhile; the rest of the pass goes on.
//!
//! Guest clusters ([`super::guest`]): each is visited side by side with the others,
//! bounded in time: kube-vip installed when asked, its ConfigMap kept; visited again
//! every `intervalSeconds` (reads only when nothing changed) or after its backoff, on
//! the runner's timer.
//!
//! # Guarantees
//! - Nothing is allocated before every cache has synced: the claims in the API server
//!   are the record of what is allocated, and all of them are known first.
//! - An address is handed out only by creating its claim, named by the address: the
//!   API server refuses a second one, so two operator processes (a leader and a
//!   stale former leader, or a restart in a burst) never hand out one address twice.
//!   A refused create is not an allocation: the next pass sees the other claim.
//! - A crash between creating a claim and writing the FloatingIP's status loses
//!   nothing: the claim names its owner (with its uid), and the next pass, from the
//!   claims, writes the status. A claim whose owner is gone is released by the next
//!   pass, so no address leaks.
//! - A pass that finds nothing new writes nothing: statuses are compared before they
//!   are written (conditions keep their transition time), kube-vip ConfigMaps are
//!   compared key by key with what the operator owns in them.
//!
//! # Why claims are our own kind, not `networking.k8s.io/v1` IPAddress
//! IPAddress is the Service IP allocator's record: the API server's repair loop and
//! ServiceCIDR tooling read it, `kubectl get ipaddresses` would list floating IPs as
//! if they were ClusterIPs, and it exists only from Kubernetes 1.33 on. A
//! cluster-scoped kind of ours gives the same API-server-enforced uniqueness on every
//! supported version, with RBAC that grants nothing over Service IPs.
//!
//! # Why FloatingIPs carry no finalizer
//! A FloatingIP's address is released by deleting its claim, which outlives the
//! FloatingIP and is found by the next pass (its owner's uid is gone). A finalizer
//! would add nothing to that, and would leave Namespaces stuck in `Terminating`
//! whenever the operator is down. FloatingIPRanges do carry one: a range with
//! allocations is not deleted until they are released.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::core::v1::{ConfigMap, Namespace},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::{
        events::EventType,
        reflector::{ObjectRef, Store},
    },
};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{Pass, World, pass};
use crate::{
    api::{FloatingIP, FloatingIPClaim, FloatingIPRange, conditions::events},
    k8s::FIELD_MANAGER,
    runtime::{
        Backoff, Changes, ErrorClass, Informers, Job, JobError, Next, ObjectKey, Setup, Wake,
    },
    telemetry::Shared,
};

/// What of a FloatingIPRange the job reads: its spec, its deletion, its finalizers.
fn range_fingerprint(r: &FloatingIPRange) -> String {
    format!(
        "{}/{}/{}/{:?}",
        r.meta().uid.as_deref().unwrap_or_default(),
        r.meta().generation.unwrap_or(0),
        r.meta().deletion_timestamp.is_some(),
        r.meta().finalizers
    )
}

/// What of a FloatingIP the job reads: identity, spec, deletion.
fn fip_fingerprint(f: &FloatingIP) -> String {
    format!(
        "{}/{}/{}",
        f.meta().uid.as_deref().unwrap_or_default(),
        f.meta().generation.unwrap_or(0),
        f.meta().deletion_timestamp.is_some()
    )
}

/// What of a Namespace the job reads: identity, labels, deletion.
fn namespace_fingerprint(n: &Namespace) -> String {
    format!(
        "{}/{}/{:?}",
        n.meta().uid.as_deref().unwrap_or_default(),
        n.meta().deletion_timestamp.is_some(),
        n.meta().labels
    )
}

/// Claims never change: created or deleted.
fn claim_fingerprint(c: &FloatingIPClaim) -> String {
    c.meta().uid.clone().unwrap_or_default()
}

/// The floating-IP job and what wakes it: a global job under the shared runner (an
/// allocation must know every claim of its range).
pub(crate) fn setup(
    informers: &Informers,
    client: &Client,
    shared: &Arc<Shared>,
    rancher_clusters: bool,
    trace_ipam: bool,
    write_concurrency: usize,
) -> Setup<Writer> {
    let wake = Wake::new();
    let ranges = informers.get::<FloatingIPRange>();
    ranges.subscribe(&wake, range_fingerprint);
    let fips = informers.get::<FloatingIP>();
    fips.subscribe(&wake, fip_fingerprint);
    let namespaces = informers.get::<Namespace>();
    namespaces.subscribe(&wake, namespace_fingerprint);
    let claims = informers.get::<FloatingIPClaim>();
    claims.subscribe(&wake, claim_fingerprint);
    // Rancher's clusters (guest discovery `rancher`): optional, as Rancher may not be
    // installed; only what discovery reads wakes the job.
    // Read only when asked (`--rancher-clusters`): their RBAC is granted only then.
    let clusters = rancher_clusters.then(|| {
        let clusters = informers.dynamic(&rancher_clusters_resource(), true);
        clusters.subscribe(&wake, |o| {
            format!(
                "{:?}/{:?}/{:?}/{:?}",
                o.metadata.generation,
                o.data["status"]["clusterName"].as_str(),
                o.data["status"]["clientSecretName"].as_str(),
                o.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(super::guest::INSTALL_LABEL))
            )
        });
        clusters
    });
    let mut kinds = vec![
        ranges.health(),
        fips.health(),
        namespaces.health(),
        claims.health(),
    ];
    kinds.extend(clusters.as_ref().map(|c| c.health()));
    let job = Writer {
        client: client.clone(),
        recorder: crate::k8s::recorder(client),
        shared: Arc::clone(shared),
        stores: Stores {
            ranges: ranges.store(),
            fips: fips.store(),
            namespaces: namespaces.store(),
            claims: claims.store(),
            clusters: clusters.map(|c| c.store()),
        },
        logged: HashMap::new(),
        guests: BTreeMap::new(),
        guest_backoff: HashMap::new(),
        guest_published: HashMap::new(),
        guest_due: HashMap::new(),
        published: BTreeMap::new(),
        publish_backoff: HashMap::new(),
        created: HashMap::new(),
        sent: crate::k8s::Sent::default(),
        ledger: None,
        owed: None,
        recoveries: shared.api_recoveries(),
        wake: wake.clone(),
        trace_ipam,
        harvester: HashMap::new(),
        concurrency: write_concurrency.max(1),
    };
    Setup { job, wake, kinds }
}

impl Job for Writer {
    fn name(&self) -> &'static str {
        "floating-ip"
    }

    /// While the pools of the last full pass hold (a new FloatingIP is one allocation
    /// then), changes are gathered for 10 ms, not the runner's 100.
    fn debounce(&self) -> Option<Duration> {
        self.ledger.as_ref().map(|_| FAST_DEBOUNCE)
    }

    async fn pass(&mut self, changes: &Changes) -> Result<Next, JobError> {
        if changes.full {
            // A full pass looks again at Harvester lookups that failed.
            self.harvester.retain(|_, (_, r)| r.is_ok());
        }
        // The API server is back after an outage: a kube-vip ConfigMap that could not
        // be written meanwhile is written now, not after the backoff the outage grew
        // (its FloatingIPs said Published false until then: found by the API-server
        // fault test, whose quiet window caught them flipping back).
        if self.recoveries.has_changed().unwrap_or(false) {
            self.recoveries.borrow_and_update();
            self.publish_backoff
                .retain(|_, (_, _, transient)| !*transient);
        }
        if !changes.full && self.fast(changes).await? {
            // The full pass it owes comes next, after the (short) debounce.
            return Ok(Next::After(Duration::ZERO));
        }
        self.run_pass().await?;
        self.owed = None;
        // What is due at a known time: a kube-vip ConfigMap waiting out its backoff, a
        // guest waiting out its backoff or its next visit. One timer, the runner's.
        let now = Instant::now();
        Ok(self
            .publish_backoff
            .values()
            .map(|(at, _, _)| *at)
            .chain(self.guest_backoff.values().map(|(at, _)| *at))
            .chain(self.guest_due.values().copied())
            .map(|at| at.saturating_duration_since(now))
            .min()
            .map_or(Next::Resync, Next::After))
    }
}

/// The caches the job reads.
struct Stores {
    ranges: Store<FloatingIPRange>,
    fips: Store<FloatingIP>,
    namespaces: Store<Namespace>,
    claims: Store<FloatingIPClaim>,
    /// Rancher's Clusters (`--rancher-clusters`).
    clusters: Option<Store<kube::core::DynamicObject>>,
}

/// Rancher's `provisioning.cattle.io/v1` Cluster.
fn rancher_clusters_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("provisioning.cattle.io", "v1", "Cluster"),
        "clusters",
    )
}

/// The floating-IP job: carries each [`Pass`] out.
pub(crate) struct Writer {
    client: Client,
    recorder: crate::k8s::events::Recorder,
    shared: Arc<Shared>,
    stores: Stores,
    /// Problems already logged (logged again only when they change).
    logged: HashMap<String, String>,
    /// The last visit to each guest cluster: its ConfigMap and install, kept or why not.
    guests: BTreeMap<String, super::GuestState>,
    /// Guests that failed: when to try again, and their backoff (2 s doubling to
    /// `GUEST_MAX_BACKOFF`, with the runtime's jitter).
    guest_backoff: HashMap<String, (Instant, Backoff)>,
    /// What each guest was last given successfully (so a quiet pass writes nothing).
    guest_published: HashMap<String, super::KubeVipPublication>,
    /// When each guest is to be visited again after a good visit (its `intervalSeconds`
    /// later: an edited ConfigMap repaired, a deleted object put back).
    guest_due: HashMap<String, Instant>,
    /// The last write of each kube-vip ConfigMap here (`<namespace>/<name>`): `Ok` or
    /// the API server's refusal. FloatingIPs say Published from it.
    published: BTreeMap<String, Result<(), String>>,
    /// ConfigMaps whose write failed: when to try again, the backoff, and whether the
    /// failure was transient (those are tried again at once when the API server is
    /// ready again after it was not).
    publish_backoff: HashMap<String, (Instant, Backoff, bool)>,
    /// Claims this job created that its cache did not show yet, by name, with when: a
    /// pass counts them as held (without that, a pass woken by anything else before the
    /// claims' watch caught up allocated the same FloatingIPs again, and the next
    /// released the extra claims: found by the OOM fault test under load). Forgotten
    /// once the cache shows them, or after [`CREATED_MEMO`].
    created: HashMap<String, (Arc<FloatingIPClaim>, Instant)>,
    /// FloatingIP and range statuses written and not seen back yet: not sent again while
    /// the cache stays behind (after an API server restart, CI saw one namespace's 20
    /// statuses rewritten every resync).
    sent: crate::k8s::Sent,
    /// The pools the last full pass left (its claims made since counted in), while
    /// they hold what the API server holds: new FloatingIPs are served from them
    /// (`super::fast`) without a pass over everything.
    ledger: Option<netpolicy_ipam::assign::Ledger>,
    /// Since when the fast path owes a full pass (the statuses and publications of the
    /// FloatingIPs it claimed for).
    owed: Option<Instant>,
    /// Counts the API server's recoveries ([`Shared::api_recoveries`]).
    recoveries: tokio::sync::watch::Receiver<u64>,
    /// To run another pass when a guest's state changes (its FloatingIPs' status).
    wake: Wake,
    /// `--trace-ipam-data`: log every pass's allocations (kube-fip's `traceIpamData`).
    trace_ipam: bool,
    /// Each Rancher Cluster's Harvester cluster and network (by uid: the generation it
    /// was read at, and what was found or why not).
    harvester: HashMap<String, (i64, Result<Option<super::guest::Harvester>, String>)>,
    /// `--write-concurrency`: claim and status writes in flight at once.
    concurrency: usize,
}

/// kube-fip's `traceIpamData`: every FloatingIP and its address, every range and its
/// use, as this pass leaves them (at info, under the target `ipam`).
fn trace_ipam(p: &Pass) {
    info!(target: "ipam", floating_ips = p.fip_status.len(), ranges = p.range_status.len(), "IPAM data of this pass");
    for (ns, name, st) in &p.fip_status {
        info!(target: "ipam", floating_ip = format!("{ns}/{name}"), address = st.address.as_deref().unwrap_or("-"), "held");
    }
    for (name, st) in &p.range_status {
        info!(
            target: "ipam",
            range = name,
            capacity = st.capacity.as_deref().unwrap_or("?"),
            allocated = st.allocated.as_deref().unwrap_or("?"),
            "range"
        );
    }
}

/// Longest wait between tries of an unreachable guest cluster.
const GUEST_MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Longest a guest publication may take; a slow guest never holds up the others long.
const GUEST_TIMEOUT: Duration = Duration::from_secs(15);

fn get<K>(store: &Store<K>, namespace: Option<&str>, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut r = ObjectRef::new(name);
    if let Some(ns) = namespace {
        r = r.within(ns);
    }
    store.get(&r)
}

/// How long changes are gathered while the fast path can serve them.
const FAST_DEBOUNCE: Duration = Duration::from_millis(10);

/// The longest the fast path puts off the full pass it owes (statuses, publications)
/// while new FloatingIPs keep coming.
const OWED_MAX: Duration = Duration::from_secs(1);

/// How long a created claim counts as held while the cache does not show it.
const CREATED_MEMO: Duration = Duration::from_secs(60);

/// `cached` and the claims of `created` it does not show (as of `now`); `created`
/// forgets the ones it shows and those older than [`CREATED_MEMO`].
pub(super) fn with_created(
    mut cached: Vec<Arc<FloatingIPClaim>>,
    created: &mut HashMap<String, (Arc<FloatingIPClaim>, Instant)>,
    now: Instant,
) -> Vec<Arc<FloatingIPClaim>> {
    if created.is_empty() {
        return cached;
    }
    let names: BTreeSet<&str> = cached
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    created.retain(|name, (_, at)| {
        !names.contains(name.as_str()) && now.saturating_duration_since(*at) < CREATED_MEMO
    });
    cached.extend(created.values().map(|(c, _)| Arc::clone(c)));
    cached
}

impl Writer {
    /// The fast path (`super::fast`): when the only changes are FloatingIPs created
    /// since the last full pass (and the echoes of claims made for others), their
    /// claims from that pass's pools; true when it served them (a full pass is owed).
    async fn fast(&mut self, changes: &Changes) -> Result<bool, kube::Error> {
        if self.owed.is_some_and(|t| t.elapsed() > OWED_MAX)
            || !changes.touched("FloatingIP")
            || changes
                .kinds()
                .any(|k| k != "FloatingIP" && k != "FloatingIPClaim")
        {
            return Ok(false);
        }
        let Some(mut ledger) = self.ledger.take() else {
            return Ok(false);
        };
        let s = &self.stores;
        let mut fips = Vec::new();
        for key in changes.of("FloatingIP") {
            let Some(f) = get(&s.fips, key.namespace.as_deref(), &key.name) else {
                return Ok(false);
            };
            fips.push(f);
        }
        let mut claims = Vec::new();
        for key in changes.of("FloatingIPClaim") {
            let Some(c) = get(&s.claims, None, &key.name) else {
                return Ok(false);
            };
            claims.push(c);
        }
        let terminating = |ns: &str| {
            get(&s.namespaces, None, ns).is_some_and(|n| n.metadata.deletion_timestamp.is_some())
        };
        let fips: Vec<&FloatingIP> = fips.iter().map(AsRef::as_ref).collect();
        let claims: Vec<&FloatingIPClaim> = claims.iter().map(AsRef::as_ref).collect();
        let Some(create_claims) = super::fast::claims(&mut ledger, &fips, &claims, terminating)
        else {
            return Ok(false);
        };
        let p = Pass {
            create_claims,
            ..Pass::default()
        };
        let (made, _) = self.create_claims(&p).await?;
        if made == p.create_claims.len() {
            self.ledger = Some(ledger);
        }
        self.owed.get_or_insert_with(Instant::now);
        info!(
            floating_ips = fips.len(),
            claimed = made,
            "new FloatingIPs claimed from the last pass's pools (fast path)"
        );
        Ok(true)
    }

    /// The cached claims and those created since that the cache does not show yet.
    fn claims_with_created(&mut self) -> Vec<Arc<FloatingIPClaim>> {
        with_created(
            self.stores.claims.state(),
            &mut self.created,
            Instant::now(),
        )
    }

    async fn run_pass(&mut self) -> Result<(), kube::Error> {
        self.ledger = None;
        let ranges = self.stores.ranges.state();
        let fips = self.stores.fips.state();
        let namespaces = self.stores.namespaces.state();
        let claims = self.claims_with_created();
        let wants_harvester = ranges.iter().any(|r| r.spec.harvester.is_some());
        let objects = self.stores.clusters.as_ref().map(Store::state);
        if wants_harvester && let Some(objects) = &objects {
            self.resolve_harvester(objects).await;
        }
        let clusters: Option<Vec<super::guest::RancherCluster>> = objects.map(|objects| {
            objects
                .iter()
                .filter_map(|o| {
                    let mut c = super::guest::RancherCluster::from_object(o)?;
                    c.harvester = o
                        .metadata
                        .uid
                        .as_ref()
                        .and_then(|u| self.harvester.get(u))
                        .and_then(|(_, r)| r.clone().ok().flatten());
                    Some(c)
                })
                .collect()
        });
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        // The rules over the caches, with what the guests and kube-vip last answered.
        let plan = |guests: &BTreeMap<String, super::GuestState>,
                    published: &BTreeMap<String, Result<(), String>>| {
            pass(
                World {
                    ranges: &ranges,
                    fips: &fips,
                    namespaces: &namespaces,
                    claims: &claims,
                    clusters: clusters.as_deref(),
                    guests,
                    published: Some(published),
                },
                &now,
            )
        };
        let mut p: Pass = plan(&self.guests, &self.published);
        // kube-vip in this cluster first: a FloatingIP says Published only once its
        // ConfigMap holds it. One ConfigMap that cannot be written (an admission policy,
        // a namespace the chart gives no access to) holds up no other; it is tried
        // again after its backoff, and its FloatingIPs say why meanwhile.
        let (mut writes, changed) = self.publish_local(&p.kube_vip).await;
        if changed {
            p = plan(&self.guests, &self.published);
        }
        self.log_problems(&p);
        if self.trace_ipam {
            trace_ipam(&p);
        }
        writes += self.create_fips(&p).await?;
        let ledger = p.ledger.take();
        let (claimed, just_claimed) = self.create_claims(&p).await?;
        writes += claimed;
        // The pools as this pass leaves them serve the FloatingIPs created next
        // (`super::fast`), when they hold what the API server holds: every claim made,
        // nothing released (a release may be put off while the cache is behind).
        if claimed == p.create_claims.len() && p.releases.is_empty() {
            self.ledger = ledger;
        }
        let s = &self.stores;
        writes += self.release(&p).await?;
        writes += self.fip_statuses(&p, &just_claimed).await?;
        let range_api = Api::<FloatingIPRange>::all(self.client.clone());
        // Range finalizers coming, before the status: the merge patch names the cached
        // resourceVersion, which a status write of this pass would make stale (a 409,
        // and the finalizer left for a later pass).
        writes += self
            .range_finalizers(&range_api, &s.ranges, &p.range_finalizers, true)
            .await?;
        writes += self.range_statuses(&p, &range_api).await?;
        // 5. Range finalizers going (after the status: the range may go with them).
        writes += self
            .range_finalizers(&range_api, &s.ranges, &p.range_finalizers, false)
            .await?;
        // 6. kube-vip in guest clusters.
        self.publish_guests(&p.guests).await;
        if writes > 0 {
            debug!(writes, "floating IPs: pass wrote");
        }
        Ok(())
    }

    /// FloatingIPs auto-allocation wants; how many were created.
    async fn create_fips(&self, p: &Pass) -> Result<usize, kube::Error> {
        let mut writes = 0;
        for f in &p.create_fips {
            let ns = f.metadata.namespace.clone().unwrap_or_default();
            match Api::<FloatingIP>::namespaced(self.client.clone(), &ns)
                .create(&PostParams::default(), f)
                .await
            {
                Ok(_) => {
                    writes += 1;
                    info!(
                        namespace = ns,
                        name = f.name_any(),
                        range = f.spec.range,
                        "auto-allocated FloatingIP created"
                    );
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                // A Namespace being deleted refuses new objects.
                Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
                    debug!(namespace = ns, error = %e.message, "auto-allocated FloatingIP not created");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(writes)
    }

    /// New claims: the API server decides who gets an address. How many were created, and the FloatingIPs that just got one.
    async fn create_claims(&mut self, p: &Pass) -> Result<(usize, BTreeSet<String>), kube::Error> {
        let mut writes = 0;
        let s = &self.stores;
        let claim_api = Api::<FloatingIPClaim>::all(self.client.clone());
        let created = futures::stream::iter(0..p.create_claims.len())
            .map(|i| {
                // By index: a stream over references is not `Send` for every lifetime.
                let c = super::pass::claim(&p.create_claims[i]);
                let fip = get(&s.fips, Some(&c.spec.owner.namespace), &c.spec.owner.name);
                let api = claim_api.clone();
                async move {
                    match api.create(&PostParams::default(), &c).await {
                        Ok(mut made) => {
                            // Held until the cache shows it (`created`): without its
                            // managedFields, as the cache holds objects (at a cold start
                            // on 10,000 FloatingIPs they were 32 MB of the peak).
                            made.metadata.managed_fields = None;
                            let waited = fip
                                .and_then(|f| f.metadata.creation_timestamp.clone())
                                .map_or(0.0, |t| {
                                    (k8s_openapi::jiff::Timestamp::now().as_millisecond()
                                        - t.0.as_millisecond())
                                    .max(0) as f64
                                        / 1000.0
                                });
                            Ok(Some((waited, made)))
                        }
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            // Someone else holds it (another operator process, or our
                            // cache is behind): not ours; the next pass sees theirs.
                            debug!(
                                address = c.spec.address,
                                "claim exists already; not allocated"
                            );
                            Ok(None)
                        }
                        Err(e) => Err(e),
                    }
                }
            })
            .buffer_unordered(self.concurrency);
        futures::pin_mut!(created);
        // FloatingIPs that just got a claim: their status is written by the next pass
        // (woken by the claim), with the address, not now without it.
        let mut just_claimed: BTreeSet<String> = BTreeSet::new();
        // Each answer is remembered as it comes (not collected first: 10,000 claims at a
        // cold start), so that a failure later in the pass leaves the claims made before
        // it counted as held.
        while let Some(answer) = created.try_next().await? {
            let Some((waited, made)) = answer else {
                continue;
            };
            let now = Instant::now();
            writes += 1;
            let (range, address) = (made.spec.range.clone(), made.spec.address.clone());
            let owner = format!("{}/{}", made.spec.owner.namespace, made.spec.owner.name);
            self.created.insert(made.name_any(), (Arc::new(made), now));
            just_claimed.insert(owner);
            self.shared.metrics.floating_ip_allocated(&range, waited);
            debug!(range, address, "address claimed");
        }
        Ok((writes, just_claimed))
    }

    /// Releases (a claim whose owner the API server still has is kept: the cache is behind); how many.
    async fn release(&self, p: &Pass) -> Result<usize, kube::Error> {
        let mut writes = 0;
        let s = &self.stores;
        let claim_api = Api::<FloatingIPClaim>::all(self.client.clone());
        for r in &p.releases {
            if let Some(owner) = &r.owner_gone
                && self.owner_lives(owner).await?
            {
                debug!(
                    claim = r.claim,
                    "owner exists (the cache is behind): not released"
                );
                continue;
            }
            let dp = DeleteParams {
                preconditions: r.claim_uid.clone().map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match claim_api.delete(&r.claim, &dp).await {
                Ok(_) => {
                    writes += 1;
                    self.shared.metrics.floating_ip_released(&r.range);
                    info!(range = r.range, address = r.address, "released: {}", r.why);
                    if let Some(range) = get(&s.ranges, None, &r.range) {
                        self.recorder
                            .tell(
                                range.as_ref(),
                                EventType::Normal,
                                "Allocate",
                                events::RELEASED,
                                format!("{} released: {}", r.address, r.why),
                            )
                            .await;
                    }
                }
                // Gone already, or another object of that name now (409).
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(writes)
    }

    /// FloatingIP statuses that differ, with their Events; how many were written.
    /// Independent objects: `--write-concurrency` at a time (after an outage every status of
    /// a large pool may change at once: one round trip each, in sequence, took seconds).
    async fn fip_statuses(
        &self,
        p: &Pass,
        just_claimed: &BTreeSet<String>,
    ) -> Result<usize, kube::Error> {
        let s = &self.stores;
        let due: Vec<_> = p
            .fip_status
            .iter()
            .filter(|(ns, name, _)| !just_claimed.contains(&format!("{ns}/{name}")))
            .filter_map(|(ns, name, status)| {
                let cur = get(&s.fips, Some(ns), name)?;
                let current = cur.status.clone().unwrap_or_default();
                // Written before over the version the cache still holds: not again.
                (current != *status && !self.sent.status_unseen(cur.as_ref(), status))
                    .then(|| (ns.clone(), status.clone(), cur, current))
            })
            .collect();
        let written: Vec<bool> = futures::stream::iter(due)
            .map(|(ns, status, cur, current)| async move {
                self.recorder
                    .tell_all(cur.as_ref(), super::fip_events(&current, &status))
                    .await;
                let api = Api::<FloatingIP>::namespaced(self.client.clone(), &ns);
                self.sent
                    .apply_status(&api, FIELD_MANAGER, cur.as_ref(), &status)
                    .await
            })
            .buffer_unordered(self.concurrency)
            .try_collect()
            .await?;
        Ok(written.into_iter().filter(|w| *w).count())
    }

    /// Range statuses that differ (and the ranges' metrics), with their Events; how many were written.
    async fn range_statuses(
        &self,
        p: &Pass,
        range_api: &Api<FloatingIPRange>,
    ) -> Result<usize, kube::Error> {
        let mut writes = 0;
        let s = &self.stores;
        for (name, status) in &p.range_status {
            let Some(cur) = get(&s.ranges, None, name) else {
                continue;
            };
            let current = cur.status.clone().unwrap_or_default();
            self.shared.metrics.floating_ip_range(
                name,
                status
                    .capacity
                    .as_deref()
                    .and_then(|c| c.parse::<f64>().ok()),
                status
                    .allocated
                    .as_deref()
                    .and_then(|c| c.parse::<f64>().ok()),
            );
            if current == *status || self.sent.status_unseen(cur.as_ref(), status) {
                continue;
            }
            let became_full = |st: &crate::api::FloatingIPRangeStatus| {
                crate::api::conditions::is_true(
                    &st.conditions,
                    crate::api::conditions::floating_ip::EXHAUSTED,
                )
            };
            if let Some(c) = outside(status)
                && outside(&current).is_none()
            {
                self.recorder
                    .tell(
                        cur.as_ref(),
                        EventType::Warning,
                        "Allocate",
                        events::ALLOCATIONS_OUTSIDE,
                        c.message.clone(),
                    )
                    .await;
            }
            if became_full(status) && !became_full(&current) {
                self.recorder
                    .tell(
                        cur.as_ref(),
                        EventType::Warning,
                        "Allocate",
                        events::EXHAUSTED,
                        "every address is allocated; new FloatingIPs wait".into(),
                    )
                    .await;
            }
            writes += usize::from(
                self.sent
                    .apply_status(range_api, FIELD_MANAGER, cur.as_ref(), status)
                    .await?,
            );
        }
        Ok(writes)
    }

    /// Adds (`adding`) or removes the range finalizers `list` asks for; how many were
    /// written. A range changed or gone meanwhile is left to the next pass.
    async fn range_finalizers(
        &self,
        range_api: &Api<FloatingIPRange>,
        ranges: &Store<FloatingIPRange>,
        list: &[(String, bool)],
        adding: bool,
    ) -> Result<usize, kube::Error> {
        let mut writes = 0;
        for (name, add) in list.iter().filter(|(_, add)| *add == adding) {
            let Some(cur) = get(ranges, None, name) else {
                continue;
            };
            let mut list: Vec<String> = cur.metadata.finalizers.clone().unwrap_or_default();
            list.retain(|f| f != super::RANGE_FINALIZER);
            if *add {
                list.push(super::RANGE_FINALIZER.into());
            } else {
                info!(range = name, "no allocations left: the range may go");
            }
            let patch = json!({"metadata": {
                "finalizers": list,
                "resourceVersion": cur.metadata.resource_version,
            }});
            match range_api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => writes += 1,
                // Changed meanwhile: the next pass sees it.
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(writes)
    }

    /// Writes the kube-vip ConfigMaps of this cluster that differ and are not waiting
    /// out a backoff. Returns how many were written, and whether the publication state
    /// of any changed (the FloatingIPs' `Published` follows it).
    async fn publish_local(&mut self, maps: &[super::KubeVipConfigMap]) -> (usize, bool) {
        let now = Instant::now();
        let mut written = 0;
        let mut changed = false;
        let wanted: BTreeSet<String> = maps
            .iter()
            .map(|cm| format!("{}/{}", cm.namespace, cm.name))
            .collect();
        self.published.retain(|k, _| wanted.contains(k));
        self.publish_backoff.retain(|k, _| wanted.contains(k));
        for cm in maps {
            let key = format!("{}/{}", cm.namespace, cm.name);
            if self
                .publish_backoff
                .get(&key)
                .is_some_and(|(at, _, _)| *at > now)
            {
                continue;
            }
            let api = Api::<ConfigMap>::namespaced(self.client.clone(), &cm.namespace);
            let state = match publish(&api, cm).await {
                Ok(wrote) => {
                    written += usize::from(wrote);
                    if self.publish_backoff.remove(&key).is_some() {
                        info!(configmap = key, "kube-vip ConfigMap written again");
                    }
                    Ok(())
                }
                Err(e) => {
                    let class = ErrorClass::of(&e);
                    let b = self
                        .publish_backoff
                        .entry(key.clone())
                        .or_insert_with(|| (now, class.backoff(), false));
                    b.2 = class == ErrorClass::Transient;
                    let delay = b.1.next_delay();
                    b.0 = Instant::now() + delay;
                    warn!(configmap = key, error = %e, retry_in = ?delay, "kube-vip ConfigMap not written");
                    self.shared.metrics.publish_failed(&key);
                    Err(match &e {
                        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
                        e => e.to_string(),
                    })
                }
            };
            let before = self.published.get(&key).cloned();
            if before.as_ref() != Some(&state) {
                // An Event on each range publishing there, when the write starts failing
                // (or fails differently) and when it goes through again.
                let event = match (&before, &state) {
                    (_, Err(why)) => Some((
                        EventType::Warning,
                        events::PUBLISH_FAILED,
                        format!(
                            "kube-vip ConfigMap {key} cannot be written: {why} (retrying with backoff)"
                        ),
                    )),
                    (Some(Err(_)), Ok(())) => Some((
                        EventType::Normal,
                        events::PUBLISHED,
                        format!("kube-vip ConfigMap {key} written again"),
                    )),
                    _ => None,
                };
                if let Some((type_, reason, note)) = event {
                    for r in self.stores.ranges.state() {
                        let publishes_here = r.spec.kube_vip.as_ref().is_some_and(|kv| {
                            kv.guest_kubeconfig_secret.is_none() && {
                                let (ns, name) = kv.config_map();
                                format!("{ns}/{name}") == key
                            }
                        });
                        if publishes_here {
                            self.recorder
                                .tell(r.as_ref(), type_, "Allocate", reason, note.clone())
                                .await;
                        }
                    }
                }
                self.published.insert(key, state);
                changed = true;
            }
        }
        (written, changed)
    }

    /// Whether a claim's owner exists in the API server (not just in the cache): the
    /// same uid, not being deleted, in a Namespace not being deleted.
    async fn owner_lives(&self, owner: &crate::api::ClaimOwner) -> Result<bool, kube::Error> {
        let f = Api::<FloatingIP>::namespaced(self.client.clone(), &owner.namespace)
            .get_opt(&owner.name)
            .await?;
        let Some(f) = f else { return Ok(false) };
        if f.metadata.uid.as_deref() != Some(owner.uid.as_str())
            || f.metadata.deletion_timestamp.is_some()
        {
            return Ok(false);
        }
        let ns = Api::<Namespace>::all(self.client.clone())
            .get_opt(&owner.namespace)
            .await?;
        Ok(ns.is_some_and(|n| n.metadata.deletion_timestamp.is_none()))
    }

    /// Reads where each Rancher Cluster runs on Harvester, as kube-fip does: its cloud
    /// credential Secret's `harvestercredentialConfig-clusterId` names the Harvester
    /// cluster's `management.cattle.io/v3` Cluster (its `spec.displayName`), its first
    /// Harvester machine pool's `HarvesterConfig` the network. Once per Cluster
    /// generation; a failure is logged and tried again at the next full pass.
    async fn resolve_harvester(&mut self, objects: &[Arc<kube::core::DynamicObject>]) {
        use super::guest::{Harvester, RancherCluster, harvester_network};
        let live: BTreeSet<String> = objects
            .iter()
            .filter_map(|o| o.metadata.uid.clone())
            .collect();
        self.harvester.retain(|uid, _| live.contains(uid));
        for o in objects {
            let (Some(uid), generation) =
                (o.metadata.uid.clone(), o.metadata.generation.unwrap_or(0))
            else {
                continue;
            };
            if self
                .harvester
                .get(&uid)
                .is_some_and(|(g, _)| *g == generation)
            {
                continue;
            }
            let name = format!(
                "{}/{}",
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default()
            );
            let found: Result<Option<Harvester>, String> = async {
                let Some((ns, secret)) = RancherCluster::cloud_credential(o) else {
                    return Ok(None);
                };
                let data =
                    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), &ns)
                        .get(&secret)
                        .await
                        .map_err(|e| format!("cloud credential {ns}/{secret}: {e}"))?
                        .data
                        .unwrap_or_default();
                let Some(id) = data.get("harvestercredentialConfig-clusterId") else {
                    return Ok(None); // not a Harvester credential
                };
                let id = String::from_utf8_lossy(&id.0).into_owned();
                let mgmt = kube::core::ApiResource::from_gvk_with_plural(
                    &kube::core::GroupVersionKind::gvk("management.cattle.io", "v3", "Cluster"),
                    "clusters",
                );
                let cluster =
                    Api::<kube::core::DynamicObject>::all_with(self.client.clone(), &mgmt)
                        .get(&id)
                        .await
                        .map_err(|e| {
                            format!("Harvester cluster {id} (management.cattle.io/v3): {e}")
                        })?;
                let display = cluster.data["spec"]["displayName"]
                    .as_str()
                    .unwrap_or(&id)
                    .to_owned();
                let network = match RancherCluster::harvester_config(o) {
                    None => None,
                    Some(config) => {
                        let hc = kube::core::ApiResource::from_gvk_with_plural(
                            &kube::core::GroupVersionKind::gvk(
                                "rke-machine-config.cattle.io",
                                "v1",
                                "HarvesterConfig",
                            ),
                            "harvesterconfigs",
                        );
                        let ns = o.metadata.namespace.as_deref().unwrap_or_default();
                        let c = Api::<kube::core::DynamicObject>::namespaced_with(
                            self.client.clone(),
                            ns,
                            &hc,
                        )
                        .get(&config)
                        .await
                        .map_err(|e| format!("HarvesterConfig {ns}/{config}: {e}"))?;
                        harvester_network(&c.data)
                    }
                };
                Ok(Some(Harvester {
                    cluster: display,
                    network,
                }))
            }
            .await;
            match &found {
                Ok(Some(h)) => {
                    debug!(cluster = name, harvester = h.cluster, network = ?h.network, "Harvester guest")
                }
                Ok(None) => {}
                Err(e) => warn!(
                    cluster = name,
                    error = e,
                    "cannot tell which Harvester cluster runs this guest (tried again at the next resync)"
                ),
            }
            self.harvester.insert(uid, (generation, found));
        }
    }

    /// Visits every guest cluster that is due — its publication changed, its
    /// `intervalSeconds` passed since the last good visit, or its backoff ended — side by
    /// side, each within [`GUEST_TIMEOUT`]: kube-vip installed when asked, the ConfigMap
    /// kept (repaired when someone edited it). A change of a guest's state wakes another
    /// pass (its FloatingIPs' conditions).
    async fn publish_guests(&mut self, wanted: &[super::KubeVipPublication]) {
        let now = Instant::now();
        let interval = |g: &super::KubeVipPublication| {
            Duration::from_secs(u64::from(
                g.guest.as_ref().map_or(60, |t| t.interval_seconds),
            ))
        };
        let due: Vec<super::KubeVipPublication> = wanted
            .iter()
            .filter(|g| {
                self.guest_published.get(&g.cluster) != Some(*g)
                    || self.guest_due.get(&g.cluster).is_none_or(|at| *at <= now)
            })
            .filter(|g| {
                self.guest_backoff
                    .get(&g.cluster)
                    .is_none_or(|(at, _)| *at <= now)
            })
            .cloned()
            .collect();
        let results: Vec<(super::KubeVipPublication, Visit)> = futures::stream::iter(due)
            .map(|g| {
                let client = self.client.clone();
                async move {
                    let v = tokio::time::timeout(GUEST_TIMEOUT, visit_guest(client, &g))
                        .await
                        .unwrap_or_else(|_| {
                            Visit::failed(
                                &g,
                                unreachable(format!("no answer within {GUEST_TIMEOUT:?}")),
                            )
                        });
                    (g, v)
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let mut changed = false;
        for (g, v) in results {
            let name = g
                .guest
                .as_ref()
                .map_or(g.cluster.as_str(), |t| t.name.as_str());
            let metrics = &self.shared.metrics;
            metrics.guest_up(name, v.answered);
            for kind in &v.events {
                metrics.guest_event(name, kind);
            }
            let failure = v
                .state
                .installed
                .clone()
                .and_then(Result::err)
                .or_else(|| v.state.published.clone().err());
            match failure {
                None => {
                    if v.wrote_config_map {
                        info!(
                            guest = name,
                            "kube-vip ConfigMap in the guest cluster written"
                        );
                    }
                    if v.applied > 0 {
                        info!(
                            guest = name,
                            objects = v.applied,
                            "kube-vip installed in the guest cluster"
                        );
                    }
                    self.guest_backoff.remove(&g.cluster);
                    self.guest_published.insert(g.cluster.clone(), g.clone());
                    // Visit again after the interval (see `pass`: the runner's timer).
                    self.guest_due
                        .insert(g.cluster.clone(), Instant::now() + interval(&g));
                }
                Some(f) => {
                    let (at, backoff) =
                        self.guest_backoff
                            .entry(g.cluster.clone())
                            .or_insert_with(|| {
                                (
                                    Instant::now(),
                                    Backoff::new(Duration::from_secs(2), GUEST_MAX_BACKOFF),
                                )
                            });
                    let delay = backoff.next_delay();
                    *at = Instant::now() + delay;
                    warn!(guest = name, reason = f.reason, error = f.message, retry_in = ?delay, "guest cluster not served");
                    metrics.guest_publish_failed(&g.cluster);
                    self.guest_published.remove(&g.cluster);
                    // Tried again when the backoff ends (see `pass`).
                    self.guest_due.remove(&g.cluster);
                }
            }
            if self.guests.get(&g.cluster) != Some(&v.state) {
                self.guests.insert(g.cluster.clone(), v.state);
                changed = true;
            }
        }
        // Guests no range asks for any more are forgotten.
        let wanted_clusters: BTreeSet<&str> = wanted.iter().map(|g| g.cluster.as_str()).collect();
        let gone: Vec<String> = self
            .guests
            .keys()
            .filter(|c| !wanted_clusters.contains(c.as_str()))
            .cloned()
            .collect();
        for c in &gone {
            self.shared.metrics.guest_gone(c);
        }
        self.guests
            .retain(|c, _| wanted_clusters.contains(c.as_str()));
        self.guest_published
            .retain(|c, _| wanted_clusters.contains(c.as_str()));
        self.guest_due
            .retain(|c, _| wanted_clusters.contains(c.as_str()));
        self.guest_backoff
            .retain(|c, _| wanted_clusters.contains(c.as_str()));
        if changed {
            self.wake.changed("Guest", ObjectKey::cluster(""));
        }
    }

    fn log_problems(&mut self, p: &Pass) {
        let mut now: HashMap<String, String> = HashMap::new();
        for e in &p.problems {
            let key = format!("{}/{}/{}", e.kind, e.name, e.field);
            now.insert(key, e.message.clone());
        }
        for (k, m) in &now {
            if self.logged.get(k) != Some(m) {
                warn!(object = k, "{m}");
            }
        }
        self.logged = now;
    }
}

/// A range's `AllocationsOutside` condition, when True.
fn outside(
    st: &crate::api::FloatingIPRangeStatus,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    crate::api::conditions::find(&st.conditions, crate::api::conditions::floating_ip::OUTSIDE)
        .filter(|c| c.status == crate::api::conditions::STATUS_TRUE)
}

/// The `data` keys field manager [`FIELD_MANAGER`] owns in a ConfigMap.
fn owned_keys(cm: &ConfigMap) -> BTreeSet<String> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(FIELD_MANAGER))
        .filter_map(|m| m.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:data")?.as_object().cloned())
        .flat_map(|d| {
            d.keys()
                .filter_map(|k| k.strip_prefix("f:").map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Keeps the operator's keys of one kube-vip ConfigMap: only when they differ from
/// what is there, and never touching keys it does not own.
async fn publish(api: &Api<ConfigMap>, cm: &super::KubeVipConfigMap) -> Result<bool, kube::Error> {
    let current = api.get_opt(&cm.name).await?;
    let owned = current.as_ref().map(owned_keys).unwrap_or_default();
    let data = current
        .as_ref()
        .and_then(|c| c.data.clone())
        .unwrap_or_default();
    let same = cm.data.iter().all(|(k, v)| data.get(k) == Some(v))
        && owned.iter().all(|k| cm.data.contains_key(k));
    if same && (current.is_some() || cm.data.is_empty()) {
        return Ok(false);
    }
    let patch = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": cm.name, "namespace": cm.namespace},
        "data": cm.data,
    });
    api.patch(
        &cm.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    info!(
        namespace = cm.namespace,
        name = cm.name,
        keys = cm.data.len(),
        "kube-vip ConfigMap updated"
    );
    Ok(true)
}

/// What one visit to a guest found and did.
struct Visit {
    state: super::GuestState,
    /// The guest's API server answered.
    answered: bool,
    /// The ConfigMap was written (created or repaired).
    wrote_config_map: bool,
    /// Objects of kube-vip applied.
    applied: usize,
    /// Events for `netpolicy_guestcluster_events_total` (kube-fip's names).
    events: Vec<&'static str>,
}

impl Visit {
    fn failed(g: &super::KubeVipPublication, f: super::GuestFailure) -> Self {
        let install = g.guest.as_ref().and_then(|t| t.install.as_ref());
        Self {
            state: super::GuestState {
                published: Err(f.clone()),
                installed: install.map(|_| Err(f.clone())),
            },
            answered: false,
            wrote_config_map: false,
            applied: 0,
            events: vec!["api_connection_error"],
        }
    }
}

fn unreachable(message: String) -> super::GuestFailure {
    super::GuestFailure {
        reason: crate::api::conditions::floating_ip::GUEST_UNREACHABLE,
        message,
    }
}

/// A guest API server's answer as a failure: refused (401/403), unreachable (no
/// answer), or `otherwise` (it answered and said no).
fn classify(e: &kube::Error, otherwise: &'static str) -> super::GuestFailure {
    use crate::api::conditions::floating_ip as fc;
    let reason = match e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => fc::GUEST_FORBIDDEN,
        kube::Error::Api(_) => otherwise,
        _ => fc::GUEST_UNREACHABLE,
    };
    super::GuestFailure {
        reason,
        message: e.to_string(),
    }
}

use crate::k8s::applied::{self, HASH_ANNOTATION as APPLIED_HASH};

/// Visits one guest: its client from the kubeconfig Secret, kube-vip installed when
/// asked (missing objects created; with `update`, changed renderings re-applied),
/// then its kube-vip ConfigMap kept.
async fn visit_guest(client: Client, g: &super::KubeVipPublication) -> Visit {
    use crate::api::conditions::floating_ip as fc;
    let target = g.guest.clone().unwrap_or_default();
    let guest = match guest_client(client, &g.cluster, target.key.as_deref()).await {
        Ok(c) => c,
        Err(f) => {
            let mut v = Visit::failed(g, f);
            if v.state
                .published
                .as_ref()
                .err()
                .is_some_and(|f| f.reason == fc::KUBECONFIG_MISSING)
            {
                v.events.clear();
            }
            return v;
        }
    };
    let mut v = Visit {
        state: super::GuestState {
            published: Ok(()),
            installed: None,
        },
        answered: true,
        wrote_config_map: false,
        applied: 0,
        events: Vec::new(),
    };
    if let Some(install) = &target.install {
        let r = install_in_guest(&guest, install).await;
        match &r {
            Ok(n) => {
                v.applied = *n;
                if *n > 0 {
                    v.events.push("kubevip_install");
                }
            }
            Err(f) => {
                v.events.push("kubevip_install_error");
                if f.reason == fc::GUEST_UNREACHABLE {
                    v.answered = false;
                }
            }
        }
        v.state.installed = Some(r.map(|_| ()));
    }
    let api = Api::<ConfigMap>::namespaced(guest, &g.namespace);
    let cm = super::KubeVipConfigMap {
        namespace: g.namespace.clone(),
        name: g.name.clone(),
        data: g.data.clone(),
    };
    match publish(&api, &cm).await {
        Ok(wrote) => {
            v.wrote_config_map = wrote;
            if wrote {
                v.events.push("configmap_management");
            }
        }
        Err(e) => {
            let f = classify(&e, fc::PUBLISH_FAILED);
            if f.reason == fc::GUEST_UNREACHABLE {
                v.answered = false;
                v.events.push("api_connection_error");
            } else {
                v.events.push("configmap_management_error");
            }
            v.state.published = Err(f);
        }
    }
    v
}

/// Installs kube-vip and kube-vip-cloud-provider in a guest: each object read, created
/// by server-side apply when missing, re-applied when `update` and its rendering
/// changed (the hash annotation). Returns how many were applied.
async fn install_in_guest(
    guest: &Client,
    install: &super::Install,
) -> Result<usize, super::GuestFailure> {
    use crate::api::conditions::floating_ip as fc;
    let mut applied = 0;
    for o in &install.objects {
        let Some((ar, namespaced)) = o["kind"].as_str().and_then(applied::resource) else {
            continue;
        };
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<kube::core::DynamicObject> = if namespaced {
            Api::namespaced_with(
                guest.clone(),
                o["metadata"]["namespace"].as_str().unwrap_or("kube-system"),
                &ar,
            )
        } else {
            Api::all_with(guest.clone(), &ar)
        };
        let hash = applied::hash(o);
        let live = api
            .get_opt(name)
            .await
            .map_err(|e| classify(&e, fc::INSTALL_FAILED))?;
        let current = live
            .as_ref()
            .and_then(|l| l.annotations().get(APPLIED_HASH).cloned());
        let apply = match &live {
            None => true,
            Some(_) => install.update && current.as_deref() != Some(hash.as_str()),
        };
        if !apply {
            continue;
        }
        let mut obj = o.clone();
        obj["metadata"]["annotations"][APPLIED_HASH] = json!(hash);
        let dynamic: kube::core::DynamicObject =
            serde_json::from_value(obj).map_err(|e| super::GuestFailure {
                reason: fc::INSTALL_FAILED,
                message: format!("{}: {e}", super::guest::key_of(o)),
            })?;
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&dynamic),
        )
        .await
        .map_err(|e| {
            let mut f = classify(&e, fc::INSTALL_FAILED);
            f.message = format!("{}: {}", super::guest::key_of(o), f.message);
            f
        })?;
        debug!(
            object = super::guest::key_of(o),
            "applied in the guest cluster"
        );
        applied += 1;
    }
    Ok(applied)
}

/// A client of a guest cluster, from the kubeconfig in the Secret `secret`
/// (`<namespace>/<name>`), key `key` (default: `value`, `kubeconfig` or `config`,
/// the first present).
async fn guest_client(
    client: Client,
    secret: &str,
    key: Option<&str>,
) -> Result<Client, super::GuestFailure> {
    use crate::api::conditions::floating_ip as fc;
    let (namespace, name) = secret.split_once('/').ok_or_else(|| super::GuestFailure {
        reason: fc::KUBECONFIG_MISSING,
        message: format!("{secret:?} is not <namespace>/<secret>"),
    })?;
    crate::k8s::client_from_secret(client, namespace, name, key, Some(Duration::from_secs(10)))
        .await
        .map_err(|e| match e {
            crate::k8s::KubeconfigError::Missing(message) => super::GuestFailure {
                reason: fc::KUBECONFIG_MISSING,
                message,
            },
            crate::k8s::KubeconfigError::Client(m) => unreachable(format!("guest client: {m}")),
        })
}
