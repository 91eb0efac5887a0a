// kvq-run: run a model (HF dir, llama2.c .bin or .kvq) on CPU. Generates text from a
// prompt (streamed to stdout, speeds on stderr), writes logits for given token ids, or
// measures perplexity of a text file under an explicit protocol.
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <omp.h>

#include "formats/tmpfile.h"
#include "formats/kvqfile.h"
#include "tools/opt.h"
#include "libconv/eval/eval.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/runtime/backend.h"
#include "libconv/runtime/model.h"
#include "libconv/runtime/sample.h"
#include "libconv/tokenizer/tokenizer.h"

static const char *usage =
    "usage: kvq-run MODEL -p PROMPT|--prompt-file FILE [-n 128] [--temp 0.8] [--top-p 0.95] [--seed 1] [-t N]\n"
    "               [--batch N]  (N sequences of the prompt decoded together, seeds seed..seed+N-1;\n"
    "               with --kv, one codec cache per sequence)\n"
    "       kvq-run MODEL --tokens ids.bin --logits out.bin     (int32 LE ids -> fp32 LE [T, vocab])\n"
    "       kvq-run MODEL --ppl FILE [--ctx 512] [--stride N] [--bos none|prepend|replace | --no-bos]\n"
    "               [--scored all-but-first|second-half] [--max-tokens N] [--partial]  (as kvq-verify)\n"
    "       kvq-run MODEL --ppl-ids ids.bin ...                  (same, on int32 LE token ids)\n"
    "options: --weights auto|f32|bf16 (held precision; auto = bf16 where exact)  --kv-fp16\n"
    "         --exec int8|exact|decoded  HyperQuant tensors: packed with int8 activations (default),\n"
    "         packed with float activations, or decoded to floats at load (reference); PQ and QET\n"
    "         tensors are packed (float products) in every mode but decoded\n"
    "         --ctx-max N (KV cache positions)  -t N threads\n"
    "         --gpu  run on the CUDA device: weights uploaded (packed stay packed), fp32 activations\n"
    "         and KV cache on the device; the codecs fp16 (= --kv-fp16), int, kivi, turboquant, qturbo,\n"
    "         turboquant-prod, octopus[:qjl] (2..4 bits), hqkv and hqmq (s24:r3, s96:r4, s192:r6, no\n"
    "         outliers) run there too, packed (head_dim 64 or 128 with 1, 2, 4 or 8 query heads per KV\n"
    "         head); others on the CPU\n"
    "         --kv SPEC [--kv-window N] [--kv-boundary]  KV-cache codec (docs/KV.md); default: the\n"
    "         .kvq's \"kv\" section if it has one (on the GPU: if the device can run it), else the\n"
    "         fp32/fp16 cache\n"
    "         -v  also the settings in effect (threads, --exec, --weights, KV cache) and, when\n"
    "         generating, the sampling settings and the prompt's token ids, on stderr\n"
    "         --version\n";

static char *prompt_buf; // --prompt-file's text (file scope: reachable on every exit path)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define T_ "kvq-run"

// Informational lines wait here until the run has validated its inputs (the tokenizer, the
// prompt or text, the first forward pass): a failed run prints its error as its only line.
static char info_buf[8192];
static size_t info_len;
__attribute__((format(printf, 1, 2))) static void info(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(info_buf + info_len, sizeof info_buf - info_len, fmt, ap);
    va_end(ap);
    if (n > 0) info_len = info_len + (size_t)n < sizeof info_buf ? info_len + (size_t)n : sizeof info_buf - 1;
}
static void info_flush(void) {
    if (info_len) fputs(info_buf, stderr);
    info_len = 0;
}

static int die(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "kvq-run: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 2;
}

static int32_t *read_ids(const char *path, size_t *n, char *msg, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(msg, cap, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz <= 0 || sz % 4) { fclose(f); snprintf(msg, cap, "%s: size %ld is not a positive multiple of 4 (int32 ids)", path, sz); return NULL; }
    int32_t *ids = malloc(sz);
    if (!ids || fread(ids, 1, sz, f) != (size_t)sz) { free(ids); fclose(f); snprintf(msg, cap, "%s: read error", path); return NULL; }
    fclose(f);
    *n = sz / 4;
    return ids;
}

