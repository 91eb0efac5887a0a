// Whole-or-nothing output files for the tools (outfile.h).
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/tmpfile.h"
#include "tools/outfile.h"

int kvq_outfile_open(kvq_outfile *o, const char *path, char *msg, size_t cap) {
    o->f = NULL;
    o->tmp[0] = 0;
    o->path = path;
    char *name = NULL;
    int fd = kvq_tmp_create(path, &name); // locked, 0666 & ~umask; clears what killed runs left
    if (fd >= 0 && strlen(name) >= sizeof o->tmp) {
        close(fd), unlink(name), free(name);
        snprintf(msg, cap, "%s: path too long", path);
        return -1;
    }
    if (fd < 0) {
        snprintf(msg, cap, "%s: cannot create a file beside it: %s", path, strerror(errno));
        return -1;
    }
    strcpy(o->tmp, name);
    free(name);
    if (!(o->f = fdopen(fd, "wb"))) {
        snprintf(msg, cap, "%s: %s", path, strerror(errno));
        close(fd);
        unlink(o->tmp);
        return -1;
    }
    return 0;
}

int kvq_outfile_close(kvq_outfile *o, int ok, char *msg, size_t cap) {
    if (!o->f) return -1;
    int bad = ferror(o->f) || fflush(o->f) != 0;
    const int e = errno;
    bad |= fclose(o->f) != 0;
    o->f = NULL;
    if (!ok) { unlink(o->tmp); return -1; }
    if (bad) {
        snprintf(msg, cap, "%s: write failed: %s", o->path, strerror(e ? e : EIO));
        unlink(o->tmp);
        return -1;
    }
    if (rename(o->tmp, o->path) != 0) {
        snprintf(msg, cap, "%s: cannot rename the finished file into place: %s", o->path, strerror(errno));
        unlink(o->tmp);
        return -1;
    }
    return 0;
}
