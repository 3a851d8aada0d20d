//! Address spaces: what an allocator hands out, numbered by dense offsets `0..capacity`.
//!
//! - [`AddressSpace`]: the usable addresses of CIDRs and start-end ranges, minus
//!   exclusions (the architecture's (docs/architecture.md) usable-address rules).
//! - [`PrefixSpace`]: the child prefixes of one length inside a parent prefix.
//!
//! All arithmetic is `u128` for both families; nothing is counted by iterating.

use std::{fmt, net::IpAddr, str::FromStr};

use ipnetwork::IpNetwork;
use netpolicy_core::{
    FieldError,
    model::{IpFamily, network_prefix},
};

use crate::error::{Error, Result};

/// Something an allocator hands out, numbered `0..capacity`.
pub trait Space {
    /// What is handed out: an address, a prefix.
    type Value: Clone + Ord + fmt::Display + fmt::Debug;

    /// Number of values.
    fn capacity(&self) -> u128;

    /// The offset of a value, or why it is not in the space.
    ///
    /// # Errors
    /// [`Error::OutsidePool`], [`Error::Excluded`], [`Error::Unusable`] or
    /// [`Error::WrongFamily`].
    fn offset_of(&self, value: &Self::Value) -> Result<u128>;

    /// The value at `offset`. Meaningful for `offset < capacity`; other offsets give an
    /// unspecified value of the right type, never a panic.
    fn value_at(&self, offset: u128) -> Self::Value;
}

fn to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(family: IpFamily, x: u128) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4((x as u32).into()),
        IpFamily::V6 => IpAddr::V6(x.into()),
    }
}

/// A start-end range, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRange {
    /// First address.
    pub start: IpAddr,
    /// Last address (inclusive).
    pub end: IpAddr,
}

/// One interval of usable addresses with the offset of its first address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interval {
    start: u128,
    end: u128,
    base: u128,
}

/// The usable addresses of a pool.
///
/// Usable addresses (docs/architecture.md): an IPv4 prefix shorter than /31 loses its network and
/// broadcast addresses; /31 and /32 are whole; an IPv6 prefix shorter than /127 loses
/// only its first (subnet-router anycast) address; a start-end range is whole.
/// Exclusions remove addresses or prefixes. Overlapping entries are merged.
///
/// # Examples
/// ```
/// use netpolicy_ipam::space::{AddressSpace, Space};
///
/// let pool = AddressSpace::new(&["10.135.10.192/26".parse()?], &[], &[])?;
/// assert_eq!(pool.capacity(), 62);
/// assert_eq!(pool.value_at(0).to_string(), "10.135.10.193");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressSpace {
    family: IpFamily,
    intervals: Vec<Interval>,
    /// Everything the pool names before exclusions and usable rules, merged.
    outer: Vec<(u128, u128)>,
    excluded: Vec<(u128, u128)>,
    capacity: u128,
    size: Count,
}

/// An exact number of addresses, from 0 up to 2^128 (every IPv6 address), one more
/// than `u128` holds. Displays in decimal; [`Count::get`] gives it as a `u128` when it
/// fits.
///
/// # Examples
/// ```
/// use netpolicy_ipam::space::{AddressSpace, Space};
///
/// let all = AddressSpace::parse("spec", &[], &[("::".into(), "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".into())], &[])?;
/// assert_eq!(all.size().to_string(), "340282366920938463463374607431768211456");
/// assert_eq!(all.size().get(), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Count(
    /// `None` for zero, `Some(n - 1)` for `n`.
    Option<u128>,
);

impl Count {
    /// `n`.
    pub fn new(n: u128) -> Self {
        Self(n.checked_sub(1))
    }

    /// The count as a `u128`; `None` for 2^128.
    pub fn get(self) -> Option<u128> {
        match self.0 {
            None => Some(0),
            Some(m) => m.checked_add(1),
        }
    }

    /// The count plus `n`, `None` past 2^128.
    pub fn checked_add(self, n: u128) -> Option<Self> {
        match (self.0, n.checked_sub(1)) {
            (x, None) => Some(Self(x)),
            (None, y) => Some(Self(y)),
            (Some(a), Some(b)) => a.checked_add(b)?.checked_add(1).map(|m| Self(Some(m))),
        }
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("340282366920938463463374607431768211456"),
        }
    }
}

