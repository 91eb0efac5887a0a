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
//        k_s <= 256, else uint16 (the file packs ⌈log2 k⌉ bits; the loader re-lays byte stages of
//        k <= 64 lane-packed and uint16 stages of k <= 4096 split, below, docs/EXECUTION.md).
//        rows_p = rows rounded up to 8; padding rows hold index 0 and are never written out.
//        Lane-packed (pbits[s] > 0, set by kvq_pqx_pack_lanes where it holds fewer bytes than
//        bytes: k = 17..32 at 5.33 bits instead of 8, 33..64 at 6.4; uint16 stages only when a
//        caller asks, kvq_pqx_pack_lanes(w, 1): the loader splits them instead): b = pbits[s] = ⌈log2 k⌉-bit fields, P = pper[s]
//        of them in V = pwords[s] 32-bit words per row, for groups of P subspaces. uint32 array
//        (rows_p / 8, pgroups = ⌈m / P⌉, V, 8): word u of row r's group g at
//        kvq_pqx_pk_at(r, g) + 8u, so one 256-bit load gives word u of the 8 rows of a block;
//        subspace j = g·P + p is bits [p·b, p·b + b) of the row's V words read as one little-endian
//        bit string (a field may straddle two words when V > 1; every layout built today has
//        V = 1, the readers take either). ib[s] stays the unpacked width (1 or 2).
//        Split (hbits[s] = h > 0, set by kvq_pqx_split_wide for uint16 stages with k = 257..4096,
//        9..12-bit indices; the default since 2026-11-26): idx[s] holds the low 8 bits of every
//        index as uint8 in the (rows_p / 8, m, 8) order above, and hi[s], (rows_p / 8, m, h) bytes,
//        the high h = ⌈log2 k⌉ − 8 bits: the h bytes of (row block, subspace j), read as one
//        little-endian bit string, hold bits 8..8+h−1 of row i's index at bits [h·i, h·i + h).
//        Exactly ⌈log2 k⌉ bits a held index (the file's width); hi[s] has 4 bytes of padding (the
//        AVX2 reader loads 4 bytes at any group). ib[s] stays 2 (the unpacked width).
//        Every reader goes through kvq_pqx_idx (or copies idx[s] and hi[s] as kvq_pqx_idx_bytes
//        counts them).
//   cb   (m, w, k_s) transposed codebooks (the k_s values of one coordinate are contiguous, so
//        a table is built 8 centroids at a time), of one of four types: bf16 bits when the
//        file stores bf16 centroids (the bf16 source case: exact, same bytes as the file);
//        CQO codes (`cb=N`, N <= 16) widened to uint16, with cb_ms holding the subspace's
//        float32 (min, step), value = min + (float)code · step exactly as the decoder computes
//        it; f16 bits when the file stores f16 centroids (an f16 source; type appended as 3, widened
//        exactly, 2026-11-26: they were float32, 2.0× the stored bytes); else float32 (f32 sources,
//        CQO codes of more than 16 bits).
//        Split CQO codes (cbq_bits = B in 1..15, set by kvq_pqx_split_codes; the default since
//        2026-11-26): cb[s] holds the low 8 bits of every code as uint8, (m, w, k8) with
//        k8 = k_s rounded up to 8 (padding codes 0, never read as centroids), and, when B > 8,
//        cb_hi[s] (m·w·k8 / 8, h) bytes the high h = B − 8 bits: the h bytes of group g (elements
//        8g..8g+7 of that order), read as one little-endian bit string, hold element 8g + i's bits
//        at [h·i, h·i + h) (the index split's order; 8 bytes of padding: the AVX2 table build loads
//        4 or 8 bytes a group). B·k8/k bits a held code (the file's width, plus the rounding of k).
//        cbq_bits = 0: uint16 codes as above.
//
// QET with a 3-level swap tree ("qetx", levels == 3; the `qet:` default) shares the struct.
// Row r of W is a row-specific permutation of X*[r] = Σ_s C_s: input block b (coordinates
// 8b..8b+7) lands on X* positions b + t·D (D = cols/8, leaf t = 0..7) through a 3-level
// butterfly whose 12 switch bits are the block's indicator bits, so
//   W[r][8b + σ_rb(t)] = X*[r][b + t·D],   σ_rb = kvq_qetx_sigma(switch field of (r, b)).
// X*[r][b + t·D] is coordinate b % 8 of slot (g = b / 8, t), the subspace j = g + t·G
// (G = cols/64 groups of 8 blocks): a group's 64 weights come from 8 centroids. Storage:
//   sw   (rows, G, 12 bytes): the 12-bit switch field of block b = 8g + i at bits 12i..12i+11
//        of its group's 12 bytes (LSB-first): bits 0–3 level-1 pairs 4b..4b+3; 4–5 level-2
//        pairs 2b, 2b+1 of the S half, 6–7 the same pairs of the L half; 8–11 level-3 pair b
//        of quarters 0..3. 1.5 bits a weight, as in the file; 8 bytes of padding at the end.
//   idx  (rows, G, 8) per stage, slot order (g, t), at qbits = 4 (k <= 16, two per byte, low
//        nibble first), 8 (k <= 256) or 16 bits.
//   cb   the file's codebook blob, bytes as stored (CQO: (min, step) float32 per subspace then
//        (subspace, centroid, coordinate) codes of cb_bits; raw: bf16 or f32 values), expanded
//        to float per product (kernels/cpu/pq.h, kvq_qetx_expand): held ≈ stored. Allocated
//        with 16 bytes of padding (the expanders read 16-byte words).
// Only levels == 3, w == 8 and cols a multiple of 64 have this layout (other QET is decoded).
#ifndef KVQ_PQ_LAYOUT_H
#define KVQ_PQ_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define KVQ_PQ_STATIC_ASSERT static_assert
#else
#define KVQ_PQ_STATIC_ASSERT _Static_assert
#endif
#ifdef __CUDACC__
#define KVQ_PQ_HD __host__ __device__
#elif defined(__GNUC__)
// the accessors sit in the CPU kernels' inner loops (the table builds' tails and the batched
// tables read kvq_pqx_cb per value): inlined always, as they were while they were short
#define KVQ_PQ_HD __attribute__((always_inline))
#else
#define KVQ_PQ_HD
#endif

