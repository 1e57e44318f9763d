/* magpie_io.h: libmagpie's reactor (the runtime's libuv loop) and what tasks wait on through
 * it: timers, TCP streams, listeners and connects, UDP sockets, name resolution and file
 * reads, opens and stats on the blocking pool. Everything else is in magpie_core.h,
 * included here.
 *
 * This header does not include <uv.h> (whose pthread_rwlock_t a strict -std=c11 hides): it
 * compiles with -std=c11 -pedantic and no feature macro. The libuv types it names are declared
 * incomplete here (uv_loop_t, uv_stream_t); the socket objects hold no libuv handle. A
 * program that calls libuv
 * itself (on mp_runtime_loop()) includes <uv.h> with the feature macros libuv needs
 * (-D_DEFAULT_SOURCE, or -std=gnu11), before or after this header.
 */
#ifndef MAGPIE_IO_H
#define MAGPIE_IO_H

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "magpie_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* libuv's types, by name only (C11 allows <uv.h> to repeat these typedefs). */
typedef struct uv_loop_s uv_loop_t;
typedef struct uv_stream_s uv_stream_t;
/* getaddrinfo's, which <netdb.h> defines only under POSIX feature macros. */
struct addrinfo;

/* The end of a stream: what mp_tcp_read_poll() reports once the peer has closed its side.
 * The value is libuv's UV_EOF (the library checks that they agree), so either name compares
 * equal to it. */
#define MP_EOF (-4095)

/* The reactor: one libuv loop per runtime, run by whichever worker holds the driver role.
 * libuv calls on this loop or its handles must be made on the thread that holds the role:
 * inside a libuv callback, or through mp_loop_call(). */

typedef struct mp_loop_cmd {
    /* private: the reactor's until fn has run */
    struct mp_loop_cmd *next;
    void (*fn)(uv_loop_t *loop, void *arg);
    void *arg;
} mp_loop_cmd;

uv_loop_t *mp_runtime_loop(mp_runtime *rt);
/* Run fn(loop, arg) on the loop's thread: at once when the caller can take the driver role (or
 * already holds it), else soon on the worker that holds it; cmd is the caller's storage until
 * fn has run. A call may race with mp_runtime_shutdown() (not with mp_runtime_free()): it
 * returns 0 and fn runs before the loop is closed, or it returns -ESHUTDOWN and fn never
 * runs. From inside the loop's close (fn of a command that close runs, a close callback) it
 * is -ESHUTDOWN too. */
int mp_loop_call(mp_runtime *rt, mp_loop_cmd *cmd, void (*fn)(uv_loop_t *loop, void *arg),
                 void *arg);
/* Run fn(loop, arg) on the loop's thread as mp_loop_call() does, and return once it has run
 * (what fn wrote is visible to the caller then). The caller blocks on a futex of its own, not
 * on the loop. Called holding the loop (from a libuv callback, or from fn itself), it runs fn
 * inline. From one of rt's workers, or inside a poll of one of rt's tasks, without holding the
 * loop, it returns -EDEADLK and runs nothing: that thread may be the one the loop is waiting
 * for. As with mp_loop_call(), a call racing with mp_runtime_shutdown() returns 0 once fn
 * has run before the loop was closed, or -ESHUTDOWN with fn never run. */
int mp_loop_call_wait(mp_runtime *rt, void (*fn)(uv_loop_t *loop, void *arg), void *arg);
/* Does the calling thread hold this runtime's loop (e.g. in a libuv callback)? */
bool mp_loop_is_current(mp_runtime *rt);

/* Timers for tasks: a hierarchical wheel in the runtime (1 ms resolution) driven by one
 * libuv timer, armed for the earliest deadline only. An idle runtime with no timer pending
 * has no timer armed. Times are milliseconds of the monotonic clock (mp_now_ms). */
typedef struct mp_timer {
    /* private: */
    void *link_[2]; /* the wheel's entry, guarded by the runtime's timer lock */
    uint64_t deadline_ms;
    uint32_t where_;
    bool armed_; /* the owning task's: its last poll left the entry linked (timer.c) */
    /* The deadline last asked for (>= the entry's), and a flag set when the loop fires it. */
    _Atomic uint64_t want_ms_;
    mp_waker waker;
    mp_runtime *rt;
} mp_timer;

