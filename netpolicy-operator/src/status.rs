//! `netpolicy status`: what the cluster says about one node or one policy, read-only,
//! with the user's kubeconfig (as kubectl reads it).
//!
//! - A node: its NodeNetworkConfig's revision and conditions, every item with the
//!   policies it came from and whether the agent applied it (an item error names why
//!   not), the agent's repairs and fights from its Events, and what `plan` would change:
//!   the cluster's objects (the kinds `plan` reads) planned as `netpolicy plan` plans
//!   manifests, compared with what the node was given.
//! - A policy (`ClusterConfig/<name>` or `NodeConfig/<name>`): the nodes it selects, which
//!   of them applied it, which wait for their wave or rolled it back, its rollout waves,
//!   its conflicts and conditions.

use std::{collections::BTreeSet, fmt::Write as _, path::Path};

use k8s_openapi::api::core::v1::{Event, Namespace, Node, Service};
use kube::{Api, Client, Resource, ResourceExt, api::ListParams};
use netpolicy_core::{
    render::{RenderedSpec, SourcedSpec},
    spec::RoutingSpec,
};
use serde::{Serialize, de::DeserializeOwned};

use crate::{
    api::{
        Attractor, ClusterConfig, Conduit, FloatingIP, FloatingIPRange, Flow, Gateway, NodeConfig,
        NodeNetworkConfig, PolicyConflict, RouteReflectorConfig, RoutedIP, RoutedIPIssuer, Stream,
        Trench, Vip,
    },
    plan::{self, manifest::Manifests},
};

/// Why `netpolicy status` could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The name asked for cannot be a node or policy.
    #[error("{0}")]
    Usage(String),
    /// The API server's answer (404: no such object).
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// One condition, as a person reads it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionRow {
    /// `Applied`, `Degraded`, `Ready`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False`, `Unknown`.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// When it last changed (RFC 3339).
    pub since: String,
}

/// One item a node was given.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ItemRow {
    /// `vlan`, `route`, `address` or `rule`.
    pub kind: String,
    /// The item (`10.0.0.0/8 table 254 via 192.0.2.1`).
    pub item: String,
    /// The policies it came from (`ClusterConfig/default`).
    pub sources: Vec<String>,
    /// Whether the agent applied it: the revision it applied is this one and no item
    /// error names it.
    pub applied: bool,
    /// The agent's item error for it (`Refused: ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One Event about the node (the agent's repairs and fights, rollbacks).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    /// `DriftRepaired`, `Fighting`, `RolledBack`, ...
    pub reason: String,
    /// How many times.
    pub count: i32,
    /// When last (RFC 3339).
    pub last: String,
    /// What it said.
    pub message: String,
}

/// What `plan` would change on the node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// `add` or `remove`.
    pub action: String,
    /// `vlan`, `route`, `address` or `rule`.
    pub kind: String,
    /// The item.
    pub item: String,
    /// The policies it comes (or came) from.
    pub sources: Vec<String>,
}

/// `netpolicy status node <name>`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node.
    pub node: String,
    /// The revision it was given.
    pub revision: String,
    /// The revision its agent applied last (and passed its probes).
    pub applied_revision: Option<String>,
    /// A revision its agent rolled back.
    pub failed_revision: Option<String>,
    /// The NodeNetworkConfig's conditions.
    pub conditions: Vec<ConditionRow>,
    /// Every item it was given.
    pub items: Vec<ItemRow>,
    /// Item errors the agent reports that name no item above (an item given up).
    pub other_errors: Vec<String>,
    /// Events about the node's config, newest first.
    pub events: Vec<EventRow>,
    /// What `plan` over the cluster's objects would change (empty: nothing).
    pub plan_changes: Vec<Change>,
    /// Why `plan` holds the node at its last config, if it does.
    pub held: Vec<String>,
}

