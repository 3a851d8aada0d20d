//! One pool's allocations: an owner per value, static and dynamic requests, release,
//! lookups both ways, snapshot and restore.
//!
//! # Guarantees
//! - A value has at most one owner; an owner holds at most one value per allocator.
//! - Dynamic allocation takes the lowest free value: deterministic for the same history.
//! - Asking again for the same owner returns its value, never a second one.
//! - A failed request changes nothing.
//! - Restore never moves an owner: it restores exactly what was persisted, or reports
//!   every problem and restores nothing.

use std::{collections::BTreeMap, sync::Arc};

use rustc_hash::FxHashMap;

use crate::{
    error::{Error, RestoreProblem, Result},
    runs::RunSet,
    space::Space,
};

/// Pools up to this many values keep owners in a flat array indexed by offset
/// (4 bytes a value, grown on demand); larger pools keep them in a B-tree.
const DENSE_MAX: u128 = 1 << 21;
const NONE: u32 = u32::MAX;

#[derive(Debug, Clone)]
enum Holders {
    Dense(Vec<u32>),
    Sparse(BTreeMap<u128, u32>),
}

impl Holders {
    fn get(&self, off: u128) -> Option<u32> {
        match self {
            Self::Dense(v) => v.get(off as usize).copied().filter(|&id| id != NONE),
            Self::Sparse(m) => m.get(&off).copied(),
        }
    }

    fn set(&mut self, off: u128, id: u32) {
        match self {
            Self::Dense(v) => {
                let i = off as usize;
                if i >= v.len() {
                    v.resize(i + 1, NONE);
                }
                v[i] = id;
            }
            Self::Sparse(m) => {
                m.insert(off, id);
            }
        }
    }

    fn clear(&mut self, off: u128) {
        match self {
            Self::Dense(v) => {
                if let Some(slot) = v.get_mut(off as usize) {
                    *slot = NONE;
                }
            }
            Self::Sparse(m) => {
                m.remove(&off);
            }
        }
    }
}

/// Interned owners: id → (name, offset) and name → id.
#[derive(Debug, Clone, Default)]
struct Owners {
    ids: FxHashMap<Arc<str>, u32>,
    slots: Vec<Option<(Arc<str>, u128)>>,
    free: Vec<u32>,
}

impl Owners {
    fn offset(&self, owner: &str) -> Option<u128> {
        let id = *self.ids.get(owner)?;
        self.slots[id as usize].as_ref().map(|(_, o)| *o)
    }

    fn name(&self, id: u32) -> &str {
        self.slots[id as usize].as_ref().map_or("", |(n, _)| n)
    }

    fn add(&mut self, owner: Arc<str>, off: u128) -> u32 {
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some((Arc::clone(&owner), off));
                id
            }
            None => {
                self.slots.push(Some((Arc::clone(&owner), off)));
                (self.slots.len() - 1) as u32
            }
        };
        self.ids.insert(owner, id);
        id
    }

    fn remove(&mut self, owner: &str) -> Option<u128> {
        let id = self.ids.remove(owner)?;
        let (_, off) = self.slots[id as usize].take()?;
        self.free.push(id);
        Some(off)
    }
}

/// Allocations in one [`Space`].
///
/// # Complexity
///
/// | operation | cost (n allocated, r runs of consecutive allocations) |
/// |---|---|
/// | [`Allocator::allocate`] (lowest free) | O(log r) |
/// | [`Allocator::allocate_static`], [`Allocator::release`] | O(log r + log n) |
/// | [`Allocator::by_owner`] | O(1) expected |
/// | [`Allocator::holder`] | O(1) dense, O(log n) sparse |
/// | [`Allocator::capacity`], [`Allocator::allocated`] | O(1), exact for any size |
/// | [`Allocator::restore`] | O(n log n) |
///
/// # Examples
/// ```
/// use netpolicy_ipam::{alloc::Allocator, space::AddressSpace};
///
/// let space = AddressSpace::new(&["10.135.10.192/26".parse()?], &[], &[])?;
/// let mut pool = Allocator::new(space);
/// let a = pool.allocate("team-a/web")?;
/// assert_eq!(a.to_string(), "10.135.10.193"); // lowest usable address
/// assert_eq!(pool.allocate("team-a/web")?, a); // same owner, same address
/// let b = pool.allocate_static("team-b/db", &"10.135.10.200".parse()?)?;
/// assert_eq!(pool.holder(&b), Some("team-b/db"));
/// assert_eq!((pool.capacity(), pool.allocated()), (62, 2));
/// assert_eq!(
///     pool.allocate_static("team-c/x", &b).unwrap_err().to_string(),
///     "10.135.10.200 is taken by team-b/db"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Allocator<S: Space> {
    space: S,
    used: RunSet,
    holders: Holders,
    owners: Owners,
}

impl<S: Space> Allocator<S> {
    /// An allocator with nothing allocated.
    pub fn new(space: S) -> Self {
        let holders = if space.capacity() <= DENSE_MAX {
            Holders::Dense(Vec::new())
        } else {
            Holders::Sparse(BTreeMap::new())
        };
        Self {
            space,
            used: RunSet::default(),
            holders,
            owners: Owners::default(),
        }
    }

    /// The space values come from.
    pub fn space(&self) -> &S {
        &self.space
    }

    /// Number of values in the pool.
    pub fn capacity(&self) -> u128 {
        self.space.capacity()
    }

    /// Number of values allocated.
    pub fn allocated(&self) -> u128 {
        self.used.len()
    }

