// Transcodes a HyperQuant tensor's stored Rice stream into the execution layout the kernels
// read (kernels/hq_layout.h, "hqx"): values in signed nibbles (or bytes), E8 coset bits,
// one float scale per tile, escapes for values the nibble cannot hold. Runs once at load,
// OpenMP over random-access groups; each thread keeps the escapes of its contiguous range of
// groups, so concatenating them in thread order gives the per-row lists sorted.
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/codec/hyperquant/hq_pack.h"

typedef struct {
    uint32_t *e;      // entries (tile-ordered)
    uint32_t *tile;   // tile index of each entry
    size_t n, cap;
    int overflow;     // a delta beyond ±KVQ_HQX_ESC_MAX_DELTA
    int nomem;
    int64_t bad_group; // first corrupt group, or -1
    int64_t *total;    // escapes of all threads so far (atomic), when budget >= 0
    int64_t budget;    // stop once the total exceeds it (a wider layout will be tried); -1: never
    int over;          // this thread stopped for the budget
} esc_buf;

static void esc_push(esc_buf *b, uint32_t tile, uint32_t e) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        uint32_t *ne = realloc(b->e, cap * 4), *nt = ne ? realloc(b->tile, cap * 4) : NULL;
        if (ne) b->e = ne;
        if (nt) b->tile = nt;
        if (!ne || !nt) { b->nomem = 1; return; }
        b->cap = cap;
    }
    b->e[b->n] = e;
    b->tile[b->n++] = tile;
}

static int g_pack_simd = 1;
int kvq_hq_pack_simd(int on) {
    int was = g_pack_simd;
    if (on >= 0) g_pack_simd = on != 0;
    return was;
}

// One chunk of 64 codes into the layout with AVX2 (vbits 4..7), the scalar loop's results:
// E8's coset bit is the first coordinate's parity of each 8-vector and v = (c − cb) / 2
// (C's division, rounding toward zero, even for a corrupt odd difference); v is clamped to
// the width, u = v + off. The nibbles: byte b holds u_b's low four bits and u_{b+32}'s above
// them; plane p's word has bit i = bit 4 + p of u_i (each byte shifted so that bit reaches
// the top, then movemask). Returns 1, writing nothing, when a value needs clamping (an
// escape): the caller runs the scalar loop for that chunk, which records the escapes in order.
__attribute__((target("avx2"))) static int pack_chunk_avx2(const int32_t *c, int e8, int off, int np, uint8_t *q32,
                                                           uint64_t *hb, uint8_t *cbo) {
    const __m256i lo = _mm256_set1_epi32(-off), hi = _mm256_set1_epi32(off - 1), offv = _mm256_set1_epi32(off);
    __m256i u[8], bad = _mm256_setzero_si256();
    uint8_t cbb = 0;
    for (int k = 0; k < 8; k++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(c + 8 * k));
        if (e8) {
            const int32_t cb = c[8 * k] & 1;
            cbb |= (uint8_t)(cb << k);
            v = _mm256_sub_epi32(v, _mm256_set1_epi32(cb));
            v = _mm256_srai_epi32(_mm256_add_epi32(v, _mm256_srli_epi32(v, 31)), 1); // / 2 toward zero
        }
        const __m256i vc = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
        bad = _mm256_or_si256(bad, _mm256_xor_si256(v, vc));
        u[k] = _mm256_add_epi32(vc, offv);
    }
    if (!_mm256_testz_si256(bad, bad)) return 1;
    // 32-bit lanes to bytes in coordinate order (pack works within 128-bit halves; the
    // permutation restores the order): ul = u_0..u_31, uh = u_32..u_63
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i ul = _mm256_permutevar8x32_epi32(
        _mm256_packus_epi16(_mm256_packs_epi32(u[0], u[1]), _mm256_packs_epi32(u[2], u[3])), perm);
    const __m256i uh = _mm256_permutevar8x32_epi32(
        _mm256_packus_epi16(_mm256_packs_epi32(u[4], u[5]), _mm256_packs_epi32(u[6], u[7])), perm);
    const __m256i m0f = _mm256_set1_epi8(15);
    _mm256_storeu_si256((__m256i *)q32, _mm256_or_si256(_mm256_and_si256(ul, m0f),
                                                        _mm256_slli_epi16(_mm256_and_si256(uh, m0f), 4)));
    for (int p = 0; p < np; p++) {
        const __m128i sh = _mm_cvtsi32_si128(3 - p);
        const uint32_t wl = (uint32_t)_mm256_movemask_epi8(_mm256_sll_epi16(ul, sh)),
                       wh = (uint32_t)_mm256_movemask_epi8(_mm256_sll_epi16(uh, sh));
        hb[p] = (uint64_t)wl | (uint64_t)wh << 32;
    }
    if (e8) *cbo = cbb;
    return 0;
}

