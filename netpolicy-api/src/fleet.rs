//! Shared renderings (the node agent model of docs/architecture.md): the operator
//! writes one immutable [`NodeNetworkRendering`] per distinct merged configuration
//! (nodes selected by the same policies share it), one small [`NetworkRollout`] per
//! change saying which rendering each group it moves runs and how far its waves have
//! gone, and the [`NetworkFleet`] with every policy's selector and each group's settled
//! rendering. A node's [`NodeNetworkConfig`](crate::NodeNetworkConfig) then carries
//! only its own items (`spec.shared: true`): its agent finds its group from its Node's
//! labels and the fleet's policies, reads the rollouts of that group only (by their
//! [`group_label`]; kept by [`SeenRollouts`]), picks its rendering with
//! [`netpolicy_core::fleet::choose`] over its group's entries of them
//! ([`current_rollouts_of`]; the operator's view of every group: [`current_rollouts`]),
//! reads that rendering's parts ([`join`]) and lays its own items over it ([`NodeNetworkConfigSpec::effective`](crate::NodeNetworkConfigSpec::effective)).
//! A cluster-wide edit then costs one rendering per distinct configuration, one
//! rollout, and one small write per wave, not one object per node.
//!
//! # Examples
//!
//! ```
//! use netpolicy_api::{
//!     FleetGroup, FleetPolicy, NetworkFleetSpec, NetworkRolloutSpec, NodeNetworkRenderingSpec,
//!     RolloutGroup, current_rollouts, current_rollouts_of, join,
//!     netpolicy_core::{fleet::{choose, group_name}, selector::Labels},
//!     render::{RenderedSpec, SourcedSpec, SourceRef},
//!     spec::{LabelSelector, RouteSpec},
//! };
//!
//! let group = group_name(["ClusterConfig/default"]);
//! let fleet = NetworkFleetSpec {
//!     policies: vec![FleetPolicy {
//!         policy: "ClusterConfig/default".into(),
//!         node_selector: LabelSelector::default(),
//!     }],
//!     groups: vec![FleetGroup { group: group.clone(), rendering: "r-00000000000000aa".into() }],
//!     sequence: 6,
//!     report_spread_ms: None,
//! };
//! // A change on its way: no wave open yet.
//! let rollout = NetworkRolloutSpec {
//!     sequence: 7,
//!     groups: vec![RolloutGroup {
//!         group: group.clone(),
//!         rendering: "r-00000000000000bb".into(),
//!         previous: Some("r-00000000000000aa".into()),
//!         through: None,
//!     }],
//!     rolled_back: false,
//! };
//! // The agent's choice, from its labels, the fleet and its group's rollouts.
//! let rollouts = current_rollouts_of(&group, Some(&fleet), [("rollout-7", &rollout)])?;
//! let choice = choose("node-1", &Labels::new(), &fleet.index(), &rollouts);
//! assert_eq!(choice.rendering.as_deref(), Some("r-00000000000000aa"));
//! // Every wave open: the new rendering.
//! let mut open = rollout.clone();
//! open.groups[0].through = Some("*".into());
//! let rollouts = current_rollouts(Some(&fleet), [("rollout-7", &open)])?;
//! let choice = choose("node-1", &Labels::new(), &fleet.index(), &rollouts);
//! assert_eq!(choice.rendering.as_deref(), Some("r-00000000000000bb"));
//! // The rendering's parts, as listed by their label, joined.
//! let route = SourcedSpec {
//!     item: RouteSpec { to: "10.20.0.0/16".into(), dev: Some("eth0".into()), ..Default::default() },
//!     sources: vec![SourceRef { kind: "ClusterConfig".into(), name: "default".into() }],
//! };
//! let part = NodeNetworkRenderingSpec {
//!     rendering: "r-00000000000000bb".into(),
//!     part: 0,
//!     parts: 1,
//!     rendered: RenderedSpec { routes: vec![route], ..Default::default() },
//!     ..Default::default()
//! };
//! let joined = join("r-00000000000000bb", [&part])?;
//! assert_eq!(joined.rendered.routes.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use kube::CustomResource;
use netpolicy_core::{
    fleet::{OrderKey, PolicySelector, Rollout, Through},
    render::RenderedSpec,
    selector::Selector,
    spec::LabelSelector,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ProbeSpec;

mod delta;
mod seen;
pub use delta::{LayerDelta, delta_name, delta_to, layer_address};
pub use seen::SeenRollouts;

/// The label every part of a rendering carries, valued with the rendering's name: an
/// agent lists a rendering's parts by it.
pub const RENDERING_LABEL: &str = "netpolicy.io/rendering";

/// The only allowed name of the NetworkFleet.
pub const FLEET_NAME: &str = "default";

/// One part of a shared rendering: the merged items of the ClusterConfig and
/// NodeConfigs that select a group of nodes, with the probes and `rollbackSeconds`
/// they give. Written once by the operator and never changed (named by its content:
/// `r-<16 hex digits>` when it has one part, `r-<16 hex digits>-<part>` otherwise;
/// labelled `netpolicy.io/rendering: <rendering>`). A rendering no group runs any more
/// is deleted.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "NodeNetworkRendering",
    plural = "nodenetworkrenderings",
    shortname = "npnr",
    validation = Rule::new("!has(oldSelf.spec) || self.spec == oldSelf.spec").message(
        "a NodeNetworkRendering is immutable: a new configuration is a new rendering"
    ),
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Rendering","type":"string","jsonPath":".spec.rendering"}"#,
    printcolumn = r#"{"name":"Part","type":"integer","jsonPath":".spec.part"}"#,
    printcolumn = r#"{"name":"Parts","type":"integer","jsonPath":".spec.parts"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeNetworkRenderingSpec {
    /// The whole rendering's name (`r-<16 hex digits>`); every part carries it.
    pub rendering: String,
    /// This part's place, from 0.
    #[serde(default)]
    pub part: u32,
    /// How many parts the rendering has (at least 1).
    #[schemars(range(min = 1))]
    pub parts: u32,
    /// This part's items (part 0 also carries the hard-synced tables).
    #[serde(flatten)]
    pub rendered: RenderedSpec,
    /// What the agent checks after applying it (part 0 only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ProbeSpec>,
    /// Seconds the agent has to pass the probes (part 0 only; absent: 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_seconds: Option<u32>,
    /// The layers the rendering's items start with (part 0 only), in order: renderings
    /// of their own (`l-<16 hex digits>`, named by their content, stored and labelled
    /// as any rendering is) holding items many renderings share, such as a
    /// ClusterConfig's. Stored once however many renderings name them, so that an edit
    /// of one policy writes its items once, not once per group; a reader reads each
    /// once ([`Joined::lay`]). A layer has no layers, probes or tables of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<String>,
    /// A delta object's changes (`d-<16 hex digits>`, named after the layer they lead
    /// to: [`delta_name`]): the layer `to` as the changes from the layer `from` it
    /// replaced. Written with a new layer when its changes are small; an agent that
    /// holds `from` reads this instead of the layer whole and checks the result against
    /// the layer's name ([`Joined::from_delta`]). Deleted with the renderings nothing
    /// names once no rollout is under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<LayerDelta>,
}

