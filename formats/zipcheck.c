// kvq's own check of a .kvq's zip structure (see zipcheck.h). Every offset and size read from
// the file is checked against the file's size before it is used, with overflow-safe sums;
// nothing is inflated (a .kvq stores every member, so a member whose method is not "stored" is
// refused before any byte of it is read).
#include "formats/zipcheck.h"

#include <inttypes.h>
#include <string.h>

#define EOCD_SIG 0x06054b50u
#define EOCD_LEN 22
#define LOC64_SIG 0x07064b50u
#define LOC64_LEN 20
#define EOCD64_SIG 0x06064b50u
#define EOCD64_LEN 56
#define CDIR_SIG 0x02014b50u
#define CDIR_LEN 46
#define LOCAL_SIG 0x04034b50u
#define LOCAL_LEN 30
#define ZIP64_EXTRA_ID 0x0001
#define FLAG_ENCRYPTED 0x0001
#define FLAG_DESCRIPTOR 0x0008

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

// A member name made printable for a message (bytes outside printable ASCII become '?').
static const char *show(const uint8_t *s, size_t n, char buf[128]) {
    size_t k = 0;
    for (; k < n && k < 120; k++) buf[k] = s[k] >= 0x20 && s[k] < 0x7f ? (char)s[k] : '?';
    if (k < n) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
    buf[k] = 0;
    return buf;
}

// Reads the zip64 extended-information fields that the 32-bit fields marked 0xffffffff defer to,
// in the order the spec gives (uncompressed size, compressed size, local header offset).
// `extra` is the record's whole extra field. @return 0, or -1 when the field list is malformed
// (a field running past the extra field) or a deferred value is missing.
static int read_zip64(const uint8_t *extra, size_t len, uint64_t *usize, uint64_t *csize, uint64_t *offset) {
    int need = (*usize == 0xffffffffu) + (*csize == 0xffffffffu) + (offset && *offset == 0xffffffffu);
    size_t p = 0;
    int found = 0;
    while (p < len) {
        if (len - p < 4) return -1;
        uint16_t id = rd16(extra + p), n = rd16(extra + p + 2);
        if (len - p - 4 < n) return -1;
        if (id == ZIP64_EXTRA_ID && !found) {
            found = 1;
            const uint8_t *q = extra + p + 4;
            size_t left = n;
            uint64_t *field[3] = {usize, csize, offset};
            for (int i = 0; i < 3; i++) {
                if (!field[i] || *field[i] != 0xffffffffu) continue;
                if (left < 8) return -1;
                *field[i] = rd64(q);
                q += 8, left -= 8;
            }
        }
        p += 4 + (size_t)n;
    }
    return need && !found ? -1 : 0;
}

static int member_name_cmp(const void *a, const void *b) {
    return strcmp(((const kvq_zip_member *)a)->name, ((const kvq_zip_member *)b)->name);
}

static int member_header_cmp(const void *a, const void *b) {
    uint64_t x = (*(const kvq_zip_member *const *)a)->header, y = (*(const kvq_zip_member *const *)b)->header;
    return x < y ? -1 : x > y;
}

const kvq_zip_member *kvq_zipcheck_find(const kvq_zip_member *members, size_t n, const char *name) {
    kvq_zip_member key = {.name = (char *)name};
    return n ? bsearch(&key, members, n, sizeof key, member_name_cmp) : NULL;
}

void kvq_zipcheck_free(kvq_zip_member *members, size_t n) {
    if (!members) return;
    for (size_t i = 0; i < n; i++) free(members[i].name);
    free(members);
}

// ---- end of central directory ------------------------------------------------------------

typedef struct {
    uint64_t n, cd_off, cd_size;
    uint64_t cd_limit; // where the records after the central directory begin
} cdir_info;

