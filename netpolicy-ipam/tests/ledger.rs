//! Property test: a [`Ledger`] kept change by change answers as a full [`assign`] does
//! after every change, with every address given so far recorded (what the floating-IP
//! job persists as claims). Random starting records (contradicting ones included),
//! then random requests (static, dynamic, to a draining or an unknown pool) and
//! owners going; after each, a full pass over fresh pools is the oracle: the same
//! owners hold the same addresses, and every request the change served again got the
//! full pass's answer.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{collections::BTreeMap, net::IpAddr};

use netpolicy_ipam::{
    assign::{Ledger, Recorded, Refusal, Request, assign},
    pools::Pools,
    space::AddressSpace,
};
use proptest::prelude::*;

/// Three pools (two small enough to fill, one draining) and a name no pool has.
const POOLS: [&str; 4] = ["a", "b", "drained", "gone"];

fn pools() -> Pools {
    let mut p = Pools::new();
    let add = |p: &mut Pools, name: &str, cidr: &str, draining: bool| {
        let space = AddressSpace::parse("spec", &[cidr.into()], &[], &[]).unwrap();
        p.add(name, space, draining).unwrap();
    };
    add(&mut p, "a", "10.0.0.0/29", false);
    add(&mut p, "b", "10.0.1.0/30", false);
    add(&mut p, "drained", "10.0.2.0/30", true);
    p
}

/// Addresses a request or a record may name: in and out of the pools.
fn address(i: usize) -> IpAddr {
    [
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.3",
        "10.0.0.6",
        "10.0.0.9",
        "10.0.1.1",
        "10.0.1.2",
        "10.0.2.1",
        "192.0.2.1",
    ][i % 9]
        .parse()
        .unwrap()
}

fn owner(i: u8) -> String {
    // Two namespaces, so that owner order is by namespace, then name.
    format!("ns{}/o{}", i % 2, i)
}

#[derive(Debug, Clone)]
enum Op {
    /// An owner asks: pool, and an address (static) or none (dynamic).
    Request(u8, usize, Option<usize>),
    /// An owner goes.
    Go(u8),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            5 => (0..14u8, 0..4usize, proptest::option::of(0..9usize))
                .prop_map(|(o, p, a)| Op::Request(o, p, a)),
            2 => (0..14u8).prop_map(Op::Go),
        ],
        1..40,
    )
}

fn records() -> impl Strategy<Value = Vec<(u8, usize, usize)>> {
    proptest::collection::vec((0..14u8, 0..3usize, 0..9usize), 0..6)
}

/// The persisted world: who holds what (the records), who waits (refused requests).
#[derive(Default)]
struct World {
    held: BTreeMap<String, (String, IpAddr)>,
    waiting: BTreeMap<String, (String, Option<IpAddr>)>,
}

impl World {
    /// What the world has recorded: every holder's address.
    fn records(&self) -> Vec<Recorded<'_>> {
        self.held
            .iter()
            .map(|(o, (pool, a))| Recorded {
                pool,
                owner: o,
                address: *a,
            })
            .collect()
    }

    /// The requests still waiting.
    fn requests(&self) -> Vec<Request<'_>> {
        self.waiting
            .iter()
            .map(|(o, (pool, a))| Request {
                pool,
                owner: o,
                address: *a,
            })
            .collect()
    }

    /// A full pass over fresh pools: every owner's answer (the records restored, the
    /// waiting requests served), and the pools it leaves.
    fn full(&self) -> (BTreeMap<String, Result<IpAddr, Refusal>>, Pools) {
        let mut p = pools();
        let requests = self.requests();
        let out = assign(&mut p, &self.records(), &requests);
        let answers = requests
            .iter()
            .map(|r| r.owner.to_owned())
            .zip(out.results)
            .collect();
        (answers, p)
    }

    /// Persists a full pass's answers: an owner given an address holds it now.
    fn persist(&mut self, answers: &BTreeMap<String, Result<IpAddr, Refusal>>) {
        for (o, a) in answers {
            if let Ok(a) = a {
                let (pool, _) = self.waiting.remove(o).unwrap();
                self.held.insert(o.clone(), (pool, *a));
            }
        }
    }
}