/// The label prefix of a rendering's parts that name a layer: each carries
/// `layer.netpolicy.io/<layer>: "true"` for each of its layers ([`layer_label`]), so
/// that what a rendering needs is known from its objects' metadata.
pub const LAYER_LABEL_PREFIX: &str = "layer.netpolicy.io/";

/// The label a part of a rendering laid over `layer` carries (its value is `true`).
pub fn layer_label(layer: &str) -> String {
    format!("{LAYER_LABEL_PREFIX}{layer}")
}

/// A whole rendering: its parts joined.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Joined {
    /// The rendering's name.
    pub rendering: String,
    /// Its items, part after part.
    pub rendered: RenderedSpec,
    /// Its probes.
    pub probes: Vec<ProbeSpec>,
    /// Its `rollbackSeconds`.
    pub rollback_seconds: Option<u32>,
    /// The layers its items start with ([`NodeNetworkRenderingSpec::layers`]): not in
    /// `rendered` until [`Joined::lay`] puts them there.
    pub layers: Vec<String>,
}

/// Why parts do not make a whole rendering.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// No part of the rendering was found.
    #[error("rendering {0}: no part found")]
    Missing(String),
    /// A part names another rendering or disagrees on the number of parts.
    #[error("rendering {rendering}: part {part}: {message}")]
    Inconsistent {
        /// The rendering.
        rendering: String,
        /// The part.
        part: u32,
        /// What is wrong (`spec.parts is 3, part 0 says 2`).
        message: String,
    },
    /// Some parts are not there (yet).
    #[error("rendering {rendering}: part {part} of {parts} is missing")]
    Incomplete {
        /// The rendering.
        rendering: String,
        /// The first missing part.
        part: u32,
        /// How many there are.
        parts: u32,
    },
    /// A layer's delta does not lead to it from the layer given ([`Joined::from_delta`]).
    #[error("layer {layer}: delta: {message}")]
    Delta {
        /// The layer the delta is said to lead to.
        layer: String,
        /// What is wrong.
        message: String,
    },
    /// A layer the rendering names is not given, or is not a layer.
    #[error("rendering {rendering}: layer {layer}: {message}")]
    Layer {
        /// The rendering.
        rendering: String,
        /// The layer.
        layer: String,
        /// What is wrong (`not read`).
        message: String,
    },
}

