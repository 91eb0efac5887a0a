// Perplexity and KL divergence for kvq-verify: the source model and up to three
// other models (converted weights, KV codec, both) step through the same windows in
// lockstep, so the source runs once and no logits are ever stored beyond one chunk.
// Windowing follows libconv/eval.c's protocol exactly (test_verify checks the source
// ppl against kvq_eval_tokens); statistics follow llama.cpp's --kl-divergence.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>

#include "libconv/verify/verify_internal.h"

void kvq_verify_kld_pos(const float *ref, double lse_ref, const float *q, double lse_q, int vocab,
                        int32_t target, double *kld, double *dp, int *same_top) {
    double s = 0;
    int ar = 0, aq = 0;
    for (int v = 0; v < vocab; v++) {
        double lr = (double)ref[v] - lse_ref, lq = (double)q[v] - lse_q;
        s += exp(lr) * (lr - lq);
        if (ref[v] > ref[ar]) ar = v;
        if (q[v] > q[aq]) aq = v;
    }
    *kld = s;
    *dp = exp((double)q[target] - lse_q) - exp((double)ref[target] - lse_ref);
    *same_top = ar == aq;
}

// log Σ exp x in double with libm exp: the KLD needs both distributions normalised to
// double precision (the runtime's kvq_logsumexp uses a fast expf, ~1e-7 relative).
double kvq_verify_lse_exact(const float *x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - (double)m);
    return (double)m + log(s);
}

