// Repacking between the CPU KV codecs' records (kv_int.c, kv_turbo.c: a header of fp16
// side data, then LSB-first b-bit codes; kv_hqkv.c: fp32 γ, counter, Rice symbols) and the
// GPU execution layout (kv_attn.h): the side data moves to the region's side array unchanged,
// the codes into bit planes (HyperQuant-KV's Rice symbols as fixed-width lattice codes).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/hq_decode.h" // kvq_cuda_malloc, kvq_cuda_copy, kvq_cuda_free
#include "kernels/kv_hqkv.h"
#include "kernels/kv_hqmq.h"
#include "libconv/kv/kv_gpu.h"
#include "libconv/kv/kv_hqkv.h"
#include "libconv/kv/kv_internal.h"

kvq_status kvq_gkv_kind_of(const kvq_kvcodec *c, kvq_gkv_kind *kind, int *bits, kvq_err *err) {
    char s[64];
    kvq_kvspec_format(&c->spec, s, sizeof s);
    int b = 0;
    const char *colon = strchr(s, ':');
    if (colon) b = atoi(colon + 1);
    if (!strcmp(c->spec.name, "fp16")) *kind = KVQ_GKV_F16, b = 16;
    else if (!strcmp(c->spec.name, "int")) *kind = KVQ_GKV_INT;
    else if (!strcmp(c->spec.name, "kivi")) *kind = KVQ_GKV_KIVI;
    else if (!strcmp(c->spec.name, "turboquant") || !strcmp(c->spec.name, "qturbo")) *kind = KVQ_GKV_TURBO;
    else if (!strcmp(c->spec.name, "turboquant-prod")) *kind = c->role == KVQ_KV_V ? KVQ_GKV_TURBO : KVQ_GKV_TPROD; // values are turboquant:<b>
    else if (!strcmp(c->spec.name, "octopus") && c->role == KVQ_KV_V) *kind = KVQ_GKV_KIVI; // per-token groups of 32 = KIVI's values
    else if (!strcmp(c->spec.name, "octopus")) {
        kvq_kv_octopus_info in;
        kvq_kv_octopus_info_of(c, &in);
        *kind = in.qjl ? KVQ_GKV_OCTQ : KVQ_GKV_OCT;
        if (in.bdir != b + 1 || in.bnorm != b - 1)
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--kv '%s': the GPU kernel is built for the default split (b_dir = b+1, b_norm = b-1)", s);
    } else if (!strcmp(c->spec.name, "hqmq")) {
        kvq_kv_hqmq_info in;
        kvq_kv_hqmq_info_of(c, &in);
        *kind = in.med ? KVQ_GKV_HQMQO : KVQ_GKV_HQMQ;
        b = in.ib + in.br;
        if ((c->d != 64 && c->d != 128) || (b != 13 && b != 16 && b != 19) || in.M + in.nch > 1 << in.ib)
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                               "--kv '%s' at head_dim %d: the GPU layout holds hqmq at head_dim 64 or 128 with 13-, 16- or 19-bit chunk codes (s24:r3, s96:r4, s192:r6, with or without med<C>), not %d",
                               s, c->d, b);
        *bits = b;
        return KVQ_OK;
    } else if (!strcmp(c->spec.name, "hqkv")) {
        *kind = KVQ_GKV_HQKV;
        kvq_kv_hqkv_info in;
        kvq_kv_hqkv_info_of(c, &in);
        b = kvq_gkv_hqkv_width(in.lat, in.scale);
        if (b > 8 || (c->d != 64 && c->d != 128))
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                               "--kv '%s' at head_dim %d: the GPU layout needs %d-bit lattice codes (α√d = %.1f); built for head_dim 64 or 128 and up to 8",
                               s, c->d, b, in.scale);
        *bits = b;
        return KVQ_OK;
    } else return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--kv '%s': no GPU attention kernel reads this codec", s);
    if ((c->d != 64 && c->d != 128) || (*kind != KVQ_GKV_F16 && (b < 2 || b > 4)))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--kv '%s' at head_dim %d: the GPU kernels are built for head_dim 64 or 128 and 2-4 bits", s,
                           c->d);
    *bits = b;
    return KVQ_OK;
}

