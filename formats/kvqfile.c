// The .kvq container (spec: docs/FORMAT.md). Writing: payloads are spooled to an
// unlinked temp file as they arrive, added to libzip as range sources, and libzip
// copies them into the archive at zip_close; a local-header extra field (0xD935,
// zipalign's id) pads each entry so its data starts on a 64-byte boundary, and the
// offsets are checked against the real local headers before the rename. Reading:
// libzip checks the archive (ZIP_CHECKCONS) and reads the manifest; payloads are
// used in place from an mmap, digest-checked on first access.
#include "formats/kvqfile.h"
#include "formats/tmpfile.h"
#include "formats/zipcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zip.h>
#include <zstd.h>

#define ZIP_LOCAL_HEADER 30     // fixed part of a zip local file header
#define ZIP64_LOCAL_EXTRA 20    // zip64 extra field libzip adds when size > 0xffffffff
#define ALIGN_EXTRA_ID 0xD935   // Android zipalign's alignment extra field
#define ZSTD_LEVEL 3
#define MANIFEST_NAME "manifest.json"
#define MANIFEST_MAX (256u << 20)

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }

static kvq_status pwrite_all(int fd, const void *data, size_t n, uint64_t off) {
    const uint8_t *p = data;
    while (n) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return KVQ_ERR_IO;
        p += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return KVQ_OK;
}

static kvq_status pread_all(int fd, void *data, size_t n, uint64_t off) {
    uint8_t *p = data;
    while (n) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return KVQ_ERR_IO;
        p += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return KVQ_OK;
}

static int valid_entry_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 1024 || s[0] == '/' || strcmp(s, MANIFEST_NAME) == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e || s[i] == '\\') return 0;
    return 1;
}

// Checks the local header at `header` against what the entry table says: the
// signature, no data descriptor, method STORE, the sizes, the name, and that the
// data begins exactly at `offset`.
static kvq_status check_local_header(int fd, uint64_t fsize, const char *path, const char *name,
                                     uint64_t header, uint64_t offset, uint64_t stored,
                                     kvq_err *err) {
    size_t nlen = strlen(name);
    uint8_t h[ZIP_LOCAL_HEADER];
    if (header > fsize || fsize - header < ZIP_LOCAL_HEADER ||
        pread_all(fd, h, sizeof h, header) != KVQ_OK)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': local header offset %" PRIu64
                           " outside the file (%" PRIu64 " bytes)", path, name, header, fsize);
    uint32_t csize = rd32(h + 18);
    uint64_t data = header + ZIP_LOCAL_HEADER + rd16(h + 26) + rd16(h + 28);
    char got[1025] = "";
    if (rd16(h + 26) == nlen && nlen < sizeof got) pread_all(fd, got, nlen, header + ZIP_LOCAL_HEADER);
    if (rd32(h) != 0x04034b50u || (rd16(h + 6) & 8) || rd16(h + 8) != 0 ||
        (csize != 0xffffffffu && csize != stored) || strcmp(got, name) != 0 || data != offset)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': local header at %" PRIu64
                           " does not match the entry table (data at %" PRIu64 ", table says %" PRIu64 ")",
                           path, name, header, data, offset);
    return KVQ_OK;
}

static kvq_status fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy) return KVQ_ERR_NOMEM;
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    free(copy);
    if (dfd < 0) return KVQ_ERR_IO;
    int r = fsync(dfd);
    close(dfd);
    return r == 0 ? KVQ_OK : KVQ_ERR_IO;
}

// ---- writing ---------------------------------------------------------------

// A libzip source reading a byte range of an fd (the spool, or an old .kvq when
// rewriting), so no payload has to stay in memory until zip_close.
typedef struct {
    int fd;
    uint64_t off, len, pos;
    zip_error_t error;
} range_src;

static zip_int64_t range_cb(void *ud, void *data, zip_uint64_t len, zip_source_cmd_t cmd) {
    range_src *r = ud;
    switch (cmd) {
    case ZIP_SOURCE_OPEN: r->pos = 0; return 0;
    case ZIP_SOURCE_READ: {
        uint64_t left = r->len - r->pos;
        if (len > left) len = left;
        if (len == 0) return 0;
        ssize_t k;
        do k = pread(r->fd, data, len, (off_t)(r->off + r->pos)); while (k < 0 && errno == EINTR);
        if (k <= 0) { zip_error_set(&r->error, ZIP_ER_READ, k < 0 ? errno : EIO); return -1; }
        r->pos += (uint64_t)k;
        return k;
    }
    case ZIP_SOURCE_CLOSE: return 0;
    case ZIP_SOURCE_STAT: {
        zip_stat_t *st = data;
        zip_stat_init(st);
        st->valid = ZIP_STAT_SIZE;
        st->size = r->len;
        return sizeof *st;
    }
    case ZIP_SOURCE_ERROR: return zip_error_to_data(&r->error, data, len);
    case ZIP_SOURCE_FREE: free(r); return 0;
    case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE,
                                              ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default: zip_error_set(&r->error, ZIP_ER_OPNOTSUPP, 0); return -1;
    }
}

typedef struct {
    char *name;
    uint64_t header, offset, stored;
} wentry;

