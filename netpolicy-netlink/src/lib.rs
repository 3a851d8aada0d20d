//! # netpolicy-netlink
//!
//! The kernel adapter of netpolicy, for node agents: reads a network namespace's links,
//! addresses, routes and rules through rtnetlink, marks what it creates as its own, and
//! executes [`netpolicy_core::plan`]'s operations with one result per item,
//! idempotently, never touching objects it did not create.
//!
//! ```toml
//! [dependencies]
//! netpolicy-netlink = "0.1"
//! ```
//!
//! netpolicy-core (the desired state, `RoutingSpec` → `RoutingConfig`) and `ipnetwork` are
//! re-exported (`netpolicy_netlink::netpolicy_core`, `netpolicy_netlink::prelude::*`): this
//! one line is enough. MSRV: Rust 1.89.
//!
//! **Privileges.** Changing a namespace needs `CAP_NET_ADMIN` (root has it; the netpolicy
//! chart grants the agent `NET_ADMIN`): without it a reconcile that would change something
//! returns `Error::Capability` naming it, before any change (a dry run and reading need no
//! capability). Duplicate-address probes of IPv4 addresses open a packet socket, which
//! needs `CAP_NET_RAW`: without it (or on a link that is down) the address is added
//! unchecked and its outcome says so (`Outcome::Unprobed { why }`). Entering a named
//! namespace (`/run/netns/<name>`) needs `CAP_SYS_ADMIN`.
//!
//! # Ownership
//! - Routes carry route protocol [`Ownership::route_protocol`] (default
//!   [`DEFAULT_PROTOCOL`] = 203, unassigned in iproute2's `rt_protos`).
//! - Rules carry the same protocol (`FRA_PROTOCOL`, Linux 4.17+), at any priority: the
//!   protocol alone decides, so every priority validation accepts (1..=32765,
//!   [`netpolicy_core::model::RULE_PRIORITY_MIN`]..=[`netpolicy_core::model::RULE_PRIORITY_MAX`])
//!   is one netpolicy can find again and remove. (An earlier version also required a
//!   priority range; a rule created outside it escaped ownership.)
//! - Links carry the interface alias [`codec::LINK_ALIAS`] (`netpolicy`), set by index
//!   only after the kernel answered the create of that very link.
//! - Addresses carry the same number as their address protocol (`IFA_PROTO`, Linux
//!   5.18+), so an address netpolicy put on a link it did not create (`lo`, `eth0`) is
//!   found again after a restart; addresses of netpolicy's VLANs go with the VLAN.
//!
//! Reconcile and cleanup delete only owned objects, and name them exactly: a route
//! delete carries the route's protocol, gateway, device and next hops, so the kernel
//! cannot pick a foreign route of the same identity. A desired item whose identity is
//! already held by a foreign object is left alone and reported in
//! [`Report::skipped`]: untouched when identical, blocked when it differs (the planner's
//! rule). A desired VLAN whose name another kind of link holds is refused and that
//! link is not touched. The one opt-in exception is a table in `tableHardSync`, where
//! every route not desired is removed whoever made it.
//!
//! Every pass that changed something is checked: the namespace is observed again and
//! whatever still differs from the desired state is in [`Report::unconverged`].
//!
//! # Results
//! Every operation gets an [`Outcome`]: done; `EEXIST` on an add, or
//! `ENOENT`/`ESRCH`/`ENODEV`/`EADDRNOTAVAIL` on a delete, is idempotent success
//! ([`Outcome::AlreadyPresent`], [`Outcome::AlreadyGone`]); an address another host
//! uses is [`Outcome::Duplicate`]; any other kernel error is attached to its item with
//! errno and message and does not stop the other items.
//!
//! # Drift, notifications, duplicates
//! - [`monitor`]: the kernel's notifications as typed changes, each with the requesting
//!   socket's port ([`Adapter::port`] is the adapter's own) and netpolicy's mark;
//!   [`monitor::keep`] applies a desired state and repairs it whenever someone else
//!   changes what it owns (p99 17-20 ms per kind from a removal to the re-add, 92 ms for
//!   addresses probed for duplicates first; `benches/drift.rs`).
//! - [`dad`]: an address another host on the segment uses is not added
//!   ([`Outcome::Duplicate`], naming its MAC for IPv4): ARP probes as RFC 5227 says
//!   before IPv4 addresses, the kernel's DAD read back after IPv6 ones.
//! - [`Adapter::disown`]: owned objects left in the kernel as they are, no longer
//!   netpolicy's.
//!
//! # Speed
//! Requests are pipelined ([`conn::Conn::execute`]): sent in chunks of 512 with one
//! sequence number each, answers matched back by sequence number. This crate uses
//! `netlink-packet-route` for messages and `netlink-sys` for the socket directly
//! rather than `rtnetlink`'s one-future-per-request handle: the batch-and-attribute
//! loop is the whole point of the adapter, and the benchmark (`benches/netlink.rs`)
//! measures it against `ip -batch`.
//!
//! # Examples
//! ```no_run
//! use netpolicy_netlink::{Adapter, Namespace, Ownership};
//! use netpolicy_core::model::RoutingConfig;
//!
//! let mut a = Adapter::open(&Namespace::Named("blue".into()), Ownership::default())?;
//! let desired = RoutingConfig::default();
//! let report = a.reconcile(&desired, false)?;
//! for r in &report.results {
//!     println!("{:?}: {:?}", r.op, r.outcome);
//! }
//! # Ok::<(), netpolicy_netlink::Error>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod codec;
pub mod conn;
pub mod dad;
pub mod monitor;
pub mod probe;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testns;

use std::collections::{BTreeMap, BTreeSet};

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
// NLM_F_EXCL guards links and addresses; rules go without it (see `messages`).
use netlink_packet_route::{
    AddressFamily, RouteNetlinkMessage,
    address::{AddressAttribute, AddressMessage},
    link::{InfoData, InfoKind, InfoVlan, LinkAttribute, LinkFlags, LinkInfo, LinkMessage},
    route::RouteMessage,
    rule::RuleMessage,
};
use netpolicy_core::{
    model::{
        HostAddress, IfName, Route, RouteKey, RoutingConfig, Rule, RuleKey, Vlan, VlanProtocol,
    },
    plan::{
        Observed, ObservedAddress, ObservedRoute, ObservedRule, ObservedVlan, Op, Plan, Skipped,
        plan,
    },
};

