//! The routing job: ClusterConfig + NodeConfigs + Nodes → one NodeNetworkConfig per
//! node (docs/architecture.md, node agent model). This module is pure: the merge policy of each
//! object, the revision of a rendering, which nodes an invalid policy holds. The
//! controller ([`controller`]) is the only part that awaits.

pub(crate) mod controller;
pub(crate) mod fleet;
mod metrics;
mod publish;
pub(crate) mod rollout;
mod send;
pub(crate) mod shared;
mod status;
pub(crate) mod writes;

use status::add_conflicts;
pub(crate) use status::{PolicyFacts, policy_status};

use std::collections::{BTreeMap, BTreeSet, HashMap};

use netpolicy_core::{
    merge::{Engine, NodeOutcome, Policy, Source, SourceKind, with_node_name},
    render::{RenderedSpec, SourceRef, SourcedSpec},
    selector::{Labels, Selector},
    spec::{AddressSpec, RouteSpec, RuleSpec},
};

use crate::{
    api::{CLUSTER_CONFIG_NAME, ClusterConfig, NodeConfig, NodeNetworkConfigSpec},
    k8s::InputError,
};

/// A node's rendering with the items other jobs need on it ([`crate::k8s::JobItems`]: a
/// Hetzner RoutedIP's address on its holder, return routing of a floating address),
/// each with its source (`RoutedIP/<name>`, `FloatingIP/<namespace>/<name>`). An item
/// the policies already give gains the source; a rule or route whose identity the
/// policies (or another job item) hold with other content is left out and told in the
/// returned list (the policies win). Addresses stay sorted by link and address; job
/// rules and routes follow the policies' own.
pub(crate) fn with_job_items(
    spec: &RenderedSpec,
    extra: &crate::k8s::JobItems,
) -> (RenderedSpec, Vec<String>) {
    let mut out = spec.clone();
    let mut skipped = Vec::new();
    fn join<T: PartialEq + Clone>(
        list: &mut Vec<SourcedSpec<T>>,
        item: &T,
        source: &SourceRef,
        same_identity: impl Fn(&T) -> bool,
    ) -> Result<(), ()> {
        if let Some(a) = list.iter_mut().find(|a| a.item == *item) {
            if !a.sources.contains(source) {
                a.sources.push(source.clone());
                a.sources.sort();
            }
            return Ok(());
        }
        if list.iter().any(|a| same_identity(&a.item)) {
            return Err(());
        }
        list.push(SourcedSpec {
            item: item.clone(),
            sources: vec![source.clone()],
        });
        Ok(())
    }
    for (item, source) in &extra.addresses {
        let _ = join(&mut out.addresses, item, source, |_| false);
    }
    let rule_key = |r: &RuleSpec| {
        netpolicy_core::spec::RoutingSpec {
            rules: vec![r.clone()],
            ..Default::default()
        }
        .validate("rule")
        .ok()
        .map(|c| c.rules[0].key.clone())
    };
    let route_key = |r: &RouteSpec| {
        netpolicy_core::spec::RoutingSpec {
            routes: vec![r.clone()],
            ..Default::default()
        }
        .validate("route")
        .ok()
        .map(|c| c.routes[0].key())
    };
    // The identities the node holds, read once (each a single-item validation), and
    // grown by the job items joined.
    let mut held_rules: BTreeSet<_> = if extra.rules.is_empty() {
        BTreeSet::new()
    } else {
        out.rules.iter().filter_map(|r| rule_key(&r.item)).collect()
    };
    let mut held_routes: BTreeSet<_> = if extra.routes.is_empty() {
        BTreeSet::new()
    } else {
        out.routes
            .iter()
            .filter_map(|r| route_key(&r.item))
            .collect()
    };
    for (item, source) in &extra.rules {
        let key = rule_key(item);
        let taken = key.as_ref().is_some_and(|k| held_rules.contains(k));
        if join(&mut out.rules, item, source, |_| taken).is_ok() {
            held_rules.extend(key);
        } else {
            skipped.push(format!(
                "{}/{}: rule priority {} from {} left out: a policy holds that rule with other content",
                source.kind,
                source.name,
                item.priority,
                item.from.as_deref().unwrap_or("all")
            ));
        }
    }
    for (item, source) in &extra.routes {
        let key = route_key(item);
        let taken = key.as_ref().is_some_and(|k| held_routes.contains(k));
        if join(&mut out.routes, item, source, |_| taken).is_ok() {
            held_routes.extend(key);
        } else {
            skipped.push(format!(
                "{}/{}: route {} table {} left out: that route is held with other content",
                source.kind,
                source.name,
                item.to,
                item.table.unwrap_or(254)
            ));
        }
    }
    let key = |a: &SourcedSpec<AddressSpec>| {
        (
            a.item.dev.clone(),
            a.item.address.split_once('/').and_then(|(ip, len)| {
                Some((
                    ip.parse::<std::net::IpAddr>().ok()?,
                    len.parse::<u8>().ok()?,
                ))
            }),
            a.item.address.clone(),
        )
    };
    out.addresses.sort_by_key(key);
    (out, skipped)
}

