/* What core's tables are indexed by but the layers above define: the kinds of listener
 * (server/listener.c serves them, the metrics count per kind, systemd passes them by name) and
 * the classes of HTTP status the metrics count. A new kind is one more entry here and its
 * connection task in server/. */
#ifndef MD_KINDS_H
#define MD_KINDS_H

typedef enum md_listener {
    MD_LISTENER_HTTP,
    MD_LISTENER_ECHO,
    MD_LISTENER_HTTPS, /* HTTP over TLS (server/tls.c) */
    MD_LISTENERS,
} md_listener;

/* "http", "echo", "https": the section and the systemd socket name of each listener. */
static inline const char *md_listener_name(md_listener kind)
{
    static const char *const names[MD_LISTENERS] = {
        [MD_LISTENER_HTTP] = "http",
        [MD_LISTENER_ECHO] = "echo",
        [MD_LISTENER_HTTPS] = "https",
    };
    return (unsigned)kind < MD_LISTENERS ? names[kind] : "?";
}

/* HTTP responses are counted by status class: 1xx .. 5xx. */
#define MD_HTTP_STATUS_CLASSES 5

#endif
