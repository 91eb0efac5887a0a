// HyperQuant encoding: RHT per tile, norm codes, lattice quantization + strip at the SNR
// that rate control picks (calibration table, then a secant correction on this tensor's
// exact effective size), Rice parameters by exact count, and the grouped bitstream.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/wht.h"
#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/codec/hyperquant/hqcal.h"
#include "libconv/quant/rice.h"

#define RATE_TOL 0.002 // stop correcting once |effective − target| ≤ this (spec: ±0.01)
#define RATE_MAXIT 10

kvq_hq_opts kvq_hq_opts_default(kvq_lattice l, double bps) {
    kvq_hq_opts o = {l, bps, NAN, 128, 8, 0, 0, KVQ_CAST_NONE}; // nb=8: best measured (docs/HYPERQUANT.md)
    return o;
}

int kvq_hq_tile_for(int64_t cols, int max_tile, int64_t *cols_p) {
    int64_t T = cols & -cols;
    if (T > max_tile) T = max_tile;
    if (T >= KVQ_HQ_MIN_TILE) { *cols_p = cols; return (int)T; }
    T = max_tile;
    while (T > KVQ_HQ_MIN_TILE && T / 2 >= cols) T /= 2;
    *cols_p = (cols + T - 1) / T * T;
    return (int)T;
}

typedef struct {
    const kvq_hq_opts *o;
    kvq_hq_header h;
    int nt, n, ncls;
    int64_t numel, tpr, n_tiles, n_groups;
    float *rot;       // (rows, cols_p): H·D·x per tile, unnormalized butterfly
    double *invn;     // per tile 1/decoded norm (0 for zero tiles)
    uint32_t *ncode;  // per tile norm code
    uint32_t *sym;    // (rows, cols_p) stripped symbols (Rice) or raw codes (int8)
    uint64_t *gbits;  // per group Rice bits
    // results of the last pass
    double snr_db;
    double noise;     // Σ squared error of the last pass, in the orthonormal rotated domain
    double *tacc;     // (2, n_tiles) per-tile sums, added up in tile order afterwards, so the totals
                      // (and the predicted MSE stored in the file) do not depend on the thread count
    uint64_t code_bits, codes_bytes, clipped;
    size_t total_bytes;
} enc_ctx;

static json_t *make_params(const enc_ctx *e, int with_k, int with_seed) {
    char seed[17];
    snprintf(seed, sizeof seed, "%016llx", (unsigned long long)e->h.seed);
    json_t *p = json_pack("{s:i,s:s,s:s,s:s,s:i,s:I,s:f,s:f,s:i,s:i}", "v", KVQ_HQ_FORMAT_VERSION, "lattice",
                          kvq_lattice_name(e->h.lat), "mode", e->h.int8 ? "int8" : "rice", "cast",
                          kvq_cast_name(e->h.cast), "tile", e->h.tile, "cols_p", (json_int_t)e->h.cols_p,
                          "alpha", e->h.alpha, "snr_db", e->snr_db, "norm_bits", e->h.norm_bits, "norm_exp",
                          e->h.norm_exp);
    if (!p) return NULL;
    if (with_k && !e->h.int8) {
        json_t *k = json_array();
        for (int c = 0; c < e->ncls; c++) json_array_append_new(k, json_integer(e->h.k[c]));
        json_object_set_new(p, "k", k);
    }
    if (with_seed) json_object_set_new(p, "seed", json_string(seed));
    return p;
}