/* mp_now_ms(), the clock of timers and deadlines, is in magpie_core.h. */
void mp_timer_init(mp_timer *t, mp_runtime *rt);
/* MP_READY once mp_now_ms() >= deadline_ms; MP_PENDING, and the task is woken then. The
 * deadline may change between polls; moving it later is cheap (no clock read, no wheel
 * work), and a poll that does so just past the old deadline may say MP_PENDING and be woken
 * at once. */
mp_poll mp_timer_poll(mp_timer *t, uint64_t deadline_ms, mp_context *cx);
/* Disarm (no-op if not armed). Call before the timer's memory goes away. */
void mp_timer_cancel(mp_timer *t);

/* A deadline around any wait of a task (tokio::time::timeout): w->poll first, then the timer
 * t. MP_READY with *err = 0 when the wait is over (its result wherever w->arg says; the timer
 * is disarmed), or with *err = -ETIMEDOUT when deadline_ms passed first: w->cancel has then
 * run, so nothing of the wait stays registered and nothing handed to it is kept (if the cancel
 * reports the wait complete after all, *err is 0 instead). MP_PENDING: both the wait and the
 * timer will wake the task. A wait that is ready wins over a deadline that passed at the same
 * moment. t is the caller's, initialised with mp_timer_init() (one per task serves every wait
 * in turn); mp_timer_cancel() it, and w->cancel the wait, in the task's cancel callback as for
 * any wait. mp_wait and the race it settles: magpie_core.h, "Deadlines". */
mp_poll mp_timeout_poll(mp_timer *t, uint64_t deadline_ms, const mp_wait *w, mp_context *cx,
                        int *err);

/* Readiness of one socket, as the runtime's edge-triggered epoll set reports it: embedded in
 * every socket object below (mp_tcp, mp_tcp_listener, mp_udp). Its fields are private. */
typedef struct mp_io mp_io;
struct mp_io {
    /* private: the runtime's (io.c) */
    _Atomic uint64_t bits;     /* readiness bits and event tick */
    _Atomic uint64_t ready_ns; /* when the loop last saw it readable */
    _Atomic uint32_t lock;     /* guards reader and writer between the loop and the tasks */
    _Atomic bool interrupted;  /* an interrupt not yet reported to the reader */
    bool close_started;        /* loop side: close_fn has run (beside it: no padding) */
    _Atomic uint32_t state;    /* closed (zero), open, closing */
    int fd;                    /* immutable while open */
    mp_waker reader, writer;
    mp_runtime *rt;
    void (*close_fn)(mp_io *io); /* the object's own close, on the loop's thread */
    mp_loop_cmd cmd_close;
    mp_io *prev, *next; /* the reactor's list of open sockets, under its lock */
};

/* A TCP stream served to one task. The task reads and writes the socket itself (read() into
 * the stream's buffer, send() from the caller's bytes), on whichever worker runs it; the loop
 * only reports edge-triggered readiness and wakes the task when a read or write would block.
 * The buffer is refilled only once the task has consumed all of it (backpressure: while the
 * task is behind, the peer is held back by TCP). It is taken just before a read and given
 * back once consumed when the stream waits for data, so an idle stream holds no buffer.
 *
 * Who may poll it: one task reads (mp_tcp_read_poll, mp_tcp_consume) and one task writes
 * (mp_tcp_write_poll) at a time, usually the same one; the stream keeps the waker of the last
 * reader and the last writer. A stream may be handed to another task (a pooled connection
 * serving one request's task after another's, on any worker): the old owner stops polling,
 * calls mp_tcp_disown() to give back the wakers it left, and passes the stream on through
 * anything that orders memory (a channel, a mutex, a spawn); the new owner polls from then on.
 * A write that returned MP_PENDING must be finished by the same owner before the hand-off. */
/* The largest read buffer a stream takes (bufsize of mp_tcp_open() and the others). */
#define MP_TCP_BUF_MAX (1u << 30)
typedef struct mp_tcp mp_tcp;
struct mp_tcp {
    /* private: the stream's, read through the functions below */
    mp_io io;
    int err;                /* the task's: 0, MP_EOF, or a negative errno, sticky */
    uint32_t cap;           /* the read buffer's size */
    uint32_t head, tail;    /* the task's: buf[head..tail) is unconsumed input */
    uint64_t read_ns;       /* the task's: mp_tcp_read_time() */
    uint64_t read_ready_ns; /* the task's: io's ready_ns at its last read */
    char *buf;              /* the task's: NULL while idle */
    size_t write_done;      /* the task's: progress of a write that returned MP_PENDING */
    void (*on_closed)(mp_tcp *c);
    bool connecting; /* the task's: mp_tcp_connect() started, not yet reported */
};

