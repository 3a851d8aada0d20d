//! The controllers the operator runs while it holds the lease.
//!
//! `routing`: ClusterConfig + NodeConfigs + Nodes → one NodeNetworkConfig per node
//! (DESIGN.md, node agent model).
//!
//! # Guarantees
//! - Nothing is written before every watched cache has synced (a partial cache would
//!   render nodes without some of their policies).
//! - A node whose policies conflict or are invalid keeps its NodeNetworkConfig as it is
//!   (its last good config); the reasons are logged each pass.
//! - NodeNetworkConfigs are written with server-side apply (field manager
//!   `netpolicy-operator`) only when their spec changes, labelled
//!   `app.kubernetes.io/managed-by: netpolicy` and owned by their Node (so the garbage
//!   collector removes them with it); ones whose Node is gone are deleted.
//!
//! # Assumptions
//! Only one instance runs this at a time (the runtime's leader election).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{reflector, reflector::Store},
};
use netpolicy_core::{
    merge::{Engine, NodeOutcome},
    spec::RenderedSpec,
};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use kube::{
    Resource,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

use super::{
    PolicyFacts, carried_from, cluster_config_policy, new_conflicts, node_config_policy,
    policy_facts, policy_status, revision,
};
use crate::{
    api::{ClusterConfig, NodeConfig, NodeNetworkConfig, NodeNetworkConfigSpec, PolicyStatus},
    k8s::{labels_fingerprint, spec_fingerprint, watched},
    runtime::Shared,
};

pub use crate::k8s::{FIELD_MANAGER, MANAGED_BY};

/// Runs the controllers until `stop` turns true.
///
/// # Errors
/// Only when the controllers cannot start.
pub async fn run(
    client: Client,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let (poke, mut poked) = mpsc::channel::<()>(1);
    let (status_poke, mut status_poked) = mpsc::channel::<()>(1);
    let (ccs, s1) = watched(
        Api::<ClusterConfig>::all(client.clone()),
        poke.clone(),
        spec_fingerprint,
        None,
    );
    let (ncs, s2) = watched(
        Api::<NodeConfig>::all(client.clone()),
        poke.clone(),
        spec_fingerprint,
        None,
    );
    let (nodes, s3) = watched(
        Api::<Node>::all(client.clone()),
        poke.clone(),
        labels_fingerprint,
        None,
    );
    // Agents write NodeNetworkConfig status: a spec change or a deletion (someone
    // else's) re-renders; a new applied revision only updates the policies' status.
    let (nncs, s4) = watched(
        Api::<NodeNetworkConfig>::all(client.clone()),
        poke,
        spec_fingerprint,
        Some((status_poke, applied_fingerprint)),
    );
    let drive = tokio::spawn(futures::stream::select_all([s1, s2, s3, s4]).for_each(|()| async {}));
    let synced = async {
        for r in [
            ccs.wait_until_ready().await,
            ncs.wait_until_ready().await,
            nodes.wait_until_ready().await,
            nncs.wait_until_ready().await,
        ] {
            r?;
        }
        Ok::<(), reflector::store::WriterDropped>(())
    };
    tokio::select! {
        r = synced => r?,
        _ = stop.changed() => { drive.abort(); return Ok(()); }
    }
    shared
        .synced
        .store(true, std::sync::atomic::Ordering::Release);
    info!("caches synced: routing controller running");
    let nnc_api = Api::<NodeNetworkConfig>::all(client.clone());
    let status = StatusWriter {
        ccs: Api::all(client.clone()),
        ncs: Api::all(client.clone()),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "netpolicy-operator".into(),
                instance: None,
            },
        ),
    };
    let mut facts: Option<BTreeMap<String, PolicyFacts>> = None;
    let mut render = true;
    loop {
        let start = Instant::now();
        let mut ok = true;
        if render {
            debug!("routing: render pass");
            match reconcile(&ccs, &ncs, &nodes, &nncs, &nnc_api).await {
                Ok((changed, f)) => {
                    if changed > 0 {
                        info!(changed, "routing: NodeNetworkConfigs updated");
                    }
                    facts = Some(f);
                }
                Err(e) => {
                    warn!(error = %e, "routing: reconcile failed; retrying");
                    ok = false;
                }
            }
            shared.metrics.reconciled("routing", start.elapsed(), ok);
        }
        if let Some(f) = &facts {
            debug!("routing: status pass");
            let start = Instant::now();
            let written = status.write_all(&ccs, &ncs, &nncs, f).await;
            if let Err(e) = &written {
                warn!(error = %e, "routing: writing policy status failed; retrying");
                ok = false;
            }
            shared
                .metrics
                .reconciled("routing-status", start.elapsed(), written.is_ok());
        }
        // Wait for a change (or retry a failure); coalesce bursts of events.
        let wait = if ok {
            Duration::from_secs(300)
        } else {
            Duration::from_secs(2)
        };
        render = !ok;
        tokio::select! {
            _ = stop.changed() => break,
            _ = poked.recv() => render = true,
            _ = status_poked.recv() => {}
            () = tokio::time::sleep(wait) => render = true,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        while poked.try_recv().is_ok() {
            render = true;
        }
        while status_poked.try_recv().is_ok() {}
    }
    drive.abort();
    info!("routing controller stopped");
    Ok(())
}