/// `netpolicy status policy <kind>/<name>`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// `ClusterConfig/<name>` or `NodeConfig/<name>`.
    pub policy: String,
    /// The nodes it selects.
    pub matched: Vec<String>,
    /// Of those, the nodes whose agent applied their current revision.
    pub applied: Vec<String>,
    /// Nodes given a revision they have not applied yet.
    pub progressing: Vec<String>,
    /// Nodes that rolled their current revision back (the rollout is halted).
    pub degraded: Vec<String>,
    /// Nodes without an agent report.
    pub no_agent: Vec<String>,
    /// Its rollout: nodes per wave as `plan` computes them.
    pub waves: Vec<Vec<String>>,
    /// Its conflicts.
    pub conflicts: Vec<PolicyConflict>,
    /// Its conditions.
    pub conditions: Vec<ConditionRow>,
}

fn conditions(
    c: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Vec<ConditionRow> {
    c.iter()
        .map(|c| ConditionRow {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            since: c.last_transition_time.0.to_string(),
        })
        .collect()
}

fn sources(s: &[netpolicy_core::render::SourceRef]) -> Vec<String> {
    s.iter().map(|s| format!("{}/{}", s.kind, s.name)).collect()
}

/// Every item of `r` as (kind, readable form, the agent's form, sources).
fn items(r: &RenderedSpec) -> Vec<(&'static str, String, Option<String>, Vec<String>)> {
    fn agent_form(spec: RoutingSpec) -> Option<String> {
        let c = spec.validate("spec").ok()?;
        c.vlans
            .first()
            .map(|v| format!("vlan {v}"))
            .or_else(|| c.routes.first().map(|x| format!("route {x}")))
            .or_else(|| c.rules.first().map(|x| format!("rule {x}")))
            .or_else(|| c.addresses.first().map(|x| format!("address {x}")))
    }
    fn one<T: Clone>(
        kind: &'static str,
        all: &[SourcedSpec<T>],
        text: impl Fn(&T) -> String,
        spec: impl Fn(T) -> RoutingSpec,
    ) -> Vec<(&'static str, String, Option<String>, Vec<String>)> {
        all.iter()
            .map(|s| {
                (
                    kind,
                    text(&s.item),
                    agent_form(spec(s.item.clone())),
                    sources(&s.sources),
                )
            })
            .collect()
    }
    let mut out = one(
        "vlan",
        &r.vlans,
        |v| {
            let (name, d) = plan::table::vlan_row(v);
            format!("{name} ({d})")
        },
        |v| RoutingSpec {
            vlans: vec![v],
            ..RoutingSpec::default()
        },
    );
    out.extend(one(
        "route",
        &r.routes,
        |x| {
            let (i, d) = plan::table::route_row(x);
            if d.is_empty() { i } else { format!("{i} {d}") }
        },
        |x| RoutingSpec {
            routes: vec![x],
            ..RoutingSpec::default()
        },
    ));
    out.extend(one(
        "address",
        &r.addresses,
        |a| format!("{} dev {}", a.address, a.dev),
        |a| RoutingSpec {
            addresses: vec![a],
            ..RoutingSpec::default()
        },
    ));
    out.extend(one(
        "rule",
        &r.rules,
        |x| {
            let (i, a) = plan::table::rule_row(x);
            format!("{i} {a}")
        },
        |x| RoutingSpec {
            rules: vec![x],
            ..RoutingSpec::default()
        },
    ));
    out
}

/// Lists every object of `K` into `out` as a JSON document (managed fields left out);
/// a kind the cluster does not serve adds nothing.
async fn documents<K>(client: &Client, out: &mut String) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let list = match Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    };
    for mut o in list.items {
        o.meta_mut().managed_fields = None;
        let mut v = serde_json::to_value(&o).map_err(kube::Error::SerdeError)?;
        // A list's items may come without their type: plan reads it.
        v["apiVersion"] = K::api_version(&()).into();
        v["kind"] = K::kind(&()).into();
        out.push_str("---\n");
        out.push_str(&v.to_string());
        out.push('\n');
    }
    Ok(())
}

