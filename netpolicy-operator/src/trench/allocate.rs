//! What the trenches get, kept across passes: tables, attractor nodes' addresses and
//! conduit prefixes ([`allocate`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use ipnetwork::IpNetwork;
use netpolicy_core::selector::Labels;
use netpolicy_ipam::{alloc::Allocator, prefix::PrefixAllocator, space::AddressSpace};

use super::{Domain, TABLE_FIRST, TABLE_LAST, attractor_nodes, err, name_of};
use crate::{
    api::{Attractor, Gateway, Trench, TrenchStatus},
    k8s::InputError,
};

/// Hands out what the trenches need, keeping what `previous` (each trench's status) had
/// wherever it still fits: a table per trench and per stream from
/// [`TABLE_FIRST`]..=[`TABLE_LAST`] (unique across trenches), each attractor node's
/// address on each of the interface's prefixes (lowest free, gateways excluded; a node
/// that left frees its own), and each conduit's prefixes from the trench's roots with a
/// prefix per attractor node inside them. An invalid trench keeps its previous
/// allocation untouched (nothing is freed or moved until it is fixed). Returns the
/// allocation by `namespace/name`, and the problems (exhausted ranges) as errors.
pub(crate) fn allocate(
    domains: &[Domain<'_>],
    valid: &BTreeSet<String>,
    nodes: &[(String, Labels)],
    previous: &BTreeMap<String, TrenchStatus>,
    errors: &mut Vec<InputError>,
) -> BTreeMap<String, TrenchStatus> {
    let mut out = tables(domains, valid, previous, errors);
    // Addresses and conduit prefixes, per valid trench.
    for d in domains.iter().filter(|d| valid.contains(&d.key())) {
        let Some(trench) = d.trench else { continue };
        let key = d.key();
        let prev = previous.get(&key).cloned().unwrap_or_default();
        let Some(st) = out.get_mut(&key) else {
            continue;
        };
        for a in &d.attractors {
            let aname = name_of(&a.metadata);
            let by_node = attractor_addresses(d, trench, a, nodes, &prev, errors);
            if !by_node.is_empty() {
                st.node_addresses.insert(aname.to_owned(), by_node);
            }
        }
        conduit_prefixes(d, trench, nodes, &prev, st, errors);
    }
    out
}

/// Tables: every trench's (and stream's) previous number stays reserved while its
/// trench exists; new ones take the lowest free. An invalid trench keeps its whole
/// previous allocation.
fn tables(
    domains: &[Domain<'_>],
    valid: &BTreeSet<String>,
    previous: &BTreeMap<String, TrenchStatus>,
    errors: &mut Vec<InputError>,
) -> BTreeMap<String, TrenchStatus> {
    let mut out: BTreeMap<String, TrenchStatus> = BTreeMap::new();
    let mut used: BTreeSet<u32> = BTreeSet::new();
    let mut wanted: Vec<(String, Option<String>)> = Vec::new();
    for d in domains.iter().filter(|d| d.trench.is_some()) {
        let key = d.key();
        let prev = previous.get(&key).cloned().unwrap_or_default();
        let mut st = TrenchStatus::default();
        if !valid.contains(&key) {
            // Kept as it was: only reserve its numbers.
            used.extend(prev.table);
            used.extend(prev.stream_tables.values().copied());
            st.table = prev.table;
            st.stream_tables = prev.stream_tables.clone();
            st.node_addresses = prev.node_addresses.clone();
            st.conduits = prev.conduits.clone();
            out.insert(key, st);
            continue;
        }
        let in_range = |t: &u32| (TABLE_FIRST..=TABLE_LAST).contains(t);
        match prev.table.filter(in_range).filter(|t| used.insert(*t)) {
            Some(t) => st.table = Some(t),
            None => wanted.push((key.clone(), None)),
        }
        for s in &d.streams {
            let sname = name_of(&s.metadata).to_owned();
            match prev
                .stream_tables
                .get(&sname)
                .copied()
                .filter(in_range)
                .filter(|t| used.insert(*t))
            {
                Some(t) => {
                    st.stream_tables.insert(sname, t);
                }
                None => wanted.push((key.clone(), Some(sname))),
            }
        }
        out.insert(key, st);
    }
    let mut next = TABLE_FIRST;
    for (key, stream) in wanted {
        while used.contains(&next) && next <= TABLE_LAST {
            next += 1;
        }
        if next > TABLE_LAST {
            let (ns, name) = key.split_once('/').unwrap_or(("", &key));
            errors.push(err(
                "Trench",
                ns,
                name,
                "status.table",
                format!("no routing table left in {TABLE_FIRST}..={TABLE_LAST}"),
            ));
            continue;
        }
        used.insert(next);
        let Some(st) = out.get_mut(&key) else {
            continue;
        };
        match stream {
            None => st.table = Some(next),
            Some(s) => {
                st.stream_tables.insert(s, next);
            }
        }
    }
    out
}

/// Each node of attractor `a` gets an address on each of the interface's prefixes of
/// the trench's families (its previous one when it still fits, else the lowest free,
/// gateways excluded); a node that cannot get one of each family gets none.
fn attractor_addresses(
    d: &Domain<'_>,
    trench: &Trench,
    a: &Attractor,
    nodes: &[(String, Labels)],
    prev: &TrenchStatus,
    errors: &mut Vec<InputError>,
) -> BTreeMap<String, Vec<String>> {
    let gateways: BTreeMap<&str, &Gateway> = d
        .gateways
        .iter()
        .map(|g| (name_of(&g.metadata), *g))
        .collect();
    let aname = name_of(&a.metadata);
    let members = attractor_nodes(a, nodes);
    let before = prev.node_addresses.get(aname);
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let exclude: Vec<String> = a
        .spec
        .gateways
        .iter()
        .filter_map(|g| gateways.get(g.as_str()))
        .map(|g| g.spec.address.clone())
        .collect();
    let iface = &a.spec.interface;
    let fam = trench.spec.ip_family;
    // Only the trench's families: the other prefix is accepted and unused.
    let prefixes: Vec<(&str, &String)> = [
        (
            "spec.interface.ipv4Prefix",
            iface.ipv4_prefix.as_ref().filter(|_| fam.v4()),
        ),
        (
            "spec.interface.ipv6Prefix",
            iface.ipv6_prefix.as_ref().filter(|_| fam.v6()),
        ),
    ]
    .into_iter()
    .filter_map(|(field, p)| Some((field, p?)))
    .collect();
    for &(field, prefix) in &prefixes {
        let Ok(net) = prefix.parse::<IpNetwork>() else {
            continue;
        };
        let excl: Vec<String> = exclude
            .iter()
            .filter(|e| e.parse::<IpAddr>().is_ok_and(|ip| net.contains(ip)))
            .cloned()
            .collect();
        let Ok(space) =
            AddressSpace::parse("spec.interface", std::slice::from_ref(prefix), &[], &excl)
        else {
            continue;
        };
        let mut pool = Allocator::new(space);
        let len = net.prefix();
        // Keep each staying node's address.
        for n in &members {
            let kept = before
                .and_then(|b| b.get(*n))
                .into_iter()
                .flatten()
                .filter_map(|a| a.split_once('/'))
                .filter_map(|(ip, _)| ip.parse::<IpAddr>().ok())
                .find(|ip| net.contains(*ip));
            if let Some(ip) = kept
                && pool.allocate_static(n, &ip).is_ok()
            {
                by_node
                    .entry((*n).to_owned())
                    .or_default()
                    .push(format!("{ip}/{len}"));
            }
        }
        for n in &members {
            if pool.by_owner(n).is_some() {
                continue;
            }
            match pool.allocate(n) {
                Ok(ip) => by_node
                    .entry((*n).to_owned())
                    .or_default()
                    .push(format!("{ip}/{len}")),
                Err(_) => errors.push(err(
                    "Attractor",
                    &d.namespace,
                    aname,
                    field,
                    format!(
                        "Exhausted: {prefix} has no address left for node {n:?}; the \
                             node gets nothing of this attractor (no half dual stack)"
                    ),
                )),
            }
        }
    }
    // The trench promised every family it names: a node that could not get an
    // address of each gets none (nothing half-applied); the error above says why.
    by_node.retain(|_, addrs| addrs.len() == prefixes.len());
    by_node
}

/// Conduits: a prefix per family from the trench's roots (the previous one first), and
/// a prefix inside it per node of the attractor that has the conduit as composite.
fn conduit_prefixes(
    d: &Domain<'_>,
    trench: &Trench,
    nodes: &[(String, Labels)],
    prev: &TrenchStatus,
    st: &mut TrenchStatus,
    errors: &mut Vec<InputError>,
) {
    let ipam = &trench.spec.ipam;
    let roots = [
        (
            trench.spec.ip_family.v4(),
            &ipam.ipv4_root,
            ipam.conduit_prefix_length_v4,
            ipam.node_prefix_length_v4,
        ),
        (
            trench.spec.ip_family.v6(),
            &ipam.ipv6_root,
            ipam.conduit_prefix_length_v6,
            ipam.node_prefix_length_v6,
        ),
    ];
    for (on, root, clen, nlen) in roots {
        if !on {
            continue;
        }
        let Ok(root_net) = root.parse::<IpNetwork>() else {
            continue;
        };
        let Ok(mut conduit_pool) = PrefixAllocator::new_prefixes(root_net, clen) else {
            continue;
        };
        let same_family = |s: &str| {
            s.parse::<IpNetwork>()
                .is_ok_and(|n| n.is_ipv4() == root_net.is_ipv4())
        };
        // Previous conduit prefixes first, then new ones in name order.
        let mut order: Vec<(&str, Option<IpNetwork>)> = d
            .conduits
            .iter()
            .map(|x| {
                let n = name_of(&x.metadata);
                let p = prev.conduits.get(n).and_then(|c| {
                    c.prefixes
                        .iter()
                        .find(|p| same_family(p))
                        .and_then(|p| p.parse().ok())
                });
                (n, p)
            })
            .collect();
        order.sort_by_key(|(n, p)| (p.is_none(), *n));
        for (cname, kept) in order {
            let got = match kept {
                Some(p) => conduit_pool
                    .allocate_static(cname, &p)
                    .or_else(|_| conduit_pool.allocate(cname)),
                None => conduit_pool.allocate(cname),
            };
            let Ok(cprefix) = got else {
                errors.push(err(
                    "Conduit",
                    &d.namespace,
                    cname,
                    "metadata.name",
                    format!("trench root {root} has no /{clen} left"),
                ));
                continue;
            };
            let entry = st.conduits.entry(cname.to_owned()).or_default();
            entry.prefixes.push(cprefix.to_string());
            let Ok(mut node_pool) = PrefixAllocator::new_prefixes(cprefix, nlen) else {
                continue;
            };
            let members: Vec<&str> = d
                .attractors
                .iter()
                .filter(|a| a.spec.composites.iter().any(|c| c == cname))
                .flat_map(|a| attractor_nodes(a, nodes))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let prev_nodes = prev.conduits.get(cname).map(|c| &c.nodes);
            for n in &members {
                let kept = prev_nodes
                    .and_then(|m| m.get(*n))
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.parse::<IpNetwork>().ok())
                    .find(|p| p.is_ipv4() == cprefix.is_ipv4());
                if let Some(p) = kept {
                    let _ = node_pool.allocate_static(n, &p);
                }
            }
            for n in &members {
                let got = match node_pool.by_owner(n) {
                    Some(p) => Ok(p),
                    None => node_pool.allocate(n),
                };
                match got {
                    Ok(p) => entry
                        .nodes
                        .entry((*n).to_owned())
                        .or_default()
                        .push(p.to_string()),
                    Err(_) => errors.push(err(
                        "Conduit",
                        &d.namespace,
                        cname,
                        "metadata.name",
                        format!("{cprefix} has no /{nlen} left for node {n:?}"),
                    )),
                }
            }
        }
    }
}
