// Scores and value sums over the KV execution forms (kvexec.h): HQMQ rows of per-chunk codes
// (two chunks' codewords per 256-bit vector, radii converted eight at a time) and lattice-code
// rows (eight int8/int16 codes per vector). Each token's row is read once for the block of
// queries; AVX2 + FMA where the CPU has it, else the plain references.
#include "kernels/cpu/kvexec.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/kv_hqkv.h"
#include "kernels/splitmix.h"

static inline float ldf(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
static inline uint32_t hq_code(const uint8_t *cd, int wide, int k) {
    if (wide) {
        uint32_t c;
        memcpy(&c, cd + 4 * (size_t)k, 4);
        return c;
    }
    uint16_t c;
    memcpy(&c, cd + 2 * (size_t)k, 2);
    return c;
}
static inline float lat_code(const uint8_t *cd, int wide, int j) {
    if (wide) {
        int16_t c;
        memcpy(&c, cd + 2 * (size_t)j, 2);
        return (float)c;
    }
    return (float)(int8_t)cd[j];
}

// ---- plain references

void kvq_kvx_hqmq_score_ref(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt,
                            const float *q, int n_q, int ldq, float *s, int lds) {
    const uint32_t m = (1u << ib) - 1u;
    for (int t = 0; t < nt; t++) {
        const uint8_t *row = x + (size_t)t * xs;
        const float sc = ldf(row);
        for (int i = 0; i < n_q; i++) {
            const float *qi = q + (size_t)i * ldq;
            float a = 0;
            for (int k = 0; k < nch; k++) {
                const uint32_t c = hq_code(row + 4, wide, k);
                const float *w = cb + 4 * (size_t)(c & m), *qk = qi + 4 * k;
                a += (float)(c >> ib) * (qk[0] * w[0] + qk[1] * w[1] + qk[2] * w[2] + qk[3] * w[3]);
            }
            s[(size_t)i * lds + t] = sc * a;
        }
    }
}

void kvq_kvx_hqmq_vsum_ref(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt,
                           const float *p, int ldp, int n_q, float *out) {
    const uint32_t m = (1u << ib) - 1u;
    const int dp = 4 * nch;
    for (int t = 0; t < nt; t++) {
        const uint8_t *row = x + (size_t)t * xs;
        const float sc = ldf(row);
        for (int i = 0; i < n_q; i++) {
            const float w = p[(size_t)i * ldp + t] * sc;
            float *o = out + (size_t)i * dp;
            if (w == 0) continue;
            for (int k = 0; k < nch; k++) {
                const uint32_t c = hq_code(row + 4, wide, k);
                const float wr = w * (float)(c >> ib), *cw = cb + 4 * (size_t)(c & m);
                for (int j = 0; j < 4; j++) o[4 * k + j] += wr * cw[j];
            }
        }
    }
}

void kvq_kvx_lat_score_ref(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                           const float *U, const float *q, int n_q, int ldq, float *s, int lds) {
    for (int t = 0; t < nt; t++) {
        const uint8_t *row = x + (size_t)t * xs;
        const float f = ldf(row) * gmul;
        for (int i = 0; i < n_q; i++) {
            const float *qi = q + (size_t)i * ldq;
            float a = 0;
            for (int j = 0; j < d; j++) {
                float v = lat_code(row + 8, wide, j);
                if (emb) v *= emb[j];
                if (U) v -= U[(size_t)t * d + j];
                a += qi[j] * v;
            }
            s[(size_t)i * lds + t] = f * a;
        }
    }
}

void kvq_kvx_lat_vsum_ref(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                          const float *U, const float *p, int ldp, int n_q, float *out) {
    for (int t = 0; t < nt; t++) {
        const uint8_t *row = x + (size_t)t * xs;
        const float f = ldf(row) * gmul;
        for (int i = 0; i < n_q; i++) {
            const float w = p[(size_t)i * ldp + t] * f;
            float *o = out + (size_t)i * d;
            if (w == 0) continue;
            for (int j = 0; j < d; j++) {
                float v = lat_code(row + 8, wide, j);
                if (emb) v *= emb[j];
                if (U) v -= U[(size_t)t * d + j];
                o[j] += w * v;
            }
        }
    }
}

// ---- AVX2 + FMA. The bodies take the query count as a constant (1..8, one instantiation each)
// so the per-query accumulators stay in registers.

#define K2 __attribute__((target("avx2,fma")))
#define K2I K2 static inline __attribute__((always_inline))

K2I float k2_hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The radii of chunks k..k+7 as floats, and the 4-lane broadcasts of pairs (2j, 2j+1) of them.
K2I __m256 hq_radii8(const uint8_t *cd, int wide, int k, int ib) {
    const __m256i c = wide ? _mm256_loadu_si256((const __m256i *)(cd + 4 * (size_t)k))
                           : _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(cd + 2 * (size_t)k)));
    return _mm256_cvtepi32_ps(_mm256_srl_epi32(c, _mm_cvtsi32_si128(ib)));
}
K2I __m256 hq_pair_radii(__m256 rf, int j) {
    const __m256i idx = _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1);
    return _mm256_permutevar8x32_ps(rf, idx);
}
// r_k·cb[idx_k] | r_k+1·cb[idx_k+1] for the pair (k, k+1) from its radii rr.
K2I __m256 hq_pair(const float *cb, const uint8_t *cd, int wide, int k, uint32_t m, __m256 rr) {
    const uint32_t c0 = hq_code(cd, wide, k), c1 = hq_code(cd, wide, k + 1);
    const __m256 w = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(cb + 4 * (size_t)(c0 & m))),
                                          _mm_loadu_ps(cb + 4 * (size_t)(c1 & m)), 1);
    return _mm256_mul_ps(w, rr);
}