/// The cluster's objects of every kind `plan` reads, planned.
async fn plan_cluster(client: &Client) -> Result<plan::PlanReport, kube::Error> {
    let mut text = String::new();
    documents::<Node>(client, &mut text).await?;
    documents::<Namespace>(client, &mut text).await?;
    documents::<Service>(client, &mut text).await?;
    documents::<ClusterConfig>(client, &mut text).await?;
    documents::<NodeConfig>(client, &mut text).await?;
    documents::<FloatingIPRange>(client, &mut text).await?;
    documents::<FloatingIP>(client, &mut text).await?;
    documents::<RouteReflectorConfig>(client, &mut text).await?;
    documents::<RoutedIPIssuer>(client, &mut text).await?;
    documents::<RoutedIP>(client, &mut text).await?;
    documents::<Trench>(client, &mut text).await?;
    documents::<Attractor>(client, &mut text).await?;
    documents::<Gateway>(client, &mut text).await?;
    documents::<Vip>(client, &mut text).await?;
    documents::<Conduit>(client, &mut text).await?;
    documents::<Stream>(client, &mut text).await?;
    documents::<Flow>(client, &mut text).await?;
    let mut m = Manifests::default();
    m.add_text(Path::new("cluster"), &text);
    Ok(plan::plan(&m))
}

/// What the cluster says about node `name`.
///
/// # Errors
/// The API server's answer; a node without a NodeNetworkConfig (no policy selects it,
/// or no operator runs) as `kube::Error::Api` 404.
pub async fn node(client: &Client, name: &str) -> Result<NodeStatus, kube::Error> {
    let nnc = Api::<NodeNetworkConfig>::all(client.clone())
        .get(name)
        .await?;
    let st = nnc.status.clone().unwrap_or_default();
    // The agent acted on this revision: it applied all of it, or it applied what it
    // could and names the rest in itemErrors (then it reports no applied revision).
    let rolled_back = st.failed_revision.as_deref() == Some(nnc.spec.revision.as_str());
    let acted = st.observed_generation.is_some()
        && st.observed_generation == nnc.metadata.generation
        && !rolled_back;
    let current = st.applied_revision.as_deref() == Some(nnc.spec.revision.as_str()) || acted;
    let mut named = BTreeSet::new();
    let items: Vec<ItemRow> = items(&nnc.spec.rendered)
        .into_iter()
        .map(|(kind, item, agent, sources)| {
            let error = agent.as_ref().and_then(|a| {
                // The agent names the item, or the operation on it that failed
                // (`add route …`).
                st.item_errors
                    .iter()
                    .find(|e| e.item == *a || e.item.ends_with(&format!(" {a}")))
                    .map(|e| {
                        named.insert(e.item.clone());
                        format!("{}: {}", e.reason, e.message)
                    })
            });
            ItemRow {
                kind: kind.to_owned(),
                item,
                sources,
                applied: current && error.is_none(),
                error,
            }
        })
        .collect();
    let other_errors = st
        .item_errors
        .iter()
        .filter(|e| !named.contains(&e.item))
        .map(|e| format!("{}: {}: {}", e.item, e.reason, e.message))
        .collect();
    let mut events: Vec<(String, EventRow)> = Api::<Event>::all(client.clone())
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await?
        .items
        .into_iter()
        .filter(|e| {
            matches!(
                e.involved_object.kind.as_deref(),
                Some("NodeNetworkConfig" | "Node")
            )
        })
        .map(|e| {
            let last = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
                .unwrap_or_default();
            (
                last.clone(),
                EventRow {
                    reason: e.reason.unwrap_or_default(),
                    count: e.count.unwrap_or(1),
                    last,
                    message: e.message.unwrap_or_default(),
                },
            )
        })
        .collect();
    events.sort_by(|a, b| b.0.cmp(&a.0));
    let report = plan_cluster(client).await?;
    let held = report.held_nodes.get(name).cloned().unwrap_or_default();
    let planned = report
        .nodes
        .get(name)
        .map(|r| (**r).clone())
        .unwrap_or_default();
    Ok(NodeStatus {
        node: name.to_owned(),
        revision: nnc.spec.revision.clone(),
        applied_revision: st.applied_revision.clone(),
        failed_revision: st.failed_revision.clone(),
        conditions: conditions(&st.conditions),
        items,
        other_errors,
        events: events.into_iter().map(|(_, e)| e).collect(),
        // A held node keeps what it has: plan would change nothing there.
        plan_changes: if held.is_empty() {
            changes(&nnc.spec.rendered, &planned)
        } else {
            Vec::new()
        },
        held,
    })
}