// Decodes groups [g0, g1) into w's q / cb / scale; escapes go to b.
static void pack_groups(const kvq_hq_header *h, const uint8_t *codes, const uint8_t *norms, const uint8_t *offs,
                        int64_t g0, int64_t g1, kvq_hqx *w, esc_buf *b) {
    const int T = h->tile, e8 = h->lat == KVQ_LAT_E8;
    const int off = kvq_hqx_off(w->vbits), lo = -off, hi = off - 1, np = kvq_hqx_planes(w->vbits);
    const int64_t tpr = h->cols_p / T, n_tiles = h->rows * tpr;
    const uint32_t zero = kvq_hq_norm_zero(h->norm_bits);
    const int simd = g_pack_simd && w->vbits < 8 && __builtin_cpu_supports("avx2");
    int32_t *cg = malloc(sizeof(int32_t) * (size_t)T * KVQ_HQ_GROUP_TILES);
    kvq_hq_rice_tab *tab = malloc(sizeof *tab);
    if (!cg || !tab) { free(cg); free(tab); b->nomem = 1; return; }
    kvq_hq_rice_tab_init(tab, h);
    for (int64_t g = g0; g < g1 && b->bad_group < 0 && !b->nomem; g++) {
        const size_t before = b->n;
        if (b->budget >= 0 && __atomic_load_n(b->total, __ATOMIC_RELAXED) > b->budget) { b->over = 1; break; }
        if (kvq_hq_group_codes(h, tab, codes, norms, offs, g, n_tiles, cg)) { b->bad_group = g; break; }
        int64_t t1 = (g + 1) * KVQ_HQ_GROUP_TILES < n_tiles ? (g + 1) * KVQ_HQ_GROUP_TILES : n_tiles;
        for (int64_t t = g * KVQ_HQ_GROUP_TILES; t < t1; t++) {
            const int32_t *c = cg + (t - g * KVQ_HQ_GROUP_TILES) * T;
            uint32_t code = kvq_hq_norm_code(norms, h->norm_bits, t);
            int64_t j = t % tpr;
            if (w->scale) w->scale[t] = code == zero ? 0.0f : (float)(kvq_hq_norm_value(h, code) / (h->alpha * (double)T));
            else w->scode[t] = (uint8_t)code;
            for (int ch = 0; ch < T / 64; ch++) {
                int64_t gi = (t * T) / 64 + ch;
                if (simd && !pack_chunk_avx2(c + 64 * ch, e8, off, np, w->q + gi * 32, np ? w->hb + gi * np : NULL,
                                             e8 ? w->cb + gi : NULL))
                    continue;
                uint8_t cbb = 0;
                uint64_t planes[3] = {0, 0, 0};
                for (int i = 0; i < 64; i++) {
                    int32_t ci = c[64 * ch + i], cb = 0;
                    if (e8) {
                        cb = c[64 * ch + (i & ~7)] & 1;
                        cbb |= (uint8_t)(cb << (i / 8));
                    }
                    int32_t v = e8 ? (ci - cb) / 2 : ci;
                    int32_t vc = v < lo ? lo : v > hi ? hi : v;
                    if (v != vc) {
                        int32_t d = v - vc;
                        if (d > KVQ_HQX_ESC_MAX_DELTA || d < -KVQ_HQX_ESC_MAX_DELTA) b->overflow = 1;
                        else esc_push(b, (uint32_t)t, kvq_hqx_esc_pack((uint32_t)(j * T + 64 * ch + i), d));
                    }
                    uint32_t u = (uint32_t)(vc + off);
                    if (w->vbits == 8) w->q[gi * 64 + i] = (uint8_t)u;
                    else {
                        if (i < 32) w->q[gi * 32 + i] = (uint8_t)(u & 15);
                        else w->q[gi * 32 + i - 32] |= (uint8_t)((u & 15) << 4);
                        for (int pl = 0; pl < np; pl++) planes[pl] |= (uint64_t)((u >> (4 + pl)) & 1) << i;
                    }
                }
                for (int pl = 0; pl < np; pl++) w->hb[gi * np + pl] = planes[pl];
                if (e8) w->cb[gi] = cbb;
            }
        }
        if (b->budget >= 0 && b->n > before &&
            __atomic_add_fetch(b->total, (int64_t)(b->n - before), __ATOMIC_RELAXED) > b->budget) {
            b->over = 1;
            break;
        }
    }
    free(cg);
    free(tab);
}