static kvq_status read_end(const uint8_t *map, uint64_t size, const char *path, cdir_info *ci, kvq_err *err) {
    // The last record whose comment reaches exactly the end of the file.
    uint64_t pos = UINT64_MAX;
    if (size >= EOCD_LEN) {
        uint64_t lo = size - EOCD_LEN > 0xffff ? size - EOCD_LEN - 0xffff : 0;
        for (uint64_t p = size - EOCD_LEN + 1; p-- > lo;)
            if (rd32(map + p) == EOCD_SIG && rd16(map + p + 20) == size - p - EOCD_LEN) { pos = p; break; }
    }
    if (pos == UINT64_MAX)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: not a valid zip archive: no end of central directory record", path);
    const uint8_t *e = map + pos;
    uint64_t n_disk = rd16(e + 8), n = rd16(e + 10), cd_size = rd32(e + 12), cd_off = rd32(e + 16);
    if (rd16(e + 4) != 0 || rd16(e + 6) != 0 || n_disk != n)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: not a valid zip archive: a multi-disk archive", path);
    ci->cd_limit = pos;
    if (pos >= LOC64_LEN && rd32(map + pos - LOC64_LEN) == LOC64_SIG) {
        const uint8_t *l = map + pos - LOC64_LEN;
        uint64_t off = rd64(l + 8);
        if (rd32(l + 4) != 0 || rd32(l + 16) > 1)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: not a valid zip archive: a multi-disk archive", path);
        if (off > pos - LOC64_LEN || pos - LOC64_LEN - off < EOCD64_LEN || rd32(map + off) != EOCD64_SIG ||
            rd64(map + off + 4) < EOCD64_LEN - 12 || rd64(map + off + 4) > pos - LOC64_LEN - off - 12)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip64 end of central directory record at %" PRIu64
                               " is missing or runs past its locator", path, off);
        const uint8_t *z = map + off;
        uint64_t z_disk = rd64(z + 24), z_n = rd64(z + 32), z_size = rd64(z + 40), z_off = rd64(z + 48);
        if (rd32(z + 16) != 0 || rd32(z + 20) != 0 || z_disk != z_n)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: not a valid zip archive: a multi-disk archive", path);
        // A 16/32-bit field not marked "see zip64" must agree with its 64-bit value.
        if ((n != 0xffff && n != z_n) || (cd_size != 0xffffffffu && cd_size != z_size) ||
            (cd_off != 0xffffffffu && cd_off != z_off))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: the zip64 end of central directory (%" PRIu64 " members, %" PRIu64
                               " bytes at %" PRIu64 ") disagrees with the end record (%" PRIu64 ", %" PRIu64 " at %" PRIu64 ")",
                               path, z_n, z_size, z_off, n, cd_size, cd_off);
        n = z_n, cd_size = z_size, cd_off = z_off;
        ci->cd_limit = off;
    } else if (n == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: the end of central directory defers to a zip64 record that is not there", path);
    }
    if (cd_off > ci->cd_limit || cd_size > ci->cd_limit - cd_off)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: central directory [%" PRIu64 ", +%" PRIu64 ") runs past its end record at %"
                           PRIu64, path, cd_off, cd_size, ci->cd_limit);
    if (n > KVQ_ZIP_MAX_MEMBERS || n * CDIR_LEN > cd_size)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: the zip declares %" PRIu64 " members, more than its %" PRIu64
                           "-byte central directory holds (limit %u)", path, n, cd_size, KVQ_ZIP_MAX_MEMBERS);
    ci->n = n, ci->cd_off = cd_off, ci->cd_size = cd_size;
    return KVQ_OK;
}

// ---- one member: its central directory record and its local header -----------------------

// Reads the central directory record at *p (advanced past it) into m and checks the local
// header it points at against it.
static kvq_status read_member(const uint8_t *map, uint64_t size, const char *path, uint64_t cd_end, uint64_t *p,
                              kvq_zip_member *m, kvq_err *err) {
    char nb[128];
    if (cd_end - *p < CDIR_LEN || rd32(map + *p) != CDIR_SIG)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: no central directory record at %" PRIu64, path, *p);
    const uint8_t *c = map + *p;
    uint16_t flags = rd16(c + 8), method = rd16(c + 10);
    size_t nl = rd16(c + 28), el = rd16(c + 30), cl = rd16(c + 32);
    if (cd_end - *p - CDIR_LEN < nl + el + cl)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: central directory record at %" PRIu64 " runs past the directory", path, *p);
    const uint8_t *name = c + CDIR_LEN;
    m->crc = rd32(c + 16), m->csize = rd32(c + 20), m->usize = rd32(c + 24), m->header = rd32(c + 42);
    m->method = method;
    if (nl == 0 || memchr(name, 0, nl))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: central directory record at %" PRIu64 ": empty name or a NUL byte in '%s'",
                           path, *p, show(name, nl, nb));
    if (!(m->name = malloc(nl + 1))) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    memcpy(m->name, name, nl);
    m->name[nl] = 0;
    const char *nm = show(name, nl, nb);
    if (rd16(c + 34) != 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s' starts on disk %u (a multi-disk archive)", path, nm, rd16(c + 34));
    if (read_zip64(name + nl, el, &m->usize, &m->csize, &m->header))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s': malformed extra field or missing zip64 sizes in the central directory",
                           path, nm);
    *p += CDIR_LEN + nl + el + cl;
    if (flags & (FLAG_ENCRYPTED | FLAG_DESCRIPTOR))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s' is %s (a .kvq has neither)", path, nm,
                           flags & FLAG_ENCRYPTED ? "encrypted" : "followed by a data descriptor");
    if (method != 0 || m->csize != m->usize)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s' uses method %u with %" PRIu64 " bytes stored for %" PRIu64
                           " (a .kvq stores every member: method 0, equal sizes)", path, nm, method, m->csize, m->usize);

    // The local header the record points at must exist and say the same.
    if (m->header > size || size - m->header < LOCAL_LEN || rd32(map + m->header) != LOCAL_SIG)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s': no local header at offset %" PRIu64
                           " (the central directory's; file size %" PRIu64 ")", path, nm, m->header, size);
    const uint8_t *l = map + m->header;
    size_t lnl = rd16(l + 26), lel = rd16(l + 28);
    if (size - m->header - LOCAL_LEN < lnl + lel)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s': local header at %" PRIu64 " runs past the end of the file",
                           path, nm, m->header);
    uint64_t lu = rd32(l + 22), lc = rd32(l + 18);
    const char *what = NULL;
    if (lnl != nl || memcmp(l + LOCAL_LEN, name, nl)) what = "name";
    else if (rd16(l + 8) != method) what = "method";
    else if (rd16(l + 6) != flags) what = "flags";
    else if (rd32(l + 14) != m->crc) what = "CRC";
    else if (read_zip64(l + LOCAL_LEN + lnl, lel, &lu, &lc, NULL) || lu != m->usize || lc != m->csize) what = "sizes";
    if (what) {
        char lb[128];
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s': local header at %" PRIu64 " (name '%s', method %u, %" PRIu64
                           " bytes) disagrees with the central directory on its %s", path, nm, m->header,
                           show(l + LOCAL_LEN, lnl, lb), rd16(l + 8), lc, what);
    }
    m->data = m->header + LOCAL_LEN + lnl + lel;
    if (m->csize > size - m->data)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s': data [%" PRIu64 ", +%" PRIu64 ") runs past the end of the file (%"
                           PRIu64 " bytes)", path, nm, m->data, m->csize, size);
    return KVQ_OK;
}

