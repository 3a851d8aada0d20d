//! Property tests: the allocator against a naive oracle (a BTreeMap of value → owner and
//! the list of usable values written out by hand) over random operation sequences, in
//! both families and for child prefixes, with snapshot/restore round trips.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{collections::BTreeMap, net::IpAddr};

use ipnetwork::IpNetwork;
use netpolicy_ipam::{
    Error,
    alloc::{Allocator, IdAllocator},
    space::{AddressRange, AddressSpace, PrefixSpace, Space},
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Allocate(u8),
    Static(u8, usize),
    Release(u8),
    ReleaseValue(usize),
    SnapshotRestore,
}

fn ops(domain: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            4 => (0..24u8).prop_map(Op::Allocate),
            3 => (0..24u8, 0..domain).prop_map(|(o, v)| Op::Static(o, v)),
            3 => (0..24u8).prop_map(Op::Release),
            1 => (0..domain).prop_map(Op::ReleaseValue),
            1 => Just(Op::SnapshotRestore),
        ],
        1..120,
    )
}

/// The model: what should be allocated, by the rules of DESIGN.md.
struct Oracle<V> {
    usable: Vec<V>,
    held: BTreeMap<V, String>,
}

impl<V: Ord + Clone> Oracle<V> {
    fn by_owner(&self, owner: &str) -> Option<V> {
        self.held
            .iter()
            .find(|(_, o)| *o == owner)
            .map(|(v, _)| v.clone())
    }
}

fn run<S: Space + Clone>(space: S, usable: Vec<S::Value>, domain: Vec<S::Value>, ops: Vec<Op>)
where
    S::Value: std::hash::Hash,
{
    // A huge pool lists only its first usable values: enough for any lowest-free answer
    // within the number of operations.
    if space.capacity() < 1 << 20 {
        assert_eq!(space.capacity(), usable.len() as u128, "capacity");
    }
    let mut a = Allocator::new(space.clone());
    let mut m = Oracle {
        usable,
        held: BTreeMap::new(),
    };
    for op in ops {
        match op {
            Op::Allocate(o) => {
                let owner = format!("ns/o{o}");
                let want = m
                    .by_owner(&owner)
                    .or_else(|| m.usable.iter().find(|v| !m.held.contains_key(*v)).cloned());
                let got = a.allocate(&owner);
                match want {
                    Some(v) => {
                        assert_eq!(got.as_ref().ok(), Some(&v), "allocate {owner}");
                        m.held.insert(v, owner);
                    }
                    None => assert!(matches!(got, Err(Error::Exhausted { .. })), "{got:?}"),
                }
            }
            Op::Static(o, i) => {
                let owner = format!("ns/o{o}");
                let v = domain[i].clone();
                let got = a.allocate_static(&owner, &v);
                let usable = m.usable.contains(&v);
                match (m.held.get(&v).cloned(), m.by_owner(&owner)) {
                    _ if !usable => assert!(
                        matches!(
                            got,
                            Err(Error::OutsidePool { .. }
                                | Error::Excluded { .. }
                                | Error::Unusable { .. }
                                | Error::WrongFamily { .. })
                        ),
                        "{v} is not usable: {got:?}"
                    ),
                    (Some(h), _) if h == owner => assert_eq!(got, Ok(v.clone())),
                    (Some(h), _) => assert_eq!(
                        got,
                        Err(Error::Taken {
                            value: v.to_string(),
                            holder: h
                        })
                    ),
                    (None, Some(held)) => assert!(
                        matches!(&got, Err(Error::OwnerHoldsOther { held: h, .. }) if *h == held.to_string()),
                        "{got:?}"
                    ),
                    (None, None) => {
                        assert_eq!(got, Ok(v.clone()));
                        m.held.insert(v, owner);
                    }
                }
            }
            Op::Release(o) => {
                let owner = format!("ns/o{o}");
                let want = m.by_owner(&owner);
                if let Some(v) = &want {
                    m.held.remove(v);
                }
                assert_eq!(a.release(&owner), want);
            }
            Op::ReleaseValue(i) => {
                let v = &domain[i];
                assert_eq!(a.release_value(v), m.held.remove(v));
            }
            Op::SnapshotRestore => {
                let snap = a.snapshot();
                let want: Vec<(S::Value, String)> =
                    m.held.iter().map(|(v, o)| (v.clone(), o.clone())).collect();
                assert_eq!(snap, want, "snapshot");
                a = Allocator::restore(space.clone(), snap).unwrap();
            }
        }
        // Invariants after every step.
        assert_eq!(a.allocated(), m.held.len() as u128, "allocated count");
        let listed: Vec<(S::Value, String)> = a.iter().map(|(v, o)| (v, o.to_owned())).collect();
        let want: Vec<(S::Value, String)> =
            m.held.iter().map(|(v, o)| (v.clone(), o.clone())).collect();
        assert_eq!(
            listed, want,
            "no value held twice, nothing outside the pool"
        );
        for (v, o) in &m.held {
            assert_eq!(a.holder(v), Some(o.as_str()));
            assert_eq!(a.by_owner(o).as_ref(), Some(v));
        }
    }
}

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn v4_pool() -> (AddressSpace, Vec<IpAddr>, Vec<IpAddr>) {
    let space = AddressSpace::new(
        &["10.0.0.0/28".parse().unwrap()],
        &[AddressRange {
            start: v4("10.0.1.5"),
            end: v4("10.0.1.9"),
        }],
        &[
            "10.0.0.4/30".parse().unwrap(),
            "10.0.1.7/32".parse().unwrap(),
        ],
    )
    .unwrap();
    // Written out by hand: /28 minus network (0), broadcast (15) and 4..=7; the range
    // 5..=9 minus 7.
    let mut usable: Vec<IpAddr> = [1, 2, 3, 8, 9, 10, 11, 12, 13, 14]
        .iter()
        .map(|i| v4(&format!("10.0.0.{i}")))
        .collect();
    usable.extend([5, 6, 8, 9].iter().map(|i| v4(&format!("10.0.1.{i}"))));
    let domain = (0..16)
        .map(|i| v4(&format!("10.0.0.{i}")))
        .chain((0..16).map(|i| v4(&format!("10.0.1.{i}"))))
        .chain([v4("fd00::1")])
        .collect();
    (space, usable, domain)
}

