// Synthetic keys and values (kvsynth.h): a counter-based stream per (seed, layer, position, K
// or V) row and per channel, splitmix64 words turned into normals by Box-Muller in float.
#include "libconv/kv/kvsynth.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/threads.h"
#include "kernels/splitmix.h"

// The state of stream `what` (0 rows, 1 channels) at index (layer, i, role).
static uint64_t stream(uint64_t seed, int what, int layer, int64_t i, int role) {
    const uint64_t id = ((uint64_t)(uint32_t)layer << 34) ^ ((uint64_t)i << 2) ^ ((uint64_t)what << 1) ^ (uint64_t)role;
    return kvq_splitmix64_mix(kvq_splitmix64_mix(seed) ^ id);
}

// Two standard normals from the next two words of *s (|z| < 5.8: 24-bit uniforms).
static void normal2(uint64_t *s, float *z0, float *z1) {
    const float u1 = ((float)(kvq_splitmix64_next(s) >> 40) + 0.5f) * 0x1.0p-24f;
    const float u2 = (float)(kvq_splitmix64_next(s) >> 40) * 0x1.0p-24f;
    const float r = sqrtf(-2.0f * logf(u1)), t = 6.28318530718f * u2;
    *z0 = r * cosf(t);
    *z1 = r * sinf(t);
}

void kvq_kvsynth_channel(uint64_t seed, int layer, int c, int role, float *mu, float *sigma) {
    uint64_t s = stream(seed, 1, layer, c, role);
    float g1, g2;
    normal2(&s, &g1, &g2);
    *sigma = role ? 0.5f * expf(0.25f * g1) : expf(0.75f * g1);
    *mu = role ? 0.0f : 0.5f * *sigma * g2;
}

kvq_status kvq_kvsynth_rows(uint64_t seed, int layer, int pos0, int T, int n_kv, int head_dim, float *k, float *v,
                            int n_threads) {
    const int n = n_kv * head_dim;
    float *mu = malloc(sizeof(float) * 4 * (size_t)n); // (2, n): K's then V's; then sigma, the same
    if (!mu) return KVQ_ERR_NOMEM;
    float *sg = mu + 2 * (size_t)n;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < n; c++) kvq_kvsynth_channel(seed, layer, c, r, &mu[(size_t)r * n + c], &sg[(size_t)r * n + c]);
#pragma omp parallel for schedule(static) num_threads(kvq_nthreads(n_threads)) if (T > 8)
    for (int t = 0; t < T; t++)
        for (int r = 0; r < 2; r++) {
            uint64_t s = stream(seed, 0, layer, (int64_t)pos0 + t, r);
            float *x = (r ? v : k) + (size_t)t * n;
            const float *m = mu + (size_t)r * n, *g = sg + (size_t)r * n;
            for (int i = 0; i + 1 < n; i += 2) {
                float z0, z1;
                normal2(&s, &z0, &z1);
                x[i] = m[i] + g[i] * z0;
                x[i + 1] = m[i + 1] + g[i + 1] * z1;
            }
            if (n & 1) {
                float z0, z1;
                normal2(&s, &z0, &z1);
                x[n - 1] = m[n - 1] + g[n - 1] * z0;
            }
        }
    free(mu);
    return KVQ_OK;
}
