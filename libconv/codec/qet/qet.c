// QET matrix codec: swap tree → grouped k-means per stage (stage 2 = RQO on the residual,
// in the X* domain, without a second permutation) → codebooks stored by RTN at a' bits
// (CQO) or in the source dtype → bit-packed blobs. The budget solver sizes every stored
// byte (indicators, indices, codebooks with their scales, the params header) against
// the target ratio. Decode: centroid lookup, residual sum, reverse grouping, unswap.
#include "libconv/codec/qet/qet.h"
#include "kernels/splitmix.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "libconv/quant/kmeans.h"

// ---- configuration

kvq_qet_config kvq_qet_config_default(double ratio) {
    kvq_qet_config c = {.ratio = ratio, .levels = 3, .stages = 2, .split = 0.7, .width = 8,
                        .iters = 25, .cb_bits = 10};
    return c;
}

kvq_qet_config kvq_qet_config_vanilla(double ratio) {
    kvq_qet_config c = kvq_qet_config_default(ratio);
    c.stages = 1;
    c.cb_bits = 0;
    return c;
}

kvq_qet_config kvq_qet_config_pq(double ratio) {
    kvq_qet_config c = kvq_qet_config_vanilla(ratio);
    c.levels = 0;
    return c;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_real(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

kvq_status kvq_qet_parse(const char *args, int pq, kvq_qet_config *cfg, kvq_err *err) {
    const char *who = pq ? "pq" : "qet";
    char buf[256];
    if (!args || !*args)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec '%s': missing ratio (use %s:<ratio>[:options], e.g. %s:4)",
                           who, who, who);
    if (strlen(args) >= sizeof buf) return kvq_err_set(err, KVQ_ERR_ARG, "codec '%s': spec too long", who);
    strcpy(buf, args);
    char *opts = strchr(buf, ':');
    if (opts) *opts++ = 0;
    double ratio;
    if (parse_real(buf, &ratio) || ratio < 1.0)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec '%s': ratio '%s' is not a number >= 1", who, buf);
    *cfg = pq ? kvq_qet_config_pq(ratio) : kvq_qet_config_default(ratio);
    for (char *save = NULL, *tok = opts ? strtok_r(opts, ",", &save) : NULL; tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        long v;
        double f;
        if (!eq) {
            if (!pq && strcmp(tok, "vanilla") == 0) {
                cfg->stages = 1;
                cfg->cb_bits = 0;
                continue;
            }
            return kvq_err_set(err, KVQ_ERR_ARG, "codec '%s': unknown option '%s'", who, tok);
        }
        *eq = 0;
        const char *val = eq + 1;
        int bad = 0;
        if (!pq && strcmp(tok, "l") == 0) bad = parse_int(val, 0, KVQ_QET_MAX_LEVELS, &v), cfg->levels = (int)v;
        else if (strcmp(tok, "r") == 0) bad = parse_int(val, 1, KVQ_QET_MAX_STAGES, &v), cfg->stages = (int)v;
        else if (strcmp(tok, "split") == 0) bad = parse_real(val, &f) || f <= 0.0 || f >= 1.0, cfg->split = f;
        else if (strcmp(tok, "w") == 0) bad = parse_int(val, 1, 64, &v), cfg->width = (int)v;
        else if (strcmp(tok, "iters") == 0) bad = parse_int(val, 0, 10000, &v), cfg->iters = (int)v;
        else if (strcmp(tok, "cb") == 0) bad = parse_int(val, 0, 24, &v), cfg->cb_bits = (int)v;
        else if (strcmp(tok, "k1") == 0) bad = parse_int(val, 1, 1L << 30, &v), cfg->k_fixed[0] = v;
        else if (strcmp(tok, "k2") == 0) bad = parse_int(val, 1, 1L << 30, &v), cfg->k_fixed[1] = v;
        else return kvq_err_set(err, KVQ_ERR_ARG, "codec '%s': unknown option '%s'", who, tok);
        if (bad) return kvq_err_set(err, KVQ_ERR_ARG, "codec '%s': bad value '%s' for option '%s'", who, val, tok);
    }
    return KVQ_OK;
}

json_t *kvq_qet_config_to_json(const kvq_qet_config *c) {
    return json_pack("{s:f,s:i,s:i,s:f,s:i,s:i,s:i,s:I,s:I}", "ratio", c->ratio, "l", c->levels, "r",
                     c->stages, "split", c->split, "w", c->width, "iters", c->iters, "cb", c->cb_bits,
                     "k1", (json_int_t)c->k_fixed[0], "k2", (json_int_t)c->k_fixed[1]);
}

kvq_status kvq_qet_config_from_json(const json_t *j, kvq_qet_config *c, kvq_err *err) {
    json_int_t k1 = 0, k2 = 0;
    double ratio = 0, split = 0;
    int l = 0, r = 0, w = 0, it = 0, cb = 0;
    if (json_unpack((json_t *)j, "{s:F,s:i,s:i,s:F,s:i,s:i,s:i,s:I,s:I}", "ratio", &ratio, "l", &l, "r", &r,
                    "split", &split, "w", &w, "iters", &it, "cb", &cb, "k1", &k1, "k2", &k2))
        return kvq_err_set(err, KVQ_ERR_ARG, "qet: malformed configuration object");
    *c = (kvq_qet_config){.ratio = ratio, .levels = l, .stages = r, .split = split, .width = w,
                          .iters = it, .cb_bits = cb, .k_fixed = {k1, k2}};
    return KVQ_OK;
}

// ---- bit packing (LSB-first bitstream)

static void put_bits(uint8_t *buf, uint64_t pos, uint32_t v, int nb) {
    for (int b = 0; b < nb; b++, pos++)
        if ((v >> b) & 1u) buf[pos >> 3] |= (uint8_t)(1u << (pos & 7));
}


static uint64_t bytes_for_bits(uint64_t bits) { return (bits + 7) / 8; }

// put_bits over count values, nb bits each, from bit 0 of a zeroed buffer: the same bytes
// through a 64-bit accumulator (nb ≤ 32).
static void pack_bits(uint8_t *buf, const uint32_t *v, int64_t count, int nb) {
    if (nb == 0) return;
    uint64_t acc = 0, mask = nb == 32 ? 0xffffffffull : (1ull << nb) - 1;
    int fill = 0;
    for (int64_t i = 0; i < count; i++) {
        acc |= ((uint64_t)v[i] & mask) << fill;
        for (fill += nb; fill >= 8; fill -= 8, acc >>= 8) *buf++ = (uint8_t)acc;
    }
    if (fill) *buf = (uint8_t)acc;
}

// One flag byte (0 or 1) per bit to LSB-first bits: n flags into a zeroed buffer, 8 per byte
// in parallel.
static void pack_flags(uint8_t *buf, const uint8_t *flags, uint64_t n, int nt) {
    int64_t nbytes = (int64_t)(n / 8);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t j = 0; j < nbytes; j++) {
        const uint8_t *f = flags + 8 * j;
        buf[j] = (uint8_t)(f[0] | f[1] << 1 | f[2] << 2 | f[3] << 3 | f[4] << 4 | f[5] << 5 | f[6] << 6 | f[7] << 7);
    }
    for (uint64_t i = (uint64_t)nbytes * 8; i < n; i++)
        if (flags[i]) buf[i >> 3] |= (uint8_t)(1u << (i & 7));
}

