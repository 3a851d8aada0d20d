//! The floating-IP job's metrics: each range's capacity and use, allocations and their
//! latency, and publishing to kube-vip here and in guest clusters (names and labels as
//! the chart's alerts and dashboard read them, kube-fip's where it had them).

use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::telemetry::{JobMetrics, latency_histogram};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RangeLabel {
    range: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GuestLabel {
    guest: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabel {
    cluster: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GuestEventLabel {
    cluster: String,
    kind: String,
}

/// The floating-IP job's metrics.
pub(crate) struct Metrics {
    capacity: Family<RangeLabel, Gauge<f64, AtomicU64>>,
    allocated: Family<RangeLabel, Gauge<f64, AtomicU64>>,
    allocations: Family<RangeLabel, Counter>,
    releases: Family<RangeLabel, Counter>,
    latency: Family<RangeLabel, Histogram>,
    guest_errors: Family<GuestLabel, Counter>,
    guest_up: Family<ClusterLabel, Gauge<i64, AtomicI64>>,
    guest_events: Family<GuestEventLabel, Counter>,
    publish_errors: Family<GuestLabel, Counter>,
}

impl JobMetrics for Metrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self {
            capacity: Family::default(),
            allocated: Family::default(),
            allocations: Family::default(),
            releases: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            guest_errors: Family::default(),
            guest_up: Family::default(),
            guest_events: Family::default(),
            publish_errors: Family::default(),
        };
        registry.register(
            "fipranges_capacity",
            "Usable addresses of a FloatingIPRange (exact up to 2^53; an IPv6 range's count \
             is rounded to the nearest double)",
            m.capacity.clone(),
        );
        registry.register(
            "fipranges_reserved",
            "Allocated addresses of a FloatingIPRange",
            m.allocated.clone(),
        );
        registry.register(
            "floating_ip_allocations",
            "Addresses claimed",
            m.allocations.clone(),
        );
        registry.register(
            "floating_ip_releases",
            "Addresses released",
            m.releases.clone(),
        );
        registry.register(
            "floating_ip_allocation_seconds",
            "From a FloatingIP's creation until its address is claimed",
            m.latency.clone(),
        );
        registry.register(
            "floating_ip_guest_publish_errors",
            "Publications to a guest cluster's kube-vip ConfigMap that failed",
            m.guest_errors.clone(),
        );
        registry.register(
            "guestcluster_up",
            "1 when the guest cluster's API server answered at the last visit, 0 when not",
            m.guest_up.clone(),
        );
        registry.register(
            "guestcluster_events",
            "Guest-cluster events: writes made there and failures, by kind",
            m.guest_events.clone(),
        );
        registry.register(
            "floating_ip_publish_errors",
            "Writes of a kube-vip ConfigMap in this cluster that failed (label guest: \
             <namespace>/<name> of the ConfigMap)",
            m.publish_errors.clone(),
        );
        m
    }
}

fn range(range: &str) -> RangeLabel {
    RangeLabel {
        range: range.to_owned(),
    }
}

impl Metrics {
    /// An address of `range` was claimed, `waited` seconds after its FloatingIP was made.
    pub(crate) fn allocated(&self, range_: &str, waited: f64) {
        let l = range(range_);
        self.allocations.get_or_create(&l).inc();
        self.latency.get_or_create(&l).observe(waited);
    }

    /// An address of `range` was released.
    pub(crate) fn released(&self, range_: &str) {
        self.releases.get_or_create(&range(range_)).inc();
    }

    /// A range's capacity and allocated count, when known.
    pub(crate) fn range(&self, range_: &str, capacity: Option<f64>, allocated: Option<f64>) {
        let l = range(range_);
        if let Some(c) = capacity {
            self.capacity.get_or_create(&l).set(c);
        }
        if let Some(a) = allocated {
            self.allocated.get_or_create(&l).set(a);
        }
    }

    /// A write of a kube-vip ConfigMap in this cluster (`<namespace>/<name>`) failed.
    pub(crate) fn publish_failed(&self, configmap: &str) {
        self.publish_errors
            .get_or_create(&GuestLabel {
                guest: configmap.to_owned(),
            })
            .inc();
    }

    /// Whether guest `cluster` answered at its last visit.
    pub(crate) fn guest_up(&self, cluster: &str, up: bool) {
        self.guest_up
            .get_or_create(&ClusterLabel {
                cluster: cluster.to_owned(),
            })
            .set(i64::from(up));
    }

    /// Something happened in guest `cluster` (`kind`: kube-fip's event names).
    pub(crate) fn guest_event(&self, cluster: &str, kind: &str) {
        self.guest_events
            .get_or_create(&GuestEventLabel {
                cluster: cluster.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// A guest no range serves any more: its series go.
    pub(crate) fn guest_gone(&self, cluster: &str) {
        self.guest_up.remove(&ClusterLabel {
            cluster: cluster.to_owned(),
        });
    }

    /// A publication to a guest cluster failed.
    pub(crate) fn guest_publish_failed(&self, guest: &str) {
        self.guest_errors
            .get_or_create(&GuestLabel {
                guest: guest.to_owned(),
            })
            .inc();
    }
}