/// What turning `now` into `planned` adds and removes, item by item.
fn changes(now: &RenderedSpec, planned: &RenderedSpec) -> Vec<Change> {
    let key = |(k, i, _, s): &(&'static str, String, Option<String>, Vec<String>)| {
        (k.to_string(), i.clone(), s.clone())
    };
    let have: BTreeSet<_> = items(now).iter().map(key).collect();
    let want: BTreeSet<_> = items(planned).iter().map(key).collect();
    let change = |action: &str, (kind, item, sources): &(String, String, Vec<String>)| Change {
        action: action.to_owned(),
        kind: kind.clone(),
        item: item.clone(),
        sources: sources.clone(),
    };
    want.difference(&have)
        .map(|c| change("add", c))
        .chain(have.difference(&want).map(|c| change("remove", c)))
        .collect()
}

/// What the cluster says about policy `name` (`ClusterConfig/<name>`,
/// `NodeConfig/<name>`, or a bare name: a ClusterConfig if one has it, else a
/// NodeConfig).
///
/// # Errors
/// The API server's answer (a policy that does not exist: 404); a name of another kind.
pub async fn policy(client: &Client, name: &str) -> Result<PolicyStatus, StatusError> {
    let (kind, bare) = match name.split_once('/') {
        Some((k, n)) => (Some(k), n),
        None => (None, name),
    };
    let cc = if kind.is_none_or(|k| k.eq_ignore_ascii_case("ClusterConfig")) {
        Api::<ClusterConfig>::all(client.clone())
            .get_opt(bare)
            .await?
    } else {
        None
    };
    let (key, st) = match cc {
        Some(cc) => (
            format!("ClusterConfig/{bare}"),
            cc.status.unwrap_or_default(),
        ),
        None if kind.is_none_or(|k| k.eq_ignore_ascii_case("NodeConfig")) => {
            let nc = Api::<NodeConfig>::all(client.clone()).get(bare).await?;
            (format!("NodeConfig/{bare}"), nc.status.unwrap_or_default())
        }
        None => {
            return Err(StatusError::Usage(format!(
                "{name}: a policy is ClusterConfig/<name> or NodeConfig/<name>"
            )));
        }
    };
    let report = plan_cluster(client).await?;
    let selects = |r: &RenderedSpec| items(r).iter().any(|(_, _, _, s)| s.contains(&key));
    let waves: Vec<Vec<String>> = report
        .rollout
        .iter()
        .find(|r| r.policy == key)
        .map(|r| r.waves.clone())
        .unwrap_or_default();
    // The nodes it selects: its rollout's (every node it selects is in a wave), and
    // any node given an item from it.
    let matched: Vec<String> = report
        .nodes
        .iter()
        .filter(|(_, r)| selects(r))
        .map(|(n, _)| n.clone())
        .chain(waves.iter().flatten().cloned())
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    let nncs = Api::<NodeNetworkConfig>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let mut out = PolicyStatus {
        policy: key.clone(),
        matched: matched.clone(),
        applied: Vec::new(),
        progressing: Vec::new(),
        degraded: Vec::new(),
        no_agent: Vec::new(),
        waves,
        conflicts: st.conflicts.clone(),
        conditions: conditions(&st.conditions),
    };
    for n in &matched {
        let Some(o) = nncs.iter().find(|o| o.name_any() == *n) else {
            out.no_agent.push(n.clone());
            continue;
        };
        let list = match crate::routing::rollout::NodeState::of(Some(o)).word() {
            "degraded" => &mut out.degraded,
            "applied" => &mut out.applied,
            "progressing" => &mut out.progressing,
            _ => &mut out.no_agent,
        };
        list.push(n.clone());
    }
    Ok(out)
}

