//! The fuzz targets' bodies: each `run(data)` panics on a broken invariant. Driven by
//! libFuzzer (`fuzz_targets/`, cargo-fuzz on nightly) and, on stable, by
//! `netpolicy-operator/tests/fuzz.rs` in `scripts/test` (corpus, regressions, then
//! seeded mutations for a bounded time).

pub mod agent_plan;
pub mod ipam_ops;
pub mod plan_input;
pub mod rr_topology;
