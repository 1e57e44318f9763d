/* The serving side of magpied: listeners on the runtime's loop, and one task per accepted
 * connection (HTTP over the sans-I/O core in http/http1.c, or RFC 862 echo).
 *
 * Listeners and accepting live on the loop's thread; a connection's task runs on any worker
 * and does its own reads (from the stream's buffer) and writes (straight to the socket). A
 * connection is freed once both its task is released and its stream is closed. These calls
 * are for a thread that is not one of the runtime's workers (the main thread): they wait for
 * the loop (mp_loop_call_wait).
 */
#ifndef MD_SERVER_H
#define MD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/activation.h"
#include "server/config.h"
#include "magpie.h"

typedef struct md_server md_server;

/* Bind the listeners of cfg on rt's loop, or take the sockets systemd passed under a
 * listener's name instead (inherited; NULL: none at all; a name no listener has is an error). On
 * success *out serves until the runtime shuts down (md_server_drain first for a graceful stop). */
int md_server_start(md_server **out, mp_runtime *rt, const md_config *cfg,
                    const md_activated *inherited, md_error *err);
/* Apply a new, checked configuration: limits from each connection's next request, listeners
 * rebound where their address changed, max_connections, the access log hook. All or nothing:
 * on error (a new address cannot be bound) nothing changed and err says why. Counts the
 * reload for /metrics either way. */
int md_server_reload(md_server *s, const md_config *cfg, md_error *err);
/* Count a reload that failed before reaching the server (an invalid file). */
void md_server_count_reload(md_server *s, bool ok);
/* The bound addresses, for the "listening" line: "http=127.0.0.1:8080 echo=127.0.0.1:8007"
 * (at most MD_SERVER_DESCRIBE_MAX bytes with the NUL; longer is cut). */
#define MD_SERVER_DESCRIBE_MAX 1024
void md_server_describe(md_server *s, char *buf, size_t len);
/* Graceful stop: close the listeners, close idle connections, and let each connection with a
 * request in flight finish it with "Connection: close". Returns at once; md_server_open()
 * counts what is left. */
void md_server_drain(md_server *s);
uint32_t md_server_open(md_server *s);
/* After mp_runtime_shutdown: free what is left. */
void md_server_free(md_server *s);

#endif
