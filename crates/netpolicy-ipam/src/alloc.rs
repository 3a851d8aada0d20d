//! One pool's allocations: an owner per value, static and dynamic requests, release,
//! lookups both ways, snapshot and restore.
//!
//! Two layers:
//! - [`IdAllocator`]: owners are `u32` ids the caller assigns (compact: what an
//!   embedder with its own owner table uses);
//! - [`Allocator`]: owners are names (`namespace/name`), interned to ids.
//!
//! # How the lowest free value is found
//! A watermark `w`: every offset below `w` is allocated or listed in `holes` (offsets
//! released below `w`). The lowest free offset is the smallest hole, or `w` itself.
//! Allocating at `w` moves it past any allocated offsets just above it. So a pool
//! filled from the bottom keeps no per-address bookkeeping besides its owners, and the
//! structures grow with allocations and releases, never with free space.
//!
//! # Guarantees
//! - A value has at most one owner; an owner holds at most one value per allocator.
//! - Dynamic allocation takes the lowest free value: deterministic for the same history.
//! - Asking again for the same owner returns its value, never a second one.
//! - A failed request changes nothing.
//! - Restore never moves an owner: it restores exactly what was persisted, or reports
//!   every problem and restores nothing.

use std::collections::{BTreeMap, BTreeSet};

use hashbrown::HashTable;

use crate::{
    error::{Error, RestoreProblem, Result},
    space::Space,
};

/// Pools up to this many values keep owner ids in a paged array indexed by offset
/// (4 bytes a value, in pages allocated on first use, so no operation copies the whole
/// array); larger pools keep them in a B-tree.
const DENSE_MAX: u128 = 1 << 21;
const PAGE: usize = 1024;
const NONE: u32 = u32::MAX;

/// Offset → owner id.
#[derive(Debug, Clone)]
enum Holders {
    Dense(Vec<Option<Box<[u32]>>>),
    /// Pools of at most 2^64 values: 12 bytes a key-value pair.
    Sparse64(BTreeMap<u64, u32>),
    Sparse128(BTreeMap<u128, u32>),
}

impl Holders {
    fn for_capacity(capacity: u128) -> Self {
        if capacity <= DENSE_MAX {
            Self::Dense(vec![None; (capacity as usize).div_ceil(PAGE)])
        } else if capacity <= u128::from(u64::MAX) {
            Self::Sparse64(BTreeMap::new())
        } else {
            Self::Sparse128(BTreeMap::new())
        }
    }

    fn get(&self, off: u128) -> Option<u32> {
        match self {
            Self::Dense(pages) => {
                let i = off as usize;
                pages
                    .get(i / PAGE)?
                    .as_ref()
                    .map(|p| p[i % PAGE])
                    .filter(|&id| id != NONE)
            }
            Self::Sparse64(m) => m.get(&(off as u64)).copied(),
            Self::Sparse128(m) => m.get(&off).copied(),
        }
    }

    fn set(&mut self, off: u128, id: u32) {
        match self {
            Self::Dense(pages) => {
                let i = off as usize;
                if let Some(page) = pages.get_mut(i / PAGE) {
                    page.get_or_insert_with(|| vec![NONE; PAGE].into_boxed_slice())[i % PAGE] = id;
                }
            }
            Self::Sparse64(m) => {
                m.insert(off as u64, id);
            }
            Self::Sparse128(m) => {
                m.insert(off, id);
            }
        }
    }

    fn clear(&mut self, off: u128) {
        match self {
            Self::Dense(pages) => {
                let i = off as usize;
                if let Some(Some(page)) = pages.get_mut(i / PAGE) {
                    page[i % PAGE] = NONE;
                }
            }
            Self::Sparse64(m) => {
                m.remove(&(off as u64));
            }
            Self::Sparse128(m) => {
                m.remove(&off);
            }
        }
    }

