// Loads an HF tokenizer.json (jansson) into the hf_tok tables: BPE vocab and merge ranks,
// added tokens, normalizer / pre-tokenizer / decoder trees (regexes compiled with PCRE2,
// UTF + UCP, JIT), the post-processor's BOS/EOS template. Unknown component types are
// rejected with one line naming the type and where it sits.
#include "libconv/tokenizer/tokenizer_hf.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct {
    const char *path;
    kvq_err *err;
} ld;

// Rust regex's \w (HF uses it for single_word and the Whitespace pre-tokenizer)
#define WORD_CHARS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}"
#define WORD_CLASS "[" WORD_CHARS "]"

#define FAIL(L, code, ...) (kvq_err_set((L)->err, code, __VA_ARGS__), kvq_err_prefix((L)->err, "%s", (L)->path), (code))

static const char *jstr(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jbool(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static kvq_status compile_re(ld *L, const char *pat, size_t n, int literal, const char *where,
                             pcre2_code **out) {
    int ec;
    PCRE2_SIZE eo;
    uint32_t opt = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, n, opt, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return FAIL(L, KVQ_ERR_FORMAT, "%s: regex /%.*s/ does not compile at offset %zu: %s", where,
                    (int)(n > 200 ? 200 : n), pat, (size_t)eo, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // falls back to the interpreter if JIT is absent
    *out = re;
    return KVQ_OK;
}

// {"Regex": "..."} or {"String": "..."}
static kvq_status compile_pattern(ld *L, json_t *pat, const char *where, pcre2_code **out) {
    json_t *r = json_object_get(pat, "Regex"), *s = json_object_get(pat, "String");
    if (json_is_string(r)) return compile_re(L, json_string_value(r), json_string_length(r), 0, where, out);
    if (json_is_string(s)) return compile_re(L, json_string_value(s), json_string_length(s), 1, where, out);
    return FAIL(L, KVQ_ERR_FORMAT, "%s: pattern is neither {\"Regex\": ...} nor {\"String\": ...}", where);
}

static kvq_status set_repl(ld *L, json_t *o, const char *where, char *repl, int *len) {
    const char *r = jstr(o, "replacement");
    if (!r) r = "\xE2\x96\x81"; // U+2581
    size_t n = strlen(r);
    if (n == 0 || n >= 8) return FAIL(L, KVQ_ERR_FORMAT, "%s: replacement '%s' must be one character", where, r);
    memcpy(repl, r, n);
    *len = (int)n;
    return KVQ_OK;
}

static int metaspace_scheme(json_t *o) {
    const char *s = jstr(o, "prepend_scheme");
    if (s) return strcmp(s, "first") == 0 ? HF_PREPEND_FIRST : strcmp(s, "never") == 0 ? HF_PREPEND_NEVER : HF_PREPEND_ALWAYS;
    return jbool(o, "add_prefix_space", 1) ? HF_PREPEND_ALWAYS : HF_PREPEND_NEVER;
}

// ---------------------------------------------------------------- components

static kvq_status parse_norm(ld *L, json_t *o, hf_norm *nm) {
    const char *ty = jstr(o, "type");
    if (!ty) return FAIL(L, KVQ_ERR_FORMAT, "normalizer without a \"type\"");
    if (!strcmp(ty, "NFC")) nm->type = HF_N_NFC;
    else if (!strcmp(ty, "NFD")) nm->type = HF_N_NFD;
    else if (!strcmp(ty, "NFKC")) nm->type = HF_N_NFKC;
    else if (!strcmp(ty, "NFKD")) nm->type = HF_N_NFKD;
    else if (!strcmp(ty, "Lowercase")) nm->type = HF_N_LOWER;
    else if (!strcmp(ty, "StripAccents")) nm->type = HF_N_STRIP_ACCENTS;
    else if (!strcmp(ty, "Strip")) {
        nm->type = HF_N_STRIP;
        nm->left = jbool(o, "strip_left", 1);
        nm->right = jbool(o, "strip_right", 1);
    } else if (!strcmp(ty, "Prepend")) {
        nm->type = HF_N_PREPEND;
        json_t *p = json_object_get(o, "prepend");
        if (!json_is_string(p)) return FAIL(L, KVQ_ERR_FORMAT, "normalizer Prepend without \"prepend\"");
        nm->clen = json_string_length(p);
        nm->content = dupn(json_string_value(p), nm->clen);
    } else if (!strcmp(ty, "Replace")) {
        nm->type = HF_N_REPLACE;
        json_t *p = json_object_get(o, "content");
        if (!json_is_string(p)) return FAIL(L, KVQ_ERR_FORMAT, "normalizer Replace without \"content\"");
        nm->clen = json_string_length(p);
        nm->content = dupn(json_string_value(p), nm->clen);
        kvq_status st = compile_pattern(L, json_object_get(o, "pattern"), "normalizer Replace", &nm->re);
        if (st) return st;
    } else if (!strcmp(ty, "Sequence")) {
        nm->type = HF_N_SEQ;
        json_t *a = json_object_get(o, "normalizers");
        if (!json_is_array(a)) return FAIL(L, KVQ_ERR_FORMAT, "normalizer Sequence without \"normalizers\"");
        nm->n_sub = (int)json_array_size(a);
        nm->sub = calloc(nm->n_sub + 1, sizeof *nm->sub);
        if (!nm->sub) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        for (int i = 0; i < nm->n_sub; i++) {
            kvq_status st = parse_norm(L, json_array_get(a, i), &nm->sub[i]);
            if (st) return st;
        }
    } else return FAIL(L, KVQ_ERR_UNSUPPORTED, "normalizer type '%s' is not supported", ty);
    if ((nm->type == HF_N_PREPEND || nm->type == HF_N_REPLACE) && !nm->content)
        return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
    return KVQ_OK;
}

static kvq_status parse_pretok(ld *L, json_t *o, hf_pretok *pt) {
    const char *ty = jstr(o, "type");
    if (!ty) return FAIL(L, KVQ_ERR_FORMAT, "pre_tokenizer without a \"type\"");
    if (!strcmp(ty, "Split")) {
        pt->type = HF_P_SPLIT;
        const char *b = jstr(o, "behavior");
        if (!b) return FAIL(L, KVQ_ERR_FORMAT, "pre_tokenizer Split without \"behavior\"");
        if (!strcmp(b, "Removed")) pt->behavior = HF_REMOVED;
        else if (!strcmp(b, "Isolated")) pt->behavior = HF_ISOLATED;
        else if (!strcmp(b, "MergedWithPrevious")) pt->behavior = HF_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext")) pt->behavior = HF_MERGED_NEXT;
        else if (!strcmp(b, "Contiguous")) pt->behavior = HF_CONTIGUOUS;
        else return FAIL(L, KVQ_ERR_UNSUPPORTED, "pre_tokenizer Split: behavior '%s' is not supported", b);
        pt->invert = jbool(o, "invert", 0);
        return compile_pattern(L, json_object_get(o, "pattern"), "pre_tokenizer Split", &pt->re);
    }
    // Digits, Whitespace, WhitespaceSplit and Punctuation are Splits with a fixed pattern
    static const char ws[] = "[\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
                             "\\x{202F}\\x{205F}\\x{3000}]"; // Rust char::is_whitespace
    if (!strcmp(ty, "Digits")) { // Rust char::is_numeric = \p{N}
        pt->type = HF_P_SPLIT;
        pt->behavior = jbool(o, "individual_digits", 0) ? HF_ISOLATED : HF_CONTIGUOUS;
        return compile_re(L, "\\p{N}", 5, 0, "pre_tokenizer Digits", &pt->re);
    }
    if (!strcmp(ty, "WhitespaceSplit")) {
        pt->type = HF_P_SPLIT;
        pt->behavior = HF_REMOVED;
        return compile_re(L, ws, sizeof ws - 1, 0, "pre_tokenizer WhitespaceSplit", &pt->re);
    }
    if (!strcmp(ty, "Whitespace")) { // regex \w+|[^\w\s]+, matches kept, the rest removed
        static const char w[] = WORD_CLASS "+|[^" WORD_CHARS "\\s]+";
        pt->type = HF_P_SPLIT;
        pt->behavior = HF_REMOVED;
        pt->invert = 1;
        return compile_re(L, w, sizeof w - 1, 0, "pre_tokenizer Whitespace", &pt->re);
    }
    if (!strcmp(ty, "Punctuation")) { // ASCII punctuation or Unicode P*
        const char *b = jstr(o, "behavior");
        pt->type = HF_P_SPLIT;
        pt->behavior = !b || !strcmp(b, "Isolated") ? HF_ISOLATED : !strcmp(b, "Removed") ? HF_REMOVED
                     : !strcmp(b, "MergedWithPrevious") ? HF_MERGED_PREV : !strcmp(b, "MergedWithNext") ? HF_MERGED_NEXT
                     : !strcmp(b, "Contiguous") ? HF_CONTIGUOUS : -1;
        if (pt->behavior < 0) return FAIL(L, KVQ_ERR_UNSUPPORTED, "pre_tokenizer Punctuation: behavior '%s' is not supported", b);
        static const char pu[] = "[\\p{P}!-/:-@\\[-`{-~]";
        return compile_re(L, pu, sizeof pu - 1, 0, "pre_tokenizer Punctuation", &pt->re);
    }
    if (!strcmp(ty, "ByteLevel")) {
        pt->type = HF_P_BYTELEVEL;
        pt->add_prefix_space = jbool(o, "add_prefix_space", 1);
        pt->use_regex = jbool(o, "use_regex", 1);
        return KVQ_OK;
    }
    if (!strcmp(ty, "Metaspace")) {
        pt->type = HF_P_METASPACE;
        kvq_status st = set_repl(L, o, "pre_tokenizer Metaspace", pt->repl, &pt->repl_len);
        if (st) return st;
        pt->scheme = metaspace_scheme(o);
        pt->split = jbool(o, "split", 1);
        return compile_re(L, pt->repl, (size_t)pt->repl_len, 1, "pre_tokenizer Metaspace", &pt->re);
    }
    if (!strcmp(ty, "Sequence")) {
        pt->type = HF_P_SEQ;
        json_t *a = json_object_get(o, "pretokenizers");
        if (!json_is_array(a)) return FAIL(L, KVQ_ERR_FORMAT, "pre_tokenizer Sequence without \"pretokenizers\"");
        pt->n_sub = (int)json_array_size(a);
        pt->sub = calloc(pt->n_sub + 1, sizeof *pt->sub);
        if (!pt->sub) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        for (int i = 0; i < pt->n_sub; i++) {
            kvq_status st = parse_pretok(L, json_array_get(a, i), &pt->sub[i]);
            if (st) return st;
        }
        return KVQ_OK;
    }
    return FAIL(L, KVQ_ERR_UNSUPPORTED, "pre_tokenizer type '%s' is not supported", ty);
}

static kvq_status parse_dec(ld *L, json_t *o, hf_dec *d) {
    const char *ty = jstr(o, "type");
    if (!ty) return FAIL(L, KVQ_ERR_FORMAT, "decoder without a \"type\"");
    if (!strcmp(ty, "ByteLevel")) d->type = HF_D_BYTELEVEL;
    else if (!strcmp(ty, "ByteFallback")) d->type = HF_D_BYTEFALLBACK;
    else if (!strcmp(ty, "Fuse")) d->type = HF_D_FUSE;
    else if (!strcmp(ty, "Metaspace")) {
        d->type = HF_D_METASPACE;
        d->scheme = metaspace_scheme(o);
        return set_repl(L, o, "decoder Metaspace", d->repl, &d->repl_len);
    } else if (!strcmp(ty, "Strip")) {
        d->type = HF_D_STRIP;
        const char *c = jstr(o, "content");
        if (!c) return FAIL(L, KVQ_ERR_FORMAT, "decoder Strip without \"content\"");
        d->clen = strlen(c);
        d->content = dupn(c, d->clen);
        json_t *a = json_object_get(o, "start"), *b = json_object_get(o, "stop");
        d->start = json_is_integer(a) ? (int)json_integer_value(a) : 0;
        d->stop = json_is_integer(b) ? (int)json_integer_value(b) : 0;
        if (!d->content) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
    } else if (!strcmp(ty, "Replace")) {
        d->type = HF_D_REPLACE;
        json_t *p = json_object_get(o, "content");
        if (!json_is_string(p)) return FAIL(L, KVQ_ERR_FORMAT, "decoder Replace without \"content\"");
        d->clen = json_string_length(p);
        d->content = dupn(json_string_value(p), d->clen);
        if (!d->content) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        return compile_pattern(L, json_object_get(o, "pattern"), "decoder Replace", &d->re);
    } else if (!strcmp(ty, "Sequence")) {
        d->type = HF_D_SEQ;
        json_t *a = json_object_get(o, "decoders");
        if (!json_is_array(a)) return FAIL(L, KVQ_ERR_FORMAT, "decoder Sequence without \"decoders\"");
        d->n_sub = (int)json_array_size(a);
        d->sub = calloc(d->n_sub + 1, sizeof *d->sub);
        if (!d->sub) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        for (int i = 0; i < d->n_sub; i++) {
            kvq_status st = parse_dec(L, json_array_get(a, i), &d->sub[i]);
            if (st) return st;
        }
    } else return FAIL(L, KVQ_ERR_UNSUPPORTED, "decoder type '%s' is not supported", ty);
    return KVQ_OK;
}

static kvq_status push_ids(ld *L, int32_t **v, int *n, const int32_t *ids, int k) {
    int32_t *p = realloc(*v, ((size_t)*n + k + 1) * sizeof *p);
    if (!p) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
    memcpy(p + *n, ids, (size_t)k * sizeof *p);
    *v = p;
    *n += k;
    return KVQ_OK;
}

// Collects the ids the post-processor puts before (pre) and after (post) a single sequence.
static kvq_status parse_post(ld *L, hf_tok *h, json_t *o) {
    const char *ty = jstr(o, "type");
    if (!ty) return FAIL(L, KVQ_ERR_FORMAT, "post_processor without a \"type\"");
    if (!strcmp(ty, "ByteLevel")) return KVQ_OK; // offsets only
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(o, "processors");
        if (!json_is_array(a)) return FAIL(L, KVQ_ERR_FORMAT, "post_processor Sequence without \"processors\"");
        for (size_t i = 0; i < json_array_size(a); i++) {
            kvq_status st = parse_post(L, h, json_array_get(a, i));
            if (st) return st;
        }
        return KVQ_OK;
    }
    if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        json_t *cls = json_object_get(o, "cls"), *sep = json_object_get(o, "sep");
        json_t *ci = json_array_get(cls, 1), *si = json_array_get(sep, 1);
        if (!json_is_integer(ci) || !json_is_integer(si))
            return FAIL(L, KVQ_ERR_FORMAT, "post_processor %s: \"cls\"/\"sep\" are not [token, id]", ty);
        int32_t c = (int32_t)json_integer_value(ci), s = (int32_t)json_integer_value(si);
        kvq_status st = push_ids(L, &h->pre_ids, &h->n_pre, &c, 1);
        return st ? st : push_ids(L, &h->post_ids, &h->n_post, &s, 1);
    }
    if (strcmp(ty, "TemplateProcessing"))
        return FAIL(L, KVQ_ERR_UNSUPPORTED, "post_processor type '%s' is not supported", ty);
    json_t *single = json_object_get(o, "single"), *sp = json_object_get(o, "special_tokens");
    if (!json_is_array(single)) return FAIL(L, KVQ_ERR_FORMAT, "post_processor TemplateProcessing without \"single\"");
    int seen_seq = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *it = json_array_get(single, i);
        if (json_object_get(it, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        json_t *tok = json_object_get(it, "SpecialToken");
        const char *name = jstr(tok, "id");
        if (!name) return FAIL(L, KVQ_ERR_FORMAT, "post_processor TemplateProcessing: item %zu is neither Sequence nor SpecialToken", i);
        json_t *ids = json_object_get(json_object_get(sp, name), "ids");
        if (!json_is_array(ids))
            return FAIL(L, KVQ_ERR_FORMAT, "post_processor TemplateProcessing: special token '%s' has no \"ids\"", name);
        for (size_t k = 0; k < json_array_size(ids); k++) {
            json_t *v = json_array_get(ids, k);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= h->n_ids)
                return FAIL(L, KVQ_ERR_FORMAT, "post_processor TemplateProcessing: special token '%s' has a bad id", name);
            int32_t id = (int32_t)json_integer_value(v);
            kvq_status st = seen_seq ? push_ids(L, &h->post_ids, &h->n_post, &id, 1)
                                     : push_ids(L, &h->pre_ids, &h->n_pre, &id, 1);
            if (st) return st;
        }
    }
    return KVQ_OK;
}

// ---------------------------------------------------------------- model, added tokens

static kvq_status parse_merges(ld *L, hf_tok *h, json_t *merges) {
    size_t n = json_array_size(merges), cap = 16;
    while (cap < 2 * n + 16) cap *= 2;
    h->mkey = malloc(cap * sizeof *h->mkey);
    h->mrank = malloc(cap * sizeof *h->mrank);
    h->mnew = malloc(cap * sizeof *h->mnew);
    if (!h->mkey || !h->mrank || !h->mnew) return FAIL(L, KVQ_ERR_NOMEM, "out of memory for %zu merges", n);
    memset(h->mkey, 0xFF, cap * sizeof *h->mkey);
    h->mmask = cap - 1;
    kvq_tok_buf cat = {0};
    for (size_t r = 0; r < n; r++) {
        json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(m)) { // "a b"
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return kvq_tok_buf_free(&cat), FAIL(L, KVQ_ERR_FORMAT, "model.merges[%zu] '%s' is not two tokens separated by one space", r, a);
            al = (size_t)(sp - a);
            b = sp + 1;
            bl = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            al = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            bl = json_string_length(json_array_get(m, 1));
        } else return kvq_tok_buf_free(&cat), FAIL(L, KVQ_ERR_FORMAT, "model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", r);
        int32_t ia = kvq_tok_strtab_find(&h->vocab, a, al), ib = kvq_tok_strtab_find(&h->vocab, b, bl);
        if (ia < 0 || ib < 0)
            return kvq_tok_buf_free(&cat), FAIL(L, KVQ_ERR_FORMAT, "model.merges[%zu]: token '%.*s' is not in the vocab", r,
                        (int)(ia < 0 ? al : bl), ia < 0 ? a : b);
        size_t skip = h->prefix_len && bl >= h->prefix_len && !memcmp(b, h->prefix, h->prefix_len) ? h->prefix_len : 0;
        cat.n = 0;
        if (kvq_tok_buf_put(&cat, a, al) || kvq_tok_buf_put(&cat, b + skip, bl - skip))
            return kvq_tok_buf_free(&cat), FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        int32_t nid = kvq_tok_strtab_find(&h->vocab, cat.b, cat.n);
        if (nid < 0)
            return kvq_tok_buf_free(&cat), FAIL(L, KVQ_ERR_FORMAT, "model.merges[%zu]: merged token '%.*s' is not in the vocab", r,
                        (int)cat.n, cat.b);
        uint64_t key = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
        size_t i = (size_t)XXH3_64bits(&key, sizeof key) & h->mmask;
        while (h->mkey[i] != UINT64_MAX && h->mkey[i] != key) i = (i + 1) & h->mmask;
        h->mkey[i] = key; // a repeated pair keeps its last rank, as HF's HashMap::insert
        h->mrank[i] = (uint32_t)r;
        h->mnew[i] = nid;
    }
    kvq_tok_buf_free(&cat);
    return KVQ_OK;
}

