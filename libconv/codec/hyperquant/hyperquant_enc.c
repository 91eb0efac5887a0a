// HyperQuant encoding: RHT per tile, norm codes, lattice quantization + strip at the SNR
// that rate control picks (calibration table, then a secant correction on this tensor's
// exact effective size), Rice parameters by exact count, and the grouped bitstream.
// The encoder streams tiles: every pass (norms, each rate-control pass, the writer) reads a
// tile's source values (in->x, or in->src's bytes when x is NULL), rotates, quantizes and
// consumes it, keeping per-tile and per-group counts only; the rotated tiles and the last
// pass's symbols are cached (each) only while they fit opts.rot_cache bytes. So memory is the
// source plus the output plus ~0.3 B per weight, whatever the tensor size.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include <immintrin.h>

#include "kernels/cpu/wht.h"
#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/codec/hyperquant/hqcal.h"
#include "libconv/quant/rice.h"

#define RATE_TOL 0.002 // stop correcting once |effective − target| ≤ this (spec: ±0.01)
#define RATE_MAXIT 10
#define KVQ_HQ_ROT_CACHE ((size_t)256 << 20) // default rotated-tile cache (bytes): within the +256 MB of the memory bound
#define SMALL_SYM 64                          // per-group exact bins; larger symbols go straight into the sums
#define NQ (KVQ_RICE_KMAX + 2)               // per group and class: Σ(v >> k) for k = 0..KMAX, then the count

kvq_hq_opts kvq_hq_opts_default(kvq_lattice l, double bps) {
    kvq_hq_opts o = {l, bps, NAN, 128, 8, 0, 0, KVQ_CAST_NONE, KVQ_HQ_ROT_CACHE, 0, 0, 0.01, NULL}; // nb=8: best measured (docs/HYPERQUANT.md)
    return o;
}

int kvq_hq_tile_for(int64_t cols, int max_tile, int64_t *cols_p) {
    int64_t T = cols & -cols;
    if (T > max_tile) T = max_tile;
    if (T >= KVQ_HQ_MIN_TILE) { *cols_p = cols; return (int)T; }
    T = max_tile;
    while (T > KVQ_HQ_MIN_TILE && T / 2 >= cols) T /= 2;
    *cols_p = (cols + T - 1) / T * T;
    return (int)T;
}

typedef struct {
    const kvq_hq_opts *o;
    const kvq_codec_input *in;
    kvq_hq_header h;
    int nt, n, ncls;
    int avx2;         // the CPU has AVX2 (E8 quantized eight vectors at a time)
    int cls[8];       // symbol class of each lattice coordinate
    int64_t numel, tpr, n_tiles, n_groups;
    const float *sgn; // (cols_p) ±1 signs
    float *rot;       // (rows, cols_p) H·D·x per tile (unnormalized butterfly), or NULL: recomputed per pass
    uint32_t *sym;    // (rows, cols_p) the last pass's symbols, or NULL: the writer quantizes again
    double *invn;     // per tile 1/decoded norm (0 for zero tiles)
    uint32_t *ncode;  // per tile norm code
    uint64_t *gq;     // (n_groups, ncls, NQ) per-group Rice sums of the last pass
    uint64_t *gbits;  // per group Rice bits
    // results of the last pass
    double snr_db;
    double noise;     // Σ squared error of the last pass, in the orthonormal rotated domain
    float *fb;        // LDLQ feedback (kvq_hq_ldlq_feedback), or NULL: each vector rounded on its own
    double *tacc;     // (2, n_tiles) per-tile sums, added up in tile order afterwards, so the totals
                      // (and the predicted MSE stored in the file) do not depend on the thread count
    uint64_t code_bits, codes_bytes, clipped;
    size_t total_bytes;
} enc_ctx;

// ---- one tile: source values, rotation, codes

// The source values of tile t (zero past the last column): a pointer into in->x for a full
// float32 tile, else converted into xt (T floats) and xt returned.
static const float *tile_source(const enc_ctx *e, int64_t t, float *xt) {
    const int T = e->h.tile;
    const int64_t cols = e->h.cols, row = t / e->tpr, c0 = (t % e->tpr) * T;
    const int64_t nc = c0 + T <= cols ? T : (c0 < cols ? cols - c0 : 0);
    const kvq_codec_input *in = e->in;
    if (in->x && nc == T) return in->x + row * cols + c0;
    if (in->x) memcpy(xt, in->x + row * cols + c0, sizeof(float) * (size_t)nc);
    else
        kvq_dtype_to_f32(in->src->dtype,
                         (const uint8_t *)in->src->data + (size_t)(row * cols + c0) * kvq_dtype_size(in->src->dtype),
                         (size_t)nc, xt);
    for (int64_t i = nc; i < T; i++) xt[i] = 0.0f;
    return xt;
}

// H·D·x of tile t: from the cache, or computed into buf (T floats).
static const float *tile_rot(const enc_ctx *e, int64_t t, float *buf) {
    const int T = e->h.tile;
    if (e->rot) return e->rot + t * T;
    const float *s = e->sgn + (t % e->tpr) * T, *x = tile_source(e, t, buf);
    for (int i = 0; i < T; i++) buf[i] = x[i] * s[i];
    kvq_wht(buf, T);
    return buf;
}

// kvq_lattice_strip for E8 (c a member: c − cb is even, so the halvings are exact shifts).
static inline void strip_e8(const int32_t *c, uint32_t *sym) {
#if defined(__SSE4_1__)
    const int32_t cb = c[0] & 1;
    const __m128i cbv = _mm_set1_epi32(cb);
    const __m128i sa = _mm_srai_epi32(_mm_sub_epi32(_mm_loadu_si128((const __m128i *)c), cbv), 1);
    const __m128i sb = _mm_srai_epi32(_mm_sub_epi32(_mm_loadu_si128((const __m128i *)(c + 4)), cbv), 1);
    __m128i sm = _mm_add_epi32(sa, _mm_blend_epi16(sb, _mm_setzero_si128(), 0xC0)); // lanes 0..6
    sm = _mm_add_epi32(sm, _mm_shuffle_epi32(sm, _MM_SHUFFLE(1, 0, 3, 2)));
    sm = _mm_add_epi32(sm, _mm_shuffle_epi32(sm, _MM_SHUFFLE(2, 3, 0, 1)));
    const int32_t p = _mm_cvtsi128_si32(sm), s7 = _mm_extract_epi32(sb, 3);
    _mm_storeu_si128((__m128i *)sym, _mm_xor_si128(_mm_slli_epi32(sa, 1), _mm_srai_epi32(sa, 31)));
    _mm_storeu_si128((__m128i *)(sym + 4), _mm_xor_si128(_mm_slli_epi32(sb, 1), _mm_srai_epi32(sb, 31)));
    sym[7] = 2u * kvq_zigzag((s7 - (p & 1)) / 2) + (uint32_t)cb;
#else
    kvq_lattice_strip(KVQ_LAT_E8, c, sym);
#endif
}

