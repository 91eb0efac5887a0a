// The HTML page of kvq-verify --report (report.h). Plain HTML and inline CSS, no script and no
// external resource: the figures are PNGs drawn by tools/plot.c, inlined as data: URIs, so
// the single file shows the same in any browser, offline.
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/kvqfile.h"
#include "libconv/verify/layers.h"
#include "tools/outfile.h"
#include "tools/plot.h"
#include "tools/report.h"

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

// Text (printf-formatted), escaped whole: no markup in fmt.
__attribute__((format(printf, 2, 3))) static void h(FILE *f, const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    esc(f, buf);
}

static void base64(FILE *f, const unsigned char *p, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        fputc(A[v >> 18 & 63], f);
        fputc(A[v >> 12 & 63], f);
        fputc(i + 1 < n ? A[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? A[v & 63] : '=', f);
    }
}

// A figure as <img> with a data: URI, shown at its drawing size (the PNG holds 2x the pixels).
static int figure(FILE *f, const kvq_layer_table *t, const kvq_plot_kld *k, const char *title, const char *id,
                  const char *alt) {
    unsigned char *png;
    size_t n;
    if (kvq_plot_png(t, k, title, &png, &n)) return -1;
    double w = 900, hh = 340;
    if (t) kvq_plot_size(t->n_layers, &w, &hh);
    fprintf(f, "<figure><img id=\"%s\" class=\"plot\" width=\"%.0f\" height=\"%.0f\" alt=\"", id, w, hh);
    esc(f, alt);
    fputs("\" src=\"data:image/png;base64,", f);
    base64(f, png, n);
    fputs("\"></figure>\n", f);
    free(png);
    return 0;
}

static const char *fmt_snr(double v, char *b, size_t n) {
    if (isinf(v) && v > 0) snprintf(b, n, "exact");
    else if (isnan(v)) snprintf(b, n, "-");
    else snprintf(b, n, "%.2f", v);
    return b;
}

static void model_section(FILE *f, const kvq_verify_report *r, const json_t *m) {
    fputs("<h2>Model</h2>\n<table class=\"kv\">\n", f);
    fputs("<tr><th>file</th><td>", f);
    esc(f, r->kvq_path);
    fputs("</td></tr>\n", f);
    if (m) {
        const json_t *a = json_object_get(m, "architecture");
#define AI(k) json_integer_value(json_object_get(a, k))
        fputs("<tr><th>architecture</th><td>", f);
        h(f, "%s: hidden %" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT " layers, %" JSON_INTEGER_FORMAT " heads (%"
             JSON_INTEGER_FORMAT " KV, dim %" JSON_INTEGER_FORMAT "), ffn %" JSON_INTEGER_FORMAT ", vocab %" JSON_INTEGER_FORMAT
             "%s", json_string_value(json_object_get(a, "hf_class")) ?: "?", AI("hidden_size"), AI("n_layers"), AI("n_heads"),
          AI("n_kv_heads"), AI("head_dim"), AI("intermediate_size"), AI("vocab_size"),
          json_is_true(json_object_get(a, "tie_word_embeddings")) ? ", tied embeddings" : "");
#undef AI
        fputs("</td></tr>\n<tr><th>written by</th><td>", f);
        esc(f, json_string_value(json_object_get(m, "created_by")) ?: "?");
        fputs("</td></tr>\n", f);
    }
    fputs("<tr><th>source</th><td>", f);
    if (r->source_path) h(f, "%s (weight files match the sha256 recorded in the file)", r->source_path);
    else fputs("not compared (--no-source)", f);
    fputs("</td></tr>\n<tr><th>size</th><td>", f);
    if (!isnan(r->model_bpp)) {
        h(f, "whole model %.3f bits/param over %" PRIu64 " parameters", r->model_bpp, r->params);
        if (!isnan(r->lossy_bpw)) h(f, "; quantized tensors %.3f bits/w", r->lossy_bpw);
    } else fputs("-", f);
    fputs("</td></tr>\n<tr><th>KV cache</th><td>", f);
    if (r->kv_spec[0])
        h(f, "%s (from the %s), window %d%s: %.3f bits/element at the model's %d positions; %.3f over this run's cache",
          r->kv_spec, r->kv_from, r->kv_window, r->kv_boundary ? ", fp16 K in the first and last layer" : "", r->kv_bits,
          r->kv_positions, r->kv_bits_run);
    else if (json_object_get(m, "kv")) h(f, "%s declared by the file; not measured in this run", json_string_value(json_object_get(json_object_get(m, "kv"), "spec")) ?: "?");
    else fputs("no KV codec (fp32 cache)", f);
    fputs("</td></tr>\n</table>\n", f);
    const json_t *rec = json_object_get(m, "recipe");
    if (json_is_object(rec)) {
        fputs("<h2>Recipe</h2>\n<table class=\"kv\">\n", f);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)rec, k, v) {
            char *s = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            fputs("<tr><th>", f);
            esc(f, k);
            fputs("</th><td><code>", f);
            esc(f, s ? s : json_string_value(v));
            fputs("</code></td></tr>\n", f);
            free(s);
        }
        fputs("</table>\n", f);
    }
}

