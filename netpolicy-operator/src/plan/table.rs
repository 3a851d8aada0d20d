//! `netpolicy plan`'s table output: what a person reads ([`PlanReport::to_table`]).

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    sync::Arc,
};

use comfy_table::{ContentArrangement, Table, presets};
use netpolicy_core::{
    render::{RenderedSpec, SourceRef},
    spec::{RouteSpec, RuleSpec, VlanSpec},
};

use super::{PlanReport, RouteReflectorReport};

fn sources(s: &[SourceRef]) -> String {
    s.iter()
        .map(|s| format!("{}/{}", s.kind, s.name))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn vlan_row(v: &VlanSpec) -> (String, String) {
    let mut d = format!(
        "{} id {} on {}",
        v.protocol.as_deref().unwrap_or("802.1Q"),
        v.id,
        v.link
    );
    if let Some(m) = v.mtu {
        let _ = write!(d, ", mtu {m}");
    }
    if !v.addresses.is_empty() {
        let _ = write!(d, ", {}", v.addresses.join(" "));
    }
    (v.name.clone().unwrap_or_default(), d)
}

pub(crate) fn route_row(r: &RouteSpec) -> (String, String) {
    let item = format!("{} table {}", r.to, r.table.unwrap_or(254));
    let mut d = Vec::new();
    if let Some(v) = &r.via {
        d.push(format!("via {v}"));
    }
    if let Some(v) = &r.dev {
        d.push(format!("dev {v}"));
    }
    for n in &r.nexthops {
        let mut h = String::from("nexthop");
        if let Some(v) = &n.via {
            let _ = write!(h, " via {v}");
        }
        if let Some(v) = &n.dev {
            let _ = write!(h, " dev {v}");
        }
        let _ = write!(h, " weight {}", n.weight.unwrap_or(1));
        d.push(h);
    }
    if let Some(m) = r.metric.filter(|m| *m != 0) {
        d.push(format!("metric {m}"));
    }
    if let Some(s) = &r.scope {
        d.push(format!("scope {s}"));
    }
    if let Some(s) = &r.src {
        d.push(format!("src {s}"));
    }
    if r.onlink {
        d.push("onlink".into());
    }
    (item, d.join(", "))
}

pub(crate) fn rule_row(r: &RuleSpec) -> (String, String) {
    let mut item = format!("priority {}", r.priority);
    if r.invert {
        item.push_str(" not");
    }
    for (k, v) in [
        ("from", r.from.as_deref()),
        ("to", r.to.as_deref()),
        ("iif", r.iif.as_deref()),
        ("oif", r.oif.as_deref()),
        ("fwmark", r.fwmark.as_ref().map(|x| x.as_str())),
        ("ipproto", r.ip_proto.as_ref().map(|x| x.as_str())),
        ("sport", r.sport.as_ref().map(|x| x.as_str())),
        ("dport", r.dport.as_ref().map(|x| x.as_str())),
    ] {
        if let Some(v) = v {
            let _ = write!(item, " {k} {v}");
        }
    }
    let action = match (r.action.as_deref(), r.table) {
        (Some(a), _) => a.to_owned(),
        (None, Some(t)) => format!("lookup {t}"),
        (None, None) => "lookup".into(),
    };
    (item, action)
}

/// The lines of `text` that are not tables, wrapped at word boundaries into `width`
/// columns (continuations indented two more than the line); tables are fitted already.
pub(crate) fn wrap_prose(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let is_table = body.starts_with(['│', '┌', '├', '╞', '└']);
        if is_table || body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let indent = body.len() - body.trim_start().len();
        let continued = indent + 2;
        let mut current = " ".repeat(indent);
        let mut used = indent;
        let mut empty = true;
        for word in body.split_whitespace() {
            let n = word.chars().count();
            if !empty && used + 1 + n > width {
                out.push_str(&current);
                out.push('\n');
                current = " ".repeat(continued);
                used = continued;
                empty = true;
            }
            if !empty {
                current.push(' ');
                used += 1;
            }
            current.push_str(word);
            used += n;
            empty = false;
        }
        out.push_str(&current);
        if line.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// A table in the report's style: fitted into `width` columns when given.
pub(crate) fn new_table(width: Option<u16>) -> Table {
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED);
    if let Some(w) = width {
        t.set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(w);
    }
    t
}

impl PlanReport {
    /// Renders the report for a person: one table per group of nodes with the same
    /// result (what, details, and from which object), then held nodes and errors.
    pub fn to_table(&self) -> String {
        self.to_table_width(None)
    }

    /// As [`PlanReport::to_table`], each table fitted into `width` columns (long cells
    /// wrapped) when given: what a terminal of that width shows. `None`: every table as
    /// wide as its longest cell (for pipes and files).
    pub fn to_table_width(&self, width: Option<u16>) -> String {
        let mut out = String::new();
        self.nodes_table(width, &mut out);
        self.floating_ip_table(width, &mut out);
        self.guests_table(width, &mut out);
        if let Some(rr) = &self.route_reflectors {
            rr_table(rr, width, &mut out);
        }
        self.trenches_table(width, &mut out);
        self.rollout_table(width, &mut out);
        self.routed_ips_table(width, &mut out);
        self.held_and_errors(width, &mut out);
        match width {
            Some(w) => wrap_prose(&out, usize::from(w)),
            None => out,
        }
    }

    /// One table per group of nodes with the same result.
    fn nodes_table(&self, width: Option<u16>, out: &mut String) {
        let mut groups: Vec<(Arc<RenderedSpec>, Vec<&str>)> = Vec::new();
        let mut index: HashMap<usize, usize> = HashMap::new();
        for (node, spec) in &self.nodes {
            let key = Arc::as_ptr(spec) as usize;
            let at = *index.entry(key).or_insert_with(|| {
                groups.push((Arc::clone(spec), Vec::new()));
                groups.len() - 1
            });
            groups[at].1.push(node);
        }
        for (spec, nodes) in &groups {
            let _ = writeln!(
                out,
                "{} {}",
                if nodes.len() == 1 { "NODE" } else { "NODES" },
                nodes.join(", ")
            );
            if spec.vlans.is_empty() && spec.routes.is_empty() && spec.rules.is_empty() {
                out.push_str("  (no items: nothing netpolicy manages on these nodes)\n\n");
                continue;
            }
            let mut t = new_table(width);
            t.set_header(["WHAT", "ITEM", "DETAILS", "FROM"]);
            for v in &spec.vlans {
                let (i, d) = vlan_row(&v.item);
                t.add_row(["vlan".into(), i, d, sources(&v.sources)]);
            }
            for r in &spec.routes {
                let (i, d) = route_row(&r.item);
                t.add_row(["route".into(), i, d, sources(&r.sources)]);
            }
            for r in &spec.rules {
                let (i, d) = rule_row(&r.item);
                t.add_row(["rule".into(), i, d, sources(&r.sources)]);
            }
            let _ = writeln!(out, "{t}");
            if !spec.table_hard_sync.is_empty() {
                let tables: Vec<String> = spec
                    .table_hard_sync
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                let _ = writeln!(
                    out,
                    "  hard-synced tables: {} (routes there that are not listed, and rules that look \
                     them up and are not listed, are removed, whoever made them)",
                    tables.join(", ")
                );
            }
            out.push('\n');
        }
    }

    /// Floating-IP ranges and FloatingIPs.
    fn floating_ip_table(&self, width: Option<u16>, out: &mut String) {
        if !self.floating_ip_ranges.is_empty() || !self.floating_ips.is_empty() {
            let mut t = new_table(width);
            t.set_header(["FLOATING IP RANGE", "CAPACITY", "ALLOCATED", "STATE"]);
            for r in &self.floating_ip_ranges {
                t.add_row([
                    r.name.clone(),
                    r.capacity.to_string(),
                    r.allocated.to_string(),
                    if r.draining { "draining" } else { "open" }.to_owned(),
                ]);
            }
            let _ = writeln!(out, "{t}");
            let mut t = new_table(width);
            t.set_header(["FLOATING IP", "RANGE", "ADDRESS", "HOW"]);
            for f in &self.floating_ips {
                t.add_row([
                    format!("{}/{}", f.namespace, f.name),
                    f.range.clone(),
                    if f.address.is_empty() {
                        "(none: see errors)".to_owned()
                    } else {
                        f.address.clone()
                    },
                    if f.auto {
                        "auto (namespace selector)"
                    } else {
                        "requested"
                    }
                    .to_owned(),
                ]);
            }
            let _ = writeln!(out, "{t}\n");
        }
    }

    /// Guest clusters: what each gets installed and published.
    fn guests_table(&self, width: Option<u16>, out: &mut String) {
        if !self.guests.is_empty() {
            let mut t = new_table(width);
            t.set_header([
                "GUEST NAMESPACE",
                "CLUSTER",
                "KUBECONFIG",
                "INSTALLS",
                "PUBLISHES",
            ]);
            for g in &self.guests {
                t.add_row([
                    g.namespace.clone(),
                    g.cluster.clone(),
                    g.kubeconfig.clone(),
                    if g.install.is_empty() {
                        "-".to_owned()
                    } else {
                        format!(
                            "kube-vip, kube-vip-cloud-provider ({} objects)",
                            g.install.len()
                        )
                    },
                    g.kube_vip
                        .iter()
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                ]);
            }
            let _ = writeln!(out, "{t}\n");
        }
    }

    /// Traffic domains: tables, attractor nodes, addresses.
    fn trenches_table(&self, width: Option<u16>, out: &mut String) {
        if !self.trenches.is_empty() {
            let mut t = new_table(width);
            t.set_header(["TRENCH", "TABLES", "ATTRACTOR", "NODE", "ADDRESSES"]);
            for tr in &self.trenches {
                let tables = std::iter::once(tr.table.map_or("-".to_owned(), |t| t.to_string()))
                    .chain(tr.stream_tables.iter().map(|(s, t)| format!("{s}: {t}")))
                    .collect::<Vec<_>>()
                    .join("\n");
                for a in &tr.attractors {
                    for (node, addrs) in &a.addresses {
                        t.add_row([
                            format!("{}/{}", tr.namespace, tr.name),
                            tables.clone(),
                            a.name.clone(),
                            node.clone(),
                            addrs.join(", "),
                        ]);
                    }
                }
            }
            let _ = writeln!(out, "{t}\n");
        }
    }

    /// Each policy's rollout waves.
    fn rollout_table(&self, width: Option<u16>, out: &mut String) {
        if !self.rollout.is_empty() {
            let mut t = new_table(width);
            t.set_header(["ROLLOUT OF A CHANGE TO", "AT ONCE", "PROBES", "WAVES"]);
            for r in &self.rollout {
                t.add_row([
                    r.policy.clone(),
                    format!("{} ({})", r.nodes_at_once, r.max_unavailable),
                    if r.probes.is_empty() {
                        "(API server)".to_owned()
                    } else {
                        r.probes.join("\n")
                    },
                    r.waves
                        .iter()
                        .enumerate()
                        .map(|(i, w)| format!("{}: {}", i + 1, w.join(", ")))
                        .collect::<Vec<_>>()
                        .join("\n"),
                ]);
            }
            let _ = writeln!(out, "{t}\n");
        }
    }

    /// Routed IPs and their elected nodes.
    fn routed_ips_table(&self, width: Option<u16>, out: &mut String) {
        if !self.routed_ips.is_empty() {
            let mut t = new_table(width);
            t.set_header(["ROUTED IP", "ELECTED NODE"]);
            for r in &self.routed_ips {
                t.add_row([
                    r.name.clone(),
                    if r.node.is_empty() {
                        "(none eligible: see warnings)".to_owned()
                    } else {
                        r.node.clone()
                    },
                ]);
            }
            let _ = writeln!(out, "{t}\n");
        }
    }

    /// Held nodes, then the errors.
    fn held_and_errors(&self, width: Option<u16>, out: &mut String) {
        if !self.held_nodes.is_empty() {
            let _ = writeln!(out, "HELD NODES (keep their last good config)");
            for (node, why) in &self.held_nodes {
                let _ = writeln!(out, "  {node}: {}", why.join("; "));
            }
            out.push('\n');
        }
        if self.errors.is_empty() {
            let _ = writeln!(out, "No errors.");
        } else {
            let mut t = new_table(width);
            t.set_header(["OBJECT", "FIELD", "PROBLEM"]);
            for e in &self.errors {
                let object = if e.kind.is_empty() {
                    "-".to_owned()
                } else {
                    format!("{}/{}", e.kind, e.name)
                };
                t.add_row([object, e.field.clone(), e.message.clone()]);
            }
            let _ = writeln!(out, "ERRORS ({})\n{t}", self.errors.len());
        }
    }
}

/// The route-reflector part of the table output.
fn rr_table(rr: &RouteReflectorReport, width: Option<u16>, out: &mut String) {
    let mut served: BTreeMap<&str, usize> = BTreeMap::new();
    for rs in rr.clients.values() {
        for r in rs {
            *served.entry(r.as_str()).or_default() += 1;
        }
    }
    let mut t = new_table(width);
    t.set_header(["ROUTE REFLECTOR", "ZONE", "CLUSTER ID", "CLIENTS"]);
    for r in &rr.reflectors {
        t.add_row([
            r.node.clone(),
            r.zone.clone(),
            r.cluster_id.clone(),
            served
                .get(r.node.as_str())
                .copied()
                .unwrap_or(0)
                .to_string(),
        ]);
    }
    let _ = writeln!(out, "{t}");
    let mut t = new_table(width);
    t.set_header(["BGPPEER", "NODE SELECTOR", "PEER SELECTOR"]);
    for p in &rr.bgp_peers {
        t.add_row([
            p.name.clone(),
            p.spec.node_selector.clone().unwrap_or_default(),
            p.spec.peer_selector.clone().unwrap_or_default(),
        ]);
    }
    let _ = writeln!(
        out,
        "{t}\n  {} clients peer with {} reflectors through {} BGPPeer objects",
        rr.clients.len(),
        rr.reflectors.len(),
        rr.bgp_peers.len()
    );
    if rr.steps.is_empty() {
        let _ = writeln!(
            out,
            "  the cluster already has this topology: nothing to change"
        );
    } else {
        let ops: usize = rr.steps.iter().map(|s| s.ops.len()).sum();
        let _ = writeln!(
            out,
            "  {ops} change(s) in {} make-before-break step(s) from the state in the input:",
            rr.steps.len()
        );
        for s in &rr.steps {
            let _ = writeln!(out, "    {} ({} operation(s))", s.phase, s.ops.len());
        }
    }
    for w in &rr.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
    out.push('\n');
}
