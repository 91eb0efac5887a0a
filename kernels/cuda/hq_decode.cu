// HyperQuant Rice-mode decode on the GPU (see hq_decode.h, docs/CUDA.md): phase 1, one lane
// per random-access group of 16 tiles Rice-decodes its lattice codes; phase 2, the exact
// integer Hadamard and the per-norm-code scales from a host table computed with the CPU
// decoder's own double expression, so the output is bit-identical to kvq_hq_decode.
#include "kernels/cuda/hq_common.cuh"

// ---- decode, phase 1: one lane per group Rice-decodes its 16 tiles' lattice codes into
// the int32 scratch (tile-major, rows × cols_p), with vector stores per lattice vector.
// This is the sequential part; everything after it is wide.
template <int N> __device__ __forceinline__ void store_vec(int32_t *p, const int32_t *c) {
    if (N == 8) {
        reinterpret_cast<int4 *>(p)[0] = make_int4(c[0], c[1], c[2], c[3]);
        reinterpret_cast<int4 *>(p)[1] = make_int4(c[4], c[5], c[6], c[7]);
    } else if (N == 4) {
        reinterpret_cast<int4 *>(p)[0] = make_int4(c[0], c[1], c[2], c[3]);
    } else if (N == 2) {
        reinterpret_cast<int2 *>(p)[0] = make_int2(c[0], c[1]);
    } else {
        p[0] = c[0];
    }
}

template <int LAT>
__global__ void __launch_bounds__(32) hq_codes_kernel(Params P, int32_t *codes) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= P.n_groups) return;
    const uint32_t zero = kvq_hq_norm_zero(P.nb);
    const int T = P.T;
    Rd r;
    group_bounds(P, g, r);
    const int64_t t1 = min((g + 1) * KVQ_HQ_GROUP_TILES, P.n_tiles);
    for (int64_t t = g * KVQ_HQ_GROUP_TILES; t < t1; t++) {
        if (norm_code(P.norms, P.nb, t) == zero) continue; // no symbols; phase 2 writes zeros
        int32_t *o = codes + t * T;
        constexpr int N = Lat<LAT>::N, S = N >= 4 ? N : 4; // at least 16 bytes per store
        for (int v = 0; v < T; v += S) {
            int32_t c[S];
#pragma unroll
            for (int u = 0; u < S; u += N) Lat<LAT>::read(r, P.k0, P.k1, c + u);
            store_vec<S>(o + v, c);
        }
    }
    group_done(P, r, g);
}

// Phase 2: 256 threads take 1024 codes (1024/T tiles) into shared memory, apply the exact
// integer Hadamard stage by stage (A2: to the nx and ny parts separately), then scale,
// apply the signs and store. Output rounding as in kvq_hq_tile_recon, with no contraction.
#define P2_THREADS 256
#define P2_CHUNK (4 * P2_THREADS)
template <int LAT, typename OUT>
__global__ void __launch_bounds__(P2_THREADS) hq_transform_kernel(Params P, const int32_t *codes, OUT *out) {
    __shared__ int32_t zx[P2_CHUNK], zy[LAT == KVQ_HQ_LAT_A2 ? P2_CHUNK : 1];
    const int T = P.T, tid = threadIdx.x, per = P2_CHUNK / T;
    const uint32_t zero = kvq_hq_norm_zero(P.nb);
    const int64_t tb = (int64_t)blockIdx.x * per; // first tile of the chunk
    const int e0 = 4 * tid;                       // this thread's 4 consecutive codes
    const int64_t t = tb + e0 / T;
    const uint32_t code = t < P.n_tiles ? norm_code(P.norms, P.nb, t) : zero;
    int4 v = make_int4(0, 0, 0, 0);
    if (code != zero) v = reinterpret_cast<const int4 *>(codes + tb * T)[tid];
    if (LAT == KVQ_HQ_LAT_A2) { // even positions ny, odd nx
        zx[e0] = 0, zx[e0 + 1] = v.y, zx[e0 + 2] = 0, zx[e0 + 3] = v.w;
        zy[e0] = v.x, zy[e0 + 1] = 0, zy[e0 + 2] = v.z, zy[e0 + 3] = 0;
    } else {
        reinterpret_cast<int4 *>(zx)[tid] = v;
    }
    const int half = T / 2;
    for (int h = 1; h < T; h <<= 1) {
        __syncthreads();
#pragma unroll
        for (int m = 0; m < 2; m++) { // 512 butterflies per stage, 2 per thread
            const int p = 2 * tid + m, q = p % half, i = (p / half) * T + (q / h) * 2 * h + q % h;
            int32_t a = zx[i], b = zx[i + h];
            zx[i] = a + b;
            zx[i + h] = a - b;
            if (LAT == KVQ_HQ_LAT_A2) {
                a = zy[i], b = zy[i + h];
                zy[i] = a + b;
                zy[i + h] = a - b;
            }
        }
    }
    __syncthreads();
    if (t >= P.n_tiles) return;
    const int64_t row = t / P.tpr, c0 = (t % P.tpr) * T;
    const float s = code == zero ? 0.0f : P.scale[code];
#pragma unroll
    for (int m = 0; m < 4; m++) {
        const int e = e0 + m, i = e % T;
        if (c0 + i >= P.cols) break; // zero padding past cols
        float val = 0.0f; // zero tile: +0 exactly, as the CPU's memset
        if (code != zero) {
            float zf = (float)zx[e];
            if (LAT == KVQ_HQ_LAT_A2) zf = __fadd_rn(zf, __fmul_rn(KVQ_HQ_SQRT3_F, (float)zy[e]));
            val = __fmul_rn(zf, s);
            const uint64_t bit = (uint64_t)c0 + (uint64_t)i;
            const uint32_t sg = (P.signs[bit >> 5] >> (bit & 31)) & 1u;
            val = __uint_as_float(__float_as_uint(val) ^ (sg << 31)); // · (±1.0f), exact
        }
        store(out + row * P.cols + c0, i, val);
    }
}

