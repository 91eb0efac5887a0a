// Decode attention on the GPU straight from a packed KV cache (issue 20): split-K
// flash-decoding (each block scores a chunk of positions for all the query heads of one KV
// head, keeps the chunk's max and sum, and sums p·V; the last block to finish per (sequence, KV
// head), or a second kernel, merges the chunks with their log-sum-exp weights), reading the GPU execution layout of docs/KV.md ("GPU
// execution layout") and never writing fp16 K/V to global memory. Plus the encode kernels
// that append tokens to that layout, bit-identical to the CPU encoders (kv_attn.cu: int, KIVI;
// kv_enc.cu: TurboQuant, qturbo, turboquant-prod, OCTOPUS, HyperQuant-KV, HQMQ).
// Plain C header (no CUDA types): the tests, benchmarks and kernels/cuda/no_cuda.c use it.
#ifndef KVQ_CUDA_KV_ATTN_H
#define KVQ_CUDA_KV_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What one side (K or V) of the cache stores. */
typedef enum {
    KVQ_GKV_BF16 = 0,  // dense bf16 rows (the in-house baseline)
    KVQ_GKV_F16 = 1,   // dense fp16 rows (the residual window; boundary layers' K)
    KVQ_GKV_INT = 2,   // int:<b>: fp16 scale per token, symmetric codes q + qmax
    KVQ_GKV_KIVI = 3,  // kivi:<b>: K per channel over 32-token groups, V per token and 32 channels
    KVQ_GKV_TURBO = 4, // turboquant:<b> and qturbo:<b> (side .quat set): fp16 norm per token, Lloyd-Max
                       // centroid index per rotated coordinate; turboquant-prod:<b> values
    KVQ_GKV_HQKV = 5,  // hqkv:<lattice>:<bps>: fp32 norm and u32 dither counter per token, the integer
                       // lattice codes + 2^(bits-1) as bits-wide codes (bits from the state's bound)
    KVQ_GKV_TPROD = 6, // turboquant-prod:<b> keys: (fp16 norm, fp16 residual norm) per token, (b-1)-bit
                       // centroid codes then the d QJL sign bits (a one-bit plane): b·d/8 bytes a row
    KVQ_GKV_OCT = 7,   // octopus:<b> keys: fp32 γ per token; per lane of 8, 6 triplet codes
                       // (dir index a·2^bdir + b | ρ index << 2·bdir, 3b+1 bits) in whole 32-bit words
    KVQ_GKV_OCTQ = 8,  // octopus:<b>:qjl keys: as OCT, then the d QJL sign bits (a one-bit plane);
                       // side (fp32 γ, fp16 γ_r, 2 bytes padding). Values of octopus are KIVI's layout
    KVQ_GKV_HQMQ = 9,  // hqmq:s<S>:r<b> (no outliers): fp16 σ per token; per lane of 8, its 4 chunks'
                       // codes (joint index | radius << ibits, `bits` wide) in whole 32-bit words
    KVQ_GKV_HQMQO = 10, // hqmq:s<S>:r<b>:med<C> (outliers): HQMQ's rows, an outlier chunk's code M + j
                        // (j = its ordinal in the token; C[M + j] is a zero row); side (fp16 σ, u16
                        // n_out, u32 pool offset) per token; then the pool of 4×fp16 outlier chunks
} kvq_gkv_kind;

/** OCTOPUS keys (head_dim 128: 43 triplets, the last zero-padded, in 48 slots, lane L of a
 *  position's 8 lanes owns triplets 6L..6L+5 = dims 18L..18L+17; head_dim 64: 22 triplets in the
 *  24 slots of 4 lanes, d/16 lanes in general): 32-bit words per lane of
 *  six (3b+1)-bit codes (default split b_dir = b+1, b_norm = b−1), code j at bit j·(3b+1). */
static inline int kvq_gkv_oct_words(int bits) { return (6 * (3 * bits + 1) + 31) / 32; }

/** The shape every kernel variant is built for (the tensor-core, int8-query and half-value kernels,
 *  the fused merge): head_dim 128 with 4 query heads per KV head (Llama-3-8B). */
#define KVQ_GKV_HEAD_DIM 128
#define KVQ_GKV_GROUP 4 // query heads per KV head
#define KVQ_GKV_MAX_CHUNK 1024
/** The automatic chunks' floor (kvq_gkv_plan_of with chunk_req < 0): at most this many splits of a
 *  short side (session 19: the H100 sweep of docs/results/s19/B_table.md). */
#define KVQ_GKV_MIN_SPLITS 16
/** The shapes the plain split kernels, the merge, rows mode and the encoders are built for (issue 20,
 *  session 15): head_dim 64 or 128 with 1, 2, 4 or 8 query heads per KV head; others are refused
 *  with KVQ_ERR_UNSUPPORTED. At other shapes than (128, 4) kvq_gkv_attend runs the fp32 split kernel
 *  (the tensor-core and knob variants fall back to it). */
static inline int kvq_gkv_shape_built(int head_dim, int group) {
    return (head_dim == 64 || head_dim == 128) && (group == 1 || group == 2 || group == 4 || group == 8);
}

/** Bytes of one token's packed row of b-bit codes in the GPU layout (head_dim d): b/2
 *  two-bit planes of d/4 bytes, then a one-bit plane of d/8 bytes when b is odd (docs/KV.md). */
static inline size_t kvq_gkv_row_bytes(int bits, int d) { return (size_t)(bits / 2) * d / 4 + (size_t)(bits & 1) * d / 8; }
static inline size_t kvq_gkv_align16(size_t n) { return (n + 15) & ~(size_t)15; }
/** Offset of the side data inside a (sequence, KV head) region of cap positions (the codes,
 *  or the dense rows, come first). */
/** Bytes of one position's row of a packed kind (OCTOPUS keys: d/16 lanes of words [+ the sign plane];
 *  HQMQ: d/16 lanes of 4 chunk codes). */
