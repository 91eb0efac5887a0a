// HF tokenizer.json encoding, the pipeline HF `tokenizers` runs: added tokens split out
// first, then normalizer, pre-tokenizer, BPE model (merge ranks in a hashed pair map,
// heap merges, per-call word cache), post-processor template. Semantics follow tokenizers
// 0.2x (docs/TOKENIZER.md); loading is in tokenizer_hf_load.c, decoding in tokenizer_hf_decode.c.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "libconv/tokenizer/tokenizer_hf.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

// ---------------------------------------------------------------- small helpers

static int is_ws(int32_t c) { // Rust char::is_whitespace (Unicode White_Space)
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

int32_t kvq_tok_hf_cp_at(const char *s, size_t n, size_t *len) { // s is valid UTF-8
    utf8proc_int32_t cp = -1;
    utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);
    *len = l > 0 ? (size_t)l : 1;
    return cp;
}

static int32_t cp_before(const char *s, size_t end) { // last char of s[0..end)
    size_t i = end;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
    if (i > 0) i--;
    size_t l;
    return kvq_tok_hf_cp_at(s + i, end - i, &l);
}

int kvq_tok_hf_pieces_push(hf_pieces *p, size_t off, size_t len, int32_t id, int origin) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        hf_piece *v = realloc(p->v, cap * sizeof *v);
        if (!v) return -1;
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = (hf_piece){off, len, id, origin};
    return 0;
}

// Appends s to the arena (s must not point into it) and pushes it as a piece.
int kvq_tok_hf_push_new(hf_ctx *c, hf_pieces *out, const char *s, size_t n, int origin) {
    size_t off = c->arena.n;
    if (kvq_tok_buf_put(&c->arena, s, n)) return -1;
    return kvq_tok_hf_pieces_push(out, off, n, -1, origin);
}

// ---------------------------------------------------------------- regex matching

// All matches of re in s as spans covering s: (start, end, is_match). Empty matches are
// kept (they split like in HF's find_matches); the search then moves one character on.
static int find_spans(hf_ctx *c, const pcre2_code *re, const char *s, size_t n, int invert) {
    c->spans.n = 0;
    size_t prev = 0, at = 0;
    uint32_t opts = 0;
    while (at <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, at, opts | PCRE2_NO_UTF_CHECK, c->md, c->mc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return -2;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (prev != ms) {
            hf_span sp = {prev, ms, invert};
            if (kvq_tok_buf_put(&c->spans, &sp, sizeof sp)) return -1;
        }
        hf_span sp = {ms, me, !invert};
        if (kvq_tok_buf_put(&c->spans, &sp, sizeof sp)) return -1;
        prev = me;
        if (me == ms) {
            if (me >= n) break;
            size_t l;
            kvq_tok_hf_cp_at(s + me, n - me, &l);
            at = me + l;
        } else at = me;
    }
    if (prev != n) {
        hf_span sp = {prev, n, invert};
        if (kvq_tok_buf_put(&c->spans, &sp, sizeof sp)) return -1;
    }
    return 0;
}

// Splits piece p with the spans in c->spans by an HF SplitDelimiterBehavior.
static int split_by_spans(hf_ctx *c, const hf_piece *p, int behavior, hf_pieces *out) {
    hf_span *sp = (hf_span *)c->spans.b;
    size_t ns = c->spans.n / sizeof(hf_span);
    // merge spans in place according to the behaviour; result spans have m=0
    size_t k = 0;
    int prev_match = 0;
    switch (behavior) {
    case HF_REMOVED:
        for (size_t i = 0; i < ns; i++)
            if (!sp[i].m) sp[k++] = sp[i];
        break;
    case HF_ISOLATED: k = ns; break;
    case HF_MERGED_PREV:
        for (size_t i = 0; i < ns; i++) {
            if (sp[i].m && !prev_match && k > 0) sp[k - 1].e = sp[i].e;
            else sp[k++] = sp[i];
            prev_match = sp[i].m;
        }
        break;
    case HF_MERGED_NEXT: { // fold from the right
        size_t w = ns;     // write position from the end
        for (size_t i = ns; i-- > 0;) {
            hf_span cur = sp[i];
            if (cur.m && !prev_match && w < ns) sp[w].s = cur.s;
            else sp[--w] = cur;
            prev_match = cur.m;
        }
        memmove(sp, sp + w, (ns - w) * sizeof *sp);
        k = ns - w;
        break;
    }
    case HF_CONTIGUOUS:
        for (size_t i = 0; i < ns; i++) {
            if (sp[i].m == prev_match && k > 0) sp[k - 1].e = sp[i].e;
            else sp[k++] = sp[i];
            prev_match = sp[i].m;
        }
        break;
    }
    for (size_t i = 0; i < k; i++) {
        if (sp[i].e == sp[i].s) continue;
        if (kvq_tok_hf_pieces_push(out, p->off + sp[i].s, sp[i].e - sp[i].s, -1, p->origin && sp[i].s == 0))
            return -1;
    }
    return 0;
}

