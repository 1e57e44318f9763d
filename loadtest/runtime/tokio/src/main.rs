//! Tokio twin of loadtest/runtime/bench.c.
//!
//! The workloads are Tokio's own `benches/rt_multi_threaded.rs` (spawn_many_local,
//! spawn_many_remote_idle, yield_many, ping_pong, chained_spawn), copied body for body, with
//! criterion replaced by a plain loop: `warmup` untimed iterations, then `rounds` timed ones,
//! and the median printed. Two serial spawn+join workloads are added (on a worker, and from
//! outside the runtime).
//!
//! Usage: tokio-bench --workers N --rounds R [--warmup K] [--only NAME] [--no-drivers]
//! Output, one line per workload: `<name> <median_ns_per_op> <median_ns_total>`.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::runtime::{self, Runtime};
use tokio::sync::oneshot;

const NUM_SPAWN: usize = 10_000;
const NUM_YIELD: usize = 1_000;
const YIELD_TASKS: usize = 200;
const NUM_PINGS: usize = 1_000;
const CHAIN: usize = 1_000;
const NUM_JOIN: usize = 10_000;

struct Opts {
    workers: usize,
    rounds: usize,
    warmup: usize,
    drivers: bool,
}

/// Runs `body` warmup + rounds times; each call returns the time it measured.
fn measure(o: &Opts, mut body: impl FnMut() -> Duration) -> Vec<u64> {
    for _ in 0..o.warmup {
        body();
    }
    (0..o.rounds).map(|_| body().as_nanos() as u64).collect()
}

/// Times one iteration of a criterion-style `b.iter` closure.
fn timed(f: impl FnOnce()) -> Duration {
    let t0 = Instant::now();
    f();
    t0.elapsed()
}

fn spawn_many_local(o: &Opts, rt: &Runtime) -> Vec<u64> {
    let (tx, rx) = mpsc::sync_channel(1000);
    let rem = Arc::new(AtomicUsize::new(0));

    measure(o, || {
        timed(|| {
            rem.store(NUM_SPAWN, Relaxed);

            rt.block_on(async {
                for _ in 0..NUM_SPAWN {
                    let tx = tx.clone();
                    let rem = rem.clone();

                    tokio::spawn(async move {
                        if 1 == rem.fetch_sub(1, Relaxed) {
                            tx.send(()).unwrap();
                        }
                    });
                }

                rx.recv().unwrap();
            });
        })
    })
}

fn spawn_many_remote_idle(o: &Opts, rt: &Runtime) -> Vec<u64> {
    let mut handles = Vec::with_capacity(NUM_SPAWN);

    measure(o, || {
        timed(|| {
            for _ in 0..NUM_SPAWN {
                handles.push(rt.spawn(async {}));
            }

            rt.block_on(async {
                for handle in handles.drain(..) {
                    handle.await.unwrap();
                }
            });
        })
    })
}

fn yield_many(o: &Opts, rt: &Runtime) -> Vec<u64> {
    let (tx, rx) = mpsc::sync_channel(YIELD_TASKS);

    measure(o, || {
        timed(|| {
            for _ in 0..YIELD_TASKS {
                let tx = tx.clone();

                rt.spawn(async move {
                    for _ in 0..NUM_YIELD {
                        tokio::task::yield_now().await;
                    }

                    tx.send(()).unwrap();
                });
            }

            for _ in 0..YIELD_TASKS {
                rx.recv().unwrap();
            }
        })
    })
}

fn ping_pong(o: &Opts, rt: &Runtime) -> Vec<u64> {
    let (done_tx, done_rx) = mpsc::sync_channel(1000);
    let rem = Arc::new(AtomicUsize::new(0));

    measure(o, || {
        timed(|| {
            let done_tx = done_tx.clone();
            let rem = rem.clone();
            rem.store(NUM_PINGS, Relaxed);

            rt.block_on(async {
                tokio::spawn(async move {
                    for _ in 0..NUM_PINGS {
                        let rem = rem.clone();
                        let done_tx = done_tx.clone();

                        tokio::spawn(async move {
                            let (tx1, rx1) = oneshot::channel();
                            let (tx2, rx2) = oneshot::channel();

                            tokio::spawn(async move {
                                rx1.await.unwrap();
                                tx2.send(()).unwrap();
                            });

                            tx1.send(()).unwrap();
                            rx2.await.unwrap();

                            if 1 == rem.fetch_sub(1, Relaxed) {
                                done_tx.send(()).unwrap();
                            }
                        });
                    }
                });

                done_rx.recv().unwrap();
            });
        })
    })
}

