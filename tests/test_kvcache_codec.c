// Tests of the codec-backed runtime KV cache (libconv/kv/kvcache_codec.c) through the
// kvq_kvcache ops: attention against exact attention computed here, against the same
// codec run standalone, window and boundary policies, KIVI's incomplete key group,
// truncation, and the effective-bits accounting.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "formats/dtype.h"
#include "formats/kvqfile.h"
#include "libconv/kv/kvcache_default.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/kv/kvsynth.h"

enum { L = 3, H = 2, D = 64, T = 80, NQ = 9 }; // NQ > 8: attend takes queries 8 at a time

static void gauss(float *x, size_t n, uint64_t seed) {
    kvq_kvrng r = {seed};
    for (size_t i = 0; i < n; i++) x[i] = (float)kvq_kvrng_normal(&r);
}

static float r16(float f) { return kvq_f16_to_f32(kvq_f32_to_f16(f)); }

// softmax(q·Kᵀ·scale)·V for rows [0, n) given scores s (n) and V (n, D)
static void attend_ref(const float *s_in, const float *v, int n, float scale, float *out) {
    float s[T], m = -INFINITY, z = 0;
    for (int t = 0; t < n; t++) s[t] = s_in[t] * scale, m = fmaxf(m, s[t]);
    for (int t = 0; t < n; t++) s[t] = expf(s[t] - m), z += s[t];
    memset(out, 0, sizeof(float) * D);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < D; j++) out[j] += s[t] / z * v[t * D + j];
}

static kvq_kvcache *mkcache(const char *spec, int window, int boundary) {
    kvq_kvcache *c = NULL;
    kvq_err e = {0};
    kvq_kvcache_policy p = {window, boundary, 42, 0, 0};
    if (kvq_kvcache_codec_new(spec, L, H, D, T, &p, &c, &e)) fail_msg("%s: %s", spec, e.msg);
    return c;
}

// k, v: (T, L, H, D)
static float *kk, *vv, *qq;

static void fill(kvq_kvcache *c, int from, int to) {
    for (int t = from; t < to; t++)
        for (int l = 0; l < L; l++)
            assert_int_equal(c->ops->append(c, l, t, kk + ((size_t)t * L + l) * H * D, vv + ((size_t)t * L + l) * H * D), KVQ_OK);
}

static int setup(void **st) {
    kk = malloc(sizeof(float) * T * L * H * D);
    vv = malloc(sizeof(float) * T * L * H * D);
    qq = malloc(sizeof(float) * NQ * D);
    gauss(kk, (size_t)T * L * H * D, 1);
    gauss(vv, (size_t)T * L * H * D, 2);
    gauss(qq, NQ * D, 3);
    return 0;
}
static int teardown(void **st) {
    free(kk), free(vv), free(qq);
    return 0;
}

// The expected attention for (layer, head) at n_ctx: the codec run standalone on the
// tokens that left the window, fp16 for the rest, scores through score() when the
// cache would use it.
static void expected(const char *spec, int window, int boundary, int l, int h, int n, float *out) {
    kvq_kvspec sp;
    kvq_kvspec_parse(boundary && (l == 0 || l == L - 1) ? "fp16" : spec, &sp, NULL);
    kvq_kvspec vsp;
    kvq_kvspec_parse(spec, &vsp, NULL);
    kvq_kvcodec *ck, *cv;
    assert_int_equal(kvq_kvcodec_new(&sp, D, KVQ_KV_K, kvq_kv_seed(42, l, h, 0), &ck, NULL), KVQ_OK);
    assert_int_equal(kvq_kvcodec_new(&vsp, D, KVQ_KV_V, kvq_kv_seed(42, l, h, 1), &cv, NULL), KVQ_OK);
    float K[T * D], V[T * D], Kd[T * D], Vd[T * D], s[T];
    for (int t = 0; t < n; t++)
        for (int j = 0; j < D; j++) {
            K[t * D + j] = r16(kk[(((size_t)t * L + l) * H + h) * D + j]);
            V[t * D + j] = r16(vv[(((size_t)t * L + l) * H + h) * D + j]);
        }
    memcpy(Kd, K, sizeof K), memcpy(Vd, V, sizeof V);
    int nek = n > window ? (n - window) / ck->group * ck->group : 0;
    int nev = n > window ? (n - window) / cv->group * cv->group : 0;
    uint8_t *bk = malloc(kvq_kvcodec_bound(ck, T)), *bv = malloc(kvq_kvcodec_bound(cv, T));
    size_t ok[T + 1], ov[T + 1];
    assert_int_equal(kvq_kvcodec_encode(ck, K, nek, bk, kvq_kvcodec_bound(ck, T), ok, NULL), KVQ_OK);
    assert_int_equal(kvq_kvcodec_encode(cv, V, nev, bv, kvq_kvcodec_bound(cv, T), ov, NULL), KVQ_OK);
    kvq_kvcodec_decode(ck, bk, ok, nek, Kd);
    kvq_kvcodec_decode(cv, bv, ov, nev, Vd);
    for (int i = 0; i < NQ; i++) {
        for (int t = 0; t < n; t++) {
            s[t] = 0;
            for (int j = 0; j < D; j++) s[t] += qq[i * D + j] * Kd[t * D + j];
        }
        if (ck->vt->score && nek > 0) {
            const uint8_t *rec[T];
            uint32_t len[T];
            for (int g = 0; g < nek / ck->group; g++) rec[g] = bk + ok[g], len[g] = (uint32_t)(ok[g + 1] - ok[g]);
            ck->vt->score(ck, qq + i * D, 1, rec, len, nek, s, nek);
        }
        attend_ref(s, Vd, n, 1 / sqrtf(D), out + i * D);
    }
    free(bk), free(bv);
    kvq_kvcodec_free(ck), kvq_kvcodec_free(cv);
}