K2I void hq_score_n(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt, const float *q,
                    int ldq, float *s, int lds, const int NQ) {
    const uint32_t m = (1u << ib) - 1u;
    for (int t = 0; t < nt; t++) {
        const uint8_t *row = x + (size_t)t * xs, *cd = row + 4;
        __m256 acc[8];
        __m128 tl[8];
        for (int i = 0; i < NQ; i++) acc[i] = _mm256_setzero_ps(), tl[i] = _mm_setzero_ps();
        int k = 0;
        for (; k + 8 <= nch; k += 8) {
            const __m256 rf = hq_radii8(cd, wide, k, ib);
            for (int j = 0; j < 4; j++) {
                const __m256 v = hq_pair(cb, cd, wide, k + 2 * j, m, hq_pair_radii(rf, j));
                for (int i = 0; i < NQ; i++)
                    acc[i] = _mm256_fmadd_ps(v, _mm256_loadu_ps(q + (size_t)i * ldq + 4 * (k + 2 * j)), acc[i]);
            }
        }
        for (; k < nch; k++) {
            const uint32_t c = hq_code(cd, wide, k);
            const __m128 v = _mm_mul_ps(_mm_loadu_ps(cb + 4 * (size_t)(c & m)), _mm_set1_ps((float)(c >> ib)));
            for (int i = 0; i < NQ; i++) tl[i] = _mm_fmadd_ps(v, _mm_loadu_ps(q + (size_t)i * ldq + 4 * k), tl[i]);
        }
        const float sc = ldf(row);
        for (int i = 0; i < NQ; i++)
            s[(size_t)i * lds + t] = sc * (k2_hsum(acc[i]) + k2_hsum(_mm256_insertf128_ps(_mm256_setzero_ps(), tl[i], 0)));
    }
}

K2I void hq_vsum_n(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt, const float *p,
                   int ldp, float *out, const int NQ) {
    const uint32_t m = (1u << ib) - 1u;
    const size_t dp = 4 * (size_t)nch;
    for (int t = 0; t < nt; t++) {
        const uint8_t *row = x + (size_t)t * xs, *cd = row + 4;
        const float sc = ldf(row);
        float w[8];
        int any = 0;
        for (int i = 0; i < NQ; i++) w[i] = p[(size_t)i * ldp + t] * sc, any |= w[i] != 0;
        if (!any) continue;
        int k = 0;
        for (; k + 8 <= nch; k += 8) {
            const __m256 rf = hq_radii8(cd, wide, k, ib);
            for (int j = 0; j < 4; j++) {
                const __m256 v = hq_pair(cb, cd, wide, k + 2 * j, m, hq_pair_radii(rf, j));
                for (int i = 0; i < NQ; i++) {
                    float *o = out + i * dp + 4 * (size_t)(k + 2 * j);
                    _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_set1_ps(w[i]), v, _mm256_loadu_ps(o)));
                }
            }
        }
        for (; k < nch; k++) {
            const uint32_t c = hq_code(cd, wide, k);
            const __m128 v = _mm_mul_ps(_mm_loadu_ps(cb + 4 * (size_t)(c & m)), _mm_set1_ps((float)(c >> ib)));
            for (int i = 0; i < NQ; i++) {
                float *o = out + i * dp + 4 * (size_t)k;
                _mm_storeu_ps(o, _mm_fmadd_ps(_mm_set1_ps(w[i]), v, _mm_loadu_ps(o)));
            }
        }
    }
}

