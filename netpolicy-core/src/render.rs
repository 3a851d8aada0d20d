//! Rendering: validated and merged configurations back into wire form, in canonical
//! text. [`RenderedSpec`] is the spec of a `NodeNetworkConfig` and a node's entry in
//! `netpolicy plan -o json`; [`RoutingSpec::from_config`] is the inverse of validation.
//!
//! This module sits above [`crate::spec`], [`crate::model`] and [`crate::merge`] (it
//! reads all three), so that none of them depends on another in a cycle.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod delta;
pub use delta::{DeltaError, ListDelta, RenderedDelta, Run};

use crate::{
    merge::{LayeredConfig, MergedConfig, Source, Sourced},
    model::{HostAddress, Route, RoutingConfig, Rule, RuleAction, Vlan},
    spec::{AddressSpec, IntOrString, NextHopSpec, RouteSpec, RoutingSpec, RuleSpec, VlanSpec},
};

impl RoutingSpec {
    /// Renders a validated configuration in canonical text. Validating the result gives
    /// back `config`.
    pub fn from_config(config: &RoutingConfig) -> Self {
        Self {
            vlans: config.vlans.iter().map(VlanSpec::from).collect(),
            routes: config.routes.iter().map(RouteSpec::from).collect(),
            addresses: config.addresses.iter().map(AddressSpec::from).collect(),
            rules: config.rules.iter().map(RuleSpec::from).collect(),
            table_hard_sync: config.table_hard_sync.clone(),
        }
    }
}

impl From<&Vlan> for VlanSpec {
    fn from(v: &Vlan) -> Self {
        Self {
            link: v.link.to_string(),
            id: u32::from(v.id),
            name: Some(v.name.to_string()),
            protocol: Some(v.protocol.to_string()),
            mtu: v.mtu,
            addresses: v.addresses.iter().map(ToString::to_string).collect(),
        }
    }
}

impl From<&HostAddress> for AddressSpec {
    fn from(a: &HostAddress) -> Self {
        Self {
            dev: a.dev.to_string(),
            address: a.address.to_string(),
            local_route: (!a.local_route).then_some(false),
        }
    }
}

impl From<&Route> for RouteSpec {
    fn from(r: &Route) -> Self {
        Self {
            type_: (r.kind != crate::model::RouteKind::Unicast).then(|| r.kind.as_str().to_owned()),
            to: r.to.to_string(),
            via: r.via.map(|a| a.to_string()),
            dev: r.dev.as_ref().map(ToString::to_string),
            table: Some(r.table),
            metric: Some(r.metric),
            scope: r.scope.map(|s| s.as_str().to_owned()),
            onlink: r.onlink,
            src: r.src.map(|a| a.to_string()),
            nexthops: r
                .nexthops
                .iter()
                .map(|n| NextHopSpec {
                    via: n.via.map(|a| a.to_string()),
                    dev: n.dev.as_ref().map(ToString::to_string),
                    weight: Some(u32::from(n.weight)),
                })
                .collect(),
        }
    }
}

impl From<&Rule> for RuleSpec {
    fn from(r: &Rule) -> Self {
        let k = &r.key;
        Self {
            priority: k.priority,
            from: k.from.map(|n| n.to_string()),
            to: k.to.map(|n| n.to_string()),
            iif: k.iif.as_ref().map(ToString::to_string),
            oif: k.oif.as_ref().map(ToString::to_string),
            fwmark: k.fwmark.map(|m| IntOrString(m.to_string())),
            ip_proto: k.ip_proto.map(|p| IntOrString(p.to_string())),
            sport: k.sport.map(|p| IntOrString(p.to_string())),
            dport: k.dport.map(|p| IntOrString(p.to_string())),
            table: r.action.table(),
            action: match r.action {
                RuleAction::Lookup(_) => None,
                other => Some(other.name().to_owned()),
            },
            invert: k.invert,
        }
    }
}

/// The object an item of a rendered configuration came from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    /// `ClusterConfig`, `NodeConfig`, or the job object that asked for it
    /// (`RoutedIP`).
    pub kind: String,
    /// Object name.
    pub name: String,
}

impl From<&Source> for SourceRef {
    fn from(s: &Source) -> Self {
        Self {
            kind: s.kind.as_str().to_owned(),
            name: s.name.to_string(),
        }
    }
}

/// An item of a rendered configuration with the objects it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourcedSpec<T> {
    /// The item, in canonical text.
    #[serde(flatten)]
    pub item: T,
    /// Every object that asked for the item at the winning precedence.
    pub sources: Vec<SourceRef>,
}

