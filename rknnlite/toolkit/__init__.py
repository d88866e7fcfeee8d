"""Host-side converter (ONNX -> portable .rknn); imports onnx lazily."""