static inline size_t kvq_gkv_kind_row_bytes(kvq_gkv_kind kind, int bits, int d) {
    if (kind == KVQ_GKV_OCT || kind == KVQ_GKV_OCTQ)
        return (size_t)4 * (d / 16) * kvq_gkv_oct_words(bits) + (kind == KVQ_GKV_OCTQ ? (size_t)d / 8 : 0);
    if (kind == KVQ_GKV_HQMQ || kind == KVQ_GKV_HQMQO) return (size_t)4 * (d / 16) * ((4 * bits + 31) / 32); // d/16 lanes × ⌈4·bits/32⌉ words
    return kvq_gkv_row_bytes(bits, d);
}
/** HQMQ with outliers: outlier chunks the pool of a region of cap positions holds — a quarter of
 *  its chunks (d/16 a position; more in one token is fine, more on average is an encoder error:
 *  docs/KV.md "HQMQ with outliers on the GPU"). */
#define KVQ_GKV_HQMQO_POOL_DIV 4
static inline size_t kvq_gkv_hqmqo_pool_chunks(int d, int cap) { return (size_t)cap * (d / 4) / KVQ_GKV_HQMQO_POOL_DIV; }
/** Offset of the pool (4 fp16 a chunk) inside a region: after the side array (8 bytes a position);
 *  after the pool the device encoder's state (the running median's 4096-bin u32 histogram, its u64
 *  count, a u32 pool-full flag, 4 bytes padding), zeroed by the encoder at position 0. */
#define KVQ_GKV_HQMQO_STATE (4096 * 4 + 16)
static inline size_t kvq_gkv_hqmqo_pool_offset(int bits, int d, int cap);
static inline size_t kvq_gkv_side_offset(kvq_gkv_kind kind, int bits, int d, int cap) {
    return kvq_gkv_align16(kind <= KVQ_GKV_F16 ? (size_t)cap * d * 2 : (size_t)cap * kvq_gkv_kind_row_bytes(kind, bits, d));
}
/** Bytes of the side data: INT and TURBO one fp16 per position; HQKV (fp32 γ, u32 dither
 *  counter) per position; KIVI K (role 0) (fp16 scale, fp16 zero) per channel per 32-position
 *  group; KIVI V (scale, zero) per position per 32 channels. */
static inline size_t kvq_gkv_side_bytes(kvq_gkv_kind kind, int d, int cap, int role) {
    if (kind == KVQ_GKV_INT || kind == KVQ_GKV_TURBO || kind == KVQ_GKV_HQMQ) return (size_t)cap * 2;
    if (kind == KVQ_GKV_HQKV) return (size_t)cap * 8;
    if (kind == KVQ_GKV_HQMQO) return (size_t)cap * 8 + kvq_gkv_hqmqo_pool_chunks(d, cap) * 8 + KVQ_GKV_HQMQO_STATE;
    if (kind == KVQ_GKV_TPROD || kind == KVQ_GKV_OCT) return (size_t)cap * 4;
    if (kind == KVQ_GKV_OCTQ) return (size_t)cap * 8;
    if (kind == KVQ_GKV_KIVI) return role == 0 ? (size_t)(cap / 32) * d * 4 : (size_t)cap * (d / 32) * 4;
    return 0;
}
static inline size_t kvq_gkv_hqmqo_pool_offset(int bits, int d, int cap) {
    return kvq_gkv_side_offset(KVQ_GKV_HQMQO, bits, d, cap) + (size_t)cap * 8;
}
static inline size_t kvq_gkv_hqmqo_state_offset(int bits, int d, int cap) {
    return kvq_gkv_hqmqo_pool_offset(bits, d, cap) + kvq_gkv_hqmqo_pool_chunks(d, cap) * 8;
}
/** Bytes of one (sequence, KV head) region of one side. */
static inline size_t kvq_gkv_region_bytes(kvq_gkv_kind kind, int bits, int d, int cap, int role) {
    return kvq_gkv_align16(kvq_gkv_side_offset(kind, bits, d, cap) + kvq_gkv_side_bytes(kind, d, cap, role));
}
/** Bit position, inside its row's plane, of dim i's bit: two-bit planes LSB-first in dim
 *  order (dim i at bits 2i, 2i+1); the one-bit plane, per block of 16 dims (2 bytes), dim
 *  16j + 4n + k at bit 16j + 4k + n, so that a lane spreads the bits of dims
 *  (k, k+4, k+8, k+12) into bytes with one multiply. */
static inline int kvq_gkv_bit1_pos(int i) { return (i & ~15) + 4 * (i & 3) + ((i >> 2) & 3); }
/** Writes code c (bits wide) of dim i into a zeroed row (d dims). */
static inline void kvq_gkv_put_code(uint8_t *row, int bits, int d, int i, uint32_t c) {
    for (int p = 0; p < bits / 2; p++) {
        uint8_t *pl = row + (size_t)p * d / 4;
        pl[i >> 2] |= (uint8_t)(((c >> (2 * p)) & 3u) << (2 * (i & 3)));
    }
    if (bits & 1) {
        uint8_t *pl = row + (size_t)(bits / 2) * d / 4;
        int b = kvq_gkv_bit1_pos(i);
        pl[b >> 3] |= (uint8_t)(((c >> (bits - 1)) & 1u) << (b & 7));
    }
}
/** Reads code i of a row. */
static inline uint32_t kvq_gkv_get_code(const uint8_t *row, int bits, int d, int i) {
    uint32_t c = 0;
    for (int p = 0; p < bits / 2; p++) c |= (uint32_t)((row[(size_t)p * d / 4 + (i >> 2)] >> (2 * (i & 3))) & 3) << (2 * p);
    if (bits & 1) {
        int b = kvq_gkv_bit1_pos(i);
        c |= (uint32_t)((row[(size_t)(bits / 2) * d / 4 + (b >> 3)] >> (b & 7)) & 1) << (bits - 1);
    }
    return c;
}

/** One side of a cache on the device: regions for (batch, n_kv) (sequence-major), each
 *  kvq_gkv_region_bytes; for TURBO also the centroids (n_kv, 2^bits), the sign vectors
 *  (n_kv, d) and for qturbo the unit quaternions (n_kv, 4) of each head's state, as fp32
 *  device arrays; for HQKV the parameters of libconv/kv/kv_hqkv.h (the same for every head
 *  but the seed, the signs and Q). */
