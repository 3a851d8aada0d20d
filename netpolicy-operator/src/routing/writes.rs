//! Which NodeNetworkConfigs a routing pass writes, with what, and which it deletes or
//! holds back: a pure function of the engine ([`Routing`]), what the cluster holds and
//! the limits. The controller only carries the result out.

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
};

use netpolicy_core::{
    merge::NodeOutcome,
    render::{RenderedSpec, SourceRef},
};
use tracing::{debug, warn};

use super::{
    Routing, carried_from,
    rollout::{self, NodeState},
};
use crate::{
    api::{NodeNetworkConfig, NodeNetworkConfigSpec, ProbeSpec},
    k8s::{JobItems, MANAGED_BY},
};

/// What [`node_writes`] reads of the cluster besides the engine.
pub(crate) struct Cluster<'a> {
    /// A node's NodeNetworkConfig as stored.
    pub(crate) existing: &'a dyn Fn(&str) -> Option<Arc<NodeNetworkConfig>>,
    /// A node's UID (the owner reference), empty when unknown.
    pub(crate) node_uid: &'a dyn Fn(&str) -> String,
    /// Whether the policy an item came from still exists (node cleanup off).
    pub(crate) policy_exists: &'a dyn Fn(&SourceRef) -> bool,
    /// What other jobs need on each node.
    pub(crate) job_items: &'a BTreeMap<String, JobItems>,
    /// Nodes whose object is shared (issue 68), with their spec: their own items only,
    /// written at once (their group's rendering rolls out through the fleet).
    pub(crate) own: &'a BTreeMap<String, std::sync::Arc<NodeNetworkConfigSpec>>,
}

/// The limits a pass writes under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `--max-object-bytes`.
    pub(crate) max_object_bytes: usize,
    /// `--node-cleanup-on-deletion`: false keeps deleted policies' items on the nodes.
    pub(crate) node_cleanup: bool,
}

/// What a pass does to NodeNetworkConfigs.
#[derive(Debug, Default)]
pub(crate) struct NodeWrites {
    /// Written, by node (created, updated or applied: [`verb`]): the object as JSON text
    /// (a tenth of a `serde_json::Value`'s memory; at a cluster-wide edit every node has
    /// one).
    pub(crate) apply: Vec<(String, Box<serde_json::value::RawValue>)>,
    /// Ours, whose node has no outcome any more (gone or selected by nothing).
    pub(crate) delete: Vec<String>,
    /// Nodes whose rendering is over the size limit (bytes, revision), as they stand
    /// after this pass.
    pub(crate) too_large: BTreeMap<String, (usize, String)>,
    /// Nodes whose change waits for its rollout wave.
    pub(crate) held_back: BTreeSet<String>,
}

/// The writes of the `dirty` nodes. `too_large` is what the last pass found over the
/// limit (a node is warned about once per size).
pub(crate) fn node_writes(
    routing: &Routing,
    dirty: &BTreeSet<String>,
    cluster: &Cluster<'_>,
    limits: Limits,
    too_large: &BTreeMap<String, (usize, String)>,
) -> NodeWrites {
    let mut out = NodeWrites {
        too_large: too_large.clone(),
        ..NodeWrites::default()
    };
    let unselectable = routing.unselectable();
    // Nodes with the same outcome (`LayeredConfig::memo_key`), probes and rollback
    // time share one rendering.
    let mut rendered: HashMap<Same, NodeNetworkConfigSpec> = HashMap::new();
    for node in dirty {
        let existing = (cluster.existing)(node);
        let Some(outcome) = routing.outcome(node) else {
            out.too_large.remove(node);
            let ours = existing.as_ref().is_some_and(|o| {
                o.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(MANAGED_BY.0))
                    .map(String::as_str)
                    == Some(MANAGED_BY.1)
            });
            if ours {
                out.delete.push(node.clone());
            }
            continue;
        };
        let cfg = match outcome {
            NodeOutcome::Rendered(cfg) => cfg,
            NodeOutcome::Held(problems) => {
                for p in problems.iter() {
                    warn!(node, "held at its last good config: {p}");
                }
                continue;
            }
        };
        if let Some(o) = &existing
            && let Some(held_by) = carried_from(&o.spec, &unselectable)
        {
            warn!(
                node,
                "held at its last good config: NodeConfig/{held_by} has an invalid nodeSelector"
            );
            continue;
        }
        let spec = match cluster.own.get(node) {
            Some(own) => Cow::Borrowed(&**own),
            None => spec_of(
                routing,
                node,
                cfg,
                cluster,
                limits,
                existing.as_deref(),
                &mut rendered,
            ),
        };
        if existing.as_ref().is_some_and(|o| o.spec == *spec) {
            out.too_large.remove(node);
            continue;
        }
        let Ok(obj) = serde_json::value::to_raw_value(&super::node_object(
            node,
            &(cluster.node_uid)(node),
            &spec,
        )) else {
            continue; // A Value always serializes.
        };
        // Larger than the API server stores: not sent (it would be refused with 413 on
        // every pass); the node keeps its last config and the policies that select it
        // say why.
        let bytes = obj.get().len();
        if bytes > limits.max_object_bytes {
            if out.too_large.get(node).map(|(b, _)| *b) != Some(bytes) {
                warn!(
                    node,
                    bytes,
                    limit = limits.max_object_bytes,
                    "NodeNetworkConfig too large: not written"
                );
            }
            out.too_large
                .insert(node.clone(), (bytes, spec.revision.clone()));
            continue;
        }
        out.too_large.remove(node);
        out.apply.push((node.clone(), obj));
    }
    out.held_back = held_back(routing, &out.apply, cluster);
    if !out.held_back.is_empty() {
        debug!(
            waiting = out.held_back.len(),
            "rollout: nodes wait for their wave"
        );
        out.apply.retain(|(n, _)| !out.held_back.contains(n));
    }
    out
}