template <int LAT, typename OUT>
static kvq_status launch_decode(kvq_cuda_hq *t, OUT *out, kvq_err *err) {
    const Params P = params_of(t);
    if (!t->scratch) CU_TRY(cudaMalloc((void **)&t->scratch, sizeof(int32_t) * (size_t)(t->n_tiles * P.T)));
    hq_codes_kernel<LAT><<<(unsigned)((t->n_groups + 31) / 32), 32>>>(P, t->scratch);
    CU_LAUNCHED("hq_codes_kernel");
    const int64_t chunks = (t->n_tiles * P.T + P2_CHUNK - 1) / P2_CHUNK;
    hq_transform_kernel<LAT, OUT><<<(unsigned)chunks, P2_THREADS>>>(P, t->scratch, out);
    CU_LAUNCHED("hq_transform_kernel");
    return KVQ_OK;
}

template <typename OUT>
static kvq_status decode_as(kvq_cuda_hq *t, OUT *out, kvq_err *err) {
    switch (t->d.lattice) {
    case KVQ_HQ_LAT_E8: return launch_decode<KVQ_HQ_LAT_E8>(t, out, err);
    case KVQ_HQ_LAT_D4: return launch_decode<KVQ_HQ_LAT_D4>(t, out, err);
    case KVQ_HQ_LAT_A2: return launch_decode<KVQ_HQ_LAT_A2>(t, out, err);
    default: return launch_decode<KVQ_HQ_LAT_Z>(t, out, err);
    }
}

extern "C" kvq_status kvq_cuda_hq_decode(kvq_cuda_hq *t, void *d_out, kvq_cuda_dtype dtype, kvq_err *err) {
    if (dtype == KVQ_CUDA_BF16) return decode_as(t, (__nv_bfloat16 *)d_out, err);
    return decode_as(t, (float *)d_out, err);
}

extern "C" kvq_status kvq_cuda_hq_decode_host(kvq_cuda_hq *t, void *h_out, kvq_cuda_dtype dtype, kvq_err *err) {
    const size_t n = (size_t)(t->d.rows * t->d.cols) * (dtype == KVQ_CUDA_BF16 ? 2 : 4);
    void *d = NULL;
    CU_TRY(cudaMalloc(&d, n));
    kvq_status st = kvq_cuda_hq_decode(t, d, dtype, err);
    if (!st) st = kvq_cuda_hq_check(t, err);
    if (!st) {
        cudaError_t e = cudaMemcpy(h_out, d, n, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) st = cu_fail(err, e, "cudaMemcpy(decoded)");
    }
    cudaFree(d);
    return st;
}

