// HyperQuant-KV on the GPU (issue 20): the parts of libconv/kv/kv_hqkv.c that the attention
// kernel repeats per token — the subtractive dither U (splitmix64 stream of (seed, counter),
// z = Σ u_i b_i, U = z − Q_Λ(z)) and the lattices' nearest points it needs — written once for
// C and CUDA, in the CPU's float operations (explicitly rounded on the device, where a*b + c
// would otherwise contract to an FMA), so a lane regenerates the same U as the CPU decoder.
// The CPU test (tests/test_cuda_kv.c, layout read-back) runs these against the codec's decoder.
// Also the code width both layouts use (kvq_hk_width) and the CPU cache's execution row:
//   fp32 γ | u32 dither counter (the GPU side data, as is) | d codes c_j (the integer lattice
//   code, not offset), int8 when the width is <= 8 bits, else int16
#ifndef KVQ_KV_HQKV_H
#define KVQ_KV_HQKV_H

#include <math.h>
#include <stdint.h>

#include "kernels/splitmix.h"

#ifdef __CUDACC__
#define KVQ_HK_HD static __host__ __device__ __forceinline__
#else
#define KVQ_HK_HD static inline
#endif
#ifdef __CUDA_ARCH__
#define KVQ_HK_MUL(a, b) __fmul_rn(a, b)
#define KVQ_HK_ADD(a, b) __fadd_rn(a, b)
#define KVQ_HK_SUB(a, b) __fsub_rn(a, b)
#define KVQ_HK_DIV(a, b) __fdiv_rn(a, b)
#else
#define KVQ_HK_MUL(a, b) ((a) * (b))
#define KVQ_HK_ADD(a, b) ((a) + (b))
#define KVQ_HK_SUB(a, b) ((a) - (b))
#define KVQ_HK_DIV(a, b) ((a) / (b))
#endif

// Lattice ids (libconv/quant/lattice.h's kvq_lattice: e8, d4, a2, z).
#define KVQ_HK_E8 0
#define KVQ_HK_D4 1
#define KVQ_HK_A2 2
#define KVQ_HK_Z 3
#define KVQ_HK_SQRT3_F 1.7320508075688772f

KVQ_HK_HD int kvq_hk_dim(int lat) { return lat == KVQ_HK_E8 ? 8 : lat == KVQ_HK_D4 ? 4 : lat == KVQ_HK_A2 ? 2 : 1; }

/** Generator row i, coordinate j of the integer lattice (kv_hqkv.c gen_matrix): 2·E8 with the
 *  standard E8 basis, D4, A2int rows (√3, 1), (0, 2), Z. */
KVQ_HK_HD float kvq_hk_gen(int lat, int i, int j) {
    if (lat == KVQ_HK_E8) {
        if (i == 0) return j == 0 ? 4.0f : 0.0f;
        if (i == 7) return 1.0f;
        return j == i - 1 ? -2.0f : j == i ? 2.0f : 0.0f;
    }
    if (lat == KVQ_HK_D4) return i == 0 ? (j == 0 ? 2.0f : 0.0f) : (j == 0 || j == i) ? 1.0f : 0.0f;
    if (lat == KVQ_HK_A2) return i == 0 ? (j == 0 ? KVQ_HK_SQRT3_F : 1.0f) : (j == 1 ? 2.0f : 0.0f);
    return 1.0f;
}

// D_n nearest point (lattice.c dn_nearest): round; if the sum is odd, re-round the first
// coordinate of largest rounding error the other way.
KVQ_HK_HD void kvq_hk_dn(const float *y, int n, int32_t *a) {
    int sum = 0, worst = 0;
    float wd = -1.0f;
    for (int i = 0; i < n; i++) {
        const float r = rintf(y[i]);
        a[i] = (int32_t)r;
        sum += a[i];
        const float d = fabsf(KVQ_HK_SUB(y[i], r));
        if (d > wd) wd = d, worst = i;
    }
    if (sum & 1) a[worst] += (y[worst] >= (float)a[worst]) ? 1 : -1;
}

/** Nearest point of the lattice (lattice.h: kvq_lattice_nearest, its scalar references; same
 *  ties): x in real coordinates, c the integer code (A2: c[0] = ny, c[1] = nx). */
