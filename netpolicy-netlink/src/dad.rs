//! Duplicate address detection: an address another host on the segment already uses is
//! never added.
//!
//! - IPv4 ([`probe_ipv4`]): ARP probes as RFC 5227 §2.1.1 describes them (an ARP request
//!   with sender protocol address 0.0.0.0, so no host's cache learns anything, and the
//!   prober's MAC as sender hardware address). The address is in use when, while
//!   probing, anyone sends an ARP packet with it as sender address (a reply to the
//!   probe, an announcement), or another host probes for it at the same time. Every
//!   interface and every address is probed at once, three probes each spread over one
//!   window ([`PROBE_WINDOW`], 300 ms): RFC 5227's message, not its timing (1 to 2 s
//!   between probes would hold a node with 200 addresses for seconds).
//! - IPv6: the kernel's own duplicate address detection (RFC 4862) runs on every
//!   address netpolicy adds; [`crate::Adapter`] reads the result (`IFA_F_DADFAILED`)
//!   and removes an address that failed it.
//!
//! Interfaces that do not use ARP (loopback, `NOARP`, no hardware address) are not
//! probed. Probing needs `CAP_NET_RAW` (an `AF_PACKET` socket), which the agent has.

use std::{
    collections::BTreeMap,
    io,
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use pnet_datalink::{Channel, ChannelType, Config, MacAddr, NetworkInterface};

use crate::Namespace;

/// How long IPv4 probing listens; three probes go out within it.
pub const PROBE_WINDOW: Duration = Duration::from_millis(300);

/// How long probing listens when an address netpolicy held a moment ago is restored
/// (drift repair): three probes within it, answered on a segment in well under a
/// millisecond; short enough for a repair within 100 ms (opening the packet socket and
/// the last read's timeout add 10 to 20 ms to it).
pub const RESTORE_WINDOW: Duration = Duration::from_millis(20);

/// Probes sent per address.
const PROBES: u32 = 3;

/// `IFF_NOARP`.
const IFF_NOARP: u32 = 0x80;

/// What probing found for one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Nobody answered: the address is free on this segment.
    Free,
    /// Another host uses (or probes for) it; its MAC (`aa:bb:cc:dd:ee:ff`).
    InUse(String),
    /// Nothing to probe: the interface does not use ARP (loopback, `NOARP`, no hardware
    /// address), so no other host can answer for the address there.
    NoArp(String),
    /// The probe could not run, and why (no interface, the link down or without
    /// carrier, no `CAP_NET_RAW` for the packet socket): the address was not checked.
    NotProbed(String),
}

