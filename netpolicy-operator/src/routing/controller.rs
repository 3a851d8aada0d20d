//! The routing controller: ClusterConfig + NodeConfigs + Nodes → one
//! NodeNetworkConfig per node (docs/architecture.md, node agent model), and the policies' status.
//!
//! Shape: a global [`Job`] under the shared runner, because a node's rendering merges
//! every policy that selects it; it uses the change set (netpolicy-core's incremental
//! engine) instead of recomputing the cluster.
//!
//! # Guarantees
//! - Nothing is written before every watched cache has synced (a partial cache would
//!   render nodes without some of their policies).
//! - A node whose policies conflict or are invalid keeps its NodeNetworkConfig as it is
//!   (its last good config); the reasons are logged when the node or a policy changes
//!   (and on each full resync), not on every pass.
//! - NodeNetworkConfigs are written (field manager `netpolicy-operator`) only when their
//!   spec changes, labelled `app.kubernetes.io/managed-by: netpolicy` and owned by their
//!   Node (so the garbage collector removes them with it); ones whose Node is gone are
//!   deleted. A new one is created and a change to ours is an update of the stored
//!   object, which cost the API server a tenth to a quarter less CPU than a server-side
//!   apply; one not labelled or owned as ours is server-side applied ([`Verb`]).
//! - Addresses other jobs need on a node (a Hetzner RoutedIP's address on its holder,
//!   from the RoutedIP's status) are added to that node's rendering with their source
//!   (`RoutedIP/<name>`): when the holder changes, the new holder's NodeNetworkConfig
//!   gains the address and the old holder's loses it in the same pass.
//!
//! # Assumptions
//! Only one instance runs this at a time (the runtime's leader election).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use futures::StreamExt;
use kube::{Api, Client, Resource, ResourceExt, api::PatchParams, runtime::reflector::Store};
use tracing::{debug, info, warn};

use super::rollout::NodeState;
use super::send::get;
use super::writes::Verb;
use super::{PolicyFacts, Routing, status::Applied};
use crate::k8s::traffic::TrafficStores;
use crate::{
    api::{
        ClusterConfig, FloatingIP, FloatingIPRange, NetworkFleet, NetworkRollout, NodeConfig,
        NodeNetworkConfig, NodeNetworkRendering, RoutedIP, RoutedIPIssuer,
    },
    k8s::{CachedNode, labels_fingerprint, sent::digest, spec_fingerprint},
    runtime::{Changes, Informers, InputKinds, Inputs, Job, JobError, Next, Setup},
};

pub(crate) use crate::k8s::FIELD_MANAGER;

/// The pseudo-kind under which an agent's progress (a NodeNetworkConfig's applied or
/// failed revision) reaches the job: it updates the policies' status, and starts a render
/// only while nodes wait for their rollout wave.
const APPLIED: &str = "NodeNetworkConfig/status";

/// The routing job under the shared runner ([`crate::runtime::Runner`]): a global job,
/// because a node's rendering merges every policy that selects it.
///
/// Each pass takes the objects that changed since the last one (keys from the shared
/// informers), brings them into [`Routing`] (netpolicy-core's incremental engine), and
/// compares and writes only the NodeNetworkConfigs of the nodes whose outcome changed
/// or whose object changed. Full passes (the first, a resync, after a failure) compare
/// everything and write nothing when nothing differs.
pub(crate) struct RoutingJob {
    /// The kinds whose changes start a render (declared once, in [`setup`]).
    inputs: InputKinds,
    stores: Stores,
    nnc_api: Api<NodeNetworkConfig>,
    status: super::send::StatusWriter,
    routing: Routing,
    /// What other jobs need on each node ([`crate::k8s::JobItems`]), as last rendered.
    job_items: BTreeMap<String, crate::k8s::JobItems>,
    /// The problems of job items last told (each logged once).
    job_problems: Vec<String>,
    pending: BTreeSet<String>,
    /// Nodes whose rendering is over the size limit: bytes, and the revision it was
    /// measured at (measured again only when the rendering changes).
    too_large: BTreeMap<String, (usize, String)>,
    max_object_bytes: usize,
    /// `--node-cleanup-on-deletion`: false keeps deleted policies' items on the nodes.
    node_cleanup: bool,
    /// `--write-concurrency`: NodeNetworkConfig writes in flight at once.
    write_concurrency: usize,
    /// The last write made per NodeNetworkConfig and the cached version it was made
    /// over: the same write is not sent again until the cache has moved (a cache
    /// behind a broken watch would otherwise have every pass resend it).
    sent: crate::k8s::Sent,
    /// Metrics: NodeNetworkConfigs by state, every policy's rollout.
    metrics: Arc<super::metrics::Metrics>,
    /// `--shared-renderings` (issue 68): what publishes the renderings and the fleet.
    publisher: Option<super::publish::Publisher>,
    /// Shared nodes that report their group's rendering applied (shared renderings).
    on_target: BTreeSet<String>,
    /// Shared nodes that report another rendering applied, with the policies whose
    /// items it has as their target has them ([`super::fleet::Prepared::steady`]).
    steady: BTreeMap<String, super::status::Policies>,
    /// The renderings' prints ([`super::fleet::PrintCache`]).
    prints: super::fleet::PrintCache,
    /// The groups and renderings of the last pass ([`super::shared::shared`]), kept
    /// while a rollout is under way and until an input changes.
    shared_cache: Option<Arc<super::shared::Shared>>,
}