typedef struct {
    kvq_gkv_kind kind;
    int bits;
    int role;          // 0 = K, 1 = V
    void *data;        // device
    const float *cb;   // device, TURBO (n_kv, 2^bits) and TPROD (n_kv, 2^(bits-1)) centroids;
                       // OCT/OCTQ: the direction table Oct⁻¹(cξ[a], cξ[b]) (n_kv, 2^(2·bdir), 3)
    const float *rho;  // device, OCT/OCTQ: triplet-norm centroids (n_kv, 2^bnorm)
    const float *signs; // device, TURBO and HQKV rot=signs: (n_kv, d); OCT/OCTQ (n_kv, 2d): s1, then s2 (QJL)
    const float *quat;  // device, qturbo: (n_kv, 4); NULL for turboquant
    const float *mat;   // device, HQKV rot=qjl: (n_kv, d, d), the rotation Q (y = Q x) row-major;
                        // TPROD: the QJL matrix S (n_kv, d, d) row-major (σ = sign(S r))
    const uint64_t *seeds; // device, HQKV with dither: (n_kv) the states' seeds
    int lat, rot, dither; // HQKV: lattice (kernels/kv_hqkv.h ids), rotation 0 none / 1 signs / 2 Q, dither
    int ibits;            // HQMQ: index bits of a chunk code (bits = ibits + radius bits); cb = the joint
                          // codebook (n_kv, 2^ibits, 4) (rows past 24S unused)
    float scale;          // HQKV: α·√d (a token is γ/scale · Qᵀ(embed(c) − U))
    const float *cxi;     // device, OCT/OCTQ encoder only: the octahedral coordinate centroids (n_kv, 2^(bits+1));
                          // HQMQ encoder only: the secondary quaternions (n_kv, n_sec, 4)
    int round;            // OCT/OCTQ encoder: rounding mode (0 scalar, 2 local 2x2, 3 local 3x3, 9 full)
    int n_sec;            // HQMQ encoder: S, the secondary quaternions per head (the joint codebook has 24·S rows)
    double enc_scale;     // HQKV encoder: α·√d in double, as the CPU encoder forms α√d/γ
    double med;           // HQMQO encoder: the outlier multiplier C (the running median's state is in
                          // the region, kvq_gkv_hqmqo_state_offset)
} kvq_gkv_side;

/** A device cache: n_tok positions stored for every sequence, packed [0, n_enc), the most
 *  recent [n_enc, n_tok) in the fp16 window ring (wcap slots, slot = pos % wcap); n_enc per
 *  side (KIVI keys wait for a whole group of 32 in the ring while their values are stored). */
typedef struct {
    kvq_gkv_side k, v;
    int batch, n_kv, n_heads, head_dim, cap;
    int n_enc_k, n_enc_v, n_tok; // positions stored packed per side (KIVI keys lag by < 32)
    void *wk, *wv; // device fp16 rings (batch, n_kv, wcap, d), or NULL when wcap = 0
    int wcap;
} kvq_gkv_cache;

/** Decode attention: q (batch, n_heads, d) fp32 device, out (batch, n_heads, d) fp32 device,
 *  out = softmax(scale · q·Kᵀ)·V over the n_tok positions. chunk (multiple of 32, ≤
 *  KVQ_GKV_MAX_CHUNK) is the positions per block, 0 = chosen from the shape. The partial
 *  results need scratch: kvq_gkv_scratch_bytes, device, given by the caller (for a turboquant-prod
 *  cache at head_dim 128, 4 query heads a KV head, also the prelude's 16 + batch · n_kv · 4608 bytes:
 *  kvq_gkv_set_tprod_pre; TurboQuant / qturbo at 2 or 4 bits, 16 + batch · n_kv · 2048: _turbo_pre; the _seqs_ and _rows_ sizes below likewise for their rows). */
size_t kvq_gkv_scratch_bytes(const kvq_gkv_cache *c, int chunk);
kvq_status kvq_gkv_attend(const kvq_gkv_cache *c, const float *q, float *out, float scale, int chunk, void *scratch,
                          kvq_err *err);
/** The chunk kvq_gkv_attend picks when asked for 0. */
int kvq_gkv_auto_chunk(const kvq_gkv_cache *c);

/** Appends T tokens k, v (T, batch, n_kv, d) fp32 device at positions [n_tok, n_tok + T)
 *  of every sequence: into the window ring, and encodes into the packed side every position
 *  that left the window (KIVI keys: in whole groups of 32 once 32 have left it; they wait in
 *  the ring until then, as on the CPU). The encoders are the CPU's (kv_int.c, kv_turbo.c,
 *  kv_octopus.c) in the same float operations, from the window's fp16 values: the packed
 *  bytes equal the CPU's repacked (kvq_gkv_pack_*). Kinds with an encoder: kvq_gkv_can_encode
 *  (the sides' tables set as kvq_gkv_tables_of lists them; HQKV: the position is the dither
 *  counter, as the CPU state's counter is for a sequence encoded from position 0).
 *  Needs wcap ≥ window + 32 + T. Updates c->n_tok, c->n_enc_k and c->n_enc_v. */
kvq_status kvq_gkv_append(kvq_gkv_cache *c, const float *k, const float *v, int T, int window, kvq_err *err);
/** HQMQ with outliers (KVQ_GKV_HQMQO): KVQ_ERR_NUMERIC, naming the side, sequence and KV head, when a
 *  region's outlier pool filled (the device encoder then stored a token without its outlier chunks,
 *  which read as zeros, and set the region's flag); KVQ_OK otherwise and for other kinds. One
 *  synchronous copy of batch · n_kv words per HQMQO side that has encoded positions.
 *  kvq_gkv_append calls it after encoding HQMQO positions; a graph-captured step
 *  (kvq_gkv_append_step) cannot, so its caller checks after the replay (the GPU backend's sync). */
kvq_status kvq_gkv_pool_check(const kvq_gkv_cache *c, kvq_err *err);

#ifdef __CUDACC__
#define KVQ_GKV_HD __host__ __device__
#else
#define KVQ_GKV_HD
#endif

/** The chunks one attend scans: [0, a) both sides packed, [a, e) keys in the window with
 *  stored values (KIVI's incomplete group), [e, n_tok) both in the window; chunk positions a
 *  block (chunk_req > 0, or else the automatic choice: per blocks per (sequence, KV head) over
 *  the longest packed side, more when a chunk would exceed KVQ_GKV_MAX_CHUNK; chunk_req < 0
 *  floors that chunk at min(−chunk_req, the side over KVQ_GKV_MIN_SPLITS): short contexts in
 *  fewer, longer chunks, session 19), and na, nb, nc chunks in the three ranges (scratch slots
 *  [0, na), [na, na + nb), then the window's).
 *  Shared by the host launch (kvq_gkv_attend) and the kernels of a graph-captured step, which
 *  compute it from the position on the device: one formula, the same chunks. */