// ---- rate plan

typedef struct {
    int64_t n, d, m;
    int cb_bits;
    size_t dsize;
} shape_t;

static uint64_t index_bytes(const shape_t *s, int64_t k) {
    return bytes_for_bits((uint64_t)s->n * (uint64_t)s->m * (uint64_t)kvq_qet_ceil_log2(k));
}

// Codebook blob: CQO = m (min, step) float32 pairs then k·d codes of a' bits; raw = k·d
// values in the source dtype.
static uint64_t codebook_bytes(const shape_t *s, int64_t k) {
    if (s->cb_bits) return 8u * (uint64_t)s->m + bytes_for_bits((uint64_t)k * (uint64_t)s->d * (uint64_t)s->cb_bits);
    return (uint64_t)k * (uint64_t)s->d * s->dsize;
}

static uint64_t stage_bits(const shape_t *s, int64_t k) { return 8 * (index_bytes(s, k) + codebook_bytes(s, k)); }

// Largest k in [1, kmax] with stage_bits(k) <= budget (stage_bits is nondecreasing in k),
// or 0 when even k = 1 does not fit.
static int64_t bisect_k(const shape_t *s, uint64_t budget, int64_t kmax) {
    if (stage_bits(s, 1) > budget) return 0;
    int64_t lo = 1, hi = kmax;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (stage_bits(s, mid) <= budget) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

kvq_status kvq_qet_solve(const kvq_qet_config *cfg, kvq_dtype src, int64_t n, int64_t d,
                         uint64_t header_bytes, kvq_qet_plan *plan, kvq_err *err) {
    memset(plan, 0, sizeof *plan);
    shape_t s = {.n = n, .d = d, .m = d / cfg->width, .cb_bits = cfg->cb_bits, .dsize = kvq_dtype_size(src)};
    uint64_t numel = (uint64_t)n * (uint64_t)d, a = 8 * s.dsize;
    plan->indicator_bits = 8 * bytes_for_bits(numel / 2 * (uint64_t)cfg->levels);
    plan->header_bits = 8 * header_bytes;
    plan->target_bits = cfg->ratio > 0 ? (uint64_t)floor((double)numel * (double)a / cfg->ratio) : UINT64_MAX;
    uint64_t fixed = plan->indicator_bits + plan->header_bits;
    if (plan->target_bits < fixed)
        return kvq_err_set(err, KVQ_ERR_ARG,
                           "qet: ratio %g on a %lld x %lld %s matrix allows %.3f bits/weight, less than the "
                           "indicator maps (l=%d: %.3f bits/weight) and header alone",
                           cfg->ratio, (long long)n, (long long)d, kvq_dtype_name(src),
                           (double)plan->target_bits / (double)numel, cfg->levels,
                           (double)plan->indicator_bits / (double)numel);
    uint64_t avail = plan->target_bits == UINT64_MAX ? UINT64_MAX : plan->target_bits - fixed, used = 0;
    plan->stages = 0;
    for (int st = 0; st < cfg->stages; st++) {
        int64_t k;
        if (cfg->k_fixed[st] > 0) {
            k = cfg->k_fixed[st] < n ? cfg->k_fixed[st] : n; // more clusters than rows: one per row
        } else {
            if (cfg->ratio <= 0)
                return kvq_err_set(err, KVQ_ERR_ARG, "qet: no ratio and no fixed k for stage %d", st + 1);
            uint64_t share = avail - used;
            if (st == 0 && cfg->stages > 1) share = (uint64_t)floor((double)avail * cfg->split);
            k = bisect_k(&s, share, n);
            if (k == 0) {
                if (st > 0) { // no room for a residual stage: drop RQO, stage 1 takes it all
                    kvq_qet_config one = *cfg;
                    one.stages = st;
                    return kvq_qet_solve(&one, src, n, d, header_bytes, plan, err);
                }
                return kvq_err_set(err, KVQ_ERR_ARG,
                                   "qet: ratio %g on a %lld x %lld %s matrix leaves %llu bits after indicator "
                                   "maps and header, too few for even one centroid per subspace (%llu bits)",
                                   cfg->ratio, (long long)n, (long long)d, kvq_dtype_name(src),
                                   (unsigned long long)share, (unsigned long long)stage_bits(&s, 1));
            }
        }
        plan->k[st] = k;
        plan->idx_bits[st] = kvq_qet_ceil_log2(k);
        plan->index_bits[st] = 8 * index_bytes(&s, k);
        plan->codebook_bits[st] = 8 * codebook_bytes(&s, k);
        used += plan->index_bits[st] + plan->codebook_bits[st];
        plan->stages++;
    }
    plan->total_bits = fixed + used;
    if (cfg->ratio > 0 && plan->total_bits > plan->target_bits)
        return kvq_err_set(err, KVQ_ERR_ARG, "qet: fixed k needs %llu bits, over the %llu-bit budget of ratio %g",
                           (unsigned long long)plan->total_bits, (unsigned long long)plan->target_bits, cfg->ratio);
    return KVQ_OK;
}

// ---- codebook storage (CQO or source dtype); the same function decodes in both directions

static inline float cqo_value(float mn, float step, uint32_t q) { return mn + (float)q * step; }

// Rounds the k × w centroids of one subspace to what will be stored, writing the codes
// (CQO) and the stored values back into cent.
static void store_codebook(float *cent, int64_t kw, int cb_bits, kvq_dtype src, float *mn_out,
                           float *step_out, uint32_t *codes) {
    if (cb_bits) {
        float mn = cent[0], mx = cent[0];
        for (int64_t i = 1; i < kw; i++) {
            if (cent[i] < mn) mn = cent[i];
            if (cent[i] > mx) mx = cent[i];
        }
        uint32_t qmax = (uint32_t)((1ull << cb_bits) - 1);
        float step = (mx - mn) / (float)qmax;
        for (int64_t i = 0; i < kw; i++) {
            uint32_t q = 0;
            if (step > 0) {
                double t = rint(((double)cent[i] - mn) / step);
                q = t < 0 ? 0 : t > qmax ? qmax : (uint32_t)t;
            }
            codes[i] = q;
            cent[i] = cqo_value(mn, step, q);
        }
        *mn_out = mn;
        *step_out = step;
    } else {
        for (int64_t i = 0; i < kw; i++) {
            uint8_t tmp[4];
            kvq_dtype_from_f32(src, &cent[i], 1, tmp);
            kvq_dtype_to_f32(src, tmp, 1, &cent[i]);
        }
    }
}

static uint64_t stage_seed(uint64_t seed, int st, int64_t sub) {
    return kvq_splitmix64_mix(seed + KVQ_SPLITMIX_GOLDEN * (uint64_t)(st * 1000003 + sub + 1));
}

// ---- encode

typedef struct {
    float *cent;      // (m, k, w) stored centroid values
    uint32_t *codes;  // (m, k, w) CQO codes
    float *mnstep;    // (m, 2)
    uint32_t *idx;    // (n, m)
} stage_t;

static void stage_free(stage_t *s) {
    free(s->cent);
    free(s->codes);
    free(s->mnstep);
    free(s->idx);
}

// Clusters every subspace of t (n × d) with k centroids; rec (n × d) gets (st == 0) or
// accumulates (st > 0) the stored centroid values.
// @return 0, or −1 when a subspace ran out of memory.
// One subspace j of run_stage. @return 0, or −1 when out of memory.
static int stage_sub(const float *t, int64_t n, int64_t d, int w, int64_t k, const kvq_qet_config *cfg,
                     kvq_dtype src, uint64_t seed, int st, int64_t j, int km_threads, int ref, stage_t *S,
                     float *rec) {
    const int64_t m = d / w;
    float *sub = malloc(sizeof(float) * (size_t)(n * w));
    uint32_t *as = malloc(sizeof(uint32_t) * (size_t)n);
    float *cent = S->cent + j * k * w;
    if (sub && as)
        for (int64_t i = 0; i < n; i++) memcpy(sub + i * w, t + i * d + j * w, sizeof(float) * (size_t)w);
    const kvq_kmeans_opts ko = {1, 1, km_threads};
    if (!sub || !as ||
        (ref ? kvq_kmeans_ref(sub, n, w, k, cfg->iters, stage_seed(seed, st, j), cent, as)
             : kvq_kmeans_ex(sub, n, w, k, cfg->iters, stage_seed(seed, st, j), cent, as, &ko)) < 0) {
        free(sub);
        free(as);
        return -1;
    }
    store_codebook(cent, k * w, cfg->cb_bits, src, &S->mnstep[2 * j], &S->mnstep[2 * j + 1], S->codes + j * k * w);
    if (ref) // re-assign to the stored (rounded) centroids
        for (int64_t i = 0; i < n; i++) as[i] = kvq_kmeans_nearest(sub + i * w, cent, k, w, NULL);
    else
        kvq_kmeans_assign(sub, n, w, cent, k, as);
    for (int64_t i = 0; i < n; i++) {
        uint32_t a = as[i];
        S->idx[i * m + j] = a;
        float *r = rec + i * d + j * w;
        const float *c = cent + (int64_t)a * w;
        for (int q = 0; q < w; q++) r[q] = st == 0 ? c[q] : r[q] + c[q];
    }
    free(sub);
    free(as);
    return 0;
}

// Clusters every subspace of t (n × d) with k centroids; rec (n × d) gets (st == 0) or
// accumulates (st > 0) the stored centroid values. With at least nt subspaces they run in
// parallel (k-means then stays on its thread); with fewer, one after the other, each k-means
// spreading its points over the nt threads (same results either way). k-means is told its
// thread count: inside an inactive (one-thread) region it used to open a nested team of the
// default size, which made `-t 1` spin two threads through every Lloyd step.
// @return 0, or −1 when a subspace ran out of memory.
static int run_stage(const float *t, int64_t n, int64_t d, int w, int64_t k, const kvq_qet_config *cfg,
                     kvq_dtype src, uint64_t seed, int st, int nt, int ref, stage_t *S, float *rec) {
    int64_t m = d / w;
    int oom = 0;
    if (m >= nt && nt > 1 && !ref) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) reduction(| : oom)
        for (int64_t j = 0; j < m; j++) oom |= stage_sub(t, n, d, w, k, cfg, src, seed, st, j, 1, 0, S, rec) < 0;
    } else {
        for (int64_t j = 0; j < m; j++) oom |= stage_sub(t, n, d, w, k, cfg, src, seed, st, j, nt, ref, S, rec) < 0;
    }
    return oom ? -1 : 0;
}