int kvq_gkv_hqkv_width(int lat, double scale) { return kvq_hk_width(lat, scale); } // shared with the CPU execution form

void kvq_gkv_hqkv_side(const kvq_kvcodec *c, kvq_gkv_side *s) {
    kvq_kv_hqkv_info in;
    if (kvq_kv_hqkv_info_of(c, &in)) return;
    s->lat = in.lat, s->rot = in.rot, s->dither = in.dither, s->scale = (float)in.scale, s->enc_scale = in.scale;
}

int kvq_gkv_tables_of(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, kvq_gkv_tables *t) {
    memset(t, 0, sizeof *t);
    if (kind == KVQ_GKV_TURBO || kind == KVQ_GKV_TPROD) {
        kvq_kvtable tb[8];
        const char *n = c->spec.name;
        const int turbo = !strcmp(n, "turboquant") || !strcmp(n, "qturbo") || !strcmp(n, "turboquant-prod");
        const int nt = turbo && c->vt->tables ? c->vt->tables(c, tb) : 0;
        const size_t ncb = (size_t)1 << (kind == KVQ_GKV_TPROD ? bits - 1 : bits);
        for (int k = 0; k < nt; k++) {
            if (!strcmp(tb[k].name, "signs") && tb[k].count == (size_t)c->d) t->signs = (kvq_gkv_tab){tb[k].data, tb[k].count, tb[k].count};
            if (!strcmp(tb[k].name, "codebook") && tb[k].count == ncb) t->cb = (kvq_gkv_tab){tb[k].data, tb[k].count, tb[k].count};
            if (!strcmp(tb[k].name, "quaternion") && tb[k].count == 4) t->quat = (kvq_gkv_tab){tb[k].data, 4, 4};
        }
        if (kind == KVQ_GKV_TPROD) t->mat = (kvq_gkv_tab){kvq_kv_turbo_qjl(c), (size_t)c->d * c->d, (size_t)c->d * c->d};
        if (!t->signs.p || !t->cb.p || (kind == KVQ_GKV_TPROD && !t->mat.p)) return -1;
        return 0;
    }
    if (kind == KVQ_GKV_OCT || kind == KVQ_GKV_OCTQ) {
        kvq_kv_octopus_info in;
        if (kvq_kv_octopus_info_of(c, &in) || in.bdir != bits + 1 || in.bnorm != bits - 1 || in.s2 != in.s1 + c->d ||
            in.qjl != (kind == KVQ_GKV_OCTQ))
            return -1;
        t->cb = (kvq_gkv_tab){in.dirs, (size_t)3 << (2 * in.bdir), (size_t)3 << (2 * in.bdir)};
        t->rho = (kvq_gkv_tab){in.crho, (size_t)1 << in.bnorm, (size_t)1 << in.bnorm};
        t->signs = (kvq_gkv_tab){in.s1, 2 * (size_t)c->d, 2 * (size_t)c->d};
        t->cxi = (kvq_gkv_tab){in.cxi, (size_t)1 << in.bdir, (size_t)1 << in.bdir};
        t->round = in.round;
        return 0;
    }
    if (kind == KVQ_GKV_HQKV) {
        kvq_kv_hqkv_info in;
        if (kvq_kv_hqkv_info_of(c, &in) || bits != kvq_gkv_hqkv_width(in.lat, in.scale)) return -1;
        t->signs = (kvq_gkv_tab){in.signs, (size_t)c->d, (size_t)c->d};
        if (in.rot == 2) {
            if (!in.Q) return -1;
            t->mat = (kvq_gkv_tab){in.Q, (size_t)c->d * c->d, (size_t)c->d * c->d};
        }
        t->seed = in.seed;
        return 0;
    }
    if (kind == KVQ_GKV_HQMQ || kind == KVQ_GKV_HQMQO) {
        kvq_kv_hqmq_info in;
        if (kvq_kv_hqmq_info_of(c, &in) || in.med != (kind == KVQ_GKV_HQMQO) || in.ib + in.br != bits || in.M % 24) return -1;
        t->med = in.medc;
        t->cb = (kvq_gkv_tab){in.cb, 4 * (size_t)in.M, (size_t)4 << in.ib};
        t->cxi = (kvq_gkv_tab){in.sec, 4 * (size_t)(in.M / 24), 4 * (size_t)(in.M / 24)};
        t->n_sec = in.M / 24, t->ibits = in.ib;
        return 0;
    }
    return -1;
}

