//! The one elastic worker pool: run a job on an idle thread, or on a new one when none is idle.
//! Threads are kept for the next job, so the pool holds as many threads as ever ran jobs at once.
//! Used for the fsyncs of a publish that run at the same time ([`crate::log::publish`]), on
//! threads named `fsync`.
//!
//! Two other sets of threads are fixed on purpose, because their number is the policy: the
//! mount's commit threads (how many commits run at once) and the row-check helpers (one per
//! spare core, at the lowest priority).

/// Work for a pool thread.
pub type Job = Box<dyn FnOnce() + Send>;

/// Idle pool threads, kept between jobs (starting two threads per commit cost more CPU than the
/// rest of a one-row commit's publish, whose fsyncs run here). There are never more
/// than the most fsyncs that ever ran at once.
static IDLE_HELPERS: std::sync::Mutex<Vec<std::sync::mpsc::Sender<Job>>> = std::sync::Mutex::new(Vec::new());

/// Run `job` on an idle helper thread, or a new one; gives the job back when no thread can be
/// started.
pub fn run(job: Job) -> std::result::Result<(), Job> {
    let idle = IDLE_HELPERS.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let job = match idle {
        Some(tx) => match tx.send(job) {
            Ok(()) => return Ok(()),
            Err(std::sync::mpsc::SendError(job)) => job,
        },
        None => job,
    };
    let (tx, jobs) = std::sync::mpsc::channel::<Job>();
    let me = tx.clone();
    let spawned = std::thread::Builder::new().name("fsync".into()).spawn(move || {
        for job in jobs {
            job();
            IDLE_HELPERS.lock().unwrap_or_else(|p| p.into_inner()).push(me.clone());
        }
    });
    if spawned.is_err() {
        return Err(job);
    }
    tx.send(job).map_err(|std::sync::mpsc::SendError(job)| job)
}
