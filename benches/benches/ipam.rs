//! IPAM benchmarks (issue: netpolicy-ipam), ours beside the anchors' allocators on the
//! same seeded input, ratios printed at the end:
//!
//! - `bitmap`: Kubernetes' bitmap allocator (random start offset, bit-by-bit scan);
//! - `linear`: kube-fip-operator's map of every address, scanned in order.
//!
//! `ours` is `Allocator` (owners by name), `ours_ids` is `IdAllocator` (u32 owner ids).
//!
//! | group | workload |
//! |---|---|
//! | `ipam_i1_fill` | IPv4 /12 (1,048,574 usable) from empty to full (ours, ours_ids, bitmap; linear is O(n^2) here: see `ipam_i1_latency`) |
//! | `ipam_i1_churn99` | at 99% fill: release a random holder or address, allocate one (ours, ours_ids, bitmap, linear) |
//! | `ipam_i2_v6` | IPv6 /64 after 1M dynamic + 100k random static allocations and half released: allocate + release (ours only: no baseline can hold a /64) |
//! | `ipam_i4_restore` | restore 1M persisted allocations (ours; baseline: replay them one by one) |
//!
//! `ipam_i1_latency`, `ipam_i2_latency` and `ipam_id_latency` time every operation on its
//! own and print mean,
//! p99, p99.9 and worst, which criterion does not report. Memory (I3) is in
//! `benches/ipam_memory.rs`.
//!
//! Run: `cargo bench -p netpolicy-benches --bench ipam`

#![allow(clippy::expect_used)] // a bench that cannot build its input has nothing to measure

use std::{
    hint::black_box,
    net::{IpAddr, Ipv6Addr},
    time::{Duration, Instant},
};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use netpolicy_benches::{
    Latency, SplitMix64,
    ipam_baselines::{BitmapAllocator, LinearScanAllocator},
    print_ratios,
};
use netpolicy_ipam::{
    alloc::{Allocator, IdAllocator},
    space::{AddressSpace, Space},
};

const SEED: u64 = 0x6970_616d;
/// 10.0.0.0/12: 1,048,574 usable.
const V4_POOL: &str = "10.0.0.0/12";
const V4_USABLE: u64 = 1_048_574;

fn v4_space() -> AddressSpace {
    AddressSpace::new(&[V4_POOL.parse().expect("pool")], &[], &[]).expect("pool")
}

fn owner(i: u64) -> String {
    format!("ns-{}/fip-{i}", i % 97)
}

fn filled(space: &AddressSpace, owners: &[String]) -> Allocator<AddressSpace> {
    let mut a = Allocator::new(space.clone());
    a.reserve_owners(owners.len());
    for o in owners {
        let _ = a.allocate(o);
    }
    a
}