// ---- E8, eight vectors at a time (AVX2)

// Transposes 8 rows of 8 floats in place (row i lane j <-> row j lane i).
__attribute__((target("avx2"))) static inline void tr8(__m256 *m) {
    __m256 t0 = _mm256_unpacklo_ps(m[0], m[1]), t1 = _mm256_unpackhi_ps(m[0], m[1]);
    __m256 t2 = _mm256_unpacklo_ps(m[2], m[3]), t3 = _mm256_unpackhi_ps(m[2], m[3]);
    __m256 t4 = _mm256_unpacklo_ps(m[4], m[5]), t5 = _mm256_unpackhi_ps(m[4], m[5]);
    __m256 t6 = _mm256_unpacklo_ps(m[6], m[7]), t7 = _mm256_unpackhi_ps(m[6], m[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    m[0] = _mm256_permute2f128_ps(u0, u4, 0x20); m[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    m[2] = _mm256_permute2f128_ps(u2, u6, 0x20); m[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    m[4] = _mm256_permute2f128_ps(u0, u4, 0x31); m[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    m[6] = _mm256_permute2f128_ps(u2, u6, 0x31); m[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// D8 nearest of 8 points at once, coordinates in y[0..7] (lane = point), by d8_nearest_sse's
// rule (lattice.c): round; when the sum is odd, move the first coordinate of largest
// rounding error towards y. r gets the point; returns the squared distances, summed in that
// function's order ((e0²+e4²)+(e2²+e6²)) + ((e1²+e5²)+(e3²+e7²)).
__attribute__((target("avx2"))) static inline __m256 d8_nearest_x8(const __m256 *y, __m256 *r) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), one = _mm256_set1_ps(1.0f);
    __m256 d[8], a[8], m = _mm256_setzero_ps();
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < 8; i++) {
        r[i] = _mm256_round_ps(y[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        sum = _mm256_add_epi32(sum, _mm256_cvtps_epi32(r[i]));
        d[i] = _mm256_sub_ps(y[i], r[i]);
        a[i] = _mm256_and_ps(d[i], absm);
        m = _mm256_max_ps(m, a[i]);
    }
    __m256 todo = _mm256_castsi256_ps(_mm256_slli_epi32(sum, 31)); // sign bit set where the sum is odd
    todo = _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(todo), 31));
    for (int i = 0; i < 8; i++) {
        __m256 w = _mm256_and_ps(todo, _mm256_cmp_ps(a[i], m, _CMP_EQ_OQ));
        todo = _mm256_andnot_ps(w, todo);
        __m256 step = _mm256_blendv_ps(_mm256_set1_ps(-1.0f), one, _mm256_cmp_ps(d[i], _mm256_setzero_ps(), _CMP_GE_OQ));
        r[i] = _mm256_add_ps(r[i], _mm256_and_ps(step, w));
    }
    __m256 e[8];
    for (int i = 0; i < 8; i++) {
        e[i] = _mm256_sub_ps(y[i], r[i]);
        e[i] = _mm256_mul_ps(e[i], e[i]);
    }
    __m256 s04 = _mm256_add_ps(e[0], e[4]), s26 = _mm256_add_ps(e[2], e[6]);
    __m256 s15 = _mm256_add_ps(e[1], e[5]), s37 = _mm256_add_ps(e[3], e[7]);
    return _mm256_add_ps(_mm256_add_ps(s04, s26), _mm256_add_ps(s15, s37));
}

// tile_quant for E8 in rice mode on vectors [0, nv·8) of r, nv a multiple of 8, eight at a
// time: codes, symbols and each vector's squared error are those of kvq_e8_nearest,
// strip_e8 and tile_quant's loop (same operations, same order). @return Σ errors in
// vector order added to tn.
__attribute__((target("avx2"))) static double tile_quant_e8_avx2(const float *r, float g, int nv, int32_t *c,
                                                                 uint32_t *s, double tn) {
    const __m256 vg = _mm256_set1_ps(g), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f),
                 two = _mm256_set1_ps(2.0f);
    for (int v0 = 0; v0 < nv * 8; v0 += 64) {
        __m256 u[8], y0[8], y1[8], a[8], b[8], cf[8];
        for (int j = 0; j < 8; j++) u[j] = _mm256_loadu_ps(r + v0 + 8 * j);
        tr8(u); // u[i]: coordinate i of the 8 vectors
        for (int i = 0; i < 8; i++) {
            u[i] = _mm256_mul_ps(u[i], vg);
            y0[i] = _mm256_mul_ps(half, u[i]);
            y1[i] = _mm256_mul_ps(half, _mm256_sub_ps(u[i], one));
        }
        __m256 d0 = d8_nearest_x8(y0, a), d1 = d8_nearest_x8(y1, b);
        __m256 sel = _mm256_cmp_ps(d1, d0, _CMP_LT_OQ); // odd coset when strictly closer
        __m256 vn = _mm256_setzero_ps();
        __m256i ci[8];
        for (int i = 0; i < 8; i++) {
            cf[i] = _mm256_blendv_ps(_mm256_mul_ps(two, a[i]), _mm256_add_ps(_mm256_mul_ps(two, b[i]), one), sel);
            ci[i] = _mm256_cvtps_epi32(cf[i]);
            __m256 dd = _mm256_sub_ps(u[i], cf[i]);
            vn = _mm256_add_ps(vn, _mm256_mul_ps(dd, dd));
        }
        float vns[8];
        _mm256_storeu_ps(vns, vn);
        for (int j = 0; j < 8; j++) tn += (double)vns[j];
        // strip (strip_e8): s = (c − cb) >> 1 for the first 7, the 8th from the parity of their sum
        const __m256i cb = _mm256_and_si256(ci[0], _mm256_set1_epi32(1));
        __m256i sy[8], p = _mm256_setzero_si256();
        for (int i = 0; i < 8; i++) {
            __m256i si = _mm256_srai_epi32(_mm256_sub_epi32(ci[i], cb), 1);
            if (i < 7) {
                p = _mm256_add_epi32(p, si);
                sy[i] = _mm256_xor_si256(_mm256_slli_epi32(si, 1), _mm256_srai_epi32(si, 31));
            } else {
                __m256i t = _mm256_sub_epi32(si, _mm256_and_si256(p, _mm256_set1_epi32(1)));
                t = _mm256_srai_epi32(_mm256_add_epi32(t, _mm256_srli_epi32(t, 31)), 1); // C's t / 2
                t = _mm256_xor_si256(_mm256_slli_epi32(t, 1), _mm256_srai_epi32(t, 31));
                sy[7] = _mm256_add_epi32(_mm256_slli_epi32(t, 1), cb);
            }
        }
        __m256 *cm = (__m256 *)ci, *sm = (__m256 *)sy;
        tr8(cm);
        tr8(sm);
        for (int j = 0; j < 8; j++) {
            _mm256_storeu_si256((__m256i *)(c + v0 + 8 * j), _mm256_castps_si256(cm[j]));
            _mm256_storeu_si256((__m256i *)(s + v0 + 8 * j), _mm256_castps_si256(sm[j]));
        }
    }
    return tn;
}

int kvq_hq_e8_quant8(const float *r, float g, int nv, int32_t *c, uint32_t *s, double *tn) {
    if (!__builtin_cpu_supports("avx2") || nv % 8) return -1;
    *tn = tile_quant_e8_avx2(r, g, nv, c, s, *tn);
    return 0;
}

// Quantizes rotated tile r at gain g: lattice codes into c, symbols (stripped, or the clipped
// codes in int8 mode) into s. @return the tile's squared error in the scaled domain.
static double tile_quant(const enc_ctx *e, const float *r, float g, int32_t *c, uint32_t *s, uint64_t *clipped) {
    const int T = e->h.tile, n = e->n, int8 = e->h.int8, a2 = e->h.lat == KVQ_LAT_A2;
    const kvq_lattice lat = e->h.lat;
    double tn = 0.0;
    int v0 = 0;
    if (lat == KVQ_LAT_E8 && !int8 && e->avx2 && T >= 64) {
        tn = tile_quant_e8_avx2(r, g, T / 64 * 8, c, s, tn);
        v0 = T / 64 * 64;
    }
    for (int v = v0; v < T; v += n) {
        float u[8];
        int32_t *cv = c + v;
        for (int i = 0; i < n; i++) u[i] = r[v + i] * g;
        kvq_lattice_nearest(lat, u, cv);
        if (int8)
            for (int i = 0; i < n; i++) {
                int32_t q = cv[i] > 127 ? 127 : (cv[i] < -127 ? -127 : cv[i]);
                *clipped += q != cv[i];
                cv[i] = q;
            }
        float vn = 0.0f;
        for (int i = 0; i < n; i++) {
            float d = u[i] - ((a2 && !(i & 1)) ? KVQ_SQRT3_F * (float)cv[i] : (float)cv[i]);
            vn += d * d;
        }
        tn += (double)vn;
        if (int8) {
            for (int i = 0; i < n; i++) s[v + i] = (uint32_t)cv[i];
        } else if (lat == KVQ_LAT_E8) {
            strip_e8(cv, s + v);
        } else {
            kvq_lattice_strip(lat, cv, s + v);
        }
    }
    return tn;
}

static int64_t group_end(const enc_ctx *e, int64_t g) {
    int64_t t1 = (g + 1) * KVQ_HQ_GROUP_TILES;
    return t1 < e->n_tiles ? t1 : e->n_tiles;
}

// ---- quantization passes and rate control

static json_t *make_params(const enc_ctx *e, int with_k, int with_seed) {
    char seed[17];
    snprintf(seed, sizeof seed, "%016llx", (unsigned long long)e->h.seed);
    json_t *p = json_pack("{s:i,s:s,s:s,s:s,s:i,s:I,s:f,s:f,s:i,s:i}", "v", KVQ_HQ_FORMAT_VERSION, "lattice",
                          kvq_lattice_name(e->h.lat), "mode", e->h.int8 ? "int8" : "rice", "cast",
                          kvq_cast_name(e->h.cast), "tile", e->h.tile, "cols_p", (json_int_t)e->h.cols_p,
                          "alpha", e->h.alpha, "snr_db", e->snr_db, "norm_bits", e->h.norm_bits, "norm_exp",
                          e->h.norm_exp);
    if (!p) return NULL;
    if (with_k && !e->h.int8) {
        json_t *k = json_array();
        for (int c = 0; c < e->ncls; c++) json_array_append_new(k, json_integer(e->h.k[c]));
        json_object_set_new(p, "k", k);
    }
    if (with_seed) json_object_set_new(p, "seed", json_string(seed));
    return p;
}

static size_t json_len(json_t *p) {
    char *s = json_dumps(p, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    free(s);
    json_decref(p);
    return n;
}

static size_t norms_bytes(const enc_ctx *e) { return (size_t)((e->n_tiles * e->h.norm_bits + 7) / 8); }
static size_t offsets_bytes(const enc_ctx *e) { return e->h.int8 ? 0 : (size_t)(e->n_groups + 1) * 4; }

// Adds group-local symbol counts h (ncls × SMALL_SYM) into the group's sums q (ncls × NQ).
static void group_sums(const enc_ctx *e, uint32_t (*h)[SMALL_SYM], uint64_t *q) {
    for (int c = 0; c < e->ncls; c++) {
        uint64_t *qc = q + c * NQ;
        for (uint32_t v = 0; v < SMALL_SYM; v++) {
            const uint64_t m = h[c][v];
            if (!m) continue;
            qc[NQ - 1] += m;
            for (int k = 0; k <= KVQ_RICE_KMAX && (v >> k); k++) qc[k] += m * (uint64_t)(v >> k);
        }
    }
}

// LDLQ rounding of every row at gain α/n̂ per tile: the row's n-vectors left to right, each
// rounded at its own rotated values plus the feedback of the errors (in the unnormalized rotated
// domain) of the vectors before it. The symbols go into e->sym (every tile's: the writer cannot
// re-round a tile alone), per-tile errors into e->tacc as quant_pass's, measured against the
// original values. With zero feedback the codes are tile_quant's (the same float products into the
// same nearest-point rule).
static void ldlq_pass(enc_ctx *e, double alpha) {
    const int T = e->h.tile, n = e->n, a2 = e->h.lat == KVQ_LAT_A2;
    const int64_t C = e->h.cols_p, tpr = e->tpr;
    const float sq3 = KVQ_SQRT3_F;
#pragma omp parallel num_threads(e->nt)
    {
        float *err = malloc(sizeof(float) * (size_t)C), buf[KVQ_HQ_MAX_TILE];
#pragma omp for schedule(dynamic, 4)
        for (int64_t row = 0; row < e->h.rows; row++) {
            if (!err) continue; // KVQ_ASSERT below
            for (int64_t j = 0; j < tpr; j++) {
                const int64_t t = row * tpr + j;
                const float *r = tile_rot(e, t, buf);
                uint32_t *st = e->sym + t * T;
                e->tacc[t] = 0.0;
                if (e->invn[t] == 0.0) { // a zero tile decodes to zeros: its error is its values
                    for (int i = 0; i < T; i++) err[j * T + i] = r[i];
                    continue;
                }
                const float g = (float)(alpha * e->invn[t]);
                double tn = 0.0;
                for (int v = 0; v < T; v += n) {
                    const int64_t k = (j * T + v) / n; // block index in the row
                    double corr[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    if (k > 0) {
                        const float *A = e->fb + (size_t)(n * n) * (size_t)(k * (k - 1) / 2);
                        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                        for (int64_t i = 0; i < k * n; i++) {
                            const float ei = err[i];
                            for (int q = 0; q < n; q++) acc[q] += A[i * n + q] * ei;
                        }
                        for (int q = 0; q < n; q++) corr[q] = acc[q];
                    }
                    float u[8];
                    int32_t cv[8];
                    for (int q = 0; q < n; q++) u[q] = (float)((double)r[v + q] + corr[q]) * g;
                    kvq_lattice_nearest(e->h.lat, u, cv);
                    for (int q = 0; q < n; q++) {
                        const float rec = (a2 && !(q & 1)) ? sq3 * (float)cv[q] : (float)cv[q];
                        const double d = (double)(r[v + q] * g) - (double)rec;
                        tn += d * d;
                        err[j * T + v + q] = (float)((double)r[v + q] - (double)rec / (double)g);
                    }
                    if (e->h.lat == KVQ_LAT_E8) strip_e8(cv, st + v);
                    else kvq_lattice_strip(e->h.lat, cv, st + v);
                }
                const double sc = 1.0 / (alpha * e->invn[t]);
                e->tacc[t] = tn * sc * sc / (double)T;
            }
        }
        KVQ_ASSERT(err != NULL); // a few KB per thread
        free(err);
    }
}

// One quantization pass at snr_db: per-tile errors, per-group Rice sums (so the Rice
// parameters and every group's exact size are known without keeping the symbols), exact
// stored size. The Rice parameter minimises the same exact bit count as kvq_rice_best_k.
static int quant_pass(enc_ctx *e, double snr_db) {
    const int T = e->h.tile, n = e->n, ncls = e->ncls, int8 = e->h.int8;
    e->snr_db = snr_db;
    e->h.alpha = kvq_hq_alpha(e->h.lat, snr_db);
    const double alpha = e->h.alpha;
    uint64_t clipped = 0;
    double noise = 0.0;
    if (e->fb) ldlq_pass(e, alpha);
#pragma omp parallel for num_threads(e->nt) schedule(static) reduction(+ : clipped)
    for (int64_t g = 0; g < e->n_groups; g++) {
        float buf[KVQ_HQ_MAX_TILE];
        int32_t c[KVQ_HQ_MAX_TILE];
        uint32_t s[KVQ_HQ_MAX_TILE];
        uint32_t h[2][SMALL_SYM], h4[4][SMALL_SYM];
        uint64_t *q = e->gq ? e->gq + g * ncls * NQ : NULL;
        if (q) memset(q, 0, sizeof(uint64_t) * (size_t)(ncls * NQ));
        memset(h, 0, sizeof h);
        if (ncls == 1) memset(h4, 0, sizeof h4);
        for (int64_t t = g * KVQ_HQ_GROUP_TILES; t < group_end(e, g); t++) {
            if (!e->fb) e->tacc[t] = 0.0;
            if (e->invn[t] == 0.0) continue;
            uint32_t *st = e->sym ? e->sym + t * T : s;
            double tn = 0.0;
            if (!e->fb) tn = tile_quant(e, tile_rot(e, t, buf), (float)(alpha * e->invn[t]), c, st, &clipped);
            if (!int8 && ncls == 1) // four interleaved counters: repeated symbols do not wait on each other's stores
                for (int i = 0; i < T; i++) {
                    const uint32_t v = st[i];
                    if (__builtin_expect(v < SMALL_SYM, 1)) h4[i & 3][v]++;
                    else {
                        q[NQ - 1]++;
                        for (int k = 0; k <= KVQ_RICE_KMAX; k++) q[k] += v >> k;
                    }
                }
            else if (!int8)
                for (int i = 0; i < T; i++) {
                    const uint32_t v = st[i];
                    const int cl = e->cls[i & (n - 1)]; // n is a power of two
                    if (__builtin_expect(v < SMALL_SYM, 1)) h[cl][v]++;
                    else {
                        uint64_t *qc = q + cl * NQ;
                        qc[NQ - 1]++;
                        for (int k = 0; k <= KVQ_RICE_KMAX; k++) qc[k] += v >> k;
                    }
                }
            double sc = 1.0 / (alpha * e->invn[t]); // n̂/α: orthonormal error = (u − ĉ)·n̂/(α√T)
            if (!e->fb) e->tacc[t] = tn * sc * sc / (double)T;
        }
        if (ncls == 1)
            for (int v = 0; v < SMALL_SYM; v++) h[0][v] = h4[0][v] + h4[1][v] + h4[2][v] + h4[3][v];
        if (q) group_sums(e, h, q);
    }
    e->clipped = clipped;
    for (int64_t t = 0; t < e->n_tiles; t++) noise += e->tacc[t];
    e->noise = noise;
    uint64_t bits = 0, bytes = 0;
    if (int8) {
        bits = 8 * (uint64_t)(e->h.rows * e->h.cols_p);
        bytes = bits / 8;
    } else {
        uint64_t tot[2][NQ];
        memset(tot, 0, sizeof tot);
        for (int64_t g = 0; g < e->n_groups; g++)
            for (int c = 0; c < ncls; c++)
                for (int k = 0; k < NQ; k++) tot[c][k] += e->gq[(g * ncls + c) * NQ + k];
        for (int c = 0; c < ncls; c++) { // smallest k on ties, as kvq_rice_best_k
            uint64_t bb = 0;
            for (int k = 0; k <= KVQ_RICE_KMAX; k++) {
                uint64_t b = tot[c][k] + tot[c][NQ - 1] * (uint64_t)(k + 1);
                if (k == 0 || b < bb) { bb = b; e->h.k[c] = k; }
            }
        }
        for (int64_t g = 0; g < e->n_groups; g++) {
            uint64_t gb = 0;
            for (int c = 0; c < ncls; c++) {
                const uint64_t *qc = e->gq + (g * ncls + c) * NQ;
                gb += qc[e->h.k[c]] + qc[NQ - 1] * (uint64_t)(e->h.k[c] + 1);
            }
            e->gbits[g] = gb;
            bits += gb;
            bytes += (gb + 7) / 8;
        }
    }
    e->code_bits = bits;
    e->codes_bytes = bytes;
    e->total_bytes = (size_t)bytes + norms_bytes(e) + offsets_bytes(e) + json_len(make_params(e, 1, 1));
    return 0;
}

static double eff_bpw(const enc_ctx *e) { return 8.0 * (double)e->total_bytes / (double)e->numel; }

// Picks the SNR: table lookup on the code-rate target, then secant steps on the exact
// effective rate of this tensor until within RATE_TOL (or the table alone if asked).
static int rate_control(enc_ctx *e, int *iters) {
    const kvq_hq_opts *o = e->o;
    if (!isnan(o->snr_db)) { *iters = 1; return quant_pass(e, o->snr_db); }
    double side = 8.0 * ((double)norms_bytes(e) + (double)offsets_bytes(e) + 250.0) +
                  (e->h.int8 ? 0.0 : 3.5 * (double)e->n_groups);
    double code_target = e->h.int8 ? o->bps : o->bps - side / (double)e->numel;
    double s = kvq_hqcal_snr_for_rate(e->h.lat, code_target);
    if (s < 0.0) s = 0.0;
    if (s > 50.0) s = 50.0;
    if (quant_pass(e, s)) return -1;
    *iters = 1;
    if (o->table_only || e->h.int8) return 0;
    double best_s = s, best_err = eff_bpw(e) - o->bps, ps = NAN, perr = NAN;
    double err = best_err;
    while (fabs(err) > RATE_TOL && *iters < RATE_MAXIT) {
        double slope = (kvq_hqcal_rate_for_snr(e->h.lat, s + 0.5) - kvq_hqcal_rate_for_snr(e->h.lat, s - 0.5));
        if (!isnan(ps) && s != ps) {
            double sec = (err - perr) / (s - ps);
            if (sec > 0.02 && sec < 1.0) slope = sec;
        }
        if (!(slope > 0.02)) slope = 0.166; // 1 bit per 6.02 dB
        double ns = s - err / slope;
        if (ns < 0.0) ns = 0.0;
        if (ns > 50.0) ns = 50.0;
        if (ns == s) break;
        ps = s;
        perr = err;
        s = ns;
        if (quant_pass(e, s)) return -1;
        (*iters)++;
        err = eff_bpw(e) - o->bps;
        if (fabs(err) < fabs(best_err)) { best_err = err; best_s = s; }
    }
    if (s != best_s) {
        if (quant_pass(e, best_s)) return -1;
        (*iters)++;
    }
    return 0;
}

// ---- the grouped bitstream

// A group's Rice codewords go into dst (exactly ceil(bits/8) bytes, zeroed by the caller)
// through a register-resident 64-bit accumulator flushed 32 bits at a time; long codewords
// (> 32 bits) go through the reference writer.
typedef struct {
    uint8_t *dst;
    size_t cap, pos;
    uint64_t acc, total;
    int nb;
} group_writer;

static void gw_tile(group_writer *w, const uint32_t *s, int T, const int *kk, int n) {
    uint64_t acc = w->acc;
    int nb = w->nb;
    size_t pos = w->pos;
    for (int i = 0; i < T; i++) {
        const int k = kk[i & (n - 1)];
        const uint32_t v = s[i], q = v >> k;
        const int len = (int)q + 1 + k;
        if (__builtin_expect(len <= 32, 1)) {
            acc |= ((uint64_t)(1u << q) | ((uint64_t)(v & ((1u << k) - 1u)) << (q + 1))) << nb;
            nb += len;
        } else { // flush whole bytes, then the reference writer for this codeword
            kvq_bitwriter bw;
            bw.buf = w->dst; bw.cap = w->cap; bw.pos = pos; bw.acc = acc; bw.n = nb; bw.overflow = 0;
            kvq_bw_rice(&bw, v, k);
            pos = bw.pos; acc = bw.acc; nb = bw.n;
        }
        while (nb >= 32) {
            uint32_t lo = (uint32_t)acc;
            memcpy(w->dst + pos, &lo, 4); // little-endian hosts (x86, arm64)
            pos += 4;
            acc >>= 32;
            nb -= 32;
        }
    }
    w->acc = acc;
    w->nb = nb;
    w->pos = pos;
}

// gw_tile for one Rice parameter k, into a staging buffer with 8 bytes of room past any
// position reached: every codeword (≤ 32 bits, else the reference writer) is OR-ed in and the
// 64-bit accumulator stored whole, then advanced by its complete bytes: no branch per flush.
// tab: codeword | length << 32 of the symbols below SMALL_SYM (0 for those over 32 bits), from
// rice_tab (variable shifts are dear on x86-64-v2).
static void rice_tab(int k, uint64_t *tab) {
    for (uint32_t v = 0; v < SMALL_SYM; v++) {
        const uint32_t q = v >> k, len = q + 1 + (uint32_t)k;
        tab[v] = len > 32 ? 0 : (uint64_t)((((v & ((1u << k) - 1u)) << 1) | 1u) << q) | (uint64_t)len << 32;
    }
}

static void gw_tile_k(group_writer *w, const uint32_t *s, int T, int k, const uint64_t *tab) {
    uint64_t acc = w->acc;
    int nb = w->nb; // < 8 between codewords
    size_t pos = w->pos;
    uint8_t *d = w->dst;
    const uint32_t mask = (1u << k) - 1u;
    for (int i = 0; i < T; i++) {
        const uint32_t v = s[i];
        if (__builtin_expect(v < SMALL_SYM && tab[v], 1)) {
            acc |= (uint64_t)(uint32_t)tab[v] << nb;
            nb += (int)(tab[v] >> 32);
            memcpy(d + pos, &acc, 8); // little-endian hosts (x86, arm64)
            pos += (size_t)(nb >> 3);
            acc >>= nb & ~7;
            nb &= 7;
            continue;
        }
        const uint32_t q = v >> k;
        if (__builtin_expect(q + 1 + (uint32_t)k > 32, 0)) {
            kvq_bitwriter bw;
            bw.buf = d; bw.cap = w->cap; bw.pos = pos; bw.acc = acc; bw.n = nb; bw.overflow = 0;
            kvq_bw_rice(&bw, v, k);
            pos = bw.pos; acc = bw.acc; nb = bw.n;
            while (nb >= 8) { d[pos++] = (uint8_t)acc; acc >>= 8; nb -= 8; }
            continue;
        }
        acc |= (uint64_t)((((v & mask) << 1) | 1u) << q) << nb;
        nb += (int)q + 1 + k;
        memcpy(d + pos, &acc, 8); // little-endian hosts (x86, arm64)
        pos += (size_t)(nb >> 3);
        acc >>= nb & ~7;
        nb &= 7;
    }
    w->acc = acc;
    w->nb = nb;
    w->pos = pos;
}

// Flushes the last bits. @return bits written, or ~0 if the group overran its bytes.
static uint64_t gw_finish(group_writer *w) {
    w->total = 8 * (uint64_t)w->pos + (uint64_t)w->nb; // every flush and the long-codeword writer leave whole bytes
    while (w->nb > 0) {
        w->dst[w->pos++] = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nb -= 8;
    }
    return w->pos <= w->cap ? w->total : ~0ull;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

kvq_status kvq_hq_encode(const kvq_hq_opts *o, const kvq_codec_input *in, kvq_encoded *out,
                         float *recon, kvq_hq_stats *stats, kvq_err *err) {
    const char *name = in->src && in->src->name ? in->src->name : "(unnamed)";
    const int64_t rows = in->rows, cols = in->cols;
    memset(out, 0, sizeof *out);
    if (rows <= 0 || cols <= 0)
        return kvq_err_set(err, KVQ_ERR_ARG, "tensor '%s': hyperquant needs a non-empty matrix", name);
    if (!in->x && (!in->src || !in->src->data || kvq_tensor_numel(in->src) != rows * cols ||
                   (in->src->dtype != KVQ_DTYPE_F32 && in->src->dtype != KVQ_DTYPE_F16 &&
                    in->src->dtype != KVQ_DTYPE_BF16) ||
                   in->src->nbytes < (size_t)(rows * cols) * kvq_dtype_size(in->src->dtype)))
        return kvq_err_set(err, KVQ_ERR_ARG, "tensor '%s': hyperquant needs float32 values or an f32/f16/bf16 "
                           "source of %lld × %lld", name, (long long)rows, (long long)cols);
    if (o->max_tile < KVQ_HQ_MIN_TILE || o->max_tile > KVQ_HQ_MAX_TILE || (o->max_tile & (o->max_tile - 1)))
        return kvq_err_set(err, KVQ_ERR_ARG, "tensor '%s': tile %d is not a power of two in [16, 1024]", name,
                           o->max_tile);
    enc_ctx e = {0};
    e.o = o;
    e.in = in;
    e.nt = in->n_threads > 0 ? in->n_threads : omp_get_max_threads();
    if (e.nt > rows * cols / (1 << 18) + 1) e.nt = (int)(rows * cols / (1 << 18) + 1); // small tensors: no thread overhead
    e.h.lat = o->lat;
    e.h.int8 = o->int8;
    e.h.cast = o->cast;
    e.h.rows = rows;
    e.h.cols = cols;
    e.h.tile = kvq_hq_tile_for(cols, o->max_tile, &e.h.cols_p);
    e.h.norm_bits = o->norm_bits;
    e.h.seed = in->seed;
    e.n = kvq_lattice_dim(o->lat);
    e.avx2 = __builtin_cpu_supports("avx2") && !o->no_simd;
    e.ncls = kvq_lattice_classes(o->lat);
    for (int i = 0; i < e.n; i++) e.cls[i] = kvq_lattice_symbol_class(o->lat, i);
    e.numel = rows * cols;
    e.tpr = e.h.cols_p / e.h.tile;
    e.n_tiles = rows * e.tpr;
    e.n_groups = (e.n_tiles + KVQ_HQ_GROUP_TILES - 1) / KVQ_HQ_GROUP_TILES;
    const int T = e.h.tile, nb = o->norm_bits;
    const size_t np = (size_t)(rows * e.h.cols_p);
    const int cache = np * sizeof(float) <= o->rot_cache, ldlq = o->ldlq && in->hess && !o->int8;
    if (cache) e.rot = malloc(np * sizeof(float));
    if (cache || ldlq) e.sym = malloc(np * sizeof(uint32_t)); // LDLQ's codes exist only row by row: kept
    e.invn = malloc((size_t)e.n_tiles * sizeof(double));
    e.ncode = malloc((size_t)e.n_tiles * sizeof(uint32_t));
    e.gbits = calloc((size_t)e.n_groups, sizeof(uint64_t));
    if (!e.h.int8) e.gq = malloc((size_t)(e.n_groups * e.ncls * NQ) * sizeof(uint64_t));
    e.tacc = malloc(2 * (size_t)e.n_tiles * sizeof(double));
    float *sgn = malloc((size_t)e.h.cols_p * sizeof(float));
    e.sgn = sgn;
    float *rec = recon;
    uint8_t *codes = NULL, *norms = NULL, *offs = NULL;
    kvq_status st = KVQ_OK;
    float *fb_own = NULL; // the LDLQ feedback this call computed and frees (not a shared one)
    if ((cache && !e.rot) || ((cache || ldlq) && !e.sym) || !e.invn || !e.ncode || !e.gbits ||
        (!e.h.int8 && !e.gq) || !e.tacc || !sgn) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
        goto done;
    }
    kvq_hq_signs(e.h.seed, T, e.h.cols_p, sgn);
    if (ldlq && o->ldlq_share && *o->ldlq_share) e.fb = *o->ldlq_share;
    else if (ldlq) {
        if ((st = kvq_hq_ldlq_feedback(in->hess, cols, e.h.cols_p, T, sgn, o->ldlq_damp, e.n, &e.fb, err))) {
            kvq_err_prefix(err, "tensor '%s'", name);
            goto done;
        }
        if (o->ldlq_share) *o->ldlq_share = e.fb;
        else fb_own = e.fb;
    }

    // ---- norms (double accumulation) and the first non-finite value; the rotation too when cached
    double maxn = 0.0, sumx2 = 0.0;
    double *nrm = e.invn; // holds the exact norm until the codes are known
    int64_t bad = e.numel;
    // Four tiles at a time: their sums are four independent chains (each in element order, so
    // the norms are those of one tile at a time), which the core overlaps.
#pragma omp parallel for num_threads(e.nt) schedule(static) reduction(max : maxn) reduction(min : bad)
    for (int64_t t4 = 0; t4 < (e.n_tiles + 3) / 4; t4++) {
        float xbuf[4][KVQ_HQ_MAX_TILE];
        const float *xs[4];
        double ss[4] = {0.0, 0.0, 0.0, 0.0};
        const int64_t ta = 4 * t4, nq = e.n_tiles - ta < 4 ? e.n_tiles - ta : 4;
        for (int q = 0; q < nq; q++) xs[q] = tile_source(&e, ta + q, xbuf[q]);
        if (nq == 4)
            for (int i = 0; i < T; i++) {
                ss[0] += (double)xs[0][i] * (double)xs[0][i];
                ss[1] += (double)xs[1][i] * (double)xs[1][i];
                ss[2] += (double)xs[2][i] * (double)xs[2][i];
                ss[3] += (double)xs[3][i] * (double)xs[3][i];
            }
        else
            for (int q = 0; q < nq; q++)
                for (int i = 0; i < T; i++) ss[q] += (double)xs[q][i] * (double)xs[q][i];
        for (int q = 0; q < nq; q++) {
            const int64_t t = ta + q, row = t / e.tpr, c0 = (t % e.tpr) * T;
            const float *xt = xs[q];
            if (!isfinite(ss[q])) // squares of finite floats cannot overflow a double sum of ≤ 1024
                for (int i = 0; i < T; i++)
                    if (!isfinite(xt[i]) && row * cols + c0 + i < bad) bad = row * cols + c0 + i;
            if (e.rot) {
                float *r = e.rot + t * T;
                for (int i = 0; i < T; i++) r[i] = xt[i] * sgn[c0 + i];
                kvq_wht(r, T);
            }
            nrm[t] = sqrt(ss[q]);
            e.tacc[t] = ss[q];
            if (nrm[t] > maxn) maxn = nrm[t];
        }
    }
    if (bad < e.numel) {
        float v;
        if (in->x) v = in->x[bad];
        else kvq_dtype_to_f32(in->src->dtype, (const uint8_t *)in->src->data + (size_t)bad * kvq_dtype_size(in->src->dtype), 1, &v);
        st = kvq_err_set(err, KVQ_ERR_NUMERIC, "tensor '%s': non-finite value %g at [%lld, %lld]", name, (double)v,
                         (long long)(bad / cols), (long long)(bad % cols));
        goto done;
    }
    for (int64_t t = 0; t < e.n_tiles; t++) sumx2 += e.tacc[t];
    int ex = 0;
    if (maxn > 0.0) {
        frexp(maxn, &ex); // maxn < 2^ex
    }
    e.h.norm_exp = ex;
    const double steps = (double)(1 << (nb - 5));
    const uint32_t zero = kvq_hq_norm_zero(nb);
    for (int64_t t = 0; t < e.n_tiles; t++) {
        double q = nrm[t] > 0.0 ? rint(((double)ex - log2(nrm[t])) * steps) : INFINITY;
        if (q < 0.0) q = 0.0;
        if (!(q <= (double)(zero - 1))) { e.ncode[t] = zero; e.invn[t] = 0.0; continue; } // < 2^-31.9 of max
        e.ncode[t] = (uint32_t)q;
        e.invn[t] = 1.0 / kvq_hq_norm_value(&e.h, e.ncode[t]);
    }

    // ---- rate control and the final pass
    int iters = 0;
    if (rate_control(&e, &iters)) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
        goto done;
    }
    free(e.gq); // the writer needs only each group's size
    e.gq = NULL;

    // ---- blobs: the last pass's codes again, tile by tile (same input, same arithmetic: same codes)
    size_t nbytes = norms_bytes(&e);
    norms = calloc(nbytes ? nbytes : 1, 1);
    codes = malloc(e.codes_bytes ? e.codes_bytes : 1);
    if (!e.h.int8) offs = malloc(offsets_bytes(&e));
    if (!norms || !codes || (!e.h.int8 && !offs)) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
        goto done;
    }
    {
        kvq_bitwriter w;
        kvq_bw_init(&w, norms, nbytes);
        for (int64_t t = 0; t < e.n_tiles; t++) kvq_bw_put(&w, e.ncode[t], nb);
        kvq_bw_finish(&w);
    }
    if (e.h.int8) {
#pragma omp parallel for num_threads(e.nt) schedule(static)
        for (int64_t t = 0; t < e.n_tiles; t++) {
            float buf[KVQ_HQ_MAX_TILE];
            int32_t c[KVQ_HQ_MAX_TILE];
            uint32_t s[KVQ_HQ_MAX_TILE];
            uint64_t cl = 0;
            if (e.invn[t] == 0.0) { memset(codes + t * T, 0, (size_t)T); continue; } // zero tiles: codes unused
            const uint32_t *st = e.sym ? e.sym + t * T : s;
            if (!e.sym) tile_quant(&e, tile_rot(&e, t, buf), (float)(e.h.alpha * e.invn[t]), c, s, &cl);
            for (int i = 0; i < T; i++) codes[t * T + i] = (uint8_t)(int8_t)(int32_t)st[i];
        }
    } else {
        uint64_t off = 0;
        for (int64_t g = 0; g < e.n_groups; g++) {
            put32(offs + 4 * g, (uint32_t)off);
            off += (e.gbits[g] + 7) / 8;
        }
        put32(offs + 4 * e.n_groups, (uint32_t)off);
        if (off > 0xffffffffull) {
            st = kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': codes exceed 4 GiB", name);
            goto done;
        }
        int kk[8], bad_groups = 0, one_k = 1, nomem = 0;
        for (int i = 0; i < e.n; i++) kk[i] = e.h.k[e.cls[i]], one_k &= kk[i] == kk[0];
        uint64_t maxg = 0;
        for (int64_t g = 0; g < e.n_groups; g++) maxg = e.gbits[g] > maxg ? e.gbits[g] : maxg;
        const size_t stage_cap = (size_t)((maxg + 7) / 8) + 4 * (size_t)T + 16; // a group, one tile's overrun, 8 B of stores
        uint64_t wtab[SMALL_SYM];
        rice_tab(kk[0], wtab);
#pragma omp parallel num_threads(e.nt) reduction(+ : bad_groups, nomem)
        {
            uint8_t *stage = one_k ? malloc(stage_cap) : NULL;
            nomem += one_k && !stage;
#pragma omp for schedule(static)
            for (int64_t g = 0; g < e.n_groups; g++) {
                float buf[KVQ_HQ_MAX_TILE];
                int32_t c[KVQ_HQ_MAX_TILE];
                uint32_t s[KVQ_HQ_MAX_TILE];
                uint64_t cl = 0;
                if (one_k && !stage) continue;
                uint32_t o0 = (uint32_t)(offs[4 * g] | offs[4 * g + 1] << 8 | offs[4 * g + 2] << 16 |
                                         (uint32_t)offs[4 * g + 3] << 24);
                const size_t cap = (size_t)((e.gbits[g] + 7) / 8);
                group_writer w = {one_k ? stage : codes + o0, one_k ? stage_cap : cap, 0, 0, 0, 0};
                memset(w.dst, 0, one_k ? cap + 8 : cap);
                for (int64_t t = g * KVQ_HQ_GROUP_TILES; t < group_end(&e, g); t++) {
                    if (e.invn[t] == 0.0) continue;
                    const uint32_t *st = e.sym ? e.sym + t * T : s;
                    if (!e.sym) tile_quant(&e, tile_rot(&e, t, buf), (float)(e.h.alpha * e.invn[t]), c, s, &cl);
                    if (one_k) {
                        gw_tile_k(&w, st, T, kk[0], wtab);
                        KVQ_ASSERT(w.pos <= cap); // the sizes came from these symbols: a bug if not
                    } else {
                        gw_tile(&w, st, T, kk, e.n);
                    }
                }
                const uint64_t bits = gw_finish(&w);
                bad_groups += bits != e.gbits[g] || w.pos != cap;
                if (one_k) memcpy(codes + o0, stage, cap);
            }
            free(stage);
        }
        if (nomem) {
            st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
            goto done;
        }
        KVQ_ASSERT(bad_groups == 0);
    }

    // ---- reference reconstruction from the codes (not from the bitstream). Only when the
    // caller wants it, rows are padded (padding error is discarded at decode) or values are
    // near float32's range; otherwise the error is the exact rotated-domain sum (the RHT is
    // orthonormal) and the butterfly pass is skipped.
    double sx = 0.0, se = 0.0;
    int nonfinite = 0;
    int need_recon = recon || e.h.cols_p != cols || maxn > 1e30;
    if (need_recon && !rec && !(rec = malloc((size_t)e.numel * sizeof(float)))) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
        goto done;
    }
    if (!need_recon) { sx = sumx2; se = e.noise; }
    else {
#pragma omp parallel for num_threads(e.nt) schedule(static) reduction(+ : nonfinite)
        for (int64_t t = 0; t < e.n_tiles; t++) {
            float y[KVQ_HQ_MAX_TILE], buf[KVQ_HQ_MAX_TILE], xbuf[KVQ_HQ_MAX_TILE];
            int32_t c[KVQ_HQ_MAX_TILE];
            uint32_t s[KVQ_HQ_MAX_TILE];
            uint64_t cl = 0;
            e.tacc[t] = e.tacc[e.n_tiles + t] = 0.0;
            int64_t row = t / e.tpr, c0 = (t % e.tpr) * T;
            int64_t ncopy = c0 + T <= cols ? T : (c0 < cols ? cols - c0 : 0);
            if (e.invn[t] != 0.0) {
                const uint32_t *st = e.sym ? e.sym + t * T : s;
                if (!e.sym) tile_quant(&e, tile_rot(&e, t, buf), (float)(e.h.alpha * e.invn[t]), c, s, &cl);
                if (e.h.int8) for (int i = 0; i < T; i++) c[i] = (int32_t)st[i];
                else for (int v = 0; v < T; v += e.n) kvq_lattice_unstrip(e.h.lat, st + v, c + v);
            }
            if (ncopy <= 0) continue;
            float *d = rec + row * cols + c0;
            kvq_hq_tile_recon(&e.h, c, e.ncode[t], sgn + c0, y, d, (int)ncopy);
            const float *x = tile_source(&e, t, xbuf);
            double tx = 0.0, te = 0.0;
            for (int i = 0; i < ncopy; i++) {
                double df = (double)x[i] - (double)d[i];
                tx += (double)x[i] * (double)x[i];
                te += df * df;
                nonfinite += !isfinite(d[i]);
            }
            e.tacc[t] = tx;
            e.tacc[e.n_tiles + t] = te;
        }
        for (int64_t t = 0; t < e.n_tiles; t++) sx += e.tacc[t], se += e.tacc[e.n_tiles + t];
    }
    if (nonfinite > 0) {
        st = kvq_err_set(err, KVQ_ERR_NUMERIC, "tensor '%s': values too large to reconstruct in float32", name);
        goto done;
    }

    // ---- output
    kvq_encoded_add_blob(out, "codes", codes, e.codes_bytes, 0);
    kvq_encoded_add_blob(out, "norms", norms, nbytes, 0);
    codes = norms = NULL;
    if (!e.h.int8) { kvq_encoded_add_blob(out, "offsets", offs, offsets_bytes(&e), 0); offs = NULL; }
    out->params = make_params(&e, 1, 1);
    size_t jfull = json_len(make_params(&e, 1, 1)), jnok = json_len(make_params(&e, 0, 1)),
           jnos = json_len(make_params(&e, 1, 0));
    kvq_encoded_add_part(out, "codes", (double)e.code_bits);
    kvq_encoded_add_part(out, "align", 8.0 * (double)e.codes_bytes - (double)e.code_bits);
    kvq_encoded_add_part(out, "norms", 8.0 * (double)nbytes);
    kvq_encoded_add_part(out, "offsets", 8.0 * (double)offsets_bytes(&e));
    kvq_encoded_add_part(out, "rice_params", 8.0 * (double)(jfull - jnok));
    kvq_encoded_add_part(out, "seed", 8.0 * (double)(jfull - jnos));
    kvq_encoded_add_part(out, "header", 8.0 * (double)(jfull - (jfull - jnok) - (jfull - jnos)));
    out->code_bits_per_weight = (double)e.code_bits / (double)e.numel;
    out->predicted_mse = se / (double)e.numel;
    if (stats) {
        stats->snr_target_db = e.snr_db;
        stats->snr_real_db = se > 0 ? 10.0 * log10(sx / se) : INFINITY;
        stats->code_bpw = out->code_bits_per_weight;
        stats->eff_bpw = kvq_encoded_bpw(out, e.numel);
        stats->iterations = iters;
        stats->clipped = e.clipped;
    }
done:
    free(e.rot);
    free(fb_own);
    free(e.sym);
    free(e.gq);
    free(e.invn);
    free(e.tacc);
    free(e.ncode);
    free(e.gbits);
    free(sgn);
    if (rec != recon) free(rec);
    free(codes);
    free(norms);
    free(offs);
    if (st) kvq_encoded_free(out);
    return st;
}
