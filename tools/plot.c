// The tools' figures, drawn with cairo (plot.h): per-layer bits per weight and SNR by tensor
// role, and the per-position KLD distribution. Everything is drawn in user space on one
// cairo_t, so the PNG (image surface) and SVG (vector surface) outputs are the same picture.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cairo.h>
#include <cairo-svg.h>
#include <fontconfig/fontconfig.h>

#include "tools/outfile.h"
#include "tools/plot.h"

int kvq_plot_format_of(const char *path, kvq_plot_format *out) {
    const char *dot = path ? strrchr(path, '.') : NULL;
    if (dot && !strcasecmp(dot, ".png")) *out = KVQ_PLOT_PNG;
    else if (dot && !strcasecmp(dot, ".svg")) *out = KVQ_PLOT_SVG;
    else return -1;
    return 0;
}

// ---- drawing helpers ----------------------------------------------------------------

static const double palette[10][3] = {{0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
                                      {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50},
                                      {0.74, 0.74, 0.13}, {0.09, 0.75, 0.81}};

static void color(cairo_t *cr, int i) {
    const double *c = palette[i % 10];
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
}

typedef struct { double x, y, w, h; } box;

// Text anchored at (x, y): ax 0 left, 0.5 centre, 1 right; baseline at y + ay·height.
static void text(cairo_t *cr, double x, double y, double ax, double ay, const char *s) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - ax * e.x_advance, y + ay * e.height);
    cairo_show_text(cr, s);
}

// Round tick step giving about n ticks over [lo, hi].
static double tick_step(double lo, double hi, int n) {
    double raw = (hi - lo) / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
}

static void frame(cairo_t *cr, box b, double lo, double hi, const char *ylabel, const char *fmt) {
    cairo_set_source_rgb(cr, 0.97, 0.97, 0.97);
    cairo_rectangle(cr, b.x, b.y, b.w, b.h);
    cairo_fill(cr);
    cairo_set_font_size(cr, 11);
    const double st = tick_step(lo, hi, 5);
    for (double v = ceil(lo / st) * st; v <= hi + 1e-9 * st; v += st) {
        const double y = b.y + b.h - (v - lo) / (hi - lo) * b.h;
        cairo_set_source_rgb(cr, 0.85, 0.85, 0.85);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, b.x, y);
        cairo_line_to(cr, b.x + b.w, y);
        cairo_stroke(cr);
        char s[32];
        snprintf(s, sizeof s, fmt, v);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        text(cr, b.x - 6, y, 1, 0.5, s);
    }
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, b.x, b.y, b.w, b.h);
    cairo_stroke(cr);
    cairo_save(cr);
    cairo_translate(cr, b.x - 52, b.y + b.h / 2);
    cairo_rotate(cr, -M_PI / 2);
    cairo_set_font_size(cr, 12);
    text(cr, 0, 0, 0.5, 0.5, ylabel);
    cairo_restore(cr);
}

static void layer_axis(cairo_t *cr, box b, int L, const char *label) {
    cairo_set_font_size(cr, 11);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    const int every = L <= 24 ? 1 : L <= 48 ? 2 : L <= 120 ? 5 : 10;
    for (int l = 0; l < L; l += every) {
        char s[16];
        snprintf(s, sizeof s, "%d", l);
        text(cr, b.x + (l + 0.5) * b.w / L, b.y + b.h + 14, 0.5, 0, s);
    }
    if (label) text(cr, b.x + b.w / 2, b.y + b.h + 32, 0.5, 0, label);
}

static void message(cairo_t *cr, box b, const char *s) {
    cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
    cairo_set_font_size(cr, 13);
    text(cr, b.x + b.w / 2, b.y + b.h / 2, 0.5, 0.5, s);
}

// ---- per-layer figure -----------------------------------------------------------------

// Roles drawn: the weight matrices; norms and biases (under 1 % of the largest role's
// weights) would flatten the bits axis at 16 or 32 bits/w and carry no quantization error.
static int major_roles(const kvq_layer_table *t, int *idx) {
    int64_t big = 0, mx[KVQ_LAYERS_MAX_ROLES] = {0};
    for (int k = 0; k < t->n_roles; k++) {
        for (int l = 0; l < t->n_layers; l++)
            if (kvq_layers_cell(t, l, k)->numel > mx[k]) mx[k] = kvq_layers_cell(t, l, k)->numel;
        if (mx[k] > big) big = mx[k];
    }
    int n = 0;
    for (int k = 0; k < t->n_roles; k++)
        if (mx[k] * 100 >= big && mx[k] > 0) idx[n++] = k;
    return n;
}

