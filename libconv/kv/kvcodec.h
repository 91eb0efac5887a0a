// The KV-cache codec interface: one codec state per (layer, KV head, K or V) turns
// token vectors of head_dim floats into packed bytes and back, optionally scores a
// query against packed keys without materialising them, and reports its effective
// bits. Codecs live in libconv/kv/ and register in one traits table (kvcodec.c);
// docs/KV.md describes every layout and bits formula.
#ifndef KVQ_KVCODEC_H
#define KVQ_KVCODEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <jansson.h>

#include "formats/error.h"
#include "libconv/codec/codec.h"
#include "libconv/quant/bits.h"

typedef enum { KVQ_KV_K = 0, KVQ_KV_V = 1 } kvq_kv_role;

/** Bytes of private options a KV codec's row may keep in a kvq_kvspec. */
#define KVQ_KV_OPTS_MAX 32

/** A parsed `--kv` spec: the row's name and the row's private options. Only the row's own
 *  file knows what the options block holds (its own struct, copied in and out with memcpy:
 *  kvq_kvspec_opts_get / _set); a plain value, copied freely. */
typedef struct {
    char name[20];                                   // the row's name ("octopus", "hqkv", ...)
    _Alignas(8) unsigned char opts[KVQ_KV_OPTS_MAX]; // the row's options, zeroed before its parse
} kvq_kvspec;

/** For a row's file: copies its options struct (size bytes, at most KVQ_KV_OPTS_MAX: assert
 *  it with KVQ_KV_OPTS_FIT) out of or into a spec. */
static inline void kvq_kvspec_opts_get(const kvq_kvspec *s, void *opts, size_t size) { memcpy(opts, s->opts, size); }
static inline void kvq_kvspec_opts_set(kvq_kvspec *s, const void *opts, size_t size) { memcpy(s->opts, opts, size); }
#define KVQ_KV_OPTS_FIT(type) _Static_assert(sizeof(type) <= KVQ_KV_OPTS_MAX, #type " exceeds KVQ_KV_OPTS_MAX")
/** For a row's file: the fit check and `static type opts_of(const kvq_kvspec *)`, the file's
 *  options read back out of a spec. */
#define KVQ_KV_OPTS(type)                                                                         \
    KVQ_KV_OPTS_FIT(type);                                                                        \
    static inline type opts_of(const kvq_kvspec *s_) {                                            \
        type o_;                                                                                  \
        kvq_kvspec_opts_get(s_, &o_, sizeof o_);                                                  \
        return o_;                                                                                \
    }

/** Parses a `--kv` spec such as "hqmq:s96:r4:med3" or "octopus:3:qjl".
 *  @return KVQ_OK or KVQ_ERR_ARG with a message naming the spec. */
kvq_status kvq_kvspec_parse(const char *s, kvq_kvspec *out, kvq_err *err);
/** Writes the canonical spec string (parse(format(x)) == x). @return chars written. */
int kvq_kvspec_format(const kvq_kvspec *s, char *buf, size_t n);

typedef struct kvq_kvcodec kvq_kvcodec;

/** A named float table of a codec state (codebook, sign vector, ...). Serialized as
 *  a blob; a loaded blob replaces the table built at init. */
typedef struct {
    const char *name;
    float *data;      // owned by the codec state
    size_t count;
} kvq_kvtable;

/** Codec operations. Encoding works on groups of `group` tokens (1 for every codec
 *  but KIVI keys, which quantize per channel over 32 tokens). */
