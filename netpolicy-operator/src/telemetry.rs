//! What the operator and the agent report about themselves: metrics and the flags the
//! health endpoints read. A leaf module: the runtime serves it, the controllers and the
//! agent update it, and it depends on neither.

use std::{
    sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
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
    error_classes: Family<ErrorClassLabel, Counter>,
    duration: Family<ControllerLabel, Histogram>,
    pub(crate) leader: Gauge<i64, AtomicI64>,
    fip_capacity: Family<RangeLabel, Gauge<f64, AtomicU64>>,
    fip_allocated: Family<RangeLabel, Gauge<f64, AtomicU64>>,
    fip_allocations: Family<RangeLabel, Counter>,
    fip_releases: Family<RangeLabel, Counter>,
    fip_latency: Family<RangeLabel, Histogram>,
    guest_errors: Family<GuestLabel, Counter>,
    guest_up: Family<ClusterLabel, Gauge<i64, AtomicI64>>,
    guest_events: Family<GuestEventLabel, Counter>,
    publish_errors: Family<GuestLabel, Counter>,
    rr_reflectors: Family<ZoneLabel, Gauge<f64, AtomicU64>>,
    rr_clients: Family<ReflectorLabel, Gauge<f64, AtomicU64>>,
    rr_transitions: Counter,
    rr_steps: Counter,
    rip_failovers: Counter,
    rip_steps: Family<StepLabel, Histogram>,
    rip_errors: Family<ErrorKindLabel, Counter>,
    rip_rate_limited: Counter,
    agent_item_errors: Family<ReasonLabel, Gauge<i64, AtomicI64>>,
    agent_repairs: Counter,
    agent_fighting: Gauge<i64, AtomicI64>,
    agent_not_probed: Gauge<i64, AtomicI64>,
    /// What the alert rules read about the cluster's state.
    state: StateMetrics,
    pub(crate) ready: Gauge<i64, AtomicI64>,
}

/// Labels of the per-controller error metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorClassLabel {
    /// Controller name (`routing`).
    pub controller: String,
    /// `transient`, `conflict` or `permanent`.
    pub class: String,
}

/// Labels of the routed-IP step metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StepLabel {
    /// `addPort`, `addNode`, `assign`, ...
    pub step: String,
}

/// Labels of the agent's item errors.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabel {
    /// An item error's reason (`Refused`, `BlockedByForeignObject`, `DuplicateAddress`, ...).
    pub reason: String,
}

/// Labels of the provider error metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorKindLabel {
    /// `rate_limited`, `unauthorized`, `not_found`, `conflict`, `provider`.
    pub kind: String,
}

/// Labels of the per-reflector metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReflectorLabel {
    /// Reflector node.
    pub reflector: String,
}

/// Labels of the per-zone metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ZoneLabel {
    /// Zone (empty for nodes without the zone label).
    pub zone: String,
}

/// Labels of the guest-cluster metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GuestLabel {
    /// `<namespace>/<secret>` of the guest's kubeconfig.
    pub guest: String,
}

/// Labels of the per-guest-cluster metrics (kube-fip's).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterLabel {
    /// The guest: its Rancher Cluster's name, or `<namespace>/<secret>`.
    pub cluster: String,
}

/// Labels of the guest-cluster events metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GuestEventLabel {
    /// The guest.
    pub cluster: String,
    /// kube-fip's event names: `api_connection_error`, `configmap_management`,
    /// `configmap_management_error`, `kubevip_install`, `kubevip_install_error`.
    pub kind: String,
}

/// Labels of `netpolicy_build_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabel {
    /// `operator` or `agent`.
    pub component: String,
    /// The crate version.
    pub version: String,
}

/// Labels of the NodeNetworkConfig state metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabel {
    /// `applied`, `progressing`, `degraded` or `noAgent`.
    pub state: String,
}

/// Labels of the per-policy metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyLabel {
    /// `ClusterConfig/<name>` or `NodeConfig/<namespace>/<name>`.
    pub policy: String,
}

/// Labels of the per-RoutedIP metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RoutedIpLabel {
    /// `<namespace>/<name>`.
    pub routed_ip: String,
}

