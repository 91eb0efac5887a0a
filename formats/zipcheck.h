// The zip layout of a .kvq checked by kvq itself, before libzip opens it: the end of central
// directory records (zip64 included), every central directory record, the local header each
// one points at (which must agree with it: name, method, flags, CRC, sizes), and that no
// member's local header + data overlaps another's or the central directory (overlapping
// members are how zip bombs and parser-confusion files are built). libzip's ZIP_CHECKCONS
// compares headers but not ranges; docs/FORMAT.md ("Reading") lists every check.
#ifndef KVQ_ZIPCHECK_H
#define KVQ_ZIPCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"

#define KVQ_ZIP_MAX_MEMBERS (1u << 20) // members per archive (a 70B model has a few thousand)

typedef struct {
    char *name;        // NUL-terminated copy of the member's name
    uint64_t header;   // local header offset (from the central directory)
    uint64_t data;     // first byte of the member's data
    uint64_t csize;    // stored (compressed) size
    uint64_t usize;    // uncompressed size
    uint32_t crc;
    uint16_t method;
} kvq_zip_member;

/** Checks the zip structure of the `size` bytes at `map` (a whole file; map may be NULL when
 *  size is 0). `path` names the file in messages. On success *members (caller frees with
 *  kvq_zipcheck_free) holds the members sorted by name, *n their count.
 *  @return KVQ_OK, or KVQ_ERR_FORMAT (one line naming the file, the member and the problem;
 *  "not a valid zip archive" when there is no end of central directory record) or
 *  KVQ_ERR_NOMEM. */
kvq_status kvq_zipcheck(const uint8_t *map, uint64_t size, const char *path,
                        kvq_zip_member **members, size_t *n, kvq_err *err);

/** Finds a member by name in kvq_zipcheck's sorted array. @return it, or NULL. */
const kvq_zip_member *kvq_zipcheck_find(const kvq_zip_member *members, size_t n, const char *name);

/** Frees kvq_zipcheck's array (NULL is a no-op). */
void kvq_zipcheck_free(kvq_zip_member *members, size_t n);

#endif
