//! The trench controller: the traffic-domain objects and Nodes → each Trench's status
//! (its tables, its attractors' node addresses, its conduits' prefixes: what
//! [`super::allocate()`] hands out) and every object's `Ready` condition, with Events on
//! the transitions that matter. The routing job compiles the trenches into
//! NodeNetworkConfigs from those statuses.
//!
//! Shape: a global [`Job`] under the shared runner: a trench's allocation reads all of
//! its objects and every node at once.
//!
//! # Guarantees
//! - What a Trench's status hands out stays while it fits: a node keeps its address
//!   while its attractor selects it; a node that leaves frees its own (and nothing
//!   else moves); table numbers stay while their trench and stream exist. The status is
//!   the record, so a restarted operator hands out nothing new.
//! - An invalid trench (any object of it fails validation) keeps its previous status
//!   allocations: nothing is freed or moved until it is fixed, and the routing job holds
//!   its nodes at their last good config.
//! - Statuses are compared before they are written: a pass that found nothing new
//!   writes nothing.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{events::EventType, reflector::Store},
};
use tracing::{debug, info};

use super::{Domain, Outcome};
use crate::{
    api::{
        Attractor, Conduit, Flow, Gateway, Stream, TrafficStatus, Trench, TrenchStatus, Vip,
        conditions::{READY, events, traffic as reason},
    },
    k8s::{
        CachedNode, FIELD_MANAGER, InputError, condition, labels_fingerprint,
        traffic::TrafficStores,
    },
    runtime::{Changes, Informers, Inputs, Job, JobError, Next, Setup, informer::lock},
};

/// The trench job and what wakes it: a global job under the shared runner (a trench's
/// allocation needs all its objects and every node).
pub(crate) fn setup(
    informers: &Informers,
    client: &Client,
    settings: super::meridio::Settings,
) -> Setup<TrenchJob> {
    let mut inputs = Inputs::new();
    let stores = TrafficStores::subscribe(informers, &mut inputs);
    // Limited to one namespace (`--watch-namespace`, Meridio's operator's scope): no
    // Node is read (a namespaced Role cannot list them); only `meridio` trenches are
    // served, `node` trenches need the cluster-wide operator.
    let nodes = informers
        .namespace()
        .is_none()
        .then(|| inputs.read(&informers.get::<CachedNode>(), labels_fingerprint));
    let workloads = super::rollout::Workloads::subscribe(informers, &mut inputs);
    let job = TrenchJob {
        workloads,
        recorder: crate::k8s::recorder(client),
        client: client.clone(),
        stores,
        nodes,
        settings,
        applied: std::sync::Mutex::new(BTreeMap::new()),
        sent: crate::k8s::Sent::default(),
    };
    inputs.setup(job)
}

/// The trench job.
pub(crate) struct TrenchJob {
    client: Client,
    recorder: crate::k8s::events::Recorder,
    stores: TrafficStores,
    /// Nodes (none when limited to one namespace).
    nodes: Option<Store<CachedNode>>,
    /// Images and accounts of Meridio's workloads.
    settings: super::meridio::Settings,
    /// The rollouts of Meridio's workloads (label-selected caches).
    workloads: super::rollout::Workloads,
    /// What was last applied of each Meridio object (`Kind/namespace/name` → the hash
    /// of the object applied): a pass applies only what changed.
    applied: std::sync::Mutex<BTreeMap<String, String>>,
    /// Status writes not seen back yet: not sent again while the cache stays behind.
    sent: crate::k8s::Sent,
}

use crate::k8s::applied::{HASH_ANNOTATION as APPLIED_HASH, hash as hash_of};

impl Job for TrenchJob {
    fn name(&self) -> &'static str {
        "trench"
    }

    async fn pass(&mut self, changes: &Changes) -> Result<Next, JobError> {
        // A full pass (the first, a resync, after a failure) forgets what it applied, so
        // each Meridio object is read once and one deleted by hand is put back; the
        // applied-hash annotation keeps it from writing what is already there.
        if changes.full {
            lock(&self.applied).clear();
        }
        let written = self.run_pass().await?;
        if written > 0 {
            info!(written, "trenches: statuses updated");
        }
        Ok(Next::Resync)
    }
}