impl RenderedSpec {
    /// Appends `more`'s vlans, routes, addresses and rules to this one's (its tables
    /// are not taken): how a rendering's parts and layers join.
    pub fn extend(&mut self, more: &Self) {
        self.vlans.extend(more.vlans.iter().cloned());
        self.routes.extend(more.routes.iter().cloned());
        self.addresses.extend(more.addresses.iter().cloned());
        self.rules.extend(more.rules.iter().cloned());
    }

    /// A shared rendering with one node's own items over it (the node agent model:
    /// [`crate::fleet`]): an own item equal to a shared one replaces it (its sources are
    /// the node's), the others follow the shared ones; the hard-synced tables are the
    /// shared rendering's.
    ///
    /// ```
    /// use netpolicy_core::render::{RenderedSpec, SourceRef, SourcedSpec};
    /// use netpolicy_core::spec::RouteSpec;
    ///
    /// let route = |to: &str, source: &str| SourcedSpec {
    ///     item: RouteSpec { to: to.into(), ..Default::default() },
    ///     sources: vec![SourceRef { kind: "NodeConfig".into(), name: source.into() }],
    /// };
    /// let shared = RenderedSpec { routes: vec![route("10.0.0.0/8", "a")], ..Default::default() };
    /// let own = RenderedSpec {
    ///     routes: vec![route("10.0.0.0/8", "b"), route("192.0.2.0/24", "b")],
    ///     ..Default::default()
    /// };
    /// let node = shared.overlay(&own);
    /// assert_eq!(node.routes.len(), 2);
    /// assert_eq!(node.routes[0].sources[0].name, "b");
    /// ```
    #[must_use]
    pub fn overlay(&self, own: &Self) -> Self {
        fn join<T: PartialEq + Clone>(
            shared: &[SourcedSpec<T>],
            own: &[SourcedSpec<T>],
        ) -> Vec<SourcedSpec<T>> {
            shared
                .iter()
                .filter(|s| !own.iter().any(|o| o.item == s.item))
                .chain(own)
                .cloned()
                .collect()
        }
        Self {
            vlans: join(&self.vlans, &own.vlans),
            routes: join(&self.routes, &own.routes),
            addresses: join(&self.addresses, &own.addresses),
            rules: join(&self.rules, &own.rules),
            table_hard_sync: self.table_hard_sync.clone(),
        }
    }

    /// The routing items without their sources, to validate and apply
    /// (`RoutingSpec::validate` gives the model the agent applies).
    pub fn routing(&self) -> RoutingSpec {
        RoutingSpec {
            vlans: self.vlans.iter().map(|v| v.item.clone()).collect(),
            routes: self.routes.iter().map(|r| r.item.clone()).collect(),
            addresses: self.addresses.iter().map(|a| a.item.clone()).collect(),
            rules: self.rules.iter().map(|r| r.item.clone()).collect(),
            table_hard_sync: self.table_hard_sync.clone(),
        }
    }
}

/// A node's merged configuration in wire form: the spec of a `NodeNetworkConfig`, and
/// a node's entry in `netpolicy plan -o json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenderedSpec {
    /// VLANs with their addresses.
    #[serde(default)]
    pub vlans: Vec<SourcedSpec<VlanSpec>>,
    /// Routes.
    #[serde(default)]
    pub routes: Vec<SourcedSpec<RouteSpec>>,
    /// Addresses on links netpolicy did not create.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<SourcedSpec<AddressSpec>>,
    /// Rules.
    #[serde(default)]
    pub rules: Vec<SourcedSpec<RuleSpec>>,
    /// Tables the agent hard-syncs on this node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub table_hard_sync: Vec<u32>,
}

fn sourced<'i, T: 'i, S>(items: impl IntoIterator<Item = &'i Sourced<T>>) -> Vec<SourcedSpec<S>>
where
    for<'a> S: From<&'a T>,
{
    items
        .into_iter()
        .map(|s| SourcedSpec {
            item: S::from(&*s.item),
            sources: s.sources.iter().map(SourceRef::from).collect(),
        })
        .collect()
}

impl RenderedSpec {
    /// Renders a merged configuration in canonical text.
    pub fn from_merged(m: &MergedConfig) -> Self {
        Self {
            vlans: sourced(&m.vlans),
            routes: sourced(&m.routes),
            addresses: sourced(&m.addresses),
            rules: sourced(&m.rules),
            table_hard_sync: m.table_hard_sync.clone(),
        }
    }

    /// Renders a node's merged configuration (both its layers) in canonical text.
    pub fn from_config(c: &LayeredConfig) -> Self {
        Self {
            vlans: sourced(c.vlans()),
            routes: sourced(c.routes()),
            addresses: sourced(c.addresses()),
            rules: sourced(c.rules()),
            table_hard_sync: c.table_hard_sync().to_vec(),
        }
    }
}
