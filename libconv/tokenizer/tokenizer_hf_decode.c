// HF tokenizer.json decoding: the decoder chain (ByteLevel, Metaspace, ByteFallback, Fuse,
// Strip, Replace, Sequence) over the ids' token strings, for whole texts (as HF decode,
// lossy UTF-8) and for single streamed pieces (raw bytes, start-of-text rules by prev).
#include "libconv/tokenizer/tokenizer_hf.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

// Runs decoder d over the token strings in `in`, writing `out`. raw: piece mode (bytes kept
// as they are, for streaming); first: in's first token starts the text.
static int dec_apply(const hf_tok *h, const hf_dec *d, hf_ctx *c, hf_pieces *in, hf_pieces *out,
                     int raw, int first) {
    int rc = 0;
    switch (d->type) {
    case HF_D_SEQ: {
        hf_pieces x = *in, y = {0};
        int owned = 0;
        for (int i = 0; i < d->n_sub && !rc; i++) {
            rc = dec_apply(h, &d->sub[i], c, &x, &y, raw, first);
            if (owned) free(x.v);
            x = y;
            y = (hf_pieces){0};
            owned = 1;
        }
        for (size_t i = 0; i < x.n && !rc; i++) rc = kvq_tok_hf_pieces_push(out, x.v[i].off, x.v[i].len, -1, 0);
        if (owned) free(x.v);
        return rc;
    }
    case HF_D_BYTELEVEL: {
        c->scratch.n = 0;
        for (size_t i = 0; i < in->n && !rc; i++) {
            const char *s = c->arena.b + in->v[i].off;
            size_t n = in->v[i].len, start = c->scratch.n;
            for (size_t j = 0; j < n && !rc;) {
                size_t l;
                int32_t cp = kvq_tok_hf_cp_at(s + j, n - j, &l);
                if (cp < 0 || cp >= 324 || h->bl_dec[cp] < 0) { // unmappable: the raw token
                    c->scratch.n = start;
                    rc = kvq_tok_buf_put(&c->scratch, s, n);
                    break;
                }
                unsigned char byte = (unsigned char)h->bl_dec[cp];
                rc = kvq_tok_buf_put(&c->scratch, &byte, 1);
                j += l;
            }
        }
        if (rc) return rc;
        size_t off = c->arena.n;
        if (raw) rc = kvq_tok_buf_put(&c->arena, c->scratch.b, c->scratch.n);
        else rc = kvq_tok_utf8_lossy(&c->arena, c->scratch.b, c->scratch.n);
        return rc ? rc : kvq_tok_hf_pieces_push(out, off, c->arena.n - off, -1, 0);
    }
    case HF_D_BYTEFALLBACK: {
        c->scratch.n = 0;
        for (size_t i = 0; i <= in->n && !rc; i++) {
            const char *s = i < in->n ? c->arena.b + in->v[i].off : NULL;
            size_t n = i < in->n ? in->v[i].len : 0;
            int byte = -1;
            if (s && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') {
                char hx[3] = {s[3], s[4], 0}, *end;
                long v = strtol(hx, &end, 16);
                if (*end == 0 && isxdigit((unsigned char)hx[0]) && isxdigit((unsigned char)hx[1])) byte = (int)v;
            }
            if (byte >= 0) {
                unsigned char bb = (unsigned char)byte;
                rc = kvq_tok_buf_put(&c->scratch, &bb, 1);
                continue;
            }
            if (c->scratch.n) {
                size_t off = c->arena.n;
                if (raw || kvq_tok_utf8_check(c->scratch.b, c->scratch.n) == c->scratch.n) {
                    rc = kvq_tok_buf_put(&c->arena, c->scratch.b, c->scratch.n);
                    if (!rc) rc = kvq_tok_hf_pieces_push(out, off, c->scratch.n, -1, 0);
                } else {
                    for (size_t k = 0; k < c->scratch.n && !rc; k++) {
                        off = c->arena.n;
                        rc = kvq_tok_buf_put(&c->arena, "\xEF\xBF\xBD", 3);
                        if (!rc) rc = kvq_tok_hf_pieces_push(out, off, 3, -1, 0);
                    }
                }
                c->scratch.n = 0;
            }
            if (s && !rc) rc = kvq_tok_hf_pieces_push(out, in->v[i].off, n, -1, 0);
        }
        return rc;
    }
    case HF_D_FUSE: {
        c->scratch.n = 0;
        for (size_t i = 0; i < in->n && !rc; i++)
            rc = kvq_tok_buf_put(&c->scratch, c->arena.b + in->v[i].off, in->v[i].len);
        return rc ? rc : kvq_tok_hf_push_new(c, out, c->scratch.b, c->scratch.n, 0);
    }
    case HF_D_STRIP:
        for (size_t i = 0; i < in->n && !rc; i++) {
            const char *s = c->arena.b + in->v[i].off;
            size_t a = 0, b = in->v[i].len, cl = d->clen;
            int start = d->start, stop = d->stop;
            if (raw) { // streaming: only the text's start is stripped
                start = first && i == 0 ? start : 0;
                stop = 0;
            }
            for (int k = 0; k < start && cl && b - a >= cl && memcmp(s + a, d->content, cl) == 0; k++) a += cl;
            for (int k = 0; k < stop && cl && b - a >= cl && memcmp(s + b - cl, d->content, cl) == 0; k++) b -= cl;
            rc = kvq_tok_hf_pieces_push(out, in->v[i].off + a, b - a, -1, 0);
        }
        return rc;
    case HF_D_REPLACE:
        for (size_t i = 0; i < in->n && !rc; i++) {
            c->scratch2.n = 0;
            rc = kvq_tok_hf_replace_all(c, d->re, c->arena.b + in->v[i].off, in->v[i].len, d->content, d->clen,
                             &c->scratch2);
            if (!rc) rc = kvq_tok_hf_push_new(c, out, c->scratch2.b, c->scratch2.n, 0);
        }
        return rc;
    case HF_D_METASPACE:
        for (size_t i = 0; i < in->n && !rc; i++) {
            const char *s = c->arena.b + in->v[i].off;
            size_t n = in->v[i].len, rl = (size_t)d->repl_len;
            int drop = i == 0 && first && d->scheme != HF_PREPEND_NEVER;
            c->scratch.n = 0;
            for (size_t j = 0; j < n && !rc;) {
                if (rl && n - j >= rl && memcmp(s + j, d->repl, rl) == 0) {
                    if (!drop) rc = kvq_tok_buf_put(&c->scratch, " ", 1);
                    j += rl;
                } else rc = kvq_tok_buf_put(&c->scratch, s + j++, 1);
            }
            if (!rc) rc = kvq_tok_hf_push_new(c, out, c->scratch.b, c->scratch.n, 0);
        }
        return rc;
    }
    return -1;
}

