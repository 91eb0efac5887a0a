// safetensors reader and writer. The reader mmaps the file and validates the header
// as strictly as the reference Rust implementation: the tensors must tile the data area
// exactly (no gaps, no overlaps, no trailing bytes), sizes must equal numel × dtype size,
// names must be unique. The writer produces the same bytes as the Python `safetensors`
// package for the same tensors (F32 before BF16 before F16, then by name; header padded
// with spaces to 8 bytes) and writes through a temporary file + fsync + rename.
#include "formats/safetensors.h"
#include "formats/tmpfile.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// The reference implementation refuses headers above 100 MB; so do we.
#define ST_MAX_HEADER 100000000ull

struct kvq_st {
    char *path;
    const char *base;      // base name of path, for messages
    void *map;
    size_t map_len;
    size_t n;
    kvq_tensor *t;         // sorted by data offset
    uint64_t *off;         // (n, 2) data_offsets, parallel to t
    size_t *by_name;       // indices into t, sorted by name
    size_t nmeta;
    char **meta;           // (nmeta, 2) key, value
};

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

// ---- reader -----------------------------------------------------------------------

// Parses a JSON integer into a non-negative uint64 (JSON integers are int64 in jansson).
static int get_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0) return -1;
    *out = (uint64_t)x;
    return 0;
}

static void fmt_shape(const kvq_tensor *t, char *buf, size_t cap) {
    size_t k = 0;
    k += snprintf(buf + k, cap - k, "[");
    for (int i = 0; i < t->ndim && k < cap; i++)
        k += snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

// Fills tensor i from its header entry; checks dtype, shape and offset syntax and
// computes the byte size from the shape (overflow-checked).
static kvq_status parse_entry(kvq_st *st, size_t i, const char *name, const json_t *e,
                              uint64_t *want_bytes, kvq_err *err) {
    kvq_tensor *t = &st->t[i];
    if (!json_is_object(e))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s': header entry is not an object",
                           st->base, name);
    const json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
                 *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return kvq_err_set(err, KVQ_ERR_FORMAT,
                           "%s: tensor '%s': entry needs string 'dtype', array 'shape' and array "
                           "'data_offsets'", st->base, name);
    if (kvq_dtype_parse(json_string_value(jd), &t->dtype) != 0)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                           "%s: tensor '%s': unsupported dtype '%s' (kvq reads F32, F16, BF16)",
                           st->base, name, json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > KVQ_MAX_DIMS)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "%s: tensor '%s': %zu dimensions (max %d)",
                           st->base, name, nd, KVQ_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (size_t d = 0; d < nd; d++) {
        uint64_t x;
        if (get_u64(json_array_get(js, d), &x) != 0 || x > INT64_MAX)
            return kvq_err_set(err, KVQ_ERR_FORMAT,
                               "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                               st->base, name, d);
        t->shape[d] = (int64_t)x;
        if (__builtin_mul_overflow(numel, x, &numel)) overflow = 1;
    }
    uint64_t nbytes;
    if (overflow || __builtin_mul_overflow(numel, (uint64_t)kvq_dtype_size(t->dtype), &nbytes) ||
        nbytes > INT64_MAX)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s': shape too large (size overflows)",
                           st->base, name);
    uint64_t a, b;
    if (json_array_size(jo) != 2 || get_u64(json_array_get(jo, 0), &a) != 0 ||
        get_u64(json_array_get(jo, 1), &b) != 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets must be two non-negative integers",
                           st->base, name);
    if (b < a)
        return kvq_err_set(err, KVQ_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                           st->base, name, (unsigned long long)a, (unsigned long long)b);
    st->off[2 * i] = a;
    st->off[2 * i + 1] = b;
    *want_bytes = nbytes;
    return KVQ_OK;
}

typedef struct { uint64_t a, b; size_t i; } span;

static int cmp_span(const void *x, const void *y) {
    const span *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    return p->i < q->i ? -1 : p->i > q->i;
}