fn merge_intervals(mut v: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    v.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some((_, le)) if le.checked_add(1).is_none_or(|n| s <= n) => *le = (*le).max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn subtract(set: &[(u128, u128)], minus: &[(u128, u128)]) -> Vec<(u128, u128)> {
    let mut out = Vec::new();
    for &(s, e) in set {
        let mut cur = s;
        let mut done = false;
        for &(ms, me) in minus {
            if me < cur || ms > e {
                continue;
            }
            if ms > cur {
                out.push((cur, ms - 1));
            }
            match me.checked_add(1) {
                Some(n) if n <= e => cur = n,
                _ => {
                    done = true;
                    break;
                }
            }
        }
        if !done && cur <= e {
            out.push((cur, e));
        }
    }
    out
}

fn net_bounds(n: IpNetwork) -> (u128, u128) {
    let bits = if n.is_ipv4() { 32 } else { 128 };
    let host = bits - u32::from(n.prefix());
    let start = to_u128(n.network());
    let size_minus_one = if host >= 128 {
        u128::MAX
    } else {
        (1u128 << host) - 1
    };
    (start, start + size_minus_one)
}

fn contains(list: &[(u128, u128)], x: u128) -> bool {
    let i = list.partition_point(|&(s, _)| s <= x);
    i > 0 && x <= list[i - 1].1
}

impl AddressSpace {
    /// Builds a pool. Field errors name `cidrs[i]`, `ranges[i]` or `exclude[i]` (the
    /// caller prefixes them with the object's path).
    ///
    /// # Errors
    /// [`Error::Invalid`]: an empty pool, mixed families, a CIDR with host bits set, a
    /// range that runs backwards.
    pub fn new(
        cidrs: &[IpNetwork],
        ranges: &[AddressRange],
        exclude: &[IpNetwork],
    ) -> Result<Self> {
        Self::build(
            &cidrs.iter().copied().enumerate().collect::<Vec<_>>(),
            &ranges.iter().copied().enumerate().collect::<Vec<_>>(),
            &exclude.iter().copied().enumerate().collect::<Vec<_>>(),
        )
    }

    /// [`AddressSpace::new`] over entries that keep their index in the user's lists.
    fn build(
        cidrs: &[(usize, IpNetwork)],
        ranges: &[(usize, AddressRange)],
        exclude: &[(usize, IpNetwork)],
    ) -> Result<Self> {
        let mut problems = Vec::new();
        let mut family: Option<(IpFamily, String)> = None;
        let mut check_family =
            |f: IpFamily, path: String, problems: &mut Vec<FieldError>| match &family {
                None => family = Some((f, path)),
                Some((g, first)) if *g != f => problems.push(FieldError::new(
                    path,
                    format!("is {f} but {first} is {g}; a pool holds one family"),
                )),
                Some(_) => {}
            };
        let mut usable = Vec::new();
        let mut outer = Vec::new();
        for &(i, ref n) in cidrs {
            let path = format!("cidrs[{i}]");
            check_family(IpFamily::of_net(*n), path.clone(), &mut problems);
            if let Err(m) = network_prefix(*n) {
                problems.push(FieldError::new(path, m));
                continue;
            }
            let (s, e) = net_bounds(*n);
            outer.push((s, e));
            let (us, ue) = match (n.is_ipv4(), n.prefix()) {
                (true, p) if p < 31 => (s + 1, e - 1),
                (false, p) if p < 127 => (s + 1, e),
                _ => (s, e),
            };
            usable.push((us, ue));
        }
        for &(i, ref r) in ranges {
            let path = format!("ranges[{i}]");
            let (fs, fe) = (IpFamily::of(r.start), IpFamily::of(r.end));
            check_family(fs, format!("{path}.start"), &mut problems);
            if fs != fe {
                problems.push(FieldError::new(
                    format!("{path}.end"),
                    format!("{} is {fe} but start {} is {fs}", r.end, r.start),
                ));
                continue;
            }
            let (s, e) = (to_u128(r.start), to_u128(r.end));
            if s > e {
                problems.push(FieldError::new(
                    path,
                    format!("range {} - {} runs backwards", r.start, r.end),
                ));
                continue;
            }
            outer.push((s, e));
            usable.push((s, e));
        }
        let mut excluded = Vec::new();
        for &(i, ref n) in exclude {
            if let Some((f, first)) = &family
                && IpFamily::of_net(*n) != *f
            {
                problems.push(FieldError::new(
                    format!("exclude[{i}]"),
                    format!("{n} is {} but {first} is {f}", IpFamily::of_net(*n)),
                ));
                continue;
            }
            match network_prefix(*n) {
                Ok(n) => excluded.push(net_bounds(n)),
                Err(m) => problems.push(FieldError::new(format!("exclude[{i}]"), m)),
            }
        }
        let Some((family, _)) = family else {
            problems.push(FieldError::new(
                "cidrs",
                "a pool needs at least one CIDR or range",
            ));
            return Err(Error::Invalid(problems));
        };
        if !problems.is_empty() {
            return Err(Error::Invalid(problems));
        }
        let excluded = merge_intervals(excluded);
        let usable = subtract(&merge_intervals(usable), &excluded);
        let mut capacity = 0u128;
        let mut size = Count::default();
        let mut intervals = Vec::with_capacity(usable.len());
        for (s, e) in usable {
            intervals.push(Interval {
                start: s,
                end: e,
                base: capacity,
            });
            // Every IPv6 address is 2^128, one more than u128 holds: the exact number is
            // `size`; the allocator's capacity saturates (its last value is never
            // handed out, which no pool will notice).
            capacity = capacity.saturating_add((e - s).saturating_add(1));
            size = Count((e - s).checked_add(size.0.map_or(0, |m| m + 1)));
        }
        Ok(Self {
            family,
            intervals,
            outer: merge_intervals(outer),
            excluded,
            capacity,
            size,
        })
    }

    /// Parses `cidrs`, `ranges` (`start`-`end` text pairs) and `exclude` entries (an
    /// address or a prefix) and builds the pool; every problem is reported with `path`
    /// and the field (`spec.cidrs[1]`).
    ///
    /// # Errors
    /// [`Error::Invalid`] listing every problem.
    pub fn parse(
        path: &str,
        cidrs: &[String],
        ranges: &[(String, String)],
        exclude: &[String],
    ) -> Result<Self> {
        let mut problems = Vec::new();
        let mut nets = Vec::new();
        for (i, c) in cidrs.iter().enumerate() {
            match IpNetwork::from_str(c.trim()) {
                Ok(n) if c.contains('/') => nets.push((i, n)),
                _ => problems.push(FieldError::new(
                    format!("{path}.cidrs[{i}]"),
                    format!("{c:?} is not a prefix like 10.135.10.192/26 or fd00:10::/64"),
                )),
            }
        }
        let mut rs = Vec::new();
        for (i, (s, e)) in ranges.iter().enumerate() {
            let parse = |x: &str, f: &str, problems: &mut Vec<FieldError>| {
                IpAddr::from_str(x.trim())
                    .map_err(|_| {
                        problems.push(FieldError::new(
                            format!("{path}.ranges[{i}].{f}"),
                            format!("{x:?} is not an IPv4 or IPv6 address"),
                        ))
                    })
                    .ok()
            };
            if let (Some(start), Some(end)) = (
                parse(s, "start", &mut problems),
                parse(e, "end", &mut problems),
            ) {
                rs.push((i, AddressRange { start, end }));
            }
        }
        let mut ex = Vec::new();
        for (i, x) in exclude.iter().enumerate() {
            match IpNetwork::from_str(x.trim()) {
                Ok(n) => ex.push((i, n)),
                Err(_) => problems.push(FieldError::new(
                    format!("{path}.exclude[{i}]"),
                    format!("{x:?} is not an address or a prefix"),
                )),
            }
        }
        // An exclusion that touches no CIDR and no range excludes nothing: a mistyped
        // reservation would go unnoticed, and the address it meant handed out.
        for (i, n) in &ex {
            let in_cidr = nets
                .iter()
                .any(|(_, c)| c.contains(n.network()) || n.contains(c.network()));
            let in_range = rs.iter().any(|(_, r)| {
                n.contains(r.start)
                    || (n.is_ipv4() == r.start.is_ipv4()
                        && r.start <= n.network()
                        && n.network() <= r.end)
            });
            if !in_cidr && !in_range {
                problems.push(FieldError::new(
                    format!("{path}.exclude[{i}]"),
                    format!(
                        "{n} is outside every CIDR and range of this pool: it excludes nothing \
                         (a mistyped reservation?)"
                    ),
                ));
            }
        }
        let built = Self::build(&nets, &rs, &ex).map_err(|e| match e {
            Error::Invalid(v) => v
                .into_iter()
                .map(|f| FieldError::new(format!("{path}.{}", f.path), f.message))
                .collect(),
            other => vec![FieldError::new(path, other.to_string())],
        });
        match built {
            Ok(space) if problems.is_empty() => Ok(space),
            Ok(_) => Err(Error::Invalid(problems)),
            Err(more) => {
                problems.extend(more);
                Err(Error::Invalid(problems))
            }
        }
    }

    /// The pool's family.
    pub fn family(&self) -> IpFamily {
        self.family
    }

    /// The first address two pools share, if any.
    pub fn first_overlap(&self, other: &Self) -> Option<IpAddr> {
        if self.family != other.family {
            return None;
        }
        let (mut i, mut j) = (0, 0);
        while i < self.intervals.len() && j < other.intervals.len() {
            let (a, b) = (self.intervals[i], other.intervals[j]);
            let lo = a.start.max(b.start);
            if lo <= a.end.min(b.end) {
                return Some(from_u128(self.family, lo));
            }
            if a.end < b.end {
                i += 1;
            } else {
                j += 1;
            }
        }
        None
    }
}

impl AddressSpace {
    /// The exact number of usable addresses, up to 2^128 ([`Space::capacity`]
    /// saturates at `u128::MAX`).
    pub fn size(&self) -> Count {
        self.size
    }
}

impl Space for AddressSpace {
    type Value = IpAddr;

    fn capacity(&self) -> u128 {
        self.capacity
    }

    fn offset_of(&self, a: &IpAddr) -> Result<u128> {
        if IpFamily::of(*a) != self.family {
            return Err(Error::WrongFamily {
                value: a.to_string(),
                family: self.family,
            });
        }
        let x = to_u128(*a);
        let i = self.intervals.partition_point(|iv| iv.start <= x);
        if i > 0 {
            let iv = self.intervals[i - 1];
            if x <= iv.end {
                return Ok(iv.base + (x - iv.start));
            }
        }
        let value = a.to_string();
        if contains(&self.excluded, x) {
            Err(Error::Excluded { value })
        } else if contains(&self.outer, x) {
            Err(Error::Unusable {
                value,
                reason: match self.family {
                    IpFamily::V4 => "it is the network or broadcast address of its prefix",
                    IpFamily::V6 => "it is the subnet-router anycast address of its prefix",
                },
            })
        } else {
            Err(Error::OutsidePool { value })
        }
    }

    fn value_at(&self, offset: u128) -> IpAddr {
        let i = self.intervals.partition_point(|iv| iv.base <= offset);
        match self.intervals.get(i.saturating_sub(1)) {
            Some(iv) => from_u128(self.family, iv.start.saturating_add(offset - iv.base)),
            // An empty pool (everything excluded) has no values; never panic.
            None => from_u128(self.family, 0),
        }
    }
}

/// The child prefixes of length `child_len` inside `parent`, lowest first (a /20 per
/// conduit from a /16 trench; a /24 per node from a /20).
///
/// # Examples
/// ```
/// use netpolicy_ipam::space::{PrefixSpace, Space};
///
/// let conduits = PrefixSpace::new("10.0.0.0/16".parse()?, 20)?;
/// assert_eq!(conduits.capacity(), 16);
/// assert_eq!(conduits.value_at(1).to_string(), "10.0.16.0/20");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixSpace {
    parent: IpNetwork,
    child_len: u8,
}

