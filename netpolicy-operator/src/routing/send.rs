//! What the routing job sends: a NodeNetworkConfig write carried out by the verb
//! [`super::writes::verb`] chose, with the server-side apply it falls back to; deletes;
//! the policies' statuses and conflict Events. The controller decides, this file calls
//! the API server.

use std::{collections::BTreeMap, sync::Arc};

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
    /// When each policy's status was last written (`Kind/name`), and how many writes
    /// of its progress alone came in a row since another change: a change of its counts
    /// alone waits [`progress_wait`] since.
    pub(super) written_at: std::sync::Mutex<BTreeMap<String, (std::time::Instant, u32)>>,
}

/// How soon a policy's progress alone (`appliedNodes`, `pendingNodes` and the count in
/// `Ready`'s message while it applies) is written after its last write: every agent's
/// report changes it, and at 2,000 nodes writing each made most of a cluster-wide
/// edit's operator writes (issue 68). A change of a condition, its conflicts, its
/// generation or its selected nodes is written at once.
pub(super) const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest wait between two writes of progress alone.
pub(super) const PROGRESS_AT_MOST: std::time::Duration = std::time::Duration::from_secs(320);

/// How long a policy's progress alone waits after its last status write, when `streak`
/// writes of progress alone came in a row since another change: [`PROGRESS_EVERY`],
/// doubled with each (10, 20, 40 … s, at most [`PROGRESS_AT_MOST`]). A rollout of `T`
/// seconds then writes its progress about `log2(T / 10)` times (then once every 320 s),
/// not `T / 10`: the operator's writes for an edit stay near the renderings and waves it
/// needs however long the rollout takes. Live counts are in `/metrics` (`netpolicy_policy_pending_nodes`) and in
/// each node's NodeNetworkConfig.
pub(super) fn progress_wait(streak: u32) -> std::time::Duration {
    PROGRESS_EVERY
        .checked_mul(1_u32.checked_shl(streak).unwrap_or(u32::MAX))
        .map_or(PROGRESS_AT_MOST, |w| w.min(PROGRESS_AT_MOST))
}

/// The earlier of two due times (`None`: not due).
fn earliest(
    a: Option<std::time::Duration>,
    b: Option<std::time::Duration>,
) -> Option<std::time::Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether `next` differs from `current` only in its progress: the counts of applied
/// and pending nodes and `Ready`'s message (the same status, reason and transition).
pub(super) fn progress_only(current: &PolicyStatus, next: &PolicyStatus) -> bool {
    let strip = |s: &PolicyStatus| {
        let mut s = s.clone();
        s.applied_nodes = 0;
        s.pending_nodes = 0;
        for c in &mut s.conditions {
            if c.type_ == crate::api::conditions::READY {
                c.message.clear();
            }
        }
        s
    };
    strip(current) == strip(next)
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

    /// Computes every policy's status and writes those that changed; returns how long
    /// until a progress change held back is due (`None`: none is).
    ///
    /// # Guarantees
    /// A policy whose status is unchanged is not written (no `lastTransitionTime`
    /// bump); a quiet cluster costs no write. A change of progress alone is written at
    /// most every [`PROGRESS_EVERY`] per policy, and within it.
    pub(super) async fn write_all(
        &self,
        ccs: &Store<ClusterConfig>,
        ncs: &Store<NodeConfig>,
        applied: &super::status::Applied,
        facts: &BTreeMap<String, PolicyFacts>,
    ) -> Result<Option<std::time::Duration>, kube::Error> {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let none = PolicyFacts::default();
        let mut due = None;
        for cc in ccs.state() {
            let key = format!("ClusterConfig/{}", cc.name_any());
            let f = facts.get(&key).unwrap_or(&none);
            let n = applied.count(&key, &f.matched);
            let current = cc.status.clone().unwrap_or_default();
            let next = policy_status(&current, cc.metadata.generation, f, n, &now);
            let wait = self.write(&self.ccs, cc.as_ref(), &current, next).await?;
            due = earliest(due, wait);
        }
        for nc in ncs.state() {
            let key = format!("NodeConfig/{}", nc.name_any());
            let f = facts.get(&key).unwrap_or(&none);
            let n = applied.count(&key, &f.matched);
            let current = nc.status.clone().unwrap_or_default();
            let next = policy_status(&current, nc.metadata.generation, f, n, &now);
            let wait = self.write(&self.ncs, nc.as_ref(), &current, next).await?;
            due = earliest(due, wait);
        }
        Ok(due)
    }

    async fn write<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        current: &PolicyStatus,
        next: PolicyStatus,
    ) -> Result<Option<std::time::Duration>, kube::Error>
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    {
        if next == *current {
            return Ok(None);
        }
        let name = obj.name_any();
        let key = format!("{}/{name}", K::kind(&()));
        let at = std::time::Instant::now();
        let progress = progress_only(current, &next);
        let last = self
            .written_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .copied();
        if progress
            && let Some(wait) =
                last.and_then(|(t, streak)| progress_wait(streak).checked_sub(at.duration_since(t)))
            && !wait.is_zero()
        {
            return Ok(Some(wait));
        }
        self.recorder
            .tell_all(obj, super::status::policy_events(current, &next))
            .await;
        if self
            .sent
            .apply_status(api, FIELD_MANAGER, obj, &next)
            .await?
        {
            debug!(name, "policy status written");
            let streak = match last {
                Some((_, n)) if progress => n.saturating_add(1),
                _ => 0,
            };
            self.written_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key, (at, streak));
        }
        Ok(None)
    }
}

