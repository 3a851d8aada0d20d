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
    assign_keeping(pools, recorded, requests).0
}

/// [`assign`], and the owners whose records could not be restored (what a [`Ledger`]
/// keeps refusing).
fn assign_keeping(
    pools: &mut Pools,
    recorded: &[Recorded<'_>],
    requests: &[Request<'_>],
) -> (Assignment, HashMap<String, IpAddr>) {
    let (unrestored, restore_problems) = restore_all(pools, recorded);
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
        results[i] = Some(serve(pools, &unrestored, &requests[i]));
    }
    let assignment = Assignment {
        results: results.into_iter().flatten().collect(),
        restore_problems,
    };
    (assignment, unrestored)
}

/// Rules 1 and 2: every pool's records restored; the owners whose records contradict
/// others (with the address they had), and each such pool's problems.
fn restore_all(
    pools: &mut Pools,
    recorded: &[Recorded<'_>],
) -> (HashMap<String, IpAddr>, Vec<(String, Error)>) {
    let mut by_pool: BTreeMap<&str, Vec<(IpAddr, &str)>> = BTreeMap::new();
    for r in recorded {
        by_pool
            .entry(r.pool)
            .or_default()
            .push((r.address, r.owner));
    }
    let mut unrestored: HashMap<String, IpAddr> = HashMap::new();
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
                unrestored.insert(o.to_owned(), a);
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
    (unrestored, restore_problems)
}

/// Rules 3 and 4 for one request, on the pools as they are.
fn serve(
    pools: &mut Pools,
    unrestored: &HashMap<String, IpAddr>,
    r: &Request<'_>,
) -> Result<IpAddr, Refusal> {
    if let Some(&address) = unrestored.get(r.owner) {
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
    }
}

/// An assignment kept between changes: [`assign`] once over everything, then each new
/// request and each owner that goes applied to what it left. Its answers are a full
/// [`assign`]'s when every address given so far is recorded (as a caller that persists
/// its results does: the floating-IP job's claims), and its pools end the same — the
/// property `tests/ledger.rs` checks against a full pass after every change. A new
/// owner among 10,000 is then one allocation, not a pass over 10,000.
///
/// What it keeps besides the pools: the requests refused so far (served again, in
/// [`assign`]'s order, when an address of their pool is released) and the owners whose
/// records could not be restored. Releasing such an owner, or in a pool whose records
/// contradicted each other, would change what a full pass restores: the ledger then
/// says it is no longer [exact](Ledger::exact), and the caller assigns afresh.
///
/// # Examples
/// ```
/// use netpolicy_ipam::{assign::{Ledger, Recorded, Request}, pools::Pools, space::AddressSpace};
///
/// let mut pools = Pools::new();
/// pools.add("lan", AddressSpace::parse("spec", &["10.0.0.0/30".into()], &[], &[])?, false)?;
/// let recorded = [
///     Recorded { pool: "lan", owner: "a/one", address: "10.0.0.1".parse().unwrap() },
///     Recorded { pool: "lan", owner: "a/two", address: "10.0.0.2".parse().unwrap() },
/// ];
/// let (mut ledger, _) = Ledger::assign(pools, &recorded, &[]);
/// // The pool is full: the new owner waits.
/// let new = Request { pool: "lan", owner: "a/new", address: None };
/// assert!(ledger.request(&new).is_err());
/// // a/one goes: its address is released and the waiting request is served again.
/// let again = ledger.release("lan", "a/one");
/// assert_eq!(again.len(), 1);
/// assert_eq!(again[0].0, "a/new");
/// assert_eq!(again[0].1.as_ref().unwrap().to_string(), "10.0.0.1");
/// assert!(ledger.exact());
/// # Ok::<(), netpolicy_ipam::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Ledger {
    pools: Pools,
    unrestored: HashMap<String, IpAddr>,
    /// Pools whose records contradicted each other (contested addresses reserved).
    contested: BTreeSet<String>,
    /// Requests refused so far, by owner: (pool, address asked for).
    refused: BTreeMap<String, (String, Option<IpAddr>)>,
    exact: bool,
}

impl Ledger {
    /// A full [`assign`] over `pools`, kept.
    pub fn assign(
        mut pools: Pools,
        recorded: &[Recorded<'_>],
        requests: &[Request<'_>],
    ) -> (Self, Assignment) {
        let (assignment, unrestored) = assign_keeping(&mut pools, recorded, requests);
        let contested = assignment
            .restore_problems
            .iter()
            .map(|(pool, _)| pool.clone())
            .collect();
        let refused = requests
            .iter()
            .zip(&assignment.results)
            .filter(|(_, result)| result.is_err())
            .map(|(r, _)| (r.owner.to_owned(), (r.pool.to_owned(), r.address)))
            .collect();
        let ledger = Self {
            pools,
            unrestored,
            contested,
            refused,
            exact: true,
        };
        (ledger, assignment)
    }

    /// Serves one request (a new owner, or an owner whose earlier request was refused
    /// asking anew): the answer a full [`assign`] gives it with every address given so
    /// far recorded. An owner that holds an address in the pool gets it back.
    ///
    /// # Errors
    /// Why it gets no address ([`Refusal`]), as [`assign`] says it; the request is kept
    /// and served again when an address of its pool is released.
    pub fn request(&mut self, r: &Request<'_>) -> Result<IpAddr, Refusal> {
        self.refused.remove(r.owner);
        let result = serve(&mut self.pools, &self.unrestored, r);
        if result.is_err() {
            self.refused
                .insert(r.owner.to_owned(), (r.pool.to_owned(), r.address));
        }
        result
    }

    /// `owner` is gone: what it holds in `pool` is released, its refused request (if
    /// any) forgotten, and the refused requests of that pool served again in
    /// [`assign`]'s order (static first, then by owner). Returns each request served
    /// again with its answer (those given an address are no longer kept as refused).
    pub fn release(&mut self, pool: &str, owner: &str) -> Vec<(String, Result<IpAddr, Refusal>)> {
        self.refused.remove(owner);
        if self.unrestored.remove(owner).is_some() || self.contested.contains(pool) {
            // A full pass would restore differently without this owner's record.
            self.exact = false;
        }
        if self.pools.release(pool, owner).is_none() {
            return Vec::new();
        }
        let mut waiting: Vec<(String, Option<IpAddr>)> = self
            .refused
            .iter()
            .filter(|(_, (p, _))| p == pool)
            .map(|(o, (_, a))| (o.clone(), *a))
            .collect();
        waiting.sort_by(|(a_owner, a), (b_owner, b)| {
            a.is_none()
                .cmp(&b.is_none())
                .then_with(|| a_owner.split('/').cmp(b_owner.split('/')))
        });
        let mut out = Vec::with_capacity(waiting.len());
        for (o, address) in waiting {
            let r = Request {
                pool,
                owner: &o,
                address,
            };
            let result = serve(&mut self.pools, &self.unrestored, &r);
            if result.is_ok() {
                self.refused.remove(&o);
            }
            out.push((o, result));
        }
        out
    }

    /// Whether the ledger still answers as a full [`assign`] would (false once an owner
    /// whose records were contested is released: assign afresh then).
    pub fn exact(&self) -> bool {
        self.exact
    }

    /// The pools as the ledger leaves them.
    pub fn pools(&self) -> &Pools {
        &self.pools
    }

    /// The requests refused so far, by owner: the pool and the address asked for.
    pub fn refused(&self) -> &BTreeMap<String, (String, Option<IpAddr>)> {
        &self.refused
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