/// Labels of the per-range metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RangeLabel {
    /// FloatingIPRange name.
    pub range: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])
}

/// The gauges of the cluster's state that the alert rules read (deploy/prometheus-rules.yaml).
#[derive(Debug)]
struct StateMetrics {
    build_info: Family<BuildLabel, Gauge<i64, AtomicI64>>,
    nnc_states: Family<StateLabel, Gauge<i64, AtomicI64>>,
    nnc_fighting: Gauge<i64, AtomicI64>,
    policy_halted: Family<PolicyLabel, Gauge<i64, AtomicI64>>,
    policy_pending: Family<PolicyLabel, Gauge<i64, AtomicI64>>,
    policy_conflicts: Family<PolicyLabel, Gauge<i64, AtomicI64>>,
    /// The policies with series now (their series go with them).
    policies: std::sync::Mutex<std::collections::BTreeSet<String>>,
    rip_ready: Family<RoutedIpLabel, Gauge<i64, AtomicI64>>,
    rr_in_transition: Gauge<i64, AtomicI64>,
}

impl StateMetrics {
    fn new(registry: &mut Registry) -> Self {
        let nnc_states = Family::<StateLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "node_network_configs",
            "NodeNetworkConfigs by what their agents report: applied (the current revision), \
             progressing (a newer revision not applied yet), degraded (the current revision \
             rolled back), noAgent (no agent reported yet)",
            nnc_states.clone(),
        );
        let nnc_fighting = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "node_network_configs_fighting",
            "NodeNetworkConfigs whose Fighting condition is True",
            nnc_fighting.clone(),
        );
        let policy_halted = Family::<PolicyLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "policy_rollout_halted",
            "1 while a policy's rollout is halted by a Degraded node it selects",
            policy_halted.clone(),
        );
        let policy_pending = Family::<PolicyLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "policy_pending_nodes",
            "Nodes a policy selects whose change waits for its rollout wave",
            policy_pending.clone(),
        );
        let policy_conflicts = Family::<PolicyLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "policy_conflicts",
            "Conflicts a policy is part of (items defined differently by policies of equal \
             precedence on a node)",
            policy_conflicts.clone(),
        );
        let rip_ready = Family::<RoutedIpLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "routed_ip_ready",
            "1 when a RoutedIP's Ready condition is True, 0 when not",
            rip_ready.clone(),
        );
        let rr_in_transition = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "route_reflector_transition_in_progress",
            "1 while a route-reflector transition has steps left",
            rr_in_transition.clone(),
        );
        let build_info = Family::<BuildLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "build_info",
            "1, labelled with what this process is (operator or agent) and its version",
            build_info.clone(),
        );
        Self {
            build_info,
            nnc_states,
            nnc_fighting,
            policy_halted,
            policy_pending,
            policy_conflicts,
            policies: std::sync::Mutex::default(),
            rip_ready,
            rr_in_transition,
        }
    }
}