use codec::{LINK_ALIAS, Links};
pub use conn::{KernelError, Namespace};
/// netpolicy-core, whose desired state ([`netpolicy_core::model::RoutingConfig`], from a
/// validated [`netpolicy_core::spec::RoutingSpec`]) and operations
/// ([`netpolicy_core::plan::Op`]) this crate's signatures use, and `ipnetwork`: both
/// re-exported, so an embedder needs this one dependency line.
pub use {ipnetwork, netpolicy_core};

/// What an embedder uses: `use netpolicy_netlink::prelude::*;` brings in the adapter,
/// the namespace to open, ownership, and what a pass reports.
pub mod prelude {
    pub use crate::{
        Adapter, Error, KernelError, Namespace, OpResult, Outcome, Ownership, Report, Result,
    };
    pub use netpolicy_core::{model::RoutingConfig, spec::RoutingSpec};
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors that stop a whole pass (per-item failures are [`Outcome::Failed`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The socket or namespace failed; the message ends with the system's reason
    /// (`opening namespace /run/netns/x: No such file or directory (os error 2)`).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's error (shared: errors are `Clone`).
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },
    /// The kernel refused a dump.
    #[error("kernel: {0}")]
    Kernel(KernelError),
    /// A kernel answer did not parse.
    #[error("decoding a netlink answer: {0}")]
    Decode(String),
    /// The process lacks a capability a change needs: said once, before any change is
    /// attempted (rather than every item failing with `EPERM`).
    #[error(
        "{what} needs {capability}, which this process does not have (run it as root, or \
         grant the capability: the netpolicy chart gives its agent NET_ADMIN and NET_RAW)"
    )]
    Capability {
        /// The capability (`CAP_NET_ADMIN`).
        capability: &'static str,
        /// What was about to be done.
        what: String,
    },
}

/// `CAP_NET_ADMIN`'s bit in the capability sets.
const CAP_NET_ADMIN: u32 = 12;

/// Whether this thread's effective capabilities hold `bit` (`/proc/thread-self/status`);
/// `true` when that cannot be read (the kernel then answers for itself).
fn has_capability(bit: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/thread-self/status") else {
        return true;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_none_or(|caps| caps & (1 << bit) != 0)
}

/// The route protocol number that marks netpolicy's routes and rules by default.
pub const DEFAULT_PROTOCOL: u8 = 203;

/// The protocol routes and rules get when netpolicy gives them up ([`Adapter::disown`]):
/// `static` (4), what `ip route add` gives a route made by hand. Disowned addresses get
/// no address protocol (0), as `ip address add` gives them.
pub const DISOWNED_PROTOCOL: u8 = 4;

/// The longest a pass waits for the kernel's duplicate address detection of the IPv6
/// addresses it added (one probe after a random delay of up to a second, then a second
/// of listening, with the kernel's defaults); still tentative after it, an address is
/// left to finish on its own and read on the next pass.
pub const IPV6_DAD_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// One object [`Adapter::disown`] gave up, and how that went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disowned {
    /// The object in the readable form `plan` prints (`route 10.0.0.0/8 via … table 100`).
    pub what: String,
    /// Its outcome ([`Outcome::Done`], or why the kernel refused).
    pub outcome: Outcome,
}

/// How netpolicy recognises its own kernel objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// Route protocol of owned routes and rules.
    pub route_protocol: u8,
}

impl Default for Ownership {
    fn default() -> Self {
        Self {
            route_protocol: DEFAULT_PROTOCOL,
        }
    }
}

impl Ownership {
    /// Whether a route or rule the kernel reports with `protocol` is netpolicy's.
    pub fn owns(&self, protocol: u8) -> bool {
        protocol == self.route_protocol
    }
}

/// What happened to one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done.
    Done,
    /// An add found the object already there (`EEXIST`).
    AlreadyPresent,
    /// A delete found the object already gone.
    AlreadyGone,
    /// Not applied: a dry run.
    Planned,
    /// Not added: another host on the segment uses the address (an ARP reply to
    /// netpolicy's probe, or the kernel's IPv6 duplicate address detection failed and
    /// the address was removed again). `by`: what is known of that host (its MAC for
    /// IPv4).
    Duplicate {
        /// The other host's MAC, when known.
        by: Option<String>,
    },
    /// Added, but without a duplicate address check: the ARP probe could not run
    /// (`why`: the link down, no `CAP_NET_RAW`, ...). Another host may use the
    /// address; the agent says so in its status (`notProbed`).
    Unprobed {
        /// Why the probe could not run.
        why: String,
    },
    /// Refused; the other operations went on.
    Failed {
        /// The kernel's errno, when the kernel refused.
        errno: Option<i32>,
        /// What went wrong.
        message: String,
    },
}

impl std::fmt::Display for Outcome {
    /// `done`, `already there`, `not added: in use by 02:00:00:00:00:02`, `refused:
    /// File exists (errno 17)`, ...: for people, after the operation it belongs to.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Done => f.write_str("done"),
            Self::AlreadyPresent => f.write_str("already there"),
            Self::AlreadyGone => f.write_str("already gone"),
            Self::Planned => f.write_str("would do (dry run)"),
            Self::Duplicate { by } => write!(
                f,
                "not added: in use by {}",
                by.as_deref().unwrap_or("another host")
            ),
            Self::Unprobed { why } => write!(f, "added without a duplicate check: {why}"),
            Self::Failed {
                errno: Some(n),
                message,
            } => write!(f, "refused: {message} (errno {n})"),
            Self::Failed {
                errno: None,
                message,
            } => write!(f, "failed: {message}"),
        }
    }
}

impl std::fmt::Display for OpResult {
    /// The operation as `netpolicy plan` prints it, then its outcome: `add route
    /// 10.20.0.0/16 table 100 via 192.0.2.1: done`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.op, self.outcome)
    }
}

impl Outcome {
    /// Whether the item ended as desired.
    pub fn is_ok(&self) -> bool {
        !matches!(self, Self::Failed { .. } | Self::Duplicate { .. })
    }
}

/// One operation and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpResult {
    /// The operation.
    pub op: Op,
    /// Its outcome.
    pub outcome: Outcome,
}

/// The result of a reconcile or cleanup pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Every operation with its outcome, in execution order.
    pub results: Vec<OpResult>,
    /// Desired items left alone because a foreign object holds their identity.
    pub skipped: Vec<Skipped>,
    /// Operations that repaired owned objects changed or removed behind netpolicy's
    /// back since the last pass that applied the same desired state completely.
    pub drift: Vec<Op>,
    /// What a fresh observation after applying still found different from the
    /// desired state (the operations it would take next), not counting failed
    /// operations and skipped items, which are reported on their own. Empty when the
    /// pass changed nothing or the kernel now holds exactly what was asked.
    pub unconverged: Vec<Op>,
}

