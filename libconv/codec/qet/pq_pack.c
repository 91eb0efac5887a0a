// Builds the PQ execution layout (kernels/pq_layout.h) of a `pq` tensor, or of a `qet` one
// without a swap tree (l = 0), from its stored blobs at load: indices unpacked from their
// ⌈log2 k⌉-bit stream into bytes or uint16 in row blocks of 8, codebooks transposed per
// subspace (bf16 bits kept as stored; other sources and CQO codes expanded to float32, the
// decoder's values). QET with swap trees has no layout yet (KVQ_ERR_UNSUPPORTED: decode it).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/hqx.h"
#include "kernels/cpu/pq.h"
#include "libconv/codec/qet/qet.h"


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
    if (l > 0)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "qet: swap trees (l=%d) have no execution layout yet", l);
    if (w > KVQ_PQX_MAX_W || n > (1 << 30) || d > (1 << 30))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "pq: subspace width %d or shape %lld x %lld outside the layout",
                           w, (long long)n, (long long)d);
    const int stages = (int)json_array_size(ks);
    *out = (kvq_pqx){.stages = stages, .w = w, .rows = n, .cols = d, .m = d / w,
                     .rows_p = (n + KVQ_PQX_RB - 1) / KVQ_PQX_RB * KVQ_PQX_RB,
                     .cb_type = cb > 16 || (!cb && src != KVQ_DTYPE_BF16) ? KVQ_PQX_CB_F32
                                : cb                                  ? KVQ_PQX_CB_CQO
                                                                      : KVQ_PQX_CB_BF16};
    const int64_t m = out->m;
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
                    if (out->cb_type == KVQ_PQX_CB_BF16) {
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
    return KVQ_OK;
}
