// Figures the tools draw with cairo (kvq-inspect --plot, kvq-verify --report): per-layer bits
// and SNR of a .kvq, and the distribution of per-position KLD. Into a PNG or SVG file (by
// extension, written to a temporary name and renamed when complete) or a PNG in memory.
#ifndef KVQ_TOOLS_PLOT_H
#define KVQ_TOOLS_PLOT_H

#include <stddef.h>

#include "libconv/verify/layers.h"

typedef enum { KVQ_PLOT_PNG, KVQ_PLOT_SVG } kvq_plot_format;

/** The format a path's extension names (.png, .svg, any case); -1 for any other. */
int kvq_plot_format_of(const char *path, kvq_plot_format *out);

/** The KLD distribution of up to 3 runs (weights, kv, weights+kv): per-position values. */
typedef struct {
    int n_runs;
    const char *label[3];
    const float *kld[3];
    size_t n[3];
} kvq_plot_kld;

/** Draws a figure: the per-layer view of t (title on top), or the KLD histogram of k. One of
 *  t or k non-NULL. To a file (kvq_plot_format_of(path)): 0, or -1 with one line in msg naming
 *  the file; the file is complete or absent. To memory (PNG): 0 and *png (malloc'd, caller
 *  frees) of *n bytes, or -1. */
int kvq_plot_file(const kvq_layer_table *t, const kvq_plot_kld *k, const char *title, const char *path, char *msg,
                  size_t cap);
int kvq_plot_png(const kvq_layer_table *t, const kvq_plot_kld *k, const char *title, unsigned char **png, size_t *n);

/** Releases cairo's process-wide caches (fonts, fontconfig patterns), so leak checkers see a
 *  clean exit; call once, after the last figure, with no cairo object alive. */
void kvq_plot_done(void);

/** Width and height (CSS pixels) of the figures above. */
void kvq_plot_size(int layers, double *w, double *h);

#endif
