// Simulated low-precision MMA operand casts (HyperQuant section 4.8 / 5.3): round a
// reconstructed tile to what an INT8, FP8-E4M3, NVFP4 or MXFP4 tensor-core operand can
// hold, and back to float, so the quality cost can be measured. In place, deterministic.
#ifndef KVQ_MMACAST_H
#define KVQ_MMACAST_H

typedef enum {
    KVQ_CAST_NONE = 0,
    KVQ_CAST_INT8,   // per tile: scale = amax/127, symmetric int8
    KVQ_CAST_FP8,    // per tile: scale = amax/448, OCP FP8-E4M3 (RNE, saturating)
    KVQ_CAST_NVFP4,  // 16-element blocks, E4M3 block scale (amax/6) under an fp32 per-tile scale
    KVQ_CAST_MXFP4,  // 32-element blocks, E8M0 scale 2^(floor(log2 amax) - 2), E2M1 saturating
    KVQ_CAST_COUNT
} kvq_cast;

/** "none", "int8", "fp8", "nvfp4", "mxfp4". */
const char *kvq_cast_name(kvq_cast c);
/** @return 0, or -1 if s names no cast. */
int kvq_cast_parse(const char *s, kvq_cast *out);
/** Nearest FP8-E4M3 value (ties to even), saturating at ±448. */
float kvq_e4m3_round(float v);
/** Nearest FP4-E2M1 value {0, .5, 1, 1.5, 2, 3, 4, 6} (ties to even), saturating at ±6. */
float kvq_e2m1_round(float v);
/** Casts y[0..n) in place. n must be a multiple of the block (16 / 32) for the FP4 casts;
 *  a tile treats y as one INT8/FP8 scaling unit. */
void kvq_cast_apply(kvq_cast c, float *y, int n);

#endif