// `default` is long because it registers every metric with its help text, one after
// the other: the list of what `/metrics` serves, in one place.
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
        let fip_capacity = Family::<RangeLabel, Gauge<f64, AtomicU64>>::default();
        let fip_allocated = Family::<RangeLabel, Gauge<f64, AtomicU64>>::default();
        let fip_allocations = Family::<RangeLabel, Counter>::default();
        let fip_releases = Family::<RangeLabel, Counter>::default();
        let fip_latency = Family::<RangeLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "fipranges_capacity",
            "Usable addresses of a FloatingIPRange (exact up to 2^53; an IPv6 range's count \
             is rounded to the nearest double)",
            fip_capacity.clone(),
        );
        registry.register(
            "fipranges_reserved",
            "Allocated addresses of a FloatingIPRange",
            fip_allocated.clone(),
        );
        registry.register(
            "floating_ip_allocations",
            "Addresses claimed",
            fip_allocations.clone(),
        );
        registry.register(
            "floating_ip_releases",
            "Addresses released",
            fip_releases.clone(),
        );
        registry.register(
            "floating_ip_allocation_seconds",
            "From a FloatingIP's creation until its address is claimed",
            fip_latency.clone(),
        );
        let guest_errors = Family::<GuestLabel, Counter>::default();
        registry.register(
            "floating_ip_guest_publish_errors",
            "Publications to a guest cluster's kube-vip ConfigMap that failed",
            guest_errors.clone(),
        );
        let guest_up = Family::<ClusterLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "guestcluster_up",
            "1 when the guest cluster's API server answered at the last visit, 0 when not",
            guest_up.clone(),
        );
        let guest_events = Family::<GuestEventLabel, Counter>::default();
        registry.register(
            "guestcluster_events",
            "Guest-cluster events: writes made there and failures, by kind",
            guest_events.clone(),
        );
        let publish_errors = Family::<GuestLabel, Counter>::default();
        registry.register(
            "floating_ip_publish_errors",
            "Writes of a kube-vip ConfigMap in this cluster that failed (label guest: \
             <namespace>/<name> of the ConfigMap)",
            publish_errors.clone(),
        );
        let rr_reflectors = Family::<ZoneLabel, Gauge<f64, AtomicU64>>::default();
        let rr_clients = Family::<ReflectorLabel, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "route_reflector_clients",
            "Clients per route reflector in the target topology",
            rr_clients.clone(),
        );
        let rr_transitions = Counter::default();
        let rr_steps = Counter::default();
        registry.register(
            "route_reflectors",
            "Route reflectors per zone in the target topology",
            rr_reflectors.clone(),
        );
        registry.register(
            "route_reflector_transitions",
            "Route-reflector transitions started",
            rr_transitions.clone(),
        );
        registry.register(
            "route_reflector_steps",
            "Route-reflector transition steps applied",
            rr_steps.clone(),
        );
        let rip_failovers = Counter::default();
        let rip_steps = Family::<StepLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let rip_errors = Family::<ErrorKindLabel, Counter>::default();
        let rip_rate_limited = Counter::default();
        registry.register(
            "routed_ip_failovers",
            "Routed IPs moved from one node to another",
            rip_failovers.clone(),
        );
        registry.register(
            "routed_ip_step_seconds",
            "Time per failover step at the provider",
            rip_steps.clone(),
        );
        registry.register(
            "routed_ip_provider_errors",
            "Provider calls that failed, by kind",
            rip_errors.clone(),
        );
        registry.register(
            "routed_ip_rate_limit_waits",
            "Times a routed IP waited out the provider's Retry-After",
            rip_rate_limited.clone(),
        );
        let agent_item_errors = Family::<ReasonLabel, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "agent_item_errors",
            "Desired items not in the kernel as desired on this node, by reason (the \
             NodeNetworkConfig's status.itemErrors)",
            agent_item_errors.clone(),
        );
        let agent_repairs = Counter::default();
        registry.register(
            "agent_repairs",
            "Objects the agent restored after someone else changed them (drift repairs)",
            agent_repairs.clone(),
        );
        let agent_fighting = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "agent_fighting_objects",
            "Objects something keeps changing back on this node (the Fighting condition)",
            agent_fighting.clone(),
        );
        let agent_not_probed = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "agent_not_probed_addresses",
            "Addresses added without a duplicate address check (status.notProbed)",
            agent_not_probed.clone(),
        );
        let state = StateMetrics::new(&mut registry);
        let ready = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "ready",
            "1 when this instance's /readyz says ready",
            ready.clone(),
        );
        Self {
            registry,
            state,
            ready,
            agent_item_errors,
            agent_repairs,
            agent_fighting,
            agent_not_probed,
            reconciles,
            errors,
            error_classes,
            duration,
            leader,
            fip_capacity,
            fip_allocated,
            fip_allocations,
            fip_releases,
            fip_latency,
            guest_errors,
            guest_up,
            guest_events,
            publish_errors,
            rr_reflectors,
            rr_clients,
            rr_transitions,
            rr_steps,
            rip_failovers,
            rip_steps,
            rip_errors,
            rip_rate_limited,
        }
    }
}

