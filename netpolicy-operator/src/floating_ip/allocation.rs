//! The one door to the pools: every address a FloatingIP gets, in `netpolicy plan`, in
//! the job's full pass and in its fast path, is given here, from requests of one shape
//! ([`Want`]) read from a FloatingIP in one way ([`Want::of`]). [`allocate`] restores
//! what is held and serves a whole set of requests ([`netpolicy_ipam::assign`]'s rule:
//! restore first, static before dynamic, lowest free, never a substitute) and keeps the
//! pools in a [`Ledger`]; [`one_more`] serves a request the set did not have from that
//! ledger, as `allocate` would have served it with the set. Plan serves the FloatingIPs
//! `autoAllocate` creates with `one_more`, as the fast path serves new ones; the oracle
//! tests (`floating_ip::tests::the_fast_path_claims_what_a_full_pass_claims`,
//! `plan::tests::plan_gives_each_floating_ip_the_address_the_operator_gives_it`) hold
//! the doors' users to the same answers.

use std::net::IpAddr;

use netpolicy_ipam::{
    assign::{Assignment, Ledger, Recorded, Refusal, Request},
    pools::Pools,
};

use crate::api::FloatingIP;

/// What one FloatingIP asks of the pools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Want {
    /// The FloatingIPRange (a pool).
    pub(crate) range: String,
    /// `namespace/name`: the owner in the pools.
    pub(crate) owner: String,
    /// `spec.address`, parsed.
    pub(crate) address: Option<IpAddr>,
}

impl Want {
    /// What `f` asks. `Err`: its `spec.address` is not an address (the message says so,
    /// quoting it; the field is `spec.address`).
    pub(crate) fn of(f: &FloatingIP) -> Result<Self, String> {
        Ok(Self {
            range: f.spec.range.clone(),
            owner: format!(
                "{}/{}",
                f.metadata.namespace.as_deref().unwrap_or_default(),
                f.metadata.name.as_deref().unwrap_or_default()
            ),
            address: static_address(f.spec.address.as_deref())?,
        })
    }

    fn request(&self) -> Request<'_> {
        Request {
            pool: &self.range,
            owner: &self.owner,
            address: self.address,
        }
    }
}

/// `spec.address` as a request asks it (`None`: any free address). `Err` names the
/// text that is not an IPv4 or IPv6 address.
pub(crate) fn static_address(text: Option<&str>) -> Result<Option<IpAddr>, String> {
    text.map(|t| {
        t.trim()
            .parse::<IpAddr>()
            .map_err(|_| format!("{t:?} is not an IPv4 or IPv6 address"))
    })
    .transpose()
}

/// An address held (a claim, or a FloatingIP's recorded `status.address`): restored
/// under its owner before anything is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// The FloatingIPRange.
    pub(crate) range: String,
    /// Its owner in the pools (`namespace/name`, or a placeholder for a moving
    /// FloatingIP's old address).
    pub(crate) owner: String,
    /// The address.
    pub(crate) address: IpAddr,
}

/// Restores `held` into `pools`, then serves `wants`; the answers come in `wants`' order,
/// with the problems restoring met, and the ledger for [`one_more`].
pub(crate) fn allocate(pools: Pools, held: &[Held], wants: &[Want]) -> (Ledger, Assignment) {
    let recorded: Vec<Recorded<'_>> = held
        .iter()
        .map(|h| Recorded {
            pool: &h.range,
            owner: &h.owner,
            address: h.address,
        })
        .collect();
    let requests: Vec<Request<'_>> = wants.iter().map(Want::request).collect();
    Ledger::assign(pools, &recorded, &requests)
}

/// Serves `want`, which the set [`allocate`] served did not have, from `ledger`: the
/// answer `allocate` gives it with that set and every address `one_more` gave since.
/// Several are served in [`allocate`]'s order (static first, then by owner) for the
/// same answers as one `allocate` of them all ([`order`]).
pub(crate) fn one_more(ledger: &mut Ledger, want: &Want) -> Result<IpAddr, Refusal> {
    ledger.request(&want.request())
}