// Writes to a temporary name in the same directory, then renames.
static int write_atomic(const char *path, const void *data, size_t n, char *msg, size_t cap) {
    char *tmp = NULL;
    int fd = kvq_tmp_create(path, &tmp); // formats/tmpfile.h: locked, 0666 & ~umask
    if (fd < 0) { snprintf(msg, cap, "%s: cannot create temporary file: %s", path, strerror(errno)); free(tmp); return -1; }
    const char *p = data;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) { snprintf(msg, cap, "%s: write failed: %s", path, strerror(errno)); close(fd); unlink(tmp); free(tmp); return -1; }
        p += w; left -= w;
    }
    if (fsync(fd) || close(fd) || rename(tmp, path)) {
        snprintf(msg, cap, "%s: cannot finish writing: %s", path, strerror(errno));
        unlink(tmp); free(tmp); return -1;
    }
    free(tmp);
    return 0;
}

// Prints the prompt's text (without BOS); @return its last id (the next piece's predecessor).
static int32_t echo_prompt(const kvq_tokenizer *tok, const int32_t *pids, size_t np) {
    char piece[256];
    int32_t prev = -1;
    for (size_t i = 0; i < np; i++) {
        if (pids[i] == kvq_tok_bos(tok)) { prev = pids[i]; continue; }
        int k = kvq_tok_piece(tok, prev, pids[i], piece, sizeof piece);
        if (k > 0) fwrite(piece, 1, k, stdout);
        prev = pids[i];
    }
    fflush(stdout);
    return prev;
}

