// Upload of a HyperQuant tensor's Rice blobs to the device (validated sizes and offsets,
// scale and sign tables), its release, and the corruption check after launches.
#include "kernels/cuda/hq_common.cuh"

extern "C" void kvq_cuda_hq_free(kvq_cuda_hq *t) {
    if (!t) return;
    cudaFree(t->codes);
    cudaFree(t->norms);
    cudaFree(t->offs);
    cudaFree(t->scale);
    cudaFree(t->signs);
    cudaFree(t->bad);
    cudaFree(t->xr);
    cudaFree(t->part);
    cudaFree(t->scratch);
    free(t);
}

static kvq_status check_desc(const kvq_cuda_hq_desc *d, size_t codes_size, size_t norms_size, const uint8_t *ob,
                             size_t offsets_size, int64_t *n_tiles, int64_t *n_groups, kvq_err *err) {
    if (d->int8) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda hyperquant: int8 mode is not implemented on the GPU");
    if (d->cast) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda hyperquant: simulated MMA casts are CPU-only");
    if (d->lattice < 0 || d->lattice > 3) return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad lattice %d", d->lattice);
    const int T = d->tile;
    if (T < KVQ_HQ_MIN_TILE || T > KVQ_HQ_MAX_TILE || (T & (T - 1)))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad tile %d", T);
    if (d->rows < 1 || d->cols < 1 || d->cols_p < d->cols || d->cols_p % T || d->cols_p - d->cols >= T ||
        d->rows > ((int64_t)1 << 40) / d->cols_p)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad shape %lld x %lld (padded %lld)",
                           (long long)d->rows, (long long)d->cols, (long long)d->cols_p);
    if (d->norm_bits < 6 || d->norm_bits > 16 || !(d->alpha > 0))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad norm_bits %d or alpha %g", d->norm_bits, d->alpha);
    for (int i = 0; i < 2; i++)
        if (d->k[i] < 0 || d->k[i] > 24) return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad Rice parameter %d", d->k[i]);
    *n_tiles = d->rows * (d->cols_p / T);
    *n_groups = (*n_tiles + KVQ_HQ_GROUP_TILES - 1) / KVQ_HQ_GROUP_TILES;
    if (*n_groups >= INT32_MAX) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda hyperquant: too many groups");
    if (norms_size != (size_t)((*n_tiles * d->norm_bits + 7) / 8))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: norms blob is %zu bytes, expected %lld", norms_size,
                           (long long)((*n_tiles * d->norm_bits + 7) / 8));
    if (offsets_size != (size_t)(*n_groups + 1) * 4)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: offsets blob has %zu bytes, expected %lld", offsets_size,
                           (long long)(*n_groups + 1) * 4);
    uint32_t prev = 0;
    for (int64_t g = 0; g <= *n_groups; g++) {
        uint32_t v = (uint32_t)ob[4 * g] | (uint32_t)ob[4 * g + 1] << 8 | (uint32_t)ob[4 * g + 2] << 16 |
                     (uint32_t)ob[4 * g + 3] << 24;
        if ((g == 0 && v != 0) || v < prev || v > codes_size || (g == *n_groups && v != codes_size))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: bad group offset %u at group %lld", v, (long long)g);
        prev = v;
    }
    return KVQ_OK;
}