typedef struct {
    const char *name;
    /** Builds the state from c->spec, c->d, c->role, c->seed (allocates c->st). */
    kvq_status (*init)(kvq_kvcodec *c, kvq_err *err);
    void (*free)(kvq_kvcodec *c);
    /** Upper bound on the bytes of one encoded group. */
    size_t (*max_bytes)(const kvq_kvcodec *c);
    /** Encodes one group x (group, d) into out (max_bytes); *n gets the length.
     *  May update running statistics in the state (HQMQ median). */
    kvq_status (*encode)(kvq_kvcodec *c, const float *x, uint8_t *out, size_t *n, kvq_err *err);
    /** Decodes one group (n bytes) to out (group, d). Pure: safe from several threads. */
    void (*decode)(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out);
    /** Optional (NULL = decode): scores n_q queries q (n_q, d) against the first n_tok tokens
     *  of the groups rec[0], rec[1], ... (group g's bytes at rec[g], len[g] of them; the last
     *  group may be used in part), each token read once for all queries. s[i·lds + t] = the
     *  codec's estimate of <q_i, k_t>, from the codes (equal to <q, decode(k_t)> up to float
     *  rounding, except the QJL estimators' correction). */
    void (*score)(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *const *rec, const uint32_t *len,
                  int n_tok, float *s, int lds);
    /** Optional (NULL = decode): the value side of attention from the codes. For each of n_q
     *  weight rows p + i·ldp: out (n_q, d) row i = Σ_t p[i·ldp + t] · decode(token t) over n_tok
     *  one-token groups (rec[t], len[t] bytes), summed in the codec's own domain (scales and
     *  zeros factored out, rotated codecs in their frame, rotated back once per row). */
    void (*vsum)(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *const *rec,
                 const uint32_t *len, int n_tok, float *out);
    /** Optional execution form (NULL, or xbytes 0 for this state: none; docs/KV.md "Execution
     *  form"): a fixed-width row of xbytes(c) bytes (a multiple of 4) that xform builds once from
     *  a one-token record (n bytes) when the cache stores it, and that xscore / xvsum read instead
     *  of the record — for the codecs whose records must otherwise be taken apart per token per
     *  step (HQMQ's mixed-radix index, HyperQuant-KV's Rice symbols). Rows are xbytes apart from
     *  x; xscore and xvsum mean exactly what score and vsum mean for the same tokens. */
    size_t (*xbytes)(const kvq_kvcodec *c);
    void (*xform)(const kvq_kvcodec *c, const uint8_t *rec, size_t n, uint8_t *x);
    void (*xscore)(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *x, int n_tok, float *s, int lds);
    void (*xvsum)(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *x, int n_tok, float *out);
    /** Optional (NULL = decode): the vector k̃ of one token with <q, k̃> == score(q, k)
     *  for every q (the QJL estimators are linear in q). */
    void (*score_vec)(const kvq_kvcodec *c, const uint8_t *in, float *out);
    /** Predicted bits per element of one group from the formula (variable-length
     *  codecs: at outlier fraction 0). */
    double (*bits_formula)(const kvq_kvcodec *c);
    /** Lists the state's tables into t (max 8). @return count. */
    int (*tables)(const kvq_kvcodec *c, kvq_kvtable *t);
    /** Optional: resets running statistics (new sequence). */
    void (*reset)(kvq_kvcodec *c);
    /** Optional: rebuilds derived tables after kvq_kvcodec_load replaced the tables. */
    void (*refresh)(kvq_kvcodec *c);
    /** Optional: the meaning of loaded tables beyond their sizes and finiteness (which the
     *  loader checks for every codec): signs ±1, codebooks strictly increasing in their range,
     *  quaternions of unit norm. Runs before refresh. Errors name the table. */
    kvq_status (*check_tables)(const kvq_kvcodec *c, kvq_err *err);
} kvq_kvcodec_vt;

struct kvq_kvcodec {
    const kvq_kvcodec_vt *vt;
    kvq_kvspec spec;
    int d;            // head_dim
    int role;         // kvq_kv_role
    uint64_t seed;    // per-state seed (see kvq_kv_seed)
    int group;        // tokens per encode call
    int fixed;        // 1: every group encodes to exactly max_bytes
    int stored;       // 1: built to receive stored tables (kvq_kvcodec_load): init skips what the
                      // tables replace (a trained Lloyd-Max codebook: up to seconds at 8 bits)
    void *st;         // codec-private state
};

/** One row of the KV codec table: how a `--kv` name parses and formats, and which coders it
 *  uses for K and V. The row owns its options: a struct private to its file, kept in
 *  kvq_kvspec.opts, written by parse and read by format and the coders. A new KV codec is
 *  its own file (options, coders, parse, format, this row) plus one line in the table
 *  (kvcodec.c); tests/test_codec_table.c runs every row. */
