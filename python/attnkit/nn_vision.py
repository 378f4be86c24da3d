"""NCHW image layers of attnkit.nn with explicit forward and backward (re-exported by attnkit.nn).

Arrays are float32 ``[N, C, H, W]``; conv weights ``[O, C, KH, KW]`` as PyTorch's. Backward
functions return fresh gradients (the C++ API adds into parameter gradients). Max-pooling
forwards return the saved argmax indices their backwards need. Errors raise attnkit.Error.
"""
import numpy as _np

from . import _attnkit as _C
from . import _checks

__all__ = [
    "conv2d", "conv2d_backward", "max_pool2d", "max_pool2d_backward", "avg_pool2d",
    "avg_pool2d_backward", "global_avg_pool", "global_avg_pool_backward", "global_max_pool",
    "global_max_pool_backward", "batch_norm2d", "batch_norm2d_backward", "se_block",
    "se_block_backward", "cbam", "cbam_backward",
]


def _x_shape(x_shape, d_y):
    """x_shape (N, C, H, W) as ints >= 0, whose N, C must be d_y's (the gradient's own)."""
    if not hasattr(x_shape, "__len__"):
        raise TypeError(f"x_shape: expected (N, C, H, W), got {type(x_shape).__name__}")
    shape = tuple(_checks.integer(s, "x_shape", 0) for s in x_shape)
    if len(shape) != 4:
        raise _C.Error(f"x_shape: expected (N, C, H, W), got {shape}")
    if _np.ndim(d_y) >= 2 and tuple(_np.shape(d_y)[:2]) != shape[:2]:
        raise _C.Error(f"d_y: N, C = {tuple(_np.shape(d_y)[:2])} != x_shape's {shape[:2]}")
    return shape


def _conv_args(stride, padding):
    """(stride, padding) of conv2d after checking them (the compiled code checks that w's kernel
    fits in the padded input)."""
    return _checks.integer(stride, "stride", 1), _checks.integer(padding, "padding", 0)


def _pool_args(kernel, stride, padding):
    """(kernel, stride, padding) of a pool: stride None means the kernel (passed as 0)."""
    kernel = _checks.integer(kernel, "kernel", 1)
    stride = 0 if stride is None else _checks.integer(stride, "stride", 1)
    padding = _checks.integer(padding, "padding", 0)
    return kernel, stride, padding


def _check_plane(fn, x):
    """ValueError for an empty H×W plane (nothing to pool)."""
    if _np.ndim(x) == 4 and _np.shape(x)[2] * _np.shape(x)[3] == 0:
        raise _C.Error(f"{fn}: x: empty plane H×W = {_np.shape(x)[2]}×{_np.shape(x)[3]}")


def conv2d(x, w, b=None, *, stride=1, padding=0, reference=False):
    """y[N, O, OH, OW] = torch.nn.functional.conv2d(x, w, b, stride, padding)."""
    stride, padding = _conv_args(stride, padding)
    return _C.nn_conv2d_forward(x, w, b, stride, padding, bool(reference))


def conv2d_backward(d_y, x, w, *, has_bias=True, stride=1, padding=0, reference=False):
    """Gradients of conv2d: (d_x, d_w, d_b or None)."""
    stride, padding = _conv_args(stride, padding)
    return _C.nn_conv2d_backward(d_y, x, w, bool(has_bias), stride, padding, bool(reference))


def max_pool2d(x, kernel, stride=None, padding=0):
    """(y, argmax) of torch.nn.functional.max_pool2d(x, kernel, stride, padding)."""
    args = _pool_args(kernel, stride, padding)
    return _C.nn_max_pool2d_forward(x, *args)


def max_pool2d_backward(d_y, argmax, x_shape):
    """d_x [x_shape] of max_pool2d from the forward's argmax."""
    x_shape = _x_shape(x_shape, d_y)
    return _C.nn_max_pool2d_backward(d_y, argmax, x_shape[2], x_shape[3])


