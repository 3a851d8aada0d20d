//! The routed-IP job: RoutedIPs, their issuers and the Nodes → which node holds each IP
//! (DESIGN.md, RoutedIP). This module is pure: it turns Nodes into
//! [`netpolicy_issuers::Candidate`]s and elects with [`netpolicy_issuers::elect`].

use netpolicy_core::selector::Selector;
use netpolicy_issuers::{Candidate, ElectionInput};

use crate::k8s::NodeFacts;

/// A node as a candidate to hold a RoutedIP. `has_endpoint` says whether it hosts a
/// ready endpoint of the RoutedIP's `serviceRef` (true when it has none).
pub fn candidate(node: &NodeFacts, selector: &Selector, has_endpoint: bool) -> Candidate {
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
pub fn elect<'a>(
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