/// The routing job and what wakes it.
pub(crate) fn setup(
    informers: &Informers,
    client: &Client,
    shared: &Arc<crate::telemetry::Shared>,
    max_object_bytes: usize,
    node_cleanup: bool,
    write_concurrency: usize,
    shared_renderings: bool,
) -> Setup<RoutingJob> {
    let mut inputs = Inputs::new();
    let ccs = inputs.read(&informers.get::<ClusterConfig>(), spec_fingerprint);
    let ncs = inputs.read(&informers.get::<NodeConfig>(), spec_fingerprint);
    let nodes = inputs.read(&informers.get::<CachedNode>(), labels_fingerprint);
    // Agents write NodeNetworkConfig status: a spec change or a deletion (someone
    // else's) is compared again; a new applied revision only updates the policies'
    // status (under its own name: not an input).
    let nnc = informers.get::<NodeNetworkConfig>();
    let nncs = inputs.read(&nnc, spec_fingerprint);
    nnc.subscribe_as(inputs.wake(), APPLIED, applied_fingerprint);
    // RoutedIPs: only where their address is held matters here.
    let rips = inputs.read(&informers.get::<RoutedIP>(), holder_fingerprint);
    let issuers = inputs.read(&informers.get::<RoutedIPIssuer>(), spec_fingerprint);
    // Return routing of floating addresses: where kube-vip announces a FloatingIP's
    // address (its Service's vipHost), and the ranges' returnRouting.
    let fips = inputs.read(&informers.get::<FloatingIP>(), fip_fingerprint);
    let ranges = inputs.read(
        &informers.get::<FloatingIPRange>(),
        return_routing_fingerprint,
    );
    let services = inputs.read(
        &informers.get::<k8s_openapi::api::core::v1::Service>(),
        vip_host_fingerprint,
    );
    // Traffic domains: their objects, and what the trench job handed out (the
    // Trenches' status), compiled by crate::trench.
    let traffic = TrafficStores::subscribe(informers, &mut inputs);
    // Shared renderings: the fleet and the renderings as stored (only their coming and
    // going wakes the job: a rendering never changes, the fleet is the job's own).
    let publisher = shared_renderings.then(|| {
        super::publish::Publisher::new(
            client,
            // (Their coming and going: their content is what the job itself wrote.)
            inputs.read(&informers.get::<NetworkFleet>(), |_| String::new()),
            inputs.read(&informers.get::<NetworkRollout>(), |_| String::new()),
            inputs.read(
                &informers.get::<kube::core::PartialObjectMeta<NodeNetworkRendering>>(),
                |_| String::new(),
            ),
        )
    });
    let job = RoutingJob {
        inputs: inputs.kinds(),
        stores: Stores {
            ccs,
            ncs,
            nodes,
            nncs,
            rips,
            issuers,
            fips,
            ranges,
            services,
            traffic,
        },
        nnc_api: Api::all(client.clone()),
        status: super::send::StatusWriter {
            ccs: Api::all(client.clone()),
            ncs: Api::all(client.clone()),
            trench_conflicts: BTreeMap::new(),
            recorder: crate::k8s::recorder(client),
            sent: crate::k8s::Sent::default(),
            written_at: std::sync::Mutex::default(),
        },
        routing: Routing::new(),
        job_items: BTreeMap::new(),
        job_problems: Vec::new(),
        pending: BTreeSet::new(),
        too_large: BTreeMap::new(),
        max_object_bytes,
        node_cleanup,
        write_concurrency: write_concurrency.max(1),
        sent: crate::k8s::Sent::default(),
        metrics: shared.metrics.of::<super::metrics::Metrics>(),
        publisher,
        on_target: BTreeSet::new(),
        steady: BTreeMap::new(),
        prints: super::fleet::PrintCache::new(),
        shared_cache: None,
    };
    inputs.setup(job)
}

