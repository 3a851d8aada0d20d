//! One pool's allocations: an owner per value, static and dynamic requests, release,
//! lookups both ways, snapshot and restore.
//!
//! Two layers over one offset-side core:
//! - [`IdAllocator`]: owners are `u32` ids the caller assigns (compact: what an
//!   embedder with its own owner table uses);
//! - [`Allocator`]: owners are names (`namespace/name`).
//!
//! # How the lowest free value is found
//! A bitmap with a bit per value (1 = free) and two summary levels (a bit per non-zero
//! word of the level below) gives the lowest free value in three word reads after a scan
//! of the top level (capacity / 2^18 words), whatever the fill and however allocations
//! are arranged.
//!
//! - **Dense pools** (at most 2^21 values, every IPv4 pool up to a /11): the bitmap
//!   covers the whole pool (at most 256 KiB plus 4 KiB of summaries), owner ids sit in a
//!   paged array indexed by offset, allocated with the pool. Every operation is O(1);
//!   nothing ever scans, and no allocation asks the system for memory.
//! - **Larger pools** (IPv6): the same bitmap and paged array cover only a prefix
//!   `0..frontier` of the pool that grows as dynamic allocation (lowest free first)
//!   reaches it; everything above the frontier is free except static allocations, kept
//!   in a B-tree. So memory follows allocations and releases, never free space. When the
//!   frontier reaches k contiguous static allocations it takes them into the prefix, once
//!   (O(k log n) for that one call, O(log n) amortized per static allocation).
//!
//! # Owner names
//! [`Allocator`] keeps one hash-table entry per owner holding the name (inline up to 30
//! bytes) and its offset: releasing or looking up an owner reads the table's control
//! group and then one entry, with no pointer to follow. The core stores each value's
//! entry index (its bucket), which gives the name back for lookups by value. The table
//! moves entries only when it has no room left (growth, or a clean-up of deleted
//! markers); the core is relinked then, O(n) amortized like the growth itself.
//!
//! # Guarantees
//! - A value has at most one owner; an owner holds at most one value per allocator.
//! - Dynamic allocation takes the lowest free value: deterministic for the same history.
//! - Asking again for the same owner returns its value, never a second one.
//! - A failed request changes nothing.
//! - Restore never moves an owner: it restores exactly what was persisted, or reports
//!   every problem and restores nothing.

use std::collections::BTreeMap;

use hashbrown::{HashTable, hash_table::Entry};

use crate::{
    error::{Error, RestoreProblem, Result},
    space::Space,
};

/// Pools up to this many values are tracked whole from the start.
const DENSE_MAX: u128 = 1 << 21;
const PAGE: usize = 1024;
const NONE: u32 = u32::MAX;

/// An array in fixed-size pages allocated on first write: growing it never copies the
/// entries (only the page directory), so no single write pays for all earlier ones.
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

    /// Every page for entries `0..n`, allocated now.
    fn filled(n: usize, none: T) -> Self {
        let mut p = Self::new(none);
        p.commit(n);
        p
    }

    /// The entry, `none` when never written.
    #[inline]
    fn raw(&self, i: usize) -> T {
        match self.pages.get(i / PAGE) {
            Some(Some(page)) => page[i % PAGE],
            _ => self.none,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Option<T> {
        let v = self.raw(i);
        (v != self.none).then_some(v)
    }

    #[inline]
    fn set(&mut self, i: usize, v: T) {
        let p = i / PAGE;
        if p >= self.pages.len() {
            self.pages.resize(p + 1, None);
        }
        let none = self.none;
        self.pages[p].get_or_insert_with(|| vec![none; PAGE].into_boxed_slice())[i % PAGE] = v;
    }

    /// Allocates (and writes) every page for entries `0..n` now, so that no later
    /// write below `n` allocates memory.
    fn commit(&mut self, n: usize) {
        let pages = n.div_ceil(PAGE);
        if pages > self.pages.len() {
            self.pages.resize(pages, None);
        }
        let none = self.none;
        for page in &mut self.pages[..pages] {
            page.get_or_insert_with(|| vec![none; PAGE].into_boxed_slice());
        }
    }

    /// Every entry that is not `none`, ascending by index.
    fn iter(&self) -> impl Iterator<Item = (usize, T)> + '_ {
        let none = self.none;
        self.pages.iter().enumerate().flat_map(move |(p, page)| {
            page.iter().flat_map(move |page| {
                page.iter()
                    .enumerate()
                    .filter(move |(_, v)| **v != none)
                    .map(move |(i, v)| (p * PAGE + i, *v))
            })
        })
    }
}

