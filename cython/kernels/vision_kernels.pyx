# cython: language_level=3
"""Greedy non-maximum suppression for ``rknnlite.vision``, run without the GIL.

Boxes arrive sorted best first.  Each box not yet suppressed is kept, and suppresses every
later box of its class whose IoU with it is above the threshold (``inter > iou * union``,
in float32, without a division).  The work is one pass per kept box over the later boxes:
about ``candidates x kept`` IoU tests, a few hundred thousand at most for a camera frame.
"""

from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport calloc, free


def greedy_nms(const float[:, ::1] boxes, const int64_t[::1] classes, float iou, Py_ssize_t max_det,
               int64_t[::1] keep):
    """Greedy NMS of ``boxes`` (N, 4) x1, y1, x2, y2, sorted best score first; boxes
    suppress only boxes of their own ``classes`` entry (all zeros: across every box).
    Writes the kept positions, in order, to ``keep`` (N entries of room) and returns how
    many (at most ``max_det``)."""
    cdef Py_ssize_t n = boxes.shape[0], i, j, count = 0
    cdef float ax1, ay1, ax2, ay2, area_a, w, h, inter, bx1, by1, bx2, by2
    cdef int64_t ca
    cdef uint8_t* gone
    if classes.shape[0] != n or keep.shape[0] < n or boxes.shape[1] != 4:
        raise ValueError("greedy_nms: boxes (N, 4), classes (N,) and keep (>= N,) do not match")
    if n == 0 or max_det <= 0:
        return 0
    gone = <uint8_t*> calloc(n, 1)
    if gone == NULL:
        raise MemoryError()
    with nogil:
        for i in range(n):
            if gone[i]:
                continue
            keep[count] = i
            count += 1
            if count >= max_det:
                break
            ax1 = boxes[i, 0]
            ay1 = boxes[i, 1]
            ax2 = boxes[i, 2]
            ay2 = boxes[i, 3]
            area_a = (ax2 - ax1 if ax2 > ax1 else 0.0) * (ay2 - ay1 if ay2 > ay1 else 0.0)
            ca = classes[i]
            for j in range(i + 1, n):
                if gone[j] or classes[j] != ca:
                    continue
                bx1 = boxes[j, 0]
                by1 = boxes[j, 1]
                bx2 = boxes[j, 2]
                by2 = boxes[j, 3]
                w = (ax2 if ax2 < bx2 else bx2) - (ax1 if ax1 > bx1 else bx1)
                h = (ay2 if ay2 < by2 else by2) - (ay1 if ay1 > by1 else by1)
                if w <= 0 or h <= 0:
                    continue
                inter = w * h
                if inter > iou * (area_a + (bx2 - bx1 if bx2 > bx1 else 0.0) * (by2 - by1 if by2 > by1 else 0.0)
                                  - inter):
                    gone[j] = 1
    free(gone)
    return count