static const char *specs[] = {"fp16", "int:4", "int:3", "kivi:2", "kivi:3", "hqmq:s48:r4", "hqmq:s24:r3:med3",
                              "octopus:3", "octopus:4", "octopus:2:qjl", "turboquant:3", "turboquant:4",
                              "turboquant-prod:3", "qturbo:2", "hqkv:e8:3:rot=signs:dither", "hqkv:d4:2:rot=qjl"};

static void test_matches_standalone_codec(void **st) {
    int windows[] = {0, 5};
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++)
        for (int wi = 0; wi < 2; wi++)
            for (int bnd = 0; bnd < 2; bnd++) {
                kvq_kvcache *c = mkcache(specs[si], windows[wi], bnd);
                fill(c, 0, T);
                int ns[] = {1, 37, T};
                for (int l = 0; l < L; l++)
                    for (int h = 0; h < H; h++)
                        for (int k = 0; k < 3; k++) {
                            // KIVI: truncating inside a key group re-rings its tokens decoded
                            // (lossy), so only the full context is compared
                            if (!strncmp(specs[si], "kivi", 4) && ns[k] < T) continue;
                            // the dither counter is running state: re-appended tokens draw new dithers
                            if (strstr(specs[si], "dither") && ns[k] < T) continue;
                            // tokens encoded before a truncate stay encoded (docs/KV.md): with
                            // a window the expected split differs, so W > 0 compares full context
                            if (windows[wi] > 0 && ns[k] < T) continue;
                            float got[NQ * D], want[NQ * D];
                            if (ns[k] < T) { // a shorter context: truncate and refill
                                c->ops->truncate(c, ns[k]);
                            }
                            c->ops->attend(c, l, h, qq, NQ, ns[k], 1 / sqrtf(D), got);
                            expected(specs[si], windows[wi], bnd, l, h, ns[k], want);
                            for (int j = 0; j < NQ * D; j++)
                                if (fabsf(got[j] - want[j]) > 1e-4f)
                                    fail_msg("%s W=%d bnd=%d l=%d h=%d n=%d: %g vs %g", specs[si], windows[wi], bnd, l, h, ns[k], got[j], want[j]);
                            if (ns[k] < T) fill(c, ns[k], T);
                        }
                c->ops->free(c);
            }
}

// Close to exact attention (fp32, computed here) within a per-codec tolerance; the
// fp16 cache and a window covering everything must be near exact.
static void test_vs_exact(void **st) {
    struct { const char *spec; int window; float tol; } cs[] = {
        {"fp16", 0, 2e-3f}, {"turboquant:2", T, 2e-3f}, {"int:8", 0, 2e-2f}, {"octopus:4", 0, 0.15f},
        {"hqmq:s192:r6", 0, 0.15f}, {"turboquant:4", 0, 0.15f}, {"kivi:4", 0, 0.15f}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        kvq_kvcache *c = mkcache(cs[i].spec, cs[i].window, 0);
        fill(c, 0, T);
        double e2 = 0, r2 = 0;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                float got[NQ * D], want[NQ * D], K[T * D], V[T * D], s[T];
                for (int t = 0; t < T; t++)
                    for (int j = 0; j < D; j++)
                        K[t * D + j] = kk[(((size_t)t * L + l) * H + h) * D + j], V[t * D + j] = vv[(((size_t)t * L + l) * H + h) * D + j];
                c->ops->attend(c, l, h, qq, NQ, T, 1 / sqrtf(D), got);
                for (int q = 0; q < NQ; q++) {
                    for (int t = 0; t < T; t++) {
                        s[t] = 0;
                        for (int j = 0; j < D; j++) s[t] += qq[q * D + j] * K[t * D + j];
                    }
                    attend_ref(s, V, T, 1 / sqrtf(D), want + q * D);
                }
                for (int j = 0; j < NQ * D; j++) e2 += pow(got[j] - want[j], 2), r2 += pow(want[j], 2);
            }
        double rel = sqrt(e2 / r2);
        printf("  %-14s W=%-3d attention rel. error vs exact %.4f\n", cs[i].spec, cs[i].window, rel);
        assert_true(rel < cs[i].tol);
        c->ops->free(c);
    }
}

