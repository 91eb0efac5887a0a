// One handle over a model's weights: a source checkpoint (formats/checkpoint.h) or a
// .kvq whose tensors are decoded through the codec table by the manifest's codec
// name and params. A .kvq's tokenizer is opened from its stored entries' bytes.
#include "libconv/runtime/weights.h"
#include "libconv/tokenizer/tokenizer.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/checkpoint.h"
#include "kernels/cpu/pq.h"
#include "formats/kvqfile.h"
#include "libconv/codec/codec.h"
#include "libconv/codec/hyperquant/hq_pack.h"
#include "libconv/codec/qet/qet.h"
#include "libconv/codec/rtn.h"
#include "libconv/kv/kvcodec.h"

typedef struct {
    const char *name;
    const json_t *rec;  // tensor record in the manifest
} wt_index;

struct kvq_weights {
    char *path;         // as opened, for messages
    kvq_ckpt *ck;
    kvq_file *kf;
    kvq_arch arch;
    wt_index *idx;      // .kvq tensors sorted by name
    size_t n;
    kvq_tokenizer *tok; // a .kvq's stored tokenizer, parsed by the file check; handed out once
};

static int idx_cmp(const void *a, const void *b) {
    return strcmp(((const wt_index *)a)->name, ((const wt_index *)b)->name);
}

static const json_t *find_rec(const kvq_weights *w, const char *name) {
    wt_index key = {.name = name};
    const wt_index *r = bsearch(&key, w->idx, w->n, sizeof key, idx_cmp);
    return r ? r->rec : NULL;
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

static int is_zip(const char *path) {
    unsigned char m[4] = {0};
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t k = read(fd, m, 4);
    close(fd);
    return k == 4 && m[0] == 'P' && m[1] == 'K' && m[2] == 3 && m[3] == 4;
}

// Shape of a tensor record, checked: 0..8 non-negative dims.
static int rec_shape(const json_t *rec, int *ndim, int64_t shape[8]) {
    const json_t *sh = json_object_get(rec, "shape");
    if (!json_is_array(sh) || json_array_size(sh) > 8) return -1;
    *ndim = (int)json_array_size(sh);
    for (int i = 0; i < *ndim; i++) {
        const json_t *d = json_array_get(sh, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) return -1;
        shape[i] = json_integer_value(d);
    }
    return 0;
}

// Opens the tokenizer a .kvq stores from the entries' bytes (no temporary files) and checks it
// is no wider than the model's vocabulary, as kvq-convert checks a source's. *out is NULL (and
// the status KVQ_OK) when the file stores none.
static kvq_status stored_tokenizer(kvq_file *f, int vocab_size, kvq_tokenizer **out, kvq_err *err) {
    *out = NULL;
    const char *path = kvq_file_path(f);
    const json_t *tok = json_object_get(kvq_file_manifest(f), "tokenizer");
    const char *main_name = json_string_value(json_object_get(tok, "main"));
    const json_t *files = json_object_get(tok, "files");
    const char *main_entry = json_string_value(json_object_get(files, main_name ? main_name : ""));
    if (!main_name || !json_is_object(files) || !main_entry) return KVQ_OK;
    const void *data, *cfg = NULL;
    size_t n, cn = 0;
    kvq_status s = kvq_file_entry(f, main_entry, &data, &n, err);
    if (s) return s;
    const char *cfg_entry = json_string_value(json_object_get(files, "tokenizer_config.json"));
    if (cfg_entry && (s = kvq_file_entry(f, cfg_entry, &cfg, &cn, err))) {
        kvq_file_release(f, main_entry);
        return s;
    }
    char name[600];
    snprintf(name, sizeof name, "%s: stored %s", path, main_name);
    s = kvq_tok_open_mem(name, data, n, cfg, cn, out, err);
    if (!s && kvq_tok_vocab_size(*out) > vocab_size) { // ids the model cannot embed (as kvq-convert checks)
        s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: the tokenizer has %d ids, more than the model's vocab_size %d", name,
                        kvq_tok_vocab_size(*out), vocab_size);
        kvq_tok_close(*out);
        *out = NULL;
    }
    kvq_file_release(f, main_entry);
    if (cfg_entry) kvq_file_release(f, cfg_entry);
    return s;
}

