// Stand-in for build/libkvqcuda.a when the project is built without nvcc: every entry
// point of kernels/cuda/hq_decode.h, hqx.h, pqx.h, ops.h, kv_attn.h and verify_score.h reports "built without CUDA", so the GPU suites
// (tests/test_cuda_*.c) and benchmarks (tests/bench/cuda_*.c) still link and skip.
#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/hqx.h"
#include "kernels/cuda/kv_attn.h"
#include "kernels/cuda/pqx.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/verify_score.h"

#define NO_CUDA(err) kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "built without CUDA (nvcc not found at build time)")

int kvq_cuda_device_count(char *why, size_t n) {
    if (why && n) snprintf(why, n, "built without CUDA (nvcc not found at build time)");
    return 0;
}
void kvq_cuda_device_name(char *buf, size_t size) { if (size) buf[0] = 0; }
kvq_status kvq_cuda_hq_upload(const kvq_cuda_hq_desc *d, const void *codes, size_t codes_size, const void *norms,
                              size_t norms_size, const void *offsets, size_t offsets_size, kvq_cuda_hq **out,
                              kvq_err *err) {
    *out = NULL;
    return NO_CUDA(err);
}
void kvq_cuda_hq_free(kvq_cuda_hq *t) { (void)t; }
size_t kvq_cuda_hq_compact_bytes(const kvq_cuda_hq *t) { return 0; }
kvq_status kvq_cuda_hq_decode(kvq_cuda_hq *t, void *d_out, kvq_cuda_dtype dtype, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hq_matvec(kvq_cuda_hq *t, const float *d_x, float *d_y, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hq_check(kvq_cuda_hq *t, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hq_decode_host(kvq_cuda_hq *t, void *h_out, kvq_cuda_dtype dtype, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hq_matvec_host(kvq_cuda_hq *t, const float *h_x, float *h_y, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_malloc(void **d, size_t size, kvq_err *err) {
    *d = NULL;
    return NO_CUDA(err);
}
void kvq_cuda_free(void *d) { (void)d; }
kvq_status kvq_cuda_copy(void *dst, const void *src, size_t size, int to_device, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_memset(void *d, int byte, size_t size, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_sync(kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_copy_bandwidth(size_t size, int reps, double *bps, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hqx_upload(const kvq_hqx *w, kvq_cuda_hqx **out, kvq_err *err) {
    *out = NULL;
    return NO_CUDA(err);
}
void kvq_cuda_hqx_free(kvq_cuda_hqx *t) { (void)t; }
size_t kvq_cuda_hqx_bytes(const kvq_cuda_hqx *t) { return 0; }
void kvq_cuda_hqx_set_esc16(int on) { (void)on; }
int kvq_cuda_hqx_esc16(const kvq_cuda_hqx *t) { return 0; }
kvq_status kvq_cuda_hqx_matvec(kvq_cuda_hqx *t, const float *d_x, float *d_y, int int8, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hqx_matvec_host(kvq_cuda_hqx *t, const float *h_x, float *h_y, int int8, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hqx_time(kvq_cuda_hqx *t, int reps, int int8, double *ms, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hqx_time_stream(kvq_cuda_hqx *const *t, int n, int reps, int prep, double *ms, kvq_err *err) {
    (void)t; (void)n; (void)reps; (void)prep; (void)ms;
    return NO_CUDA(err);
}
kvq_status kvq_cuda_rmsnorm(float *y, const float *x, const float *w, int rows, int n, float eps, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_rope(float *x, int T, int n_heads, int head_dim, int rot_dim, int pos, const int *d_pos,
                         const kvq_cuda_seqs *sq, const float *inv_freq, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_qkv_split(const float *qkv, const float *bias, float *q, float *k, float *v, int T, int q_dim,
                              int kv_dim, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_silu_mul(float *h, const float *gu, int T, int ffn, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_add(float *x, const float *y, size_t n, kvq_err *err) { return NO_CUDA(err); }
void kvq_cuda_dense_set_variant(int v) { (void)v; }
kvq_status kvq_cuda_dense_matmul(const void *w, int bf16, const float *x, float *y, int T, int64_t cols, int64_t rows,
                                 int accumulate, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_attention(const float *q, const float *k, const float *v, float *kc, float *vc, float *out, int T,
                              int pos, const int *d_pos, const kvq_cuda_seqs *sq, int n_heads, int n_kv_heads, int head_dim,
                              int max_ctx, float scale, kvq_err *err) {
    return NO_CUDA(err);
}
int kvq_cuda_attention_max_ctx(int n_heads, int n_kv_heads, int head_dim) { (void)n_heads, (void)n_kv_heads, (void)head_dim; return 0; }
kvq_status kvq_cuda_attention_init(int n_heads, int n_kv_heads, int head_dim, int max_ctx, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_stream_init(kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_copy_async(void *dst, const void *src, size_t size, int to_device, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_stream_sync(kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_capture_begin(kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_capture_end(int abort, void **graph, kvq_err *err) {
    *graph = NULL;
    return NO_CUDA(err);
}
kvq_status kvq_cuda_graph_launch(void *graph, kvq_err *err) { return NO_CUDA(err); }
long kvq_cuda_graph_launches(void) { return 0; }
void kvq_cuda_graph_free(void *graph) { (void)graph; }
kvq_status kvq_cuda_tl_mark(int variant, int i, kvq_err *err) {
    (void)variant, (void)i;
    return NO_CUDA(err);
}
kvq_status kvq_cuda_tl_elapsed(int variant, int i, float *ms, kvq_err *err) {
    (void)variant, (void)i, (void)ms;
    return NO_CUDA(err);
}
kvq_status kvq_cuda_hqx_matmul(kvq_cuda_hqx *t, const float *d_x, int n_tok, float *d_y, int64_t ldy, int accumulate,
                               kvq_err *err) {
    return NO_CUDA(err);
}
int kvq_cuda_hqx_fused_tokens(const kvq_cuda_hqx *t) { return 0; }
void kvq_cuda_hqx_set_decode(int rows_per_warp) { (void)rows_per_warp; }
void kvq_cuda_hqx_set_decode_general(int on) { (void)on; }
void kvq_cuda_hqx_set_persist(int depth) { (void)depth; }
void kvq_cuda_hqx_set_tokens(int on) { (void)on; }
void kvq_cuda_hqx_set_mma(int on) { (void)on; }
void kvq_cuda_hqx_set_pdl(int on) { (void)on; }
void kvq_cuda_hqx_set_prep(int mode) { (void)mode; }
void kvq_cuda_hqx_set_trig(int on) { (void)on; }
void kvq_cuda_hqx_set_esc_pf(int on) { (void)on; }
void kvq_cuda_attn_set_pdl(int on) { (void)on; }
void kvq_cuda_hqx_set_fold(int mode) { (void)mode; }
long kvq_cuda_hqx_fold_launches(void) { return 0; }
void kvq_cuda_hqx_set_lean(int on) { (void)on; }
void kvq_cuda_hqx_set_lean_pf(int rows) { (void)rows; }
long kvq_cuda_hqx_lean_launches(void) { return 0; }
kvq_status kvq_cuda_hqx_fused_init(kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_hqx_matmul_parts(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x, int n_tok,
                                     float *d_y, int64_t ldy, int accumulate, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_hqx_matmul_parts_in(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x,
                                        const kvq_cuda_xin *xin, int n_tok, float *d_y, int64_t ldy, int accumulate,
                                        kvq_err *err) {
    return NO_CUDA(err);
}
void kvq_cuda_attend_set_inputs(const kvq_cuda_ain *in) { (void)in; }
void kvq_cuda_attend_set_tile(int on) { (void)on; }
void kvq_cuda_attend_set_cmin(int cmin) { (void)cmin; }
int kvq_cuda_attend_splits(int n_ctx) { (void)n_ctx; return 0; } // no split kernel
kvq_status kvq_cuda_attend(const float *q, const float *kc, const float *vc, float *out, int T, int pos, const int *d_pos,
                           const kvq_cuda_seqs *sq, int n_heads, int n_kv_heads, int head_dim, int max_ctx, float scale, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_attn_in_rows(const float *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps,
                                 float *q, float *k, float *v, int T, int pos, const int *d_pos, const kvq_cuda_seqs *sq,
                                 int n_heads, int n_kv_heads, int head_dim, int rot_dim, const float *inv_freq, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_attn_in(const float *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps, float *q,
                            float *kc, float *vc, int T, int pos, const int *d_pos, const kvq_cuda_seqs *sq, int n_heads,
                            int n_kv_heads, int head_dim, int rot_dim, const float *inv_freq, int max_ctx, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_argmax(const float *x, int rows, int n, int *d_out, kvq_err *err) { return NO_CUDA(err); }

size_t kvq_gkv_scratch_bytes(const kvq_gkv_cache *c, int chunk) { return 0; }
int kvq_gkv_auto_chunk(const kvq_gkv_cache *c) { return 64; }
kvq_status kvq_gkv_attend(const kvq_gkv_cache *c, const float *q, float *out, float scale, int chunk, void *scratch,
                          kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_gkv_attend_rows(const kvq_gkv_cache *c, const float *q, float *out, float scale, int pos0, int T, void *scratch,
                               size_t scratch_bytes, kvq_err *err) {
    return NO_CUDA(err);
}
size_t kvq_gkv_rows_scratch_bytes(const kvq_gkv_cache *c, int pos0, int T) { return 0; }
kvq_status kvq_gkv_attend_seqs(const kvq_gkv_cache *c, const float *q, float *out, float scale, int window, int T, const int *d_seq,
                               const int *d_pos, void *scratch, size_t scratch_bytes, kvq_err *err) {
    return NO_CUDA(err);
}
size_t kvq_gkv_seqs_scratch_bytes(const kvq_gkv_cache *c, int T) { return 0; }
kvq_status kvq_gkv_append_seqs(const kvq_gkv_cache *c, const float *k, const float *v, int window, int T, const int *d_seq,
                               const int *d_pos, kvq_err *err) {
    return NO_CUDA(err);
}
size_t kvq_gkv_rows_scratch_bound(const kvq_gkv_cache *c, int T) { return 0; }
kvq_status kvq_gkv_append(kvq_gkv_cache *c, const float *k, const float *v, int T, int window, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_gkv_pool_check(const kvq_gkv_cache *c, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_gkv_append_step(kvq_gkv_cache *c, const float *k, const float *v, int window, const int *d_pos, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_gkv_attend_step(const kvq_gkv_cache *c, const float *q, float *out, float scale, int window, const int *d_pos,
                               void *scratch, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_gkv_time(const kvq_gkv_cache *caches, int rotate, const float *q, float *out, float scale, int chunk,
                        void *scratch, int reps, int graph_calls, double *ms, kvq_err *err) {
    return NO_CUDA(err);
}
void kvq_gkv_set_int8_query(int on) { (void)on; }
void kvq_gkv_set_half_values(int on) { (void)on; }
void kvq_gkv_set_tc(int on) { (void)on; }
void kvq_gkv_set_tc_turbo(int on) { (void)on; }
void kvq_gkv_set_tc_tprod(int on) { (void)on; }
void kvq_gkv_set_tprod_pre(int on) { (void)on; }
void kvq_gkv_set_turbo_pre(int on) { (void)on; }
void kvq_gkv_set_tc_oct(int on) { (void)on; }
int kvq_gkv_tc_active(const kvq_gkv_cache *c) { (void)c; return 0; }
void kvq_gkv_set_tc_pipe(int stages) { (void)stages; }
void kvq_gkv_set_tc_lean(int on) { (void)on; }
void kvq_gkv_set_tc_q8(int on) { (void)on; }
int kvq_gkv_tc_q8(const kvq_gkv_cache *c) { (void)c; return 0; }
int kvq_gkv_tc_stages(const kvq_gkv_cache *c) { (void)c; return 0; }
void kvq_gkv_set_fuse_merge(int on) { (void)on; }
void kvq_gkv_set_pdl(int on) { (void)on; }
int kvq_gkv_merge_fused(const kvq_gkv_cache *c) { (void)c; return 0; }
void kvq_gkv_set_waves(float waves) { (void)waves; }
void kvq_gkv_set_chunk_floor(int positions) { (void)positions; }

int kvq_cuda_tc_available(char *why, size_t n) {
    if (why && n) snprintf(why, n, "built without CUDA (nvcc not found at build time)");
    return 0;
}
kvq_status kvq_cuda_gemm_bf16(const void *w, int64_t ldw, const void *x, int64_t ldx, float *y, int64_t ldy, int T,
                              int64_t rows, int64_t k, int accumulate, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_to_bf16(const float *x, void *xb, int T, int64_t n, int64_t ld, kvq_err *err) { return NO_CUDA(err); }
kvq_status kvq_cuda_dense_matmul_tc(const void *w, const float *x, float *y, int T, int64_t cols, int64_t rows,
                                    int64_t ldy, int accumulate, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_tc_scratch(int which, size_t bytes, void **out, kvq_err *err) { return NO_CUDA(err); }
size_t kvq_cuda_tc_scratch_bytes(void) { return 0; }
kvq_status kvq_cuda_hqx_matmul_tc(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x, int n_tok,
                                  float *d_y, int64_t ldy, int accumulate, kvq_err *err) {
    return NO_CUDA(err);
}
kvq_status kvq_cuda_hqx_decode_rot(kvq_cuda_hqx *t, int64_t r0, int64_t nr, void *d_out, int bf16, kvq_err *err) {
    return NO_CUDA(err);
}
void kvq_cuda_hqx_set_tc_block(int64_t values) { (void)values; }
int kvq_cuda_hqx_attend_can_prep(const kvq_cuda_hqx *o, int n_heads, int n_kv_heads, int head_dim) {
    (void)o; (void)n_heads; (void)n_kv_heads; (void)head_dim;
    return 0;
}
kvq_status kvq_cuda_hqx_attend_prep(const float *q, const float *kc, const float *vc, float *out, int pos, const int *d_pos,
                                    int n_heads, int n_kv_heads, int head_dim, int max_ctx, float scale,
                                    kvq_cuda_hqx *o, kvq_err *err) {
    (void)q; (void)kc; (void)vc; (void)out; (void)pos; (void)d_pos; (void)n_heads; (void)n_kv_heads; (void)head_dim;
    (void)max_ctx; (void)scale; (void)o;
    return NO_CUDA(err);
}
kvq_status kvq_cuda_pqx_upload(const kvq_pqx *w, kvq_cuda_pqx **out, kvq_err *err) {
    (void)w;
    *out = NULL;
    return NO_CUDA(err);
}
void kvq_cuda_pqx_free(kvq_cuda_pqx *t) { (void)t; }
size_t kvq_cuda_pqx_bytes(const kvq_cuda_pqx *t) { (void)t; return 0; }
size_t kvq_cuda_pqx_scratch_bytes(const kvq_cuda_pqx *t) { (void)t; return 0; }
int kvq_cuda_pqx_batch(const kvq_cuda_pqx *t) { (void)t; return 0; }
int kvq_cuda_pqx_qet_kernel(const kvq_cuda_pqx *t) { (void)t; return -1; }
kvq_status kvq_cuda_pqx_matmul(kvq_cuda_pqx *const *t, int n, const int64_t *row0, const float *d_x, int n_tok,
                               float *d_y, int64_t ldy, int accumulate, void *d_scratch, kvq_err *err) {
    (void)t; (void)n; (void)row0; (void)d_x; (void)n_tok; (void)d_y; (void)ldy; (void)accumulate; (void)d_scratch;
    return NO_CUDA(err);
}
kvq_status kvq_cuda_pqx_matmul_host(kvq_cuda_pqx *t, const float *h_x, int n_tok, float *h_y, kvq_err *err) {
    (void)t; (void)h_x; (void)n_tok; (void)h_y;
    return NO_CUDA(err);
}
kvq_status kvq_cuda_pqx_time(kvq_cuda_pqx *t, int n_tok, int reps, double *ms, kvq_err *err) {
    (void)t; (void)n_tok; (void)reps; (void)ms;
    return NO_CUDA(err);
}
kvq_status kvq_cuda_verify_score(const float *d_ref, const float *d_q, const int32_t *d_target, int rows, int vocab,
                                 kvq_vscore *d_out, kvq_err *err) { return NO_CUDA(err); }
