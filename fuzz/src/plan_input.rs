//! Arbitrary bytes as a manifest file: YAML splitting and parsing, strict schema
//! checks, validation, selector matching and merge must never panic, and the merge
//! must be deterministic.

use std::path::Path;

use netpolicy_operator::{manifest::Manifests, plan::plan};

/// One input: panics on a broken invariant (a finding).
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut m = Manifests::default();
    m.add_text(Path::new("fuzz.yaml"), text);
    let a = plan(&m);
    let b = plan(&m);
    assert_eq!(
        serde_json::to_string(&a).ok(),
        serde_json::to_string(&b).ok(),
        "plan is deterministic"
    );
    // Every rendered node validates back to itself through the canonical wire form.
    for spec in a.nodes.values() {
        for r in &spec.routes {
            let _ = netpolicy_core::spec::RoutingSpec {
                routes: vec![r.item.clone()],
                ..Default::default()
            }
            .validate("spec")
            .expect("canonical output is valid input");
        }
    }
}