impl std::fmt::Display for Report {
    /// One line per operation with its outcome, per skipped item, and per difference
    /// still found after applying (`not converged: …`); `nothing to do` for an empty
    /// pass.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.results.is_empty() && self.skipped.is_empty() && self.unconverged.is_empty() {
            return f.write_str("nothing to do");
        }
        let mut first = true;
        let mut line = |f: &mut std::fmt::Formatter<'_>, s: &dyn std::fmt::Display| {
            let sep = if first { "" } else { "\n" };
            first = false;
            write!(f, "{sep}{s}")
        };
        for r in &self.results {
            line(f, r)?;
        }
        for s in &self.skipped {
            line(f, &format_args!("skipped: {s}"))?;
        }
        for op in &self.unconverged {
            line(f, &format_args!("not converged: {op}"))?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Disowned {
    /// `route 10.0.0.0/8 … table 100: done`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.outcome)
    }
}

impl Report {
    /// The failed operations.
    pub fn failures(&self) -> impl Iterator<Item = &OpResult> {
        self.results.iter().filter(|r| !r.outcome.is_ok())
    }

    /// Whether the namespace now holds the desired state: no failure, no blocked or
    /// refused item, nothing left unconverged.
    pub fn is_converged(&self) -> bool {
        self.failures().next().is_none()
            && self.skipped.iter().all(|s| s.reason.is_satisfied())
            && self.unconverged.is_empty()
    }
}

/// A connection to one network namespace with an ownership policy.
#[derive(Debug)]
pub struct Adapter {
    conn: conn::Conn,
    own: Ownership,
    links: Links,
    /// The desired state of the last (not dry-run) reconcile, and what it left not as
    /// desired (failed or not converged): everything else of it was in the kernel as
    /// desired when it ended, so a later difference is someone else's change (drift).
    applied: Option<(RoutingConfig, BTreeSet<monitor::Subject>)>,
    ns: Namespace,
    /// IPv4 probing window; `None`: no duplicate address detection.
    dad: Option<std::time::Duration>,
    /// Addresses found in use by another host (and by whom), not probed or added again
    /// until [`Adapter::forget_duplicates`].
    duplicates: BTreeMap<(IfName, IpNetwork), Option<String>>,
    /// While a reconcile repairs drift: the addresses it adds back, which were in the
    /// kernel as desired when the last pass of this same desired state ended.
    restoring: BTreeSet<Op>,
}

impl Adapter {
    /// Opens `ns`.
    ///
    /// # Errors
    /// See [`conn::Conn::open`].
    pub fn open(ns: &Namespace, own: Ownership) -> Result<Self> {
        Ok(Self {
            conn: conn::Conn::open(ns)?,
            own,
            links: Links::default(),
            applied: None,
            ns: ns.clone(),
            dad: Some(dad::PROBE_WINDOW),
            duplicates: BTreeMap::new(),
            restoring: BTreeSet::new(),
        })
    }

    /// Duplicate address detection before adding an address ([`dad`]): IPv4 addresses
    /// are probed with ARP for `window` (all at once), IPv6 addresses go through the
    /// kernel's DAD and are read back. On by default ([`dad::PROBE_WINDOW`]); `None`
    /// turns it off (addresses are added without asking the segment).
    pub fn set_duplicate_detection(&mut self, window: Option<std::time::Duration>) {
        self.dad = window;
    }

    /// Addresses found in use by another host are not probed or added again until this
    /// is called (the agent calls it on a new spec and on resync, not on a kernel
    /// notification): a duplicate costs one probe per resync, not one per pass.
    pub fn forget_duplicates(&mut self) {
        self.duplicates.clear();
    }

    /// The netlink port ID this adapter writes from: a [`monitor::Change`] with this
    /// port is the adapter's own write.
    ///
    /// # Errors
    /// The socket's address cannot be read.
    pub fn port(&self) -> Result<u32> {
        self.conn.port()
    }

    /// The ownership policy.
    pub fn ownership(&self) -> &Ownership {
        &self.own
    }

