//! Several named address pools: overlap detection and draining.

use std::{collections::BTreeMap, net::IpAddr};

use crate::{
    alloc::Allocator,
    error::{Error, Result},
    space::AddressSpace,
};

/// One named pool.
#[derive(Debug, Clone)]
pub struct Pool {
    /// Its allocations.
    pub alloc: Allocator<AddressSpace>,
    /// Draining: keeps existing allocations, makes no new ones.
    pub draining: bool,
}

/// Named address pools that never share an address.
///
/// # Examples
/// ```
/// use netpolicy_ipam::{pools::Pools, space::AddressSpace};
///
/// let mut pools = Pools::new();
/// pools.add("blue", AddressSpace::new(&["10.0.0.0/24".parse()?], &[], &[])?, false)?;
/// let err = pools
///     .add("green", AddressSpace::new(&["10.0.0.128/25".parse()?], &[], &[])?, false)
///     .unwrap_err();
/// assert_eq!(err.to_string(), "pools blue and green overlap (both contain 10.0.0.129)");
/// assert_eq!(pools.allocate("blue", "ns/a")?.to_string(), "10.0.0.1");
/// pools.set_draining("blue", true)?;
/// assert!(pools.allocate("blue", "ns/b").is_err());
/// assert_eq!(pools.allocate("blue", "ns/a")?.to_string(), "10.0.0.1"); // kept
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Pools {
    pools: BTreeMap<String, Pool>,
}

impl Pools {
    /// No pools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a pool.
    ///
    /// # Errors
    /// [`Error::Overlap`] naming both pools when it shares an address with an existing
    /// one (the pool is not added).
    pub fn add(&mut self, name: &str, space: AddressSpace, draining: bool) -> Result<()> {
        for (other, p) in &self.pools {
            if other == name {
                continue;
            }
            if let Some(a) = p.alloc.space().first_overlap(&space) {
                let (first, second) = if other.as_str() < name {
                    (other.clone(), name.to_owned())
                } else {
                    (name.to_owned(), other.clone())
                };
                return Err(Error::Overlap {
                    first,
                    second,
                    address: a.to_string(),
                });
            }
        }
        self.pools.insert(
            name.to_owned(),
            Pool {
                alloc: Allocator::new(space),
                draining,
            },
        );
        Ok(())
    }

    /// A pool by name.
    pub fn get(&self, name: &str) -> Option<&Pool> {
        self.pools.get(name)
    }

    /// Every pool, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Pool)> {
        self.pools.iter().map(|(k, v)| (k.as_str(), v))
    }

    fn pool_mut(&mut self, name: &str) -> Result<&mut Pool> {
        self.pools.get_mut(name).ok_or_else(|| Error::UnknownPool {
            pool: name.to_owned(),
        })
    }

    /// Marks a pool draining or not.
    ///
    /// # Errors
    /// [`Error::UnknownPool`].
    pub fn set_draining(&mut self, name: &str, draining: bool) -> Result<()> {
        self.pool_mut(name)?.draining = draining;
        Ok(())
    }

    /// Dynamic allocation from a pool. An owner that already holds an address gets it
    /// back, even from a draining pool.
    ///
    /// # Errors
    /// [`Error::UnknownPool`], [`Error::Draining`], [`Error::Exhausted`].
    pub fn allocate(&mut self, pool: &str, owner: &str) -> Result<IpAddr> {
        let p = self.pool_mut(pool)?;
        if let Some(a) = p.alloc.by_owner(owner) {
            return Ok(a);
        }
        if p.draining {
            return Err(Error::Draining {
                pool: pool.to_owned(),
            });
        }
        p.alloc.allocate(owner)
    }

    /// Static allocation from a pool.
    ///
    /// # Errors
    /// As [`Allocator::allocate_static`], plus [`Error::UnknownPool`] and
    /// [`Error::Draining`].
    pub fn allocate_static(&mut self, pool: &str, owner: &str, address: &IpAddr) -> Result<IpAddr> {
        let p = self.pool_mut(pool)?;
        if p.alloc.by_owner(owner) == Some(*address) {
            return Ok(*address);
        }
        if p.draining {
            return Err(Error::Draining {
                pool: pool.to_owned(),
            });
        }
        p.alloc.allocate_static(owner, address)
    }

    /// Replaces a pool's allocations with persisted `(address, owner)` pairs, exactly as
    /// they were (also in a draining pool: restoring is not allocating).
    ///
    /// # Errors
    /// [`Error::UnknownPool`], or [`Error::Restore`] listing every problem; the pool is
    /// unchanged then.
    pub fn restore<O: AsRef<str>>(
        &mut self,
        pool: &str,
        entries: impl IntoIterator<Item = (IpAddr, O)>,
    ) -> Result<()> {
        let p = self.pool_mut(pool)?;
        p.alloc = Allocator::restore(p.alloc.space().clone(), entries)?;
        Ok(())
    }

    /// Releases what `owner` holds in `pool`.
    pub fn release(&mut self, pool: &str, owner: &str) -> Option<IpAddr> {
        self.pools.get_mut(pool)?.alloc.release(owner)
    }
}
