// kvq-verify: the gate before shipping a .kvq. Integrity (digests, bounds, manifest
// schema, every tensor decodes), per-tensor error against the source, perplexity and
// KL divergence against the source under a stated protocol (weights, KV codec, both),
// thresholds, and --record to store the result in the file. Library: libconv/verify/verify.h.
// Exit status: 0 all checks pass, 1 a check failed (incl. integrity), 2 error.
#include <inttypes.h>
#include <limits.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tools/opt.h"
#include "libconv/runtime/backend.h"
#include "libconv/verify/verify.h"
#include "tools/report.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq-verify FILE.kvq [options]\n"
            "  --source DIR           source checkpoint (default: the path recorded in the file)\n"
            "  --no-source            integrity only: no per-tensor error, no perplexity\n"
            "  --text FILE            text for perplexity and KL divergence\n"
            "protocol (default = the model cards: --ctx 512, non-overlapping, --no-bos, all-but-first):\n"
            "  --ctx N                tokens per window (512)\n"
            "  --stride N             text tokens between window starts (default: non-overlapping)\n"
            "  --bos[=prepend|replace] BOS before each window (prepend), or over its first token as\n"
            "                         llama-perplexity does (replace); --no-bos (default) none\n"
            "  --scored MODE          all-but-first (cards) | second-half (llama-perplexity)\n"
            "  --max-tokens N         use only the first N text tokens\n"
            "  --windows N            use only the first N windows\n"
            "KV codec (default: the file's \"kv\" section, if any):\n"
            "  --kv SPEC [--kv-window N] [--kv-boundary] [--kv-seed N]   measure this codec\n"
            "  --no-kv                measure no KV codec\n"
            "  --gpu                  run the source and the converted model on the CUDA device\n"
            "                         (fp32 activations there; a KV codec's cache too, for head_dim 64\n"
            "                         or 128 with 1, 2, 4 or 8 query heads per KV head)\n"
            "thresholds (exit 1 when one fails):\n"
            "  --max-ppl-delta X      2%% (relative) or 0.5 (absolute ppl points)\n"
            "  --max-kld X            mean KLD, nats      --max-kld-p99 X\n"
            "  --min-top1 X           e.g. 0.9 or 90%%     --max-rms-dp X (fraction or %%)\n"
            "  --min-snr DB           every lossy tensor  --max-rel-err X\n"
            "output:\n"
            "  --json                 the full report as JSON (docs/FORMAT.md)\n"
            "  --tensors N            tensor rows to print (10; 0 = all)\n"
            "  --report FILE.html     one self-contained page to attach to a release: model, recipe,\n"
            "                         protocol, checks and verdict, per-layer bits and SNR, the KLD\n"
            "                         distribution, the weights / KV / both runs (figures inline)\n"
            "  --record               store the verification record in FILE (atomic rewrite)\n"
            "  --check-record         only integrity + the stored record (fails without a matching one)\n"
            "  -t N                   threads          -q  no progress on stderr\n"
            "  -v                     every tensor's row (as --tensors 0) and each stage's seconds\n"
            "exit status: 0 pass, 1 a check failed, 2 error\n");
}

static int parse_num(const char *opt, const char *s, double *v, int allow_pct) {
    size_t n = s ? strlen(s) : 0;
    if (allow_pct && n > 1 && s[n - 1] == '%') { // "5%" = 0.05
        char buf[64];
        if (n >= sizeof buf) return kvq_opt_double("kvq-verify", opt, s, -HUGE_VAL, HUGE_VAL, v);
        memcpy(buf, s, n - 1);
        buf[n - 1] = 0;
        if (kvq_opt_double("kvq-verify", opt, buf, -1e300, 1e300, v)) return -1;
        *v /= 100.0;
        return 0;
    }
    return kvq_opt_double("kvq-verify", opt, s, -1e300, 1e300, v);
}