/// The cached object `name` of `store`.
pub(super) fn get<K>(store: &Store<K>, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::routing::status::policy_status;

    fn at(t: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.parse().unwrap())
    }

    #[test]
    fn progress_waits_double_with_each_write_of_progress_alone_up_to_a_limit() {
        let s = |n| progress_wait(n).as_secs();
        assert_eq!(
            (s(0), s(1), s(2), s(3), s(4), s(5)),
            (10, 20, 40, 80, 160, 320)
        );
        assert_eq!((s(6), s(31), s(32), s(u32::MAX)), (320, 320, 320, 320));
        // A rollout of T seconds, its progress written as soon as it may: log2(T / 10)
        // times up to 310 s, then once every 320 s.
        let writes = |t: u64| {
            let (mut at, mut n) = (0, 0);
            while at + s(n) < t {
                at += s(n);
                n += 1;
            }
            n
        };
        assert_eq!((writes(51), writes(300), writes(3_000)), (2, 4, 13));
    }

    #[test]
    fn progress_alone_is_told_apart_from_a_condition_that_changes() {
        let facts = PolicyFacts {
            matched: (0..10).map(|i| format!("n{i}")).collect::<BTreeSet<_>>(),
            ..PolicyFacts::default()
        };
        let t0 = at("2026-01-01T00:00:00Z");
        let applied = policy_status(&PolicyStatus::default(), Some(1), &facts, 10, &t0);
        let three = policy_status(&applied, Some(2), &facts, 3, &t0);
        let four = policy_status(&three, Some(2), &facts, 4, &at("2026-01-01T00:00:05Z"));
        let done = policy_status(&four, Some(2), &facts, 10, &at("2026-01-01T00:00:09Z"));
        assert!(!progress_only(&applied, &three), "Applied -> Applying");
        assert!(progress_only(&three, &four), "3 of 10 -> 4 of 10");
        assert!(!progress_only(&four, &done), "Applying -> Applied");
        let more = PolicyFacts {
            matched: (0..11).map(|i| format!("n{i}")).collect::<BTreeSet<_>>(),
            ..facts
        };
        let selected = policy_status(&four, Some(2), &more, 4, &t0);
        assert!(!progress_only(&four, &selected), "a node more selected");
        assert_eq!(
            earliest(Some(std::time::Duration::from_secs(3)), None),
            Some(std::time::Duration::from_secs(3))
        );
        assert_eq!(
            earliest(
                Some(std::time::Duration::from_secs(3)),
                Some(std::time::Duration::from_secs(2))
            ),
            Some(std::time::Duration::from_secs(2))
        );
    }
}
