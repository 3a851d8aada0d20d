//! The floating-IP job: FloatingIPRanges and FloatingIPs (and Namespaces, for
//! `autoAllocate`) → one address per FloatingIP (DESIGN.md, FloatingIPRange).
//!
//! This module is pure: it turns the objects into netpolicy-ipam's pools, records and
//! requests, and the result back into per-object answers. The allocation rule itself
//! (restore first, static before dynamic, lowest free, never a substitute) is
//! [`netpolicy_ipam::assign`], shared by `netpolicy plan` and the controller.

use std::{collections::BTreeSet, net::IpAddr};

use k8s_openapi::api::core::v1::Namespace;
use netpolicy_ipam::{
    assign::{self, Recorded, Refusal},
    pools::Pools,
    space::AddressSpace,
};

use crate::{
    api::{FloatingIP, FloatingIPRange},
    k8s::InputError,
};

/// Kind names, as in errors.
pub const RANGE_KIND: &str = "FloatingIPRange";
/// Kind names, as in errors.
pub const FIP_KIND: &str = "FloatingIP";

/// A FloatingIP to serve: an object, or one a range's `autoAllocate` creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// FloatingIPRange name.
    pub range: String,
    /// The static request (`spec.address`), as written.
    pub address: Option<String>,
    /// Whether `autoAllocate` creates it.
    pub auto: bool,
}