// A journaled spool (kvq_writer_open_journal) frames every payload so that a later run can find,
// check and reuse them: "KVQJBLOB" u32 name_len, u32 zstd, u64 size, u64 stored, u64 xxh3 (of the
// uncompressed payload, the entry table's), name, stored bytes, u64 xxh3 of the stored bytes;
// a group of blobs is closed by "KVQJNOTE" u64 len, text, u64 xxh3(text). Little-endian.
#define JBLOB "KVQJBLOB"
#define JNOTE "KVQJNOTE"
typedef struct {
    char *name;
    kvq_entry_info info;
    uint64_t off;                   // stored bytes' offset in the spool
} jblob;
typedef struct {
    char *note;
    size_t first, n;                // blobs [first, first + n)
    uint64_t end;                   // spool offset after the note frame
} jgroup;

struct kvq_writer {
    char *journal_path;             // NULL: the spool is unlinked (no journal)
    jblob *jb;
    size_t n_jb;
    jgroup *jg;
    size_t n_jg, n_adopted;
    char *final_path, *tmp_path;    // tmp_path: the archive libzip writes, "<anchor>.z"
    char *anchor;                   // the locked temporary (formats/tmpfile.h) naming this write
    int anchor_fd;
    zip_t *za;
    int spool_fd;
    uint64_t spool_pos;  // bytes used in the spool
    uint64_t pos;        // where the next local header will start in the archive
    json_t *entries;     // the manifest's "entries" table
    wentry *ent;
    size_t n_ent, cap_ent;
    ZSTD_CCtx *cctx;
};

