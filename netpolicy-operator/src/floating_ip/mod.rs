//! The floating-IP job: FloatingIPRanges and FloatingIPs (and Namespaces, for
//! `autoAllocate`) → one address per FloatingIP (docs/architecture.md, FloatingIPRange).
//!
//! This module is pure: it turns the objects into netpolicy-ipam's pools, records and
//! requests, and the result back into per-object answers. The allocation rule itself
//! (restore first, static before dynamic, lowest free, never a substitute) is
//! [`netpolicy_ipam::assign`], shared by `netpolicy plan` and the controller
//! ([`controller`], the only part that awaits).

mod allocation;
pub(crate) mod controller;
mod fast;
pub(crate) mod guest;
mod metrics;
mod pass;

/// The claim object a pass's new claim is written as (plan's oracle test replays passes).
#[cfg(test)]
pub(crate) use pass::claim as claim_object;
pub(crate) use pass::pass;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use k8s_openapi::api::core::v1::Namespace;
use netpolicy_ipam::{assign::Refusal, pools::Pools, space::AddressSpace};

use crate::k8s::events::Told;
use crate::{
    api::{
        ClaimOwner, FloatingIP, FloatingIPClaim, FloatingIPRange, FloatingIPRangeStatus,
        FloatingIPStatus,
    },
    k8s::InputError,
};

/// Kind names, as in errors.
pub(crate) const RANGE_KIND: &str = "FloatingIPRange";
/// Kind names, as in errors.
pub(crate) const FIP_KIND: &str = "FloatingIP";

/// A FloatingIP to serve: an object, or one a range's `autoAllocate` creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    /// Namespace.
    pub(crate) namespace: String,
    /// Name.
    pub(crate) name: String,
    /// FloatingIPRange name.
    pub(crate) range: String,
    /// The static request (`spec.address`), as written.
    pub(crate) address: Option<String>,
    /// Whether `autoAllocate` creates it.
    pub(crate) auto: bool,
}