/* A stream over fd, a connected stream socket the caller accepted (accept4() with
 * SOCK_NONBLOCK, as a server on the loop's thread or on its own epoll does), with a read
 * buffer of bufsize bytes (0: 16 KiB; at most MP_TCP_BUF_MAX), watched for readiness. c takes
 * fd whatever the result: 0, and c is open; or -EBADF (fd is not open), -EINVAL (rt NULL, or
 * bufsize over MP_TCP_BUF_MAX), -ESHUTDOWN, or epoll_ctl's error
 * (-ENOMEM, -ENOSPC past max_user_watches, -EPERM for a regular file), with fd closed and c not
 * open (its close runs on_closed at once). fd must be non-blocking: a blocking one stalls the
 * worker that reads it. Like mp_tcp_accept()'s first read, the first mp_tcp_read_poll() tries
 * the socket before any event. Any thread. An open stream costs sizeof(mp_tcp) and the socket:
 * nothing of libuv's. */
int mp_tcp_open(mp_runtime *rt, mp_tcp *c, int fd, size_t bufsize);
/* On the loop's thread (a libuv connection callback): accept a connection from server into c,
 * with a read buffer of bufsize bytes (as mp_tcp_open()), and watch it for readiness. libuv
 * accepts only into a handle of its own: one is allocated for the accept, the socket is
 * duplicated out of it (F_DUPFD_CLOEXEC) and the handle closed, so that c holds no libuv
 * handle after, as from mp_tcp_open(); a server that accepts with accept4() itself spares the
 * allocation and the two system calls. On an error (-ENOMEM when that allocation fails: the
 * connection stays in server's queue, and libuv polls server again after the next accept;
 * -EMFILE or -ENFILE when the duplicate finds no descriptor: the connection is closed; or
 * mp_tcp_open()'s) c is not open (mp_tcp_fileno() returns -EBADF) but is closed with
 * mp_tcp_close() all the same, whose on_closed then runs at once (mp_tcp_close's rule). */
int mp_tcp_accept(mp_runtime *rt, mp_tcp *c, uv_stream_t *server, size_t bufsize);
/* From the owning task: a view of the buffered bytes (MP_READY with *len > 0), or MP_READY
 * with *len == 0 and *err = MP_EOF or a negative errno, or MP_PENDING until data arrives. */
mp_poll mp_tcp_read_poll(mp_tcp *c, mp_context *cx, const char **data, size_t *len, int *err);
/* Any thread: the task's current or next mp_tcp_read_poll returns MP_READY with *len == 0 and
 * *err == -EINTR, once (e.g. a graceful stop reaching a connection waiting for its peer). */
void mp_tcp_interrupt(mp_tcp *c);
/* The reader stops waiting (a timeout, a select's other arm): withdraws the waker that a
 * mp_tcp_read_poll() returning MP_PENDING left; what arrives meanwhile stays for the next
 * read. mp_tcp_cancel_write() does the same for a write or sendfile that returned MP_PENDING
 * (the bytes it sent are sent; mp_tcp_write_progress() says how many; call it again with the
 * same arguments to go on, or close). Neither closes the stream. The reader's, the writer's
 * call. */
void mp_tcp_cancel_read(mp_tcp *c);
void mp_tcp_cancel_write(mp_tcp *c);
/* The task is done with n bytes of the view. */
void mp_tcp_consume(mp_tcp *c, size_t n);
/* Write all of data[0..len): MP_READY with *err = 0 or a negative errno (EPIPE, ECONNRESET);
 * MP_PENDING while the kernel's buffer is full (call again with the same arguments; data must
 * stay put). */
mp_poll mp_tcp_write_poll(mp_tcp *c, mp_context *cx, const char *data, size_t len, int *err);
/* As mp_tcp_write_poll, telling the kernel that more follows at once (MSG_MORE): the bytes
 * need not leave in a segment of their own but wait for the stream's next write or sendfile,
 * which carries them with its own (a response head before its body: one segment, not two, and
 * one wake-up of the peer). The next mp_tcp_write_poll or mp_tcp_sendfile_poll, or a close,
 * sends them; if none comes, Linux sends them after about 200 ms (its cork ceiling). Same
 * errors and waits as mp_tcp_write_poll. The writer's call. */