// --batch N: N sequences of the prompt (each prefilled into its own KV cache, sampled with seed
// + i) decoded together, one step for all of them (kvq_model_forward_seqs: each weight byte
// read once per step for the batch). A sequence that meets EOS or its n tokens leaves the
// batch. The texts are printed at the end, the tokens/s line counts every sequence's tokens.
static int generate_batch(kvq_model *m, kvq_tokenizer *tok, const int32_t *pids, int np, int n_gen, int B, float temp,
                          float top_p, uint64_t seed, const char *model) {
    const kvq_arch *ar = kvq_model_arch(m);
    const int V = ar->vocab_size, greedy = temp <= 0.0f;
    const int32_t eos = kvq_tok_eos(tok) >= 0 ? kvq_tok_eos(tok) : ar->eos_token_id;
    kvq_err err = {0};
    int rc = 0;
    kvq_sampler **smp = calloc(B, sizeof *smp);
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)B * (n_gen + 1)), *next = malloc(sizeof(int32_t) * B), *tk = malloc(sizeof(int32_t) * B),
            *out_next = malloc(sizeof(int32_t) * B); // a step's greedy choices
    int *ng = calloc(B, sizeof(int)), *done = calloc(B, sizeof(int)), *seq = malloc(sizeof(int) * B), *pos = malloc(sizeof(int) * B);
    float *lg = greedy ? NULL : malloc(sizeof(float) * (size_t)B * V);
    if (!smp || !gen || !next || !tk || !out_next || !ng || !done || !seq || !pos || (!greedy && !lg)) { rc = die("out of memory for %s sequences%s", "--batch", ""); goto out; }
    if (kvq_model_set_seqs(m, B, &err)) { rc = die("--batch: %s%s", err.msg, ""); goto out; }
    kvq_model_mem mm; // the memory line above counted one sequence's cache
    kvq_model_memory(m, &mm);
    info("kvq-run: --batch %d: KV cache %.1f MB, scratch %.1f MB (every sequence's)\n", B, mm.kv / 1e6, mm.scratch / 1e6);
    for (int i = 0; i < B; i++)
        if (kvq_sampler_new(temp, top_p, seed + (uint64_t)i, V, &smp[i], &err)) { rc = die("%s%s", err.msg, ""); goto out; }
    info_flush();
    const int32_t last = echo_prompt(tok, pids, np);
    const double t1 = now();
    for (int i = 0; i < B; i++) { // the prompt into each sequence's cache; its first token
        kvq_status s = kvq_model_use_seq(m, i, &err);
        if (!s) s = greedy ? kvq_model_forward_argmax(m, pids, np, 0, &next[i], &err)
                           : kvq_model_forward(m, pids, np, 0, lg + (size_t)i * V, 0, &err);
        if (s) { rc = die("%s%s", err.msg, ""); goto out; }
        if (!greedy) next[i] = kvq_sample(smp[i], lg + (size_t)i * V, V);
    }
    const double t2 = now();
    long produced = 0, steps = 0;
    for (;;) {
        int n = 0;
        for (int i = 0; i < B; i++) {
            if (done[i]) continue;
            if (next[i] < 0) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s: sequence %d: the logits at position %d are NaN (weights or activations not finite)",
                         model, i, np + ng[i]);
                rc = die("%s%s", msg, "");
                goto out;
            }
            if (next[i] == eos) { done[i] = 1; continue; }
            gen[(size_t)i * (n_gen + 1) + ng[i]++] = next[i];
            produced++;
            if (ng[i] >= n_gen) { done[i] = 1; continue; } // the last sampled token is not fed back
            seq[n] = i, pos[n] = np + ng[i] - 1, tk[n] = next[i], n++;
        }
        if (!n) break;
        kvq_status s = kvq_model_forward_seqs(m, tk, seq, pos, n, greedy ? NULL : lg, greedy ? out_next : NULL, &err);
        if (s) { rc = die("%s%s", err.msg, ""); goto out; }
        for (int t = 0; t < n; t++)
            next[seq[t]] = greedy ? out_next[t] : kvq_sample(smp[seq[t]], lg + (size_t)t * V, V);
        steps++;
    }
    const double t3 = now();
    char piece[256];
    for (int i = 0; i < B; i++) {
        printf("\n--- sequence %d (seed %llu) ---\n", i, (unsigned long long)(seed + (uint64_t)i));
        int32_t prev = last;
        for (int k = 0; k < ng[i]; k++) {
            const int32_t id = gen[(size_t)i * (n_gen + 1) + k];
            int len = kvq_tok_piece(tok, prev, id, piece, sizeof piece);
            if (len > 0) fwrite(piece, 1, len, stdout);
            prev = id;
        }
    }
    printf("\n");
    fflush(stdout);
    // the first token of each sequence comes from its prefill: steps produced the rest
    fprintf(stderr, "kvq-run: --batch %d: prefill %d tokens x %d sequences %.1f tok/s; decode %ld tokens in %ld steps %.1f "
            "tok/s over the batch (%.3f ms a step)\n", B, np, B, (double)np * B / (t2 - t1), produced - B, steps,
            steps ? (produced - B) / (t3 - t2) : 0.0, steps ? 1e3 * (t3 - t2) / steps : 0.0);
out:
    for (int i = 0; smp && i < B; i++) kvq_sampler_free(smp[i]);
    free(smp); free(gen); free(next); free(tk); free(out_next); free(ng); free(done); free(seq); free(pos); free(lg);
    return rc;
}

// libgomp reads its wait policy when it loads, so the only way to pick one is to
// restart with the variable set. Spinning pays only while every thread has a core of its
// own: sleeping between the ~30 parallel regions of a decode step costs a wake-up each
// (kvq-small-llama E8 4.0 at 2 threads on a quiet machine: 211-224 tok/s passive against
// 523-546 with a bounded spin), but on a busy machine a spinning thread burns the time slice
// its descheduled partner needs (the same run at load 20 on 2 cores: 4.6-6.6 tok/s with
// GOMP_SPINCOUNT=30000, 60-317 passive, 43-75 at one thread; docs/RESULTS.md, sixth
// increment). Unless the user chose a policy: passive when the 1-minute load average plus
// our threads exceeds the online cores (+0.5), else a spin of GOMP_SPINCOUNT=30000 iterations
// (tens of µs). One thread: nothing to choose.
static void ensure_wait_policy(int argc, char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long threads = ncpu;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-t")) threads = strtol(argv[i + 1], NULL, 10) > 0 ? strtol(argv[i + 1], NULL, 10) : ncpu;
    if (threads <= 1) return;
    double load = 0.0;
    FILE *f = fopen("/proc/loadavg", "r");
    const int known = f && fscanf(f, "%lf", &load) == 1;
    if (f) fclose(f);
    if (known && load + (double)threads > (double)ncpu + 0.5) setenv("OMP_WAIT_POLICY", "passive", 1);
    else setenv("GOMP_SPINCOUNT", "30000", 1);
    execv("/proc/self/exe", argv); // on failure carry on with the default policy
}