typedef struct {
    int n_tok, a, e, chunk, na, nb, nc;
} kvq_gkv_plan;
KVQ_GKV_HD static inline int kvq_gkv_n_chunks(int len, int chunk) { return len > 0 ? (len + chunk - 1) / chunk : 0; }
KVQ_GKV_HD static inline kvq_gkv_plan kvq_gkv_plan_of(int n_tok, int n_enc_k, int n_enc_v, int per, int chunk_req) {
    kvq_gkv_plan p;
    p.n_tok = n_tok;
    p.a = n_enc_k < n_enc_v ? n_enc_k : n_enc_v;
    p.e = n_enc_k < n_enc_v ? n_enc_v : n_enc_k;
    if (chunk_req > 0) p.chunk = chunk_req;
    else {
        const int n = p.e > 1 ? p.e : 1, pr = per > 1 ? per : 1;
        const int k = (n + pr * KVQ_GKV_MAX_CHUNK - 1) / (pr * KVQ_GKV_MAX_CHUNK);
        int ch = 32 * ((n + 32 * pr * k - 1) / (32 * pr * k));
        if (chunk_req < 0) { // the floor: never more chunks than the automatic choice, so its grids hold
            const int fl = 32 * ((n + 32 * KVQ_GKV_MIN_SPLITS - 1) / (32 * KVQ_GKV_MIN_SPLITS));
            const int lo = fl < -chunk_req ? fl : -chunk_req;
            if (ch < lo) ch = lo;
        }
        p.chunk = ch < 32 ? 32 : ch > KVQ_GKV_MAX_CHUNK ? KVQ_GKV_MAX_CHUNK : ch;
    }
    p.na = kvq_gkv_n_chunks(p.a, p.chunk);
    p.nb = kvq_gkv_n_chunks(p.e - p.a, p.chunk);
    p.nc = kvq_gkv_n_chunks(n_tok - p.e, p.chunk);
    return p;
}

/** Part `part` of plan pl (0 packed, 1 window keys, 2 window): its chunk count, and block s's range
 *  [*t0, *t1) when s is below it (0 when the part has no chunk s); *slot0, the part's first scratch
 *  slot (the chunks of [0, na), [na, na + nb), then the window's) — the chunks and slots the host
 *  launch gives its blocks. One formula for the kernels that plan on the device (a captured step,
 *  rows mode) and the host tests (test_rows_plan). */
KVQ_GKV_HD static inline int kvq_gkv_part_block(const kvq_gkv_plan *pl, int part, int s, int *t0, int *t1, int *slot0) {
    const int cnt = part == 0 ? pl->na : part == 1 ? pl->nb : pl->nc;
    const int tb = part == 0 ? 0 : part == 1 ? pl->a : pl->e, te = part == 0 ? pl->a : part == 1 ? pl->e : pl->n_tok;
    *slot0 = part == 0 ? 0 : part == 1 ? pl->na : pl->na + pl->nb;
    if (s >= cnt) return 0;
    *t0 = tb + s * pl->chunk;
    *t1 = te < *t0 + pl->chunk ? te : *t0 + pl->chunk;
    return 1;
}

/** Rows mode (kvq_gkv_attend_rows): the plan of query t of a prefill chunk whose queries sit at
 *  positions pos0, pos0 + 1, ... of a batch-1 cache — the view the token loop gives it: n_tok =
 *  pos0 + t + 1 positions, the stored counts n_enc_k and n_enc_v (those after the whole chunk was
 *  appended) capped at it. */
KVQ_GKV_HD static inline kvq_gkv_plan kvq_gkv_row_plan(int n_enc_k, int n_enc_v, int pos0, int t, int per, int chunk_req) {
    const int n = pos0 + t + 1;
    return kvq_gkv_plan_of(n, n_enc_k < n ? n_enc_k : n, n_enc_v < n ? n_enc_v : n, per, chunk_req);
}
/** Rows mode's block x of a launch: chunk *s of query row *t, x = s · rows + t — the rows of one
 *  chunk are consecutive blocks, so a chunk's codes are read from DRAM once for all rows (L2). */
KVQ_GKV_HD static inline void kvq_gkv_row_block(int x, int rows, int *s, int *t) { *s = x / rows, *t = x % rows; }
/** Rows mode's grids over rows [0, T) from pos0: g[0..2] the most chunks any row has in the three
 *  parts (blocks per row of the packed, window-key and window launches), *n_slot the most chunks of
 *  one row in all (the scratch's slots per (row, query head)). */
KVQ_GKV_HD static inline void kvq_gkv_rows_grids(int n_enc_k, int n_enc_v, int pos0, int T, int per, int chunk_req, int g[3], int *n_slot) {
    g[0] = g[1] = g[2] = *n_slot = 0;
    for (int t = 0; t < T; t++) {
        const kvq_gkv_plan pl = kvq_gkv_row_plan(n_enc_k, n_enc_v, pos0, t, per, chunk_req);
        g[0] = pl.na > g[0] ? pl.na : g[0];
        g[1] = pl.nb > g[1] ? pl.nb : g[1];
        g[2] = pl.nc > g[2] ? pl.nc : g[2];
        const int n = pl.na + pl.nb + pl.nc;
        *n_slot = n > *n_slot ? n : *n_slot;
    }
}

/** A graph-captured step's grids (blocks per (sequence, KV head)) of the three split launches
 *  (packed, window keys, window) for a cache of cap positions: enough for kvq_gkv_plan_of's na,
 *  nb, nc at every position up to cap when the counts are kvq_gkv_enc_count's: packed min(per ·
 *  ⌈cap/(per·1024)⌉, ⌈cap/32⌉) (auto chunk) or ⌈cap/chunk⌉; window keys 1 when the keys are
 *  KIVI's (their waiting group, < 32 positions); window ⌈window/chunk⌉ (chunk ≥ 32). */
