//! The runtime's second shape: per-object jobs, one reconcile per object (routed IPs,
//! where one object's slow or rate-limited provider must never delay another's
//! failover), built on kube-runtime's `Controller` and fed by the shared informers.
//!
//! A job implements [`ObjectJob`] — `reconcile(obj) -> Result<Next, Error>` and the class
//! of its errors — and [`Runner::run_each`] owns everything else, as [`Runner::run`]
//! does for global jobs:
//!
//! - registration for readiness before the future is polled, and the wait until every
//!   kind the job reads has synced;
//! - graceful shutdown on `stop` (a reconcile in flight finishes);
//! - the backoff of each object by its error's class (its own: the others go on),
//!   reset by a success, and for transient ones by the API server turning ready again
//!   (the objects waiting in one are reconciled then); [`Next::Backoff`] for a reconcile that reported a condition
//!   and wants to look again by a class's backoff without failing;
//! - metrics: `netpolicy_reconciles_total`, errors by class and the measured duration of
//!   every reconcile, under the job's name;
//! - readiness: every object present when the caches synced has been reconciled
//!   *successfully* once (a failing first reconcile keeps the job waiting, naming the
//!   error; an object deleted meanwhile no longer counts).
//!
//! # Examples
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//!
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use netpolicy_operator::runtime::{
//!     ErrorClass, Informers, Next, ObjectJob, ObjectSetup, Runner,
//! };
//!
//! /// Logs each ConfigMap's size.
//! struct Sizes;
//!
//! impl ObjectJob for Sizes {
//!     type Kind = ConfigMap;
//!     type Error = kube::Error;
//!     fn name(&self) -> &'static str { "sizes" }
//!     fn class(&self, e: &kube::Error) -> ErrorClass { ErrorClass::of(e) }
//!     async fn reconcile(&self, cm: Arc<ConfigMap>) -> Result<Next, kube::Error> {
//!         println!("{} keys", cm.data.as_ref().map_or(0, |d| d.len()));
//!         Ok(Next::Resync)
//!     }
//! }
//!
//! # async fn demo(client: kube::Client) {
//! let informers = Informers::new(client);
//! let maps = informers.get::<ConfigMap>();
//! let setup = ObjectSetup::new(Arc::new(Sizes), &maps, |c| format!("{:?}", c.data));
//! let runner = Runner::new(Arc::default(), Duration::from_secs(300));
//! let (_stop_tx, stop) = tokio::sync::watch::channel(false);
//! let sizes = runner.run_each(setup, stop);
//! informers.start();
//! sizes.await;
//! # }
//! ```

use std::{
    collections::{HashMap, HashSet},
    fmt,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Resource,
    runtime::{Controller, controller::Action, reflector::ObjectRef, reflector::Store, watcher},
};
use tokio::{sync::watch, time::Instant};
use tracing::{debug, info};

use super::{
    informer::{Informer, KindHealth, lock},
    runner::{Backoff, ErrorClass, JobReadiness, Next, Runner},
};
use crate::error::Chain;

/// A per-object job: one reconcile per object of [`ObjectJob::Kind`].
pub trait ObjectJob: Send + Sync + 'static {
    /// The kind reconciled.
    type Kind: Resource<DynamicType = ()>
        + Clone
        + fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static;
    /// Why a reconcile failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The job's name in logs, metrics (`controller` label) and readiness.
    fn name(&self) -> &'static str;

    /// How a failure is retried.
    fn class(&self, e: &Self::Error) -> ErrorClass;

    /// One reconcile of `obj`. It writes only what differs from what is stored.
    ///
    /// # Errors
    /// A failure: `obj` is retried by its [`ObjectJob::class`], on its own.
    fn reconcile(
        &self,
        obj: Arc<Self::Kind>,
    ) -> impl Future<Output = Result<Next, Self::Error>> + Send;

    /// After a failed reconcile, with the backoff's `delay`: the delay to use (a
    /// provider's `Retry-After`, say), and whatever the job reports (a condition, an
    /// Event). Called outside any reconcile; spawn what awaits. Default: `delay`.
    fn failed(
        self: &Arc<Self>,
        _obj: &Arc<Self::Kind>,
        _e: &Self::Error,
        delay: Duration,
    ) -> Duration {
        delay
    }
}

/// A per-object job with what triggers it and the kinds it reads.
pub struct ObjectSetup<J: ObjectJob> {
    job: Arc<J>,
    trigger: BoxStream<'static, Result<J::Kind, watcher::Error>>,
    store: Store<J::Kind>,
    related: Vec<BoxStream<'static, ObjectRef<J::Kind>>>,
    kinds: Vec<Arc<KindHealth>>,
}

impl<J: ObjectJob> ObjectSetup<J> {
    /// `job` on the objects of `objects`, reconciled when they appear or change in what
    /// `fingerprint` covers.
    pub fn new(
        job: Arc<J>,
        objects: &Informer<J::Kind>,
        fingerprint: impl Fn(&J::Kind) -> String + Send + Sync + 'static,
    ) -> Self {
        Self {
            job,
            trigger: objects.trigger(fingerprint).boxed(),
            store: objects.store(),
            related: Vec::new(),
            kinds: vec![objects.health()],
        }
    }

    /// Also reconciles the objects `map` names when an object of `other` appears,
    /// disappears or changes in what `fingerprint` covers (and waits for `other` to
    /// sync).
    #[must_use]
    pub fn related<O, I>(
        mut self,
        other: &Informer<O>,
        fingerprint: impl Fn(&O) -> String + Send + Sync + 'static,
        map: impl Fn(O) -> I + Send + 'static,
    ) -> Self
    where
        O: Resource + Clone + fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
        O::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync + Unpin,
        I: IntoIterator<Item = ObjectRef<J::Kind>>,
        I::IntoIter: Send + 'static,
    {
        let refs = other
            .trigger(fingerprint)
            .filter_map(|o| futures::future::ready(o.ok()))
            .flat_map(move |o| futures::stream::iter(map(o)));
        self.related.push(refs.boxed());
        self.kinds.push(other.health());
        self
    }

    /// Also waits for `kind` to sync (a kind the job reads without being triggered by
    /// it).
    #[must_use]
    pub fn reads(mut self, kind: Arc<KindHealth>) -> Self {
        self.kinds.push(kind);
        self
    }
}

/// The backoff of each object, with the class it is for.
type Backoffs<K> = HashMap<ObjectRef<K>, (ErrorClass, Backoff)>;

/// What the controller's reconciles share.
struct Driver<J: ObjectJob> {
    job: Arc<J>,
    runner: Runner,
    /// The backoff of each object that failed (or asked for one), with its class.
    backoff: Mutex<Backoffs<J::Kind>>,
}

impl<J: ObjectJob> Driver<J> {
    /// The next delay of `obj`'s backoff for `class` (a new backoff when the class
    /// changed).
    fn next_delay(&self, obj: ObjectRef<J::Kind>, class: ErrorClass) -> Duration {
        let mut b = lock(&self.backoff);
        let entry = b.entry(obj).or_insert_with(|| (class, class.backoff()));
        if entry.0 != class {
            *entry = (class, class.backoff());
        }
        entry.1.next_delay()
    }
}

/// A failed reconcile, with its class.
#[derive(Debug)]
struct Failure<E> {
    class: ErrorClass,
    error: E,
}

impl<E: fmt::Display> fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Failure<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

async fn reconcile<J: ObjectJob>(
    obj: Arc<J::Kind>,
    driver: Arc<Driver<J>>,
) -> Result<Action, Failure<J::Error>> {
    let key = ObjectRef::from_obj(obj.as_ref());
    let start = Instant::now();
    let result = driver.job.reconcile(obj).await;
    let took = start.elapsed();
    let name = driver.job.name();
    let shared = &driver.runner.shared;
    let resync = driver.runner.resync;
    match result {
        Ok(next) => {
            shared.metrics.reconciled(name, took, None);
            let delay = match next {
                Next::Resync => resync,
                Next::After(d) => d.min(resync),
                Next::Backoff(class) => driver.next_delay(key.clone(), class).min(resync),
            };
            if !matches!(next, Next::Backoff(_)) {
                lock(&driver.backoff).remove(&key);
            }
            Ok(Action::requeue(delay))
        }
        Err(error) => {
            let class = driver.job.class(&error);
            shared.metrics.reconciled(name, took, Some(class.as_str()));
            Err(Failure { class, error })
        }
    }
}

fn error_policy<J: ObjectJob>(
    obj: Arc<J::Kind>,
    e: &Failure<J::Error>,
    driver: Arc<Driver<J>>,
) -> Action {
    let delay = driver.next_delay(ObjectRef::from_obj(obj.as_ref()), e.class);
    Action::requeue(driver.job.failed(&obj, &e.error, delay))
}

