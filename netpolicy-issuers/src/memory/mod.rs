//! An in-process provider for tests, demos and embedding, with fault injection: any call
//! can be made to fail (rate limits with `Retry-After`, conflicts, provider errors) by a
//! scripted sequence or slowed by a fixed latency, and every change is recorded so that
//! tests can check what the cloud would have seen at every moment.

// Without the feature the client is not compiled, and the links above to it do not resolve.
#![cfg_attr(not(feature = "memory"), allow(rustdoc::broken_intra_doc_links))]

use crate::provider::{Credentials, Provider};

/// What netpolicy knows of this provider (with or without the `memory` feature).
pub const PROVIDER: Provider = Provider {
    key: "memory",
    what: "in-process IPs, for tests and demos",
    node_id: None,
    endpoint: None,
    home: None,
    credentials: Credentials::None,
};

#[cfg(feature = "memory")]
mod client;
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub use client::*;
