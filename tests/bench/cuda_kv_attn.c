// Decode attention over packed KV caches on the GPU (kernels/cuda/kv_attn.cu): 32 query
// heads over 8 KV heads, head_dim 128, one new token, batch 1 and 8, T_kv = 4k..128k; our
// bf16 split-K kernel and every codec at 2, 3 and 4 bits. Two times: the median of 50 calls,
// each between two CUDA events (the host's launch time included), and the median of 30
// replays of a CUDA graph of 20 calls, divided by 20 (the GPU's time, as in a decode step
// replayed as a graph). Calls cycle over copies of the cache that together exceed 256 MB (so
// L2 holds none; the same rules as cuda_kv_sdpa.py, PyTorch's SDPA in the same device call).
// "q8": int keys scored by dp4a against an int8 copy of q; "h": int/KIVI values summed by
// HFMA2 in fp16 pairs (into fp32 every 32 positions); "tc", "tc2": int/KIVI at 2 and 4 bits on
// tensor cores (kv_attn_tc.cu: mma.m16n8k16 for the scores and Σ p·V; tc2 with two tiles' loads
// in flight a warp; the other rows with them off); "pipe3", "pipe4": the same kernels with the
// cp.async pipeline of 3 or 4 stages a warp (KVQ_CUDA_KV_PIPE, bit-identical outputs). turboquant-prod: (b−1)-bit keys + QJL
// signs (S R q once per block), turboquant:<b> values; "turboquant-prod:<b> tc" / "tc2" (session 17): on the
// tensor-core kernel (kvq_gkv_set_tc_tprod(1): centroid and sign mma chains; 2-4 bits); "… tc blk" (session 18):
// the same with R q, S R q and the B fragments formed in every block (kvq_gkv_set_tprod_pre(0), session 17's
// kernel) where the other rows form them once per (sequence, KV head) before the split launch unless
// KVQ_CUDA_KV_TPROD_PRE=0; "turboquant:4 tc blk", "turboquant:2 tc blk", "qturbo:4 tc blk" (session 18, helper i20q):
// TurboQuant's q rotated in every block (kvq_gkv_set_turbo_pre(0)), the "… tc" rows once per (sequence, KV
// head) before the split launch unless KVQ_CUDA_KV_TURBO_PRE=0. octopus: triplet codes (direction table
// in shared memory), ":qjl" with the sign plane; its values are KIVI's layout (kivi:<b> V); "octopus:<b> tc" / "tc2"
// and "octopus:<b>:qjl tc" (2 and 4 bits, session 17): the tensor-core kernel of kv_attn_oct.cu, variants 1 / 2
// (KVQ_CUDA_KV_TC_OCT=0: the fp32 one). qturbo: TurboQuant with the quaternion
// rotation of q and of the value sums; "turboquant:<b> tc" / "tc2" / "pipe3" / "pipe4" and "qturbo:<b> tc" / "tc2"
// (2 and 4 bits, session 14): those on the tensor-core kernels (kvq_gkv_set_tc_turbo(1): centroids from
// fp16 register tables by byte permutes), the rows without a suffix on the fp32 split kernel. hqkv: lattice codes of 5-8 bits (the GPU layout's
// width for that rate, docs/KV.md), rotation by signs (or the Haar Q: rot=qjl), "dither": the
// dither regenerated per position on the fly. "… lean" (session 14, helper i20d): the same tensor-core
// kernel's lean instantiation (kvq_gkv_set_tc_lean(1): fewer instructions a tile, bit-identical outputs);
// the rows without it follow KVQ_CUDA_KV_TC_LEAN (default 1 since session 15). "… i8" (session 20, helper i20v): int
// keys scored on integer tensor cores (kvq_gkv_set_tc_q8(1): q in int8 per query head, u8 codes, mma.m16n8k32;
// lean kernels), the other rows with fp16 scores (kvq_gkv_set_tc_q8(0), the default).
// "hqmq:…:med<C>" (session 16): HQMQ with outliers (KVQ_GKV_HQMQO), its rows as hqmqo_image lays them
// out (1 chunk in 20 an outlier read from the region's pool); compare with the plain "hqmq:…" row of
// the same S and b_r (CUDA_KV_ONLY="hqmq:s96:r4:med3" runs both: the match is by substring).
// Bytes = what a call must read (codes, side data); % copy = bytes/time over the device's
// copy bandwidth (the attention's caches hold constant bytes: timing only). Then the encoders
// (int, kivi, turboquant, qturbo, turboquant-prod, octopus[:qjl], hqkv, hqmq, with the codecs' real tables
// and pseudo-random tokens): positions appended per second as a 4096-token prefill, and µs per
// one-token append, after a warm-up append. Correctness is tests/test_cuda_kv.c.
// CUDA_KV_FUSE_AB=1: each row timed with the merge fused into the last split launch and with the
// separate merge launch (kvq_gkv_set_fuse_merge 1 / 0; bit-identical outputs), the same caches and
// chunk, both columns and their ratio (otherwise the process's setting: KVQ_CUDA_KV_FUSE_MERGE).
// CUDA_KV_ROWS=R (issue 20, session 13): instead of the decode table, prefill attention at batch 1:
// R query rows at positions [T − R, T) of a cache of T packed positions, each row seeing its prefix
// — rows mode (kvq_gkv_attend_rows, one set of launches) against the token loop it replaces (R
// kvq_gkv_attend calls on the rows' views); host wall time of the R rows to the end of the stream
// (median of 7 after a warm-up; launches included: they are what the loop pays), one cache copy.
// usage: [CUDA_KV_ONLY=name,name,...] [CUDA_KV_NO_BASE=1] [CUDA_KV_ENC_ONLY=1] [CUDA_KV_BATCH=1|8] [CUDA_KV_FUSE_AB=1] [CUDA_KV_ROWS=R] cuda_kv_attn [T ...]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/kv_attn.h"
#include "kernels/cuda/ops.h"
#include "kernels/kv_enc.h"
#include "libconv/kv/kv_gpu.h"

