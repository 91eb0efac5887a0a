// Seeded random numbers for tests and benchmarks: splitmix64 and Box-Muller normals.
// One definition so every suite draws the same streams from the same seeds.
#ifndef KVQ_TESTRNG_H
#define KVQ_TESTRNG_H

#include <math.h>
#include <stdint.h>

#include "kernels/splitmix.h"

/** Next 64 random bits; *s is the caller's state (any seed). */
static inline uint64_t rng_next(uint64_t *s) {
    return kvq_splitmix64_next(s);
}

/** A standard normal sample (Box-Muller, two draws). */
static inline double gauss(uint64_t *s) {
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) * 0x1.0p-53, u2 = (double)(rng_next(s) >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