impl PrefixSpace {
    /// Children of `child_len` in `parent`.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `parent` has host bits set, or `child_len` is not longer
    /// than the parent's length or longer than the family allows, or there would be
    /// 2^128 children.
    pub fn new(parent: IpNetwork, child_len: u8) -> Result<Self> {
        let bits = if parent.is_ipv4() { 32 } else { 128 };
        let parent = network_prefix(parent)
            .map_err(|m| Error::Invalid(vec![FieldError::new("parent", m)]))?;
        if child_len <= parent.prefix() || child_len > bits {
            return Err(Error::Invalid(vec![FieldError::new(
                "childLength",
                format!(
                    "/{child_len} children do not fit in {parent}: the length must be in {}..={bits}",
                    parent.prefix() + 1
                ),
            )]));
        }
        if child_len - parent.prefix() >= 128 {
            return Err(Error::Invalid(vec![FieldError::new(
                "childLength",
                "2^128 children cannot be counted",
            )]));
        }
        Ok(Self { parent, child_len })
    }

    /// The parent prefix.
    pub fn parent(&self) -> IpNetwork {
        self.parent
    }

    /// The children's length.
    pub fn child_len(&self) -> u8 {
        self.child_len
    }

    fn shift(&self) -> u32 {
        let bits = if self.parent.is_ipv4() { 32 } else { 128 };
        u32::from(bits - self.child_len)
    }
}

