// The pictures people read: kvq-inspect --layers with per-tensor SNR from the verification
// record (every tensor, checked by the manifest schema), kvq-inspect --plot (PNG read back with
// cairo, SVG parsed as XML; the plot regions hold the drawn series, not a blank frame),
// kvq-verify --report rendered in headless Chromium (verdict text in the DOM, the figures'
// regions of the screenshot not blank), and -v on every tool. On kvq-tiny-llama, RTN 3-bit
// weights and an int:4 KV codec, 2 windows of 64 tokens.
#include <libgen.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <cairo.h>

#include "tests/testutil.h"

#include "formats/kvqfile.h"
#include "libconv/verify/layers.h"

#define TINY "tests/models/kvq-tiny-llama"
#define TEXT "tests/tokenizer/heldout_start.txt"

static char g_build[512] = "build";
static char g_dir[64];
static char g_plain[128], g_rec[128], g_html[128]; // no record; verified with --record --report

static json_t *manifest_of(const char *path) {
    kvq_file *f;
    kvq_err err = {0};
    if (kvq_file_open(path, &f, &err)) { print_message("%s\n", err.msg); return NULL; }
    json_t *m = json_deep_copy(kvq_file_manifest(f));
    kvq_file_close(f);
    return m;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvq-report-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_plain, sizeof g_plain, "%s/plain.kvq", g_dir);
    snprintf(g_rec, sizeof g_rec, "%s/rec.kvq", g_dir);
    snprintf(g_html, sizeof g_html, "%s/report.html", g_dir);
    if (run("%s/kvq-convert -q --weights rtn:3:g64 --kv int:4 " TINY " %s", g_build, g_plain)) return -1;
    if (run("cp %s %s", g_plain, g_rec)) return -1;
    // exit 0 (pass), the record stored, the page written
    return run("%s/kvq-verify -q %s --source " TINY " --text " TEXT " --ctx 64 --windows 2 --max-kld 5 --record "
               "--report %s > %s/verify.txt", g_build, g_rec, g_html, g_dir);
}

static int teardown(void **state) {
    (void)state;
    run("rm -rf '%s'", g_dir);
    return 0;
}

// ---- the record's per-tensor errors and the layer table ------------------------------

static void test_record_tensors(void **state) {
    (void)state;
    json_t *m = manifest_of(g_rec);
    assert_non_null(m);
    const json_t *ts = json_object_get(json_object_get(m, "verification"), "tensors");
    assert_true(json_is_array(ts));
    assert_int_equal(json_array_size(ts), json_array_size(json_object_get(m, "tensors"))); // every tensor, not the worst 8
    // the same numbers kvq-verify --json reports for the same file
    assert_int_equal(run("%s/kvq-verify -q --json %s --source " TINY " > %s/v.json", g_build, g_rec, g_dir), 0);
    char p[160];
    snprintf(p, sizeof p, "%s/v.json", g_dir);
    json_t *vj = json_load_file(p, 0, NULL);
    assert_non_null(vj);
    size_t i, lossy = 0;
    json_t *t;
    json_array_foreach(json_object_get(vj, "tensors"), i, t) {
        const json_t *r = NULL, *e;
        size_t k;
        json_array_foreach(ts, k, e)
            if (!strcmp(json_string_value(json_object_get(e, "name")), json_string_value(json_object_get(t, "name")))) r = e;
        assert_non_null(r);
        assert_true(json_equal(json_object_get(r, "snr_db"), json_object_get(t, "snr_db")));
        assert_true(json_equal(json_object_get(r, "rel_err"), json_object_get(t, "rel_err")));
        lossy += !json_is_true(json_object_get(t, "lossless"));
    }
    assert_true(lossy >= 28); // 4 layers × 7 matrices

    // The layer table: every layer tensor in its cell, the record's errors attached.
    kvq_layer_table lt;
    kvq_err err = {0};
    assert_int_equal(kvq_layers_from_manifest(m, &lt, &err), KVQ_OK);
    assert_int_equal(lt.n_layers, 4);
    assert_string_equal(lt.roles[0], "q_proj");
    assert_string_equal(lt.roles[6], "down_proj");
    assert_int_equal(kvq_layers_add_record(&lt, ts), json_array_size(ts));
    assert_int_equal(lt.n_errors, (int)json_array_size(ts));
    const kvq_layer_cell *c = kvq_layers_cell(&lt, 2, 0); // layers.2 q_proj
    assert_true(c->present && !c->lossless && c->has_error && isfinite(c->snr_db) && c->snr_db > 5 && c->snr_db < 40);
    json_array_foreach(ts, i, t)
        if (!strcmp(json_string_value(json_object_get(t, "name")), "model.layers.2.self_attn.q_proj.weight"))
            assert_true(c->snr_db == json_number_value(json_object_get(t, "snr_db")));
    assert_true(isinf(kvq_layers_cell(&lt, 0, 7)->snr_db)); // input_layernorm: kept exact
    kvq_layers_free(&lt);
    char role[48];
    assert_int_equal(kvq_layer_role("model.layers.17.self_attn.q_proj.bias", role, sizeof role), 17);
    assert_string_equal(role, "q_proj.bias");
    assert_int_equal(kvq_layer_role("model.embed_tokens.weight", role, sizeof role), -1);
    assert_int_equal(kvq_layer_role("model.layers.-1.mlp.up_proj.weight", role, sizeof role), -1);
    json_decref(vj);
    json_decref(m);
}

