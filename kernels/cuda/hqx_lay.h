// Where the int8 products' prepared activation lives (lay: the scratch hqx_fused.cu writes and
// hqx_gemv1.cu reads, the one-token lane order) and the plan of the one-token product that
// prepares its RMSNorm input itself (KVQ_CUDA_FOLD=1: its blocks, the rows each warp takes, its
// shared memory). Plain C99 that also compiles as CUDA, so that tests/test_hqx_lay.c checks the
// layouts and the plan on the host with the functions the kernels run.
#ifndef KVQ_CUDA_HQX_LAY_H
#define KVQ_CUDA_HQX_LAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KVQ_LAY_HD __host__ __device__
#else
#define KVQ_LAY_HD
#endif

// Prepared activations of tg tokens in a tensor's scratch (hqx_fused.cu writes them): per
// tile sx (int8 scale) and xs (float sum), the 8-vector sums s8 and the int8 codes xq. For one
// token (tg = 1) s8 and xq are stored in the one-token product's lane order (hqx_gemv1.cu:
// kvq_gemv1_xq_at, kvq_gemv1_s8_at) and xq is padded to whole steps of 1024 coordinates.
typedef struct Lay {
    size_t sx, xs, s8, xq, total;
} Lay;
static KVQ_LAY_HD inline size_t lay_al16(size_t b) { return (b + 15) & ~(size_t)15; }
static KVQ_LAY_HD inline Lay lay(int64_t cols_p, int T, int tg) {
    Lay l;
    const size_t tiles = (size_t)(cols_p / T);
    l.sx = 0;
    l.xs = l.sx + lay_al16(sizeof(float) * tiles * tg);
    l.s8 = l.xs + lay_al16(sizeof(float) * tiles * tg);
    l.xq = l.s8 + lay_al16(sizeof(int32_t) * (size_t)(cols_p / 8) * tg);
    l.total = l.xq + (tg == 1 ? (size_t)((cols_p + 1023) & ~(int64_t)1023) : lay_al16((size_t)cols_p * tg));
    return l;
}

// One-token lane order (hqx_gemv1.cu): step s covers chunks 16s..16s+15; lane l takes chunk
// c = 16s + l/2, half h = l%2: coordinates 64c + 16h + [0, 16) ("lo", the low nibbles of q
// bytes 16h..16h+15) and 64c + 32 + 16h + [0, 16) ("hi", their high nibbles). A step's xq is
// 1024 bytes: the 32 lanes' lo bytes (16 each, lane order), then their hi bytes, so each
// lane's 16-byte loads are consecutive across the warp. s8: the lane's four 8-vectors
// (2h, 2h+1, 4+2h, 5+2h of its chunk) as 16 consecutive bytes.
static KVQ_LAY_HD inline int64_t kvq_gemv1_xq_at(int64_t i) {
    const int64_t c = i >> 6;
    const int k = (int)(i & 63);
    return ((c >> 4) << 10) + ((int64_t)(k >> 5) << 9) + ((((c & 15) << 1) | ((k >> 4) & 1)) << 4) + (k & 15);
}
static KVQ_LAY_HD inline int64_t kvq_gemv1_s8_at(int64_t v) {
    const int64_t c = v >> 3;
    const int k = (int)(v & 7);
    return ((c * 2 + ((k >> 1) & 1)) << 2) + (k & 1) + ((k >> 2) << 1);
}

// ---- the one-token product with its RMSNorm preparation folded in (hqx_gemv1.cu, FOLD)

// One block of 32 warps an SM: the token's row is read from L2 and prepared once an SM (four
// blocks of 8 warps would read and prepare it four times; on the 8B shape each preparation is
// a 16 KB row, and 32 warps hold one tile each at tile 128).
#define KVQ_HQX_FOLD_WARPS 32
// Shared memory for the activation and the row: the kernel's static array, within the 48 KiB
// a block's static shared memory may take, less its other static bytes (row_rinv_sh's 1/rms).
#define KVQ_HQX_FOLD_SMEM (48 * 1024 - 64)

