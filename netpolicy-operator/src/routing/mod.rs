//! The routing job: ClusterConfig + NodeConfigs + Nodes → one NodeNetworkConfig per
//! node (DESIGN.md, node agent model). This module is pure: the merge policy of each
//! object, the revision of a rendering, which nodes an invalid policy holds. The
//! controller ([`controller`]) is the only part that awaits.

pub mod controller;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use netpolicy_core::{
    merge::{NodeOutcome, Policy, Problem, Source},
    selector::{Labels, Selector},
    spec::RenderedSpec,
};

use crate::{
    api::{
        CLUSTER_CONFIG_NAME, ClusterConfig, MAX_LISTED_CONFLICTS, NodeConfig,
        NodeNetworkConfigSpec, PolicyConflict, PolicyStatus,
        conditions::{self, policy},
    },
    k8s::InputError,
};

/// What a render pass found about one policy (key: `Kind/name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyFacts {
    /// Nodes it selects.
    pub matched: BTreeSet<String>,
    /// Conflicts it is part of, sorted.
    pub conflicts: Vec<PolicyConflict>,
    /// Validation problems (`field: message`); any make the policy invalid.
    pub problems: Vec<String>,
}

/// The facts of every policy: which nodes each selects (an invalid selector selects
/// none), the conflicts each is part of (from the nodes' outcomes), its validation
/// problems.
pub fn policy_facts<'a>(
    policies: &[Policy],
    nodes: &[(String, Labels)],
    outcomes: impl IntoIterator<Item = (&'a str, &'a NodeOutcome)>,
    errors: &[InputError],
) -> BTreeMap<String, PolicyFacts> {
    let mut out: BTreeMap<String, PolicyFacts> = BTreeMap::new();
    for p in policies {
        let f = out.entry(p.source().to_string()).or_default();
        f.matched = nodes
            .iter()
            .filter(|(_, l)| p.selector().matches(l))
            .map(|(n, _)| n.clone())
            .collect();
    }
    for (node, outcome) in outcomes {
        let NodeOutcome::Held(problems) = outcome else {
            continue;
        };
        for problem in problems.iter() {
            let Problem::Conflict(c) = problem else {
                continue;
            };
            let sources: Vec<String> = c.sources.iter().map(ToString::to_string).collect();
            for s in &sources {
                out.entry(s.clone())
                    .or_default()
                    .conflicts
                    .push(PolicyConflict {
                        node: node.to_owned(),
                        item: c.item.to_string(),
                        sources: sources.clone(),
                    });
            }
        }
    }
    for e in errors {
        out.entry(format!("{}/{}", e.kind, e.name))
            .or_default()
            .problems
            .push(format!("{}: {}", e.field, e.message));
    }
    for f in out.values_mut() {
        f.conflicts.sort();
        f.conflicts.dedup();
    }
    out
}