impl Claim {
    /// The owner name in the pools: `namespace/name`.
    pub fn owner(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One Claim's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The claim.
    pub claim: Claim,
    /// Its address, or the problem (field and message) that kept it from one.
    pub result: Result<IpAddr, (&'static str, String)>,
}

/// An error about FloatingIP `namespace/name`.
pub fn fip_error(namespace: &str, name: &str, field: &str, message: String) -> InputError {
    InputError {
        kind: FIP_KIND.into(),
        name: format!("{namespace}/{name}"),
        field: field.into(),
        message,
    }
}

/// Pools from the ranges (sorted by name by the caller); invalid ranges are reported and
/// left out, so nothing is allocated from them.
pub fn pools(ranges: &[&FloatingIPRange], errors: &mut Vec<InputError>) -> Pools {
    let mut pools = Pools::new();
    for r in ranges {
        let name = r.metadata.name.clone().unwrap_or_default();
        let spans: Vec<(String, String)> = r
            .spec
            .ranges
            .iter()
            .map(|x| (x.start.clone(), x.end.clone()))
            .collect();
        match AddressSpace::parse("spec", &r.spec.cidrs, &spans, &r.spec.exclude) {
            Ok(space) => {
                if let Err(e) = pools.add(&name, space, r.spec.draining) {
                    errors.push(InputError {
                        kind: RANGE_KIND.into(),
                        name,
                        field: "spec.cidrs".into(),
                        message: e.to_string(),
                    });
                }
            }
            Err(e) => InputError::from_fields(RANGE_KIND, &name, e.field_errors(), errors),
        }
    }
    pools
}

/// The FloatingIPs a range's `autoAllocate` creates: one per Namespace that matches its
/// selector and name prefix. An invalid selector or generated name is reported and
/// creates none.
pub fn auto_claims<'a>(
    range: &FloatingIPRange,
    namespaces: impl IntoIterator<Item = &'a Namespace>,
    errors: &mut Vec<InputError>,
) -> Vec<Claim> {
    let Some(auto) = &range.spec.auto_allocate else {
        return Vec::new();
    };
    let range_name = range.metadata.name.clone().unwrap_or_default();
    let fip_name = auto.floating_ip_name(&range_name);
    if let Err(e) = netpolicy_core::names::dns_subdomain(&fip_name) {
        errors.push(InputError {
            kind: RANGE_KIND.into(),
            name: range_name,
            field: "spec.autoAllocate.floatingIPName".into(),
            message: format!("the FloatingIPs it would create are named {fip_name:?}: {e}"),
        });
        return Vec::new();
    }
    let selector = match auto
        .namespace_selector
        .validate("spec.autoAllocate.namespaceSelector")
    {
        Ok(s) => s,
        Err(e) => {
            InputError::from_fields(RANGE_KIND, &range_name, e.field_errors(), errors);
            return Vec::new();
        }
    };
    namespaces
        .into_iter()
        .filter(|ns| {
            let name = ns.metadata.name.as_deref().unwrap_or_default();
            let labels = ns.metadata.labels.clone().unwrap_or_default();
            auto.takes_namespace_name(name) && selector.matches(&labels)
        })
        .map(|ns| Claim {
            namespace: ns.metadata.name.clone().unwrap_or_default(),
            name: fip_name.clone(),
            range: range_name.clone(),
            address: None,
            auto: true,
        })
        .collect()
}

/// The claim of a FloatingIP object (namespace defaults to `default`, as in manifests).
pub fn claim(f: &FloatingIP) -> Claim {
    Claim {
        namespace: f
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: f.metadata.name.clone().unwrap_or_default(),
        range: f.spec.range.clone(),
        address: f.spec.address.clone(),
        auto: false,
    }
}

/// Serves `claims` from `pools` after restoring the addresses recorded in the
/// FloatingIPs' status (`(range, owner, address text)`), with [`assign::assign`]'s rule.
/// `known_ranges` tells a range that does not exist from one that is invalid.
/// Problems with records are reported on their range; answers come in `claims` order.
pub fn serve(
    pools: &mut Pools,
    recorded: &[(String, String, String)],
    claims: Vec<Claim>,
    known_ranges: &BTreeSet<String>,
    errors: &mut Vec<InputError>,
) -> Vec<Answer> {
    let mut records = Vec::new();
    for (range, owner, text) in recorded {
        match text.trim().parse() {
            Ok(address) => records.push(Recorded {
                pool: range,
                owner,
                address,
            }),
            Err(_) => {
                let (ns, name) = owner.split_once('/').unwrap_or(("", owner));
                errors.push(fip_error(
                    ns,
                    name,
                    "status.address",
                    format!("{text:?} is not an IPv4 or IPv6 address"),
                ));
            }
        }
    }
    let owners: Vec<String> = claims.iter().map(Claim::owner).collect();
    let mut parsed: Vec<Option<Result<IpAddr, String>>> = Vec::with_capacity(claims.len());
    for c in &claims {
        parsed.push(c.address.as_ref().map(|t| {
            t.trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("{t:?} is not an IPv4 or IPv6 address"))
        }));
    }
    let requests: Vec<assign::Request<'_>> = claims
        .iter()
        .zip(&owners)
        .zip(&parsed)
        .filter(|(_, p)| !matches!(p, Some(Err(_))))
        .map(|((c, owner), p)| assign::Request {
            pool: &c.range,
            owner,
            address: p.as_ref().and_then(|r| r.as_ref().ok()).copied(),
        })
        .collect();
    let out = assign::assign(pools, &records, &requests);
    for (range, e) in &out.restore_problems {
        errors.push(InputError {
            kind: RANGE_KIND.into(),
            name: range.clone(),
            field: "status".into(),
            message: format!(
                "{e}; those FloatingIPs get no address until this is resolved, and contested \
                 addresses stay reserved"
            ),
        });
    }
    let mut results = out.results.into_iter();
    claims
        .into_iter()
        .zip(parsed)
        .map(|(claim, p)| {
            let result = match p {
                Some(Err(message)) => Err(("spec.address", message)),
                _ => match results.next() {
                    Some(Ok(a)) => Ok(a),
                    Some(Err(r)) => Err(refusal(&claim, r, known_ranges)),
                    None => Err(("spec.range", "not served".to_owned())),
                },
            };
            Answer { claim, result }
        })
        .collect()
}

/// A refusal as the field it is about and a message for people.
fn refusal(claim: &Claim, r: Refusal, known_ranges: &BTreeSet<String>) -> (&'static str, String) {
    match r {
        Refusal::Unrestored { address } => (
            "status.address",
            format!(
                "its address {address} could not be restored (see FloatingIPRange/{}); no \
                 other address is given in its place",
                claim.range
            ),
        ),
        Refusal::NoPool { pool } if known_ranges.contains(&pool) => (
            "spec.range",
            format!("range {pool:?} is invalid (see its errors), so nothing is allocated from it"),
        ),
        Refusal::NoPool { pool } => (
            "spec.range",
            format!("there is no FloatingIPRange named {pool:?}"),
        ),
        Refusal::Static(e) => ("spec.address", e.to_string()),
        Refusal::Dynamic(e) => ("spec.range", e.to_string()),
    }
}