impl Claim {
    /// The owner name in the pools: `namespace/name`.
    pub(crate) fn owner(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One Claim's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The claim.
    pub(crate) claim: Claim,
    /// Its address, or the problem (field and message) that kept it from one.
    pub(crate) result: Result<IpAddr, (&'static str, String)>,
}

/// An error about FloatingIP `namespace/name`.
pub(crate) fn fip_error(namespace: &str, name: &str, field: &str, message: String) -> InputError {
    InputError {
        kind: FIP_KIND.into(),
        name: format!("{namespace}/{name}"),
        field: field.into(),
        message,
    }
}

/// Pools from the ranges (sorted by name by the caller); invalid ranges are reported and
/// left out, so nothing is allocated from them.
pub(crate) fn pools(ranges: &[&FloatingIPRange], errors: &mut Vec<InputError>) -> Pools {
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
pub(crate) fn auto_claims<'a>(
    range: &FloatingIPRange,
    namespaces: impl IntoIterator<Item = &'a Namespace>,
    harvester: &BTreeMap<String, String>,
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
            // A Harvester range serves only the guests provisioned on its cluster and
            // network ([`guest::harvester_ranges`]).
            let by_harvester = range.spec.harvester.is_none()
                || harvester.get(name).map(String::as_str) == Some(range_name.as_str());
            auto.takes_namespace_name(name) && selector.matches(&labels) && by_harvester
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

/// The FloatingIPs `autoAllocate` still has to make: per range (live ones only), every
/// matching Namespace (not being deleted) that has no FloatingIP from that range yet
/// and no FloatingIP of the generated name. `existing` is every FloatingIP as
/// (namespace, name, range).
pub(crate) fn missing_auto(
    ranges: &[&FloatingIPRange],
    namespaces: &[&Namespace],
    existing: &[(String, String, String)],
    clusters: Option<&[guest::RancherCluster]>,
    errors: &mut Vec<InputError>,
) -> Vec<Claim> {
    let harvester = guest::harvester_ranges(ranges, clusters.unwrap_or_default());
    let names: BTreeSet<(&str, &str)> = existing
        .iter()
        .map(|(ns, n, _)| (ns.as_str(), n.as_str()))
        .collect();
    let served: BTreeSet<(&str, &str)> = existing
        .iter()
        .map(|(ns, _, r)| (ns.as_str(), r.as_str()))
        .collect();
    let live: Vec<&Namespace> = namespaces
        .iter()
        .copied()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .collect();
    let mut out = Vec::new();
    for r in ranges
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
    {
        for c in auto_claims(r, live.iter().copied(), &harvester, errors) {
            // A Namespace that already has a FloatingIP from this range gets no second.
            if served.contains(&(c.namespace.as_str(), c.range.as_str()))
                || names.contains(&(c.namespace.as_str(), c.name.as_str()))
            {
                continue;
            }
            out.push(c);
        }
    }
    out
}

/// The claim of a FloatingIP object (namespace defaults to `default`, as in manifests).
pub(crate) fn claim(f: &FloatingIP) -> Claim {
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

/// `netpolicy plan`'s allocation, through [`allocation`]'s door as the job's: the
/// addresses recorded in the FloatingIPs' status (`(range, owner, address text)`) are
/// restored, `explicit` (the FloatingIPs that exist) served as the job's full pass serves
/// them, then `auto` (the ones `autoAllocate` creates, which the job serves in a later
/// pass from what the first left) one more at a time in the door's order. `known_ranges`
/// tells a range that does not exist from one that is invalid. Problems with records are
/// reported on their range; answers come in `explicit` then `auto` order, with the
/// ledger (the pools as they are left).
pub(crate) fn serve(
    pools: Pools,
    recorded: &[(String, String, String)],
    explicit: Vec<Claim>,
    auto: Vec<Claim>,
    known_ranges: &BTreeSet<String>,
    errors: &mut Vec<InputError>,
) -> (Vec<Answer>, netpolicy_ipam::assign::Ledger) {
    let mut held = Vec::new();
    for (range, owner, text) in recorded {
        match allocation::static_address(Some(text)) {
            Ok(Some(address)) => held.push(allocation::Held {
                range: range.clone(),
                owner: owner.clone(),
                address,
            }),
            Ok(None) => {}
            Err(message) => {
                let (ns, name) = owner.split_once('/').unwrap_or(("", owner));
                errors.push(fip_error(ns, name, "status.address", message));
            }
        }
    }
    let want = |c: &Claim| -> Result<allocation::Want, String> {
        Ok(allocation::Want {
            range: c.range.clone(),
            owner: c.owner(),
            address: allocation::static_address(c.address.as_deref())?,
        })
    };
    let first: Vec<Result<allocation::Want, String>> = explicit.iter().map(want).collect();
    let wants: Vec<allocation::Want> = first.iter().filter_map(|w| w.clone().ok()).collect();
    let (mut ledger, out) = allocation::allocate(pools, &held, &wants);
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
    let mut answered: Vec<Result<IpAddr, (&'static str, String)>> = first
        .iter()
        .zip(&explicit)
        .map(|(w, c)| match w {
            Err(message) => Err(("spec.address", message.clone())),
            Ok(_) => match results.next() {
                Some(Ok(a)) => Ok(a),
                Some(Err(r)) => Err(refusal(&c.range, r, known_ranges)),
                None => Err(("spec.range", "not served".to_owned())),
            },
        })
        .collect();
    let later: Vec<Result<allocation::Want, String>> = auto.iter().map(want).collect();
    let mut order: Vec<(usize, &allocation::Want)> = later
        .iter()
        .enumerate()
        .filter_map(|(i, w)| Some((i, w.as_ref().ok()?)))
        .collect();
    allocation::order(&mut order, |(_, w)| w);
    let mut auto_results: Vec<Option<Result<IpAddr, (&'static str, String)>>> = later
        .iter()
        .map(|w| w.as_ref().err().map(|m| Err(("spec.address", m.clone()))))
        .collect();
    for (i, w) in order {
        auto_results[i] = Some(
            allocation::one_more(&mut ledger, w).map_err(|r| refusal(&w.range, r, known_ranges)),
        );
    }
    answered.extend(
        auto_results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(("spec.range", "not served".to_owned())))),
    );
    let answers = explicit
        .into_iter()
        .chain(auto)
        .zip(answered)
        .map(|(claim, result)| Answer { claim, result })
        .collect();
    (answers, ledger)
}

/// A refusal as the field it is about and a message for people.
fn refusal(range: &str, r: Refusal, known_ranges: &BTreeSet<String>) -> (&'static str, String) {
    match r {
        Refusal::Unrestored { address } => (
            "status.address",
            format!(
                "its address {address} could not be restored (see FloatingIPRange/{}); no \
                 other address is given in its place",
                range
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

// ---------------------------------------------------------------------------------
// The controller's pass: claims are the record of what is allocated.
// ---------------------------------------------------------------------------------

/// Finalizer on every FloatingIPRange: a range with allocations is not deleted until
/// they are gone.
pub(crate) const RANGE_FINALIZER: &str = "netpolicy.io/allocations";
/// Label on the FloatingIPs `autoAllocate` creates: the range that made them.
pub(crate) const AUTO_RANGE_LABEL: &str = "netpolicy.io/auto-allocated-from";

/// What the controller reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct World<'a> {
    /// Every FloatingIPRange.
    pub(crate) ranges: &'a [Arc<FloatingIPRange>],
    /// Every FloatingIP.
    pub(crate) fips: &'a [Arc<FloatingIP>],
    /// Every Namespace.
    pub(crate) namespaces: &'a [Arc<Namespace>],
    /// Every FloatingIPClaim.
    pub(crate) claims: &'a [Arc<FloatingIPClaim>],
    /// Rancher's clusters (guest discovery `rancher`); `None` when the operator does not
    /// read them (`--rancher-clusters` off; `netpolicy plan`).
    pub(crate) clusters: Option<&'a [guest::RancherCluster]>,
    /// What the last visit to each guest cluster (`<namespace>/<secret>` of its
    /// kubeconfig) gave. Absent: not tried yet.
    pub(crate) guests: &'a BTreeMap<String, GuestState>,
    /// The last write of each kube-vip ConfigMap in this cluster (`<namespace>/<name>`):
    /// `Ok`, or the API server's refusal. `None` (`netpolicy plan`, no cluster): every
    /// publication is taken as made. With `Some`, a FloatingIP says `Published=True` only
    /// once its ConfigMap was written.
    pub(crate) published: Option<&'a BTreeMap<String, Result<(), String>>>,
}

/// What the last visit to a guest cluster gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuestState {
    /// Its kube-vip ConfigMap: kept, or why not.
    pub(crate) published: Result<(), GuestFailure>,
    /// kube-vip and kube-vip-cloud-provider: installed, or why not (`None`: not asked).
    pub(crate) installed: Option<Result<(), GuestFailure>>,
}

/// Why a guest could not be served: a condition reason and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuestFailure {
    /// `GuestUnreachable`, `GuestForbidden`, `KubeconfigMissing`, `InstallFailed`.
    pub(crate) reason: &'static str,
    /// What happened.
    pub(crate) message: String,
}

/// A claim released, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Release {
    /// Claim name.
    pub(crate) claim: String,
    /// Its range.
    pub(crate) range: String,
    /// Its address.
    pub(crate) address: String,
    /// Why (for the Event).
    pub(crate) why: String,
    /// The claim's uid: the delete is made on exactly this object.
    pub(crate) claim_uid: Option<String>,
    /// Set when the owner is gone from the cache: the controller reads the owner from
    /// the API server before it releases (a cache may lag behind the claims' watch).
    pub(crate) owner_gone: Option<ClaimOwner>,
}

/// A kube-vip-cloud-provider ConfigMap as the operator keeps it: only its own keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KubeVipConfigMap {
    /// Namespace.
    pub(crate) namespace: String,
    /// Name.
    pub(crate) name: String,
    /// `cidr-<namespace>` → `<ip>/32,<ip>/32` (sorted). Empty: the operator owns no key
    /// there any more.
    pub(crate) data: BTreeMap<String, String>,
}

/// An allocated address: who holds it, from which range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holding {
    /// FloatingIP namespace.
    pub(crate) namespace: String,
    /// FloatingIP name.
    pub(crate) name: String,
    /// Its range.
    pub(crate) range: String,
    /// Its address.
    pub(crate) address: IpAddr,
}

/// `cluster` of a ConfigMap in the operator's own cluster.
pub(crate) const LOCAL: &str = "local";

/// A kube-vip-cloud-provider ConfigMap as the operator keeps it, in this cluster or a
/// guest (`netpolicy plan`'s `kubeVip` entries).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct KubeVipPublication {
    /// `local`, or `<namespace>/<secret>` of the guest cluster's kubeconfig.
    pub cluster: String,
    /// ConfigMap namespace.
    pub namespace: String,
    /// ConfigMap name.
    pub name: String,
    /// The keys the operator owns there.
    pub data: BTreeMap<String, String>,
    /// In a guest: how to reach it and what else to keep there.
    #[serde(skip)]
    pub(crate) guest: Option<GuestTarget>,
}

/// A guest cluster as the controller serves it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GuestTarget {
    /// Its name in metrics and messages: the Rancher Cluster's name, or the Secret.
    pub(crate) name: String,
    /// The key of the kubeconfig in the Secret `cluster` names (`None`: `value`,
    /// `kubeconfig` or `config`, the first present).
    pub(crate) key: Option<String>,
    /// kube-vip and kube-vip-cloud-provider to install, when asked.
    pub(crate) install: Option<Install>,
    /// Seconds between checks (ConfigMap repaired, missing objects put back).
    pub(crate) interval_seconds: u32,
}

