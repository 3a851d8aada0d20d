//! Writes sent and not seen back yet: a job compares its caches with what it wants and
//! writes the difference, so a cache that is behind the API server (a watch broken or
//! resumed late, an event lost across an API server restart) would have every pass send
//! the same write again — and a write the server already holds changes nothing, so no
//! event ever comes to end it. [`Sent`] remembers, per object, a digest of the last
//! write and the resource version the cache held when it was made: the same write over
//! the same cached version is not sent again. Once the cache moves (the write's echo, or
//! anyone's change), the job compares afresh.

use std::{
    collections::HashMap,
    hash::{BuildHasher, BuildHasherDefault, DefaultHasher},
    sync::Mutex,
    time::{Duration, Instant},
};

use kube::{Api, Resource, ResourceExt};

/// How long a write is remembered: by then its echo came, or the informer relisted.
/// Forgetting it costs at most one write more.
const REMEMBER: Duration = Duration::from_secs(600);

/// What was written last per object (`key`), over which cached resource version.
#[derive(Debug, Default)]
pub(crate) struct Sent(Mutex<HashMap<String, Entry>>);

#[derive(Debug, Clone)]
struct Entry {
    what: u64,
    over: Option<String>,
    at: Instant,
}

/// A digest of what a write sends (its serialized body).
pub(crate) fn digest(body: &str) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(body)
}

impl Sent {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // Every critical section leaves the map whole: a holder's panic cannot tear it.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `what` (a [`digest`]) was the last write for `key`, made while the cache
    /// held `over` and holds it still: not to be sent again.
    pub(crate) fn unseen(&self, key: &str, what: u64, over: Option<&str>) -> bool {
        let map = self.map();
        map.get(key)
            .is_some_and(|e| e.what == what && e.over.as_deref() == over)
    }

    /// Whether a write for `key` was made over the cached version `over` and the cache
    /// has not moved since (it does not show that write yet).
    pub(crate) fn waits(&self, key: &str, over: Option<&str>) -> bool {
        self.map()
            .get(key)
            .is_some_and(|e| e.over.as_deref() == over)
    }

    /// `what` was written for `key` over the cached version `over`.
    pub(crate) fn record(&self, key: &str, what: u64, over: Option<&str>) {
        let mut map = self.map();
        let now = Instant::now();
        if map.len() >= 1024 && map.len().is_power_of_two() {
            map.retain(|_, e| now.duration_since(e.at) < REMEMBER);
        }
        map.insert(
            key.to_owned(),
            Entry {
                what,
                over: over.map(str::to_owned),
                at: now,
            },
        );
    }

    /// The write for `key` failed (or was not made): the next pass sends it.
    pub(crate) fn forget(&self, key: &str) {
        self.map().remove(key);
    }

    /// Keeps only the writes `keep` names, given each key and the cached version its
    /// write went over.
    pub(crate) fn retain(&self, keep: impl Fn(&str, Option<&str>) -> bool) {
        let mut map = self.map();
        map.retain(|k, e| keep(k, e.over.as_deref()));
        // A map keeps its table when emptied: 10,000 writes' 1.2 MB stayed after their
        // entries went.
        if map.capacity() > 4 * map.len().max(16) {
            map.shrink_to_fit();
        }
    }

    /// How many writes are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether `status` was written over the version of `cached` the cache still holds
    /// (what [`Self::apply_status`] would not send again).
    pub(crate) fn status_unseen<K: Resource<DynamicType = ()>>(
        &self,
        cached: &K,
        status: &impl serde::Serialize,
    ) -> bool {
        let (key, what) = status_key(cached, status);
        self.unseen(&key, what, cached.meta().resource_version.as_deref())
    }