static kvq_status index_added(ld *L, hf_tok *h) {
    for (int w = 0; w < 2; w++) {
        hf_added_index *ix = &h->aix[w];
        for (int b = 0; b < 256; b++) ix->first[b] = -1;
        ix->order = malloc(((size_t)h->n_added + 1) * sizeof(int));
        ix->next = malloc(((size_t)h->n_added + 1) * sizeof(int));
        if (!ix->order || !ix->next) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        for (int i = 0; i < h->n_added; i++)
            if (h->added[i].normalized == w && (w ? h->added[i].nlen : h->added[i].len))
                ix->order[ix->n++] = i;
        // sort by the matched string's length, longest first (leftmost-longest matching)
        for (int i = 0; i < ix->n; i++) { // tiny n: insertion sort
            for (int j = i; j > 0; j--) {
                const hf_added *x = &h->added[ix->order[j]], *y = &h->added[ix->order[j - 1]];
                size_t lx = w ? x->nlen : x->len, ly = w ? y->nlen : y->len;
                if (lx <= ly) break;
                int t = ix->order[j];
                ix->order[j] = ix->order[j - 1];
                ix->order[j - 1] = t;
            }
        }
        for (int k = ix->n - 1; k >= 0; k--) {
            const hf_added *a = &h->added[ix->order[k]];
            unsigned char b0 = (unsigned char)(w ? a->ncontent : a->content)[0];
            ix->next[k] = ix->first[b0];
            ix->first[b0] = k;
        }
    }
    return KVQ_OK;
}

