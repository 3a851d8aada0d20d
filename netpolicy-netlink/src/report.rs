//! What a pass reports: each operation's outcome, the whole pass, what was disowned,
//! and how netpolicy recognises its own objects.

use super::*;

/// One object [`Adapter::disown`] gave up, and how that went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disowned {
    /// The object in the readable form `plan` prints (`route 10.0.0.0/8 via … table 100`).
    pub what: String,
    /// Its outcome ([`Outcome::Done`], or why the kernel refused).
    pub outcome: Outcome,
}

/// How netpolicy recognises its own kernel objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// Route protocol of owned routes and rules.
    pub route_protocol: u8,
}

impl Default for Ownership {
    fn default() -> Self {
        Self {
            route_protocol: DEFAULT_PROTOCOL,
        }
    }
}

impl Ownership {
    /// Whether a route or rule the kernel reports with `protocol` is netpolicy's.
    pub fn owns(&self, protocol: u8) -> bool {
        protocol == self.route_protocol
    }
}

/// What happened to one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done.
    Done,
    /// An add found the object already there (`EEXIST`).
    AlreadyPresent,
    /// A delete found the object already gone.
    AlreadyGone,
    /// Not applied: a dry run.
    Planned,
    /// Not added: another host on the segment uses the address (an ARP reply to
    /// netpolicy's probe, or the kernel's IPv6 duplicate address detection failed and
    /// the address was removed again). `by`: what is known of that host (its MAC for
    /// IPv4).
    Duplicate {
        /// The other host's MAC, when known.
        by: Option<String>,
    },
    /// Added, but without a duplicate address check: the ARP probe could not run
    /// (`why`: the link down, no `CAP_NET_RAW`, ...). Another host may use the
    /// address; the agent says so in its status (`notProbed`).
    Unprobed {
        /// Why the probe could not run.
        why: String,
    },
    /// Refused; the other operations went on.
    Failed {
        /// The kernel's errno, when the kernel refused.
        errno: Option<i32>,
        /// What went wrong.
        message: String,
    },
}

impl std::fmt::Display for Outcome {
    /// `done`, `already there`, `not added: in use by 02:00:00:00:00:02`, `refused:
    /// File exists (errno 17)`, ...: for people, after the operation it belongs to.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Done => f.write_str("done"),
            Self::AlreadyPresent => f.write_str("already there"),
            Self::AlreadyGone => f.write_str("already gone"),
            Self::Planned => f.write_str("would do (dry run)"),
            Self::Duplicate { by } => write!(
                f,
                "not added: in use by {}",
                by.as_deref().unwrap_or("another host")
            ),
            Self::Unprobed { why } => write!(f, "added without a duplicate check: {why}"),
            Self::Failed {
                errno: Some(n),
                message,
            } => write!(f, "refused: {message} (errno {n})"),
            Self::Failed {
                errno: None,
                message,
            } => write!(f, "failed: {message}"),
        }
    }
}

impl std::fmt::Display for OpResult {
    /// The operation as `netpolicy plan` prints it, then its outcome: `add route
    /// 10.20.0.0/16 table 100 via 192.0.2.1: done`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.op, self.outcome)
    }
}

impl Outcome {
    /// Whether the item ended as desired.
    pub fn is_ok(&self) -> bool {
        !matches!(self, Self::Failed { .. } | Self::Duplicate { .. })
    }
}

/// One operation and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpResult {
    /// The operation.
    pub op: Op,
    /// Its outcome.
    pub outcome: Outcome,
}

/// The result of a reconcile or cleanup pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Every operation with its outcome, in execution order.
    pub results: Vec<OpResult>,
    /// Desired items left alone because a foreign object holds their identity.
    pub skipped: Vec<Skipped>,
    /// Operations that repaired owned objects changed or removed behind netpolicy's
    /// back since the last pass that applied the same desired state completely.
    pub drift: Vec<Op>,
    /// What a fresh observation after applying still found different from the
    /// desired state (the operations it would take next), not counting failed
    /// operations and skipped items, which are reported on their own. Empty when the
    /// pass changed nothing or the kernel now holds exactly what was asked.
    pub unconverged: Vec<Op>,
}

impl std::fmt::Display for Report {
    /// One line per operation with its outcome, per skipped item, and per difference
    /// still found after applying (`not converged: …`); `nothing to do` for an empty
    /// pass.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.results.is_empty() && self.skipped.is_empty() && self.unconverged.is_empty() {
            return f.write_str("nothing to do");
        }
        let mut first = true;
        let mut line = |f: &mut std::fmt::Formatter<'_>, s: &dyn std::fmt::Display| {
            let sep = if first { "" } else { "\n" };
            first = false;
            write!(f, "{sep}{s}")
        };
        for r in &self.results {
            line(f, r)?;
        }
        for s in &self.skipped {
            line(f, &format_args!("skipped: {s}"))?;
        }
        for op in &self.unconverged {
            line(f, &format_args!("not converged: {op}"))?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Disowned {
    /// `route 10.0.0.0/8 … table 100: done`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.outcome)
    }
}

impl Report {
    /// The failed operations.
    pub fn failures(&self) -> impl Iterator<Item = &OpResult> {
        self.results.iter().filter(|r| !r.outcome.is_ok())
    }

    /// Whether the namespace now holds the desired state: no failure, no blocked or
    /// refused item, nothing left unconverged.
    pub fn is_converged(&self) -> bool {
        self.failures().next().is_none()
            && self.skipped.iter().all(|s| s.reason.is_satisfied())
            && self.unconverged.is_empty()
    }
}
