// Tests for the PQ execution layout and its products (kernels/pq_layout.h, kernels/cpu/pq.c,
// libconv/codec/qet/pq_pack.c): the layout built from encoded tensors decodes to the codec's
// own floats bit for bit; every fast path (AVX2 tables, gathers, batched tables and lookups,
// the threaded driver) equals the plain reference bit for bit on random layouts; the packed
// product stays within the float summation bound of the exact product; bad payloads are refused.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cpu/hqx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pq.h"
#include "libconv/codec/qet/qet.h"
#include "tests/pqx_rand.h" // randvec, rand_pqx, rand_qetx
#include "tests/testrng.h"

static void views(const kvq_encoded *e, kvq_blob_view *v) {
    for (int i = 0; i < e->n_blob; i++) v[i] = (kvq_blob_view){e->blob[i].role, e->blob[i].data, e->blob[i].size};
}

// ---- the layout against the codec's decoder

// Encodes a random n × d matrix with `spec` (pq: or qet: options), decodes it with the codec
// and packs it: every row of the layout equals the decoder's floats; returns held / stored.
static double pack_vs_decode(const char *spec, int pq, kvq_dtype src, int64_t n, int64_t d) {
    uint64_t s = 7;
    float *x = randvec(n * d, &s);
    kvq_qet_config cfg;
    kvq_err e = {0};
    if (kvq_qet_parse(spec, pq, &cfg, &e)) fail_msg("%s", e.msg);
    kvq_encoded enc;
    if (kvq_qet_encode(&cfg, src, x, n, d, 11, 1, &enc, &e)) fail_msg("%s: %s", spec, e.msg);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    views(&enc, v);
    float *dec = malloc(sizeof(float) * (size_t)(n * d)), *row = malloc(sizeof(float) * (size_t)d);
    assert_int_equal(kvq_qet_decode(enc.params, v, enc.n_blob, n, d, dec, &e), KVQ_OK);
    kvq_pqx p;
    if (kvq_qet_pack_pqx(enc.params, v, enc.n_blob, n, d, &p, &e)) fail_msg("%s: %s", spec, e.msg);
    for (int64_t r = 0; r < n; r++) {
        kvq_pqx_row_f32(&p, r, row);
        assert_memory_equal(row, dec + r * d, sizeof(float) * (size_t)d);
    }
    size_t stored = 0;
    for (int i = 0; i < enc.n_blob; i++) stored += enc.blob[i].size;
    double ratio = (double)kvq_pqx_bytes(&p) / (double)stored;
    printf("  %-18s %-4s %4lld x %-4lld k %lld/%lld  held %zu / blobs %zu = %.3f\n", spec, kvq_dtype_name(src),
           (long long)n, (long long)d, (long long)p.k[0], (long long)(p.stages > 1 ? p.k[1] : 0), kvq_pqx_bytes(&p),
           stored, ratio);
    kvq_pqx_free(&p);
    kvq_encoded_free(&enc);
    free(x); free(dec); free(row);
    return ratio;
}

static void test_pack_matches_decoder(void **st) {
    (void)st;
    for (uint32_t h = 0; h < 65536; h++) { // the layout's half conversion is the codec's, bit for bit
        const float a = kvq_pqx_f16((uint16_t)h), b = kvq_f16_to_f32((uint16_t)h);
        if (a == a || b == b) assert_memory_equal(&a, &b, sizeof a);
    }
    // the default pq on a bf16 source: codebooks kept as bf16, indices widened to bytes
    assert_true(pack_vs_decode("4", 1, KVQ_DTYPE_BF16, 256, 512) <= 1.3);
    assert_true(pack_vs_decode("4", 1, KVQ_DTYPE_BF16, 37, 64) <= 1.3); // rows not a multiple of 8
    pack_vs_decode("1.5:k1=300", 1, KVQ_DTYPE_BF16, 512, 64);            // k > 256: uint16 indices
    pack_vs_decode("4:r=2", 1, KVQ_DTYPE_BF16, 128, 256);               // RQO: two stages
    pack_vs_decode("4:cb=10", 1, KVQ_DTYPE_BF16, 128, 256);             // CQO codebooks → float
    pack_vs_decode("4", 1, KVQ_DTYPE_F32, 128, 256);                    // f32 source
    // f16 source: codebooks kept as f16 (they were float32, 2.0x the stored bytes)
    assert_true(pack_vs_decode("4:w=4", 1, KVQ_DTYPE_F16, 64, 128) <= 1.3);
    assert_true(pack_vs_decode("4", 1, KVQ_DTYPE_F16, 256, 512) <= 1.3);
    pack_vs_decode("4:l=0", 0, KVQ_DTYPE_BF16, 128, 256);               // qet without swap trees
    // QET with its 3-level swap tree (qetx): switch fields, slot-order indices, codebook blobs
    // as stored; the default (CQO 10 bits, two stages) within the 1.3x cap
    assert_true(pack_vs_decode("4", 0, KVQ_DTYPE_BF16, 256, 512) <= 1.3);
    assert_true(pack_vs_decode("4", 0, KVQ_DTYPE_BF16, 37, 128) <= 1.3); // k <= 16: nibbles
    pack_vs_decode("1:k1=300,k2=20", 0, KVQ_DTYPE_BF16, 320, 64);       // uint16 and byte indices
    pack_vs_decode("4:cb=0", 0, KVQ_DTYPE_BF16, 128, 256);              // raw bf16 codebooks
    pack_vs_decode("4:cb=0", 0, KVQ_DTYPE_F32, 64, 192);                // raw f32 codebooks
    pack_vs_decode("4:r=1,cb=7", 0, KVQ_DTYPE_F32, 64, 128);            // one stage, 7-bit codes
    pack_vs_decode("4:cb=24", 0, KVQ_DTYPE_F32, 40, 64);                // the widest code the codec writes
    // every other swap tree (general QET, qetg, 2026-11-27): indicator bits and codebook blobs as
    // stored, row-major indices at 4 / 8 / 16 bits; within the 1.3x cap where the tensor is not tiny
    assert_true(pack_vs_decode("4:l=2", 0, KVQ_DTYPE_BF16, 256, 512) <= 1.3);
    assert_true(pack_vs_decode("4:w=4", 0, KVQ_DTYPE_BF16, 256, 512) <= 1.3);
    pack_vs_decode("4:l=1", 0, KVQ_DTYPE_BF16, 64, 128);
    pack_vs_decode("4:l=5,w=16", 0, KVQ_DTYPE_BF16, 64, 256);
    pack_vs_decode("4:l=4,w=4", 0, KVQ_DTYPE_F32, 48, 96);
    pack_vs_decode("4", 0, KVQ_DTYPE_BF16, 64, 96);                     // l = 3, w = 8, 96 columns
    pack_vs_decode("4:l=2,cb=0", 0, KVQ_DTYPE_BF16, 64, 128);           // raw bf16 codebooks
    pack_vs_decode("4:l=2,cb=0", 0, KVQ_DTYPE_F16, 64, 128);            // raw f16 codebooks
    pack_vs_decode("4:w=2,r=1,cb=7", 0, KVQ_DTYPE_F32, 40, 64);
    pack_vs_decode("1:l=2,k1=300,k2=20", 0, KVQ_DTYPE_BF16, 320, 64);   // uint16 and byte indices
}

