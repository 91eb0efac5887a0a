// HyperQuant weight codec (paper sections 4.1–4.9, 5.1): per-tile randomized Hadamard
// transform along cols, normalization to the lattice radius α(SNR)√T, nearest lattice
// point, bit stripping, Rice coding with per-tensor parameters, and rate control to a
// target effective bits/weight. Payload layout: kernels/hq_layout.h; design and paper
// readings: docs/HYPERQUANT.md. The codec table entry is kvq_codec_hyperquant.
#ifndef KVQ_HYPERQUANT_H
#define KVQ_HYPERQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"
#include "libconv/codec/codec.h"
#include "libconv/quant/lattice.h"
#include "libconv/quant/mmacast.h"

/** Encoder settings (parsed from "hyperquant:<lattice>:<bps>[:opt...]"). */
typedef struct {
    kvq_lattice lat;
    double bps;       // target effective bits per weight (NAN when snr_db is fixed)
    double snr_db;    // fixed SNR instead of rate control (NAN = use bps)
    int max_tile;     // largest tile (power of two, 16..1024), default 128
    int norm_bits;    // 6, 8, 10, 12 or 16 bits per tile norm (default 8, chosen by measurement)
    int int8;         // 1: int8 fallback storage, no Rice
    int table_only;   // 1: SNR from the calibration table only, no per-tensor correction
    kvq_cast cast;    // simulated MMA cast applied at decode
    size_t rot_cache; // rotated tiles (and the last pass's symbols) are kept between passes when each array
                      // takes at most this many bytes (default 256 MiB); above it every pass re-reads and
                      // re-rotates the source tile by tile and the writer re-quantizes (same bytes out)
    int no_simd;      // 1: the plain quantization loop even where AVX2 is present (tests; same bytes out)
    int ldlq;         // 1: LDLQ error feedback when the input carries a covariance (in->hess), Rice mode only
    double ldlq_damp; // LDLQ damping, a fraction of the rotated covariance's mean diagonal (default 0.01)
    float **ldlq_share; // NULL, or where encodes of the same columns, tile, seed and damping share the LDLQ feedback
                        // (kvq_hq_encode_blocks: every row block of a tensor): *ldlq_share NULL = compute it and keep
                        // it there (the caller frees it); else used as it is
} kvq_hq_opts;

/** Everything decode needs, parsed from the params JSON. */
typedef struct {
    kvq_lattice lat;
    int int8;
    kvq_cast cast;
    int tile;              // T
    int64_t rows, cols, cols_p;
    int norm_bits, norm_exp;
    double alpha;
    int k[KVQ_LAT_MAX_CLASSES];
    uint64_t seed;
} kvq_hq_header;

/** Encoder diagnostics. */
typedef struct {
    double snr_target_db;  // SNR that set α (after rate control)
    double snr_real_db;    // 10 log10(Σx² / Σ(x - x̂)²) on this tensor
    double code_bpw;       // Rice (or int8) code bits per weight
    double eff_bpw;        // 8 × stored bytes / numel
    int iterations;        // quantization passes spent on rate control
    uint64_t clipped;      // int8 mode: codes clipped to ±127
} kvq_hq_stats;

/** Default options for lattice l at target bps. */
kvq_hq_opts kvq_hq_opts_default(kvq_lattice l, double bps);

/** The tile rule: T = largest power of two dividing cols, capped at max_tile; if that is
 *  below 16, rows are zero-padded to a multiple of T = min(max_tile, smallest power of two
 *  ≥ max(cols, 16)). @return T and writes the padded width to *cols_p. */
int kvq_hq_tile_for(int64_t cols, int max_tile, int64_t *cols_p);

/** Encodes in->x (or, when in->x is NULL, in->src's f32/f16/bf16 values, read a tile at a time
 *  without a float32 copy) into out (blobs "codes", "norms", "offsets"; params JSON; rate parts).
 *  recon (optional, rows × cols) receives the reference reconstruction computed from the
 *  chosen lattice codes without going through the bitstream; stats optional.
 *  NaN/Inf input -> KVQ_ERR_NUMERIC naming the tensor and the element. */