static json_t *make_params(const kvq_qet_config *cfg, kvq_dtype src, uint64_t seed, int stages,
                           const int64_t *k) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)seed);
    json_t *ks = json_array();
    for (int s = 0; s < stages; s++) json_array_append_new(ks, json_integer(k[s]));
    return json_pack("{s:i,s:i,s:i,s:i,s:s,s:s,s:o}", "v", 1, "l", cfg->levels, "w", cfg->width, "cb",
                     cfg->cb_bits, "src", kvq_dtype_name(src), "seed", hex, "k", ks);
}

static size_t json_len(const json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    free(s);
    return n;
}

double kvq_qet_predict_bits(const kvq_qet_config *cfg, kvq_dtype src, int64_t n, int64_t d) {
    int64_t kmax[KVQ_QET_MAX_STAGES] = {n, n};
    json_t *probe = make_params(cfg, src, 0, cfg->stages, kmax);
    size_t hdr = json_len(probe);
    json_decref(probe);
    kvq_qet_plan plan;
    if (kvq_qet_solve(cfg, src, n, d, hdr, &plan, NULL)) return NAN;
    json_t *real = make_params(cfg, src, 0, plan.stages, plan.k); // the params the encoder will store
    double bits = (double)(plan.total_bits - plan.header_bits) + 8.0 * (double)json_len(real);
    json_decref(real);
    return bits;
}