static int fcmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static double pct(const float *v, size_t n, double f) {
    if (f <= 0) return v[0];
    if (f >= 1) return v[n - 1];
    double p = f * (double)(n - 1);
    size_t i = (size_t)p;
    p -= (double)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

void kvq_verify_kld_stats(float *kld, size_t n, kvq_kld_stats *st) {
    st->n = n;
    if (!n) {
        st->mean = st->median = st->p90 = st->p99 = st->p999 = st->max = st->min = NAN;
        return;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += kld[i];
    st->mean = sum / (double)n;
    qsort(kld, n, sizeof *kld, fcmp);
    st->median = n % 2 ? kld[n / 2] : 0.5 * ((double)kld[n / 2] + kld[n / 2 - 1]);
    st->p90 = pct(kld, n, 0.90);
    st->p99 = pct(kld, n, 0.99);
    st->p999 = pct(kld, n, 0.999);
    st->max = kld[n - 1];
    st->min = kld[0];
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Per-run accumulators beyond what kvq_verify_eval keeps.
typedef struct {
    double kld_sum, dp_sum, dp2_sum, max_abs_dp;
    double nll2_sum, kld2_sum, dp4_sum, d_sum, d2_sum; // for the standard errors (d = NLL_q − NLL_src)
    size_t same_top, cap;
} acc;

static kvq_status push(kvq_verify_eval *r, acc *a, float v) {
    if (r->kld.n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 4096;
        float *p = realloc(r->kld_pos, cap * sizeof *p);
        if (!p) return KVQ_ERR_NOMEM;
        r->kld_pos = p;
        a->cap = cap;
    }
    r->kld_pos[r->kld.n++] = v;
    return KVQ_OK;
}

// The lockstep run goes through the one windowed loop (kvq_eval_windows); per chunk the
// positions' NLL, KLD, Δp and top-1 agreement are computed in parallel, then summed in order
// (sums do not depend on the thread count).
typedef struct {
    int nq, nt;
    double *pos;       // per chunk position: nll_ref, then per run nll, kld, dp, top
    kvq_model **m;     // the source, then the runs' models
    kvq_vscore *vs;    // (chunk) the backend's scores (on_backend chunks)
    vf_lockstep *out;
    kvq_verify_eval *runs;
    acc *a;
    const kvq_verify_opts *o;
    double t0;
} ls_run;

// The chunk's logits stayed where the models ran (a GPU): the backend scores each (source, run)
// pair (kvq_model_vscore: kernels/cuda/verify_score.cu, or its C reference on the CPU) and only
// the per-position numbers come back. NLL here is lse − logit[target] with the exact
// log-sum-exp; the host path's kvq_eval_nll uses the runtime's fast one (~1e-7 relative apart).
static int ls_rows_backend(ls_run *R, const kvq_eval_chunk *c, kvq_err *err) {
    const int nq = R->nq, W = 1 + 4 * nq;
    const int32_t *tg = c->in + c->c0 + 1; // row i predicts in[c0 + i + 1]
    for (int k = 0; k < (nq ? nq : 1); k++) {
        kvq_status s = kvq_model_vscore(R->m[nq ? 1 + k : 0], c->logits[0], c->logits[nq ? 1 + k : 0], tg, c->cn, R->vs, err);
        if (s) return s;
        for (int i = 0; i < c->cn; i++) {
            double *row = R->pos + (size_t)i * W;
            const kvq_vscore *v = &R->vs[i];
            if (!c->scored[i]) { row[0] = NAN; continue; }
            if (k == 0) row[0] = v->nll_ref;
            if (!nq) continue;
            row[1 + 4 * k] = v->nll_q;
            row[2 + 4 * k] = v->kld;
            row[3 + 4 * k] = v->dp;
            row[4 + 4 * k] = v->top_ref == v->top_q;
        }
    }
    return KVQ_OK;
}

// Scores on the host from the downloaded logits (the reference path).
static int ls_rows_host(ls_run *R, const kvq_eval_chunk *c) {
    const int nq = R->nq, W = 1 + 4 * nq, V = c->vocab;
#pragma omp parallel for schedule(dynamic, 4) num_threads(R->nt > 0 ? R->nt : omp_get_max_threads())
    for (int i = 0; i < c->cn; i++) {
        int j = c->c0 + i + 1;
        double *row = R->pos + (size_t)i * W;
        row[0] = NAN;
        if (!c->scored[i]) continue;
        const float *fr = c->logits[0] + (size_t)i * V;
        row[0] = kvq_eval_nll(fr, V, c->in[j], NULL); // as the runtime's perplexity
        double lse_r = kvq_verify_lse_exact(fr, V);
        for (int k = 0; k < nq; k++) {
            const float *fq = c->logits[1 + k] + (size_t)i * V;
            double kl, dp;
            int top;
            row[1 + 4 * k] = kvq_eval_nll(fq, V, c->in[j], NULL);
            double lse_q = kvq_verify_lse_exact(fq, V);
            kvq_verify_kld_pos(fr, lse_r, fq, lse_q, V, c->in[j], &kl, &dp, &top);
            row[2 + 4 * k] = kl;
            row[3 + 4 * k] = dp;
            row[4 + 4 * k] = top;
        }
    }
    return KVQ_OK;
}

static int ls_chunk(void *u, const kvq_eval_chunk *c, kvq_err *err) {
    ls_run *R = u;
    const int nq = R->nq, W = 1 + 4 * nq;
    int s = c->on_backend ? ls_rows_backend(R, c, err) : ls_rows_host(R, c);
    if (s) return s;
    for (int i = 0; i < c->cn; i++) { // in order
        const double *row = R->pos + (size_t)i * W;
        if (isnan(row[0])) continue;
        R->out->ref_nll += row[0];
        R->out->ref_nll2 += row[0] * row[0];
        R->out->n_scored++;
        for (int k = 0; k < nq; k++) {
            kvq_verify_eval *e = &R->runs[k];
            acc *ak = &R->a[k];
            const double nq_ = row[1 + 4 * k], kl = row[2 + 4 * k], d = nq_ - row[0];
            e->nll_sum += nq_;
            ak->nll2_sum += nq_ * nq_;
            ak->d_sum += d;
            ak->d2_sum += d * d;
            ak->kld_sum += kl;
            ak->kld2_sum += kl * kl;
            double dp = row[3 + 4 * k];
            ak->dp_sum += dp;
            ak->dp2_sum += dp * dp;
            ak->dp4_sum += dp * dp * dp * dp;
            if (fabs(dp) > ak->max_abs_dp) ak->max_abs_dp = fabs(dp);
            ak->same_top += row[4 + 4 * k] != 0;
            if (push(e, ak, (float)row[2 + 4 * k]))
                return kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory for per-position KLDs");
        }
    }
    return KVQ_OK;
}

static void ls_window(void *u, size_t done, size_t total, size_t used) {
    ls_run *R = u;
    R->out->n_windows = done;
    R->out->n_used = used;
    if (R->o->progress) {
        kvq_verify_progress pr = {done, total, "eval", now_s() - R->t0};
        R->o->progress(R->o->progress_ud, &pr);
    }
}

// Where the positions are scored: KVQ_VERIFY_DEVICE_SCORE=1 on the models' backend (a GPU's
// kernel; on the CPU, the kernel's C reference: the same plumbing), 0 on the host from downloaded
// logits (the reference); unset: on the backend when every model runs on the same non-CPU backend.
static kvq_status score_where(kvq_model *const *m, int nm, int *keep, kvq_err *err) {
    const char *e = getenv("KVQ_VERIFY_DEVICE_SCORE");
    const char *be = kvq_model_backend_name(m[0]);
    int same = 1;
    for (int k = 1; k < nm; k++) same &= !strcmp(kvq_model_backend_name(m[k]), be);
    if (!e || !*e) { *keep = same && strcmp(be, "cpu") != 0; return KVQ_OK; }
    if (!strcmp(e, "0")) { *keep = 0; return KVQ_OK; }
    if (strcmp(e, "1")) return kvq_err_set(err, KVQ_ERR_ARG, "KVQ_VERIFY_DEVICE_SCORE=%s: expected 0 or 1", e);
    if (!same) return kvq_err_set(err, KVQ_ERR_ARG, "KVQ_VERIFY_DEVICE_SCORE=1: the models run on different backends");
    *keep = 1;
    return KVQ_OK;
}

kvq_status kvq_verify_lockstep(kvq_model *ref, kvq_model **q, int nq, const int32_t *ids, size_t n,
                               const kvq_eval_protocol *p, size_t max_windows, vf_lockstep *out,
                               kvq_verify_eval *runs, const kvq_verify_opts *o, kvq_err *err) {
    memset(out, 0, sizeof *out);
    const int V = kvq_model_arch(ref)->vocab_size;
    for (int k = 0; k < nq; k++)
        if (kvq_model_arch(q[k])->vocab_size != V)
            return kvq_err_set(err, KVQ_ERR_ARG, "verify: vocabularies differ (source %d, %s %d)", V, runs[k].label,
                               kvq_model_arch(q[k])->vocab_size);
    const int C = p->chunk > 0 ? p->chunk : 128;
    kvq_model *m[1 + 8];
    const char *labels[1 + 8] = {NULL};
    if (nq > 8) return kvq_err_set(err, KVQ_ERR_ARG, "verify: at most 8 models beside the source");
    m[0] = ref;
    for (int k = 0; k < nq; k++) { m[1 + k] = q[k]; labels[1 + k] = runs[k].label; }
    acc a[8];
    memset(a, 0, sizeof a);
    ls_run R = {nq, o->n_threads > 0 ? o->n_threads : 0, NULL, m, NULL, out, runs, a, o, now_s()};
    kvq_eval_protocol pw = *p;
    kvq_status r = score_where(m, 1 + nq, &pw.keep_logits, err);
    if (r) return r;
    if (!(R.pos = malloc(sizeof(double) * (size_t)C * (1 + 4 * (nq ? nq : 1)))) ||
        (pw.keep_logits && !(R.vs = malloc(sizeof(kvq_vscore) * (size_t)C)))) {
        free(R.pos);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory for logits");
    }
    if ((r = kvq_eval_windows(m, 1 + nq, labels, "verify", ids, n, &pw, max_windows, ls_chunk, ls_window, &R, NULL, err)))
        goto done;
    if (out->n_scored == 0) { r = kvq_err_set(err, KVQ_ERR_ARG, "verify: the text gives no scored position under this protocol (%zu tokens, ctx %d)", n, p->ctx); goto done; }
    out->ref_ppl = exp(out->ref_nll / (double)out->n_scored);
    out->ref_ppl_se = out->ref_ppl * kvq_mean_se(out->ref_nll, out->ref_nll2, out->n_scored);
    for (int k = 0; k < nq; k++) {
        kvq_verify_eval *e = &runs[k];
        double N = (double)out->n_scored;
        e->done = 1;
        e->ppl = exp(e->nll_sum / N);
        e->dppl = e->ppl - out->ref_ppl;
        e->dppl_rel = e->dppl / out->ref_ppl;
        float *sorted = malloc(sizeof(float) * (e->kld.n ? e->kld.n : 1));
        if (!sorted) { r = kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory"); goto done; }
        memcpy(sorted, e->kld_pos, sizeof(float) * e->kld.n);
        kvq_verify_kld_stats(sorted, e->kld.n, &e->kld);
        free(sorted);
        e->kld.mean = a[k].kld_sum / N; // double-accumulated, not from the float copies
        e->kld.top1 = (double)a[k].same_top / N;
        e->kld.mean_dp = a[k].dp_sum / N;
        e->kld.rms_dp = sqrt(a[k].dp2_sum / N);
        e->kld.max_abs_dp = a[k].max_abs_dp;
        const size_t n = out->n_scored;
        e->ppl_se = e->ppl * kvq_mean_se(e->nll_sum, a[k].nll2_sum, n);
        e->dppl_se = e->ppl * kvq_mean_se(a[k].d_sum, a[k].d2_sum, n);
        e->kld.mean_se = kvq_mean_se(a[k].kld_sum, a[k].kld2_sum, n);
        e->kld.top1_se = kvq_mean_se((double)a[k].same_top, (double)a[k].same_top, n); // x ∈ {0, 1}: x² = x
        e->kld.mean_dp_se = kvq_mean_se(a[k].dp_sum, a[k].dp2_sum, n);
        e->kld.rms_dp_se = e->kld.rms_dp > 0 ? kvq_mean_se(a[k].dp2_sum, a[k].dp4_sum, n) / (2 * e->kld.rms_dp) : 0.0;
    }
done:
    free(R.pos);
    free(R.vs);
    return r;
}