/// Probes each `(interface, address)` in `ns` ([module docs](self)), all at once, for
/// `window`. The answers are in the order of `targets`.
///
/// # Errors
/// The namespace cannot be entered or its interfaces not listed.
pub fn probe_ipv4(
    ns: &Namespace,
    targets: &[(String, Ipv4Addr)],
    window: Duration,
) -> io::Result<Vec<Probe>> {
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let targets = targets.to_vec();
    crate::probe::in_namespace(ns, move || {
        let interfaces = pnet_datalink::interfaces();
        let mut per_link: BTreeMap<&str, Vec<Ipv4Addr>> = BTreeMap::new();
        for (dev, ip) in &targets {
            per_link.entry(dev.as_str()).or_default().push(*ip);
        }
        // One thread per interface (created here, so inside the namespace).
        let found: BTreeMap<(String, Ipv4Addr), Probe> = std::thread::scope(|s| {
            let handles: Vec<_> = per_link
                .iter()
                .map(|(dev, ips)| {
                    let iface = interfaces.iter().find(|i| i.name == *dev).cloned();
                    let dev = (*dev).to_owned();
                    let ips = ips.clone();
                    s.spawn(move || {
                        let answers = match iface {
                            None => {
                                vec![Probe::NotProbed(format!("no interface {dev}")); ips.len()]
                            }
                            Some(i) => probe_link(&i, &ips, window),
                        };
                        ips.into_iter()
                            .zip(answers)
                            .map(|(ip, a)| ((dev.clone(), ip), a))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        Ok(targets
            .iter()
            .map(|t| {
                found
                    .get(t)
                    .cloned()
                    .unwrap_or_else(|| Probe::NotProbed("the probe's thread failed".into()))
            })
            .collect())
    })
}

/// Probes `ips` on one interface.
fn probe_link(iface: &NetworkInterface, ips: &[Ipv4Addr], window: Duration) -> Vec<Probe> {
    let not = |why: String| vec![Probe::NotProbed(why); ips.len()];
    let no_arp = |why: String| vec![Probe::NoArp(why); ips.len()];
    let Some(mac) = iface.mac.filter(|m| *m != MacAddr::zero()) else {
        return no_arp(format!("{} has no hardware address", iface.name));
    };
    if iface.is_loopback() || iface.flags & IFF_NOARP != 0 {
        return no_arp(format!("{} does not use ARP", iface.name));
    }
    if !iface.is_up() {
        return not(format!("{} is down", iface.name));
    }
    // Up without carrier (its peer or cable gone, or carrier not taken up by the kernel
    // yet on a fresh link): the probes would go nowhere, and every address would look
    // free.
    if !iface.is_running() {
        return not(format!("{} has no carrier", iface.name));
    }
    let config = Config {
        read_timeout: Some(Duration::from_millis(10)),
        channel_type: ChannelType::Layer2,
        // Replies come to our MAC, announcements and other probes are broadcast: no
        // promiscuous mode (which would also be a link change every probe).
        promiscuous: false,
        ..Config::default()
    };
    let (mut tx, mut rx) = match pnet_datalink::channel(iface, config) {
        Ok(Channel::Ethernet(tx, rx)) => (tx, rx),
        Ok(_) => return not("no Ethernet channel".into()),
        Err(e) => return not(format!("{}: {e}", iface.name)),
    };
    let mut answers = vec![Probe::Free; ips.len()];
    let start = Instant::now();
    let mut sent = 0;
    loop {
        let now = Instant::now();
        if sent < PROBES && now >= start + window * sent / PROBES {
            for ip in ips {
                if let Some(Err(e)) = tx.send_to(&arp_probe(mac, *ip), None) {
                    return not(format!("sending on {}: {e}", iface.name));
                }
            }
            sent += 1;
        }
        if sent == PROBES && now >= start + window {
            return answers;
        }
        match rx.next() {
            Ok(frame) => {
                if let Some((k, by)) = claim(frame, mac, ips) {
                    answers[k] = Probe::InUse(by.to_string());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut
                        | io::ErrorKind::WouldBlock
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return not(format!("reading on {}: {e}", iface.name)),
        }
    }
}

/// An Ethernet broadcast frame holding an ARP probe for `ip` from `mac`.
fn arp_probe(mac: MacAddr, ip: Ipv4Addr) -> Vec<u8> {
    let mac: [u8; 6] = mac.octets();
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&[0xff; 6]); // destination: broadcast
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06]); // ARP
    f.extend_from_slice(&[0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01]); // Ethernet, IPv4, request
    f.extend_from_slice(&mac); // sender hardware address
    f.extend_from_slice(&[0; 4]); // sender protocol address 0.0.0.0: a probe
    f.extend_from_slice(&[0; 6]); // target hardware address: unknown
    f.extend_from_slice(&ip.octets());
    f
}

/// Whether `frame` (Ethernet) is an ARP packet from another host claiming one of `ips`:
/// sending with it as its address, or probing for it too. The index and that host's MAC.
fn claim(frame: &[u8], mac: MacAddr, ips: &[Ipv4Addr]) -> Option<(usize, MacAddr)> {
    let arp = frame.get(14..42)?;
    if frame.get(12..14)? != [0x08, 0x06] || arp[0..6] != [0x00, 0x01, 0x08, 0x00, 6, 4] {
        return None;
    }
    let sha = MacAddr::new(arp[8], arp[9], arp[10], arp[11], arp[12], arp[13]);
    if sha == mac {
        return None; // our own probe, seen going out
    }
    let spa = Ipv4Addr::new(arp[14], arp[15], arp[16], arp[17]);
    let tpa = Ipv4Addr::new(arp[24], arp[25], arp[26], arp[27]);
    let request = arp[6..8] == [0x00, 0x01];
    ips.iter()
        .position(|ip| spa == *ip || (request && spa.is_unspecified() && tpa == *ip))
        .map(|k| (k, sha))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_a_request_from_nobody_and_an_answer_names_the_claimant() {
        let ours = MacAddr::new(2, 0, 0, 0, 0, 1);
        let theirs = MacAddr::new(2, 0, 0, 0, 0, 2);
        let ip = Ipv4Addr::new(192, 0, 2, 7);
        let probe = arp_probe(ours, ip);
        assert_eq!(probe.len(), 42);
        assert_eq!(&probe[28..32], &[0, 0, 0, 0], "sender address 0.0.0.0");
        assert_eq!(claim(&probe, ours, &[ip]), None, "our own probe");
        // Another host probing for the same address at the same time: a conflict.
        assert_eq!(
            claim(&arp_probe(theirs, ip), ours, &[ip]),
            Some((0, theirs))
        );
        // A reply: sender address = the probed address.
        let mut reply = arp_probe(theirs, Ipv4Addr::new(192, 0, 2, 9));
        reply[20..22].copy_from_slice(&[0, 2]);
        reply[28..32].copy_from_slice(&ip.octets());
        assert_eq!(
            claim(&reply, ours, &[Ipv4Addr::new(192, 0, 2, 1), ip]),
            Some((1, theirs))
        );
        // Not ARP, or too short: nothing.
        let mut ipv4 = reply.clone();
        ipv4[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(claim(&ipv4, ours, &[ip]), None);
        assert_eq!(claim(&reply[..30], ours, &[ip]), None);
    }
}
