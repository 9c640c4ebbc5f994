"""bench/bn_step.py — peer of bn_step.tfe: one batch-norm forward and backward
in training mode at ResNet-20's three activation shapes (batch 32, NCHW:
PyTorch's layout), F.batch_norm(training=True), the gradient of
sum(y * dy) w.r.t. x, weight and bias. [--shape H C] --lib torch"""
import sys

from benchlib import measure, setup

shapes = ((32, 16), (16, 32), (8, 64))
if sys.argv[1:2] == ["--shape"]:
    shapes = ((int(sys.argv[2]), int(sys.argv[3])),)
    del sys.argv[1:4]

ops, m = setup()
if ops.lib != "torch":
    raise SystemExit("bn_step.py: PyTorch only")
F = m.nn.functional
m.manual_seed(0)
data = []
for h, c in shapes:
    data.append((m.randn(32, c, h, h, requires_grad=True), m.randn(c, requires_grad=True),
                 m.randn(c, requires_grad=True), m.randn(32, c, h, h)))


def run(n):
    for _ in range(n):
        for x, g, b, dy in data:
            y = F.batch_norm(x, None, None, g, b, training=True, eps=1e-5)
            m.autograd.grad((y * dy).sum(), (x, g, b))


measure(run)