mp_poll mp_tcp_write_more_poll(mp_tcp *c, mp_context *cx, const char *data, size_t len, int *err);
/* Whether a read might find something: unconsumed input, an error or EOF already seen, or the
 * loop has reported the socket readable (or closed) since a read last found it drained. false:
 * nothing has arrived as far as the runtime has seen, without a system call; an event on its
 * way may still come. For a pooled idle connection: false, reuse it (and cope, as every
 * keep-alive client must, with a close that arrives after); true, look closer (a non-blocking
 * recv with MSG_PEEK) before reuse. The owner's call. */
bool mp_tcp_maybe_readable(mp_tcp *c);
/* End the sending side (shutdown(2) with SHUT_WR): the peer reads what was written, then EOF;
 * this side goes on reading until the peer closes its own (a half-close, as a tunnel passes
 * one on). The writer's call, with no mp_tcp_write_poll() or mp_tcp_sendfile_poll() left
 * unfinished (-EBUSY when one is known to be); a write after it fails with -EPIPE. 0, -EBADF
 * when not open, or the error of shutdown (-ENOTCONN). */
int mp_tcp_shutdown(mp_tcp *c);
/* Send up to count bytes of the file in_fd from *offset with sendfile(2), no copy through the
 * task, and advance *offset: MP_READY with *sent > 0 and *err 0; *sent 0 and *err 0 when the
 * file has no byte at *offset (it ended, or shrank) or count is 0; or *err a negative errno:
 * the socket's (EPIPE, ECONNRESET, EBADF once closed), the file's (EIO), ESPIPE, EINVAL or
 * ENOSYS for a file sendfile cannot read at an offset (a pipe or FIFO, a directory: copy it
 * instead), -EBUSY while a
 * mp_tcp_write_poll() that returned MP_PENDING is unfinished. MP_PENDING while the kernel's
 * buffer is full: call again, with the same arguments, once woken. Returns after one sendfile
 * call that sent something, so a caller that loops sees its progress (and may yield, or apply
 * a send limit). sendfile reads the file on the calling worker: give it bytes that are in the
 * page cache (see mp_file_read_poll), or a worker stalls on the disk. The writer's call. */
mp_poll mp_tcp_sendfile_poll(mp_tcp *c, mp_context *cx, int in_fd, off_t *offset, size_t count,
                             size_t *sent, int *err);
/* Read buffers held by streams now, and default-size ones kept for reuse (at most 4 per
 * thread that served streams, and 64 shared), over the whole process. Either pointer may be
 * NULL. */
void mp_tcp_buffer_stats(size_t *in_use, size_t *pooled);
/* Frees the shared pooled read buffers and the calling thread's own (e.g. after a crowd of
 * connections left). */
void mp_tcp_buffer_trim(void);
/* The socket's file descriptor (for getpeername, setsockopt and the like; reading or writing
 * it directly bypasses the stream), or -EBADF when c is not open: never accepted (zeroed),
 * a failed accept, or once mp_tcp_close() was called. */
int mp_tcp_fileno(const mp_tcp *c);
/* When the bytes of the current read view were known to be readable (monotonic ns,
 * uv_hrtime()'s clock): for the first read after a readable event, the loop's clock when it
 * saw that event (read once per batch of events, so it costs the task no clock read: the
 * bytes' arrival as the runtime saw it, before any wait in a run queue, like nginx's cached
 * loop time); for a read before any readable event (the accept's optimistic first read, even
 * after the loop saw the socket writable) or with none since the last one (a buffer's worth
 * was left behind), the time of that read. The task's own call, after mp_tcp_read_poll()
 * returned bytes. */
uint64_t mp_tcp_read_time(const mp_tcp *c);
/* Bytes of data already sent by a mp_tcp_write_poll() that returned MP_PENDING (0 once it has
 * returned MP_READY): progress of a write the peer is slow to take. The task's own call. */