// kvq_weights_check_file, keeping the parsed tokenizer in *tok (NULL: none stored) when asked.
static kvq_status check_file(kvq_file *f, kvq_tokenizer **tok, kvq_err *err) {
    kvq_status s = kvq_codec_check_file(f, err);
    kvq_kvcache *kc = NULL;
    if (!s) s = kvq_kv_open_from_file(f, 1, 0, &kc, err); // a one-position cache: the states alone
    if (kc) kc->ops->free(kc);
    kvq_arch a;
    if (!s && (s = kvq_arch_from_manifest(json_object_get(kvq_file_manifest(f), "architecture"), &a, err)))
        kvq_err_prefix(err, "%s", kvq_file_path(f));
    kvq_tokenizer *t = NULL;
    if (!s) s = stored_tokenizer(f, a.vocab_size, &t, err);
    if (tok) *tok = t;
    else kvq_tok_close(t);
    return s;
}

kvq_status kvq_weights_check_file(kvq_file *f, kvq_err *err) { return check_file(f, NULL, err); }

static kvq_status open_kvq(kvq_weights *w, const char *path, kvq_err *err) {
    kvq_status s = kvq_file_open(path, &w->kf, err);
    if (s == KVQ_OK) s = check_file(w->kf, &w->tok, err);
    if (s != KVQ_OK) return s;
    const json_t *m = kvq_file_manifest(w->kf);
    s = kvq_arch_from_manifest(json_object_get(m, "architecture"), &w->arch, err);
    if (s != KVQ_OK) { kvq_err_prefix(err, "%s", path); return s; }
    const json_t *ts = json_object_get(m, "tensors");
    if (!json_is_array(ts)) return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: manifest has no tensors array", path);
    w->n = json_array_size(ts);
    if (!(w->idx = calloc(w->n ? w->n : 1, sizeof *w->idx))) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < w->n; i++) {
        const json_t *r = json_array_get(ts, i);
        int nd;
        int64_t sh[8];
        w->idx[i].rec = r;
        w->idx[i].name = json_string_value(json_object_get(r, "name"));
        if (!w->idx[i].name || rec_shape(r, &nd, sh) != 0)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor record %zu has no valid name or shape", path, i);
    }
    qsort(w->idx, w->n, sizeof *w->idx, idx_cmp);
    for (size_t i = 1; i < w->n; i++)
        if (!strcmp(w->idx[i].name, w->idx[i - 1].name))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' listed twice", path, w->idx[i].name);
    return KVQ_OK;
}

kvq_status kvq_weights_open(const char *path, kvq_weights **out, kvq_err *err) {
    *out = NULL;
    kvq_weights *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) { free(w); return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path); }
    struct stat st;
    kvq_status s;
    if (stat(path, &st) != 0) s = kvq_err_set(err, KVQ_ERR_IO, "%s: %s", path, strerror(errno));
    else if (S_ISREG(st.st_mode) && (is_zip(path) || has_suffix(path, ".kvq"))) s = open_kvq(w, path, err);
    else {
        s = kvq_ckpt_open(path, &w->ck, err);
        if (s == KVQ_OK) w->arch = *kvq_ckpt_arch(w->ck);
    }
    if (s != KVQ_OK) { kvq_weights_close(w); return s; }
    *out = w;
    return KVQ_OK;
}

void kvq_weights_close(kvq_weights *w) {
    if (!w) return;
    free(w->idx);
    kvq_tok_close(w->tok);
    kvq_file_close(w->kf);
    kvq_ckpt_close(w->ck);
    free(w->path);
    free(w);
}

const kvq_arch *kvq_weights_arch(const kvq_weights *w) { return &w->arch; }
const char *kvq_weights_path(const kvq_weights *w) { return w->path; }

const json_t *kvq_weights_manifest(const kvq_weights *w) { return w->kf ? kvq_file_manifest(w->kf) : NULL; }

size_t kvq_weights_count(const kvq_weights *w) { return w->ck ? kvq_ckpt_count(w->ck) : w->n; }

const char *kvq_weights_name(const kvq_weights *w, size_t i) {
    if (i >= kvq_weights_count(w)) return NULL;
    return w->ck ? kvq_ckpt_tensor(w->ck, i)->name : w->idx[i].name;
}

int kvq_weights_has(const kvq_weights *w, const char *name, int *ndim, int64_t shape[8]) {
    int nd;
    int64_t sh[8];
    if (w->ck) {
        const kvq_tensor *t = kvq_ckpt_find(w->ck, name);
        if (!t) return 0;
        nd = t->ndim;
        for (int i = 0; i < nd && i < 8; i++) sh[i] = t->shape[i];
    } else {
        const json_t *r = find_rec(w, name);
        if (!r || rec_shape(r, &nd, sh) != 0) return 0;
    }
    if (ndim) *ndim = nd;
    if (shape) memcpy(shape, sh, (size_t)nd * sizeof *sh);
    return 1;
}

