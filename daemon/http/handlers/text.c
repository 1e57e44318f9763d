/* handler = text: a fixed status, content type and body from the route (the shipped "/" says
 * "Hello, World!"). A 200 comes from the thread's canned cache: the keep-alive GET is one
 * memcpy, or none when the response is lent (response.h).
 */
#include <errno.h>
#include <string.h>

#include "core/text.h"
#include "http/handler.h"

enum { BODY_MAX = 200 }; /* bytes of the body, with its NUL */

typedef struct text_conf {
    uint16_t status;
    uint16_t body_len;
    char content_type[MD_CTYPE_MAX];
    char body[BODY_MAX];
} text_conf;

_Static_assert(sizeof(text_conf) <= MD_ROUTE_CONF_MAX, "text_conf fits a route");

static void text_init(void *conf)
{
    text_conf *t = conf;
    t->status = 200;
    md_text_set(t->content_type, sizeof t->content_type, "text/plain");
}

/* A status the table has, that carries a body. */
static bool text_status(unsigned s)
{
    return s >= 200 && s <= 599 && s != 204 && s != 206 && s != 304 && s != 416 &&
           md_http_status_of(s)->code == s;
}

static int text_key(void *conf, const char *key, const char *value, uint32_t line, char *msg,
                    size_t msg_len)
{
    (void)line;
    text_conf *t = conf;
    if (strcmp(key, "body") == 0) {
        t->body_len = (uint16_t)md_text_set(t->body, sizeof t->body, value);
        return 0;
    }
    if (strcmp(key, "content_type") == 0)
        return md_handler_conf_ctype(t->content_type, value, msg, msg_len);
    uint64_t s; /* status */
    if (strlen(value) != 3 || md_parse_u64(value, 100, 999, &s) != 0 || !text_status((unsigned)s)) {
        md_say(msg, msg_len,
               "expected a status with a body that magpied knows (200, 400, 403, 404, 410, 500, "
               "503, ...), got \"%s\"",
               value);
        return -EINVAL;
    }
    t->status = (uint16_t)s;
    return 0;
}

static int text_on_req(md_http_req *req, const md_route *r)
{
    const text_conf *t = md_route_conf(r);
    if (t->status == 200)
        return md_http_respond_canned(req, r, t->content_type, t->body, t->body_len);
    return md_http_respond(req, t->status, NULL, t->content_type, t->body, t->body_len);
}

const md_handler md_handler_text = {
    .name = "text",
    .methods = MD_METHODS_GET,
    .keys = (const char *const[]){"status", "body", "content_type", NULL},
    .conf_size = sizeof(text_conf),
    .conf_init = text_init,
    .conf_key = text_key,
    .on_req = text_on_req,
};
