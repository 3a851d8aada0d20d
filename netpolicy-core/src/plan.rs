//! Planning: from what a node has (observed) and what it should have (desired), the
//! ordered kernel operations that take it there. Pure: the netlink adapter executes the
//! operations.
//!
//! # Order
//! Deletions first, in reverse dependency order (rules, routes, addresses, links), then
//! creations and changes in dependency order (links, MTU, link up, addresses, routes,
//! rules). Within a step, operations are sorted by identity, so the same input always
//! gives the same plan.
//!
//! # One operation per changed item
//! A route change is one `ReplaceRoute` (`NLM_F_REPLACE`), a rule whose action changed
//! one `ReplaceRule`. A VLAN whose parent, id or protocol changed cannot be changed in
//! place: it is deleted and created (its addresses are added again).
//!
//! # Ownership
//! Observed items carry `owned`: whether netpolicy created them (the adapter decides by
//! its markers). Foreign items are never deleted or changed, with one opt-in exception:
//! routes in a table listed in `table_hard_sync`, where every route not desired is
//! deleted and every desired route is replaced, whoever made it, and every rule not
//! desired that looks such a table up is deleted. Deletes name the observed protocol,
//! so the kernel removes exactly the object observed. A desired item whose
//! identity is taken by a foreign item is reported in [`Plan::skipped`]: untouched when
//! it already has the desired content ([`SkipReason::ForeignIdentical`]), blocked when
//! it differs ([`SkipReason::ForeignDiffers`]).
//!
//! The adapter reports observed items normalized the way validation produces them
//! (for example `scope: None` for the kernel's default scope), so that equal means equal.

use std::collections::{BTreeMap, BTreeSet};

use ipnetwork::IpNetwork;

use crate::{
    merge::ItemRef,
    model::{HostAddress, IfName, IpFamily, Route, RouteKey, RoutingConfig, Rule, RuleKey, Vlan},
};

/// A VLAN link as observed, with its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedVlan {
    /// The link; `mtu` is the current MTU.
    pub vlan: Vlan,
    /// Whether the link is administratively up.
    pub up: bool,
    /// Whether netpolicy created it. Addresses on an owned link are owned.
    pub owned: bool,
}

/// An address on a link netpolicy did not create, as observed: every owned one, and a
/// foreign one only when a desired address has its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedAddress {
    /// The link and the address; `local_route` says whether the kernel's local route
    /// for it (table local) is there.
    pub address: HostAddress,
    /// Whether netpolicy added it (its address protocol is netpolicy's).
    pub owned: bool,
}

/// A route as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedRoute {
    /// The route.
    pub route: Route,
    /// Whether netpolicy created it.
    pub owned: bool,
    /// The kernel's route protocol (`rtm_protocol`) as observed. A delete names it, so
    /// that the kernel removes exactly this route and not another one with the same
    /// identity (table, destination, metric) made by someone else.
    pub protocol: u8,
}

/// A rule as observed. The kernel keeps rules per family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedRule {
    /// The family the rule is installed in.
    pub family: IpFamily,
    /// The rule.
    pub rule: Rule,
    /// Whether netpolicy created it.
    pub owned: bool,
    /// The rule's protocol (`FRA_PROTOCOL`) as observed; a delete names it.
    pub protocol: u8,
}

/// What the node has: every owned item, plus the foreign items the adapter saw (routes
/// in hard-synced tables, and whatever else shares an identity with a desired item).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// VLAN links.
    pub vlans: Vec<ObservedVlan>,
    /// Routes.
    pub routes: Vec<ObservedRoute>,
    /// Addresses on links netpolicy did not create.
    pub addresses: Vec<ObservedAddress>,
    /// Rules.
    pub rules: Vec<ObservedRule>,
    /// Names of links that exist but are not VLANs (a veth, a bridge, the uplink). A
    /// desired VLAN with one of these names is refused: netpolicy never adopts, marks,
    /// configures or removes a link it did not create.
    pub other_links: Vec<IfName>,
}

