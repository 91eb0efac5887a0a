// Device helpers the tensor-core attention kernels share (kv_attn_tc.cu: int, KIVI, TurboQuant,
// turboquant-prod; kv_attn_oct.cu: OCTOPUS keys): fp16 pairs as 32-bit words and back, the fp16
// bits of a constant, the m16n8k16 mma, and 2^x.
#ifndef KVQ_CUDA_KV_TC_DEV_CUH
#define KVQ_CUDA_KV_TC_DEV_CUH

#include <stdint.h>
#include <string.h>

#include <cuda_fp16.h>

__device__ __forceinline__ __half2 u2h(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return h;
}
__device__ __forceinline__ uint32_t h2u(__half2 h) {
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

// The fp16 bits of v, exactly representable and normal (the fix-up constants, immediates of the HFMA2).
__host__ __device__ constexpr uint32_t f16c(float v) {
    uint32_t sg = v < 0.0f ? 0x8000u : 0u;
    if (v < 0.0f) v = -v;
    int e = 0;
    while (v >= 2.0f) v *= 0.5f, e++;
    while (v < 1.0f) v *= 2.0f, e--;
    return sg | (uint32_t)(e + 15) << 10 | (uint32_t)((v - 1.0f) * 1024.0f);
}

// D += A·B, m16n8k16, fp16 A (row) and B (col), fp32 C/D (PTX ISA fragment layouts: a lane
// (g = lane/4, t = lane%4) holds A rows g, g+8 × cols 2t, 2t+1, 2t+8, 2t+9; B rows (k) 2t, 2t+1,
// 2t+8, 2t+9 × col g; C rows g, g+8 × cols 2t, 2t+1).
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 2^x by MUFU.EX2 alone (LEAN): ex2.approx.ftz, where exp2f adds a range test and two multiplies per
// call so that results below 2^-126 come out subnormal; here they are 0. Equal to exp2f for x ≥ −126
// (both are ex2.approx); a p < 2^-126 is 0 in fp16 for Σ p·V either way, and in the fp32 sums it is
// below the rounding of the 1 that the running max contributes.
template <int LEAN>
__device__ __forceinline__ float tc_exp2(float x) {
    if (!LEAN) return exp2f(x);
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

#endif