fn chained_spawn(o: &Opts, rt: &Runtime) -> Vec<u64> {
    fn iter(done_tx: mpsc::SyncSender<()>, n: usize) {
        if n == 0 {
            done_tx.send(()).unwrap();
        } else {
            tokio::spawn(async move {
                iter(done_tx, n - 1);
            });
        }
    }

    let (done_tx, done_rx) = mpsc::sync_channel(1000);

    measure(o, || {
        timed(|| {
            let done_tx = done_tx.clone();

            rt.block_on(async {
                tokio::spawn(async move {
                    iter(done_tx, CHAIN);
                });

                done_rx.recv().unwrap();
            });
        })
    })
}

/// Serial spawn + join inside a task that runs on a worker: the spawned task goes to the
/// worker's LIFO slot and `.await` on its JoinHandle suspends the parent until it is done.
/// Timed inside the parent, around the loop only.
fn spawn_join_worker(o: &Opts, rt: &Runtime) -> Vec<u64> {
    measure(o, || {
        rt.block_on(async {
            tokio::spawn(async {
                let t0 = Instant::now();
                for _ in 0..NUM_JOIN {
                    tokio::spawn(async {}).await.unwrap();
                }
                t0.elapsed()
            })
            .await
            .unwrap()
        })
    })
}

/// Serial spawn + join from a thread that is not a worker: block_on polls its future on the
/// calling thread, so each spawn goes through the inject queue and each `.await` parks the
/// calling thread until a worker has run the task. One block_on around the whole loop (cheaper
/// than one block_on per join).
fn spawn_join_outside(o: &Opts, rt: &Runtime) -> Vec<u64> {
    measure(o, || {
        rt.block_on(async {
            let t0 = Instant::now();
            for _ in 0..NUM_JOIN {
                tokio::spawn(async {}).await.unwrap();
            }
            t0.elapsed()
        })
    })
}

type Workload = fn(&Opts, &Runtime) -> Vec<u64>;

const WORKLOADS: &[(&str, Workload, usize)] = &[
    ("spawn_many_local", spawn_many_local, NUM_SPAWN),
    ("spawn_many_remote_idle", spawn_many_remote_idle, NUM_SPAWN),
    ("yield_many", yield_many, YIELD_TASKS * NUM_YIELD),
    ("ping_pong", ping_pong, NUM_PINGS),
    ("chained_spawn", chained_spawn, CHAIN),
    ("spawn_join_worker", spawn_join_worker, NUM_JOIN),
    ("spawn_join_outside", spawn_join_outside, NUM_JOIN),
];

fn rt(o: &Opts) -> Runtime {
    let mut b = runtime::Builder::new_multi_thread();
    b.worker_threads(o.workers);
    if o.drivers {
        // As Tokio's benchmark does: I/O and time drivers on.
        b.enable_all();
    }
    b.build().unwrap()
}

fn median(v: &mut [u64]) -> f64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: tokio-bench --workers N --rounds R [--warmup K] [--only NAME] [--no-drivers]"
    );
    std::process::exit(2);
}

fn main() {
    let mut o = Opts {
        workers: 2,
        rounds: 20,
        warmup: 3,
        drivers: true,
    };
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let num = |args: &mut dyn Iterator<Item = String>| -> usize {
            args.next()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match a.as_str() {
            "--workers" => o.workers = num(&mut args),
            "--rounds" => o.rounds = num(&mut args),
            "--warmup" => o.warmup = num(&mut args),
            "--only" => only = Some(args.next().unwrap_or_else(|| usage())),
            "--no-drivers" => o.drivers = false,
            _ => usage(),
        }
    }
    if o.workers == 0 || o.rounds == 0 {
        usage();
    }
    if let Some(name) = &only {
        if !WORKLOADS.iter().any(|w| w.0 == name) {
            eprintln!("tokio-bench: unknown workload {}", name);
            std::process::exit(2);
        }
    }

    for &(name, f, ops) in WORKLOADS {
        if only.as_deref().map_or(false, |n| n != name) {
            continue;
        }
        // A fresh runtime per workload, as each criterion bench function builds its own.
        let rt = rt(&o);
        let mut v = f(&o, &rt);
        let total = median(&mut v);
        println!("{} {:.1} {:.0}", name, total / ops as f64, total);
        drop(rt);
    }
}