static void legend(cairo_t *cr, double x, double y, const kvq_layer_table *t, const int *idx, int n) {
    cairo_set_font_size(cr, 12);
    for (int i = 0; i < n; i++) {
        color(cr, i);
        cairo_arc(cr, x + 5, y - 4, 4.5, 0, 2 * M_PI);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        text(cr, x + 13, y, 0, 0, t->roles[idx[i]]);
        cairo_text_extents_t e;
        cairo_text_extents(cr, t->roles[idx[i]], &e);
        x += 13 + e.x_advance + 16;
    }
}

void kvq_plot_size(int layers, double *w, double *h) {
    (void)layers;
    *w = 900;
    *h = 640;
}

static void draw_layers(cairo_t *cr, const kvq_layer_table *t, const char *title) {
    const int L = t->n_layers > 0 ? t->n_layers : 1;
    int idx[KVQ_LAYERS_MAX_ROLES];
    const int nr = major_roles(t, idx);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_set_font_size(cr, 15);
    text(cr, 20, 24, 0, 0, title ? title : "per-layer bits and SNR");
    legend(cr, 80, 48, t, idx, nr);
    box b1 = {80, 66, 800, 220}, b2 = {80, 346, 800, 230};
    // bits: the layer as a whole (grey bar), each role (dot)
    double hi = 1;
    for (int l = 0; l < t->n_layers; l++) {
        const double lb = kvq_layers_layer_bpw(t, l, NULL);
        if (lb > hi) hi = lb;
        for (int i = 0; i < nr; i++)
            if (kvq_layers_cell(t, l, idx[i])->present && kvq_layers_cell(t, l, idx[i])->bpw > hi) hi = kvq_layers_cell(t, l, idx[i])->bpw;
    }
    hi *= 1.12;
    frame(cr, b1, 0, hi, "bits per weight", "%g");
    const double slot = b1.w / L;
    for (int l = 0; l < t->n_layers; l++) {
        const double lb = kvq_layers_layer_bpw(t, l, NULL);
        if (!isfinite(lb)) continue;
        cairo_set_source_rgb(cr, 0.78, 0.80, 0.84);
        const double bh = lb / hi * b1.h;
        cairo_rectangle(cr, b1.x + (l + 0.15) * slot, b1.y + b1.h - bh, 0.7 * slot, bh);
        cairo_fill(cr);
        for (int i = 0; i < nr; i++) {
            const kvq_layer_cell *c = kvq_layers_cell(t, l, idx[i]);
            if (!c->present) continue;
            const double x = b1.x + (l + 0.2 + 0.6 * (nr > 1 ? (double)i / (nr - 1) : 0.5)) * slot;
            color(cr, i);
            cairo_arc(cr, x, b1.y + b1.h - c->bpw / hi * b1.h, slot > 30 ? 3.5 : 2.5, 0, 2 * M_PI);
            cairo_fill(cr);
        }
    }
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_font_size(cr, 11);
    text(cr, b1.x + b1.w, b1.y - 4, 1, 0, "bar: the whole layer (codes, side information, norms); dot: one tensor");
    layer_axis(cr, b1, L, NULL);
    // SNR: one line per role over the layers; exact tensors as triangles on the top edge
    double lo = INFINITY, sh = -INFINITY;
    int exact = 0;
    for (int l = 0; l < t->n_layers; l++)
        for (int i = 0; i < nr; i++) {
            const kvq_layer_cell *c = kvq_layers_cell(t, l, idx[i]);
            if (!c->has_error) continue;
            if (isinf(c->snr_db) && c->snr_db > 0) exact++;
            else if (isfinite(c->snr_db)) { lo = fmin(lo, c->snr_db); sh = fmax(sh, c->snr_db); }
        }
    if (!t->n_errors) {
        frame(cr, b2, 0, 1, "SNR (dB)", "%g");
        message(cr, b2, "no per-tensor errors in this file: kvq-verify --record (with the source) stores them");
    } else if (!isfinite(lo)) {
        frame(cr, b2, 0, 1, "SNR (dB)", "%g");
        message(cr, b2, exact ? "every tensor drawn is exact (lossless): SNR infinite" : "no SNR measured");
    } else {
        const double pad = fmax(1.0, 0.08 * (sh - lo));
        lo -= pad;
        sh += pad;
        frame(cr, b2, lo, sh, "SNR (dB)", "%g");
        for (int i = 0; i < nr; i++) {
            color(cr, i);
            cairo_set_line_width(cr, 1.6);
            int pen = 0;
            for (int l = 0; l < t->n_layers; l++) {
                const kvq_layer_cell *c = kvq_layers_cell(t, l, idx[i]);
                const double x = b2.x + (l + 0.5) * slot;
                if (!c->has_error || !isfinite(c->snr_db)) { // a gap in the line
                    if (pen) cairo_stroke(cr);
                    pen = 0;
                    if (c->has_error && c->snr_db > 0) { // exact
                        cairo_move_to(cr, x, b2.y + 2);
                        cairo_line_to(cr, x - 4, b2.y + 9);
                        cairo_line_to(cr, x + 4, b2.y + 9);
                        cairo_close_path(cr);
                        cairo_fill(cr);
                    }
                    continue;
                }
                const double y = b2.y + b2.h - (c->snr_db - lo) / (sh - lo) * b2.h;
                if (pen) cairo_line_to(cr, x, y);
                else cairo_move_to(cr, x, y);
                pen = 1;
            }
            if (pen) cairo_stroke(cr);
            for (int l = 0; l < t->n_layers; l++) {
                const kvq_layer_cell *c = kvq_layers_cell(t, l, idx[i]);
                if (!c->has_error || !isfinite(c->snr_db)) continue;
                cairo_arc(cr, b2.x + (l + 0.5) * slot, b2.y + b2.h - (c->snr_db - lo) / (sh - lo) * b2.h, 3, 0, 2 * M_PI);
                cairo_fill(cr);
            }
        }
        if (exact) {
            cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
            cairo_set_font_size(cr, 11);
            text(cr, b2.x + b2.w, b2.y - 4, 1, 0, "triangle on the top edge: exact (lossless) tensor");
        }
    }
    layer_axis(cr, b2, L, "layer");
}

