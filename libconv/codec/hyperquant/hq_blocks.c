// Row-blocked HyperQuant tensors (params "v": 2, docs/FORMAT.md "Row-blocked HyperQuant"): a
// matrix cut into blocks of rows, each encoded as its own HyperQuant tensor at its own rate (its
// own α, Rice parameters and norm exponent; one seed, so one sign diagonal per tile column), the
// blocks' codes / norms / offsets blobs concatenated. Why: an embedding's or lm_head's rows differ
// by orders of magnitude in what their error costs (docs/ALLOCATION.md, session 11).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/hqx.h"
#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/codec/hyperquant/hq_pack.h"
#include "libconv/codec/hyperquant/hyperquant.h"

static const char *const k_roles[3] = {"codes", "norms", "offsets"};

int kvq_hq_is_blocked(const json_t *params) {
    json_t *v = json_object_get(params, "v");
    return json_is_integer(v) && json_integer_value(v) == KVQ_HQ_BLOCKS_VERSION;
}

kvq_status kvq_hq_blocks_parse(const json_t *p, int64_t rows, int64_t cols, const kvq_blob_view *b, int nb,
                               kvq_hq_block *out, int *n, kvq_err *err) {
    *n = 0;
    if (!kvq_hq_is_blocked(p)) return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: not a row-blocked tensor");
    json_t *bl = json_object_get(p, "blocks");
    size_t nbk = json_is_array(bl) ? json_array_size(bl) : 0;
    if (nbk < 1 || nbk > KVQ_HQ_MAX_BLOCKS)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: row-blocked params need 1 to %d blocks", KVQ_HQ_MAX_BLOCKS);
    const kvq_blob_view *whole[3];
    size_t at[3] = {0, 0, 0};
    for (int r = 0; r < 3; r++) whole[r] = kvq_blob_find(b, nb, k_roles[r]);
    int64_t row0 = 0;
    for (size_t i = 0; i < nbk; i++) {
        json_t *bi = json_array_get(bl, i);
        json_t *jr = json_object_get(bi, "rows");
        if (!json_is_integer(jr) || json_integer_value(jr) < 1 || json_integer_value(jr) > rows - row0)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: block %zu: bad row count", i);
        kvq_hq_block *k = &out[i];
        memset(k, 0, sizeof *k);
        k->row0 = row0;
        kvq_status s = kvq_hq_header_parse(bi, json_integer_value(jr), cols, &k->h, err);
        if (s) {
            kvq_err_prefix(err, "block %zu", i);
            return s;
        }
        if (i > 0 && (k->h.seed != out[0].h.seed || k->h.tile != out[0].h.tile || k->h.lat != out[0].h.lat ||
                      k->h.int8 != out[0].h.int8 || k->h.cast != out[0].h.cast))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: block %zu: lattice, mode, cast, tile and seed must be the first block's", i);
        for (int r = 0; r < 3; r++) {
            json_t *js = json_object_get(bi, k_roles[r]);
            if (!json_is_integer(js) || json_integer_value(js) < 0)
                return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: block %zu: missing '%s' size", i, k_roles[r]);
            size_t sz = (size_t)json_integer_value(js);
            if (!whole[r]) {
                if (sz) return kvq_err_set(err, KVQ_ERR_MISSING, "hyperquant: missing %s blob", k_roles[r]);
                continue;
            }
            if (sz > whole[r]->size - at[r])
                return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: block %zu: %s past the blob's %zu bytes", i,
                                   k_roles[r], whole[r]->size);
            k->v[k->nv++] = (kvq_blob_view){k_roles[r], whole[r]->data ? (const uint8_t *)whole[r]->data + at[r] : NULL, sz};
            at[r] += sz;
        }
        row0 += k->h.rows;
    }
    if (row0 != rows) return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: blocks cover %lld of %lld rows", (long long)row0, (long long)rows);
    for (int r = 0; r < 3; r++)
        if (whole[r] && at[r] != whole[r]->size)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "hyperquant: %s blob is %zu bytes, the blocks hold %zu", k_roles[r],
                               whole[r]->size, at[r]);
    *n = (int)nbk;
    return KVQ_OK;
}