kvq_status kvq_writer_open(const char *final_path, kvq_writer **out, kvq_err *err) {
    *out = NULL;
    kvq_writer *w = calloc(1, sizeof *w);
    if (!w) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", final_path);
    w->spool_fd = -1;
    w->anchor_fd = -1;
    w->final_path = strdup(final_path);
    w->entries = json_object();
    w->cctx = ZSTD_createCCtx();
    if (!w->final_path || !w->entries || !w->cctx) {
        kvq_writer_abort(w);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", final_path);
    }
    // A locked anchor beside the output (removing what killed writers left there), and names
    // that extend it: the archive, which libzip creates (ZIP_EXCL, 0666 & ~umask) at zip_close
    // through its own "<name>.XXXXXX", and the spool, unlinked at once. A kill leaves at most
    // this family, which the next writer of the output removes.
    w->anchor_fd = kvq_tmp_create(final_path, &w->anchor);
    size_t tl = w->anchor ? strlen(w->anchor) + 3 : 0;
    char *spool_name = w->anchor ? malloc(tl) : NULL;
    if (w->anchor_fd < 0 || !spool_name || !(w->tmp_path = malloc(tl))) {
        kvq_status s = errno == EISDIR ? kvq_err_set(err, KVQ_ERR_IO, "%s: is a directory; name the output file", final_path)
                                       : kvq_err_set(err, KVQ_ERR_IO, "%s: cannot create a temporary file beside it: %s",
                                                     final_path, strerror(errno));
        free(spool_name);
        kvq_writer_abort(w);
        return s;
    }
    snprintf(w->tmp_path, tl, "%s.z", w->anchor);
    snprintf(spool_name, tl, "%s.s", w->anchor);
    w->spool_fd = open(spool_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (w->spool_fd >= 0) unlink(spool_name);
    free(spool_name);
    int ze = 0;
    if (w->spool_fd < 0 || !(w->za = zip_open(w->tmp_path, ZIP_CREATE | ZIP_EXCL, &ze))) {
        kvq_status s = kvq_err_set(err, KVQ_ERR_IO, "%s: cannot start the archive: %s", final_path,
                                   w->spool_fd < 0 ? strerror(errno) : "zip_open failed");
        kvq_writer_abort(w);
        return s;
    }
    *out = w;
    return KVQ_OK;
}

static void journal_free(kvq_writer *w) {
    for (size_t i = 0; i < w->n_jb; i++) free(w->jb[i].name);
    for (size_t i = 0; i < w->n_jg; i++) free(w->jg[i].note);
    free(w->jb);
    free(w->jg);
    w->jb = NULL, w->jg = NULL, w->n_jb = w->n_jg = 0;
}

// Reads the frames an earlier run left, keeping every complete group whose digests hold; stops
// at the first frame that is cut short, damaged or not a frame (a kill mid-write, or the
// manifest a commit appended).
static kvq_status journal_scan(kvq_writer *w, kvq_err *err) {
    struct stat st;
    if (fstat(w->spool_fd, &st) != 0) return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", w->journal_path, strerror(errno));
    uint64_t size = (uint64_t)st.st_size, pos = 0;
    size_t group_first = 0;
    uint8_t *buf = malloc(1 << 20);
    if (!buf) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", w->journal_path);
    for (;;) {
        uint8_t h[40];
        if (pos + 16 > size || pread_all(w->spool_fd, h, 16, pos)) break;
        if (!memcmp(h, JNOTE, 8)) {
            uint64_t len, dg;
            memcpy(&len, h + 8, 8);
            if (len > (1u << 30) || pos + 16 + len + 8 > size) break;
            char *t = malloc(len + 1);
            if (!t || pread_all(w->spool_fd, t, len, pos + 16) || pread_all(w->spool_fd, &dg, 8, pos + 16 + len) ||
                XXH3_64bits(t, len) != dg) { free(t); break; }
            t[len] = 0;
            jgroup *g = realloc(w->jg, (w->n_jg + 1) * sizeof *g);
            if (!g) { free(t); break; }
            w->jg = g;
            g[w->n_jg++] = (jgroup){t, group_first, w->n_jb - group_first, pos + 16 + len + 8};
            group_first = w->n_jb;
            pos += 16 + len + 8;
            continue;
        }
        if (memcmp(h, JBLOB, 8) || pos + 40 > size || pread_all(w->spool_fd, h, 40, pos)) break;
        uint32_t nl, zs;
        uint64_t sz, stored, xx;
        memcpy(&nl, h + 8, 4), memcpy(&zs, h + 12, 4), memcpy(&sz, h + 16, 8), memcpy(&stored, h + 24, 8), memcpy(&xx, h + 32, 8);
        uint64_t off = pos + 40 + nl;
        if (nl == 0 || nl > 4096 || zs > 1 || stored > size || off + stored + 8 > size) break;
        char *name = malloc(nl + 1);
        if (!name || pread_all(w->spool_fd, name, nl, pos + 40)) { free(name); break; }
        name[nl] = 0;
        XXH3_state_t *xs = XXH3_createState();
        XXH3_64bits_reset(xs);
        int ok = 1;
        for (uint64_t done = 0; done < stored && ok;) {
            size_t k = stored - done < (1u << 20) ? (size_t)(stored - done) : (1u << 20);
            ok = pread_all(w->spool_fd, buf, k, off + done) == 0;
            if (ok) XXH3_64bits_update(xs, buf, k);
            done += k;
        }
        uint64_t dg = 0;
        ok = ok && pread_all(w->spool_fd, &dg, 8, off + stored) == 0 && XXH3_64bits_digest(xs) == dg;
        XXH3_freeState(xs);
        jblob *b = ok ? realloc(w->jb, (w->n_jb + 1) * sizeof *b) : NULL;
        if (!b) { free(name); break; }
        w->jb = b;
        b[w->n_jb++] = (jblob){name, {.size = sz, .stored_size = stored, .xxh3 = xx, .zstd = (int)zs}, off};
        pos = off + stored + 8;
    }
    free(buf);
    return KVQ_OK;
}

kvq_status kvq_writer_open_journal(const char *final_path, int resume, kvq_writer **out, kvq_err *err) {
    kvq_status s = kvq_writer_open(final_path, out, err);
    if (s) return s;
    kvq_writer *w = *out;
    char *d = strdup(final_path), *b = strdup(final_path);
    size_t n = strlen(final_path) + 16;
    w->journal_path = malloc(n);
    if (!d || !b || !w->journal_path) {
        free(d), free(b);
        *out = NULL;
        kvq_writer_abort(w);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", final_path);
    }
    snprintf(w->journal_path, n, "%s/.%s.partial", dirname(d), basename(b));
    free(d), free(b);
    close(w->spool_fd); // the unlinked spool is replaced by the journal
    // The lock must be on the file the path names now: a writer that finished between our open
    // and our flock has unlinked the journal we opened, and a third writer would then lock a new
    // one beside us, both writing the same output. So after the lock, the path must still lead
    // to the locked inode; else open again.
    for (int tries = 0;; tries++) {
        w->spool_fd = open(w->journal_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (w->spool_fd < 0 || flock(w->spool_fd, LOCK_EX | LOCK_NB) != 0) break;
        struct stat a, b;
        if (tries >= 16 || (fstat(w->spool_fd, &a) == 0 && stat(w->journal_path, &b) == 0 && a.st_dev == b.st_dev &&
                            a.st_ino == b.st_ino))
            break;
        close(w->spool_fd);
    }
    if (w->spool_fd < 0 || flock(w->spool_fd, LOCK_EX | LOCK_NB) != 0) {
        int busy = w->spool_fd >= 0;
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: %s", w->journal_path,
                        busy ? "another kvq-convert is writing this output" : strerror(errno));
        if (busy) { free(w->journal_path); w->journal_path = NULL; } // not ours to remove
        *out = NULL;
        kvq_writer_abort(w);
        return s;
    }
    // Tests only (test_faults' two writers): the writer stops itself while it holds the lock, so
    // a second writer can be started at that point without racing the first's timing.
    if (getenv("KVQ_TEST_STOP_LOCKED")) raise(SIGSTOP);
    if (resume) s = journal_scan(w, err);
    else if (ftruncate(w->spool_fd, 0) != 0) s = kvq_err_set(err, KVQ_ERR_IO, "%s: %s", w->journal_path, strerror(errno));
    if (s == KVQ_OK && !resume) w->spool_pos = 0;
    if (s) { *out = NULL; kvq_writer_abort(w); }
    return s;
}

size_t kvq_writer_journal_count(const kvq_writer *w) { return w->n_jg; }

const char *kvq_writer_journal_text(const kvq_writer *w, size_t i) { return i < w->n_jg ? w->jg[i].note : NULL; }

static kvq_status writer_add_stored(kvq_writer *w, const char *name, int fd, uint64_t off, const kvq_entry_info *in,
                                    kvq_err *err);

kvq_status kvq_writer_journal_adopt(kvq_writer *w, size_t i, kvq_err *err) {
    if (i != w->n_adopted || i >= w->n_jg)
        return kvq_err_set(err, KVQ_ERR_ARG, "%s: journal group %zu adopted out of order", w->final_path, i);
    const jgroup *g = &w->jg[i];
    for (size_t k = g->first; k < g->first + g->n; k++) {
        kvq_status s = writer_add_stored(w, w->jb[k].name, w->spool_fd, w->jb[k].off, &w->jb[k].info, err);
        if (s) return s;
    }
    w->n_adopted++;
    w->spool_pos = g->end;
    return KVQ_OK;
}

kvq_status kvq_writer_journal_cut(kvq_writer *w, kvq_err *err) {
    if (!w->journal_path) return KVQ_OK;
    w->spool_pos = w->n_adopted ? w->jg[w->n_adopted - 1].end : 0;
    if (ftruncate(w->spool_fd, (off_t)w->spool_pos) != 0)
        return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", w->journal_path, strerror(errno));
    journal_free(w);
    return KVQ_OK;
}

kvq_status kvq_writer_journal_note(kvq_writer *w, const char *text, kvq_err *err) {
    if (!w->journal_path) return KVQ_OK;
    uint64_t len = strlen(text), dg = XXH3_64bits(text, len);
    uint8_t h[16];
    memcpy(h, JNOTE, 8), memcpy(h + 8, &len, 8);
    if (pwrite_all(w->spool_fd, h, 16, w->spool_pos) || pwrite_all(w->spool_fd, text, len, w->spool_pos + 16) ||
        pwrite_all(w->spool_fd, &dg, 8, w->spool_pos + 16 + len))
        return kvq_err_set(err, KVQ_ERR_IO, "%s: writing the journal: %s", w->journal_path, strerror(errno));
    w->spool_pos += 16 + len + 8;
    return KVQ_OK;
}

void kvq_writer_abort(kvq_writer *w) {
    if (!w) return;
    if (w->journal_path) unlink(w->journal_path); // a failure (not a kill) leaves nothing behind
    free(w->journal_path);
    journal_free(w);
    if (w->za) zip_discard(w->za);
    if (w->tmp_path) unlink(w->tmp_path); // nothing there unless zip_close ran
    if (w->spool_fd >= 0) close(w->spool_fd);
    if (w->anchor) unlink(w->anchor); // last: while it is there and locked, its family is ours
    if (w->anchor_fd >= 0) close(w->anchor_fd);
    free(w->anchor);
    for (size_t i = 0; i < w->n_ent; i++) free(w->ent[i].name);
    free(w->ent);
    json_decref(w->entries);
    ZSTD_freeCCtx(w->cctx);
    free(w->final_path);
    free(w->tmp_path);
    free(w);
}

// Adds an entry whose stored bytes are [off, off+stored) of fd. The local header's
// position is predicted from what libzip writes for a STORE entry with known size
// (30 + name + zip64 extra when over 4 GiB + our extra field); commit checks it.
static kvq_status writer_add_range(kvq_writer *w, const char *name, int fd, uint64_t off,
                                   uint64_t stored, kvq_err *err) {
    if (w->n_ent == w->cap_ent) {
        size_t cap = w->cap_ent ? 2 * w->cap_ent : 64;
        wentry *e = realloc(w->ent, cap * sizeof *e);
        if (!e) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", w->final_path);
        w->ent = e, w->cap_ent = cap;
    }
    uint64_t nlen = strlen(name);
    uint64_t base = w->pos + ZIP_LOCAL_HEADER + nlen + (stored > 0xffffffffu ? ZIP64_LOCAL_EXTRA : 0) + 4 + 2;
    uint64_t pad = (KVQ_ALIGN - base % KVQ_ALIGN) % KVQ_ALIGN;
    uint8_t extra[2 + KVQ_ALIGN] = {KVQ_ALIGN & 0xff, KVQ_ALIGN >> 8}; // u16 alignment, zero padding

    zip_source_t *src;
    if (stored == 0) src = zip_source_buffer(w->za, NULL, 0, 0);
    else {
        range_src *r = calloc(1, sizeof *r);
        if (!r) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", w->final_path);
        r->fd = fd, r->off = off, r->len = stored;
        zip_error_init(&r->error);
        if (!(src = zip_source_function(w->za, range_cb, r))) free(r);
    }
    zip_int64_t idx = src ? zip_file_add(w->za, name, src, 0) : -1;
    if (idx < 0) {
        zip_source_free(src);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: entry '%s': %s", w->final_path, name, zip_strerror(w->za));
    }
    if (zip_set_file_compression(w->za, (zip_uint64_t)idx, ZIP_CM_STORE, 0) < 0 ||
        zip_file_set_dostime(w->za, (zip_uint64_t)idx, 0, (1 << 5) | 1, 0) < 0 || // 1980-01-01: reproducible bytes
        zip_file_extra_field_set(w->za, (zip_uint64_t)idx, ALIGN_EXTRA_ID, ZIP_EXTRA_FIELD_NEW, extra,
                                 (zip_uint16_t)(2 + pad), ZIP_FL_LOCAL) < 0)
        return kvq_err_set(err, KVQ_ERR_IO, "%s: entry '%s': %s", w->final_path, name, zip_strerror(w->za));
    wentry *e = &w->ent[w->n_ent];
    if (!(e->name = strdup(name))) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", w->final_path);
    e->header = w->pos;
    e->offset = base + pad;
    e->stored = stored;
    w->n_ent++;
    w->pos = e->offset + stored;
    return KVQ_OK;
}

static kvq_status writer_add_stored(kvq_writer *w, const char *name, int fd, uint64_t off,
                                    const kvq_entry_info *in, kvq_err *err) {
    if (!valid_entry_name(name) || json_object_get(w->entries, name))
        return kvq_err_set(err, KVQ_ERR_ARG, "%s: entry name '%s' is invalid or already used",
                           w->final_path, name);
    kvq_status s = writer_add_range(w, name, fd, off, in->stored_size, err);
    if (s != KVQ_OK) return s;
    const wentry *e = &w->ent[w->n_ent - 1];
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, in->xxh3);
    json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:b,s:s}", "header", (json_int_t)e->header, "offset",
                          (json_int_t)e->offset, "size", (json_int_t)in->size, "stored_size",
                          (json_int_t)in->stored_size, "zstd", in->zstd, "xxh3", hex);
    if (!j || json_object_set_new(w->entries, name, j) != 0)
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", w->final_path);
    return KVQ_OK;
}

