// Walsh–Hadamard transform on float vectors of power-of-two length (Sylvester order):
// the O(n log n) in-place butterfly used by HyperQuant's randomized Hadamard transform,
// and an O(n²) reference that evaluates H_n entry by entry (H[i][j] = (-1)^popcount(i&j)).
#ifndef KVQ_WHT_H
#define KVQ_WHT_H

#include <stdint.h>

/** In-place UNNORMALIZED transform x <- H_n x (entries ±1; H_n·H_n = n·I), n a power of
 *  two ≤ 2^20. Multiply by 1/√n for the orthonormal transform. Butterfly order is fixed
 *  (stride 1, 2, 4, ...), so results are bit-reproducible across calls. */
void kvq_wht(float *x, int n);
/** In-place unnormalized transform of int32 values (exact as long as n·max|x| < 2^31): the
 *  result does not depend on the butterfly order, so every implementation (CPU, GPU)
 *  produces the same integers. Larger inputs wrap modulo 2^32 (no undefined behaviour). */
void kvq_wht_i32(int32_t *x, int n);
/** kvq_wht without the AVX2 path (SSE2 or scalar), bit-identical; tests compare both. */
void kvq_wht_portable(float *x, int n);
/** kvq_wht_i32 without the AVX2 path (SSE2 or scalar): what runs on CPUs without AVX2; tests
 *  compare both. */
void kvq_wht_i32_portable(int32_t *x, int n);
/** The unnormalized butterfly of kvq_wht in double, in place (plain loop: covariances for LDLQ). */
void kvq_wht_f64(double *x, int n);
/** Reference: y = H_n x computed in double, O(n²); x and y must not alias. */
void kvq_wht_ref(const float *x, double *y, int n);

#endif
