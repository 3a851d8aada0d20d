//! One YAML document as a tree whose every node knows where it was written (line,
//! column, and whether a scalar was quoted), so that schema problems can name both the
//! field path and the place in the file, and every problem of an object is found in
//! one pass instead of the first one a deserializer trips over.
//!
//! Parsing is deliberately lenient about *values* (a leading-zero number stays the text
//! it was, `.nan` stays a float, duplicate keys are kept): deciding what is wrong is the
//! schema check's job, which can then say exactly what and where. It is strict about
//! *resources*: the parser's budget still stops alias bombs and runaway nesting, with
//! limits set for realistic manifests (a NodeConfig with 50,000 routes).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, NonFiniteFloatPolicy, Options, Spanned};

/// A scalar or collection as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `~`, `null` or nothing.
    Null,
    /// A boolean: `true` or `false` (YAML 1.2; `yes`, `on`, `y` are text).
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A float, possibly `.nan` or `.inf`.
    Float(f64),
    /// A string; `quoted` when written in quotes (or as a block scalar).
    Str {
        /// The text.
        text: String,
        /// Whether it was quoted: an unquoted `0100` is a number to a YAML 1.1 reader
        /// (octal), to a 1.2 reader (decimal), never a string.
        quoted: bool,
    },
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order, duplicate keys included.
    Map(Vec<(String, Node)>),
}

/// A value with the place it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// 1-based line within the document.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// The value.
    pub value: Value,
}

impl Node {
    /// The entry `key` of a mapping (the first one, if written twice).
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str { text, .. } => Some(text),
            _ => None,
        }
    }

    /// The tree as JSON (what the API server stores). Non-finite floats become `null`;
    /// the schema check refuses them before this is called.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => i64::try_from(*i)
                .map(J::from)
                .or_else(|_| u64::try_from(*i).map(J::from))
                .unwrap_or_else(|_| J::from(*i as f64)),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Str { text, .. } => J::String(text.clone()),
            Value::Seq(items) => J::Array(items.iter().map(Node::to_json).collect()),
            // The last of duplicate keys wins, as in Kubernetes' YAML reader; the schema
            // check reports duplicates before this is called.
            Value::Map(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), v.to_json())).collect()),
        }
    }
}

/// Limits of the parser: generous for real manifests (a NodeConfig with 50,000 routes
/// is about 400,000 nodes), finite for hostile ones.
pub const MAX_EVENTS: usize = 50_000_000;
/// YAML nodes per document.
pub const MAX_NODES: usize = 20_000_000;
/// Alias (`*ref`) events allowed per document.
pub const MAX_ALIASES: usize = 10_000;

fn options() -> Options {
    let mut o = Options::default();
    o.duplicate_keys = DuplicateKeyPolicy::PassThrough;
    o.leading_zero_numbers_as_strings = true;
    o.non_finite_float_policy = NonFiniteFloatPolicy::PassThrough;
    // YAML 1.2 booleans only: `y`, `n`, `on`, `no` stay text (a name `y` is a name).
    o.strict_booleans = true;
    if let Some(b) = o.budget.as_mut() {
        b.max_events = MAX_EVENTS;
        b.max_nodes = MAX_NODES;
        b.max_aliases = MAX_ALIASES;
    }
    o
}

/// Parses one document.
///
/// # Errors
/// Malformed YAML, or a document over the parser's limits (the message names the
/// limit).
pub fn parse(doc: &str) -> Result<Node, serde_saphyr::Error> {
    let first = match serde_saphyr::from_str_with_options::<Spanned<Raw>>(doc, options()) {
        Ok(root) => return Ok(node(doc, root)),
        Err(e) => e,
    };
    // What kubectl (go-yaml), kustomize and PyYAML read, this parser refuses: a quoted
    // scalar's continuation line indented no deeper than its key (Meridio's
    // NetworkAttachmentDefinitions close `config: '{ … }'` at the key's column). Line
    // folding drops a continuation line's leading spaces, so indenting those lines
    // deeper changes no value: read it so, line numbers unchanged.
    let mut text = doc.to_owned();
    let mut line = quoted_indentation_error(&first);
    for _ in 0..doc.lines().count().min(1000) {
        let Some(fixed) = line.and_then(|l| indent_deeper(&text, l)) else {
            break;
        };
        text = fixed;
        match serde_saphyr::from_str_with_options::<Spanned<Raw>>(&text, options()) {
            Ok(root) => return Ok(node(&text, root)),
            Err(e) => line = quoted_indentation_error(&e),
        }
    }
    // What the reader wrote is what the error points at.
    Err(first)
}

/// The 1-based line of an "invalid indentation in multiline quoted scalar" error.
fn quoted_indentation_error(e: &serde_saphyr::Error) -> Option<usize> {
    let inner = e.without_snippet();
    inner
        .to_string()
        .contains("invalid indentation in multiline quoted scalar")
        .then(|| inner.location().map(|l| l.line()))
        .flatten()
        .and_then(|l| usize::try_from(l).ok())
}

/// `doc` with line `line` (1-based) indented one space deeper than the line before it.
fn indent_deeper(doc: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = doc.split('\n').collect();
    let at = line.checked_sub(1)?;
    let this = *lines.get(at)?;
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let before = lines[..at]
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map_or(0, |l| indent(l));
    let want = before.max(indent(this)) + 1;
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    out[at] = format!("{}{}", " ".repeat(want - indent(this)), this);
    Some(out.join("\n"))
}