typedef struct {
    const char *name;
    /** Parses the fields after the name (fld[1..nf)) into o's options, which arrive zeroed
     *  (the row sets its own defaults), with the name set; errors name `spec`. */
    kvq_status (*parse)(const char *spec, char *const *fld, int nf, kvq_kvspec *o, kvq_err *err);
    /** The canonical spec string (parse(format(x)) == x). @return chars written. */
    int (*format)(const kvq_kvspec *s, char *buf, size_t n);
    const kvq_kvcodec_vt *vt_k, *vt_v;
    const char *example;     // a representative spec, run by the table-driven test
    double max_rel_err;      // its bound: ‖x − x̂‖ / ‖x‖ over Gaussian tokens, head_dim 128
} kvq_kvcodec_traits;

int kvq_kvcodec_count(void);
const kvq_kvcodec_traits *kvq_kvcodec_at(int i); // NULL outside [0, count)
const kvq_kvcodec_traits *kvq_kvcodec_find(const char *name);

/** Creates one codec state. @return KVQ_OK; *out owned by the caller (kvq_kvcodec_free). */
kvq_status kvq_kvcodec_new(const kvq_kvspec *spec, int head_dim, kvq_kv_role role, uint64_t seed,
                           kvq_kvcodec **out, kvq_err *err);
/** kvq_kvcodec_new for a state whose tables will all be replaced by stored ones (c->stored:
 *  nothing is trained; the tables hold no meaning until replaced and checked). */
kvq_status kvq_kvcodec_new_stored(const kvq_kvspec *spec, int head_dim, kvq_kv_role role, uint64_t seed,
                                  kvq_kvcodec **out, kvq_err *err);
/** Checks a state's tables after they were replaced: every value finite, then the codec's
 *  check_tables. Errors name the table. */
kvq_status kvq_kvcodec_check_tables(const kvq_kvcodec *c, kvq_err *err);
void kvq_kvcodec_free(kvq_kvcodec *c);

/** Encodes n tokens x (n, d), n a multiple of c->group, into out (capacity cap bytes,
 *  kvq_kvcodec_bound(c, n) suffices). off (n/group + 1) receives group offsets. */
kvq_status kvq_kvcodec_encode(kvq_kvcodec *c, const float *x, int n, uint8_t *out, size_t cap,
                              size_t *off, kvq_err *err);
/** Decodes n tokens encoded by kvq_kvcodec_encode. */
void kvq_kvcodec_decode(const kvq_kvcodec *c, const uint8_t *in, const size_t *off, int n,
                        float *out);
size_t kvq_kvcodec_bound(const kvq_kvcodec *c, int n);
/** Bytes of one token's execution form (vt->xbytes), 0 when the state has none. */
size_t kvq_kvcodec_xbytes(const kvq_kvcodec *c);
/** Effective bits per element of n tokens stored as encoded (8·bytes/(n·d)), plus
 *  `offset_bits` per group for variable-length codecs. */
double kvq_kvcodec_bits_stored(const kvq_kvcodec *c, const size_t *off, int n);
/** Length-field bits a cache stores per group of a variable-length codec. */
#define KVQ_KV_LEN_BITS 16

/** Serializes the state: params (new reference) holds spec, d, role, seed; blobs get
 *  one entry per table ("tbl/<name>", float32 little-endian). @return KVQ_OK. */
kvq_status kvq_kvcodec_save(const kvq_kvcodec *c, json_t **params, kvq_blob *blobs, int max_blobs,
                            int *n_blobs, kvq_err *err);
/** Rebuilds a state from kvq_kvcodec_save's output: built without training (c->stored), every
 *  table the codec lists must be there with its size, finite, and pass the codec's
 *  check_tables; they replace the built ones. @return KVQ_OK; *out owned by the caller. */
kvq_status kvq_kvcodec_load(const json_t *params, const kvq_blob_view *blobs, int n_blobs,
                            kvq_kvcodec **out, kvq_err *err);

/** Per-(layer, head, role) seed from a global seed (splitmix64 mixing). */
uint64_t kvq_kv_seed(uint64_t seed, int layer, int head, int role);

// ---- the codec-backed runtime cache (libconv/kv/kvcache_codec.c) ----

#include "libconv/kv/kvcache.h"