/// What a `meridio` trench's pass found about its workloads.
#[derive(Debug, Default)]
struct Deployed {
    /// What cannot be honoured (unknown resource templates), by workload (`Kind/name`).
    problems: BTreeMap<String, Vec<String>>,
    /// Workloads not rolled out, with their owner (`Trench/t`, `Attractor/a`,
    /// `Conduit/c`) and what is missing (`StatefulSet nsp-t: 0/1 ready`).
    pending: Vec<(String, String)>,
}

impl Deployed {
    /// The pending workloads of `owner` (`Kind/name`), or all with `None`.
    fn pending_of(&self, owner: Option<&str>) -> Vec<&str> {
        self.pending
            .iter()
            .filter(|(o, _)| owner.is_none_or(|w| w == o))
            .map(|(_, m)| m.as_str())
            .collect()
    }
}

/// The problems reported about one object (`Kind`, `namespace/name`).
type ByObject = BTreeMap<(String, String), Vec<String>>;

fn by_object(list: &[InputError]) -> ByObject {
    let mut m: ByObject = BTreeMap::new();
    for e in list {
        m.entry((e.kind.clone(), e.name.clone()))
            .or_default()
            .push(format!("{}: {}", e.field, e.message));
    }
    m
}

fn key_of<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.as_deref().unwrap_or_default(),
        o.meta().name.as_deref().unwrap_or_default()
    )
}

impl TrenchJob {
    /// One pass over every trench: validate, allocate from the current statuses, write
    /// the statuses and conditions that differ. Returns how many were written.
    async fn run_pass(&self) -> Result<usize, kube::Error> {
        let snap = self.stores.snapshot();
        let mut errors = Vec::new();
        let domains = super::domains(snap.objects(), &mut errors);
        let nodes: Vec<(String, netpolicy_core::selector::Labels)> = self
            .nodes
            .iter()
            .flat_map(Store::state)
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
        let previous: BTreeMap<String, TrenchStatus> = domains
            .iter()
            .filter_map(|d| Some((d.key(), d.trench?.status.clone()?)))
            .collect();
        let mut outcome = super::evaluate(&domains, &nodes, &previous);
        outcome.errors.extend(errors);
        let errors = by_object(&outcome.errors);
        let notes = by_object(&outcome.notes);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let mut written = 0;
        for d in &domains {
            // Every child of an existing Trench is owned by it, valid or not, whatever
            // its data plane: deleting the Trench removes them (issue 40: the children
            // of a Trench that never became valid stayed behind).
            written += self.owned_by_trench(d).await?;
            // Meridio's workloads before the statuses that report them.
            let deployed = if !d.node_mode() && outcome.valid.contains(&d.key()) {
                let (n, problems) = self.meridio(d).await?;
                written += n;
                Some(problems)
            } else {
                None
            };
            // Children first: a Trench that reads Ready has children that say so too.
            written += self
                .children(d, &outcome, &errors, &notes, deployed.as_ref(), &now)
                .await?;
            written += self
                .trench(d, &outcome, &previous, &errors, deployed.as_ref(), &now)
                .await?;
        }
        written += self.unlabelled(&snap, &errors, &now).await?;
        Ok(written)
    }