kvq_status kvq_hq_blocks_decode(const json_t *p, const kvq_blob_view *b, int nb, int64_t rows, int64_t cols, float *out,
                                int n_threads, kvq_err *err) {
    kvq_hq_block *bk = malloc(sizeof *bk * KVQ_HQ_MAX_BLOCKS);
    if (!bk) return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory");
    int n;
    kvq_status s = kvq_hq_blocks_parse(p, rows, cols, b, nb, bk, &n, err);
    for (int i = 0; i < n && !s; i++) {
        s = n_threads < 0 ? kvq_hq_decode_ref(&bk[i].h, bk[i].v, bk[i].nv, out + bk[i].row0 * cols, err)
                          : kvq_hq_decode(&bk[i].h, bk[i].v, bk[i].nv, out + bk[i].row0 * cols, n_threads, err);
        if (s) kvq_err_prefix(err, "block %d", i);
    }
    free(bk);
    return s;
}

kvq_status kvq_hq_blocks_check(const json_t *p, const kvq_blob_view *b, int nb, int64_t rows, int64_t cols, kvq_err *err) {
    kvq_hq_block *bk = malloc(sizeof *bk * KVQ_HQ_MAX_BLOCKS);
    if (!bk) return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory");
    int n;
    kvq_status s = kvq_hq_blocks_parse(p, rows, cols, b, nb, bk, &n, err);
    for (int i = 0; i < n && !s; i++) {
        const uint8_t *codes, *norms, *offs;
        size_t ncodes;
        s = kvq_hq_check_blobs(&bk[i].h, bk[i].v, bk[i].nv, &codes, &ncodes, &norms, &offs, err);
        if (s) kvq_err_prefix(err, "block %d", i);
    }
    free(bk);
    return s;
}

// ---- encode -------------------------------------------------------------------------

