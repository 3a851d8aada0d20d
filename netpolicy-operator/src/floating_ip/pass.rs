//! One pass of the floating-IP job over the world, in the phases it runs: FloatingIPs
//! `autoAllocate` wants, each FloatingIP's claims (orphans released, moves found),
//! allocation ([`netpolicy_ipam::assign`]), each FloatingIP's status, each range's
//! status and finalizer, and the kube-vip publications. Pure; the controller and
//! `netpolicy plan` carry it out.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use netpolicy_ipam::{
    assign::{Ledger, Refusal},
    pools::Pools,
};

use super::{
    AUTO_RANGE_LABEL, GuestTarget, Holding, KubeVipConfigMap, LOCAL, NewClaim, Pass,
    RANGE_FINALIZER, RANGE_KIND, Release, World,
    allocation::{self, Held, Want, static_address},
    guest_of, kube_vip, missing_auto, pools, publishable, refusal,
};
use crate::{
    api::{
        ClaimOwner, FloatingIP, FloatingIPClaim, FloatingIPClaimSpec, FloatingIPRange,
        FloatingIPRangeStatus, FloatingIPStatus,
        conditions::{self, floating_ip as fc},
    },
    k8s::{self, InputError},
};

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
    // A range being deleted keeps what it has and hands out nothing new. (A range the
    // pools refused has nothing to drain: its error is already in `problems`.)
    for r in &ranges {
        if r.metadata.deletion_timestamp.is_some()
            && let Some(name) = r.metadata.name.as_deref()
            && pools.get(name).is_some()
        {
            pools.set_draining(name, true).ok();
        }
    }
    out.create_fips = auto_fips(world, &ranges, &mut problems);
    let owners = Owners::of(world, &mut out.releases);
    let (allocated, ledger) = allocate(&owners, pools, &ranges, &mut out.create_claims);
    let pools = ledger.pools();
    let ranges_by_name: BTreeMap<&str, &FloatingIPRange> = ranges
        .iter()
        .map(|r| (r.metadata.name.as_deref().unwrap_or_default(), *r))
        .collect();
    // Sized once: at 10,000 FloatingIPs doubling left up to 60 % unused capacity, and
    // each growth held the old and the new buffer at once (a cold start's heap peak).
    out.fip_status.reserve_exact(owners.live.len());
    for (key, f) in &owners.live {
        let kv = ranges_by_name
            .get(f.spec.range.as_str())
            .and_then(|r| r.spec.kube_vip.as_ref());
        out.fip_status
            .push(fip_status(key, f, kv, &owners, &allocated, world, now));
    }
    let counts = ClaimCounts::of(world.claims, &out.releases);
    for r in &ranges {
        let (name, status, finalizer) = range_status(r, pools, &problems, &allocated, &counts, now);
        if let Some(add) = finalizer {
            out.range_finalizers.push((name.clone(), add));
        }
        out.range_status.push((name, status));
    }
    // kube-vip: every ConfigMap a range names (in this cluster), with the keys of the
    // ranges that publish.
    let held: Vec<Holding> = owners
        .current
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
    out.ledger = Some(ledger);
    out
}

/// The FloatingIPs `autoAllocate` wants that do not exist.
fn auto_fips(
    world: World<'_>,
    ranges: &[&FloatingIPRange],
    problems: &mut Vec<InputError>,
) -> Vec<FloatingIP> {
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
    let namespaces: Vec<&k8s_openapi::api::core::v1::Namespace> =
        world.namespaces.iter().map(AsRef::as_ref).collect();
    missing_auto(ranges, &namespaces, &existing, world.clusters, problems)
        .into_iter()
        .map(|c| {
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
            f
        })
        .collect()
}

/// The live FloatingIPs and the claim each holds.
struct Owners<'w> {
    /// Live FloatingIPs by `namespace/name`.
    live: BTreeMap<String, &'w FloatingIP>,
    /// Each owner's current claim.
    current: BTreeMap<String, &'w FloatingIPClaim>,
    /// Owners whose `spec.address` names another address than their current claim.
    moving: BTreeSet<String>,
}

