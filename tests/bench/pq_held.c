// Bytes the PQ execution layout holds per tensor of a .kvq against its bytes in the file
// (kvq_weights_get_pqx, the loader's own call): shape, k per stage, index width, codebook
// type, held / stored, and the totals; QET tensors with swap trees (the qetx variant) too.
// Tensors of other codecs are skipped.
// usage: build/bench/pq_held FILE.kvq
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/pq.h"
#include "libconv/runtime/weights.h"

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: pq_held FILE.kvq\n"); return 2; }
    kvq_weights *w;
    kvq_err e = {0};
    if (kvq_weights_open(argv[1], &w, &e)) { fprintf(stderr, "pq_held: %s\n", e.msg); return 1; }
    size_t held = 0, stored = 0;
    double worst = 0;
    printf("| tensor | rows x cols | k | index bits | codebooks | stored | held | held/stored |\n|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < kvq_weights_count(w); i++) {
        const char *name = kvq_weights_name(w, i);
        kvq_pqx p;
        kvq_status s = kvq_weights_get_pqx(w, name, &p, &e);
        if (s == KVQ_ERR_UNSUPPORTED) continue;
        if (s) { fprintf(stderr, "pq_held: %s\n", e.msg); return 1; }
        size_t h = kvq_pqx_bytes(&p), st = kvq_weights_stored_bytes(w, name);
        double r = (double)h / (double)st;
        if (r > worst) worst = r;
        if (p.levels) // QET: index bits per stage, codebooks held as the file stores them
            printf("| %s (qet l=%d) | %lld x %lld | %lld / %lld | %d / %d bits | %s as stored | %zu | %zu | %.3f |\n", name,
                   p.levels, (long long)p.rows, (long long)p.cols, (long long)p.k[0], (long long)(p.stages > 1 ? p.k[1] : 0),
                   p.qbits[0], p.stages > 1 ? p.qbits[1] : 0,
                   p.cb_type == KVQ_PQX_CB_F32 ? "f32" : p.cb_type == KVQ_PQX_CB_CQO ? "cqo" : "bf16", st, h, r);
        else
            printf("| %s | %lld x %lld | %lld%s | %d | %s | %zu | %zu | %.3f |\n", name, (long long)p.rows, (long long)p.cols,
                   (long long)p.k[0], p.stages > 1 ? " + stage 2" : "", kvq_pqx_idx_bits(&p, 0),
                   p.cb_type == KVQ_PQX_CB_F32 ? "f32" : p.cb_type == KVQ_PQX_CB_CQO ? "cqo u16" : p.cb_type == KVQ_PQX_CB_F16 ? "f16" : "bf16", st, h, r);
        held += h;
        stored += st;
        kvq_pqx_free(&p);
    }
    printf("total: held %zu bytes for %zu stored = %.4fx (worst tensor %.3fx)\n", held, stored,
           stored ? (double)held / (double)stored : 0.0, worst);
    kvq_weights_close(w);
    return 0;
}