kvq_status kvq_hq_encode_blocks(const kvq_hq_opts *o, const double *bps, int n_blocks, int64_t block_rows,
                                const kvq_codec_input *in, kvq_encoded *out, float *recon, kvq_err *err) {
    const char *name = in->src && in->src->name ? in->src->name : "(unnamed)";
    memset(out, 0, sizeof *out);
    if (block_rows < 1 || n_blocks < 1 || n_blocks > KVQ_HQ_MAX_BLOCKS || (in->rows + block_rows - 1) / block_rows != n_blocks)
        return kvq_err_set(err, KVQ_ERR_ARG, "tensor '%s': %d rates for blocks of %lld rows, but %lld rows make %lld blocks",
                           name, n_blocks, (long long)block_rows, (long long)in->rows,
                           (long long)((in->rows + block_rows - 1) / block_rows));
    if (o->int8 || isnan(o->bps))
        return kvq_err_set(err, KVQ_ERR_ARG, "tensor '%s': row blocks need Rice mode and rates", name);
    uint8_t *cat[3] = {NULL, NULL, NULL};
    size_t len[3] = {0, 0, 0};
    json_t *blocks = json_array(), *params = json_pack("{s:i}", "v", KVQ_HQ_BLOCKS_VERSION);
    double code_bits = 0, se = 0;
    kvq_status s = blocks && params ? KVQ_OK : kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory");
    kvq_rate_part parts[KVQ_MAX_PARTS];
    int n_parts = 0;
    float *fb = NULL; // LDLQ's feedback, computed by the first block's encode (opts.ldlq_share)
    for (int i = 0; i < n_blocks && !s; i++) {
        int64_t r0 = (int64_t)i * block_rows, nr = in->rows - r0 < block_rows ? in->rows - r0 : block_rows;
        kvq_codec_input bi = *in;
        kvq_tensor sub;
        bi.rows = nr;
        if (in->x) bi.x = in->x + r0 * in->cols;
        else {
            sub = *in->src;
            size_t es = kvq_dtype_size(sub.dtype);
            sub.ndim = 2, sub.shape[0] = nr, sub.shape[1] = in->cols;
            sub.data = (const uint8_t *)sub.data + (size_t)(r0 * in->cols) * es;
            sub.nbytes = (size_t)(nr * in->cols) * es;
            bi.src = &sub;
        }
        kvq_hq_opts ob = *o;
        ob.bps = bps[i];
        ob.ldlq_share = &fb; // the blocks share columns, tile, seed and damping: one LDLQ feedback
        kvq_encoded e;
        if ((s = kvq_hq_encode(&ob, &bi, &e, recon ? recon + r0 * in->cols : NULL, NULL, err))) {
            kvq_err_prefix(err, "row block %d", i);
            break;
        }
        json_t *bp = json_deep_copy(e.params);
        json_object_set_new(bp, "rows", json_integer(nr));
        for (int r = 0; r < 3 && !s; r++) {
            const kvq_blob *bl = NULL;
            for (int j = 0; j < e.n_blob; j++)
                if (!strcmp(e.blob[j].role, k_roles[r])) bl = &e.blob[j];
            size_t sz = bl ? bl->size : 0;
            json_object_set_new(bp, k_roles[r], json_integer((json_int_t)sz));
            uint8_t *nc = sz ? realloc(cat[r], len[r] + sz) : cat[r];
            if (sz && !nc) s = kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory");
            else if (sz) memcpy(nc + len[r], bl->data, sz), cat[r] = nc, len[r] += sz;
        }
        json_array_append_new(blocks, bp);
        for (int j = 0; j < e.n_part; j++) { // the blocks' stream parts summed by name; the params JSON, below
            if (!strcmp(e.part[j].name, "rice_params") || !strcmp(e.part[j].name, "seed") || !strcmp(e.part[j].name, "header"))
                continue;
            int k = 0;
            while (k < n_parts && strcmp(parts[k].name, e.part[j].name)) k++;
            if (k == n_parts && n_parts < KVQ_MAX_PARTS) parts[n_parts++] = (kvq_rate_part){{0}, 0}, strcpy(parts[k].name, e.part[j].name);
            if (k < n_parts) parts[k].bits += e.part[j].bits;
        }
        code_bits += e.code_bits_per_weight * (double)(nr * in->cols);
        se += e.predicted_mse * (double)(nr * in->cols);
        kvq_encoded_free(&e);
    }
    if (!s) {
        json_object_set_new(params, "blocks", blocks);
        blocks = NULL;
        out->params = params;
        params = NULL;
        for (int r = 0; r < 3; r++) {
            if (!cat[r]) continue;
            kvq_encoded_add_blob(out, k_roles[r], cat[r], len[r], 0);
            cat[r] = NULL;
        }
        for (int k = 0; k < n_parts; k++) kvq_encoded_add_part(out, parts[k].name, parts[k].bits);
        char *js = json_dumps(out->params, JSON_COMPACT);
        kvq_encoded_add_part(out, "header", js ? 8.0 * (double)strlen(js) : 0);
        free(js);
        out->code_bits_per_weight = code_bits / (double)(in->rows * in->cols);
        out->predicted_mse = se / (double)(in->rows * in->cols);
    }
    for (int r = 0; r < 3; r++) free(cat[r]);
    free(fb);
    json_decref(blocks);
    json_decref(params);
    if (s) kvq_encoded_free(out);
    return s;
}

// ---- the execution layout ---------------------------------------------------------------