impl Job for RoutingJob {
    fn name(&self) -> &'static str {
        "routing"
    }

    async fn pass(&mut self, changes: &Changes) -> Result<Next, JobError> {
        let inputs = changes.full || self.inputs.touched(changes);
        if inputs {
            self.shared_cache = None;
        }
        // Nodes waiting for their wave move on when an agent reports progress; with
        // shared renderings, reports also open the fleet's waves and move nodes to
        // shared objects.
        let waves =
            changes.touched(APPLIED) && (!self.pending.is_empty() || self.publisher.is_some());
        let mut failed = None;
        if inputs || waves {
            debug!(full = changes.full, "routing: render pass");
            match self.render(changes).await {
                Ok(changed) if changed > 0 => {
                    info!(changed, "routing: NodeNetworkConfigs updated");
                }
                Ok(_) => {}
                Err(e) => failed = Some(e),
            }
        }
        let mut facts = self.routing.facts();
        super::rollout::rollout_facts(
            &mut facts,
            &self.pending,
            &self.steady,
            &self.stores.nncs.state(),
        );
        self.too_large_facts(&mut facts);
        self.report_metrics(&facts);
        let applied = self.applied_nodes();
        // (Progress held back is written when it is due: a pass then.)
        let due = self
            .status
            .write_all(&self.stores.ccs, &self.stores.ncs, &applied, &facts)
            .await?;
        self.status
            .trench_events(&self.stores.traffic.trenches, &facts)
            .await;
        match (failed, due) {
            (Some(e), _) => Err(e),
            (None, Some(due)) => Ok(Next::After(due)),
            (None, None) => Ok(Next::Resync),
        }
    }
}

impl RoutingJob {
    /// The nodes whose desired NodeNetworkConfig is applied, what a policy's
    /// `appliedNodes` and `Ready` count: the cached object's revision is the one its
    /// agent applied, no change of the node waits for its rollout wave (its applied
    /// config is the old one), and no write the cache has not seen yet was sent for it
    /// (the cache would still show the old revision, applied). A shared node whose
    /// group is moving to another rendering counts for the policies whose items the
    /// rendering it runs has as they are now ([`Applied::some`]).
    fn applied_nodes(&self) -> Applied {
        let mut out = Applied::default();
        for o in self.stores.nncs.state() {
            let name = o.name_any();
            let state = NodeState::of(Some(&o));
            if self
                .sent
                .waits(&name, o.metadata.resource_version.as_deref())
            {
                continue;
            }
            if o.spec.shared {
                // Its own items applied, under its group's rendering.
                if !state.has_agent || state.in_flight || state.degraded {
                    continue;
                }
                if self.on_target.contains(&name) && !self.pending.contains(&name) {
                    out.all.insert(name);
                } else if let Some(policies) = self.steady.get(&name) {
                    out.some.insert(name, Arc::clone(policies));
                }
            } else if o
                .status
                .as_ref()
                .and_then(|s| s.applied_revision.as_deref())
                == Some(o.spec.revision.as_str())
                && !self.pending.contains(&name)
            {
                out.all.insert(name);
            }
        }
        out
    }

    /// NodeNetworkConfigs by state and every policy's rollout, for `/metrics` (what the
    /// alert rules in `deploy/prometheus` read).
    fn report_metrics(&self, facts: &BTreeMap<String, PolicyFacts>) {
        let mut states: BTreeMap<&str, usize> = ["applied", "progressing", "degraded", "noAgent"]
            .into_iter()
            .map(|w| (w, 0))
            .collect();
        let mut fighting = 0;
        for o in self.stores.nncs.state() {
            *states.entry(NodeState::of(Some(&o)).word()).or_default() += 1;
            let fights = o.status.as_ref().is_some_and(|s| {
                crate::api::conditions::is_true(&s.conditions, crate::api::conditions::FIGHTING)
            });
            fighting += usize::from(fights);
        }
        self.metrics.node_network_configs(&states, fighting);
        self.metrics.policies(facts.iter().map(|(k, f)| {
            (
                k.as_str(),
                !f.degraded.is_empty(),
                f.pending.len(),
                f.conflicts.len(),
            )
        }));
    }

