//! One runner for the global jobs (routing, floating IPs, traffic domains): jobs whose
//! rules need every object at once implement [`Job`]; [`Runner::run`] owns everything about how
//! they are driven — waiting for their caches, the debounce, the resync timer, metrics,
//! readiness, and backoff by [`ErrorClass`].
//!
//! # Guarantees
//! - No pass runs before every kind the job reads has synced.
//! - The first pass, every resync and the pass after a failure are full
//!   ([`Changes::full`]); other passes get the keys that changed.
//! - A failed pass is retried by its class, never at a fixed short interval:
//!   transient (timeouts, 5xx, 429) with exponential backoff and jitter from 1 s to
//!   5 min; conflict (409) at once, then backing off like a transient error if it
//!   repeats; permanent for this input (400, 403, 404, 413, 422) after the long backoff
//!   (10 s doubling to 90 s) or as soon as something the job reads changes.
//! - A transient backoff starts over when the API server's own `/readyz` turns ready
//!   again after it was not ([`Shared::api_recoveries`]): a job waiting in one passes at
//!   once, and the backoff an outage grew (up to minutes) does not delay the first
//!   failure after it.
//! - The job counts as ready (`/readyz`) once its kinds synced and its first pass ended
//!   without error; it is unready again, saying why, while its passes have failed
//!   transiently for [`TROUBLE_AFTER`] (an API server or etcd that does not answer).
//!
//! # Examples
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//!
//! use k8s_openapi::api::core::v1::Node;
//! use netpolicy_operator::runtime::{Changes, Informers, Job, JobError, Next, Runner, Setup, Wake};
//!
//! /// Counts labelled nodes whenever a label changes.
//! struct Census { nodes: kube::runtime::reflector::Store<Node> }
//!
//! impl Job for Census {
//!     fn name(&self) -> &'static str { "census" }
//!     async fn pass(&mut self, changes: &Changes) -> Result<Next, JobError> {
//!         let labelled = self.nodes.state().iter().filter(|n| n.metadata.labels.is_some()).count();
//!         println!("{labelled} labelled nodes (full pass: {})", changes.full);
//!         Ok(Next::Resync)
//!     }
//! }
//!
//! # async fn demo(client: kube::Client) {
//! let informers = Informers::new(client);
//! let wake = Wake::new();
//! let nodes = informers.get::<Node>();
//! nodes.subscribe(&wake, |n| format!("{:?}", n.metadata.labels));
//! let runner = Runner::new(Arc::default(), Duration::from_secs(300));
//! let setup = Setup { job: Census { nodes: nodes.store() }, wake, kinds: vec![nodes.health()] };
//! let (_stop_tx, stop) = tokio::sync::watch::channel(false);
//! let census = runner.run(setup, stop);
//! informers.start();
//! census.await;
//! # }
//! ```

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::{sync::watch, time::Instant};
use tracing::{info, warn};

use super::informer::{Changes, KindHealth, Wake};
use crate::{error::Chain, telemetry::Shared};

/// How a failure is retried (docs/architecture.md, runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// Timeouts, connection failures, 5xx, 429: exponential backoff with jitter.
    Transient,
    /// 409: someone else wrote first; re-read and retry at once.
    Conflict,
    /// 400, 403, 404, 413, 422: the same input fails the same way; retried when the
    /// input changes or after the long backoff.
    Permanent,
}

impl ErrorClass {
    /// The class of a Kubernetes API error.
    pub fn of(e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => Self::of_status(s.code),
            _ => Self::Transient,
        }
    }

    /// The class of an HTTP status code.
    pub fn of_status(code: u16) -> Self {
        match code {
            409 => Self::Conflict,
            429 => Self::Transient,
            400..=499 => Self::Permanent,
            _ => Self::Transient,
        }
    }

    /// The metric label (`transient`, `conflict`, `permanent`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Conflict => "conflict",
            Self::Permanent => "permanent",
        }
    }

    /// The backoff policy of this class.
    pub fn backoff(self) -> Backoff {
        match self {
            Self::Transient => Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            Self::Conflict => Backoff::new(Duration::from_millis(100), Duration::from_secs(300)),
            Self::Permanent => Backoff::new(Duration::from_secs(10), Duration::from_secs(90)),
        }
    }
}

/// A failed pass: its class and cause.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct JobError {
    /// How it is retried.
    pub class: ErrorClass,
    /// What failed.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl JobError {
    /// A failure of class `class`.
    pub fn new(
        class: ErrorClass,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            class,
            source: source.into(),
        }
    }
}