// Effective bits: encoded bytes + fp16 window (+ KIVI's incomplete group) + boundary.
static void test_bits_accounting(void **st) {
    // int:4 at D=64: 4 + 16/64 = 4.25 bits; window 5 of T=80 at 16 bits
    kvq_kvcache *c = mkcache("int:4", 5, 0);
    fill(c, 0, T);
    double want = (75 * 4.25 + 5 * 16.0) / T;
    assert_true(fabs(c->ops->bits_per_element(c) - want) < 1e-9);
    assert_true(fabs(kvq_kvcache_codec_formula_bits(c, T) - want) < 1e-9);
    c->ops->free(c);
    // boundary: K of layers 0 and 2 (of 3) at 16 bits
    c = mkcache("int:4", 0, 1);
    fill(c, 0, T);
    want = (2 * 16.0 + 1 * 4.25 + 3 * 4.25) / 6;
    assert_true(fabs(c->ops->bits_per_element(c) - want) < 1e-9);
    assert_string_equal(kvq_kvcache_codec_state(c, 0, 1, 0)->spec.name, "fp16");
    assert_string_equal(kvq_kvcache_codec_state(c, 1, 1, 0)->spec.name, "int");
    c->ops->free(c);
    // KIVI: 80 tokens = 2 full key groups + 16 fp16 keys; values per token
    c = mkcache("kivi:2", 0, 0);
    fill(c, 0, T);
    want = ((64 * 3.0 + 16 * 16.0) / T + 3.0) / 2;
    assert_true(fabs(c->ops->bits_per_element(c) - want) < 1e-9);
    c->ops->free(c);
    // HQMQ with outliers: variable length + 16-bit length field per token
    c = mkcache("hqmq:s48:r4:med3", 0, 0);
    fill(c, 0, T);
    double b = c->ops->bits_per_element(c), f = kvq_kvcache_codec_formula_bits(c, T);
    assert_true(b >= f - 1e-9 && b < f + 0.2);
    c->ops->free(c);
}

// The evaluation shadow (decoded fp32 copy) gives the same attention as the codec path.
static void test_shadow_same(void **st) {
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        kvq_kvcache *a = mkcache(specs[si], 3, 1), *b = NULL;
        kvq_kvcache_policy p = {3, 1, 42, 1, 0};
        assert_int_equal(kvq_kvcache_codec_new(specs[si], L, H, D, T, &p, &b, NULL), KVQ_OK);
        fill(a, 0, T), fill(b, 0, T);
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                float x[NQ * D], y[NQ * D];
                a->ops->attend(a, l, h, qq, NQ, T, 1 / sqrtf(D), x);
                b->ops->attend(b, l, h, qq, NQ, T, 1 / sqrtf(D), y);
                for (int j = 0; j < NQ * D; j++) assert_true(fabsf(x[j] - y[j]) < 1e-4f);
            }
        assert_true(a->ops->bits_per_element(a) == b->ops->bits_per_element(b));
        a->ops->free(a), b->ops->free(b);
    }
}

// policy.chunks (kvq-verify's cache): attend_chunk over chunks of queries equals, bit for bit,
// the shadow cache attended token by token (the same decoded rows, the same kernel), for every
// codec, with a window, boundary layers, KIVI's 32-token key groups cut by the chunks, and a
// second sequence after truncate(0); and it holds less than the shadow (records, not fp32 rows).
static void test_chunks_equal_shadow(void **st) {
    const int cuts[] = {0, 1, 17, 50, 51, T}; // chunks [cuts[i], cuts[i + 1]): 1, 16, 33, 1 and 29 tokens
    float *q = malloc(sizeof(float) * T * NQ * D), *x = malloc(sizeof(float) * T * NQ * D), *y = malloc(sizeof(float) * T * NQ * D);
    gauss(q, (size_t)T * NQ * D, 4);
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        kvq_kvcache *a = NULL, *b = NULL;
        kvq_kvcache_policy pa = {3, 1, 42, 1, 0}, pb = {3, 1, 42, 0, 1};
        assert_int_equal(kvq_kvcache_codec_new(specs[si], L, H, D, T, &pa, &a, NULL), KVQ_OK);
        assert_int_equal(kvq_kvcache_codec_new(specs[si], L, H, D, T, &pb, &b, NULL), KVQ_OK);
        assert_null(a->ops->attend_chunk);
        assert_non_null(b->ops->attend_chunk);
        int differ = 0;
        for (int seq = 0; seq < 2; seq++) {
            a->ops->truncate(a, 0), b->ops->truncate(b, 0);
            for (int i = 0; i + 1 < (int)(sizeof cuts / sizeof *cuts); i++) {
                const int p0 = cuts[i], n = cuts[i + 1] - cuts[i];
                fill(a, p0, p0 + n), fill(b, p0, p0 + n);
                for (int l = 0; l < L; l++)
                    for (int h = 0; h < H; h++) {
                        const float *qs = q + (size_t)(seq * 7 + l * H + h) % 5 * D; // queries differ per token, layer, head
                        for (int t = 0; t < n; t++)
                            assert_int_equal(a->ops->attend(a, l, h, qs + (size_t)(p0 + t) * NQ * D / 2, NQ, p0 + t + 1,
                                                            1 / sqrtf(D), x + (size_t)t * NQ * D), KVQ_OK);
                        assert_int_equal(b->ops->attend_chunk(b, l, h, qs + (size_t)p0 * NQ * D / 2, NQ * D / 2, NQ, n, p0,
                                                              1 / sqrtf(D), y, NQ * D), KVQ_OK);
                        differ += memcmp(x, y, sizeof(float) * n * NQ * D) != 0;
                    }
            }
        }
        if (differ) fail_msg("%s: %d (layer, head, chunk) outputs differ from the shadow's", specs[si], differ);
        // a chunk past the stored tokens is refused, naming the layer and head
        assert_int_equal(b->ops->attend_chunk(b, 1, 0, q, NQ * D, NQ, 2, T - 1, 1.0f, y, NQ * D), KVQ_ERR_ARG);
        assert_non_null(strstr(b->err.msg, "layer 1 head 0"));
        const size_t ha = a->ops->held_bytes(a), hb = b->ops->held_bytes(b);
        if (strcmp(specs[si], "fp16") && hb >= ha) fail_msg("%s: chunks hold %zu bytes, the shadow %zu", specs[si], hb, ha);
        a->ops->free(a), b->ops->free(b);
    }
    free(q), free(x), free(y);
}