/// What to install in a guest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Install {
    /// The objects, in apply order.
    pub(crate) objects: Vec<serde_json::Value>,
    /// Re-apply an object whose rendering changed (otherwise only create missing ones).
    pub(crate) update: bool,
}

/// The guest a FloatingIP in `namespace` is published to under `kv`, or why there is
/// none. `Ok(None)`: the range publishes in this cluster.
pub(crate) fn guest_of(
    kv: &netpolicy_api::KubeVip,
    namespace: &str,
    clusters: Option<&[guest::RancherCluster]>,
) -> Result<Option<(String, GuestTarget)>, String> {
    use netpolicy_api::GuestDiscovery;
    let interval_seconds = kv
        .guests
        .as_ref()
        .map_or(60, |g| g.interval_seconds.max(10));
    let rendered =
        |g: &netpolicy_api::GuestClusters, wanted: bool| -> Result<Option<Install>, String> {
            if !wanted {
                return Ok(None);
            }
            Ok(Some(Install {
                objects: guest::install_objects(
                    g,
                    kv.namespace.as_deref().unwrap_or("kube-system"),
                    kv.config_map.as_deref().unwrap_or("kubevip"),
                )?,
                update: g.update,
            }))
        };
    match (&kv.guests, &kv.guest_kubeconfig_secret) {
        (None, None) => Ok(None),
        (None, Some(secret)) => Ok(Some((
            format!("{namespace}/{}", secret.name),
            GuestTarget {
                name: format!("{namespace}/{}", secret.name),
                key: secret.key.clone(),
                install: None,
                interval_seconds,
            },
        ))),
        (Some(g), secret) if g.discovery == GuestDiscovery::Secret => {
            let secret = secret
                .as_ref()
                .ok_or("guests.discovery is secret but no guestKubeconfigSecret is named")?;
            let install = rendered(g, g.install == netpolicy_api::GuestInstall::Enabled)?;
            Ok(Some((
                format!("{namespace}/{}", secret.name),
                GuestTarget {
                    name: format!("{namespace}/{}", secret.name),
                    key: secret.key.clone(),
                    install,
                    interval_seconds,
                },
            )))
        }
        (Some(g), _) => {
            let clusters = clusters.ok_or(
                "guests.discovery is rancher, but the operator does not read Rancher's \
                 Clusters: start it with --rancher-clusters (chart: floatingIPs.rancher.enabled)",
            )?;
            let c = clusters
                .iter()
                .find(|c| c.cluster_name == namespace)
                .ok_or_else(|| {
                    format!(
                        "no Rancher Cluster (provisioning.cattle.io/v1) has status.clusterName \
                         {namespace:?}"
                    )
                })?;
            let install = rendered(g, c.wants_install(g.install))?;
            Ok(Some((
                c.kubeconfig_secret(),
                GuestTarget {
                    name: c.name.clone(),
                    key: Some("value".into()),
                    install,
                    interval_seconds,
                },
            )))
        }
    }
}

