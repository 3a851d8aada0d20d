//! Adding addresses: IPv4 duplicate detection before, IPv6 duplicate address detection
//! after.

use super::*;

impl Adapter {
    /// Adds addresses that no other host on their segment uses ([`dad`]): known
    /// duplicates are refused at once, IPv4 addresses are probed first (every one at
    /// once), IPv6 addresses that fail the kernel's DAD are removed again. When every
    /// IPv4 address a pass adds is a repair (it was in the kernel as desired when the
    /// last pass of this same desired state ended, until someone removed it), the probe
    /// listens for [`dad::RESTORE_WINDOW`] instead of the full window: another host that
    /// took the address meanwhile still answers, and drift is repaired within 100 ms.
    pub(crate) fn add_addresses(&mut self, ops: &[Op]) -> Result<Vec<OpResult>> {
        let mut unprobed: Vec<Option<String>> = vec![None; ops.len()];
        let mut verdict: Vec<Option<Outcome>> = ops
            .iter()
            .map(|op| match op {
                Op::AddAddress { dev, address } => self
                    .duplicates
                    .get(&(dev.clone(), *address))
                    .map(|by| Outcome::Duplicate { by: by.clone() }),
                _ => None,
            })
            .collect();
        if let Some(window) = self.dad {
            let restoring_only = ops
                .iter()
                .filter(|op| {
                    matches!(
                        op,
                        Op::AddAddress {
                            address: IpNetwork::V4(_),
                            ..
                        }
                    )
                })
                .all(|op| self.restoring.contains(op));
            let window = if restoring_only {
                window.min(dad::RESTORE_WINDOW)
            } else {
                window
            };
            let targets: Vec<(usize, String, std::net::Ipv4Addr)> = ops
                .iter()
                .enumerate()
                .filter(|(k, _)| verdict[*k].is_none())
                .filter_map(|(k, op)| match op {
                    Op::AddAddress {
                        dev,
                        address: IpNetwork::V4(a),
                    } => Some((k, dev.to_string(), a.ip())),
                    _ => None,
                })
                .collect();
            let asked: Vec<(String, std::net::Ipv4Addr)> =
                targets.iter().map(|(_, d, ip)| (d.clone(), *ip)).collect();
            let probes = dad::probe_ipv4(&self.ns, &asked, window)
                .map_err(conn::io("ARP probes before adding addresses"))?;
            for ((k, _, _), p) in targets.iter().zip(probes) {
                match p {
                    dad::Probe::InUse(mac) => {
                        if let Op::AddAddress { dev, address } = &ops[*k] {
                            self.duplicates
                                .insert((dev.clone(), *address), Some(mac.clone()));
                        }
                        verdict[*k] = Some(Outcome::Duplicate { by: Some(mac) });
                    }
                    dad::Probe::NotProbed(why) => unprobed[*k] = Some(why),
                    dad::Probe::Free | dad::Probe::NoArp(_) => {}
                }
            }
        }
        let to_run: Vec<Op> = ops
            .iter()
            .zip(&verdict)
            .filter(|(_, v)| v.is_none())
            .map(|(op, _)| op.clone())
            .collect();
        let mut ran = self.run(&to_run)?.into_iter();
        let mut out = Vec::with_capacity(ops.len());
        for ((op, v), why) in ops.iter().zip(verdict).zip(unprobed) {
            match v {
                Some(outcome) => out.push(OpResult {
                    op: op.clone(),
                    outcome,
                }),
                None => out.extend(ran.next().map(|mut r| {
                    if let (Outcome::Done, Some(why)) = (&r.outcome, why) {
                        r.outcome = Outcome::Unprobed { why };
                    }
                    r
                })),
            }
        }
        if self.dad.is_some() {
            self.ipv6_dad(&mut out)?;
        }
        Ok(out)
    }

    /// Waits (at most [`IPV6_DAD_WAIT`]) for the kernel's duplicate address detection
    /// of the IPv6 addresses just added; those that failed it are removed again and
    /// become [`Outcome::Duplicate`].
    pub(crate) fn ipv6_dad(&mut self, out: &mut [OpResult]) -> Result<()> {
        use netlink_packet_route::address::{AddressAttribute, AddressFlags};
        let added: Vec<(usize, u32, std::net::IpAddr)> = out
            .iter()
            .enumerate()
            .filter(|(_, r)| r.outcome == Outcome::Done)
            .filter_map(|(k, r)| match &r.op {
                Op::AddAddress {
                    dev,
                    address: IpNetwork::V6(a),
                } => Some((k, self.index(dev).ok()?, std::net::IpAddr::V6(a.ip()))),
                _ => None,
            })
            .collect();
        if added.is_empty() {
            return Ok(());
        }
        let deadline = std::time::Instant::now() + IPV6_DAD_WAIT;
        let mut failed: BTreeSet<usize> = BTreeSet::new();
        loop {
            let mut m = AddressMessage::default();
            m.header.family = AddressFamily::Inet6;
            let mut state: BTreeMap<(u32, std::net::IpAddr), (bool, bool)> = BTreeMap::new();
            for msg in self.conn.dump(RouteNetlinkMessage::GetAddress(m))? {
                let RouteNetlinkMessage::NewAddress(a) = msg else {
                    continue;
                };
                let Some((net, _)) = codec::address_from(&a) else {
                    continue;
                };
                let flags = a
                    .attributes
                    .iter()
                    .find_map(|x| match x {
                        AddressAttribute::Flags(f) => Some(*f),
                        _ => None,
                    })
                    .unwrap_or_else(|| {
                        AddressFlags::from_bits_truncate(u32::from(a.header.flags.bits()))
                    });
                state.insert(
                    (a.header.index, net.ip()),
                    (
                        flags.contains(AddressFlags::Tentative),
                        flags.contains(AddressFlags::Dadfailed),
                    ),
                );
            }
            let mut pending = false;
            for (k, index, ip) in &added {
                match state.get(&(*index, *ip)) {
                    Some((_, true)) => {
                        failed.insert(*k);
                    }
                    Some((true, false)) => pending = true,
                    _ => {}
                }
            }
            if !pending || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        for k in failed {
            if let Op::AddAddress { dev, address } = out[k].op.clone() {
                let removed = self.run(&[Op::DeleteAddress {
                    dev: dev.clone(),
                    address,
                }])?;
                let by = removed
                    .iter()
                    .find(|r| !r.outcome.is_ok())
                    .map(|r| format!("(and could not be removed again: {:?})", r.outcome));
                self.duplicates.insert((dev, address), None);
                out[k].outcome = Outcome::Duplicate { by };
            }
        }
        Ok(())
    }
}