impl Runner {
    /// Runs a per-object job until `stop` turns true (see the module docs). The job
    /// counts for readiness from this call on (before the future is polled).
    pub fn run_each<J: ObjectJob>(
        &self,
        setup: ObjectSetup<J>,
        stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send + 'static + use<J> {
        let name = setup.job.name();
        let ready = JobReadiness::new(name, setup.kinds);
        self.shared
            .register(Arc::clone(&ready) as Arc<dyn crate::telemetry::Waiting>);
        let driver = Arc::new(Driver {
            job: setup.job,
            runner: self.clone(),
            backoff: Mutex::new(HashMap::new()),
        });
        let (trigger, store, related) = (setup.trigger, setup.store, setup.related);
        let self_shared = Arc::clone(&self.shared);
        async move {
            let mut stopped = stop.clone();
            tokio::select! {
                () = ready.wait_synced() => {}
                _ = stopped.changed() => return,
            }
            info!(job = name, "caches synced: running");
            self_shared.metrics.job_started(name);
            // Readiness: every object there was at start, reconciled successfully once.
            let mut first: HashSet<ObjectRef<J::Kind>> = store
                .state()
                .iter()
                .map(|o| ObjectRef::from_obj(o.as_ref()))
                .collect();
            if first.is_empty() {
                ready.passed();
            }
            let shutdown = async move {
                let _ = stopped.changed().await;
            };
            let mut controller = Controller::for_stream(trigger, store.clone())
                .with_config(super::controller_config());
            for r in related {
                controller = controller.reconcile_on(r);
            }
            controller = controller
                .reconcile_on(recovered(self_shared.api_recoveries(), Arc::clone(&driver)));
            controller
                .graceful_shutdown_on(shutdown)
                .run(reconcile::<J>, error_policy::<J>, Arc::clone(&driver))
                .for_each(move |r| {
                    if !first.is_empty() {
                        match &r {
                            Ok((o, _)) => {
                                first.remove(o);
                            }
                            Err(kube::runtime::controller::Error::ReconcilerFailed(e, o)) => {
                                ready.failed(format!("{o}: {}", Chain(e)));
                            }
                            Err(_) => {}
                        }
                        first.retain(|o| store.get(o).is_some());
                        if first.is_empty() {
                            ready.passed();
                        }
                    }
                    if let Err(e) = &r {
                        // The backoff of an object deleted while failing goes with it.
                        lock(&driver.backoff).retain(|o, _| store.get(o).is_some());
                        debug!(job = name, error = %e, "reconcile");
                    }
                    futures::future::ready(())
                })
                .await;
            info!(job = name, "stopped");
        }
    }
}

/// The objects waiting in a transient backoff, each time the API server is ready again
/// after an outage: their backoffs (grown by the outage, up to minutes) start over and
/// they are reconciled now.
fn recovered<J: ObjectJob>(
    recoveries: watch::Receiver<u64>,
    driver: Arc<Driver<J>>,
) -> impl futures::Stream<Item = ObjectRef<J::Kind>> + Send + 'static {
    futures::stream::unfold(recoveries, |mut rx| async move {
        rx.changed().await.ok().map(|()| ((), rx))
    })
    .flat_map(move |()| {
        let mut backoff = lock(&driver.backoff);
        let waiting: Vec<ObjectRef<J::Kind>> = backoff
            .iter()
            .filter(|(_, (class, _))| *class == ErrorClass::Transient)
            .map(|(o, _)| o.clone())
            .collect();
        for o in &waiting {
            backoff.remove(o);
        }
        if !waiting.is_empty() {
            info!(
                job = driver.job.name(),
                objects = waiting.len(),
                "the API server is ready again: retrying now"
            );
        }
        futures::stream::iter(waiting)
    })
}