    fn refresh_links(&mut self) -> Result<Vec<LinkMessage>> {
        let msgs = self
            .conn
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        let mut links = Links::default();
        let mut out = Vec::new();
        for m in msgs {
            if let RouteNetlinkMessage::NewLink(l) = m {
                if let Some(name) = l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                }) {
                    links.names.insert(l.header.index, name.clone());
                    links.index.insert(name, l.header.index);
                }
                out.push(l);
            }
        }
        self.links = links;
        Ok(out)
    }

    fn dump_family<T>(
        &mut self,
        make: impl Fn(AddressFamily) -> RouteNetlinkMessage,
        pick: impl Fn(RouteNetlinkMessage) -> Option<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        for f in [AddressFamily::Inet, AddressFamily::Inet6] {
            for m in self.conn.dump(make(f))? {
                out.extend(pick(m));
            }
        }
        Ok(out)
    }

    /// Reads what the namespace has that matters for `desired`: every owned object,
    /// plus foreign routes in hard-synced tables and foreign objects that share an
    /// identity with a desired item.
    ///
    /// # Errors
    /// A dump failed.
    pub fn observe(&mut self, desired: &RoutingConfig) -> Result<Observed> {
        let link_msgs = self.refresh_links()?;
        let addrs = self.dump_family(
            |f| {
                let mut m = AddressMessage::default();
                m.header.family = f;
                RouteNetlinkMessage::GetAddress(m)
            },
            |m| match m {
                RouteNetlinkMessage::NewAddress(a) => Some(a),
                _ => None,
            },
        )?;
        let wanted_links: BTreeSet<&str> = desired.vlans.iter().map(|v| v.name.as_str()).collect();
        let mut observed = Observed::default();
        for l in &link_msgs {
            let Some(v) = self.vlan_of(l, &addrs) else {
                // Not a VLAN (or not one the model can describe): if a desired VLAN
                // has its name, that VLAN is refused and this link left alone.
                if let Some(name) = link_name(l).filter(|n| wanted_links.contains(n))
                    && let Ok(name) = IfName::new(name)
                {
                    observed.other_links.push(name);
                }
                continue;
            };
            let owned = l
                .attributes
                .iter()
                .any(|a| matches!(a, LinkAttribute::IfAlias(s) if s == LINK_ALIAS));
            if owned || wanted_links.contains(v.name.as_str()) {
                observed.vlans.push(ObservedVlan {
                    vlan: v,
                    up: l.header.flags.contains(LinkFlags::Up),
                    owned,
                });
            }
        }
        let links = self.links.clone();
        let route_msgs = self.dump_family(
            |f| {
                let mut m = RouteMessage::default();
                m.header.address_family = f;
                RouteNetlinkMessage::GetRoute(m)
            },
            |m| match m {
                RouteNetlinkMessage::NewRoute(r) => Some(r),
                _ => None,
            },
        )?;
        // The kernel's own local routes of host addresses (table local), by link.
        let local_routes: BTreeSet<(u32, std::net::IpAddr)> = route_msgs
            .iter()
            .filter_map(codec::local_route_of)
            .collect();
        let routes = route_msgs
            .iter()
            .filter_map(|r| codec::route_from(r, &links));
        // Addresses on links netpolicy did not create: ours by their address protocol;
        // someone else's only when a desired address has the identity. Addresses of the
        // VLANs above are theirs.
        let vlan_names: BTreeSet<&IfName> = observed.vlans.iter().map(|v| &v.vlan.name).collect();
        let wanted_addresses: BTreeSet<_> =
            desired.addresses.iter().map(HostAddress::key).collect();
        for a in &addrs {
            let Some(dev) = self
                .links
                .names
                .get(&a.header.index)
                .and_then(|n| IfName::new(n).ok())
            else {
                continue;
            };
            if vlan_names.contains(&dev) {
                continue;
            }
            let Some((address, protocol)) = codec::address_from(a) else {
                continue;
            };
            let address = HostAddress {
                dev,
                address,
                local_route: local_routes.contains(&(a.header.index, address.ip())),
            };
            let owned = protocol == self.own.route_protocol;
            if owned || wanted_addresses.contains(&address.key()) {
                observed.addresses.push(ObservedAddress { address, owned });
            }
        }
        let hard: BTreeSet<u32> = desired.table_hard_sync.iter().copied().collect();
        let wanted_routes: std::collections::BTreeMap<_, &Route> =
            desired.routes.iter().map(|r| (r.key(), r)).collect();
        for (mut route, protocol) in routes {
            if let Some(want) = wanted_routes.get(&route.key()) {
                normalize_resolved_devices(&mut route, want);
            }
            let owned = self.own.owns(protocol);
            if owned || hard.contains(&route.table) || wanted_routes.contains_key(&route.key()) {
                observed.routes.push(ObservedRoute {
                    route,
                    owned,
                    protocol,
                });
            }
        }
        let rules = self.dump_family(
            |f| {
                let mut m = RuleMessage::default();
                m.header.family = f;
                RouteNetlinkMessage::GetRule(m)
            },
            |m| match m {
                RouteNetlinkMessage::NewRule(r) => codec::rule_from(&r),
                _ => None,
            },
        )?;
        let wanted_rules: BTreeSet<_> = desired.rules.iter().map(|r| r.key.clone()).collect();
        for (family, rule, protocol) in rules {
            let owned = self.own.owns(protocol);
            let looks_up_hard = rule.action.table().is_some_and(|t| hard.contains(&t));
            if owned || looks_up_hard || wanted_rules.contains(&rule.key) {
                observed.rules.push(ObservedRule {
                    family,
                    rule,
                    owned,
                    protocol,
                });
            }
        }
        Ok(observed)
    }

    fn vlan_of(&self, l: &LinkMessage, addrs: &[AddressMessage]) -> Option<Vlan> {
        let mut name = None;
        let mut parent = None;
        let mut mtu = None;
        let mut id = None;
        let mut protocol = VlanProtocol::Dot1Q;
        let mut is_vlan = false;
        for a in &l.attributes {
            match a {
                LinkAttribute::IfName(n) => name = Some(n.clone()),
                LinkAttribute::Link(p) => parent = Some(*p),
                LinkAttribute::Mtu(m) => mtu = Some(*m),
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        match i {
                            LinkInfo::Kind(InfoKind::Vlan) => is_vlan = true,
                            LinkInfo::Data(InfoData::Vlan(data)) => {
                                for d in data {
                                    match d {
                                        InfoVlan::Id(v) => id = Some(*v),
                                        InfoVlan::Protocol(
                                            netlink_packet_route::link::VlanProtocol::Ieee8021Ad,
                                        ) => protocol = VlanProtocol::Dot1AD,
                                        _ => {}
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if !is_vlan {
            return None;
        }
        let parent = self.links.names.get(&parent?)?;
        let addresses = addrs
            .iter()
            .filter(|a| a.header.index == l.header.index)
            .filter_map(|a| {
                let ip = a.attributes.iter().find_map(|x| match x {
                    AddressAttribute::Local(ip) => Some(*ip),
                    _ => None,
                });
                let ip = ip.or_else(|| {
                    a.attributes.iter().find_map(|x| match x {
                        AddressAttribute::Address(ip) => Some(*ip),
                        _ => None,
                    })
                })?;
                let net = IpNetwork::new(ip, a.header.prefix_len).ok()?;
                // Link-local IPv6 addresses are the kernel's, not ours.
                let link_local =
                    matches!(ip, std::net::IpAddr::V6(v) if (v.segments()[0] & 0xffc0) == 0xfe80);
                (!link_local).then_some(net)
            })
            .collect();
        Some(Vlan {
            name: IfName::new(&name?).ok()?,
            link: IfName::new(parent).ok()?,
            id: id?,
            protocol,
            mtu,
            addresses,
        })
    }

    /// The plan from the namespace's state to `desired` (a dry run: nothing changes).
    ///
    /// # Errors
    /// A dump failed.
    pub fn plan(&mut self, desired: &RoutingConfig) -> Result<Plan> {
        let observed = self.observe(desired)?;
        Ok(plan(&observed, desired))
    }

    /// Brings the namespace to `desired`: observe, plan, apply (or, with `dry_run`,
    /// report the operations as [`Outcome::Planned`]). Drift ([`Report::drift`]) is what
    /// the last pass with the same desired state left in the kernel as desired and is
    /// no longer: someone else's change (what that pass could not apply is not drift).
    ///
    /// # Errors
    /// A dump or the socket failed (kernel refusals are per-item outcomes).
    pub fn reconcile(&mut self, desired: &RoutingConfig, dry_run: bool) -> Result<Report> {
        let p = self.plan(desired)?;
        let drift: Vec<Op> = match &self.applied {
            Some((last, outstanding)) if last == desired => p
                .ops
                .iter()
                .filter(|op| !outstanding.contains(&monitor::Subject::of(op)))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        if !dry_run && !p.ops.is_empty() && !has_capability(CAP_NET_ADMIN) {
            return Err(Error::Capability {
                capability: "CAP_NET_ADMIN",
                what: format!("changing the namespace ({} operation(s))", p.ops.len()),
            });
        }
        let results = if dry_run {
            p.ops
                .iter()
                .map(|op| OpResult {
                    op: op.clone(),
                    outcome: Outcome::Planned,
                })
                .collect()
        } else {
            // Addresses this pass restores were this node's until a moment ago.
            self.restoring = drift
                .iter()
                .filter(|op| matches!(op, Op::AddAddress { .. }))
                .cloned()
                .collect();
            let applied = self.apply(&p.ops);
            self.restoring.clear();
            applied?
        };
        let mut unconverged = Vec::new();
        if !dry_run && !p.ops.is_empty() {
            // Check the result: observe again. What failed is reported with its
            // failure; anything else still planned did not take.
            let failed: BTreeSet<&Op> = results
                .iter()
                .filter(|r| !r.outcome.is_ok())
                .map(|r| &r.op)
                .collect();
            unconverged = self
                .plan(desired)?
                .ops
                .into_iter()
                .filter(|op| !failed.contains(op))
                .collect();
        }
        if !dry_run {
            // What this pass tried and did not get: not drift next time. A difference
            // that appeared while it ran (not among its operations) is someone's change.
            let tried: BTreeSet<monitor::Subject> =
                p.ops.iter().map(monitor::Subject::of).collect();
            let outstanding = results
                .iter()
                .filter(|r| !r.outcome.is_ok())
                .map(|r| monitor::Subject::of(&r.op))
                .chain(
                    unconverged
                        .iter()
                        .map(monitor::Subject::of)
                        .filter(|s| tried.contains(s)),
                )
                .collect();
            self.applied = Some((desired.clone(), outstanding));
        }
        Ok(Report {
            results,
            skipped: p.skipped,
            drift,
            unconverged,
        })
    }

    /// Gives up ownership of the owned objects that `items` names (by identity), leaving
    /// each in the kernel exactly as it is, with no moment without it: a route is
    /// replaced in place by the same route with protocol [`DISOWNED_PROTOCOL`]; a rule
    /// gets a twin with that protocol before netpolicy's is deleted; an address is
    /// replaced with no address protocol (on kernels that keep an IPv4 address's
    /// protocol on replace, Debian 12's 6.1 among them, it is removed and re-added in one batch: a gap of
    /// one round trip, said in its outcome); a VLAN loses its ownership alias (its
    /// addresses go with it). From then on reconcile and cleanup treat them as anyone
    /// else's: never changed or removed (except routes in a `tableHardSync` table,
    /// which holds only what is desired). Objects of `items` that are not owned (gone,
    /// or given up before) are skipped: calling it again does nothing.
    ///
    /// # Errors
    /// A dump or the socket failed (kernel refusals are per-object outcomes).
    pub fn disown(&mut self, items: &RoutingConfig) -> Result<Vec<Disowned>> {
        let observed = self.observe(items)?;
        let p = self.own.route_protocol;
        let mut requests: Vec<(RouteNetlinkMessage, u16)> = Vec::new();
        // (what, how many requests)
        let mut what: Vec<(String, std::result::Result<usize, String>)> = Vec::new();
        let vlans: BTreeSet<&str> = items.vlans.iter().map(|v| v.name.as_str()).collect();
        for v in observed.vlans.iter().filter(|v| v.owned) {
            if !vlans.contains(v.vlan.name.as_str()) {
                continue;
            }
            let label = format!("vlan {}", v.vlan.name);
            match self.index(&v.vlan.name) {
                Ok(i) => {
                    let mut m = LinkMessage::default();
                    m.header.index = i;
                    m.attributes.push(LinkAttribute::IfAlias(String::new()));
                    requests.push((RouteNetlinkMessage::SetLink(m), 0));
                    what.push((label, Ok(1)));
                }
                Err(e) => what.push((label, Err(e))),
            }
        }
        let addresses: BTreeSet<&HostAddress> = items.addresses.iter().collect();
        for a in observed.addresses.iter().filter(|a| a.owned) {
            if !addresses.contains(&a.address) {
                continue;
            }
            let label = format!("address {}", a.address);
            match self.index(&a.address.dev) {
                Ok(i) => {
                    let m = codec::address_message(i, a.address.address, Some(0));
                    requests.push((RouteNetlinkMessage::NewAddress(m), NLM_F_REPLACE));
                    what.push((label, Ok(1)));
                }
                Err(e) => what.push((label, Err(e))),
            }
        }
        let routes: BTreeSet<RouteKey> = items.routes.iter().map(Route::key).collect();
        for r in observed.routes.iter().filter(|r| r.owned) {
            if !routes.contains(&r.route.key()) {
                continue;
            }
            let label = format!("route {}", r.route);
            match codec::route_message(&r.route, DISOWNED_PROTOCOL, &self.links) {
                Ok(m) => {
                    requests.push((RouteNetlinkMessage::NewRoute(m), NLM_F_REPLACE));
                    what.push((label, Ok(1)));
                }
                Err(e) => what.push((label, Err(e))),
            }
        }
        let rules: BTreeSet<&RuleKey> = items.rules.iter().map(Rule::key).collect();
        for r in observed.rules.iter().filter(|r| r.owned) {
            if !rules.contains(r.rule.key()) {
                continue;
            }
            requests.push((
                RouteNetlinkMessage::NewRule(codec::rule_message(
                    r.family,
                    &r.rule,
                    DISOWNED_PROTOCOL,
                )),
                NLM_F_CREATE,
            ));
            requests.push((
                RouteNetlinkMessage::DelRule(codec::rule_message(r.family, &r.rule, p)),
                0,
            ));
            what.push((format!("rule {}", r.rule), Ok(2)));
        }
        let mut done = self.execute_labelled(requests, what)?;
        // Some kernels (Debian 12's 6.1; not 6.18) keep an IPv4 address's protocol on
        // replace: read back, and give up any still marked by removing and re-adding it
        // without a protocol in one batch (a gap of one round trip, said in the outcome).
        let still: Vec<HostAddress> = self
            .observe(items)?
            .addresses
            .into_iter()
            .filter(|a| a.owned && addresses.contains(&a.address))
            .map(|a| a.address)
            .collect();
        if !still.is_empty() {
            let mut requests = Vec::new();
            let mut labels = Vec::new();
            for a in &still {
                let label = format!("address {a}");
                match self.index(&a.dev) {
                    Ok(i) => {
                        requests.push((
                            RouteNetlinkMessage::DelAddress(codec::address_message(
                                i, a.address, None,
                            )),
                            0,
                        ));
                        requests.push((
                            RouteNetlinkMessage::NewAddress(codec::address_message(
                                i, a.address, None,
                            )),
                            NLM_F_CREATE | NLM_F_EXCL,
                        ));
                        labels.push((label, Ok(2)));
                    }
                    Err(e) => labels.push((label, Err(e))),
                }
            }
            for redone in self.execute_labelled(requests, labels)? {
                let label = redone.what;
                if let Some(d) = done.iter_mut().find(|d| d.what == label) {
                    d.what = format!(
                        "{label} (removed and re-added: this kernel keeps an address's \
                         protocol on replace)"
                    );
                    d.outcome = redone.outcome;
                }
            }
        }
        Ok(done)
    }

    /// Sends `requests` and gives each labelled object the outcome of its requests
    /// (`Ok(n)`: its next `n` answers, the first failure wins; `Err`: it could not be
    /// asked for, with why).
    fn execute_labelled(
        &mut self,
        requests: Vec<(RouteNetlinkMessage, u16)>,
        labels: Vec<(String, std::result::Result<usize, String>)>,
    ) -> Result<Vec<Disowned>> {
        let mut answers = self.conn.execute(requests)?.into_iter();
        Ok(labels
            .into_iter()
            .map(|(what, n)| {
                let outcome =
                    match n {
                        Err(message) => Outcome::Failed {
                            errno: None,
                            message,
                        },
                        Ok(n) => answers.by_ref().take(n).find_map(|a| a.err()).map_or(
                            Outcome::Done,
                            |e| Outcome::Failed {
                                errno: Some(e.errno),
                                message: e.message,
                            },
                        ),
                    };
                Disowned { what, outcome }
            })
            .collect())
    }

    /// Removes every owned object (a node leaving, its policy deleted).
    ///
    /// # Errors
    /// As [`Adapter::reconcile`].
    pub fn cleanup(&mut self) -> Result<Report> {
        self.applied = None;
        self.reconcile(&RoutingConfig::default(), false)
    }

    /// Executes `ops` in order, pipelining consecutive operations of the same kind.
    ///
    /// # Errors
    /// Only when the socket fails.
    pub fn apply(&mut self, ops: &[Op]) -> Result<Vec<OpResult>> {
        let mut results = Vec::with_capacity(ops.len());
        let mut i = 0;
        // Interface indexes may have changed since the last observation.
        self.refresh_links()?;
        while i < ops.len() {
            let stage = stage(&ops[i]);
            let mut j = i;
            while j < ops.len() && self::stage(&ops[j]) == stage {
                j += 1;
            }
            if stage == 4 {
                // Links were created: later operations name them. Each new link is
                // marked as ours only once its own create succeeded.
                let mut created = self.run(&ops[i..j])?;
                self.refresh_links()?;
                self.mark_created(&mut created)?;
                results.extend(created);
            } else if stage == 7 {
                results.extend(self.add_addresses(&ops[i..j])?);
            } else {
                results.extend(self.run(&ops[i..j])?);
            }
            i = j;
        }
        Ok(results)
    }

    /// Sets the ownership alias on every link whose create answered success.
    fn mark_created(&mut self, created: &mut [OpResult]) -> Result<()> {
        let mut requests = Vec::new();
        let mut which = Vec::new();
        for (k, r) in created.iter_mut().enumerate() {
            let Op::CreateLink(v) = &r.op else { continue };
            if r.outcome != Outcome::Done {
                continue;
            }
            match self.index(&v.name) {
                Ok(i) => {
                    requests.push((RouteNetlinkMessage::SetLink(codec::alias_message(i)), 0));
                    which.push(k);
                }
                Err(message) => {
                    r.outcome = Outcome::Failed {
                        errno: None,
                        message: format!("created, then vanished before it was marked: {message}"),
                    };
                }
            }
        }
        for (k, answer) in which.into_iter().zip(self.conn.execute(requests)?) {
            if let Err(e) = answer {
                created[k].outcome = Outcome::Failed {
                    errno: Some(e.errno),
                    message: format!(
                        "created, but marking it as netpolicy's failed: {}",
                        e.message
                    ),
                };
            }
        }
        Ok(())
    }

    /// Adds addresses that no other host on their segment uses ([`dad`]): known
    /// duplicates are refused at once, IPv4 addresses are probed first (every one at
    /// once), IPv6 addresses that fail the kernel's DAD are removed again. When every
    /// IPv4 address a pass adds is a repair (it was in the kernel as desired when the
    /// last pass of this same desired state ended, until someone removed it), the probe
    /// listens for [`dad::RESTORE_WINDOW`] instead of the full window: another host that
    /// took the address meanwhile still answers, and drift is repaired within 100 ms.
    fn add_addresses(&mut self, ops: &[Op]) -> Result<Vec<OpResult>> {
        let mut unprobed: Vec<Option<String>> = vec![None; ops.len()];
        let mut verdict: Vec<Option<Outcome>> = ops
            .iter()
            .map(|op| match op {
                Op::AddAddress { dev, address } => self
                    .duplicates
                    .get(&(dev.clone(), *address))
                    .map(|by| Outcome::Duplicate { by: by.clone() }),
                _ => None,
            })
            .collect();
        if let Some(window) = self.dad {
            let restoring_only = ops
                .iter()
                .filter(|op| {
                    matches!(
                        op,
                        Op::AddAddress {
                            address: IpNetwork::V4(_),
                            ..
                        }
                    )
                })
                .all(|op| self.restoring.contains(op));
            let window = if restoring_only {
                window.min(dad::RESTORE_WINDOW)
            } else {
                window
            };
            let targets: Vec<(usize, String, std::net::Ipv4Addr)> = ops
                .iter()
                .enumerate()
                .filter(|(k, _)| verdict[*k].is_none())
                .filter_map(|(k, op)| match op {
                    Op::AddAddress {
                        dev,
                        address: IpNetwork::V4(a),
                    } => Some((k, dev.to_string(), a.ip())),
                    _ => None,
                })
                .collect();
            let asked: Vec<(String, std::net::Ipv4Addr)> =
                targets.iter().map(|(_, d, ip)| (d.clone(), *ip)).collect();
            let probes = dad::probe_ipv4(&self.ns, &asked, window)
                .map_err(conn::io("ARP probes before adding addresses"))?;
            for ((k, _, _), p) in targets.iter().zip(probes) {
                match p {
                    dad::Probe::InUse(mac) => {
                        if let Op::AddAddress { dev, address } = &ops[*k] {
                            self.duplicates
                                .insert((dev.clone(), *address), Some(mac.clone()));
                        }
                        verdict[*k] = Some(Outcome::Duplicate { by: Some(mac) });
                    }
                    dad::Probe::NotProbed(why) => unprobed[*k] = Some(why),
                    dad::Probe::Free | dad::Probe::NoArp(_) => {}
                }
            }
        }
        let to_run: Vec<Op> = ops
            .iter()
            .zip(&verdict)
            .filter(|(_, v)| v.is_none())
            .map(|(op, _)| op.clone())
            .collect();
        let mut ran = self.run(&to_run)?.into_iter();
        let mut out = Vec::with_capacity(ops.len());
        for ((op, v), why) in ops.iter().zip(verdict).zip(unprobed) {
            match v {
                Some(outcome) => out.push(OpResult {
                    op: op.clone(),
                    outcome,
                }),
                None => out.extend(ran.next().map(|mut r| {
                    if let (Outcome::Done, Some(why)) = (&r.outcome, why) {
                        r.outcome = Outcome::Unprobed { why };
                    }
                    r
                })),
            }
        }
        if self.dad.is_some() {
            self.ipv6_dad(&mut out)?;
        }
        Ok(out)
    }

    /// Waits (at most [`IPV6_DAD_WAIT`]) for the kernel's duplicate address detection
    /// of the IPv6 addresses just added; those that failed it are removed again and
    /// become [`Outcome::Duplicate`].
    fn ipv6_dad(&mut self, out: &mut [OpResult]) -> Result<()> {
        use netlink_packet_route::address::{AddressAttribute, AddressFlags};
        let added: Vec<(usize, u32, std::net::IpAddr)> = out
            .iter()
            .enumerate()
            .filter(|(_, r)| r.outcome == Outcome::Done)
            .filter_map(|(k, r)| match &r.op {
                Op::AddAddress {
                    dev,
                    address: IpNetwork::V6(a),
                } => Some((k, self.index(dev).ok()?, std::net::IpAddr::V6(a.ip()))),
                _ => None,
            })
            .collect();
        if added.is_empty() {
            return Ok(());
        }
        let deadline = std::time::Instant::now() + IPV6_DAD_WAIT;
        let mut failed: BTreeSet<usize> = BTreeSet::new();
        loop {
            let mut m = AddressMessage::default();
            m.header.family = AddressFamily::Inet6;
            let mut state: BTreeMap<(u32, std::net::IpAddr), (bool, bool)> = BTreeMap::new();
            for msg in self.conn.dump(RouteNetlinkMessage::GetAddress(m))? {
                let RouteNetlinkMessage::NewAddress(a) = msg else {
                    continue;
                };
                let Some((net, _)) = codec::address_from(&a) else {
                    continue;
                };
                let flags = a
                    .attributes
                    .iter()
                    .find_map(|x| match x {
                        AddressAttribute::Flags(f) => Some(*f),
                        _ => None,
                    })
                    .unwrap_or_else(|| {
                        AddressFlags::from_bits_truncate(u32::from(a.header.flags.bits()))
                    });
                state.insert(
                    (a.header.index, net.ip()),
                    (
                        flags.contains(AddressFlags::Tentative),
                        flags.contains(AddressFlags::Dadfailed),
                    ),
                );
            }
            let mut pending = false;
            for (k, index, ip) in &added {
                match state.get(&(*index, *ip)) {
                    Some((_, true)) => {
                        failed.insert(*k);
                    }
                    Some((true, false)) => pending = true,
                    _ => {}
                }
            }
            if !pending || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        for k in failed {
            if let Op::AddAddress { dev, address } = out[k].op.clone() {
                let removed = self.run(&[Op::DeleteAddress {
                    dev: dev.clone(),
                    address,
                }])?;
                let by = removed
                    .iter()
                    .find(|r| !r.outcome.is_ok())
                    .map(|r| format!("(and could not be removed again: {:?})", r.outcome));
                self.duplicates.insert((dev, address), None);
                out[k].outcome = Outcome::Duplicate { by };
            }
        }
        Ok(())
    }

    fn run(&mut self, ops: &[Op]) -> Result<Vec<OpResult>> {
        // The kernel inserts a rule after walking the rules of lower priority: adding
        // in descending priority makes every insertion stop at the first rule.
        if ops.iter().all(|o| matches!(o, Op::AddRule { .. })) {
            let mut order: Vec<usize> = (0..ops.len()).collect();
            order.sort_by_key(|i| match &ops[*i] {
                Op::AddRule { rule, .. } => std::cmp::Reverse(rule.key.priority),
                _ => std::cmp::Reverse(0),
            });
            let sorted: Vec<Op> = order.iter().map(|i| ops[*i].clone()).collect();
            let results = self.run_in_order(&sorted)?;
            let mut out: Vec<Option<OpResult>> = vec![None; ops.len()];
            for (k, r) in order.into_iter().zip(results) {
                out[k] = Some(r);
            }
            return Ok(out.into_iter().flatten().collect());
        }
        self.run_in_order(ops)
    }

    fn run_in_order(&mut self, ops: &[Op]) -> Result<Vec<OpResult>> {
        // Each op becomes one or two requests; remember which.
        let mut requests = Vec::new();
        let mut plan: Vec<std::result::Result<usize, String>> = Vec::with_capacity(ops.len());
        for op in ops {
            match self.messages(op) {
                Ok(msgs) => {
                    plan.push(Ok(msgs.len()));
                    requests.extend(msgs);
                }
                Err(e) => plan.push(Err(e)),
            }
        }
        let answers = self.conn.execute(requests)?;
        let mut answers = answers.into_iter();
        let mut out = Vec::with_capacity(ops.len());
        for (op, p) in ops.iter().zip(plan) {
            let outcome = match p {
                Err(message) => Outcome::Failed {
                    errno: None,
                    message,
                },
                Ok(n) => {
                    let mine: Vec<_> = answers.by_ref().take(n).collect();
                    outcome(op, &mine)
                }
            };
            out.push(OpResult {
                op: op.clone(),
                outcome,
            });
        }
        Ok(out)
    }

    fn index(&self, name: &IfName) -> std::result::Result<u32, String> {
        self.links.index_of(name)
    }

    fn messages(&self, op: &Op) -> std::result::Result<Vec<(RouteNetlinkMessage, u16)>, String> {
        let p = self.own.route_protocol;
        Ok(match op {
            Op::DeleteRule {
                family,
                rule,
                protocol,
            } => vec![(
                RouteNetlinkMessage::DelRule(codec::rule_message(*family, rule, *protocol)),
                0,
            )],
            Op::DeleteRoute { route, protocol } => vec![(
                RouteNetlinkMessage::DelRoute(codec::route_delete_message(
                    route,
                    *protocol,
                    &self.links,
                )),
                0,
            )],
            Op::DeleteAddress { dev, address } => vec![(
                RouteNetlinkMessage::DelAddress(codec::address_message(
                    self.index(dev)?,
                    *address,
                    None,
                )),
                0,
            )],
            Op::DeleteLink(dev) => {
                let mut m = LinkMessage::default();
                m.header.index = self.index(dev)?;
                vec![(RouteNetlinkMessage::DelLink(m), 0)]
            }
            // The ownership alias follows once this create answered success
            // (`mark_created`): never on a link someone else made under this name.
            Op::CreateLink(v) => vec![(
                RouteNetlinkMessage::NewLink(codec::vlan_message(v, self.index(&v.link)?)),
                NLM_F_CREATE | NLM_F_EXCL,
            )],
            Op::SetMtu { dev, mtu } => vec![(
                RouteNetlinkMessage::SetLink(codec::link_set(self.index(dev)?, false, Some(*mtu))),
                0,
            )],
            Op::SetUp(dev) => vec![(
                RouteNetlinkMessage::SetLink(codec::link_set(self.index(dev)?, true, None)),
                0,
            )],
            Op::AddAddress { dev, address } => vec![(
                RouteNetlinkMessage::NewAddress(codec::address_message(
                    self.index(dev)?,
                    *address,
                    Some(p),
                )),
                NLM_F_CREATE | NLM_F_EXCL,
            )],
            Op::DeleteLocalRoute { dev, address } => vec![(
                RouteNetlinkMessage::DelRoute(codec::local_route_delete_message(
                    self.index(dev)?,
                    *address,
                )),
                0,
            )],
            Op::ReplaceRoute(r) => vec![(
                RouteNetlinkMessage::NewRoute(codec::route_message(r, p, &self.links)?),
                NLM_F_CREATE | NLM_F_REPLACE,
            )],
            Op::AddRoute(r) => vec![(
                RouteNetlinkMessage::NewRoute(codec::route_message(r, p, &self.links)?),
                NLM_F_CREATE,
            )],
            // No NLM_F_EXCL: the kernel's duplicate check walks every rule, O(n²) for n
            // rules. The plan adds only rules the fresh dump did not show; a duplicate
            // made by a concurrent writer is harmless and is deleted with its twin.
            Op::AddRule { family, rule } => vec![(
                RouteNetlinkMessage::NewRule(codec::rule_message(*family, rule, p)),
                NLM_F_CREATE,
            )],
            Op::ReplaceRule { family, old, new } => vec![
                (
                    RouteNetlinkMessage::DelRule(codec::rule_message(*family, old, p)),
                    0,
                ),
                (
                    RouteNetlinkMessage::NewRule(codec::rule_message(*family, new, p)),
                    NLM_F_CREATE,
                ),
            ],
        })
    }
}

/// The kernel fills in the device of a gateway route (and of each gateway next hop);
/// when the desired route names no device, the resolved one is not a difference. A
/// scope written out that equals the kernel's default is the same as none.
fn normalize_resolved_devices(observed: &mut Route, desired: &Route) {
    // A desired scope spelled out that equals the default reads back as "default".
    if observed.scope.is_none()
        && desired
            .scope
            .is_some_and(|s| codec::is_default_scope(observed, s))
    {
        observed.scope = desired.scope;
    }
    if desired.dev.is_none() && observed.via.is_some() {
        observed.dev = None;
    }
    if observed.nexthops.len() == desired.nexthops.len() {
        for (o, d) in observed.nexthops.iter_mut().zip(&desired.nexthops) {
            if d.dev.is_none() && o.via.is_some() {
                o.dev = None;
            }
        }
    }
}

fn link_name(l: &LinkMessage) -> Option<&str> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.as_str()),
        _ => None,
    })
}

/// Execution stages: the planner's order (deletes, links, MTU, up, addresses, routes,
/// rules). Operations of one stage are independent and are pipelined together.
fn stage(op: &Op) -> u8 {
    match op {
        Op::DeleteRule { .. } => 0,
        Op::DeleteRoute { .. } => 1,
        Op::DeleteAddress { .. } => 2,
        Op::DeleteLink(_) => 3,
        Op::CreateLink(_) => 4,
        Op::SetMtu { .. } => 5,
        Op::SetUp(_) => 6,
        Op::AddAddress { .. } => 7,
        Op::DeleteLocalRoute { .. } | Op::ReplaceRoute(_) | Op::AddRoute(_) => 8,
        Op::AddRule { .. } | Op::ReplaceRule { .. } => 9,
    }
}

const EEXIST: i32 = 17;
const ENOENT: i32 = 2;
const ESRCH: i32 = 3;
const ENODEV: i32 = 19;
const EADDRNOTAVAIL: i32 = 99;

fn outcome(op: &Op, answers: &[std::result::Result<(), KernelError>]) -> Outcome {
    let deleting = op.is_delete();
    let mut result = Outcome::Done;
    for (k, a) in answers.iter().enumerate() {
        // A ReplaceRule's first request is a delete.
        let is_delete = deleting || (matches!(op, Op::ReplaceRule { .. }) && k == 0);
        match a {
            Ok(()) => {}
            Err(e) if is_delete && matches!(e.errno, ENOENT | ESRCH | ENODEV | EADDRNOTAVAIL) => {
                if deleting {
                    result = Outcome::AlreadyGone;
                }
            }
            // A link of that name exists that the observation did not show as ours:
            // not success (it is not the VLAN asked for, and it is never marked).
            Err(e) if matches!(op, Op::CreateLink(_)) && e.errno == EEXIST => {
                return Outcome::Failed {
                    errno: Some(e.errno),
                    message: "a link with this name already exists and is not netpolicy's".into(),
                };
            }
            Err(e) if !is_delete && e.errno == EEXIST => result = Outcome::AlreadyPresent,
            Err(e) => {
                return Outcome::Failed {
                    errno: Some(e.errno),
                    message: e.message.clone(),
                };
            }
        }
    }
    result
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
