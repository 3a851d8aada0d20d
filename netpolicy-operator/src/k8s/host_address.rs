//! Addresses jobs need on hosts: a fact the routed-IP job produces (where its IP is
//! held, and whether its provider wants it on the holder's OS) and the routing job
//! renders into NodeNetworkConfigs. It lives here, not in either job, because jobs do
//! not import each other.

use netpolicy_core::spec::AddressSpec;

use crate::api::RoutedIPIssuer;

/// The address a RoutedIP needs on its holder's host, when its provider needs one
/// there (Hetzner floating IPs: routed to the server, expected on an interface of its
/// OS; DigitalOcean reserved IPs are handled by the droplet's anchor and need none):
/// the holder `node` and the item, `address/32` (`/128`) on the issuer's `hostDevice`
/// (default `lo`). `None` when the provider needs nothing, or the holder or the address
/// is not known yet.
pub(crate) fn host_address(
    node: Option<&str>,
    address: Option<&str>,
    issuer: &RoutedIPIssuer,
) -> Option<(String, AddressSpec)> {
    let h = issuer.spec.hetzner.as_ref()?;
    let ip: std::net::IpAddr = address?.parse().ok()?;
    let len = if ip.is_ipv4() { 32 } else { 128 };
    Some((
        node?.to_owned(),
        AddressSpec {
            dev: h.host_device.clone().unwrap_or_else(|| "lo".into()),
            address: format!("{ip}/{len}"),
            ..Default::default()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hetzner_ips_with_a_holder_and_an_address_need_one_on_the_host() {
        let issuer = |spec: serde_json::Value| -> RoutedIPIssuer {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "netpolicy.io/v1alpha1", "kind": "RoutedIPIssuer",
                "metadata": {"name": "i"}, "spec": spec
            }))
            .unwrap()
        };
        let token = serde_json::json!({"namespace": "n", "name": "t"});
        let hz =
            issuer(serde_json::json!({"hetzner": {"tokenSecretRef": token, "location": "fsn1"}}));
        let hz_eth = issuer(
            serde_json::json!({"hetzner": {"tokenSecretRef": token, "location": "fsn1", "hostDevice": "eth0"}}),
        );
        let dig = issuer(
            serde_json::json!({"digitalocean": {"tokenSecretRef": token, "region": "fra1"}}),
        );
        let got = host_address(Some("a"), Some("198.51.100.7"), &hz).unwrap();
        assert_eq!(
            (got.0.as_str(), got.1.dev.as_str(), got.1.address.as_str()),
            ("a", "lo", "198.51.100.7/32")
        );
        assert_eq!(
            host_address(Some("a"), Some("2001:db8::7"), &hz_eth)
                .unwrap()
                .1
                .address,
            "2001:db8::7/128"
        );
        assert_eq!(
            host_address(Some("a"), Some("2001:db8::7"), &hz_eth)
                .unwrap()
                .1
                .dev,
            "eth0"
        );
        assert!(host_address(Some("a"), Some("198.51.100.7"), &dig).is_none());
        assert!(host_address(None, Some("198.51.100.7"), &hz).is_none());
        assert!(host_address(Some("a"), None, &hz).is_none());
    }
}
