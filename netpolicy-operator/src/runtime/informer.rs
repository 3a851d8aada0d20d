//! One informer per kind per process, shared by every job that reads the kind.
//!
//! An [`Informer`] is one `watcher` (one LIST + WATCH against the API server) feeding one
//! reflector store. Jobs do not watch: they *subscribe* with the fingerprint of what they
//! read of the kind ([`Informer::subscribe`]: a [`Wake`] for global jobs,
//! [`Informer::trigger`]: a stream for kube-runtime `Controller`s). An event wakes a
//! subscriber only when the object appeared, disappeared, or changed in what its
//! fingerprint covers, so a Node heartbeat wakes nobody while a label change wakes the
//! jobs that read labels. However many jobs read Nodes, the process holds one Node cache
//! and one WATCH.
//!
//! # Guarantees
//! - Changes are keyed by (namespace, name) ([`ObjectKey`]): same-named objects in two
//!   namespaces are two entries.
//! - A relist (the watch restarted after a disconnect) tells subscribers about objects
//!   deleted meanwhile: every key a subscriber had seen that the relist no longer holds
//!   is reported as changed (deleted).
//! - Changes found in a (re)list are told once the store holds the new list (the
//!   reflector swaps it in at `InitDone`): a job woken by a change reads that change.
//! - [`KindHealth`] says whether the kind has synced, and why not (the API server's
//!   answer to the LIST, such as `forbidden`): readiness reports it.
//! - `managedFields` are dropped before objects enter the store (nothing in the operator
//!   reads them from a cache, and they are a third of a Node's size).
//!
//! # Examples
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use k8s_openapi::api::core::v1::Node;
//! use netpolicy_operator::runtime::{Informers, Wake};
//!
//! let informers = Informers::new(client);
//! let wake = Wake::new();
//! // What of a Node this job reads: its labels.
//! let nodes = informers.get::<Node>();
//! nodes.subscribe(&wake, |n| format!("{:?}", n.metadata.labels));
//! informers.start();
//! wake.notified().await; // a Node appeared, or its labels changed
//! let changes = wake.take();
//! for key in changes.of("Node") {
//!     println!("{key} changed; {} nodes cached", nodes.store().state().len());
//! }
//! # }
//! ```
//!
//! One informer is kept per resource and Rust type: the operator's own jobs read Nodes as
//! `netpolicy_operator::CachedNode` (only the fields they use), so a job that asks for
//! `k8s_openapi`'s `Node` in the same process gets an informer and a watch of its own.

use std::{
    any::Any,
    collections::{HashMap, HashSet},
    fmt,
    sync::{Arc, Mutex},
};

use futures::{Stream, StreamExt};
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store, store::Writer},
        watcher,
    },
};
use tokio::sync::{Notify, mpsc};
use tracing::{debug, warn};

use super::changes::SharedKey;
pub(crate) use super::changes::lock;
pub use super::changes::{Changes, ObjectKey, Wake};

/// Whether a kind's cache can be used yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindState {
    /// The first LIST has not answered yet.
    Listing,
    /// The first LIST failed (and is retried with backoff); the API server's answer.
    Failing(String),
    /// The cache holds the kind (it may be re-listing after a disconnect).
    Synced,
    /// The kind is not served by this API server (an optional kind, such as Calico's
    /// `BGPPeer` before Calico is installed): treated as empty, retried with backoff.
    Absent,
}

/// The health of one kind's cache, as readiness reports it.
#[derive(Debug)]
pub struct KindHealth {
    kind: Arc<str>,
    resource: String,
    optional: bool,
    state: Mutex<KindState>,
    changed: Notify,
}

impl KindHealth {
    fn new(kind: Arc<str>, resource: String, optional: bool) -> Self {
        Self {
            kind,
            resource,
            optional,
            state: Mutex::new(KindState::Listing),
            changed: Notify::new(),
        }
    }

    /// The kind (`Node`).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The state now.
    pub fn state(&self) -> KindState {
        lock(&self.state).clone()
    }