static int parse_range(const char *opt, const char *s, long long lo, long long hi, size_t *v) {
    long long x;
    if (kvq_opt_ll("kvq-verify", opt, s, lo, hi, &x)) return -1;
    *v = (size_t)x;
    return 0;
}

static int parse_size(const char *opt, const char *s, size_t *v) {
    long long x;
    if (kvq_opt_ll("kvq-verify", opt, s, 0, LLONG_MAX, &x)) return -1;
    *v = (size_t)x;
    return 0;
}

typedef struct {
    int quiet, tty;
    const char *last_stage;
    size_t last_pct;
} prog_state;

static void on_progress(void *ud, const kvq_verify_progress *p) {
    prog_state *s = ud;
    if (s->quiet || p->total == 0) return;
    size_t pct = p->done * 100 / p->total;
    int new_stage = s->last_stage != p->stage;
    if (!s->tty && !new_stage && pct / 10 == s->last_pct / 10 && p->done != p->total) return;
    s->last_stage = p->stage;
    s->last_pct = pct;
    double eta = p->done ? p->seconds * (double)(p->total - p->done) / (double)p->done : 0;
    fprintf(stderr, "%s%s: %zu/%zu (%zu %%), %.0f s, eta %.0f s%s", s->tty ? "\r" : "", p->stage, p->done, p->total, pct,
            p->seconds, eta, s->tty ? "   " : "\n");
    if (s->tty && p->done == p->total) fputc('\n', stderr);
}

static const char *fmt_snr(double v, char *b, size_t n) {
    if (isinf(v) && v > 0) snprintf(b, n, "exact");
    else if (isnan(v)) snprintf(b, n, "-");
    else snprintf(b, n, "%.2f", v);
    return b;
}

// The one-line result the text ends with and the --report page shows: PASS or FAIL, and what
// was measured or why the measurement cannot tell.
static const char *verdict(const kvq_verify_report *r, char *b, size_t n) {
    int open_ = 0; // checks whose limit lies within one standard error: the verdict says so
    for (int i = 0; i < r->n_checks; i++) open_ += !kvq_verify_check_conclusive(&r->checks[i]);
    if (!r->evaluated && r->pass)
        snprintf(b, n, "PASS (%s only: no quality measured; give --text for perplexity and KLD)",
                 r->n_tensors && r->source_path ? "integrity and per-tensor error" : "integrity");
    else if (open_)
        snprintf(b, n, "%s (%d check%s within one standard error of the limit: not conclusive; a longer text narrows it)",
                 r->pass ? "PASS" : "FAIL", open_, open_ == 1 ? "" : "s");
    else snprintf(b, n, "%s", r->pass ? "PASS" : "FAIL");
    return b;
}

