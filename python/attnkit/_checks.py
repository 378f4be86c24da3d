"""Argument checks shared by the Python wrappers: a short TypeError or ValueError naming the
argument, before anything reaches the compiled module (whose own conversion errors would print
the repr of every argument)."""
import operator

import numpy as _np

def seed(value, name="seed", bits=64):
    """``value`` as an int in [0, 2**bits): TypeError unless an integer, ValueError if out of range."""
    if isinstance(value, (bool, _np.bool_)):
        raise TypeError(f"{name}: expected a non-negative integer, got a bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected a non-negative integer, got {type(value).__name__}") from None
    if not 0 <= v < (1 << bits):
        raise ValueError(f"{name}: must be an integer in [0, 2**{bits} - 1], got {v}")
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
        raise ValueError(f"{name}: must be >= {minimum}, got {v}")
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