impl<'w> Owners<'w> {
    /// The owners of `world`; claims of gone owners, and an owner's extra claims (a
    /// move's leftover), go to `releases`.
    fn of(world: World<'w>, releases: &mut Vec<Release>) -> Self {
        // A FloatingIP in a Namespace being deleted goes with it: its address is
        // released now, not when (or if) the Namespace finishes.
        let terminating: BTreeSet<&str> = world
            .namespaces
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_some())
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let live: BTreeMap<String, &FloatingIP> = world
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
            let owner = live.get(&key);
            if owner.is_some_and(|f| f.metadata.uid.as_deref() == Some(c.spec.owner.uid.as_str())) {
                held.entry(key).or_default().push(c);
            } else {
                releases.push(release(c, format!("FloatingIP {key} is gone"), true));
            }
        }
        // Each owner's current claim; a second one is a move in progress (or its
        // leftover).
        let mut current = BTreeMap::new();
        let mut moving = BTreeSet::new();
        for (key, mut claims) in held {
            let f = live[&key];
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
                        f.status.as_ref().and_then(|s| s.address.as_deref())
                            == Some(&c.spec.address)
                    })
                })
                .unwrap_or(0);
            let chosen = claims.remove(pick);
            for c in claims {
                let why = format!("FloatingIP {key} moved to {}", chosen.spec.address);
                releases.push(release(c, why, false));
            }
            if wanted.is_some_and(|w| chosen.spec.address != w.to_string()) {
                moving.insert(key.clone());
            }
            current.insert(key, chosen);
        }
        Self {
            live,
            current,
            moving,
        }
    }
}

/// The release of claim `c`; `owner_gone`: the controller reads the owner from the API
/// server first (a cache may lag behind the claims' watch).
fn release(c: &FloatingIPClaim, why: String, owner_gone: bool) -> Release {
    Release {
        claim: c.metadata.name.clone().unwrap_or_default(),
        range: c.spec.range.clone(),
        address: c.spec.address.clone(),
        why,
        claim_uid: c.metadata.uid.clone(),
        owner_gone: owner_gone.then(|| c.spec.owner.clone()),
    }
}

/// What allocation found.
#[derive(Default)]
struct Allocated {
    /// Allocations outside their range as it is now, per range.
    outside: BTreeMap<String, usize>,
    /// Owners whose `spec.address` is not an address, and why.
    invalid: BTreeMap<String, String>,
    /// Owners whose request was refused, and why.
    refused: BTreeMap<String, Refusal>,
    /// Ranges a dynamic request found full.
    exhausted: BTreeSet<String>,
    /// Every range's name.
    known: BTreeSet<String>,
}

/// Restores every held address into `pools` and allocates the requests (FloatingIPs
/// without a claim, and moves): a claim for each address given, in `claims`; the
/// pools as it leaves them, kept for the FloatingIPs that come next (`super::fast`).
fn allocate(
    owners: &Owners<'_>,
    pools: Pools,
    ranges: &[&FloatingIPRange],
    claims: &mut Vec<NewClaim>,
) -> (Allocated, Ledger) {
    let mut out = Allocated {
        known: ranges
            .iter()
            .filter_map(|r| r.metadata.name.clone())
            .collect(),
        ..Allocated::default()
    };
    // Restore: every held address, inside its range as it is now, under its owner (a
    // moving owner's old address under a placeholder, so its new one can be asked for).
    let held: Vec<Held> = owners
        .current
        .iter()
        .filter_map(|(key, c)| {
            let a: IpAddr = c.spec.address.parse().ok()?;
            let inside = pools.get(&c.spec.range).is_some_and(|p| {
                netpolicy_ipam::space::Space::offset_of(p.alloc.space(), &a).is_ok()
            });
            if !inside {
                *out.outside.entry(c.spec.range.clone()).or_default() += 1;
                return None;
            }
            let owner = if owners.moving.contains(key) {
                format!("(moving {key})")
            } else {
                key.clone()
            };
            Some(Held {
                range: c.spec.range.clone(),
                owner,
                address: a,
            })
        })
        .collect();
    let mut wants: Vec<Want> = Vec::new();
    for (key, f) in &owners.live {
        if owners.current.contains_key(key) && !owners.moving.contains(key) {
            continue;
        }
        match static_address(f.spec.address.as_deref()) {
            Ok(address) => wants.push(Want {
                range: f.spec.range.clone(),
                owner: key.clone(),
                address,
            }),
            Err(message) => {
                out.invalid
                    .insert(key.clone(), format!("spec.address: {message}"));
            }
        }
    }
    let (ledger, assigned) = allocation::allocate(pools, &held, &wants);
    claims.reserve_exact(wants.len());
    for (w, result) in wants.iter().zip(assigned.results) {
        match result {
            Ok(a) => claims.push(new_claim(a, &w.range, owners.live[&w.owner])),
            Err(r) => {
                if matches!(r, Refusal::Dynamic(netpolicy_ipam::Error::Exhausted { .. })) {
                    out.exhausted.insert(w.range.clone());
                }
                out.refused.insert(w.owner.clone(), r);
            }
        }
    }
    (out, ledger)
}

