// Thread-count convention shared by the CPU kernels: n_threads <= 0 means the
// OpenMP default (OMP_NUM_THREADS or the number of cores).
#ifndef KVQ_KERNELS_THREADS_H
#define KVQ_KERNELS_THREADS_H

#include <omp.h>

static inline int kvq_nthreads(int n) { return n > 0 ? n : omp_get_max_threads(); }

#endif