uint64_t kvq_entry_stored_estimate(const void *data, size_t n, kvq_entry_mode mode) {
    if (mode != KVQ_ENTRY_ZSTD_AUTO || n == 0) return n;
    const size_t whole = (size_t)64 << 20, chunk = (size_t)1 << 20;
    int sampled = n > whole;
    size_t len = sampled ? chunk : n, bound = ZSTD_compressBound(len);
    void *z = malloc(bound);
    if (!z) return n;
    double in = 0, outb = 0;
    for (int k = 0; k < (sampled ? 16 : 1); k++) {
        const uint8_t *p = (const uint8_t *)data + (sampled ? (n - chunk) / 15 * (size_t)k : 0);
        size_t c = ZSTD_compress(z, bound, p, len, ZSTD_LEVEL);
        if (ZSTD_isError(c)) { free(z); return n; }
        in += (double)len, outb += (double)c;
    }
    free(z);
    double c = sampled ? (double)n * outb / in : outb;
    return c <= 0.95 * (double)n ? (uint64_t)llround(c) : n;
}

kvq_status kvq_writer_add(kvq_writer *w, const char *entry, const void *data, size_t n,
                          kvq_entry_mode mode, kvq_entry_info *info, kvq_err *err) {
    kvq_entry_info in = {.size = n, .stored_size = n, .xxh3 = XXH3_64bits(data, n), .zstd = 0};
    void *z = NULL;
    const void *bytes = data;
    if (mode == KVQ_ENTRY_ZSTD_AUTO && n > 0) {
        size_t bound = ZSTD_compressBound(n);
        if (!(z = malloc(bound))) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: entry '%s': out of memory", w->final_path, entry);
        size_t c = ZSTD_compressCCtx(w->cctx, z, bound, data, n, ZSTD_LEVEL);
        if (ZSTD_isError(c)) {
            free(z);
            return kvq_err_set(err, KVQ_ERR_IO, "%s: entry '%s': zstd: %s", w->final_path, entry,
                               ZSTD_getErrorName(c));
        }
        if ((double)c <= 0.95 * (double)n) in.stored_size = c, in.zstd = 1, bytes = z; // saves >= 5 %
    }
    uint64_t at = w->spool_pos, head = 0;
    kvq_status s = KVQ_OK;
    if (w->journal_path) { // the frame header and name before the bytes
        uint8_t h[40];
        uint32_t nl = (uint32_t)strlen(entry), zs = (uint32_t)in.zstd;
        memcpy(h, JBLOB, 8), memcpy(h + 8, &nl, 4), memcpy(h + 12, &zs, 4), memcpy(h + 16, &in.size, 8);
        memcpy(h + 24, &in.stored_size, 8), memcpy(h + 32, &in.xxh3, 8);
        head = 40 + nl;
        s = pwrite_all(w->spool_fd, h, 40, at);
        if (s == KVQ_OK) s = pwrite_all(w->spool_fd, entry, nl, at + 40);
    }
    if (s == KVQ_OK) s = pwrite_all(w->spool_fd, bytes, in.stored_size, at + head);
    if (s == KVQ_OK && w->journal_path) {
        uint64_t dg = XXH3_64bits(bytes, in.stored_size);
        s = pwrite_all(w->spool_fd, &dg, 8, at + head + in.stored_size);
    }
    if (s != KVQ_OK) s = kvq_err_set(err, KVQ_ERR_IO, "%s: entry '%s': writing the spool file: %s",
                                     w->final_path, entry, strerror(errno));
    else s = writer_add_stored(w, entry, w->spool_fd, at + head, &in, err);
    free(z);
    if (s != KVQ_OK) return s;
    w->spool_pos = at + head + in.stored_size + (w->journal_path ? 8 : 0);
    if (info) *info = in;
    return KVQ_OK;
}

