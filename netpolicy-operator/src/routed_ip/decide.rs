//! The routed-IP job's decisions, pure, the way `routing::writes` decides for routing:
//! given what the caches and the provider show, what the status says next, whether a
//! RoutedIP needs the provider at all, what the provider should hold, and what an
//! issuer's check reports. [`controller`](super::controller) reads the caches and the
//! provider, calls these, and carries out what they return (status writes, Events,
//! provider steps); each is tested here without an API server, and the failover as a
//! whole against the in-process provider.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::{core::v1::Service, discovery::v1::EndpointSlice},
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::{SignedDuration, Timestamp},
};
use netpolicy_core::selector::Selector;
use netpolicy_issuers::{Candidate, Desired, Error as ProviderError, IpState, PortRule, Step};

use kube::{Resource, ResourceExt};

use super::{candidate, port_status, service_ports};
use crate::{
    api::{
        RoutedIP, RoutedIPIssuer, RoutedIPIssuerStatus, RoutedIPStatus,
        conditions::{self, routed_ip as rc},
    },
    k8s::{CachedNode, NodeFacts, NodeView, condition, spec_fingerprint},
};

/// The nodes that may be elected: only those the selector selects (at 10,000 nodes a
/// candidate for every node per reconcile was 10,000 label maps copied, times the
/// reconciles in flight). `with_endpoint`: the nodes with a ready endpoint of the
/// `serviceRef` (`None`: no `serviceRef`, every node counts as having one).
pub(crate) fn candidates<'a, N: NodeView + 'a>(
    nodes: impl IntoIterator<Item = &'a N>,
    selector: &Selector,
    with_endpoint: Option<&BTreeSet<String>>,
) -> Vec<Candidate> {
    let no_labels = BTreeMap::new();
    nodes
        .into_iter()
        // Matched on the cached labels before anything is copied.
        .filter(|n| selector.matches(n.node_meta().labels.as_ref().unwrap_or(&no_labels)))
        .map(|n| NodeFacts::of(n, false))
        .map(|f| {
            let has = with_endpoint.is_none_or(|s| s.contains(&f.name));
            candidate(&f, selector, has)
        })
        .collect()
}

/// Whether the RoutedIP is where its status says it should be: an address, no step
/// under way, `Ready` for this generation, held by the elected node, with the firewall
/// and ports wanted now. A settled RoutedIP is not sent to the provider again until the
/// resync (a quiet cluster makes no provider call).
pub(crate) fn settled(
    rip: &RoutedIP,
    elected: Option<&Candidate>,
    firewall: Option<&String>,
    ports: &BTreeSet<PortRule>,
) -> bool {
    let Some(cur) = &rip.status else {
        return false;
    };
    let ready = cur.conditions.iter().any(|c| {
        c.type_ == conditions::READY
            && c.status == conditions::STATUS_TRUE
            && c.observed_generation == rip.metadata.generation
    });
    cur.address.is_some()
        && cur.step.is_none()
        && ready
        && cur.node.as_deref() == elected.map(|c| c.name.as_str())
        && cur.firewall.as_ref() == firewall
        && cur.ports == port_status(ports)
}

/// What the provider should hold: the IP on the elected node (by its provider ID), the
/// firewall with the Service's ports.
pub(crate) fn desired(
    elected: Option<&Candidate>,
    firewall: Option<String>,
    ports: BTreeSet<PortRule>,
) -> Desired {
    Desired {
        node: elected.and_then(|c| c.provider_id.clone()),
        firewall,
        ports,
    }
}

/// `node` may not hold the IP again for `cooldown_seconds` from `now`.
fn cool_down(st: &mut RoutedIPStatus, node: &str, cooldown_seconds: u32, now: Timestamp) {
    let until = now + SignedDuration::from_secs(i64::from(cooldown_seconds));
    st.cooldown_until.insert(node.to_owned(), until.to_string());
}

/// The status once the provider was read, when it must change before any step runs
/// (`None`: it already says so).
#[derive(Debug, PartialEq)]
pub(crate) struct Followed {
    pub(crate) status: RoutedIPStatus,
    /// Set when the provider's holder is not the node the status named (a move that
    /// finished while no operator watched): said in an Event.
    pub(crate) corrected: Option<String>,
}

