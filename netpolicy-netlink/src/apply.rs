//! Carrying out operations: in the planner's stages, pipelined within a stage, each
//! operation's netlink messages and their outcome.

use super::*;

impl Adapter {
    /// Executes `ops` in order, pipelining consecutive operations of the same kind.
    ///
    /// # Errors
    /// Only when the socket fails.
    pub fn apply(&mut self, ops: &[Op]) -> Result<Vec<OpResult>> {
        let mut results = Vec::with_capacity(ops.len());
        let mut i = 0;
        // Interface indexes may have changed since the last observation.
        self.refresh_links()?;
        while i < ops.len() {
            let stage = stage(&ops[i]);
            let mut j = i;
            while j < ops.len() && self::stage(&ops[j]) == stage {
                j += 1;
            }
            if stage == 4 {
                // Links were created: later operations name them. Each new link is
                // marked as ours only once its own create succeeded.
                let mut created = self.run(&ops[i..j])?;
                self.refresh_links()?;
                self.mark_created(&mut created)?;
                results.extend(created);
            } else if stage == 7 {
                results.extend(self.add_addresses(&ops[i..j])?);
            } else {
                results.extend(self.run(&ops[i..j])?);
            }
            i = j;
        }
        Ok(results)
    }

    /// Sets the ownership alias on every link whose create answered success.
    pub(crate) fn mark_created(&mut self, created: &mut [OpResult]) -> Result<()> {
        let mut requests = Vec::new();
        let mut which = Vec::new();
        for (k, r) in created.iter_mut().enumerate() {
            let Op::CreateLink(v) = &r.op else { continue };
            if r.outcome != Outcome::Done {
                continue;
            }
            match self.index(&v.name) {
                Ok(i) => {
                    requests.push((RouteNetlinkMessage::SetLink(codec::alias_message(i)), 0));
                    which.push(k);
                }
                Err(message) => {
                    r.outcome = Outcome::Failed {
                        errno: None,
                        message: format!("created, then vanished before it was marked: {message}"),
                    };
                }
            }
        }
        for (k, answer) in which.into_iter().zip(self.conn.execute(requests)?) {
            if let Err(e) = answer {
                created[k].outcome = Outcome::Failed {
                    errno: Some(e.errno),
                    message: format!(
                        "created, but marking it as netpolicy's failed: {}",
                        e.message
                    ),
                };
            }
        }
        Ok(())
    }

    pub(crate) fn run(&mut self, ops: &[Op]) -> Result<Vec<OpResult>> {
        // The kernel inserts a rule after walking the rules of lower priority: adding
        // in descending priority makes every insertion stop at the first rule.
        if ops.iter().all(|o| matches!(o, Op::AddRule { .. })) {
            let mut order: Vec<usize> = (0..ops.len()).collect();
            order.sort_by_key(|i| match &ops[*i] {
                Op::AddRule { rule, .. } => std::cmp::Reverse(rule.key.priority),
                _ => std::cmp::Reverse(0),
            });
            let sorted: Vec<Op> = order.iter().map(|i| ops[*i].clone()).collect();
            let results = self.run_in_order(&sorted)?;
            let mut out: Vec<Option<OpResult>> = vec![None; ops.len()];
            for (k, r) in order.into_iter().zip(results) {
                out[k] = Some(r);
            }
            return Ok(out.into_iter().flatten().collect());
        }
        self.run_in_order(ops)
    }

    pub(crate) fn run_in_order(&mut self, ops: &[Op]) -> Result<Vec<OpResult>> {
        // Each op becomes one or two requests; remember which.
        let mut requests = Vec::new();
        let mut plan: Vec<std::result::Result<usize, String>> = Vec::with_capacity(ops.len());
        for op in ops {
            match self.messages(op) {
                Ok(msgs) => {
                    plan.push(Ok(msgs.len()));
                    requests.extend(msgs);
                }
                Err(e) => plan.push(Err(e)),
            }
        }
        let answers = self.conn.execute(requests)?;
        let mut answers = answers.into_iter();
        let mut out = Vec::with_capacity(ops.len());
        for (op, p) in ops.iter().zip(plan) {
            let outcome = match p {
                Err(message) => Outcome::Failed {
                    errno: None,
                    message,
                },
                Ok(n) => {
                    let mine: Vec<_> = answers.by_ref().take(n).collect();
                    outcome(op, &mine)
                }
            };
            out.push(OpResult {
                op: op.clone(),
                outcome,
            });
        }
        Ok(out)
    }

    pub(crate) fn index(&self, name: &IfName) -> std::result::Result<u32, String> {
        self.links.index_of(name)
    }