// One width. budget >= 0: the threads stop as soon as more escapes than that are found (then
// *n_esc = budget + 1 and w is incomplete, for the caller to free): a tensor whose values need
// the next width is not decoded in full twice (E8 4.0 tried nibbles first: loading the 1B
// shape took 8.5 s, two Rice decodes of every tensor).
static kvq_status pack_try(const kvq_hq_header *h, const uint8_t *codes, const uint8_t *norms, const uint8_t *offs,
                           int vbits, int n_threads, int64_t budget, kvq_hqx *w, int64_t *n_esc, kvq_err *err) {
    const int64_t n = h->rows * h->cols_p, n_tiles = h->rows * (h->cols_p / h->tile);
    const int64_t n_groups = (n_tiles + KVQ_HQ_GROUP_TILES - 1) / KVQ_HQ_GROUP_TILES;
    memset(w, 0, sizeof *w);
    w->lat = h->lat;
    w->rotate = 1;
    w->tile = h->tile;
    w->vbits = vbits;
    w->rows = h->rows;
    w->cols = h->cols;
    w->cols_p = h->cols_p;
    w->seed = h->seed;
    w->q = kvq_hqx_alloc((size_t)n * (vbits == 8 ? 2 : 1) / 2);
    w->hb = kvq_hqx_planes(vbits) ? kvq_hqx_alloc((size_t)n / 64 * (size_t)kvq_hqx_planes(vbits) * 8) : NULL;
    w->cb = h->lat == KVQ_LAT_E8 ? malloc((size_t)n / 64) : NULL;
    if (h->norm_bits <= 8) { // tile scales as the stored norm codes into a table
        const size_t at = ((size_t)n_tiles + 63) / 64 * 64; // the 256-entry table after the codes
        w->scode = aligned_alloc(64, at + 256 * sizeof(float));
        w->lut = w->scode ? (float *)(void *)(w->scode + at) : NULL;
        w->n_lut = 256;
        uint32_t zero = kvq_hq_norm_zero(h->norm_bits);
        for (uint32_t c = 0; c < 256 && w->lut; c++)
            w->lut[c] = c >= zero ? 0.0f : (float)(kvq_hq_norm_value(h, c) / (h->alpha * (double)h->tile));
    } else w->scale = malloc(sizeof(float) * (size_t)n_tiles);
    w->esc_row = calloc((size_t)h->rows + 1, 4);
    if (!w->q || (kvq_hqx_planes(vbits) && !w->hb) || (h->lat == KVQ_LAT_E8 && !w->cb) || (!w->scale && !w->scode) || !w->esc_row) {
        kvq_hqx_free(w);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory for the execution layout (%lld weights)",
                           (long long)n);
    }
    int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    if (nt > n_groups) nt = (int)(n_groups ? n_groups : 1);
    esc_buf *bufs = calloc((size_t)nt, sizeof *bufs);
    if (!bufs) { kvq_hqx_free(w); return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory"); }
    int64_t esc_total = 0;
#pragma omp parallel num_threads(nt)
    {
        int id = omp_get_thread_num(), cnt = omp_get_num_threads();
        int64_t a = n_groups * id / cnt, b = n_groups * (id + 1) / cnt;
        bufs[id].bad_group = -1;
        bufs[id].total = &esc_total;
        bufs[id].budget = budget;
        pack_groups(h, codes, norms, offs, a, b, w, &bufs[id]);
    }
    int over = 0;
    for (int i = 0; i < nt; i++) over |= bufs[i].over;
    if (over) { // more escapes than the budget: the caller frees w and tries a wider layout
        for (int i = 0; i < nt; i++) { free(bufs[i].e); free(bufs[i].tile); }
        free(bufs);
        *n_esc = budget + 1;
        return KVQ_OK;
    }
    kvq_status st = KVQ_OK;
    size_t total = 0;
    for (int i = 0; i < nt && !st; i++) {
        if (bufs[i].nomem) st = kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory for escapes");
        else if (bufs[i].bad_group >= 0)
            st = kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: corrupt Rice stream in group %lld",
                             (long long)bufs[i].bad_group);
        else if (bufs[i].overflow) st = KVQ_ERR_NUMERIC; // caller retries wider or falls back
        total += bufs[i].n;
    }
    if (!st && total >= ((size_t)1 << 32)) st = KVQ_ERR_NUMERIC;
    if (!st && !(w->esc = malloc(4 * (total ? total : 1))))
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory for %zu escapes", total);
    if (!st) {
        const int64_t tpr = h->cols_p / h->tile;
        size_t k = 0;
        for (int i = 0; i < nt; i++)
            for (size_t e = 0; e < bufs[i].n; e++, k++) {
                w->esc[k] = bufs[i].e[e];
                w->esc_row[bufs[i].tile[e] / tpr + 1]++;
            }
        for (int64_t r = 0; r < h->rows; r++) w->esc_row[r + 1] += w->esc_row[r];
        *n_esc = w->n_esc = (int64_t)total;
    }
    for (int i = 0; i < nt; i++) { free(bufs[i].e); free(bufs[i].tile); }
    free(bufs);
    if (st) kvq_hqx_free(w);
    return st;
}

