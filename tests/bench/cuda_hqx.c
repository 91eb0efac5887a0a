// GPU benchmark of products from the hqx execution layout (kernels/cuda/hqx_matvec.cu):
// per shape, random Gaussian weights quantized with HyperQuant E8 4.0 / 3.0 and RTN 4 g128,
// packed as the runtime packs them, the one-token int8 product timed by CUDA events: one call
// alone (median of 50; the host's launch latency included) and streamed (100 back to back
// over copies of the tensor that together exceed L2, mean; median of 5), beside the device's
// copy bandwidth. Prints one row per shape and codec: ms, bytes read per second streamed and
// its fraction of copy bandwidth (bytes read per second over the copy's bytes read + written
// per second), the float product and the 8-token product (one call each). tests/bench/cuda_hqx_peer.py times torch's bf16
// GEMV on the same shapes (run both in one call).
// KVQ_HQX_FOLD=1: also an RMSNorm input streamed both ways, the preparation kernel + product
// against the product preparing it itself (kvq_cuda_hqx_set_fold), per shape and codec.
// KVQ_HQX_WIDTH=4..8: HyperQuant layouts packed at that width (4: nibbles, E8 4.0 then ~1.3 %
// escapes), as the runtime's knob; the width column adds the escapes' share of the weights.
// KVQ_CUDA_ESC_PF=0: the one-token product's row end without the escape prefetch (hqx_gemv1.cu).
// usage: cuda_hqx [ROWSxCOLS ...]   (default: Llama-3-8B's layer shapes and 8192², 16384²)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/hqx.h"
#include "libconv/codec/hyperquant/hq_pack.h"
#include "libconv/codec/rtn.h"
#include "tests/testrng.h"

static int pack_one(const char *codec, const float *x, int64_t rows, int64_t cols, kvq_hqx *w, double *stored_bits) {
    kvq_err err = {0};
    kvq_encoded e;
    kvq_blob_view v[KVQ_MAX_BLOBS];
    kvq_status s;
    if (!strncmp(codec, "hyperquant:", 11)) {
        kvq_lattice l;
        char lat[8] = "";
        double bps = 0;
        if (sscanf(codec + 11, "%2[a-z0-9]:%lf", lat, &bps) != 2 || kvq_lattice_parse(lat, &l)) return -1;
        kvq_hq_opts o = kvq_hq_opts_default(l, bps);
        kvq_codec_input in = {NULL, x, rows, cols, 1, 0, NULL};
        kvq_hq_header h;
        if ((s = kvq_hq_encode(&o, &in, &e, NULL, NULL, &err)) || (s = kvq_hq_header_parse(e.params, rows, cols, &h, &err))) {
            fprintf(stderr, "%s: %s\n", codec, err.msg);
            return -1;
        }
        for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
        // KVQ_HQX_WIDTH=4..8: the layout's width forced as the runtime's knob does (libconv/runtime/weights.c)
        const char *ev = getenv("KVQ_HQX_WIDTH");
        const int width = ev && *ev ? atoi(ev) : 0;
        if (ev && *ev && (width < 4 || width > 8)) {
            fprintf(stderr, "KVQ_HQX_WIDTH=%s: expected 4 to 8\n", ev);
            kvq_encoded_free(&e);
            return -1;
        }
        s = kvq_hq_pack(&h, v, e.n_blob, width, 0, w, &err);
    } else {
        const kvq_codec_traits *c = kvq_codec_find("rtn");
        json_t *cfg = NULL;
        kvq_codec_input in = {NULL, x, rows, cols, 1, 0, NULL};
        if ((s = c->parse(codec + 4, &cfg, &err)) || (s = c->encode(cfg, &in, &e, &err))) {
            fprintf(stderr, "%s: %s\n", codec, err.msg);
            return -1;
        }
        json_decref(cfg);
        for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
        s = kvq_rtn_pack(e.params, v, e.n_blob, rows, cols, w, &err);
    }
    *stored_bits = 8.0 * (double)kvq_encoded_bytes(&e) / (double)(rows * cols);
    kvq_encoded_free(&e);
    if (s) { fprintf(stderr, "%s: pack: %s\n", codec, err.msg); return -1; }
    return 0;
}