// Layout consistency, independent of the file size: byte length equals numel × size,
// tensors tile [0, end) with no gap or overlap. Writes the first problem into err and
// returns its code, or KVQ_OK with *end set to the data length the header describes.
static kvq_status check_layout(const kvq_st *st, const span *sp, const uint64_t *want,
                               uint64_t *end, kvq_err *err) {
    for (size_t i = 0; i < st->n; i++) {
        uint64_t a = st->off[2 * i], b = st->off[2 * i + 1];
        if (b - a != want[i]) {
            char sh[160];
            fmt_shape(&st->t[i], sh, sizeof sh);
            return kvq_err_set(err, KVQ_ERR_FORMAT,
                               "%s: tensor '%s': shape %s × %s needs %llu bytes but data_offsets "
                               "[%llu, %llu] hold %llu",
                               st->base, st->t[i].name, sh, kvq_dtype_name(st->t[i].dtype),
                               (unsigned long long)want[i], (unsigned long long)a,
                               (unsigned long long)b, (unsigned long long)(b - a));
        }
    }
    uint64_t pos = 0;
    for (size_t k = 0; k < st->n; k++) {
        const span *s = &sp[k];
        if (s->a < pos) {
            const span *p = &sp[k - 1];
            return kvq_err_set(err, KVQ_ERR_FORMAT,
                               "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' "
                               "[%llu, %llu]",
                               st->base, st->t[s->i].name, (unsigned long long)s->a,
                               (unsigned long long)s->b, st->t[p->i].name,
                               (unsigned long long)p->a, (unsigned long long)p->b);
        }
        if (s->a > pos)
            return kvq_err_set(err, KVQ_ERR_FORMAT,
                               "%s: tensor '%s': data_offsets [%llu, %llu] leave a gap of %llu "
                               "bytes after offset %llu (safetensors data must be contiguous)",
                               st->base, st->t[s->i].name, (unsigned long long)s->a,
                               (unsigned long long)s->b, (unsigned long long)(s->a - pos),
                               (unsigned long long)pos);
        pos = s->b;
    }
    *end = pos;
    return KVQ_OK;
}

static kvq_status parse_metadata(kvq_st *st, const json_t *m, kvq_err *err) {
    if (!json_is_object(m))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: __metadata__ is not an object", st->base);
    st->meta = calloc(2 * json_object_size(m) + 1, sizeof *st->meta);
    if (!st->meta) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", st->base);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_string(v))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: __metadata__ value for '%s' is not a string",
                               st->base, k);
        st->meta[2 * st->nmeta] = strdup(k);
        st->meta[2 * st->nmeta + 1] = strdup(json_string_value(v));
        st->nmeta++;
        if (!st->meta[2 * st->nmeta - 2] || !st->meta[2 * st->nmeta - 1])
            return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", st->base);
    }
    return KVQ_OK;
}

static int cmp_name_ctx(const void *x, const void *y, void *ctx) {
    const kvq_tensor *t = ctx;
    return strcmp(t[*(const size_t *)x].name, t[*(const size_t *)y].name);
}

