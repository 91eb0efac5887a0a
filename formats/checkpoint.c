// Opens a source checkpoint: an HF directory (config.json plus model.safetensors, or
// model.safetensors.index.json and its shards, cross-checked both ways) or a llama2.c
// .bin. Presents one name-sorted tensor list, the architecture, the source files with
// their roles (for the manifest) and the tokenizer path. Also sha256 of a file.
#include "formats/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/llama2c.h"
#include "formats/safetensors.h"

struct kvq_ckpt {
    kvq_ckpt_kind kind;
    kvq_arch arch;
    kvq_st **shards;
    size_t nshards;
    kvq_l2c *l2c;
    kvq_tensor *t;                // sorted by name; views owned by shards / l2c
    size_t n;
    kvq_srcfile *files;
    size_t nfiles, cap_files;
    char *tok_path;               // points at one of the files' paths, or NULL
};

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) snprintf(p, a + b + 2, "%s%s%s", dir, (a && dir[a - 1] == '/') ? "" : "/", name);
    return p;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int is_file(const char *p, uint64_t *size) {
    struct stat sb;
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    if (size) *size = (uint64_t)sb.st_size;
    return 1;
}

// Records a source file (takes ownership of path) if it exists; optional ones may be absent.
static kvq_status add_file(kvq_ckpt *c, char *path, const char *role, int required, kvq_err *err) {
    uint64_t size;
    if (!path) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the path of the %s file", role);
    if (!is_file(path, &size)) {
        kvq_status s = required ? kvq_err_set(err, KVQ_ERR_MISSING, "%s: missing %s file", path, role)
                                : KVQ_OK;
        free(path);
        return s;
    }
    if (c->nfiles == c->cap_files) {
        size_t cap = c->cap_files ? 2 * c->cap_files : 8;
        kvq_srcfile *f = realloc(c->files, cap * sizeof *f);
        if (!f) {
            kvq_status s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for the file list", path);
            free(path);
            return s;
        }
        c->files = f;
        c->cap_files = cap;
    }
    c->files[c->nfiles++] = (kvq_srcfile){path, base_name(path), size, role};
    return KVQ_OK;
}

static int cmp_tensor_name(const void *x, const void *y) {
    return strcmp(((const kvq_tensor *)x)->name, ((const kvq_tensor *)y)->name);
}

