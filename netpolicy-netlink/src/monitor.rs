//! The kernel's rtnetlink notifications as typed changes: links, IPv4 and IPv6
//! addresses, routes and rules, from one network namespace.
//!
//! Each [`Change`] says whether the object carries netpolicy's mark ([`Change::owned`]:
//! route or rule protocol, address protocol, link alias) and which socket's request
//! caused it ([`Change::port`]: the kernel puts the requester's netlink port ID in the
//! notifications of address, route and rule changes). A change whose port is the
//! adapter's own ([`crate::Adapter::port`]) is netpolicy's own write: telling them apart
//! needs no timing and cannot race. Link notifications carry no requester (port 0).
//!
//! The kernel drops notifications when the reader falls behind (`ENOBUFS`):
//! [`Monitor::recv`] then returns [`Batch::Overrun`], and the reader must assume
//! anything changed (re-read the state: a full reconcile).
//!
//! ```no_run
//! use netpolicy_netlink::{Namespace, monitor::{Batch, Monitor}};
//! let mut m = Monitor::open(&Namespace::Current)?;
//! loop {
//!     match m.recv()? {
//!         Batch::Changes(changes) => {
//!             for c in changes {
//!                 println!("{:?} {:?} {} (ours: {})", c.action, c.object, c.what, c.owned);
//!             }
//!         }
//!         Batch::Overrun => println!("missed some: re-read everything"),
//!     }
//! }
//! # Ok::<(), netpolicy_netlink::Error>(())
//! ```

use netlink_packet_core::NetlinkPayload;
use netlink_packet_route::{
    RouteNetlinkMessage,
    link::LinkAttribute,
    route::{RouteAttribute, RouteMessage},
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use crate::{
    Ownership, Result, codec,
    conn::{Namespace, io},
};

/// `RTMGRP_LINK`.
const LINKS: u32 = 0x1;
/// `RTMGRP_IPV4_IFADDR`.
const IPV4_ADDRESSES: u32 = 0x10;
/// `RTMGRP_IPV4_ROUTE`.
const IPV4_ROUTES: u32 = 0x40;
/// `RTNLGRP_IPV4_RULE` (8) as a group bit.
const IPV4_RULES: u32 = 1 << (8 - 1);
/// `RTMGRP_IPV6_IFADDR`.
const IPV6_ADDRESSES: u32 = 0x100;
/// `RTMGRP_IPV6_ROUTE`.
const IPV6_ROUTES: u32 = 0x400;
/// `RTNLGRP_IPV6_RULE` (19) as a group bit.
const IPV6_RULES: u32 = 1 << (19 - 1);

/// `ENOBUFS`: the kernel dropped notifications.
const ENOBUFS: i32 = 105;

/// Which kind of object changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Object {
    /// A link (interface).
    Link,
    /// An IPv4 or IPv6 address.
    Address,
    /// A route.
    Route,
    /// A policy routing rule.
    Rule,
}

/// What happened to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Added or changed.
    New,
    /// Removed.
    Deleted,
}

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The object's kind.
    pub object: Object,
    /// Added/changed or removed.
    pub action: Action,
    /// The netlink port ID of the socket whose request made the change (0: the kernel,
    /// or a link change).
    pub port: u32,
    /// Whether the object carries netpolicy's mark.
    pub owned: bool,
    /// The routing table of a route or rule.
    pub table: Option<u32>,
    /// Which object, for people and logs (`route 10.20.0.0/16 table 100`).
    pub what: String,
}

/// What one read gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Batch {
    /// The changes, in the kernel's order.
    Changes(Vec<Change>),
    /// Notifications were dropped: re-read the state.
    Overrun,
}

impl Batch {
    /// The first change made by someone else (not from `own_port`) to an object
    /// netpolicy owns, or to a route inside one of the `hard_synced` tables, for people
    /// and logs (`Deleted route 10.20.0.0/16 table 100`). A dropped batch counts: anything
    /// may have changed. `None`: nothing here needs a repair.
    pub fn foreign(&self, own_port: u32, hard_synced: &[u32]) -> Option<String> {
        match self {
            Self::Overrun => Some("notifications dropped by the kernel".into()),
            Self::Changes(changes) => changes
                .iter()
                .find(|c| {
                    c.port != own_port
                        && (c.owned
                            || (c.object == Object::Route
                                && c.table.is_some_and(|t| hard_synced.contains(&t))))
                })
                .map(|c| format!("{:?} {}", c.action, c.what)),
        }
    }

    fn merge(&mut self, more: Self) {
        match (&mut *self, more) {
            (Self::Overrun, _) => {}
            (_, Self::Overrun) => *self = Self::Overrun,
            (Self::Changes(a), Self::Changes(b)) => a.extend(b),
        }
    }
}