fn v6_pool() -> (AddressSpace, Vec<IpAddr>, Vec<IpAddr>) {
    let space = AddressSpace::new(
        &["fd00::/124".parse().unwrap()],
        &[],
        &["fd00::8/126".parse().unwrap()],
    )
    .unwrap();
    // The /124 minus its first (anycast) address and 8..=11.
    let usable = [1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15]
        .iter()
        .map(|i| format!("fd00::{i:x}").parse().unwrap())
        .collect();
    let domain = (0..32)
        .map(|i| format!("fd00::{i:x}").parse().unwrap())
        .chain([v4("10.0.0.1")])
        .collect();
    (space, usable, domain)
}

fn prefix_pool() -> (PrefixSpace, Vec<IpNetwork>, Vec<IpNetwork>) {
    let space = PrefixSpace::new("10.0.0.0/26".parse().unwrap(), 29).unwrap();
    let usable: Vec<IpNetwork> = (0..8)
        .map(|i| format!("10.0.0.{}/29", i * 8).parse().unwrap())
        .collect();
    let mut domain = usable.clone();
    domain.push("10.0.0.64/29".parse().unwrap());
    domain.push("10.0.0.4/30".parse().unwrap());
    (space, usable, domain)
}

/// A pool too big for the dense structures (2^28 values), so the B-tree paths run.
fn sparse_pool() -> (AddressSpace, Vec<IpAddr>, Vec<IpAddr>) {
    let space = AddressSpace::new(&["fd00::/100".parse().unwrap()], &[], &[]).unwrap();
    assert_eq!(space.capacity(), (1 << 28) - 1);
    // The first usable values, and the pool's last address (in the domain below).
    let usable = (1..200)
        .map(|i| format!("fd00::{i:x}").parse().unwrap())
        .chain(["fd00::fff:ffff".parse().unwrap()])
        .collect();
    let domain = (0..32)
        .map(|i| format!("fd00::{i:x}").parse().unwrap())
        .chain([
            "fd00::fff:ffff".parse().unwrap(),
            "fd01::1".parse().unwrap(),
        ])
        .collect();
    (space, usable, domain)
}

