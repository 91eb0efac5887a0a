// Per-tensor quality of weight codecs on real checkpoints: for every linear weight
// (model.layers.*.weight, 2-D) of each model, encode with each codec spec, decode through
// the codec table, and report SNR = 10 log10(Σw² / Σ(w − ŵ)²) and effective bits.
//   build/bench/hq_models [--csv FILE] [MODEL_DIR...] [-- SPEC...]   (default: bundled tiny-llama)
// Default specs: hyperquant e8/d4/a2/z at 3.0/3.5/4.0/5.0, RTN g128 at 3/4/5 bits and
// RTN at matched effective bits (2:g32 = 3.0, 3:g64 = 3.5, 3:g32 = 4.0, 4:g32 = 5.0).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/checkpoint.h"
#include "libconv/codec/codec.h"

static const char *default_specs[] = {
    "hyperquant:e8:3.0", "hyperquant:d4:3.0", "hyperquant:a2:3.0", "hyperquant:z:3.0",
    "hyperquant:e8:3.5", "hyperquant:d4:3.5", "hyperquant:a2:3.5", "hyperquant:z:3.5",
    "hyperquant:e8:4.0", "hyperquant:d4:4.0", "hyperquant:a2:4.0", "hyperquant:z:4.0",
    "hyperquant:e8:5.0", "hyperquant:d4:5.0", "hyperquant:a2:5.0", "hyperquant:z:5.0",
    "rtn:2:g32", "rtn:3:g64", "rtn:3:g32", "rtn:4:g32",
    "rtn:3:g128", "rtn:4:g128", "rtn:5:g128",
    "hyperquant:e8:3.25", "hyperquant:e8:4.25", "hyperquant:e8:5.25",
};

static int is_linear(const kvq_tensor *t) {
    return t->ndim == 2 && strstr(t->name, "layers.") && strstr(t->name, "proj.weight");
}

int main(int argc, char **argv) {
    const char *models[8], *specs[64], *csv = NULL;
    int nm = 0, ns = 0, in_specs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--")) in_specs = 1;
        else if (in_specs && ns < 64) specs[ns++] = argv[i];
        else if (nm < 8) models[nm++] = argv[i];
    }
    if (!nm) models[nm++] = "tests/models/kvq-tiny-llama"; // `make bench`: the bundled model
    if (!ns) for (size_t i = 0; i < sizeof default_specs / sizeof *default_specs; i++) specs[ns++] = default_specs[i];
    FILE *cf = csv ? fopen(csv, "w") : NULL;
    if (cf) fprintf(cf, "model,spec,tensor,rows,cols,snr_db,eff_bpw,code_bpw\n");
    printf("| model | spec | tensors | weights | SNR dB (pooled) | mean per-tensor SNR dB | min | max | eff bpw (pooled) | max abs(eff − target) | code bpw |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int m = 0; m < nm; m++) {
        kvq_ckpt *ck;
        kvq_err err;
        if (kvq_ckpt_open(models[m], &ck, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        const char *mname = strrchr(models[m], '/') ? strrchr(models[m], '/') + 1 : models[m];
        for (int s = 0; s < ns; s++) {
            const kvq_codec_traits *c;
            json_t *cfg;
            if (kvq_codec_parse_spec(specs[s], &c, &cfg, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            double target = -1;
            if (sscanf(specs[s], "hyperquant:%*[^:]:%lf", &target) != 1 || strstr(specs[s], "db")) target = -1;
            double sx = 0, se = 0, bits = 0, cbits = 0, n = 0, snr_sum = 0, mn = 1e9, mx = -1e9, maxdev = 0;
            int nt = 0;
            for (size_t i = 0; i < kvq_ckpt_count(ck); i++) {
                const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
                if (!is_linear(t)) continue;
                int64_t rows = t->shape[0], cols = t->shape[1], ne = rows * cols;
                float *x = malloc(sizeof(float) * ne), *d = malloc(sizeof(float) * ne);
                kvq_dtype_to_f32(t->dtype, t->data, (size_t)ne, x);
                kvq_codec_input in = {t, x, rows, cols, 0x5eed0000u + i, 0, NULL};
                kvq_encoded e;
                if (c->encode(cfg, &in, &e, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                kvq_blob_view v[KVQ_MAX_BLOBS];
                for (int b = 0; b < e.n_blob; b++) v[b] = (kvq_blob_view){e.blob[b].role, e.blob[b].data, e.blob[b].size};
                if (c->decode(e.params, v, e.n_blob, rows, cols, d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                double tx = 0, te = 0;
                for (int64_t k = 0; k < ne; k++) { tx += (double)x[k] * x[k]; te += ((double)x[k] - d[k]) * ((double)x[k] - d[k]); }
                double snr = 10 * log10(tx / te), eff = kvq_encoded_bpw(&e, ne);
                if (cf) fprintf(cf, "%s,%s,%s,%lld,%lld,%.4f,%.5f,%.5f\n", mname, specs[s], t->name, (long long)rows,
                                (long long)cols, snr, eff, e.code_bits_per_weight);
                sx += tx; se += te; bits += eff * ne; cbits += e.code_bits_per_weight * ne; n += ne;
                snr_sum += snr; nt++;
                if (snr < mn) mn = snr;
                if (snr > mx) mx = snr;
                if (target > 0 && fabs(eff - target) > maxdev) maxdev = fabs(eff - target);
                kvq_encoded_free(&e);
                free(x);
                free(d);
            }
            char dev[32] = "–";
            if (target > 0) snprintf(dev, sizeof dev, "%.4f", maxdev);
            printf("| %s | %s | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %.4f | %s | %.4f |\n", mname, specs[s], nt, n,
                   10 * log10(sx / se), snr_sum / nt, mn, mx, bits / n, dev, cbits / n);
            fflush(stdout);
            json_decref(cfg);
        }
        kvq_ckpt_close(ck);
    }
    if (cf) fclose(cf);
    return 0;
}
