//! Kubernetes Events (`events.k8s.io/v1`) for every job and the agent: kube-runtime's
//! `Recorder` with one difference that `kubectl describe` readers see.
//!
//! kube-runtime's recorder counts an Event again (its `series`) whenever the type,
//! reason, action and object repeat, and keeps the note of the first: `StepApplied (x3)
//! step 1 of 1 (createPeers)` while the steps were `promote` and `setClusterIDs`. Here
//! the note is part of what makes an Event the same: a new fact is a new Event, and only
//! the very same note repeated within [`Recorder::TTL`] becomes a series (count and last
//! time), as the Events API intends.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        events::v1::{Event as K8sEvent, EventSeries},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::events::{Event, EventType, Reporter},
};
use tokio::sync::Mutex;

/// What makes two Events one series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    type_: &'static str,
    reason: String,
    action: String,
    note: Option<String>,
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
}

/// An Event as data: what a job's pure `events(before, after)` returns and
/// [`Recorder::tell_all`] publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Told {
    /// A Warning (else Normal).
    pub(crate) warning: bool,
    /// What the job did (`Render`, `Rollout`).
    pub(crate) action: &'static str,
    /// Why (a reason of `netpolicy_api::conditions::events`).
    pub(crate) reason: String,
    /// For a person.
    pub(crate) note: String,
}

/// Publishes Events as kube-runtime's `Recorder` does, with the note in the series key.
#[derive(Clone)]
pub(crate) struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    cache: Arc<Mutex<HashMap<Key, K8sEvent>>>,
}

impl Recorder {
    /// Publishes an Event of `type_` on `obj` (what the job did: `action`; why:
    /// `reason`; `note` for a person). Best effort: an Event the API server refuses is
    /// logged, never a failure of the pass that had something to say.
    pub(crate) async fn tell<K: kube::Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        action: &str,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.publish(&event, &obj.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "could not record an Event");
        }
    }

    /// Publishes every Event of `told` on `obj` (best effort, as [`Recorder::tell`]).
    pub(crate) async fn tell_all<K: kube::Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        told: Vec<Told>,
    ) {
        for t in told {
            let type_ = if t.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.tell(obj, type_, t.action, &t.reason, t.note).await;
        }
    }

    /// How long an Event may still grow a series (kube-runtime's and client-go's 6 min).
    pub(crate) const TTL: SignedDuration = SignedDuration::from_mins(6);

    /// A recorder reporting as `reporter`.
    pub(crate) fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            cache: Arc::default(),
        }
    }

    /// Publishes `ev` about `reference`: a new Event, or the series of the same Event
    /// (same type, reason, action, note and object) published within [`Recorder::TTL`].
    ///
    /// # Errors
    /// The API server refused the Event.
    pub(crate) async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = Key {
            type_: type_of(ev.type_),
            reason: ev.reason.clone(),
            action: ev.action.clone(),
            note: ev.note.clone(),
            regarding: (
                reference.api_version.clone(),
                reference.kind.clone(),
                reference.namespace.clone(),
                reference.name.clone(),
            ),
        };
        let mut cache = self.cache.lock().await;
        cache.retain(|_, e| last_seen(e).is_some_and(|t| t + Self::TTL > now));
        let events: Api<K8sEvent> = Api::namespaced(
            self.client.clone(),
            reference.namespace.as_deref().unwrap_or("default"),
        );
        let event = match cache.get(&key) {
            Some(e) => {
                let mut e = e.clone();
                let count = e.series.as_ref().map_or(2, |s| s.count + 1);
                e.series = Some(EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                });
                events
                    .patch(&e.name_any(), &PatchParams::default(), &Patch::Merge(&e))
                    .await?;
                e
            }
            None => {
                let e = self.generate(ev, reference, now);
                events.create(&PostParams::default(), &e).await?;
                e
            }
        };
        cache.insert(key, event);
        Ok(())
    }

    fn generate(&self, ev: &Event, reference: &ObjectReference, now: Timestamp) -> K8sEvent {
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(reference.clone()),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: reference.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    reference.name.as_ref().unwrap_or(&self.reporter.controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(type_of(ev.type_).into()),
            related: ev.secondary.clone(),
            ..K8sEvent::default()
        }
    }
}

fn type_of(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

fn last_seen(e: &K8sEvent) -> Option<Timestamp> {
    e.series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;

    /// Issue 40: `StepApplied (x3) step 1 of 1 (createPeers)` while the log showed
    /// `promote` and `setClusterIDs`. Against the real API server: each new note is an
    /// Event of its own; the same note again is that Event's series.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_new_fact_is_a_new_event_and_the_same_fact_again_a_series() {
        let cp = netpolicy_testenv::shared();
        let client = cp.client().await;
        let ns = cp.unique("events");
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let mut o = k8s_openapi::api::core::v1::Namespace::default();
        o.metadata.name = Some(ns.clone());
        namespaces.create(&PostParams::default(), &o).await.unwrap();
        let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
        cm.metadata.name = Some("subject".into());
        cm.metadata.namespace = Some(ns.clone());
        let reference = cm.object_ref(&());
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "netpolicy-test".into(),
                instance: None,
            },
        );
        let step = |note: &str| Event {
            type_: EventType::Normal,
            reason: "StepApplied".into(),
            note: Some(note.into()),
            action: "Reflect".into(),
            secondary: None,
        };
        for note in [
            "step 1 of 3 (createPeers)",
            "step 2 of 3 (promote)",
            "step 3 of 3 (setClusterIDs)",
            "step 3 of 3 (setClusterIDs)",
        ] {
            recorder.publish(&step(note), &reference).await.unwrap();
        }
        let events: Api<K8sEvent> = Api::namespaced(client, &ns);
        let mut got: Vec<(String, i32)> = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("step 1 of 3 (createPeers)".to_owned(), 1),
                ("step 2 of 3 (promote)".to_owned(), 1),
                ("step 3 of 3 (setClusterIDs)".to_owned(), 2),
            ]
        );
    }
}
