// HyperQuant decoding: params validation, the shared tile reconstruction, the scalar
// reference decoder and the fast decoder (buffered Rice reader, specialized unstrip,
// OpenMP over random-access groups). Both must produce identical floats.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu/wht.h"
#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/quant/rice.h"

void kvq_hq_signs(uint64_t seed, int T, int64_t cols_p, float *sgn) {
    for (int64_t j = 0; j < cols_p / T; j++)
        for (int w = 0; w < (T + 63) / 64; w++) {
            uint64_t bits = kvq_hq_sign_word(seed, (uint64_t)j, (uint64_t)w);
            for (int i = 0; i < 64 && 64 * w + i < T; i++)
                sgn[j * T + 64 * w + i] = ((bits >> i) & 1) ? -1.0f : 1.0f;
        }
}

void kvq_hq_tile_recon(const kvq_hq_header *h, int32_t *c, uint32_t code, const float *sgn, float *y,
                       float *dst, int ncopy) {
    const int T = h->tile;
    if (code == kvq_hq_norm_zero(h->norm_bits)) {
        memset(dst, 0, sizeof(float) * (size_t)ncopy);
        return;
    }
    double norm = kvq_hq_norm_value(h, code);
    if (h->cast == KVQ_CAST_NONE) {
        const float s = (float)(norm / (h->alpha * (double)T));
        if (h->lat == KVQ_LAT_A2) { // √3·ny on even positions, nx on odd: two exact transforms
            int32_t b[KVQ_HQ_MAX_TILE];
            for (int i = 0; i < T; i += 2) {
                b[i] = c[i];
                b[i + 1] = 0;
                c[i] = 0;
            }
            kvq_wht_i32(c, T);
            kvq_wht_i32(b, T);
            for (int i = 0; i < ncopy; i++) dst[i] = (((float)c[i] + KVQ_SQRT3_F * (float)b[i]) * s) * sgn[i];
        } else {
            kvq_wht_i32(c, T);
            int i = 0;
#if defined(__SSE2__)
            const __m128 sv = _mm_set1_ps(s); // the same two roundings per lane as the scalar tail
            for (; i + 4 <= ncopy; i += 4)
                _mm_storeu_ps(dst + i, _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(_mm_loadu_si128((const __m128i *)(c + i))), sv),
                                                  _mm_loadu_ps(sgn + i)));
#endif
            for (; i < ncopy; i++) dst[i] = ((float)c[i] * s) * sgn[i];
        }
        return;
    }
    // cast the orthonormal rotated tile, as the MMA operand would be
    const float s = (float)(norm / (h->alpha * sqrt((double)T)));
    if (h->lat == KVQ_LAT_A2)
        for (int i = 0; i < T; i += 2) {
            y[i] = (KVQ_SQRT3_F * (float)c[i]) * s;
            y[i + 1] = (float)c[i + 1] * s;
        }
    else
        for (int i = 0; i < T; i++) y[i] = (float)c[i] * s;
    kvq_cast_apply(h->cast, y, T);
    kvq_wht(y, T);
    const float r = (float)(1.0 / sqrt((double)T));
    for (int i = 0; i < ncopy; i++) dst[i] = (y[i] * r) * sgn[i];
}

// ---- params

static int get_int(const json_t *p, const char *key, long long lo, long long hi, long long *v) {
    json_t *j = json_object_get(p, key);
    if (!json_is_integer(j)) return -1;
    *v = json_integer_value(j);
    return (*v < lo || *v > hi) ? -1 : 0;
}