    /// Every `(offset, id)`, ascending.
    fn iter(&self) -> Box<dyn Iterator<Item = (u128, u32)> + '_> {
        match self {
            Self::Dense(pages) => Box::new(pages.iter().enumerate().flat_map(|(p, page)| {
                page.iter().flat_map(move |page| {
                    page.iter()
                        .enumerate()
                        .filter(|(_, id)| **id != NONE)
                        .map(move |(i, id)| ((p * PAGE + i) as u128, *id))
                })
            })),
            Self::Sparse64(m) => Box::new(m.iter().map(|(&o, &id)| (u128::from(o), id))),
            Self::Sparse128(m) => Box::new(m.iter().map(|(&o, &id)| (o, id))),
        }
    }
}

/// An array indexed by owner id, in fixed-size pages: growing it never copies the
/// entries (only the page directory), so no single allocation pays for all earlier
/// ones.
#[derive(Debug, Clone)]
struct Paged<T: Copy> {
    pages: Vec<Option<Box<[T]>>>,
    none: T,
}

impl<T: Copy + PartialEq> Paged<T> {
    fn new(none: T) -> Self {
        Self {
            pages: Vec::new(),
            none,
        }
    }

    fn get(&self, i: usize) -> Option<T> {
        let v = self.pages.get(i / PAGE)?.as_ref()?[i % PAGE];
        (v != self.none).then_some(v)
    }

    fn set(&mut self, i: usize, v: T) {
        let p = i / PAGE;
        if p >= self.pages.len() {
            self.pages.resize(p + 1, None);
        }
        let none = self.none;
        self.pages[p].get_or_insert_with(|| vec![none; PAGE].into_boxed_slice())[i % PAGE] = v;
    }

    fn reserve(&mut self, n: usize) {
        self.pages.reserve(n.div_ceil(PAGE));
    }
}

/// Owner id → offset, 8 bytes an id for pools of at most 2^64 values.
#[derive(Debug, Clone)]
enum Offsets {
    U64(Paged<u64>),
    U128(Paged<u128>),
}

impl Offsets {
    fn get(&self, id: u32) -> Option<u128> {
        match self {
            Self::U64(v) => v.get(id as usize).map(u128::from),
            Self::U128(v) => v.get(id as usize),
        }
    }

    fn set(&mut self, id: u32, off: Option<u128>) {
        match self {
            Self::U64(v) => v.set(id as usize, off.map_or(u64::MAX, |o| o as u64)),
            Self::U128(v) => v.set(id as usize, off.unwrap_or(u128::MAX)),
        }
    }

    fn reserve(&mut self, n: usize) {
        match self {
            Self::U64(v) => v.reserve(n),
            Self::U128(v) => v.reserve(n),
        }
    }
}

/// Free offsets below the watermark. Dense pools use a three-level bitmap (a bit per
/// value, plus summary bits of non-empty words): the smallest hole in O(1) and at most
/// capacity / 8 bytes. Larger pools use a B-tree of the holes themselves.
#[derive(Debug, Clone)]
enum Holes {
    Bits {
        l0: Vec<u64>,
        l1: Vec<u64>,
        l2: Vec<u64>,
        len: usize,
    },
    /// Pools of at most 2^64 values: 8-byte keys.
    Tree64(BTreeSet<u64>),
    Tree128(BTreeSet<u128>),
}

impl Holes {
    fn for_capacity(capacity: u128) -> Self {
        if capacity <= DENSE_MAX {
            let w0 = (capacity as usize).div_ceil(64).max(1);
            let w1 = w0.div_ceil(64);
            Self::Bits {
                l0: vec![0; w0],
                l1: vec![0; w1],
                l2: vec![0; w1.div_ceil(64)],
                len: 0,
            }
        } else if capacity <= u128::from(u64::MAX) {
            Self::Tree64(BTreeSet::new())
        } else {
            Self::Tree128(BTreeSet::new())
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Bits { len, .. } => *len,
            Self::Tree64(t) => t.len(),
            Self::Tree128(t) => t.len(),
        }
    }

    fn first(&self) -> Option<u128> {
        match self {
            Self::Bits { l0, l1, l2, .. } => {
                let i2 = l2.iter().position(|&w| w != 0)?;
                let i1 = i2 * 64 + l2[i2].trailing_zeros() as usize;
                let i0 = i1 * 64 + l1[i1].trailing_zeros() as usize;
                Some((i0 * 64 + l0[i0].trailing_zeros() as usize) as u128)
            }
            Self::Tree64(t) => t.first().map(|&x| u128::from(x)),
            Self::Tree128(t) => t.first().copied(),
        }
    }

