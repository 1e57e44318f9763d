/* error.c: mp_strerror(), the message of every code the library returns.
 *
 * The library's functions return 0 or a negative code: a negative errno (the system's text),
 * MP_EOF and the name-resolution codes of magpie_io.h (texts of their own, below), or a code
 * libuv returned that is not an errno (its getaddrinfo errors, UV_ECHARSET, UV_EFTYPE: libuv's
 * text, from its own table, UV_ERRNO_MAP). The strings are static: no allocation, safe from
 * any thread, unlike strerror(3) for an unknown code or uv_strerror() (which allocates one).
 */
#include "internal.h"

/* Outside errno's range (Linux's end below 134) and libuv's getaddrinfo codes (-3000 to
 * -3014), inside the error range (-4096, 0) that callers may test for. */
enum { ERRNO_LAST = 133, UV_EAI_FIRST = -3014, ERROR_RANGE_END = -4096 };
_Static_assert(MP_ERESOLVE_FAIL > ERROR_RANGE_END && MP_ERESOLVE_NOTFOUND < UV_EAI_FIRST &&
                   -MP_ERESOLVE_NOTFOUND > ERRNO_LAST,
               "the resolve codes' range");

/* libuv's own message for one of its codes, or NULL. */
static const char *uv_message(int err)
{
    switch (err) {
#define MP__UV_MESSAGE(name, msg)                                                                  \
    case UV_##name:                                                                                \
        return msg;
        UV_ERRNO_MAP(MP__UV_MESSAGE)
#undef MP__UV_MESSAGE
    default:
        return NULL;
    }
}

const char *mp_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case MP_EOF:
        return "end of stream";
    case MP_ERESOLVE_NOTFOUND:
        return "name not found";
    case MP_ERESOLVE_AGAIN:
        return "temporary failure in name resolution (the name server did not answer)";
    case MP_ERESOLVE_NOFAMILY:
        return "the name has no address of the family asked for";
    case MP_ERESOLVE_FAIL:
        return "name server failure (permanent)";
    default:
        break;
    }
    if (err < 0 && err > INT_MIN) {
        const char *s = strerrordesc_np(-err); /* glibc 2.32: NULL for an unknown errno */
        if (s != NULL)
            return s;
    }
    const char *s = uv_message(err);
    return s != NULL ? s : "unknown error";
}