    /// Keeps a `meridio` trench's workloads and ConfigMap (server-side apply, only
    /// what changed since the last apply: a quiet pass writes nothing). Returns the
    /// writes and what [`Deployed`] reports.
    async fn meridio(&self, d: &Domain<'_>) -> Result<(usize, Deployed), kube::Error> {
        use super::rollout::State;
        let mut out = Deployed::default();
        let objects = super::meridio::workloads(d, &self.settings, &mut out.problems);
        let mut written = 0;
        // Meridio's `update-sync-group` on Conduits: of the proxy DaemonSets of one
        // group, one is updated at a time, the next only once it has rolled out. Which
        // DaemonSet holds each group: the one rolling out now.
        let groups: BTreeMap<String, String> = d
            .conduits
            .iter()
            .filter_map(|c| {
                let g = c.annotations().get(super::meridio::UPDATE_SYNC_GROUP)?;
                Some((format!("proxy-{}", c.name_any()), g.clone()))
            })
            .collect();
        let mut holders: BTreeMap<String, String> = BTreeMap::new();
        for (ds, g) in &groups {
            if matches!(
                self.workloads.state("DaemonSet", &d.namespace, ds),
                Some(State::Pending(_))
            ) {
                holders.entry(g.clone()).or_insert_with(|| ds.clone());
            }
        }
        for mut obj in objects {
            let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let Some((ar, _)) = crate::k8s::applied::resource(&kind) else {
                continue;
            };
            let key = format!("{kind}/{}/{name}", d.namespace);
            let hash = hash_of(&obj);
            obj["metadata"]["annotations"] = serde_json::json!({APPLIED_HASH: hash});
            // Whose rollout this is: the owner named in its ownerReference.
            let owner = obj["metadata"]["ownerReferences"][0]
                .as_object()
                .map(|r| {
                    format!(
                        "{}/{}",
                        r["kind"].as_str().unwrap_or_default(),
                        r["name"].as_str().unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            let state = self.workloads.state(&kind, &d.namespace, &name);
            if state == Some(State::Absent) {
                // Deleted (or never made): the memo must not keep it from being put back.
                lock(&self.applied).remove(&key);
            }
            let pending = |what: String| (owner.clone(), format!("{kind} {name}: {what}"));
            match &state {
                Some(State::Pending(why)) => out.pending.push(pending(why.clone())),
                Some(State::Absent) => out
                    .pending
                    .push(pending("applied, not observed yet".into())),
                Some(State::Ready) | None => {}
            }
            let known = lock(&self.applied).get(&key).cloned();
            if known.as_deref() == Some(hash.as_str()) {
                continue;
            }
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(self.client.clone(), &d.namespace, &ar);
            if known.is_none()
                && let Some(live) = api.get_opt(&name).await?
                && live.annotations().get(APPLIED_HASH) == Some(&hash)
            {
                lock(&self.applied).insert(key, hash);
                continue;
            }
            // An update (not a creation) waits while another DaemonSet of its group rolls
            // out; the rollout's end wakes this job (the DaemonSets are watched).
            let group = (kind == "DaemonSet").then(|| groups.get(&name)).flatten();
            if let Some(g) = group
                && state != Some(State::Absent)
                && let Some(holder) = holders.get(g).filter(|h| **h != name)
            {
                debug!(
                    object = key,
                    group = g,
                    holder,
                    "meridio: update waits for its sync group"
                );
                out.pending.push(pending(format!(
                    "update waits for DaemonSet {holder} of update-sync-group {g:?} to roll out"
                )));
                continue;
            }
            let o: kube::api::DynamicObject =
                serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
            api.patch(
                &name,
                &kube::api::PatchParams::apply(FIELD_MANAGER).force(),
                &kube::api::Patch::Apply(&o),
            )
            .await?;
            debug!(object = key, "meridio: applied");
            lock(&self.applied).insert(key, hash);
            written += 1;
            if let Some(g) = group {
                holders.entry(g.clone()).or_insert_with(|| name.clone());
            }
        }
        Ok((written, out))
    }

    /// As Meridio's operator: every child of a trench (Attractor, Conduit, Gateway, Vip,
    /// Stream, Flow), valid or not, gets a (non-controller) ownerReference to its Trench,
    /// so that deleting the Trench removes them and, through the Attractors' and
    /// Conduits', their workloads. Written once per object.
    async fn owned_by_trench(&self, d: &Domain<'_>) -> Result<usize, kube::Error> {
        let Some(uid) = d.trench.and_then(|t| t.metadata.uid.clone()) else {
            return Ok(0);
        };
        let reference = serde_json::json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "Trench", "name": d.name, "uid": uid,
        });
        let pending =
            |refs: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
                let mut list: Vec<serde_json::Value> = refs
                    .iter()
                    .flatten()
                    .filter_map(|r| serde_json::to_value(r).ok())
                    .collect();
                if list.iter().any(|r| r["uid"] == uid.as_str()) {
                    return None;
                }
                list.push(reference.clone());
                Some(serde_json::json!({"metadata": {"ownerReferences": list}}))
            };
        let mut written = 0;
        let pp = kube::api::PatchParams::default();
        macro_rules! each {
            ($list:expr, $ty:ty) => {
                for o in &$list {
                    if let Some(patch) = pending(&o.metadata.owner_references) {
                        Api::<$ty>::namespaced(self.client.clone(), &d.namespace)
                            .patch(&o.name_any(), &pp, &kube::api::Patch::Merge(&patch))
                            .await?;
                        written += 1;
                    }
                }
            };
        }
        each!(d.attractors, Attractor);
        each!(d.conduits, Conduit);
        each!(d.gateways, Gateway);
        each!(d.vips, Vip);
        each!(d.streams, Stream);
        each!(d.flows, Flow);
        Ok(written)
    }

