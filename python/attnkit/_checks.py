"""Argument checks shared by the Python wrappers: a short TypeError or ValueError (as
attnkit.Error) naming the argument, before anything reaches the compiled module (whose own
conversion errors would print the repr of every argument)."""
import operator

import numpy as _np

from ._attnkit import Error


def seed(value, name="seed", bits=64):
    """``value`` as an int in [0, 2**bits): TypeError unless an integer, ValueError if out of range."""
    if isinstance(value, (bool, _np.bool_)):
        raise TypeError(f"{name}: expected a non-negative integer, got a bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected a non-negative integer, got {type(value).__name__}") from None
    if not 0 <= v < (1 << bits):
        raise Error(f"{name}: must be an integer in [0, 2**{bits} - 1], got {v}")
    return v


def integer(value, name, minimum=None):
    """``value`` as an int (TypeError otherwise), at least ``minimum`` if given (ValueError)."""
    if isinstance(value, (bool, _np.bool_)):
        raise TypeError(f"{name}: expected an integer, got a bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    if minimum is not None and v < minimum:
        raise Error(f"{name}: must be >= {minimum}, got {v}")
    return v


def float_array(x, name):
    """``x`` as a numpy array of a floating dtype (float16/32/64 are accepted and converted to
    float32 later); TypeError for None, integers, booleans, strings and objects."""
    if x is None:
        raise TypeError(f"{name}: expected a floating-point array, got None")
    try:
        a = _np.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: cannot be read as an array ({str(e).splitlines()[0]})") from None
    if a.dtype.kind != "f":
        raise TypeError(f"{name}: expected a floating-point array (float32; float64 and float16 are "
                        f"converted), got dtype {a.dtype}")
    return a


def number(value, name):
    """``value`` as a float: TypeError unless a real number (None, strings and bools refused)."""
    if value is None or isinstance(value, (bool, _np.bool_, str, bytes)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}") from None


def integer_array(x, name, dtype):
    """``x`` as a numpy array of the integer ``dtype``: TypeError unless it holds integers
    (booleans and floats refused, never truncated), ValueError for an entry outside ``dtype``'s
    range (never wrapped)."""
    a = _np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got dtype {a.dtype}")
    info = _np.iinfo(dtype)
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    if lo < info.min or hi > info.max:
        raise Error(f"{name}: entries must be in [{info.min}, {info.max}] "
                         f"({_np.dtype(dtype)}), got {lo if lo < info.min else hi}")
    return a.astype(dtype, copy=False)


def cu_seqlens(cu, name):
    """Optional cu_seqlens [B+1] as int32 (None stays None: only None means absent)."""
    if cu is None:
        return None
    a = integer_array(cu, name, _np.int32)
    if a.ndim != 1:
        raise Error(f"{name}: expected 1 dimension, got {a.ndim}")
    if a.size < 2:
        raise Error(f"{name}: needs at least 2 entries (B+1), got {a.size}")
    return a


def window(value, name="window"):
    """(left, right) of a local-attention window, -1 = unbounded: ValueError unless a pair,
    TypeError for non-integer entries, ValueError outside [-1, 2**31-1] (the kernels' int32)."""
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    if len(pair) != 2:
        raise Error(f"{name}: expected a pair (left, right), got {value!r}")
    left, right = (integer(v, name) for v in pair)
    if not (-1 <= left < 2 ** 31 and -1 <= right < 2 ** 31):
        raise Error(f"{name}: entries must be in [-1, 2**31-1], got ({left}, {right})")
    return left, right
