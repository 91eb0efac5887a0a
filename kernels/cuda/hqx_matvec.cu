// y = W·x from the hqx execution layout on the GPU (see hqx.h, kernels/hq_layout.h).
// Rotation: one block per tile column, T threads, the CPU's butterfly order (stride 1, 2,
// 4, ...) so xr equals kvq_hqx_prep's floats. Product: one warp per row; per step the warp
// covers 512 coordinates (8 chunks of 64): lane l takes chunk l/4 and the 8 low-nibble and 8
// high-nibble coordinates at byte offset 8·(l%4), so a step reads 256 contiguous bytes of
// nibbles (plus the chunks' bit-plane words and coset bytes). Float accumulation.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/hqx.h"
#include "kernels/cuda/hqx_dev.cuh"

// ---- rotation: xr = g ⊙ H_T·(d_j ⊙ x_j) per tile column (rotate), or xr = x and the tile
// sums xs (RTN zero points)
__global__ void hqx_rotate(Dev d, const float *__restrict__ x, float *__restrict__ xr, float *__restrict__ xs) {
    extern __shared__ float s[];
    const int j = blockIdx.x, i = threadIdx.x, T = d.T;
    const int64_t col = (int64_t)j * T + i;
    float v = col < d.cols ? x[col] : 0.0f;
    if (d.rotate) {
        v = kvq_hqx_rotate_coord(d, j, i, v, s);
        xr[col] = v;
    } else {
        xr[col] = v;
        s[i] = v;
        __syncthreads();
        if (i == 0) { // the CPU's order: a plain left-to-right sum
            float t = 0.0f;
            for (int k = 0; k < T; k++) t = __fadd_rn(t, s[k]);
            xs[j] = t;
        }
    }
}


// ---- product: one warp per row
__global__ void __launch_bounds__(128) hqx_gemv(Dev d, float *__restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= d.rows) return;
    const int64_t cpr = d.cols_p / 64, tpr = d.cols_p / d.T; // chunks, tiles per row
    const int ch8 = lane >> 2, b0 = 8 * (lane & 3);
    float acc = 0.0f;
#pragma unroll 2
    for (int64_t c0 = 0; c0 < cpr; c0 += 8) {
        const int64_t cr = c0 + ch8;
        if (cr >= cpr) continue;
        const int64_t g = row * cpr + cr;
        uint8_t by[8], hi8[8];
        if (d.vbits == 8) {
            const uint2 lo = __ldg((const uint2 *)(d.q + g * 64 + b0)), hi = __ldg((const uint2 *)(d.q + g * 64 + 32 + b0));
            memcpy(by, &lo, 8);
            memcpy(hi8, &hi, 8);
        } else {
            const uint2 nb = __ldg((const uint2 *)(d.q + g * 32 + b0));
            uint8_t raw[8];
            memcpy(raw, &nb, 8);
#pragma unroll
            for (int k = 0; k < 8; k++) { by[k] = raw[k] & 15; hi8[k] = raw[k] >> 4; }
            for (int p = 0; p < d.np; p++) {
                const uint64_t wd = kvq_hqx_hb_std(__ldg(d.hb + g * d.np + p));
                const uint32_t bl = (uint32_t)(wd >> b0) & 0xff, bh = (uint32_t)(wd >> (b0 + 32)) & 0xff;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    by[k] |= (uint8_t)(((bl >> k) & 1) << (4 + p));
                    hi8[k] |= (uint8_t)(((bh >> k) & 1) << (4 + p));
                }
            }
        }
        int cbl = 0, cbh = 0;
        if (d.e8) {
            const uint32_t cbb = __ldg(d.cb + g);
            cbl = (cbb >> (b0 / 8)) & 1;
            cbh = (cbb >> (4 + b0 / 8)) & 1;
        }
        const float *xl = d.xr + cr * 64 + b0, *xh = xl + 32;
        const float4 xa = __ldg((const float4 *)xl), xb = __ldg((const float4 *)(xl + 4));
        const float4 xc = __ldg((const float4 *)xh), xd = __ldg((const float4 *)(xh + 4));
        const float xv[16] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w,
                              xc.x, xc.y, xc.z, xc.w, xd.x, xd.y, xd.z, xd.w};
        float part = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            part = fmaf((float)(d.m * ((int)by[k] - d.off) + cbl), xv[k], part);
            part = fmaf((float)(d.m * ((int)hi8[k] - d.off) + cbh), xv[8 + k], part);
        }
        const int64_t jt = (cr * 64) / d.T, t = row * tpr + jt;
        acc = fmaf(kvq_hqx_tile_scale(d, t), part, acc);
        if (d.zero && b0 == 0 && (cr * 64) % d.T == 0) acc = fmaf(d.zero[t], d.xs[jt], acc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        for (uint32_t e = d.esc_row[row]; e < d.esc_row[row + 1]; e++) {
            const uint32_t en = kvq_hqx_esc_at(d, row, e), col = kvq_hqx_esc_col(en);
            acc = fmaf(kvq_hqx_tile_scale(d, row * tpr + col / d.T), (float)(d.m * kvq_hqx_esc_delta(en)) * d.xr[col], acc);
        }
        y[row] = acc;
    }
}

