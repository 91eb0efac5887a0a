// Repacking between the CPU KV codecs' records (kv_int.c, kv_turbo.c: a header of fp16
// side data, then LSB-first b-bit codes) and the GPU execution layout (kv_attn.h): the
// side data moves to the region's side array unchanged, the codes into bit planes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libconv/kv/kv_gpu.h"

kvq_status kvq_gkv_kind_of(const kvq_kvcodec *c, kvq_gkv_kind *kind, int *bits, kvq_err *err) {
    char s[64];
    kvq_kvspec_format(&c->spec, s, sizeof s);
    int b = 0;
    const char *colon = strchr(s, ':');
    if (colon) b = atoi(colon + 1);
    if (!strcmp(c->spec.name, "fp16")) *kind = KVQ_GKV_F16, b = 16;
    else if (!strcmp(c->spec.name, "int")) *kind = KVQ_GKV_INT;
    else if (!strcmp(c->spec.name, "kivi")) *kind = KVQ_GKV_KIVI;
    else if (!strcmp(c->spec.name, "turboquant")) *kind = KVQ_GKV_TURBO;
    else return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--kv '%s': no GPU attention kernel reads this codec", s);
    if (c->d != KVQ_GKV_HEAD_DIM || (*kind != KVQ_GKV_F16 && (b < 2 || b > 4)))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--kv '%s' at head_dim %d: the GPU kernels are built for head_dim %d and 2-4 bits", s,
                           c->d, KVQ_GKV_HEAD_DIM);
    *bits = b;
    return KVQ_OK;
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
    if (kind == KVQ_GKV_INT || kind == KVQ_GKV_TURBO) return 2;
    if (kind == KVQ_GKV_KIVI) return c->role == KVQ_KV_K ? 4 * (size_t)c->d : 4 * (size_t)((c->d + 31) / 32);
    return 0;
}
static size_t side_at(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, int cap, int pos) {
    size_t o = kvq_gkv_side_offset(kind, bits, c->d, cap);
    if (kind == KVQ_GKV_KIVI && c->role == KVQ_KV_K) return o + (size_t)(pos / 32) * c->d * 4;
    return o + (size_t)pos * header(c, kind);
}

void kvq_gkv_pack(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *rec, int pos, uint8_t *region, int cap) {
    const int d = c->d, g = c->group;
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
    if (kind <= KVQ_GKV_F16) {
        memcpy(rec, region + (size_t)pos * d * 2, (size_t)g * d * 2);
        return;
    }
    const size_t h = header(c, kind), rb = kvq_gkv_row_bytes(bits, d);
    memcpy(rec, region + side_at(c, kind, bits, cap, pos), h);
    for (int t = 0; t < g; t++)
        for (int i = 0; i < d; i++) lsb_put(rec + h, bits, (size_t)t * d + i, kvq_gkv_get_code(region + (size_t)(pos + t) * rb, bits, d, i));
}
