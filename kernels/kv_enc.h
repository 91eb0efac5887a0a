// The per-element arithmetic of the GPU KV encoders (kernels/cuda/kv_enc.cu: TurboQuant,
// qturbo, turboquant-prod, OCTOPUS, HQMQ; HyperQuant-KV's lattice code is kernels/kv_hqkv.h),
// written once for C and CUDA in the CPU encoders' float operations (libconv/kv/kv_turbo.c,
// kv_octopus.c, kv_hqmq.c, kvutil.c): explicitly rounded on the device,
// where a*b + c would otherwise contract to an FMA (the CPU build, x86-64-v2, has none). The
// CPU test (tests/test_cuda_kv.c, test_enc_emulated) runs these in the kernels' order against
// the CPU encoders, byte for byte.
#ifndef KVQ_KV_ENC_H
#define KVQ_KV_ENC_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KVQ_KE_HD static __host__ __device__ __forceinline__
#else
#define KVQ_KE_HD static inline
#endif
#ifdef __CUDA_ARCH__
#define KVQ_KE_MUL(a, b) __fmul_rn(a, b)
#define KVQ_KE_ADD(a, b) __fadd_rn(a, b)
#define KVQ_KE_SUB(a, b) __fsub_rn(a, b)
#define KVQ_KE_DIV(a, b) __fdiv_rn(a, b)
#define KVQ_KE_SQRT(a) __fsqrt_rn(a)
#else
#define KVQ_KE_MUL(a, b) ((a) * (b))
#define KVQ_KE_ADD(a, b) ((a) + (b))
#define KVQ_KE_SUB(a, b) ((a) - (b))
#define KVQ_KE_DIV(a, b) ((a) / (b))
#define KVQ_KE_SQRT(a) sqrtf(a)
#endif

/** The pair (j, j + h) of butterfly stage h that worker t < n/2 takes (kvq_wht's pairs:
 *  blocks of 2h, j = block start + t % h). */
KVQ_KE_HD int kvq_ke_wht_j(int h, int t) { return (t / h) * 2 * h + (t % h); }
/** kvq_kv_wht's normalization 1.0f / sqrtf(n), formed in float. */
KVQ_KE_HD float kvq_ke_wht_scale(int n) { return KVQ_KE_DIV(1.0f, KVQ_KE_SQRT((float)n)); }

/** Component k of the quaternion product a·b (kvq_quat_mul: each term rounded, summed from the left). */
KVQ_KE_HD float kvq_ke_quat_comp(const float *a, const float *b, int k) {
    const float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
    if (k == 0) return KVQ_KE_SUB(KVQ_KE_SUB(KVQ_KE_SUB(KVQ_KE_MUL(a0, b0), KVQ_KE_MUL(a1, b1)), KVQ_KE_MUL(a2, b2)), KVQ_KE_MUL(a3, b3));
    if (k == 1) return KVQ_KE_SUB(KVQ_KE_ADD(KVQ_KE_ADD(KVQ_KE_MUL(a0, b1), KVQ_KE_MUL(a1, b0)), KVQ_KE_MUL(a2, b3)), KVQ_KE_MUL(a3, b2));
    if (k == 2) return KVQ_KE_ADD(KVQ_KE_ADD(KVQ_KE_SUB(KVQ_KE_MUL(a0, b2), KVQ_KE_MUL(a1, b3)), KVQ_KE_MUL(a2, b0)), KVQ_KE_MUL(a3, b1));
    return KVQ_KE_ADD(KVQ_KE_SUB(KVQ_KE_ADD(KVQ_KE_MUL(a0, b3), KVQ_KE_MUL(a1, b2)), KVQ_KE_MUL(a2, b1)), KVQ_KE_MUL(a3, b0));
}

/** kvq_nearest_sorted: the first of the K sorted centroids whose upper midpoint
 *  0.5f·(c[m] + c[m+1]) is ≥ x (binary search). */
KVQ_KE_HD int kvq_ke_nearest(const float *c, int K, float x) {
    int lo = 0, hi = K - 1;
    while (lo < hi) {
        const int m = (lo + hi) >> 1;
        if (x > KVQ_KE_MUL(0.5f, KVQ_KE_ADD(c[m], c[m + 1]))) lo = m + 1;
        else hi = m;
    }
    return lo;
}

/** kvq_oct_encode (eq. 5): the octahedral (ξ, η) of a 3-vector, sign(0) = +1. */
KVQ_KE_HD void kvq_ke_oct_map(const float *n, float *xi, float *eta) {
    float l = KVQ_KE_ADD(KVQ_KE_ADD(fabsf(n[0]), fabsf(n[1])), fabsf(n[2]));
    if (l < 1e-30f) l = 1e-30f;
    const float px = KVQ_KE_DIV(n[0], l), py = KVQ_KE_DIV(n[1], l), pz = KVQ_KE_DIV(n[2], l);
    if (pz >= 0) *xi = px, *eta = py;
    else {
        *xi = KVQ_KE_MUL(px >= 0 ? 1.0f : -1.0f, KVQ_KE_SUB(1.0f, fabsf(py)));
        *eta = KVQ_KE_MUL(py >= 0 ? 1.0f : -1.0f, KVQ_KE_SUB(1.0f, fabsf(px)));
    }
}

/** oct_window: the candidate centroid indices [lo, hi] along one coordinate (value v, nearest
 *  centroid j of K) for the rounding mode (0 scalar, 2 local 2x2, 3 local 3x3, 9 full). */
