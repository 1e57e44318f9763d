/* A message for a person, filled in when a function of the daemon returns an error: the
 * configuration's "file:line: [section] key: why", a log file that cannot be opened. */
#ifndef MD_ERROR_H
#define MD_ERROR_H

enum { MD_ERROR_MAX = 512 };

typedef struct md_error {
    char msg[MD_ERROR_MAX];
} md_error;

#endif
