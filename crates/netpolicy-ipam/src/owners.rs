//! The owner table of [`crate::alloc::Allocator`]: owner name → offset, one cache line
//! per owner.
//!
//! Open addressing with linear probing, at most three quarters full, each slot a 64-byte
//! cache line holding the name's hash, the name (inline up to 30 bytes) and the offset.
//! Finding an owner reads the line its hash points at and sometimes the next ones
//! (consecutive, so fetched together): one dependent memory access where a
//! general-purpose table reads a control byte first and then the entry. Deletion shifts
//! the entries after the hole back instead of leaving a tombstone, so long churn never
//! needs a clean-up rehash (an O(n) pause in the middle of an operation). A slot's index
//! is the owner's id in the allocator's core, so the table reports every entry it moves
//! (deletion's shifts; growth moves them all).

/// Names up to this many bytes are stored inside the slot.
pub(crate) const INLINE: usize = 30;

/// An owner name: inline when short (no allocation, no pointer to follow when
/// comparing), boxed otherwise.
#[derive(Debug, Clone)]
pub(crate) enum Name {
    Inline(u8, [u8; INLINE]),
    Heap(Box<str>),
}

impl Name {
    #[inline]
    pub(crate) fn new(s: &str) -> Self {
        if s.len() <= INLINE {
            let mut b = [0u8; INLINE];
            b[..s.len()].copy_from_slice(s.as_bytes());
            Self::Inline(s.len() as u8, b)
        } else {
            Self::Heap(s.into())
        }
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline(n, b) => &b[..usize::from(*n)],
            Self::Heap(s) => s.as_bytes(),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Built from a `&str` cut at its length: always valid UTF-8.
            Self::Inline(n, b) => std::str::from_utf8(&b[..usize::from(*n)]).unwrap_or(""),
            Self::Heap(s) => s,
        }
    }
}

/// One owner: its name and the offset it holds.
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    pub(crate) name: Name,
    off: [u64; 2],
}

impl Owner {
    #[inline]
    pub(crate) fn new(name: Name, off: u128) -> Self {
        Self {
            name,
            off: [off as u64, (off >> 64) as u64],
        }
    }

    #[inline]
    pub(crate) fn off(&self) -> u128 {
        u128::from(self.off[0]) | u128::from(self.off[1]) << 64
    }
}

/// The hash the table places names by.
#[inline]
pub(crate) fn hash_name(name: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(name)
}

#[derive(Debug, Clone)]
#[repr(align(64))]
struct Slot {
    hash: u64,
    full: bool,
    owner: Owner,
}

impl Slot {
    fn empty() -> Self {
        Self {
            hash: 0,
            full: false,
            owner: Owner::new(Name::Inline(0, [0; INLINE]), 0),
        }
    }
}

/// Owner name → (slot index, offset).
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnerTable {
    /// A power of two long (or empty), never more than three quarters full.
    slots: Vec<Slot>,
    len: usize,
}

