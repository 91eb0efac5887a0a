#!/usr/bin/env python3
"""Writes the zip-level broken .kvq files of tests/data/bad/ (zip-*.kvq; cases.txt runs them).

Each file is a small zip built byte by byte: a stored member or two, a minimal manifest.json
(format, version, entry table) and one defect in the zip structure itself (overlapping members,
a local header that disagrees with the central directory, a compressed member, a directory
that runs past its end record, ...). Two good controls (zip-good.kvq, zip-good-zip64.kvq, the
second in zip64 form with every size and offset in the extra field) pass the zip checks and
the entry table and stop at the manifest's schema. Run from anywhere; the files are committed.
"""
import json
import os
import struct
import zlib

OUT = os.path.dirname(os.path.abspath(__file__))
ALIGN = 64
M32 = 0xFFFFFFFF


def align_extra(pos, name):
    """zipalign-style extra field (id 0xD935) that puts the data at a multiple of 64."""
    pad = (-(pos + 30 + len(name) + 6)) % ALIGN
    return struct.pack("<HHH", 0xD935, 2 + pad, ALIGN) + b"\0" * pad


class Zip:
    def __init__(self):
        self.buf = bytearray()
        self.members = []  # central directory records, in order

    def add(self, name, data, zip64=False, lh=None, cdir=None, method=0, stored=None):
        """Appends a local header and data; records a central directory entry.
        lh / cdir: overrides of the local header's / the record's fields."""
        lh, cdir = lh or {}, cdir or {}
        name = name.encode()
        stored = data if stored is None else stored
        m = dict(name=name, offset=len(self.buf), crc=zlib.crc32(data), csize=len(stored), usize=len(data),
                 method=method, flags=0, zip64=zip64)
        extra = b""
        if zip64:
            extra = struct.pack("<HHQQ", 1, 16, m["usize"], m["csize"])
        extra += align_extra(len(self.buf) + len(extra), lh.get("name", name))
        f = dict(m, **lh)
        csize, usize = (M32, M32) if zip64 else (f["csize"], f["usize"])
        self.buf += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, f["flags"], f["method"], 0, 0x21, f["crc"], csize, usize,
                                len(f["name"]), len(extra)) + f["name"] + extra
        m["data"] = len(self.buf)
        self.buf += stored
        m.update(cdir)
        self.members.append(m)
        return m

    def finish(self, zip64=False, count=None, cd_off=None, cd_size=None):
        start = len(self.buf)
        for m in self.members:
            extra = b""
            csize, usize, off = m["csize"], m["usize"], m["offset"]
            if m["zip64"]:
                extra = struct.pack("<HHQQQ", 1, 24, usize, csize, off)
                csize = usize = off = M32
            self.buf += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, m["flags"], m["method"], 0, 0x21, m["crc"],
                                    csize, usize, len(m["name"]), len(extra), 0, 0, 0, 0, off) + m["name"] + extra
        n = len(self.members) if count is None else count
        size = len(self.buf) - start if cd_size is None else cd_size
        off = start if cd_off is None else cd_off
        if zip64:
            e64 = len(self.buf)
            self.buf += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, size, off)
            self.buf += struct.pack("<IIQI", 0x07064B50, 0, e64, 1)
            n, size, off = 0xFFFF, M32, M32
        self.buf += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, size, off, 0)
        return bytes(self.buf)


def manifest(entries, **over):
    """A minimal manifest: what the container layer reads before the schema (over: record fields to change)."""
    table = {e["name"].decode(): dict(dict(header=e["offset"], offset=e["data"], size=e["usize"], stored_size=e["csize"],
                                           zstd=False, xxh3="0" * 16), **over) for e in entries}
    return json.dumps({"format": "kvq", "format_version": 1, "entries": table}).encode()


def standard(z, entries):
    z.add("manifest.json", manifest(entries))


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


A, B = b"A" * 200, b"B" * 100


