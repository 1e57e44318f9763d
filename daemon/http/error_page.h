/* A route's custom error pages: error_page = STATUS FILE or STATUS TEXT.
 *
 * A response of that status that the route gives from memory (the core's refusals 401, 403,
 * 405; a handler's error such as a static file's 404; a proxy's 502 or 504) keeps its status
 * and fields and gets the page as its body: a file (an absolute path, read whole once per
 * generation of settings, as the users of auth_basic are: at the start and at each reload,
 * checked by magpied -t; at most MD_ERROR_PAGE_MAX bytes; text/html when its name ends in
 * .html or .htm, else text/plain) or the text written after the status (text/plain). A
 * proxied error response the upstream wrote is relayed as it is.
 */
#ifndef MD_ERROR_PAGE_H
#define MD_ERROR_PAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    MD_ERROR_PAGES = 4,            /* pages per route */
    MD_ERROR_PAGE_VALUE = 160,     /* bytes of a path or text, with its NUL */
    MD_ERROR_PAGE_MAX = 64 * 1024, /* bytes of a page file */
};

typedef struct md_error_page {
    uint16_t status;
    bool file; /* value is a path */
    char value[MD_ERROR_PAGE_VALUE];
} md_error_page;

typedef struct md_route_error_pages {
    uint8_t n;
    uint32_t line[MD_ERROR_PAGES]; /* of each key, for messages */
    md_error_page p[MD_ERROR_PAGES];
    /* The files' bodies for one generation (md_error_pages_open); NULL in a configuration. */
    char *body[MD_ERROR_PAGES];
    size_t body_len[MD_ERROR_PAGES];
} md_route_error_pages;

/* error_page into e: 0, -ENOENT for another key, or -EINVAL with msg. */
int md_error_page_key(md_route_error_pages *e, const char *key, const char *value, uint32_t line,
                      char *msg, size_t msg_len);

/* Reads the pages' files into e (a generation's): 0, or a negative errno with msg and *line
 * (the key's). md_error_pages_close() frees them (also after an error). */
int md_error_pages_open(md_route_error_pages *e, uint32_t *line, char *msg, size_t msg_len);
void md_error_pages_close(md_route_error_pages *e);

/* The page for status: true with its body and content type. */
bool md_error_page_find(const md_route_error_pages *e, unsigned status, const char **body,
                        size_t *len, const char **ctype);

#endif
