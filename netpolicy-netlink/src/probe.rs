//! Reachability probes inside a network namespace: what the node agent checks after it
//! applies a change (`probes` of ClusterConfig and NodeConfig). A socket belongs to the
//! namespace it is made in, so each probe runs on a short-lived thread that enters the
//! namespace; the calling thread never changes namespace.
//!
//! - [`ping`]: one ICMP (or ICMPv6) echo answered within the timeout. An unprivileged
//!   ping socket is used when `net.ipv4.ping_group_range` allows it, else a raw socket
//!   (`CAP_NET_RAW`).
//! - [`tcp`]: a TCP connection accepted within the timeout (then closed).

use std::{
    fs::File,
    io,
    net::{IpAddr, SocketAddr},
    os::fd::AsFd,
    time::{Duration, Instant},
};

use socket2::{Domain, Protocol, Socket, Type};

use crate::Namespace;

/// Runs `f` in `ns` (on a thread that entered it, for a named or path namespace).
pub(crate) fn in_namespace<T: Send + 'static>(
    ns: &Namespace,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let path = match ns {
        Namespace::Current => return f(),
        Namespace::Named(n) => std::path::PathBuf::from("/run/netns").join(n),
        Namespace::Path(p) => p.clone(),
    };
    std::thread::spawn(move || {
        let file = File::open(&path)?;
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(io::Error::from)?;
        f()
    })
    .join()
    .map_err(|_| io::Error::other("the probe's thread panicked"))?
}

/// Whether `ip` answers an ICMP echo from `ns` within `timeout`.
///
/// # Errors
/// No reply in time, the destination unreachable (a blackhole, no route), or no ICMP
/// socket could be made; the message says which.
pub fn ping(ns: &Namespace, ip: IpAddr, timeout: Duration) -> io::Result<()> {
    in_namespace(ns, move || ping_here(ip, timeout))
}

/// Whether `addr` accepts a TCP connection from `ns` within `timeout`.
///
/// # Errors
/// Refused, unreachable or no answer in time.
pub fn tcp(ns: &Namespace, addr: SocketAddr, timeout: Duration) -> io::Result<()> {
    in_namespace(ns, move || {
        std::net::TcpStream::connect_timeout(&addr, timeout).map(drop)
    })
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let word = u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn ping_here(ip: IpAddr, timeout: Duration) -> io::Result<()> {
    let (domain, protocol, request, reply) = match ip {
        IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4, 8u8, 0u8),
        IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6, 128u8, 129u8),
    };
    // An unprivileged ping socket when allowed (the kernel sets the identifier and the
    // checksum), else a raw one.
    let (sock, raw) = match Socket::new(domain, Type::DGRAM, Some(protocol)) {
        Ok(s) => (s, false),
        Err(_) => (Socket::new(domain, Type::RAW, Some(protocol))?, true),
    };
    let ident = (std::process::id() & 0xffff) as u16;
    let seq: u16 = 1;
    let mut packet = vec![request, 0, 0, 0];
    packet.extend_from_slice(&ident.to_be_bytes());
    packet.extend_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(b"netpolicy-probe!");
    if ip.is_ipv4() {
        let c = checksum(&packet);
        packet[2..4].copy_from_slice(&c.to_be_bytes());
    }
    // std's datagram calls work on any AF_INET/AF_INET6 datagram or raw socket.
    let sock: std::net::UdpSocket = sock.into();
    sock.send_to(&packet, SocketAddr::new(ip, 0))?;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 1500];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no echo reply from {ip} within {timeout:?}"),
            ));
        }
        sock.set_read_timeout(Some(left))?;
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        let data = buf[..n].to_vec();
        // A raw IPv4 socket hands over the IP header too.
        let icmp = if raw && ip.is_ipv4() {
            let ihl = usize::from(data.first().copied().unwrap_or(0) & 0x0f) * 4;
            data.get(ihl..).unwrap_or_default().to_vec()
        } else {
            data
        };
        let from_ip = Some(from.ip());
        let matches_id = !raw || icmp.get(4..6) == Some(&ident.to_be_bytes()[..]);
        if icmp.first() == Some(&reply) && from_ip == Some(ip) && matches_id {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_is_the_internet_checksum() {
        // RFC 1071's example: 0001 f203 f4f5 f6f7 sums to ddf2, complement 220d.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
    }

    #[test]
    fn tcp_probes_a_listener_and_a_closed_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        tcp(&Namespace::Current, addr, Duration::from_secs(2)).unwrap();
        drop(l);
        assert!(tcp(&Namespace::Current, addr, Duration::from_secs(2)).is_err());
    }
}