kvq_status kvq_writer_commit(kvq_writer *w, json_t *manifest, kvq_err *err) {
    kvq_status s = KVQ_OK;
    char *text = NULL;
    json_t *m = json_is_object(manifest) ? json_copy(manifest) : NULL;
    if (!m) { s = kvq_err_set(err, KVQ_ERR_ARG, "%s: manifest is not a JSON object", w->final_path); goto fail; }
    json_object_set(m, "entries", w->entries);
    text = json_dumps(m, JSON_INDENT(1));
    json_decref(m);
    if (!text) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: cannot serialise the manifest", w->final_path); goto fail; }
    // manifest.json: last entry, stored plain and aligned, not in its own table.
    size_t tlen = strlen(text);
    if (pwrite_all(w->spool_fd, text, tlen, w->spool_pos) != KVQ_OK) {
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: writing the spool file: %s", w->final_path, strerror(errno));
        goto fail;
    }
    if ((s = writer_add_range(w, MANIFEST_NAME, w->spool_fd, w->spool_pos, tlen, err)) != KVQ_OK) goto fail;
    if (zip_close(w->za) < 0) {
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: writing the archive: %s", w->final_path, zip_strerror(w->za));
        goto fail;
    }
    w->za = NULL;
    int fd = open(w->tmp_path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: reopening the written archive: %s", w->tmp_path, strerror(errno));
        if (fd >= 0) close(fd);
        goto fail;
    }
    // zipalign -c: every entry's data really is where the table says, 64-aligned.
    for (size_t i = 0; i < w->n_ent && s == KVQ_OK; i++) {
        const wentry *e = &w->ent[i];
        s = check_local_header(fd, (uint64_t)st.st_size, w->final_path, e->name, e->header, e->offset,
                               e->stored, err);
        if (s == KVQ_OK && (e->offset % KVQ_ALIGN || e->offset + e->stored > (uint64_t)st.st_size))
            s = kvq_err_set(err, KVQ_ERR_IO, "%s: entry '%s' landed at unaligned offset %" PRIu64,
                            w->final_path, e->name, e->offset);
    }
    // The reader's own zip check (kvq_zipcheck) must pass on what was written: a file kvq would
    // refuse is never renamed into place (this covers the zip64 layout of entries over 4 GiB,
    // which the tests do not write).
    if (s == KVQ_OK && st.st_size > 0) {
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        kvq_zip_member *zm = NULL;
        size_t nzm = 0;
        if (map == MAP_FAILED) s = kvq_err_set(err, KVQ_ERR_IO, "%s: mmap: %s", w->tmp_path, strerror(errno));
        else s = kvq_zipcheck(map, (uint64_t)st.st_size, w->final_path, &zm, &nzm, err);
        if (map != MAP_FAILED) munmap(map, (size_t)st.st_size);
        kvq_zipcheck_free(zm, nzm);
    }
    if (s == KVQ_OK && fsync(fd) != 0)
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: fsync: %s", w->tmp_path, strerror(errno));
    close(fd);
    if (s != KVQ_OK) goto fail;
    if (rename(w->tmp_path, w->final_path) != 0) {
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: rename from %s: %s", w->final_path, w->tmp_path, strerror(errno));
        goto fail;
    }
    free(w->tmp_path);
    w->tmp_path = NULL;
    // (abort, below, removes the journal: the file it was for is complete)
    if (fsync_dir_of(w->final_path) != KVQ_OK)
        s = kvq_err_set(err, KVQ_ERR_IO, "%s: fsync of its directory failed: %s", w->final_path, strerror(errno));
fail:
    free(text);
    kvq_writer_abort(w);
    return s;
}