static int split_piece_re(hf_ctx *c, const hf_piece *p, const pcre2_code *re, int behavior,
                          int invert, hf_pieces *out) {
    int rc = find_spans(c, re, c->arena.b + p->off, p->len, invert);
    if (rc) return rc;
    return split_by_spans(c, p, behavior, out);
}

// Replaces every match of re in s by rep, appending the result to out.
int kvq_tok_hf_replace_all(hf_ctx *c, const pcre2_code *re, const char *s, size_t n, const char *rep,
                       size_t rn, kvq_tok_buf *out) {
    int rc = find_spans(c, re, s, n, 0);
    if (rc) return rc;
    hf_span *sp = (hf_span *)c->spans.b;
    size_t ns = c->spans.n / sizeof(hf_span);
    for (size_t i = 0; i < ns; i++) {
        if (sp[i].m) {
            if (kvq_tok_buf_put(out, rep, rn)) return -1;
        } else if (kvq_tok_buf_put(out, s + sp[i].s, sp[i].e - sp[i].s)) return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- normalizers

static int norm_apply(const hf_norm *nm, hf_ctx *c, kvq_tok_buf *s) {
    kvq_tok_buf o = {0};
    int rc = 0;
    switch (nm->type) {
    case HF_N_SEQ:
        for (int i = 0; i < nm->n_sub && !rc; i++) rc = norm_apply(&nm->sub[i], c, s);
        return rc;
    case HF_N_NFC: case HF_N_NFD: case HF_N_NFKC: case HF_N_NFKD: case HF_N_LOWER: {
        int opt = UTF8PROC_STABLE;
        if (nm->type == HF_N_NFC) opt |= UTF8PROC_COMPOSE;
        if (nm->type == HF_N_NFD) opt |= UTF8PROC_DECOMPOSE;
        if (nm->type == HF_N_NFKC) opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        if (nm->type == HF_N_NFKD) opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        if (nm->type == HF_N_LOWER) {
            for (size_t i = 0; i < s->n;) {
                size_t l;
                int32_t cp = kvq_tok_hf_cp_at(s->b + i, s->n - i, &l);
                // Rust's char::to_lowercase: full mapping; U+0130 is the one multi-char case
                if (cp == 0x130) rc |= kvq_tok_utf8_put(&o, 'i') | kvq_tok_utf8_put(&o, 0x307);
                else rc |= kvq_tok_utf8_put(&o, utf8proc_tolower(cp));
                i += l;
            }
            break;
        }
        if (s->n == 0) return 0;
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s->b, (utf8proc_ssize_t)s->n, &dst,
                                          (utf8proc_option_t)opt);
        if (r < 0) return -2;
        rc = kvq_tok_buf_put(&o, dst, (size_t)r);
        free(dst);
        break;
    }
    case HF_N_REPLACE: rc = kvq_tok_hf_replace_all(c, nm->re, s->b, s->n, nm->content, nm->clen, &o); break;
    case HF_N_PREPEND:
        if (s->n == 0) return 0;
        rc = kvq_tok_buf_put(&o, nm->content, nm->clen) || kvq_tok_buf_put(&o, s->b, s->n) ? -1 : 0;
        break;
    case HF_N_STRIP_ACCENTS: // drops non-spacing marks (Mn), as HF
        for (size_t i = 0; i < s->n && !rc;) {
            size_t l;
            int32_t cp = kvq_tok_hf_cp_at(s->b + i, s->n - i, &l);
            if (utf8proc_category(cp) != UTF8PROC_CATEGORY_MN) rc = kvq_tok_buf_put(&o, s->b + i, l);
            i += l;
        }
        break;
    case HF_N_STRIP: {
        size_t a = 0, b = s->n, l;
        if (nm->left)
            while (a < b && is_ws(kvq_tok_hf_cp_at(s->b + a, b - a, &l))) a += l;
        if (nm->right)
            while (b > a && is_ws(cp_before(s->b, b))) {
                b--;
                while (b > a && ((unsigned char)s->b[b] & 0xC0) == 0x80) b--;
            }
        rc = kvq_tok_buf_put(&o, s->b + a, b - a);
        break;
    }
    }
    if (rc) {
        kvq_tok_buf_free(&o);
        return rc;
    }
    kvq_tok_buf_free(s);
    *s = o;
    return 0;
}

// ---------------------------------------------------------------- added tokens

// Whether the character s[0..n) is a Rust-regex \w character (h->word_re).
static int is_word_at(const hf_tok *h, hf_ctx *c, const char *s, size_t n) {
    return pcre2_match(h->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, c->md, c->mc) >= 0;
}

// Splits piece p around the added tokens whose `normalized` flag equals `normalized`,
// as AddedVocabulary::split_with_indices (leftmost-longest, lstrip/rstrip/single_word).
static int split_added(const hf_tok *h, hf_ctx *c, const hf_piece *p, int normalized,
                       hf_pieces *out) {
    const hf_added_index *ix = &h->aix[normalized];
    if (ix->n == 0) return kvq_tok_hf_pieces_push(out, p->off, p->len, -1, p->origin);
    const char *s = c->arena.b + p->off;
    size_t n = p->len, start_off = 0;
    for (size_t i = 0; i < n;) {
        const hf_added *best = NULL;
        for (int k = ix->first[(unsigned char)s[i]]; k >= 0; k = ix->next[k]) {
            const hf_added *a = &h->added[ix->order[k]];
            size_t al = normalized ? a->nlen : a->len;
            const char *ac = normalized ? a->ncontent : a->content;
            if (al <= n - i && memcmp(s + i, ac, al) == 0) {
                best = a; // candidates are sorted longest first
                break;
            }
        }
        if (!best) {
            i++;
            continue;
        }
        size_t ms = i, me = i + (normalized ? best->nlen : best->len);
        if (best->single_word) {
            size_t b = ms;
            while (b > 0 && ((unsigned char)s[b - 1] & 0xC0) == 0x80) b--;
            if (b > 0) b--;
            int sw = (ms == 0 || !is_word_at(h, c, s + b, ms - b));
            size_t l;
            kvq_tok_hf_cp_at(s + me, n - me, &l);
            int ew = (me == n || !is_word_at(h, c, s + me, l));
            if (!sw || !ew) {
                i++;
                continue;
            }
        }
        if (ms < start_off) { // inside whitespace swallowed by a previous rstrip
            i++;
            continue;
        }
        if (best->lstrip) {
            size_t ns = ms;
            while (ns > start_off && is_ws(cp_before(s, ns))) {
                ns--;
                while (ns > 0 && ((unsigned char)s[ns] & 0xC0) == 0x80) ns--;
            }
            ms = ns;
        }
        if (best->rstrip) {
            size_t l;
            while (me < n && is_ws(kvq_tok_hf_cp_at(s + me, n - me, &l))) me += l;
        }
        if (start_off < ms &&
            kvq_tok_hf_pieces_push(out, p->off + start_off, ms - start_off, -1, p->origin && start_off == 0))
            return -1;
        if (kvq_tok_hf_pieces_push(out, p->off + ms, me - ms, best->id, 0)) return -1;
        start_off = me;
        i = me > i ? me : i + 1;
    }
    if (start_off < n &&
        kvq_tok_hf_pieces_push(out, p->off + start_off, n - start_off, -1, p->origin && start_off == 0))
        return -1;
    return 0;
}

// ---------------------------------------------------------------- pre-tokenizers

static int bytelevel_map(const hf_tok *h, hf_ctx *c, const hf_piece *p, hf_pieces *out) {
    c->scratch.n = 0;
    if (kvq_tok_buf_reserve(&c->scratch, 2 * p->len)) return -1;
    const unsigned char *s = (const unsigned char *)c->arena.b + p->off;
    char *d = c->scratch.b;
    size_t k = 0;
    for (size_t i = 0; i < p->len; i++) {
        const unsigned char *e = h->bl_enc[s[i]];
        d[k++] = (char)e[0];
        if (e[1]) d[k++] = (char)e[1];
    }
    return kvq_tok_hf_push_new(c, out, d, k, p->origin);
}

static int pretok_apply(const hf_tok *h, const hf_pretok *pt, hf_ctx *c, hf_pieces *in,
                        hf_pieces *out) {
    if (pt->type == HF_P_SEQ) {
        hf_pieces a = *in, b = {0};
        int owned = 0, rc = 0;
        for (int i = 0; i < pt->n_sub && !rc; i++) {
            b.n = 0;
            rc = pretok_apply(h, &pt->sub[i], c, &a, &b);
            if (owned) free(a.v);
            a = b;
            b = (hf_pieces){0};
            owned = 1;
        }
        if (!rc)
            for (size_t i = 0; i < a.n && !rc; i++)
                rc = kvq_tok_hf_pieces_push(out, a.v[i].off, a.v[i].len, a.v[i].id, a.v[i].origin);
        if (owned) free(a.v);
        return rc;
    }
    for (size_t i = 0; i < in->n; i++) {
        hf_piece p = in->v[i];
        int rc = 0;
        if (p.id >= 0) {
            rc = kvq_tok_hf_pieces_push(out, p.off, p.len, p.id, p.origin);
        } else if (pt->type == HF_P_SPLIT) {
            rc = split_piece_re(c, &p, pt->re, pt->behavior, pt->invert, out);
        } else if (pt->type == HF_P_BYTELEVEL) {
            if (pt->add_prefix_space && (p.len == 0 || c->arena.b[p.off] != ' ')) {
                size_t off = c->arena.n;
                if (kvq_tok_buf_put(&c->arena, " ", 1) || kvq_tok_buf_reserve(&c->arena, p.len)) return -1;
                memcpy(c->arena.b + c->arena.n, c->arena.b + p.off, p.len);
                c->arena.n += p.len;
                p.off = off;
                p.len += 1;
            }
            if (pt->use_regex) {
                hf_pieces tmp = {0};
                rc = split_piece_re(c, &p, h->bl_re, HF_ISOLATED, 0, &tmp);
                for (size_t j = 0; j < tmp.n && !rc; j++) rc = bytelevel_map(h, c, &tmp.v[j], out);
                free(tmp.v);
            } else if (p.len) {
                rc = bytelevel_map(h, c, &p, out);
            }
        } else if (pt->type == HF_P_METASPACE) {
            c->scratch.n = 0;
            const char *s = c->arena.b + p.off;
            int starts = (p.len && s[0] == ' ') ||
                         (p.len >= (size_t)pt->repl_len && memcmp(s, pt->repl, pt->repl_len) == 0);
            if (!starts && (pt->scheme == HF_PREPEND_ALWAYS ||
                            (pt->scheme == HF_PREPEND_FIRST && p.origin)))
                rc |= kvq_tok_buf_put(&c->scratch, pt->repl, pt->repl_len);
            for (size_t j = 0; j < p.len && !rc; j++) {
                if (s[j] == ' ') rc |= kvq_tok_buf_put(&c->scratch, pt->repl, pt->repl_len);
                else rc |= kvq_tok_buf_put(&c->scratch, s + j, 1);
            }
            if (rc) return -1;
            size_t off = c->arena.n;
            if (kvq_tok_buf_put(&c->arena, c->scratch.b, c->scratch.n)) return -1;
            hf_piece q = {off, c->scratch.n, -1, p.origin};
            if (pt->split) {
                rc = split_piece_re(c, &q, pt->re, HF_MERGED_NEXT, 0, out);
            } else if (q.len) {
                rc = kvq_tok_hf_pieces_push(out, q.off, q.len, -1, q.origin);
            }
        }
        if (rc) return rc;
    }
    return 0;
}

// ---------------------------------------------------------------- BPE model

static int merge_find(const hf_tok *h, int32_t a, int32_t b, uint32_t *rank, int32_t *nid) {
    if (!h->mkey) return 0;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = (size_t)XXH3_64bits(&key, sizeof key) & h->mmask;
    for (;; i = (i + 1) & h->mmask) {
        if (h->mkey[i] == UINT64_MAX) return 0;
        if (h->mkey[i] == key) {
            *rank = h->mrank[i];
            *nid = h->mnew[i];
            return 1;
        }
    }
}

typedef struct {
    uint32_t rank;
    int32_t pos, nid;
} hf_merge;

static int merge_less(const hf_merge *x, const hf_merge *y) {
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static int heap_push(kvq_tok_buf *hb, hf_merge m) {
    if (kvq_tok_buf_put(hb, &m, sizeof m)) return -1;
    hf_merge *v = (hf_merge *)hb->b;
    size_t i = hb->n / sizeof m - 1;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(&v[i], &v[p])) break;
        hf_merge t = v[i];
        v[i] = v[p];
        v[p] = t;
        i = p;
    }
    return 0;
}

