// GPU benchmark of the one-token bf16 product (kernels/cuda/dense_matmul.cu): per shape and kernel
// (kvq_cuda_dense_set_variant 0..KVQ_CUDA_DENSE_VARIANTS, then cuBLAS through kvq_cuda_dense_matmul_tc), the product
// streamed — 100 back to back over copies of W that together exceed L2 (≥ 160 MB), host wall time over the 100
// after a sync, median of 5 (bench_time.h's TIME) — beside the device's copy bandwidth; and whether each kernel's
// output has variant 0's bits. What the bf16 model's products and every model's bf16 lm_head (128256×4096 on the 8B shape) run.
// usage: cuda_dense [ROWSxCOLS ...]   (default: the 8B shape's lm_head and layer products)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/ops.h"
#include "formats/dtype.h"
#include "tests/bench/bench_time.h"
#include "tests/testrng.h"

int main(int argc, char **argv) {
    char why[256] = "", name[256] = "";
    if (kvq_cuda_device_count(why, sizeof why) <= 0) { printf("cuda_dense: skipped: %s\n", why); return 0; }
    kvq_cuda_device_name(name, sizeof name);
    kvq_err err = {0};
#define CK(x) do { if ((x)) { fprintf(stderr, "cuda_dense: %s\n", err.msg); return 1; } } while (0)
    CK(kvq_cuda_stream_init(&err));
    double bw = 0;
    CK(kvq_cuda_copy_bandwidth((size_t)1 << 30, 20, &bw, &err));
    printf("device: %s; copy bandwidth %.0f GB/s (1 GiB device-to-device, read+write)\n", name, bw / 1e9);
    const char *def[] = {"128256x4096", "4096x4096", "6144x4096", "28672x4096", "4096x14336"};
    const int ns = argc > 1 ? argc - 1 : 5;
    const int tc = kvq_cuda_tc_available(NULL, 0);
    printf("| shape | kernel | streamed ms | GB/s | of copy BW | × variant 0 | bits |\n|---|---|---|---|---|---|---|\n");
    for (int si = 0; si < ns; si++) {
        const char *sh = argc > 1 ? argv[si + 1] : def[si];
        long long rows = 0, cols = 0;
        if (sscanf(sh, "%lldx%lld", &rows, &cols) != 2 || rows <= 0 || cols <= 0 || cols % 8 || rows > (1LL << 31) ||
            cols > (1LL << 31) || rows * cols > (1LL << 36)) {
            fprintf(stderr, "cuda_dense: bad shape %s (ROWSxCOLS, COLS a multiple of 8, at most 2^36 weights)\n", sh);
            return 2;
        }
        const size_t n = (size_t)rows * (size_t)cols, wbytes = 2 * n;
        int nc = (int)(160e6 / (double)wbytes) + 1;
        nc = nc < 2 ? 2 : nc > 8 ? 8 : nc;
        uint16_t *hw = malloc(wbytes);
        float *hx = malloc(sizeof(float) * (size_t)cols), *y0 = malloc(sizeof(float) * (size_t)rows),
              *y1 = malloc(sizeof(float) * (size_t)rows), *tmp = malloc(sizeof(float) * 65536);
        if (!hw || !hx || !y0 || !y1 || !tmp) {
            fprintf(stderr, "cuda_dense: %s: out of host memory\n", sh);
            return 2;
        }
        uint64_t s = 11;
        for (size_t i = 0; i < n; i += 65536) {
            const size_t m = n - i < 65536 ? n - i : 65536;
            for (size_t j = 0; j < m; j++) tmp[j] = (float)(0.02 * gauss(&s));
            kvq_dtype_from_f32(KVQ_DTYPE_BF16, tmp, m, hw + i);
        }
        for (long long i = 0; i < cols; i++) hx[i] = (float)gauss(&s);
        void *dw[8] = {NULL};
        float *dx = NULL, *dy = NULL;
        for (int k = 0; k < nc; k++) {
            CK(kvq_cuda_malloc(&dw[k], wbytes, &err));
            CK(kvq_cuda_copy(dw[k], hw, wbytes, 1, &err));
        }
        CK(kvq_cuda_malloc((void **)&dx, sizeof(float) * (size_t)cols, &err));
        CK(kvq_cuda_malloc((void **)&dy, sizeof(float) * (size_t)rows, &err));
        CK(kvq_cuda_copy(dx, hx, sizeof(float) * (size_t)cols, 1, &err));
        double base = 0;
        for (int v = 0; v <= KVQ_CUDA_DENSE_VARIANTS + 1; v++) {
            const int blas = v > KVQ_CUDA_DENSE_VARIANTS;
            if (blas && !tc) break;
            kvq_cuda_dense_set_variant(blas ? 0 : v);
#define PROD(k) (blas ? kvq_cuda_dense_matmul_tc(dw[k], dx, dy, 1, cols, rows, rows, 0, &err) \
                      : kvq_cuda_dense_matmul(dw[k], 1, dx, dy, 1, cols, rows, 0, &err))
            CK(PROD(0));
            CK(kvq_cuda_sync(&err));
            CK(kvq_cuda_copy(v ? y1 : y0, dy, sizeof(float) * (size_t)rows, 0, &err));
            long long diff = 0;
            for (long long i = 0; v && i < rows; i++) diff += y1[i] != y0[i];
            double med = 0; // the device is idle here (synchronized above and after each rep)
            TIME(med, 5, {
                for (int i = 0; i < 100; i++) CK(PROD(i % nc));
                CK(kvq_cuda_sync(&err));
            });
            const double ms = med / 100 * 1e3, bytes = (double)wbytes + 4.0 * (double)(cols + rows);
            if (!v) base = ms;
            char kn[32];
            snprintf(kn, sizeof kn, blas ? "cuBLAS (x in bf16)" : "variant %d", v);
            printf("| %s | %s | %.4f | %.0f | %.0f %% | %.3f | %s |\n", sh, kn, ms, bytes / (ms * 1e-3) / 1e9,
                   100.0 * bytes / (ms * 1e-3) / bw, base / ms,
                   !v ? "reference" : blas ? "(x rounded)" : diff ? "DIFFER" : "same");
            if (diff && !blas) printf("cuda_dense: variant %d: %lld of %lld rows not variant 0's bits\n", v, diff, rows);
            fflush(stdout);
#undef PROD
        }
        kvq_cuda_dense_set_variant(-1);
        for (int k = 0; k < nc; k++) kvq_cuda_free(dw[k]);
        kvq_cuda_free(dx);
        kvq_cuda_free(dy);
        free(hw); free(hx); free(y0); free(y1); free(tmp);
    }
    return 0;
}