static void test_pack_refusals(void **st) {
    (void)st;
    uint64_t s = 3;
    const int64_t n = 64, d = 128;
    float *x = randvec(n * d, &s);
    kvq_err e = {0};
    kvq_pqx p;
    kvq_blob_view v[KVQ_MAX_BLOBS];
    // QET swap trees other than l=3, w=8, columns a multiple of 64 get the general layout (qetg;
    // they were refused, then decoded, before 2026-11-27); the default tree the qetx one
    kvq_qet_config cfg = kvq_qet_config_default(4);
    kvq_encoded enc;
    const int gl[4] = {2, 3, 3, 3}, gw[4] = {8, 4, 8, 8}, gd[4] = {128, 128, 96, 128};
    for (int i = 0; i < 4; i++) {
        cfg.levels = gl[i];
        cfg.width = gw[i];
        assert_int_equal(kvq_qet_encode(&cfg, KVQ_DTYPE_BF16, x, n, gd[i], 1, 1, &enc, &e), KVQ_OK);
        views(&enc, v);
        assert_int_equal(kvq_qet_pack_pqx(enc.params, v, enc.n_blob, n, gd[i], &p, &e), KVQ_OK);
        assert_int_equal(p.qetg, i < 3);
        assert_int_equal(p.levels, gl[i]);
        kvq_pqx_free(&p);
        // an index past k in the general layout is refused too, naming the row
        if (i == 0) {
            for (int b = 0; b < enc.n_blob; b++)
                if (!strcmp(enc.blob[b].role, "idx.1")) memset((uint8_t *)enc.blob[b].data + 7 * 16, 0xff, 16); // row 7 onwards
            const int bad = kvq_qet_pack_pqx(enc.params, v, enc.n_blob, n, gd[i], &p, &e);
            if (bad != KVQ_ERR_FORMAT) print_message("k = %lld: all-ones indices may be in range\n", (long long)p.k[0]);
            else assert_null(p.sw);
            if (bad == KVQ_OK) kvq_pqx_free(&p);
        }
        kvq_encoded_free(&enc);
    }
    // the default QET: an index past k in row 5 is refused, naming the row
    cfg = kvq_qet_config_default(0);
    cfg.k_fixed[0] = 5, cfg.k_fixed[1] = 3;
    assert_int_equal(kvq_qet_encode(&cfg, KVQ_DTYPE_BF16, x, n, d, 1, 1, &enc, &e), KVQ_OK);
    views(&enc, v);
    for (int i = 0; i < enc.n_blob; i++)
        if (!strcmp(enc.blob[i].role, "idx.1")) ((uint8_t *)enc.blob[i].data)[(5 * 16 * 3) / 8] |= 0x7; // row 5, subspace 0
    assert_int_equal(kvq_qet_pack_pqx(enc.params, v, enc.n_blob, n, d, &p, &e), KVQ_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "row 5"));
    assert_null(p.sw);
    kvq_encoded_free(&enc);
    // an index past k (k = 5 leaves values 5..7 of 3-bit fields unused): refused, naming the row
    cfg = kvq_qet_config_pq(0);
    cfg.k_fixed[0] = 5;
    assert_int_equal(kvq_qet_encode(&cfg, KVQ_DTYPE_BF16, x, n, d, 1, 1, &enc, &e), KVQ_OK);
    views(&enc, v);
    for (int i = 0; i < enc.n_blob; i++)
        if (!strcmp(enc.blob[i].role, "idx.1")) ((uint8_t *)enc.blob[i].data)[(3 * 16 * 3) / 8] |= 0x7; // row 3, subspace 0: bits 144..146
    assert_int_equal(kvq_qet_pack_pqx(enc.params, v, enc.n_blob, n, d, &p, &e), KVQ_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "row 3"));
    assert_null(p.idx[0]);
    // a blob of the wrong size: the codec's own check refuses it first
    v[0].size--;
    assert_int_not_equal(kvq_qet_pack_pqx(enc.params, v, enc.n_blob, n, d, &p, &e), KVQ_OK);
    kvq_encoded_free(&enc);
    free(x);
}

