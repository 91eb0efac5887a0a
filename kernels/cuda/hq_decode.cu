// HyperQuant Rice-mode decoding on the GPU (see hq_decode.h, docs/CUDA.md). One lane
// per random-access group of 16 tiles reads its bitstream from its offset; the integer
// Hadamard is exact, the per-norm-code scales come from a host table computed with the
// CPU decoder's own double expression, and float products avoid contraction, so the
// output is bit-identical to kvq_hq_decode. The fused matvec rotates x instead of W.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "formats/error.h" // a C header without its own extern "C"
}
#include "kernels/cuda/hq_decode.h"
#include "kernels/hq_layout.h"

#define CODES_PAD 16         // zero bytes after codes: the word reader looks ahead


struct kvq_cuda_hq {
    kvq_cuda_hq_desc d;
    int64_t n_tiles, n_groups, tpr;
    size_t codes_size, compact;
    uint8_t *codes;    // codes_size + CODES_PAD, 4-byte aligned (cudaMalloc)
    uint8_t *norms;    // + 4 bytes pad
    uint32_t *offs;    // n_groups + 1
    float *scale;      // 2^norm_bits: (float)(norm(code) / (α·T))
    uint32_t *signs;   // bit j·T+i: sign of coordinate i in tile column j
    int *bad;          // smallest corrupt group, or INT_MAX
    float *xr;         // matvec scratch: rotated x (cols_p)
    float *part;       // matvec scratch: per-tile dot products (n_tiles)
    int32_t *scratch;  // decode scratch: lattice codes (rows × cols_p), allocated on first decode
};

struct Params {
    const uint8_t *codes, *norms;
    const uint32_t *offs, *signs;
    const float *scale;
    int *bad;
    int64_t n_tiles, n_groups, tpr, cols;
    int T, nb, k0, k1;
};

// ---- error helpers