KVQ_HK_HD void kvq_hk_nearest(int lat, const float *x, int32_t *c) {
    if (lat == KVQ_HK_E8) { // 2E8 = 2D8 ∪ (2D8 + 1), distances summed in lattice.c's order
        float y0[8], y1[8], e0[8], e1[8];
        int32_t a0[8], a1[8];
        for (int i = 0; i < 8; i++) y0[i] = KVQ_HK_MUL(0.5f, x[i]), y1[i] = KVQ_HK_MUL(0.5f, KVQ_HK_SUB(x[i], 1.0f));
        kvq_hk_dn(y0, 8, a0);
        kvq_hk_dn(y1, 8, a1);
        for (int i = 0; i < 8; i++) {
            const float u = KVQ_HK_SUB(y0[i], (float)a0[i]), v = KVQ_HK_SUB(y1[i], (float)a1[i]);
            e0[i] = KVQ_HK_MUL(u, u), e1[i] = KVQ_HK_MUL(v, v);
        }
        const float d0 = KVQ_HK_ADD(KVQ_HK_ADD(KVQ_HK_ADD(e0[0], e0[4]), KVQ_HK_ADD(e0[2], e0[6])),
                                    KVQ_HK_ADD(KVQ_HK_ADD(e0[1], e0[5]), KVQ_HK_ADD(e0[3], e0[7])));
        const float d1 = KVQ_HK_ADD(KVQ_HK_ADD(KVQ_HK_ADD(e1[0], e1[4]), KVQ_HK_ADD(e1[2], e1[6])),
                                    KVQ_HK_ADD(KVQ_HK_ADD(e1[1], e1[5]), KVQ_HK_ADD(e1[3], e1[7])));
        for (int i = 0; i < 8; i++) c[i] = d1 < d0 ? 2 * a1[i] + 1 : 2 * a0[i];
    } else if (lat == KVQ_HK_D4) {
        kvq_hk_dn(x, 4, c);
    } else if (lat == KVQ_HK_A2) { // best of the two rectangular cosets
        const float s3 = KVQ_HK_SQRT3_F, yy = KVQ_HK_DIV(x[0], s3);
        const int32_t ey = 2 * (int32_t)rintf(KVQ_HK_MUL(0.5f, yy)), ex = 2 * (int32_t)rintf(KVQ_HK_MUL(0.5f, x[1]));
        const int32_t oy = 2 * (int32_t)rintf(KVQ_HK_MUL(0.5f, KVQ_HK_SUB(yy, 1.0f))) + 1,
                      ox = 2 * (int32_t)rintf(KVQ_HK_MUL(0.5f, KVQ_HK_SUB(x[1], 1.0f))) + 1;
        const float dey = KVQ_HK_SUB(x[0], KVQ_HK_MUL(s3, (float)ey)), dex = KVQ_HK_SUB(x[1], (float)ex);
        const float doy = KVQ_HK_SUB(x[0], KVQ_HK_MUL(s3, (float)oy)), dox = KVQ_HK_SUB(x[1], (float)ox);
        if (KVQ_HK_ADD(KVQ_HK_MUL(doy, doy), KVQ_HK_MUL(dox, dox)) < KVQ_HK_ADD(KVQ_HK_MUL(dey, dey), KVQ_HK_MUL(dex, dex)))
            c[0] = oy, c[1] = ox;
        else
            c[0] = ey, c[1] = ex;
    } else {
        c[0] = (int32_t)rintf(x[0]);
    }
}

/** Real coordinate j (inside its lattice block) of integer code value v: v, or √3·v for A2's
 *  first coordinate (kvq_lattice_embed). */
KVQ_HK_HD float kvq_hk_embed(int lat, int j, int32_t v) { return lat == KVQ_HK_A2 && j == 0 ? KVQ_HK_MUL(KVQ_HK_SQRT3_F, (float)v) : (float)v; }

/** Bits of a code that holds every lattice code the encoder can emit at α√d = scale, offset
 *  by 2^(bits−1) (docs/KV.md): |x̃_j| <= α√d (a coordinate of the scaled unit token), |U_j|
 *  and |c_j − z_j| <= the covering radius R (2E8: 2, D4: 1, A2int: 2/√3, Z: 1/2), so
 *  |c_j| <= α√d + 2R; one spare. */
KVQ_HK_HD int kvq_hk_width(int lat, double scale) {
    const double R = lat == KVQ_HK_D4 ? 1.0 : lat == KVQ_HK_A2 ? 1.1547005383792515 : lat == KVQ_HK_Z ? 0.5 : 2.0;
    const double cmax = scale * (1 + 1e-4) + 2 * R + 1;
    int w = 2;
    while (w < 31 && (double)((1u << (w - 1)) - 1) < cmax) w++;
    return w;
}

/** CPU execution row of a token: the side data (fp32 γ, u32 counter) then d codes, int8 for
 *  width <= 8, int16 up to 16 (wider: no execution form). */
#define KVQ_HK_XSIDE 8
KVQ_HK_HD size_t kvq_hk_xbytes(int d, int width) { return KVQ_HK_XSIDE + (size_t)d * (width <= 8 ? 1 : 2); }

/** The dither of dims [dim0, dim0 + n_dims) of the token with counter ctr of the state with
 *  seed `seed` (kv_hqkv.c hk_dither): dim0 and n_dims multiples of the lattice dimension.
 *  The state's stream is splitmix64 from seed ^ (0xD17E5 + ctr·2^20), its first output
 *  dropped; the draw of dim k is output k + 1, so a lane starts at its own dims. */
KVQ_HK_HD void kvq_hk_dither(int lat, uint64_t seed, uint32_t ctr, int dim0, int n_dims, float *U) {
    const int n = kvq_hk_dim(lat);
    const uint64_t s0 = seed ^ (0xD17E5ull + ((uint64_t)ctr << 20));
    for (int b = 0; b < n_dims; b += n) {
        float z[8], y[8];
        int32_t q[8];
        for (int j = 0; j < n; j++) z[j] = 0.0f;
        for (int i = 0; i < n; i++) {
            const uint64_t r = kvq_splitmix64_mix(s0 + (uint64_t)(dim0 + b + i + 2) * KVQ_SPLITMIX_GOLDEN);
            const float u = (float)((double)(r >> 11) * 0x1.0p-53);
            for (int j = 0; j < n; j++) z[j] = KVQ_HK_ADD(z[j], KVQ_HK_MUL(u, kvq_hk_gen(lat, i, j)));
        }
        kvq_hk_nearest(lat, z, q);
        for (int j = 0; j < n; j++) y[j] = kvq_hk_embed(lat, j, q[j]), U[b + j] = KVQ_HK_SUB(z[j], y[j]);
    }
}

#endif
