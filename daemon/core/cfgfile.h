/* Files a configuration names (the main file, error pages, user files, certificates and
 * keys): opened only when they are regular files. An open(2) of a FIFO waits for a writer,
 * and a device (/dev/zero) may never end, so `magpied -t` would hang on one, and a reload
 * would never finish (its signals unanswered) where it should be refused.
 */
#ifndef MD_CFGFILE_H
#define MD_CFGFILE_H

#include <stdio.h>

/* The file at path, for reading, once it is a regular file: its FILE, or NULL with *err set
 * (errno's, or EINVAL for something else than a regular file: md_cfgfile_why() says which).
 * The open does not wait (O_NONBLOCK, cleared once the file is known regular). */
FILE *md_cfgfile_open(const char *path, int *err);
/* err's words for a message: "not a regular file" for EINVAL, strerror's otherwise. */
const char *md_cfgfile_why(int err);
/* Whether path is a regular file this process can read (for a library that opens it by
 * path itself, as OpenSSL does): 0, or a negative errno. */
int md_cfgfile_check(const char *path);

#endif
