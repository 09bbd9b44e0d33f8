//! Where the node's heavy CPU work runs: training, quality tests and spot checks, on threads
//! that yield the CPU to the node's network threads.
//!
//! A provider's liveness is its heartbeat rhythm, and a heartbeat is a few microseconds of
//! work on the async runtime. On a host where every core is busy training (ours, or a
//! neighbour's), a heartbeat that waits behind a compute thread for a scheduler slice arrives
//! hundreds of milliseconds late and looks like a frozen provider: a false failover costs the
//! provider its unaccepted interval and the client a fresh epoch. So every compute thread runs
//! at a lower scheduling priority ([`COMPUTE_NICE`]) than the runtime that sends heartbeats,
//! gossips and talks to the chain: whenever a network thread wakes, the kernel runs it first,
//! and compute keeps every cycle the network does not use. This needs no privilege (raising
//! one's own niceness never does) and holds against other processes' compute too, since
//! every node lowers its own.
//!
//! Compute threads are: the thread [`run`] starts for each task, and the rayon pool that
//! candle's CPU kernels fan out to, which [`init`] builds before any kernel runs (threads
//! started later by candle's own pool inherit the niceness of the compute thread that first
//! needs them).

use std::collections::HashMap;
use std::sync::Mutex;

use anyhow::{Result, anyhow};

/// The compute threads alive, by kernel thread id: what [`Starvation`] reads.
static THREADS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// The niceness of compute threads. Nice 10 weighs about a tenth of nice 0 in Linux's
/// scheduler, so a network thread that wakes gets the core almost at once, while compute alone
/// on a host still gets it all.
pub const COMPUTE_NICE: i32 = 10;

/// Builds rayon's global pool (candle's CPU kernels run on it) with compute priority. Call once
/// at startup, before any training or checking; a second call (tests starting several nodes in
/// one process) leaves the first pool in place.
pub fn init() {
    if pool().build_global().is_err() {
        tracing::debug!("the compute pool was already built");
    }
}

fn pool() -> rayon::ThreadPoolBuilder {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("compute-{i}"))
        .start_handler(|_| lower_this_thread())
}

/// Runs `work` on a new compute thread and waits for it without blocking the runtime.
/// `what` names the work in the error if the thread panics.
pub async fn run<T, F>(what: &'static str, work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(what.to_string())
        .spawn(move || {
            lower_this_thread();
            let out = work();
            forget_this_thread();
            let _ = tx.send(out);
        })
        .map_err(|e| anyhow!("cannot start the {what} thread: {e}"))?;
    rx.await
        .map_err(|_| anyhow!("the {what} thread died (a panic in the trainer; see the log)"))
}

/// Lowers the calling thread's CPU priority to [`COMPUTE_NICE`]. Niceness is per thread on
/// Linux, so this leaves the runtime's threads as they are. Failing to lower it only costs
/// heartbeat punctuality under load, so it is logged, not fatal. A thread already nicer (a
/// node its operator started under `nice -n 19`) is left as it is: run as root, setting 10
/// would raise its priority above what the operator asked for.
pub fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        if let Ok(mut threads) = THREADS.lock() {
            threads.push(tid.as_raw_nonzero().get());
        }
        let current = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);
        if current >= COMPUTE_NICE {
            return;
        }
        if let Err(e) = rustix::process::setpriority_process(Some(tid), COMPUTE_NICE) {
            tracing::warn!(error = %e, "cannot lower a compute thread's priority; heartbeats may lag under load");
        }
    }
}

/// A finished compute thread leaves the sampled set (its id may be reused by any thread).
fn forget_this_thread() {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        if let Ok(mut threads) = THREADS.lock() {
            threads.retain(|t| *t != tid);
        }
    }
}

