/* The handler registry: every handler a route can name, by name. A new handler is its file in
 * this folder and one line here (handler.h says what the file declares).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "http/handler.h"
#include "http/routes.h"

extern const md_handler md_handler_text, md_handler_echo, md_handler_metrics, md_handler_health,
    md_handler_redirect, md_handler_static, md_handler_proxy, md_handler_https_redirect;

static const md_handler *const registry[] = {
    &md_handler_text,     &md_handler_echo,   &md_handler_metrics, &md_handler_health,
    &md_handler_redirect, &md_handler_static, &md_handler_proxy,   &md_handler_https_redirect,
};

enum { HANDLERS = sizeof registry / sizeof registry[0] };
_Static_assert((int)HANDLERS <= (int)MD_HANDLERS_MAX, "md_http_server.handler_state is too short");

const md_handler *md_handler_at(size_t i)
{
    return i < HANDLERS ? registry[i] : NULL;
}

void *md_http_server_state(const md_http_server *srv, const md_handler *h)
{
    for (size_t i = 0; i < HANDLERS; i++)
        if (registry[i] == h)
            return srv->handler_state[i];
    return NULL;
}

const md_handler *md_handler_find(const char *name)
{
    for (size_t i = 0; i < HANDLERS; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

/* "a, b or c" of the handlers that pass (every one when key is NULL); how many. */
static unsigned list(const char *key, char *buf, size_t cap)
{
    const md_handler *hit[HANDLERS] = {0}; /* zeroed for cppcheck, which cannot see n bound it */
    unsigned n = 0;
    for (size_t i = 0; i < HANDLERS; i++)
        if (key == NULL || md_handler_has_key(registry[i], key))
            hit[n++] = registry[i];
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < n && used < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        int k = snprintf(buf + used, cap - used, "%s%s", sep, hit[i]->name);
        if (k < 0)
            break;
        used += (size_t)k;
    }
    return n;
}

void md_handler_names(char *buf, size_t cap)
{
    list(NULL, buf, cap);
}

bool md_handler_has_key(const md_handler *h, const char *key)
{
    for (const char *const *k = h->keys; k != NULL && *k != NULL; k++)
        if (strcmp(*k, key) == 0)
            return true;
    return false;
}

unsigned md_handler_key_owners(const char *key, char *buf, size_t cap)
{
    return list(key, buf, cap);
}

int md_handler_conf_ctype(char *dst, const char *value, char *msg, size_t msg_len)
{
    if (value[0] == '\0' || strlen(value) >= MD_CTYPE_MAX || !md_text_field_safe(value, true)) {
        md_say(msg, msg_len, "expected a media type of visible ASCII, at most %d bytes",
               MD_CTYPE_MAX - 1);
        return -EINVAL;
    }
    md_text_set(dst, MD_CTYPE_MAX, value);
    return 0;
}
