//! Items other jobs need on a node, which the routing job renders into its
//! NodeNetworkConfig (and `plan` shows): a Hetzner RoutedIP's address on its holder, and
//! return routing (`returnRouting` on a FloatingIPRange or a RoutedIPIssuer): the node
//! that holds a floating address gets `from <ip> lookup <table>` and a default route via
//! the gateway on the interface, so replies leave the way the traffic came. They live
//! here, not in any job, because jobs do not import each other.

use std::{collections::BTreeMap, net::IpAddr};

use k8s_openapi::api::core::v1::Service;
use netpolicy_core::{
    render::SourceRef,
    spec::{AddressSpec, RouteSpec, RoutingSpec, RuleSpec},
};

use crate::api::{FloatingIP, FloatingIPRange, ReturnRouting, RoutedIP, RoutedIPIssuer};

/// The annotation kube-vip sets on a LoadBalancer Service: the node announcing it.
pub(crate) const VIP_HOST: &str = "kube-vip.io/vipHost";
/// The annotation kube-vip-cloud-provider sets on a Service: its address(es).
pub(crate) const LOADBALANCER_IPS: &str = "kube-vip.io/loadbalancerIPs";

/// What other jobs need on one node, each item with the object that asked for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobItems {
    pub(crate) addresses: Vec<(AddressSpec, SourceRef)>,
    pub(crate) rules: Vec<(RuleSpec, SourceRef)>,
    pub(crate) routes: Vec<(RouteSpec, SourceRef)>,
}

impl JobItems {
    fn sort(&mut self) {
        let src = |s: &SourceRef| (s.kind.clone(), s.name.clone());
        self.addresses
            .sort_by_key(|(a, s)| (a.dev.clone(), a.address.clone(), src(s)));
        self.rules
            .sort_by_key(|(r, s)| (r.priority, r.from.clone(), src(s)));
        self.routes
            .sort_by_key(|(r, s)| (r.table, r.to.clone(), r.via.clone(), src(s)));
    }
}

/// The rule and route `rr` gives `ip` (`field` names `returnRouting` in errors). `None`
/// when the gateway is of the other family (that address gets no return routing).
///
/// # Errors
/// The gateway is not an address, or the items do not validate (a reserved table, a bad
/// interface name): the message names the field.
pub(crate) fn return_routing(
    rr: &ReturnRouting,
    ip: IpAddr,
    field: &str,
) -> Result<Option<(RuleSpec, RouteSpec)>, String> {
    let gateway: IpAddr = rr
        .gateway
        .parse()
        .map_err(|_| format!("{field}.gateway: {:?} is not an IP address", rr.gateway))?;
    if matches!(rr.table, 0 | 253..=255) {
        return Err(format!(
            "{field}.table: {} is one of the kernel's own tables (253 default, 254 main, 255 \
             local): replies need a table of their own",
            rr.table
        ));
    }
    if gateway.is_ipv4() != ip.is_ipv4() {
        return Ok(None);
    }
    let (len, default) = if ip.is_ipv4() {
        (32, "0.0.0.0/0")
    } else {
        (128, "::/0")
    };
    let rule = RuleSpec {
        priority: rr.priority.unwrap_or(ReturnRouting::DEFAULT_PRIORITY),
        from: Some(format!("{ip}/{len}")),
        table: Some(rr.table),
        ..RuleSpec::default()
    };
    let route = RouteSpec {
        to: default.into(),
        via: Some(gateway.to_string()),
        dev: Some(rr.interface.clone()),
        table: Some(rr.table),
        ..RouteSpec::default()
    };
    RoutingSpec {
        rules: vec![rule.clone()],
        routes: vec![route.clone()],
        ..RoutingSpec::default()
    }
    .validate(field)
    .map_err(|e| e.to_string())?;
    Ok(Some((rule, route)))
}

