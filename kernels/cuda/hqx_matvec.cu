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

// int8 activations as the CPU's kvq_hqx_prep makes them: per tile amax, sx = amax/127,
// xq = rint(xr·(127/amax)) clamped to ±127, and the sums of each 8-vector (s8).
__device__ void quantize(float v, int i, int T, int j, int64_t col, int8_t *xq, float *sx, int32_t *s8, float *s,
                         float *red) {
    float a = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if ((i & 31) == 0) red[i >> 5] = a;
    __syncthreads();
    float amax = 0.0f;
    for (int w = 0; w < T / 32; w++) amax = fmaxf(amax, red[w]);
    const bool ok = amax > 0.0f && isfinite(amax);
    const float inv = ok ? __fdiv_rn(127.0f, amax) : 0.0f;
    if (i == 0) sx[j] = ok ? __fdiv_rn(amax, 127.0f) : 0.0f;
    const float f = __fmul_rn(v, inv);
    const int q = f >= 127.0f ? 127 : f <= -127.0f ? -127 : (f == f ? __float2int_rn(f) : 0);
    xq[col] = (int8_t)q;
    __syncthreads();
    s[i] = (float)q;
    __syncthreads();
    if ((i & 7) == 0) {
        int t = 0;
        for (int k = 0; k < 8; k++) t += (int)s[i + k];
        s8[col / 8] = t;
    }
}

// ---- rotation: xr = g ⊙ H_T·(d_j ⊙ x_j) per tile column (rotate), or xr = x and the tile
// sums xs (RTN zero points)
__global__ void hqx_rotate(Dev d, const float *__restrict__ x, float *__restrict__ xr, float *__restrict__ xs,
                           int8_t *__restrict__ xq, float *__restrict__ sx, int32_t *__restrict__ s8) {
    extern __shared__ float s[];
    __shared__ float red[32];
    const int j = blockIdx.x, i = threadIdx.x, T = d.T;
    const int64_t col = (int64_t)j * T + i;
    float v = col < d.cols ? x[col] : 0.0f;
    if (d.rotate) {
        uint64_t bits = kvq_hq_sign_word(d.seed, (uint64_t)j, (uint64_t)(i / 64));
        if ((bits >> (i % 64)) & 1) v = -v;
        s[i] = v;
        __syncthreads();
        for (int h = 1; h < T; h <<= 1) {
            float a = 0.0f, b = 0.0f;
            const bool top = (i & h) == 0;
            if (top) { a = s[i]; b = s[i + h]; }
            __syncthreads();
            if (top) { s[i] = __fadd_rn(a, b); s[i + h] = __fsub_rn(a, b); }
            __syncthreads();
        }
        v = s[i];
        if (d.a2 && !(i & 1)) v = __fmul_rn(v, KVQ_HQ_SQRT3_F);
        xr[col] = v;
        if (xq) quantize(v, i, T, j, col, xq, sx, s8, s, red);
    } else {
        xr[col] = v;
        s[i] = v;
        __syncthreads();
        if (i == 0) { // the CPU's order: a plain left-to-right sum
            float t = 0.0f;
            for (int k = 0; k < T; k++) t = __fadd_rn(t, s[k]);
            xs[j] = t;
        }
        if (xq) {
            __syncthreads();
            quantize(v, i, T, j, col, xq, sx, s8, s, red);
        }
    }
}

__device__ __forceinline__ float tile_scale(const Dev &d, int64_t t) {
    return d.scode ? d.lut[d.scode[t]] : d.scale[t];
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
                const uint64_t wd = __ldg(d.hb + g * d.np + p);
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
        acc = fmaf(tile_scale(d, t), part, acc);
        if (d.zero && b0 == 0 && (cr * 64) % d.T == 0) acc = fmaf(d.zero[t], d.xs[jt], acc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        for (uint32_t e = d.esc_row[row]; e < d.esc_row[row + 1]; e++) {
            const uint32_t col = kvq_hqx_esc_col(d.esc[e]);
            acc = fmaf(tile_scale(d, row * tpr + col / d.T), (float)(d.m * kvq_hqx_esc_delta(d.esc[e])) * d.xr[col], acc);
        }
        y[row] = acc;
    }
}

// ---- int8 product: lane l takes half l%2 of chunk l/2 (16 low-nibble and 16 high-nibble
// codes: one 16-byte load), a step covers 16 chunks = 512 contiguous bytes; codes become
// signed bytes v = u − off (bit planes spread into bytes by a multiply) and meet the int8
// activations in 8 dp4a; per tile the lane's integer sum is scaled by scale·sx.
__device__ __forceinline__ uint32_t spread4(uint32_t nib4) { return (nib4 * 0x00204081u) & 0x01010101u; }

