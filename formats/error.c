// Error record helpers: status names and formatted one-line messages.
#include "formats/error.h"

#include <stdarg.h>
#include <string.h>

const char *kvq_strerror(kvq_status s) {
    switch (s) {
    case KVQ_OK: return "ok";
    case KVQ_ERR_IO: return "I/O error";
    case KVQ_ERR_FORMAT: return "malformed input";
    case KVQ_ERR_UNSUPPORTED: return "unsupported";
    case KVQ_ERR_NOMEM: return "out of memory";
    case KVQ_ERR_ARG: return "bad argument";
    case KVQ_ERR_DIGEST: return "digest mismatch";
    case KVQ_ERR_VERSION: return "unknown format version";
    case KVQ_ERR_NUMERIC: return "non-finite or unrepresentable value";
    case KVQ_ERR_MISSING: return "missing";
    }
    return "unknown status";
}

kvq_status kvq_err_set(kvq_err *err, kvq_status code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void kvq_err_prefix(kvq_err *err, const char *fmt, ...) {
    if (!err) return;
    char pre[512], old[KVQ_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
}