// Eight codes from j as floats, times emb, minus U (each optional).
K2I __m256 lat_codes8(const uint8_t *cd, int wide, int j, const float *emb, const float *Ut) {
    const __m256i c = wide ? _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(cd + 2 * (size_t)j)))
                           : _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(cd + j)));
    __m256 v = _mm256_cvtepi32_ps(c);
    if (emb) v = _mm256_mul_ps(v, _mm256_loadu_ps(emb + j));
    if (Ut) v = _mm256_sub_ps(v, _mm256_loadu_ps(Ut + j));
    return v;
}
static inline float lat_code1(const uint8_t *cd, int wide, int j, const float *emb, const float *Ut) {
    float v = lat_code(cd, wide, j);
    if (emb) v *= emb[j];
    if (Ut) v -= Ut[j];
    return v;
}

K2I void lat_score_n(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb, const float *U,
                     const float *q, int ldq, float *s, int lds, const int NQ) {
    for (int t = 0; t < nt; t++) {
        const uint8_t *row = x + (size_t)t * xs, *cd = row + 8;
        const float *Ut = U ? U + (size_t)t * d : NULL;
        __m256 acc[8];
        for (int i = 0; i < NQ; i++) acc[i] = _mm256_setzero_ps();
        int j = 0;
        for (; j + 8 <= d; j += 8) {
            const __m256 v = lat_codes8(cd, wide, j, emb, Ut);
            for (int i = 0; i < NQ; i++) acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)i * ldq + j), v, acc[i]);
        }
        const float f = ldf(row) * gmul;
        for (int i = 0; i < NQ; i++) {
            float a = k2_hsum(acc[i]);
            for (int jj = j; jj < d; jj++) a += q[(size_t)i * ldq + jj] * lat_code1(cd, wide, jj, emb, Ut);
            s[(size_t)i * lds + t] = f * a;
        }
    }
}

K2I void lat_vsum_n(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb, const float *U,
                    const float *p, int ldp, float *out, const int NQ) {
    for (int t = 0; t < nt; t++) {
        const uint8_t *row = x + (size_t)t * xs, *cd = row + 8;
        const float *Ut = U ? U + (size_t)t * d : NULL;
        const float f = ldf(row) * gmul;
        float w[8];
        int any = 0;
        for (int i = 0; i < NQ; i++) w[i] = p[(size_t)i * ldp + t] * f, any |= w[i] != 0;
        if (!any) continue;
        int j = 0;
        for (; j + 8 <= d; j += 8) {
            const __m256 v = lat_codes8(cd, wide, j, emb, Ut);
            for (int i = 0; i < NQ; i++) {
                float *o = out + (size_t)i * d + j;
                _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_set1_ps(w[i]), v, _mm256_loadu_ps(o)));
            }
        }
        for (; j < d; j++) {
            const float v = lat_code1(cd, wide, j, emb, Ut);
            for (int i = 0; i < NQ; i++) out[(size_t)i * d + j] += w[i] * v;
        }
    }
}

// One function per query count 1..8 (the bodies above with NQ constant).
#define K2_CASES(CALL) \
    switch (nb) { case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; case 4: CALL(4); break; \
                  case 5: CALL(5); break; case 6: CALL(6); break; case 7: CALL(7); break; default: CALL(8); break; }

