//! Kubernetes plumbing shared by every job: fingerprints (what a job reads of an
//! object), the labels and field managers of what the operator writes, status writes,
//! Events, and the problem type every job reports about an object. The watches
//! themselves are the runtime's shared informers (`crate::runtime`).

/// The largest NodeNetworkConfig the operator writes by default (`--max-object-bytes`),
/// in bytes of JSON: etcd's request limit is ~1.5 MiB.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 1_400_000;

pub(crate) mod events;
mod host_address;
pub(crate) mod job_items;
mod node;
pub(crate) mod sent;
pub(crate) mod traffic;
pub(crate) use host_address::host_address;
pub(crate) use job_items::{JobItems, job_items};
pub use node::{CachedNode, CachedNodeSpec, CachedNodeStatus, NodeView};
pub(crate) use sent::Sent;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Api, Resource, ResourceExt};
use netpolicy_core::error::FieldError;

/// Label on every object the operator creates.
pub(crate) const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "netpolicy");
/// Field manager of the operator's server-side applies.
pub(crate) const FIELD_MANAGER: &str = "netpolicy-operator";

/// A problem with the input: one entry of `errors` (or, for what is accepted but worth
/// a person's look, of `warnings`) in `netpolicy plan` output.
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

impl std::fmt::Display for InputError {
    /// `Kind name: field: message`, leaving out what is empty.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head: Vec<&str> = [self.kind.as_str(), self.name.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if !head.is_empty() {
            write!(f, "{}: ", head.join(" "))?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl InputError {
    /// An entry about object `kind`/`name` at `field`.
    pub fn new(kind: &str, name: &str, field: &str, message: impl Into<String>) -> Self {
        Self {
            kind: kind.to_owned(),
            name: name.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }

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
    pub fn of(node: &impl NodeView, assume_ready: bool) -> Self {
        let meta = node.node_meta();
        Self {
            name: meta.name.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            ready: node
                .ready_status()
                .map_or(assume_ready, |s| s == crate::api::conditions::STATUS_TRUE),
            unschedulable: node.unschedulable(),
            taints: node.taints().to_vec(),
            provider_id: node.provider_id().map(str::to_owned),
            created: meta
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
pub(crate) async fn apply_status<K>(
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
pub(crate) fn condition(
    current: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if ok {
        crate::api::conditions::STATUS_TRUE
    } else {
        crate::api::conditions::STATUS_FALSE
    };
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
pub(crate) fn spec_fingerprint<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().uid.as_deref().unwrap_or_default(),
        o.meta().generation.unwrap_or(0)
    )
}

/// A Node's uid and labels: all the routing job reads of it (and its uid, for owner
/// references).
pub(crate) fn labels_fingerprint<K: Resource>(n: &K) -> String {
    let mut s = n.meta().uid.clone().unwrap_or_default();
    for (k, v) in n.labels() {
        s.push('\n');
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s
}

/// The Event recorder of the operator's jobs (reporting controller
/// `netpolicy-operator`).
/// Why a client could not be made from a kubeconfig in a Secret.
#[derive(Debug)]
pub(crate) enum KubeconfigError {
    /// The Secret, its key or the kubeconfig in it is missing or invalid.
    Missing(String),
    /// The kubeconfig is fine but no client could be built from it.
    Client(String),
}

/// A client from the kubeconfig in Secret `namespace/name`, key `key` (default: the first
/// of `value` (Cluster API, Rancher), `kubeconfig` and `config` present). Connections time
/// out after 5 s; reads after `read_timeout` (a watching client needs the default).
pub(crate) async fn client_from_secret(
    client: kube::Client,
    namespace: &str,
    name: &str,
    key: Option<&str>,
    read_timeout: Option<std::time::Duration>,
) -> Result<kube::Client, KubeconfigError> {
    use KubeconfigError::Missing;
    let secret = format!("{namespace}/{name}");
    let found = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client, namespace)
        .get_opt(name)
        .await
        .map_err(|e| Missing(format!("reading Secret {secret}: {e}")))?
        .ok_or_else(|| Missing(format!("Secret {secret} does not exist")))?;
    let data = found.data.unwrap_or_default();
    let key = match key {
        Some(k) => data
            .contains_key(k)
            .then_some(k)
            .ok_or_else(|| Missing(format!("Secret {secret} has no key {k}")))?,
        None => ["value", "kubeconfig", "config"]
            .into_iter()
            .find(|k| data.contains_key(*k))
            .ok_or_else(|| {
                Missing(format!(
                    "Secret {secret} has no key value, kubeconfig or config"
                ))
            })?,
    };
    let text = String::from_utf8(data[key].0.clone())
        .map_err(|_| Missing(format!("Secret {secret} key {key} is not text")))?;
    let kc = kube::config::Kubeconfig::from_yaml(&text)
        .map_err(|e| Missing(format!("Secret {secret} key {key}: not a kubeconfig: {e}")))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| Missing(format!("Secret {secret} key {key}: {e}")))?;
    config.connect_timeout = Some(std::time::Duration::from_secs(5));
    if read_timeout.is_some() {
        config.read_timeout = read_timeout;
    }
    kube::Client::try_from(config).map_err(|e| KubeconfigError::Client(e.to_string()))
}

pub(crate) fn recorder(client: &kube::Client) -> events::Recorder {
    events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: "netpolicy-operator".into(),
            instance: None,
        },
    )
}

/// Objects netpolicy keeps whole by server-side apply (Meridio's workloads, kube-vip in
/// guest clusters): their API resources, and the annotation that records what was
/// applied so that a pass, or a restarted operator, writes only what changed.
pub(crate) mod applied {
    use kube::api::{ApiResource, GroupVersionKind};

    /// The annotation holding the hash of the object netpolicy last applied.
    pub(crate) const HASH_ANNOTATION: &str = "netpolicy.io/applied-hash";

    /// The hash of a rendered object (serde_json's maps keep keys sorted, so equal
    /// objects hash equal). Not stable across Rust releases: after an operator built
    /// with another toolchain, each object is applied once more (a no-op patch).
    pub(crate) fn hash(v: &serde_json::Value) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        v.to_string().hash(&mut h);
        format!("{:016x}", h.finish())
    }

    /// The API resource of a kind netpolicy applies, and whether it is namespaced.
    pub(crate) fn resource(kind: &str) -> Option<(ApiResource, bool)> {
        let (group, version, plural, namespaced) = match kind {
            "Namespace" => ("", "v1", "namespaces", false),
            "ConfigMap" => ("", "v1", "configmaps", true),
            "Service" => ("", "v1", "services", true),
            "ServiceAccount" => ("", "v1", "serviceaccounts", true),
            "StatefulSet" => ("apps", "v1", "statefulsets", true),
            "Deployment" => ("apps", "v1", "deployments", true),
            "DaemonSet" => ("apps", "v1", "daemonsets", true),
            "PodDisruptionBudget" => ("policy", "v1", "poddisruptionbudgets", true),
            "Role" => ("rbac.authorization.k8s.io", "v1", "roles", true),
            "RoleBinding" => ("rbac.authorization.k8s.io", "v1", "rolebindings", true),
            "ClusterRole" => ("rbac.authorization.k8s.io", "v1", "clusterroles", false),
            "ClusterRoleBinding" => (
                "rbac.authorization.k8s.io",
                "v1",
                "clusterrolebindings",
                false,
            ),
            _ => return None,
        };
        Some((
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
            namespaced,
        ))
    }
}
