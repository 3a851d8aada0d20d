//! libFuzzer entry of `netpolicy_fuzz::rr_topology` (cargo-fuzz, nightly); the same target
//! runs on stable in `scripts/test` (netpolicy-operator/tests/fuzz.rs).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netpolicy_fuzz::rr_topology::run(data));
