//! What a ClusterConfig's or NodeConfig's status says: the facts a render pass found
//! about it ([`PolicyFacts`]) turned into conditions ([`policy_status`]). Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use netpolicy_core::merge::{NodeOutcome, Problem};

use crate::{
    api::{
        MAX_LISTED_CONFLICTS, PolicyConflict, PolicyStatus,
        conditions::{self, policy},
    },
    k8s::{condition, events::Told},
};

/// What a render pass found about one policy (key: `Kind/name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PolicyFacts {
    /// Nodes it selects.
    pub(crate) matched: BTreeSet<String>,
    /// Conflicts it is part of, sorted.
    pub(crate) conflicts: Vec<PolicyConflict>,
    /// Validation problems (`field: message`); any make the policy invalid.
    pub(crate) problems: Vec<String>,
    /// Selected nodes whose change waits for its rollout wave.
    pub(crate) pending: BTreeSet<String>,
    /// Selected nodes that rolled their current revision back (`node: why`): the
    /// rollout is halted until the spec changes.
    pub(crate) degraded: Vec<String>,
    /// Selected nodes whose NodeNetworkConfig would exceed the size limit
    /// (`node <name>: <bytes> bytes`): not written, the node keeps its last config.
    pub(crate) too_large: Vec<String>,
}

/// Which nodes count as applied for a policy's `appliedNodes` and `Ready`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Nodes that applied everything they are given.
    pub(crate) all: BTreeSet<String>,
    /// Nodes that did not, with the policies whose items they have applied as they
    /// are now (shared renderings: another policy's change is rolling over them;
    /// [`super::fleet::Prepared::steady`]).
    pub(crate) some: BTreeMap<String, Policies>,
}

/// A set of policies (`Kind/name`) many nodes share: a rolling node's steady policies,
/// one set per group and rendering ([`super::fleet::Prepared::steady`]).
pub(crate) type Policies = std::sync::Arc<BTreeSet<String>>;

impl Applied {
    /// Whether `node` has applied what `policy` (`Kind/name`) gives it.
    pub(crate) fn has(&self, policy: &str, node: &str) -> bool {
        self.all.contains(node) || self.some.get(node).is_some_and(|p| p.contains(policy))
    }

    /// How many of `matched` have applied what `policy` gives them.
    pub(crate) fn count(&self, policy: &str, matched: &BTreeSet<String>) -> usize {
        matched.iter().filter(|n| self.has(policy, n)).count()
    }
}