// ---- reading ---------------------------------------------------------------

typedef struct {
    const char *name;    // key in the manifest (borrowed)
    uint64_t header, offset, size, stored, xxh3;
    int zstd;
    int checked;         // digest verified
    void *buf;           // decompressed payload (zstd entries)
} fentry;

struct kvq_file {
    char *path;
    int fd;
    uint8_t *map;
    uint64_t size;
    json_t *manifest;
    fentry *e;           // sorted by name
    size_t n;
};

static int fentry_cmp(const void *a, const void *b) {
    return strcmp(((const fentry *)a)->name, ((const fentry *)b)->name);
}

static fentry *find_entry(const kvq_file *f, const char *name) {
    fentry key = {.name = name};
    return bsearch(&key, f->e, f->n, sizeof key, fentry_cmp);
}

static int get_u64(const json_t *o, const char *k, uint64_t *v) {
    json_t *j = json_object_get(o, k);
    if (!json_is_integer(j) || json_integer_value(j) < 0) return -1;
    *v = (uint64_t)json_integer_value(j);
    return 0;
}

// Parses and checks the entry table: fields, the zip's own record of each entry (libzip's and
// kvq_zipcheck's: the same local header offset), bounds against the file size, alignment, and
// the local header.
static kvq_status load_entries(kvq_file *f, zip_t *za, const kvq_zip_member *zm, size_t nzm, kvq_err *err) {
    json_t *tab = json_object_get(f->manifest, "entries");
    if (!json_is_object(tab))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: manifest has no \"entries\" object", f->path);
    f->n = json_object_size(tab);
    if (!(f->e = calloc(f->n ? f->n : 1, sizeof *f->e))) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", f->path);
    const char *name;
    json_t *v;
    size_t i = 0;
    json_object_foreach(tab, name, v) {
        fentry *e = &f->e[i++];
        e->name = name;
        const char *hex = json_string_value(json_object_get(v, "xxh3"));
        char *end = NULL;
        if (hex) e->xxh3 = strtoull(hex, &end, 16);
        if (!json_is_object(v) || get_u64(v, "header", &e->header) || get_u64(v, "offset", &e->offset) ||
            get_u64(v, "size", &e->size) || get_u64(v, "stored_size", &e->stored) ||
            !json_is_boolean(json_object_get(v, "zstd")) || !hex || strlen(hex) != 16 || *end)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': malformed entry table record", f->path, name);
        e->zstd = json_is_true(json_object_get(v, "zstd"));
        if (e->offset > f->size || e->stored > f->size - e->offset)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': bytes [%" PRIu64 ", +%" PRIu64
                               ") exceed file size %" PRIu64, f->path, name, e->offset, e->stored, f->size);
        if (e->offset % KVQ_ALIGN)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': offset %" PRIu64 " is not %d-byte aligned",
                               f->path, name, e->offset, KVQ_ALIGN);
        if (!e->zstd && e->size != e->stored)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': raw entry with size %" PRIu64
                               " != stored_size %" PRIu64, f->path, name, e->size, e->stored);
        zip_stat_t st;
        if (zip_stat(za, name, 0, &st) != 0)
            return kvq_err_set(err, KVQ_ERR_MISSING, "%s: entry '%s' is in the manifest but not in the archive", f->path, name);
        if (st.comp_method != ZIP_CM_STORE || st.size != e->stored)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': archive stores it with method %d and %" PRIu64
                               " bytes; the manifest says stored, %" PRIu64, f->path, name, (int)st.comp_method,
                               (uint64_t)st.size, e->stored);
        const kvq_zip_member *m = kvq_zipcheck_find(zm, nzm, name);
        if (!m || m->header != e->header)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': the manifest puts its local header at %" PRIu64
                               ", the zip's central directory at %" PRIu64, f->path, name, e->header, m ? m->header : 0);
        kvq_status s = check_local_header(f->fd, f->size, f->path, name, e->header, e->offset, e->stored, err);
        if (s != KVQ_OK) return s;
    }
    qsort(f->e, f->n, sizeof *f->e, fentry_cmp);
    zip_int64_t nz = zip_get_num_entries(za, 0);
    for (zip_int64_t k = 0; k < nz; k++) {
        const char *zn = zip_get_name(za, (zip_uint64_t)k, 0);
        if (zn && strcmp(zn, MANIFEST_NAME) != 0 && !find_entry(f, zn))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: archive entry '%s' is not in the manifest's entry table", f->path, zn);
    }
    return KVQ_OK;
}