/// The provider is the truth: its `address` is recorded before the IP is assigned
/// anywhere (a DigitalOcean IP carries no tags: an unrecorded one would be orphaned),
/// and its `holder` (a node name) replaces the one the status named, which then cools
/// down: an operator killed after the provider moved the IP but before the status said
/// so must not move it back.
pub(crate) fn follow_provider(
    st: &RoutedIPStatus,
    address: &str,
    holder: Option<&str>,
    cooldown_seconds: u32,
    now: Timestamp,
) -> Option<Followed> {
    let moved = holder.is_some() && holder != st.node.as_deref();
    if st.address.as_deref() == Some(address) && !moved {
        return None;
    }
    let mut next = st.clone();
    next.address = Some(address.to_owned());
    let mut corrected = None;
    if let (Some(old), Some(new)) = (&st.node, holder)
        && old != new
    {
        cool_down(&mut next, old, cooldown_seconds, now);
        corrected = Some(format!(
            "{address} is on {new} at the provider, not on {old} as the status said (a move \
             finished while no operator watched): the status follows, {old} cools down"
        ));
    }
    if let Some(h) = holder {
        next.node = Some(h.to_owned());
    }
    Some(Followed {
        status: next,
        corrected,
    })
}

/// The status after an `assign` to `node` ran: `node` holds the IP; the `holder` it was
/// taken from (if another) cools down and is returned (a failover to count and log).
pub(crate) fn assigned(
    st: &mut RoutedIPStatus,
    holder: Option<&str>,
    node: &str,
    cooldown_seconds: u32,
    now: Timestamp,
) -> Option<String> {
    let from = holder.filter(|old| *old != node).map(str::to_owned);
    if let Some(old) = &from {
        cool_down(st, old, cooldown_seconds, now);
    }
    st.node = Some(node.to_owned());
    from
}

/// The status once every step ran: the firewall and ports kept, no step, cooldowns that
/// are over dropped, and `Ready`: `Settled` on the elected node, or `NoCandidate` (the IP
/// stays where it is). `current` is the status the reconcile began with (a condition's
/// transition time is kept while its status holds).
pub(crate) fn finished(
    mut st: RoutedIPStatus,
    current: &[Condition],
    elected: Option<&str>,
    firewall: Option<String>,
    ports: &BTreeSet<PortRule>,
    generation: Option<i64>,
    now: Timestamp,
) -> RoutedIPStatus {
    st.cooldown_until
        .retain(|_, t| t.parse::<Timestamp>().is_ok_and(|t| t > now));
    st.firewall = firewall;
    st.ports = port_status(ports);
    st.step = None;
    let t = Time(now);
    st.conditions = vec![match elected {
        Some(node) => condition(
            current,
            conditions::READY,
            true,
            rc::SETTLED,
            format!("{} on {node}", st.address.as_deref().unwrap_or_default()),
            generation,
            &t,
        ),
        None => condition(
            current,
            conditions::READY,
            false,
            rc::NO_CANDIDATE,
            "no node may hold the IP (Ready, schedulable, untainted, selected, with a \
             provider ID and, with serviceRef, a ready endpoint): it stays where it is"
                .into(),
            generation,
            &t,
        ),
    }];
    st
}