/// NodeNetworkConfig writes in flight at once.
const WRITE_CONCURRENCY: usize = 16;

/// A NodeNetworkConfig's revision and the revision its agent applied: what a policy's
/// `appliedNodes` is counted from.
fn applied_fingerprint(o: &NodeNetworkConfig) -> String {
    format!(
        "{}/{}",
        o.spec.revision,
        o.status
            .as_ref()
            .and_then(|s| s.applied_revision.as_deref())
            .unwrap_or_default()
    )
}

/// Writes ClusterConfig and NodeConfig status, and an Event per new conflict.
struct StatusWriter {
    ccs: Api<ClusterConfig>,
    ncs: Api<NodeConfig>,
    recorder: Recorder,
}

impl StatusWriter {
    /// Computes every policy's status and writes those that changed.
    ///
    /// # Guarantees
    /// A policy whose status is unchanged is not written (no `lastTransitionTime`
    /// bump); a quiet cluster costs no write.
    async fn write_all(
        &self,
        ccs: &Store<ClusterConfig>,
        ncs: &Store<NodeConfig>,
        nncs: &Store<NodeNetworkConfig>,
        facts: &BTreeMap<String, PolicyFacts>,
    ) -> Result<(), kube::Error> {
        let applied: BTreeSet<String> = nncs
            .state()
            .iter()
            .filter(|o| {
                o.status
                    .as_ref()
                    .and_then(|s| s.applied_revision.as_deref())
                    == Some(o.spec.revision.as_str())
            })
            .map(|o| o.name_any())
            .collect();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let none = PolicyFacts::default();
        for cc in ccs.state() {
            let f = facts
                .get(&format!("ClusterConfig/{}", cc.name_any()))
                .unwrap_or(&none);
            let n = f.matched.iter().filter(|n| applied.contains(*n)).count();
            let current = cc.status.clone().unwrap_or_default();
            let next = policy_status(&current, cc.metadata.generation, f, n, &now);
            self.write(&self.ccs, cc.as_ref(), &current, next).await?;
        }
        for nc in ncs.state() {
            let f = facts
                .get(&format!("NodeConfig/{}", nc.name_any()))
                .unwrap_or(&none);
            let n = f.matched.iter().filter(|n| applied.contains(*n)).count();
            let current = nc.status.clone().unwrap_or_default();
            let next = policy_status(&current, nc.metadata.generation, f, n, &now);
            self.write(&self.ncs, nc.as_ref(), &current, next).await?;
        }
        Ok(())
    }

    async fn write<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        current: &PolicyStatus,
        next: PolicyStatus,
    ) -> Result<(), kube::Error>
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    {
        if next == *current {
            return Ok(());
        }
        let name = obj.name_any();
        for c in new_conflicts(current, &next) {
            let event = Event {
                type_: EventType::Warning,
                reason: "Conflict".into(),
                note: Some(format!(
                    "node {}: {} is defined differently by {} (the node keeps its last good \
                     config)",
                    c.node,
                    c.item,
                    c.sources.join(" and ")
                )),
                action: "Render".into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
                warn!(error = %e, name, "could not record a conflict Event");
            }
        }
        let patch = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": next,
        });
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        debug!(name, "policy status written");
        Ok(())
    }
}

