//! Hierarchical prefix allocation: child prefixes of one length from a parent, lowest
//! free first, released when their owner leaves. Nest allocators for deeper
//! hierarchies (a /20 per conduit from a /16 trench, then a /24 per node from each /20).

use ipnetwork::IpNetwork;

use crate::{alloc::Allocator, error::Result, space::PrefixSpace};

/// Allocates child prefixes of `child_len` from `parent`.
///
/// # Examples
/// ```
/// use netpolicy_ipam::prefix::PrefixAllocator;
///
/// let mut trench = PrefixAllocator::new_prefixes("10.0.0.0/16".parse()?, 20)?;
/// let conduit = trench.allocate("conduit-a")?;
/// assert_eq!(conduit.to_string(), "10.0.0.0/20");
/// let mut nodes = PrefixAllocator::new_prefixes(conduit, 24)?;
/// assert_eq!(nodes.allocate("worker-1")?.to_string(), "10.0.0.0/24");
/// assert_eq!(nodes.allocate("worker-2")?.to_string(), "10.0.1.0/24");
/// nodes.release("worker-1"); // the node left: its /24 is free again
/// assert_eq!(nodes.allocate("worker-3")?.to_string(), "10.0.0.0/24");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type PrefixAllocator = Allocator<PrefixSpace>;

impl Allocator<PrefixSpace> {
    /// Builds a prefix allocator over `parent`'s children of `child_len`.
    ///
    /// # Errors
    /// As [`PrefixSpace::new`].
    pub fn new_prefixes(parent: IpNetwork, child_len: u8) -> Result<Self> {
        Ok(Self::new(PrefixSpace::new(parent, child_len)?))
    }
}
