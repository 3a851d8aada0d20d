//! The NodeNetworkConfig status a pass reports ([`next_status`]): what was applied, what
//! the kernel refused and why, what was removed, probation and rollback. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use netpolicy_core::{merge::ItemRef, model::RoutingConfig, plan::Op};
use netpolicy_netlink::{Outcome, Ownership, Report};
use tracing::warn;

use crate::api::{
    ItemError, MAX_LISTED_REMOVALS, NodeNetworkConfigStatus,
    conditions::{self, item, reasons},
};

/// What one pass found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PassOutcome {
    /// The spec does not validate (nothing was changed).
    Invalid(String),
    /// The spec was applied; these items are not in the kernel as desired, and these
    /// foreign objects were removed from hard-synced tables.
    Applied(Vec<ItemError>, Vec<String>),
    /// The revision failed its probes (or the API server could not be reached) within
    /// `rollbackSeconds`: the last good config was restored and this revision is not
    /// applied again.
    RolledBack(Failure),
}

/// Why a revision was rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The revision that failed.
    pub revision: String,
    /// `ProbeFailed` or `APIServerUnreachable`.
    pub reason: &'static str,
    /// The failing probe and what was restored, for people.
    pub message: String,
}

/// The status a pass leads to, from the current one. Pure: the same inputs give the
/// same status, and `lastTransitionTime` is taken from `current` unless the
/// condition's status flips, so a pass that found nothing new computes a status equal
/// to `current` (and the agent writes nothing).
pub(crate) fn next_status(
    current: &NodeNetworkConfigStatus,
    generation: Option<i64>,
    revision: &str,
    outcome: &PassOutcome,
    now: Time,
) -> NodeNetworkConfigStatus {
    let (ok, reason, message, errors) = match outcome {
        PassOutcome::Invalid(e) => (
            false,
            reasons::INVALID,
            format!("the spec does not validate, nothing was changed: {e}"),
            Vec::new(),
        ),
        PassOutcome::Applied(errors, _) if errors.is_empty() => (
            true,
            reasons::APPLIED,
            format!("revision {revision} is in the kernel as desired"),
            Vec::new(),
        ),
        PassOutcome::Applied(errors, _) => (
            false,
            reasons::ITEMS_NOT_APPLIED,
            format!(
                "revision {revision}: {} item(s) not in the kernel as desired (see itemErrors)",
                errors.len()
            ),
            errors.clone(),
        ),
        PassOutcome::RolledBack(f) => (
            false,
            reasons::ROLLED_BACK,
            format!(
                "revision {} was rolled back ({}); the node keeps its last good config",
                f.revision, f.reason
            ),
            Vec::new(),
        ),
    };
    let status = if ok {
        conditions::TRUE
    } else {
        conditions::FALSE
    };
    let previous = current
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::APPLIED);
    let last_transition_time = previous
        .filter(|c| c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    let mut conditions = vec![Condition {
        type_: conditions::APPLIED.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    }];
    // `Degraded`: True after a rollback; back to False once a revision passes; absent
    // on a node that never rolled back.
    let was_degraded = current
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::DEGRADED);
    let degraded = match outcome {
        PassOutcome::RolledBack(f) => Some((true, f.reason, f.message.clone())),
        _ if ok => was_degraded.map(|_| {
            (
                false,
                conditions::degraded::HEALTHY,
                format!("revision {revision} passed its probes"),
            )
        }),
        _ => was_degraded.map(|c| {
            (
                c.status == conditions::TRUE,
                if c.status == conditions::TRUE {
                    conditions::degraded::PROBE_FAILED
                } else {
                    conditions::degraded::HEALTHY
                },
                c.message.clone(),
            )
        }),
    };
    if let Some((on, why, message)) = degraded {
        let status = if on {
            conditions::TRUE
        } else {
            conditions::FALSE
        };
        let kept =
            was_degraded.filter(|c| c.status == status && c.reason == why && c.message == message);
        conditions.push(match kept {
            Some(c) => c.clone(),
            None => Condition {
                type_: conditions::DEGRADED.into(),
                status: status.into(),
                reason: why.into(),
                message,
                last_transition_time: was_degraded
                    .filter(|c| c.status == status)
                    .map_or_else(|| now.clone(), |c| c.last_transition_time.clone()),
                observed_generation: generation,
            },
        });
    }
    NodeNetworkConfigStatus {
        observed_generation: generation,
        left_behind: current.left_behind.clone(),
        failed_revision: match outcome {
            PassOutcome::RolledBack(f) => Some(f.revision.clone()),
            _ if ok => None,
            _ => current.failed_revision.clone(),
        },
        // Server-side apply drops fields this manager stops sending: keep the last
        // revision that applied completely when this one does not.
        applied_revision: if ok {
            Some(revision.to_owned())
        } else {
            current.applied_revision.clone()
        },
        conditions,
        item_errors: errors,
        // What the last pass that removed anything removed: kept until the next one,
        // so that a quiet pass writes nothing.
        removed_foreign: match outcome {
            PassOutcome::Applied(_, removed) if !removed.is_empty() => {
                removed.iter().take(MAX_LISTED_REMOVALS).cloned().collect()
            }
            _ => current.removed_foreign.clone(),
        },
        not_probed: current.not_probed.clone(),
        // The pass sets what a shared object ran (it knows the rendering).
        applied_rendering: current.applied_rendering.clone(),
        failed_rendering: current.failed_rendering.clone(),
        shared_renderings: current.shared_renderings,
    }
}