kvq_status kvq_hq_header_parse(const json_t *p, int64_t rows, int64_t cols, kvq_hq_header *h,
                               kvq_err *err) {
    memset(h, 0, sizeof *h);
    long long v, tile, colsp, nb, ne;
    const char *lat = json_string_value(json_object_get(p, "lattice"));
    const char *mode = json_string_value(json_object_get(p, "mode"));
    const char *cast = json_string_value(json_object_get(p, "cast"));
    const char *seed = json_string_value(json_object_get(p, "seed"));
    json_t *k = json_object_get(p, "k");
    double alpha = json_number_value(json_object_get(p, "alpha"));
    if (get_int(p, "v", KVQ_HQ_FORMAT_VERSION, KVQ_HQ_FORMAT_VERSION, &v))
        return kvq_err_set(err, KVQ_ERR_VERSION, "hyperquant: missing or unknown params version");
    if (!lat || kvq_lattice_parse(lat, &h->lat))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad lattice '%s'", lat ? lat : "(null)");
    if (!mode || (strcmp(mode, "rice") && strcmp(mode, "int8")))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad mode '%s'", mode ? mode : "(null)");
    h->int8 = strcmp(mode, "int8") == 0;
    if (!cast || kvq_cast_parse(cast, &h->cast))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad cast '%s'", cast ? cast : "(null)");
    if (get_int(p, "tile", KVQ_HQ_MIN_TILE, KVQ_HQ_MAX_TILE, &tile) || (tile & (tile - 1)))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad tile size");
    if (get_int(p, "cols_p", cols, cols + tile - 1, &colsp) || colsp % tile)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: padded width inconsistent with %lld cols",
                           (long long)cols);
    if (get_int(p, "norm_bits", 6, 16, &nb) || (nb != 6 && nb != 8 && nb != 10 && nb != 12 && nb != 16))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad norm_bits");
    if (get_int(p, "norm_exp", -2000, 2000, &ne))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad norm_exp");
    if (!(alpha > 0 && alpha < 1e6))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad alpha %g", alpha);
    int ncls = kvq_lattice_classes(h->lat);
    if (!h->int8) {
        if (!json_is_array(k) || (int)json_array_size(k) != ncls)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: need %d Rice parameters", ncls);
        for (int i = 0; i < ncls; i++) {
            json_t *ki = json_array_get(k, i);
            if (!json_is_integer(ki) || json_integer_value(ki) < 0 || json_integer_value(ki) > KVQ_RICE_KMAX)
                return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad Rice parameter");
            h->k[i] = (int)json_integer_value(ki);
        }
    }
    char *end = NULL;
    if (!seed || strlen(seed) != 16 || (h->seed = strtoull(seed, &end, 16), *end))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad seed");
    if (tile < kvq_lattice_dim(h->lat))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: tile smaller than the lattice");
    h->tile = (int)tile;
    h->rows = rows;
    h->cols = cols;
    h->cols_p = colsp;
    h->norm_bits = (int)nb;
    h->norm_exp = (int)ne;
    h->alpha = alpha;
    return KVQ_OK;
}

// Checks blob sizes and offsets; returns the blobs.
kvq_status kvq_hq_check_blobs(const kvq_hq_header *h, const kvq_blob_view *b, int nb,
                              const uint8_t **codes, size_t *ncodes, const uint8_t **norms,
                              const uint8_t **offs, kvq_err *err) {
    const kvq_blob_view *c = kvq_blob_find(b, nb, "codes"), *n = kvq_blob_find(b, nb, "norms"),
                        *o = kvq_blob_find(b, nb, "offsets");
    int64_t n_tiles = h->rows * (h->cols_p / h->tile);
    int64_t n_groups = (n_tiles + KVQ_HQ_GROUP_TILES - 1) / KVQ_HQ_GROUP_TILES;
    if (!c || !n) return kvq_err_set(err, KVQ_ERR_MISSING, "hyperquant: missing codes or norms blob");
    if (n->size != (size_t)((n_tiles * h->norm_bits + 7) / 8))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: norms blob is %zu bytes, expected %lld",
                           n->size, (long long)((n_tiles * h->norm_bits + 7) / 8));
    *codes = c->data;
    *ncodes = c->size;
    *norms = n->data;
    *offs = NULL;
    if (h->int8) {
        if (c->size != (size_t)(h->rows * h->cols_p))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: int8 codes blob is %zu bytes, expected %lld",
                               c->size, (long long)(h->rows * h->cols_p));
        return KVQ_OK;
    }
    if (!o || o->size != (size_t)(n_groups + 1) * 4)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: offsets blob has %zu bytes, expected %lld",
                           o ? o->size : 0, (long long)(n_groups + 1) * 4);
    const uint8_t *ob = o->data;
    *offs = ob;
    if (!ob) return KVQ_OK; // sizes only; kvq_codec_check_file reads the offsets (check_data), not the codes
    uint32_t prev = 0;
    for (int64_t g = 0; g <= n_groups; g++) {
        uint32_t v = (uint32_t)ob[4 * g] | (uint32_t)ob[4 * g + 1] << 8 | (uint32_t)ob[4 * g + 2] << 16 |
                     (uint32_t)ob[4 * g + 3] << 24;
        if ((g == 0 && v != 0) || v < prev || v > c->size || (g == n_groups && v != c->size))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: bad group offset %u at group %lld", v,
                               (long long)g);
        prev = v;
    }
    *offs = ob;
    return KVQ_OK;
}

