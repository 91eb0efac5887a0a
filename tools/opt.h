// One way for every tool to read a numeric option value: the whole string must parse and lie
// in [lo, hi]; otherwise one line "TOOL: OPTION 'VALUE': expected ..." on stderr and -1, so
// the tool exits 2 (`kvq-run -n abc` used to run with n = 0 and exit 0).
#ifndef KVQ_TOOLS_OPT_H
#define KVQ_TOOLS_OPT_H

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/error.h" // KVQ_VERSION
#include "libconv/eval/eval.h" // the protocol's enums

// Inputs are mmap'ed: a file that shrinks while it is read (a shard truncated during a
// conversion, a .kvq replaced under kvq-run) raises SIGBUS on the next access to a page past its
// new end. The handler prints one line naming the input and exits 2 (the destination was never
// touched: outputs go to a temporary name; a temporary left behind is removed by the next writer
// of that destination, formats/tmpfile.h). It may only call write and _exit, so the line is made
// beforehand; this is the one mutable file-scope state of the tools, because a handler has no
// context argument.
static char kvq_sigbus_line[1280];
static size_t kvq_sigbus_len;

static inline void kvq_tool_on_sigbus(int sig) {
    (void)sig;
    ssize_t r = write(2, kvq_sigbus_line, kvq_sigbus_len);
    (void)r;
    _exit(2);
}

/** Names the input file in the SIGBUS line (the checkpoint or .kvq the tool reads). */
static inline void kvq_tool_input(const char *tool, const char *path) {
    int n = snprintf(kvq_sigbus_line, sizeof kvq_sigbus_line,
                     "%s: %s: a file changed size or became unreadable while it was being read (SIGBUS); stopped\n", tool,
                     path);
    kvq_sigbus_len = n < 0 ? 0 : (size_t)n < sizeof kvq_sigbus_line ? (size_t)n : sizeof kvq_sigbus_line - 1;
    if (n >= (int)sizeof kvq_sigbus_line) kvq_sigbus_line[kvq_sigbus_len - 1] = '\n';
}

/** What every tool does first. A file-size limit (RLIMIT_FSIZE) makes writes fail with EFBIG,
 *  reported as an error naming the file, instead of SIGXFSZ killing the tool with a partial
 *  temporary file; a SIGBUS (an input that shrank, above) is one line and exit 2.
 *  `--version` anywhere on the command line prints "TOOL (kvq VERSION)" and returns 1 (the tool
 *  exits 0) before any other option is parsed. */
static inline int kvq_tool_start(const char *tool, int argc, char **argv) {
    signal(SIGXFSZ, SIG_IGN);
    kvq_tool_input(tool, "an input file");
    signal(SIGBUS, kvq_tool_on_sigbus);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) {
            printf("%s (kvq %s)\n", tool, KVQ_VERSION);
            return 1;
        }
    return 0;
}

static inline int kvq_opt_ll(const char *tool, const char *opt, const char *s, long long lo, long long hi,
                             long long *out) {
    char *end = NULL;
    errno = 0;
    long long x = s ? strtoll(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "%s: %s '%s': expected an integer in [%lld, %lld]\n", tool, opt, s ? s : "", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/** int-valued convenience over kvq_opt_ll. */
static inline int kvq_opt_int(const char *tool, const char *opt, const char *s, int lo, int hi, int *out) {
    long long x;
    if (kvq_opt_ll(tool, opt, s, lo, hi, &x)) return -1;
    *out = (int)x;
    return 0;
}

static inline int kvq_opt_u64(const char *tool, const char *opt, const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long x = s && *s != '-' ? strtoull(s, &end, 0) : 0;
    if (!s || *s == '-' || end == s || *end || errno) {
        fprintf(stderr, "%s: %s '%s': expected a non-negative integer\n", tool, opt, s ? s : "");
        return -1;
    }
    *out = (uint64_t)x;
    return 0;
}

static inline int kvq_opt_double(const char *tool, const char *opt, const char *s, double lo, double hi,
                                 double *out) {
    char *end = NULL;
    double x = s ? strtod(s, &end) : NAN;
    if (!s || end == s || *end || !isfinite(x) || x < lo || x > hi) {
        if (lo <= -1e300 && hi >= 1e300) fprintf(stderr, "%s: %s '%s': expected a number\n", tool, opt, s ? s : "");
        else fprintf(stderr, "%s: %s '%s': expected a number in [%g, %g]\n", tool, opt, s ? s : "", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/** The evaluation protocol's values, one spelling for kvq-run and kvq-verify (docs/VERIFY.md):
 *  --bos none|prepend|replace (kvq-verify's bare --bos = prepend, --no-bos = none) and
 *  --scored all-but-first|second-half (alias --score; "all" = all-but-first). One line on a
 *  bad value, naming the option and the accepted values; -1 then. */
static inline int kvq_opt_bos(const char *tool, const char *v, kvq_bos_mode *out) {
    if (v && !strcmp(v, "none")) *out = KVQ_BOS_NONE;
    else if (v && !strcmp(v, "prepend")) *out = KVQ_BOS_PREPEND;
    else if (v && !strcmp(v, "replace")) *out = KVQ_BOS_REPLACE;
    else { fprintf(stderr, "%s: --bos '%s': expected none, prepend or replace\n", tool, v ? v : ""); return -1; }
    return 0;
}
static inline int kvq_opt_scored(const char *tool, const char *v, kvq_score_mode *out) {
    if (v && (!strcmp(v, "all-but-first") || !strcmp(v, "all"))) *out = KVQ_SCORE_ALL_BUT_FIRST;
    else if (v && !strcmp(v, "second-half")) *out = KVQ_SCORE_SECOND_HALF;
    else {
        fprintf(stderr, "%s: --scored '%s': expected all-but-first (or all) or second-half\n", tool, v ? v : "");
        return -1;
    }
    return 0;
}

#endif
