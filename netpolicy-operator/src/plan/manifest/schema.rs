//! Checks a located YAML tree against a CRD's OpenAPI schema the way the API server
//! would (types, integer ranges, enums, unknown and duplicate fields, required fields),
//! and against Kubernetes' rules for names and labels, reporting *every* problem with
//! its field path and its place in the file. What the schema cannot say (CEL rules,
//! the meaning of values) is left to netpolicy-core's validation, which also reports
//! every problem at once.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use netpolicy_core::names;

use super::yaml::{Node, Value};

/// One problem: where (field path, line and column within the document) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Field path, `spec.routes[3].table`.
    pub path: String,
    /// 1-based line within the document.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// What is wrong.
    pub message: String,
    /// A value of the type the schema wants (`0`, `""`, `false`, `[]`, `{}`) to put in
    /// its place so that the rest of the object can still be checked; `None` to leave
    /// the field out.
    pub stand_in: Option<serde_json::Value>,
}

fn push(out: &mut Vec<Problem>, path: &str, n: &Node, message: String) {
    out.push(Problem {
        path: path.to_owned(),
        line: n.line,
        column: n.column,
        message,
        stand_in: None,
    });
}

/// A neutral value of the schema's type.
fn stand_in(s: &JSONSchemaProps) -> Option<serde_json::Value> {
    use serde_json::json;
    if s.x_kubernetes_int_or_string == Some(true) {
        return Some(json!(0));
    }
    match s.type_.as_deref() {
        Some("integer" | "number") => Some(json!(0)),
        Some("string") => Some(json!("")),
        Some("boolean") => Some(json!(false)),
        Some("array") => Some(json!([])),
        Some("object") => Some(json!({})),
        _ => None,
    }
}

/// What a value is, for messages.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Int(i) => format!("the number {i}"),
        Value::Float(f) if f.is_nan() => "the float .nan".into(),
        Value::Float(f) if f.is_infinite() => "an infinite float".into(),
        Value::Float(f) => format!("the number {f}"),
        Value::Str { text, quoted: true } => format!("the string {text:?}"),
        Value::Str {
            text,
            quoted: false,
        } if is_leading_zero_number(text) => {
            format!("{text} (a number with a leading zero)")
        }
        Value::Str { text, .. } => format!("the string {text:?}"),
        Value::Seq(_) => "a list".into(),
        Value::Map(_) => "a mapping".into(),
    }
}

/// `0100`, `-007`: unquoted, YAML 1.2 reads a decimal and YAML 1.1 (kubectl, the
/// Kubernetes Go libraries) an octal number. Neither reading is safe to guess.
fn is_leading_zero_number(t: &str) -> bool {
    let d = t.strip_prefix(['-', '+']).unwrap_or(t);
    d.len() > 1 && d.starts_with('0') && d.bytes().all(|b| b.is_ascii_digit())
}

const LEADING_ZERO: &str = "a leading zero makes it ambiguous: YAML 1.1 readers (kubectl) \
    read it as octal, YAML 1.2 readers as decimal";

/// The range an integer of this schema may take, from its format and bounds.
fn int_range(s: &JSONSchemaProps) -> (i128, i128) {
    let (mut lo, mut hi) = match s.format.as_deref() {
        Some("int32") => (i128::from(i32::MIN), i128::from(i32::MAX)),
        Some("uint32") => (0, i128::from(u32::MAX)),
        Some("uint16") => (0, i128::from(u16::MAX)),
        Some("uint8") => (0, i128::from(u8::MAX)),
        Some("int16") => (i128::from(i16::MIN), i128::from(i16::MAX)),
        Some("int8") => (i128::from(i8::MIN), i128::from(i8::MAX)),
        Some("uint64" | "uint") => (0, i128::from(u64::MAX)),
        _ => (i128::from(i64::MIN), i128::from(i64::MAX)),
    };
    if let Some(m) = s.minimum {
        lo = lo.max(m.ceil() as i128);
    }
    if let Some(m) = s.maximum {
        hi = hi.min(m.floor() as i128);
    }
    (lo, hi)
}

