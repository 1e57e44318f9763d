/* notify.c: sd_notify without libsystemd (see notify.h). */
#include "core/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int md_notify(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof a.sun_path || (path[0] != '/' && path[0] != '@'))
        return -EINVAL;
    memcpy(a.sun_path, path, n);
    if (path[0] == '@')
        a.sun_path[0] = '\0'; /* abstract namespace: the name is not NUL-terminated */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    ssize_t w = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&a, len);
    int rc = w < 0 ? -errno : 0;
    close(fd);
    return rc;
}

uint64_t md_notify_watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (!usec || (pid && strtol(pid, NULL, 10) != (long)getpid()))
        return 0;
    return strtoull(usec, NULL, 10);
}

typedef struct watchdog {
    mp_task task;
    mp_timer timer;
    uint64_t interval_ms, next_ms;
} watchdog;

static mp_poll watchdog_poll(mp_task *t, mp_context *cx)
{
    watchdog *w = mp_container_of(t, watchdog, task);
    while (mp_timer_poll(&w->timer, w->next_ms, cx) == MP_READY) {
        md_notify("WATCHDOG=1");
        w->next_ms += w->interval_ms;
        uint64_t now = mp_now_ms();
        if (w->next_ms <= now) /* we were late: do not send a burst to catch up */
            w->next_ms = now + w->interval_ms;
    }
    return MP_PENDING;
}

static void watchdog_cancel(mp_task *t)
{
    mp_timer_cancel(&mp_container_of(t, watchdog, task)->timer);
}

static void watchdog_release(mp_task *t)
{
    free(mp_container_of(t, watchdog, task));
}

static const mp_task_vtable watchdog_vt = {watchdog_poll, watchdog_cancel, watchdog_release};

int md_notify_watchdog_start(mp_runtime *rt, uint64_t interval_ms)
{
    watchdog *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    mp_task_init(&w->task, &watchdog_vt);
    mp_timer_init(&w->timer, rt);
    w->interval_ms = interval_ms ? interval_ms : 1;
    w->next_ms = mp_now_ms(); /* a first ping at once */
    int rc = mp_spawn(rt, &w->task);
    if (rc != 0)
        free(w);
    return rc;
}
