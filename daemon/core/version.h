/* magpied's version, for --version, the start-up line and magpied_build_info. */
#ifndef MD_VERSION_H
#define MD_VERSION_H

#define MAGPIED_VERSION "0.1.0"

#endif