// Parses and validates the header bytes; fills st (tensors sorted by offset).
static kvq_status parse_header(kvq_st *st, const char *hdr, size_t hlen, uint64_t data_size,
                               kvq_err *err) {
    json_error_t je;
    json_t *root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_duplicate_key)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: duplicate tensor name in header: %s",
                               st->base, je.text);
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: header is not valid JSON (column %d): %s",
                           st->base, je.column, je.text);
    }
    kvq_status s = KVQ_OK;
    span *sp = NULL;
    uint64_t *want = NULL;
    if (!json_is_object(root)) {
        s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: header is not a JSON object", st->base);
        goto out;
    }
    const json_t *meta = json_object_get(root, "__metadata__");
    if (meta && (s = parse_metadata(st, meta, err)) != KVQ_OK) goto out;
    size_t cap = json_object_size(root) - (meta ? 1 : 0);
    st->t = calloc(cap + 1, sizeof *st->t);
    st->off = calloc(2 * cap + 2, sizeof *st->off);
    st->by_name = calloc(cap + 1, sizeof *st->by_name);
    sp = calloc(cap + 1, sizeof *sp);
    want = calloc(cap + 1, sizeof *want);
    if (!st->t || !st->off || !st->by_name || !sp || !want) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %zu tensors", st->base, cap);
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) continue;
        size_t i = st->n;
        if (!(st->t[i].name = strdup(k))) {
            s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", st->base);
            goto out;
        }
        st->n++;
        if ((s = parse_entry(st, i, k, v, &want[i], err)) != KVQ_OK) goto out;
        sp[i] = (span){st->off[2 * i], st->off[2 * i + 1], i};
    }
    qsort(sp, st->n, sizeof *sp, cmp_span);

    // Out-of-range offsets first, so that a file cut short is reported as truncated
    // when the header is otherwise self-consistent.
    kvq_err lay = {0};
    uint64_t end = 0;
    kvq_status ls = check_layout(st, sp, want, &end, &lay);
    for (size_t k2 = 0; k2 < st->n; k2++) {
        const span *q = &sp[k2];
        if (q->b <= data_size) continue;
        if (ls == KVQ_OK)
            s = kvq_err_set(err, KVQ_ERR_FORMAT,
                            "%s: file truncated: tensor '%s': data_offsets [%llu, %llu] exceed "
                            "data size %llu (%llu bytes missing)",
                            st->base, st->t[q->i].name, (unsigned long long)q->a,
                            (unsigned long long)q->b, (unsigned long long)data_size,
                            (unsigned long long)(end - data_size));
        else
            s = kvq_err_set(err, KVQ_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] exceed data size %llu",
                            st->base, st->t[q->i].name, (unsigned long long)q->a,
                            (unsigned long long)q->b, (unsigned long long)data_size);
        goto out;
    }
    if (ls != KVQ_OK) {
        if (err) *err = lay;
        s = ls;
        goto out;
    }
    if (end != data_size) {
        s = kvq_err_set(err, KVQ_ERR_FORMAT,
                        "%s: %llu trailing bytes after the last tensor (tensors end at %llu, data "
                        "size %llu)",
                        st->base, (unsigned long long)(data_size - end), (unsigned long long)end,
                        (unsigned long long)data_size);
        goto out;
    }

    // Reorder into file order and index by name.
    kvq_tensor *t2 = calloc(st->n + 1, sizeof *t2);
    uint64_t *o2 = calloc(2 * st->n + 2, sizeof *o2);
    if (!t2 || !o2) {
        free(t2);
        free(o2);
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", st->base);
        goto out;
    }
    const uint8_t *data = (const uint8_t *)hdr + hlen;
    for (size_t j = 0; j < st->n; j++) {
        t2[j] = st->t[sp[j].i];
        o2[2 * j] = sp[j].a;
        o2[2 * j + 1] = sp[j].b;
        t2[j].data = data + sp[j].a;
        t2[j].nbytes = (size_t)(sp[j].b - sp[j].a);
        st->by_name[j] = j;
    }
    free(st->t);
    free(st->off);
    st->t = t2;
    st->off = o2;
    qsort_r(st->by_name, st->n, sizeof *st->by_name, cmp_name_ctx, st->t);
out:
    free(sp);
    free(want);
    json_decref(root);
    return s;
}

