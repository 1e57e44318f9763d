/* systemd socket activation: listening sockets passed as LISTEN_FDS descriptors from fd 3 on,
 * for this process (LISTEN_PID), named by LISTEN_FDNAMES ("http", "echo", "https", a [listener
 * NAME]'s NAME). Written directly, like notify.c, so magpied does not need libsystemd. */
#ifndef MD_ACTIVATION_H
#define MD_ACTIVATION_H

#include "core/error.h"
#include "core/kinds.h"

enum { MD_ACTIVATION_MAX = 64, MD_ACTIVATION_NAME_MAX = 32 };

/* The sockets systemd passed, each with the name of the listener it belongs to: "http",
 * "echo", "https", or a [listener NAME]'s NAME (FileDescriptorName=). Several sockets may
 * share a name (one listener on IPv4 and IPv6). */
typedef struct md_activated {
    int n;
    struct {
        char name[MD_ACTIVATION_NAME_MAX];
        int fd;
    } s[MD_ACTIVATION_MAX];
} md_activated;

/* Fills out with the passed sockets (n 0 when none). Without names (or with systemd's
 * "unknown"), the first socket is http, the second echo and the third https. Each descriptor
 * must be a listening TCP socket, each name one of [A-Za-z0-9_-]; which listener has the name
 * is the server's to check. The variables are removed from the environment so nothing
 * started later mistakes them for its own. 0 (also when nothing was passed) or -EINVAL with
 * err naming what is wrong; passed descriptors are closed then. */
int md_activation_fds(md_activated *out, md_error *err);

/* The descriptor of the first socket named name in a, or -1 (tests, messages). */
int md_activation_fd(const md_activated *a, const char *name);

#endif