// A .kvq tensor's record: shape, codec traits and its blobs from the container
// (digest-checked; release them with release_blobs).
typedef struct {
    const json_t *rec, *codec;
    const kvq_codec_traits *traits;
    int64_t rows, cols, n;
    kvq_blob_view v[KVQ_MAX_BLOBS];
    int nv;
} rec_view;

static kvq_status rec_blobs(kvq_weights *w, const char *name, rec_view *rv, kvq_err *err) {
    const char *path = kvq_file_path(w->kf);
    const json_t *r = find_rec(w, name);
    memset(rv, 0, sizeof *rv);
    if (!r) return kvq_err_set(err, KVQ_ERR_MISSING, "%s: no tensor '%s'", path, name);
    int nd;
    int64_t sh[8], n = 1;
    rec_shape(r, &nd, sh);
    for (int i = 0; i < nd; i++)
        if (__builtin_mul_overflow(n, sh[i], &n) || n > ((int64_t)1 << 40))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s': shape too large", path, name);
    int64_t cols = nd ? sh[nd - 1] : 1, rows = cols ? n / cols : 0;
    const json_t *codec = json_object_get(r, "codec");
    const char *cname = json_string_value(json_object_get(codec, "name"));
    const kvq_codec_traits *c = cname ? kvq_codec_find(cname) : NULL;
    if (!c) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "%s: tensor '%s': codec '%s' is not in this build",
                               path, name, cname ? cname : "(missing)");
    const json_t *ents = json_object_get(r, "entries");
    if (!json_is_object(ents) || json_object_size(ents) > KVQ_MAX_BLOBS)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s': bad entries record", path, name);
    const char *role;
    json_t *ev;
    json_object_foreach((json_t *)ents, role, ev) {
        const char *en = json_string_value(ev);
        if (!en) return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s': entry for role '%s' is not a string", path, name, role);
        size_t sz;
        kvq_status s = kvq_file_entry(w->kf, en, &rv->v[rv->nv].data, &sz, err);
        if (s != KVQ_OK) return s;
        rv->v[rv->nv].role = role;
        rv->v[rv->nv++].size = sz;
    }
    rv->rec = r;
    rv->codec = codec;
    rv->traits = c;
    rv->rows = rows;
    rv->cols = cols;
    rv->n = n;
    return KVQ_OK;
}

// Drops the container's decompressed copies of the record's entries (decoded or packed now).
static void release_blobs(kvq_weights *w, const rec_view *rv) {
    const char *role;
    json_t *ev;
    const json_t *ents = json_object_get(rv->rec, "entries");
    json_object_foreach((json_t *)ents, role, ev) kvq_file_release(w->kf, json_string_value(ev));
}

// Decodes a .kvq tensor: blobs from the container, then the codec.
static kvq_status get_kvq(kvq_weights *w, const char *name, float **out, int64_t *numel, kvq_err *err) {
    const char *path = kvq_file_path(w->kf);
    rec_view rv;
    kvq_status s = rec_blobs(w, name, &rv, err);
    if (s != KVQ_OK) return s;
    float *x = malloc((size_t)(rv.n ? rv.n : 1) * sizeof *x);
    if (!x) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: tensor '%s': out of memory", path, name);
    s = rv.traits->decode(json_object_get(rv.codec, "params"), rv.v, rv.nv, rv.rows, rv.cols, x, err);
    release_blobs(w, &rv);
    for (int64_t i = 0; s == KVQ_OK && i < rv.n; i++) // a NaN/Inf scale, norm or codebook entry, or raw value
        if (!isfinite(x[i]))
            s = kvq_err_set(err, KVQ_ERR_FORMAT, "decoded weight %lld is %g (a non-finite value in the file)",
                            (long long)i, x[i]);
    if (s != KVQ_OK) {
        free(x);
        kvq_err_prefix(err, "%s: tensor '%s'", path, name);
        return s;
    }
    *out = x;
    *numel = rv.n;
    return KVQ_OK;
}