// ---- host side

// Plane words from coordinate order to the GPU's (kvq_hqx_hb_gpu), in place, once at upload.
__global__ void hqx_hb_to_gpu(uint64_t *hb, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) hb[i] = kvq_hqx_hb_gpu(hb[i]);
}

template <typename T> static kvq_status up(T **dst, const T *src, size_t n, size_t *bytes, kvq_err *err) {
    *dst = NULL;
    if (!src || !n) return KVQ_OK;
    CU_TRY(cudaMalloc((void **)dst, n * sizeof(T)));
    CU_TRY(cudaMemcpy(*dst, src, n * sizeof(T), cudaMemcpyHostToDevice));
    *bytes += n * sizeof(T);
    return KVQ_OK;
}

// KVQ_CUDA_ESC16: the escapes' form on the device. 0 (the default) the packer's 32-bit entries; 1 16 bits where
// kvq_hqx_esc16_build takes the tensor — 5.3 % fewer bytes at width 4 on the 8B shape (5273.7 -> 4994.1 MB; lm_head
// packed 4540.9 -> 4240.2 MB, 0.2825x bf16) but 0.83-0.86x the decode speed (H100, session 20 calls C and E, same
// text); 2 (session 21) 16 bits only where a row is one segment (cols_p <= KVQ_HQX_ESC16_SEG: no segment starts to
// read; on Llama shapes every product but the FFN's down), the 32-bit entries elsewhere. Read as the backend checks
// it (backend_cuda.c, env_count 0..2): a decimal number, anything else 0.
static int g_esc16 = -1;
extern "C" void kvq_cuda_hqx_set_esc16(int mode) {
    if (mode < 0) {
        const char *e = getenv("KVQ_CUDA_ESC16");
        char *end = NULL;
        const long v = e && *e ? strtol(e, &end, 10) : 0;
        mode = e && *e && !*end && v >= 0 && v <= 2 ? (int)v : 0;
    }
    g_esc16 = mode > 2 ? 1 : mode;
}
extern "C" int kvq_cuda_hqx_esc16(const kvq_cuda_hqx *t) { return t && t->esc16; }

