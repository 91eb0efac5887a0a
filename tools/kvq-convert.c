// kvq-convert: converts an HF checkpoint directory or llama2.c .bin into a .kvq.
// One progress line per tensor on stderr, a summary at the end; optionally also
// exports the converted model as an HF directory (--export-hf).
// Exit status: 0 success, 2 error (1 is reserved for verification failures).
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "formats/error.h"
#include "tools/opt.h"
#include "libconv/codec/codec.h"
#include "libconv/convert/convert.h"
#include "libconv/kv/kvcodec.h"

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: kvq-convert [options] SRC OUT.kvq\n"
            "       kvq-convert --dry-run [options] SRC [OUT.kvq]\n"
            "       kvq-convert --export-hf DIR [--force] IN.kvq|SRC\n"
            "  SRC                      HF checkpoint directory or llama2.c .bin\n"
            "  With no -r, --weights, --target-bpw, --calib-from or --set weights=/target_bpw=, the model is\n"
            "  allocated to 5.0 bits per parameter (about llama.cpp Q4_K_M's size) by measured sensitivity,\n"
            "  when that calibration is at most --calib-limit parameter-tokens of work (a few CPU-minutes);\n"
            "  above it, one HyperQuant rate at the same 5.0 bits, said in one line. --weights none: lossless.\n"
            "  -r, --recipe FILE        YAML recipe (recipes/README.md: one per paper configuration)\n"
            "  --set KEY=VALUE          override a recipe field (repeatable, in order): weights=rtn:4:g128,\n"
            "                           seed=7, kv.codec=octopus:3, kv.window=32, quantize_embeddings=true,\n"
            "                           keep=[\"*.bias\"], rules=[{regex: down_proj, bits: 5}]\n"
            "  --weights SPEC           codec for 2-D weight matrices (= --set weights=SPEC)\n"
            "  --seed N                 recipe seed (per-tensor seeds derive from it)\n"
            "  --keep PATTERN           store tensors matching this glob as 'none' (repeatable)\n"
            "  --quantize-embeddings    let embed_tokens / lm_head use the weights codec\n"
            "  --target-bpw X           whole-model budget in bits per parameter (every tensor counted,\n"
            "                           embeddings and norms included; = --set target_bpw=X): HyperQuant\n"
            "                           rates per tensor by measured sensitivity (docs/ALLOCATION.md)\n"
            "  --calib FILE             calibration text for --target-bpw (default: text the model samples)\n"
            "  --calib-tokens N         calibration tokens (default 512)\n"
            "  --probe layer|full       how sensitivities are measured (= --set calib_probe=...): layer (default)\n"
            "                           runs each tensor's error through its own layer and one probe per layer\n"
            "                           through the model; full runs one probe per tensor through the model\n"
            "  --calib-from FILE.kvq    reuse the sensitivities an earlier --target-bpw conversion of the\n"
            "                           same source stored (no calibration pass: re-budget in seconds)\n"
            "  --calib-limit W          the default budget's work limit, parameters x tokens run (default 2e12;\n"
            "                           0: never calibrate by default); an explicit --target-bpw has none\n"
            "  --kv SPEC                KV-cache codec the model runs with (docs/KV.md), e.g.\n"
            "                           octopus:3, hqmq:s96:r4:med3, turboquant:4, kivi:2, int:4 (= --set kv.codec)\n"
            "  --kv-window N            KV tokens kept at fp16 (residual window; = --set kv.window)\n"
            "  --kv-boundary            keep K of the first and last layer at fp16 (= --set kv.boundary=true)\n"
            "  --dry-run                print the per-tensor plan, predicted size and bits/param; write nothing\n"
            "  --resume                 reuse the tensors a killed run of the same command left in\n"
            "                           .OUT.partial (same bytes as an uninterrupted run)\n"
            "  --export-hf DIR          also (or, with one file argument, only) write an HF checkpoint\n"
            "  --export-dtype bf16|f32  dtype of the exported lossy tensors (default bf16; rounding reported)\n"
            "  --max-shard-size SIZE    shard the export like save_pretrained (default 5GB; e.g. 50MB)\n"
            "  --force                  export into a directory that already holds a checkpoint\n"
            "  -t N                     threads for the codecs (default: all); output identical for any N\n"
            "  -v, --verbose            one line per tensor even on a terminal\n"
            "  -q, --quiet              nothing but errors and the default budget's fallback notes\n"
            "codecs (SPEC is name or name:args):\n");
    for (int i = 0; i < kvq_codec_count(); i++)
        fprintf(fp, "  %-24s %s\n", kvq_codec_at(i)->name, kvq_codec_at(i)->summary);
    fprintf(fp, "exit status: 0 ok, 2 error\n");
}

