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

mod addresses;
mod apply;
pub mod codec;
pub mod conn;
pub mod dad;
pub mod monitor;
mod observe;
pub mod probe;
mod report;
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
pub use report::{Disowned, OpResult, Outcome, Ownership, Report};
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
}

const EEXIST: i32 = 17;
const ENOENT: i32 = 2;
const ESRCH: i32 = 3;
const ENODEV: i32 = 19;
const EADDRNOTAVAIL: i32 = 99;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