    fn insert(&mut self, x: u128) {
        match self {
            Self::Bits { l0, l1, l2, len } => {
                let i = x as usize;
                let (w0, b0) = (i / 64, i % 64);
                if l0[w0] >> b0 & 1 == 1 {
                    return;
                }
                *len += 1;
                let was_empty = l0[w0] == 0;
                l0[w0] |= 1 << b0;
                if was_empty {
                    let (w1, b1) = (w0 / 64, w0 % 64);
                    let was_empty = l1[w1] == 0;
                    l1[w1] |= 1 << b1;
                    if was_empty {
                        l2[w1 / 64] |= 1 << (w1 % 64);
                    }
                }
            }
            Self::Tree64(t) => {
                t.insert(x as u64);
            }
            Self::Tree128(t) => {
                t.insert(x);
            }
        }
    }

    fn remove(&mut self, x: u128) {
        match self {
            Self::Bits { l0, l1, l2, len } => {
                let i = x as usize;
                let (w0, b0) = (i / 64, i % 64);
                if l0[w0] >> b0 & 1 == 0 {
                    return;
                }
                *len -= 1;
                l0[w0] &= !(1 << b0);
                if l0[w0] == 0 {
                    let (w1, b1) = (w0 / 64, w0 % 64);
                    l1[w1] &= !(1 << b1);
                    if l1[w1] == 0 {
                        l2[w1 / 64] &= !(1 << (w1 % 64));
                    }
                }
            }
            Self::Tree64(t) => {
                t.remove(&(x as u64));
            }
            Self::Tree128(t) => {
                t.remove(&x);
            }
        }
    }
}

/// `u32::MAX` marks a free slot in the owner tables, so it cannot be an owner.
fn check_owner(owner: u32) -> Result<()> {
    if owner == NONE {
        return Err(Error::Invalid(vec![netpolicy_core::FieldError::new(
            "owner",
            "owner id 4294967295 (u32::MAX) is reserved; use a smaller id",
        )]));
    }
    Ok(())
}

/// Allocations in one [`Space`], owners being `u32` ids chosen by the caller (small,
/// dense ids keep the owner table small: it is indexed by id; `u32::MAX` is reserved).
///
/// # Complexity
///
/// | operation | cost (n allocated, h holes released below the watermark) |
/// |---|---|
/// | [`IdAllocator::allocate`] (lowest free) | O(log h), or O(1) dense / O(log n) sparse at the watermark |
/// | [`IdAllocator::allocate_static`], [`IdAllocator::release`] | O(log n + log h) sparse, O(log h) dense |
/// | [`IdAllocator::by_owner`] | O(1) |
/// | [`IdAllocator::holder`] | O(1) dense, O(log n) sparse |
/// | [`IdAllocator::capacity`], [`IdAllocator::allocated`] | O(1), exact for any size |
///
/// A dynamic allocation that lands right below k contiguous *static* allocations steps
/// over them once (O(k)); that is the only step that is not logarithmic.
#[derive(Debug, Clone)]
pub struct IdAllocator<S: Space> {
    space: S,
    holders: Holders,
    offsets: Offsets,
    holes: Holes,
    watermark: u128,
    allocated: u128,
}