/// Addresses the agent added without a duplicate address check ([`Outcome::Unprobed`]),
/// kept across passes: an address stays listed until a probe of it runs or it is no
/// longer desired. Each link is logged once, when its first such address is seen.
#[derive(Debug, Default)]
pub(crate) struct NotProbed {
    /// `address A dev D` → why.
    addresses: std::collections::BTreeMap<String, String>,
    logged: std::collections::BTreeSet<String>,
}

impl NotProbed {
    /// Takes one pass's outcomes; `desired` is what the pass applied.
    pub(crate) fn record(&mut self, report: &Report, desired: &RoutingConfig) {
        for r in &report.results {
            let Op::AddAddress { dev, address } = &r.op else {
                continue;
            };
            let key = format!("address {address} dev {dev}");
            match &r.outcome {
                Outcome::Unprobed { why } => {
                    if self.logged.insert(dev.to_string()) {
                        warn!(
                            link = %dev,
                            why,
                            "NotProbed: addresses added on this link without a duplicate \
                             address check (listed in status.notProbed)"
                        );
                    }
                    self.addresses.insert(key, why.clone());
                }
                Outcome::Done | Outcome::Duplicate { .. } => {
                    self.addresses.remove(&key);
                }
                _ => {}
            }
        }
        let wanted: std::collections::BTreeSet<String> = desired
            .addresses
            .iter()
            .map(|a| format!("address {} dev {}", a.address, a.dev))
            .chain(desired.vlans.iter().flat_map(|v| {
                v.addresses
                    .iter()
                    .map(move |a| format!("address {a} dev {}", v.name))
            }))
            .collect();
        self.addresses.retain(|k, _| wanted.contains(k));
    }

    /// The status lines, in order.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.addresses
            .iter()
            .map(|(k, why)| format!("{k}: {why}"))
            .collect()
    }
}

/// The foreign routes and rules a pass removed (only `tableHardSync` removes foreign
/// objects), in readable form.
pub(crate) fn removed_foreign(report: &Report) -> Vec<String> {
    let ours = Ownership::default();
    report
        .results
        .iter()
        .filter(|r| r.outcome.is_ok())
        .filter_map(|r| match &r.op {
            Op::DeleteRoute { protocol, .. } | Op::DeleteRule { protocol, .. }
                if !ours.owns(*protocol) =>
            {
                Some(r.op.to_string())
            }
            _ => None,
        })
        .collect()
}

