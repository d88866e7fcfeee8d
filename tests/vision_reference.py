"""Straightforward reference decoders for the rknnlite.vision tests: every output
dequantized up front, one Python loop iteration per candidate, per-class greedy NMS.
Written from the layouts' published formulas, independently of rknnlite.vision."""

from __future__ import annotations

import math

import numpy as np


def deq(y, q):
    """Dequantize an int output ((scale, zp) pair) or return a float32 copy."""
    y = np.asarray(y)
    if q is None:
        return y.astype(np.float32)
    scale, zp = q
    return ((y.astype(np.float32) - np.float32(zp)) * np.float32(scale)).astype(np.float32)


def quantize(y, scale, zp):
    return np.clip(np.rint(np.asarray(y, np.float64) / scale) + zp, -128, 127).astype(np.int8)


def sig(x):
    return 1.0 / (1.0 + math.exp(-x))


def iou(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0) * max(h, 0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def nms(cands, thr, max_det=300, class_aware=True):
    """cands: list of (box, score, class, extra) -> kept list, best first."""
    cands = sorted(cands, key=lambda c: -c[1])
    kept = []
    for c in cands:
        if len(kept) >= max_det:
            break
        if all(iou(c[0], k[0]) <= thr for k in kept if not class_aware or k[2] == c[2]):
            kept.append(c)
    return kept


def yolov5(outs, anchors, size, conf, iou_thr, qs=None):
    qs = qs or [None] * len(outs)
    cands = []
    for i, (y, q) in enumerate(zip(outs, qs)):
        y = deq(y, q)[0]
        na = len(anchors[i])
        c, h, w = y.shape
        y = y.reshape(na, c // na, h, w)
        stride = (size[1] / w, size[0] / h)
        for a in range(na):
            for r in range(h):
                for col in range(w):
                    v = y[a, :, r, col]
                    if v[4] < conf:
                        continue
                    k = int(np.argmax(v[5:]))
                    score = v[4] * v[5 + k]
                    if score < conf:
                        continue
                    cx = (v[0] * 2 - 0.5 + col) * stride[0]
                    cy = (v[1] * 2 - 0.5 + r) * stride[1]
                    bw = (v[2] * 2) ** 2 * anchors[i][a][0]
                    bh = (v[3] * 2) ** 2 * anchors[i][a][1]
                    cands.append(((cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2), score, k, None))
    return nms(cands, iou_thr)


def yolox(outs, size, conf, iou_thr, qs=None):
    qs = qs or [None] * len(outs)
    cands = []
    for y, q in zip(outs, qs):
        y = deq(y, q)[0]
        c, h, w = y.shape
        sx, sy = size[1] / w, size[0] / h
        for r in range(h):
            for col in range(w):
                v = y[:, r, col]
                k = int(np.argmax(v[5:]))
                score = v[4] * v[5 + k]
                if score < conf:
                    continue
                cx, cy = (v[0] + col) * sx, (v[1] + r) * sy
                bw, bh = math.exp(v[2]) * sx, math.exp(v[3]) * sy
                cands.append(((cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2), score, k, None))
    return nms(cands, iou_thr)


def yolov8_concat(y, nc, conf, iou_thr, q=None, extra=0):
    y = deq(y, q)[0]
    if y.shape[0] != 4 + nc + extra:
        y = y.T
    cands = []
    for n in range(y.shape[1]):
        v = y[:, n]
        k = int(np.argmax(v[4:4 + nc]))
        if v[4 + k] < conf:
            continue
        cx, cy, bw, bh = v[:4]
        cands.append(((cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2), v[4 + k], k, v[4 + nc:].copy()))
    return nms(cands, iou_thr)


def dfl(bins):
    e = [math.exp(b - max(bins)) for b in bins]
    return sum(i * x for i, x in enumerate(e)) / sum(e)


def yolov8_split(outs, nc, size, conf, iou_thr, qs=None, per=3, coeff=False):
    qs = qs or [None] * len(outs)
    cands = []
    for b in range(3):
        reg = deq(outs[b * per], qs[b * per])[0]
        cls = deq(outs[b * per + 1], qs[b * per + 1])[0]
        co = deq(outs[b * per + per - 1], qs[b * per + per - 1])[0] if coeff else None
        r4, h, w = reg.shape
        bins = r4 // 4
        sx, sy = size[1] / w, size[0] / h
        for r in range(h):
            for col in range(w):
                k = int(np.argmax(cls[:, r, col]))
                if cls[k, r, col] < conf:
                    continue
                d = [dfl(reg[j * bins:(j + 1) * bins, r, col]) for j in range(4)]
                box = ((col + 0.5 - d[0]) * sx, (r + 0.5 - d[1]) * sy, (col + 0.5 + d[2]) * sx, (r + 0.5 + d[3]) * sy)
                cands.append((box, cls[k, r, col], k, None if co is None else co[:, r, col].copy()))
    return nms(cands, iou_thr)


def seg_masks(kept, proto, size, q=None):
    """Per kept detection: (mask, margin): margin is how far each pixel is from flipping
    (|coefficients . prototype| and distance to the box edges in pixels), so a test can
    allow float32 rounding only where the decision is a hair's breadth."""
    proto = deq(proto, q)[0]
    m, ph, pw = proto.shape
    out = []
    for box, _, _, coef in kept:
        mask = np.zeros((ph, pw), bool)
        margin = np.zeros((ph, pw))
        for r in range(ph):
            for c in range(pw):
                x, y = c * size[1] / pw, r * size[0] / ph  # the cell's index, scaled to the input
                dot = float(np.dot(coef.astype(np.float64), proto[:, r, c].astype(np.float64)))
                mask[r, c] = box[0] <= x < box[2] and box[1] <= y < box[3] and dot > 0
                margin[r, c] = min(abs(dot), abs(x - box[0]), abs(x - box[2]), abs(y - box[1]), abs(y - box[3]))
        out.append((mask, margin))
    return out


def retinaface(loc, conf, landm, size, conf_thr, iou_thr, qs=(None, None, None)):
    loc, conf, landm = (deq(y, q)[0] for y, q in zip((loc, conf, landm), qs))
    priors = []
    for sizes, step in zip(((16, 32), (64, 128), (256, 512)), (8, 16, 32)):
        for i in range(math.ceil(size[0] / step)):
            for j in range(math.ceil(size[1] / step)):
                for s in sizes:
                    priors.append(((j + 0.5) * step, (i + 0.5) * step, s, s))
    cands = []
    for n, (px, py, pw, ph) in enumerate(priors):
        if conf[n, 1] < conf_thr:
            continue
        cx = px + loc[n, 0] * 0.1 * pw
        cy = py + loc[n, 1] * 0.1 * ph
        w, h = pw * math.exp(loc[n, 2] * 0.2), ph * math.exp(loc[n, 3] * 0.2)
        lm = [(px + landm[n, 2 * k] * 0.1 * pw, py + landm[n, 2 * k + 1] * 0.1 * ph) for k in range(5)]
        cands.append(((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), conf[n, 1], 0, lm))
    return nms(cands, iou_thr)


def scrfd(outs, size, conf_thr, iou_thr, strides=(8, 16, 32), anchors=2, qs=None):
    qs = qs or [None] * len(outs)
    k = len(strides)
    cands = []
    for i, s in enumerate(strides):
        sc, bb, kp = (deq(outs[i + j * k], qs[i + j * k]).reshape(-1, wd) for j, wd in enumerate((1, 4, 10)))
        fw = math.ceil(size[1] / s)
        for n in range(sc.shape[0]):
            if sc[n, 0] < conf_thr:
                continue
            cell = n // anchors
            px, py = (cell % fw) * s, (cell // fw) * s
            d = bb[n] * s
            lm = [(px + kp[n, 2 * t] * s, py + kp[n, 2 * t + 1] * s) for t in range(5)]
            cands.append(((px - d[0], py - d[1], px + d[2], py + d[3]), sc[n, 0], 0, lm))
    return nms(cands, iou_thr)
