// Element types found in checkpoints, their sizes and names, and conversion to and
// from float32 (bf16 and fp16 by bit manipulation; round-to-nearest-even on narrowing).
#ifndef KVQ_DTYPE_H
#define KVQ_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KVQ_DTYPE_F32 = 0,
    KVQ_DTYPE_F16 = 1,
    KVQ_DTYPE_BF16 = 2,
    KVQ_DTYPE_COUNT
} kvq_dtype;

/** Bytes per element. */
size_t kvq_dtype_size(kvq_dtype t);
/** safetensors spelling: "F32", "F16", "BF16". */
const char *kvq_dtype_name(kvq_dtype t);
/** Parses a safetensors dtype string. @return 0 on success, -1 if unknown. */
int kvq_dtype_parse(const char *s, kvq_dtype *out);

float kvq_bf16_to_f32(uint16_t h);
float kvq_f16_to_f32(uint16_t h);
uint16_t kvq_f32_to_bf16(float f);
uint16_t kvq_f32_to_f16(float f);

/** Converts n elements of type t at src (little-endian) to float32 at dst. */
void kvq_dtype_to_f32(kvq_dtype t, const void *src, size_t n, float *dst);
/** Converts n float32 values to type t at dst. */
void kvq_dtype_from_f32(kvq_dtype t, const float *src, size_t n, void *dst);

#endif
