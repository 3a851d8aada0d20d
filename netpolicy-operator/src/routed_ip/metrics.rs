//! The routed-IP job's metrics (names and labels as the chart's alerts and dashboard
//! read them).

use std::{sync::atomic::AtomicI64, time::Duration};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::telemetry::{JobMetrics, latency_histogram};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabel {
    step: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorKindLabel {
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoutedIpLabel {
    routed_ip: String,
}

/// Failovers and their steps at the provider, the provider's errors and rate limits,
/// and each RoutedIP's readiness.
pub(crate) struct Metrics {
    failovers: Counter,
    steps: Family<StepLabel, Histogram>,
    errors: Family<ErrorKindLabel, Counter>,
    rate_limited: Counter,
    ready: Family<RoutedIpLabel, Gauge<i64, AtomicI64>>,
}

impl JobMetrics for Metrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self {
            failovers: Counter::default(),
            steps: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            errors: Family::default(),
            rate_limited: Counter::default(),
            ready: Family::default(),
        };
        registry.register(
            "routed_ip_failovers",
            "Routed IPs moved from one node to another",
            m.failovers.clone(),
        );
        registry.register(
            "routed_ip_step_seconds",
            "Time per failover step at the provider",
            m.steps.clone(),
        );
        registry.register(
            "routed_ip_provider_errors",
            "Provider calls that failed, by kind",
            m.errors.clone(),
        );
        registry.register(
            "routed_ip_rate_limit_waits",
            "Times a routed IP waited out the provider's Retry-After",
            m.rate_limited.clone(),
        );
        registry.register(
            "routed_ip_ready",
            "1 when a RoutedIP's Ready condition is True, 0 when not",
            m.ready.clone(),
        );
        m
    }
}

impl Metrics {
    /// A routed IP moved to another node.
    pub(crate) fn failover(&self) {
        self.failovers.inc();
    }

    /// A failover step done at the provider.
    pub(crate) fn step(&self, step: &str, took: Duration) {
        self.steps
            .get_or_create(&StepLabel { step: step.into() })
            .observe(took.as_secs_f64());
    }

    /// A provider call failed.
    pub(crate) fn provider_error(&self, kind: &str) {
        self.errors
            .get_or_create(&ErrorKindLabel { kind: kind.into() })
            .inc();
    }

    /// A routed IP waits out a rate limit.
    pub(crate) fn rate_limited(&self) {
        self.rate_limited.inc();
    }

    /// Whether RoutedIP `routed_ip` (`<namespace>/<name>`) is Ready; `None`: it is gone.
    pub(crate) fn ready(&self, routed_ip: &str, ready: Option<bool>) {
        let l = RoutedIpLabel {
            routed_ip: routed_ip.to_owned(),
        };
        match ready {
            Some(r) => {
                self.ready.get_or_create(&l).set(i64::from(r));
            }
            None => {
                self.ready.remove(&l);
            }
        }
    }
}
