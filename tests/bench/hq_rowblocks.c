// Emulates per-row-block HyperQuant rates (issue 22 diagnostics): a float32 (rows, cols) matrix,
// cut into row blocks each encoded as its own HyperQuant-E8 tensor at its own rate; writes the
// reconstruction (float32, same shape) and prints the stored bytes of every block and in all.
// Nothing here is a file format: it measures what a per-row-block split would buy.
// Run: build/bench/hq_rowblocks IN.f32 ROWS COLS BLOCKS.txt OUT.f32   (BLOCKS: "r0 r1 bps" lines)
#include <stdio.h>
#include <stdlib.h>

#include "libconv/codec/hyperquant/hyperquant.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: hq_rowblocks IN.f32 ROWS COLS BLOCKS.txt OUT.f32\n");
        return 2;
    }
    long rows = atol(argv[2]), cols = atol(argv[3]);
    if (rows <= 0 || cols <= 0) { fprintf(stderr, "hq_rowblocks: bad shape\n"); return 2; }
    float *x = malloc(sizeof(float) * rows * cols), *y = calloc((size_t)rows * cols, sizeof(float));
    FILE *f = fopen(argv[1], "rb");
    if (!x || !y || !f || fread(x, sizeof(float), rows * cols, f) != (size_t)(rows * cols)) {
        fprintf(stderr, "hq_rowblocks: %s: cannot read %ld x %ld float32\n", argv[1], rows, cols);
        return 1;
    }
    fclose(f);
    FILE *b = fopen(argv[4], "r");
    if (!b) { fprintf(stderr, "hq_rowblocks: %s: cannot open\n", argv[4]); return 1; }
    long r0, r1, covered = 0;
    double bps, total = 0;
    while (fscanf(b, "%ld %ld %lf", &r0, &r1, &bps) == 3) {
        if (r0 < 0 || r1 > rows || r1 <= r0) { fprintf(stderr, "hq_rowblocks: bad block %ld %ld\n", r0, r1); return 1; }
        kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, bps);
        kvq_codec_input in = {.x = x + r0 * cols, .rows = r1 - r0, .cols = cols, .seed = 1234 + (uint64_t)r0, .n_threads = 1};
        kvq_encoded e = {0};
        kvq_hq_stats st;
        kvq_err err;
        if (kvq_hq_encode(&o, &in, &e, y + r0 * cols, &st, &err)) { fprintf(stderr, "hq_rowblocks: %s\n", err.msg); return 1; }
        size_t by = kvq_encoded_bytes(&e);
        total += (double)by;
        covered += r1 - r0;
        printf("block %ld %ld bps %.4f bytes %zu eff %.4f snr %.2f\n", r0, r1, bps, by, st.eff_bpw, st.snr_real_db);
        kvq_encoded_free(&e);
    }
    fclose(b);
    if (covered != rows) { fprintf(stderr, "hq_rowblocks: blocks cover %ld of %ld rows\n", covered, rows); return 1; }
    printf("total bytes %.0f bits/weight %.4f\n", total, 8 * total / ((double)rows * cols));
    f = fopen(argv[5], "wb");
    if (!f || fwrite(y, sizeof(float), rows * cols, f) != (size_t)(rows * cols) || fclose(f)) {
        fprintf(stderr, "hq_rowblocks: %s: cannot write\n", argv[5]);
        return 1;
    }
    free(x), free(y);
    return 0;
}
