// GPU decoder for HyperQuant-coded weights (Rice mode): uploads a tensor's compact blobs
// once, then decodes it to fp32/bf16 on the device, one lane per random-access group, or
// computes y = W·x without materializing W. Plain C header (no CUDA or JSON types), so C
// code and the no-CUDA stub (kernels/cuda/no_cuda.c) share it. Layout: kernels/hq_layout.h;
// design and exactness argument: docs/CUDA.md.
#ifndef KVQ_CUDA_HQ_DECODE_H
#define KVQ_CUDA_HQ_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What decoding needs, as parsed by kvq_hq_header_parse (copy the fields over). */
typedef struct {
    int lattice;            // kvq_lattice: 0 E8, 1 D4, 2 A2, 3 Z
    int int8;               // 1 = int8 mode (not supported on the GPU yet)
    int cast;               // kvq_cast; only 0 (none) is supported on the GPU
    int tile;               // T, power of two 16..1024
    int64_t rows, cols, cols_p;
    int norm_bits, norm_exp;
    double alpha;
    int k[2];               // Rice parameters per symbol class
    uint64_t seed;          // sign-diagonal seed
} kvq_cuda_hq_desc;

typedef struct kvq_cuda_hq kvq_cuda_hq; // a tensor's compact form resident on the device

typedef enum { KVQ_CUDA_F32 = 0, KVQ_CUDA_BF16 = 1 } kvq_cuda_dtype;

/** Number of usable CUDA devices; 0 with a one-line reason in why (may be NULL), e.g.
 *  "built without CUDA" or the runtime's message. Never fails otherwise. */
int kvq_cuda_device_count(char *why, size_t why_size);
/** One line naming device 0 and its memory (empty if none). */
void kvq_cuda_device_name(char *buf, size_t size);

/** Validates the blobs (sizes, monotone offsets) and copies them to the device with the
 *  scale and sign tables the kernels use. Host buffers stay the caller's; *out is freed
 *  with kvq_cuda_hq_free. @return KVQ_OK, KVQ_ERR_FORMAT (bad blobs), KVQ_ERR_UNSUPPORTED
 *  (int8 mode, a cast, no device), KVQ_ERR_NOMEM / KVQ_ERR_IO (CUDA failures, message
 *  names the call). */
kvq_status kvq_cuda_hq_upload(const kvq_cuda_hq_desc *d, const void *codes, size_t codes_size,
                              const void *norms, size_t norms_size, const void *offsets,
                              size_t offsets_size, kvq_cuda_hq **out, kvq_err *err);
void kvq_cuda_hq_free(kvq_cuda_hq *t);
/** Bytes of the compact form a decode reads (codes + norms + offsets). */
size_t kvq_cuda_hq_compact_bytes(const kvq_cuda_hq *t);

/** Launches the decode of the whole tensor into d_out (device, rows × cols of dtype),
 *  bit-identical to kvq_hq_decode (bf16: its round-to-nearest-even). Asynchronous:
 *  corrupt streams are reported by the next kvq_cuda_hq_check. */
kvq_status kvq_cuda_hq_decode(kvq_cuda_hq *t, void *d_out, kvq_cuda_dtype dtype, kvq_err *err);
/** Launches y = W·x (d_x: cols floats, d_y: rows floats, device) with W decoded on the fly:
 *  x is rotated per tile (H·D·x, zero-padded), and each tile's dot product is taken
 *  against its integer codes, so W is never formed. fp32 accumulation. Asynchronous. */
kvq_status kvq_cuda_hq_matvec(kvq_cuda_hq *t, const float *d_x, float *d_y, kvq_err *err);
/** Waits for the launched work and reports (then clears) stream corruption:
 *  KVQ_ERR_FORMAT naming the first corrupt group. */
kvq_status kvq_cuda_hq_check(kvq_cuda_hq *t, kvq_err *err);

/** Host-memory conveniences: upload nothing, decode or multiply, copy back, check. */
kvq_status kvq_cuda_hq_decode_host(kvq_cuda_hq *t, void *h_out, kvq_cuda_dtype dtype, kvq_err *err);
kvq_status kvq_cuda_hq_matvec_host(kvq_cuda_hq *t, const float *h_x, float *h_y, kvq_err *err);

// ---- device buffers and timing, so C callers (tests, benchmarks) need no CUDA headers
kvq_status kvq_cuda_malloc(void **d, size_t size, kvq_err *err);
void kvq_cuda_free(void *d);
kvq_status kvq_cuda_copy(void *dst, const void *src, size_t size, int to_device, kvq_err *err);
kvq_status kvq_cuda_memset(void *d, int byte, size_t size, kvq_err *err);
kvq_status kvq_cuda_sync(kvq_err *err);
/** Device-to-device copy bandwidth (bytes read + written per second) of a size-byte buffer,
 *  median of reps timed copies. */
kvq_status kvq_cuda_copy_bandwidth(size_t size, int reps, double *bytes_per_s, kvq_err *err);

#ifdef __cplusplus
}
#endif
#endif
