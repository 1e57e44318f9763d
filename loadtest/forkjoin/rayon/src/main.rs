//! Rayon twin of loadtest/forkjoin/bench_magpie.c: same workloads, same output format.
//! usage: forkjoin-rayon WORKLOAD THREADS REPS   (WORKLOAD: fib35 fib40c tree20 sum sort)

use std::time::Instant;

fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = rayon::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn fib_seq(n: u64) -> u64 {
    if n < 2 {
        n
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

fn fib_cutoff(n: u64) -> u64 {
    if n <= 20 {
        return fib_seq(n);
    }
    let (a, b) = rayon::join(|| fib_cutoff(n - 1), || fib_cutoff(n - 2));
    a + b
}

fn tree(depth: u32) -> u64 {
    if depth == 0 {
        return 1;
    }
    let (a, b) = rayon::join(|| tree(depth - 1), || tree(depth - 1));
    a + b
}

fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545f4914f6cdd1d)
}

fn main() {
    use rayon::prelude::*;
    let args: Vec<String> = std::env::args().collect();
    let workload = args.get(1).map(String::as_str).unwrap_or("fib35");
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();

    let sum_input: Vec<i64> = (0..10_000_000i64).map(|i| i % 1000).collect();
    let mut sort_input: Vec<i32> = Vec::new();
    if workload == "sort" {
        let mut s = 42u64;
        sort_input = (0..1_000_000).map(|_| (xorshift(&mut s) >> 33) as i32).collect();
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps + 1 {
        let mut data = sort_input.clone();
        let t0 = Instant::now();
        let check: u64 = pool.install(|| match workload {
            "fib35" => fib(35),
            "fib40c" => fib_cutoff(40),
            "tree20" => tree(20),
            "sum" => sum_input.par_iter().sum::<i64>() as u64,
            "sort" => {
                data.par_sort_unstable();
                data[data.len() / 2] as u64
            }
            _ => panic!("unknown workload"),
        });
        let ns = t0.elapsed().as_nanos() as f64;
        if workload == "sort" {
            assert!(data.windows(2).all(|w| w[0] <= w[1]));
        }
        let expect: u64 = match workload {
            "fib35" => 9_227_465,
            "fib40c" => 102_334_155,
            "tree20" => 1 << 20,
            "sum" => 4_995_000_000,
            _ => check,
        };
        assert_eq!(check, expect, "wrong result");
        times.push(ns);
    }
    times.remove(0); // warm-up
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let med = times[times.len() / 2];
    println!("rayon {} threads={} median_ms={:.3}", workload, threads, med / 1e6);
}
