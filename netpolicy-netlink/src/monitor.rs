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
    /// Which object, by the identity the desired state gives it ([`Subject`]); `None`
    /// for what the model does not describe (the kernel's local routes, say).
    pub subject: Option<Subject>,
}

/// An object by the identity the desired state gives it, the same whether it comes from
/// a kernel notification ([`Change::subject`]) or from a planned operation
/// ([`Subject::of`]): what a repair restored and what a peer fights over are compared
/// by it. A link by name, an address by address and prefix length, a route by `(table,
/// to, metric)`, a rule by family, priority and selector.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    /// A link by name.
    Link(String),
    /// An address (with its prefix length), on whichever link.
    Address(ipnetwork::IpNetwork),
    /// A route by its identity.
    Route(netpolicy_core::model::RouteKey),
    /// A rule by family and identity.
    Rule(
        netpolicy_core::model::IpFamily,
        netpolicy_core::model::RuleKey,
    ),
}

impl Subject {
    /// The object an operation writes.
    pub fn of(op: &netpolicy_core::plan::Op) -> Self {
        use netpolicy_core::plan::Op;
        match op {
            Op::DeleteRule { family, rule, .. } | Op::AddRule { family, rule } => {
                Self::Rule(*family, rule.key.clone())
            }
            Op::ReplaceRule { family, new, .. } => Self::Rule(*family, new.key.clone()),
            Op::DeleteRoute { route, .. } | Op::ReplaceRoute(route) | Op::AddRoute(route) => {
                Self::Route(route.key())
            }
            Op::DeleteAddress { address, .. }
            | Op::AddAddress { address, .. }
            | Op::DeleteLocalRoute { address, .. } => Self::Address(*address),
            Op::DeleteLink(dev) | Op::SetUp(dev) | Op::SetMtu { dev, .. } => {
                Self::Link(dev.as_str().to_owned())
            }
            Op::CreateLink(v) => Self::Link(v.name.as_str().to_owned()),
        }
    }
}