// ---- KLD distribution -----------------------------------------------------------------

enum { KLD_LO = -6, KLD_PER_DECADE = 5 };

static void draw_kld(cairo_t *cr, const kvq_plot_kld *k, const char *title) {
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_set_font_size(cr, 15);
    text(cr, 20, 24, 0, 0, title ? title : "KL divergence per scored position");
    double mx = 0;
    for (int r = 0; r < k->n_runs; r++)
        for (size_t i = 0; i < k->n[r]; i++)
            if (k->kld[r][i] > mx) mx = k->kld[r][i];
    const int hi = mx > 0 ? (int)fmax(KLD_LO + 1, ceil(log10(mx) + 1e-9)) : KLD_LO + 1;
    const int nb = (hi - KLD_LO) * KLD_PER_DECADE + 1; // bin 0: below 1e-6 (and exact zeros)
    double *frac = calloc((size_t)nb * 3, sizeof *frac), top = 0;
    if (!frac) return;
    for (int r = 0; r < k->n_runs; r++) {
        for (size_t i = 0; i < k->n[r]; i++) {
            const double v = k->kld[r][i];
            int b = v < 1e-6 ? 0 : 1 + (int)floor((log10(v) - KLD_LO) * KLD_PER_DECADE);
            if (b >= nb) b = nb - 1;
            frac[r * nb + b] += 1.0 / (double)(k->n[r] ? k->n[r] : 1);
        }
        for (int b = 0; b < nb; b++) top = fmax(top, frac[r * nb + b]);
    }
    box pl = {80, 66, 800, 230};
    const double ytop = fmin(1.0, fmax(0.05, top * 1.15));
    frame(cr, pl, 0, ytop, "fraction of positions", "%.2f");
    const double bw = pl.w / nb;
    for (int r = 0; r < k->n_runs; r++) { // step outlines, a translucent fill for the final run
        color(cr, r);
        for (int pass = 0; pass < 2; pass++) {
            cairo_move_to(cr, pl.x, pl.y + pl.h);
            for (int b = 0; b < nb; b++) {
                const double y = pl.y + pl.h - frac[r * nb + b] / ytop * pl.h;
                cairo_line_to(cr, pl.x + b * bw, y);
                cairo_line_to(cr, pl.x + (b + 1) * bw, y);
            }
            cairo_line_to(cr, pl.x + pl.w, pl.y + pl.h);
            if (pass == 0 && r == k->n_runs - 1) {
                cairo_close_path(cr);
                const double *c = palette[r % 10];
                cairo_set_source_rgba(cr, c[0], c[1], c[2], 0.25);
                cairo_fill(cr);
                color(cr, r);
            } else if (pass == 1) {
                cairo_set_line_width(cr, 1.8);
                cairo_stroke(cr);
            } else cairo_new_path(cr);
        }
    }
    cairo_set_font_size(cr, 11);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    text(cr, pl.x + 0.5 * bw, pl.y + pl.h + 14, 0.5, 0, "<1e-6");
    for (int d = KLD_LO + 1; d <= hi; d++) { // 1e-6 itself: the edge of the "<1e-6" bin
        char s[16];
        snprintf(s, sizeof s, "1e%d", d);
        text(cr, pl.x + (1 + (d - KLD_LO) * KLD_PER_DECADE) * bw, pl.y + pl.h + 14, 0.5, 0, s);
    }
    text(cr, pl.x + pl.w / 2, pl.y + pl.h + 32, 0.5, 0, "KLD (nats), logarithmic bins, 5 per decade");
    double x = 80;
    cairo_set_font_size(cr, 12);
    for (int r = 0; r < k->n_runs; r++) {
        double mean = 0;
        for (size_t i = 0; i < k->n[r]; i++) mean += k->kld[r][i];
        mean /= (double)(k->n[r] ? k->n[r] : 1);
        char s[128];
        snprintf(s, sizeof s, "%s: %zu positions, mean %.4g", k->label[r] ? k->label[r] : "?", k->n[r], mean);
        color(cr, r);
        cairo_rectangle(cr, x, 40, 10, 10);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        text(cr, x + 15, 49, 0, 0, s);
        cairo_text_extents_t e;
        cairo_text_extents(cr, s, &e);
        x += 15 + e.x_advance + 20;
    }
    free(frac);
}

