/* The handler interface: what a route's handler gets, and the ways it may answer.
 *
 * Modelled on h2o's h2o_handler_t.on_req. A protocol (http1.c) parses the request into an
 * md_http_req (request.h), the request layer (request.c) finds its route (routes.h) and
 * answers what needs no handler itself: 404, OPTIONS (from the route's Allow), 405 with Allow,
 * OPTIONS *. Everything else goes to the route's handler, which sees the request only through
 * request.h, never the protocol that carried it:
 *
 *   on_head(req, r) optional, when the request head is complete: says what to do with the body
 *                  (MD_BODY_DISCARD by default; MD_BODY_GATHER collects it for on_req;
 *                  MD_BODY_STREAM after the handler wrote a response head itself, each span
 *                  of the body then goes to on_body as it arrives, and on_req is not called;
 *                  MD_BODY_PIPE after it md_http_req_pend()ed: the response comes from the
 *                  pending poll, and each span goes to on_body, parsing stopping after it
 *                  until the poll has passed the span on and returns MD_PENDING_READ, so
 *                  a slow sink holds the client back with one span in hand; on_req is not
 *                  called, md_http_req_body_done() says when the body is complete)
 *   on_req(req, r) when the request is complete: answers now with md_http_respond*()
 *                  (returns MD_HANDLER_DONE), or md_http_req_pend()s and returns
 *                  MD_HANDLER_PENDING to finish later. Negative: -ENOMEM, the connection
 *                  closes without flushing.
 *
 * Pending: the protocol stops parsing (over HTTP/1.1, pipelined requests behind wait, answered
 * in order, and the feed returns MD_HTTP_WANT_HANDLER). The I/O layer flushes what is queued,
 * then calls md_http_conn_resume() (http1.h), which polls the handler's md_http_pending from the
 * connection's task: the handler appends to out (a head, then its body in pieces) and says whether
 * it waits for a waker it holds (a task it joins: a file read on the blocking pool, an upstream),
 * has queued output to flush before it is polled again (back-pressure: the next poll comes only
 * once the peer has taken the last piece), or is done. A handler that fails half way through
 * a body returns a negative errno: the response ends short and the connection closes, so that
 * nothing past the failure is presented as content. A handler that went pending before it
 * answered anything (an open on the blocking pool) answers from its poll with the same
 * md_http_respond*() calls as from on_req.
 *
 * Everything here runs on the connection's task: one thread at a time, no locking.
 */
#ifndef MD_HANDLER_H
#define MD_HANDLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/http.h"
#include "http/request.h"
#include "http/response.h" /* the status table (md_http_status_of) */
#include "http/routes.h"
#include "magpie.h"

typedef enum md_body_mode {
    MD_BODY_DISCARD, /* counted against the limits and dropped */
    MD_BODY_GATHER,  /* collected (up to max_body_bytes) for on_req: md_http_req_body() */
    MD_BODY_STREAM,  /* the handler has written its response head; spans go to on_body */
    MD_BODY_PIPE,    /* the handler has pended; spans go to on_body, one at a time */
} md_body_mode;

enum { MD_HANDLER_DONE = 0, MD_HANDLER_PENDING = 1 };

struct md_ini_conf;

/* Method sets for md_handler.methods, of enum md_method (request.h). HEAD goes with GET. */
#define MD_METHOD(m)    (UINT64_C(1) << (m))
#define MD_METHODS_GET  (MD_METHOD(MD_GET) | MD_METHOD(MD_HEAD))
#define MD_METHODS_POST MD_METHOD(MD_POST)

/* A handler: its configurator (what h2o splits into a handler and its configurator, nginx
 * into a module's commands), then its entry points. The route holds the handler and its
 * options (md_route_conf(r), conf_size bytes of the handler's own struct); nothing outside
 * the handler's file knows that struct. Every hook but on_req is optional. */