// Packs every block at width vb into w[]; *n_esc their escapes. On error w[] is freed.
static kvq_status pack_all(const kvq_hq_block *bk, int n, int vb, int n_threads, kvq_hqx *w, int64_t *n_esc, kvq_err *err) {
    kvq_status s = KVQ_OK;
    *n_esc = 0;
    int i = 0;
    for (; i < n && !s; i++) {
        if ((s = kvq_hq_pack(&bk[i].h, bk[i].v, bk[i].nv, vb, n_threads, &w[i], err))) kvq_err_prefix(err, "block %d", i);
        else *n_esc += w[i].n_esc;
    }
    if (s)
        for (int j = 0; j < i - 1; j++) kvq_hqx_free(&w[j]);
    return s;
}

// One kvq_hqx from the blocks' own: every block packed at one width, q / planes / coset bytes
// and escapes concatenated (tiles are in row order), and the tile scales as floats (each block's
// own α is folded into them; the 256-entry scale table holds one α only). The automatic width is
// an unblocked tensor's rule over the whole tensor: the narrowest whose escapes stay under 0.25 %
// of its values (a high-rate block of few rows may then take escapes: kvq-small-llama's lm_head at
// 3.0 bits/param, first block 4.8 bits, packs at 5 bits instead of the 6 that block alone needs).
kvq_status kvq_hq_pack_blocks(const kvq_hq_block *bk, int n, int vbits, int n_threads, kvq_hqx *out, kvq_err *err) {
    memset(out, 0, sizeof *out);
    kvq_hqx *w = calloc((size_t)n, sizeof *w);
    if (!w) return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory");
    kvq_status s = KVQ_ERR_UNSUPPORTED;
    int64_t total = 0, n_esc = 0;
    for (int i = 0; i < n; i++) total += bk[i].h.rows * bk[i].h.cols_p;
    int vmax = vbits;
    for (int vb = vbits ? vbits : 4; vb <= (vbits ? vbits : 8); vb++) {
        s = pack_all(bk, n, vb, n_threads, w, &n_esc, err);
        if (s == KVQ_ERR_UNSUPPORTED && !vbits) continue; // values beyond this width's escapes: wider
        if (s) break;
        if (vbits || vb == 8 || n_esc <= total / 400) { vmax = vb; break; }
        for (int i = 0; i < n; i++) kvq_hqx_free(&w[i]);
        s = KVQ_ERR_UNSUPPORTED;
    }
    if (!s) {
        int64_t rows = 0;
        for (int i = 0; i < n; i++) rows += w[i].rows;
        const int64_t cols_p = w[0].cols_p, T = w[0].tile, np = rows * cols_p, planes = kvq_hqx_planes(vmax);
        *out = w[0];
        out->rows = rows;
        out->q = kvq_hqx_alloc((size_t)np * (vmax == 8 ? 2 : 1) / 2);
        out->hb = planes ? kvq_hqx_alloc((size_t)np / 64 * (size_t)planes * 8) : NULL;
        out->cb = w[0].cb ? malloc((size_t)np / 64) : NULL;
        out->scale = malloc(sizeof(float) * (size_t)(np / T));
        out->scode = NULL, out->lut = NULL, out->n_lut = 0, out->lut_own = 0, out->zero = NULL;
        out->esc_row = malloc(sizeof(uint32_t) * (size_t)(rows + 1));
        out->esc = malloc(sizeof(uint32_t) * (size_t)(n_esc ? n_esc : 1));
        out->n_esc = n_esc, out->esc_bits = NULL, out->esc_r = NULL;
        if (!out->q || (planes && !out->hb) || (w[0].cb && !out->cb) || !out->scale || !out->esc_row || !out->esc) {
            kvq_hqx_free(out);
            s = kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant: out of memory for the execution layout");
        } else {
            int64_t r0 = 0, e0 = 0;
            out->esc_row[0] = 0;
            for (int i = 0; i < n; i++) {
                const kvq_hqx *b = &w[i];
                const int64_t nb = b->rows * cols_p, nt = nb / T;
                memcpy(out->q + (size_t)(r0 * cols_p) * (vmax == 8 ? 2 : 1) / 2, b->q, (size_t)nb * (vmax == 8 ? 2 : 1) / 2);
                if (planes) memcpy(out->hb + (size_t)(r0 * cols_p / 64) * planes, b->hb, (size_t)nb / 64 * planes * 8);
                if (b->cb) memcpy(out->cb + r0 * cols_p / 64, b->cb, (size_t)nb / 64);
                for (int64_t t = 0; t < nt; t++)
                    out->scale[r0 * cols_p / T + t] = b->scode ? b->lut[b->scode[t]] : b->scale[t];
                for (int64_t r = 0; r < b->rows; r++) out->esc_row[r0 + r + 1] = (uint32_t)e0 + b->esc_row[r + 1];
                if (b->n_esc) memcpy(out->esc + e0, b->esc, sizeof(uint32_t) * (size_t)b->n_esc);
                r0 += b->rows, e0 += b->n_esc;
            }
        }
    }
    for (int i = 0; i < n; i++) kvq_hqx_free(&w[i]);
    free(w);
    return s;
}

