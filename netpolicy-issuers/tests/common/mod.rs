//! What the provider tests share: the desired-state fixtures. The provider servers are
//! `netpolicy_testenv::cloud` (the operator's end-to-end tests use them too).

#![allow(dead_code, unreachable_pub)] // each test binary uses its own part

use netpolicy_issuers::{Desired, PortRule, Tags};

pub fn tags() -> Tags {
    Tags {
        cluster: "prod-eu".into(),
        routed_ip: "ingress".into(),
    }
}

/// The address on `node`, TCP `ports` open through the `web` firewall.
pub fn desired(node: &str, ports: &[u16]) -> Desired {
    Desired {
        node: Some(node.into()),
        firewall: Some("web".into()),
        ports: ports.iter().map(|p| PortRule::tcp(*p)).collect(),
    }
}