int kvq_hq_packable(const kvq_hq_header *h) {
    return !h->int8 && h->cast == KVQ_CAST_NONE && h->tile % KVQ_HQX_CHUNK == 0 &&
           h->cols_p < ((int64_t)1 << KVQ_HQX_ESC_COL_BITS);
}

// The first width worth trying: one group in 32 (at least the first 8; every group of a small
// tensor) is decoded and its values counted against each width's range; widths whose share of
// escapes in that sample exceeds 1 % (four times the 0.25 % budget) are skipped. E8 at 4 bits has
// ~1.3 % values beyond nibbles: the 4-bit attempt used to run until its escapes passed the budget
// (about a fifth of the tensor) before the 5-bit one started. A width the sample does not rule
// out is tried as before, so the choice changes only if the sampled groups' share of escapes is
// more than four times the whole tensor's. A corrupt sample skips nothing (the full pass names
// the group).
static int first_width(const kvq_hq_header *h, const uint8_t *codes, const uint8_t *norms, const uint8_t *offs) {
    const int T = h->tile, e8 = h->lat == KVQ_LAT_E8;
    const int64_t n_tiles = h->rows * (h->cols_p / T), n_groups = (n_tiles + KVQ_HQ_GROUP_TILES - 1) / KVQ_HQ_GROUP_TILES;
    const int64_t step = n_groups >= 8 * 32 ? 32 : n_groups >= 64 ? n_groups / 8 : 1;
    int32_t *cg = malloc(sizeof(int32_t) * (size_t)T * KVQ_HQ_GROUP_TILES);
    kvq_hq_rice_tab *tab = malloc(sizeof *tab);
    int first = 0;
    if (!cg || !tab) goto done;
    kvq_hq_rice_tab_init(tab, h);
    int64_t out[4] = {0, 0, 0, 0}, seen = 0; // values beyond widths 4..7
    for (int64_t g = 0; g < n_groups; g += step) {
        if (kvq_hq_group_codes(h, tab, codes, norms, offs, g, n_tiles, cg)) goto done;
        const int64_t t1 = (g + 1) * KVQ_HQ_GROUP_TILES < n_tiles ? (g + 1) * KVQ_HQ_GROUP_TILES : n_tiles;
        const int64_t nv = (t1 - g * KVQ_HQ_GROUP_TILES) * T;
        for (int64_t i = 0; i < nv; i++) {
            const int32_t ci = cg[i], cb = e8 ? cg[i & ~(int64_t)7] & 1 : 0, v = e8 ? (ci - cb) / 2 : ci;
            for (int k = 0; k < 4; k++) out[k] += v < -(1 << (3 + k)) || v > (1 << (3 + k)) - 1;
        }
        seen += nv;
    }
    while (first < 4 && seen > 0 && out[first] * 100 > seen) first++;
done:
    free(cg);
    free(tab);
    return first;
}

