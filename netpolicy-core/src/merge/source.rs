//! Where an item comes from: sources, their precedence, and the policies that carry
//! items to the nodes they select.

use std::{fmt, sync::Arc};

use smallvec::SmallVec;

use crate::{
    model::{HostAddress, Route, RoutingConfig, Rule, Vlan},
    selector::{Labels, Requirement, Selector},
};

/// The kind of object an item came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    /// The cluster-wide `ClusterConfig`.
    ClusterConfig,
    /// A `NodeConfig`.
    NodeConfig,
    /// A traffic domain (`Trench`), compiled for one node. Its items never override and
    /// are never overridden: any other source that defines one of them differently is
    /// a conflict, whatever its precedence.
    Trench,
}

impl SourceKind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterConfig => "ClusterConfig",
            Self::NodeConfig => "NodeConfig",
            Self::Trench => "Trench",
        }
    }
}

/// The label key a policy for one node selects on ([`Policy::trench`]). The engine's
/// callers add it to every node's labels with the node's name as value (see
/// [`with_node_name`]); a NodeConfig may select on it too.
pub const NODE_NAME_LABEL: &str = "netpolicy.io/node-name";

/// `labels` plus [`NODE_NAME_LABEL`]`: name`.
pub fn with_node_name(name: &str, labels: &Labels) -> Labels {
    let mut l = labels.clone();
    l.insert(NODE_NAME_LABEL.to_owned(), name.to_owned());
    l
}

/// The object an item came from (`NodeConfig/edge-routes`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// Kind of the object.
    pub kind: SourceKind,
    /// Name of the object (`<namespace>/<name>` for a namespaced one).
    pub name: Arc<str>,
    /// The node a per-node policy was compiled for ([`Policy::trench`]): part of the
    /// identity, not of the name shown.
    pub node: Option<Arc<str>>,
}

impl Source {
    /// `ClusterConfig/<name>`.
    pub fn cluster(name: &str) -> Self {
        Self {
            kind: SourceKind::ClusterConfig,
            name: name.into(),
            node: None,
        }
    }

    /// `NodeConfig/<name>`.
    pub fn node_config(name: &str) -> Self {
        Self {
            kind: SourceKind::NodeConfig,
            name: name.into(),
            node: None,
        }
    }

    /// `Trench/<namespace>/<name>`, compiled for `node`.
    pub fn trench(namespace: &str, name: &str, node: &str) -> Self {
        Self {
            kind: SourceKind::Trench,
            name: format!("{namespace}/{name}").into(),
            node: Some(node.into()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.as_str(), self.name)
    }
}

/// How strongly a policy's items win over others with the same identity.
/// Higher wins: every NodeConfig beats the ClusterConfig, then higher `priority` wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Precedence {
    rank: u8,
    priority: i64,
}

impl fmt::Display for Precedence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rank == 0 {
            f.write_str("cluster-wide")
        } else {
            write!(f, "priority {}", self.priority)
        }
    }
}

/// One policy object as the merge sees it: where it came from, which nodes it selects,
/// how strongly it wins, and its validated content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub(super) source: Source,
    pub(super) precedence: Precedence,
    pub(super) selector: Selector,
    pub(super) content: Option<Items>,
}

impl Policy {
    /// The `ClusterConfig`: applies to every node, lowest precedence.
    pub fn cluster(name: &str, config: RoutingConfig) -> Self {
        Self {
            source: Source::cluster(name),
            precedence: Precedence {
                rank: 0,
                priority: 0,
            },
            selector: Selector::everything(),
            content: Some(Items::from(config)),
        }
    }

    /// A `NodeConfig` with its selector and priority.
    pub fn node_config(
        name: &str,
        priority: i64,
        selector: Selector,
        config: RoutingConfig,
    ) -> Self {
        Self {
            source: Source::node_config(name),
            precedence: Precedence { rank: 1, priority },
            selector,
            content: Some(Items::from(config)),
        }
    }

    /// A traffic domain's items for one node (`Trench/<namespace>/<name>`): selects
    /// exactly the node named `node` (through [`NODE_NAME_LABEL`]). Any other source
    /// defining one of its items differently is a conflict, at any precedence.
    pub fn trench(namespace: &str, name: &str, node: &str, config: RoutingConfig) -> Self {
        Self {
            source: Source::trench(namespace, name, node),
            precedence: Precedence {
                rank: 2,
                priority: 0,
            },
            selector: Selector::from_requirements(vec![Requirement::Equals {
                key: NODE_NAME_LABEL.to_owned(),
                value: node.to_owned(),
            }]),
            content: Some(Items::from(config)),
        }
    }

    /// A policy whose content failed validation. Nodes its selector matches are held at
    /// their last good config until it is fixed or deleted. Use
    /// [`Selector::everything`] when the selector itself is invalid: then no node can
    /// be known to be unaffected.
    pub fn invalid(source: Source, priority: i64, selector: Selector) -> Self {
        let rank = match source.kind {
            SourceKind::ClusterConfig => 0,
            SourceKind::NodeConfig => 1,
            SourceKind::Trench => 2,
        };
        Self {
            source,
            precedence: Precedence { rank, priority },
            selector,
            content: None,
        }
    }

    /// The object this policy came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The policy's precedence.
    pub fn precedence(&self) -> Precedence {
        self.precedence
    }

    /// The nodes it applies to.
    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// Whether the content is valid.
    pub fn is_valid(&self) -> bool {
        self.content.is_some()
    }
}

/// Validated content with items behind `Arc`, so merged results share them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Items {
    pub(super) vlans: Vec<Arc<Vlan>>,
    pub(super) routes: Vec<Arc<Route>>,
    pub(super) addresses: Vec<Arc<HostAddress>>,
    pub(super) rules: Vec<Arc<Rule>>,
    pub(super) table_hard_sync: Vec<u32>,
}

impl From<RoutingConfig> for Items {
    fn from(c: RoutingConfig) -> Self {
        Self {
            vlans: c.vlans.into_iter().map(Arc::new).collect(),
            routes: c.routes.into_iter().map(Arc::new).collect(),
            addresses: c.addresses.into_iter().map(Arc::new).collect(),
            rules: c.rules.into_iter().map(Arc::new).collect(),
            table_hard_sync: c.table_hard_sync,
        }
    }
}

/// The objects an item came from. Almost always one: stored inline, no allocation.
pub type Sources = SmallVec<[Source; 1]>;

/// An item of the merged result with every object that asked for it (at the winning
/// precedence), sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The item.
    pub item: Arc<T>,
    /// The objects it came from.
    pub sources: Sources,
}
