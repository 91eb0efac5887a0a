// Synthetic KV-codec benchmarks: OCTOPUS Table 1 protocol (Gaussian keys/queries,
// d=128), the split sweep (Table 4), the rounding ablation (Table 5), the synthetic
// needle, and encode/decode throughput. Prints markdown tables; asserts nothing.
// Usage: bench_kv_synth [table1|table4|table5|needle|speed|all] [seeds] [spec filter for table1/needle]
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libconv/kv/kvcodec.h"

static kvq_kvcodec *mk(const char *spec, int d, uint64_t seed) {
    kvq_kvspec s;
    kvq_err e = {0};
    kvq_kvcodec *c = NULL;
    if (kvq_kvspec_parse(spec, &s, &e) || kvq_kvcodec_new(&s, d, KVQ_KV_K, seed, &c, &e)) {
        fprintf(stderr, "%s: %s\n", spec, e.msg);
        exit(1);
    }
    return c;
}

static void gauss(float *x, size_t n, uint64_t seed) {
    kvq_kvrng r = {seed};
    for (size_t i = 0; i < n; i++) x[i] = (float)kvq_kvrng_normal(&r);
}

typedef struct { double cos, mse, ip, tail95, bits; } metrics;

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// n keys, nq queries, d; one seed. Keys through encode/decode; scores through the
// codec's own estimator (score() when it has one).
static metrics run_one(const char *spec, int d, int n, int nq, uint64_t seed) {
    kvq_kvcodec *c = mk(spec, d, seed * 7919 + 1);
    float *k = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d), *q = malloc(sizeof(float) * nq * d);
    float *s = malloc(sizeof(float) * n);
    double *per = malloc(sizeof(double) * n);
    gauss(k, (size_t)n * d, seed * 2 + 100);
    gauss(q, (size_t)nq * d, seed * 2 + 101);
    size_t cap = kvq_kvcodec_bound(c, n), *off = malloc(sizeof(size_t) * (n + 1));
    uint8_t *b = malloc(cap);
    kvq_kvcodec_encode(c, k, n, b, cap, off, NULL);
    kvq_kvcodec_decode(c, b, off, n, y);
    metrics m = {0};
    m.bits = kvq_kvcodec_bits_stored(c, off, n);
    for (int t = 0; t < n; t++) {
        double kk = 0, yy = 0, ky = 0, e = 0;
        for (int i = 0; i < d; i++) {
            double a = k[t * d + i], h = y[t * d + i];
            kk += a * a, yy += h * h, ky += a * h, e += (a - h) * (a - h);
        }
        m.cos += ky / sqrt(kk * yy + 1e-30) / n;
        per[t] = e / kk;
        m.mse += per[t] / n;
    }
    qsort(per, n, sizeof *per, cmpd);
    m.tail95 = per[(int)(0.95 * n)];
    const uint8_t **rec = malloc(sizeof(*rec) * n);
    uint32_t *len = malloc(sizeof(*len) * n);
    for (int t = 0; t < n; t++) rec[t] = b + off[t], len[t] = (uint32_t)(off[t + 1] - off[t]);
    for (int j = 0; j < nq; j++) {
        if (c->vt->score && c->group == 1) c->vt->score(c, q + j * d, 1, rec, len, n, s, n);
        else
            for (int t = 0; t < n; t++) {
                s[t] = 0;
                for (int i = 0; i < d; i++) s[t] += q[j * d + i] * y[t * d + i];
            }
        for (int t = 0; t < n; t++) {
            double ip = 0;
            for (int i = 0; i < d; i++) ip += (double)q[j * d + i] * k[t * d + i];
            m.ip += fabs(ip - s[t]) / ((double)n * nq);
        }
    }
    free(k), free(y), free(q), free(s), free(per), free(off), free(b), free(rec), free(len);
    kvq_kvcodec_free(c);
    return m;
}

static metrics run_avg(const char *spec, int d, int n, int nq, int seeds) {
    metrics acc = {0};
#pragma omp parallel for schedule(dynamic)
    for (int sd = 0; sd < seeds; sd++) {
        metrics m = run_one(spec, d, n, nq, (uint64_t)sd);
#pragma omp critical
        {
            acc.cos += m.cos / seeds, acc.mse += m.mse / seeds, acc.ip += m.ip / seeds;
            acc.tail95 += m.tail95 / seeds, acc.bits += m.bits / seeds;
        }
    }
    return acc;
}