static void protocol_section(FILE *f, const kvq_verify_report *r) {
    fputs("<h2>Protocol</h2>\n", f);
    if (!r->evaluated) {
        fputs("<p>No text given (<code>--text</code>): no perplexity or KL divergence measured.</p>\n", f);
        return;
    }
    char desc[256];
    kvq_eval_protocol_str(&r->proto, desc, sizeof desc);
    fputs("<table class=\"kv\">\n<tr><th>windows</th><td>", f);
    h(f, "%s", desc);
    if (r->max_windows) h(f, ", first %zu windows only", r->max_windows);
    if (r->proto.max_tokens) h(f, ", first %zu tokens only", r->proto.max_tokens);
    fputs("</td></tr>\n<tr><th>text</th><td>", f);
    h(f, "%s (%llu bytes, sha256 %s), %zu tokens", r->text_path, (unsigned long long)r->text_bytes, r->text_sha256,
      r->n_tokens);
    fputs("</td></tr>\n<tr><th>scored</th><td>", f);
    h(f, "%zu windows over %zu tokens, %zu positions", r->n_windows, r->n_tokens_used, r->n_scored);
    fputs("</td></tr>\n<tr><th>source perplexity</th><td>", f);
    h(f, "%.4f ± %.4f", r->source_ppl, r->source_ppl_se);
    fputs("</td></tr>\n</table>\n", f);
}

static void checks_section(FILE *f, const kvq_verify_report *r) {
    fputs("<h2>Thresholds and checks</h2>\n<table class=\"grid\">\n<tr><th>check</th><th>subject</th><th>value</th>"
          "<th>limit</th><th>result</th></tr>\n", f);
    for (int i = 0; i < r->n_checks; i++) {
        const kvq_verify_check *c = &r->checks[i];
        fputs("<tr><td>", f);
        esc(f, c->name);
        fputs("</td><td>", f);
        esc(f, c->subject);
        fputs("</td><td>", f);
        if (!strcmp(c->name, "integrity") || !strcmp(c->name, "record") || !strcmp(c->name, "evaluation"))
            fputs("</td><td>", f);
        else {
            if (!isnan(c->se)) h(f, "%.6g ± %.2g", c->value, c->se);
            else h(f, "%.6g", c->value);
            fprintf(f, "</td><td>%.6g", c->limit);
        }
        fprintf(f, "</td><td class=\"%s\">%s%s</td></tr>\n", c->pass ? "pass" : "fail", c->pass ? "pass" : "FAIL",
                kvq_verify_check_conclusive(c) ? "" : " (within one standard error: not conclusive)");
    }
    fputs("</table>\n", f);
    if (!r->n_checks) fputs("<p>No checks.</p>\n", f);
}