/// A bit per value (1 = free) with two summary levels: bit `i` of `l1` says word `i` of
/// `l0` is not zero, and likewise `l2` for `l1`. Bits past the vectors' ends are 0.
#[derive(Debug, Clone, Default)]
struct FreeBits {
    l0: Vec<u64>,
    l1: Vec<u64>,
    l2: Vec<u64>,
    ones: usize,
}

fn summary(words: &[u64]) -> Vec<u64> {
    let mut s = vec![0u64; words.len().div_ceil(64)];
    for (i, w) in words.iter().enumerate() {
        if *w != 0 {
            s[i / 64] |= 1 << (i % 64);
        }
    }
    s
}

impl FreeBits {
    /// `n` values, all free.
    fn all_free(n: usize) -> Self {
        let mut l0 = vec![u64::MAX; n / 64];
        if !n.is_multiple_of(64) {
            l0.push((1u64 << (n % 64)) - 1);
        }
        let l1 = summary(&l0);
        let l2 = summary(&l1);
        Self {
            l0,
            l1,
            l2,
            ones: n,
        }
    }

    /// The lowest free value.
    #[inline]
    fn first(&self) -> Option<usize> {
        let i2 = self.l2.iter().position(|&w| w != 0)?;
        let i1 = i2 * 64 + self.l2[i2].trailing_zeros() as usize;
        let i0 = i1 * 64 + self.l1[i1].trailing_zeros() as usize;
        Some(i0 * 64 + self.l0[i0].trailing_zeros() as usize)
    }

    #[inline]
    fn is_free(&self, i: usize) -> bool {
        self.l0.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// Marks `i` free.
    #[inline]
    fn set(&mut self, i: usize) {
        let (w0, b0) = (i / 64, i % 64);
        if w0 >= self.l0.len() {
            self.l0.resize(w0 + 1, 0);
            self.l1.resize(self.l0.len().div_ceil(64), 0);
            self.l2.resize(self.l1.len().div_ceil(64), 0);
        }
        let word = self.l0[w0];
        if word >> b0 & 1 == 1 {
            return;
        }
        self.ones += 1;
        self.l0[w0] = word | 1 << b0;
        if word == 0 {
            let (w1, b1) = (w0 / 64, w0 % 64);
            let was_empty = self.l1[w1] == 0;
            self.l1[w1] |= 1 << b1;
            if was_empty {
                self.l2[w1 / 64] |= 1 << (w1 % 64);
            }
        }
    }

    /// Marks `i` taken.
    #[inline]
    fn clear(&mut self, i: usize) {
        let (w0, b0) = (i / 64, i % 64);
        let Some(&word) = self.l0.get(w0) else {
            return;
        };
        if word >> b0 & 1 == 0 {
            return;
        }
        self.ones -= 1;
        let word = word & !(1 << b0);
        self.l0[w0] = word;
        if word == 0 {
            let (w1, b1) = (w0 / 64, w0 % 64);
            self.l1[w1] &= !(1 << b1);
            if self.l1[w1] == 0 {
                self.l2[w1 / 64] &= !(1 << (w1 % 64));
            }
        }
    }
}

/// Static allocations above the frontier of a large pool.
#[derive(Debug, Clone)]
enum Above {
    /// Pools of at most 2^64 values: 12 bytes a key-value pair.
    U64(BTreeMap<u64, u32>),
    U128(BTreeMap<u128, u32>),
}

impl Above {
    #[inline]
    fn get(&self, off: u128) -> Option<u32> {
        match self {
            Self::U64(m) => m.get(&(off as u64)).copied(),
            Self::U128(m) => m.get(&off).copied(),
        }
    }

    fn insert(&mut self, off: u128, id: u32) {
        match self {
            Self::U64(m) => m.insert(off as u64, id),
            Self::U128(m) => m.insert(off, id),
        };
    }