/// One pass over the caches; returns how many objects it wrote or deleted, and what it
/// found about each policy.
async fn reconcile(
    ccs: &Store<ClusterConfig>,
    ncs: &Store<NodeConfig>,
    nodes: &Store<Node>,
    nncs: &Store<NodeNetworkConfig>,
    api: &Api<NodeNetworkConfig>,
) -> Result<(usize, BTreeMap<String, PolicyFacts>), kube::Error> {
    let mut errors = Vec::new();
    let mut policies: Vec<_> = ccs
        .state()
        .iter()
        .filter_map(|cc| cluster_config_policy(cc, &mut errors))
        .collect();
    let nc_list = ncs.state();
    policies.extend(nc_list.iter().map(|nc| node_config_policy(nc, &mut errors)));
    // A NodeConfig whose selector is broken selects nothing; the nodes that still
    // carry its items keep their last good config until it is fixed or deleted.
    let unselectable: BTreeSet<String> = nc_list
        .iter()
        .filter(|nc| nc.spec.node_selector.validate("spec.nodeSelector").is_err())
        .map(|nc| nc.name_any())
        .collect();
    for e in &errors {
        warn!(kind = %e.kind, name = %e.name, field = %e.field, "{}", e.message);
    }
    let node_list = nodes.state();
    let node_labels: Vec<(String, netpolicy_core::selector::Labels)> = node_list
        .iter()
        .map(|n| (n.name_any(), n.labels().clone()))
        .collect();
    let engine = Engine::build(node_labels.clone(), policies.clone());
    let facts = policy_facts(&policies, &node_labels, engine.outcomes(), &errors);
    let existing: BTreeMap<String, Arc<NodeNetworkConfig>> = nncs
        .state()
        .into_iter()
        .map(|o| (o.name_any(), o))
        .collect();
    let uids: BTreeMap<String, String> = node_list
        .iter()
        .map(|n| (n.name_any(), n.uid().unwrap_or_default()))
        .collect();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let mut changed = 0;
    let mut present = BTreeSet::new();
    let mut writes: Vec<(String, serde_json::Value)> = Vec::new();
    for (node, outcome) in engine.outcomes() {
        present.insert(node.to_owned());
        match outcome {
            NodeOutcome::Rendered(cfg) => {
                if let Some(o) = existing.get(node)
                    && let Some(held_by) = carried_from(&o.spec, &unselectable)
                {
                    warn!(
                        node,
                        "held at its last good config: NodeConfig/{held_by} has an invalid \
                         nodeSelector"
                    );
                    continue;
                }
                let rendered = RenderedSpec::from_merged(cfg);
                let spec = NodeNetworkConfigSpec {
                    revision: revision(&rendered),
                    rendered,
                };
                if existing.get(node).is_some_and(|o| o.spec == spec) {
                    continue;
                }
                let obj = json!({
                    "apiVersion": "netpolicy.io/v1alpha1",
                    "kind": "NodeNetworkConfig",
                    "metadata": {
                        "name": node,
                        "labels": {MANAGED_BY.0: MANAGED_BY.1},
                        "ownerReferences": [{
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": node,
                            "uid": uids.get(node).cloned().unwrap_or_default(),
                        }],
                    },
                    "spec": spec,
                });
                writes.push((node.to_owned(), obj));
            }
            NodeOutcome::Held(problems) => {
                for p in problems.iter() {
                    warn!(node, "held at its last good config: {p}");
                }
            }
        }
    }
    // Independent objects: written WRITE_CONCURRENCY at a time, not one round trip
    // after another.
    let written: Vec<()> = futures::stream::iter(writes)
        .map(|(node, obj)| {
            let pp = &pp;
            async move {
                api.patch(&node, pp, &Patch::Apply(&obj)).await?;
                debug!(node, "NodeNetworkConfig applied");
                Ok::<(), kube::Error>(())
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .try_collect()
        .await?;
    changed += written.len();
    for (name, o) in &existing {
        let ours = o.labels().get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1);
        if ours && !present.contains(name) {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => changed += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok((changed, facts))
}
