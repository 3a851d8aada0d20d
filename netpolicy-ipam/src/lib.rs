//! # netpolicy-ipam
//!
//! Floating IP pools and hierarchical prefix allocation for netpolicy. Pure: no I/O, no
//! clock, no randomness.
//!
//! ```toml
//! [dependencies]
//! netpolicy-ipam = "0.1"
//! ```
//!
//! Everything its signatures use is re-exported (`netpolicy_ipam::IpNetwork` and the
//! `ipnetwork` crate, `FieldError`, `IpFamily`): no other line is needed. MSRV: Rust 1.89.
//!
//! - [`space`]: what a pool hands out. [`space::AddressSpace`]: CIDRs and start-end
//!   ranges minus exclusions, with the architecture's (docs/architecture.md) usable-address rules
//!   (`10.135.10.192/26` has 62). [`space::PrefixSpace`]: aligned child prefixes.
//! - [`alloc::Allocator`]: an owner per value; static and dynamic (lowest free)
//!   allocation, release, lookups both ways, snapshot and restore.
//!   [`alloc::IdAllocator`] is the same with `u32` owner ids instead of names.
//! - [`pools::Pools`]: several named pools, overlap detection, draining.
//! - [`prefix::PrefixAllocator`]: Meridio-style trench → conduit → node prefixes that
//!   are freed when their owner leaves.
//!
//! Sizes and counts are `u128` for both families and exact for any pool, up to IPv6
//! `::/0`; nothing is counted by iterating.
//!
//! # Examples
//! ```
//! use netpolicy_ipam::{alloc::Allocator, space::AddressSpace};
//!
//! let space = AddressSpace::parse(
//!     "spec",
//!     &["fd00:10::/64".to_string()],
//!     &[],
//!     &["fd00:10::1".to_string()],
//! )?;
//! let mut pool = Allocator::new(space);
//! assert_eq!(pool.capacity(), (1u128 << 64) - 2); // minus anycast and the exclusion
//! assert_eq!(pool.allocate("ns/vip")?.to_string(), "fd00:10::2");
//! let saved = pool.snapshot();
//! let again = Allocator::restore(pool.space().clone(), saved)?;
//! assert_eq!(again.by_owner("ns/vip"), pool.by_owner("ns/vip"));
//! # Ok::<(), netpolicy_ipam::Error>(())
//! ```
//!
//! # Complexity
//!
//! n allocated values, i intervals in a pool definition. "Dense" pools have at most 2^21
//! values (every IPv4 pool up to a /11); larger pools track a prefix that grows with
//! dynamic allocation and keep static allocations above it in a B-tree (see [`alloc`]).
//!
//! | operation | dense pool | larger pool |
//! |---|---|---|
//! | build a pool | O(i log i + capacity / 1024) | O(i log i) |
//! | capacity, allocated count | O(1), exact | O(1), exact |
//! | dynamic allocation (lowest free) | O(1) | O(1) (amortized when it reaches static allocations) |
//! | static allocation, release | O(1) | O(1) in the prefix, O(log n) above it |
//! | lookup by owner | O(1) expected | O(1) expected |
//! | lookup by value | O(log i) | O(log i), plus O(log n) above the prefix |
//! | snapshot | O(n log i) | O(n log i) |
//! | restore | O(n log n) | O(n log n) |
//! | overlap check of two pools | O(i) | O(i) |
//!
//! Turning an offset into an address is the O(log i) part: a binary search over the
//! pool's intervals (i = 1 for a pool of one CIDR).
//!
//! # Memory
//!
//! - Dense pool: a bit per value and 4 bytes per value for its holder's id, taken when
//!   the pool is built (a /12: 128 KiB + 4 MiB), so no allocation later asks the system
//!   for memory.
//! - Larger pool: the same for its prefix (which follows allocations and releases),
//!   plus a 12-byte B-tree entry per static allocation above it; never anything per
//!   free value.
//! - Owners: [`alloc::IdAllocator`] 4 bytes per id (8 for pools over 2^32 values);
//!   [`alloc::Allocator`] a 48-byte hash-table entry plus a control byte per bucket, the
//!   table between 7/16 and 7/8 full (56-112 bytes per owner), with names up to 30
//!   bytes inside the entry (longer ones on the heap).

pub mod alloc;
pub mod assign;
pub mod error;
pub mod pools;
pub mod prefix;
pub mod space;

pub use error::{Error, RestoreProblem, Result};
/// The foreign types in this crate's signatures, re-exported so that one dependency
/// line is enough: `ipnetwork` (prefixes in and out), netpolicy-core's [`FieldError`]
/// (what [`Error::Invalid`] lists) and [`IpFamily`].
pub use ipnetwork::{self, IpNetwork};
pub use netpolicy_core::{error::FieldError, model::IpFamily};

/// What an embedder uses: `use netpolicy_ipam::prelude::*;` brings in pools, the
/// allocators, the shared assignment rule and the errors.
pub mod prelude {
    pub use crate::{
        alloc::{Allocator, IdAllocator},
        assign::{Assignment, Recorded, Refusal, Request, assign},
        error::{Error, RestoreProblem, Result},
        pools::Pools,
        prefix::PrefixAllocator,
        space::{AddressSpace, Count, PrefixSpace},
    };
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