/// How long the compute threads waited for a CPU they were ready to use: what a provider's
/// heartbeats report (`starved_ms`) so the client does not take a loaded host for a hung GPU.
/// Each sample adds the largest increase of any compute thread's run-queue delay (Linux's
/// `/proc/<pid>/task/<tid>/schedstat`) since the previous sample: the trainer's critical path
/// runs through one thread at a time, so the sum would count one wait several times. Sampled
/// every heartbeat period, it so stays below wall time. Elsewhere it stays 0 and stalls are
/// judged on step times alone.
#[derive(Debug, Default)]
pub struct Starvation {
    /// Each compute thread's run-queue delay at the last sample, ns.
    seen: HashMap<i32, u64>,
    total_ns: u64,
}

impl Starvation {
    /// Reads the compute threads now; the total so far, in ms.
    pub fn sample(&mut self) -> u64 {
        let threads: Vec<i32> = THREADS.lock().map(|t| t.clone()).unwrap_or_default();
        let mut largest = 0;
        let mut seen = HashMap::with_capacity(threads.len());
        for tid in threads {
            let Some(delay) = run_delay_ns(tid) else {
                continue;
            };
            // A thread seen for the first time only sets its baseline: its wait before it
            // was ours to watch is not this sample's.
            if let Some(before) = self.seen.get(&tid) {
                largest = largest.max(delay.saturating_sub(*before));
            }
            seen.insert(tid, delay);
        }
        self.seen = seen;
        self.total_ns = self.total_ns.saturating_add(largest);
        self.total_ns / 1_000_000
    }
}

/// A thread's total wait on a run queue, ns: the second field of its schedstat.
fn run_delay_ns(tid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The calling thread's niceness (tests and diagnostics).
#[cfg(target_os = "linux")]
pub fn this_thread_nice() -> Result<i32> {
    let tid = rustix::thread::gettid();
    rustix::process::getpriority_process(Some(tid))
        .map_err(|e| anyhow!("cannot read this thread's priority: {e}"))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn compute_runs_below_the_runtime_and_the_runtime_is_untouched() -> Result<()> {
        let before = this_thread_nice()?;
        let inside = run("test-compute", this_thread_nice).await??;
        assert_eq!(inside, COMPUTE_NICE.max(before));
        // The caller (a runtime thread) keeps its priority.
        assert_eq!(this_thread_nice()?, before);
        Ok(())
    }

    #[tokio::test]
    async fn a_panicking_task_is_an_error_not_a_crash() {
        let r: Result<()> = run("test-panic", || panic!("boom")).await;
        let e = r.expect_err("a panic must surface as an error");
        assert!(e.to_string().contains("test-panic"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn starvation_counts_compute_threads_waiting_for_a_cpu() -> Result<()> {
        if run_delay_ns(rustix::thread::gettid().as_raw_nonzero().get()).is_none() {
            // A kernel without schedstat: the sampler reads 0 and stalls are judged on step
            // times alone, which the detector's own tests cover.
            eprintln!("no per-thread schedstat on this kernel; nothing to measure");
            return Ok(());
        }
        let mut starvation = Starvation::default();
        let idle = starvation.sample();
        // More busy compute threads than cores: each waits for a CPU part of the time.
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let busy: Vec<_> = (0..cores * 2 + 1)
            .map(|_| {
                run("test-busy", || {
                    let until = std::time::Instant::now() + std::time::Duration::from_millis(600);
                    let mut x = 0u64;
                    while std::time::Instant::now() < until {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                    x
                })
            })
            .collect();
        let all = tokio::spawn(futures::future::join_all(busy));
        let mut total = idle;
        while !all.is_finished() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            total = starvation.sample();
        }
        for r in all.await? {
            r?;
        }
        assert!(
            total > idle + 50,
            "starved {} ms, idle {idle} ms",
            total - idle
        );
        // Never more than the wall time it was sampled over, whatever the thread count.
        assert!(total - idle < 1500, "{total}");
        Ok(())
    }

    #[test]
    fn the_kernel_pool_runs_at_compute_priority() -> Result<()> {
        // The pool `init` makes global, built apart: the global one is whichever this test
        // binary built first.
        let before = this_thread_nice()?;
        let pool = pool().num_threads(2).build()?;
        let nice = pool.broadcast(|_| this_thread_nice());
        for n in nice {
            assert_eq!(n?, COMPUTE_NICE.max(before));
        }
        Ok(())
    }
}
