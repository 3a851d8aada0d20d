//! What the routing job sends: a NodeNetworkConfig write carried out by the verb
//! [`super::writes::verb`] chose, with the server-side apply it falls back to; deletes;
//! the policies' statuses and conflict Events. The controller decides, this file calls
//! the API server.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::reflector::{ObjectRef, Store},
};
use tracing::debug;

use super::{PolicyFacts, policy_status, writes::Verb};
use crate::{
    api::{ClusterConfig, NodeConfig, NodeNetworkConfig, PolicyStatus},
    k8s::{FIELD_MANAGER, sent::digest},
};

/// Writes `obj`, the NodeNetworkConfig of `node`, by `how` (over `stored`, the cache's
/// copy, for an update). A create that finds one stored after all (the cache was behind),
/// an update over a version that is no longer the stored one (an agent's status write
/// came in between) or of one gone are applied instead, in the same call: the outcome is
/// the apply's whichever verb was tried.
pub(crate) async fn send(
    api: &Api<NodeNetworkConfig>,
    node: &str,
    obj: &serde_json::value::RawValue,
    how: Verb,
    stored: Option<&NodeNetworkConfig>,
    apply: &PatchParams,
) -> Result<(), kube::Error> {
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let ours = || serde_json::from_str::<NodeNetworkConfig>(obj.get()).ok();
    let tried = match (how, stored) {
        (Verb::Create, _) => match ours() {
            Some(o) => Some(api.create(&pp, &o).await),
            None => None,
        },
        (Verb::Update, Some(stored)) => match ours() {
            // The stored object as the cache has it (its managedFields are not sent: the
            // API server keeps them), with our spec; a status sent with an update is
            // ignored (it is a subresource).
            Some(o) => {
                let mut next = stored.clone();
                next.spec = o.spec;
                next.status = None;
                Some(api.replace(node, &pp, &next).await)
            }
            None => None,
        },
        _ => None,
    };
    match tried {
        Some(Ok(_)) => Ok(()),
        Some(Err(kube::Error::Api(e))) if matches!(e.code, 404 | 409 | 422) => {
            debug!(
                node,
                code = e.code,
                ?how,
                "NodeNetworkConfig applied instead"
            );
            api.patch(node, apply, &Patch::Apply(obj)).await.map(|_| ())
        }
        Some(Err(e)) => Err(e),
        None => api.patch(node, apply, &Patch::Apply(obj)).await.map(|_| ()),
    }
}

/// Deletes the NodeNetworkConfigs `names` (a delete sent over the version the cache
/// still holds is not sent again): how many went, and the first error.
pub(super) async fn delete(
    api: &Api<NodeNetworkConfig>,
    nncs: &Store<NodeNetworkConfig>,
    sent: &crate::k8s::Sent,
    names: Vec<String>,
) -> (usize, Option<kube::Error>) {
    let (mut deleted, mut first_error) = (0, None);
    for name in names {
        let over = get(nncs, &name).and_then(|o| o.metadata.resource_version.clone());
        let what = digest("delete");
        if sent.unseen(&name, what, over.as_deref()) {
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                deleted += 1;
                sent.record(&name, what, over.as_deref());
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                sent.record(&name, what, over.as_deref());
            }
            Err(e) => {
                sent.forget(&name);
                first_error.get_or_insert(e);
            }
        }
    }
    (deleted, first_error)
}

/// Writes ClusterConfig and NodeConfig status, and an Event per new conflict (also on
/// a Trench whose items a NodeConfig defines differently).
pub(super) struct StatusWriter {
    pub(super) ccs: Api<ClusterConfig>,
    pub(super) ncs: Api<NodeConfig>,
    /// The conflicts each Trench had at the last pass (`Trench/<ns>/<name>`). A
    /// Trench's status belongs to the trench job, so its conflicts are Events only,
    /// remembered here: a restarted operator reports a standing conflict once more.
    pub(super) trench_conflicts: BTreeMap<String, Vec<crate::api::PolicyConflict>>,
    pub(super) recorder: crate::k8s::events::Recorder,
    /// Status writes not seen back yet: not sent again while the cache stays behind.
    pub(super) sent: crate::k8s::Sent,
}

impl StatusWriter {
    /// A Warning Event on each Trench for each conflict it did not have at the last
    /// pass (the NodeConfig side has them in its status and its own Events).
    pub(super) async fn trench_events(
        &mut self,
        trenches: &Store<crate::api::traffic::Trench>,
        facts: &BTreeMap<String, PolicyFacts>,
    ) {
        let mut now = BTreeMap::new();
        for t in trenches.state() {
            let key = format!(
                "Trench/{}/{}",
                t.namespace().unwrap_or_default(),
                t.name_any()
            );
            let Some(f) = facts.get(&key).filter(|f| !f.conflicts.is_empty()) else {
                continue;
            };
            let before = self.trench_conflicts.get(&key);
            for c in &f.conflicts {
                if before.is_some_and(|b| b.contains(c)) {
                    continue;
                }
                self.recorder
                    .tell_all(t.as_ref(), vec![super::status::conflict_event(c)])
                    .await;
            }
            now.insert(key, f.conflicts.clone());
        }
        self.trench_conflicts = now;
    }

    /// Computes every policy's status and writes those that changed.
    ///
    /// # Guarantees
    /// A policy whose status is unchanged is not written (no `lastTransitionTime`
    /// bump); a quiet cluster costs no write.
    pub(super) async fn write_all(
        &self,
        ccs: &Store<ClusterConfig>,
        ncs: &Store<NodeConfig>,
        applied: &BTreeSet<String>,
        facts: &BTreeMap<String, PolicyFacts>,
    ) -> Result<(), kube::Error> {
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
        self.recorder
            .tell_all(obj, super::status::policy_events(current, &next))
            .await;
        if self
            .sent
            .apply_status(api, FIELD_MANAGER, obj, &next)
            .await?
        {
            debug!(name, "policy status written");
        }
        Ok(())
    }
}

/// The cached object `name` of `store`.
pub(super) fn get<K>(store: &Store<K>, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name))
}
