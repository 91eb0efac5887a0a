// exp(x) for float in plain arithmetic that the compiler vectorizes inside
// `omp simd` loops (libm's expf is a call per element). Cody-Waite reduction
// x = n·ln2 + r, |r| <= ln2/2, degree-6 polynomial for e^r, 2^n by exponent bits.
// Relative error below 3e-7 on [-87, 88]; below -87.3 returns 0 (softmax underflow); NaN in,
// NaN out (the reduction runs on a clamped copy, so no float-to-int conversion of a NaN).
#ifndef KVQ_KERNELS_FASTEXP_H
#define KVQ_KERNELS_FASTEXP_H

#include <stdint.h>
#include <string.h>

// Round to nearest, ties to even. GCC's builtin vectorizes as roundps; clang 14 lacks it, and
// its rintf (the same result in the default rounding mode) vectorizes the same way.
#if defined(__clang__)
#define KVQ_ROUNDEVENF(v) __builtin_rintf(v)
#else
#define KVQ_ROUNDEVENF(v) __builtin_roundevenf(v)
#endif

static inline float kvq_fast_expf(float xin) {
    float x = xin > 88.0f ? 88.0f : xin;
    x = x >= -87.3f ? x : -87.3f; // NaN becomes -87.3 here and is restored at the end
    float n = KVQ_ROUNDEVENF(x * 1.44269504088896341f);
    float r = x - n * 0.693145751953125f; // ln2 split in two for an exact product
    r = r - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    return xin != xin ? xin : x <= -87.3f ? 0.0f : p * s;
}

#endif