static kvq_status upload(kvq_cuda_hq *t, const void *codes, const void *norms, const void *offsets, kvq_err *err) {
    const kvq_cuda_hq_desc *d = &t->d;
    const int T = d->tile;
    const size_t nnorm = (size_t)((t->n_tiles * d->norm_bits + 7) / 8);
    CU_TRY(cudaMalloc((void **)&t->codes, t->codes_size + CODES_PAD));
    CU_TRY(cudaMemset(t->codes, 0, t->codes_size + CODES_PAD));
    if (t->codes_size) CU_TRY(cudaMemcpy(t->codes, codes, t->codes_size, cudaMemcpyHostToDevice));
    CU_TRY(cudaMalloc((void **)&t->norms, nnorm + 4));
    CU_TRY(cudaMemset(t->norms, 0, nnorm + 4));
    CU_TRY(cudaMemcpy(t->norms, norms, nnorm, cudaMemcpyHostToDevice));
    CU_TRY(cudaMalloc((void **)&t->offs, 4 * (size_t)(t->n_groups + 1)));
    CU_TRY(cudaMemcpy(t->offs, offsets, 4 * (size_t)(t->n_groups + 1), cudaMemcpyHostToDevice)); // little-endian host
    // Scales with the CPU decoder's expression (kvq_hq_norm_value, kvq_hq_tile_recon), same libm.
    const size_t ncode = (size_t)1 << d->norm_bits;
    std::vector<float> sc(ncode);
    for (size_t c = 0; c < ncode; c++) {
        double norm = exp2((double)d->norm_exp - (double)c / (double)(1 << (d->norm_bits - 5)));
        sc[c] = (float)(norm / (d->alpha * (double)T));
    }
    CU_TRY(cudaMalloc((void **)&t->scale, sizeof(float) * ncode));
    CU_TRY(cudaMemcpy(t->scale, sc.data(), sizeof(float) * ncode, cudaMemcpyHostToDevice));
    const size_t nw = (size_t)(d->cols_p + 31) / 32;
    std::vector<uint32_t> sw(nw, 0);
    for (int64_t j = 0; j < d->cols_p / T; j++)
        for (int w = 0; w < (T + 63) / 64; w++) {
            uint64_t bits = kvq_hq_sign_word(d->seed, (uint64_t)j, (uint64_t)w);
            for (int i = 0; i < 64 && 64 * w + i < T; i++)
                if ((bits >> i) & 1) {
                    uint64_t b = (uint64_t)j * T + 64 * w + i;
                    sw[b >> 5] |= 1u << (b & 31);
                }
        }
    CU_TRY(cudaMalloc((void **)&t->signs, sizeof(uint32_t) * nw));
    CU_TRY(cudaMemcpy(t->signs, sw.data(), sizeof(uint32_t) * nw, cudaMemcpyHostToDevice));
    CU_TRY(cudaMalloc((void **)&t->bad, sizeof(int)));
    const int none = INT32_MAX;
    CU_TRY(cudaMemcpy(t->bad, &none, sizeof(int), cudaMemcpyHostToDevice));
    CU_TRY(cudaMalloc((void **)&t->xr, sizeof(float) * (size_t)d->cols_p));
    CU_TRY(cudaMalloc((void **)&t->part, sizeof(float) * (size_t)t->n_tiles));
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hq_upload(const kvq_cuda_hq_desc *d, const void *codes, size_t codes_size,
                                         const void *norms, size_t norms_size, const void *offsets,
                                         size_t offsets_size, kvq_cuda_hq **out, kvq_err *err) {
    *out = NULL;
    int64_t n_tiles, n_groups;
    kvq_status st = check_desc(d, codes_size, norms_size, (const uint8_t *)offsets, offsets_size, &n_tiles, &n_groups, err);
    if (st) return st;
    char why[256];
    if (!kvq_cuda_device_count(why, sizeof why)) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda hyperquant: %s", why);
    kvq_cuda_hq *t = (kvq_cuda_hq *)calloc(1, sizeof *t);
    if (!t) return kvq_err_set(err, KVQ_ERR_NOMEM, "cuda hyperquant: out of memory");
    t->d = *d;
    t->n_tiles = n_tiles;
    t->n_groups = n_groups;
    t->tpr = d->cols_p / d->tile;
    t->codes_size = codes_size;
    t->compact = codes_size + norms_size + offsets_size;
    st = upload(t, codes, norms, offsets, err);
    if (st) {
        kvq_cuda_hq_free(t);
        return st;
    }
    *out = t;
    return KVQ_OK;
}

extern "C" size_t kvq_cuda_hq_compact_bytes(const kvq_cuda_hq *t) { return t->compact; }

extern "C" kvq_status kvq_cuda_hq_check(kvq_cuda_hq *t, kvq_err *err) {
    int bad = 0;
    const int none = INT32_MAX;
    CU_TRY(cudaDeviceSynchronize());
    CU_TRY(cudaMemcpy(&bad, t->bad, sizeof(int), cudaMemcpyDeviceToHost));
    if (bad == none) return KVQ_OK;
    CU_TRY(cudaMemcpy(t->bad, &none, sizeof(int), cudaMemcpyHostToDevice));
    return kvq_err_set(err, KVQ_ERR_FORMAT, "cuda hyperquant: corrupt Rice stream in group %d", bad);
}