// KVQ_KV_SIM_Q8=1 (kvq-verify's model of the GPU's int8 key scores): attend_chunk scores the encoded
// int keys with q rounded to int8 per query head (max |q| / 127, ties to even). With no window every
// key is encoded, so the result is the plain cache's given q rounded here (within float rounding: other
// summation orders), and it differs from the unrounded q's (the rounding took effect); with a window
// the window's keys keep q in fp32 (between the two); KIVI keys are untouched (bit for bit); a value
// other than 0 or 1 is refused, naming the variable.
static kvq_kvcache *chunk_cache(const char *spec, int window, const char *sim, int chunks) {
    kvq_kvcache *c = NULL;
    kvq_err e = {0};
    kvq_kvcache_policy p = {window, 0, 42, 0, chunks};
    if (sim) setenv("KVQ_KV_SIM_Q8", sim, 1);
    kvq_status st = kvq_kvcache_codec_new(spec, L, H, D, T, &p, &c, &e);
    unsetenv("KVQ_KV_SIM_Q8");
    if (st) fail_msg("%s: %s", spec, e.msg);
    fill(c, 0, T);
    return c;
}
enum { SIM_P = 50, SIM_N = T - SIM_P }; // test_sim_q8's chunk: the last SIM_N tokens
// attend_chunk of the chunk (ch) or attend of its first token's queries over all T positions, into y
static void sim_attend(kvq_kvcache *c, int ch, int l, int h, const float *q, float sc, float *y) {
    if (ch) assert_int_equal(c->ops->attend_chunk(c, l, h, q, NQ * D, NQ, SIM_N, SIM_P, sc, y, NQ * D), KVQ_OK);
    else assert_int_equal(c->ops->attend(c, l, h, q, NQ, T, sc, y), KVQ_OK);
}
// Each value of the environment variable var is refused by the codec cache, naming var.
static void sim_refused(const char *var, const char *const *bad, size_t n) {
    for (size_t i = 0; i < n; i++) {
        kvq_kvcache *c = NULL;
        kvq_err e = {0};
        kvq_kvcache_policy p = {0, 0, 42, 0, 1};
        setenv(var, bad[i], 1);
        assert_int_equal(kvq_kvcache_codec_new("int:4", L, H, D, T, &p, &c, &e), KVQ_ERR_ARG);
        unsetenv(var);
        assert_null(c);
        assert_non_null(strstr(e.msg, var));
    }
}
static void test_sim_q8(void **st) {
    enum { P = SIM_P, N = SIM_N };
    float q[N * NQ * D], qr[N * NQ * D], y0[N * NQ * D], y1[N * NQ * D], yr[N * NQ * D];
    gauss(q, sizeof q / sizeof *q, 5);
    for (int i = 0; i < N * NQ; i++) { // one large channel a head (as real queries have): coarse steps for the rest
        float *x = q + (size_t)i * D, m = 0;
        x[i % D] *= 12.0f;
        for (int j = 0; j < D; j++) m = fmaxf(m, fabsf(x[j]));
        for (int j = 0; j < D; j++) qr[(size_t)i * D + j] = rintf(x[j] * 127.0f / m) * (m / 127.0f);
    }
    const float sc = 1 / sqrtf(D);
    // kvq-verify's cache (attend_chunk: the chunk's N tokens) and kvq-run's (attend: the keys scored from their
    // execution rows, 8 queries a block, the first token's NQ queries over all T positions)
    for (int ch = 1; ch >= 0; ch--)
        for (int w = 0; w < 2; w++) {
            kvq_kvcache *a = chunk_cache("int:4", w ? 8 : 0, "0", ch), *b = chunk_cache("int:4", w ? 8 : 0, "1", ch);
            const int n = ch ? N * NQ * D : NQ * D;
            double e01 = 0, er = 0, n0 = 0;
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++) {
                    sim_attend(a, ch, l, h, q, sc, y0), sim_attend(b, ch, l, h, q, sc, y1), sim_attend(a, ch, l, h, qr, sc, yr);
                    for (int i = 0; i < n; i++)
                        e01 += (y1[i] - y0[i]) * (y1[i] - y0[i]), er += (y1[i] - yr[i]) * (y1[i] - yr[i]), n0 += y0[i] * y0[i];
                }
            e01 /= n0, er /= n0;
            const char *path = ch ? "attend_chunk" : "attend";
            if (!(e01 > 1e-9 && e01 < 1e-3)) fail_msg("%s, window %d: rounded q moved the output by NMSE %.3g (want (1e-9, 1e-3))", path, w ? 8 : 0, e01);
            if (!w && !(er < 1e-10)) fail_msg("%s, no window: NMSE %.3g against the plain cache given rounded q (want < 1e-10)", path, er);
            if (w && !(er > 1e-9)) fail_msg("%s, window 8: the window's keys took the rounded q too (NMSE %.3g)", path, er);
            a->ops->free(a), b->ops->free(b);
        }
    kvq_kvcache *a = chunk_cache("kivi:4", 0, "0", 1), *b = chunk_cache("kivi:4", 0, "1", 1);
    for (int l = 0; l < L; l++) {
        sim_attend(a, 1, l, 1, q, sc, y0), sim_attend(b, 1, l, 1, q, sc, y1);
        assert_memory_equal(y0, y1, sizeof y0);
    }
    a->ops->free(a), b->ops->free(b);
    const char *bad[] = {"yes", "01", "1 ", ""};
    sim_refused("KVQ_KV_SIM_Q8", bad, sizeof bad / sizeof *bad);
}

