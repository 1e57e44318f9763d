/* resolve.c: name resolution for tasks (mp_resolve in magpie_io.h): getaddrinfo(3) on the
 * blocking pool, so a slow name server never stalls a worker.
 *
 * getaddrinfo cannot be interrupted, so a lookup the caller gives up on (a timeout, a cancel)
 * is left to finish in storage of its own, which frees what it found (an mp__bjob, see
 * blocking.c). Its results are given to the caller in getaddrinfo's order, which is RFC 6724's
 * destination address selection: the caller tries each in turn.
 */
#include "internal.h"

typedef struct resolve_job {
    mp__bjob job;
    char *host, *service; /* copies, or NULL */
    struct addrinfo hints;
    struct addrinfo *res;
    int rc; /* negative errno */
} resolve_job;

int mp__resolve_error(int eai, int saved_errno)
{
    switch (eai) {
    case 0:
        return 0;
    case EAI_NONAME:
        return MP_ERESOLVE_NOTFOUND;
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
    case EAI_ADDRFAMILY:
#endif
        return MP_ERESOLVE_NOFAMILY;
    case EAI_AGAIN:
        return MP_ERESOLVE_AGAIN;
    case EAI_MEMORY:
        return -ENOMEM;
    case EAI_FAIL:
        return MP_ERESOLVE_FAIL;
    case EAI_SYSTEM:
        return saved_errno ? -saved_errno : -EIO;
    default: /* EAI_BADFLAGS, EAI_FAMILY, EAI_SOCKTYPE, EAI_SERVICE */
        return -EINVAL;
    }
}

static struct addrinfo default_hints(const struct addrinfo *hints)
{
    if (hints)
        return (struct addrinfo){.ai_flags = hints->ai_flags,
                                 .ai_family = hints->ai_family,
                                 .ai_socktype = hints->ai_socktype,
                                 .ai_protocol = hints->ai_protocol};
    return (struct addrinfo){
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG};
}

int mp_resolve_blocking(const char *host, const char *service, const struct addrinfo *hints,
                        struct addrinfo **res)
{
    *res = NULL;
    if (!host && !service)
        return -EINVAL;
    struct addrinfo h = default_hints(hints);
    errno = 0;
    int eai = getaddrinfo(host, service, &h, res);
    if (eai != 0)
        *res = NULL;
    return mp__resolve_error(eai, errno);
}

static void resolve_run(mp__bjob *j)
{
    resolve_job *r = mp_container_of(j, resolve_job, job);
    r->rc = mp_resolve_blocking(r->host, r->service, &r->hints, &r->res);
}

static void resolve_destroy(mp__bjob *j)
{
    resolve_job *r = mp_container_of(j, resolve_job, job);
    if (r->res)
        freeaddrinfo(r->res);
    free(r->host);
    free(r->service);
    free(r);
}

int mp_resolve_start(mp_runtime *rt, mp_resolve *r, const char *host, const char *service,
                     const struct addrinfo *hints)
{
    if (!rt || !r || (!host && !service))
        return -EINVAL;
    if (r->job)
        return -EALREADY;
    resolve_job *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    j->job.run = resolve_run;
    j->job.destroy = resolve_destroy;
    j->hints = default_hints(hints);
    if ((host && !(j->host = strdup(host))) || (service && !(j->service = strdup(service)))) {
        resolve_destroy(&j->job);
        return -ENOMEM;
    }
    int rc = mp__bjob_spawn(rt, &j->job);
    if (rc != 0) {
        resolve_destroy(&j->job);
        return rc;
    }
    r->job = j;
    return 0;
}

mp_poll mp_resolve_poll(mp_resolve *r, mp_context *cx, mp_timer *timer, uint64_t deadline_ms,
                        struct addrinfo **res, int *err)
{
    *res = NULL;
    resolve_job *j = r->job;
    if (!j) {
        *err = -EINVAL;
        return MP_READY;
    }
    int joined;
    if (mp__bjob_poll(&j->job, cx, &joined) == MP_READY) {
        if (joined == 0) {
            *res = j->res;
            j->res = NULL;
            *err = j->rc;
        } else {
            *err = joined; /* cancelled before it ran: the runtime shut down */
        }
        mp__bjob_put(&j->job);
        r->job = NULL;
    } else if (timer && mp_timer_poll(timer, deadline_ms, cx) == MP_READY) {
        mp__bjob_abandon(&j->job);
        r->job = NULL;
        *err = -ETIMEDOUT;
    } else {
        return MP_PENDING;
    }
    if (timer)
        mp_timer_cancel(timer);
    return MP_READY;
}

void mp_resolve_cancel(mp_resolve *r)
{
    resolve_job *j = r->job;
    if (!j)
        return;
    r->job = NULL;
    mp__bjob_abandon(&j->job);
}
