//! AWS Elastic IPs and security groups over EC2's Query API (`https://ec2.<region>.amazonaws.com`).
//!
//! - **IPs**: `AllocateAddress` (domain `vpc`) tagged `netpolicy.io/cluster` and
//!   `netpolicy.io/routed-ip` on creation, found by address or by those tags
//!   (`DescribeAddresses`), assigned with `AssociateAddress` to the **primary network
//!   interface** of the node's instance (`spec.providerID` `aws:///<zone>/<instance-id>`)
//!   with `AllowReassociation`: a move from one node to another is one call and leaves no
//!   moment without a holder. Unassign is `DisassociateAddress`, delete is
//!   `DisassociateAddress` + `ReleaseAddress`. The address is NATed to the instance's
//!   private address: nothing is needed on the host.
//! - **Firewall**: a security group, found by name (`DescribeSecurityGroups`, in
//!   [`AwsIssuer::with_vpc`]'s VPC when set), created in that VPC (else the region's
//!   default VPC) when missing. Ports are ingress rules open to `0.0.0.0/0`
//!   (`AuthorizeSecurityGroupIngress` / `RevokeSecurityGroupIngress`; narrower rules are
//!   someone else's and are left alone). Nodes are the instances whose primary interface
//!   carries the group (`ModifyNetworkInterfaceAttribute` with the interface's other
//!   groups kept; those read-modify-writes are serialised within the process).
//! - **Credentials**: the AWS SDK's default chain (environment, web identity / IRSA, EKS
//!   pod identity, ECS, IMDSv2 instance profile), refreshed before they expire, or fixed
//!   keys ([`AwsIssuer::with_credentials`]). Every request is signed with the SDK's SigV4
//!   signer; the secret key never leaves the signer (not in errors, logs or `Debug`).
//! - **Errors**: EC2's error codes become [`Error`](crate::Error)s a person can act on
//!   (`AuthFailure`, `UnauthorizedOperation` → [`Error::Unauthorized`](crate::Error::Unauthorized);
//!   `…NotFound` → [`Error::NotFound`](crate::Error::NotFound); `AddressLimitExceeded` and the other limits →
//!   [`Error::LimitExceeded`](crate::Error::LimitExceeded); `RequestLimitExceeded` and throttling → retried with an
//!   exponential backoff, then [`Error::RateLimited`](crate::Error::RateLimited)). Each message starts with the
//!   action and EC2's code.
//!
//! Why EC2 Query calls and not `aws-sdk-ec2`: measured on the project's 2-core machine
//! (empty target directory each, same TLS stack: rustls on ring), the dependencies of
//! this path (`aws-config`, `aws-sigv4`, `roxmltree`, reqwest) build in 77 s (dev, 640 MB
//! of target) and 251 s (release); `aws-config` + `aws-sdk-ec2` 1.274 in 593 s (dev,
//! 2.2 GB) and over 748 s (release: stopped while `aws-sdk-ec2` itself was still
//! compiling). Rebuilds after a change to our code are under a second either way. EC2
//! has hundreds of operations and netpolicy calls twelve; their Query form is a
//! stable, documented wire format (API version 2016-11-15), and credentials and signing —
//! the parts that are easy to get subtly wrong — are still the SDK's own code.

// Without the feature the client is not compiled, and the links above to it do not resolve.
#![cfg_attr(not(feature = "aws"), allow(rustdoc::broken_intra_doc_links))]

use crate::provider::{Credentials, NodeId, Provider};

/// What netpolicy knows of this provider (with or without the `aws` feature).
pub const PROVIDER: Provider = Provider {
    key: "aws",
    what: "AWS Elastic IPs",
    node_id: Some(NodeId { prefix: "aws://", form: "aws:///<zone>/<instance-id>" }),
    endpoint: Some("https://ec2.<region>.amazonaws.com"),
    home: Some(("region", "eu-west-1")),
    credentials: Credentials::Aws,
};

#[cfg(feature = "aws")]
mod client;
#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub use client::*;
