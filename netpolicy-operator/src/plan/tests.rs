//! `plan()` as a function: manifests in, the report out, no CLI and no cluster (the CLI
//! is tested in tests/plan_cli.rs, the jobs that share these rules on a real API server).

use std::{path::Path, sync::Arc};

use super::*;

fn plan_of(text: &str) -> PlanReport {
    let mut m = Manifests::default();
    m.add_text(Path::new("test.yaml"), text);
    plan(&m)
}

const NODES: &str = "
apiVersion: v1
kind: Node
metadata: {name: a1, labels: {role: edge, topology.kubernetes.io/zone: a}}
---
apiVersion: v1
kind: Node
metadata: {name: a2, labels: {role: edge, topology.kubernetes.io/zone: a}}
---
apiVersion: v1
kind: Node
metadata: {name: b1, labels: {role: core, topology.kubernetes.io/zone: b}}
";

#[test]
fn policies_merge_per_node_and_nodes_with_the_same_policies_share_one_rendering() {
    let r = plan_of(&format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: ClusterConfig
metadata: {{name: default}}
spec:
  routes: [{{to: 10.0.0.0/8, via: 192.0.2.1}}]
---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {{name: edge}}
spec:
  nodeSelector: {{matchLabels: {{role: edge}}}}
  routes: [{{to: 10.20.0.0/16, via: 192.0.2.2, table: 100}}]
"
    ));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let routes = |n: &str| {
        r.nodes[n]
            .routes
            .iter()
            .map(|s| s.item.to.clone())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        routes("a1"),
        BTreeSet::from(["10.0.0.0/8".to_owned(), "10.20.0.0/16".to_owned()])
    );
    assert_eq!(routes("b1"), BTreeSet::from(["10.0.0.0/8".to_owned()]));
    // One rendering per distinct set of policies, shared by its nodes.
    assert!(Arc::ptr_eq(&r.nodes["a1"], &r.nodes["a2"]));
    assert!(!Arc::ptr_eq(&r.nodes["a1"], &r.nodes["b1"]));
}

#[test]
fn an_invalid_item_is_an_error_naming_its_field_and_its_node_keeps_its_last_config() {
    let r = plan_of(&format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: NodeConfig
metadata: {{name: edge}}
spec:
  nodeSelector: {{matchLabels: {{role: edge}}}}
  routes: [{{to: 10.20.0.0/33, via: 192.0.2.2}}]
"
    ));
    assert!(r.has_errors());
    let e = r
        .errors
        .iter()
        .find(|e| e.name == "edge")
        .unwrap_or_else(|| panic!("{:?}", r.errors));
    assert_eq!(e.field, "spec.routes[0].to", "{e:?}");
}

#[test]
fn floating_ips_get_distinct_addresses_of_their_range_and_an_exhausted_range_says_so() {
    let r = plan_of(
        "
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {name: small}
spec:
  cidrs: [203.0.113.0/30]
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIP
metadata: {name: one, namespace: team}
spec: {range: small}
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIP
metadata: {name: two, namespace: team}
spec: {range: small}
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIP
metadata: {name: three, namespace: team}
spec: {range: small}
",
    );
    let got: BTreeMap<&str, &str> = r
        .floating_ips
        .iter()
        .map(|f| (f.name.as_str(), f.address.as_str()))
        .collect();
    let mut given: Vec<&str> = got.values().copied().filter(|a| !a.is_empty()).collect();
    given.sort_unstable();
    // A /30's two usable addresses, once each; the third request gets none, said.
    assert_eq!(given, ["203.0.113.1", "203.0.113.2"], "{got:?}");
    assert_eq!(got.len(), 3);
    assert!(
        r.errors.iter().any(|e| e.kind == "FloatingIP"),
        "{:?}",
        r.errors
    );
    let range = &r.floating_ip_ranges[0];
    assert_eq!(
        (range.capacity.get(), range.allocated.get()),
        (Some(2), Some(2))
    );
}

#[test]
fn route_reflectors_are_placed_per_zone() {
    let r = plan_of(&format!(
        "{NODES}---
apiVersion: netpolicy.io/v1alpha1
kind: RouteReflectorConfig
metadata: {{name: default}}
spec: {{min: 1, max: 1}}
"
    ));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let rr = r
        .route_reflectors
        .as_ref()
        .unwrap_or_else(|| panic!("{r:?}"));
    let zones: BTreeSet<&str> = rr.reflectors.iter().map(|x| x.zone.as_str()).collect();
    assert_eq!(zones, BTreeSet::from(["a", "b"]), "{:?}", rr.reflectors);
    assert!(
        !rr.steps.is_empty(),
        "a cluster without reflectors gets steps"
    );
}