fn condition(
    current: &PolicyStatus,
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if ok {
        conditions::TRUE
    } else {
        conditions::FALSE
    };
    let last_transition_time = current
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

fn first_of(items: &[String], total: usize) -> String {
    let mut m = items.iter().take(3).cloned().collect::<Vec<_>>().join("; ");
    if total > 3 {
        m.push_str(&format!("; and {} more", total - 3));
    }
    m
}

/// The status a policy should have, from its facts and how many of its nodes applied
/// their current rendering. Pure; `lastTransitionTime` comes from `current` unless a
/// condition flips, so a pass that found nothing new computes `current` again (and
/// nothing is written).
pub fn policy_status(
    current: &PolicyStatus,
    generation: Option<i64>,
    facts: &PolicyFacts,
    applied: usize,
    now: &Time,
) -> PolicyStatus {
    let n = facts.matched.len();
    let conflict_text: Vec<String> = facts
        .conflicts
        .iter()
        .map(|c| {
            format!(
                "node {}: {} is defined differently by {}",
                c.node,
                c.item,
                c.sources.join(" and ")
            )
        })
        .collect();
    let (ready, reason, message) = if !facts.problems.is_empty() {
        (
            false,
            policy::INVALID,
            format!(
                "the spec does not validate, so it changes no node: {}",
                first_of(&facts.problems, facts.problems.len())
            ),
        )
    } else if !facts.conflicts.is_empty() {
        (
            false,
            policy::CONFLICT,
            format!(
                "conflicts on {} node(s), which keep their last good config",
                facts
                    .conflicts
                    .iter()
                    .map(|c| &c.node)
                    .collect::<BTreeSet<_>>()
                    .len()
            ),
        )
    } else if applied < n {
        (
            false,
            policy::APPLYING,
            format!("applied on {applied} of {n} node(s)"),
        )
    } else if n == 0 {
        (true, policy::APPLIED, "selects no node".into())
    } else {
        (true, policy::APPLIED, format!("applied on all {n} node(s)"))
    };
    let conflict = if facts.conflicts.is_empty() {
        condition(
            current,
            conditions::CONFLICT,
            false,
            policy::NO_CONFLICT,
            "no conflict".into(),
            generation,
            now,
        )
    } else {
        condition(
            current,
            conditions::CONFLICT,
            true,
            policy::CONFLICT,
            format!(
                "{} conflict(s): {}",
                facts.conflicts.len(),
                first_of(&conflict_text, conflict_text.len())
            ),
            generation,
            now,
        )
    };
    PolicyStatus {
        observed_generation: generation,
        matched_nodes: i64::try_from(n).unwrap_or(i64::MAX),
        applied_nodes: i64::try_from(applied).unwrap_or(i64::MAX),
        conditions: vec![
            condition(
                current,
                conditions::READY,
                ready,
                reason,
                message,
                generation,
                now,
            ),
            conflict,
        ],
        conflicts: facts
            .conflicts
            .iter()
            .take(MAX_LISTED_CONFLICTS)
            .cloned()
            .collect(),
    }
}

/// Conflicts in `next` that `current` did not list: each becomes an Event.
pub fn new_conflicts<'a>(
    current: &PolicyStatus,
    next: &'a PolicyStatus,
) -> Vec<&'a PolicyConflict> {
    next.conflicts
        .iter()
        .filter(|c| !current.conflicts.contains(c))
        .collect()
}

/// A stable short hash of the rendered spec: the NodeNetworkConfig's `revision`.
pub fn revision(spec: &RenderedSpec) -> String {
    let text = serde_json::to_string(spec).unwrap_or_default();
    format!("{:016x}", netpolicy_core::hash::fnv1a(&[&text]))
}

/// The first NodeConfig of `names` that an item of `spec` came from: a node whose
/// current rendering carries items of a NodeConfig whose selector became invalid keeps
/// that rendering (its last good config).
pub fn carried_from<'a>(
    spec: &NodeNetworkConfigSpec,
    names: &'a BTreeSet<String>,
) -> Option<&'a str> {
    if names.is_empty() {
        return None;
    }
    let r = &spec.rendered;
    r.vlans
        .iter()
        .flat_map(|i| &i.sources)
        .chain(r.routes.iter().flat_map(|i| &i.sources))
        .chain(r.rules.iter().flat_map(|i| &i.sources))
        .filter(|s| s.kind == "NodeConfig")
        .find_map(|s| names.get(&s.name).map(String::as_str))
}

/// The merge policy of a ClusterConfig, or `None` (and an error) when it is not named
/// `default`. An invalid one becomes a policy that holds every node (see
/// [`Policy::invalid`]), its problems in `errors`.
pub fn cluster_config_policy(cc: &ClusterConfig, errors: &mut Vec<InputError>) -> Option<Policy> {
    let name = cc.metadata.name.clone().unwrap_or_default();
    if name != CLUSTER_CONFIG_NAME {
        errors.push(InputError {
            kind: "ClusterConfig".into(),
            name,
            field: "metadata.name".into(),
            message: format!(
                "a ClusterConfig must be named {CLUSTER_CONFIG_NAME:?} (there is only one); \
                 this one is ignored"
            ),
        });
        return None;
    }
    Some(match cc.spec.routing.validate("spec") {
        Ok(cfg) => Policy::cluster(&name, cfg),
        Err(e) => {
            InputError::from_fields("ClusterConfig", &name, e.field_errors(), errors);
            Policy::invalid(Source::cluster(&name), 0, Selector::everything())
        }
    })
}

