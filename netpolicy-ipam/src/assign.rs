//! Handing addresses to named requests across [`Pools`]: the one rule `netpolicy plan`
//! and the floating-IP controller share.
//!
//! # Rule
//! 1. Recorded addresses (what earlier passes handed out and persisted) are restored
//!    first, pool by pool: an owner never moves.
//! 2. Recorded addresses that contradict each other are not guessed at: the owners
//!    involved get no address (not another one), a contested address stays reserved
//!    (owner `(contested <address>)`), and everything else of the pool is restored as
//!    it was.
//! 3. Then static requests (an address asked for by name), then dynamic ones (lowest
//!    free), each group in owner order (`namespace/name` compared segment by segment),
//!    so no dynamic request takes an address someone asked for.
//! 4. A static request that cannot be met is refused with why (taken, naming the holder;
//!    outside the pool; excluded), never given another address.
//!
//! The result does not depend on the order of `recorded` or `requests`.
//!
//! # Examples
//! ```
//! use netpolicy_ipam::{assign::{assign, Recorded, Request}, pools::Pools, space::AddressSpace};
//!
//! let mut pools = Pools::new();
//! pools.add("lan", AddressSpace::parse("spec", &["10.0.0.0/29".into()], &[], &[])?, false)?;
//! let recorded = [Recorded { pool: "lan", owner: "a/old", address: "10.0.0.1".parse().unwrap() }];
//! let requests = [
//!     Request { pool: "lan", owner: "a/old", address: None },
//!     Request { pool: "lan", owner: "a/new", address: None },
//!     Request { pool: "lan", owner: "b/pinned", address: Some("10.0.0.2".parse().unwrap()) },
//! ];
//! let out = assign(&mut pools, &recorded, &requests);
//! let got: Vec<String> = out.results.iter().map(|r| r.as_ref().unwrap().to_string()).collect();
//! assert_eq!(got, ["10.0.0.1", "10.0.0.3", "10.0.0.2"]);
//! # Ok::<(), netpolicy_ipam::Error>(())
//! ```

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
};

use crate::{Error, RestoreProblem, pools::Pools};

/// An address an owner already holds (persisted by an earlier pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded<'a> {
    /// Pool name.
    pub pool: &'a str,
    /// Owner (`namespace/name`).
    pub owner: &'a str,
    /// The address it holds.
    pub address: IpAddr,
}

/// An owner asking for an address: a given one (static) or any (dynamic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Pool name.
    pub pool: &'a str,
    /// Owner (`namespace/name`).
    pub owner: &'a str,
    /// The address asked for; `None` for the lowest free one.
    pub address: Option<IpAddr>,
}

/// Why a request got no address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The owner's recorded address contradicts another record; it gets no other one.
    #[error(
        "its recorded address {address} could not be restored (see the pool's problems); \
         no other address is given in its place"
    )]
    Unrestored {
        /// The address it had recorded.
        address: IpAddr,
    },
    /// The pool does not exist (or was invalid and not added).
    #[error("there is no pool named {pool:?}")]
    NoPool {
        /// The pool asked for.
        pool: String,
    },
    /// The static request cannot be met.
    #[error("{0}")]
    Static(Error),
    /// No address could be allocated.
    #[error("{0}")]
    Dynamic(Error),
}

/// What [`assign`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Per request, in the order given: the address, or why none.
    pub results: Vec<Result<IpAddr, Refusal>>,
    /// Pools whose records contradicted each other, with every problem
    /// ([`Error::Restore`]), sorted by pool.
    pub restore_problems: Vec<(String, Error)>,
}

/// Restores `recorded`, then serves `requests` (the rule in the module docs).
///
/// Records for pools that do not exist are ignored (their owners' requests report
/// [`Refusal::NoPool`]).
pub fn assign(
    pools: &mut Pools,
    recorded: &[Recorded<'_>],
    requests: &[Request<'_>],
) -> Assignment {
    let mut by_pool: BTreeMap<&str, Vec<(IpAddr, &str)>> = BTreeMap::new();
    for r in recorded {
        by_pool
            .entry(r.pool)
            .or_default()
            .push((r.address, r.owner));
    }
    let mut unrestored: HashMap<&str, IpAddr> = HashMap::new();
    let mut restore_problems = Vec::new();
    for (pool, mut entries) in by_pool {
        if pools.get(pool).is_none() {
            continue;
        }
        entries.sort_unstable();
        let Err(e) = pools.restore(pool, entries.iter().copied()) else {
            continue;
        };
        let (bad_owners, contested) = culprits(&e);
        let mut keep: Vec<(IpAddr, String)> = Vec::new();
        for (a, o) in entries {
            if bad_owners.contains(o) {
                unrestored.insert(o, a);
            } else if !contested.contains(&a.to_string()) {
                keep.push((a, o.to_owned()));
            }
        }
        keep.extend(
            contested
                .iter()
                .filter_map(|v| v.parse::<IpAddr>().ok())
                .map(|a| (a, format!("(contested {a})"))),
        );
        // What is left agrees with itself: each owner once, each address once, all in
        // the pool.
        let _ = pools.restore(pool, keep);
        restore_problems.push((pool.to_owned(), e));
    }
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&requests[a], &requests[b]);
        a.address
            .is_none()
            .cmp(&b.address.is_none())
            .then_with(|| a.owner.split('/').cmp(b.owner.split('/')))
            .then_with(|| a.pool.cmp(b.pool))
    });
    let mut results: Vec<Option<Result<IpAddr, Refusal>>> = vec![None; requests.len()];
    for i in order {
        let r = &requests[i];
        let result = if let Some(&address) = unrestored.get(r.owner) {
            Err(Refusal::Unrestored { address })
        } else if pools.get(r.pool).is_none() {
            Err(Refusal::NoPool {
                pool: r.pool.to_owned(),
            })
        } else {
            match &r.address {
                Some(a) => pools
                    .allocate_static(r.pool, r.owner, a)
                    .map_err(Refusal::Static),
                None => pools.allocate(r.pool, r.owner).map_err(Refusal::Dynamic),
            }
        };
        results[i] = Some(result);
    }
    Assignment {
        results: results.into_iter().flatten().collect(),
        restore_problems,
    }
}