/// Where kube-vip announces each address: `(namespace, address)` → the node named by
/// `vipHost` on a Service there that holds the address (its status,
/// kube-vip-cloud-provider's annotation, or `spec.loadBalancerIP`). Several Services: the
/// first by name. Built once per pass: O(Services), then one lookup per FloatingIP.
pub(crate) fn vip_hosts<'a>(
    services: impl IntoIterator<Item = &'a Service>,
) -> BTreeMap<(String, IpAddr), String> {
    let mut found: BTreeMap<(String, IpAddr), (String, String)> = BTreeMap::new();
    for s in services {
        let Some(host) = s
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(VIP_HOST))
            .filter(|h| !h.is_empty())
        else {
            continue;
        };
        let name = s.metadata.name.clone().unwrap_or_default();
        let namespace = s.metadata.namespace.clone().unwrap_or_default();
        for ip in service_addresses(s) {
            let e = found
                .entry((namespace.clone(), ip))
                .or_insert_with(|| (name.clone(), host.clone()));
            if name < e.0 {
                *e = (name.clone(), host.clone());
            }
        }
    }
    found.into_iter().map(|(k, (_, h))| (k, h)).collect()
}

/// Every address a Service is known to hold.
fn service_addresses(s: &Service) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = s
        .status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect();
    if let Some(a) = s
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LOADBALANCER_IPS))
    {
        out.extend(a.split(',').filter_map(|x| x.trim().parse::<IpAddr>().ok()));
    }
    if let Some(ip) = s
        .spec
        .as_ref()
        .and_then(|sp| sp.load_balancer_ip.as_deref())
        .and_then(|x| x.parse().ok())
    {
        out.push(ip);
    }
    out
}

