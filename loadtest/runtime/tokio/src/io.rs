//! Tokio twin of loadtest/runtime/io_bench.c: the same four workloads, each a task spawned on
//! the runtime and awaited from the main thread, doing its operations one after another.
//!
//! Usage: tokio-io-bench --workers N --rounds R [--warmup K] [--only NAME]
//! Output, one line per workload: `<name> <median_ns_per_op> <median_ns_total>`.
//!
//! Sockets are read and written with `readable()`/`try_read()` and `writable()`/`try_write()`,
//! Tokio's own lowest-overhead path (no `io-util` buffering in between); the file read is
//! `spawn_blocking` around `read_at`, the cheapest way Tokio offers (`tokio::fs::File` would add
//! a seek and its own buffer).

use std::io::ErrorKind::WouldBlock;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::runtime::{Builder, Runtime};

const TCP_OPS: usize = 200;
const UDP_OPS: usize = 2000;
const BLOCKING_OPS: usize = 2000;
const FILE_OPS: usize = 10_000;
const MSG: usize = 64;

async fn read_some(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        s.readable().await?;
        match s.try_read(buf) {
            Err(e) if e.kind() == WouldBlock => continue,
            r => return r,
        }
    }
}

async fn write_all(s: &TcpStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        s.writable().await?;
        match s.try_write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A TCP connection of the server: read 64 bytes, write them back, close (drop).
async fn serve(s: TcpStream) {
    let mut buf = [0u8; MSG];
    let mut got = 0;
    while got < MSG {
        match read_some(&s, &mut buf[got..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => got += n,
        }
    }
    let _ = write_all(&s, &buf).await;
}

async fn tcp_ops(addr: SocketAddr, ops: usize) {
    let out = [b'p'; MSG];
    let mut buf = [0u8; 4096];
    for _ in 0..ops {
        let s = TcpStream::connect(addr).await.expect("connect");
        s.set_nodelay(true).unwrap();
        write_all(&s, &out).await.expect("write");
        let mut got = 0;
        loop {
            // The echo, then the server's close.
            let n = read_some(&s, &mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got += n;
        }
        assert_eq!(got, MSG);
    }
}

async fn udp_ops(sock: &UdpSocket, ops: usize) {
    let out = [b'p'; MSG];
    let mut buf = [0u8; 4096];
    for _ in 0..ops {
        sock.send(&out).await.expect("send");
        let n = sock.recv(&mut buf).await.expect("recv");
        assert_eq!(n, MSG);
    }
}

async fn blocking_ops(ops: usize) {
    for _ in 0..ops {
        tokio::task::spawn_blocking(|| ()).await.unwrap();
    }
}

async fn file_ops(file: Arc<std::fs::File>, ops: usize) {
    let mut buf = vec![0u8; 4096];
    for _ in 0..ops {
        let f = file.clone();
        let (n, b) = tokio::task::spawn_blocking(move || {
            let n = f.read_at(&mut buf, 0).expect("read");
            (n, buf)
        })
        .await
        .unwrap();
        assert_eq!(n, 4096);
        buf = b;
    }
}

const WORKLOADS: &[(&str, usize)] = &[
    ("tcp_connect_rtt", TCP_OPS),
    ("udp_ping_pong", UDP_OPS),
    ("spawn_blocking_rtt", BLOCKING_OPS),
    ("file_read_4k", FILE_OPS),
];

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
    eprintln!("usage: tokio-io-bench --workers N --rounds R [--warmup K] [--only NAME]");
    std::process::exit(2);
}

fn one_round(rt: &Runtime, name: &str, ops: usize, tcp: SocketAddr, udp: SocketAddr,
             file: &Arc<std::fs::File>) -> u64 {
    // The UDP client's socket is made before the clock starts, as in io_bench.c.
    let sock = if name == "udp_ping_pong" {
        Some(rt.block_on(async {
            let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            s.connect(udp).await.unwrap();
            s
        }))
    } else {
        None
    };
    let file = file.clone();
    let name = name.to_string();
    let t0 = Instant::now();
    let task = rt.spawn(async move {
        match name.as_str() {
            "tcp_connect_rtt" => tcp_ops(tcp, ops).await,
            "udp_ping_pong" => udp_ops(sock.as_ref().unwrap(), ops).await,
            "spawn_blocking_rtt" => blocking_ops(ops).await,
            _ => file_ops(file, ops).await,
        }
    });
    rt.block_on(task).unwrap();
    t0.elapsed().as_nanos() as u64
}

fn main() {
    let (mut workers, mut rounds, mut warmup) = (2usize, 20usize, 3usize);
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || -> usize { args.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| usage()) };
        match a.as_str() {
            "--workers" => workers = num(),
            "--rounds" => rounds = num(),
            "--warmup" => warmup = num(),
            "--only" => only = Some(args.next().unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    if workers == 0 || rounds == 0 {
        usage();
    }
    let path = std::env::temp_dir().join(format!("tokio-io-bench-{}", std::process::id()));
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let file = Arc::new(std::fs::File::open(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    for &(name, ops) in WORKLOADS {
        if only.as_deref().map_or(false, |n| n != name) {
            continue;
        }
        let rt = Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap();
        let (tcp, udp) = rt.block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let u = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let (tcp, udp) = (l.local_addr().unwrap(), u.local_addr().unwrap());
            tokio::spawn(async move {
                loop {
                    let (s, _) = l.accept().await.unwrap();
                    s.set_nodelay(true).unwrap();
                    tokio::spawn(serve(s));
                }
            });
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                loop {
                    let (n, from) = u.recv_from(&mut buf).await.unwrap();
                    let _ = u.send_to(&buf[..n], from).await;
                }
            });
            (tcp, udp)
        });
        for _ in 0..warmup {
            one_round(&rt, name, ops, tcp, udp, &file);
        }
        let mut v: Vec<u64> = (0..rounds).map(|_| one_round(&rt, name, ops, tcp, udp, &file)).collect();
        let total = median(&mut v);
        println!("{} {:.1} {:.0}", name, total / ops as f64, total);
        rt.shutdown_background();
    }
}