def avg_pool2d(x, kernel, stride=None, padding=0, count_include_pad=True):
    """torch.nn.functional.avg_pool2d(x, kernel, stride, padding, count_include_pad=...)."""
    args = _pool_args(kernel, stride, padding)
    return _C.nn_avg_pool2d_forward(x, *args, bool(count_include_pad))


def avg_pool2d_backward(d_y, x_shape, kernel, stride=None, padding=0, count_include_pad=True):
    """d_x [x_shape] of avg_pool2d."""
    x_shape = _x_shape(x_shape, d_y)
    args = _pool_args(kernel, stride, padding)
    return _C.nn_avg_pool2d_backward(d_y, x_shape[2], x_shape[3], *args, bool(count_include_pad))


def global_avg_pool(x):
    """y[N, C] = x.mean((2, 3))."""
    _check_plane("global_avg_pool", x)
    return _C.nn_global_pool_forward(x, "avg")[0]


def global_avg_pool_backward(d_y, x_shape):
    """d_x [x_shape] of global_avg_pool."""
    x_shape = _x_shape(x_shape, d_y)
    return _C.nn_global_pool_backward(d_y, _np.zeros(0, _np.int32), x_shape[2], x_shape[3], "avg")


def global_max_pool(x):
    """(y[N, C] = x.amax((2, 3)), argmax int32 [N·C])."""
    _check_plane("global_max_pool", x)
    return _C.nn_global_pool_forward(x, "max")


def global_max_pool_backward(d_y, argmax, x_shape):
    """d_x [x_shape] of global_max_pool (gradient to the first maximum)."""
    x_shape = _x_shape(x_shape, d_y)
    return _C.nn_global_pool_backward(d_y, argmax, x_shape[2], x_shape[3], "max")


def batch_norm2d(x, w=None, b=None, running_mean=None, running_var=None, *, training=True,
                 momentum=0.1, eps=1e-5, relu=False):
    """torch.nn.functional.batch_norm over NCHW (then relu if relu): (y, mean, rstd, running_mean,
    running_var), the running statistics returned updated (training) or unchanged (eval); inputs
    are not modified."""
    return _C.nn_batch_norm2d_forward(x, w, b, running_mean, running_var, bool(training),
                                      float(momentum), float(eps), bool(relu))


def batch_norm2d_backward(d_y, x, w, mean, rstd, *, b=None, has_bias=True, training=True,
                          relu=False):
    """Gradients of batch_norm2d: (d_x, d_w or None, d_b or None). With relu, d_y is the gradient
    of the ReLU's output and b must be the forward's bias (the mask is recomputed from x)."""
    if relu and has_bias and b is None:  # b = None would recompute the mask with a zero bias
        raise _C.Error("b: required when relu=True and has_bias=True (the forward's bias)")
    return _C.nn_batch_norm2d_backward(d_y, x, w, b, mean, rstd, bool(has_bias), bool(training),
                                       bool(relu))


def se_block(x, w1, b1, w2, b2):
    """Squeeze-and-Excitation: x * sigmoid(relu(mean_hw(x) @ w1.T + b1) @ w2.T + b2)."""
    return _C.nn_se_block(x, w1, b1, w2, b2, None)[0]


def se_block_backward(d_y, x, w1, b1, w2, b2):
    """Gradients of se_block: dict d_x, d_w1, d_w2 (and d_b1, d_b2 when the biases are given)."""
    return _C.nn_se_block(x, w1, b1, w2, b2, d_y)[1]


def cbam(x, w1, b1, w2, b2, ws, bs):
    """CBAM: shared-MLP channel gate on [avg; max] descriptors, then a k×k spatial gate on
    [mean_c; max_c] (ws [1, 2, k, k]); see include/attnkit/nn/cbam.hpp."""
    return _C.nn_cbam(x, w1, b1, w2, b2, ws, bs, None)[0]


def cbam_backward(d_y, x, w1, b1, w2, b2, ws, bs):
    """Gradients of cbam: dict d_x, d_w1, d_w2, d_ws (and d_b1, d_b2, d_bs for given biases)."""
    return _C.nn_cbam(x, w1, b1, w2, b2, ws, bs, d_y)[1]
