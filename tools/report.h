// kvq-verify --report: one self-contained HTML page (styles inline, figures as PNG data: URIs
// drawn with cairo by tools/plot.c) to attach to a release: model, recipe, protocol,
// thresholds and verdict, per-layer bits and SNR, the KLD distribution, and the weights / KV
// codec / both runs.
#ifndef KVQ_TOOLS_REPORT_H
#define KVQ_TOOLS_REPORT_H

#include <stddef.h>

#include "libconv/verify/verify.h"

/** Writes the page for rep (verdict: the one-line result the text output ends with) to path,
 *  through a temporary name renamed when complete. Reads the manifest of rep->kvq_path again
 *  (its model, recipe and KV sections). 0, or -1 with one line in msg naming the file. */
int kvq_report_html(const kvq_verify_report *rep, const char *verdict, const char *path, char *msg, size_t cap);

#endif