impl OwnerTable {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `additional` more owners; `true` when entries moved (every slot
    /// index changed). The slots are written now, so their memory is touched here and
    /// not by a later insertion.
    pub(crate) fn reserve(&mut self, additional: usize) -> bool {
        // At most three quarters full: a lookup reads 2.5 slots on average at that
        // load (consecutive lines, which the prefetcher fetches together), 1.5 at half.
        let need = (self.len + additional).saturating_mul(4).div_ceil(3);
        if need <= self.slots.len() {
            return false;
        }
        let slots = need.next_power_of_two().max(16);
        let old = std::mem::replace(&mut self.slots, vec![Slot::empty(); slots]);
        let mask = slots - 1;
        for s in old.into_iter().filter(|s| s.full) {
            let mut i = s.hash as usize & mask;
            while self.slots[i].full {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
        true
    }

    /// The slot holding `name` (with its `hash`).
    #[inline]
    pub(crate) fn find(&self, hash: u64, name: &[u8]) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let s = &self.slots[i];
            if !s.full {
                return None;
            }
            if s.hash == hash && s.owner.name.as_bytes() == name {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The owner in slot `i`.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&Owner> {
        self.slots.get(i).filter(|s| s.full).map(|s| &s.owner)
    }

    /// Adds an owner known to be absent: its slot, and whether entries moved (the
    /// table grew).
    #[inline]
    pub(crate) fn insert(&mut self, hash: u64, owner: Owner) -> (usize, bool) {
        let moved = self.reserve(1);
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        while self.slots[i].full {
            i = (i + 1) & mask;
        }
        self.slots[i] = Slot {
            hash,
            full: true,
            owner,
        };
        self.len += 1;
        (i, moved)
    }

    /// Takes the owner out of slot `i` (which must be full), shifting later entries of
    /// its run back so that every lookup still finds them; `moved(offset, new_slot)` is
    /// called for each entry that changes slot.
    #[inline]
    pub(crate) fn remove(&mut self, i: usize, mut moved: impl FnMut(u128, usize)) -> Owner {
        let mask = self.slots.len() - 1;
        let removed = std::mem::replace(&mut self.slots[i], Slot::empty());
        self.len -= 1;
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            if !self.slots[j].full {
                break;
            }
            // The entry at `j` may fill the hole when the hole lies between its home
            // slot and `j` (cyclically): then a lookup starting at home passes the hole.
            let home = self.slots[j].hash as usize & mask;
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots.swap(hole, j);
                moved(self.slots[hole].owner.off(), hole);
                hole = j;
            }
        }
        removed.owner
    }

    /// Every `(slot, owner)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Owner)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.full)
            .map(|(i, s)| (i, &s.owner))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_slot_is_one_cache_line_and_names_up_to_30_bytes_live_in_it() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::size_of::<Owner>(), 48);
        let n = "a".repeat(INLINE);
        assert!(matches!(Name::new(&n), Name::Inline(..)));
        assert!(matches!(Name::new(&format!("{n}b")), Name::Heap(..)));
        assert_eq!(Name::new(&n).as_str(), n);
    }

    /// Random inserts and removes against a map, with colliding hashes (a weak hash on
    /// purpose) so runs wrap around the end and deletion shifts entries back; every
    /// reported move is applied to the model of slot indices.
    #[test]
    fn lookups_survive_deletion_shifts_wraparound_and_growth() {
        let mut t = OwnerTable::default();
        let mut model: BTreeMap<String, (u128, usize)> = BTreeMap::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Hashes land in a few buckets near the end so runs wrap.
        let weak = |name: &str| (hash_name(name.as_bytes()) % 5) | 0xffff_fff8;
        for step in 0..20_000u64 {
            let name = format!("ns/owner-{}", next() % 300);
            let h = weak(&name);
            match t.find(h, name.as_bytes()) {
                Some(i) => {
                    assert_eq!(model.get(&name).map(|m| m.1), Some(i), "{name} slot");
                    let o = t.remove(i, |off, to| {
                        let (_, slot) = model
                            .values_mut()
                            .find(|(o, _)| *o == off)
                            .expect("moved entry is known");
                        *slot = to;
                    });
                    assert_eq!(o.name.as_str(), name);
                    assert_eq!(model.remove(&name).map(|m| m.0), Some(o.off()));
                }
                None => {
                    assert!(!model.contains_key(&name), "{name} lost at step {step}");
                    let (i, moved) = t.insert(h, Owner::new(Name::new(&name), u128::from(step)));
                    if moved {
                        for (slot, o) in t.iter() {
                            if let Some(m) = model.values_mut().find(|(off, _)| *off == o.off()) {
                                m.1 = slot;
                            }
                        }
                    }
                    model.insert(name, (u128::from(step), i));
                }
            }
            assert_eq!(t.len(), model.len());
        }
        for (name, (off, slot)) in &model {
            let i = t.find(weak(name), name.as_bytes()).expect("present");
            assert_eq!((i, t.get(i).map(Owner::off)), (*slot, Some(*off)));
        }
    }
}