/// What nodes sharing one rendering have in common.
type Same = ((usize, usize), Vec<ProbeSpec>, Option<u32>);

/// The spec `node` gets from its merged `cfg`: shared with the nodes of the same outcome
/// unless other jobs' items make it its own; with deleted policies' items kept when
/// node cleanup is off.
fn spec_of<'r>(
    routing: &Routing,
    node: &str,
    cfg: &netpolicy_core::merge::LayeredConfig,
    cluster: &Cluster<'_>,
    limits: Limits,
    existing: Option<&NodeNetworkConfig>,
    rendered: &'r mut HashMap<Same, NodeNetworkConfigSpec>,
) -> Cow<'r, NodeNetworkConfigSpec> {
    let (probes, rollback) = routing.node_probes(node);
    let spec = match cluster.job_items.get(node) {
        None => Cow::Borrowed(
            &*rendered
                .entry((cfg.memo_key(), probes.clone(), rollback))
                .or_insert_with(|| {
                    super::node_spec(RenderedSpec::from_config(cfg), probes, rollback)
                }),
        ),
        Some(extra) => {
            let (with, skipped) = super::with_job_items(&RenderedSpec::from_config(cfg), extra);
            for why in skipped {
                debug!(node, "{why}");
            }
            Cow::Owned(super::node_spec(with, probes, rollback))
        }
    };
    match existing.filter(|_| !limits.node_cleanup) {
        None => spec,
        Some(o) => {
            let left = super::left_behind(&o.spec, &spec.rendered, cluster.policy_exists);
            Cow::Owned(super::with_left_behind(&spec, left))
        }
    }
}

/// Safe rollout: a changed config reaches a node only when every policy that selects
/// it has room under its maxUnavailable (and is not halted by a Degraded node); the
/// others wait for a later pass (an agent reporting Applied wakes one). New nodes (no
/// NodeNetworkConfig yet) always go.
fn held_back(
    routing: &Routing,
    apply: &[(String, Box<serde_json::value::RawValue>)],
    cluster: &Cluster<'_>,
) -> BTreeSet<String> {
    let changed: Vec<(String, Vec<String>)> = apply
        .iter()
        .filter(|(node, _)| (cluster.existing)(node).is_some() && !cluster.own.contains_key(node))
        .map(|(node, _)| (node.clone(), routing.policies_of(node)))
        .collect();
    if changed.is_empty() {
        return BTreeSet::new();
    }
    let state = |n: &str| NodeState::of((cluster.existing)(n).as_deref());
    let (go, _) = rollout::gate(
        &changed,
        &|p| routing.members(p),
        &|p| routing.rollout(p),
        &state,
    );
    changed
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !go.contains(n))
        .map(str::to_owned)
        .collect()
}