/// The deserialized value before quoting is known.
enum Raw {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Raw>>),
    Map(Vec<(Spanned<Key>, Spanned<Raw>)>),
}

/// The byte offset of a located value in the document, when known.
fn byte_offset(at: &serde_saphyr::Location) -> Option<usize> {
    at.span()
        .byte_offset()
        .and_then(|o| usize::try_from(o).ok())
}

fn node(doc: &str, s: Spanned<Raw>) -> Node {
    let at = &s.referenced;
    let (line, column) = (at.line(), at.column());
    let value = match s.value {
        Raw::Null => Value::Null,
        Raw::Bool(b) => Value::Bool(b),
        Raw::Int(i) => Value::Int(i),
        Raw::Float(f) => Value::Float(f),
        Raw::Str(text) => {
            let first = byte_offset(at)
                .and_then(|s| doc.get(s..))
                .and_then(|t| t.chars().next());
            let quoted = matches!(first, Some('"' | '\'' | '|' | '>'));
            Value::Str { text, quoted }
        }
        Raw::Seq(items) => Value::Seq(items.into_iter().map(|i| node(doc, i)).collect()),
        Raw::Map(entries) => Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (key_text(doc, k), node(doc, v)))
                .collect(),
        ),
    };
    Node {
        line,
        column,
        value,
    }
}

/// A mapping key as written: an unquoted `n` or `on` is the text `n` or `on` (a
/// YAML 1.1 reader would make it a boolean, but keys here are field names).
fn key_text(doc: &str, k: Spanned<Key>) -> String {
    let at = &k.referenced;
    let raw = byte_offset(at).and_then(|start| {
        let len = usize::try_from(at.span().byte_len()?).ok()?;
        doc.get(start..start + len)
    });
    match raw {
        Some(r) if !r.starts_with(['"', '\'', '|', '>']) && !r.is_empty() => r.to_owned(),
        _ => k.value.0,
    }
}

impl<'de> de::Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Raw;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E>(self) -> Result<Raw, E> {
                Ok(Raw::Null)
            }
            fn visit_none<E>(self) -> Result<Raw, E> {
                Ok(Raw::Null)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Raw, D2::Error> {
                de::Deserialize::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
                Ok(Raw::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
                Ok(Raw::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
                Ok(Raw::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Raw, E> {
                Ok(Raw::Int(v))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Raw, E> {
                i128::try_from(v).map(Raw::Int).or(Ok(Raw::Float(v as f64)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
                Ok(Raw::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
                Ok(Raw::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Raw, E> {
                Ok(Raw::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Raw, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Raw::Seq(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Raw, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = a.next_key::<Spanned<Key>>()? {
                    v.push((k, a.next_value()?));
                }
                Ok(Raw::Map(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A mapping key as text (`1: x` has the key `"1"`).
struct Key(String);

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_owned()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<Key, E> {
                Ok(Key("null".into()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_keep_what_was_written_and_where() {
        let n = parse("a: 0100\nb: \"0100\"\nc: .nan\nd: -1\ne: true\nf: x\nf: y\n").unwrap();
        let Value::Map(m) = &n.value else { panic!() };
        let v: Vec<(&str, &Value, u64)> = m
            .iter()
            .map(|(k, v)| (k.as_str(), &v.value, v.line))
            .collect();
        assert_eq!(
            v[0],
            (
                "a",
                &Value::Str {
                    text: "0100".into(),
                    quoted: false
                },
                1
            )
        );
        assert_eq!(
            v[1],
            (
                "b",
                &Value::Str {
                    text: "0100".into(),
                    quoted: true
                },
                2
            )
        );
        assert!(matches!(v[2].1, Value::Float(f) if f.is_nan()));
        assert_eq!(v[3].1, &Value::Int(-1));
        assert_eq!(v[4].1, &Value::Bool(true));
        // Duplicate keys are kept for the schema check to report.
        assert_eq!(v.iter().filter(|(k, _, _)| *k == "f").count(), 2);
    }

    #[test]
    fn a_quoted_scalar_closed_at_its_keys_column_reads_as_kubectl_reads_it() {
        // Meridio's NetworkAttachmentDefinitions: PyYAML and go-yaml read this.
        let doc = "spec:\n  config: '{\n    \"cniVersion\": \"0.4.0\",\n  \"type\": \"vlan\"\n  }'\n  other: x\n";
        let n = parse(doc).unwrap();
        assert_eq!(
            n.to_json(),
            serde_json::json!({"spec": {
                "config": "{ \"cniVersion\": \"0.4.0\", \"type\": \"vlan\" }",
                "other": "x"
            }})
        );
        // Still refused: what no YAML reader accepts.
        assert!(parse("a: 'unclosed\nb: c\n").is_err());
    }

    #[test]
    fn fifty_thousand_routes_parse() {
        let mut doc = String::from("spec:\n  routes:\n");
        for i in 0..50_000u32 {
            doc.push_str(&format!(
                "  - {{to: 10.{}.{}.0/24, via: 192.0.2.1, table: 100}}\n",
                i / 256,
                i % 256
            ));
        }
        let n = parse(&doc).unwrap();
        let routes = n.get("spec").and_then(|s| s.get("routes")).unwrap();
        assert!(matches!(&routes.value, Value::Seq(r) if r.len() == 50_000));
    }

    #[test]
    fn an_alias_bomb_is_stopped_by_a_named_limit() {
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let e = parse(&doc).unwrap_err().to_string();
        assert!(
            e.to_lowercase().contains("limit") || e.to_lowercase().contains("budget"),
            "{e}"
        );
    }
}
