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
//! n allocated values, r runs of consecutive allocated values (r ≤ n; 1 when a pool is
//! filled from the bottom), i intervals in a pool definition.
//!
//! | operation | cost |
//! |---|---|
//! | build a pool | O(i log i) |
//! | capacity, allocated count | O(1) |
//! | dynamic allocation (lowest free) | O(log r + log i) |
//! | static allocation, release | O(log r + log n + log i) |
//! | lookup by owner | O(1) expected |
//! | lookup by value | O(log i) dense (≤ 2^21 values), O(log n + log i) sparse |
//! | snapshot | O(n log i) |
//! | restore | O(n log n) |
//! | overlap check of two pools | O(i) |

pub mod alloc;
pub mod error;
pub mod pools;
pub mod prefix;
mod runs;
pub mod space;

pub use error::{Error, RestoreProblem, Result};