/// The owners a failed restore names, and the addresses two owners claimed.
fn culprits(e: &Error) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut bad_owners = BTreeSet::new();
    let mut contested = BTreeSet::new();
    if let Error::Restore(problems) = e {
        for p in problems {
            match p {
                RestoreProblem::SharedValue {
                    value,
                    first,
                    second,
                } => {
                    contested.insert(value.clone());
                    bad_owners.insert(first.clone());
                    bad_owners.insert(second.clone());
                }
                RestoreProblem::OwnerTwice { owner, .. }
                | RestoreProblem::NotInPool { owner, .. } => {
                    bad_owners.insert(owner.clone());
                }
            }
        }
    }
    (bad_owners, contested)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::AddressSpace;

    fn pools(cidr: &str) -> Pools {
        let mut p = Pools::new();
        let space = AddressSpace::parse("spec", &[cidr.to_owned()], &[], &[]).unwrap();
        p.add("lan", space, false).unwrap();
        p
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn shown(a: &Assignment) -> Vec<String> {
        a.results
            .iter()
            .map(|r| match r {
                Ok(a) => a.to_string(),
                Err(e) => format!("error: {e}"),
            })
            .collect()
    }

    #[test]
    fn static_requests_go_before_dynamic_ones_whatever_the_input_order() {
        let reqs = [
            Request {
                pool: "lan",
                owner: "a/dyn",
                address: None,
            },
            Request {
                pool: "lan",
                owner: "z/pin",
                address: Some(ip("10.0.0.1")),
            },
        ];
        let out = assign(&mut pools("10.0.0.0/29"), &[], &reqs);
        assert_eq!(shown(&out), ["10.0.0.2", "10.0.0.1"]);
        let mut rev = reqs;
        rev.reverse();
        let out = assign(&mut pools("10.0.0.0/29"), &[], &rev);
        assert_eq!(shown(&out), ["10.0.0.1", "10.0.0.2"]);
    }

    #[test]
    fn owners_are_ordered_by_namespace_then_name() {
        // As strings "a-b/x" < "a/x"; by namespace "a" < "a-b".
        let reqs = [
            Request {
                pool: "lan",
                owner: "a-b/x",
                address: None,
            },
            Request {
                pool: "lan",
                owner: "a/x",
                address: None,
            },
        ];
        let out = assign(&mut pools("10.0.0.0/29"), &[], &reqs);
        assert_eq!(shown(&out), ["10.0.0.2", "10.0.0.1"]);
    }

    #[test]
    fn recorded_owners_keep_their_address_and_a_taken_static_request_names_the_holder() {
        let rec = [Recorded {
            pool: "lan",
            owner: "ns/old",
            address: ip("10.0.0.5"),
        }];
        let reqs = [
            Request {
                pool: "lan",
                owner: "ns/new",
                address: Some(ip("10.0.0.5")),
            },
            Request {
                pool: "lan",
                owner: "ns/old",
                address: None,
            },
        ];
        let out = assign(&mut pools("10.0.0.0/29"), &rec, &reqs);
        assert_eq!(
            shown(&out),
            ["error: 10.0.0.5 is taken by ns/old", "10.0.0.5"]
        );
    }

    #[test]
    fn contradicting_records_give_their_owners_nothing_and_keep_the_address_reserved() {
        let rec = [
            Recorded {
                pool: "lan",
                owner: "ns/a",
                address: ip("10.0.0.1"),
            },
            Recorded {
                pool: "lan",
                owner: "ns/b",
                address: ip("10.0.0.1"),
            },
            Recorded {
                pool: "lan",
                owner: "ns/c",
                address: ip("10.0.0.3"),
            },
        ];
        let reqs = [
            Request {
                pool: "lan",
                owner: "ns/a",
                address: None,
            },
            Request {
                pool: "lan",
                owner: "ns/b",
                address: None,
            },
            Request {
                pool: "lan",
                owner: "ns/c",
                address: None,
            },
            Request {
                pool: "lan",
                owner: "ns/d",
                address: None,
            },
        ];
        let mut p = pools("10.0.0.0/29");
        let out = assign(&mut p, &rec, &reqs);
        let s = shown(&out);
        assert!(
            s[0].starts_with("error: its recorded address 10.0.0.1"),
            "{s:?}"
        );
        assert!(
            s[1].starts_with("error: its recorded address 10.0.0.1"),
            "{s:?}"
        );
        assert_eq!(s[2..], ["10.0.0.3", "10.0.0.2"]);
        assert_eq!(out.restore_problems.len(), 1);
        assert_eq!(out.restore_problems[0].0, "lan");
        // The contested address is still reserved.
        let alloc = &p.get("lan").unwrap().alloc;
        assert_eq!(alloc.holder(&ip("10.0.0.1")), Some("(contested 10.0.0.1)"));
    }

    #[test]
    fn an_unknown_pool_is_refused_by_name() {
        let reqs = [Request {
            pool: "wan",
            owner: "ns/a",
            address: None,
        }];
        let out = assign(&mut pools("10.0.0.0/29"), &[], &reqs);
        assert_eq!(out.results[0], Err(Refusal::NoPool { pool: "wan".into() }));
    }
}