impl Metrics {
    /// The agent's view of its node after a pass: item errors by reason (reasons with
    /// none go to 0), objects fought over, addresses not probed.
    pub fn agent_status(&self, reasons: &[&str], fighting: usize, not_probed: usize) {
        let mut by: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
        for r in reasons {
            *by.entry(r).or_default() += 1;
        }
        for known in crate::api::conditions::item::ALL {
            by.entry(known).or_default();
        }
        for (reason, n) in by {
            self.agent_item_errors
                .get_or_create(&ReasonLabel {
                    reason: reason.to_owned(),
                })
                .set(n);
        }
        self.agent_fighting
            .set(i64::try_from(fighting).unwrap_or(i64::MAX));
        self.agent_not_probed
            .set(i64::try_from(not_probed).unwrap_or(i64::MAX));
    }

    /// `n` objects restored by one pass.
    pub fn agent_repaired(&self, n: usize) {
        self.agent_repairs.inc_by(n as u64);
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

    /// An address of `range` was claimed, `waited` seconds after its FloatingIP was made.
    pub fn floating_ip_allocated(&self, range: &str, waited: f64) {
        let l = RangeLabel {
            range: range.to_owned(),
        };
        self.fip_allocations.get_or_create(&l).inc();
        self.fip_latency.get_or_create(&l).observe(waited);
    }

    /// Reflectors of a zone in the target topology.
    pub fn reflectors(&self, zone: &str, n: f64) {
        self.rr_reflectors
            .get_or_create(&ZoneLabel {
                zone: zone.to_owned(),
            })
            .set(n);
    }

    /// Clients per reflector in the target topology (reflectors that left are dropped).
    pub fn reflector_clients<'a>(&self, loads: impl IntoIterator<Item = (&'a str, usize)>) {
        self.rr_clients.clear();
        for (r, n) in loads {
            self.rr_clients
                .get_or_create(&ReflectorLabel {
                    reflector: r.to_owned(),
                })
                .set(n as f64);
        }
    }

    /// A route-reflector transition started.
    pub fn rr_transition(&self) {
        self.rr_transitions.inc();
    }

    /// A routed IP moved to another node.
    pub fn routed_ip_failover(&self) {
        self.rip_failovers.inc();
    }

    /// A failover step done at the provider.
    pub fn routed_ip_step(&self, step: &str, took: Duration) {
        self.rip_steps
            .get_or_create(&StepLabel { step: step.into() })
            .observe(took.as_secs_f64());
    }

    /// A provider call failed.
    pub fn routed_ip_provider_error(&self, kind: &str) {
        self.rip_errors
            .get_or_create(&ErrorKindLabel { kind: kind.into() })
            .inc();
    }

    /// A routed IP waits out a rate limit.
    pub fn routed_ip_rate_limited(&self) {
        self.rip_rate_limited.inc();
    }

    /// A route-reflector transition step was applied.
    pub fn rr_step(&self) {
        self.rr_steps.inc();
    }

    /// A write of a kube-vip ConfigMap in this cluster (`<namespace>/<name>`) failed.
    pub fn publish_failed(&self, configmap: &str) {
        self.publish_errors
            .get_or_create(&GuestLabel {
                guest: configmap.to_owned(),
            })
            .inc();
    }

    /// Whether guest `cluster` answered at its last visit.
    pub fn guest_up(&self, cluster: &str, up: bool) {
        self.guest_up
            .get_or_create(&ClusterLabel {
                cluster: cluster.to_owned(),
            })
            .set(i64::from(up));
    }

    /// Something happened in guest `cluster` (`kind`: kube-fip's event names).
    pub fn guest_event(&self, cluster: &str, kind: &str) {
        self.guest_events
            .get_or_create(&GuestEventLabel {
                cluster: cluster.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// A guest no range serves any more: its series go.
    pub fn guest_gone(&self, cluster: &str) {
        self.guest_up.remove(&ClusterLabel {
            cluster: cluster.to_owned(),
        });
    }

    /// A publication to a guest cluster failed.
    pub fn guest_publish_failed(&self, guest: &str) {
        self.guest_errors
            .get_or_create(&GuestLabel {
                guest: guest.to_owned(),
            })
            .inc();
    }

    /// An address of `range` was released.
    pub fn floating_ip_released(&self, range: &str) {
        self.fip_releases
            .get_or_create(&RangeLabel {
                range: range.to_owned(),
            })
            .inc();
    }

    /// What this process is: `netpolicy_build_info{component, version} 1`.
    pub fn component(&self, component: &str) {
        self.state
            .build_info
            .get_or_create(&BuildLabel {
                component: component.to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
    }

    /// NodeNetworkConfigs by state (`applied`, `progressing`, `degraded`, `noAgent`),
    /// and how many are Fighting.
    pub(crate) fn node_network_configs(
        &self,
        states: &std::collections::BTreeMap<&str, usize>,
        fighting: usize,
    ) {
        for (state, n) in states {
            self.state
                .nnc_states
                .get_or_create(&StateLabel {
                    state: (*state).to_owned(),
                })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        self.state
            .nnc_fighting
            .set(i64::try_from(fighting).unwrap_or(i64::MAX));
    }

    /// Every policy's rollout and conflicts: `(policy, halted, pending nodes,
    /// conflicts)`. The series of policies not listed go.
    pub(crate) fn policies<'a>(
        &self,
        policies: impl IntoIterator<Item = (&'a str, bool, usize, usize)>,
    ) {
        let mut now = std::collections::BTreeSet::new();
        for (policy, halted, pending, conflicts) in policies {
            let l = PolicyLabel {
                policy: policy.to_owned(),
            };
            self.state
                .policy_halted
                .get_or_create(&l)
                .set(i64::from(halted));
            self.state
                .policy_pending
                .get_or_create(&l)
                .set(i64::try_from(pending).unwrap_or(i64::MAX));
            self.state
                .policy_conflicts
                .get_or_create(&l)
                .set(i64::try_from(conflicts).unwrap_or(i64::MAX));
            now.insert(policy.to_owned());
        }
        let before = std::mem::replace(
            &mut *self
                .state
                .policies
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            now.clone(),
        );
        for gone in before.difference(&now) {
            let l = PolicyLabel {
                policy: gone.clone(),
            };
            self.state.policy_halted.remove(&l);
            self.state.policy_pending.remove(&l);
            self.state.policy_conflicts.remove(&l);
        }
    }

    /// Whether RoutedIP `routed_ip` (`<namespace>/<name>`) is Ready; `None`: it is gone.
    pub(crate) fn routed_ip_ready(&self, routed_ip: &str, ready: Option<bool>) {
        let l = RoutedIpLabel {
            routed_ip: routed_ip.to_owned(),
        };
        match ready {
            Some(r) => {
                self.state.rip_ready.get_or_create(&l).set(i64::from(r));
            }
            None => {
                self.state.rip_ready.remove(&l);
            }
        }
    }

    /// Whether a route-reflector transition has steps left.
    pub(crate) fn rr_in_transition(&self, yes: bool) {
        self.state.rr_in_transition.set(i64::from(yes));
    }

    /// A range's capacity and allocated count, when known.
    pub fn floating_ip_range(&self, range: &str, capacity: Option<f64>, allocated: Option<f64>) {
        let l = RangeLabel {
            range: range.to_owned(),
        };
        if let Some(c) = capacity {
            self.fip_capacity.get_or_create(&l).set(c);
        }
        if let Some(a) = allocated {
            self.fip_allocated.get_or_create(&l).set(a);
        }
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

    #[test]
    fn clients_per_reflector_follow_the_topology_and_departed_reflectors_go() {
        let m = Metrics::default();
        m.reflector_clients([("r1", 3), ("r2", 4)]);
        let text = m.render();
        assert!(
            text.contains("netpolicy_route_reflector_clients{reflector=\"r1\"} 3"),
            "{text}"
        );
        m.reflector_clients([("r2", 5)]);
        let text = m.render();
        assert!(!text.contains("reflector=\"r1\""), "{text}");
        assert!(
            text.contains("netpolicy_route_reflector_clients{reflector=\"r2\"} 5"),
            "{text}"
        );
    }
}