#define D KVQ_GKV_HEAD_DIM
#define NKV 8
#define H (NKV * KVQ_GKV_GROUP)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

// Bytes a call reads per (sequence, KV head, position), one side.
static int cmp_d(const void *a, const void *b) { return *(const double *)a < *(const double *)b ? -1 : *(const double *)a > *(const double *)b; }

// CUDA_KV_ROWS: the median wall time (ms) of R rows at [T − R, T) of c: rows mode (rows_mode 1,
// scratch sr of srb bytes) or R one-row attends of the rows' views (scratch st).
static kvq_status time_rows(const kvq_gkv_cache *c, int R, int rows_mode, const float *q, float *out, float scale, void *sr, size_t srb,
                            void *st, double *ms, kvq_err *err) {
    double t[8];
    const size_t qd = (size_t)c->n_heads * D;
    for (int rep = 0; rep < 8; rep++) {
        const double t0 = now();
        kvq_status s = KVQ_OK;
        if (rows_mode) s = kvq_gkv_attend_rows(c, q, out, scale, c->n_tok - R, R, sr, srb, err);
        for (int r = 0; r < R && !s && !rows_mode; r++) {
            kvq_gkv_cache v = *c;
            v.n_tok = c->n_tok - R + r + 1;
            v.n_enc_k = v.n_enc_k < v.n_tok ? v.n_enc_k : v.n_tok;
            v.n_enc_v = v.n_enc_v < v.n_tok ? v.n_enc_v : v.n_tok;
            s = kvq_gkv_attend(&v, q + r * qd, out + r * qd, scale, 0, st, err);
        }
        if (!s) s = kvq_cuda_sync(err);
        if (s) return s;
        t[rep] = (now() - t0) * 1e3;
    }
    qsort(t + 1, 7, sizeof *t, cmp_d); // the first is the warm-up
    *ms = t[4];
    return KVQ_OK;
}

static double bytes_per_pos(kvq_gkv_kind kind, int bits, int role) {
    if (kind <= KVQ_GKV_F16) return 2.0 * D;
    // KIVI: 4 bytes per channel per 32 positions (K), per 32 channels (V); HQKV: fp32 γ + u32 counter
    // TPROD: fp16 γ + fp16 γ_r; OCT: fp32 γ, OCTQ (+ fp16 γ_r, padding); HQMQ: fp16 σ; HQMQO: (σ, n_out, off)
    // and, at hqmqo_image's 1 outlier chunk in 20, 8 bytes of pool per 20 chunks
    if (kind == KVQ_GKV_HQMQO) return (double)kvq_gkv_kind_row_bytes(kind, bits, D) + 8.0 + 8.0 * (D / 4) / 20.0;
    double side = kind == KVQ_GKV_KIVI ? 4.0 * D / 32 : kind == KVQ_GKV_HQKV || kind == KVQ_GKV_OCTQ ? 8.0
                  : kind == KVQ_GKV_TPROD || kind == KVQ_GKV_OCT                 ? 4.0
                                                                                 : 2.0;
    return (double)kvq_gkv_kind_row_bytes(kind, bits, D) + side;
}

