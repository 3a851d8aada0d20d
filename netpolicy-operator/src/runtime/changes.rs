//! What a job is told: the keys of the objects that changed since it last looked
//! ([`Changes`], per kind), and the [`Wake`] that carries them from the informers
//! ([`super::informer`]) to the job.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    sync::{Arc, Mutex, MutexGuard},
};

use kube::Resource;
use tokio::sync::Notify;

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical
/// section here leaves it whole).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An object's identity within its kind: namespace (`None` for cluster-scoped kinds) and
/// name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `o`.
    pub fn of<K: Resource>(o: &K) -> Self {
        Self {
            namespace: o.meta().namespace.clone(),
            name: o.meta().name.clone().unwrap_or_default(),
        }
    }

    /// A cluster-scoped object's key.
    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// An object's key as the informer holds it: one allocation per object, shared by every
/// subscriber's digests and the changes it tells (at 10,000 objects a kind and several
/// subscribers a kind, copies of the name were megabytes).
pub(super) type SharedKey = Arc<ObjectKey>;

/// What changed since a job last looked: object keys per kind, and whether the job
/// must compare everything (its first pass, a resync, the pass after a failure).
#[derive(Debug, Default, Clone)]
pub struct Changes {
    /// Compare every object, not only the changed ones.
    pub full: bool,
    pub(super) keys: BTreeMap<Arc<str>, BTreeSet<SharedKey>>,
}

impl Changes {
    /// Nothing changed and no full pass is due.
    pub fn is_empty(&self) -> bool {
        !self.full && self.keys.is_empty()
    }

    /// The changed objects of `kind` (appeared, disappeared, or changed in what the
    /// subscription's fingerprint covers).
    pub fn of(&self, kind: &str) -> impl Iterator<Item = &ObjectKey> {
        self.keys.get(kind).into_iter().flatten().map(|k| &**k)
    }

    /// The kinds with changes.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.keys
            .iter()
            .filter(|(_, k)| !k.is_empty())
            .map(|(kind, _)| &**kind)
    }

    /// Whether anything of `kind` changed.
    pub fn touched(&self, kind: &str) -> bool {
        self.keys.get(kind).is_some_and(|k| !k.is_empty())
    }

    /// Records a change (for jobs that wake themselves, and for tests).
    pub fn insert(&mut self, kind: &str, key: ObjectKey) {
        self.insert_shared(kind, Arc::new(key));
    }

    pub(super) fn insert_shared(&mut self, kind: &str, key: SharedKey) {
        match self.keys.get_mut(kind) {
            Some(keys) => {
                keys.insert(key);
            }
            None => {
                self.keys.insert(Arc::from(kind), BTreeSet::from([key]));
            }
        }
    }
}

/// Wakes a job and tells it which objects changed. Clones share one set of changes; a
/// wake-up that comes while the job works is kept for its next wait.
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

    /// Object `key` of `kind` changed.
    pub fn changed(&self, kind: &str, key: ObjectKey) {
        self.changed_shared(kind, Arc::new(key));
    }

    pub(super) fn changed_shared(&self, kind: &str, key: SharedKey) {
        lock(&self.changes).insert_shared(kind, key);
        self.notify.notify_one();
    }

    /// Waits until something changed (returns at once if something did since the last
    /// wait).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }

    /// The changes so far, leaving none.
    pub fn take(&self) -> Changes {
        std::mem::take(&mut *lock(&self.changes))
    }
}
