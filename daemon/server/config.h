/* magpied's configuration: every layer's settings in one plain value, read from the INI file
 * and `--set section.key=value` overrides by the INI engine (core/ini.h), each section by the
 * layer that owns it (config.c's registry lists them), and the cross-key checks run after both.
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

#include "core/error.h"
#include "core/ini.h"
#include "core/kinds.h"
#include "core/log.h"
#include "http/acl.h"
#include "http/http.h"
#include "http/routes.h"
#include "http/handlers/proxy/upstream.h"
#include "http/handlers/static/file_cache.h"
#include "server/tls.h"

enum {
    MD_CONFIG_PATH_MAX = 4096,
    MD_CONFIG_HOST_MAX = 46,              /* INET6_ADDRSTRLEN */
    MD_CONFIG_FILE_MAX = MD_INI_FILE_MAX, /* bytes a configuration file may have */
    MD_LISTEN_ADDRS = 8,                  /* addresses in one listen value */
    /* Listeners in one configuration: [http], [echo], [https] and the [listener NAME]s. */
    MD_LISTENER_SLOTS = 16,
    MD_LISTENER_NAME_MAX = 32,
};

/* A listening address. Numeric only: the listeners bind without resolving names. */
typedef struct md_listen {
    bool enabled;                  /* false: `listen =` (empty) turned the listener off */
    int family;                    /* AF_INET or AF_INET6 */
    uint16_t port;                 /* 0: the kernel picks one */
    char host[MD_CONFIG_HOST_MAX]; /* "127.0.0.1", "::1" (no brackets) */
} md_listen;

/* What each listener has of its own. The first MD_LISTENERS entries are the fixed sections
 * [http], [echo] and [https], indexed by md_listener; each [listener NAME] adds one more, of
 * kind HTTP or HTTPS (tls = on). A listener is one or more addresses sharing one
 * max_connections. */
typedef struct md_listener_config {
    /* [...] listen: the addresses in the order written; listen[0].enabled false: off */
    md_listen listen[MD_LISTEN_ADDRS];
    bool reuseport;           /* [http] / [echo] reuseport */
    uint32_t max_connections; /* [limits] max_connections (HTTP), [echo] max_connections */
    uint32_t max_per_client;  /* ... max_connections_per_client; 0 = no limit (client_limit.h) */
    uint32_t idle_timeout_ms; /* [echo] idle_timeout_ms; 0 = none. HTTP has [limits] instead */
    bool http2;     /* [http] http2 (h2c, prior knowledge), [https] http2 (ALPN h2), a plaintext
                       [listener NAME]'s http2 (h2c) */
    bool http2_set; /* [listener NAME]: http2 was given (refused with tls = on) */
    uint8_t kind;   /* md_listener */
    /* "http", "echo", "https", or NAME: systemd's FileDescriptorName for its sockets */
    char name[MD_LISTENER_NAME_MAX];
    char default_site[MD_SITE_NAME_MAX]; /* the site for unknown hosts; "": the default one */
    uint32_t line;                       /* [listener NAME]'s header; 0 for a fixed one */
    uint32_t listen_line, site_line;     /* [listener NAME]'s keys, for the checks */
    /* proxy_protocol: each connection opens with a PROXY header (server/proxy_protocol.h),
     * accepted only from proxy_protocol_from's blocks */
    bool proxy_protocol;
    uint32_t proxy_line; /* [listener NAME]'s proxy_protocol or proxy_protocol_from */
    md_acl proxy_from;
    /* A TLS [listener NAME]'s own default certificate and key (""; [https]'s), and strict_sni
     * (-1: [https]'s), with their lines for the checks. */
    char cert[MD_SITE_PATH_MAX], key[MD_SITE_PATH_MAX];
    int8_t strict_sni;
    uint32_t cert_line, key_line, strict_line;
} md_listener_config;

typedef struct md_config {
    /* indexed by md_listener for the fixed three, then the [listener NAME]s in file order */
    md_listener_config listeners[MD_LISTENER_SLOTS];
    uint32_t nlisteners;          /* MD_LISTENERS and up */
    uint32_t workers;             /* [runtime] workers; 0 = one per CPU */
    uint32_t slow_poll_us;        /* [runtime] slow_poll_us; 0 = polls are not timed */
    md_http_limits limits;        /* [limits] ..., everything but max_connections */
    md_log_config log;            /* [log] ... */
    uint32_t shutdown_timeout_ms; /* [server] shutdown_timeout_ms */
    /* [static] open_file_cache_*: the static handler's section (file_cache.c) */
    md_file_cache_limits file_cache;
    /* [route PATH] and [route = PATH] sections (http/routes.c), prepared; the built-in four
     * when the file has none. A value like the rest: a reload swaps it with the limits, as
     * one unit. */
    md_route_table routes;
    /* [upstream NAME] sections (the proxy handler's, upstream.c), which proxy routes name. */
    md_upstream_table upstreams;
    /* [https]'s TLS keys (server/tls.c parses and checks them). */
    md_tls_config tls;

    /* Where each key's value came from, for messages: the file name, and per section of the
     * registry and key of its table the line (0: the default, MD_INI_LINE_SET: --set). */
    char source[MD_CONFIG_PATH_MAX];
    uint32_t key_line[MD_INI_SECTIONS_MAX][MD_INI_KEYS_MAX];
} md_config;

/* The engine's view of c: the registry of sections and where each keeps its part. Section
 * owners find their part with md_ini_find(&view, &their_section). */
md_ini_conf md_config_ini(const md_config *c);

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

/* Whether a and b are the same address (both off counts as the same). */
bool md_listen_same(const md_listen *a, const md_listen *b);

/* Checks that need more than one key (a request line longer than the whole header section,
 * both listeners on one address). 0 or -EINVAL. */
int md_config_check(const md_config *c, md_error *err);

#endif