/// What the routed-IP and floating-IP jobs need on each node now, from their objects'
/// status: Hetzner addresses and return routing on RoutedIP holders, return routing on
/// the nodes announcing FloatingIPs. A `returnRouting` that does not validate adds
/// nothing and is told in `problems` (`FloatingIPRange/<name>: …`).
pub(crate) fn job_items<'a>(
    rips: impl IntoIterator<Item = &'a RoutedIP>,
    issuers: impl Fn(&str) -> Option<&'a RoutedIPIssuer>,
    fips: impl IntoIterator<Item = &'a FloatingIP>,
    ranges: impl Fn(&str) -> Option<&'a FloatingIPRange>,
    services: &[&'a Service],
    problems: &mut Vec<String>,
) -> BTreeMap<String, JobItems> {
    let mut out: BTreeMap<String, JobItems> = BTreeMap::new();
    let hosts = vip_hosts(services.iter().copied());
    let mut add_return = |out: &mut BTreeMap<String, JobItems>,
                          node: String,
                          rr: &ReturnRouting,
                          ip: IpAddr,
                          owner: &str,
                          source: SourceRef| {
        match return_routing(rr, ip, "spec.returnRouting") {
            Ok(Some((rule, route))) => {
                let items = out.entry(node).or_default();
                items.rules.push((rule, source.clone()));
                items.routes.push((route, source));
            }
            Ok(None) => {}
            Err(e) => {
                let p = format!("{owner}: {e}");
                if !problems.contains(&p) {
                    problems.push(p);
                }
            }
        }
    };
    for r in rips {
        if r.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(issuer) = issuers(&r.spec.issuer_ref.name) else {
            continue;
        };
        let name = r.metadata.name.clone().unwrap_or_default();
        let source = SourceRef {
            kind: "RoutedIP".into(),
            name: name.clone(),
        };
        let st = r.status.as_ref();
        let node = st.and_then(|s| s.node.as_deref());
        let address = st.and_then(|s| s.address.as_deref());
        if let Some((node, item)) = super::host_address(node, address, issuer) {
            out.entry(node)
                .or_default()
                .addresses
                .push((item, source.clone()));
        }
        if let (Some(rr), Some(node), Some(ip)) = (
            issuer.spec.return_routing.as_ref(),
            node,
            address.and_then(|a| a.parse::<IpAddr>().ok()),
        ) {
            let owner = format!(
                "RoutedIPIssuer/{}",
                issuer.metadata.name.as_deref().unwrap_or_default()
            );
            add_return(&mut out, node.to_owned(), rr, ip, &owner, source);
        }
    }
    for f in fips {
        if f.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(range) = ranges(&f.spec.range) else {
            continue;
        };
        let Some(rr) = range.spec.return_routing.as_ref() else {
            continue;
        };
        let Some(ip) = f
            .status
            .as_ref()
            .and_then(|s| s.address.as_deref())
            .and_then(|a| a.parse::<IpAddr>().ok())
        else {
            continue;
        };
        let namespace = f.metadata.namespace.clone().unwrap_or_default();
        let Some(node) = hosts.get(&(namespace.clone(), ip)).cloned() else {
            continue;
        };
        let source = SourceRef {
            kind: "FloatingIP".into(),
            name: format!(
                "{namespace}/{}",
                f.metadata.name.as_deref().unwrap_or_default()
            ),
        };
        let owner = format!(
            "FloatingIPRange/{}",
            range.metadata.name.as_deref().unwrap_or_default()
        );
        add_return(&mut out, node, rr, ip, &owner, source);
    }
    for items in out.values_mut() {
        items.sort();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(gateway: &str, table: u32) -> ReturnRouting {
        ReturnRouting {
            interface: "eth1".into(),
            gateway: gateway.into(),
            table,
            priority: None,
        }
    }

    #[test]
    fn return_routing_is_a_rule_from_the_address_and_a_default_route_in_the_table() {
        let (rule, route) =
            return_routing(&rr("192.0.2.1", 200), "203.0.113.10".parse().unwrap(), "f")
                .unwrap()
                .unwrap();
        assert_eq!(
            (rule.priority, rule.from.as_deref(), rule.table),
            (10_000, Some("203.0.113.10/32"), Some(200))
        );
        assert_eq!(
            (
                route.to.as_str(),
                route.via.as_deref(),
                route.dev.as_deref(),
                route.table
            ),
            ("0.0.0.0/0", Some("192.0.2.1"), Some("eth1"), Some(200))
        );
        // The other family: nothing (an IPv6 address behind an IPv4 gateway).
        assert_eq!(
            return_routing(&rr("192.0.2.1", 200), "2001:db8::10".parse().unwrap(), "f"),
            Ok(None)
        );
        let e = return_routing(
            &rr("gw", 200),
            "203.0.113.10".parse().unwrap(),
            "spec.returnRouting",
        )
        .unwrap_err();
        assert!(e.contains("spec.returnRouting.gateway"), "{e}");
        let e = return_routing(
            &rr("192.0.2.1", 254),
            "203.0.113.10".parse().unwrap(),
            "spec.returnRouting",
        )
        .unwrap_err();
        assert!(e.contains("spec.returnRouting") && e.contains("254"), "{e}");
    }

    #[test]
    fn a_floating_ip_is_held_where_kube_vip_announces_the_service_that_has_its_address() {
        let svc = |name: &str, ns: &str, ip: &str, host: Option<&str>| -> Service {
            let mut annotations = serde_json::Map::new();
            if let Some(h) = host {
                annotations.insert(VIP_HOST.into(), h.into());
            }
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": ns, "annotations": annotations},
                "spec": {"type": "LoadBalancer"},
                "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}
            }))
            .unwrap()
        };
        let ip: IpAddr = "203.0.113.10".parse().unwrap();
        let services = [
            svc("other-ns", "b", "203.0.113.10", Some("x")),
            svc("web", "a", "203.0.113.10", Some("node-a")),
            svc("zz-shared", "a", "203.0.113.10", Some("node-z")),
            svc("unannounced", "a", "203.0.113.11", Some("node-c")),
        ];
        let hosts = vip_hosts(&services);
        let at = |ns: &str| hosts.get(&(ns.to_owned(), ip)).map(String::as_str);
        assert_eq!(at("a"), Some("node-a"), "the first Service by name");
        assert_eq!(at("b"), Some("x"));
        assert_eq!(at("c"), None);
        assert!(vip_hosts(&[svc("web", "a", "203.0.113.10", None)]).is_empty());
    }
}