static void print_human(const kvq_verify_report *r, size_t max_rows, int verbose) {
    printf("kvq-verify %s\n", r->kvq_path);
    if (r->integrity_ok)
        printf("integrity: ok (%zu entries: digests and bounds; manifest schema; %zu tensors decode to finite values)\n",
               r->n_entries, r->n_tensors);
    else printf("integrity: FAILED: %s\n", r->integrity_msg);
    if (!isnan(r->model_bpp)) {
        printf("bits: whole model %.3f bits/param over %" PRIu64 " parameters", r->model_bpp, r->params);
        if (!isnan(r->lossy_bpw)) printf("; quantized tensors %.3f bits/w", r->lossy_bpw);
        printf("\n");
    }
    if (r->record != KVQ_RECORD_NONE || r->require_record) printf("record: %s\n", r->record_msg);
    if (r->source_path) printf("source: %s (weight files match the sha256 recorded in the file)\n", r->source_path);
    if (r->n_tensors && r->source_path) {
        size_t rows = max_rows && max_rows < r->n_tensors ? max_rows : r->n_tensors;
        printf("\ntensors, worst first (%zu of %zu shown)", rows, r->n_tensors);
        if (!isnan(r->lossy_bpw)) printf("; quantized tensors: min SNR %.2f dB", r->min_snr);
        printf("\n  %-48s %-22s %8s %9s %10s %10s\n", "tensor", "codec", "bits/w", "SNR dB", "rel err", "max abs");
        for (size_t i = 0; i < rows; i++) {
            const kvq_verify_tensor *t = &r->tensors[i];
            char b[32];
            printf("  %-48s %-22s %8.3f %9s %10.3g %10.3g\n", t->name, t->codec, t->bpw, fmt_snr(t->snr_db, b, sizeof b),
                   t->rel_err, t->max_abs);
        }
    }
    if (r->evaluated) {
        char desc[256];
        kvq_eval_protocol_str(&r->proto, desc, sizeof desc);
        printf("\nprotocol: %s", desc);
        if (r->max_windows) printf(", first %zu windows only", r->max_windows);
        if (r->proto.max_tokens) printf(", first %zu tokens only", r->proto.max_tokens);
        printf("\ntext: %s (%llu bytes, sha256 %s), %zu tokens; %zu windows over %zu tokens, %zu positions scored\n",
               r->text_path, (unsigned long long)r->text_bytes, r->text_sha256, r->n_tokens, r->n_windows,
               r->n_tokens_used, r->n_scored);
        if (r->kv_spec[0])
            printf("KV codec: %s: %.3f bits/element at the model's %d positions (as kvq-inspect reports); %.3f measured "
                   "over this run's cache\n", r->kv_spec, r->kv_bits, r->kv_positions, r->kv_bits_run);
        printf("source ppl: %.4f ± %.4f\n", r->source_ppl, r->source_ppl_se);
        printf("  %-11s %10s %10s %8s %10s %10s %10s %10s %7s %8s\n", "run", "ppl", "dppl", "dppl %", "KLD mean",
               "median", "p99", "max", "top-1", "RMS dp");
        for (int k = 0; k < 3; k++) {
            const kvq_verify_eval *e = &r->run[k];
            if (!e->done) continue;
            printf("  %-11s %10.4f %+10.4f %+7.3f%% %10.6f %10.6f %10.6f %10.6f %6.2f%% %7.3f%%\n", e->label, e->ppl, e->dppl,
                   100 * e->dppl_rel, e->kld.mean, e->kld.median, e->kld.p99, e->kld.max, 100 * e->kld.top1,
                   100 * e->kld.rms_dp);
        }
        printf("  ± one standard error over scored positions (as llama-perplexity; positions of a window are correlated, so they understate it):\n");
        for (int k = 0; k < 3; k++) {
            const kvq_verify_eval *e = &r->run[k];
            if (!e->done) continue;
            printf("  %-11s ppl %.4f ± %.4f, dppl %+.4f ± %.4f, KLD %.6f ± %.6f, top-1 %.2f ± %.2f %%, RMS dp %.3f ± %.3f %%\n",
                   e->label, e->ppl, e->ppl_se, e->dppl, e->dppl_se, e->kld.mean, e->kld.mean_se, 100 * e->kld.top1,
                   100 * e->kld.top1_se, 100 * e->kld.rms_dp, 100 * e->kld.rms_dp_se);
        }
        for (int k = 0; k < 3; k++)
            if (r->run[k].done) printf("  %-11s %s\n", r->run[k].label, r->run[k].what);
    }
    if (verbose)
        printf("\nseconds: integrity %.2f, tensors %.2f, evaluation %.2f\n", r->seconds_integrity, r->seconds_tensors,
               r->seconds_eval);
    if (verbose && r->kv_held_bytes)
        printf("KV cache of the kv run held %.2f MB (%s; KVQ_VERIFY_KV)\n", r->kv_held_bytes / 1e6, r->kv_mode);
    printf("\nchecks:\n");
    for (int i = 0; i < r->n_checks; i++) {
        const kvq_verify_check *c = &r->checks[i];
        if (!strcmp(c->name, "integrity") || !strcmp(c->name, "record") || !strcmp(c->name, "evaluation"))
            printf("  %s %s\n", c->pass ? "pass" : "FAIL", !strcmp(c->name, "evaluation")
                   ? "evaluation (limits on ppl/KLD need --text)" : c->name);
        else if (!isnan(c->se)) // the verdict says when the limit lies within one standard error
            printf("  %s %-18s %-12.48s %.6g ± %.2g (limit %.6g)%s\n", c->pass ? "pass" : "FAIL", c->name, c->subject,
                   c->value, c->se, c->limit,
                   kvq_verify_check_conclusive(c) ? "" : ": within one standard error of the limit, not conclusive");
        else
            printf("  %s %-18s %-12.48s %.6g (limit %.6g)\n", c->pass ? "pass" : "FAIL", c->name, c->subject, c->value,
                   c->limit);
    }
    char v[256];
    printf("result: %s\n", verdict(r, v, sizeof v));
}