static int cmp_str(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

// ---- HF directory -----------------------------------------------------------------

typedef struct { const kvq_tensor *t; size_t shard; } owned;

static int cmp_owned(const void *x, const void *y) {
    const owned *a = x, *b = y;
    int c = strcmp(a->t->name, b->t->name);
    return c ? c : (a->shard > b->shard) - (a->shard < b->shard);
}

static int cmp_tensor_owned_name(const void *x, const void *y) {
    return strcmp(((const owned *)x)->t->name, ((const owned *)y)->t->name);
}

// Opens the shards an index names and checks the index against their contents.
static kvq_status open_index(kvq_ckpt *c, const char *dir, const char *ipath, kvq_err *err) {
    const char *ib = ipath; // full path: names the directory too
    json_error_t je;
    json_t *idx = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
    if (!idx) return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: not valid JSON (line %d): %s", ib, je.line, je.text);
    kvq_status s = KVQ_OK;
    const char **names = NULL;
    owned *all = NULL;
    json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        s = kvq_err_set(err, KVQ_ERR_MISSING, "%s: required field 'weight_map' is missing or empty", ib);
        goto out;
    }
    size_t nw = json_object_size(wm), nn = 0;
    names = calloc(nw, sizeof *names);
    if (!names) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", ib);
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const char *sh = json_string_value(v);
        if (!sh || !*sh || strchr(sh, '/') || strcmp(sh, ".") == 0 || strcmp(sh, "..") == 0) {
            s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' maps to '%s', not a file name in the checkpoint directory",
                            ib, k, sh ? sh : "(not a string)");
            goto out;
        }
        names[nn++] = sh;
    }
    qsort(names, nn, sizeof *names, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < nn; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0) names[u++] = names[i];
    c->shards = calloc(u, sizeof *c->shards);
    if (!c->shards) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", ib);
        goto out;
    }
    size_t total = 0;
    for (size_t i = 0; i < u; i++) {
        char *p = join(dir, names[i]);
        if (p && !is_file(p, NULL)) {
            free(p);
            s = kvq_err_set(err, KVQ_ERR_MISSING, "%s: shard '%s' is listed in the index but missing", ib,
                            names[i]);
            goto out;
        }
        if ((s = add_file(c, p, "weights", 1, err))) goto out;
        if ((s = kvq_st_open(c->files[c->nfiles - 1].path, &c->shards[i], err))) goto out;
        c->nshards++;
        total += kvq_st_count(c->shards[i]);
    }
    all = calloc(total + 1, sizeof *all);
    c->t = calloc(total + 1, sizeof *c->t);
    if (!all || !c->t) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", ib);
        goto out;
    }
    size_t na = 0;
    for (size_t i = 0; i < c->nshards; i++)
        for (size_t j = 0; j < kvq_st_count(c->shards[i]); j++) all[na++] = (owned){kvq_st_tensor(c->shards[i], j), i};
    qsort(all, na, sizeof *all, cmp_owned);
    for (size_t i = 1; i < na; i++)
        if (strcmp(all[i].t->name, all[i - 1].t->name) == 0) {
            s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' is present in two shards, '%s' and '%s'",
                            ib, all[i].t->name, base_name(kvq_st_path(c->shards[all[i - 1].shard])),
                            base_name(kvq_st_path(c->shards[all[i].shard])));
            goto out;
        }
    json_object_foreach(wm, k, v) {
        owned key = {&(kvq_tensor){.name = k}, 0};
        const owned *f = bsearch(&key, all, na, sizeof *all, cmp_tensor_owned_name);
        const char *want = json_string_value(v);
        if (!f || strcmp(base_name(kvq_st_path(c->shards[f->shard])), want) != 0) {
            s = kvq_err_set(err, KVQ_ERR_MISSING, "%s: tensor '%s' is mapped to shard '%s', which does not contain it%s%s",
                            ib, k, want, f ? "; it is in " : "",
                            f ? base_name(kvq_st_path(c->shards[f->shard])) : "");
            goto out;
        }
    }
    if (na != nw) {
        for (size_t i = 0; i < na; i++)
            if (!json_object_get(wm, all[i].t->name)) {
                s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: shard '%s' holds tensor '%s' that the index does not list",
                                ib, base_name(kvq_st_path(c->shards[all[i].shard])), all[i].t->name);
                goto out;
            }
    }
    for (size_t i = 0; i < na; i++) c->t[i] = *all[i].t;
    c->n = na;
out:
    free(names);
    free(all);
    json_decref(idx);
    return s;
}