// ---- fast paths against the reference (bit for bit)

typedef struct {
    int64_t rows, cols;
    int w, stages, cb_type;
    int64_t k[2];
    int cbits; // CQO code bits (0: 10 bits)
} shape;

static const shape shapes[] = {
    {37, 64, 8, 1, 0, {50, 0}, 0},     {64, 128, 8, 1, 0, {256, 0}, 0}, {24, 64, 8, 1, 1, {257, 0}, 0},
    {100, 96, 4, 2, 0, {13, 300}, 0},  {8, 8, 8, 1, 0, {1, 0}, 0},      {61, 160, 16, 2, 1, {9, 7}, 0},
    {17, 40, 1, 1, 0, {3, 0}, 0},      {256, 512, 8, 1, 0, {100, 0}, 0}, {45, 96, 8, 2, 2, {37, 11}, 0},
    {64, 64, 4, 1, 2, {300, 0}, 0},
    // tables over the chunk budget (256 KB): stage 1's one-token table (64 · 4 · 1100 bytes)
    // is read in two chunks, the batched tables (8 · 4 · 1700 bytes a subspace) in many
    {40, 512, 8, 2, 0, {1100, 600}, 0},
    // lane-packed indices (kvq_pqx_pack_lanes): 5 bits (k/v projections),
    // 11 bits, 1 bit with 128 fields a row, 9 bits with m not a multiple of a group
    {48, 512, 8, 1, 0, {26, 0}, 0},    {24, 512, 8, 1, 0, {1343, 0}, 0}, {24, 96, 1, 1, 0, {2, 0}, 0},
    {33, 184, 8, 2, 1, {367, 20}, 0},
    // split indices (kvq_pqx_split_wide): every width 9..12 at its edges k = 2^b and 2^b + 1,
    // padded rows (rows % 8 != 0), a split stage 2 after a byte stage 1, two split stages, CQO
    // codebooks; k = 4097 (13 bits) stays uint16
    {41, 64, 8, 1, 0, {512, 0}, 0},    {19, 64, 8, 1, 0, {513, 0}, 0},  {8, 32, 8, 1, 0, {1024, 0}, 0},
    {27, 48, 8, 1, 0, {1025, 0}, 0},   {13, 32, 8, 1, 1, {2048, 0}, 0}, {9, 24, 8, 1, 0, {2049, 0}, 0},
    {17, 16, 8, 1, 0, {4096, 0}, 0},   {11, 16, 8, 1, 0, {4097, 0}, 0}, {35, 72, 8, 2, 0, {200, 1500}, 0},
    {26, 64, 4, 2, 2, {700, 257}, 0},
    // split CQO codes (kvq_pqx_split_codes) of 1, 8, 9, 12, 15 bits (10 above); k not a multiple
    // of 8 (the table build's tail), w = 1, 4, 16; 16 bits stay uint16
    {16, 64, 8, 1, 2, {13, 0}, 1},  {24, 64, 4, 2, 2, {37, 5}, 8}, {16, 96, 8, 1, 2, {99, 0}, 9},
    {9, 64, 16, 2, 2, {300, 21}, 12}, {17, 40, 1, 1, 2, {61, 0}, 15}, {16, 64, 8, 1, 2, {50, 0}, 16},
    // f16 codebooks (an f16 source), widened exactly by the tables
    {40, 64, 4, 1, 3, {11, 0}, 0},     {64, 256, 8, 2, 3, {300, 26}, 0},
};

// A deep copy of p with its indices re-laid: form 0 lane-packed where that is smaller, uint16
// stages too (kvq_pqx_pack_lanes(o, 1)); 1: uint16 stages split (kvq_pqx_split_wide) and CQO codes
// held at their width (kvq_pqx_split_codes); 2: as the loader holds them (byte stages lane-packed,
// then the splits of form 1).
static void clone_packed(const kvq_pqx *p, kvq_pqx *o, int form) {
    *o = *p;
    for (int s = 0; s < p->stages; s++) {
        o->idx[s] = kvq_hqx_alloc(kvq_pqx_idx_bytes(p, s));
        memcpy(o->idx[s], p->idx[s], kvq_pqx_idx_bytes(p, s));
        o->cb[s] = kvq_hqx_alloc(kvq_pqx_cb_bytes(p, s));
        memcpy(o->cb[s], p->cb[s], kvq_pqx_cb_bytes(p, s));
        if (p->cb_ms[s]) {
            o->cb_ms[s] = kvq_hqx_alloc(8 * (size_t)p->m);
            memcpy(o->cb_ms[s], p->cb_ms[s], 8 * (size_t)p->m);
        }
    }
    if (form != 1) assert_int_equal(kvq_pqx_pack_lanes(o, form == 0), 0);
    if (form != 0) assert_int_equal(kvq_pqx_split_wide(o), 0);
    if (form != 0) assert_int_equal(kvq_pqx_split_codes(o), 0);
}

// The threaded driver (kvq_pqx_matmul) over three blocks of p (a fused q/k/v), 1 and 2 threads,
// 1 and T tokens: every block's rows equal y1 (the single-block product of the T tokens x).
static void check_threaded_driver(const kvq_pqx *p, const float *x, const float *y1, int64_t rows, int T) {
    kvq_pqx parts[3] = {*p, *p, *p};
    const int row0[3] = {0, (int)rows, 2 * (int)rows};
    float *sc = malloc(sizeof(float) * kvq_pqx_scratch(parts, 3));
    float *y3 = malloc(sizeof(float) * (size_t)(T * 3 * rows));
    for (int nt = 1; nt <= 2; nt++)
        for (int tt = 1; tt <= T; tt += T - 1) {
            memset(y3, 0, sizeof(float) * (size_t)(T * 3 * rows));
            kvq_pqx_matmul(parts, 3, row0, x, tt, y3, 3 * rows, sc, KVQ_PQX_ISA_AUTO, nt);
            for (int t = 0; t < tt; t++)
                for (int b = 0; b < 3; b++)
                    assert_memory_equal(y3 + t * 3 * rows + b * rows, y1 + t * rows, sizeof(float) * (size_t)rows);
        }
    free(sc); free(y3);
}

