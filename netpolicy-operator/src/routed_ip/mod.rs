//! The routed-IP job: RoutedIPs, their issuers, Nodes and the `serviceRef` Services'
//! EndpointSlices → which node holds each IP, which ports its firewall opens
//! (docs/architecture.md, RoutedIP). This module and [`decide`] are pure: it turns Nodes into
//! [`netpolicy_issuers::Candidate`]s, elects with [`netpolicy_issuers::elect`], reads a
//! Service's ports and ready endpoints, and says what a failover step is called. The
//! provider calls are in [`controller`].

pub(crate) mod controller;
mod decide;
mod metrics;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use netpolicy_core::selector::Selector;
use netpolicy_issuers::{Candidate, ElectionInput, PortRule, Step};

use crate::{api::RoutedIPPort, k8s::NodeFacts};

/// The ports a Service exposes, as firewall rules (`TCP` and `UDP`; cloud firewalls
/// have no SCTP rules, so SCTP ports are left out).
pub(crate) fn service_ports(service: &Service) -> BTreeSet<PortRule> {
    service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| {
            let protocol = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
            let port = u16::try_from(p.port).ok()?;
            matches!(protocol.as_str(), "tcp" | "udp").then_some(PortRule { protocol, port })
        })
        .collect()
}

/// Nodes with a ready endpoint of Service `namespace/name` (EndpointSlices labelled
/// `kubernetes.io/service-name`; an endpoint whose `ready` is unset counts as ready, as
/// the API documents).
pub(crate) fn endpoint_nodes<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    namespace: &str,
    name: &str,
) -> BTreeSet<String> {
    slices
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(namespace)
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("kubernetes.io/service-name"))
                    .is_some_and(|n| n == name)
        })
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .filter_map(|e| e.node_name.clone())
        .collect()
}

/// The ports as the status shows them.
pub(crate) fn port_status(ports: &BTreeSet<PortRule>) -> Vec<RoutedIPPort> {
    ports
        .iter()
        .map(|p| RoutedIPPort {
            protocol: p.protocol.clone(),
            port: p.port,
        })
        .collect()
}

/// `status.cooldownUntil` (node → RFC 3339) as election's `(node, lost at)`: lost at =
/// until − `cooldown_seconds`. Unparsable times are dropped.
pub(crate) fn cooldown(
    until: &BTreeMap<String, String>,
    cooldown_seconds: u32,
) -> Vec<(String, i64)> {
    until
        .iter()
        .filter_map(|(n, t)| {
            let t: k8s_openapi::jiff::Timestamp = t.parse().ok()?;
            Some((n.clone(), t.as_second() - i64::from(cooldown_seconds)))
        })
        .collect()
}

/// A failover step as the status and Events name it (`addNode hcloud://2`).
pub(crate) fn step_name(step: &Step) -> String {
    match step {
        Step::CreateFirewall => "createFirewall".into(),
        Step::AddPort(p) => format!("addPort {}/{}", p.protocol, p.port),
        Step::AddNode(n) => format!("addNode {n}"),
        Step::Assign(n) => format!("assign {n}"),
        Step::RemovePort(p) => format!("removePort {}/{}", p.protocol, p.port),
        Step::RemoveNode(n) => format!("removeNode {n}"),
    }
}

/// The `spec.providerID` form of the issuer's provider (`(prefix, how it reads)`), or
/// `None` for a provider that takes any ID (the in-process one).
pub(crate) fn provider_id_form(
    spec: &crate::api::RoutedIPIssuerSpec,
) -> Option<(&'static str, &'static str)> {
    let id = spec.providers().first()?.node_id?;
    Some((id.prefix, id.form))
}

/// A node as a candidate to hold a RoutedIP. `has_endpoint` says whether it hosts a
/// ready endpoint of the RoutedIP's `serviceRef` (true when it has none).
pub(crate) fn candidate(node: &NodeFacts, selector: &Selector, has_endpoint: bool) -> Candidate {
    Candidate {
        name: node.name.clone(),
        provider_id: node.provider_id.clone(),
        ready: node.ready,
        unschedulable: node.unschedulable,
        tainted: node.tainted(),
        selected: selector.matches(&node.labels),
        has_endpoint,
        created: node.created,
    }
}

