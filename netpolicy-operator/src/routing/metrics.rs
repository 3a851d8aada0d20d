//! The routing job's metrics: NodeNetworkConfigs by what their agents report, and every
//! policy's rollout (what the alert rules in `deploy/prometheus-rules.yaml` read; names
//! and labels as they read them).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Mutex, PoisonError, atomic::AtomicI64},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::telemetry::{JobMetrics, count};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabel {
    policy: String,
}

/// NodeNetworkConfigs by state, and each policy's rollout and conflicts.
pub(crate) struct Metrics {
    nnc_states: Family<StateLabel, Gauge<i64, AtomicI64>>,
    nnc_fighting: Gauge<i64, AtomicI64>,
    policy_halted: Family<PolicyLabel, Gauge<i64, AtomicI64>>,
    policy_pending: Family<PolicyLabel, Gauge<i64, AtomicI64>>,
    policy_conflicts: Family<PolicyLabel, Gauge<i64, AtomicI64>>,
    /// The policies with series now (their series go with them).
    policies: Mutex<BTreeSet<String>>,
}

impl JobMetrics for Metrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self {
            nnc_states: Family::default(),
            nnc_fighting: Gauge::default(),
            policy_halted: Family::default(),
            policy_pending: Family::default(),
            policy_conflicts: Family::default(),
            policies: Mutex::default(),
        };
        registry.register(
            "node_network_configs",
            "NodeNetworkConfigs by what their agents report: applied (the current revision), \
             progressing (a newer revision not applied yet), degraded (the current revision \
             rolled back), noAgent (no agent reported yet)",
            m.nnc_states.clone(),
        );
        registry.register(
            "node_network_configs_fighting",
            "NodeNetworkConfigs whose Fighting condition is True",
            m.nnc_fighting.clone(),
        );
        registry.register(
            "policy_rollout_halted",
            "1 while a policy's rollout is halted by a Degraded node it selects",
            m.policy_halted.clone(),
        );
        registry.register(
            "policy_pending_nodes",
            "Nodes a policy selects whose change waits for its rollout wave",
            m.policy_pending.clone(),
        );
        registry.register(
            "policy_conflicts",
            "Conflicts a policy is part of (items defined differently by policies of equal \
             precedence on a node)",
            m.policy_conflicts.clone(),
        );
        m
    }
}

impl Metrics {
    /// NodeNetworkConfigs by state (`applied`, `progressing`, `degraded`, `noAgent`),
    /// and how many are Fighting.
    pub(crate) fn node_network_configs(&self, states: &BTreeMap<&str, usize>, fighting: usize) {
        for (state, n) in states {
            self.nnc_states
                .get_or_create(&StateLabel {
                    state: (*state).to_owned(),
                })
                .set(count(*n));
        }
        self.nnc_fighting.set(count(fighting));
    }

    /// Every policy's rollout and conflicts: `(policy, halted, pending nodes,
    /// conflicts)`. The series of policies not listed go.
    pub(crate) fn policies<'a>(
        &self,
        policies: impl IntoIterator<Item = (&'a str, bool, usize, usize)>,
    ) {
        let mut now = BTreeSet::new();
        for (policy, halted, pending, conflicts) in policies {
            let l = PolicyLabel {
                policy: policy.to_owned(),
            };
            self.policy_halted.get_or_create(&l).set(i64::from(halted));
            self.policy_pending.get_or_create(&l).set(count(pending));
            self.policy_conflicts
                .get_or_create(&l)
                .set(count(conflicts));
            now.insert(policy.to_owned());
        }
        let before = std::mem::replace(
            &mut *self.policies.lock().unwrap_or_else(PoisonError::into_inner),
            now.clone(),
        );
        for gone in before.difference(&now) {
            let l = PolicyLabel {
                policy: gone.clone(),
            };
            self.policy_halted.remove(&l);
            self.policy_pending.remove(&l);
            self.policy_conflicts.remove(&l);
        }
    }
}