/** Bytes of a folded block's shared memory for a part of cols columns (padded to cols_p,
 *  tile T): the prepared activation in the one-token layout lay(cols_p, T, 1) at 0, then the
 *  token's raw row (cols floats) at lay(·).total (a multiple of 16). 0 where the fold does not
 *  take the shape: tiles other than 64, 128, 256 (a lane holds T/32 coordinates: 2..8), cols
 *  not a multiple of 4 (the row moves in float4s), partial steps (cols_p % 1024), or more than
 *  KVQ_HQX_FOLD_SMEM bytes (8192 columns fit: 45 KiB at tile 256). */
static KVQ_LAY_HD inline size_t kvq_hqx_fold_smem(int64_t cols, int64_t cols_p, int T) {
    if ((T != 64 && T != 128 && T != 256) || cols <= 0 || cols % 4 || cols > cols_p || cols_p % 1024) return 0;
    const size_t b = lay(cols_p, T, 1).total + sizeof(float) * (size_t)cols;
    return b <= KVQ_HQX_FOLD_SMEM ? b : 0;
}

/** Splits a grid of at most grid blocks between n (1..3) parts of rows[p] rows: a block serves
 *  one part (it prepares that part's activation), so each part gets its share of the blocks by
 *  rows, at least one, at most one per KVQ_HQX_FOLD_WARPS rows (no warp without a row), the
 *  rest to the part with the most rows a warp. nb[p]: the blocks of part p (nb[n..2] = 0).
 *  @return the blocks in all (<= grid), or 0 where grid < n. */
static inline int kvq_hqx_fold_split(const int64_t *rows, int n, int grid, int *nb) {
    int64_t all = 0, cap[3] = {0, 0, 0};
    int tot = 0;
    if (n < 1 || n > 3 || grid < n) return 0;
    for (int p = 0; p < n; p++) all += rows[p];
    for (int p = 0; p < 3; p++) {
        nb[p] = 0;
        if (p >= n) continue;
        cap[p] = (rows[p] + KVQ_HQX_FOLD_WARPS - 1) / KVQ_HQX_FOLD_WARPS;
        int64_t b = all > 0 ? (int64_t)grid * rows[p] / all : 1;
        if (b > cap[p]) b = cap[p];
        nb[p] = b < 1 ? 1 : (int)b;
        tot += nb[p];
    }
    while (tot > grid) { // the parts raised to one block: taken from the largest share
        int q = 0;
        for (int p = 1; p < n; p++) q = nb[p] > nb[q] ? p : q;
        nb[q]--, tot--;
    }
    while (tot < grid) { // floors and caps left blocks: to the part with most rows a block
        int q = -1;
        for (int p = 0; p < n; p++)
            if (nb[p] < cap[p] && (q < 0 || rows[p] * nb[q] > rows[q] * nb[p])) q = p;
        if (q < 0) break;
        nb[q]++, tot++;
    }
    return tot;
}

/** The rows warp `warp` of block b walks in the folded product: first, first + stride, ... up
 *  to end (exclusive), all in part `part`; rows are numbered over the parts (part 1's from
 *  rb1, part 2's from rb2, rtot in all) and the parts' blocks start at 0, b1, b2 (grid blocks
 *  in all, kvq_hqx_fold_split). */
typedef struct {
    uint32_t first, stride, end;
    int part;
} kvq_hqx_fold_walk;
static KVQ_LAY_HD inline kvq_hqx_fold_walk kvq_hqx_fold_rows(uint32_t b, uint32_t warp, uint32_t grid, uint32_t b1,
                                                             uint32_t b2, uint32_t rb1, uint32_t rb2, uint32_t rtot) {
    kvq_hqx_fold_walk w;
    w.part = b >= b2 ? 2 : b >= b1 ? 1 : 0;
    const uint32_t pb0 = w.part == 2 ? b2 : w.part == 1 ? b1 : 0, pb1 = w.part == 2 ? grid : w.part == 1 ? b2 : b1;
    w.first = (w.part == 2 ? rb2 : w.part == 1 ? rb1 : 0) + (b - pb0) * KVQ_HQX_FOLD_WARPS + warp;
    w.stride = (pb1 - pb0) * KVQ_HQX_FOLD_WARPS;
    w.end = w.part == 2 ? rtot : w.part == 1 ? rb2 : rb1;
    return w;
}

#endif