static const kvq_gkv_tab *tab_at(const kvq_gkv_tables *t, int i) {
    const kvq_gkv_tab *a[6] = {&t->cb, &t->rho, &t->signs, &t->quat, &t->mat, &t->cxi};
    return a[i];
}

void kvq_gkv_side_free_tables(kvq_gkv_side *sd) {
    const float *t[6] = {sd->cb, sd->rho, sd->signs, sd->quat, sd->mat, sd->cxi};
    for (int i = 0; i < 6; i++) kvq_cuda_free((void *)t[i]);
    kvq_cuda_free((void *)sd->seeds);
    sd->cb = sd->rho = sd->signs = sd->quat = sd->mat = sd->cxi = NULL;
    sd->seeds = NULL;
}

static kvq_status upload(const void *host, size_t nb, void **dev, size_t *bytes, kvq_err *err) {
    kvq_status s = kvq_cuda_malloc(dev, nb, err);
    if (!s && bytes) *bytes += nb;
    return s ? s : kvq_cuda_copy(*dev, host, nb, 1, err);
}

kvq_status kvq_gkv_side_tables(kvq_gkv_side *sd, const kvq_kvcodec *const *st, int n_kv, size_t *bytes, kvq_err *err) {
    if (sd->kind <= KVQ_GKV_F16 || sd->kind == KVQ_GKV_INT || sd->kind == KVQ_GKV_KIVI) return KVQ_OK; // no tables
    kvq_gkv_tables *t = calloc(n_kv, sizeof *t);
    uint64_t *seeds = calloc(n_kv, sizeof *seeds);
    kvq_status s = !t || !seeds ? kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory") : KVQ_OK;
    for (int h = 0; h < n_kv && !s; h++) {
        if (kvq_gkv_tables_of(st[h], sd->kind, sd->bits, &t[h]))
            s = kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "KV head %d: the codec state's tables do not fit GPU kind %d at %d bits", h, sd->kind, sd->bits);
        for (int i = 0; i < 6 && !s; i++)
            if (tab_at(&t[h], i)->n != tab_at(&t[0], i)->n || tab_at(&t[h], i)->slot != tab_at(&t[0], i)->slot)
                s = kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "KV head %d: a table's size differs from head 0's", h);
        if (!s && (t[h].round != t[0].round || t[h].n_sec != t[0].n_sec || t[h].ibits != t[0].ibits || t[h].med != t[0].med))
            s = kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "KV head %d: its parameters differ from head 0's", h);
        if (!s) seeds[h] = t[h].seed;
    }
    const float **dst[6] = {&sd->cb, &sd->rho, &sd->signs, &sd->quat, &sd->mat, &sd->cxi};
    for (int i = 0; i < 6 && !s; i++) {
        const kvq_gkv_tab *t0 = tab_at(&t[0], i);
        if (!t0->p) continue;
        float *host = calloc(t0->slot * n_kv, sizeof(float)); // a slot past n stays zero (HQMQ's padded rows)
        if (!host) s = kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
        for (int h = 0; h < n_kv && !s; h++) memcpy(host + (size_t)h * t0->slot, tab_at(&t[h], i)->p, sizeof(float) * t0->n);
        void *dev = NULL;
        if (!s) s = upload(host, sizeof(float) * t0->slot * n_kv, &dev, bytes, err);
        if (dev) *dst[i] = dev;
        free(host);
    }
    if (!s) {
        sd->round = t[0].round, sd->n_sec = t[0].n_sec;
        if (sd->kind == KVQ_GKV_HQMQ || sd->kind == KVQ_GKV_HQMQO) sd->ibits = t[0].ibits, sd->med = t[0].med;
    }
    if (!s && sd->kind == KVQ_GKV_HQKV) { // lattice, rotation, dither, scales; each head's seed (its dither stream)
        void *dev = NULL;
        kvq_gkv_hqkv_side(st[0], sd);
        s = upload(seeds, sizeof(uint64_t) * n_kv, &dev, bytes, err);
        if (dev) sd->seeds = dev;
    }
    free(t), free(seeds);
    return s;
}