impl Space for PrefixSpace {
    type Value = IpNetwork;

    fn capacity(&self) -> u128 {
        1u128 << (self.child_len - self.parent.prefix())
    }

    fn offset_of(&self, child: &IpNetwork) -> Result<u128> {
        let family = IpFamily::of_net(self.parent);
        if IpFamily::of_net(*child) != family {
            return Err(Error::WrongFamily {
                value: child.to_string(),
                family,
            });
        }
        if child.prefix() != self.child_len || child.ip() != child.network() {
            return Err(Error::Unusable {
                value: child.to_string(),
                reason: "it is not an aligned prefix of the pool's child length",
            });
        }
        let (ps, pe) = net_bounds(self.parent);
        let x = to_u128(child.network());
        if x < ps || x > pe {
            return Err(Error::OutsidePool {
                value: child.to_string(),
            });
        }
        Ok((x - ps) >> self.shift())
    }

    fn value_at(&self, offset: u128) -> IpNetwork {
        let family = IpFamily::of_net(self.parent);
        // Wrapping: offsets past the capacity give some value, never a panic.
        let start = to_u128(self.parent.network()).wrapping_add(offset.wrapping_shl(self.shift()));
        IpNetwork::new(from_u128(family, start), self.child_len).unwrap_or(self.parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusion_outside_every_cidr_and_range_is_an_error_naming_it() {
        let err = AddressSpace::parse(
            "spec",
            &["10.0.0.0/24".into()],
            &[("10.1.0.10".into(), "10.1.0.20".into())],
            &[
                "10.0.0.5".into(),
                "10.1.0.15".into(),
                "10.0.1.5".into(),
                "10.1.0.0/28".into(),
            ],
        )
        .unwrap_err();
        let fields: Vec<&str> = err.field_errors().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(fields, ["spec.exclude[2]"], "{err}");
        assert!(
            err.to_string()
                .contains("10.0.1.5/32 is outside every CIDR"),
            "{err}"
        );
    }

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    #[test]
    fn usable_addresses_follow_design_rules() {
        let cap = |c: &str| AddressSpace::new(&[net(c)], &[], &[]).unwrap().capacity();
        assert_eq!(cap("10.135.10.192/26"), 62);
        assert_eq!(cap("10.0.0.0/31"), 2);
        assert_eq!(cap("10.0.0.1/32"), 1);
        assert_eq!(cap("10.0.0.0/12"), 1_048_574);
        assert_eq!(cap("fd00::/64"), (1u128 << 64) - 1);
        assert_eq!(cap("fd00::/127"), 2);
        assert_eq!(cap("::/0"), u128::MAX);
    }

    #[test]
    fn errors_tell_outside_excluded_and_unusable_apart() {
        let p = AddressSpace::new(
            &[net("10.0.0.0/24")],
            &[AddressRange {
                start: "10.0.1.10".parse().unwrap(),
                end: "10.0.1.20".parse().unwrap(),
            }],
            &[net("10.0.0.128/25"), net("10.0.1.15/32")],
        )
        .unwrap();
        assert_eq!(p.capacity(), 127 + 10);
        let off = |a: &str| p.offset_of(&a.parse().unwrap());
        assert!(matches!(off("10.0.0.0"), Err(Error::Unusable { .. })));
        assert!(matches!(off("10.0.0.200"), Err(Error::Excluded { .. })));
        assert!(matches!(off("10.0.1.15"), Err(Error::Excluded { .. })));
        assert!(matches!(off("10.0.2.1"), Err(Error::OutsidePool { .. })));
        assert!(matches!(off("fd00::1"), Err(Error::WrongFamily { .. })));
        for o in 0..p.capacity() {
            assert_eq!(p.offset_of(&p.value_at(o)).unwrap(), o);
        }
        assert_eq!(p.value_at(127).to_string(), "10.0.1.10");
    }

    #[test]
    fn bad_pools_name_the_field() {
        let e = AddressSpace::parse(
            "spec",
            &["10.0.0.1/24".into(), "fd00::/64".into(), "nope".into()],
            &[("10.0.0.9".into(), "10.0.0.1".into())],
            &[],
        )
        .unwrap_err();
        let paths: Vec<&str> = e.field_errors().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.cidrs[2]",
                "spec.cidrs[0]",
                "spec.cidrs[1]",
                "spec.ranges[0]"
            ]
        );
    }

