// splitmix64 (Steele, Lea, Flood 2014): the one seeded generator of the project, usable from
// C and CUDA. Every seeded stream (HyperQuant sign diagonals, k-means++, KV-codec states,
// calibration, tests) is built from these two functions, so the same seed gives the same
// bytes everywhere.
#ifndef KVQ_SPLITMIX_H
#define KVQ_SPLITMIX_H

#include <stdint.h>

#ifdef __CUDACC__
#define KVQ_SM_HD __host__ __device__
#else
#define KVQ_SM_HD
#endif

#define KVQ_SPLITMIX_GOLDEN 0x9e3779b97f4a7c15ull

/** The splitmix64 output function of state z. */
KVQ_SM_HD static inline uint64_t kvq_splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/** Next value of the stream whose state is *s (advances it by the golden increment). */
KVQ_SM_HD static inline uint64_t kvq_splitmix64_next(uint64_t *s) { return kvq_splitmix64_mix(*s += KVQ_SPLITMIX_GOLDEN); }

#endif
