"""Run exported artifacts in a process that cannot import tograph (used by the tests).

    python run_artifacts.py CASES.pt RESULTS.pt

CASES.pt: {case: {"kind": "pt2"|"onnx", "path": ..., "inputs": [tuple of tensors, ...]}}.
Writes {case: [outputs as a list of tensors, ...]} and the names of the modules loaded.
Importing ``transpiler`` or ``runtime`` raises: the artifacts must stand alone.
"""
import importlib.abc
import sys


class _NoTograph(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("transpiler", "runtime"):
            raise ImportError(f"{name}: a deployed artifact must not need tograph")
        return None


sys.meta_path.insert(0, _NoTograph())
sys.path = [p for p in sys.path if p not in ("", ".")]

import torch  # noqa: E402


def _as_list(out):
    return [torch.as_tensor(v) for v in (out if isinstance(out, (tuple, list)) else (out,))]


def main(cases_path, results_path):
    cases = torch.load(cases_path)
    results = {}
    for name, case in cases.items():
        if case["kind"] == "pt2":
            module = torch.export.load(case["path"]).module()
            results[name] = [_as_list(module(*args)) for args in case["inputs"]]
        else:
            import onnxruntime
            session = onnxruntime.InferenceSession(case["path"])
            names = [i.name for i in session.get_inputs()]
            results[name] = [_as_list(session.run(None, {n: a.numpy() for n, a in
                                                         zip(names, args)}))
                             for args in case["inputs"]]
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("transpiler", "runtime"))
    torch.save({"results": results, "tograph_modules": loaded}, results_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
