// PQ execution layout "pqx": what the CPU kernels read at run time for tensors of the `pq`
// codec (and `qet` encodings without a swap tree, l = 0). Plain C99 + stdint, also compiled
// as CUDA C++ (the GPU backend decodes it to dense at upload for now). Built from the stored
// payload at load (libconv/codec/qet/pq_pack.c) and never written to a file: the format is
// unchanged. A tensor (rows, cols) is cut into m = cols / w subspaces of w columns; stage s
// (1 or 2, RQO) maps every (row, subspace) to one of k_s centroids of w values, and
//   W[r][j·w + q] = Σ_s C_s[j][idx_s[r][j]][q]   (stage sums in float, stage 1 first).
// So W·x = Σ_s Σ_j L_s[j][idx_s[r][j]] with one table per token L_s[j][c] = ⟨C_s[j][c], x_j⟩:
// k_s·cols multiply-adds per token, then one lookup per w weights.
//
// Storage, per stage:
//   idx  (rows_p / 8, m, 8): the indices of 8 consecutive rows for subspace j are 8
//        consecutive elements, so a SIMD lane per row reads them with one load; uint8 when
//        k_s <= 256, else uint16 (the file packs ⌈log2 k⌉ bits; widening costs at most 16/9 on
//        the indices, ~1.0–1.2× on the whole tensor at the ratios measured, docs/EXECUTION.md).
//        rows_p = rows rounded up to 8; padding rows hold index 0 and are never written out.
//   cb   (m, w, k_s) transposed codebooks (the k_s values of one coordinate are contiguous, so
//        a table is built 8 centroids at a time), of one of three types: bf16 bits when the
//        file stores bf16 centroids (the bf16 source case: exact, same bytes as the file);
//        CQO codes (`cb=N`, N <= 16) widened to uint16, with cb_ms holding the subspace's
//        float32 (min, step), value = min + (float)code · step exactly as the decoder computes
//        it; else float32 (f32 and f16 sources, CQO codes of more than 16 bits).
#ifndef KVQ_PQ_LAYOUT_H
#define KVQ_PQ_LAYOUT_H

#include <stdint.h>

#ifdef __cplusplus
#define KVQ_PQ_STATIC_ASSERT static_assert
#else
#define KVQ_PQ_STATIC_ASSERT _Static_assert
#endif
#ifdef __CUDACC__
#define KVQ_PQ_HD __host__ __device__
#else
#define KVQ_PQ_HD
#endif

#define KVQ_PQX_VERSION 1
#define KVQ_PQX_RB 8          // rows per index block (one SIMD lane each)
#define KVQ_PQX_MAX_STAGES 2
#define KVQ_PQX_MAX_W 64      // widest subspace the codec writes (option w=)
#define KVQ_PQX_MAX_K 65536   // largest k a uint16 index holds

enum { KVQ_PQX_CB_BF16 = 0, KVQ_PQX_CB_F32 = 1, KVQ_PQX_CB_CQO = 2 };

KVQ_PQ_STATIC_ASSERT(KVQ_PQX_RB == 8, "the AVX2 kernels hold one row per 32-bit lane of a 256-bit vector");
KVQ_PQ_STATIC_ASSERT(sizeof(uint16_t) == 2, "bf16 codebooks and wide indices are 2 bytes");

typedef struct {
    int stages;               // 1 or 2
    int w;                    // subspace width
    int cb_type;              // KVQ_PQX_CB_*: cb holds bf16 bits, floats, or CQO codes (uint16)
    int64_t rows, cols, m, rows_p;
    int64_t k[KVQ_PQX_MAX_STAGES];
    int ib[KVQ_PQX_MAX_STAGES];    // bytes per index: 1 (k <= 256) or 2
    void *idx[KVQ_PQX_MAX_STAGES]; // (rows_p / 8, m, 8) uint8 or uint16
    void *cb[KVQ_PQX_MAX_STAGES];  // (m, w, k) bf16 bits, float or CQO codes
    float *cb_ms[KVQ_PQX_MAX_STAGES]; // CQO: (m, 2) min and step per subspace; else NULL
} kvq_pqx;

/** Element offset of (row r, subspace j) in a stage's idx array. */
KVQ_PQ_HD static inline int64_t kvq_pqx_idx_at(const kvq_pqx *p, int64_t r, int64_t j) {
    return ((r / KVQ_PQX_RB) * p->m + j) * KVQ_PQX_RB + r % KVQ_PQX_RB;
}
/** Index of (row r, subspace j) in stage s. */
KVQ_PQ_HD static inline uint32_t kvq_pqx_idx(const kvq_pqx *p, int s, int64_t r, int64_t j) {
    int64_t o = kvq_pqx_idx_at(p, r, j);
    return p->ib[s] == 1 ? ((const uint8_t *)p->idx[s])[o] : ((const uint16_t *)p->idx[s])[o];
}
/** Codebook value of stage s, subspace j, coordinate q, centroid c, as float. */
KVQ_PQ_HD static inline float kvq_pqx_cb(const kvq_pqx *p, int s, int64_t j, int q, int64_t c) {
    int64_t o = (j * p->w + q) * p->k[s] + c;
    if (p->cb_type == KVQ_PQX_CB_F32) return ((const float *)p->cb[s])[o];
    if (p->cb_type == KVQ_PQX_CB_CQO) {
        const float t = (float)((const uint16_t *)p->cb[s])[o] * p->cb_ms[s][2 * j + 1];
        return p->cb_ms[s][2 * j] + t;
    }
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)((const uint16_t *)p->cb[s])[o] << 16;
    return v.f;
}

#endif