size_t mp_tcp_write_progress(const mp_tcp *c);
/* Close the stream: the owner's call (the read buffer goes back at once), from its poll, its
 * cancel callback, or after the hand-off rules above a thread that holds it. A task that
 * waits on it is woken and sees -EBADF.
 *
 * The one rule for freeing a socket object (mp_tcp, mp_tcp_listener, mp_udp alike): close
 * every object that was zeroed or handed to an open (accept, connect, listen, bind), whether
 * that open succeeded or not, once; free it in on_closed, once no task will poll it again
 * (count the two, as the examples do). on_closed(c) (may be NULL) runs exactly once for the
 * close, whatever it returns, and the runtime does not touch c after it: on the loop's side
 * once the socket is closed (after mp_runtime_shutdown at the latest), possibly before the
 * closing poll has returned, and possibly inside this call, on the caller's thread, when it
 * could take the loop's driver role (so hold no lock across the close that on_closed takes);
 * or at once, on the caller's thread before the close returns, when
 * nothing is left to close. Returns 0 (closed, or closing); -EBADF: c was not open (zeroed, a
 * failed accept or connect), on_closed ran; -ESHUTDOWN: the runtime's shutdown had closed it,
 * on_closed ran or runs from that close; -EALREADY: c was closed before (a second close: this
 * on_closed is not recorded and does not run; the first close's does). */
int mp_tcp_close(mp_tcp *c, void (*on_closed)(mp_tcp *c));

/* Give back the wakers the calling task left in the stream (a read or write that returned
 * MP_PENDING), before handing the stream to another task; see mp_tcp above. The stream stays
 * open; the next poll, by whichever task, registers its own. The owner's call. */
void mp_tcp_disown(mp_tcp *c);

/* Connecting. mp_tcp_connect() opens a non-blocking socket for addr's family and starts the
 * connection; mp_tcp_connect_poll() then reports its end. The stream is open from the moment
 * mp_tcp_connect() returns 0 (mp_tcp_fileno() works, options may be set), whatever the poll
 * reports: close it with mp_tcp_close() in every case, success or not, and from the task's
 * cancel callback if it is cancelled meanwhile (mp_timer_cancel() the timer too): that is
 * what leaks no socket and no waker. bufsize as for mp_tcp_open(). Returns 0, -EINVAL (addr
 * NULL or of a family other than AF_INET/AF_INET6, addrlen too short, or bufsize over
 * MP_TCP_BUF_MAX), -ESHUTDOWN, or the
 * socket's or connect()'s immediate error as a negative errno (-EMFILE, -ENETUNREACH, ...);
 * on an error the stream is not open, and is closed as after a failed mp_tcp_connect_poll():
 * mp_tcp_close() runs its on_closed at once (-EBADF). Any thread. */
int mp_tcp_connect(mp_runtime *rt, mp_tcp *c, const struct sockaddr *addr, size_t bufsize);
/* From the task that owns c: MP_READY with *err = 0 once connected, or a negative errno
 * (-ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, ...); MP_PENDING until then. With timer non-NULL
 * (the task's own, mp_timer_init'ed), the attempt fails with -ETIMEDOUT at deadline_ms
 * (mp_now_ms's clock) as the timer wheel sees it; the timer is left armed only while this
 * returns MP_PENDING. A poll after the end reports it again (0 once connected). */
mp_poll mp_tcp_connect_poll(mp_tcp *c, mp_context *cx, mp_timer *timer, uint64_t deadline_ms,
                            int *err);

/* Socket options a client or a server sets, on any open stream (the owner's call): Nagle's
 * algorithm off (TCP_NODELAY), keep-alive probes after idle_s seconds of silence (0: off; the
 * kernel's interval and count otherwise), and the kernel's buffer sizes (SO_SNDBUF /
 * SO_RCVBUF, bytes; the kernel doubles and clamps them). 0, -EBADF when not open, or the
 * error of setsockopt. */
int mp_tcp_set_nodelay(mp_tcp *c, bool on);
int mp_tcp_set_keepalive(mp_tcp *c, unsigned idle_s);
int mp_tcp_set_buffers(mp_tcp *c, int sndbuf, int rcvbuf);
/* The local and the peer address (getsockname / getpeername). 0, -EBADF, or -errno. */
int mp_tcp_local_addr(mp_tcp *c, struct sockaddr_storage *out);
int mp_tcp_peer_addr(mp_tcp *c, struct sockaddr_storage *out);

/* A listening TCP socket owned by a task, which accepts with mp_tcp_accept_poll(): a program
 * serves TCP without a libuv call of its own. */
typedef struct mp_tcp_listener mp_tcp_listener;
struct mp_tcp_listener {
    /* private */
    mp_io io;
    void (*on_closed)(mp_tcp_listener *l);
};