kvq_status kvq_qet_encode(const kvq_qet_config *cfg, kvq_dtype src, const float *x, int64_t n,
                          int64_t d, uint64_t seed, int n_threads, kvq_encoded *out, kvq_err *err) {
    return kvq_qet_encode_timed(cfg, src, x, n, d, seed, n_threads, out, NULL, err);
}

static kvq_status check_shape(const kvq_qet_config *cfg, int64_t n, int64_t d, kvq_err *err) {
    if (cfg->levels < 0 || cfg->levels > KVQ_QET_MAX_LEVELS || cfg->stages < 1 ||
        cfg->stages > KVQ_QET_MAX_STAGES || cfg->width < 1 || cfg->cb_bits < 0 || cfg->cb_bits > 24)
        return kvq_err_set(err, KVQ_ERR_ARG, "qet: bad configuration (l=%d, r=%d, w=%d, cb=%d)", cfg->levels,
                           cfg->stages, cfg->width, cfg->cb_bits);
    if (n < 1 || d < 1 || n > (1LL << 40) / d)
        return kvq_err_set(err, KVQ_ERR_ARG, "qet: bad matrix shape %lld x %lld", (long long)n, (long long)d);
    if (d % ((int64_t)1 << cfg->levels))
        return kvq_err_set(err, KVQ_ERR_ARG,
                           "qet: %lld columns are not a multiple of 2^l = %lld (swap-tree levels l=%d); "
                           "use fewer levels (option l=)", (long long)d, (long long)1 << cfg->levels, cfg->levels);
    if (d % cfg->width)
        return kvq_err_set(err, KVQ_ERR_ARG, "qet: %lld columns are not a multiple of the subspace width %d",
                           (long long)d, cfg->width);
    return KVQ_OK;
}

