/* magpied's two logs: the error log (md_log) and the access log (md_log_access).
 *
 * One process-wide logger. The error log is written by the calling thread, one write(2) per
 * line, to stderr (with a syslog "<N>" priority prefix, so journald keeps the level) or to a
 * file (with a UTC timestamp). The access log is formatted by the worker threads into a shared
 * in-memory buffer and written by one writer thread, so a worker never waits on the disk: when
 * the buffer is full the line is dropped and counted (md_log_access_dropped). access_log.c
 * has the protocol between the workers, the writer and the control calls; log.c lists the
 * other parts.
 *
 * Control calls (md_log_open, md_log_apply, md_log_reopen, md_log_flush, md_log_close) are
 * serialized against each other and may come from any thread, typically the main thread on a
 * signal. md_log, md_log_enabled, md_log_access_on and md_log_access may be called from any
 * thread at any time, also before md_log_open and after md_log_close.
 */
#ifndef MD_LOG_H
#define MD_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/error.h"

enum {
    MD_LOG_MESSAGE_MAX = 2048,      /* error-log messages are cut there, ending in "..." */
    MD_LOG_ACCESS_LINE_MAX = 8192,  /* an access line never exceeds this (fields are cut) */
    MD_LOG_ACCESS_BUFFER = 2 << 20, /* bytes per access buffer; there are two */
    MD_LOG_FLUSH_MS = 100,          /* the writer batches lines this long before writing */
    MD_LOG_STALL_MS =
        1000, /* a pipe or socket target that takes nothing this long: lines dropped */
};

typedef enum md_log_level {
    MD_LOG_ERROR,
    MD_LOG_WARN,
    MD_LOG_INFO,
    MD_LOG_DEBUG,
} md_log_level;

typedef enum md_access_format {
    MD_ACCESS_FORMAT_COMBINED, /* nginx's and Apache's "combined" */
    MD_ACCESS_FORMAT_JSON,     /* one JSON object per line */
    MD_ACCESS_FORMAT_TEMPLATE, /* the operator's line of named fields (md_log_config) */
} md_access_format;

typedef enum md_access_log {
    MD_ACCESS_LOG_OFF,
    MD_ACCESS_LOG_STDERR,
    MD_ACCESS_LOG_FILE, /* md_log_config.access_log_path */
} md_access_log;

enum {
    MD_LOG_PATH_MAX = 4096,
    MD_LOG_TEMPLATE_MAX = 1024, /* an access_format template's text, NUL included */
};

/* The [log] section: md_section_log (log.c) declares its keys and defaults. */
typedef struct md_log_config {
    md_log_level level;       /* [log] level */
    md_access_log access_log; /* [log] access_log */
    char access_log_path[MD_LOG_PATH_MAX];
    md_access_format access_format;            /* [log] access_format */
    char access_template[MD_LOG_TEMPLATE_MAX]; /* its text, for MD_ACCESS_FORMAT_TEMPLATE */
    char error_log_path[MD_LOG_PATH_MAX];      /* [log] error_log; empty = stderr */
} md_log_config;

struct md_ini_section;
/* The [log] section's kind for the INI engine (core/ini.h); its part is an md_log_config. */
extern const struct md_ini_section md_section_log;

const char *md_log_level_name(md_log_level level);
const char *md_access_format_name(md_access_format format);

/* One HTTP response, for the access log: what the HTTP core reports (http.h's
 * md_http_exchange is this) with the peer and the time filled in by the I/O layer. Strings
 * need not be NUL-terminated; a NULL or empty peer, method, referer or user agent is logged as
 * "-" ("" in JSON). Pointers are valid during the call that passes it only. */