/// The rendering named `rendering` from its parts (in any order).
///
/// # Errors
/// [`JoinError`] when no part is given, a part names another rendering, parts disagree
/// on their number, a part is repeated or one is missing: the agent keeps what it runs.
pub fn join<'a>(
    rendering: &str,
    parts: impl IntoIterator<Item = &'a NodeNetworkRenderingSpec>,
) -> Result<Joined, JoinError> {
    let mut parts: Vec<&NodeNetworkRenderingSpec> = parts.into_iter().collect();
    parts.sort_by_key(|p| p.part);
    let Some(first) = parts.first() else {
        return Err(JoinError::Missing(rendering.to_owned()));
    };
    let total = first.parts;
    let inconsistent = |part: u32, message: String| JoinError::Inconsistent {
        rendering: rendering.to_owned(),
        part,
        message,
    };
    let mut out = Joined {
        rendering: rendering.to_owned(),
        ..Joined::default()
    };
    for (i, p) in parts.iter().enumerate() {
        if p.rendering != rendering {
            return Err(inconsistent(
                p.part,
                format!("spec.rendering is {}", p.rendering),
            ));
        }
        if p.parts != total || total == 0 {
            return Err(inconsistent(
                p.part,
                format!("spec.parts is {}, the first part says {total}", p.parts),
            ));
        }
        let want = u32::try_from(i).unwrap_or(u32::MAX);
        if p.part != want {
            let message = if p.part < want {
                "given twice".to_owned()
            } else {
                return Err(JoinError::Incomplete {
                    rendering: rendering.to_owned(),
                    part: want,
                    parts: total,
                });
            };
            return Err(inconsistent(p.part, message));
        }
        if p.part == 0 {
            out.layers.clone_from(&p.layers);
            out.probes.clone_from(&p.probes);
            out.rollback_seconds = p.rollback_seconds;
            out.rendered
                .table_hard_sync
                .clone_from(&p.rendered.table_hard_sync);
        }
        out.rendered.extend(&p.rendered);
    }
    let have = u32::try_from(parts.len()).unwrap_or(u32::MAX);
    if have < total {
        return Err(JoinError::Incomplete {
            rendering: rendering.to_owned(),
            part: have,
            parts: total,
        });
    }
    Ok(out)
}