    /// Whether jobs may read the cache (synced, or an optional kind that is not served).
    pub fn usable(&self) -> bool {
        matches!(self.state(), KindState::Synced | KindState::Absent)
    }

    /// Why a job reading this kind waits, when it does.
    pub fn waiting_for(&self) -> Option<String> {
        match self.state() {
            KindState::Synced | KindState::Absent => None,
            KindState::Listing => Some(format!("listing {}", self.resource)),
            KindState::Failing(why) => Some(format!("cannot list {}: {why}", self.resource)),
        }
    }

    /// Waits until the cache is usable.
    pub async fn usable_now(&self) {
        loop {
            let n = self.changed.notified();
            if self.usable() {
                return;
            }
            n.await;
        }
    }

    fn set(&self, s: KindState) {
        let mut st = lock(&self.state);
        if *st != s {
            *st = s;
            self.changed.notify_waiters();
        }
    }

    fn failed(&self, e: &watcher::Error) {
        let api = match e {
            watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => Some(s),
            _ => None,
        };
        let mut st = lock(&self.state);
        if *st == KindState::Synced {
            // A synced cache stays usable while its watch reconnects.
            return;
        }
        let next = match api {
            Some(s) if s.code == 404 && self.optional => KindState::Absent,
            Some(s) => KindState::Failing(format!("{} ({})", s.reason, s.message)),
            None => KindState::Failing(e.to_string()),
        };
        if *st != next {
            *st = next;
            self.changed.notify_waiters();
        }
    }
}

/// A fingerprint: what of an object a subscriber reads.
pub type Fingerprint<K> = Arc<dyn Fn(&K) -> String + Send + Sync>;

enum Target<K> {
    Wake(Wake),
    Trigger(mpsc::UnboundedSender<K>),
}

struct Subscriber<K> {
    kind: Arc<str>,
    fingerprint: Fingerprint<K>,
    /// A digest of each object's fingerprint as last told ([`digest`]): 8 bytes an
    /// object, not the fingerprint's text, at 10,000 objects a kind.
    seen: HashMap<SharedKey, u64>,
    target: Target<K>,
    /// Changes found while a relist of a synced cache is under way: told at `InitDone`,
    /// once the store holds the new list (the reflector swaps it in then), so a job woken
    /// by them reads what woke it. (The first list needs no such care: nothing reads a
    /// cache before it synced.) The object is kept for triggers only.
    pending: Vec<(SharedKey, Option<K>)>,
}

impl<K: Clone> Subscriber<K> {
    fn tell(&self, key: &SharedKey, obj: &K) -> bool {
        match &self.target {
            Target::Wake(w) => {
                w.changed_shared(&self.kind, Arc::clone(key));
                true
            }
            Target::Trigger(tx) => tx.send(obj.clone()).is_ok(),
        }
    }
}

pub(super) struct Inner<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    kind: Arc<str>,
    api: Api<K>,
    /// A label selector the watch is limited to (`None`: every object).
    selector: Option<String>,
    store: Store<K>,
    writer: Mutex<Option<Writer<K>>>,
    subscribers: Mutex<Vec<Subscriber<K>>>,
    health: Arc<KindHealth>,
}

/// The kinds a job reads, declared once: each [`Inputs::read`] subscribes the job's
/// [`Wake`] with the fingerprint of what it reads, counts the kind for readiness (its
/// health), and names it among what wakes the job ([`InputKinds::touched`]). Adding an
/// input kind to a job is that one call.
#[derive(Default)]
pub struct Inputs {
    wake: Wake,
    kinds: Vec<Arc<KindHealth>>,
    names: Vec<Arc<str>>,
}

impl Inputs {
    /// No input yet, with a new wake.
    pub fn new() -> Self {
        Self::default()
    }

    /// The job's wake (for a subscription that is not an input, such as
    /// [`Informer::subscribe_as`] under an alias the job reads apart).
    pub fn wake(&self) -> &Wake {
        &self.wake
    }

