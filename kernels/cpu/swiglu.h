// SwiGLU's elementwise part: out = silu(gate) · up, silu(g) = g / (1 + e^-g).
#ifndef KVQ_KERNELS_SWIGLU_H
#define KVQ_KERNELS_SWIGLU_H

/** n elements; out may alias gate or up. */
void kvq_silu_mul_ref(float *out, const float *gate, const float *up, int n);
/** rows × n where gate and up are the two halves of each row of gu (rows, 2n) — the
 *  fused gate_up layout — writing out (rows, n). OpenMP over rows. */
void kvq_silu_mul_fused(float *out, const float *gu, int rows, int n, int n_threads);

#endif
