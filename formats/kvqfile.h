// The .kvq container: a zip archive (libzip) holding manifest.json and payload
// entries. Raw payloads are stored uncompressed, their data starting on a 64-byte
// boundary so readers can use them in place from an mmap; entries that compress
// well may be zstd frames (marked in the manifest's entry table). The writer keeps
// the entry table (offset, sizes, compression, xxh3-64) itself and adds it to the
// manifest under "entries" at commit. Spec: docs/FORMAT.md.
#ifndef KVQ_KVQFILE_H
#define KVQ_KVQFILE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "formats/error.h"

#define KVQ_FORMAT_NAME "kvq"
#define KVQ_FORMAT_VERSION 1
#define KVQ_ALIGN 64

typedef enum {
    KVQ_ENTRY_RAW = 0,      // stored as is, 64-byte aligned
    KVQ_ENTRY_ZSTD_AUTO = 1 // zstd frame if that saves at least 5 %, else raw
} kvq_entry_mode;

typedef struct {
    uint64_t size;          // payload bytes (uncompressed)
    uint64_t stored_size;   // bytes in the archive
    uint64_t xxh3;          // XXH3-64 of the uncompressed payload
    int zstd;               // 1 when stored as a zstd frame
} kvq_entry_info;

// ---- writing ---------------------------------------------------------------

typedef struct kvq_writer kvq_writer;

/** Starts a .kvq at a temporary name in final_path's directory. Nothing appears
 *  under final_path until kvq_writer_commit succeeds. */
kvq_status kvq_writer_open(const char *final_path, kvq_writer **out, kvq_err *err);

/** As kvq_writer_open, with the spool kept as the journal `.<name>.partial` beside final_path
 *  (locked against a second writer) instead of an unlinked file, its payloads framed with their
 *  names and digests and closed in groups by kvq_writer_journal_note, so that a run killed at any
 *  point can be resumed. resume = 0 starts the journal afresh; resume = 1 first reads the groups
 *  an earlier run completed (digests checked; a cut-short or damaged tail is ignored), which the
 *  caller may reuse in order with kvq_writer_journal_adopt, then kvq_writer_journal_cut drops the
 *  rest. Commit and abort remove the journal; a kill leaves it. */
kvq_status kvq_writer_open_journal(const char *final_path, int resume, kvq_writer **out, kvq_err *err);
/** Groups found by a resume, and the note text of group i (borrowed; NULL past the end). */
size_t kvq_writer_journal_count(const kvq_writer *w);
const char *kvq_writer_journal_text(const kvq_writer *w, size_t i);
/** Adds group i's payloads as entries, as if kvq_writer_add had added them now; i must be the
 *  number adopted so far (groups are taken in order). */
kvq_status kvq_writer_journal_adopt(kvq_writer *w, size_t i, kvq_err *err);
/** Truncates the journal after the last adopted group; later payloads go there. */
kvq_status kvq_writer_journal_cut(kvq_writer *w, kvq_err *err);
/** Closes the group of payloads added since the last note with this text (no-op without a
 *  journal). */
kvq_status kvq_writer_journal_note(kvq_writer *w, const char *text, kvq_err *err);

/** Adds one payload entry (bytes are copied or spooled; the caller keeps data).
 *  After an error the writer can only be aborted.
 *  info may be NULL. Entry names are unique paths like "t/<tensor>/codes". */
kvq_status kvq_writer_add(kvq_writer *w, const char *entry, const void *data, size_t n,
                          kvq_entry_mode mode, kvq_entry_info *info, kvq_err *err);

/** Stored bytes the writer would use for this payload: n for RAW; for ZSTD_AUTO the zstd frame
 *  (same level) when it saves >= 5 %, else n. Exact up to 64 MiB; above, zstd's ratio over 16
 *  evenly spaced 1 MiB samples. For --dry-run's prediction. */
uint64_t kvq_entry_stored_estimate(const void *data, size_t n, kvq_entry_mode mode);

/** Adds manifest.json (the writer inserts "entries"; manifest is not stolen),
 *  closes the archive, fsyncs it and renames it to the final name. Frees w in all
 *  cases; on failure the temporary file is removed. */
kvq_status kvq_writer_commit(kvq_writer *w, json_t *manifest, kvq_err *err);

/** Abandons the file and removes the temporary name. NULL is a no-op. */
void kvq_writer_abort(kvq_writer *w);

// ---- reading ---------------------------------------------------------------

typedef struct kvq_file kvq_file; // one thread at a time: entry access caches state