#define KVQ_PQX_VERSION 1
#define KVQ_PQX_RB 8          // rows per index block (one SIMD lane each)
#define KVQ_PQX_MAX_STAGES 2
#define KVQ_PQX_MAX_W 64      // widest subspace the codec writes (option w=)
#define KVQ_PQX_MAX_K 65536   // largest k a uint16 index holds
#define KVQ_PQX_HI_PAD 4      // bytes after a split stage's hi array
#define KVQ_PQX_CB_HI_PAD 8   // bytes after a split CQO stage's cb_hi array

enum { KVQ_PQX_CB_BF16 = 0, KVQ_PQX_CB_F32 = 1, KVQ_PQX_CB_CQO = 2, KVQ_PQX_CB_F16 = 3 };

KVQ_PQ_STATIC_ASSERT(KVQ_PQX_RB == 8, "the AVX2 kernels hold one row per 32-bit lane of a 256-bit vector");
KVQ_PQ_STATIC_ASSERT(sizeof(uint16_t) == 2, "bf16 codebooks and wide indices are 2 bytes");

typedef struct {
    int stages;               // 1 or 2
    int w;                    // subspace width
    int cb_type;              // KVQ_PQX_CB_*: cb holds bf16 bits, f16 bits, floats, or CQO codes (uint16)
    int64_t rows, cols, m, rows_p;
    int64_t k[KVQ_PQX_MAX_STAGES];
    int ib[KVQ_PQX_MAX_STAGES];    // bytes per index: 1 (k <= 256) or 2
    void *idx[KVQ_PQX_MAX_STAGES]; // (rows_p / 8, m, 8) uint8 or uint16
    void *cb[KVQ_PQX_MAX_STAGES];  // (m, w, k) bf16 bits, float or CQO codes
    float *cb_ms[KVQ_PQX_MAX_STAGES]; // CQO: (m, 2) min and step per subspace; else NULL
    // QET (levels == 3) only; 0 / NULL for PQ
    int levels;               // 0: PQ; 3: QET swap tree
    int qbits[KVQ_PQX_MAX_STAGES]; // bits per held index: 4, 8 or 16
    int cb_bits;              // CQO code bits (cb_type CQO; PQ sets it too); 0 for raw bf16 / f32 values
    int64_t groups;           // cols / 64
    uint8_t *sw;              // (rows, groups, 12) switch fields + 8 bytes of padding
    size_t cb_size[KVQ_PQX_MAX_STAGES]; // bytes of cb[s] (the file's blob)
    // PQ lane-packed indices (appended; 0 = bytes / uint16 as ib says): field bits, fields per
    // group, 32-bit words per row and group, groups (see the storage comment above)
    int pbits[KVQ_PQX_MAX_STAGES], pper[KVQ_PQX_MAX_STAGES], pwords[KVQ_PQX_MAX_STAGES];
    int64_t pgroups[KVQ_PQX_MAX_STAGES];
    // PQ split indices (appended; 0 / NULL = not split): high bits per index, and their array
    // (rows_p / 8, m, hbits) bytes + 4 of padding (see the storage comment above)
    int hbits[KVQ_PQX_MAX_STAGES];
    uint8_t *hi[KVQ_PQX_MAX_STAGES];
    // PQ split CQO codes (appended; 0 = uint16 codes): bits a held code, high bits (B > 8) or NULL
    int cbq_bits;
    uint8_t *cb_hi[KVQ_PQX_MAX_STAGES];
    // General QET (appended, 2026-11-27; kernels/cpu/qetg.c): 1 for a swap tree the qetx layout
    // does not take (levels != 3, w != 8 or cols not a multiple of 64). Then levels = l, w = the
    // subspace width, groups = 0; sw holds the file's indicator bits as stored, (rows, levels,
    // cols / 2) bits LSB-first + 8 bytes of padding; idx[s] is (rows, m) at qbits[s] bits, row-major;
    // cb[s] the file's blob (CQO, bf16, f16 or f32 values) of cb_size[s] bytes + 16 of padding.
    int qetg;
} kvq_pqx;

