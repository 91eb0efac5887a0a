// Attention sums over the KV cache's execution forms (docs/KV.md "Execution form"): fixed-width
// rows built once per token from the variable-length records of HQMQ (per-chunk codes,
// kernels/kv_hqmq.h) and HyperQuant-KV (integer lattice codes, kernels/kv_hqkv.h), read here
// with AVX2 where the CPU has it; each has a plain reference (`_ref`) the tests compare with.
#ifndef KVQ_KERNELS_KVEXEC_H
#define KVQ_KERNELS_KVEXEC_H

#include <stddef.h>
#include <stdint.h>

/** HQMQ rows: nt tokens xs bytes apart from x, each fp32 scale σ/(2^b_r − 1) then nch chunk
 *  codes idx | r << ib (uint32 when wide, else uint16); cb the joint codebook (rows of 4).
 *  Scores: s[i·lds + t] = scale_t · Σ_k r_k ⟨q_i[4k..4k+4), cb[idx_k]⟩ for n_q queries of
 *  nch·4 floats (ldq apart; the caller zero-pads a head_dim that is not a multiple of 4). */
void kvq_kvx_hqmq_score(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt,
                        const float *q, int n_q, int ldq, float *s, int lds);
void kvq_kvx_hqmq_score_ref(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt,
                            const float *q, int n_q, int ldq, float *s, int lds);
/** Values: out[i·nch·4 + 4k + j] += Σ_t p[i·ldp + t] · scale_t · r_k · cb[idx_k][j] (n_q rows). */
void kvq_kvx_hqmq_vsum(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt,
                       const float *p, int ldp, int n_q, float *out);
void kvq_kvx_hqmq_vsum_ref(const float *cb, int ib, int wide, int nch, const uint8_t *x, size_t xs, int nt,
                           const float *p, int ldp, int n_q, float *out);

/** Lattice-code rows (HyperQuant-KV): nt tokens xs bytes apart from x, each fp32 γ, a u32 (not
 *  read here), then d integer codes c (int16 when wide, else int8). A token is
 *  v_t = γ_t·gmul·(emb ⊙ c_t − U_t), emb (d) NULL = ones, U (nt, d) NULL = zeros.
 *  Scores: s[i·lds + t] = ⟨q_i, v_t⟩ for n_q queries of d floats ldq apart. */
void kvq_kvx_lat_score(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                       const float *U, const float *q, int n_q, int ldq, float *s, int lds);
void kvq_kvx_lat_score_ref(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                           const float *U, const float *q, int n_q, int ldq, float *s, int lds);
/** Values: out[i·d + j] += Σ_t p[i·ldp + t] · v_t[j] (n_q rows). */
void kvq_kvx_lat_vsum(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                      const float *U, const float *p, int ldp, int n_q, float *out);
void kvq_kvx_lat_vsum_ref(const uint8_t *x, size_t xs, int wide, int d, int nt, float gmul, const float *emb,
                          const float *U, const float *p, int ldp, int n_q, float *out);

/** The z of nb 2E8 blocks of HyperQuant-KV's dither (libconv/kv/kv_hqkv.c: U = z − Q(z)): block
 *  b's draws are u_i = float(mix(s0 + (8b + i + 2)·golden) >> 11 · 2^−53), splitmix64 random
 *  access (kernels/splitmix.h), and z_j = Σ_i u_i·gen(E8, i, j) in float, summed in i order
 *  (kernels/kv_hqkv.h kvq_hk_gen) — bit-identical in both versions. z gets 8·nb floats. */
void kvq_kvx_e8_dither_z(uint64_t s0, int nb, float *z);
void kvq_kvx_e8_dither_z_ref(uint64_t s0, int nb, float *z);

#endif