/// A socket subscribed to one namespace's link, address, route and rule notifications.
#[derive(Debug)]
pub struct Monitor {
    sock: Socket,
    buf: Vec<u8>,
    own: Ownership,
}

impl Monitor {
    /// Subscribes in `ns` (entered on a short-lived thread, as [`crate::conn::Conn`]
    /// does), recognising netpolicy's objects by the default [`Ownership`].
    ///
    /// # Errors
    /// The namespace cannot be entered or the socket cannot be made or bound.
    pub fn open(ns: &Namespace) -> Result<Self> {
        Self::with_ownership(ns, Ownership::default())
    }

    /// As [`Monitor::open`], with `own` deciding what is netpolicy's.
    ///
    /// # Errors
    /// As [`Monitor::open`].
    pub fn with_ownership(ns: &Namespace, own: Ownership) -> Result<Self> {
        let sock = crate::conn::in_namespace(ns, || {
            let mut sock = Socket::new(NETLINK_ROUTE).map_err(io("netlink socket"))?;
            let groups = LINKS
                | IPV4_ADDRESSES
                | IPV4_ROUTES
                | IPV4_RULES
                | IPV6_ADDRESSES
                | IPV6_ROUTES
                | IPV6_RULES;
            sock.bind(&SocketAddr::new(0, groups))
                .map_err(io("subscribing to rtnetlink groups"))?;
            sock.set_rx_buf_sz(4 * 1024 * 1024)
                .map_err(io("netlink receive buffer"))?;
            Ok(sock)
        })?;
        Ok(Self {
            sock,
            buf: vec![0; 1 << 20],
            own,
        })
    }

    /// Waits for the next notifications (blocking) and returns them typed.
    ///
    /// # Errors
    /// The socket failed (other than the kernel dropping notifications, which is
    /// [`Batch::Overrun`]), or a notification did not parse.
    pub fn recv(&mut self) -> Result<Batch> {
        let n = match self.sock.recv(&mut &mut self.buf[..], 0) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(ENOBUFS) => return Ok(Batch::Overrun),
            Err(e) => return Err(io("netlink receive")(e)),
        };
        let mut out = Vec::new();
        for m in crate::conn::parse(&self.buf[..n])? {
            let port = m.header.port_number;
            if let NetlinkPayload::InnerMessage(inner) = m.payload
                && let Some(c) = self.change(inner, port)
            {
                out.push(c);
            }
        }
        Ok(Batch::Changes(out))
    }

    /// As [`Monitor::recv`], then whatever else arrives within `settle`, as one batch:
    /// a flush or a link going down is many notifications, and one repair.
    ///
    /// # Errors
    /// As [`Monitor::recv`].
    pub fn recv_burst(&mut self, settle: std::time::Duration) -> Result<Batch> {
        let mut batch = self.recv()?;
        if settle.is_zero() {
            return Ok(batch);
        }
        std::thread::sleep(settle);
        self.sock
            .set_non_blocking(true)
            .map_err(io("netlink socket non-blocking"))?;
        let more = loop {
            match self.recv() {
                Ok(b) => batch.merge(b),
                Err(crate::Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::WouldBlock =>
                {
                    break Ok(());
                }
                Err(e) => break Err(e),
            }
        };
        self.sock
            .set_non_blocking(false)
            .map_err(io("netlink socket blocking"))?;
        more.map(|()| batch)
    }

    fn change(&self, m: RouteNetlinkMessage, port: u32) -> Option<Change> {
        let (object, action) = match &m {
            RouteNetlinkMessage::NewLink(_) => (Object::Link, Action::New),
            RouteNetlinkMessage::DelLink(_) => (Object::Link, Action::Deleted),
            RouteNetlinkMessage::NewAddress(_) => (Object::Address, Action::New),
            RouteNetlinkMessage::DelAddress(_) => (Object::Address, Action::Deleted),
            RouteNetlinkMessage::NewRoute(_) => (Object::Route, Action::New),
            RouteNetlinkMessage::DelRoute(_) => (Object::Route, Action::Deleted),
            RouteNetlinkMessage::NewRule(_) => (Object::Rule, Action::New),
            RouteNetlinkMessage::DelRule(_) => (Object::Rule, Action::Deleted),
            _ => return None,
        };
        let (owned, table, what) = match &m {
            RouteNetlinkMessage::NewLink(l) | RouteNetlinkMessage::DelLink(l) => {
                let mut name = format!("#{}", l.header.index);
                let mut owned = false;
                for a in &l.attributes {
                    match a {
                        LinkAttribute::IfName(n) => name.clone_from(n),
                        LinkAttribute::IfAlias(s) => owned = s == codec::LINK_ALIAS,
                        _ => {}
                    }
                }
                (owned, None, format!("link {name}"))
            }
            RouteNetlinkMessage::NewAddress(a) | RouteNetlinkMessage::DelAddress(a) => {
                let (address, protocol) = codec::address_from(a)?;
                (
                    protocol == self.own.route_protocol,
                    None,
                    format!("address {address} on #{}", a.header.index),
                )
            }
            RouteNetlinkMessage::NewRoute(r) | RouteNetlinkMessage::DelRoute(r) => {
                let table = route_table(r);
                (
                    self.own.owns(u8::from(r.header.protocol)),
                    Some(table),
                    format!("route {} table {table}", route_destination(r)),
                )
            }
            RouteNetlinkMessage::NewRule(r) | RouteNetlinkMessage::DelRule(r) => {
                let (_, rule, protocol) = codec::rule_from(r)?;
                let table = match rule.action {
                    netpolicy_core::model::RuleAction::Lookup(t) => Some(t),
                    _ => None,
                };
                (self.own.owns(protocol), table, format!("rule {rule}"))
            }
            _ => return None,
        };
        Some(Change {
            object,
            action,
            port,
            owned,
            table,
            what,
        })
    }
}

