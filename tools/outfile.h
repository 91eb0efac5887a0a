// Output files of the tools written whole or not at all: a temporary name beside the target
// (formats/tmpfile.h: ".<base>.kvqtmp-<pid>-XXXXXX", locked while written), renamed over it
// when complete, removed on failure; one a killed run left is removed by the next.
#ifndef KVQ_TOOLS_OUTFILE_H
#define KVQ_TOOLS_OUTFILE_H

#include <stdio.h>

typedef struct {
    FILE *f;
    char tmp[4096];
    const char *path;
} kvq_outfile;

/** Opens a temporary file beside path. 0, or -1 with one line in msg naming path. */
int kvq_outfile_open(kvq_outfile *o, const char *path, char *msg, size_t cap);

/** ok != 0: flushes, closes and renames the temporary file to the target (0, or -1 with msg);
 *  ok == 0: closes and removes it (returns -1, msg untouched). */
int kvq_outfile_close(kvq_outfile *o, int ok, char *msg, size_t cap);

#endif