    /// Adds the nodes over the size limit to the facts of every policy that selects
    /// them.
    fn too_large_facts(&self, facts: &mut BTreeMap<String, PolicyFacts>) {
        if self.too_large.is_empty() {
            return;
        }
        for f in facts.values_mut() {
            f.too_large = f
                .matched
                .iter()
                .filter_map(|n| {
                    self.too_large.get(n).map(|(bytes, _)| {
                        format!(
                            "node {n}: {bytes} bytes (limit {}, --max-object-bytes)",
                            self.max_object_bytes
                        )
                    })
                })
                .collect();
        }
    }
}

/// The caches the routing job reads.
struct Stores {
    ccs: Store<ClusterConfig>,
    ncs: Store<NodeConfig>,
    nodes: Store<CachedNode>,
    nncs: Store<NodeNetworkConfig>,
    rips: Store<RoutedIP>,
    issuers: Store<RoutedIPIssuer>,
    fips: Store<FloatingIP>,
    ranges: Store<FloatingIPRange>,
    services: Store<k8s_openapi::api::core::v1::Service>,
    traffic: TrafficStores,
}

/// What of a FloatingIP the routing job reads: its range and address.
fn fip_fingerprint(f: &FloatingIP) -> String {
    format!(
        "{}|{:?}|{}",
        f.spec.range,
        f.status.as_ref().and_then(|s| s.address.as_deref()),
        f.metadata.deletion_timestamp.is_some()
    )
}

/// What of a FloatingIPRange the routing job reads: its return routing.
fn return_routing_fingerprint(r: &FloatingIPRange) -> String {
    format!("{:?}", r.spec.return_routing)
}

/// What of a Service the routing job reads: where kube-vip announces it, and its
/// addresses.
fn vip_host_fingerprint(s: &k8s_openapi::api::core::v1::Service) -> String {
    let a = s.metadata.annotations.as_ref();
    let host = a.and_then(|a| a.get(crate::k8s::job_items::VIP_HOST));
    if host.is_none() {
        return String::new();
    }
    format!(
        "{host:?}|{:?}|{:?}|{:?}",
        a.and_then(|a| a.get(crate::k8s::job_items::LOADBALANCER_IPS)),
        s.spec
            .as_ref()
            .and_then(|sp| sp.load_balancer_ip.as_deref()),
        s.status.as_ref().and_then(|st| st.load_balancer.as_ref())
    )
}

/// What of a RoutedIP the routing job reads: where its address is held.
fn holder_fingerprint(r: &RoutedIP) -> String {
    let st = r.status.as_ref();
    format!(
        "{}|{:?}|{:?}|{}",
        r.spec.issuer_ref.name,
        st.and_then(|s| s.node.as_deref()),
        st.and_then(|s| s.address.as_deref()),
        r.metadata.deletion_timestamp.is_some()
    )
}

/// The names to look at for one (cluster-scoped) kind: the changed ones, or on a full
/// pass every name in the cache and every name known before (so deletions are seen).
fn names<'a, K>(
    changes: &'a Changes,
    kind: &str,
    store: &Store<K>,
    known: impl IntoIterator<Item = &'a str>,
) -> BTreeSet<String>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut out: BTreeSet<String> = changes.of(kind).map(|k| k.name.clone()).collect();
    if changes.full {
        out.extend(store.state().iter().map(|o| o.name_any()));
        out.extend(known.into_iter().map(str::to_owned));
    }
    out
}

/// A NodeNetworkConfig's revision and the revision its agent applied: what a policy's
/// `appliedNodes` is counted from.
fn applied_fingerprint(o: &NodeNetworkConfig) -> String {
    let st = o.status.as_ref();
    format!(
        "{}/{}/{}/{:?}/{:?}/{}",
        o.spec.revision,
        st.and_then(|s| s.applied_revision.as_deref())
            .unwrap_or_default(),
        st.and_then(|s| s.failed_revision.as_deref())
            .unwrap_or_default(),
        st.and_then(|s| s.applied_rendering.as_deref()),
        st.and_then(|s| s.failed_rendering.as_deref()),
        st.is_some_and(|s| s.shared_renderings)
    )
}

