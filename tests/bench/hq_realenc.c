// Encode speed and rate-control passes of HyperQuant E8 on a real checkpoint's linear
// weights (one thread, CPU time of kvq_hq_encode only):
//   build/bench/hq_realenc [MODEL_DIR [BPS]]     (default: bundled tiny-llama, 4.0)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/checkpoint.h"
#include "libconv/codec/hyperquant/hyperquant.h"

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/models/kvq-tiny-llama";
    double bps = argc > 2 ? atof(argv[2]) : 4.0;
    kvq_ckpt *ck;
    kvq_err err;
    if (kvq_ckpt_open(dir, &ck, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    int passes[16] = {0};
    double tc = 0, nw = 0;
    for (size_t i = 0; i < kvq_ckpt_count(ck); i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        if (t->ndim != 2 || !strstr(t->name, "layers.")) continue;
        int64_t r = t->shape[0], c = t->shape[1];
        float *x = malloc(sizeof(float) * r * c);
        kvq_dtype_to_f32(t->dtype, t->data, (size_t)(r * c), x);
        kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, bps);
        kvq_codec_input in = {t, x, r, c, i, 1, NULL};
        kvq_encoded e;
        kvq_hq_stats st;
        double c0 = cpu();
        if (kvq_hq_encode(&o, &in, &e, NULL, &st, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        tc += cpu() - c0;
        nw += (double)(r * c);
        if (st.iterations < 16) passes[st.iterations]++;
        kvq_encoded_free(&e);
        free(x);
    }
    for (int i = 0; i < 16; i++)
        if (passes[i]) printf("passes=%d: %d tensors\n", i, passes[i]);
    printf("%s at %.2f bits: encode %.1f M w/s CPU (1 thread)\n", dir, bps, nw / tc / 1e6);
    kvq_ckpt_close(ck);
    return 0;
}