KVQ_GKV_HD static inline void kvq_gkv_step_grids(int cap, int window, int kivi_k, int per, int chunk_req, int g[3]) {
    const int pr = per > 1 ? per : 1;
    if (chunk_req > 0) g[0] = kvq_gkv_n_chunks(cap, chunk_req);
    else {
        const int a = pr * kvq_gkv_n_chunks(cap, pr * KVQ_GKV_MAX_CHUNK), b = kvq_gkv_n_chunks(cap, 32);
        g[0] = a < b ? a : b;
    }
    g[1] = kivi_k ? 1 : 0;
    g[2] = kvq_gkv_n_chunks(window, chunk_req > 0 ? chunk_req : 32);
}

/** The merge fused into the split launches (kvq_gkv_set_fuse_merge): the launch whose blocks
 *  count and merge is the last of the three that has blocks (ga, gb, gc: the packed, window-key
 *  and window launches' blocks per (sequence, KV head); 0, 1, 2; −1 when none has). The ones
 *  before it have finished when it starts (one stream). A block of it is the one that merges for
 *  its (sequence, KV head) when the count it read before its atomic increment is n − 1 (n: the
 *  launch's blocks per pair, spare ones included); it then resets the count to 0. Shared by the
 *  host launch, the kernels and the host emulation in tests/test_cuda_kv.c. */
KVQ_GKV_HD static inline int kvq_gkv_fuse_part(int ga, int gb, int gc) { return gc > 0 ? 2 : gb > 0 ? 1 : ga > 0 ? 0 : -1; }
KVQ_GKV_HD static inline int kvq_gkv_fuse_last(unsigned old, unsigned n) { return old + 1 == n; }

/** Positions kvq_gkv_append leaves packed on a side after a sequence of n_tok positions was
 *  appended from position 0 (in chunks of any size) with this window: every position that left
 *  the window, KIVI keys (kivi_k = 1) in whole groups of 32. The graph-captured decode step
 *  (kvq_gkv_append_step, kvq_gkv_attend_step) derives the counts on the device from this. */
KVQ_GKV_HD static inline int kvq_gkv_enc_count(int kivi_k, int n_tok, int window) {
    const int r = n_tok > window ? n_tok - window : 0;
    return kivi_k ? r / 32 * 32 : r;
}
/** The plan of a one-token step at position pos (kvq_gkv_attend_step; for each row of
 *  kvq_gkv_attend_seqs, its own position) of a cache grown from 0: n_tok = pos + 1 positions, the
 *  sides' counts kvq_gkv_enc_count (keys KIVI's when kivi_k), blocks per head per and chunk_req as in
 *  kvq_gkv_plan_of. One formula for the kernels and the host tests (test_seqs_plan). */
KVQ_GKV_HD static inline kvq_gkv_plan kvq_gkv_pos_plan(int pos, int window, int kivi_k, int per, int chunk_req) {
    const int n_tok = pos + 1;
    return kvq_gkv_plan_of(n_tok, kvq_gkv_enc_count(kivi_k, n_tok, window), kvq_gkv_enc_count(0, n_tok, window), per, chunk_req);
}
/** 1 when side s packs KIVI keys (whole groups of 32 positions). */
static inline int kvq_gkv_kivi_k(const kvq_gkv_side *s) { return s->kind == KVQ_GKV_KIVI && s->role == 0; }

/** 1 when c's counts (held on the host) are those kvq_gkv_enc_count gives for a sequence of pos
 *  positions (a sequence that grew from 0, not one cut back inside its window), and one more
 *  position fits: then the one-token step at pos may run as kvq_gkv_append_step and
 *  kvq_gkv_attend_step, which find the counts from the position alone. pos 0 always qualifies
 *  (the step restarts the sequence: the caller zeroes the counts). */
static inline int kvq_gkv_step_ready(const kvq_gkv_cache *c, int pos, int window) {
    if (pos + 1 > c->cap || c->wcap < window + 33 || !c->wk || !c->wv) return 0;
    if (pos == 0) return 1;
    return c->n_tok == pos && c->n_enc_k == kvq_gkv_enc_count(kvq_gkv_kivi_k(&c->k), pos, window) &&
           c->n_enc_v == kvq_gkv_enc_count(kvq_gkv_kivi_k(&c->v), pos, window);
}

/** The host's counts after appending T positions (what kvq_gkv_append does to n_tok, n_enc_k
 *  and n_enc_v, without launching anything): for a step whose kernels ran inside a replayed
 *  graph. */
static inline void kvq_gkv_advance(kvq_gkv_cache *c, int T, int window) {
    c->n_tok += T;
    int *ne[2] = {&c->n_enc_k, &c->n_enc_v};
    const kvq_gkv_side *sd[2] = {&c->k, &c->v};
    for (int r = 0; r < 2; r++) {
        const int ready = c->n_tok - window - *ne[r];
        if (ready > 0) *ne[r] += kvq_gkv_kivi_k(sd[r]) ? ready / 32 * 32 : ready;
    }
}

/** One-token decode step whose launches a CUDA graph can replay at any later position: the
 *  position is read from the device int d_pos (written before the graph runs), and every count
 *  derived from it (the ring slot, which position leaves the window, whether a KIVI key group is
 *  complete, the ranges and chunks attention scans, the scratch slots) is computed by the
 *  kernels from it; the grids are sized for the cache's capacity (blocks with nothing to do
 *  exit). kvq_gkv_append_step: what kvq_gkv_append(c, k, v, 1, window) does at position *d_pos,
 *  the same kernels and bytes; the host's counts are advanced (kvq_gkv_advance). Valid only
 *  when kvq_gkv_step_ready(c, *d_pos, window) held (the counts on the host and device agree).
 *  kvq_gkv_attend_step: kvq_gkv_attend(c, q, out, scale, 0, scratch) for the cache after that
 *  append (n_tok = *d_pos + 1), the same chunks and partial sums, so the same bits (batch 1 or
 *  more; scratch kvq_gkv_scratch_bytes(c, 0)). The tensor-core / int8-query / half-value
 *  choices (kvq_gkv_set_tc, _int8_query, _half_values) are taken when called: a captured graph
 *  keeps them. */
kvq_status kvq_gkv_append_step(kvq_gkv_cache *c, const float *k, const float *v, int window, const int *d_pos, kvq_err *err);
kvq_status kvq_gkv_attend_step(const kvq_gkv_cache *c, const float *q, float *out, float scale, int window, const int *d_pos,
                               void *scratch, kvq_err *err);