impl From<kube::Error> for JobError {
    fn from(e: kube::Error) -> Self {
        Self::new(ErrorClass::of(&e), e)
    }
}

/// What a pass asks of the runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing pending: the next pass comes with a change or the resync.
    Resync,
    /// Something is due at a time the job knows (a backoff of one of its items, a
    /// rollout wave): pass again after this long (or earlier, on a change).
    After(Duration),
    /// The pass did its work and reported what stands in the way (a condition): look
    /// again by this class's backoff (doubling while it is asked for again), not at
    /// the resync. Not a failure: readiness and error metrics do not count it.
    Backoff(ErrorClass),
}

/// A global job: a pass over everything it reads, given what changed.
pub trait Job: Send {
    /// The job's name in logs, metrics (`controller` label) and readiness.
    fn name(&self) -> &'static str;

    /// One pass. It writes only what differs from what the caches show.
    ///
    /// # Errors
    /// A failure the runner retries by its [`ErrorClass`]; the next pass is full.
    fn pass(&mut self, changes: &Changes) -> impl Future<Output = Result<Next, JobError>> + Send;

    /// How long to gather changes into the next pass; `None`: the runner's (100 ms).
    /// A job whose pass over a few changes is cheap asks for less.
    fn debounce(&self) -> Option<Duration> {
        None
    }
}

/// Exponential backoff with jitter: each delay doubles up to `cap`, and is spread over
/// ±20 % so that many failing items (or operators) do not retry in step.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    /// From `base`, doubling up to `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            next: base,
        }
    }

    /// The next delay (jittered), doubling the one after.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.cap);
        jitter(d)
    }

    /// Back to the first delay.
    pub fn reset(&mut self) {
        self.next = self.base;
    }
}

pub use super::backoff::jitter;

/// A job's readiness: its kinds synced and its first pass done.
#[derive(Debug)]
pub struct JobReadiness {
    name: &'static str,
    kinds: Vec<Arc<KindHealth>>,
    first_pass: AtomicBool,
    last_error: std::sync::Mutex<Option<String>>,
    /// Since when every pass fails (or leaves items failing) transiently, and the
    /// last error: an API server or etcd that does not answer.
    trouble: std::sync::Mutex<Option<(std::time::Instant, String)>>,
}

/// How long transient failures last before a ready job reports them in `/readyz`: one
/// failed write (a 429, a timeout) is not news; an API server or etcd down for this
/// long is.
pub const TROUBLE_AFTER: Duration = Duration::from_secs(10);

impl JobReadiness {
    /// Readiness of job `name`, which reads `kinds`.
    pub fn new(name: &'static str, kinds: Vec<Arc<KindHealth>>) -> Arc<Self> {
        Arc::new(Self {
            name,
            kinds,
            first_pass: AtomicBool::new(false),
            last_error: std::sync::Mutex::new(None),
            trouble: std::sync::Mutex::new(None),
        })
    }

    /// Why the job is not ready yet (`None` when it is): the kinds it waits for and the
    /// API server's answer, or its first pass.
    pub fn waiting_for(&self) -> Option<String> {
        let kinds: Vec<String> = self.kinds.iter().filter_map(|k| k.waiting_for()).collect();
        if !kinds.is_empty() {
            return Some(format!("{}: {}", self.name, kinds.join("; ")));
        }
        if self.first_pass.load(Ordering::Acquire) {
            return super::informer::lock(&self.trouble)
                .as_ref()
                .filter(|(since, _)| since.elapsed() >= TROUBLE_AFTER)
                .map(|(since, why)| {
                    format!(
                        "{}: retrying with backoff, transient errors for {} s: {why}",
                        self.name,
                        since.elapsed().as_secs()
                    )
                });
        }
        match &*super::informer::lock(&self.last_error) {
            Some(e) => Some(format!("{}: first pass failed: {e}", self.name)),
            None => Some(format!("{}: first pass not finished", self.name)),
        }
    }

    /// Whether every kind is usable.
    pub fn synced(&self) -> bool {
        self.kinds.iter().all(|k| k.usable())
    }

    /// Waits until every kind is usable.
    pub async fn wait_synced(&self) {
        for k in &self.kinds {
            k.usable_now().await;
        }
    }