static void runs_section(FILE *f, const kvq_verify_report *r) {
    if (!r->evaluated) return;
    fputs("<h2>Weights, KV codec and both</h2>\n<p class=\"note\">", f);
    if (r->kv_spec[0])
        h(f, "The KV codec %s was measured in three runs against the source on the same windows: the converted "
             "weights with the source's fp32 KV cache, the source weights with the KV codec, and both together "
             "(the file as users run it; thresholds apply to it). ", r->kv_spec);
    else fputs("No KV codec was declared in the file or given with <code>--kv</code>: one run, the converted weights "
               "with an fp32 KV cache (as the source). ", f);
    fputs("± is one standard error over scored positions (as llama-perplexity); positions of one window are "
          "correlated, so it understates the uncertainty.</p>\n<table class=\"grid\">\n<tr><th>run</th><th>what</th>"
          "<th>ppl</th><th>Δppl</th><th>KLD mean</th><th>median</th><th>p99</th><th>max</th><th>top-1</th>"
          "<th>RMS Δp</th></tr>\n", f);
    for (int k = 0; k < 3; k++) {
        const kvq_verify_eval *e = &r->run[k];
        if (!e->done) continue;
        fputs("<tr><td>", f);
        esc(f, e->label);
        fputs("</td><td>", f);
        esc(f, e->what);
        fprintf(f, "</td><td>%.4f ± %.4f</td><td>%+.4f ± %.4f (%+.3f %%)</td><td>%.6f ± %.6f</td><td>%.6f</td><td>%.6f</td>"
             "<td>%.6f</td><td>%.2f ± %.2f %%</td><td>%.3f ± %.3f %%</td></tr>\n",
          e->ppl, e->ppl_se, e->dppl, e->dppl_se, 100 * e->dppl_rel, e->kld.mean, e->kld.mean_se, e->kld.median,
          e->kld.p99, e->kld.max, 100 * e->kld.top1, 100 * e->kld.top1_se, 100 * e->kld.rms_dp, 100 * e->kld.rms_dp_se);
    }
    fputs("</table>\n", f);
}

static void tensors_section(FILE *f, const kvq_verify_report *r) {
    if (!r->n_tensors || !r->source_path) return;
    size_t rows = r->n_tensors < 12 ? r->n_tensors : 12;
    fprintf(f, "<h3>Tensors, worst first (%zu of %zu)</h3>\n", rows, r->n_tensors);
    fputs("<table class=\"grid\">\n<tr><th>tensor</th><th>codec</th><th>bits/w</th><th>SNR dB</th><th>rel err</th>"
          "<th>max abs</th></tr>\n", f);
    for (size_t i = 0; i < rows; i++) {
        const kvq_verify_tensor *t = &r->tensors[i];
        char b[32];
        fputs("<tr><td>", f);
        esc(f, t->name);
        fputs("</td><td>", f);
        esc(f, t->codec);
        fprintf(f, "</td><td>%.3f</td><td>%s</td><td>%.3g</td><td>%.3g</td></tr>\n", t->bpw, fmt_snr(t->snr_db, b, sizeof b),
          t->rel_err, t->max_abs);
    }
    fputs("</table>\n", f);
}

static const char style[] =
    "body{font-family:sans-serif;max-width:960px;margin:24px auto;color:#222;line-height:1.4}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{padding:3px 8px;text-align:left;vertical-align:top}"
    "table.grid td,table.grid th{border:1px solid #ddd}table.kv th{color:#555;font-weight:normal;white-space:nowrap}"
    ".pass{color:#17662a}.fail{color:#b3131b;font-weight:bold}"
    "#verdict{font-size:20px;padding:12px 16px;border-radius:6px;margin:12px 0}"
    "#verdict.pass{background:#e3f4e6;border:1px solid #7fc48e}#verdict.fail{background:#fbe4e4;border:1px solid #e08a8a}"
    "figure{margin:8px 0}img.plot{max-width:100%;height:auto;border:1px solid #ddd}"
    "code{font-size:12px}.note{color:#555;font-size:13px}";