impl Joined {
    /// The rendering as its nodes run it: the items of its layers (each joined from its
    /// own parts; `layer` finds one by name), in order, then its own. A rendering
    /// without layers is returned as it is.
    ///
    /// # Errors
    /// [`JoinError::Layer`] when `layer` does not find a layer the rendering names, or
    /// the one it finds is another rendering or names layers, probes or tables of its
    /// own: the agent keeps what it runs.
    pub fn lay<'a>(&self, layer: impl Fn(&str) -> Option<&'a Joined>) -> Result<Self, JoinError> {
        if self.layers.is_empty() {
            return Ok(self.clone());
        }
        let mut out = Self {
            rendering: self.rendering.clone(),
            rendered: RenderedSpec {
                table_hard_sync: self.rendered.table_hard_sync.clone(),
                ..RenderedSpec::default()
            },
            probes: self.probes.clone(),
            rollback_seconds: self.rollback_seconds,
            layers: self.layers.clone(),
        };
        for name in &self.layers {
            let bad = |message: &str| JoinError::Layer {
                rendering: self.rendering.clone(),
                layer: name.clone(),
                message: message.to_owned(),
            };
            let l = layer(name).ok_or_else(|| bad("not read"))?;
            if l.rendering != *name {
                return Err(bad(&format!("the layer given is {}", l.rendering)));
            }
            if !l.layers.is_empty()
                || !l.probes.is_empty()
                || l.rollback_seconds.is_some()
                || !l.rendered.table_hard_sync.is_empty()
            {
                return Err(bad(
                    "a layer has no layers, probes, rollbackSeconds or tables of its own",
                ));
            }
            out.rendered.extend(&l.rendered);
        }
        out.rendered.extend(&self.rendered);
        Ok(out)
    }
}

/// What every agent reads to find its group and what a group runs when no rollout
/// moves it: every policy's node selector (none of its items) and each group's settled
/// rendering. One object, named `default`, written by the operator when a policy's
/// selector changes or a rollout finishes (never while waves open); its size follows
/// the policies and the groups, never the node count.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "NetworkFleet",
    plural = "networkfleets",
    shortname = "npfleet",
    validation = Rule::new("self.metadata.name == 'default'").message(
        "the NetworkFleet is named 'default': there is one, written by the operator"
    ),
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkFleetSpec {
    /// Every ClusterConfig and NodeConfig that can select a node, by identity, with its
    /// node selector (a NodeConfig whose selector is invalid selects no node and is not
    /// listed).
    #[serde(default)]
    pub policies: Vec<FleetPolicy>,
    /// Each group's settled rendering (what its nodes run when no NetworkRollout names
    /// the group).
    #[serde(default)]
    pub groups: Vec<FleetGroup>,
    /// The sequence of the last rollout folded in (a new rollout's is higher).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sequence: u64,
    /// Milliseconds over which the agents of one wave spread their reports of a newly
    /// applied rendering: the operator sets it from the number of nodes
    /// ([`netpolicy_core::fleet::report_spread_ms`]: 500 up to 1,000 nodes, half a
    /// millisecond a node above). An agent started with `--report-spread-ms` uses its
    /// own. Absent: 500.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_spread_ms: Option<u32>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // (serde's signature)
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A policy as an agent needs it to find its group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetPolicy {
    /// `ClusterConfig/default`, `NodeConfig/<name>`.
    pub policy: String,
    /// The nodes it selects (empty: every node).
    #[serde(default)]
    pub node_selector: LabelSelector,
}

/// A group's settled rendering.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetGroup {
    /// The group (`g-<16 hex digits>` of its policies).
    pub group: String,
    /// The rendering its nodes run.
    pub rendering: String,
}

/// The label prefix of a NetworkRollout's groups: a rollout carries
/// `group.netpolicy.io/<group>: "true"` for each group it moves, so that an agent
/// watches only the rollouts of its own group ([`group_label`]).
pub const GROUP_LABEL_PREFIX: &str = "group.netpolicy.io/";

/// The label a NetworkRollout moving `group` carries (its value is `true`; an agent
/// selects on the key).
pub fn group_label(group: &str) -> String {
    format!("{GROUP_LABEL_PREFIX}{group}")
}