def good(zip64=False):
    z = Zip()
    a = z.add("t/a/raw", A, zip64=zip64)
    z.add("manifest.json", manifest([a]), zip64=zip64)
    return z.finish(zip64=zip64)


write("zip-good.kvq", good())
write("zip-good-zip64.kvq", good(zip64=True))

# Member "t/a/raw" stores member "t/b/raw" (its local header and data) inside its own data: the
# overlapping-entries construction of zip bombs (Fifield 2019) and of files two readers see differently.
z = Zip()
inner = Zip()
b = inner.add("t/b/raw", B)
a = z.add("t/a/raw", bytes(inner.buf) + A)
z.members.append(dict(b, offset=a["data"] + b["offset"], data=a["data"] + b["data"]))
z.add("manifest.json", manifest(z.members))  # both listed, both 64-aligned: only the overlap is wrong
write("zip-overlap-members.kvq", z.finish())

# The last member's declared size runs into the central directory.
z = Zip()
z.add("manifest.json", manifest([]))
a = z.add("t/a/raw", A, lh=dict(csize=len(A) + 40, usize=len(A) + 40), cdir=dict(csize=len(A) + 40, usize=len(A) + 40))
write("zip-overlap-cdir.kvq", z.finish())

# Two records point at one local header (their names differ: one disagrees with it).
z = Zip()
a = z.add("t/a/raw", A)
z.members.append(dict(a, name=b"t/b/raw"))
standard(z, [a])
write("zip-shared-header.kvq", z.finish())

# The same name twice, at two local headers.
z = Zip()
a = z.add("t/a/raw", A)
z.add("t/a/raw", B)
standard(z, [a])
write("zip-duplicate-name.kvq", z.finish())

# Local header against the central directory: name, sizes, method, CRC, flags, offset.
for case, lh in [("name", dict(name=b"t/z/raw")), ("size", dict(csize=150, usize=150)), ("method", dict(method=8)),
                 ("crc", dict(crc=0x12345678)), ("flags", dict(flags=0x0800))]:
    z = Zip()
    a = z.add("t/a/raw", A, lh=lh)
    standard(z, [a])
    write("zip-local-%s.kvq" % case, z.finish())
z = Zip()
a = z.add("t/a/raw", A, cdir=dict(offset=8))
standard(z, [a])
write("zip-local-missing.kvq", z.finish())

# A deflated member (a zip bomb's 1 MiB of zeros in 1 KiB): refused before anything is inflated.
zeros = bytes(1 << 20)
co = zlib.compressobj(9, zlib.DEFLATED, -15)
z = Zip()
a = z.add("t/a/raw", zeros, method=8, stored=co.compress(zeros) + co.flush())
standard(z, [a])
write("zip-deflated.kvq", z.finish())

# A second local header of the same name, where the manifest's entry table points; the central
# directory points at the first (a zip tool and kvq would read different bytes).
z = Zip()
first = z.add("t/a/raw", A)
z.members.pop()
second = z.add("t/a/raw", b"C" * len(A))
z.members[-1] = first
z.add("manifest.json", manifest([second]))
write("zip-manifest-header.kvq", z.finish())

# End records: more members than the directory holds; a directory past its end record; a
# record deferring to zip64 fields that are not there.
for case, end in [("count-huge", dict(count=60000)), ("cdir-past-end", dict(cd_size=5000))]:
    z = Zip()
    a = z.add("t/a/raw", A)
    standard(z, [a])
    write("zip-%s.kvq" % case, z.finish(**end))
z = Zip()
a = z.add("t/a/raw", A)
standard(z, [a])
z.members[0]["csize"] = M32  # 0xffffffff with no zip64 extra field
write("zip-zip64-missing.kvq", z.finish())

# The manifest's entry table puts the entry's bytes past the end of the file (the zip itself is sound).
z = Zip()
a = z.add("t/a/raw", A)
z.add("manifest.json", manifest([a], offset=1 << 40, header=0))
write("zip-entry-past-end.kvq", z.finish())
