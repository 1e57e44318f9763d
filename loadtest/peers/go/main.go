// Peer server for loadtest/http/compare.sh: Go net/http answering the same
// routes as magpied.
//
//	GET  /      -> 200 "Hello, World!" (text/plain, 13 bytes)
//	POST /echo  -> 200 with the request body
//
// Standard library only. Prints "listening http=ADDR" on stdout once the
// socket is bound, like magpied does.
//
//	go-peer -listen 127.0.0.1:8080 [-procs N]
//
// -procs sets GOMAXPROCS; 0 (the default) keeps the runtime's choice, which is
// $GOMAXPROCS if set, otherwise every CPU.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
)

var hello = []byte("Hello, World!")

func handler(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/plain")
		h.Set("Content-Length", "13")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			w.Write(hello)
		}
	case "/echo":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", fmt.Sprint(len(body)))
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	default:
		http.NotFound(w, r)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	procs := flag.Int("procs", 0, "GOMAXPROCS (0: $GOMAXPROCS or all CPUs)")
	flag.Parse()
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening http=%s gomaxprocs=%d\n", ln.Addr(), runtime.GOMAXPROCS(0))
	os.Stdout.Sync()

	srv := &http.Server{Handler: http.HandlerFunc(handler)}
	log.Fatal(srv.Serve(ln))
}
