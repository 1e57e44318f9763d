/* magpie_io.h: libmagpie's reactor (the runtime's libuv loop), timers for tasks and TCP
 * streams served to tasks. Includes <uv.h>, which needs the POSIX types a strict -std=c11
 * hides: compile with -D_DEFAULT_SOURCE (or -std=gnu11). Everything else is in
 * magpie_core.h, included here.
 */
#ifndef MAGPIE_IO_H
#define MAGPIE_IO_H

#include <uv.h>

#include "magpie_core.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * fn has run. -ESHUTDOWN once the runtime has closed its loop. */
int mp_loop_call(mp_runtime *rt, mp_loop_cmd *cmd, void (*fn)(uv_loop_t *loop, void *arg),
                 void *arg);
/* Run fn(loop, arg) on the loop's thread as mp_loop_call() does, and return once it has run
 * (what fn wrote is visible to the caller then). The caller blocks on a futex of its own, not
 * on the loop. Called holding the loop (from a libuv callback, or from fn itself), it runs fn
 * inline. From one of rt's workers, or inside a poll of one of rt's tasks, without holding the
 * loop, it returns -EDEADLK and runs nothing: that thread may be the one the loop is waiting
 * for. -ESHUTDOWN once the runtime has closed its loop; as with mp_loop_call(), a call must
 * not race with that close at the end of mp_runtime_shutdown(). */
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

uint64_t mp_now_ms(void);
void mp_timer_init(mp_timer *t, mp_runtime *rt);
/* MP_READY once mp_now_ms() >= deadline_ms; MP_PENDING, and the task is woken then. The
 * deadline may change between polls; moving it later is cheap (no clock read, no wheel
 * work), and a poll that does so just past the old deadline may say MP_PENDING and be woken
 * at once. */
mp_poll mp_timer_poll(mp_timer *t, uint64_t deadline_ms, mp_context *cx);
/* Disarm (no-op if not armed). Call before the timer's memory goes away. */
void mp_timer_cancel(mp_timer *t);

/* A deadline around any poll: poll(arg, cx) first, then the timer t. MP_READY with *err = 0
 * when the inner poll is ready (the timer is disarmed), or -ETIMEDOUT when deadline_ms passed
 * first: the inner wait is then still registered, and the caller must cancel it (its
 * primitive's cancel_wait) before giving it up. MP_PENDING: both will wake the task. t is the
 * caller's, initialised with mp_timer_init(); mp_timer_cancel() it in the task's cancel
 * callback as for any timer. */
mp_poll mp_timeout_poll(mp_timer *t, uint64_t deadline_ms,
                        mp_poll (*poll)(void *arg, mp_context *cx), void *arg, mp_context *cx,
                        int *err);

/* A TCP stream served to one task. The task reads and writes the socket itself (read() into
 * the stream's buffer, send() from the caller's bytes), on whichever worker runs it; the loop
 * only reports edge-triggered readiness and wakes the task when a read or write would block.
 * The buffer is refilled only once the task has consumed all of it (backpressure: while the
 * task is behind, the peer is held back by TCP). It is taken just before a read and given
 * back once consumed when the stream waits for data, so an idle stream holds no buffer. */
typedef struct mp_tcp mp_tcp;
struct mp_tcp {
    /* private: the stream's, read through the functions below */
    uv_tcp_t handle; /* owns the socket; libuv only closes it */
    mp_runtime *rt;
    _Atomic uint64_t io;       /* readiness bits and event tick (tcp.c) */
    _Atomic uint64_t ready_ns; /* when the loop last saw it readable (tcp.c) */
    uint64_t read_ns;          /* the task's: mp_tcp_read_time() */
    uint64_t read_tick;        /* the task's: io's event tick at its last read */
    _Atomic bool interrupted;  /* mp_tcp_interrupt() called, not yet reported to the task */
    _Atomic uint32_t lock;     /* guards reader and writer between the loop and the task */
    mp_waker reader, writer;
    int fd;                 /* immutable after accept */
    _Atomic uint32_t state; /* tcp.c: closed (zero), open, closing */
    char *buf;              /* the task's: buf[head..tail) is unconsumed input; NULL while idle */
    size_t cap, head, tail;
    int err;           /* the task's: 0, UV_EOF, or a negative errno, sticky */
    size_t write_done; /* the task's: progress of a write that returned MP_PENDING */
    mp_loop_cmd cmd_close;
    void (*on_closed)(mp_tcp *c);
    mp_tcp *prev, *next; /* the reactor's list of open streams (loop side) */
};

/* On the loop's thread (a connection callback): accept a connection from server into c,
 * with a read buffer of bufsize bytes (0: 16 KiB), and watch it for readiness. On an error c
 * is left closed: nothing to close, and mp_tcp_fileno() returns -EBADF. */
int mp_tcp_accept(mp_runtime *rt, mp_tcp *c, uv_stream_t *server, size_t bufsize);
/* From the owning task: a view of the buffered bytes (MP_READY with *len > 0), or MP_READY
 * with *len == 0 and *err = UV_EOF or a negative errno, or MP_PENDING until data arrives. */
mp_poll mp_tcp_read_poll(mp_tcp *c, mp_context *cx, const char **data, size_t *len, int *err);
/* Any thread: the task's current or next mp_tcp_read_poll returns MP_READY with *len == 0 and
 * *err == -EINTR, once (e.g. a graceful stop reaching a connection waiting for its peer). */
void mp_tcp_interrupt(mp_tcp *c);
/* The task is done with n bytes of the view. */
void mp_tcp_consume(mp_tcp *c, size_t n);
/* Write all of data[0..len): MP_READY with *err = 0 or a negative errno (EPIPE, ECONNRESET);
 * MP_PENDING while the kernel's buffer is full (call again with the same arguments; data must
 * stay put). */
mp_poll mp_tcp_write_poll(mp_tcp *c, mp_context *cx, const char *data, size_t len, int *err);
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
 * uv_hrtime()'s clock): for the first read after a readiness event, the loop's clock when it
 * saw that event (read once per batch of events, so it costs the task no clock read: the
 * bytes' arrival as the runtime saw it, before any wait in a run queue, like nginx's cached
 * loop time); for a read before any event (the accept's optimistic first read) or with no
 * event since the last one (a buffer's worth was left behind), the time of that read. The
 * task's own call, after mp_tcp_read_poll() returned bytes. */
uint64_t mp_tcp_read_time(const mp_tcp *c);
/* Bytes of data already sent by a mp_tcp_write_poll() that returned MP_PENDING (0 once it has
 * returned MP_READY): progress of a write the peer is slow to take. The task's own call. */
size_t mp_tcp_write_progress(const mp_tcp *c);
/* Close the stream; on_closed(c) runs on the loop's thread once libuv is done with it (and
 * after mp_runtime_shutdown at the latest), after which c may be freed. Returns 0, or -EBADF
 * when c is not open (never accepted, a failed accept, closed already: on_closed will not
 * run for this call), or -ESHUTDOWN once the runtime has shut down (its shutdown closed the
 * socket already; on_closed will not run). */
int mp_tcp_close(mp_tcp *c, void (*on_closed)(mp_tcp *c));

#ifdef __cplusplus
}
#endif
#endif