/// One change on its way to the nodes: the groups it moves (each from the rendering it
/// ran to a new one) and how far each group's waves have gone (one key a group,
/// whatever its size). Written by the operator: created when a policy change gives
/// groups new renderings, updated once per step of its waves (one write, however many
/// groups open a wave in it), and deleted when every node runs the new renderings
/// (they are then the groups' settled renderings in the NetworkFleet). Each group's
/// waves are cut over its nodes within its policies' `maxUnavailable`, which the groups
/// share; only the agents of the groups it moves watch it.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "NetworkRollout",
    plural = "networkrollouts",
    shortname = "nprollout",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Sequence","type":"integer","jsonPath":".spec.sequence"}"#,
    printcolumn = r#"{"name":"Rolled back","type":"boolean","jsonPath":".spec.rolledBack"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRolloutSpec {
    /// Its place among rollouts: where two name a group, the higher decides.
    pub sequence: u64,
    /// The groups it moves, each with how far its waves have gone.
    #[serde(default)]
    pub groups: Vec<RolloutGroup>,
    /// Rolled back: every node runs its group's `previous`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rolled_back: bool,
}

/// A group a rollout moves.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutGroup {
    /// The group (`g-<16 hex digits>` of its policies).
    pub group: String,
    /// The rendering it moves to.
    pub rendering: String,
    /// The rendering it ran before (absent: none; every node runs the new one at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// How far it has gone: absent, no wave is open; `*`, every node of the group runs
    /// the new rendering; `<16 hex digits>/<node>`, the nodes whose place in the
    /// rollout is not after this one's do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<String>,
}

/// A fleet or rollout field that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FleetError {
    /// The field (`spec.through`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl NetworkFleetSpec {
    /// The policy index the agents choose by. A selector that does not validate
    /// selects nothing (as the operator's engine treats it).
    pub fn index(&self) -> Vec<PolicySelector> {
        self.policies
            .iter()
            .map(|p| {
                let sel = p
                    .node_selector
                    .validate("nodeSelector")
                    .unwrap_or_else(|_| Selector::nothing());
                PolicySelector::new(p.policy.clone(), sel)
            })
            .collect()
    }

    /// How long the agents spread their reports of a newly applied rendering over:
    /// `reportSpreadMs`, or [`netpolicy_core::fleet::MIN_REPORT_SPREAD_MS`] when absent.
    pub fn report_spread(&self) -> std::time::Duration {
        let ms = self
            .report_spread_ms
            .unwrap_or(netpolicy_core::fleet::MIN_REPORT_SPREAD_MS);
        std::time::Duration::from_millis(u64::from(ms))
    }

    /// Each group's settled rendering as a finished rollout.
    pub fn settled(&self) -> Vec<Rollout> {
        self.settled_where(|_| true)
    }

    fn settled_where(&self, keep: impl Fn(&str) -> bool) -> Vec<Rollout> {
        self.groups
            .iter()
            .filter(|g| keep(&g.group))
            .map(|g| Rollout {
                name: String::new(),
                group: g.group.clone(),
                rendering: g.rendering.clone(),
                previous: None,
                through: Through::Everything,
                rolled_back: false,
            })
            .collect()
    }
}

impl RolloutGroup {
    /// How far it has gone, parsed (`path` names the group in an error).
    ///
    /// # Errors
    /// [`FleetError`] for a `through` that is neither `*` nor `<16 hex digits>/<node>`.
    pub fn through(&self, path: &str) -> Result<Through, FleetError> {
        let Some(t) = self.through.as_deref() else {
            return Ok(Through::Nothing);
        };
        if t == "*" {
            return Ok(Through::Everything);
        }
        let bad = || FleetError {
            field: format!("{path}.through"),
            message: format!("{t:?} is neither * nor <16 hex digits>/<node>"),
        };
        let (hash, node) = t.split_once('/').ok_or_else(bad)?;
        if hash.len() != 16 || node.is_empty() {
            return Err(bad());
        }
        let hash = u64::from_str_radix(hash, 16).map_err(|_| bad())?;
        Ok(Through::Key(OrderKey {
            hash,
            node: node.to_owned(),
        }))
    }