static void test_fast_paths_equal_reference(void **st) {
    (void)st;
    if (kvq_pqx_isa_best() != KVQ_PQX_ISA_AVX2) printf("  note: no AVX2 on this CPU: AUTO is the reference\n");
    uint64_t s = 99;
    int n_packed = 0, n_split = 0, n_codes = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *sh = &shapes[si];
        kvq_pqx p;
        rand_pqx(&p, sh->rows, sh->cols, sh->w, sh->stages, sh->k, sh->cb_type, sh->cbits, &s);
        const size_t nl = kvq_pqx_lut_floats(&p);
        const int T = 13;
        float *x = randvec(T * sh->cols, &s);
        float *l1 = malloc(sizeof(float) * nl), *l2 = malloc(sizeof(float) * nl);
        float *y1 = malloc(sizeof(float) * (size_t)(T * sh->rows)), *y2 = malloc(sizeof(float) * (size_t)(T * sh->rows));
        float *b1 = malloc(sizeof(float) * nl * KVQ_PQX_TB), *b2 = malloc(sizeof(float) * nl * KVQ_PQX_TB);
        float *yb = malloc(sizeof(float) * (size_t)(T * sh->rows));
        // one token: tables (whole and in two subspace ranges) and products, per token
        for (int t = 0; t < T; t++) {
            const float *xt = x + t * sh->cols;
            kvq_pqx_lut(&p, xt, l1, 0, p.m, KVQ_PQX_ISA_REF);
            kvq_pqx_lut(&p, xt, l2, 0, p.m / 2, KVQ_PQX_ISA_AVX2);
            kvq_pqx_lut(&p, xt, l2, p.m / 2, p.m, KVQ_PQX_ISA_AVX2);
            assert_memory_equal(l1, l2, sizeof(float) * nl);
            kvq_pqx_matvec_rows(&p, l1, y1 + t * sh->rows, 0, sh->rows, KVQ_PQX_ISA_REF);
            kvq_pqx_matvec_rows(&p, l1, y2 + t * sh->rows, 0, 8 * ((sh->rows / 2) / 8), KVQ_PQX_ISA_AVX2);
            kvq_pqx_matvec_rows(&p, l1, y2 + t * sh->rows, 8 * ((sh->rows / 2) / 8), sh->rows, KVQ_PQX_ISA_AVX2);
        }
        assert_memory_equal(y1, y2, sizeof(float) * (size_t)(T * sh->rows));
        // batched: tables of n <= 8 tokens and products equal the one-token ones, both paths
        for (int n = 1; n <= KVQ_PQX_TB; n += n < 3 ? 1 : 4) {
            kvq_pqx_lutb(&p, x, n, sh->cols, b1, 0, p.m, KVQ_PQX_ISA_REF);
            kvq_pqx_lutb(&p, x, n, sh->cols, b2, 0, p.m, KVQ_PQX_ISA_AVX2);
            for (size_t e = 0; e < nl; e++)
                for (int t = 0; t < n; t++) assert_memory_equal(&b1[e * 8 + t], &b2[e * 8 + t], sizeof(float));
            for (int isa = KVQ_PQX_ISA_REF; isa <= KVQ_PQX_ISA_AVX2; isa++) {
                memset(yb, 0, sizeof(float) * (size_t)(T * sh->rows));
                kvq_pqx_gemm_rows(&p, isa == KVQ_PQX_ISA_REF ? b1 : b2, n, yb, sh->rows, 0, sh->rows, (kvq_pqx_isa)isa);
                assert_memory_equal(yb, y1, sizeof(float) * (size_t)(n * sh->rows));
            }
        }
        check_threaded_driver(&p, x, y1, sh->rows, T);
        // lane-packed and split indices: the same indices, rows and products, bit for bit, on every path
        for (int form = 0; form < 3; form++) {
        kvq_pqx q;
        clone_packed(&p, &q, form);
        int packed = q.cbq_bits > 0;
        // forms 1 and 2 hold CQO codes of 1..15 bits at their width, every stage
        assert_int_equal(q.cbq_bits, form > 0 && p.cb_type == KVQ_PQX_CB_CQO && p.cb_bits <= 15 ? p.cb_bits : 0);
        if (q.cbq_bits) {
            n_codes++;
            for (int k = 0; k < p.stages; k++) {
                const size_t n8 = (size_t)(p.m * p.w) * (size_t)((p.k[k] + 7) / 8 * 8); // k rounded up to 8
                // max(B, 8) bits a code: codes below 8 bits are held as bytes
                assert_int_equal(kvq_pqx_cb_bytes(&q, k), q.cbq_bits > 8 ? n8 * (size_t)q.cbq_bits / 8 + KVQ_PQX_CB_HI_PAD : n8);
                for (int64_t j = 0; j < p.m; j++)
                    for (int qq = 0; qq < p.w; qq++)
                        for (int64_t c = 0; c < p.k[k]; c++) {
                            const float a = kvq_pqx_cb(&p, k, j, qq, c), b = kvq_pqx_cb(&q, k, j, qq, c);
                            assert_memory_equal(&a, &b, sizeof a);
                        }
            }
        }
        for (int k = 0; k < p.stages; k++) {
            packed += q.pbits[k] > 0 || q.hbits[k] > 0;
            if (q.hbits[k]) { // exactly ⌈log2 k⌉ bits a held index (+ the hi array's padding)
                int b = 0;
                while ((1 << b) < p.k[k]) b++;
                assert_int_equal(q.hbits[k], b - 8);
                assert_int_equal(kvq_pqx_idx_bits(&q, k), b);
                assert_int_equal(kvq_pqx_idx_bytes(&q, k), (size_t)(q.rows_p * q.m) * (size_t)b / 8 + KVQ_PQX_HI_PAD);
                n_split++;
            }
            // forms 1 and 2 split exactly the stages of k = 257..4096; form 0 none
            assert_int_equal(q.hbits[k] > 0, form > 0 && p.k[k] > 256 && p.k[k] <= 4096);
            assert_true(kvq_pqx_idx_bytes(&q, k) <= kvq_pqx_idx_bytes(&p, k));
            for (int64_t r = 0; r < q.rows_p; r++)
                for (int64_t j = 0; j < p.m; j++) assert_int_equal(kvq_pqx_idx(&q, k, r, j), kvq_pqx_idx(&p, k, r, j));
        }
        if (packed) {
            n_packed++;
            for (int t = 0; t < T; t++) {
                kvq_pqx_lut(&q, x + t * sh->cols, l1, 0, q.m, KVQ_PQX_ISA_AVX2);
                kvq_pqx_lut(&q, x + t * sh->cols, l2, 0, q.m, KVQ_PQX_ISA_REF);
                assert_memory_equal(l1, l2, sizeof(float) * nl);
                for (int isa = KVQ_PQX_ISA_REF; isa <= KVQ_PQX_ISA_AVX2; isa++) {
                    memset(y2, 0xff, sizeof(float) * (size_t)sh->rows);
                    kvq_pqx_matvec_rows(&q, l1, y2, 0, 8 * ((sh->rows / 2) / 8), (kvq_pqx_isa)isa);
                    kvq_pqx_matvec_rows(&q, l1, y2, 8 * ((sh->rows / 2) / 8), sh->rows, (kvq_pqx_isa)isa);
                    assert_memory_equal(y2, y1 + t * sh->rows, sizeof(float) * (size_t)sh->rows);
                }
            }
            for (int n = 1; n <= KVQ_PQX_TB; n += 7) {
                kvq_pqx_lutb(&q, x, n, sh->cols, b2, 0, q.m, KVQ_PQX_ISA_AVX2);
                for (int isa = KVQ_PQX_ISA_REF; isa <= KVQ_PQX_ISA_AVX2; isa++) {
                    memset(yb, 0, sizeof(float) * (size_t)(T * sh->rows));
                    kvq_pqx_gemm_rows(&q, b2, n, yb, sh->rows, 0, sh->rows, (kvq_pqx_isa)isa);
                    assert_memory_equal(yb, y1, sizeof(float) * (size_t)(n * sh->rows));
                }
            }
            check_threaded_driver(&q, x, y1, sh->rows, T);
            float *ra = malloc(sizeof(float) * (size_t)sh->cols), *rq = malloc(sizeof(float) * (size_t)sh->cols);
            for (int64_t r = 0; r < sh->rows; r++) {
                kvq_pqx_row_f32(&p, r, ra);
                kvq_pqx_row_f32(&q, r, rq);
                assert_memory_equal(ra, rq, sizeof(float) * (size_t)sh->cols);
            }
            free(ra); free(rq);
        }
        kvq_pqx_free(&q);
        }
        free(x); free(l1); free(l2); free(y1); free(y2); free(b1); free(b2); free(yb);
        kvq_pqx_free(&p);
    }
    printf("  (%d re-laid copies of %zu random layouts, %d split index stages, %d with split CQO codes, every path "
           "equal to the unpacked reference)\n", n_packed, sizeof shapes / sizeof shapes[0], n_split, n_codes);
    assert_true(n_packed >= 6);
    assert_true(n_split >= 20);
    assert_true(n_codes >= 12);
}