static kvq_status parse_added(ld *L, hf_tok *h, json_t *arr) {
    h->n_added = (int)json_array_size(arr);
    h->added = calloc((size_t)h->n_added + 1, sizeof *h->added);
    if (!h->added) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
    for (int i = 0; i < h->n_added; i++) {
        json_t *o = json_array_get(arr, i), *id = json_object_get(o, "id"), *c = json_object_get(o, "content");
        hf_added *a = &h->added[i];
        if (!json_is_integer(id) || !json_is_string(c) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= h->n_ids)
            return FAIL(L, KVQ_ERR_FORMAT, "added_tokens[%d]: needs an integer \"id\" in range and a \"content\" string", i);
        a->id = (int32_t)json_integer_value(id);
        a->len = json_string_length(c);
        a->content = dupn(json_string_value(c), a->len);
        a->special = jbool(o, "special", 0);
        a->lstrip = jbool(o, "lstrip", 0);
        a->rstrip = jbool(o, "rstrip", 0);
        a->single_word = jbool(o, "single_word", 0);
        a->normalized = jbool(o, "normalized", !a->special);
        if (!a->content) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        h->added_of[a->id] = i;
        if (a->normalized) { // matched against normalized text: normalize the token too
            kvq_tok_buf b = {0};
            if (kvq_tok_buf_put(&b, a->content, a->len) || kvq_tok_hf_normalize(h, &b)) {
                kvq_tok_buf_free(&b);
                return FAIL(L, KVQ_ERR_FORMAT, "added_tokens[%d]: normalizing '%s' failed", i, a->content);
            }
            a->nlen = b.n;
            a->ncontent = dupn(b.b ? b.b : "", b.n);
            kvq_tok_buf_free(&b);
            if (!a->ncontent) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        }
    }
    return index_added(L, h);
}