kvq_status kvq_hq_pack(const kvq_hq_header *h, const kvq_blob_view *blobs, int n_blobs, int vbits, int n_threads,
                       kvq_hqx *out, kvq_err *err) {
    memset(out, 0, sizeof *out);
    if (!kvq_hq_packable(h))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                           "hyperquant: no execution layout for int8 mode, a cast, tiles below %d or %lld padded columns",
                           KVQ_HQX_CHUNK, (long long)h->cols_p);
    const uint8_t *codes, *norms, *offs;
    size_t ncodes;
    kvq_status st = kvq_hq_check_blobs(h, blobs, n_blobs, &codes, &ncodes, &norms, &offs, err);
    if (st) return st;
    int64_t n_esc = 0, n = h->rows * h->cols_p;
    if (vbits && (vbits < 4 || vbits > 8))
        return kvq_err_set(err, KVQ_ERR_ARG, "hyperquant: execution layout width %d (expected 4 to 8)", vbits);
    // Automatic width: the narrowest whose escapes stay under 0.25 % of the values (each costs
    // 32 bits and a scalar correction). E8 at 3 bits: 4; at 4 bits: 5 (nibbles would need
    // ~1.3 % escapes); at 5 bits: 6.
    const int widths[5] = {4, 5, 6, 7, 8};
    const int64_t max_esc[5] = {n / 400, n / 400, n / 400, n / 400, n};
    const int i0 = vbits ? 0 : first_width(h, codes, norms, offs);
    for (int i = i0; i < 5; i++) {
        if (vbits && vbits != widths[i]) continue;
        st = pack_try(h, codes, norms, offs, widths[i], n_threads, vbits ? -1 : max_esc[i], out, &n_esc, err);
        if (st == KVQ_OK && (vbits || n_esc <= max_esc[i])) return KVQ_OK;
        if (st == KVQ_OK) kvq_hqx_free(out);
        else if (st != KVQ_ERR_NUMERIC) return st;
        else if (vbits) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "hyperquant: values beyond the %d-bit layout's escapes", vbits);
    }
    st = KVQ_ERR_NUMERIC;
    if (st == KVQ_ERR_NUMERIC)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "hyperquant: lattice values beyond the execution layout's range");
    return st;
}