// KVQ_KV_SIM_Q8_GROUP=g: q rounded with one scale per g consecutive dims (a measurement switch, session 23): the
// cache's output equals the plain cache's given q rounded so here (attend_chunk and attend, no window); g = head_dim
// is the per-head rounding bit for bit; a value that does not divide head_dim is refused, naming the variable.
static void test_sim_q8_group(void **st) {
    enum { P = SIM_P, N = SIM_N, G = 16 };
    float q[N * NQ * D], qg[N * NQ * D], y0[N * NQ * D], y1[N * NQ * D];
    gauss(q, sizeof q / sizeof *q, 7);
    for (int i = 0; i < N * NQ; i++) {
        float *x = q + (size_t)i * D;
        x[i % D] *= 12.0f; // one large channel: only its group's step is coarse
        for (int j0 = 0; j0 < D; j0 += G) {
            float m = 0;
            for (int j = j0; j < j0 + G; j++) m = fmaxf(m, fabsf(x[j]));
            for (int j = j0; j < j0 + G; j++) qg[(size_t)i * D + j] = rintf(x[j] * 127.0f / m) * (m / 127.0f);
        }
    }
    const float sc = 1 / sqrtf(D);
    for (int ch = 1; ch >= 0; ch--) {
        setenv("KVQ_KV_SIM_Q8_GROUP", "16", 1);
        kvq_kvcache *a = chunk_cache("int:4", 0, "0", ch), *b = chunk_cache("int:4", 0, "1", ch);
        setenv("KVQ_KV_SIM_Q8_GROUP", "64", 1);
        kvq_kvcache *c = chunk_cache("int:4", 0, "1", ch);
        unsetenv("KVQ_KV_SIM_Q8_GROUP");
        kvq_kvcache *d = chunk_cache("int:4", 0, "1", ch);
        const int n = ch ? N * NQ * D : NQ * D;
        double e = 0, n0 = 0;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                sim_attend(b, ch, l, h, q, sc, y1), sim_attend(a, ch, l, h, qg, sc, y0);
                for (int i = 0; i < n; i++) e += (y1[i] - y0[i]) * (y1[i] - y0[i]), n0 += y0[i] * y0[i];
                sim_attend(c, ch, l, h, q, sc, y0), sim_attend(d, ch, l, h, q, sc, y1);
                assert_memory_equal(y0, y1, sizeof(float) * n);
            }
        if (!(e / n0 < 1e-10)) fail_msg("%s: NMSE %.3g against the plain cache given q rounded per 16 dims", ch ? "attend_chunk" : "attend", e / n0);
        a->ops->free(a), b->ops->free(b), c->ops->free(c), d->ops->free(d);
    }
    const char *bad[] = {"0", "24", "128", "x", "16 ", ""};
    sim_refused("KVQ_KV_SIM_Q8_GROUP", bad, sizeof bad / sizeof *bad);
}