/// The status that reports a failure: `Ready` False with the failure's reason and
/// message; the rest (address, holder, cooldowns, the step that failed) as it was.
pub(crate) fn failed(
    current: &RoutedIPStatus,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> RoutedIPStatus {
    let mut st = current.clone();
    st.conditions = vec![condition(
        &current.conditions,
        conditions::READY,
        false,
        reason,
        message,
        generation,
        now,
    )];
    st
}

/// What an issuer's check found and says.
#[derive(Debug, PartialEq)]
pub(crate) struct IssuerCheck {
    pub(crate) status: RoutedIPIssuerStatus,
    /// The issuer's orphans now (`None` when the provider could not be listed: the last
    /// ones are kept).
    pub(crate) orphans: Option<Vec<String>>,
    /// A Warning Event's note naming the orphans not seen at the last check.
    pub(crate) new_orphans: Option<String>,
}

/// An issuer's status from its provider's listing of the IPs tagged for this cluster
/// (`Err`: why the token or the provider could not be used): `Ready`, and `Orphans` (an
/// IP whose RoutedIP, among `routed_ips`, is gone; never deleted by netpolicy). `before`:
/// the orphans of the last check (only new ones are told in an Event). A failed listing
/// sets `Ready` False and keeps the rest of the status.
pub(crate) fn issuer_check(
    issuer: &RoutedIPIssuer,
    listed: &Result<Vec<(IpState, String)>, String>,
    routed_ips: &BTreeSet<String>,
    before: &[String],
    now: &Time,
) -> IssuerCheck {
    let cur = issuer.status.clone().unwrap_or_default();
    let g = issuer.metadata.generation;
    let ips = match listed {
        Ok(ips) => ips,
        Err(message) => {
            let mut st = cur.clone();
            st.conditions.retain(|c| c.type_ != conditions::READY);
            st.conditions.insert(
                0,
                condition(
                    &cur.conditions,
                    conditions::READY,
                    false,
                    rc::ISSUER_UNAVAILABLE,
                    message.clone(),
                    g,
                    now,
                ),
            );
            return IssuerCheck {
                status: st,
                orphans: None,
                new_orphans: None,
            };
        }
    };
    let orphans: Vec<String> = ips
        .iter()
        .filter(|(_, rip)| !routed_ips.contains(rip))
        .map(|(ip, rip)| format!("{} (RoutedIP {rip})", ip.address))
        .collect();
    let new: Vec<&str> = orphans
        .iter()
        .filter(|o| !before.contains(o))
        .map(String::as_str)
        .collect();
    let new_orphans = (!new.is_empty()).then(|| {
        format!(
            "IPs tagged for this cluster whose RoutedIP is gone (left at the provider): {}",
            new.join(", ")
        )
    });
    let orphan_condition = if orphans.is_empty() {
        condition(
            &cur.conditions,
            rc::ORPHANS,
            false,
            rc::NONE,
            "no orphaned IP".into(),
            g,
            now,
        )
    } else {
        condition(
            &cur.conditions,
            rc::ORPHANS,
            true,
            rc::ORPHANED,
            format!(
                "tagged for this cluster, RoutedIP gone (never deleted by netpolicy; delete them \
                 at the provider or adopt them with spec.address): {}",
                orphans.join(", ")
            ),
            g,
            now,
        )
    };
    IssuerCheck {
        status: RoutedIPIssuerStatus {
            conditions: vec![
                condition(
                    &cur.conditions,
                    conditions::READY,
                    true,
                    rc::READY,
                    "the token is readable and the provider answers".into(),
                    g,
                    now,
                ),
                orphan_condition,
            ],
        },
        orphans: Some(orphans),
        new_orphans,
    }
}

// What wakes a RoutedIP: the parts of each object its reconcile reads.

/// The spec's generation and whether deletion began (the finalizer's cue).
pub(crate) fn generation_fingerprint<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        spec_fingerprint(o),
        o.meta().deletion_timestamp.is_some()
    )
}

/// What of a Node election reads.
pub(crate) fn node_fingerprint(n: &CachedNode) -> String {
    let f = NodeFacts::of(n, false);
    format!(
        "{}|{:?}|{:?}|{}|{}|{}",
        n.uid().unwrap_or_default(),
        f.labels,
        f.provider_id,
        f.ready,
        f.unschedulable,
        f.tainted()
    )
}

/// What of an EndpointSlice the RoutedIPs serving its Service read.
pub(crate) fn slice_fingerprint(s: &EndpointSlice) -> String {
    let mut eps: Vec<(Option<&String>, Option<bool>)> = s
        .endpoints
        .iter()
        .map(|e| {
            (
                e.node_name.as_ref(),
                e.conditions.as_ref().and_then(|c| c.ready),
            )
        })
        .collect();
    eps.sort();
    format!("{:?}|{eps:?}", s.labels().get("kubernetes.io/service-name"))
}

/// What of a Service its RoutedIPs read: its ports.
pub(crate) fn service_fingerprint(s: &Service) -> String {
    format!("{:?}", service_ports(s))
}

/// A provider error's kind, as the `provider_errors` metric labels it.
pub(crate) fn error_kind(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::NotFound(_) => "not_found",
        ProviderError::Conflict(_) => "conflict",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::Unauthorized(_) => "unauthorized",
        ProviderError::LimitExceeded(_) => "limit_exceeded",
        ProviderError::Unreachable(_) => "unreachable",
        ProviderError::Provider(_) => "provider",
    }
}

/// A step's kind, as the step-duration metric labels it.
pub(crate) fn step_kind(s: &Step) -> &'static str {
    match s {
        Step::CreateFirewall => "createFirewall",
        Step::AddPort(_) => "addPort",
        Step::AddNode(_) => "addNode",
        Step::Assign(_) => "assign",
        Step::RemovePort(_) => "removePort",
        Step::RemoveNode(_) => "removeNode",
    }
}

#[cfg(test)]
mod tests;