static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// ---- reference decoder

kvq_status kvq_hq_decode_ref(const kvq_hq_header *h, const kvq_blob_view *blobs, int n_blobs,
                             float *out, kvq_err *err) {
    const uint8_t *codes, *norms, *offs;
    size_t ncodes;
    kvq_status st = kvq_hq_check_blobs(h, blobs, n_blobs, &codes, &ncodes, &norms, &offs, err);
    if (st) return st;
    const int T = h->tile, n = kvq_lattice_dim(h->lat);
    const int64_t tpr = h->cols_p / T, n_tiles = h->rows * tpr;
    float *sgn = malloc(sizeof(float) * (size_t)h->cols_p), *y = malloc(sizeof(float) * (size_t)T);
    int32_t *c = malloc(sizeof(int32_t) * (size_t)T);
    if (!sgn || !y || !c) { free(sgn); free(y); free(c); return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory"); }
    kvq_hq_signs(h->seed, T, h->cols_p, sgn);
    uint32_t zero = kvq_hq_norm_zero(h->norm_bits);
    kvq_bitreader r;
    int64_t gend = 0;
    for (int64_t t = 0; t < n_tiles && !st; t++) {
        int64_t row = t / tpr, j = t % tpr;
        uint32_t code = kvq_hq_norm_code(norms, h->norm_bits, t);
        if (!h->int8 && t % KVQ_HQ_GROUP_TILES == 0) {
            int64_t g = t / KVQ_HQ_GROUP_TILES;
            uint32_t o0 = rd32(offs + 4 * g);
            gend = rd32(offs + 4 * g + 4);
            kvq_br_init(&r, codes + o0, (size_t)(gend - o0));
        }
        if (h->int8) {
            for (int i = 0; i < T; i++) c[i] = (int8_t)codes[t * T + i];
        } else if (code != zero) {
            for (int v = 0; v < T; v += n) {
                uint32_t sym[8];
                for (int i = 0; i < n; i++) {
                    sym[i] = kvq_br_rice(&r, h->k[kvq_lattice_symbol_class(h->lat, i)]);
                    if (sym[i] >= KVQ_HQ_SYM_LIMIT) { r.err = 1; sym[i] = 0; }
                }
                kvq_lattice_unstrip(h->lat, sym, c + v);
            }
            if (r.err) st = kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: corrupt Rice stream in tile %lld", (long long)t);
        }
        int64_t c0 = j * T, ncopy = c0 + T <= h->cols ? T : (c0 < h->cols ? h->cols - c0 : 0);
        if (!st && ncopy > 0) kvq_hq_tile_recon(h, c, code, sgn + j * T, y, out + row * h->cols + c0, (int)ncopy);
        // a group must be consumed to within its final byte's padding
        if (!st && !h->int8 && (t % KVQ_HQ_GROUP_TILES == KVQ_HQ_GROUP_TILES - 1 || t == n_tiles - 1))
            if (r.bitpos + 8 <= 8 * (uint64_t)r.size)
                st = kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: trailing bytes in group %lld",
                                 (long long)(t / KVQ_HQ_GROUP_TILES));
    }
    free(sgn);
    free(y);
    free(c);
    return st;
}

// ---- fast decoder: the shared word reader (kernels/bitword.h) fed by unaligned 8-byte loads

