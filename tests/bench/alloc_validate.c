// Brute-force check of the allocator's sensitivity (docs/ALLOCATION.md): every tensor an
// allocated .kvq rated, quantized alone (everything else at source precision) at each rate,
// its KL divergence against the source measured with the CPU runtime on text the calibration
// never saw, beside what the stored sensitivity predicts at the realized SNR.
//   build/bench/alloc_validate ALLOCATED.kvq SRC TEXT OFFSET_BYTES TOKENS RATE... > rows.csv
// CSV: tensor,rate,snr_db,kld_measured,kld_predicted,output_error_predicted
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/softmax.h"
#include "libconv/convert/convert.h"
#include "libconv/runtime/model.h"
#include "libconv/runtime/weights.h"

static int run(const char *path, const int32_t *ids, int n, float *lp, int V) {
    kvq_model_opts mo = kvq_model_opts_default();
    mo.exec = KVQ_EXEC_DECODED; // the decoded weights, as kvq-verify measures them
    mo.store = KVQ_WEIGHTS_F32;
    kvq_model *m = NULL;
    kvq_err err = {0};
    if (kvq_model_open(path, &mo, &m, &err) || kvq_model_forward(m, ids, n, 0, lp, 1, &err)) {
        fprintf(stderr, "alloc_validate: %s\n", err.msg);
        kvq_model_close(m);
        return -1;
    }
    kvq_model_close(m);
    kvq_log_softmax_rows(lp, n, V);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: alloc_validate ALLOCATED.kvq SRC TEXT OFFSET_BYTES TOKENS RATE...\n");
        return 2;
    }
    const char *alloc = argv[1], *src = argv[2], *text = argv[3];
    long off = atol(argv[4]);
    int n = atoi(argv[5]);
    kvq_err err = {0};
    kvq_weights *aw = NULL;
    if (kvq_weights_open(alloc, &aw, &err)) { fprintf(stderr, "alloc_validate: %s\n", err.msg); return 2; }
    const json_t *man = kvq_weights_manifest(aw);
    // tokens: n tokens of TEXT from byte offset OFFSET
    kvq_tokenizer *tok = NULL;
    if (kvq_weights_tokenizer(aw, &tok, &err)) { fprintf(stderr, "alloc_validate: %s\n", err.msg); return 2; }
    FILE *fp = fopen(text, "rb");
    if (!fp) { perror(text); return 2; }
    fseek(fp, off, SEEK_SET);
    size_t cap = (size_t)n * 16;
    char *buf = calloc(cap + 1, 1);
    size_t got = fread(buf, 1, cap, fp);
    fclose(fp);
    size_t s0 = 0;
    while (s0 < got && ((unsigned char)buf[s0] & 0xC0) == 0x80) s0++; // start on a character
    while (got > s0 && ((unsigned char)buf[got - 1] & 0x80)) got--;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (kvq_tok_encode(tok, buf + s0, got - s0, 0, &ids, &n_ids, &err) || n_ids < (size_t)n) {
        fprintf(stderr, "alloc_validate: %s: fewer than %d tokens\n", text, n);
        return 2;
    }
    const int V = kvq_weights_arch(aw)->vocab_size;
    float *ref = malloc(sizeof(float) * (size_t)n * V), *lp = malloc(sizeof(float) * (size_t)n * V);
    if (run(src, ids, n, ref, V)) return 2;
    char tmp[] = "/tmp/alloc_validate_XXXXXX";
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 2; }
    char out[600];
    snprintf(out, sizeof out, "%s/one.kvq", tmp);
    printf("tensor,rate,snr_db,kld_measured,kld_predicted,output_error_predicted\n");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(man, "tensors"), i, t) {
        const json_t *al = json_object_get(t, "allocation");
        if (!al) continue;
        const char *name = json_string_value(json_object_get(t, "name"));
        double sens = json_number_value(json_object_get(al, "sensitivity"));
        double oe = json_number_value(json_object_get(al, "output_error"));
        for (int r = 6; r < argc; r++) {
            char set[700];
            snprintf(set, sizeof set, "rules=[{match: \"%s\", codec: \"hyperquant:e8:%s\"}]", name, argv[r]);
            const char *sets[] = {set, NULL};
            kvq_convert_opts o = {0};
            o.plan.weights = "none";
            o.plan.quantize_embeddings = -1;
            o.plan.sets = sets;
            kvq_convert_summary sum;
            if (kvq_convert(src, out, &o, &sum, &err)) { fprintf(stderr, "alloc_validate: %s\n", err.msg); return 2; }
            // the realized SNR from the encoder's own error over the tensor's energy
            kvq_weights *ow = NULL;
            float *w = NULL;
            int64_t numel = 0;
            if (kvq_weights_open(src, &ow, &err) || kvq_weights_get_f32(ow, name, &w, &numel, &err)) {
                fprintf(stderr, "alloc_validate: %s\n", err.msg);
                return 2;
            }
            kvq_weights_close(ow);
            double e2 = 0.0;
            for (int64_t k = 0; k < numel; k++) e2 += (double)w[k] * w[k];
            free(w);
            kvq_weights *qw = NULL;
            if (kvq_weights_open(out, &qw, &err)) { fprintf(stderr, "alloc_validate: %s\n", err.msg); return 2; }
            double mse = NAN;
            size_t j;
            json_t *q;
            json_array_foreach(json_object_get(kvq_weights_manifest(qw), "tensors"), j, q)
                if (!strcmp(json_string_value(json_object_get(q, "name")), name))
                    mse = json_number_value(json_object_get(q, "predicted_mse"));
            kvq_weights_close(qw);
            double snr = 10.0 * log10(e2 / (double)numel / mse), eps = pow(10.0, -snr / 10.0);
            if (run(out, ids, n, lp, V)) return 2;
            double kld = 0.0;
            for (int tt = 0; tt < n; tt++)
                for (int v = 0; v < V; v++) {
                    double a = ref[(size_t)tt * V + v];
                    kld += exp(a) * (a - lp[(size_t)tt * V + v]);
                }
            kld /= n;
            printf("%s,%s,%.4f,%.6g,%.6g,%.6g\n", name, argv[r], snr, kld, sens * eps, oe * eps);
            fflush(stdout);
        }
    }
    unlink(out);
    rmdir(tmp);
    free(ref);
    free(lp);
    free(ids);
    free(buf);
    kvq_tok_close(tok);
    kvq_weights_close(aw);
    return 0;
}
