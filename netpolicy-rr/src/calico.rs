//! The part of Calico's selector language that netpolicy writes, parsed and evaluated
//! with Calico's semantics, so that the `BGPPeer` objects we emit can be checked against
//! the peerings we meant (see [`crate::sim`]).
//!
//! Grammar: `all()`, `has(k)`, `k == 'v'`, `k != 'v'`, `k in {'a', 'b'}`,
//! `k not in {...}`, `!e`, `e && e`, `e || e`, parentheses; strings in single or double
//! quotes. As in Calico, `==` and `in` need the label to be present; `!=` and `not in`
//! also match nodes without it.
//!
//! ```
//! use netpolicy_rr::calico::Selector;
//! use std::collections::BTreeMap;
//!
//! let s = Selector::parse("!has(rr) && zone == 'a'")?;
//! let labels = BTreeMap::from([("zone".to_string(), "a".to_string())]);
//! assert!(s.matches(&labels));
//! # Ok::<(), String>(())
//! ```

use netpolicy_core::selector::Labels;

/// A parsed Calico selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `all()`.
    All,
    /// `has(k)`.
    Has(String),
    /// `k == 'v'`.
    Eq(String, String),
    /// `k != 'v'`.
    Ne(String, String),
    /// `k in {...}`.
    In(String, Vec<String>),
    /// `k not in {...}`.
    NotIn(String, Vec<String>),
    /// `!e`.
    Not(Box<Selector>),
    /// `a && b`.
    And(Box<Selector>, Box<Selector>),
    /// `a || b`.
    Or(Box<Selector>, Box<Selector>),
}

impl Selector {
    /// Parses `text`.
    ///
    /// # Errors
    /// A message naming the byte offset where parsing stopped.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
        let e = p.or()?;
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("unexpected input at byte {} of {text:?}", p.i));
        }
        Ok(e)
    }

    /// Adds every label key the selector reads to `out`.
    pub fn keys(&self, out: &mut std::collections::BTreeSet<String>) {
        match self {
            Self::All => {}
            Self::Has(k) | Self::Eq(k, _) | Self::Ne(k, _) | Self::In(k, _) | Self::NotIn(k, _) => {
                out.insert(k.clone());
            }
            Self::Not(e) => e.keys(out),
            Self::And(a, b) | Self::Or(a, b) => {
                a.keys(out);
                b.keys(out);
            }
        }
    }

    /// Whether a node with `labels` matches.
    pub fn matches(&self, labels: &Labels) -> bool {
        match self {
            Self::All => true,
            Self::Has(k) => labels.contains_key(k),
            Self::Eq(k, v) => labels.get(k) == Some(v),
            Self::Ne(k, v) => labels.get(k) != Some(v),
            Self::In(k, vs) => labels.get(k).is_some_and(|x| vs.contains(x)),
            Self::NotIn(k, vs) => !labels.get(k).is_some_and(|x| vs.contains(x)),
            Self::Not(e) => !e.matches(labels),
            Self::And(a, b) => a.matches(labels) && b.matches(labels),
            Self::Or(a, b) => a.matches(labels) || b.matches(labels),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(tok.as_bytes()) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }

    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("expected {what} at byte {}", self.i))
    }

    fn or(&mut self) -> Result<Selector, String> {
        let mut e = self.and()?;
        while self.eat("||") {
            e = Selector::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Selector, String> {
        let mut e = self.unary()?;
        while self.eat("&&") {
            e = Selector::And(Box::new(e), Box::new(self.unary()?));
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Selector, String> {
        if self.eat("!") {
            return Ok(Selector::Not(Box::new(self.unary()?)));
        }
        if self.eat("(") {
            let e = self.or()?;
            return if self.eat(")") {
                Ok(e)
            } else {
                self.err("')'")
            };
        }
        if self.eat("all()") {
            return Ok(Selector::All);
        }
        if self.eat("has(") {
            let k = self.key()?;
            return if self.eat(")") {
                Ok(Selector::Has(k))
            } else {
                self.err("')'")
            };
        }
        let k = self.key()?;
        if self.eat("==") {
            Ok(Selector::Eq(k, self.string()?))
        } else if self.eat("!=") {
            Ok(Selector::Ne(k, self.string()?))
        } else if self.eat("not in") {
            Ok(Selector::NotIn(k, self.set()?))
        } else if self.eat("in") {
            Ok(Selector::In(k, self.set()?))
        } else {
            self.err("'==', '!=', 'in' or 'not in'")
        }
    }

    fn key(&mut self) -> Result<String, String> {
        self.ws();
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || b"_./-".contains(c))
        {
            self.i += 1;
        }
        if start == self.i {
            return self.err("a label key");
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    fn string(&mut self) -> Result<String, String> {
        self.ws();
        let Some(&q) = self.s.get(self.i).filter(|c| **c == b'\'' || **c == b'"') else {
            return self.err("a quoted string");
        };
        let start = self.i + 1;
        let Some(len) = self.s[start..].iter().position(|c| *c == q) else {
            return self.err("a closing quote");
        };
        self.i = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }

    fn set(&mut self) -> Result<Vec<String>, String> {
        if !self.eat("{") {
            return self.err("'{'");
        }
        let mut out = Vec::new();
        if self.eat("}") {
            return Ok(out);
        }
        loop {
            out.push(self.string()?);
            if self.eat("}") {
                return Ok(out);
            }
            if !self.eat(",") {
                return self.err("',' or '}'");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn calico_semantics_for_absent_labels() {
        let none = labels(&[]);
        let a = labels(&[("z", "a")]);
        for (sel, on_none, on_a) in [
            ("z == 'a'", false, true),
            ("z != 'a'", true, false),
            ("z in {'a', 'b'}", false, true),
            ("z not in {\"a\"}", true, false),
            ("has(z)", false, true),
            ("!has(z) || z == 'b'", true, false),
            ("all()", true, true),
            ("(has(z) && z == 'a') || has(q)", false, true),
            ("z in {}", false, false),
        ] {
            let s = Selector::parse(sel).unwrap();
            assert_eq!(s.matches(&none), on_none, "{sel} on no labels");
            assert_eq!(s.matches(&a), on_a, "{sel} on z=a");
        }
    }

    #[test]
    fn bad_selectors_say_where() {
        for bad in [
            "",
            "z ==",
            "has(z",
            "z = 'a'",
            "z in {'a'",
            "z == 'a",
            "a && ",
        ] {
            let e = Selector::parse(bad).unwrap_err();
            assert!(e.contains("byte"), "{bad}: {e}");
        }
    }
}
