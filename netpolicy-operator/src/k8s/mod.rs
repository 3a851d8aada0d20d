//! Kubernetes plumbing shared by every job: watches that wake a controller only for
//! the changes it reads, the labels and field managers of what the operator writes, and
//! the problem type every job reports about an object.

mod host_address;
pub mod traffic;
pub use host_address::{host_address, host_addresses};

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
};

use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::{
    api::core::v1::Node,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, reflector, reflector::Store, watcher},
};
use netpolicy_core::error::FieldError;
use tokio::sync::Notify;
use tracing::warn;

/// Label on every object the operator creates.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "netpolicy");
/// Field manager of the operator's server-side applies.
pub const FIELD_MANAGER: &str = "netpolicy-operator";

/// A problem with the input: one entry of `errors` in `netpolicy plan` output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InputError {
    /// Kind of the object, when known.
    pub kind: String,
    /// Name of the object, when known.
    pub name: String,
    /// Field path (`spec.routes[0].gatway`), or `file:line:column` for YAML errors.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl InputError {
    /// One entry per field problem of object `kind`/`name`.
    pub fn from_fields(kind: &str, name: &str, problems: &[FieldError], out: &mut Vec<Self>) {
        out.extend(problems.iter().map(|p| Self {
            kind: kind.to_owned(),
            name: name.to_owned(),
            field: p.path.clone(),
            message: p.message.clone(),
        }));
    }
}

/// What every job reads of a Node: one type, so the jobs agree on what "Ready" or
/// "tainted" means.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The Ready condition is True (see [`NodeFacts::of`]).
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `spec.taints`.
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// Creation time, seconds since the epoch (0 when unknown; only its order matters).
    pub created: i64,
}

impl NodeFacts {
    /// The facts of a Node. A Node whose Ready condition is not `True` is not Ready. A
    /// Node with no Ready condition at all is Ready only when `assume_ready` is set:
    /// `netpolicy plan` sets it, because hand-written manifests have no status; the
    /// operator, which reads live Nodes, does not.
    pub fn of(node: &Node, assume_ready: bool) -> Self {
        let condition = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        let spec = node.spec.as_ref();
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            ready: condition.map_or(assume_ready, |c| c.status == "True"),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            provider_id: spec.and_then(|s| s.provider_id.clone()),
            created: node
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
        }
    }

    /// Has a taint that keeps ordinary workloads off (`NoSchedule`, `NoExecute`, or an
    /// effect this version does not know).
    pub fn tainted(&self) -> bool {
        self.taints.iter().any(|t| t.effect != "PreferNoSchedule")
    }
}