fn ipam_i1_fill(c: &mut Criterion) {
    let space = v4_space();
    let owners: Vec<String> = (0..V4_USABLE).map(owner).collect();
    let mut g = c.benchmark_group("ipam_i1_fill");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(V4_USABLE));
    g.bench_function("ours", |b| {
        b.iter_batched(
            || {
                let mut a = Allocator::new(space.clone());
                a.reserve_owners(owners.len());
                a
            },
            |mut a| {
                for o in &owners {
                    black_box(a.allocate(o).ok());
                }
                a
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("ours_ids", |b| {
        b.iter_batched(
            || {
                let mut a = IdAllocator::new(space.clone());
                a.reserve_owners(V4_USABLE as usize);
                a
            },
            |mut a| {
                for id in 0..V4_USABLE as u32 {
                    black_box(a.allocate(id).ok());
                }
                a
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("bitmap", |b| {
        b.iter_batched(
            || BitmapAllocator::new(V4_USABLE, SEED),
            |mut a| {
                for _ in 0..V4_USABLE {
                    black_box(a.allocate_next());
                }
                a
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// The same 1% of a full /12, chosen at random: (offsets still held, offsets released).
/// Owner `k` of a pool filled from the bottom holds offset `k`, so the held offsets are
/// also the owners (names or ids) that still hold an address.
fn one_percent_released() -> (Vec<u64>, Vec<u64>) {
    let mut rng = SplitMix64(SEED);
    let mut held: Vec<u64> = (0..V4_USABLE).collect();
    let mut released = Vec::with_capacity((V4_USABLE / 100) as usize);
    for _ in 0..V4_USABLE / 100 {
        let i = rng.below(held.len() as u64) as usize;
        released.push(held.swap_remove(i));
    }
    (held, released)
}

/// Random release + allocate at 99% fill, for each allocator. Ours releases a random
/// holder and allocates for it again (it gets the lowest free address); the baselines
/// release a random address and allocate the next one their way.
fn ipam_i1_churn99(c: &mut Criterion) {
    let space = v4_space();
    let owners: Vec<String> = (0..V4_USABLE).map(owner).collect();
    let mut ours = filled(&space, &owners);
    let mut ids = IdAllocator::new(space.clone());
    for id in 0..V4_USABLE as u32 {
        let _ = ids.allocate(id);
    }
    let mut bitmap = BitmapAllocator::new(V4_USABLE, SEED);
    for _ in 0..V4_USABLE {
        bitmap.allocate_next();
    }
    let first = u32::from(std::net::Ipv4Addr::new(10, 0, 0, 1));
    let mut linear = LinearScanAllocator::new(first, V4_USABLE as u32);
    linear.fill("x");
    let (held, released) = one_percent_released();
    for &off in &released {
        ours.release(&owners[off as usize]);
        ids.release(off as u32);
        bitmap.release(off);
        linear.release(first + off as u32);
    }
    let mut g = c.benchmark_group("ipam_i1_churn99");
    g.throughput(Throughput::Elements(2));
    let mut r1 = SplitMix64(1);
    g.bench_function("ours", |b| {
        b.iter(|| {
            let name = &owners[held[r1.below(held.len() as u64) as usize] as usize];
            let _ = ours.release(name);
            black_box(ours.allocate(name).ok())
        })
    });
    let mut r4 = SplitMix64(1);
    g.bench_function("ours_ids", |b| {
        b.iter(|| {
            let id = held[r4.below(held.len() as u64) as usize] as u32;
            ids.release(id);
            black_box(ids.allocate(id).ok())
        })
    });
    let mut r2 = SplitMix64(1);
    let mut held_bitmap = held.clone();
    g.bench_function("bitmap", |b| {
        b.iter(|| {
            let i = r2.below(held_bitmap.len() as u64) as usize;
            bitmap.release(held_bitmap[i]);
            if let Some(at) = bitmap.allocate_next() {
                held_bitmap[i] = at;
            }
        })
    });
    let holders = held.len() as u128;
    let mut r3 = SplitMix64(1);
    let mut held_linear = held;
    g.bench_function("linear", |b| {
        b.iter(|| {
            let i = r3.below(held_linear.len() as u64) as usize;
            linear.release(first + held_linear[i] as u32);
            if let Some(a) = linear.allocate("x") {
                held_linear[i] = u64::from(a - first);
            }
        })
    });
    g.finish();
    // The churn kept the fill at 99%: every release was followed by one allocation.
    assert_eq!(ours.allocated(), holders, "named churn drifted");
    assert_eq!(ids.allocated(), holders, "id churn drifted");
}

/// Every operation timed on its own: mean, p99, p99.9 and worst, ours and bitmap, in
/// the fill phase and in churn at 99%.
fn ipam_i1_latency() {
    let space = v4_space();
    let owners: Vec<String> = (0..V4_USABLE).map(owner).collect();
    let mut ours = Allocator::new(space.clone());
    ours.reserve_owners(owners.len());
    let mut fill = Vec::with_capacity(owners.len());
    for o in &owners {
        let t = Instant::now();
        black_box(ours.allocate(o).ok());
        fill.push(t.elapsed().as_nanos() as u64);
    }
    let mut bitmap = BitmapAllocator::new(V4_USABLE, SEED);
    let mut bfill = Vec::with_capacity(owners.len());
    for _ in 0..V4_USABLE {
        let t = Instant::now();
        black_box(bitmap.allocate_next());
        bfill.push(t.elapsed().as_nanos() as u64);
    }
    println!("ipam_i1_latency fill /12 ours:   {}", Latency::of(fill));
    println!("ipam_i1_latency fill /12 bitmap: {}", Latency::of(bfill));

    let first = u32::from(std::net::Ipv4Addr::new(10, 0, 0, 1));
    let (held, released) = one_percent_released();
    for &off in &released {
        ours.release(&owners[off as usize]);
        bitmap.release(off);
    }
    let rounds = 200_000;
    let (mut o_lat, mut b_lat) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    let mut worst_scan = 0u64;
    let mut hb = held.clone();
    let (mut r1, mut r2) = (SplitMix64(2), SplitMix64(2));
    for _ in 0..rounds {
        let name = &owners[held[r1.below(held.len() as u64) as usize] as usize];
        let t = Instant::now();
        ours.release(name);
        black_box(ours.allocate(name).ok());
        o_lat.push(t.elapsed().as_nanos() as u64);
        let j = r2.below(hb.len() as u64) as usize;
        let t = Instant::now();
        bitmap.release(hb[j]);
        let at = bitmap.allocate_next();
        b_lat.push(t.elapsed().as_nanos() as u64);
        worst_scan = worst_scan.max(bitmap.last_scan);
        if let Some(at) = at {
            hb[j] = at;
        }
    }
    let mut linear = LinearScanAllocator::new(first, V4_USABLE as u32);
    linear.fill("x");
    for off in (V4_USABLE * 99 / 100)..V4_USABLE {
        linear.release(first + off as u32);
    }
    let mut l_lat = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let a = linear.allocate("y");
        l_lat.push(t.elapsed().as_nanos() as u64);
        if let Some(a) = a {
            linear.release(a);
        }
    }
    println!(
        "ipam_i1_latency linear scan, pool filled from the bottom to 99%: {}",
        Latency::of(l_lat)
    );
    assert_eq!(ours.allocated(), held.len() as u128, "churn drifted");
    let (o, b) = (Latency::of(o_lat), Latency::of(b_lat));
    println!("ipam_i1_latency churn 99% ours (release+allocate):   {o}");
    println!("ipam_i1_latency churn 99% bitmap (release+allocate): {b}");
    println!(
        "ipam_i1_latency churn 99% worst-case work: bitmap scanned up to {worst_scan} bits in \
         one allocation; ours reads at most 3 summary words and writes one page slot, \
         whatever the fill"
    );
    // The bitmap's worst case is data-dependent: a random start at the head of the
    // longest full stretch. Build exactly that case and time it (median of 101 runs, so
    // the figure is the algorithm, not the VM's noise). Ours does the same constant work
    // for every operation; its p99.9 stands for its worst.
    let (start, len) = bitmap.longest_full_stretch();
    let mut runs = Vec::with_capacity(101);
    for _ in 0..101 {
        let t = Instant::now();
        let at = bitmap.allocate_from(start);
        runs.push(t.elapsed().as_nanos() as u64);
        if let Some(at) = at {
            bitmap.release(at);
        }
    }
    runs.sort_unstable();
    let bitmap_worst = runs[50];
    println!(
        "ipam_i1_latency churn 99% bitmap worst case (start at the head of the longest full \
         stretch, {len} values): {bitmap_worst} ns median; ours p99.9 {} ns (release+allocate) \
         -> {:.0}x",
        o.p999_ns,
        bitmap_worst as f64 / o.p999_ns.max(1) as f64
    );
    println!(
        "ipam_i1_latency churn 99% worst-case ratio bitmap/ours: {:.1}x (p99.9 {:.1}x)",
        b.max_ns as f64 / o.max_ns.max(1) as f64,
        b.p999_ns as f64 / o.p999_ns.max(1) as f64
    );
}

fn v6_space() -> AddressSpace {
    AddressSpace::new(&["fd00:64::/64".parse().expect("pool")], &[], &[]).expect("pool")
}

/// I2's state: 1M dynamic and 100k random static allocations, half released at random.
fn v6_state(rng: &mut SplitMix64) -> (Allocator<AddressSpace>, Vec<String>, Vec<String>) {
    let space = v6_space();
    let mut a = Allocator::new(space.clone());
    let mut names = Vec::with_capacity(1_100_000);
    for i in 0..1_000_000u64 {
        let n = format!("dyn-{i}");
        let _ = a.allocate(&n);
        names.push(n);
    }
    let base = u128::from("fd00:64::".parse::<Ipv6Addr>().expect("addr"));
    for i in 0..100_000u64 {
        let n = format!("static-{i}");
        let addr = IpAddr::V6(Ipv6Addr::from(
            base + (u128::from(rng.next_u64()) | 1 << 40),
        ));
        if a.allocate_static(&n, &addr).is_ok() {
            names.push(n);
        }
    }
    let mut released = Vec::new();
    let mut kept = Vec::new();
    for n in names {
        if rng.below(2) == 0 {
            a.release(&n);
            released.push(n);
        } else {
            kept.push(n);
        }
    }
    (a, kept, released)
}

fn ipam_i2_v6(c: &mut Criterion) {
    let mut rng = SplitMix64(SEED);
    let (mut a, _, released) = v6_state(&mut rng);
    let mut g = c.benchmark_group("ipam_i2_v6");
    g.throughput(Throughput::Elements(2));
    let mut i = 0usize;
    g.bench_function("ours", |b| {
        b.iter(|| {
            let n = &released[i % released.len()];
            i += 1;
            let got = a.allocate(n).ok();
            a.release(n);
            black_box(got)
        })
    });
    g.finish();
}

fn ipam_i2_latency() {
    let mut rng = SplitMix64(SEED ^ 1);
    let space = v6_space();
    let mut a = Allocator::new(space);
    let mut dynamic = Vec::with_capacity(1_000_000);
    for i in 0..1_000_000u64 {
        let n = format!("dyn-{i}");
        let t = Instant::now();
        let _ = black_box(a.allocate(&n));
        dynamic.push(t.elapsed().as_nanos() as u64);
    }
    let base = u128::from("fd00:64::".parse::<Ipv6Addr>().expect("addr"));
    let mut statics = Vec::with_capacity(100_000);
    for i in 0..100_000u64 {
        let n = format!("static-{i}");
        let addr = IpAddr::V6(Ipv6Addr::from(
            base + (u128::from(rng.next_u64()) | 1 << 40),
        ));
        let t = Instant::now();
        let _ = black_box(a.allocate_static(&n, &addr));
        statics.push(t.elapsed().as_nanos() as u64);
    }
    let names: Vec<String> = (0..1_000_000u64)
        .map(|i| format!("dyn-{i}"))
        .chain((0..100_000u64).map(|i| format!("static-{i}")))
        .collect();
    let mut release = Vec::new();
    let mut released = Vec::new();
    for n in &names {
        if rng.below(2) == 0 {
            let t = Instant::now();
            black_box(a.release(n));
            release.push(t.elapsed().as_nanos() as u64);
            released.push(n);
        }
    }
    let mut again = Vec::with_capacity(released.len());
    for n in released {
        let t = Instant::now();
        let _ = black_box(a.allocate(n));
        again.push(t.elapsed().as_nanos() as u64);
    }
    println!("ipam_i2_latency /64 dynamic: {}", Latency::of(dynamic));
    println!(
        "ipam_i2_latency /64 static (random): {}",
        Latency::of(statics)
    );
    println!(
        "ipam_i2_latency /64 release (random half): {}",
        Latency::of(release)
    );
    println!("ipam_i2_latency /64 allocate again: {}", Latency::of(again));
    println!(
        "ipam_i2_latency /64 state: {} allocated, {} released values remembered (structures follow allocations and releases, not free space)",
        a.allocated(),
        a.holes()
    );
    println!(
        "ipam_i2: no baseline: the bitmap allocator would need 2^64 bits for this pool and \
         the linear scan a map of 2^64 addresses"
    );
}

fn ipam_i4_restore(c: &mut Criterion) {
    let space = v6_space();
    let mut rng = SplitMix64(SEED ^ 4);
    let base = u128::from("fd00:64::".parse::<Ipv6Addr>().expect("addr"));
    let saved: Vec<(IpAddr, String)> = (0..1_000_000u64)
        .map(|i| {
            let off = if i % 2 == 0 {
                u128::from(i + 1)
            } else {
                u128::from(rng.next_u64()) | 1 << 40
            };
            (
                IpAddr::V6(Ipv6Addr::from(base + off)),
                format!("ns-{}/fip-{i}", i % 97),
            )
        })
        .collect();
    let mut g = c.benchmark_group("ipam_i4_restore");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(15))
        .throughput(Throughput::Elements(saved.len() as u64));
    g.bench_function("ours", |b| {
        b.iter_batched(
            || saved.clone(),
            |s| Allocator::restore(space.clone(), s).map(|a| a.allocated()),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("replay", |b| {
        b.iter(|| {
            let mut a = Allocator::new(space.clone());
            for (addr, o) in &saved {
                let _ = a.allocate_static(o, addr);
            }
            black_box(a.allocated())
        })
    });
    g.finish();
    // The capacity is exact for the /64 too; sanity for the reader.
    assert_eq!(space.capacity(), (1u128 << 64) - 1);
}

/// The id layer (`IdAllocator`, owners as u32 ids), timed per operation: I1 fill and
/// churn at 99%, and I2's sequence on a /64.
fn ipam_id_latency() {
    let mut ids = IdAllocator::new(v4_space());
    let mut fill = Vec::with_capacity(V4_USABLE as usize);
    for id in 0..V4_USABLE as u32 {
        let t = Instant::now();
        black_box(ids.allocate(id).ok());
        fill.push(t.elapsed().as_nanos() as u64);
    }
    println!("ipam_id_latency fill /12 (id layer): {}", Latency::of(fill));
    let (held, released) = one_percent_released();
    for &off in &released {
        ids.release(off as u32);
    }
    let mut rng = SplitMix64(SEED);
    let mut churn = Vec::with_capacity(200_000);
    for _ in 0..200_000 {
        let id = held[rng.below(held.len() as u64) as usize] as u32;
        let t = Instant::now();
        ids.release(id);
        black_box(ids.allocate(id).ok());
        churn.push(t.elapsed().as_nanos() as u64);
    }
    println!(
        "ipam_id_latency churn 99% (id layer, release+allocate): {}",
        Latency::of(churn)
    );

    let mut a = IdAllocator::new(v6_space());
    let (mut dynamic, mut statics, mut release, mut again) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for id in 0..1_000_000u32 {
        let t = Instant::now();
        let _ = black_box(a.allocate(id));
        dynamic.push(t.elapsed().as_nanos() as u64);
    }
    let base = u128::from("fd00:64::".parse::<Ipv6Addr>().expect("addr"));
    for id in 1_000_000..1_100_000u32 {
        let addr = IpAddr::V6(Ipv6Addr::from(
            base + (u128::from(rng.next_u64()) | 1 << 40),
        ));
        let t = Instant::now();
        let _ = black_box(a.allocate_static(id, &addr));
        statics.push(t.elapsed().as_nanos() as u64);
    }
    let mut released = Vec::new();
    for id in 0..1_100_000u32 {
        if rng.below(2) == 0 {
            let t = Instant::now();
            black_box(a.release(id));
            release.push(t.elapsed().as_nanos() as u64);
            released.push(id);
        }
    }
    for id in released {
        let t = Instant::now();
        let _ = black_box(a.allocate(id));
        again.push(t.elapsed().as_nanos() as u64);
    }
    println!(
        "ipam_id_latency /64 dynamic (id layer): {}",
        Latency::of(dynamic)
    );
    println!(
        "ipam_id_latency /64 static (id layer): {}",
        Latency::of(statics)
    );
    println!(
        "ipam_id_latency /64 release (id layer): {}",
        Latency::of(release)
    );
    println!(
        "ipam_id_latency /64 allocate again (id layer): {}",
        Latency::of(again)
    );
}

criterion_group!(
    benches,
    ipam_i1_fill,
    ipam_i1_churn99,
    ipam_i2_v6,
    ipam_i4_restore
);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    ipam_i1_latency();
    ipam_i2_latency();
    ipam_id_latency();
    print_ratios(&[
        ("ipam_i1_fill", "ours", "bitmap"),
        ("ipam_i1_fill", "ours_ids", "bitmap"),
        ("ipam_i1_churn99", "ours", "bitmap"),
        ("ipam_i1_churn99", "ours_ids", "bitmap"),
        ("ipam_i1_churn99", "ours", "linear"),
        ("ipam_i4_restore", "ours", "replay"),
    ]);
}