    /// Writes a Trench's status when it differs, with Events for its `Ready`
    /// transitions and for node addresses handed out or freed.
    async fn trench(
        &self,
        d: &Domain<'_>,
        outcome: &Outcome,
        previous: &BTreeMap<String, TrenchStatus>,
        errors: &ByObject,
        deployed: Option<&Deployed>,
        now: &Time,
    ) -> Result<usize, kube::Error> {
        let Some(t) = d.trench else { return Ok(0) };
        let key = d.key();
        let current = t.status.clone().unwrap_or_default();
        let mut next = outcome.allocations.get(&key).cloned().unwrap_or_default();
        next.observed_generation = t.metadata.generation;
        let mine = errors.get(&("Trench".to_owned(), key.clone()));
        let all: Vec<String> = errors
            .iter()
            .filter(|((_, n), _)| {
                n.split_once('/').is_some_and(|(ns, _)| ns == d.namespace)
                    && d.objects().any(|o| o == *n)
            })
            .flat_map(|((k, n), es)| es.iter().map(move |e| format!("{k} {n}: {e}")))
            .collect();
        let exhausted = mine.is_some_and(|es| es.iter().any(|e| e.contains("left")));
        let (ok, why, message) = if let Some(deployed) = deployed {
            let pending = deployed.pending_of(None);
            if !deployed.problems.is_empty() {
                (
                    false,
                    reason::UNKNOWN_RESOURCE_TEMPLATE,
                    deployed
                        .problems
                        .iter()
                        .map(|(o, ps)| format!("{o}: {}", ps.join("; ")))
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            } else if !pending.is_empty() {
                (
                    false,
                    reason::WORKLOADS_NOT_READY,
                    format!(
                        "Meridio's workloads applied, not all ready: {}",
                        pending.join("; ")
                    ),
                )
            } else {
                (
                    true,
                    reason::DEPLOYED,
                    format!(
                        "Meridio's workloads ready: ConfigMap {}, nsp and ipam, {} attractor(s), {} conduit(s)",
                        super::meridio::config_map_name(&d.name),
                        d.attractors.len(),
                        d.conduits.len()
                    ),
                )
            }
        } else if outcome.valid.contains(&key) && !exhausted {
            (
                true,
                reason::COMPILED,
                "compiled into its attractor nodes' routing".to_owned(),
            )
        } else if exhausted {
            (
                false,
                reason::EXHAUSTED,
                mine.map(|m| m.join("; ")).unwrap_or_default(),
            )
        } else {
            (
                false,
                reason::INVALID,
                format!(
                    "not compiled (its nodes keep their last good config): {}",
                    first(&all)
                ),
            )
        };
        next.conditions = vec![condition(
            &current.conditions,
            READY,
            ok,
            why,
            message.clone(),
            t.metadata.generation,
            now,
        )];
        if next == current || self.sent.status_unseen(t, &next) {
            return Ok(0);
        }
        let was_ok = crate::api::conditions::find(&current.conditions, READY)
            .map(|c| c.status == crate::api::conditions::STATUS_TRUE);
        if was_ok != Some(ok) {
            self.event(t, ok, if ok { events::COMPILED } else { why }, message)
                .await;
        }
        let before = previous.get(&key).cloned().unwrap_or_default();
        for (attractor, nodes) in &next.node_addresses {
            for (node, addrs) in nodes {
                if before
                    .node_addresses
                    .get(attractor)
                    .and_then(|m| m.get(node))
                    != Some(addrs)
                {
                    self.event(
                        t,
                        true,
                        events::ADDRESS_ASSIGNED,
                        format!("node {node} on attractor {attractor}: {}", addrs.join(", ")),
                    )
                    .await;
                }
            }
        }
        for (attractor, nodes) in &before.node_addresses {
            for (node, addrs) in nodes {
                if next
                    .node_addresses
                    .get(attractor)
                    .and_then(|m| m.get(node))
                    .is_none()
                {
                    self.event(
                        t,
                        true,
                        events::ADDRESS_FREED,
                        format!(
                            "node {node} left attractor {attractor}: {} freed",
                            addrs.join(", ")
                        ),
                    )
                    .await;
                }
            }
        }
        let api: Api<Trench> = Api::namespaced(self.client.clone(), &d.namespace);
        let written = self
            .sent
            .apply_status(&api, FIELD_MANAGER, t, &next)
            .await?;
        debug!(trench = key, "trench status written");
        Ok(usize::from(written))
    }

    /// The children's `Ready` conditions.
    async fn children(
        &self,
        d: &Domain<'_>,
        outcome: &Outcome,
        errors: &ByObject,
        notes: &ByObject,
        deployed: Option<&Deployed>,
        now: &Time,
    ) -> Result<usize, kube::Error> {
        let valid = outcome.valid.contains(&d.key());
        let trench_state = if d.trench.is_none() {
            Some((
                reason::NO_TRENCH,
                format!(
                    "trench {:?} does not exist in namespace {:?}",
                    d.name, d.namespace
                ),
            ))
        } else if !valid {
            Some((
                reason::INVALID,
                format!("trench {:?} is not compiled: see its status", d.name),
            ))
        } else {
            None
        };
        let verdict = |kind: &str,
                       o: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta|
         -> (bool, &'static str, String) {
            let k = (
                kind.to_owned(),
                format!("{}/{}", d.namespace, o.name.as_deref().unwrap_or_default()),
            );
            if let Some(es) = errors.get(&k) {
                let why = if d.trench.is_none() {
                    reason::NO_TRENCH
                } else {
                    reason::INVALID
                };
                return (false, why, es.join("; "));
            }
            if let Some((why, m)) = &trench_state {
                return (false, why, m.clone());
            }
            let name = o.name.as_deref().unwrap_or_default();
            if let Some(deployed) = deployed {
                // `meridio` data plane: Attractors and Conduits own workloads; the
                // other kinds are configuration Meridio's components read.
                if kind == "Attractor" || kind == "Conduit" {
                    let owner = format!("{kind}/{name}");
                    if let Some(ps) = deployed.problems.get(&owner) {
                        return (false, reason::UNKNOWN_RESOURCE_TEMPLATE, ps.join("; "));
                    }
                    let pending = deployed.pending_of(Some(&owner));
                    return if pending.is_empty() {
                        (true, reason::DEPLOYED, "its workloads are ready".into())
                    } else {
                        (false, reason::WORKLOADS_NOT_READY, pending.join("; "))
                    };
                }
                let in_map = format!(
                    "in ConfigMap {}, read by Meridio's components",
                    super::meridio::config_map_name(&d.name)
                );
                return match notes.get(&k) {
                    Some(ns) if kind != "Gateway" => (true, reason::UNUSED, ns.join("; ")),
                    _ => (true, reason::CONFIGURED, in_map),
                };
            }
            if let Some(ns) = notes.get(&k)
                && kind == "Vip"
                && ns.iter().all(|n| n.starts_with("spec.address"))
            {
                // Compiled, with a caveat about what it does on the node.
                return (
                    true,
                    reason::COMPILED,
                    format!(
                        "compiled into its attractor nodes' routing; {}",
                        ns.join("; ")
                    ),
                );
            }
            if let Some(ns) = notes.get(&k) {
                let why = if kind == "Gateway" {
                    reason::NOT_PROGRAMMABLE
                } else {
                    reason::UNUSED
                };
                return (kind != "Gateway", why, ns.join("; "));
            }
            (
                true,
                reason::COMPILED,
                "compiled into its attractor nodes' routing".into(),
            )
        };
        let mut n = 0;
        macro_rules! each {
            ($list:expr, $kind:literal, $ty:ty) => {
                for o in &$list {
                    let (ok, why, msg) = verdict($kind, &o.metadata);
                    n += self
                        .child::<$ty>(o, o.status.as_ref(), ok, why, msg, now)
                        .await?;
                }
            };
        }
        each!(d.attractors, "Attractor", Attractor);
        each!(d.gateways, "Gateway", Gateway);
        each!(d.vips, "Vip", Vip);
        each!(d.conduits, "Conduit", Conduit);
        each!(d.streams, "Stream", Stream);
        each!(d.flows, "Flow", Flow);
        Ok(n)
    }

    /// Objects without a trench label: `Ready` False naming the label.
    async fn unlabelled(
        &self,
        snap: &crate::k8s::traffic::TrafficSnapshot,
        errors: &ByObject,
        now: &Time,
    ) -> Result<usize, kube::Error> {
        let mut n = 0;
        macro_rules! each {
            ($list:expr, $kind:literal, $ty:ty) => {
                for o in &$list {
                    let has = o
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(crate::api::TRENCH_LABEL))
                        .is_some_and(|t| !t.is_empty());
                    if has {
                        continue;
                    }
                    let msg = errors
                        .get(&($kind.to_owned(), key_of(o)))
                        .map(|e| e.join("; "))
                        .unwrap_or_default();
                    n += self
                        .child::<$ty>(o, o.status.as_ref(), false, reason::NO_TRENCH, msg, now)
                        .await?;
                }
            };
        }
        each!(snap.attractors, "Attractor", Attractor);
        each!(snap.gateways, "Gateway", Gateway);
        each!(snap.vips, "Vip", Vip);
        each!(snap.conduits, "Conduit", Conduit);
        each!(snap.streams, "Stream", Stream);
        each!(snap.flows, "Flow", Flow);
        Ok(n)
    }

