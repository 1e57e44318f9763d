/* LISTEN_FDS parsing (see activation.h). */
#include "core/activation.h"
#include "core/text.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { FIRST_FD = 3 }; /* SD_LISTEN_FDS_START */

static int parse_count(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0)
        return -EINVAL;
    *out = v;
    return 0;
}

static void unset_env(void)
{
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

/* The n-th (0-based) colon-separated name in names, copied into buf; "" when absent. */
static void nth_name(const char *names, long n, char *buf, size_t len)
{
    buf[0] = '\0';
    if (names == NULL)
        return;
    for (long i = 0; i < n; i++) {
        names = strchr(names, ':');
        if (names == NULL)
            return;
        names++;
    }
    size_t k = strcspn(names, ":");
    if (k >= len)
        k = len - 1;
    memcpy(buf, names, k);
    buf[k] = '\0';
}

static int check_listener(int fd, char *why, size_t len)
{
    int type = 0, listening = 0, domain = 0;
    socklen_t sl = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &sl) != 0) {
        snprintf(why, len, "not a socket (%s)", strerror(errno));
        return -EINVAL;
    }
    sl = sizeof(domain);
    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &sl);
    sl = sizeof(listening);
    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &sl);
    if (type != SOCK_STREAM || (domain != AF_INET && domain != AF_INET6) || !listening) {
        snprintf(why, len, "not a listening TCP socket (ListenStream= with an IP address)");
        return -EINVAL;
    }
    return 0;
}

int md_activation_fd(const md_activated *a, const char *name)
{
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->s[i].name, name) == 0)
            return a->s[i].fd;
    return -1;
}

/* A name of [A-Za-z0-9_-]. */
static bool name_ok(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

int md_activation_fds(md_activated *out, md_error *err)
{
    out->n = 0;
    const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
    const char *names = getenv("LISTEN_FDNAMES");
    long pid, n;
    if (pid_s == NULL || fds_s == NULL)
        return 0;
    if (parse_count(pid_s, &pid) != 0 || pid != (long)getpid())
        return 0; /* meant for another process (a parent that did not clean up) */
    if (parse_count(fds_s, &n) != 0 || n > MD_ACTIVATION_MAX) {
        snprintf(err->msg, sizeof(err->msg), "LISTEN_FDS: expected a count, got \"%s\"", fds_s);
        unset_env();
        return -EINVAL;
    }
    int rc = 0;
    long positional = 0;
    for (long i = 0; i < n; i++) {
        int fd = FIRST_FD + (int)i;
        char name[64], why[128];
        nth_name(names, i, name, sizeof(name));
        if (name[0] == '\0' || strcmp(name, "unknown") == 0)
            snprintf(name, sizeof name, "%s",
                     positional < MD_LISTENERS ? md_listener_name((md_listener)positional++) : "");
        if (rc == 0 && (!name_ok(name) || strlen(name) >= MD_ACTIVATION_NAME_MAX)) {
            snprintf(err->msg, sizeof(err->msg),
                     "LISTEN_FDNAMES: socket %ld is named \"%s\"; expected http, echo, https or "
                     "the NAME of a [listener NAME]",
                     i + 1, name);
            rc = -EINVAL;
        } else if (rc == 0 && check_listener(fd, why, sizeof(why)) != 0) {
            snprintf(err->msg, sizeof(err->msg), "LISTEN_FDS: socket %ld (%s): %s", i + 1,
                     name[0] ? name : "unnamed", why);
            rc = -EINVAL;
        } else if (rc == 0) {
            fcntl(fd, F_SETFD, FD_CLOEXEC);
            md_text_set(out->s[out->n].name, sizeof out->s[out->n].name, name); /* fits */
            out->s[out->n++].fd = fd;
            continue;
        }
        close(fd);
    }
    if (rc != 0) {
        for (int k = 0; k < out->n; k++)
            close(out->s[k].fd);
        out->n = 0;
    }
    unset_env();
    return rc;
}