static size_t json_len(json_t *p) {
    char *s = json_dumps(p, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    free(s);
    json_decref(p);
    return n;
}

static size_t norms_bytes(const enc_ctx *e) { return (size_t)((e->n_tiles * e->h.norm_bits + 7) / 8); }
static size_t offsets_bytes(const enc_ctx *e) { return e->h.int8 ? 0 : (size_t)(e->n_groups + 1) * 4; }

// One quantization pass at snr_db: symbols, Rice parameters, exact stored size.
static int quant_pass(enc_ctx *e, double snr_db) {
    const int T = e->h.tile, n = e->n, ncls = e->ncls, int8 = e->h.int8;
    const kvq_lattice lat = e->h.lat;
    int cls[8];
    for (int i = 0; i < n; i++) cls[i] = kvq_lattice_symbol_class(lat, i);
    e->snr_db = snr_db;
    e->h.alpha = kvq_hq_alpha(lat, snr_db);
    const double alpha = e->h.alpha;
    kvq_rice_hist *hist = calloc(KVQ_LAT_MAX_CLASSES, sizeof *hist);
    if (!hist) return -1;
    int fail = 0;
    uint64_t clipped = 0;
    double noise = 0.0;
    const int a2 = lat == KVQ_LAT_A2;
#pragma omp parallel num_threads(e->nt) reduction(+ : clipped)
    {
        kvq_rice_hist *lh = int8 ? NULL : calloc(KVQ_LAT_MAX_CLASSES, sizeof *lh);
        if (!int8 && !lh) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < e->n_tiles; t++) {
            e->tacc[t] = 0.0;
            if (e->invn[t] == 0.0 || (!int8 && !lh)) continue;
            const float g = (float)(alpha * e->invn[t]);
            const float *r = e->rot + t * T;
            uint32_t *s = e->sym + t * T;
            double tn = 0.0;
            for (int v = 0; v < T; v += n) {
                float u[8];
                int32_t c[8];
                for (int i = 0; i < n; i++) u[i] = r[v + i] * g;
                kvq_lattice_nearest(lat, u, c);
                if (int8)
                    for (int i = 0; i < n; i++) {
                        int32_t q = c[i] > 127 ? 127 : (c[i] < -127 ? -127 : c[i]);
                        clipped += q != c[i];
                        c[i] = q;
                    }
                float vn = 0.0f;
                for (int i = 0; i < n; i++) {
                    float d = u[i] - ((a2 && !(i & 1)) ? KVQ_SQRT3_F * (float)c[i] : (float)c[i]);
                    vn += d * d;
                }
                tn += (double)vn;
                if (int8) {
                    for (int i = 0; i < n; i++) s[v + i] = (uint32_t)c[i];
                } else {
                    kvq_lattice_strip(lat, c, s + v);
                    for (int i = 0; i < n; i++) {
                        kvq_rice_hist *hh = &lh[cls[i]];
                        if (s[v + i] < KVQ_RICE_HIST) hh->h[s[v + i]]++;
                        else kvq_rice_hist_add(hh, s[v + i]);
                    }
                }
            }
            double sc = 1.0 / (alpha * e->invn[t]); // n̂/α: orthonormal error = (u − ĉ)·n̂/(α√T)
            e->tacc[t] = tn * sc * sc / (double)T;
        }
        if (lh) {
#pragma omp critical
            for (int c = 0; c < ncls; c++) kvq_rice_hist_merge(&hist[c], &lh[c]);
            free(lh);
        }
    }
    if (fail) { free(hist); return -1; }
    e->clipped = clipped;
    for (int64_t t = 0; t < e->n_tiles; t++) noise += e->tacc[t];
    e->noise = noise;
    uint64_t bits = 0, bytes = 0;
    if (int8) {
        bits = 8 * (uint64_t)(e->h.rows * e->h.cols_p);
        bytes = bits / 8;
    } else {
        for (int c = 0; c < ncls; c++) e->h.k[c] = kvq_rice_best_k(&hist[c], NULL);
        int kk[8];
        for (int i = 0; i < n; i++) kk[i] = e->h.k[kvq_lattice_symbol_class(lat, i)];
#pragma omp parallel for num_threads(e->nt) schedule(static) reduction(+ : bits, bytes)
        for (int64_t g = 0; g < e->n_groups; g++) {
            uint64_t gb = 0;
            int64_t t1 = (g + 1) * KVQ_HQ_GROUP_TILES < e->n_tiles ? (g + 1) * KVQ_HQ_GROUP_TILES : e->n_tiles;
            for (int64_t t = g * KVQ_HQ_GROUP_TILES; t < t1; t++) {
                if (e->invn[t] == 0.0) continue;
                const uint32_t *s = e->sym + t * T;
                for (int i = 0; i < T; i++) gb += kvq_rice_len(s[i], kk[i & (n - 1)]); // n is a power of two
            }
            e->gbits[g] = gb;
            bits += gb;
            bytes += (gb + 7) / 8;
        }
    }
    free(hist);
    e->code_bits = bits;
    e->codes_bytes = bytes;
    e->total_bytes = (size_t)bytes + norms_bytes(e) + offsets_bytes(e) + json_len(make_params(e, 1, 1));
    return 0;
}