/// How a NodeNetworkConfig of [`NodeWrites::apply`] is sent: by the verb that costs the
/// API server least for the same outcome. A create of one costs it about a quarter less
/// CPU than a server-side apply creating it, an update a tenth to a quarter less than an
/// apply of the change (benches/README.md, "What a write costs the API server, per
/// verb"), and at a cluster-wide edit every node has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    /// None is stored: a create.
    Create,
    /// Ours is stored, labelled and owned by its Node as we write it: an update of the
    /// stored object over its version with our spec; whoever's labels, annotations and
    /// finalizers it has are kept. The spec is ours whoever wrote it last, as an apply
    /// with `force` makes it.
    Update,
    /// Anything else (no label of ours, another owner, being deleted): a server-side
    /// apply, which sets our label and owner and takes the spec's fields.
    Apply,
}

/// The verb for a write over `existing` (as the cache holds it) of the node whose UID is
/// `node_uid`.
pub(crate) fn verb(existing: Option<&NodeNetworkConfig>, node_uid: &str) -> Verb {
    let Some(o) = existing else {
        return Verb::Create;
    };
    let meta = &o.metadata;
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY.0))
        .is_some_and(|v| v == MANAGED_BY.1);
    let owned = meta.owner_references.as_ref().is_some_and(|refs| {
        refs.iter().any(|r| {
            r.kind == "Node"
                && r.api_version == "v1"
                && meta.name.as_deref() == Some(r.name.as_str())
                && r.uid == node_uid
        })
    });
    if labelled && owned && meta.deletion_timestamp.is_none() {
        Verb::Update
    } else {
        Verb::Apply
    }
}

#[cfg(test)]
mod tests {
    use netpolicy_core::selector::Labels;

    use super::*;
    use crate::api::{NodeConfig, NodeNetworkConfigStatus};