// A record whose "tensors" are malformed is refused when the file is opened, naming the field;
// every tool exits 2 with that one line.
static void test_record_schema(void **state) {
    (void)state;
    json_t *m = manifest_of(g_rec);
    assert_non_null(m);
    struct { const char *what, *json, *expect; } cases[] = {
        {"unknown tensor", "[{\"name\":\"model.nothing.weight\",\"exact\":false,\"snr_db\":1,\"rel_err\":0.1,\"max_abs\":1}]",
         "is not a tensor of this file"},
        {"listed twice", "[{\"name\":\"lm_head.weight\",\"exact\":true,\"snr_db\":null,\"rel_err\":0,\"max_abs\":0},"
                         "{\"name\":\"lm_head.weight\",\"exact\":true,\"snr_db\":null,\"rel_err\":0,\"max_abs\":0}]",
         "listed twice"},
        {"snr as text", "[{\"name\":\"lm_head.weight\",\"exact\":false,\"snr_db\":\"high\",\"rel_err\":0,\"max_abs\":0}]",
         "verification.tensors[0].snr_db: expected a number or null, got string"},
        {"negative error", "[{\"name\":\"lm_head.weight\",\"exact\":false,\"snr_db\":3,\"rel_err\":-1,\"max_abs\":0}]",
         "verification.tensors[0].rel_err is negative"},
        {"no exact", "[{\"name\":\"lm_head.weight\",\"snr_db\":3,\"rel_err\":1,\"max_abs\":0}]",
         "verification.tensors[0].exact: expected a boolean"},
        {"not an array", "{}", "verification.tensors: expected an array, got object"},
    };
    char p[160];
    snprintf(p, sizeof p, "%s/bad.kvq", g_dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(run("cp %s %s", g_rec, p), 0);
        json_t *t = json_deep_copy(m), *bad = json_loads(cases[i].json, 0, NULL);
        assert_non_null(bad);
        json_object_set_new(json_object_get(t, "verification"), "tensors", bad);
        kvq_err err = {0};
        // the writer checks what it writes: a bad record never reaches a file through the library
        kvq_status s = kvq_file_rewrite_manifest(p, t, &err);
        if (s == KVQ_OK) { // or it does not: then every reader refuses it
            kvq_file *f = NULL;
            assert_int_not_equal(kvq_file_open(p, &f, &err), KVQ_OK);
            kvq_file_close(f);
        }
        if (!strstr(err.msg, cases[i].expect)) print_message("%s: %s\n", cases[i].what, err.msg);
        assert_non_null(strstr(err.msg, cases[i].expect));
        if (s == KVQ_OK)
            assert_int_equal(run("%s/kvq-inspect --layers %s > /dev/null 2> %s/e.txt; test $? -eq 2 && "
                                 "test $(wc -l < %s/e.txt) -eq 1 && grep -q 'verification.tensors' %s/e.txt",
                                 g_build, p, g_dir, g_dir, g_dir), 0);
        json_decref(t);
    }
    json_decref(m);
}