/** Opens a .kvq: checks the archive, manifest JSON, format name and version, that every
 *  entry in the table exists with the recorded sizes and bounds, and the whole manifest
 *  against its schema (kvq_file_check_manifest): what every tool reads a .kvq through. */
kvq_status kvq_file_open(const char *path, kvq_file **out, kvq_err *err);
/** The container checks only (no schema): for tests of the container layer, whose
 *  manifests hold only the fields under test. */
kvq_status kvq_file_open_container(const char *path, kvq_file **out, kvq_err *err);
void kvq_file_close(kvq_file *f); // NULL is a no-op

/** The parsed manifest (borrowed; valid until close). */
const json_t *kvq_file_manifest(const kvq_file *f);

/** Checks a manifest against the schema of docs/FORMAT.md (formats/kvqschema.c): required
 *  fields and their types, the architecture, the tensor table (unique names, shapes with an
 *  overflow-checked element count, codecs, entries present in the entry table), source,
 *  tokenizer, KV section. kvq_file_open runs it, so every tool refuses what one refuses.
 *  err names the first problem with its JSON path, e.g. "manifest.json: tensors[3].shape[1]:
 *  expected a non-negative integer, got string". */
kvq_status kvq_file_check_manifest(const json_t *manifest, const char *path, kvq_err *err);
/** Bits per parameter of a (schema-checked) manifest, one definition for every tool:
 *  bits_per_param = 8 · Σ tensor bytes / Σ parameters over every tensor (embeddings, norms and
 *  lossless tensors included: what llama.cpp's "bits per weight" counts, and what a reader
 *  compares between files); lossy_bits_per_weight = the same over the tensors a lossy codec
 *  encoded (NaN when none). Tensor bytes are the manifest's "bytes" (payloads, including each
 *  codec's side information); the zip's headers and the manifest are not counted. */
typedef struct {
    uint64_t params, bytes, lossy_params, lossy_bytes;
    double bits_per_param, lossy_bits_per_weight;
} kvq_bits;
void kvq_file_bits(const json_t *manifest, kvq_bits *out);
/** What a tensor record's "bytes" stands for, counted from the file rather than read from the
 *  record: Σ stored_size of its entries in the entry table (zstd frames as stored) + the length
 *  of its codec params as compact JSON. kvq-verify reports per-tensor bits from it and fails
 *  integrity when a record's "bytes" differs, so kvq_file_bits counts the file's payloads. */
uint64_t kvq_file_tensor_bytes(const json_t *manifest, const json_t *tensor);
/** Elements of a tensor record: the product of its "shape" (the schema bounds it, so no overflow). */
uint64_t kvq_file_tensor_numel(const json_t *tensor);

/** 1 when a manifest may name this weight codec (libconv/codec's table; a test keeps the two
 *  lists equal). */
int kvq_file_codec_known(const char *name);
const char *kvq_file_path(const kvq_file *f);
uint64_t kvq_file_size(const kvq_file *f);

/** The inflated size the entry table declares for an entry (nothing is read or inflated).
 *  @return KVQ_OK, or KVQ_ERR_MISSING for a name not in the table. */
kvq_status kvq_file_entry_size(const kvq_file *f, const char *entry, uint64_t *size);

/** Payload of an entry, digest-checked on first access. Raw entries point into the
 *  mmap; zstd entries are decompressed into a buffer the file owns. Borrowed until
 *  close. */
kvq_status kvq_file_entry(kvq_file *f, const char *entry, const void **data, size_t *size,
                          kvq_err *err);

/** Done with an entry for now: frees the decompressed buffer of a zstd entry (the pointer
 *  kvq_file_entry gave for it becomes invalid; a later kvq_file_entry decompresses again),
 *  and drops a stored entry's mapped pages from the resident set (its pointer stays valid:
 *  pages fault in again from the file). No-op for unknown names. */
void kvq_file_release(kvq_file *f, const char *entry);

/** The decompressed buffer of a zstd entry that kvq_file_entry gave, handed to the caller (who
 *  frees it; the file forgets it, as kvq_file_release would): a reader that keeps the bytes as
 *  they are takes them without a copy. NULL for an entry read in place from the mapping (copy
 *  it), for one not loaded, and for unknown names. */
void *kvq_file_take(kvq_file *f, const char *entry);

/** Checks every entry's digest and bounds; names the first bad one. */
kvq_status kvq_file_verify(kvq_file *f, kvq_err *err);

/** Rewrites the file atomically with its manifest replaced by `manifest` (entries
 *  copied unchanged). Used to store a verification record. */
kvq_status kvq_file_rewrite_manifest(const char *path, json_t *manifest, kvq_err *err);

#endif