impl<S: Space> IdAllocator<S> {
    /// An allocator with nothing allocated.
    pub fn new(space: S) -> Self {
        let capacity = space.capacity();
        Self {
            holders: Holders::for_capacity(capacity),
            offsets: if capacity <= u128::from(u64::MAX) {
                Offsets::U64(Paged::new(u64::MAX))
            } else {
                Offsets::U128(Paged::new(u128::MAX))
            },
            holes: Holes::for_capacity(capacity),
            space,
            watermark: 0,
            allocated: 0,
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
        self.allocated
    }

    /// Number of free offsets remembered below the watermark (released values).
    pub fn holes(&self) -> usize {
        self.holes.len()
    }

    /// Reserves room for owner ids up to `additional` more.
    pub fn reserve_owners(&mut self, additional: usize) {
        self.offsets.reserve(additional);
    }

    /// The value `owner` holds.
    pub fn by_owner(&self, owner: u32) -> Option<S::Value> {
        self.offsets.get(owner).map(|o| self.space.value_at(o))
    }

    /// Who holds `value`.
    pub fn holder(&self, value: &S::Value) -> Option<u32> {
        let off = self.space.offset_of(value).ok()?;
        self.holders.get(off)
    }

    fn lowest_free(&self) -> Option<u128> {
        let off = self.holes.first().unwrap_or(self.watermark);
        (off < self.space.capacity()).then_some(off)
    }

    fn take(&mut self, owner: u32, off: u128) {
        self.holders.set(off, owner);
        self.offsets.set(owner, Some(off));
        self.allocated += 1;
        if off < self.watermark {
            self.holes.remove(off);
        } else if off == self.watermark {
            let cap = self.space.capacity();
            let mut w = off + 1;
            while w < cap && self.holders.get(w).is_some() {
                w += 1;
            }
            self.watermark = w;
        }
    }

    /// Gives `owner` the lowest free value, or the value it already holds.
    ///
    /// # Errors
    /// [`Error::Exhausted`] when nothing is free.
    pub fn allocate(&mut self, owner: u32) -> Result<S::Value> {
        check_owner(owner)?;
        if let Some(off) = self.offsets.get(owner) {
            return Ok(self.space.value_at(off));
        }
        let off = self.lowest_free().ok_or(Error::Exhausted {
            capacity: self.space.capacity(),
        })?;
        self.take(owner, off);
        Ok(self.space.value_at(off))
    }

    /// Gives `owner` exactly `value`. Idempotent when `owner` already holds it.
    ///
    /// # Errors
    /// [`Error::Taken`] (holder as `#id`), [`Error::OwnerHoldsOther`], or why the value
    /// is not in the pool. Never a different value.
    pub fn allocate_static(&mut self, owner: u32, value: &S::Value) -> Result<S::Value> {
        check_owner(owner)?;
        let off = self.space.offset_of(value)?;
        self.check_static(
            owner,
            off,
            value,
            |id| format!("#{id}"),
            |id| format!("#{id}"),
        )?;
        if self.holders.get(off) != Some(owner) {
            self.take(owner, off);
        }
        Ok(value.clone())
    }

    /// Checks a static request without changing anything.
    fn check_static(
        &self,
        owner: u32,
        off: u128,
        value: &S::Value,
        holder_name: impl Fn(u32) -> String,
        owner_name: impl Fn(u32) -> String,
    ) -> Result<()> {
        if let Some(id) = self.holders.get(off) {
            if id == owner {
                return Ok(());
            }
            return Err(Error::Taken {
                value: value.to_string(),
                holder: holder_name(id),
            });
        }
        if let Some(held) = self.offsets.get(owner) {
            return Err(Error::OwnerHoldsOther {
                owner: owner_name(owner),
                held: self.space.value_at(held).to_string(),
                requested: value.to_string(),
            });
        }
        Ok(())
    }

    /// Releases what `owner` holds; returns it.
    pub fn release(&mut self, owner: u32) -> Option<S::Value> {
        let off = self.offsets.get(owner)?;
        self.offsets.set(owner, None);
        self.holders.clear(off);
        self.allocated -= 1;
        if off < self.watermark {
            self.holes.insert(off);
        }
        Some(self.space.value_at(off))
    }

    /// Every allocation as `(value, owner)`, ascending by value.
    pub fn iter(&self) -> impl Iterator<Item = (S::Value, u32)> + '_ {
        self.holders
            .iter()
            .map(|(off, id)| (self.space.value_at(off), id))
    }

    /// Rebuilds from `(offset, owner)` pairs sorted by offset, distinct in both.
    fn from_sorted(space: S, rows: &[(u128, u32)]) -> Self {
        let mut a = Self::new(space);
        // B-trees are built in one pass from sorted input instead of key by key.
        match &mut a.holders {
            Holders::Sparse64(m) => *m = rows.iter().map(|&(o, id)| (o as u64, id)).collect(),
            Holders::Sparse128(m) => *m = rows.iter().copied().collect(),
            Holders::Dense(_) => {
                for &(off, id) in rows {
                    a.holders.set(off, id);
                }
            }
        }
        let mut w = 0u128;
        for &(off, id) in rows {
            a.offsets.set(id, Some(off));
            if off == w {
                w += 1;
            }
        }
        a.allocated = rows.len() as u128;
        a.watermark = w;
        a
    }
}