// ---- the whole directory -----------------------------------------------------------------

kvq_status kvq_zipcheck(const uint8_t *map, uint64_t size, const char *path, kvq_zip_member **members, size_t *n,
                        kvq_err *err) {
    *members = NULL, *n = 0;
    cdir_info ci = {0};
    kvq_status s = read_end(map, size, path, &ci, err);
    if (s != KVQ_OK) return s;
    kvq_zip_member *m = calloc(ci.n ? ci.n : 1, sizeof *m);
    kvq_zip_member **order = malloc((ci.n ? ci.n : 1) * sizeof *order);
    if (!m || !order) {
        free(m), free(order);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    }
    uint64_t p = ci.cd_off, cd_end = ci.cd_off + ci.cd_size;
    size_t k = 0;
    for (; k < ci.n && s == KVQ_OK; k++) s = read_member(map, size, path, cd_end, &p, &m[k], err);
    if (s == KVQ_OK && p != cd_end)
        s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: central directory holds %" PRIu64 " bytes after its %" PRIu64 " records",
                        path, cd_end - p, ci.n);
    // No two members' [local header, end of data) overlap, and none reaches into the directory.
    for (size_t i = 0; s == KVQ_OK && i < k; i++) order[i] = &m[i];
    if (s == KVQ_OK) qsort(order, k, sizeof *order, member_header_cmp);
    for (size_t i = 0; s == KVQ_OK && i < k; i++) {
        const kvq_zip_member *a = order[i], *b = i + 1 < k ? order[i + 1] : NULL;
        char an[128], bn[128];
        uint64_t end = a->data + a->csize, next = i + 1 < k ? order[i + 1]->header : ci.cd_off;
        if (end > next) {
            const char *as = show((const uint8_t *)a->name, strlen(a->name), an);
            if (b)
                s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip members '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64
                                ", %" PRIu64 ") overlap", path, as, a->header, end,
                                show((const uint8_t *)b->name, strlen(b->name), bn), b->header, b->data + b->csize);
            else
                s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s' [%" PRIu64 ", %" PRIu64
                                ") overlaps the central directory at %" PRIu64, path, as, a->header, end, ci.cd_off);
        }
    }
    if (s == KVQ_OK) {
        qsort(m, k, sizeof *m, member_name_cmp);
        char nb[128];
        for (size_t i = 1; i < k && s == KVQ_OK; i++)
            if (!strcmp(m[i - 1].name, m[i].name))
                s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: zip member '%s' appears twice in the central directory", path,
                                show((const uint8_t *)m[i].name, strlen(m[i].name), nb));
    }
    free(order);
    if (s != KVQ_OK) {
        kvq_zipcheck_free(m, ci.n);
        return s;
    }
    *members = m, *n = k;
    return KVQ_OK;
}
