"""bench/resnet20_common.py — what the ResNet-20 peers share
(resnet20_step.py, resnet20_infer.py): the network's shapes, its basic
blocks, and its parameters in the order the tfe sides make them (He
initialisation from the given NumPy generator). Imported after the
framework is loaded (benchlib: a missing framework is reported before
anything else is imported)."""
import numpy as np

BATCH, EPS = 32, 1e-5
WIDTHS = (16, 32, 64)


def blocks():
    """(in channels, out channels, stride) of the 9 basic blocks in order."""
    for s, cout in enumerate(WIDTHS):
        for b in range(3):
            cin = cout if b > 0 or s == 0 else WIDTHS[s - 1]
            yield cin, cout, (2 if b == 0 and s > 0 else 1)


def make_params(rng, stats=False):
    """The parameters in order: per conv (HWIO kernel, gamma, beta, and with
    stats a trained network's mean and variance: random means, variances in
    [0.5, 1.5)), then the dense layer (64 x 10 kernel, bias)."""
    def he(shape, fan_in):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))

    params = []

    def conv_bn(cin, cout):
        params.extend([he((3, 3, cin, cout), 9 * cin), np.ones(cout, np.float32), np.zeros(cout, np.float32)])
        if stats:
            params.extend([rng.standard_normal(cout, dtype=np.float32) * np.float32(0.1),
                           rng.random(cout, dtype=np.float32) + np.float32(0.5)])

    conv_bn(3, 16)
    for cin, cout, _ in blocks():
        conv_bn(cin, cout)
        conv_bn(cout, cout)
    params.extend([he((64, 10), 64), np.zeros(10, np.float32)])
    return params