#define KVQ_QETX_LEVELS 3
#define KVQ_QETX_SW_BYTES 12  // switch fields of one group of 8 blocks
#define KVQ_QETX_SW_PAD 8

/** Element offset of (row r, subspace j) in a stage's idx array. */
KVQ_PQ_HD static inline int64_t kvq_pqx_idx_at(const kvq_pqx *p, int64_t r, int64_t j) {
    return ((r / KVQ_PQX_RB) * p->m + j) * KVQ_PQX_RB + r % KVQ_PQX_RB;
}
/** uint32 offset of word 0 of row r's group g in a lane-packed stage s. */
KVQ_PQ_HD static inline int64_t kvq_pqx_pk_at(const kvq_pqx *p, int s, int64_t r, int64_t g) {
    return (((r / KVQ_PQX_RB) * p->pgroups[s] + g) * p->pwords[s]) * KVQ_PQX_RB + r % KVQ_PQX_RB;
}
/** Index of (row r, subspace j) in stage s. */
KVQ_PQ_HD static inline uint32_t kvq_pqx_idx(const kvq_pqx *p, int s, int64_t r, int64_t j) {
    if (p->hbits[s]) {
        const int h = p->hbits[s];
        const uint8_t *q = p->hi[s] + ((r / KVQ_PQX_RB) * p->m + j) * h;
        uint32_t v = 0;
        for (int i = 0; i < h; i++) v |= (uint32_t)q[i] << (8 * i);
        const uint32_t lo = ((const uint8_t *)p->idx[s])[kvq_pqx_idx_at(p, r, j)];
        return lo | ((v >> (h * (int)(r % KVQ_PQX_RB))) & ((1u << h) - 1u)) << 8;
    }
    if (p->pbits[s]) {
        const int b = p->pbits[s];
        const int64_t g = j / p->pper[s];
        const int o = (int)(j - g * p->pper[s]) * b;
        const uint32_t *q = (const uint32_t *)p->idx[s] + kvq_pqx_pk_at(p, s, r, g) + (o >> 5) * KVQ_PQX_RB;
        uint64_t v = q[0];
        if ((o & 31) + b > 32) v |= (uint64_t)q[KVQ_PQX_RB] << 32;
        return (uint32_t)(v >> (o & 31)) & ((1u << b) - 1u);
    }
    int64_t o = kvq_pqx_idx_at(p, r, j);
    return p->ib[s] == 1 ? ((const uint8_t *)p->idx[s])[o] : ((const uint16_t *)p->idx[s])[o];
}
/** An IEEE half as float (exact; subnormals as m·2^-24). */
KVQ_PQ_HD static inline float kvq_pqx_f16(uint16_t h) {
    const uint32_t sg = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    union { uint32_t u; float f; } v;
    if (e == 31) v.u = sg | 0x7f800000u | (m << 13);
    else if (e) v.u = sg | ((e + 112u) << 23) | (m << 13);
    else {
        v.f = (float)m * 0x1p-24f;
        v.u |= sg;
    }
    return v.f;
}
/** The CQO code at element o8 = (j·w + q)·k8 + c of a split stage s (cbq_bits > 0). */
KVQ_PQ_HD static inline uint32_t kvq_pqx_cqo_split_code(const kvq_pqx *p, int s, int64_t o8) {
    uint32_t code = ((const uint8_t *)p->cb[s])[o8];
    if (p->cbq_bits > 8) {
        const int h = p->cbq_bits - 8, bit = h * (int)(o8 & 7);
        const uint8_t *g = p->cb_hi[s] + (o8 >> 3) * h + (bit >> 3);
        const uint32_t v = ((uint32_t)g[0] | (uint32_t)g[1] << 8) >> (bit & 7);
        code |= (v & ((1u << h) - 1u)) << 8;
    }
    return code;
}
/** Codebook value of stage s, subspace j, coordinate q, centroid c, as float. */
KVQ_PQ_HD static inline float kvq_pqx_cb(const kvq_pqx *p, int s, int64_t j, int q, int64_t c) {
    int64_t o = (j * p->w + q) * p->k[s] + c;
    if (p->cb_type == KVQ_PQX_CB_F32) return ((const float *)p->cb[s])[o];
    if (p->cb_type == KVQ_PQX_CB_F16) return kvq_pqx_f16(((const uint16_t *)p->cb[s])[o]);
    if (p->cb_type == KVQ_PQX_CB_CQO) {
        uint32_t code;
        if (p->cbq_bits) code = kvq_pqx_cqo_split_code(p, s, (j * p->w + q) * ((p->k[s] + 7) & ~(int64_t)7) + c);
        else code = ((const uint16_t *)p->cb[s])[o];
        const float t = (float)code * p->cb_ms[s][2 * j + 1];
        return p->cb_ms[s][2 * j] + t;
    }
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)((const uint16_t *)p->cb[s])[o] << 16;
    return v.f;
}