/// Every desired item that is not in the kernel as desired after a pass, sorted: the
/// refused operations (with errno), the items a foreign object blocks, the VLANs whose
/// name another link holds, and whatever a fresh read still found different.
pub(crate) fn item_errors(report: &Report, desired: &RoutingConfig) -> Vec<ItemError> {
    let mut out: Vec<ItemError> = report
        .failures()
        .map(|r| {
            let (reason, errno, message) = match &r.outcome {
                Outcome::Failed { errno, message } => (item::REFUSED, *errno, message.clone()),
                Outcome::Duplicate { by } => (
                    item::DUPLICATE_ADDRESS,
                    None,
                    format!(
                        "{} uses this address on the segment: not added (probed again on the \
                         next spec change or resync)",
                        by.as_deref().map_or_else(
                            || "another host".to_owned(),
                            |m| format!("the host with MAC {m}")
                        )
                    ),
                ),
                _ => (item::REFUSED, None, String::new()),
            };
            ItemError {
                item: r.op.to_string(),
                reason: reason.into(),
                errno,
                message,
            }
        })
        .collect();
    for s in report.skipped.iter().filter(|s| !s.reason.is_satisfied()) {
        let reason = match s.reason {
            netpolicy_core::plan::SkipReason::NameTakenByOtherLink => item::NAME_TAKEN,
            _ => item::BLOCKED_BY_FOREIGN,
        };
        out.push(ItemError {
            item: describe(&s.item, desired),
            reason: reason.into(),
            errno: None,
            message: s.reason.to_string(),
        });
    }
    for op in &report.unconverged {
        out.push(ItemError {
            item: op.to_string(),
            reason: item::NOT_CONVERGED.into(),
            errno: None,
            message: "applied without error, but the kernel still differs on a fresh read".into(),
        });
    }
    out.sort();
    out.dedup();
    out
}

/// The desired item named by `r`, in full readable form.
pub(super) fn describe(r: &ItemRef, desired: &RoutingConfig) -> String {
    let found = match r {
        ItemRef::Vlan(n) => desired
            .vlans
            .iter()
            .find(|v| v.name == *n)
            .map(|v| format!("vlan {v}")),
        ItemRef::Route(k) => desired
            .routes
            .iter()
            .find(|x| x.key() == *k)
            .map(|x| format!("route {x}")),
        ItemRef::Rule(k) => desired
            .rules
            .iter()
            .find(|x| x.key == *k)
            .map(|x| format!("rule {x}")),
        ItemRef::Address(a) => Some(format!("address {a}")),
    };
    found.unwrap_or_else(|| r.to_string())
}

/// What the status says of shared renderings (`next` as [`next_status`] made it, which
/// keeps what `current` said): this agent reads them; the rendering the applied revision
/// ran (none for an object that is not shared); the rendering whose revision failed its
/// probes.
pub(crate) fn shared_status(
    next: &mut NodeNetworkConfigStatus,
    outcome: &PassOutcome,
    revision: &str,
    rendering: Option<&str>,
) {
    next.shared_renderings = true;
    match outcome {
        PassOutcome::Applied(..) if next.applied_revision.as_deref() == Some(revision) => {
            next.applied_rendering = rendering.map(str::to_owned);
            next.failed_rendering = None;
        }
        PassOutcome::RolledBack(_) => next.failed_rendering = rendering.map(str::to_owned),
        PassOutcome::Applied(..) | PassOutcome::Invalid(_) => {}
    }
}

pub(crate) use netpolicy_core::fleet::report_delay;

/// Whether `next` reports a rendering applied that `current` did not: the one status
/// write [`report_delay`] spreads.
pub(crate) fn reports_new_rendering(
    current: &NodeNetworkConfigStatus,
    next: &NodeNetworkConfigStatus,
) -> bool {
    next.applied_rendering.is_some()
        && next.applied_rendering != current.applied_rendering
        && next.failed_rendering.is_none()
}

/// Writes `next` as the node's status when it differs from `current` (a pass that found
/// nothing new writes nothing); a newly applied rendering after the node's share of
/// `spread` ([`report_delay`]). The object as written; `None`: nothing to write.
pub(crate) async fn write_status(
    api: &kube::Api<crate::api::NodeNetworkConfig>,
    node: &str,
    current: &NodeNetworkConfigStatus,
    next: &NodeNetworkConfigStatus,
    spread: std::time::Duration,
) -> crate::error::Result<Option<crate::api::NodeNetworkConfig>> {
    if next == current {
        return Ok(None);
    }
    if reports_new_rendering(current, next) {
        tokio::time::sleep(report_delay(node, spread)).await;
    }
    crate::k8s::apply_status(api, super::FIELD_MANAGER, node, next)
        .await
        .map_err(|source| crate::error::Error::Kube {
            what: "writing status".into(),
            source,
        })
}
