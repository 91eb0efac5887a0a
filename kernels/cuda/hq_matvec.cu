// Fused HyperQuant matvec from the Rice stream (see hq_decode.h): x is rotated per tile
// (H·D·x) and each tile's dot product is taken against its integer codes, W never formed.
#include "kernels/cuda/hq_common.cuh"

// ---- fused matvec, part 1: xr = H·D·x per tile column, x zero-padded to cols_p.
// Block = one tile column, T threads, float butterfly in shared memory.
__global__ void hq_rotate_kernel(const float *x, const uint32_t *signs, int64_t cols, int T, float *xr) {
    extern __shared__ float sf[];
    const int i = threadIdx.x;
    const int64_t c = (int64_t)blockIdx.x * T + i;
    float v = c < cols ? x[c] : 0.0f;
    if ((signs[c >> 5] >> (c & 31)) & 1u) v = -v;
    sf[i] = v;
    __syncthreads();
    for (int h = 1; h < T; h <<= 1) {
        float a = 0, b = 0;
        const bool lo = (i & h) == 0;
        a = sf[lo ? i : i - h];
        b = sf[lo ? i + h : i];
        __syncthreads();
        sf[i] = lo ? __fadd_rn(a, b) : __fsub_rn(a, b);
        __syncthreads();
    }
    xr[c] = sf[i];
}

// Part 2: one lane per group; each tile's dot product s·<c, xr_j> straight from the codes
// (A2: s·(<nx, xr> + √3·<ny, xr>)), sequential fp32 FMA over the tile.
template <int LAT>
__global__ void __launch_bounds__(32) hq_matvec_kernel(Params P, const float *__restrict__ xr, float *part) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= P.n_groups) return;
    const uint32_t zero = kvq_hq_norm_zero(P.nb);
    const int T = P.T;
    Rd r;
    group_bounds(P, g, r);
    const int64_t t1 = min((g + 1) * KVQ_HQ_GROUP_TILES, P.n_tiles);
    for (int64_t t = g * KVQ_HQ_GROUP_TILES; t < t1; t++) {
        const uint32_t code = norm_code(P.norms, P.nb, t);
        float d = 0.0f;
        if (code != zero) {
            const float *xj = xr + (t % P.tpr) * T;
            float a = 0.0f, b = 0.0f;
            for (int v = 0; v < T; v += Lat<LAT>::N) {
                int32_t c[Lat<LAT>::N];
                Lat<LAT>::read(r, P.k0, P.k1, c);
                if (LAT == KVQ_HQ_LAT_A2) {
                    b = __fmaf_rn((float)c[0], __ldg(xj + v), b);
                    a = __fmaf_rn((float)c[1], __ldg(xj + v + 1), a);
                } else {
#pragma unroll
                    for (int i = 0; i < Lat<LAT>::N; i++) a = __fmaf_rn((float)c[i], __ldg(xj + v + i), a);
                }
            }
            if (LAT == KVQ_HQ_LAT_A2) a = __fmaf_rn(KVQ_HQ_SQRT3_F, b, a);
            d = __fmul_rn(a, P.scale[code]);
        }
        part[t] = d;
    }
    group_done(P, r, g);
}

// Part 3: y[row] = Σ_j part[row·tpr + j], fixed order (deterministic).
__global__ void hq_rowsum_kernel(const float *part, int64_t rows, int64_t tpr, float *y) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float s = 0.0f;
    for (int64_t j = 0; j < tpr; j++) s = __fadd_rn(s, part[row * tpr + j]);
    y[row] = s;
}

template <int LAT>
static kvq_status launch_matvec(kvq_cuda_hq *t, kvq_err *err) {
    const int64_t blocks = (t->n_groups + 31) / 32;
    hq_matvec_kernel<LAT><<<(unsigned)blocks, 32>>>(params_of(t), t->xr, t->part);
    CU_LAUNCHED("hq_matvec_kernel");
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hq_matvec(kvq_cuda_hq *t, const float *d_x, float *d_y, kvq_err *err) {
    const int T = t->d.tile;
    hq_rotate_kernel<<<(unsigned)t->tpr, T, sizeof(float) * T>>>(d_x, t->signs, t->d.cols, T, t->xr);
    CU_LAUNCHED("hq_rotate_kernel");
    kvq_status st;
    switch (t->d.lattice) {
    case KVQ_HQ_LAT_E8: st = launch_matvec<KVQ_HQ_LAT_E8>(t, err); break;
    case KVQ_HQ_LAT_D4: st = launch_matvec<KVQ_HQ_LAT_D4>(t, err); break;
    case KVQ_HQ_LAT_A2: st = launch_matvec<KVQ_HQ_LAT_A2>(t, err); break;
    default: st = launch_matvec<KVQ_HQ_LAT_Z>(t, err); break;
    }
    if (st) return st;
    hq_rowsum_kernel<<<(unsigned)((t->d.rows + 127) / 128), 128>>>(t->part, t->d.rows, t->tpr, d_y);
    CU_LAUNCHED("hq_rowsum_kernel");
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hq_matvec_host(kvq_cuda_hq *t, const float *h_x, float *h_y, kvq_err *err) {
    float *dx = NULL, *dy = NULL;
    kvq_status st = KVQ_OK;
    cudaError_t e;
    if ((e = cudaMalloc((void **)&dx, sizeof(float) * t->d.cols)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dy, sizeof(float) * t->d.rows)) != cudaSuccess ||
        (e = cudaMemcpy(dx, h_x, sizeof(float) * t->d.cols, cudaMemcpyHostToDevice)) != cudaSuccess)
        st = cu_fail(err, e, "matvec buffers");
    if (!st) st = kvq_cuda_hq_matvec(t, dx, dy, err);
    if (!st) st = kvq_cuda_hq_check(t, err);
    if (!st && (e = cudaMemcpy(h_y, dy, sizeof(float) * t->d.rows, cudaMemcpyDeviceToHost)) != cudaSuccess)
        st = cu_fail(err, e, "cudaMemcpy(y)");
    cudaFree(dx);
    cudaFree(dy);
    return st;
}