/** A decode step of several sequences at different positions in one set of launches (issues 20/12,
 *  session 16, helper i20m; docs/KV.md): c holds c->batch sequences' regions and rings laid out as a
 *  batched cache's (sequence-major: sequence s's are those of a batch-1 view with k.data, v.data, wk
 *  and wv advanced by s regions of n_kv heads); row t of q and out (T, n_heads, d) fp32 device attends
 *  the positions [0, d_pos[t]] of sequence d_seq[t] — d_seq and d_pos device int arrays of T, read by
 *  the kernels (a captured graph replays at later positions), the sequences distinct — with the counts
 *  of a sequence grown from 0 (kvq_gkv_pos_plan per row; the host's counts in c are not read): what
 *  kvq_gkv_attend_step does on that sequence's batch-1 view at that position, the same blocks per head
 *  (those of a batch-1 cache), chunks and partial sums, so the same bits, with the rows' blocks in one
 *  launch per part (grid z = rows) and one merge. The caller has appended each row's token (its counts
 *  kvq_gkv_step_ready before). Needs 1 ≤ T ≤ c->batch, a ring of window + 33 and scratch of
 *  kvq_gkv_seqs_scratch_bytes(c, T) bytes, device, given by the caller (scratch_bytes: its size, checked). */
kvq_status kvq_gkv_attend_seqs(const kvq_gkv_cache *c, const float *q, float *out, float scale, int window, int T, const int *d_seq,
                               const int *d_pos, void *scratch, size_t scratch_bytes, kvq_err *err);
/** The appends of such a step in one set of launches: row t's token k, v (T, n_kv, d) fp32 device into
 *  sequence d_seq[t]'s ring at position d_pos[t], and the position that leaves its window encoded (KIVI
 *  keys: the group it completes) — what kvq_gkv_append_step does on that sequence's batch-1 view with
 *  *d_pos = d_pos[t], the same kernels and bytes, every row's blocks in one launch (enc_ring, then each
 *  side's encoder: grid y = rows × KV heads). Valid when each row's sequence is kvq_gkv_step_ready at
 *  its position (and distinct); the host's counts are the caller's: advance each sequence's
 *  (kvq_gkv_advance(view, 1, window)). HQMQ with outliers: the caller checks the pools
 *  (kvq_gkv_pool_check). Needs 1 ≤ T ≤ c->batch and a ring of window + 33. */
kvq_status kvq_gkv_append_seqs(const kvq_gkv_cache *c, const float *k, const float *v, int window, int T, const int *d_seq,
                               const int *d_pos, kvq_err *err);
/** The scratch kvq_gkv_attend_seqs(c, ..., T, ...) needs: T batch-1 attends' (kvq_gkv_scratch_bytes of a
 *  batch-1 view of c, chunk 0). */
size_t kvq_gkv_seqs_scratch_bytes(const kvq_gkv_cache *c, int T);

/** Rows mode's bound on one row's chunks for a cache of cap positions and a ring of wcap that grew
 *  from 0 (kvq_gkv_rows_scratch_bound): the packed launch's grid of kvq_gkv_step_grids at the
 *  capacity, plus 2·⌈wcap/32⌉ + 2 for the window keys and the window (test_rows_plan checks it). */
KVQ_GKV_HD static inline int kvq_gkv_rows_slot_bound(int cap, int wcap, int per) {
    int g[3];
    kvq_gkv_step_grids(cap, 0, 0, per, 0, g);
    return g[0] + 2 * kvq_gkv_n_chunks(wcap > 0 ? wcap : 1, 32) + 2;
}

/** Bulk prefill attention ("rows mode", issue 20, session 13): q (T, n_heads, d) fp32 device, out
 *  (T, n_heads, d) fp32 device; query row t attends positions [0, pos0 + t + 1) of a batch-1 cache
 *  with exactly the view a token loop gives kvq_gkv_attend (n_tok = pos0 + t + 1, n_enc_k and n_enc_v
 *  capped at it: kvq_gkv_row_plan; the window's positions from the ring), the same automatic chunks
 *  and blocks per head (chunk 0) — so each row's output equals that attend's bit for bit — with
 *  every row in one set of launches (the split launches, grids of the most chunks any row has,
 *  blocks x = chunk · T + row, then one attn_merge over T · n_heads rows; the merge is never fused
 *  here). Needs pos0 ≥ 0, T ≥ 1, pos0 + T ≤ c->n_tok (the rows' positions appended) and scratch of
 *  kvq_gkv_rows_scratch_bytes(c, pos0, T) bytes, device, given by the caller (scratch_bytes: its
 *  size, checked). */
kvq_status kvq_gkv_attend_rows(const kvq_gkv_cache *c, const float *q, float *out, float scale, int pos0, int T, void *scratch,
                               size_t scratch_bytes, kvq_err *err);
/** The scratch kvq_gkv_attend_rows(c, ..., pos0, T) needs: T · n_heads · n_slot · (d + 2) floats, n_slot
 *  the most chunks of one row (kvq_gkv_rows_grids with the blocks per head of the device and the
 *  current kernel choices), + turboquant-prod's prelude for T rows (kvq_gkv_scratch_bytes). */
size_t kvq_gkv_rows_scratch_bytes(const kvq_gkv_cache *c, int pos0, int T);
/** A bound on it for any pos0 of a cache that grew from 0 (counts of kvq_gkv_enc_count, window
 *  positions ≤ wcap): T · n_heads · (packed chunks of kvq_gkv_step_grids at the capacity + 2 ·
 *  ⌈wcap/32⌉ + 2) · (d + 2) floats (+ turboquant-prod's prelude for T rows) — for sizing a buffer once
 *  (the runtime's scratch). */
size_t kvq_gkv_rows_scratch_bound(const kvq_gkv_cache *c, int T);

/** Whether kvq_gkv_append can encode a side of this kind and bits on the device (the
 *  encoders built: fp16; int, kivi, turboquant/qturbo, turboquant-prod keys, octopus keys with
 *  or without qjl at 2-4 bits; hqkv at 5-8-bit codes; hqmq with or without outliers at 13, 16, 19). */
