//! The process's informers: one per resource and Rust type ([`Informers`]), made on
//! first use by the jobs that read the kind and started together, each one watch.

use std::{
    any::Any,
    collections::BTreeMap,
    fmt,
    sync::{Arc, Mutex},
};

use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject},
};

use super::{
    changes::lock,
    informer::{Informer, KindHealth},
};

trait Startable: Send + Sync {
    fn start_task(&self) -> Option<tokio::task::JoinHandle<()>>;
    fn health_of(&self) -> Arc<KindHealth>;
    fn as_any(&self) -> &dyn Any;
}

impl<K> Startable for Informer<K>
where
    K: Resource + Clone + fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
{
    fn start_task(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.start()
    }
    fn health_of(&self) -> Arc<KindHealth> {
        self.health()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Every informer of a process, one per kind. Jobs take the informers of the kinds they
/// read ([`Informers::get`]) and subscribe; [`Informers::start`] then starts one watch
/// per kind.
pub struct Informers {
    client: Client,
    /// `--watch-namespace`: namespaced kinds taken with [`Informers::get_namespaced`]
    /// are watched in this namespace only.
    namespace: Option<String>,
    kinds: Mutex<BTreeMap<String, Box<dyn Startable>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    started: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Informers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informers")
            .field("kinds", &lock(&self.kinds).keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Informers {
    /// No informers yet, reading through `client`.
    pub fn new(client: Client) -> Self {
        Self::in_namespace(client, None)
    }

    /// No informers yet; namespaced kinds taken with [`Informers::get_namespaced`] are
    /// watched in `namespace` only (all namespaces when `None`).
    pub fn in_namespace(client: Client, namespace: Option<String>) -> Self {
        Self {
            client,
            namespace,
            kinds: Mutex::new(BTreeMap::new()),
            tasks: Mutex::new(Vec::new()),
            started: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The client the informers read with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The informer of kind `K` across all namespaces (made on first use).
    pub fn get<K>(&self) -> Informer<K>
    where
        K: Resource + Clone + fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
    {
        let dt = K::DynamicType::default();
        let key = format!("{}/{}", K::api_version(&dt), K::plural(&dt));
        self.entry(key, || {
            let resource = resource_name(&K::plural(&dt), &K::group(&dt));
            Informer::new(
                Arc::from(&*K::kind(&dt)),
                resource,
                Api::<K>::all(self.client.clone()),
                dt.clone(),
                false,
            )
        })
    }

    /// The namespace the operator is limited to (`--watch-namespace`), if any.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The informer of the namespaced kind `K`: in [`Informers::namespace`] when the
    /// operator is limited to one, across all namespaces otherwise.
    pub fn get_namespaced<K>(&self) -> Informer<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
    {
        self.scoped(None)
    }

    /// The informer of the namespaced kind `K` limited to the objects `selector` (a
    /// label selector, `app.kubernetes.io/managed-by=netpolicy`) selects: a job that
    /// reads only what it made caches only that, not every Deployment of the cluster.
    /// Namespaced as [`Informers::get_namespaced`]; one watch per kind and selector.
    pub fn labelled<K>(&self, selector: &str) -> Informer<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
    {
        self.scoped(Some(selector))
    }

    /// The informer of `K` in [`Informers::namespace`] (all namespaces without one),
    /// limited to `selector` when given; [`Informers::get`]'s own when neither limits it.
    fn scoped<K>(&self, selector: Option<&str>) -> Informer<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
    {
        let ns = self.namespace.clone();
        if ns.is_none() && selector.is_none() {
            return self.get::<K>();
        }
        let dt = K::DynamicType::default();
        let key = format!(
            "{}/{}@{}?{}",
            K::api_version(&dt),
            K::plural(&dt),
            ns.as_deref().unwrap_or_default(),
            selector.unwrap_or_default()
        );
        self.entry(key, || {
            let resource = resource_name(&K::plural(&dt), &K::group(&dt));
            let api = match &ns {
                Some(ns) => Api::<K>::namespaced(self.client.clone(), ns),
                None => Api::<K>::all(self.client.clone()),
            };
            let i = Informer::new(Arc::from(&*K::kind(&dt)), resource, api, dt.clone(), false);
            match selector {
                Some(s) => i.with_selector(s),
                None => i,
            }
        })
    }

    /// The informer of a kind known by its [`ApiResource`] (kinds of other projects,
    /// such as Calico's). `optional`: the kind may not be served (its CRD not installed);
    /// readiness then treats it as empty, and the informer keeps trying.
    pub fn dynamic(&self, ar: &ApiResource, optional: bool) -> Informer<DynamicObject> {
        let key = format!("{}/{}", ar.api_version, ar.plural);
        self.entry(key, || {
            Informer::new(
                Arc::from(ar.kind.as_str()),
                resource_name(&ar.plural, &ar.group),
                Api::all_with(self.client.clone(), ar),
                ar.clone(),
                optional,
            )
        })
    }

    fn entry<K>(&self, key: String, make: impl FnOnce() -> Informer<K>) -> Informer<K>
    where
        K: Resource + Clone + fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
    {
        // Two types may read one resource (`k8s_openapi`'s Node and `CachedNode`): each
        // has its own informer and watch, never one replacing the other's.
        let key = format!("{key} as {}", std::any::type_name::<K>());
        let mut kinds = lock(&self.kinds);
        if let Some(i) = kinds
            .get(&key)
            .and_then(|b| b.as_any().downcast_ref::<Informer<K>>())
        {
            return i.clone();
        }
        let i = make();
        kinds.insert(key, Box::new(i.clone()));
        if self.started.load(std::sync::atomic::Ordering::Acquire) {
            // Made after start: start it now.
            if let Some(t) = i.start() {
                lock(&self.tasks).push(t);
            }
        }
        i
    }

    /// Starts one watch per kind taken so far (and any kind taken later at once).
    pub fn start(&self) {
        let kinds = lock(&self.kinds);
        self.started
            .store(true, std::sync::atomic::Ordering::Release);
        let mut tasks = lock(&self.tasks);
        for i in kinds.values() {
            if let Some(t) = i.start_task() {
                tasks.push(t);
            }
        }
    }

    /// The health of every kind.
    pub fn health(&self) -> Vec<Arc<KindHealth>> {
        lock(&self.kinds).values().map(|i| i.health_of()).collect()
    }

    /// Stops every watch.
    pub fn stop(&self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

impl Drop for Informers {
    fn drop(&mut self) {
        self.stop();
    }
}

fn resource_name(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::runtime::offline_client;

    /// The operator's jobs read Nodes as `CachedNode`, a consumer's own job may read
    /// them as `k8s_openapi`'s Node: the second type once replaced the first one's
    /// informer, whose subscribers then never had a watch.
    #[tokio::test]
    async fn two_types_of_one_resource_get_an_informer_each_and_keep_it() {
        use kube::core::PartialObjectMeta;
        let informers = Informers::new(offline_client());
        let whole = informers.get::<ConfigMap>();
        let meta = informers.get::<PartialObjectMeta<ConfigMap>>();
        assert!(Arc::ptr_eq(
            &whole.inner,
            &informers.get::<ConfigMap>().inner
        ));
        assert!(Arc::ptr_eq(
            &meta.inner,
            &informers.get::<PartialObjectMeta<ConfigMap>>().inner
        ));
        assert_eq!(lock(&informers.kinds).len(), 2);
    }
}
