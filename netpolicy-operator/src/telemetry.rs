//! What the operator and the agent report about themselves: metrics and the flags the
//! health endpoints read. A leaf module: the runtime serves it, the controllers and the
//! agent update it, and it depends on neither.
//!
//! The runtime's metrics (passes, errors, durations, leadership, readiness, what the
//! process is) are here. Each job keeps its own in a `metrics.rs` beside its code (a
//! [`JobMetrics`], registered in this process's registry the first time it is asked for
//! with [`Metrics::of`]): adding a metric to a job edits that job's file only.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Labels of the per-controller metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// Controller name (`routing`).
    pub controller: String,
}

/// A job's (or the agent's) own metrics, kept beside its code: created and registered
/// (names prefixed `netpolicy_`) once per process, by [`Metrics::of`].
pub(crate) trait JobMetrics: Send + Sync + 'static {
    /// Creates the metrics and registers each in `registry`.
    fn register(registry: &mut Registry) -> Self;
}

/// The process's metrics: the runtime's, and each job's registered beside it.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Each job's metrics, by type.
    jobs: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    reconciles: Family<ControllerLabel, Counter>,
    errors: Family<ControllerLabel, Counter>,
    error_classes: Family<ErrorClassLabel, Counter>,
    duration: Family<ControllerLabel, Histogram>,
    build_info: Family<BuildLabel, Gauge<i64, AtomicI64>>,
    pub(crate) leader: Gauge<i64, AtomicI64>,
    pub(crate) ready: Gauge<i64, AtomicI64>,
}

/// Labels of the per-controller error metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorClassLabel {
    pub controller: String,
    pub class: String,
}

/// What this process is.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabel {
    pub component: String,
    pub version: String,
}

/// The buckets of a latency from a request to its outcome (seconds).
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("netpolicy");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let errors = Family::<ControllerLabel, Counter>::default();
        let error_classes = Family::<ErrorClassLabel, Counter>::default();
        let duration = Family::<ControllerLabel, Histogram>::new_with_constructor(
            duration_histogram as fn() -> Histogram,
        );
        let leader = Gauge::<i64, AtomicI64>::default();
        registry.register("reconciles", "Reconcile passes", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconcile passes that failed",
            errors.clone(),
        );
        registry.register(
            "reconcile_errors_by_class",
            "Reconcile passes that failed, by error class (transient, conflict, permanent)",
            error_classes.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time per reconcile pass",
            duration.clone(),
        );
        registry.register(
            "leader",
            "1 while this instance holds the lease",
            leader.clone(),
        );
        let build_info = Family::<BuildLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "build_info",
            "1, labelled with what this process is (operator or agent) and its version",
            build_info.clone(),
        );
        let ready = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "ready",
            "1 when this instance's /readyz says ready",
            ready.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            jobs: Mutex::default(),
            reconciles,
            errors,
            error_classes,
            duration,
            build_info,
            leader,
            ready,
        }
    }
}