/// The merge policy of a NodeConfig. An invalid one holds the nodes its selector picks;
/// one whose selector itself is broken selects nothing (its items land nowhere; the
/// operator keeps the nodes that still carry its items at their last good config). Its
/// problems go to `errors`.
pub fn node_config_policy(nc: &NodeConfig, errors: &mut Vec<InputError>) -> Policy {
    let name = nc.metadata.name.clone().unwrap_or_default();
    let selector = nc.spec.node_selector.validate("spec.nodeSelector");
    let routing = nc.spec.routing.validate("spec");
    match (selector, routing) {
        (Ok(sel), Ok(cfg)) => Policy::node_config(&name, nc.spec.priority, sel, cfg),
        (sel, routing) => {
            for e in [sel.as_ref().err(), routing.as_ref().err()]
                .into_iter()
                .flatten()
            {
                InputError::from_fields("NodeConfig", &name, e.field_errors(), errors);
            }
            // A broken selector selects nothing: never every node.
            let sel = sel.unwrap_or_else(|_| Selector::nothing());
            Policy::invalid(Source::node_config(&name), nc.spec.priority, sel)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nnc(sources: &[(&str, &str)]) -> NodeNetworkConfigSpec {
        let srcs: Vec<serde_json::Value> = sources
            .iter()
            .map(|(k, n)| serde_json::json!({"kind": k, "name": n}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "revision": "r",
            "vlans": [], "rules": [],
            "routes": [{"to": "10.0.0.0/8", "dev": "eth0", "sources": srcs}]
        }))
        .unwrap()
    }

    #[test]
    fn a_node_carrying_items_of_an_unselectable_node_config_is_held() {
        let bad: BTreeSet<String> = ["plain".to_owned()].into();
        assert_eq!(
            carried_from(&nnc(&[("NodeConfig", "plain")]), &bad),
            Some("plain")
        );
        assert_eq!(carried_from(&nnc(&[("NodeConfig", "other")]), &bad), None);
        assert_eq!(
            carried_from(&nnc(&[("ClusterConfig", "plain")]), &bad),
            None
        );
        assert_eq!(
            carried_from(&nnc(&[("NodeConfig", "plain")]), &BTreeSet::new()),
            None
        );
    }

    fn at(t: &str) -> Time {
        Time(t.parse().unwrap())
    }

    fn conflict(node: &str) -> PolicyConflict {
        PolicyConflict {
            node: node.into(),
            item: "route 10.20.0.0/16 table 254".into(),
            sources: vec!["NodeConfig/a".into(), "NodeConfig/b".into()],
        }
    }

    #[test]
    fn a_policy_status_is_stable_until_something_changes() {
        let facts = PolicyFacts {
            matched: ["n1".to_owned(), "n2".to_owned()].into(),
            ..PolicyFacts::default()
        };
        let t0 = at("2026-01-01T00:00:00Z");
        let s1 = policy_status(&PolicyStatus::default(), Some(1), &facts, 1, &t0);
        assert_eq!((s1.matched_nodes, s1.applied_nodes), (2, 1));
        assert_eq!(s1.conditions[0].reason, policy::APPLYING);
        assert_eq!(s1.conditions[0].message, "applied on 1 of 2 node(s)");
        // Nothing new: the same status, whatever the time.
        let again = policy_status(&s1, Some(1), &facts, 1, &at("2026-01-01T01:00:00Z"));
        assert_eq!(again, s1);
        // Both applied: Ready flips, its time moves; Conflict's does not.
        let t2 = at("2026-01-01T02:00:00Z");
        let s2 = policy_status(&s1, Some(1), &facts, 2, &t2);
        assert_eq!(s2.conditions[0].status, "True");
        assert_eq!(s2.conditions[0].last_transition_time, t2);
        assert_eq!(s2.conditions[1].last_transition_time, t0);
    }

    #[test]
    fn conflicts_name_node_item_and_both_sources_and_new_ones_are_found() {
        let facts = PolicyFacts {
            matched: ["n1".to_owned()].into(),
            conflicts: vec![conflict("n1")],
            ..PolicyFacts::default()
        };
        let now = at("2026-01-01T00:00:00Z");
        let s = policy_status(&PolicyStatus::default(), Some(1), &facts, 0, &now);
        assert_eq!(s.conditions[0].reason, policy::CONFLICT);
        assert_eq!(s.conditions[1].status, "True");
        assert_eq!(
            s.conditions[1].message,
            "1 conflict(s): node n1: route 10.20.0.0/16 table 254 is defined differently by \
             NodeConfig/a and NodeConfig/b"
        );
        assert_eq!(new_conflicts(&PolicyStatus::default(), &s).len(), 1);
        assert!(new_conflicts(&s, &s).is_empty());
    }

    #[test]
    fn the_revision_follows_the_content() {
        let a = nnc(&[("NodeConfig", "a")]).rendered;
        let b = nnc(&[("NodeConfig", "b")]).rendered;
        assert_eq!(revision(&a), revision(&a.clone()));
        assert_ne!(revision(&a), revision(&b));
        assert_eq!(revision(&a).len(), 16);
    }
}
