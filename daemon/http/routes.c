/* magpied's route table: GET / (hello), POST /echo, GET /metrics, GET /healthz.
 *
 * Four entries do not need a hash: a scan that compares lengths first is as fast.
 */
#include "http/routes.h"

#include <string.h>

#include "llhttp.h"

#define BIT(m)   (UINT64_C(1) << (m))
#define GET_HEAD (BIT(HTTP_GET) | BIT(HTTP_HEAD))
#define STR(s)   s, sizeof(s) - 1

static const md_route routes[] = {
    {0, STR("/"), MD_ROUTE_STATIC, GET_HEAD, "GET, HEAD, OPTIONS", "text/plain",
     STR("Hello, World!")},
    {1, STR("/echo"), MD_ROUTE_ECHO, BIT(HTTP_POST), "POST, OPTIONS", "application/octet-stream",
     NULL, 0},
    {2, STR("/metrics"), MD_ROUTE_METRICS, GET_HEAD, "GET, HEAD, OPTIONS",
     "text/plain; version=0.0.4; charset=utf-8", NULL, 0},
    {3, STR("/healthz"), MD_ROUTE_STATIC, GET_HEAD, "GET, HEAD, OPTIONS", "text/plain", STR("ok")},
};

const md_route *md_route_find(const char *path, size_t len)
{
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (routes[i].path_len == len && memcmp(routes[i].path, path, len) == 0)
            return &routes[i];
    return NULL;
}