int kvq_report_html(const kvq_verify_report *r, const char *verdict, const char *path, char *msg, size_t cap) {
    kvq_file *kf = NULL;
    kvq_err err = {0};
    const json_t *m = NULL;
    if (kvq_file_open(r->kvq_path, &kf, &err) == KVQ_OK) m = kvq_file_manifest(kf); // unreadable: the page says so
    kvq_outfile o;
    if (kvq_outfile_open(&o, path, msg, cap)) { kvq_file_close(kf); return -1; }
    FILE *f = o.f;
    const char *base = strrchr(r->kvq_path, '/');
    base = base ? base + 1 : r->kvq_path;
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>kvq-verify: ", f);
    esc(f, base);
    fprintf(f, "</title>\n<style>%s</style></head><body>\n<h1>kvq-verify report: ", style);
    esc(f, base);
    fprintf(f, "</h1>\n<div id=\"verdict\" class=\"%s\">", r->pass ? "pass" : "fail");
    esc(f, verdict);
    fputs("</div>\n<p class=\"note\">", f);
    h(f, "kvq %s, %s. Integrity: %s", KVQ_VERSION, date, r->integrity_ok ? "ok (digests and bounds, manifest schema, every tensor decodes to finite values)" : r->integrity_msg);
    if (r->record != KVQ_RECORD_NONE || r->require_record) h(f, ". Record: %s", r->record_msg);
    fputs(".</p>\n", f);
    if (!m) {
        fputs("<p class=\"fail\">The manifest could not be read again for this page: ", f);
        esc(f, err.msg);
        fputs("</p>\n", f);
    }
    model_section(f, r, m);
    protocol_section(f, r);
    checks_section(f, r);
    runs_section(f, r);
    int bad = 0;
    fputs("<h2>Per-layer bits and SNR</h2>\n", f);
    kvq_layer_table t = {0};
    if (m && kvq_layers_from_manifest(m, &t, &err) == KVQ_OK) {
        for (size_t i = 0; i < r->n_tensors; i++)
            if (r->tensors[i].compared) kvq_layers_set_error(&t, r->tensors[i].name, r->tensors[i].snr_db, r->tensors[i].rel_err);
        fputs("<p class=\"note\">Bits per weight of each tensor (dots) and of each layer as a whole (bars); SNR of "
              "each weight matrix against the source, 10 log<sub>10</sub>(‖x‖²/‖x−x′‖²), per layer and role", f);
        fputs(t.n_errors ? ".</p>\n" : " (not measured: no source compared).</p>\n", f);
        char title[300];
        snprintf(title, sizeof title, "%s: %.3f bits/param as a whole, per layer", base, r->model_bpp);
        bad |= figure(f, &t, NULL, title, "plot-layers", "per-layer bits per weight and SNR by tensor role");
    } else fputs("<p>Not available: the manifest could not be read.</p>\n", f);
    kvq_layers_free(&t);
    tensors_section(f, r);
    if (r->evaluated) {
        fputs("<h2>KL divergence distribution</h2>\n<p class=\"note\">Per scored position, KLD(source ‖ converted) over "
              "the full vocabulary (as llama.cpp's --kl-divergence), each run.</p>\n", f);
        kvq_plot_kld k = {0};
        for (int i = 0; i < 3; i++)
            if (r->run[i].done) {
                k.label[k.n_runs] = r->run[i].label;
                k.kld[k.n_runs] = r->run[i].kld_pos;
                k.n[k.n_runs++] = r->run[i].kld.n;
            }
        bad |= figure(f, NULL, &k, "KL divergence per scored position", "plot-kld", "histogram of per-position KLD");
    }
    fputs("<p class=\"note\">Written by kvq-verify --report; the figures are drawn with cairo and inlined.</p>\n"
          "</body></html>\n", f);
    kvq_file_close(kf);
    kvq_plot_done();
    if (bad) {
        snprintf(msg, cap, "%s: a figure could not be drawn (cairo)", path);
        kvq_outfile_close(&o, 0, msg, cap);
        return -1;
    }
    return kvq_outfile_close(&o, 1, msg, cap);
}