/// The kube-vip ConfigMaps the ranges ask for, from what is held.
///
/// - In this cluster: one ConfigMap per range's `kubeVip` (namespace, name), one key
///   `cidr-<namespace>` per namespace with published addresses (`<ip>/32` or `/128`,
///   sorted, comma-separated). A range that names a ConfigMap but does not publish
///   still lists it (with no keys), so turning publishing off removes the keys.
/// - In a guest (`guestKubeconfigSecret`): per FloatingIP namespace, `cidr-global` in
///   the guest's ConfigMap of the same namespace and name.
/// - Addresses kube-vip never hands out ([`publishable`]) are left out.
pub(crate) fn kube_vip(
    ranges: &[&FloatingIPRange],
    held: &[Holding],
    clusters: Option<&[guest::RancherCluster]>,
) -> Vec<KubeVipPublication> {
    let mut maps: BTreeMap<(String, String, String), BTreeMap<String, Vec<IpAddr>>> =
        BTreeMap::new();
    let mut targets: BTreeMap<String, GuestTarget> = BTreeMap::new();
    for r in ranges {
        let Some(kv) = &r.spec.kube_vip else { continue };
        let (namespace, name) = kv.config_map();
        let range = r.metadata.name.as_deref().unwrap_or_default();
        match (&kv.guest_kubeconfig_secret, &kv.guests) {
            (None, None) => {
                let entry = maps.entry((LOCAL.to_owned(), namespace, name)).or_default();
                if !kv.publish {
                    continue;
                }
                for h in held
                    .iter()
                    .filter(|h| h.range == range && publishable(h.address))
                {
                    entry
                        .entry(format!("cidr-{}", h.namespace))
                        .or_default()
                        .push(h.address);
                }
            }
            _ => {
                // A guest per FloatingIP namespace; one not found is said on the
                // FloatingIP (see `pass`), not here.
                for h in held.iter().filter(|h| h.range == range) {
                    let Ok(Some((cluster, target))) = guest_of(kv, &h.namespace, clusters) else {
                        continue;
                    };
                    if !kv.publish && target.install.is_none() {
                        continue;
                    }
                    let entry = maps
                        .entry((cluster.clone(), namespace.clone(), name.clone()))
                        .or_default();
                    if kv.publish && publishable(h.address) {
                        entry
                            .entry("cidr-global".to_owned())
                            .or_default()
                            .push(h.address);
                    }
                    targets.entry(cluster).or_insert(target);
                }
            }
        }
    }
    maps.into_iter()
        .map(|((cluster, namespace, name), keys)| KubeVipPublication {
            guest: targets.get(&cluster).cloned(),
            cluster,
            namespace,
            name,
            data: keys
                .into_iter()
                .map(|(k, mut addrs)| {
                    addrs.sort();
                    addrs.dedup();
                    let v = addrs
                        .iter()
                        .map(|a| match a {
                            IpAddr::V4(_) => format!("{a}/32"),
                            IpAddr::V6(_) => format!("{a}/128"),
                        })
                        .collect::<Vec<_>>()
                        .join(",");
                    (k, v)
                })
                .collect(),
        })
        .collect()
}

/// A claim a pass makes: the address it allocated and the claim's spec.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NewClaim {
    /// The address (the claim is named after it).
    pub(crate) address: std::net::IpAddr,
    /// The claim's spec.
    pub(crate) spec: crate::api::FloatingIPClaimSpec,
}

/// What one pass wants done. The controller writes only what differs from the world.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pass {
    /// FloatingIPs `autoAllocate` wants that do not exist.
    pub(crate) create_fips: Vec<FloatingIP>,
    /// New claims (one per newly allocated address; [`pass::claim`] makes the object).
    pub(crate) create_claims: Vec<NewClaim>,
    /// Claims to delete: their owner is gone, or moved to its new address.
    pub(crate) releases: Vec<Release>,
    /// Every live FloatingIP's status: (namespace, name, status).
    pub(crate) fip_status: Vec<(String, String, FloatingIPStatus)>,
    /// Every range's status.
    pub(crate) range_status: Vec<(String, FloatingIPRangeStatus)>,
    /// Ranges whose finalizer is to be added (true) or removed (false).
    pub(crate) range_finalizers: Vec<(String, bool)>,
    /// kube-vip ConfigMaps named by any range, in this cluster.
    pub(crate) kube_vip: Vec<KubeVipConfigMap>,
    /// kube-vip ConfigMaps in guest clusters (`cluster` is `<namespace>/<secret>`).
    pub(crate) guests: Vec<KubeVipPublication>,
    /// Problems with the input (logged once per change).
    pub(crate) problems: Vec<InputError>,
    /// The pools as the pass leaves them (its claims counted as made), for the
    /// FloatingIPs created next (`fast`).
    pub(crate) ledger: Option<netpolicy_ipam::assign::Ledger>,
}

