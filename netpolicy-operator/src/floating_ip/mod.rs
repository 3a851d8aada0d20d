//! The floating-IP job: FloatingIPRanges and FloatingIPs (and Namespaces, for
//! `autoAllocate`) → one address per FloatingIP (docs/architecture.md, FloatingIPRange).
//!
//! This module is pure: it turns the objects into netpolicy-ipam's pools, records and
//! requests, and the result back into per-object answers. The allocation rule itself
//! (restore first, static before dynamic, lowest free, never a substitute) is
//! [`netpolicy_ipam::assign`], shared by `netpolicy plan` and the controller
//! ([`controller`], the only part that awaits).

pub(crate) mod controller;
pub(crate) mod guest;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use k8s_openapi::{api::core::v1::Namespace, apimachinery::pkg::apis::meta::v1::Time};
use netpolicy_ipam::{
    assign::{self, Recorded, Refusal},
    pools::Pools,
    space::AddressSpace,
};

use crate::{
    api::{
        ClaimOwner, FloatingIP, FloatingIPClaim, FloatingIPClaimSpec, FloatingIPRange,
        FloatingIPRangeStatus, FloatingIPStatus,
        conditions::{self, floating_ip as fc},
    },
    k8s::{self, InputError},
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

/// Serves `claims` from `pools` after restoring the addresses recorded in the
/// FloatingIPs' status (`(range, owner, address text)`), with [`assign::assign`]'s rule.
/// `known_ranges` tells a range that does not exist from one that is invalid.
/// Problems with records are reported on their range; answers come in `claims` order.
pub(crate) fn serve(
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
                    Some(Err(r)) => Err(refusal(&claim.range, r, known_ranges)),
                    None => Err(("spec.range", "not served".to_owned())),
                },
            };
            Answer { claim, result }
        })
        .collect()
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
                objects: guest::install_objects(g)?,
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

/// What one pass wants done. The controller writes only what differs from the world.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pass {
    /// FloatingIPs `autoAllocate` wants that do not exist.
    pub(crate) create_fips: Vec<FloatingIP>,
    /// New claims (one per newly allocated address).
    pub(crate) create_claims: Vec<FloatingIPClaim>,
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
}

/// Whether kube-vip-cloud-provider ever hands out this address (it skips IPv4
/// addresses ending in .0 or .255).
pub(crate) fn publishable(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => !matches!(v4.octets()[3], 0 | 255),
        IpAddr::V6(_) => true,
    }
}