static kvq_status read_manifest(kvq_file *f, zip_t *za, kvq_err *err) {
    zip_stat_t st;
    if (zip_stat(za, MANIFEST_NAME, 0, &st) != 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: no %s in the archive (not a .kvq file?)", f->path, MANIFEST_NAME);
    if (st.size > MANIFEST_MAX)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s is %" PRIu64 " bytes (limit %u)", f->path, MANIFEST_NAME,
                           (uint64_t)st.size, MANIFEST_MAX);
    char *buf = malloc(st.size + 1);
    if (!buf) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", f->path);
    zip_file_t *zf = zip_fopen(za, MANIFEST_NAME, 0);
    zip_int64_t got = zf ? zip_fread(zf, buf, st.size) : -1;
    if (zf) zip_fclose(zf);
    if (got < 0 || (uint64_t)got != st.size) {
        free(buf);
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: cannot read %s: %s", f->path, MANIFEST_NAME, zip_strerror(za));
    }
    json_error_t je;
    f->manifest = json_loadb(buf, st.size, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!json_is_object(f->manifest))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s is not a JSON object: line %d: %s", f->path, MANIFEST_NAME,
                           je.line, f->manifest ? "top level is not an object" : je.text);
    const char *fmt = json_string_value(json_object_get(f->manifest, "format"));
    if (!fmt || strcmp(fmt, KVQ_FORMAT_NAME) != 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: manifest format is '%s', expected '%s'", f->path,
                           fmt ? fmt : "(missing)", KVQ_FORMAT_NAME);
    json_t *ver = json_object_get(f->manifest, "format_version");
    if (!json_is_integer(ver))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: manifest has no integer format_version", f->path);
    if (json_integer_value(ver) != KVQ_FORMAT_VERSION)
        return kvq_err_set(err, KVQ_ERR_VERSION, "%s: format version %" JSON_INTEGER_FORMAT
                           " is not supported (this kvq reads version %d)", f->path, json_integer_value(ver),
                           KVQ_FORMAT_VERSION);
    return KVQ_OK;
}

static kvq_status open_file(const char *path, int schema, kvq_file **out, kvq_err *err) {
    *out = NULL;
    kvq_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    }
    f->fd = open(path, O_RDONLY);
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        kvq_status s = kvq_err_set(err, KVQ_ERR_IO, "%s: %s", path, strerror(errno));
        kvq_file_close(f);
        return s;
    }
    f->size = (uint64_t)st.st_size;
    if (!S_ISREG(st.st_mode)) {
        kvq_status s = kvq_err_set(err, KVQ_ERR_IO, "%s: not a regular file", path);
        kvq_file_close(f);
        return s;
    }
    if (f->size > 0) {
        f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            kvq_status s = kvq_err_set(err, KVQ_ERR_IO, "%s: mmap: %s", path, strerror(errno));
            kvq_file_close(f);
            return s;
        }
    }
    // kvq's own check of the zip structure first (overlapping members, local headers against the
    // central directory), then libzip's.
    kvq_zip_member *zm = NULL;
    size_t nzm = 0;
    kvq_status zs = kvq_zipcheck(f->map, f->size, path, &zm, &nzm, err);
    if (zs != KVQ_OK) {
        kvq_file_close(f);
        return zs;
    }
    int ze = 0, dfd = dup(f->fd);
    zip_t *za = dfd >= 0 ? zip_fdopen(dfd, ZIP_CHECKCONS, &ze) : NULL;
    if (!za) {
        kvq_zipcheck_free(zm, nzm);
        if (dfd >= 0) close(dfd);
        zip_error_t zerr;
        zip_error_init_with_code(&zerr, ze);
        kvq_status s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: not a valid zip archive: %s", path, zip_error_strerror(&zerr));
        zip_error_fini(&zerr);
        kvq_file_close(f);
        return s;
    }
    kvq_status s = read_manifest(f, za, err);
    if (s == KVQ_OK) s = load_entries(f, za, zm, nzm, err);
    kvq_zipcheck_free(zm, nzm);
    if (s == KVQ_OK && schema) s = kvq_file_check_manifest(f->manifest, path, err); // the whole meaning
    zip_discard(za);
    if (s != KVQ_OK) { kvq_file_close(f); return s; }
    *out = f;
    return KVQ_OK;
}

kvq_status kvq_file_open(const char *path, kvq_file **out, kvq_err *err) { return open_file(path, 1, out, err); }
kvq_status kvq_file_open_container(const char *path, kvq_file **out, kvq_err *err) {
    return open_file(path, 0, out, err);
}

