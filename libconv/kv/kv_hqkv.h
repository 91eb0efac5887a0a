// HyperQuant-KV records as lattice codes (libconv/kv/kv_hqkv.c): what the GPU execution
// layout (kv_gpu.c, docs/KV.md) needs from a state and its variable-length Rice records.
#ifndef KVQ_KV_HQKV_CODES_H
#define KVQ_KV_HQKV_CODES_H

#include <stddef.h>
#include <stdint.h>

#include "libconv/kv/kvcodec.h"

/** A state's parameters (pointers into the state, which owns them). */
typedef struct {
    int lat;             // kvq_lattice (e8, d4, a2, z)
    int n;               // lattice dimension
    int rot;             // 0 none, 1 ±1 signs, 2 Haar orthogonal Q (y = Q x)
    int dither;          // subtractive dither, counter stored per token
    double scale;        // α·√d: a token is γ/scale · Sᵀ(embed(c) − U)
    uint64_t seed;       // the state's seed (the dither stream's)
    const float *signs;  // (d)
    const float *Q;      // (d, d) row-major, rot = 2 only
} kvq_kv_hqkv_info;

/** @return 0 and fills *o when c is an hqkv state, else -1. */
int kvq_kv_hqkv_info_of(const kvq_kvcodec *c, kvq_kv_hqkv_info *o);
/** One record (n bytes) → γ, the dither counter (0 without dither) and the d integer lattice
 *  codes (A2: ny, nx per block). @return 0, or -1 for a damaged record (as the decoder, which
 *  then gives zeros). */
int kvq_kv_hqkv_codes(const kvq_kvcodec *c, const uint8_t *rec, size_t n, float *gamma, uint32_t *ctr, int32_t *codes);
/** The record the encoder writes for those codes (max_bytes bytes at rec, *n used). @return
 *  KVQ_OK, or KVQ_ERR_FORMAT when a block is not a lattice point. */
kvq_status kvq_kv_hqkv_record(const kvq_kvcodec *c, float gamma, uint32_t ctr, const int32_t *codes, uint8_t *rec, size_t *n,
                              kvq_err *err);

#endif