// kvq_qet_encode_timed, or with ref its plain reference (kvq_qet_encode_ref).
static kvq_status encode_impl(const kvq_qet_config *cfg, kvq_dtype src, const float *x, int64_t n, int64_t d,
                              uint64_t seed, int n_threads, int ref, kvq_encoded *out, double times[3],
                              kvq_err *err) {
    memset(out, 0, sizeof *out);
    kvq_status st = check_shape(cfg, n, d, err);
    if (st) return st;
    int nt = ref ? 1 : n_threads > 0 ? n_threads : omp_get_max_threads();
    int64_t bad = INT64_MAX; // the first non-finite value
#pragma omp parallel for schedule(static) num_threads(nt) reduction(min : bad)
    for (int64_t i = 0; i < n * d; i++)
        if (!isfinite(x[i]) && i < bad) bad = i;
    if (bad != INT64_MAX)
        return kvq_err_set(err, KVQ_ERR_NUMERIC, "qet: non-finite value %g at row %lld, column %lld", x[bad],
                           (long long)(bad / d), (long long)(bad % d));
    int64_t m = d / cfg->width, w = cfg->width;
    int l = cfg->levels;

    // Header allowance: the params with every k at its largest (n) bound the real ones
    // (kvq_qet_predict_bits makes the same allowance).
    int64_t kmax[KVQ_QET_MAX_STAGES] = {n, n};
    json_t *probe = make_params(cfg, src, seed, cfg->stages, kmax);
    size_t hdr = json_len(probe);
    json_decref(probe);
    kvq_qet_plan plan;
    if ((st = kvq_qet_solve(cfg, src, n, d, hdr, &plan, err))) return st;

    double t0 = omp_get_wtime();
    float *xs = malloc(sizeof(float) * (size_t)(n * d));
    float *rec = malloc(sizeof(float) * (size_t)(n * d));
    float *res = plan.stages > 1 ? malloc(sizeof(float) * (size_t)(n * d)) : NULL;
    uint8_t *bits = malloc((size_t)(n * l * (d / 2)) + 1);
    stage_t S[KVQ_QET_MAX_STAGES] = {0};
    int ok = xs && rec && bits && (plan.stages < 2 || res);
    for (int s = 0; s < plan.stages && ok; s++) {
        int64_t k = plan.k[s];
        S[s].cent = malloc(sizeof(float) * (size_t)(m * k * w));
        S[s].codes = malloc(sizeof(uint32_t) * (size_t)(m * k * w));
        S[s].mnstep = calloc((size_t)(2 * m), sizeof(float));
        S[s].idx = malloc(sizeof(uint32_t) * (size_t)(n * m));
        ok = S[s].cent && S[s].codes && S[s].mnstep && S[s].idx;
    }
    if (!ok) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory for a %lld x %lld matrix", (long long)n, (long long)d);
        goto done;
    }
    int oom = ref ? kvq_qet_swap_forward_ref(x, n, d, l, xs, bits) : kvq_qet_swap_forward(x, n, d, l, xs, bits);
    double t1 = omp_get_wtime();
    if (!oom) oom = run_stage(xs, n, d, (int)w, plan.k[0], cfg, src, seed, 0, nt, ref, &S[0], rec);
    if (!oom && plan.stages > 1) {
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t i = 0; i < n * d; i++) res[i] = xs[i] - rec[i];
        oom = run_stage(res, n, d, (int)w, plan.k[1], cfg, src, seed, 1, nt, ref, &S[1], rec);
    }
    if (oom) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory clustering a %lld x %lld matrix", (long long)n, (long long)d);
        goto done;
    }
    double se = 0.0;
    for (int64_t i = 0; i < n * d; i++) {
        double e = (double)xs[i] - (double)rec[i];
        se += e * e;
    }
    double t2 = omp_get_wtime();

    // Pack: indicators (n, l, d/2) bits; idx.<s> (n, m) × ceil(log2 k) bits; cb.<s>.
    if (l > 0) {
        uint64_t nbits = (uint64_t)n * (uint64_t)l * (uint64_t)(d / 2);
        uint8_t *p = calloc(bytes_for_bits(nbits), 1);
        if (!p) { st = kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory"); goto done; }
        if (ref) {
            for (uint64_t i = 0; i < nbits; i++)
                if (bits[i]) p[i >> 3] |= (uint8_t)(1u << (i & 7));
        } else {
            pack_flags(p, bits, nbits, nt);
        }
        kvq_encoded_add_blob(out, "indicators", p, bytes_for_bits(nbits), 0);
    }
    shape_t sh = {.n = n, .d = d, .m = m, .cb_bits = cfg->cb_bits, .dsize = kvq_dtype_size(src)};
    for (int s = 0; s < plan.stages; s++) {
        char role[24];
        int ib = plan.idx_bits[s];
        int64_t k = plan.k[s];
        size_t nb = index_bytes(&sh, k);
        if (nb) {
            uint8_t *p = calloc(nb, 1);
            if (!p) { st = kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory"); goto done; }
            if (ref)
                for (int64_t i = 0; i < n * m; i++) put_bits(p, (uint64_t)i * ib, S[s].idx[i], ib);
            else
                pack_bits(p, S[s].idx, n * m, ib);
            snprintf(role, sizeof role, "idx.%d", s + 1);
            kvq_encoded_add_blob(out, role, p, nb, 1);
        }
        size_t cbn = codebook_bytes(&sh, k);
        uint8_t *p = calloc(cbn, 1);
        if (!p) { st = kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory"); goto done; }
        if (cfg->cb_bits) {
            memcpy(p, S[s].mnstep, 8 * (size_t)m);
            if (ref)
                for (int64_t i = 0; i < m * k * w; i++)
                    put_bits(p + 8 * m, (uint64_t)i * cfg->cb_bits, S[s].codes[i], cfg->cb_bits);
            else
                pack_bits(p + 8 * m, S[s].codes, m * k * w, cfg->cb_bits);
        } else {
            kvq_dtype_from_f32(src, S[s].cent, (size_t)(m * k * w), p);
        }
        snprintf(role, sizeof role, "cb.%d", s + 1);
        kvq_encoded_add_blob(out, role, p, cbn, 1);
    }
    out->params = make_params(cfg, src, seed, plan.stages, plan.k);
    size_t real_hdr = json_len(out->params);
    KVQ_ASSERT(real_hdr <= hdr);
    kvq_encoded_add_part(out, "indicators", (double)plan.indicator_bits);
    for (int s = 0; s < plan.stages; s++) {
        char nm[24];
        snprintf(nm, sizeof nm, "indices.%d", s + 1);
        kvq_encoded_add_part(out, nm, (double)plan.index_bits[s]);
        snprintf(nm, sizeof nm, "codebook.%d", s + 1);
        kvq_encoded_add_part(out, nm, (double)plan.codebook_bits[s]);
    }
    kvq_encoded_add_part(out, "header", 8.0 * (double)real_hdr);
    out->code_bits_per_weight = (double)(plan.total_bits - plan.header_bits) / (double)(n * d);
    out->predicted_mse = se / (double)(n * d);
    KVQ_ASSERT(cfg->ratio <= 0 || 8 * kvq_encoded_bytes(out) <= plan.target_bits);
    if (times) {
        times[0] = t1 - t0;
        times[1] = t2 - t1;
        times[2] = omp_get_wtime() - t2;
    }
done:
    if (st) kvq_encoded_free(out);
    free(xs);
    free(rec);
    free(res);
    free(bits);
    for (int s = 0; s < KVQ_QET_MAX_STAGES; s++) stage_free(&S[s]);
    return st;
}

kvq_status kvq_qet_encode_timed(const kvq_qet_config *cfg, kvq_dtype src, const float *x, int64_t n,
                                int64_t d, uint64_t seed, int n_threads, kvq_encoded *out,
                                double times[3], kvq_err *err) {
    return encode_impl(cfg, src, x, n, d, seed, n_threads, 0, out, times, err);
}

kvq_status kvq_qet_encode_ref(const kvq_qet_config *cfg, kvq_dtype src, const float *x, int64_t n, int64_t d,
                              uint64_t seed, kvq_encoded *out, kvq_err *err) {
    return encode_impl(cfg, src, x, n, d, seed, 1, 1, out, NULL, err);
}

// ---- decode

// What decode needs from params and blobs, validated (kvq_qet_check stops here).
typedef struct {
    int l, w, cb, stages;
    kvq_dtype src;
    int64_t m, k[KVQ_QET_MAX_STAGES];
    const uint8_t *idxb[KVQ_QET_MAX_STAGES], *cbb[KVQ_QET_MAX_STAGES];
    const kvq_blob_view *ib;
    uint64_t nbits;
} qet_layout;

static kvq_status qet_layout_of(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n, int64_t d,
                                qet_layout *L, kvq_err *err) {
    int v = 0, l = 0, w = 0, cb = 0;
    const char *srcname = NULL, *seedhex = NULL;
    json_t *ks = NULL;
    if (json_unpack((json_t *)params, "{s:i,s:i,s:i,s:i,s:s,s:s,s:o}", "v", &v, "l", &l, "w", &w, "cb", &cb,
                    "src", &srcname, "seed", &seedhex, "k", &ks) ||
        v != 1 || !json_is_array(ks))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: malformed or unknown-version params");
    kvq_dtype src;
    if (kvq_dtype_parse(srcname, &src))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: unknown source dtype '%s' in params", srcname);
    int stages = (int)json_array_size(ks);
    kvq_qet_config cfg = {.levels = l, .stages = stages, .width = w, .cb_bits = cb};
    kvq_status st = check_shape(&cfg, n, d, err);
    if (st) { kvq_err_prefix(err, "decode"); return st; }
    int64_t m = d / w, k[KVQ_QET_MAX_STAGES];
    shape_t sh = {.n = n, .d = d, .m = m, .cb_bits = cb, .dsize = kvq_dtype_size(src)};
    const uint8_t *idxb[KVQ_QET_MAX_STAGES], *cbb[KVQ_QET_MAX_STAGES];
    for (int s = 0; s < stages; s++) {
        json_t *kv = json_array_get(ks, (size_t)s);
        k[s] = json_is_integer(kv) ? json_integer_value(kv) : 0;
        if (k[s] < 1 || k[s] > n)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: stage %d has k=%lld, outside [1, %lld]", s + 1,
                               (long long)k[s], (long long)n);
        char role[24];
        snprintf(role, sizeof role, "idx.%d", s + 1);
        const kvq_blob_view *b = kvq_blob_find(blobs, n_blobs, role);
        size_t want = index_bytes(&sh, k[s]);
        if ((b ? b->size : 0) != want)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: blob '%s' is %zu bytes, expected %zu", role,
                               b ? b->size : 0, want);
        idxb[s] = b ? b->data : NULL;
        snprintf(role, sizeof role, "cb.%d", s + 1);
        b = kvq_blob_find(blobs, n_blobs, role);
        want = codebook_bytes(&sh, k[s]);
        if (!b || b->size != want)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: blob '%s' is %zu bytes, expected %zu", role,
                               b ? b->size : 0, want);
        cbb[s] = b->data;
    }
    uint64_t nbits = (uint64_t)n * (uint64_t)l * (uint64_t)(d / 2);
    const kvq_blob_view *ib = kvq_blob_find(blobs, n_blobs, "indicators");
    if ((ib ? ib->size : 0) != bytes_for_bits(nbits))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "qet: blob 'indicators' is %zu bytes, expected %llu",
                           ib ? ib->size : 0, (unsigned long long)bytes_for_bits(nbits));
    *L = (qet_layout){.l = l, .w = w, .cb = cb, .stages = stages, .src = src, .m = m, .ib = ib, .nbits = nbits};
    memcpy(L->k, k, sizeof k);
    memcpy(L->idxb, idxb, sizeof idxb);
    memcpy(L->cbb, cbb, sizeof cbb);
    return KVQ_OK;
}