extern "C" kvq_status kvq_cuda_hqx_upload(const kvq_hqx *w, kvq_cuda_hqx **out, kvq_err *err) {
    *out = NULL;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: no device");
    if (w->tile % 64 || w->tile > 1024 || w->cols_p % w->tile)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: hqx tile %d not supported", w->tile);
    kvq_cuda_hqx *t = (kvq_cuda_hqx *)calloc(1, sizeof *t);
    if (!t) return kvq_err_set(err, KVQ_ERR_NOMEM, "cuda: out of memory");
    t->h = *w;
    const size_t n = (size_t)(w->rows * w->cols_p), tiles = n / (size_t)w->tile;
    const int np = kvq_hqx_planes(w->vbits);
    kvq_status s = KVQ_OK;
    size_t b = 0;
    if (!s) s = up(&t->q, w->q, w->vbits == 8 ? n : n / 2, &b, err);
    if (!s) s = up(&t->hb, w->hb, n / 64 * (size_t)np, &b, err);
    if (!s && t->hb) {
        const size_t nw = n / 64 * (size_t)np;
        hqx_hb_to_gpu<<<(unsigned)((nw + 255) / 256), 256>>>(t->hb, nw);
        const cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) s = cu_fail(err, e, "hqx_hb_to_gpu");
    }
    if (!s) s = up(&t->cb, w->cb, w->cb ? n / 64 : 0, &b, err);
    if (!s) s = up(&t->scode, w->scode, w->scode ? tiles : 0, &b, err);
    if (!s) s = up(&t->lut, w->scode ? w->lut : NULL, 256, &b, err);
    if (!s) s = up(&t->scale, w->scale, w->scale ? tiles : 0, &b, err);
    if (!s) s = up(&t->zero, w->zero, w->zero ? tiles : 0, &b, err);
    if (!s) s = up(&t->esc_row, w->esc_row, (size_t)w->rows + 1, &b, err);
    // the escapes in 16 bits where kvq_hqx_esc16_build takes the tensor, else the packer's entries
    if (g_esc16 < 0) kvq_cuda_hqx_set_esc16(-1);
    kvq_hqx_esc16 x = {0};
    if (!s && (g_esc16 == 1 || (g_esc16 == 2 && w->cols_p <= KVQ_HQX_ESC16_SEG))) s = kvq_hqx_esc16_build(w, &x, err);
    if (!s && x.used) {
        s = up(&t->esc16, x.e16, (size_t)x.n, &b, err);
        if (!s) s = up(&t->esc_seg, x.seg, (size_t)x.rows * (size_t)x.s1, &b, err);
        if (!s) s = up(&t->esc_big, x.big, 2 * (size_t)x.n_big, &b, err);
        t->esc_s1 = x.s1;
        t->esc_nbig = (uint32_t)x.n_big;
    } else if (!s) s = up(&t->esc, w->esc, w->esc_row[w->rows], &b, err);
    kvq_hqx_esc16_free(&x);
    t->bytes = b;
    if (!s) {
        cudaError_t e = cudaMalloc((void **)&t->xr, sizeof(float) * (size_t)w->cols_p);
        if (e == cudaSuccess) e = cudaMalloc((void **)&t->xs, sizeof(float) * (size_t)(w->cols_p / w->tile));
        if (e == cudaSuccess) e = cudaMalloc((void **)&t->fs, kvq_cuda_hqx_fused_scratch(w->cols_p, w->tile));
        if (e != cudaSuccess) s = cu_fail(err, e, "cudaMalloc(scratch)");
    }
    if (s) { kvq_cuda_hqx_free(t); return s; }
    *out = t;
    return KVQ_OK;
}

extern "C" void kvq_cuda_hqx_free(kvq_cuda_hqx *t) {
    if (!t) return;
    void *p[] = {t->q,   t->hb,    t->cb,      t->scode,   t->lut,     t->scale, t->zero,
                 t->esc_row, t->esc, t->esc16, t->esc_seg, t->esc_big, t->xr, t->xs, t->fs};
    for (void *x : p)
        if (x) cudaFree(x);
    free(t);
}

extern "C" size_t kvq_cuda_hqx_bytes(const kvq_cuda_hqx *t) { return t ? t->bytes : 0; }