/// Adds the conflicts of held nodes to the facts of every source they name.
pub(super) fn add_conflicts<'a>(
    out: &mut BTreeMap<String, PolicyFacts>,
    outcomes: impl IntoIterator<Item = (&'a str, &'a NodeOutcome)>,
) {
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
    for f in out.values_mut() {
        f.conflicts.sort();
        f.conflicts.dedup();
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
pub(crate) fn policy_status(
    current: &PolicyStatus,
    generation: Option<i64>,
    facts: &PolicyFacts,
    applied: usize,
    now: &Time,
) -> PolicyStatus {
    let n = facts.matched.len();
    let cond = |type_: &str, status: bool, reason: &str, message: String| {
        condition(
            &current.conditions,
            type_,
            status,
            reason,
            message,
            generation,
            now,
        )
    };
    let (ready, reason, message) = ready(facts, applied);
    let mut conditions = vec![
        cond(conditions::READY, ready, reason, message),
        conflict(facts, &cond),
    ];
    // `Degraded`: a selected node rolled its revision back; absent until that happens.
    conditions.extend(sticky(
        current,
        conditions::DEGRADED,
        (!facts.degraded.is_empty()).then(|| {
            (
                conditions::degraded::ROLLOUT_HALTED,
                format!(
                    "the rollout is halted until this spec changes: {}",
                    first_of(&facts.degraded, facts.degraded.len())
                ),
            )
        }),
        (
            conditions::degraded::HEALTHY,
            "no selected node reports Degraded",
        ),
        &cond,
    ));
    // `TooLarge`: absent until it happens, then kept (False) once it is over.
    conditions.extend(sticky(
        current,
        conditions::TOO_LARGE,
        (!facts.too_large.is_empty()).then(|| {
            (
                policy::TOO_LARGE,
                first_of(&facts.too_large, facts.too_large.len()),
            )
        }),
        (policy::FITS, "every selected node's NodeNetworkConfig fits"),
        &cond,
    ));
    PolicyStatus {
        observed_generation: generation,
        matched_nodes: i64::try_from(n).unwrap_or(i64::MAX),
        applied_nodes: i64::try_from(applied).unwrap_or(i64::MAX),
        pending_nodes: i64::try_from(facts.pending.len()).unwrap_or(i64::MAX),
        conditions,
        conflicts: facts
            .conflicts
            .iter()
            .take(MAX_LISTED_CONFLICTS)
            .cloned()
            .collect(),
    }
}

/// A policy's `Ready`: invalid, too large, conflicting, still applying, or applied.
fn ready(facts: &PolicyFacts, applied: usize) -> (bool, &'static str, String) {
    let n = facts.matched.len();
    if !facts.problems.is_empty() {
        (
            false,
            policy::INVALID,
            format!(
                "the spec does not validate, so it changes no node: {}",
                first_of(&facts.problems, facts.problems.len())
            ),
        )
    } else if !facts.too_large.is_empty() {
        (
            false,
            policy::TOO_LARGE,
            format!(
                "NodeNetworkConfigs too large to store, not written (those nodes keep their \
                 last config): {}",
                first_of(&facts.too_large, facts.too_large.len())
            ),
        )
    } else if !facts.conflicts.is_empty() {
        let nodes = facts
            .conflicts
            .iter()
            .map(|c| &c.node)
            .collect::<BTreeSet<_>>()
            .len();
        (
            false,
            policy::CONFLICT,
            format!("conflicts on {nodes} node(s), which keep their last good config"),
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
    }
}

/// A condition made from type, status, reason and message (the current conditions,
/// generation and time already given).
type Cond<'a> = dyn Fn(&str, bool, &str, String) -> Condition + 'a;

/// A policy's `Conflict`: the conflicts, the first ones listed.
fn conflict(facts: &PolicyFacts, cond: &Cond<'_>) -> Condition {
    if facts.conflicts.is_empty() {
        return cond(
            conditions::CONFLICT,
            false,
            policy::NO_CONFLICT,
            "no conflict".into(),
        );
    }
    let text: Vec<String> = facts
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
    cond(
        conditions::CONFLICT,
        true,
        policy::CONFLICT,
        format!(
            "{} conflict(s): {}",
            facts.conflicts.len(),
            first_of(&text, text.len())
        ),
    )
}

/// A condition absent until it first holds (`now`: its reason and message), then kept
/// False (`over`) once it no longer does.
fn sticky(
    current: &PolicyStatus,
    type_: &str,
    now: Option<(&str, String)>,
    over: (&str, &str),
    cond: &Cond<'_>,
) -> Option<Condition> {
    match now {
        Some((reason, message)) => Some(cond(type_, true, reason, message)),
        None => current
            .conditions
            .iter()
            .any(|c| c.type_ == type_)
            .then(|| cond(type_, false, over.0, over.1.into())),
    }
}

/// Conflicts in `next` that `current` did not list: each becomes an Event.
pub(crate) fn new_conflicts<'a>(
    current: &PolicyStatus,
    next: &'a PolicyStatus,
) -> Vec<&'a PolicyConflict> {
    next.conflicts
        .iter()
        .filter(|c| !current.conflicts.contains(c))
        .collect()
}

/// The Events a policy's status change calls for (all Warnings): each new conflict; the
/// list of nodes too large to store when it changes; the rollout halting.
pub(crate) fn policy_events(current: &PolicyStatus, next: &PolicyStatus) -> Vec<Told> {
    let mut out: Vec<Told> = new_conflicts(current, next)
        .into_iter()
        .map(conflict_event)
        .collect();
    let true_message = |st: &PolicyStatus, type_: &str| {
        conditions::find(&st.conditions, type_)
            .filter(|c| c.status == conditions::STATUS_TRUE)
            .map(|c| c.message.clone())
    };
    if let Some(message) = true_message(next, conditions::TOO_LARGE)
        && true_message(current, conditions::TOO_LARGE).as_ref() != Some(&message)
    {
        out.push(Told {
            warning: true,
            action: "Render",
            reason: conditions::events::TOO_LARGE.into(),
            note: format!("NodeNetworkConfig not written: {message}"),
        });
    }
    if let (None, Some(message)) = (
        true_message(current, conditions::DEGRADED),
        true_message(next, conditions::DEGRADED),
    ) {
        out.push(Told {
            warning: true,
            action: "Rollout",
            reason: conditions::degraded::ROLLOUT_HALTED.into(),
            note: message,
        });
    }
    out
}

/// The Event of a conflict on a node.
pub(crate) fn conflict_event(c: &PolicyConflict) -> Told {
    Told {
        warning: true,
        action: "Render",
        reason: conditions::events::CONFLICT.into(),
        note: format!(
            "node {}: {} is defined differently by {} (the node keeps its last good config)",
            c.node,
            c.item,
            c.sources.join(" and ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(conflicts: usize, degraded: bool) -> PolicyFacts {
        PolicyFacts {
            matched: ["n1".to_owned(), "n2".to_owned()].into(),
            conflicts: (0..conflicts)
                .map(|i| PolicyConflict {
                    node: format!("n{i}"),
                    item: "route 10.0.0.0/8".into(),
                    sources: vec!["NodeConfig/a".into(), "NodeConfig/b".into()],
                })
                .collect(),
            degraded: if degraded {
                vec!["n2".into()]
            } else {
                Vec::new()
            },
            ..PolicyFacts::default()
        }
    }

    #[test]
    fn a_status_change_tells_new_conflicts_and_a_halt_once() {
        let t = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let quiet = policy_status(&PolicyStatus::default(), Some(1), &facts(0, false), 2, &t);
        assert!(policy_events(&PolicyStatus::default(), &quiet).is_empty());
        let bad = policy_status(&quiet, Some(1), &facts(1, true), 1, &t);
        let told = policy_events(&quiet, &bad);
        let reasons: Vec<&str> = told.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                conditions::events::CONFLICT,
                conditions::degraded::ROLLOUT_HALTED
            ]
        );
        assert!(told.iter().all(|e| e.warning));
        // The same status again: nothing new to tell.
        let again = policy_status(&bad, Some(1), &facts(1, true), 1, &t);
        assert!(policy_events(&bad, &again).is_empty());
    }
}