    /// Number of runs of consecutive allocations (the structure's size).
    pub fn runs(&self) -> usize {
        self.used.run_count()
    }

    /// The value `owner` holds.
    pub fn by_owner(&self, owner: &str) -> Option<S::Value> {
        self.owners.offset(owner).map(|o| self.space.value_at(o))
    }

    /// Who holds `value`.
    pub fn holder(&self, value: &S::Value) -> Option<&str> {
        let off = self.space.offset_of(value).ok()?;
        self.holders.get(off).map(|id| self.owners.name(id))
    }

    fn take(&mut self, owner: &str, off: u128) {
        self.used.insert(off);
        let id = self.owners.add(owner.into(), off);
        self.holders.set(off, id);
    }

    /// Gives `owner` the lowest free value, or the value it already holds.
    ///
    /// # Errors
    /// [`Error::Exhausted`] when nothing is free.
    pub fn allocate(&mut self, owner: &str) -> Result<S::Value> {
        if let Some(off) = self.owners.offset(owner) {
            return Ok(self.space.value_at(off));
        }
        let off = self
            .used
            .first_free(self.space.capacity())
            .ok_or(Error::Exhausted {
                capacity: self.space.capacity(),
            })?;
        self.take(owner, off);
        Ok(self.space.value_at(off))
    }

    /// Gives `owner` exactly `value`. Idempotent when `owner` already holds it.
    ///
    /// # Errors
    /// [`Error::Taken`] (naming the holder), [`Error::OwnerHoldsOther`], or why the value
    /// is not in the pool ([`Error::OutsidePool`], [`Error::Excluded`],
    /// [`Error::Unusable`], [`Error::WrongFamily`]). Never a different value.
    pub fn allocate_static(&mut self, owner: &str, value: &S::Value) -> Result<S::Value> {
        let off = self.space.offset_of(value)?;
        if let Some(id) = self.holders.get(off) {
            let holder = self.owners.name(id);
            if holder == owner {
                return Ok(value.clone());
            }
            return Err(Error::Taken {
                value: value.to_string(),
                holder: holder.to_owned(),
            });
        }
        if let Some(held) = self.owners.offset(owner) {
            return Err(Error::OwnerHoldsOther {
                owner: owner.to_owned(),
                held: self.space.value_at(held).to_string(),
                requested: value.to_string(),
            });
        }
        self.take(owner, off);
        Ok(value.clone())
    }

    /// Releases what `owner` holds; returns it.
    pub fn release(&mut self, owner: &str) -> Option<S::Value> {
        let off = self.owners.remove(owner)?;
        self.used.remove(off);
        self.holders.clear(off);
        Some(self.space.value_at(off))
    }

    /// Releases `value`; returns who held it.
    pub fn release_value(&mut self, value: &S::Value) -> Option<String> {
        let off = self.space.offset_of(value).ok()?;
        let id = self.holders.get(off)?;
        let owner = self.owners.name(id).to_owned();
        self.release(&owner);
        Some(owner)
    }

    /// Every allocation, ascending by value.
    pub fn iter(&self) -> impl Iterator<Item = (S::Value, &str)> + '_ {
        self.used.iter().map(|off| {
            let owner = self.holders.get(off).map_or("", |id| self.owners.name(id));
            (self.space.value_at(off), owner)
        })
    }

    /// Every allocation as `(value, owner)`, ascending by value: what to persist.
    pub fn snapshot(&self) -> Vec<(S::Value, String)> {
        self.iter().map(|(v, o)| (v, o.to_owned())).collect()
    }

    /// Rebuilds an allocator from persisted `(value, owner)` pairs, exactly as they
    /// were: no owner moves. The same pair twice counts once.
    ///
    /// # Errors
    /// [`Error::Restore`] listing every problem (two owners on one value, one owner on
    /// two values, a value not in the pool); nothing is restored then.
    pub fn restore(
        space: S,
        entries: impl IntoIterator<Item = (S::Value, String)>,
    ) -> Result<Self> {
        let mut problems = Vec::new();
        let mut rows: Vec<(u128, Arc<str>)> = Vec::new();
        for (value, owner) in entries {
            match space.offset_of(&value) {
                Ok(off) => rows.push((off, owner.into())),
                Err(e) => problems.push(RestoreProblem::NotInPool {
                    owner,
                    value: value.to_string(),
                    reason: e.to_string(),
                }),
            }
        }
        rows.sort_unstable();
        rows.dedup();
        for w in rows.windows(2) {
            if w[0].0 == w[1].0 {
                problems.push(RestoreProblem::SharedValue {
                    value: space.value_at(w[0].0).to_string(),
                    first: w[0].1.to_string(),
                    second: w[1].1.to_string(),
                });
            }
        }
        let mut a = Self::new(space);
        for (off, owner) in &rows {
            if let Some(prev) = a.owners.offset(owner) {
                if prev != *off {
                    problems.push(RestoreProblem::OwnerTwice {
                        owner: owner.to_string(),
                        first: a.space.value_at(prev).to_string(),
                        second: a.space.value_at(*off).to_string(),
                    });
                }
                continue;
            }
            if a.holders.get(*off).is_some() {
                continue; // reported as SharedValue above
            }
            let id = a.owners.add(Arc::clone(owner), *off);
            a.holders.set(*off, id);
        }
        if !problems.is_empty() {
            problems.sort();
            return Err(Error::Restore(problems));
        }
        a.used = RunSet::from_sorted(rows.iter().map(|(o, _)| *o));
        Ok(a)
    }
}
