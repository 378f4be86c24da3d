"""pytest set-up: make tests/python importable and bound torch's threads."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

torch.set_num_threads(1)