impl RoutingJob {
    /// Brings the changed objects (all of them on a full pass) into `routing` and the
    /// job items; returns the nodes whose NodeNetworkConfig may differ (with those that
    /// waited for their rollout wave).
    fn ingest(&mut self, changes: &Changes) -> BTreeSet<String> {
        let Self {
            stores,
            routing,
            job_items,
            job_problems,
            pending,
            ..
        } = self;
        let full = changes.full;
        // Nodes whose change waited for its wave are looked at again.
        let mut dirty: BTreeSet<String> = pending.clone();
        let known_policies: Vec<String> = routing
            .policy_keys()
            .into_iter()
            .map(str::to_owned)
            .collect();
        let known = |prefix: &str| -> Vec<String> {
            known_policies
                .iter()
                .filter_map(|k| k.strip_prefix(prefix).map(str::to_owned))
                .collect()
        };
        let cc_known = known("ClusterConfig/");
        for name in names(
            changes,
            "ClusterConfig",
            &stores.ccs,
            cc_known.iter().map(String::as_str),
        ) {
            let obj = get(&stores.ccs, &name);
            dirty.extend(routing.cluster_config(&name, obj.as_deref()));
            log_problems(routing.errors(&format!("ClusterConfig/{name}")));
        }
        let nc_known = known("NodeConfig/");
        for name in names(
            changes,
            "NodeConfig",
            &stores.ncs,
            nc_known.iter().map(String::as_str),
        ) {
            let obj = get(&stores.ncs, &name);
            dirty.extend(routing.node_config(&name, obj.as_deref()));
            log_problems(routing.errors(&format!("NodeConfig/{name}")));
        }
        // Traffic domains: when any of their objects changed, compile every trench from
        // its objects and the allocation its job recorded (unchanged policies cost a
        // comparison in the engine).
        if full || stores.traffic.kinds.touched(changes) {
            let snap = stores.traffic.snapshot();
            let mut errors = Vec::new();
            let domains = crate::trench::domains(snap.objects(), &mut errors);
            let valid: BTreeSet<String> = domains
                .iter()
                .filter(|d| d.trench.is_some() && crate::trench::validate(d).errors.is_empty())
                .map(crate::trench::Domain::key)
                .collect();
            let status: BTreeMap<String, crate::api::TrenchStatus> = domains
                .iter()
                .filter_map(|d| Some((d.key(), d.trench?.status.clone()?)))
                .collect();
            let policies = crate::trench::policies(&domains, &valid, &status, &mut errors);
            log_problems(&errors);
            dirty.extend(routing.traffic(policies));
        }
        let known_nodes: Vec<String> = routing.nodes().into_iter().map(str::to_owned).collect();
        for name in names(
            changes,
            "Node",
            &stores.nodes,
            known_nodes.iter().map(String::as_str),
        ) {
            let obj = get(&stores.nodes, &name);
            dirty.extend(routing.node(&name, obj.as_ref().map(|n| n.labels())));
            // Gone: its NodeNetworkConfig goes too.
            dirty.insert(name);
        }
        dirty.extend(names(changes, "NodeNetworkConfig", &stores.nncs, []));
        // What other jobs need on nodes (RoutedIP addresses, return routing of floating
        // addresses): the nodes whose set changed.
        let issuers = stores.issuers.state();
        let rips = stores.rips.state();
        let fips = stores.fips.state();
        let ranges = stores.ranges.state();
        let services = stores.services.state();
        let services: Vec<&k8s_openapi::api::core::v1::Service> =
            services.iter().map(AsRef::as_ref).collect();
        let mut problems = Vec::new();
        let now = crate::k8s::job_items(
            rips.iter().map(AsRef::as_ref),
            |n| {
                issuers
                    .iter()
                    .find(|i| i.name_any() == n)
                    .map(AsRef::as_ref)
            },
            fips.iter().map(AsRef::as_ref),
            |n| ranges.iter().find(|r| r.name_any() == n).map(AsRef::as_ref),
            &services,
            &mut problems,
        );
        for p in problems.iter().filter(|p| !job_problems.contains(p)) {
            warn!("return routing not rendered: {p}");
        }
        *job_problems = problems;
        for node in job_items.keys().chain(now.keys()) {
            if job_items.get(node) != now.get(node) {
                dirty.insert(node.clone());
            }
        }
        *job_items = now;
        if full {
            dirty.extend(routing.nodes().into_iter().map(str::to_owned));
        }
        dirty
    }

