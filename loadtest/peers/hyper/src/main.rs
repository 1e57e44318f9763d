//! Peer server for loadtest/http/compare.sh: Tokio multi-thread runtime +
//! hyper 0.14 answering the same routes as magpied.
//!
//!   GET  /      -> 200 "Hello, World!" (text/plain, 13 bytes)
//!   POST /echo  -> 200 with the request body
//!
//!   hyper-peer [--listen 127.0.0.1:8080] [--workers N] [--pipeline-flush]
//!
//! --workers sets the runtime's worker threads (default: one per CPU, Tokio's
//! default). --pipeline-flush turns on hyper's http1_pipeline_flush, which
//! batches the responses to pipelined requests into fewer writes; it is off by
//! default so the figures match stock hyper. Prints "listening http=ADDR" on
//! stdout once the socket is bound, like magpied does.

use std::convert::Infallible;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};

use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::service::{make_service_fn, service_fn};
use hyper::{Body, Method, Request, Response, Server, StatusCode};

static HELLO: &[u8] = b"Hello, World!";

fn status(code: StatusCode, allow: Option<&'static str>) -> Response<Body> {
    let mut resp = Response::new(Body::from(code.canonical_reason().unwrap_or("")));
    *resp.status_mut() = code;
    if let Some(a) = allow {
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static(a));
    }
    resp
}

async fn handle(req: Request<Body>) -> Result<Response<Body>, Infallible> {
    let resp = match (req.method(), req.uri().path()) {
        (&Method::GET, "/") | (&Method::HEAD, "/") => {
            let mut resp = Response::new(Body::from(HELLO));
            let h = resp.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            h.insert(CONTENT_LENGTH, HeaderValue::from_static("13"));
            resp
        }
        (_, "/") => status(StatusCode::METHOD_NOT_ALLOWED, Some("GET, HEAD")),
        (&Method::POST, "/echo") => match hyper::body::to_bytes(req.into_body()).await {
            Ok(body) => {
                let mut resp = Response::new(Body::from(body));
                resp.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                resp
            }
            Err(_) => status(StatusCode::BAD_REQUEST, None),
        },
        (_, "/echo") => status(StatusCode::METHOD_NOT_ALLOWED, Some("POST")),
        _ => status(StatusCode::NOT_FOUND, None),
    };
    Ok(resp)
}

/// std's TcpListener::bind uses a backlog of 128, which overflows when wrk
/// opens 256 connections at once; listen with 1024 like nginx.conf.in
/// (Go uses net.core.somaxconn, 4096 here).
fn bind(addr: &str) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    Ok(sock.into())
}

fn usage() -> ! {
    eprintln!("usage: hyper-peer [--listen ADDR] [--workers N] [--pipeline-flush]");
    std::process::exit(2);
}

fn main() {
    let mut listen = String::from("127.0.0.1:8080");
    let mut workers: usize = 0;
    let mut pipeline_flush = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" | "-l" => listen = args.next().unwrap_or_else(|| usage()),
            "--workers" | "-w" => {
                workers = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--pipeline-flush" => pipeline_flush = true,
            _ => usage(),
        }
    }

    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if workers > 0 {
        builder.worker_threads(workers);
    }
    let rt = builder.build().expect("tokio runtime");

    let listener = bind(&listen).unwrap_or_else(|e| {
        eprintln!("hyper-peer: bind {}: {}", listen, e);
        std::process::exit(1);
    });
    let addr = listener.local_addr().expect("local_addr");

    rt.block_on(async move {
        let make = make_service_fn(|_conn| async { Ok::<_, Infallible>(service_fn(handle)) });
        let server = Server::from_tcp(listener)
            .expect("from_tcp")
            .http1_only(true)
            .http1_pipeline_flush(pipeline_flush)
            .tcp_nodelay(true)
            .serve(make);
        println!(
            "listening http={} workers={}",
            addr,
            if workers > 0 {
                workers.to_string()
            } else {
                "auto".into()
            }
        );
        let _ = std::io::stdout().flush();
        if let Err(e) = server.await {
            eprintln!("hyper-peer: {}", e);
            std::process::exit(1);
        }
    });
}