// hqmq:…:med<C> (KVQ_GKV_HQMQO): one region of T positions as its encoder leaves it (timing only,
// the values arbitrary but the pool's indexing real): chunk k of position t an outlier (code M + j,
// its 4 fp16 in the pool) when (t·D/4 + k) % 20 == 0 — 5 %, the tests' synthetic rate —, the others
// inlier codes (index (7t + k) % M, radius 1); side (fp16 σ 1.0, n_out, pool offset).
static void hqmqo_image(int bits, int ib, int M, int T, uint8_t *img) {
    const int nch = D / 4, nw = (4 * bits + 31) / 32;
    const size_t rb = kvq_gkv_kind_row_bytes(KVQ_GKV_HQMQO, bits, D), so = kvq_gkv_side_offset(KVQ_GKV_HQMQO, bits, D, T);
    uint8_t *pool = img + kvq_gkv_hqmqo_pool_offset(bits, D, T);
    uint32_t off = 0, code[D / 4];
    for (int t = 0; t < T; t++) {
        uint16_t no = 0;
        for (int k = 0; k < nch; k++) {
            if (((size_t)t * nch + k) % 20 == 0) {
                const uint16_t one[4] = {0x3C00, 0x3C00, 0x3C00, 0x3C00};
                memcpy(pool + ((size_t)off + no) * 8, one, 8);
                code[k] = (uint32_t)(M + no++);
            } else code[k] = (uint32_t)((7 * t + k) % M) | 1u << ib;
        }
        for (int i = 0; i < D / 16 * nw; i++) {
            const uint32_t w = kvq_ke_lane_word(code, 4, i / nw, i % nw, bits);
            memcpy(img + (size_t)t * rb + 4 * i, &w, 4);
        }
        const uint16_t sig = 0x3C00;
        memcpy(img + so + (size_t)t * 8, &sig, 2), memcpy(img + so + (size_t)t * 8 + 2, &no, 2), memcpy(img + so + (size_t)t * 8 + 4, &off, 4);
        off += no;
    }
}

