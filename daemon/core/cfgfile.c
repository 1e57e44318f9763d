/* Files a configuration names, opened only when regular (cfgfile.h). */
#include "core/cfgfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *md_cfgfile_open(const char *path, int *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        *err = errno;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *err = errno;
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        *err = EINVAL;
        close(fd);
        return NULL;
    }
    /* A regular file's reads never wait: the flag only kept the open from waiting. */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        *err = errno;
        close(fd);
    }
    return f;
}

const char *md_cfgfile_why(int err)
{
    return err == EINVAL ? "not a regular file" : strerror(err);
}

int md_cfgfile_check(const char *path)
{
    int err;
    FILE *f = md_cfgfile_open(path, &err);
    if (f == NULL)
        return -err;
    fclose(f);
    return 0;
}
