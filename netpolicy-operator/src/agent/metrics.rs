//! The node agent's metrics: what its node's items are, and what it repaired (names as
//! the chart's alerts and dashboard read them).

use std::{collections::BTreeMap, sync::atomic::AtomicI64};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::telemetry::{JobMetrics, count};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

/// The agent's metrics.
pub(crate) struct Metrics {
    item_errors: Family<ReasonLabel, Gauge<i64, AtomicI64>>,
    repairs: Counter,
    fighting: Gauge<i64, AtomicI64>,
    not_probed: Gauge<i64, AtomicI64>,
}

impl JobMetrics for Metrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self {
            item_errors: Family::default(),
            repairs: Counter::default(),
            fighting: Gauge::default(),
            not_probed: Gauge::default(),
        };
        registry.register(
            "agent_item_errors",
            "Desired items not in the kernel as desired on this node, by reason (the \
             NodeNetworkConfig's status.itemErrors)",
            m.item_errors.clone(),
        );
        registry.register(
            "agent_repairs",
            "Objects the agent restored after someone else changed them (drift repairs)",
            m.repairs.clone(),
        );
        registry.register(
            "agent_fighting_objects",
            "Objects something keeps changing back on this node (the Fighting condition)",
            m.fighting.clone(),
        );
        registry.register(
            "agent_not_probed_addresses",
            "Addresses added without a duplicate address check (status.notProbed)",
            m.not_probed.clone(),
        );
        m
    }
}

impl Metrics {
    /// The agent's view of its node after a pass: item errors by reason (reasons with
    /// none go to 0), objects fought over, addresses not probed.
    pub(crate) fn status(&self, reasons: &[&str], fighting: usize, not_probed: usize) {
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for r in reasons {
            *by.entry(r).or_default() += 1;
        }
        for known in crate::api::conditions::item::ALL {
            by.entry(known).or_default();
        }
        for (reason, n) in by {
            self.item_errors
                .get_or_create(&ReasonLabel {
                    reason: reason.to_owned(),
                })
                .set(count(n));
        }
        self.fighting.set(count(fighting));
        self.not_probed.set(count(not_probed));
    }

    /// `n` objects restored by one pass.
    pub(crate) fn repaired(&self, n: usize) {
        self.repairs.inc_by(n as u64);
    }
}
