//! I3: memory of the IPAM allocator, measured with a counting global allocator (bytes
//! live after building minus bytes live before).
//!
//! - sparse: IPv6 /64 with 1M random static allocations: bytes per allocated address,
//!   with and without the owner names (which are the caller's strings);
//! - dense: a full IPv4 /12 (1,048,574 addresses): total, with and without owner names,
//!   beside the Kubernetes bitmap baseline (which stores no owners at all).
//!
//! Run: `cargo bench -p netpolicy-benches --bench ipam_memory`

#![allow(clippy::expect_used)] // a bench that cannot build its input has nothing to measure

use std::{
    alloc::System,
    hint::black_box,
    net::{IpAddr, Ipv6Addr},
};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

use netpolicy_benches::{SplitMix64, ipam_baselines::BitmapAllocator};
use netpolicy_ipam::{
    alloc::{Allocator, IdAllocator},
    space::AddressSpace,
};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes live now (allocated minus freed since start), from `stats_alloc`.
fn live() -> isize {
    let s = GLOBAL.stats();
    // `realloc` is already folded into allocated/deallocated by stats_alloc.
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // nothing to check under `cargo test`
    }
    let n = 1_000_000u64;
    let names: Vec<String> = (0..n).map(|i| format!("ns-{}/fip-{i}", i % 97)).collect();

    let space =
        AddressSpace::new(&["fd00:64::/64".parse().expect("pool")], &[], &[]).expect("pool");
    let base = u128::from("fd00:64::".parse::<Ipv6Addr>().expect("addr"));
    let mut rng = SplitMix64(3);
    let before = live();
    let mut a = Allocator::new(space);
    let mut ok = 0u64;
    for name in &names {
        let addr = IpAddr::V6(Ipv6Addr::from(base + u128::from(rng.next_u64() | 1)));
        if a.allocate_static(name, &addr).is_ok() {
            ok += 1;
        }
    }
    let total = live() - before;
    println!(
        "ipam_i3 sparse /64, names layer (Allocator), {ok} random static allocations: {:.1} \
         bytes per address, names included (inside the owner table up to 30 bytes; these \
         are {:.0} bytes long on average)",
        total as f64 / ok as f64,
        names.iter().map(String::len).sum::<usize>() as f64 / n as f64
    );
    drop(black_box(a));

    // The id layer alone (owners as u32 ids, as an embedder with its own owner table
    // uses it): what "per address including its owner id" measures.
    let space =
        AddressSpace::new(&["fd00:64::/64".parse().expect("pool")], &[], &[]).expect("pool");
    let mut rng = SplitMix64(3);
    let before = live();
    let mut ids = IdAllocator::new(space);
    let mut ok = 0u64;
    for id in 0..n as u32 {
        let addr = IpAddr::V6(Ipv6Addr::from(base + u128::from(rng.next_u64() | 1)));
        if ids.allocate_static(id, &addr).is_ok() {
            ok += 1;
        }
    }
    let total = live() - before;
    println!(
        "ipam_i3 sparse /64, id layer (IdAllocator, u32 owner ids), {ok} random static \
         allocations: {:.1} bytes per address including its owner id (target <= 32)",
        total as f64 / ok as f64
    );
    drop(black_box(ids));

    let v4 = AddressSpace::new(&["10.0.0.0/12".parse().expect("pool")], &[], &[]).expect("pool");
    let full: Vec<String> = (0..1_048_574u64)
        .map(|i| format!("ns-{}/fip-{i}", i % 97))
        .collect();
    let before = live();
    let mut a = Allocator::new(v4);
    for name in &full {
        let _ = a.allocate(name);
    }
    let total = live() - before;
    println!(
        "ipam_i3 dense full /12 ({} addresses), names layer: {:.2} MiB in all, names included",
        a.allocated(),
        total as f64 / 1048576.0,
    );
    drop(black_box(a));
    let v4 = AddressSpace::new(&["10.0.0.0/12".parse().expect("pool")], &[], &[]).expect("pool");
    let before = live();
    let mut ids = IdAllocator::new(v4);
    for id in 0..1_048_574u32 {
        let _ = ids.allocate(id);
    }
    let total = live() - before;
    // The owners: address -> owner id and owner id -> address, 4 bytes each (pools under
    // 2^32 values), in pages of 1,024 entries.
    let owners = 2.0 * 4.0 * 1024.0 * (1_048_574f64 / 1024.0).ceil();
    println!(
        "ipam_i3 dense full /12, id layer: {:.2} MiB in all: {:.2} MiB address -> owner id \
         and id -> address arrays (the owners), {:.3} MiB everything else (target: <= 1 MiB \
         plus owners)",
        total as f64 / 1048576.0,
        owners / 1048576.0,
        (total as f64 - owners) / 1048576.0
    );
    let bitmap = BitmapAllocator::new(1_048_574, 1);
    println!(
        "ipam_i3 baseline bitmap for the /12: {:.2} MiB (no owners)",
        bitmap.bytes() as f64 / 1048576.0
    );
}
