use std::collections::{BTreeMap, BTreeSet};

use netpolicy_core::{
    merge::{NodeOutcome, Policy},
    render::{RenderedSpec, SourceRef, SourcedSpec},
    selector::Labels,
    spec::{AddressSpec, RouteSpec, RoutingSpec, RuleSpec},
};
use serde::Serialize;

use super::{Rendering, Shared, layer_parts, parts, shared};
use crate::{
    api::{ClusterConfig, NodeConfig, NodeNetworkRenderingSpec},
    k8s::JobItems,
    routing::{Routing, node_spec, with_job_items},
};

fn cluster_config(routes: usize) -> ClusterConfig {
    let routes: Vec<serde_json::Value> = (0..routes)
        .map(|i| serde_json::json!({"to": format!("10.{}.{}.0/24", 100 + i / 250, i % 250), "via": "192.0.2.1"}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "ClusterConfig",
        "metadata": {"name": "default", "uid": "uid-cc", "generation": 1},
        "spec": {"routes": routes, "probes": [{"ping": "192.0.2.1"}]},
    }))
    .unwrap()
}

fn node_config(name: &str, key: &str, value: &str, to: &str, rollback: Option<u32>) -> NodeConfig {
    let mut spec = serde_json::json!({
        "nodeSelector": {"matchLabels": {key: value}},
        "priority": 10,
        "routes": [{"to": to, "via": "192.0.2.9"}],
        "rules": [{"priority": 1000, "from": to, "table": 100}],
    });
    if let Some(s) = rollback {
        spec["rollout"] = serde_json::json!({"rollbackSeconds": s});
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "netpolicy.io/v1alpha1", "kind": "NodeConfig",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1},
        "spec": spec,
    }))
    .unwrap()
}

/// 30 nodes over two zones and two roles; a ClusterConfig, three NodeConfigs (one per
/// zone a, one for role edge, one for a single node by name), a traffic domain's
/// items on two nodes, and other jobs' items on some: a floating IP's return routing,
/// a RoutedIP's address, and one address the edge NodeConfig gives too.
fn world() -> (Routing, BTreeMap<String, JobItems>) {
    let mut routing = Routing::new();
    for i in 0..30 {
        let labels = Labels::from([
            ("zone".to_owned(), ["a", "b"][i % 2].to_owned()),
            (
                "role".to_owned(),
                ["edge", "worker", "worker"][i % 3].to_owned(),
            ),
        ]);
        routing.node(&format!("n{i:02}"), Some(&labels));
    }
    routing.cluster_config("default", Some(&cluster_config(40)));
    routing.node_config(
        "zone-a",
        Some(&node_config("zone-a", "zone", "a", "172.16.1.0/24", None)),
    );
    routing.node_config(
        "edge",
        Some(&node_config(
            "edge",
            "role",
            "edge",
            "172.16.2.0/24",
            Some(60),
        )),
    );
    routing.node_config(
        "n07",
        Some(&node_config(
            "n07",
            netpolicy_core::merge::NODE_NAME_LABEL,
            "n07",
            "172.16.7.0/24",
            None,
        )),
    );
    let trench = |node: &str| {
        let spec = RoutingSpec {
            routes: vec![RouteSpec {
                to: "198.51.100.0/24".into(),
                via: Some("192.0.2.50".into()),
                table: Some(300),
                ..Default::default()
            }],
            ..Default::default()
        };
        Policy::trench("red", "t", node, spec.validate("spec").unwrap())
    };
    routing.traffic(BTreeMap::from([(
        "red/t".to_owned(),
        vec![trench("n03"), trench("n04")],
    )]));
    let source = |kind: &str, name: &str| SourceRef {
        kind: kind.into(),
        name: name.into(),
    };
    let mut jobs: BTreeMap<String, JobItems> = BTreeMap::new();
    jobs.entry("n01".into()).or_default().routes.push((
        RouteSpec {
            to: "0.0.0.0/0".into(),
            via: Some("192.0.2.254".into()),
            table: Some(200),
            ..Default::default()
        },
        source("FloatingIP", "web/vip"),
    ));
    jobs.entry("n01".into()).or_default().rules.push((
        RuleSpec {
            priority: 2000,
            from: Some("203.0.113.10/32".into()),
            table: Some(200),
            ..Default::default()
        },
        source("FloatingIP", "web/vip"),
    ));
    jobs.entry("n02".into()).or_default().addresses.push((
        AddressSpec {
            dev: "lo".into(),
            address: "203.0.113.20/32".into(),
            local_route: None,
        },
        source("RoutedIP", "api"),
    ));
    // The edge NodeConfig's route, asked for again by a job on an edge node: the item is
    // shared, its sources on that node are not.
    jobs.entry("n03".into()).or_default().routes.push((
        RouteSpec {
            to: "172.16.2.0/24".into(),
            via: Some("192.0.2.9".into()),
            table: Some(254),
            metric: Some(0),
            ..Default::default()
        },
        source("RoutedIP", "edge-extra"),
    ));
    (routing, jobs)
}