/// The node that should hold the IP: the current `holder` while it stays eligible,
/// else the oldest eligible node out of cooldown (see [`netpolicy_issuers::elect`]).
pub(crate) fn elect<'a>(
    candidates: &'a [Candidate],
    holder: Option<&'a str>,
    cooldown: &'a [(String, i64)],
    now: i64,
    cooldown_seconds: u32,
) -> Option<&'a Candidate> {
    netpolicy_issuers::elect(&ElectionInput {
        nodes: candidates,
        holder,
        cooldown,
        now,
        cooldown_seconds: i64::from(cooldown_seconds),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Taint;

    fn node(name: &str, created: i64) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            labels: [("role".to_owned(), "edge".to_owned())].into(),
            ready: true,
            unschedulable: false,
            taints: Vec::new(),
            provider_id: Some(format!("hcloud://{created}")),
            created,
        }
    }

    #[test]
    fn a_services_tcp_and_udp_ports_and_its_ready_endpoints_nodes() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"ports": [{"port": 443}, {"port": 53, "protocol": "UDP"},
                               {"port": 9, "protocol": "SCTP"}]}
        }))
        .unwrap();
        assert_eq!(
            service_ports(&svc).into_iter().collect::<Vec<_>>(),
            [
                PortRule::tcp(443),
                PortRule {
                    protocol: "udp".into(),
                    port: 53
                }
            ]
        );
        let slice = |ns: &str, svc: &str, eps: serde_json::Value| -> EndpointSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{svc}-x"), "namespace": ns,
                             "labels": {"kubernetes.io/service-name": svc}},
                "addressType": "IPv4", "endpoints": eps
            }))
            .unwrap()
        };
        let slices = [
            slice(
                "shop",
                "web",
                serde_json::json!([
                    {"addresses": ["10.0.0.1"], "nodeName": "a", "conditions": {"ready": true}},
                    {"addresses": ["10.0.0.2"], "nodeName": "b", "conditions": {"ready": false}},
                    {"addresses": ["10.0.0.3"], "nodeName": "c"}
                ]),
            ),
            slice(
                "other",
                "web",
                serde_json::json!([{"addresses": ["10.0.0.4"], "nodeName": "d"}]),
            ),
        ];
        assert_eq!(
            endpoint_nodes(&slices, "shop", "web")
                .into_iter()
                .collect::<Vec<_>>(),
            ["a", "c"]
        );
    }

    #[test]
    fn cooldown_until_is_read_back_as_the_time_the_node_lost_the_ip() {
        let until = BTreeMap::from([
            ("a".to_owned(), "2026-01-01T00:01:00Z".to_owned()),
            ("b".to_owned(), "not a time".to_owned()),
        ]);
        let c = cooldown(&until, 60);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].0, "a");
        assert_eq!(c[0].1, 1_767_225_600);
    }

    #[test]
    fn the_oldest_eligible_node_is_elected_and_a_tainted_one_is_not() {
        let sel = netpolicy_core::spec::LabelSelector::default()
            .validate("spec.nodeSelector")
            .unwrap();
        let mut old = node("old", 1);
        old.taints.push(Taint {
            key: "k".into(),
            effect: "NoExecute".into(),
            ..Taint::default()
        });
        let mut soft = node("soft", 2);
        soft.taints.push(Taint {
            key: "k".into(),
            effect: "PreferNoSchedule".into(),
            ..Taint::default()
        });
        let c: Vec<Candidate> = [old, soft, node("young", 3)]
            .iter()
            .map(|n| candidate(n, &sel, true))
            .collect();
        assert_eq!(elect(&c, None, &[], 0, 0).unwrap().name, "soft");
        assert_eq!(elect(&c, Some("young"), &[], 0, 0).unwrap().name, "young");
    }
}