typedef struct {
    int window;       // the W most recent tokens per (layer, head) kept at fp16
    int boundary;     // 1: K of the first and last layer kept at fp16
    uint64_t seed;    // global seed; states use kvq_kv_seed(seed, layer, head, role)
    int shadow;       // evaluation speed-up: keep an fp32 copy of each encoded token as
                      // decoded (K: score_vec) so attend is dense; results are identical,
                      // memory is not compressed (bits still count the encoded bytes)
    int chunks;       // evaluation of whole chunks (kvq-verify, 2026-11-26): the cache also offers
                      // attend_chunk, which decodes each encoded token once per chunk of queries
                      // into the caller's scratch (as the shadow holds it) and attends the rows:
                      // the shadow's results bit for bit, memory packed. Records are kept (no
                      // execution rows), since decode reads them. Ignored with shadow
} kvq_kvcache_policy;

/** How kvq_kvcache_codec_load / kvq_kv_open_from_file build an evaluation cache. */
enum { KVQ_KV_EVAL_NONE = 0, KVQ_KV_EVAL_SHADOW = 1, KVQ_KV_EVAL_CHUNKS = 2 };

/** A kvq_kvcache whose append/attend/truncate/bits_per_element/free run on the codec
 *  of `spec`. Tokens leave the fp16 window (and, for KIVI keys, fill a 32-token
 *  group) before they are encoded; attend scores keys with the codec's score path
 *  when it has one and decodes otherwise. @return KVQ_OK; *out freed by its ops->free. */
kvq_status kvq_kvcache_codec_new(const char *spec, int n_layers, int n_kv_heads, int head_dim,
                                 int max_ctx, const kvq_kvcache_policy *policy, kvq_kvcache **out,
                                 kvq_err *err);
/** The codec state of (layer, head, role) inside a cache made by kvq_kvcache_codec_new
 *  (borrowed; for serialization into the .kvq manifest). */
const kvq_kvcodec *kvq_kvcache_codec_state(const kvq_kvcache *c, int layer, int head, int role);
/** The policy (window, boundary, seed) of a cache made by kvq_kvcache_codec_new, or NULL for
 *  any other cache (borrowed). */
const kvq_kvcache_policy *kvq_kvcache_codec_policy(const kvq_kvcache *c);
/** Bits per element of a context of n_ctx tokens (window and boundary included), before
 *  anything is stored: for fixed-size codecs the bytes each group is stored in (the formula
 *  rounded up to whole bytes, so it equals bits_per_element once n_ctx tokens are stored), for
 *  variable-length codecs the formula (outlier fraction 0) plus the length field. The one
 *  number every tool reports (docs/KV.md). */
double kvq_kvcache_codec_formula_bits(const kvq_kvcache *c, int n_ctx);

/** The .kvq manifest "kv" section of a cache made by kvq_kvcache_codec_new:
 *  {spec, n_layers, n_kv_heads, head_dim, window, boundary, seed, bits_per_element,
 *  bytes_per_token (both from the formulas at n_ctx), states: [{layer, head, role,
 *  params, tables: [{name, offset, count}]}]} (new reference), and one blob holding every
 *  state's tables as float32 (malloc'd, caller frees; offsets/counts in floats). */
kvq_status kvq_kvcache_codec_save(const kvq_kvcache *c, int n_ctx, json_t **section, float **blob,
                                  size_t *blob_floats, kvq_err *err);
/** Rebuilds a cache from kvq_kvcache_codec_save's section and blob (checked: shape,
 *  seeds, table names, sizes, offsets); eval is KVQ_KV_EVAL_NONE (the runtime's cache),
 *  _SHADOW (policy.shadow) or _CHUNKS (policy.chunks). @return KVQ_OK; *out freed by its ops->free. */
kvq_status kvq_kvcache_codec_load(const json_t *section, const float *blob, size_t blob_floats,
                                  int max_ctx, int eval, kvq_kvcache **out, kvq_err *err);

// ---- the .kvq container (libconv/kv/kvfile.c) ----

struct kvq_writer;
struct kvq_file;

/** The manifest "kv" section (with "entry": "kv/tables") and its float32 table blob, without
 *  writing them: what kvq_kv_write_section adds, and what --dry-run sizes. */
kvq_status kvq_kv_build_section(const char *spec, int n_layers, int n_kv_heads, int head_dim, int n_ctx, int window,
                                int boundary, uint64_t seed, json_t **section, float **blob, size_t *n_floats,
                                kvq_err *err);
/** Converter side: builds the KV section for a model of n_layers × n_kv_heads ×
 *  head_dim (bits predicted at n_ctx), adds its table blob as entry "kv/tables" and sets
 *  manifest["kv"] (section + "entry"). @return KVQ_OK. */
kvq_status kvq_kv_write_section(struct kvq_writer *w, json_t *manifest, const char *spec, int n_layers,
                                int n_kv_heads, int head_dim, int n_ctx, int window, int boundary,
                                uint64_t seed, kvq_err *err);
/** Runtime side: the cache a .kvq declares, or *out = NULL when its manifest has no
 *  "kv" section (the caller keeps its default cache); eval as kvq_kvcache_codec_load's.
 *  @return KVQ_OK. */
kvq_status kvq_kv_open_from_file(struct kvq_file *f, int max_ctx, int eval, kvq_kvcache **out,
                                 kvq_err *err);

// ---- shared helpers used by the codecs (libconv/kv/kvutil.c) ----

/** splitmix64 generator: a value type, no hidden state. */
typedef struct { uint64_t s; } kvq_kvrng;
uint64_t kvq_kvrng_u64(kvq_kvrng *r);
double kvq_kvrng_unif(kvq_kvrng *r);   // [0, 1)
double kvq_kvrng_normal(kvq_kvrng *r); // N(0, 1), Box-Muller

/** The "<name>:<bits>" part most rows share: fld[1] as bits in [lo, hi] into *bits, and no
 *  further field unless allow_more. Errors name spec. */
kvq_status kvq_kvspec_bits(const char *spec, char *const *fld, int nf, int lo, int hi, int allow_more,
                           int *bits, kvq_err *err);

/** Per-token group-32 asymmetric b-bit values (KIVI's and OCTOPUS's V coder; kv_int.c), as plain
 *  functions of (d, b) that each row's V coder calls with its own bits. Layout: ceil(d/32) ×
 *  (fp16 scale, fp16 zero) | d × b-bit q. */
size_t kvq_kv_vgroup_max(int d, int b);
/** Encodes x (d) into o (kvq_kv_vgroup_max bytes, all written). */
void kvq_kv_vgroup_encode(int d, int b, const float *x, uint8_t *o);
void kvq_kv_vgroup_decode(int d, int b, const uint8_t *in, float *out);
double kvq_kv_vgroup_bits(int d, int b);
/** The vsum op (kvq_kvcodec_vt) of these values: out (n_q, d) = Σ_t p[i·ldp + t]·v_t from the records. */
void kvq_kv_vgroup_vsum(int d, int b, const float *p, int ldp, int n_q, const uint8_t *const *rec, int nt, float *out);

/** In-place orthonormal Walsh-Hadamard transform (kernels/cpu/wht.c's butterfly
 *  scaled by 1/√n), n a power of two; self-inverse. */
void kvq_kv_wht(float *x, int n);
int kvq_is_pow2(int n);

/** Trains a K-level Lloyd-Max quantizer for density pdf on [lo, hi] (unnormalized is
 *  fine) on a fine grid until the distortion changes by < 1e-13 relative.
 *  c (K) receives sorted centroids. @return the mean squared error E[(u-û)²], or −1 when
 *  out of memory (callers report KVQ_ERR_NOMEM). */
double kvq_lloydmax(double (*pdf)(double, const void *), const void *arg, double lo, double hi,
                    int K, float *c);
/** Index of the nearest of K sorted centroids. */
int kvq_nearest_sorted(const float *c, int K, float x);

/** Checks of stored tables (the codecs' check_tables), each naming the table and the first
 *  offending index: every value ±1; values non-decreasing inside [lo, hi]; n quaternions
 *  (4 floats each) of unit norm (within 1e-3). */
kvq_status kvq_kv_check_signs(const char *name, const float *x, size_t n, kvq_err *err);
kvq_status kvq_kv_check_increasing(const char *name, const float *x, size_t n, float lo, float hi, kvq_err *err);
kvq_status kvq_kv_check_unit(const char *name, const float *q, int n, kvq_err *err);

/** Hamilton product a·b of quaternions (w, x, y, z). */
void kvq_quat_mul(const float *a, const float *b, float *out);

#endif