    /// Reads `informer`'s kind: subscribes with `fingerprint`, waits for it to sync,
    /// and counts its changes as inputs. Returns its cache.
    pub fn read<K>(
        &mut self,
        informer: &Informer<K>,
        fingerprint: impl Fn(&K) -> String + Send + Sync + 'static,
    ) -> Store<K>
    where
        K: Resource + Clone + fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
    {
        informer.subscribe(&self.wake, fingerprint);
        self.kinds.push(informer.health());
        self.names.push(Arc::clone(&informer.inner.kind));
        informer.store()
    }

    /// The kinds read so far, as changes name them.
    pub fn kinds(&self) -> InputKinds {
        InputKinds(self.names.clone().into())
    }

    /// What `read` returns, with the kinds it read as changes name them: a group of
    /// inputs a job looks at apart (the traffic-domain kinds that routing compiles).
    pub fn group<T>(&mut self, read: impl FnOnce(&mut Self) -> T) -> (T, InputKinds) {
        let start = self.names.len();
        let out = read(self);
        (out, InputKinds(self.names[start..].to_vec().into()))
    }

    /// The job with its wake and the health of every kind it reads.
    pub fn setup<J>(self, job: J) -> super::Setup<J> {
        super::Setup {
            job,
            wake: self.wake,
            kinds: self.kinds,
        }
    }
}

/// The kinds a job reads (from [`Inputs::kinds`]).
#[derive(Debug, Clone)]
pub struct InputKinds(Arc<[Arc<str>]>);

impl InputKinds {
    /// Whether `changes` touch any of them.
    pub fn touched(&self, changes: &Changes) -> bool {
        self.0.iter().any(|k| changes.touched(k))
    }
}

/// The shared cache of one kind: its store, and subscriptions that wake the jobs that
/// read it. Cheap to clone.
pub struct Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub(super) inner: Arc<Inner<K>>,
}