static kvq_status open_dir(kvq_ckpt *c, const char *dir, kvq_err *err) {
    kvq_status s;
    c->kind = KVQ_CKPT_HF;
    char *cfg = join(dir, "config.json");
    if (!cfg) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", dir);
    if (!is_file(cfg, NULL)) {
        s = kvq_err_set(err, KVQ_ERR_MISSING, "%s: no config.json in the checkpoint directory", dir);
        free(cfg);
        return s;
    }
    if ((s = add_file(c, cfg, "config", 1, err))) return s;
    if ((s = kvq_arch_from_config(c->files[0].path, &c->arch, err))) return s;
    char *ipath = join(dir, "model.safetensors.index.json");
    char *single = join(dir, "model.safetensors");
    if (!ipath || !single) {
        free(ipath);
        free(single);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", dir);
    }
    if (is_file(ipath, NULL)) {
        free(single);
        if ((s = add_file(c, ipath, "index", 1, err))) return s;
        if ((s = open_index(c, dir, c->files[c->nfiles - 1].path, err))) return s;
    } else if (is_file(single, NULL)) {
        free(ipath);
        if ((s = add_file(c, single, "weights", 1, err))) return s;
        c->shards = calloc(1, sizeof *c->shards);
        if (!c->shards) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", dir);
        if ((s = kvq_st_open(c->files[c->nfiles - 1].path, &c->shards[0], err))) return s;
        c->nshards = 1;
        size_t n = kvq_st_count(c->shards[0]);
        c->t = calloc(n + 1, sizeof *c->t);
        if (!c->t) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %zu tensor entries", dir, n);
        for (size_t i = 0; i < n; i++) c->t[i] = *kvq_st_tensor(c->shards[0], i);
        c->n = n;
        qsort(c->t, c->n, sizeof *c->t, cmp_tensor_name);
    } else {
        free(ipath);
        free(single);
        return kvq_err_set(err, KVQ_ERR_MISSING, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    size_t before = c->nfiles;
    if ((s = add_file(c, join(dir, "tokenizer.json"), "tokenizer", 0, err))) return s;
    if (c->nfiles > before) c->tok_path = (char *)c->files[before].path;
    if ((s = add_file(c, join(dir, "tokenizer_config.json"), "tokenizer_config", 0, err)) ||
        (s = add_file(c, join(dir, "generation_config.json"), "generation_config", 0, err)))
        return s;
    return KVQ_OK;
}

// ---- llama2.c ---------------------------------------------------------------------

// tok<vocab>.bin, then tokenizer.bin, then the only tok*.bin in the directory.
static char *find_l2c_tokenizer(const char *bin, int vocab) {
    char *dir = strdup(bin);
    if (!dir) return NULL;
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else strcpy(dir, "./");
    char name[64];
    snprintf(name, sizeof name, "tok%d.bin", vocab);
    char *p = join(dir, name);
    if (p && is_file(p, NULL)) goto done;
    free(p);
    p = join(dir, "tokenizer.bin");
    if (p && is_file(p, NULL)) goto done;
    free(p);
    p = NULL;
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    char one[256] = "";
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 7 && strncmp(e->d_name, "tok", 3) == 0 && strcmp(e->d_name + l - 4, ".bin") == 0 &&
            strcmp(e->d_name, base_name(bin)) != 0 && l < sizeof one) {
            found++;
            strcpy(one, e->d_name);
        }
    }
    if (d) closedir(d);
    if (found == 1) {
        p = join(dir, one);
        if (p && !is_file(p, NULL)) {
            free(p);
            p = NULL;
        }
    }
done:
    free(dir);
    return p;
}

static kvq_status open_l2c(kvq_ckpt *c, const char *path, kvq_err *err) {
    c->kind = KVQ_CKPT_LLAMA2C;
    kvq_status s;
    if ((s = add_file(c, strdup(path), "weights", 1, err))) return s;
    if ((s = kvq_l2c_open(path, &c->l2c, err))) return s;
    c->arch = *kvq_l2c_arch(c->l2c);
    c->n = kvq_l2c_count(c->l2c);
    c->t = calloc(c->n + 1, sizeof *c->t);
    if (!c->t) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %zu tensor entries", path, c->n);
    for (size_t i = 0; i < c->n; i++) c->t[i] = *kvq_l2c_tensor(c->l2c, i);
    qsort(c->t, c->n, sizeof *c->t, cmp_tensor_name);
    char *tok = find_l2c_tokenizer(path, c->arch.vocab_size);
    if (tok) {
        size_t before = c->nfiles;
        if ((s = add_file(c, tok, "tokenizer", 0, err))) return s;
        if (c->nfiles > before) c->tok_path = (char *)c->files[before].path;
    }
    return KVQ_OK;
}

