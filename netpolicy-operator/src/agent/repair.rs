//! Drift repair, for the node's Events and its `Fighting` condition: when kernel
//! notifications start a pass ([`Trigger`]), what a pass repaired ([`repaired`]), and the
//! fights and rate-limited Events that come of it ([`Repairs`]). Pure but for
//! [`Repairs::publish`].

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use netpolicy_core::plan::Op;
use netpolicy_netlink::{Outcome, Report, monitor::Subject};
use tracing::warn;

use crate::api::{
    NodeNetworkConfig, NodeNetworkConfigStatus,
    conditions::{self},
};

/// What a batch of kernel notifications asks of the agent ([`Trigger::on_batch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KernelTrigger {
    /// Nothing of netpolicy's changed (or only objects fought over, which wait for
    /// their look).
    Nothing,
    /// A pass now; the change, for the log.
    Now(String),
    /// A pass when the rate allows ([`Trigger::deferred`]); the change, for the log.
    Later(String),
}

/// Decides when kernel notifications start a pass: someone else's change to what
/// netpolicy owns (or inside a hard-synced table), or any link change (a link that went
/// down took its IPv4 routes with it, and the kernel says so only for the link), except
/// objects fought over (they wait for their look); at the rate of a
/// [`netpolicy_netlink::monitor::Budget`], which delays a pass, never drops it.
#[derive(Debug, Default)]
pub(crate) struct Trigger {
    budget: netpolicy_netlink::monitor::Budget,
    /// A pass the budget held back: it starts when its token is there.
    deferred: Option<Instant>,
}

impl Trigger {
    /// What `batch` asks for at `now`.
    pub(crate) fn on_batch(
        &mut self,
        batch: &netpolicy_netlink::monitor::Batch,
        own_port: u32,
        hard_synced: &[u32],
        fought: &std::collections::BTreeSet<Subject>,
        now: Instant,
    ) -> KernelTrigger {
        let Some(what) = batch
            .foreign_except(own_port, hard_synced, |s| fought.contains(s))
            .or_else(|| batch.link_change())
        else {
            return KernelTrigger::Nothing;
        };
        match self.budget.take(now) {
            Ok(()) => KernelTrigger::Now(what),
            Err(when) => {
                self.deferred = Some(self.deferred.map_or(when, |d| d.min(when)));
                KernelTrigger::Later(what)
            }
        }
    }

    /// When a held-back pass is due.
    pub(crate) fn deferred(&self) -> Option<Instant> {
        self.deferred
    }

    /// The held-back pass starts now.
    pub(crate) fn fire(&mut self, now: Instant) {
        self.deferred = None;
        let _ = self.budget.take(now);
    }
}

/// The repairs the agent made, for the node's Events and its `Fighting` condition.
///
/// Events are rate-limited: at most one per [`Repairs::EVENT_EVERY`], naming what was
/// restored since the last one (a process flushing routes every second costs one Event
/// a minute and no status write per repair). An object restored
/// [`conditions::fighting::AFTER`] times within [`Repairs::WINDOW`] is fought over: the
/// NodeNetworkConfig says `Fighting` naming it, its notifications stop starting passes
/// (the other objects' still do), and the agent looks again after [`Repairs::CHECK_FIRST`], doubling each time up to
/// [`Repairs::CHECK_MAX`] (a resync or a new spec looks too); the fight ends at the
/// first pass that finds the object intact.
#[derive(Debug, Default)]
pub(crate) struct Repairs {
    /// Lines not yet in an Event, and how many repairs they stand for.
    pending: Vec<String>,
    pending_count: usize,
    last_event: Option<Instant>,
    /// When the first repair not yet told was recorded.
    since: Option<Instant>,
    /// Repair times per object.
    history: std::collections::BTreeMap<Subject, std::collections::VecDeque<Instant>>,
    fighting: std::collections::BTreeSet<Subject>,
    /// While fighting: the next pass that looks again (backing off from
    /// [`Repairs::CHECK_FIRST`], doubling to [`Repairs::CHECK_MAX`]), and its delay.
    check: Option<(Instant, Duration)>,
    /// Whether an Event said `Fighting` since the fight started (a fight with no new
    /// repairs is not told again).
    told_fight: bool,
}

impl Repairs {
    /// At most one Event per this long.
    pub(crate) const EVENT_EVERY: Duration = Duration::from_secs(60);
    /// The window in which [`conditions::fighting::AFTER`] repairs of one object make a
    /// fight.
    pub(crate) const WINDOW: Duration = Duration::from_secs(60);
    /// The first look again after a fight started.
    pub(crate) const CHECK_FIRST: Duration = Duration::from_secs(5);
    /// The longest wait between looks while fighting.
    pub(crate) const CHECK_MAX: Duration = Duration::from_secs(300);
    /// Lines an Event lists before "and N more" (an Event's note holds 1 KiB).
    const LISTED: usize = 4;