/** Index of (row r, slot (g, t)) in stage s of a QET layout. */
KVQ_PQ_HD static inline uint32_t kvq_qetx_idx(const kvq_pqx *p, int s, int64_t r, int64_t g, int t) {
    const int64_t o = (r * p->groups + g) * 8 + t;
    if (p->qbits[s] == 4) return (((const uint8_t *)p->idx[s])[o >> 1] >> (4 * (o & 1))) & 15u;
    if (p->qbits[s] == 8) return ((const uint8_t *)p->idx[s])[o];
    return ((const uint16_t *)p->idx[s])[o];
}
/** The 12-bit switch field of block b of row r. */
KVQ_PQ_HD static inline uint32_t kvq_qetx_field(const kvq_pqx *p, int64_t r, int64_t b) {
    const uint8_t *g = p->sw + (r * p->groups + b / 8) * KVQ_QETX_SW_BYTES;
    const int pos = 12 * (int)(b % 8);
    const uint32_t v = (uint32_t)g[pos >> 3] | (uint32_t)g[(pos >> 3) + 1] << 8;
    return (v >> (pos & 7)) & 0xfffu;
}
/** σ of a switch field, 3 bits per leaf: W[8b + σ(t)] = X*[b + t·D] with σ(t) = (perm >> 3t) & 7.
 *  The forward swap tree of paper 004 (1 = the pair was swapped), inside one block. */
KVQ_PQ_HD static inline uint32_t kvq_qetx_sigma(uint32_t f) {
    int v[8], u[8];
    for (int i = 0; i < 8; i++) v[i] = i;
    for (int j = 0; j < 4; j++) { // level 1: pairs (2j, 2j+1) → S j, L 4 + j
        const int sw = (f >> j) & 1;
        u[j] = sw ? v[2 * j + 1] : v[2 * j];
        u[4 + j] = sw ? v[2 * j] : v[2 * j + 1];
    }
    for (int h = 0; h < 2; h++) // level 2, inside each half
        for (int j = 0; j < 2; j++) {
            const int sw = (f >> (4 + 2 * h + j)) & 1, *a = u + 4 * h;
            v[4 * h + j] = sw ? a[2 * j + 1] : a[2 * j];
            v[4 * h + 2 + j] = sw ? a[2 * j] : a[2 * j + 1];
        }
    uint32_t perm = 0;
    for (int q = 0; q < 4; q++) { // level 3, inside each quarter
        const int sw = (f >> (8 + q)) & 1;
        perm |= (uint32_t)(sw ? v[2 * q + 1] : v[2 * q]) << (6 * q);
        perm |= (uint32_t)(sw ? v[2 * q] : v[2 * q + 1]) << (6 * q + 3);
    }
    return perm;
}