// attend from several threads at once (each takes its own scratch block from the cache's
// pool) gives, bit for bit, what one thread gets calling it in turn.
static void test_concurrent_attend(void **st) {
    enum { NJ = L * H * 2 };
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        kvq_kvcache *c = mkcache(specs[si], 3, 1);
        fill(c, 0, T);
        static float want[NJ][NQ * D], got[NJ][NQ * D];
        for (int j = 0; j < NJ; j++) // job j: layer, head and a full or partial context
            assert_int_equal(c->ops->attend(c, j / (2 * H), j / 2 % H, qq, NQ, j % 2 ? T : T / 2 + 1, 1 / sqrtf(D), want[j]),
                             KVQ_OK);
        int bad = 0;
        for (int rep = 0; rep < 4; rep++) {
#pragma omp parallel for num_threads(4) schedule(dynamic, 1) reduction(+ : bad)
            for (int j = 0; j < NJ; j++)
                bad += c->ops->attend(c, j / (2 * H), j / 2 % H, qq, NQ, j % 2 ? T : T / 2 + 1, 1 / sqrtf(D), got[j]) != KVQ_OK ||
                       memcmp(got[j], want[j], sizeof want[j]) != 0;
        }
        if (bad) fail_msg("%s: %d concurrent attends failed or differed", specs[si], bad);
        c->ops->free(c);
    }
}

// Manifest section round trip: a loaded cache attends exactly like the saved one; a
// blob too short is refused with a message.
static void test_manifest_roundtrip(void **st) {
    const char *sp[] = {"octopus:3", "hqmq:s48:r4:med3", "turboquant-prod:2", "kivi:2", "hqkv:e8:3:rot=signs:dither"};
    for (size_t si = 0; si < sizeof sp / sizeof *sp; si++) {
        kvq_kvcache *a = mkcache(sp[si], 4, 1), *b = NULL;
        json_t *sec;
        float *blob;
        size_t nf;
        kvq_err e = {0};
        assert_int_equal(kvq_kvcache_codec_save(a, T, &sec, &blob, &nf, &e), KVQ_OK);
        char *js = json_dumps(sec, JSON_COMPACT);
        json_t *sec2 = json_loads(js, 0, NULL);
        assert_int_equal(kvq_kvcache_codec_load(sec2, blob, nf, T, 0, &b, &e), KVQ_OK);
        fill(a, 0, T), fill(b, 0, T);
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                float x[NQ * D], y[NQ * D];
                a->ops->attend(a, l, h, qq, NQ, T, 1 / sqrtf(D), x);
                b->ops->attend(b, l, h, qq, NQ, T, 1 / sqrtf(D), y);
                assert_memory_equal(x, y, sizeof x);
            }
        kvq_kvcache *bad = NULL;
        if (nf > 0) { // the stored tables are what the loaded cache uses: each changed, still valid
            float *pert = malloc(sizeof(float) * nf);
            memcpy(pert, blob, sizeof(float) * nf);
            size_t si2;
            json_t *stj;
            json_array_foreach(json_object_get(sec2, "states"), si2, stj) {
                size_t ti;
                json_t *tj;
                json_array_foreach(json_object_get(stj, "tables"), ti, tj) {
                    const char *tn = json_string_value(json_object_get(tj, "name"));
                    float *t = pert + json_integer_value(json_object_get(tj, "offset"));
                    const size_t cnt = (size_t)json_integer_value(json_object_get(tj, "count"));
                    if (!strcmp(tn, "signs")) for (size_t k = 0; k < cnt; k++) t[k] = -t[k];
                    else if (!strncmp(tn, "codebook", 8)) for (size_t k = 0; k < cnt; k++) t[k] *= 0.9f;
                    else for (size_t k = 0; k + 4 <= cnt; k += 4) { // unit quaternions: (w,x,y,z) -> (x,y,z,w)
                        float w0 = t[k];
                        t[k] = t[k + 1], t[k + 1] = t[k + 2], t[k + 2] = t[k + 3], t[k + 3] = w0;
                    }
                }
            }
            assert_int_equal(kvq_kvcache_codec_load(sec2, pert, nf, T, 0, &bad, &e), KVQ_OK);
            fill(bad, 0, T);
            float x[NQ * D], y[NQ * D];
            a->ops->attend(a, 1, 0, qq, NQ, T, 1 / sqrtf(D), x);
            bad->ops->attend(bad, 1, 0, qq, NQ, T, 1 / sqrtf(D), y);
            assert_true(memcmp(x, y, sizeof x) != 0);
            bad->ops->free(bad), bad = NULL, free(pert);
        }
        if (nf > 0) {
            assert_int_equal(kvq_kvcache_codec_load(sec2, blob, nf - 1, T, 0, &bad, &e), KVQ_ERR_FORMAT);
            assert_non_null(strstr(e.msg, "blob"));
            assert_null(bad);
        }
        free(js), free(blob), json_decref(sec), json_decref(sec2);
        a->ops->free(a), b->ops->free(b);
    }
}