impl std::fmt::Display for Subject {
    /// `route 10.20.0.0/16 table 100`, `ipv4 rule priority 1000 from 10.0.0.0/8`,
    /// `address 203.0.113.7/32`, `link eth0.100`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Link(n) => write!(f, "link {n}"),
            Self::Address(a) => write!(f, "address {a}"),
            Self::Route(k) => write!(f, "route {k}"),
            Self::Rule(family, k) => write!(f, "{family} rule {k}"),
        }
    }
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
        self.foreign_except(own_port, hard_synced, |_| false)
    }

    /// As [`Batch::foreign`], leaving out changes to the objects `fought` says are
    /// fought over (looked at on a timer of their own, not on every notification): a
    /// peer fighting over one object never stops the repair of the others.
    pub fn foreign_except(
        &self,
        own_port: u32,
        hard_synced: &[u32],
        fought: impl Fn(&Subject) -> bool,
    ) -> Option<String> {
        match self {
            Self::Overrun => Some("notifications dropped by the kernel".into()),
            Self::Changes(changes) => changes
                .iter()
                .find(|c| {
                    c.port != own_port
                        && (c.owned
                            || (c.object == Object::Route
                                && c.table.is_some_and(|t| hard_synced.contains(&t))))
                        && !c.subject.as_ref().is_some_and(&fought)
                })
                .map(|c| format!("{:?} {}", c.action, c.what)),
        }
    }

    /// The first link that was added, removed or changed state (up, down, carrier)
    /// in this batch, anyone's, for people and logs (`link eth1`). The kernel removes
    /// IPv4 routes through a link that goes down without a notification for each: a
    /// reader that must know whether its routes are still there looks again.
    pub fn link_change(&self) -> Option<String> {
        match self {
            Self::Overrun => None,
            Self::Changes(changes) => changes
                .iter()
                .find(|c| c.object == Object::Link)
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
        let (owned, table, what, subject) = match &m {
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
                let subject = Subject::Link(name.clone());
                (owned, None, format!("link {name}"), Some(subject))
            }
            RouteNetlinkMessage::NewAddress(a) | RouteNetlinkMessage::DelAddress(a) => {
                let (address, protocol) = codec::address_from(a)?;
                (
                    protocol == self.own.route_protocol,
                    None,
                    format!("address {address} on #{}", a.header.index),
                    Some(Subject::Address(address)),
                )
            }
            RouteNetlinkMessage::NewRoute(r) | RouteNetlinkMessage::DelRoute(r) => {
                let table = route_table(r);
                let subject = codec::route_from(r, &codec::Links::default())
                    .map(|(route, _)| Subject::Route(route.key()));
                (
                    self.own.owns(u8::from(r.header.protocol)),
                    Some(table),
                    format!("route {} table {table}", route_destination(r)),
                    subject,
                )
            }
            RouteNetlinkMessage::NewRule(r) | RouteNetlinkMessage::DelRule(r) => {
                let (family, rule, protocol) = codec::rule_from(r)?;
                let table = match rule.action {
                    netpolicy_core::model::RuleAction::Lookup(t) => Some(t),
                    _ => None,
                };
                let subject = Subject::Rule(family, rule.key.clone());
                (
                    self.own.owns(protocol),
                    table,
                    format!("rule {rule}"),
                    Some(subject),
                )
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
            subject,
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

/// The rate at which notifications may start repairs: a token bucket of passes. One
/// pass repairs whatever a burst of notifications touched (thousands of items after a
/// flush or a link going down are one pass), so the bucket counts passes, not items.
/// An empty bucket delays a repair until its next token (at most `1 / per_second`),
/// never drops it: a storm of changes costs at most `per_second` passes a second after
/// the first `burst`, and every change is still repaired within that delay. Whom a peer
/// fights over is a different matter, per object (the agent's `Fighting`).
#[derive(Debug, Clone)]
pub struct Budget {
    burst: f64,
    per_second: f64,
    tokens: f64,
    at: Option<std::time::Instant>,
}

impl Default for Budget {
    /// [`Budget::BURST`] passes at once, then [`Budget::PER_SECOND`].
    fn default() -> Self {
        Self::new(Self::BURST, Self::PER_SECOND)
    }
}

impl Budget {
    /// Passes a full bucket holds.
    pub const BURST: u32 = 200;
    /// Passes a second once it is empty (a repair waits at most 20 ms for its token).
    pub const PER_SECOND: u32 = 50;

    /// A full bucket of `burst` passes refilled at `per_second` (at least 1 each).
    pub fn new(burst: u32, per_second: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            burst,
            per_second: f64::from(per_second.max(1)),
            tokens: burst,
            at: None,
        }
    }

    /// Takes a pass's token at `now`; `Err(when)`: the bucket is empty, the next token
    /// is there at `when` (start the repair then).
    ///
    /// # Errors
    /// `Err(when)` as above.
    pub fn take(&mut self, now: std::time::Instant) -> std::result::Result<(), std::time::Instant> {
        if let Some(at) = self.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * self.per_second;
            self.tokens = (self.tokens + refill).min(self.burst);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let wait = (1.0 - self.tokens) / self.per_second;
        Err(now + std::time::Duration::from_secs_f64(wait))
    }
}

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
/// Repairs go at the default [`Budget`]'s rate. Blocks the calling thread. `netpolicy
/// agent` runs the same steps ([`Monitor::recv_burst`] with [`SETTLE`],
/// [`Batch::foreign_except`], a [`Budget`], a reconcile) inside its own loop, which also
/// writes status and leaves objects fought over to a timer of their own.
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
    let mut budget = Budget::default();
    loop {
        let batch = monitor.recv_burst(SETTLE)?;
        let Some(trigger) = batch.foreign(port, &desired.table_hard_sync) else {
            continue;
        };
        if let Err(when) = budget.take(std::time::Instant::now()) {
            // Whatever arrives meanwhile is repaired by the same pass.
            std::thread::sleep(when.saturating_duration_since(std::time::Instant::now()));
        }
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
            subject: Some(Subject::Route(netpolicy_core::model::RouteKey {
                table: 100,
                to: "10.0.0.0/8".parse().unwrap(),
                metric: 0,
            })),
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

    #[test]
    fn a_fought_over_object_starts_no_repair_and_hides_no_other() {
        let route = |to: &str| Change {
            object: Object::Route,
            action: Action::Deleted,
            port: 9,
            owned: true,
            table: Some(100),
            what: format!("route {to} table 100"),
            subject: Some(Subject::Route(netpolicy_core::model::RouteKey {
                table: 100,
                to: to.parse().unwrap(),
                metric: 0,
            })),
        };
        let fought = route("10.1.0.0/16").subject.unwrap();
        let is_fought = |s: &Subject| *s == fought;
        let only = Batch::Changes(vec![route("10.1.0.0/16")]);
        assert_eq!(only.foreign_except(7, &[], is_fought), None);
        assert!(only.foreign(7, &[]).is_some(), "nothing fought: a repair");
        let both = Batch::Changes(vec![route("10.1.0.0/16"), route("10.2.0.0/16")]);
        assert_eq!(
            both.foreign_except(7, &[], is_fought).as_deref(),
            Some("Deleted route 10.2.0.0/16 table 100"),
            "another object in the same burst is repaired"
        );
        assert!(
            Batch::Overrun.foreign_except(7, &[], is_fought).is_some(),
            "dropped notifications may hide anything"
        );
    }

    #[test]
    fn an_operation_and_the_notification_of_its_object_name_the_same_subject() {
        use netpolicy_core::{model::IpFamily, plan::Op, spec::RoutingSpec};
        let spec: RoutingSpec = serde_json::from_value(serde_json::json!({
            "routes": [{"to": "2001:db8::/64", "dev": "lo", "table": 100}],
            "rules": [{"priority": 1000, "from": "10.0.0.0/8", "table": 100}],
        }))
        .unwrap();
        let c = spec.validate("spec").unwrap();
        let route = Subject::of(&Op::ReplaceRoute(c.routes[0].clone()));
        assert_eq!(route.to_string(), "route 2001:db8::/64 table 100");
        let rule = Subject::of(&Op::AddRule {
            family: IpFamily::V4,
            rule: c.rules[0].clone(),
        });
        assert_eq!(rule.to_string(), "IPv4 rule priority 1000 from 10.0.0.0/8");
        // The kernel's notification of that route, as the adapter writes it (IPv6
        // metric 0 is the kernel's 1024): the same subject.
        let mut links = codec::Links::default();
        links.index.insert("lo".into(), 1);
        links.names.insert(1, "lo".into());
        let m = codec::route_message(&c.routes[0], 99, &links).unwrap();
        let (back, _) = codec::route_from(&m, &links).unwrap();
        assert_eq!(Subject::Route(back.key()), route);
    }

    #[test]
    fn a_storm_of_repairs_is_delayed_by_its_rate_never_dropped() {
        let t0 = std::time::Instant::now();
        let mut b = Budget::new(3, 20);
        for _ in 0..3 {
            assert_eq!(b.take(t0), Ok(()));
        }
        let when = b.take(t0).unwrap_err();
        let wait = when - t0;
        assert!(
            wait > std::time::Duration::from_millis(45)
                && wait <= std::time::Duration::from_millis(50),
            "{wait:?}"
        );
        assert_eq!(b.take(when), Ok(()), "the token is there when promised");
        // A quiet minute fills the bucket again, never past its burst.
        let later = when + std::time::Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
    }
}