// The first NaN/Inf (exponent all ones) of n bf16 values, or -1: four a 64-bit word (a lane of
// (w & M) ^ M is zero exactly there; the zero-lane test has no false positive), then the index.
static int64_t bf16_nonfinite(const uint16_t *x, int64_t n) {
    const uint64_t M = 0x7F807F807F807F80ull, L = 0x0001000100010001ull, H = 0x8000800080008000ull;
    uint64_t any = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t w;
        memcpy(&w, x + i, sizeof w);
        const uint64_t t = (w & M) ^ M;
        any |= (t - L) & ~t & H;
    }
    for (; i < n; i++) any |= (x[i] & 0x7F80u) == 0x7F80u;
    for (i = 0; any && i < n; i++)
        if ((x[i] & 0x7F80u) == 0x7F80u) return i;
    return -1;
}

// A tensor stored as bf16 (kvq_weights_get_bf16), into dst (n elements, the count checked) or, with dst
// NULL, a buffer of its own in *out: a zstd entry's decompressed buffer is taken as it is.
static kvq_status bf16_get(kvq_weights *w, const char *name, uint16_t *dst, int64_t n_dst, uint16_t **out, int64_t *numel,
                           kvq_err *err) {
    const void *src = NULL;
    uint16_t *taken = NULL;
    int64_t n = 0;
    rec_view rv;
    if (w->kf) {
        const json_t *r = find_rec(w, name), *codec = json_object_get(r, "codec");
        const char *cname = json_string_value(json_object_get(codec, "name"));
        const char *dt = json_string_value(json_object_get(json_object_get(codec, "params"), "dtype"));
        kvq_dtype t;
        if (!cname || strcmp(cname, "none") || !dt || kvq_dtype_parse(dt, &t) || t != KVQ_DTYPE_BF16)
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': not stored as bf16", name);
        kvq_status s = rec_blobs(w, name, &rv, err);
        if (!s) s = rv.traits->check(json_object_get(rv.codec, "params"), rv.v, rv.nv, rv.rows, rv.cols, err);
        if (s) {
            if (rv.rec) release_blobs(w, &rv);
            kvq_err_prefix(err, "%s: tensor '%s'", kvq_file_path(w->kf), name);
            return s;
        }
        src = kvq_blob_find(rv.v, rv.nv, "raw")->data; // check: present, rows × cols × 2 bytes
        n = rv.n;
        const char *en = json_string_value(json_object_get(json_object_get(rv.rec, "entries"), "raw"));
        if (!dst && en) taken = kvq_file_take(w->kf, en); // a zstd entry's buffer (the file's only copy)
    } else {
        const kvq_tensor *t = kvq_ckpt_find(w->ck, name);
        if (!t) return kvq_err_set(err, KVQ_ERR_MISSING, "no tensor '%s' in the checkpoint", name);
        if (t->dtype != KVQ_DTYPE_BF16) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': not bf16", name);
        src = t->data;
        n = kvq_tensor_numel(t);
    }
    const char *path = w->kf ? kvq_file_path(w->kf) : w->path;
    kvq_status s = KVQ_OK;
    uint16_t *x = dst ? dst : taken ? taken : malloc((size_t)(n ? n : 1) * sizeof *x);
    if (dst && n != n_dst)
        s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' has %lld elements, the architecture needs %lld", path, name,
                        (long long)n, (long long)n_dst);
    else if (!x) s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: tensor '%s': out of memory", path, name);
    else if (!taken) memcpy(x, src, (size_t)n * sizeof *x);
    if (w->kf) {
        release_blobs(w, &rv);
        const int64_t bad = s ? -1 : bf16_nonfinite(x, n); // refused as get_kvq refuses it
        if (bad >= 0)
            s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s': decoded weight %lld is %g (a non-finite value in the file)",
                            path, name, (long long)bad, kvq_bf16_to_f32(x[bad]));
    }
    if (s) {
        if (x != dst) free(x);
        return s;
    }
    if (!dst) *out = x, *numel = n;
    return KVQ_OK;
}

kvq_status kvq_weights_get_bf16(kvq_weights *w, const char *name, uint16_t **out, int64_t *numel, kvq_err *err) {
    *out = NULL;
    return bf16_get(w, name, NULL, 0, out, numel, err);
}

kvq_status kvq_weights_read_bf16(kvq_weights *w, const char *name, uint16_t *dst, int64_t n, kvq_err *err) {
    return bf16_get(w, name, dst, n, NULL, NULL, err);
}