/// `items` (each with its [`Want`]) in the order [`allocate`] serves a set: static
/// requests first, then by owner (namespace, then name), then range.
pub(crate) fn order<T>(items: &mut [T], want: impl Fn(&T) -> &Want) {
    items.sort_by(|a, b| {
        let (a, b) = (want(a), want(b));
        a.address
            .is_none()
            .cmp(&b.address.is_none())
            .then_with(|| a.owner.split('/').cmp(b.owner.split('/')))
            .then_with(|| a.range.cmp(&b.range))
    });
}

#[cfg(test)]
mod tests {
    use netpolicy_ipam::{pools::Pools, space::AddressSpace};

    use super::*;

    fn want(owner: &str, address: Option<&str>) -> Want {
        Want {
            range: "blue".into(),
            owner: owner.into(),
            address: address.map(|a| a.parse().unwrap()),
        }
    }

    fn pools() -> Pools {
        let mut p = Pools::new();
        let space = AddressSpace::parse("spec", &["10.0.0.0/29".to_owned()], &[], &[]).unwrap();
        p.add("blue", space, false).unwrap();
        p
    }

    /// `one_more` answers as `allocate` does with what was given so far held: the
    /// FloatingIPs a set left waiting for (plan's `autoAllocate` ones, the fast path's
    /// new ones), served one at a time in order, get what one `allocate` gives them.
    #[test]
    fn one_more_in_order_answers_as_an_allocate_over_what_was_given() {
        let set = [want("b/x", None), want("c/z", Some("10.0.0.3"))];
        let extras = [
            want("a/y", None),
            want("a-b/w", None),
            want("d/v", Some("10.0.0.3")),
            want("e/u", Some("10.0.0.5")),
        ];
        let (mut ledger, first) = allocate(pools(), &[], &set);
        let given: Vec<Held> = set
            .iter()
            .zip(&first.results)
            .filter_map(|(w, r)| {
                Some(Held {
                    range: w.range.clone(),
                    owner: w.owner.clone(),
                    address: *r.as_ref().ok()?,
                })
            })
            .collect();
        assert_eq!(given.len(), 2);
        let mut each: Vec<&Want> = extras.iter().collect();
        order(&mut each, |w| w);
        let mut one_by_one: Vec<(String, Result<IpAddr, Refusal>)> = each
            .into_iter()
            .map(|w| (w.owner.clone(), one_more(&mut ledger, w)))
            .collect();
        one_by_one.sort_by(|a, b| a.0.cmp(&b.0));
        let (_, whole) = allocate(pools(), &given, &extras);
        let mut at_once: Vec<(String, Result<IpAddr, Refusal>)> = extras
            .iter()
            .map(|w| w.owner.clone())
            .zip(whole.results)
            .collect();
        at_once.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(one_by_one, at_once);
        let addr = |o: &str| {
            at_once
                .iter()
                .find(|(w, _)| w == o)
                .and_then(|(_, r)| r.as_ref().ok().map(ToString::to_string))
        };
        // Static first (e/u's .5; d/v's .3 is c/z's), then by owner: a/y before a-b/w.
        assert_eq!(addr("e/u").as_deref(), Some("10.0.0.5"));
        assert_eq!(addr("d/v"), None);
        assert!(addr("a/y") < addr("a-b/w"), "{at_once:?}");
    }

    #[test]
    fn a_static_address_that_is_not_one_is_named() {
        assert_eq!(static_address(None), Ok(None));
        assert_eq!(
            static_address(Some(" 10.0.0.1 ")),
            Ok(Some("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(
            static_address(Some("ten")),
            Err("\"ten\" is not an IPv4 or IPv6 address".into())
        );
    }
}