    /// Writes `status` to `cached`'s status subresource ([`super::apply_status`]) unless
    /// the same status was written over the version of it the cache still holds.
    /// `Ok(true)` when written; `Ok(false)` when not sent again or the object is gone.
    ///
    /// # Errors
    /// The API server's, except 404.
    pub(crate) async fn apply_status<K>(
        &self,
        api: &Api<K>,
        manager: &str,
        cached: &K,
        status: &impl serde::Serialize,
    ) -> Result<bool, kube::Error>
    where
        K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    {
        let name = cached.name_any();
        let (key, what) = status_key(cached, status);
        let over = cached.meta().resource_version.as_deref();
        if self.unseen(&key, what, over) {
            tracing::debug!(
                object = key,
                "status written before and not seen back yet: not sent again"
            );
            return Ok(false);
        }
        match super::apply_status(api, manager, &name, status).await {
            Ok(Some(_)) => {
                self.record(&key, what, over);
                Ok(true)
            }
            Ok(None) => {
                self.forget(&key);
                Ok(false)
            }
            Err(e) => {
                self.forget(&key);
                Err(e)
            }
        }
    }
}

/// The key of `cached`'s status writes (kind, namespace, name) and the digest of `status`.
fn status_key<K: Resource<DynamicType = ()>>(
    cached: &K,
    status: &impl serde::Serialize,
) -> (String, u64) {
    let key = format!(
        "{}/{}/{}",
        K::kind(&()),
        cached.namespace().unwrap_or_default(),
        cached.name_any()
    );
    let mut body = serde_json::to_value(status).unwrap_or_default();
    without_transition_times(&mut body);
    (key, digest(&body.to_string()))
}

/// Drops every condition's `lastTransitionTime`: a status computed over a cache that is
/// behind gives a condition that changed a new time on every pass, and is still the
/// same write.
fn without_transition_times(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.remove("lastTransitionTime");
            m.values_mut().for_each(without_transition_times);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(without_transition_times),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_not_sent_again_until_the_cache_moves() {
        let sent = Sent::default();
        let body = digest(r#"{"address":"10.0.0.1"}"#);
        assert!(!sent.unseen("k", body, Some("41")), "nothing sent yet");
        sent.record("k", body, Some("41"));
        // The cache still at 41 (its watch behind or broken): not sent again.
        assert!(sent.unseen("k", body, Some("41")));
        // The cache moved: compared afresh.
        assert!(!sent.unseen("k", body, Some("42")));
        // Another body over the same version: sent.
        assert!(!sent.unseen("k", digest("{}"), Some("41")));
        // Created over nothing cached, and still nothing cached: not sent twice.
        sent.record("new", body, None);
        assert!(sent.unseen("new", body, None));
        // A failed write is sent again.
        sent.forget("k");
        assert!(!sent.unseen("k", body, Some("41")));
        sent.retain(|k, _| k != "new");
        assert_eq!(sent.len(), 0);
        // Writes the cache has moved past hold nothing back: they can go.
        sent.record("a", body, Some("7"));
        sent.record("b", body, Some("7"));
        let cached = |k: &str| if k == "a" { Some("8") } else { Some("7") };
        sent.retain(|k, over| cached(k) == over);
        assert!(!sent.waits("a", Some("8")) && sent.waits("b", Some("7")));
        assert_eq!(sent.len(), 1);
    }

    #[test]
    fn a_status_that_differs_only_in_transition_times_is_the_same_write() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let cached = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("a".into()),
                namespace: Some("ns".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let at = |t: &str, status: &str| {
            serde_json::json!({"conditions": [
                {"type": "Ready", "status": status, "lastTransitionTime": t}
            ]})
        };
        let sent = Sent::default();
        let (key, what) = status_key(&cached, &at("2026-11-28T15:00:00Z", "True"));
        sent.record(&key, what, Some("7"));
        assert!(sent.status_unseen(&cached, &at("2026-11-28T15:00:02Z", "True")));
        assert!(!sent.status_unseen(&cached, &at("2026-11-28T15:00:02Z", "False")));
    }
}
