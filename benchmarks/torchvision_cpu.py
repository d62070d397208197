"""Import torchvision's models on the CPU torch.

The registry's torchvision 0.28.0 (the release for torch 2.13) is a CUDA build: its C
extension does not load against the CPU torch, and ``import torchvision`` then fails in
``torchvision/_meta_registrations.py`` registering fake kernels for ``torchvision::nms`` and
``torchvision::qnms``, whose schemas only the C extension defines. Defining those two schemas
first lets the import finish; the models used here (resnet18, mobilenet_v3_small, googlenet,
vit) call none of torchvision's C ops.
"""
import torch

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library = None


def import_torchvision():
    """``torchvision``, importable on CPU torch (``None`` when it is not installed)."""
    global _library
    try:
        import torchvision  # noqa: F401
        return torchvision
    except ImportError:
        return None
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
    import sys
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    if _library is None:
        _library = torch.library.Library("torchvision", "FRAGMENT")
        for schema in _SCHEMAS.values():
            try:
                _library.define(schema)
            except RuntimeError:
                pass  # already defined (by the real extension or an earlier call)
    import torchvision
    return torchvision
