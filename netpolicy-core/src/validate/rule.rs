//! Routing-policy rules: selectors (fwmark, ports, protocol) and actions.

use super::{Problems, ifname, prefix};
use crate::{
    model::{
        FwMark, IpFamily, IpProto, PortRange, RULE_PRIORITY_MAX, RULE_PRIORITY_MIN, Rule,
        RuleAction, RuleKey, TABLE_LOCAL,
    },
    spec::{IntOrString, RuleSpec},
};

pub(super) fn parse_u32(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

pub(super) fn fwmark(v: &IntOrString, path: &str, p: &mut Problems) -> Option<FwMark> {
    let s = v.as_str();
    let (value, mask) = match s.split_once('/') {
        Some((v, m)) => (parse_u32(v), parse_u32(m)),
        None => (parse_u32(s), Some(u32::MAX)),
    };
    match (value, mask) {
        (Some(value), Some(mask)) => {
            if value & !mask != 0 {
                p.push(
                    path,
                    format!("fwmark {s}: the value has bits outside the mask"),
                );
                return None;
            }
            Some(FwMark { value, mask })
        }
        _ => {
            p.push(
                path,
                format!("{s:?} is not a mark; use a 32-bit number or value/mask, like 0x10/0xff"),
            );
            None
        }
    }
}

pub(super) fn port_range(v: &IntOrString, path: &str, p: &mut Problems) -> Option<PortRange> {
    let s = v.as_str().trim();
    let parse = |x: &str| x.trim().parse::<u16>().ok();
    let (start, end) = match s.split_once('-') {
        Some((a, b)) => (parse(a), parse(b)),
        None => (parse(s), parse(s)),
    };
    match (start, end) {
        // The kernel refuses ranges touching 0 or 65535 (fib_rule_port_range_valid).
        (Some(start), Some(end)) if start == 0 || end == u16::MAX => {
            p.push(
                path,
                format!("port range {s}: the kernel accepts rule ports 1..65534 only"),
            );
            None
        }
        (Some(start), Some(end)) if start <= end => Some(PortRange { start, end }),
        (Some(start), Some(end)) => {
            p.push(
                path,
                format!("port range {s} runs backwards; did you mean {end}-{start}?"),
            );
            None
        }
        _ => {
            p.push(
                path,
                format!("{s:?} is not a port (1..65534) or a range like 2000-3000"),
            );
            None
        }
    }
}

pub(super) fn validate_rule(r: &RuleSpec, path: &str, p: &mut Problems) -> Option<Rule> {
    let before = p.list.len();
    if !(RULE_PRIORITY_MIN..=RULE_PRIORITY_MAX).contains(&r.priority) {
        p.push(
            format!("{path}.priority"),
            format!(
                "priority {} is outside {RULE_PRIORITY_MIN}..{RULE_PRIORITY_MAX} (0, 32766 and \
                 32767 belong to the kernel's own rules)",
                r.priority
            ),
        );
    }
    let from = r
        .from
        .as_deref()
        .and_then(|s| prefix(s, &format!("{path}.from"), p));
    let to =
        r.to.as_deref()
            .and_then(|s| prefix(s, &format!("{path}.to"), p));
    if let (Some(f), Some(t)) = (from, to)
        && IpFamily::of_net(f) != IpFamily::of_net(t)
    {
        p.push(
            format!("{path}.to"),
            format!(
                "from {f} is {} but to {t} is {}; a rule matches one family",
                IpFamily::of_net(f),
                IpFamily::of_net(t)
            ),
        );
    }
    let iif = r
        .iif
        .as_deref()
        .and_then(|s| ifname(s, &format!("{path}.iif"), p));
    let oif = r
        .oif
        .as_deref()
        .and_then(|s| ifname(s, &format!("{path}.oif"), p));
    let fwmark = r
        .fwmark
        .as_ref()
        .and_then(|s| fwmark(s, &format!("{path}.fwmark"), p));
    let ip_proto = match &r.ip_proto {
        None => None,
        Some(s) => match IpProto::parse(s.as_str()) {
            Some(v) => Some(v),
            None => {
                p.push(
                    format!("{path}.ipProto"),
                    format!("{s:?} is not tcp, udp, sctp, icmp, icmpv6 or a number 0..255"),
                );
                None
            }
        },
    };
    let sport = r
        .sport
        .as_ref()
        .and_then(|s| port_range(s, &format!("{path}.sport"), p));
    let dport = r
        .dport
        .as_ref()
        .and_then(|s| port_range(s, &format!("{path}.dport"), p));
    if let Some(proto) = ip_proto
        && !proto.has_ports()
    {
        for (field, set) in [("sport", r.sport.is_some()), ("dport", r.dport.is_some())] {
            if set {
                p.push(
                    format!("{path}.{field}"),
                    format!("ipProto {proto} has no ports; ports need tcp, udp or sctp"),
                );
            }
        }
    }
    let action = match r.action.as_deref().unwrap_or("lookup") {
        "lookup" | "table" => match r.table {
            None => {
                p.push(format!("{path}.table"), "action lookup needs a table");
                None
            }
            Some(0) => {
                p.push(format!("{path}.table"), "table 0 is not a routing table");
                None
            }
            Some(TABLE_LOCAL) => {
                p.push(
                    format!("{path}.table"),
                    "table 255 (local) is looked up by the kernel's own rule at priority 0",
                );
                None
            }
            Some(t) => Some(RuleAction::Lookup(t)),
        },
        other => {
            let a = match other {
                "blackhole" => Some(RuleAction::Blackhole),
                "unreachable" => Some(RuleAction::Unreachable),
                "prohibit" => Some(RuleAction::Prohibit),
                _ => {
                    p.push(
                        format!("{path}.action"),
                        format!(
                            "{other:?} is not an action; use lookup, blackhole, unreachable or \
                             prohibit"
                        ),
                    );
                    None
                }
            };
            if a.is_some() && r.table.is_some() {
                p.push(
                    format!("{path}.table"),
                    format!("action {other} takes no table; remove table or use lookup"),
                );
            }
            a
        }
    };
    if p.list.len() != before {
        return None;
    }
    Some(Rule {
        key: RuleKey {
            priority: r.priority,
            from,
            to,
            iif,
            oif,
            fwmark,
            ip_proto,
            sport,
            dport,
            invert: r.invert,
        },
        action: action?,
    })
}