// bos/eos from tokenizer_config.json beside the file, when the template does not name them.
static int32_t config_token(const hf_tok *h, json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    const char *s = json_is_string(v) ? json_string_value(v) : jstr(v, "content");
    if (!s) return -1;
    size_t n = strlen(s);
    for (int i = 0; i < h->n_added; i++)
        if (h->added[i].len == n && !memcmp(h->added[i].content, s, n)) return h->added[i].id;
    return kvq_tok_strtab_find(&h->vocab, s, n);
}

static void bytelevel_tables(hf_tok *h) {
    int n = 0;
    for (int i = 0; i < 324; i++) h->bl_dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        int cp = keep ? b : 256 + n++;
        kvq_tok_buf t = {0};
        kvq_tok_utf8_put(&t, cp);
        memset(h->bl_enc[b], 0, 3);
        if (t.b) memcpy(h->bl_enc[b], t.b, t.n);
        kvq_tok_buf_free(&t);
        h->bl_dec[cp] = (int16_t)b;
    }
}

// ---------------------------------------------------------------- open / free

static void norm_free(hf_norm *n) {
    if (!n) return;
    for (int i = 0; i < n->n_sub; i++) norm_free(&n->sub[i]);
    free(n->sub);
    free(n->content);
    if (n->re) pcre2_code_free(n->re);
}
static void pretok_free(hf_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_sub; i++) pretok_free(&p->sub[i]);
    free(p->sub);
    if (p->re) pcre2_code_free(p->re);
}
static void dec_free(hf_dec *d) {
    if (!d) return;
    for (int i = 0; i < d->n_sub; i++) dec_free(&d->sub[i]);
    free(d->sub);
    free(d->content);
    if (d->re) pcre2_code_free(d->re);
}