typedef struct {
    const uint8_t *p, *end, *start;
    kvq_bitword w;    // bits above w.n are lookahead (or zeros at the stream end)
    int bad;          // a codeword too long for 32 bits, or a symbol at or above the limit
} fast_rd;

// Bits consumed so far: bytes pulled into the window minus the bits still unread.
static inline uint64_t frd_used(const fast_rd *r) { return 8 * (uint64_t)(r->p - r->start) - (uint64_t)r->w.n; }

static inline void frd_refill(fast_rd *r) {
    if (r->end - r->p >= 8) {
        uint64_t v;
        memcpy(&v, r->p, 8);
        r->w.buf |= v << r->w.n;
        r->p += (63 - r->w.n) >> 3;
        r->w.n |= 56;
    } else {
        while (r->w.n <= 55) { // ends with 56 <= n <= 63, as the 8-byte path
            uint64_t b = r->p < r->end ? *r->p : 0; // zeros past the end; caught by frd_used
            r->p++;
            kvq_bitword_push(&r->w, b, 8);
        }
    }
}

// Slow path for codewords longer than the buffered bits (long unary runs, stream end).
// Takes and returns the reader by value so the hot loop's reader stays in registers.
__attribute__((noinline)) static fast_rd frd_rice_slow(fast_rd r, int k, uint64_t limit, uint32_t *out) {
    uint64_t q = 0;
    *out = 0;
    for (;;) {
        frd_refill(&r); // now 56 <= n <= 63
        if (!kvq_bitword_skip_zeros(&r.w, &q)) break;
        if (frd_used(&r) > limit || q > (0xffffffffull >> k)) { r.bad = 1; return r; }
    }
    kvq_bitword_end_run(&r.w, &q);
    frd_refill(&r);
    *out = kvq_bitword_rice_low(&r.w, k, q, KVQ_HQ_SYM_LIMIT, &r.bad);
    return r;
}

// Hot path: refill only below 32 buffered bits; bits above n are valid lookahead (or
// zeros at the stream end), so a codeword that fits in n decodes directly.
static inline uint32_t frd_rice(fast_rd *r, int k, uint64_t limit) {
    if (r->w.n < 32) frd_refill(r);
    uint32_t v;
    int len;
    if (__builtin_expect(kvq_bitword_rice(&r->w, k, KVQ_HQ_SYM_LIMIT, &v, &len, &r->bad), 1)) return v;
    *r = frd_rice_slow(*r, k, limit, &v);
    return v;
}

// Decodes the T symbols of one tile and unstrips them into c.
static inline void fast_tile_codes(const kvq_hq_header *h, fast_rd *r, uint64_t limit, int32_t *c) {
    const int T = h->tile, k0 = h->k[0], k1 = h->k[1];
    switch (h->lat) {
    case KVQ_LAT_E8:
        for (int v = 0; v < T; v += 8) {
            int32_t p = 0;
            for (int i = 0; i < 7; i++) {
                int32_t s = kvq_unzigzag(frd_rice(r, k0, limit));
                p += s;
                c[v + i] = 2 * s;
            }
            uint32_t comb = frd_rice(r, k0, limit);
            int32_t cb = (int32_t)(comb & 1);
            int32_t t = kvq_unzigzag(comb >> 1);
            c[v + 7] = 2 * (2 * t + (p & 1)) + cb;
            for (int i = 0; i < 7; i++) c[v + i] += cb;
        }
        break;
    case KVQ_LAT_D4:
        for (int v = 0; v < T; v += 4) {
            c[v] = kvq_unzigzag(frd_rice(r, k0, limit));
            c[v + 1] = kvq_unzigzag(frd_rice(r, k0, limit));
            c[v + 2] = kvq_unzigzag(frd_rice(r, k0, limit));
            c[v + 3] = 2 * kvq_unzigzag(frd_rice(r, k1, limit)) + ((c[v] + c[v + 1] + c[v + 2]) & 1);
        }
        break;
    case KVQ_LAT_A2:
        for (int v = 0; v < T; v += 2) {
            int32_t ty = kvq_unzigzag(frd_rice(r, k0, limit));
            c[v + 1] = kvq_unzigzag(frd_rice(r, k1, limit));
            c[v] = 2 * ty + (c[v + 1] & 1);
        }
        break;
    default:
        for (int v = 0; v < T; v++) c[v] = kvq_unzigzag(frd_rice(r, k0, limit));
        break;
    }
}