// Through a real .kvq: the converter's section writer and the runtime's loader.
static void test_kvq_file_roundtrip(void **st) {
    const char *path = "tests/out/test_kvcache_codec.kvq";
    kvq_writer *w = NULL;
    kvq_err e = {0};
    mkdir("tests/out", 0755); // ignored by git; may already exist
    if (kvq_writer_open(path, &w, &e)) fail_msg("%s", e.msg);
    json_t *man = json_pack("{s:s, s:i}", "format", KVQ_FORMAT_NAME, "format_version", KVQ_FORMAT_VERSION);
    assert_int_equal(kvq_kv_write_section(w, man, "hqmq:s24:r3:med3", L, H, D, 2048, 2, 1, 99, &e), KVQ_OK);
    assert_int_equal(kvq_writer_commit(w, man, &e), KVQ_OK);
    kvq_file *f = NULL;
    assert_int_equal(kvq_file_open_container(path, &f, &e), KVQ_OK);
    kvq_kvcache *a = NULL, *b = NULL;
    assert_int_equal(kvq_kv_open_from_file(f, T, 0, &a, &e), KVQ_OK);
    assert_non_null(a);
    kvq_kvcache_policy p = {2, 1, 99, 0, 0};
    assert_int_equal(kvq_kvcache_codec_new("hqmq:s24:r3:med3", L, H, D, T, &p, &b, &e), KVQ_OK);
    fill(a, 0, T), fill(b, 0, T);
    float x[NQ * D], y[NQ * D];
    a->ops->attend(a, 2, 1, qq, NQ, T, 1 / sqrtf(D), x);
    b->ops->attend(b, 2, 1, qq, NQ, T, 1 / sqrtf(D), y);
    assert_memory_equal(x, y, sizeof x);
    a->ops->free(a), b->ops->free(b);
    kvq_file_close(f);
    json_decref(man);
    remove(path);
}

static void test_bad_input(void **st) {
    kvq_kvcache *c = NULL;
    kvq_err e = {0};
    kvq_kvcache_policy p = {0, 0, 1, 0, 0};
    assert_int_equal(kvq_kvcache_codec_new("octopus:9", L, H, D, T, &p, &c, &e), KVQ_ERR_ARG);
    assert_null(c);
    assert_int_equal(kvq_kvcache_codec_new("octopus:3", L, H, 48, T, &p, &c, &e), KVQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "power of two"));
    c = mkcache("int:4", 0, 0);
    float x[H * D] = {0};
    assert_int_equal(c->ops->append(c, 0, 1, x, x), KVQ_ERR_ARG); // gap in positions
    assert_int_equal(c->ops->append(c, 0, T, x, x), KVQ_ERR_ARG); // past max_ctx
    c->ops->free(c);
}

// The KV-cache interface's error channel: a failing op returns a status and its cache's err
// names layer, head or position and the codec; constructors return statuses with messages.
static void test_error_channel(void **state) {
    (void)state;
    kvq_kvcache_policy p = {0, 0, 42, 0, 0};
    kvq_kvcache *c = NULL;
    kvq_err e = {0};
    assert_int_equal(kvq_kvcache_codec_new("int:4", 2, 2, 64, 8, &p, &c, &e), KVQ_OK);
    float k[2 * 64] = {0}, v[2 * 64] = {0};
    assert_int_equal(c->ops->append(c, 1, 3, k, v), KVQ_ERR_ARG); // position 3 before 0..2 exist
    assert_non_null(strstr(c->err.msg, "layer 1"));
    assert_non_null(strstr(c->err.msg, "position 3"));
    assert_non_null(strstr(c->err.msg, "int"));
    assert_int_equal(c->ops->append(c, 1, 0, k, v), KVQ_OK);
    c->ops->free(c);
    kvq_kvcache *d = NULL;
    assert_int_equal(kvq_kvcache_default_new(0, 2, 64, 8, 0, &d, &e), KVQ_ERR_ARG);
    assert_null(d);
    assert_non_null(strstr(e.msg, "bad shape"));
    assert_int_equal(kvq_kvcache_default_new(2, 2, 64, 8, 1, &d, &e), KVQ_OK);
    assert_int_equal(d->ops->append(d, 0, 8, k, v), KVQ_ERR_ARG); // beyond max_ctx
    assert_non_null(strstr(d->err.msg, "position 8"));
    float q[64] = {0}, out[64];
    assert_int_equal(d->ops->append(d, 0, 0, k, v), KVQ_OK);
    assert_int_equal(d->ops->attend(d, 0, 1, q, 1, 1, 0.125f, out), KVQ_OK);
    d->ops->free(d);
}