void kvq_tok_hf_free(hf_tok *h) {
    if (!h) return;
    kvq_tok_strtab_free(&h->vocab);
    free(h->mkey);
    free(h->mrank);
    free(h->mnew);
    free(h->prefix);
    free(h->suffix);
    norm_free(h->norm);
    free(h->norm);
    pretok_free(h->pre);
    free(h->pre);
    dec_free(h->dec);
    free(h->dec);
    for (int i = 0; i < h->n_added; i++) {
        free(h->added[i].content);
        free(h->added[i].ncontent);
    }
    free(h->added);
    free(h->added_of);
    for (int w = 0; w < 2; w++) {
        free(h->aix[w].next);
        free(h->aix[w].order);
    }
    free(h->pre_ids);
    free(h->post_ids);
    if (h->bl_re) pcre2_code_free(h->bl_re);
    if (h->word_re) pcre2_code_free(h->word_re);
    free(h);
}

static kvq_status load(ld *L, hf_tok *h, json_t *root) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return FAIL(L, KVQ_ERR_FORMAT, "no \"model\" object");
    const char *ty = jstr(model, "type");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (ty && strcmp(ty, "BPE"))
        return FAIL(L, KVQ_ERR_UNSUPPORTED, "model type '%s' is not supported (only BPE)", ty);
    if (!json_is_object(vocab) || !json_is_array(merges))
        return FAIL(L, KVQ_ERR_FORMAT, "model needs a \"vocab\" object and a \"merges\" array");
    json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return FAIL(L, KVQ_ERR_UNSUPPORTED, "model.dropout %g is not supported (training only)", json_number_value(dropout));
    // ids: vocab and added tokens share one id space
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= INT32_MAX - 1)
            return FAIL(L, KVQ_ERR_FORMAT, "model.vocab['%s']: id is not an integer in [0, 2^31)", key);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    json_t *added = json_object_get(root, "added_tokens");
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *id = json_object_get(json_array_get(added, i), "id");
        if (json_is_integer(id) && json_integer_value(id) > max_id && json_integer_value(id) < INT32_MAX - 1)
            max_id = json_integer_value(id);
    }
    // The id space is allocated whole (a table entry per id): it may have holes, but not be far
    // larger than the tokens the file defines (one id of 2^31 - 3 would allocate gigabytes).
    const int64_t n_def = (int64_t)json_object_size(vocab) + (int64_t)json_array_size(added);
    if (max_id >= n_def + (1 << 20))
        return FAIL(L, KVQ_ERR_FORMAT, "id %lld is more than 2^20 past the %lld tokens the file defines", (long long)max_id,
                    (long long)n_def);
    h->n_ids = (int32_t)(max_id + 1);
    if (kvq_tok_strtab_init(&h->vocab, h->n_ids)) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
    size_t klen;
    json_object_keylen_foreach(vocab, key, klen, val) {
        int32_t id = (int32_t)json_integer_value(val);
        if (h->vocab.off[id] != UINT64_MAX)
            return FAIL(L, KVQ_ERR_FORMAT, "model.vocab: id %d is given to two tokens", id);
        if (kvq_tok_strtab_set(&h->vocab, id, key, klen)) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
    }
    if (kvq_tok_strtab_index(&h->vocab)) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
    h->byte_fallback = jbool(model, "byte_fallback", 0);
    h->ignore_merges = jbool(model, "ignore_merges", 0);
    h->fuse_unk = jbool(model, "fuse_unk", 0);
    h->unk = -1;
    const char *unk = jstr(model, "unk_token");
    if (unk && (h->unk = kvq_tok_strtab_find(&h->vocab, unk, strlen(unk))) < 0)
        return FAIL(L, KVQ_ERR_FORMAT, "model.unk_token '%s' is not in the vocab", unk);
    const char *pre = jstr(model, "continuing_subword_prefix"), *suf = jstr(model, "end_of_word_suffix");
    if (pre && *pre) h->prefix_len = strlen(pre), h->prefix = dupn(pre, h->prefix_len);
    if (suf && *suf) h->suffix_len = strlen(suf), h->suffix = dupn(suf, h->suffix_len);
    kvq_status st = parse_merges(L, h, merges);
    if (st) return st;

    json_t *o;
    if (json_is_object(o = json_object_get(root, "normalizer"))) {
        if (!(h->norm = calloc(1, sizeof *h->norm))) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        if ((st = parse_norm(L, o, h->norm))) return st;
    }
    if (json_is_object(o = json_object_get(root, "pre_tokenizer"))) {
        if (!(h->pre = calloc(1, sizeof *h->pre))) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        if ((st = parse_pretok(L, o, h->pre))) return st;
    }
    if (json_is_object(o = json_object_get(root, "decoder"))) {
        if (!(h->dec = calloc(1, sizeof *h->dec))) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
        if ((st = parse_dec(L, o, h->dec))) return st;
    }
    h->added_of = malloc(((size_t)h->n_ids + 1) * sizeof *h->added_of);
    if (!h->added_of) return FAIL(L, KVQ_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < h->n_ids; i++) h->added_of[i] = -1;
    if (json_is_array(added) && (st = parse_added(L, h, added))) return st;
    if (!json_is_array(added) && (st = index_added(L, h))) return st;
    if (json_is_object(o = json_object_get(root, "post_processor")) && (st = parse_post(L, h, o))) return st;
    static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    if ((st = compile_re(L, gpt2, sizeof gpt2 - 1, 0, "ByteLevel", &h->bl_re))) return st;
    if ((st = compile_re(L, WORD_CLASS, sizeof WORD_CLASS - 1, 0, "word class", &h->word_re))) return st;
    bytelevel_tables(h);
    return KVQ_OK;
}