static void test_inspect_layers(void **state) {
    (void)state;
    assert_int_equal(run("%s/kvq-inspect --layers %s > %s/l.txt", g_build, g_rec, g_dir), 0);
    assert_int_equal(run("grep -q '^SNR in dB' %s/l.txt && grep -q '^relative error' %s/l.txt && "
                         "grep -q 'the verification record (it matches this file)' %s/l.txt", g_dir, g_dir, g_dir), 0);
    // the SNR grid's layer-2 q_proj cell is the record's value, as %.2f
    json_t *m = manifest_of(g_rec);
    size_t i;
    json_t *t;
    double snr = NAN;
    json_array_foreach(json_object_get(json_object_get(m, "verification"), "tensors"), i, t)
        if (!strcmp(json_string_value(json_object_get(t, "name")), "model.layers.2.self_attn.q_proj.weight"))
            snr = json_number_value(json_object_get(t, "snr_db"));
    json_decref(m);
    assert_true(isfinite(snr));
    assert_int_equal(run("awk '/^SNR in dB/{g=1;next} g&&$1==\"2\"{print $2; exit}' %s/l.txt | grep -qx '%.2f'", g_dir,
                         snr), 0);
    // without a record: the bits grid, and a line saying where SNR comes from
    assert_int_equal(run("%s/kvq-inspect --layers %s > %s/l2.txt && ! grep -q '^SNR in dB' %s/l2.txt && "
                         "grep -q 'per-tensor SNR: not in this file' %s/l2.txt", g_build, g_plain, g_dir, g_dir, g_dir), 0);
}

// ---- pixels --------------------------------------------------------------------------

typedef struct { double var; long hits; } region;

// Intensity variance over a rectangle, and how many pixels lie within 12 of colour rgb.
static region measure(cairo_surface_t *s, int x0, int y0, int w, int h, const int rgb[3]) {
    region r = {0, 0};
    const int W = cairo_image_surface_get_width(s), H = cairo_image_surface_get_height(s);
    const int stride = cairo_image_surface_get_stride(s);
    const unsigned char *d = cairo_image_surface_get_data(s);
    double s1 = 0, s2 = 0, n = 0;
    for (int y = y0 < 0 ? 0 : y0; y < y0 + h && y < H; y++)
        for (int x = x0 < 0 ? 0 : x0; x < x0 + w && x < W; x++) {
            const uint32_t p = *(const uint32_t *)(d + (size_t)y * stride + 4 * (size_t)x); // xRGB, native endian
            const int R = p >> 16 & 255, G = p >> 8 & 255, B = p & 255;
            const double v = (R + G + B) / 3.0;
            s1 += v;
            s2 += v * v;
            n++;
            if (abs(R - rgb[0]) <= 12 && abs(G - rgb[1]) <= 12 && abs(B - rgb[2]) <= 12) r.hits++;
        }
    r.var = n > 1 ? s2 / n - (s1 / n) * (s1 / n) : 0;
    return r;
}

static const int BLUE[3] = {31, 120, 181};  // q_proj, the first role (tools/plot.c palette)
static const int GREEN[3] = {43, 161, 43};  // the third KLD run (weights+kv)

static cairo_surface_t *load_png(const char *path) {
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) print_message("%s: %s\n", path, cairo_status_to_string(cairo_surface_status(s)));
    assert_int_equal(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
    cairo_surface_flush(s);
    return s;
}

static void test_plot(void **state) {
    (void)state;
    char png[160], png2[160];
    snprintf(png, sizeof png, "%s/layers.png", g_dir);
    snprintf(png2, sizeof png2, "%s/plain.png", g_dir);
    assert_int_equal(run("%s/kvq-inspect --plot %s %s", g_build, png, g_rec), 0);
    assert_int_equal(run("%s/kvq-inspect --plot %s %s", g_build, png2, g_plain), 0);
    // PNG: decodes, the figure's size at 2x, both panels (tools/plot.c: bits at (80, 66) 800 × 220,
    // SNR at (80, 346) 800 × 230, in figure units) hold drawn series
    cairo_surface_t *a = load_png(png), *b = load_png(png2);
    assert_int_equal(cairo_image_surface_get_width(a), 1800);
    assert_int_equal(cairo_image_surface_get_height(a), 1280);
    region bits = measure(a, 160, 132, 1600, 440, BLUE), snr = measure(a, 160, 692, 1600, 460, BLUE);
    region snr0 = measure(b, 160, 692, 1600, 460, BLUE), margin = measure(a, 1764, 132, 36, 1000, BLUE);
    print_message("plot: bits panel var %.0f, %ld q_proj pixels; SNR panel var %.0f, %ld (no record: %.0f, %ld); margin var %.1f\n",
                  bits.var, bits.hits, snr.var, snr.hits, snr0.var, snr0.hits, margin.var);
    assert_true(bits.var > 100 && bits.hits > 50);  // grey bars and role dots
    assert_true(snr.var > 20 && snr.hits > 500);    // the q_proj SNR line and its markers
    assert_int_equal(snr0.hits, 0);                 // no record: a message, no series
    assert_true(margin.var < 1);                    // the measure reads blank as blank
    cairo_surface_destroy(a);
    cairo_surface_destroy(b);
    // SVG: well-formed XML with an <svg> root, the q_proj SNR line stroked in its colour
    char svg[160], svg2[160];
    snprintf(svg, sizeof svg, "%s/layers.svg", g_dir);
    snprintf(svg2, sizeof svg2, "%s/plain.svg", g_dir);
    assert_int_equal(run("%s/kvq-inspect --plot %s %s && %s/kvq-inspect --plot %s %s", g_build, svg, g_rec, g_build, svg2,
                         g_plain), 0);
    assert_int_equal(run("python3 -c \"import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); "
                         "sys.exit(r.tag != '{http://www.w3.org/2000/svg}svg' or len(list(r.iter())) < 200)\" %s", svg), 0);
    assert_int_equal(run("grep -c 'stroke:rgb(12%%,47%%,71%%)' %s | awk '$1 >= 1 {ok=1} END {exit !ok}'", svg), 0);
    assert_int_equal(run("! grep -q 'stroke:rgb(12%%,47%%,71%%)' %s", svg2), 0);
    // bad names: one line, exit 2, nothing left behind
    assert_int_equal(run("%s/kvq-inspect --plot %s/x.gif %s 2> %s/e.txt; test $? -eq 2 && test $(wc -l < %s/e.txt) -eq 1 "
                         "&& grep -q 'png or .svg' %s/e.txt", g_build, g_dir, g_rec, g_dir, g_dir, g_dir), 0);
    assert_int_equal(run("%s/kvq-inspect --plot %s/no/such/x.png %s 2> %s/e.txt; test $? -eq 2 && "
                         "test $(wc -l < %s/e.txt) -eq 1 && grep -q 'no/such/x.png' %s/e.txt", g_build, g_dir, g_rec, g_dir,
                         g_dir, g_dir), 0);
    assert_int_equal(run("test -z \"$(ls -A %s | grep tmp-)\"", g_dir), 0);
}