static kvq_status cu_fail(kvq_err *err, cudaError_t e, const char *what) {
    return kvq_err_set(err, e == cudaErrorMemoryAllocation ? KVQ_ERR_NOMEM : KVQ_ERR_IO, "cuda: %s: %s", what,
                       cudaGetErrorString(e));
}
#define CU_TRY(call)                                                   \
    do {                                                               \
        cudaError_t e_ = (call);                                       \
        if (e_ != cudaSuccess) return cu_fail(err, e_, #call);        \
    } while (0)
#define CU_LAUNCHED(name)                                              \
    do {                                                               \
        cudaError_t e_ = cudaGetLastError();                           \
        if (e_ != cudaSuccess) return cu_fail(err, e_, "launch " name); \
    } while (0)

// ---- bit reader: LSB-first stream read as aligned little-endian 32-bit words

struct Rd {
    const uint32_t *wp, *wend; // words at or past wend read as zero (corrupt streams stay in bounds)
    uint32_t nx0, nx1;         // the next two words, loaded early: their latency overlaps decoding
    uint64_t buf; // valid bits 0..n-1, zeros above
    int n;
    int bad;
    uint32_t pos, limit; // bits consumed / group size in bits
};

__device__ __forceinline__ void rd_init(Rd &r, const uint8_t *codes, uint32_t o0, uint32_t o1) {
    uint32_t off = o0 & 3u;
    r.wp = reinterpret_cast<const uint32_t *>(codes + (o0 - off));
    r.wend = reinterpret_cast<const uint32_t *>(codes + ((o1 + 3u) & ~3u)) + 2; // inside CODES_PAD
    r.buf = (uint64_t)(*r.wp++) >> (8 * off);
    r.n = 32 - 8 * (int)off;
    r.nx0 = r.wp < r.wend ? r.wp[0] : 0u;
    r.nx1 = r.wp + 1 < r.wend ? r.wp[1] : 0u;
    r.wp += 2;
    r.bad = 0;
    r.pos = 0;
    r.limit = 8u * (o1 - o0);
}

__device__ __forceinline__ void rd_refill(Rd &r) {
    if (r.n < 32) {
        r.buf |= (uint64_t)r.nx0 << r.n;
        r.nx0 = r.nx1;
        r.nx1 = r.wp < r.wend ? *r.wp : 0u;
        r.wp++;
        r.n += 32;
    }
}

// Rare path: a codeword longer than the buffered bits (long unary run or corrupt stream).
__device__ __forceinline__ uint32_t rd_rice_slow(Rd &r, int k) {
    uint64_t q = 0;
    while ((r.buf & ((1ull << r.n) - 1)) == 0) { // bits above n are zero, so buf == 0
        q += (uint64_t)r.n;
        r.buf = 0;
        r.n = 0;
        rd_refill(r);
        if (r.pos + q > r.limit || q > (0xffffffffull >> k)) {
            r.bad = 1;
            return 0;
        }
    }
    int z = __ffsll((long long)r.buf) - 1;
    q += (uint64_t)z;
    r.buf >>= z + 1;
    r.n -= z + 1;
    rd_refill(r); // n >= 32 > k
    uint32_t lo = (uint32_t)(r.buf & ((1ull << k) - 1));
    r.buf >>= k;
    r.n -= k;
    r.pos += (uint32_t)(q + 1 + k);
    if (q > (0xffffffffull >> k)) { r.bad = 1; return 0; }
    uint32_t v = (uint32_t)(q << k) | lo;
    if (v >= KVQ_HQ_SYM_LIMIT) { r.bad = 1; return 0; }
    return v;
}

__device__ __forceinline__ uint32_t rd_rice(Rd &r, int k) {
    rd_refill(r);                       // now n >= 32: the low word is all valid bits
    int z = __ffs((uint32_t)r.buf) - 1; // -1 if no 1 bit in the low word: slow path
    int len = z + 1 + k;
    if (z >= 0 && len <= r.n) {
        uint32_t v = ((uint32_t)z << k) | (uint32_t)((r.buf >> (z + 1)) & ((1ull << k) - 1));
        r.buf >>= len; // len <= n <= 63
        r.n -= len;
        r.pos += (uint32_t)len;
        r.bad |= (int)(v >= KVQ_HQ_SYM_LIMIT);
        return v & (KVQ_HQ_SYM_LIMIT - 1);
    }
    return rd_rice_slow(r, k);
}

__device__ __forceinline__ int32_t unzz(uint32_t u) { return (int32_t)(u >> 1) ^ -(int32_t)(u & 1); }

// One lattice vector: n stripped symbols -> integer codes (inverse of kvq_lattice_strip).
template <int LAT> struct Lat;
template <> struct Lat<KVQ_HQ_LAT_E8> {
    enum { N = 8 };
    static __device__ __forceinline__ void read(Rd &r, int k0, int, int32_t *c) {
        int32_t p = 0;
#pragma unroll
        for (int i = 0; i < 7; i++) {
            int32_t s = unzz(rd_rice(r, k0));
            p += s;
            c[i] = 2 * s;
        }
        uint32_t comb = rd_rice(r, k0);
        int32_t cb = (int32_t)(comb & 1);
        c[7] = 2 * (2 * unzz(comb >> 1) + (p & 1)) + cb;
#pragma unroll
        for (int i = 0; i < 7; i++) c[i] += cb;
    }
};
template <> struct Lat<KVQ_HQ_LAT_D4> {
    enum { N = 4 };
    static __device__ __forceinline__ void read(Rd &r, int k0, int k1, int32_t *c) {
        c[0] = unzz(rd_rice(r, k0));
        c[1] = unzz(rd_rice(r, k0));
        c[2] = unzz(rd_rice(r, k0));
        c[3] = 2 * unzz(rd_rice(r, k1)) + ((c[0] + c[1] + c[2]) & 1);
    }
};
template <> struct Lat<KVQ_HQ_LAT_A2> { // c[0] = ny (the √3 axis), c[1] = nx
    enum { N = 2 };
    static __device__ __forceinline__ void read(Rd &r, int k0, int k1, int32_t *c) {
        int32_t ty = unzz(rd_rice(r, k0));
        c[1] = unzz(rd_rice(r, k1));
        c[0] = 2 * ty + (c[1] & 1);
    }
};
template <> struct Lat<KVQ_HQ_LAT_Z> {
    enum { N = 1 };
    static __device__ __forceinline__ void read(Rd &r, int k0, int, int32_t *c) { c[0] = unzz(rd_rice(r, k0)); }
};

__device__ __forceinline__ uint32_t norm_code(const uint8_t *norms, int nb, int64_t t) {
    uint64_t bit = (uint64_t)t * (uint64_t)nb;
    const uint8_t *p = norms + (bit >> 3);
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16; // nb <= 16: 3 bytes
    return (v >> (bit & 7)) & ((1u << nb) - 1u);
}

__device__ __forceinline__ void group_bounds(const Params &P, int64_t g, Rd &r) {
    rd_init(r, P.codes, P.offs[g], P.offs[g + 1]);
}

__device__ __forceinline__ void group_done(const Params &P, const Rd &r, int64_t g) {
    // consumed to within the final byte's padding, as the CPU decoders require
    if (r.bad || r.pos > r.limit || r.pos + 8 <= r.limit) atomicMin(P.bad, (int)g);
}

__device__ __forceinline__ void store(float *out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *out, int64_t i, float v) { out[i] = __float2bfloat16_rn(v); }

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

// ---- host side

static Params params_of(const kvq_cuda_hq *t) {
    Params P;
    P.codes = t->codes;
    P.norms = t->norms;
    P.offs = t->offs;
    P.signs = t->signs;
    P.scale = t->scale;
    P.bad = t->bad;
    P.n_tiles = t->n_tiles;
    P.n_groups = t->n_groups;
    P.tpr = t->tpr;
    P.cols = t->d.cols;
    P.T = t->d.tile;
    P.nb = t->d.norm_bits;
    P.k0 = t->d.k[0];
    P.k1 = t->d.k[1];
    return P;
}

extern "C" int kvq_cuda_device_count(char *why, size_t why_size) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why && why_size)
            snprintf(why, why_size, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "count is 0");
        return 0;
    }
    return n;
}

