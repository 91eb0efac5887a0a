// kvq-convert: converts an HF checkpoint directory or llama2.c .bin into a .kvq.
// One progress line per tensor on stderr, a summary at the end; optionally also
// exports the converted model as an HF directory (--export-hf).
// Exit status: 0 success, 2 error (1 is reserved for verification failures).
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "formats/error.h"
#include "tools/opt.h"
#include "libconv/codec/codec.h"
#include "libconv/convert/convert.h"
#include "libconv/kv/kvcodec.h"

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: kvq-convert [options] SRC OUT.kvq\n"
            "  SRC                      HF checkpoint directory or llama2.c .bin\n"
            "  --weights SPEC           codec for 2-D weight matrices (default: none)\n"
            "  --recipe FILE            YAML recipe (see recipes/default.yaml)\n"
            "  --seed N                 recipe seed (per-tensor seeds derive from it)\n"
            "  --keep PATTERN           store tensors matching this glob as 'none' (repeatable)\n"
            "  --quantize-embeddings    let embed_tokens / lm_head use the weights codec\n"
            "  --export-hf DIR          also write the converted model as an HF checkpoint\n"
            "  --kv SPEC                KV-cache codec the model runs with (docs/KV.md), e.g.\n"
            "                           octopus:3, hqmq:s96:r4:med3, turboquant:4, kivi:2, int:4\n"
            "  --kv-window N            KV tokens kept at fp16 (residual window, default 0)\n"
            "  --kv-boundary            keep K of the first and last layer at fp16\n"
            "  -t N                     threads for the codecs (default: all)\n"
            "  -q, --quiet              no per-tensor progress\n"
            "codecs (SPEC is name or name:args):\n");
    for (int i = 0; i < kvq_codec_count(); i++)
        fprintf(fp, "  %-24s %s\n", kvq_codec_at(i)->name, kvq_codec_at(i)->summary);
    fprintf(fp, "exit status: 0 ok, 2 error\n");
}

static void progress(void *ud, const kvq_convert_progress *p) {
    fprintf(stderr, "[%3zu/%zu] %-48s %-10s %7.3f bits/w %12" PRIu64 " bytes\n", p->index + 1, p->count,
            p->name, p->codec, p->bits_per_weight, p->bytes);
}

int main(int argc, char **argv) {
    if (kvq_tool_start("kvq-convert", argc, argv)) return 0; // SIGXFSZ ignored, --version
    kvq_convert_opts o = {0};
    o.plan.quantize_embeddings = -1;
    const char *export_dir = NULL, *keep[64];
    int n_keep = 0, quiet = 0;
    static const struct option lo[] = {
        {"weights", required_argument, 0, 'w'}, {"recipe", required_argument, 0, 'r'},
        {"seed", required_argument, 0, 's'},    {"keep", required_argument, 0, 'k'},
        {"quantize-embeddings", no_argument, 0, 'e'}, {"export-hf", required_argument, 0, 'x'},
        {"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
        {"kv", required_argument, 0, 'K'},      {"kv-window", required_argument, 0, 'W'},
        {"kv-boundary", no_argument, 0, 'B'},   {0, 0, 0, 0}};
    int c;
    opterr = 0; // errors are reported in one line below
    while ((c = getopt_long(argc, argv, "t:qh", lo, NULL)) != -1) {
        switch (c) {
        case 'w': o.plan.weights = optarg; break;
        case 'r': o.plan.recipe_path = optarg; break;
        case 's':
            if (kvq_opt_u64("kvq-convert", "--seed", optarg, &o.plan.seed)) return 2;
            o.plan.seed_set = 1;
            break;
        case 'k':
            if (n_keep == 63) { fprintf(stderr, "kvq-convert: too many --keep patterns (max 63)\n"); return 2; }
            keep[n_keep++] = optarg;
            break;
        case 'e': o.plan.quantize_embeddings = 1; break;
        case 'x': export_dir = optarg; break;
        case 't':
            if (kvq_opt_int("kvq-convert", "-t", optarg, 1, 4096, &o.n_threads)) return 2;
            break;
        case 'q': quiet = 1; break;
        case 'K': {
            kvq_kvspec ks;
            kvq_err ke = {0};
            if (kvq_kvspec_parse(optarg, &ks, &ke)) { fprintf(stderr, "kvq-convert: %s\n", ke.msg); return 2; }
            o.kv_spec = optarg;
            break;
        }
        case 'W':
            if (kvq_opt_int("kvq-convert", "--kv-window", optarg, 0, 1 << 24, &o.kv_window)) return 2;
            break;
        case 'B': o.kv_boundary = 1; break;
        case 'h': usage(stdout); return 0;
        default: // one line naming the option, not the whole usage
            fprintf(stderr, "kvq-convert: %s: unknown option or missing value (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (argc - optind != 2) { usage(stderr); return 2; }
    keep[n_keep] = NULL;
    o.plan.keep = n_keep ? keep : NULL;
    o.created_by = "kvq-convert " KVQ_VERSION;
    if (!quiet) o.progress = progress;
    const char *src = argv[optind], *out = argv[optind + 1];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kvq_err err = {0};
    kvq_convert_summary sum;
    if (kvq_convert(src, out, &o, &sum, &err) != KVQ_OK) {
        fprintf(stderr, "kvq-convert: %s\n", err.msg);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "kvq-convert: %s: %zu tensors, %" PRIu64 " bytes (source weights %" PRIu64 " bytes, %.1f %%), ",
            out, sum.n_tensors, sum.bytes, sum.source_bytes,
            sum.source_bytes ? 100.0 * (double)sum.bytes / (double)sum.source_bytes : 0.0);
    if (!isnan(sum.bits_per_param)) fprintf(stderr, "whole model %.3f bits/param, ", sum.bits_per_param);
    if (isnan(sum.bits_per_weight)) fprintf(stderr, "no lossy tensors");
    else fprintf(stderr, "%zu quantized at %.3f bits/w", sum.n_quantized, sum.bits_per_weight);
    fprintf(stderr, ", %.2f s\n", secs);
    if (export_dir) {
        if (kvq_export_hf(out, export_dir, &err) != KVQ_OK) {
            fprintf(stderr, "kvq-convert: --export-hf: %s\n", err.msg);
            return 2;
        }
        fprintf(stderr, "kvq-convert: exported HF checkpoint to %s\n", export_dir);
    }
    return 0;
}
