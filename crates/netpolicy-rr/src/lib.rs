//! # netpolicy-rr
//!
//! Calico BGP route-reflector topology for netpolicy: how many reflectors per zone,
//! which nodes, which `BGPPeer` objects, and a make-before-break plan for moving
//! between topologies without dropping a node's last session.
//!
//! Pure: no I/O, no clock, no randomness.
//!
//! **Status:** this crate is a placeholder in the workspace layout; its implementation
//! is tracked by the issue "netpolicy-rr: Calico route-reflector topology". It exports
//! nothing yet.