static inline int kvq_gkv_can_encode(kvq_gkv_kind kind, int bits) {
    if (kind == KVQ_GKV_F16) return 1;
    if (kind == KVQ_GKV_INT || kind == KVQ_GKV_KIVI || kind == KVQ_GKV_TURBO || kind == KVQ_GKV_TPROD || kind == KVQ_GKV_OCT ||
        kind == KVQ_GKV_OCTQ)
        return bits >= 2 && bits <= 4;
    if (kind == KVQ_GKV_HQKV) return bits >= 5 && bits <= 8;
    if (kind == KVQ_GKV_HQMQ || kind == KVQ_GKV_HQMQO) return bits == 13 || bits == 16 || bits == 19;
    return 0;
}

/** int:<b> keys only: 1 = score them against an int8 copy of q (one scale per query head,
 *  max|q|/127) with dp4a, 4 codes an instruction, instead of fp32 FMAs; 0 (default) = fp32.
 *  Adds q's rounding to the scores (measured in test_cuda_kv). Process-wide. */
void kvq_gkv_set_int8_query(int on);

/** int:<b> and kivi:<b> values: 1 = Σ p·V with fp16 products and pairs (HFMA2), summed into
 *  fp32 every 32 positions, instead of fp32 FMAs; 0 (default) = fp32. Process-wide. */
void kvq_gkv_set_half_values(int on);

/** int:2, int:4, kivi:2, kivi:4 (both sides the same): 1 = the tensor-core kernels
 *  (kv_attn_tc.cu: fp16 q [KIVI: q ⊙ scale] and fp16 values in mma.m16n8k16 with fp32 sums,
 *  docs/KV.md "Tensor-core kernels") with the next tile's loads in flight, 2 = the same with the
 *  next two tiles', 0 = the kernels above, 3 = 2 for 4-bit keys and 1 for 2-bit (the faster on the
 *  H100, docs/RESULTS.md); −1 (default) = KVQ_CUDA_KV_TC=0, 1 or 2 in the environment (read at
 *  the first attend), else 3. Process-wide; the other kinds are unaffected (TurboQuant / qturbo at
 *  2 and 4 bits follow it too when kvq_gkv_set_tc_turbo is on). */
void kvq_gkv_set_tc(int on);
/** turboquant:2/:4 and qturbo:2/:4 (both sides the same): 1 = let kvq_gkv_set_tc's choice (not 0)
 *  send them to the tensor-core kernel too (kv_attn_tc.cu: q rotated once per block, the codes'
 *  fp16 centroids from register tables by byte permutes, fp32 sums; docs/KV.md, session 14),
 *  0 = the fp32 split kernel; −1 (default) = 1 unless KVQ_CUDA_KV_TC_TURBO=0 in the environment
 *  (read at the first attend; on since the H100 run of session 14). Process-wide. */
void kvq_gkv_set_tc_turbo(int on);
/** turboquant-prod:2/:3/:4 (TPROD keys, turboquant values): 1 = let kvq_gkv_set_tc's choice (not 0)
 *  send them to the tensor-core kernel (kv_attn_tc.cu, session 17: the keys' centroids and the QJL
 *  signs as two mma chains against R q and S R q, S R q formed once per block by mma; variants 1 and 2,
 *  never the cp.async stages; docs/KV.md), 0 = the fp32 split kernel; −1 (default) = 1 unless
 *  KVQ_CUDA_KV_TC_TPROD=0 in the environment (read at the first attend). Process-wide. */
void kvq_gkv_set_tc_tprod(int on);
/** turboquant-prod on the tensor cores, where R q, S R q and the scores' B fragments come from
 *  (session 18): 1 = a small kernel before the split launch forms them once per (row, KV head) into the
 *  scratch (kvq_gkv_tp_pre_launch) and the split blocks load them; 0 = every split block forms them
 *  (the kernel of session 17); the same bits either way. −1 (default) = 1 unless
 *  KVQ_CUDA_KV_TPROD_PRE=0 in the environment (read at the first attend). The scratch sizes
 *  (kvq_gkv_scratch_bytes, _seqs_, _rows_) hold the prelude's 4.5 KiB a (row, KV head) of a
 *  turboquant-prod cache whatever this says, so a buffer or a captured graph stays valid when it
 *  changes; a graph keeps the choice it was captured with. Process-wide. */
void kvq_gkv_set_tprod_pre(int on);
/** The same for TurboQuant and qturbo at 2 and 4 bits on the tensor cores (session 18, helper i20q): 1 =
 *  R q's B fragments formed once per (row, KV head) before the split launch, 0 = every block rotates q
 *  (tc_rotate_q, session 14's kernels); the same bits. Register-prefetch variants only: with cp.async
 *  stages (kvq_gkv_set_tc_pipe) every block forms them whatever this says. −1 (default) = 1 unless
 *  KVQ_CUDA_KV_TURBO_PRE=0 in the environment (read at the first attend). The scratch sizes hold its
 *  16 + 2 KiB a (row, KV head) of such a cache whatever this says. Process-wide. */
void kvq_gkv_set_turbo_pre(int on);
/** OCTOPUS keys on the tensor cores (kernels/cuda/kv_attn_oct.cu; session 17): 1 = octopus:2 and
 *  octopus:4, with or without :qjl (KIVI values of the same width), run attn_tc_oct whenever
 *  kvq_gkv_set_tc has the tensor cores on (variant 1, or 2 when asked for; fp16 ρ̂·n̂ from a
 *  shared-memory table, :qjl's signs as ±1 fp16, fp32 sums), 0 = the fp32 split kernel; −1 (default) =
 *  1 unless KVQ_CUDA_KV_TC_OCT=0 in the environment (read at the first attend). octopus:3 stays on the
 *  fp32 kernel. Process-wide. */
void kvq_gkv_set_tc_oct(int on);
/** 1 when kvq_gkv_attend would read this cache's packed chunks with the tensor-core kernel. */
int kvq_gkv_tc_active(const kvq_gkv_cache *c);
/** The tensor-core kernels' loads (issue 20): 3 or 4 = the software-pipelined kernels (each warp
 *  copies its next 2 or 3 tiles' codes and scales into a shared-memory ring with cp.async while it
 *  computes the current one; the same arithmetic on the same values, so outputs bit-identical to
 *  the default's), 0 = the register-prefetch variants kvq_gkv_set_tc chooses (the default until
 *  measured on the H100); −1 (default) = KVQ_CUDA_KV_PIPE=0, 3 or 4 in the environment (read at
 *  the first attend), else 0. Applies wherever kvq_gkv_set_tc sends a cache to the tensor cores
 *  (its variant 1 or 2 is then ignored) and the sides' data are 16-byte aligned. Process-wide. */