size_t kvq_weights_stored_bytes(const kvq_weights *w, const char *name) {
    if (!w->kf) return 0;
    json_t *b = json_object_get(find_rec(w, name), "bytes");
    return json_is_integer(b) && json_integer_value(b) > 0 ? (size_t)json_integer_value(b) : 0;
}

kvq_status kvq_weights_get_hqx(kvq_weights *w, const char *name, kvq_hqx *out, kvq_err *err) {
    memset(out, 0, sizeof *out);
    if (!w->kf) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': a source checkpoint holds no codes", name);
    const json_t *r = find_rec(w, name);
    const char *cname = json_string_value(json_object_get(json_object_get(r, "codec"), "name"));
    int hq = cname && !strcmp(cname, "hyperquant"), rtn = cname && !strcmp(cname, "rtn");
    if (!hq && !rtn)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': codec '%s' has no execution layout", name,
                           cname ? cname : "(none)");
    const char *path = kvq_file_path(w->kf);
    rec_view rv;
    kvq_status s = rec_blobs(w, name, &rv, err);
    if (s != KVQ_OK) return s;
    if (rtn) s = kvq_rtn_pack(json_object_get(rv.codec, "params"), rv.v, rv.nv, rv.rows, rv.cols, out, err);
    else {
        kvq_hq_header h;
        const json_t *params = json_object_get(rv.codec, "params");
        kvq_hq_block *bk = NULL;
        int n_bk = 0;
        if (kvq_hq_is_blocked(params)) { // row blocks at their own rates: one layout, float tile scales
            if (!(bk = malloc(sizeof *bk * KVQ_HQ_MAX_BLOCKS))) s = kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
            else s = kvq_hq_blocks_parse(params, rv.rows, rv.cols, rv.v, rv.nv, bk, &n_bk, err);
            for (int i = 0; i < n_bk && !s; i++)
                if (!kvq_hq_packable(&bk[i].h)) s = kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "hyperquant: block %d has no execution layout", i);
        } else s = kvq_hq_header_parse(params, rv.rows, rv.cols, &h, err);
        // KVQ_HQX_WIDTH=4..8 forces the layout's value width (more escapes below the automatic
        // choice; an experiment knob, docs/EXECUTION.md), else the automatic width
        int width = 0;
        const char *ev = getenv("KVQ_HQX_WIDTH");
        if (ev && *ev) {
            char *end = NULL;
            long v = strtol(ev, &end, 10);
            if (*end || v < 4 || v > 8) s = kvq_err_set(err, KVQ_ERR_ARG, "KVQ_HQX_WIDTH=%s: expected 4 to 8", ev);
            else width = (int)v;
        }
        if (s == KVQ_OK) s = bk ? kvq_hq_pack_blocks(bk, n_bk, width, 0, out, err) : kvq_hq_pack(&h, rv.v, rv.nv, width, 0, out, err);
        free(bk);
    }
    release_blobs(w, &rv);
    if (s != KVQ_OK) kvq_err_prefix(err, "%s: tensor '%s'", path, name);
    return s;
}

kvq_status kvq_weights_get_hqx_parts(kvq_weights *w, const char *name, kvq_hqx *out, int max, int *n, int64_t *row0,
                                     kvq_err *err) {
    *n = 0;
    if (!w->kf) return KVQ_OK;
    const json_t *r = find_rec(w, name), *codec = json_object_get(r, "codec");
    const char *cname = json_string_value(json_object_get(codec, "name"));
    if (!cname || strcmp(cname, "hyperquant") || !kvq_hq_is_blocked(json_object_get(codec, "params"))) return KVQ_OK;
    rec_view rv;
    kvq_status s = rec_blobs(w, name, &rv, err);
    if (s != KVQ_OK) return s;
    kvq_hq_block *bk = malloc(sizeof *bk * KVQ_HQ_MAX_BLOCKS);
    int nb = 0;
    if (!bk) s = kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    else s = kvq_hq_blocks_parse(json_object_get(rv.codec, "params"), rv.rows, rv.cols, rv.v, rv.nv, bk, &nb, err);
    for (int i = 0; i < nb && !s; i++)
        if (!kvq_hq_packable(&bk[i].h)) s = kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "hyperquant: block %d has no execution layout", i);
    if (!s) s = kvq_hq_pack_block_parts(bk, nb, max, 0, out, row0, n, err);
    free(bk);
    release_blobs(w, &rv);
    if (s != KVQ_OK) kvq_err_prefix(err, "%s: tensor '%s'", kvq_file_path(w->kf), name);
    return s;
}

