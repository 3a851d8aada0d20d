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

/// The oracle over the floating-IP allocation door: what `plan` prints for a world is
/// what the operator's job gives it, pass after pass until it settles (the FloatingIPs
/// `autoAllocate` creates served in the pass after the one that creates them, each
/// claim made read back by the next pass). Random worlds: two ranges (one small enough
/// to fill, one with `autoAllocate` or not), static requests in, outside and between
/// them, addresses that are not addresses, a range that does not exist.
mod allocation_oracle {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    use super::*;
    use crate::{
        api::{FloatingIP, FloatingIPClaim},
        floating_ip::{
            World, claim_object, pass,
            tests::{ADDRESSES, RANGES},
        },
    };

    fn manifests(fips: &[(usize, u8, u8, Option<usize>)], auto: bool, namespaces: u8) -> String {
        let auto = if auto { "\n  autoAllocate: {}" } else { "" };
        let mut text = format!(
            "apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {{name: blue}}
spec:
  cidrs: [10.0.0.0/29]{auto}
---
apiVersion: netpolicy.io/v1alpha1
kind: FloatingIPRange
metadata: {{name: green}}
spec:
  cidrs: [10.0.1.0/30]
"
        );
        for n in 0..namespaces {
            text.push_str(&format!(
                "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: ns{n}}}\n"
            ));
        }
        let mut seen = BTreeSet::new();
        for (r, ns, n, a) in fips {
            let ns = ns % namespaces;
            if !seen.insert((ns, *n)) {
                continue;
            }
            let address = a.map_or(String::new(), |i| format!(", address: {:?}", ADDRESSES[i]));
            text.push_str(&format!(
                "---\napiVersion: netpolicy.io/v1alpha1\nkind: FloatingIP\n\
                 metadata: {{name: f{n}, namespace: ns{ns}}}\n\
                 spec: {{range: {}{address}}}\n",
                RANGES[*r]
            ));
        }
        text
    }

    /// The job's passes over the world until nothing is left to create: each
    /// FloatingIP's address (`namespace/name` → address).
    fn operator(m: &Manifests) -> BTreeMap<String, String> {
        let ranges: Vec<_> = m
            .floating_ip_ranges
            .iter()
            .map(|r| Arc::new(r.object.clone()))
            .collect();
        let namespaces: Vec<_> = m
            .namespaces
            .iter()
            .map(|n| Arc::new(n.object.clone()))
            .collect();
        // The API server gives every object a uid (a claim's owner is matched by it).
        let with_uid = |mut f: FloatingIP| {
            let ns = f.metadata.namespace.clone().unwrap_or_default();
            let name = f.metadata.name.clone().unwrap_or_default();
            f.metadata.uid = Some(format!("uid-{ns}-{name}"));
            Arc::new(f)
        };
        let mut fips: Vec<Arc<FloatingIP>> = m
            .floating_ips
            .iter()
            .map(|f| with_uid(f.object.clone()))
            .collect();
        let mut claims: Vec<Arc<FloatingIPClaim>> = Vec::new();
        let guests = BTreeMap::new();
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        for _ in 0..4 {
            let p = pass(
                World {
                    ranges: &ranges,
                    fips: &fips,
                    namespaces: &namespaces,
                    claims: &claims,
                    clusters: None,
                    guests: &guests,
                    published: None,
                },
                &now,
            );
            if p.create_claims.is_empty() && p.create_fips.is_empty() {
                break;
            }
            claims.extend(p.create_claims.iter().map(|c| Arc::new(claim_object(c))));
            fips.extend(p.create_fips.into_iter().map(with_uid));
        }
        claims
            .iter()
            .map(|c| {
                (
                    format!("{}/{}", c.spec.owner.namespace, c.spec.owner.name),
                    c.spec.address.clone(),
                )
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn plan_gives_each_floating_ip_the_address_the_operator_gives_it(
            fips in proptest::collection::vec(
                (0..3usize, 0..3u8, 0..6u8, proptest::option::of(0..8usize)), 0..12),
            auto in proptest::bool::ANY,
            namespaces in 1..4u8,
        ) {
            let mut m = Manifests::default();
            m.add_text(Path::new("world.yaml"), &manifests(&fips, auto, namespaces));
            let planned: BTreeMap<String, String> = plan(&m)
                .floating_ips
                .into_iter()
                .filter(|f| !f.address.is_empty())
                .map(|f| (format!("{}/{}", f.namespace, f.name), f.address))
                .collect();
            prop_assert_eq!(planned, operator(&m));
        }
    }
}
