// What this CPU offers the run-time dispatched kernels, asked once (cpuid through GCC/clang's
// builtins) and remembered: the answer is the same for every caller.
#ifndef KVQ_KERNELS_CPU_FEATURES_H
#define KVQ_KERNELS_CPU_FEATURES_H

enum { KVQ_CPU_AVX2 = 1, KVQ_CPU_AVX512 = 2, KVQ_CPU_VNNI = 4, KVQ_CPU_BMI2 = 8 };

/** Bit set of KVQ_CPU_*: AVX2 means AVX2+FMA; AVX512 means F, BW and VL (every such CPU has
 *  F16C); VNNI means AVX512 plus AVX-512 VNNI; BMI2 is pdep/pext. */
static inline int kvq_cpu_features(void) {
    static int f = -1; // one per translation unit; benign if two threads both compute it
    if (f < 0) {
        __builtin_cpu_init();
        int v = 0;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) v |= KVQ_CPU_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            v |= KVQ_CPU_AVX512;
        if ((v & KVQ_CPU_AVX512) && __builtin_cpu_supports("avx512vnni")) v |= KVQ_CPU_VNNI;
        if (__builtin_cpu_supports("bmi2")) v |= KVQ_CPU_BMI2;
        __atomic_store_n(&f, v, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&f, __ATOMIC_RELAXED);
}

#endif