enum {
    MP_TCP_REUSEPORT = 1 << 0, /* SO_REUSEPORT: several sockets on one port, the kernel spreads
                                  connections among them */
    MP_TCP_IPV6ONLY = 1 << 1,  /* an AF_INET6 address takes IPv6 connections only */
};

/* Bind to addr (AF_INET or AF_INET6; port 0 picks one, see mp_tcp_listener_addr) with
 * SO_REUSEADDR and the flags above, and listen with backlog (0: SOMAXCONN). 0, -EINVAL, or
 * the negative errno of socket/bind/listen (-EADDRINUSE, -EACCES, -EMFILE...); on an error l
 * is not open (its close runs on_closed at once). Any thread. */
int mp_tcp_listen(mp_runtime *rt, mp_tcp_listener *l, const struct sockaddr *addr, int backlog,
                  unsigned flags);
/* Adopt a socket already bound and listening (systemd's LISTEN_FDS): l owns fd from then on,
 * and it is made non-blocking and close-on-exec. 0, -ENOTSOCK or -EINVAL (not a listening
 * stream socket), -ESHUTDOWN. On an error fd is still the caller's. */
int mp_tcp_listen_fd(mp_runtime *rt, mp_tcp_listener *l, int fd);
int mp_tcp_listener_addr(mp_tcp_listener *l, struct sockaddr_storage *out);
int mp_tcp_listener_fileno(const mp_tcp_listener *l);
/* Accept one connection into c (its storage, not open), with a read buffer of bufsize bytes
 * (as mp_tcp_open()): MP_READY with *err = 0 and c open, as after mp_tcp_accept(); MP_READY
 * with a negative errno and c not open (close it as any: mp_tcp_close() runs on_closed at once;
 * while this returns MP_PENDING c is not the stream's yet): -EINVAL (bufsize over
 * MP_TCP_BUF_MAX, before any accept), -EMFILE/-ENFILE/-ENOBUFS/-ENOMEM (out
 * of descriptors or memory: the pending connection stays queued in the kernel; wait, e.g. on a
 * timer, before polling again, or this is a busy loop), -EBADF once the listener is closed (also to
 * a task waiting here when another thread closes it), -EINTR after mp_tcp_listener_interrupt();
 * MP_PENDING until a connection comes. One task accepts at a time. */
mp_poll mp_tcp_accept_poll(mp_tcp_listener *l, mp_context *cx, mp_tcp *c, size_t bufsize, int *err);
/* Any thread: the acceptor's current or next poll returns -EINTR, once. */
void mp_tcp_listener_interrupt(mp_tcp_listener *l);
/* The acceptor stops waiting (a timeout): withdraws the waker mp_tcp_accept_poll() left;
 * connections that arrive stay queued for the next accept. The acceptor's call. */
void mp_tcp_listener_cancel_accept(mp_tcp_listener *l);
/* Stop listening; a task waiting in mp_tcp_accept_poll() is woken and sees -EBADF. on_closed(l)
 * runs exactly once, whatever this returns, and l may be freed there if no task will poll it
 * again: mp_tcp_close()'s rule and return values (0, -EBADF, -ESHUTDOWN, -EALREADY). Any
 * thread. */
int mp_tcp_listener_close(mp_tcp_listener *l, void (*on_closed)(mp_tcp_listener *l));

/* UDP sockets for tasks, with the readiness design of the streams: the task sends and receives
 * itself, and waits for the loop's edge only when the kernel would block. One task receives
 * and one sends at a time. */
typedef struct mp_udp mp_udp;
struct mp_udp {
    /* private */
    mp_io io;
    _Atomic bool write_armed; /* EPOLLOUT is in the socket's events (udp.c) */
    void (*on_closed)(mp_udp *u);
};

/* A UDP socket bound to addr (port 0: any; the address family decides the socket's), with
 * MP_TCP_REUSEPORT / MP_TCP_IPV6ONLY as flags. 0, -EINVAL, or -errno; on an error u is not
 * open (its close runs on_closed at once). Any thread. */
int mp_udp_bind(mp_runtime *rt, mp_udp *u, const struct sockaddr *addr, unsigned flags);
/* Set the default peer (connect(2)): sends without an address go there, and only its
 * datagrams are received. 0 or -errno. */