// What the execution forms cost (kvq-run's memory line): HQMQ without outliers and HyperQuant-KV
// hold one fixed-width row per position and K/V state beside the records, the other codecs (and
// HQMQ with outliers, and every cache with the evaluation shadow) none; boundary layers' fp16
// keys none. Rows at head_dim 64: hqmq s48:r4 = 4 + 16·2 bytes (ib 11 + 4 bits in a uint16),
// s192:r6 = 4 + 16·4 (19 bits), hqkv e8:3 = 8 + 64 int8.
static void test_exec_bytes(void **st) {
    const struct { const char *spec; int bnd; size_t k, v; } cs[] = {
        {"hqmq:s48:r4", 0, 36, 36}, {"hqmq:s192:r6", 1, 68, 68}, {"hqkv:e8:3", 0, 72, 72}, {"hqkv:e8:3", 1, 72, 72},
        {"hqmq:s24:r3:med3", 0, 0, 0}, {"int:4", 0, 0, 0}, {"octopus:3", 0, 0, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        kvq_kvcache *c = mkcache(cs[i].spec, 0, cs[i].bnd);
        const size_t nb = cs[i].bnd ? 2 : 0; // boundary: K of the first and last layer in fp16
        const size_t want = ((L * H - nb * H) * cs[i].k + (size_t)L * H * cs[i].v) * T;
        const size_t got = c->ops->exec_bytes ? c->ops->exec_bytes(c) : 0;
        if (got != want) fail_msg("%s bnd=%d: execution form %zu bytes, expected %zu", cs[i].spec, cs[i].bnd, got, want);
        c->ops->free(c);
    }
    kvq_kvcache *c = NULL;
    kvq_kvcache_policy p = {0, 0, 42, 1, 0}; // the shadow attends densely: no execution form
    assert_int_equal(kvq_kvcache_codec_new("hqkv:e8:3", L, H, D, T, &p, &c, NULL), KVQ_OK);
    assert_int_equal(c->ops->exec_bytes(c), 0);
    c->ops->free(c);
}

// kvq_kvsynth_rows (the decode benchmark's synthetic keys and values): the same numbers whatever
// the chunking and the thread count; finite; per channel the documented Gaussian (mean and
// standard deviation over 4096 positions within 5 standard errors of kvq_kvsynth_channel's mu and
// sigma, every |x - mu| < 6 sigma); keys' channel scales spread (max/min > 4); another seed or
// layer gives other rows.
static void test_kvsynth(void **st) {
    (void)st;
    enum { P = 4096, N = H * D };
    float *k = malloc(sizeof(float) * P * N), *v = malloc(sizeof(float) * P * N);
    float *k2 = malloc(sizeof(float) * P * N), *v2 = malloc(sizeof(float) * P * N);
    assert_int_equal(kvq_kvsynth_rows(9, 1, 0, P, H, D, k, v, 1), KVQ_OK);
    assert_int_equal(kvq_kvsynth_rows(9, 1, 0, P, H, D, k2, v2, 2), KVQ_OK);
    assert_memory_equal(k, k2, sizeof(float) * P * N);
    assert_memory_equal(v, v2, sizeof(float) * P * N);
    assert_int_equal(kvq_kvsynth_rows(9, 1, 1000, 37, H, D, k2, v2, 2), KVQ_OK); // a chunk in the middle
    assert_memory_equal(k + (size_t)1000 * N, k2, sizeof(float) * 37 * N);
    assert_memory_equal(v + (size_t)1000 * N, v2, sizeof(float) * 37 * N);
    int bad = 0;
    float smin = INFINITY, smax = 0;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < N; c++) {
            float mu, sg;
            kvq_kvsynth_channel(9, 1, c, r, &mu, &sg);
            double m = 0, q = 0;
            for (int t = 0; t < P; t++) {
                const double x = (r ? v : k)[(size_t)t * N + c];
                if (!isfinite(x) || fabs(x - mu) >= 6 * sg) bad++;
                m += x, q += x * x;
            }
            m /= P;
            const double sd = sqrt(q / P - m * m);
            if (fabs(m - mu) > 5 * sg / sqrt(P) || fabs(sd / sg - 1) > 5 / sqrt(2.0 * P)) bad++;
            if (!r) smin = fminf(smin, sg), smax = fmaxf(smax, sg);
        }
    assert_int_equal(bad, 0);
    assert_true(smax / smin > 4);
    assert_int_equal(kvq_kvsynth_rows(10, 1, 0, 1, H, D, k2, v2, 1), KVQ_OK);
    assert_memory_not_equal(k, k2, sizeof(float) * N);
    assert_int_equal(kvq_kvsynth_rows(9, 2, 0, 1, H, D, k2, v2, 1), KVQ_OK);
    assert_memory_not_equal(v, v2, sizeof(float) * N);
    free(k), free(v), free(k2), free(v2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_standalone_codec),
        cmocka_unit_test(test_vs_exact),
        cmocka_unit_test(test_bits_accounting),
        cmocka_unit_test(test_shadow_same),
        cmocka_unit_test(test_chunks_equal_shadow),
        cmocka_unit_test(test_sim_q8),
        cmocka_unit_test(test_sim_q8_group),
        cmocka_unit_test(test_concurrent_attend),
        cmocka_unit_test(test_manifest_roundtrip),
        cmocka_unit_test(test_kvq_file_roundtrip),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_error_channel),
        cmocka_unit_test(test_exec_bytes),
        cmocka_unit_test(test_kvsynth),
    };
    return cmocka_run_group_tests_name("kvcache_codec", tests, setup, teardown);
}
