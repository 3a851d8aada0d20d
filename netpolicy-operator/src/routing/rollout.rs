//! Safe rollout of ClusterConfig and NodeConfig changes (docs/guides/routing.md, safe
//! rollout). Pure: a policy's rollout settings and probes, what a node's
//! NodeNetworkConfig carries of them, a node's rollout state from its
//! NodeNetworkConfig, which waiting nodes may take their change now
//! (`netpolicy_core::rollout` decides; this module feeds it from Kubernetes objects), and
//! what a policy's status takes from the rollout ([`rollout_facts`]).

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use netpolicy_core::rollout::{Budget, DEFAULT_MAX_UNAVAILABLE, MaxUnavailable, Waiting, admit};

use super::PolicyFacts;
use crate::{
    api::{NodeNetworkConfig, ProbeSpec, RolloutSpec},
    k8s::InputError,
};

/// A policy's rollout settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rollout {
    /// At most this many of its nodes unavailable at once.
    pub(crate) max_unavailable: MaxUnavailable,
    /// Seconds a node has to pass the probes (`None`: the default).
    pub(crate) rollback_seconds: Option<u32>,
    /// The probes the agents run after applying a change.
    pub(crate) probes: Vec<ProbeSpec>,
}

impl Default for Rollout {
    fn default() -> Self {
        Self {
            max_unavailable: DEFAULT_MAX_UNAVAILABLE,
            rollback_seconds: None,
            probes: Vec::new(),
        }
    }
}

/// A policy's `rollout` and `probes`, checked (what the CRD schema says, for `plan`):
/// problems go to `errors` under `kind`/`name` and the defaults stand in.
pub(crate) fn settings(
    kind: &str,
    name: &str,
    rollout: Option<&RolloutSpec>,
    probes: &[ProbeSpec],
    errors: &mut Vec<InputError>,
) -> Rollout {
    let mut out = Rollout::default();
    let mut err = |field: String, message: String| {
        errors.push(InputError {
            kind: kind.to_owned(),
            name: name.to_owned(),
            field,
            message,
        });
    };
    if let Some(r) = rollout {
        if let Some(m) = &r.max_unavailable {
            let text = match m {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
            };
            match MaxUnavailable::parse(&text) {
                Ok(m) => out.max_unavailable = m,
                Err(e) => err("spec.rollout.maxUnavailable".into(), e.to_string()),
            }
        }
        if let Some(s) = r.rollback_seconds {
            if (1..=3600).contains(&s) {
                out.rollback_seconds = Some(s);
            } else {
                err(
                    "spec.rollout.rollbackSeconds".into(),
                    format!("{s} is not within 1..3600"),
                );
            }
        }
    }
    for (i, p) in probes.iter().enumerate() {
        let field = format!("spec.probes[{i}]");
        match (&p.ping, &p.tcp) {
            (Some(ip), None) => {
                if ip.parse::<std::net::IpAddr>().is_err() {
                    err(
                        format!("{field}.ping"),
                        format!("{ip:?} is not an IP address"),
                    );
                    continue;
                }
            }
            (None, Some(hp)) => {
                let port = hp.rsplit_once(':').and_then(|(h, p)| {
                    (!h.is_empty()).then_some(())?;
                    p.parse::<u16>().ok()
                });
                if port.is_none() {
                    err(
                        format!("{field}.tcp"),
                        format!("{hp:?} is not host:port (IPv6 as [addr]:port)"),
                    );
                    continue;
                }
            }
            _ => {
                err(field, "a probe is exactly one of ping or tcp".into());
                continue;
            }
        }
        out.probes.push(p.clone());
    }
    out
}

/// What a node's NodeNetworkConfig carries for the policies that select it: every probe
/// once (sorted), and the smallest `rollbackSeconds` set (none set: absent, the agent's
/// default).
pub(crate) fn node_probes<'a>(
    policies: impl IntoIterator<Item = &'a Rollout>,
) -> (Vec<ProbeSpec>, Option<u32>) {
    let mut probes = BTreeSet::new();
    let mut rollback: Option<u32> = None;
    for r in policies {
        probes.extend(r.probes.iter().cloned());
        if let Some(s) = r.rollback_seconds {
            rollback = Some(rollback.map_or(s, |m| m.min(s)));
        }
    }
    (probes.into_iter().collect(), rollback)
}