__global__ void __launch_bounds__(128) hqx_gemv_i8(Dev d, float *__restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= d.rows) return;
    const int64_t cpr = d.cols_p / 64, tpr = d.cols_p / d.T;
    const int ch16 = lane >> 1, h = lane & 1;
    const uint32_t offb = d.vbits == 8 ? 0u : (uint32_t)d.off * 0x01010101u;
    float acc = 0.0f;
#pragma unroll 2
    for (int64_t c0 = 0; c0 < cpr; c0 += 16) {
        const int64_t cr = c0 + ch16;
        if (cr >= cpr) continue;
        const int64_t g = row * cpr + cr;
        uint32_t lo[4], hi[4];
        if (d.vbits == 8) {
            const uint4 a = __ldg((const uint4 *)(d.q + g * 64 + 16 * h)), b = __ldg((const uint4 *)(d.q + g * 64 + 32 + 16 * h));
            lo[0] = a.x ^ 0x80808080u; lo[1] = a.y ^ 0x80808080u; lo[2] = a.z ^ 0x80808080u; lo[3] = a.w ^ 0x80808080u;
            hi[0] = b.x ^ 0x80808080u; hi[1] = b.y ^ 0x80808080u; hi[2] = b.z ^ 0x80808080u; hi[3] = b.w ^ 0x80808080u;
        } else {
            const uint4 a = __ldg((const uint4 *)(d.q + g * 32 + 16 * h));
            const uint32_t r[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) { lo[k] = r[k] & 0x0F0F0F0Fu; hi[k] = (r[k] >> 4) & 0x0F0F0F0Fu; }
            for (int p = 0; p < d.np; p++) {
                const uint64_t wd = __ldg(d.hb + g * d.np + p);
                const uint32_t bl = (uint32_t)(wd >> (16 * h)) & 0xffffu, bh = (uint32_t)(wd >> (32 + 16 * h)) & 0xffffu;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo[k] |= spread4((bl >> (4 * k)) & 15u) << (4 + p);
                    hi[k] |= spread4((bh >> (4 * k)) & 15u) << (4 + p);
                }
            }
#pragma unroll
            for (int k = 0; k < 4; k++) { lo[k] = __vsub4(lo[k], offb); hi[k] = __vsub4(hi[k], offb); }
        }
        const int64_t xo = cr * 64 + 16 * h;
        const uint4 xa = __ldg((const uint4 *)(d.xq + xo)), xb = __ldg((const uint4 *)(d.xq + xo + 32));
        int dot = 0;
        dot = __dp4a((int)lo[0], (int)xa.x, dot); dot = __dp4a((int)lo[1], (int)xa.y, dot);
        dot = __dp4a((int)lo[2], (int)xa.z, dot); dot = __dp4a((int)lo[3], (int)xa.w, dot);
        dot = __dp4a((int)hi[0], (int)xb.x, dot); dot = __dp4a((int)hi[1], (int)xb.y, dot);
        dot = __dp4a((int)hi[2], (int)xb.z, dot); dot = __dp4a((int)hi[3], (int)xb.w, dot);
        int D = d.m * dot;
        if (d.e8) {
            const uint32_t cbb = __ldg(d.cb + g);
            const int32_t *s8 = d.s8 + cr * 8;
            if ((cbb >> (2 * h)) & 1) D += __ldg(s8 + 2 * h);
            if ((cbb >> (2 * h + 1)) & 1) D += __ldg(s8 + 2 * h + 1);
            if ((cbb >> (4 + 2 * h)) & 1) D += __ldg(s8 + 4 + 2 * h);
            if ((cbb >> (5 + 2 * h)) & 1) D += __ldg(s8 + 5 + 2 * h);
        }
        const int64_t jt = (cr * 64) / d.T, t = row * tpr + jt;
        acc = fmaf(tile_scale(d, t) * __ldg(d.sx + jt), (float)D, acc);
        if (d.zero && h == 0 && (cr * 64) % d.T == 0) acc = fmaf(d.zero[t], d.xs[jt], acc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        for (uint32_t e = d.esc_row[row]; e < d.esc_row[row + 1]; e++) {
            const uint32_t col = kvq_hqx_esc_col(d.esc[e]);
            const int64_t jt = col / d.T;
            acc = fmaf(tile_scale(d, row * tpr + jt) * d.sx[jt], (float)(d.m * kvq_hqx_esc_delta(d.esc[e]) * d.xq[col]), acc);
        }
        y[row] = acc;
    }
}

// ---- host side