    /// `through` as the rollout stores it.
    pub fn through_text(through: &Through) -> Option<String> {
        match through {
            Through::Nothing => None,
            Through::Everything => Some("*".into()),
            Through::Key(k) => Some(format!("{:016x}/{}", k.hash, k.node)),
        }
    }
}

impl NetworkRolloutSpec {
    /// Its groups' rollouts as [`netpolicy_core::fleet`] reads them (`name` is the
    /// object's name: it orders the waves).
    ///
    /// # Errors
    /// [`FleetError`] for a `through` that does not parse.
    pub fn rollouts(&self, name: &str) -> Result<Vec<Rollout>, FleetError> {
        self.rollouts_where(name, |_| true)
    }

    fn rollouts_where(
        &self,
        name: &str,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<Rollout>, FleetError> {
        self.groups
            .iter()
            .enumerate()
            .filter(|(_, g)| keep(&g.group))
            .map(|(i, g)| {
                Ok(Rollout {
                    name: name.to_owned(),
                    group: g.group.clone(),
                    rendering: g.rendering.clone(),
                    previous: g.previous.clone(),
                    through: g.through(&format!("spec.groups[{i}]"))?,
                    rolled_back: self.rolled_back,
                })
            })
            .collect()
    }
}

/// What every group runs, as [`netpolicy_core::fleet::choose`] reads it: the groups of
/// the rollouts (`(name, spec)`), newest first, then the fleet's settled renderings.
/// The agent passes its own group's rollouts; the operator passes all of them.
///
/// A rollout the fleet has not folded in yet (`spec.sequence` above the fleet's) still
/// counts after its delete is seen: the operator deletes it only once the fleet that
/// folds it is written, but a reader watching both may see the delete first (the
/// reader's [`SeenRollouts`] keeps it until then).
///
/// # Errors
/// [`FleetError`] naming the rollout whose `through` does not parse.
pub fn current_rollouts<'a>(
    fleet: Option<&NetworkFleetSpec>,
    rollouts: impl IntoIterator<Item = (&'a str, &'a NetworkRolloutSpec)>,
) -> Result<Vec<Rollout>, FleetError> {
    current_where(fleet, rollouts, |_| true)
}

/// [`current_rollouts`] of `group` alone: what [`netpolicy_core::fleet::choose`] reads
/// for a node of that group, the same choice as from every group's (it looks at its
/// node's group only). An agent's choice per event costs its group's entries, not a
/// copy of every group's (100 groups: ~200 rollouts made per event of each agent); an
/// entry of another group whose `through` does not parse does not stop it.
///
/// # Errors
/// [`FleetError`] naming the rollout whose entry for `group` has a `through` that does
/// not parse.
pub fn current_rollouts_of<'a>(
    group: &str,
    fleet: Option<&NetworkFleetSpec>,
    rollouts: impl IntoIterator<Item = (&'a str, &'a NetworkRolloutSpec)>,
) -> Result<Vec<Rollout>, FleetError> {
    current_where(fleet, rollouts, |g| g == group)
}

fn current_where<'a>(
    fleet: Option<&NetworkFleetSpec>,
    rollouts: impl IntoIterator<Item = (&'a str, &'a NetworkRolloutSpec)>,
    keep: impl Fn(&str) -> bool + Copy,
) -> Result<Vec<Rollout>, FleetError> {
    let mut listed: Vec<(&str, &NetworkRolloutSpec)> = rollouts.into_iter().collect();
    listed.sort_by(|a, b| b.1.sequence.cmp(&a.1.sequence).then_with(|| a.0.cmp(b.0)));
    let mut out = Vec::new();
    for (name, spec) in listed {
        out.extend(spec.rollouts_where(name, keep).map_err(|e| FleetError {
            field: format!("NetworkRollout/{name}: {}", e.field),
            message: e.message,
        })?);
    }
    out.extend(fleet.map(|f| f.settled_where(keep)).unwrap_or_default());
    Ok(out)
}

#[cfg(test)]
mod tests;
