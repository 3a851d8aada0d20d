//! Whether a Meridio workload netpolicy keeps has rolled out: what a trench's `Ready`
//! (and its Attractors' and Conduits') reports about the StatefulSets, Deployments and
//! DaemonSets of the `meridio` data plane. Read from the label-selected caches of the
//! trench job (`app.kubernetes.io/managed-by=netpolicy`), never by a GET per pass.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::{
    Resource,
    runtime::reflector::{ObjectRef, Store},
};

use crate::runtime::{Informers, Inputs};

/// The caches of the workload kinds netpolicy keeps for Meridio, limited to the
/// objects it labelled (`app.kubernetes.io/managed-by=netpolicy`).
pub(crate) struct Workloads {
    statefulsets: Store<StatefulSet>,
    deployments: Store<Deployment>,
    daemonsets: Store<DaemonSet>,
}

/// What the cache says of one workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// Not in the cache: never made, deleted, or not observed yet.
    Absent,
    /// Rolled out.
    Ready,
    /// Present, not rolled out: what is missing.
    Pending(String),
}

impl Workloads {
    /// Takes the label-selected informers; a workload that appears, disappears or
    /// changes in its rollout wakes `wake` (status-only churn that changes nothing
    /// of [`Rollout::pending`] does not).
    pub(crate) fn subscribe(informers: &Informers, inputs: &mut Inputs) -> Self {
        fn one<K>(informers: &Informers, inputs: &mut Inputs) -> Store<K>
        where
            K: Rollout<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
                + Clone
                + std::fmt::Debug
                + serde::de::DeserializeOwned
                + Send
                + Sync
                + 'static,
        {
            let selector = format!(
                "{}={}",
                super::meridio::MANAGED_BY.0,
                super::meridio::MANAGED_BY.1
            );
            inputs.read(&informers.labelled::<K>(&selector), |o: &K| {
                format!("{:?}", o.pending())
            })
        }
        Self {
            statefulsets: one(informers, inputs),
            deployments: one(informers, inputs),
            daemonsets: one(informers, inputs),
        }
    }

    /// The state of workload `kind` `namespace/name`; `None` for a kind not cached
    /// here (ConfigMaps, Services, PodDisruptionBudgets: they have no rollout).
    pub(crate) fn state(&self, kind: &str, namespace: &str, name: &str) -> Option<State> {
        fn of<K: Rollout<DynamicType = ()> + Clone>(s: &Store<K>, ns: &str, name: &str) -> State {
            match s.get(&ObjectRef::new(name).within(ns)) {
                None => State::Absent,
                Some(o) => o.pending().map_or(State::Ready, State::Pending),
            }
        }
        Some(match kind {
            "StatefulSet" => of(&self.statefulsets, namespace, name),
            "Deployment" => of(&self.deployments, namespace, name),
            "DaemonSet" => of(&self.daemonsets, namespace, name),
            _ => return None,
        })
    }
}

/// A workload kind whose rollout can be read from its status.
pub(crate) trait Rollout: Resource {
    /// `None` when the workload is ready (its controller saw the current generation,
    /// every wanted replica runs the current template and is ready); otherwise what is
    /// missing, for a person: `0/2 ready`.
    fn pending(&self) -> Option<String>;
}

/// The common rule: the controller saw this generation, and `ready` and `updated`
/// both reach `want`.
fn pending(
    generation: Option<i64>,
    observed: Option<i64>,
    want: i32,
    ready: i32,
    updated: i32,
) -> Option<String> {
    if observed < generation {
        return Some("its controller has not seen the latest change yet".into());
    }
    if ready >= want && updated >= want {
        return None;
    }
    let mut s = format!("{ready}/{want} ready");
    if updated < want {
        s.push_str(&format!(", {updated}/{want} updated"));
    }
    Some(s)
}

impl Rollout for StatefulSet {
    fn pending(&self) -> Option<String> {
        let want = self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let st = self.status.clone().unwrap_or_default();
        pending(
            self.metadata.generation,
            st.observed_generation,
            want,
            st.ready_replicas.unwrap_or(0),
            st.updated_replicas.unwrap_or(0),
        )
    }
}

impl Rollout for Deployment {
    fn pending(&self) -> Option<String> {
        let want = self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let st = self.status.clone().unwrap_or_default();
        pending(
            self.metadata.generation,
            st.observed_generation,
            want,
            st.available_replicas.unwrap_or(0),
            st.updated_replicas.unwrap_or(0),
        )
    }
}

impl Rollout for DaemonSet {
    fn pending(&self) -> Option<String> {
        let st = self.status.clone().unwrap_or_default();
        pending(
            self.metadata.generation,
            st.observed_generation,
            st.desired_number_scheduled,
            st.number_ready,
            st.updated_number_scheduled.unwrap_or(0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sts(v: serde_json::Value) -> StatefulSet {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_statefulset_is_ready_when_every_replica_is_ready_and_updated() {
        let base = json!({"metadata": {"name": "nsp-a", "generation": 2},
                          "spec": {"replicas": 1, "selector": {}, "serviceName": "x",
                                   "template": {}}});
        let mut s = base.clone();
        assert_eq!(
            sts(s.clone()).pending().as_deref(),
            Some("its controller has not seen the latest change yet")
        );
        s["status"] = json!({"replicas": 1, "observedGeneration": 2, "readyReplicas": 0});
        assert_eq!(
            sts(s.clone()).pending().as_deref(),
            Some("0/1 ready, 0/1 updated")
        );
        s["status"]["updatedReplicas"] = json!(1);
        assert_eq!(sts(s.clone()).pending().as_deref(), Some("0/1 ready"));
        s["status"]["readyReplicas"] = json!(1);
        assert_eq!(sts(s.clone()).pending(), None);
        // A newer generation than the controller saw is pending again.
        s["metadata"]["generation"] = json!(3);
        assert!(sts(s).pending().is_some());
    }

    #[test]
    fn a_deployment_counts_available_replicas_and_a_daemonset_its_scheduled_pods() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "lb", "generation": 1},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "readyReplicas": 2,
                       "availableReplicas": 1, "updatedReplicas": 2}
        }))
        .unwrap();
        assert_eq!(d.pending().as_deref(), Some("1/2 ready"));
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "proxy", "generation": 1},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 0,
                       "currentNumberScheduled": 0, "numberMisscheduled": 0,
                       "numberReady": 0}
        }))
        .unwrap();
        // No node to run on: nothing is missing.
        assert_eq!(ds.pending(), None);
    }
}