fn route_table(r: &RouteMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or_else(|| u32::from(r.header.table))
}

fn route_destination(r: &RouteMessage) -> String {
    let dst = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(d) => codec::ip_of(d).map(|ip| ip.to_string()),
        _ => None,
    });
    match dst {
        Some(d) => format!("{d}/{}", r.header.destination_prefix_length),
        None => "default".into(),
    }
}

/// How long [`keep`] (and the agent) lets a burst of notifications arrive before
/// repairing: a flush or a link going down is many notifications, and one repair.
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(5);

/// One repair made by [`keep`].
#[derive(Debug, Clone)]
pub struct Repair {
    /// The change that started it ([`Batch::foreign`]).
    pub trigger: String,
    /// The reconcile's report (its [`crate::Report::drift`] names what was repaired).
    pub report: crate::Report,
}

/// Keeps `desired` in the adapter's namespace for an embedder that has no loop of its
/// own: applies it, then repairs it whenever someone else changes what netpolicy owns
/// (or a route inside one of its hard-synced tables), and never on the adapter's own
/// writes. Each repair is handed to `on_repair`; `ControlFlow::Break` ends the loop.
/// Blocks the calling thread. `netpolicy agent` runs the same steps
/// ([`Monitor::recv_burst`] with [`SETTLE`], [`Batch::foreign`], a reconcile) inside its
/// own loop, which also writes status.
///
/// # Errors
/// The first reconcile, a dump or the notification socket failed (kernel refusals are
/// per-item outcomes in the reports).
pub fn keep(
    adapter: &mut crate::Adapter,
    monitor: &mut Monitor,
    desired: &netpolicy_core::model::RoutingConfig,
    mut on_repair: impl FnMut(Repair) -> std::ops::ControlFlow<()>,
) -> Result<()> {
    let port = adapter.port()?;
    adapter.reconcile(desired, false)?;
    loop {
        let batch = monitor.recv_burst(SETTLE)?;
        let Some(trigger) = batch.foreign(port, &desired.table_hard_sync) else {
            continue;
        };
        let report = adapter.reconcile(desired, false)?;
        if on_repair(Repair { trigger, report }).is_break() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_someone_elses_change_to_what_netpolicy_owns_needs_a_repair() {
        let change = |port: u32, owned: bool, table: Option<u32>| Change {
            object: Object::Route,
            action: Action::Deleted,
            port,
            owned,
            table,
            what: "route 10.0.0.0/8 table 100".into(),
        };
        let b = |c: Change| Batch::Changes(vec![c]);
        assert_eq!(
            b(change(7, true, Some(100))).foreign(7, &[]),
            None,
            "our own"
        );
        assert_eq!(
            b(change(9, true, Some(100))).foreign(7, &[]).as_deref(),
            Some("Deleted route 10.0.0.0/8 table 100")
        );
        assert_eq!(
            b(change(9, false, Some(100))).foreign(7, &[]),
            None,
            "theirs"
        );
        assert!(
            b(change(9, false, Some(100))).foreign(7, &[100]).is_some(),
            "inside a hard-synced table"
        );
        assert!(Batch::Overrun.foreign(7, &[]).is_some(), "dropped: re-read");
        let mut m = b(change(7, true, None));
        m.merge(b(change(9, true, None)));
        assert!(
            m.foreign(7, &[]).is_some(),
            "a merged burst keeps every change"
        );
        m.merge(Batch::Overrun);
        assert_eq!(m, Batch::Overrun);
    }
}