/// The claim of address `a` of `range` for `f`, as a pass holds it (its spec: a fifth of
/// the object's memory, at 10,000 claims in a cold start's pass).
pub(super) fn new_claim(a: IpAddr, range: &str, f: &FloatingIP) -> NewClaim {
    NewClaim {
        address: a,
        spec: FloatingIPClaimSpec {
            address: a.to_string(),
            range: range.to_owned(),
            owner: ClaimOwner {
                namespace: f.metadata.namespace.clone().unwrap_or_default(),
                name: f.metadata.name.clone().unwrap_or_default(),
                uid: f.metadata.uid.clone().unwrap_or_default(),
            },
        },
    }
}

/// The FloatingIPClaim to create for `c`: named after its address, labelled as ours.
pub(crate) fn claim(c: &NewClaim) -> FloatingIPClaim {
    let mut claim = FloatingIPClaim::new(&FloatingIPClaim::name_for(c.address), c.spec.clone());
    claim.metadata.labels = Some(BTreeMap::from([(
        crate::k8s::MANAGED_BY.0.into(),
        crate::k8s::MANAGED_BY.1.into(),
    )]));
    claim
}

/// A FloatingIP's status (its key is `namespace/name`; `kv`: its range's kube-vip
/// settings): `Ready`, and `Installed` and `Published` where its range asks for them.
fn fip_status(
    key: &str,
    f: &FloatingIP,
    kv: Option<&netpolicy_api::KubeVip>,
    owners: &Owners<'_>,
    allocated: &Allocated,
    world: World<'_>,
    now: &Time,
) -> (String, String, FloatingIPStatus) {
    let cur = f.status.clone().unwrap_or_default();
    let cond = |type_: &str, ok: bool, reason: &str, message: String| {
        k8s::condition(
            &cur.conditions,
            type_,
            ok,
            reason,
            message,
            f.metadata.generation,
            now,
        )
    };
    let held = owners.current.get(key);
    let (ok, reason, message) = ready(key, f, held.copied(), owners, allocated);
    let address = held.map(|c| c.spec.address.clone());
    let mut conditions = vec![cond(conditions::READY, ok, reason, message)];
    let fip_ns = f.metadata.namespace.as_deref().unwrap_or_default();
    let guest = kv.map(|kv| guest_of(kv, fip_ns, world.clusters));
    // kube-vip installed in the guest, when the range asks.
    if let Some(Ok(Some((cluster, target)))) = &guest
        && target.install.is_some()
    {
        let (ok, why, message) = installed(world, cluster, target);
        conditions.push(cond(fc::INSTALLED, ok, why, message));
    }
    if let (Some(kv), Some(a)) = (
        kv.filter(|k| k.publish),
        address.as_deref().and_then(|a| a.parse::<IpAddr>().ok()),
    ) {
        let (ok, why, message) = published(world, kv, guest.as_ref(), a);
        conditions.push(cond(fc::PUBLISHED, ok, why, message));
    }
    let (ns, name) = key.split_once('/').unwrap_or_default();
    (
        ns.to_owned(),
        name.to_owned(),
        FloatingIPStatus {
            address,
            conditions,
        },
    )
}