    fn remove(&mut self, off: u128) -> Option<u32> {
        match self {
            Self::U64(m) => m.remove(&(off as u64)),
            Self::U128(m) => m.remove(&off),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (u128, u32)> + '_> {
        match self {
            Self::U64(m) => Box::new(m.iter().map(|(&o, &id)| (u128::from(o), id))),
            Self::U128(m) => Box::new(m.iter().map(|(&o, &id)| (o, id))),
        }
    }
}

/// The offset side shared by both layers: which offsets are taken, and by which id.
///
/// Offsets below `frontier` are tracked by `free` and `below`; offsets from `frontier` up
/// are free unless in `above`, which never holds `frontier` itself. Dense pools start
/// with `frontier == capacity`. `free` is the authority below the frontier: a release
/// only sets the bit and leaves the old id in `below` (one random write less), so
/// `below` is read only where the bit says taken.
#[derive(Debug, Clone)]
struct Slots {
    capacity: u128,
    frontier: u128,
    free: FreeBits,
    below: Paged<u32>,
    above: Above,
    allocated: u128,
}

impl Slots {
    fn new(capacity: u128) -> Self {
        let above = if capacity <= u128::from(u64::MAX) {
            Above::U64(BTreeMap::new())
        } else {
            Above::U128(BTreeMap::new())
        };
        if capacity <= DENSE_MAX {
            let n = capacity as usize;
            Self {
                capacity,
                frontier: capacity,
                free: FreeBits::all_free(n),
                // Allocated whole now: 4 bytes a value, and no allocation ever
                // allocates memory.
                below: Paged::filled(n, NONE),
                above,
                allocated: 0,
            }
        } else {
            Self {
                capacity,
                frontier: 0,
                free: FreeBits::default(),
                below: Paged::new(NONE),
                above,
                allocated: 0,
            }
        }
    }

    #[inline]
    fn holder(&self, off: u128) -> Option<u32> {
        if off < self.frontier {
            if self.free.is_free(off as usize) {
                return None;
            }
            self.below.get(off as usize)
        } else {
            self.above.get(off)
        }
    }

    #[inline]
    fn lowest_free(&self) -> Option<u128> {
        match self.free.first() {
            Some(i) => Some(i as u128),
            None => (self.frontier < self.capacity).then_some(self.frontier),
        }
    }

    /// Gives the free offset `off` to `id`.
    #[inline]
    fn take(&mut self, off: u128, id: u32) {
        self.allocated += 1;
        if off < self.frontier {
            self.below.set(off as usize, id);
            self.free.clear(off as usize);
        } else if off == self.frontier {
            self.below.set(off as usize, id);
            self.frontier += 1;
            while let Some(h) = self.above.remove(self.frontier) {
                self.below.set(self.frontier as usize, h);
                self.frontier += 1;
            }
        } else {
            self.above.insert(off, id);
        }
    }

    /// Changes the id holding the taken offset `off`.
    fn relink(&mut self, off: u128, id: u32) {
        if off < self.frontier {
            self.below.set(off as usize, id);
        } else {
            self.above.insert(off, id);
        }
    }

    /// Frees the taken offset `off`.
    #[inline]
    fn clear(&mut self, off: u128) {
        self.allocated -= 1;
        if off < self.frontier {
            // The bit says the value is free; the stale id below is never read.
            self.free.set(off as usize);
        } else {
            self.above.remove(off);
        }
    }

    /// Every `(offset, id)`, ascending.
    fn iter(&self) -> impl Iterator<Item = (u128, u32)> + '_ {
        self.below
            .iter()
            .filter(|(o, _)| !self.free.is_free(*o))
            .map(|(o, id)| (o as u128, id))
            .chain(self.above.iter())
    }

    /// Rebuilds from `(offset, id)` pairs sorted by offset, distinct in both.
    fn from_sorted(capacity: u128, rows: &[(u128, u32)]) -> Self {
        let mut s = Self::new(capacity);
        if capacity <= DENSE_MAX {
            for &(off, id) in rows {
                s.below.set(off as usize, id);
                s.free.clear(off as usize);
            }
        } else {
            // The run 0, 1, 2... at the start is the prefix; the rest is above it,
            // built in one pass from sorted input.
            let run = rows
                .iter()
                .enumerate()
                .take_while(|(i, (off, _))| *off == *i as u128)
                .count();
            for &(off, id) in &rows[..run] {
                s.below.set(off as usize, id);
            }
            s.frontier = run as u128;
            let rest = &rows[run..];
            s.above = match s.above {
                Above::U64(_) => Above::U64(rest.iter().map(|&(o, id)| (o as u64, id)).collect()),
                Above::U128(_) => Above::U128(rest.iter().copied().collect()),
            };
        }
        s.allocated = rows.len() as u128;
        s
    }