/// The NodeNetworkConfig the operator applies for `node` (owned by its Node, uid
/// `node_uid`): one definition for the write and for the size check (`plan` measures
/// the same object).
pub(crate) fn node_object(
    node: &str,
    node_uid: &str,
    spec: &NodeNetworkConfigSpec,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "netpolicy.io/v1alpha1",
        "kind": "NodeNetworkConfig",
        "metadata": {
            "name": node,
            "labels": {crate::k8s::MANAGED_BY.0: crate::k8s::MANAGED_BY.1},
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Node",
                "name": node,
                "uid": node_uid,
            }],
        },
        "spec": spec,
    })
}

/// The policies that contribute the most items to `spec`, most first, at most `n`:
/// `NodeConfig/big (50000 items)`. What a person trims when a NodeNetworkConfig is too
/// large to store.
pub(crate) fn largest_contributors(spec: &RenderedSpec, n: usize) -> Vec<String> {
    let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
    let sources = spec
        .vlans
        .iter()
        .map(|i| &i.sources)
        .chain(spec.routes.iter().map(|i| &i.sources))
        .chain(spec.addresses.iter().map(|i| &i.sources))
        .chain(spec.rules.iter().map(|i| &i.sources));
    for s in sources.flatten() {
        *count.entry((s.kind.clone(), s.name.clone())).or_default() += 1;
    }
    let mut v: Vec<((String, String), usize)> = count.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter()
        .take(n)
        .map(|((kind, name), c)| format!("{kind}/{name} ({c} items)"))
        .collect()
}

/// The size of an object as sent (bytes of JSON): what `--max-object-bytes` limits.
pub(crate) fn object_bytes(o: &serde_json::Value) -> usize {
    serde_json::to_vec(o).map_or(0, |v| v.len())
}

/// The NodeNetworkConfig spec of a node: its rendering, its probes and
/// `rollbackSeconds`, and the revision of all that (without probes and a rollback
/// setting the revision is [`revision`]'s, as before probes existed).
pub(crate) fn node_spec(
    rendered: RenderedSpec,
    probes: Vec<crate::api::ProbeSpec>,
    rollback_seconds: Option<u32>,
) -> NodeNetworkConfigSpec {
    let revision = if probes.is_empty() && rollback_seconds.is_none() {
        revision(&rendered)
    } else {
        let text =
            serde_json::to_string(&(&rendered, &probes, rollback_seconds)).unwrap_or_default();
        format!("{:016x}", netpolicy_core::hash::fnv1a(&[&text]))
    };
    NodeNetworkConfigSpec {
        revision,
        rendered,
        probes,
        rollback_seconds,
        left_behind: RenderedSpec::default(),
        shared: false,
    }
}

/// The items a node keeps after the ClusterConfig or NodeConfig that asked for them was
/// deleted (`--node-cleanup-on-deletion=false`): those `previous` listed as left
/// behind, and those it rendered whose every source is a deleted policy, minus any
/// `next` renders again (by identity: desired again, netpolicy's again). Items of other
/// sources (RoutedIPs, trenches) and of policies that still exist (edited) are removed
/// as always.
pub(crate) fn left_behind(
    previous: &NodeNetworkConfigSpec,
    next: &RenderedSpec,
    exists: impl Fn(&SourceRef) -> bool,
) -> RenderedSpec {
    let gone = |sources: &[SourceRef]| {
        !sources.is_empty()
            && sources
                .iter()
                .all(|s| matches!(s.kind.as_str(), "ClusterConfig" | "NodeConfig") && !exists(s))
    };
    fn keep<T: Clone, K: Ord>(
        left: &[SourcedSpec<T>],
        rendered: &[SourcedSpec<T>],
        next: &[SourcedSpec<T>],
        gone: &dyn Fn(&[SourceRef]) -> bool,
        id: impl Fn(&T) -> K,
    ) -> Vec<SourcedSpec<T>> {
        let desired: BTreeSet<K> = next.iter().map(|i| id(&i.item)).collect();
        let mut seen = BTreeSet::new();
        left.iter()
            .chain(rendered.iter().filter(|i| gone(&i.sources)))
            .filter(|i| !desired.contains(&id(&i.item)) && seen.insert(id(&i.item)))
            .cloned()
            .collect()
    }
    let (l, r) = (&previous.left_behind, &previous.rendered);
    RenderedSpec {
        vlans: keep(&l.vlans, &r.vlans, &next.vlans, &gone, |v| {
            (v.link.clone(), v.id)
        }),
        routes: keep(&l.routes, &r.routes, &next.routes, &gone, |x| {
            (x.table.unwrap_or(254), x.to.clone(), x.metric.unwrap_or(0))
        }),
        addresses: keep(&l.addresses, &r.addresses, &next.addresses, &gone, |a| {
            (a.dev.clone(), a.address.clone())
        }),
        // A rule's identity is its selector and priority, not where it points.
        rules: keep(&l.rules, &r.rules, &next.rules, &gone, |x| {
            let mut k = x.clone();
            k.table = None;
            k.action = None;
            serde_json::to_string(&k).unwrap_or_default()
        }),
        table_hard_sync: Vec::new(),
    }
}