kvq_status kvq_hq_encode(const kvq_hq_opts *o, const kvq_codec_input *in, kvq_encoded *out,
                         float *recon, kvq_hq_stats *stats, kvq_err *err);

/** Parses and validates params against (rows, cols). */
kvq_status kvq_hq_header_parse(const json_t *params, int64_t rows, int64_t cols, kvq_hq_header *h,
                               kvq_err *err);

/** Reference decoder: scalar bit reader (rice.h), kvq_lattice_unstrip, one tile at a time.
 *  out is rows × cols float32 (caller-allocated). */
kvq_status kvq_hq_decode_ref(const kvq_hq_header *h, const kvq_blob_view *blobs, int n_blobs,
                             float *out, kvq_err *err);
/** Fast decoder (64-bit buffered Rice reader, lattice-specialized unstrip, OpenMP over
 *  groups; n_threads 0 = default). Bit-identical to kvq_hq_decode_ref. */
kvq_status kvq_hq_decode(const kvq_hq_header *h, const kvq_blob_view *blobs, int n_blobs,
                         float *out, int n_threads, kvq_err *err);

// ---- row-blocked tensors (hq_blocks.c; docs/FORMAT.md "Row-blocked HyperQuant") ----------

#define KVQ_HQ_BLOCKS_VERSION 2 // params "v" of a row-blocked tensor (an unblocked one: KVQ_HQ_FORMAT_VERSION)
#define KVQ_HQ_MAX_BLOCKS 64

/** One block of rows: its own header (rows = the block's) and its slices of the blobs. */
typedef struct {
    kvq_hq_header h;
    int64_t row0;
    kvq_blob_view v[3]; // codes, norms, offsets (nv of them)
    int nv;
} kvq_hq_block;

/** 1 if params are a row-blocked tensor's ("v": 2). */
int kvq_hq_is_blocked(const json_t *params);
/** Parses a row-blocked tensor's params against (rows, cols) and slices the blobs b (whose data
 *  may be NULL: sizes only) into out[0..*n) (caller's array of KVQ_HQ_MAX_BLOCKS). Every block's
 *  header is checked as an unblocked tensor's; the blocks must share lattice, mode, cast, tile and
 *  seed, cover the rows in order and use every blob byte. Views borrow b's data. */
kvq_status kvq_hq_blocks_parse(const json_t *params, int64_t rows, int64_t cols, const kvq_blob_view *b, int nb,
                               kvq_hq_block *out, int *n, kvq_err *err);
/** Decodes a row-blocked tensor into out (rows × cols); n_threads < 0: the reference decoder per
 *  block, else kvq_hq_decode (bit-identical). */
kvq_status kvq_hq_blocks_decode(const json_t *params, const kvq_blob_view *b, int nb, int64_t rows, int64_t cols,
                                float *out, int n_threads, kvq_err *err);
/** Checks a row-blocked tensor's blob sizes and group offsets (kvq_hq_check_blobs per block). */
kvq_status kvq_hq_blocks_check(const json_t *params, const kvq_blob_view *b, int nb, int64_t rows, int64_t cols,
                               kvq_err *err);
/** Encodes in as ceil(rows / block_rows) blocks of block_rows rows (the last may be shorter), block
 *  i with o's settings at bps[i] and in->seed: each block's blobs are exactly what kvq_hq_encode
 *  gives those rows alone. recon (optional, rows × cols): the blocks' reference reconstructions. */
kvq_status kvq_hq_encode_blocks(const kvq_hq_opts *o, const double *bps, int n_blocks, int64_t block_rows,
                                const kvq_codec_input *in, kvq_encoded *out, float *recon, kvq_err *err);

#endif