    /// Checks a static request for `off` by the owner holding `held` (if any), without
    /// changing anything. `Ok(true)`: the owner already holds exactly `off`.
    fn check_static<V: std::fmt::Display>(
        &self,
        off: u128,
        held: Option<u128>,
        value: &V,
        holder_name: impl Fn(u32) -> String,
        owner_name: impl Fn() -> String,
        value_at: impl Fn(u128) -> String,
    ) -> Result<bool> {
        if let Some(id) = self.holder(off) {
            if held == Some(off) {
                return Ok(true);
            }
            return Err(Error::Taken {
                value: value.to_string(),
                holder: holder_name(id),
            });
        }
        if let Some(h) = held {
            return Err(Error::OwnerHoldsOther {
                owner: owner_name(),
                held: value_at(h),
                requested: value.to_string(),
            });
        }
        Ok(false)
    }
}

/// Owner id → offset: 4 bytes an id for pools of at most `u32::MAX` values, 8 for at
/// most `u64::MAX` (offsets stay below the capacity, so the type's maximum is free to
/// mark "no offset").
#[derive(Debug, Clone)]
enum Offsets {
    U32(Paged<u32>),
    U64(Paged<u64>),
    U128(Paged<u128>),
}

impl Offsets {
    fn for_capacity(capacity: u128) -> Self {
        if capacity <= u128::from(u32::MAX) {
            Self::U32(Paged::new(u32::MAX))
        } else if capacity <= u128::from(u64::MAX) {
            Self::U64(Paged::new(u64::MAX))
        } else {
            Self::U128(Paged::new(u128::MAX))
        }
    }

    #[inline]
    fn get(&self, id: u32) -> Option<u128> {
        match self {
            Self::U32(v) => v.get(id as usize).map(u128::from),
            Self::U64(v) => v.get(id as usize).map(u128::from),
            Self::U128(v) => v.get(id as usize),
        }
    }

    #[inline]
    fn set(&mut self, id: u32, off: Option<u128>) {
        match self {
            Self::U32(v) => v.set(id as usize, off.map_or(u32::MAX, |o| o as u32)),
            Self::U64(v) => v.set(id as usize, off.map_or(u64::MAX, |o| o as u64)),
            Self::U128(v) => v.set(id as usize, off.unwrap_or(u128::MAX)),
        }
    }

    fn commit(&mut self, n: usize) {
        match self {
            Self::U32(v) => v.commit(n),
            Self::U64(v) => v.commit(n),
            Self::U128(v) => v.commit(n),
        }
    }
}

/// `u32::MAX` marks a free slot in the owner tables, so it cannot be an owner.
#[inline]
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
/// | operation | dense pool (≤ 2^21 values) | larger pool (n allocated above the frontier) |
/// |---|---|---|
/// | [`IdAllocator::allocate`] (lowest free) | O(1) | O(1), see the [module docs](self) for the frontier |
/// | [`IdAllocator::allocate_static`], [`IdAllocator::release`] | O(1) | O(1) below the frontier, O(log n) above |
/// | [`IdAllocator::by_owner`] | O(1) | O(1) |
/// | [`IdAllocator::holder`] | O(1) | O(1) below, O(log n) above |
/// | [`IdAllocator::capacity`], [`IdAllocator::allocated`] | O(1), exact | O(1), exact |
#[derive(Debug, Clone)]
pub struct IdAllocator<S: Space> {
    space: S,
    slots: Slots,
    offsets: Offsets,
}

impl<S: Space> IdAllocator<S> {
    /// An allocator with nothing allocated.
    pub fn new(space: S) -> Self {
        let capacity = space.capacity();
        Self {
            slots: Slots::new(capacity),
            offsets: Offsets::for_capacity(capacity),
            space,
        }
    }

    /// The space values come from.
    pub fn space(&self) -> &S {
        &self.space
    }

    /// Number of values in the pool.
    pub fn capacity(&self) -> u128 {
        self.slots.capacity
    }

    /// Number of values allocated.
    pub fn allocated(&self) -> u128 {
        self.slots.allocated
    }

    /// Number of free values the bitmap tracks: every free value of a dense pool; the
    /// released values below the frontier of a larger one.
    pub fn holes(&self) -> usize {
        self.slots.free.ones
    }

    /// Allocates the owner table for ids `0..ids` now (4 bytes an id, 8 in pools over
    /// `u32::MAX` values), so that no later allocation for those ids allocates memory
    /// (what keeps the worst case of a fill flat). Ids stop at `u32::MAX`.
    pub fn reserve_owners(&mut self, ids: usize) {
        self.offsets.commit(ids.min(NONE as usize));
    }