static const char *filter; // only specs containing this (argv[3])

static void table1(int seeds) {
    printf("\n### Table 1 protocol: 1024 Gaussian keys, 16 queries, d=128, %d seeds\n\n", seeds);
    printf("| bits | codec | eff. bits (K) | cos | MSE (unit key) | IP abs err | paper MSE | paper cos | paper IP |\n|---|---|---|---|---|---|---|---|---|\n");
    struct { const char *fmt; const char *label; double p[3][3]; } rows[] = {
        {"turboquant:%d", "TurboQuant-MSE", {{0.9406, 0.1161, 3.054}, {0.9831, 0.0340, 1.650}, {0.9954, 0.0094, 0.866}}},
        {"turboquant-prod:%d", "TurboQuant-QJL", {{0.7994, 0.3610, 5.427}, {0.9406, 0.1161, 3.072}, {0.9831, 0.0340, 1.660}}},
        {"octopus:%d", "OCTOPUS", {{0.9547, 0.0897, 2.682}, {0.9871, 0.0260, 1.444}, {0.9965, 0.0071, 0.753}}},
        {"octopus:%d:qjl", "OCTOPUS-QJL", {{0.9547, 0.0897, 2.015}, {0.9871, 0.0260, 1.084}, {0.9965, 0.0071, 0.565}}},
        {"qturbo:%d", "qturbo (ours only)", {{NAN}}},
        {"int:%d", "int (ours only)", {{NAN}}},
        {"kivi:%d", "KIVI keys (ours only)", {{NAN}}},
        {"hqmq", "HQMQ (ours only)", {{NAN}}},
        {"hqkv:e8:%d:rot=signs", "HyperQuant-KV (ours only)", {{NAN}}},
        {"hqkv:e8:%d:rot=qjl:dither", "HyperQuant-KV dither (ours only)", {{NAN}}},
    };
    const char *hq[3] = {"hqmq:s1:r3", "hqmq:s6:r4", "hqmq:s96:r4"};
    for (int b = 2; b <= 4; b++)
        for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
            char spec[40];
            if (!strcmp(rows[r].fmt, "hqmq")) snprintf(spec, sizeof spec, "%s", hq[b - 2]);
            else snprintf(spec, sizeof spec, rows[r].fmt, b);
            if (filter && !strstr(spec, filter)) continue;
            metrics m = run_avg(spec, 128, 1024, 16, seeds);
            printf("| %d | %s `%s` | %.3f | %.4f | %.4f | %.3f |", b, rows[r].label, spec, m.bits, m.cos, m.mse, m.ip);
            if (isnan(rows[r].p[0][0])) printf(" – | – | – |\n");
            else printf(" %.4f | %.4f | %.3f |\n", rows[r].p[b - 2][1], rows[r].p[b - 2][0], rows[r].p[b - 2][2]);
            fflush(stdout);
        }
}

static void table4(int seeds) {
    printf("\n### Table 4 protocol: OCTOPUS split sweep (b+δ, b−δ), 8192 keys, d=128, %d seeds\n\n", seeds);
    printf("| b | δ | b_dir | b_norm | MSE | 1−cos | ΔMSE vs (b,b) | paper MSE | paper ΔMSE |\n|---|---|---|---|---|---|---|---|---|\n");
    const double pub[3][5] = {{NAN, 0.4555, 0.1409, 0.0831, NAN}, {0.4501, 0.1273, 0.0374, 0.0243, 0.0537}, {0.1262, 0.0332, 0.0096, 0.0067, 0.0166}};
    for (int b = 2; b <= 4; b++) {
        metrics res[5];
        int ok[5];
        for (int dl = -2; dl <= 2; dl++) {
            ok[dl + 2] = b + dl >= 1 && b - dl >= 1;
            if (!ok[dl + 2]) continue;
            char spec[40];
            snprintf(spec, sizeof spec, "octopus:%d:split=%d", b, dl);
            res[dl + 2] = run_avg(spec, 128, 8192, 1, seeds);
        }
        for (int dl = -2; dl <= 2; dl++) {
            if (!ok[dl + 2]) continue;
            const double *p = pub[b - 2];
            printf("| %d | %+d | %d | %d | %.4f | %.4f | %+.1f%% | %.4f | %+.1f%% |\n", b, dl, b + dl, b - dl,
                   res[dl + 2].mse, 1 - res[dl + 2].cos, 100 * (res[dl + 2].mse / res[2].mse - 1), p[dl + 2],
                   100 * (p[dl + 2] / p[2] - 1));
        }
        fflush(stdout);
    }
}