impl<K> Clone for Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
{
    pub(super) fn new(
        kind: Arc<str>,
        resource: String,
        api: Api<K>,
        dyntype: K::DynamicType,
        optional: bool,
    ) -> Self {
        let writer = Writer::new(dyntype);
        let store = writer.as_reader();
        Self {
            inner: Arc::new(Inner {
                health: Arc::new(KindHealth::new(Arc::clone(&kind), resource, optional)),
                kind,
                api,
                selector: None,
                store,
                writer: Mutex::new(Some(writer)),
                subscribers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Limits the watch to the objects `selector` selects (before it starts).
    pub(super) fn with_selector(mut self, selector: &str) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.selector = Some(selector.to_owned());
        }
        self
    }

    /// The kind (`Node`), as changes name it.
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// The cache (a reader; the informer writes it).
    pub fn store(&self) -> Store<K> {
        self.inner.store.clone()
    }

    /// The cache's health.
    pub fn health(&self) -> Arc<KindHealth> {
        Arc::clone(&self.inner.health)
    }

    /// Wakes `wake` with the object's key when an object appears, disappears, or changes
    /// in what `fingerprint` covers. Objects already cached count as appeared.
    pub fn subscribe(
        &self,
        wake: &Wake,
        fingerprint: impl Fn(&K) -> String + Send + Sync + 'static,
    ) {
        let kind = Arc::clone(&self.inner.kind);
        self.add(kind, Arc::new(fingerprint), Target::Wake(wake.clone()));
    }

    /// As [`Informer::subscribe`], with the changes reported under the name `alias`
    /// instead of the kind: a job that reads two things of one kind (a
    /// NodeNetworkConfig's spec, and what its agent applied) tells them apart.
    pub fn subscribe_as(
        &self,
        wake: &Wake,
        alias: &str,
        fingerprint: impl Fn(&K) -> String + Send + Sync + 'static,
    ) {
        self.add(
            Arc::from(alias),
            Arc::new(fingerprint),
            Target::Wake(wake.clone()),
        );
    }

    /// A stream of the objects that appear, disappear, or change in what `fingerprint`
    /// covers: the trigger of a kube-runtime `Controller` (`Controller::for_stream`,
    /// `watches_stream`). Deleted objects are sent too (a related-object mapper may need
    /// them); a `Controller`'s own kind skips them, as they are no longer in its store.
    pub fn trigger<F>(
        &self,
        fingerprint: F,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static + use<K, F>
    where
        F: Fn(&K) -> String + Send + Sync + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let kind = Arc::clone(&self.inner.kind);
        self.add(kind, Arc::new(fingerprint), Target::Trigger(tx));
        tokio_stream_from(rx)
    }

    fn add(&self, kind: Arc<str>, fingerprint: Fingerprint<K>, target: Target<K>) {
        let mut sub = Subscriber {
            kind,
            fingerprint,
            seen: HashMap::new(),
            target,
            pending: Vec::new(),
        };
        // Under the subscribers' lock: the reflector writes the store before it
        // dispatches, so an event is either in the store now or dispatched after this.
        let mut subs = lock(&self.inner.subscribers);
        if self.inner.health.state() == KindState::Synced {
            for o in self.inner.store.state() {
                let key = Arc::new(ObjectKey::of(o.as_ref()));
                sub.seen
                    .insert(Arc::clone(&key), digest(&(sub.fingerprint)(&o)));
                sub.tell(&key, &o);
            }
        }
        subs.push(sub);
    }

    /// Starts the watch (once; later calls do nothing). The task ends when the returned
    /// handle is aborted.
    pub(super) fn start(&self) -> Option<tokio::task::JoinHandle<()>> {
        let writer = lock(&self.inner.writer).take()?;
        let inner = Arc::clone(&self.inner);
        let mut config = watcher::Config::default();
        if let Some(selector) = &inner.selector {
            config = config.labels(selector);
        }
        let stream = watcher(inner.api.clone(), config)
            .backoff(kube::runtime::utils::ResetTimerBackoff::new(
                super::backoff::Reconnect::default(),
                super::backoff::RECONNECT_RESET,
            ))
            .modify(slim::<K>);
        let mut relist: Option<HashSet<SharedKey>> = None;
        let task = reflector::reflector(writer, stream).for_each(move |ev| {
            inner.dispatch(&ev, &mut relist);
            futures::future::ready(())
        });
        Some(tokio::spawn(task))
    }
}

impl<K> Inner<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn dispatch(
        &self,
        ev: &Result<watcher::Event<K>, watcher::Error>,
        relist: &mut Option<HashSet<SharedKey>>,
    ) {
        let kind = &*self.kind;
        match ev {
            Err(e) => {
                self.health.failed(e);
                debug!(kind, error = %e, "watch error (retrying with backoff)");
                if !self.health.usable() {
                    warn!(kind, error = %e, "cannot list (retrying with backoff)");
                }
            }
            Ok(watcher::Event::Init) => *relist = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(o)) => {
                let key = ObjectKey::of(o);
                let relisting = self.health.state() == KindState::Synced;
                let key = self.applied(&key, o, relisting);
                if let Some(r) = relist {
                    r.insert(key);
                }
            }
            Ok(watcher::Event::Apply(o)) => {
                self.applied(&ObjectKey::of(o), o, false);
            }
            Ok(watcher::Event::Delete(o)) => {
                let key = ObjectKey::of(o);
                let mut shared = None;
                let mut subs = lock(&self.subscribers);
                subs.retain_mut(|s| {
                    let key = match s.seen.remove_entry(&key) {
                        Some((k, _)) => k,
                        None => Arc::clone(shared.get_or_insert_with(|| Arc::new(key.clone()))),
                    };
                    s.tell(&key, o)
                });
            }
            Ok(watcher::Event::InitDone) => {
                let present = relist.take().unwrap_or_default();
                debug!(
                    kind,
                    objects = present.len(),
                    "listed (the cache holds the list now)"
                );
                let mut subs = lock(&self.subscribers);
                subs.retain_mut(|s| {
                    // The store holds the new list now: tell what changed in it.
                    let mut open = true;
                    for (key, o) in std::mem::take(&mut s.pending) {
                        match (&s.target, o) {
                            (Target::Wake(w), _) => w.changed_shared(&s.kind, key),
                            (Target::Trigger(tx), Some(o)) => open &= tx.send(o).is_ok(),
                            (Target::Trigger(_), None) => {}
                        }
                    }
                    // Deleted while the watch was down: no Delete event came.
                    let gone: Vec<SharedKey> = s
                        .seen
                        .keys()
                        .filter(|k| !present.contains(&***k))
                        .cloned()
                        .collect();
                    for key in gone {
                        s.seen.remove(&*key);
                        if let Target::Wake(w) = &s.target {
                            w.changed_shared(&s.kind, key);
                        }
                    }
                    open && !matches!(&s.target, Target::Trigger(tx) if tx.is_closed())
                });
                drop(subs);
                self.health.set(KindState::Synced);
            }
        }
    }

