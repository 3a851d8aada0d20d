//! # netpolicy-issuers
//!
//! Routed cloud IPs for netpolicy: an issuer trait (find, create, delete, assign,
//! unassign, firewall rules), pure election and availability-preserving failover plans,
//! and provider clients (memory, DigitalOcean, Hetzner Cloud) behind cargo features.
//!
//! The planning half is pure; the providers carry the HTTP effects.
//!
//! **Status:** this crate is a placeholder in the workspace layout; its implementation
//! is tracked by the issue "netpolicy-issuers: routed cloud IPs". It exports nothing
//! yet.
