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
    let mut h = Fnv1a::default();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h.update(b",");
        }
        h.update(p.as_bytes());
    }
    h.finish()
}

/// [`fnv1a`] of one part written in pieces, as an [`std::io::Write`]: a serializer
/// writes into it and no text is kept (`serde_json::to_writer` into it gives `fnv1a` of
/// the value's JSON text without the text).
///
/// ```
/// use std::io::Write;
/// let mut h = netpolicy_core::hash::Fnv1a::default();
/// h.write_all(b"a").unwrap();
/// assert_eq!(h.finish(), netpolicy_core::hash::fnv1a(&["a"]));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    /// `bytes` added to what is hashed.
    pub fn update(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The hash of what was written.
    #[must_use]
    pub fn finish(self) -> u64 {
        self.0
    }
}

impl std::io::Write for Fnv1a {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written in pieces or as a value's JSON, the hash is `fnv1a` of the whole text.
    #[test]
    fn pieces_and_json_hash_as_the_whole_text() {
        use std::io::Write;
        let text = r#"{"routes":[{"to":"10.0.0.0/24","via":"192.0.2.1"}],"rules":[]}"#;
        let mut h = Fnv1a::default();
        for piece in text.as_bytes().chunks(7) {
            h.write_all(piece).unwrap();
        }
        assert_eq!(h.finish(), fnv1a(&[text]));
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        let mut h = Fnv1a::default();
        serde_json::to_writer(&mut h, &value).unwrap();
        assert_eq!(
            h.finish(),
            fnv1a(&[&serde_json::to_string(&value).unwrap()])
        );
        assert_ne!(h.finish(), fnv1a(&["{}"]));
    }
}