K2 static void hq_score_avx2(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt, const float *q,
                             int n_q, int ldq, float *s, int lds) {
    for (int i0 = 0; i0 < n_q; i0 += 8) {
        const int nb = n_q - i0 < 8 ? n_q - i0 : 8;
        const float *qb = q + (size_t)i0 * ldq;
        float *sb = s + (size_t)i0 * lds;
#define HQS(N) hq_score_n(cb, ib, wide, nch, x, xs, nt, qb, ldq, sb, lds, N)
        K2_CASES(HQS)
#undef HQS
    }
}

K2 static void hq_vsum_avx2(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt, const float *p,
                            int ldp, int n_q, float *out) {
    for (int i0 = 0; i0 < n_q; i0 += 8) {
        const int nb = n_q - i0 < 8 ? n_q - i0 : 8;
        const float *pb = p + (size_t)i0 * ldp;
        float *ob = out + (size_t)i0 * 4 * nch;
#define HQV(N) hq_vsum_n(cb, ib, wide, nch, x, xs, nt, pb, ldp, ob, N)
        K2_CASES(HQV)
#undef HQV
    }
}

K2 static void lat_score_avx2(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                              const float *U, const float *q, int n_q, int ldq, float *s, int lds) {
    for (int i0 = 0; i0 < n_q; i0 += 8) {
        const int nb = n_q - i0 < 8 ? n_q - i0 : 8;
        const float *qb = q + (size_t)i0 * ldq;
        float *sb = s + (size_t)i0 * lds;
#define LS(N) lat_score_n(x, xs, wide, d, nt, gmul, emb, U, qb, ldq, sb, lds, N)
        K2_CASES(LS)
#undef LS
    }
}

K2 static void lat_vsum_avx2(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                             const float *U, const float *p, int ldp, int n_q, float *out) {
    for (int i0 = 0; i0 < n_q; i0 += 8) {
        const int nb = n_q - i0 < 8 ? n_q - i0 : 8;
        const float *pb = p + (size_t)i0 * ldp;
        float *ob = out + (size_t)i0 * d;
#define LV(N) lat_vsum_n(x, xs, wide, d, nt, gmul, emb, U, pb, ldp, ob, N)
        K2_CASES(LV)
#undef LV
    }
}

// ---- HyperQuant-KV's dither on E8: the draws four at a time (64-bit multiplies from three 32-bit
// ones), the 53-bit values to double exactly in two 32-bit halves, and z from the generator's
// structure: z_j = (D_j·u_j + N_j·u_j+1) + u_7 with D = (4, 2, …, 2, 0), N = (−2 ×6, 0, 0) — the
// scalar sum's nonzero terms in its order (the products are exact: powers of two).

void kvq_kvx_e8_dither_z_ref(uint64_t s0, int nb, float *z) {
    for (int b = 0; b < nb; b++) {
        float u[8];
        for (int i = 0; i < 8; i++)
            u[i] = (float)((double)(int64_t)(kvq_splitmix64_mix(s0 + (uint64_t)(8 * b + i + 2) * KVQ_SPLITMIX_GOLDEN) >> 11) *
                           0x1.0p-53);
        for (int j = 0; j < 8; j++) {
            float a = 0.0f;
            for (int i = 0; i < 8; i++) a += u[i] * kvq_hk_gen(KVQ_HK_E8, i, j);
            z[8 * b + j] = a;
        }
    }
}

#define K2N __attribute__((target("avx2")))
#define K2NI K2N static inline __attribute__((always_inline))

K2NI __m256i mul64c(__m256i a, uint64_t c) { // low 64 bits of a·c per lane
    const __m256i lo = _mm256_set1_epi64x((long long)(c & 0xffffffffu)), hi = _mm256_set1_epi64x((long long)(c >> 32));
    const __m256i p0 = _mm256_mul_epu32(a, lo), p1 = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), lo), p2 = _mm256_mul_epu32(a, hi);
    return _mm256_add_epi64(p0, _mm256_slli_epi64(_mm256_add_epi64(p1, p2), 32));
}
K2NI __m128 draws4(__m256i x) { // float(mix(x) >> 11 · 2^−53), four lanes
    x = mul64c(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), 0xbf58476d1ce4e5b9ull);
    x = mul64c(_mm256_xor_si256(x, _mm256_srli_epi64(x, 27)), 0x94d049bb133111ebull);
    x = _mm256_srli_epi64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 31)), 11);
    const __m256i magic = _mm256_set1_epi64x(0x4330000000000000ll); // 2^52: its mantissa takes 32 bits exactly
    const __m256d two52 = _mm256_set1_pd(0x1.0p52);
    const __m256d lo = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi64x(0xffffffffll)), magic)), two52);
    const __m256d hi = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(x, 32), magic)), two52);
    const __m256d v = _mm256_add_pd(_mm256_mul_pd(hi, _mm256_set1_pd(0x1.0p32)), lo); // exact: < 2^53
    return _mm256_cvtpd_ps(_mm256_mul_pd(v, _mm256_set1_pd(0x1.0p-53)));
}