typedef struct {
    int bar;                 // a terminal: one progress bar redrawn in place
    struct timespec t0;
    int drawn;
} progress_ctx;

static double since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static void fmt_snr(char *buf, size_t n, double snr) {
    if (isnan(snr)) snprintf(buf, n, "%9s", "-");
    else if (isinf(snr)) snprintf(buf, n, "%9s", "exact");
    else snprintf(buf, n, "%6.2f dB", snr);
}

static void progress(void *ud, const kvq_convert_progress *p) {
    progress_ctx *c = ud;
    if (!c->bar) {
        char snr[32];
        fmt_snr(snr, sizeof snr, p->snr_db);
        fprintf(stderr, "[%3zu/%zu] %-48s %-26s %7.3f bits/w  SNR %s %12" PRIu64 " bytes%s\n", p->index + 1, p->count,
                p->name, p->spec, p->bits_per_weight, snr, p->bytes, p->reused ? "  (resumed)" : "");
        return;
    }
    double t = since(&c->t0), f = p->source_total ? (double)p->source_done / (double)p->source_total : 1.0;
    double rate = t > 0 ? (double)p->source_done / t : 0.0, eta = rate > 0 ? (double)(p->source_total - p->source_done) / rate : 0.0;
    char bar[31];
    int fill = (int)(f * 30.0 + 0.5);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : ' ';
    bar[30] = 0;
    fprintf(stderr, "\r[%s] %zu/%zu tensors  %.1f/%.1f MB  %.1f MB/s  ETA %d:%02d  %-40.40s", bar, p->index + 1, p->count,
            (double)p->source_done / 1e6, (double)p->source_total / 1e6, rate / 1e6, (int)eta / 60, (int)eta % 60, p->name);
    c->drawn = 1;
}

// The budget's calibration (--target-bpw and the default): what it will run, then the statistics
// pass and each probe; one line each when stderr is no terminal, a line redrawn in place on one.
typedef struct {
    int bar, quiet;
    struct timespec t0;     // the calibration's start
    double t_probes;        // seconds from t0 to the first probe (the statistics pass's end)
    int drawn;
} calib_ctx;

static void calib_progress(void *ud, const kvq_calib_progress *p) {
    calib_ctx *c = ud;
    if (p->event == KVQ_CALIB_NOTE) { // a decision about the output: said even with -q
        if (c->drawn) fprintf(stderr, "\n"), c->drawn = 0;
        fprintf(stderr, "kvq-convert: %s\n", p->note);
        return;
    }
    if (c->quiet) return;
    double t = since(&c->t0);
    if (p->event == KVQ_CALIB_START) {
        clock_gettime(CLOCK_MONOTONIC, &c->t0);
        fprintf(stderr, "kvq-convert: calibrating: %zu tokens %s%s, then %zu probes of %d tokens (%s probe: %.1f forwards; "
                        "%.0f parameters: %.2g parameter-tokens of work, ~%.0f CPU-seconds)\n", p->tokens,
                p->text ? "of " : "sampled from the model", p->text ? p->text : "", p->count, p->probe_tokens,
                p->probe == KVQ_PROBE_FULL ? "full" : "layer", p->forwards, p->params, p->work, p->work / KVQ_CALIB_RATE);
        return;
    }
    char line[256];
    if (p->event == KVQ_CALIB_PASS) {
        if (p->index == p->count) c->t_probes = t;
        if (c->bar || p->index == p->count)
            snprintf(line, sizeof line, "[calibration] statistics pass: %zu/%zu tokens  %.1f s", p->index, p->count, t);
        else return; // one line for the pass when logging
    } else {
        double tp = t - c->t_probes; // the probes' own pace, per parameter-token of their work (a layer's
        double eta = 0.0;            // tensors are reported together, after the layer's work)
        if (p->index + 1 < p->count && p->work_done > 0 && p->work_total > p->work_done)
            eta = tp / p->work_done * (p->work_total - p->work_done);
        else if (p->index + 1 < p->count && p->work_total <= 0) // no work count: per probe
            eta = tp / (double)(p->index + 1) * (double)(p->count - p->index - 1);
        snprintf(line, sizeof line, "[probe %3zu/%zu] %-48s sensitivity %10.4g  %7.1f s  ETA %d:%02d", p->index + 1, p->count,
                 p->name, p->sensitivity, t, (int)eta / 60, (int)eta % 60);
    }
    if (c->bar) {
        fprintf(stderr, "\r%-120.120s", line);
        c->drawn = 1;
        if (p->event == KVQ_CALIB_PROBE && p->index + 1 == p->count) fprintf(stderr, "\n"), c->drawn = 0;
    } else fprintf(stderr, "%s\n", line);
}