/** General QET (qetg): index of (row r, subspace j) in stage s. */
KVQ_PQ_HD static inline uint32_t kvq_qetg_idx(const kvq_pqx *p, int s, int64_t r, int64_t j) {
    const int64_t o = r * p->m + j;
    if (p->qbits[s] == 4) return (((const uint8_t *)p->idx[s])[o >> 1] >> (4 * (o & 1))) & 15u;
    if (p->qbits[s] == 8) return ((const uint8_t *)p->idx[s])[o];
    return ((const uint16_t *)p->idx[s])[o];
}
/** General QET: codebook value of stage s, subspace j, centroid c, coordinate q < w, as the
 *  codec's decoder computes it (CQO: min + (float)code · step, each operation rounded). */
KVQ_PQ_HD static inline float kvq_qetg_cb(const kvq_pqx *p, int s, int64_t j, int64_t c, int q) {
    const uint8_t *b = (const uint8_t *)p->cb[s];
    const uint64_t e = (uint64_t)((j * p->k[s] + c) * p->w + q);
    union { uint32_t u; float f; } v;
    if (p->cb_type == KVQ_PQX_CB_BF16) {
        v.u = ((uint32_t)b[2 * e] | (uint32_t)b[2 * e + 1] << 8) << 16;
        return v.f;
    }
    if (p->cb_type == KVQ_PQX_CB_F16) return kvq_pqx_f16((uint16_t)((uint32_t)b[2 * e] | (uint32_t)b[2 * e + 1] << 8));
    if (p->cb_type == KVQ_PQX_CB_F32) {
        v.u = (uint32_t)b[4 * e] | (uint32_t)b[4 * e + 1] << 8 | (uint32_t)b[4 * e + 2] << 16 | (uint32_t)b[4 * e + 3] << 24;
        return v.f;
    }
    float mn, st;
    v.u = (uint32_t)b[8 * j] | (uint32_t)b[8 * j + 1] << 8 | (uint32_t)b[8 * j + 2] << 16 | (uint32_t)b[8 * j + 3] << 24;
    mn = v.f;
    v.u = (uint32_t)b[8 * j + 4] | (uint32_t)b[8 * j + 5] << 8 | (uint32_t)b[8 * j + 6] << 16 | (uint32_t)b[8 * j + 7] << 24;
    st = v.f;
    const uint64_t pos = e * (uint64_t)p->cb_bits;
    const uint8_t *c8 = b + 8 * p->m + (pos >> 3);
    const uint64_t w = (uint64_t)c8[0] | (uint64_t)c8[1] << 8 | (uint64_t)c8[2] << 16 | (uint64_t)c8[3] << 24 |
                       (uint64_t)c8[4] << 32; // codes up to 32 bits at any bit offset (the blob has 16 bytes of padding)
    const uint32_t code = (uint32_t)((w >> (pos & 7)) & ((1ull << p->cb_bits) - 1u));
    const float t = (float)code * st;
    return mn + t;
}
/** Codebook value of a qetx layout (stage s, subspace j, centroid c, coordinate q < 8): the
 *  general reader's value — a qetx layout is the case w = 8 with bf16, f32 or CQO codebooks. */
KVQ_PQ_HD static inline float kvq_qetx_cb(const kvq_pqx *p, int s, int64_t j, int64_t c, int q) {
    return kvq_qetg_cb(p, s, j, c, q);
}
/** General QET: indicator bit i (< cols / 2) of level k of row r (1 = that pair was swapped). */
KVQ_PQ_HD static inline int kvq_qetg_bit(const kvq_pqx *p, int64_t r, int k, int64_t i) {
    const uint64_t pos = ((uint64_t)r * (uint64_t)p->levels + (uint64_t)k) * (uint64_t)(p->cols / 2) + (uint64_t)i;
    return (p->sw[pos >> 3] >> (pos & 7)) & 1;
}
/** General QET: the X* position of column c of row r (W[r][c] = X*[r][kvq_qetg_pos(p, r, c)]): the
 *  forward swap tree of paper 004 applied to one position — at level k, inside blocks of
 *  W = cols >> k, position blk + 2j + e goes to blk + j + (W/2)·(e xor swapped_j). */
KVQ_PQ_HD static inline int64_t kvq_qetg_pos(const kvq_pqx *p, int64_t r, int64_t c) {
    for (int k = 0; k < p->levels; k++) {
        const int64_t W = p->cols >> k, h = W / 2, blk = c / W * W, j = (c - blk) / 2;
        const int e = (int)((c - blk) & 1);
        c = blk + j + h * (e ^ kvq_qetg_bit(p, r, k, blk / 2 + j));
    }
    return c;
}

#endif