/// Interned owner names: id → name in a vector, name → id in a hash table that stores
/// only the ids (each name is kept once).
#[derive(Debug, Clone, Default)]
struct Names {
    table: HashTable<u32>,
    names: Vec<Option<Box<str>>>,
    free: Vec<u32>,
}

fn hash_name(name: &str) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(name)
}

impl Names {
    fn id(&self, owner: &str) -> Option<u32> {
        self.find(hash_name(owner), owner)
    }

    fn find(&self, hash: u64, owner: &str) -> Option<u32> {
        self.table
            .find(hash, |&id| {
                self.names[id as usize].as_deref() == Some(owner)
            })
            .copied()
    }

    fn name(&self, id: u32) -> &str {
        self.names
            .get(id as usize)
            .and_then(Option::as_deref)
            .unwrap_or("")
    }

    fn reserve(&mut self, n: usize) {
        let names = &self.names;
        self.table.reserve(n, |&id| {
            hash_name(names[id as usize].as_deref().unwrap_or(""))
        });
        self.names.reserve(n);
    }

    fn intern(&mut self, owner: &str) -> u32 {
        let hash = hash_name(owner);
        match self.find(hash, owner) {
            Some(id) => id,
            None => self.insert_new(hash, owner),
        }
    }

    /// Adds a name known to be absent, with its hash.
    fn insert_new(&mut self, hash: u64, owner: &str) -> u32 {
        self.insert_new_boxed(hash, owner.into())
    }

    /// [`Names::insert_new`] taking the name's allocation.
    fn insert_new_boxed(&mut self, hash: u64, owner: Box<str>) -> u32 {
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = Some(owner);
                id
            }
            None => {
                self.names.push(Some(owner));
                (self.names.len() - 1) as u32
            }
        };
        let names = &self.names;
        self.table.insert_unique(hash, id, |&i| {
            hash_name(names[i as usize].as_deref().unwrap_or(""))
        });
        id
    }

    fn forget(&mut self, owner: &str) -> Option<u32> {
        let names = &self.names;
        let entry = self
            .table
            .find_entry(hash_name(owner), |&id| {
                names[id as usize].as_deref() == Some(owner)
            })
            .ok()?;
        let (id, _) = entry.remove();
        self.names[id as usize] = None;
        self.free.push(id);
        Some(id)
    }
}

/// Allocations in one [`Space`], owners by name.
///
/// Costs are those of [`IdAllocator`] plus one hash lookup of the owner name.
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
    inner: IdAllocator<S>,
    names: Names,
}

impl<S: Space> Allocator<S> {
    /// An allocator with nothing allocated.
    pub fn new(space: S) -> Self {
        Self {
            inner: IdAllocator::new(space),
            names: Names::default(),
        }
    }

    /// Reserves room for `additional` more owners, so that growing the owner tables
    /// happens now and not during a later allocation.
    pub fn reserve_owners(&mut self, additional: usize) {
        self.inner.reserve_owners(additional);
        self.names.reserve(additional);
    }

    /// The space values come from.
    pub fn space(&self) -> &S {
        self.inner.space()
    }

    /// Number of values in the pool.
    pub fn capacity(&self) -> u128 {
        self.inner.capacity()
    }

    /// Number of values allocated.
    pub fn allocated(&self) -> u128 {
        self.inner.allocated()
    }

    /// Number of released values remembered below the watermark.
    pub fn holes(&self) -> usize {
        self.inner.holes()
    }

    /// The value `owner` holds.
    pub fn by_owner(&self, owner: &str) -> Option<S::Value> {
        self.inner.by_owner(self.names.id(owner)?)
    }

    /// Who holds `value`.
    pub fn holder(&self, value: &S::Value) -> Option<&str> {
        self.inner.holder(value).map(|id| self.names.name(id))
    }

