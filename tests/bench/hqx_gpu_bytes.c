// Device bytes of packed hqx tensors with the escapes in 32 bits (KVQ_CUDA_ESC16=0) and in 16
// (kernels/cpu/hqx_esc16.h, the default): kvq_hqx_gpu_bytes, which is what kvq_cuda_hqx_bytes
// reports after the upload (tests/test_cuda_hqx.c checks they agree). Host only, no GPU. Per
// shape: random Gaussian weights (cuda_hqx's: 0.02·N(0,1), seed 7) quantized with HyperQuant
// E8 4.0 and packed at width KVQ_HQX_WIDTH (default 4: nibbles, ~2 % escapes).
// usage: hqx_gpu_bytes [ROWSxCOLS ...]   (default: 4096x14336, Llama-3-8B's down_proj)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/hqx_esc16.h"
#include "libconv/codec/hyperquant/hq_pack.h"
#include "tests/testrng.h"

int main(int argc, char **argv) {
    const char *ev = getenv("KVQ_HQX_WIDTH");
    const int width = ev && *ev ? atoi(ev) : 4;
    if (width < 4 || width > 8) { fprintf(stderr, "KVQ_HQX_WIDTH=%s: expected 4 to 8\n", ev); return 2; }
    printf("| shape | codec | width | escapes | of weights | big deltas | 32-bit escapes MB | 16-bit escapes MB | "
           "device MB (32-bit) | device MB (16-bit) | bits/w (32) | bits/w (16) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    const int ns = argc > 1 ? argc - 1 : 1;
    for (int si = 0; si < ns; si++) {
        const char *sh = argc > 1 ? argv[si + 1] : "4096x14336";
        long long rows = 0, cols = 0;
        if (sscanf(sh, "%lldx%lld", &rows, &cols) != 2 || rows < 1 || cols < 1) { fprintf(stderr, "bad shape %s\n", sh); return 2; }
        float *x = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
        if (!x) { fprintf(stderr, "out of memory\n"); return 1; }
        uint64_t s = 7;
        for (long long i = 0; i < rows * cols; i++) x[i] = (float)(0.02 * gauss(&s));
        kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 4.0);
        kvq_codec_input in = {NULL, x, rows, cols, 1, 0, NULL};
        kvq_encoded e;
        kvq_err err = {0};
        kvq_hq_header h;
        kvq_blob_view v[KVQ_MAX_BLOBS];
        kvq_hqx w;
        kvq_hqx_esc16 x16;
        if (kvq_hq_encode(&o, &in, &e, NULL, NULL, &err) || kvq_hq_header_parse(e.params, rows, cols, &h, &err)) {
            fprintf(stderr, "%s: %s\n", sh, err.msg);
            return 1;
        }
        for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
        if (kvq_hq_pack(&h, v, e.n_blob, width, 0, &w, &err) || kvq_hqx_esc16_build(&w, &x16, &err)) {
            fprintf(stderr, "%s: %s\n", sh, err.msg);
            return 1;
        }
        const double n = (double)(rows * cols), b32 = (double)kvq_hqx_gpu_bytes(&w, NULL), b16 = (double)kvq_hqx_gpu_bytes(&w, &x16);
        const unsigned ne = w.esc_row[w.rows];
        printf("| %s | hyperquant:e8:4.0 | %d | %u | %.2f %% | %lld | %.3f | %.3f%s | %.3f | %.3f | %.3f | %.3f |\n", sh, w.vbits, ne,
               100.0 * ne / n, (long long)x16.n_big, kvq_hqx_esc_dev_bytes(&w, NULL) / 1e6, kvq_hqx_esc_dev_bytes(&w, &x16) / 1e6,
               x16.used ? "" : " (32-bit kept)", b32 / 1e6, b16 / 1e6, 8.0 * b32 / n, 8.0 * b16 / n);
        kvq_hqx_esc16_free(&x16);
        kvq_hqx_free(&w);
        kvq_encoded_free(&e);
        free(x);
    }
    return 0;
}