static void table5(int seeds) {
    printf("\n### Table 5 protocol: OCTOPUS rounding ablation, 4096 keys, 64 queries, d=128, %d seeds\n\n", seeds);
    printf("| b | rounding | cos | MSE | tail95 | IP err | ΔMSE vs scalar | paper MSE |\n|---|---|---|---|---|---|---|---|\n");
    const char *modes[4] = {"scalar", "2x2", "3x3", "full"};
    const double pub[4][4] = {{0.6022, 0.5172, 0.5172, 0.5172}, {0.0897, 0.0858, 0.0832, 0.0832},
                              {0.0261, 0.0250, 0.0243, 0.0243}, {0.0071, 0.0068, 0.0067, 0.0067}};
    for (int b = 1; b <= 4; b++) {
        double ref = 0;
        for (int r = 0; r < 4; r++) {
            char spec[48];
            snprintf(spec, sizeof spec, "octopus:%d:round=%s", b, modes[r]);
            metrics m = run_avg(spec, 128, 4096, 64, seeds);
            if (r == 0) ref = m.mse;
            printf("| %d | %s | %.4f | %.4f | %.4f | %.3f | %+.1f%% | %.4f |\n", b, modes[r], m.cos, m.mse, m.tail95, m.ip,
                   100 * (m.mse / ref - 1), pub[b - 1][r]);
            fflush(stdout);
        }
    }
}

static void needle(int seeds) {
    const int T = 2048, d = 128;
    printf("\n### Synthetic needle: 1 key among %d Gaussian distractors, query = needle + 0.1·N(0,I), d=128, %d seeds\n\n", T, seeds);
    printf("| codec | bits | softmax mass on needle |\n|---|---|---|\n");
    const char *specs[] = {"fp32", "turboquant:2", "turboquant-prod:2", "octopus:2", "octopus:2:qjl", "qturbo:2",
                           "hqmq:s1:r3", "int:2", "kivi:2", "turboquant:3", "octopus:3", "octopus:3:qjl",
                           "turboquant-prod:3", "turboquant:4", "octopus:4", "hqkv:e8:2:rot=qjl:dither",
                           "hqkv:e8:3:rot=qjl:dither", "hqkv:e8:3:rot=signs"};
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        if (filter && i > 0 && !strstr(specs[i], filter)) continue;
        double mass = 0, bits = 32;
#pragma omp parallel for schedule(dynamic) reduction(+ : mass)
        for (int sd = 0; sd < seeds; sd++) {
            float *k = malloc(sizeof(float) * (T + 1) * d), *q = malloc(sizeof(float) * d), *s = malloc(sizeof(float) * (T + 1));
            gauss(k, (size_t)(T + 1) * d, 500 + sd);
            gauss(q, d, 900 + sd);
            for (int j = 0; j < d; j++) q[j] = k[j] + 0.1f * q[j]; // needle = key 0
            if (!strcmp(specs[i], "fp32")) {
                for (int t = 0; t <= T; t++) {
                    s[t] = 0;
                    for (int j = 0; j < d; j++) s[t] += q[j] * k[t * d + j];
                }
            } else {
                kvq_kvcodec *c = mk(specs[i], d, 31 + sd);
                size_t cap = kvq_kvcodec_bound(c, T + 32), *off = malloc(sizeof(size_t) * (T + 33));
                uint8_t *b = malloc(cap);
                float *y = malloc(sizeof(float) * (T + 32) * d);
                int n = (T + 1 + c->group - 1) / c->group * c->group;
                float *kp = calloc((size_t)n * d, sizeof(float));
                memcpy(kp, k, sizeof(float) * (T + 1) * d);
                kvq_kvcodec_encode(c, kp, n, b, cap, off, NULL);
                if (c->vt->score && c->group == 1) {
                    const uint8_t **rec = malloc(sizeof(*rec) * (T + 1));
                    uint32_t *len = malloc(sizeof(*len) * (T + 1));
                    for (int t = 0; t <= T; t++) rec[t] = b + off[t], len[t] = (uint32_t)(off[t + 1] - off[t]);
                    c->vt->score(c, q, 1, rec, len, T + 1, s, T + 1);
                    free(rec), free(len);
                } else {
                    kvq_kvcodec_decode(c, b, off, n, y);
                    for (int t = 0; t <= T; t++) {
                        s[t] = 0;
                        for (int j = 0; j < d; j++) s[t] += q[j] * y[t * d + j];
                    }
                }
#pragma omp critical
                bits = kvq_kvcodec_bits_stored(c, off, n);
                free(off), free(b), free(y), free(kp);
                kvq_kvcodec_free(c);
            }
            float m = -INFINITY;
            double z = 0;
            for (int t = 0; t <= T; t++) m = fmaxf(m, s[t] / sqrtf(d));
            for (int t = 0; t <= T; t++) z += exp(s[t] / sqrtf(d) - m);
            mass += exp(s[0] / sqrtf(d) - m) / z / seeds;
            free(k), free(q), free(s);
        }
        printf("| `%s` | %.3f | %.4f |\n", specs[i], bits, mass);
        fflush(stdout);
    }
}

