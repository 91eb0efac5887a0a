// HyperQuant calibration: α(SNR, Λ) in closed form, interpolation in the committed
// rate↔SNR table (libconv/hqcal_table.c), and the iid-Gaussian measurement that builds it.
#include "libconv/codec/hyperquant/hqcal.h"
#include "kernels/splitmix.h"

#include <math.h>
#include <stdlib.h>

#include "libconv/quant/rice.h"

extern const kvq_hqcal_table kvq_hqcal_tables[KVQ_LAT_COUNT];

const kvq_hqcal_table *kvq_hqcal_get(kvq_lattice l) { return &kvq_hqcal_tables[l]; }

double kvq_hq_alpha(kvq_lattice l, double snr_db) {
    double n = (double)kvq_lattice_dim(l);
    return sqrt(pow(10.0, snr_db / 10.0) * kvq_lattice_G(l) * pow(kvq_lattice_covolume(l), 2.0 / n));
}

double kvq_hqcal_rate_for_snr(kvq_lattice l, double snr_db) {
    const kvq_hqcal_table *t = kvq_hqcal_get(l);
    int i = 0;
    while (i < t->n - 2 && snr_db > t->pt[i + 1].snr_db) i++;
    const kvq_hqcal_point *a = &t->pt[i], *b = &t->pt[i + 1];
    return a->rate + (b->rate - a->rate) * (snr_db - a->snr_db) / (b->snr_db - a->snr_db);
}

double kvq_hqcal_snr_for_rate(kvq_lattice l, double rate) {
    const kvq_hqcal_table *t = kvq_hqcal_get(l);
    int i = 0;
    while (i < t->n - 2 && rate > t->pt[i + 1].rate) i++;
    const kvq_hqcal_point *a = &t->pt[i], *b = &t->pt[i + 1];
    if (b->rate <= a->rate) return a->snr_db; // flat segment (cannot happen in a sane table)
    return a->snr_db + (b->snr_db - a->snr_db) * (rate - a->rate) / (b->rate - a->rate);
}

// ---- measurement on iid Gaussian tiles

static double gauss(uint64_t *s) { // Box–Muller, one value per call (simple, deterministic)
    double u1 = ((double)(kvq_splitmix64_next(s) >> 11) + 0.5) * 0x1.0p-53;
    double u2 = (double)(kvq_splitmix64_next(s) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int kvq_hqcal_measure(kvq_lattice l, double snr_db, int tile, int64_t n_tiles, uint64_t seed,
                      kvq_hqcal_result *out) {
    int n = kvq_lattice_dim(l), ncls = kvq_lattice_classes(l);
    if (tile <= 0 || tile % n || tile > 4096 || n_tiles <= 0) return -1;
    double alpha = kvq_hq_alpha(l, snr_db);
    kvq_rice_hist *hist = calloc(KVQ_LAT_MAX_CLASSES, sizeof *hist);
    if (!hist) return -1;
    double sig = 0.0, noise = 0.0;
    uint64_t over = 0;
    int fail = 0;
#pragma omp parallel reduction(+ : sig, noise, over)
    {
        kvq_rice_hist *lh = calloc(KVQ_LAT_MAX_CLASSES, sizeof *lh);
        float *u = malloc(sizeof(float) * (size_t)tile);
        if (!lh || !u) {
#pragma omp atomic write
            fail = 1;
        } else {
#pragma omp for schedule(static)
            for (int64_t ti = 0; ti < n_tiles; ti++) {
                uint64_t s = seed ^ ((uint64_t)ti * 0xd1342543de82ef95ull);
                double nn = 0.0;
                for (int i = 0; i < tile; i++) { double g = gauss(&s); u[i] = (float)g; nn += g * g; }
                float sc = (float)(alpha * sqrt((double)tile) / sqrt(nn));
                for (int i = 0; i < tile; i++) u[i] *= sc;
                for (int v = 0; v < tile; v += n) {
                    int32_t c[8];
                    uint32_t sym[8];
                    float e[8];
                    kvq_lattice_nearest(l, u + v, c);
                    kvq_lattice_embed(l, c, e);
                    kvq_lattice_strip(l, c, sym);
                    for (int i = 0; i < n; i++) {
                        double d = (double)u[v + i] - (double)e[i];
                        sig += (double)u[v + i] * (double)u[v + i];
                        noise += d * d;
                        if (c[i] > 127 || c[i] < -127) over++;
                        kvq_rice_hist_add(&lh[kvq_lattice_symbol_class(l, i)], sym[i]);
                    }
                }
            }
#pragma omp critical
            for (int c = 0; c < ncls; c++) kvq_rice_hist_merge(&hist[c], &lh[c]);
        }
        free(lh);
        free(u);
    }
    if (fail) { free(hist); return -1; }
    uint64_t bits = 0;
    double ent = 0.0;
    for (int c = 0; c < ncls; c++) {
        uint64_t b;
        out->k[c] = kvq_rice_best_k(&hist[c], &b);
        bits += b;
        ent += kvq_rice_hist_entropy(&hist[c]);
    }
    out->n_scalars = (uint64_t)n_tiles * (uint64_t)tile;
    out->rate = (double)bits / (double)out->n_scalars;
    // Entropy over classes: each class histogram pools its symbols, so the sum of the
    // class entropies over all scalars is the per-scalar marginal entropy.
    out->entropy = ent / (double)out->n_scalars;
    out->snr_real_db = 10.0 * log10(sig / (noise > 0 ? noise : 1e-300));
    out->overflow = over;
    free(hist);
    return 0;
}