kvq_status kvq_st_open(const char *path, kvq_st **out, kvq_err *err) {
    *out = NULL;
    kvq_st *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    }
    st->base = base_name(st->path);
    kvq_status s = KVQ_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        s = kvq_err_set(err, fd < 0 && errno == ENOENT ? KVQ_ERR_MISSING : KVQ_ERR_IO,
                        "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < 8) {
        s = kvq_err_set(err, KVQ_ERR_FORMAT,
                        "%s: file truncated: %llu bytes, too short for the 8-byte header length",
                        st->base, (unsigned long long)fsize);
        goto fail;
    }
    st->map_len = (size_t)fsize;
    st->map = mmap(NULL, st->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (st->map == MAP_FAILED) {
        st->map = NULL;
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    const uint8_t *p = st->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > ST_MAX_HEADER) {
        s = kvq_err_set(err, KVQ_ERR_FORMAT,
                        "%s: header length %llu is absurd (limit %llu, file size %llu)", st->base,
                        (unsigned long long)hlen, ST_MAX_HEADER, (unsigned long long)fsize);
        goto fail;
    }
    if (hlen > fsize - 8) {
        s = kvq_err_set(err, KVQ_ERR_FORMAT,
                        "%s: header length %llu runs past the end of the file (file size %llu)",
                        st->base, (unsigned long long)hlen, (unsigned long long)fsize);
        goto fail;
    }
    if (hlen < 2 || p[8] != '{') {
        s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: header is not valid JSON (does not start with '{')",
                        st->base);
        goto fail;
    }
    if ((s = parse_header(st, (const char *)p + 8, (size_t)hlen, fsize - 8 - hlen, err)) != KVQ_OK)
        goto fail;
    *out = st;
    return KVQ_OK;
fail:
    if (fd >= 0) close(fd);
    kvq_st_close(st);
    return s;
}

void kvq_st_close(kvq_st *st) {
    if (!st) return;
    if (st->map) munmap(st->map, st->map_len);
    if (st->t)
        for (size_t i = 0; i < st->n; i++) free((char *)st->t[i].name);
    for (size_t i = 0; i < 2 * st->nmeta; i++) free(st->meta[i]);
    free(st->meta);
    free(st->t);
    free(st->off);
    free(st->by_name);
    free(st->path);
    free(st);
}

size_t kvq_st_count(const kvq_st *st) { return st->n; }

const kvq_tensor *kvq_st_tensor(const kvq_st *st, size_t i) {
    return i < st->n ? &st->t[i] : NULL;
}

