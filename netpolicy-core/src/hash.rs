//! A stable short hash for names and revisions.

/// 64-bit FNV-1a over `parts` joined by `,`: the same value on every platform and
/// Rust version (unlike `std`'s hashers), for object names, label keys and revisions
/// derived from content.
///
/// ```
/// // FNV-1a's published test vector.
/// assert_eq!(netpolicy_core::hash::fnv1a(&["a"]), 0xaf63_dc4c_8601_ec8c);
/// ```
pub fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h ^= u64::from(b',');
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        for b in p.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