static uint32_t lsb_code(const uint8_t *p, int b, size_t j) {
    uint32_t v = 0;
    for (int k = 0; k < b; k++) {
        size_t bit = j * b + k;
        v |= (uint32_t)((p[bit >> 3] >> (bit & 7)) & 1) << k;
    }
    return v;
}
static void lsb_put(uint8_t *p, int b, size_t j, uint32_t v) {
    for (int k = 0; k < b; k++) {
        size_t bit = j * b + k;
        p[bit >> 3] |= (uint8_t)(((v >> k) & 1) << (bit & 7));
    }
}

// Header bytes of a record (side data), and where that side data lives in a region.
static size_t header(const kvq_kvcodec *c, kvq_gkv_kind kind) {
    if (kind == KVQ_GKV_INT || kind == KVQ_GKV_TURBO || kind == KVQ_GKV_HQMQ) return 2;
    if (kind == KVQ_GKV_HQKV || kind == KVQ_GKV_HQMQO) return 8;
    if (kind == KVQ_GKV_TPROD || kind == KVQ_GKV_OCT) return 4;
    if (kind == KVQ_GKV_OCTQ) return 8;
    if (kind == KVQ_GKV_KIVI) return c->role == KVQ_KV_K ? 4 * (size_t)c->d : 4 * (size_t)((c->d + 31) / 32);
    return 0;
}
static size_t side_at(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, int cap, int pos) {
    size_t o = kvq_gkv_side_offset(kind, bits, c->d, cap);
    if (kind == KVQ_GKV_KIVI && c->role == KVQ_KV_K) return o + (size_t)(pos / 32) * c->d * 4;
    return o + (size_t)pos * header(c, kind);
}

// HQKV: (fp32 γ, u32 counter) to the side array, the lattice codes + 2^(bits-1) as codes.
static int pack_hqkv(const kvq_kvcodec *c, int bits, const uint8_t *rec, size_t n, int pos, uint8_t *region, int cap) {
    const int d = c->d;
    int32_t code[4096];
    float g;
    uint32_t ctr;
    uint8_t *row = region + (size_t)pos * kvq_gkv_row_bytes(bits, d);
    memset(row, 0, kvq_gkv_row_bytes(bits, d));
    if (kvq_kv_hqkv_codes(c, rec, n, &g, &ctr, code)) return -1;
    const int32_t off = 1 << (bits - 1);
    for (int i = 0; i < d; i++) {
        if (code[i] < -off || code[i] >= off) return -1;
        kvq_gkv_put_code(row, bits, d, i, (uint32_t)(code[i] + off));
    }
    uint8_t *sd = region + side_at(c, KVQ_GKV_HQKV, bits, cap, pos);
    memcpy(sd, &g, 4);
    memcpy(sd + 4, &ctr, 4);
    return 0;
}

static int hqmqo_io(const kvq_kvcodec *c, int bits, uint8_t *rec, int pos, uint8_t *region, int cap, int to_region);