    #[test]
    fn a_pool_with_everything_excluded_is_empty_and_does_not_panic() {
        let p = AddressSpace::new(&[net("10.0.0.0/30")], &[], &[net("10.0.0.0/30")]).unwrap();
        assert_eq!(p.capacity(), 0);
        let _ = p.value_at(0);
        let mut a = crate::alloc::Allocator::new(p);
        assert!(matches!(
            a.allocate("x"),
            Err(Error::Exhausted { capacity: 0 })
        ));
    }

    #[test]
    fn an_exclusion_with_host_bits_is_an_error_not_a_wider_exclusion() {
        let e = AddressSpace::parse(
            "spec",
            &["10.0.0.0/16".into()],
            &[],
            &["10.0.1.5/24".into()],
        )
        .unwrap_err();
        assert_eq!(e.field_errors()[0].path, "spec.exclude[0]");
        assert_eq!(
            e.field_errors()[0].message,
            "10.0.1.5/24 has host bits set; did you mean 10.0.1.0/24?"
        );
    }

    #[test]
    fn overlapping_pools_are_found() {
        let a = AddressSpace::new(&[net("10.0.0.0/24")], &[], &[]).unwrap();
        let b = AddressSpace::new(&[net("10.0.0.128/25")], &[], &[]).unwrap();
        let c = AddressSpace::new(&[net("10.0.1.0/24")], &[], &[]).unwrap();
        assert_eq!(a.first_overlap(&b).unwrap().to_string(), "10.0.0.129");
        assert_eq!(a.first_overlap(&c), None);
    }

