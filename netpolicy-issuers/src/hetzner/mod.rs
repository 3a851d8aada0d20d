//! Hetzner Cloud floating IPs and firewalls (`https://api.hetzner.cloud/v1`).
//!
//! - IPs are found by address or by the labels netpolicy puts on them
//!   (`netpolicy.io/cluster`, `netpolicy.io/routed-ip`), created with those labels in the
//!   configured home location, assigned to servers by the ID in the node's
//!   `spec.providerID` (`hcloud://<id>`).
//! - Firewall rules are replaced as a whole (`set_rules`), so adding or removing one port
//!   reads the firewall first and sends every other rule back unchanged. netpolicy
//!   manages only inbound rules open to everywhere (what it writes); narrower rules are
//!   left alone.
//! - Asynchronous actions are polled until `success` (an `error` status is a provider
//!   error with the action's message).
//! - 429 and 5xx are retried with backoff, honouring `Retry-After` (or `RateLimit-Reset`);
//!   requests time out after 30 s. The token is sent only in the `Authorization` header
//!   and never appears in errors, logs or `Debug` output.

// Without the feature the client is not compiled, and the links above to it do not resolve.
#![cfg_attr(not(feature = "hetzner"), allow(rustdoc::broken_intra_doc_links))]

use crate::provider::{Credentials, NodeId, Provider};

/// The API's base URL.
pub const BASE_URL: &str = "https://api.hetzner.cloud/v1";

/// What netpolicy knows of this provider (with or without the `hetzner` feature).
pub const PROVIDER: Provider = Provider {
    key: "hetzner",
    what: "Hetzner Cloud floating IPs",
    node_id: Some(NodeId { prefix: "hcloud://", form: "hcloud://<server id>" }),
    endpoint: Some(BASE_URL),
    home: Some(("location", "fsn1")),
    credentials: Credentials::Token,
};

#[cfg(feature = "hetzner")]
mod client;
#[cfg(feature = "hetzner")]
#[cfg_attr(docsrs, doc(cfg(feature = "hetzner")))]
pub use client::*;