/// Each item of a list as text with its sources.
fn sourced<T: Serialize>(list: &[SourcedSpec<T>]) -> BTreeMap<String, Vec<SourceRef>> {
    list.iter()
        .map(|s| {
            (
                serde_json::to_string(&s.item).unwrap_or_default(),
                s.sources.clone(),
            )
        })
        .collect()
}

/// The rendering and the node's own items as the agent joins them
/// ([`RenderedSpec::overlay`]), and the hard-synced tables.
fn joined(shared: &Shared, node: &str) -> (RenderedSpec, Vec<u32>) {
    let part = &shared.nodes[node];
    if part.whole {
        return ((*part.own).clone(), part.own.table_hard_sync.clone());
    }
    let r = shared.groups[&*part.group]
        .rendering
        .as_ref()
        .and_then(|r| shared.renderings.get(r))
        .map(|s| s.whole().rendered)
        .unwrap_or_default();
    let spec = r.overlay(&part.own);
    let tables = spec.table_hard_sync.clone();
    (spec, tables)
}

#[test]
fn every_node_runs_its_groups_rendering_and_its_own_items_which_are_todays_spec() {
    let (routing, jobs) = world();
    let shared = shared(&routing, &jobs);
    assert_eq!(shared.nodes.len(), 30, "every node is rendered");
    for node in routing.nodes() {
        let Some(NodeOutcome::Rendered(cfg)) = routing.outcome(node) else {
            panic!("{node} is held");
        };
        let (probes, rollback) = routing.node_probes(node);
        let mut today = RenderedSpec::from_config(cfg);
        if let Some(extra) = jobs.get(node) {
            today = with_job_items(&today, extra).0;
        }
        let today = node_spec(today, probes.clone(), rollback);
        let (got, tables) = joined(&shared, node);
        assert_eq!(
            sourced(&got.routes),
            sourced(&today.rendered.routes),
            "{node}: routes"
        );
        assert_eq!(
            sourced(&got.rules),
            sourced(&today.rendered.rules),
            "{node}: rules"
        );
        assert_eq!(
            sourced(&got.addresses),
            sourced(&today.rendered.addresses),
            "{node}: addresses"
        );
        assert_eq!(
            sourced(&got.vlans),
            sourced(&today.rendered.vlans),
            "{node}: vlans"
        );
        assert_eq!(tables, today.rendered.table_hard_sync, "{node}: tables");
        let part = &shared.nodes[node];
        assert!(!part.whole, "{node}: its group's rendering holds for it");
        let rendering = &shared.renderings[shared.groups[&*part.group]
            .rendering
            .as_deref()
            .unwrap_or_default()];
        assert_eq!(
            (&rendering.own.probes, rendering.own.rollback_seconds),
            (&probes, rollback),
            "{node}: probes"
        );
    }
}

#[test]
fn groups_follow_the_policies_and_only_per_node_items_stay_per_node() {
    let (routing, jobs) = world();
    let shared = shared(&routing, &jobs);
    // Policy sets: {cc}, {cc, zone-a}, {cc, edge}, {cc, zone-a, edge}, and n07 alone
    // with its own NodeConfig (zone b, worker: {cc, n07}).
    assert_eq!(
        shared.groups.len(),
        5,
        "{:#?}",
        shared
            .groups
            .values()
            .map(|g| &g.policies)
            .collect::<Vec<_>>()
    );
    assert_eq!(shared.renderings.len(), 5);
    let members: usize = shared.groups.values().map(|g| g.members.len()).sum();
    assert_eq!(members, 30);
    let with_own: BTreeSet<&str> = shared
        .nodes
        .iter()
        .filter(|(_, p)| {
            let o = &p.own;
            !(o.routes.is_empty()
                && o.rules.is_empty()
                && o.addresses.is_empty()
                && o.vlans.is_empty())
        })
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        with_own,
        BTreeSet::from(["n01", "n02", "n03", "n04"]),
        "per-node items: jobs and the traffic domain"
    );
    // The 40 cluster-wide routes are in every rendering, never in a node's own items.
    assert!(
        shared
            .renderings
            .values()
            .all(|r| r.whole().rendered.routes.len() >= 40)
    );
    // A job's item that a policy gives too is the node's own for its sources.
    let joined = shared.nodes["n03"]
        .own
        .routes
        .iter()
        .find(|r| r.item.to == "172.16.2.0/24");
    assert_eq!(
        joined.map(|r| r.sources.len()),
        Some(2),
        "{:?}",
        shared.nodes["n03"].own
    );
    let own_routes: usize = shared.nodes.values().map(|p| p.own.routes.len()).sum();
    assert!(own_routes <= 4, "{own_routes}");
}

