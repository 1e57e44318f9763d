//! Tokio twin of loadtest/runtime/bench.c.
//!
//! The workloads are Tokio's own `benches/rt_multi_threaded.rs` (spawn_many_local,
//! spawn_many_remote_idle, yield_many, ping_pong, chained_spawn), copied body for body, with
//! criterion replaced by a plain loop: `warmup` untimed iterations, then `rounds` timed ones,
//! and the median printed. Two serial spawn+join workloads are added (on a worker, and from
//! outside the runtime), and four of tokio::sync (mutex_contention, semaphore, mpmc,
//! broadcast_fanout), twins of bench.c's, whose comment describes them.
//!
//! Usage: tokio-bench --workers N --rounds R [--warmup K] [--only NAME] [--no-drivers]
//! Output, one line per workload: `<name> <median_ns_per_op> <median_ns_total>`.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::runtime::{self, Runtime};
use tokio::sync::mpsc as tmpsc;
use tokio::sync::oneshot;
use tokio::sync::{broadcast, Mutex as TokioMutex, Semaphore};

const NUM_SPAWN: usize = 10_000;
const NUM_YIELD: usize = 1_000;
const YIELD_TASKS: usize = 200;
const NUM_PINGS: usize = 1_000;
const CHAIN: usize = 1_000;
const NUM_JOIN: usize = 10_000;
const SYNC_TASKS: usize = 16;
const SYNC_ITERS: usize = 1_000;
const SEM_PERMITS: usize = 4;
const MPMC_PRODUCERS: usize = 4;
const MPMC_CONSUMERS: usize = 4;
const MPMC_PER: usize = 5_000;
const MPMC_CAP: usize = 64;
const BCAST_RECEIVERS: usize = 8;
const BCAST_N: u64 = 1_000;
const BCAST_CAP: usize = 1_024;

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

/// 16 tasks spawned from outside, each locking one tokio Mutex 1000 times; the main thread
/// waits for every task's signal.
fn mutex_contention(o: &Opts, rt: &Runtime) -> Vec<u64> {
    let (tx, rx) = mpsc::sync_channel(1000);
    measure(o, || {
        let m = Arc::new(TokioMutex::new(0u64));
        let d = timed(|| {
            for _ in 0..SYNC_TASKS {
                let m = m.clone();
                let tx = tx.clone();
                rt.spawn(async move {
                    for _ in 0..SYNC_ITERS {
                        *m.lock().await += 1;
                    }
                    tx.send(()).unwrap();
                });
            }
            for _ in 0..SYNC_TASKS {
                rx.recv().unwrap();
            }
        });
        assert_eq!(*m.try_lock().unwrap(), (SYNC_TASKS * SYNC_ITERS) as u64);
        d
    })
}

/// 16 tasks x 1000 acquire + release of one permit out of 4.
fn semaphore(o: &Opts, rt: &Runtime) -> Vec<u64> {
    let (tx, rx) = mpsc::sync_channel(1000);
    measure(o, || {
        let s = Arc::new(Semaphore::new(SEM_PERMITS));
        let d = timed(|| {
            for _ in 0..SYNC_TASKS {
                let s = s.clone();
                let tx = tx.clone();
                rt.spawn(async move {
                    for _ in 0..SYNC_ITERS {
                        let _permit = s.acquire().await.unwrap();
                    }
                    tx.send(()).unwrap();
                });
            }
            for _ in 0..SYNC_TASKS {
                rx.recv().unwrap();
            }
        });
        assert_eq!(s.available_permits(), SEM_PERMITS);
        d
    })
}

/// Tokio has no MPMC channel: 4 consumers share one mpsc Receiver behind a tokio Mutex (the
/// usual idiom), 4 producers send 5000 values each into a channel of 64.
fn mpmc(o: &Opts, rt: &Runtime) -> Vec<u64> {
    let (done_tx, done_rx) = mpsc::sync_channel(1000);
    let delivered = Arc::new(AtomicUsize::new(0));
    measure(o, || {
        delivered.store(0, Relaxed);
        let d = timed(|| {
            let (tx, rx) = tmpsc::channel::<usize>(MPMC_CAP);
            let rx = Arc::new(TokioMutex::new(rx));
            for _ in 0..MPMC_CONSUMERS {
                let rx = rx.clone();
                let done = done_tx.clone();
                let delivered = delivered.clone();
                rt.spawn(async move {
                    loop {
                        let v = rx.lock().await.recv().await;
                        if v.is_none() {
                            break;
                        }
                        delivered.fetch_add(1, Relaxed);
                    }
                    done.send(()).unwrap();
                });
            }
            for _ in 0..MPMC_PRODUCERS {
                let tx = tx.clone();
                let done = done_tx.clone();
                rt.spawn(async move {
                    for i in 0..MPMC_PER {
                        tx.send(i).await.unwrap();
                    }
                    drop(tx);
                    done.send(()).unwrap();
                });
            }
            drop(tx);
            for _ in 0..MPMC_CONSUMERS + MPMC_PRODUCERS {
                done_rx.recv().unwrap();
            }
        });
        assert_eq!(delivered.load(Relaxed), MPMC_PRODUCERS * MPMC_PER);
        d
    })
}

/// One sender task, 1000 u64 into a broadcast channel of 1024, 8 receivers reading to the close.
fn broadcast_fanout(o: &Opts, rt: &Runtime) -> Vec<u64> {
    let (done_tx, done_rx) = mpsc::sync_channel(1000);
    let delivered = Arc::new(AtomicUsize::new(0));
    measure(o, || {
        delivered.store(0, Relaxed);
        let d = timed(|| {
            let (tx, _) = broadcast::channel::<u64>(BCAST_CAP);
            for _ in 0..BCAST_RECEIVERS {
                let mut rx = tx.subscribe();
                let done = done_tx.clone();
                let delivered = delivered.clone();
                rt.spawn(async move {
                    loop {
                        match rx.recv().await {
                            Ok(_) => {
                                delivered.fetch_add(1, Relaxed);
                            }
                            Err(broadcast::error::RecvError::Closed) => break,
                            Err(broadcast::error::RecvError::Lagged(n)) => panic!("lagged {}", n),
                        }
                    }
                    done.send(()).unwrap();
                });
            }
            let done = done_tx.clone();
            rt.spawn(async move {
                for v in 0..BCAST_N {
                    tx.send(v).unwrap();
                }
                drop(tx);
                done.send(()).unwrap();
            });
            for _ in 0..BCAST_RECEIVERS + 1 {
                done_rx.recv().unwrap();
            }
        });
        assert_eq!(delivered.load(Relaxed), BCAST_RECEIVERS * BCAST_N as usize);
        d
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
    (
        "mutex_contention",
        mutex_contention,
        SYNC_TASKS * SYNC_ITERS,
    ),
    ("semaphore", semaphore, SYNC_TASKS * SYNC_ITERS),
    ("mpmc", mpmc, MPMC_PRODUCERS * MPMC_PER),
    (
        "broadcast_fanout",
        broadcast_fanout,
        BCAST_RECEIVERS * BCAST_N as usize,
    ),
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
