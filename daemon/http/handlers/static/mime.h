/* Media types by file name extension, from /etc/mime.types (Debian's media-types package). */
#ifndef MD_MIME_H
#define MD_MIME_H

#include <stddef.h>

/* The type for name's extension (after its last '.', any case), or NULL when the table has
 * none. The table is read once, at the first call, from MD_MIME_TYPES_PATH; a missing file
 * leaves it empty. Any thread. */
const char *md_mime_type(const char *name, size_t len);

#define MD_MIME_TYPES_PATH "/etc/mime.types"

#endif
