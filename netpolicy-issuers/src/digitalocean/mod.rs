//! DigitalOcean reserved IPs and cloud firewalls (`https://api.digitalocean.com/v2`).
//!
//! - Reserved IPs carry no tags or labels in DigitalOcean's API, so an IP is found by its
//!   address only: record the address that [`crate::reconcile`] returns (a RoutedIP's
//!   `status.address`) and pass it back. Looking up by tags finds nothing, and a new IP
//!   is created in the configured region.
//! - Assignment and unassignment are actions (`POST /reserved_ips/{ip}/actions`), polled
//!   until `completed` (`errored` is a provider error).
//! - Firewall rules and droplets are added and removed one at a time
//!   (`/firewalls/{id}/rules`, `/firewalls/{id}/droplets`); netpolicy manages inbound
//!   rules open to everywhere only and never touches narrower ones.
//! - Droplets are named by the node's `spec.providerID`, `digitalocean://<droplet id>`.
//! - Retries, timeouts and token handling: see [`Api`].

// Without the feature the client is not compiled, and the links above to it do not resolve.
#![cfg_attr(not(feature = "digitalocean"), allow(rustdoc::broken_intra_doc_links))]

use crate::provider::{Credentials, NodeId, Provider};

/// The API's base URL.
pub const BASE_URL: &str = "https://api.digitalocean.com/v2";

/// What netpolicy knows of this provider (with or without the `digitalocean` feature).
pub const PROVIDER: Provider = Provider {
    key: "digitalocean",
    what: "DigitalOcean reserved IPs",
    node_id: Some(NodeId { prefix: "digitalocean://", form: "digitalocean://<droplet id>" }),
    endpoint: Some(BASE_URL),
    home: Some(("region", "fra1")),
    credentials: Credentials::Token,
};

#[cfg(feature = "digitalocean")]
mod client;
#[cfg(feature = "digitalocean")]
#[cfg_attr(docsrs, doc(cfg(feature = "digitalocean")))]
pub use client::*;