// ---- the table reader: several codewords per lookup when all classes share one parameter

void kvq_hq_rice_tab_init(kvq_hq_rice_tab *t, const kvq_hq_header *h) {
    const int k = h->k[0];
    t->on = !h->int8 && (kvq_lattice_classes(h->lat) == 1 || h->k[1] == k);
    if (!t->on) return;
    for (uint32_t w = 0; w < (1u << KVQ_HQ_TAB_BITS); w++) {
        uint64_t e = 0;
        int pos = 0, cnt = 0;
        while (cnt < 6 && (w >> pos)) {
            const int z = __builtin_ctz(w >> pos), l = z + 1 + k;
            if (pos + l > KVQ_HQ_TAB_BITS) break;
            const uint32_t v = ((uint32_t)z << k) | ((w >> (pos + z + 1)) & ((1u << k) - 1u));
            if (v > 255) break;
            e |= (uint64_t)v << (8 * cnt++);
            pos += l;
        }
        t->e[w] = e | (uint64_t)cnt << 48 | (uint64_t)pos << 56;
    }
}

// The T symbols of one tile into s (room for T + 8): whole table entries while they fit the
// tile, one codeword at a time otherwise. The same codewords as frd_rice one by one, so the
// same symbols, bits used and corruption verdicts.
static inline void fast_tile_syms(fast_rd *r, const uint64_t *tab, int k, uint64_t limit, uint32_t *s, int T) {
    int i = 0;
    while (i < T) {
        if (r->w.n < 32) frd_refill(r);
        const uint64_t e = tab[r->w.buf & ((1u << KVQ_HQ_TAB_BITS) - 1)];
        const int cnt = (int)(e >> 48) & 0xff;
        if (__builtin_expect(cnt != 0 && i + cnt <= T, 1)) {
#if defined(__SSE4_1__)
            const __m128i x = _mm_cvtsi64_si128((long long)e);
            _mm_storeu_si128((__m128i *)(s + i), _mm_cvtepu8_epi32(x));
            _mm_storeu_si128((__m128i *)(s + i + 4), _mm_cvtepu8_epi32(_mm_srli_si128(x, 4)));
#else
            for (int j = 0; j < 6; j++) s[i + j] = (uint32_t)(e >> (8 * j)) & 0xff;
#endif
            const int used = (int)(e >> 56);
            r->w.buf >>= used;
            r->w.n -= used;
            i += cnt;
        } else {
            s[i++] = frd_rice(r, k, limit);
        }
    }
}