/// Conditions as a table in `plan`'s style.
fn conditions_table(rows: &[ConditionRow], width: Option<u16>) -> comfy_table::Table {
    let mut t = plan::table::new_table(width);
    t.set_header(["Condition", "Status", "Reason", "Message", "Since"]);
    for c in rows {
        t.add_row([&c.type_, &c.status, &c.reason, &c.message, &c.since]);
    }
    t
}

impl NodeStatus {
    /// For a person: the node's revision and conditions, its items, Events and what
    /// `plan` would change, fitted into `width` columns when given.
    pub fn to_table(&self, width: Option<u16>) -> String {
        let mut out = String::new();
        let applied = self.applied_revision.as_deref().unwrap_or("none");
        let _ = writeln!(
            out,
            "Node {}: revision {} (last applied as a whole: {applied}{})",
            self.node,
            self.revision,
            self.failed_revision
                .as_deref()
                .map(|f| format!(", rolled back: {f}"))
                .unwrap_or_default()
        );
        let _ = writeln!(out, "{}", conditions_table(&self.conditions, width));
        let mut t = plan::table::new_table(width);
        t.set_header(["Kind", "Item", "From", "Applied"]);
        for i in &self.items {
            let applied = match (&i.error, i.applied) {
                (Some(e), _) => format!("no: {e}"),
                (None, true) => "yes".to_owned(),
                (None, false) => "not yet".to_owned(),
            };
            t.add_row([&i.kind, &i.item, &i.sources.join(", "), &applied]);
        }
        let _ = writeln!(out, "{t}");
        for e in &self.other_errors {
            let _ = writeln!(out, "item error: {e}");
        }
        if !self.events.is_empty() {
            let mut t = plan::table::new_table(width);
            t.set_header(["Event", "Count", "Last", "Message"]);
            for e in &self.events {
                t.add_row([&e.reason, &e.count.to_string(), &e.last, &e.message]);
            }
            let _ = writeln!(out, "{t}");
        }
        if !self.held.is_empty() {
            let _ = writeln!(
                out,
                "plan holds the node at its last config: {}",
                self.held.join("; ")
            );
        } else if self.plan_changes.is_empty() {
            let _ = writeln!(out, "plan would change nothing on this node");
        } else {
            let mut t = plan::table::new_table(width);
            t.set_header(["plan would", "Kind", "Item", "From"]);
            for c in &self.plan_changes {
                t.add_row([&c.action, &c.kind, &c.item, &c.sources.join(", ")]);
            }
            let _ = writeln!(out, "{t}");
        }
        out
    }
}

impl PolicyStatus {
    /// For a person: the nodes by state, the waves, conflicts and conditions.
    pub fn to_table(&self, width: Option<u16>) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: selects {} node(s): {} applied, {} progressing, {} degraded, {} without an agent",
            self.policy,
            self.matched.len(),
            self.applied.len(),
            self.progressing.len(),
            self.degraded.len(),
            self.no_agent.len()
        );
        let mut t = plan::table::new_table(width);
        t.set_header(["State", "Nodes"]);
        for (state, nodes) in [
            ("applied", &self.applied),
            ("progressing", &self.progressing),
            ("degraded", &self.degraded),
            ("no agent", &self.no_agent),
        ] {
            if !nodes.is_empty() {
                t.add_row([state.to_owned(), nodes.join(" ")]);
            }
        }
        let _ = writeln!(out, "{t}");
        if !self.waves.is_empty() {
            let mut t = plan::table::new_table(width);
            t.set_header(["Wave", "Nodes"]);
            for (i, w) in self.waves.iter().enumerate() {
                t.add_row([(i + 1).to_string(), w.join(" ")]);
            }
            let _ = writeln!(out, "{t}");
        }
        for c in &self.conflicts {
            let _ = writeln!(
                out,
                "conflict on {}: {} (with {})",
                c.node,
                c.item,
                c.sources.join(", ")
            );
        }
        let _ = writeln!(out, "{}", conditions_table(&self.conditions, width));
        out
    }
}
