"""First-principles references for the eval tests: Mann-Whitney AUC with
ties, McClish-standardised partial AUC (the ROC polyline clipped at max_fpr),
precision/recall/F1 at a threshold, and a small PNG decoder (zlib)."""
import struct
import zlib


def auc_pairs(scores, labels):
    pos = [s for s, l in zip(scores, labels) if l]
    neg = [s for s, l in zip(scores, labels) if not l]
    total = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return total / (len(pos) * len(neg))


def roc_points(scores, labels):
    P = sum(labels)
    N = len(labels) - P
    pts = [(0.0, 0.0)]
    for t in sorted(set(scores), reverse=True):
        tp = sum(1 for s, l in zip(scores, labels) if s >= t and l)
        fp = sum(1 for s, l in zip(scores, labels) if s >= t and not l)
        pts.append((fp / N, tp / P))
    return pts


def pauc_mcclish(scores, labels, max_fpr):
    if max_fpr >= 1:
        return auc_pairs(scores, labels)
    pts = roc_points(scores, labels)
    area = 0.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 >= max_fpr:
            break
        if x1 > max_fpr:  # cut the segment where it crosses max_fpr
            y1 = y0 + (y1 - y0) * (max_fpr - x0) / (x1 - x0)
            x1 = max_fpr
        area += (x1 - x0) * (y0 + y1) / 2
    lo, hi = max_fpr ** 2 / 2, max_fpr
    return 0.5 * (1 + (area - lo) / (hi - lo))


def prf(scores, labels, thr):
    tp = sum(1 for s, l in zip(scores, labels) if s > thr and l)
    fp = sum(1 for s, l in zip(scores, labels) if s > thr and not l)
    fn = sum(1 for s, l in zip(scores, labels) if s <= thr and l)
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def read_png(path):
    """Returns (width, height, rows) with rows[y][x] = (r, g, b), for 8-bit
    RGB or RGBA non-interlaced PNGs (what cairo writes)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError("unsupported PNG")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pr) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows
