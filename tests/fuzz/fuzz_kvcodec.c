// Fuzz target: every KV codec's decoder (libconv/kv/, the rows of kvcodec.c's table) on
// arbitrary packed bytes, and kvq_kvcodec_load on arbitrary params and tables (records, fuzz.h). Bytes 0-2 pick
// the row, head_dim (8..256) and role; byte 3 bit 0 picks a state built from the row's example
// spec, or loaded from a params record and table records; the rest is one packed group,
// copied into a buffer of the codec's max_bytes (decode may read up to there, not beyond).
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "libconv/kv/kvcodec.h"

KVQ_FUZZ_TARGET(kvcodec) {
    if (size < 4) return 0;
    const kvq_kvcodec_traits *row = kvq_kvcodec_at(data[0] % kvq_kvcodec_count());
    int d = 8 << (data[1] % 6);
    kvq_kv_role role = data[2] & 1 ? KVQ_KV_V : KVQ_KV_K;
    kvq_fuzz_in in = {data + 4, size - 4};
    kvq_kvcodec *c = NULL;
    kvq_err err = {0};
    int cached = 0;
    if (data[3] & 1) {
        const uint8_t *p;
        size_t n;
        if (!kvq_fuzz_take(&in, &p, &n)) return 0;
        json_t *params = json_loadb((const char *)p, n, 0, NULL);
        if (!params) return 0;
        // Every spec, 7-8-bit turboquant/qturbo included: a loaded state is built without
        // training its codebook (the stored one replaces it, checked), so none is slow to load.
        // then (byte 3 >> 1) % 7 records, named in order by the tables any row uses (libconv/kv/kv_*.c's tables())
        static const char *const names[] = {"tbl/signs", "tbl/codebook", "tbl/secondary", "tbl/codebook_xi",
                                            "tbl/codebook_rho", "tbl/quaternion"};
        kvq_blob_view v[6];
        int nv = 0;
        for (int i = 0, want = (data[3] >> 1) % 7; i < want && kvq_fuzz_take(&in, &p, &n); i++)
            if (n) v[nv++] = (kvq_blob_view){names[i], p, n}; // empty: no such table
        kvq_status st = kvq_kvcodec_load(params, v, nv, &c, &err);
        json_decref(params);
        if (st) return 0;
    } else { // built once per (row, head_dim, role) and kept: init trains codebooks (slow)
        static kvq_kvcodec *cache[64][6][2];
        static unsigned char failed[64][6][2];
        int ri = data[0] % kvq_kvcodec_count(), di = data[1] % 6;
        KVQ_FUZZ_CHECK(ri < 64);
        if (!cache[ri][di][role] && !failed[ri][di][role]) {
            kvq_kvspec s;
            if (kvq_kvspec_parse(row->example, &s, &err) || kvq_kvcodec_new(&s, d, role, 1234, &cache[ri][di][role], &err))
                failed[ri][di][role] = 1, cache[ri][di][role] = NULL;
        }
        if (!cache[ri][di][role]) return 0;
        c = cache[ri][di][role];
        if (c->vt->reset) c->vt->reset(c);
        cached = 1;
    }
    size_t mb = c->vt->max_bytes(c);
    size_t n = in.left < mb ? in.left : mb;
    if (c->fixed) n = mb;
    uint8_t *buf = calloc(mb ? mb : 1, 1);
    float *out = malloc((size_t)c->group * c->d * sizeof *out);
    float *q = malloc((size_t)c->d * sizeof *q);
    if (buf && out && q) {
        memcpy(buf, in.p, in.left < mb ? in.left : mb);
        c->vt->decode(c, buf, n, out);
        if (c->group == 1) {
            for (int i = 0; i < c->d; i++) q[i] = (float)(i % 7) - 3.0f;
            const uint8_t *rec[1] = {buf};
            const uint32_t len[1] = {(uint32_t)n};
            const float p[1] = {0.75f};
            float s;
            if (c->vt->score) c->vt->score(c, q, 1, rec, len, 1, &s, 1);
            if (c->vt->vsum) c->vt->vsum(c, p, 1, 1, rec, len, 1, out);
            if (c->vt->score_vec) c->vt->score_vec(c, buf, out);
        }
    }
    free(buf);
    free(out);
    free(q);
    if (!cached) kvq_kvcodec_free(c);
    return 0;
}
