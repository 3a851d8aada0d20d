//! An operator's view of netpolicy's kinds, from `netpolicy-api` alone: a NodeConfig
//! built in Rust (its spec types come from `netpolicy_api::spec`), validated as the
//! operator validates it, printed as the JSON `kubectl apply` would send, and the CRDs
//! this crate would install.

use kube::{CustomResourceExt, Resource};
use netpolicy_api::{
    NodeConfig, NodeConfigSpec, crds,
    spec::{LabelSelector, RouteSpec, RoutingSpec, RuleSpec},
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let edge = NodeConfig::new(
        "edge",
        NodeConfigSpec {
            node_selector: LabelSelector {
                match_labels: [("node.netpolicy.io/pool".to_owned(), "edge".to_owned())].into(),
                ..LabelSelector::default()
            },
            priority: 10,
            routing: RoutingSpec {
                routes: vec![RouteSpec {
                    to: "10.20.0.0/16".into(),
                    via: Some("192.0.2.1".into()),
                    table: Some(100),
                    ..RouteSpec::default()
                }],
                rules: vec![RuleSpec {
                    priority: 1000,
                    from: Some("10.20.0.0/16".into()),
                    table: Some(100),
                    ..RuleSpec::default()
                }],
                ..RoutingSpec::default()
            },
            ..NodeConfigSpec::default()
        },
    );
    let valid = edge.spec.routing.validate("spec")?;
    println!(
        "{} {}: {} route(s), {} rule(s) valid",
        NodeConfig::kind(&()),
        edge.metadata.name.as_deref().unwrap_or_default(),
        valid.routes.len(),
        valid.rules.len()
    );
    println!("{}", serde_json::to_string(&edge)?);
    println!("CRD {}", NodeConfig::crd_name());
    println!("{} CRDs in netpolicy-api", crds().len());
    Ok(())
}