    /// Shared renderings (`--shared-renderings`): the renderings and the fleet, written
    /// before the node objects (an agent moved to a shared object finds what it runs);
    /// the nodes an agent reported on are compared again. Returns what was prepared
    /// (`None` without shared renderings) and how many writes were made.
    async fn publish_shared(
        &mut self,
        changes: &Changes,
        dirty: &mut BTreeSet<String>,
    ) -> Result<(Option<super::fleet::Prepared>, usize), JobError> {
        let Some(p) = &self.publisher else {
            return Ok((None, 0));
        };
        dirty.extend(changes.of(APPLIED).map(|k| k.name.clone()));
        // The groups and renderings change only with the inputs: a pass on agents'
        // reports alone (a rollout's waves) reuses them instead of merging and
        // serializing every group's rendering again.
        let shared = match &self.shared_cache {
            Some(s) => Arc::clone(s),
            None => {
                let s = Arc::new(super::shared::shared(&self.routing, &self.job_items));
                self.shared_cache = Some(Arc::clone(&s));
                s
            }
        };
        let nncs = &self.stores.nncs;
        let fresh_shared =
            super::fleet::agents_read_shared(nncs.state().iter().map(|o| o.as_ref()));
        let rendered = super::fleet::Rendered {
            routing: &self.routing,
            job_items: &self.job_items,
            shared,
        };
        let prepared = super::fleet::prepare(
            rendered,
            fleet_index(&self.routing, &self.stores.ncs),
            &p.current(),
            &|n| get(nncs, n),
            fresh_shared,
            &mut self.prints,
        );
        // Kept while a rollout is under way (its waves open on reports alone); let go
        // once none is: it holds every group with its members, every node's part and
        // the renderings (~4 MB at 10,000 nodes; the renderings' layers are held once).
        if prepared.published.rollouts.is_empty() {
            self.shared_cache = None;
        }
        let written = p.publish(&prepared, self.write_concurrency).await?;
        Ok((Some(prepared), written))
    }