// The one cross-check between config and weights done here: the embedding table's shape.
static kvq_status check_embedding(const kvq_ckpt *c, const char *path, kvq_err *err) {
    const kvq_tensor *e = kvq_ckpt_find(c, "model.embed_tokens.weight");
    if (!e) return kvq_err_set(err, KVQ_ERR_MISSING, "%s: no tensor 'model.embed_tokens.weight'", path);
    if (e->ndim != 2 || e->shape[0] != c->arch.vocab_size || e->shape[1] != c->arch.hidden_size)
        return kvq_err_set(err, KVQ_ERR_FORMAT,
                           "%s: tensor 'model.embed_tokens.weight' has shape [%lld, %lld], config says "
                           "vocab_size %d × hidden_size %d",
                           path, (long long)e->shape[0], (long long)(e->ndim > 1 ? e->shape[1] : 0),
                           c->arch.vocab_size, c->arch.hidden_size);
    return KVQ_OK;
}

// ---- public -----------------------------------------------------------------------

kvq_status kvq_ckpt_open(const char *path, kvq_ckpt **out, kvq_err *err) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return kvq_err_set(err, errno == ENOENT ? KVQ_ERR_MISSING : KVQ_ERR_IO, "%s: %s", path, strerror(errno));
    kvq_ckpt *c = calloc(1, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    size_t pl = strlen(path);
    kvq_status s;
    if (!S_ISDIR(sb.st_mode) && pl >= 12 && strcmp(path + pl - 12, ".safetensors") == 0)
        s = kvq_err_set(err, KVQ_ERR_ARG,
                        "%s: pass the checkpoint directory (with config.json), not a .safetensors file", path);
    else
        s = S_ISDIR(sb.st_mode) ? open_dir(c, path, err) : open_l2c(c, path, err);
    if (s == KVQ_OK) s = check_embedding(c, path, err);
    if (s != KVQ_OK) {
        kvq_ckpt_close(c);
        return s;
    }
    *out = c;
    return KVQ_OK;
}

void kvq_ckpt_close(kvq_ckpt *c) {
    if (!c) return;
    for (size_t i = 0; i < c->nshards; i++) kvq_st_close(c->shards[i]);
    free(c->shards);
    kvq_l2c_close(c->l2c);
    for (size_t i = 0; i < c->nfiles; i++) free((char *)c->files[i].path);
    free(c->files);
    free(c->t);
    free(c);
}

kvq_ckpt_kind kvq_ckpt_get_kind(const kvq_ckpt *c) { return c->kind; }
const kvq_arch *kvq_ckpt_arch(const kvq_ckpt *c) { return &c->arch; }
size_t kvq_ckpt_count(const kvq_ckpt *c) { return c->n; }
const kvq_tensor *kvq_ckpt_tensor(const kvq_ckpt *c, size_t i) { return i < c->n ? &c->t[i] : NULL; }

const kvq_tensor *kvq_ckpt_find(const kvq_ckpt *c, const char *name) {
    kvq_tensor key = {.name = name};
    return bsearch(&key, c->t, c->n, sizeof *c->t, cmp_tensor_name);
}

size_t kvq_ckpt_nfiles(const kvq_ckpt *c) { return c->nfiles; }
const kvq_srcfile *kvq_ckpt_file(const kvq_ckpt *c, size_t i) { return i < c->nfiles ? &c->files[i] : NULL; }
const char *kvq_ckpt_tokenizer_path(const kvq_ckpt *c) { return c->tok_path; }

kvq_status kvq_sha256_file(const char *path, char hex[65], kvq_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return kvq_err_set(err, errno == ENOENT ? KVQ_ERR_MISSING : KVQ_ERR_IO, "%s: cannot open: %s", path,
                           strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    kvq_status s = KVQ_OK;
    unsigned char *buf = malloc(1 << 20), md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!ctx || !buf || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: cannot start sha256", path);
        goto out;
    }
    size_t r;
    while ((r = fread(buf, 1, 1 << 20, f)) > 0)
        if (EVP_DigestUpdate(ctx, buf, r) != 1) break;
    if (ferror(f)) {
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: read error", path);
        goto out;
    }
    if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32) {
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: sha256 failed", path);
        goto out;
    }
    for (unsigned i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
out:
    free(buf);
    EVP_MD_CTX_free(ctx);
    fclose(f);
    return s;
}
