// Rice-parameter granularity on real tensors (docs/results/hq.md): bits per weight with one
// k per tensor vs the best k per group of 16 tiles or per tile (each + 3 bits to store k).
//   build/bench/hq_kgran [MODEL_DIR [RATE]]   (E8, SNR from the table for RATE; default tiny-llama, 4.0)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "formats/checkpoint.h"
#include "kernels/cpu/wht.h"
#include "kernels/hq_layout.h"
#include "libconv/codec/hyperquant/hqcal.h"
#include "libconv/quant/rice.h"
int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/models/kvq-tiny-llama";
    double rate = argc > 2 ? atof(argv[2]) : 4.0;
    kvq_ckpt *ck; kvq_err err;
    if (kvq_ckpt_open(dir, &ck, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    kvq_lattice lat = KVQ_LAT_E8;
    double alpha = kvq_hq_alpha(lat, kvq_hqcal_snr_for_rate(lat, rate));
    double bt = 0, bg = 0, btile = 0, n = 0;
    for (size_t i = 0; i < kvq_ckpt_count(ck); i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        if (t->ndim != 2 || !strstr(t->name, "layers.") || t->shape[1] % 128) continue; // tile 128 only
        int64_t R = t->shape[0], C = t->shape[1], T = 128;
        float *x = malloc(4 * R * C); kvq_dtype_to_f32(t->dtype, t->data, R * C, x);
        int64_t nt = R * C / T;
        uint32_t *sym = malloc(4 * R * C);
        float sg[128];
        for (int64_t ti = 0; ti < nt; ti++) {
            float *r = x + ti * T; double ss = 0;
            int64_t j = (ti % (C / T));
            for (int w = 0; w < 2; w++) { uint64_t b = kvq_hq_sign_word(7, j, w); for (int k = 0; k < 64; k++) sg[64*w+k] = ((b >> k) & 1) ? -1.f : 1.f; }
            for (int k = 0; k < T; k++) { ss += (double)r[k]*r[k]; r[k] *= sg[k]; }
            kvq_wht(r, T);
            float g = (float)(alpha / sqrt(ss));
            for (int v = 0; v < T; v += 8) { float u[8]; int32_t c[8]; for (int k = 0; k < 8; k++) u[k] = r[v+k]*g; kvq_e8_nearest(u, c); kvq_lattice_strip(lat, c, sym + ti*T + v); }
        }
        kvq_rice_hist h; kvq_rice_hist_clear(&h);
        for (int64_t k = 0; k < R * C; k++) kvq_rice_hist_add(&h, sym[k]);
        uint64_t b; kvq_rice_best_k(&h, &b); bt += b;
        for (int64_t g0 = 0; g0 < nt; g0 += 16) {
            kvq_rice_hist hg; kvq_rice_hist_clear(&hg);
            for (int64_t ti = g0; ti < g0 + 16 && ti < nt; ti++) {
                kvq_rice_hist ht; kvq_rice_hist_clear(&ht);
                for (int k = 0; k < T; k++) { kvq_rice_hist_add(&hg, sym[ti*T+k]); kvq_rice_hist_add(&ht, sym[ti*T+k]); }
                uint64_t bb; kvq_rice_best_k(&ht, &bb); btile += bb + 3; // 3 bits to store k per tile
            }
            uint64_t bb; kvq_rice_best_k(&hg, &bb); bg += bb + 3;
        }
        n += R * C; free(x); free(sym);
    }
    printf("%s at table rate %.2f: per-tensor k %.4f b/w, per-group k (+3 bits) %.4f, per-tile k (+3 bits) %.4f\n",
           dir, rate, bt / n, bg / n, btile / n);
    return 0;
}