kvq_status kvq_tok_hf_open(const char *path, const char *data, size_t n, const char *config, size_t config_n,
                           kvq_tokenizer *t, kvq_err *err) {
    ld L = {path, err};
    json_error_t je;
    json_t *root = json_loadb(data, n, JSON_ALLOW_NUL, &je);
    if (!root)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: not valid JSON: line %d column %d: %s", path, je.line,
                           je.column, je.text);
    hf_tok *h = calloc(1, sizeof *h);
    if (!h) {
        json_decref(root);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    }
    t->ops = &kvq_tok_hf_ops;
    t->impl = h;
    kvq_status st = json_is_object(root) ? load(&L, h, root)
                                         : kvq_err_set(err, KVQ_ERR_FORMAT, "%s: top level is not a JSON object", path);
    json_decref(root);
    if (st) return st;
    t->n_vocab = h->n_ids;
    t->bos = h->n_pre ? h->pre_ids[0] : -1;
    t->eos = h->n_post ? h->post_ids[h->n_post - 1] : -1;
    if ((t->bos < 0 || t->eos < 0) && config) { // tokenizer_config.json names them for HF transformers
        json_t *cfg = json_loadb(config, config_n, JSON_DECODE_INT_AS_REAL, &je);
        if (!cfg)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: its tokenizer_config.json is not valid JSON: line %d column %d: %s",
                               path, je.line, je.column, je.text);
        if (t->bos < 0) t->bos = config_token(h, cfg, "bos_token");
        if (t->eos < 0) t->eos = config_token(h, cfg, "eos_token");
        json_decref(cfg);
    }
    return KVQ_OK;
}

// The HF back end's operations (here, beside open and free, so the encoder and decoder files
// do not depend on the loader).
static void hf_close(void *impl) { kvq_tok_hf_free(impl); }

const kvq_tok_ops kvq_tok_hf_ops = {kvq_tok_hf_encode, kvq_tok_hf_decode, kvq_tok_hf_piece, hf_close};