// ---- the HTML page, in a browser ----------------------------------------------------------

static void test_report_page(void **state) {
    (void)state;
    // self-contained: no script, no external reference; the verdict; three runs; two figures inline
    assert_int_equal(run("grep -q '<div id=\"verdict\" class=\"pass\">PASS' %s", g_html), 0);
    assert_int_equal(run("! grep -qiE '<script|src=\"(http|//|file:)|<link|url\\(' %s", g_html), 0);
    assert_int_equal(run("test $(grep -o 'src=\"data:image/png;base64,' %s | wc -l) -eq 2", g_html), 0);
    assert_int_equal(run("grep -q '<td>weights+kv</td>' %s && grep -q '<td>kv</td>' %s && grep -q 'max_kld' %s", g_html,
                         g_html, g_html), 0);
    assert_int_equal(run("grep -q 'report: written to %s' %s/verify.txt", g_html, g_dir), 0);
    // a bad name fails before the long checks
    assert_int_equal(run("%s/kvq-verify %s --report %s/r.pdf 2> %s/e.txt; test $? -eq 2 && test $(wc -l < %s/e.txt) -eq 1",
                         g_build, g_rec, g_dir, g_dir, g_dir), 0);

    // KVQ_CHROMIUM names the browser (a path or a command); unset: chromium, chromium-browser or
    // google-chrome from PATH.
    const char *chromium = NULL, *env = getenv("KVQ_CHROMIUM");
    static const char *names[] = {"chromium", "chromium-browser", "google-chrome"};
    for (int i = 0; i < 3 && !chromium; i++) {
        const char *c = env ? env : names[i];
        if (strchr(c, '\'') == NULL && run("command -v '%s' > /dev/null 2>&1", c) == 0) chromium = c;
        if (env) break;
    }
    if (!chromium) {
        if (env) print_message("skipped: KVQ_CHROMIUM='%s' is not an executable\n", env);
        else print_message("skipped: no chromium on PATH (Debian: apt-get install chromium; tools/install-deps.sh "
                           "does as root)\n");
        skip();
    }
    // The page has no script; this copy gets one at its end that only writes each image's box
    // (and whether it decoded) into an attribute after load, for --dump-dom to show. Same
    // window size for both runs, so the boxes are where the screenshot has the images.
    assert_int_equal(run("sed 's|</body></html>|<script>addEventListener(\"load\",function(){for(const i of document.images)"
                         "{const r=i.getBoundingClientRect();i.setAttribute(\"data-box\",[r.left+scrollX,r.top+scrollY,"
                         "r.width,r.height,i.naturalWidth].map(Math.round).join(\" \"))}})</script></body></html>|' %s "
                         "> %s/page.html", g_html, g_dir), 0);
    const char *flags = "--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,3600";
    assert_int_equal(run("cd %s && '%s' %s --user-data-dir=%s/chrome --dump-dom file://%s/page.html > dom.html 2> chrome.log",
                         g_dir, chromium, flags, g_dir, g_dir), 0);
    assert_int_equal(run("cd %s && '%s' %s --user-data-dir=%s/chrome --screenshot=%s/shot.png file://%s/page.html "
                         ">> chrome.log 2>&1", g_dir, chromium, flags, g_dir, g_dir, g_dir), 0);
    // the verdict as the browser parsed it
    assert_int_equal(run("grep -q 'id=\"verdict\" class=\"pass\">PASS' %s/dom.html", g_dir), 0);
    char p[160];
    snprintf(p, sizeof p, "%s/dom.html", g_dir);
    size_t n;
    char *dom = slurp(p, &n);
    assert_non_null(dom);
    snprintf(p, sizeof p, "%s/shot.png", g_dir);
    cairo_surface_t *s = load_png(p);
    const int W = cairo_image_surface_get_width(s), H = cairo_image_surface_get_height(s);
    const char *ids[2] = {"plot-layers", "plot-kld"};
    const int *want[2] = {BLUE, GREEN};
    for (int k = 0; k < 2; k++) {
        char key[64];
        snprintf(key, sizeof key, "id=\"%s\"", ids[k]);
        const char *tag = strstr(dom, key);
        assert_non_null(tag);
        const char *box = strstr(tag, "data-box=\"");
        assert_non_null(box);
        int x, y, w, h, natural;
        assert_int_equal(sscanf(box + 10, "%d %d %d %d %d", &x, &y, &w, &h, &natural), 5);
        print_message("%s: box %d,%d %dx%d (decoded %d px wide), screenshot %dx%d\n", ids[k], x, y, w, h, natural, W, H);
        assert_int_equal(natural, 1800);               // the data: URI decoded
        assert_true(w >= 600 && h >= 200 && x >= 0 && y + h <= H && x + w <= W);
        region r = measure(s, x + 4, y + 4, w - 8, h - 8, want[k]);
        print_message("%s: intensity variance %.0f, %ld pixels of the series colour\n", ids[k], r.var, r.hits);
        assert_true(r.var > 100 && r.hits > 100);
    }
    region blank = measure(s, 980, 0, 20, H, BLUE); // right margin of the page: the measure reads blank as blank
    assert_true(blank.var < 1 && blank.hits == 0);
    cairo_surface_destroy(s);
    free(dom);
}