KVQ_KE_HD void kvq_ke_oct_window(const float *cxi, int K, int round, float v, int j, int *lo, int *hi) {
    if (round == 9) {
        *lo = 0, *hi = K - 1;
        return;
    }
    if (round == 3) *lo = j - 1, *hi = j + 1;
    else if (round == 2) {
        if (v >= cxi[j]) *lo = j, *hi = j + 1;
        else *lo = j - 1, *hi = j;
    } else *lo = *hi = j;
    if (*lo < 0) *lo = 0;
    if (*hi > K - 1) *hi = K - 1;
}

/** t·n as oct_enc sums it: (t0 n0 + t1 n1) + t2 n2. */
KVQ_KE_HD float kvq_ke_dot3(const float *t, const float *n) {
    return KVQ_KE_ADD(KVQ_KE_ADD(KVQ_KE_MUL(t[0], n[0]), KVQ_KE_MUL(t[1], n[1])), KVQ_KE_MUL(t[2], n[2]));
}

/** One triplet tv (rotated frame) of oct_enc: (ξ, η), their nearest centroids, the best
 *  direction of the rounding window by tv·n̂ (strictly greater wins, a before b), ρ̂ nearest
 *  clip(best, 0, 1) (scalar mode: nearest ‖tv‖). dirs (2^bdir, 2^bdir, 3), cxi (2^bdir), crho
 *  (2^bnorm). @return the GPU code (a·2^bdir + b) | ρ << 2·bdir; *dir = a·2^bdir + b, *jn = ρ. */
KVQ_KE_HD uint32_t kvq_ke_oct_triplet(const float *tv, const float *dirs, const float *cxi, const float *crho, int bdir, int bnorm,
                                      int round, int *dir, int *jn) {
    const int KD = 1 << bdir;
    float xi, eta;
    kvq_ke_oct_map(tv, &xi, &eta);
    const int jx = kvq_ke_nearest(cxi, KD, xi), jy = kvq_ke_nearest(cxi, KD, eta);
    int x0, x1, y0, y1;
    kvq_ke_oct_window(cxi, KD, round, xi, jx, &x0, &x1);
    kvq_ke_oct_window(cxi, KD, round, eta, jy, &y0, &y1);
    float best = -INFINITY;
    int bx = jx, by = jy;
    if (round == 0) best = kvq_ke_dot3(tv, dirs + 3 * (jx * KD + jy));
    else
        for (int a = x0; a <= x1; a++)
            for (int b = y0; b <= y1; b++) {
                const float sc = kvq_ke_dot3(tv, dirs + 3 * (a * KD + b));
                if (sc > best) best = sc, bx = a, by = b;
            }
    const float target = round == 0 ? KVQ_KE_SQRT(KVQ_KE_ADD(KVQ_KE_ADD(KVQ_KE_MUL(tv[0], tv[0]), KVQ_KE_MUL(tv[1], tv[1])), KVQ_KE_MUL(tv[2], tv[2])))
                                    : fminf(fmaxf(best, 0.0f), 1.0f);
    *jn = kvq_ke_nearest(crho, 1 << bnorm, target);
    *dir = bx * KD + by;
    return ((uint32_t)bx << bdir | (uint32_t)by) | (uint32_t)*jn << (2 * bdir);
}

/** Word w of lane L of a row of lanes of fixed-width codes: bits [32w, 32w + 32) of the lane's
 *  `per` cw-bit codes code[per·L .. per·L + per) (code j at bit j·cw; kv_gpu.c oct_io's and
 *  hqmq_io's placement: OCTOPUS keys 6 triplet codes a lane, HQMQ 4 chunk codes). */
KVQ_KE_HD uint32_t kvq_ke_lane_word(const uint32_t *code, int per, int L, int w, int cw) {
    uint32_t word = 0;
    for (int j = 0; j < per; j++) {
        const int off = j * cw - 32 * w;
        if (off >= 32 || off + cw <= 0) continue;
        const uint32_t cv = code[per * L + j];
        word |= off >= 0 ? cv << off : cv >> -off;
    }
    return word;
}

/** kvq_hqmq_search (kv_hqmq.c): the joint index s·24 + p maximizing <u, q_p q_s> over the S
 *  secondary quaternions sec (S, 4), by w = u q_s* and the best Hurwitz unit of w (the largest
 *  |w_k|, or the four signs when ‖w‖₁/2 is larger); the first of equal scores wins. */
KVQ_KE_HD int kvq_ke_hqmq_search(const float *sec, int S, const float *u) {
    int best = 0;
    float bs = -INFINITY;
    for (int si = 0; si < S; si++) {
        const float *q = sec + 4 * si;
        const float cj[4] = {q[0], -q[1], -q[2], -q[3]};
        float w[4];
        for (int k = 0; k < 4; k++) w[k] = kvq_ke_quat_comp(u, cj, k);
        int k = 0, neg = 0;
        float a = 0, l1 = 0;
        for (int j = 0; j < 4; j++) {
            const float f = fabsf(w[j]);
            l1 = KVQ_KE_ADD(l1, f);
            neg |= (w[j] < 0) << j;
            if (f > a) a = f, k = j;
        }
        int p;
        float v;
        if (KVQ_KE_MUL(0.5f, l1) > a) v = KVQ_KE_MUL(0.5f, l1), p = 8 + neg;
        else v = a, p = 2 * k + (w[k] < 0);
        if (v > bs) bs = v, best = si * 24 + p;
    }
    return best;
}

#endif
