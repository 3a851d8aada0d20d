//! # netpolicy-ipam
//!
//! Floating IP pools and hierarchical prefix allocation for netpolicy: pools from CIDRs,
//! ranges and exclusions with exact `u128` capacity for any size, static and dynamic
//! allocation with an owner per address, snapshot and restore, and child prefixes
//! carved from a parent (Meridio-style trench → conduit → node IPAM).
//!
//! Pure: no I/O, no clock, no randomness.
//!
//! **Status:** this crate is a placeholder in the workspace layout; its implementation
//! is tracked by the issue "netpolicy-ipam: floating IP pools at any size". It exports
//! nothing yet.