template <typename T> static kvq_status up(T **dst, const T *src, size_t n, size_t *bytes, kvq_err *err) {
    *dst = NULL;
    if (!src || !n) return KVQ_OK;
    CU_TRY(cudaMalloc((void **)dst, n * sizeof(T)));
    CU_TRY(cudaMemcpy(*dst, src, n * sizeof(T), cudaMemcpyHostToDevice));
    *bytes += n * sizeof(T);
    return KVQ_OK;
}

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
    if (!s) s = up(&t->cb, w->cb, w->cb ? n / 64 : 0, &b, err);
    if (!s) s = up(&t->scode, w->scode, w->scode ? tiles : 0, &b, err);
    if (!s) s = up(&t->lut, w->scode ? w->lut : NULL, 256, &b, err);
    if (!s) s = up(&t->scale, w->scale, w->scale ? tiles : 0, &b, err);
    if (!s) s = up(&t->zero, w->zero, w->zero ? tiles : 0, &b, err);
    if (!s) s = up(&t->esc_row, w->esc_row, (size_t)w->rows + 1, &b, err);
    if (!s) s = up(&t->esc, w->esc, w->esc_row[w->rows], &b, err);
    t->bytes = b;
    if (!s) {
        cudaError_t e = cudaMalloc((void **)&t->xr, sizeof(float) * (size_t)w->cols_p);
        if (e == cudaSuccess) e = cudaMalloc((void **)&t->xs, sizeof(float) * (size_t)(w->cols_p / w->tile));
        if (e == cudaSuccess) e = cudaMalloc((void **)&t->sx, sizeof(float) * (size_t)(w->cols_p / w->tile));
        if (e == cudaSuccess) e = cudaMalloc((void **)&t->xq, (size_t)w->cols_p);
        if (e == cudaSuccess) e = cudaMalloc((void **)&t->s8, sizeof(int32_t) * (size_t)(w->cols_p / 8));
        if (e == cudaSuccess) e = cudaMalloc((void **)&t->fs, kvq_cuda_hqx_fused_scratch(w->cols_p, w->tile));
        if (e != cudaSuccess) s = cu_fail(err, e, "cudaMalloc(scratch)");
    }
    if (s) { kvq_cuda_hqx_free(t); return s; }
    *out = t;
    return KVQ_OK;
}

extern "C" void kvq_cuda_hqx_free(kvq_cuda_hqx *t) {
    if (!t) return;
    void *p[] = {t->q, t->hb, t->cb, t->scode, t->lut, t->scale, t->zero, t->esc_row, t->esc, t->xr, t->xs,
                 t->sx, t->xq, t->s8, t->fs};
    for (void *x : p)
        if (x) cudaFree(x);
    free(t);
}

extern "C" size_t kvq_cuda_hqx_bytes(const kvq_cuda_hqx *t) { return t ? t->bytes : 0; }

extern "C" kvq_status kvq_cuda_hqx_matvec(kvq_cuda_hqx *t, const float *d_x, float *d_y, int int8, kvq_err *err) {
    Dev d = dev_of(t);
    const int T = t->h.tile;
    hqx_rotate<<<(unsigned)(t->h.cols_p / T), T, sizeof(float) * T, kvq_cuda_stream()>>>(d, d_x, t->xr, t->xs, int8 ? t->xq : NULL, t->sx,
                                                                       t->s8);
    CU_LAUNCHED("hqx_rotate");
    if (int8) {
        hqx_gemv_i8<<<(unsigned)((t->h.rows + 3) / 4), 128, 0, kvq_cuda_stream()>>>(d, d_y);
        CU_LAUNCHED("hqx_gemv_i8");
    } else {
        hqx_gemv<<<(unsigned)((t->h.rows + 3) / 4), 128, 0, kvq_cuda_stream()>>>(d, d_y);
        CU_LAUNCHED("hqx_gemv");
    }
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

extern "C" kvq_status kvq_cuda_hqx_time(kvq_cuda_hqx *t, int reps, int int8, double *ms, kvq_err *err) {
    float *dx = NULL, *dy = NULL;
    const int nt = int8 >= 2 ? int8 - 1 : 1; // the batched product's tokens
    CU_TRY(cudaMalloc((void **)&dx, sizeof(float) * (size_t)t->h.cols * nt));
    CU_TRY(cudaMalloc((void **)&dy, sizeof(float) * (size_t)t->h.rows * nt));
    { // random activations (zeros would skip nothing here, but keep the timing honest)
        std::vector<float> hx((size_t)t->h.cols * nt);
        uint64_t z = 12345;
        for (auto &v : hx) { z = z * 6364136223846793005ull + 1442695040888963407ull; v = (float)((int64_t)(z >> 33) % 2001 - 1000) / 1000.0f; }
        CU_TRY(cudaMemcpy(dx, hx.data(), sizeof(float) * hx.size(), cudaMemcpyHostToDevice));
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
