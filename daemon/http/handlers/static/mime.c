/* Media types by extension (mime.h): /etc/mime.types read once into an array, looked up by a
 * hash of the extension (every static response asks: bsearch's dozen strcmp calls cost it
 * ~470 instructions, the hash ~60). Lines are "type ext ext ...", '#' starts a comment; an
 * extension listed twice keeps its first type. The table is built under pthread_once and never
 * changes afterwards, so any thread reads it without locking; it lives as long as the process
 * (a reload does not reread it).
 */
#include "http/handlers/static/mime.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"

struct entry {
    char ext[16]; /* lower case, NUL-padded: compared whole */
    const char *type;
};

/* Grown by hand with realloc, not md_bytes_grow() (core/outbuf.h): an array of structs, built
 * once at the first lookup and never grown again. */
static struct entry *entries;
static size_t nentries;
/* Open addressing over entries: index + 1, 0 for an empty slot; a power of two, at least twice
 * nentries. */
static uint32_t *slots;
static size_t nslots;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* FNV-1a over the extension's bytes up to its NUL. */
static size_t hash(const char ext[16])
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < 16 && ext[i] != '\0'; i++)
        h = (h ^ (unsigned char)ext[i]) * 16777619u;
    return h;
}

static const struct entry *find(const char ext[16])
{
    for (size_t i = hash(ext) & (nslots - 1);; i = (i + 1) & (nslots - 1)) {
        if (slots[i] == 0)
            return NULL;
        const struct entry *e = &entries[slots[i] - 1];
        if (memcmp(e->ext, ext, sizeof e->ext) == 0)
            return e;
    }
}

static void index_entries(void)
{
    size_t n = 16;
    while (n < 2 * nentries)
        n *= 2;
    slots = calloc(n, sizeof *slots);
    if (slots == NULL)
        return; /* no memory: no types, as without the file */
    nslots = n;
    for (size_t k = 0; k < nentries; k++) {
        if (find(entries[k].ext) != NULL)
            continue; /* listed twice: the first stays */
        size_t i = hash(entries[k].ext) & (nslots - 1);
        while (slots[i] != 0)
            i = (i + 1) & (nslots - 1);
        slots[i] = (uint32_t)k + 1;
    }
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
            memset(e->ext, 0, sizeof e->ext);
            size_t i = 0;
            for (; ext[i] != '\0'; i++)
                e->ext[i] = (char)md_ascii_lower((unsigned char)ext[i]);
            e->ext[i] = '\0';
            e->type = kept;
        }
    }
    fclose(f);
    index_entries();
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
    const struct entry *e = slots != NULL ? find(key.ext) : NULL;
    return e != NULL ? e->type : NULL;
}
