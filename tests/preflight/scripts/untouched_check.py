"""Imported by the scripts beside it, run under `traindoc preflight`: which names of torch hold
a function of traindoc's right now (one JSON line per call, appended to $UNTOUCHED_OUT)."""

import json
import os

import torch
import torch.nn.functional as F

SPACES = {"torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor,
          "torch.nn.utils": torch.nn.utils, "torch.nn.init": torch.nn.init, "torch.autograd": torch.autograd,
          "torch.serialization": torch.serialization, "torch.random": torch.random,
          "torch.distributed": torch.distributed}


def record(tag: str) -> None:
    package = os.path.dirname(__import__("traindoc").__file__)
    found = []
    for space, ns in SPACES.items():
        for name, value in list(vars(ns).items()):
            if type(value) in (classmethod, staticmethod):
                value = value.__func__
            code = getattr(value, "__code__", None) if callable(value) else None
            if isinstance(getattr(code, "co_filename", None), str) and code.co_filename.startswith(package):
                found.append([space, name])
    with open(os.environ["UNTOUCHED_OUT"], "a") as out:
        out.write(json.dumps({"tag": tag, "ours": sorted(found)}) + "\n")