/// A reported run (`cargo test -p netpolicy-operator --lib -- --ignored
/// shared_renderings_at_10000_nodes --nocapture`): what a cluster-wide edit writes at
/// 10,000 nodes with a 500-route ClusterConfig and 100 NodeConfigs (one per rack of 100
/// nodes, a route and a rule each), as per-node objects (today) and as shared renderings
/// (each group's rendering once; the nodes' own items do not change with a
/// cluster-wide edit). Object bytes are the specs' JSON, without metadata.
#[test]
#[ignore = "a reported run: prints the bytes; about 10 s in release, longer in debug"]
fn shared_renderings_at_10000_nodes() {
    let started = std::time::Instant::now();
    let mut routing = Routing::new();
    for i in 0..10_000 {
        let labels = Labels::from([("rack".to_owned(), format!("r{:02}", i / 100))]);
        routing.node(&format!("node-{i:05}"), Some(&labels));
    }
    routing.cluster_config("default", Some(&cluster_config(500)));
    for r in 0..100 {
        let name = format!("rack-{r:02}");
        let nc = node_config(
            &name,
            "rack",
            &format!("r{r:02}"),
            &format!("172.17.{r}.0/24"),
            None,
        );
        routing.node_config(&name, Some(&nc));
    }
    let jobs = BTreeMap::new();
    let shared = shared(&routing, &jobs);
    let mut per_node = 0usize;
    for node in routing.nodes() {
        let Some(NodeOutcome::Rendered(cfg)) = routing.outcome(node) else {
            continue;
        };
        let (probes, rollback) = routing.node_probes(node);
        let spec = node_spec(RenderedSpec::from_config(cfg), probes, rollback);
        per_node += serde_json::to_vec(&spec)
            .map(|v| v.len())
            .unwrap_or_default();
    }
    let sizes: Vec<usize> = shared
        .renderings
        .values()
        .map(|r| {
            serde_json::to_vec(&r.whole())
                .map(|v| v.len())
                .unwrap_or_default()
        })
        .collect();
    let rendered: usize = sizes.iter().sum();
    let largest = sizes.iter().max().copied().unwrap_or_default();
    println!(
        "10,000 nodes, 500-route ClusterConfig, 100 NodeConfigs: per-node objects {} writes, \
         {per_node} bytes; shared renderings {} writes ({} groups), {rendered} bytes, largest \
         {largest} bytes ({:.1} KiB); {:.1}x fewer bytes; computed in {:.1} s",
        routing.nodes().len(),
        shared.renderings.len(),
        shared.groups.len(),
        largest as f64 / 1024.0,
        per_node as f64 / rendered.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(shared.groups.len(), 100);
}

#[test]
fn a_rendering_over_the_limit_is_cut_into_parts_that_join_back_to_it() {
    let mut routing = Routing::new();
    routing.node("n1", Some(&Labels::new()));
    routing.cluster_config("default", Some(&cluster_config(600)));
    routing.node_config(
        "all",
        Some(&node_config("all", "zone", "x", "172.16.9.0/24", Some(45))),
    );
    let shared = shared(&routing, &BTreeMap::new());
    let mut whole = shared
        .renderings
        .values()
        .next()
        .map(super::Rendering::whole)
        .unwrap_or_default();
    // Addresses too (an empty part leaves their key out of its text, a part with one has it).
    whole.rendered.addresses = (0..40)
        .map(|i| SourcedSpec {
            item: AddressSpec {
                dev: "lo".into(),
                address: format!("203.0.113.{i}/32"),
                local_route: None,
            },
            sources: vec![SourceRef {
                kind: "NodeConfig".into(),
                name: "all".into(),
            }],
        })
        .collect();
    fn bytes<T: Serialize>(t: &T) -> usize {
        serde_json::to_vec(t).map_or(0, |b| b.len())
    }
    assert!(
        bytes(&whole) > 65_536,
        "600 routes are over 64 KiB: {}",
        bytes(&whole)
    );
    // Every limit in a span, so that some part ends within a few bytes of it.
    for max in 3_000..3_400 {
        for p in super::parts("r-x", &whole, &[], max) {
            assert!(
                bytes(&p) <= max,
                "max {max}: a part has {} bytes",
                bytes(&p)
            );
        }
    }
    for max in [4_096, 16_384, 65_536, 1 << 20] {
        let parts = super::parts("r-x", &whole, &[], max);
        assert_eq!(
            parts.len() == 1,
            bytes(&whole) <= max,
            "max {max}: one part exactly when it fits"
        );
        for (i, p) in parts.iter().enumerate() {
            assert!(
                bytes(p) <= max,
                "max {max}: part {i} has {} bytes",
                bytes(p)
            );
            assert_eq!(
                (p.rendering.as_str(), p.part as usize, p.parts as usize),
                ("r-x", i, parts.len()),
                "each part names the rendering, its place and their number"
            );
        }
        // Listed in any order, they join back to the rendering.
        let joined = crate::api::join("r-x", parts.iter().rev()).expect("the parts are whole");
        assert_eq!(
            (joined.rendered, joined.probes, joined.rollback_seconds),
            (
                whole.rendered.clone(),
                whole.probes.clone(),
                whole.rollback_seconds
            ),
            "max {max}: the parts join back to the rendering"
        );
    }
}

/// An edit of one policy changes only its own prints in the renderings it moves: the
/// others' items are the same in the old and the new rendering (their nodes stay
/// applied for them); probes and hard-synced tables, which no one policy owns, count
/// for every policy.
#[test]
fn a_policys_print_moves_only_with_its_own_items() {
    use super::Prints;
    let prints = |routing: &Routing| -> BTreeMap<Vec<String>, Prints> {
        let s = shared(routing, &BTreeMap::new());
        s.groups
            .values()
            .filter_map(|g| {
                let r = &s.renderings[g.rendering.as_ref()?];
                Some((g.policies.clone(), r.prints.clone()))
            })
            .collect()
    };
    let (mut routing, _) = world();
    let before = prints(&routing);
    // (A new generation: the engine takes a policy again only when it moved.)
    let generation = |mut o: ClusterConfig, g: i64| {
        o.metadata.generation = Some(g);
        o
    };
    routing.cluster_config("default", Some(&generation(cluster_config(41), 2)));
    let after = prints(&routing);
    let cc = "ClusterConfig/default";
    let edge = "NodeConfig/edge";
    let mut checked = 0;
    for (policies, old) in &before {
        let new = &after[policies];
        assert!(!old.same_for(new, cc), "{policies:?}: the edited policy");
        for p in policies.iter().filter(|p| *p != cc) {
            assert!(old.same_for(new, p), "{policies:?}: {p} was not edited");
            checked += 1;
        }
        assert!(old.same_for(old, cc));
    }
    assert!(
        checked >= 3,
        "groups with a NodeConfig beside the edited one"
    );
    // The edge NodeConfig's route moves: its groups' prints of it move, not the
    // ClusterConfig's.
    let mut edited = node_config("edge", "role", "edge", "172.16.3.0/24", Some(60));
    edited.metadata.generation = Some(2);
    routing.node_config("edge", Some(&edited));
    let moved = prints(&routing);
    for (policies, old) in &after {
        let new = &moved[policies];
        assert_eq!(!old.same_for(new, edge), policies.iter().any(|p| p == edge));
        assert!(old.same_for(new, cc), "{policies:?}");
    }
    // The probes count for every policy (a rollback time or a probe is every policy's).
    let mut probes = generation(cluster_config(41), 3);
    probes.spec.probes.clear();
    routing.cluster_config("default", Some(&probes));
    let without = prints(&routing);
    let (policies, old) = moved
        .iter()
        .find(|(p, _)| p.iter().any(|p| p == edge))
        .unwrap();
    assert!(!old.same_for(&without[policies], edge));
}

/// Sorted texts of a rendering's items with their sources (order aside).
fn items(r: &RenderedSpec) -> Vec<String> {
    fn all<T: Serialize>(kind: &str, l: &[SourcedSpec<T>], out: &mut Vec<String>) {
        out.extend(
            l.iter()
                .map(|s| format!("{kind} {}", serde_json::to_string(s).unwrap_or_default())),
        );
    }
    let mut out = Vec::new();
    all("vlan", &r.vlans, &mut out);
    all("route", &r.routes, &mut out);
    all("address", &r.addresses, &mut out);
    all("rule", &r.rules, &mut out);
    out.sort();
    out
}

/// Two groups that share a ClusterConfig of 600 routes store its items once: one layer
/// of the same name in both renderings, each object under the limit, and each
/// rendering's parts laid over the layer give its items back; with no layer size
/// reached, a rendering is its parts alone, as before layers.
#[test]
fn a_large_policys_items_are_one_layer_that_renderings_share_and_join_back() {
    let mut routing = Routing::new();
    for (n, zone) in [("n1", "a"), ("n2", "b")] {
        routing.node(
            n,
            Some(&Labels::from([("zone".to_owned(), zone.to_owned())])),
        );
    }
    routing.cluster_config("default", Some(&cluster_config(600)));
    for zone in ["a", "b"] {
        let nc = node_config(
            zone,
            "zone",
            zone,
            &format!("172.16.{}.0/24", zone.len()),
            None,
        );
        routing.node_config(zone, Some(&nc));
    }
    let shared = shared(&routing, &BTreeMap::new());
    assert_eq!(shared.renderings.len(), 2, "one rendering a zone");
    let max = 16_384;
    let mut layer_names = BTreeSet::new();
    for (name, r) in &shared.renderings {
        let whole = &r.whole();
        let l = layout(name, r, max);
        assert_eq!(
            l.layers.len(),
            1,
            "{name}: the ClusterConfig's items are a layer"
        );
        layer_names.insert(l.layers[0].0.clone());
        for p in l.parts.iter().chain(l.layers.iter().flat_map(|(_, p)| p)) {
            let bytes = serde_json::to_vec(p).map_or(0, |b| b.len());
            assert!(
                bytes <= max,
                "{name}: {} part {} has {bytes} bytes",
                p.rendering,
                p.part
            );
        }
        assert!(
            l.parts
                .iter()
                .flat_map(|p| &p.rendered.routes)
                .all(|r| r.sources.iter().all(|s| s.kind == "NodeConfig")),
            "{name}: its own parts keep only the NodeConfig's items"
        );
        let (layer, layer_parts) = &l.layers[0];
        assert!(layer_parts.len() > 1, "600 routes are cut into parts");
        let laid_over =
            crate::api::join(layer, layer_parts.iter().rev()).expect("the layer is whole");
        let joined = crate::api::join(name, l.parts.iter().rev()).expect("the parts are whole");
        assert_eq!(
            joined.layers,
            std::slice::from_ref(layer),
            "the first part names the layer"
        );
        let laid = joined
            .lay(|n| (n == layer).then_some(&laid_over))
            .expect("the layer is read");
        assert_eq!(
            items(&laid.rendered),
            items(&whole.rendered),
            "{name}: the same items"
        );
        assert_eq!(
            (
                &laid.rendered.table_hard_sync,
                &laid.probes,
                laid.rollback_seconds
            ),
            (
                &whole.rendered.table_hard_sync,
                &whole.probes,
                whole.rollback_seconds
            ),
        );
        // Below the layer size, a rendering is stored as before layers.
        let flat = layout(
            name,
            &Rendering::of(whole, usize::MAX, &mut BTreeMap::new()),
            max,
        );
        assert!(flat.layers.is_empty());
        assert_eq!(flat.parts, super::parts(name, whole, &[], max));
    }
    assert_eq!(layer_names.len(), 1, "both renderings name the same layer");
}

/// How a rendering is stored: its own parts (the first names the layers) and its
/// layers, each by name with its parts.
#[derive(Debug, Clone, PartialEq)]
struct Layout {
    parts: Vec<NodeNetworkRenderingSpec>,
    layers: Vec<(String, Vec<NodeNetworkRenderingSpec>)>,
}

/// Rendering `name` as it is stored: each of its layers under the layer's name (the
/// same items in two renderings make one layer); its other items, the probes,
/// `rollbackSeconds` and hard-synced tables in its own parts, the first naming the
/// layers. Every object is at most `max` bytes ([`parts`]). Joined and laid
/// ([`crate::api::Joined::lay`]), it has the rendering's items: the layers' first, each
/// in the order the rendering has them.
fn layout(name: &str, rendering: &Rendering, max: usize) -> Layout {
    let names: Vec<String> = rendering.layers.iter().map(|(n, _)| n.clone()).collect();
    Layout {
        parts: parts(name, &rendering.own, &names, max),
        layers: rendering
            .layers
            .iter()
            .map(|(layer, items)| (layer.clone(), layer_parts(layer, items, max)))
            .collect(),
    }
}
