//! Kubernetes plumbing shared by every job: watches that wake a controller only for
//! the changes it reads, the labels and field managers of what the operator writes, and
//! the problem type every job reports about an object.

use std::collections::HashMap;

use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, reflector, reflector::Store, watcher},
};
use netpolicy_core::error::FieldError;
use tokio::sync::mpsc;
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

/// A second wake-up of a watch: `poke` when what `fingerprint` covers changes (a
/// status a controller reports from, say) without waking the main pass.
pub type Also<K> = Option<(mpsc::Sender<()>, fn(&K) -> String)>;

/// A reflector that pokes `poke` when an object appears, disappears, or changes in
/// what `fingerprint` covers, and `also`'s channel when what its fingerprint covers
/// changes; other changes only update the store.
pub fn watched<K>(
    api: Api<K>,
    poke: mpsc::Sender<()>,
    fingerprint: fn(&K) -> String,
    also: Also<K>,
) -> (Store<K>, BoxStream<'static, ()>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut seen_also: HashMap<String, String> = HashMap::new();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .map(move |ev| {
            let changed = match &ev {
                Err(e) => {
                    warn!(error = %e, "watch error (retrying)");
                    false
                }
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    if let Some((tx, fp)) = &also {
                        let f = fp(o);
                        if seen_also.insert(o.name_any(), f.clone()) != Some(f) {
                            let _ = tx.try_send(());
                        }
                    }
                    let f = fingerprint(o);
                    seen.insert(o.name_any(), f.clone()) != Some(f)
                }
                Ok(watcher::Event::Delete(o)) => {
                    seen.remove(&o.name_any());
                    seen_also.remove(&o.name_any());
                    true
                }
                Ok(watcher::Event::Init) => false,
                // A relist may have dropped objects deleted while disconnected.
                Ok(watcher::Event::InitDone) => true,
            };
            if changed {
                tracing::debug!(kind = %K::kind(&Default::default()), "watch: a change that matters");
                let _ = poke.try_send(());
            }
        })
        .boxed();
    (reader, stream)
}