K2N static void e8_dither_z_avx2(uint64_t s0, int nb, float *z) {
    const uint64_t G = KVQ_SPLITMIX_GOLDEN;
    const __m256i step = _mm256_setr_epi64x(0, (long long)G, (long long)(2 * G), (long long)(3 * G));
    const __m256 D = _mm256_setr_ps(4, 2, 2, 2, 2, 2, 2, 0), N = _mm256_setr_ps(-2, -2, -2, -2, -2, -2, 0, 0);
    const __m256i up = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 7), last = _mm256_set1_epi32(7);
    for (int b = 0; b < nb; b++) {
        const uint64_t base = s0 + (uint64_t)(8 * b + 2) * G;
        const __m128 u0 = draws4(_mm256_add_epi64(_mm256_set1_epi64x((long long)base), step));
        const __m128 u1 = draws4(_mm256_add_epi64(_mm256_set1_epi64x((long long)(base + 4 * G)), step));
        const __m256 u = _mm256_insertf128_ps(_mm256_castps128_ps256(u0), u1, 1);
        const __m256 a = _mm256_add_ps(_mm256_mul_ps(D, u), _mm256_mul_ps(N, _mm256_permutevar8x32_ps(u, up)));
        _mm256_storeu_ps(z + 8 * b, _mm256_add_ps(a, _mm256_permutevar8x32_ps(u, last)));
    }
}

void kvq_kvx_e8_dither_z(uint64_t s0, int nb, float *z) {
    if (kvq_cpu_features() & KVQ_CPU_AVX2) e8_dither_z_avx2(s0, nb, z);
    else kvq_kvx_e8_dither_z_ref(s0, nb, z);
}

// ---- dispatch

void kvq_kvx_hqmq_score(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt,
                        const float *q, int n_q, int ldq, float *s, int lds) {
    if (kvq_cpu_features() & KVQ_CPU_AVX2) hq_score_avx2(cb, ib, wide, nch, x, xs, nt, q, n_q, ldq, s, lds);
    else kvq_kvx_hqmq_score_ref(cb, ib, wide, nch, x, xs, nt, q, n_q, ldq, s, lds);
}

void kvq_kvx_hqmq_vsum(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt,
                       const float *p, int ldp, int n_q, float *out) {
    if (kvq_cpu_features() & KVQ_CPU_AVX2) hq_vsum_avx2(cb, ib, wide, nch, x, xs, nt, p, ldp, n_q, out);
    else kvq_kvx_hqmq_vsum_ref(cb, ib, wide, nch, x, xs, nt, p, ldp, n_q, out);
}

void kvq_kvx_lat_score(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                       const float *U, const float *q, int n_q, int ldq, float *s, int lds) {
    if (kvq_cpu_features() & KVQ_CPU_AVX2) lat_score_avx2(x, xs, wide, d, nt, gmul, emb, U, q, n_q, ldq, s, lds);
    else kvq_kvx_lat_score_ref(x, xs, wide, d, nt, gmul, emb, U, q, n_q, ldq, s, lds);
}

void kvq_kvx_lat_vsum(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                      const float *U, const float *p, int ldp, int n_q, float *out) {
    if (kvq_cpu_features() & KVQ_CPU_AVX2) lat_vsum_avx2(x, xs, wide, d, nt, gmul, emb, U, p, ldp, n_q, out);
    else kvq_kvx_lat_vsum_ref(x, xs, wide, d, nt, gmul, emb, U, p, ldp, n_q, out);
}