/// A FloatingIP's `Ready`: its address, or why it has none (or cannot move).
fn ready(
    key: &str,
    f: &FloatingIP,
    held: Option<&FloatingIPClaim>,
    owners: &Owners<'_>,
    allocated: &Allocated,
) -> (bool, &'static str, String) {
    let moving = owners.moving.contains(key);
    if let Some(m) = allocated.invalid.get(key) {
        return (false, fc::INVALID, m.clone());
    }
    if let Some(r) = allocated.refused.get(key) {
        let (_, message) = refusal(&f.spec.range, r.clone(), &allocated.known);
        let reason = match r {
            Refusal::Static(netpolicy_ipam::Error::Taken { .. }) => fc::TAKEN,
            Refusal::Static(netpolicy_ipam::Error::Draining { .. })
            | Refusal::Dynamic(netpolicy_ipam::Error::Draining { .. }) => fc::DRAINING,
            Refusal::Static(_) => fc::OUT_OF_RANGE,
            Refusal::Dynamic(netpolicy_ipam::Error::Exhausted { .. }) => fc::EXHAUSTED_REASON,
            Refusal::NoPool { .. } => fc::NO_RANGE,
            Refusal::Dynamic(_) | Refusal::Unrestored { .. } => fc::PENDING,
        };
        return match (held, moving) {
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
        };
    }
    match held {
        Some(c) if moving => (
            true,
            fc::ALLOCATED,
            format!("holds {}; moving to the requested address", c.spec.address),
        ),
        Some(c) => (true, fc::ALLOCATED, format!("holds {}", c.spec.address)),
        None => (false, fc::PENDING, "claiming an address".into()),
    }
}

/// `Installed`: kube-vip and kube-vip-cloud-provider in guest `cluster`.
fn installed(
    world: World<'_>,
    cluster: &str,
    target: &GuestTarget,
) -> (bool, &'static str, String) {
    guest_condition(
        world.guests.get(cluster).and_then(|s| s.installed.clone()),
        target,
        (
            fc::INSTALLED_REASON,
            format!(
                "kube-vip and kube-vip-cloud-provider are installed in guest {}",
                target.name
            ),
        ),
        format!("installing kube-vip in guest {}", target.name),
    )
}

/// A guest condition from the last visit's `state`: `done` when it succeeded, the
/// failure (retried) when it did not, `pending` before the first visit.
fn guest_condition(
    state: Option<Result<(), super::GuestFailure>>,
    target: &GuestTarget,
    done: (&'static str, String),
    pending: String,
) -> (bool, &'static str, String) {
    match state {
        Some(Ok(())) => (true, done.0, done.1),
        Some(Err(e)) => (
            false,
            e.reason,
            format!("guest {}: {} (retrying)", target.name, e.message),
        ),
        None => (false, fc::PENDING, pending),
    }
}

/// `Published`: address `a` in its kube-vip ConfigMap, in this cluster or its guest.
fn published(
    world: World<'_>,
    kv: &netpolicy_api::KubeVip,
    guest: Option<&Result<Option<(String, GuestTarget)>, String>>,
    a: IpAddr,
) -> (bool, &'static str, String) {
    if !publishable(a) {
        return (
            false,
            fc::NOT_PUBLISHABLE,
            format!(
                "kube-vip never hands out {a} (an IPv4 address ending in .0 or .255); it is \
                 not published"
            ),
        );
    }
    match guest {
        Some(Err(why)) => (false, fc::GUEST_NOT_FOUND, why.clone()),
        Some(Ok(Some((cluster, target)))) => guest_condition(
            world.guests.get(cluster).map(|s| s.published.clone()),
            target,
            (
                fc::PUBLISHED_REASON,
                format!(
                    "{a} is published as cidr-global in guest {} (kubeconfig: Secret {cluster})",
                    target.name
                ),
            ),
            format!(
                "publishing to guest {} (kubeconfig: Secret {cluster})",
                target.name
            ),
        ),
        _ => {
            let (ns, cm) = kv.config_map();
            let state = world
                .published
                .map_or(Some(Ok(())), |p| p.get(&format!("{ns}/{cm}")).cloned());
            match state {
                Some(Ok(())) => (
                    true,
                    fc::PUBLISHED_REASON,
                    format!("{a} is published to kube-vip"),
                ),
                Some(Err(why)) => (
                    false,
                    fc::PUBLISH_FAILED,
                    format!("ConfigMap {ns}/{cm} cannot be written: {why} (retrying with backoff)"),
                ),
                None => (
                    false,
                    fc::PENDING,
                    format!("publishing to ConfigMap {ns}/{cm}"),
                ),
            }
        }
    }
}

/// Claims per range: all of them, and those this pass keeps.
struct ClaimCounts<'w> {
    all: BTreeMap<&'w str, usize>,
    kept: BTreeMap<&'w str, usize>,
}

