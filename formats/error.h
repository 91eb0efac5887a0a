// Status codes and the error record every kvq library call fills on failure.
// The library never prints or exits: it returns a negative kvq_status and writes
// one line into a kvq_err naming the file, the tensor and the offending value.
#ifndef KVQ_ERROR_H
#define KVQ_ERROR_H

#include <stdio.h>
#include <stdlib.h>

typedef enum {
    KVQ_OK = 0,
    KVQ_ERR_IO = -1,          // open/read/write/mmap/rename failed
    KVQ_ERR_FORMAT = -2,      // malformed input bytes (header, JSON, offsets, shapes)
    KVQ_ERR_UNSUPPORTED = -3, // well-formed but not handled (dtype, architecture)
    KVQ_ERR_NOMEM = -4,
    KVQ_ERR_ARG = -5,         // bad argument or spec string from the caller
    KVQ_ERR_DIGEST = -6,      // payload digest mismatch
    KVQ_ERR_VERSION = -7,     // unknown .kvq format version
    KVQ_ERR_NUMERIC = -8,     // NaN/Inf or value outside what a codec can represent
    KVQ_ERR_MISSING = -9,     // a required file, field, tensor or entry is absent
} kvq_status;

#define KVQ_ERR_MSG_MAX 1024
typedef struct {
    kvq_status code;
    char msg[KVQ_ERR_MSG_MAX];
} kvq_err;

/** Static text for a status code. */
const char *kvq_strerror(kvq_status s);

/** Records `code` and a printf-formatted message in err (err may be NULL).
 *  @return code, so callers can `return kvq_err_set(err, KVQ_ERR_FORMAT, ...)`. */
kvq_status kvq_err_set(kvq_err *err, kvq_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Prefixes an existing message with "prefix: " (for adding a file or tensor name). */
void kvq_err_prefix(kvq_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Programmer errors only, never bad input: aborts with file and line. */
#define KVQ_ASSERT(x)                                                                   \
    do {                                                                                \
        if (!(x)) {                                                                     \
            fprintf(stderr, "%s:%d: KVQ_ASSERT(%s) failed\n", __FILE__, __LINE__, #x); \
            abort();                                                                    \
        }                                                                               \
    } while (0)

#define KVQ_VERSION "0.1.0"

#endif
