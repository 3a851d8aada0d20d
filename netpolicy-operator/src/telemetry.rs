//! What the operator and the agent report about themselves: metrics and the flags the
//! health endpoints read. A leaf module: the runtime serves it, the controllers and the
//! agent update it, and it depends on neither.

use std::{
    sync::atomic::{AtomicBool, AtomicI64, Ordering},
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

/// The operator's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabel, Counter>,
    errors: Family<ControllerLabel, Counter>,
    duration: Family<ControllerLabel, Histogram>,
    pub(crate) leader: Gauge<i64, AtomicI64>,
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("netpolicy");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let errors = Family::<ControllerLabel, Counter>::default();
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
            "reconcile_duration_seconds",
            "Time per reconcile pass",
            duration.clone(),
        );
        registry.register(
            "leader",
            "1 while this instance holds the lease",
            leader.clone(),
        );
        Self {
            registry,
            reconciles,
            errors,
            duration,
            leader,
        }
    }
}

impl Metrics {
    /// Records one reconcile pass of `controller`.
    pub fn reconciled(&self, controller: &str, took: Duration, ok: bool) {
        let l = ControllerLabel {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&l).inc();
        if !ok {
            self.errors.get_or_create(&l).inc();
        }
        self.duration.get_or_create(&l).observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if encode(&mut s, &self.registry).is_err() {
            s.clear();
        }
        s
    }
}

/// State shared by the endpoints and the controllers.
#[derive(Debug, Default)]
pub struct Shared {
    /// Metrics.
    pub metrics: Metrics,
    /// The API server answered.
    pub connected: AtomicBool,
    /// This instance leads and its controllers' caches have synced.
    pub synced: AtomicBool,
    /// This instance holds the lease.
    pub leading: AtomicBool,
}

impl Shared {
    pub(crate) fn ready(&self) -> bool {
        self.connected.load(Ordering::Acquire)
            && (!self.leading.load(Ordering::Acquire) || self.synced.load(Ordering::Acquire))
    }
}
