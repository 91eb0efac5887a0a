// Temporary files a later run can prove abandoned (tmpfile.h): a name carrying the writer's pid,
// a flock held while it writes; the next writer of the destination removes those whose pid is
// dead and whose lock it can take.
#include "formats/tmpfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG ".kvqtmp-"

// "<dir>/" (or "") and the base name of path; *dir malloc'd.
static int split(const char *path, char **dir, const char **base) {
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path + 1) : 0;
    if (!(*dir = malloc(dl + 1))) return -1;
    memcpy(*dir, path, dl);
    (*dir)[dl] = 0;
    *base = slash ? slash + 1 : path;
    return 0;
}

// "<pid>-XXXXXX" exactly (what kvq_tmp_create makes after the prefix): the pid, or -1.
static long anchor_pid(const char *rest) {
    char *end;
    errno = 0;
    long pid = strtol(rest, &end, 10);
    if (errno || end == rest || pid <= 0 || *end != '-' || strlen(end + 1) != 6) return -1;
    for (const char *p = end + 1; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return -1;
    return pid;
}

static int pid_alive(long pid) { return kill((pid_t)pid, 0) == 0 || errno == EPERM; }

int kvq_tmp_clean(const char *path) {
    char *dir;
    const char *base;
    if (split(path, &dir, &base)) return 0;
    size_t pl = strlen(base) + strlen(TAG) + 1;
    char *prefix = malloc(pl + 1);
    DIR *d = prefix ? opendir(*dir ? dir : ".") : NULL;
    if (!d) { free(prefix), free(dir); return 0; }
    snprintf(prefix, pl + 1, ".%s" TAG, base);
    // the names first (nothing is removed while the directory is read)
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, pl)) continue;
        if (n == cap) {
            char **g = realloc(names, (cap = cap ? 2 * cap : 8) * sizeof *g);
            if (!g) break;
            names = g;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    int removed = 0;
    for (size_t i = 0; i < n; i++) {
        const long pid = anchor_pid(names[i] + pl);
        if (pid < 0 || pid_alive(pid)) continue; // not an anchor (a family member), or its writer lives
        size_t fl = strlen(dir) + strlen(names[i]) + 1;
        char *full = malloc(fl);
        if (!full) continue;
        snprintf(full, fl, "%s%s", dir, names[i]);
        int fd = open(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        struct stat a, b;
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 && lstat(full, &b) == 0 &&
            S_ISREG(b.st_mode) && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            const size_t al = strlen(names[i]);
            for (size_t k = 0; k < n; k++) // its family: names that extend it
                if (k != i && !strncmp(names[k], names[i], al) && names[k][al]) {
                    size_t ml = strlen(dir) + strlen(names[k]) + 1;
                    char *m = malloc(ml);
                    if (m) snprintf(m, ml, "%s%s", dir, names[k]), unlink(m);
                    free(m);
                }
            removed += unlink(full) == 0;
        }
        if (fd >= 0) close(fd);
        free(full);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(prefix);
    free(dir);
    return removed;
}

int kvq_tmp_create(const char *path, char **name) {
    *name = NULL;
    struct stat st; // a directory in the destination's place would be found only at the rename,
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { errno = EISDIR; return -1; } // after the work
    kvq_tmp_clean(path);
    char *dir;
    const char *base;
    if (split(path, &dir, &base)) { errno = ENOMEM; return -1; }
    size_t n = strlen(dir) + strlen(base) + strlen(TAG) + 32;
    char *buf = malloc(n);
    if (!buf) { free(dir); errno = ENOMEM; return -1; }
    snprintf(buf, n, "%s.%s" TAG "%ld-XXXXXX", dir, base, (long)getpid());
    free(dir);
    int fd = mkostemp(buf, O_CLOEXEC);
    if (fd < 0) { free(buf); return -1; }
    // No cleaner takes this file before the lock: its pid (ours) is alive.
    if (flock(fd, LOCK_EX) != 0) {
        int e = errno;
        close(fd), unlink(buf), free(buf);
        errno = e;
        return -1;
    }
    mode_t um = umask(0); // mkstemp makes 0600; the files people keep get 0666 & ~umask
    umask(um);
    (void)fchmod(fd, 0666 & ~um);
    *name = buf;
    return fd;
}