    /// The value `owner` holds.
    pub fn by_owner(&self, owner: u32) -> Option<S::Value> {
        self.offsets.get(owner).map(|o| self.space.value_at(o))
    }

    /// Who holds `value`.
    pub fn holder(&self, value: &S::Value) -> Option<u32> {
        let off = self.space.offset_of(value).ok()?;
        self.slots.holder(off)
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
        let off = self.slots.lowest_free().ok_or(Error::Exhausted {
            capacity: self.slots.capacity,
        })?;
        self.slots.take(off, owner);
        self.offsets.set(owner, Some(off));
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
        let held = self.offsets.get(owner);
        let already = self.slots.check_static(
            off,
            held,
            value,
            |id| format!("#{id}"),
            || format!("#{owner}"),
            |o| self.space.value_at(o).to_string(),
        )?;
        if !already {
            self.slots.take(off, owner);
            self.offsets.set(owner, Some(off));
        }
        Ok(value.clone())
    }

    /// Releases what `owner` holds; returns it.
    pub fn release(&mut self, owner: u32) -> Option<S::Value> {
        let off = self.offsets.get(owner)?;
        self.offsets.set(owner, None);
        self.slots.clear(off);
        Some(self.space.value_at(off))
    }

    /// Every allocation as `(value, owner)`, ascending by value.
    pub fn iter(&self) -> impl Iterator<Item = (S::Value, u32)> + '_ {
        self.slots
            .iter()
            .map(|(off, id)| (self.space.value_at(off), id))
    }
}

/// Names up to this many bytes are stored inside the table entry.
const INLINE: usize = 30;

/// An owner name: inline when short (no allocation, no pointer to follow when
/// comparing), boxed otherwise.
#[derive(Debug, Clone)]
enum Name {
    Inline(u8, [u8; INLINE]),
    Heap(Box<str>),
}

impl Name {
    #[inline]
    fn new(s: &str) -> Self {
        if s.len() <= INLINE {
            let mut b = [0u8; INLINE];
            b[..s.len()].copy_from_slice(s.as_bytes());
            Self::Inline(s.len() as u8, b)
        } else {
            Self::Heap(s.into())
        }
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline(n, b) => &b[..usize::from(*n)],
            Self::Heap(s) => s.as_bytes(),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Built from a `&str` cut at its length: always valid UTF-8.
            Self::Inline(n, b) => std::str::from_utf8(&b[..usize::from(*n)]).unwrap_or(""),
            Self::Heap(s) => s,
        }
    }
}

/// One owner: its name and the offset it holds. The core knows it by the index of its
/// bucket in the owner table.
#[derive(Debug, Clone)]
struct Owner {
    name: Name,
    off: [u64; 2],
}

impl Owner {
    #[inline]
    fn new(name: Name, off: u128) -> Self {
        Self {
            name,
            off: [off as u64, (off >> 64) as u64],
        }
    }

    #[inline]
    fn off(&self) -> u128 {
        u128::from(self.off[0]) | u128::from(self.off[1]) << 64
    }
}

/// Bucket indices are the core's owner ids, so they must stay below `u32::MAX`: the
/// table never has more than 2^31 buckets.
const MAX_OWNERS: usize = 1 << 30;

#[inline]
fn hash_name(name: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(name)
}

/// Allocations in one [`Space`], owners by name.
///
/// Costs are those of [`IdAllocator`] plus one hash-table lookup of the owner name,
/// which reads a single table entry (names up to 30 bytes are stored in it).
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
    slots: Slots,
    /// The owners; the core stores each one's bucket index (stable until the table
    /// grows or rehashes, when [`Allocator::relink`] writes them all again).
    owners: HashTable<Owner>,
    /// How many times every owner was relinked (each O(n)).
    relinks: u64,
}

impl<S: Space> Allocator<S> {
    /// An allocator with nothing allocated.
    pub fn new(space: S) -> Self {
        Self {
            slots: Slots::new(space.capacity()),
            space,
            owners: HashTable::new(),
            relinks: 0,
        }
    }