    fn node_config(name: &str, via: &str, max_unavailable: Option<i32>) -> NodeConfig {
        let mut spec = serde_json::json!({
            "nodeSelector": {"matchLabels": {"role": "a"}},
            "routes": [{"to": "10.0.0.0/8", "via": via}],
        });
        if let Some(m) = max_unavailable {
            spec["rollout"] = serde_json::json!({"maxUnavailable": m});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "netpolicy.io/v1alpha1",
            "kind": "NodeConfig",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1},
            "spec": spec,
        }))
        .unwrap_or_default()
    }

    /// `n` nodes labelled `role: a`, selected by NodeConfig `edge` routing via `via`.
    fn routing(n: usize, via: &str, max_unavailable: Option<i32>) -> (Routing, BTreeSet<String>) {
        let mut routing = Routing::new();
        let labels = Labels::from([("role".to_owned(), "a".to_owned())]);
        let mut dirty = BTreeSet::new();
        for i in 1..=n {
            dirty.extend(routing.node(&format!("n{i}"), Some(&labels)));
        }
        dirty.extend(routing.node_config("edge", Some(&node_config("edge", via, max_unavailable))));
        (routing, dirty)
    }

    /// The NodeNetworkConfig a write carries, as the API server would store it, with
    /// its agent's report (`applied`: the revision it applied).
    fn stored(obj: &serde_json::value::RawValue, applied: Option<&str>) -> Arc<NodeNetworkConfig> {
        let mut nnc: NodeNetworkConfig = serde_json::from_str(obj.get()).unwrap_or_default();
        nnc.status = applied.map(|r| NodeNetworkConfigStatus {
            applied_revision: Some(r.to_owned()),
            ..NodeNetworkConfigStatus::default()
        });
        Arc::new(nnc)
    }

    fn plan(
        routing: &Routing,
        dirty: &BTreeSet<String>,
        existing: &BTreeMap<String, Arc<NodeNetworkConfig>>,
        max_object_bytes: usize,
    ) -> NodeWrites {
        let items = BTreeMap::new();
        node_writes(
            routing,
            dirty,
            &Cluster {
                existing: &|n| existing.get(n).cloned(),
                node_uid: &|n| format!("uid-{n}"),
                policy_exists: &|_| true,
                job_items: &items,
                own: &BTreeMap::new(),
            },
            Limits {
                max_object_bytes,
                node_cleanup: true,
            },
            &BTreeMap::new(),
        )
    }

    fn nodes(w: &[(String, Box<serde_json::value::RawValue>)]) -> Vec<&str> {
        w.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn the_verb_is_a_create_an_update_or_an_apply_by_what_is_stored() {
        let (routing, dirty) = routing(1, "10.1.0.1", None);
        let first = plan(&routing, &dirty, &BTreeMap::new(), 1_000_000);
        assert_eq!(verb(None, "uid-n1"), Verb::Create);
        let ours = stored(&first.apply[0].1, None);
        assert_eq!(verb(Some(&ours), "uid-n1"), Verb::Update);
        // The Node was made again under the same name: its new UID is not the owner.
        assert_eq!(verb(Some(&ours), "uid-other"), Verb::Apply);
        let mut unlabelled = (*ours).clone();
        unlabelled.metadata.labels = None;
        assert_eq!(verb(Some(&unlabelled), "uid-n1"), Verb::Apply);
        let mut relabelled = (*ours).clone();
        relabelled.metadata.labels = Some(BTreeMap::from([(
            MANAGED_BY.0.to_owned(),
            "someone-else".to_owned(),
        )]));
        assert_eq!(verb(Some(&relabelled), "uid-n1"), Verb::Apply);
        let mut unowned = (*ours).clone();
        unowned.metadata.owner_references = None;
        assert_eq!(verb(Some(&unowned), "uid-n1"), Verb::Apply);
        let mut going = (*ours).clone();
        going.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        assert_eq!(verb(Some(&going), "uid-n1"), Verb::Apply);
    }

    #[test]
    fn new_nodes_are_written_and_stored_ones_that_match_are_not() {
        let (routing, dirty) = routing(3, "10.1.0.1", None);
        let first = plan(&routing, &dirty, &BTreeMap::new(), 1_000_000);
        assert_eq!(nodes(&first.apply), ["n1", "n2", "n3"]);
        assert!(first.delete.is_empty() && first.held_back.is_empty());
        let written: serde_json::Value =
            serde_json::from_str(first.apply[0].1.get()).unwrap_or_default();
        assert_eq!(written["metadata"]["ownerReferences"][0]["uid"], "uid-n1");
        // Stored as written: the next pass writes nothing.
        let existing: BTreeMap<_, _> = first
            .apply
            .iter()
            .map(|(n, o)| (n.clone(), stored(o, None)))
            .collect();
        let again = plan(&routing, &dirty, &existing, 1_000_000);
        assert!(again.apply.is_empty(), "{:?}", nodes(&again.apply));
    }

    #[test]
    fn a_change_waits_for_its_rollout_wave_and_new_nodes_do_not() {
        let (routing, dirty) = routing(3, "10.1.0.1", Some(1));
        let first = plan(&routing, &dirty, &BTreeMap::new(), 1_000_000);
        // Every agent applied the first revision.
        let existing: BTreeMap<_, _> = first
            .apply
            .iter()
            .map(|(n, o)| {
                let v: serde_json::Value = serde_json::from_str(o.get()).unwrap_or_default();
                let rev = v["spec"]["revision"].as_str().map(str::to_owned);
                (n.clone(), stored(o, rev.as_deref()))
            })
            .collect();
        let mut routing = routing;
        let mut edited = node_config("edge", "10.1.0.2", Some(1));
        edited.metadata.generation = Some(2);
        let dirty = routing
            .node_config("edge", Some(&edited))
            .into_iter()
            .collect();
        let next = plan(&routing, &dirty, &existing, 1_000_000);
        assert_eq!(
            nodes(&next.apply),
            ["n1"],
            "maxUnavailable 1: one node at a time"
        );
        assert_eq!(
            next.held_back,
            BTreeSet::from(["n2".to_owned(), "n3".to_owned()])
        );
    }

    #[test]
    fn a_rendering_over_the_limit_is_not_written_and_a_node_selected_by_nothing_loses_ours() {
        let (routing, dirty) = routing(1, "10.1.0.1", None);
        let small = plan(&routing, &dirty, &BTreeMap::new(), 100);
        assert!(small.apply.is_empty());
        assert!(small.too_large.get("n1").is_some_and(|(b, _)| *b > 100));
        // n9 has ours but no outcome (its node is unknown to the engine): deleted;
        // someone else's object of that name is left alone.
        let written = plan(&routing, &dirty, &BTreeMap::new(), 1_000_000);
        let ours = stored(&written.apply[0].1, None);
        let mut theirs = (*ours).clone();
        theirs.metadata.labels = None;
        let existing = BTreeMap::from([
            ("n9".to_owned(), Arc::clone(&ours)),
            ("n8".to_owned(), Arc::new(theirs)),
        ]);
        let gone = BTreeSet::from(["n8".to_owned(), "n9".to_owned()]);
        let w = plan(&routing, &gone, &existing, 1_000_000);
        assert_eq!(w.delete, ["n9"]);
        assert!(w.apply.is_empty());
    }
}