static const char *hf_token_str(const hf_tok *h, int32_t id, size_t *n) {
    if (id < 0 || id >= h->n_ids) return NULL;
    if (h->added_of[id] >= 0) {
        const hf_added *a = &h->added[h->added_of[id]];
        if (a->normalized) { // HF keeps a normalized token's content as normalized
            *n = a->nlen;
            return a->ncontent;
        }
        *n = a->len;
        return a->content;
    }
    return kvq_tok_strtab_get(&h->vocab, id, n);
}

// Decodes ids into c->arena and returns the final text's span in out.
static int hf_decode_to(const kvq_tokenizer *t, hf_ctx *c, const int32_t *ids, size_t n_ids,
                        int skip_special, int raw, int first, kvq_tok_buf *out) {
    const hf_tok *h = t->impl;
    hf_pieces in = {0}, res = {0};
    int rc = 0;
    for (size_t i = 0; i < n_ids && !rc; i++) {
        size_t n;
        const char *s = hf_token_str(h, ids[i], &n);
        if (!s) continue; // as HF: ids without a token are dropped
        if (skip_special && h->added_of[ids[i]] >= 0 && h->added[h->added_of[ids[i]]].special) continue;
        rc = kvq_tok_hf_push_new(c, &in, s, n, 0);
    }
    if (!rc) {
        if (h->dec) rc = dec_apply(h, h->dec, c, &in, &res, raw, first);
        else { // no decoder: tokens joined by spaces
            for (size_t i = 0; i < in.n && !rc; i++)
                rc = kvq_tok_hf_pieces_push(&res, in.v[i].off, in.v[i].len, -1, 0);
        }
    }
    for (size_t i = 0; i < res.n && !rc; i++) {
        if (!h->dec && i > 0) rc = kvq_tok_buf_put(out, " ", 1);
        if (!rc) rc = kvq_tok_buf_put(out, c->arena.b + res.v[i].off, res.v[i].len);
    }
    free(in.v);
    free(res.v);
    return rc;
}

kvq_status kvq_tok_hf_decode(const kvq_tokenizer *t, const int32_t *ids, size_t n_ids,
                            int skip_special, char **text, kvq_err *err) {
    hf_ctx c;
    kvq_tok_buf raw = {0}, out = {0};
    int rc = kvq_tok_hf_ctx_init(&c, 16);
    if (!rc) rc = hf_decode_to(t, &c, ids, n_ids, skip_special, 0, 1, &raw);
    if (!rc) rc = kvq_tok_utf8_lossy(&out, raw.b, raw.n);
    if (!rc) rc = kvq_tok_buf_put(&out, "", 1);
    kvq_tok_hf_ctx_free(&c);
    kvq_tok_buf_free(&raw);
    if (rc) {
        kvq_tok_buf_free(&out);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "tokenizer: out of memory decoding %zu ids", n_ids);
    }
    *text = out.b;
    return KVQ_OK;
}

int kvq_tok_hf_piece(const kvq_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap) {
    const hf_tok *h = t->impl;
    size_t n;
    if (!hf_token_str(h, id, &n)) return -1;
    hf_ctx c;
    kvq_tok_buf out = {0};
    int first = prev < 0 || (t->bos >= 0 && prev == t->bos);
    int rc = kvq_tok_hf_ctx_init(&c, 16);
    if (!rc) rc = hf_decode_to(t, &c, &id, 1, 0, 1, first, &out);
    kvq_tok_hf_ctx_free(&c);
    if (rc) {
        kvq_tok_buf_free(&out);
        return -1;
    }
    size_t k = out.n < cap ? out.n : cap;
    if (k) memcpy(buf, out.b, k);
    kvq_tok_buf_free(&out);
    return (int)k;
}