    /// An object appeared or changed; `relisting`: it came in a relist of a synced
    /// cache, whose objects reach the store only at `InitDone` (subscribers are told
    /// then). Returns the key as the subscribers hold it (the relist's record of what
    /// it holds shares it too).
    fn applied(&self, key: &ObjectKey, o: &K, relisting: bool) -> SharedKey {
        // The key as every subscriber that has not seen the object yet holds it: one
        // allocation, shared.
        let mut shared: Option<SharedKey> = None;
        let mut subs = lock(&self.subscribers);
        subs.retain_mut(|s| {
            let f = digest(&(s.fingerprint)(o));
            let key = match s.seen.get_key_value(key) {
                Some((k, d)) => {
                    let k = Arc::clone(shared.get_or_insert_with(|| Arc::clone(k)));
                    if *d == f {
                        return true;
                    }
                    k
                }
                None => Arc::clone(shared.get_or_insert_with(|| Arc::new(key.clone()))),
            };
            s.seen.insert(Arc::clone(&key), f);
            if relisting {
                let keep = matches!(s.target, Target::Trigger(_)).then(|| o.clone());
                s.pending.push((key, keep));
                return true;
            }
            s.tell(&key, o)
        });
        shared.unwrap_or_else(|| Arc::new(key.clone()))
    }
}

/// A fingerprint's digest (SipHash with fixed keys: the same in the whole process).
/// Two fingerprints of one object that differ share a digest with a chance of 2⁻⁶⁴;
/// the job's periodic full pass would still see that change.
fn digest(fingerprint: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    fingerprint.hash(&mut h);
    h.finish()
}

/// The annotation `kubectl apply` keeps its last sent object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What of a cached object no job reads, dropped before it reaches the cache: a
/// Node's image list, volumes, capacity and system info (tens of KiB on a busy
/// node, times every node). Jobs read a Node's metadata (labels, annotations,
/// creation), spec (taints, unschedulable, providerID) and status conditions and
/// addresses; of a NodeNetworkConfig's status, what the routing job reads; `managedFields`
/// are dropped from every kind, `kubectl apply`'s last-applied copy from every kind but
/// NodeNetworkConfig.
fn slim<K: Resource + 'static>(o: &mut K) {
    o.meta_mut().managed_fields = None;
    // A copy of the whole object as `kubectl apply` last sent it; `kubectl` reads it
    // from the API server, nothing here reads it. A NodeNetworkConfig keeps it: the
    // routing job updates one from its cached copy, and an update without it would
    // remove it (none of ours has one: it costs nothing but where someone applied one).
    let keep = (o as &dyn Any).is::<crate::api::NodeNetworkConfig>();
    let meta = o.meta_mut();
    if !keep && let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
        if a.is_empty() {
            meta.annotations = None;
        }
    }
    // Of an agent's report the routing job reads its revisions and renderings, whether
    // it reads shared renderings, and its `Degraded` and `Fighting` conditions; the
    // item errors and lists and the `Applied` condition's text are for `kubectl` and
    // `netpolicy status`, which read the API server (~2 MB at 10,000 nodes). An update
    // from the cached copy sends no status: the status is a subresource.
    if let Some(nnc) = (o as &mut dyn Any).downcast_mut::<crate::api::NodeNetworkConfig>()
        && let Some(st) = nnc.status.as_mut()
    {
        use crate::api::conditions::{DEGRADED, FIGHTING};
        st.conditions
            .retain(|c| c.type_ == DEGRADED || c.type_ == FIGHTING);
        st.conditions.shrink_to_fit();
        st.item_errors = Vec::new();
        st.left_behind = Vec::new();
        st.removed_foreign = Vec::new();
        st.not_probed = Vec::new();
    }
    if let Some(node) = (o as &mut dyn Any).downcast_mut::<k8s_openapi::api::core::v1::Node>()
        && let Some(st) = node.status.as_mut()
    {
        *st = k8s_openapi::api::core::v1::NodeStatus {
            addresses: st.addresses.take(),
            conditions: st.conditions.take(),
            ..Default::default()
        };
    }
}

