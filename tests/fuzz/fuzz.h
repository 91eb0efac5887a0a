// Shared by the fuzz targets (tests/fuzz/fuzz_*.c; helpers in util.c). Each target is one
// function over arbitrary bytes: built with clang's libFuzzer (make fuzz: KVQ_FUZZ_LIBFUZZER
// defined, the function is LLVMFuzzerTestOneInput) or, in every ordinary build, as
// kvq_fuzz_<name>, which tests/test_fuzz_regress.c calls on each kept input of
// tests/fuzz/regress/<name>/ (gcc, and ASan/UBSan in make asan). A target returns 0; a broken
// invariant of the code under test aborts (KVQ_FUZZ_CHECK), as a crash would.
#ifndef KVQ_FUZZ_H
#define KVQ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <jansson.h>

#include "libconv/codec/codec.h"

#ifdef KVQ_FUZZ_LIBFUZZER
#define KVQ_FUZZ_TARGET(name) int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
#else
#define KVQ_FUZZ_TARGET(name) int kvq_fuzz_##name(const uint8_t *data, size_t size)
// Every target, for the replay suite (one per tests/fuzz/fuzz_<name>.c).
#define KVQ_FUZZ_LIST(X) X(st) X(index) X(config) X(tokenizer) X(tok_text) X(l2c) X(kvqfile) \
    X(manifest) X(recipe) X(rice) X(hq) X(qet) X(kvcodec)
#define KVQ_FUZZ_DECL(name) int kvq_fuzz_##name(const uint8_t *data, size_t size);
KVQ_FUZZ_LIST(KVQ_FUZZ_DECL)
#endif

/** An invariant of the code under test (not of the input): aborts with the line. */
#define KVQ_FUZZ_CHECK(x)                                                                   \
    do {                                                                                    \
        if (!(x)) {                                                                         \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #x); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

/** A private directory for this process (made once, removed at exit), for the readers that
 *  take a path. */
const char *kvq_fuzz_dir(void);
/** Writes data to <kvq_fuzz_dir()>/name and returns path (filled, cap bytes), or NULL if the
 *  write failed. */
const char *kvq_fuzz_file(const char *name, const void *data, size_t size, char *path, size_t cap);

/** Cuts records from the input: a little-endian u16 length, then that many bytes (clipped
 *  at the end). @return 1 with the record in (*p, *n), 0 when the input is exhausted. */
typedef struct { const uint8_t *p; size_t left; } kvq_fuzz_in;
int kvq_fuzz_take(kvq_fuzz_in *in, const uint8_t **p, size_t *n);
/** One byte (0 at the end). */
unsigned kvq_fuzz_byte(kvq_fuzz_in *in);

/** The framed input of the codec targets (fuzz_hq, fuzz_qet; seeds written by
 *  tests/fuzz/make_seeds.c): u16 rows, u16 cols, a record holding the params JSON, then one
 *  record per role in roles[] (an empty record leaves that blob out). Fills views (nroles at
 *  most) and returns the params (new reference) or NULL. */
json_t *kvq_fuzz_codec_input(const uint8_t *data, size_t size, const char *const *roles, int nroles,
                             int64_t *rows, int64_t *cols, kvq_blob_view *views, int *nviews);

#endif