int main(int argc, char **argv) {
    if (kvq_tool_start("kvq-run", argc, argv)) return 0; // SIGXFSZ ignored, --version
    ensure_wait_policy(argc, argv);
    const char *prompt_file = NULL;
    const char *model = NULL, *prompt = NULL, *tok_in = NULL, *logits_out = NULL, *ppl = NULL, *ppl_ids = NULL;
    int n_gen = 128, threads = 0, batch = 1;
    float temp = 0.8f, top_p = 0.95f;
    uint64_t seed = 1;
    kvq_model_opts mo = kvq_model_opts_default();
    kvq_eval_protocol ep = kvq_eval_protocol_card();
    const char *kv_spec = NULL;
    int kv_window = 0, kv_boundary = 0, verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && (v || (die("option %s needs a value%s", a, ""), exit(2), 0)) && ++i)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); return 0; }
        else if (ARG("-p")) prompt = v;
        else if (ARG("--prompt-file")) prompt_file = v;
        else if (ARG("-n")) { if (kvq_opt_int(T_, a, v, 0, 1 << 30, &n_gen)) return 2; }
        else if (ARG("--temp")) { double d; if (kvq_opt_double(T_, a, v, 0, 1e6, &d)) return 2; temp = (float)d; }
        else if (ARG("--top-p")) { double d; if (kvq_opt_double(T_, a, v, 0, 1, &d)) return 2; top_p = (float)d; }
        else if (ARG("--seed")) { if (kvq_opt_u64(T_, a, v, &seed)) return 2; }
        else if (ARG("-t")) { if (kvq_opt_int(T_, a, v, 0, 4096, &threads)) return 2; }
        else if (ARG("--batch")) { if (kvq_opt_int(T_, a, v, 1, KVQ_MODEL_MAX_SEQS, &batch)) return 2; }
        else if (ARG("--tokens")) tok_in = v;
        else if (ARG("--logits")) logits_out = v;
        else if (ARG("--ppl")) ppl = v;
        else if (ARG("--ppl-ids")) ppl_ids = v;
        else if (ARG("--ctx")) { if (kvq_opt_int(T_, a, v, 1, 1 << 24, &ep.ctx)) return 2; }
        else if (ARG("--stride")) { if (kvq_opt_int(T_, a, v, 0, 1 << 24, &ep.stride)) return 2; }
        else if (ARG("--max-tokens")) { uint64_t u; if (kvq_opt_u64(T_, a, v, &u)) return 2; ep.max_tokens = u; }
        else if (ARG("--ctx-max")) { if (kvq_opt_int(T_, a, v, 0, 1 << 24, &mo.max_ctx)) return 2; }
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
        else if (!strcmp(a, "--partial")) ep.partial_last = 1;
        else if (!strcmp(a, "--no-bos")) ep.bos = KVQ_BOS_NONE;
        else if (!strcmp(a, "--kv-fp16")) mo.kv_fp16 = 1;
        else if (!strcmp(a, "--gpu")) mo.backend = kvq_backend_cuda_new;
        else if (ARG("--kv")) kv_spec = v;
        else if (ARG("--kv-window")) { if (kvq_opt_int(T_, a, v, 0, 1 << 24, &kv_window)) return 2; }
        else if (!strcmp(a, "--kv-boundary")) kv_boundary = 1;
        else if (ARG("--bos")) {
            if (kvq_opt_bos(T_, v, &ep.bos)) return 2;
        } else if (ARG("--score") || ARG("--scored")) {
            if (kvq_opt_scored(T_, v, &ep.score)) return 2;
        } else if (ARG("--weights")) {
            if (!strcmp(v, "auto")) mo.store = KVQ_WEIGHTS_AUTO;
            else if (!strcmp(v, "f32")) mo.store = KVQ_WEIGHTS_F32;
            else if (!strcmp(v, "bf16")) mo.store = KVQ_WEIGHTS_BF16;
            else return die("--weights %s: expected auto, f32 or bf16%s", v, "");
        } else if (ARG("--exec")) {
            if (!strcmp(v, "int8")) mo.exec = KVQ_EXEC_INT8;
            else if (!strcmp(v, "exact")) mo.exec = KVQ_EXEC_EXACT;
            else if (!strcmp(v, "decoded")) mo.exec = KVQ_EXEC_DECODED;
            else return die("--exec %s: expected int8, exact or decoded%s", v, "");
        } else if (a[0] == '-' && a[1]) return die("unknown option %s (see --help)%s", a, "");
        else if (!model) model = a;
        else return die("unexpected argument %s%s", a, "");