extern "C" void kvq_cuda_device_name(char *buf, size_t size) {
    cudaDeviceProp p;
    if (!size) return;
    buf[0] = 0;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        snprintf(buf, size, "%s, %d SMs, %.1f GiB, cc %d.%d", p.name, p.multiProcessorCount,
                 (double)p.totalGlobalMem / (1u << 30), p.major, p.minor);
}

extern "C" void kvq_cuda_hq_free(kvq_cuda_hq *t) {
    if (!t) return;
    cudaFree(t->codes);
    cudaFree(t->norms);
    cudaFree(t->offs);
    cudaFree(t->scale);
    cudaFree(t->signs);
    cudaFree(t->bad);
    cudaFree(t->xr);
    cudaFree(t->part);
    cudaFree(t->scratch);
    free(t);
}

static kvq_status check_desc(const kvq_cuda_hq_desc *d, size_t codes_size, size_t norms_size, const uint8_t *ob,
                             size_t offsets_size, int64_t *n_tiles, int64_t *n_groups, kvq_err *err) {
    if (d->int8) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda hyperquant: int8 mode is not implemented on the GPU");
    if (d->cast) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda hyperquant: simulated MMA casts are CPU-only");
    if (d->lattice < 0 || d->lattice > 3) return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad lattice %d", d->lattice);
    const int T = d->tile;
    if (T < KVQ_HQ_MIN_TILE || T > KVQ_HQ_MAX_TILE || (T & (T - 1)))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad tile %d", T);
    if (d->rows < 1 || d->cols < 1 || d->cols_p < d->cols || d->cols_p % T || d->cols_p - d->cols >= T ||
        d->rows > ((int64_t)1 << 40) / d->cols_p)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad shape %lld x %lld (padded %lld)",
                           (long long)d->rows, (long long)d->cols, (long long)d->cols_p);
    if (d->norm_bits < 6 || d->norm_bits > 16 || !(d->alpha > 0))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad norm_bits %d or alpha %g", d->norm_bits, d->alpha);
    for (int i = 0; i < 2; i++)
        if (d->k[i] < 0 || d->k[i] > 24) return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad Rice parameter %d", d->k[i]);
    *n_tiles = d->rows * (d->cols_p / T);
    *n_groups = (*n_tiles + KVQ_HQ_GROUP_TILES - 1) / KVQ_HQ_GROUP_TILES;
    if (*n_groups >= INT32_MAX) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda hyperquant: too many groups");
    if (norms_size != (size_t)((*n_tiles * d->norm_bits + 7) / 8))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: norms blob is %zu bytes, expected %lld", norms_size,
                           (long long)((*n_tiles * d->norm_bits + 7) / 8));
    if (offsets_size != (size_t)(*n_groups + 1) * 4)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: offsets blob has %zu bytes, expected %lld", offsets_size,
                           (long long)(*n_groups + 1) * 4);
    uint32_t prev = 0;
    for (int64_t g = 0; g <= *n_groups; g++) {
        uint32_t v = (uint32_t)ob[4 * g] | (uint32_t)ob[4 * g + 1] << 8 | (uint32_t)ob[4 * g + 2] << 16 |
                     (uint32_t)ob[4 * g + 3] << 24;
        if ((g == 0 && v != 0) || v < prev || v > codes_size || (g == *n_groups && v != codes_size))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad group offset %u at group %lld", v, (long long)g);
        prev = v;
    }
    return KVQ_OK;
}