// Symbols to lattice codes (kvq_lattice_unstrip's arithmetic, a tile at a time).
static inline void tile_unstrip(const kvq_hq_header *h, const uint32_t *s, int32_t *c) {
    const int T = h->tile;
    switch (h->lat) {
    case KVQ_LAT_E8:
#if defined(__SSE4_1__)
        for (int v = 0; v < T; v += 8) { // the scalar loop below, 8 lanes in two vectors
            const __m128i one = _mm_set1_epi32(1), zero = _mm_setzero_si128();
            const __m128i a = _mm_loadu_si128((const __m128i *)(s + v)), b = _mm_loadu_si128((const __m128i *)(s + v + 4));
            const __m128i za = _mm_xor_si128(_mm_srli_epi32(a, 1), _mm_sub_epi32(zero, _mm_and_si128(a, one)));
            const __m128i zb = _mm_xor_si128(_mm_srli_epi32(b, 1), _mm_sub_epi32(zero, _mm_and_si128(b, one)));
            __m128i sm = _mm_add_epi32(za, _mm_blend_epi16(zb, zero, 0xC0)); // lanes 0..6
            sm = _mm_add_epi32(sm, _mm_shuffle_epi32(sm, _MM_SHUFFLE(1, 0, 3, 2)));
            sm = _mm_add_epi32(sm, _mm_shuffle_epi32(sm, _MM_SHUFFLE(2, 3, 0, 1)));
            const int32_t p = _mm_cvtsi128_si32(sm), cb = (int32_t)(s[v + 7] & 1), t = kvq_unzigzag(s[v + 7] >> 1);
            const __m128i cbv = _mm_set1_epi32(cb);
            _mm_storeu_si128((__m128i *)(c + v), _mm_add_epi32(_mm_add_epi32(za, za), cbv));
            _mm_storeu_si128((__m128i *)(c + v + 4),
                             _mm_insert_epi32(_mm_add_epi32(_mm_add_epi32(zb, zb), cbv), 2 * (2 * t + (p & 1)) + cb, 3));
        }
        break;
#endif
        for (int v = 0; v < T; v += 8) {
            const uint32_t *u = s + v;
            const int32_t cb = (int32_t)(u[7] & 1), t = kvq_unzigzag(u[7] >> 1);
            int32_t p = 0;
            for (int i = 0; i < 7; i++) {
                const int32_t z = kvq_unzigzag(u[i]);
                p += z;
                c[v + i] = 2 * z + cb;
            }
            c[v + 7] = 2 * (2 * t + (p & 1)) + cb;
        }
        break;
    case KVQ_LAT_D4:
        for (int v = 0; v < T; v += 4) {
            c[v] = kvq_unzigzag(s[v]);
            c[v + 1] = kvq_unzigzag(s[v + 1]);
            c[v + 2] = kvq_unzigzag(s[v + 2]);
            c[v + 3] = 2 * kvq_unzigzag(s[v + 3]) + ((c[v] + c[v + 1] + c[v + 2]) & 1);
        }
        break;
    case KVQ_LAT_A2:
        for (int v = 0; v < T; v += 2) {
            c[v + 1] = kvq_unzigzag(s[v + 1]);
            c[v] = 2 * kvq_unzigzag(s[v]) + (c[v + 1] & 1);
        }
        break;
    default:
        for (int v = 0; v < T; v++) c[v] = kvq_unzigzag(s[v]);
        break;
    }
}

// One tile's codes with the fastest reader h allows; s is scratch for T + 8 symbols.
static inline void fast_tile(const kvq_hq_header *h, const kvq_hq_rice_tab *tab, fast_rd *r, uint64_t limit,
                             uint32_t *s, int32_t *c) {
    if (tab->on) {
        fast_tile_syms(r, tab->e, h->k[0], limit, s, h->tile);
        tile_unstrip(h, s, c);
    } else {
        fast_tile_codes(h, r, limit, c);
    }
}

// Decodes one random-access group; returns 0, or 1 if its stream is corrupt.
static int decode_group(const kvq_hq_header *h, const kvq_hq_rice_tab *tab, const uint8_t *codes,
                        const uint8_t *norms, const uint8_t *offs, const float *sgn, int64_t g, int64_t n_tiles,
                        float *y, int32_t *c, uint32_t *s, float *out) {
    const int T = h->tile;
    const int64_t tpr = h->cols_p / T;
    const uint32_t zero = kvq_hq_norm_zero(h->norm_bits);
    fast_rd r = {0};
    uint64_t limit = 0;
    if (!h->int8) {
        uint32_t o0 = rd32(offs + 4 * g), o1 = rd32(offs + 4 * g + 4);
        r.p = r.start = codes + o0;
        r.end = codes + o1;
        limit = 8 * (uint64_t)(o1 - o0);
    }
    int64_t t1 = (g + 1) * KVQ_HQ_GROUP_TILES < n_tiles ? (g + 1) * KVQ_HQ_GROUP_TILES : n_tiles;
    for (int64_t t = g * KVQ_HQ_GROUP_TILES; t < t1; t++) {
        int64_t row = t / tpr, j = t % tpr;
        uint32_t code = kvq_hq_norm_code(norms, h->norm_bits, t);
        if (h->int8) {
            const int8_t *cb = (const int8_t *)codes + t * T;
            for (int i = 0; i < T; i++) c[i] = cb[i];
        } else if (code != zero) {
            fast_tile(h, tab, &r, limit, s, c);
        }
        int64_t c0 = j * T, ncopy = c0 + T <= h->cols ? T : (c0 < h->cols ? h->cols - c0 : 0);
        if (ncopy > 0) kvq_hq_tile_recon(h, c, code, sgn + j * T, y, out + row * h->cols + c0, (int)ncopy);
    }
    return !h->int8 && (r.bad || frd_used(&r) > limit || frd_used(&r) + 8 <= limit);
}