fn tokio_stream_from<K: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(Ok)))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::runtime::{Informers, offline_client};

    fn cm(ns: &str, name: &str, v: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some(ns.into());
        c.metadata.name = Some(name.into());
        c.data = Some([("k".to_owned(), v.to_owned())].into());
        c
    }

    /// An informer fed by hand: each event goes to the store first, then to
    /// `dispatch`, as the reflector does.
    struct Fed {
        informer: Informer<ConfigMap>,
        writer: Writer<ConfigMap>,
        relist: Option<HashSet<SharedKey>>,
    }

    impl Fed {
        fn new() -> Self {
            let informers = Informers::new(offline_client());
            let informer = informers.get::<ConfigMap>();
            let writer = lock(&informer.inner.writer)
                .take()
                .unwrap_or_else(|| unreachable!("not started"));
            Self {
                informer,
                writer,
                relist: None,
            }
        }

        fn feed(&mut self, ev: Event<ConfigMap>) {
            self.writer.apply_watcher_event(&ev);
            self.informer.inner.dispatch(&Ok(ev), &mut self.relist);
        }

        fn list(&mut self, objects: Vec<ConfigMap>) {
            self.feed(Event::Init);
            for o in objects {
                self.feed(Event::InitApply(o));
            }
            self.feed(Event::InitDone);
        }
    }

    fn keys(c: &Changes) -> Vec<String> {
        c.of("ConfigMap").map(ToString::to_string).collect()
    }

    #[test]
    fn a_cached_node_network_config_keeps_of_its_status_what_the_routing_job_reads() {
        let mut o: crate::api::NodeNetworkConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
            "metadata": {"name": "n1", "labels": {"app.kubernetes.io/managed-by": "netpolicy"},
                         "annotations": {LAST_APPLIED: "{}"}},
            "spec": {"revision": "r2", "shared": true},
            "status": {
                "observedGeneration": 3, "appliedRevision": "r1", "failedRevision": "r2",
                "appliedRendering": "a", "failedRendering": "b", "sharedRenderings": true,
                "conditions": [
                    {"type": "Applied", "status": "False", "reason": "RolledBack",
                     "message": "revision r2 was rolled back", "lastTransitionTime": "2026-12-08T00:00:00Z"},
                    {"type": "Degraded", "status": "True", "reason": "ProbeFailed",
                     "message": "probe p failed", "lastTransitionTime": "2026-12-08T00:00:00Z"},
                    {"type": "Fighting", "status": "True", "reason": "Fighting",
                     "message": "route 10.0.0.0/8", "lastTransitionTime": "2026-12-08T00:00:00Z"}
                ],
                "itemErrors": [{"item": "route 10.0.0.0/8", "reason": "Refused", "message": "EEXIST"}],
                "leftBehind": ["route 10.1.0.0/16"], "removedForeign": ["route 10.2.0.0/16"],
                "notProbed": ["p"]
            }
        }))
        .unwrap();
        let before = o.clone();
        slim(&mut o);
        // Metadata (labels, kubectl's copy: an update from the cache keeps them) and
        // the spec stay whole.
        assert_eq!((&o.metadata, &o.spec), (&before.metadata, &before.spec));
        let (st, was) = (o.status.unwrap(), before.status.unwrap());
        let kinds: Vec<&str> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(kinds, ["Degraded", "Fighting"]);
        assert_eq!(st.conditions[..], was.conditions[1..]);
        assert_eq!(
            (
                st.applied_revision,
                st.failed_revision,
                st.applied_rendering
            ),
            (
                was.applied_revision,
                was.failed_revision,
                was.applied_rendering
            )
        );
        assert_eq!(
            (
                st.failed_rendering,
                st.shared_renderings,
                st.observed_generation
            ),
            (was.failed_rendering, true, Some(3))
        );
        assert!(st.item_errors.is_empty() && st.left_behind.is_empty());
        assert!(st.removed_foreign.is_empty() && st.not_probed.is_empty());
    }

    #[test]
    fn a_cached_node_keeps_what_jobs_read_and_drops_images_volumes_and_system_info() {
        use k8s_openapi::api::core::v1::{
            ContainerImage, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo,
        };
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels = Some([("zone".to_owned(), "a".to_owned())].into());
        n.metadata.annotations = Some(
            [(
                "projectcalico.org/IPv4Address".to_owned(),
                "10.0.0.1/24".to_owned(),
            )]
            .into(),
        );
        n.metadata.managed_fields = Some(vec![Default::default()]);
        n.spec = Some(NodeSpec {
            provider_id: Some("hcloud://1".into()),
            unschedulable: Some(true),
            ..Default::default()
        });
        let ready = NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        };
        let address = NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.1".into(),
        };
        n.status = Some(NodeStatus {
            conditions: Some(vec![ready.clone()]),
            addresses: Some(vec![address.clone()]),
            images: Some(vec![ContainerImage {
                names: Some(vec!["registry.example/big:1".into()]),
                size_bytes: Some(1 << 30),
            }]),
            volumes_in_use: Some(vec!["kubernetes.io/csi/x".into()]),
            node_info: Some(NodeSystemInfo::default()),
            capacity: Some([("cpu".to_owned(), Default::default())].into()),
            ..Default::default()
        });
        let before = n.clone();
        slim(&mut n);
        assert_eq!(n.metadata.managed_fields, None);
        assert_eq!(n.metadata.labels, before.metadata.labels);
        assert_eq!(n.metadata.annotations, before.metadata.annotations);
        assert_eq!(n.spec, before.spec);
        let st = n.status.unwrap_or_default();
        assert_eq!(st.conditions, Some(vec![ready]));
        assert_eq!(st.addresses, Some(vec![address]));
        assert_eq!(
            (st.images, st.volumes_in_use, st.node_info, st.capacity),
            (None, None, None, None)
        );
        // Other kinds lose only their managedFields and kubectl's last-applied copy
        // (other annotations stay).
        let mut c = cm("ns", "a", "v");
        c.metadata.managed_fields = Some(vec![Default::default()]);
        c.metadata.annotations = Some([(LAST_APPLIED.to_owned(), "{...}".to_owned())].into());
        slim(&mut c);
        assert_eq!(c, cm("ns", "a", "v"));
        let mut c = cm("ns", "a", "v");
        let kept = [("example.com/x".to_owned(), "y".to_owned())];
        c.metadata.annotations = Some(kept.clone().into());
        let mut with_copy = c.clone();
        with_copy
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(LAST_APPLIED.to_owned(), "{...}".to_owned());
        slim(&mut with_copy);
        assert_eq!(with_copy, c);
    }

    #[tokio::test]
    async fn same_named_objects_in_two_namespaces_are_two_changes() {
        let mut fed = Fed::new();
        let wake = Wake::new();
        fed.informer
            .subscribe(&wake, |c: &ConfigMap| format!("{:?}", c.data));
        fed.list(vec![cm("a", "web", "1"), cm("b", "web", "1")]);
        assert_eq!(keys(&wake.take()), ["a/web", "b/web"]);
        assert!(fed.informer.health().usable());
        fed.feed(Event::Apply(cm("b", "web", "2")));
        assert_eq!(keys(&wake.take()), ["b/web"]);
        // A change outside the fingerprint wakes nobody.
        let mut same = cm("a", "web", "1");
        same.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
        fed.feed(Event::Apply(same));
        assert!(wake.take().is_empty());
    }

    #[tokio::test]
    async fn every_subscriber_and_the_changes_it_tells_share_one_key_per_object() {
        let mut fed = Fed::new();
        let (a, b) = (Wake::new(), Wake::new());
        fed.informer
            .subscribe(&a, |c: &ConfigMap| format!("{:?}", c.data));
        fed.informer
            .subscribe(&b, |c: &ConfigMap| format!("{:?}", c.metadata.labels));
        fed.list(vec![cm("a", "one", "1")]);
        let told = |w: &Wake| {
            let c = w.take();
            let keys = c.keys.get("ConfigMap").cloned().unwrap_or_default();
            keys.into_iter()
                .next()
                .unwrap_or_else(|| panic!("nothing told"))
        };
        let (ta, tb) = (told(&a), told(&b));
        let subs = lock(&fed.informer.inner.subscribers);
        let seen: Vec<&SharedKey> = subs.iter().flat_map(|s| s.seen.keys()).collect();
        assert_eq!(seen.len(), 2);
        assert!(
            Arc::ptr_eq(seen[0], seen[1]),
            "each subscriber copied the key"
        );
        assert!(Arc::ptr_eq(seen[0], &ta) && Arc::ptr_eq(&ta, &tb));
        assert_eq!(ta.to_string(), "a/one");
    }

    #[tokio::test]
    async fn a_relist_tells_its_changes_once_the_store_holds_them_and_reports_deletions() {
        let mut fed = Fed::new();
        let wake = Wake::new();
        fed.informer
            .subscribe(&wake, |c: &ConfigMap| format!("{:?}", c.data));
        fed.list(vec![cm("a", "one", "1"), cm("a", "two", "1")]);
        let _ = wake.take();
        // The watch restarts: `one` changed and `two` was deleted while it was down.
        fed.feed(Event::Init);
        fed.feed(Event::InitApply(cm("a", "one", "2")));
        assert!(
            wake.take().is_empty(),
            "told before the store holds the new list"
        );
        fed.feed(Event::InitDone);
        assert_eq!(keys(&wake.take()), ["a/one", "a/two"]);
        let store = fed.informer.store();
        let one = store
            .get(&kube::runtime::reflector::ObjectRef::new("one").within("a"))
            .and_then(|c| c.data.clone())
            .unwrap_or_default();
        assert_eq!(one.get("k").map(String::as_str), Some("2"));
        assert!(
            store
                .get(&kube::runtime::reflector::ObjectRef::new("two").within("a"))
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_kind_that_cannot_be_listed_says_why_and_an_optional_absent_one_is_usable() {
        let fed = Fed::new();
        let h = fed.informer.health();
        assert_eq!(h.waiting_for().as_deref(), Some("listing configmaps"));
        let status = |code: u16, reason: &str, message: &str| -> kube::core::Status {
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": code, "reason": reason, "message": message,
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let refused = status(403, "Forbidden", "configmaps is forbidden");
        h.failed(&watcher::Error::InitialListFailed(kube::Error::Api(
            refused.into(),
        )));
        assert_eq!(
            h.waiting_for().as_deref(),
            Some("cannot list configmaps: Forbidden (configmaps is forbidden)")
        );
        let optional = KindHealth::new(Arc::from("BGPPeer"), "bgppeers".into(), true);
        let missing = status(404, "NotFound", "not found");
        optional.failed(&watcher::Error::InitialListFailed(kube::Error::Api(
            missing.into(),
        )));
        assert!(optional.usable());
        assert_eq!(optional.state(), KindState::Absent);
    }
}
