// Shared pieces of the HyperQuant Rice-stream kernels (hq_upload.cu, hq_decode.cu,
// hq_matvec.cu): the device tensor, kernel parameters, the refill that feeds the shared word
// reader (kernels/bitword.h) from device memory, the lattice unstrip templates. Design and
// exactness argument: docs/CUDA.md.
#ifndef KVQ_CUDA_HQ_COMMON_CUH
#define KVQ_CUDA_HQ_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>


#include "kernels/bitword.h"
#include "kernels/cuda/cuda_check.cuh"
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

// ---- bit reader: the shared word reader (kernels/bitword.h) fed by aligned little-endian
// 32-bit words

struct Rd {
    const uint32_t *wp, *wend; // words at or past wend read as zero (corrupt streams stay in bounds)
    uint32_t nx0, nx1;         // the next two words, loaded early: their latency overlaps decoding
    kvq_bitword w;             // valid bits 0..n-1, zeros above
    int bad;
    uint32_t pos, limit; // bits consumed / group size in bits
};

__device__ __forceinline__ void rd_init(Rd &r, const uint8_t *codes, uint32_t o0, uint32_t o1) {
    uint32_t off = o0 & 3u;
    r.wp = reinterpret_cast<const uint32_t *>(codes + (o0 - off));
    r.wend = reinterpret_cast<const uint32_t *>(codes + ((o1 + 3u) & ~3u)) + 2; // inside CODES_PAD
    r.w.buf = (uint64_t)(*r.wp++) >> (8 * off);
    r.w.n = 32 - 8 * (int)off;
    r.nx0 = r.wp < r.wend ? r.wp[0] : 0u;
    r.nx1 = r.wp + 1 < r.wend ? r.wp[1] : 0u;
    r.wp += 2;
    r.bad = 0;
    r.pos = 0;
    r.limit = 8u * (o1 - o0);
}

__device__ __forceinline__ void rd_refill(Rd &r) {
    if (r.w.n < 32) {
        kvq_bitword_push(&r.w, r.nx0, 32);
        r.nx0 = r.nx1;
        r.nx1 = r.wp < r.wend ? *r.wp : 0u;
        r.wp++;
    }
}

// Rare path: a codeword longer than the buffered bits (long unary run or corrupt stream).
__device__ __forceinline__ uint32_t rd_rice_slow(Rd &r, int k) {
    uint64_t q = 0;
    while (kvq_bitword_skip_zeros(&r.w, &q)) {
        rd_refill(r);
        if (r.pos + q > r.limit || q > (0xffffffffull >> k)) {
            r.bad = 1;
            return 0;
        }
    }
    kvq_bitword_end_run(&r.w, &q);
    rd_refill(r); // n >= 32 > k
    r.pos += (uint32_t)(q + 1 + k);
    return kvq_bitword_rice_low(&r.w, k, q, KVQ_HQ_SYM_LIMIT, &r.bad);
}

__device__ __forceinline__ uint32_t rd_rice(Rd &r, int k) {
    rd_refill(r); // now n >= 32: the low word is all valid bits
    uint32_t v;
    int len;
    if (kvq_bitword_rice(&r.w, k, KVQ_HQ_SYM_LIMIT, &v, &len, &r.bad)) { // the low word holds it
        r.pos += (uint32_t)len;
        return v;
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

static inline Params params_of(const kvq_cuda_hq *t) {
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

#endif
