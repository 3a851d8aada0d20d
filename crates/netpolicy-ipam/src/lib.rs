//! # netpolicy-ipam
//!
//! Floating IP pools and hierarchical prefix allocation for netpolicy. Pure: no I/O, no
//! clock, no randomness.
//!
//! - [`space`]: what a pool hands out. [`space::AddressSpace`]: CIDRs and start-end
//!   ranges minus exclusions, with DESIGN.md's usable-address rules
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
//! n allocated values, h released values below the watermark (see [`alloc`]), i
//! intervals in a pool definition. "Dense" pools have at most 2^21 values.
//!
//! | operation | cost |
//! |---|---|
//! | build a pool | O(i log i) |
//! | capacity, allocated count | O(1) |
//! | dynamic allocation (lowest free) | O(log h + log i), plus O(log n) sparse |
//! | static allocation, release | O(log h + log i), plus O(log n) sparse |
//! | lookup by owner | O(1) expected |
//! | lookup by value | O(log i) dense, O(log n + log i) sparse |
//! | snapshot | O(n log i) |
//! | restore | O(n log n) |
//! | overlap check of two pools | O(i) |
//!
//! Memory grows with allocations and releases, never with free space: per allocated
//! value 4 bytes (dense) or a 12-byte B-tree entry (sparse, pools up to 2^64 values),
//! plus 8 bytes per owner id and the owner names.

pub mod alloc;
pub mod error;
pub mod pools;
pub mod prefix;
pub mod space;

pub use error::{Error, RestoreProblem, Result};

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