kvq_status kvq_weights_get_pqx(kvq_weights *w, const char *name, kvq_pqx *out, kvq_err *err) {
    memset(out, 0, sizeof *out);
    if (!w->kf) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': a source checkpoint holds no codes", name);
    const json_t *r = find_rec(w, name);
    const char *cname = json_string_value(json_object_get(json_object_get(r, "codec"), "name"));
    if (!cname || (strcmp(cname, "pq") && strcmp(cname, "qet")))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': codec '%s' has no PQ layout", name,
                           cname ? cname : "(none)");
    rec_view rv;
    kvq_status s = rec_blobs(w, name, &rv, err);
    if (s != KVQ_OK) return s;
    // KVQ_QETG=0 (measurements): swap trees the qetx layout does not take (l != 3, w != 8, columns
    // not a multiple of 64) are decoded at load, as before 2026-11-27, instead of held as qetg
    const json_t *par = json_object_get(json_object_get(r, "codec"), "params");
    const json_t *l = json_object_get(par, "l"), *wd = json_object_get(par, "w");
    const char *qg = getenv("KVQ_QETG");
    if (qg && !strcmp(qg, "0") && json_is_integer(l) && json_integer_value(l) > 0 &&
        (json_integer_value(l) != KVQ_QETX_LEVELS || json_integer_value(wd) != 8 || rv.cols % 64)) {
        release_blobs(w, &rv);
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "tensor '%s': general QET swap tree (l=%lld) decoded (KVQ_QETG=0)",
                           name, (long long)json_integer_value(l));
    }
    s = kvq_qet_pack_pqx(json_object_get(rv.codec, "params"), rv.v, rv.nv, rv.rows, rv.cols, out, err);
    release_blobs(w, &rv);
    // CQO codebook codes held at the file's width (cb=9..15: 1.45x -> 1.01x of the file on
    // kvq-small-llama pq:4:cb=10). The per-token table build unpacks them (tables of 1408 x 512
    // k = 403 ~1.8x slower in pq_bench); that file's one-thread decode showed no difference above
    // the noise (docs/RESULTS.md). KVQ_PQ_CODES16=1 keeps them uint16 (over the 1.3x cap).
    const char *c16 = getenv("KVQ_PQ_CODES16");
    if (s == KVQ_OK && !(c16 && !strcmp(c16, "1")) && kvq_pqx_split_codes(out)) {
        kvq_pqx_free(out);
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for packed codebook codes");
    }
    if (s != KVQ_OK && s != KVQ_ERR_UNSUPPORTED) kvq_err_prefix(err, "%s: tensor '%s'", kvq_file_path(w->kf), name);
    return s;
}

kvq_status kvq_weights_get_f32(kvq_weights *w, const char *name, float **out, int64_t *numel, kvq_err *err) {
    *out = NULL;
    if (w->kf) return get_kvq(w, name, out, numel, err);
    const kvq_tensor *t = kvq_ckpt_find(w->ck, name);
    if (!t) return kvq_err_set(err, KVQ_ERR_MISSING, "no tensor '%s' in the checkpoint", name);
    int64_t n = kvq_tensor_numel(t);
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    if (!x) return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
    kvq_dtype_to_f32(t->dtype, t->data, (size_t)n, x);
    *out = x;
    *numel = n;
    return KVQ_OK;
}

kvq_status kvq_weights_tokenizer(kvq_weights *w, kvq_tokenizer **out, kvq_err *err) {
    *out = NULL;
    if (w->ck) {
        const char *p = kvq_ckpt_tokenizer_path(w->ck);
        if (!p) return kvq_err_set(err, KVQ_ERR_MISSING, "%s: no tokenizer beside the checkpoint", w->path);
        return kvq_tok_open(p, out, err);
    }
    // a .kvq: the tokenizer the file check parsed (the first caller takes it), else parsed again
    kvq_status s = KVQ_OK;
    if (w->tok) *out = w->tok, w->tok = NULL;
    else s = stored_tokenizer(w->kf, w->arch.vocab_size, out, err);
    if (!s && !*out) s = kvq_err_set(err, KVQ_ERR_MISSING, "%s: the file stores no tokenizer", kvq_file_path(w->kf));
    return s;
}

const char *kvq_weights_tokenizer_path(const kvq_weights *w) { return w->ck ? kvq_ckpt_tokenizer_path(w->ck) : NULL; }