static hf_merge heap_pop(kvq_tok_buf *hb) {
    hf_merge *v = (hf_merge *)hb->b;
    size_t n = hb->n / sizeof *v;
    hf_merge top = v[0];
    v[0] = v[n - 1];
    n--;
    hb->n = n * sizeof *v;
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && merge_less(&v[l], &v[m])) m = l;
        if (r < n && merge_less(&v[r], &v[m])) m = r;
        if (m == i) break;
        hf_merge t = v[i];
        v[i] = v[m];
        v[m] = t;
        i = m;
    }
    return top;
}

// BPE of one pre-tokenized word, appending ids to c->ids (as HF's BPE::merge_word + merge_all).
static int bpe_word_uncached(const hf_tok *h, hf_ctx *c, const char *w, size_t n) {
    c->sym.n = 0;
    int last_unk = 0;
    char tmp[64];
    for (size_t i = 0; i < n;) {
        size_t l;
        kvq_tok_hf_cp_at(w + i, n - i, &l);
        const char *q = w + i;
        size_t ql = l;
        int first = i == 0, last = i + l >= n;
        if ((h->prefix_len && !first) || (h->suffix_len && last)) {
            c->scratch.n = 0;
            if ((h->prefix_len && !first && kvq_tok_buf_put(&c->scratch, h->prefix, h->prefix_len)) ||
                kvq_tok_buf_put(&c->scratch, q, l) ||
                (h->suffix_len && last && kvq_tok_buf_put(&c->scratch, h->suffix, h->suffix_len)))
                return -1;
            q = c->scratch.b;
            ql = c->scratch.n;
        }
        int32_t id = kvq_tok_strtab_find(&h->vocab, q, ql);
        i += l;
        if (id >= 0) {
            if (kvq_tok_buf_put(&c->sym, &id, sizeof id)) return -1;
            last_unk = 0;
            continue;
        }
        if (h->byte_fallback) {
            int32_t bid[4];
            int ok = 1;
            for (size_t j = 0; j < l && ok; j++) {
                snprintf(tmp, sizeof tmp, "<0x%02X>", (unsigned char)w[i - l + j]);
                bid[j] = kvq_tok_strtab_find(&h->vocab, tmp, 6);
                ok = bid[j] >= 0;
            }
            if (ok) {
                if (kvq_tok_buf_put(&c->sym, bid, l * sizeof(int32_t))) return -1;
                last_unk = 0;
                continue;
            }
        }
        if (h->unk >= 0) {
            if (!(h->fuse_unk && last_unk) && kvq_tok_buf_put(&c->sym, &h->unk, sizeof h->unk)) return -1;
            last_unk = 1;
        }
    }
    int32_t *id = (int32_t *)c->sym.b;
    int32_t ns = (int32_t)(c->sym.n / sizeof *id);
    if (ns == 0) return 0;
    if (kvq_tok_buf_reserve(&c->links, 2 * (size_t)ns * sizeof(int32_t))) return -1;
    int32_t *prev = (int32_t *)c->links.b, *next = prev + ns;
    for (int32_t i = 0; i < ns; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < ns ? i + 1 : -1;
    }
    c->heap.n = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        hf_merge m = {0, i, 0};
        if (merge_find(h, id[i], id[i + 1], &m.rank, &m.nid) && heap_push(&c->heap, m)) return -1;
    }
    // alive: prev/next consistent; a merged-away symbol gets id -1
    while (c->heap.n) {
        hf_merge top = heap_pop(&c->heap);
        int32_t p = top.pos;
        if (id[p] < 0 || next[p] < 0) continue;
        int32_t r = next[p];
        uint32_t rk;
        int32_t nid;
        if (!merge_find(h, id[p], id[r], &rk, &nid) || nid != top.nid) continue;
        id[p] = nid;
        id[r] = -1;
        next[p] = next[r];
        if (next[r] >= 0) prev[next[r]] = p;
        if (prev[p] >= 0) {
            hf_merge m = {0, prev[p], 0};
            if (merge_find(h, id[prev[p]], id[p], &m.rank, &m.nid) && heap_push(&c->heap, m))
                return -1;
        }
        if (next[p] >= 0) {
            hf_merge m = {0, p, 0};
            if (merge_find(h, id[p], id[next[p]], &m.rank, &m.nid) && heap_push(&c->heap, m))
                return -1;
        }
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if (kvq_tok_buf_put(&c->ids, &id[i], sizeof id[i])) return -1;
    return 0;
}

