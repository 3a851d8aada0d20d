//! The routing job: ClusterConfig + NodeConfigs + Nodes → one NodeNetworkConfig per
//! node (DESIGN.md, node agent model). This module is pure: the merge policy of each
//! object, the revision of a rendering, which nodes an invalid policy holds. The
//! controller ([`controller`]) is the only part that awaits.

pub mod controller;

use std::collections::BTreeSet;

use netpolicy_core::{
    merge::{Policy, Source},
    selector::Selector,
    spec::RenderedSpec,
};

use crate::{
    api::{CLUSTER_CONFIG_NAME, ClusterConfig, NodeConfig, NodeNetworkConfigSpec},
    k8s::InputError,
};

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

    #[test]
    fn the_revision_follows_the_content() {
        let a = nnc(&[("NodeConfig", "a")]).rendered;
        let b = nnc(&[("NodeConfig", "b")]).rendered;
        assert_eq!(revision(&a), revision(&a.clone()));
        assert_ne!(revision(&a), revision(&b));
        assert_eq!(revision(&a).len(), 16);
    }
}
