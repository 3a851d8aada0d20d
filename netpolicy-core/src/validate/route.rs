//! Routes: destination, gateway, device, type and scope, next hops, table.

use std::net::IpAddr;

use super::{Problems, addr, ifname, prefix};
use crate::{
    model::{
        IpFamily, NextHop, Route, RouteKind, RouteScope, TABLE_DEFAULT, TABLE_LOCAL, TABLE_MAIN,
    },
    spec::{NextHopSpec, RouteSpec},
};

pub(super) fn check_family(
    family: Option<IpFamily>,
    a: IpAddr,
    what: &str,
    path: &str,
    dest: &str,
    p: &mut Problems,
) {
    if let Some(f) = family
        && IpFamily::of(a) != f
    {
        let hint = if dest == "default" && f == IpFamily::V4 {
            "; `default` means 0.0.0.0/0, write ::/0 for the IPv6 default route"
        } else {
            ""
        };
        p.push(
            path,
            format!(
                "{what} {a} is {} but the destination {dest} is {f}{hint}",
                IpFamily::of(a)
            ),
        );
    }
}

pub(super) fn route_table(t: Option<u32>, path: &str, p: &mut Problems) -> u32 {
    let t = t.unwrap_or(TABLE_MAIN);
    match t {
        0 => p.push(path, "table 0 is not a routing table"),
        TABLE_LOCAL => p.push(path, "table 255 (local) is reserved: the kernel owns it"),
        TABLE_DEFAULT => p.push(
            path,
            "table 253 (default) is reserved; use a table of your own",
        ),
        _ => {}
    }
    t
}

/// `r.scope`; an IPv6 route takes none.
pub(super) fn route_scope(
    r: &RouteSpec,
    family: Option<IpFamily>,
    path: &str,
    p: &mut Problems,
) -> Option<RouteScope> {
    let scope = match r.scope.as_deref() {
        None => None,
        Some("global" | "universe") => Some(RouteScope::Global),
        Some("link") => Some(RouteScope::Link),
        Some("host") => Some(RouteScope::Host),
        Some(s) => {
            p.push(
                format!("{path}.scope"),
                format!("{s:?} is not a scope; use global, link or host"),
            );
            None
        }
    };
    // Linux keeps no scope for IPv6 routes: every one reads back as global. A link or
    // host scope could never be observed as desired (the agent would replace the route
    // on every pass), so it is refused; global is the same as none.
    match (family, scope) {
        (Some(IpFamily::V6), Some(RouteScope::Global)) => None,
        (Some(IpFamily::V6), Some(s)) => {
            p.push(
                format!("{path}.scope"),
                format!(
                    "IPv6 routes have no scope in Linux (the kernel keeps every one as \
                     global), so {:?} cannot be applied; leave scope out",
                    s.as_str()
                ),
            );
            None
        }
        (_, s) => s,
    }
}

/// `r.type`, and the fields a route of that type cannot or must have.
pub(super) fn route_kind(r: &RouteSpec, path: &str, p: &mut Problems) -> RouteKind {
    let kind = match r.type_.as_deref() {
        None | Some("unicast") => RouteKind::Unicast,
        Some("local") => RouteKind::Local,
        Some("blackhole") => RouteKind::Blackhole,
        Some("unreachable") => RouteKind::Unreachable,
        Some("prohibit") => RouteKind::Prohibit,
        Some(t) => {
            p.push(
                format!("{path}.type"),
                format!(
                    "{t:?} is not a route type; use unicast, local, blackhole, unreachable or prohibit"
                ),
            );
            RouteKind::Unicast
        }
    };
    if kind != RouteKind::Unicast {
        if r.via.is_some() || !r.nexthops.is_empty() {
            p.push(
                format!("{path}.type"),
                format!(
                    "a {} route has no gateway: leave out via and nexthops",
                    kind.as_str()
                ),
            );
        }
        if kind == RouteKind::Local && r.dev.is_none() {
            p.push(
                format!("{path}.dev"),
                "a local route names the device that receives the traffic (dev: lo)",
            );
        }
        if kind != RouteKind::Local && r.dev.is_some() {
            p.push(
                format!("{path}.dev"),
                format!("a {} route goes to no device: leave out dev", kind.as_str()),
            );
        }
    }
    kind
}