// "5GB", "500MB", "2GiB", "123" (bytes): save_pretrained's max_shard_size spellings.
static int kvq_parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0)) return -1;
    static const struct { const char *u; double m; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].u)) { *out = (uint64_t)(v * units[i].m); return 0; }
    return -1;
}

static void kvq_export_print(FILE *fp, const char *dir, const kvq_export_report *r) {
    fprintf(fp, "kvq-convert: exported HF checkpoint to %s: %zu tensors in %d shard%s (%s), %.1f MB of %s tensors "
                "(config.json says %s)\n", dir, r->n_tensors, r->n_shards, r->n_shards > 1 ? "s" : "",
            r->n_shards > 1 ? "model.safetensors.index.json" : "model.safetensors", (double)r->total_bytes / 1e6,
            kvq_dtype_name(r->dtype), r->dtype == KVQ_DTYPE_BF16 ? "bfloat16" : "float32");
    if (r->n_rounded)
        fprintf(fp, "kvq-convert: bf16 rounding of %zu tensors' decoded values: relative RMS %.3g, max |error| %.3g "
                    "(--export-dtype f32 keeps them exact)\n", r->n_rounded, r->round_rel_rms, r->round_max_abs);
    if (r->kv_spec[0])
        fprintf(fp, "kvq-convert: note: the KV-cache codec %s (window %d%s) cannot be expressed in an HF checkpoint: "
                    "transformers runs the export with its own cache; kvq-run and kvq-verify use the codec from the .kvq "
                    "(recorded in the safetensors metadata as kvq_kv_cache)\n",
                r->kv_spec, r->kv_window, r->kv_boundary ? ", boundary" : "");
    if (r->n_removed) fprintf(fp, "kvq-convert: --force: removed %d weight file(s) of the earlier checkpoint\n", r->n_removed);
}

static void print_plan(const char *out, const kvq_convert_prediction *P) {
    int alloc = !isnan(P->target_bpw);
    printf("%-52s %-10s %-28s %9s %14s", "tensor", "codec", "spec", "bits/w", "bytes");
    if (alloc) printf(" %12s", "sensitivity");
    printf("  why\n");
    for (size_t i = 0; i < P->n; i++) {
        const kvq_plan_entry *e = &P->entries[i];
        double bpw = e->numel ? 8.0 * (double)e->predicted_bytes / (double)e->numel : 0.0;
        printf("%-52s %-10s %-28s %9.3f %14" PRIu64, e->name, e->codec->name, e->spec, bpw, e->predicted_bytes);
        if (alloc && isfinite(e->sensitivity)) printf(" %12.4g", e->sensitivity);
        else if (alloc) printf(" %12s", "-");
        printf("  %s\n", e->why);
    }
    if (alloc && P->uniform) printf("target: %.3f bits/param, one rate for every rated tensor (the default budget over its work limit)\n", P->target_bpw);
    else if (alloc && P->calib_tokens) printf("target: %.3f bits/param, rates by sensitivity from %zu calibration tokens\n", P->target_bpw, P->calib_tokens);
    else if (alloc) printf("target: %.3f bits/param, rates by the sensitivities of an earlier conversion\n", P->target_bpw);
    printf("kv cache: %s", P->kv_spec[0] ? P->kv_spec : "none (the runtime's fp16 default)");
    if (P->kv_spec[0]) printf(", window %d%s, tables %" PRIu64 " bytes", P->kv_window, P->kv_boundary ? ", boundary" : "", P->kv_bytes);
    printf("\npredicted: %s%s%" PRIu64 " bytes, %zu tensors, %" PRIu64 " parameters, whole model %.3f bits/param",
           out ? out : "", out ? ": " : "", P->file_bytes, P->n, P->params, P->bits_per_param);
    if (!isnan(P->lossy_bits_per_weight)) printf(", quantized tensors %.3f bits/w", P->lossy_bits_per_weight);
    if (P->unknown) printf(" (%d tensors with a fixed-SNR codec counted as 0 bytes: their size is known only after encoding)", P->unknown);
    printf("\n");
}

