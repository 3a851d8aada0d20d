//! Operation sequences on an allocator, decoded from the input bytes, with the
//! invariants checked after every step: no value held twice, counts match, nothing
//! outside the pool, lookups agree both ways, snapshot/restore round-trips.

use std::{collections::BTreeMap, net::IpAddr};

use netpolicy_ipam::{
    alloc::Allocator,
    space::{AddressRange, AddressSpace, Space},
};

/// One input: panics on a broken invariant (a finding).
pub fn run(data: &[u8]) {
    let Some((&shape, ops)) = data.split_first() else {
        return;
    };
    // A small IPv4 or IPv6 pool with an exclusion and a range, or a large IPv6 pool (over
    // 2^21 values: the growing prefix and the static allocations above it), chosen by
    // the first byte.
    let space = if shape % 3 == 2 {
        AddressSpace::new(
            &["fd00::/100".parse().unwrap()],
            &[],
            &["fd00::20/126".parse().unwrap()],
        )
    } else if shape % 3 == 0 {
        AddressSpace::new(
            &["10.0.0.0/27".parse().unwrap()],
            &[AddressRange {
                start: "10.0.1.250".parse().unwrap(),
                end: "10.0.2.3".parse().unwrap(),
            }],
            &["10.0.0.8/29".parse().unwrap()],
        )
    } else {
        AddressSpace::new(
            &["fd00::/122".parse().unwrap()],
            &[],
            &["fd00::10/124".parse().unwrap()],
        )
    }
    .unwrap();
    let v4 = shape % 3 == 0;
    let base: u128 = if v4 { 0x0a00_0000 } else { 0xfd00u128 << 112 };
    let addr = |b: u8| -> IpAddr {
        let x = base + u128::from(b) * 3 % 1024;
        if v4 {
            IpAddr::V4((x as u32).into())
        } else {
            IpAddr::V6(x.into())
        }
    };
    let mut a = Allocator::new(space.clone());
    let mut model: BTreeMap<String, IpAddr> = BTreeMap::new();
    for pair in ops.chunks(2) {
        let (op, arg) = (pair[0], pair.get(1).copied().unwrap_or(0));
        // Some names too long to sit inside the owner table's slots.
        let owner = if arg & 0x80 == 0 {
            format!("o{}", arg % 40)
        } else {
            format!("a-namespace-with-a-long-name/owner-{}", arg % 40)
        };
        match op % 5 {
            0 => {
                if let Ok(v) = a.allocate(&owner)
                    && let Some(prev) = model.insert(owner.clone(), v)
                {
                    assert_eq!(prev, v, "same owner, same address");
                }
            }
            1 => {
                if let Ok(v) = a.allocate_static(&owner, &addr(arg)) {
                    assert_eq!(v, addr(arg), "a static request gets exactly its address");
                    model.insert(owner, v);
                }
            }
            2 => assert_eq!(a.release(&owner), model.remove(&owner)),
            3 => {
                if let Some(o) = a.release_value(&addr(arg)) {
                    assert_eq!(model.remove(&o), Some(addr(arg)));
                }
            }
            _ => {
                a = Allocator::restore(space.clone(), a.snapshot()).expect("own snapshot restores");
            }
        }
        assert_eq!(a.allocated(), model.len() as u128, "counts match");
        let mut seen = BTreeMap::new();
        for (v, o) in a.iter() {
            assert!(space.offset_of(&v).is_ok(), "{v} is inside the pool");
            assert!(seen.insert(v, o.to_owned()).is_none(), "{v} held twice");
            assert_eq!(model.get(o), Some(&v));
            assert_eq!(a.holder(&v), Some(o), "lookup by value");
            assert_eq!(a.by_owner(o), Some(v), "lookup by owner");
        }
    }
}