void kvq_gkv_set_tc_pipe(int stages);
/** The tensor-core kernels' instruction diet (issue 20, session 14, helper i20d): 1 = the lean
 *  instantiations — one lop3 per fp16 code pair instead of an AND and an OR, no rescale of Σ p·V
 *  in a tile where no running max moved (a warp-uniform branch), ex2.approx.ftz for the softmax's
 *  2^x — the same outputs bit for bit (but where a score falls more than 126 (log2) below its running
 *  max: its p < 2^-126 is 0 instead of subnormal); 0 = the kernels as before; −1 (default) =
 *  KVQ_CUDA_KV_TC_LEAN=1 or 0 in the environment (read at the first attend), else 1 (the default
 *  since the H100 run of session 15: 6–11 % faster at 32k/128k for the default variants). Applies to every tensor-core variant, stage count and kind. Process-wide. */
void kvq_gkv_set_tc_lean(int on);
/** int:2 and int:4 scores on integer tensor cores (issue 20, session 20, helper i20v): 1 = q rounded to
 *  int8 per query head (max |q| / 127) in each block, the key codes as u8 against it by
 *  mma.m16n8k32 (s32 sums; the zero point exact: Σ (c − qmax)·q8 = Σ c·q8 − qmax·Σ q8), the score
 *  scale_k · scale_q · that; Σ p·V as before (fp16). Not the same bits: q's rounding to int8 adds its
 *  error (the dp4a kernel's, kvq_gkv_set_int8_query). With the lean kernels (kvq_gkv_set_tc_lean)
 *  only, every variant and stage count; other kinds ignore it. 0 = the fp16 scores; −1 (default) =
 *  KVQ_CUDA_KV_TC_Q8=1 in the environment (read at the first attend), else 0. Process-wide. */
void kvq_gkv_set_tc_q8(int on);
/** 1 when kvq_gkv_attend would score this cache's packed chunks on integer tensor cores
 *  (kvq_gkv_set_tc_q8). */
int kvq_gkv_tc_q8(const kvq_gkv_cache *c);
/** The cp.async stages of the tensor-core kernel kvq_gkv_attend would run for this cache (0: the
 *  register-prefetch variant, or not on tensor cores). */
int kvq_gkv_tc_stages(const kvq_gkv_cache *c);

/** The merge of the split blocks' partial results (issue 20, 2026-11-27): 1 = fused into the
 *  attend's last split launch — the last block to finish for a (sequence, KV head), found by an
 *  atomic count per pair in a device array (reset by that block, so graph replays need nothing),
 *  merges its G query heads, rotation back included (kernels/cuda/kv_merge.cuh): one launch
 *  fewer, the same operations in the same order, so outputs bit-identical to 0 = the separate
 *  attn_merge launch after the splits. −1 (default) = KVQ_CUDA_KV_FUSE_MERGE=1 or 0 in the
 *  environment (read at the first attend), else 0 (the fused merge measured 1-7 % slower on the
 *  H100 at 4k and 32k, batch 1: docs/RESULTS.md, session 11). Process-wide; attends run one at a time on
 *  the stream (kvq_cuda_stream) — the counts are shared. */
void kvq_gkv_set_fuse_merge(int on);
/** 1: an attend's launches after its first (window-key and window chunks, the merge) are
 *  programmatic dependents of the launch before (the split kernels let them launch at their start;
 *  a window launch waits for the one before at its end, so the merge's wait covers every split), not
 *  with the fused merge or in rows mode; the same bits. 0 plain launches. −1 (default) =
 *  KVQ_CUDA_KV_PDL=0 in the environment (read at the first attend) turns it off, else 1 (the H100
 *  A/B of session 16: about 1 µs less a call, 4k-128k, batch 1; docs/RESULTS.md). */
void kvq_gkv_set_pdl(int on);
/** 1 when the merge is on and can be fused for this cache (head_dim 128 with 4 query heads per KV head, batch · n_kv ≤ 4096); an attend then
 *  fuses it when it has at most 1024 chunks — 256 when its last launch is a tensor-core kernel's
 *  (the weights sit in that kernel's existing shared memory) — else launches attn_merge. */
int kvq_gkv_merge_fused(const kvq_gkv_cache *c);
/** The automatic chunk's blocks per (sequence, KV head): waves × the resident blocks of the packed
 *  kernel over the device's SMs, divided among the (sequence, KV head) pairs (0.125 .. 8; more
 *  waves = more, shorter chunks). ≤ 0 (default) = KVQ_CUDA_KV_WAVES=<x> in the environment (read
 *  at the first attend), else 1. Process-wide: set it before capturing a step (its grids follow). */
void kvq_gkv_set_waves(float waves);
/** The automatic chunks' floor (session 19): positions ≥ 0 that floor (0: none, the automatic chunks
 *  as before; a multiple of 32 up to KVQ_GKV_MAX_CHUNK), −1 the default (256 positions for the
 *  tensor-core kernels but OCTOPUS+QJL's, 64 for the others; at most KVQ_GKV_MIN_SPLITS chunks of
 *  a side), < −1 KVQ_CUDA_KV_CFLOOR=<positions> in the environment again (read at the next attend).
 *  Process-wide: set it before capturing a step (its plans follow). */
void kvq_gkv_set_chunk_floor(int positions);

/** Times kvq_gkv_attend with CUDA events (after a warm-up): the median over reps of one call
 *  between two events (graph_calls = 0; the host's launch time included), or of one replay of
 *  a CUDA graph of graph_calls calls divided by graph_calls (the GPU's time per call, as a
 *  decode step replayed as a graph sees it; needs kvq_cuda_stream_init, ops.h). The calls
 *  cycle over `rotate` caches (copies laid out one after another, so that L2 holds none). */
kvq_status kvq_gkv_time(const kvq_gkv_cache *caches, int rotate, const float *q, float *out, float scale, int chunk,
                        void *scratch, int reps, int graph_calls, double *ms, kvq_err *err);

#ifdef __cplusplus
}
#endif

#endif