    /// Reserves room for `additional` more owners and touches it, so that neither
    /// growing the owner table nor the system's first-touch page faults happen during a
    /// later allocation (what keeps the worst case of a fill flat). The memory is
    /// written now, like `vec![x; n]`. Room that cannot be counted or allocated is not
    /// reserved (allocations then grow the table as they need), never a panic.
    pub fn reserve_owners(&mut self, additional: usize) {
        let moves = additional > self.owners.capacity() - self.owners.len();
        if self
            .owners
            .try_reserve(additional, |o| hash_name(o.name.as_bytes()))
            .is_err()
        {
            return;
        }
        if moves {
            self.relink();
        }
        // Write one entry into every page of the table and take it out again: the table
        // places an entry at its hash's bucket when that bucket is free, and buckets
        // are laid out in order, 48 bytes each. An offset of `u128::MAX` is never a
        // real one (offsets are below the capacity).
        let per_page = 4096 / std::mem::size_of::<Owner>().max(1);
        for b in (0..self.owners.num_buckets()).step_by(per_page.max(1)) {
            if self.owners.capacity() == self.owners.len() {
                break;
            }
            let probe = Owner::new(Name::new(""), u128::MAX);
            let entry = self
                .owners
                .insert_unique(b as u64, probe, |o| hash_name(o.name.as_bytes()));
            let (probe, _) = entry.remove();
            debug_assert_eq!(probe.off(), u128::MAX);
        }
    }

    /// Writes every owner's bucket index into the core again, after the table moved
    /// its entries (growth or rehash): O(n), amortized O(1) per insertion like the
    /// table's own growth.
    fn relink(&mut self) {
        self.relinks += 1;
        for i in self.owners.iter_buckets() {
            if let Some(o) = self.owners.get_bucket(i) {
                self.slots.relink(o.off(), i as u32);
            }
        }
    }

    /// The space values come from.
    pub fn space(&self) -> &S {
        &self.space
    }

    /// Number of values in the pool.
    pub fn capacity(&self) -> u128 {
        self.slots.capacity
    }

    /// Number of values allocated.
    pub fn allocated(&self) -> u128 {
        self.slots.allocated
    }

    /// Number of free values the bitmap tracks: every free value of a dense pool; the
    /// released values below the frontier of a larger one.
    pub fn holes(&self) -> usize {
        self.slots.free.ones
    }

    fn find(&self, hash: u64, owner: &str) -> Option<&Owner> {
        self.owners
            .find(hash, |o| o.name.as_bytes() == owner.as_bytes())
    }

    /// The name of the owner in bucket `id`.
    fn name_of(&self, id: u32) -> &str {
        self.owners
            .get_bucket(id as usize)
            .map_or("", |o| o.name.as_str())
    }

    /// The value `owner` holds.
    pub fn by_owner(&self, owner: &str) -> Option<S::Value> {
        let o = self.find(hash_name(owner.as_bytes()), owner)?;
        Some(self.space.value_at(o.off()))
    }

    /// Who holds `value`.
    pub fn holder(&self, value: &S::Value) -> Option<&str> {
        let off = self.space.offset_of(value).ok()?;
        self.slots.holder(off).map(|id| self.name_of(id))
    }

    /// Gives the free offset `off` to a new owner.
    fn insert(&mut self, hash: u64, name: Name, off: u128) -> Result<()> {
        if self.owners.len() >= MAX_OWNERS {
            return Err(Error::Invalid(vec![netpolicy_core::FieldError::new(
                "owner",
                format!("one pool holds at most {MAX_OWNERS} owners"),
            )]));
        }
        // The table moves entries only inside an insertion that finds no room left. Make
        // the room first (growth, or a clean-up of deleted markers, which leaves room
        // for at least half the table's capacity again), relink once, and the insertion
        // itself moves nothing. Checking after the insertion instead would relink on
        // every insertion that reuses a deleted marker in a full table.
        if self.owners.capacity() == self.owners.len() {
            self.owners.reserve(1, |o| hash_name(o.name.as_bytes()));
            self.relink();
        }
        let id = self
            .owners
            .insert_unique(hash, Owner::new(name, off), |o| {
                hash_name(o.name.as_bytes())
            })
            .bucket_index();
        self.slots.take(off, id as u32);
        Ok(())
    }

