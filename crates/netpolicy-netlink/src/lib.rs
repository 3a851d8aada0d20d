//! # netpolicy-netlink
//!
//! The kernel adapter of netpolicy: reads a network namespace's links, addresses,
//! routes and rules through rtnetlink, marks what it creates as its own, and executes
//! [`netpolicy_core`]'s plans (`netpolicy_core::plan::Op`) with per-item results,
//! idempotently, without ever removing objects it did not create.
//!
//! **Status:** this crate is a placeholder in the workspace layout; its implementation
//! is tracked by the issue "netpolicy-netlink: apply a node's network config to the
//! kernel". It exports nothing yet.