typedef struct md_access_entry {
    const char *peer;   /* client address without port; NULL from the HTTP core unless a
                         * route's real_ip found it */
    time_t time;        /* wall-clock second of the response; 0 from the HTTP core */
    const char *method; /* NULL: the request did not get that far */
    size_t method_len;
    const char *target; /* as sent, path and query; cut by the HTTP core */
    size_t target_len;
    bool target_cut;
    uint8_t http_major, http_minor;
    uint16_t status;
    uint64_t body_bytes;              /* response body bytes ("$body_bytes_sent") */
    const char *referer, *user_agent; /* cut by the HTTP core */
    size_t referer_len, user_agent_len;
    uint64_t duration_ns; /* from the request's first byte */
    /* The upstream server that answered a proxied request ("HOST:PORT" as configured) and the
     * milliseconds from the proxy's first attempt to that server's response head; NULL: the
     * request was not proxied, or no server answered. */
    const char *upstream;
    size_t upstream_len;
    uint64_t upstream_ms;
} md_access_entry;

/* At start: level, error log ([log] error_log: empty = stderr), access log ([log] access_log,
 * [log] access_format); starts the access-log writer thread only when the access log is on.
 * 0 or a negative errno with err->msg naming the path and the reason; -EALREADY when open. */
int md_log_open(const md_log_config *cfg, md_error *err);

/* On reload with a valid new config: switches level, error-log path, access-log target and
 * format, starting or stopping the writer as needed. All or nothing: on failure (a file that
 * cannot be opened) the old settings stay and the error is returned. Lines accepted before the
 * call go to the old target in the old format, lines after it to the new one. */
int md_log_apply(const md_log_config *cfg, md_error *err);

/* After logrotate renamed the files (SIGUSR1): reopens both files by path. Lines accepted
 * before the call go to the old file, later ones to the new file; none lost or doubled. stderr
 * is left alone. A file that cannot be reopened stays on its old descriptor; the failure is
 * logged and the first error returned. */
int md_log_reopen(void);

/* Test hook, never called by the daemon (md_log_close writes everything at exit): returns once
 * every access line accepted before the call has been handed to write(2). */
void md_log_flush(void);

/* At exit: writes every pending line, joins the writer, closes the files. Afterwards md_log
 * writes to stderr again (at the level last configured) and the access log is off. */
void md_log_close(void);

/* The error log; below the configured level it does nothing (one relaxed load). A trailing
 * newline in the message is dropped; the line gets its own. */
void md_log(md_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool md_log_enabled(md_log_level level);

/* Cheap (one relaxed load): callers skip building an entry when it is false. */
bool md_log_access_on(void);

/* Appends one access line; from the worker threads, per response. Never blocks on the disk:
 * waits at most for another worker's memcpy into the shared buffer. */
void md_log_access(const md_access_entry *e);

/* Access lines lost: the buffer was full (the writer fell behind) or a write failed. */
uint64_t md_log_access_dropped(void);

/* Formats e as one access line into buf (at least MD_LOG_ACCESS_LINE_MAX bytes), with the
 * "<6>" priority prefix when prefixed; returns its length, newline included, no NUL. format is
 * a preset (combined or JSON). */
size_t md_log_access_format(char *buf, md_access_format format, bool prefixed,
                            const md_access_entry *e);

/* An access_format template, as nginx's log_format: literal text and named fields ("$status"
 * or "${status}"; magpied.conf(5) lists them), compiled once. Immutable once made, and never
 * freed: a template is interned by its text, so a reload that keeps or brings back a format
 * reuses it, and a worker still formatting with an old one never sees it go. */
typedef struct md_access_template md_access_template;
/* Checks text as a template: 0, or -EINVAL with msg naming the field or byte that is wrong,
 * or saying that its fields could outgrow an access line. */
int md_access_template_check(const char *text, char *msg, size_t msg_len);
/* The template for text, compiled the first time it is asked for: NULL when text does not
 * check (msg says why) or memory runs out (msg says so). Any thread. */
const md_access_template *md_access_template_intern(const char *text, char *msg, size_t msg_len);
/* As md_log_access_format(), with a template. */
size_t md_log_access_format_template(char *buf, const md_access_template *t, bool prefixed,
                                     const md_access_entry *e);

#endif