/// Writes an object's `status` by server-side apply as `manager` ([`FIELD_MANAGER`] for
/// the operator's controllers, the agent's own for the agent): the one way status is
/// written. `Ok(None)` when the object is gone.
///
/// # Errors
/// The API server's, except 404.
pub async fn apply_status<K>(
    api: &Api<K>,
    manager: &str,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<Option<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    match api
        .patch_status(
            name,
            &kube::api::PatchParams::apply(manager).force(),
            &kube::api::Patch::Apply(&patch),
        )
        .await
    {
        Ok(o) => Ok(Some(o)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// A condition of type `type_`, keeping its `lastTransitionTime` from `current` while its
/// status stays the same (so an unchanged status compares equal and is not written).
pub fn condition(
    current: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last_transition_time = current
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// What of an object the routing job reads: a change of anything else (a status
/// written by an agent, a Node's heartbeat) must not start a pass.
pub fn spec_fingerprint<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().uid.as_deref().unwrap_or_default(),
        o.meta().generation.unwrap_or(0)
    )
}

/// A Node's uid and labels: all the routing job reads of it (and its uid, for owner
/// references).
pub fn labels_fingerprint(n: &Node) -> String {
    let mut s = n.meta().uid.clone().unwrap_or_default();
    for (k, v) in n.labels() {
        s.push('\n');
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s
}

/// What changed since a controller last looked: object names per kind, and the kinds
/// whose watch relisted (objects deleted while disconnected may be gone without a
/// deletion event: compare everything of that kind).
#[derive(Debug, Default)]
pub struct Changes {
    /// Names of the objects that changed in what their watch's fingerprint covers (or
    /// appeared, or disappeared), per kind.
    pub names: BTreeMap<Arc<str>, BTreeSet<String>>,
    /// Kinds to compare in full.
    pub relisted: BTreeSet<Arc<str>>,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.relisted.is_empty()
    }

    /// Whether every object of `kind` must be compared.
    pub fn relisted(&self, kind: &str) -> bool {
        self.relisted.contains(kind)
    }

    /// The changed objects of a kind.
    pub fn of(&self, kind: &str) -> impl Iterator<Item = &str> {
        self.names
            .get(kind)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }
}

/// Wakes a controller and tells it which objects changed. Clones share one set of
/// changes; a wake-up that comes while the controller works is kept for its next wait.
#[derive(Debug, Clone, Default)]
pub struct Wake {
    changes: Arc<Mutex<Changes>>,
    notify: Arc<Notify>,
}

impl Wake {
    /// A new wake-up with no changes.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Changes> {
        // A panic while holding this lock leaves nothing half-written that matters.
        self.changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Object `name` of `kind` changed.
    pub fn changed(&self, kind: &Arc<str>, name: String) {
        self.lock()
            .names
            .entry(Arc::clone(kind))
            .or_default()
            .insert(name);
        self.notify.notify_one();
    }

    /// Every object of `kind` must be compared.
    pub fn relisted(&self, kind: &Arc<str>) {
        self.lock().relisted.insert(Arc::clone(kind));
        self.notify.notify_one();
    }

    /// Waits until something changed (returns at once if something did since the last
    /// wait).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }

    /// The changes so far, leaving none.
    pub fn take(&self) -> Changes {
        std::mem::take(&mut *self.lock())
    }
}

/// A second wake-up of a watch: `wake` when what `fingerprint` covers changes (a
/// status a controller reports from, say) without waking the main pass.
pub type Also<K> = Option<(Wake, fn(&K) -> String)>;

/// A reflector that tells `wake` (as kind `K::kind`) when an object appears,
/// disappears, or changes in what `fingerprint` covers, and `also`'s wake when what
/// its fingerprint covers changes; other changes only update the store.
pub fn watched<K>(
    api: Api<K>,
    wake: Wake,
    fingerprint: fn(&K) -> String,
    also: Also<K>,
) -> (Store<K>, BoxStream<'static, ()>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let kind: Arc<str> = K::kind(&Default::default()).into();
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut seen_also: HashMap<String, String> = HashMap::new();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .map(move |ev| match &ev {
            Err(e) => warn!(error = %e, kind = &*kind, "watch error (retrying)"),
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let name = o.name_any();
                // Namespaced kinds: two objects of one name in two namespaces are two
                // entries (one fingerprint must not hide the other's change).
                let key = format!(
                    "{}/{name}",
                    o.meta().namespace.as_deref().unwrap_or_default()
                );
                if let Some((also_wake, fp)) = &also {
                    let f = fp(o);
                    if seen_also.get(&key) != Some(&f) {
                        seen_also.insert(key.clone(), f);
                        also_wake.changed(&kind, name.clone());
                    }
                }
                let f = fingerprint(o);
                if seen.get(&key) != Some(&f) {
                    seen.insert(key, f);
                    tracing::debug!(kind = &*kind, name, "watch: a change that matters");
                    wake.changed(&kind, name);
                }
            }
            Ok(watcher::Event::Delete(o)) => {
                let name = o.name_any();
                let key = format!(
                    "{}/{name}",
                    o.meta().namespace.as_deref().unwrap_or_default()
                );
                seen.remove(&key);
                if seen_also.remove(&key).is_some()
                    && let Some((also_wake, _)) = &also
                {
                    also_wake.changed(&kind, name.clone());
                }
                wake.changed(&kind, name);
            }
            Ok(watcher::Event::Init) => {}
            Ok(watcher::Event::InitDone) => {
                wake.relisted(&kind);
                if let Some((also_wake, _)) = &also {
                    also_wake.relisted(&kind);
                }
            }
        })
        .boxed();
    (reader, stream)
}