/// `spec` with `left` as its left-behind items (and a revision that covers them).
pub(crate) fn with_left_behind(
    spec: &NodeNetworkConfigSpec,
    left: RenderedSpec,
) -> NodeNetworkConfigSpec {
    let mut out = spec.clone();
    if left.vlans.is_empty()
        && left.routes.is_empty()
        && left.addresses.is_empty()
        && left.rules.is_empty()
    {
        return out;
    }
    let text = serde_json::to_string(&left).unwrap_or_default();
    out.revision = format!(
        "{:016x}",
        netpolicy_core::hash::fnv1a(&[&spec.revision, &text])
    );
    out.left_behind = left;
    out
}

/// A stable short hash of the rendered spec: the NodeNetworkConfig's `revision`.
pub(crate) fn revision(spec: &RenderedSpec) -> String {
    let text = serde_json::to_string(spec).unwrap_or_default();
    format!("{:016x}", netpolicy_core::hash::fnv1a(&[&text]))
}

/// The first NodeConfig of `names` that an item of `spec` came from: a node whose
/// current rendering carries items of a NodeConfig whose selector became invalid keeps
/// that rendering (its last good config).
pub(crate) fn carried_from<'a>(
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
pub(crate) fn cluster_config_policy(
    cc: &ClusterConfig,
    errors: &mut Vec<InputError>,
) -> Option<Policy> {
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
    let before = errors.len();
    rollout::settings(
        "ClusterConfig",
        &name,
        cc.spec.rollout.as_ref(),
        &cc.spec.probes,
        errors,
    );
    let rollout_ok = errors.len() == before;
    Some(match cc.spec.routing.validate("spec") {
        Ok(cfg) if rollout_ok => Policy::cluster(&name, cfg),
        Ok(_) => Policy::invalid(Source::cluster(&name), 0, Selector::everything()),
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
pub(crate) fn node_config_policy(nc: &NodeConfig, errors: &mut Vec<InputError>) -> Policy {
    let name = nc.metadata.name.clone().unwrap_or_default();
    let selector = nc.spec.node_selector.validate("spec.nodeSelector");
    let routing = nc.spec.routing.validate("spec");
    let before = errors.len();
    rollout::settings(
        "NodeConfig",
        &name,
        nc.spec.rollout.as_ref(),
        &nc.spec.probes,
        errors,
    );
    let rollout_ok = errors.len() == before;
    match (selector, routing) {
        (Ok(sel), Ok(cfg)) if rollout_ok => Policy::node_config(&name, nc.spec.priority, sel, cfg),
        (Ok(sel), Ok(_)) => Policy::invalid(Source::node_config(&name), nc.spec.priority, sel),
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

/// The routing job's memory between passes: netpolicy-core's [`Engine`], brought up to
/// date object by object, so a change costs what it touches (the nodes a policy
/// selects, one node's labels), not a merge of the whole cluster.
///
/// Each call returns the nodes whose outcome changed: the nodes whose
/// NodeNetworkConfig may need a write. A node seen for the first time is reported too
/// (it needs its first NodeNetworkConfig, even an empty one).
#[derive(Debug, Default)]
pub(crate) struct Routing {
    engine: Engine,
    /// Per policy (`Kind/name`): what it was built from and what was wrong with it.
    policies: HashMap<String, PolicyEntry>,
    /// Nodes whose outcome is Held (the status pass reads conflicts from these only).
    held: BTreeSet<String>,
    /// The traffic domains' per-node policies in the engine.
    traffic: BTreeSet<Source>,
}

#[derive(Debug)]
struct PolicyEntry {
    /// `uid/generation` of the object it was built from.
    fingerprint: String,
    /// Validation problems.
    errors: Vec<InputError>,
    /// A NodeConfig whose selector is invalid (it selects nothing).
    unselectable: bool,
    /// Its rollout settings and probes.
    rollout: rollout::Rollout,
}

impl Routing {
    /// No nodes, no policies.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Brings ClusterConfig `name` in (`None`: it is gone). Returns the nodes whose
    /// outcome changed; an unchanged object (same uid and generation) costs nothing.
    pub(crate) fn cluster_config(&mut self, name: &str, cc: Option<&ClusterConfig>) -> Vec<String> {
        let key = format!("ClusterConfig/{name}");
        let source = Source::cluster(name);
        let Some(cc) = cc else {
            self.policies.remove(&key);
            let changed = self.engine.remove_policy(&source);
            return self.note(changed);
        };
        let fingerprint = fingerprint(&cc.metadata);
        if self
            .policies
            .get(&key)
            .is_some_and(|e| e.fingerprint == fingerprint)
        {
            return Vec::new();
        }
        let mut errors = Vec::new();
        let policy = cluster_config_policy(cc, &mut errors);
        let rollout = rollout::settings(
            "ClusterConfig",
            name,
            cc.spec.rollout.as_ref(),
            &cc.spec.probes,
            &mut Vec::new(),
        );
        let probes_changed = self.probes_changed(&key, &rollout);
        self.policies.insert(
            key.clone(),
            PolicyEntry {
                fingerprint,
                errors,
                unselectable: false,
                rollout,
            },
        );
        let changed = match policy {
            Some(p) => self.engine.upsert_policy(p),
            None => self.engine.remove_policy(&source),
        };
        let changed = self.note(changed);
        self.with_members(changed, probes_changed.then_some(&key))
    }

    /// Whether policy `key` is known with other probes or `rollbackSeconds` than
    /// `rollout`: part of what its nodes apply (their NodeNetworkConfig's revision), so a
    /// change of them alone reaches every node it selects (and resumes a halted rollout).
    fn probes_changed(&self, key: &str, rollout: &rollout::Rollout) -> bool {
        self.policies.get(key).is_some_and(|e| {
            e.rollout.probes != rollout.probes
                || e.rollout.rollback_seconds != rollout.rollback_seconds
        })
    }

    /// `changed`, plus every node policy `key` selects when there is one.
    fn with_members(&self, mut changed: Vec<String>, key: Option<&String>) -> Vec<String> {
        if let Some(key) = key {
            changed.extend(self.members(key));
            changed.sort();
            changed.dedup();
        }
        changed
    }

    /// Brings NodeConfig `name` in (`None`: it is gone). As [`Routing::cluster_config`].
    pub(crate) fn node_config(&mut self, name: &str, nc: Option<&NodeConfig>) -> Vec<String> {
        let key = format!("NodeConfig/{name}");
        let Some(nc) = nc else {
            self.policies.remove(&key);
            let changed = self.engine.remove_policy(&Source::node_config(name));
            return self.note(changed);
        };
        let fingerprint = fingerprint(&nc.metadata);
        if self
            .policies
            .get(&key)
            .is_some_and(|e| e.fingerprint == fingerprint)
        {
            return Vec::new();
        }
        let mut errors = Vec::new();
        let policy = node_config_policy(nc, &mut errors);
        let unselectable = nc.spec.node_selector.validate("spec.nodeSelector").is_err();
        let rollout = rollout::settings(
            "NodeConfig",
            name,
            nc.spec.rollout.as_ref(),
            &nc.spec.probes,
            &mut Vec::new(),
        );
        let probes_changed = self.probes_changed(&key, &rollout);
        self.policies.insert(
            key.clone(),
            PolicyEntry {
                fingerprint,
                errors,
                unselectable,
                rollout,
            },
        );
        let changed = self.engine.upsert_policy(policy);
        let changed = self.note(changed);
        self.with_members(changed, probes_changed.then_some(&key))
    }

    /// Brings Node `name` in with its labels (`None`: it is gone). Returns the nodes
    /// whose outcome changed (this one, or none); a new node is always returned.
    pub(crate) fn node(&mut self, name: &str, labels: Option<&Labels>) -> Vec<String> {
        let Some(labels) = labels else {
            self.engine.remove_node(name);
            self.held.remove(name);
            return Vec::new();
        };
        let new = !self.engine.has_node(name);
        // Per-node policies (a trench's) select the node by its name. The engine
        // compares: the same labels again change nothing.
        let labels = with_node_name(name, labels);
        let mut changed = self.engine.upsert_node(name, labels);
        if new && changed.is_empty() {
            changed.push(name.into());
        }
        self.note(changed)
    }

    /// Brings the traffic domains' policies in (all of them, by `namespace/name`, from
    /// [`crate::trench::policies`]): new and changed ones are upserted, those no longer
    /// given removed. Returns the nodes whose outcome changed; unchanged policies cost a
    /// comparison each.
    pub(crate) fn traffic(&mut self, policies: BTreeMap<String, Vec<Policy>>) -> Vec<String> {
        let mut changed = Vec::new();
        let mut now: BTreeSet<Source> = BTreeSet::new();
        for ps in policies.into_values() {
            for p in ps {
                now.insert(p.source().clone());
                changed.extend(self.engine.upsert_policy(p));
            }
        }
        let gone: Vec<Source> = self.traffic.difference(&now).cloned().collect();
        for s in gone {
            changed.extend(self.engine.remove_policy(&s));
        }
        self.traffic = now;
        changed.sort();
        changed.dedup();
        self.note(changed)
    }

    fn note(&mut self, changed: netpolicy_core::merge::Changed) -> Vec<String> {
        changed
            .into_iter()
            .map(|n| {
                let n = n.to_string();
                if matches!(self.engine.outcome(&n), Some(NodeOutcome::Held(_))) {
                    self.held.insert(n.clone());
                } else {
                    self.held.remove(&n);
                }
                n
            })
            .collect()
    }

    /// The ClusterConfig and NodeConfig that select `node` (`Kind/name`, sorted): the
    /// policies whose rollout budgets gate its changes.
    pub(crate) fn policies_of(&self, node: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .engine
            .policies_for(node)
            .into_iter()
            .map(Policy::source)
            .filter(|s| s.kind != SourceKind::Trench)
            .map(ToString::to_string)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The nodes policy `Kind/name` selects.
    pub(crate) fn members(&self, key: &str) -> Vec<String> {
        let source = match key.split_once('/') {
            Some(("ClusterConfig", n)) => Source::cluster(n),
            Some(("NodeConfig", n)) => Source::node_config(n),
            _ => return Vec::new(),
        };
        self.engine
            .selected(&source)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// The rollout settings of policy `Kind/name` (defaults when unknown).
    pub(crate) fn rollout(&self, key: &str) -> rollout::Rollout {
        self.policies
            .get(key)
            .map(|e| e.rollout.clone())
            .unwrap_or_default()
    }

    /// The probes and `rollbackSeconds` a node's NodeNetworkConfig carries.
    pub(crate) fn node_probes(&self, node: &str) -> (Vec<crate::api::ProbeSpec>, Option<u32>) {
        let keys = self.policies_of(node);
        let entries: Vec<&rollout::Rollout> = keys
            .iter()
            .filter_map(|k| self.policies.get(k).map(|e| &e.rollout))
            .collect();
        rollout::node_probes(entries)
    }

    /// The merge of exactly the policies `sources` (those the engine knows), as the nodes
    /// they alone select would get it.
    pub(crate) fn merge_of(&self, sources: &[Source]) -> NodeOutcome {
        netpolicy_core::merge::merge(sources.iter().filter_map(|s| self.engine.policy(s)))
    }

    /// The merge outcome of a node, when the node is known.
    pub(crate) fn outcome(&self, node: &str) -> Option<&NodeOutcome> {
        self.engine.outcome(node)
    }

    /// Every known node, sorted.
    pub(crate) fn nodes(&self) -> Vec<&str> {
        self.engine.outcomes().into_keys().collect()
    }

    /// The names of the policies brought in (`Kind/name`), sorted.
    pub(crate) fn policy_keys(&self) -> BTreeSet<&str> {
        self.policies.keys().map(String::as_str).collect()
    }

    /// NodeConfigs whose selector is invalid (they select nothing; the nodes that still
    /// carry their items keep their last good config, see [`carried_from`]).
    pub(crate) fn unselectable(&self) -> BTreeSet<String> {
        self.policies
            .iter()
            .filter(|(_, e)| e.unselectable)
            .filter_map(|(k, _)| k.strip_prefix("NodeConfig/").map(str::to_owned))
            .collect()
    }

    /// Problems of the policy `Kind/name`.
    pub(crate) fn errors(&self, key: &str) -> &[InputError] {
        self.policies.get(key).map_or(&[], |e| &e.errors)
    }

    /// What the status pass reports about every policy brought in: the nodes it selects
    /// (from the engine's label index), the conflicts it is part of (from the held
    /// nodes only), its problems.
    pub(crate) fn facts(&self) -> BTreeMap<String, PolicyFacts> {
        let mut out: BTreeMap<String, PolicyFacts> = BTreeMap::new();
        for (key, entry) in &self.policies {
            let f = out.entry(key.clone()).or_default();
            f.problems = entry
                .errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect();
        }
        for p in self.engine.policies() {
            // A trench has one policy per node under one key: their nodes add up.
            out.entry(p.source().to_string())
                .or_default()
                .matched
                .extend(
                    self.engine
                        .selected(p.source())
                        .into_iter()
                        .map(str::to_owned),
                );
        }
        let held = self
            .held
            .iter()
            .filter_map(|n| Some((n.as_str(), self.engine.outcome(n)?)));
        add_conflicts(&mut out, held);
        out
    }
}

/// `uid/generation`: what the routing job reads of a policy object changes only with
/// its generation.
fn fingerprint(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.uid.as_deref().unwrap_or_default(),
        m.generation.unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use crate::api::{PolicyConflict, PolicyStatus, conditions::policy};

    #[test]
    fn return_routing_joins_the_policies_and_yields_to_a_different_route_of_theirs() {
        let src = |kind: &str, name: &str| SourceRef {
            kind: kind.into(),
            name: name.into(),
        };
        let route = |via: &str| RouteSpec {
            to: "0.0.0.0/0".into(),
            via: Some(via.into()),
            dev: Some("eth1".into()),
            table: Some(400),
            ..RouteSpec::default()
        };
        let rule = RuleSpec {
            priority: 10_000,
            from: Some("203.0.113.70/32".into()),
            table: Some(400),
            ..RuleSpec::default()
        };
        let policy = RenderedSpec {
            routes: vec![SourcedSpec {
                item: route("192.0.2.1"),
                sources: vec![src("NodeConfig", "uplinks")],
            }],
            ..RenderedSpec::default()
        };
        let fip = src("FloatingIP", "dmz/web");
        let extra = crate::k8s::JobItems {
            rules: vec![(rule.clone(), fip.clone())],
            routes: vec![(route("192.0.2.254"), fip.clone())],
            ..Default::default()
        };
        let (out, skipped) = with_job_items(&policy, &extra);
        assert_eq!(out.rules.len(), 1);
        assert_eq!(out.rules[0].sources, vec![fip.clone()]);
        // The policy's default route in table 400 stays; the job's is left out, said.
        assert_eq!(out.routes.len(), 1);
        assert_eq!(out.routes[0].item.via.as_deref(), Some("192.0.2.1"));
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(skipped[0].starts_with("FloatingIP/dmz/web: route 0.0.0.0/0 table 400"));
        // Two ranges' routes for one table on one node: the first joined wins.
        let other = src("FloatingIP", "dmz/mail");
        let two = crate::k8s::JobItems {
            routes: vec![
                (route("192.0.2.254"), fip.clone()),
                (route("192.0.2.253"), other),
            ],
            ..Default::default()
        };
        let (out, skipped) = with_job_items(&RenderedSpec::default(), &two);
        assert_eq!(out.routes.len(), 1);
        assert_eq!(out.routes[0].item.via.as_deref(), Some("192.0.2.254"));
        assert!(skipped[0].starts_with("FloatingIP/dmz/mail"), "{skipped:?}");
        // The same route as the policy's: one item, both sources.
        let same = crate::k8s::JobItems {
            routes: vec![(route("192.0.2.1"), fip.clone())],
            ..Default::default()
        };
        let (out, skipped) = with_job_items(&policy, &same);
        assert!(skipped.is_empty());
        assert_eq!(
            out.routes[0].sources,
            vec![src("FloatingIP", "dmz/web"), src("NodeConfig", "uplinks")]
        );
    }

    #[test]
    fn job_addresses_join_the_policies_addresses_sorted_with_their_sources() {
        let item = |dev: &str, address: &str| AddressSpec {
            dev: dev.into(),
            address: address.into(),
            ..Default::default()
        };
        let spec = RenderedSpec {
            addresses: vec![SourcedSpec {
                item: item("lo", "203.0.113.9/32"),
                sources: vec![SourceRef {
                    kind: "NodeConfig".into(),
                    name: "vip".into(),
                }],
            }],
            ..RenderedSpec::default()
        };
        let rip = |name: &str| SourceRef {
            kind: "RoutedIP".into(),
            name: name.into(),
        };
        let (out, skipped) = with_job_items(
            &spec,
            &crate::k8s::JobItems {
                addresses: vec![
                    (item("lo", "203.0.113.9/32"), rip("web")),
                    (item("lo", "203.0.113.10/32"), rip("mail")),
                    (item("eth0", "198.51.100.4/32"), rip("dns")),
                ],
                ..Default::default()
            },
        );
        assert!(skipped.is_empty());
        let got: Vec<(String, Vec<String>)> = out
            .addresses
            .iter()
            .map(|a| {
                (
                    format!("{} {}", a.item.dev, a.item.address),
                    a.sources
                        .iter()
                        .map(|s| format!("{}/{}", s.kind, s.name))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "eth0 198.51.100.4/32".to_owned(),
                    vec!["RoutedIP/dns".to_owned()]
                ),
                (
                    "lo 203.0.113.9/32".to_owned(),
                    vec!["NodeConfig/vip".to_owned(), "RoutedIP/web".to_owned()]
                ),
                (
                    "lo 203.0.113.10/32".to_owned(),
                    vec!["RoutedIP/mail".to_owned()]
                ),
            ]
        );
        assert_ne!(revision(&out), revision(&spec));
    }

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

    fn at(t: &str) -> Time {
        Time(t.parse().unwrap())
    }

    fn conflict(node: &str) -> PolicyConflict {
        PolicyConflict {
            node: node.into(),
            item: "route 10.20.0.0/16 table 254".into(),
            sources: vec!["NodeConfig/a".into(), "NodeConfig/b".into()],
        }
    }

    #[test]
    fn a_policy_status_is_stable_until_something_changes() {
        let facts = PolicyFacts {
            matched: ["n1".to_owned(), "n2".to_owned()].into(),
            ..PolicyFacts::default()
        };
        let t0 = at("2026-01-01T00:00:00Z");
        let s1 = policy_status(&PolicyStatus::default(), Some(1), &facts, 1, &t0);
        assert_eq!((s1.matched_nodes, s1.applied_nodes), (2, 1));
        assert_eq!(s1.conditions[0].reason, policy::APPLYING);
        assert_eq!(s1.conditions[0].message, "applied on 1 of 2 node(s)");
        // Nothing new: the same status, whatever the time.
        let again = policy_status(&s1, Some(1), &facts, 1, &at("2026-01-01T01:00:00Z"));
        assert_eq!(again, s1);
        // Both applied: Ready flips, its time moves; Conflict's does not.
        let t2 = at("2026-01-01T02:00:00Z");
        let s2 = policy_status(&s1, Some(1), &facts, 2, &t2);
        assert_eq!(s2.conditions[0].status, "True");
        assert_eq!(s2.conditions[0].last_transition_time, t2);
        assert_eq!(s2.conditions[1].last_transition_time, t0);
    }

    #[test]
    fn conflicts_name_node_item_and_both_sources_and_new_ones_are_found() {
        let facts = PolicyFacts {
            matched: ["n1".to_owned()].into(),
            conflicts: vec![conflict("n1")],
            ..PolicyFacts::default()
        };
        let now = at("2026-01-01T00:00:00Z");
        let s = policy_status(&PolicyStatus::default(), Some(1), &facts, 0, &now);
        assert_eq!(s.conditions[0].reason, policy::CONFLICT);
        assert_eq!(s.conditions[1].status, "True");
        assert_eq!(
            s.conditions[1].message,
            "1 conflict(s): node n1: route 10.20.0.0/16 table 254 is defined differently by \
             NodeConfig/a and NodeConfig/b"
        );
        assert_eq!(status::new_conflicts(&PolicyStatus::default(), &s).len(), 1);
        assert!(status::new_conflicts(&s, &s).is_empty());
    }

    #[test]
    fn only_items_of_deleted_policies_are_left_behind_until_desired_again() {
        let route = |to: &str, kind: &str, name: &str| SourcedSpec {
            item: serde_json::from_value(serde_json::json!({"to": to, "via": "192.0.2.1"}))
                .unwrap(),
            sources: vec![SourceRef {
                kind: kind.into(),
                name: name.into(),
            }],
        };
        let mut previous = node_spec(RenderedSpec::default(), Vec::new(), None);
        previous.rendered.routes = vec![
            route("10.1.0.0/16", "NodeConfig", "deleted"),
            route("10.2.0.0/16", "NodeConfig", "edited"),
            route("10.3.0.0/16", "RoutedIP", "gone-rip"),
            route("10.4.0.0/16", "ClusterConfig", "default"),
        ];
        previous.left_behind.routes = vec![route("10.9.0.0/16", "NodeConfig", "older")];
        let exists = |s: &SourceRef| s.name == "edited";
        // Nothing rendered now.
        let left = left_behind(&previous, &RenderedSpec::default(), exists);
        let tos: Vec<&str> = left.routes.iter().map(|r| r.item.to.as_str()).collect();
        assert_eq!(
            tos,
            ["10.9.0.0/16", "10.1.0.0/16", "10.4.0.0/16"],
            "an edited policy's item and a RoutedIP's are removed as always"
        );
        // Desired again (same identity, another gateway): netpolicy's again.
        let next = RenderedSpec {
            routes: vec![SourcedSpec {
                item: serde_json::from_value(
                    serde_json::json!({"to": "10.9.0.0/16", "via": "192.0.2.9"}),
                )
                .unwrap(),
                sources: Vec::new(),
            }],
            ..RenderedSpec::default()
        };
        let left = left_behind(&previous, &next, exists);
        assert!(left.routes.iter().all(|r| r.item.to != "10.9.0.0/16"));
        // The revision covers the list; an empty list changes nothing.
        let spec = node_spec(next, Vec::new(), None);
        assert_eq!(with_left_behind(&spec, RenderedSpec::default()), spec);
        assert_ne!(with_left_behind(&spec, left).revision, spec.revision);
    }

    #[test]
    fn the_revision_follows_the_content() {
        let a = nnc(&[("NodeConfig", "a")]).rendered;
        let b = nnc(&[("NodeConfig", "b")]).rendered;
        assert_eq!(revision(&a), revision(&a.clone()));
        assert_ne!(revision(&a), revision(&b));
        assert_eq!(revision(&a).len(), 16);
    }

    /// A NodeConfig selecting `role=<role>` that routes 10.0.0.0/8 via `via`.
    fn node_config(
        name: &str,
        generation: i64,
        role: &str,
        via: &str,
        priority: i64,
    ) -> NodeConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "netpolicy.io/v1alpha1",
            "kind": "NodeConfig",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": generation},
            "spec": {
                "nodeSelector": {"matchLabels": {"role": role}},
                "priority": priority,
                "routes": [{"to": "10.0.0.0/8", "via": via}],
            },
        }))
        .unwrap()
    }

    /// The facts as a full recompute finds them: every selector against every node.
    fn brute_facts(
        ncs: &BTreeMap<String, NodeConfig>,
        nodes: &BTreeMap<String, Labels>,
    ) -> BTreeMap<String, PolicyFacts> {
        let mut errors = Vec::new();
        let policies: Vec<Policy> = ncs
            .values()
            .map(|nc| node_config_policy(nc, &mut errors))
            .collect();
        let engine = Engine::build(
            nodes.iter().map(|(n, l)| (n.clone(), l.clone())),
            policies.clone(),
        );
        let mut out: BTreeMap<String, PolicyFacts> = BTreeMap::new();
        for p in &policies {
            out.entry(p.source().to_string()).or_default().matched = nodes
                .iter()
                .filter(|(_, l)| p.selector().matches(l))
                .map(|(n, _)| n.clone())
                .collect();
        }
        add_conflicts(&mut out, engine.outcomes());
        out
    }

    #[test]
    fn incremental_routing_matches_a_full_recompute_and_reports_every_node_to_write() {
        // A fixed pseudo-random walk over a small universe: 6 nodes, 4 NodeConfigs, two
        // roles, two gateways, two priorities (equal priorities with different gateways
        // conflict).
        let mut seed: u64 = 0x5eed;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let mut routing = Routing::new();
        let mut ncs: BTreeMap<String, NodeConfig> = BTreeMap::new();
        let mut nodes: BTreeMap<String, Labels> = BTreeMap::new();
        let mut generation = 0;
        let mut before: BTreeMap<String, NodeOutcome> = BTreeMap::new();
        for step in 0..400 {
            generation += 1;
            let changed = match next(4) {
                0 => {
                    let name = format!("n{}", next(6));
                    let labels = Labels::from([(
                        "role".to_owned(),
                        ["a", "b"][next(2) as usize].to_owned(),
                    )]);
                    nodes.insert(name.clone(), labels.clone());
                    routing.node(&name, Some(&labels))
                }
                1 => {
                    let name = format!("n{}", next(6));
                    nodes.remove(&name);
                    routing.node(&name, None)
                }
                2 => {
                    let name = format!("nc{}", next(4));
                    let nc = node_config(
                        &name,
                        generation,
                        ["a", "b"][next(2) as usize],
                        ["10.1.0.1", "10.1.0.2"][next(2) as usize],
                        next(2) as i64,
                    );
                    ncs.insert(name.clone(), nc.clone());
                    routing.node_config(&name, Some(&nc))
                }
                _ => {
                    let name = format!("nc{}", next(4));
                    ncs.remove(&name);
                    routing.node_config(&name, None)
                }
            };
            let after: BTreeMap<String, NodeOutcome> = routing
                .nodes()
                .into_iter()
                .map(|n| (n.to_owned(), routing.outcome(n).unwrap().clone()))
                .collect();
            for (n, o) in &after {
                assert!(
                    before.get(n) == Some(o) || changed.contains(n),
                    "step {step}: {n} changed but was not reported"
                );
            }
            let want = brute_facts(&ncs, &nodes);
            let got = routing.facts();
            for (k, w) in &want {
                let g = got.get(k).cloned().unwrap_or_default();
                assert_eq!(g.matched, w.matched, "step {step}: {k} matched");
                assert_eq!(g.conflicts, w.conflicts, "step {step}: {k} conflicts");
            }
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                ncs.keys()
                    .map(|n| format!("NodeConfig/{n}"))
                    .collect::<Vec<_>>()
                    .iter()
                    .collect::<Vec<_>>(),
                "step {step}: policies known"
            );
            before = after;
        }
    }

    #[test]
    fn an_unchanged_policy_or_node_costs_nothing_and_a_new_node_is_reported() {
        let mut routing = Routing::new();
        let labels = Labels::from([("role".to_owned(), "a".to_owned())]);
        assert_eq!(routing.node("n1", Some(&labels)), ["n1"]);
        assert!(routing.node("n1", Some(&labels)).is_empty());
        let nc = node_config("edge", 1, "a", "10.1.0.1", 0);
        assert_eq!(routing.node_config("edge", Some(&nc)), ["n1"]);
        assert!(routing.node_config("edge", Some(&nc)).is_empty());
        assert_eq!(routing.node_config("edge", None), ["n1"]);
    }

    /// Issue 40: after a failed probe, fixing only the NodeConfig's `probes` never
    /// reached the node (the merge outcome was the same, so no node was re-rendered) and
    /// the rollout stayed halted. Probes and `rollbackSeconds` are part of what a node
    /// applies: a change of them alone re-renders every node the policy selects.
    #[test]
    fn a_change_of_probes_alone_reaches_every_node_the_policy_selects() {
        let mut routing = Routing::new();
        let labels = Labels::from([("role".to_owned(), "a".to_owned())]);
        routing.node("n1", Some(&labels));
        routing.node("n2", Some(&labels));
        let mut nc = node_config("edge", 1, "a", "10.1.0.1", 0);
        nc.spec.probes = vec![crate::api::ProbeSpec {
            ping: Some("192.0.2.99".into()),
            tcp: None,
        }];
        assert_eq!(routing.node_config("edge", Some(&nc)), ["n1", "n2"]);
        assert_eq!(routing.node_probes("n1").0, nc.spec.probes);
        // The fix: another probe target, nothing else.
        nc.metadata.generation = Some(2);
        nc.spec.probes[0].ping = Some("192.0.2.1".into());
        assert_eq!(routing.node_config("edge", Some(&nc)), ["n1", "n2"]);
        assert_eq!(
            routing.node_probes("n2").0[0].ping.as_deref(),
            Some("192.0.2.1")
        );
        // rollbackSeconds alone too; an unrelated change (same probes) reaches none.
        nc.metadata.generation = Some(3);
        nc.spec.rollout = Some(crate::api::RolloutSpec {
            max_unavailable: None,
            rollback_seconds: Some(60),
        });
        assert_eq!(routing.node_config("edge", Some(&nc)), ["n1", "n2"]);
        nc.metadata.generation = Some(4);
        nc.metadata.labels = Some([("team".to_owned(), "x".to_owned())].into());
        assert!(routing.node_config("edge", Some(&nc)).is_empty());
    }
}