// ---- the packed product against the exact product of the decoded weights

// The packed product sums, per output, w products per table entry and stages·m entries; its
// difference from the exact (double) value of Σ_s Σ_j c_s·x is at most γ_N · Σ |c_s|·|x| with
// N = w + stages·m (classical float summation bound, γ_N = N·u / (1 − N·u), u = 2^-24). The
// decoded model's dense product (stage sums rounded first, then its own order) has the same
// kind of bound with N = cols + stages. Both are checked, and the largest relative error seen
// (against Σ |c||x|) is printed.
static void test_packed_vs_decoded_product(void **st) {
    (void)st;
    uint64_t s = 5;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *sh = &shapes[si];
        kvq_pqx p;
        rand_pqx(&p, sh->rows, sh->cols, sh->w, sh->stages, sh->k, sh->cb_type, sh->cbits, &s);
        float *x = randvec(sh->cols, &s), *lut = malloc(sizeof(float) * kvq_pqx_lut_floats(&p));
        float *y = malloc(sizeof(float) * (size_t)sh->rows), *yd = malloc(sizeof(float) * (size_t)sh->rows);
        float *W = malloc(sizeof(float) * (size_t)(sh->rows * sh->cols));
        for (int64_t r = 0; r < sh->rows; r++) kvq_pqx_row_f32(&p, r, W + r * sh->cols);
        kvq_pqx_lut(&p, x, lut, 0, p.m, KVQ_PQX_ISA_AUTO);
        kvq_pqx_matvec_rows(&p, lut, y, 0, sh->rows, KVQ_PQX_ISA_AUTO);
        kvq_matmul_ref(yd, x, W, KVQ_DTYPE_F32, 1, (int)sh->cols, (int)sh->rows);
        const double u = 0x1.0p-24;
        const double n1 = sh->w + sh->stages * p.m, n2 = sh->cols + sh->stages;
        const double g1 = n1 * u / (1 - n1 * u), g2 = n2 * u / (1 - n2 * u);
        double worst = 0;
        for (int64_t r = 0; r < sh->rows; r++) {
            double exact = 0, mag = 0;
            for (int64_t j = 0; j < p.m; j++)
                for (int q = 0; q < sh->w; q++)
                    for (int k = 0; k < sh->stages; k++) {
                        double c = kvq_pqx_cb(&p, k, j, q, kvq_pqx_idx(&p, k, r, j)), xv = x[j * sh->w + q];
                        exact += c * xv;
                        mag += fabs(c * xv);
                    }
            assert_true(fabs(y[r] - exact) <= g1 * mag);
            assert_true(fabs(yd[r] - exact) <= g2 * mag);
            if (mag > 0 && fabs(y[r] - yd[r]) / mag > worst) worst = fabs(y[r] - yd[r]) / mag;
        }
        printf("  %3lld x %-3lld w %-2d r %d: |packed - decoded| <= %.2g · Σ|c·x| (bound %.2g)\n", (long long)sh->rows,
               (long long)sh->cols, sh->w, sh->stages, worst, g1 + g2);
        free(x); free(lut); free(y); free(yd); free(W);
        kvq_pqx_free(&p);
    }
}

