#!/usr/bin/env python3
"""onnx_torch_fixture.py — makes the fixtures of tests/onnx_torch.sh: models
that PyTorch's torch.onnx.export writes (opset 17), a fixed input and
PyTorch's output, as tests/fixtures/torch_{mlp,cnn}.{onnx,x.npy,y.npy}.

The fixtures are committed (a few KB each), so the test needs no Python;
this script is how they were made. Run it with a Python that has torch and
onnx (the TorchScript exporter, dynamo=False, which needs no network):
    python3 tests/onnx_torch_fixture.py [outdir]
"""
import os
import warnings
import sys

import numpy as np
import torch
from torch import nn


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def cnn():
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    # running statistics that are not the defaults, so the inference form's
    # mean, var, scale and bias all matter
    bn = m[1]
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return m


def main():
    warnings.simplefilter("ignore")  # (the TorchScript exporter, the offline one, warns of itself)
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out, exist_ok=True)
    for name, make, shape in (("mlp", mlp, (5, 8)), ("cnn", cnn, (2, 1, 8, 8))):
        torch.manual_seed(0)
        model = make().eval()
        x = torch.randn(shape)
        with torch.no_grad():
            y = model(x)
        path = os.path.join(out, f"torch_{name}.onnx")
        # PRESERVE keeps BatchNormalization a node (EVAL folds it into the
        # Conv); the MLP's batch is a symbolic dim
        torch.onnx.export(model, (x,), path, opset_version=17, input_names=["x"], output_names=["y"],
                          dynamo=False, training=torch.onnx.TrainingMode.PRESERVE,
                          dynamic_axes={"x": {0: "batch"}} if name == "mlp" else None)
        np.save(os.path.join(out, f"torch_{name}.x.npy"), x.numpy())
        np.save(os.path.join(out, f"torch_{name}.y.npy"), y.numpy())
        print(f"{path}: {os.path.getsize(path)} bytes")
    # a dilated MaxPool: valid ONNX that import_onnx refuses, naming the value
    import onnx
    from onnx import helper as oh, TensorProto as otp
    g = oh.make_graph([oh.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])], "g",
                      [oh.make_tensor_value_info("x", otp.FLOAT, [1, 1, 6, 6])],
                      [oh.make_tensor_value_info("y", otp.FLOAT, [1, 1, 4, 4])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], producer_name="onnx_torch_fixture")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, os.path.join(out, "maxpool_dilated.onnx"))


if __name__ == "__main__":
    main()
