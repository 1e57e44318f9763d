/* The systemd notify protocol, written directly (no libsystemd): one datagram per message to
 * $NOTIFY_SOCKET, a filesystem path or, with a leading '@', an abstract socket. */
#ifndef MD_NOTIFY_H
#define MD_NOTIFY_H

#include <stdint.h>

#include "magpie.h"

/* Send msg ("READY=1\nSTATUS=..."). 0, or a negative errno; 0 when NOTIFY_SOCKET is unset. */
int md_notify(const char *msg);
/* The watchdog interval asked for by systemd (WATCHDOG_USEC, for this process if WATCHDOG_PID
 * is set), in microseconds; 0 when none. */
uint64_t md_notify_watchdog_usec(void);
/* Spawn a task on rt that sends WATCHDOG=1 every interval_ms: from the runtime, so that a
 * stuck scheduler stops the pings and systemd restarts the service. */
int md_notify_watchdog_start(mp_runtime *rt, uint64_t interval_ms);

#endif