#define TRY(x)                                                             \
    do {                                                                   \
        if ((x) != KVQ_OK) {                                               \
            fprintf(stderr, "cuda_kv_attn: %s: %s\n", #x, err.msg);        \
            return 1;                                                      \
        }                                                                  \
    } while (0)

int main(int argc, char **argv) {
    char why[256] = "";
    if (kvq_cuda_device_count(why, sizeof why) <= 0) {
        printf("cuda_kv_attn: skipped: %s\n", why);
        return 0;
    }
    kvq_err err = {0};
    char name[256];
    kvq_cuda_device_name(name, sizeof name);
    double bw = 0;
    TRY(kvq_cuda_copy_bandwidth((size_t)256 << 20, 20, &bw, &err));
    printf("device: %s, copy bandwidth %.0f GB/s (256 MiB device-to-device, read + write)\n", name, bw / 1e9);
    int Ts[8] = {4096, 16384, 32768, 131072}, nT = 4;
    if (argc > 1) {
        nT = 0;
        for (int i = 1; i < argc && nT < 8; i++) Ts[nT++] = atoi(argv[i]);
    }
    const struct { kvq_gkv_kind kind; int bits; const char *name; } cfg[] = {
        {KVQ_GKV_BF16, 0, "bf16"},          {KVQ_GKV_INT, 4, "int:4"},          {KVQ_GKV_INT, 3, "int:3"},
        {KVQ_GKV_INT, 2, "int:2"},          {KVQ_GKV_INT, 4, "int:4 tc"},       {KVQ_GKV_INT, 2, "int:2 tc"},
        {KVQ_GKV_INT, 4, "int:4 tc2"},      {KVQ_GKV_INT, 2, "int:2 tc2"},      {KVQ_GKV_KIVI, 4, "kivi:4 tc"},
        {KVQ_GKV_KIVI, 2, "kivi:2 tc"},     {KVQ_GKV_KIVI, 4, "kivi:4 tc2"},    {KVQ_GKV_KIVI, 2, "kivi:2 tc2"},
        {KVQ_GKV_INT, 4, "int:4 pipe3"},    {KVQ_GKV_INT, 4, "int:4 pipe4"},    {KVQ_GKV_INT, 2, "int:2 pipe3"},
        {KVQ_GKV_INT, 2, "int:2 pipe4"},    {KVQ_GKV_KIVI, 4, "kivi:4 pipe3"},  {KVQ_GKV_KIVI, 4, "kivi:4 pipe4"},
        {KVQ_GKV_KIVI, 2, "kivi:2 pipe3"},  {KVQ_GKV_KIVI, 2, "kivi:2 pipe4"},
        {KVQ_GKV_INT, 4, "int:4 tc2 lean"}, {KVQ_GKV_INT, 2, "int:2 tc lean"}, {KVQ_GKV_INT, 4, "int:4 tc lean"},
        {KVQ_GKV_KIVI, 4, "kivi:4 tc2 lean"}, {KVQ_GKV_KIVI, 2, "kivi:2 tc lean"}, {KVQ_GKV_INT, 4, "int:4 pipe4 lean"},
        {KVQ_GKV_TURBO, 4, "turboquant:4 tc lean"}, {KVQ_GKV_TURBO, 2, "turboquant:2 tc lean"},
        {KVQ_GKV_INT, 2, "int:2 pipe3 lean"}, {KVQ_GKV_INT, 2, "int:2 pipe4 lean"},
        {KVQ_GKV_INT, 4, "int:4 tc i8"},    {KVQ_GKV_INT, 4, "int:4 tc2 i8"},   {KVQ_GKV_INT, 2, "int:2 tc i8"},
        {KVQ_GKV_INT, 2, "int:2 tc2 i8"},   {KVQ_GKV_INT, 4, "int:4 pipe4 i8"},
        {KVQ_GKV_INT, 4, "int:4 q8+h"},     {KVQ_GKV_INT, 3, "int:3 q8+h"},
        {KVQ_GKV_INT, 2, "int:2 q8+h"},     {KVQ_GKV_KIVI, 4, "kivi:4"},        {KVQ_GKV_KIVI, 3, "kivi:3"},
        {KVQ_GKV_KIVI, 2, "kivi:2"},        {KVQ_GKV_KIVI, 4, "kivi:4 h"},      {KVQ_GKV_KIVI, 3, "kivi:3 h"},
        {KVQ_GKV_KIVI, 2, "kivi:2 h"},      {KVQ_GKV_TURBO, 4, "turboquant:4"}, {KVQ_GKV_TURBO, 3, "turboquant:3"},
        {KVQ_GKV_TURBO, 2, "turboquant:2"}, {KVQ_GKV_TURBO, 4, "qturbo:4"},     {KVQ_GKV_TURBO, 3, "qturbo:3"},
        {KVQ_GKV_TURBO, 2, "qturbo:2"},     {KVQ_GKV_TURBO, 4, "turboquant:4 tc"}, {KVQ_GKV_TURBO, 4, "turboquant:4 tc2"},
        {KVQ_GKV_TURBO, 2, "turboquant:2 tc"}, {KVQ_GKV_TURBO, 2, "turboquant:2 tc2"}, {KVQ_GKV_TURBO, 4, "qturbo:4 tc"},
        {KVQ_GKV_TURBO, 4, "qturbo:4 tc2"}, {KVQ_GKV_TURBO, 2, "qturbo:2 tc"}, {KVQ_GKV_TURBO, 2, "qturbo:2 tc2"},
        {KVQ_GKV_TURBO, 4, "turboquant:4 pipe3"}, {KVQ_GKV_TURBO, 4, "turboquant:4 pipe4"}, {KVQ_GKV_TURBO, 2, "turboquant:2 pipe4"},
        {KVQ_GKV_TPROD, 4, "turboquant-prod:4"}, {KVQ_GKV_TPROD, 3, "turboquant-prod:3"},
        {KVQ_GKV_TPROD, 2, "turboquant-prod:2"}, {KVQ_GKV_TPROD, 4, "turboquant-prod:4 tc"}, {KVQ_GKV_TPROD, 4, "turboquant-prod:4 tc2"},
        {KVQ_GKV_TPROD, 3, "turboquant-prod:3 tc"}, {KVQ_GKV_TPROD, 2, "turboquant-prod:2 tc"}, {KVQ_GKV_TPROD, 2, "turboquant-prod:2 tc2"},
        {KVQ_GKV_TPROD, 4, "turboquant-prod:4 tc blk"}, {KVQ_GKV_TPROD, 3, "turboquant-prod:3 tc blk"}, {KVQ_GKV_TPROD, 2, "turboquant-prod:2 tc blk"},
        {KVQ_GKV_TURBO, 4, "turboquant:4 tc blk"}, {KVQ_GKV_TURBO, 2, "turboquant:2 tc blk"}, {KVQ_GKV_TURBO, 4, "qturbo:4 tc blk"},
        {KVQ_GKV_OCT, 4, "octopus:4"}, {KVQ_GKV_OCT, 3, "octopus:3"},
        {KVQ_GKV_OCT, 2, "octopus:2"},      {KVQ_GKV_OCT, 4, "octopus:4 tc"}, {KVQ_GKV_OCT, 4, "octopus:4 tc2"},
        {KVQ_GKV_OCT, 2, "octopus:2 tc"},   {KVQ_GKV_OCT, 2, "octopus:2 tc2"}, {KVQ_GKV_OCTQ, 4, "octopus:4:qjl tc"},
        {KVQ_GKV_OCTQ, 2, "octopus:2:qjl tc"}, {KVQ_GKV_OCTQ, 4, "octopus:4:qjl"}, {KVQ_GKV_OCTQ, 3, "octopus:3:qjl"},
        {KVQ_GKV_OCTQ, 2, "octopus:2:qjl"}, {KVQ_GKV_HQMQ, 19, "hqmq:s192:r6"}, {KVQ_GKV_HQMQ, 16, "hqmq:s96:r4"},
        {KVQ_GKV_HQMQ, 13, "hqmq:s24:r3"},     {KVQ_GKV_HQMQO, 19, "hqmq:s192:r6:med2.5"}, {KVQ_GKV_HQMQO, 16, "hqmq:s96:r4:med3"},
        {KVQ_GKV_HQMQO, 13, "hqmq:s24:r3:med3"}, {KVQ_GKV_HQKV, 8, "hqkv:e8:4"},     {KVQ_GKV_HQKV, 7, "hqkv:e8:3"},
        {KVQ_GKV_HQKV, 6, "hqkv:e8:2"},     {KVQ_GKV_HQKV, 8, "hqkv:e8:4:dither"}, {KVQ_GKV_HQKV, 7, "hqkv:e8:3:dither"},
        {KVQ_GKV_HQKV, 6, "hqkv:e8:2:dither"}, {KVQ_GKV_HQKV, 7, "hqkv:e8:3:rot=qjl:dither"}, {KVQ_GKV_HQKV, 5, "hqkv:z:2:dither"}};
    const int ncfg = sizeof cfg / sizeof *cfg;
    // CUDA_KV_ONLY="name,name,...": only those rows (exact names as printed) and bf16
    const char *only = getenv("CUDA_KV_ONLY");
    const float scale = 0.08838834764831845f;
    void *cb, *sg, *qt, *mat, *seeds, *odir, *orho, *osg, *hcb, *q, *out;
    TRY(kvq_cuda_malloc(&cb, sizeof(float) * NKV * 16, &err));
    TRY(kvq_cuda_malloc(&sg, sizeof(float) * NKV * D, &err));
    TRY(kvq_cuda_memset(cb, 0x11, sizeof(float) * NKV * 16, &err));
    TRY(kvq_cuda_memset(sg, 0x11, sizeof(float) * NKV * D, &err));
    TRY(kvq_cuda_malloc(&qt, sizeof(float) * NKV * 4, &err)); // qturbo quaternions
    TRY(kvq_cuda_memset(qt, 0x11, sizeof(float) * NKV * 4, &err));
    TRY(kvq_cuda_malloc(&mat, sizeof(float) * NKV * D * D, &err)); // hqkv rot=qjl
    TRY(kvq_cuda_memset(mat, 0x11, sizeof(float) * NKV * D * D, &err));
    TRY(kvq_cuda_malloc(&odir, sizeof(float) * NKV * 3 * 1024, &err)); // octopus directions, norms, s1 and s2
    TRY(kvq_cuda_memset(odir, 0x11, sizeof(float) * NKV * 3 * 1024, &err));
    TRY(kvq_cuda_malloc(&orho, sizeof(float) * NKV * 8, &err));
    TRY(kvq_cuda_memset(orho, 0x11, sizeof(float) * NKV * 8, &err));
    TRY(kvq_cuda_malloc(&osg, sizeof(float) * NKV * 2 * D, &err));
    TRY(kvq_cuda_memset(osg, 0x11, sizeof(float) * NKV * 2 * D, &err));
    TRY(kvq_cuda_malloc(&hcb, sizeof(float) * NKV * 4 << 13, &err)); // hqmq joint codebooks (2^13 rows a head at most)
    TRY(kvq_cuda_memset(hcb, 0x11, sizeof(float) * NKV * 4 << 13, &err));
    TRY(kvq_cuda_malloc(&seeds, sizeof(uint64_t) * NKV, &err)); // hqkv dither
    TRY(kvq_cuda_memset(seeds, 0x11, sizeof(uint64_t) * NKV, &err));
    const char *rr = getenv("CUDA_KV_ROWS");
    const int R = rr ? atoi(rr) : 0, nq = R > 8 ? R : 8; // rows of q and out
    TRY(kvq_cuda_malloc(&q, sizeof(float) * nq * H * D, &err));
    TRY(kvq_cuda_malloc(&out, sizeof(float) * nq * H * D, &err));
    TRY(kvq_cuda_memset(q, 0x11, sizeof(float) * nq * H * D, &err));
    TRY(kvq_cuda_stream_init(&err));
    // CUDA_KV_ENC_ONLY=1: only the encoder table (tests/bench/gpu_kv_enc_check.sh)
    const char *eo = getenv("CUDA_KV_ENC_ONLY");
    if (eo && !strcmp(eo, "1")) nT = 0;
    const char *fab = getenv("CUDA_KV_FUSE_AB");
    const int ab = fab && !strcmp(fab, "1");
    if (nT && R > 0)
        printf("\n| T_kv | rows | cache | rows mode: ms | token loop: ms | loop / rows | µs a row (rows mode) | chunk |\n|---|---|---|---|---|---|---|---|\n");
    else if (nT && ab)
        printf("\n| T_kv | batch | cache | ms, one call | ms, in a graph | two launches: ms, one call | ms, in a graph | fused / two (graph) | MB read | GB/s (graph) | %% of copy (graph) | chunk | copies |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    else if (nT)
    printf("\n| T_kv | batch | cache | ms, one call | ms, in a graph | MB read | GB/s (graph) | %% of copy (graph) | chunk | copies |\n|---|---|---|---|---|---|---|---|---|---|\n");
    // CUDA_KV_BATCH=1 or 8: only that batch size (default both)
    const char *bo = getenv("CUDA_KV_BATCH");
    const int only_b = bo ? atoi(bo) : 0;
    const int no_base = getenv("CUDA_KV_NO_BASE") && atoi(getenv("CUDA_KV_NO_BASE")) == 1;
    for (int ti = 0; ti < nT; ti++)
        for (int B = 1; B <= 8; B += 7)
            for (int ci = 0; ci < ncfg; ci++) {
                const int T = Ts[ti];
                if (only_b && B != only_b) continue;
                if (only && !strstr(only, cfg[ci].name) && strcmp(cfg[ci].name, "bf16")) continue; // bf16 always, as the baseline
                if (no_base && !strcmp(cfg[ci].name, "bf16")) continue; // ... unless CUDA_KV_NO_BASE=1 (a profiler's first launch)
                kvq_gkv_cache c = {{.kind = cfg[ci].kind, .bits = cfg[ci].bits, .role = 0, .cb = cb, .signs = sg},
                                   {.kind = cfg[ci].kind, .bits = cfg[ci].bits, .role = 1, .cb = cb, .signs = sg}, B, NKV, H, D, T, T, T, T,
                                   NULL, NULL, 0};
                if (!strncmp(cfg[ci].name, "qturbo", 6)) c.k.quat = c.v.quat = qt;
                if (cfg[ci].kind == KVQ_GKV_TPROD) c.v.kind = KVQ_GKV_TURBO, c.k.mat = mat; // its values are turboquant:<b>
                if (cfg[ci].kind == KVQ_GKV_HQMQ || cfg[ci].kind == KVQ_GKV_HQMQO) // joint codebook rows 2^ib: 10, 12, 13 index bits
                    c.k.ibits = c.v.ibits = cfg[ci].bits == 13 ? 10 : cfg[ci].bits == 16 ? 12 : 13, c.k.cb = c.v.cb = hcb,
                    c.k.n_sec = c.v.n_sec = cfg[ci].bits == 13 ? 24 : cfg[ci].bits == 16 ? 96 : 192; // S (HQMQO: M = 24·S)
                if (cfg[ci].kind == KVQ_GKV_OCT || cfg[ci].kind == KVQ_GKV_OCTQ) // its values are KIVI's per-token groups
                    c.v.kind = KVQ_GKV_KIVI, c.k.cb = odir, c.k.rho = orho, c.k.signs = osg;
                if (cfg[ci].kind == KVQ_GKV_HQKV) { // E8 (Z for "hqkv:z"), signs or Q, dither as named
                    kvq_gkv_side *sd[2] = {&c.k, &c.v};
                    for (int r = 0; r < 2; r++) {
                        sd[r]->lat = strstr(cfg[ci].name, ":z:") ? 3 : 0;
                        sd[r]->rot = strstr(cfg[ci].name, "rot=qjl") ? 2 : 1;
                        sd[r]->dither = strstr(cfg[ci].name, "dither") != NULL;
                        sd[r]->scale = 40.0f;
                        sd[r]->mat = mat, sd[r]->seeds = seeds;
                    }
                }
                const size_t rk = kvq_gkv_region_bytes(c.k.kind, c.k.bits, D, T, 0), rv = kvq_gkv_region_bytes(c.v.kind, c.v.bits, D, T, 1);
                const size_t one = (size_t)B * NKV * (rk + rv);
                int rot = (int)(((size_t)256 << 20) / one) + 1;
                if (rot > 64) rot = 64;
                void *buf;
                TRY(kvq_cuda_malloc(&buf, one * rot, &err));
                TRY(kvq_cuda_memset(buf, 0x11, one * rot, &err));
                if (cfg[ci].kind == KVQ_GKV_HQMQO) { // every region (K and V: the same bytes) as hqmqo_image
                    uint8_t *img = calloc(rk, 1);
                    if (!img) return 1;
                    hqmqo_image(c.k.bits, c.k.ibits, 24 * c.k.n_sec, T, img);
                    for (size_t r = 0; r < (size_t)rot * B * NKV * 2; r++) TRY(kvq_cuda_copy((char *)buf + r * rk, img, rk, 1, &err));
                    free(img);
                }
                kvq_gkv_cache cs[64];
                for (int r = 0; r < rot; r++) {
                    cs[r] = c;
                    cs[r].k.data = (char *)buf + one * r;
                    cs[r].v.data = (char *)buf + one * r + (size_t)B * NKV * rk;
                }
                kvq_gkv_set_int8_query(strstr(cfg[ci].name, "q8") != NULL);
                kvq_gkv_set_half_values((strstr(cfg[ci].name, " h") || strstr(cfg[ci].name, "+h")) && cfg[ci].kind != KVQ_GKV_BF16);
                kvq_gkv_set_tc(strstr(cfg[ci].name, " tc2") ? 2 : strstr(cfg[ci].name, " tc") || strstr(cfg[ci].name, " pipe"));
                kvq_gkv_set_tc_pipe(strstr(cfg[ci].name, " pipe4") ? 4 : strstr(cfg[ci].name, " pipe3") ? 3 : 0);
                kvq_gkv_set_tc_turbo(strstr(cfg[ci].name, " tc") || strstr(cfg[ci].name, " pipe")); // TurboQuant rows named so
                kvq_gkv_set_tc_tprod(strstr(cfg[ci].name, " tc") != NULL);                         // turboquant-prod likewise
                kvq_gkv_set_tprod_pre(strstr(cfg[ci].name, " blk") ? 0 : -1); // its prelude in every block, or KVQ_CUDA_KV_TPROD_PRE
                kvq_gkv_set_turbo_pre(strstr(cfg[ci].name, " blk") ? 0 : -1); // TurboQuant's likewise, or KVQ_CUDA_KV_TURBO_PRE
                kvq_gkv_set_tc_lean(strstr(cfg[ci].name, " lean") ? 1 : -1); // the others: KVQ_CUDA_KV_TC_LEAN (default 1)
                kvq_gkv_set_tc_q8(strstr(cfg[ci].name, " i8") ? 1 : 0);      // the others: fp16 scores
                const int chunk = kvq_gkv_auto_chunk(&c);
                if (R > 0) { // prefill rows: batch 1, one copy
                    if (B == 1 && R <= T) {
                        void *sr, *st;
                        const size_t srb = kvq_gkv_rows_scratch_bytes(&c, T - R, R);
                        TRY(kvq_cuda_malloc(&sr, srb, &err));
                        TRY(kvq_cuda_malloc(&st, kvq_gkv_scratch_bytes(&c, 0), &err));
                        double mr = 0, mt = 0;
                        TRY(time_rows(&cs[0], R, 1, q, out, scale, sr, srb, st, &mr, &err));
                        TRY(time_rows(&cs[0], R, 0, q, out, scale, sr, srb, st, &mt, &err));
                        printf("| %dk | %d | %s | %.3f | %.3f | %.2f | %.1f | %d |\n", T / 1024, R, cfg[ci].name, mr, mt, mt / mr, 1e3 * mr / R, chunk);
                        fflush(stdout);
                        kvq_cuda_free(sr), kvq_cuda_free(st);
                    }
                    kvq_cuda_free(buf);
                    continue;
                }
                void *scr;
                TRY(kvq_cuda_malloc(&scr, kvq_gkv_scratch_bytes(&c, chunk), &err));
                double ms = 0, msg = 0, ms2 = 0, msg2 = 0;
                if (ab) kvq_gkv_set_fuse_merge(1);
                TRY(kvq_gkv_time(cs, rot, q, out, scale, chunk, scr, 50, 0, &ms, &err));
                TRY(kvq_gkv_time(cs, rot, q, out, scale, chunk, scr, 30, 20, &msg, &err));
                if (ab) { // the separate merge launch, then back
                    kvq_gkv_set_fuse_merge(0);
                    TRY(kvq_gkv_time(cs, rot, q, out, scale, chunk, scr, 50, 0, &ms2, &err));
                    TRY(kvq_gkv_time(cs, rot, q, out, scale, chunk, scr, 30, 20, &msg2, &err));
                    kvq_gkv_set_fuse_merge(1);
                }
                const double bytes = (double)B * NKV * T * (bytes_per_pos(c.k.kind, c.k.bits, 0) + bytes_per_pos(c.v.kind, c.v.bits, 1));
                if (ab)
                    printf("| %dk | %d | %s | %.4f | %.4f | %.4f | %.4f | %.2f | %.1f | %.0f | %.0f %% | %d | %d |\n", T / 1024, B, cfg[ci].name, ms, msg,
                           ms2, msg2, msg / msg2, bytes / 1e6, bytes / (msg * 1e-3) / 1e9, 100.0 * bytes / (msg * 1e-3) / bw, chunk, rot);
                else
                printf("| %dk | %d | %s | %.4f | %.4f | %.1f | %.0f | %.0f %% | %d | %d |\n", T / 1024, B, cfg[ci].name, ms, msg, bytes / 1e6,
                       bytes / (msg * 1e-3) / 1e9, 100.0 * bytes / (msg * 1e-3) / bw, chunk, rot);
                fflush(stdout);
                kvq_cuda_free(scr);
                kvq_cuda_free(buf);
            }

    // encoders: one token at a time (decode) and a 4096-token prefill, batch 1, window 0
    printf("\n| encoder | prefill 4096: positions/s | decode: µs per appended token (8 KV heads, K and V) |\n|---|---|---|\n");
    const char *enc[] = {"int:4", "int:2", "kivi:4", "kivi:2", "turboquant:4", "turboquant:3", "turboquant:2", "qturbo:4",
                         "turboquant-prod:4", "turboquant-prod:2", "octopus:4", "octopus:3", "octopus:2", "octopus:4:qjl", "octopus:2:qjl",
                         "hqkv:e8:3", "hqkv:e8:3:dither", "hqkv:e8:3:rot=qjl:dither", "hqkv:z:2:dither", "hqmq:s24:r3", "hqmq:s96:r4",
                         "hqmq:s192:r6", "hqmq:s24:r3:med3", "hqmq:s96:r4:med3", "hqmq:s192:r6:med2.5"};
    const int CAP = 8192, P = 4096, W = 0, WCAP = P + 64 + 32, NDEC = 256;
    float *hx = malloc(sizeof(float) * P * NKV * D);
    uint64_t st = 1;
    for (size_t i = 0; i < (size_t)P * NKV * D; i++) { // roughly N(0, 1) (sum of 4 uniforms), a token's values all different
        double a = 0;
        for (int k = 0; k < 4; k++) st = st * 6364136223846793005ull + 1442695040888963407ull, a += (double)(st >> 11) / 9007199254740992.0;
        hx[i] = (float)((a - 2.0) * 1.7320508);
    }
    void *x;
    TRY(kvq_cuda_malloc(&x, sizeof(float) * P * NKV * D, &err));
    TRY(kvq_cuda_copy(x, hx, sizeof(float) * P * NKV * D, 1, &err));
    for (size_t ei = 0; ei < sizeof enc / sizeof *enc; ei++) {
        if (only && !strstr(only, enc[ei])) continue;
        kvq_gkv_cache c = {{.role = 0}, {.role = 1}, 1, NKV, H, D, CAP, 0, 0, 0, NULL, NULL, WCAP};
        kvq_kvspec sp;
        TRY(kvq_kvspec_parse(enc[ei], &sp, &err));
        for (int r = 0; r < 2; r++) { // the codec's real tables (seeded states), as kv_codec uploads them
            kvq_gkv_side *s = r ? &c.v : &c.k;
            kvq_kvcodec *cs[NKV];
            for (int h = 0; h < NKV; h++) TRY(kvq_kvcodec_new(&sp, D, r, kvq_kv_seed(7, 0, h, r), &cs[h], &err));
            TRY(kvq_gkv_kind_of(cs[0], &s->kind, &s->bits, &err));
            TRY(kvq_gkv_side_tables(s, (const kvq_kvcodec *const *)cs, NKV, NULL, &err));
            for (int h = 0; h < NKV; h++) kvq_kvcodec_free(cs[h]);
            TRY(kvq_cuda_malloc(&s->data, NKV * kvq_gkv_region_bytes(s->kind, s->bits, D, CAP, r), &err));
        }
        TRY(kvq_cuda_malloc(&c.wk, (size_t)NKV * WCAP * D * 2, &err));
        TRY(kvq_cuda_malloc(&c.wv, (size_t)NKV * WCAP * D * 2, &err));
        TRY(kvq_gkv_append(&c, x, x, 64, W, &err)); // warm-up (the kernels' first launch loads them), then from position 0
        TRY(kvq_cuda_sync(&err));
        c.n_tok = c.n_enc_k = c.n_enc_v = 0;
        double t0 = now();
        TRY(kvq_gkv_append(&c, x, x, P, W, &err));
        TRY(kvq_cuda_sync(&err));
        const double tp = now() - t0;
        t0 = now();
        for (int i = 0; i < NDEC; i++) TRY(kvq_gkv_append(&c, (float *)x + (size_t)i * NKV * D, (float *)x + (size_t)i * NKV * D, 1, W, &err));
        TRY(kvq_cuda_sync(&err));
        const double td = (now() - t0) / NDEC;
        printf("| %s | %.3g | %.1f |\n", enc[ei], P / tp, td * 1e6);
        fflush(stdout);
        for (int r = 0; r < 2; r++) {
            kvq_gkv_side_free_tables(r ? &c.v : &c.k);
            kvq_cuda_free((r ? &c.v : &c.k)->data);
        }
        kvq_cuda_free(c.wk), kvq_cuda_free(c.wv);
    }
    kvq_cuda_free(x);
    free(hx);
    return 0;
}