impl Metrics {
    /// The metrics of type `T` (a job's), registered the first time they are asked for
    /// in this process; every later call shares them.
    pub(crate) fn of<T: JobMetrics>(&self) -> Arc<T> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(m) = jobs
            .get(&TypeId::of::<T>())
            .and_then(|m| Arc::clone(m).downcast::<T>().ok())
        {
            return m;
        }
        let m = Arc::new(T::register(
            &mut self.registry.lock().unwrap_or_else(PoisonError::into_inner),
        ));
        jobs.insert(
            TypeId::of::<T>(),
            Arc::clone(&m) as Arc<dyn Any + Send + Sync>,
        );
        m
    }

    /// A job's counters at 0 before its first pass (passes, errors by class): an alert
    /// on `increase(...)` sees its first error, and a quiet job's series exist.
    pub fn job_started(&self, controller: &str) {
        let l = ControllerLabel {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&l).inc_by(0);
        self.errors.get_or_create(&l).inc_by(0);
        for class in ["transient", "conflict", "permanent"] {
            self.error_classes
                .get_or_create(&ErrorClassLabel {
                    controller: controller.to_owned(),
                    class: class.to_owned(),
                })
                .inc_by(0);
        }
    }

    /// Records one reconcile pass of `controller`, failed with an error of class
    /// `error` (`transient`, `conflict`, `permanent`) or not.
    pub fn reconciled(&self, controller: &str, took: Duration, error: Option<&str>) {
        let l = ControllerLabel {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&l).inc();
        if let Some(class) = error {
            self.errors.get_or_create(&l).inc();
            self.error_classes
                .get_or_create(&ErrorClassLabel {
                    controller: controller.to_owned(),
                    class: class.to_owned(),
                })
                .inc();
        }
        self.duration.get_or_create(&l).observe(took.as_secs_f64());
    }

    /// What this process is: `netpolicy_build_info{component, version} 1`.
    pub fn component(&self, component: &str) {
        self.build_info
            .get_or_create(&BuildLabel {
                component: component.to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        if encode(&mut s, &registry).is_err() {
            s.clear();
        }
        s
    }
}

/// A count as a gauge's value (saturating).
pub(crate) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Why a job is not ready yet (`None` once it is).
pub trait Waiting: std::fmt::Debug + Send + Sync {
    /// `"<job>: <what it waits for>"`, or `None` when ready.
    fn waiting_for(&self) -> Option<String>;
}

/// State shared by the endpoints and the controllers.
#[derive(Debug, Default)]
pub struct Shared {
    /// Metrics.
    pub metrics: Metrics,
    /// The API server answered.
    pub connected: AtomicBool,
    /// This instance leads and has registered every job it runs.
    pub started: AtomicBool,
    /// This instance holds the lease.
    pub leading: AtomicBool,
    jobs: std::sync::Mutex<Vec<std::sync::Arc<dyn Waiting>>>,
    /// Why the API server is not ready, from its own `/readyz` (`None`: it is, or it
    /// is not asked).
    api_trouble: std::sync::Mutex<Option<String>>,
    /// How many times the API server's `/readyz` turned ready again after it was not:
    /// a transient backoff that an outage grew starts over then.
    api_recovered: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    /// A leader's state with its jobs started (tests of readiness).
    #[cfg(test)]
    pub(crate) fn leading() -> std::sync::Arc<Self> {
        use std::sync::atomic::Ordering;
        let shared = Self::default();
        shared.connected.store(true, Ordering::Release);
        shared.leading.store(true, Ordering::Release);
        shared.started.store(true, Ordering::Release);
        std::sync::Arc::new(shared)
    }

    /// Adds a job to what `/readyz` waits for.
    pub fn register(&self, job: std::sync::Arc<dyn Waiting>) {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(job);
    }

    /// What the API server's own `/readyz` last said: `None` when ready. Turning
    /// ready after it was not counts as a recovery ([`Shared::api_recoveries`]).
    pub fn set_api_trouble(&self, why: Option<String>) {
        let recovered = why.is_none();
        let was = std::mem::replace(
            &mut *self
                .api_trouble
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            why,
        );
        if recovered && was.is_some() {
            self.api_recovered.send_modify(|n| *n += 1);
        }
    }

    /// The count of the API server's recoveries (its `/readyz` ready again after it
    /// was not), to wait on: the runner starts a transient backoff over at each.
    pub fn api_recoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.api_recovered.subscribe()
    }

    /// Forgets every job (the controllers stopped).
    pub(crate) fn clear_jobs(&self) {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// What readiness waits for: empty when ready. A standby (not leading) is ready
    /// once the API server answered; the leader once every job it runs synced every kind
    /// it reads and finished its first pass.
    pub fn waiting(&self) -> Vec<String> {
        if !self.connected.load(Ordering::Acquire) {
            return vec!["the API server has not answered".into()];
        }
        if let Some(why) = &*self
            .api_trouble
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            return vec![format!("the API server is not ready: {why}")];
        }
        if !self.leading.load(Ordering::Acquire) {
            return Vec::new();
        }
        if !self.started.load(Ordering::Acquire) {
            return vec!["starting the jobs".into()];
        }
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter_map(|j| j.waiting_for())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Two {
        hits: Counter,
    }

    impl JobMetrics for Two {
        fn register(registry: &mut Registry) -> Self {
            let hits = Counter::default();
            registry.register("test_hits", "Hits", hits.clone());
            Self { hits }
        }
    }

    #[test]
    fn a_jobs_metrics_are_registered_once_and_shared() {
        let m = Metrics::default();
        m.of::<Two>().hits.inc();
        m.of::<Two>().hits.inc();
        let text = m.render();
        assert_eq!(
            text.matches("# TYPE netpolicy_test_hits counter").count(),
            1,
            "{text}"
        );
        assert!(text.contains("netpolicy_test_hits_total 2"), "{text}");
    }
}
