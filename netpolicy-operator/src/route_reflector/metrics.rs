//! The route-reflector job's metrics (names and labels as the chart's alerts and
//! dashboard read them).

use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::telemetry::JobMetrics;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ZoneLabel {
    zone: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReflectorLabel {
    reflector: String,
}

/// Reflectors and their clients in the target topology, transitions and their steps.
pub(crate) struct Metrics {
    reflectors: Family<ZoneLabel, Gauge<f64, AtomicU64>>,
    clients: Family<ReflectorLabel, Gauge<f64, AtomicU64>>,
    transitions: Counter,
    steps: Counter,
    in_transition: Gauge<i64, AtomicI64>,
}

impl JobMetrics for Metrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self {
            reflectors: Family::default(),
            clients: Family::default(),
            transitions: Counter::default(),
            steps: Counter::default(),
            in_transition: Gauge::default(),
        };
        registry.register(
            "route_reflector_clients",
            "Clients per route reflector in the target topology",
            m.clients.clone(),
        );
        registry.register(
            "route_reflectors",
            "Route reflectors per zone in the target topology",
            m.reflectors.clone(),
        );
        registry.register(
            "route_reflector_transitions",
            "Route-reflector transitions started",
            m.transitions.clone(),
        );
        registry.register(
            "route_reflector_steps",
            "Route-reflector transition steps applied",
            m.steps.clone(),
        );
        registry.register(
            "route_reflector_transition_in_progress",
            "1 while a route-reflector transition has steps left",
            m.in_transition.clone(),
        );
        m
    }
}

impl Metrics {
    /// Reflectors of a zone in the target topology.
    pub(crate) fn reflectors(&self, zone: &str, n: usize) {
        self.reflectors
            .get_or_create(&ZoneLabel {
                zone: zone.to_owned(),
            })
            .set(n as f64);
    }

    /// Clients per reflector in the target topology (reflectors that left are dropped).
    pub(crate) fn clients<'a>(&self, loads: impl IntoIterator<Item = (&'a str, usize)>) {
        self.clients.clear();
        for (r, n) in loads {
            self.clients
                .get_or_create(&ReflectorLabel {
                    reflector: r.to_owned(),
                })
                .set(n as f64);
        }
    }

    /// A transition started.
    pub(crate) fn transition(&self) {
        self.transitions.inc();
    }

    /// A transition step was applied.
    pub(crate) fn step(&self) {
        self.steps.inc();
    }

    /// Whether a transition has steps left.
    pub(crate) fn in_transition(&self, yes: bool) {
        self.in_transition.set(i64::from(yes));
    }
}

#[cfg(test)]
mod tests {
    use crate::telemetry::Metrics as Process;

    #[test]
    fn clients_per_reflector_follow_the_topology_and_departed_reflectors_go() {
        let process = Process::default();
        let m = process.of::<super::Metrics>();
        m.clients([("r1", 3), ("r2", 4)]);
        let text = process.render();
        assert!(
            text.contains("netpolicy_route_reflector_clients{reflector=\"r1\"} 3"),
            "{text}"
        );
        m.clients([("r2", 5)]);
        let text = process.render();
        assert!(!text.contains("reflector=\"r1\""), "{text}");
        assert!(
            text.contains("netpolicy_route_reflector_clients{reflector=\"r2\"} 5"),
            "{text}"
        );
    }
}