pub(super) fn validate_route(r: &RouteSpec, path: &str, p: &mut Problems) -> Option<Route> {
    let before = p.list.len();
    let to = prefix(&r.to, &format!("{path}.to"), p);
    let family = to.map(IpFamily::of_net);
    let via = r
        .via
        .as_deref()
        .and_then(|s| addr(s, &format!("{path}.via"), p));
    if let Some(a) = via {
        check_family(family, a, "gateway", &format!("{path}.via"), &r.to, p);
    }
    let dev = r
        .dev
        .as_deref()
        .and_then(|s| ifname(s, &format!("{path}.dev"), p));
    let src = r
        .src
        .as_deref()
        .and_then(|s| addr(s, &format!("{path}.src"), p));
    if let Some(a) = src {
        check_family(family, a, "source", &format!("{path}.src"), &r.to, p);
    }
    let table = route_table(r.table, &format!("{path}.table"), p);
    let scope = route_scope(r, family, path, p);
    let kind = route_kind(r, path, p);
    let mut nexthops = Vec::new();
    if kind != RouteKind::Unicast {
        // Checked above: no gateway, and dev where the type needs one.
    } else if !r.nexthops.is_empty() {
        if r.via.is_some() || r.dev.is_some() {
            p.push(
                format!("{path}.nexthops"),
                "nexthops cannot be combined with via or dev; put them in each next hop",
            );
        }
        for (i, n) in r.nexthops.iter().enumerate() {
            if let Some(n) = validate_nexthop(n, family, &r.to, &format!("{path}.nexthops[{i}]"), p)
            {
                nexthops.push(n);
            }
        }
        nexthops.sort_unstable();
        for w in nexthops.windows(2) {
            if w[0].via == w[1].via && w[0].dev == w[1].dev {
                p.push(
                    format!("{path}.nexthops"),
                    "the same next hop is listed twice; use weight instead",
                );
                break;
            }
        }
    } else if r.via.is_none() && r.dev.is_none() {
        p.push(path, "a route needs via, dev or nexthops");
    }
    if r.onlink {
        let has_dev = if r.nexthops.is_empty() {
            r.dev.is_some()
        } else {
            r.nexthops.iter().all(|n| n.dev.is_some())
        };
        if !has_dev {
            p.push(
                format!("{path}.onlink"),
                "onlink needs an output interface (dev) on the route or on every next hop",
            );
        }
    }
    if p.list.len() != before {
        return None;
    }
    Some(Route {
        kind,
        table,
        to: to?,
        metric: r.metric.unwrap_or(0),
        via,
        dev,
        scope,
        onlink: r.onlink,
        src,
        nexthops,
    })
}

pub(super) fn validate_nexthop(
    n: &NextHopSpec,
    family: Option<IpFamily>,
    dest: &str,
    path: &str,
    p: &mut Problems,
) -> Option<NextHop> {
    let before = p.list.len();
    let via = n
        .via
        .as_deref()
        .and_then(|s| addr(s, &format!("{path}.via"), p));
    if let Some(a) = via {
        check_family(family, a, "gateway", &format!("{path}.via"), dest, p);
    }
    let dev = n
        .dev
        .as_deref()
        .and_then(|s| ifname(s, &format!("{path}.dev"), p));
    if n.via.is_none() && n.dev.is_none() {
        p.push(path, "a next hop needs via or dev");
    }
    let weight = n.weight.unwrap_or(1);
    if !(1..=256).contains(&weight) {
        p.push(
            format!("{path}.weight"),
            format!("weight {weight} is outside 1..256"),
        );
    }
    if p.list.len() != before {
        return None;
    }
    Some(NextHop {
        via,
        dev,
        weight: u16::try_from(weight).ok()?,
    })
}
