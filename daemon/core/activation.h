/* systemd socket activation: listening sockets passed as LISTEN_FDS descriptors from fd 3 on,
 * for this process (LISTEN_PID), named by LISTEN_FDNAMES ("http", "echo"). Written directly,
 * like notify.c, so magpied does not need libsystemd. */
#ifndef MD_ACTIVATION_H
#define MD_ACTIVATION_H

#include "core/error.h"
#include "core/kinds.h"

/* Fills fds[MD_LISTENERS] with the passed listener of each kind, or -1. Names: "http" and
 * "echo"; without names (or with systemd's "unknown"), the first socket is http and the second
 * echo. Each descriptor must be a listening TCP socket. The variables are removed from the
 * environment so nothing started later mistakes them for its own. 0 (also when nothing was
 * passed) or -EINVAL with err naming what is wrong; passed descriptors are closed then. */
int md_activation_fds(int fds[MD_LISTENERS], md_error *err);

#endif