    #[test]
    fn child_prefixes_are_aligned_and_counted() {
        let s = PrefixSpace::new(net("fd00:10::/48"), 64).unwrap();
        assert_eq!(s.capacity(), 65536);
        assert_eq!(s.value_at(3).to_string(), "fd00:10:0:3::/64");
        assert_eq!(s.offset_of(&net("fd00:10:0:3::/64")).unwrap(), 3);
        assert!(s.offset_of(&net("fd00:11::/64")).is_err());
        assert!(s.offset_of(&net("fd00:10::/63")).is_err());
        assert!(PrefixSpace::new(net("10.0.0.0/16"), 16).is_err());
        assert!(PrefixSpace::new(net("10.0.0.1/16"), 20).is_err());
    }

    #[test]
    fn sizes_are_exact_up_to_all_of_ipv6() {
        let all = AddressSpace::parse(
            "spec",
            &[],
            &[(
                "::".into(),
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".into(),
            )],
            &[],
        )
        .unwrap();
        assert_eq!(all.size().get(), None);
        assert_eq!(
            all.size().to_string(),
            "340282366920938463463374607431768211456"
        );
        assert_eq!(all.capacity(), u128::MAX, "the allocator saturates");
        // ::/0 as a CIDR loses its subnet-router anycast address.
        let slash0 = AddressSpace::new(&[net("::/0")], &[], &[]).unwrap();
        assert_eq!(slash0.size().get(), Some(u128::MAX));
        assert_eq!(
            AddressSpace::new(&[net("10.135.10.192/26")], &[], &[])
                .unwrap()
                .size(),
            Count::new(62)
        );
        assert_eq!(Count::new(0).get(), Some(0));
        assert_eq!(
            Count::new(u128::MAX).checked_add(1).map(|c| c.get()),
            Some(None)
        );
        assert_eq!(Count::new(u128::MAX).checked_add(2), None);
    }
}