int kvq_gkv_pack_n(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *rec, size_t n, int pos, uint8_t *region, int cap) {
    if (kind == KVQ_GKV_HQKV) return pack_hqkv(c, bits, rec, n, pos, region, cap);
    if (kind == KVQ_GKV_HQMQO) return hqmqo_io(c, bits, (uint8_t *)rec, pos, region, cap, 1); // rec is only read
    kvq_gkv_pack(c, kind, bits, rec, pos, region, cap);
    return 0;
}

// TPROD: record = fp16 γ | d × (b−1)-bit codes | fp16 γ_r | d sign bits; row = the codes'
// planes (b−1 bits) then the signs' one-bit plane; side = (γ, γ_r).
static size_t tprod_p2(int d, int bits) { return 2 + ((size_t)d * (bits - 1) + 7) / 8; }

static void pack_tprod(const kvq_kvcodec *c, int bits, const uint8_t *rec, int pos, uint8_t *region, int cap) {
    const int d = c->d, bm = bits - 1;
    const size_t p2 = tprod_p2(d, bits);
    uint8_t *row = region + (size_t)pos * kvq_gkv_row_bytes(bits, d), *sd = region + side_at(c, KVQ_GKV_TPROD, bits, cap, pos);
    memset(row, 0, kvq_gkv_row_bytes(bits, d));
    memcpy(sd, rec, 2), memcpy(sd + 2, rec + p2, 2);
    for (int i = 0; i < d; i++) {
        kvq_gkv_put_code(row, bm, d, i, lsb_code(rec + 2, bm, i));
        kvq_gkv_put_code(row + kvq_gkv_row_bytes(bm, d), 1, d, i, lsb_code(rec + p2 + 2, 1, i));
    }
}

static void unpack_tprod(const kvq_kvcodec *c, int bits, const uint8_t *region, int cap, int pos, uint8_t *rec) {
    const int d = c->d, bm = bits - 1;
    const size_t p2 = tprod_p2(d, bits);
    const uint8_t *row = region + (size_t)pos * kvq_gkv_row_bytes(bits, d), *sd = region + side_at(c, KVQ_GKV_TPROD, bits, cap, pos);
    memcpy(rec, sd, 2), memcpy(rec + p2, sd + 2, 2);
    for (int i = 0; i < d; i++) {
        lsb_put(rec + 2, bm, i, kvq_gkv_get_code(row, bm, d, i));
        lsb_put(rec + p2 + 2, 1, i, kvq_gkv_get_code(row + kvq_gkv_row_bytes(bm, d), 1, d, i));
    }
}