    /// Records one pass's repairs: `(object, line)` pairs ([`repaired`]). A pass is a
    /// whole look at the node: an object in a fight that it did not have to repair, and
    /// that nothing restored for [`Repairs::CHECK_FIRST`], is intact, and that fight is
    /// over.
    pub(crate) fn record(&mut self, now: Instant, repaired: &[(Subject, String)]) {
        self.record_pass(now, repaired, true);
    }

    /// As [`Repairs::record`], for a pass another object's notification started: it
    /// ends no fight (the peer may be between two of its changes), it only counts.
    pub(crate) fn record_unasked(&mut self, now: Instant, repaired: &[(Subject, String)]) {
        self.record_pass(now, repaired, false);
    }

    fn record_pass(&mut self, now: Instant, repaired: &[(Subject, String)], look: bool) {
        for h in self.history.values_mut() {
            while h
                .front()
                .is_some_and(|t| now.duration_since(*t) > Self::WINDOW)
            {
                h.pop_front();
            }
        }
        self.history.retain(|_, h| !h.is_empty());
        if !repaired.is_empty() {
            self.since.get_or_insert(now);
        }
        if look {
            // Intact at a look ends a fight only when it has stayed so for a while: a
            // pass another object started may have restored it a moment before, between
            // two of the peer's changes.
            let now_repaired: std::collections::BTreeSet<&Subject> =
                repaired.iter().map(|(k, _)| k).collect();
            let history = &self.history;
            self.fighting.retain(|k| {
                now_repaired.contains(k)
                    || history
                        .get(k)
                        .and_then(|h| h.back())
                        .is_some_and(|t| now.duration_since(*t) < Self::CHECK_FIRST)
            });
        }
        for (key, line) in repaired {
            let h = self.history.entry(key.clone()).or_default();
            h.push_back(now);
            if h.len() >= conditions::fighting::AFTER && self.fighting.insert(key.clone()) {
                warn!(object = %key, "Fighting: something keeps changing it back; looked at again with backoff (5 s, doubling to 5 min) until it stops");
            }
            if !self.pending.contains(line) {
                self.pending.push(line.clone());
            }
            self.pending_count += 1;
        }
        if self.fighting.is_empty() {
            self.told_fight = false;
            self.check = None;
        } else if self.check.is_none() {
            // Back off: look again later, each time later ([`Repairs::look_again`]),
            // until a look finds it intact.
            self.check = Some((now + Self::CHECK_FIRST, Self::CHECK_FIRST));
        }
    }

    /// A look is starting now (the timer of [`Repairs::next_check`] fired): the next one
    /// waits twice as long (at most [`Repairs::CHECK_MAX`]), whatever this pass does.
    pub(crate) fn look_again(&mut self, now: Instant) {
        if let Some((_, d)) = self.check {
            let d = (d * 2).min(Self::CHECK_MAX);
            self.check = Some((now + d, d));
        }
    }

    /// While fighting, when the next pass should look again (notifications start none).
    pub(crate) fn next_check(&self) -> Option<Instant> {
        self.check.map(|(t, _)| t)
    }

    /// The objects fought over now.
    pub(crate) fn fighting(&self) -> &std::collections::BTreeSet<Subject> {
        &self.fighting
    }

    /// When the pending repairs may be told ([`Repairs::event_due`]); `None`: nothing
    /// to tell.
    pub(crate) fn next_event(&self) -> Option<Instant> {
        if self.pending.is_empty() && (self.fighting.is_empty() || self.told_fight) {
            return None;
        }
        let since = self.since?;
        Some(
            self.last_event
                .map_or(since, |t| (t + Self::EVENT_EVERY).max(since)),
        )
    }

    /// The Event to publish at `now`, if one is due: `(reason, note)`, with the
    /// `Fighting` reason while a fight is on. Clears what it tells.
    pub(crate) fn event_due(&mut self, now: Instant) -> Option<(&'static str, String)> {
        if self.next_event().is_none_or(|t| t > now) {
            return None;
        }
        self.last_event = Some(now);
        self.since = None;
        let list = |lines: &[String], total: usize| {
            let mut s = lines
                .iter()
                .take(Self::LISTED)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            if lines.len() > Self::LISTED {
                s.push_str(&format!("; and {} more", lines.len() - Self::LISTED));
            }
            if total > lines.len() {
                s.push_str(&format!(" ({total} repairs)"));
            }
            s
        };
        let repairs = list(&self.pending, self.pending_count);
        self.pending.clear();
        self.pending_count = 0;
        if self.fighting.is_empty() {
            return Some((conditions::events::DRIFT_REPAIRED, repairs));
        }
        self.told_fight = true;
        let objects: Vec<String> = self.fighting.iter().map(ToString::to_string).collect();
        let mut note = format!(
            "something keeps changing netpolicy's objects back (each restored {} times within \
             {} s): {}; looked at again with backoff (5 s, doubling to 5 min) until it stops",
            conditions::fighting::AFTER,
            Self::WINDOW.as_secs(),
            list(&objects, objects.len())
        );
        if !repairs.is_empty() {
            note.push_str(&format!(". Since the last Event: {repairs}"));
        }
        Some((conditions::events::FIGHTING, note))
    }