fn holdings(p: &Pools) -> Vec<(String, IpAddr, String)> {
    let mut out: Vec<_> = p
        .iter()
        .flat_map(|(name, pool)| {
            pool.alloc
                .snapshot()
                .into_iter()
                .map(move |(a, o)| (name.to_owned(), a, o))
        })
        .collect();
    out.sort();
    out
}

fn check(start: Vec<(u8, usize, usize)>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut world = World::default();
    for (o, p, a) in start {
        world
            .held
            .entry(owner(o))
            .or_insert((POOLS[p].to_owned(), address(a)));
    }
    // The starting records as the ledger's first full pass sees them; contradicting
    // ones leave their owners without an address (and that is what the oracle says).
    let (mut ledger, _) = Ledger::assign(pools(), &world.records(), &[]);
    let (_, oracle) = world.full();
    prop_assert_eq!(
        holdings(ledger.pools()),
        holdings(&oracle),
        "after the first pass"
    );
    for op in ops {
        let served: Vec<(String, Result<IpAddr, Refusal>)> = match op {
            Op::Request(o, p, a) => {
                let o = owner(o);
                if world.held.contains_key(&o) {
                    continue;
                }
                let pool = POOLS[p].to_owned();
                let a = a.map(address);
                world.waiting.insert(o.clone(), (pool.clone(), a));
                let r = Request {
                    pool: &pool,
                    owner: &o,
                    address: a,
                };
                vec![(o.clone(), ledger.request(&r))]
            }
            Op::Go(o) => {
                let o = owner(o);
                let pool = match (world.held.remove(&o), world.waiting.remove(&o)) {
                    (Some((pool, _)), _) | (None, Some((pool, _))) => pool,
                    (None, None) => continue,
                };
                ledger.release(&pool, &o)
            }
        };
        let rebuilt = !ledger.exact();
        if rebuilt {
            // Released an owner whose records were contested: assign afresh, as the
            // floating-IP job does.
            ledger = Ledger::assign(pools(), &world.records(), &world.requests()).0;
        }
        let (answers, oracle) = world.full();
        for (o, got) in &served {
            prop_assert_eq!(Some(got), answers.get(o), "the answer for {}", o);
        }
        // Only the owners the change served may get an address from it.
        for (o, a) in &answers {
            if a.is_ok() {
                prop_assert!(
                    served.iter().any(|(s, _)| s == o) || rebuilt,
                    "{o} got an address the ledger did not give"
                );
            }
        }
        prop_assert_eq!(holdings(ledger.pools()), holdings(&oracle));
        world.persist(&answers);
        let waiting: Vec<&String> = world.waiting.keys().collect();
        let refused: Vec<&String> = ledger.refused().keys().collect();
        prop_assert_eq!(waiting, refused, "the requests still waiting");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_ledger_answers_as_a_full_pass_after_every_change(start in records(), ops in ops()) {
        check(start, ops)?;
    }
}

#[test]
fn a_released_address_goes_to_the_first_waiting_request_in_assign_order() {
    let (mut ledger, _) = Ledger::assign(
        pools(),
        &[
            Recorded {
                pool: "b",
                owner: "ns/x",
                address: "10.0.1.1".parse().unwrap(),
            },
            Recorded {
                pool: "b",
                owner: "ns/y",
                address: "10.0.1.2".parse().unwrap(),
            },
        ],
        &[],
    );
    // The pool is full: a dynamic request and a static one for y's address wait.
    let dynamic = Request {
        pool: "b",
        owner: "a/first",
        address: None,
    };
    let pinned = Request {
        pool: "b",
        owner: "z/pinned",
        address: Some("10.0.1.2".parse().unwrap()),
    };
    assert!(ledger.request(&dynamic).is_err());
    assert!(ledger.request(&pinned).is_err());
    // y goes: the static request comes first (as in a full pass), then the dynamic one
    // finds the pool full again.
    let again = ledger.release("b", "ns/y");
    let shown: Vec<(String, String)> = again
        .iter()
        .map(|(o, r)| {
            (
                o.clone(),
                r.as_ref()
                    .map_or_else(|e| format!("refused: {e}"), ToString::to_string),
            )
        })
        .collect();
    assert_eq!(shown[0], ("z/pinned".to_owned(), "10.0.1.2".to_owned()));
    assert_eq!(shown[1].0, "a/first");
    assert!(shown[1].1.starts_with("refused"), "{shown:?}");
    assert!(ledger.exact());
}
