// GPU benchmark of PQ and QET products from the pqx execution layout (kernels/cuda/pqx.cu)
// beside the dense bf16 product in the same run. Per shape, layouts with the k, index widths
// and codebook types the codec picks for `pq:4` and `qet:4` on a bf16 source (kvq_qet_solve's
// plan; values random: the time depends on shapes and types only), lane-packed as the loader
// packs them; the dense bf16 matrix random. Times: one call (CUDA events, median of 50, launch
// latency included) and streamed (reps back to back over copies that together exceed L2, host
// clock around the queue, mean), for 1 and 8 tokens; the dense product (dense_matmul.cu, the
// runtime's one-token kernel) and cuBLAS (gemm_tc.cu, where it loads) streamed the same way;
// plus GPU bytes of each layout. QET rows: `qet:4` the expanded kernel (KVQ_CUDA_QET=expand: codebooks expanded once a
// call into the table scratch, kernels/cuda/pqx.cu), `qet:4d` the same layout under the per-weight
// decode (KVQ_CUDA_QET=decode), `qet:4s` the shared-memory tables (the default, KVQ_CUDA_QET=smem), `qet:4s2`
// their second form (the same bits, built for latency: KVQ_CUDA_QET=smem2); the bench sets the variable itself.
// usage: cuda_pq [--plan] [ROWSxCOLS ...]   (default: 4096x4096 14336x4096; --plan: print the
// layouts and their host bytes only, no device needed)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pqx.h"
#include "libconv/codec/qet/qet.h"
#include "tests/pqx_rand.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The layout pq:4 / qet:4 gives an n x d bf16 matrix (random values, the plan's k and types).
static int make_layout(const char *spec, int64_t n, int64_t d, kvq_pqx *p, uint64_t *seed) {
    const int pq = !strncmp(spec, "pq:", 3);
    kvq_qet_config cfg;
    kvq_qet_plan plan;
    kvq_err err = {0};
    if (kvq_qet_parse(spec + (pq ? 3 : 4), pq, &cfg, &err) || kvq_qet_solve(&cfg, KVQ_DTYPE_BF16, n, d, 512, &plan, &err)) {
        fprintf(stderr, "%s: %s\n", spec, err.msg);
        return -1;
    }
    const int cb = cfg.cb_bits;
    if (pq) {
        rand_pqx(p, n, d, cfg.width, plan.stages, plan.k, cb > 16 ? KVQ_PQX_CB_F32 : cb ? KVQ_PQX_CB_CQO : KVQ_PQX_CB_BF16, 0, seed);
        if (kvq_pqx_pack_lanes(p, 0)) return -1;
    } else rand_qetx(p, n, d, plan.stages, plan.k, cb ? KVQ_PQX_CB_CQO : KVQ_PQX_CB_BF16, cb, seed);
    char ks[64], bs[32];
    if (plan.stages > 1) {
        snprintf(ks, sizeof ks, "%lld,%lld", (long long)plan.k[0], (long long)plan.k[1]);
        snprintf(bs, sizeof bs, "%d,%d", kvq_pqx_idx_bits(p, 0), kvq_pqx_idx_bits(p, 1));
    } else {
        snprintf(ks, sizeof ks, "%lld", (long long)plan.k[0]);
        snprintf(bs, sizeof bs, "%d", kvq_pqx_idx_bits(p, 0));
    }
    printf("  %-6s %6lld x %-6lld stages %d k %s, index bits %s, codebooks %s, stored %.2f bits/weight\n", spec,
           (long long)n, (long long)d, plan.stages, ks, bs,
           p->cb_type == KVQ_PQX_CB_CQO ? "CQO" : p->cb_type == KVQ_PQX_CB_BF16 ? "bf16" : "f32",
           (double)plan.total_bits / (double)(n * d));
    return 0;
}