int main(int argc, char **argv) {
    char why[256] = "", name[256] = "";
    if (kvq_cuda_device_count(why, sizeof why) <= 0) { printf("cuda_hqx: skipped: %s\n", why); return 0; }
    kvq_cuda_device_name(name, sizeof name);
    const char *rw = getenv("KVQ_HQX_RW"); // one-token product: rows per warp (default 1)
    kvq_cuda_hqx_set_decode(rw ? atoi(rw) : 0);
    kvq_err err = {0};
    double bw = 0;
    if (kvq_cuda_copy_bandwidth((size_t)1 << 30, 20, &bw, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    printf("device: %s; copy bandwidth %.0f GB/s (1 GiB device-to-device, read+write)\n", name, bw / 1e9);
    if (argc > 1 && !strcmp(argv[1], "--copy-only")) return 0;
    const char *def[] = {"4096x4096", "1024x4096", "14336x4096", "4096x14336", "8192x8192", "16384x16384"};
    int ns = argc > 1 ? argc - 1 : 6;
    const char *codecs[] = {"hyperquant:e8:4.0", "hyperquant:e8:3.0", "rtn:4:g128"};
    // KVQ_HQX_CODECS=n: only the first n codecs; KVQ_HQX_SWEEP=1: the one-token product again
    // for each rows-per-warp choice, and without programmatic dependent launch
    const int n_codec = getenv("KVQ_HQX_CODECS") ? atoi(getenv("KVQ_HQX_CODECS")) : 3;
    const int sweep = getenv("KVQ_HQX_SWEEP") && atoi(getenv("KVQ_HQX_SWEEP"));
    const int fold = getenv("KVQ_HQX_FOLD") && atoi(getenv("KVQ_HQX_FOLD")); // time the fold (kvq_cuda_hqx_set_fold)
    printf("| shape | codec | stored bits/w | held bits/w | width | one call ms | streamed ms | streamed GB/s | "
           "of copy BW | product alone ms | of copy BW | float ms | 8 tokens ms | 16 tokens ms |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int si = 0; si < ns; si++) {
        const char *sh = argc > 1 ? argv[si + 1] : def[si];
        long long rows = 0, cols = 0;
        if (sscanf(sh, "%lldx%lld", &rows, &cols) != 2) { fprintf(stderr, "bad shape %s\n", sh); return 2; }
        float *x = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
        uint64_t s = 7;
        for (long long i = 0; i < rows * cols; i++) x[i] = (float)(0.02 * gauss(&s));
        for (int ci = 0; ci < n_codec && ci < 3; ci++) {
            kvq_hqx w;
            double sb = 0, ms = 0, mss = 0, msa = 0, msf = 0, ms8 = 0, ms16 = 0;
            if (pack_one(codecs[ci], x, rows, cols, &w, &sb)) return 1;
            // copies of the tensor, cycled by the streamed timing, so that L2 (50 MB) cannot
            // serve the weights: at least 160 MB, at most 8 copies
            kvq_cuda_hqx *t[8] = {NULL};
            if (kvq_cuda_hqx_upload(&w, &t[0], &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            const double tb = (double)kvq_cuda_hqx_bytes(t[0]);
            int nc = (int)(160e6 / tb) + 1;
            nc = nc < 2 ? 2 : nc > 8 ? 8 : nc;
            for (int k = 1; k < nc; k++)
                if (kvq_cuda_hqx_upload(&w, &t[k], &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            if (kvq_cuda_hqx_time(t[0], 50, 1, &ms, &err) || kvq_cuda_hqx_time_stream(t, nc, 100, 1, &mss, &err) ||
                kvq_cuda_hqx_time_stream(t, nc, 100, 0, &msa, &err) || kvq_cuda_hqx_time(t[0], 50, 0, &msf, &err) || kvq_cuda_hqx_time(t[0], 50, 9, &ms8, &err) ||
                kvq_cuda_hqx_time(t[0], 50, 17, &ms16, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            // bytes a product must read: the packed tensor, x (float), y written
            const double bytes = tb + 4.0 * (double)(cols + rows);
            printf("| %s | %s | %.3f | %.3f | %d (esc %.2f %%) | %.4f | %.4f | %.0f | %.0f %% | %.4f | %.0f %% | %.4f | %.4f | %.4f |\n", sh,
                   codecs[ci], sb, 8.0 * tb / (double)(rows * cols), w.vbits, 100.0 * (double)w.esc_row[w.rows] / (double)(rows * cols), ms, mss, bytes / (mss * 1e-3) / 1e9,
                   100.0 * bytes / (mss * 1e-3) / bw, msa, 100.0 * bytes / (msa * 1e-3) / bw, msf, ms8, ms16);
            for (int v = 0; sweep && v < 4; v++) { // rows a warp 1, 2, 4; the default without PDL
                const int r = v < 3 ? 1 << v : 0, pdl = v < 3;
                kvq_cuda_hqx_set_decode(r);
                kvq_cuda_hqx_set_pdl(pdl);
                if (kvq_cuda_hqx_time_stream(t, nc, 100, 1, &mss, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                printf("|   sweep %s rows/warp %d pdl %d | streamed %.4f ms | %.0f %% of copy BW |\n", sh, r, pdl, mss,
                       100.0 * bytes / (mss * 1e-3) / bw);
            }
            if (sweep) {
                kvq_cuda_hqx_set_decode(rw ? atoi(rw) : 0);
                kvq_cuda_hqx_set_pdl(1);
            }
            if (fold) { // an RMSNorm input: hqx_prep_i8h + the product against the product preparing it (KVQ_CUDA_FOLD)
                double m0 = 0, m1 = 0;
                kvq_cuda_hqx_set_fold(0);
                if (kvq_cuda_hqx_time_stream(t, nc, 100, 2, &m0, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                kvq_cuda_hqx_set_fold(1);
                const long f1 = kvq_cuda_hqx_fold_launches();
                if (kvq_cuda_hqx_time_stream(t, nc, 100, 2, &m1, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                const long f2 = kvq_cuda_hqx_fold_launches();
                kvq_cuda_hqx_set_fold(-1);
                printf("|   fold %s %s | rmsnorm: preparation + product %.4f ms | folded %.4f ms (%ld launches folded) | "
                       "%+.2f us a product |\n", sh, codecs[ci], m0, m1, f2 - f1, 1e3 * (m1 - m0));
            }
            fflush(stdout);
            for (int k = 0; k < nc; k++) kvq_cuda_hqx_free(t[k]);
            kvq_hqx_free(&w);
        }
        free(x);
    }
    return 0;
}
