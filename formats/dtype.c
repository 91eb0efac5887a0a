// dtype sizes, names and float conversions (bit-exact, no library does this for us in C).
#include "formats/dtype.h"

#include <math.h>
#include <string.h>

static const struct { const char *name; size_t size; } dtype_info[KVQ_DTYPE_COUNT] = {
    [KVQ_DTYPE_F32] = {"F32", 4},
    [KVQ_DTYPE_F16] = {"F16", 2},
    [KVQ_DTYPE_BF16] = {"BF16", 2},
};

size_t kvq_dtype_size(kvq_dtype t) { return t < KVQ_DTYPE_COUNT ? dtype_info[t].size : 0; }
const char *kvq_dtype_name(kvq_dtype t) { return t < KVQ_DTYPE_COUNT ? dtype_info[t].name : "?"; }

int kvq_dtype_parse(const char *s, kvq_dtype *out) {
    for (int i = 0; i < KVQ_DTYPE_COUNT; i++)
        if (strcmp(s, dtype_info[i].name) == 0) { *out = (kvq_dtype)i; return 0; }
    return -1;
}

float kvq_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t kvq_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1);                                             // RNE
    return (uint16_t)(u >> 16);
}

float kvq_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        if (m == 0) u = s;
        else { // subnormal: normalise
            float f = ldexpf((float)m, -24);
            memcpy(&u, &f, 4);
            u |= s;
        }
    } else if (e == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t kvq_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00);       // NaN
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00);      // overflow -> Inf (RNE boundary 65520)
    if (a < 0x38800000u) {                                    // subnormal or zero in f16
        float af;
        memcpy(&af, &a, 4);
        return (uint16_t)(s | (uint32_t)lrintf(af * 16777216.0f)); // 2^24, RNE via lrintf
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1) - (112u << 23);
    return (uint16_t)(s | (r >> 13));
}

void kvq_dtype_to_f32(kvq_dtype t, const void *src, size_t n, float *dst) {
    const uint8_t *p = src;
    switch (t) {
    case KVQ_DTYPE_F32: memcpy(dst, src, n * 4); break;
    case KVQ_DTYPE_F16:
        for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); dst[i] = kvq_f16_to_f32(h); }
        break;
    case KVQ_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); dst[i] = kvq_bf16_to_f32(h); }
        break;
    default: break;
    }
}

void kvq_dtype_from_f32(kvq_dtype t, const float *src, size_t n, void *dst) {
    uint8_t *p = dst;
    switch (t) {
    case KVQ_DTYPE_F32: memcpy(dst, src, n * 4); break;
    case KVQ_DTYPE_F16:
        for (size_t i = 0; i < n; i++) { uint16_t h = kvq_f32_to_f16(src[i]); memcpy(p + 2 * i, &h, 2); }
        break;
    case KVQ_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) { uint16_t h = kvq_f32_to_bf16(src[i]); memcpy(p + 2 * i, &h, 2); }
        break;
    default: break;
    }
}