int main(int argc, char **argv) {
    char why[256] = "", name[256] = "";
    if (argc > 1 && !strcmp(argv[1], "--plan")) {
        const char *def[] = {"4096x4096", "14336x4096"};
        uint64_t seed = 7;
        for (int i = 0; i < (argc > 2 ? argc - 2 : 2); i++) {
            long long n, d;
            if (sscanf(argc > 2 ? argv[i + 2] : def[i], "%lldx%lld", &n, &d) != 2 || n < 8 || d < 64 || d % 64) {
                fprintf(stderr, "cuda_pq: bad shape (ROWSxCOLS, cols a multiple of 64)\n");
                return 2;
            }
            for (int k = 0; k < 2; k++) {
                kvq_pqx p;
                if (make_layout(k ? "qet:4" : "pq:4", n, d, &p, &seed)) return 1;
                printf("         held %.1f MB (%.3f x bf16)\n", kvq_pqx_bytes(&p) / 1e6, kvq_pqx_bytes(&p) / (2.0 * n * d));
                kvq_pqx_free(&p);
            }
        }
        return 0;
    }
    if (kvq_cuda_device_count(why, sizeof why) <= 0) {
        printf("cuda_pq: skipped: %s\n", why);
        return 0;
    }
    kvq_err err = {0};
    if (kvq_cuda_stream_init(&err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    kvq_cuda_device_name(name, sizeof name);
    double bw = 0;
    if (kvq_cuda_copy_bandwidth((size_t)1 << 30, 20, &bw, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    printf("cuda_pq: %s, copy bandwidth %.0f GB/s\n", name, bw / 1e9);
    const char *def[] = {"4096x4096", "14336x4096"};
    const int ns = argc > 1 ? argc - 1 : 2;
    uint64_t seed = 7;
    enum { NC_MAX = 16, REPS = 100 };
    for (int si = 0; si < ns; si++) {
        long long n, d;
        if (sscanf(argc > 1 ? argv[si + 1] : def[si], "%lldx%lld", &n, &d) != 2 || n < 8 || d < 64 || d % 64) {
            fprintf(stderr, "cuda_pq: bad shape '%s' (ROWSxCOLS, cols a multiple of 64)\n", argv[si + 1]);
            return 2;
        }
        // copies of the weights that together exceed 2 x 50 MB of L2
        const size_t dense_bytes = (size_t)(n * d) * 2;
        const int nc = (int)(100e6 / dense_bytes) + 2 > NC_MAX ? NC_MAX : (int)(100e6 / dense_bytes) + 2;
        float *x = randvec(8 * d, &seed);
        void *dx = NULL, *dy = NULL, *dw[NC_MAX] = {0};
        double dense_ms[2] = {0, 0}; // streamed, 1 and 8 tokens
        if (kvq_cuda_malloc(&dx, sizeof(float) * 8 * (size_t)d, &err) || kvq_cuda_malloc(&dy, sizeof(float) * 8 * (size_t)n, &err) ||
            kvq_cuda_copy(dx, x, sizeof(float) * 8 * (size_t)d, 1, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        { // dense bf16
            uint16_t *h = malloc(dense_bytes);
            for (size_t i = 0; i < (size_t)(n * d); i++) h[i] = kvq_f32_to_bf16((float)(0.02 * gauss(&seed)));
            for (int c = 0; c < nc; c++)
                if (kvq_cuda_malloc(&dw[c], dense_bytes, &err) || kvq_cuda_copy(dw[c], h, dense_bytes, 1, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
            free(h);
            for (int T = 1; T <= 8; T += 7) {
                for (int r = 0; r < 10; r++) kvq_cuda_dense_matmul(dw[r % nc], 1, dx, dy, T, d, n, 0, &err);
                kvq_cuda_sync(&err);
                const double t0 = now_s();
                for (int r = 0; r < REPS; r++) kvq_cuda_dense_matmul(dw[r % nc], 1, dx, dy, T, d, n, 0, &err);
                if (kvq_cuda_sync(&err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                const double ms = 1e3 * (now_s() - t0) / REPS;
                dense_ms[T == 1 ? 0 : 1] = ms;
                printf("%6lld x %-6lld bf16   T=%d streamed %.4f ms (%d copies; %.0f GB/s of weights read, %.0f %% of copy bandwidth)   weights %.1f MB\n",
                       n, d, T, ms, nc, dense_bytes / ms / 1e6, 100.0 * dense_bytes / (ms * 1e-3) / bw, dense_bytes / 1e6);
            }
            if (kvq_cuda_tc_available(NULL, 0)) { // cuBLAS (bf16 operands: x rounded to bf16), one token
                for (int r = 0; r < 10; r++) kvq_cuda_dense_matmul_tc(dw[r % nc], dx, dy, 1, d, n, n, 0, &err);
                kvq_cuda_sync(&err);
                const double t0 = now_s();
                for (int r = 0; r < REPS; r++) kvq_cuda_dense_matmul_tc(dw[r % nc], dx, dy, 1, d, n, n, 0, &err);
                if (kvq_cuda_sync(&err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                const double ms = 1e3 * (now_s() - t0) / REPS;
                printf("%6lld x %-6lld bf16 cuBLAS T=1 streamed %.4f ms (%.0f %% of copy bandwidth)\n", n, d, ms,
                       100.0 * dense_bytes / (ms * 1e-3) / bw);
            }
            for (int c = 0; c < nc; c++) kvq_cuda_free(dw[c]);
        }
        // qet:4 four times: the expanded-codebook kernel (KVQ_CUDA_QET=expand), the per-weight decode
        // (KVQ_CUDA_QET=decode), the shared-memory tables (KVQ_CUDA_QET=smem, the default) and their second
        // form (KVQ_CUDA_QET=smem2), same layout values (same seed)
        const char *specs[] = {"pq:4", "qet:4", "qet:4", "qet:4", "qet:4"}, *label[] = {"pq:4", "qet:4", "qet:4d", "qet:4s", "qet:4s2"};
        static const char *qenv[] = {"", "expand", "decode", "smem", "smem2"};
        uint64_t qseed = 0;
        for (int k = 0; k < 5; k++) {
            kvq_pqx p;
            if (k == 1) qseed = seed;
            if (k >= 2) seed = qseed;
            if (make_layout(specs[k], n, d, &p, &seed)) return 1;
            if (k >= 1) setenv("KVQ_CUDA_QET", qenv[k], 1);
            else unsetenv("KVQ_CUDA_QET");
            kvq_cuda_pqx *t[NC_MAX] = {0};
            size_t need = 0;
            // copies of the layout that together exceed 2 x 50 MB of L2, as for the dense matrix
            const double held = (double)kvq_pqx_bytes(&p);
            const int ncq = (int)(100e6 / held) + 2 > NC_MAX ? NC_MAX : (int)(100e6 / held) + 2;
            for (int c = 0; c < ncq; c++) {
                if (kvq_cuda_pqx_upload(&p, &t[c], &err)) { fprintf(stderr, "%s: %s\n", label[k], err.msg); return 1; }
                need = kvq_cuda_pqx_scratch_bytes(t[c]);
            }
            void *sc = NULL;
            if (need && kvq_cuda_malloc(&sc, need, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            const double gb = (double)kvq_cuda_pqx_bytes(t[0]);
            if (k >= 3 && kvq_cuda_pqx_qet_kernel(t[0]) != k - 1)
                printf("%6lld x %-6lld %s: KVQ_CUDA_QET=%s fell back to kernel %d (tables not held as 16-bit words, or a step smem2 cannot take)\n",
                       n, d, label[k], qenv[k], kvq_cuda_pqx_qet_kernel(t[0]));
            for (int T = 1; T <= 8; T += 7) {
                double one = 0;
                if (kvq_cuda_pqx_time(t[0], T, 50, &one, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                const int64_t r0 = 0;
                for (int r = 0; r < 10; r++) kvq_cuda_pqx_matmul(&t[r % ncq], 1, &r0, dx, T, dy, n, 0, sc, &err);
                kvq_cuda_sync(&err);
                const double t0 = now_s();
                for (int r = 0; r < REPS; r++) kvq_cuda_pqx_matmul(&t[r % ncq], 1, &r0, dx, T, dy, n, 0, sc, &err);
                if (kvq_cuda_sync(&err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                const double ms = 1e3 * (now_s() - t0) / REPS;
                printf("%6lld x %-6lld %-6s T=%d streamed %.4f ms (%d copies; layout read at %.0f %% of copy bandwidth), one call "
                       "%.4f ms, %.2fx the bf16 time   GPU layout %.1f MB (%.3f x bf16), table scratch %.1f MB\n", n, d, label[k], T,
                       ms, ncq, 100.0 * gb / (ms * 1e-3) / bw, one, ms / dense_ms[T == 1 ? 0 : 1], gb / 1e6, gb / dense_bytes, need / 1e6);
            }
            for (int c = 0; c < ncq; c++) kvq_cuda_pqx_free(t[c]);
            kvq_cuda_free(sc);
            kvq_pqx_free(&p);
        }
        kvq_cuda_free(dx);
        kvq_cuda_free(dy);
        free(x);
    }
    return 0;
}