fn owner_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// One pass of the floating-IP controller over the world: which claims to create and
/// delete, and every status. Pure; the controller carries it out.
///
/// # Rules
/// - Claims are the record: an address is allocated exactly when a claim for it
///   exists. Claims whose FloatingIP is gone (or is another object of the same name:
///   a different uid) are released.
/// - A FloatingIP in a Namespace being deleted counts as gone.
/// - A FloatingIP with a claim keeps its address, also when its range shrank or an
///   exclusion now covers it (the range reports `AllocationsOutside`).
/// - A FloatingIP whose `spec.address` names another address than its claim moves:
///   the new address is claimed first; the old claim is released in the pass after
///   the new one exists.
/// - New allocations follow [`netpolicy_ipam::assign`] (static first, lowest free).
pub(crate) fn pass(world: World<'_>, now: &Time) -> Pass {
    let mut out = Pass::default();
    let mut ranges: Vec<&FloatingIPRange> = world.ranges.iter().map(AsRef::as_ref).collect();
    ranges.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut problems = Vec::new();
    let mut pools = pools(&ranges, &mut problems);
    // A range being deleted keeps what it has and hands out nothing new.
    for r in &ranges {
        if r.metadata.deletion_timestamp.is_some() {
            let _ = pools.set_draining(r.metadata.name.as_deref().unwrap_or_default(), true);
        }
    }
    // Auto-allocation: FloatingIPs to create.
    let existing: Vec<(String, String, String)> = world
        .fips
        .iter()
        .map(|f| {
            (
                f.metadata.namespace.clone().unwrap_or_default(),
                f.metadata.name.clone().unwrap_or_default(),
                f.spec.range.clone(),
            )
        })
        .collect();
    let namespaces: Vec<&Namespace> = world.namespaces.iter().map(AsRef::as_ref).collect();
    for c in missing_auto(
        &ranges,
        &namespaces,
        &existing,
        world.clusters,
        &mut problems,
    ) {
        let mut f = FloatingIP::new(
            &c.name,
            crate::api::FloatingIPSpec {
                range: c.range.clone(),
                address: None,
            },
        );
        f.metadata.namespace = Some(c.namespace.clone());
        f.metadata.labels = Some(BTreeMap::from([
            (
                crate::k8s::MANAGED_BY.0.into(),
                crate::k8s::MANAGED_BY.1.into(),
            ),
            (AUTO_RANGE_LABEL.into(), c.range.clone()),
        ]));
        out.create_fips.push(f);
    }
    // Live owners by namespace/name. A FloatingIP in a Namespace being deleted goes with
    // it: its address is released now, not when (or if) the Namespace finishes.
    let terminating: BTreeSet<&str> = world
        .namespaces
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_some())
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let live_fips: BTreeMap<String, &FloatingIP> = world
        .fips
        .iter()
        .filter(|f| f.metadata.deletion_timestamp.is_none())
        .filter(|f| !terminating.contains(f.metadata.namespace.as_deref().unwrap_or_default()))
        .map(|f| {
            (
                owner_key(
                    f.metadata.namespace.as_deref().unwrap_or_default(),
                    f.metadata.name.as_deref().unwrap_or_default(),
                ),
                f.as_ref(),
            )
        })
        .collect();
    // Claims by owner; release the orphans.
    let mut held: BTreeMap<String, Vec<&FloatingIPClaim>> = BTreeMap::new();
    for c in world.claims {
        let key = owner_key(&c.spec.owner.namespace, &c.spec.owner.name);
        let owner = live_fips.get(&key);
        if owner.is_some_and(|f| f.metadata.uid.as_deref() == Some(c.spec.owner.uid.as_str())) {
            held.entry(key).or_default().push(c);
        } else {
            out.releases.push(Release {
                claim: c.metadata.name.clone().unwrap_or_default(),
                range: c.spec.range.clone(),
                address: c.spec.address.clone(),
                why: format!("FloatingIP {key} is gone"),
                claim_uid: c.metadata.uid.clone(),
                owner_gone: Some(c.spec.owner.clone()),
            });
        }
    }
    // Each owner's current claim; a second one is a move in progress (or its leftover).
    let mut current: BTreeMap<String, &FloatingIPClaim> = BTreeMap::new();
    let mut moving_from: BTreeMap<String, &FloatingIPClaim> = BTreeMap::new();
    for (key, mut claims) in held {
        let f = live_fips[&key];
        let wanted = f
            .spec
            .address
            .as_deref()
            .and_then(|t| t.trim().parse::<IpAddr>().ok());
        claims.sort_by(|a, b| a.spec.address.cmp(&b.spec.address));
        let pick = claims
            .iter()
            .position(|c| wanted.is_some_and(|w| c.spec.address == w.to_string()))
            .or_else(|| {
                claims.iter().position(|c| {
                    f.status.as_ref().and_then(|s| s.address.as_deref()) == Some(&c.spec.address)
                })
            })
            .unwrap_or(0);
        let chosen = claims.remove(pick);
        for c in claims {
            out.releases.push(Release {
                claim: c.metadata.name.clone().unwrap_or_default(),
                range: c.spec.range.clone(),
                address: c.spec.address.clone(),
                why: format!("FloatingIP {key} moved to {}", chosen.spec.address),
                claim_uid: c.metadata.uid.clone(),
                owner_gone: None,
            });
        }
        let moves = wanted.is_some_and(|w| chosen.spec.address != w.to_string());
        if moves {
            moving_from.insert(key.clone(), chosen);
        }
        current.insert(key, chosen);
    }
    // Restore: every held address, inside its range as it is now, under its owner (a
    // moving owner's old address under a placeholder, so its new one can be asked for).
    let mut outside: BTreeMap<String, usize> = BTreeMap::new();
    let recorded_owned: Vec<(String, String, IpAddr)> = current
        .iter()
        .filter_map(|(key, c)| {
            let a: IpAddr = c.spec.address.parse().ok()?;
            let inside = pools.get(&c.spec.range).is_some_and(|p| {
                netpolicy_ipam::space::Space::offset_of(p.alloc.space(), &a).is_ok()
            });
            if !inside {
                *outside.entry(c.spec.range.clone()).or_default() += 1;
                return None;
            }
            let owner = if moving_from.contains_key(key) {
                format!("(moving {key})")
            } else {
                key.clone()
            };
            Some((c.spec.range.clone(), owner, a))
        })
        .collect();
    let recorded: Vec<Recorded<'_>> = recorded_owned
        .iter()
        .map(|(range, owner, address)| Recorded {
            pool: range,
            owner,
            address: *address,
        })
        .collect();
    // Requests: FloatingIPs without a claim, and moves.
    let mut requests_owned: Vec<(String, String, Option<IpAddr>)> = Vec::new();
    let mut invalid: BTreeMap<String, String> = BTreeMap::new();
    for (key, f) in &live_fips {
        if current.contains_key(key) && !moving_from.contains_key(key) {
            continue;
        }
        let address = match f.spec.address.as_deref() {
            None => None,
            Some(t) => match t.trim().parse::<IpAddr>() {
                Ok(a) => Some(a),
                Err(_) => {
                    invalid.insert(
                        key.clone(),
                        format!("spec.address: {t:?} is not an IPv4 or IPv6 address"),
                    );
                    continue;
                }
            },
        };
        requests_owned.push((f.spec.range.clone(), key.clone(), address));
    }
    let requests: Vec<assign::Request<'_>> = requests_owned
        .iter()
        .map(|(range, owner, address)| assign::Request {
            pool: range,
            owner,
            address: *address,
        })
        .collect();
    let assigned = assign::assign(&mut pools, &recorded, &requests);
    let known: BTreeSet<String> = ranges
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    let mut refused: BTreeMap<String, Refusal> = BTreeMap::new();
    let mut exhausted: BTreeSet<String> = BTreeSet::new();
    for ((range, key, _), result) in requests_owned.iter().zip(assigned.results) {
        match result {
            Ok(a) => {
                let f = live_fips[key];
                let mut claim = FloatingIPClaim::new(
                    &FloatingIPClaim::name_for(a),
                    FloatingIPClaimSpec {
                        address: a.to_string(),
                        range: range.clone(),
                        owner: ClaimOwner {
                            namespace: f.metadata.namespace.clone().unwrap_or_default(),
                            name: f.metadata.name.clone().unwrap_or_default(),
                            uid: f.metadata.uid.clone().unwrap_or_default(),
                        },
                    },
                );
                claim.metadata.labels = Some(BTreeMap::from([(
                    crate::k8s::MANAGED_BY.0.into(),
                    crate::k8s::MANAGED_BY.1.into(),
                )]));
                out.create_claims.push(claim);
            }
            Err(r) => {
                if matches!(r, Refusal::Dynamic(netpolicy_ipam::Error::Exhausted { .. })) {
                    exhausted.insert(range.clone());
                }
                refused.insert(key.clone(), r);
            }
        }
    }
    // FloatingIP status.
    let ranges_by_name: BTreeMap<&str, &FloatingIPRange> = ranges
        .iter()
        .map(|r| (r.metadata.name.as_deref().unwrap_or_default(), *r))
        .collect();
    for (key, f) in &live_fips {
        let cur = f.status.clone().unwrap_or_default();
        let generation = f.metadata.generation;
        let held = current.get(key);
        let (ok, reason, message) = if let Some(m) = invalid.get(key) {
            (false, fc::INVALID, m.clone())
        } else if let Some(r) = refused.get(key) {
            let (_, message) = refusal(&f.spec.range, r.clone(), &known);
            let reason = match r {
                Refusal::Static(netpolicy_ipam::Error::Taken { .. }) => fc::TAKEN,
                Refusal::Static(netpolicy_ipam::Error::Draining { .. })
                | Refusal::Dynamic(netpolicy_ipam::Error::Draining { .. }) => fc::DRAINING,
                Refusal::Static(_) => fc::OUT_OF_RANGE,
                Refusal::Dynamic(netpolicy_ipam::Error::Exhausted { .. }) => fc::EXHAUSTED_REASON,
                Refusal::NoPool { .. } => fc::NO_RANGE,
                Refusal::Dynamic(_) | Refusal::Unrestored { .. } => fc::PENDING,
            };
            match (held, moving_from.contains_key(key)) {
                // A move that cannot be made: the old address stays, and says why.
                (Some(c), true) => (
                    true,
                    fc::ALLOCATED,
                    format!(
                        "holds {}; cannot move to the requested address: {message}",
                        c.spec.address
                    ),
                ),
                _ => (false, reason, message),
            }
        } else if let Some(c) = held {
            if moving_from.contains_key(key) {
                (
                    true,
                    fc::ALLOCATED,
                    format!("holds {}; moving to the requested address", c.spec.address),
                )
            } else {
                (true, fc::ALLOCATED, format!("holds {}", c.spec.address))
            }
        } else {
            (false, fc::PENDING, "claiming an address".into())
        };
        let address = held.map(|c| c.spec.address.clone());
        let mut conditions = vec![k8s::condition(
            &cur.conditions,
            conditions::READY,
            ok,
            reason,
            message,
            generation,
            now,
        )];
        let kv_any = ranges_by_name
            .get(f.spec.range.as_str())
            .and_then(|r| r.spec.kube_vip.as_ref());
        let fip_ns = f.metadata.namespace.as_deref().unwrap_or_default();
        let guest = kv_any.map(|kv| guest_of(kv, fip_ns, world.clusters));
        let state_of = |cluster: &str| world.guests.get(cluster).cloned();
        // kube-vip installed in the guest, when the range asks.
        if let Some(Ok(Some((cluster, target)))) = &guest
            && target.install.is_some()
        {
            let (ok, why, message) = match state_of(cluster).and_then(|s| s.installed) {
                Some(Ok(())) => (
                    true,
                    fc::INSTALLED_REASON,
                    format!(
                        "kube-vip and kube-vip-cloud-provider are installed in guest {}",
                        target.name
                    ),
                ),
                Some(Err(e)) => (
                    false,
                    e.reason,
                    format!("guest {}: {} (retrying)", target.name, e.message),
                ),
                None => (
                    false,
                    fc::PENDING,
                    format!("installing kube-vip in guest {}", target.name),
                ),
            };
            conditions.push(k8s::condition(
                &cur.conditions,
                fc::INSTALLED,
                ok,
                why,
                message,
                generation,
                now,
            ));
        }
        let kv = kv_any.filter(|k| k.publish);
        if let (Some(kv), Some(a)) = (
            kv,
            address.as_deref().and_then(|a| a.parse::<IpAddr>().ok()),
        ) {
            conditions.push(if !publishable(a) {
                k8s::condition(
                    &cur.conditions,
                    fc::PUBLISHED,
                    false,
                    fc::NOT_PUBLISHABLE,
                    format!(
                        "kube-vip never hands out {a} (an IPv4 address ending in .0 or .255); \
                         it is not published"
                    ),
                    generation,
                    now,
                )
            } else if let Some(Err(why)) = &guest {
                k8s::condition(
                    &cur.conditions,
                    fc::PUBLISHED,
                    false,
                    fc::GUEST_NOT_FOUND,
                    why.clone(),
                    generation,
                    now,
                )
            } else if let Some(Ok(Some((cluster, target)))) = &guest {
                match state_of(cluster).map(|s| s.published) {
                    Some(Ok(())) => k8s::condition(
                        &cur.conditions,
                        fc::PUBLISHED,
                        true,
                        fc::PUBLISHED_REASON,
                        format!(
                            "{a} is published as cidr-global in guest {} (kubeconfig: Secret {cluster})",
                            target.name
                        ),
                        generation,
                        now,
                    ),
                    Some(Err(e)) => k8s::condition(
                        &cur.conditions,
                        fc::PUBLISHED,
                        false,
                        e.reason,
                        format!("guest {}: {} (retrying)", target.name, e.message),
                        generation,
                        now,
                    ),
                    None => k8s::condition(
                        &cur.conditions,
                        fc::PUBLISHED,
                        false,
                        fc::PENDING,
                        format!("publishing to guest {} (kubeconfig: Secret {cluster})", target.name),
                        generation,
                        now,
                    ),
                }
            } else {
                let (ns, cm) = kv.config_map();
                let state = world
                    .published
                    .map_or(Some(Ok(())), |p| p.get(&format!("{ns}/{cm}")).cloned());
                match state {
                    Some(Ok(())) => k8s::condition(
                        &cur.conditions,
                        fc::PUBLISHED,
                        true,
                        fc::PUBLISHED_REASON,
                        format!("{a} is published to kube-vip"),
                        generation,
                        now,
                    ),
                    Some(Err(why)) => k8s::condition(
                        &cur.conditions,
                        fc::PUBLISHED,
                        false,
                        fc::PUBLISH_FAILED,
                        format!(
                            "ConfigMap {ns}/{cm} cannot be written: {why} (retrying with backoff)"
                        ),
                        generation,
                        now,
                    ),
                    None => k8s::condition(
                        &cur.conditions,
                        fc::PUBLISHED,
                        false,
                        fc::PENDING,
                        format!("publishing to ConfigMap {ns}/{cm}"),
                        generation,
                        now,
                    ),
                }
            });
        }
        let (ns, name) = key.split_once('/').unwrap_or_default();
        out.fip_status.push((
            ns.to_owned(),
            name.to_owned(),
            FloatingIPStatus {
                address,
                conditions,
            },
        ));
    }
    // Range status, finalizers.
    let mut claims_per_range: BTreeMap<&str, usize> = BTreeMap::new();
    for c in world.claims {
        *claims_per_range.entry(c.spec.range.as_str()).or_default() += 1;
    }
    let released: BTreeSet<&str> = out.releases.iter().map(|r| r.claim.as_str()).collect();
    let mut kept_per_range: BTreeMap<&str, usize> = BTreeMap::new();
    for c in world.claims {
        if !released.contains(c.metadata.name.as_deref().unwrap_or_default()) {
            *kept_per_range.entry(c.spec.range.as_str()).or_default() += 1;
        }
    }
    let range_problems: BTreeMap<&str, Vec<&InputError>> =
        problems.iter().fold(BTreeMap::new(), |mut m, e| {
            if e.kind == RANGE_KIND {
                m.entry(e.name.as_str()).or_default().push(e);
            }
            m
        });
    for r in &ranges {
        let name = r.metadata.name.as_deref().unwrap_or_default();
        let cur = r.status.clone().unwrap_or_default();
        let generation = r.metadata.generation;
        let has_finalizer = r
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == RANGE_FINALIZER));
        let allocations = claims_per_range.get(name).copied().unwrap_or(0);
        if r.metadata.deletion_timestamp.is_some() {
            if has_finalizer
                && kept_per_range.get(name).copied().unwrap_or(0) == 0
                && allocations == 0
            {
                out.range_finalizers.push((name.to_owned(), false));
            }
        } else if !has_finalizer {
            out.range_finalizers.push((name.to_owned(), true));
        }
        let pool = pools.get(name);
        let capacity = pool.map(|p| p.alloc.space().size());
        let allocated = allocations;
        let problems = range_problems.get(name);
        // A range that could not be added to the pools overlaps another (`pools`
        // reports exactly those on the bare `spec.cidrs` field).
        let overlaps: Vec<&str> = problems
            .into_iter()
            .flatten()
            .filter(|e| e.field == "spec.cidrs")
            .map(|e| e.message.as_str())
            .collect();
        let mut conds = vec![k8s::condition(
            &cur.conditions,
            fc::OVERLAP,
            !overlaps.is_empty(),
            if overlaps.is_empty() {
                fc::NONE
            } else {
                fc::OVERLAP
            },
            if overlaps.is_empty() {
                "no overlap".into()
            } else {
                overlaps.join("; ")
            },
            generation,
            now,
        )];
        let (ready, reason, message) = if let Some(ps) = problems {
            (
                false,
                fc::INVALID,
                ps.iter()
                    .map(|e| format!("{}: {}", e.field, e.message))
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        } else if r.metadata.deletion_timestamp.is_some() {
            (
                false,
                fc::DRAINING,
                format!(
                    "being deleted: waiting until its {allocations} allocation(s) are released"
                ),
            )
        } else {
            (
                true,
                fc::AVAILABLE,
                format!(
                    "{allocated} of {} allocated",
                    capacity.map_or_else(|| "?".into(), |c| c.to_string())
                ),
            )
        };
        let full = exhausted.contains(name)
            || pool.is_some_and(|p| Some(p.alloc.allocated()) == p.alloc.space().size().get());
        conds.insert(
            0,
            k8s::condition(
                &cur.conditions,
                conditions::READY,
                ready && !full,
                if full && ready {
                    fc::EXHAUSTED_REASON
                } else {
                    reason
                },
                message,
                generation,
                now,
            ),
        );
        conds.push(k8s::condition(
            &cur.conditions,
            fc::EXHAUSTED,
            full,
            if full { fc::EXHAUSTED_REASON } else { fc::NONE },
            if full {
                "every address is allocated".into()
            } else {
                "free addresses left".into()
            },
            generation,
            now,
        ));
        let out_n = outside.get(name).copied().unwrap_or(0);
        conds.push(k8s::condition(
            &cur.conditions,
            fc::OUTSIDE,
            out_n > 0,
            if out_n > 0 { fc::OUTSIDE } else { fc::NONE },
            if out_n > 0 {
                format!("{out_n} allocation(s) are outside the range as it is now (it shrank or an exclusion covers them); they are kept until released")
            } else {
                "every allocation is inside the range".into()
            },
            generation,
            now,
        ));
        out.range_status.push((
            name.to_owned(),
            FloatingIPRangeStatus {
                capacity: capacity.map(|c| c.to_string()),
                allocated: Some(allocated.to_string()),
                conditions: conds,
            },
        ));
    }
    // kube-vip: every ConfigMap a range names (in this cluster), with the keys of the
    // ranges that publish.
    let held: Vec<Holding> = current
        .iter()
        .filter_map(|(key, c)| {
            let (ns, name) = key.split_once('/')?;
            Some(Holding {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                range: c.spec.range.clone(),
                address: c.spec.address.parse().ok()?,
            })
        })
        .collect();
    for p in kube_vip(&ranges, &held, world.clusters) {
        if p.cluster == LOCAL {
            out.kube_vip.push(KubeVipConfigMap {
                namespace: p.namespace,
                name: p.name,
                data: p.data,
            });
        } else {
            out.guests.push(p);
        }
    }
    out.problems = problems;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