    /// The first pass ended (successfully); logged once, when the job turns ready.
    pub fn passed(&self) {
        if !self.first_pass.swap(true, Ordering::AcqRel) {
            tracing::info!(job = self.name, "first pass done: the job is ready");
        }
    }

    /// The first pass failed with `e` (shown until a pass succeeds).
    pub fn failed(&self, e: String) {
        *super::informer::lock(&self.last_error) = Some(e);
    }

    /// A pass failed transiently (or left items to retry so): after [`TROUBLE_AFTER`]
    /// of nothing else, a ready job reports `why` again.
    pub fn troubled(&self, why: String) {
        let mut t = super::informer::lock(&self.trouble);
        match &mut *t {
            Some((_, w)) => *w = why,
            None => *t = Some((std::time::Instant::now(), why)),
        }
    }

    /// A pass went through with nothing left to retry transiently.
    pub fn untroubled(&self) {
        *super::informer::lock(&self.trouble) = None;
    }
}

impl crate::telemetry::Waiting for JobReadiness {
    fn waiting_for(&self) -> Option<String> {
        JobReadiness::waiting_for(self)
    }
}

/// How long a burst of changes is gathered into one pass (or one reconcile per object).
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// A job with what wakes it and the kinds it reads (their health is what readiness
/// waits for).
pub struct Setup<J> {
    /// The job.
    pub job: J,
    /// Its wake-up, subscribed to the informers of the kinds it reads.
    pub wake: Wake,
    /// The health of those kinds.
    pub kinds: Vec<Arc<KindHealth>>,
}

/// Runs [`Job`]s: see the module docs.
#[derive(Debug, Clone)]
pub struct Runner {
    pub(super) shared: Arc<Shared>,
    pub(super) resync: Duration,
    debounce: Duration,
}

impl Runner {
    /// A runner reporting to `shared` (metrics, readiness), with full passes every
    /// `resync`.
    pub fn new(shared: Arc<Shared>, resync: Duration) -> Self {
        Self {
            shared,
            resync,
            debounce: DEBOUNCE,
        }
    }

    /// How long to gather a burst of changes into one pass (default 100 ms).
    #[must_use]
    pub fn debounce(mut self, d: Duration) -> Self {
        self.debounce = d;
        self
    }

