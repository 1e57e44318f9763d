/* magpied's configuration: the INI file (parsed by libinih), `--set section.key=value`
 * overrides, and the cross-key checks run after both.
 *
 * Order of use: md_config_load() (defaults, then the file), md_config_set() for each CLI
 * override, md_config_check(). Every rejected value is an error naming where it came from:
 *
 *   config/magpied.conf:12: [limits] max_body_bytes: expected an integer in 0..1073741824, got
 * "12x"
 *
 * Unknown sections and keys are errors too, so a typo never silently keeps a default.
 */
#ifndef MD_CONFIG_H
#define MD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "http/http.h"
#include "http/routes.h"
#include "http/upstream.h"

enum {
    MD_ERROR_MAX = 512,
    MD_CONFIG_PATH_MAX = 4096,
    MD_CONFIG_HOST_MAX = 46, /* INET6_ADDRSTRLEN */
    MD_CONFIG_MAX_KEYS = 64, /* keys of the fixed sections (config.c checks it) */
    /* Bytes a configuration may have: the shipped file is a few KiB, and a cap makes a
     * stream that never ends (a device, a pipe) an error instead of a hang. */
    MD_CONFIG_FILE_MAX = 1048576,
};

/* A message for a person, filled in when a function returns an error. */
typedef struct md_error {
    char msg[MD_ERROR_MAX];
} md_error;

typedef enum md_log_level {
    MD_LOG_ERROR,
    MD_LOG_WARN,
    MD_LOG_INFO,
    MD_LOG_DEBUG,
} md_log_level;

typedef enum md_access_format {
    MD_ACCESS_FORMAT_COMBINED, /* nginx's and Apache's "combined" */
    MD_ACCESS_FORMAT_JSON,     /* one JSON object per line */
} md_access_format;

typedef enum md_access_log {
    MD_ACCESS_LOG_OFF,
    MD_ACCESS_LOG_STDERR,
    MD_ACCESS_LOG_FILE, /* md_config.access_log_path */
} md_access_log;

/* magpied's listeners. */
typedef enum md_listener {
    MD_LISTENER_HTTP,
    MD_LISTENER_ECHO,
    MD_LISTENERS,
} md_listener;

/* A listening address. Numeric only: the listeners bind without resolving names. */
typedef struct md_listen {
    bool enabled;                  /* false: `listen =` (empty) turned the listener off */
    int family;                    /* AF_INET or AF_INET6 */
    uint16_t port;                 /* 0: the kernel picks one */
    char host[MD_CONFIG_HOST_MAX]; /* "127.0.0.1", "::1" (no brackets) */
} md_listen;

/* What each listener has of its own: one entry per listener, so that a new listener kind is
 * one more index, one more section of keys (config.c) and one more entry in the server's
 * table of kinds (server/conn.c). */
typedef struct md_listener_config {
    md_listen listen;         /* [http] / [echo] listen */
    bool reuseport;           /* [http] / [echo] reuseport */
    uint32_t max_connections; /* [limits] max_connections (HTTP), [echo] max_connections */
    uint32_t idle_timeout_ms; /* [echo] idle_timeout_ms; 0 = none. HTTP has [limits] instead */
} md_listener_config;

/* "http", "echo": the section and the systemd socket name of each listener. */
const char *md_listener_name(md_listener kind);

typedef struct md_config {
    md_listener_config listeners[MD_LISTENERS]; /* indexed by md_listener */
    uint32_t workers;                           /* [runtime] workers; 0 = one per CPU */
    uint32_t slow_poll_us;    /* [runtime] slow_poll_us; 0 = polls are not timed */
    md_http_limits limits;    /* [limits] ..., everything but max_connections */
    md_log_level log_level;   /* [log] level */
    md_access_log access_log; /* [log] access_log */
    char access_log_path[MD_CONFIG_PATH_MAX];
    md_access_format access_format;          /* [log] access_format */
    char error_log_path[MD_CONFIG_PATH_MAX]; /* [log] error_log; empty = stderr */
    uint32_t shutdown_timeout_ms;            /* [server] shutdown_timeout_ms */
    /* [route PATH] and [route = PATH] sections, prepared; the built-in four when the file
     * has none. A value like the rest: a reload swaps it with the limits, as one unit. */
    md_route_table routes;
    /* [upstream NAME] sections, for the proxy routes (a route's upstream_index points here). */
    md_upstream_table upstreams;

    /* Where each key's value came from, for messages: the file name, and per key the line
     * (0: the default, MD_CONFIG_LINE_SET: a --set override). */
    char source[MD_CONFIG_PATH_MAX];
    uint32_t key_line[MD_CONFIG_MAX_KEYS];
} md_config;

#define MD_CONFIG_LINE_SET UINT32_MAX

/* The shipped defaults (also documented in config/magpied.conf). */
void md_config_init(md_config *c);

/* Defaults, then the INI file at path (NULL: defaults only). 0, -EINVAL for a bad file (the
 * message names file, line and key; also for anything but a regular file, and a file over
 * MD_CONFIG_FILE_MAX bytes), or the negative errno of opening/reading it. */
int md_config_load(md_config *c, const char *path, md_error *err);

/* Applies an INI stream on top of c; name is used in messages. 0 or -EINVAL (also for a NUL
 * byte, and past MD_CONFIG_FILE_MAX bytes, where reading stops). */
int md_config_parse_file(md_config *c, FILE *f, const char *name, md_error *err);

/* One CLI override, "section.key=value" (the value may be empty or contain '='), checked
 * exactly as the same key in the file. 0 or -EINVAL. */
int md_config_set(md_config *c, const char *assignment, md_error *err);

/* Checks that need more than one key (a request line longer than the whole header section,
 * both listeners on one address). 0 or -EINVAL. */
int md_config_check(const md_config *c, md_error *err);

const char *md_log_level_name(md_log_level level);
const char *md_access_format_name(md_access_format format);

#endif