int main(int argc, char **argv) {
    if (kvq_tool_start("kvq-convert", argc, argv)) return 0; // SIGXFSZ ignored, --version
    kvq_convert_opts o = {0};
    o.plan.quantize_embeddings = -1;
    const char *export_dir = NULL, *keep[64], *sets[256];
    char setbuf[4][64];
    int n_keep = 0, n_sets = 0, quiet = 0, verbose = 0, dry = 0, force = 0, kv_given = 0, kvw = -1, kvb = 0, chosen = 0;
    kvq_export_opts xo = {.dtype = KVQ_DTYPE_BF16, .max_shard_bytes = 5000000000ull};
    static const struct option lo[] = {
        {"weights", required_argument, 0, 'w'}, {"recipe", required_argument, 0, 'r'},
        {"seed", required_argument, 0, 's'},    {"keep", required_argument, 0, 'k'},
        {"quantize-embeddings", no_argument, 0, 'e'}, {"export-hf", required_argument, 0, 'x'},
        {"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
        {"kv", required_argument, 0, 'K'},      {"kv-window", required_argument, 0, 'W'},
        {"kv-boundary", no_argument, 0, 'B'},   {"set", required_argument, 0, 'S'},
        {"dry-run", no_argument, 0, 'n'},       {"verbose", no_argument, 0, 'v'},
        {"resume", no_argument, 0, 'R'},        {"force", no_argument, 0, 'f'},
        {"export-dtype", required_argument, 0, 'D'}, {"max-shard-size", required_argument, 0, 'M'},
        {"target-bpw", required_argument, 0, 'T'}, {"calib", required_argument, 0, 'C'},
        {"calib-tokens", required_argument, 0, 'N'}, {"calib-from", required_argument, 0, 'F'},
        {"calib-limit", required_argument, 0, 'L'}, {"probe", required_argument, 0, 'P'}, {0, 0, 0, 0}};
    int c;
    opterr = 0; // errors are reported in one line below
    while ((c = getopt_long(argc, argv, "t:qhr:v", lo, NULL)) != -1) {
        switch (c) {
        case 'w': o.plan.weights = optarg, chosen = 1; break;
        case 'r': o.plan.recipe_path = optarg, chosen = 1; break;
        case 's':
            if (kvq_opt_u64("kvq-convert", "--seed", optarg, &o.plan.seed)) return 2;
            o.plan.seed_set = 1;
            break;
        case 'k':
            if (n_keep == 63) { fprintf(stderr, "kvq-convert: too many --keep patterns (max 63)\n"); return 2; }
            keep[n_keep++] = optarg;
            break;
        case 'S':
            if (n_sets == 250) { fprintf(stderr, "kvq-convert: too many --set (max 250)\n"); return 2; }
            sets[n_sets++] = optarg;
            if (!strncmp(optarg, "weights=", 8) || !strncmp(optarg, "target_bpw=", 11)) chosen = 1;
            break;
        case 'e': o.plan.quantize_embeddings = 1; break;
        case 'T':
            chosen = 1;
            if (!strcmp(optarg, "none")) o.plan.target_bpw = NAN;
            else if (kvq_opt_double("kvq-convert", "--target-bpw", optarg, 1.0, 32.0, &o.plan.target_bpw)) return 2;
            break;
        case 'C': o.plan.calib_text = optarg; break;
        case 'F': o.plan.calib_from = optarg, chosen = 1; break;
        case 'L':
            if (kvq_opt_double("kvq-convert", "--calib-limit", optarg, 0.0, 1e30, &o.calib_work_limit)) return 2;
            if (o.calib_work_limit == 0) o.calib_work_limit = 1e-300; // 0: never (a limit nothing is under)
            break;
        case 'P':
            if (strcmp(optarg, "layer") && strcmp(optarg, "full")) {
                fprintf(stderr, "kvq-convert: --probe '%s': expected layer or full\n", optarg);
                return 2;
            }
            o.plan.calib_probe = 1 + (!strcmp(optarg, "full") ? KVQ_PROBE_FULL : KVQ_PROBE_LAYER);
            break;
        case 'N':
            if (kvq_opt_int("kvq-convert", "--calib-tokens", optarg, 16, 1 << 20, &o.plan.calib_tokens)) return 2;
            break;
        case 'x': export_dir = optarg; break;
        case 't':
            if (kvq_opt_int("kvq-convert", "-t", optarg, 1, 4096, &o.n_threads)) return 2;
            break;
        case 'q': quiet = 1; break;
        case 'v': verbose = 1; break;
        case 'n': dry = 1; break;
        case 'R': o.resume = 1; break;
        case 'f': force = 1; break;
        case 'D':
            if (!strcmp(optarg, "bf16")) xo.dtype = KVQ_DTYPE_BF16;
            else if (!strcmp(optarg, "f32") || !strcmp(optarg, "float32")) xo.dtype = KVQ_DTYPE_F32;
            else { fprintf(stderr, "kvq-convert: --export-dtype '%s': expected bf16 or f32\n", optarg); return 2; }
            break;
        case 'M':
            if (kvq_parse_size(optarg, &xo.max_shard_bytes) || xo.max_shard_bytes == 0) {
                fprintf(stderr, "kvq-convert: --max-shard-size '%s': expected a size such as 5GB, 500MB, 2GiB or bytes\n", optarg);
                return 2;
            }
            break;
        case 'K': {
            kvq_kvspec ks;
            kvq_err ke = {0};
            if (kvq_kvspec_parse(optarg, &ks, &ke)) { fprintf(stderr, "kvq-convert: %s\n", ke.msg); return 2; }
            o.kv_spec = optarg;
            kv_given = 1;
            break;
        }
        case 'W':
            if (kvq_opt_int("kvq-convert", "--kv-window", optarg, 0, 1 << 24, &kvw)) return 2;
            break;
        case 'B': kvb = 1; break;
        case 'h': usage(stdout); return 0;
        default: // one line naming the option, not the whole usage
            fprintf(stderr, "kvq-convert: %s: unknown option or missing value (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    int npos = argc - optind;
    xo.force = force;
    // kvq-convert --export-hf DIR MODEL: export only (a .kvq or a source checkpoint)
    if (npos >= 1) kvq_tool_input("kvq-convert", argv[optind]);
    if (export_dir && npos == 1 && !dry) {
        kvq_err err = {0};
        kvq_export_report rep;
        if (kvq_export_hf(argv[optind], export_dir, &xo, &rep, &err) != KVQ_OK) {
            fprintf(stderr, "kvq-convert: --export-hf: %s\n", err.msg);
            return 2;
        }
        if (!quiet) kvq_export_print(stderr, export_dir, &rep);
        return 0;
    }
    if (npos != 2 && !(dry && npos == 1)) { usage(stderr); return 2; }
    // --kv-window / --kv-boundary without --kv adjust the recipe's KV codec
    if (kv_given) o.kv_window = kvw > 0 ? kvw : 0, o.kv_boundary = kvb;
    else {
        if (kvw >= 0) snprintf(setbuf[0], sizeof setbuf[0], "kv.window=%d", kvw), sets[n_sets++] = setbuf[0];
        if (kvb) snprintf(setbuf[1], sizeof setbuf[1], "kv.boundary=true"), sets[n_sets++] = setbuf[1];
    }
    sets[n_sets] = NULL;
    keep[n_keep] = NULL;
    o.plan.keep = n_keep ? keep : NULL;
    o.plan.sets = n_sets ? sets : NULL;
    o.created_by = "kvq-convert " KVQ_VERSION;
    if (!chosen) o.plan.target_bpw = KVQ_DEFAULT_TARGET_BPW, o.budget_default = 1; // the default (--help)
    calib_ctx cc = {.bar = isatty(fileno(stderr)) && !verbose, .quiet = quiet};
    clock_gettime(CLOCK_MONOTONIC, &cc.t0);
    o.calib_progress = calib_progress, o.calib_ud = &cc;
    const char *src = argv[optind], *out = npos == 2 ? argv[optind + 1] : NULL;
    kvq_err err = {0};
    if (dry) {
        kvq_convert_prediction P;
        if (kvq_convert_predict(src, &o, &P, &err) != KVQ_OK) {
            fprintf(stderr, "kvq-convert: %s\n", err.msg);
            return 2;
        }
        print_plan(out, &P);
        kvq_convert_prediction_free(&P);
        return 0;
    }
    progress_ctx pc = {.bar = isatty(fileno(stderr)) && !verbose};
    clock_gettime(CLOCK_MONOTONIC, &pc.t0);
    if (!quiet) o.progress = progress, o.progress_ud = &pc;
    if (export_dir) { // refuse a bad export directory before spending the conversion
        if (kvq_export_check_dir(export_dir, force, &err) != KVQ_OK) {
            fprintf(stderr, "kvq-convert: --export-hf: %s\n", err.msg);
            return 2;
        }
    }
    kvq_convert_summary sum;
    kvq_status st = kvq_convert(src, out, &o, &sum, &err);
    if (pc.drawn) fprintf(stderr, "\n");
    if (st != KVQ_OK) {
        fprintf(stderr, "kvq-convert: %s\n", err.msg);
        return 2;
    }
    double secs = since(&pc.t0);
    if (!quiet) {
        fprintf(stderr, "kvq-convert: %s: %zu tensors, %" PRIu64 " bytes (source weights %" PRIu64 " bytes, %.1f %%), ",
                out, sum.n_tensors, sum.bytes, sum.source_bytes,
                sum.source_bytes ? 100.0 * (double)sum.bytes / (double)sum.source_bytes : 0.0);
        if (!isnan(sum.bits_per_param)) fprintf(stderr, "whole model %.3f bits/param, ", sum.bits_per_param);
        if (isnan(sum.bits_per_weight)) fprintf(stderr, "no lossy tensors");
        else fprintf(stderr, "%zu quantized at %.3f bits/w", sum.n_quantized, sum.bits_per_weight);
        if (sum.kv_spec[0]) fprintf(stderr, ", KV cache %s (window %d%s)", sum.kv_spec, sum.kv_window, sum.kv_boundary ? ", boundary" : "");
        else fprintf(stderr, ", KV cache fp16 (none stored)");
        if (sum.n_reused) fprintf(stderr, ", %zu tensors reused from the interrupted run", sum.n_reused);
        if (!isnan(sum.target_bpw) && sum.uniform)
            fprintf(stderr, ", one rate for %.3f bits/param (the default budget, not calibrated)", sum.target_bpw);
        else if (!isnan(sum.target_bpw) && sum.calib_tokens)
            fprintf(stderr, ", allocated to %.3f bits/param by sensitivity (%zu calibration tokens)", sum.target_bpw, sum.calib_tokens);
        else if (!isnan(sum.target_bpw))
            fprintf(stderr, ", allocated to %.3f bits/param by the sensitivities of %s", sum.target_bpw, o.plan.calib_from);
        fprintf(stderr, ", %.2f s\n", secs);
    }
    if (export_dir) {
        kvq_export_report rep;
        if (kvq_export_hf(out, export_dir, &xo, &rep, &err) != KVQ_OK) {
            fprintf(stderr, "kvq-convert: --export-hf: %s\n", err.msg);
            return 2;
        }
        if (!quiet) kvq_export_print(stderr, export_dir, &rep);
    }
    return 0;
}