/// Whether kube-vip-cloud-provider ever hands out this address (it skips IPv4
/// addresses ending in .0 or .255).
pub(crate) fn publishable(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => !matches!(v4.octets()[3], 0 | 255),
        IpAddr::V6(_) => true,
    }
}

/// The Events a FloatingIP's status change calls for: its address taken by another
/// (a Warning, once per change of reason), and a guest's `Installed` or `Published`
/// that turns or changes its reason (Normal when it holds; not while pending).
pub(crate) fn fip_events(current: &FloatingIPStatus, next: &FloatingIPStatus) -> Vec<Told> {
    use crate::api::conditions::{self, floating_ip as fc};
    let mut out = Vec::new();
    let ready =
        |st: &FloatingIPStatus| conditions::find(&st.conditions, conditions::READY).cloned();
    if let Some(r) = ready(next)
        && r.status == conditions::STATUS_FALSE
        && r.reason == fc::TAKEN
        && ready(current).map(|c| c.reason) != Some(r.reason.clone())
    {
        out.push(Told {
            warning: true,
            action: "Allocate",
            reason: conditions::events::TAKEN.into(),
            note: r.message,
        });
    }
    // Installed / Published: an Event when one fails, and when it recovers from a
    // failure; the routine first success is in the status only (at 10,000 FloatingIPs
    // an Event each was a quarter of a cold start's writes: benches/README.md).
    for c in next
        .conditions
        .iter()
        .filter(|c| c.type_ == fc::INSTALLED || c.type_ == fc::PUBLISHED)
    {
        let before = conditions::find(&current.conditions, &c.type_);
        let changed = before.map(|b| (b.status.as_str(), b.reason.as_str()))
            != Some((c.status.as_str(), c.reason.as_str()));
        let failed_before =
            before.is_some_and(|b| b.status != conditions::STATUS_TRUE && b.reason != fc::PENDING);
        let ok = c.status == conditions::STATUS_TRUE;
        if changed && c.reason != fc::PENDING && (!ok || failed_before) {
            out.push(Told {
                warning: !ok,
                action: "Allocate",
                reason: c.reason.clone(),
                note: c.message.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::conditions::{self, floating_ip as fc};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn range(name: &str, cidr: &str, publish: bool) -> Arc<FloatingIPRange> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPRange",
                "metadata": {"name": name, "uid": format!("u-{name}"), "generation": 1,
                             "finalizers": [RANGE_FINALIZER]},
                "spec": {"cidrs": [cidr], "kubeVip": {"publish": publish}}
            }))
            .unwrap(),
        )
    }

    fn fip(ns: &str, name: &str, range: &str, address: Option<&str>) -> Arc<FloatingIP> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIP",
                "metadata": {"name": name, "namespace": ns, "uid": format!("u-{ns}-{name}"), "generation": 1},
                "spec": {"range": range, "address": address}
            }))
            .unwrap(),
        )
    }

    fn claim(address: &str, range: &str, ns: &str, name: &str) -> Arc<FloatingIPClaim> {
        let a: IpAddr = address.parse().unwrap();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "netpolicy.io/v1alpha1", "kind": "FloatingIPClaim",
                "metadata": {"name": FloatingIPClaim::name_for(a)},
                "spec": {"address": address, "range": range,
                         "owner": {"namespace": ns, "name": name, "uid": format!("u-{ns}-{name}")}}
            }))
            .unwrap(),
        )
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn run(
        ranges: &[Arc<FloatingIPRange>],
        fips: &[Arc<FloatingIP>],
        claims: &[Arc<FloatingIPClaim>],
    ) -> Pass {
        pass(
            World {
                ranges,
                fips,
                namespaces: &[],
                claims,
                clusters: None,
                guests: &BTreeMap::new(),
                published: None,
            },
            &now(),
        )
    }

    fn status<'a>(p: &'a Pass, ns: &str, name: &str) -> &'a FloatingIPStatus {
        &p.fip_status
            .iter()
            .find(|(n, m, _)| n == ns && m == name)
            .unwrap()
            .2
    }

    #[test]
    fn a_claim_just_created_counts_as_held_until_the_cache_shows_it() {
        use std::{collections::HashMap, time::Instant};
        let ranges = [range("blue", "10.0.0.0/29", false)];
        let fips = [fip("apps", "a", "blue", None)];
        // The first pass claims an address for a.
        let first = run(&ranges, &fips, &[]);
        assert_eq!(first.create_claims.len(), 1);
        let made = Arc::new(pass::claim(&first.create_claims[0]));
        let name = made.metadata.name.clone().unwrap();
        let t0 = Instant::now();
        let mut created = HashMap::from([(name.clone(), (Arc::clone(&made), t0))]);
        // A pass before the claims' watch shows it (woken by another FloatingIP, say)
        // claims nothing for a again, and releases nothing.
        let claims = controller::with_created(Vec::new(), &mut created, t0);
        let second = run(&ranges, &fips, &claims);
        assert!(
            second.create_claims.is_empty(),
            "{:?}",
            second.create_claims
        );
        assert!(second.releases.is_empty());
        // Without the memo, that pass claimed a second address for a.
        assert_eq!(run(&ranges, &fips, &[]).create_claims.len(), 1);
        // Forgotten once the cache shows it (the cached copy is what counts)...
        let cached = vec![claim(&made.spec.address, "blue", "apps", "a")];
        assert_eq!(controller::with_created(cached, &mut created, t0).len(), 1);
        assert!(created.is_empty());
        // ...or after the memo's time, if the cache never does (deleted meanwhile).
        let mut created = HashMap::from([(name, (made, t0))]);
        let later = t0 + std::time::Duration::from_secs(61);
        assert!(controller::with_created(Vec::new(), &mut created, later).is_empty());
        assert!(created.is_empty());
    }

    #[test]
    fn claim_names_are_valid_and_one_per_address() {
        assert_eq!(
            FloatingIPClaim::name_for("203.0.113.7".parse().unwrap()),
            "203.0.113.7"
        );
        let v6 = FloatingIPClaim::name_for("2001:db8::".parse().unwrap());
        assert_eq!(v6, "2001-0db8-0000-0000-0000-0000-0000-0000");
        netpolicy_core::names::dns_subdomain(&v6).unwrap();
    }

    #[test]
    fn new_requests_get_claims_and_held_ones_get_their_status() {
        let ranges = [range("blue", "10.0.0.0/29", false)];
        let fips = [
            fip("a", "x", "blue", None),
            fip("b", "y", "blue", Some("10.0.0.1")),
        ];
        let p = run(&ranges, &fips, &[]);
        let mut made: Vec<(&str, &str)> = p
            .create_claims
            .iter()
            .map(|c| (c.spec.owner.name.as_str(), c.spec.address.as_str()))
            .collect();
        made.sort();
        assert_eq!(made, [("x", "10.0.0.2"), ("y", "10.0.0.1")]);
        assert_eq!(status(&p, "a", "x").address, None);
        let claims = [
            claim("10.0.0.2", "blue", "a", "x"),
            claim("10.0.0.1", "blue", "b", "y"),
        ];
        let p = run(&ranges, &fips, &claims);
        assert!(p.create_claims.is_empty() && p.releases.is_empty());
        assert_eq!(status(&p, "a", "x").address.as_deref(), Some("10.0.0.2"));
        let ready = &status(&p, "a", "x").conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Allocated")
        );
        assert_eq!(p.range_status[0].1.allocated.as_deref(), Some("2"));
        assert_eq!(p.range_status[0].1.capacity.as_deref(), Some("6"));
    }

    #[test]
    fn a_taken_static_request_names_the_holder_and_gets_nothing_else() {
        let ranges = [range("blue", "10.0.0.0/29", false)];
        let fips = [
            fip("a", "x", "blue", None),
            fip("b", "y", "blue", Some("10.0.0.1")),
        ];
        let claims = [claim("10.0.0.1", "blue", "a", "x")];
        let p = run(&ranges, &fips, &claims);
        assert!(p.create_claims.is_empty());
        let ready = &status(&p, "b", "y").conditions[0];
        assert_eq!(ready.reason, "Taken");
        assert!(ready.message.contains("a/x"), "{}", ready.message);
    }

    #[test]
    fn orphans_are_released_and_shrunk_ranges_keep_what_they_gave() {
        let ranges = [range("blue", "10.0.0.0/30", false)];
        let fips = [fip("a", "x", "blue", None)];
        // x holds 10.0.0.5, outside the /30 now; z is gone.
        let claims = [
            claim("10.0.0.5", "blue", "a", "x"),
            claim("10.0.0.1", "blue", "c", "z"),
        ];
        let p = run(&ranges, &fips, &claims);
        assert_eq!(p.releases.len(), 1);
        assert_eq!(p.releases[0].address, "10.0.0.1");
        assert!(p.create_claims.is_empty());
        assert_eq!(status(&p, "a", "x").address.as_deref(), Some("10.0.0.5"));
        let outside = p.range_status[0]
            .1
            .conditions
            .iter()
            .find(|c| c.type_ == fc::OUTSIDE)
            .unwrap();
        assert_eq!(outside.status, "True");
    }

    #[test]
    fn a_move_claims_the_new_address_before_the_old_one_goes() {
        let ranges = [range("blue", "10.0.0.0/29", false)];
        let fips = [fip("a", "x", "blue", Some("10.0.0.4"))];
        let p = run(&ranges, &fips, &[claim("10.0.0.1", "blue", "a", "x")]);
        assert_eq!(p.create_claims.len(), 1);
        assert_eq!(p.create_claims[0].spec.address, "10.0.0.4");
        assert!(
            p.releases.is_empty(),
            "the old address is kept until the new one is held"
        );
        assert_eq!(status(&p, "a", "x").address.as_deref(), Some("10.0.0.1"));
        let both = [
            claim("10.0.0.1", "blue", "a", "x"),
            claim("10.0.0.4", "blue", "a", "x"),
        ];
        let p = run(&ranges, &fips, &both);
        assert_eq!(p.releases.len(), 1);
        assert_eq!(p.releases[0].address, "10.0.0.1");
        assert_eq!(status(&p, "a", "x").address.as_deref(), Some("10.0.0.4"));
    }

    #[test]
    fn kube_vip_gets_one_key_per_namespace_and_never_an_address_it_would_not_use() {
        let ranges = [range("blue", "10.0.0.0/23", true)];
        let fips = [
            fip("a", "x", "blue", None),
            fip("a", "y", "blue", None),
            fip("b", "z", "blue", None),
        ];
        let claims = [
            claim("10.0.0.9", "blue", "a", "x"),
            claim("10.0.0.3", "blue", "a", "y"),
            claim("10.0.0.255", "blue", "b", "z"),
        ];
        let p = run(&ranges, &fips, &claims);
        assert_eq!(p.kube_vip.len(), 1);
        assert_eq!(
            (
                p.kube_vip[0].namespace.as_str(),
                p.kube_vip[0].name.as_str()
            ),
            ("kube-system", "kubevip")
        );
        assert_eq!(
            p.kube_vip[0].data,
            BTreeMap::from([("cidr-a".to_owned(), "10.0.0.3/32,10.0.0.9/32".to_owned())])
        );
        let published = status(&p, "b", "z")
            .conditions
            .iter()
            .find(|c| c.type_ == fc::PUBLISHED)
            .unwrap();
        assert_eq!(
            (published.status.as_str(), published.reason.as_str()),
            ("False", "NotPublishable")
        );
    }

    #[test]
    fn overlapping_ranges_say_so_and_the_first_stays_usable() {
        let ranges = [
            range("blue", "10.0.0.0/29", false),
            range("green", "10.0.0.4/30", false),
        ];
        let p = run(&ranges, &[], &[]);
        let cond = |name: &str, t: &str| {
            let st = &p.range_status.iter().find(|(n, _)| n == name).unwrap().1;
            let c = st.conditions.iter().find(|c| c.type_ == t).unwrap();
            (c.status.clone(), c.message.clone())
        };
        assert_eq!(cond("blue", fc::OVERLAP).0, "False");
        assert_eq!(cond("blue", conditions::READY).0, "True");
        let (status, message) = cond("green", fc::OVERLAP);
        assert_eq!(status, "True");
        assert!(message.contains("blue"), "{message}");
        assert_eq!(cond("green", conditions::READY).0, "False");
    }

    #[test]
    fn a_quiet_world_gives_the_statuses_it_has() {
        let ranges = [range("blue", "10.0.0.0/29", false)];
        let fips = [fip("a", "x", "blue", None)];
        let claims = [claim("10.0.0.1", "blue", "a", "x")];
        let p = run(&ranges, &fips, &claims);
        // Feed the statuses back: the next pass wants exactly them.
        let mut f = (*fips[0]).clone();
        f.status = Some(status(&p, "a", "x").clone());
        let mut r = (*ranges[0]).clone();
        r.status = Some(p.range_status[0].1.clone());
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_000_000).unwrap());
        let again = pass(
            World {
                ranges: &[Arc::new(r.clone())],
                fips: &[Arc::new(f.clone())],
                namespaces: &[],
                claims: &claims,
                clusters: None,
                guests: &BTreeMap::new(),
                published: None,
            },
            &later,
        );
        assert_eq!(status(&again, "a", "x"), f.status.as_ref().unwrap());
        assert_eq!(&again.range_status[0].1, r.status.as_ref().unwrap());
        assert!(again.range_finalizers.is_empty() && again.create_claims.is_empty());
    }

    #[test]
    fn a_taken_address_and_a_publication_that_fails_and_recovers_are_told_once() {
        let cond = |type_: &str, status: &str, reason: &str| {
            serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>(
                json!({"type": type_, "status": status, "reason": reason, "message": "m",
                       "lastTransitionTime": "2026-11-27T00:00:00Z"}),
            )
            .unwrap()
        };
        let st = |conds: Vec<_>| FloatingIPStatus {
            address: None,
            conditions: conds,
        };
        let pending = st(vec![cond(conditions::READY, "False", fc::PENDING)]);
        let taken = st(vec![cond(conditions::READY, "False", fc::TAKEN)]);
        let told = fip_events(&pending, &taken);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].reason, conditions::events::TAKEN);
        assert!(told[0].warning);
        assert!(fip_events(&taken, &taken).is_empty(), "told once");
        let publishing = st(vec![
            cond(conditions::READY, "True", fc::ALLOCATED),
            cond(fc::PUBLISHED, "False", fc::PENDING),
        ]);
        let published = st(vec![
            cond(conditions::READY, "True", fc::ALLOCATED),
            cond(fc::PUBLISHED, "True", fc::PUBLISHED_REASON),
        ]);
        assert!(
            fip_events(&taken, &publishing).is_empty(),
            "not while pending"
        );
        assert!(
            fip_events(&publishing, &published).is_empty(),
            "the routine first publication is in the status only"
        );
        let failed = st(vec![
            cond(conditions::READY, "True", fc::ALLOCATED),
            cond(fc::PUBLISHED, "False", fc::PUBLISH_FAILED),
        ]);
        let told = fip_events(&published, &failed);
        assert_eq!(told.len(), 1, "a failure is told");
        assert!(told[0].warning);
        assert!(fip_events(&failed, &failed).is_empty(), "once");
        let told = fip_events(&failed, &published);
        assert_eq!(told.len(), 1, "and its recovery");
        assert!(!told[0].warning);
    }

    /// The FloatingIPs of a world, each `(range, namespace, name, static address)`.
    /// The random worlds' ranges (blue 10.0.0.0/29, green 10.0.1.0/30, one that does
    /// not exist), also `plan`'s oracle's.
    pub(crate) const RANGES: [&str; 3] = ["blue", "green", "none"];
    /// The random worlds' static requests: in, outside and between the ranges, and one
    /// that is not an address.
    pub(crate) const ADDRESSES: [&str; 8] = [
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.3",
        "10.0.0.6",
        "10.0.1.1",
        "10.0.1.2",
        "10.0.9.9",
        "not-an-address",
    ];

    fn fips_of(list: &[(usize, u8, u8, Option<usize>)], prefix: &str) -> Vec<Arc<FloatingIP>> {
        let mut seen = BTreeSet::new();
        list.iter()
            .filter(|(_, ns, n, _)| seen.insert((*ns, *n)))
            .map(|(r, ns, n, a)| {
                fip(
                    &format!("ns{ns}"),
                    &format!("{prefix}{n}"),
                    RANGES[*r],
                    a.map(|i| ADDRESSES[i]),
                )
            })
            .collect()
    }

    fn shown(claims: &[NewClaim]) -> Vec<(String, String, String)> {
        let mut out: Vec<_> = claims
            .iter()
            .map(|c| {
                (
                    format!("{}/{}", c.spec.owner.namespace, c.spec.owner.name),
                    c.spec.range.clone(),
                    c.spec.address.clone(),
                )
            })
            .collect();
        out.sort();
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// The fast path's claims for new FloatingIPs are the full pass's: over random
        /// worlds (two ranges, one of them small enough to fill; static requests in,
        /// outside and between the ranges; invalid addresses; a range that does not
        /// exist), from the ledger of a pass that made claims (their echoes arriving
        /// with the new FloatingIPs) or of a settled one.
        #[test]
        fn the_fast_path_claims_what_a_full_pass_claims(
            existing in proptest::collection::vec((0..3usize, 0..2u8, 0..10u8, proptest::option::of(0..8usize)), 0..10),
            new in proptest::collection::vec((0..3usize, 0..2u8, 0..10u8, proptest::option::of(0..8usize)), 1..4),
            settle in proptest::bool::ANY,
        ) {
            let ranges = [range("blue", "10.0.0.0/29", true), range("green", "10.0.1.0/30", false)];
            let fips = fips_of(&existing, "e");
            let mut claims: Vec<Arc<FloatingIPClaim>> = Vec::new();
            let mut p = run(&ranges, &fips, &claims);
            let mut echoes: Vec<Arc<FloatingIPClaim>> = Vec::new();
            for _ in 0..3 {
                echoes = p.create_claims.iter().map(|c| Arc::new(pass::claim(c))).collect();
                claims.extend(echoes.iter().cloned());
                if !settle || p.create_claims.is_empty() {
                    break;
                }
                p = run(&ranges, &fips, &claims);
            }
            if settle {
                echoes.clear();
            }
            let mut ledger = p.ledger.take().unwrap();
            let added = fips_of(&new, "n");
            let added_refs: Vec<&FloatingIP> = added.iter().map(AsRef::as_ref).collect();
            let echo_refs: Vec<&FloatingIPClaim> = echoes.iter().map(AsRef::as_ref).collect();
            let fast = fast::claims(&mut ledger, &added_refs, &echo_refs, |_| false);
            let all: Vec<Arc<FloatingIP>> = fips.iter().chain(&added).cloned().collect();
            let full = run(&ranges, &all, &claims);
            if let Some(fast) = fast {
                proptest::prop_assert_eq!(shown(&fast), shown(&full.create_claims));
            }
        }
    }

    #[test]
    fn the_fast_path_serves_a_new_floating_ip_and_leaves_anything_else_to_a_full_pass() {
        let ranges = [range("blue", "10.0.0.0/29", true)];
        let fips = [fip("apps", "a", "blue", None)];
        let p = run(&ranges, &fips, &[]);
        let made: Vec<Arc<FloatingIPClaim>> = p
            .create_claims
            .iter()
            .map(|c| Arc::new(pass::claim(c)))
            .collect();
        let echo: Vec<&FloatingIPClaim> = made.iter().map(AsRef::as_ref).collect();
        let ledger = p.ledger.unwrap();
        let b = fip("apps", "b", "blue", None);
        // A new FloatingIP, with the echo of a's claim: the next address, no pass over
        // everything.
        let got = fast::claims(&mut ledger.clone(), &[&b], &echo, |_| false).unwrap();
        assert_eq!(
            shown(&got),
            [("apps/b".into(), "blue".into(), "10.0.0.2".into())]
        );
        // a edited (it holds an address): a full pass's.
        let a = fip("apps", "a", "blue", Some("10.0.0.5"));
        assert!(fast::claims(&mut ledger.clone(), &[&a], &[], |_| false).is_none());
        // In a Namespace being deleted: a full pass's.
        assert!(fast::claims(&mut ledger.clone(), &[&b], &[], |ns| ns == "apps").is_none());
        // A claim the ledger does not hold (another operator's): a full pass's.
        let other = claim("10.0.0.4", "blue", "apps", "x");
        assert!(fast::claims(&mut ledger.clone(), &[&b], &[&other], |_| false).is_none());
        // Refused (taken; a range that does not exist): no claim, as in a full pass
        // (whose status says why), and the others of the batch served.
        let taken = fip("apps", "c", "blue", Some("10.0.0.1"));
        let lost = fip("apps", "d", "none", None);
        let got = fast::claims(&mut ledger.clone(), &[&taken, &b, &lost], &echo, |_| false);
        assert_eq!(
            shown(&got.unwrap()),
            [("apps/b".into(), "blue".into(), "10.0.0.2".into())]
        );
    }
}
