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
use k8s_openapi::{api::core::v1::Namespace, apimachinery::pkg::apis::meta::v1::Time};
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
    runtime::{Backoff, Changes, Informers, Job, JobError, Next, Setup, Wake},
    telemetry::Shared,
};

mod publish;

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
        metrics: shared.metrics.of::<super::metrics::Metrics>(),
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
    metrics: Arc<super::metrics::Metrics>,
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
        writes += self.release(&p).await?;
        writes += self.fip_statuses(&p, &just_claimed).await?;
        let s = &self.stores;
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
            self.metrics.allocated(&range, waited);
            debug!(range, address, "address claimed");
        }
        Ok((writes, just_claimed))
    }

    /// Releases (a claim whose owner the API server still has is kept: the cache is behind); how many.
    /// A released claim (or one found gone) leaves `created` too: held there while the
    /// cache did not show it, it would be released again every pass, each a 404 (the
    /// claims' watch answered 410 after a freeze in the fault tests, and its relist
    /// came after the release).
    async fn release(&mut self, p: &Pass) -> Result<usize, kube::Error> {
        let mut writes = 0;
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
            let answer = claim_api.delete(&r.claim, &dp).await;
            // Deleted, gone, or another object of that name now: not ours to hold. A
            // failed delete (429, 5xx) keeps it, to be released again.
            if answer.is_ok()
                || matches!(&answer, Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409)
            {
                self.created.remove(&r.claim);
            }
            match answer {
                Ok(_) => {
                    writes += 1;
                    self.metrics.released(&r.range);
                    info!(range = r.range, address = r.address, "released: {}", r.why);
                    if let Some(range) = get(&self.stores.ranges, None, &r.range) {
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
            self.metrics.range(
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