static double eff_bpw(const enc_ctx *e) { return 8.0 * (double)e->total_bytes / (double)e->numel; }

// Picks the SNR: table lookup on the code-rate target, then secant steps on the exact
// effective rate of this tensor until within RATE_TOL (or the table alone if asked).
static int rate_control(enc_ctx *e, int *iters) {
    const kvq_hq_opts *o = e->o;
    if (!isnan(o->snr_db)) { *iters = 1; return quant_pass(e, o->snr_db); }
    double side = 8.0 * ((double)norms_bytes(e) + (double)offsets_bytes(e) + 250.0) +
                  (e->h.int8 ? 0.0 : 3.5 * (double)e->n_groups);
    double code_target = e->h.int8 ? o->bps : o->bps - side / (double)e->numel;
    double s = kvq_hqcal_snr_for_rate(e->h.lat, code_target);
    if (s < 0.0) s = 0.0;
    if (s > 50.0) s = 50.0;
    if (quant_pass(e, s)) return -1;
    *iters = 1;
    if (o->table_only || e->h.int8) return 0;
    double best_s = s, best_err = eff_bpw(e) - o->bps, ps = NAN, perr = NAN;
    double err = best_err;
    while (fabs(err) > RATE_TOL && *iters < RATE_MAXIT) {
        double slope = (kvq_hqcal_rate_for_snr(e->h.lat, s + 0.5) - kvq_hqcal_rate_for_snr(e->h.lat, s - 0.5));
        if (!isnan(ps) && s != ps) {
            double sec = (err - perr) / (s - ps);
            if (sec > 0.02 && sec < 1.0) slope = sec;
        }
        if (!(slope > 0.02)) slope = 0.166; // 1 bit per 6.02 dB
        double ns = s - err / slope;
        if (ns < 0.0) ns = 0.0;
        if (ns > 50.0) ns = 50.0;
        if (ns == s) break;
        ps = s;
        perr = err;
        s = ns;
        if (quant_pass(e, s)) return -1;
        (*iters)++;
        err = eff_bpw(e) - o->bps;
        if (fabs(err) < fabs(best_err)) { best_err = err; best_s = s; }
    }
    if (s != best_s) {
        if (quant_pass(e, best_s)) return -1;
        (*iters)++;
    }
    return 0;
}

