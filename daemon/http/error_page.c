/* error_page.c: a route's custom error pages (error_page.h has the contract). */
#include "http/error_page.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cfgfile.h"
#include "core/text.h"
#include "http/response.h"
#include "http/routes.h"

int md_error_page_key(md_route_error_pages *e, const char *key, const char *value, uint32_t line,
                      char *msg, size_t msg_len)
{
    if (strcmp(key, "error_page") != 0)
        return -ENOENT;
    uint64_t st;
    char code[4];
    if (strlen(value) < 5 || value[3] != ' ')
        goto bad;
    memcpy(code, value, 3);
    code[3] = '\0';
    if (md_parse_u64(code, 400, 599, &st) != 0 || md_http_status_of((unsigned)st)->code != st)
        goto bad;
    const char *v = value + 4;
    while (*v == ' ')
        v++;
    size_t n = strlen(v);
    if (n == 0 || n >= MD_ERROR_PAGE_VALUE || !md_text_field_safe(v, true)) {
        md_say(msg, msg_len, "the page is a path or text of visible ASCII, at most %d bytes",
               MD_ERROR_PAGE_VALUE - 1);
        return -EINVAL;
    }
    for (unsigned i = 0; i < e->n; i++)
        if (e->p[i].status == st) {
            md_say(msg, msg_len, "%u has a page already", (unsigned)st);
            return -EINVAL;
        }
    if (e->n == MD_ERROR_PAGES) {
        md_say(msg, msg_len, "more than %d error pages in one route", MD_ERROR_PAGES);
        return -EINVAL;
    }
    md_error_page *p = &e->p[e->n];
    p->status = (uint16_t)st;
    p->file = v[0] == '/';
    memcpy(p->value, v, n + 1);
    e->line[e->n++] = line;
    return 0;
bad:
    md_say(msg, msg_len,
           "expected STATUS PAGE, the status one magpied sends from 400 to 599 "
           "(404 /srv/404.html, 503 text)");
    return -EINVAL;
}

static int read_page(const char *path, char **out, size_t *len, char *msg, size_t msg_len)
{
    int e;
    FILE *f = md_cfgfile_open(path, &e);
    if (f == NULL) {
        md_say(msg, msg_len, "%s: cannot read: %s", path, md_cfgfile_why(e));
        return -e;
    }
    char *buf = malloc(MD_ERROR_PAGE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        md_say(msg, msg_len, "out of memory");
        return -ENOMEM;
    }
    size_t n = fread(buf, 1, MD_ERROR_PAGE_MAX + 1, f);
    bool err = ferror(f) != 0;
    fclose(f);
    if (err || n > MD_ERROR_PAGE_MAX) {
        free(buf);
        md_say(msg, msg_len, err ? "%s: cannot read" : "%s: longer than %d bytes", path,
               MD_ERROR_PAGE_MAX);
        return err ? -EIO : -EFBIG;
    }
    *out = buf;
    *len = n;
    return 0;
}

int md_error_pages_open(md_route_error_pages *e, uint32_t *line, char *msg, size_t msg_len)
{
    for (unsigned i = 0; i < MD_ERROR_PAGES; i++) {
        e->body[i] = NULL;
        e->body_len[i] = 0;
    }
    for (unsigned i = 0; i < e->n; i++) {
        if (!e->p[i].file)
            continue;
        int rc = read_page(e->p[i].value, &e->body[i], &e->body_len[i], msg, msg_len);
        if (rc != 0) {
            *line = e->line[i];
            md_error_pages_close(e);
            return rc;
        }
    }
    return 0;
}

void md_error_pages_close(md_route_error_pages *e)
{
    for (unsigned i = 0; i < MD_ERROR_PAGES; i++) {
        free(e->body[i]);
        e->body[i] = NULL;
    }
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && md_ascii_eq_lower(s + n - t, t, tail);
}

bool md_error_page_find(const md_route_error_pages *e, unsigned status, const char **body,
                        size_t *len, const char **ctype)
{
    for (unsigned i = 0; i < e->n; i++) {
        const md_error_page *p = &e->p[i];
        if (p->status != status)
            continue;
        if (!p->file) {
            *body = p->value;
            *len = strlen(p->value);
            *ctype = "text/plain";
            return true;
        }
        if (e->body[i] == NULL)
            return false; /* a table not opened for serving: the status's own body */
        *body = e->body[i];
        *len = e->body_len[i];
        *ctype = ends_with(p->value, ".html") || ends_with(p->value, ".htm") ? "text/html"
                                                                             : "text/plain";
        return true;
    }
    return false;
}