// Word cache (one per encode call): open addressing on the word bytes, values are spans of
// c->cache_ids. Keys point into the arena, which lives as long as the call.
static int bpe_word(const hf_tok *h, hf_ctx *c, size_t woff, size_t n) {
    const char *w = c->arena.b + woff;
    if (h->ignore_merges) {
        int32_t id = kvq_tok_strtab_find(&h->vocab, w, n);
        if (id >= 0) return kvq_tok_buf_put(&c->ids, &id, sizeof id);
    }
    if (n > HF_CACHE_MAX_WORD) return bpe_word_uncached(h, c, w, n);
    uint64_t hv = XXH3_64bits(w, n);
    size_t i = (size_t)hv & c->cmask;
    for (;; i = (i + 1) & c->cmask) {
        hf_cache_slot *s = &c->cache[i];
        if (s->len == UINT32_MAX) break;
        if (s->hash == hv && s->len == n && memcmp(c->arena.b + s->off, w, n) == 0)
            return kvq_tok_buf_put(&c->ids, c->cache_ids.b + s->ids_off, s->n_ids * sizeof(int32_t));
    }
    size_t before = c->ids.n;
    if (bpe_word_uncached(h, c, w, n)) return -1;
    if (2 * (c->cache_used + 1) > c->cmask) { // grow to keep the load under 1/2
        if (c->cmask >= ((size_t)1 << 24)) return 0; // large enough: stop caching new words
        size_t cap = 2 * (c->cmask + 1);
        hf_cache_slot *nc = malloc(cap * sizeof *nc);
        if (!nc) return -1;
        for (size_t k = 0; k < cap; k++) nc[k].len = UINT32_MAX;
        for (size_t k = 0; k <= c->cmask; k++) {
            if (c->cache[k].len == UINT32_MAX) continue;
            size_t j = (size_t)c->cache[k].hash & (cap - 1);
            while (nc[j].len != UINT32_MAX) j = (j + 1) & (cap - 1);
            nc[j] = c->cache[k];
        }
        free(c->cache);
        c->cache = nc;
        c->cmask = cap - 1;
        for (i = (size_t)hv & c->cmask; c->cache[i].len != UINT32_MAX; i = (i + 1) & c->cmask) {}
    }
    hf_cache_slot *s = &c->cache[i];
    s->hash = hv;
    s->off = woff;
    s->len = (uint32_t)n;
    s->ids_off = c->cache_ids.n;
    s->n_ids = (uint32_t)((c->ids.n - before) / sizeof(int32_t));
    c->cache_used++;
    return kvq_tok_buf_put(&c->cache_ids, c->ids.b + before, c->ids.n - before);
}