typedef struct md_handler {
    const char *name; /* as [route] handler = names it */
    uint64_t methods; /* the methods a route takes when it names none (routes.h's bits) */
    /* The most a route's methods may name (0: any): those whose meaning the handler serves
     * (static's GET and HEAD: a POST answered as a GET would meet RFC 9110's preconditions
     * and ranges wrongly, 13.1, 14.2). */
    uint64_t methods_max;
    /* OPTIONS goes to the handler instead of being answered from Allow (a proxied
     * application's CORS preflight), and the core keeps the request's fields for it
     * (md_http_req_head). */
    bool passes_options, keeps_fields;
    /* Its bodies after md_http_respond_head() go through md_http_req_write() (request.h), so
     * a route's compress applies to them too; without it only bodies from memory
     * (md_http_respond, _produced) are compressed, and those a handler codes itself (the
     * proxy's relayed ones, proxy_msg.h). */
    bool codes_body;
    const char *const *keys; /* the keys of its options, NULL-terminated; NULL: none */
    size_t conf_size;        /* of the handler's options; at most MD_ROUTE_CONF_MAX */
    /* The defaults, into zeroed conf, when a route names the handler. */
    void (*conf_init)(void *conf);
    /* One of its keys, from the route's section (line: where, for later messages): 0 or
     * -EINVAL with msg (no key name in it). */
    int (*conf_key)(void *conf, const char *key, const char *value, uint32_t line, char *msg,
                    size_t msg_len);
    /* After the section's last key: what the handler requires. 0 or -EINVAL with msg. */
    int (*conf_check)(const void *conf, char *msg, size_t msg_len);
    /* After the whole file: what the options name elsewhere in it (an [upstream], found in
     * the configuration with md_ini_find(), core/ini.h). 0, or -EINVAL with msg and *line set
     * to the line to blame (0: the route's header). */
    int (*conf_link)(void *conf, const struct md_ini_conf *cfg, uint32_t *line, char *msg,
                     size_t msg_len);
    /* For a table that serves, once per generation of settings: open what the options name
     * (a root directory), and close it when the generation goes. 0 or a negative errno with
     * msg. close runs for every route of a table that was opened, also after a failed open
     * (conf_init's state must be safe to close). */
    int (*open)(void *conf, char *msg, size_t msg_len);
    void (*close)(void *conf);
    /* State shared by all of the handler's routes in one generation of settings (the
     * proxy's upstream groups, pools and health tasks): made when a generation is built,
     * from the whole configuration, on the runtime its tasks run on (0, or a negative errno
     * with msg; *state NULL: none); shut down while the runtime still runs (its tasks, its
     * sockets) when the server stops; freed once no connection uses the generation. The
     * handler finds it with md_http_server_state(). */
    int (*gen_new)(const struct md_ini_conf *cfg, mp_runtime *rt, void **state, char *msg,
                   size_t msg_len);
    void (*gen_shutdown)(void *state);
    void (*gen_free)(void *state);
    /* Appends the state's /metrics series. 0 or -ENOMEM. */
    int (*gen_metrics)(void *state, md_outbuf *out);
    /* NULL: MD_BODY_DISCARD. length: the Content-Length (0 for chunked); negative: -ENOMEM. */
    int (*on_head)(md_http_req *req, const md_route *r, uint64_t length, bool chunked);
    /* MD_BODY_STREAM and MD_BODY_PIPE: a span of the body. 0 or -ENOMEM. */
    int (*on_body)(md_http_req *req, const md_route *r, const char *at, size_t len);
    int (*on_req)(md_http_req *req, const md_route *r);
} md_handler;

/* The registry (http/handlers/handlers.c): the handler a route names, or NULL. */
const md_handler *md_handler_find(const char *name);
/* The i-th handler (0 .. MD_HANDLERS_MAX - 1), or NULL past the last: to visit them all. */
const md_handler *md_handler_at(size_t i);
/* The generation state of handler h (md_handler.gen_new), or NULL. */
void *md_http_server_state(const md_http_server *srv, const md_handler *h);
/* "text, echo, ... or proxy": every name, for messages, into buf. */
void md_handler_names(char *buf, size_t cap);
/* Whether h's options include key. */
bool md_handler_has_key(const md_handler *h, const char *key);
/* The handlers whose options include key ("text or echo") into buf; how many there are. */
unsigned md_handler_key_owners(const char *key, char *buf, size_t cap);

/* Options several handlers share, with one message each. */
#define MD_CTYPE_MAX 128
/* A media type of visible ASCII (spaces allowed), under MD_CTYPE_MAX bytes, into dst. */
int md_handler_conf_ctype(char *dst, const char *value, char *msg, size_t msg_len);

/* What md_http_pending.poll returns when it has not finished. */
enum {
    MD_PENDING_WAIT = 1, /* a waker is held (a join, a timer): poll again when woken */
    MD_PENDING_MORE = 2, /* output queued: poll again once it is written */
    MD_PENDING_READ = 3, /* MD_BODY_PIPE: the last span is passed on, parse the next */
};