enum {
    O_SOURCE = 256, O_NO_SOURCE, O_TEXT, O_CTX, O_STRIDE, O_BOS, O_NO_BOS, O_SCORED, O_MAXTOK, O_WINDOWS, O_KV,
    O_KV_WINDOW, O_KV_BOUNDARY, O_KV_SEED, O_NO_KV, O_PPL, O_KLD, O_KLD99, O_TOP1, O_RMSDP, O_SNR, O_RELERR, O_JSON,
    O_TENSORS, O_RECORD, O_CHECK_RECORD, O_GPU, O_REPORT
};

int main(int argc, char **argv) {
    if (kvq_tool_start("kvq-verify", argc, argv)) return 0; // SIGXFSZ ignored, --version
    static const struct option lo[] = {
        {"source", required_argument, 0, O_SOURCE}, {"no-source", no_argument, 0, O_NO_SOURCE},
        {"text", required_argument, 0, O_TEXT}, {"ctx", required_argument, 0, O_CTX},
        {"stride", required_argument, 0, O_STRIDE}, {"bos", optional_argument, 0, O_BOS},
        {"no-bos", no_argument, 0, O_NO_BOS}, {"scored", required_argument, 0, O_SCORED},
        {"score", required_argument, 0, O_SCORED},
        {"max-tokens", required_argument, 0, O_MAXTOK}, {"windows", required_argument, 0, O_WINDOWS},
        {"kv", required_argument, 0, O_KV}, {"kv-window", required_argument, 0, O_KV_WINDOW},
        {"kv-boundary", no_argument, 0, O_KV_BOUNDARY}, {"kv-seed", required_argument, 0, O_KV_SEED},
        {"no-kv", no_argument, 0, O_NO_KV}, {"max-ppl-delta", required_argument, 0, O_PPL},
        {"max-kld", required_argument, 0, O_KLD}, {"max-kld-p99", required_argument, 0, O_KLD99},
        {"min-top1", required_argument, 0, O_TOP1}, {"max-rms-dp", required_argument, 0, O_RMSDP},
        {"min-snr", required_argument, 0, O_SNR}, {"max-rel-err", required_argument, 0, O_RELERR},
        {"json", no_argument, 0, O_JSON}, {"tensors", required_argument, 0, O_TENSORS},
        {"gpu", no_argument, 0, O_GPU}, {"record", no_argument, 0, O_RECORD},
        {"report", required_argument, 0, O_REPORT}, {"verbose", no_argument, 0, 'v'}, {"check-record", no_argument, 0, O_CHECK_RECORD},
        {"threads", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    kvq_verify_opts o = kvq_verify_opts_default();
    kvq_err err = {0};
    int as_json = 0, record = 0, verbose = 0, c;
    const char *report = NULL;
    size_t rows = 10, v;
    prog_state ps = {0, isatty(2), NULL, 0};
    opterr = 0; // errors are reported in one line below
    while ((c = getopt_long(argc, argv, "t:qvh", lo, NULL)) != -1) {
        switch (c) {
        case O_SOURCE: o.source = optarg; break;
        case O_NO_SOURCE: o.no_source = 1; break;
        case O_TEXT: o.text_path = optarg; break;
        case O_CTX: if (parse_range("--ctx", optarg, 2, 1 << 20, &v)) return 2; o.proto.ctx = (int)v; break;
        case O_STRIDE: if (parse_range("--stride", optarg, 1, 1 << 20, &v)) return 2; o.proto.stride = (int)v; break;
        case O_BOS: { // --bos=VALUE, --bos VALUE, or a bare --bos (prepend)
            const char *val = optarg;
            if (!val && optind < argc &&
                (!strcmp(argv[optind], "none") || !strcmp(argv[optind], "prepend") || !strcmp(argv[optind], "replace")))
                val = argv[optind++];
            if (kvq_opt_bos("kvq-verify", val ? val : "prepend", &o.proto.bos)) return 2;
            break;
        }
        case O_NO_BOS: o.proto.bos = KVQ_BOS_NONE; break;
        case O_SCORED:
            if (kvq_opt_scored("kvq-verify", optarg, &o.proto.score)) return 2;
            break;
        case O_MAXTOK: if (parse_size("--max-tokens", optarg, &o.proto.max_tokens)) return 2; break;
        case O_WINDOWS: if (parse_size("--windows", optarg, &o.max_windows)) return 2; break;
        case O_KV: o.kv_spec = optarg; break;
        case O_KV_WINDOW: if (parse_range("--kv-window", optarg, 0, 1 << 24, &v)) return 2; o.kv_policy.window = (int)v; break;
        case O_KV_BOUNDARY: o.kv_policy.boundary = 1; break;
        case O_KV_SEED: if (kvq_opt_u64("kvq-verify", "--kv-seed", optarg, &o.kv_policy.seed)) return 2; break;
        case O_NO_KV: o.no_kv = 1; break;
        case O_GPU: o.backend = kvq_backend_cuda_new; break;
        case O_PPL:
            if (kvq_verify_parse_delta(optarg, &o.limits.max_ppl_delta, &o.limits.ppl_delta_rel, &err)) {
                fprintf(stderr, "kvq-verify: --max-ppl-delta: %s\n", err.msg);
                return 2;
            }
            break;
        case O_KLD: if (parse_num("--max-kld", optarg, &o.limits.max_kld, 0)) return 2; break;
        case O_KLD99: if (parse_num("--max-kld-p99", optarg, &o.limits.max_kld_p99, 0)) return 2; break;
        case O_TOP1: if (parse_num("--min-top1", optarg, &o.limits.min_top1, 1)) return 2; break;
        case O_RMSDP: if (parse_num("--max-rms-dp", optarg, &o.limits.max_rms_dp, 1)) return 2; break;
        case O_SNR: if (parse_num("--min-snr", optarg, &o.limits.min_snr, 0)) return 2; break;
        case O_RELERR: if (parse_num("--max-rel-err", optarg, &o.limits.max_rel_err, 1)) return 2; break;
        case O_JSON: as_json = 1; break;
        case O_TENSORS: if (parse_size("--tensors", optarg, &rows)) return 2; break;
        case O_RECORD: record = 1; o.replace_record = 1; break;
        case O_CHECK_RECORD: o.require_record = 1; o.no_source = 1; break;
        case 't': if (parse_range("-t", optarg, 1, 1024, &v)) return 2; o.n_threads = (int)v; break;
        case 'q': ps.quiet = 1; break;
        case 'v': verbose = 1; break;
        case O_REPORT: report = optarg; break;
        case 'h': usage(stdout); return 0;
        default: // one line naming the option, not the whole usage
            fprintf(stderr, "kvq-verify: %s: unknown option or missing value (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (argc - optind != 1) {
        if (argc - optind == 0) fprintf(stderr, "kvq-verify: no FILE.kvq given (see --help)\n");
        else fprintf(stderr, "kvq-verify: unexpected argument '%s' after %s (one FILE.kvq; see --help)\n",
                     argv[optind + 1], argv[optind]);
        return 2;
    }
    if (o.require_record && (record || o.text_path)) {
        fprintf(stderr, "kvq-verify: --check-record takes no --record or --text\n");
        return 2;
    }
    { // quality limits measure nothing without a text: a usage error, not a failed check
        const kvq_verify_limits *L = &o.limits;
        const char *q = !isnan(L->max_ppl_delta) ? "--max-ppl-delta" : !isnan(L->max_kld) ? "--max-kld"
                        : !isnan(L->max_kld_p99) ? "--max-kld-p99" : !isnan(L->min_top1) ? "--min-top1"
                        : !isnan(L->max_rms_dp) ? "--max-rms-dp" : NULL;
        if (q && !o.text_path && !o.require_record) {
            fprintf(stderr, "kvq-verify: %s needs --text (the quality limits are measured on a text)\n", q);
            return 2;
        }
        if (o.text_path && access(o.text_path, R_OK) != 0) { // before the long checks, not after
            fprintf(stderr, "kvq-verify: --text %s: %s\n", o.text_path, strerror(errno));
            return 2;
        }
    }
    if (report) { // the name says the format; a wrong one fails before the long checks
        const char *dot = strrchr(report, '.');
        if (!dot || (strcasecmp(dot, ".html") && strcasecmp(dot, ".htm"))) {
            fprintf(stderr, "kvq-verify: --report %s: the name must end in .html\n", report);
            return 2;
        }
    }
    if (o.no_source && o.text_path) {
        fprintf(stderr, "kvq-verify: --text needs the source (drop --no-source)\n");
        return 2;
    }
    o.kvq_path = argv[optind];
    kvq_tool_input("kvq-verify", o.kvq_path);
    o.progress = on_progress;
    o.progress_ud = &ps;
    kvq_verify_report rep;
    kvq_status s = kvq_verify_run(&o, &rep, &err);
    if (s) {
        fprintf(stderr, "kvq-verify: %s\n", err.msg);
        kvq_verify_report_free(&rep);
        return 2;
    }
    int rc = rep.pass ? 0 : 1;
    if (as_json) {
        json_t *j = kvq_verify_report_json(&rep);
        if (!j || json_dumpf(j, stdout, JSON_INDENT(2)) != 0) {
            fprintf(stderr, "kvq-verify: cannot write the JSON report\n");
            rc = 2;
        }
        putchar('\n');
        json_decref(j);
    } else print_human(&rep, verbose ? 0 : rows, verbose);
    if (record && rc != 2) {
        if (!rep.integrity_ok) {
            fprintf(stderr, "kvq-verify: %s: integrity failed; no record stored\n", rep.kvq_path);
        } else if (kvq_verify_record_store(rep.kvq_path, &rep, &err)) {
            fprintf(stderr, "kvq-verify: --record: %s\n", err.msg);
            rc = 2;
        } else if (!as_json) printf("record: stored in %s\n", rep.kvq_path);
        else fprintf(stderr, "kvq-verify: record stored in %s\n", rep.kvq_path);
    }
    if (report) { // after --record, so the page states the record this run stored
        char v[256], msg[1024];
        if (kvq_report_html(&rep, verdict(&rep, v, sizeof v), report, msg, sizeof msg)) {
            fprintf(stderr, "kvq-verify: --report: %s\n", msg);
            rc = 2;
        } else if (verbose || !as_json) fprintf(as_json ? stderr : stdout, "report: written to %s\n", report);
    }
    kvq_verify_report_free(&rep);
    return rc;
}
