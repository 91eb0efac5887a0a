// Seeded k-means (k-means++ seeding, Lloyd iterations) on small-dimensional points,
// used by the QET and PQ codecs to cluster each subspace. The result depends only on
// the input and the seed, never on the number of OpenMP threads.
#ifndef KVQ_KMEANS_H
#define KVQ_KMEANS_H

#include <stdint.h>

/** Clusters n points of `dim` floats (row-major, contiguous) into k centroids.
 *  k-means++ seeding drawn from a splitmix64 stream seeded by `seed`, then at most
 *  max_iter Lloyd steps, stopping early when no assignment changes. Empty clusters are
 *  re-seeded with the point farthest from its centroid (lowest index on ties).
 *  Requires 1 <= k <= n. Writes cent (k × dim) and assign (n); assign[i] is the nearest
 *  centroid (lowest index on ties) of the returned centroids. The assignment step runs
 *  in parallel over points (OpenMP) when called outside a parallel region; sums are
 *  accumulated serially in point order, so results are bit-identical to kvq_kmeans_ref.
 *  @return the number of Lloyd updates performed, or −1 when out of memory (nothing written
 *  then). Caller owns all buffers. */
int kvq_kmeans(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed,
               float *cent, uint32_t *assign);

/** Fast-path switches and threads; NULL means both paths on and the OpenMP default. */
typedef struct {
    int simd;      // 1: AVX2 scans and seeding when the CPU has AVX2; 0: plain C
    int prune;     // 1: skip the groups of centroids that per-point bounds prove farther
    int n_threads; // threads of the assignment step (0: the OpenMP default; nested calls get 1 anyway)
} kvq_kmeans_opts;

/** kvq_kmeans with the fast path's parts and threads chosen by opts (NULL = all on, default
 *  threads). Whatever opts says, the results are bit-identical to kvq_kmeans_ref. */
int kvq_kmeans_ex(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed,
                  float *cent, uint32_t *assign, const kvq_kmeans_opts *opts);

/** The plain serial reference of kvq_kmeans (same contract, same results). */
int kvq_kmeans_ref(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed,
                   float *cent, uint32_t *assign);

/** Index of the centroid nearest to p (squared L2, lowest index on ties); *d2 gets the distance. */
uint32_t kvq_kmeans_nearest(const float *p, const float *cent, int64_t k, int dim, float *d2);

/** assign[i] = kvq_kmeans_nearest(x + i·dim, cent, k, dim) for each of the n points, by the
 *  blocked (AVX2 when available) scan; serial (call it from parallel code). Caller owns all. */
void kvq_kmeans_assign(const float *x, int64_t n, int dim, const float *cent, int64_t k, uint32_t *assign);

#endif