/* What the I/O layer lends a pending handler for one poll: the socket, and the connection's
 * bounded write and sendfile, which wait for the peer within the send limits (a body sent
 * without a copy: the handler flushes out first by returning MD_PENDING_MORE, and sends the
 * file only while out is empty). */
typedef struct md_http_io {
    int fd; /* the connection's socket; -1 when there is none (a test) */
    /* Writes data[0..len): MP_READY with *err 0 or a negative errno (a send limit passed:
     * -ETIMEDOUT), or MP_PENDING while the peer does not read; call again with the same
     * arguments. */
    mp_poll (*write)(struct md_http_io *io, mp_context *cx, const char *data, size_t len, int *err);
    /* The connection's raw input after the request (a tunnel, once a 101 went out: nothing
     * else reads it then), as mp_tcp_read_poll() and mp_tcp_consume(); NULL: none (a test). */
    mp_poll (*read)(struct md_http_io *io, mp_context *cx, const char **data, size_t *len,
                    int *err);
    void (*consume)(struct md_http_io *io, size_t n);
    /* Ends the connection's sending side (a tunnel passing its other side's half-close on),
     * as mp_tcp_shutdown(): 0 or a negative errno. NULL: none (a test). */
    int (*shutdown)(struct md_http_io *io);
    /* Sends up to count bytes of the file in_fd from *off with sendfile(2), within the same
     * limits, after what out holds (the response's head), which it writes first, corked into
     * the file's first segment: MP_READY with *sent > 0 (*off advanced), *sent 0 (no byte
     * at *off: the file shrank), or *err (-EINVAL, -ESPIPE, -ENOSYS: a file sendfile cannot
     * read, copy it instead); MP_PENDING while the peer does not read. NULL without a socket.
     * It reads the file on the worker: only for bytes in the page cache. */
    mp_poll (*sendfile)(struct md_http_io *io, mp_context *cx, int in_fd, off_t *off, size_t count,
                        size_t *sent, int *err);
    /* Sets TCP_NODELAY on the connection, once for its life (later calls cost nothing): a body
     * the handler writes itself in pieces (by sendfile, a tunnel's bytes) would otherwise have
     * each short segment after the first held by Nagle until the peer's delayed ACK. (Output
     * left in out is the connection's to write: written while the handler runs, it sets this
     * itself.) NULL without a socket, and over HTTP/2, which has it from its start. */
    void (*nodelay)(struct md_http_io *io);
    /* Owes data[0..len) after what out holds, without copying it: an HTTP/2 stream's DATA
     * frames are written from it straight into the connection's output, so the body crosses
     * user space once. The bytes must stay as they are until release(arg) is called, once,
     * from the connection's task: when the last of them went into the connection's output,
     * or the stream ended first (a reset, a close). Nothing more is written, and the handler
     * is not polled, until then. MP_READY with *err 0 (the bytes are lent: release will be
     * called), or MP_PENDING while the stream's output is full (nothing lent, call again).
     * NULL where the transport has none (HTTP/1.1 sends files with sendfile). */
    mp_poll (*lend)(struct md_http_io *io, mp_context *cx, const char *data, size_t len,
                    void (*release)(void *arg), void *arg, int *err);
} md_http_io;

/* A response that finishes later. Lives where the handler put it (usually its own struct,
 * allocated in on_req); the core only holds the pointer. */
typedef struct md_http_pending {
    /* From the connection's task: append to out. 0 when the response is complete,
     * MD_PENDING_WAIT, MD_PENDING_MORE, or a negative errno (the response ends there and the
     * connection closes). After 0 or an error it is not called again, nor cancel. */
    int (*poll)(struct md_http_pending *p, md_http_req *req, mp_context *cx, md_http_io *io,
                md_outbuf *out);
    /* The connection closes while the response is pending: release what it holds. */
    void (*cancel)(struct md_http_pending *p);
    /* Set by a handler whose next poll writes the output already queued (its head) itself,
     * corked ahead of the body (md_http_io.sendfile does that): the connection polls it
     * without flushing out first, so head and body share a segment. Such a poll must write
     * out, or return MD_PENDING_MORE or 0 (the connection flushes then), before anything
     * that waits. Cleared by the handler; only the next poll is concerned. */
    bool writes_output;
} md_http_pending;

/* From on_req (or on_head, MD_BODY_PIPE): the response will come from p, and on_req returns
 * MD_HANDLER_PENDING. */
void md_http_req_pend(md_http_req *req, md_http_pending *p);
/* The pending response set by md_http_req_pend(), or NULL. */
md_http_pending *md_http_req_pending(const md_http_req *req);

#endif