/// A node's rollout state, from its NodeNetworkConfig.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct NodeState {
    /// An agent reports on it (a node without one is never gated: nothing applies
    /// there, nothing can break).
    pub(crate) has_agent: bool,
    /// Given a revision it has not reported applied (with its probes passed).
    pub(crate) in_flight: bool,
    /// Its current revision failed its probes and was rolled back.
    pub(crate) degraded: bool,
}

impl NodeState {
    /// From the node's NodeNetworkConfig (`None`: none yet).
    pub(crate) fn of(nnc: Option<&NodeNetworkConfig>) -> Self {
        let Some(o) = nnc else {
            return Self::default();
        };
        let Some(st) = &o.status else {
            return Self::default();
        };
        let has_agent = st.applied_revision.is_some() || st.failed_revision.is_some();
        // A shared object's revision is its own items'; the agent reports the revision
        // of its rendering under them (the fleet's rollout says which rendering is due).
        let runs = |rendering: Option<&str>| match (o.spec.shared, rendering) {
            (false, _) => o.spec.revision.clone(),
            (true, Some(r)) => crate::api::effective_revision(r, &o.spec.revision),
            (true, None) => String::new(),
        };
        let degraded = st.failed_revision.is_some()
            && st.failed_revision.as_deref() == Some(runs(st.failed_rendering.as_deref()).as_str());
        Self {
            has_agent,
            in_flight: has_agent
                && !degraded
                && st.applied_revision.as_deref()
                    != Some(runs(st.applied_rendering.as_deref()).as_str()),
            degraded,
        }
    }

    /// What its agent reports, in one word (the `state` label of
    /// `netpolicy_node_network_configs`, the groups of `netpolicy status policy`):
    /// `noAgent`, `degraded`, `progressing` or `applied`.
    pub(crate) fn word(self) -> &'static str {
        match (self.has_agent, self.degraded, self.in_flight) {
            (false, ..) => "noAgent",
            (true, true, _) => "degraded",
            (true, false, true) => "progressing",
            (true, false, false) => "applied",
        }
    }

    /// Counts against `maxUnavailable`.
    pub(crate) fn unavailable(self) -> bool {
        self.has_agent && (self.in_flight || self.degraded)
    }
}

/// The nodes of `candidates` (each with a change waiting, and the policies that select
/// it) that may take it now. `members` gives each policy's selected nodes, `settings`
/// its rollout, `state` each node's state. Nodes without an agent always go.
pub(crate) fn gate<'a>(
    candidates: &'a [(String, Vec<String>)],
    members: &dyn Fn(&str) -> Vec<String>,
    settings: &dyn Fn(&str) -> Rollout,
    state: &dyn Fn(&str) -> NodeState,
) -> (BTreeSet<&'a str>, BTreeMap<String, Budget>) {
    let mut budgets: BTreeMap<String, Budget> = BTreeMap::new();
    let mut go = BTreeSet::new();
    let mut waiting = Vec::new();
    for (node, policies) in candidates {
        let st = state(node);
        if !st.has_agent {
            go.insert(node.as_str());
            continue;
        }
        for p in policies {
            if budgets.contains_key(p) {
                continue;
            }
            let nodes = members(p);
            let states: Vec<NodeState> = nodes.iter().map(|n| state(n)).collect();
            budgets.insert(
                p.clone(),
                Budget {
                    max: settings(p).max_unavailable.resolve(nodes.len()),
                    unavailable: states.iter().filter(|s| s.unavailable()).count(),
                    halted: states.iter().any(|s| s.degraded),
                },
            );
        }
        waiting.push(Waiting {
            node: node.as_str(),
            policies: policies.clone(),
            unavailable: st.unavailable(),
        });
    }
    go.extend(admit(waiting, &mut budgets));
    (go, budgets)
}

