// The 16-bit form of an hqx tensor's escapes (kernels/cpu/hqx_esc16.h): built once from the
// packer's 32-bit entries when a tensor is uploaded to the GPU, with the byte counts the
// upload reports.
#include "kernels/cpu/hqx_esc16.h"

#include <stdlib.h>
#include <string.h>

void kvq_hqx_esc16_free(kvq_hqx_esc16 *x) {
    if (!x) return;
    free(x->e16);
    free(x->seg);
    free(x->big);
    memset(x, 0, sizeof *x);
}

size_t kvq_hqx_esc_dev_bytes(const kvq_hqx *w, const kvq_hqx_esc16 *x) {
    if (!w->esc_row) return 0;
    const size_t rows = (size_t)w->rows, n = w->esc_row[rows];
    size_t b = 4 * (rows + 1);
    if (x && x->used) b += 2 * n + 4 * rows * (size_t)x->s1 + 8 * (size_t)x->n_big;
    else b += 4 * n;
    return b;
}

size_t kvq_hqx_gpu_bytes(const kvq_hqx *w, const kvq_hqx_esc16 *x) {
    const size_t n = (size_t)(w->rows * w->cols_p), tiles = n / (size_t)w->tile;
    size_t b = w->vbits == 8 ? n : n / 2;
    if (w->hb) b += n / 64 * (size_t)kvq_hqx_planes(w->vbits) * 8;
    if (w->cb) b += n / 64;
    if (w->scode) b += tiles + 256 * sizeof(float); // the codes and the 256-entry table
    if (w->scale) b += tiles * sizeof(float);
    if (w->zero) b += tiles * sizeof(float);
    return b + kvq_hqx_esc_dev_bytes(w, x);
}

// Whether the 16-bit form can hold w's escapes, and how many need big (*n_big).
static int esc16_fits(const kvq_hqx *w, int s1, int64_t *n_big) {
    const int64_t n = w->esc_row[w->rows];
    *n_big = 0;
    for (int64_t r = 0; r < w->rows; r++) {
        uint32_t prev = 0; // the previous entry's segment: a row's must not decrease
        for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++) {
            const uint32_t col = kvq_hqx_esc_col(w->esc[e]), sg = col >> KVQ_HQX_ESC16_SEG_BITS;
            if (sg < prev || sg > (uint32_t)s1) return 0;
            prev = sg;
            const uint16_t v = kvq_hqx_esc16_pack(col, kvq_hqx_esc_delta(w->esc[e]));
            *n_big += v >> KVQ_HQX_ESC16_SEG_BITS == 0;
        }
    }
    return *n_big <= n / KVQ_HQX_ESC16_BIG_DIV;
}

kvq_status kvq_hqx_esc16_build(const kvq_hqx *w, kvq_hqx_esc16 *out, kvq_err *err) {
    memset(out, 0, sizeof *out);
    if (!w->esc_row || !w->esc) return KVQ_OK;
    const int64_t n = w->esc_row[w->rows];
    const int64_t S = (w->cols_p + KVQ_HQX_ESC16_SEG - 1) / KVQ_HQX_ESC16_SEG;
    if (n == 0 || S > KVQ_HQX_ESC16_MAX_SEG || (uint64_t)w->rows * (uint64_t)(S - 1) >= ((uint64_t)1 << 32)) return KVQ_OK;
    kvq_hqx_esc16 x = {0};
    x.s1 = (int)(S - 1);
    x.rows = w->rows;
    x.n = n;
    if (!esc16_fits(w, x.s1, &x.n_big)) return KVQ_OK;
    x.used = 1;
    if (kvq_hqx_esc_dev_bytes(w, &x) >= kvq_hqx_esc_dev_bytes(w, NULL)) return KVQ_OK;
    x.e16 = malloc(sizeof(uint16_t) * (size_t)n);
    x.seg = x.s1 ? malloc(sizeof(uint32_t) * (size_t)w->rows * (size_t)x.s1) : NULL;
    x.big = x.n_big ? malloc(sizeof(uint32_t) * 2 * (size_t)x.n_big) : NULL;
    if (!x.e16 || (x.s1 && !x.seg) || (x.n_big && !x.big)) {
        kvq_hqx_esc16_free(&x);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "cuda: out of memory for %lld 16-bit escapes", (long long)n);
    }
    int64_t nb = 0;
    for (int64_t r = 0; r < w->rows; r++) {
        const size_t r0 = (size_t)r * (size_t)x.s1; // row r's starts: seg[r0 + s - 1]
        int s = 1;                                  // the next segment start to set
        for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++) {
            const uint32_t col = kvq_hqx_esc_col(w->esc[e]);
            for (; s <= x.s1 && (uint32_t)s << KVQ_HQX_ESC16_SEG_BITS <= col; s++) x.seg[r0 + s - 1] = e;
            x.e16[e] = kvq_hqx_esc16_pack(col, kvq_hqx_esc_delta(w->esc[e]));
            if (x.e16[e] >> KVQ_HQX_ESC16_SEG_BITS == 0) {
                x.big[2 * nb] = e;
                x.big[2 * nb + 1] = w->esc[e];
                nb++;
            }
        }
        for (; s <= x.s1; s++) x.seg[r0 + s - 1] = w->esc_row[r + 1];
    }
    *out = x;
    return KVQ_OK;
}