int mp_udp_connect(mp_udp *u, const struct sockaddr *addr);
int mp_udp_local_addr(mp_udp *u, struct sockaddr_storage *out);
int mp_udp_fileno(const mp_udp *u);
/* Send one datagram of len bytes to `to` (NULL: the connected peer): MP_READY with *err = 0
 * (sent whole) or a negative errno (-EMSGSIZE, -ECONNREFUSED from an earlier ICMP error on a
 * connected socket, -EDESTADDRREQ, -EBADF once closed); MP_PENDING while the socket's buffer
 * is full. */
mp_poll mp_udp_send_poll(mp_udp *u, mp_context *cx, const void *data, size_t len,
                         const struct sockaddr *to, int *err);
/* Receive one datagram into buf[0..cap): MP_READY with *len its size (truncated to cap, and
 * *truncated set, when larger), its sender in *from (may be NULL), *err = 0; or MP_READY with
 * a negative errno (-EBADF once closed, also to a task waiting here when another thread closes
 * it, -ECONNREFUSED on a connected socket, -EINTR after mp_udp_interrupt()); MP_PENDING until
 * one comes. */
mp_poll mp_udp_recv_poll(mp_udp *u, mp_context *cx, void *buf, size_t cap, size_t *len,
                         bool *truncated, struct sockaddr_storage *from, int *err);
/* Batches (recvmmsg / sendmmsg): one system call for up to n datagrams. */
typedef struct mp_udp_msg {
    void *buf;
    size_t len;                   /* send: bytes to send; receive: capacity in, size out */
    struct sockaddr_storage addr; /* send: the peer (ignored when connected); receive: sender */
    bool truncated;               /* receive */
} mp_udp_msg;
/* MP_READY with *done >= 1 datagrams received (msgs[0..*done)) and *err = 0, or *done = 0 and
 * an error as mp_udp_recv_poll(); MP_PENDING while none is waiting. */
mp_poll mp_udp_recv_batch_poll(mp_udp *u, mp_context *cx, mp_udp_msg *msgs, unsigned n,
                               unsigned *done, int *err);
/* Sends msgs[0..n) in order: MP_READY with *done = n and *err = 0, or *done < n and the error
 * that stopped msgs[*done]; MP_PENDING while the buffer is full (*done so far; call again
 * with msgs + *done). */
mp_poll mp_udp_send_batch_poll(mp_udp *u, mp_context *cx, const mp_udp_msg *msgs, unsigned n,
                               unsigned *done, int *err);
void mp_udp_interrupt(mp_udp *u);
/* The receiver (sender) stops waiting (a timeout): withdraws the waker a receive (send) poll
 * that returned MP_PENDING left. The socket stays open; a datagram that arrives stays for the
 * next receive. The receiver's, the sender's call. */
void mp_udp_cancel_recv(mp_udp *u);
void mp_udp_cancel_send(mp_udp *u);
/* As mp_tcp_listener_close(), mp_tcp_close()'s rule: a task waiting to send or receive sees
 * -EBADF; on_closed(u) runs exactly once whatever this returns; -EALREADY for a second close. */
int mp_udp_close(mp_udp *u, void (*on_closed)(mp_udp *u));

/* Name resolution on the blocking pool (getaddrinfo(3)), so it never blocks a worker. */
typedef struct mp_resolve {
    /* private */
    void *job;
} mp_resolve;

/* The failures of name resolution, beside negative errnos (mp_strerror() prints each):
 *   MP_ERESOLVE_NOTFOUND  no such name (getaddrinfo's EAI_NONAME)
 *   MP_ERESOLVE_AGAIN     temporary failure: the name server did not answer, try later
 *                         (EAI_AGAIN)
 *   MP_ERESOLVE_NOFAMILY  the name exists but has no address of the family asked for, or
 *                         none at all (EAI_NODATA, EAI_ADDRFAMILY): an IPv6-only name asked
 *                         with AF_INET, say
 *   MP_ERESOLVE_FAIL      the name server failed for good (EAI_FAIL)
 * Their values lie outside errno's range and libuv's codes, inside (-4096, 0). */
#define MP_ERESOLVE_NOTFOUND (-3100)
#define MP_ERESOLVE_AGAIN    (-3101)
#define MP_ERESOLVE_NOFAMILY (-3102)
#define MP_ERESOLVE_FAIL     (-3103)

/* Start resolving host and service (either may be NULL, as for getaddrinfo) with hints (NULL:
 * any family, SOCK_STREAM, AI_ADDRCONFIG). r starts zeroed ({0}). 0, -EINVAL, -ENOMEM,
 * -ESHUTDOWN, -EALREADY (r is in use). Any thread. */