// -v on every tool: what it adds (documented in each usage text).
static void test_verbose(void **state) {
    (void)state;
    assert_int_equal(run("%s/kvq-inspect -v %s | grep -q '^entries by tensor (-v)' && %s/kvq-inspect --help | grep -q '^  -v'",
                         g_build, g_rec, g_build), 0);
    assert_int_equal(run("test $(%s/kvq-verify -q -v %s --no-source | grep -c 'seconds: integrity') -eq 1", g_build, g_rec), 0);
    assert_int_equal(run("%s/kvq-verify -q -v %s --source " TINY " | grep -q 'tensors, worst first (\\([0-9]*\\) of \\1 shown)' "
                         "&& %s/kvq-verify -q %s --source " TINY " | grep -q 'tensors, worst first (10 of'", g_build, g_rec,
                         g_build, g_rec), 0);
    assert_int_equal(run("%s/kvq-run %s -p Once -n 2 -v 2>&1 >/dev/null | grep -q 'kvq-run: prompt: .* tokens:' && "
                         "! %s/kvq-run %s -p Once -n 2 2>&1 >/dev/null | grep -q 'kvq-run: prompt:'", g_build, g_rec,
                         g_build, g_rec), 0);
    assert_int_equal(run("%s/kvq-convert -v --weights rtn:4:g64 " TINY " %s/v.kvq 2>&1 | grep -q 'model.layers.0.mlp.up_proj.weight'",
                         g_build, g_dir), 0);
    for (int i = 0; i < 4; i++) {
        static const char *tools[] = {"kvq-convert", "kvq-inspect", "kvq-verify", "kvq-run"};
        assert_int_equal(run("%s/%s --help 2>&1 | grep -q -- '-v'", g_build, tools[i]), 0);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    char *a = strdup(argv[0]);
    snprintf(g_build, sizeof g_build, "%s", dirname(dirname(a)));
    free(a);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_tensors), cmocka_unit_test(test_record_schema), cmocka_unit_test(test_inspect_layers),
        cmocka_unit_test(test_plot),           cmocka_unit_test(test_report_page),   cmocka_unit_test(test_verbose),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