// The decoded-prefill path (kvq_model_opts.prefill_decoded, kvq-verify): rows decoded in blocks
// of 128 and multiplied by the dense fp32 kernel: within the dense kernel's float bound of the
// product of the decoded rows, for a matrix of more than one block and a token count that is
// not a multiple of the kernel's tiles.
static void test_matmul_dense(void **st) {
    (void)st;
    uint64_t s = 17;
    const int64_t k[2] = {300, 20};
    kvq_pqx p;
    rand_pqx(&p, 300, 128, 8, 2, k, KVQ_PQX_CB_BF16, 0, &s);
    const int T = 70;
    float *x = randvec(T * 128, &s), *y = malloc(sizeof(float) * T * 300), *yr = malloc(sizeof(float) * T * 300);
    float *W = malloc(sizeof(float) * 300 * 128), *sc = malloc(sizeof(float) * kvq_pqx_dense_scratch(&p, T));
    for (int64_t r = 0; r < 300; r++) kvq_pqx_row_f32(&p, r, W + r * 128);
    kvq_pqx_matmul_dense(&p, x, T, y, 300, sc, 2);
    kvq_matmul_ref(yr, x, W, KVQ_DTYPE_F32, T, 128, 300);
    const double g = 2 * 130 * 0x1.0p-24;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < 300; r++) {
            double mag = 0;
            for (int j = 0; j < 128; j++) mag += fabs((double)W[r * 128 + j] * x[t * 128 + j]);
            assert_true(fabs((double)y[t * 300 + r] - yr[t * 300 + r]) <= g * mag);
        }
    free(x); free(y); free(yr); free(W); free(sc);
    kvq_pqx_free(&p);
}

// ---- QET layouts (qetx): fast paths against the reference, and against the decoded weights

static const qshape qshapes[] = {
    {37, 64, 2, KVQ_PQX_CB_CQO, 10, {50, 12}},  {64, 128, 1, KVQ_PQX_CB_BF16, 0, {256, 0}},
    {24, 192, 2, KVQ_PQX_CB_F32, 0, {300, 16}}, {9, 64, 2, KVQ_PQX_CB_CQO, 24, {1, 17}},
    {128, 512, 2, KVQ_PQX_CB_CQO, 10, {15, 4}}, {70, 256, 2, KVQ_PQX_CB_CQO, 7, {122, 9}},
    {33, 128, 2, KVQ_PQX_CB_CQO, 13, {20, 3}},  {16, 64, 1, KVQ_PQX_CB_CQO, 16, {40, 0}},
};

static void test_qetx_fast_paths_equal_reference(void **st) {
    (void)st;
    uint64_t s = 123;
    for (size_t si = 0; si < sizeof qshapes / sizeof qshapes[0]; si++) {
        const qshape *sh = &qshapes[si];
        kvq_pqx p;
        rand_qetx(&p, sh->rows, sh->cols, sh->stages, sh->k, sh->cb_type, sh->cb_bits, &s);
        const size_t ne = kvq_qetx_expand_floats(&p);
        const int T = 13;
        float *x = randvec(T * sh->cols, &s), *e1 = malloc(sizeof(float) * ne), *e2 = malloc(sizeof(float) * ne);
        float *y1 = calloc((size_t)(T * sh->rows), sizeof(float)), *y2 = calloc((size_t)(T * sh->rows), sizeof(float));
        // expanded codebooks: AVX2 (in two slot ranges) equals the reference equals kvq_qetx_cb
        kvq_qetx_expand(&p, e1, 0, p.m, KVQ_PQX_ISA_REF);
        kvq_qetx_expand(&p, e2, 0, p.m / 3, KVQ_PQX_ISA_AVX2);
        kvq_qetx_expand(&p, e2, p.m / 3, p.m, KVQ_PQX_ISA_AVX2);
        assert_memory_equal(e1, e2, sizeof(float) * ne);
        const int64_t sl = p.m - 1, c = p.k[0] - 1;
        const float want = kvq_qetx_cb(&p, 0, sl / 8 + (sl % 8) * p.groups, c, 5);
        assert_memory_equal(&e1[(sl * p.k[0] + c) * 8 + 5], &want, sizeof(float));
        // one token per call (reference, AVX2 in two row ranges), then batches of n tokens
        for (int t = 0; t < T; t++) {
            kvq_qetx_gemm_rows(&p, e1, x + t * sh->cols, 1, sh->cols, y1 + t * sh->rows, 1, 0, sh->rows, KVQ_PQX_ISA_REF);
            kvq_qetx_gemm_rows(&p, e1, x + t * sh->cols, 1, sh->cols, y2 + t * sh->rows, 1, 0, sh->rows / 2, KVQ_PQX_ISA_AVX2);
            kvq_qetx_gemm_rows(&p, e1, x + t * sh->cols, 1, sh->cols, y2 + t * sh->rows, 1, sh->rows / 2, sh->rows,
                               KVQ_PQX_ISA_AVX2);
        }
        assert_memory_equal(y1, y2, sizeof(float) * (size_t)(T * sh->rows));
        for (int n = 2; n <= T; n += 5)
            for (int isa = KVQ_PQX_ISA_REF; isa <= KVQ_PQX_ISA_AVX2; isa++) {
                memset(y2, 0, sizeof(float) * (size_t)(T * sh->rows));
                kvq_qetx_gemm_rows(&p, e1, x, n, sh->cols, y2, sh->rows, 0, sh->rows, (kvq_pqx_isa)isa);
                assert_memory_equal(y1, y2, sizeof(float) * (size_t)(n * sh->rows));
            }
        check_threaded_driver(&p, x, y1, sh->rows, T);
        free(x); free(e1); free(e2); free(y1); free(y2);
        kvq_pqx_free(&p);
    }
}