int mp_resolve_start(mp_runtime *rt, mp_resolve *r, const char *host, const char *service,
                     const struct addrinfo *hints);
/* From the task that started it: MP_READY with *res the whole list in getaddrinfo's order
 * (RFC 6724's: try each in turn, falling back on failure; free it with freeaddrinfo()) and
 * *err = 0; or *res NULL and *err: MP_ERESOLVE_NOTFOUND, MP_ERESOLVE_AGAIN, MP_ERESOLVE_NOFAMILY,
 * MP_ERESOLVE_FAIL (above), -ENOMEM, -EINVAL (bad hints, or a service not known for the
 * socket type), -ETIMEDOUT (deadline_ms passed, with
 * timer non-NULL, as mp_tcp_connect_poll), -ECANCELED (the runtime shut down first), or
 * another negative errno. r is free for another start after MP_READY. MP_PENDING until then. */
mp_poll mp_resolve_poll(mp_resolve *r, mp_context *cx, mp_timer *timer, uint64_t deadline_ms,
                        struct addrinfo **res, int *err);
/* Give up (a cancel callback, or any time before MP_READY): the lookup, which cannot be
 * interrupted, finishes on its own and frees what it found. r is free again. No-op when idle. */
void mp_resolve_cancel(mp_resolve *r);
/* Plain threads: resolve and wait (getaddrinfo's errors mapped as above). */
int mp_resolve_blocking(const char *host, const char *service, const struct addrinfo *hints,
                        struct addrinfo **res);

/* Files from a task, without stalling its worker: a read is first tried with
 * preadv2(RWF_NOWAIT), which succeeds only from the page cache and costs no hand-off; a read
 * that would wait for the disk, and every open and stat, go to the blocking pool. The op
 * (zeroed, {0}) holds an operation in flight between polls; one operation per op at a time. A
 * task that gives up (its cancel callback) calls mp_file_op_cancel(): an operation running on
 * the pool cannot be stopped, so it works in storage of its own and frees it when done, and
 * nothing of the caller's (buf, path) is touched after the cancel. */
typedef struct mp_file_op {
    /* private */
    void *job;
} mp_file_op;

/* Read up to len bytes at offset off into buf: MP_READY with *n bytes (0 at end of file; may
 * be short) and *err = 0, or a negative errno (-EBADF, -EISDIR, -EIO, -EINVAL for len over
 * 1 GiB, -ECANCELED if the runtime shut down first); MP_PENDING while the pool reads. buf must
 * stay put while MP_PENDING. */
mp_poll mp_file_read_poll(mp_runtime *rt, mp_file_op *op, mp_context *cx, int fd, void *buf,
                          size_t len, uint64_t off, size_t *n, int *err);
/* openat(dirfd, path, flags | O_CLOEXEC, mode), and with resolve non-zero openat2(2) with those
 * RESOLVE_* flags (RESOLVE_BENEATH keeps path inside dirfd; -ENOSYS before Linux 5.6): MP_READY
 * with *fd and *err = 0, or a negative errno (openat's or openat2's, -ECANCELED if the runtime
 * shut down first); path is copied at the first poll. cx NULL (a
 * caller outside any task, or one that must answer at once): only the O_NONBLOCK open from
 * the kernel's caches is tried, and MP_READY with -EAGAIN says the pool would be needed (call
 * again with a task's cx to go there). */
mp_poll mp_file_open_poll(mp_runtime *rt, mp_file_op *op, mp_context *cx, int dirfd,
                          const char *path, int flags, unsigned mode, uint64_t resolve, int *fd,
                          int *err);
/* fstatat(dirfd, path, st, flags); path "" with AT_EMPTY_PATH stats dirfd itself.
 * Every file operation above answers -ECANCELED when the runtime shut down before the pool ran
 * it (the call started during the shutdown, or its job was still queued when the shutdown
 * came), -ENOMEM when its state could not be allocated, and otherwise the system call's own
 * negative errno. */
mp_poll mp_file_stat_poll(mp_runtime *rt, mp_file_op *op, mp_context *cx, int dirfd,
                          const char *path, int flags, struct stat *st, int *err);
void mp_file_op_cancel(mp_file_op *op);

#ifdef __cplusplus
}
#endif
#endif
