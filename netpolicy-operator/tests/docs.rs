//! `docs/api.md` is generated from the CRDs (`netpolicy crds`): every kind with its
//! scope, short names, columns, every spec and status field with its type, whether it is
//! required, its description and its validation rules. This test fails when the
//! committed file is stale; regenerate it with
//!
//! ```sh
//! NETPOLICY_WRITE_DOCS=1 cargo test -p netpolicy-operator --test integration docs::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{fmt::Write as _, path::PathBuf};

use netpolicy_operator::api::crds;
use serde_json::Value;

/// The first paragraph of a description, on one line, with `|` escaped for tables.
fn one_line(s: &str) -> String {
    s.split("\n\n")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn type_of(v: &Value) -> String {
    if v.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "int or string".into();
    }
    match v["type"].as_str() {
        Some("array") => format!("[]{}", type_of(&v["items"])),
        Some("object") if v.get("additionalProperties").is_some() => {
            format!("map[string]{}", type_of(&v["additionalProperties"]))
        }
        Some(t) => {
            let mut t = t.to_owned();
            if let Some(e) = v["enum"].as_array() {
                let vals: Vec<String> = e
                    .iter()
                    .map(|x| format!("`{}`", x.as_str().unwrap_or_default()))
                    .collect();
                t = format!("{t} ({})", vals.join(", "));
            }
            t
        }
        None => "any".into(),
    }
}

fn rules(v: &Value) -> String {
    v["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            format!(
                " Rule: {}.",
                one_line(r["message"].as_str().unwrap_or_default()).trim_end_matches('.')
            )
        })
        .collect()
}

/// One table row per field, depth first.
fn fields(path: &str, v: &Value, required: bool, out: &mut String) {
    if !path.is_empty() {
        let mut desc = one_line(v["description"].as_str().unwrap_or_default());
        if let Some(d) = v.get("default") {
            write!(desc, " Default `{d}`.").unwrap();
        }
        desc.push_str(&rules(v));
        writeln!(
            out,
            "| `{path}` | {} | {} | {} |",
            type_of(v),
            if required { "yes" } else { "" },
            desc.trim()
        )
        .unwrap();
    }
    let (props, req, prefix) = match v["type"].as_str() {
        Some("array") if v["items"]["properties"].is_object() => (
            &v["items"]["properties"],
            &v["items"]["required"],
            format!("{path}[]"),
        ),
        _ => (&v["properties"], &v["required"], path.to_owned()),
    };
    if let Some(p) = props.as_object() {
        let req: Vec<&str> = req
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for (k, child) in p {
            let child_path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            fields(&child_path, child, req.contains(&k.as_str()), out);
        }
    }
}

fn generate() -> String {
    let mut out = String::from(
        "# API reference (`netpolicy.io/v1alpha1`)\n\n\
         Generated from the CRDs (`netpolicy crds`, `deploy/crds.yaml`) by\n\
         `netpolicy-operator/tests/docs.rs`; do not edit by hand. Field descriptions are\n\
         the first paragraph of the schema's; *Rule* lines are the CEL validations the API\n\
         server enforces. How the kinds work together: [architecture](architecture.md).\n",
    );
    for crd in crds() {
        let v = serde_json::to_value(&crd).unwrap();
        let names = &v["spec"]["names"];
        let kind = names["kind"].as_str().unwrap();
        let version = &v["spec"]["versions"][0];
        let schema = &version["schema"]["openAPIV3Schema"];
        write!(out, "\n## {kind}\n\n").unwrap();
        let short: Vec<String> = names["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| format!("`{}`", s.as_str().unwrap()))
            .collect();
        // kube's derive describes the object generically; the spec's description says
        // what the kind is for.
        let mut about = one_line(schema["description"].as_str().unwrap_or_default());
        if about.starts_with("Auto-generated") {
            about = one_line(
                schema["properties"]["spec"]["description"]
                    .as_str()
                    .unwrap_or_default(),
            );
        }
        writeln!(
            out,
            "{}\n\n- Scope: {}; plural `{}`{}.",
            about,
            v["spec"]["scope"].as_str().unwrap(),
            names["plural"].as_str().unwrap(),
            if short.is_empty() {
                String::new()
            } else {
                format!("; short names {}", short.join(", "))
            }
        )
        .unwrap();
        let root_rules = rules(schema);
        if !root_rules.is_empty() {
            writeln!(out, "- Object rules:{root_rules}").unwrap();
        }
        let columns: Vec<String> = version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{} (`{}`)",
                    c["name"].as_str().unwrap(),
                    c["jsonPath"].as_str().unwrap()
                )
            })
            .collect();
        if !columns.is_empty() {
            writeln!(out, "- `kubectl get` columns: {}.", columns.join(", ")).unwrap();
        }
        for part in ["spec", "status"] {
            let p = &schema["properties"][part];
            if p.is_null() {
                continue;
            }
            write!(
                out,
                "\n### {part}\n\n| field | type | required | description |\n|---|---|---|---|\n"
            )
            .unwrap();
            let mut rows = String::new();
            fields("", p, false, &mut rows);
            if rows.is_empty() {
                rows.push_str("| (none) | | | |\n");
            }
            out.push_str(&rows);
        }
    }
    out
}

#[test]
fn the_api_reference_is_generated_from_the_crds() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    let want = generate();
    if std::env::var_os("NETPOLICY_WRITE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/api.md is stale: run `NETPOLICY_WRITE_DOCS=1 cargo test -p netpolicy-operator --test integration docs::`"
    );
    // Every kind is there, with its fields.
    for kind in [
        "ClusterConfig",
        "NodeConfig",
        "NodeNetworkConfig",
        "FloatingIPRange",
        "FloatingIP",
        "RouteReflectorConfig",
        "RoutedIPIssuer",
        "RoutedIP",
    ] {
        assert!(want.contains(&format!("\n## {kind}\n")), "{kind} missing");
    }
    assert!(want.contains("| `addresses[].dev` | string | yes |"));
}
