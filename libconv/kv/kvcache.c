// The KV-cache interface's shared part: its error channel (see kvcache.h).
#include "libconv/kv/kvcache.h"

#include <stdarg.h>
#include <stdio.h>

kvq_status kvq_kvcache_fail(kvq_kvcache *c, kvq_status code, const char *fmt, ...) {
    char msg[KVQ_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
#pragma omp critical(kvq_kvcache_err)
    kvq_err_set(&c->err, code, "%s", msg);
    return code;
}