/// Checks `n` against `s`, adding every problem to `out`. `path` names `n`.
pub fn check(s: &JSONSchemaProps, n: &Node, path: &str, out: &mut Vec<Problem>) {
    if matches!(n.value, Value::Null) {
        // Absent: a null optional field is the same as none.
        return;
    }
    if s.x_kubernetes_int_or_string == Some(true) {
        match &n.value {
            Value::Int(_) | Value::Str { .. } => {}
            other => push(
                out,
                path,
                n,
                format!("expected an integer or a string, got {}", describe(other)),
            ),
        }
        return;
    }
    let before = out.len();
    match s.type_.as_deref() {
        Some("object") => check_object(s, n, path, out),
        Some("array") => match &n.value {
            Value::Seq(items) => {
                // The API server's own count limits (`endpoints: []` passed plan and
                // failed `kubectl apply`).
                let n_items = items.len() as i64;
                if let Some(min) = s.min_items.filter(|m| n_items < *m) {
                    push(
                        out,
                        path,
                        n,
                        format!("has {n_items} item(s), at least {min} required"),
                    );
                }
                if let Some(max) = s.max_items.filter(|m| n_items > *m) {
                    push(
                        out,
                        path,
                        n,
                        format!("has {n_items} items, at most {max} allowed"),
                    );
                }
                if let Some(JSONSchemaPropsOrArray::Schema(item)) = &s.items {
                    for (i, v) in items.iter().enumerate() {
                        check(item, v, &format!("{path}[{i}]"), out);
                    }
                }
            }
            other => push(
                out,
                path,
                n,
                format!("expected a list, got {}", describe(other)),
            ),
        },
        Some("string") => match &n.value {
            Value::Str {
                text,
                quoted: false,
            } if is_leading_zero_number(text) => push(
                out,
                path,
                n,
                format!("expected a string, got {text}: {LEADING_ZERO}; quote it"),
            ),
            Value::Str { .. } => {}
            other => push(
                out,
                path,
                n,
                format!(
                    "expected a string, got {}; quote it if the text is meant",
                    describe(other)
                ),
            ),
        },
        Some("integer") => {
            let (lo, hi) = int_range(s);
            match &n.value {
                Value::Int(i) if (lo..=hi).contains(i) => {}
                Value::Int(i) => push(out, path, n, format!("{i} is outside {lo}..{hi}")),
                Value::Float(f) if f.is_finite() && f.fract() == 0.0 => {
                    let i = *f as i128;
                    if !(lo..=hi).contains(&i) {
                        push(out, path, n, format!("{f} is outside {lo}..{hi}"));
                    }
                }
                Value::Str {
                    text,
                    quoted: false,
                } if is_leading_zero_number(text) => push(
                    out,
                    path,
                    n,
                    format!("{text}: {LEADING_ZERO}; write it without the leading zero"),
                ),
                other => push(
                    out,
                    path,
                    n,
                    format!("expected an integer, got {}", describe(other)),
                ),
            }
        }
        Some("number") => match &n.value {
            Value::Int(_) => {}
            Value::Float(f) if f.is_finite() => {}
            other => push(
                out,
                path,
                n,
                format!("expected a number, got {}", describe(other)),
            ),
        },
        Some("boolean") => match &n.value {
            Value::Bool(_) => {}
            other => push(
                out,
                path,
                n,
                format!("expected true or false, got {}", describe(other)),
            ),
        },
        _ => {}
    }
    // A problem with this very value (not one inside it) gets a stand-in.
    for p in out.iter_mut().skip(before) {
        if p.path == path && p.stand_in.is_none() {
            p.stand_in = stand_in(s);
        }
    }
    if out.len() == before
        && let Some(allowed) = &s.enum_
    {
        let v = n.to_json();
        if !allowed.iter().any(|a| a.0 == v) {
            let names: Vec<String> = allowed.iter().map(|a| a.0.to_string()).collect();
            push(
                out,
                path,
                n,
                format!("{v} is not one of {}", names.join(", ")),
            );
        }
    }
}