/// One kernel operation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Delete exactly this rule (its selector, action and protocol).
    DeleteRule {
        /// Family the rule lives in.
        family: IpFamily,
        /// The rule as observed.
        rule: Rule,
        /// Its protocol as observed.
        protocol: u8,
    },
    /// Delete exactly this route: its identity, its next hops and its protocol, so that
    /// a foreign route with the same identity is never the one removed.
    DeleteRoute {
        /// The route as observed.
        route: Route,
        /// Its route protocol as observed.
        protocol: u8,
    },
    /// Delete an address from a link.
    DeleteAddress {
        /// Interface.
        dev: IfName,
        /// Address with prefix length.
        address: IpNetwork,
    },
    /// Delete a link (its addresses and routes through it go with it).
    DeleteLink(IfName),
    /// Create a VLAN link (without addresses: those follow as `AddAddress`).
    CreateLink(Vlan),
    /// Set a link's MTU.
    SetMtu {
        /// Interface.
        dev: IfName,
        /// New MTU.
        mtu: u32,
    },
    /// Set a link administratively up.
    SetUp(IfName),
    /// Add an address to a link.
    AddAddress {
        /// Interface.
        dev: IfName,
        /// Address with prefix length.
        address: IpNetwork,
    },
    /// Delete the kernel's own `local` route of an address (its host route in table
    /// local, 255): the address stays, and only a rule-selected table delivers to it.
    /// Planned after the address is added, and whenever that route is back.
    DeleteLocalRoute {
        /// Interface the address is on.
        dev: IfName,
        /// The address (a host address).
        address: IpNetwork,
    },
    /// Create or replace a route (`NLM_F_CREATE | NLM_F_REPLACE`).
    ReplaceRoute(Route),
    /// Add a route beside a foreign route with the same identity (`NLM_F_CREATE`
    /// without `NLM_F_REPLACE`, which would overwrite whichever route the kernel lists
    /// first). Planned after deleting netpolicy's own outdated route of that identity.
    AddRoute(Route),
    /// Add a rule.
    AddRule {
        /// Family to install the rule in.
        family: IpFamily,
        /// The rule.
        rule: Rule,
    },
    /// Replace a rule whose action changed (delete `old`, add `new`: the kernel has no
    /// rule replace).
    ReplaceRule {
        /// Family.
        family: IpFamily,
        /// The rule as observed.
        old: Rule,
        /// The rule as desired.
        new: Rule,
    },
}

impl Op {
    /// Whether the operation removes something.
    pub fn is_delete(&self) -> bool {
        matches!(
            self,
            Self::DeleteRule { .. }
                | Self::DeleteRoute { .. }
                | Self::DeleteAddress { .. }
                | Self::DeleteLink(_)
                | Self::DeleteLocalRoute { .. }
        )
    }

    fn step(&self) -> u8 {
        match self {
            Self::DeleteRule { .. } => 0,
            Self::DeleteRoute { .. } => 1,
            Self::DeleteAddress { .. } => 2,
            Self::DeleteLink(_) => 3,
            Self::CreateLink(_) => 4,
            Self::SetMtu { .. } => 5,
            Self::SetUp(_) => 6,
            Self::AddAddress { .. } => 7,
            Self::DeleteLocalRoute { .. } | Self::ReplaceRoute(_) | Self::AddRoute(_) => 8,
            Self::AddRule { .. } | Self::ReplaceRule { .. } => 9,
        }
    }
}

impl std::fmt::Display for Op {
    /// `add route 10.20.0.0/16 table 100 via 192.0.2.1`: the operation in the readable
    /// form of its item (the words `netpolicy plan` uses), for logs and status.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DeleteRule { family, rule, .. } => write!(f, "delete {family} rule {rule}"),
            Self::DeleteRoute { route, protocol } => {
                write!(f, "delete route {route} proto {protocol}")
            }
            Self::DeleteAddress { dev, address } => write!(f, "delete address {address} dev {dev}"),
            Self::DeleteLink(dev) => write!(f, "delete link {dev}"),
            Self::CreateLink(v) => write!(f, "create vlan {v}"),
            Self::SetMtu { dev, mtu } => write!(f, "set mtu {mtu} dev {dev}"),
            Self::SetUp(dev) => write!(f, "set link {dev} up"),
            Self::AddAddress { dev, address } => write!(f, "add address {address} dev {dev}"),
            Self::DeleteLocalRoute { dev, address } => {
                write!(f, "delete local route {address} dev {dev} table local")
            }
            Self::ReplaceRoute(r) => write!(f, "add route {r}"),
            Self::AddRoute(r) => write!(f, "add route {r} (beside a foreign route)"),
            Self::AddRule { family, rule } => write!(f, "add {family} rule {rule}"),
            Self::ReplaceRule { family, new, .. } => write!(f, "replace {family} rule {new}"),
        }
    }
}

/// Why a desired item was left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// A foreign item with the same identity and the same content exists: nothing to do,
    /// and netpolicy will not remove it later either.
    ForeignIdentical,
    /// A foreign item with the same identity and different content exists: netpolicy
    /// does not overwrite what it did not create.
    ForeignDiffers,
    /// A desired VLAN's interface name is held by a link that is not a VLAN (a veth, a
    /// bridge, the uplink): refused, and that link is left exactly as it is.
    NameTakenByOtherLink,
}

