"""Paths shared by the tests that run the `attnkit` CLI: the binary built beside the Python module,
and the system data sets that some of them train on (tests skip when these are not installed)."""
import os

import attnkit

CLI = os.path.join(os.path.dirname(attnkit.__file__), "..", "..", "attnkit")
FORTUNES = "/usr/share/games/fortunes"
FASHION = "/usr/share/datasets/fashion-mnist"
