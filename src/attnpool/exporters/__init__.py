"""Export a trained attnpool model to one ONNX graph (encoder, pooler and head), checked against PyTorch."""

from attnpool.exporters.models import ExportError, OnnxWrapper, load_for_export, resolve_model_dir
from attnpool.exporters.onnx import OnnxExport, export_onnx
from attnpool.exporters.verify import ATOL, VerificationError, verify_onnx

__all__ = ["ATOL", "ExportError", "OnnxExport", "OnnxWrapper", "VerificationError", "export_onnx", "load_for_export",
           "resolve_model_dir", "verify_onnx"]