    /// Gives `owner` the lowest free value, or the value it already holds.
    ///
    /// # Errors
    /// [`Error::Exhausted`] when nothing is free.
    pub fn allocate(&mut self, owner: &str) -> Result<S::Value> {
        let hash = hash_name(owner.as_bytes());
        if let Some(o) = self.find(hash, owner) {
            return Ok(self.space.value_at(o.off()));
        }
        let off = self.slots.lowest_free().ok_or(Error::Exhausted {
            capacity: self.slots.capacity,
        })?;
        self.insert(hash, Name::new(owner), off)?;
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
        let hash = hash_name(owner.as_bytes());
        let held = self.find(hash, owner).map(Owner::off);
        let already = self.slots.check_static(
            off,
            held,
            value,
            |id| self.name_of(id).to_owned(),
            || owner.to_owned(),
            |o| self.space.value_at(o).to_string(),
        )?;
        if !already {
            self.insert(hash, Name::new(owner), off)?;
        }
        Ok(value.clone())
    }

    /// Releases what `owner` holds; returns it.
    pub fn release(&mut self, owner: &str) -> Option<S::Value> {
        let entry = self
            .owners
            .find_entry(hash_name(owner.as_bytes()), |o| {
                o.name.as_bytes() == owner.as_bytes()
            })
            .ok()?;
        let (o, _) = entry.remove();
        let off = o.off();
        self.slots.clear(off);
        Some(self.space.value_at(off))
    }

    /// Releases `value`; returns who held it.
    pub fn release_value(&mut self, value: &S::Value) -> Option<String> {
        let owner = self.holder(value)?.to_owned();
        self.release(&owner);
        Some(owner)
    }