kvq_status kvq_qet_check(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n, int64_t d,
                         kvq_err *err) {
    qet_layout L;
    return qet_layout_of(params, blobs, n_blobs, n, d, &L, err);
}

kvq_status kvq_qet_decode(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n,
                          int64_t d, float *out, kvq_err *err) {
    qet_layout L;
    kvq_status st = qet_layout_of(params, blobs, n_blobs, n, d, &L, err);
    if (st) return st;
    const int l = L.l, w = L.w, cb = L.cb, stages = L.stages;
    const kvq_dtype src = L.src;
    const int64_t m = L.m, *k = L.k;
    const uint8_t *const *idxb = L.idxb, *const *cbb = L.cbb;
    const kvq_blob_view *ib = L.ib;
    const uint64_t nbits = L.nbits;
    float *cent[KVQ_QET_MAX_STAGES] = {0};
    uint8_t *bits = malloc((size_t)nbits + 1);
    float *xs = malloc(sizeof(float) * (size_t)(n * d));
    int ok = bits && xs;
    for (int s = 0; s < stages && ok; s++) ok = (cent[s] = malloc(sizeof(float) * (size_t)(m * k[s] * w))) != NULL;
    if (!ok) { st = kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory decoding %lld x %lld", (long long)n, (long long)d); goto done; }
    for (int s = 0; s < stages; s++) {
        int64_t kw = k[s] * w;
        if (cb) {
            for (int64_t j = 0; j < m; j++) {
                float mn, step;
                memcpy(&mn, cbb[s] + 8 * j, 4);
                memcpy(&step, cbb[s] + 8 * j + 4, 4);
                for (int64_t i = 0; i < kw; i++)
                    cent[s][j * kw + i] = cqo_value(mn, step, kvq_qet_get_bits(cbb[s] + 8 * m, (uint64_t)(j * kw + i) * cb, cb));
            }
        } else {
            kvq_dtype_to_f32(src, cbb[s], (size_t)(m * kw), cent[s]);
        }
    }
    for (uint64_t i = 0; i < nbits; i++) bits[i] = (ib->data ? ((const uint8_t *)ib->data)[i >> 3] >> (i & 7) : 0) & 1u;
    int64_t bad_row = -1;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < m; j++) {
            float *r = xs + i * d + j * w;
            for (int s = 0; s < stages; s++) {
                int b = kvq_qet_ceil_log2(k[s]);
                uint32_t a = b ? kvq_qet_get_bits(idxb[s], (uint64_t)(i * m + j) * b, b) : 0;
                if (a >= k[s]) { // only a corrupt blob can hold an index past k
#pragma omp critical(qet_bad)
                    bad_row = i;
                    a = 0;
                }
                const float *c = cent[s] + (j * k[s] + a) * w;
                for (int q = 0; q < w; q++) r[q] = s == 0 ? c[q] : r[q] + c[q];
            }
        }
    }
    if (bad_row >= 0) {
        st = kvq_err_set(err, KVQ_ERR_FORMAT, "qet: centroid index out of range in row %lld", (long long)bad_row);
        goto done;
    }
    if (kvq_qet_swap_inverse(xs, bits, n, d, l, out))
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "qet: out of memory undoing the swaps");
done:
    for (int s = 0; s < KVQ_QET_MAX_STAGES; s++) free(cent[s]);
    free(bits);
    free(xs);
    return st;
}

kvq_status kvq_qet_matrix_roundtrip(const float *x, int64_t n, int64_t d, kvq_dtype src, double ratio,
                                    uint64_t seed, float *xhat, double *bpw, kvq_err *err) {
    kvq_qet_config cfg = kvq_qet_config_default(ratio);
    kvq_encoded e;
    kvq_status st = kvq_qet_encode(&cfg, src, x, n, d, seed, 0, &e, err);
    if (st) return st;
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
    st = kvq_qet_decode(e.params, v, e.n_blob, n, d, xhat, err);
    if (!st && bpw) *bpw = kvq_encoded_bpw(&e, n * d);
    kvq_encoded_free(&e);
    return st;
}