static void speed(void) {
    const int n = 4096, d = 128;
    printf("\n### Throughput, d=128, %d tokens, 1 thread (tokens/s; score = one query against all keys)\n\n", n);
    printf("| codec | encode tok/s | decode tok/s | score keys/s |\n|---|---|---|---|\n");
    const char *specs[] = {"fp16", "int:4", "kivi:4", "hqmq:s96:r4", "hqmq:s96:r4:med3", "octopus:3", "octopus:3:qjl",
                           "turboquant:3", "turboquant-prod:3", "qturbo:3", "hqkv:e8:3:rot=signs",
                           "hqkv:e8:3:rot=qjl:dither"};
    float *x = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d), q[128], *s = malloc(sizeof(float) * n);
    gauss(x, (size_t)n * d, 1);
    gauss(q, d, 2);
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        kvq_kvcodec *c = mk(specs[i], d, 1);
        size_t cap = kvq_kvcodec_bound(c, n), *off = malloc(sizeof(size_t) * (n + 1));
        uint8_t *b = malloc(cap);
        double t0 = omp_get_wtime();
        kvq_kvcodec_encode(c, x, n, b, cap, off, NULL);
        double t1 = omp_get_wtime();
        kvq_kvcodec_decode(c, b, off, n, y);
        double t2 = omp_get_wtime();
        double sc = NAN;
        if (c->vt->score && c->group == 1) {
            const uint8_t **rec = malloc(sizeof(*rec) * n);
            uint32_t *len = malloc(sizeof(*len) * n);
            for (int t = 0; t < n; t++) rec[t] = b + off[t], len[t] = (uint32_t)(off[t + 1] - off[t]);
            double t3 = omp_get_wtime();
            c->vt->score(c, q, 1, rec, len, n, s, n);
            sc = n / (omp_get_wtime() - t3);
            free(rec), free(len);
        }
        printf("| `%s` | %.3g | %.3g | %.3g |\n", specs[i], n / (t1 - t0), n / (t2 - t1), sc);
        free(off), free(b);
        kvq_kvcodec_free(c);
    }
    free(x), free(y), free(s);
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "all";
    int seeds = argc > 2 ? atoi(argv[2]) : 0;
    int all = !strcmp(what, "all");
    filter = argc > 3 ? argv[3] : NULL;
    if (all || !strcmp(what, "table1")) table1(seeds ? seeds : 64);
    if (all || !strcmp(what, "table4")) table4(seeds ? seeds : 4);
    if (all || !strcmp(what, "table5")) table5(seeds ? seeds : 5);
    if (all || !strcmp(what, "needle")) needle(seeds ? seeds : 128);
    if (all || !strcmp(what, "speed")) speed();
    return 0;
}