// ---------------------------------------------------------------- per-call scratch, encode

void kvq_tok_hf_ctx_free(hf_ctx *c) {
    kvq_tok_buf_free(&c->arena);
    kvq_tok_buf_free(&c->scratch);
    kvq_tok_buf_free(&c->scratch2);
    kvq_tok_buf_free(&c->spans);
    kvq_tok_buf_free(&c->sym);
    kvq_tok_buf_free(&c->links);
    kvq_tok_buf_free(&c->heap);
    kvq_tok_buf_free(&c->ids);
    kvq_tok_buf_free(&c->cache_ids);
    free(c->cache);
    if (c->md) pcre2_match_data_free(c->md);
    if (c->mc) pcre2_match_context_free(c->mc);
    if (c->js) pcre2_jit_stack_free(c->js);
}

int kvq_tok_hf_ctx_init(hf_ctx *c, size_t cache_slots) {
    memset(c, 0, sizeof *c);
    c->md = pcre2_match_data_create(1, NULL);
    c->mc = pcre2_match_context_create(NULL);
    c->js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!c->md || !c->mc || !c->js) return -1;
    pcre2_jit_stack_assign(c->mc, NULL, c->js);
    size_t cap = 16;
    while (cap < cache_slots) cap *= 2;
    c->cache = malloc(cap * sizeof *c->cache);
    if (!c->cache) return -1;
    for (size_t i = 0; i < cap; i++) c->cache[i].len = UINT32_MAX;
    c->cmask = cap - 1;
    // The arena is never NULL: pieces are (offset, length) into it, and arena.b + 0 on a NULL
    // arena (decoding ids with no text, encoding "") is undefined behaviour (fuzz_tokenizer).
    if (kvq_tok_buf_reserve(&c->arena, 1)) return -1;
    return 0;
}

