"""What a camera application does after the tensor: letterbox, decoders, NMS, drawing.

numpy only (Pillow, if installed, only writes label text).  Every decoder takes the float
outputs of ``Context.run`` or its raw quantized ones (``want_float=False``) with their
scale and zero point (``quant=ctx.outputs``), and returns :class:`Detections`.
"""

from .anchors import YOLOV5_ANCHORS, YOLOV7_ANCHORS, YOLOX, YOLOv5, YOLOv7
from .decoder import Decoder
from .dense import segmentation_mask, top_k
from .dfl import YOLO11, YOLOv8, YOLOv8Pose, YOLOv8Seg, dfl_distances
from .draw import PALETTE, draw_detections
from .faces import SCRFD, RetinaFace, retinaface_priors
from .letterbox import GREY, LetterboxTransform, letterbox
from .nms import box_iou, nms
from .result import Detections
from .stages import DetectionStages, image_input

__all__ = ["letterbox", "LetterboxTransform", "GREY", "nms", "box_iou", "Detections", "Decoder", "YOLOv5",
           "YOLOv7", "YOLOX", "YOLOV5_ANCHORS", "YOLOV7_ANCHORS", "YOLOv8", "YOLO11", "YOLOv8Seg", "YOLOv8Pose",
           "dfl_distances", "RetinaFace", "SCRFD", "retinaface_priors", "top_k", "segmentation_mask",
           "draw_detections", "PALETTE", "DetectionStages", "image_input"]