    /// Gives `owner` the lowest free value, or the value it already holds.
    ///
    /// # Errors
    /// [`Error::Exhausted`] when nothing is free.
    pub fn allocate(&mut self, owner: &str) -> Result<S::Value> {
        // A name is interned exactly while it holds a value.
        let hash = hash_name(owner);
        if let Some(id) = self.names.find(hash, owner) {
            return self.inner.allocate(id);
        }
        if self.inner.lowest_free().is_none() {
            return Err(Error::Exhausted {
                capacity: self.capacity(),
            });
        }
        let id = self.names.insert_new(hash, owner);
        self.inner.allocate(id)
    }

    /// Gives `owner` exactly `value`. Idempotent when `owner` already holds it.
    ///
    /// # Errors
    /// [`Error::Taken`] (naming the holder), [`Error::OwnerHoldsOther`], or why the value
    /// is not in the pool ([`Error::OutsidePool`], [`Error::Excluded`],
    /// [`Error::Unusable`], [`Error::WrongFamily`]). Never a different value.
    pub fn allocate_static(&mut self, owner: &str, value: &S::Value) -> Result<S::Value> {
        let off = self.inner.space.offset_of(value)?;
        let id = self.names.id(owner).unwrap_or(NONE);
        self.inner.check_static(
            id,
            off,
            value,
            |h| self.names.name(h).to_owned(),
            |_| owner.to_owned(),
        )?;
        let id = self.names.intern(owner);
        self.inner.allocate_static(id, value)
    }

    /// Releases what `owner` holds; returns it.
    pub fn release(&mut self, owner: &str) -> Option<S::Value> {
        let id = self.names.forget(owner)?;
        self.inner.release(id)
    }

    /// Releases `value`; returns who held it.
    pub fn release_value(&mut self, value: &S::Value) -> Option<String> {
        let owner = self.holder(value)?.to_owned();
        self.release(&owner);
        Some(owner)
    }

    /// Every allocation, ascending by value.
    pub fn iter(&self) -> impl Iterator<Item = (S::Value, &str)> + '_ {
        self.inner.iter().map(|(v, id)| (v, self.names.name(id)))
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
        let mut rows: Vec<(u128, String)> = Vec::new();
        for (value, owner) in entries {
            match space.offset_of(&value) {
                Ok(off) => rows.push((off, owner)),
                Err(e) => problems.push(RestoreProblem::NotInPool {
                    owner,
                    value: value.to_string(),
                    reason: e.to_string(),
                }),
            }
        }
        rows.sort_unstable();
        rows.dedup();
        let mut names = Names::default();
        names.reserve(rows.len());
        let mut ids: Vec<(u128, u32)> = Vec::with_capacity(rows.len());
        // Ids are handed out 0, 1, 2... here, so the first value of each is a Vec.
        let mut first_value: Vec<u128> = Vec::with_capacity(rows.len());
        for w in rows.windows(2) {
            if w[0].0 == w[1].0 {
                problems.push(RestoreProblem::SharedValue {
                    value: space.value_at(w[0].0).to_string(),
                    first: w[0].1.clone(),
                    second: w[1].1.clone(),
                });
            }
        }
        let mut prev_off = None;
        // By value: each name's allocation moves into the table, no copy.
        for (off, owner) in rows {
            if prev_off.replace(off) == Some(off) {
                continue; // reported as SharedValue above
            }
            let hash = hash_name(&owner);
            let (id, fresh) = match names.find(hash, &owner) {
                Some(id) => (id, false),
                None => (names.insert_new_boxed(hash, owner.into_boxed_str()), true),
            };
            if !fresh {
                if let Some(prev) = first_value.get(id as usize) {
                    problems.push(RestoreProblem::OwnerTwice {
                        owner: names.name(id).to_owned(),
                        first: space.value_at(*prev).to_string(),
                        second: space.value_at(off).to_string(),
                    });
                }
                continue;
            }
            first_value.push(off);
            ids.push((off, id));
        }
        if !problems.is_empty() {
            problems.sort();
            return Err(Error::Restore(problems));
        }
        Ok(Self {
            inner: IdAllocator::from_sorted(space, &ids),
            names,
        })
    }
}