impl<'w> ClaimCounts<'w> {
    fn of(claims: &'w [std::sync::Arc<FloatingIPClaim>], releases: &[Release]) -> Self {
        let released: BTreeSet<&str> = releases.iter().map(|r| r.claim.as_str()).collect();
        let mut all: BTreeMap<&str, usize> = BTreeMap::new();
        let mut kept: BTreeMap<&str, usize> = BTreeMap::new();
        for c in claims {
            *all.entry(c.spec.range.as_str()).or_default() += 1;
            if !released.contains(c.metadata.name.as_deref().unwrap_or_default()) {
                *kept.entry(c.spec.range.as_str()).or_default() += 1;
            }
        }
        Self { all, kept }
    }
}

/// A range's name, status, and finalizer change (`Some(true)`: add it, `Some(false)`:
/// remove it, once a range being deleted has no allocation left).
fn range_status(
    r: &FloatingIPRange,
    pools: &Pools,
    problems: &[InputError],
    allocated: &Allocated,
    counts: &ClaimCounts<'_>,
    now: &Time,
) -> (String, FloatingIPRangeStatus, Option<bool>) {
    let name = r.metadata.name.as_deref().unwrap_or_default();
    let cur = r.status.clone().unwrap_or_default();
    let cond = |type_: &str, ok: bool, reason: &str, message: String| -> Condition {
        k8s::condition(
            &cur.conditions,
            type_,
            ok,
            reason,
            message,
            r.metadata.generation,
            now,
        )
    };
    let has_finalizer = r
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == RANGE_FINALIZER));
    let allocations = counts.all.get(name).copied().unwrap_or(0);
    let deleting = r.metadata.deletion_timestamp.is_some();
    let finalizer = if deleting {
        (has_finalizer && counts.kept.get(name).copied().unwrap_or(0) == 0 && allocations == 0)
            .then_some(false)
    } else {
        (!has_finalizer).then_some(true)
    };
    let pool = pools.get(name);
    let capacity = pool.map(|p| p.alloc.space().size());
    let problems: Vec<&InputError> = problems
        .iter()
        .filter(|e| e.kind == RANGE_KIND && e.name == name)
        .collect();
    // A range that could not be added to the pools overlaps another (`pools` reports
    // exactly those on the bare `spec.cidrs` field).
    let overlaps: Vec<&str> = problems
        .iter()
        .filter(|e| e.field == "spec.cidrs")
        .map(|e| e.message.as_str())
        .collect();
    let (ready, reason, message) = if !problems.is_empty() {
        (
            false,
            fc::INVALID,
            problems
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
                .join("; "),
        )
    } else if deleting {
        (
            false,
            fc::DRAINING,
            format!("being deleted: waiting until its {allocations} allocation(s) are released"),
        )
    } else {
        (
            true,
            fc::AVAILABLE,
            format!(
                "{allocations} of {} allocated",
                capacity.map_or_else(|| "?".into(), |c| c.to_string())
            ),
        )
    };
    let full = allocated.exhausted.contains(name)
        || pool.is_some_and(|p| Some(p.alloc.allocated()) == p.alloc.space().size().get());
    let out_n = allocated.outside.get(name).copied().unwrap_or(0);
    let conditions = vec![
        cond(
            conditions::READY,
            ready && !full,
            if full && ready {
                fc::EXHAUSTED_REASON
            } else {
                reason
            },
            message,
        ),
        if overlaps.is_empty() {
            cond(fc::OVERLAP, false, fc::NONE, "no overlap".into())
        } else {
            cond(fc::OVERLAP, true, fc::OVERLAP, overlaps.join("; "))
        },
        if full {
            cond(
                fc::EXHAUSTED,
                true,
                fc::EXHAUSTED_REASON,
                "every address is allocated".into(),
            )
        } else {
            cond(fc::EXHAUSTED, false, fc::NONE, "free addresses left".into())
        },
        if out_n > 0 {
            cond(
                fc::OUTSIDE,
                true,
                fc::OUTSIDE,
                format!(
                    "{out_n} allocation(s) are outside the range as it is now (it shrank or an \
                     exclusion covers them); they are kept until released"
                ),
            )
        } else {
            cond(
                fc::OUTSIDE,
                false,
                fc::NONE,
                "every allocation is inside the range".into(),
            )
        },
    ];
    (
        name.to_owned(),
        FloatingIPRangeStatus {
            capacity: capacity.map(|c| c.to_string()),
            allocated: Some(allocations.to_string()),
            conditions,
        },
        finalizer,
    )
}