/// Adds what the rollout knows to the policies' facts: the nodes waiting for their
/// wave, and the nodes that rolled their current revision back (with the agent's
/// reason), to every policy that selects them.
pub(crate) fn rollout_facts(
    facts: &mut BTreeMap<String, PolicyFacts>,
    pending: &BTreeSet<String>,
    steady: &BTreeMap<String, super::status::Policies>,
    nncs: &[std::sync::Arc<NodeNetworkConfig>],
) {
    let mut degraded: BTreeMap<String, String> = BTreeMap::new();
    for o in nncs {
        if !NodeState::of(Some(o)).degraded {
            continue;
        }
        let why = o
            .status
            .as_ref()
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == crate::api::conditions::DEGRADED)
            })
            .map(|c| c.message.clone())
            .unwrap_or_default();
        degraded.insert(o.name_any(), why);
    }
    if pending.is_empty() && degraded.is_empty() {
        return;
    }
    for (policy, f) in facts.iter_mut() {
        // A node whose wave is still closed waits for this policy only if its
        // rendering changes this policy's items.
        let waits = |n: &&String| !steady.get(*n).is_some_and(|p| p.contains(policy));
        f.pending = f
            .matched
            .intersection(pending)
            .filter(waits)
            .cloned()
            .collect();
        f.degraded = f
            .matched
            .iter()
            .filter_map(|n| degraded.get(n).map(|why| format!("node {n}: {why}")))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::NodeState;
    use crate::api::NodeNetworkConfig;

    fn nnc(applied: Option<&str>, failed: Option<&str>) -> NodeNetworkConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeNetworkConfig",
            "metadata": {"name": "n"},
            "spec": {"revision": "r2"},
            "status": {"appliedRevision": applied, "failedRevision": failed}
        }))
        .unwrap()
    }

    #[test]
    fn a_nodes_state_in_one_word_follows_what_its_agent_reports() {
        assert_eq!(NodeState::of(None).word(), "noAgent");
        assert_eq!(NodeState::of(Some(&nnc(None, None))).word(), "noAgent");
        assert_eq!(
            NodeState::of(Some(&nnc(Some("r2"), None))).word(),
            "applied"
        );
        assert_eq!(
            NodeState::of(Some(&nnc(Some("r1"), None))).word(),
            "progressing"
        );
        assert_eq!(
            NodeState::of(Some(&nnc(Some("r1"), Some("r2")))).word(),
            "degraded"
        );
        // An older revision rolled back, the current one not applied yet.
        assert_eq!(
            NodeState::of(Some(&nnc(Some("r1"), Some("r0")))).word(),
            "progressing"
        );
    }

    /// A node whose closed wave changes another policy's items only does not wait for
    /// this one; a node that rolled back is degraded for every policy that selects it.
    #[test]
    fn a_node_waits_only_for_the_policies_its_wave_changes() {
        use std::collections::{BTreeMap, BTreeSet};

        use super::{super::PolicyFacts, rollout_facts};
        let set = |l: &[&str]| -> BTreeSet<String> { l.iter().map(|s| (*s).to_owned()).collect() };
        let mut facts: BTreeMap<String, PolicyFacts> = ["ClusterConfig/default", "NodeConfig/a"]
            .into_iter()
            .map(|p| {
                let f = PolicyFacts {
                    matched: set(&["n1", "n2", "n3"]),
                    ..PolicyFacts::default()
                };
                (p.to_owned(), f)
            })
            .collect();
        let steady =
            BTreeMap::from([("n1".to_owned(), std::sync::Arc::new(set(&["NodeConfig/a"])))]);
        let mut rolled_back = nnc(Some("r1"), Some("r2"));
        rolled_back.metadata.name = Some("n3".into());
        let mut degraded = rolled_back.status.clone().unwrap_or_default();
        degraded
            .conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: crate::api::conditions::DEGRADED.into(),
                status: "True".into(),
                reason: "ProbeFailed".into(),
                message: "ping 192.0.2.1 failed".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            });
        rolled_back.status = Some(degraded);
        let nncs = [std::sync::Arc::new(rolled_back)];
        rollout_facts(&mut facts, &set(&["n1", "n2"]), &steady, &nncs);
        assert_eq!(facts["ClusterConfig/default"].pending, set(&["n1", "n2"]));
        assert_eq!(facts["NodeConfig/a"].pending, set(&["n2"]));
        for f in facts.values() {
            assert_eq!(f.degraded, ["node n3: ping 192.0.2.1 failed"]);
        }
    }
}