    /// Writes one child's `Ready` condition when it differs; an Event when it turns
    /// False (or back).
    async fn child<K>(
        &self,
        o: &K,
        status: Option<&TrafficStatus>,
        ok: bool,
        why: &str,
        message: String,
        now: &Time,
    ) -> Result<usize, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let current = status.cloned().unwrap_or_default();
        let next = TrafficStatus {
            observed_generation: o.meta().generation,
            conditions: vec![condition(
                &current.conditions,
                READY,
                ok,
                why,
                message.clone(),
                o.meta().generation,
                now,
            )],
        };
        if next == current || self.sent.status_unseen(o, &next) {
            return Ok(0);
        }
        let was = crate::api::conditions::find(&current.conditions, READY).map(|c| {
            (
                c.status == crate::api::conditions::STATUS_TRUE,
                c.reason.clone(),
            )
        });
        if was.as_ref().map(|(s, r)| (*s, r.as_str())) != Some((ok, why)) {
            self.event(o, ok || why == reason::NOT_PROGRAMMABLE, why, message)
                .await;
        }
        let api: Api<K> = Api::namespaced(
            self.client.clone(),
            o.meta().namespace.as_deref().unwrap_or_default(),
        );
        Ok(usize::from(
            self.sent
                .apply_status(&api, FIELD_MANAGER, o, &next)
                .await?,
        ))
    }

    async fn event<K: Resource<DynamicType = ()>>(
        &self,
        o: &K,
        normal: bool,
        why: &str,
        note: String,
    ) {
        let type_ = if normal {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.recorder.tell(o, type_, "Compile", why, note).await;
    }
}

fn first(list: &[String]) -> String {
    match list {
        [] => String::new(),
        [one] => one.clone(),
        [one, rest @ ..] => format!("{one} (and {} more)", rest.len()),
    }
}

impl Domain<'_> {
    /// `namespace/name` of every object of the domain.
    fn objects(&self) -> impl Iterator<Item = String> + '_ {
        self.trench
            .map(key_of)
            .into_iter()
            .chain(self.attractors.iter().map(|o| key_of(*o)))
            .chain(self.gateways.iter().map(|o| key_of(*o)))
            .chain(self.vips.iter().map(|o| key_of(*o)))
            .chain(self.conduits.iter().map(|o| key_of(*o)))
            .chain(self.streams.iter().map(|o| key_of(*o)))
            .chain(self.flows.iter().map(|o| key_of(*o)))
    }
}