kvq_status kvq_tok_hf_encode(const kvq_tokenizer *t, const char *text, size_t len, int add_special,
                            int32_t **ids, size_t *n_ids, kvq_err *err) {
    const hf_tok *h = t->impl;
    hf_ctx c;
    hf_pieces a = {0}, b = {0};
    int rc = kvq_tok_hf_ctx_init(&c, 1024); // the word cache grows as needed
    if (!rc) rc = kvq_tok_buf_put(&c.arena, text, len);
    // 1. added tokens that are matched on the raw text
    if (!rc) {
        hf_piece whole = {0, len, -1, 1};
        rc = split_added(h, &c, &whole, 0, &a);
    }
    // 2. normalizer on the remaining pieces, then added tokens matched on normalized text
    kvq_tok_buf nb = {0};
    for (size_t i = 0; i < a.n && !rc; i++) {
        hf_piece p = a.v[i];
        if (p.id >= 0 || !h->norm) {
            if (p.id < 0 && h->aix[1].n) rc = split_added(h, &c, &p, 1, &b);
            else rc = kvq_tok_hf_pieces_push(&b, p.off, p.len, p.id, p.origin);
            continue;
        }
        nb.n = 0;
        rc = kvq_tok_buf_put(&nb, c.arena.b + p.off, p.len);
        if (!rc) rc = norm_apply(h->norm, &c, &nb);
        if (rc) break;
        hf_piece q = {c.arena.n, nb.n, -1, p.origin};
        rc = kvq_tok_buf_put(&c.arena, nb.b, nb.n);
        if (!rc) rc = split_added(h, &c, &q, 1, &b);
    }
    kvq_tok_buf_free(&nb);
    // 3. pre-tokenizer
    a.n = 0;
    if (!rc) {
        if (h->pre) rc = pretok_apply(h, h->pre, &c, &b, &a);
        else {
            hf_pieces t2 = a;
            a = b;
            b = t2;
        }
    }
    // 4. model, with the post-processor template around it
    if (!rc && add_special) rc = kvq_tok_buf_put(&c.ids, h->pre_ids, h->n_pre * sizeof(int32_t));
    for (size_t i = 0; i < a.n && !rc; i++) {
        if (a.v[i].id >= 0) rc = kvq_tok_buf_put(&c.ids, &a.v[i].id, sizeof(int32_t));
        else if (a.v[i].len) rc = bpe_word(h, &c, a.v[i].off, a.v[i].len);
    }
    if (!rc && add_special) rc = kvq_tok_buf_put(&c.ids, h->post_ids, h->n_post * sizeof(int32_t));
    free(a.v);
    free(b.v);
    if (rc) {
        kvq_tok_hf_ctx_free(&c);
        if (rc == -2) return kvq_err_set(err, KVQ_ERR_FORMAT, "tokenizer: regex or normalizer failed on the input text");
        return kvq_err_set(err, KVQ_ERR_NOMEM, "tokenizer: out of memory encoding %zu bytes", len);
    }
    *n_ids = c.ids.n / sizeof(int32_t);
    *ids = (int32_t *)c.ids.b;
    c.ids.b = NULL;
    if (!*ids) *ids = malloc(sizeof(int32_t)); // a valid pointer even for zero ids
    kvq_tok_hf_ctx_free(&c);
    if (!*ids) return kvq_err_set(err, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    return KVQ_OK;
}

int kvq_tok_hf_normalize(const hf_tok *h, kvq_tok_buf *s) {
    if (!h->norm) return 0;
    hf_ctx c;
    int rc = kvq_tok_hf_ctx_init(&c, 16);
    if (!rc) rc = norm_apply(h->norm, &c, s);
    kvq_tok_hf_ctx_free(&c);
    return rc;
}
