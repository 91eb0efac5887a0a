// Simulated MMA operand casts (see mmacast.h): rounding to INT8, FP8-E4M3, NVFP4 and MXFP4
// with their scale rules. Used by the HyperQuant decoder's cast= option.
#include "libconv/quant/mmacast.h"

#include <math.h>
#include <string.h>

static const char *const cast_names[KVQ_CAST_COUNT] = {"none", "int8", "fp8", "nvfp4", "mxfp4"};

const char *kvq_cast_name(kvq_cast c) { return c >= 0 && c < KVQ_CAST_COUNT ? cast_names[c] : "?"; }

int kvq_cast_parse(const char *s, kvq_cast *out) {
    for (int i = 0; i < KVQ_CAST_COUNT; i++)
        if (strcmp(s, cast_names[i]) == 0) { *out = (kvq_cast)i; return 0; }
    return -1;
}

float kvq_e4m3_round(float v) {
    float a = fabsf(v);
    if (!(a < 448.0f)) return copysignf(448.0f, v);
    float step;
    if (a < 0x1p-6f) step = 0x1p-9f; // subnormals
    else {
        int e;
        frexpf(a, &e);              // a = m·2^e, m in [0.5, 1): leading bit 2^(e-1)
        step = ldexpf(1.0f, e - 4); // 3 mantissa bits
    }
    float r = rintf(a / step) * step;
    return copysignf(r > 448.0f ? 448.0f : r, v);
}

float kvq_e2m1_round(float v) {
    float a = fabsf(v);
    if (!(a < 6.0f)) return copysignf(6.0f, v);
    float step = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
    float r = rintf(a / step) * step;
    return copysignf(r > 6.0f ? 6.0f : r, v);
}

static float amax_of(const float *y, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(y[i]));
    return m;
}

void kvq_cast_apply(kvq_cast c, float *y, int n) {
    float am = amax_of(y, n);
    if (c == KVQ_CAST_NONE || am == 0.0f) return;
    switch (c) {
    case KVQ_CAST_INT8: {
        float s = am / 127.0f;
        for (int i = 0; i < n; i++) {
            float q = rintf(y[i] / s);
            y[i] = fminf(fmaxf(q, -127.0f), 127.0f) * s;
        }
        break;
    }
    case KVQ_CAST_FP8: {
        float s = am / 448.0f;
        for (int i = 0; i < n; i++) y[i] = kvq_e4m3_round(y[i] / s) * s;
        break;
    }
    case KVQ_CAST_NVFP4: {
        float ts = am / (6.0f * 448.0f); // fp32 scale so block scales use E4M3's range
        for (int b = 0; b < n; b += 16) {
            float bs = kvq_e4m3_round(amax_of(y + b, 16) / 6.0f / ts) * ts;
            for (int i = b; i < b + 16; i++) y[i] = bs > 0.0f ? kvq_e2m1_round(y[i] / bs) * bs : 0.0f;
        }
        break;
    }
    case KVQ_CAST_MXFP4: {
        for (int b = 0; b < n; b += 32) {
            float bm = amax_of(y + b, 32);
            if (bm == 0.0f) continue;
            int e;
            frexpf(bm, &e); // floor(log2 bm) = e - 1
            float s = ldexpf(1.0f, e - 1 - 2);
            for (int i = b; i < b + 32; i++) y[i] = kvq_e2m1_round(y[i] / s) * s;
        }
        break;
    }
    default: break;
    }
}
