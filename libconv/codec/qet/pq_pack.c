// Builds the PQ execution layout (kernels/pq_layout.h) of a `pq` tensor, or of a `qet` one
// without a swap tree (l = 0), from its stored blobs at load: indices unpacked from their
// ⌈log2 k⌉-bit stream into bytes or uint16 in row blocks of 8, codebooks transposed per
// subspace (bf16 and f16 bits kept as stored; f32 sources and CQO codes of more than 16 bits as float32, the
// decoder's values). QET with a 3-level swap tree (the `qet:` default) gets the qetx variant
// (kernels/pq_layout.h): indicator bits regrouped into one 12-bit switch field per block of 8
// inputs, indices in slot order at 4, 8 or 16 bits, codebook blobs kept as stored. Other QET
// (levels 1–2 or > 3, widths other than 8, columns not a multiple of 64) gets the general qetg
// variant (2026-11-27): indicator bits and codebook blobs as stored, indices at 4, 8 or 16 bits.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/hqx.h"
#include "kernels/cpu/pq.h"
#include "libconv/codec/qet/qet.h"


// Index a of (stage s, position o) at the layout's 4, 8 or 16 bits (idx zeroed by kvq_hqx_alloc).
static void put_index(kvq_pqx *out, int s, int64_t o, uint32_t a) {
    if (out->qbits[s] == 4) ((uint8_t *)out->idx[s])[o >> 1] |= (uint8_t)(a << (4 * (o & 1)));
    else if (out->qbits[s] == 8) ((uint8_t *)out->idx[s])[o] = (uint8_t)a;
    else ((uint16_t *)out->idx[s])[o] = (uint16_t)a;
}

// Whether every codebook value of stage s is finite (a NaN/Inf centroid: the decoded path refuses
// the tensor too); if not, frees the layout and says which subspace.
static int cb_finite(kvq_pqx *out, int s, kvq_err *err) {
    for (int64_t j = 0; j < out->m; j++)
        for (int64_t c = 0; c < out->k[s]; c++)
            for (int q = 0; q < out->w; q++)
                if (!isfinite(kvq_qetg_cb(out, s, j, c, q))) {
                    kvq_pqx_free(out);
                    kvq_err_set(err, KVQ_ERR_FORMAT, "qet: non-finite codebook value in stage %d, subspace %lld", s + 1,
                                (long long)j);
                    return 0;
                }
    return 1;
}

// The qetx layout of a tensor the codec's check accepted (l == 3, w == 8, d % 64 == 0).
static kvq_status pack_qetx(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n, int64_t d,
                            int cb, kvq_dtype src, kvq_pqx *out, kvq_err *err) {
    const json_t *ks = json_object_get(params, "k");
    const int stages = (int)json_array_size(ks);
    *out = (kvq_pqx){.stages = stages, .w = 8, .rows = n, .cols = d, .m = d / 8, .rows_p = n,
                     .cb_type = cb ? KVQ_PQX_CB_CQO : src == KVQ_DTYPE_BF16 ? KVQ_PQX_CB_BF16 : KVQ_PQX_CB_F32,
                     .levels = KVQ_QETX_LEVELS, .cb_bits = cb, .groups = d / 64};
    const int64_t m = out->m, G = out->groups, D = d / 8;
    const size_t swn = (size_t)(n * G) * KVQ_QETX_SW_BYTES;
    out->sw = kvq_hqx_alloc(swn + KVQ_QETX_SW_PAD);
    if (!out->sw) goto nomem;
    // switch fields: the file's (row, level, pair) bits → one 12-bit field per block
    const uint8_t *ind = kvq_blob_find(blobs, n_blobs, "indicators")->data;
    for (int64_t r = 0; r < n; r++) {
        const uint64_t base = (uint64_t)r * 3 * (uint64_t)(d / 2);
        uint8_t *row = out->sw + (size_t)(r * G) * KVQ_QETX_SW_BYTES;
        for (int64_t b = 0; b < D; b++) {
            uint32_t f = kvq_qet_get_bits(ind, base + (uint64_t)(4 * b), 4);
            f |= kvq_qet_get_bits(ind, base + (uint64_t)(d / 2 + 2 * b), 2) << 4;
            f |= kvq_qet_get_bits(ind, base + (uint64_t)(d / 2 + d / 4 + 2 * b), 2) << 6;
            for (int q = 0; q < 4; q++) f |= kvq_qet_get_bits(ind, base + (uint64_t)(d + q * (d / 8) + b), 1) << (8 + q);
            const int64_t pos = 12 * b; // bit offset in the row's fields (groups are contiguous)
            for (int i = 0; i < 12; i++)
                if (f >> i & 1) row[(pos + i) >> 3] |= (uint8_t)(1u << ((pos + i) & 7));
        }
    }
    for (int s = 0; s < stages; s++) {
        const int64_t k = json_integer_value(json_array_get(ks, (size_t)s));
        out->k[s] = k;
        out->qbits[s] = k <= 16 ? 4 : k <= 256 ? 8 : 16;
        char role[24];
        snprintf(role, sizeof role, "idx.%d", s + 1);
        const kvq_blob_view *ib = kvq_blob_find(blobs, n_blobs, role);
        snprintf(role, sizeof role, "cb.%d", s + 1);
        const kvq_blob_view *cbv = kvq_blob_find(blobs, n_blobs, role);
        out->idx[s] = kvq_hqx_alloc((size_t)(n * m) * (size_t)out->qbits[s] / 8 + 1);
        out->cb[s] = kvq_hqx_alloc(cbv->size + 16); // +16: the expanders read 16-byte words
        if (!out->idx[s] || !out->cb[s]) goto nomem;
        memcpy(out->cb[s], cbv->data, cbv->size);
        out->cb_size[s] = cbv->size;
        // indices: file (row, subspace j) → (row, group g, leaf t) with j = g + t·G
        const int b = kvq_qet_ceil_log2(k);
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < m; j++) {
                const uint32_t a = b ? kvq_qet_get_bits(ib->data, (uint64_t)(r * m + j) * (uint64_t)b, b) : 0;
                if (a >= (uint64_t)k) {
                    kvq_pqx_free(out);
                    return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: centroid index out of range in row %lld", (long long)r);
                }
                const int64_t o = (r * G + j % G) * 8 + j / G;
                put_index(out, s, o, a);
            }
        if (!cb_finite(out, s, err)) return KVQ_ERR_FORMAT;
    }
    return KVQ_OK;