// OCT/OCTQ: record = fp32 γ | 2·ntri dir indices (bdir bits) | ntri ρ indices (bnorm bits) |
// [fp16 γ_r | d sign bits]; lane L's words hold the codes (a·2^bdir + b) | ρ << 2·bdir of
// triplets 6L..6L+5 (zero past ntri), then the sign plane; side = γ [, γ_r, 0].
static void oct_io(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, uint8_t *rec, int pos, uint8_t *region, int cap, int to_region) {
    kvq_kv_octopus_info in;
    kvq_kv_octopus_info_of(c, &in);
    const int d = c->d, cw = 2 * in.bdir + in.bnorm, nw = kvq_gkv_oct_words(bits);
    const size_t p2 = 4 + ((size_t)in.ntri * cw + 7) / 8, rb = kvq_gkv_kind_row_bytes(kind, bits, d);
    uint8_t *row = region + (size_t)pos * rb, *sd = region + side_at(c, kind, bits, cap, pos);
    if (to_region) {
        memset(row, 0, rb);
        memset(sd, 0, header(c, kind));
        memcpy(sd, rec, 4);
        if (in.qjl) memcpy(sd + 4, rec + p2, 2);
    } else {
        memcpy(rec, sd, 4);
        if (in.qjl) memcpy(rec + p2, sd + 4, 2);
    }
    for (int t = 0; t < in.ntri; t++) {
        uint8_t *lw = row + (size_t)(t / 6) * nw * 4; // lane t / 6's words, code t % 6
        const size_t at = (size_t)(t % 6) * cw;
        if (to_region) {
            const uint32_t a = lsb_code(rec + 4, in.bdir, 2 * (size_t)t), b = lsb_code(rec + 4, in.bdir, 2 * (size_t)t + 1);
            uint32_t rr = 0;
            for (int k = 0; k < in.bnorm; k++) {
                const size_t bit = (size_t)in.ntri * 2 * in.bdir + (size_t)t * in.bnorm + k;
                rr |= (uint32_t)((rec[4 + (bit >> 3)] >> (bit & 7)) & 1) << k;
            }
            const uint32_t code = (a << in.bdir | b) | rr << (2 * in.bdir);
            for (int k = 0; k < cw; k++) lw[(at + k) >> 3] |= (uint8_t)(((code >> k) & 1) << ((at + k) & 7));
        } else {
            uint32_t code = 0;
            for (int k = 0; k < cw; k++) code |= (uint32_t)((lw[(at + k) >> 3] >> ((at + k) & 7)) & 1) << k;
            lsb_put(rec + 4, in.bdir, 2 * (size_t)t, (code >> in.bdir) & ((1u << in.bdir) - 1));
            lsb_put(rec + 4, in.bdir, 2 * (size_t)t + 1, code & ((1u << in.bdir) - 1));
            for (int k = 0; k < in.bnorm; k++) {
                const size_t bit = (size_t)in.ntri * 2 * in.bdir + (size_t)t * in.bnorm + k;
                rec[4 + (bit >> 3)] |= (uint8_t)(((code >> (2 * in.bdir + k)) & 1) << (bit & 7));
            }
        }
    }
    if (in.qjl) {
        uint8_t *pl = row + (size_t)4 * (d / 16) * nw; // after the d/16 lanes' words
        for (int i = 0; i < d; i++) {
            if (to_region) kvq_gkv_put_code(pl, 1, d, i, lsb_code(rec + p2 + 2, 1, i));
            else lsb_put(rec + p2 + 2, 1, i, kvq_gkv_get_code(pl, 1, d, i));
        }
    }
}

// HQMQ: the record's mixed-radix index taken apart into per-chunk codes idx | r << ib
// (kernels/kv_hqmq.h, as the CPU execution form), chunk k
// in lane k / 4's words at bit (k % 4)·bits; side = the raw fp16 σ.
static void hqmq_io(const kvq_kvcodec *c, int bits, uint8_t *rec, int pos, uint8_t *region, int cap, int to_region) {
    kvq_kv_hqmq_info in;
    kvq_kv_hqmq_info_of(c, &in);
    int idx[1024], rad[1024];
    uint16_t sig = 0;
    const int nw = (4 * bits + 31) / 32;
    const size_t rb = kvq_gkv_kind_row_bytes(KVQ_GKV_HQMQ, bits, c->d);
    uint8_t *row = region + (size_t)pos * rb, *sd = region + side_at(c, KVQ_GKV_HQMQ, bits, cap, pos);
    if (to_region) {
        memset(row, 0, rb);
        kvq_kv_hqmq_codes(c, rec, &sig, idx, rad);
        sd[0] = (uint8_t)sig, sd[1] = (uint8_t)(sig >> 8);
    } else {
        sig = (uint16_t)(sd[0] | sd[1] << 8);
    }
    for (int k = 0; k < in.nch; k++) {
        uint8_t *lw = row + (size_t)(k / 4) * nw * 4;
        const size_t at = (size_t)(k % 4) * bits;
        if (to_region) {
            const uint32_t code = kvq_hqmq_code((uint32_t)idx[k], (uint32_t)rad[k], in.ib);
            for (int j = 0; j < bits; j++) lw[(at + j) >> 3] |= (uint8_t)(((code >> j) & 1) << ((at + j) & 7));
        } else {
            uint32_t code = 0;
            for (int j = 0; j < bits; j++) code |= (uint32_t)((lw[(at + j) >> 3] >> ((at + j) & 7)) & 1) << j;
            idx[k] = (int)kvq_hqmq_code_idx(code, in.ib), rad[k] = (int)kvq_hqmq_code_rad(code, in.ib);
        }
    }
    if (!to_region) kvq_kv_hqmq_record(c, sig, idx, rad, rec);
}