void kvq_file_close(kvq_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free(f->e[i].buf);
    free(f->e);
    json_decref(f->manifest);
    if (f->map) munmap(f->map, f->size);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

const json_t *kvq_file_manifest(const kvq_file *f) { return f->manifest; }
const char *kvq_file_path(const kvq_file *f) { return f->path; }
uint64_t kvq_file_size(const kvq_file *f) { return f->size; }

// Makes e's payload available (keep=1: zstd output stays in e->buf) and checks
// its digest once.
static kvq_status load_entry(kvq_file *f, fentry *e, int keep, const void **data, kvq_err *err) {
    const uint8_t *raw = f->map + e->offset;
    const void *p = raw;
    void *buf = e->buf;
    if (e->zstd && !buf) {
        unsigned long long fs = ZSTD_getFrameContentSize(raw, e->stored);
        if (fs != e->size)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': zstd frame declares %lld bytes, manifest says %" PRIu64,
                               f->path, e->name, (long long)fs, e->size);
        if (!(buf = malloc(e->size ? e->size : 1))) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: entry '%s': out of memory", f->path, e->name);
        size_t r = ZSTD_decompress(buf, e->size, raw, e->stored);
        if (ZSTD_isError(r) || r != e->size) {
            free(buf);
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s': zstd: %s", f->path, e->name,
                               ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short frame");
        }
    }
    if (e->zstd) p = buf;
    if (!e->checked) {
        uint64_t h = XXH3_64bits(p, e->size);
        if (h != e->xxh3) {
            if (buf != e->buf) free(buf);
            return kvq_err_set(err, KVQ_ERR_DIGEST, "%s: entry '%s': xxh3 digest mismatch (manifest %016" PRIx64
                               ", data %016" PRIx64 ")", f->path, e->name, e->xxh3, h);
        }
        e->checked = 1;
    }
    if (e->zstd && keep) e->buf = buf;
    else if (buf != e->buf) free(buf);
    if (data) *data = p;
    return KVQ_OK;
}

kvq_status kvq_file_entry_size(const kvq_file *f, const char *entry, uint64_t *size) {
    const fentry *e = entry ? find_entry(f, entry) : NULL;
    if (!e) return KVQ_ERR_MISSING;
    *size = e->size;
    return KVQ_OK;
}

kvq_status kvq_file_entry(kvq_file *f, const char *entry, const void **data, size_t *size, kvq_err *err) {
    fentry *e = find_entry(f, entry);
    if (!e) return kvq_err_set(err, KVQ_ERR_MISSING, "%s: no entry '%s'", f->path, entry);
    kvq_status s = load_entry(f, e, 1, data, err);
    if (s == KVQ_OK && size) *size = (size_t)e->size;
    return s;
}

void kvq_file_release(kvq_file *f, const char *entry) {
    fentry *e = find_entry(f, entry);
    if (e && e->buf) { free(e->buf); e->buf = NULL; }
    // Stored entries are read in place from the mapping: drop their pages from the resident
    // set (a later access faults them in again from the file), so a model that transcodes or
    // decodes its tensors at load does not also hold the file's pages.
    if (e && !e->zstd && f->map && e->stored) {
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t a = (uintptr_t)(f->map + e->offset), b = a + e->stored;
        a = (a + pg - 1) & ~(pg - 1);
        b &= ~(pg - 1);
        if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
    }
}

void *kvq_file_take(kvq_file *f, const char *entry) {
    fentry *e = find_entry(f, entry);
    if (!e || !e->zstd || !e->buf) return NULL;
    void *b = e->buf;
    e->buf = NULL;
    return b;
}

kvq_status kvq_file_verify(kvq_file *f, kvq_err *err) {
    for (size_t i = 0; i < f->n; i++) {
        kvq_status s = load_entry(f, &f->e[i], 0, NULL, err);
        if (s != KVQ_OK) return s;
    }
    return KVQ_OK;
}

static kvq_status open_file(const char *path, int schema, kvq_file **out, kvq_err *err);

static int fentry_offset_cmp(const void *a, const void *b) {
    uint64_t x = (*(fentry *const *)a)->offset, y = (*(fentry *const *)b)->offset;
    return x < y ? -1 : x > y;
}

kvq_status kvq_file_rewrite_manifest(const char *path, json_t *manifest, kvq_err *err) {
    kvq_file *f;
    kvq_status s = open_file(path, 0, &f, err); // a container operation: the entries are copied as they are
    if (s != KVQ_OK) return s;
    fentry **order = malloc((f->n ? f->n : 1) * sizeof *order);
    kvq_writer *w = NULL;
    if (!order) s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    else s = kvq_writer_open(path, &w, err);
    if (s == KVQ_OK) {
        for (size_t i = 0; i < f->n; i++) order[i] = &f->e[i];
        qsort(order, f->n, sizeof *order, fentry_offset_cmp); // keep the original entry order
        for (size_t i = 0; i < f->n && s == KVQ_OK; i++) {
            const fentry *e = order[i];
            kvq_entry_info in = {.size = e->size, .stored_size = e->stored, .xxh3 = e->xxh3, .zstd = e->zstd};
            s = writer_add_stored(w, e->name, f->fd, e->offset, &in, err);
        }
        if (s == KVQ_OK) s = kvq_writer_commit(w, manifest, err); // reads f->fd: f stays open
        else kvq_writer_abort(w);
    }
    free(order);
    kvq_file_close(f);
    return s;
}