/// The id layer against the same oracle (owners are ids, no snapshot).
fn run_ids<S: Space + Clone>(space: S, usable: Vec<S::Value>, domain: Vec<S::Value>, ops: Vec<Op>) {
    let mut a = IdAllocator::new(space);
    let mut held: BTreeMap<S::Value, u32> = BTreeMap::new();
    let by_owner = |held: &BTreeMap<S::Value, u32>, o: u32| {
        held.iter().find(|(_, h)| **h == o).map(|(v, _)| v.clone())
    };
    for op in ops {
        match op {
            Op::Allocate(o) => {
                let o = u32::from(o);
                let want = by_owner(&held, o)
                    .or_else(|| usable.iter().find(|v| !held.contains_key(*v)).cloned());
                let got = a.allocate(o);
                match want {
                    Some(v) => {
                        assert_eq!(got.as_ref().ok(), Some(&v), "allocate #{o}");
                        held.insert(v, o);
                    }
                    None => assert!(matches!(got, Err(Error::Exhausted { .. })), "{got:?}"),
                }
            }
            Op::Static(o, i) => {
                let o = u32::from(o);
                let v = domain[i].clone();
                let got = a.allocate_static(o, &v);
                match (
                    usable.contains(&v),
                    held.get(&v).copied(),
                    by_owner(&held, o),
                ) {
                    (false, _, _) => assert!(got.is_err(), "{v} is not usable: {got:?}"),
                    (true, Some(h), _) if h == o => assert_eq!(got, Ok(v.clone())),
                    (true, Some(h), _) => assert_eq!(
                        got,
                        Err(Error::Taken {
                            value: v.to_string(),
                            holder: format!("#{h}")
                        })
                    ),
                    (true, None, Some(_)) => {
                        assert!(matches!(got, Err(Error::OwnerHoldsOther { .. })), "{got:?}")
                    }
                    (true, None, None) => {
                        assert_eq!(got, Ok(v.clone()));
                        held.insert(v, o);
                    }
                }
            }
            Op::Release(o) => {
                let o = u32::from(o);
                let want = by_owner(&held, o);
                if let Some(v) = &want {
                    held.remove(v);
                }
                assert_eq!(a.release(o), want);
            }
            Op::ReleaseValue(_) | Op::SnapshotRestore => {}
        }
        assert_eq!(a.allocated(), held.len() as u128, "allocated count");
        let listed: Vec<(S::Value, u32)> = a.iter().collect();
        let want: Vec<(S::Value, u32)> = held.iter().map(|(v, o)| (v.clone(), *o)).collect();
        assert_eq!(listed, want);
        for (v, o) in &held {
            assert_eq!(a.holder(v), Some(*o));
            assert_eq!(a.by_owner(*o).as_ref(), Some(v));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn id_layer_matches_the_oracle_dense(ops in ops(33)) {
        let (s, u, d) = v4_pool();
        run_ids(s, u, d, ops);
    }

    #[test]
    fn id_layer_matches_the_oracle_sparse(ops in ops(34)) {
        let (s, u, d) = sparse_pool();
        run_ids(s, u, d, ops);
    }

    #[test]
    fn sparse_pool_matches_the_oracle(ops in ops(34)) {
        let (s, u, d) = sparse_pool();
        run(s, u, d, ops);
    }

    #[test]
    fn ipv4_pool_matches_the_oracle(ops in ops(33)) {
        let (s, u, d) = v4_pool();
        run(s, u, d, ops);
    }

    #[test]
    fn ipv6_pool_matches_the_oracle(ops in ops(33)) {
        let (s, u, d) = v6_pool();
        run(s, u, d, ops);
    }

    #[test]
    fn child_prefixes_match_the_oracle(ops in ops(10)) {
        let (s, u, d) = prefix_pool();
        run(s, u, d, ops);
    }
}

#[test]
fn restore_reports_two_owners_on_one_address_and_restores_nothing() {
    let (space, _, _) = v4_pool();
    let err = Allocator::restore(
        space,
        [
            (v4("10.0.0.1"), "ns/a".to_string()),
            (v4("10.0.0.1"), "ns/b".to_string()),
            (v4("10.0.0.2"), "ns/c".to_string()),
            (v4("10.0.0.3"), "ns/c".to_string()),
            (v4("10.0.0.5"), "ns/d".to_string()),
        ],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot restore: 10.0.0.1 is held by both ns/a and ns/b; ns/c holds both 10.0.0.2 \
         and 10.0.0.3; ns/d holds 10.0.0.5, which is not in the pool: 10.0.0.5 is excluded \
         from the pool"
    );
}

#[test]
fn restore_keeps_every_owner_on_its_address() {
    let (space, _, _) = v6_pool();
    let saved = vec![
        ("fd00::e".parse().unwrap(), "ns/late".to_string()),
        ("fd00::1".parse().unwrap(), "ns/early".to_string()),
    ];
    let mut a = Allocator::restore(space, saved).unwrap();
    assert_eq!(a.by_owner("ns/late").unwrap().to_string(), "fd00::e");
    // New allocations fill the lowest gap, never disturbing restored ones.
    assert_eq!(a.allocate("ns/new").unwrap().to_string(), "fd00::2");
}

#[test]
fn huge_pools_count_exactly_and_allocate_without_scanning() {
    let space = AddressSpace::new(&["::/0".parse().unwrap()], &[], &[]).unwrap();
    let mut a = Allocator::new(space);
    assert_eq!(a.capacity(), u128::MAX);
    let top = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
    a.allocate_static("ns/top", &top).unwrap();
    assert_eq!(a.allocate("ns/low").unwrap().to_string(), "::1");
    assert_eq!(a.allocated(), 2);
    assert_eq!(a.holder(&top), Some("ns/top"));
}

/// The id layer keeps offsets in the narrowest type the pool allows; the last value of
/// each size class must still come back exactly.
#[test]
fn the_top_of_every_pool_size_class_round_trips() {
    for (pool, top) in [
        ("0.0.0.0/0", "255.255.255.254"),
        ("fd00::/64", "fd00::ffff:ffff:ffff:ffff"),
        ("fd00::/63", "fd00::1:ffff:ffff:ffff:ffff"),
        ("::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
    ] {
        let space = AddressSpace::new(&[pool.parse().unwrap()], &[], &[]).unwrap();
        let top: IpAddr = top.parse().unwrap();
        let mut ids = IdAllocator::new(space.clone());
        ids.allocate_static(7, &top).unwrap();
        assert_eq!(ids.by_owner(7), Some(top), "{pool}");
        assert_eq!(ids.holder(&top), Some(7), "{pool}");
        assert_eq!(ids.release(7), Some(top), "{pool}");
        let mut names = Allocator::new(space);
        names.allocate_static("ns/top", &top).unwrap();
        assert_eq!(names.by_owner("ns/top"), Some(top), "{pool}");
        assert_eq!(names.holder(&top), Some("ns/top"), "{pool}");
    }
}

/// Reservations are hints: an absurd one neither panics nor changes anything.
#[test]
fn an_impossible_reservation_is_skipped_not_a_panic() {
    let (space, _, _) = v4_pool();
    let mut a = Allocator::new(space.clone());
    a.allocate("ns/a").unwrap();
    a.reserve_owners(usize::MAX);
    assert_eq!(a.by_owner("ns/a"), Some(v4("10.0.0.1")));
    assert_eq!(a.allocate("ns/b").unwrap(), v4("10.0.0.2"));
}

#[test]
fn the_reserved_owner_id_is_refused_not_lost() {
    let (space, _, _) = v4_pool();
    let mut ids = IdAllocator::new(space);
    let err = ids.allocate(u32::MAX).unwrap_err();
    assert_eq!(err.field_errors()[0].path, "owner");
    assert!(ids.allocate_static(u32::MAX, &v4("10.0.0.1")).is_err());
    assert_eq!(ids.allocated(), 0);
    assert_eq!(ids.allocate(7).unwrap(), v4("10.0.0.1"));
}

/// Owners are found from their values through the owner table's bucket indices, which
/// move when the table grows or cleans up after many removals: every holder must
/// survive both.
#[test]
fn holders_survive_owner_table_growth_and_churn() {
    let space = AddressSpace::new(&["10.0.0.0/16".parse().unwrap()], &[], &[]).unwrap();
    let mut a = Allocator::new(space);
    let name = |i: u32| format!("team-{}/a-rather-long-floating-ip-name-{i}", i % 7);
    let check = |a: &Allocator<AddressSpace>| {
        assert_eq!(a.allocated(), 5_000);
        for (v, o) in a.iter() {
            assert_eq!(a.by_owner(o), Some(v), "{o}");
        }
        for i in 0..5_000 {
            let v = a.by_owner(&name(i)).unwrap();
            assert_eq!(a.holder(&v), Some(name(i).as_str()));
        }
    };
    // The table grows several times on the way.
    for i in 0..5_000 {
        a.allocate(&name(i)).unwrap();
    }
    check(&a);
    // Churn through many more names than the table holds at once.
    for round in 0..20u32 {
        for i in (0..5_000).filter(|i| i % 3 == round % 3) {
            a.release(&name(i));
        }
        for i in (0..5_000).filter(|i| i % 3 == round % 3) {
            a.allocate(&name(i)).unwrap();
        }
        check(&a);
    }
    // Growing the table by hand moves every entry too.
    a.reserve_owners(50_000);
    check(&a);
    // A copy keeps every entry where it was (the core's ids are entry positions).
    let copy = a.clone();
    check(&copy);
    let restored = Allocator::restore(a.space().clone(), a.snapshot()).unwrap();
    assert_eq!(restored.snapshot(), a.snapshot());
}