// ---- surfaces ----------------------------------------------------------------------------

static void figure_size(const kvq_layer_table *t, double *w, double *h) {
    if (t) kvq_plot_size(t->n_layers, w, h);
    else { *w = 900; *h = 340; }
}

static void draw(cairo_t *cr, const kvq_layer_table *t, const kvq_plot_kld *k, const char *title, double w, double h) {
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_rectangle(cr, 0, 0, w, h);
    cairo_fill(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    if (t) draw_layers(cr, t, title);
    else draw_kld(cr, k, title);
}

static cairo_status_t to_file(void *ud, const unsigned char *data, unsigned int n) {
    return fwrite(data, 1, n, ud) == n ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

typedef struct { unsigned char *p; size_t n, cap; } membuf;

static cairo_status_t to_mem(void *ud, const unsigned char *data, unsigned int n) {
    membuf *m = ud;
    if (m->n + n > m->cap) {
        size_t cap = (m->cap ? 2 * m->cap : 65536) + n;
        unsigned char *q = realloc(m->p, cap);
        if (!q) return CAIRO_STATUS_NO_MEMORY;
        m->p = q;
        m->cap = cap;
    }
    memcpy(m->p + m->n, data, n);
    m->n += n;
    return CAIRO_STATUS_SUCCESS;
}

// PNGs are drawn at twice the figure's size (sharp on high-density screens; the page scales them).
static cairo_surface_t *render_png(const kvq_layer_table *t, const kvq_plot_kld *k, const char *title) {
    double w, h;
    figure_size(t, &w, &h);
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)(2 * w), (int)(2 * h));
    cairo_t *cr = cairo_create(s);
    cairo_scale(cr, 2, 2);
    draw(cr, t, k, title, w, h);
    cairo_destroy(cr);
    cairo_surface_flush(s);
    return s;
}

int kvq_plot_png(const kvq_layer_table *t, const kvq_plot_kld *k, const char *title, unsigned char **png, size_t *n) {
    cairo_surface_t *s = render_png(t, k, title);
    membuf m = {0};
    cairo_status_t st = cairo_surface_status(s);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_write_to_png_stream(s, to_mem, &m);
    cairo_surface_destroy(s);
    if (st != CAIRO_STATUS_SUCCESS) { free(m.p); return -1; }
    *png = m.p;
    *n = m.n;
    return 0;
}

int kvq_plot_file(const kvq_layer_table *t, const kvq_plot_kld *k, const char *title, const char *path, char *msg,
                  size_t cap) {
    kvq_plot_format fmt;
    if (kvq_plot_format_of(path, &fmt)) {
        snprintf(msg, cap, "%s: the name must end in .png or .svg (the format)", path);
        return -1;
    }
    kvq_outfile o;
    if (kvq_outfile_open(&o, path, msg, cap)) return -1;
    cairo_status_t st;
    if (fmt == KVQ_PLOT_PNG) {
        cairo_surface_t *s = render_png(t, k, title);
        st = cairo_surface_status(s);
        if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_write_to_png_stream(s, to_file, o.f);
        cairo_surface_destroy(s);
    } else {
        double w, h;
        figure_size(t, &w, &h);
        cairo_surface_t *s = cairo_svg_surface_create_for_stream(to_file, o.f, w, h);
        cairo_t *cr = cairo_create(s);
        draw(cr, t, k, title, w, h);
        st = cairo_status(cr);
        cairo_destroy(cr);
        cairo_surface_finish(s); // the SVG is written here
        if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(s);
        cairo_surface_destroy(s);
    }
    if (st != CAIRO_STATUS_SUCCESS) {
        snprintf(msg, cap, "%s: cairo: %s", path, cairo_status_to_string(st));
        kvq_outfile_close(&o, 0, msg, cap);
        return -1;
    }
    return kvq_outfile_close(&o, 1, msg, cap);
}

void kvq_plot_done(void) {
    cairo_debug_reset_static_data();
    FcFini(); // fontconfig's configuration and caches, which cairo's text loaded
}