/// Every object of `store`: the mapping of a change that concerns all of them.
pub fn all<K: Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::store::Writer;

    use super::*;
    use crate::telemetry::Shared;

    /// Fails its first `fails` reconciles (transient), each taking 50 ms.
    struct Flaky {
        fails: u32,
        calls: AtomicU32,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("provider said 503")]
    struct Refused;

    impl ObjectJob for Flaky {
        type Kind = ConfigMap;
        type Error = Refused;
        fn name(&self) -> &'static str {
            "flaky"
        }
        fn class(&self, _: &Refused) -> ErrorClass {
            ErrorClass::Transient
        }
        async fn reconcile(&self, _: Arc<ConfigMap>) -> Result<Next, Refused> {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if self.calls.fetch_add(1, Ordering::SeqCst) < self.fails {
                Err(Refused)
            } else {
                Ok(Next::Resync)
            }
        }
    }

    fn map(name: &str) -> ConfigMap {
        let mut m = ConfigMap::default();
        m.metadata.name = Some(name.into());
        m.metadata.namespace = Some("default".into());
        m
    }

    /// The job over one ConfigMap already in the store (hand-fed: no API server), and
    /// the store's writer (kept alive for the test).
    fn setup(fails: u32) -> (ObjectSetup<Flaky>, Arc<Flaky>, Writer<ConfigMap>) {
        let mut writer = Writer::<ConfigMap>::default();
        // A listing as a watch delivers it (the controller waits for the store to be
        // ready).
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(map("a")));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let job = Arc::new(Flaky {
            fails,
            calls: AtomicU32::new(0),
        });
        let trigger = futures::stream::iter([Ok(map("a"))])
            .chain(futures::stream::pending())
            .boxed();
        let setup = ObjectSetup {
            job: Arc::clone(&job),
            trigger,
            store: writer.as_reader(),
            related: Vec::new(),
            kinds: Vec::new(),
        };
        (setup, job, writer)
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_first_reconcile_is_not_ready_and_backs_off_by_class() {
        let (setup, job, _writer) = setup(2);
        let shared = Shared::leading();
        let runner = Runner::new(Arc::clone(&shared), Duration::from_secs(3600));
        let (stop_tx, stop) = watch::channel(false);
        let run = runner.run_each(setup, stop);
        assert_eq!(shared.waiting(), ["flaky: first pass not finished"]);
        let task = tokio::spawn(run);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let waiting = shared.waiting();
        assert!(
            waiting.len() == 1
                && waiting[0].contains("first pass failed")
                && waiting[0].contains("provider said 503"),
            "{waiting:?}"
        );
        assert_eq!(
            job.calls.load(Ordering::SeqCst),
            1,
            "transient: ~1 s before the retry"
        );
        // 1 s, then 2 s (±20 %): the third reconcile succeeds.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(job.calls.load(Ordering::SeqCst), 3);
        assert!(shared.waiting().is_empty(), "{:?}", shared.waiting());
        let metrics = shared.metrics.render();
        assert!(
            metrics.contains(r#"netpolicy_reconcile_errors_by_class_total{controller="flaky",class="transient"} 2"#),
            "{metrics}"
        );
        // Durations are measured: three reconciles of 50 ms each.
        let sum = metrics
            .lines()
            .find(|l| {
                l.starts_with(r#"netpolicy_reconcile_duration_seconds_sum{controller="flaky"}"#)
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_default();
        assert!(
            (0.15..0.2).contains(&sum),
            "duration sum {sum} s\n{metrics}"
        );
        let _ = stop_tx.send(true);
        task.await.unwrap_or_default();
    }

    #[tokio::test(start_paused = true)]
    async fn the_api_server_ready_again_retries_an_object_in_a_transient_backoff_now() {
        // Six failures: 1 + 2 + 4 + 8 + 16 s of backoff, then ~32 s before the seventh.
        let (setup, job, _writer) = setup(7);
        let shared = Shared::leading();
        let runner = Runner::new(Arc::clone(&shared), Duration::from_secs(3600));
        let (stop_tx, stop) = watch::channel(false);
        shared.set_api_trouble(Some("[-]etcd failed".into()));
        let task = tokio::spawn(runner.run_each(setup, stop));
        let calls = || job.calls.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert_eq!(calls(), 6, "six reconciles in 40 s of backoff");
        shared.set_api_trouble(None);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(calls(), 7, "reconciled when the API server came back");
        // Its next failure backs off from the first step (~1 s), not from 64 s.
        tokio::time::sleep(Duration::from_millis(1400)).await;
        assert_eq!(calls(), 8, "then ~1 s, and it succeeded");
        let _ = stop_tx.send(true);
        task.await.unwrap_or_default();
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_whose_objects_all_succeed_once_is_ready() {
        let (setup, _job, _writer) = setup(0);
        let shared = Shared::leading();
        let runner = Runner::new(Arc::clone(&shared), Duration::from_secs(3600));
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(runner.run_each(setup, stop));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(shared.waiting().is_empty(), "{:?}", shared.waiting());
        let _ = stop_tx.send(true);
        task.await.unwrap_or_default();
    }
}