fn check_object(s: &JSONSchemaProps, n: &Node, path: &str, out: &mut Vec<Problem>) {
    let Value::Map(entries) = &n.value else {
        push(
            out,
            path,
            n,
            format!("expected a mapping, got {}", describe(&n.value)),
        );
        return;
    };
    let join = |k: &str| {
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    for (i, (k, v)) in entries.iter().enumerate() {
        // Duplicate keys are reported by `duplicates`, once.
        if entries[..i].iter().any(|(x, _)| x == k) {
            continue;
        }
        match s.properties.as_ref().and_then(|p| p.get(k)) {
            Some(ps) => check(ps, v, &join(k), out),
            None => match &s.additional_properties {
                Some(JSONSchemaPropsOrBool::Schema(a)) => check(a, v, &join(k), out),
                Some(JSONSchemaPropsOrBool::Bool(true)) => {}
                _ if s.x_kubernetes_preserve_unknown_fields == Some(true) => {}
                _ => {
                    let known: Vec<&str> = s
                        .properties
                        .iter()
                        .flat_map(|p| p.keys().map(String::as_str))
                        .collect();
                    push(
                        out,
                        &join(k),
                        v,
                        format!("unknown field (known here: {})", known.join(", ")),
                    );
                }
            },
        }
    }
    for r in s.required.iter().flatten() {
        if !entries
            .iter()
            .any(|(k, v)| k == r && v.value != Value::Null)
        {
            push(out, &join(r), n, "required".into());
        }
    }
}

/// Reports every key written twice in one mapping, anywhere in `n`.
pub fn duplicates(n: &Node, path: &str, out: &mut Vec<Problem>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    match &n.value {
        Value::Map(entries) => {
            for (i, (k, v)) in entries.iter().enumerate() {
                if let Some((_, first)) = entries[..i].iter().find(|(x, _)| x == k) {
                    push(
                        out,
                        &join(k),
                        v,
                        format!(
                            "written twice (first at line {}); which one counts depends on \
                             the reader",
                            first.line
                        ),
                    );
                }
                duplicates(v, &join(k), out);
            }
        }
        Value::Seq(items) => {
            for (i, v) in items.iter().enumerate() {
                duplicates(v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Checks an object's `metadata`: its name (a DNS-1123 subdomain, or a label for
/// `label_name` kinds such as Namespace), its namespace, and its label keys and values.
pub fn check_metadata(doc: &Node, label_name: bool, out: &mut Vec<Problem>) {
    let Some(meta) = doc.get("metadata") else {
        return;
    };
    if let Some(n) = meta.get("name") {
        match n.as_str() {
            Some(name) => {
                let r = if label_name {
                    names::dns_label(name)
                } else {
                    names::dns_subdomain(name)
                };
                if let Err(e) = r {
                    push(out, "metadata.name", n, e);
                }
            }
            None => push(
                out,
                "metadata.name",
                n,
                format!("expected a string, got {}", describe(&n.value)),
            ),
        }
    }
    if let Some(ns) = meta.get("namespace")
        && let Some(text) = ns.as_str()
        && let Err(e) = names::dns_label(text)
    {
        push(out, "metadata.namespace", ns, e);
    }
    for field in ["labels", "annotations"] {
        let Some(m) = meta.get(field) else { continue };
        let Value::Map(entries) = &m.value else {
            push(
                out,
                &format!("metadata.{field}"),
                m,
                format!("expected a mapping, got {}", describe(&m.value)),
            );
            continue;
        };
        for (k, v) in entries {
            let at = format!("metadata.{field}.{k}");
            if let Err(e) = names::label_key(k) {
                push(out, &at, v, e);
            }
            match &v.value {
                Value::Str { text, quoted } => {
                    if !quoted && is_leading_zero_number(text) {
                        push(out, &at, v, format!("{text}: {LEADING_ZERO}; quote it"));
                    } else if field == "labels"
                        && let Err(e) = names::label_value(text)
                    {
                        push(out, &at, v, e);
                    }
                }
                other => push(
                    out,
                    &at,
                    v,
                    format!(
                        "expected a string, got {}; quote it if the text is meant",
                        describe(other)
                    ),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::yaml::parse;
    use super::*;

    fn spec_schema(kind: &str) -> JSONSchemaProps {
        crate::api::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .and_then(|c| c.spec.versions[0].schema.clone())
            .and_then(|s| s.open_api_v3_schema)
            .and_then(|s| s.properties)
            .and_then(|p| p.get("spec").cloned())
            .unwrap()
    }

    fn problems(kind: &str, spec: &str) -> Vec<(String, u64, String)> {
        let doc = parse(spec).unwrap();
        let mut out = Vec::new();
        duplicates(&doc, "spec", &mut out);
        check(&spec_schema(kind), &doc, "spec", &mut out);
        out.into_iter()
            .map(|p| (p.path, p.line, p.message))
            .collect()
    }

    #[test]
    fn every_problem_of_an_object_is_reported_with_its_field_path_and_line() {
        let p = problems(
            "NodeConfig",
            "priority: abc\nvlans:\n  - link: eth0\n    id: 0100\n    mtu: .nan\nroutes:\n  - to: 10.0.0.0/8\n    via: 10.1.1.1\n    table: -1\n    metric: \"5\"\n    dev: 0100\n",
        );
        let paths: Vec<&str> = p.iter().map(|(f, _, _)| f.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.priority",
                "spec.vlans[0].id",
                "spec.vlans[0].mtu",
                "spec.routes[0].table",
                "spec.routes[0].metric",
                "spec.routes[0].dev",
            ],
            "{p:#?}"
        );
        assert_eq!(p[0].1, 1);
        assert!(p[0].2.contains("\"abc\""), "{}", p[0].2);
        assert_eq!(p[1].1, 4);
        assert!(p[1].2.contains("leading zero"), "{}", p[1].2);
        assert!(p[2].2.contains(".nan"), "{}", p[2].2);
        assert!(p[3].2.contains("-1 is outside 0..4294967295"), "{}", p[3].2);
        assert!(p[4].2.contains("the string \"5\""), "{}", p[4].2);
        assert!(p[5].2.contains("quote it"), "{}", p[5].2);
    }

    #[test]
    fn duplicate_and_unknown_fields_are_reported() {
        let p = problems(
            "NodeConfig",
            "priority: 1\npriority: 2\nroutes:\n  - to: 10.0.0.0/8\n    gatway: 10.1.1.1\n",
        );
        assert_eq!(p[0].0, "spec.priority");
        assert!(p[0].2.contains("first at line 1"), "{p:?}");
        assert_eq!(p[1].0, "spec.routes[0].gatway");
        assert!(p[1].2.contains("via"), "{p:?}");
    }

    #[test]
    fn names_and_labels_the_api_server_would_refuse_are_reported() {
        let doc = parse(
            "metadata:\n  name: Edge_1\n  labels:\n    zone: \"a b\"\n    bad key: x\n    n: 0100\n",
        )
        .unwrap();
        let mut out = Vec::new();
        check_metadata(&doc, false, &mut out);
        let paths: Vec<&str> = out.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "metadata.name",
                "metadata.labels.zone",
                "metadata.labels.bad key",
                "metadata.labels.n"
            ],
            "{out:#?}"
        );
    }
}
