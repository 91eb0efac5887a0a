// Timing helpers shared by the CPU kernel benchmarks (pq_bench, qet_bench): the median of
// several timed calls of a statement (OpenMP's wall clock).
#ifndef KVQ_BENCH_TIME_H
#define KVQ_BENCH_TIME_H

#include <omp.h>
#include <stdlib.h>

static int bench_cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define REPS_MAX 64
// Median seconds of reps (1..REPS_MAX) calls of the statement, into med.
#define TIME(med, reps, stmt)                                                                  \
    do {                                                                                       \
        double t_[REPS_MAX];                                                                   \
        for (int r_ = 0; r_ < (reps); r_++) {                                                  \
            double t0_ = omp_get_wtime();                                                      \
            stmt;                                                                              \
            t_[r_] = omp_get_wtime() - t0_;                                                    \
        }                                                                                      \
        qsort(t_, (size_t)(reps), sizeof(double), bench_cmpd);                                 \
        (med) = t_[(reps) / 2];                                                                \
    } while (0)

#endif