const kvq_tensor *kvq_st_find(const kvq_st *st, const char *name) {
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->t[st->by_name[mid]].name, name);
        if (c == 0) return &st->t[st->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *kvq_st_metadata(const kvq_st *st, const char *key) {
    for (size_t i = 0; i < st->nmeta; i++)
        if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
    return NULL;
}

const char *kvq_st_path(const kvq_st *st) { return st->path; }

// ---- writer -----------------------------------------------------------------------

// The Python package orders tensors by dtype (descending in its enum: F32, BF16, F16)
// then by name; we do the same so both write identical bytes.
static int dtype_rank(kvq_dtype d) {
    return d == KVQ_DTYPE_F32 ? 0 : d == KVQ_DTYPE_BF16 ? 1 : 2;
}

static int cmp_write_order(const void *x, const void *y, void *ctx) {
    const kvq_tensor *t = ctx;
    const kvq_tensor *a = &t[*(const size_t *)x], *b = &t[*(const size_t *)y];
    int ra = dtype_rank(a->dtype), rb = dtype_rank(b->dtype);
    if (ra != rb) return ra - rb;
    return strcmp(a->name, b->name);
}

static int write_all(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

// Builds the header text (without padding) in write order; checks the tensors.
static kvq_status build_header(const char *path, const kvq_tensor *t, const size_t *ord, size_t n,
                               const char *const *meta, char **out, kvq_err *err) {
    json_t *root = json_object();
    kvq_status s = KVQ_OK;
    if (!root) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    if (meta && meta[0]) {
        json_t *m = json_object();
        for (size_t i = 0; meta[i]; i += 2) {
            if (!meta[i + 1]) {
                s = kvq_err_set(err, KVQ_ERR_ARG, "%s: metadata key '%s' has no value", path, meta[i]);
                json_decref(m);
                goto out;
            }
            if (json_object_set_new(m, meta[i], json_string(meta[i + 1])) != 0) {
                s = kvq_err_set(err, KVQ_ERR_ARG, "%s: metadata '%s' is not valid UTF-8", path, meta[i]);
                json_decref(m);
                goto out;
            }
        }
        json_object_set_new(root, "__metadata__", m);
    }
    uint64_t pos = 0;
    for (size_t k = 0; k < n; k++) {
        const kvq_tensor *x = &t[ord[k]];
        if (!x->name || strcmp(x->name, "__metadata__") == 0 || json_object_get(root, x->name)) {
            s = kvq_err_set(err, KVQ_ERR_ARG, "%s: tensor name '%s' is missing, reserved or repeated",
                            path, x->name ? x->name : "(null)");
            goto out;
        }
        if (x->dtype >= KVQ_DTYPE_COUNT || x->ndim < 0 || x->ndim > KVQ_MAX_DIMS) {
            s = kvq_err_set(err, KVQ_ERR_ARG, "%s: tensor '%s': bad dtype or ndim", path, x->name);
            goto out;
        }
        uint64_t numel = 1;
        json_t *shape = json_array();
        int bad = 0;
        for (int d = 0; d < x->ndim; d++) {
            if (x->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)x->shape[d], &numel)) bad = 1;
            json_array_append_new(shape, json_integer(x->shape[d]));
        }
        uint64_t nb;
        if (bad || __builtin_mul_overflow(numel, (uint64_t)kvq_dtype_size(x->dtype), &nb) ||
            nb != x->nbytes || (nb && !x->data)) {
            json_decref(shape);
            s = kvq_err_set(err, KVQ_ERR_ARG, "%s: tensor '%s': nbytes %zu does not match its shape",
                            path, x->name, x->nbytes);
            goto out;
        }
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(kvq_dtype_name(x->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)pos, (json_int_t)(pos + nb)));
        if (json_object_set_new(root, x->name, e) != 0) { // jansson refuses invalid UTF-8 keys
            s = kvq_err_set(err, KVQ_ERR_ARG, "%s: tensor name is not valid UTF-8", path);
            goto out;
        }
        pos += nb;
    }
    *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!*out) s = kvq_err_set(err, KVQ_ERR_ARG, "%s: cannot encode header (invalid UTF-8 in a name?)", path);
out:
    json_decref(root);
    return s;
}

kvq_status kvq_st_write(const char *path, const kvq_tensor *tensors, size_t n,
                        const char *const *meta, kvq_err *err) {
    size_t *ord = calloc(n + 1, sizeof *ord);
    if (!ord) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) ord[i] = i;
    qsort_r(ord, n, sizeof *ord, cmp_write_order, (void *)tensors);
    char *hdr = NULL;
    kvq_status s = build_header(path, tensors, ord, n, meta, &hdr, err);
    if (s != KVQ_OK) {
        free(ord);
        return s;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;

    // Temporary file in the destination directory so the rename is atomic (tmpfile.h: locked,
    // 0666 & ~umask; one a killed writer left is removed here first).
    char *tmp = NULL;
    char *dcopy = strdup(path);
    if (!dcopy) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    int fd = kvq_tmp_create(path, &tmp);
    if (fd < 0) {
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: cannot create temporary file: %s", path, strerror(errno));
        goto done;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int bad = write_all(fd, len8, 8) || write_all(fd, hdr, hl);
    for (size_t i = hl; i < padded && !bad; i++) bad = write_all(fd, " ", 1);
    for (size_t k = 0; k < n && !bad; k++)
        bad = write_all(fd, tensors[ord[k]].data, tensors[ord[k]].nbytes);
    if (!bad) bad = fsync(fd);
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(tmp);
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: write failed: %s", path, strerror(e));
        goto done;
    }
    // Make the rename itself durable.
    int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
done:
    free(tmp);
    free(dcopy);
    free(hdr);
    free(ord);
    return s;
}