static kvq_status upload(kvq_cuda_hq *t, const void *codes, const void *norms, const void *offsets, kvq_err *err) {
    const kvq_cuda_hq_desc *d = &t->d;
    const int T = d->tile;
    const size_t nnorm = (size_t)((t->n_tiles * d->norm_bits + 7) / 8);
    CU_TRY(cudaMalloc((void **)&t->codes, t->codes_size + CODES_PAD));
    CU_TRY(cudaMemset(t->codes, 0, t->codes_size + CODES_PAD));
    if (t->codes_size) CU_TRY(cudaMemcpy(t->codes, codes, t->codes_size, cudaMemcpyHostToDevice));
    CU_TRY(cudaMalloc((void **)&t->norms, nnorm + 4));
    CU_TRY(cudaMemset(t->norms, 0, nnorm + 4));
    CU_TRY(cudaMemcpy(t->norms, norms, nnorm, cudaMemcpyHostToDevice));
    CU_TRY(cudaMalloc((void **)&t->offs, 4 * (size_t)(t->n_groups + 1)));
    CU_TRY(cudaMemcpy(t->offs, offsets, 4 * (size_t)(t->n_groups + 1), cudaMemcpyHostToDevice)); // little-endian host
    // Scales with the CPU decoder's expression (kvq_hq_norm_value, kvq_hq_tile_recon), same libm.
    const size_t ncode = (size_t)1 << d->norm_bits;
    std::vector<float> sc(ncode);
    for (size_t c = 0; c < ncode; c++) {
        double norm = exp2((double)d->norm_exp - (double)c / (double)(1 << (d->norm_bits - 5)));
        sc[c] = (float)(norm / (d->alpha * (double)T));
    }
    CU_TRY(cudaMalloc((void **)&t->scale, sizeof(float) * ncode));
    CU_TRY(cudaMemcpy(t->scale, sc.data(), sizeof(float) * ncode, cudaMemcpyHostToDevice));
    const size_t nw = (size_t)(d->cols_p + 31) / 32;
    std::vector<uint32_t> sw(nw, 0);
    for (int64_t j = 0; j < d->cols_p / T; j++)
        for (int w = 0; w < (T + 63) / 64; w++) {
            uint64_t bits = kvq_hq_sign_word(d->seed, (uint64_t)j, (uint64_t)w);
            for (int i = 0; i < 64 && 64 * w + i < T; i++)
                if ((bits >> i) & 1) {
                    uint64_t b = (uint64_t)j * T + 64 * w + i;
                    sw[b >> 5] |= 1u << (b & 31);
                }
        }
    CU_TRY(cudaMalloc((void **)&t->signs, sizeof(uint32_t) * nw));
    CU_TRY(cudaMemcpy(t->signs, sw.data(), sizeof(uint32_t) * nw, cudaMemcpyHostToDevice));
    CU_TRY(cudaMalloc((void **)&t->bad, sizeof(int)));
    const int none = INT32_MAX;
    CU_TRY(cudaMemcpy(t->bad, &none, sizeof(int), cudaMemcpyHostToDevice));
    CU_TRY(cudaMalloc((void **)&t->xr, sizeof(float) * (size_t)d->cols_p));
    CU_TRY(cudaMalloc((void **)&t->part, sizeof(float) * (size_t)t->n_tiles));
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hq_upload(const kvq_cuda_hq_desc *d, const void *codes, size_t codes_size,
                                         const void *norms, size_t norms_size, const void *offsets,
                                         size_t offsets_size, kvq_cuda_hq **out, kvq_err *err) {
    *out = NULL;
    int64_t n_tiles, n_groups;
    kvq_status st = check_desc(d, codes_size, norms_size, (const uint8_t *)offsets, offsets_size, &n_tiles, &n_groups, err);
    if (st) return st;
    char why[256];
    if (!kvq_cuda_device_count(why, sizeof why)) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda hyperquant: %s", why);
    kvq_cuda_hq *t = (kvq_cuda_hq *)calloc(1, sizeof *t);
    if (!t) return kvq_err_set(err, KVQ_ERR_NOMEM, "cuda hyperquant: out of memory");
    t->d = *d;
    t->n_tiles = n_tiles;
    t->n_groups = n_groups;
    t->tpr = d->cols_p / d->tile;
    t->codes_size = codes_size;
    t->compact = codes_size + norms_size + offsets_size;
    st = upload(t, codes, norms, offsets, err);
    if (st) {
        kvq_cuda_hq_free(t);
        return st;
    }
    *out = t;
    return KVQ_OK;
}

extern "C" size_t kvq_cuda_hq_compact_bytes(const kvq_cuda_hq *t) { return t->compact; }

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

extern "C" kvq_status kvq_cuda_hq_check(kvq_cuda_hq *t, kvq_err *err) {
    int bad = 0;
    const int none = INT32_MAX;
    CU_TRY(cudaDeviceSynchronize());
    CU_TRY(cudaMemcpy(&bad, t->bad, sizeof(int), cudaMemcpyDeviceToHost));
    if (bad == none) return KVQ_OK;
    CU_TRY(cudaMemcpy(t->bad, &none, sizeof(int), cudaMemcpyHostToDevice));
    return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: corrupt Rice stream in group %d", bad);
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

// ---- buffers and timing for C callers

extern "C" kvq_status kvq_cuda_malloc(void **d, size_t size, kvq_err *err) {
    *d = NULL;
    CU_TRY(cudaMalloc(d, size));
    return KVQ_OK;
}
extern "C" void kvq_cuda_free(void *d) { cudaFree(d); }
extern "C" kvq_status kvq_cuda_copy(void *dst, const void *src, size_t size, int to_device, kvq_err *err) {
    CU_TRY(cudaMemcpy(dst, src, size, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
    return KVQ_OK;
}
extern "C" kvq_status kvq_cuda_memset(void *d, int byte, size_t size, kvq_err *err) {
    CU_TRY(cudaMemset(d, byte, size));
    return KVQ_OK;
}
extern "C" kvq_status kvq_cuda_sync(kvq_err *err) {
    CU_TRY(cudaDeviceSynchronize());
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_copy_bandwidth(size_t size, int reps, double *bytes_per_s, kvq_err *err) {
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    CU_TRY(cudaMalloc(&a, size));
    CU_TRY(cudaMalloc(&b, size));
    CU_TRY(cudaMemset(a, 0x5a, size));
    CU_TRY(cudaEventCreate(&e0));
    CU_TRY(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int i = 0; i < reps + 3; i++) {
        CU_TRY(cudaEventRecord(e0));
        CU_TRY(cudaMemcpy(i & 1 ? a : b, i & 1 ? b : a, size, cudaMemcpyDeviceToDevice));
        CU_TRY(cudaEventRecord(e1));
        CU_TRY(cudaEventSynchronize(e1));
        float m;
        CU_TRY(cudaEventElapsedTime(&m, e0, e1));
        if (i >= 3) ms.push_back(m); // the first copies warm up
    }
    std::sort(ms.begin(), ms.end());
    *bytes_per_s = 2.0 * (double)size / (ms[ms.size() / 2] * 1e-3);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return KVQ_OK;
}