// Groups blocks into at most max_parts layouts of their own (the runtime's row-block parts, each
// with its own width and, for a single block, its own scale table): each block's natural width
// first (what kvq_hq_pack would choose for it alone), then runs of equal width, then, while there
// are too many runs, the adjacent pair whose merged width wastes the fewest weight-bits.
kvq_status kvq_hq_pack_block_parts(const kvq_hq_block *bk, int n, int max_parts, int n_threads, kvq_hqx *out,
                                   int64_t *row0, int *n_out, kvq_err *err) {
    *n_out = 0;
    if (n < 1 || max_parts < 1) return kvq_err_set(err, KVQ_ERR_ARG, "hyperquant: no blocks to pack");
    int width[KVQ_HQ_MAX_BLOCKS], first[KVQ_HQ_MAX_BLOCKS + 1], gw[KVQ_HQ_MAX_BLOCKS], ng = 0;
    for (int i = 0; i < n; i++) {
        kvq_hqx w;
        kvq_status s = kvq_hq_pack(&bk[i].h, bk[i].v, bk[i].nv, 0, n_threads, &w, err);
        if (s) { kvq_err_prefix(err, "block %d", i); return s; }
        width[i] = w.vbits;
        kvq_hqx_free(&w);
        if (i == 0 || width[i] != gw[ng - 1]) first[ng] = i, gw[ng++] = width[i];
    }
    first[ng] = n;
    while (ng > max_parts) { // merge the cheapest adjacent pair: Σ rows × (merged width − own width)
        int best = 0;
        double bc = INFINITY;
        for (int g = 0; g + 1 < ng; g++) {
            int wm = gw[g] > gw[g + 1] ? gw[g] : gw[g + 1];
            double c = 0;
            for (int i = first[g]; i < first[g + 2]; i++) c += (double)bk[i].h.rows * (wm - width[i]);
            if (c < bc) bc = c, best = g;
        }
        gw[best] = gw[best] > gw[best + 1] ? gw[best] : gw[best + 1];
        for (int g = best + 1; g < ng; g++) gw[g] = gw[g + 1], first[g] = first[g + 1];
        first[ng - 1] = n;
        ng--;
    }
    kvq_status s = KVQ_OK;
    for (int g = 0; g < ng && !s; g++) {
        const int b0 = first[g], nb = first[g + 1] - first[g];
        s = nb == 1 ? kvq_hq_pack(&bk[b0].h, bk[b0].v, bk[b0].nv, gw[g], n_threads, &out[g], err)
                    : kvq_hq_pack_blocks(bk + b0, nb, gw[g], n_threads, &out[g], err);
        if (s) {
            kvq_err_prefix(err, "blocks %d-%d", b0, b0 + nb - 1);
            for (int j = 0; j < g; j++) kvq_hqx_free(&out[j]);
            return s;
        }
        row0[g] = bk[b0].row0;
    }
    *n_out = ng;
    return KVQ_OK;
}