// The packed QET product sums each output in two chains of D/2 fused multiply-adds (D = cols/8
// blocks), one add and a 3-level tree: |y − Σ W·x| <= γ_N Σ|W·x| with N = D/2 + 4 against the
// exact (double) product of the decoded weights (kvq_pqx_row_f32, the decoder's floats); the
// dense kernel on the decoded rows has N = cols. Both are checked; the largest relative
// difference between them (against Σ|W·x|) is printed.
static void test_qetx_packed_vs_decoded_product(void **st) {
    (void)st;
    uint64_t s = 55;
    for (size_t si = 0; si < sizeof qshapes / sizeof qshapes[0]; si++) {
        const qshape *sh = &qshapes[si];
        kvq_pqx p;
        rand_qetx(&p, sh->rows, sh->cols, sh->stages, sh->k, sh->cb_type, sh->cb_bits, &s);
        float *x = randvec(sh->cols, &s), *sc = malloc(sizeof(float) * kvq_pqx_scratch(&p, 1));
        float *y = malloc(sizeof(float) * (size_t)sh->rows), *yd = malloc(sizeof(float) * (size_t)sh->rows);
        float *W = malloc(sizeof(float) * (size_t)(sh->rows * sh->cols));
        for (int64_t r = 0; r < sh->rows; r++) kvq_pqx_row_f32(&p, r, W + r * sh->cols);
        const int row0 = 0;
        kvq_pqx_matmul(&p, 1, &row0, x, 1, y, sh->rows, sc, KVQ_PQX_ISA_AUTO, 1);
        kvq_matmul_ref(yd, x, W, KVQ_DTYPE_F32, 1, (int)sh->cols, (int)sh->rows);
        const double u = 0x1.0p-24, n1 = (double)sh->cols / 16 + 4, n2 = (double)sh->cols;
        const double g1 = n1 * u / (1 - n1 * u), g2 = n2 * u / (1 - n2 * u);
        double worst = 0;
        for (int64_t r = 0; r < sh->rows; r++) {
            double exact = 0, mag = 0;
            for (int64_t j = 0; j < sh->cols; j++) {
                exact += (double)W[r * sh->cols + j] * x[j];
                mag += fabs((double)W[r * sh->cols + j] * x[j]);
            }
            assert_true(fabs(y[r] - exact) <= g1 * mag);
            assert_true(fabs(yd[r] - exact) <= g2 * mag);
            if (mag > 0 && fabs(y[r] - yd[r]) / mag > worst) worst = fabs(y[r] - yd[r]) / mag;
        }
        printf("  qet %3lld x %-3lld r %d: |packed - decoded| <= %.2g · Σ|w·x| (bound %.2g)\n", (long long)sh->rows,
               (long long)sh->cols, sh->stages, worst, g1 + g2);
        free(x); free(sc); free(y); free(yd); free(W);
        kvq_pqx_free(&p);
    }
}

// ---- general QET layouts (qetg): every (levels, width), fast paths against the reference

typedef struct {
    int64_t rows, cols;
    int levels, w, stages, cb_type, cb_bits;
    int64_t k[2];
} gshape;

static const gshape gshapes[] = {
    {37, 128, 2, 8, 2, KVQ_PQX_CB_CQO, 10, {50, 12}},  {64, 128, 3, 4, 2, KVQ_PQX_CB_CQO, 10, {15, 4}},
    {24, 96, 3, 8, 2, KVQ_PQX_CB_BF16, 0, {300, 16}},  {9, 64, 1, 8, 1, KVQ_PQX_CB_F32, 0, {40, 0}},
    {40, 256, 5, 16, 2, KVQ_PQX_CB_CQO, 24, {1, 17}},  {33, 80, 4, 4, 2, KVQ_PQX_CB_F16, 0, {20, 3}},
    {16, 512, 2, 2, 1, KVQ_PQX_CB_CQO, 7, {122, 0}},   {20, 48, 4, 3, 2, KVQ_PQX_CB_CQO, 13, {9, 5}},
    {70, 1408, 2, 8, 2, KVQ_PQX_CB_CQO, 10, {122, 17}},
};

