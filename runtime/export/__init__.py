"""Deploying graphs without Python source: ``torch.export`` programs (.pt2) and ONNX.

    from runtime.export import to_torch_export, to_onnx
    ep = to_torch_export(f, (x,))              # torch.cond / torch.while_loop inside
    torch.export.save(ep, "f.pt2")
    to_onnx(f, "f.onnx", (x,))                 # If / Loop nodes inside (extra: onnx)
"""
from .onnx import to_onnx
from .errors import ExportError, ExportWarning
from .torch_export import dynamic_dims, to_torch_export

__all__ = ["ExportError", "ExportWarning", "dynamic_dims", "to_onnx", "to_torch_export"]