impl SkipReason {
    /// Whether the node has the item as desired despite the skip (only for
    /// [`SkipReason::ForeignIdentical`]).
    pub fn is_satisfied(self) -> bool {
        matches!(self, Self::ForeignIdentical)
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ForeignIdentical => {
                "already present as a foreign object with the same content (left alone)"
            }
            Self::ForeignDiffers => {
                "blocked by a foreign object with the same identity and different content \
                 (netpolicy does not change what it did not create)"
            }
            Self::NameTakenByOtherLink => {
                "refused: the interface name is held by a link that is not this VLAN and \
                 not netpolicy's (it is left unchanged)"
            }
        })
    }
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.item, self.reason)
    }
}

/// A desired item the plan does not touch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Skipped {
    /// The item.
    pub item: ItemRef,
    /// Why.
    pub reason: SkipReason,
}

/// The result of [`plan`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Operations in execution order.
    pub ops: Vec<Op>,
    /// Desired items left alone because a foreign item holds their identity.
    pub skipped: Vec<Skipped>,
}

impl Plan {
    /// Whether the node already has its desired state.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Plans the operations that take `observed` to `desired`.
///
/// # Examples
/// ```
/// use netpolicy_core::{plan::{plan, Observed, Op}, spec::{RouteSpec, RoutingSpec}};
///
/// let desired = RoutingSpec {
///     routes: vec![RouteSpec { to: "10.20.0.0/16".into(), dev: Some("eth0".into()), ..Default::default() }],
///     ..Default::default()
/// }
/// .validate("spec")
/// .unwrap();
/// let p = plan(&Observed::default(), &desired);
/// assert!(matches!(&p.ops[..], [Op::ReplaceRoute(r)] if r.to.to_string() == "10.20.0.0/16"));
/// ```
pub fn plan(observed: &Observed, desired: &RoutingConfig) -> Plan {
    let mut ops = Vec::new();
    let mut skipped = Vec::new();
    let recreated = plan_vlans(observed, desired, &mut ops, &mut skipped);
    plan_routes(observed, desired, &recreated, &mut ops, &mut skipped);
    plan_addresses(observed, desired, &mut ops, &mut skipped);
    plan_rules(observed, desired, &mut ops, &mut skipped);
    ops.sort_by(|a, b| a.step().cmp(&b.step()).then_with(|| a.cmp(b)));
    skipped.sort();
    skipped.dedup();
    Plan { ops, skipped }
}

/// Returns the links that are deleted and created again: routes through them are lost
/// with them and must be installed again.
fn plan_vlans(
    observed: &Observed,
    desired: &RoutingConfig,
    ops: &mut Vec<Op>,
    skipped: &mut Vec<Skipped>,
) -> BTreeSet<IfName> {
    let mut recreated = BTreeSet::new();
    let have: BTreeMap<&IfName, &ObservedVlan> =
        observed.vlans.iter().map(|o| (&o.vlan.name, o)).collect();
    let want: BTreeSet<&IfName> = desired.vlans.iter().map(|v| &v.name).collect();
    for o in &observed.vlans {
        if o.owned && !want.contains(&o.vlan.name) {
            ops.push(Op::DeleteLink(o.vlan.name.clone()));
        }
    }
    let taken: BTreeSet<&IfName> = observed.other_links.iter().collect();
    for v in &desired.vlans {
        if taken.contains(&v.name) && !have.contains_key(&v.name) {
            skipped.push(Skipped {
                item: ItemRef::Vlan(v.name.clone()),
                reason: SkipReason::NameTakenByOtherLink,
            });
            continue;
        }
        let add_all = |ops: &mut Vec<Op>| {
            ops.push(Op::CreateLink(Vlan {
                addresses: Vec::new(),
                ..v.clone()
            }));
            ops.push(Op::SetUp(v.name.clone()));
            for a in &v.addresses {
                ops.push(Op::AddAddress {
                    dev: v.name.clone(),
                    address: *a,
                });
            }
        };
        match have.get(&v.name) {
            None => add_all(ops),
            Some(o) if !o.owned => {
                let same = o.vlan.link == v.link
                    && o.vlan.id == v.id
                    && o.vlan.protocol == v.protocol
                    && v.mtu.is_none_or(|m| o.vlan.mtu == Some(m))
                    && o.vlan.addresses == v.addresses;
                skipped.push(Skipped {
                    item: ItemRef::Vlan(v.name.clone()),
                    reason: if same {
                        SkipReason::ForeignIdentical
                    } else {
                        SkipReason::ForeignDiffers
                    },
                });
            }
            Some(o) => {
                if o.vlan.link != v.link || o.vlan.id != v.id || o.vlan.protocol != v.protocol {
                    ops.push(Op::DeleteLink(v.name.clone()));
                    add_all(ops);
                    recreated.insert(v.name.clone());
                    continue;
                }
                if let Some(m) = v.mtu
                    && o.vlan.mtu != Some(m)
                {
                    ops.push(Op::SetMtu {
                        dev: v.name.clone(),
                        mtu: m,
                    });
                }
                if !o.up {
                    ops.push(Op::SetUp(v.name.clone()));
                }
                let has: BTreeSet<&IpNetwork> = o.vlan.addresses.iter().collect();
                let wants: BTreeSet<&IpNetwork> = v.addresses.iter().collect();
                for a in has.difference(&wants) {
                    ops.push(Op::DeleteAddress {
                        dev: v.name.clone(),
                        address: **a,
                    });
                }
                for a in wants.difference(&has) {
                    ops.push(Op::AddAddress {
                        dev: v.name.clone(),
                        address: **a,
                    });
                }
            }
        }
    }
    recreated
}

/// Host addresses: an owned one not desired is deleted, a desired one not there is
/// added; a desired one that is there but not netpolicy's is left alone (and never
/// deleted later). An owned address whose kernel local route is to be gone loses it
/// (after it is added, and whenever it is back); one on `lo` whose local route is to
/// stay and is gone is added again (the kernel makes that route with the address).
fn plan_addresses(
    observed: &Observed,
    desired: &RoutingConfig,
    ops: &mut Vec<Op>,
    skipped: &mut Vec<Skipped>,
) {
    let want: BTreeSet<_> = desired.addresses.iter().map(HostAddress::key).collect();
    let have: BTreeMap<_, &ObservedAddress> = observed
        .addresses
        .iter()
        .map(|o| (o.address.key(), o))
        .collect();
    let delete = |a: &HostAddress| Op::DeleteAddress {
        dev: a.dev.clone(),
        address: a.address,
    };
    let add = |a: &HostAddress| Op::AddAddress {
        dev: a.dev.clone(),
        address: a.address,
    };
    let drop_local = |a: &HostAddress| Op::DeleteLocalRoute {
        dev: a.dev.clone(),
        address: a.address,
    };
    for o in &observed.addresses {
        if o.owned && !want.contains(&o.address.key()) {
            ops.push(delete(&o.address));
        }
    }
    for a in &desired.addresses {
        match have.get(&a.key()) {
            None => {
                ops.push(add(a));
                if !a.local_route {
                    ops.push(drop_local(a));
                }
            }
            Some(o) if o.owned => match (a.local_route, o.address.local_route) {
                (false, true) => ops.push(drop_local(a)),
                // Only on `lo`: elsewhere the kernel also lacks the route while the link
                // is down or an IPv6 address is tentative, and adding the address again
                // would restart that every pass. (Only lo's VIPs are made without it.)
                (true, false) if a.dev.as_str() == "lo" => {
                    ops.push(delete(a));
                    ops.push(add(a));
                }
                _ => {}
            },
            Some(_) => skipped.push(Skipped {
                item: ItemRef::Address(a.clone()),
                reason: SkipReason::ForeignIdentical,
            }),
        }
    }
}

fn plan_routes(
    observed: &Observed,
    desired: &RoutingConfig,
    recreated: &BTreeSet<IfName>,
    ops: &mut Vec<Op>,
    skipped: &mut Vec<Skipped>,
) {
    let through_recreated = |r: &Route| {
        r.dev.as_ref().is_some_and(|d| recreated.contains(d))
            || r.nexthops
                .iter()
                .any(|n| n.dev.as_ref().is_some_and(|d| recreated.contains(d)))
    };
    let hard: BTreeSet<u32> = desired.table_hard_sync.iter().copied().collect();
    let want: BTreeMap<RouteKey, &Route> = desired.routes.iter().map(|r| (r.key(), r)).collect();
    // Every observed route of each identity, in the kernel's order: the kernel keeps
    // several routes of one identity when they differ (ours and a foreign twin).
    let mut have: BTreeMap<RouteKey, Vec<&ObservedRoute>> = BTreeMap::new();
    let delete = |o: &ObservedRoute| Op::DeleteRoute {
        route: o.route.clone(),
        protocol: o.protocol,
    };
    for o in &observed.routes {
        let k = o.route.key();
        let manageable = o.owned || hard.contains(&k.table);
        if !want.contains_key(&k) {
            if manageable {
                ops.push(delete(o));
            }
            continue;
        }
        have.entry(k).or_default().push(o);
    }
    for (k, r) in &want {
        // Routes through a link that is deleted and created again go with it.
        let all: Vec<&ObservedRoute> = have
            .get(k)
            .into_iter()
            .flatten()
            .copied()
            .filter(|o| !through_recreated(&o.route))
            .collect();
        if hard.contains(&k.table) {
            // Hard-synced: exactly the desired route stays, whoever made the others.
            let keep = all
                .iter()
                .filter(|o| o.route == **r)
                .max_by_key(|o| o.owned);
            for o in &all {
                if keep.is_none_or(|kept| !std::ptr::eq(*o, *kept)) {
                    ops.push(delete(o));
                }
            }
            if keep.is_none() {
                // The deletes run first: nothing of this identity is left to replace.
                ops.push(Op::ReplaceRoute((*r).clone()));
            }
            continue;
        }
        let (owned, foreign): (Vec<&ObservedRoute>, Vec<&ObservedRoute>) =
            all.iter().copied().partition(|o| o.owned);

        if owned.is_empty() {
            match foreign.iter().any(|o| o.route == **r) {
                _ if foreign.is_empty() => ops.push(Op::ReplaceRoute((*r).clone())),
                true => skipped.push(Skipped {
                    item: ItemRef::Route(*k),
                    reason: SkipReason::ForeignIdentical,
                }),
                false => skipped.push(Skipped {
                    item: ItemRef::Route(*k),
                    reason: SkipReason::ForeignDiffers,
                }),
            }
            continue;
        }
        let keep = owned.iter().position(|o| o.route == **r);
        if let Some(i) = keep {
            // Ours is as desired; a second copy of ours (a concurrent writer) goes.
            for (j, o) in owned.iter().enumerate() {
                if j != i {
                    ops.push(delete(o));
                }
            }
        } else if !foreign.is_empty() {
            // Ours is outdated beside a foreign twin: a replace would overwrite
            // whichever the kernel lists first, so delete exactly ours and add the
            // new one beside the foreign route.
            ops.extend(owned.iter().map(|o| delete(o)));
            ops.push(Op::AddRoute((*r).clone()));
        } else {
            // Only ours: extra copies go, the first is replaced in place.
            ops.extend(owned.iter().skip(1).map(|o| delete(o)));
            ops.push(Op::ReplaceRoute((*r).clone()));
        }
    }
}

fn plan_rules(
    observed: &Observed,
    desired: &RoutingConfig,
    ops: &mut Vec<Op>,
    skipped: &mut Vec<Skipped>,
) {
    let mut want: BTreeMap<(IpFamily, &RuleKey), &Rule> = BTreeMap::new();
    for r in &desired.rules {
        match r.key.family() {
            Some(f) => {
                want.insert((f, &r.key), r);
            }
            None => {
                want.insert((IpFamily::V4, &r.key), r);
                want.insert((IpFamily::V6, &r.key), r);
            }
        }
    }
    let hard: BTreeSet<u32> = desired.table_hard_sync.iter().copied().collect();
    let mut have: BTreeMap<(IpFamily, &RuleKey), &ObservedRule> = BTreeMap::new();
    for o in &observed.rules {
        let k = (o.family, &o.rule.key);
        // In a hard-synced table's name, a foreign rule that looks the table up and is
        // not desired goes too (ipruler's table-hard-sync).
        let hard_synced = o.rule.action.table().is_some_and(|t| hard.contains(&t));
        if (o.owned || hard_synced) && !want.contains_key(&k) {
            ops.push(Op::DeleteRule {
                family: o.family,
                rule: o.rule.clone(),
                protocol: o.protocol,
            });
        }
        if o.owned || !have.contains_key(&k) {
            have.insert(k, o);
        }
    }
    for ((family, key), r) in &want {
        match have.get(&(*family, *key)) {
            None => ops.push(Op::AddRule {
                family: *family,
                rule: (*r).clone(),
            }),
            Some(o) if o.rule == **r => {
                if !o.owned {
                    skipped.push(Skipped {
                        item: ItemRef::Rule((*key).clone()),
                        reason: SkipReason::ForeignIdentical,
                    });
                }
            }
            Some(o) if o.owned => ops.push(Op::ReplaceRule {
                family: *family,
                old: o.rule.clone(),
                new: (*r).clone(),
            }),
            Some(_) => skipped.push(Skipped {
                item: ItemRef::Rule((*key).clone()),
                reason: SkipReason::ForeignDiffers,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{AddressSpec, RouteSpec, RoutingSpec, RuleSpec, VlanSpec};

    fn desired(spec: RoutingSpec) -> RoutingConfig {
        spec.validate("spec").unwrap()
    }

    fn route(to: &str, dev: &str, table: u32) -> RouteSpec {
        RouteSpec {
            to: to.into(),
            dev: Some(dev.into()),
            table: Some(table),
            ..Default::default()
        }
    }

    fn observed_from(cfg: &RoutingConfig, owned: bool) -> Observed {
        Observed {
            vlans: cfg
                .vlans
                .iter()
                .map(|v| ObservedVlan {
                    vlan: v.clone(),
                    up: true,
                    owned,
                })
                .collect(),
            routes: cfg
                .routes
                .iter()
                .map(|r| ObservedRoute {
                    route: r.clone(),
                    owned,
                    protocol: if owned { 203 } else { 4 },
                })
                .collect(),
            rules: cfg
                .rules
                .iter()
                .flat_map(|r| {
                    let fams = match r.key.family() {
                        Some(f) => vec![f],
                        None => vec![IpFamily::V4, IpFamily::V6],
                    };
                    fams.into_iter().map(|family| ObservedRule {
                        family,
                        rule: r.clone(),
                        owned,
                        protocol: if owned { 203 } else { 0 },
                    })
                })
                .collect(),
            addresses: cfg
                .addresses
                .iter()
                .map(|a| ObservedAddress {
                    address: a.clone(),
                    owned,
                })
                .collect(),
            other_links: Vec::new(),
        }
    }

    #[test]
    fn host_addresses_are_added_removed_when_owned_and_left_when_foreign() {
        let want = desired(RoutingSpec {
            addresses: vec![
                AddressSpec {
                    dev: "lo".into(),
                    address: "203.0.113.7/32".into(),
                    ..Default::default()
                },
                AddressSpec {
                    dev: "eth0".into(),
                    address: "192.0.2.9/24".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let none = plan(&Observed::default(), &want);
        assert_eq!(
            none.ops.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "add address 192.0.2.9/24 dev eth0",
                "add address 203.0.113.7/32 dev lo"
            ]
        );
        // Applied: nothing to do. Someone else's identical address: left alone, reported.
        assert!(plan(&observed_from(&want, true), &want).is_empty());
        let foreign = plan(&observed_from(&want, false), &want);
        assert!(foreign.ops.is_empty());
        assert_eq!(foreign.skipped.len(), 2);
        assert!(foreign.skipped.iter().all(|s| s.reason.is_satisfied()));
        // No longer desired: ours go, foreign ones stay.
        let empty = RoutingConfig::default();
        assert_eq!(plan(&observed_from(&want, true), &empty).ops.len(), 2);
        assert!(plan(&observed_from(&want, false), &empty).is_empty());
    }

    #[test]
    fn an_address_without_its_local_route_loses_it_when_added_and_whenever_it_is_back() {
        let want = desired(RoutingSpec {
            addresses: vec![AddressSpec {
                dev: "lo".into(),
                address: "20.0.0.1/32".into(),
                local_route: Some(false),
            }],
            ..Default::default()
        });
        let text = |p: Plan| p.ops.iter().map(ToString::to_string).collect::<Vec<_>>();
        // Added, then its local route goes (the kernel makes it with the address).
        assert_eq!(
            text(plan(&Observed::default(), &want)),
            [
                "add address 20.0.0.1/32 dev lo",
                "delete local route 20.0.0.1/32 dev lo table local"
            ]
        );
        // As desired: nothing. The local route back (lo set down and up): it goes.
        let mut o = observed_from(&want, true);
        assert!(plan(&o, &want).is_empty());
        o.addresses[0].address.local_route = true;
        assert_eq!(
            text(plan(&o, &want)),
            ["delete local route 20.0.0.1/32 dev lo table local"]
        );
        // Desired with its local route again: the address is added again (which is
        // what makes the kernel's route), not left without it.
        let plain = desired(RoutingSpec {
            addresses: vec![AddressSpec {
                dev: "lo".into(),
                address: "20.0.0.1/32".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(
            text(plan(&observed_from(&want, true), &plain)),
            [
                "delete address 20.0.0.1/32 dev lo",
                "add address 20.0.0.1/32 dev lo"
            ]
        );
        // Elsewhere than lo, a missing local route is the kernel's doing (a link down, an
        // IPv6 address still tentative): no churn.
        let mut down = observed_from(&plain, true);
        down.addresses[0].address.dev = IfName::new("eth0").unwrap();
        down.addresses[0].address.local_route = false;
        let mut on_eth0 = plain.clone();
        on_eth0.addresses[0].dev = IfName::new("eth0").unwrap();
        assert!(plan(&down, &on_eth0).is_empty());
        // Someone else's address of that identity: left alone, local route and all.
        let mut foreign = observed_from(&plain, false);
        foreign.addresses[0].address.local_route = true;
        let p = plan(&foreign, &want);
        assert!(p.ops.is_empty() && p.skipped.len() == 1, "{p:?}");
    }

    #[test]
    fn removing_the_local_route_of_a_prefix_is_refused_naming_the_field() {
        let e = RoutingSpec {
            addresses: vec![AddressSpec {
                dev: "lo".into(),
                address: "20.0.0.0/24".into(),
                local_route: Some(false),
            }],
            ..Default::default()
        }
        .validate("spec")
        .unwrap_err()
        .to_string();
        assert!(e.contains("spec.addresses[0].localRoute"), "{e}");
    }

    fn full() -> RoutingConfig {
        desired(RoutingSpec {
            vlans: vec![VlanSpec {
                link: "eth0".into(),
                id: 100,
                addresses: vec!["10.10.0.5/24".into()],
                ..Default::default()
            }],
            routes: vec![route("10.20.0.0/16", "eth0.100", 100)],
            rules: vec![RuleSpec {
                priority: 1000,
                from: Some("10.10.0.0/24".into()),
                table: Some(100),
                ..Default::default()
            }],
            ..Default::default()
        })
    }

    #[test]
    fn from_nothing_creates_links_then_addresses_then_routes_then_rules() {
        let p = plan(&Observed::default(), &full());
        let kinds: Vec<u8> = p.ops.iter().map(Op::step).collect();
        assert_eq!(kinds, [4, 6, 7, 8, 9], "{:?}", p.ops);
    }

    #[test]
    fn applying_the_same_state_again_is_a_no_op() {
        let d = full();
        assert!(plan(&observed_from(&d, true), &d).is_empty());
    }

    #[test]
    fn removing_everything_deletes_in_reverse_order() {
        let p = plan(&observed_from(&full(), true), &RoutingConfig::default());
        let kinds: Vec<u8> = p.ops.iter().map(Op::step).collect();
        assert_eq!(kinds, [0, 1, 3], "{:?}", p.ops);
    }

    #[test]
    fn one_changed_route_is_one_replace() {
        let d = full();
        let mut o = observed_from(&d, true);
        o.routes[0].route.dev = Some(IfName::new("eth1").unwrap());
        let p = plan(&o, &d);
        assert_eq!(p.ops, [Op::ReplaceRoute(d.routes[0].clone())]);
    }

    #[test]
    fn foreign_items_are_never_touched_outside_hard_synced_tables() {
        let d = desired(RoutingSpec {
            routes: vec![route("10.20.0.0/16", "eth0", 100)],
            ..Default::default()
        });
        let foreign = desired(RoutingSpec {
            routes: vec![
                route("10.20.0.0/16", "eth1", 100),
                route("10.30.0.0/16", "eth1", 100),
            ],
            ..Default::default()
        });
        let o = observed_from(&foreign, false);
        let p = plan(&o, &d);
        assert!(p.ops.is_empty(), "{:?}", p.ops);
        assert_eq!(p.skipped[0].reason, SkipReason::ForeignDiffers);

        // With table 100 hard-synced, both foreign routes are deleted (each named
        // exactly) and the desired one created.
        let hard = RoutingConfig {
            table_hard_sync: vec![100],
            ..d
        };
        let p = plan(&o, &hard);
        assert_eq!(
            p.ops,
            [
                Op::DeleteRoute {
                    route: foreign.routes[0].clone(),
                    protocol: 4
                },
                Op::DeleteRoute {
                    route: foreign.routes[1].clone(),
                    protocol: 4
                },
                Op::ReplaceRoute(hard.routes[0].clone())
            ]
        );
        assert!(p.skipped.is_empty());
    }

    #[test]
    fn an_identical_foreign_item_is_left_and_reported() {
        let d = full();
        let p = plan(&observed_from(&d, false), &d);
        assert!(p.ops.is_empty());
        assert_eq!(p.skipped.len(), 3);
        assert!(
            p.skipped
                .iter()
                .all(|s| s.reason == SkipReason::ForeignIdentical)
        );
    }

    #[test]
    fn a_rule_without_prefixes_is_planned_for_both_families() {
        let d = desired(RoutingSpec {
            rules: vec![RuleSpec {
                priority: 10,
                fwmark: Some("0x1".into()),
                table: Some(100),
                ..Default::default()
            }],
            ..Default::default()
        });
        let p = plan(&Observed::default(), &d);
        assert_eq!(p.ops.len(), 2);
        assert!(plan(&observed_from(&d, true), &d).is_empty());
    }

    #[test]
    fn a_vlan_with_a_new_id_is_recreated_and_its_routes_reinstalled() {
        let d = full();
        let mut o = observed_from(&d, true);
        o.vlans[0].vlan.id = 101;
        let p = plan(&o, &d);
        assert_eq!(
            p.ops,
            [
                Op::DeleteLink(d.vlans[0].name.clone()),
                Op::CreateLink(Vlan {
                    addresses: vec![],
                    ..d.vlans[0].clone()
                }),
                Op::SetUp(d.vlans[0].name.clone()),
                Op::AddAddress {
                    dev: d.vlans[0].name.clone(),
                    address: d.vlans[0].addresses[0]
                },
                Op::ReplaceRoute(d.routes[0].clone()),
            ]
        );
    }

    #[test]
    fn address_and_mtu_drift_are_repaired_item_by_item() {
        let mut d = full();
        d.vlans[0].mtu = Some(9000);
        let mut o = observed_from(&full(), true);
        o.vlans[0].vlan.mtu = Some(1500);
        o.vlans[0].up = false;
        o.vlans[0].vlan.addresses = vec!["10.10.0.6/24".parse().unwrap()];
        let p = plan(&o, &d);
        let kinds: Vec<u8> = p.ops.iter().map(Op::step).collect();
        assert_eq!(kinds, [2, 5, 6, 7], "{:?}", p.ops);
    }

    #[test]
    fn a_vlan_whose_name_another_kind_of_link_holds_is_refused_and_that_link_untouched() {
        let d = full();
        let o = Observed {
            other_links: vec![d.vlans[0].name.clone()],
            ..Observed::default()
        };
        let p = plan(&o, &d);
        assert!(
            p.ops.iter().all(|op| !matches!(
                op,
                Op::CreateLink(_) | Op::SetUp(_) | Op::AddAddress { .. } | Op::SetMtu { .. }
            )),
            "{:?}",
            p.ops
        );
        assert_eq!(
            p.skipped,
            [Skipped {
                item: ItemRef::Vlan(d.vlans[0].name.clone()),
                reason: SkipReason::NameTakenByOtherLink
            }]
        );
    }

    #[test]
    fn an_outdated_owned_route_beside_a_foreign_twin_is_deleted_exactly_and_added_beside() {
        let d = desired(RoutingSpec {
            routes: vec![route("10.20.0.0/16", "eth0", 100)],
            ..Default::default()
        });
        let ours = desired(RoutingSpec {
            routes: vec![route("10.20.0.0/16", "eth2", 100)],
            ..Default::default()
        });
        let theirs = desired(RoutingSpec {
            routes: vec![route("10.20.0.0/16", "eth1", 100)],
            ..Default::default()
        });
        let mut o = observed_from(&theirs, false);
        o.routes.extend(observed_from(&ours, true).routes);
        let p = plan(&o, &d);
        assert_eq!(
            p.ops,
            [
                Op::DeleteRoute {
                    route: ours.routes[0].clone(),
                    protocol: 203
                },
                Op::AddRoute(d.routes[0].clone())
            ]
        );
        // With nothing desired, only ours goes, named with its protocol.
        let p = plan(&o, &RoutingConfig::default());
        assert_eq!(
            p.ops,
            [Op::DeleteRoute {
                route: ours.routes[0].clone(),
                protocol: 203
            }]
        );
    }

    #[test]
    fn operations_and_skips_read_like_ip_commands() {
        let d = full();
        let p = plan(&Observed::default(), &d);
        let text: Vec<String> = p.ops.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "create vlan eth0.100: 802.1Q id 100 on eth0",
                "set link eth0.100 up",
                "add address 10.10.0.5/24 dev eth0.100",
                "add route 10.20.0.0/16 table 100 dev eth0.100",
                "add IPv4 rule priority 1000 from 10.10.0.0/24 lookup 100",
            ]
        );
        let s = Skipped {
            item: ItemRef::Route(d.routes[0].key()),
            reason: SkipReason::ForeignDiffers,
        };
        assert!(
            s.to_string()
                .starts_with("route 10.20.0.0/16 table 100: blocked by a foreign")
        );
    }

    #[test]
    fn a_hard_synced_table_loses_foreign_rules_that_look_it_up() {
        let d = desired(RoutingSpec {
            rules: vec![RuleSpec {
                priority: 100,
                from: Some("10.1.0.0/16".into()),
                table: Some(100),
                ..Default::default()
            }],
            table_hard_sync: vec![100],
            ..Default::default()
        });
        let foreign = desired(RoutingSpec {
            rules: vec![
                RuleSpec {
                    priority: 200,
                    from: Some("10.2.0.0/16".into()),
                    table: Some(100),
                    ..Default::default()
                },
                RuleSpec {
                    priority: 300,
                    from: Some("10.3.0.0/16".into()),
                    table: Some(101),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let mut o = observed_from(&foreign, false);
        o.rules.extend(observed_from(&d, true).rules);
        let p = plan(&o, &d);
        assert_eq!(
            p.ops,
            [Op::DeleteRule {
                family: IpFamily::V4,
                rule: foreign.rules[0].clone(),
                protocol: 0
            }],
            "only the foreign rule looking up table 100 goes"
        );
    }
}