    /// Publishes the due Event on `nnc` (best effort: a refused Event is logged).
    pub(super) async fn publish(
        &mut self,
        recorder: &crate::k8s::events::Recorder,
        nnc: &NodeNetworkConfig,
    ) {
        use kube::runtime::events::{Event as KubeEvent, EventType};
        let Some((reason, note)) = self.event_due(Instant::now()) else {
            return;
        };
        let type_ = if reason == conditions::events::FIGHTING {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 996;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str(" ...");
        }
        let event = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Repair".into(),
            secondary: None,
        };
        if let Err(e) = recorder
            .publish(&event, &kube::Resource::object_ref(nnc, &()))
            .await
        {
            warn!(error = %e, "could not record the repair Event");
        }
    }
}

/// Sleeps until `at`, or for ever.
pub(super) async fn event_timer(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// What a pass repaired: `(object, line)` per drift operation, the line saying what
/// someone did and whether it was restored (`route 10.20.0.0/16 table 100 via
/// 192.0.2.1 removed or changed by someone, restored`).
pub(crate) fn repaired(report: &Report) -> Vec<(Subject, String)> {
    report
        .drift
        .iter()
        .map(|op| {
            let failed =
                report
                    .results
                    .iter()
                    .find(|r| &r.op == op)
                    .and_then(|r| match &r.outcome {
                        Outcome::Failed { message, .. } => Some(message.as_str()),
                        _ => None,
                    });
            (Subject::of(op), repair_line(op, failed))
        })
        .collect()
}

pub(super) fn repair_line(op: &Op, failed: Option<&str>) -> String {
    let (what, done) = match op {
        Op::ReplaceRoute(r) | Op::AddRoute(r) => (
            format!("route {r} removed or changed by someone"),
            "restored".to_owned(),
        ),
        Op::AddAddress { dev, address } => (
            format!("address {address} dev {dev} removed by someone"),
            "restored".to_owned(),
        ),
        Op::AddRule { family, rule } => (
            format!("{family} rule {rule} removed by someone"),
            "restored".to_owned(),
        ),
        Op::ReplaceRule { family, new, .. } => (
            format!("{family} rule {new} changed by someone"),
            "restored".to_owned(),
        ),
        Op::SetUp(dev) => (
            format!("link {dev} set down by someone"),
            "set up again".to_owned(),
        ),
        Op::SetMtu { dev, mtu } => (
            format!("link {dev} MTU changed by someone"),
            format!("set to {mtu} again"),
        ),
        Op::CreateLink(v) => (
            format!("vlan {v} deleted by someone"),
            "created again".to_owned(),
        ),
        Op::DeleteLocalRoute { dev, address } => (
            format!("the kernel's local route of address {address} dev {dev} is back"),
            "removed".to_owned(),
        ),
        Op::DeleteRoute { route, .. } => (
            format!("route {route} added or changed by someone where netpolicy syncs"),
            "removed".to_owned(),
        ),
        other => (format!("{other}: changed by someone"), "done".to_owned()),
    };
    match failed {
        None => format!("{what}, {done}"),
        Some(why) => format!("{what}, not {done}: {why}"),
    }
}

/// The `Fighting` condition for the objects fought over now; `None` when the node never
/// fought (and is not fighting).
pub(super) fn fighting_condition(
    current: &NodeNetworkConfigStatus,
    fighting: &std::collections::BTreeSet<Subject>,
    generation: Option<i64>,
    now: &Time,
) -> Option<Condition> {
    let was = current
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::FIGHTING);
    if fighting.is_empty() && was.is_none() {
        return None;
    }
    let (status, reason, message) = if fighting.is_empty() {
        (
            conditions::FALSE,
            conditions::fighting::STOPPED,
            "the last pass found every object it had fought over intact".to_owned(),
        )
    } else {
        let mut objects: Vec<String> = fighting.iter().map(ToString::to_string).take(10).collect();
        let more = fighting.len().saturating_sub(objects.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        objects.sort_unstable();
        (
            conditions::TRUE,
            conditions::fighting::FIGHTING,
            format!(
                "something keeps changing these back (each restored {} times within {} s): \
                 {}{more}; looked at again with backoff (5 s, doubling to 5 min) until it stops",
                conditions::fighting::AFTER,
                Repairs::WINDOW.as_secs(),
                objects.join("; ")
            ),
        )
    };
    let last_transition_time = was
        .filter(|c| c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Some(Condition {
        type_: conditions::FIGHTING.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    })
}