nomem:
    kvq_pqx_free(out);
    return kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory for the layout of %lld x %lld", (long long)n, (long long)d);
}

// The general QET layout (qetg) of a tensor the codec's check accepted: any swap tree the qetx
// layout does not take. Indicator bits and codebook blobs as stored; indices re-held at 4, 8 or
// 16 bits, row-major (the file's ⌈log2 k⌉-bit stream would need a shift and mask per read).
static kvq_status pack_qetg(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n, int64_t d, int l,
                            int w, int cb, kvq_dtype src, kvq_pqx *out, kvq_err *err) {
    const json_t *ks = json_object_get(params, "k");
    const int stages = (int)json_array_size(ks);
    *out = (kvq_pqx){.stages = stages, .w = w, .rows = n, .cols = d, .m = d / w, .rows_p = n, .levels = l, .qetg = 1,
                     .cb_type = cb ? KVQ_PQX_CB_CQO : src == KVQ_DTYPE_BF16 ? KVQ_PQX_CB_BF16
                                                 : src == KVQ_DTYPE_F16 ? KVQ_PQX_CB_F16 : KVQ_PQX_CB_F32,
                     .cb_bits = cb};
    const int64_t m = out->m;
    const size_t swn = ((size_t)n * (size_t)l * (size_t)(d / 2) + 7) / 8;
    const kvq_blob_view *ind = kvq_blob_find(blobs, n_blobs, "indicators");
    out->sw = kvq_hqx_alloc(swn + 8);
    if (!out->sw) goto nomem;
    memcpy(out->sw, ind->data, swn); // (kvq_qet_check: the blob is exactly swn bytes)
    for (int s = 0; s < stages; s++) {
        const int64_t k = json_integer_value(json_array_get(ks, (size_t)s));
        out->k[s] = k;
        out->qbits[s] = k <= 16 ? 4 : k <= 256 ? 8 : 16;
        char role[24];
        snprintf(role, sizeof role, "idx.%d", s + 1);
        const kvq_blob_view *ib = kvq_blob_find(blobs, n_blobs, role);
        snprintf(role, sizeof role, "cb.%d", s + 1);
        const kvq_blob_view *cbv = kvq_blob_find(blobs, n_blobs, role);
        out->idx[s] = kvq_hqx_alloc(((size_t)(n * m) * (size_t)out->qbits[s] + 7) / 8 + 1);
        out->cb[s] = kvq_hqx_alloc(cbv->size + 16); // +16: a CQO code is read as 5 bytes at any offset
        if (!out->idx[s] || !out->cb[s]) goto nomem;
        memcpy(out->cb[s], cbv->data, cbv->size);
        out->cb_size[s] = cbv->size;
        const int b = kvq_qet_ceil_log2(k);
        for (int64_t o = 0; o < n * m; o++) {
            const uint32_t a = b ? kvq_qet_get_bits(ib->data, (uint64_t)o * (uint64_t)b, b) : 0;
            if (a >= (uint64_t)k) {
                kvq_pqx_free(out);
                return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: centroid index out of range in row %lld", (long long)(o / m));
            }
            put_index(out, s, o, a);
        }
        if (!cb_finite(out, s, err)) return KVQ_ERR_FORMAT;
    }
    return KVQ_OK;
nomem:
    kvq_pqx_free(out);
    return kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory for the layout of %lld x %lld", (long long)n, (long long)d);
}

