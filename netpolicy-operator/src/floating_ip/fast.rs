//! The floating-IP job's fast path: FloatingIPs created since the last full pass served
//! from the pools that pass left ([`netpolicy_ipam::assign::Ledger`]), one allocation
//! each instead of a pass over every FloatingIP, range and claim (at 10,000 FloatingIPs
//! a full pass takes a quarter of a second). The claims it makes are the claims a full
//! pass would make for them (`tests::the_fast_path_claims_what_a_full_pass_claims`
//! checks it over random worlds); their statuses, the ranges' and kube-vip's follow in
//! the full pass the job runs next.
//!
//! Only what a new FloatingIP asks is served here (an address, or none when a full pass
//! would refuse it too): anything else (a FloatingIP edited or deleted, a claim the
//! ledger does not hold, a range, a Namespace) returns `None`, and the job runs its
//! full pass.

use std::net::IpAddr;

use netpolicy_ipam::assign::Ledger;

use super::allocation::{self, Want, one_more};

use crate::api::{FloatingIP, FloatingIPClaim};

/// The claims for `changed` (FloatingIPs created or edited since the last full pass),
/// served from `ledger`; `claims`: the claims that changed meanwhile (each must be one
/// the ledger holds: the echo of a claim made from it). `None` when a full pass is
/// needed; the ledger is then not to be used again.
pub(crate) fn claims(
    ledger: &mut Ledger,
    changed: &[&FloatingIP],
    claims: &[&FloatingIPClaim],
    terminating: impl Fn(&str) -> bool,
) -> Option<Vec<super::NewClaim>> {
    for c in claims {
        let owner = format!("{}/{}", c.spec.owner.namespace, c.spec.owner.name);
        let address: IpAddr = c.spec.address.parse().ok()?;
        let held = ledger.pools().get(&c.spec.range)?.alloc.by_owner(&owner);
        if held != Some(address) {
            return None;
        }
    }
    // What each asks (an address that is not one: the full pass's to refuse), served in
    // the full pass's order: two new FloatingIPs served together get what it gives them.
    let mut changed: Vec<(&FloatingIP, Want)> = changed
        .iter()
        .map(|f| Some((*f, Want::of(f).ok()?)))
        .collect::<Option<_>>()?;
    allocation::order(&mut changed, |(_, w)| w);
    let mut out = Vec::with_capacity(changed.len());
    for (f, want) in changed {
        if f.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let ns = f.metadata.namespace.as_deref()?;
        let name = f.metadata.name.as_deref()?;
        if terminating(ns) {
            return None;
        }
        // Held already (an edit: a move or another range), or moving: the full pass's.
        let key = format!("{ns}/{name}");
        let moving = format!("(moving {key})");
        if ledger
            .pools()
            .iter()
            .any(|(_, p)| p.alloc.by_owner(&key).is_some() || p.alloc.by_owner(&moving).is_some())
        {
            return None;
        }
        // Refused (taken, exhausted, no such range): no claim, as in a full pass; its
        // status, saying why, is the full pass's to write.
        if let Ok(a) = one_more(ledger, &want) {
            out.push(super::pass::new_claim(a, &f.spec.range, f));
        }
    }
    Some(out)
}