    /// Runs a job until `stop` turns true: waits for its kinds to sync, then passes on
    /// changes (from its wake), on the resync timer, and on the job's own schedule.
    /// The job counts for readiness from this call on (before the future is polled).
    pub fn run<J: Job + 'static>(
        &self,
        setup: Setup<J>,
        stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send + 'static + use<J> {
        let ready = JobReadiness::new(setup.job.name(), setup.kinds);
        self.shared
            .register(Arc::clone(&ready) as Arc<dyn crate::telemetry::Waiting>);
        let this = self.clone();
        async move { this.drive(setup.job, setup.wake, ready, stop).await }
    }

    async fn drive<J: Job>(
        &self,
        mut job: J,
        wake: Wake,
        ready: Arc<JobReadiness>,
        mut stop: watch::Receiver<bool>,
    ) {
        let name = job.name();
        tokio::select! {
            () = ready.wait_synced() => {}
            _ = stop.changed() => return,
        }
        info!(job = name, "caches synced: running");
        self.shared.metrics.job_started(name);
        let mut full = true;
        let mut last_full = Instant::now();
        let mut backoff: Option<(ErrorClass, Backoff)> = None;
        // The API server back after an outage: a transient backoff that the outage
        // grew (up to minutes) starts over, and a job waiting in one passes now.
        let mut recoveries = self.shared.api_recoveries();
        loop {
            let mut changes = wake.take();
            changes.full |= full;
            if changes.full {
                last_full = Instant::now();
            }
            let start = Instant::now();
            let result = job.pass(&changes).await;
            let took = start.elapsed();
            self.shared.metrics.reconciled(
                name,
                took,
                result.as_ref().err().map(|e| e.class.as_str()),
            );
            if recoveries.has_changed().unwrap_or(false) {
                recoveries.mark_unchanged();
                if matches!(backoff, Some((ErrorClass::Transient, _))) {
                    backoff = None;
                }
            }
            // How long to wait, and whether a change may cut the wait short.
            let (wait, on_change) = match result {
                Ok(next) => {
                    full = false;
                    ready.passed();
                    let until_resync = self.resync.saturating_sub(last_full.elapsed());
                    match next {
                        Next::Resync => {
                            backoff = None;
                            ready.untroubled();
                            (until_resync, true)
                        }
                        Next::After(d) => {
                            backoff = None;
                            ready.untroubled();
                            (d.min(until_resync), true)
                        }
                        Next::Backoff(class) => {
                            if class == ErrorClass::Transient {
                                ready.troubled("items failed; see the job's log".into());
                            } else {
                                ready.untroubled();
                            }
                            let b = match &mut backoff {
                                Some((c, b)) if *c == class => b,
                                _ => &mut backoff.insert((class, class.backoff())).1,
                            };
                            (b.next_delay().min(until_resync), true)
                        }
                    }
                }
                Err(e) => {
                    full = true;
                    ready.failed(Chain(&e).to_string());
                    if e.class == ErrorClass::Transient {
                        ready.troubled(Chain(&e).to_string());
                    } else {
                        ready.untroubled();
                    }
                    let b = match &mut backoff {
                        Some((class, b)) if *class == e.class => b,
                        _ => &mut backoff.insert((e.class, e.class.backoff())).1,
                    };
                    let d = b.next_delay();
                    warn!(job = name, class = e.class.as_str(), error = %Chain(&e), retry_in = ?d, "pass failed");
                    (d, e.class == ErrorClass::Permanent)
                }
            };
            let debounce = job.debounce().unwrap_or(self.debounce);
            if wait.is_zero() {
                // Due at once (a resync, an item's backoff ending): still gather a
                // burst, never spin.
                tokio::time::sleep(debounce).await;
                if last_full.elapsed() >= self.resync {
                    full = true;
                }
                continue;
            }
            tokio::select! {
                _ = stop.changed() => {
                    info!(job = name, "stopped");
                    return;
                }
                () = tokio::time::sleep(wait) => {
                    if last_full.elapsed() >= self.resync {
                        full = true;
                    }
                }
                () = wake.notified(), if on_change => {}
                Ok(()) = recoveries.changed(),
                    if matches!(backoff, Some((ErrorClass::Transient, _))) =>
                {
                    recoveries.mark_unchanged();
                    backoff = None;
                    full = true;
                    info!(job = name, "the API server is ready again: retrying now");
                }
            }
            // Gather a burst into one pass.
            tokio::time::sleep(debounce).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// When each pass ran, and whether it was full.
    type Passes = Arc<Mutex<Vec<(Instant, bool)>>>;

    /// Fails with the given classes (last first), then passes; records each pass.
    struct Flaky {
        fails: Vec<ErrorClass>,
        passes: Passes,
    }

    impl Job for Flaky {
        fn name(&self) -> &'static str {
            "flaky"
        }

        async fn pass(&mut self, changes: &Changes) -> Result<Next, JobError> {
            self.passes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((Instant::now(), changes.full));
            match self.fails.pop() {
                Some(class) => Err(JobError::new(class, "refused")),
                None => Ok(Next::Resync),
            }
        }
    }

    fn flaky(fails: Vec<ErrorClass>) -> (Setup<Flaky>, Passes) {
        let passes = Arc::new(Mutex::new(Vec::new()));
        let job = Flaky {
            fails,
            passes: Arc::clone(&passes),
        };
        let setup = Setup {
            job,
            wake: Wake::new(),
            kinds: Vec::new(),
        };
        (setup, passes)
    }

    fn gaps(passes: &Mutex<Vec<(Instant, bool)>>) -> Vec<f64> {
        let p = passes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        p.windows(2)
            .map(|w| (w[1].0 - w[0].0).as_secs_f64())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_back_off_exponentially_with_jitter_and_the_next_pass_is_full() {
        let (setup, passes) = flaky(vec![ErrorClass::Transient; 6]);
        let shared = Arc::new(Shared::default());
        let runner = Runner::new(Arc::clone(&shared), Duration::from_secs(3600));
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(runner.run(setup, stop));
        tokio::time::sleep(Duration::from_secs(200)).await;
        let _ = stop_tx.send(true);
        task.await.unwrap_or_default();
        let g = gaps(&passes);
        // 1, 2, 4, 8, 16, 32 s (each ±20 %, plus the 100 ms debounce); then it passed.
        assert_eq!(g.len(), 6, "{g:?}");
        for (i, gap) in g.iter().enumerate() {
            let base = f64::from(1u32 << i);
            assert!(
                (base * 0.8..=base * 1.2 + 0.2).contains(gap),
                "gap {i}: {gap} s, expected about {base} s ({g:?})"
            );
        }
        let p = passes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assert!(
            p.iter().all(|(_, full)| *full),
            "every pass after a failure is full"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_api_server_ready_again_starts_a_transient_backoff_over() {
        // Seven transient failures (an outage), the eighth would wait ~64 s; the eighth
        // fails too, the ninth passes.
        let (setup, passes) = flaky(vec![ErrorClass::Transient; 8]);
        let shared = Arc::new(Shared::default());
        let runner = Runner::new(Arc::clone(&shared), Duration::from_secs(3600));
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(runner.run(setup, stop));
        shared.set_api_trouble(Some("[-]etcd failed".into()));
        // 1 + 2 + 4 + 8 + 16 + 32 s (+ 20 % and debounces): six passes by 80 s.
        tokio::time::sleep(Duration::from_secs(80)).await;
        let count = || passes.lock().map(|p| p.len()).unwrap_or(0);
        assert_eq!(count(), 7, "the first pass and six retries");
        // Still unready: nothing changes.
        shared.set_api_trouble(Some("[-]etcd failed".into()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(count(), 7, "no retry without a recovery");
        // The API server is ready again: the pass comes at once (debounce), and the
        // failure it meets backs off from the first step (1 s), not from 64 s.
        shared.set_api_trouble(None);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(count(), 8, "retried when the API server came back");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(count(), 9, "then backed off from 1 s and passed");
        // Ready twice in a row is one recovery, not two.
        shared.set_api_trouble(None);
        let _ = stop_tx.send(true);
        task.await.unwrap_or_default();
        let g = gaps(&passes);
        assert!(
            (0.8..1.5).contains(&g[7]),
            "the last failure waited ~1 s: {g:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_failure_waits_for_the_long_backoff_or_a_change() {
        let (setup, passes) = flaky(vec![ErrorClass::Permanent; 3]);
        let wake = setup.wake.clone();
        let runner = Runner::new(Arc::default(), Duration::from_secs(3600));
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(runner.run(setup, stop));
        // First pass, then the long backoff (10 s ± 20 %): nothing before 8 s.
        tokio::time::sleep(Duration::from_secs(7)).await;
        assert_eq!(passes.lock().map(|p| p.len()).unwrap_or(0), 1);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(passes.lock().map(|p| p.len()).unwrap_or(0), 2);
        // Now backing off ~20 s; a change of the input retries at once.
        wake.changed("Thing", super::super::ObjectKey::cluster("x"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(passes.lock().map(|p| p.len()).unwrap_or(0), 3);
        let _ = stop_tx.send(true);
        task.await.unwrap_or_default();
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_is_ready_after_its_first_successful_pass_and_says_why_before() {
        let (setup, _passes) = flaky(vec![ErrorClass::Transient]);
        let shared = Shared::leading();
        let runner = Runner::new(Arc::clone(&shared), Duration::from_secs(3600));
        let (stop_tx, stop) = watch::channel(false);
        let run = runner.run(setup, stop);
        // Registered before it is polled: readiness never says ready too early.
        assert_eq!(shared.waiting(), ["flaky: first pass not finished"]);
        let task = tokio::spawn(run);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let waiting = shared.waiting();
        assert!(
            waiting.len() == 1 && waiting[0].starts_with("flaky: first pass failed: refused"),
            "{waiting:?}"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(shared.waiting().is_empty(), "{:?}", shared.waiting());
        let _ = stop_tx.send(true);
        task.await.unwrap_or_default();
    }

    #[test]
    fn error_classes_follow_the_status_code() {
        assert_eq!(ErrorClass::of_status(409), ErrorClass::Conflict);
        assert_eq!(ErrorClass::of_status(429), ErrorClass::Transient);
        assert_eq!(ErrorClass::of_status(503), ErrorClass::Transient);
        for code in [400, 403, 404, 413, 422] {
            assert_eq!(ErrorClass::of_status(code), ErrorClass::Permanent, "{code}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let d: Vec<f64> = (0..5).map(|_| b.next_delay().as_secs_f64()).collect();
        for (got, want) in d.iter().zip([1.0, 2.0, 4.0, 5.0, 5.0]) {
            assert!((want * 0.8..want * 1.2).contains(got), "{d:?}");
        }
        b.reset();
        assert!(b.next_delay() < Duration::from_millis(1200));
    }
}