    /// Every allocation, ascending by value.
    pub fn iter(&self) -> impl Iterator<Item = (S::Value, &str)> + '_ {
        self.slots
            .iter()
            .map(|(off, id)| (self.space.value_at(off), self.name_of(id)))
    }

    /// Every allocation as `(value, owner)`, ascending by value: what to persist.
    pub fn snapshot(&self) -> Vec<(S::Value, String)> {
        self.iter().map(|(v, o)| (v, o.to_owned())).collect()
    }

    /// Rebuilds an allocator from persisted `(value, owner)` pairs, exactly as they
    /// were: no owner moves. The same pair twice counts once. Owners may be borrowed
    /// (`&str`, from objects the caller keeps) or owned (`String`, as
    /// [`Allocator::snapshot`] gives them).
    ///
    /// # Errors
    /// [`Error::Restore`] listing every problem (two owners on one value, one owner on
    /// two values, a value not in the pool); nothing is restored then.
    pub fn restore<O: AsRef<str>>(
        space: S,
        entries: impl IntoIterator<Item = (S::Value, O)>,
    ) -> Result<Self> {
        let mut problems = Vec::new();
        let mut rows: Vec<(u128, O)> = Vec::new();
        for (value, owner) in entries {
            match space.offset_of(&value) {
                Ok(off) => rows.push((off, owner)),
                Err(e) => problems.push(RestoreProblem::NotInPool {
                    owner: owner.as_ref().to_owned(),
                    value: value.to_string(),
                    reason: e.to_string(),
                }),
            }
        }
        // The rows in value order (then owner order where values repeat, which is rare),
        // as indices: sorting packed `offset << 32 | index` keys moves 16 bytes a row.
        let n = rows.len();
        let mut order: Vec<u32> = if space.capacity() <= 1 << 96 {
            let mut keys: Vec<u128> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| r.0 << 32 | i as u128)
                .collect();
            keys.sort_unstable();
            keys.into_iter().map(|k| k as u32).collect()
        } else {
            let mut idx: Vec<u32> = (0..n as u32).collect();
            idx.sort_unstable_by_key(|&i| rows[i as usize].0);
            idx
        };
        let mut i = 0;
        while i < n {
            let off = rows[order[i] as usize].0;
            let mut j = i + 1;
            while j < n && rows[order[j] as usize].0 == off {
                j += 1;
            }
            if j - i > 1 {
                order[i..j].sort_unstable_by(|&x, &y| {
                    rows[x as usize].1.as_ref().cmp(rows[y as usize].1.as_ref())
                });
            }
            i = j;
        }
        // One row per value: the same pair twice counts once; two owners of one value
        // are a problem, and only the first (by name) goes on to the owner checks.
        let mut keep = vec![false; n];
        let mut prev: Option<usize> = None;
        for &k in &order {
            let k = k as usize;
            match prev {
                Some(p) if rows[p].0 == rows[k].0 => {
                    if rows[p].1.as_ref() != rows[k].1.as_ref() {
                        problems.push(RestoreProblem::SharedValue {
                            value: space.value_at(rows[k].0).to_string(),
                            first: rows[p].1.as_ref().to_owned(),
                            second: rows[k].1.as_ref().to_owned(),
                        });
                        prev = Some(k);
                    }
                }
                _ => {
                    keep[k] = true;
                    prev = Some(k);
                }
            }
        }
        let mut a = Self::new(space);
        a.owners.reserve(n, |o| hash_name(o.name.as_bytes()));
        // The table has room for every row, so no entry moves: bucket indices are the
        // ids. Rows go in in the caller's order, which reads the names in the order they
        // were made.
        let mut ids: Vec<u32> = vec![NONE; n];
        for (k, (off, owner)) in rows.iter().enumerate() {
            if !keep[k] {
                continue;
            }
            let owner = owner.as_ref();
            let hash = hash_name(owner.as_bytes());
            match a.owners.entry(
                hash,
                |o| o.name.as_bytes() == owner.as_bytes(),
                |o| hash_name(o.name.as_bytes()),
            ) {
                Entry::Occupied(first) => {
                    let (lo, hi) = (first.get().off().min(*off), first.get().off().max(*off));
                    problems.push(RestoreProblem::OwnerTwice {
                        first: a.space.value_at(lo).to_string(),
                        second: a.space.value_at(hi).to_string(),
                        owner: owner.to_owned(),
                    });
                }
                Entry::Vacant(v) => {
                    ids[k] = v.insert(Owner::new(Name::new(owner), *off)).bucket_index() as u32;
                }
            }
        }
        let ids: Vec<(u128, u32)> = order
            .iter()
            .map(|&k| k as usize)
            .filter(|&k| ids[k] != NONE)
            .map(|k| (rows[k].0, ids[k]))
            .collect();
        if !problems.is_empty() {
            problems.sort();
            return Err(Error::Restore(problems));
        }
        a.slots = Slots::from_sorted(a.slots.capacity, &ids);
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate docs promise a 48-byte owner entry with names up to 30 bytes inside.
    #[test]
    fn an_owner_entry_is_48_bytes_with_30_bytes_of_name() {
        assert_eq!(std::mem::size_of::<Owner>(), 48);
        let n = "a".repeat(INLINE);
        assert!(matches!(Name::new(&n), Name::Inline(..)));
        assert!(matches!(Name::new(&format!("{n}b")), Name::Heap(..)));
        assert_eq!(Name::new(&n).as_str(), n);
    }

    /// A full owner table with deleted markers in it: insertions that reuse a marker
    /// must not relink every owner each time (O(n) per allocation).
    #[test]
    fn churn_in_a_full_owner_table_relinks_rarely() {
        let space =
            crate::space::AddressSpace::new(&["10.0.0.0/16".parse().unwrap()], &[], &[]).unwrap();
        let mut a = Allocator::new(space);
        // Fill the table exactly to its capacity.
        let mut i = 0u32;
        loop {
            a.allocate(&format!("ns/o{i}")).unwrap();
            i += 1;
            if a.owners.capacity() == a.owners.len() && a.owners.len() > 20_000 {
                break;
            }
        }
        let before = a.relinks;
        for round in 0..20_000u32 {
            let name = format!("ns/o{}", (round * 7919) % i);
            a.release(&name);
            a.allocate(&name).unwrap();
        }
        assert!(
            a.relinks - before <= 2,
            "{} relinks of {} owners for 20,000 release + allocate pairs",
            a.relinks - before,
            a.owners.len()
        );
        for (v, o) in a.iter() {
            assert_eq!(a.by_owner(o), Some(v));
        }
    }

    #[test]
    fn free_bits_find_the_lowest_free_value_at_any_size() {
        for n in [0usize, 1, 63, 64, 65, 4095, 4096, 4097, 262_144, 262_145] {
            let mut b = FreeBits::all_free(n);
            assert_eq!(b.first(), (n > 0).then_some(0), "{n}");
            for i in 0..n.min(200) {
                b.clear(i);
            }
            assert_eq!(b.ones, n - n.min(200));
            assert_eq!(b.first(), (n > 200).then_some(200), "{n}");
            if n > 0 {
                b.clear(n - 1);
                b.set(n - 1);
                b.set(7.min(n - 1));
                assert_eq!(b.first(), Some(7.min(n - 1)), "{n}");
            }
        }
        // A growing prefix: bits past the end are taken.
        let mut g = FreeBits::default();
        assert_eq!(g.first(), None);
        g.set(300_000);
        assert_eq!(g.first(), Some(300_000));
        g.clear(300_000);
        assert_eq!((g.first(), g.ones), (None, 0));
    }
}