int kvq_hq_group_codes(const kvq_hq_header *h, const kvq_hq_rice_tab *tab, const uint8_t *codes,
                       const uint8_t *norms, const uint8_t *offs, int64_t g, int64_t n_tiles, int32_t *c) {
    uint32_t s[KVQ_HQ_MAX_TILE + 8];
    const int T = h->tile;
    const uint32_t zero = kvq_hq_norm_zero(h->norm_bits);
    uint32_t o0 = rd32(offs + 4 * g), o1 = rd32(offs + 4 * g + 4);
    fast_rd r = {0};
    r.p = r.start = codes + o0;
    r.end = codes + o1;
    const uint64_t limit = 8 * (uint64_t)(o1 - o0);
    int64_t t0 = g * KVQ_HQ_GROUP_TILES, t1 = t0 + KVQ_HQ_GROUP_TILES < n_tiles ? t0 + KVQ_HQ_GROUP_TILES : n_tiles;
    for (int64_t t = t0; t < t1; t++) {
        int32_t *ct = c + (t - t0) * T;
        if (kvq_hq_norm_code(norms, h->norm_bits, t) == zero) memset(ct, 0, sizeof(int32_t) * (size_t)T);
        else fast_tile(h, tab, &r, limit, s, ct);
    }
    return r.bad || frd_used(&r) > limit || frd_used(&r) + 8 <= limit;
}

kvq_status kvq_hq_decode(const kvq_hq_header *h, const kvq_blob_view *blobs, int n_blobs, float *out,
                         int n_threads, kvq_err *err) {
    const uint8_t *codes, *norms, *offs;
    size_t ncodes;
    kvq_status st = kvq_hq_check_blobs(h, blobs, n_blobs, &codes, &ncodes, &norms, &offs, err);
    if (st) return st;
    const int T = h->tile;
    const int64_t tpr = h->cols_p / T, n_tiles = h->rows * tpr;
    const int64_t n_groups = (n_tiles + KVQ_HQ_GROUP_TILES - 1) / KVQ_HQ_GROUP_TILES;
    float *sgn = malloc(sizeof(float) * (size_t)h->cols_p);
    kvq_hq_rice_tab *tab = malloc(sizeof *tab);
    if (!sgn || !tab) { free(sgn); free(tab); return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory"); }
    kvq_hq_signs(h->seed, T, h->cols_p, sgn);
    kvq_hq_rice_tab_init(tab, h);
    int64_t bad_group = -1;
    int nomem = 0;
    int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    if (nt > n_groups / 128 + 1) nt = (int)(n_groups / 128 + 1); // 128 groups = 256K weights per thread
#pragma omp parallel num_threads(nt)
    {
        float *y = malloc(sizeof(float) * (size_t)T);
        int32_t *c = malloc(sizeof(int32_t) * (size_t)T);
        uint32_t *s = malloc(sizeof(uint32_t) * (size_t)(T + 8));
        if (!y || !c || !s) {
#pragma omp atomic write
            nomem = 1;
        } else {
#pragma omp for schedule(dynamic, 16)
            for (int64_t g = 0; g < n_groups; g++)
                if (decode_group(h, tab, codes, norms, offs, sgn, g, n_tiles, y, c, s, out)) {
#pragma omp critical
                    if (bad_group < 0 || g < bad_group) bad_group = g;
                }
        }
        free(y);
        free(c);
        free(s);
    }
    free(sgn);
    free(tab);
    if (nomem) return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory");
    if (bad_group >= 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: corrupt Rice stream in group %lld", (long long)bad_group);
    return KVQ_OK;
}
