/* magpie.h: the public interface of libmagpie, a work-stealing task runtime with a libuv
 * reactor and a fork-join pool. It includes both halves:
 *
 *   magpie_core.h  tasks, wakers, the runtime, sync primitives, the fork-join pool
 *                  (C11 and pthreads only)
 *   magpie_io.h    the loop, timers, TCP and UDP sockets, name resolution, files
 *                  (names libuv's types without including <uv.h>: -std=c11 suffices)
 *
 * A program that needs no I/O includes magpie_core.h alone.
 */
#ifndef MAGPIE_H
#define MAGPIE_H

#include "magpie_core.h"
#include "magpie_io.h"

#endif