// HQMQ with outliers: HQMQ's rows, an outlier chunk's code M + j (its ordinal j in the token);
// side (fp16 σ, u16 n_out, u32 off); the outliers' raw fp16 at pool chunks off.. (off = the
// previous position's off + n_out: positions are packed in order from 0). @return 0, or -1 when
// the pool is full (the row then has no outliers' chunks: n_out = 0).
static int hqmqo_io(const kvq_kvcodec *c, int bits, uint8_t *rec, int pos, uint8_t *region, int cap, int to_region) {
    kvq_kv_hqmq_info in;
    kvq_kv_hqmq_info_of(c, &in);
    int idx[1024], rad[1024], rc = 0;
    uint8_t out[1024];
    uint16_t och[4096] = {0}, sig = 0, n_out = 0; // zeros for outliers a full pool dropped
    uint32_t off = 0;
    const int nw = (4 * bits + 31) / 32;
    const size_t rb = kvq_gkv_kind_row_bytes(KVQ_GKV_HQMQO, bits, c->d), pool_n = kvq_gkv_hqmqo_pool_chunks(c->d, cap);
    uint8_t *row = region + (size_t)pos * rb, *sd = region + side_at(c, KVQ_GKV_HQMQO, bits, cap, pos);
    uint8_t *pool = region + kvq_gkv_hqmqo_pool_offset(bits, c->d, cap);
    if (to_region) {
        memset(row, 0, rb);
        n_out = (uint16_t)kvq_kv_hqmq_codes_med(c, rec, &sig, out, idx, rad, och);
        if (pos > 0) { // the previous position's off + n_out
            uint16_t pn;
            memcpy(&pn, sd - 8 + 2, 2), memcpy(&off, sd - 8 + 4, 4);
            off += pn;
        }
        if (off + n_out > pool_n) n_out = 0, rc = -1;
        else memcpy(pool + (size_t)off * 8, och, (size_t)n_out * 8);
        memcpy(sd, &sig, 2), memcpy(sd + 2, &n_out, 2), memcpy(sd + 4, &off, 4);
    } else {
        memcpy(&sig, sd, 2), memcpy(&n_out, sd + 2, 2), memcpy(&off, sd + 4, 4);
    }
    for (int k = 0, j = 0; k < in.nch; k++) {
        uint8_t *lw = row + (size_t)(k / 4) * nw * 4;
        const size_t at = (size_t)(k % 4) * bits;
        if (to_region) {
            const uint32_t code = out[k] ? kvq_hqmq_out_code(in.M, rc ? 0 : j++) // pool full: M, as the device encoder writes
                                          : kvq_hqmq_code((uint32_t)idx[k], (uint32_t)rad[k], in.ib);
            for (int e = 0; e < bits; e++) lw[(at + e) >> 3] |= (uint8_t)(((code >> e) & 1) << ((at + e) & 7));
        } else {
            uint32_t code = 0;
            for (int e = 0; e < bits; e++) code |= (uint32_t)((lw[(at + e) >> 3] >> ((at + e) & 7)) & 1) << e;
            const uint32_t ci = kvq_hqmq_code_idx(code, in.ib);
            out[k] = ci >= (uint32_t)in.M;
            idx[k] = out[k] ? 0 : (int)ci, rad[k] = out[k] ? 0 : (int)kvq_hqmq_code_rad(code, in.ib);
            if (out[k] && (int)(ci - (uint32_t)in.M) < n_out && off + n_out <= pool_n)
                memcpy(och + 4 * (size_t)j++, pool + ((size_t)off + (ci - (uint32_t)in.M)) * 8, 8);
        }
    }
    if (!to_region) kvq_kv_hqmq_record_med(c, sig, out, idx, rad, och, rec);
    return rc;
}