extern "C" kvq_status kvq_cuda_hqx_matvec(kvq_cuda_hqx *t, const float *d_x, float *d_y, int int8, kvq_err *err) {
    if (int8) return kvq_cuda_hqx_matmul(t, d_x, 1, d_y, t->h.rows, 0, err); // hqx_gemv1.cu
    Dev d = dev_of(t);
    const int T = t->h.tile;
    hqx_rotate<<<(unsigned)(t->h.cols_p / T), T, sizeof(float) * T, kvq_cuda_stream()>>>(d, d_x, t->xr, t->xs);
    CU_LAUNCHED("hqx_rotate");
    hqx_gemv<<<(unsigned)((t->h.rows + 3) / 4), 128, 0, kvq_cuda_stream()>>>(d, d_y);
    CU_LAUNCHED("hqx_gemv");
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hqx_matvec_host(kvq_cuda_hqx *t, const float *h_x, float *h_y, int int8, kvq_err *err) {
    float *dx = NULL, *dy = NULL;
    kvq_status s = KVQ_OK;
    cudaError_t e = cudaMalloc((void **)&dx, sizeof(float) * (size_t)t->h.cols);
    if (e == cudaSuccess) e = cudaMalloc((void **)&dy, sizeof(float) * (size_t)t->h.rows);
    if (e == cudaSuccess) e = cudaMemcpy(dx, h_x, sizeof(float) * (size_t)t->h.cols, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) s = cu_fail(err, e, "matvec_host setup");
    if (!s) s = kvq_cuda_hqx_matvec(t, dx, dy, int8, err);
    if (!s) {
        e = cudaMemcpy(h_y, dy, sizeof(float) * (size_t)t->h.rows, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) s = cu_fail(err, e, "matvec_host copy back");
    }
    if (dx) cudaFree(dx);
    if (dy) cudaFree(dy);
    return s;
}

// n seeded pseudo-random activations in [-1, 1] copied to dx (device), for the timings.
static kvq_status upload_random(float *dx, size_t n, kvq_err *err) {
    std::vector<float> hx(n);
    uint64_t z = 12345;
    for (auto &v : hx) { z = z * 6364136223846793005ull + 1442695040888963407ull; v = (float)((int64_t)(z >> 33) % 2001 - 1000) / 1000.0f; }
    CU_TRY(cudaMemcpy(dx, hx.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hqx_time(kvq_cuda_hqx *t, int reps, int int8, double *ms, kvq_err *err) {
    float *dx = NULL, *dy = NULL;
    const int nt = int8 >= 2 ? int8 - 1 : 1; // the batched product's tokens
    CU_TRY(cudaMalloc((void **)&dx, sizeof(float) * (size_t)t->h.cols * nt));
    CU_TRY(cudaMalloc((void **)&dy, sizeof(float) * (size_t)t->h.rows * nt));
    { // random activations (zeros would skip nothing here, but keep the timing honest)
        kvq_status r = upload_random(dx, (size_t)t->h.cols * nt, err);
        if (r) return r;
    }
    cudaEvent_t a, b;
    CU_TRY(cudaEventCreate(&a));
    CU_TRY(cudaEventCreate(&b));
    std::vector<float> tv;
    kvq_status s = KVQ_OK;
    for (int r = 0; r < reps + 3 && !s; r++) {
        cudaEventRecord(a);
        s = int8 >= 2 ? kvq_cuda_hqx_matmul(t, dx, nt, dy, t->h.rows, 0, err) : kvq_cuda_hqx_matvec(t, dx, dy, int8, err);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float f = 0.0f;
        cudaEventElapsedTime(&f, a, b);
        if (r >= 3) tv.push_back(f); // warm-up first
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(dx);
    cudaFree(dy);
    if (s) return s;
    std::sort(tv.begin(), tv.end());
    *ms = tv.empty() ? 0.0 : tv[tv.size() / 2];
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hqx_time_stream(kvq_cuda_hqx *const *t, int n, int reps, int prep, double *ms,
                                               kvq_err *err) {
    float *dx = NULL, *dy = NULL, *dw = NULL;
    int64_t cols = t[0]->h.cols, rows = 0;
    for (int i = 0; i < n; i++) {
        if (t[i]->h.cols != cols) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: time_stream: tensors differ in columns");
        rows = t[i]->h.rows > rows ? t[i]->h.rows : rows;
    }
    CU_TRY(cudaMalloc((void **)&dx, sizeof(float) * (size_t)cols));
    CU_TRY(cudaMalloc((void **)&dy, sizeof(float) * (size_t)rows));
    CU_TRY(cudaMalloc((void **)&dw, sizeof(float) * (size_t)cols));
    {
        kvq_status r = upload_random(dx, (size_t)cols, err);
        if (!r) r = upload_random(dw, (size_t)cols, err); // prep 2: the norm's weights
        if (r) return r;
    }
    // prep 2: the input is RMSNorm'd on the way in (a decode step's q/k/v and gate/up products:
    // the preparation kernel's RMSNorm, or the fold's, kvq_cuda_hqx_set_fold)
    const kvq_cuda_xin xin = {prep == 2 ? KVQ_CUDA_XIN_RMSNORM : KVQ_CUDA_XIN_NONE, dw, 1e-5f, NULL};
    const int64_t r0 = 0;
    auto one = [&](kvq_cuda_hqx *u) { return kvq_cuda_hqx_matmul_parts_in(&u, 1, &r0, dx, &xin, 1, dy, rows, 0, err); };
    cudaEvent_t a, b;
    CU_TRY(cudaEventCreate(&a));
    CU_TRY(cudaEventCreate(&b));
    std::vector<float> tv;
    kvq_status s = KVQ_OK;
    for (int i = 0; i < 2 * n && !s; i++) s = one(t[i % n]); // warm-up
    kvq_cuda_hqx_skip_prep(!prep);
    for (int k = 0; k < 5 && !s; k++) {
        cudaEventRecord(a, kvq_cuda_stream());
        for (int r = 0; r < reps && !s; r++) s = one(t[r % n]);
        cudaEventRecord(b, kvq_cuda_stream());
        cudaEventSynchronize(b);
        float f = 0.0f;
        cudaEventElapsedTime(&f, a, b);
        tv.push_back(f / (float)reps);
    }
    kvq_cuda_hqx_skip_prep(0);
    cudaError_t e = cudaGetLastError();
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dw);
    if (s) return s;
    if (e != cudaSuccess) return cu_fail(err, e, "time_stream");
    std::sort(tv.begin(), tv.end());
    *ms = tv[tv.size() / 2];
    return KVQ_OK;
}