#undef ARG
    }
    if (!model) { fputs(usage, stderr); return 2; }
    kvq_tool_input("kvq-run", model);
    if (prompt_file) { // a prompt too long for the command line: the file's text, checked as every text input
        if (prompt) return die("--prompt-file %s and -p: give one of them%s", prompt_file, "");
        kvq_tool_input("kvq-run", prompt_file);
        kvq_err pe = {0};
        size_t pl = 0;
        if (kvq_tok_text_read(prompt_file, &prompt_buf, &pl, &pe)) return die("%s%s", pe.msg, "");
        if (!pl) return die("%s: empty prompt%s", prompt_file, "");
        prompt = prompt_buf;
    }
    if (batch > 1 && (tok_in || ppl || ppl_ids)) return die("--batch applies to generation (-p, --prompt-file)%s%s", "", "");
    if (!!tok_in != !!logits_out) return die("--tokens and --logits go together%s%s", "", "");
    if (!tok_in && !ppl && !ppl_ids && !prompt) return die("nothing to do: give -p, --tokens/--logits, --ppl or --ppl-ids%s%s", "", "");
    if (n_gen < 0) return die("-n must be >= 0%s%s", "", "");
    mo.n_threads = threads;
    if (mo.backend && mo.kv_fp16) { // the device's fp16 cache is its codec "fp16"
        if (kv_spec) return die("--kv-fp16 and --kv %s: choose one%s", kv_spec, "");
        kv_spec = "fp16";
        mo.kv_fp16 = 0;
    }
    char msg[1200];
    size_t n_ids = 0;
    int32_t *ids = NULL;
    if (tok_in && !(ids = read_ids(tok_in, &n_ids, msg, sizeof msg))) return die("%s%s", msg, "");
    if (ids) {
        if (mo.max_ctx > 0 && (size_t)mo.max_ctx < n_ids) return die("%s: more tokens than --ctx-max%s", tok_in, "");
        if (mo.max_ctx <= 0) mo.max_ctx = (int)n_ids;
    }
    if ((ppl || ppl_ids) && mo.max_ctx <= 0) mo.max_ctx = ep.ctx;

    kvq_err err = {0};
    kvq_model *m = NULL;
    double t0 = now();
    if (kvq_model_open(model, &mo, &m, &err)) return die("%s%s", err.msg, "");
    const kvq_arch *ar = kvq_model_arch(m);
    int V = ar->vocab_size, rc = 0;
    { // ---- KV cache: --kv, else the .kvq's declared codec, else the default (fp32; --kv-fp16: fp16)
        kvq_kvcache *kc = NULL;
        // a device holds the cache itself: the host cache only carries the codec states
        int mc = mo.backend ? 1 : kvq_model_max_ctx(m), from_file = 0;
        size_t ml = strlen(model);
        if (kv_spec) {
            kvq_kvcache_policy pol = {kv_window, kv_boundary, seed, 0, 0};
            if (kvq_kvcache_codec_new(kv_spec, ar->n_layers, ar->n_kv_heads, ar->head_dim, mc, &pol, &kc, &err))
                { kvq_model_close(m); return die("%s%s", err.msg, ""); }
        } else if (ml > 4 && !strcmp(model + ml - 4, ".kvq")) {
            kvq_file *kf = NULL;
            if (kvq_file_open(model, &kf, &err) || kvq_kv_open_from_file(kf, mc, 0, &kc, &err))
                { kvq_file_close(kf); kvq_model_close(m); return die("%s%s", err.msg, ""); }
            kvq_file_close(kf);
            from_file = kc != NULL;
        }
        kvq_model_mem km;
        kvq_model_memory(m, &km);
        if (mo.backend && !kc && !km.kv) { // the device's fp32 cache does not reach --ctx-max: its fp16 cache does
            kvq_kvcache_policy pol = {0, 0, seed, 0, 0};
            if (kvq_kvcache_codec_new("fp16", ar->n_layers, ar->n_kv_heads, ar->head_dim, mc, &pol, &kc, &err))
                { kvq_model_close(m); return die("%s%s", err.msg, ""); }
            info("kvq-run: --ctx-max %d is beyond the GPU's fp32 KV cache: the device keeps an fp16 cache (--kv fp16)\n",
                 kvq_model_max_ctx(m));
        }
        if (kc) {
            if (kvq_model_set_kvcache(m, kc, &err)) {
                kc->ops->free(kc);
                if (!from_file || err.code != KVQ_ERR_UNSUPPORTED) { kvq_model_close(m); return die("%s%s", err.msg, ""); }
                // the file's codec where the device has no kernels for it: the default cache, said once
                info("kvq-run: %s declares a KV cache the device cannot run (%s); running the fp32 cache\n", model, err.msg);
                err.code = 0;
            } else {
                info("kvq-run: KV cache %s: %.3f bits/element at the model's %d positions (docs/KV.md)%s\n",
                     kv_spec ? kv_spec : "from the .kvq",
                     kvq_kvcache_codec_formula_bits(kvq_model_kvcache_desc(m), ar->max_position_embeddings),
                     ar->max_position_embeddings, mo.backend ? ", on the device" : "");
            }
        }
    }
    info("kvq-run: %s: %s, %d layers, d=%d, vocab %d, loaded in %.2f s on the %s backend (%.1f MB of weights held)\n",
            model, ar->hf_class, ar->n_layers, ar->hidden_size, V, now() - t0, kvq_model_backend_name(m),
            kvq_model_weight_bytes(m) / 1e6);
    {
        kvq_model_mem mm;
        kvq_model_memory(m, &mm);
        info("kvq-run: memory: weights %.1f MB (packed %.1f MB for %.1f MB stored = %.4fx, dense %.1f MB), "
                        "scratch %.1f MB, KV cache %.1f MB",
                mm.held / 1e6, mm.packed / 1e6, mm.packed_stored / 1e6,
                mm.packed_stored ? (double)mm.packed / (double)mm.packed_stored : 0.0, mm.dense / 1e6, mm.scratch / 1e6,
                mm.kv / 1e6);
        if (mm.kv_exec) info(" as records (held as execution rows: %.1f MB)", mm.kv_exec / 1e6);
        info("\n");
        if (mm.device)
            info("kvq-run: on the device: weights %.1f MB (the embedding table, %.1f MB, stays on the host)\n",
                    mm.device / 1e6, (mm.held - mm.device) / 1e6);
    }

    if (verbose) {
        info("kvq-run: settings: %d threads, --exec %s, --weights %s, KV cache %s%s, context up to %d positions\n",
             threads > 0 ? threads : omp_get_max_threads(),
             mo.exec == KVQ_EXEC_EXACT ? "exact" : mo.exec == KVQ_EXEC_DECODED ? "decoded" : "int8",
             mo.store == KVQ_WEIGHTS_F32 ? "f32" : mo.store == KVQ_WEIGHTS_BF16 ? "bf16" : "auto",
             kv_spec ? kv_spec : "of the model (its .kvq's codec, else fp32", kv_spec ? "" : mo.kv_fp16 ? "/fp16)" : ")",
             kvq_model_max_ctx(m));
        info("kvq-run: thread wait policy: %s\n", getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY")
                                                 : getenv("GOMP_SPINCOUNT") ? "spin GOMP_SPINCOUNT" : "libgomp default");
        if (!ids && !ppl && !ppl_ids)
            info("kvq-run: sampling: temperature %g, top-p %g, seed %llu, %d tokens\n", temp, top_p,
                 (unsigned long long)seed, n_gen);
    }

    if (ids) { // ---- logits for given ids
        float *lg = malloc(sizeof(float) * n_ids * V);
        if (!lg) { rc = die("out of memory for %s%s", logits_out, ""); goto out; }
        double t1 = now();
        if (kvq_model_forward(m, ids, (int)n_ids, 0, lg, 1, &err)) { rc = die("%s: %s", tok_in, err.msg); free(lg); goto out; }
        info_flush();
        fprintf(stderr, "kvq-run: %zu tokens in %.3f s\n", n_ids, now() - t1);
        if (write_atomic(logits_out, lg, sizeof(float) * n_ids * V, msg, sizeof msg)) rc = die("%s%s", msg, "");
        free(lg);
        goto out;
    }

    kvq_tokenizer *tok = NULL;
    if ((ppl || prompt) && kvq_model_tokenizer(m, &tok, &err)) { rc = die("%s%s", err.msg, ""); goto out; }
    if (ppl || ppl_ids) { // ---- perplexity
        kvq_eval_result r;
        char desc[256];
        // the text is tokenized first and timed apart: the tokens/s line measures the forward
        // passes and the scoring only (tokenizing a whole book can take longer than its windows)
        double t0t = now();
        int32_t *pi = NULL;
        if (ppl) {
            if (kvq_eval_tokenize_file(tok, ppl, &pi, &n_ids, &err)) { rc = die("%s%s", err.msg, ""); goto out_tok; }
        } else if (!(pi = read_ids(ppl_ids, &n_ids, msg, sizeof msg))) { rc = die("%s%s", msg, ""); goto out_tok; }
        const double dtok = now() - t0t;
        double t1 = now();
        kvq_status s = kvq_eval_tokens(m, NULL, pi, n_ids, &ep, NULL, NULL, &r, NULL, &err);
        free(pi);
        if (s) {
            if (ppl) kvq_err_prefix(&err, "%s", ppl);
            rc = die("%s%s", err.msg, "");
            goto out_tok;
        }
        info_flush();
        double dt = now() - t1;
        printf("ppl %.6f ± %.6f  nll %.6f  scored %zu  windows %zu  text tokens %zu  (%s)\n", r.ppl, r.ppl_se, r.nll_sum,
               r.n_scored, r.n_windows, r.n_tokens, kvq_eval_protocol_str(&ep, desc, sizeof desc));
        fprintf(stderr, "kvq-run: %.1f s, %.0f tokens/s (tokenizing %.2f s apart)\n", dt, r.n_windows * (double)ep.ctx / dt,
                dtok);
        goto out_tok;
    }

    // ---- generation
    int32_t *pids = NULL;
    size_t np = 0;
    if (kvq_tok_encode(tok, prompt, strlen(prompt), 1, &pids, &np, &err)) { rc = die("prompt: %s%s", err.msg, ""); goto out_tok; }
    if (np == 0) { // empty prompt: start from BOS
        free(pids);
        int32_t b = kvq_tok_bos(tok) >= 0 ? kvq_tok_bos(tok) : ar->bos_token_id;
        if (b < 0) { rc = die("empty prompt and the model has no BOS token%s%s", "", ""); goto out_tok; }
        pids = malloc(sizeof(int32_t));
        pids[0] = b;
        np = 1;
    }
    if (verbose) {
        info("kvq-run: prompt: %zu tokens:", np);
        for (size_t i = 0; i < np && i < 64; i++) info(" %d", pids[i]);
        info("%s\n", np > 64 ? " ..." : "");
    }
    int max_ctx = kvq_model_max_ctx(m);
    if ((int64_t)np + n_gen - 1 > max_ctx) { // the last sampled token is never fed back
        n_gen = max_ctx - (int)np + 1;
        if ((int64_t)np > max_ctx) {
            snprintf(msg, sizeof msg, "prompt of %zu tokens exceeds the context of %d (use --ctx-max)", np, max_ctx);
            free(pids);
            rc = die("%s%s", msg, "");
            goto out_tok;
        }
        info("kvq-run: generating only %d tokens (context %d)\n", n_gen, max_ctx);
    }
    if (batch > 1) {
        if (n_gen < 1) { free(pids); goto out_tok; }
        rc = generate_batch(m, tok, pids, (int)np, n_gen, batch, temp, top_p, seed, model);
        free(pids);
        goto out_tok;
    }
    kvq_sampler *smp = NULL;
    float *lg = malloc(sizeof(float) * V);
    if (kvq_sampler_new(temp, top_p, seed, V, &smp, &err)) { rc = die("%s%s", err.msg, ""); free(pids); free(lg); goto out_tok; }
    char piece[256];
    info_flush(); // inputs validated: the model's lines, then the text
    int32_t prev = echo_prompt(tok, pids, np);
    double t1 = now();
    // greedy: the model hands back the argmax, not the logits (on a GPU, picked there)
    const int greedy = temp <= 0.0f;
    int32_t top1 = -1;
    if (greedy ? kvq_model_forward_argmax(m, pids, (int)np, 0, &top1, &err) : kvq_model_forward(m, pids, (int)np, 0, lg, 0, &err)) {
        rc = die("%s%s", err.msg, "");
        goto out_gen;
    }
    double t2 = now();
    int32_t eos = kvq_tok_eos(tok) >= 0 ? kvq_tok_eos(tok) : ar->eos_token_id;
    int produced = 0;
    int pos = (int)np;
    double t_fwd = 0; // of the decode time, in the model's forward passes (the rest: sampling, output)
    for (; produced < n_gen; produced++) {
        int32_t next = greedy ? top1 : kvq_sample(smp, lg, V);
        if (next < 0) {
            snprintf(msg, sizeof msg, "%s: the logits at position %d are NaN (weights or activations not finite)", model, pos);
            rc = die("%s%s", msg, "");
            goto out_gen;
        }
        if (next == eos) break;
        int k = kvq_tok_piece(tok, prev, next, piece, sizeof piece);
        if (k > 0) { fwrite(piece, 1, k, stdout); fflush(stdout); }
        prev = next;
        if (produced + 1 == n_gen) { produced++; break; }
        const double tf = now();
        if (greedy ? kvq_model_forward_argmax(m, &next, 1, pos++, &top1, &err) : kvq_model_forward(m, &next, 1, pos++, lg, 0, &err)) {
            rc = die("%s%s", err.msg, "");
            goto out_gen;
        }
        t_fwd += now() - tf;
    }
    double t3 = now();
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "kvq-run: prefill %zu tokens %.1f tok/s; decode %d tokens %.1f tok/s (%.3f ms a token in the forward "
            "pass, %.3f in sampling and output)\n", np, np / (t2 - t1), produced, produced > 1 ? (produced - 1) / (t3 - t2) : 0.0,
            produced > 1 ? 1e3 * t_fwd / (produced - 1) : 0.0, produced > 1 ? 1e3 * (t3 - t2 - t_fwd) / (produced - 1) : 0.0);
out_gen:
    kvq_sampler_free(smp);
    free(lg);
    free(pids);
out_tok:
    kvq_tok_close(tok);
out:
    free(ids);
    free(prompt_buf);
    kvq_model_close(m);
    return rc;
}