// Writes one group's Rice codewords into dst (exactly ceil(bits/8) bytes, zeroed by the
// caller) with a register-resident 64-bit accumulator flushed 32 bits at a time; long
// codewords (> 32 bits) go through the reference writer. @return bits written.
static uint64_t write_group(uint8_t *dst, size_t cap, const enc_ctx *e, int64_t t0, int64_t t1, const int *kk) {
    const int T = e->h.tile, n = e->n;
    uint64_t acc = 0, total = 0;
    int nb = 0;
    size_t pos = 0;
    for (int64_t t = t0; t < t1; t++) {
        if (e->invn[t] == 0.0) continue;
        const uint32_t *s = e->sym + t * T;
        for (int i = 0; i < T; i++) {
            const int k = kk[i & (n - 1)];
            const uint32_t v = s[i], q = v >> k;
            const int len = (int)q + 1 + k;
            if (__builtin_expect(len <= 32, 1)) {
                acc |= ((uint64_t)(1u << q) | ((uint64_t)(v & ((1u << k) - 1u)) << (q + 1))) << nb;
                nb += len;
            } else { // flush whole bytes, then the reference writer for this codeword
                kvq_bitwriter w;
                w.buf = dst; w.cap = cap; w.pos = pos; w.acc = acc; w.n = nb; w.overflow = 0;
                kvq_bw_rice(&w, v, k);
                pos = w.pos; acc = w.acc; nb = w.n;
            }
            total += (uint64_t)len;
            while (nb >= 32) {
                uint32_t lo = (uint32_t)acc;
                memcpy(dst + pos, &lo, 4); // little-endian hosts (x86, arm64)
                pos += 4;
                acc >>= 32;
                nb -= 32;
            }
        }
    }
    while (nb > 0) {
        dst[pos++] = (uint8_t)acc;
        acc >>= 8;
        nb -= 8;
    }
    return pos <= cap ? total : ~0ull;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

kvq_status kvq_hq_encode(const kvq_hq_opts *o, const kvq_codec_input *in, kvq_encoded *out,
                         float *recon, kvq_hq_stats *stats, kvq_err *err) {
    const char *name = in->src && in->src->name ? in->src->name : "(unnamed)";
    const int64_t rows = in->rows, cols = in->cols;
    memset(out, 0, sizeof *out);
    if (rows <= 0 || cols <= 0)
        return kvq_err_set(err, KVQ_ERR_ARG, "tensor '%s': hyperquant needs a non-empty matrix", name);
    for (int64_t i = 0; i < rows * cols; i++)
        if (!isfinite(in->x[i]))
            return kvq_err_set(err, KVQ_ERR_NUMERIC, "tensor '%s': non-finite value %g at [%lld, %lld]", name,
                               (double)in->x[i], (long long)(i / cols), (long long)(i % cols));
    if (o->max_tile < KVQ_HQ_MIN_TILE || o->max_tile > KVQ_HQ_MAX_TILE || (o->max_tile & (o->max_tile - 1)))
        return kvq_err_set(err, KVQ_ERR_ARG, "tensor '%s': tile %d is not a power of two in [16, 1024]", name,
                           o->max_tile);
    enc_ctx e = {0};
    e.o = o;
    e.nt = in->n_threads > 0 ? in->n_threads : omp_get_max_threads();
    if (e.nt > rows * cols / (1 << 18) + 1) e.nt = (int)(rows * cols / (1 << 18) + 1); // small tensors: no thread overhead
    e.h.lat = o->lat;
    e.h.int8 = o->int8;
    e.h.cast = o->cast;
    e.h.rows = rows;
    e.h.cols = cols;
    e.h.tile = kvq_hq_tile_for(cols, o->max_tile, &e.h.cols_p);
    e.h.norm_bits = o->norm_bits;
    e.h.seed = in->seed;
    e.n = kvq_lattice_dim(o->lat);
    e.ncls = kvq_lattice_classes(o->lat);
    e.numel = rows * cols;
    e.tpr = e.h.cols_p / e.h.tile;
    e.n_tiles = rows * e.tpr;
    e.n_groups = (e.n_tiles + KVQ_HQ_GROUP_TILES - 1) / KVQ_HQ_GROUP_TILES;
    const int T = e.h.tile, nb = o->norm_bits;
    const size_t np = (size_t)(rows * e.h.cols_p);
    e.rot = malloc(np * sizeof(float));
    e.sym = malloc(np * sizeof(uint32_t));
    e.invn = malloc((size_t)e.n_tiles * sizeof(double));
    e.ncode = malloc((size_t)e.n_tiles * sizeof(uint32_t));
    e.gbits = calloc((size_t)e.n_groups, sizeof(uint64_t));
    e.tacc = malloc(2 * (size_t)e.n_tiles * sizeof(double));
    float *sgn = malloc((size_t)e.h.cols_p * sizeof(float));
    float *rec = recon;
    uint8_t *codes = NULL, *norms = NULL, *offs = NULL;
    kvq_status st = KVQ_OK;
    if (!e.rot || !e.sym || !e.invn || !e.ncode || !e.gbits || !e.tacc || !sgn) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
        goto done;
    }
    kvq_hq_signs(e.h.seed, T, e.h.cols_p, sgn);

    // ---- RHT per tile and norms (double accumulation)
    double maxn = 0.0, sumx2 = 0.0;
    double *nrm = e.invn; // holds the exact norm until the codes are known
#pragma omp parallel for num_threads(e.nt) schedule(static) reduction(max : maxn)
    for (int64_t t = 0; t < e.n_tiles; t++) {
        int64_t row = t / e.tpr, c0 = (t % e.tpr) * T;
        float *r = e.rot + t * T;
        double ss = 0.0;
        for (int i = 0; i < T; i++) {
            float x = c0 + i < cols ? in->x[row * cols + c0 + i] : 0.0f;
            ss += (double)x * (double)x;
            r[i] = x * sgn[c0 + i];
        }
        kvq_wht(r, T);
        nrm[t] = sqrt(ss);
        e.tacc[t] = ss;
        if (nrm[t] > maxn) maxn = nrm[t];
    }
    for (int64_t t = 0; t < e.n_tiles; t++) sumx2 += e.tacc[t];
    int ex = 0;
    if (maxn > 0.0) {
        frexp(maxn, &ex); // maxn < 2^ex
    }
    e.h.norm_exp = ex;
    const double steps = (double)(1 << (nb - 5));
    const uint32_t zero = kvq_hq_norm_zero(nb);
    for (int64_t t = 0; t < e.n_tiles; t++) {
        double q = nrm[t] > 0.0 ? rint(((double)ex - log2(nrm[t])) * steps) : INFINITY;
        if (q < 0.0) q = 0.0;
        if (!(q <= (double)(zero - 1))) { e.ncode[t] = zero; e.invn[t] = 0.0; continue; } // < 2^-31.9 of max
        e.ncode[t] = (uint32_t)q;
        e.invn[t] = 1.0 / kvq_hq_norm_value(&e.h, e.ncode[t]);
    }

    // ---- rate control and the final pass
    int iters = 0;
    if (rate_control(&e, &iters)) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
        goto done;
    }

    // ---- blobs
    size_t nbytes = norms_bytes(&e);
    norms = calloc(nbytes ? nbytes : 1, 1);
    codes = malloc(e.codes_bytes ? e.codes_bytes : 1);
    if (!e.h.int8) offs = malloc(offsets_bytes(&e));
    if (!norms || !codes || (!e.h.int8 && !offs)) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
        goto done;
    }
    {
        kvq_bitwriter w;
        kvq_bw_init(&w, norms, nbytes);
        for (int64_t t = 0; t < e.n_tiles; t++) kvq_bw_put(&w, e.ncode[t], nb);
        kvq_bw_finish(&w);
    }
    if (e.h.int8) {
        for (size_t i = 0; i < np; i++) codes[i] = (uint8_t)(int8_t)(int32_t)e.sym[i];
        for (int64_t t = 0; t < e.n_tiles; t++) // zero tiles: codes unused, store zeros
            if (e.invn[t] == 0.0) memset(codes + t * T, 0, (size_t)T);
    } else {
        uint64_t off = 0;
        for (int64_t g = 0; g < e.n_groups; g++) {
            put32(offs + 4 * g, (uint32_t)off);
            off += (e.gbits[g] + 7) / 8;
        }
        put32(offs + 4 * e.n_groups, (uint32_t)off);
        if (off > 0xffffffffull) {
            st = kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': codes exceed 4 GiB", name);
            goto done;
        }
        int kk[8], bad = 0;
        for (int i = 0; i < e.n; i++) kk[i] = e.h.k[kvq_lattice_symbol_class(e.h.lat, i)];
#pragma omp parallel for num_threads(e.nt) schedule(static) reduction(+ : bad)
        for (int64_t g = 0; g < e.n_groups; g++) {
            uint32_t o0 = (uint32_t)(offs[4 * g] | offs[4 * g + 1] << 8 | offs[4 * g + 2] << 16 |
                                     (uint32_t)offs[4 * g + 3] << 24);
            size_t cap = (size_t)((e.gbits[g] + 7) / 8);
            memset(codes + o0, 0, cap);
            int64_t t1 = (g + 1) * KVQ_HQ_GROUP_TILES < e.n_tiles ? (g + 1) * KVQ_HQ_GROUP_TILES : e.n_tiles;
            bad += write_group(codes + o0, cap, &e, g * KVQ_HQ_GROUP_TILES, t1, kk) != e.gbits[g];
        }
        KVQ_ASSERT(bad == 0);
    }

    // ---- reference reconstruction from the codes (not from the bitstream). Only when the
    // caller wants it, rows are padded (padding error is discarded at decode) or values are
    // near float32's range; otherwise the error is the exact rotated-domain sum (the RHT is
    // orthonormal) and the butterfly pass is skipped.
    double sx = 0.0, se = 0.0;
    int nonfinite = 0;
    int need_recon = recon || e.h.cols_p != cols || maxn > 1e30;
    if (need_recon && !rec && !(rec = malloc((size_t)e.numel * sizeof(float)))) {
        st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
        goto done;
    }
    if (!need_recon) { sx = sumx2; se = e.noise; }
    else {
#pragma omp parallel num_threads(e.nt) reduction(+ : nonfinite)
    {
        float *y = malloc(sizeof(float) * (size_t)T);
        int32_t *c = malloc(sizeof(int32_t) * (size_t)T);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < e.n_tiles; t++) {
            e.tacc[t] = e.tacc[e.n_tiles + t] = 0.0;
            if (!y || !c) { nonfinite = -1000000; continue; }
            int64_t row = t / e.tpr, c0 = (t % e.tpr) * T;
            int64_t ncopy = c0 + T <= cols ? T : (c0 < cols ? cols - c0 : 0);
            if (e.invn[t] != 0.0) {
                const uint32_t *s = e.sym + t * T;
                if (e.h.int8) for (int i = 0; i < T; i++) c[i] = (int32_t)s[i];
                else for (int v = 0; v < T; v += e.n) kvq_lattice_unstrip(e.h.lat, s + v, c + v);
            }
            if (ncopy <= 0) continue;
            float *d = rec + row * cols + c0;
            kvq_hq_tile_recon(&e.h, c, e.ncode[t], sgn + c0, y, d, (int)ncopy);
            const float *x = in->x + row * cols + c0;
            double tx = 0.0, te = 0.0;
            for (int i = 0; i < ncopy; i++) {
                double df = (double)x[i] - (double)d[i];
                tx += (double)x[i] * (double)x[i];
                te += df * df;
                nonfinite += !isfinite(d[i]);
            }
            e.tacc[t] = tx;
            e.tacc[e.n_tiles + t] = te;
        }
        free(y);
        free(c);
    }
    for (int64_t t = 0; t < e.n_tiles; t++) sx += e.tacc[t], se += e.tacc[e.n_tiles + t];
    }
    if (nonfinite < 0) { st = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name); goto done; }
    if (nonfinite > 0) {
        st = kvq_err_set(err, KVQ_ERR_NUMERIC, "tensor '%s': values too large to reconstruct in float32", name);
        goto done;
    }

    // ---- output
    kvq_encoded_add_blob(out, "codes", codes, e.codes_bytes, 0);
    kvq_encoded_add_blob(out, "norms", norms, nbytes, 0);
    codes = norms = NULL;
    if (!e.h.int8) { kvq_encoded_add_blob(out, "offsets", offs, offsets_bytes(&e), 0); offs = NULL; }
    out->params = make_params(&e, 1, 1);
    size_t jfull = json_len(make_params(&e, 1, 1)), jnok = json_len(make_params(&e, 0, 1)),
           jnos = json_len(make_params(&e, 1, 0));
    kvq_encoded_add_part(out, "codes", (double)e.code_bits);
    kvq_encoded_add_part(out, "align", 8.0 * (double)e.codes_bytes - (double)e.code_bits);
    kvq_encoded_add_part(out, "norms", 8.0 * (double)nbytes);
    kvq_encoded_add_part(out, "offsets", 8.0 * (double)offsets_bytes(&e));
    kvq_encoded_add_part(out, "rice_params", 8.0 * (double)(jfull - jnok));
    kvq_encoded_add_part(out, "seed", 8.0 * (double)(jfull - jnos));
    kvq_encoded_add_part(out, "header", 8.0 * (double)(jfull - (jfull - jnok) - (jfull - jnos)));
    out->code_bits_per_weight = (double)e.code_bits / (double)e.numel;
    out->predicted_mse = se / (double)e.numel;
    if (stats) {
        stats->snr_target_db = e.snr_db;
        stats->snr_real_db = se > 0 ? 10.0 * log10(sx / se) : INFINITY;
        stats->code_bpw = out->code_bits_per_weight;
        stats->eff_bpw = kvq_encoded_bpw(out, e.numel);
        stats->iterations = iters;
        stats->clipped = e.clipped;
    }
done:
    free(e.rot);
    free(e.sym);
    free(e.invn);
    free(e.tacc);
    free(e.ncode);
    free(e.gbits);
    free(sgn);
    if (rec != recon) free(rec);
    free(codes);
    free(norms);
    free(offs);
    if (st) kvq_encoded_free(out);
    return st;
}