// kvq_qetg_rows (reference, AVX2 in two row ranges, batches of 1..13 tokens) and the threaded
// driver give the same bits; the expansion equals kvq_qetg_cb; the reference's rows equal
// kvq_qetg_row_f32 (a different method: each column's X* position, no swap buffer) bit for bit
// (checked through a one-hot token per column block); the product is within the float bound of
// the exact product of kvq_qetg_row_f32's rows.
static void test_qetg_fast_paths_equal_reference(void **st) {
    (void)st;
    uint64_t s = 321;
    for (size_t si = 0; si < sizeof gshapes / sizeof gshapes[0]; si++) {
        const gshape *sh = &gshapes[si];
        kvq_pqx p;
        rand_qetg(&p, sh->rows, sh->cols, sh->levels, sh->w, sh->stages, sh->k, sh->cb_type, sh->cb_bits, &s);
        const size_t ne = kvq_qetg_expand_floats(&p);
        const int T = 13;
        float *x = randvec(T * sh->cols, &s), *e1 = malloc(sizeof(float) * ne), *buf = malloc(sizeof(float) * kvq_qetg_buf_floats(&p));
        float *y1 = calloc((size_t)(T * sh->rows), sizeof(float)), *y2 = calloc((size_t)(T * sh->rows), sizeof(float));
        kvq_qetg_expand(&p, e1, 0, p.m / 3);
        kvq_qetg_expand(&p, e1, p.m / 3, p.m);
        const int64_t j = p.m - 1, c = p.k[0] - 1;
        const float want = kvq_qetg_cb(&p, 0, j, c, sh->w - 1);
        assert_memory_equal(&e1[(j * p.k[0] + c) * sh->w + sh->w - 1], &want, sizeof(float));
        for (int t = 0; t < T; t++) {
            kvq_qetg_rows(&p, e1, x + t * sh->cols, 1, sh->cols, y1 + t * sh->rows, 1, 0, sh->rows, buf, KVQ_PQX_ISA_REF);
            kvq_qetg_rows(&p, e1, x + t * sh->cols, 1, sh->cols, y2 + t * sh->rows, 1, 0, sh->rows / 2, buf, KVQ_PQX_ISA_AVX2);
            kvq_qetg_rows(&p, e1, x + t * sh->cols, 1, sh->cols, y2 + t * sh->rows, 1, sh->rows / 2, sh->rows, buf,
                          KVQ_PQX_ISA_AVX2);
        }
        if (memcmp(y1, y2, sizeof(float) * (size_t)(T * sh->rows)))
            fail_msg("qetg %lld x %lld l=%d w=%d: AVX2 differs from the reference", (long long)sh->rows, (long long)sh->cols,
                     sh->levels, sh->w);
        for (int n = 2; n <= T; n += 5)
            for (int isa = KVQ_PQX_ISA_REF; isa <= KVQ_PQX_ISA_AVX2; isa++) {
                memset(y2, 0, sizeof(float) * (size_t)(T * sh->rows));
                kvq_qetg_rows(&p, e1, x, n, sh->cols, y2, sh->rows, 0, sh->rows, buf, (kvq_pqx_isa)isa);
                assert_memory_equal(y1, y2, sizeof(float) * (size_t)(n * sh->rows));
            }
        check_threaded_driver(&p, x, y1, sh->rows, T);
        // the weights: one-hot tokens read column c of every row from the product (exact: one
        // nonzero term, the rest exact zeros), against kvq_qetg_row_f32
        float *W = malloc(sizeof(float) * (size_t)(sh->rows * sh->cols)), *oh = calloc((size_t)sh->cols, sizeof(float));
        float *yc = malloc(sizeof(float) * (size_t)sh->rows);
        for (int64_t r = 0; r < sh->rows; r++) kvq_pqx_row_f32(&p, r, W + r * sh->cols);
        for (int64_t cc = 0; cc < sh->cols; cc += 1 + sh->cols / 17) {
            oh[cc] = 1;
            kvq_qetg_rows(&p, e1, oh, 1, sh->cols, yc, 1, 0, sh->rows, buf, KVQ_PQX_ISA_AVX2);
            for (int64_t r = 0; r < sh->rows; r++)
                if (memcmp(&yc[r], &W[r * sh->cols + cc], sizeof(float)))
                    fail_msg("qetg l=%d w=%d row %lld column %lld: product reads %g, row_f32 %g", sh->levels, sh->w, (long long)r,
                             (long long)cc, yc[r], W[r * sh->cols + cc]);
            oh[cc] = 0;
        }
        const double u = 0x1.0p-24, N = (double)sh->cols / 16 + 8, g = N * u / (1 - N * u);
        for (int t = 0; t < T; t++)
            for (int64_t r = 0; r < sh->rows; r++) {
                double exact = 0, mag = 0;
                for (int64_t cc = 0; cc < sh->cols; cc++) {
                    exact += (double)W[r * sh->cols + cc] * x[t * sh->cols + cc];
                    mag += fabs((double)W[r * sh->cols + cc] * x[t * sh->cols + cc]);
                }
                assert_true(fabs(y1[t * sh->rows + r] - exact) <= g * mag);
            }
        free(x); free(e1); free(buf); free(y1); free(y2); free(W); free(oh); free(yc);
        kvq_pqx_free(&p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_matches_decoder),
        cmocka_unit_test(test_pack_refusals),
        cmocka_unit_test(test_fast_paths_equal_reference),
        cmocka_unit_test(test_packed_vs_decoded_product),
        cmocka_unit_test(test_matmul_dense),
        cmocka_unit_test(test_qetx_fast_paths_equal_reference),
        cmocka_unit_test(test_qetx_packed_vs_decoded_product),
        cmocka_unit_test(test_qetg_fast_paths_equal_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