    /// Brings the changed objects into `routing`, then compares and writes the
    /// NodeNetworkConfigs of the nodes that may differ. Returns how many objects it wrote or
    /// deleted.
    ///
    /// # Errors
    /// The first write that failed (the others are still made); a NodeNetworkConfig over
    /// the size limit is not an error: it is not written, and its policies say so.
    async fn render(&mut self, changes: &Changes) -> Result<usize, JobError> {
        let mut dirty = self.ingest(changes);
        let (prepared, published) = self.publish_shared(changes, &mut dirty).await?;
        let no_own = BTreeMap::new();
        let own = prepared.as_ref().map_or(&no_own, |p| &p.own);
        let Self {
            stores,
            nnc_api: api,
            routing,
            job_items,
            pending,
            too_large,
            max_object_bytes,
            node_cleanup,
            write_concurrency,
            sent,
            ..
        } = self;
        let api = &*api;
        let writes = super::writes::node_writes(
            routing,
            &dirty,
            &super::writes::Cluster {
                existing: &|n| get(&stores.nncs, n),
                node_uid: &|n| {
                    get(&stores.nodes, n)
                        .and_then(|o| o.uid())
                        .unwrap_or_default()
                },
                policy_exists: &|s| match s.kind.as_str() {
                    "ClusterConfig" => get(&stores.ccs, &s.name).is_some(),
                    "NodeConfig" => get(&stores.ncs, &s.name).is_some(),
                    _ => true,
                },
                job_items,
                own,
            },
            super::writes::Limits {
                max_object_bytes: *max_object_bytes,
                node_cleanup: *node_cleanup,
            },
            too_large,
        );
        *too_large = writes.too_large;
        *pending = writes.held_back;
        if let Some(p) = prepared {
            pending.extend(p.waiting);
            self.on_target = p.on_target;
            self.steady = p.steady;
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        // A write already sent over the version the cache still holds is not sent
        // again: the cache has not seen it yet (its watch is behind or broken).
        let mut unseen = 0;
        // (node, object, the cached version it goes over, the verb, the cached copy)
        type ToSend = (
            String,
            Box<serde_json::value::RawValue>,
            Option<String>,
            Verb,
            Option<Arc<NodeNetworkConfig>>,
        );
        let to_send: Vec<ToSend> = writes
            .apply
            .into_iter()
            .filter_map(|(node, obj)| {
                let stored = get(&stores.nncs, &node);
                let over = stored
                    .as_ref()
                    .and_then(|o| o.metadata.resource_version.clone());
                if sent.unseen(&node, digest(obj.get()), over.as_deref()) {
                    unseen += 1;
                    return None;
                }
                let uid = get(&stores.nodes, &node)
                    .and_then(|o| o.uid())
                    .unwrap_or_default();
                let how = super::writes::verb(stored.as_deref(), &uid);
                Some((node, obj, over, how, stored))
            })
            .collect();
        if unseen > 0 {
            debug!(
                unseen,
                "NodeNetworkConfigs written before and not seen back yet: not sent again"
            );
        }
        // Independent objects: written `--write-concurrency` at a time, not one round trip
        // after another; one that fails holds up no other.
        // (node, bytes, the write's digest, the cached version it went over, the answer)
        type Written = (String, usize, u64, Option<String>, Result<(), kube::Error>);
        let results: Vec<Written> = futures::stream::iter(to_send)
            .map(|(node, obj, over, how, stored)| {
                let pp = &pp;
                async move {
                    let bytes = obj.get().len();
                    let what = digest(obj.get());
                    let r = super::send::send(api, &node, &obj, how, stored.as_deref(), pp).await;
                    (node, bytes, what, over, r)
                }
            })
            .buffer_unordered(*write_concurrency)
            .collect()
            .await;
        let mut changed = published;
        let mut first_error: Option<kube::Error> = None;
        for (node, bytes, what, over, r) in results {
            if r.is_ok() {
                sent.record(&node, what, over.as_deref());
            } else {
                sent.forget(&node);
            }
            match r {
                Ok(()) => {
                    debug!(node, "NodeNetworkConfig written");
                    changed += 1;
                }
                // The API server's own limit is lower than ours: the same as too large.
                Err(kube::Error::Api(e)) if e.code == 413 => {
                    warn!(
                        node,
                        bytes,
                        "NodeNetworkConfig refused as too large (413): not retried until it changes"
                    );
                    too_large.insert(node, (bytes, String::new()));
                }
                Err(e) => {
                    warn!(node, error = %e, "NodeNetworkConfig not written");
                    first_error.get_or_insert(e);
                }
            }
        }
        for name in &writes.delete {
            too_large.remove(name);
        }
        let (deleted, error) = super::send::delete(api, &stores.nncs, sent, writes.delete).await;
        changed += deleted;
        if let Some(e) = error {
            first_error.get_or_insert(e);
        }
        // A write the cache moved past (echo, change, object gone) holds nothing back;
        // kept 10 minutes, the 10,000 creates of the nodes' objects were 1.3 MB.
        sent.retain(|n, over| {
            get(&stores.nncs, n)
                .as_ref()
                .and_then(|o| o.metadata.resource_version.as_deref())
                == over
        });
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(changed),
        }
    }
}

/// The policy index of the fleet: every policy the engine holds that can select a
/// node, with its node selector (the ClusterConfig selects every node; a NodeConfig
/// whose selector is invalid selects none and is left out).
fn fleet_index(routing: &Routing, ncs: &Store<NodeConfig>) -> Vec<crate::api::FleetPolicy> {
    let unselectable = routing.unselectable();
    routing
        .policy_keys()
        .into_iter()
        .filter_map(|key| {
            let node_selector = match key.split_once('/')? {
                ("ClusterConfig", crate::api::CLUSTER_CONFIG_NAME) => Default::default(),
                ("NodeConfig", n) if !unselectable.contains(n) => {
                    get(ncs, n)?.spec.node_selector.clone()
                }
                _ => return None,
            };
            Some(crate::api::FleetPolicy {
                policy: key.to_owned(),
                node_selector,
            })
        })
        .collect()
}

/// Logs a policy's problems (once per change of the policy, and on full passes).
fn log_problems(errors: &[crate::k8s::InputError]) {
    for e in errors {
        warn!(kind = %e.kind, name = %e.name, field = %e.field, "{}", e.message);
    }
}