void kvq_gkv_pack(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *rec, int pos, uint8_t *region, int cap) {
    const int d = c->d, g = c->group;
    if (kind == KVQ_GKV_HQMQO) {
        (void)hqmqo_io(c, bits, (uint8_t *)rec, pos, region, cap, 1); // rec is only read
        return;
    }
    if (kind == KVQ_GKV_HQMQ) {
        hqmq_io(c, bits, (uint8_t *)rec, pos, region, cap, 1); // rec is only read
        return;
    }
    if (kind == KVQ_GKV_OCT || kind == KVQ_GKV_OCTQ) {
        oct_io(c, kind, bits, (uint8_t *)rec, pos, region, cap, 1); // rec is only read
        return;
    }
    if (kind == KVQ_GKV_TPROD) {
        pack_tprod(c, bits, rec, pos, region, cap);
        return;
    }
    if (kind == KVQ_GKV_HQKV) { // variable length: the record's own length is not known here
        (void)pack_hqkv(c, bits, rec, c->vt->max_bytes(c), pos, region, cap);
        return;
    }
    if (kind <= KVQ_GKV_F16) { // dense rows: the record is the row
        memcpy(region + (size_t)pos * d * 2, rec, (size_t)g * d * 2);
        return;
    }
    const size_t h = header(c, kind), rb = kvq_gkv_row_bytes(bits, d);
    memcpy(region + side_at(c, kind, bits, cap, pos), rec, h);
    for (int t = 0; t < g; t++) {
        uint8_t *row = region + (size_t)(pos + t) * rb;
        memset(row, 0, rb);
        for (int i = 0; i < d; i++) kvq_gkv_put_code(row, bits, d, i, lsb_code(rec + h, bits, (size_t)t * d + i));
    }
}

void kvq_gkv_unpack(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *region, int cap, int pos, uint8_t *rec) {
    const int d = c->d, g = c->group;
    memset(rec, 0, c->vt->max_bytes(c));
    if (kind == KVQ_GKV_TPROD) {
        unpack_tprod(c, bits, region, cap, pos, rec);
        return;
    }
    if (kind == KVQ_GKV_OCT || kind == KVQ_GKV_OCTQ) {
        oct_io(c, kind, bits, rec, pos, (uint8_t *)region, cap, 0); // region is only read
        return;
    }
    if (kind == KVQ_GKV_HQMQ) {
        hqmq_io(c, bits, rec, pos, (uint8_t *)region, cap, 0); // region is only read
        return;
    }
    if (kind == KVQ_GKV_HQMQO) {
        (void)hqmqo_io(c, bits, rec, pos, (uint8_t *)region, cap, 0); // region is only read
        return;
    }
    if (kind == KVQ_GKV_HQKV) {
        int32_t code[4096];
        float gm;
        uint32_t ctr;
        const uint8_t *sd = region + side_at(c, kind, bits, cap, pos), *row = region + (size_t)pos * kvq_gkv_row_bytes(bits, d);
        memcpy(&gm, sd, 4);
        memcpy(&ctr, sd + 4, 4);
        for (int i = 0; i < d; i++) code[i] = (int32_t)kvq_gkv_get_code(row, bits, d, i) - (1 << (bits - 1));
        size_t n = 0;
        kvq_err err = {0};
        (void)kvq_kv_hqkv_record(c, gm, ctr, code, rec, &n, &err); // a non-lattice block leaves zeros
        return;
    }
    if (kind <= KVQ_GKV_F16) {
        memcpy(rec, region + (size_t)pos * d * 2, (size_t)g * d * 2);
        return;
    }
    const size_t h = header(c, kind), rb = kvq_gkv_row_bytes(bits, d);
    memcpy(rec, region + side_at(c, kind, bits, cap, pos), h);
    for (int t = 0; t < g; t++)
        for (int i = 0; i < d; i++) lsb_put(rec + h, bits, (size_t)t * d + i, kvq_gkv_get_code(region + (size_t)(pos + t) * rb, bits, d, i));
}