    pub(crate) fn messages(
        &self,
        op: &Op,
    ) -> std::result::Result<Vec<(RouteNetlinkMessage, u16)>, String> {
        let p = self.own.route_protocol;
        Ok(match op {
            Op::DeleteRule {
                family,
                rule,
                protocol,
            } => vec![(
                RouteNetlinkMessage::DelRule(codec::rule_message(*family, rule, *protocol)),
                0,
            )],
            Op::DeleteRoute { route, protocol } => vec![(
                RouteNetlinkMessage::DelRoute(codec::route_delete_message(
                    route,
                    *protocol,
                    &self.links,
                )),
                0,
            )],
            Op::DeleteAddress { dev, address } => vec![(
                RouteNetlinkMessage::DelAddress(codec::address_message(
                    self.index(dev)?,
                    *address,
                    None,
                )),
                0,
            )],
            Op::DeleteLink(dev) => {
                let mut m = LinkMessage::default();
                m.header.index = self.index(dev)?;
                vec![(RouteNetlinkMessage::DelLink(m), 0)]
            }
            // The ownership alias follows once this create answered success
            // (`mark_created`): never on a link someone else made under this name.
            Op::CreateLink(v) => vec![(
                RouteNetlinkMessage::NewLink(codec::vlan_message(v, self.index(&v.link)?)),
                NLM_F_CREATE | NLM_F_EXCL,
            )],
            Op::SetMtu { dev, mtu } => vec![(
                RouteNetlinkMessage::SetLink(codec::link_set(self.index(dev)?, false, Some(*mtu))),
                0,
            )],
            Op::SetUp(dev) => vec![(
                RouteNetlinkMessage::SetLink(codec::link_set(self.index(dev)?, true, None)),
                0,
            )],
            Op::AddAddress { dev, address } => vec![(
                RouteNetlinkMessage::NewAddress(codec::address_message(
                    self.index(dev)?,
                    *address,
                    Some(p),
                )),
                NLM_F_CREATE | NLM_F_EXCL,
            )],
            Op::DeleteLocalRoute { dev, address } => vec![(
                RouteNetlinkMessage::DelRoute(codec::local_route_delete_message(
                    self.index(dev)?,
                    *address,
                )),
                0,
            )],
            Op::ReplaceRoute(r) => vec![(
                RouteNetlinkMessage::NewRoute(codec::route_message(r, p, &self.links)?),
                NLM_F_CREATE | NLM_F_REPLACE,
            )],
            Op::AddRoute(r) => vec![(
                RouteNetlinkMessage::NewRoute(codec::route_message(r, p, &self.links)?),
                NLM_F_CREATE,
            )],
            // No NLM_F_EXCL: the kernel's duplicate check walks every rule, O(n²) for n
            // rules. The plan adds only rules the fresh dump did not show; a duplicate
            // made by a concurrent writer is harmless and is deleted with its twin.
            Op::AddRule { family, rule } => vec![(
                RouteNetlinkMessage::NewRule(codec::rule_message(*family, rule, p)),
                NLM_F_CREATE,
            )],
            Op::ReplaceRule { family, old, new } => vec![
                (
                    RouteNetlinkMessage::DelRule(codec::rule_message(*family, old, p)),
                    0,
                ),
                (
                    RouteNetlinkMessage::NewRule(codec::rule_message(*family, new, p)),
                    NLM_F_CREATE,
                ),
            ],
        })
    }
}

/// Execution stages: the planner's order (deletes, links, MTU, up, addresses, routes,
/// rules). Operations of one stage are independent and are pipelined together.
pub(crate) fn stage(op: &Op) -> u8 {
    match op {
        Op::DeleteRule { .. } => 0,
        Op::DeleteRoute { .. } => 1,
        Op::DeleteAddress { .. } => 2,
        Op::DeleteLink(_) => 3,
        Op::CreateLink(_) => 4,
        Op::SetMtu { .. } => 5,
        Op::SetUp(_) => 6,
        Op::AddAddress { .. } => 7,
        Op::DeleteLocalRoute { .. } | Op::ReplaceRoute(_) | Op::AddRoute(_) => 8,
        Op::AddRule { .. } | Op::ReplaceRule { .. } => 9,
    }
}

pub(crate) fn outcome(op: &Op, answers: &[std::result::Result<(), KernelError>]) -> Outcome {
    let deleting = op.is_delete();
    let mut result = Outcome::Done;
    for (k, a) in answers.iter().enumerate() {
        // A ReplaceRule's first request is a delete.
        let is_delete = deleting || (matches!(op, Op::ReplaceRule { .. }) && k == 0);
        match a {
            Ok(()) => {}
            Err(e) if is_delete && matches!(e.errno, ENOENT | ESRCH | ENODEV | EADDRNOTAVAIL) => {
                if deleting {
                    result = Outcome::AlreadyGone;
                }
            }
            // A link of that name exists that the observation did not show as ours:
            // not success (it is not the VLAN asked for, and it is never marked).
            Err(e) if matches!(op, Op::CreateLink(_)) && e.errno == EEXIST => {
                return Outcome::Failed {
                    errno: Some(e.errno),
                    message: "a link with this name already exists and is not netpolicy's".into(),
                };
            }
            Err(e) if !is_delete && e.errno == EEXIST => result = Outcome::AlreadyPresent,
            Err(e) => {
                return Outcome::Failed {
                    errno: Some(e.errno),
                    message: e.message.clone(),
                };
            }
        }
    }
    result
}
