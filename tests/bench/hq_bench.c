// HyperQuant benchmarks (print figures, assert nothing):
//   build/bench/hq_bench rd [n_tiles]         rate–distortion on iid Gaussian tiles, 15–30 dB
//   build/bench/hq_bench speed [rows cols]    encode/decode speed, 1 thread and all threads
//   build/bench/hq_bench norms [rows cols]    norm precision (nb) vs SNR and rate at 4.0 bps
// Results and commands: docs/results/hq.md.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libconv/codec/hyperquant/hqcal.h"
#include "libconv/codec/hyperquant/hyperquant.h"
#include "tests/testrng.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}


static int bench_rd(long n_tiles) {
    static const double pub21[KVQ_LAT_COUNT] = {3.74, 3.77, 3.81, 3.84};
    printf("# iid Gaussian, %ld tiles of 128 per point, seed 7 (independent of the table's seed 42)\n", n_tiles);
    printf("| lattice | target SNR dB | realized SNR dB | rate b/sc | ideal R_D+½log2(2πeG) | rate−ideal | marginal entropy | k | overflow |c|>127 | table rate | paper @21 dB |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int l = 0; l < KVQ_LAT_COUNT; l++)
        for (double snr = 15.0; snr <= 30.0 + 1e-9; snr += 3.0) {
            kvq_hqcal_result r;
            if (kvq_hqcal_measure((kvq_lattice)l, snr, 128, n_tiles, 7, &r)) return 1;
            double ideal = 0.5 * log2(pow(10, snr / 10)) + 0.5 * log2(2 * M_PI * M_E * kvq_lattice_G((kvq_lattice)l));
            char k[16];
            if (kvq_lattice_classes((kvq_lattice)l) > 1) snprintf(k, sizeof k, "%d,%d", r.k[0], r.k[1]);
            else snprintf(k, sizeof k, "%d", r.k[0]);
            char pub[16] = "";
            if (fabs(snr - 21.0) < 1e-9) snprintf(pub, sizeof pub, "%.2f", pub21[l]);
            printf("| %s | %.1f | %.3f | %.4f | %.4f | %+.4f | %.4f | %s | %llu | %.4f | %s |\n", kvq_lattice_name(l), snr,
                   r.snr_real_db, r.rate, ideal, r.rate - ideal, r.entropy, k, (unsigned long long)r.overflow,
                   kvq_hqcal_rate_for_snr((kvq_lattice)l, snr), pub);
            fflush(stdout);
        }
    return 0;
}

static float *gauss_matrix(long rows, long cols, double sd) {
    float *x = malloc(sizeof(float) * rows * cols);
    uint64_t s = 1;
    for (long i = 0; i < rows * cols; i++) x[i] = (float)(sd * gauss(&s));
    return x;
}

static void views(const kvq_encoded *e, kvq_blob_view *v) {
    for (int i = 0; i < e->n_blob; i++) v[i] = (kvq_blob_view){e->blob[i].role, e->blob[i].data, e->blob[i].size};
}

static int bench_speed(long rows, long cols) {
    float *x = gauss_matrix(rows, cols, 0.02), *d = malloc(sizeof(float) * rows * cols);
    int maxt = omp_get_max_threads();
    printf("# %ld x %ld Gaussian matrix (%.1f M weights), target 4.0 bps; %d threads available\n", rows, cols,
           rows * cols / 1e6, maxt);
    printf("CPU = weights per CPU-second of the process (per-core throughput, robust to other load);\n");
    printf("wall = weights per wall-second (what this run saw on the shared machine).\n\n");
    printf("| lattice | threads | encode M w/s CPU | encode M w/s wall | passes | decode M w/s CPU | decode M w/s wall | decode ref M w/s CPU | eff bpw |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int l = 0; l < KVQ_LAT_COUNT; l++)
        for (int nt = 1; nt <= maxt; nt = nt == maxt ? maxt + 1 : (nt * 2 > maxt ? maxt : nt * 2)) {
            kvq_hq_opts o = kvq_hq_opts_default((kvq_lattice)l, 4.0);
            kvq_codec_input in = {NULL, x, rows, cols, 42, nt, NULL};
            kvq_encoded e;
            kvq_err err;
            kvq_hq_stats st;
            double t0 = now(), c0 = cpu();
            if (kvq_hq_encode(&o, &in, &e, NULL, &st, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            double te = now() - t0, ce = cpu() - c0;
            kvq_hq_header h;
            kvq_hq_header_parse(e.params, rows, cols, &h, &err);
            kvq_blob_view v[KVQ_MAX_BLOBS];
            views(&e, v);
            double td = 1e30, cd = 1e30, cr = 1e30;
            for (int r = 0; r < 3; r++) {
                t0 = now();
                c0 = cpu();
                kvq_hq_decode(&h, v, e.n_blob, d, nt, &err);
                double t = now() - t0, c = cpu() - c0;
                if (t < td) td = t;
                if (c < cd) cd = c;
            }
            if (nt == 1) { c0 = cpu(); kvq_hq_decode_ref(&h, v, e.n_blob, d, &err); cr = cpu() - c0; }
            char ref[32] = "";
            double n = (double)rows * (double)cols;
            if (nt == 1) snprintf(ref, sizeof ref, "%.1f", n / cr / 1e6);
            printf("| %s | %d | %.1f | %.1f | %d | %.1f | %.1f | %s | %.4f |\n", kvq_lattice_name(l), nt, n / ce / 1e6,
                   n / te / 1e6, st.iterations, n / cd / 1e6, n / td / 1e6, ref, st.eff_bpw);
            fflush(stdout);
            kvq_encoded_free(&e);
        }
    free(x);
    free(d);
    return 0;
}

static int bench_norms(long rows, long cols) {
    // heavy-tailed rows (Student-t-like scale mixture) so tile norms vary as in real weights
    float *x = malloc(sizeof(float) * rows * cols);
    uint64_t s = 3;
    for (long r = 0; r < rows; r++) {
        double sc = exp(0.7 * gauss(&s));
        for (long c = 0; c < cols; c++) x[r * cols + c] = (float)(0.02 * sc * gauss(&s) * (c % 97 == 0 ? 8 : 1));
    }
    printf("# norm precision: %ld x %ld scale-mixture matrix, E8\n", rows, cols);
    printf("| target bps | nb | norm bpw | realized SNR dB | SNR target dB | eff bpw |\n|---|---|---|---|---|---|\n");
    const double bps[] = {3.0, 4.0, 5.0};
    for (int b = 0; b < 3; b++)
        for (int nb = 8; nb <= 16; nb += (nb == 12 ? 4 : 2)) {
            kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, bps[b]);
            o.norm_bits = nb;
            kvq_codec_input in = {NULL, x, rows, cols, 42, 0, NULL};
            kvq_encoded e;
            kvq_err err;
            kvq_hq_stats st;
            if (kvq_hq_encode(&o, &in, &e, NULL, &st, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            printf("| %.1f | %d | %.4f | %.3f | %.3f | %.4f |\n", bps[b], nb, nb / 128.0, st.snr_real_db,
                   st.snr_target_db, st.eff_bpw);
            kvq_encoded_free(&e);
        }
    free(x);
    return 0;
}

// Encode-only loop for profiling (perf record build/bench/hq_bench encprof).
static int bench_encprof(long rows, long cols) {
    float *x = gauss_matrix(rows, cols, 0.02);
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 4.0);
    kvq_codec_input in = {NULL, x, rows, cols, 42, 1, NULL};
    double c0 = cpu();
    for (int r = 0; r < 5; r++) {
        kvq_encoded e;
        kvq_err err;
        if (kvq_hq_encode(&o, &in, &e, NULL, NULL, &err)) return 1;
        kvq_encoded_free(&e);
    }
    printf("encode E8 4.0: %.1f M w/s CPU\n", 5.0 * rows * cols / (cpu() - c0) / 1e6);
    free(x);
    return 0;
}

// Decode-only loop for profiling (perf record build/bench/hq_bench decprof).
static int bench_decprof(long rows, long cols) {
    float *x = gauss_matrix(rows, cols, 0.02), *d = malloc(sizeof(float) * rows * cols);
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 4.0);
    kvq_codec_input in = {NULL, x, rows, cols, 42, 1, NULL};
    kvq_encoded e;
    kvq_err err;
    kvq_hq_header h;
    if (kvq_hq_encode(&o, &in, &e, NULL, NULL, &err) || kvq_hq_header_parse(e.params, rows, cols, &h, &err)) return 1;
    kvq_blob_view v[KVQ_MAX_BLOBS];
    views(&e, v);
    double c0 = cpu();
    for (int r = 0; r < 10; r++) kvq_hq_decode(&h, v, e.n_blob, d, 1, &err);
    printf("decode E8 4.0: %.1f M w/s CPU\n", 10.0 * rows * cols / (cpu() - c0) / 1e6);
    kvq_encoded_free(&e);
    free(x);
    free(d);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "rd";
    if (strcmp(mode, "decprof") == 0) return bench_decprof(1024, 2048);
    if (strcmp(mode, "encprof") == 0) return bench_encprof(1024, 2048);
    if (strcmp(mode, "rd") == 0) return bench_rd(argc > 2 ? atol(argv[2]) : 100000);
    if (strcmp(mode, "speed") == 0) return bench_speed(argc > 3 ? atol(argv[2]) : 4096, argc > 3 ? atol(argv[3]) : 4096);
    if (strcmp(mode, "norms") == 0) return bench_norms(argc > 3 ? atol(argv[2]) : 2048, argc > 3 ? atol(argv[3]) : 2048);
    fprintf(stderr, "usage: hq_bench rd [n_tiles] | speed [rows cols] | norms [rows cols]\n");
    return 2;
}