kvq_status kvq_qet_pack_pqx(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n, int64_t d,
                            kvq_pqx *out, kvq_err *err) {
    memset(out, 0, sizeof *out);
    kvq_status st = kvq_qet_check(params, blobs, n_blobs, n, d, err); // every size and k checked here
    if (st) return st;
    int l = json_integer_value(json_object_get(params, "l")), w = json_integer_value(json_object_get(params, "w"));
    int cb = json_integer_value(json_object_get(params, "cb"));
    const json_t *ks = json_object_get(params, "k");
    kvq_dtype src;
    kvq_dtype_parse(json_string_value(json_object_get(params, "src")), &src);
    if (l > 0 && (cb > 25 || json_array_size(ks) > KVQ_PQX_MAX_STAGES || n > (1 << 30) || d > (1 << 30)))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                           "qet: swap trees with l=%d, w=%d, %lld columns, cb=%d, %zu stages have no execution layout "
                           "(codebooks of at most 25 bits, at most %d stages)",
                           l, w, (long long)d, cb, json_array_size(ks), KVQ_PQX_MAX_STAGES);
    if (l > 0) {
        for (size_t s = 0; s < json_array_size(ks); s++)
            if (json_integer_value(json_array_get(ks, s)) > KVQ_PQX_MAX_K)
                return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "qet: stage %zu has more than %d centroids", s + 1, KVQ_PQX_MAX_K);
        if (l == KVQ_QETX_LEVELS && w == 8 && d % 64 == 0 && (cb || src == KVQ_DTYPE_BF16 || src == KVQ_DTYPE_F32))
            return pack_qetx(params, blobs, n_blobs, n, d, cb, src, out, err);
        return pack_qetg(params, blobs, n_blobs, n, d, l, w, cb, src, out, err); // any other tree (2026-11-27)
    }
    if (w > KVQ_PQX_MAX_W || n > (1 << 30) || d > (1 << 30))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "pq: subspace width %d or shape %lld x %lld outside the layout",
                           w, (long long)n, (long long)d);
    const int stages = (int)json_array_size(ks);
    *out = (kvq_pqx){.stages = stages, .w = w, .rows = n, .cols = d, .m = d / w,
                     .rows_p = (n + KVQ_PQX_RB - 1) / KVQ_PQX_RB * KVQ_PQX_RB,
                     .cb_type = cb > 16 || (!cb && src != KVQ_DTYPE_BF16 && src != KVQ_DTYPE_F16) ? KVQ_PQX_CB_F32
                                : cb                                  ? KVQ_PQX_CB_CQO
                                : src == KVQ_DTYPE_F16                ? KVQ_PQX_CB_F16
                                                                      : KVQ_PQX_CB_BF16};
    const int64_t m = out->m;
    if (out->cb_type == KVQ_PQX_CB_CQO) out->cb_bits = cb;
    for (int s = 0; s < stages; s++) {
        const int64_t k = json_integer_value(json_array_get(ks, (size_t)s));
        if (k > KVQ_PQX_MAX_K || m * k > (int64_t)1 << 28) {
            kvq_pqx_free(out);
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "pq: stage %d has k=%lld: too many centroids for the layout",
                               s + 1, (long long)k);
        }
        out->k[s] = k;
        out->ib[s] = k <= 256 ? 1 : 2;
        char role[24];
        snprintf(role, sizeof role, "idx.%d", s + 1);
        const kvq_blob_view *ib = kvq_blob_find(blobs, n_blobs, role);
        snprintf(role, sizeof role, "cb.%d", s + 1);
        const uint8_t *cbb = kvq_blob_find(blobs, n_blobs, role)->data;
        out->idx[s] = kvq_hqx_alloc((size_t)(out->rows_p * m) * (size_t)out->ib[s]);
        out->cb[s] = kvq_hqx_alloc((size_t)(m * w * k) * (out->cb_type == KVQ_PQX_CB_F32 ? 4u : 2u));
        if (out->cb_type == KVQ_PQX_CB_CQO) out->cb_ms[s] = kvq_hqx_alloc(8 * (size_t)m);
        if (!out->idx[s] || !out->cb[s] || (out->cb_type == KVQ_PQX_CB_CQO && !out->cb_ms[s])) {
            kvq_pqx_free(out);
            return kvq_err_set(err, KVQ_ERR_NOMEM, "pq: out of memory for the layout of %lld x %lld", (long long)n,
                               (long long)d);
        }
        // indices: file (row, subspace) at ⌈log2 k⌉ bits each → (row block, subspace, 8 rows)
        const int b = kvq_qet_ceil_log2(k);
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < m; j++) {
                uint32_t a = b ? kvq_qet_get_bits(ib->data, (uint64_t)(r * m + j) * (uint64_t)b, b) : 0;
                if (a >= (uint64_t)k) {
                    kvq_pqx_free(out);
                    return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: centroid index out of range in row %lld", (long long)r);
                }
                int64_t o = kvq_pqx_idx_at(out, r, j);
                if (out->ib[s] == 1) ((uint8_t *)out->idx[s])[o] = (uint8_t)a;
                else ((uint16_t *)out->idx[s])[o] = (uint16_t)a;
            }
        // codebooks: file (subspace, centroid, coordinate) → (subspace, coordinate, centroid)
        const size_t dsz = kvq_dtype_size(src);
        for (int64_t j = 0; j < m; j++) {
            float mn = 0, step = 0;
            if (cb) {
                memcpy(&mn, cbb + 8 * j, 4);
                memcpy(&step, cbb + 8 * j + 4, 4);
            }
            if (out->cb_ms[s]) out->cb_ms[s][2 * j] = mn, out->cb_ms[s][2 * j + 1] = step;
            for (int64_t c = 0; c < k; c++)
                for (int q = 0; q < w; q++) {
                    const int64_t fi = (j * k + c) * w + q, oi = (j * w + q) * k + c;
                    if (out->cb_type == KVQ_PQX_CB_BF16 || out->cb_type == KVQ_PQX_CB_F16) { // the file's 2 bytes
                        memcpy((uint16_t *)out->cb[s] + oi, cbb + 2 * fi, 2);
                        continue;
                    }
                    if (out->cb_type == KVQ_PQX_CB_CQO) {
                        ((uint16_t *)out->cb[s])[oi] = (uint16_t)kvq_qet_get_bits(cbb + 8 * m, (uint64_t)fi * (uint64_t)cb, cb);
                        continue;
                    }
                    float v;
                    if (cb) v = mn + (float)kvq_qet_get_bits(cbb + 8 * m, (uint64_t)fi * (uint64_t)cb, cb) * step;
                    else kvq_dtype_to_f32(src, cbb + dsz * fi, 1, &v);
                    ((float *)out->cb[s])[oi] = v;
                }
        }
        for (int64_t j = 0; j < m; j++) // a NaN/Inf centroid: the decoded path refuses the tensor too
            for (int q = 0; q < w; q++)
                for (int64_t c = 0; c < k; c++)
                    if (!isfinite(kvq_pqx_cb(out, s, j, q, c))) {
                        kvq_pqx_free(out);
                        return kvq_err_set(err, KVQ_ERR_FORMAT, "pq: non-finite codebook value in stage %d, subspace %lld",
                                           s + 1, (long long)j);
                    }
    }
    // fewer bits a held index where bytes or uint16 would waste them: k <= 64 lane-packed, k =
    // 257..4096 split into low bytes + high bits (⌈log2 k⌉ bits, the file's width)
    // (CQO codes stay uint16 here: the loader packs them, kvq_weights_get_pqx)
    if (kvq_pqx_pack_lanes(out, 0) || kvq_pqx_split_wide(out)) {
        kvq_pqx_free(out);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "pq: out of memory for the layout of %lld x %lld", (long long)n, (long long)d);
    }
    return KVQ_OK;
}
