"""The E8 rate-SNR curve of libconv's calibration table (libconv/codec/hyperquant/hqcal_table.c),
read for the allocation diagnostics (alloc_predgain.py, alloc_rowsplit.py): snr(r) in dB at rate r
(linear between the table's points, extrapolated past its ends) and SIDE, the non-code bits per
weight (~10/128 + 0.002). Run from the repository root."""
import re

SIDE = 10 / 128 + 0.002


def _points():
    src = open('libconv/codec/hyperquant/hqcal_table.c').read()
    blk = src[src.index('pts_e8'):]
    blk = blk[:blk.index('};')]
    return [(float(m.group(2)), float(m.group(3))) for m in re.finditer(r'\{([0-9.]+)f, ([0-9.]+)f, ([0-9.]+)f\}', blk)]


PTS = _points()


def snr(r):
    i = 0
    while i < len(PTS) - 2 and r > PTS[i + 1][0]:
        i += 1
    a, b = PTS[i], PTS[i + 1]
    return a[1] + (b[1] - a[1]) * (r - a[0]) / (b[0] - a[0])
