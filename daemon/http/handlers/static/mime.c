/* Media types by extension (mime.h): /etc/mime.types read once into a sorted array, looked up
 * with bsearch. Lines are "type ext ext ...", '#' starts a comment. The table is built under
 * pthread_once and never changes afterwards, so any thread reads it without locking; it lives
 * as long as the process (a reload does not reread it).
 */
#include "http/handlers/static/mime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"

struct entry {
    char ext[16]; /* lower case */
    const char *type;
};

/* Grown by hand with realloc, not md_bytes_grow() (core/outbuf.h): an array of structs, built
 * once at the first lookup and never grown again. */
static struct entry *entries;
static size_t nentries;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int by_ext(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->ext, ((const struct entry *)b)->ext);
}

static void load(void)
{
    FILE *f = fopen(MD_MIME_TYPES_PATH, "r");
    if (f == NULL)
        return;
    size_t cap = 0;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        char *save = NULL, *type = strtok_r(line, " \t\r\n", &save);
        if (type == NULL || strchr(type, '/') == NULL)
            continue;
        char *kept = NULL;
        for (char *ext = strtok_r(NULL, " \t\r\n", &save); ext != NULL;
             ext = strtok_r(NULL, " \t\r\n", &save)) {
            if (strlen(ext) >= sizeof entries[0].ext)
                continue;
            if (kept == NULL && (kept = strdup(type)) == NULL)
                break;
            if (nentries == cap) {
                size_t ncap = cap != 0 ? cap * 2 : 1024;
                struct entry *n = realloc(entries, ncap * sizeof *n);
                if (n == NULL)
                    break;
                entries = n;
                cap = ncap;
            }
            struct entry *e = &entries[nentries++];
            size_t i = 0;
            for (; ext[i] != '\0'; i++)
                e->ext[i] = (char)md_ascii_lower((unsigned char)ext[i]);
            e->ext[i] = '\0';
            e->type = kept;
        }
    }
    fclose(f);
    /* Stable for equal extensions is not needed: the file lists each once. */
    qsort(entries, nentries, sizeof *entries, by_ext);
}

const char *md_mime_type(const char *name, size_t len)
{
    pthread_once(&once, load);
    size_t dot = len;
    while (dot > 0 && name[dot - 1] != '.' && name[dot - 1] != '/')
        dot--;
    if (dot == 0 || name[dot - 1] != '.' || len - dot >= sizeof entries[0].ext)
        return NULL;
    struct entry key = {.type = NULL};
    size_t n = len - dot;
    for (size_t i = 0; i < n; i++) {
        key.ext[i] = (char)md_ascii_lower((unsigned char)name[dot + i]);
    }
    key.ext[n] = '\0';
    const struct entry *e =
        entries != NULL ? bsearch(&key, entries, nentries, sizeof *entries, by_ext) : NULL;
    return e != NULL ? e->type : NULL;
}
