// Helpers several suites share: a shell command's exit status, a whole file in memory, and
// the relative L2 error of two float arrays. Static functions: include where used.
#ifndef KVQ_TESTUTIL_H
#define KVQ_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/** Runs a printf-formatted shell command; its exit status, or -1 when it did not exit. */
__attribute__((format(printf, 1, 2), unused)) static int run(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int r = system(cmd);
    return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

/** The whole file (malloc'd, caller frees) and its size, or NULL. */
__attribute__((unused)) static void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(sz > 0 ? sz : 1);
    if (fread(p, 1, sz, f) != (size_t)sz) { free(p); fclose(f); return NULL; }
    fclose(f);
    *n = sz;
    return p;
}

/** ‖a − b‖ / ‖b‖ (the denominator 1 when b is zero). */
__attribute__((unused)) static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); r += (double)b[i] * b[i]; }
    return sqrt(d / (r > 0 ? r : 1));
}

#endif
